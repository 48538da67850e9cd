/* Graph memory: the allocations memory-allocation nodes make and memory-free nodes (or cuMemFree/Async)
 * release, in stream order, each time their graph runs. An allocation's address is fixed when its node is
 * made (as on a real driver), so it is reserved then and mapped each time the node is reached. After a free
 * the memory stays in the graph pool (reported as used and reserved) until cuDeviceGraphMemTrim. Also the
 * node entry points, the allocation node's parameters and the device's graph-memory attributes. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define POOL_PROPS_BYTES 88  /* sizeof(CUmemPoolProps) */
#define ACCESS_DESC_BYTES 12 /* sizeof(CUmemAccessDesc) */
enum { ALLOCATION_PINNED = 1, ALLOCATION_MANAGED = 2 };  /* CUmemAllocationType */
enum { LOCATION_DEVICE = 1, LOCATION_HOST = 2 };         /* CUmemLocationType */

typedef struct GraphAlloc {
    uint64_t base, size;
    int kind; /* A_DEVICE or A_HOST_PINNED */
    Context *ctx;
    uint8_t props[POOL_PROPS_BYTES];
    uint8_t *access; /* naccess CUmemAccessDesc, as given */
    size_t naccess;
    int refs;   /* the ops that name it (graph nodes, their clones, a caller building one, a queued map) */
    int live;   /* allocated in stream order (submitted) and not freed yet */
    int pooled; /* its memory counts as the graph pool's (mapped at least once since the last trim) */
} GraphAlloc;

/* g_gm_mu guards the table, every record's refs/live/pooled and the pool figures. */
static pthread_mutex_t g_gm_mu = PTHREAD_MUTEX_INITIALIZER;
static GraphAlloc **g_table;
static int g_ntable, g_captable;
static uint64_t g_pool_bytes, g_pool_high;

static GraphAlloc *find_locked(CUdeviceptr p) {
    for (int i = 0; i < g_ntable; i++)
        if (g_table[i]->base == p) return g_table[i];
    return NULL;
}

int graph_mem_owns(CUdeviceptr p) {
    pthread_mutex_lock(&g_gm_mu);
    int owned = p && find_locked(p) != NULL;
    pthread_mutex_unlock(&g_gm_mu);
    return owned;
}

int graph_mem_contains(uint64_t p, size_t n) {
    pthread_mutex_lock(&g_gm_mu);
    int inside = 0;
    for (int i = 0; i < g_ntable && !inside; i++)
        inside = p >= g_table[i]->base && n <= g_table[i]->size && p - g_table[i]->base <= g_table[i]->size - n;
    pthread_mutex_unlock(&g_gm_mu);
    return inside;
}

/* A record goes when nothing names it, its allocation is freed and the pool gave its memory back. */
static void forget_if_unused_locked(GraphAlloc *a) {
    if (a->refs > 0 || a->live || a->pooled) return;
    for (int i = 0; i < g_ntable; i++)
        if (g_table[i] == a) g_table[i--] = g_table[--g_ntable];
    free(a->access);
    free(a);
}

static void release_locked(GraphAlloc *a) {
    a->refs--;
    forget_if_unused_locked(a);
}

static void hold_alloc(StreamOp *op) {
    pthread_mutex_lock(&g_gm_mu);
    op->u.alloc->refs++;
    pthread_mutex_unlock(&g_gm_mu);
}

static void drop_alloc(StreamOp *op) {
    pthread_mutex_lock(&g_gm_mu);
    release_locked(op->u.alloc);
    pthread_mutex_unlock(&g_gm_mu);
}

/* On the stream, when reached: the memory appears at the node's address. */
static void map_when_reached(void *arg) {
    GraphAlloc *a = arg;
    int type;
    memcpy(&type, a->props, sizeof type);
    if (mem_map_reserved(a->ctx, a->base, a->size, a->kind, type == ALLOCATION_MANAGED ? MEM_MANAGED : 0) !=
        CUDA_SUCCESS)
        fake_log("graph allocation at 0x%llx (%llu bytes) could not be mapped: out of device memory",
                 (unsigned long long)a->base, (unsigned long long)a->size);
    pthread_mutex_lock(&g_gm_mu);
    if (!a->pooled) {
        a->pooled = 1;
        g_pool_bytes += a->size;
        if (g_pool_bytes > g_pool_high) g_pool_high = g_pool_bytes;
    }
    release_locked(a);
    pthread_mutex_unlock(&g_gm_mu);
}

static CUresult submit_alloc(Stream *s, const StreamOp *op) {
    GraphAlloc *a = op->u.alloc;
    pthread_mutex_lock(&g_gm_mu);
    int was_live = a->live;
    if (!was_live) a->live = 1, a->refs++; /* the queued map holds it */
    pthread_mutex_unlock(&g_gm_mu);
    if (was_live) return CUDA_ERROR_INVALID_VALUE; /* graph_mem_prelaunch lets no launch get here */
    CUresult rc = stream_submit(s, map_when_reached, a);
    if (rc) {
        pthread_mutex_lock(&g_gm_mu);
        a->live = 0;
        release_locked(a);
        pthread_mutex_unlock(&g_gm_mu);
    }
    return rc;
}

static const StreamOpClass ALLOC_CLASS = {submit_alloc, hold_alloc, drop_alloc};

CUresult graph_alloc_op(Context *ctx, size_t size, const void *props, const void *access, size_t naccess,
                        CUdeviceptr *base, StreamOp *op) {
    uint8_t p[POOL_PROPS_BYTES] = {0};
    if (props) memcpy(p, props, sizeof p);
    else p[0] = ALLOCATION_PINNED, p[8] = LOCATION_DEVICE; /* allocType, location.type: device memory */
    int type, location;
    memcpy(&type, p, sizeof type);
    memcpy(&location, p + 8, sizeof location);
    if (size == 0 || (naccess && !access) || (type != ALLOCATION_PINNED && type != ALLOCATION_MANAGED) ||
        (location != LOCATION_DEVICE && location != LOCATION_HOST) ||
        (type == ALLOCATION_MANAGED && location != LOCATION_DEVICE))
        return CUDA_ERROR_INVALID_VALUE;
    GraphAlloc *a = calloc(1, sizeof *a);
    if (!a || (naccess && !(a->access = malloc(naccess * ACCESS_DESC_BYTES)))) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (naccess) memcpy(a->access, access, naccess * ACCESS_DESC_BYTES);
    memcpy(a->props, p, sizeof p);
    a->naccess = naccess;
    a->size = size;
    a->kind = location == LOCATION_HOST ? A_HOST_PINNED : A_DEVICE;
    a->ctx = ctx;
    a->refs = 1; /* the caller's, until it drops op */
    if (!(a->base = mem_reserve(size))) {
        free(a->access);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&g_gm_mu);
    if (g_ntable == g_captable) {
        int cap = g_captable ? g_captable * 2 : 16;
        GraphAlloc **grown = realloc(g_table, (size_t)cap * sizeof *grown);
        if (grown) g_table = grown, g_captable = cap;
    }
    int added = g_ntable < g_captable;
    if (added) g_table[g_ntable++] = a;
    pthread_mutex_unlock(&g_gm_mu);
    if (!added) {
        free(a->access);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *op = (StreamOp){.kind = OPK_MEM_ALLOC, .cls = &ALLOC_CLASS, .u.alloc = a};
    *base = a->base;
    return CUDA_SUCCESS;
}

/* ---- frees: a free node, or cuMemFree(Async) of a graph allocation, releases it in stream order ---- */

static void free_when_reached(void *arg) {
    CUdeviceptr *p = arg;
    mem_free(*p, 1 << A_DEVICE | 1 << A_HOST_PINNED);
    free(p);
}

static CUresult submit_free(Stream *s, const StreamOp *op) {
    pthread_mutex_lock(&g_gm_mu);
    GraphAlloc *a = find_locked(op->u.freed);
    int was_live = a && a->live;
    if (was_live) a->live = 0;
    pthread_mutex_unlock(&g_gm_mu);
    if (!was_live) return CUDA_ERROR_INVALID_VALUE; /* never allocated, or freed already */
    CUdeviceptr *arg = malloc(sizeof *arg);
    if (!arg) return CUDA_ERROR_OUT_OF_MEMORY;
    *arg = op->u.freed;
    CUresult rc = stream_submit(s, free_when_reached, arg);
    if (rc) free(arg);
    return rc;
}

static const StreamOpClass FREE_CLASS = {submit_free, NULL, NULL};

CUresult graph_free_op(CUdeviceptr p, StreamOp *op) {
    if (!graph_mem_owns(p)) return CUDA_ERROR_INVALID_VALUE;
    *op = (StreamOp){.kind = OPK_MEM_FREE, .cls = &FREE_CLASS, .u.freed = p};
    return CUDA_SUCCESS;
}

CUresult graph_mem_prelaunch(Stream *s, const Graph *g, int auto_free) {
    for (int i = 0; i < g->nnodes; i++) {
        const StreamOp *op = &g->nodes[i]->op;
        if (op->kind == OPK_GRAPH) TRY(graph_mem_prelaunch(s, op->u.graph, auto_free));
        if (op->kind != OPK_MEM_ALLOC) continue;
        pthread_mutex_lock(&g_gm_mu);
        int live = op->u.alloc->live;
        pthread_mutex_unlock(&g_gm_mu);
        if (!live) continue;
        if (!auto_free) {
            fake_log("cuGraphLaunch: the graph's allocation at 0x%llx from an earlier launch is not freed yet "
                     "(free it, or instantiate with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)",
                     (unsigned long long)op->u.alloc->base);
            return CUDA_ERROR_INVALID_VALUE;
        }
        StreamOp freeing = {.kind = OPK_MEM_FREE, .cls = &FREE_CLASS, .u.freed = op->u.alloc->base};
        TRY(submit_free(s, &freeing));
    }
    return CUDA_SUCCESS;
}

/* ---- entry points ---- */

/* CUDA_MEM_ALLOC_NODE_PARAMS (v1) */
typedef struct MemAllocNodeParams {
    uint8_t pool_props[POOL_PROPS_BYTES];
    const void *access_descs;
    size_t access_desc_count;
    size_t bytesize;
    CUdeviceptr dptr; /* out */
} MemAllocNodeParams;

/* Adds op to hGraph after deps, then drops the caller's reference to it. */
static CUresult add_memory_node(void **phNode, void *hGraph, void *const *deps, size_t ndeps, StreamOp *op) {
    CUresult rc = graph_add_node(phNode, hGraph, (GraphNode *const *)deps, ndeps, op);
    if (op->cls->drop) op->cls->drop(op);
    return rc;
}

API CUresult cuGraphAddMemAllocNode(void **phNode, void *hGraph, void *const *deps, size_t ndeps,
                                    MemAllocNodeParams *params) {
    ENTER(cuGraphAddMemAllocNode);
    NEED_CONTEXT(c);
    Graph *g;
    TRY(handle_get(hGraph, H_GRAPH, &g));
    if (!params || !phNode) return CUDA_ERROR_INVALID_VALUE;
    StreamOp op;
    CUdeviceptr base;
    TRY(graph_alloc_op(c, params->bytesize, params->pool_props, params->access_descs, params->access_desc_count,
                       &base, &op));
    TRY(add_memory_node(phNode, hGraph, deps, ndeps, &op));
    params->dptr = base;
    return CUDA_SUCCESS;
}

API CUresult cuGraphAddMemFreeNode(void **phNode, void *hGraph, void *const *deps, size_t ndeps, CUdeviceptr dptr) {
    ENTER(cuGraphAddMemFreeNode);
    NEED_INIT();
    StreamOp op;
    TRY(graph_free_op(dptr, &op));
    return add_memory_node(phNode, hGraph, deps, ndeps, &op);
}

static CUresult memory_node(void *hNode, int kind, GraphNode **out) {
    TRY(handle_get(hNode, H_GRAPH_NODE, out));
    return (*out)->op.kind == kind ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGraphMemAllocNodeGetParams(void *hNode, MemAllocNodeParams *params) {
    ENTER(cuGraphMemAllocNodeGetParams);
    GraphNode *n;
    TRY(memory_node(hNode, OPK_MEM_ALLOC, &n));
    if (!params) return CUDA_ERROR_INVALID_VALUE;
    const GraphAlloc *a = n->op.u.alloc; /* the access array lives as long as the node, as documented */
    memcpy(params->pool_props, a->props, sizeof params->pool_props);
    params->access_descs = a->access;
    params->access_desc_count = a->naccess;
    params->bytesize = a->size;
    params->dptr = a->base;
    return CUDA_SUCCESS;
}

API CUresult cuGraphMemFreeNodeGetParams(void *hNode, CUdeviceptr *dptr) {
    ENTER(cuGraphMemFreeNodeGetParams);
    GraphNode *n;
    TRY(memory_node(hNode, OPK_MEM_FREE, &n));
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    *dptr = n->op.u.freed;
    return CUDA_SUCCESS;
}

/* CUgraphMem_attribute */
enum { USED_MEM_CURRENT = 0, USED_MEM_HIGH = 1, RESERVED_MEM_CURRENT = 2, RESERVED_MEM_HIGH = 3 };

/* Used and reserved are the same figure here: the graph pool holds exactly what its allocations mapped. */
API CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, int attr, uint64_t *value) {
    ENTER(cuDeviceGetGraphMemAttribute);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!value || attr < USED_MEM_CURRENT || attr > RESERVED_MEM_HIGH) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_gm_mu);
    *value = attr == USED_MEM_CURRENT || attr == RESERVED_MEM_CURRENT ? g_pool_bytes : g_pool_high;
    pthread_mutex_unlock(&g_gm_mu);
    return CUDA_SUCCESS;
}

/* Only the high-water marks can be set, and only to zero (they restart from the current use). */
API CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, int attr, const uint64_t *value) {
    ENTER(cuDeviceSetGraphMemAttribute);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!value || (attr != USED_MEM_HIGH && attr != RESERVED_MEM_HIGH) || *value != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_gm_mu);
    g_pool_high = g_pool_bytes;
    pthread_mutex_unlock(&g_gm_mu);
    return CUDA_SUCCESS;
}

/* Gives the memory of freed graph allocations back to the device. */
API CUresult cuDeviceGraphMemTrim(CUdevice dev) {
    ENTER(cuDeviceGraphMemTrim);
    NEED_INIT();
    NEED_DEVICE(dev);
    pthread_mutex_lock(&g_gm_mu);
    for (int i = g_ntable - 1; i >= 0; i--) {
        GraphAlloc *a = g_table[i];
        if (!a->pooled || a->live) continue;
        a->pooled = 0;
        g_pool_bytes -= a->size;
        forget_if_unused_locked(a); /* may move the last record here: one already visited */
    }
    pthread_mutex_unlock(&g_gm_mu);
    return CUDA_SUCCESS;
}
