/* The simulated toolchain of the cuda/fake target: shims of NVRTC and nvJitLink (same sonames) that forward
 * every call to the real library and make each cubin they return also carry the program's PTX, which is
 * what the fake runs. See ../README.md, "The simulated toolchain". */
#ifndef IRONACCEL_TOOLCHAIN_SHIM_H
#define IRONACCEL_TOOLCHAIN_SHIM_H

#include <pthread.h>
#include <stddef.h>

#define API __attribute__((visibility("default")))

/* The real library a shim forwards to: its path comes from the environment variable ``env``. */
typedef struct RealLibrary {
    const char *env;  /* e.g. IRONACCEL_FAKE_NVRTC_LIBRARY */
    const char *what; /* e.g. "NVRTC", for messages */
    pthread_once_t once;
    void *handle; /* NULL when it cannot be loaded (the reason went to stderr once) */
} RealLibrary;

#define REAL_LIBRARY(env, what) {env, what, PTHREAD_ONCE_INIT, NULL}

/* The real library's function ``name``, NULL (said on stderr) when the library or the name is missing. */
void *shim_real(RealLibrary *lib, const char *name);

/* A line on stderr, prefixed with the shim's name. */
void shim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A copy of the ELF image ``elf`` (``n`` bytes) with a ``.nv_debug_ptx_txt`` section holding ``ptx``: the
 * machine code stays as it was (a real driver runs it), the fake reads the PTX. malloc'ed into *out;
 * 0 on success, -1 when ``elf`` is not a 64-bit little-endian ELF image (*out untouched). */
int shim_elf_with_ptx(const void *elf, size_t n, const char *ptx, void **out, size_t *out_n);

/* The PTX the fake would run from a cubin, fatbin or ELF object (malloc'ed), asked of the fake libcuda
 * itself; NULL with the reason in ``why`` when it carries none or the loaded libcuda is not the fake. */
char *shim_image_ptx(const void *image, size_t size, char *why, size_t whylen);

/* A growing text buffer. */
typedef struct Text {
    char *s;
    size_t len;
} Text;

/* Appends n bytes and a newline; 0 on success, -1 out of memory. */
int text_append(Text *t, const char *s, size_t n);

#endif
