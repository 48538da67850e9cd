"""Managed memory on the fake: its attributes, advice and prefetches recorded page by page and reported by the
range attributes, managed pools, and the errors a real driver gives for memory that is not managed."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

PAGE = 4096
CPU, INVALID = -1, -2  # CU_DEVICE_CPU, CU_DEVICE_INVALID


def _loc(d, kind, ident=0):
    loc = d.CUmemLocation()
    loc.type = getattr(d.CUmemLocationType, f"CU_MEM_LOCATION_TYPE_{kind}")
    loc.id = ident
    return loc


def _range(cuda, attr, p, n, size=4):
    d = cuda.d
    value = cuda.ok(d.cuMemRangeGetAttribute(size, getattr(d.CUmem_range_attribute, f"CU_MEM_RANGE_ATTRIBUTE_{attr}"),
                                             p, n))
    return [int(v) for v in value] if isinstance(value, list) else int(value)


@pytest.fixture
def managed(cuda):
    d = cuda.d
    p = int(cuda.ok(d.cuMemAllocManaged(4 * PAGE, d.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL)))
    cuda.allocs.append(p)
    return p


def test_device_reports_concurrent_managed_access(cuda):
    d = cuda.d
    attr = d.CUdevice_attribute
    assert cuda.ok(d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 0)) == 1
    assert cuda.ok(d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 0)) == 1
    assert cuda.ok(d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0)) == 0


def test_is_managed_tells_managed_from_device_memory(cuda, managed):
    d = cuda.d
    is_managed = d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_IS_MANAGED
    assert cuda.ok(d.cuPointerGetAttribute(is_managed, managed + 100)) is True
    assert cuda.ok(d.cuPointerGetAttribute(is_managed, cuda.alloc(64))) is False


def test_advice_is_recorded_per_page(cuda, managed):
    d = cuda.d
    advise = d.CUmem_advise
    assert _range(cuda, "READ_MOSTLY", managed, 4 * PAGE) == 0
    assert _range(cuda, "PREFERRED_LOCATION", managed, 4 * PAGE) == INVALID
    cuda.ok(d.cuMemAdvise(managed + PAGE, PAGE, advise.CU_MEM_ADVISE_SET_READ_MOSTLY, _loc(d, "DEVICE")))
    assert _range(cuda, "READ_MOSTLY", managed + PAGE, PAGE) == 1
    assert _range(cuda, "READ_MOSTLY", managed, 4 * PAGE) == 0  # not every page of the range
    cuda.ok(d.cuMemAdvise(managed, 4 * PAGE, advise.CU_MEM_ADVISE_SET_PREFERRED_LOCATION, _loc(d, "DEVICE")))
    cuda.ok(d.cuMemAdvise(managed, PAGE, advise.CU_MEM_ADVISE_SET_PREFERRED_LOCATION, _loc(d, "HOST")))
    assert _range(cuda, "PREFERRED_LOCATION", managed, PAGE) == CPU
    assert _range(cuda, "PREFERRED_LOCATION", managed + PAGE, 3 * PAGE) == 0
    assert _range(cuda, "PREFERRED_LOCATION", managed, 4 * PAGE) == INVALID  # the pages disagree
    assert _range(cuda, "PREFERRED_LOCATION_TYPE", managed, PAGE) == int(d.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST)
    cuda.ok(d.cuMemAdvise(managed, 4 * PAGE, advise.CU_MEM_ADVISE_SET_ACCESSED_BY, _loc(d, "DEVICE")))
    assert _range(cuda, "ACCESSED_BY", managed, 4 * PAGE, size=12) == [0, INVALID, INVALID]
    cuda.ok(d.cuMemAdvise(managed, PAGE, advise.CU_MEM_ADVISE_UNSET_ACCESSED_BY, _loc(d, "DEVICE")))
    assert _range(cuda, "ACCESSED_BY", managed, 4 * PAGE, size=8) == [INVALID, INVALID]


def test_prefetch_is_recorded_when_its_stream_reaches_it(cuda, managed):
    d = cuda.d
    stream = cuda.ok(d.cuStreamCreate(0))
    gate = threading.Event()  # a host function holds the stream until the test releases it
    hold = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: gate.wait(30))
    cuda.ok(d.cuLaunchHostFunc(stream, d.CUhostFn(ctypes.cast(hold, ctypes.c_void_p).value), 0))
    cuda.ok(d.cuMemPrefetchAsync(managed, 2 * PAGE, _loc(d, "DEVICE"), 0, stream))
    assert _range(cuda, "LAST_PREFETCH_LOCATION", managed, 2 * PAGE) == INVALID  # not reached yet
    gate.set()
    cuda.ok(d.cuStreamSynchronize(stream))
    assert _range(cuda, "LAST_PREFETCH_LOCATION", managed, 2 * PAGE) == 0
    assert _range(cuda, "LAST_PREFETCH_LOCATION", managed, 4 * PAGE) == INVALID
    cuda.ok(d.cuStreamDestroy(stream))


def test_batch_prefetch_sends_each_run_of_ranges_to_its_location(cuda, managed):
    d = cuda.d
    ptrs = [d.CUdeviceptr(managed + i * PAGE) for i in range(4)]
    locs = [_loc(d, "HOST"), _loc(d, "DEVICE")]
    cuda.ok(d.cuMemPrefetchBatchAsync(ptrs, [PAGE] * 4, 4, locs, [0, 3], 2, 0, 0))
    cuda.ok(d.cuCtxSynchronize())
    assert [_range(cuda, "LAST_PREFETCH_LOCATION", p, PAGE) for p in ptrs] == [CPU, CPU, CPU, 0]
    cuda.ok(d.cuMemDiscardAndPrefetchBatchAsync(ptrs[:1], [PAGE], 1, locs[1:], [0], 1, 0, 0))
    cuda.ok(d.cuMemDiscardBatchAsync(ptrs[1:2], [PAGE], 1, 0, 0))
    cuda.ok(d.cuCtxSynchronize())
    assert _range(cuda, "LAST_PREFETCH_LOCATION", ptrs[0], PAGE) == 0
    invalid = d.CUresult.CUDA_ERROR_INVALID_VALUE
    assert cuda.err(d.cuMemPrefetchBatchAsync(ptrs, [PAGE] * 4, 4, locs, [1, 3], 2, 0, 0)) == invalid  # idx[0] != 0
    assert cuda.err(d.cuMemPrefetchBatchAsync(ptrs, [PAGE] * 4, 4, locs, [0, 0], 2, 0, 0)) == invalid
    assert cuda.err(d.cuMemPrefetchBatchAsync(ptrs, [PAGE] * 4, 4, locs[:1], [0], 1, 1, 0)) == invalid  # flags


def test_memory_that_is_not_managed_and_bad_locations_are_refused(cuda, managed):
    d = cuda.d
    invalid = d.CUresult.CUDA_ERROR_INVALID_VALUE
    plain = cuda.alloc(PAGE)
    advise = d.CUmem_advise
    assert cuda.err(d.cuMemAdvise(plain, PAGE, advise.CU_MEM_ADVISE_SET_READ_MOSTLY, _loc(d, "DEVICE"))) == invalid
    assert cuda.err(d.cuMemPrefetchAsync(plain, PAGE, _loc(d, "DEVICE"), 0, 0)) == invalid
    assert cuda.err(d.cuMemRangeGetAttribute(
        4, d.CUmem_range_attribute.CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, plain, PAGE)[0]) == invalid
    assert cuda.err(d.cuMemPrefetchAsync(managed, 5 * PAGE, _loc(d, "DEVICE"), 0, 0)) == invalid  # past its end
    assert cuda.err(d.cuMemPrefetchAsync(managed, PAGE, _loc(d, "DEVICE", 1), 0, 0)) == \
        d.CUresult.CUDA_ERROR_INVALID_DEVICE
    assert cuda.err(d.cuMemAdvise(managed, PAGE, advise.CU_MEM_ADVISE_SET_ACCESSED_BY, _loc(d, "HOST_NUMA"))) == \
        invalid  # accessed-by takes a device or the host only
    assert cuda.err(d.cuMemAdvise(managed, PAGE, advise.CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                                  _loc(d, "HOST_NUMA", 7))) == invalid  # the host has one NUMA node


def test_prefetch_cannot_be_captured(cuda, managed):
    d = cuda.d
    stream = cuda.ok(d.cuStreamCreate(0))
    cuda.ok(d.cuStreamBeginCapture(stream, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    assert cuda.err(d.cuMemPrefetchAsync(managed, PAGE, _loc(d, "DEVICE"), 0, stream)) == \
        d.CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    assert cuda.err(d.cuStreamEndCapture(stream)) == d.CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    cuda.ok(d.cuStreamDestroy(stream))


def test_managed_pools_allocate_managed_memory(cuda):
    d = cuda.d
    managed_type = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_MANAGED
    default = cuda.ok(d.cuMemGetMemPool(_loc(d, "DEVICE"), managed_type))
    assert int(default) != int(cuda.ok(d.cuDeviceGetDefaultMemPool(0)))
    props = d.CUmemPoolProps()
    props.allocType = managed_type
    props.location = _loc(d, "HOST")
    pool = cuda.ok(d.cuMemPoolCreate(props))
    is_managed = d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_IS_MANAGED
    for source in (default, pool):
        p = cuda.ok(d.cuMemAllocFromPoolAsync(PAGE, source, 0))
        assert cuda.ok(d.cuPointerGetAttribute(is_managed, p)) is True
        host = np.frombuffer((np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * PAGE).from_address(int(p)))),
                             dtype=np.uint8)
        host[:] = 7  # managed memory is the host's to touch
        assert cuda.ok(d.cuMemsetD8(p, 3, 16)) is None and host[:16].tolist() == [3] * 16
        cuda.ok(d.cuMemFreeAsync(p, 0))
    cuda.ok(d.cuCtxSynchronize())
    cuda.ok(d.cuMemPoolDestroy(pool))
    assert cuda.err(d.cuMemPoolDestroy(pool)) == d.CUresult.CUDA_ERROR_INVALID_VALUE
    assert cuda.err(d.cuMemPoolDestroy(default)) == d.CUresult.CUDA_ERROR_INVALID_VALUE
    props.handleTypes = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    assert cuda.err(d.cuMemPoolCreate(props)) == d.CUresult.CUDA_ERROR_NOT_SUPPORTED  # managed is not shared


def test_a_captured_managed_allocation_is_managed_memory(cuda):
    d = cuda.d
    pool = cuda.ok(d.cuMemGetMemPool(_loc(d, "DEVICE"), d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_MANAGED))
    stream = cuda.ok(d.cuStreamCreate(0))
    cuda.ok(d.cuStreamBeginCapture(stream, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    p = cuda.ok(d.cuMemAllocFromPoolAsync(PAGE, pool, stream))
    graph = cuda.ok(d.cuStreamEndCapture(stream))
    exe = cuda.ok(d.cuGraphInstantiate(graph, 0))
    cuda.ok(d.cuGraphLaunch(exe, stream))
    cuda.ok(d.cuStreamSynchronize(stream))
    assert cuda.ok(d.cuPointerGetAttribute(d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_IS_MANAGED, p)) is True
    cuda.ok(d.cuMemPrefetchAsync(p, PAGE, _loc(d, "HOST"), 0, stream))
    cuda.ok(d.cuMemFreeAsync(p, stream))
    cuda.ok(d.cuStreamSynchronize(stream))
    for destroy, handle in ((d.cuGraphExecDestroy, exe), (d.cuGraphDestroy, graph), (d.cuStreamDestroy, stream)):
        cuda.ok(destroy(handle))


WRITE_AT = r'''
extern "C" __global__ void write_at(unsigned* p, unsigned i) { p[i] = 1; }
'''


def test_memcheck_names_managed_memory(cuda, managed):
    d = cuda.d
    f = cuda.kernel(WRITE_AT, "write_at")
    cuda.ok(d.cuMemFree(managed))
    cuda.allocs.remove(managed)
    cuda.launch(f, (1,), (1,), managed, np.uint32(0), sync=False)
    assert cuda.err(d.cuCtxSynchronize()) == d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    assert "use after free: managed allocation" in cuda.control.last_report()
