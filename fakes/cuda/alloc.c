/* Memory entry points: device, pitched, managed and pinned host allocations, host registration, the
 * default pool and stream-ordered alloc/free, pointer attributes. The allocator itself is memory.c. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define CU_MEMHOSTALLOC_DEVICEMAP 0x02

API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    ENTER(cuMemGetInfo_v2);
    NEED_CONTEXT(c);
    if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
    uint64_t used = mem_used(), all = mem_total();
    *total = all;
    *free_bytes = used > all ? 0 : all - used;
    return CUDA_SUCCESS;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
    ENTER(cuMemAlloc_v2);
    NEED_CONTEXT(c);
    if (!dptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    return mem_alloc(c, size, A_DEVICE, dptr);
}

API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned elem) {
    ENTER(cuMemAllocPitch_v2);
    NEED_CONTEXT(c);
    if (!dptr || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t p = (width + 511) & ~(size_t)511, bytes;
    if (p < width || __builtin_mul_overflow(p, height, &bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    TRY(mem_alloc(c, bytes, A_DEVICE, dptr));
    *pitch = p;
    return CUDA_SUCCESS;
}

API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned flags) {
    ENTER(cuMemAllocManaged);
    NEED_CONTEXT(c);
    if (!dptr || size == 0 || (flags != 1 && flags != 2)) return CUDA_ERROR_INVALID_VALUE;
    return mem_alloc_managed(c, size, dptr); /* host-accessible already: one address space */
}

API CUresult cuMemFree_v2(CUdeviceptr p) {
    ENTER(cuMemFree_v2);
    NEED_CONTEXT(c);
    if (p == 0) return CUDA_SUCCESS;
    streams_sync_context(c); /* cuMemFree synchronizes the device, as on hardware */
    if (graph_mem_owns(p)) { /* a graph allocation: freed now, its memory kept in the graph pool */
        StreamOp op;
        TRY(graph_free_op(p, &op));
        TRY(op.cls->submit(c->null_stream, &op));
        streams_sync_context(c);
        return CUDA_SUCCESS;
    }
    return mem_free(p, 1 << A_DEVICE);
}

API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
    ENTER(cuMemGetAddressRange_v2);
    NEED_CONTEXT(c);
    AllocInfo a;
    if (!mem_find(p, &a)) return CUDA_ERROR_NOT_FOUND;
    if (base) *base = a.base;
    if (size) *size = a.size;
    return CUDA_SUCCESS;
}

API CUresult cuMemHostAlloc(void **pp, size_t size, unsigned flags) {
    ENTER(cuMemHostAlloc);
    NEED_CONTEXT(c);
    if (!pp || size == 0 || (flags & ~0xFu)) return CUDA_ERROR_INVALID_VALUE;
    uint64_t p;
    TRY(mem_alloc(c, size, A_HOST_PINNED, &p));
    *pp = (void *)(uintptr_t)p;
    return CUDA_SUCCESS;
}

API CUresult cuMemAllocHost_v2(void **pp, size_t size) {
    ENTER(cuMemAllocHost_v2);
    return cuMemHostAlloc(pp, size, 0);
}

API CUresult cuMemFreeHost(void *p) {
    ENTER(cuMemFreeHost);
    NEED_CONTEXT(c);
    streams_sync_context(c);
    return mem_free((uint64_t)(uintptr_t)p, 1 << A_HOST_PINNED);
}

API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *dptr, void *p, unsigned flags) {
    ENTER(cuMemHostGetDevicePointer_v2);
    NEED_CONTEXT(c);
    AllocInfo a;
    if (!dptr || flags || !mem_find((uint64_t)(uintptr_t)p, &a) ||
        (a.kind != A_HOST_PINNED && a.kind != A_HOST_REGISTERED))
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = (uint64_t)(uintptr_t)p; /* unified addressing: the same address on both sides */
    return CUDA_SUCCESS;
}

API CUresult cuMemHostGetFlags(unsigned *flags, void *p) {
    ENTER(cuMemHostGetFlags);
    NEED_CONTEXT(c);
    AllocInfo a;
    if (!flags || !mem_find((uint64_t)(uintptr_t)p, &a) || (a.kind != A_HOST_PINNED && a.kind != A_HOST_REGISTERED))
        return CUDA_ERROR_INVALID_VALUE;
    *flags = a.flags | CU_MEMHOSTALLOC_DEVICEMAP;
    return CUDA_SUCCESS;
}

API CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned flags) {
    ENTER(cuMemHostRegister_v2);
    NEED_CONTEXT(c);
    if (!p || size == 0 || (flags & ~0xFu) || (uintptr_t)p + size < (uintptr_t)p) return CUDA_ERROR_INVALID_VALUE;
    return mem_register(c, p, size, flags);
}

API CUresult cuMemHostUnregister(void *p) {
    ENTER(cuMemHostUnregister);
    NEED_CONTEXT(c);
    streams_sync_context(c);
    return mem_free((uint64_t)(uintptr_t)p, 1 << A_HOST_REGISTERED) ? CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
                                                                   : CUDA_SUCCESS;
}

/* ---- stream-ordered allocation: pools, allocations made when the stream reaches them ---- */

enum { ALLOCATION_PINNED = 1, ALLOCATION_MANAGED = 2 };                           /* CUmemAllocationType */
enum { LOCATION_NONE = 0, LOCATION_DEVICE = 1, LOCATION_HOST = 2, LOCATION_HOST_NUMA = 3 }; /* CUmemLocationType */
#define POOL_PROPS_BYTES 88 /* sizeof(CUmemPoolProps) */
#define HANDLE_POSIX_FD 1   /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, the one exportable handle type here */

typedef struct CUmemLocation {
    int type, id;
} CUmemLocation;

/* A memory pool: device memory (the device's default pool), pinned host memory (the host's default pools)
 * or managed memory (the default managed pools, one per location), and pools made by cuMemPoolCreate or
 * imported from another process. Every allocation is one of the allocator's own, so reuse and trimming have
 * nothing to act on; a pool made with a POSIX file-descriptor handle type has its memory in a file other
 * processes may map (pool_share.c). */
typedef struct Pool {
    int type;              /* CUmemAllocationType */
    CUmemLocation location; /* managed: the preferred location (type NONE: none) */
    uint64_t threshold;    /* CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, as set */
    SharedPool *shared;    /* exportable or imported: its memory */
    int device_access;     /* CUmemAccess_flags of device 0, as cuMemPoolSetAccess set it (not enforced) */
} Pool;

enum { ACCESS_NONE = 0, ACCESS_READ = 1, ACCESS_READWRITE = 3 }; /* CUmemAccess_flags */

static Pool g_default_pool = {ALLOCATION_PINNED, {LOCATION_DEVICE, 0}, 0, NULL, ACCESS_READWRITE};
static Pool g_host_pools[] = {{ALLOCATION_PINNED, {LOCATION_HOST, 0}, 0, NULL, ACCESS_READWRITE},
                              {ALLOCATION_PINNED, {LOCATION_HOST_NUMA, 0}, 0, NULL, ACCESS_READWRITE}};
static Pool g_managed_pools[] = {{ALLOCATION_MANAGED, {LOCATION_NONE, 0}, 0},
                                 {ALLOCATION_MANAGED, {LOCATION_DEVICE, 0}, 0},
                                 {ALLOCATION_MANAGED, {LOCATION_HOST, 0}, 0},
                                 {ALLOCATION_MANAGED, {LOCATION_HOST_NUMA, 0}, 0}};
#define MANAGED_POOLS (sizeof g_managed_pools / sizeof g_managed_pools[0])

static CUresult pool_get(void *h, Pool **out) {
    NEED_INIT();
    for (size_t i = 0; i < MANAGED_POOLS; i++)
        if (h == &g_managed_pools[i]) return *out = h, CUDA_SUCCESS;
    if (h == &g_default_pool || h == &g_host_pools[0] || h == &g_host_pools[1]) return *out = h, CUDA_SUCCESS;
    return handle_get(h, H_POOL, out);
}

/* The default managed pool of a location (host NUMA node 0 is the host's one node); NULL when it has none. */
static Pool *managed_pool_for(const CUmemLocation *l) {
    for (size_t i = 0; i < MANAGED_POOLS; i++) {
        const CUmemLocation *m = &g_managed_pools[i].location;
        if (m->type == l->type && (l->type == LOCATION_NONE || l->type == LOCATION_HOST || m->id == l->id))
            return &g_managed_pools[i];
    }
    return NULL;
}

API CUresult cuDeviceGetDefaultMemPool(void **pool, CUdevice dev) {
    ENTER(cuDeviceGetDefaultMemPool);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    *pool = &g_default_pool;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetMemPool(void **pool, CUdevice dev) {
    ENTER(cuDeviceGetMemPool);
    return cuDeviceGetDefaultMemPool(pool, dev);
}

/* cuMemGetMemPool / cuMemGetDefaultMemPool: no pool is ever made current, so the current one is the default.
 * The host is NUMA node 0, its one node. */
static CUresult location_pool(void **pool, const CUmemLocation *l, int type) {
    NEED_INIT();
    if (!pool || !l) return CUDA_ERROR_INVALID_VALUE;
    if (l->type == LOCATION_DEVICE) NEED_DEVICE(l->id);
    if (type == ALLOCATION_PINNED) {
        if (l->type == LOCATION_DEVICE) return *pool = &g_default_pool, CUDA_SUCCESS;
        if (l->type == LOCATION_HOST) return *pool = &g_host_pools[0], CUDA_SUCCESS;
        if (l->type == LOCATION_HOST_NUMA && l->id == 0) return *pool = &g_host_pools[1], CUDA_SUCCESS;
        return CUDA_ERROR_INVALID_VALUE;
    }
    Pool *m = type == ALLOCATION_MANAGED ? managed_pool_for(l) : NULL;
    if (!m) return CUDA_ERROR_INVALID_VALUE;
    *pool = m;
    return CUDA_SUCCESS;
}

API CUresult cuMemGetMemPool(void **pool, CUmemLocation *location, int type) {
    ENTER(cuMemGetMemPool);
    return location_pool(pool, location, type);
}

API CUresult cuMemGetDefaultMemPool(void **pool, CUmemLocation *location, int type) {
    ENTER(cuMemGetDefaultMemPool);
    return location_pool(pool, location, type);
}

/* Pools of device memory, pinned host memory (the host or NUMA node 0) or managed memory. A POSIX file-descriptor
 * handle type makes a device or pinned pool shareable; host pinned memory is shared from a NUMA node only (cuda.core's
 * PinnedMemoryResource asks for node 0 for that reason); other handle types are not implemented. */
API CUresult cuMemPoolCreate(void **pool, const void *props) {
    ENTER(cuMemPoolCreate);
    NEED_INIT();
    if (!pool || !props) return CUDA_ERROR_INVALID_VALUE;
    struct {
        int type, handle_types;
        CUmemLocation location;
        void *win32_security;
        size_t max_size;
    } p;
    memcpy(&p, props, sizeof p);
    if (p.type != ALLOCATION_MANAGED && p.type != ALLOCATION_PINNED) return CUDA_ERROR_INVALID_VALUE;
    if (p.location.type == LOCATION_DEVICE) NEED_DEVICE(p.location.id);
    if (p.handle_types & ~HANDLE_POSIX_FD || (p.handle_types && p.type == ALLOCATION_MANAGED))
        return CUDA_ERROR_NOT_SUPPORTED;
    if (p.type == ALLOCATION_MANAGED ? !managed_pool_for(&p.location)
                                     : (p.location.type != LOCATION_DEVICE && p.location.type != LOCATION_HOST &&
                                        (p.location.type != LOCATION_HOST_NUMA || p.location.id != 0)))
        return CUDA_ERROR_INVALID_VALUE;
    if (p.handle_types && p.location.type == LOCATION_HOST) return CUDA_ERROR_INVALID_VALUE;
    Pool *made = calloc(1, sizeof *made);
    if (!made) return CUDA_ERROR_OUT_OF_MEMORY;
    *made = (Pool){p.type, p.location, 0, NULL, ACCESS_READWRITE};
    if (p.location.type == LOCATION_HOST) made->location.id = 0;
    int kind = p.location.type == LOCATION_DEVICE ? A_DEVICE : A_HOST_PINNED;
    CUresult rc = p.handle_types ? shared_pool_create(kind, p.location.type, made->location.id, p.max_size,
                                                      &made->shared)
                                 : CUDA_SUCCESS;
    if (rc != CUDA_SUCCESS) {
        free(made);
        return rc;
    }
    handle_add(made, H_POOL);
    *pool = made;
    return CUDA_SUCCESS;
}

/* Outstanding allocations stay valid (they are the allocator's, not the pool's), as the driver allows. */
API CUresult cuMemPoolDestroy(void *pool) {
    ENTER(cuMemPoolDestroy);
    NEED_INIT();
    if (!handle_ok(pool, H_POOL)) return CUDA_ERROR_INVALID_VALUE; /* a default pool cannot be destroyed */
    handle_remove(pool);
    Pool *p = pool;
    if (p->shared) shared_pool_release(p->shared);
    free(pool);
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolGetAttribute(void *pool, int attr, void *value) {
    ENTER(cuMemPoolGetAttribute);
    Pool *p;
    TRY(pool_get(pool, &p));
    if (!value || attr < 1 || attr > 8) return CUDA_ERROR_INVALID_VALUE;
    if (attr <= 3) *(int *)value = 1; /* reuse policies: all on */
    else if (attr == 4) *(uint64_t *)value = p->threshold;
    else *(uint64_t *)value = mem_used(); /* reserved/used, current/high: the one allocator's figure */
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolSetAttribute(void *pool, int attr, void *value) {
    ENTER(cuMemPoolSetAttribute);
    Pool *p;
    TRY(pool_get(pool, &p));
    if (!value || attr < 1 || attr > 8) return CUDA_ERROR_INVALID_VALUE;
    if (attr == 4) p->threshold = *(uint64_t *)value;
    return CUDA_SUCCESS;
}

/* Access from the one device, recorded and reported; the device reaches every pool's memory either way. */
API CUresult cuMemPoolSetAccess(void *pool, const void *descs, size_t count) {
    ENTER(cuMemPoolSetAccess);
    Pool *p;
    TRY(pool_get(pool, &p));
    if (!descs && count) return CUDA_ERROR_INVALID_VALUE;
    struct {
        CUmemLocation location;
        int flags;
    } d;
    for (size_t i = 0; i < count; i++) {
        memcpy(&d, (const char *)descs + i * sizeof d, sizeof d);
        if (d.location.type != LOCATION_DEVICE) return CUDA_ERROR_INVALID_VALUE;
        NEED_DEVICE(d.location.id);
        if (d.flags != ACCESS_NONE && d.flags != ACCESS_READ && d.flags != ACCESS_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < count; i++) {
        memcpy(&d, (const char *)descs + i * sizeof d, sizeof d);
        p->device_access = d.flags;
    }
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolGetAccess(int *flags, void *pool, CUmemLocation *location) {
    ENTER(cuMemPoolGetAccess);
    Pool *p;
    TRY(pool_get(pool, &p));
    if (!flags || !location || location->type != LOCATION_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    NEED_DEVICE(location->id);
    *flags = p->device_access;
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolTrimTo(void *pool, size_t keep) {
    ENTER(cuMemPoolTrimTo);
    (void)keep;
    Pool *p;
    return pool_get(pool, &p);
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, const Pool *pool, void *hStream) {
    NEED_CONTEXT(c);
    Stream *s;
    TRY(stream_resolve(hStream, c, &s));
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    if (size == 0) { /* succeeds with the null address, as on hardware; freeing it is a no-op */
        *dptr = 0;
        return CUDA_SUCCESS;
    }
    if (s->capture) { /* a memory allocation node, its address fixed now */
        uint8_t props[POOL_PROPS_BYTES] = {0};
        memcpy(props, &pool->type, sizeof pool->type);
        memcpy(props + 8, &pool->location, sizeof pool->location);
        StreamOp op;
        CUdeviceptr base;
        TRY(graph_alloc_op(c, size, props, NULL, 0, &base, &op));
        CUresult rc = stream_capture(s, &op);
        if (rc == CUDA_SUCCESS) *dptr = base;
        op.cls->drop(&op);
        return rc;
    }
    /* The address is needed now; memory is usable by work queued after this on the stream either way. */
    CUresult rc;
    if (pool->shared) rc = shared_pool_alloc(pool->shared, c, size, dptr);
    else if (pool->type == ALLOCATION_MANAGED) rc = mem_alloc_managed(c, size, dptr);
    else rc = mem_alloc_from_pool(c, size, pool->location.type == LOCATION_DEVICE ? A_DEVICE : A_HOST_PINNED, dptr);
    if (rc == CUDA_SUCCESS) mem_set_pool(*dptr, pool); /* what CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE answers */
    return rc;
}

API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, void *hStream) {
    ENTER(cuMemAllocAsync);
    return alloc_async(dptr, size, &g_default_pool, hStream);
}

API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, void *pool, void *hStream) {
    ENTER(cuMemAllocFromPoolAsync);
    Pool *p;
    TRY(pool_get(pool, &p));
    return alloc_async(dptr, size, p, hStream);
}

static void free_when_reached(void *arg) {
    uint64_t *p = arg;
    mem_free(*p, 1 << A_DEVICE | 1 << A_HOST_PINNED);
    free(p);
}

API CUresult cuMemFreeAsync(CUdeviceptr p, void *hStream) {
    ENTER(cuMemFreeAsync);
    NEED_CONTEXT(c);
    Stream *s;
    TRY(stream_resolve(hStream, c, &s));
    if (p == 0) return CUDA_SUCCESS; /* what a zero-byte cuMemAllocAsync returned */
    if (graph_mem_owns(p)) { /* a graph allocation: freed in stream order, or a memory free node */
        StreamOp op;
        TRY(graph_free_op(p, &op));
        return s->capture ? stream_capture(s, &op) : op.cls->submit(s, &op);
    }
    if (s->capture) return stream_capture_unsupported(s, "cuMemFreeAsync of memory not allocated by a graph");
    AllocInfo a;
    if (!mem_find(p, &a) || a.base != p ||
        (a.kind != A_DEVICE && !(a.kind == A_HOST_PINNED && (a.flags & (MEM_FROM_POOL | MEM_POOL_SHARED)))))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t *arg = malloc(sizeof *arg);
    *arg = p;
    return stream_submit(s, free_when_reached, arg);
}

/* ---- pools shared between processes (pool_share.c): the pool as a file descriptor, pointers as 64 bytes ---- */

API CUresult cuMemPoolExportToShareableHandle(void *handle, void *pool, int type, unsigned long long flags) {
    ENTER(cuMemPoolExportToShareableHandle);
    Pool *p;
    TRY(pool_get(pool, &p));
    if (!handle || flags || type != HANDLE_POSIX_FD || !p->shared) return CUDA_ERROR_INVALID_VALUE;
    return shared_pool_export_fd(p->shared, (int *)handle);
}

/* handle: the descriptor itself, as the driver takes a POSIX handle; it stays the caller's to close. */
API CUresult cuMemPoolImportFromShareableHandle(void **pool, void *handle, int type, unsigned long long flags) {
    ENTER(cuMemPoolImportFromShareableHandle);
    NEED_INIT();
    if (!pool || flags || type != HANDLE_POSIX_FD) return CUDA_ERROR_INVALID_VALUE;
    Pool *made = calloc(1, sizeof *made);
    if (!made) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = shared_pool_import((int)(intptr_t)handle, &made->shared);
    if (rc != CUDA_SUCCESS) {
        free(made);
        return rc;
    }
    made->type = ALLOCATION_PINNED; /* no access until the importer sets it, as the driver has it */
    shared_pool_kind(made->shared, &made->location.type, &made->location.id);
    handle_add(made, H_POOL);
    *pool = made;
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolExportPointer(void *data, CUdeviceptr ptr) {
    ENTER(cuMemPoolExportPointer);
    NEED_INIT();
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    return shared_pool_export_pointer(ptr, data);
}

API CUresult cuMemPoolImportPointer(CUdeviceptr *ptr, void *pool, void *data) {
    ENTER(cuMemPoolImportPointer);
    NEED_CONTEXT(c);
    Pool *p;
    TRY(pool_get(pool, &p));
    if (!ptr || !data || !p->shared) return CUDA_ERROR_INVALID_VALUE;
    return shared_pool_import_pointer(p->shared, c, data, ptr);
}

/* ---- pointer attributes ---- */

enum { MEMTYPE_HOST = 1, MEMTYPE_DEVICE = 2 };

static CUresult pointer_attribute(void *out, int attr, CUdeviceptr p) {
    AllocInfo a;
    int found = mem_find(p, &a);
    if (!found) {
        if (attr == 2 /* MEMORY_TYPE */ || attr == 1 || attr == 3 || attr == 4) return CUDA_ERROR_INVALID_VALUE;
    }
    int dev_mem = found && (a.kind == A_DEVICE || a.kind == A_MODULE_GLOBAL);
    switch (attr) {
    case 1: *(void **)out = a.ctx; break;
    case 2: *(unsigned *)out = dev_mem ? MEMTYPE_DEVICE : MEMTYPE_HOST; break;
    case 3: *(uint64_t *)out = p; break;
    case 4:
        if (dev_mem) return CUDA_ERROR_INVALID_VALUE;
        *(void **)out = (void *)(uintptr_t)p;
        break;
    case 6: *(int *)out = 1; break;
    case 7: *(uint64_t *)out = found ? a.serial : 0; break;
    case 8: *(int *)out = found && (a.flags & MEM_MANAGED); break; /* IS_MANAGED */
    case 9: *(int *)out = 0; break;
    case 10: *(int *)out = 0; break;
    case 11: *(uint64_t *)out = found ? a.base : 0; break;
    case 12: *(size_t *)out = found ? a.size : 0; break;
    case 13: *(int *)out = found; break;
    case 14: *(uint64_t *)out = 0; break;
    case 15: *(int *)out = 0; break;
    case 16: *(int *)out = 0; break; /* PROT_READWRITE */
    case 17: *(void **)out = found ? (void *)a.pool : NULL; break; /* MEMPOOL_HANDLE: NULL for cuMemAlloc's */
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

API CUresult cuPointerGetAttribute(void *out, int attr, CUdeviceptr p) {
    ENTER(cuPointerGetAttribute);
    NEED_INIT();
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    return pointer_attribute(out, attr, p);
}

API CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, CUdeviceptr p) {
    ENTER(cuPointerGetAttributes);
    NEED_INIT();
    if (!attrs || !data) return CUDA_ERROR_INVALID_VALUE;
    AllocInfo a;
    int found = mem_find(p, &a);
    for (unsigned i = 0; i < n; i++) {
        if (!data[i]) continue;
        if (!found && attrs[i] == 2) { /* unknown memory is reported as type 0, not an error, here */
            *(unsigned *)data[i] = 0;
            continue;
        }
        /* no such pointer, or the host pointer of device memory: NULL here, where the single form fails (the
         * runtime's cudaPointerGetAttributes asks for it of device memory and must succeed) */
        if ((!found && (attrs[i] == 1 || attrs[i] == 3 || attrs[i] == 4)) ||
            (attrs[i] == 4 && (a.kind == A_DEVICE || a.kind == A_MODULE_GLOBAL))) {
            memset(data[i], 0, sizeof(void *));
            continue;
        }
        TRY(pointer_attribute(data[i], attrs[i], p));
    }
    return CUDA_SUCCESS;
}

