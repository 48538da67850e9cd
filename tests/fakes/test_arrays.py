"""CUDA arrays, mipmapped arrays, texture and surface objects on the fake, through cuda.bindings: copies reach
an array's elements at the offsets asked for, levels halve, descriptors come back as given, bad ones fail."""

import numpy as np
import pytest


def _desc3d(d, w, h, depth, fmt, channels, flags=0):
    desc = d.CUDA_ARRAY3D_DESCRIPTOR()
    desc.Width, desc.Height, desc.Depth = w, h, depth
    desc.Format, desc.NumChannels, desc.Flags = fmt, channels, flags
    return desc


def _copy3d(d, w_bytes, h, depth):
    p = d.CUDA_MEMCPY3D()
    p.WidthInBytes, p.Height, p.Depth = w_bytes, h, depth
    return p


def test_a_3d_array_round_trips_through_cuMemcpy3D_with_offsets(cuda, rng):
    d = cuda.d
    F = d.CUarray_format
    W, H, D = 8, 5, 3  # float2 elements
    arr = cuda.ok(d.cuArray3DCreate(_desc3d(d, W, H, D, F.CU_AD_FORMAT_FLOAT, 2)))
    got = cuda.ok(d.cuArray3DGetDescriptor(arr))
    assert (got.Width, got.Height, got.Depth, got.NumChannels) == (W, H, D, 2)
    assert got.Format == F.CU_AD_FORMAT_FLOAT

    src = rng.random((D, H, W, 2), dtype=np.float32)
    up = _copy3d(d, W * 8, H, D)
    up.srcMemoryType, up.srcHost, up.srcPitch, up.srcHeight = d.CUmemorytype.CU_MEMORYTYPE_HOST, src.ctypes.data, W * 8, H
    up.dstMemoryType, up.dstArray = d.CUmemorytype.CU_MEMORYTYPE_ARRAY, arr
    cuda.ok(d.cuMemcpy3D(up))

    # read back a 3 x 2 x 2 box at element (x=4, y=1, z=1) into device memory, then to the host
    box = np.full((2, 2, 3, 2), np.nan, np.float32)
    dbox = cuda.poisoned(box)
    down = _copy3d(d, 3 * 8, 2, 2)
    down.srcMemoryType, down.srcArray = d.CUmemorytype.CU_MEMORYTYPE_ARRAY, arr
    down.srcXInBytes, down.srcY, down.srcZ = 4 * 8, 1, 1
    down.dstMemoryType, down.dstDevice, down.dstPitch, down.dstHeight = \
        d.CUmemorytype.CU_MEMORYTYPE_DEVICE, dbox, 3 * 8, 2
    s = cuda.ok(d.cuStreamCreate(1))
    cuda.ok(d.cuMemcpy3DAsync(down, s))
    cuda.ok(d.cuStreamSynchronize(s))
    np.testing.assert_array_equal(cuda.download(dbox, box), src[1:3, 1:3, 4:7])

    # a box reaching past the array's last slice is refused
    down.srcZ = 2
    assert cuda.err(d.cuMemcpy3D(down)) == d.CUresult.CUDA_ERROR_INVALID_VALUE
    cuda.ok(d.cuArrayDestroy(arr))
    assert cuda.err(d.cuArrayDestroy(arr)) == d.CUresult.CUDA_ERROR_INVALID_HANDLE
    cuda.ok(d.cuStreamDestroy(s))


def test_array_descriptors_are_checked(cuda):
    d = cuda.d
    F = d.CUarray_format
    E = d.CUresult
    assert cuda.err(d.cuArray3DCreate(_desc3d(d, 0, 4, 0, F.CU_AD_FORMAT_FLOAT, 1))) == E.CUDA_ERROR_INVALID_VALUE
    assert cuda.err(d.cuArray3DCreate(_desc3d(d, 4, 4, 0, F.CU_AD_FORMAT_FLOAT, 3))) == E.CUDA_ERROR_INVALID_VALUE
    assert cuda.err(d.cuArray3DCreate(_desc3d(d, 4, 0, 4, F.CU_AD_FORMAT_FLOAT, 1))) == E.CUDA_ERROR_INVALID_VALUE
    assert cuda.err(d.cuArray3DCreate(_desc3d(d, 1 << 20, 0, 0, F.CU_AD_FORMAT_FLOAT, 1))) == E.CUDA_ERROR_INVALID_VALUE
    desc = d.CUDA_ARRAY_DESCRIPTOR()
    desc.Width, desc.Height, desc.Format, desc.NumChannels = 16, 4, F.CU_AD_FORMAT_UNSIGNED_INT16, 4
    arr = cuda.ok(d.cuArrayCreate(desc))
    got = cuda.ok(d.cuArrayGetDescriptor(arr))
    assert (got.Width, got.Height, got.NumChannels, got.Format) == (16, 4, 4, F.CU_AD_FORMAT_UNSIGNED_INT16)
    cuda.ok(d.cuArrayDestroy(arr))


def test_mipmapped_array_levels_halve_each_extent(cuda):
    d = cuda.d
    F = d.CUarray_format
    mip = cuda.ok(d.cuMipmappedArrayCreate(_desc3d(d, 16, 6, 0, F.CU_AD_FORMAT_UNSIGNED_INT8, 4), 5))
    dims = []
    for level in range(5):
        got = cuda.ok(d.cuArray3DGetDescriptor(cuda.ok(d.cuMipmappedArrayGetLevel(mip, level))))
        dims.append((got.Width, got.Height, got.Depth))
    assert dims == [(16, 6, 0), (8, 3, 0), (4, 1, 0), (2, 1, 0), (1, 1, 0)]
    assert cuda.err(d.cuMipmappedArrayGetLevel(mip, 5)) == d.CUresult.CUDA_ERROR_INVALID_VALUE
    level = cuda.ok(d.cuMipmappedArrayGetLevel(mip, 1))
    assert cuda.err(d.cuArrayDestroy(level)) == d.CUresult.CUDA_ERROR_INVALID_VALUE  # owned by the mipmap
    too_many = _desc3d(d, 16, 6, 0, F.CU_AD_FORMAT_UNSIGNED_INT8, 4)
    assert cuda.err(d.cuMipmappedArrayCreate(too_many, 6)) == d.CUresult.CUDA_ERROR_INVALID_VALUE  # 16 has 5
    cuda.ok(d.cuMipmappedArrayDestroy(mip))
    assert cuda.err(d.cuArray3DGetDescriptor(level)) == d.CUresult.CUDA_ERROR_INVALID_HANDLE


def _resource_of_array(d, arr):
    r = d.CUDA_RESOURCE_DESC()
    r.resType = d.CUresourcetype.CU_RESOURCE_TYPE_ARRAY
    r.res.array.hArray = arr
    return r


def test_texture_and_surface_objects_keep_their_descriptors(cuda):
    d = cuda.d
    F = d.CUarray_format
    E = d.CUresult
    plain = cuda.ok(d.cuArray3DCreate(_desc3d(d, 8, 8, 0, F.CU_AD_FORMAT_FLOAT, 1)))
    ldst = cuda.ok(d.cuArray3DCreate(_desc3d(d, 8, 8, 0, F.CU_AD_FORMAT_FLOAT, 1, d.CUDA_ARRAY3D_SURFACE_LDST)))
    tex = d.CUDA_TEXTURE_DESC()
    tex.addressMode = [d.CUaddress_mode.CU_TR_ADDRESS_MODE_CLAMP, d.CUaddress_mode.CU_TR_ADDRESS_MODE_BORDER,
                       d.CUaddress_mode.CU_TR_ADDRESS_MODE_WRAP]
    tex.filterMode = d.CUfilter_mode.CU_TR_FILTER_MODE_LINEAR
    tex.flags = d.CU_TRSF_NORMALIZED_COORDINATES
    tex.borderColor = [0.25, 0.5, 0.75, 1.0]
    t = cuda.ok(d.cuTexObjectCreate(_resource_of_array(d, plain), tex, None))
    assert int(t) != 0
    back = cuda.ok(d.cuTexObjectGetTextureDesc(t))
    assert list(back.addressMode) == list(tex.addressMode) and list(back.borderColor) == [0.25, 0.5, 0.75, 1.0]
    assert int(cuda.ok(d.cuTexObjectGetResourceDesc(t)).res.array.hArray) == int(plain)

    assert cuda.err(d.cuSurfObjectCreate(_resource_of_array(d, plain))) == E.CUDA_ERROR_INVALID_VALUE  # no LDST
    surf = cuda.ok(d.cuSurfObjectCreate(_resource_of_array(d, ldst)))
    assert int(cuda.ok(d.cuSurfObjectGetResourceDesc(surf)).res.array.hArray) == int(ldst)
    assert cuda.err(d.cuTexObjectDestroy(surf)) == E.CUDA_ERROR_INVALID_HANDLE  # a surface is not a texture

    # linear memory: the device pointer must be live and aligned to the texture alignment (512)
    buf = cuda.alloc(4096)
    lin = d.CUDA_RESOURCE_DESC()
    lin.resType = d.CUresourcetype.CU_RESOURCE_TYPE_LINEAR
    lin.res.linear.devPtr, lin.res.linear.format, lin.res.linear.numChannels = buf, F.CU_AD_FORMAT_FLOAT, 1
    lin.res.linear.sizeInBytes = 4096
    t2 = cuda.ok(d.cuTexObjectCreate(lin, tex, None))
    lin.res.linear.devPtr = buf + 4
    assert cuda.err(d.cuTexObjectCreate(lin, tex, None)) == E.CUDA_ERROR_INVALID_VALUE
    lin.res.linear.devPtr, lin.res.linear.sizeInBytes = buf, 8192  # past the allocation
    assert cuda.err(d.cuTexObjectCreate(lin, tex, None)) == E.CUDA_ERROR_INVALID_VALUE

    for h in (t, t2):
        cuda.ok(d.cuTexObjectDestroy(h))
    cuda.ok(d.cuSurfObjectDestroy(surf))
    assert cuda.err(d.cuTexObjectDestroy(t)) == E.CUDA_ERROR_INVALID_HANDLE
    for a in (plain, ldst):
        cuda.ok(d.cuArrayDestroy(a))


def test_a_kernel_reading_a_texture_fails_to_load_naming_the_instruction(cuda, capfd):
    src = r'''
    extern "C" __global__ void read(cudaTextureObject_t t, float* out)
    { out[threadIdx.x] = tex2D<float>(t, threadIdx.x + 0.5f, 0.5f); }
    '''
    ptx = cuda.ptx(src)
    capfd.readouterr()
    assert cuda.err(cuda.d.cuModuleLoadData(ptx)) == cuda.d.CUresult.CUDA_ERROR_INVALID_PTX
    assert "unsupported instruction tex.2d" in capfd.readouterr().err  # named, never run wrong
