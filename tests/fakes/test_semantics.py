"""Driver semantics the fake shares with a real driver, where clients noticed a difference (issue 15)."""

import ctypes
import threading

import numpy as np

KERNEL = r'''
extern "C" __global__ void touch(unsigned* p) { p[threadIdx.x] = threadIdx.x + 1; }
'''


def _in_thread_without_context(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def test_library_loads_without_a_current_context_and_runs_in_one(cuda):
    d = cuda.d
    ptx = cuda.ptx(KERNEL)
    err, lib = _in_thread_without_context(lambda: d.cuLibraryLoadData(ptx, [], [], 0, [], [], 0))
    assert err == d.CUresult.CUDA_SUCCESS
    kernel = cuda.ok(d.cuLibraryGetKernel(lib, b"touch"))
    f = cuda.ok(d.cuKernelGetFunction(kernel))
    p = cuda.poisoned(np.zeros(32, np.uint32))
    cuda.launch(f, (1,), (32,), p)
    assert list(cuda.download(p, np.zeros(32, np.uint32))) == list(range(1, 33))
    cuda.ok(d.cuLibraryUnload(lib))


def test_available_dynamic_shared_memory_respects_the_per_block_limit(cuda):
    d = cuda.d
    f = cuda.kernel(KERNEL, "touch")
    assert cuda.ok(d.cuOccupancyAvailableDynamicSMemPerBlock(f, 1, 128)) == 48 * 1024
    assert cuda.ok(d.cuOccupancyAvailableDynamicSMemPerBlock(f, 16, 128)) == 233472 // 16
    attr = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    cuda.ok(d.cuFuncSetAttribute(f, attr, 100000))  # opted in: the block may have more
    assert cuda.ok(d.cuOccupancyAvailableDynamicSMemPerBlock(f, 1, 128)) == 100000


def test_cluster_occupancy_says_what_the_fake_can_launch(cuda):
    d = cuda.d
    f = cuda.kernel(KERNEL, "touch")
    config = d.CUlaunchConfig()
    config.gridDimX = config.gridDimY = config.gridDimZ = 1
    config.blockDimX, config.blockDimY, config.blockDimZ = 128, 1, 1
    sms = cuda.ok(d.cuDeviceGetAttribute(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0))
    per_sm = cuda.ok(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, 128, 0))
    assert per_sm == 16  # 2048 threads an SM, 128 a block
    assert cuda.ok(d.cuOccupancyMaxActiveClusters(f, config)) == sms * per_sm  # a cluster of one block
    assert cuda.ok(d.cuOccupancyMaxPotentialClusterSize(f, config)) == 1  # larger clusters do not launch here
    attr = d.CUlaunchAttribute()
    attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = 2, 1, 1
    config.attrs, config.numAttrs = [attr], 1
    assert cuda.ok(d.cuOccupancyMaxActiveClusters(f, config)) == 0


def test_zero_byte_stream_ordered_allocations_succeed(cuda):
    d = cuda.d
    s = cuda.ok(d.cuStreamCreate(0))
    pool = cuda.ok(d.cuDeviceGetDefaultMemPool(0))
    before = cuda.control.live_allocations()
    a = cuda.ok(d.cuMemAllocAsync(0, s))
    b = cuda.ok(d.cuMemAllocFromPoolAsync(0, pool, s))
    assert int(a) == 0 and int(b) == 0
    cuda.ok(d.cuMemFreeAsync(a, s))
    cuda.ok(d.cuStreamSynchronize(s))
    assert cuda.control.live_allocations() == before
    cuda.ok(d.cuStreamDestroy(s))


def test_function_and_kernel_names(cuda):
    d = cuda.d
    ptx = cuda.ptx(KERNEL)
    lib = cuda.ok(d.cuLibraryLoadData(ptx, [], [], 0, [], [], 0))
    kernel = cuda.ok(d.cuLibraryGetKernel(lib, b"touch"))
    assert cuda.ok(d.cuKernelGetName(kernel)) == b"touch"
    f = cuda.ok(d.cuKernelGetFunction(kernel))
    assert cuda.ok(d.cuFuncGetName(f)) == b"touch"
    lib_c = ctypes.CDLL("libcuda.so.1")
    name = ctypes.c_char_p()
    for entry in ("cuFuncGetName", "cuKernelGetName"):
        fn = getattr(lib_c, entry)
        fn.restype = ctypes.c_int
        assert fn(ctypes.byref(name), None) == 1  # NULL handle: CUDA_ERROR_INVALID_VALUE
        assert fn(ctypes.byref(name), ctypes.c_void_p(0xDEAD0000)) == 400  # forged: INVALID_HANDLE
    cuda.ok(d.cuLibraryUnload(lib))


def test_driver_version_is_not_below_nvrtc(cuda):
    version = cuda.ok(cuda.d.cuDriverGetVersion())
    err, major, minor = cuda.nvrtc.nvrtcVersion()
    assert version >= 13050
    assert version >= major * 1000 + minor * 10
