/* Modules and libraries from PTX text, functions/kernels and their attributes, launches, occupancy. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define CU_JIT_MAX_REGISTERS 0
#define CU_JIT_ERROR_LOG_BUFFER 5
#define CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6

typedef struct ModuleHandle {
    Module m;
    Function **functions; /* one handle per function, made on first request */
} ModuleHandle;

/* Loads PTX text into ctx (NULL: a library, which belongs to no context; its globals are freed at unload);
 * size: the image's bytes when known (a file), else IMAGE_SIZE_UNKNOWN. */
static CUresult load_module(Context *c, const void *image, size_t size, ModuleHandle **out, char *log, size_t loglen) {
    if (!image || !out) return CUDA_ERROR_INVALID_VALUE;
    const char *text;
    char *extracted;
    unsigned newest_target;
    TRY(image_ptx(image, size, &text, &extracted, &newest_target, log, loglen));
    CUresult rc = CUDA_SUCCESS;
    PtxModule *ptx = ptx_load(text, c, newest_target, log, loglen, &rc);
    if (ptx) ptx->max_registers = linked_max_registers(text); /* text may be extracted's, freed next */
    free(extracted);
    if (!ptx) {
        fake_log("module load failed: %s", log);
        return rc;
    }
    ModuleHandle *h = calloc(1, sizeof *h);
    h->m = (Module){c, ptx, 1, 1};
    h->functions = calloc((size_t)ptx->nfuncs, sizeof *h->functions);
    handle_add(h, H_MODULE);
    *out = h;
    return CUDA_SUCCESS;
}

/* load_module, with the JIT error log copied into the caller's CU_JIT_ERROR_LOG_BUFFER on failure. */
static CUresult load_with_options(Context *c, void **mod, const void *image, size_t size, unsigned nopts, int *opts,
                                  void **values) {
    char log[1024] = "";
    CUresult rc = load_module(c, image, size, (ModuleHandle **)mod, log, sizeof log);
    for (unsigned i = 0; rc == CUDA_SUCCESS && opts && values && i < nopts; i++) /* a direct load's own limit */
        if (opts[i] == CU_JIT_MAX_REGISTERS && (uintptr_t)values[i])
            ((ModuleHandle *)*mod)->m.ptx->max_registers = (uint32_t)(uintptr_t)values[i];
    for (unsigned i = 0; rc && opts && values && i < nopts; i++) {
        if (opts[i] != CU_JIT_ERROR_LOG_BUFFER) continue;
        size_t cap = 0;
        for (unsigned k = 0; k < nopts; k++)
            if (opts[k] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) cap = (size_t)(uintptr_t)values[k];
        if (cap && values[i]) snprintf(values[i], cap, "%s", log);
    }
    return rc;
}

API CUresult cuModuleLoadDataEx(void **mod, const void *image, unsigned nopts, int *opts, void **values) {
    ENTER(cuModuleLoadDataEx);
    NEED_CONTEXT(c);
    return load_with_options(c, mod, image, IMAGE_SIZE_UNKNOWN, nopts, opts, values);
}

API CUresult cuModuleLoadData(void **mod, const void *image) {
    ENTER(cuModuleLoadData);
    return cuModuleLoadDataEx(mod, image, 0, NULL, NULL);
}

API CUresult cuModuleLoad(void **mod, const char *path) {
    ENTER(cuModuleLoad);
    if (!path || !mod) return CUDA_ERROR_INVALID_VALUE;
    char *bytes;
    size_t n;
    TRY(image_read(path, &bytes, &n));
    Context *c = NULL;
    CUresult rc = need_context(&c);
    if (rc == CUDA_SUCCESS) rc = load_with_options(c, mod, bytes, n, 0, NULL, NULL);
    free(bytes);
    return rc;
}

API CUresult cuModuleLoadFatBinary(void **mod, const void *fatbin) {
    ENTER(cuModuleLoadFatBinary);
    return cuModuleLoadDataEx(mod, fatbin, 0, NULL, NULL);
}

static CUresult module_from(void *h, ModuleHandle **out) {
    if (!fake_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!h || !handle_ok(h, H_MODULE)) return CUDA_ERROR_INVALID_HANDLE;
    *out = h;
    return CUDA_SUCCESS;
}

/* A module's decoded PTX (tens of KiB) is freed once it is unloaded and nothing uses it any more: a launch from
 * its check until it ran and a graph node's kernel each hold a reference. A reference to a live module is taken
 * under module_lock together with the check that it is live, and the unload marks it dead under the same lock,
 * so an unload in another thread cannot free it between a launch's check and its reference. */
static pthread_mutex_t module_lock = PTHREAD_MUTEX_INITIALIZER;

/* A reference for a new launch or node: 0 once the module is unloaded (its handle is then stale). */
static int module_retain(Module *m) {
    pthread_mutex_lock(&module_lock);
    int alive = m->alive;
    if (alive) m->refs++;
    pthread_mutex_unlock(&module_lock);
    return alive;
}

/* Another reference for a copy of something that holds one (a graph node cloned), live or not. */
static void module_hold(Module *m) {
    pthread_mutex_lock(&module_lock);
    m->refs++;
    pthread_mutex_unlock(&module_lock);
}

static void module_release(Module *m) {
    pthread_mutex_lock(&module_lock);
    int last = --m->refs == 0;
    pthread_mutex_unlock(&module_lock);
    if (last) {
        ptx_free(m->ptx);
        m->ptx = NULL;
    }
}

void launch_spec_free(LaunchSpec *spec) {
    free(spec->params);
    module_release(spec->fn->module);
}

API CUresult cuModuleUnload(void *hmod) {
    ENTER(cuModuleUnload);
    ModuleHandle *h;
    TRY(module_from(hmod, &h));
    pthread_mutex_lock(&module_lock);
    int alive = h->m.alive;
    h->m.alive = 0;
    pthread_mutex_unlock(&module_lock);
    if (!alive) return CUDA_ERROR_INVALID_HANDLE; /* another thread unloaded it meanwhile */
    streams_sync_context(h->m.ctx); /* queued launches may still use its globals (a library: in any context) */
    handle_remove(h);
    for (int i = 0; i < h->m.ptx->nfuncs; i++)
        if (h->functions[i]) handle_remove(h->functions[i]);
    for (int i = 0; i < h->m.ptx->nglobals; i++) mem_free(h->m.ptx->global_addrs[i], 1 << A_MODULE_GLOBAL);
    /* the ModuleHandle and Function structs stay (a few hundred bytes): a stale handle is rejected by the
     * registry, and a new module's never takes its address */
    module_release(&h->m);
    return CUDA_SUCCESS;
}

static CUresult get_function(ModuleHandle *h, const char *name, int want_entry, Function **out) {
    if (!name || !out) return CUDA_ERROR_INVALID_VALUE;
    PtxModule *p = h->m.ptx;
    for (int i = 0; i < p->nfuncs; i++) {
        if (strcmp(p->funcs[i].name, name) || !p->funcs[i].defined || (want_entry && !p->funcs[i].is_entry))
            continue;
        if (!h->functions[i]) {
            Function *f = calloc(1, sizeof *f);
            f->module = &h->m;
            f->index = i;
            /* what is left of the 48 KiB a block has without opt-in: none once static memory is past it */
            f->max_dynamic_shared = p->funcs[i].shared_static < SHARED_PER_BLOCK
                ? SHARED_PER_BLOCK - (int)p->funcs[i].shared_static : 0;
            h->functions[i] = f;
            handle_add(f, H_FUNCTION);
        }
        *out = h->functions[i];
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_NOT_FOUND;
}

API CUresult cuModuleGetFunction(void **fn, void *hmod, const char *name) {
    ENTER(cuModuleGetFunction);
    ModuleHandle *h;
    TRY(module_from(hmod, &h));
    return get_function(h, name, 1, (Function **)fn);
}

static CUresult get_global(ModuleHandle *h, CUdeviceptr *dptr, size_t *bytes, const char *name) {
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    PtxModule *p = h->m.ptx;
    for (int i = 0; i < p->nglobals; i++)
        if (!strcmp(p->global_names[i], name)) {
            if (dptr) *dptr = p->global_addrs[i];
            if (bytes) *bytes = p->global_sizes[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, void *hmod, const char *name) {
    ENTER(cuModuleGetGlobal_v2);
    ModuleHandle *h;
    TRY(module_from(hmod, &h));
    return get_global(h, dptr, bytes, name);
}

/* ---- libraries: a module of no context (usable from every context, loadable without one, as on a real
 * driver); a kernel is its function ---- */

API CUresult cuLibraryLoadData(void **lib, const void *code, int *jit_opts, void **jit_vals, unsigned njit,
                               int *lib_opts, void **lib_vals, unsigned nlib) {
    ENTER(cuLibraryLoadData);
    (void)lib_opts, (void)lib_vals, (void)nlib;
    NEED_INIT();
    return load_with_options(NULL, lib, code, IMAGE_SIZE_UNKNOWN, njit, jit_opts, jit_vals);
}

API CUresult cuLibraryLoadFromFile(void **lib, const char *path, int *jit_opts, void **jit_vals, unsigned njit,
                                   int *lib_opts, void **lib_vals, unsigned nlib) {
    ENTER(cuLibraryLoadFromFile);
    NEED_INIT();
    if (!path || !lib) return CUDA_ERROR_INVALID_VALUE;
    char *bytes;
    size_t n;
    (void)lib_opts, (void)lib_vals, (void)nlib;
    TRY(image_read(path, &bytes, &n));
    CUresult rc = load_with_options(NULL, lib, bytes, n, njit, jit_opts, jit_vals);
    free(bytes);
    return rc;
}

API CUresult cuLibraryUnload(void *lib) {
    ENTER(cuLibraryUnload);
    return cuModuleUnload(lib);
}

API CUresult cuLibraryGetKernel(void **kernel, void *lib, const char *name) {
    ENTER(cuLibraryGetKernel);
    ModuleHandle *h;
    TRY(module_from(lib, &h));
    return get_function(h, name, 1, (Function **)kernel);
}

API CUresult cuLibraryGetModule(void **mod, void *lib) {
    ENTER(cuLibraryGetModule);
    ModuleHandle *h;
    TRY(module_from(lib, &h));
    if (!mod) return CUDA_ERROR_INVALID_VALUE;
    *mod = h;
    return CUDA_SUCCESS;
}

API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, void *lib, const char *name) {
    ENTER(cuLibraryGetGlobal);
    ModuleHandle *h;
    TRY(module_from(lib, &h));
    return get_global(h, dptr, bytes, name);
}

static CUresult function_from(void *h, Function **out) {
    if (!fake_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!h || !handle_ok(h, H_FUNCTION)) return CUDA_ERROR_INVALID_HANDLE;
    Function *f = h;
    if (!f->module->alive) return CUDA_ERROR_INVALID_HANDLE;
    *out = f;
    return CUDA_SUCCESS;
}

API CUresult cuKernelGetFunction(void **fn, void *kernel) {
    ENTER(cuKernelGetFunction);
    Function *f;
    TRY(function_from(kernel, &f));
    if (!fn) return CUDA_ERROR_INVALID_VALUE;
    *fn = f;
    return CUDA_SUCCESS;
}

static int max_block_threads(const PtxFunction *pf) {
    int n = 1024;
    if (pf->maxntid && (int)pf->maxntid < n) n = (int)pf->maxntid;
    if (pf->reqntid && (int)pf->reqntid < n) n = (int)pf->reqntid;
    return n;
}

/* NUM_REGS: the function's registers, at most 255 and at most what .maxnreg or CU_JIT_MAX_REGISTERS allow
 * (ptxas spills the rest; the interpreter needs no spilling, so only the figure is bounded). */
static int registers_per_thread(const PtxModule *p, const PtxFunction *pf) {
    uint32_t n = pf->nslots - pf->nconsts; /* the specials and the declared registers */
    if (n > 255) n = 255;
    if (pf->maxnreg && n > pf->maxnreg) n = pf->maxnreg;
    if (p->max_registers && n > p->max_registers) n = p->max_registers;
    return (int)n;
}

static CUresult function_attribute(Function *f, int attr, int *value) {
    const PtxModule *p = f->module->ptx;
    const PtxFunction *pf = &p->funcs[f->index];
    switch (attr) {
    case 0: *value = max_block_threads(pf); break;
    case 1: *value = (int)pf->shared_declared; break;
    case 2: *value = (int)p->const_bytes; break;
    case 3: *value = (int)pf->stack_local; break;
    case 4: *value = registers_per_thread(p, pf); break;
    case 5: *value = p->target_arch; break; /* PTX_VERSION: what the PTX was compiled for */
    case 6: *value = SIMULATED_SM; break;     /* BINARY_VERSION: what it runs as */
    case 7: *value = 0; break;
    case 8: *value = f->max_dynamic_shared; break;
    case 9: *value = -1; break;
    default:
        if (attr < 0 || attr >= 18) return CUDA_ERROR_INVALID_VALUE;
        *value = 0;
    }
    return CUDA_SUCCESS;
}

API CUresult cuFuncGetAttribute(int *value, int attr, void *hfunc) {
    ENTER(cuFuncGetAttribute);
    Function *f;
    TRY(function_from(hfunc, &f));
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    return function_attribute(f, attr, value);
}

static CUresult set_function_attribute(Function *f, int attr, int value) {
    if (attr == 8) {
        if (value < 0 || (int64_t)value + f->module->ptx->funcs[f->index].shared_static > SHARED_PER_BLOCK_OPTIN)
            return CUDA_ERROR_INVALID_VALUE;
        f->max_dynamic_shared = value;
        return CUDA_SUCCESS;
    }
    if (attr == 9) return value < -1 || value > 100 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    if (attr >= 10 && attr < 18) return CUDA_SUCCESS;
    return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuFuncSetAttribute(void *hfunc, int attr, int value) {
    ENTER(cuFuncSetAttribute);
    Function *f;
    TRY(function_from(hfunc, &f));
    return set_function_attribute(f, attr, value);
}

API CUresult cuKernelGetAttribute(int *value, int attr, void *kernel, CUdevice dev) {
    ENTER(cuKernelGetAttribute);
    Function *f;
    TRY(function_from(kernel, &f));
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    return function_attribute(f, attr, value);
}

API CUresult cuKernelSetAttribute(int attr, int value, void *kernel, CUdevice dev) {
    ENTER(cuKernelSetAttribute);
    Function *f;
    TRY(function_from(kernel, &f));
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    return set_function_attribute(f, attr, value);
}

/* Offset (required) and size (optional) of one kernel parameter in the param buffer; INVALID_VALUE past the last one (cuda.core
 * counts parameters by asking until it gets that). */
static CUresult param_info(void *h, size_t index, size_t *offset, size_t *size) {
    Function *f;
    TRY(function_from(h, &f));
    const PtxFunction *pf = &f->module->ptx->funcs[f->index];
    if (!pf->is_entry || index >= (size_t)pf->nparams || !offset) return CUDA_ERROR_INVALID_VALUE;
    *offset = pf->params[index].offset;
    if (size) *size = pf->params[index].size;
    return CUDA_SUCCESS;
}

/* A CUkernel's parameters are read from its function in the current context: none is INVALID_CONTEXT, as on
 * the H200 (cuda.core's test_num_args_error_handling). */
API CUresult cuKernelGetParamInfo(void *kernel, size_t index, size_t *offset, size_t *size) {
    ENTER(cuKernelGetParamInfo);
    NEED_CONTEXT(c);
    (void)c;
    return param_info(kernel, index, offset, size);
}

API CUresult cuFuncGetParamInfo(void *func, size_t index, size_t *offset, size_t *size) {
    ENTER(cuFuncGetParamInfo);
    return param_info(func, index, offset, size);
}

/* The L1/shared split and the bank width are not configurable on the simulated device: a preference is
 * checked and, as on sm_90, has no effect. */
API CUresult cuFuncSetCacheConfig(void *hfunc, int config) {
    ENTER(cuFuncSetCacheConfig);
    Function *f;
    TRY(function_from(hfunc, &f));
    return config < 0 || config > 3 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

API CUresult cuKernelSetCacheConfig(void *kernel, int config, CUdevice dev) {
    ENTER(cuKernelSetCacheConfig);
    Function *f;
    TRY(function_from(kernel, &f));
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    return config < 0 || config > 3 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

API CUresult cuFuncSetSharedMemConfig(void *hfunc, int config) {
    ENTER(cuFuncSetSharedMemConfig);
    Function *f;
    TRY(function_from(hfunc, &f));
    return config < 0 || config > 2 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* A NULL function or name is INVALID_VALUE (a forged handle INVALID_HANDLE), as on a real driver. */
static CUresult function_name(const char **name, void *h) {
    if (!name || !h) return CUDA_ERROR_INVALID_VALUE;
    Function *f;
    TRY(function_from(h, &f));
    *name = f->module->ptx->funcs[f->index].name;
    return CUDA_SUCCESS;
}

API CUresult cuFuncGetName(const char **name, void *hfunc) {
    ENTER(cuFuncGetName);
    return function_name(name, hfunc);
}

API CUresult cuKernelGetName(const char **name, void *kernel) {
    ENTER(cuKernelGetName);
    return function_name(name, kernel);
}

/* The library a kernel came from (a kernel of a context's module is no library's: INVALID_HANDLE). */
API CUresult cuKernelGetLibrary(void **lib, void *kernel) {
    ENTER(cuKernelGetLibrary);
    Function *f;
    TRY(function_from(kernel, &f));
    if (!lib) return CUDA_ERROR_INVALID_VALUE;
    if (f->module->ctx) return CUDA_ERROR_INVALID_HANDLE;
    *lib = f->module; /* Module is the first member of ModuleHandle */
    return CUDA_SUCCESS;
}

API CUresult cuFuncGetModule(void **mod, void *hfunc) {
    ENTER(cuFuncGetModule);
    Function *f;
    TRY(function_from(hfunc, &f));
    if (!mod) return CUDA_ERROR_INVALID_VALUE;
    *mod = f->module; /* Module is the first member of ModuleHandle */
    return CUDA_SUCCESS;
}

/* ---- launch ---- */

typedef struct LaunchWork {
    LaunchSpec spec;
    Context *ctx;
} LaunchWork;

static void run_launch(void *arg) {
    LaunchWork *w = arg;
    if (!w->ctx->sticky) {
        char report[1024] = "";
        CUresult rc = interp_launch(w->ctx, &w->spec, report, sizeof report);
        if (rc) { /* the report first: a call that sees the sticky error may read it at once */
            fake_log("%s", report);
            set_last_report(report);
            w->ctx->sticky = rc; /* sticky: the context is unusable afterwards, as on hardware */
        }
    }
    launch_spec_free(&w->spec);
    free(w);
}

static uint8_t *dup_params(const LaunchSpec *spec) {
    uint8_t *p = malloc(spec->param_bytes + 8);
    if (p) memcpy(p, spec->params, spec->param_bytes + 8);
    return p;
}

/* Queues the launch; its parameter buffer and module reference are the work item's from here on (let go of on
 * any outcome). */
static CUresult queue_launch(Stream *s, LaunchSpec spec) {
    LaunchWork *w = calloc(1, sizeof *w);
    if (!w) {
        launch_spec_free(&spec);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    w->ctx = s->ctx;
    w->spec = spec;
    CUresult rc = stream_submit(s, run_launch, w);
    if (rc) launch_spec_free(&w->spec), free(w);
    return rc;
}

/* Queues a copy of the launch (the op keeps its parameters: a graph launches it again). */
static CUresult submit_kernel(Stream *s, const StreamOp *op) {
    if (!handle_ok(op->u.kernel.fn, H_FUNCTION) || !module_retain(op->u.kernel.fn->module))
        return CUDA_ERROR_INVALID_HANDLE; /* its module was unloaded since the node was made */
    LaunchSpec spec = op->u.kernel;
    if (!(spec.params = dup_params(&op->u.kernel))) {
        module_release(spec.fn->module);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return queue_launch(s, spec);
}

static void hold_kernel(StreamOp *op) {
    op->u.kernel.params = dup_params(&op->u.kernel);
    module_hold(op->u.kernel.fn->module);
}

static void drop_kernel(StreamOp *op) { launch_spec_free(&op->u.kernel); }

static const StreamOpClass KERNEL_CLASS = {submit_kernel, hold_kernel, drop_kernel};

#define CU_LAUNCH_PARAM_END ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)

/* Packs kernelParams (an array of pointers to each value) or the `extra` buffer into the param layout. */
static CUresult pack_params(const PtxFunction *pf, void **params, void **extra, uint8_t *buf) {
    if (extra) {
        void *ptr = NULL;
        size_t size = 0;
        for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) ptr = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = *(size_t *)extra[i + 1];
            else return CUDA_ERROR_INVALID_VALUE;
        }
        if (!ptr || size < pf->param_bytes) return CUDA_ERROR_INVALID_VALUE;
        memcpy(buf, ptr, pf->param_bytes);
    } else if (pf->nparams) {
        if (!params) return CUDA_ERROR_INVALID_VALUE;
        for (int i = 0; i < pf->nparams; i++) {
            if (!params[i]) return CUDA_ERROR_INVALID_VALUE;
            memcpy(buf + pf->params[i].offset, params[i], pf->params[i].size);
        }
    }
    return CUDA_SUCCESS;
}

static CUresult pack_kernel_op(Function *f, const unsigned grid[3], const unsigned block[3], unsigned shared,
                               void **params, void **extra, StreamOp *op) {
    const PtxFunction *pf = &f->module->ptx->funcs[f->index];
    for (int i = 0; i < 3; i++)
        if (!grid[i] || !block[i]) return CUDA_ERROR_INVALID_VALUE;
    if (block[0] > 1024 || block[1] > 1024 || block[2] > 64 || grid[1] > 65535 || grid[2] > 65535 ||
        grid[0] > 2147483647u)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
    if (threads > (uint64_t)max_block_threads(pf)) return CUDA_ERROR_INVALID_VALUE;
    if (f->max_dynamic_shared < 0 || shared > (unsigned)f->max_dynamic_shared) return CUDA_ERROR_INVALID_VALUE;
    if (interp_block_bytes(f->module->ptx, pf, threads) > BLOCK_BYTES_MAX) {
        fake_log("launch of %s: a block of %llu threads needs %llu bytes of registers and local memory, more than "
                 "the %llu the fake gives a block", pf->name, (unsigned long long)threads,
                 (unsigned long long)interp_block_bytes(f->module->ptx, pf, threads), BLOCK_BYTES_MAX);
        return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    }
    uint8_t *buf = calloc(1, pf->param_bytes + 8);
    if (!buf) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = pack_params(pf, params, extra, buf);
    if (rc) {
        free(buf);
        return rc;
    }
    *op = (StreamOp){.kind = OPK_KERNEL, .cls = &KERNEL_CLASS};
    LaunchSpec *spec = &op->u.kernel;
    spec->fn = f;
    memcpy(spec->grid, grid, sizeof spec->grid);
    memcpy(spec->block, block, sizeof spec->block);
    spec->shared_bytes = shared;
    spec->params = buf;
    spec->param_bytes = pf->param_bytes;
    return CUDA_SUCCESS;
}

CUresult kernel_op(void *hfunc, const unsigned grid[3], const unsigned block[3], unsigned shared, void **params,
                   void **extra, StreamOp *op) {
    Function *f;
    TRY(function_from(hfunc, &f));
    if (!module_retain(f->module)) return CUDA_ERROR_INVALID_HANDLE; /* unloaded by another thread meanwhile */
    CUresult rc = pack_kernel_op(f, grid, block, shared, params, extra, op);
    if (rc) module_release(f->module);
    return rc;
}

static int blocks_per_sm(Function *f, int block_size, size_t dynamic_shared);

/* cooperative: the launch's blocks all run at once and it has a grid workspace (LaunchSpec.cooperative), kept
 * by a stream capture's node so that the graph launches it so again. */
static CUresult launch(void *hfunc, const unsigned grid[3], const unsigned block[3], unsigned shared,
                       void *hStream, void **params, void **extra, int cooperative) {
    NEED_CONTEXT(c);
    Stream *s;
    StreamOp op;
    TRY(stream_resolve(hStream, c, &s));
    TRY(kernel_op(hfunc, grid, block, shared, params, extra, &op));
    op.u.kernel.cooperative = cooperative;
    /* every block must be resident at once: no more than the occupancy calculator gives (as on hardware) */
    uint64_t nblocks = (uint64_t)grid[0] * grid[1] * grid[2], threads = (uint64_t)block[0] * block[1] * block[2];
    if (cooperative && nblocks > (uint64_t)g_block_threads * blocks_per_sm(op.u.kernel.fn, (int)threads, shared)) {
        launch_spec_free(&op.u.kernel);
        return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    }
    if (!s->capture) return queue_launch(s, op.u.kernel);
    CUresult rc = stream_capture(s, &op);
    launch_spec_free(&op.u.kernel);
    return rc;
}

API CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned shared, void *hStream, void **params, void **extra) {
    ENTER(cuLaunchKernel);
    unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    return launch(f, grid, block, shared, hStream, params, extra, 0);
}

API CUresult cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                       unsigned bz, unsigned shared, void *hStream, void **params) {
    ENTER(cuLaunchCooperativeKernel);
    unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    return launch(f, grid, block, shared, hStream, params, NULL, 1);
}

typedef struct LaunchAttribute {
    int id;
    int pad;
    union {
        char bytes[64];
        struct { unsigned x, y, z; } cluster;
    } value;
} LaunchAttribute;

typedef struct LaunchConfig {
    unsigned grid[3], block[3], shared;
    void *stream;
    LaunchAttribute *attrs;
    unsigned nattrs;
} LaunchConfig;

#define CU_LAUNCH_ATTRIBUTE_COOPERATIVE 2
#define CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION 4

/* Blocks in a cluster the config asks for (1 when it asks for none). */
static uint64_t cluster_blocks(const LaunchConfig *config) {
    uint64_t n = 1;
    for (unsigned i = 0; i < config->nattrs; i++) {
        const LaunchAttribute *a = &config->attrs[i];
        if (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
            n = (uint64_t)a->value.cluster.x * a->value.cluster.y * a->value.cluster.z;
    }
    return n;
}

API CUresult cuLaunchKernelEx(const LaunchConfig *config, void *f, void **params, void **extra) {
    ENTER(cuLaunchKernelEx);
    if (!config || (config->nattrs && !config->attrs)) return CUDA_ERROR_INVALID_VALUE;
    if (cluster_blocks(config) > 1) {
        fake_log("cuLaunchKernelEx: thread block clusters are not implemented");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    int cooperative = 0; /* the attribute's value is an int; the last one given counts */
    for (unsigned i = 0; i < config->nattrs; i++)
        if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE)
            cooperative = *(const int *)config->attrs[i].value.bytes != 0;
    return launch(f, config->grid, config->block, config->shared, config->stream, params, extra, cooperative);
}

/* ---- occupancy: 2048 threads and 32 blocks per multiprocessor, shared memory per SM ---- */

static int blocks_per_sm(Function *f, int block_size, size_t dynamic_shared) {
    if (block_size <= 0) return 0;
    int by_threads = THREADS_PER_SM / block_size;
    size_t shared = f->module->ptx->funcs[f->index].shared_static + dynamic_shared;
    int by_shared = shared ? (int)(SHARED_PER_SM / shared) : 32;
    int n = by_threads < by_shared ? by_threads : by_shared;
    return n < 32 ? n : 32;
}

API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *blocks, void *hfunc, int block_size,
                                                                  size_t dynamic_shared, unsigned flags) {
    ENTER(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags);
    Function *f;
    TRY(function_from(hfunc, &f));
    if (!blocks || block_size <= 0 || flags > 1) return CUDA_ERROR_INVALID_VALUE;
    *blocks = block_size > max_block_threads(&f->module->ptx->funcs[f->index])
                  ? 0
                  : blocks_per_sm(f, block_size, dynamic_shared);
    return CUDA_SUCCESS;
}

API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, void *hfunc, int block_size,
                                                         size_t dynamic_shared) {
    ENTER(cuOccupancyMaxActiveBlocksPerMultiprocessor);
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, hfunc, block_size, dynamic_shared, 0);
}

API CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block_size, void *hfunc,
                                              size_t (*shared_for)(int), size_t dynamic_shared, int limit) {
    ENTER(cuOccupancyMaxPotentialBlockSize);
    Function *f;
    TRY(function_from(hfunc, &f));
    if (!min_grid || !block_size) return CUDA_ERROR_INVALID_VALUE;
    int best = 0, best_active = -1;
    int top = max_block_threads(&f->module->ptx->funcs[f->index]);
    if (limit > 0 && limit < top) top = limit;
    for (int b = 32; b <= top; b += 32) {
        size_t dyn = shared_for ? shared_for(b) : dynamic_shared;
        int active = blocks_per_sm(f, b, dyn) * b;
        if (active >= best_active) best_active = active, best = b;
    }
    if (!best) best = top;
    *block_size = best;
    *min_grid = g_block_threads * blocks_per_sm(f, best, shared_for ? shared_for(best) : dynamic_shared);
    return CUDA_SUCCESS;
}

/* Clusters of more than one block cannot be launched here, so the largest cluster is 1 block. */
API CUresult cuOccupancyMaxPotentialClusterSize(int *size, void *hfunc, const LaunchConfig *config) {
    ENTER(cuOccupancyMaxPotentialClusterSize);
    Function *f;
    TRY(function_from(hfunc, &f));
    if (!size || !config || (config->nattrs && !config->attrs)) return CUDA_ERROR_INVALID_VALUE;
    *size = 1;
    return CUDA_SUCCESS;
}

/* Clusters of the config's size resident at once: none for a cluster of more than one block (not launchable
 * here); otherwise one block is a cluster, so the device's active blocks. */
API CUresult cuOccupancyMaxActiveClusters(int *clusters, void *hfunc, const LaunchConfig *config) {
    ENTER(cuOccupancyMaxActiveClusters);
    Function *f;
    TRY(function_from(hfunc, &f));
    if (!clusters || !config || (config->nattrs && !config->attrs)) return CUDA_ERROR_INVALID_VALUE;
    uint64_t threads = (uint64_t)config->block[0] * config->block[1] * config->block[2];
    if (!threads || threads > (uint64_t)max_block_threads(&f->module->ptx->funcs[f->index]))
        return CUDA_ERROR_INVALID_VALUE;
    *clusters = cluster_blocks(config) > 1 ? 0 : g_block_threads * blocks_per_sm(f, (int)threads, config->shared);
    return CUDA_SUCCESS;
}

API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *bytes, void *hfunc, int nblocks, int block_size) {
    ENTER(cuOccupancyAvailableDynamicSMemPerBlock);
    Function *f;
    TRY(function_from(hfunc, &f));
    if (!bytes || nblocks <= 0 || block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
    /* The SM's share per block, capped by what one block may have: 48 KiB unless the function opted in. */
    size_t per = SHARED_PER_SM / (size_t)nblocks;
    size_t st = f->module->ptx->funcs[f->index].shared_static;
    size_t dynamic = per > st ? per - st : 0;
    *bytes = dynamic < (size_t)f->max_dynamic_shared ? dynamic : (size_t)f->max_dynamic_shared;
    return CUDA_SUCCESS;
}
