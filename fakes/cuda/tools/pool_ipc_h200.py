"""What a real driver answers where the fake's shared pools (pool_share.c) chose without a measurement: run on
the H200 (`python3 fakes/cuda/tools/pool_ipc_h200.py > $OUT/pool_ipc_h200.json`) and compare with the fake
(`python3 -m ironaccel fake run -- python3 fakes/cuda/tools/pool_ipc_h200.py`). One JSON object, CUresult codes
and attribute values by name; a second process imports the pool through an inherited descriptor."""

import ctypes
import json
import os
import subprocess
import sys

from cuda.bindings import driver as d

FD = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR


def code(result):
    return int(result[0])


def pool(loc_type, handle_types=FD, loc_id=0):
    props = d.CUmemPoolProps()
    props.allocType = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.handleTypes = handle_types
    props.location.type = loc_type
    props.location.id = loc_id
    return d.cuMemPoolCreate(props)


def child(fd: int, good: str, foreign: str) -> dict:
    here = d.CUmemLocation()
    here.type, here.id = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE, 0
    imported = d.cuMemPoolImportFromShareableHandle(fd, FD, 0)[1]
    out = {"imported pool: initial access": int(d.cuMemPoolGetAccess(imported, here)[1]),
           "imported pool: alloc": code(d.cuMemAllocFromPoolAsync(64, imported, 0))}
    data = []
    for hexed in (good, foreign):
        e = d.CUmemPoolPtrExportData()
        ctypes.memmove(e.getPtr(), bytes.fromhex(hexed), 64)
        data.append(e)
    first = d.cuMemPoolImportPointer(imported, data[0])
    second = d.cuMemPoolImportPointer(imported, data[0])
    out["import pointer"] = code(first)
    out["import again: same address"] = int(first[1]) == int(second[1])
    out["extent of the import"] = int(d.cuMemGetAddressRange(first[1])[2])
    out["import another pool's pointer"] = code(d.cuMemPoolImportPointer(imported, data[1]))
    return out


def main() -> dict:
    d.cuInit(0)
    d.cuCtxCreate(None, 0, 0)
    if len(sys.argv) == 4:  # the importing process
        return child(int(sys.argv[1]), sys.argv[2], sys.argv[3])
    A = d.CUdevice_attribute
    out = {name: int(d.cuDeviceGetAttribute(getattr(A, "CU_DEVICE_ATTRIBUTE_" + name), 0)[1])
           for name in ("HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED", "MEMPOOL_SUPPORTED_HANDLE_TYPES",
                        "HOST_MEMORY_POOLS_SUPPORTED", "HOST_NUMA_MEMORY_POOLS_SUPPORTED", "HOST_NUMA_ID",
                        "NUMA_ID", "IPC_EVENT_SUPPORTED", "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED")}
    T = d.CUmemLocationType
    out["shareable pinned pool at HOST"] = code(pool(T.CU_MEM_LOCATION_TYPE_HOST))
    out["shareable pinned pool at HOST_NUMA 0"] = code(pool(T.CU_MEM_LOCATION_TYPE_HOST_NUMA))
    out["fabric handle pool"] = code(pool(T.CU_MEM_LOCATION_TYPE_DEVICE,
                                          d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_FABRIC))
    shared, other = pool(T.CU_MEM_LOCATION_TYPE_DEVICE)[1], pool(T.CU_MEM_LOCATION_TYPE_DEVICE)[1]
    plain = pool(T.CU_MEM_LOCATION_TYPE_DEVICE, d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE)[1]
    p, q = d.cuMemAllocFromPoolAsync(1000, shared, 0)[1], d.cuMemAllocFromPoolAsync(64, other, 0)[1]
    r = d.cuMemAllocFromPoolAsync(64, plain, 0)[1]
    d.cuCtxSynchronize()
    out["ipc mem handle of a pool allocation"] = code(d.cuIpcGetMemHandle(p))
    out["export a plain pool"] = code(d.cuMemPoolExportToShareableHandle(plain, FD, 0))
    out["export pointer of a plain pool"] = code(d.cuMemPoolExportPointer(r))
    exported = [d.cuMemPoolExportPointer(x) for x in (p, q)]
    out["export pointer of a shareable pool's allocations"] = [code(e) for e in exported]
    if any(code(e) for e in exported):  # nothing to hand the child
        return out
    hexed = [ctypes.string_at(e[1].getPtr(), 64).hex() for e in exported]
    fd = int(d.cuMemPoolExportToShareableHandle(shared, FD, 0)[1])
    run = subprocess.run([sys.executable, __file__, str(fd), *hexed], pass_fds=[fd], capture_output=True,
                         text=True, timeout=120)
    out["child"] = json.loads(run.stdout) if run.returncode == 0 else run.stderr[-2000:]
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
