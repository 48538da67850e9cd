"""Memory pools shared between processes on the fake (fakes/cuda/pool_share.c): a pool made with the POSIX
file-descriptor handle type exports a descriptor, a second process imports the pool through it and then the
pool's allocations from 64 bytes each, and both see the same memory, for device and pinned host pools alike.
A pointer of another pool, an allocation from an imported pool, a pool without the handle type and a pool past
its maximum size are refused as the driver refuses them."""

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ironaccel import fakes

INVALID_VALUE, OUT_OF_MEMORY, NOT_SUPPORTED = 1, 2, 801
POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
LOCATIONS = {"device": (1, 0), "pinned": (3, 0)}  # CUmemLocationType DEVICE / HOST_NUMA, id

# The child: the pool's descriptor is argv[1] (inherited), the pointer's export data argv[2] in hex.
CHILD = '''
import ctypes, sys
import numpy as np
from cuda.bindings import driver as d
assert d.cuInit(0)[0] == 0
ctx = d.cuCtxCreate(None, 0, 0)[1]
err, pool = d.cuMemPoolImportFromShareableHandle(int(sys.argv[1]), d.CUmemAllocationHandleType(1), 0)
assert err == 0, err
here = d.CUmemLocation()
here.type, here.id = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE, 0
access = d.CUmemAccessDesc()
access.location, access.flags = here, d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
assert int(d.cuMemPoolGetAccess(pool, here)[1]) == 0  # an imported pool: no access until it is set
assert d.cuMemPoolSetAccess(pool, [access], 1)[0] == 0
assert int(d.cuMemPoolGetAccess(pool, here)[1]) == 3
data = d.CUmemPoolPtrExportData()
ctypes.memmove(data.getPtr(), bytes.fromhex(sys.argv[2]), 64)
err, p = d.cuMemPoolImportPointer(pool, data)
assert err == 0, err
assert int(d.cuMemPoolImportPointer(pool, data)[1]) == int(p)  # imported twice: one mapping
got = np.empty(256, np.uint32)
assert d.cuMemcpyDtoH(got, p, got.nbytes)[0] == 0
print(int(got.sum()), int(d.cuMemGetAddressRange(p)[2]))
assert d.cuMemsetD32(p, 7, 16)[0] == 0
print(int(d.cuMemAllocFromPoolAsync(64, pool, 0)[0]))
other = d.CUmemPoolPtrExportData()
ctypes.memmove(other.getPtr(), bytes.fromhex(sys.argv[3]), 64)
print(int(d.cuMemPoolImportPointer(pool, other)[0]))
assert d.cuMemFreeAsync(p, 0)[0] == 0
assert d.cuCtxSynchronize()[0] == 0
'''


def shared_pool(d, cuda, where: str, max_size: int = 0, handle_types: int = POSIX_FD):
    props = d.CUmemPoolProps()
    props.allocType = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.handleTypes = d.CUmemAllocationHandleType(handle_types)
    props.location.type = d.CUmemLocationType(LOCATIONS[where][0])
    props.location.id = LOCATIONS[where][1]
    props.maxSize = max_size
    return d.cuMemPoolCreate(props)


def export_pointer(cuda, ptr) -> bytes:
    data = cuda.ok(cuda.d.cuMemPoolExportPointer(ptr))
    return ctypes.string_at(data.getPtr(), 64)


@pytest.mark.parametrize("where", ["device", "pinned"])
def test_child_imports_the_pool_and_a_pointer_and_shares_its_memory(cuda, where):
    d = cuda.d
    pool = cuda.ok(shared_pool(d, cuda, where))
    other = cuda.ok(shared_pool(d, cuda, where))
    ptr = cuda.ok(d.cuMemAllocFromPoolAsync(1024, pool, 0))
    elsewhere = cuda.ok(d.cuMemAllocFromPoolAsync(64, other, 0))
    data = np.arange(256, dtype=np.uint32)
    cuda.ok(d.cuMemcpyHtoD(ptr, data, data.nbytes))
    fd = int(cuda.ok(d.cuMemPoolExportToShareableHandle(pool, d.CUmemAllocationHandleType(POSIX_FD), 0)))
    try:
        p = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), str(fd), export_pointer(cuda, ptr).hex(),
                            export_pointer(cuda, elsewhere).hex()],
                           env=fakes.child_env(), pass_fds=[fd], capture_output=True, text=True, timeout=120)
    finally:
        os.close(fd)
    assert p.returncode == 0, p.stderr
    sums, from_imported, wrong_pool = p.stdout.splitlines()
    assert sums.split() == [str(int(data.sum())), "1024"]  # the data, and the allocation's extent
    assert (int(from_imported), int(wrong_pool)) == (INVALID_VALUE, INVALID_VALUE)
    expected = data.copy()
    expected[:16] = 7
    np.testing.assert_array_equal(cuda.download(ptr, data), expected)
    if where == "pinned":  # host memory: the host reads it at the same address
        view = np.ctypeslib.as_array((ctypes.c_uint32 * 256).from_address(int(ptr)))
        np.testing.assert_array_equal(view, expected)
    for p_, pool_ in ((ptr, pool), (elsewhere, other)):
        cuda.ok(d.cuMemFreeAsync(p_, 0))
        cuda.ok(d.cuCtxSynchronize())
        cuda.ok(d.cuMemPoolDestroy(pool_))


def test_what_a_shared_pool_refuses(cuda):
    d = cuda.d
    fd_type = d.CUmemAllocationHandleType(POSIX_FD)
    plain = cuda.ok(shared_pool(d, cuda, "device", handle_types=0))
    assert cuda.err(d.cuMemPoolExportToShareableHandle(plain, fd_type, 0)) == INVALID_VALUE
    p = cuda.ok(d.cuMemAllocFromPoolAsync(64, plain, 0))
    assert cuda.err(d.cuMemPoolExportPointer(p)) == INVALID_VALUE  # not a shareable pool's allocation
    small = cuda.ok(shared_pool(d, cuda, "device", max_size=1 << 12))
    q = cuda.ok(d.cuMemAllocFromPoolAsync(4096, small, 0))
    assert cuda.err(d.cuMemAllocFromPoolAsync(256, small, 0)) == OUT_OF_MEMORY  # past its maximum size
    assert cuda.err(d.cuIpcGetMemHandle(q)) == INVALID_VALUE  # pool memory is shared through its pool
    cuda.ok(d.cuMemFreeAsync(q, 0))
    cuda.ok(d.cuCtxSynchronize())
    cuda.ok(d.cuMemFreeAsync(cuda.ok(d.cuMemAllocFromPoolAsync(4096, small, 0)), 0))  # freed: room again
    assert cuda.err(shared_pool(d, cuda, "device", handle_types=8)) == NOT_SUPPORTED  # fabric handles
    with open(os.devnull, "rb") as f:  # a descriptor, but not of a pool
        assert cuda.err(d.cuMemPoolImportFromShareableHandle(f.fileno(), fd_type, 0)) == INVALID_VALUE
    cuda.ok(d.cuMemFreeAsync(p, 0))
    cuda.ok(d.cuCtxSynchronize())
    for pool in (plain, small):
        cuda.ok(d.cuMemPoolDestroy(pool))


def test_the_device_advertises_what_it_shares(cuda):
    d = cuda.d
    A = d.CUdevice_attribute
    got = {a: cuda.ok(d.cuDeviceGetAttribute(getattr(A, "CU_DEVICE_ATTRIBUTE_" + a), 0))
           for a in ("HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED", "MEMPOOL_SUPPORTED_HANDLE_TYPES",
                     "HOST_MEMORY_POOLS_SUPPORTED", "HOST_NUMA_MEMORY_POOLS_SUPPORTED", "IPC_EVENT_SUPPORTED",
                     "MEMORY_POOLS_SUPPORTED", "HOST_NUMA_ID")}
    assert got == {"HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED": 1, "MEMPOOL_SUPPORTED_HANDLE_TYPES": POSIX_FD,
                   "HOST_MEMORY_POOLS_SUPPORTED": 1, "HOST_NUMA_MEMORY_POOLS_SUPPORTED": 1,
                   "IPC_EVENT_SUPPORTED": 1, "MEMORY_POOLS_SUPPORTED": 1,
                   "HOST_NUMA_ID": 0}  # where cuda.core's shareable pinned pools go
