/* Managed memory hints: cuMemAdvise, cuMemPrefetchAsync and the batch prefetch/discard calls, and the range
 * attributes that report them. Managed memory is host memory in the one address space device code uses, so
 * no data ever moves: what is kept is what the application asked for, page by page, which is all the range
 * attributes report on hardware too (the last prefetch location is the last one requested, not where the
 * pages are). Prefetches are recorded when their stream reaches them; advice at once. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define PAGE 4096ull
#define CPU_DEVICE_ID (-1)     /* CU_DEVICE_CPU */
#define INVALID_DEVICE_ID (-2) /* CU_DEVICE_INVALID */

enum { LOC_INVALID = 0, LOC_DEVICE = 1, LOC_HOST = 2, LOC_HOST_NUMA = 3, LOC_HOST_NUMA_CURRENT = 4 };
enum { ADVISE_SET_READ_MOSTLY = 1, ADVISE_UNSET_READ_MOSTLY, ADVISE_SET_PREFERRED, ADVISE_UNSET_PREFERRED,
       ADVISE_SET_ACCESSED_BY, ADVISE_UNSET_ACCESSED_BY };
enum { RANGE_READ_MOSTLY = 1, RANGE_PREFERRED, RANGE_ACCESSED_BY, RANGE_LAST_PREFETCH, RANGE_PREFERRED_TYPE,
       RANGE_PREFERRED_ID, RANGE_LAST_PREFETCH_TYPE, RANGE_LAST_PREFETCH_ID };
enum { ACCESSED_BY_DEVICE = 1, ACCESSED_BY_HOST = 2 };

typedef struct CUmemLocation { /* passed by value, as the driver API does */
    int type, id;
} CUmemLocation;

typedef struct PageHints {
    CUmemLocation preferred, prefetched; /* type LOC_INVALID: none */
    uint8_t read_mostly, accessed_by;
} PageHints;

typedef struct ManagedHints { /* one managed allocation's pages; serial tells a later allocation apart */
    uint64_t base, serial;
    PageHints *pages;
} ManagedHints;

static pthread_mutex_t g_hints_mu = PTHREAD_MUTEX_INITIALIZER;
static ManagedHints *g_hints;
static int g_nhints, g_caphints;

/* [p, p+count) must lie inside one live managed allocation; *a is it. */
static CUresult managed_range(CUdeviceptr p, size_t count, AllocInfo *a) {
    if (count == 0 || !mem_find(p, a) || !(a->flags & MEM_MANAGED) || p + count < p || p + count > a->base + a->size)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* The page hints of a live allocation (made on first use; hints of freed allocations dropped then). NULL when
 * out of memory. Called with g_hints_mu held. */
static PageHints *pages_locked(const AllocInfo *a) {
    for (int i = 0; i < g_nhints; i++)
        if (g_hints[i].base == a->base && g_hints[i].serial == a->serial) return g_hints[i].pages;
    for (int i = 0; i < g_nhints; i++) {
        AllocInfo live;
        if (!mem_find(g_hints[i].base, &live) || live.serial != g_hints[i].serial) {
            free(g_hints[i].pages);
            g_hints[i--] = g_hints[--g_nhints];
        }
    }
    if (g_nhints == g_caphints) {
        int cap = g_caphints ? g_caphints * 2 : 16;
        ManagedHints *grown = realloc(g_hints, cap * sizeof *grown);
        if (!grown) return NULL;
        g_hints = grown, g_caphints = cap;
    }
    PageHints *pages = calloc((a->size + PAGE - 1) / PAGE, sizeof *pages);
    if (pages) g_hints[g_nhints++] = (ManagedHints){a->base, a->serial, pages};
    return pages;
}

/* A location as the driver records it: HOST_NUMA_CURRENT is the calling thread's node, and the host has one
 * node (0). INVALID_DEVICE for a device other than ours, INVALID_VALUE for a type the call does not take. */
static CUresult resolve_location(CUmemLocation in, int numa_allowed, CUmemLocation *out) {
    switch (in.type) {
    case LOC_DEVICE:
        NEED_DEVICE(in.id);
        *out = in;
        return CUDA_SUCCESS;
    case LOC_HOST: *out = (CUmemLocation){LOC_HOST, 0}; return CUDA_SUCCESS;
    case LOC_HOST_NUMA:
        if (!numa_allowed || in.id != 0) return CUDA_ERROR_INVALID_VALUE;
        *out = in;
        return CUDA_SUCCESS;
    case LOC_HOST_NUMA_CURRENT:
        if (!numa_allowed) return CUDA_ERROR_INVALID_VALUE;
        *out = (CUmemLocation){LOC_HOST_NUMA, 0};
        return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

/* The legacy CUdevice form of a location: a device ordinal, or CU_DEVICE_CPU. */
static CUmemLocation device_location(CUdevice dev) {
    return dev == CPU_DEVICE_ID ? (CUmemLocation){LOC_HOST, 0} : (CUmemLocation){LOC_DEVICE, dev};
}

/* ---- advice: recorded at once ---- */

API CUresult cuMemAdvise_v2(CUdeviceptr p, size_t count, int advice, CUmemLocation location) {
    ENTER(cuMemAdvise_v2);
    NEED_CONTEXT(c);
    AllocInfo a;
    TRY(managed_range(p, count, &a));
    CUmemLocation where = {LOC_INVALID, 0};
    switch (advice) {
    case ADVISE_SET_READ_MOSTLY: case ADVISE_UNSET_READ_MOSTLY: case ADVISE_UNSET_PREFERRED: break;
    case ADVISE_SET_PREFERRED: TRY(resolve_location(location, 1, &where)); break;
    case ADVISE_SET_ACCESSED_BY: case ADVISE_UNSET_ACCESSED_BY: TRY(resolve_location(location, 0, &where)); break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    uint8_t who = where.type == LOC_DEVICE ? ACCESSED_BY_DEVICE : ACCESSED_BY_HOST;
    pthread_mutex_lock(&g_hints_mu);
    PageHints *pages = pages_locked(&a);
    if (pages)
        for (uint64_t i = (p - a.base) / PAGE; i <= (p + count - 1 - a.base) / PAGE; i++) {
            PageHints *h = &pages[i];
            switch (advice) {
            case ADVISE_SET_READ_MOSTLY: h->read_mostly = 1; break;
            case ADVISE_UNSET_READ_MOSTLY: h->read_mostly = 0; break;
            case ADVISE_SET_PREFERRED: case ADVISE_UNSET_PREFERRED: h->preferred = where; break;
            case ADVISE_SET_ACCESSED_BY: h->accessed_by |= who; break;
            default: h->accessed_by &= (uint8_t)~who; break;
            }
        }
    pthread_mutex_unlock(&g_hints_mu);
    return pages ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult cuMemAdvise(CUdeviceptr p, size_t count, int advice, CUdevice dev) {
    ENTER(cuMemAdvise);
    return cuMemAdvise_v2(p, count, advice, device_location(dev));
}

/* ---- prefetches: checked when queued, recorded when their stream reaches them ---- */

typedef struct PrefetchRange {
    CUdeviceptr p;
    size_t count;
    CUmemLocation where;
} PrefetchRange;
typedef struct Prefetches {
    size_t n;
    PrefetchRange r[];
} Prefetches;

static void record_prefetches(void *arg) {
    Prefetches *work = arg;
    pthread_mutex_lock(&g_hints_mu);
    for (size_t k = 0; k < work->n; k++) {
        PrefetchRange *r = &work->r[k];
        AllocInfo a;
        if (managed_range(r->p, r->count, &a) != CUDA_SUCCESS) continue; /* freed before the stream got here */
        PageHints *pages = pages_locked(&a);
        if (!pages) continue;
        for (uint64_t i = (r->p - a.base) / PAGE; i <= (r->p + r->count - 1 - a.base) / PAGE; i++)
            pages[i].prefetched = r->where;
    }
    pthread_mutex_unlock(&g_hints_mu);
    free(work);
}

/* Queues a recording of n prefetches (dptrs[i], sizes[i]) to locs[j] for i in [idx[j], idx[j+1]), as the batch
 * calls describe them (one location, idx {0}, for a single prefetch). A capture cannot hold one: the fake's
 * graphs have no prefetch node. */
static CUresult queue_prefetches(const CUdeviceptr *dptrs, const size_t *sizes, size_t n, const CUmemLocation *locs,
                                 const size_t *idx, size_t nlocs, unsigned long long flags, void *hStream,
                                 const char *what) {
    NEED_CONTEXT(c);
    Stream *s;
    TRY(stream_resolve(hStream, c, &s));
    if (!n || !dptrs || !sizes || !nlocs || nlocs > n || !locs || !idx || idx[0] != 0 || flags)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t j = 1; j < nlocs; j++)
        if (idx[j] <= idx[j - 1] || idx[j] >= n) return CUDA_ERROR_INVALID_VALUE;
    Prefetches *work = malloc(sizeof *work + n * sizeof work->r[0]);
    if (!work) return CUDA_ERROR_OUT_OF_MEMORY;
    work->n = n;
    for (size_t i = 0, j = 0; i < n; i++) {
        if (j + 1 < nlocs && i == idx[j + 1]) j++;
        AllocInfo a;
        CUresult rc = managed_range(dptrs[i], sizes[i], &a);
        if (rc == CUDA_SUCCESS) rc = resolve_location(locs[j], 1, &work->r[i].where);
        if (rc != CUDA_SUCCESS) {
            free(work);
            return rc;
        }
        work->r[i].p = dptrs[i], work->r[i].count = sizes[i];
    }
    if (s->capture) {
        free(work);
        return stream_capture_unsupported(s, what);
    }
    CUresult rc = stream_submit(s, record_prefetches, work);
    if (rc != CUDA_SUCCESS) free(work);
    return rc;
}

API CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t count, CUmemLocation location, unsigned flags,
                                   void *hStream) {
    ENTER(cuMemPrefetchAsync_v2);
    static const size_t first = 0;
    return queue_prefetches(&p, &count, 1, &location, &first, 1, flags, hStream, "cuMemPrefetchAsync");
}

API CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t count, CUdevice dev, void *hStream) {
    ENTER(cuMemPrefetchAsync);
    return cuMemPrefetchAsync_v2(p, count, device_location(dev), 0, hStream);
}

API CUresult cuMemPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *locs,
                                     size_t *idx, size_t nlocs, unsigned long long flags, void *hStream) {
    ENTER(cuMemPrefetchBatchAsync);
    return queue_prefetches(dptrs, sizes, count, locs, idx, nlocs, flags, hStream, "cuMemPrefetchBatchAsync");
}

/* Discarded pages' contents become indeterminate: keeping them is one of the values they may have. */
API CUresult cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *locs,
                                               size_t *idx, size_t nlocs, unsigned long long flags, void *hStream) {
    ENTER(cuMemDiscardAndPrefetchBatchAsync);
    return queue_prefetches(dptrs, sizes, count, locs, idx, nlocs, flags, hStream,
                            "cuMemDiscardAndPrefetchBatchAsync");
}

API CUresult cuMemDiscardBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count, unsigned long long flags,
                                    void *hStream) {
    ENTER(cuMemDiscardBatchAsync);
    NEED_CONTEXT(c);
    Stream *s;
    TRY(stream_resolve(hStream, c, &s));
    if (!count || !dptrs || !sizes || flags) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        AllocInfo a;
        TRY(managed_range(dptrs[i], sizes[i], &a));
    }
    return s->capture ? stream_capture_unsupported(s, "cuMemDiscardBatchAsync") : CUDA_SUCCESS;
}

/* ---- range attributes: what every page of the range agrees on ---- */

static int same_location(CUmemLocation x, CUmemLocation y) { return x.type == y.type && x.id == y.id; }

/* The legacy int form: a device ordinal, CU_DEVICE_CPU for any host location, CU_DEVICE_INVALID for none. */
static int location_as_device(CUmemLocation l) {
    return l.type == LOC_DEVICE ? l.id : l.type == LOC_INVALID ? INVALID_DEVICE_ID : CPU_DEVICE_ID;
}

static CUresult range_attribute(void *data, size_t size, int attr, const PageHints *pages, uint64_t first,
                                uint64_t last) {
    if (!data || (attr == RANGE_ACCESSED_BY ? size == 0 || size % 4 : size != 4)) return CUDA_ERROR_INVALID_VALUE;
    int read_mostly = 1, uniform_preferred = 1, uniform_prefetched = 1;
    uint8_t accessed_by = ACCESSED_BY_DEVICE | ACCESSED_BY_HOST;
    static const PageHints none;
    const PageHints *f = pages ? &pages[first] : &none;
    for (uint64_t i = first; pages && i <= last; i++) {
        read_mostly &= pages[i].read_mostly;
        accessed_by &= pages[i].accessed_by;
        uniform_preferred &= same_location(pages[i].preferred, f->preferred);
        uniform_prefetched &= same_location(pages[i].prefetched, f->prefetched);
    }
    if (!pages) read_mostly = 0, accessed_by = 0;
    CUmemLocation preferred = uniform_preferred ? f->preferred : (CUmemLocation){LOC_INVALID, 0};
    CUmemLocation prefetched = uniform_prefetched ? f->prefetched : (CUmemLocation){LOC_INVALID, 0};
    int *out = data;
    switch (attr) {
    case RANGE_READ_MOSTLY: *out = read_mostly; break;
    case RANGE_PREFERRED: *out = location_as_device(preferred); break;
    case RANGE_LAST_PREFETCH: *out = location_as_device(prefetched); break;
    case RANGE_PREFERRED_TYPE: *out = preferred.type; break;
    case RANGE_PREFERRED_ID: *out = preferred.id; break;
    case RANGE_LAST_PREFETCH_TYPE: *out = prefetched.type; break;
    case RANGE_LAST_PREFETCH_ID: *out = prefetched.id; break;
    case RANGE_ACCESSED_BY: {
        size_t n = size / 4, k = 0;
        if (accessed_by & ACCESSED_BY_DEVICE && k < n) out[k++] = 0;
        if (accessed_by & ACCESSED_BY_HOST && k < n) out[k++] = CPU_DEVICE_ID;
        while (k < n) out[k++] = INVALID_DEVICE_ID;
        break;
    }
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

API CUresult cuMemRangeGetAttributes(void **data, size_t *sizes, int *attrs, size_t n, CUdeviceptr p, size_t count) {
    ENTER(cuMemRangeGetAttributes);
    NEED_CONTEXT(c);
    AllocInfo a;
    if (!data || !sizes || !attrs || !n) return CUDA_ERROR_INVALID_VALUE;
    TRY(managed_range(p, count, &a));
    pthread_mutex_lock(&g_hints_mu);
    const PageHints *pages = NULL; /* no hints yet: every page has the defaults */
    for (int i = 0; i < g_nhints && !pages; i++)
        if (g_hints[i].base == a.base && g_hints[i].serial == a.serial) pages = g_hints[i].pages;
    CUresult rc = CUDA_SUCCESS;
    for (size_t k = 0; k < n && rc == CUDA_SUCCESS; k++)
        rc = range_attribute(data[k], sizes[k], attrs[k], pages, (p - a.base) / PAGE, (p + count - 1 - a.base) / PAGE);
    pthread_mutex_unlock(&g_hints_mu);
    return rc;
}

API CUresult cuMemRangeGetAttribute(void *data, size_t size, int attr, CUdeviceptr p, size_t count) {
    ENTER(cuMemRangeGetAttribute);
    return cuMemRangeGetAttributes(&data, &size, &attr, 1, p, count);
}
