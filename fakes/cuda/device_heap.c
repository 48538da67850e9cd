/* The device heap: what device code's malloc and free (the calls the device runtime answers) draw from.
 * One allocation of the context, CU_LIMIT_MALLOC_HEAP_SIZE bytes, made at the first launch of a kernel whose
 * module calls them, so memcheck sees the whole heap as live memory; the blocks handed out are kept here, on
 * the host, where a kernel's stray store cannot corrupt them. First fit, blocks in address order. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define HEAP_ALIGN 16u

typedef struct HeapBlock {
    uint64_t off, size;
} HeapBlock;

typedef struct DeviceHeap {
    pthread_mutex_t mu;
    uint64_t base, size;
    HeapBlock *blocks; /* in use, by offset */
    int nblocks, cap;
} DeviceHeap;

static pthread_mutex_t g_heap_mu = PTHREAD_MUTEX_INITIALIZER; /* making a context's heap */

CUresult device_heap_ready(Context *ctx, size_t size) {
    pthread_mutex_lock(&g_heap_mu);
    CUresult rc = CUDA_SUCCESS;
    if (!ctx->heap) {
        DeviceHeap *h = calloc(1, sizeof *h);
        if (!h) rc = CUDA_ERROR_OUT_OF_MEMORY;
        else if ((rc = mem_alloc(ctx, size ? size : HEAP_ALIGN, A_MODULE_GLOBAL, &h->base)) != CUDA_SUCCESS) free(h);
        else {
            h->size = size;
            pthread_mutex_init(&h->mu, NULL);
            ctx->heap = h;
        }
    }
    pthread_mutex_unlock(&g_heap_mu);
    return rc;
}

uint64_t device_heap_malloc(Context *ctx, uint64_t size) {
    DeviceHeap *h = ctx->heap;
    if (!h || size == 0 || size > h->size) return 0;
    size = (size + HEAP_ALIGN - 1) & ~(uint64_t)(HEAP_ALIGN - 1);
    pthread_mutex_lock(&h->mu);
    uint64_t at = 0, found = UINT64_MAX;
    int i = 0;
    for (; i <= h->nblocks; i++) {
        uint64_t end = i < h->nblocks ? h->blocks[i].off : h->size;
        if (end - at >= size) { found = at; break; }
        if (i < h->nblocks) at = h->blocks[i].off + h->blocks[i].size;
    }
    if (found != UINT64_MAX && h->nblocks == h->cap) {
        int cap = h->cap ? h->cap * 2 : 64;
        HeapBlock *b = realloc(h->blocks, (size_t)cap * sizeof *b);
        if (b) h->blocks = b, h->cap = cap;
        else found = UINT64_MAX;
    }
    if (found != UINT64_MAX) {
        memmove(&h->blocks[i + 1], &h->blocks[i], (size_t)(h->nblocks - i) * sizeof *h->blocks);
        h->blocks[i] = (HeapBlock){found, size};
        h->nblocks++;
    }
    pthread_mutex_unlock(&h->mu);
    return found == UINT64_MAX ? 0 : h->base + found;
}

int device_heap_free(Context *ctx, uint64_t p) {
    if (p == 0) return 0;
    DeviceHeap *h = ctx->heap;
    if (!h || p < h->base) return -1;
    uint64_t off = p - h->base;
    pthread_mutex_lock(&h->mu);
    int lo = 0, hi = h->nblocks - 1, at = -1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (h->blocks[mid].off < off) lo = mid + 1;
        else if (h->blocks[mid].off > off) hi = mid - 1;
        else { at = mid; break; }
    }
    if (at >= 0) {
        memmove(&h->blocks[at], &h->blocks[at + 1], (size_t)(h->nblocks - at - 1) * sizeof *h->blocks);
        h->nblocks--;
    }
    pthread_mutex_unlock(&h->mu);
    return at >= 0 ? 0 : -1;
}

void device_heap_release(Context *ctx) {
    DeviceHeap *h = ctx->heap;
    if (!h) return;
    pthread_mutex_destroy(&h->mu);
    free(h->blocks);
    free(h);
    ctx->heap = NULL;
}
