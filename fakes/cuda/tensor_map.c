/* Tensor maps (TMA descriptors): cuTensorMapEncodeTiled/Im2col check their arguments by the rules the CUDA
 * documentation gives for sm_90 and write a 128-byte CUtensorMap holding them; cuTensorMapReplaceAddress
 * changes its address, and device code changes its fields with tensormap.replace (the interpreter writes where
 * tensor_map_field says). The PTX that reads a tensor map (cp.async.bulk.tensor) is not implemented: a kernel
 * that uses one fails to load naming the instruction. */
#include <stddef.h>
#include <string.h>

#include "fake.h"
#include "ops.h"

#define TENSOR_MAP_MAGIC 0x46414b45544d4150ull /* "FAKETMAP" */
enum { INTERLEAVE_NONE = 0, INTERLEAVE_16B = 1, INTERLEAVE_32B = 2 };
enum { SWIZZLE_NONE = 0, SWIZZLE_32B = 1, SWIZZLE_64B = 2, SWIZZLE_128B = 3 };
enum { KIND_TILED = 1, KIND_IM2COL = 2 };
#define MAX_RANK 5

/* What a CUtensorMap (128 bytes) holds here. */
typedef struct TensorMap {
    uint64_t magic;
    uint64_t address;
    uint32_t dims32[MAX_RANK]; /* globalDim, checked below 2^32 */
    uint8_t kind, dtype, rank, interleave, swizzle, l2, oob;
    uint8_t element_strides[MAX_RANK];
    uint16_t box_or_pixels[2]; /* boxDim[0] (tiled) or channels/pixels (im2col): enough to check, not to run */
    uint8_t pad0[4];
    uint64_t strides[MAX_RANK - 1]; /* globalStrides (of dimensions 1..) */
    uint16_t box[MAX_RANK];         /* boxDim (tiled) */
    uint8_t pad[128 - 56 - 8 * (MAX_RANK - 1) - 2 * MAX_RANK];
} TensorMap;
_Static_assert(sizeof(TensorMap) == 128, "CUtensorMap is 128 bytes");

/* Bytes of one element of a CUtensorMapDataType; 0 when unknown. */
static unsigned element_bytes(int dtype) {
    static const unsigned bytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4}; /* UINT8 .. TFLOAT32_FTZ */
    return dtype >= 0 && dtype < (int)(sizeof bytes / sizeof *bytes) ? bytes[dtype] : 0;
}

static int is_float(int dtype) { return dtype >= 6; }

/* The checks both encodings share: type, rank, address, extents, strides, element strides, modes. */
static CUresult check_common(void *map, int dtype, unsigned rank, const void *address, const uint64_t *dims,
                             const uint64_t *strides, const uint32_t *element_strides, int interleave, int swizzle,
                             int l2, int oob, unsigned min_rank) {
    if (!map || !dims || !element_strides || (rank > 1 && !strides))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned elem = element_bytes(dtype);
    if (!elem || rank < min_rank || rank > MAX_RANK || (interleave != INTERLEAVE_NONE && rank < 3))
        return CUDA_ERROR_INVALID_VALUE;
    if (interleave < INTERLEAVE_NONE || interleave > INTERLEAVE_32B || swizzle < SWIZZLE_NONE ||
        swizzle > SWIZZLE_128B || l2 < 0 || l2 > 3 || oob < 0 || oob > 1 || (oob == 1 && !is_float(dtype)))
        return CUDA_ERROR_INVALID_VALUE;
    if (interleave == INTERLEAVE_32B && swizzle != SWIZZLE_32B) return CUDA_ERROR_INVALID_VALUE;
    uint64_t align = interleave == INTERLEAVE_32B ? 32 : 16;
    if (!address || (uintptr_t)address % align) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < rank; i++)
        if (!dims[i] || dims[i] > (1ull << 32) || !element_strides[i] || element_strides[i] > 8)
            return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i + 1 < rank; i++) /* strides of dimensions 1.., in bytes */
        if (strides[i] % align || strides[i] >= (1ull << 40)) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* With swizzling and no interleave, the inner box row must fit the swizzle span. */
static CUresult check_swizzle_span(int interleave, int swizzle, uint64_t inner_bytes) {
    static const unsigned span[] = {0, 32, 64, 128};
    if (interleave == INTERLEAVE_NONE && swizzle != SWIZZLE_NONE && inner_bytes > span[swizzle])
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static void write_map(void *map, int kind, int dtype, unsigned rank, const void *address, const uint64_t *dims,
                      const uint64_t *strides, const uint32_t *box, const uint32_t *element_strides, int interleave,
                      int swizzle, int l2, int oob, unsigned a, unsigned b) {
    TensorMap t;
    memset(&t, 0, sizeof t);
    t.magic = TENSOR_MAP_MAGIC;
    t.address = (uint64_t)(uintptr_t)address;
    for (unsigned i = 0; i < rank; i++) t.dims32[i] = (uint32_t)(dims[i] - 1), t.element_strides[i] = (uint8_t)element_strides[i];
    for (unsigned i = 0; i + 1 < rank; i++) t.strides[i] = strides[i];
    for (unsigned i = 0; box && i < rank; i++) t.box[i] = (uint16_t)box[i];
    t.kind = (uint8_t)kind, t.dtype = (uint8_t)dtype, t.rank = (uint8_t)rank;
    t.interleave = (uint8_t)interleave, t.swizzle = (uint8_t)swizzle, t.l2 = (uint8_t)l2, t.oob = (uint8_t)oob;
    t.box_or_pixels[0] = (uint16_t)a, t.box_or_pixels[1] = (uint16_t)b;
    memcpy(map, &t, sizeof t);
}

API CUresult cuTensorMapEncodeTiled(void *map, int dtype, unsigned rank, void *address, const uint64_t *dims,
                                    const uint64_t *strides, const uint32_t *box, const uint32_t *element_strides,
                                    int interleave, int swizzle, int l2, int oob) {
    ENTER(cuTensorMapEncodeTiled);
    NEED_INIT();
    TRY(check_common(map, dtype, rank, address, dims, strides, element_strides, interleave, swizzle, l2, oob, 1));
    if (!box) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < rank; i++)
        if (!box[i] || box[i] > 256) return CUDA_ERROR_INVALID_VALUE;
    uint64_t inner = (uint64_t)box[0] * element_bytes(dtype);
    if (interleave == INTERLEAVE_NONE && inner % 16) return CUDA_ERROR_INVALID_VALUE;
    TRY(check_swizzle_span(interleave, swizzle, inner));
    write_map(map, KIND_TILED, dtype, rank, address, dims, strides, box, element_strides, interleave, swizzle, l2,
              oob, box[0], 0);
    return CUDA_SUCCESS;
}

API CUresult cuTensorMapEncodeIm2col(void *map, int dtype, unsigned rank, void *address, const uint64_t *dims,
                                     const uint64_t *strides, const int *lower, const int *upper, unsigned channels,
                                     unsigned pixels, const uint32_t *element_strides, int interleave, int swizzle,
                                     int l2, int oob) {
    ENTER(cuTensorMapEncodeIm2col);
    NEED_INIT();
    TRY(check_common(map, dtype, rank, address, dims, strides, element_strides, interleave, swizzle, l2, oob, 3));
    if (!lower || !upper || !channels || channels > 256 || !pixels || pixels > 1024) return CUDA_ERROR_INVALID_VALUE;
    int range = rank == 3 ? 1 << 15 : rank == 4 ? 1 << 7 : 1 << 4; /* corner offsets: signed 16, 8 or 5 bits */
    for (unsigned i = 0; i + 2 < rank; i++)
        if (lower[i] < -range || lower[i] >= range || upper[i] < -range || upper[i] >= range)
            return CUDA_ERROR_INVALID_VALUE;
    uint64_t inner = (uint64_t)channels * element_bytes(dtype);
    if (interleave == INTERLEAVE_NONE && inner % 16) return CUDA_ERROR_INVALID_VALUE;
    TRY(check_swizzle_span(interleave, swizzle, inner));
    write_map(map, KIND_IM2COL, dtype, rank, address, dims, strides, NULL, element_strides, interleave, swizzle, l2,
              oob, channels, pixels);
    return CUDA_SUCCESS;
}

API CUresult cuTensorMapReplaceAddress(void *map, void *address) {
    ENTER(cuTensorMapReplaceAddress);
    NEED_INIT();
    TensorMap t;
    if (!map) return CUDA_ERROR_INVALID_VALUE;
    memcpy(&t, map, sizeof t);
    if (t.magic != TENSOR_MAP_MAGIC) return CUDA_ERROR_INVALID_VALUE; /* not one the fake encoded */
    uint64_t align = t.interleave == INTERLEAVE_32B ? 32 : 16;
    if (!address || (uintptr_t)address % align) return CUDA_ERROR_INVALID_VALUE;
    t.address = (uint64_t)(uintptr_t)address;
    memcpy(map, &t, sizeof t);
    return CUDA_SUCCESS;
}

unsigned tensor_map_field_dims(int field) {
    switch (field) {
    case TM_BOX_DIM: case TM_GLOBAL_DIM: case TM_ELEMENT_STRIDE: return MAX_RANK;
    case TM_GLOBAL_STRIDE: return MAX_RANK - 1;
    default: return 0;
    }
}

void tensor_map_field(int field, unsigned ord, uint64_t new_val, unsigned *offset, unsigned *size, uint64_t *stored) {
    const TensorMap *t = NULL; /* for sizeof only */
#define AT(member, index) (*offset = (unsigned)(offsetof(TensorMap, member) + (index) * sizeof t->member[0]), \
                           *size = sizeof t->member[0])
#define AT1(member) (*offset = (unsigned)offsetof(TensorMap, member), *size = sizeof t->member)
    *stored = new_val;
    switch (field) {
    case TM_GLOBAL_ADDRESS: AT1(address); break;
    case TM_RANK: AT1(rank), *stored = new_val + 1; break;
    case TM_BOX_DIM: AT(box, ord); break;
    case TM_GLOBAL_DIM: AT(dims32, ord), *stored = new_val - 1; break; /* kept as the extent minus one */
    case TM_GLOBAL_STRIDE: AT(strides, ord); break;
    case TM_ELEMENT_STRIDE: AT(element_strides, ord); break;
    case TM_INTERLEAVE: AT1(interleave); break;
    case TM_SWIZZLE: AT1(swizzle); break;
    default: AT1(oob); break; /* TM_FILL */
    }
#undef AT
#undef AT1
}
