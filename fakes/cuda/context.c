/* Contexts: the primary context (retained, released, reset), regular contexts (create, destroy), the
 * current-context entry points over current.c's stack, and per-context settings (limits, cache config). */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

static Context g_primary;
static int g_primary_refs;
static unsigned g_primary_flags;
static pthread_mutex_t g_ctx_mu = PTHREAD_MUTEX_INITIALIZER; /* ids, primary refs, limits, cache config */
static unsigned long long g_ctx_ids;

/* CUlimit defaults: stack size, printf FIFO, malloc heap, device-runtime sync depth and pending launches,
 * max L2 fetch granularity, persisting L2 size, and one reserved slot. */
static const size_t DEFAULT_LIMITS[CTX_LIMITS] = {1024, 1 << 20, 8 << 20, 2, 2048, 64, 0, 0};

static int ctx_ok(Context *c) { return c && handle_ok(c, H_CONTEXT) && c->alive; }

Context *context_primary(void) { return &g_primary; }

int context_handle_ok(const void *h) { return h == &g_primary || ctx_ok((Context *)h); }

static void ctx_start(Context *c, unsigned flags, int primary) {
    c->device = 0;
    c->flags = flags;
    c->is_primary = primary;
    c->sticky = CUDA_SUCCESS;
    pthread_mutex_lock(&g_ctx_mu);
    c->id = ++g_ctx_ids;
    memcpy(c->limits, DEFAULT_LIMITS, sizeof c->limits);
    c->cache_config = 0;
    pthread_mutex_unlock(&g_ctx_mu);
    c->null_stream = stream_new(c, 0, 0, 1);
    c->alive = 1;
}

/* Runs the destructors of what the context stores (the runtime's state), then drains the work, reports leaks,
 * frees the memory and streams of the context. */
static void ctx_teardown(Context *c) {
    context_storage_release(c);
    streams_close_context(c);
    device_heap_release(c);
    mem_release_context(c);
    c->null_stream = NULL;
    c->sticky = CUDA_SUCCESS;
}

Context *context_new(unsigned flags) {
    Context *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    handle_add(c, H_CONTEXT);
    ctx_start(c, flags, 0);
    return c;
}

void context_destroy(Context *c) {
    ctx_teardown(c);
    c->alive = 0;
    handle_remove(c);
    context_forget(c); /* the struct is kept: late work items and stale handles never touch freed memory */
}

API CUresult cuCtxCreate_v2(void **pctx, unsigned flags, CUdevice dev) {
    ENTER(cuCtxCreate_v2);
    NEED_INIT();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    NEED_DEVICE(dev);
    Context *c = context_new(flags);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    if (context_push(c)) {
        context_destroy(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pctx = c;
    return CUDA_SUCCESS;
}

API CUresult cuCtxCreate_v3(void **pctx, void *affinity, int naffinity, unsigned flags, CUdevice dev) {
    ENTER(cuCtxCreate_v3);
    if (affinity && naffinity > 0) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    return cuCtxCreate_v2(pctx, flags, dev);
}

API CUresult cuCtxCreate_v4(void **pctx, void *params, unsigned flags, CUdevice dev) {
    ENTER(cuCtxCreate_v4);
    if (params) {
        struct { void *affinity; int n; void *cig; } *p = params;
        if ((p->affinity && p->n > 0) || p->cig) return CUDA_ERROR_NOT_SUPPORTED;
    }
    return cuCtxCreate_v2(pctx, flags, dev);
}

API CUresult cuCtxDestroy_v2(void *h) {
    ENTER(cuCtxDestroy_v2);
    NEED_INIT();
    Context *c = h;
    if (!ctx_ok(c) || c->is_primary || c->green) return CUDA_ERROR_INVALID_CONTEXT; /* a green context's goes
                                                                                      * with cuGreenCtxDestroy */
    context_destroy(c);
    return CUDA_SUCCESS;
}

API CUresult cuCtxPushCurrent_v2(void *h) {
    ENTER(cuCtxPushCurrent_v2);
    NEED_INIT();
    if (!ctx_ok(h)) return CUDA_ERROR_INVALID_CONTEXT;
    return context_push(h);
}

API CUresult cuCtxPopCurrent_v2(void **pctx) {
    ENTER(cuCtxPopCurrent_v2);
    NEED_INIT();
    Context *c = context_pop();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx) *pctx = c;
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(void *h) {
    ENTER(cuCtxSetCurrent);
    NEED_INIT();
    if (h && !context_handle_ok(h)) return CUDA_ERROR_INVALID_CONTEXT; /* the inactive primary too, as the
                                                                         * runtime sets it before retaining it */
    context_set_current(h);
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetCurrent(void **pctx) {
    ENTER(cuCtxGetCurrent);
    NEED_INIT();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = current_context();
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetDevice(CUdevice *dev) {
    ENTER(cuCtxGetDevice);
    NEED_INIT();
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    if (!current_context()) return CUDA_ERROR_INVALID_CONTEXT;
    *dev = 0;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetFlags(unsigned *flags) {
    ENTER(cuCtxGetFlags);
    NEED_INIT();
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    Context *c = current_context();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetId(void *h, unsigned long long *id) {
    ENTER(cuCtxGetId);
    NEED_INIT();
    Context *c = h ? h : current_context();
    if (!ctx_ok(c)) return CUDA_ERROR_INVALID_CONTEXT;
    if (!id) return CUDA_ERROR_INVALID_VALUE;
    *id = c->id;
    return CUDA_SUCCESS;
}

API CUresult cuCtxSynchronize(void) {
    ENTER(cuCtxSynchronize);
    NEED_INIT();
    Context *c = current_context();
    if (!c || !c->alive) return CUDA_ERROR_INVALID_CONTEXT;
    if (streams_invalidate_context_captures(c)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    streams_sync_context(c);
    return c->sticky;
}

/* The profiler's range markers: no profiler is ever attached to the simulated device, so starting and stopping
 * collection changes nothing; the driver still needs a current context for them. */
static CUresult profiler_mark(void) {
    NEED_INIT();
    Context *c = current_context();
    return c && c->alive ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

API CUresult cuProfilerStart(void) {
    ENTER(cuProfilerStart);
    return profiler_mark();
}

API CUresult cuProfilerStop(void) {
    ENTER(cuProfilerStop);
    return profiler_mark();
}

API CUresult cuCtxGetApiVersion(void *h, unsigned *version) {
    ENTER(cuCtxGetApiVersion);
    NEED_INIT();
    Context *c = h ? h : current_context();
    if (!ctx_ok(c)) return CUDA_ERROR_INVALID_CONTEXT;
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = 3020;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) {
    ENTER(cuCtxGetStreamPriorityRange);
    NEED_CONTEXT(c);
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return CUDA_SUCCESS;
}

size_t context_limit(Context *c, int limit) {
    pthread_mutex_lock(&g_ctx_mu);
    size_t v = c->limits[limit];
    pthread_mutex_unlock(&g_ctx_mu);
    return v;
}

API CUresult cuCtxGetLimit(size_t *value, int limit) {
    ENTER(cuCtxGetLimit);
    NEED_CONTEXT(c);
    if (!value || limit < 0 || limit >= CTX_LIMITS) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_ctx_mu);
    *value = c->limits[limit];
    pthread_mutex_unlock(&g_ctx_mu);
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetLimit(int limit, size_t value) {
    ENTER(cuCtxSetLimit);
    NEED_CONTEXT(c);
    if (limit < 0 || limit >= CTX_LIMITS) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_ctx_mu);
    c->limits[limit] = value;
    pthread_mutex_unlock(&g_ctx_mu);
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetCacheConfig(int *config) {
    ENTER(cuCtxGetCacheConfig);
    NEED_CONTEXT(c);
    if (!config) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_ctx_mu);
    *config = c->cache_config;
    pthread_mutex_unlock(&g_ctx_mu);
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetCacheConfig(int config) {
    ENTER(cuCtxSetCacheConfig);
    NEED_CONTEXT(c);
    if (config < 0 || config > 3) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_ctx_mu);
    c->cache_config = config;
    pthread_mutex_unlock(&g_ctx_mu);
    return CUDA_SUCCESS;
}

/* sm_90's shared memory banks are 4 bytes wide, not configurable: a setting is checked and has no effect */
API CUresult cuCtxGetSharedMemConfig(int *config) {
    ENTER(cuCtxGetSharedMemConfig);
    NEED_CONTEXT(c);
    (void)c;
    if (!config) return CUDA_ERROR_INVALID_VALUE;
    *config = 1; /* CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE */
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetSharedMemConfig(int config) {
    ENTER(cuCtxSetSharedMemConfig);
    NEED_CONTEXT(c);
    (void)c;
    return config < 0 || config > 2 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRetain(void **pctx, CUdevice dev) {
    ENTER(cuDevicePrimaryCtxRetain);
    NEED_INIT();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    NEED_DEVICE(dev);
    pthread_mutex_lock(&g_ctx_mu);
    int start = !g_primary.alive;
    g_primary_refs++;
    pthread_mutex_unlock(&g_ctx_mu);
    if (start) {
        handle_add(&g_primary, H_CONTEXT);
        ctx_start(&g_primary, g_primary_flags, 1);
    }
    *pctx = &g_primary;
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    ENTER(cuDevicePrimaryCtxRelease_v2);
    NEED_INIT();
    NEED_DEVICE(dev);
    pthread_mutex_lock(&g_ctx_mu);
    if (g_primary_refs <= 0) {
        pthread_mutex_unlock(&g_ctx_mu);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    int last = --g_primary_refs == 0;
    pthread_mutex_unlock(&g_ctx_mu);
    if (last) {
        ctx_teardown(&g_primary);
        g_primary.alive = 0;
        handle_remove(&g_primary);
        context_forget(&g_primary);
    }
    return CUDA_SUCCESS;
}

/* The pre-11.0 name, which cuBLASLt still resolves with dlsym: the same release. */
API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
    ENTER(cuDevicePrimaryCtxRelease);
    return cuDevicePrimaryCtxRelease_v2(dev);
}

API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned flags) {
    ENTER(cuDevicePrimaryCtxSetFlags_v2);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (flags & ~0xFFu) return CUDA_ERROR_INVALID_VALUE; /* CU_CTX_FLAGS_MASK */
    g_primary_flags = flags;
    g_primary.flags = flags;
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned *flags, int *active) {
    ENTER(cuDevicePrimaryCtxGetState);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    *flags = g_primary_flags;
    *active = g_primary.alive;
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
    ENTER(cuDevicePrimaryCtxReset_v2);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (g_primary.alive) {
        ctx_teardown(&g_primary); /* clears the sticky error too, as a reset does on hardware */
        g_primary.null_stream = stream_new(&g_primary, 0, 0, 1);
    } else {
        context_storage_release(&g_primary); /* what the runtime stored in it before retaining it */
    }
    return CUDA_SUCCESS;
}

