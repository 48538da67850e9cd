/* Calls the stand-in driver's tables (driver.c) as NVRTC and the CUDA runtime reach a real driver's: dlopen
 * libcuda.so.1, then cuGetExportTable by dlsym (NVRTC) and by cuGetProcAddress_v2 -> cuGetProcAddress ->
 * cuGetExportTable (the runtime). Checks every slot's answer against the same function computed here, and that
 * the data slot still points at the driver's data and the table's page is read-only again; prints one line a check and "caller: ok", or names what
 * differs and exits 1. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    uint64_t lo, hi;
} Pair;
typedef int (*GetExportTable)(const void **, const void *);
typedef int (*GetProcAddressV2)(const char *, void **, int, uint64_t, int *);

static const unsigned char NVRTC_CACHE[16] = {0xda, 0x91, 0x51, 0xd3, 0x3a, 0xe6, 0xcc, 0x41,
                                              0xa5, 0xc0, 0x4f, 0x26, 0xd5, 0x33, 0xe3, 0x28};
static const unsigned char BY_PROC_ADDRESS[16] = {0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e,
                                                  0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9};
static const unsigned char NO_SIZE[16] = {0x0b, 0xad, 0xc0, 0xde, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
static int failed;

/* The protection /proc/self/maps gives the page of p ("r--p"), or "?". */
static void page_protection(const void *p, char out[5]) {
    strcpy(out, "?");
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512], perms[8];
    unsigned long start, end;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3 && start <= (uintptr_t)p && (uintptr_t)p < end) {
            snprintf(out, 5, "%.4s", perms);
            break;
        }
    if (f) fclose(f);
}

#define CHECK(what, cond)                                                                                    \
    do {                                                                                                     \
        if (cond) printf("%s: ok\n", what);                                                                  \
        else { printf("%s: WRONG\n", what); failed = 1; }                                                    \
    } while (0)

static void call_slots(const char *route, const void *const *t) {
    char what[64];
    int64_t (*nine)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t) =
        (int64_t(*)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t))t[1];
    snprintf(what, sizeof what, "%s: nine integer arguments", route);
    CHECK(what, nine(1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000) == 987654321);
    double (*floats)(double, float, int, double, double, double, double, double, double, double) =
        (double (*)(double, float, int, double, double, double, double, double, double, double))t[2];
    snprintf(what, sizeof what, "%s: floating-point arguments and result", route);
    CHECK(what, floats(0.5, 0.25f, 3, 1, 2, 3, 4, 5, 6, 7) == 0.5 + 0.5 + 9 + 4 + 10 + 18 + 28 + 40 + 54 + 70);
    Pair (*pair)(uint64_t) = (Pair(*)(uint64_t))t[3];
    Pair p = pair(7);
    snprintf(what, sizeof what, "%s: a 16-byte struct result", route);
    CHECK(what, p.lo == 21 && p.hi == 35);
    double (*variadic)(int, ...) = (double (*)(int, ...))t[4];
    snprintf(what, sizeof what, "%s: variadic doubles", route);
    CHECK(what, variadic(3, 1.5, 2.5, 4.0) == 1.5 + 5.0 + 12.0);
    snprintf(what, sizeof what, "%s: the data slot", route);
    CHECK(what, *(const int *)t[5] == 42);
    int64_t (*one)(int64_t) = (int64_t(*)(int64_t))t[6];
    snprintf(what, sizeof what, "%s: one argument", route);
    CHECK(what, one(41) == 42);
}

int main(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        printf("caller: no libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    const void *const *t = NULL;
    GetExportTable get = (GetExportTable)dlsym(lib, "cuGetExportTable");
    CHECK("dlsym route: lookup", get && get((const void **)&t, NVRTC_CACHE) == 0 && t);
    if (t) call_slots("dlsym route", t);
    char perms[5];
    page_protection(t, perms);
    printf("the table's page: %s\n", perms);
    CHECK("the table's page is read-only as the driver left it (RELRO)", perms[0] == 'r' && perms[1] == '-');
    GetProcAddressV2 gpa2 = (GetProcAddressV2)dlsym(lib, "cuGetProcAddress_v2"), gpa = NULL;
    GetExportTable get2 = NULL;
    int status = -1;
    CHECK("cuGetProcAddress route: cuGetProcAddress", gpa2 && gpa2("cuGetProcAddress", (void **)&gpa, 12000, 0, &status) == 0 && gpa);
    CHECK("cuGetProcAddress route: cuGetExportTable", gpa && gpa("cuGetExportTable", (void **)&get2, 3000, 0, &status) == 0 && get2);
    const void *const *t2 = NULL;
    CHECK("cuGetProcAddress route: lookup", get2 && get2((const void **)&t2, BY_PROC_ADDRESS) == 0 && t2 == t);
    if (t2) call_slots("cuGetProcAddress route", t2);
    const void *const *t3 = NULL;
    CHECK("a table of no stated size", get2 && get2((const void **)&t3, NO_SIZE) == 0 && t3 &&
                                           ((int (*)(void))t3[0])() == 11 && ((int (*)(void))t3[1])() == 12);
    printf(failed ? "caller: FAILED\n" : "caller: ok\n");
    return failed;
}
