/* Streams and events. Each stream is a queue served by its own worker thread, in order; events complete
 * when the worker reaches them; the legacy default stream waits for blocking streams and they wait for
 * it (through hidden events), as on hardware. One lock and one condition variable cover all queues. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake.h"

#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_STREAM_LEGACY ((void *)0x1)
#define CU_STREAM_PER_THREAD ((void *)0x2)

enum WorkKind { W_RUN, W_WAIT, W_RECORD };
typedef struct Work {
    int kind;
    WorkFn fn;
    void *arg;
    Event *event;
    uint64_t gen;
    struct Work *next;
} Work;

static pthread_mutex_t g_q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_q_cv = PTHREAD_COND_INITIALIZER;
static Stream **g_streams;
static int g_nstreams, g_capstreams;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void event_unref_locked(Event *e) {
    if (--e->refs == 0) {
        handle_remove(e);
        free(e);
    }
}

static void *stream_worker(void *arg) {
    Stream *s = arg;
    pthread_mutex_lock(&g_q_mu);
    for (;;) {
        while (!s->head && !s->closing) pthread_cond_wait(&g_q_cv, &g_q_mu);
        if (!s->head) break;
        Work *w = s->head;
        if (w->kind == W_WAIT) {
            while (w->event->done_gen < w->gen) pthread_cond_wait(&g_q_cv, &g_q_mu);
            event_unref_locked(w->event);
        } else if (w->kind == W_RECORD) {
            if (w->gen > w->event->done_gen) {
                w->event->done_gen = w->gen;
                w->event->time_ms = now_ms();
                w->event->has_time = 1;
            }
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
static void stream_close(Stream *s) {
    if (!s->is_null) handle_remove(s);
    pthread_mutex_lock(&g_q_mu);
    s->closing = 1;
    pthread_cond_broadcast(&g_q_cv);
    pthread_mutex_unlock(&g_q_mu);
}

static void push_locked(Stream *s, Work *w) {
    w->next = NULL;
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
    while (listed_locked(s) && s->completed < target) pthread_cond_wait(&g_q_cv, &g_q_mu);
}

/* Waits until no stream of ctx accepted by `which` has pending work. */
static void wait_streams_locked(Context *ctx, int blocking_only) {
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

API CUresult cuStreamDestroy_v2(void *h) {
    ENTER(cuStreamDestroy_v2);
    if (!fake_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!h || !handle_ok(h, H_STREAM)) return CUDA_ERROR_INVALID_HANDLE;
    stream_close(h);
    return CUDA_SUCCESS;
}

API CUresult cuStreamQuery(void *h) {
    ENTER(cuStreamQuery);
    Stream *s;
    TRY(stream_from(h, &s));
    pthread_mutex_lock(&g_q_mu);
    int done = s->completed == s->enqueued;
    pthread_mutex_unlock(&g_q_mu);
    TRY(context_sticky(s->ctx));
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

API CUresult cuStreamSynchronize(void *h) {
    ENTER(cuStreamSynchronize);
    Stream *s;
    TRY(stream_from(h, &s));
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

/* Stream capture is not implemented (cuStreamBeginCapture is a NOT_SUPPORTED stub), so a valid stream is
 * never capturing: the answer is true, not a pretence. */
enum { CU_STREAM_CAPTURE_STATUS_NONE = 0 };

API CUresult cuStreamIsCapturing(void *h, int *status) {
    ENTER(cuStreamIsCapturing);
    Stream *s;
    TRY(stream_from(h, &s));
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
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

static CUresult submit_host_call(void *h, HostCall proto) {
    Stream *s;
    TRY(stream_from(h, &s));
    HostCall *c = malloc(sizeof *c);
    *c = proto;
    c->ctx = s->ctx;
    return stream_submit(s, run_host_call, c);
}

API CUresult cuLaunchHostFunc(void *h, void (*fn)(void *), void *user) {
    ENTER(cuLaunchHostFunc);
    if (!fn) return CUDA_ERROR_INVALID_VALUE;
    return submit_host_call(h, (HostCall){fn, NULL, user, h, NULL});
}

API CUresult cuStreamAddCallback(void *h, void (*cb)(void *, CUresult, void *), void *user, unsigned flags) {
    ENTER(cuStreamAddCallback);
    if (!cb || flags) return CUDA_ERROR_INVALID_VALUE;
    return submit_host_call(h, (HostCall){NULL, cb, user, h, NULL});
}

/* ---- events ---- */

static CUresult event_from(void *h, Event **out) {
    if (!fake_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!h || !handle_ok(h, H_EVENT)) return CUDA_ERROR_INVALID_HANDLE;
    *out = h;
    return CUDA_SUCCESS;
}

API CUresult cuEventCreate(void **phEvent, unsigned flags) {
    ENTER(cuEventCreate);
    NEED_CONTEXT(ctx);
    if (!phEvent || (flags & ~0xFu)) return CUDA_ERROR_INVALID_VALUE;
    Event *e = calloc(1, sizeof *e);
    e->ctx = ctx;
    e->flags = flags;
    e->refs = 1;
    handle_add(e, H_EVENT);
    *phEvent = e;
    return CUDA_SUCCESS;
}

API CUresult cuEventRecordWithFlags(void *hEvent, void *hStream, unsigned flags) {
    ENTER(cuEventRecordWithFlags);
    Event *e;
    Stream *s;
    TRY(event_from(hEvent, &e));
    TRY(stream_from(hStream, &s));
    if (flags & ~1u) return CUDA_ERROR_INVALID_VALUE;
    TRY(context_sticky(s->ctx));
    pthread_mutex_lock(&g_q_mu);
    legacy_order_locked(s);
    push_record_locked(s, e, ++e->record_gen);
    pthread_mutex_unlock(&g_q_mu);
    return CUDA_SUCCESS;
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
    int done = e->done_gen >= e->record_gen;
    pthread_mutex_unlock(&g_q_mu);
    TRY(context_sticky(e->ctx));
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

API CUresult cuEventSynchronize(void *hEvent) {
    ENTER(cuEventSynchronize);
    Event *e;
    TRY(event_from(hEvent, &e));
    pthread_mutex_lock(&g_q_mu);
    uint64_t target = e->record_gen;
    while (e->done_gen < target) pthread_cond_wait(&g_q_cv, &g_q_mu);
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
    if (flags & ~1u) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_q_mu);
    if (e->record_gen > e->done_gen) push_wait_locked(s, e, e->record_gen);
    pthread_mutex_unlock(&g_q_mu);
    return CUDA_SUCCESS;
}
