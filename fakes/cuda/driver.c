/* Driver API: init, the one simulated device and its attributes, primary and regular contexts, error
 * names, memory allocation/copy/set entry points, modules, libraries, functions, launches, occupancy. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake.h"

#define DEVICE_NAME "ironaccel fake CUDA device (simulated)"
#define DRIVER_VERSION 13000
#define CC_MAJOR 9
#define CC_MINOR 0
#define MAX_THREADS_PER_BLOCK 1024
#define SHARED_PER_BLOCK 49152
#define SHARED_PER_BLOCK_OPTIN 232448
#define SHARED_PER_SM 233472
#define THREADS_PER_SM 2048
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02

int g_block_threads = 1;
static int g_init_state; /* 0 not yet, 1 ok, -1 failed */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static Context g_primary;
static int g_primary_refs;
static unsigned g_primary_flags;
static pthread_mutex_t g_ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long g_ctx_ids;
static __thread Context *t_ctx_stack[32];
static __thread int t_ctx_depth;

int mem_init(void);
void mem_report_at_exit(void);
CUresult mem_register(Context *ctx, void *p, uint64_t size, unsigned flags);
void streams_close_context(Context *ctx);
void stream_close(Stream *s);

void fake_init_once(void) {
    faults_from_env();
    const char *threads = getenv("IRONACCEL_FAKE_CUDA_THREADS");
    long n = threads && *threads ? atol(threads) : sysconf(_SC_NPROCESSORS_ONLN);
    g_block_threads = n < 1 ? 1 : n > 64 ? 64 : (int)n;
    g_init_state = mem_init() == 0 ? 1 : -1;
    atexit(mem_report_at_exit);
}

int fake_initialized(void) { return g_init_state == 1; }

API CUresult cuInit(unsigned flags) {
    ENTER(cuInit);
    if (flags) return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&g_once, fake_init_once);
    return g_init_state == 1 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult cuDriverGetVersion(int *version) {
    ENTER(cuDriverGetVersion);
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = DRIVER_VERSION;
    return CUDA_SUCCESS;
}

API CUresult cuGetErrorName(CUresult code, const char **name) {
    ENTER(cuGetErrorName);
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof RESULT_NAMES / sizeof RESULT_NAMES[0]; i++)
        if (RESULT_NAMES[i].code == code) {
            *name = RESULT_NAMES[i].name;
            return CUDA_SUCCESS;
        }
    *name = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGetErrorString(CUresult code, const char **text) {
    ENTER(cuGetErrorString);
    static const struct { int code; const char *text; } TEXTS[] = {
        {CUDA_SUCCESS, "no error"},
        {CUDA_ERROR_INVALID_VALUE, "invalid argument"},
        {CUDA_ERROR_OUT_OF_MEMORY, "out of memory"},
        {CUDA_ERROR_NOT_INITIALIZED, "initialization error"},
        {CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"},
        {CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"},
        {CUDA_ERROR_INVALID_CONTEXT, "invalid device context"},
        {CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"},
        {CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"},
        {CUDA_ERROR_NOT_FOUND, "named symbol not found"},
        {CUDA_ERROR_NOT_READY, "device not ready"},
        {CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"},
        {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"},
        {CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"},
        {CUDA_ERROR_ASSERT, "device-side assert triggered"},
        {CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered"},
        {CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"},
        {CUDA_ERROR_NOT_SUPPORTED, "operation not supported"},
        {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped"},
        {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region"},
        {CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"},
        {CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"},
        {CUDA_ERROR_UNKNOWN, "unknown error"},
    };
    if (!text) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof TEXTS / sizeof TEXTS[0]; i++)
        if (TEXTS[i].code == code) {
            *text = TEXTS[i].text;
            return CUDA_SUCCESS;
        }
    const char *name;
    if (cuGetErrorName(code, &name) == CUDA_SUCCESS) {
        *text = name; /* less common codes: the name is the description */
        return CUDA_SUCCESS;
    }
    *text = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* Private interfaces between NVIDIA's libraries and the driver: none exist here. NVRTC asks for them and
 * copes with "not found", as long as the table pointer is cleared. */
API CUresult cuGetExportTable(const void **table, const void *uuid) {
    ENTER(cuGetExportTable);
    (void)uuid;
    if (table) *table = NULL;
    return CUDA_ERROR_NOT_FOUND;
}

/* ---- device ---- */

#define NEED_INIT() \
    do { if (!fake_initialized()) return CUDA_ERROR_NOT_INITIALIZED; } while (0)
#define NEED_DEVICE(d) \
    do { if ((d) != 0) return CUDA_ERROR_INVALID_DEVICE; } while (0)

API CUresult cuDeviceGetCount(int *count) {
    ENTER(cuDeviceGetCount);
    NEED_INIT();
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = 1;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
    ENTER(cuDeviceGet);
    NEED_INIT();
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    NEED_DEVICE(ordinal);
    *dev = 0;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    ENTER(cuDeviceGetName);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", DEVICE_NAME);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid(unsigned char *uuid, CUdevice dev) {
    ENTER(cuDeviceGetUuid);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    static const unsigned char UUID[16] = "ironaccel-fake-0"; /* fixed, recognisable */
    memcpy(uuid, UUID, 16);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid_v2(unsigned char *uuid, CUdevice dev) {
    ENTER(cuDeviceGetUuid_v2);
    return cuDeviceGetUuid(uuid, dev);
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    ENTER(cuDeviceTotalMem_v2);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    *bytes = mem_total();
    return CUDA_SUCCESS;
}

API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev) {
    ENTER(cuDeviceComputeCapability);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
    *major = CC_MAJOR;
    *minor = CC_MINOR;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetPCIBusId(char *bus, int len, CUdevice dev) {
    ENTER(cuDeviceGetPCIBusId);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!bus || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(bus, (size_t)len, "0000:00:00.0");
    return CUDA_SUCCESS;
}

/* Attribute values consistent with compute capability 9.0 and with what the interpreter does. */
static int attribute_value(int attr, int *known) {
    *known = 1;
    switch (attr) {
    case 1: return MAX_THREADS_PER_BLOCK;
    case 2: case 3: return 1024;
    case 4: return 64;
    case 5: return 2147483647;
    case 6: case 7: return 65535;
    case 8: return SHARED_PER_BLOCK;
    case 9: return 65536;
    case 10: return 32;
    case 11: return 2147483647;
    case 12: return 65536;
    case 13: return 1000000; /* kHz */
    case 14: return 512;
    case 15: return 1;
    case 16: return g_block_threads; /* one "multiprocessor" per host thread running blocks */
    case 17: case 18: return 0;
    case 19: return 1;
    case 20: return 0;
    case 30: return 512;
    case 31: return 1;
    case 32: return 0;
    case 33: case 34: case 35: return 0;
    case 36: return 1000000;
    case 37: return 64;
    case 38: return 4 << 20;
    case 39: return THREADS_PER_SM;
    case 40: return 1;
    case 41: return 1;
    case 50: return 0;
    case 51: return 32;
    case 75: return CC_MAJOR;
    case 76: return CC_MINOR;
    case 78: return 1;
    case 79: case 80: return 1;
    case 81: return SHARED_PER_SM;
    case 82: return 65536;
    case 83: return 1;
    case 84: case 85: return 0;
    case 86: return 0;
    case 87: return 2;
    case 88: case 89: return 0;
    case 90: return 0;
    case 91: return 1;
    case 95: return 1;
    case 96: return 0;
    case 97: return SHARED_PER_BLOCK_OPTIN;
    case 99: return 1;
    case 106: return 32;
    case 111: return 1024;
    case 113: return 0;
    case 115: return 1;
    case 119: return 0;
    case 120: return 0;
    case 126: return 1;
    case 129: return 0;
    case 131: case 134: return -1;
    default:
        *known = 0;
        return 0;
    }
}

API CUresult cuDeviceGetAttribute(int *value, int attr, CUdevice dev) {
    ENTER(cuDeviceGetAttribute);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!value || attr < 1 || attr >= 162) return CUDA_ERROR_INVALID_VALUE;
    int known;
    *value = attribute_value(attr, &known); /* texture, surface, interop limits: 0 (not supported) */
    return CUDA_SUCCESS;
}

/* ---- contexts ---- */

Context *current_context(void) { return t_ctx_depth ? t_ctx_stack[t_ctx_depth - 1] : NULL; }

CUresult context_sticky(Context *ctx) { return ctx ? ctx->sticky : CUDA_SUCCESS; }

CUresult need_context(Context **out) {
    if (!fake_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    Context *c = current_context();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (!c->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (c->sticky) return c->sticky;
    *out = c;
    return CUDA_SUCCESS;
}

static int ctx_ok(Context *c) { return c && handle_ok(c, H_CONTEXT) && c->alive; }

static void ctx_start(Context *c, unsigned flags, int primary) {
    c->device = 0;
    c->flags = flags;
    c->is_primary = primary;
    c->sticky = CUDA_SUCCESS;
    pthread_mutex_lock(&g_ctx_mu);
    c->id = ++g_ctx_ids;
    pthread_mutex_unlock(&g_ctx_mu);
    c->null_stream = stream_new(c, 0, 0, 1);
    c->alive = 1;
}

/* Drains the work, reports leaks, frees the memory and streams of a context. */
static void ctx_teardown(Context *c) {
    streams_close_context(c);
    mem_release_context(c);
    c->null_stream = NULL;
    c->sticky = CUDA_SUCCESS;
}

static void forget_from_stack(Context *c) {
    for (int i = 0; i < t_ctx_depth; i++)
        if (t_ctx_stack[i] == c) t_ctx_stack[i] = NULL;
    while (t_ctx_depth && !t_ctx_stack[t_ctx_depth - 1]) t_ctx_depth--;
}

API CUresult cuCtxCreate_v2(void **pctx, unsigned flags, CUdevice dev) {
    ENTER(cuCtxCreate_v2);
    NEED_INIT();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    NEED_DEVICE(dev);
    if (t_ctx_depth >= 32) return CUDA_ERROR_OUT_OF_MEMORY;
    Context *c = calloc(1, sizeof *c);
    handle_add(c, H_CONTEXT);
    ctx_start(c, flags, 0);
    t_ctx_stack[t_ctx_depth++] = c;
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
    if (!ctx_ok(c) || c->is_primary) return CUDA_ERROR_INVALID_CONTEXT;
    ctx_teardown(c);
    c->alive = 0;
    handle_remove(c);
    forget_from_stack(c);
    return CUDA_SUCCESS; /* the struct is kept: late work items and stale handles never touch freed memory */
}

API CUresult cuCtxPushCurrent_v2(void *h) {
    ENTER(cuCtxPushCurrent_v2);
    NEED_INIT();
    if (!ctx_ok(h)) return CUDA_ERROR_INVALID_CONTEXT;
    if (t_ctx_depth >= 32) return CUDA_ERROR_OUT_OF_MEMORY;
    t_ctx_stack[t_ctx_depth++] = h;
    return CUDA_SUCCESS;
}

API CUresult cuCtxPopCurrent_v2(void **pctx) {
    ENTER(cuCtxPopCurrent_v2);
    NEED_INIT();
    if (!t_ctx_depth) return CUDA_ERROR_INVALID_CONTEXT;
    Context *c = t_ctx_stack[--t_ctx_depth];
    if (pctx) *pctx = c;
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(void *h) {
    ENTER(cuCtxSetCurrent);
    NEED_INIT();
    if (!h) {
        if (t_ctx_depth) t_ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (!ctx_ok(h)) return CUDA_ERROR_INVALID_CONTEXT;
    if (t_ctx_depth) t_ctx_stack[t_ctx_depth - 1] = h;
    else t_ctx_stack[t_ctx_depth++] = h;
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
    streams_sync_context(c);
    return c->sticky;
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
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return CUDA_SUCCESS;
}

static size_t g_limits[8] = {1024, 1 << 20, 8 << 20, 2, 2048, 64, 0, 0};

API CUresult cuCtxGetLimit(size_t *value, int limit) {
    ENTER(cuCtxGetLimit);
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    if (!value || limit < 0 || limit >= 8) return CUDA_ERROR_INVALID_VALUE;
    *value = g_limits[limit];
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetLimit(int limit, size_t value) {
    ENTER(cuCtxSetLimit);
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    if (limit < 0 || limit >= 8) return CUDA_ERROR_INVALID_VALUE;
    g_limits[limit] = value;
    return CUDA_SUCCESS;
}

static int g_cache_config;

API CUresult cuCtxGetCacheConfig(int *config) {
    ENTER(cuCtxGetCacheConfig);
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    if (!config) return CUDA_ERROR_INVALID_VALUE;
    *config = g_cache_config;
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetCacheConfig(int config) {
    ENTER(cuCtxSetCacheConfig);
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    if (config < 0 || config > 3) return CUDA_ERROR_INVALID_VALUE;
    g_cache_config = config;
    return CUDA_SUCCESS;
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
        forget_from_stack(&g_primary);
    }
    return CUDA_SUCCESS;
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
    }
    return CUDA_SUCCESS;
}

/* ---- memory entry points ---- */

API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    ENTER(cuMemGetInfo_v2);
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
    uint64_t used = mem_used(), all = mem_total();
    *total = all;
    *free_bytes = used > all ? 0 : all - used;
    return CUDA_SUCCESS;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
    ENTER(cuMemAlloc_v2);
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    if (!dptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    return mem_alloc(c, size, A_DEVICE, dptr);
}

API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned elem) {
    ENTER(cuMemAllocPitch_v2);
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    if (!dptr || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t p = (width + 511) & ~(size_t)511;
    if ((rc = mem_alloc(c, p * height, A_DEVICE, dptr))) return rc;
    *pitch = p;
    return CUDA_SUCCESS;
}

API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned flags) {
    ENTER(cuMemAllocManaged);
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    if (!dptr || size == 0 || (flags != 1 && flags != 2)) return CUDA_ERROR_INVALID_VALUE;
    return mem_alloc(c, size, A_DEVICE, dptr); /* host-accessible already: one address space */
}

API CUresult cuMemFree_v2(CUdeviceptr p) {
    ENTER(cuMemFree_v2);
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    if (p == 0) return CUDA_SUCCESS;
    streams_sync_context(c); /* cuMemFree synchronizes the device, as on hardware */
    return mem_free(p, 1 << A_DEVICE);
}

API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
    ENTER(cuMemGetAddressRange_v2);
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    AllocInfo a;
    if (!mem_find(p, &a)) return CUDA_ERROR_NOT_FOUND;
    if (base) *base = a.base;
    if (size) *size = a.size;
    return CUDA_SUCCESS;
}

API CUresult cuMemHostAlloc(void **pp, size_t size, unsigned flags) {
    ENTER(cuMemHostAlloc);
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    if (!pp || size == 0 || (flags & ~0xFu)) return CUDA_ERROR_INVALID_VALUE;
    uint64_t p;
    if ((rc = mem_alloc(c, size, A_HOST_PINNED, &p))) return rc;
    *pp = (void *)(uintptr_t)p;
    return CUDA_SUCCESS;
}

API CUresult cuMemAllocHost_v2(void **pp, size_t size) {
    ENTER(cuMemAllocHost_v2);
    return cuMemHostAlloc(pp, size, 0);
}

API CUresult cuMemFreeHost(void *p) {
    ENTER(cuMemFreeHost);
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    streams_sync_context(c);
    return mem_free((uint64_t)(uintptr_t)p, 1 << A_HOST_PINNED);
}

API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *dptr, void *p, unsigned flags) {
    ENTER(cuMemHostGetDevicePointer_v2);
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    AllocInfo a;
    if (!dptr || flags || !mem_find((uint64_t)(uintptr_t)p, &a) ||
        (a.kind != A_HOST_PINNED && a.kind != A_HOST_REGISTERED))
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = (uint64_t)(uintptr_t)p; /* unified addressing: the same address on both sides */
    return CUDA_SUCCESS;
}

API CUresult cuMemHostGetFlags(unsigned *flags, void *p) {
    ENTER(cuMemHostGetFlags);
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    AllocInfo a;
    if (!flags || !mem_find((uint64_t)(uintptr_t)p, &a) || (a.kind != A_HOST_PINNED && a.kind != A_HOST_REGISTERED))
        return CUDA_ERROR_INVALID_VALUE;
    *flags = a.flags | CU_MEMHOSTALLOC_DEVICEMAP;
    return CUDA_SUCCESS;
}

API CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned flags) {
    ENTER(cuMemHostRegister_v2);
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    if (!p || size == 0 || (flags & ~0xFu)) return CUDA_ERROR_INVALID_VALUE;
    return mem_register(c, p, size, flags);
}

API CUresult cuMemHostUnregister(void *p) {
    ENTER(cuMemHostUnregister);
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc) return rc;
    streams_sync_context(c);
    return mem_free((uint64_t)(uintptr_t)p, 1 << A_HOST_REGISTERED) ? CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
                                                                   : CUDA_SUCCESS;
}

/* ---- stream-ordered allocation: the default pool, allocations made when the stream reaches them ---- */

static int g_default_pool; /* its address is the pool handle */

API CUresult cuDeviceGetDefaultMemPool(void **pool, CUdevice dev) {
    ENTER(cuDeviceGetDefaultMemPool);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    *pool = &g_default_pool;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetMemPool(void **pool, CUdevice dev) {
    ENTER(cuDeviceGetMemPool);
    return cuDeviceGetDefaultMemPool(pool, dev);
}

static uint64_t g_pool_threshold;

API CUresult cuMemPoolGetAttribute(void *pool, int attr, void *value) {
    ENTER(cuMemPoolGetAttribute);
    NEED_INIT();
    if (pool != &g_default_pool) return CUDA_ERROR_INVALID_HANDLE;
    if (!value || attr < 1 || attr > 8) return CUDA_ERROR_INVALID_VALUE;
    if (attr <= 3) *(int *)value = 1; /* reuse policies: all on */
    else if (attr == 4) *(uint64_t *)value = g_pool_threshold;
    else *(uint64_t *)value = attr <= 6 ? mem_used() : mem_used(); /* reserved/used, current/high */
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolSetAttribute(void *pool, int attr, void *value) {
    ENTER(cuMemPoolSetAttribute);
    NEED_INIT();
    if (pool != &g_default_pool) return CUDA_ERROR_INVALID_HANDLE;
    if (!value || attr < 1 || attr > 8) return CUDA_ERROR_INVALID_VALUE;
    if (attr == 4) g_pool_threshold = *(uint64_t *)value;
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolTrimTo(void *pool, size_t keep) {
    ENTER(cuMemPoolTrimTo);
    (void)keep;
    NEED_INIT();
    return pool == &g_default_pool ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, void *hStream) {
    ENTER(cuMemAllocAsync);
    Context *c = NULL;
    Stream *s;
    CUresult rc = need_context(&c);
    if (rc || (rc = stream_resolve(hStream, c, &s))) return rc;
    if (!dptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    /* The address is needed now; memory is usable by work queued after this on the stream either way. */
    return mem_alloc(c, size, A_DEVICE, dptr);
}

API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, void *pool, void *hStream) {
    ENTER(cuMemAllocFromPoolAsync);
    if (pool != &g_default_pool) return CUDA_ERROR_INVALID_HANDLE;
    return cuMemAllocAsync(dptr, size, hStream);
}

static void free_when_reached(void *arg) {
    uint64_t *p = arg;
    mem_free(*p, 1 << A_DEVICE);
    free(p);
}

API CUresult cuMemFreeAsync(CUdeviceptr p, void *hStream) {
    ENTER(cuMemFreeAsync);
    Context *c = NULL;
    Stream *s;
    CUresult rc = need_context(&c);
    if (rc || (rc = stream_resolve(hStream, c, &s))) return rc;
    AllocInfo a;
    if (!mem_find(p, &a) || a.base != p || a.kind != A_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    uint64_t *arg = malloc(sizeof *arg);
    *arg = p;
    return stream_submit(s, free_when_reached, arg);
}

/* ---- pointer attributes ---- */

enum { MEMTYPE_HOST = 1, MEMTYPE_DEVICE = 2 };

static CUresult pointer_attribute(void *out, int attr, CUdeviceptr p) {
    AllocInfo a;
    int found = mem_find(p, &a);
    if (!found) {
        if (attr == 2 /* MEMORY_TYPE */ || attr == 1 || attr == 3 || attr == 4) return CUDA_ERROR_INVALID_VALUE;
    }
    int dev_mem = found && (a.kind == A_DEVICE || a.kind == A_MODULE_GLOBAL);
    switch (attr) {
    case 1: *(void **)out = a.ctx; break;
    case 2: *(unsigned *)out = dev_mem ? MEMTYPE_DEVICE : MEMTYPE_HOST; break;
    case 3: *(uint64_t *)out = p; break;
    case 4:
        if (dev_mem) return CUDA_ERROR_INVALID_VALUE;
        *(void **)out = (void *)(uintptr_t)p;
        break;
    case 6: *(int *)out = 1; break;
    case 7: *(uint64_t *)out = found ? a.serial : 0; break;
    case 8: *(int *)out = 0; break;
    case 9: *(int *)out = 0; break;
    case 10: *(int *)out = 0; break;
    case 11: *(uint64_t *)out = found ? a.base : 0; break;
    case 12: *(size_t *)out = found ? a.size : 0; break;
    case 13: *(int *)out = found; break;
    case 14: *(uint64_t *)out = 0; break;
    case 15: *(int *)out = 0; break;
    case 16: *(int *)out = 0; break; /* PROT_READWRITE */
    case 17: *(void **)out = NULL; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

API CUresult cuPointerGetAttribute(void *out, int attr, CUdeviceptr p) {
    ENTER(cuPointerGetAttribute);
    NEED_INIT();
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    return pointer_attribute(out, attr, p);
}

API CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, CUdeviceptr p) {
    ENTER(cuPointerGetAttributes);
    NEED_INIT();
    if (!attrs || !data) return CUDA_ERROR_INVALID_VALUE;
    AllocInfo a;
    int found = mem_find(p, &a);
    for (unsigned i = 0; i < n; i++) {
        if (!data[i]) continue;
        if (!found && attrs[i] == 2) { /* unknown memory is reported as type 0, not an error, here */
            *(unsigned *)data[i] = 0;
            continue;
        }
        if (!found && (attrs[i] == 1 || attrs[i] == 3 || attrs[i] == 4)) {
            memset(data[i], 0, sizeof(void *));
            continue;
        }
        CUresult rc = pointer_attribute(data[i], attrs[i], p);
        if (rc) return rc;
    }
    return CUDA_SUCCESS;
}

/* ---- copies and sets: queued on a stream; synchronous forms wait for it ---- */

typedef struct CopyWork {
    void *dst;
    const void *src;
    size_t n;
    void *staging;
} CopyWork;

static void run_copy(void *arg) {
    CopyWork *w = arg;
    memmove(w->dst, w->src, w->n);
    free(w->staging);
    free(w);
}

enum Side { HOST, DEVICE, EITHER };

/* A device-side range must lie inside one live allocation; a host side is the caller's memory, unless it
 * points into the fake's device address range (a freed or never-allocated device address). */
static CUresult check_side(uint64_t p, size_t n, int side) {
    if (!p && n) return CUDA_ERROR_INVALID_VALUE;
    if (!n) return CUDA_SUCCESS;
    AllocInfo a;
    if (mem_find(p, &a)) return p + n <= a.base + a.size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    return side == DEVICE || mem_in_device_range(p) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static CUresult copy(uint64_t dst, int dst_side, uint64_t src, int src_side, size_t n, void *hStream, int sync) {
    Context *c = NULL;
    Stream *s;
    CUresult rc = need_context(&c);
    if (rc || (rc = stream_resolve(hStream, c, &s))) return rc;
    if ((rc = check_side(dst, n, dst_side)) || (rc = check_side(src, n, src_side))) return rc;
    if (n == 0) return CUDA_SUCCESS;
    CopyWork *w = calloc(1, sizeof *w);
    w->dst = (void *)(uintptr_t)dst;
    w->src = (const void *)(uintptr_t)src;
    w->n = n;
    int src_pageable = !mem_is_host_pinned(w->src) && !mem_find(src, NULL);
    int dst_pageable = !mem_is_host_pinned(w->dst) && !mem_find(dst, NULL);
    if (!sync && src_pageable) { /* pageable source: staged now, so the caller may reuse it at once */
        w->staging = malloc(n);
        memcpy(w->staging, w->src, n);
        w->src = w->staging;
    }
    if ((rc = stream_submit(s, run_copy, w))) return rc;
    if (sync || dst_pageable) return stream_sync(s); /* a copy into pageable memory returns when done */
    return CUDA_SUCCESS;
}

API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    ENTER(cuMemcpyHtoD_v2);
    return copy(dst, DEVICE, (uint64_t)(uintptr_t)src, HOST, n, NULL, 1);
}
API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    ENTER(cuMemcpyDtoH_v2);
    return copy((uint64_t)(uintptr_t)dst, HOST, src, DEVICE, n, NULL, 1);
}
API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    ENTER(cuMemcpyDtoD_v2);
    return copy(dst, DEVICE, src, DEVICE, n, NULL, 1);
}
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *hStream) {
    ENTER(cuMemcpyHtoDAsync_v2);
    return copy(dst, DEVICE, (uint64_t)(uintptr_t)src, HOST, n, hStream, 0);
}
API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *hStream) {
    ENTER(cuMemcpyDtoHAsync_v2);
    return copy((uint64_t)(uintptr_t)dst, HOST, src, DEVICE, n, hStream, 0);
}
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *hStream) {
    ENTER(cuMemcpyDtoDAsync_v2);
    return copy(dst, DEVICE, src, DEVICE, n, hStream, 0);
}
API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    ENTER(cuMemcpy);
    return copy(dst, EITHER, src, EITHER, n, NULL, 1);
}
API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, void *hStream) {
    ENTER(cuMemcpyAsync);
    return copy(dst, EITHER, src, EITHER, n, hStream, 0);
}

typedef struct SetWork {
    uint8_t *dst;
    uint32_t value;
    unsigned elem;
    size_t width, height, pitch;
} SetWork;

static void run_set(void *arg) {
    SetWork *w = arg;
    for (size_t y = 0; y < w->height; y++) {
        uint8_t *row = w->dst + y * w->pitch;
        if (w->elem == 1) memset(row, (int)(w->value & 0xFF), w->width);
        else if (w->elem == 2) for (size_t i = 0; i < w->width; i++) ((uint16_t *)row)[i] = (uint16_t)w->value;
        else for (size_t i = 0; i < w->width; i++) ((uint32_t *)row)[i] = w->value;
    }
    free(w);
}

static CUresult set(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned elem, size_t width, size_t height,
                    void *hStream, int sync) {
    Context *c = NULL;
    Stream *s;
    CUresult rc = need_context(&c);
    if (rc || (rc = stream_resolve(hStream, c, &s))) return rc;
    if (dst % elem) return CUDA_ERROR_INVALID_VALUE;
    if (height > 1 && pitch < width * elem) return CUDA_ERROR_INVALID_VALUE;
    size_t span = height ? (height - 1) * pitch + width * elem : 0;
    if (span && (rc = check_side(dst, span, DEVICE))) return rc;
    if (!span) return CUDA_SUCCESS;
    SetWork *w = malloc(sizeof *w);
    *w = (SetWork){(uint8_t *)(uintptr_t)dst, value, elem, width, height, pitch};
    if ((rc = stream_submit(s, run_set, w))) return rc;
    return sync ? stream_sync(s) : CUDA_SUCCESS;
}

API CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
    ENTER(cuMemsetD8_v2);
    return set(d, n, v, 1, n, 1, NULL, 1);
}
API CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) {
    ENTER(cuMemsetD16_v2);
    return set(d, n * 2, v, 2, n, 1, NULL, 1);
}
API CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned v, size_t n) {
    ENTER(cuMemsetD32_v2);
    return set(d, n * 4, v, 4, n, 1, NULL, 1);
}
API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void *st) {
    ENTER(cuMemsetD8Async);
    return set(d, n, v, 1, n, 1, st, 0);
}
API CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, void *st) {
    ENTER(cuMemsetD16Async);
    return set(d, n * 2, v, 2, n, 1, st, 0);
}
API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, void *st) {
    ENTER(cuMemsetD32Async);
    return set(d, n * 4, v, 4, n, 1, st, 0);
}
API CUresult cuMemsetD2D8_v2(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h) {
    ENTER(cuMemsetD2D8_v2);
    return set(d, pitch, v, 1, w, h, NULL, 1);
}
API CUresult cuMemsetD2D16_v2(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h) {
    ENTER(cuMemsetD2D16_v2);
    return set(d, pitch, v, 2, w, h, NULL, 1);
}
API CUresult cuMemsetD2D32_v2(CUdeviceptr d, size_t pitch, unsigned v, size_t w, size_t h) {
    ENTER(cuMemsetD2D32_v2);
    return set(d, pitch, v, 4, w, h, NULL, 1);
}
API CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, void *st) {
    ENTER(cuMemsetD2D8Async);
    return set(d, pitch, v, 1, w, h, st, 0);
}
API CUresult cuMemsetD2D16Async(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h, void *st) {
    ENTER(cuMemsetD2D16Async);
    return set(d, pitch, v, 2, w, h, st, 0);
}
API CUresult cuMemsetD2D32Async(CUdeviceptr d, size_t pitch, unsigned v, size_t w, size_t h, void *st) {
    ENTER(cuMemsetD2D32Async);
    return set(d, pitch, v, 4, w, h, st, 0);
}
