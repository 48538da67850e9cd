/* The driver linker (cuLink*) over what the fake runs: PTX inputs, given as text or carried by fatbins and
 * ELF files (image.c). The linked image is the fake's own: the inputs' PTX, one module after another, which
 * cuModuleLoadData and cuLibraryLoadData load like any PTX; calls between inputs resolve when it is
 * decoded. cuLinkComplete decodes it once, so an unresolved call or bad PTX fails the link (with the
 * line in the error log) rather than the later load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"
#include "linked_image.h"

#define CU_JIT_MAX_REGISTERS 0
#define CU_JIT_INFO_LOG_BUFFER 3
#define CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES 4
#define CU_JIT_ERROR_LOG_BUFFER 5
#define CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6
enum { INPUT_CUBIN = 0, INPUT_PTX = 1, INPUT_FATBINARY = 2, INPUT_OBJECT = 3, INPUT_LIBRARY = 4, INPUT_NVVM = 5 };


typedef struct LinkState {
    char *text; /* the inputs' PTX so far, then the linked image (owned: valid until cuLinkDestroy) */
    size_t len;
    int inputs;
    char *error_log, *info_log; /* the caller's buffers (CU_JIT_*_LOG_BUFFER) */
    size_t error_cap, info_cap;
} LinkState;

static void log_error(LinkState *l, const char *name, const char *text) {
    if (l->error_log && l->error_cap) snprintf(l->error_log, l->error_cap, "%s: %s", name ? name : "input", text);
    fake_log("link: %s: %s", name ? name : "input", text);
}

unsigned linked_max_registers(const char *text) {
    size_t h = strlen(LINKED_HEADER), m = strlen(MAX_REGISTERS_LINE);
    if (strncmp(text, LINKED_HEADER, h) || strncmp(text + h, MAX_REGISTERS_LINE, m)) return 0;
    return (unsigned)strtoul(text + h + m, NULL, 10);
}

API CUresult cuLinkCreate_v2(unsigned nopts, int *opts, void **values, void **state) {
    ENTER(cuLinkCreate_v2);
    NEED_CONTEXT(c);
    if (!state || (nopts && (!opts || !values))) return CUDA_ERROR_INVALID_VALUE;
    LinkState *l = calloc(1, sizeof *l);
    if (!l || !(l->text = strdup(LINKED_HEADER))) {
        free(l);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    l->len = strlen(LINKED_HEADER);
    for (unsigned i = 0; i < nopts; i++) { /* other JIT options change nothing the interpreter does */
        size_t v = (size_t)(uintptr_t)values[i];
        if (opts[i] == CU_JIT_MAX_REGISTERS && v) {
            char line[96];
            int n = snprintf(line, sizeof line, MAX_REGISTERS_LINE "%u\n", (unsigned)v);
            char *grown = realloc(l->text, l->len + (size_t)n + 1);
            if (!grown) {
                free(l->text);
                free(l);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            memcpy(grown + l->len, line, (size_t)n + 1);
            l->text = grown;
            l->len += (size_t)n;
        } else if (opts[i] == CU_JIT_ERROR_LOG_BUFFER) l->error_log = values[i];
        else if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) l->error_cap = v;
        else if (opts[i] == CU_JIT_INFO_LOG_BUFFER) l->info_log = values[i];
        else if (opts[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) l->info_cap = v;
    }
    if (l->error_log && l->error_cap) l->error_log[0] = 0;
    if (l->info_log && l->info_cap) l->info_log[0] = 0;
    handle_add(l, H_LINK);
    *state = l;
    return CUDA_SUCCESS;
}

static CUresult append(LinkState *l, const char *ptx, size_t n) {
    char *grown = realloc(l->text, l->len + n + 2);
    if (!grown) return CUDA_ERROR_OUT_OF_MEMORY;
    l->text = grown;
    memcpy(l->text + l->len, ptx, n);
    l->len += n;
    l->text[l->len++] = '\n';
    l->text[l->len] = 0;
    l->inputs++;
    return CUDA_SUCCESS;
}

API CUresult cuLinkAddData_v2(void *state, int type, void *data, size_t size, const char *name, unsigned nopts,
                              int *opts, void **values) {
    ENTER(cuLinkAddData_v2);
    (void)nopts, (void)opts, (void)values;
    LinkState *l;
    TRY(handle_get(state, H_LINK, &l));
    if (!data || !size) return CUDA_ERROR_INVALID_VALUE;
    if (type == INPUT_PTX) return append(l, data, strnlen(data, size));
    if (type == INPUT_LIBRARY || type == INPUT_NVVM) {
        log_error(l, name, type == INPUT_NVVM ? "NVVM IR (LTO) inputs are not supported: link PTX"
                                              : "library archives are not supported: link PTX, cubins or fatbins");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (type != INPUT_CUBIN && type != INPUT_FATBINARY && type != INPUT_OBJECT) return CUDA_ERROR_INVALID_VALUE;
    char log[1024] = "";
    const char *ptx;
    char *owned;
    CUresult rc = image_ptx(data, size, &ptx, &owned, NULL, log, sizeof log);
    if (rc == CUDA_SUCCESS && !owned) { /* PTX text handed over as a binary */
        rc = CUDA_ERROR_INVALID_IMAGE;
        snprintf(log, sizeof log, "not a cubin, fatbin or ELF object (is it PTX? add it as CU_JIT_INPUT_PTX)");
    }
    if (rc) {
        log_error(l, name, log);
        return rc;
    }
    rc = append(l, ptx, strlen(ptx));
    free(owned);
    return rc;
}

API CUresult cuLinkAddFile_v2(void *state, int type, const char *path, unsigned nopts, int *opts, void **values) {
    ENTER(cuLinkAddFile_v2);
    LinkState *l;
    TRY(handle_get(state, H_LINK, &l));
    if (!path) return CUDA_ERROR_INVALID_VALUE;
    size_t n;
    char *bytes;
    TRY(image_read(path, &bytes, &n));
    CUresult rc = n ? cuLinkAddData_v2(state, type, bytes, n, path, nopts, opts, values) : CUDA_ERROR_INVALID_VALUE;
    free(bytes);
    return rc;
}

API CUresult cuLinkComplete(void *state, void **image, size_t *size) {
    ENTER(cuLinkComplete);
    LinkState *l;
    TRY(handle_get(state, H_LINK, &l));
    if (!image || !size) return CUDA_ERROR_INVALID_VALUE;
    if (!l->inputs) {
        log_error(l, "link", "no inputs were added");
        return CUDA_ERROR_INVALID_VALUE;
    }
    char log[1024] = "";
    CUresult rc = CUDA_SUCCESS;
    PtxModule *check = ptx_load(l->text, NULL, SIMULATED_SM, log, sizeof log, &rc);
    if (!check) {
        log_error(l, "linked image", log);
        return rc;
    }
    for (int i = 0; i < check->nglobals; i++) mem_free(check->global_addrs[i], 1 << A_MODULE_GLOBAL);
    ptx_free(check);
    if (l->info_log && l->info_cap)
        snprintf(l->info_log, l->info_cap, "linked %d input(s) into the fake's PTX image (%zu bytes)", l->inputs,
                 l->len + 1);
    *image = l->text;
    *size = l->len + 1; /* with the terminating NUL: the image is loaded as text */
    return CUDA_SUCCESS;
}

API CUresult cuLinkDestroy(void *state) {
    ENTER(cuLinkDestroy);
    LinkState *l;
    TRY(handle_get(state, H_LINK, &l));
    handle_remove(l);
    free(l->text);
    free(l);
    return CUDA_SUCCESS;
}
