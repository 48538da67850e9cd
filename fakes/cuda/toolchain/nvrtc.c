/* libnvrtc.so.N of the simulated toolchain: every call goes to the real NVRTC; the cubin of a program
 * (nvrtcGetCUBINSize / nvrtcGetCUBIN) is the real one plus a section holding the program's PTX, from the
 * real nvrtcGetPTX of the same compilation. A real driver runs its machine code; the fake runs the PTX. */
#include <stdlib.h>
#include <string.h>

#include "shim.h"

typedef int nvrtcResult;
typedef void *nvrtcProgram;
#define NVRTC_SUCCESS 0
#define NVRTC_ERROR_OUT_OF_MEMORY 1
#define NVRTC_ERROR_INVALID_PROGRAM 4
#define NVRTC_ERROR_INTERNAL_ERROR 11

static RealLibrary g_nvrtc = REAL_LIBRARY("IRONACCEL_FAKE_NVRTC_LIBRARY", "NVRTC");

#define REAL_AS(var, ret, name, params) ret(*var) params = (ret(*) params)shim_real(&g_nvrtc, #name)
#define REAL(ret, name, params) REAL_AS(real, ret, name, params)

/* A function passed through as it is. */
#define FORWARD(name, params, args)                                  \
    API nvrtcResult name params {                                    \
        REAL(nvrtcResult, name, params);                             \
        return real ? real args : NVRTC_ERROR_INTERNAL_ERROR;        \
    }

API const char *nvrtcGetErrorString(nvrtcResult result) {
    REAL(const char *, nvrtcGetErrorString, (nvrtcResult));
    return real ? real(result) : "NVRTC_ERROR_INTERNAL_ERROR (the real NVRTC could not be loaded)";
}

FORWARD(nvrtcVersion, (int *major, int *minor), (major, minor))
FORWARD(nvrtcGetNumSupportedArchs, (int *n), (n))
FORWARD(nvrtcGetSupportedArchs, (int *archs), (archs))
FORWARD(nvrtcCreateProgram,
        (nvrtcProgram * prog, const char *src, const char *name, int n, const char *const *headers,
         const char *const *include_names),
        (prog, src, name, n, headers, include_names))
FORWARD(nvrtcGetPTXSize, (nvrtcProgram prog, size_t *size), (prog, size))
FORWARD(nvrtcGetPTX, (nvrtcProgram prog, char *ptx), (prog, ptx))
FORWARD(nvrtcGetLTOIRSize, (nvrtcProgram prog, size_t *size), (prog, size))
FORWARD(nvrtcGetLTOIR, (nvrtcProgram prog, char *ltoir), (prog, ltoir))
FORWARD(nvrtcGetOptiXIRSize, (nvrtcProgram prog, size_t *size), (prog, size))
FORWARD(nvrtcGetOptiXIR, (nvrtcProgram prog, char *optixir), (prog, optixir))
FORWARD(nvrtcGetTileIRSize, (nvrtcProgram prog, size_t *size), (prog, size))
FORWARD(nvrtcGetTileIR, (nvrtcProgram prog, char *tileir), (prog, tileir))
FORWARD(nvrtcGetProgramLogSize, (nvrtcProgram prog, size_t *size), (prog, size))
FORWARD(nvrtcGetProgramLog, (nvrtcProgram prog, char *log), (prog, log))
FORWARD(nvrtcAddNameExpression, (nvrtcProgram prog, const char *const expr), (prog, expr))
FORWARD(nvrtcGetLoweredName, (nvrtcProgram prog, const char *const expr, const char **lowered), (prog, expr, lowered))
FORWARD(nvrtcGetPCHHeapSize, (size_t *size), (size))
FORWARD(nvrtcSetPCHHeapSize, (size_t size), (size))
FORWARD(nvrtcGetPCHCreateStatus, (nvrtcProgram prog), (prog))
FORWARD(nvrtcGetPCHHeapSizeRequired, (nvrtcProgram prog, size_t *size), (prog, size))
FORWARD(nvrtcSetFlowCallback, (nvrtcProgram prog, int (*callback)(void *, void *), void *payload),
        (prog, callback, payload))
FORWARD(nvrtcInstallBundledHeaders, (const char *path, unsigned flags, const char **log), (path, flags, log))
FORWARD(nvrtcGetBundledHeadersInfo, (void *info, const char **log), (info, log))
FORWARD(nvrtcRemoveBundledHeaders, (const char *path, const char **log), (path, log))

/* The cubin (with its PTX) each program returns, made once per compilation. */
typedef struct Cubin {
    nvrtcProgram prog;
    void *bytes;
    size_t size;
    struct Cubin *next;
} Cubin;

static Cubin *g_cubins;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static void forget(nvrtcProgram prog) {
    pthread_mutex_lock(&g_mu);
    for (Cubin **c = &g_cubins; *c; c = &(*c)->next)
        if ((*c)->prog == prog) {
            Cubin *gone = *c;
            *c = gone->next;
            free(gone->bytes);
            free(gone);
            break;
        }
    pthread_mutex_unlock(&g_mu);
}

API nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int n, const char *const *options) {
    REAL(nvrtcResult, nvrtcCompileProgram, (nvrtcProgram, int, const char *const *));
    if (!real) return NVRTC_ERROR_INTERNAL_ERROR;
    forget(prog); /* a new compilation, a new cubin */
    return real(prog, n, options);
}

API nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog) {
    REAL(nvrtcResult, nvrtcDestroyProgram, (nvrtcProgram *));
    if (!real) return NVRTC_ERROR_INTERNAL_ERROR;
    if (prog) forget(*prog);
    return real(prog);
}

/* The real cubin with the program's PTX added; the real cubin alone (which the fake refuses, saying why)
 * when the compilation has no PTX. */
static nvrtcResult make_cubin(nvrtcProgram prog, Cubin *c) {
    REAL_AS(real_size, nvrtcResult, nvrtcGetCUBINSize, (nvrtcProgram, size_t *));
    REAL_AS(real_cubin, nvrtcResult, nvrtcGetCUBIN, (nvrtcProgram, char *));
    if (!real_size || !real_cubin) return NVRTC_ERROR_INTERNAL_ERROR;
    size_t size = 0;
    nvrtcResult rc = real_size(prog, &size);
    if (rc != NVRTC_SUCCESS || size == 0) { /* no cubin (compiled for a virtual architecture): as NVRTC says */
        c->size = size;
        return rc;
    }
    char *cubin = malloc(size);
    if (!cubin) return NVRTC_ERROR_OUT_OF_MEMORY;
    if ((rc = real_cubin(prog, cubin)) != NVRTC_SUCCESS) {
        free(cubin);
        return rc;
    }
    size_t ptx_size = 0;
    char *ptx = NULL;
    if (nvrtcGetPTXSize(prog, &ptx_size) == NVRTC_SUCCESS && ptx_size && (ptx = calloc(1, ptx_size + 1)) &&
        nvrtcGetPTX(prog, ptx) == NVRTC_SUCCESS && shim_elf_with_ptx(cubin, size, ptx, &c->bytes, &c->size) == 0) {
        free(cubin);
    } else {
        shim_log("nvrtcGetCUBIN: the compilation has no PTX to add: the cubin is machine code only");
        c->bytes = cubin;
        c->size = size;
    }
    free(ptx);
    return NVRTC_SUCCESS;
}

static nvrtcResult cubin_of(nvrtcProgram prog, Cubin **out) {
    if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
    pthread_mutex_lock(&g_mu);
    Cubin *c = g_cubins;
    while (c && c->prog != prog) c = c->next;
    nvrtcResult rc = NVRTC_SUCCESS;
    if (!c) {
        c = calloc(1, sizeof *c);
        rc = c ? make_cubin(prog, c) : NVRTC_ERROR_OUT_OF_MEMORY;
        if (rc == NVRTC_SUCCESS) {
            c->prog = prog;
            c->next = g_cubins;
            g_cubins = c;
        } else {
            free(c);
            c = NULL;
        }
    }
    pthread_mutex_unlock(&g_mu);
    *out = c;
    return rc;
}

API nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *size) {
    if (!size) { /* the real NVRTC's answer to a NULL argument */
        REAL(nvrtcResult, nvrtcGetCUBINSize, (nvrtcProgram, size_t *));
        return real ? real(prog, size) : NVRTC_ERROR_INTERNAL_ERROR;
    }
    Cubin *c;
    nvrtcResult rc = cubin_of(prog, &c);
    if (rc == NVRTC_SUCCESS) *size = c->size;
    return rc;
}

API nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin) {
    if (!cubin) {
        REAL(nvrtcResult, nvrtcGetCUBIN, (nvrtcProgram, char *));
        return real ? real(prog, cubin) : NVRTC_ERROR_INTERNAL_ERROR;
    }
    Cubin *c;
    nvrtcResult rc = cubin_of(prog, &c);
    if (rc == NVRTC_SUCCESS && c->bytes) memcpy(cubin, c->bytes, c->size);
    return rc;
}
