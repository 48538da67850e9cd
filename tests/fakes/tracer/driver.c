/* A stand-in libcuda.so.1 for tests/fakes/test_runtime.py's tracer tests (tools/export_trace.c): a driver of
 * two export tables its header does not know, whose slots take what the real ones were seen to take and more.
 * Linked -Bsymbolic, as a real driver binds its own symbols: the cuGetExportTable its cuGetProcAddress gives is
 * its own, never a preloaded library's.
 *
 * {DA9151D3-3AE6-CC41-A5C0-4F26D533E328} (what NVRTC 13's compute cache asks a real driver for), 7 slots, slot
 * 0 its size: slot 1 takes nine integer arguments, three of them on the stack (as NVRTC calls the real slot 1),
 * slot 2 floating-point arguments and a double result, slot 3 returns a 16-byte struct (rax and rdx), slot 4
 * is variadic over doubles (al counts the vector registers), slot 5 is data (a pointer to an int, never
 * code), slot 6 takes one argument. Every answer is a function of every argument, so a lost one shows.
 * {F8CFF951-2146-8B4E-B9E2-FB469E7C0DD9} (UNNAMED_F8CFF951, a table every CUDA 13.0 runtime asks for), served as
 * the same table, looked up through cuGetProcAddress as the runtime
 * does. {0BADC0DE-...}: two functions and no size: its length is not known. */
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#define API __attribute__((visibility("default")))

typedef struct {
    uint64_t lo, hi;
} Pair;

static int64_t nine(int64_t a, int64_t b, int64_t c, int64_t d, int64_t e, int64_t f, int64_t g, int64_t h,
                    int64_t i) {
    return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h + 9 * i;
}

static double floats(double a, float b, int c, double d, double e, double f, double g, double h, double i,
                     double j) {
    return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h + 9 * i + 10 * j;
}

static Pair pair(uint64_t x) { return (Pair){3 * x, 5 * x}; }

static double variadic(int n, ...) {
    va_list ap;
    va_start(ap, n);
    double sum = 0;
    for (int k = 0; k < n; k++) sum += (k + 1) * va_arg(ap, double);
    va_end(ap);
    return sum;
}

static const int DATA = 42;

static int64_t one(int64_t x) { return x + 1; }

static const void *const TABLE[] = {(const void *)(7 * sizeof(void *)), (const void *)nine, (const void *)floats,
                                    (const void *)pair, (const void *)variadic, &DATA, (const void *)one};
static int unsized_a(void) { return 11; }
static int unsized_b(void) { return 12; }
static const void *const UNSIZED[] = {(const void *)unsized_a, (const void *)unsized_b};

static const unsigned char NVRTC_CACHE[16] = {0xda, 0x91, 0x51, 0xd3, 0x3a, 0xe6, 0xcc, 0x41,
                                              0xa5, 0xc0, 0x4f, 0x26, 0xd5, 0x33, 0xe3, 0x28};
static const unsigned char BY_PROC_ADDRESS[16] = {0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e,
                                                  0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9};
static const unsigned char NO_SIZE[16] = {0x0b, 0xad, 0xc0, 0xde, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};

API int cuInit(unsigned flags) { return flags ? 1 : 0; }

API int cuGetExportTable(const void **table, const void *uuid) {
    if (!table || !uuid) return 1;
    if (!memcmp(uuid, NVRTC_CACHE, 16) || !memcmp(uuid, BY_PROC_ADDRESS, 16)) *table = TABLE;
    else if (!memcmp(uuid, NO_SIZE, 16)) *table = UNSIZED;
    else return 1;
    return 0;
}

API int cuGetProcAddress(const char *symbol, void **fn, int version, uint64_t flags);

API int cuGetProcAddress_v2(const char *symbol, void **fn, int version, uint64_t flags, int *status) {
    (void)flags;
    void *p = !strcmp(symbol, "cuGetExportTable") ? (void *)cuGetExportTable
            : !strcmp(symbol, "cuInit")           ? (void *)cuInit
            : !strcmp(symbol, "cuGetProcAddress") ? (version >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress)
                                                  : NULL;
    *fn = p;
    if (status) *status = p ? 0 : 1;
    return p ? 0 : 500;
}

API int cuGetProcAddress(const char *symbol, void **fn, int version, uint64_t flags) {
    return cuGetProcAddress_v2(symbol, fn, version, flags, NULL);
}
