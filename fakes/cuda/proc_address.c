/* cuGetProcAddress: the table of every implemented entry point's address, the name resolution by version,
 * and a stub for each name asked for but not implemented. The top of the fake's dependencies: it refers to
 * every entry point, and nothing refers to it but the loader. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define X(cname, base, since) CUresult cname();
ENTRY_POINTS(X)
#undef X

typedef struct EntryRow {
    const char *cname, *base;
    int since;
    void *fn;
} EntryRow;

static const EntryRow ENTRIES[] = {
#define X(cname, base, since) {#cname, base, since, (void *)cname},
    ENTRY_POINTS(X)
#undef X
#define X(base, since, cname) {#cname, base, since, (void *)cname},
    ENTRY_ALIASES(X)
#undef X
};
#define NENTRIES (int)(sizeof ENTRIES / sizeof ENTRIES[0])

/* ---- entry points asked for but not implemented: a stub per name that says so once ---- */

#define MAX_STUBS 1024
static const char *g_stub_names[MAX_STUBS];
static int g_stub_warned[MAX_STUBS];
static int g_nstubs;
static pthread_mutex_t g_stub_mu = PTHREAD_MUTEX_INITIALIZER;

/* What every stub does: says so, once per name, and refuses. */
static CUresult not_implemented(const char *name, int *warned) {
    if (!__atomic_exchange_n(warned, 1, __ATOMIC_ACQ_REL))
        fake_log("%s is not implemented: returning CUDA_ERROR_NOT_SUPPORTED", name);
    return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult stub_called(int index) { return not_implemented(g_stub_names[index], &g_stub_warned[index]); }

/* Arguments are ignored; a CUresult-returning function may be called with any of them (SysV ABI). */
#define STUB1(i) static CUresult stub_##i(void) { return stub_called(__COUNTER__); }
#define STUB4(i) STUB1(i##0) STUB1(i##1) STUB1(i##2) STUB1(i##3)
#define STUB16(i) STUB4(i##0) STUB4(i##1) STUB4(i##2) STUB4(i##3)
#define STUB64(i) STUB16(i##0) STUB16(i##1) STUB16(i##2) STUB16(i##3)
#define STUB256(i) STUB64(i##0) STUB64(i##1) STUB64(i##2) STUB64(i##3)
/* names count in base 4 (stub_0000 .. stub_3333); __COUNTER__ numbers them in the same order as STUBS */
STUB256(0) STUB256(1) STUB256(2) STUB256(3)
#define REF1(i) (void *)stub_##i,
#define REF4(i) REF1(i##0) REF1(i##1) REF1(i##2) REF1(i##3)
#define REF16(i) REF4(i##0) REF4(i##1) REF4(i##2) REF4(i##3)
#define REF64(i) REF16(i##0) REF16(i##1) REF16(i##2) REF16(i##3)
#define REF256(i) REF64(i##0) REF64(i##1) REF64(i##2) REF64(i##3)
static void *const STUBS[MAX_STUBS] = {REF256(0) REF256(1) REF256(2) REF256(3)};

/* The exported stubs (UNIMPLEMENTED_EXPORTS, names NVIDIA's libraries look up with dlsym), which
 * cuGetProcAddress gives for those names too. */
#define X(name)                                       \
    API CUresult name(void) {                         \
        static int warned;                            \
        return not_implemented(#name, &warned);       \
    }
UNIMPLEMENTED_EXPORTS(X)
#undef X

static const struct {
    const char *name;
    void *fn;
} EXPORT_STUBS[] = {
#define X(name) {#name, (void *)name},
    UNIMPLEMENTED_EXPORTS(X)
#undef X
};

static void *stub_for(const char *name) {
    for (size_t i = 0; i < sizeof EXPORT_STUBS / sizeof EXPORT_STUBS[0]; i++)
        if (!strcmp(EXPORT_STUBS[i].name, name)) return EXPORT_STUBS[i].fn;
    pthread_mutex_lock(&g_stub_mu);
    void *fn = NULL;
    for (int i = 0; i < g_nstubs && !fn; i++)
        if (!strcmp(g_stub_names[i], name)) fn = STUBS[i];
    if (!fn && g_nstubs < MAX_STUBS) {
        g_stub_names[g_nstubs] = strdup(name);
        fn = STUBS[g_nstubs++];
    }
    pthread_mutex_unlock(&g_stub_mu);
    return fn;
}

/* A name as cuGetProcAddress is asked for it means the newest variant not newer than the version asked
 * (cuGraphGetEdges at 12030 is cuGraphGetEdges_v2); a variant's own C name means that variant. */
static void *resolve(const char *symbol, int version) {
    const EntryRow *best = NULL;
    for (int i = 0; i < NENTRIES; i++) {
        const EntryRow *r = &ENTRIES[i];
        if (!strcmp(r->base, symbol) && r->since <= version && (!best || r->since > best->since)) best = r;
    }
    if (best) return best->fn;
    for (int i = 0; i < NENTRIES; i++)
        if (!strcmp(ENTRIES[i].cname, symbol)) return ENTRIES[i].fn;
    for (int i = 0; i < NENTRIES; i++) /* asked with an older version than the one we have */
        if (!strcmp(ENTRIES[i].base, symbol)) return ENTRIES[i].fn;
    return NULL;
}

enum { PROC_SUCCESS = 0, PROC_SYMBOL_NOT_FOUND = 1 };

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
    ENTER(cuGetProcAddress_v2);
    (void)flags; /* per-thread default stream variants share the legacy implementation */
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    void *fn = resolve(symbol, version);
    if (!fn && !strncmp(symbol, "cu", 2)) fn = stub_for(symbol);
    *pfn = fn;
    if (status) *status = fn ? PROC_SUCCESS : PROC_SYMBOL_NOT_FOUND;
    return fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags) {
    ENTER(cuGetProcAddress);
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    void *fn = resolve(symbol, version);
    if (!fn && !strncmp(symbol, "cu", 2)) fn = stub_for(symbol);
    (void)flags;
    *pfn = fn;
    return fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
