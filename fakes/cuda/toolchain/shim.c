/* What both toolchain shims share: loading the real library by full path, adding a PTX section to an ELF
 * cubin, and asking the fake libcuda which PTX a binary input carries. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

#define PTX_SECTION ".nv_debug_ptx_txt" /* the section the fake (image.c) reads PTX text from */

void shim_log(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ironaccel toolchain shim: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/** Marks a shim, so that a shim never forwards to itself (the variable naming a shim instead of the real
 * library would recurse). */
API const char *ironaccel_toolchain_shim(void) { return "ironaccel toolchain shim"; }

/* pthread_once takes no argument: the library being opened is handed over in this thread-local. */
static __thread RealLibrary *t_opening;

static void open_real(void) {
    RealLibrary *lib = t_opening;
    const char *path = getenv(lib->env);
    if (!path || !*path) {
        shim_log("%s is not set: it names the real %s this shim forwards to (ironaccel.fakes sets it)", lib->env,
                 lib->what);
        return;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        shim_log("cannot load the real %s (%s=%s): %s", lib->what, lib->env, path, dlerror());
        return;
    }
    if (dlsym(h, "ironaccel_toolchain_shim")) {
        shim_log("%s=%s names a shim, not the real %s", lib->env, path, lib->what);
        return;
    }
    lib->handle = h;
}

void *shim_real(RealLibrary *lib, const char *name) {
    t_opening = lib;
    pthread_once(&lib->once, open_real);
    if (!lib->handle) return NULL;
    void *fn = dlsym(lib->handle, name);
    if (!fn) shim_log("the real %s has no %s", lib->what, name);
    return fn;
}

int text_append(Text *t, const char *s, size_t n) {
    char *grown = realloc(t->s, t->len + n + 2);
    if (!grown) return -1;
    t->s = grown;
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len++] = '\n';
    t->s[t->len] = 0;
    return 0;
}

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i);
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> 8 * i);
}
static size_t align8(size_t n) { return (n + 7) & ~(size_t)7; }

/* The new image: the old bytes unchanged, then a copy of the section-name table with the new name, the PTX,
 * and the section headers (the old ones, the name table's pointing at its copy, plus the PTX section's). */
int shim_elf_with_ptx(const void *elf, size_t n, const char *ptx, void **out, size_t *out_n) {
    const uint8_t *in = elf;
    if (n < 64 || memcmp(in, "\x7f" "ELF", 4) || in[4] != 2 || in[5] != 1) return -1;
    uint64_t shoff = get64(in + 0x28);
    unsigned shentsize = get16(in + 0x3A), shnum = get16(in + 0x3C), shstrndx = get16(in + 0x3E);
    if (shentsize != 64 || shnum == 0 || shnum >= 0xff00 || shstrndx >= shnum || shoff > n ||
        (uint64_t)shnum * 64 > n - shoff)
        return -1;
    const uint8_t *names_sh = in + shoff + (uint64_t)shstrndx * 64;
    uint64_t names_off = get64(names_sh + 24), names_size = get64(names_sh + 32);
    if (names_off > n || names_size > n - names_off) return -1;
    size_t ptx_len = strlen(ptx) + 1, name_len = sizeof PTX_SECTION;
    size_t at_names = align8(n), at_ptx = align8(at_names + names_size + name_len),
           at_headers = align8(at_ptx + ptx_len), total = at_headers + (size_t)(shnum + 1) * 64;
    uint8_t *img = calloc(1, total);
    if (!img) return -1;
    memcpy(img, in, n);
    memcpy(img + at_names, in + names_off, names_size);
    memcpy(img + at_names + names_size, PTX_SECTION, name_len);
    memcpy(img + at_ptx, ptx, ptx_len);
    uint8_t *headers = img + at_headers;
    memcpy(headers, in + shoff, (size_t)shnum * 64);
    put64(headers + shstrndx * 64 + 24, at_names);
    put64(headers + shstrndx * 64 + 32, names_size + name_len);
    for (unsigned i = 0; i < shnum; i++) { /* a PTX section copied from an input (nvJitLink keeps them) */
        uint8_t *old = headers + i * 64;
        uint32_t name = (uint32_t)(old[0] | old[1] << 8 | old[2] << 16 | (uint32_t)old[3] << 24);
        if (name < names_size && !strncmp((const char *)in + names_off + name, PTX_SECTION, names_size - name)) {
            put64(old + 24, at_ptx); /* now holds the whole PTX too: the fake reads the first it finds */
            put64(old + 32, ptx_len);
        }
    }
    uint8_t *sh = headers + shnum * 64; /* the PTX section: PROGBITS, not loaded, byte-aligned */
    put32(sh, (uint32_t)names_size);
    put32(sh + 4, 1);
    put64(sh + 24, at_ptx);
    put64(sh + 32, ptx_len);
    put64(sh + 48, 1);
    put64(img + 0x28, at_headers);
    put16(img + 0x3C, (uint16_t)(shnum + 1));
    *out = img;
    *out_n = total;
    return 0;
}

char *shim_image_ptx(const void *image, size_t size, char *why, size_t whylen) {
    void *cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    int (*image_ptx)(const void *, size_t, char **, char *, size_t) =
        cuda ? (int (*)(const void *, size_t, char **, char *, size_t))dlsym(cuda, "ironaccel_fake_image_ptx") : NULL;
    if (!image_ptx) {
        snprintf(why, whylen, "the loaded libcuda.so.1 is not ironaccel's fake, which reads the PTX of binary inputs");
        if (cuda) dlclose(cuda);
        return NULL;
    }
    char *ptx = NULL;
    int rc = image_ptx(image, size, &ptx, why, whylen);
    dlclose(cuda);
    return rc ? NULL : ptx;
}
