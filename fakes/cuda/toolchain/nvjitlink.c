/* libnvJitLink.so.N of the simulated toolchain: every call goes to the real nvJitLink, which links (and
 * reports errors) as it always does. Beside it the shim keeps the PTX of the inputs: PTX inputs as given,
 * the PTX the fake reads from cubin, fatbin and object inputs (asked of the fake libcuda), and the PTX the
 * real nvJitLink makes of LTO-IR inputs (a second link with -ptx). The linked cubin is the real one plus a
 * section holding that PTX, one module after another, as the fake's own linker makes it. When an input
 * carries no PTX the linked cubin is the real one alone, which the fake refuses saying why. */
#define _GNU_SOURCE /* memmem */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../linked_image.h"
#include "shim.h"

typedef int nvJitLinkResult;
typedef void *nvJitLinkHandle;
enum { INPUT_CUBIN = 1, INPUT_PTX, INPUT_LTOIR, INPUT_FATBIN, INPUT_OBJECT, INPUT_LIBRARY, INPUT_INDEX,
       INPUT_ANY = 10 };
#define NVJITLINK_SUCCESS 0
#define NVJITLINK_ERROR_INTERNAL 6

static RealLibrary g_nvjitlink = REAL_LIBRARY("IRONACCEL_FAKE_NVJITLINK_LIBRARY", "nvJitLink");

#define REAL_AS(var, name, params) \
    nvJitLinkResult(*var) params = (nvJitLinkResult(*) params)shim_real(&g_nvjitlink, #name)
/* the same, of the real NVRTC (g_nvrtc, below), whose functions also return 0 on success */
#define REAL_AS2(var, name, params) int(*var) params = (int(*) params)shim_real(&g_nvrtc, #name)

/* Each function below is exported under its plain name (what dlsym users such as cuda.bindings ask for) and
 * under the versioned names the header maps calls to (__nvJitLinkCreate_13_0 ... _13_9: code built against
 * nvJitLink 13.N calls __nvJitLinkCreate_13_N, e.g. libcusparse), each forwarding to the real library's
 * function of the same name. A version the real library lacks fails at the call with
 * NVJITLINK_ERROR_INTERNAL and a line on stderr. SHIM_SONAME_MAJOR (the soname's number) comes from
 * ironaccel.fakes.toolchain(). The shim defines no symbol versions: a reference to
 * __nvJitLinkCreate_13_0@libnvJitLink.so.13 binds to a library without version definitions (ld.so accepts it). */
#ifndef SHIM_SONAME_MAJOR
#error "build with -DSHIM_SONAME_MAJOR=<the soname's number> (ironaccel.fakes.toolchain() does)"
#endif
#define ARGS(...) __VA_ARGS__
#define VERSIONED__(name, major, minor) __##name##_##major##_##minor
#define VERSIONED_(name, major, minor) VERSIONED__(name, major, minor) /* expands major before pasting */
#define VERSIONED(name, minor) VERSIONED_(name, SHIM_SONAME_MAJOR, minor)
#define EXPORT_AS_(exported, core, params, args) \
    API nvJitLinkResult exported params { return core(shim_real(&g_nvjitlink, #exported), ARGS args); }
#define EXPORT_AS(exported, core, params, args) EXPORT_AS_(exported, core, params, args)
#define EXPORT(name, core, params, args)                                                                   \
    EXPORT_AS(name, core, params, args)                                                                    \
    EXPORT_AS(VERSIONED(name, 0), core, params, args) EXPORT_AS(VERSIONED(name, 1), core, params, args)    \
    EXPORT_AS(VERSIONED(name, 2), core, params, args) EXPORT_AS(VERSIONED(name, 3), core, params, args)    \
    EXPORT_AS(VERSIONED(name, 4), core, params, args) EXPORT_AS(VERSIONED(name, 5), core, params, args)    \
    EXPORT_AS(VERSIONED(name, 6), core, params, args) EXPORT_AS(VERSIONED(name, 7), core, params, args)    \
    EXPORT_AS(VERSIONED(name, 8), core, params, args) EXPORT_AS(VERSIONED(name, 9), core, params, args)

/* `real`: the function a shim function is given (fn: the real library's function of the name called). */
#define AS_REAL(params) nvJitLinkResult(*real) params = (nvJitLinkResult(*) params)fn

/* A function the shim passes through unchanged. */
#define FORWARD(name, params, args)                                              \
    static nvJitLinkResult forward_##name(void *fn, ARGS params) {               \
        AS_REAL(params);                                                         \
        return real ? real args : NVJITLINK_ERROR_INTERNAL;                      \
    }                                                                            \
    EXPORT(name, forward_##name, params, args)

/* nvJitLinkVersion has no versioned names. */
API nvJitLinkResult nvJitLinkVersion(unsigned *major, unsigned *minor) {
    REAL_AS(real, nvJitLinkVersion, (unsigned *, unsigned *));
    return real ? real(major, minor) : NVJITLINK_ERROR_INTERNAL;
}
FORWARD(nvJitLinkGetLinkedPtxSize, (nvJitLinkHandle h, size_t *size), (h, size))
FORWARD(nvJitLinkGetLinkedPtx, (nvJitLinkHandle h, char *ptx), (h, ptx))
FORWARD(nvJitLinkGetLinkedLTOIRSize, (nvJitLinkHandle h, size_t *size), (h, size))
FORWARD(nvJitLinkGetLinkedLTOIR, (nvJitLinkHandle h, void *ltoir), (h, ltoir))
FORWARD(nvJitLinkGetErrorLogSize, (nvJitLinkHandle h, size_t *size), (h, size))
FORWARD(nvJitLinkGetErrorLog, (nvJitLinkHandle h, char *log), (h, log))
FORWARD(nvJitLinkGetInfoLogSize, (nvJitLinkHandle h, size_t *size), (h, size))
FORWARD(nvJitLinkGetInfoLog, (nvJitLinkHandle h, char *log), (h, log))

/* What the shim keeps of one link. */
typedef struct Link {
    nvJitLinkHandle handle;
    char **options; /* a copy of the options, for the LTO-IR-to-PTX link */
    uint32_t noptions;
    unsigned max_registers;       /* -maxrregcount=N (0: none), which the linked image carries to the fake */
    Text ptx;                     /* the inputs' PTX, in order */
    struct Blob *ltoir;           /* the LTO-IR inputs */
    char no_ptx[512];             /* why the linked image cannot carry all the PTX ("" when it can) */
    void *cubin;                  /* the linked cubin returned, made once after nvJitLinkComplete */
    size_t cubin_size;
    struct Link *next;
} Link;

typedef struct Blob {
    void *data;
    size_t size;
    struct Blob *next;
} Blob;

static Link *g_links;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

/* The link of a handle, or NULL; call with g_mu held. */
static Link *link_of(nvJitLinkHandle h) {
    Link *l = g_links;
    while (l && l->handle != h) l = l->next;
    return l;
}

static void link_free(Link *l) {
    for (uint32_t i = 0; i < l->noptions; i++) free(l->options[i]);
    free(l->options);
    free(l->ptx.s);
    for (Blob *b = l->ltoir, *next; b; b = next) {
        next = b->next;
        free(b->data);
        free(b);
    }
    free(l->cubin);
    free(l);
}

static nvJitLinkResult shim_create(void *fn, nvJitLinkHandle *h, uint32_t n, const char **options) {
    AS_REAL((nvJitLinkHandle *, uint32_t, const char **));
    if (!real) return NVJITLINK_ERROR_INTERNAL;
    nvJitLinkResult rc = real(h, n, options);
    if (rc != NVJITLINK_SUCCESS || !h || !*h) return rc;
    Link *l = calloc(1, sizeof *l);
    if (l) l->options = calloc(n ? n : 1, sizeof *l->options);
    if (!l || !l->options) { /* nothing kept: the link goes on, its cubin without PTX */
        free(l);
        shim_log("nvJitLinkCreate: out of memory: the linked cubin will be machine code only");
        return rc;
    }
    l->handle = *h;
    for (uint32_t i = 0; i < n; i++) {
        if (options[i] && (l->options[l->noptions] = strdup(options[i]))) l->noptions++;
        if (options[i] && !strncmp(options[i], "-maxrregcount=", 14))
            l->max_registers = (unsigned)strtoul(options[i] + 14, NULL, 10);
    }
    pthread_mutex_lock(&g_mu);
    l->next = g_links;
    g_links = l;
    pthread_mutex_unlock(&g_mu);
    return rc;
}
EXPORT(nvJitLinkCreate, shim_create, (nvJitLinkHandle *h, uint32_t n, const char **options), (h, n, options))

static nvJitLinkResult shim_destroy(void *fn, nvJitLinkHandle *h) {
    AS_REAL((nvJitLinkHandle *));
    if (!real) return NVJITLINK_ERROR_INTERNAL;
    if (h && *h) {
        pthread_mutex_lock(&g_mu);
        for (Link **p = &g_links; *p; p = &(*p)->next)
            if ((*p)->handle == *h) {
                Link *gone = *p;
                *p = gone->next;
                link_free(gone);
                break;
            }
        pthread_mutex_unlock(&g_mu);
    }
    return real(h);
}
EXPORT(nvJitLinkDestroy, shim_destroy, (nvJitLinkHandle *h), (h))

static int is_elf(const uint8_t *b, size_t n) { return n >= 4 && !memcmp(b, "\x7f" "ELF", 4); }
static int is_fatbin(const uint8_t *b, size_t n) { return n >= 4 && b[0] == 0x50 && b[1] == 0xED && b[2] == 0x55 && b[3] == 0xBA; }
static int is_archive(const uint8_t *b, size_t n) { return n >= 8 && !memcmp(b, "!<arch>\n", 8); }
static int is_ptx_text(const uint8_t *b, size_t n) { return memmem(b, strnlen((const char *)b, n), ".version", 8) != NULL; }

/* The type nvJitLink would take an INPUT_ANY input for: by its first bytes (LTO-IR is what is left). */
static int input_type(int type, const uint8_t *b, size_t n) {
    if (type != INPUT_ANY) return type;
    if (is_elf(b, n)) return INPUT_OBJECT;
    if (is_fatbin(b, n)) return INPUT_FATBIN;
    if (is_archive(b, n)) return INPUT_LIBRARY;
    return is_ptx_text(b, n) ? INPUT_PTX : INPUT_LTOIR;
}

/* Keeps what the fake needs of an input the real nvJitLink accepted. */
static void keep_input(nvJitLinkHandle h, int type, const void *data, size_t size, const char *name) {
    pthread_mutex_lock(&g_mu);
    Link *l = link_of(h);
    if (!l || l->no_ptx[0]) goto done;
    const char *what = name ? name : "an input";
    switch (input_type(type, data, size)) {
    case INPUT_PTX:
        if (text_append(&l->ptx, data, strnlen(data, size)))
            snprintf(l->no_ptx, sizeof l->no_ptx, "out of memory keeping the PTX of %s", what);
        break;
    case INPUT_LTOIR: {
        Blob *b = calloc(1, sizeof *b);
        if (b && (b->data = malloc(size))) {
            memcpy(b->data, data, size);
            b->size = size;
            Blob **end = &l->ltoir;
            while (*end) end = &(*end)->next;
            *end = b;
        } else {
            free(b);
            snprintf(l->no_ptx, sizeof l->no_ptx, "out of memory keeping the LTO-IR of %s", what);
        }
        break;
    }
    case INPUT_CUBIN:
    case INPUT_FATBIN:
    case INPUT_OBJECT: {
        char why[400] = "";
        char *ptx = shim_image_ptx(data, size, why, sizeof why);
        if (!ptx) snprintf(l->no_ptx, sizeof l->no_ptx, "%s carries no PTX the fake can run: %s", what, why);
        else if (text_append(&l->ptx, ptx, strlen(ptx)))
            snprintf(l->no_ptx, sizeof l->no_ptx, "out of memory keeping the PTX of %s", what);
        free(ptx);
        break;
    }
    default:
        /* the CUDA device runtime (machine code only): the fake implements what kernels call of it */
        if (strstr(what, "libcudadevrt")) break;
        snprintf(l->no_ptx, sizeof l->no_ptx, "%s is a library or index input, whose PTX the shim does not read", what);
    }
done:
    pthread_mutex_unlock(&g_mu);
}

static nvJitLinkResult shim_add_data(void *fn, nvJitLinkHandle h, int type, const void *data, size_t size, const char *name) {
    AS_REAL((nvJitLinkHandle, int, const void *, size_t, const char *));
    if (!real) return NVJITLINK_ERROR_INTERNAL;
    nvJitLinkResult rc = real(h, type, data, size, name);
    if (rc == NVJITLINK_SUCCESS && data && size) keep_input(h, type, data, size, name);
    return rc;
}
EXPORT(nvJitLinkAddData, shim_add_data, (nvJitLinkHandle h, int type, const void *data, size_t size, const char *name),
       (h, type, data, size, name))

static nvJitLinkResult shim_add_file(void *fn, nvJitLinkHandle h, int type, const char *path) {
    AS_REAL((nvJitLinkHandle, int, const char *));
    if (!real) return NVJITLINK_ERROR_INTERNAL;
    nvJitLinkResult rc = real(h, type, path);
    if (rc != NVJITLINK_SUCCESS) return rc;
    FILE *f = fopen(path, "rb");
    char *bytes = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (bytes = calloc(1, (size_t)n + 1)) && fread(bytes, 1, (size_t)n, f) == (size_t)n) {
        keep_input(h, type, bytes, (size_t)n, path);
    } else {
        pthread_mutex_lock(&g_mu);
        Link *l = link_of(h);
        if (l) snprintf(l->no_ptx, sizeof l->no_ptx, "%s could not be read again for its PTX", path);
        pthread_mutex_unlock(&g_mu);
    }
    free(bytes);
    if (f) fclose(f);
    return rc;
}
EXPORT(nvJitLinkAddFile, shim_add_file, (nvJitLinkHandle h, int type, const char *path), (h, type, path))

static RealLibrary g_nvrtc = REAL_LIBRARY("IRONACCEL_FAKE_NVRTC_LIBRARY", "NVRTC");
#define KEEPER "__ironaccel_keep_ptx_callees"

/* The name a ".func" at p declares ("(ret) name(" or "name("): its length, 0 when there is none. */
static size_t func_name(const char *p, const char **name) {
    p += 5;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '(') { /* the return parameter */
        const char *close = strchr(p, ')');
        if (!close) return 0;
        for (p = close + 1; *p == ' ' || *p == '\t';) p++;
    }
    size_t n = 0;
    while (isalnum((unsigned char)p[n]) || p[n] == '_') n++;
    *name = p;
    return isalpha((unsigned char)p[0]) || p[0] == '_' ? n : 0;
}

/* Whether ptx has a ".func" declaration of the name with (1) or without (0) ".extern" before it on its line. */
static int declares(const char *ptx, const char *name, size_t len, int external) {
    for (const char *p = ptx; (p = strstr(p, ".func")); p += 5) {
        const char *line = p;
        while (line > ptx && line[-1] != '\n') line--;
        int is_extern = memmem(line, (size_t)(p - line), ".extern", 7) != NULL;
        const char *found;
        if (is_extern == external && func_name(p, &found) == len && !memcmp(found, name, len)) return 1;
    }
    return 0;
}

/* CUDA C++ for NVRTC: a kernel that takes the address of each function the PTX inputs declare .extern and none
 * of them defines. The LTO-IR-to-PTX link sees no PTX input, so it drops an LTO-IR function only a PTX input
 * calls (numba-cuda's NRT_Allocate, called from linked PTX); with this kernel among its inputs it keeps it.
 * NULL when there is no such function. */
static char *keeper_source(const char *ptx) {
    Text decls = {0}, uses = {0};
    size_t count = 0;
    for (const char *p = ptx; (p = strstr(p, ".func")); p += 5) {
        const char *name, *line = p;
        size_t len = func_name(p, &name);
        while (line > ptx && line[-1] != '\n') line--;
        if (!len || !memmem(line, (size_t)(p - line), ".extern", 7) || declares(ptx, name, len, 0)) continue;
        char *decl = NULL, *use = NULL; /* the first declaration only */
        if (asprintf(&decl, "extern \"C\" __device__ void %.*s();", (int)len, name) < 0) decl = NULL;
        if (decl && (!decls.s || !strstr(decls.s, decl)) &&
            asprintf(&use, "out[%zu] = (void *)%.*s;", count++, (int)len, name) >= 0) {
            text_append(&decls, decl, strlen(decl));
            text_append(&uses, use, strlen(use));
        }
        free(decl), free(use);
    }
    char *source = NULL;
    if (decls.s && uses.s &&
        asprintf(&source, "%s\nextern \"C\" __global__ void " KEEPER "(void **out) {\n%s}\n", decls.s, uses.s) < 0)
        source = NULL;
    free(decls.s), free(uses.s);
    return source;
}

/* Removes the keeping kernel from the linked PTX: it was there for the link only (it takes the address of
 * functions, such as vprintf, that only the fake's interpreter provides). */
static void drop_keeper(char *ptx) {
    char *start = strstr(ptx, ".entry " KEEPER "("), *p;
    if (!start || !(p = strchr(start, '{'))) return;
    while (start > ptx && start[-1] != '\n') start--;
    for (int depth = 0; *p; p++)
        if (*p == '{') depth++;
        else if (*p == '}' && --depth == 0) { p++; break; }
    memmove(start, p, strlen(p) + 1);
}

/* LTO-IR of source for the link's -arch, by the real NVRTC; NULL (said on stderr) when it cannot be had. */
static void *keeper_ltoir(Link *l, const char *source, size_t *size) {
    REAL_AS2(create, nvrtcCreateProgram,
             (void **, const char *, const char *, int, const char *const *, const char *const *));
    REAL_AS2(compile, nvrtcCompileProgram, (void *, int, const char *const *));
    REAL_AS2(ltoir_size, nvrtcGetLTOIRSize, (void *, size_t *));
    REAL_AS2(ltoir, nvrtcGetLTOIR, (void *, char *));
    REAL_AS2(destroy, nvrtcDestroyProgram, (void **));
    const char *arch = NULL;
    for (uint32_t i = 0; i < l->noptions; i++)
        if (!strncmp(l->options[i], "-arch=", 6)) arch = l->options[i];
    if (!create || !compile || !ltoir_size || !ltoir || !destroy || !arch) return NULL;
    const char *options[] = {arch, "-rdc=true", "-dlto"};
    void *prog = NULL, *out = NULL;
    if (create(&prog, source, "ironaccel_keep.cu", 0, NULL, NULL)) return NULL;
    if (!compile(prog, 3, options) && !ltoir_size(prog, size) && (out = malloc(*size)) && ltoir(prog, out)) {
        free(out);
        out = NULL;
    }
    if (!out) shim_log("NVRTC failed on the kernel that keeps the LTO-IR functions PTX inputs call: %.300s", source);
    destroy(&prog);
    return out;
}

/* The PTX the real nvJitLink makes of the LTO-IR inputs: a link of them alone with the same options and
 * -ptx; NULL (reason in why) when it fails. */
static char *ltoir_ptx(Link *l, char *why, size_t whylen) {
    REAL_AS(create, nvJitLinkCreate, (nvJitLinkHandle *, uint32_t, const char **));
    REAL_AS(add, nvJitLinkAddData, (nvJitLinkHandle, int, const void *, size_t, const char *));
    REAL_AS(complete, nvJitLinkComplete, (nvJitLinkHandle));
    REAL_AS(ptx_size, nvJitLinkGetLinkedPtxSize, (nvJitLinkHandle, size_t *));
    REAL_AS(get_ptx, nvJitLinkGetLinkedPtx, (nvJitLinkHandle, char *));
    REAL_AS(destroy, nvJitLinkDestroy, (nvJitLinkHandle *));
    if (!create || !add || !complete || !ptx_size || !get_ptx || !destroy) {
        snprintf(why, whylen, "the real nvJitLink lacks a function the LTO-IR-to-PTX link needs");
        return NULL;
    }
    const char **options = calloc(l->noptions + 1, sizeof *options);
    if (!options) return NULL;
    uint32_t n = 0;
    for (uint32_t i = 0; i < l->noptions; i++)
        if (strcmp(l->options[i], "-ptx")) options[n++] = l->options[i];
    options[n++] = "-ptx";
    nvJitLinkHandle h = NULL;
    char *ptx = NULL;
    size_t size = 0;
    nvJitLinkResult rc = create(&h, n, options);
    for (Blob *b = l->ltoir; rc == NVJITLINK_SUCCESS && b; b = b->next) rc = add(h, INPUT_LTOIR, b->data, b->size, "ltoir");
    char *keeper = l->ptx.s ? keeper_source(l->ptx.s) : NULL;
    size_t keeper_size = 0;
    void *keeper_ir = keeper ? keeper_ltoir(l, keeper, &keeper_size) : NULL;
    if (rc == NVJITLINK_SUCCESS && keeper_ir) rc = add(h, INPUT_LTOIR, keeper_ir, keeper_size, "ironaccel_keep");
    free(keeper), free(keeper_ir);
    if (rc == NVJITLINK_SUCCESS) rc = complete(h);
    if (rc == NVJITLINK_SUCCESS) rc = ptx_size(h, &size);
    if (rc == NVJITLINK_SUCCESS && (ptx = calloc(1, size + 1)) && (rc = get_ptx(h, ptx)) != NVJITLINK_SUCCESS) {
        free(ptx);
        ptx = NULL;
    }
    if (ptx) drop_keeper(ptx);
    else snprintf(why, whylen, "the LTO-IR inputs linked to PTX (with -ptx) failed with nvJitLinkResult %d", rc);
    if (h) destroy(&h);
    free(options);
    return ptx;
}

static nvJitLinkResult shim_complete(void *fn, nvJitLinkHandle h) {
    AS_REAL((nvJitLinkHandle));
    if (!real) return NVJITLINK_ERROR_INTERNAL;
    nvJitLinkResult rc = real(h);
    if (rc != NVJITLINK_SUCCESS) return rc;
    pthread_mutex_lock(&g_mu);
    Link *l = link_of(h);
    if (l && !l->no_ptx[0] && l->ltoir) {
        char why[256] = "";
        char *ptx = ltoir_ptx(l, why, sizeof why);
        if (!ptx) snprintf(l->no_ptx, sizeof l->no_ptx, "%s", why);
        else if (text_append(&l->ptx, ptx, strlen(ptx))) snprintf(l->no_ptx, sizeof l->no_ptx, "out of memory");
        free(ptx);
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}
EXPORT(nvJitLinkComplete, shim_complete, (nvJitLinkHandle h), (h))

/* The linked cubin to return: the real one, with the inputs' PTX when they all carry it. */
static nvJitLinkResult linked_cubin(nvJitLinkHandle h, Link **out) {
    REAL_AS(real_size, nvJitLinkGetLinkedCubinSize, (nvJitLinkHandle, size_t *));
    REAL_AS(real_cubin, nvJitLinkGetLinkedCubin, (nvJitLinkHandle, void *));
    if (!real_size || !real_cubin) return NVJITLINK_ERROR_INTERNAL;
    Link *l = link_of(h);
    *out = l;
    if (!l || l->cubin) return NVJITLINK_SUCCESS;
    size_t size = 0;
    nvJitLinkResult rc = real_size(h, &size);
    if (rc != NVJITLINK_SUCCESS) return rc;
    void *cubin = malloc(size ? size : 1);
    if (!cubin) return NVJITLINK_ERROR_INTERNAL;
    if ((rc = real_cubin(h, cubin)) != NVJITLINK_SUCCESS) {
        free(cubin);
        return rc;
    }
    if (!l->no_ptx[0] && !l->ptx.len) snprintf(l->no_ptx, sizeof l->no_ptx, "no input carried PTX");
    char *limited = NULL; /* the PTX after the lines that give the fake the link's register limit */
    if (!l->no_ptx[0] && l->max_registers &&
        asprintf(&limited, LINKED_HEADER MAX_REGISTERS_LINE "%u\n%s", l->max_registers, l->ptx.s) < 0) {
        limited = NULL;
        snprintf(l->no_ptx, sizeof l->no_ptx, "out of memory");
    }
    if (!l->no_ptx[0] && shim_elf_with_ptx(cubin, size, limited ? limited : l->ptx.s, &l->cubin, &l->cubin_size) == 0) {
        free(limited);
        free(cubin);
        return NVJITLINK_SUCCESS;
    }
    free(limited);
    if (!l->no_ptx[0]) snprintf(l->no_ptx, sizeof l->no_ptx, "the linked cubin is not an ELF image");
    shim_log("nvJitLinkGetLinkedCubin: the linked cubin is machine code only (%s)", l->no_ptx);
    l->cubin = cubin;
    l->cubin_size = size;
    return NVJITLINK_SUCCESS;
}

static nvJitLinkResult shim_cubin_size(void *fn, nvJitLinkHandle h, size_t *size) {
    AS_REAL((nvJitLinkHandle, size_t *));
    if (!real) return NVJITLINK_ERROR_INTERNAL;
    nvJitLinkResult rc = real(h, size); /* the real answer first: errors, and before the link completed */
    if (rc != NVJITLINK_SUCCESS) return rc;
    pthread_mutex_lock(&g_mu);
    Link *l;
    rc = linked_cubin(h, &l);
    if (rc == NVJITLINK_SUCCESS && l) *size = l->cubin_size;
    pthread_mutex_unlock(&g_mu);
    return rc;
}
EXPORT(nvJitLinkGetLinkedCubinSize, shim_cubin_size, (nvJitLinkHandle h, size_t *size), (h, size))

static nvJitLinkResult shim_cubin(void *fn, nvJitLinkHandle h, void *cubin) {
    AS_REAL((nvJitLinkHandle, void *));
    if (!real) return NVJITLINK_ERROR_INTERNAL;
    size_t size;
    nvJitLinkResult rc = nvJitLinkGetLinkedCubinSize(h, &size);
    if (rc != NVJITLINK_SUCCESS || !cubin) return real(h, cubin);
    pthread_mutex_lock(&g_mu);
    Link *l = link_of(h);
    if (l) memcpy(cubin, l->cubin, l->cubin_size);
    pthread_mutex_unlock(&g_mu);
    return l ? NVJITLINK_SUCCESS : real(h, cubin);
}
EXPORT(nvJitLinkGetLinkedCubin, shim_cubin, (nvJitLinkHandle h, void *cubin), (h, cubin))
