/* Process-wide entry points: cuInit (reads the environment once), the driver version, error names and
 * descriptions (the export tables are export_tables.c's). Everything else needs cuInit first. */
#define _GNU_SOURCE
#include <stdio.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include "fake.h"

/* The lowest driver version reported: CUDA 13.5, the newest NVRTC the fake is used with today. Clients skip
 * or refuse PTX whose ISA is newer than the driver says it understands, so it must not be lower than the
 * NVRTC that produced the PTX. */
#define MIN_DRIVER_VERSION 13050
#define NVRTC_MAJORS_FROM 12
#define NVRTC_MAJORS_TO 20

int g_block_threads = 1;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void fake_init_once(void) {
    faults_from_env();
    const char *threads = getenv("IRONACCEL_FAKE_CUDA_THREADS");
    long n = threads && *threads ? atol(threads) : sysconf(_SC_NPROCESSORS_ONLN);
    g_block_threads = n < 1 ? 1 : n > 64 ? 64 : (int)n;
    fake_set_initialized(mem_init() == 0);
    if (fake_initialized()) checkpoint_agent_start();
    atexit(mem_report_at_exit);
}

API CUresult cuInit(unsigned flags) {
    ENTER(cuInit);
    if (flags) return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&g_once, fake_init_once);
    return fake_initialized() ? CUDA_SUCCESS : fake_forked() ? CUDA_ERROR_NOT_INITIALIZED : CUDA_ERROR_OUT_OF_MEMORY;
}

static int g_driver_version;
static pthread_once_t g_version_once = PTHREAD_ONCE_INIT;

/* The version of the newest NVRTC this process has loaded or can load (1000 * major + 10 * minor), 0 when
 * none is found. */
static int nvrtc_version(void) {
    int best = 0;
    for (int pass = 0; pass < 2; pass++) /* loaded already (found by soname) first, then the search path */
        for (int major = NVRTC_MAJORS_FROM; major <= NVRTC_MAJORS_TO; major++) {
            char name[32];
            snprintf(name, sizeof name, "libnvrtc.so.%d", major);
            void *lib = dlopen(name, RTLD_LAZY | RTLD_LOCAL | (pass == 0 ? RTLD_NOLOAD : 0));
            if (!lib) continue;
            int (*version)(int *, int *) = (int (*)(int *, int *))dlsym(lib, "nvrtcVersion");
            int maj = 0, min = 0;
            if (version && version(&maj, &min) == 0 && maj * 1000 + min * 10 > best) best = maj * 1000 + min * 10;
            dlclose(lib);
        }
    return best;
}

static void decide_driver_version(void) {
    int nvrtc = nvrtc_version();
    g_driver_version = nvrtc > MIN_DRIVER_VERSION ? nvrtc : MIN_DRIVER_VERSION;
}

/* Decided once per process, so every caller sees the same version. */
API CUresult cuDriverGetVersion(int *version) {
    ENTER(cuDriverGetVersion);
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&g_version_once, decide_driver_version);
    *version = g_driver_version;
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
