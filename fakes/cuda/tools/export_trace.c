/* export_trace: an LD_PRELOAD library that logs what a program asks of a CUDA driver's private export tables:
 * every cuGetExportTable UUID (with its result) and every call made through a returned table (slot, the first
 * six integer arguments, the result), in the format the fake writes under IRONACCEL_FAKE_LOG, so a trace of
 * the real driver and one of the fake compare line by line (tests/fakes/test_runtime.py replays them).
 *
 *   cc -O2 -fPIC -shared -o export_trace.so export_trace.c -ldl -lpthread
 *   IRONACCEL_EXPORT_TRACE=trace.log LD_PRELOAD=$PWD/export_trace.so python3 -c 'import cupy; ...'
 *
 * How it sees the calls: the CUDA runtime finds the driver with dlopen + dlsym (cuGetProcAddress_v2,
 * cuGetExportTable), so this library interposes dlsym, and cuGetProcAddress for code that asks for
 * cuGetExportTable by name; programs linked to libcuda directly call its own cuGetExportTable. A returned
 * table is patched in place (its addresses must not change: the integrity check hashes them), each function
 * slot replaced by a trampoline that logs and forwards. Slot 0 is left alone when it holds the table's size (an
 * unknown table is wrapped up to that size; one with no size is not wrapped, which a "note" line says);
 * INTEGRITY_CHECK's slots are not wrapped (the check hashes its own function's address), only its lookup is
 * logged. Limits: six integer/pointer arguments are forwarded and logged, which covers every slot known
 * (ZLUDA lists none with more, nor any float argument); a void slot's "result" is whatever rax held. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../export_tables.h"

#define MAX_TABLES 16
#define MAX_SLOTS 64
#define SIZE_SLOT_MAX 4096 /* a slot 0 below this is the table's size in bytes, not a function */

typedef uintptr_t (*Slot)(uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t);
typedef int (*GetExportTable)(const void **, const void *);
typedef int (*GetProcAddress)(const char *, void **, int, uint64_t);
typedef int (*GetProcAddressV2)(const char *, void **, int, uint64_t, int *);
typedef void *(*DlsymFn)(void *, const char *);

static const struct {
    const char *name;
    unsigned char uuid[16];
    int nslots;
} KNOWN[] = {
#define T(name, nslots, sized, ...) {#name, {__VA_ARGS__}, nslots},
    EXPORT_TABLES(T)
#undef T
};

static struct {
    const void **table;
    char name[48];
    Slot original[MAX_SLOTS];
} g_wrapped[MAX_TABLES];
static int g_nwrapped;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *g_log;
static GetExportTable g_real_get_export_table;
static GetProcAddress g_real_get_proc_address;
static GetProcAddressV2 g_real_get_proc_address_v2;

static void open_log(void) {
    const char *path = getenv("IRONACCEL_EXPORT_TRACE");
    g_log = fopen(path && *path ? path : "export_trace.log", "a");
    if (g_log) setvbuf(g_log, NULL, _IOLBF, 0);
}

static FILE *log_file(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, open_log);
    return g_log;
}

static DlsymFn real_dlsym(void) {
    static DlsymFn fn;
    if (!fn) fn = (DlsymFn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!fn) fn = (DlsymFn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return fn;
}

/* The trampolines: one function per (table, slot), each forwarding to the slot it replaced. */
static uintptr_t forward(int index, uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d, uintptr_t e, uintptr_t f) {
    int t = index / MAX_SLOTS, s = index % MAX_SLOTS;
    uintptr_t r = g_wrapped[t].original[s](a, b, c, d, e, f);
    FILE *log = log_file();
    if (log)
        fprintf(log, "call %s[%d](%#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR
                ") -> %d\n", g_wrapped[t].name, s, a, b, c, d, e, f, (int)r);
    return r;
}

#define TRAMP(name, index)                                                                                   \
    static uintptr_t tramp_##name(uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d, uintptr_t e, uintptr_t f) { \
        return forward(index, a, b, c, d, e, f);                                                                 \
    }
#define ADDR(name, index) [index] = tramp_##name,
#define R4(M, p, v) M(p##0, (v) * 4) M(p##1, (v) * 4 + 1) M(p##2, (v) * 4 + 2) M(p##3, (v) * 4 + 3)
#define R16(M, p, v) R4(M, p##0, (v) * 4) R4(M, p##1, (v) * 4 + 1) R4(M, p##2, (v) * 4 + 2) R4(M, p##3, (v) * 4 + 3)
#define R64(M, p, v) R16(M, p##0, (v) * 4) R16(M, p##1, (v) * 4 + 1) R16(M, p##2, (v) * 4 + 2) R16(M, p##3, (v) * 4 + 3)
#define R256(M, p, v) R64(M, p##0, (v) * 4) R64(M, p##1, (v) * 4 + 1) R64(M, p##2, (v) * 4 + 2) R64(M, p##3, (v) * 4 + 3)
#define R1024(M) R256(M, x0, 0) R256(M, x1, 1) R256(M, x2, 2) R256(M, x3, 3)
R1024(TRAMP)
static const Slot TRAMPOLINES[MAX_TABLES * MAX_SLOTS] = {R1024(ADDR)};

static void uuid_text(const unsigned char *u, char out[39]) {
    snprintf(out, 39, "{%02X%02X%02X%02X-%02X%02X-%02X%02X-%02X%02X-%02X%02X%02X%02X%02X%02X}", u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

/* Is p code of the object that holds the driver's cuGetExportTable? */
static int driver_code(const void *p) {
    Dl_info a, b;
    return p && dladdr(p, &a) && dladdr((void *)(uintptr_t)g_real_get_export_table, &b) && a.dli_fbase == b.dli_fbase;
}

static void wrap(const void **table, const unsigned char *uuid) {
    int known = -1;
    for (int k = 0; k < (int)(sizeof KNOWN / sizeof KNOWN[0]); k++)
        if (!memcmp(uuid, KNOWN[k].uuid, 16)) known = k;
    char text[39];
    uuid_text(uuid, text);
    pthread_mutex_lock(&g_mu);
    for (int t = 0; t < g_nwrapped; t++)
        if (g_wrapped[t].table == table) goto done;
    if (known >= 0 && !strcmp(KNOWN[known].name, "INTEGRITY_CHECK")) goto done;
    if (g_nwrapped == MAX_TABLES) goto done;
    /* How many slots: the size the table states in slot 0, else a known table's count; a table of unknown
     * length is not wrapped (past its end could be another table's slots). */
    uintptr_t first = (uintptr_t)table[0];
    int limit = first && first < SIZE_SLOT_MAX ? (int)(first / sizeof(void *)) : known >= 0 ? KNOWN[known].nslots : 0;
    if (limit > MAX_SLOTS) limit = MAX_SLOTS;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)table & ~(uintptr_t)(page - 1), hi = (uintptr_t)(table + limit);
    FILE *log = log_file();
    if (log && first && first < SIZE_SLOT_MAX) fprintf(log, "note %s: %d slots (slot 0: %lu bytes)\n", text, limit, (unsigned long)first);
    if (limit == 0 || mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE) != 0) {
        if (log) fprintf(log, "note %s: its slots are not traced (%s)\n", text, limit ? "cannot write the table" : "length unknown");
        goto done;
    }
    int t = g_nwrapped++;
    g_wrapped[t].table = table;
    snprintf(g_wrapped[t].name, sizeof g_wrapped[t].name, "%s", known >= 0 ? KNOWN[known].name : text);
    for (int s = 0; s < limit; s++) {
        const void *p = table[s];
        if (s == 0 && (uintptr_t)p < SIZE_SLOT_MAX) continue;
        if (!driver_code(p)) continue;
        g_wrapped[t].original[s] = (Slot)(uintptr_t)p;
        table[s] = (const void *)(uintptr_t)TRAMPOLINES[t * MAX_SLOTS + s];
    }
done:
    pthread_mutex_unlock(&g_mu);
}

static int traced_get_export_table(const void **table, const void *uuid) {
    int rc = g_real_get_export_table(table, uuid);
    FILE *log = log_file();
    char text[39] = "{NULL}";
    const char *name = "<unknown>";
    if (uuid) {
        uuid_text(uuid, text);
        for (int k = 0; k < (int)(sizeof KNOWN / sizeof KNOWN[0]); k++)
            if (!memcmp(uuid, KNOWN[k].uuid, 16)) name = KNOWN[k].name;
    }
    if (log) fprintf(log, "export_table %s %s -> %d\n", text, name, rc);
    if (rc == 0 && table && *table && uuid) wrap((const void **)*table, uuid);
    return rc;
}

/* The driver's own function of that name: from libcuda.so.1 as loaded (which may be a library loaded after
 * this one, so not always RTLD_NEXT). */
static void *driver_symbol(const char *symbol) {
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    void *p = lib ? real_dlsym()(lib, symbol) : NULL;
    if (lib) dlclose(lib);
    return p;
}

__attribute__((visibility("default"))) int cuGetExportTable(const void **table, const void *uuid) {
    if (!g_real_get_export_table) g_real_get_export_table = (GetExportTable)driver_symbol("cuGetExportTable");
    return g_real_get_export_table ? traced_get_export_table(table, uuid) : 3; /* CUDA_ERROR_NOT_INITIALIZED */
}

/* cuGetExportTable asked for by name comes back traced. */
static void trace_proc(const char *symbol, void **fn) {
    if (fn && *fn && symbol && !strcmp(symbol, "cuGetExportTable")) {
        g_real_get_export_table = (GetExportTable)*fn;
        *fn = (void *)(uintptr_t)traced_get_export_table;
    }
}

static int traced_get_proc_address(const char *symbol, void **fn, int version, uint64_t flags) {
    int rc = g_real_get_proc_address(symbol, fn, version, flags);
    if (rc == 0) trace_proc(symbol, fn);
    return rc;
}

static int traced_get_proc_address_v2(const char *symbol, void **fn, int version, uint64_t flags, int *status) {
    int rc = g_real_get_proc_address_v2(symbol, fn, version, flags, status);
    if (rc == 0) trace_proc(symbol, fn);
    return rc;
}

/* dlsym, as the runtime resolves the driver's entry points: the three that lead to the tables come back
 * traced, everything else as it is. */
__attribute__((visibility("default"))) void *dlsym(void *handle, const char *symbol) {
    void *p = real_dlsym()(handle, symbol);
    if (!p || strncmp(symbol, "cu", 2)) return p;
    if (!strcmp(symbol, "cuGetExportTable")) {
        if (p == (void *)(uintptr_t)cuGetExportTable) p = driver_symbol(symbol); /* found this library's */
        if (!p) return NULL;
        g_real_get_export_table = (GetExportTable)p;
        return (void *)(uintptr_t)traced_get_export_table;
    }
    if (!strcmp(symbol, "cuGetProcAddress")) {
        g_real_get_proc_address = (GetProcAddress)p;
        return (void *)(uintptr_t)traced_get_proc_address;
    }
    if (!strcmp(symbol, "cuGetProcAddress_v2")) {
        g_real_get_proc_address_v2 = (GetProcAddressV2)p;
        return (void *)(uintptr_t)traced_get_proc_address_v2;
    }
    return p;
}
