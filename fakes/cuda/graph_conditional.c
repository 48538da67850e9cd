/* Conditional graph nodes: a condition (CUgraphConditionalHandle) that device code sets with
 * cudaGraphSetConditional, and IF (one body, or two: then/else), WHILE and SWITCH nodes whose bodies are graphs
 * the node owns. When a stream reaches the node it reads the condition and runs the chosen body on a stream of
 * its own, to completion, before the work after the node (WHILE: again while the condition is nonzero). Also
 * cuGraphAddNode/cuGraphNodeGetParams for conditional nodes, the generic form they are made with. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define COND_ASSIGN_DEFAULT 1 /* CU_GRAPH_COND_ASSIGN_DEFAULT: the default is applied at each launch */
enum { COND_IF = 0, COND_WHILE = 1, COND_SWITCH = 2 };
#define CU_STREAM_NON_BLOCKING 0x1
#define MAX_SWITCH_BODIES 1024

typedef struct Condition {
    volatile unsigned value;
    unsigned default_value;
    int assign_default;
    const Graph *graph; /* the graph it was made for: only its nodes and its bodies' (nested) may use it */
    UserObject *life; /* held by the graph it was made for and by every node that uses it */
} Condition;

typedef struct Conditional {
    Condition *cond;
    int type;
    unsigned size;
    Graph **bodies; /* owned: phGraph_out points here */
} Conditional;

static void condition_free(void *p) {
    handle_remove(p);
    free(p);
}

int graph_condition_set(uint64_t handle, unsigned value) {
    Condition *c = (Condition *)(uintptr_t)handle;
    if (!handle_ok(c, H_CONDITION)) return -1;
    __atomic_store_n(&c->value, value, __ATOMIC_RELEASE);
    return 0;
}

API CUresult cuGraphConditionalHandleCreate(uint64_t *out, void *hGraph, void *ctx, unsigned default_value,
                                            unsigned flags) {
    ENTER(cuGraphConditionalHandleCreate);
    Graph *g;
    TRY(handle_get(hGraph, H_GRAPH, &g));
    (void)ctx; /* one device: every context runs the same graphs */
    if (!out || (flags & ~(unsigned)COND_ASSIGN_DEFAULT)) return CUDA_ERROR_INVALID_VALUE;
    Condition *c = calloc(1, sizeof *c);
    UserObject *life = malloc(sizeof *life);
    if (!c || !life || graph_hold_object(g, life, 1)) {
        free(c);
        free(life);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *life = (UserObject){c, condition_free, 1};
    *c = (Condition){default_value, default_value, (flags & COND_ASSIGN_DEFAULT) != 0, g, life};
    handle_add(c, H_CONDITION);
    *out = (uint64_t)(uintptr_t)c;
    return CUDA_SUCCESS;
}

/* ---- the operation ---- */

static void conditional_free(Conditional *k) {
    for (unsigned i = 0; i < k->size; i++) graph_free(k->bodies[i]);
    free(k->bodies);
    user_object_release(k->cond->life, 1);
    free(k);
}

/* A copy with its own bodies (cloned) and a reference to the condition; NULL when out of memory. */
static Conditional *conditional_copy(const Conditional *from) {
    Conditional *k = malloc(sizeof *k);
    Graph **bodies = calloc(from->size, sizeof *bodies);
    if (!k || !bodies) {
        free(k);
        free(bodies);
        return NULL;
    }
    user_object_retain(from->cond->life, 1);
    *k = (Conditional){from->cond, from->type, from->size, bodies};
    for (unsigned i = 0; i < from->size; i++)
        if (!(k->bodies[i] = graph_clone(from->bodies[i]))) {
            k->size = i;
            conditional_free(k);
            return NULL;
        }
    return k;
}

/* The body a condition value selects, -1 for none. */
static int chosen_body(const Conditional *k, unsigned value) {
    switch (k->type) {
    case COND_IF: return value ? 0 : k->size == 2 ? 1 : -1;
    case COND_WHILE: return value ? 0 : -1;
    default: return value < k->size ? (int)value : -1;
    }
}

typedef struct ConditionalWork {
    Conditional *k; /* the work's own copy */
    Context *ctx;
} ConditionalWork;

/* When the stream reaches the node: the chosen body runs to completion on a stream of the node's own. */
static void run_conditional(void *arg) {
    ConditionalWork *w = arg;
    Stream *inner = NULL;
    for (;;) {
        int body = chosen_body(w->k, __atomic_load_n(&w->k->cond->value, __ATOMIC_ACQUIRE));
        if (body < 0 || context_sticky(w->ctx)) break;
        if (!inner && !(inner = stream_new(w->ctx, CU_STREAM_NON_BLOCKING, 0, 0))) break;
        if (graph_submit(inner, w->k->bodies[body]) || stream_sync(inner) || w->k->type != COND_WHILE) break;
    }
    if (inner) stream_close(inner);
    conditional_free(w->k);
    free(w);
}

static CUresult submit_conditional(Stream *s, const StreamOp *op) {
    ConditionalWork *w = malloc(sizeof *w);
    if (!w || !(w->k = conditional_copy(op->u.conditional))) {
        free(w);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    w->ctx = s->ctx;
    CUresult rc = stream_submit(s, run_conditional, w);
    if (rc) conditional_free(w->k), free(w);
    return rc;
}

static void hold_conditional(StreamOp *op) { op->u.conditional = conditional_copy(op->u.conditional); }
static void drop_conditional(StreamOp *op) {
    if (op->u.conditional) conditional_free(op->u.conditional);
}
static const StreamOpClass CONDITIONAL_CLASS = {submit_conditional, hold_conditional, drop_conditional};

static void assign_default(void *arg) {
    Condition *c = arg;
    __atomic_store_n(&c->value, c->default_value, __ATOMIC_RELEASE);
    user_object_release(c->life, 1);
}

CUresult graph_conditions_prelaunch(Stream *s, const Graph *g) {
    for (int i = 0; i < g->nnodes; i++) {
        const StreamOp *op = &g->nodes[i]->op;
        if (op->kind == OPK_GRAPH) TRY(graph_conditions_prelaunch(s, op->u.graph));
        if (op->kind != OPK_CONDITIONAL) continue;
        const Conditional *k = op->u.conditional;
        for (unsigned b = 0; b < k->size; b++) TRY(graph_conditions_prelaunch(s, k->bodies[b]));
        if (!k->cond->assign_default) continue;
        user_object_retain(k->cond->life, 1); /* the queued assignment holds the condition */
        CUresult rc = stream_submit(s, assign_default, k->cond);
        if (rc) {
            user_object_release(k->cond->life, 1);
            return rc;
        }
    }
    return CUDA_SUCCESS;
}

/* ---- entry points: the generic node form, for conditional nodes ---- */

/* CUDA_CONDITIONAL_NODE_PARAMS */
typedef struct ConditionalParams {
    uint64_t handle;
    int type;
    unsigned size;
    void **graphs_out;
    void *ctx;
} ConditionalParams;

/* CUgraphNodeParams: the type, then the node kind's parameters (232 bytes), then reserved */
typedef struct NodeParams {
    int type;
    int reserved0[3];
    union {
        long long reserved1[29];
        ConditionalParams conditional;
    } u;
    long long reserved2;
} NodeParams;

#define EDGE_DATA_BYTES 8

/* Is g outer itself or a body of one of outer's conditional nodes, at any depth? A condition made for a
 * graph serves the conditional nodes of its bodies too, as on the H200 (cuda.core's test_bisection_root:
 * an if/else inside a while loop, on conditions of the top graph). */
static int graph_encloses(const Graph *outer, const Graph *g) {
    if (outer == g) return 1;
    for (int i = 0; i < outer->nnodes; i++) {
        const StreamOp *op = &outer->nodes[i]->op;
        if (op->kind != OPK_CONDITIONAL || !op->u.conditional) continue;
        for (unsigned b = 0; b < op->u.conditional->size; b++)
            if (graph_encloses(op->u.conditional->bodies[b], g)) return 1;
    }
    return 0;
}

static CUresult add_node(void **phNode, void *hGraph, GraphNode *const *deps, const void *edges, size_t ndeps,
                         NodeParams *params) {
    Graph *g;
    TRY(handle_get(hGraph, H_GRAPH, &g));
    if (!params) return CUDA_ERROR_INVALID_VALUE;
    static const uint8_t zero[EDGE_DATA_BYTES];
    for (size_t i = 0; edges && i < ndeps; i++)
        if (memcmp((const uint8_t *)edges + i * EDGE_DATA_BYTES, zero, EDGE_DATA_BYTES)) {
            fake_log("cuGraphAddNode: edges other than full dependencies (edge data) are not implemented");
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    if (params->type != OPK_CONDITIONAL) {
        fake_log("cuGraphAddNode: node type %d is not implemented (conditional nodes are; use the "
                 "cuGraphAdd*Node of the kind)", params->type);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    ConditionalParams *p = &params->u.conditional;
    Condition *cond = (Condition *)(uintptr_t)p->handle;
    if (!handle_ok(cond, H_CONDITION) || !graph_encloses(cond->graph, g)) return CUDA_ERROR_INVALID_VALUE;
    if (p->type < COND_IF || p->type > COND_SWITCH || !p->size ||
        (p->type == COND_IF && p->size > 2) || (p->type == COND_WHILE && p->size != 1) ||
        (p->type == COND_SWITCH && p->size > MAX_SWITCH_BODIES))
        return CUDA_ERROR_INVALID_VALUE;
    Graph *bodies[MAX_SWITCH_BODIES];
    unsigned made = 0;
    while (made < p->size && (bodies[made] = graph_new())) made++;
    Conditional proto = {cond, p->type, p->size, bodies};
    StreamOp op = {.kind = OPK_CONDITIONAL, .cls = &CONDITIONAL_CLASS, .u.conditional = &proto};
    CUresult rc = made == p->size ? graph_add_node(phNode, hGraph, deps, ndeps, &op) : CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; i < made; i++) graph_free(bodies[i]); /* the node holds its own copies */
    if (rc) return rc;
    Conditional *held = ((GraphNode *)*phNode)->op.u.conditional;
    if (!held) {
        graph_remove(*phNode);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->graphs_out = (void **)held->bodies;
    return CUDA_SUCCESS;
}

API CUresult cuGraphAddNode(void **phNode, void *hGraph, GraphNode *const *deps, size_t ndeps, NodeParams *params) {
    ENTER(cuGraphAddNode);
    return add_node(phNode, hGraph, deps, NULL, ndeps, params);
}

API CUresult cuGraphAddNode_v2(void **phNode, void *hGraph, GraphNode *const *deps, const void *edges, size_t ndeps,
                               NodeParams *params) {
    ENTER(cuGraphAddNode_v2);
    return add_node(phNode, hGraph, deps, edges, ndeps, params);
}

API CUresult cuGraphNodeGetParams(void *hNode, NodeParams *params) {
    ENTER(cuGraphNodeGetParams);
    GraphNode *n;
    TRY(handle_get(hNode, H_GRAPH_NODE, &n));
    if (!params) return CUDA_ERROR_INVALID_VALUE;
    if (n->op.kind != OPK_CONDITIONAL) {
        fake_log("cuGraphNodeGetParams: node type %d is not implemented (conditional nodes are; use the "
                 "cuGraph*NodeGetParams of the kind)", n->op.kind);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    const Conditional *k = n->op.u.conditional;
    memset(params, 0, sizeof *params);
    params->type = OPK_CONDITIONAL;
    params->u.conditional = (ConditionalParams){(uint64_t)(uintptr_t)k->cond, k->type, k->size, (void **)k->bodies,
                                                NULL};
    return CUDA_SUCCESS;
}
