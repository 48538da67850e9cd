/* Device memory: its own reserved address range, a table of live allocations (device, pinned host,
 * registered host, module globals), a device memory limit, the leak report. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake.h"

#define RESERVE_BYTES (1ull << 38) /* 256 GiB of address space, committed page by page */
#define ALLOC_ALIGN 256 /* what cuMemAlloc's addresses are aligned to on hardware: no allocation starts nearer */
#define PAGE 4096ull
#define FREED_HISTORY 256

static pthread_mutex_t g_mem_mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *g_space;
static uint64_t g_bump;
static uint64_t g_total, g_used;
static AllocInfo *g_allocs; /* sorted by base */
static int g_nallocs, g_capallocs;
static uint64_t g_serial;
static AllocInfo g_freed[FREED_HISTORY];
static int g_nfreed;

/* Work items that may touch device memory run pinned (mem_pin/mem_unpin around them, on the stream
 * workers): a free while any pin is active takes the allocation out of the table at once (a later launch
 * sees a use after free) but keeps its pages mapped until every pin older than the free has ended, so a
 * kernel or copy already running never touches an unmapped page. */
typedef struct Retired {
    uint64_t base, span;
    uint64_t epoch; /* the newest pin when it was freed */
} Retired;
static uint64_t g_pin_epoch;
static uint64_t *g_pins; /* epochs of the active pins */
static int g_npins, g_cappins;
static Retired *g_retired;
static int g_nretired, g_capretired;

static uint64_t parse_bytes(const char *s) {
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024.0; break;
    case 'm': case 'M': v *= 1024.0 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (uint64_t)v;
}

/* Called once from cuInit. */
int mem_init(void) {
    const char *limit = getenv("IRONACCEL_FAKE_CUDA_MEMORY");
    g_total = limit && *limit ? parse_bytes(limit) : (16ull << 30);
    g_space = mmap(NULL, RESERVE_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (g_space == MAP_FAILED) {
        g_space = NULL;
        return -1;
    }
    g_bump = PAGE; /* address 0 is never handed out */
    return 0;
}

uint64_t mem_total(void) { return g_total; }
uint64_t mem_used(void) {
    pthread_mutex_lock(&g_mem_mu);
    uint64_t u = g_used;
    pthread_mutex_unlock(&g_mem_mu);
    return u;
}

static int find_index_locked(uint64_t addr) {
    int lo = 0, hi = g_nallocs - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        AllocInfo *a = &g_allocs[mid];
        if (addr < a->base) hi = mid - 1;
        else if (addr >= a->base + (a->size ? a->size : 1)) lo = mid + 1;
        else return mid;
    }
    return -1;
}

static void insert_locked(AllocInfo info) {
    if (g_nallocs == g_capallocs) {
        g_capallocs = g_capallocs ? g_capallocs * 2 : 64;
        g_allocs = realloc(g_allocs, g_capallocs * sizeof *g_allocs);
    }
    int i = g_nallocs;
    while (i > 0 && g_allocs[i - 1].base > info.base) {
        g_allocs[i] = g_allocs[i - 1];
        i--;
    }
    g_allocs[i] = info;
    g_nallocs++;
}

/* Device, pinned and managed memory come from the reserved range, never reusing an address, so a use
 * after free always lands on an address no allocation owns. */
static CUresult alloc_with_flags(Context *ctx, uint64_t size, int kind, unsigned flags, uint64_t *out) {
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    if (!g_space) return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t span = (size + PAGE - 1) & ~(PAGE - 1);
    pthread_mutex_lock(&g_mem_mu);
    int counts = kind == A_DEVICE || kind == A_MODULE_GLOBAL;
    if ((counts && g_used + size > g_total) || g_bump + span > RESERVE_BYTES || size > RESERVE_BYTES) {
        pthread_mutex_unlock(&g_mem_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint8_t *p = g_space + g_bump;
    if (mprotect(p, span, PROT_READ | PROT_WRITE)) {
        pthread_mutex_unlock(&g_mem_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g_bump += span;
    if (counts) g_used += size;
    insert_locked((AllocInfo){(uint64_t)(uintptr_t)p, size, kind, ctx, ++g_serial, flags});
    pthread_mutex_unlock(&g_mem_mu);
    *out = (uint64_t)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult mem_alloc(Context *ctx, uint64_t size, int kind, uint64_t *out) {
    return alloc_with_flags(ctx, size, kind, 0, out);
}

CUresult mem_alloc_from_pool(Context *ctx, uint64_t size, int kind, uint64_t *out) {
    return alloc_with_flags(ctx, size, kind, MEM_FROM_POOL, out);
}

CUresult mem_alloc_managed(Context *ctx, uint64_t size, uint64_t *out) {
    return alloc_with_flags(ctx, size, A_DEVICE, MEM_MANAGED, out);
}

/* An address range of its own for memory mapped later, maybe many times (a graph allocation: the same
 * address each time its graph runs); 0 when the range is used up. */
uint64_t mem_reserve(uint64_t size) {
    if (!g_space || size == 0 || size > RESERVE_BYTES) return 0;
    uint64_t span = (size + PAGE - 1) & ~(PAGE - 1);
    pthread_mutex_lock(&g_mem_mu);
    uint64_t base = 0;
    if (g_bump + span <= RESERVE_BYTES) {
        base = (uint64_t)(uintptr_t)(g_space + g_bump);
        g_bump += span;
    }
    pthread_mutex_unlock(&g_mem_mu);
    return base;
}

CUresult mem_map_reserved(Context *ctx, uint64_t base, uint64_t size, int kind, unsigned flags) {
    uint64_t span = (size + PAGE - 1) & ~(PAGE - 1);
    pthread_mutex_lock(&g_mem_mu);
    int counts = kind == A_DEVICE;
    CUresult rc = CUDA_SUCCESS;
    if (find_index_locked(base) >= 0) rc = CUDA_ERROR_INVALID_VALUE;
    else if (counts && g_used + size > g_total) rc = CUDA_ERROR_OUT_OF_MEMORY;
    else if (mprotect((void *)(uintptr_t)base, span, PROT_READ | PROT_WRITE)) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        for (int i = 0; i < g_nretired; i++) /* an unmap still pending from its last free must not hit it */
            if (g_retired[i].base == base) g_retired[i--] = g_retired[--g_nretired];
        if (counts) g_used += size;
        insert_locked((AllocInfo){base, size, kind, ctx, ++g_serial, flags});
    }
    pthread_mutex_unlock(&g_mem_mu);
    return rc;
}

/* Registers host memory the caller owns (cuMemHostRegister). */
CUresult mem_register(Context *ctx, void *p, uint64_t size, unsigned flags) {
    pthread_mutex_lock(&g_mem_mu);
    uint64_t base = (uint64_t)(uintptr_t)p;
    for (int i = 0; i < g_nallocs; i++) {
        AllocInfo *a = &g_allocs[i];
        if (base < a->base + a->size && a->base < base + size) {
            pthread_mutex_unlock(&g_mem_mu);
            return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        }
    }
    insert_locked((AllocInfo){base, size, A_HOST_REGISTERED, ctx, ++g_serial, flags});
    pthread_mutex_unlock(&g_mem_mu);
    return CUDA_SUCCESS;
}

/* Gives the pages back and leaves the range reserved: a fresh inaccessible mapping also drops a shared one
 * (IPC) with its file. */
static void unmap(uint64_t base, uint64_t span) {
    mmap((void *)(uintptr_t)base, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

#define MAX_FREE_HOOKS 4
static void (*g_free_hooks[MAX_FREE_HOOKS])(const AllocInfo *);

void mem_add_free_hook(void (*hook)(const AllocInfo *)) {
    pthread_mutex_lock(&g_mem_mu);
    int i = 0;
    while (i < MAX_FREE_HOOKS && g_free_hooks[i] && g_free_hooks[i] != hook) i++;
    if (i < MAX_FREE_HOOKS) g_free_hooks[i] = hook; /* more hooks than files sharing memory: a bug */
    pthread_mutex_unlock(&g_mem_mu);
}

int mem_mark(uint64_t base, uint64_t serial, unsigned flag) {
    pthread_mutex_lock(&g_mem_mu);
    int i = find_index_locked(base);
    int ok = i >= 0 && g_allocs[i].base == base && g_allocs[i].serial == serial;
    if (ok) g_allocs[i].flags |= flag;
    pthread_mutex_unlock(&g_mem_mu);
    return ok;
}

static void remove_locked(int i) {
    AllocInfo a = g_allocs[i];
    memmove(&g_allocs[i], &g_allocs[i + 1], (g_nallocs - i - 1) * sizeof *g_allocs);
    g_nallocs--;
    g_freed[g_nfreed++ % FREED_HISTORY] = a;
    for (int h = 0; h < MAX_FREE_HOOKS && g_free_hooks[h] && (a.flags & MEM_SHARED_MASK); h++) g_free_hooks[h](&a);
    if (a.kind == A_HOST_REGISTERED) return;
    if (a.kind == A_DEVICE || a.kind == A_MODULE_GLOBAL) g_used -= a.size;
    uint64_t span = (a.size + PAGE - 1) & ~(PAGE - 1);
    if (!g_npins) {
        unmap(a.base, span);
        return;
    }
    if (g_nretired == g_capretired) {
        g_capretired = g_capretired ? g_capretired * 2 : 16;
        g_retired = realloc(g_retired, g_capretired * sizeof *g_retired);
    }
    g_retired[g_nretired++] = (Retired){a.base, span, g_pin_epoch};
}

uint64_t mem_pin(void) {
    pthread_mutex_lock(&g_mem_mu);
    if (g_npins == g_cappins) {
        g_cappins = g_cappins ? g_cappins * 2 : 16;
        g_pins = realloc(g_pins, g_cappins * sizeof *g_pins);
    }
    uint64_t epoch = ++g_pin_epoch;
    g_pins[g_npins++] = epoch;
    pthread_mutex_unlock(&g_mem_mu);
    return epoch;
}

void mem_unpin(uint64_t epoch) {
    pthread_mutex_lock(&g_mem_mu);
    uint64_t oldest = UINT64_MAX;
    for (int i = 0; i < g_npins; i++)
        if (g_pins[i] == epoch) g_pins[i--] = g_pins[--g_npins];
        else if (g_pins[i] < oldest) oldest = g_pins[i];
    for (int i = 0; i < g_nretired; i++)
        if (g_retired[i].epoch < oldest) { /* every pin that could have seen it has ended */
            unmap(g_retired[i].base, g_retired[i].span);
            g_retired[i--] = g_retired[--g_nretired];
        }
    pthread_mutex_unlock(&g_mem_mu);
}

/* Frees the allocation that starts at base, if its kind is in kind_mask (1 << kind). */
CUresult mem_free(uint64_t base, int kind_mask) {
    pthread_mutex_lock(&g_mem_mu);
    int i = find_index_locked(base);
    if (i < 0 || g_allocs[i].base != base || !(kind_mask & (1 << g_allocs[i].kind))) {
        pthread_mutex_unlock(&g_mem_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    remove_locked(i);
    pthread_mutex_unlock(&g_mem_mu);
    return CUDA_SUCCESS;
}

void mem_set_pool(uint64_t base, const void *pool) {
    pthread_mutex_lock(&g_mem_mu);
    int i = find_index_locked(base);
    if (i >= 0 && g_allocs[i].base == base) g_allocs[i].pool = pool;
    pthread_mutex_unlock(&g_mem_mu);
}

int mem_find(uint64_t addr, AllocInfo *out) {
    pthread_mutex_lock(&g_mem_mu);
    int i = find_index_locked(addr);
    if (i >= 0 && out) *out = g_allocs[i];
    pthread_mutex_unlock(&g_mem_mu);
    return i >= 0;
}

int mem_in_device_range(uint64_t addr) {
    uint64_t base = (uint64_t)(uintptr_t)g_space;
    return g_space && addr >= base && addr - base < RESERVE_BYTES;
}

int mem_span_ok(uint64_t addr, uint64_t n) {
    AllocInfo a;
    if (!mem_find(addr, &a)) return 0;
    return addr + n <= a.base + a.size && addr + n >= addr;
}

/* The end of what a kernel may touch of an allocation: its last byte, or with IRONACCEL_FAKE_MEMCHECK=padded
 * the end of its last ALLOC_ALIGN bytes, which on hardware are mapped and belong to no other allocation (a
 * kernel that runs a little past an array runs there without a fault). The fake maps whole pages, so the
 * padding is there too; memory the caller registered is its own and stays exact. */
static uint64_t kernel_end(const AllocInfo *a, int padded) {
    uint64_t end = a->base + a->size;
    if (!padded || a->kind == A_HOST_REGISTERED) return end;
    return (end + ALLOC_ALIGN - 1) & ~(uint64_t)(ALLOC_ALIGN - 1);
}

Range *mem_snapshot(int *count) {
    const char *memcheck = getenv("IRONACCEL_FAKE_MEMCHECK"); /* read at each launch, as the watchdog's */
    int padded = memcheck && !strcmp(memcheck, "padded");
    pthread_mutex_lock(&g_mem_mu);
    Range *r = malloc((g_nallocs + 1) * sizeof *r);
    for (int i = 0; i < g_nallocs; i++) r[i] = (Range){g_allocs[i].base, kernel_end(&g_allocs[i], padded)};
    *count = g_nallocs;
    pthread_mutex_unlock(&g_mem_mu);
    return r;
}

static const char *kind_name(const AllocInfo *a) {
    switch (a->kind) {
    case A_DEVICE: return a->flags & MEM_MANAGED ? "managed allocation" : "device allocation";
    case A_HOST_PINNED: return "pinned host allocation";
    case A_HOST_REGISTERED: return "registered host memory";
    default: return "module global";
    }
}

/* Says which allocation an address belongs to, was freed from, or is nearest to. */
void mem_describe(uint64_t addr, char *buf, size_t n) {
    pthread_mutex_lock(&g_mem_mu);
    for (int k = 0; k < FREED_HISTORY && k < g_nfreed; k++) {
        AllocInfo *f = &g_freed[(g_nfreed - 1 - k) % FREED_HISTORY];
        if (addr >= f->base && addr < f->base + f->size && find_index_locked(addr) < 0) {
            snprintf(buf, n, "use after free: %s #%llu [0x%llx, +%llu) was freed", kind_name(f),
                     (unsigned long long)f->serial, (unsigned long long)f->base, (unsigned long long)f->size);
            pthread_mutex_unlock(&g_mem_mu);
            return;
        }
    }
    AllocInfo *best = NULL;
    uint64_t best_dist = UINT64_MAX;
    for (int i = 0; i < g_nallocs; i++) {
        AllocInfo *a = &g_allocs[i];
        uint64_t end = a->base + a->size;
        uint64_t d = addr < a->base ? a->base - addr : addr >= end ? addr - end + 1 : 0;
        if (d < best_dist) best_dist = d, best = a;
    }
    if (best) {
        uint64_t end = best->base + best->size; /* inside it: an access that is misaligned, or a bad free */
        snprintf(buf, n, "nearest allocation: %s #%llu [0x%llx, +%llu), address is %llu bytes %s it",
                 kind_name(best), (unsigned long long)best->serial, (unsigned long long)best->base,
                 (unsigned long long)best->size,
                 (unsigned long long)(addr < best->base ? best->base - addr : addr < end ? addr - best->base
                                                                                          : addr - end),
                 addr < best->base ? "before" : addr < end ? "into" : "past the end of");
    } else
        snprintf(buf, n, "no live allocation");
    pthread_mutex_unlock(&g_mem_mu);
}

/* 0 off (the default: as a real driver, which prints nothing; a program may well exit, or destroy a context,
 * with memory its allocator's pool still holds, as CuPy and PyTorch do), 1 report, 2 error: a leak check asked
 * for, as compute-sanitizer's --leak-check is. */
static int leak_mode(void) {
    const char *m = getenv("IRONACCEL_FAKE_CUDA_LEAKS");
    if (m && !strcmp(m, "report")) return 1;
    if (m && !strcmp(m, "error")) return 2;
    return 0;
}

static int g_leaked; /* an error-mode leak was seen: the process exits with status 3 */

/* Prints the allocations a context still owns (or all of them when ctx is NULL); returns their count. */
static int report_leaks_locked(Context *ctx, const char *when) {
    int n = 0;
    uint64_t bytes = 0;
    for (int i = 0; i < g_nallocs; i++) {
        AllocInfo *a = &g_allocs[i];
        if (a->kind == A_MODULE_GLOBAL || (ctx && a->ctx != ctx)) continue;
        n++;
        bytes += a->size;
    }
    if (!n || !leak_mode()) return n;
    fake_log("leak report (%s): %d allocation(s), %llu bytes still live", when, n, (unsigned long long)bytes);
    int shown = 0;
    for (int i = 0; i < g_nallocs && shown < 20; i++) {
        AllocInfo *a = &g_allocs[i];
        if (a->kind == A_MODULE_GLOBAL || (ctx && a->ctx != ctx)) continue;
        fprintf(stderr, "  %s #%llu at 0x%llx, %llu bytes\n", kind_name(a), (unsigned long long)a->serial,
                (unsigned long long)a->base, (unsigned long long)a->size);
        shown++;
    }
    if (leak_mode() == 2) g_leaked = 1;
    return n;
}

/* At context destroy: report what it leaked, then release it (the device frees it on hardware too). */
void mem_release_context(Context *ctx) {
    pthread_mutex_lock(&g_mem_mu);
    report_leaks_locked(ctx, "context destroyed");
    for (int i = g_nallocs - 1; i >= 0; i--)
        if (g_allocs[i].ctx == ctx && g_allocs[i].kind != A_HOST_REGISTERED) remove_locked(i);
    for (int i = g_nallocs - 1; i >= 0; i--)
        if (g_allocs[i].ctx == ctx) remove_locked(i);
    pthread_mutex_unlock(&g_mem_mu);
}

void mem_report_at_exit(void) {
    if (fake_forked()) return; /* a forked child's memory is its parent's to report */
    pthread_mutex_lock(&g_mem_mu);
    report_leaks_locked(NULL, "process exit");
    int leaked = g_leaked;
    pthread_mutex_unlock(&g_mem_mu);
    if (leaked) {
        fflush(stderr);
        fflush(stdout);
        _exit(3);
    }
}

/** Live allocations (device, pinned, registered; not module globals). */
API uint64_t ironaccel_fake_live_allocations(void) {
    pthread_mutex_lock(&g_mem_mu);
    uint64_t n = 0;
    for (int i = 0; i < g_nallocs; i++) n += g_allocs[i].kind != A_MODULE_GLOBAL;
    pthread_mutex_unlock(&g_mem_mu);
    return n;
}

/** Bytes of device memory in use (the figure the memory limit applies to). */
API uint64_t ironaccel_fake_live_bytes(void) { return mem_used(); }

/** Changes the device memory size (what cuMemGetInfo reports and allocations are limited to). */
API void ironaccel_fake_set_memory_limit(uint64_t bytes) {
    pthread_mutex_lock(&g_mem_mu);
    g_total = bytes;
    pthread_mutex_unlock(&g_mem_mu);
}
