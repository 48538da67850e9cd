/* Copies and sets (cuMemcpy*, cuMemset*): checked at the call, queued on a stream as work items; the
 * synchronous forms wait for the stream. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

/* ---- copies and sets: queued on a stream; synchronous forms wait for it ---- */

typedef struct CopyWork {
    void *dst;
    const void *src;
    size_t n;
    void *staging;
} CopyWork;

static void run_copy(void *arg) {
    CopyWork *w = arg;
    memmove(w->dst, w->src, w->n);
    free(w->staging);
    free(w);
}

enum Side { HOST, DEVICE, EITHER };

/* A device-side range must lie inside one live allocation; a host side is the caller's memory, unless it
 * points into the fake's device address range (a freed or never-allocated device address). */
static CUresult check_side(uint64_t p, size_t n, int side) {
    if (!p && n) return CUDA_ERROR_INVALID_VALUE;
    if (!n) return CUDA_SUCCESS;
    AllocInfo a;
    if (mem_find(p, &a)) return p + n <= a.base + a.size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    return side == DEVICE || mem_in_device_range(p) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static CUresult copy(uint64_t dst, int dst_side, uint64_t src, int src_side, size_t n, void *hStream, int sync) {
    NEED_CONTEXT(c);
    Stream *s;
    TRY(stream_resolve(hStream, c, &s));
    TRY(check_side(dst, n, dst_side));
    TRY(check_side(src, n, src_side));
    if (n == 0) return CUDA_SUCCESS;
    CopyWork *w = calloc(1, sizeof *w);
    w->dst = (void *)(uintptr_t)dst;
    w->src = (const void *)(uintptr_t)src;
    w->n = n;
    int src_pageable = !mem_is_host_pinned(w->src) && !mem_find(src, NULL);
    int dst_pageable = !mem_is_host_pinned(w->dst) && !mem_find(dst, NULL);
    if (!sync && src_pageable) { /* pageable source: staged now, so the caller may reuse it at once */
        w->staging = malloc(n);
        memcpy(w->staging, w->src, n);
        w->src = w->staging;
    }
    TRY(stream_submit(s, run_copy, w));
    if (sync || dst_pageable) return stream_sync(s); /* a copy into pageable memory returns when done */
    return CUDA_SUCCESS;
}

API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    ENTER(cuMemcpyHtoD_v2);
    return copy(dst, DEVICE, (uint64_t)(uintptr_t)src, HOST, n, NULL, 1);
}
API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    ENTER(cuMemcpyDtoH_v2);
    return copy((uint64_t)(uintptr_t)dst, HOST, src, DEVICE, n, NULL, 1);
}
API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    ENTER(cuMemcpyDtoD_v2);
    return copy(dst, DEVICE, src, DEVICE, n, NULL, 1);
}
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *hStream) {
    ENTER(cuMemcpyHtoDAsync_v2);
    return copy(dst, DEVICE, (uint64_t)(uintptr_t)src, HOST, n, hStream, 0);
}
API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *hStream) {
    ENTER(cuMemcpyDtoHAsync_v2);
    return copy((uint64_t)(uintptr_t)dst, HOST, src, DEVICE, n, hStream, 0);
}
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *hStream) {
    ENTER(cuMemcpyDtoDAsync_v2);
    return copy(dst, DEVICE, src, DEVICE, n, hStream, 0);
}
API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    ENTER(cuMemcpy);
    return copy(dst, EITHER, src, EITHER, n, NULL, 1);
}
API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, void *hStream) {
    ENTER(cuMemcpyAsync);
    return copy(dst, EITHER, src, EITHER, n, hStream, 0);
}

typedef struct SetWork {
    uint8_t *dst;
    uint32_t value;
    unsigned elem;
    size_t width, height, pitch;
} SetWork;

static void run_set(void *arg) {
    SetWork *w = arg;
    for (size_t y = 0; y < w->height; y++) {
        uint8_t *row = w->dst + y * w->pitch;
        if (w->elem == 1) memset(row, (int)(w->value & 0xFF), w->width);
        else if (w->elem == 2) for (size_t i = 0; i < w->width; i++) ((uint16_t *)row)[i] = (uint16_t)w->value;
        else for (size_t i = 0; i < w->width; i++) ((uint32_t *)row)[i] = w->value;
    }
    free(w);
}

static CUresult set(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned elem, size_t width, size_t height,
                    void *hStream, int sync) {
    NEED_CONTEXT(c);
    Stream *s;
    TRY(stream_resolve(hStream, c, &s));
    if (dst % elem) return CUDA_ERROR_INVALID_VALUE;
    if (height > 1 && pitch < width * elem) return CUDA_ERROR_INVALID_VALUE;
    size_t span = height ? (height - 1) * pitch + width * elem : 0;
    if (span) TRY(check_side(dst, span, DEVICE));
    if (!span) return CUDA_SUCCESS;
    SetWork *w = malloc(sizeof *w);
    *w = (SetWork){(uint8_t *)(uintptr_t)dst, value, elem, width, height, pitch};
    TRY(stream_submit(s, run_set, w));
    return sync ? stream_sync(s) : CUDA_SUCCESS;
}

API CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
    ENTER(cuMemsetD8_v2);
    return set(d, n, v, 1, n, 1, NULL, 1);
}
API CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) {
    ENTER(cuMemsetD16_v2);
    return set(d, n * 2, v, 2, n, 1, NULL, 1);
}
API CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned v, size_t n) {
    ENTER(cuMemsetD32_v2);
    return set(d, n * 4, v, 4, n, 1, NULL, 1);
}
API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void *st) {
    ENTER(cuMemsetD8Async);
    return set(d, n, v, 1, n, 1, st, 0);
}
API CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, void *st) {
    ENTER(cuMemsetD16Async);
    return set(d, n * 2, v, 2, n, 1, st, 0);
}
API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, void *st) {
    ENTER(cuMemsetD32Async);
    return set(d, n * 4, v, 4, n, 1, st, 0);
}
API CUresult cuMemsetD2D8_v2(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h) {
    ENTER(cuMemsetD2D8_v2);
    return set(d, pitch, v, 1, w, h, NULL, 1);
}
API CUresult cuMemsetD2D16_v2(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h) {
    ENTER(cuMemsetD2D16_v2);
    return set(d, pitch, v, 2, w, h, NULL, 1);
}
API CUresult cuMemsetD2D32_v2(CUdeviceptr d, size_t pitch, unsigned v, size_t w, size_t h) {
    ENTER(cuMemsetD2D32_v2);
    return set(d, pitch, v, 4, w, h, NULL, 1);
}
API CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, void *st) {
    ENTER(cuMemsetD2D8Async);
    return set(d, pitch, v, 1, w, h, st, 0);
}
API CUresult cuMemsetD2D16Async(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h, void *st) {
    ENTER(cuMemsetD2D16Async);
    return set(d, pitch, v, 2, w, h, st, 0);
}
API CUresult cuMemsetD2D32Async(CUdeviceptr d, size_t pitch, unsigned v, size_t w, size_t h, void *st) {
    ENTER(cuMemsetD2D32Async);
    return set(d, pitch, v, 4, w, h, st, 0);
}
