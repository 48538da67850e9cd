/* Context-local storage: values other libraries (the CUDA runtime) keep per context under a key of their own,
 * through the CONTEXT_LOCAL_STORAGE export table, each with a destructor that runs when the context is
 * destroyed or reset (the runtime frees its per-context state there). A context handle may be the primary
 * context while it is inactive: the runtime stores into it before retaining it. */
#include <stdlib.h>

#include "fake.h"

typedef struct StoredValue {
    Context *ctx;
    void *key, *value;
    ContextStorageDtor dtor;
    struct StoredValue *next;
} StoredValue;

static StoredValue *g_values;
static pthread_mutex_t g_storage_mu = PTHREAD_MUTEX_INITIALIZER;

static StoredValue **find(Context *ctx, void *key) {
    StoredValue **p = &g_values;
    while (*p && ((*p)->ctx != ctx || (*p)->key != key)) p = &(*p)->next;
    return p;
}

CUresult context_storage_put(Context *ctx, void *key, void *value, ContextStorageDtor dtor) {
    pthread_mutex_lock(&g_storage_mu);
    StoredValue **p = find(ctx, key), *v = *p;
    if (!v && (v = calloc(1, sizeof *v))) {
        v->ctx = ctx;
        v->key = key;
        v->next = g_values;
        g_values = v;
    }
    if (v) {
        v->value = value;
        v->dtor = dtor;
    }
    pthread_mutex_unlock(&g_storage_mu);
    return v ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult context_storage_get(Context *ctx, void *key, void **value) {
    pthread_mutex_lock(&g_storage_mu);
    StoredValue *v = *find(ctx, key);
    if (v) *value = v->value;
    pthread_mutex_unlock(&g_storage_mu);
    return v ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult context_storage_delete(Context *ctx, void *key) {
    pthread_mutex_lock(&g_storage_mu);
    StoredValue **p = find(ctx, key), *v = *p;
    if (v) *p = v->next;
    pthread_mutex_unlock(&g_storage_mu);
    free(v);
    return v ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

void context_storage_release(Context *ctx) {
    for (;;) { /* one at a time, unlocked while its destructor runs: a destructor may store or delete */
        pthread_mutex_lock(&g_storage_mu);
        StoredValue **p = &g_values;
        while (*p && (*p)->ctx != ctx) p = &(*p)->next;
        StoredValue *v = *p;
        if (v) *p = v->next;
        pthread_mutex_unlock(&g_storage_mu);
        if (!v) return;
        if (v->dtor) v->dtor(ctx, v->key, v->value);
        free(v);
    }
}
