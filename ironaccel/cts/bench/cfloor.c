/* The C floor of `ironaccel bench`: the CUDA driver calls of the raw floor, made from C with nothing in
 * between, so every row can say how far ironaccel (and cuda.bindings) are from what the driver allows.
 *
 *     cfloor LIBCUDA IMAGE_FILE|- SIZE...
 *
 * loads LIBCUDA with dlopen (libcuda.so.1, or the fake's path), sets up device 0's primary context, a
 * non-blocking stream, an event, a device buffer and a pageable and a pinned host buffer per SIZE, and the
 * kernels fill_u32 and saxpy from IMAGE_FILE (PTX or a cubin, for cuModuleLoadData; "-": none). It then
 * prints "ready CASE..." (the cases it can time, named as the bench names them) and serves requests on
 * stdin, one per line: "CASE COUNT" runs the operation COUNT times and prints the nanoseconds measured
 * ("error OP CODE NAME" when a driver call failed).
 * What is timed matches the Python implementations (ironaccel/cts/bench/stats.py): "call only" rows time each
 * call with the synchronize after it untimed, "launch.async" and "launch.args4" leave the final synchronize
 * out, everything else is timed whole. End of input ends the program.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

enum { STREAM_NON_BLOCKING = 1, EVENT_DISABLE_TIMING = 2, ALLOC_BYTES = 1024, KERNEL_BYTES = 256, MAX_SIZES = 32,
       CAPTURE_MODE_RELAXED = 2, GRAPH_LAUNCHES = 100 /* cases.GRAPH_LAUNCHES */ };

/* Every driver entry point used: X(symbol, parameter list). */
#define DRIVER_CALLS(X)                                                                                       \
    X(cuInit, (unsigned))                                                                                     \
    X(cuGetErrorName, (CUresult, const char **))                                                              \
    X(cuDeviceGet, (CUdevice *, int))                                                                         \
    X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                                                      \
    X(cuDevicePrimaryCtxRelease_v2, (CUdevice))                                                               \
    X(cuCtxSetCurrent, (CUcontext))                                                                           \
    X(cuStreamCreate, (CUstream *, unsigned))                                                                 \
    X(cuStreamDestroy_v2, (CUstream))                                                                         \
    X(cuStreamSynchronize, (CUstream))                                                                        \
    X(cuEventCreate, (CUevent *, unsigned))                                                                   \
    X(cuEventDestroy_v2, (CUevent))                                                                           \
    X(cuEventRecord, (CUevent, CUstream))                                                                     \
    X(cuEventSynchronize, (CUevent))                                                                          \
    X(cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream))                                                     \
    X(cuMemFreeAsync, (CUdeviceptr, CUstream))                                                                \
    X(cuMemAlloc_v2, (CUdeviceptr *, size_t))                                                                 \
    X(cuMemFree_v2, (CUdeviceptr))                                                                            \
    X(cuMemHostAlloc, (void **, size_t, unsigned))                                                            \
    X(cuMemFreeHost, (void *))                                                                                \
    X(cuMemcpyHtoDAsync_v2, (CUdeviceptr, const void *, size_t, CUstream))                                   \
    X(cuMemcpyDtoHAsync_v2, (void *, CUdeviceptr, size_t, CUstream))                                         \
    X(cuModuleLoadData, (CUmodule *, const void *))                                                           \
    X(cuModuleUnload, (CUmodule))                                                                             \
    X(cuModuleGetFunction, (CUfunction *, CUmodule, const char *))                                            \
    X(cuStreamBeginCapture_v2, (CUstream, int))                                                               \
    X(cuStreamEndCapture, (CUstream, CUgraph *))                                                              \
    X(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))                              \
    X(cuGraphLaunch, (CUgraphExec, CUstream))                                                                 \
    X(cuGraphExecDestroy, (CUgraphExec))                                                                      \
    X(cuGraphDestroy, (CUgraph))                                                                              \
    X(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,     \
                       CUstream, void **, void **))

#define DECLARE(name, params) static CUresult(*name) params;
DRIVER_CALLS(DECLARE)

static char failure[256]; /* the failed call of the last request */

/* Make a driver call; on failure record it and leave the enclosing function with -1. */
#define CALL(name, ...)                                                                                       \
    do {                                                                                                      \
        CUresult result_ = name(__VA_ARGS__);                                                                 \
        if (result_ != 0) return fail(#name, result_);                                                        \
    } while (0)

static long long fail(const char *op, CUresult code) {
    const char *text = NULL;
    if (cuGetErrorName == NULL || cuGetErrorName(code, &text) != 0 || text == NULL) text = "unknown";
    snprintf(failure, sizeof failure, "error %s %d %s", op, code, text);
    return -1;
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static struct {
    CUdevice device;
    CUcontext context;
    CUstream stream;
    CUevent event;
    int nsizes;
    size_t sizes[MAX_SIZES];
    CUdeviceptr device_buffers[MAX_SIZES];
    void *pageable[MAX_SIZES], *pinned[MAX_SIZES];
    CUmodule module;
    CUfunction empty, four_args;
    CUdeviceptr x, y;
    unsigned value, zero;
    float a;
    void *empty_params[3], *four_params[4];
    CUgraphExec graph; /* GRAPH_LAUNCHES empty launches, captured */
} s;

static long long alloc_free(long n) {
    for (long i = 0; i < n; i++) {
        CUdeviceptr p;
        CALL(cuMemAllocAsync, &p, ALLOC_BYTES, s.stream);
        CALL(cuMemFreeAsync, p, s.stream);
    }
    return 0;
}

static long long stream_sync(long n) {
    for (long i = 0; i < n; i++) CALL(cuStreamSynchronize, s.stream);
    return 0;
}

static long long event_record_sync(long n) {
    for (long i = 0; i < n; i++) {
        CALL(cuEventRecord, s.event, s.stream);
        CALL(cuEventSynchronize, s.event);
    }
    return 0;
}

static long long launch_n(CUfunction f, void **params, long n) {
    for (long i = 0; i < n; i++) CALL(cuLaunchKernel, f, 1, 1, 1, 1, 1, 1, 0, s.stream, params, NULL);
    return 0;
}

static long long graph_async(long n) {
    long long start = now_ns();
    for (long i = 0; i < n; i++) CALL(cuGraphLaunch, s.graph, s.stream);
    long long elapsed = now_ns() - start;
    CALL(cuStreamSynchronize, s.stream);
    return elapsed;
}

/* The timed operations that run whole; -1 on a driver failure. */
typedef long long (*Loop)(long n);

static long long timed(Loop loop, long n) {
    long long start = now_ns();
    if (loop(n) < 0) return -1;
    return now_ns() - start;
}

static long long launch_async(CUfunction f, void **params, long n) {
    long long start = now_ns();
    if (launch_n(f, params, n) < 0) return -1;
    long long elapsed = now_ns() - start;
    CALL(cuStreamSynchronize, s.stream);
    return elapsed;
}

static long long launch_single(long n) {
    long long total = 0;
    for (long i = 0; i < n; i++) {
        long long start = now_ns();
        CALL(cuLaunchKernel, s.empty, 1, 1, 1, 1, 1, 1, 0, s.stream, s.empty_params, NULL);
        total += now_ns() - start;
        CALL(cuStreamSynchronize, s.stream);
    }
    return total;
}

static long long launch_sync(long n) {
    for (long i = 0; i < n; i++) {
        CALL(cuLaunchKernel, s.empty, 1, 1, 1, 1, 1, 1, 0, s.stream, s.empty_params, NULL);
        CALL(cuStreamSynchronize, s.stream);
    }
    return 0;
}

/* htod (call only when `call_only`: each copy timed alone, its synchronize untimed) and dtoh copies. */
static long long copy(int htod, int call_only, void *host, CUdeviceptr dev, size_t size, long n) {
    long long total = 0, start = now_ns();
    for (long i = 0; i < n; i++) {
        long long t0 = call_only ? now_ns() : 0;
        if (htod)
            CALL(cuMemcpyHtoDAsync_v2, dev, host, size, s.stream);
        else
            CALL(cuMemcpyDtoHAsync_v2, host, dev, size, s.stream);
        if (call_only) total += now_ns() - t0;
        CALL(cuStreamSynchronize, s.stream);
    }
    return call_only ? total : now_ns() - start;
}

static int size_index(size_t size) {
    for (int i = 0; i < s.nsizes; i++)
        if (s.sizes[i] == size) return i;
    return -1;
}

/* One request: the ns measured, -1 (failure says why) or -2 (no such case). */
static long long serve(const char *name, long n) {
    if (!strcmp(name, "alloc_free.device") || !strcmp(name, "alloc_free.pool")) return timed(alloc_free, n);
    if (!strcmp(name, "stream_sync")) return timed(stream_sync, n);
    if (!strcmp(name, "event_record_sync")) return timed(event_record_sync, n);
    if (s.module != NULL) {
        if (!strcmp(name, "launch.async")) return launch_async(s.empty, s.empty_params, n);
        if (!strcmp(name, "launch.args4")) return launch_async(s.four_args, s.four_params, n);
        if (!strcmp(name, "launch.single")) return launch_single(n);
        if (!strcmp(name, "launch.sync")) return timed(launch_sync, n);
        if (!strcmp(name, "launch.x100")) return launch_async(s.empty, s.empty_params, GRAPH_LAUNCHES * n);
        if (!strcmp(name, "graph.x100")) return graph_async(n);
    }
    char direction[8], memory[16], rest[8] = "";
    size_t size;
    int fields = sscanf(name, "%7[a-z].%15[a-z].%zu.%7s", direction, memory, &size, rest);
    int i = fields >= 3 ? size_index(size) : -1;
    int htod = !strcmp(direction, "htod"), call_only = fields == 4 && !strcmp(rest, "call");
    if (i < 0 || (!htod && strcmp(direction, "dtoh")) || (fields == 4 && (!call_only || !htod))) return -2;
    void *host = !strcmp(memory, "pinned") ? s.pinned[i] : !strcmp(memory, "pageable") ? s.pageable[i] : NULL;
    if (host == NULL) return -2;
    return copy(htod, call_only, host, s.device_buffers[i], size, n);
}

static long long setup(const char *image_file) {
    CALL(cuInit, 0);
    CALL(cuDeviceGet, &s.device, 0);
    CALL(cuDevicePrimaryCtxRetain, &s.context, s.device);
    CALL(cuCtxSetCurrent, s.context);
    CALL(cuStreamCreate, &s.stream, STREAM_NON_BLOCKING);
    CALL(cuEventCreate, &s.event, EVENT_DISABLE_TIMING);
    for (int i = 0; i < s.nsizes; i++) {
        CALL(cuMemAlloc_v2, &s.device_buffers[i], s.sizes[i]);
        CALL(cuMemHostAlloc, &s.pinned[i], s.sizes[i], 0);
        s.pageable[i] = malloc(s.sizes[i]);
        if (s.pageable[i] == NULL) return fail("malloc", 0);
        memset(s.pinned[i], 7, s.sizes[i]); /* touched, as in Python: no copy pays for first-touch faults */
        memset(s.pageable[i], 7, s.sizes[i]);
    }
    if (strcmp(image_file, "-") != 0) {
        FILE *f = fopen(image_file, "rb");
        if (f == NULL) return fail("fopen", 0);
        fseek(f, 0, SEEK_END);
        long length = ftell(f);
        rewind(f);
        char *image = calloc((size_t)length + 1, 1);
        size_t got = image ? fread(image, 1, (size_t)length, f) : 0;
        fclose(f);
        if (got != (size_t)length) return fail("fread", 0);
        CUresult loaded = cuModuleLoadData(&s.module, image);
        free(image);
        if (loaded != 0) return fail("cuModuleLoadData", loaded);
        CALL(cuModuleGetFunction, &s.empty, s.module, "fill_u32");
        CALL(cuModuleGetFunction, &s.four_args, s.module, "saxpy");
        CALL(cuMemAlloc_v2, &s.x, KERNEL_BYTES);
        CALL(cuMemAlloc_v2, &s.y, KERNEL_BYTES);
        s.value = 7, s.zero = 0, s.a = 2.0f; /* n = 0: the kernels check bounds and do nothing */
        s.empty_params[0] = &s.x, s.empty_params[1] = &s.value, s.empty_params[2] = &s.zero;
        s.four_params[0] = &s.x, s.four_params[1] = &s.y, s.four_params[2] = &s.a, s.four_params[3] = &s.zero;
        CUstream capture; /* captured on a stream of its own, as ironaccel does */
        CUgraph graph;
        CALL(cuStreamCreate, &capture, STREAM_NON_BLOCKING);
        CALL(cuStreamBeginCapture_v2, capture, CAPTURE_MODE_RELAXED);
        for (int i = 0; i < GRAPH_LAUNCHES; i++)
            CALL(cuLaunchKernel, s.empty, 1, 1, 1, 1, 1, 1, 0, capture, s.empty_params, NULL);
        CALL(cuStreamEndCapture, capture, &graph);
        CALL(cuGraphInstantiateWithFlags, &s.graph, graph, 0);
        CALL(cuGraphDestroy, graph);
        CALL(cuStreamDestroy_v2, capture);
    }
    return 0;
}

static void teardown(void) {
    if (s.stream) cuStreamSynchronize(s.stream);
    if (s.graph) cuGraphExecDestroy(s.graph);
    if (s.module) {
        cuMemFree_v2(s.x);
        cuMemFree_v2(s.y);
        cuModuleUnload(s.module);
    }
    for (int i = 0; i < s.nsizes; i++) {
        if (s.device_buffers[i]) cuMemFree_v2(s.device_buffers[i]);
        if (s.pinned[i]) cuMemFreeHost(s.pinned[i]);
        free(s.pageable[i]);
    }
    if (s.event) cuEventDestroy_v2(s.event);
    if (s.stream) cuStreamDestroy_v2(s.stream);
    if (s.context) cuDevicePrimaryCtxRelease_v2(s.device);
}

static void print_cases(void) {
    static const char *memories[] = {"pageable", "pinned"};
    printf("ready alloc_free.device alloc_free.pool stream_sync event_record_sync");
    if (s.module) printf(" launch.async launch.args4 launch.single launch.sync launch.x100 graph.x100");
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < s.nsizes; i++)
            printf(" htod.%s.%zu.call htod.%s.%zu dtoh.%s.%zu", memories[m], s.sizes[i], memories[m], s.sizes[i],
                   memories[m], s.sizes[i]);
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc < 3 || argc - 3 > MAX_SIZES) {
        fprintf(stderr, "usage: cfloor LIBCUDA IMAGE_FILE|- SIZE... (at most %d sizes)\n", MAX_SIZES);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        printf("error dlopen %s\n", dlerror());
        return 1;
    }
#define RESOLVE(name, params)                                                                                 \
    *(void **)&name = dlsym(lib, #name);                                                                      \
    if (name == NULL) {                                                                                       \
        printf("error dlsym %s not found in %s\n", #name, argv[1]);                                           \
        return 1;                                                                                             \
    }
    DRIVER_CALLS(RESOLVE)
    s.nsizes = argc - 3;
    for (int i = 0; i < s.nsizes; i++) s.sizes[i] = strtoull(argv[3 + i], NULL, 10);
    if (setup(argv[2]) < 0) {
        printf("%s\n", failure);
        teardown();
        return 1;
    }
    print_cases();
    fflush(stdout);
    char line[128], name[96];
    long n;
    while (fgets(line, sizeof line, stdin) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        long long ns = sscanf(line, "%95s %ld", name, &n) == 2 && n > 0 ? serve(name, n) : -2;
        if (ns == -1)
            printf("%s\n", failure);
        else if (ns == -2)
            printf("error request unknown: %s\n", line);
        else
            printf("%lld\n", ns);
        fflush(stdout);
    }
    teardown();
    return 0;
}
