"""Tensor maps on the fake, through cuda.bindings: encodings that follow the documented sm_90 rules succeed,
each broken rule is INVALID_VALUE, and a map's address can be replaced only with an aligned one."""

import pytest


def _tiled(d, addr, dims=(64, 32), strides=(256,), box=(16, 8), dtype=None, swizzle=None, interleave=None, oob=None):
    T = d.CUtensorMapDataType
    return d.cuTensorMapEncodeTiled(
        dtype if dtype is not None else T.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, d.cuuint32_t(len(dims)), addr,
        [d.cuuint64_t(x) for x in dims], [d.cuuint64_t(x) for x in strides], [d.cuuint32_t(x) for x in box],
        [d.cuuint32_t(1)] * len(dims),
        interleave if interleave is not None else d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzle if swizzle is not None else d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
        d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
        oob if oob is not None else d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)


def test_tiled_maps_follow_the_documented_rules(cuda):
    d = cuda.d
    E = d.CUresult
    buf = cuda.alloc(64 * 32 * 4)
    assert d.cuDeviceGetAttribute(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED, 0)[1] == 1
    tmap = cuda.ok(_tiled(d, buf))
    assert cuda.err(_tiled(d, buf + 4)) == E.CUDA_ERROR_INVALID_VALUE               # address not 16-byte aligned
    assert cuda.err(_tiled(d, buf, strides=(260,))) == E.CUDA_ERROR_INVALID_VALUE   # stride not a multiple of 16
    assert cuda.err(_tiled(d, buf, box=(0, 8))) == E.CUDA_ERROR_INVALID_VALUE       # empty box
    assert cuda.err(_tiled(d, buf, box=(16, 257))) == E.CUDA_ERROR_INVALID_VALUE    # box past 256
    assert cuda.err(_tiled(d, buf, box=(3, 8))) == E.CUDA_ERROR_INVALID_VALUE       # inner box row of 12 bytes
    S = d.CUtensorMapSwizzle
    assert cuda.ok(_tiled(d, buf, box=(8, 8), swizzle=S.CU_TENSOR_MAP_SWIZZLE_32B)) is not None  # 32 bytes fit 32B
    assert cuda.err(_tiled(d, buf, box=(16, 8), swizzle=S.CU_TENSOR_MAP_SWIZZLE_32B)) == E.CUDA_ERROR_INVALID_VALUE
    I = d.CUtensorMapInterleave
    assert cuda.err(_tiled(d, buf, interleave=I.CU_TENSOR_MAP_INTERLEAVE_16B)) == E.CUDA_ERROR_INVALID_VALUE  # rank 2
    T = d.CUtensorMapDataType
    nan_fill = d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
    assert cuda.err(_tiled(d, buf, dtype=T.CU_TENSOR_MAP_DATA_TYPE_INT32, oob=nan_fill)) == E.CUDA_ERROR_INVALID_VALUE

    cuda.ok(d.cuTensorMapReplaceAddress(tmap, buf + 64))
    assert cuda.err(d.cuTensorMapReplaceAddress(tmap, buf + 8)) == E.CUDA_ERROR_INVALID_VALUE
    assert cuda.err(d.cuTensorMapReplaceAddress(d.CUtensorMap(), buf)) == E.CUDA_ERROR_INVALID_VALUE  # never encoded


def test_im2col_maps_check_corners_and_pixels(cuda):
    d = cuda.d
    E = d.CUresult
    buf = cuda.alloc(8 * 8 * 8 * 16 * 2)
    T = d.CUtensorMapDataType
    u32, u64 = d.cuuint32_t, d.cuuint64_t
    args = lambda lower, channels: (T.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, u32(4), buf, [u64(x) for x in (16, 8, 8, 8)],
                                    [u64(x) for x in (32, 256, 2048)], lower, [0, 0], u32(channels), u32(16),
                                    [u32(1)] * 4,
                                    d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
                                    d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                    d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    cuda.ok(d.cuTensorMapEncodeIm2col(*args([-1, -1], 16)))
    assert cuda.err(d.cuTensorMapEncodeIm2col(*args([-129, 0], 16))) == E.CUDA_ERROR_INVALID_VALUE  # rank 4: 8 bits
    assert cuda.err(d.cuTensorMapEncodeIm2col(*args([0, 0], 257))) == E.CUDA_ERROR_INVALID_VALUE   # channels past 256


REPLACE = """.version 8.3
.target sm_90a
.address_size 64
.visible .entry replace(.param .u64 map, .param .u64 addr)
{
.reg .b64 %rd<4>;
ld.param.u64 %rd1, [map];
ld.param.u64 %rd2, [addr];
tensormap.replace.tile.global_address.global.b1024.b64 [%rd1], %rd2;
tensormap.replace.tile.rank.global.b1024.b32 [%rd1], 2;
tensormap.replace.tile.box_dim.global.b1024.b32 [%rd1], 2, 4;
tensormap.replace.tile.global_dim.global.b1024.b32 [%rd1], 2, 16;
tensormap.replace.tile.global_stride.global.b1024.b64 [%rd1], 1, 8192;
tensormap.replace.tile.element_stride.global.b1024.b32 [%rd1], 2, 1;
ret;
}
"""


def test_tensormap_replace_in_a_kernel_gives_the_map_the_driver_encodes(cuda):
    """tensormap.replace (numba-cuda's test_device_arch_specific): a 2-D map changed on the device into a 3-D one
    holds what cuTensorMapEncodeTiled writes for the 3-D map (PTX's .rank is the rank minus one)."""
    d = cuda.d
    buf = cuda.alloc(64 * 32 * 16 * 4)
    before = cuda.ok(_tiled(d, buf))
    want = cuda.ok(_tiled(d, buf + 256, dims=(64, 32, 16), strides=(256, 8192), box=(16, 8, 4)))
    dmap = cuda.alloc(128)
    cuda.ok(d.cuMemcpyHtoD(dmap, before.getPtr(), 128))
    f = cuda.ok(d.cuModuleGetFunction(cuda.ok(d.cuModuleLoadData(REPLACE.encode() + b"\0")), b"replace"))
    cuda.launch(f, (1,), (1,), dmap, buf + 256)
    after = d.CUtensorMap()
    cuda.ok(d.cuMemcpyDtoH(after.getPtr(), dmap, 128))
    assert [int(x) for x in after.opaque] == [int(x) for x in want.opaque]
    assert [int(x) for x in before.opaque] != [int(x) for x in want.opaque]
