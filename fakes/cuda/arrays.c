/* CUDA arrays, mipmapped arrays, texture and surface objects. An array is a device allocation laid out densely
 * (rows of width x element bytes, max(height, 1) rows a slice, max(depth, 1) slices), so copies (cuMemcpy3D,
 * memcpy nodes) reach it as pitched memory; a mipmapped array is its levels, each an array. Texture and
 * surface objects check and keep their descriptors; the PTX that reads them (tex, suld, sust) is not
 * implemented, so a kernel that uses one fails to load with a message naming the instruction. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

/* CUDA_ARRAY3D_DESCRIPTOR */
typedef struct Array3DDesc {
    size_t width, height, depth;
    unsigned format, channels, flags;
} Array3DDesc;

/* CUDA_ARRAY_DESCRIPTOR */
typedef struct Array2DDesc {
    size_t width, height;
    unsigned format, channels;
} Array2DDesc;

typedef struct Array {
    Context *ctx;
    Array3DDesc desc;
    unsigned elem; /* bytes per element */
    uint64_t data; /* the device allocation holding it */
    int is_level;  /* a level of a mipmapped array: destroyed with it, not by cuArrayDestroy */
} Array;

typedef struct MipmappedArray {
    Array **levels;
    unsigned nlevels;
} MipmappedArray;

#define ARRAY3D_LAYERED 0x01
#define ARRAY3D_SURFACE_LDST 0x02
#define ARRAY3D_CUBEMAP 0x04
#define ARRAY3D_TEXTURE_GATHER 0x08
#define ARRAY3D_FLAGS_IMPLEMENTED (ARRAY3D_LAYERED | ARRAY3D_SURFACE_LDST | ARRAY3D_CUBEMAP | ARRAY3D_TEXTURE_GATHER)
/* the device's limits (sm_90): 1-D, 2-D and 3-D extents of an array */
#define MAX_EXTENT_1D 131072
#define MAX_EXTENT_2D_W 131072
#define MAX_EXTENT_2D_H 65536
#define MAX_EXTENT_3D 16384

/* Bytes of one channel of a CUarray_format; 0 for formats not implemented (block-compressed, video). */
static unsigned channel_bytes(unsigned format) {
    switch (format) {
    case 0x01: case 0x08: return 1; /* UNSIGNED_INT8, SIGNED_INT8 */
    case 0x02: case 0x09: case 0x10: return 2; /* UNSIGNED_INT16, SIGNED_INT16, HALF */
    case 0x03: case 0x0a: case 0x20: return 4; /* UNSIGNED_INT32, SIGNED_INT32, FLOAT */
    default: return 0;
    }
}

static CUresult check_desc(const Array3DDesc *d, unsigned *elem) {
    if (!d->width || (d->depth && !d->height && !(d->flags & ARRAY3D_LAYERED))) return CUDA_ERROR_INVALID_VALUE;
    if (d->channels != 1 && d->channels != 2 && d->channels != 4) return CUDA_ERROR_INVALID_VALUE;
    if (d->flags & ~(unsigned)ARRAY3D_FLAGS_IMPLEMENTED) {
        fake_log("CUDA array flags 0x%x are not implemented (layered, surface load/store, cubemap and texture "
                 "gather are)", d->flags & ~(unsigned)ARRAY3D_FLAGS_IMPLEMENTED);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    unsigned bytes = channel_bytes(d->format);
    if (!bytes) {
        fake_log("CUDA array format 0x%x is not implemented (8/16/32-bit integers, half and float are)", d->format);
        return d->format <= 0x20 ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
    }
    int layered = (d->flags & ARRAY3D_LAYERED) != 0;
    int dims = d->depth && !layered ? 3 : d->height ? 2 : 1;
    if ((dims == 1 && d->width > MAX_EXTENT_1D) ||
        (dims == 2 && (d->width > MAX_EXTENT_2D_W || d->height > MAX_EXTENT_2D_H)) ||
        (dims == 3 && (d->width > MAX_EXTENT_3D || d->height > MAX_EXTENT_3D || d->depth > MAX_EXTENT_3D)))
        return CUDA_ERROR_INVALID_VALUE;
    if ((d->flags & ARRAY3D_CUBEMAP) && (d->width != d->height || (d->depth % 6) != 0)) return CUDA_ERROR_INVALID_VALUE;
    *elem = bytes * d->channels;
    return CUDA_SUCCESS;
}

static size_t rows_of(const Array3DDesc *d) { return d->height ? d->height : 1; }
static size_t slices_of(const Array3DDesc *d) { return d->depth ? d->depth : 1; }

static CUresult array_new(Context *ctx, const Array3DDesc *d, int is_level, Array **out) {
    unsigned elem;
    TRY(check_desc(d, &elem));
    Array *a = calloc(1, sizeof *a);
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    *a = (Array){ctx, *d, elem, 0, is_level};
    CUresult rc = mem_alloc(ctx, d->width * elem * rows_of(d) * slices_of(d), A_DEVICE, &a->data);
    if (rc) {
        free(a);
        return rc;
    }
    handle_add(a, H_ARRAY);
    *out = a;
    return CUDA_SUCCESS;
}

static void array_free(Array *a) {
    handle_remove(a);
    mem_free(a->data, 1 << A_DEVICE);
    free(a);
}

CUresult array_layout(void *harray, uint64_t *data, size_t *pitch, size_t *rows) {
    Array *a;
    TRY(handle_get(harray, H_ARRAY, &a));
    *data = a->data;
    *pitch = a->desc.width * a->elem;
    *rows = rows_of(&a->desc);
    return CUDA_SUCCESS;
}

API CUresult cuArray3DCreate_v2(void **pHandle, const Array3DDesc *desc) {
    ENTER(cuArray3DCreate_v2);
    NEED_CONTEXT(c);
    if (!pHandle || !desc) return CUDA_ERROR_INVALID_VALUE;
    Array *a;
    TRY(array_new(c, desc, 0, &a));
    *pHandle = a;
    return CUDA_SUCCESS;
}

API CUresult cuArrayCreate_v2(void **pHandle, const Array2DDesc *desc) {
    ENTER(cuArrayCreate_v2);
    NEED_CONTEXT(c);
    if (!pHandle || !desc) return CUDA_ERROR_INVALID_VALUE;
    Array *a;
    TRY(array_new(c, &(Array3DDesc){desc->width, desc->height, 0, desc->format, desc->channels, 0}, 0, &a));
    *pHandle = a;
    return CUDA_SUCCESS;
}

API CUresult cuArray3DGetDescriptor_v2(Array3DDesc *desc, void *hArray) {
    ENTER(cuArray3DGetDescriptor_v2);
    Array *a;
    TRY(handle_get(hArray, H_ARRAY, &a));
    if (!desc) return CUDA_ERROR_INVALID_VALUE;
    *desc = a->desc;
    return CUDA_SUCCESS;
}

API CUresult cuArrayGetDescriptor_v2(Array2DDesc *desc, void *hArray) {
    ENTER(cuArrayGetDescriptor_v2);
    Array *a;
    TRY(handle_get(hArray, H_ARRAY, &a));
    if (!desc) return CUDA_ERROR_INVALID_VALUE;
    if (a->desc.depth) return CUDA_ERROR_INVALID_VALUE; /* a 3-D array has no 2-D descriptor */
    *desc = (Array2DDesc){a->desc.width, a->desc.height, a->desc.format, a->desc.channels};
    return CUDA_SUCCESS;
}

API CUresult cuArrayDestroy(void *hArray) {
    ENTER(cuArrayDestroy);
    Array *a;
    TRY(handle_get(hArray, H_ARRAY, &a));
    if (a->is_level) return CUDA_ERROR_INVALID_VALUE; /* its mipmapped array owns it */
    streams_sync_context(a->ctx); /* work queued on it finishes first, as cuMemFree does */
    array_free(a);
    return CUDA_SUCCESS;
}

/* ---- mipmapped arrays: level l has each extent halved l times (at least 1; an absent one stays 0) ---- */

static size_t level_extent(size_t n, unsigned level) {
    if (!n) return 0;
    n >>= level < 63 ? level : 63;
    return n ? n : 1;
}

static void mipmapped_free(MipmappedArray *m) {
    handle_remove(m);
    for (unsigned i = 0; i < m->nlevels; i++)
        if (m->levels[i]) array_free(m->levels[i]);
    free(m->levels);
    free(m);
}

API CUresult cuMipmappedArrayCreate(void **pHandle, const Array3DDesc *desc, unsigned numLevels) {
    ENTER(cuMipmappedArrayCreate);
    NEED_CONTEXT(c);
    if (!pHandle || !desc || !numLevels) return CUDA_ERROR_INVALID_VALUE;
    size_t largest = desc->width > desc->height ? desc->width : desc->height;
    if (!(desc->flags & ARRAY3D_LAYERED) && desc->depth > largest) largest = desc->depth;
    unsigned most = 1;
    while (most < 64 && (largest >> most)) most++; /* floor(log2(largest)) + 1 levels at most */
    if (numLevels > most) return CUDA_ERROR_INVALID_VALUE;
    MipmappedArray *m = calloc(1, sizeof *m);
    if (!m || !(m->levels = calloc(numLevels, sizeof *m->levels))) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->nlevels = numLevels;
    handle_add(m, H_MIPMAPPED_ARRAY);
    for (unsigned l = 0; l < numLevels; l++) {
        int layered = (desc->flags & ARRAY3D_LAYERED) != 0;
        Array3DDesc d = *desc;
        d.width = level_extent(desc->width, l);
        d.height = level_extent(desc->height, l);
        d.depth = layered ? desc->depth : level_extent(desc->depth, l);
        CUresult rc = array_new(c, &d, 1, &m->levels[l]);
        if (rc) {
            mipmapped_free(m);
            return rc;
        }
    }
    *pHandle = m;
    return CUDA_SUCCESS;
}

API CUresult cuMipmappedArrayGetLevel(void **pLevelArray, void *hMipmappedArray, unsigned level) {
    ENTER(cuMipmappedArrayGetLevel);
    MipmappedArray *m;
    TRY(handle_get(hMipmappedArray, H_MIPMAPPED_ARRAY, &m));
    if (!pLevelArray || level >= m->nlevels) return CUDA_ERROR_INVALID_VALUE;
    *pLevelArray = m->levels[level];
    return CUDA_SUCCESS;
}

API CUresult cuMipmappedArrayDestroy(void *hMipmappedArray) {
    ENTER(cuMipmappedArrayDestroy);
    MipmappedArray *m;
    TRY(handle_get(hMipmappedArray, H_MIPMAPPED_ARRAY, &m));
    if (m->nlevels) streams_sync_context(m->levels[0]->ctx);
    mipmapped_free(m);
    return CUDA_SUCCESS;
}

/* ---- texture and surface objects ---- */

/* CUDA_RESOURCE_DESC */
typedef struct ResourceDesc {
    int type;
    union {
        void *array;
        void *mipmap;
        struct {
            CUdeviceptr ptr;
            unsigned format, channels;
            size_t bytes;
        } linear;
        struct {
            CUdeviceptr ptr;
            unsigned format, channels;
            size_t width, height, pitch;
        } pitch2d;
        int reserved[32];
    } res;
    unsigned flags;
} ResourceDesc;
enum { RESOURCE_ARRAY = 0, RESOURCE_MIPMAPPED_ARRAY = 1, RESOURCE_LINEAR = 2, RESOURCE_PITCH2D = 3 };

/* CUDA_TEXTURE_DESC */
typedef struct TextureDesc {
    int address_mode[3];
    int filter_mode;
    unsigned flags, max_anisotropy;
    int mipmap_filter_mode;
    float mipmap_level_bias, min_mipmap_level_clamp, max_mipmap_level_clamp;
    float border_color[4];
    int reserved[12];
} TextureDesc;
#define TEXTURE_FLAGS 0x73 /* CU_TRSF_READ_AS_INTEGER, NORMALIZED_COORDINATES, SRGB, DISABLE_TRILINEAR, SEAMLESS_CUBEMAP */

/* CUDA_RESOURCE_VIEW_DESC */
typedef struct ResourceViewDesc {
    int format;
    size_t width, height, depth;
    unsigned first_mipmap_level, last_mipmap_level, first_layer, last_layer;
    unsigned reserved[16];
} ResourceViewDesc;

typedef struct TextureObject {
    ResourceDesc resource;
    TextureDesc texture;
    ResourceViewDesc view;
    int has_view;
    int is_surface;
} TextureObject;

#define TEXTURE_ALIGNMENT 512 /* CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT */
#define TEXTURE_PITCH_ALIGNMENT 32

/* Device memory [p, p+n) for a linear or pitched texture: live, and aligned as the device requires. */
static CUresult check_texture_memory(CUdeviceptr p, size_t n) {
    if (!p || p % TEXTURE_ALIGNMENT || !n || !mem_span_ok(p, n)) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult check_resource(const ResourceDesc *r) {
    if (r->flags) return CUDA_ERROR_INVALID_VALUE;
    Array *a;
    MipmappedArray *m;
    switch (r->type) {
    case RESOURCE_ARRAY: return handle_get(r->res.array, H_ARRAY, &a);
    case RESOURCE_MIPMAPPED_ARRAY: return handle_get(r->res.mipmap, H_MIPMAPPED_ARRAY, &m);
    case RESOURCE_LINEAR: {
        unsigned bytes = channel_bytes(r->res.linear.format), ch = r->res.linear.channels;
        if (!bytes || (ch != 1 && ch != 2 && ch != 4) || r->res.linear.bytes % (bytes * ch)) return CUDA_ERROR_INVALID_VALUE;
        return check_texture_memory(r->res.linear.ptr, r->res.linear.bytes);
    }
    case RESOURCE_PITCH2D: {
        unsigned bytes = channel_bytes(r->res.pitch2d.format), ch = r->res.pitch2d.channels;
        size_t w = r->res.pitch2d.width, h = r->res.pitch2d.height, pitch = r->res.pitch2d.pitch;
        if (!bytes || (ch != 1 && ch != 2 && ch != 4) || !w || !h || pitch % TEXTURE_PITCH_ALIGNMENT ||
            pitch < w * bytes * ch || h > SIZE_MAX / pitch)
            return CUDA_ERROR_INVALID_VALUE;
        return check_texture_memory(r->res.pitch2d.ptr, (h - 1) * pitch + w * bytes * ch);
    }
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult check_texture(const TextureDesc *t) {
    for (int i = 0; i < 3; i++)
        if (t->address_mode[i] < 0 || t->address_mode[i] > 3) return CUDA_ERROR_INVALID_VALUE;
    if (t->filter_mode < 0 || t->filter_mode > 1 || t->mipmap_filter_mode < 0 || t->mipmap_filter_mode > 1 ||
        (t->flags & ~(unsigned)TEXTURE_FLAGS))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult object_new(const ResourceDesc *r, const TextureDesc *t, const ResourceViewDesc *v, int surface,
                           uint64_t *out) {
    TextureObject *o = calloc(1, sizeof *o);
    if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
    o->resource = *r;
    if (t) o->texture = *t;
    if (v) o->view = *v, o->has_view = 1;
    o->is_surface = surface;
    handle_add(o, H_TEXTURE_OBJECT);
    *out = (uint64_t)(uintptr_t)o;
    return CUDA_SUCCESS;
}

API CUresult cuTexObjectCreate(uint64_t *pTexObject, const ResourceDesc *res, const TextureDesc *tex,
                               const ResourceViewDesc *view) {
    ENTER(cuTexObjectCreate);
    NEED_CONTEXT(c);
    if (!pTexObject || !res || !tex) return CUDA_ERROR_INVALID_VALUE;
    TRY(check_resource(res));
    TRY(check_texture(tex));
    if (view && (res->type == RESOURCE_LINEAR || res->type == RESOURCE_PITCH2D)) return CUDA_ERROR_INVALID_VALUE;
    return object_new(res, tex, view, 0, pTexObject);
}

/* A surface is an array made with CUDA_ARRAY3D_SURFACE_LDST. */
API CUresult cuSurfObjectCreate(uint64_t *pSurfObject, const ResourceDesc *res) {
    ENTER(cuSurfObjectCreate);
    NEED_CONTEXT(c);
    if (!pSurfObject || !res || res->type != RESOURCE_ARRAY || res->flags) return CUDA_ERROR_INVALID_VALUE;
    Array *a;
    TRY(handle_get(res->res.array, H_ARRAY, &a));
    if (!(a->desc.flags & ARRAY3D_SURFACE_LDST)) return CUDA_ERROR_INVALID_VALUE;
    return object_new(res, NULL, NULL, 1, pSurfObject);
}

static CUresult object_get(uint64_t handle, int surface, TextureObject **out) {
    TRY(handle_get((void *)(uintptr_t)handle, H_TEXTURE_OBJECT, out));
    return (*out)->is_surface == surface ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult object_destroy(uint64_t handle, int surface) {
    TextureObject *o;
    TRY(object_get(handle, surface, &o));
    handle_remove(o);
    free(o);
    return CUDA_SUCCESS;
}

API CUresult cuTexObjectDestroy(uint64_t texObject) {
    ENTER(cuTexObjectDestroy);
    return object_destroy(texObject, 0);
}

API CUresult cuSurfObjectDestroy(uint64_t surfObject) {
    ENTER(cuSurfObjectDestroy);
    return object_destroy(surfObject, 1);
}

API CUresult cuTexObjectGetResourceDesc(ResourceDesc *res, uint64_t texObject) {
    ENTER(cuTexObjectGetResourceDesc);
    TextureObject *o;
    TRY(object_get(texObject, 0, &o));
    if (!res) return CUDA_ERROR_INVALID_VALUE;
    *res = o->resource;
    return CUDA_SUCCESS;
}

API CUresult cuTexObjectGetTextureDesc(TextureDesc *tex, uint64_t texObject) {
    ENTER(cuTexObjectGetTextureDesc);
    TextureObject *o;
    TRY(object_get(texObject, 0, &o));
    if (!tex) return CUDA_ERROR_INVALID_VALUE;
    *tex = o->texture;
    return CUDA_SUCCESS;
}

API CUresult cuTexObjectGetResourceViewDesc(ResourceViewDesc *view, uint64_t texObject) {
    ENTER(cuTexObjectGetResourceViewDesc);
    TextureObject *o;
    TRY(object_get(texObject, 0, &o));
    if (!view || !o->has_view) return CUDA_ERROR_INVALID_VALUE;
    *view = o->view;
    return CUDA_SUCCESS;
}

API CUresult cuSurfObjectGetResourceDesc(ResourceDesc *res, uint64_t surfObject) {
    ENTER(cuSurfObjectGetResourceDesc);
    TextureObject *o;
    TRY(object_get(surfObject, 1, &o));
    if (!res) return CUDA_ERROR_INVALID_VALUE;
    *res = o->resource;
    return CUDA_SUCCESS;
}
