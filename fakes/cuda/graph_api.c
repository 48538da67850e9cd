/* Graph entry points: build a graph node by node (kernel, memcpy, memset, host, event record/wait, child
 * graph, empty), instantiate it (the executable graph is a clone), change an executable graph's kernel
 * parameters or update it from a graph of the same shape, launch it on a stream (its nodes in order, so
 * every edge is respected), destroy both. Stream capture (streams.c) builds the same graphs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

/* An executable graph. Destroying it while launches are queued frees it when the last one is done: its user
 * objects (a host node's callback, kept alive by one) must outlive the work, as on a real driver. */
typedef struct GraphExec {
    Graph *graph; /* the instantiated clone */
    uint64_t flags; /* CUDA_GRAPH_INSTANTIATE_FLAG_* */
    int pending;  /* launches queued and not yet done; under g_exec_mu */
    int destroyed;
} GraphExec;

static pthread_mutex_t g_exec_mu = PTHREAD_MUTEX_INITIALIZER;

static void exec_free(GraphExec *x) {
    graph_free(x->graph);
    free(x);
}

/* The work item queued after each launch's nodes. */
static void launch_done(void *arg) {
    GraphExec *x = arg;
    pthread_mutex_lock(&g_exec_mu);
    int last = --x->pending == 0 && x->destroyed;
    pthread_mutex_unlock(&g_exec_mu);
    if (last) exec_free(x);
}

/* CUDA_KERNEL_NODE_PARAMS_v2 (v1 is its prefix up to extra). */
typedef struct KernelNodeParams {
    void *func;
    unsigned grid[3], block[3], shared;
    void **kernel_params;
    void **extra;
    void *kern; /* used when func is NULL */
    void *ctx;
} KernelNodeParams;

/* CUDA_MEMSET_NODE_PARAMS */
typedef struct MemsetNodeParams {
    CUdeviceptr dst;
    size_t pitch;
    unsigned value, element_size;
    size_t width, height;
} MemsetNodeParams;

/* CUDA_HOST_NODE_PARAMS */
typedef struct HostNodeParams {
    void (*fn)(void *);
    void *user;
} HostNodeParams;

/* CUDA_GRAPH_INSTANTIATE_PARAMS */
typedef struct InstantiateParams {
    uint64_t flags;
    void *upload_stream;
    GraphNode *error_node;
    int result;
} InstantiateParams;

/* CUgraphExecUpdateResultInfo */
typedef struct UpdateResultInfo {
    int result;
    GraphNode *error_node, *error_from_node;
} UpdateResultInfo;
enum { UPDATE_SUCCESS = 0, UPDATE_ERROR = 1, UPDATE_TOPOLOGY_CHANGED = 2, UPDATE_NODE_TYPE_CHANGED = 3 };

/* CUDA_GRAPH_INSTANTIATE_FLAG_*: use-node-priority (8) changes nothing here */
#define INSTANTIATE_AUTO_FREE_ON_LAUNCH 1
#define INSTANTIATE_UPLOAD 2
#define INSTANTIATE_DEVICE_LAUNCH 4
#define INSTANTIATE_FLAGS 0xF

API CUresult cuGraphCreate(void **phGraph, unsigned flags) {
    ENTER(cuGraphCreate);
    NEED_INIT();
    if (!phGraph || flags) return CUDA_ERROR_INVALID_VALUE;
    Graph *g = graph_new();
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraph = g;
    return CUDA_SUCCESS;
}

API CUresult cuGraphDestroy(void *hGraph) {
    ENTER(cuGraphDestroy);
    Graph *g;
    TRY(handle_get(hGraph, H_GRAPH, &g));
    graph_free(g);
    return CUDA_SUCCESS;
}

static CUresult kernel_node_op(const KernelNodeParams *p, StreamOp *op) {
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    return kernel_op(p->func ? p->func : p->kern, p->grid, p->block, p->shared, p->kernel_params, p->extra, op);
}

API CUresult cuGraphAddKernelNode_v2(void **phNode, void *hGraph, GraphNode *const *deps, size_t ndeps,
                                     const KernelNodeParams *params) {
    ENTER(cuGraphAddKernelNode_v2);
    NEED_INIT();
    StreamOp op;
    TRY(kernel_node_op(params, &op));
    CUresult rc = graph_add_node(phNode, hGraph, deps, ndeps, &op);
    launch_spec_free(&op.u.kernel);
    return rc;
}

API CUresult cuGraphAddMemcpyNode(void **phNode, void *hGraph, GraphNode *const *deps, size_t ndeps,
                                  const Memcpy3DParams *params, void *ctx) {
    ENTER(cuGraphAddMemcpyNode);
    NEED_INIT();
    (void)ctx; /* one device, unified addressing: every context sees the same memory */
    StreamOp op;
    TRY(memcpy3d_op(params, &op));
    return graph_add_node(phNode, hGraph, deps, ndeps, &op);
}

static CUresult memset_node_op(const MemsetNodeParams *p, StreamOp *op) {
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    return set_op(&(SetParams){p->dst, p->pitch, p->value, p->element_size, p->width, p->height ? p->height : 1}, op);
}

API CUresult cuGraphAddMemsetNode(void **phNode, void *hGraph, GraphNode *const *deps, size_t ndeps,
                                  const MemsetNodeParams *params, void *ctx) {
    ENTER(cuGraphAddMemsetNode);
    NEED_INIT();
    (void)ctx;
    StreamOp op;
    TRY(memset_node_op(params, &op));
    return graph_add_node(phNode, hGraph, deps, ndeps, &op);
}

API CUresult cuGraphAddHostNode(void **phNode, void *hGraph, GraphNode *const *deps, size_t ndeps,
                                const HostNodeParams *params) {
    ENTER(cuGraphAddHostNode);
    NEED_INIT();
    if (!params || !params->fn) return CUDA_ERROR_INVALID_VALUE;
    StreamOp op;
    host_op(params->fn, params->user, &op);
    return graph_add_node(phNode, hGraph, deps, ndeps, &op);
}

static CUresult add_event_node(void **phNode, void *hGraph, GraphNode *const *deps, size_t ndeps, void *hEvent,
                               void (*make)(Event *, StreamOp *)) {
    Event *e;
    TRY(handle_get(hEvent, H_EVENT, &e));
    StreamOp op;
    make(e, &op);
    return graph_add_node(phNode, hGraph, deps, ndeps, &op);
}

API CUresult cuGraphAddEventRecordNode(void **phNode, void *hGraph, GraphNode *const *deps, size_t ndeps,
                                       void *hEvent) {
    ENTER(cuGraphAddEventRecordNode);
    return add_event_node(phNode, hGraph, deps, ndeps, hEvent, event_record_op);
}

API CUresult cuGraphAddEventWaitNode(void **phNode, void *hGraph, GraphNode *const *deps, size_t ndeps,
                                     void *hEvent) {
    ENTER(cuGraphAddEventWaitNode);
    return add_event_node(phNode, hGraph, deps, ndeps, hEvent, event_wait_op);
}

/* ---- child graphs and empty nodes: the graph's own operations ---- */

static CUresult submit_child(Stream *s, const StreamOp *op) { return graph_submit(s, op->u.graph); }
static void hold_child(StreamOp *op) { op->u.graph = graph_clone(op->u.graph); }
static void drop_child(StreamOp *op) { graph_free(op->u.graph); }
static const StreamOpClass CHILD_CLASS = {submit_child, hold_child, drop_child};

API CUresult cuGraphAddChildGraphNode(void **phNode, void *hGraph, GraphNode *const *deps, size_t ndeps,
                                      void *hChild) {
    ENTER(cuGraphAddChildGraphNode);
    Graph *child;
    TRY(handle_get(hChild, H_GRAPH, &child));
    if (hChild == hGraph) return CUDA_ERROR_INVALID_VALUE;
    StreamOp op = {.kind = OPK_GRAPH, .cls = &CHILD_CLASS, .u.graph = child}; /* cloned by the node */
    TRY(graph_add_node(phNode, hGraph, deps, ndeps, &op));
    return ((GraphNode *)*phNode)->op.u.graph ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult cuGraphAddEmptyNode(void **phNode, void *hGraph, GraphNode *const *deps, size_t ndeps) {
    ENTER(cuGraphAddEmptyNode);
    StreamOp op = {.kind = OPK_EMPTY, .cls = NULL};
    return graph_add_node(phNode, hGraph, deps, ndeps, &op);
}

API CUresult cuGraphGetNodes(void *hGraph, GraphNode **nodes, size_t *count) {
    ENTER(cuGraphGetNodes);
    Graph *g;
    TRY(handle_get(hGraph, H_GRAPH, &g));
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    if (nodes)
        for (size_t i = 0; i < *count && i < (size_t)g->nnodes; i++) nodes[i] = g->nodes[i];
    *count = (size_t)g->nnodes;
    return CUDA_SUCCESS;
}

API CUresult cuGraphNodeGetType(void *hNode, int *type) {
    ENTER(cuGraphNodeGetType);
    GraphNode *n;
    TRY(handle_get(hNode, H_GRAPH_NODE, &n));
    if (!type) return CUDA_ERROR_INVALID_VALUE;
    *type = n->op.kind;
    return CUDA_SUCCESS;
}

API CUresult cuGraphClone(void **phClone, void *hGraph) {
    ENTER(cuGraphClone);
    Graph *g;
    TRY(handle_get(hGraph, H_GRAPH, &g));
    if (!phClone) return CUDA_ERROR_INVALID_VALUE;
    Graph *c = graph_clone(g);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    *phClone = c;
    return CUDA_SUCCESS;
}

API CUresult cuGraphNodeFindInClone(void **phNode, void *hOriginal, void *hClone) {
    ENTER(cuGraphNodeFindInClone);
    GraphNode *n;
    Graph *c;
    TRY(handle_get(hOriginal, H_GRAPH_NODE, &n));
    TRY(handle_get(hClone, H_GRAPH, &c));
    if (!phNode) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < c->nnodes; i++)
        if (c->nodes[i]->origin == n) {
            *phNode = c->nodes[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

/* A graph with memory nodes keeps its nodes and edges, as on a real driver. */
static CUresult check_editable(const Graph *g, const char *what) {
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op.kind == OPK_MEM_ALLOC || g->nodes[i]->op.kind == OPK_MEM_FREE) {
            fake_log("%s: a graph with memory allocation or free nodes cannot lose nodes or edges", what);
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    return CUDA_SUCCESS;
}

API CUresult cuGraphDestroyNode(void *hNode) {
    ENTER(cuGraphDestroyNode);
    GraphNode *n;
    TRY(handle_get(hNode, H_GRAPH_NODE, &n));
    TRY(check_editable(n->owner, "cuGraphDestroyNode"));
    graph_remove(n);
    return CUDA_SUCCESS;
}

API CUresult cuGraphChildGraphNodeGetGraph(void *hNode, void **phGraph) {
    ENTER(cuGraphChildGraphNodeGetGraph);
    GraphNode *n;
    TRY(handle_get(hNode, H_GRAPH_NODE, &n));
    if (!phGraph || n->op.kind != OPK_GRAPH) return CUDA_ERROR_INVALID_VALUE;
    *phGraph = n->op.u.graph; /* the node's own copy, as on a real driver */
    return CUDA_SUCCESS;
}

#define EDGE_DATA_BYTES 8 /* sizeof(CUgraphEdgeData): every edge here is a default one, all zeros */

/* Fills up to *count of the n nodes (the rest of the caller's array NULL) and says how many there are; with
 * nodes NULL only counts. Edge data, where asked, is all default. */
static CUresult list_nodes(GraphNode *const *found, size_t n, GraphNode **nodes, void *edges, size_t *count) {
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    if (nodes) {
        for (size_t i = 0; i < *count; i++) nodes[i] = i < n ? found[i] : NULL;
        if (edges) memset(edges, 0, *count * EDGE_DATA_BYTES);
    }
    if (!nodes || n < *count) *count = n;
    return CUDA_SUCCESS;
}

static CUresult dependencies(void *hNode, GraphNode **nodes, void *edges, size_t *count) {
    GraphNode *n;
    TRY(handle_get(hNode, H_GRAPH_NODE, &n));
    return list_nodes(n->deps, (size_t)n->ndeps, nodes, edges, count);
}

API CUresult cuGraphNodeGetDependencies(void *hNode, GraphNode **nodes, size_t *count) {
    ENTER(cuGraphNodeGetDependencies);
    return dependencies(hNode, nodes, NULL, count);
}

API CUresult cuGraphNodeGetDependencies_v2(void *hNode, GraphNode **nodes, void *edges, size_t *count) {
    ENTER(cuGraphNodeGetDependencies_v2);
    return dependencies(hNode, nodes, edges, count);
}

static CUresult dependents(void *hNode, GraphNode **nodes, void *edges, size_t *count) {
    GraphNode *n;
    TRY(handle_get(hNode, H_GRAPH_NODE, &n));
    const Graph *g = n->owner;
    GraphNode **found = malloc((size_t)g->nnodes * sizeof *found + 1);
    if (!found) return CUDA_ERROR_OUT_OF_MEMORY;
    size_t nfound = 0;
    for (int i = n->index + 1; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i]->ndeps; k++)
            if (g->nodes[i]->deps[k] == n) {
                found[nfound++] = g->nodes[i];
                break;
            }
    CUresult rc = list_nodes(found, nfound, nodes, edges, count);
    free(found);
    return rc;
}

API CUresult cuGraphNodeGetDependentNodes(void *hNode, GraphNode **nodes, size_t *count) {
    ENTER(cuGraphNodeGetDependentNodes);
    return dependents(hNode, nodes, NULL, count);
}

API CUresult cuGraphNodeGetDependentNodes_v2(void *hNode, GraphNode **nodes, void *edges, size_t *count) {
    ENTER(cuGraphNodeGetDependentNodes_v2);
    return dependents(hNode, nodes, edges, count);
}

/* Every edge as (from, to) pairs, up to *count (the rest NULL); with both arrays NULL only counts. */
static CUresult edges_of(void *hGraph, GraphNode **from, GraphNode **to, void *edges, size_t *count) {
    Graph *g;
    TRY(handle_get(hGraph, H_GRAPH, &g));
    if (!count || (!from != !to)) return CUDA_ERROR_INVALID_VALUE;
    size_t n = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i]->ndeps; k++, n++)
            if (from && n < *count) from[n] = g->nodes[i]->deps[k], to[n] = g->nodes[i];
    if (from) {
        for (size_t i = n; i < *count; i++) from[i] = to[i] = NULL;
        if (edges) memset(edges, 0, *count * EDGE_DATA_BYTES);
    }
    if (!from || n < *count) *count = n;
    return CUDA_SUCCESS;
}

API CUresult cuGraphGetEdges(void *hGraph, GraphNode **from, GraphNode **to, size_t *count) {
    ENTER(cuGraphGetEdges);
    return edges_of(hGraph, from, to, NULL, count);
}

API CUresult cuGraphGetEdges_v2(void *hGraph, GraphNode **from, GraphNode **to, void *edges, size_t *count) {
    ENTER(cuGraphGetEdges_v2);
    return edges_of(hGraph, from, to, edges, count);
}

API CUresult cuGraphKernelNodeSetParams_v2(void *hNode, const KernelNodeParams *params) {
    ENTER(cuGraphKernelNodeSetParams_v2);
    GraphNode *n;
    TRY(handle_get(hNode, H_GRAPH_NODE, &n));
    if (n->op.kind != OPK_KERNEL) return CUDA_ERROR_INVALID_VALUE;
    StreamOp op;
    TRY(kernel_node_op(params, &op));
    op.u.kernel.cooperative = n->op.u.kernel.cooperative; /* an attribute of the node, not of its parameters */
    graph_node_set_op(n, &op);
    launch_spec_free(&op.u.kernel);
    return CUDA_SUCCESS;
}

/* ---- node queries ---- */

static CUresult node_of_kind(void *hNode, int kind, GraphNode **out) {
    TRY(handle_get(hNode, H_GRAPH_NODE, out));
    return (*out)->op.kind == kind ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* kernelParams point into the node's own copy of the arguments, valid while the node lives. */
API CUresult cuGraphKernelNodeGetParams_v2(void *hNode, KernelNodeParams *params) {
    ENTER(cuGraphKernelNodeGetParams_v2);
    GraphNode *n;
    TRY(node_of_kind(hNode, OPK_KERNEL, &n));
    if (!params) return CUDA_ERROR_INVALID_VALUE;
    const LaunchSpec *k = &n->op.u.kernel;
    const PtxFunction *pf = &k->fn->module->ptx->funcs[k->fn->index];
    void **args = malloc((size_t)pf->nparams * sizeof *args + 1);
    if (!args) return CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < pf->nparams; i++) args[i] = k->params + pf->params[i].offset;
    free(n->queried);
    n->queried = args;
    *params = (KernelNodeParams){k->fn, {k->grid[0], k->grid[1], k->grid[2]}, {k->block[0], k->block[1], k->block[2]},
                                 k->shared_bytes, args, NULL, k->fn, k->fn->module->ctx};
    return CUDA_SUCCESS;
}

API CUresult cuGraphMemsetNodeGetParams(void *hNode, MemsetNodeParams *params) {
    ENTER(cuGraphMemsetNodeGetParams);
    GraphNode *n;
    TRY(node_of_kind(hNode, OPK_MEMSET, &n));
    if (!params) return CUDA_ERROR_INVALID_VALUE;
    const SetParams *p = &n->op.u.set;
    *params = (MemsetNodeParams){p->dst, p->pitch, p->value, p->elem, p->width, p->height};
    return CUDA_SUCCESS;
}

API CUresult cuGraphHostNodeGetParams(void *hNode, HostNodeParams *params) {
    ENTER(cuGraphHostNodeGetParams);
    GraphNode *n;
    TRY(node_of_kind(hNode, OPK_HOST, &n));
    if (!params) return CUDA_ERROR_INVALID_VALUE;
    *params = (HostNodeParams){n->op.u.host.fn, n->op.u.host.user};
    return CUDA_SUCCESS;
}

static CUresult event_of(void *hNode, int kind, void **event) {
    GraphNode *n;
    TRY(node_of_kind(hNode, kind, &n));
    if (!event) return CUDA_ERROR_INVALID_VALUE;
    *event = n->op.u.event;
    return CUDA_SUCCESS;
}

API CUresult cuGraphEventRecordNodeGetEvent(void *hNode, void **event) {
    ENTER(cuGraphEventRecordNodeGetEvent);
    return event_of(hNode, OPK_EVENT_RECORD, event);
}

API CUresult cuGraphEventWaitNodeGetEvent(void *hNode, void **event) {
    ENTER(cuGraphEventWaitNodeGetEvent);
    return event_of(hNode, OPK_EVENT_WAIT, event);
}

/* ---- editing edges: the nodes are re-sorted so every edge still runs in order ---- */

/* The n (from[i], to[i]) edges, checked: nodes of g, no self edge; edge data all default. */
static CUresult check_edges(void *hGraph, GraphNode *const *from, GraphNode *const *to, const void *edges, size_t n,
                            Graph **g) {
    TRY(handle_get(hGraph, H_GRAPH, g));
    if (n && (!from || !to)) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) {
        GraphNode *a, *b;
        TRY(handle_get(from[i], H_GRAPH_NODE, &a));
        TRY(handle_get(to[i], H_GRAPH_NODE, &b));
        if (a->owner != *g || b->owner != *g || a == b) return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; edges && i < n * EDGE_DATA_BYTES; i++)
        if (((const uint8_t *)edges)[i]) return CUDA_ERROR_NOT_SUPPORTED; /* only full dependencies here */
    return CUDA_SUCCESS;
}

static int has_edge(const GraphNode *from, const GraphNode *to) {
    for (int k = 0; k < to->ndeps; k++)
        if (to->deps[k] == from) return 1;
    return 0;
}

static CUresult add_dependencies(void *hGraph, GraphNode *const *from, GraphNode *const *to, const void *edges,
                                 size_t n) {
    Graph *g;
    TRY(check_edges(hGraph, from, to, edges, n, &g));
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k <= i; k++)
            if (has_edge(from[i], to[i]) || (k < i && from[k] == from[i] && to[k] == to[i]))
                return CUDA_ERROR_INVALID_VALUE; /* an edge that exists already */
    size_t added = 0;
    CUresult rc = CUDA_SUCCESS;
    for (; added < n; added++) {
        GraphNode *b = to[added];
        GraphNode **grown = realloc(b->deps, (size_t)(b->ndeps + 1) * sizeof *grown);
        if (!grown) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        b->deps = grown;
        b->deps[b->ndeps++] = from[added];
    }
    if (rc == CUDA_SUCCESS && graph_sort(g)) rc = CUDA_ERROR_INVALID_VALUE; /* the edges would make a cycle */
    if (rc)
        while (added--) to[added]->ndeps--; /* each edge added was its node's last */
    return rc;
}

API CUresult cuGraphAddDependencies(void *hGraph, GraphNode *const *from, GraphNode *const *to, size_t n) {
    ENTER(cuGraphAddDependencies);
    return add_dependencies(hGraph, from, to, NULL, n);
}

API CUresult cuGraphAddDependencies_v2(void *hGraph, GraphNode *const *from, GraphNode *const *to, const void *edges,
                                       size_t n) {
    ENTER(cuGraphAddDependencies_v2);
    return add_dependencies(hGraph, from, to, edges, n);
}

static CUresult remove_dependencies(void *hGraph, GraphNode *const *from, GraphNode *const *to, const void *edges,
                                    size_t n) {
    Graph *g;
    TRY(check_edges(hGraph, from, to, edges, n, &g));
    TRY(check_editable(g, "cuGraphRemoveDependencies"));
    for (size_t i = 0; i < n; i++)
        if (!has_edge(from[i], to[i])) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) {
        GraphNode *b = to[i];
        for (int k = 0; k < b->ndeps; k++)
            if (b->deps[k] == from[i]) {
                memmove(&b->deps[k], &b->deps[k + 1], (size_t)(b->ndeps - k - 1) * sizeof *b->deps);
                b->ndeps--;
                break;
            }
    }
    return CUDA_SUCCESS;
}

API CUresult cuGraphRemoveDependencies(void *hGraph, GraphNode *const *from, GraphNode *const *to, size_t n) {
    ENTER(cuGraphRemoveDependencies);
    return remove_dependencies(hGraph, from, to, NULL, n);
}

API CUresult cuGraphRemoveDependencies_v2(void *hGraph, GraphNode *const *from, GraphNode *const *to,
                                          const void *edges, size_t n) {
    ENTER(cuGraphRemoveDependencies_v2);
    return remove_dependencies(hGraph, from, to, edges, n);
}

static const char *kind_name(int kind) {
    static const char *names[] = {"kernel", "memcpy", "memset", "host", "graph", "empty", "event wait", "event record",
                                  "", "", "mem alloc", "mem free", "", "conditional"};
    return kind >= 0 && kind < (int)(sizeof names / sizeof *names) && *names[kind] ? names[kind] : "node";
}

/* A DOT file of the graph's nodes (kind and handle) and edges; the flags' extra detail is not written. */
API CUresult cuGraphDebugDotPrint(void *hGraph, const char *path, unsigned flags) {
    ENTER(cuGraphDebugDotPrint);
    Graph *g;
    TRY(handle_get(hGraph, H_GRAPH, &g));
    (void)flags;
    if (!path) return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(path, "w");
    if (!f) return CUDA_ERROR_OPERATING_SYSTEM;
    fprintf(f, "digraph dot {\n");
    for (int i = 0; i < g->nnodes; i++)
        fprintf(f, "  node%d [label=\"%d: %s\\n%p\"];\n", i, i, kind_name(g->nodes[i]->op.kind), (void *)g->nodes[i]);
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i]->ndeps; k++) fprintf(f, "  node%d -> node%d;\n", g->nodes[i]->deps[k]->index, i);
    fprintf(f, "}\n");
    return fclose(f) ? CUDA_ERROR_OPERATING_SYSTEM : CUDA_SUCCESS;
}

/* ---- executable graphs ---- */

/* A graph instantiated for device launch may hold only kernel, memcpy and memset nodes (the CUDA
 * programming guide's device graph requirements); the first other node, NULL when there is none. The fake
 * launches such a graph from the host as any other; launching it from a kernel needs libcudadevrt. */
static GraphNode *not_device_launchable(const Graph *g) {
    for (int i = 0; i < g->nnodes; i++) {
        int kind = g->nodes[i]->op.kind;
        if (kind != OPK_KERNEL && kind != OPK_MEMCPY && kind != OPK_MEMSET) return g->nodes[i];
    }
    return NULL;
}

/* INVALID_VALUE for bad arguments or a node a device-launchable graph cannot hold (*error_node: that node). */
static CUresult instantiate(void **phExec, void *hGraph, uint64_t flags, GraphNode **error_node) {
    Graph *g;
    TRY(handle_get(hGraph, H_GRAPH, &g));
    if (!phExec || (flags & ~(uint64_t)INSTANTIATE_FLAGS)) return CUDA_ERROR_INVALID_VALUE;
    if ((flags & INSTANTIATE_DEVICE_LAUNCH) && (*error_node = not_device_launchable(g))) {
        fake_log("a device-launchable graph holds a node of kind %d (only kernels, memcpy and memset)",
                 (*error_node)->op.kind);
        return CUDA_ERROR_INVALID_VALUE;
    }
    GraphExec *x = calloc(1, sizeof *x);
    if (!x || !(x->graph = graph_clone(g))) {
        free(x);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    x->flags = flags;
    handle_add(x, H_GRAPH_EXEC);
    *phExec = x;
    return CUDA_SUCCESS;
}

API CUresult cuGraphInstantiateWithFlags(void **phExec, void *hGraph, unsigned long long flags) {
    ENTER(cuGraphInstantiateWithFlags);
    GraphNode *error_node = NULL;
    return instantiate(phExec, hGraph, flags, &error_node);
}

/* CUDA 10's and 11's cuGraphInstantiate (_v2 from 11.0, the same arguments): flags 0, and a node to blame and a
 * log buffer for a failure. It is what the exported names are (cuBLASLt looks "cuGraphInstantiate" up with dlsym)
 * and what cuGetProcAddress gives below 12000; from 12000 on the name means cuGraphInstantiateWithFlags
 * (ENTRY_ALIASES). With flags 0 only the handles can be wrong, no node is to blame: node and log stay as given. */
static CUresult instantiate_legacy(void **phExec, void *hGraph) {
    GraphNode *error_node = NULL;
    return instantiate(phExec, hGraph, 0, &error_node);
}

API CUresult cuGraphInstantiate(void **phExec, void *hGraph, void **phErrorNode, char *log, size_t logsize) {
    ENTER(cuGraphInstantiate);
    (void)phErrorNode, (void)log, (void)logsize;
    return instantiate_legacy(phExec, hGraph);
}

API CUresult cuGraphInstantiate_v2(void **phExec, void *hGraph, void **phErrorNode, char *log, size_t logsize) {
    ENTER(cuGraphInstantiate_v2);
    (void)phErrorNode, (void)log, (void)logsize;
    return instantiate_legacy(phExec, hGraph);
}

API CUresult cuGraphInstantiateWithParams(void **phExec, void *hGraph, InstantiateParams *params) {
    ENTER(cuGraphInstantiateWithParams);
    if (!params) return CUDA_ERROR_INVALID_VALUE;
    params->error_node = NULL;
    CUresult rc = instantiate(phExec, hGraph, params->flags, &params->error_node);
    /* CUDA_GRAPH_INSTANTIATE_SUCCESS, _ERROR, _NODE_OPERATION_NOT_SUPPORTED */
    params->result = rc == CUDA_SUCCESS ? 0 : params->error_node ? 3 : 1;
    if (rc == CUDA_SUCCESS && (params->flags & INSTANTIATE_UPLOAD) && params->upload_stream) {
        NEED_CONTEXT(c);
        Stream *s;
        rc = stream_resolve(params->upload_stream, c, &s); /* uploading itself is a no-op: memory is shared */
    }
    return rc;
}

API CUresult cuGraphExecDestroy(void *hExec) {
    ENTER(cuGraphExecDestroy);
    GraphExec *x;
    TRY(handle_get(hExec, H_GRAPH_EXEC, &x));
    handle_remove(x);
    pthread_mutex_lock(&g_exec_mu);
    x->destroyed = 1;
    int idle = x->pending == 0;
    pthread_mutex_unlock(&g_exec_mu);
    if (idle) exec_free(x);
    return CUDA_SUCCESS;
}

/* The executable graph's copy of a node of the graph it was instantiated from. */
static CUresult exec_node(GraphExec *x, void *hNode, GraphNode **out) {
    GraphNode *n;
    TRY(handle_get(hNode, H_GRAPH_NODE, &n));
    for (int i = 0; i < x->graph->nnodes; i++)
        if (x->graph->nodes[i]->origin == n) {
            *out = x->graph->nodes[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGraphExecKernelNodeSetParams_v2(void *hExec, void *hNode, const KernelNodeParams *params) {
    ENTER(cuGraphExecKernelNodeSetParams_v2);
    GraphExec *x;
    GraphNode *n;
    TRY(handle_get(hExec, H_GRAPH_EXEC, &x));
    TRY(exec_node(x, hNode, &n));
    if (n->op.kind != OPK_KERNEL) return CUDA_ERROR_INVALID_VALUE;
    StreamOp op;
    TRY(kernel_node_op(params, &op));
    op.u.kernel.cooperative = n->op.u.kernel.cooperative; /* an attribute of the node, not of its parameters */
    graph_node_set_op(n, &op);
    launch_spec_free(&op.u.kernel);
    return CUDA_SUCCESS;
}

/* After an update the executable graph holds the new graph's user objects, as on a real driver; the old
 * ones go now, or with the executable graph when launches that may use them are still queued. */
static void adopt_user_objects(GraphExec *x, const Graph *g) {
    Graph *xg = x->graph;
    pthread_mutex_lock(&g_exec_mu);
    int idle = x->pending == 0;
    pthread_mutex_unlock(&g_exec_mu);
    UserObjectRef *old = xg->objs;
    int nold = xg->nobjs;
    if (idle) xg->objs = NULL, xg->nobjs = xg->capobjs = 0;
    for (int i = 0; i < g->nobjs; i++)
        if (graph_hold_object(xg, g->objs[i].obj, g->objs[i].count) == 0)
            user_object_retain(g->objs[i].obj, g->objs[i].count);
    if (!idle) return;
    for (int i = 0; i < nold; i++) user_object_release(old[i].obj, old[i].count);
    free(old);
}

/* Takes every node's parameters from hGraph when it has the executable graph's shape (same nodes, kinds and
 * edges, in the same order); otherwise nothing changes and the result says where they differ. */
API CUresult cuGraphExecUpdate_v2(void *hExec, void *hGraph, UpdateResultInfo *info) {
    ENTER(cuGraphExecUpdate_v2);
    GraphExec *x;
    Graph *g;
    TRY(handle_get(hExec, H_GRAPH_EXEC, &x));
    TRY(handle_get(hGraph, H_GRAPH, &g));
    if (!info) return CUDA_ERROR_INVALID_VALUE;
    int at = graph_shape_differs(x->graph, g);
    *info = (UpdateResultInfo){UPDATE_SUCCESS, NULL, NULL};
    if (at >= 0) {
        int kinds = at < g->nnodes && at < x->graph->nnodes && g->nodes[at]->op.kind != x->graph->nodes[at]->op.kind;
        info->result = kinds ? UPDATE_NODE_TYPE_CHANGED : UPDATE_TOPOLOGY_CHANGED;
        info->error_node = at < g->nnodes ? g->nodes[at] : NULL;
        return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    for (int i = 0; i < g->nnodes; i++) graph_node_set_op(x->graph->nodes[i], &g->nodes[i]->op);
    adopt_user_objects(x, g);
    return CUDA_SUCCESS;
}

API CUresult cuGraphLaunch(void *hExec, void *hStream) {
    ENTER(cuGraphLaunch);
    GraphExec *x;
    TRY(handle_get(hExec, H_GRAPH_EXEC, &x));
    NEED_CONTEXT(c);
    Stream *s;
    TRY(stream_resolve(hStream, c, &s));
    if (s->capture) { /* launched into a capture: the graph becomes a child graph node */
        StreamOp op = {.kind = OPK_GRAPH, .cls = &CHILD_CLASS, .u.graph = x->graph};
        return stream_capture(s, &op);
    }
    TRY(graph_mem_prelaunch(s, x->graph, (x->flags & INSTANTIATE_AUTO_FREE_ON_LAUNCH) != 0));
    TRY(graph_conditions_prelaunch(s, x->graph));
    pthread_mutex_lock(&g_exec_mu);
    x->pending++;
    pthread_mutex_unlock(&g_exec_mu);
    CUresult rc = graph_submit(s, x->graph);
    if (stream_submit(s, launch_done, x) != CUDA_SUCCESS) launch_done(x); /* could not queue it: done now */
    return rc;
}

API CUresult cuGraphUpload(void *hExec, void *hStream) {
    ENTER(cuGraphUpload);
    GraphExec *x;
    TRY(handle_get(hExec, H_GRAPH_EXEC, &x));
    NEED_CONTEXT(c);
    Stream *s;
    return stream_resolve(hStream, c, &s); /* nothing to upload: device memory is host memory here */
}

/* ---- user objects: a destructor that runs when the last reference (the caller's or a graph's) goes ---- */

#define CU_USER_OBJECT_NO_DESTRUCTOR_SYNC 1
#define CU_GRAPH_USER_OBJECT_MOVE 1

/* The destructor runs on the thread that drops the last reference (a real driver may use its own thread);
 * it must not call the driver, as on hardware. */
API CUresult cuUserObjectCreate(void **obj, void *ptr, void (*destroy)(void *), unsigned refs, unsigned flags) {
    ENTER(cuUserObjectCreate);
    NEED_INIT();
    if (!obj || !destroy || !refs || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC || refs > INT32_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    UserObject *o = malloc(sizeof *o);
    if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
    *o = (UserObject){ptr, destroy, (int)refs};
    handle_add(o, H_USER_OBJECT);
    *obj = o;
    return CUDA_SUCCESS;
}

API CUresult cuUserObjectRetain(void *obj, unsigned count) {
    ENTER(cuUserObjectRetain);
    UserObject *o;
    TRY(handle_get(obj, H_USER_OBJECT, &o));
    if (!count || count > INT32_MAX) return CUDA_ERROR_INVALID_VALUE;
    return user_object_retain(o, count) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

API CUresult cuUserObjectRelease(void *obj, unsigned count) {
    ENTER(cuUserObjectRelease);
    UserObject *o;
    TRY(handle_get(obj, H_USER_OBJECT, &o));
    if (!count || count > INT32_MAX) return CUDA_ERROR_INVALID_VALUE;
    user_object_release(o, count);
    return CUDA_SUCCESS;
}

API CUresult cuGraphRetainUserObject(void *hGraph, void *obj, unsigned count, unsigned flags) {
    ENTER(cuGraphRetainUserObject);
    Graph *g;
    UserObject *o;
    TRY(handle_get(hGraph, H_GRAPH, &g));
    TRY(handle_get(obj, H_USER_OBJECT, &o));
    if (!count || count > INT32_MAX || (flags & ~CU_GRAPH_USER_OBJECT_MOVE)) return CUDA_ERROR_INVALID_VALUE;
    int moved = flags & CU_GRAPH_USER_OBJECT_MOVE; /* the caller's references become the graph's */
    if (!moved && !user_object_retain(o, count)) return CUDA_ERROR_INVALID_HANDLE;
    if (graph_hold_object(g, o, count)) {
        if (!moved) user_object_release(o, count);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

API CUresult cuGraphReleaseUserObject(void *hGraph, void *obj, unsigned count) {
    ENTER(cuGraphReleaseUserObject);
    Graph *g;
    UserObject *o;
    TRY(handle_get(hGraph, H_GRAPH, &g));
    TRY(handle_get(obj, H_USER_OBJECT, &o));
    if (!count || count > INT32_MAX) return CUDA_ERROR_INVALID_VALUE;
    return graph_drop_object(g, o, count) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
