/* The PTX interpreter: runs a grid block by block, blocks spread over host threads. Inside a block each
 * thread runs until it reaches a barrier, a warp collective (shfl, vote, redux, bar.warp.sync) or exits;
 * then collectives are resolved per warp and barriers per block, so threads interleave exactly at
 * synchronisation points. Every load/store is checked (memcheck) before it touches memory. */
#define _GNU_SOURCE
#include <fenv.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake.h"
#include "ops.h"

/* TS_WAIT: paused at an mbarrier wait whose phase is not complete, until the block's other threads have run */
enum ThreadState { TS_RUN, TS_BAR, TS_WARP, TS_WAIT, TS_DONE, TS_FAULT };

typedef struct Frame {
    uint32_t ret_pc, call;
    int callee;
    uint64_t *regs;
    uint32_t lbase;
} Frame;

typedef struct Thread {
    uint64_t *regs;
    uint32_t pc, lbase;
    uint8_t *local;
    int state, depth;
    unsigned linear; /* index of the thread in its block */
    Frame *stack; /* CALL_DEPTH_MAX frames, apart so that scanning the threads of a warp stays in cache */
} Thread;

/* What ends a launch that runs too long (IRONACCEL_FAKE_WATCHDOG_S / _INSTRUCTIONS), checked every
 * WATCH_INTERVAL loop back-edges or calls of a worker (what lets one thread run long), and after every block
 * (what lets a loop-free grid of 2^31 blocks run long). */
typedef struct Watchdog {
    double seconds;       /* 0: no time limit */
    uint64_t deadline_ns; /* CLOCK_MONOTONIC */
    uint64_t budget;      /* thread-instructions of the whole launch; 0: no limit */
    uint64_t executed;    /* across the workers, as of their last checks */
    volatile int *stop;   /* the grid is ending: another worker faulted */
} Watchdog;

enum WatchCause { WATCH_NONE, WATCH_TIME, WATCH_BUDGET, WATCH_STOP };
#define WATCH_INTERVAL 1024

/* The grid-wide barrier of cooperative groups (cudaCGSynchronize): every block of such a grid runs on its own
 * worker, and a block that has ended counts as arrived. */
typedef struct GridBarrier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t nblocks, arrived, ended, generation;
} GridBarrier;

static void grid_barrier_release_if_all(GridBarrier *g) {
    if (g->arrived && g->arrived + g->ended == g->nblocks) {
        g->arrived = 0;
        g->generation++;
        pthread_cond_broadcast(&g->cv);
    }
}

/* 0 once every block has arrived; 1 when the launch is ending instead (another worker faulted). */
static int grid_barrier_wait(GridBarrier *g, volatile int *stop) {
    pthread_mutex_lock(&g->mu);
    uint64_t generation = g->generation;
    g->arrived++;
    grid_barrier_release_if_all(g);
    while (generation == g->generation && !*stop) pthread_cond_wait(&g->cv, &g->mu);
    int stopped = generation == g->generation;
    pthread_mutex_unlock(&g->mu);
    return stopped;
}

static void grid_barrier_end_block(GridBarrier *g) {
    pthread_mutex_lock(&g->mu);
    g->ended++;
    grid_barrier_release_if_all(g);
    pthread_mutex_unlock(&g->mu);
}

/* Wakes the waiting blocks after the grid's stop flag was set. */
static void grid_barrier_stop(GridBarrier *g) {
    pthread_mutex_lock(&g->mu);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* What a launch's printf calls wrote, written to stdout when it ends; at most the context's
 * CU_LIMIT_PRINTF_FIFO_SIZE bytes (the rest is dropped, as a full FIFO drops it on hardware). */
typedef struct PrintOutput {
    pthread_mutex_t mu;
    char *text;
    size_t len, cap, limit;
} PrintOutput;

typedef struct Exec {
    const LaunchSpec *spec;
    PrintOutput *print;
    Context *ctx; /* the launch's: its device heap serves malloc */
    const PtxModule *m;
    const PtxFunction *kernel;
    const Range *ranges;
    int nranges;
    uint64_t cache_lo, cache_hi;
    uint8_t *shared;
    uint64_t shared_size;
    uint32_t local_size;
    unsigned block_id[3];
    /* the fault that ended the launch */
    CUresult fault;
    uint64_t fault_addr;
    unsigned fault_size;
    int fault_store, fault_space;
    uint32_t fault_pc;
    uint64_t steps;        /* instructions this worker has run (not counting guarded-off ones) */
    unsigned fault_linear; /* the faulting thread's index in its block */
    Watchdog *watch;
    GridBarrier *grid_sync; /* NULL unless the module calls cudaCGSynchronize */
    uint64_t workspace;     /* a cooperative launch's grid workspace (%envreg1:%envreg2), else 0 */
    uint32_t watch_countdown;
    uint64_t watch_reported; /* steps already added to watch->executed */
    int watch_cause;
} Exec;

static inline float f32(uint64_t v) { union { uint32_t u; float f; } x = {(uint32_t)v}; return x.f; }
static inline double f64(uint64_t v) { union { uint64_t u; double f; } x = {v}; return x.f; }
static inline uint64_t bits32(float f) { union { float f; uint32_t u; } x = {f}; return x.u; }
static inline uint64_t bits64(double f) { union { double f; uint64_t u; } x = {f}; return x.u; }

/* ---- memcheck ---- */

/* Does the access [a, a + n) lie inside [lo, hi)? The one bounds test of memcheck: it never wraps, so an
 * address near 2^64 (p[-1] of a null p) or an offset before a buffer is outside, never a host pointer. */
static inline int span_in(uint64_t a, uint64_t n, uint64_t lo, uint64_t hi) {
    return a >= lo && a <= hi && n <= hi - a;
}

static uint8_t *global_slow(Exec *X, uint64_t a, unsigned n) {
    int lo = 0, hi = X->nranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (a < X->ranges[mid].lo) hi = mid - 1;
        else if (a >= X->ranges[mid].hi) lo = mid + 1;
        else {
            if (!span_in(a, n, X->ranges[mid].lo, X->ranges[mid].hi)) return NULL;
            X->cache_lo = X->ranges[mid].lo;
            X->cache_hi = X->ranges[mid].hi;
            return (uint8_t *)(uintptr_t)a;
        }
    }
    return NULL;
}

static inline uint8_t *global_ptr(Exec *X, uint64_t a, unsigned n) {
    if (span_in(a, n, X->cache_lo, X->cache_hi)) return (uint8_t *)(uintptr_t)a;
    return global_slow(X, a, n);
}

/* Host pointer for an access of n bytes at address a in a space, or NULL (a memcheck violation). */
static uint8_t *address(Exec *X, Thread *T, int space, uint64_t a, unsigned n) {
    if (n > 1 && (a & (n - 1))) return NULL;
    switch (space) {
    case SPACE_GLOBAL: return global_ptr(X, a, n);
    case SPACE_SHARED: return span_in(a, n, 0, X->shared_size) ? X->shared + a : NULL;
    case SPACE_LOCAL: return span_in(a, n, 0, X->local_size) ? T->local + a : NULL;
    case SPACE_FRAME: /* a frame's variables: from the frame's base to the end of the thread's local memory */
        return span_in(a, n, 0, X->local_size - T->lbase) ? T->local + T->lbase + a : NULL;
    case SPACE_KPARAM: return span_in(a, n, 0, X->spec->param_bytes) ? X->spec->params + a : NULL;
    default: {
        uint64_t sh = (uint64_t)(uintptr_t)X->shared, lo = (uint64_t)(uintptr_t)T->local;
        uint64_t sh_end = sh + X->shared_size, lo_end = lo + X->local_size;
        if (span_in(a, 1, sh, sh_end)) return span_in(a, n, sh, sh_end) ? (uint8_t *)(uintptr_t)a : NULL;
        if (span_in(a, 1, lo, lo_end)) return span_in(a, n, lo, lo_end) ? (uint8_t *)(uintptr_t)a : NULL;
        return global_ptr(X, a, n);
    }
    }
}

/* Records the first fault of the launch in this worker (the thread's pc is the faulting instruction). */
static int fault(Exec *X, Thread *T, CUresult code, uint64_t a, unsigned n, int store, int space) {
    if (!X->fault) {
        X->fault = code;
        X->fault_addr = a;
        X->fault_size = n;
        X->fault_store = store;
        X->fault_space = space;
        X->fault_pc = T->pc;
        X->fault_linear = T->linear;
    }
    T->state = TS_FAULT;
    return TS_FAULT;
}

#include "interp_convert.inc"

#include "interp_ops.inc"

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Called every WATCH_INTERVAL back-edges: should this worker stop (a watchdog limit, or the grid ending)? */
static int watchdog_expired(Exec *X, uint64_t pending_steps) {
    Watchdog *W = X->watch;
    X->watch_countdown = WATCH_INTERVAL;
    if (*W->stop) return X->watch_cause = WATCH_STOP;
    /* every block of a cooperative launch has a worker: one spinning at grid.sync() lets the others arrive */
    if (X->workspace) sched_yield();
    uint64_t mine = X->steps + pending_steps;
    uint64_t total = __atomic_add_fetch(&W->executed, mine - X->watch_reported, __ATOMIC_RELAXED);
    X->watch_reported = mine;
    if (W->budget && total > W->budget) return X->watch_cause = WATCH_BUDGET;
    if (W->deadline_ns && now_ns() > W->deadline_ns) return X->watch_cause = WATCH_TIME;
    return WATCH_NONE;
}

#include "interp_printf.inc"

#include "interp_thread.inc"

#include "interp_block.inc"

typedef struct Grid {
    Context *ctx;
    PrintOutput print;
    const LaunchSpec *spec;
    const PtxModule *m;
    const PtxFunction *kernel;
    Range *ranges;
    int nranges;
    uint64_t nblocks, next;
    volatile int stop;
    uint64_t workspace; /* a cooperative launch's grid workspace: {u32 size; u32 barrier}, zeroed */
    Watchdog watch;
    GridBarrier grid_sync;
    pthread_mutex_t mu;
    Exec failed; /* the first fault */
    int has_failure;
} Grid;

static uint64_t g_executed;

/* Local memory of one thread: the deepest chain of frames, rounded to the module's data alignment. */
static uint32_t thread_local_bytes(const PtxModule *m, const PtxFunction *kernel) {
    return (kernel->stack_local + m->data_align - 1) & ~(m->data_align - 1);
}

uint64_t interp_block_bytes(const PtxModule *m, const PtxFunction *kernel, uint64_t n) {
    return n * ((uint64_t)kernel->stack_slots * sizeof(uint64_t) + thread_local_bytes(m, kernel) + sizeof(Thread) +
                (m->ncalls ? CALL_DEPTH_MAX * sizeof(Frame) : 0));
}

/* After a block: has the launch run past a watchdog limit? Then the worker fails it with LAUNCH_TIMEOUT. */
static int block_watch_expired(Exec *X, const Grid *G) {
    if (!X->watch->budget && !X->watch->deadline_ns) return 0;
    int cause = watchdog_expired(X, 0);
    if (cause != WATCH_TIME && cause != WATCH_BUDGET) return 0;
    X->fault = CUDA_ERROR_LAUNCH_TIMEOUT;
    X->fault_pc = G->kernel->entry_pc;
    X->fault_linear = 0;
    return 1;
}

static void *grid_worker(void *arg) {
    Grid *G = arg;
    const LaunchSpec *S = G->spec;
    Exec X = {0};
    X.print = &G->print;
    X.spec = S, X.m = G->m, X.kernel = G->kernel, X.ranges = G->ranges, X.nranges = G->nranges, X.ctx = G->ctx;
    X.watch = &G->watch;
    X.grid_sync = G->m->uses_grid_sync ? &G->grid_sync : NULL;
    X.workspace = G->workspace;
    X.watch_countdown = WATCH_INTERVAL;
    X.shared_size = (G->kernel->shared_static + S->shared_bytes + SHARED_ALLOCATION_UNIT - 1)
                    & ~(uint64_t)(SHARED_ALLOCATION_UNIT - 1);
    uint32_t align = G->m->data_align; /* a power of two: .align takes no other */
    X.local_size = thread_local_bytes(G->m, G->kernel);
    BlockMemory B = {0};
    B.nthreads = (size_t)S->block[0] * S->block[1] * S->block[2];
    B.threads = calloc(B.nthreads, sizeof(Thread));
    B.frames = G->m->ncalls ? calloc(B.nthreads * CALL_DEPTH_MAX, sizeof(Frame)) : NULL;
    B.regs = calloc(B.nthreads * G->kernel->stack_slots + 1, sizeof(uint64_t));
    size_t local_bytes = B.nthreads * X.local_size + align;
    B.local = aligned_alloc(align, local_bytes);
    if (B.local) memset(B.local, 0, local_bytes);
    B.shared = aligned_alloc(align, (X.shared_size + align) & ~(uint64_t)(align - 1));
    X.shared = B.shared;
    if (!B.threads || !B.regs || !B.local || !B.shared || (G->m->ncalls && !B.frames)) {
        pthread_mutex_lock(&G->mu);
        if (!G->has_failure) { G->has_failure = 1; G->failed.fault = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES; }
        G->stop = 1;
        pthread_mutex_unlock(&G->mu);
    }
    while (!G->stop) {
        uint64_t b = __atomic_fetch_add(&G->next, 1, __ATOMIC_RELAXED);
        if (b >= G->nblocks) break;
        unsigned id[3] = {(unsigned)(b % S->grid[0]), (unsigned)(b / S->grid[0] % S->grid[1]),
                          (unsigned)(b / ((uint64_t)S->grid[0] * S->grid[1]))};
        if (run_block(&X, &B, id) || block_watch_expired(&X, G)) {
            pthread_mutex_lock(&G->mu);
            if (!G->has_failure) {
                G->has_failure = 1;
                G->failed = X; /* its block_id is this block's: run_block set it */
            }
            G->stop = 1;
            pthread_mutex_unlock(&G->mu);
            if (X.grid_sync) grid_barrier_stop(X.grid_sync);
        }
        if (X.grid_sync) grid_barrier_end_block(X.grid_sync);
    }
    free(B.threads), free(B.frames), free(B.regs), free(B.local), free(B.shared);
    __atomic_fetch_add(&g_executed, X.steps, __ATOMIC_RELAXED);
    return NULL;
}

/* Thread-instructions the interpreter has run in this process (for benchmarks: an exact count). */
API uint64_t ironaccel_fake_executed_instructions(void) { return __atomic_load_n(&g_executed, __ATOMIC_RELAXED); }

static const char *space_name(int space) {
    static const char *const NAMES[SPACE_COUNT] = {
#define X(e, name) name,
        SPACES(X)
#undef X
    };
    return space >= 0 && space < SPACE_COUNT ? NAMES[space] : "";
}

/* Reads the watchdog's limits (at every launch, so a process can change them); a bad value is reported once
 * and leaves that limit off. */
static void watchdog_from_env(Watchdog *W) {
    static int warned;
    const char *s = getenv("IRONACCEL_FAKE_WATCHDOG_S");
    char *end;
    if (s && *s) {
        double v = strtod(s, &end);
        if (*end || !(v >= 0) || v > 1e9) {
            if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
                fake_log("IRONACCEL_FAKE_WATCHDOG_S=%s is not a number of seconds: no time limit", s);
        } else {
            W->seconds = v;
        }
    }
    s = getenv("IRONACCEL_FAKE_WATCHDOG_INSTRUCTIONS");
    if (s && *s) {
        double v = strtod(s, &end); /* 1e9 and 1000000000 alike */
        if (*end || !(v >= 0) || v > 1.8e19) {
            if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
                fake_log("IRONACCEL_FAKE_WATCHDOG_INSTRUCTIONS=%s is not a count: no instruction limit", s);
        } else {
            W->budget = (uint64_t)v;
        }
    }
}

int watchdog_armed(void) {
    Watchdog W = {0};
    watchdog_from_env(&W);
    return W.seconds > 0 || W.budget > 0;
}

CUresult interp_launch(Context *ctx, const LaunchSpec *spec, char *report, size_t report_len) {
    const PtxModule *m = spec->fn->module->ptx;
    Grid G = {0};
    G.spec = spec, G.m = m, G.kernel = &m->funcs[spec->fn->index], G.ctx = ctx;
    G.nblocks = (uint64_t)spec->grid[0] * spec->grid[1] * spec->grid[2];
    /* a grid that synchronizes (cudaCGSynchronize, or a cooperative launch, whose blocks may synchronize through
     * the grid workspace as cooperative_groups' grid.sync() does) must fit on the device at once: 32 blocks on
     * each multiprocessor at most */
    int all_at_once = m->uses_grid_sync || spec->cooperative;
    if (all_at_once && G.nblocks > (uint64_t)g_block_threads * 32) return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    if (m->uses_device_heap) {
        CUresult rc = device_heap_ready(ctx, context_limit(ctx, 2)); /* CU_LIMIT_MALLOC_HEAP_SIZE */
        if (rc != CUDA_SUCCESS) return rc;
    }
    /* a kernel that returns at once has nothing to run in any thread: numba's test_issue_9229 launches 5.7e9
     * threads of a kernel its compiler emptied, which the H200 finishes at once and block by block took minutes */
    int op = m->code[G.kernel->entry_pc].op;
    if (op == OP_RET || op == OP_EXIT) return CUDA_SUCCESS;
    if (spec->cooperative) { /* device memory of its own, live (so memcheck accepts it) for the launch only */
        CUresult rc = mem_alloc(ctx, 8, A_DEVICE, &G.workspace);
        if (rc != CUDA_SUCCESS) return rc;
        memset((void *)(uintptr_t)G.workspace, 0, 8);
    }
    G.ranges = mem_snapshot(&G.nranges);
    pthread_mutex_init(&G.print.mu, NULL);
    G.print.limit = context_limit(ctx, 1); /* CU_LIMIT_PRINTF_FIFO_SIZE */
    watchdog_from_env(&G.watch);
    G.watch.stop = &G.stop;
    if (G.watch.seconds > 0) G.watch.deadline_ns = now_ns() + (uint64_t)(G.watch.seconds * 1e9);
    pthread_mutex_init(&G.mu, NULL);
    /* a grid that synchronizes has every block running at once (what a cooperative launch guarantees) */
    uint64_t helpers = all_at_once ? G.nblocks - 1 : (uint64_t)g_block_threads - 1;
    if (helpers > G.nblocks - 1) helpers = G.nblocks - 1;
    pthread_mutex_init(&G.grid_sync.mu, NULL);
    pthread_cond_init(&G.grid_sync.cv, NULL);
    G.grid_sync.nblocks = G.nblocks;
    pthread_t local_tids[64], *tids = helpers <= 64 ? local_tids : malloc(helpers * sizeof *tids);
    uint64_t started = 0;
    while (tids && started < helpers && !pthread_create(&tids[started], NULL, grid_worker, &G)) started++;
    if (started < helpers && all_at_once) { /* fewer workers than blocks would wait at the barrier forever */
        pthread_mutex_lock(&G.mu);
        G.has_failure = 1, G.failed.fault = CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, G.stop = 1;
        pthread_mutex_unlock(&G.mu);
        grid_barrier_stop(&G.grid_sync);
    } else {
        grid_worker(&G);
    }
    for (uint64_t i = 0; i < started; i++) pthread_join(tids[i], NULL);
    if (tids != local_tids) free(tids);
    pthread_cond_destroy(&G.grid_sync.cv);
    pthread_mutex_destroy(&G.grid_sync.mu);
    free(G.ranges);
    if (G.workspace) mem_free(G.workspace, 1 << A_DEVICE);
    pthread_mutex_destroy(&G.mu);
    if (G.print.len) { /* the host sees a launch's printf output once the launch is done */
        fwrite(G.print.text, 1, G.print.len, stdout);
        fflush(stdout);
    }
    free(G.print.text);
    pthread_mutex_destroy(&G.print.mu);
    if (!G.has_failure) return CUDA_SUCCESS;
    Exec *F = &G.failed;
    unsigned linear = F->fault_linear;
    unsigned tx = linear % spec->block[0], ty = linear / spec->block[0] % spec->block[1],
             tz = linear / (spec->block[0] * spec->block[1]);
    int line = F->fault_pc < m->ncode ? m->lines[F->fault_pc] : 0;
    const char *name = G.kernel->name;
    if (F->fault == CUDA_ERROR_ILLEGAL_ADDRESS || F->fault == CUDA_ERROR_MISALIGNED_ADDRESS) {
        char where[256] = "";
        if (F->fault_space == SPACE_GLOBAL || F->fault_space == SPACE_GENERIC) mem_describe(F->fault_addr, where, sizeof where);
        else snprintf(where, sizeof where, "the block has %llu bytes of %s memory", (unsigned long long)
                      (F->fault_space == SPACE_SHARED ? F->shared_size : F->local_size), space_name(F->fault_space));
        char access[96]; /* a fault of no size is a device free of what the device heap did not hand out */
        if (F->fault_size) snprintf(access, sizeof access, "%s %s of %u bytes", space_name(F->fault_space),
                                    F->fault_store ? "write" : "read", F->fault_size);
        else snprintf(access, sizeof access, "free (not a block the device heap's malloc handed out and kept)");
        snprintf(report, report_len,
                 "memcheck: %s %s at 0x%llx in kernel %s, block (%u,%u,%u), thread (%u,%u,%u), PTX line %d: %s",
                 F->fault == CUDA_ERROR_MISALIGNED_ADDRESS ? "misaligned" : "invalid", access,
                 (unsigned long long)F->fault_addr, name, F->block_id[0], F->block_id[1], F->block_id[2], tx, ty,
                 tz, line, where);
    } else if (F->fault == CUDA_ERROR_LAUNCH_TIMEOUT) {
        char limit[96];
        if (F->watch_cause == WATCH_BUDGET)
            snprintf(limit, sizeof limit, "ran more than %llu thread-instructions (IRONACCEL_FAKE_WATCHDOG_INSTRUCTIONS)",
                     (unsigned long long)G.watch.budget);
        else
            snprintf(limit, sizeof limit, "ran longer than %g s (IRONACCEL_FAKE_WATCHDOG_S)", G.watch.seconds);
        snprintf(report, report_len, "watchdog: kernel %s %s; stopped in block (%u,%u,%u), thread (%u,%u,%u), "
                 "PTX line %d", name, limit, F->block_id[0], F->block_id[1], F->block_id[2], tx, ty, tz, line);
    } else {
        const char *what = F->fault == CUDA_ERROR_ASSERT ? "device-side assert"
                         : F->fault == CUDA_ERROR_LAUNCH_FAILED ? "trap"
                         : F->fault == CUDA_ERROR_HARDWARE_STACK_ERROR ? "call stack overflow"
                         : F->fault == CUDA_ERROR_INVALID_PC ? "call through a pointer to no function of the module"
                         : "launch failure";
        snprintf(report, report_len, "%s in kernel %s, block (%u,%u,%u), thread (%u,%u,%u), PTX line %d", what, name,
                 F->block_id[0], F->block_id[1], F->block_id[2], tx, ty, tz, line);
    }
    return F->fault;
}
