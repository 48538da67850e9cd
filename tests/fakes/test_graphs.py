"""Graphs and stream capture on the fake, through cuda.bindings: nodes of every kind run in dependency
order with real values checked, executable graphs take new parameters, capture records instead of running."""

import ctypes
import threading

import numpy as np
import pytest

SAXPY = r'''
extern "C" __global__ void saxpy(const float* x, float* y, float a, unsigned n)
{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }
extern "C" __global__ void scale(float* y, float a, unsigned n)
{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] *= a; }
'''
N = 256
HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@pytest.fixture
def saxpy(cuda):
    mod = cuda.module(SAXPY)
    return {name: cuda.ok(cuda.d.cuModuleGetFunction(mod, name.encode())) for name in ("saxpy", "scale")}


def _kernel_params(d, func, *values, grid=N // 64, block=64):
    ptrs, boxes = _args(*values)
    p = d.CUDA_KERNEL_NODE_PARAMS()
    p.func = func
    p.gridDimX, p.gridDimY, p.gridDimZ = grid, 1, 1
    p.blockDimX, p.blockDimY, p.blockDimZ = block, 1, 1
    p.sharedMemBytes = 0
    p.kernelParams = ptrs.ctypes.data
    return p, (ptrs, boxes)


def _args(*values):
    boxes = [np.array([v], np.uint64) if isinstance(v, int) else np.array([v]) for v in values]
    return np.array([b.ctypes.data for b in boxes], np.uint64), boxes


def _memset_params(d, dst, value, count):
    p = d.CUDA_MEMSET_NODE_PARAMS()
    p.dst, p.value, p.elementSize, p.width, p.height, p.pitch = dst, value, 4, count, 1, 0
    return p


def _memcpy_dtoh_params(d, host: np.ndarray, src):
    p = d.CUDA_MEMCPY3D()
    p.srcMemoryType = d.CUmemorytype.CU_MEMORYTYPE_DEVICE
    p.srcDevice = src
    p.dstMemoryType = d.CUmemorytype.CU_MEMORYTYPE_HOST
    p.dstHost = host.ctypes.data
    p.WidthInBytes, p.Height, p.Depth = host.nbytes, 1, 1
    return p


def _bits(value: float) -> int:
    return int(np.array([value], np.float32).view(np.uint32)[0])


def test_explicit_graph_runs_in_order_and_takes_new_parameters(cuda, saxpy, rng):
    d = cuda.d
    x = rng.random(N, dtype=np.float32)
    dx, dy = cuda.upload(x), cuda.alloc(4 * N)
    out = np.full(N, np.nan, np.float32)
    calls = []
    host_fn = HOST_FN(lambda _: calls.append(out.copy()))  # runs after the copy: sees the result
    s = cuda.ok(d.cuStreamCreate(1))
    done = cuda.ok(d.cuEventCreate(0))

    g = cuda.ok(d.cuGraphCreate(0))
    fill = cuda.ok(d.cuGraphAddMemsetNode(g, None, 0, _memset_params(d, dy, _bits(1.0), N), cuda.ctx))
    kp, keep = _kernel_params(d, saxpy["saxpy"], dx, dy, np.float32(2.0), np.uint32(N))
    kernel = cuda.ok(d.cuGraphAddKernelNode(g, [fill], 1, kp))
    copy = cuda.ok(d.cuGraphAddMemcpyNode(g, [kernel], 1, _memcpy_dtoh_params(d, out, dy), cuda.ctx))
    hp = d.CUDA_HOST_NODE_PARAMS()
    hp.fn = ctypes.cast(host_fn, ctypes.c_void_p).value
    host = cuda.ok(d.cuGraphAddHostNode(g, [copy], 1, hp))
    cuda.ok(d.cuGraphAddEventRecordNode(g, [host], 1, done))
    assert cuda.ok(d.cuGraphGetNodes(g, 0))[1] == 5
    assert cuda.ok(d.cuGraphNodeGetType(kernel)) == d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL

    exe = cuda.ok(d.cuGraphInstantiate(g, 0))
    for _ in range(2):  # the memset node resets y: every launch gives 2x + 1
        cuda.ok(d.cuGraphLaunch(exe, s))
    cuda.ok(d.cuEventSynchronize(done))
    cuda.ok(d.cuStreamSynchronize(s))
    np.testing.assert_allclose(out, 2 * x + 1, rtol=1e-6)
    assert len(calls) == 2 and np.allclose(calls[0], 2 * x + 1)

    kp3, keep3 = _kernel_params(d, saxpy["saxpy"], dx, dy, np.float32(3.0), np.uint32(N))
    cuda.ok(d.cuGraphExecKernelNodeSetParams(exe, kernel, kp3))
    out[:] = np.nan
    cuda.ok(d.cuGraphLaunch(exe, s))
    cuda.ok(d.cuStreamSynchronize(s))
    np.testing.assert_allclose(out, 3 * x + 1, rtol=1e-6)

    # an update from a graph of the same shape takes all of its parameters (here: the fill value)
    g2 = cuda.ok(d.cuGraphCreate(0))
    f2 = cuda.ok(d.cuGraphAddMemsetNode(g2, None, 0, _memset_params(d, dy, _bits(10.0), N), cuda.ctx))
    k2 = cuda.ok(d.cuGraphAddKernelNode(g2, [f2], 1, kp))
    c2 = cuda.ok(d.cuGraphAddMemcpyNode(g2, [k2], 1, _memcpy_dtoh_params(d, out, dy), cuda.ctx))
    h2 = cuda.ok(d.cuGraphAddHostNode(g2, [c2], 1, hp))
    cuda.ok(d.cuGraphAddEventRecordNode(g2, [h2], 1, done))
    cuda.ok(d.cuGraphExecUpdate(exe, g2))
    cuda.ok(d.cuGraphLaunch(exe, s))
    cuda.ok(d.cuStreamSynchronize(s))
    np.testing.assert_allclose(out, 2 * x + 10, rtol=1e-6)

    other = cuda.ok(d.cuGraphCreate(0))
    cuda.ok(d.cuGraphAddMemsetNode(other, None, 0, _memset_params(d, dy, 0, N), cuda.ctx))
    assert cuda.err(d.cuGraphExecUpdate(exe, other)) == d.CUresult.CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
    info = (ctypes.c_int * 6)()  # cuda.bindings drops the result info on failure: read it through ctypes
    update = ctypes.CDLL("libcuda.so.1").cuGraphExecUpdate_v2
    assert update(ctypes.c_void_p(int(exe)), ctypes.c_void_p(int(other)), info) == 910
    assert info[0] == d.CUgraphExecUpdateResult.CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED

    # the executable graph is a copy: destroying the graphs leaves it runnable
    for graph in (g, g2, other):
        cuda.ok(d.cuGraphDestroy(graph))
    out[:] = np.nan
    cuda.ok(d.cuGraphLaunch(exe, s))
    cuda.ok(d.cuStreamSynchronize(s))
    np.testing.assert_allclose(out, 2 * x + 10, rtol=1e-6)
    cuda.ok(d.cuGraphExecDestroy(exe))
    assert cuda.err(d.cuGraphLaunch(exe, s)) == d.CUresult.CUDA_ERROR_INVALID_HANDLE
    cuda.ok(d.cuEventDestroy(done))
    cuda.ok(d.cuStreamDestroy(s))


def test_child_graph_empty_node_and_event_wait(cuda, saxpy, rng):
    d = cuda.d
    y0 = rng.random(N, dtype=np.float32)
    dy = cuda.upload(y0)
    kp, keep = _kernel_params(d, saxpy["scale"], dy, np.float32(2.0), np.uint32(N))
    child = cuda.ok(d.cuGraphCreate(0))
    first = cuda.ok(d.cuGraphAddKernelNode(child, None, 0, kp))
    cuda.ok(d.cuGraphAddKernelNode(child, [first], 1, kp))  # x4 in the child
    ready = cuda.ok(d.cuEventCreate(0))
    g = cuda.ok(d.cuGraphCreate(0))
    wait = cuda.ok(d.cuGraphAddEventWaitNode(g, None, 0, ready))
    join = cuda.ok(d.cuGraphAddEmptyNode(g, [wait], 1))
    node = cuda.ok(d.cuGraphAddChildGraphNode(g, [join], 1, child))
    cuda.ok(d.cuGraphAddKernelNode(g, [node], 1, kp))  # x8 in all
    cuda.ok(d.cuGraphDestroy(child))  # the node holds its own copy
    exe = cuda.ok(d.cuGraphInstantiate(g, 0))
    s = cuda.ok(d.cuStreamCreate(1))
    cuda.ok(d.cuEventRecord(ready, s))
    cuda.ok(d.cuGraphLaunch(exe, s))
    cuda.ok(d.cuStreamSynchronize(s))
    np.testing.assert_allclose(cuda.download(dy, y0), 8 * y0, rtol=1e-6)
    cuda.ok(d.cuGraphExecDestroy(exe))
    cuda.ok(d.cuGraphDestroy(g))
    cuda.ok(d.cuStreamDestroy(s))


def test_stream_capture_records_work_across_a_fork_and_join(cuda, saxpy, rng):
    d = cuda.d
    S = d.CUstreamCaptureStatus
    x = rng.random(N, dtype=np.float32)
    dx, dy, dz = cuda.upload(x), cuda.alloc(4 * N), cuda.alloc(4 * N)
    cuda.ok(d.cuMemsetD32(dz, _bits(-1.0), N))
    s, side = cuda.ok(d.cuStreamCreate(1)), cuda.ok(d.cuStreamCreate(1))
    fork, joined = cuda.ok(d.cuEventCreate(0)), cuda.ok(d.cuEventCreate(0))
    ptrs, boxes = _args(dx, dy, np.float32(2.0), np.uint32(N))
    sptrs, sboxes = _args(dz, np.float32(3.0), np.uint32(N))

    cuda.ok(d.cuStreamBeginCapture(s, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    assert cuda.ok(d.cuStreamIsCapturing(s)) == S.CU_STREAM_CAPTURE_STATUS_ACTIVE
    cuda.ok(d.cuMemsetD32Async(dy, _bits(1.0), N, s))
    cuda.ok(d.cuLaunchKernel(saxpy["saxpy"], N // 64, 1, 1, 64, 1, 1, 0, s, ptrs.ctypes.data, 0))
    cuda.ok(d.cuEventRecord(fork, s))
    cuda.ok(d.cuStreamWaitEvent(side, fork, 0))  # side joins the capture after the kernel
    assert cuda.ok(d.cuStreamIsCapturing(side)) == S.CU_STREAM_CAPTURE_STATUS_ACTIVE
    cuda.ok(d.cuMemcpyDtoDAsync(dz, dy, 4 * N, side))
    cuda.ok(d.cuLaunchKernel(saxpy["scale"], N // 64, 1, 1, 64, 1, 1, 0, side, sptrs.ctypes.data, 0))
    cuda.ok(d.cuEventRecord(joined, side))
    cuda.ok(d.cuStreamWaitEvent(s, joined, 0))
    info = cuda.ok(d.cuStreamGetCaptureInfo(s))  # status, id, graph, dependencies, [edge data,] count
    assert info[0] == S.CU_STREAM_CAPTURE_STATUS_ACTIVE and int(info[1]) > 0
    assert info[-1] == 2 and len(info[3]) == 2  # its own last node (the kernel) and the side stream's
    g = cuda.ok(d.cuStreamEndCapture(s))
    assert cuda.ok(d.cuStreamIsCapturing(side)) == S.CU_STREAM_CAPTURE_STATUS_NONE
    assert cuda.ok(d.cuGraphGetNodes(g, 0))[1] == 4

    assert np.all(cuda.download(dz, x) == -1.0)  # captured, not run
    exe = cuda.ok(d.cuGraphInstantiate(g, 0))
    cuda.ok(d.cuGraphLaunch(exe, s))
    cuda.ok(d.cuStreamSynchronize(s))
    np.testing.assert_allclose(cuda.download(dz, x), 3 * (2 * x + 1), rtol=1e-6)
    np.testing.assert_allclose(cuda.download(dy, x), 2 * x + 1, rtol=1e-6)
    cuda.ok(d.cuGraphExecDestroy(exe))
    cuda.ok(d.cuGraphDestroy(g))
    for h in (fork, joined):
        cuda.ok(d.cuEventDestroy(h))
    for h in (s, side):
        cuda.ok(d.cuStreamDestroy(h))


def test_capture_errors(cuda, saxpy):
    d = cuda.d
    E = d.CUresult
    dy = cuda.alloc(4 * N)
    s, side = cuda.ok(d.cuStreamCreate(1)), cuda.ok(d.cuStreamCreate(1))
    fork = cuda.ok(d.cuEventCreate(0))
    mode = d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    assert cuda.err(d.cuStreamBeginCapture(0, mode)) == E.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED  # legacy stream
    assert cuda.err(d.cuStreamEndCapture(s)) == E.CUDA_ERROR_ILLEGAL_STATE

    # a fork that never joins back
    cuda.ok(d.cuStreamBeginCapture(s, mode))
    assert cuda.err(d.cuStreamBeginCapture(s, mode)) == E.CUDA_ERROR_ILLEGAL_STATE
    cuda.ok(d.cuEventRecord(fork, s))
    cuda.ok(d.cuStreamWaitEvent(side, fork, 0))
    cuda.ok(d.cuMemsetD32Async(dy, 0, N, side))
    assert cuda.err(d.cuStreamEndCapture(side)) == E.CUDA_ERROR_STREAM_CAPTURE_UNMATCHED
    assert cuda.err(d.cuStreamEndCapture(s)) == E.CUDA_ERROR_STREAM_CAPTURE_UNJOINED

    # synchronizing a capturing stream invalidates the capture
    cuda.ok(d.cuStreamBeginCapture(s, mode))
    cuda.ok(d.cuMemsetD32Async(dy, 0, N, s))
    assert cuda.err(d.cuStreamSynchronize(s)) == E.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    assert cuda.ok(d.cuStreamIsCapturing(s)) == d.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_INVALIDATED
    assert cuda.err(d.cuMemsetD32Async(dy, 0, N, s)) == E.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    assert cuda.err(d.cuStreamEndCapture(s)) == E.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    assert cuda.ok(d.cuStreamIsCapturing(s)) == d.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
    cuda.ok(d.cuStreamSynchronize(s))  # usable again

    # so does synchronizing its context (the H200 answers so, also in relaxed mode); no capture: it waits
    cuda.ok(d.cuStreamBeginCapture(s, mode))
    assert cuda.err(d.cuCtxSynchronize()) == E.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    assert cuda.ok(d.cuStreamIsCapturing(s)) == d.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_INVALIDATED
    assert cuda.err(d.cuStreamEndCapture(s)) == E.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    cuda.ok(d.cuCtxSynchronize())
    cuda.ok(d.cuEventDestroy(fork))
    for h in (s, side):
        cuda.ok(d.cuStreamDestroy(h))


def test_user_objects_live_as_long_as_their_last_reference(cuda):
    d = cuda.d
    destroyed = []
    destructor = HOST_FN(lambda ptr: destroyed.append(ptr))
    obj = cuda.ok(d.cuUserObjectCreate(0x1234, ctypes.cast(destructor, ctypes.c_void_p).value, 1, d.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC))
    g = cuda.ok(d.cuGraphCreate(0))
    cuda.ok(d.cuGraphAddEmptyNode(g, None, 0))
    cuda.ok(d.cuGraphRetainUserObject(g, obj, 1, d.CUuserObjectRetain_flags.CU_GRAPH_USER_OBJECT_MOVE))
    exe = cuda.ok(d.cuGraphInstantiate(g, 0))  # the executable graph holds its own reference
    cuda.ok(d.cuGraphDestroy(g))
    assert destroyed == []
    cuda.ok(d.cuGraphExecDestroy(exe))
    assert destroyed == [0x1234]
    assert cuda.err(d.cuUserObjectRetain(obj, 1)) == d.CUresult.CUDA_ERROR_INVALID_HANDLE


def test_an_update_hands_the_executable_graph_the_new_graphs_user_objects(cuda):
    d = cuda.d
    destroyed = []
    destructor = HOST_FN(lambda ptr: destroyed.append(ptr))
    fn = ctypes.cast(destructor, ctypes.c_void_p).value
    flags = d.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC
    move = d.CUuserObjectRetain_flags.CU_GRAPH_USER_OBJECT_MOVE
    graphs = []
    for tag in (0x01D, 0x0E3):
        g = cuda.ok(d.cuGraphCreate(0))
        cuda.ok(d.cuGraphAddEmptyNode(g, None, 0))
        cuda.ok(d.cuGraphRetainUserObject(g, cuda.ok(d.cuUserObjectCreate(tag, fn, 1, flags)), 1, move))
        graphs.append(g)
    exe = cuda.ok(d.cuGraphInstantiate(graphs[0], 0))
    cuda.ok(d.cuGraphExecUpdate(exe, graphs[1]))
    for g in graphs:
        cuda.ok(d.cuGraphDestroy(g))
    assert destroyed == [0x01D]  # the old object went with its graph; the new one lives in the executable graph
    cuda.ok(d.cuGraphExecDestroy(exe))
    assert destroyed == [0x01D, 0x0E3]


def test_graph_queries_clone_and_node_removal(cuda):
    d = cuda.d
    g = cuda.ok(d.cuGraphCreate(0))
    a = cuda.ok(d.cuGraphAddEmptyNode(g, None, 0))
    b = cuda.ok(d.cuGraphAddEmptyNode(g, [a], 1))
    c = cuda.ok(d.cuGraphAddEmptyNode(g, [a], 1))
    edges = cuda.ok(d.cuGraphGetEdges(g, 2))
    assert [(int(x), int(y)) for x, y in zip(edges[0], edges[1])] == [(int(a), int(b)), (int(a), int(c))]
    assert [int(n) for n in cuda.ok(d.cuGraphNodeGetDependencies(b, 1))[0]] == [int(a)]
    assert {int(n) for n in cuda.ok(d.cuGraphNodeGetDependentNodes(a, 2))[0]} == {int(b), int(c)}
    assert cuda.ok(d.cuGraphNodeGetDependentNodes(a, 0))[-1] == 2  # counting only

    clone = cuda.ok(d.cuGraphClone(g))
    twin = cuda.ok(d.cuGraphNodeFindInClone(c, clone))
    assert int(twin) != int(c) and [int(n) for n in cuda.ok(d.cuGraphNodeGetDependencies(twin, 1))[0]] != [int(a)]
    assert cuda.err(d.cuGraphNodeFindInClone(c, g)) == d.CUresult.CUDA_ERROR_INVALID_VALUE  # g is no clone

    cuda.ok(d.cuGraphDestroyNode(b))
    assert cuda.ok(d.cuGraphGetNodes(g, 0))[1] == 2 and cuda.ok(d.cuGraphGetEdges(g, 0))[-1] == 1
    assert cuda.err(d.cuGraphNodeGetType(b)) == d.CUresult.CUDA_ERROR_INVALID_HANDLE
    assert cuda.ok(d.cuGraphGetNodes(clone, 0))[1] == 3  # the clone is its own graph

    parent = cuda.ok(d.cuGraphCreate(0))
    node = cuda.ok(d.cuGraphAddChildGraphNode(parent, None, 0, g))
    embedded = cuda.ok(d.cuGraphChildGraphNodeGetGraph(node))
    assert int(embedded) != int(g) and cuda.ok(d.cuGraphGetNodes(embedded, 0))[1] == 2
    for graph in (g, clone, parent):
        cuda.ok(d.cuGraphDestroy(graph))


def test_destroying_an_executable_graph_with_queued_launches_keeps_its_objects_until_they_are_done(cuda):
    d = cuda.d
    gate, ran, destroyed = threading.Event(), [], []
    host_fn = HOST_FN(lambda _: (gate.wait(10), ran.append(1)))
    destructor = HOST_FN(lambda ptr: destroyed.append(ptr))
    g = cuda.ok(d.cuGraphCreate(0))
    hp = d.CUDA_HOST_NODE_PARAMS()
    hp.fn = ctypes.cast(host_fn, ctypes.c_void_p).value
    cuda.ok(d.cuGraphAddHostNode(g, None, 0, hp))
    obj = cuda.ok(d.cuUserObjectCreate(7, ctypes.cast(destructor, ctypes.c_void_p).value, 1,
                                       d.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC))
    cuda.ok(d.cuGraphRetainUserObject(g, obj, 1, d.CUuserObjectRetain_flags.CU_GRAPH_USER_OBJECT_MOVE))
    exe = cuda.ok(d.cuGraphInstantiate(g, 0))
    cuda.ok(d.cuGraphDestroy(g))
    s = cuda.ok(d.cuStreamCreate(1))
    cuda.ok(d.cuGraphLaunch(exe, s))  # the host node waits for the gate
    cuda.ok(d.cuGraphExecDestroy(exe))
    assert destroyed == [] and ran == []  # still queued: its user object lives
    gate.set()
    cuda.ok(d.cuStreamSynchronize(s))
    assert ran == [1] and destroyed == [7]
    cuda.ok(d.cuStreamDestroy(s))


def _graph_mem(d, attr):
    return int(d.cuDeviceGetGraphMemAttribute(0, attr)[1])


def test_memory_nodes_allocate_at_a_fixed_address_each_launch_and_free_into_the_graph_pool(cuda, saxpy, rng):
    d = cuda.d
    A = d.CUgraphMem_attribute
    x = rng.random(N, dtype=np.float32)
    dx = cuda.upload(x)
    out = np.full(N, np.nan, np.float32)
    s = cuda.ok(d.cuStreamCreate(1))
    cuda.ok(d.cuDeviceGraphMemTrim(0))
    pool_before = _graph_mem(d, A.CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)

    g = cuda.ok(d.cuGraphCreate(0))
    ap = d.CUDA_MEM_ALLOC_NODE_PARAMS()
    ap.poolProps.allocType = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    ap.poolProps.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    ap.poolProps.location.id = 0
    ap.bytesize = 4 * N
    alloc = cuda.ok(d.cuGraphAddMemAllocNode(g, None, 0, ap))
    dy = int(ap.dptr)
    assert dy != 0 and cuda.ok(d.cuGraphNodeGetType(alloc)) == d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_MEM_ALLOC
    got = cuda.ok(d.cuGraphMemAllocNodeGetParams(alloc))
    assert int(got.dptr) == dy and got.bytesize == 4 * N
    assert got.poolProps.location.type == d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    fill = cuda.ok(d.cuGraphAddMemsetNode(g, [alloc], 1, _memset_params(d, dy, _bits(1.0), N), cuda.ctx))
    kp, keep = _kernel_params(d, saxpy["saxpy"], dx, dy, np.float32(2.0), np.uint32(N))
    kernel = cuda.ok(d.cuGraphAddKernelNode(g, [fill], 1, kp))
    copy = cuda.ok(d.cuGraphAddMemcpyNode(g, [kernel], 1, _memcpy_dtoh_params(d, out, dy), cuda.ctx))
    free = cuda.ok(d.cuGraphAddMemFreeNode(g, [copy], 1, dy))
    assert int(cuda.ok(d.cuGraphMemFreeNodeGetParams(free))) == dy
    assert cuda.err(d.cuGraphAddMemFreeNode(g, [free], 1, dx)) == d.CUresult.CUDA_ERROR_INVALID_VALUE  # not graph memory
    # a graph with memory nodes keeps its nodes and edges
    assert cuda.err(d.cuGraphDestroyNode(copy)) == d.CUresult.CUDA_ERROR_NOT_SUPPORTED
    assert cuda.err(d.cuGraphRemoveDependencies(g, [kernel], [copy], None, 1)) == d.CUresult.CUDA_ERROR_NOT_SUPPORTED

    exe = cuda.ok(d.cuGraphInstantiate(g, 0))
    for _ in range(2):  # the free node ends each launch's allocation: the next launch makes it again
        out[:] = np.nan
        cuda.ok(d.cuGraphLaunch(exe, s))
        cuda.ok(d.cuStreamSynchronize(s))
        np.testing.assert_allclose(out, 2 * x + 1, rtol=1e-6)
    # freed: its memory stays in the graph pool until trimmed
    assert _graph_mem(d, A.CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == pool_before + 4 * N
    assert _graph_mem(d, A.CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) >= pool_before + 4 * N
    cuda.ok(d.cuDeviceGraphMemTrim(0))
    assert _graph_mem(d, A.CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == pool_before
    assert cuda.err(d.cuDeviceSetGraphMemAttribute(0, A.CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, d.cuuint64_t(1))) == \
        d.CUresult.CUDA_ERROR_INVALID_VALUE
    cuda.ok(d.cuDeviceSetGraphMemAttribute(0, A.CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, d.cuuint64_t(0)))
    assert _graph_mem(d, A.CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) == pool_before
    cuda.ok(d.cuGraphExecDestroy(exe))
    cuda.ok(d.cuGraphDestroy(g))
    cuda.ok(d.cuStreamDestroy(s))


def test_an_allocation_a_graph_leaves_live_blocks_its_relaunch_unless_auto_free(cuda):
    d = cuda.d
    s = cuda.ok(d.cuStreamCreate(1))
    g = cuda.ok(d.cuGraphCreate(0))
    ap = d.CUDA_MEM_ALLOC_NODE_PARAMS()
    ap.poolProps.allocType = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    ap.poolProps.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    ap.bytesize = 4 * N
    alloc = cuda.ok(d.cuGraphAddMemAllocNode(g, None, 0, ap))
    dy = int(ap.dptr)
    cuda.ok(d.cuGraphAddMemsetNode(g, [alloc], 1, _memset_params(d, dy, 7, N), cuda.ctx))
    exe = cuda.ok(d.cuGraphInstantiate(g, 0))
    cuda.ok(d.cuGraphLaunch(exe, s))
    cuda.ok(d.cuStreamSynchronize(s))
    assert np.all(cuda.download(dy, np.zeros(N, np.uint32)) == 7)  # the graph's output outlives the launch
    assert cuda.err(d.cuGraphLaunch(exe, s)) == d.CUresult.CUDA_ERROR_INVALID_VALUE  # still allocated
    cuda.ok(d.cuMemFreeAsync(dy, s))  # freed in stream order, like any stream-ordered allocation
    cuda.ok(d.cuGraphLaunch(exe, s))
    cuda.ok(d.cuStreamSynchronize(s))
    cuda.ok(d.cuGraphExecDestroy(exe))

    auto = cuda.ok(d.cuGraphInstantiate(g, d.CUgraphInstantiate_flags.CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH))
    for _ in range(2):  # the first launch frees what the earlier one left; the second frees its own
        cuda.ok(d.cuGraphLaunch(auto, s))
    cuda.ok(d.cuStreamSynchronize(s))
    assert np.all(cuda.download(dy, np.zeros(N, np.uint32)) == 7)
    cuda.ok(d.cuMemFree(dy))
    assert cuda.err(d.cuMemFree(dy)) == d.CUresult.CUDA_ERROR_INVALID_VALUE  # freed already
    cuda.ok(d.cuGraphExecDestroy(auto))
    cuda.ok(d.cuGraphDestroy(g))
    cuda.ok(d.cuStreamDestroy(s))


def test_stream_ordered_alloc_and_free_in_a_capture_become_memory_nodes(cuda, saxpy, rng):
    d = cuda.d
    T = d.CUgraphNodeType
    x = rng.random(N, dtype=np.float32)
    dx = cuda.upload(x)
    out = cuda.poisoned(x)
    s = cuda.ok(d.cuStreamCreate(1))
    cuda.ok(d.cuStreamBeginCapture(s, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    tmp = int(cuda.ok(d.cuMemAllocAsync(4 * N, s)))
    assert tmp != 0
    cuda.ok(d.cuMemsetD32Async(tmp, _bits(1.0), N, s))
    ptrs, boxes = _args(dx, tmp, np.float32(2.0), np.uint32(N))
    cuda.ok(d.cuLaunchKernel(saxpy["saxpy"], N // 64, 1, 1, 64, 1, 1, 0, s, ptrs.ctypes.data, 0))
    cuda.ok(d.cuMemcpyDtoDAsync(out, tmp, 4 * N, s))
    cuda.ok(d.cuMemFreeAsync(tmp, s))
    assert cuda.ok(d.cuStreamIsCapturing(s)) == d.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE
    g = cuda.ok(d.cuStreamEndCapture(s))
    nodes, count = cuda.ok(d.cuGraphGetNodes(g, 5))
    kinds = [cuda.ok(d.cuGraphNodeGetType(n)) for n in nodes]
    assert kinds == [T.CU_GRAPH_NODE_TYPE_MEM_ALLOC, T.CU_GRAPH_NODE_TYPE_MEMSET, T.CU_GRAPH_NODE_TYPE_KERNEL,
                     T.CU_GRAPH_NODE_TYPE_MEMCPY, T.CU_GRAPH_NODE_TYPE_MEM_FREE]
    assert int(cuda.ok(d.cuGraphMemAllocNodeGetParams(nodes[0])).dptr) == tmp
    exe = cuda.ok(d.cuGraphInstantiate(g, 0))
    for _ in range(2):
        cuda.ok(d.cuGraphLaunch(exe, s))
    cuda.ok(d.cuStreamSynchronize(s))
    np.testing.assert_allclose(cuda.download(out, x), 2 * x + 1, rtol=1e-6)
    cuda.ok(d.cuGraphExecDestroy(exe))
    cuda.ok(d.cuGraphDestroy(g))
    cuda.ok(d.cuStreamDestroy(s))


def test_work_reaching_a_freed_graph_allocation_faults_instead_of_touching_it(cuda):
    d = cuda.d
    s = cuda.ok(d.cuStreamCreate(1))
    cuda.ok(d.cuStreamBeginCapture(s, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    tmp = int(cuda.ok(d.cuMemAllocAsync(4 * N, s)))
    cuda.ok(d.cuMemFreeAsync(tmp, s))
    g = cuda.ok(d.cuStreamEndCapture(s))
    exe = cuda.ok(d.cuGraphInstantiate(g, 0))
    cuda.ok(d.cuGraphLaunch(exe, s))
    cuda.ok(d.cuStreamSynchronize(s))
    # the address is the graph's (accepted when queued) but unmapped once the free ran: a fault, as on a GPU
    assert cuda.err(d.cuMemsetD32Async(tmp, 0, N, s)) == d.CUresult.CUDA_SUCCESS
    assert cuda.err(d.cuStreamSynchronize(s)) == d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    assert "memset" in cuda.control.last_report() and f"{tmp:x}" in cuda.control.last_report()


COUNTDOWN = r'''
extern "C" __device__ __cudart_builtin__ void CUDARTAPI cudaGraphSetConditional(cudaGraphConditionalHandle, unsigned);
extern "C" __global__ void countdown(cudaGraphConditionalHandle h, int* counter, int* steps)
{ int left = --*counter; ++*steps; cudaGraphSetConditional(h, left > 0 ? 1u : 0u); }
extern "C" __global__ void choose(cudaGraphConditionalHandle h, unsigned value) { cudaGraphSetConditional(h, value); }
extern "C" __global__ void add(int* p, int v) { *p += v; }
'''


def _conditional(d, cuda, g, deps, handle, kind, size):
    p = d.CUgraphNodeParams()
    p.type = d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    p.conditional.handle = handle
    p.conditional.type = kind
    p.conditional.size = size
    p.conditional.ctx = cuda.ctx
    node = cuda.ok(d.cuGraphAddNode(g, deps, None, len(deps), p))
    return node, [p.conditional.phGraph_out[i] for i in range(size)]


def test_conditional_nodes_run_the_body_device_code_chooses(cuda):
    d = cuda.d
    C = d.CUgraphConditionalNodeType
    mod = cuda.module(COUNTDOWN)
    f = {n: cuda.ok(d.cuModuleGetFunction(mod, n.encode())) for n in ("countdown", "choose", "add")}
    cells = np.zeros(4, np.int32)
    dcells = cuda.upload(cells)  # counter, steps, then-or-else result, switch result
    s = cuda.ok(d.cuStreamCreate(1))

    g = cuda.ok(d.cuGraphCreate(0))
    loop = cuda.ok(d.cuGraphConditionalHandleCreate(g, cuda.ctx, 1, d.CU_GRAPH_COND_ASSIGN_DEFAULT))
    pick = cuda.ok(d.cuGraphConditionalHandleCreate(g, cuda.ctx, 0, 0))
    # WHILE: the body counts the counter down to 0, one launch per iteration
    node, (body,) = _conditional(d, cuda, g, [], loop, C.CU_GRAPH_COND_TYPE_WHILE, 1)
    kp, keep = _kernel_params(d, f["countdown"], int(loop), dcells, dcells + 4, grid=1, block=1)
    cuda.ok(d.cuGraphAddKernelNode(body, None, 0, kp))
    # SWITCH on a value a kernel sets: body 2 of 3 adds 300
    kp2, keep2 = _kernel_params(d, f["choose"], int(pick), np.uint32(2), grid=1, block=1)
    chooser = cuda.ok(d.cuGraphAddKernelNode(g, [node], 1, kp2))
    sw, bodies = _conditional(d, cuda, g, [chooser], pick, C.CU_GRAPH_COND_TYPE_SWITCH, 3)
    keeps = []
    for i, b in enumerate(bodies):
        kpb, kb = _kernel_params(d, f["add"], dcells + 12, np.int32(100 * (i + 1)), grid=1, block=1)
        keeps.append(kb)
        cuda.ok(d.cuGraphAddKernelNode(b, None, 0, kpb))
    # IF/ELSE on the same value (2 is nonzero: then adds 10, else would add 20)
    ifelse, (then, other) = _conditional(d, cuda, g, [sw], pick, C.CU_GRAPH_COND_TYPE_IF, 2)
    kt, k1 = _kernel_params(d, f["add"], dcells + 8, np.int32(10), grid=1, block=1)
    ke, k2 = _kernel_params(d, f["add"], dcells + 8, np.int32(20), grid=1, block=1)
    cuda.ok(d.cuGraphAddKernelNode(then, None, 0, kt))
    cuda.ok(d.cuGraphAddKernelNode(other, None, 0, ke))
    other_graph = cuda.ok(d.cuGraphCreate(0))  # a condition serves the graph it was made for only
    p = d.CUgraphNodeParams()
    p.type = d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    p.conditional.handle, p.conditional.type, p.conditional.size = pick, C.CU_GRAPH_COND_TYPE_IF, 1
    assert cuda.err(d.cuGraphAddNode(other_graph, [], None, 0, p)) == d.CUresult.CUDA_ERROR_INVALID_VALUE
    cuda.ok(d.cuGraphDestroy(other_graph))
    got = cuda.ok(d.cuGraphNodeGetParams(sw))
    assert got.type == d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    assert got.conditional.type == C.CU_GRAPH_COND_TYPE_SWITCH and got.conditional.size == 3
    assert int(got.conditional.handle) == int(pick)

    exe = cuda.ok(d.cuGraphInstantiate(g, 0))
    cuda.ok(d.cuMemcpyHtoD(dcells, np.array([5, 0, 0, 0], np.int32), 16))
    cuda.ok(d.cuGraphLaunch(exe, s))
    cuda.ok(d.cuStreamSynchronize(s))
    # the WHILE body ran 5 times (the default 1 enters it; the fifth countdown sets 0)
    assert list(cuda.download(dcells, cells)) == [0, 5, 10, 300]
    # relaunch: ASSIGN_DEFAULT puts 1 back, so the loop runs once more on a counter reset to 2
    cuda.ok(d.cuMemcpyHtoD(dcells, np.array([2, 0, 0, 0], np.int32), 16))
    cuda.ok(d.cuGraphLaunch(exe, s))
    cuda.ok(d.cuStreamSynchronize(s))
    assert list(cuda.download(dcells, cells)) == [0, 2, 10, 300]
    cuda.ok(d.cuGraphExecDestroy(exe))
    cuda.ok(d.cuGraphDestroy(g))
    cuda.ok(d.cuStreamDestroy(s))


def test_a_condition_of_the_top_graph_serves_a_conditional_node_in_a_body(cuda):
    """cuda.core's test_bisection_root (passes on the H200): an if/else in a while loop's body, on a condition
    made for the top graph; the loop counts 3 down, the if/else (chosen by the countdown's own kernel) adds."""
    d = cuda.d
    C = d.CUgraphConditionalNodeType
    mod = cuda.module(COUNTDOWN)
    f = {n: cuda.ok(d.cuModuleGetFunction(mod, n.encode())) for n in ("countdown", "choose", "add")}
    dcells = cuda.upload(np.array([3, 0, 0], np.int32))  # counter, steps, sum
    s = cuda.ok(d.cuStreamCreate(1))
    g = cuda.ok(d.cuGraphCreate(0))
    loop = cuda.ok(d.cuGraphConditionalHandleCreate(g, cuda.ctx, 1, d.CU_GRAPH_COND_ASSIGN_DEFAULT))
    pick = cuda.ok(d.cuGraphConditionalHandleCreate(g, cuda.ctx, 0, 0))
    _, (body,) = _conditional(d, cuda, g, [], loop, C.CU_GRAPH_COND_TYPE_WHILE, 1)
    kp, k0 = _kernel_params(d, f["countdown"], int(loop), dcells, dcells + 4, grid=1, block=1)
    step = cuda.ok(d.cuGraphAddKernelNode(body, None, 0, kp))
    kc, k1 = _kernel_params(d, f["choose"], int(pick), np.uint32(1), grid=1, block=1)
    chooser = cuda.ok(d.cuGraphAddKernelNode(body, [step], 1, kc))
    _, (then, other) = _conditional(d, cuda, body, [chooser], pick, C.CU_GRAPH_COND_TYPE_IF, 2)
    kt, k2 = _kernel_params(d, f["add"], dcells + 8, np.int32(10), grid=1, block=1)
    ke, k3 = _kernel_params(d, f["add"], dcells + 8, np.int32(1), grid=1, block=1)
    cuda.ok(d.cuGraphAddKernelNode(then, None, 0, kt))
    cuda.ok(d.cuGraphAddKernelNode(other, None, 0, ke))
    exe = cuda.ok(d.cuGraphInstantiate(g, 0))
    cuda.ok(d.cuGraphLaunch(exe, s))
    cuda.ok(d.cuStreamSynchronize(s))
    assert list(cuda.download(dcells, np.zeros(3, np.int32))) == [0, 3, 30]
    cuda.ok(d.cuGraphExecDestroy(exe))
    cuda.ok(d.cuGraphDestroy(g))
    cuda.ok(d.cuStreamDestroy(s))


def test_capture_into_a_conditional_body_graph(cuda):
    d = cuda.d
    mod = cuda.module(COUNTDOWN)
    add = cuda.ok(d.cuModuleGetFunction(mod, b"add"))
    choose = cuda.ok(d.cuModuleGetFunction(mod, b"choose"))
    cell = cuda.upload(np.zeros(1, np.int32))
    s, side = cuda.ok(d.cuStreamCreate(1)), cuda.ok(d.cuStreamCreate(1))
    mode = d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    cuda.ok(d.cuStreamBeginCapture(s, mode))
    status, _, graph, deps, *_ , n = cuda.ok(d.cuStreamGetCaptureInfo(s))
    h = cuda.ok(d.cuGraphConditionalHandleCreate(graph, cuda.ctx, 0, 0))
    ptrs, boxes = _args(int(h), np.uint32(1))
    cuda.ok(d.cuLaunchKernel(choose, 1, 1, 1, 1, 1, 1, 0, s, ptrs.ctypes.data, 0))
    status, _, graph, deps, *_ , n = cuda.ok(d.cuStreamGetCaptureInfo(s))
    node, (body,) = _conditional(d, cuda, graph, list(deps), h, d.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_IF, 1)
    cuda.ok(d.cuStreamUpdateCaptureDependencies(s, [node], None, 1,
                                                d.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES))
    cuda.ok(d.cuStreamBeginCaptureToGraph(side, body, None, None, 0, mode))  # the body, by capture
    aptrs, aboxes = _args(cell, np.int32(7))
    cuda.ok(d.cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, side, aptrs.ctypes.data, 0))
    assert int(cuda.ok(d.cuStreamEndCapture(side))) == int(body)
    cuda.ok(d.cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, s, aptrs.ctypes.data, 0))  # after the conditional node
    g = cuda.ok(d.cuStreamEndCapture(s))
    kinds = [cuda.ok(d.cuGraphNodeGetType(x)) for x in cuda.ok(d.cuGraphGetNodes(g, 3))[0]]
    T = d.CUgraphNodeType
    assert kinds == [T.CU_GRAPH_NODE_TYPE_KERNEL, T.CU_GRAPH_NODE_TYPE_CONDITIONAL, T.CU_GRAPH_NODE_TYPE_KERNEL]
    exe = cuda.ok(d.cuGraphInstantiate(g, 0))
    cuda.ok(d.cuGraphLaunch(exe, s))
    cuda.ok(d.cuStreamSynchronize(s))
    assert cuda.download(cell, np.zeros(1, np.int32))[0] == 14  # the body ran (condition 1), then the last kernel
    cuda.ok(d.cuGraphExecDestroy(exe))
    cuda.ok(d.cuGraphDestroy(g))
    for x in (s, side):
        cuda.ok(d.cuStreamDestroy(x))


def test_node_queries_give_back_the_parameters_given(cuda, saxpy):
    d = cuda.d
    dy = cuda.alloc(4 * N)
    g = cuda.ok(d.cuGraphCreate(0))
    kp, keep = _kernel_params(d, saxpy["scale"], dy, np.float32(2.5), np.uint32(N))
    kernel = cuda.ok(d.cuGraphAddKernelNode(g, None, 0, kp))
    got = cuda.ok(d.cuGraphKernelNodeGetParams(kernel))
    assert (got.gridDimX, got.blockDimX, got.sharedMemBytes) == (N // 64, 64, 0)
    assert int(got.func) == int(saxpy["scale"])
    args = ctypes.cast(int(got.kernelParams), ctypes.POINTER(ctypes.c_void_p))  # the node's own copies
    assert ctypes.c_uint64.from_address(args[0]).value == dy
    assert ctypes.c_float.from_address(args[1]).value == 2.5
    assert ctypes.c_uint32.from_address(args[2]).value == N
    fill = cuda.ok(d.cuGraphAddMemsetNode(g, None, 0, _memset_params(d, dy, 77, N), cuda.ctx))
    m = cuda.ok(d.cuGraphMemsetNodeGetParams(fill))
    assert (int(m.dst), m.value, m.elementSize, m.width) == (dy, 77, 4, N)
    host_fn = HOST_FN(lambda _: None)
    hp = d.CUDA_HOST_NODE_PARAMS()
    hp.fn = ctypes.cast(host_fn, ctypes.c_void_p).value
    hp.userData = 1234
    host = cuda.ok(d.cuGraphAddHostNode(g, None, 0, hp))
    h = cuda.ok(d.cuGraphHostNodeGetParams(host))
    assert int(h.fn) == ctypes.cast(host_fn, ctypes.c_void_p).value and int(h.userData) == 1234
    ev = cuda.ok(d.cuEventCreate(0))
    rec = cuda.ok(d.cuGraphAddEventRecordNode(g, None, 0, ev))
    assert int(cuda.ok(d.cuGraphEventRecordNodeGetEvent(rec))) == int(ev)
    assert cuda.err(d.cuGraphEventWaitNodeGetEvent(rec)) == d.CUresult.CUDA_ERROR_INVALID_VALUE  # a record node
    cuda.ok(d.cuGraphDestroy(g))
    cuda.ok(d.cuEventDestroy(ev))


def test_edges_added_after_the_nodes_still_run_in_order(cuda, saxpy, rng, tmp_path):
    d = cuda.d
    y0 = rng.random(N, dtype=np.float32)
    dy = cuda.upload(y0)
    g = cuda.ok(d.cuGraphCreate(0))
    scale, keep = _kernel_params(d, saxpy["scale"], dy, np.float32(3.0), np.uint32(N))
    times = cuda.ok(d.cuGraphAddKernelNode(g, None, 0, scale))  # added first, must run last
    fill = cuda.ok(d.cuGraphAddMemsetNode(g, None, 0, _memset_params(d, dy, _bits(2.0), N), cuda.ctx))
    cuda.ok(d.cuGraphAddDependencies(g, [fill], [times], None, 1))
    assert cuda.err(d.cuGraphAddDependencies(g, [times], [fill], None, 1)) == d.CUresult.CUDA_ERROR_INVALID_VALUE  # cycle
    assert cuda.err(d.cuGraphAddDependencies(g, [fill], [times], None, 1)) == d.CUresult.CUDA_ERROR_INVALID_VALUE  # twice
    from_, to, *_, n = cuda.ok(d.cuGraphGetEdges(g, 1))  # (edge data too, on bindings 12.3+)
    assert n == 1 and int(from_[0]) == int(fill) and int(to[0]) == int(times)
    dot = tmp_path / "g.dot"
    cuda.ok(d.cuGraphDebugDotPrint(g, str(dot).encode(), 0))
    text = dot.read_text()
    assert text.startswith("digraph") and "memset" in text and "->" in text
    exe = cuda.ok(d.cuGraphInstantiate(g, 0))
    s = cuda.ok(d.cuStreamCreate(1))
    cuda.ok(d.cuGraphLaunch(exe, s))
    cuda.ok(d.cuStreamSynchronize(s))
    np.testing.assert_array_equal(cuda.download(dy, y0), np.full(N, 6.0, np.float32))  # fill, then scale
    cuda.ok(d.cuGraphExecDestroy(exe))
    cuda.ok(d.cuGraphRemoveDependencies(g, [fill], [times], None, 1))
    assert cuda.err(d.cuGraphRemoveDependencies(g, [fill], [times], None, 1)) == d.CUresult.CUDA_ERROR_INVALID_VALUE
    assert cuda.ok(d.cuGraphGetEdges(g, 0))[-1] == 0
    cuda.ok(d.cuGraphDestroy(g))
    cuda.ok(d.cuStreamDestroy(s))


def test_a_graph_node_keeps_its_unloaded_modules_kernel_readable_and_refuses_its_launch(cuda):
    """An unloaded module's decoded PTX goes once nothing holds it (issue 23's LIFE-94: it was kept forever); a
    graph node holding one of its kernels holds it: the node's parameters still read back, the graph's launch is
    refused as the module's handles are, and a stale function handle stays refused after another module loads
    (run under ASan by CI: a read of the freed PTX fails there)."""
    d = cuda.d
    mod = cuda.module(SAXPY)
    scale = cuda.ok(d.cuModuleGetFunction(mod, b"scale"))
    dy = cuda.alloc(4 * N)
    g = cuda.ok(d.cuGraphCreate(0))
    kp, keep = _kernel_params(d, scale, dy, np.float32(2.5), np.uint32(N))
    kernel = cuda.ok(d.cuGraphAddKernelNode(g, None, 0, kp))
    exe = cuda.ok(d.cuGraphInstantiate(g, 0))
    clone = cuda.ok(d.cuGraphClone(g))
    cuda.ok(d.cuModuleUnload(mod))
    assert cuda.err(d.cuModuleUnload(mod)) == d.CUresult.CUDA_ERROR_INVALID_HANDLE
    got = cuda.ok(d.cuGraphKernelNodeGetParams(kernel))
    assert int(got.func) == int(scale) and got.gridDimX == N // 64
    s = cuda.ok(d.cuStreamCreate(1))
    assert cuda.err(d.cuGraphLaunch(exe, s)) == d.CUresult.CUDA_ERROR_INVALID_HANDLE
    again = cuda.module(SAXPY)  # may take the freed PTX's memory, never the stale handles
    ptrs, boxes = _args(dy, np.float32(1), np.uint32(1))
    launched = d.cuLaunchKernel(scale, 1, 1, 1, 1, 1, 1, 0, s, ptrs.ctypes.data, 0)
    assert cuda.err(launched) == d.CUresult.CUDA_ERROR_INVALID_HANDLE
    for graph in (g, clone):
        cuda.ok(d.cuGraphDestroy(graph))
    cuda.ok(d.cuGraphExecDestroy(exe))
    cuda.ok(d.cuStreamSynchronize(s))
    cuda.ok(d.cuStreamDestroy(s))
    cuda.ok(d.cuModuleUnload(again))
