/* Streams, events and stream capture. Each stream is a queue served by its own worker thread, in order;
 * events complete when the worker reaches them; the legacy default stream waits for blocking streams and
 * they wait for it (through hidden events), as on hardware. One lock and one condition variable cover all
 * queues. A capturing stream turns work into graph nodes instead (graph.c) under a lock of its own. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fake.h"

#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_EVENT_INTERPROCESS 0x4
#define EVENT_PAGE 4096
#define CU_EVENT_RECORD_EXTERNAL 0x1 /* during capture: an event record node instead of a capture-internal mark */
#define CU_EVENT_WAIT_EXTERNAL 0x1   /* during capture: an event wait node */
#define CU_STREAM_LEGACY ((void *)0x1)
#define CU_STREAM_PER_THREAD ((void *)0x2)

enum WorkKind { W_RUN, W_WAIT, W_RECORD };
typedef struct Work {
    int kind;
    WorkFn fn;
    void *arg;
    Event *event;
    uint64_t gen;
    uint64_t seq; /* when it was queued, in the order of every queue: compared with g_started */
    struct Work *next;
} Work;

static pthread_mutex_t g_q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_q_cv = PTHREAD_COND_INITIALIZER;
static Stream **g_streams;
static int g_nstreams, g_capstreams;

/* IRONACCEL_FAKE_CUDA_START_ON_WAIT=1: queued work starts only once the host has waited for or queried
 * something since it was queued (or its stream is being destroyed): the GPU is arbitrarily slow until the
 * host looks, a schedule a real GPU may also take. A backend that reuses memory before waiting for the work
 * that still reads it is then caught every time, not only when that work happens to be slow. */
static int g_start_on_wait = -1; /* -1: not read yet */
static uint64_t g_queued, g_started; /* work with seq <= g_started may start */

static int may_start_locked(const Stream *s, const Work *w) {
    return !g_start_on_wait || s->closing || w->seq <= g_started;
}

/* The host waits for or queries stream work: everything queued so far may start. */
static void host_looks_locked(void) {
    if (g_start_on_wait && g_started != g_queued) {
        g_started = g_queued;
        pthread_cond_broadcast(&g_q_cv);
    }
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* An interprocess event's generations (recorded, completed) live in a page other processes map too (ipc.c
 * hands out its file): they are read from there, and a wait on one polls, since another process's
 * completion signals nothing here. */
static uint64_t event_recorded(const Event *e) {
    return e->shared ? __atomic_load_n(&e->shared[0], __ATOMIC_ACQUIRE) : e->record_gen;
}
static uint64_t event_completed(const Event *e) {
    return e->shared ? __atomic_load_n(&e->shared[1], __ATOMIC_ACQUIRE) : e->done_gen;
}
static uint64_t event_next_gen_locked(Event *e) {
    e->record_gen = e->shared ? __atomic_add_fetch(&e->shared[0], 1, __ATOMIC_ACQ_REL) : e->record_gen + 1;
    return e->record_gen;
}
/* Has the record of generation gen completed? Records of one event on two streams may complete in either order,
 * and a wait is for the record it was enqueued after (cuStreamWaitEvent: a later record "will not have any
 * effect" on it), so a plain event keeps the generations still queued. An interprocess event, whose records
 * other processes make, answers by its completed generation. */
static int event_record_done_locked(const Event *e, uint64_t gen) {
    if (e->shared) return event_completed(e) >= gen;
    for (int i = 0; i < e->nqueued_gens; i++)
        if (e->queued_gens[i] == gen) return 0;
    return e->done_gen >= gen;
}

static void event_queued_locked(Event *e, uint64_t gen) {
    if (e->shared) return;
    if (e->nqueued_gens == e->capqueued_gens) {
        int cap = e->capqueued_gens ? 2 * e->capqueued_gens : 4;
        uint64_t *grown = realloc(e->queued_gens, cap * sizeof *grown);
        if (!grown) return; /* untracked: a wait for it ends once any later record has completed too */
        e->queued_gens = grown;
        e->capqueued_gens = cap;
    }
    e->queued_gens[e->nqueued_gens++] = gen;
}

static void event_complete_locked(Event *e, uint64_t gen) {
    for (int i = 0; i < e->nqueued_gens; i++)
        if (e->queued_gens[i] == gen) {
            e->queued_gens[i] = e->queued_gens[--e->nqueued_gens];
            break;
        }
    if (gen > e->done_gen) {
        e->done_gen = gen;
        e->time_ms = now_ms();
        e->has_time = 1;
    }
    uint64_t seen = e->shared ? __atomic_load_n(&e->shared[1], __ATOMIC_ACQUIRE) : gen;
    while (seen < gen && !__atomic_compare_exchange_n(&e->shared[1], &seen, gen, 0, __ATOMIC_ACQ_REL,
                                                      __ATOMIC_ACQUIRE)) {
    }
}
static void event_wait_locked(const Event *e, uint64_t gen) {
    while (!event_record_done_locked(e, gen)) {
        if (!e->shared) {
            pthread_cond_wait(&g_q_cv, &g_q_mu);
            continue;
        }
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 200000;
        if (t.tv_nsec >= 1000000000) t.tv_sec++, t.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&g_q_cv, &g_q_mu, &t);
    }
}

static void event_unref_locked(Event *e) {
    if (--e->refs == 0) {
        handle_remove(e);
        if (e->shared) {
            munmap((void *)e->shared, EVENT_PAGE);
            close(e->shared_fd);
        }
        free(e->capture_deps);
        free(e->queued_gens);
        free(e);
    }
}

static void *stream_worker(void *arg) {
    Stream *s = arg;
    pthread_mutex_lock(&g_q_mu);
    for (;;) {
        while (s->head ? !may_start_locked(s, s->head) : !s->closing) pthread_cond_wait(&g_q_cv, &g_q_mu);
        if (!s->head) break;
        Work *w = s->head;
        if (w->kind == W_WAIT) {
            event_wait_locked(w->event, w->gen);
            event_unref_locked(w->event);
        } else if (w->kind == W_RECORD) {
            event_complete_locked(w->event, w->gen);
            event_unref_locked(w->event);
        } else {
            s->running = 1;
            pthread_mutex_unlock(&g_q_mu);
            uint64_t pin = mem_pin();
            w->fn(w->arg);
            mem_unpin(pin);
            pthread_mutex_lock(&g_q_mu);
            s->running = 0;
        }
        s->head = w->next;
        if (!s->head) s->tail = NULL;
        s->completed++;
        free(w);
        pthread_cond_broadcast(&g_q_cv);
    }
    for (int i = 0; i < g_nstreams; i++)
        if (g_streams[i] == s) g_streams[i] = g_streams[--g_nstreams];
    pthread_cond_broadcast(&g_q_cv);
    pthread_mutex_unlock(&g_q_mu);
    free(s->deps);
    free(s->edge_data);
    free(s);
    return NULL;
}

Stream *stream_new(Context *ctx, unsigned flags, int priority, int is_null) {
    Stream *s = calloc(1, sizeof *s);
    s->ctx = ctx;
    s->flags = flags;
    s->priority = priority;
    s->is_null = is_null;
    pthread_mutex_lock(&g_q_mu);
    if (g_start_on_wait < 0) {
        const char *v = getenv("IRONACCEL_FAKE_CUDA_START_ON_WAIT");
        g_start_on_wait = v && !strcmp(v, "1");
    }
    if (g_nstreams == g_capstreams) {
        g_capstreams = g_capstreams ? g_capstreams * 2 : 16;
        g_streams = realloc(g_streams, g_capstreams * sizeof *g_streams);
    }
    g_streams[g_nstreams++] = s;
    pthread_mutex_unlock(&g_q_mu);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 1 << 20);
    if (pthread_create(&s->thread, &attr, stream_worker, s)) {
        pthread_attr_destroy(&attr);
        pthread_mutex_lock(&g_q_mu);
        g_streams[--g_nstreams] = NULL;
        pthread_mutex_unlock(&g_q_mu);
        free(s);
        return NULL;
    }
    pthread_attr_destroy(&attr);
    if (!is_null) handle_add(s, H_STREAM);
    return s;
}

/* Marks the stream closing: its worker finishes the queue, then frees it. */
void stream_close(Stream *s) {
    if (!s->is_null) handle_remove(s);
    pthread_mutex_lock(&g_q_mu);
    s->closing = 1;
    pthread_cond_broadcast(&g_q_cv);
    pthread_mutex_unlock(&g_q_mu);
}

static void push_locked(Stream *s, Work *w) {
    w->next = NULL;
    w->seq = ++g_queued;
    if (s->tail) s->tail->next = w;
    else s->head = w;
    s->tail = w;
    s->enqueued++;
    pthread_cond_broadcast(&g_q_cv);
}

static void push_record_locked(Stream *s, Event *e, uint64_t gen) {
    Work *w = calloc(1, sizeof *w);
    w->kind = W_RECORD;
    w->event = e;
    w->gen = gen;
    e->refs++;
    event_queued_locked(e, gen);
    push_locked(s, w);
}

static void push_wait_locked(Stream *s, Event *e, uint64_t gen) {
    Work *w = calloc(1, sizeof *w);
    w->kind = W_WAIT;
    w->event = e;
    w->gen = gen;
    e->refs++;
    push_locked(s, w);
}

/* Makes `waiter` wait for everything queued so far on `other` (a hidden event). */
static void order_after_locked(Stream *waiter, Stream *other) {
    if (other->completed == other->enqueued) return;
    Event *e = calloc(1, sizeof *e);
    e->refs = 1;
    push_record_locked(other, e, 1);
    push_wait_locked(waiter, e, 1);
    event_unref_locked(e);
}

static int is_blocking(Stream *s) { return !s->is_null && !(s->flags & CU_STREAM_NON_BLOCKING); }

static void legacy_order_locked(Stream *s) {
    if (s->is_null) {
        for (int i = 0; i < g_nstreams; i++)
            if (g_streams[i]->ctx == s->ctx && is_blocking(g_streams[i]) && !g_streams[i]->closing)
                order_after_locked(s, g_streams[i]);
    } else if (is_blocking(s) && s->ctx->null_stream) {
        order_after_locked(s, s->ctx->null_stream);
    }
}

CUresult stream_submit(Stream *s, WorkFn fn, void *arg) {
    Work *w = calloc(1, sizeof *w);
    if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
    w->kind = W_RUN;
    w->fn = fn;
    w->arg = arg;
    pthread_mutex_lock(&g_q_mu);
    legacy_order_locked(s);
    push_locked(s, w);
    pthread_mutex_unlock(&g_q_mu);
    return CUDA_SUCCESS;
}

static int listed_locked(Stream *s) {
    for (int i = 0; i < g_nstreams; i++)
        if (g_streams[i] == s) return 1;
    return 0;
}

/* Waits for what is queued on s now; a stream whose worker has finished and freed it is drained. */
static void wait_drained_locked(Stream *s) {
    uint64_t target = s->enqueued;
    host_looks_locked();
    while (listed_locked(s) && s->completed < target) pthread_cond_wait(&g_q_cv, &g_q_mu);
}

/* Waits until no stream of ctx accepted by `which` has pending work. */
static void wait_streams_locked(Context *ctx, int blocking_only) {
    host_looks_locked();
    for (;;) {
        Stream *pending = NULL;
        for (int i = 0; i < g_nstreams && !pending; i++) {
            Stream *o = g_streams[i];
            if ((!ctx || o->ctx == ctx) && o->completed < o->enqueued && (!blocking_only || is_blocking(o))) pending = o;
        }
        if (!pending) return;
        wait_drained_locked(pending);
    }
}

CUresult stream_sync(Stream *s) {
    pthread_mutex_lock(&g_q_mu);
    wait_drained_locked(s);
    if (s->is_null) wait_streams_locked(s->ctx, 1);
    pthread_mutex_unlock(&g_q_mu);
    return context_sticky(s->ctx);
}

void streams_sync_context(Context *ctx) {
    pthread_mutex_lock(&g_q_mu);
    wait_streams_locked(ctx, 0);
    pthread_mutex_unlock(&g_q_mu);
}

void streams_close_context(Context *ctx) {
    streams_sync_context(ctx);
    pthread_mutex_lock(&g_q_mu);
    for (int i = 0; i < g_nstreams; i++)
        if (g_streams[i]->ctx == ctx && !g_streams[i]->closing) {
            g_streams[i]->closing = 1;
            if (!g_streams[i]->is_null) handle_remove(g_streams[i]);
        }
    pthread_cond_broadcast(&g_q_cv);
    pthread_mutex_unlock(&g_q_mu);
}

CUresult stream_resolve(void *h, Context *ctx, Stream **out) {
    if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        *out = ctx->null_stream;
        return CUDA_SUCCESS;
    }
    if (!handle_ok(h, H_STREAM)) return CUDA_ERROR_INVALID_HANDLE;
    Stream *s = h;
    if (!s->ctx->alive) return CUDA_ERROR_INVALID_HANDLE;
    *out = s;
    return CUDA_SUCCESS;
}

/* ---- stream entry points ---- */

static CUresult stream_from(void *h, Stream **out) {
    NEED_CONTEXT(ctx);
    return stream_resolve(h, ctx, out);
}

API CUresult cuStreamCreateWithPriority(void **phStream, unsigned flags, int priority) {
    ENTER(cuStreamCreateWithPriority);
    NEED_CONTEXT(ctx);
    if (!phStream || (flags & ~1u)) return CUDA_ERROR_INVALID_VALUE;
    if (priority > 0) priority = 0; /* clamped to [-5, 0] like cuCtxGetStreamPriorityRange says */
    if (priority < -5) priority = -5;
    Stream *s = stream_new(ctx, flags, priority, 0);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    *phStream = s;
    return CUDA_SUCCESS;
}

API CUresult cuStreamCreate(void **phStream, unsigned flags) {
    ENTER(cuStreamCreate);
    return cuStreamCreateWithPriority(phStream, flags, 0);
}

static void capture_forget_stream(Stream *s); /* stream capture, below */

API CUresult cuStreamDestroy_v2(void *h) {
    ENTER(cuStreamDestroy_v2);
    if (!fake_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!h || !handle_ok(h, H_STREAM)) return CUDA_ERROR_INVALID_HANDLE;
    capture_forget_stream(h);
    stream_close(h);
    return CUDA_SUCCESS;
}

API CUresult cuStreamQuery(void *h) {
    ENTER(cuStreamQuery);
    Stream *s;
    TRY(stream_from(h, &s));
    if (s->capture) return stream_capture_unsupported(s, "cuStreamQuery");
    pthread_mutex_lock(&g_q_mu);
    host_looks_locked();
    int done = s->completed == s->enqueued;
    pthread_mutex_unlock(&g_q_mu);
    TRY(context_sticky(s->ctx));
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

API CUresult cuStreamSynchronize(void *h) {
    ENTER(cuStreamSynchronize);
    Stream *s;
    TRY(stream_from(h, &s));
    if (s->capture) return stream_capture_unsupported(s, "cuStreamSynchronize");
    return stream_sync(s);
}

API CUresult cuStreamGetPriority(void *h, int *priority) {
    ENTER(cuStreamGetPriority);
    Stream *s;
    TRY(stream_from(h, &s));
    if (!priority) return CUDA_ERROR_INVALID_VALUE;
    *priority = s->priority;
    return CUDA_SUCCESS;
}

API CUresult cuStreamGetFlags(void *h, unsigned *flags) {
    ENTER(cuStreamGetFlags);
    Stream *s;
    TRY(stream_from(h, &s));
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    *flags = s->flags;
    return CUDA_SUCCESS;
}

API CUresult cuStreamGetCtx(void *h, void **pctx) {
    ENTER(cuStreamGetCtx);
    Stream *s;
    TRY(stream_from(h, &s));
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = s->ctx;
    return CUDA_SUCCESS;
}

API CUresult cuStreamGetId(void *h, unsigned long long *id) {
    ENTER(cuStreamGetId);
    Stream *s;
    TRY(stream_from(h, &s));
    if (!id) return CUDA_ERROR_INVALID_VALUE;
    *id = (unsigned long long)(uintptr_t)s;
    return CUDA_SUCCESS;
}

/* ---- event and host operations (what graph nodes and captures hold) ---- */

static CUresult submit_record(Stream *s, const StreamOp *op) {
    Event *e = op->u.event;
    pthread_mutex_lock(&g_q_mu);
    legacy_order_locked(s);
    push_record_locked(s, e, event_next_gen_locked(e));
    pthread_mutex_unlock(&g_q_mu);
    return CUDA_SUCCESS;
}

static CUresult submit_wait(Stream *s, const StreamOp *op) {
    Event *e = op->u.event;
    pthread_mutex_lock(&g_q_mu);
    uint64_t recorded = event_recorded(e);
    if (recorded > event_completed(e)) push_wait_locked(s, e, recorded);
    pthread_mutex_unlock(&g_q_mu);
    return CUDA_SUCCESS;
}

/* A graph node keeps its event alive (it may be destroyed by the user first). */
static void hold_event(StreamOp *op) {
    pthread_mutex_lock(&g_q_mu);
    op->u.event->refs++;
    pthread_mutex_unlock(&g_q_mu);
}

static void drop_event(StreamOp *op) {
    pthread_mutex_lock(&g_q_mu);
    event_unref_locked(op->u.event);
    pthread_mutex_unlock(&g_q_mu);
}

static const StreamOpClass RECORD_CLASS = {submit_record, hold_event, drop_event};
static const StreamOpClass WAIT_CLASS = {submit_wait, hold_event, drop_event};

void event_record_op(Event *e, StreamOp *op) { *op = (StreamOp){.kind = OPK_EVENT_RECORD, .cls = &RECORD_CLASS, .u.event = e}; }
void event_wait_op(Event *e, StreamOp *op) { *op = (StreamOp){.kind = OPK_EVENT_WAIT, .cls = &WAIT_CLASS, .u.event = e}; }

/* ---- stream capture: a capturing stream turns its work into graph nodes. Streams join a capture by
 * waiting on an event recorded in it; the origin stream ends it. g_cap_mu guards every capture, the
 * streams' capture fields and the events' capture marks (taken before g_q_mu, never inside it). ---- */

enum { CAPTURE_NONE = 0, CAPTURE_ACTIVE = 1, CAPTURE_INVALIDATED = 2 };
#define EDGE_DATA_BYTES 8 /* sizeof(CUgraphEdgeData) */
#define CU_STREAM_CAPTURE_MODE_RELAXED 2

static pthread_mutex_t g_cap_mu = PTHREAD_MUTEX_INITIALIZER;
static Capture **g_captures; /* active captures */
static int g_ncaptures, g_capcaptures;
static uint64_t g_capture_ids;

static Capture *find_capture_locked(uint64_t id) {
    for (int i = 0; i < g_ncaptures; i++)
        if (g_captures[i]->id == id) return g_captures[i];
    return NULL;
}

static int set_deps_locked(GraphNode ***deps, int *ndeps, int *cap, GraphNode *const *from, int n) {
    if (n > *cap) {
        GraphNode **grown = realloc(*deps, (size_t)n * sizeof *grown);
        if (!grown) return -1;
        *deps = grown;
        *cap = n;
    }
    for (int i = 0; i < n; i++) (*deps)[i] = from[i];
    *ndeps = n;
    return 0;
}

/* Adds the nodes of `from` the stream does not depend on yet (a join of two branches). */
static int merge_deps_locked(Stream *s, GraphNode *const *from, int n) {
    for (int i = 0; i < n; i++) {
        int have = 0;
        for (int k = 0; k < s->ndeps && !have; k++) have = s->deps[k] == from[i];
        if (have) continue;
        if (s->ndeps == s->capdeps) {
            int cap = s->capdeps ? s->capdeps * 2 : 4;
            GraphNode **grown = realloc(s->deps, (size_t)cap * sizeof *grown);
            if (!grown) return -1;
            s->deps = grown;
            s->capdeps = cap;
        }
        s->deps[s->ndeps++] = from[i];
    }
    return 0;
}

CUresult stream_capture(Stream *s, const StreamOp *op) {
    pthread_mutex_lock(&g_cap_mu);
    Capture *c = s->capture;
    CUresult rc = CUDA_SUCCESS;
    if (!c) rc = CUDA_ERROR_ILLEGAL_STATE;
    else if (c->invalidated) rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    else {
        GraphNode *n = graph_add(c->graph, op, s->deps, s->ndeps);
        if (!n || set_deps_locked(&s->deps, &s->ndeps, &s->capdeps, &n, 1)) rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&g_cap_mu);
    return rc;
}

static CUresult invalidate_capture(Stream *s, CUresult rc, const char *what) {
    pthread_mutex_lock(&g_cap_mu);
    if (s->capture) s->capture->invalidated = 1;
    pthread_mutex_unlock(&g_cap_mu);
    fake_log("%s during stream capture: the capture is invalidated", what);
    return rc;
}

/* cuCtxSynchronize while a stream of the context captures: the wait would include the capture, so (as the driver
 * does) the call fails and every such capture is invalidated. Returns how many there were. */
int streams_invalidate_context_captures(Context *ctx) {
    int n = 0;
    pthread_mutex_lock(&g_cap_mu);
    for (int i = 0; i < g_ncaptures; i++)
        if (g_captures[i]->origin && g_captures[i]->origin->ctx == ctx) {
            g_captures[i]->invalidated = 1;
            n++;
        }
    pthread_mutex_unlock(&g_cap_mu);
    if (n) fake_log("cuCtxSynchronize during stream capture: the capture is invalidated");
    return n;
}

CUresult stream_capture_unsupported(Stream *s, const char *what) {
    char text[160];
    snprintf(text, sizeof text, "%s is not supported", what);
    return invalidate_capture(s, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, text);
}

/* cuEventRecord on a capturing stream: no node; the event remembers where in the capture it was recorded,
 * for a later cuStreamWaitEvent to join or fork from there. */
static CUresult capture_mark_event(Stream *s, Event *e) {
    pthread_mutex_lock(&g_cap_mu);
    int failed = set_deps_locked(&e->capture_deps, &e->ncapture_deps, &e->capcapture_deps, s->deps, s->ndeps);
    e->capture_id = failed ? 0 : s->capture->id;
    pthread_mutex_unlock(&g_cap_mu);
    return failed ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

static void capture_unmark_event(Event *e) {
    pthread_mutex_lock(&g_cap_mu);
    e->capture_id = 0;
    pthread_mutex_unlock(&g_cap_mu);
}

/* cuStreamWaitEvent where a capture is involved (*handled set): on an event recorded in an active capture
 * the stream joins it (or, already in it, adds the event's position to its dependencies). A capturing
 * stream waiting on any other event gets an event wait node only with CU_EVENT_WAIT_EXTERNAL. */
static CUresult capture_wait(Stream *s, Event *e, unsigned flags, int *handled) {
    pthread_mutex_lock(&g_cap_mu);
    Capture *c = e->capture_id ? find_capture_locked(e->capture_id) : NULL;
    *handled = c != NULL || (s->capture && !(flags & CU_EVENT_WAIT_EXTERNAL));
    CUresult rc = CUDA_SUCCESS;
    if (!*handled) {
        pthread_mutex_unlock(&g_cap_mu);
        return rc;
    }
    if (!c) {
        pthread_mutex_unlock(&g_cap_mu);
        return invalidate_capture(s, CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "a wait on an event from outside the capture");
    }
    if (s->capture && s->capture != c) {
        rc = CUDA_ERROR_STREAM_CAPTURE_MERGE;
    } else if (!s->capture) {
        if (set_deps_locked(&s->deps, &s->ndeps, &s->capdeps, e->capture_deps, e->ncapture_deps))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else s->capture = c;
    } else if (merge_deps_locked(s, e->capture_deps, e->ncapture_deps)) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&g_cap_mu);
    return rc;
}

/* A stream is joined back when everything it captured precedes what the origin depends on now. */
static int joined_locked(const Stream *s, const Stream *origin) {
    for (int i = 0; i < s->ndeps; i++) {
        int covered = 0;
        for (int k = 0; k < origin->ndeps && !covered; k++) covered = graph_node_precedes(s->deps[i], origin->deps[k]);
        if (!covered) return 0;
    }
    return 1;
}

static void leave_capture_locked(Stream *s) {
    s->capture = NULL;
    s->ndeps = 0;
}

/* A capturing stream being destroyed leaves its capture, invalidated. */
static void capture_forget_stream(Stream *s) {
    pthread_mutex_lock(&g_cap_mu);
    if (s->capture && s->capture->origin == s) {
        fake_log("the origin stream of a capture destroyed: the capture is invalidated");
        s->capture->invalidated = 1;
        s->capture->origin = NULL;
    }
    if (s->capture) { /* a forked stream leaves; what it captured stays in the graph */
        leave_capture_locked(s);
    }
    free(s->deps);
    s->deps = NULL;
    s->capdeps = 0;
    free(s->edge_data);
    s->edge_data = NULL;
    s->capedges = 0;
    pthread_mutex_unlock(&g_cap_mu);
}

/* Starts a capture into g (a new graph when NULL) after deps, nodes of g. */
static CUresult begin_capture(void *h, Graph *g, GraphNode *const *deps, size_t ndeps, int mode) {
    Stream *s;
    TRY(stream_from(h, &s));
    if (mode < 0 || mode > CU_STREAM_CAPTURE_MODE_RELAXED || (ndeps && !deps)) return CUDA_ERROR_INVALID_VALUE;
    if (s->is_null) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot be captured */
    for (size_t i = 0; i < ndeps; i++) {
        GraphNode *n;
        TRY(handle_get(deps[i], H_GRAPH_NODE, &n));
        if (n->owner != g) return CUDA_ERROR_INVALID_VALUE;
    }
    int callers = g != NULL;
    Capture *c = calloc(1, sizeof *c);
    if (!g) g = graph_new();
    pthread_mutex_lock(&g_cap_mu);
    CUresult rc = CUDA_SUCCESS;
    if (s->capture) rc = CUDA_ERROR_ILLEGAL_STATE;
    else if (!c || !g) rc = CUDA_ERROR_OUT_OF_MEMORY;
    else if (g_ncaptures == g_capcaptures) {
        int cap = g_capcaptures ? g_capcaptures * 2 : 8;
        Capture **grown = realloc(g_captures, (size_t)cap * sizeof *grown);
        if (grown) g_captures = grown, g_capcaptures = cap;
        else rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc == CUDA_SUCCESS && set_deps_locked(&s->deps, &s->ndeps, &s->capdeps, deps, (int)ndeps))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        *c = (Capture){g, ++g_capture_ids, mode, 0, s, callers};
        g_captures[g_ncaptures++] = c;
        s->capture = c;
    }
    pthread_mutex_unlock(&g_cap_mu);
    if (rc) {
        free(c);
        if (g && !callers) graph_free(g);
    }
    return rc;
}

API CUresult cuStreamBeginCapture_v2(void *h, int mode) {
    ENTER(cuStreamBeginCapture_v2);
    return begin_capture(h, NULL, NULL, 0, mode);
}

/* Edge data, where given, must be all default (full dependencies): the only kind of edge here. */
static int default_edges(const void *edges, size_t n) {
    for (size_t i = 0; edges && i < n * EDGE_DATA_BYTES; i++)
        if (((const uint8_t *)edges)[i]) return 0;
    return 1;
}

API CUresult cuStreamBeginCaptureToGraph(void *h, void *hGraph, GraphNode *const *deps, const void *edges,
                                         size_t ndeps, int mode) {
    ENTER(cuStreamBeginCaptureToGraph);
    Graph *g;
    TRY(handle_get(hGraph, H_GRAPH, &g));
    if (!default_edges(edges, ndeps)) return CUDA_ERROR_NOT_SUPPORTED;
    return begin_capture(h, g, deps, ndeps, mode);
}

#define CU_STREAM_SET_CAPTURE_DEPENDENCIES 0x1

/* Replaces (SET) or extends (ADD) what the next captured operation depends on, with nodes of the capture. */
static CUresult update_capture_deps(void *h, GraphNode *const *deps, const void *edges, size_t ndeps, unsigned flags) {
    Stream *s;
    TRY(stream_from(h, &s));
    if ((ndeps && !deps) || flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES) return CUDA_ERROR_INVALID_VALUE;
    if (!default_edges(edges, ndeps)) return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&g_cap_mu);
    CUresult rc = CUDA_SUCCESS;
    if (!s->capture) rc = CUDA_ERROR_ILLEGAL_STATE;
    for (size_t i = 0; rc == CUDA_SUCCESS && i < ndeps; i++) {
        GraphNode *n = deps[i];
        if (!handle_ok(n, H_GRAPH_NODE) || n->owner != s->capture->graph) rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS) {
        if (flags & CU_STREAM_SET_CAPTURE_DEPENDENCIES) s->ndeps = 0;
        if (merge_deps_locked(s, deps, (int)ndeps)) rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&g_cap_mu);
    return rc;
}

API CUresult cuStreamUpdateCaptureDependencies(void *h, GraphNode *const *deps, size_t ndeps, unsigned flags) {
    ENTER(cuStreamUpdateCaptureDependencies);
    return update_capture_deps(h, deps, NULL, ndeps, flags);
}

API CUresult cuStreamUpdateCaptureDependencies_v2(void *h, GraphNode *const *deps, const void *edges, size_t ndeps,
                                                  unsigned flags) {
    ENTER(cuStreamUpdateCaptureDependencies_v2);
    return update_capture_deps(h, deps, edges, ndeps, flags);
}

API CUresult cuStreamEndCapture(void *h, void **phGraph) {
    ENTER(cuStreamEndCapture);
    Stream *s;
    TRY(stream_from(h, &s));
    if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_cap_mu);
    Capture *c = s->capture;
    if (!c || c->origin != s) {
        pthread_mutex_unlock(&g_cap_mu);
        return c ? CUDA_ERROR_STREAM_CAPTURE_UNMATCHED : CUDA_ERROR_ILLEGAL_STATE;
    }
    int unjoined = 0;
    pthread_mutex_lock(&g_q_mu);
    for (int i = 0; i < g_nstreams; i++) {
        Stream *o = g_streams[i];
        if (o->capture != c || o == s) continue;
        unjoined |= !joined_locked(o, s);
        leave_capture_locked(o);
    }
    pthread_mutex_unlock(&g_q_mu);
    leave_capture_locked(s);
    for (int i = 0; i < g_ncaptures; i++)
        if (g_captures[i] == c) g_captures[i--] = g_captures[--g_ncaptures];
    pthread_mutex_unlock(&g_cap_mu);
    CUresult rc = c->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                  : unjoined     ? CUDA_ERROR_STREAM_CAPTURE_UNJOINED
                                 : CUDA_SUCCESS;
    if (rc) {
        if (!c->callers_graph) graph_free(c->graph);
        *phGraph = NULL;
    } else {
        *phGraph = c->graph;
    }
    free(c);
    return rc;
}

static int capture_status_locked(const Stream *s) {
    return !s->capture ? CAPTURE_NONE : s->capture->invalidated ? CAPTURE_INVALIDATED : CAPTURE_ACTIVE;
}

API CUresult cuStreamIsCapturing(void *h, int *status) {
    ENTER(cuStreamIsCapturing);
    Stream *s;
    TRY(stream_from(h, &s));
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_cap_mu);
    *status = capture_status_locked(s);
    pthread_mutex_unlock(&g_cap_mu);
    return CUDA_SUCCESS;
}

/* The dependencies array stays valid until the stream's next captured operation, as documented. */
static CUresult capture_info(void *h, int *status, uint64_t *id, void **graph, GraphNode *const **deps,
                             const void **edges, size_t *ndeps) {
    Stream *s;
    TRY(stream_from(h, &s));
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_cap_mu);
    *status = capture_status_locked(s);
    Capture *c = s->capture;
    if (id) *id = c ? c->id : 0;
    if (graph) *graph = c ? c->graph : NULL;
    if (deps) *deps = c ? s->deps : NULL;
    CUresult rc = CUDA_SUCCESS;
    if (edges) { /* every edge is a default (full) dependency: all-zero CUgraphEdgeData */
        if (s->ndeps > s->capedges) {
            void *grown = realloc(s->edge_data, (size_t)s->ndeps * EDGE_DATA_BYTES);
            if (grown) s->edge_data = grown, s->capedges = s->ndeps;
        }
        if (s->ndeps <= s->capedges) {
            if (s->ndeps) memset(s->edge_data, 0, (size_t)s->ndeps * EDGE_DATA_BYTES);
            *edges = c && s->ndeps ? s->edge_data : NULL;
        } else {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (ndeps) *ndeps = c ? (size_t)s->ndeps : 0;
    pthread_mutex_unlock(&g_cap_mu);
    return rc;
}

API CUresult cuStreamGetCaptureInfo_v2(void *h, int *status, uint64_t *id, void **graph, GraphNode *const **deps,
                                       size_t *ndeps) {
    ENTER(cuStreamGetCaptureInfo_v2);
    return capture_info(h, status, id, graph, deps, NULL, ndeps);
}

API CUresult cuStreamGetCaptureInfo_v3(void *h, int *status, uint64_t *id, void **graph, GraphNode *const **deps,
                                       const void **edges, size_t *ndeps) {
    ENTER(cuStreamGetCaptureInfo_v3);
    return capture_info(h, status, id, graph, deps, edges, ndeps);
}

typedef struct HostCall {
    void (*host_fn)(void *);
    void (*callback)(void *stream, CUresult status, void *user);
    void *user, *stream;
    Context *ctx;
} HostCall;

static void run_host_call(void *arg) {
    HostCall *c = arg;
    if (c->host_fn) c->host_fn(c->user);
    else c->callback(c->stream, context_sticky(c->ctx), c->user);
    free(c);
}

static CUresult submit_host_call(Stream *s, HostCall proto) {
    HostCall *c = malloc(sizeof *c);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    *c = proto;
    c->ctx = s->ctx;
    CUresult rc = stream_submit(s, run_host_call, c);
    if (rc) free(c);
    return rc;
}

static CUresult submit_host(Stream *s, const StreamOp *op) {
    return submit_host_call(s, (HostCall){op->u.host.fn, NULL, op->u.host.user, s, NULL});
}

static const StreamOpClass HOST_CLASS = {submit_host, NULL, NULL};

void host_op(void (*fn)(void *), void *user, StreamOp *op) {
    *op = (StreamOp){.kind = OPK_HOST, .cls = &HOST_CLASS};
    op->u.host.fn = fn;
    op->u.host.user = user;
}

API CUresult cuLaunchHostFunc(void *h, void (*fn)(void *), void *user) {
    ENTER(cuLaunchHostFunc);
    if (!fn) return CUDA_ERROR_INVALID_VALUE;
    Stream *s;
    TRY(stream_from(h, &s));
    StreamOp op;
    host_op(fn, user, &op);
    return s->capture ? stream_capture(s, &op) : submit_host_call(s, (HostCall){fn, NULL, user, h, NULL});
}

API CUresult cuStreamAddCallback(void *h, void (*cb)(void *, CUresult, void *), void *user, unsigned flags) {
    ENTER(cuStreamAddCallback);
    if (!cb || flags) return CUDA_ERROR_INVALID_VALUE;
    Stream *s;
    TRY(stream_from(h, &s));
    if (s->capture) return stream_capture_unsupported(s, "cuStreamAddCallback");
    return submit_host_call(s, (HostCall){NULL, cb, user, h, NULL});
}

/* ---- events ---- */

static CUresult event_from(void *h, Event **out) {
    if (!fake_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!h || !handle_ok(h, H_EVENT)) return CUDA_ERROR_INVALID_HANDLE;
    *out = h;
    return CUDA_SUCCESS;
}

CUresult event_create_shared(void **phEvent, unsigned flags, int fd, void *page) {
    NEED_CONTEXT(ctx);
    Event *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->ctx = ctx;
    e->flags = flags;
    e->refs = 1;
    e->shared = page;
    e->shared_fd = fd;
    handle_add(e, H_EVENT);
    *phEvent = e;
    return CUDA_SUCCESS;
}

/* An interprocess event (which must disable timing, as on a real driver) gets its shared page here. */
API CUresult cuEventCreate(void **phEvent, unsigned flags) {
    ENTER(cuEventCreate);
    NEED_CONTEXT(ctx);
    if (!phEvent || (flags & ~0xFu)) return CUDA_ERROR_INVALID_VALUE;
    if (!(flags & CU_EVENT_INTERPROCESS)) return event_create_shared(phEvent, flags, -1, NULL);
    if (!(flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
    int fd = memfd_create("ironaccel-fakecuda-event", MFD_CLOEXEC);
    void *page = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, EVENT_PAGE) == 0)
        page = mmap(NULL, EVENT_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (page == MAP_FAILED) {
        if (fd >= 0) close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult rc = event_create_shared(phEvent, flags, fd, page);
    if (rc != CUDA_SUCCESS) {
        munmap(page, EVENT_PAGE);
        close(fd);
    }
    return rc;
}

API CUresult cuEventRecordWithFlags(void *hEvent, void *hStream, unsigned flags) {
    ENTER(cuEventRecordWithFlags);
    Event *e;
    Stream *s;
    TRY(event_from(hEvent, &e));
    TRY(stream_from(hStream, &s));
    if (flags & ~CU_EVENT_RECORD_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
    TRY(context_sticky(s->ctx));
    if (s->capture) {
        if (!(flags & CU_EVENT_RECORD_EXTERNAL)) return capture_mark_event(s, e);
        StreamOp op;
        event_record_op(e, &op);
        return stream_capture(s, &op);
    }
    capture_unmark_event(e);
    StreamOp op;
    event_record_op(e, &op);
    return op.cls->submit(s, &op);
}

API CUresult cuEventRecord(void *hEvent, void *hStream) {
    ENTER(cuEventRecord);
    return cuEventRecordWithFlags(hEvent, hStream, 0);
}

API CUresult cuEventQuery(void *hEvent) {
    ENTER(cuEventQuery);
    Event *e;
    TRY(event_from(hEvent, &e));
    pthread_mutex_lock(&g_q_mu);
    host_looks_locked();
    int done = event_completed(e) >= event_recorded(e);
    pthread_mutex_unlock(&g_q_mu);
    TRY(context_sticky(e->ctx));
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

API CUresult cuEventSynchronize(void *hEvent) {
    ENTER(cuEventSynchronize);
    Event *e;
    TRY(event_from(hEvent, &e));
    pthread_mutex_lock(&g_q_mu);
    host_looks_locked();
    event_wait_locked(e, event_recorded(e));
    pthread_mutex_unlock(&g_q_mu);
    return context_sticky(e->ctx);
}

API CUresult cuEventDestroy_v2(void *hEvent) {
    ENTER(cuEventDestroy_v2);
    Event *e;
    TRY(event_from(hEvent, &e));
    handle_remove(e);
    pthread_mutex_lock(&g_q_mu);
    e->destroyed = 1;
    event_unref_locked(e);
    pthread_mutex_unlock(&g_q_mu);
    return CUDA_SUCCESS;
}

API CUresult cuEventElapsedTime(float *ms, void *hStart, void *hEnd) {
    ENTER(cuEventElapsedTime);
    Event *a, *b;
    TRY(event_from(hStart, &a));
    TRY(event_from(hEnd, &b));
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&g_q_mu);
    int recorded = a->record_gen && b->record_gen;
    int done = a->done_gen >= a->record_gen && b->done_gen >= b->record_gen;
    double t = b->time_ms - a->time_ms;
    pthread_mutex_unlock(&g_q_mu);
    if (!recorded) return CUDA_ERROR_INVALID_HANDLE;
    if (!done) return CUDA_ERROR_NOT_READY;
    *ms = (float)t;
    return CUDA_SUCCESS;
}

API CUresult cuEventElapsedTime_v2(float *ms, void *hStart, void *hEnd) {
    ENTER(cuEventElapsedTime_v2);
    return cuEventElapsedTime(ms, hStart, hEnd);
}

API CUresult cuStreamWaitEvent(void *hStream, void *hEvent, unsigned flags) {
    ENTER(cuStreamWaitEvent);
    Event *e;
    Stream *s;
    TRY(event_from(hEvent, &e));
    TRY(stream_from(hStream, &s));
    if (flags & ~CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
    int handled;
    CUresult rc = capture_wait(s, e, flags, &handled);
    if (handled) return rc;
    StreamOp op;
    event_wait_op(e, &op);
    return s->capture ? stream_capture(s, &op) : op.cls->submit(s, &op);
}
