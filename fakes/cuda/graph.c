/* The graph structure behind cuGraph* and stream capture: nodes holding operations (fake.h's StreamOp), their
 * dependencies, cloning, shape comparison (for cuGraphExecUpdate) and running a graph on a stream. It
 * knows operations only through their StreamOpClass, so it depends on no file that builds them. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

static pthread_mutex_t g_obj_mu = PTHREAD_MUTEX_INITIALIZER;

int user_object_retain(UserObject *o, unsigned count) {
    pthread_mutex_lock(&g_obj_mu);
    int alive = o->refs > 0;
    if (alive) o->refs += (int)count;
    pthread_mutex_unlock(&g_obj_mu);
    return alive;
}

void user_object_release(UserObject *o, unsigned count) {
    pthread_mutex_lock(&g_obj_mu);
    o->refs -= (int)count;
    int last = o->refs <= 0;
    pthread_mutex_unlock(&g_obj_mu);
    if (!last) return;
    handle_remove(o);
    if (o->destroy) o->destroy(o->ptr);
    free(o);
}

int graph_hold_object(Graph *g, UserObject *o, unsigned count) {
    for (int i = 0; i < g->nobjs; i++)
        if (g->objs[i].obj == o) {
            g->objs[i].count += count;
            return 0;
        }
    if (g->nobjs == g->capobjs) {
        int cap = g->capobjs ? g->capobjs * 2 : 4;
        UserObjectRef *grown = realloc(g->objs, (size_t)cap * sizeof *grown);
        if (!grown) return -1;
        g->objs = grown;
        g->capobjs = cap;
    }
    g->objs[g->nobjs++] = (UserObjectRef){o, count};
    return 0;
}

unsigned graph_drop_object(Graph *g, UserObject *o, unsigned count) {
    for (int i = 0; i < g->nobjs; i++) {
        if (g->objs[i].obj != o) continue;
        unsigned dropped = count < g->objs[i].count ? count : g->objs[i].count;
        if ((g->objs[i].count -= dropped) == 0) g->objs[i--] = g->objs[--g->nobjs];
        user_object_release(o, dropped);
        return dropped;
    }
    return 0;
}

Graph *graph_new(void) {
    Graph *g = calloc(1, sizeof *g);
    if (g) handle_add(g, H_GRAPH);
    return g;
}

static void hold(StreamOp *op) {
    if (op->cls && op->cls->hold) op->cls->hold(op);
}

static void drop(StreamOp *op) {
    if (op->cls && op->cls->drop) op->cls->drop(op);
}

GraphNode *graph_add(Graph *g, const StreamOp *op, GraphNode *const *deps, int ndeps) {
    if (g->nnodes == g->capnodes) {
        int cap = g->capnodes ? g->capnodes * 2 : 8;
        GraphNode **nodes = realloc(g->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes) return NULL;
        g->nodes = nodes;
        g->capnodes = cap;
    }
    GraphNode *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->deps = ndeps ? malloc((size_t)ndeps * sizeof *n->deps) : NULL;
    if (ndeps && !n->deps) {
        free(n);
        return NULL;
    }
    for (int i = 0; i < ndeps; i++) n->deps[i] = deps[i];
    n->ndeps = ndeps;
    n->owner = g;
    n->index = g->nnodes;
    n->op = *op;
    hold(&n->op);
    g->nodes[g->nnodes++] = n;
    handle_add(n, H_GRAPH_NODE);
    return n;
}

CUresult graph_add_node(void **phNode, void *hGraph, GraphNode *const *deps, size_t ndeps, const StreamOp *op) {
    Graph *g;
    TRY(handle_get(hGraph, H_GRAPH, &g));
    if (!phNode || (ndeps && !deps) || ndeps > (size_t)g->nnodes) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < ndeps; i++) {
        GraphNode *d;
        TRY(handle_get(deps[i], H_GRAPH_NODE, &d));
        if (d->owner != g) return CUDA_ERROR_INVALID_VALUE;
        for (size_t k = 0; k < i; k++)
            if (deps[k] == d) return CUDA_ERROR_INVALID_VALUE; /* a duplicate edge */
    }
    GraphNode *n = graph_add(g, op, deps, (int)ndeps);
    if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
    *phNode = n;
    return CUDA_SUCCESS;
}

static void node_free(GraphNode *n) {
    handle_remove(n);
    drop(&n->op);
    free(n->queried);
    free(n->deps);
    free(n);
}

void graph_remove(GraphNode *n) {
    Graph *g = n->owner;
    for (int i = n->index + 1; i < g->nnodes; i++) {
        GraphNode *later = g->nodes[i];
        for (int k = 0; k < later->ndeps; k++)
            if (later->deps[k] == n) later->deps[k--] = later->deps[--later->ndeps];
        later->index = i - 1;
        g->nodes[i - 1] = later;
    }
    g->nnodes--;
    node_free(n);
}

void graph_node_set_op(GraphNode *n, const StreamOp *op) {
    StreamOp held = *op;
    hold(&held);
    drop(&n->op);
    n->op = held;
}

Graph *graph_clone(const Graph *g) {
    Graph *c = graph_new();
    if (!c) return NULL;
    GraphNode *deps[64], **dp = deps;
    for (int i = 0; i < g->nnodes; i++) {
        const GraphNode *n = g->nodes[i];
        if (n->ndeps > 64 && !(dp = malloc((size_t)n->ndeps * sizeof *dp))) break;
        for (int k = 0; k < n->ndeps; k++) dp[k] = c->nodes[n->deps[k]->index];
        GraphNode *added = graph_add(c, &n->op, dp, n->ndeps);
        if (dp != deps) free(dp), dp = deps;
        if (!added) break;
        added->origin = n;
    }
    int complete = c->nnodes == g->nnodes;
    for (int i = 0; complete && i < g->nobjs; i++) { /* a clone holds the same references */
        complete = graph_hold_object(c, g->objs[i].obj, g->objs[i].count) == 0;
        if (complete) user_object_retain(g->objs[i].obj, g->objs[i].count);
    }
    if (!complete) {
        graph_free(c);
        return NULL;
    }
    return c;
}

void graph_free(Graph *g) {
    if (!g) return;
    handle_remove(g);
    for (int i = 0; i < g->nnodes; i++) node_free(g->nodes[i]);
    free(g->nodes);
    for (int i = 0; i < g->nobjs; i++) user_object_release(g->objs[i].obj, g->objs[i].count);
    free(g->objs);
    free(g);
}

int graph_shape_differs(const Graph *a, const Graph *b) {
    int n = a->nnodes < b->nnodes ? a->nnodes : b->nnodes;
    for (int i = 0; i < n; i++) {
        const GraphNode *x = a->nodes[i], *y = b->nodes[i];
        if (x->op.kind != y->op.kind || x->ndeps != y->ndeps) return i;
        for (int k = 0; k < x->ndeps; k++)
            if (x->deps[k]->index != y->deps[k]->index) return i;
        if (x->op.kind == OPK_GRAPH && graph_shape_differs(x->op.u.graph, y->op.u.graph) >= 0) return i;
    }
    return a->nnodes == b->nnodes ? -1 : n;
}

int graph_sort(Graph *g) {
    int n = g->nnodes;
    GraphNode **order = malloc((size_t)n * sizeof *order + 1);
    char *placed = calloc((size_t)n + 1, 1);
    int done = 0;
    while (order && placed && done < n) { /* each round: the first unplaced node whose dependencies are placed */
        int pick = -1;
        for (int i = 0; i < n && pick < 0; i++) {
            if (placed[i]) continue;
            int ready = 1;
            for (int k = 0; k < g->nodes[i]->ndeps && ready; k++) ready = placed[g->nodes[i]->deps[k]->index];
            if (ready) pick = i;
        }
        if (pick < 0) break; /* a cycle */
        placed[pick] = 1;
        order[done++] = g->nodes[pick];
    }
    int ok = order && placed && done == n;
    if (ok)
        for (int i = 0; i < n; i++) g->nodes[i] = order[i], order[i]->index = i;
    free(order);
    free(placed);
    return ok ? 0 : -1;
}

int graph_node_precedes(const GraphNode *a, const GraphNode *b) {
    if (a == b) return 1;
    if (a->owner != b->owner || a->index > b->index) return 0;
    for (int k = 0; k < b->ndeps; k++)
        if (graph_node_precedes(a, b->deps[k])) return 1;
    return 0;
}

CUresult graph_submit(Stream *s, const Graph *g) {
    for (int i = 0; i < g->nnodes; i++) {
        const StreamOp *op = &g->nodes[i]->op;
        if (op->cls) TRY(op->cls->submit(s, op));
    }
    return CUDA_SUCCESS;
}
