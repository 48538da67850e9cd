/* The entry points' names, fault injection, call counts, the handle registry and the small C control API
 * (ironaccel_fake_*) that ironaccel/fakes.py wraps. Every entry point calls into this file (ENTER, handles),
 * so it refers to none of them: only their names; the table of their addresses is proc_address.c's. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

typedef struct EntryName {
    const char *cname, *base;
} EntryName;

static const EntryName ENTRIES[EP_COUNT] = {
#define X(cname, base, since) {#cname, base},
    ENTRY_POINTS(X)
#undef X
};

const char *entry_name(int id) { return id >= 0 && id < EP_COUNT ? ENTRIES[id].cname : "?"; }

int entry_lookup(const char *name) {
    for (int i = 0; i < EP_COUNT; i++)
        if (!strcmp(ENTRIES[i].cname, name)) return i;
    for (int i = EP_COUNT - 1; i >= 0; i--) /* a base name means its newest version */
        if (!strcmp(ENTRIES[i].base, name)) return i;
    return -1;
}

/* ---- fault injection and call counts ---- */

typedef struct Fault {
    uint64_t at;   /* fail when the call count reaches this */
    int every;     /* and every call after it */
    CUresult code;
    int used;
} Fault;

#define MAX_FAULTS 8
static pthread_mutex_t g_fault_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_calls[EP_COUNT];
static Fault g_faults[EP_COUNT][MAX_FAULTS];
static int g_nfaults[EP_COUNT];
static volatile int g_any_fault;

/* The checkpoint entry points act on a process, maybe this one, and never wait at its API gate. */
static int gated(int id) {
    return id != EP_cuCheckpointProcessGetState && id != EP_cuCheckpointProcessGetRestoreThreadId &&
           id != EP_cuCheckpointProcessLock && id != EP_cuCheckpointProcessCheckpoint &&
           id != EP_cuCheckpointProcessRestore && id != EP_cuCheckpointProcessUnlock;
}

CUresult fault_enter(int id) {
    if (gated(id)) api_gate_pass();
    __atomic_fetch_add(&g_calls[id], 1, __ATOMIC_RELAXED);
    if (!__atomic_load_n(&g_any_fault, __ATOMIC_ACQUIRE)) return CUDA_SUCCESS;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_fault_mu);
    uint64_t n = g_calls[id];
    for (int i = 0; i < g_nfaults[id]; i++) {
        Fault *f = &g_faults[id][i];
        if ((f->every && n >= f->at) || (!f->used && n == f->at)) {
            f->used = 1;
            rc = f->code;
            break;
        }
    }
    pthread_mutex_unlock(&g_fault_mu);
    return rc;
}

static int add_fault(int id, uint64_t at, int every, CUresult code) {
    pthread_mutex_lock(&g_fault_mu);
    int ok = g_nfaults[id] < MAX_FAULTS;
    if (ok) g_faults[id][g_nfaults[id]++] = (Fault){at, every, code, 0};
    __atomic_store_n(&g_any_fault, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_fault_mu);
    return ok ? 0 : -1;
}

static int parse_code(const char *s, CUresult *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end != s && *end == 0) {
        *out = (CUresult)v;
        return 0;
    }
    for (size_t i = 0; i < sizeof RESULT_NAMES / sizeof RESULT_NAMES[0]; i++)
        if (!strcmp(RESULT_NAMES[i].name, s)) {
            *out = RESULT_NAMES[i].code;
            return 0;
        }
    return -1;
}

/* IRONACCEL_FAKE_CUDA_FAULTS="cuMemAlloc_v2:3=CUDA_ERROR_OUT_OF_MEMORY,cuLaunchKernel:2+=719":
 * fail the 3rd call of cuMemAlloc_v2 once, and every cuLaunchKernel call from the 2nd on. */
void faults_from_env(void) {
    const char *spec = getenv("IRONACCEL_FAKE_CUDA_FAULTS");
    if (!spec || !*spec) return;
    char *copy = strdup(spec), *save = NULL;
    for (char *item = strtok_r(copy, ",; ", &save); item; item = strtok_r(NULL, ",; ", &save)) {
        char *colon = strchr(item, ':'), *eq = strchr(item, '=');
        CUresult code;
        if (!colon || !eq || eq < colon) {
            fake_log("IRONACCEL_FAKE_CUDA_FAULTS: cannot parse %s (want entry:N=CODE)", item);
            continue;
        }
        *colon = *eq = 0;
        int id = entry_lookup(item);
        char *end;
        unsigned long long at = strtoull(colon + 1, &end, 10);
        int every = *end == '+';
        if (id < 0 || at == 0 || parse_code(eq + 1, &code)) {
            fake_log("IRONACCEL_FAKE_CUDA_FAULTS: ignoring %s:%s=%s (unknown entry point, count or code)", item,
                     colon + 1, eq + 1);
            continue;
        }
        add_fault(id, at, every, code);
    }
    free(copy);
}

/* ---- the handle registry: an open-addressing set of live handle pointers ---- */

typedef struct HandleSlot {
    const void *p;
    int kind;
} HandleSlot;
static pthread_mutex_t g_handle_mu = PTHREAD_MUTEX_INITIALIZER;
static HandleSlot *g_handles;
static size_t g_handle_cap, g_handle_count;
#define TOMBSTONE ((const void *)1)

static size_t handle_hash(const void *p) { return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull); }

static void handle_insert_locked(const void *p, int kind) {
    size_t i = handle_hash(p) & (g_handle_cap - 1);
    while (g_handles[i].p && g_handles[i].p != TOMBSTONE) i = (i + 1) & (g_handle_cap - 1);
    g_handles[i] = (HandleSlot){p, kind};
    g_handle_count++;
}

void handle_add(void *p, int kind) {
    pthread_mutex_lock(&g_handle_mu);
    if ((g_handle_count + 1) * 2 > g_handle_cap) { /* half full, tombstones counted: rebuilt without them */
        HandleSlot *old = g_handles;
        size_t oldcap = g_handle_cap, live = 0;
        for (size_t i = 0; i < oldcap; i++) live += old[i].p && old[i].p != TOMBSTONE;
        /* sized by the live handles (a quarter full at most), not the old size: a program that creates and
         * destroys handles forever (a graph a step) keeps a table of the size its live handles need */
        for (g_handle_cap = 256; (live + 1) * 4 > g_handle_cap;) g_handle_cap *= 2;
        g_handles = calloc(g_handle_cap, sizeof *g_handles);
        g_handle_count = 0;
        for (size_t i = 0; i < oldcap; i++)
            if (old[i].p && old[i].p != TOMBSTONE) handle_insert_locked(old[i].p, old[i].kind);
        free(old);
    }
    handle_insert_locked(p, kind);
    pthread_mutex_unlock(&g_handle_mu);
}

static HandleSlot *handle_find_locked(const void *p) {
    if (!g_handle_cap || !p || p == TOMBSTONE) return NULL;
    size_t i = handle_hash(p) & (g_handle_cap - 1);
    for (size_t probes = 0; probes < g_handle_cap && g_handles[i].p; probes++) {
        if (g_handles[i].p == p) return &g_handles[i];
        i = (i + 1) & (g_handle_cap - 1);
    }
    return NULL;
}

int handle_ok(const void *p, int kind) {
    pthread_mutex_lock(&g_handle_mu);
    HandleSlot *s = handle_find_locked(p);
    int ok = s && s->kind == kind;
    pthread_mutex_unlock(&g_handle_mu);
    return ok;
}

CUresult handle_get(void *h, int kind, void *out) {
    if (!fake_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!h || !handle_ok(h, kind)) return CUDA_ERROR_INVALID_HANDLE;
    *(void **)out = h;
    return CUDA_SUCCESS;
}

void handle_remove(void *p) {
    pthread_mutex_lock(&g_handle_mu);
    HandleSlot *s = handle_find_locked(p);
    if (s) s->p = TOMBSTONE; /* count stays: tombstones are reclaimed when the table grows */
    pthread_mutex_unlock(&g_handle_mu);
}

/* ---- the control API ---- */

static pthread_mutex_t g_report_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_last_report[2048];

void set_last_report(const char *text) {
    pthread_mutex_lock(&g_report_mu);
    snprintf(g_last_report, sizeof g_last_report, "%s", text);
    pthread_mutex_unlock(&g_report_mu);
}

/** The string the CUDA backend checks to know it is talking to this fake. */
API const char *ironaccel_fake_identity(void) { return "ironaccel fake libcuda"; }

#ifndef IRONACCEL_SOURCE_HASH /* -DIRONACCEL_SOURCE_HASH="<hash>" (ironaccel/sourcehash.py: cbuild.py does) */
#define IRONACCEL_SOURCE_HASH "unrecorded" /* a build made otherwise: it never matches its sources */
#endif
/** The hash of the sources this library was built from (ironaccel/sourcehash.py): what a results file records. */
API const char *ironaccel_fake_source_hash(void) { return IRONACCEL_SOURCE_HASH; }

/** Fail the nth call (1 = the next one) of an entry point, counted from now, with code. 0 on success. */
API int ironaccel_fake_inject(const char *entry, uint64_t nth, int code) {
    int id = entry ? entry_lookup(entry) : -1;
    if (id < 0 || nth == 0) return -1;
    return add_fault(id, __atomic_load_n(&g_calls[id], __ATOMIC_RELAXED) + nth, 0, code);
}

/** Forget injected faults and zero the call counts. */
API void ironaccel_fake_reset(void) {
    pthread_mutex_lock(&g_fault_mu);
    memset(g_nfaults, 0, sizeof g_nfaults);
    memset(g_calls, 0, sizeof g_calls);
    __atomic_store_n(&g_any_fault, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_fault_mu);
}

/** Calls of an entry point (versioned or base name) so far; -1 for a name the fake does not implement. */
API int64_t ironaccel_fake_call_count(const char *entry) {
    int id = entry ? entry_lookup(entry) : -1;
    return id < 0 ? -1 : (int64_t)__atomic_load_n(&g_calls[id], __ATOMIC_RELAXED);
}

/** The last memcheck / launch failure report ("" when there was none). */
API const char *ironaccel_fake_last_report(void) { return g_last_report; }

/** Names of entry points implemented, one per line, for tests and the README. */
API const char *ironaccel_fake_entry_points(void) {
    static char *list;
    pthread_mutex_lock(&g_report_mu);
    if (!list) {
        size_t n = 1;
        for (int i = 0; i < EP_COUNT; i++) n += strlen(ENTRIES[i].cname) + 1;
        list = malloc(n);
        list[0] = 0;
        for (int i = 0; i < EP_COUNT; i++) strcat(strcat(list, ENTRIES[i].cname), "\n");
    }
    pthread_mutex_unlock(&g_report_mu);
    return list;
}
