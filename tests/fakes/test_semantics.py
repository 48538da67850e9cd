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


def test_kernel_parameters_need_a_current_context(cuda):
    """cuda.core's test_num_args_error_handling: with no current context the H200 refuses cuKernelGetParamInfo."""
    d = cuda.d
    lib = cuda.ok(d.cuLibraryLoadData(cuda.ptx(KERNEL), [], [], 0, [], [], 0))
    kernel = cuda.ok(d.cuLibraryGetKernel(lib, b"touch"))
    assert cuda.ok(d.cuKernelGetParamInfo(kernel, 0)) == (0, 8)
    err, *_ = _in_thread_without_context(lambda: d.cuKernelGetParamInfo(kernel, 0))
    assert err == d.CUresult.CUDA_ERROR_INVALID_CONTEXT
    cuda.ok(d.cuLibraryUnload(lib))


def _graph_of(cuda, *kinds):
    """A graph of one kernel node, then an empty node when kinds asks for it."""
    d = cuda.d
    g = cuda.ok(d.cuGraphCreate(0))
    p = d.CUDA_KERNEL_NODE_PARAMS()
    p.func = cuda.kernel(KERNEL, "touch")
    p.gridDimX = p.gridDimY = p.gridDimZ = p.blockDimY = p.blockDimZ = 1
    p.blockDimX = 32
    ptrs, boxes = cuda.args(cuda.poisoned(np.zeros(32, np.uint32)))
    p.kernelParams = ptrs.ctypes.data
    cuda.ok(d.cuGraphAddKernelNode(g, None, 0, p))
    empty = cuda.ok(d.cuGraphAddEmptyNode(g, None, 0)) if "empty" in kinds else None
    return g, empty, (ptrs, boxes, p)


def test_a_kernel_only_graph_instantiates_for_device_launch_and_runs_from_the_host(cuda):
    """cuda.core's test_instantiate_and_execute_kernel_device_launch and test_graph_complete_options."""
    d = cuda.d
    g, _, keep = _graph_of(cuda)
    flags = d.CUgraphInstantiate_flags.CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH
    x = cuda.ok(d.cuGraphInstantiate(g, flags))
    stream = cuda.ok(d.cuStreamCreate(0))
    cuda.ok(d.cuGraphUpload(x, stream))
    cuda.ok(d.cuGraphLaunch(x, stream))
    cuda.ok(d.cuStreamSynchronize(stream))
    cuda.ok(d.cuGraphExecDestroy(x))
    cuda.ok(d.cuGraphDestroy(g))
    cuda.ok(d.cuStreamDestroy(stream))


def test_a_device_launch_graph_refuses_nodes_other_than_kernels_and_copies(cuda):
    d = cuda.d
    g, empty, keep = _graph_of(cuda, "empty")
    flags = d.CUgraphInstantiate_flags.CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH
    assert cuda.err(d.cuGraphInstantiate(g, flags)) == d.CUresult.CUDA_ERROR_INVALID_VALUE
    params = d.CUDA_GRAPH_INSTANTIATE_PARAMS()
    params.flags = flags
    assert cuda.err(d.cuGraphInstantiateWithParams(g, params)) == d.CUresult.CUDA_ERROR_INVALID_VALUE
    result = d.CUgraphInstantiateResult.CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED
    assert params.result_out == result and int(params.hErrNode_out) == int(empty)
    cuda.ok(d.cuGraphDestroy(g))
