/* The calling thread's stack of current contexts and the check every context-bound entry point starts
 * with (NEED_CONTEXT). Its own file so that streams, memory and modules depend on it and on nothing of
 * context creation, which in turn depends on streams (a context owns its null stream). */
#include "fake.h"

#define MAX_DEPTH 32

static __thread Context *t_ctx_stack[MAX_DEPTH];
static __thread int t_ctx_depth;

Context *current_context(void) { return t_ctx_depth ? t_ctx_stack[t_ctx_depth - 1] : NULL; }

CUresult need_context(Context **out) {
    if (!fake_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    Context *c = current_context();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (!c->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (c->sticky) return c->sticky;
    *out = c;
    return CUDA_SUCCESS;
}


CUresult context_push(Context *c) {
    if (t_ctx_depth >= MAX_DEPTH) return CUDA_ERROR_OUT_OF_MEMORY;
    t_ctx_stack[t_ctx_depth++] = c;
    return CUDA_SUCCESS;
}

Context *context_pop(void) { return t_ctx_depth ? t_ctx_stack[--t_ctx_depth] : NULL; }

void context_set_current(Context *c) {
    if (!c) {
        if (t_ctx_depth) t_ctx_depth--;
    } else if (t_ctx_depth) {
        t_ctx_stack[t_ctx_depth - 1] = c;
    } else {
        t_ctx_stack[t_ctx_depth++] = c;
    }
}

void context_forget(Context *c) {
    for (int i = 0; i < t_ctx_depth; i++)
        if (t_ctx_stack[i] == c) t_ctx_stack[i] = NULL;
    while (t_ctx_depth && !t_ctx_stack[t_ctx_depth - 1]) t_ctx_depth--;
}
