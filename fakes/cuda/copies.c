/* Copies and sets (cuMemcpy*, cuMemset*, and the operations graph nodes hold): checked at the call,
 * queued on a stream as work items (or recorded by a capturing stream); the synchronous forms wait. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

typedef struct CopyWork {
    Copy3D c;
    void *staging;
    Context *ctx;
} CopyWork;

static size_t copy_span(const Copy3D *c, size_t pitch, size_t height);

/* When the stream reaches a copy or set: a device-range side that is no longer (or not yet) live memory, such
 * as a graph allocation after its free, is a fault like a kernel's: sticky ILLEGAL_ADDRESS and a report,
 * never a touch of an unmapped page. */
static int reached_memory_ok(Context *ctx, const char *what, uint64_t p, size_t n) {
    if (!n || !mem_in_device_range(p) || mem_span_ok(p, n)) return 1;
    char report[512], where[256];
    mem_describe(p, where, sizeof where);
    snprintf(report, sizeof report, "%s of %zu bytes at 0x%llx when the stream reached it: not live memory (%s)",
             what, n, (unsigned long long)p, where);
    fake_log("%s", report);
    set_last_report(report); /* before the sticky error: a call that sees it may read the report at once */
    if (!ctx->sticky) ctx->sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
    return 0;
}

static void run_copy(void *arg) {
    CopyWork *w = arg;
    const Copy3D *c = &w->c;
    if (reached_memory_ok(w->ctx, "copy destination", c->dst, copy_span(c, c->dst_pitch, c->dst_height)) &&
        reached_memory_ok(w->ctx, "copy source", c->src, copy_span(c, c->src_pitch, c->src_height)))
        for (size_t z = 0; z < c->depth; z++)
            for (size_t y = 0; y < c->height; y++)
                memmove((uint8_t *)(uintptr_t)c->dst + (z * c->dst_height + y) * c->dst_pitch,
                        (const uint8_t *)(uintptr_t)c->src + (z * c->src_height + y) * c->src_pitch, c->width);
    free(w->staging);
    free(w);
}

/* A device-side range must lie inside one live allocation; a host side is the caller's memory, unless it
 * points into the fake's device address range (a freed or never-allocated device address). */
static CUresult check_side(uint64_t p, size_t n, int side) {
    if (!p && n) return CUDA_ERROR_INVALID_VALUE;
    if (!n) return CUDA_SUCCESS;
    if (p + n < p) return CUDA_ERROR_INVALID_VALUE; /* past the end of the address space */
    AllocInfo a;
    if (mem_find(p, &a)) return n <= a.base + a.size - p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (graph_mem_contains(p, n)) return CUDA_SUCCESS; /* mapped by the time the stream reaches the work */
    return side == MEM_DEVICE || mem_in_device_range(p) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* Bytes from the first to one past the last byte a copy touches on one side; SIZE_MAX when that does not
 * fit (no allocation is that large, so the check fails). */
static size_t copy_span(const Copy3D *c, size_t pitch, size_t height) {
    if (!c->width || !c->height || !c->depth) return 0;
    size_t rows, bytes;
    if (__builtin_mul_overflow(c->depth - 1, height, &rows) || __builtin_add_overflow(rows, c->height - 1, &rows) ||
        __builtin_mul_overflow(rows, pitch, &bytes) || __builtin_add_overflow(bytes, c->width, &bytes))
        return SIZE_MAX;
    return bytes;
}

static CUresult submit_copy(Stream *s, const StreamOp *op) {
    CopyWork *w = calloc(1, sizeof *w);
    if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
    w->c = op->u.copy;
    w->ctx = s->ctx;
    CUresult rc = stream_submit(s, run_copy, w);
    if (rc) free(w);
    return rc;
}

static const StreamOpClass COPY_CLASS = {submit_copy, NULL, NULL};

CUresult copy_op(const Copy3D *c, int dst_side, int src_side, StreamOp *op) {
    if (c->height > 1 && (c->dst_pitch < c->width || c->src_pitch < c->width)) return CUDA_ERROR_INVALID_VALUE;
    if (c->depth > 1 && (c->dst_height < c->height || c->src_height < c->height)) return CUDA_ERROR_INVALID_VALUE;
    TRY(check_side(c->dst, copy_span(c, c->dst_pitch, c->dst_height), dst_side));
    TRY(check_side(c->src, copy_span(c, c->src_pitch, c->src_height), src_side));
    *op = (StreamOp){.kind = OPK_MEMCPY, .cls = &COPY_CLASS, .u.copy = *c};
    return CUDA_SUCCESS;
}

/* CUDA_MEMCPY3D */
struct Memcpy3DParams {
    size_t src_x, src_y, src_z, src_lod;
    int src_type;
    const void *src_host;
    CUdeviceptr src_device;
    void *src_array, *reserved0;
    size_t src_pitch, src_height;
    size_t dst_x, dst_y, dst_z, dst_lod;
    int dst_type;
    void *dst_host;
    CUdeviceptr dst_device;
    void *dst_array, *reserved1;
    size_t dst_pitch, dst_height;
    size_t width, height, depth;
};
enum { MEMTYPE_HOST = 1, MEMTYPE_DEVICE = 2, MEMTYPE_ARRAY = 3, MEMTYPE_UNIFIED = 4 };

/* One side of a CUDA_MEMCPY3D: its address (offsets applied), row pitch and rows a slice (an array's own, a
 * pointer's as given: 0 means tightly packed), and how it is checked. */
static CUresult memcpy3d_side(int type, const void *host, CUdeviceptr device, void *array, size_t x, size_t y,
                              size_t z, size_t *pitch, size_t *height, uint64_t *addr, int *side) {
    switch (type) {
    case MEMTYPE_HOST: *addr = (uint64_t)(uintptr_t)host, *side = MEM_HOST; break;
    case MEMTYPE_DEVICE: *addr = device, *side = MEM_DEVICE; break;
    case MEMTYPE_UNIFIED: *addr = device, *side = MEM_EITHER; break;
    case MEMTYPE_ARRAY:
        TRY(array_layout(array, addr, pitch, height));
        *side = MEM_DEVICE;
        break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    *addr += x + (y + z * *height) * *pitch;
    return CUDA_SUCCESS;
}

CUresult memcpy3d_op(const Memcpy3DParams *p, StreamOp *op) {
    if (!p || p->src_lod || p->dst_lod) return CUDA_ERROR_INVALID_VALUE;
    Copy3D c = {0};
    c.width = p->width;
    c.height = p->height ? p->height : 1;
    c.depth = p->depth ? p->depth : 1;
    c.src_pitch = p->src_pitch ? p->src_pitch : p->width;
    c.dst_pitch = p->dst_pitch ? p->dst_pitch : p->width;
    c.src_height = p->src_height ? p->src_height : c.height;
    c.dst_height = p->dst_height ? p->dst_height : c.height;
    int dst_side, src_side;
    TRY(memcpy3d_side(p->src_type, p->src_host, p->src_device, p->src_array, p->src_x, p->src_y, p->src_z,
                      &c.src_pitch, &c.src_height, &c.src, &src_side));
    TRY(memcpy3d_side(p->dst_type, p->dst_host, p->dst_device, p->dst_array, p->dst_x, p->dst_y, p->dst_z,
                      &c.dst_pitch, &c.dst_height, &c.dst, &dst_side));
    return copy_op(&c, dst_side, src_side, op);
}

/* A 3-D copy with a host side in pageable memory is done when the call returns (no staging of a pitched
 * region); otherwise it is queued like any other copy. */
static CUresult memcpy3d(const Memcpy3DParams *p, void *hStream, int sync) {
    NEED_CONTEXT(c);
    Stream *s;
    TRY(stream_resolve(hStream, c, &s));
    StreamOp op;
    TRY(memcpy3d_op(p, &op));
    if (!op.u.copy.width) return CUDA_SUCCESS;
    if (s->capture) return stream_capture(s, &op);
    int pageable = (!mem_in_device_range(op.u.copy.src) && !mem_find(op.u.copy.src, NULL)) ||
                   (!mem_in_device_range(op.u.copy.dst) && !mem_find(op.u.copy.dst, NULL));
    TRY(submit_copy(s, &op));
    return sync || pageable ? stream_sync(s) : CUDA_SUCCESS;
}

API CUresult cuMemcpy3D_v2(const Memcpy3DParams *p) {
    ENTER(cuMemcpy3D_v2);
    return memcpy3d(p, NULL, 1);
}

API CUresult cuMemcpy3DAsync_v2(const Memcpy3DParams *p, void *hStream) {
    ENTER(cuMemcpy3DAsync_v2);
    return memcpy3d(p, hStream, 0);
}

static CUresult copy(uint64_t dst, int dst_side, uint64_t src, int src_side, size_t n, void *hStream, int sync) {
    NEED_CONTEXT(c);
    Stream *s;
    TRY(stream_resolve(hStream, c, &s));
    StreamOp op;
    TRY(copy_op(&(Copy3D){dst, src, n, 1, n, 1, n, 1, 1}, dst_side, src_side, &op));
    if (n == 0) return CUDA_SUCCESS;
    if (s->capture) return stream_capture(s, &op); /* a graph reads its source when it runs */
    CopyWork *w = calloc(1, sizeof *w);
    if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
    w->c = op.u.copy;
    w->ctx = s->ctx;
    int src_pageable = !mem_in_device_range(src) && !mem_find(src, NULL);
    int dst_pageable = !mem_in_device_range(dst) && !mem_find(dst, NULL);
    if (!sync && src_pageable) { /* pageable source: staged now, so the caller may reuse it at once */
        w->staging = malloc(n);
        memcpy(w->staging, (const void *)(uintptr_t)src, n);
        w->c.src = (uint64_t)(uintptr_t)w->staging;
    }
    TRY(stream_submit(s, run_copy, w));
    if (sync || dst_pageable) return stream_sync(s); /* a copy into pageable memory returns when done */
    return CUDA_SUCCESS;
}

API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    ENTER(cuMemcpyHtoD_v2);
    return copy(dst, MEM_DEVICE, (uint64_t)(uintptr_t)src, MEM_HOST, n, NULL, 1);
}
API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    ENTER(cuMemcpyDtoH_v2);
    return copy((uint64_t)(uintptr_t)dst, MEM_HOST, src, MEM_DEVICE, n, NULL, 1);
}
API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    ENTER(cuMemcpyDtoD_v2);
    return copy(dst, MEM_DEVICE, src, MEM_DEVICE, n, NULL, 1);
}
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *hStream) {
    ENTER(cuMemcpyHtoDAsync_v2);
    return copy(dst, MEM_DEVICE, (uint64_t)(uintptr_t)src, MEM_HOST, n, hStream, 0);
}
API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *hStream) {
    ENTER(cuMemcpyDtoHAsync_v2);
    return copy((uint64_t)(uintptr_t)dst, MEM_HOST, src, MEM_DEVICE, n, hStream, 0);
}
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *hStream) {
    ENTER(cuMemcpyDtoDAsync_v2);
    return copy(dst, MEM_DEVICE, src, MEM_DEVICE, n, hStream, 0);
}
API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    ENTER(cuMemcpy);
    return copy(dst, MEM_EITHER, src, MEM_EITHER, n, NULL, 1);
}
API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, void *hStream) {
    ENTER(cuMemcpyAsync);
    return copy(dst, MEM_EITHER, src, MEM_EITHER, n, hStream, 0);
}

typedef struct SetWork {
    SetParams p;
    Context *ctx;
} SetWork;

static void run_set(void *arg) {
    SetWork *sw = arg;
    const SetParams *w = &sw->p;
    size_t span = w->height ? (w->height - 1) * w->pitch + w->width * w->elem : 0; /* checked by set_op */
    if (reached_memory_ok(sw->ctx, "memset", w->dst, span))
        for (size_t y = 0; y < w->height; y++) {
            uint8_t *row = (uint8_t *)(uintptr_t)w->dst + y * w->pitch;
            if (w->elem == 1) memset(row, (int)(w->value & 0xFF), w->width);
            else if (w->elem == 2) for (size_t i = 0; i < w->width; i++) ((uint16_t *)row)[i] = (uint16_t)w->value;
            else for (size_t i = 0; i < w->width; i++) ((uint32_t *)row)[i] = w->value;
        }
    free(sw);
}

static CUresult submit_set(Stream *s, const StreamOp *op) {
    SetWork *w = malloc(sizeof *w);
    if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
    *w = (SetWork){op->u.set, s->ctx};
    CUresult rc = stream_submit(s, run_set, w);
    if (rc) free(w);
    return rc;
}

static const StreamOpClass SET_CLASS = {submit_set, NULL, NULL};

CUresult set_op(const SetParams *p, StreamOp *op) {
    if ((p->elem != 1 && p->elem != 2 && p->elem != 4) || p->dst % p->elem) return CUDA_ERROR_INVALID_VALUE;
    if (p->height > 1 && p->pitch < p->width * p->elem) return CUDA_ERROR_INVALID_VALUE;
    size_t span = 0, row;
    if (p->height &&
        (__builtin_mul_overflow(p->height - 1, p->pitch, &span) || __builtin_mul_overflow(p->width, p->elem, &row) ||
         __builtin_add_overflow(span, row, &span)))
        return CUDA_ERROR_INVALID_VALUE;
    if (span) TRY(check_side(p->dst, span, MEM_DEVICE));
    *op = (StreamOp){.kind = OPK_MEMSET, .cls = &SET_CLASS, .u.set = *p};
    return CUDA_SUCCESS;
}

static CUresult set(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned elem, size_t width, size_t height,
                    void *hStream, int sync) {
    NEED_CONTEXT(c);
    Stream *s;
    TRY(stream_resolve(hStream, c, &s));
    StreamOp op;
    TRY(set_op(&(SetParams){dst, pitch, value, elem, width, height}, &op));
    if (!width || !height) return CUDA_SUCCESS;
    if (s->capture) return stream_capture(s, &op);
    TRY(submit_set(s, &op));
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
