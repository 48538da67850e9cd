"""Every implemented entry point of the fake, called with a bad handle, a bad size or NULL, returns the
documented CUresult and does not crash.

The calls go through ctypes straight to the C symbols, so NULL and forged handles reach the fake unchanged
(cuda.bindings would reject some of them before the driver sees them). ``test_every_entry_point_has_a_case``
fails when the fake gains an entry point without a row here.
"""

import ctypes
import struct
import threading
from ctypes import byref, c_int, c_size_t, c_uint, c_uint64, c_void_p

import numpy as np
import pytest

SUCCESS, INVALID_VALUE, OUT_OF_MEMORY, NOT_INITIALIZED = 0, 1, 2, 3
INVALID_DEVICE, INVALID_IMAGE, INVALID_CONTEXT, INVALID_PTX = 101, 200, 201, 218
FILE_NOT_FOUND, INVALID_HANDLE, ILLEGAL_STATE, NOT_FOUND = 301, 400, 401, 500
CAPTURE_UNSUPPORTED, NO_BINARY_FOR_GPU, NOT_SUPPORTED = 900, 209, 801

BAD = c_void_p(0xDEAD0000)    # a handle the fake never gave out
BADPTR = c_uint64(0xDEAD0000)  # a device address outside every allocation
NULL = None
DEV0, DEV9 = c_int(0), c_int(9)

KERNEL = r'''
extern "C" __global__ void touch(unsigned* p) { p[threadIdx.x] = threadIdx.x; }
__device__ unsigned counter;
'''


_PTX = []


class Env:
    """Valid objects to combine with one bad argument, so each row tests exactly one thing."""

    def __init__(self, cuda):
        d = cuda.d
        self.lib = ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
        if not _PTX:
            _PTX.append(cuda.ptx(KERNEL))  # NVRTC once per session, not once per row
        self.mod = c_void_p(int(cuda.ok(d.cuModuleLoadData(_PTX[0]))))
        self.fn = c_void_p(int(cuda.ok(d.cuModuleGetFunction(self.mod.value, b"touch"))))
        self.stream = c_void_p(int(cuda.ok(d.cuStreamCreate(0))))
        self.event = c_void_p(int(cuda.ok(d.cuEventCreate(0))))
        self.ptr = c_uint64(cuda.alloc(256))
        self.freed = c_uint64(int(cuda.ok(d.cuMemAlloc(64))))
        cuda.ok(d.cuMemFree(self.freed.value))
        self.host = np.zeros(256, np.uint8)
        self.hostp = c_void_p(self.host.ctypes.data)
        self.pool = c_void_p(int(cuda.ok(d.cuDeviceGetDefaultMemPool(0))))
        self.managed = c_uint64(int(cuda.ok(d.cuMemAllocManaged(256, 1))))
        cuda.allocs.append(self.managed.value)
        self.out = ctypes.create_string_buffer(256)  # room for any single out-parameter
        self.outp = byref(self.out)
        self.noop = ctypes.CFUNCTYPE(None, c_void_p)(lambda _: None)
        self.params = (c_void_p * 1)(ctypes.addressof(self.ptr))
        self.graph = c_void_p(int(cuda.ok(d.cuGraphCreate(0))))
        self.node = c_void_p(int(cuda.ok(d.cuGraphAddEmptyNode(self.graph.value, None, 0))))
        self.exec = c_void_p(int(cuda.ok(d.cuGraphInstantiate(self.graph.value, 0))))
        self.bad_deps = (c_void_p * 1)(BAD.value)
        self.kernel_node = byref(KernelNodeParams(self.fn, (c_uint * 3)(1, 1, 1), (c_uint * 3)(1, 1, 1), 0,
                                                  ctypes.cast(self.params, c_void_p), None, None, None))
        self.empty_copy = byref(_memcpy3d_device_to_device())
        self.host_node = byref((c_void_p * 2)(ctypes.cast(self.noop, c_void_p).value, None))
        self.link = c_void_p(int(cuda.ok(d.cuLinkCreate(0, [], []))))
        self.node2 = c_void_p(int(cuda.ok(d.cuGraphAddEmptyNode(self.graph.value, None, 0))))
        self.other_graph = c_void_p(int(cuda.ok(d.cuGraphCreate(0))))
        self.condition = c_uint64(int(cuda.ok(d.cuGraphConditionalHandleCreate(self.graph.value, cuda.ctx, 0, 0))))
        self.user_object = c_void_p(int(cuda.ok(d.cuUserObjectCreate(0, ctypes.cast(self.noop, c_void_p).value, 1, 1))))


SM_RESOURCE, INVALID_RESOURCE_TYPE = 1, 914  # CU_DEV_RESOURCE_TYPE_SM, CUDA_ERROR_INVALID_RESOURCE_TYPE
RESOURCE_BYTES = 144  # sizeof(CUdevResource), RESOURCE_ABI_VERSION 1


def _zeroed_resource():
    return ctypes.create_string_buffer(RESOURCE_BYTES)


def _sm_resource(e):
    """The device's SM resource, as cuDeviceGetDevResource fills it."""
    r = _zeroed_resource()
    assert e.lib.cuDeviceGetDevResource(0, r, SM_RESOURCE) == SUCCESS
    return r


def _group_params():
    return ctypes.create_string_buffer(64)  # one zeroed CU_DEV_SM_RESOURCE_GROUP_PARAMS


class LaunchConfig(ctypes.Structure):
    _fields_ = [("grid", c_uint * 3), ("block", c_uint * 3), ("shared", c_uint), ("stream", c_void_p),
                ("attrs", c_void_p), ("nattrs", c_uint)]


class KernelNodeParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2
    _fields_ = [("func", c_void_p), ("grid", c_uint * 3), ("block", c_uint * 3), ("shared", c_uint),
                ("params", c_void_p), ("extra", c_void_p), ("kern", c_void_p), ("ctx", c_void_p)]


def _memcpy3d_device_to_device():
    """A CUDA_MEMCPY3D (25 eight-byte words) of zero bytes between device memory types."""
    words = (c_uint64 * 25)()
    words[4] = words[15] = 2  # srcMemoryType, dstMemoryType: CU_MEMORYTYPE_DEVICE
    return words


def _sass_only_fatbin():
    """A fatbin whose one entry is machine code (kind 2, sm_90)."""
    entry = struct.pack("<HHIQIIHHIIIQQQ", 2, 0x0101, 64, 8, 0, 0, 0, 9, 90, 0, 0, 0, 0, 0) + bytes(8)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(entry)) + entry


def _memcpy3d_overflowing(ptr):
    """A device-to-device CUDA_MEMCPY3D whose rows reach past the end of the address space."""
    words = _memcpy3d_device_to_device()
    words[6] = words[17] = ptr  # srcDevice, dstDevice
    words[9] = words[20] = 2    # srcPitch, dstPitch
    words[22], words[23], words[24] = 1, 2 ** 62, 1  # WidthInBytes, Height, Depth
    return byref(words)


def _memset_node(element_size):
    return byref((c_uint64 * 5)(0, 0, element_size << 32, 1, 1))  # dst, pitch, value|elementSize, width, height


def _alloc_node(nbytes):
    """A CUDA_MEM_ALLOC_NODE_PARAMS for device memory: pool properties (88 bytes), access list, size, dptr."""
    words = (c_uint64 * 15)()
    words[0] = 1        # allocType PINNED, handleTypes NONE
    words[1] = 1        # location: DEVICE, id 0
    words[13] = nbytes  # bytesize
    return words


class IpcHandle(ctypes.Structure):  # CUipcMemHandle / CUipcEventHandle, passed by value
    _fields_ = [("reserved", ctypes.c_char * 64)]


class Location(ctypes.Structure):  # CUmemLocation, passed by value
    _fields_ = [("type", c_int), ("id", c_int)]


DEVICE0, HOST_NUMA0 = Location(1, 0), Location(3, 0)


class AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", Location), ("flags", c_int)]


def _pool_props(alloc_type, location_type, location_id=0, handle_types=0):
    """A CUmemPoolProps (88 bytes): allocType, handleTypes, location, then zeros."""
    words = (c_int * 22)()
    words[0], words[1], words[2], words[3] = alloc_type, handle_types, location_type, location_id
    return byref(words)


def _batch(e, ptr, nlocs=1, first=0):
    """cuMemPrefetchBatchAsync's arguments for one 256-byte range at ptr, nlocs locations from index first."""
    return (byref(c_uint64(ptr.value)), byref(c_size_t(256)), c_size_t(1), byref((Location * 2)(DEVICE0, DEVICE0)),
            byref((c_size_t * 2)(first, first + 1)), c_size_t(nlocs), c_uint64(0), e.stream)


def _array_desc(width, height, fmt, channels):
    """A CUDA_ARRAY_DESCRIPTOR: Width, Height, Format | NumChannels << 32."""
    return (c_uint64 * 3)(width, height, fmt | channels << 32)


def _array3d_desc(width, height, depth, fmt, channels, flags=0):
    """A CUDA_ARRAY3D_DESCRIPTOR: Width, Height, Depth, Format | NumChannels << 32, Flags."""
    return (c_uint64 * 5)(width, height, depth, fmt | channels << 32, flags)


def _memcpy3d_from_array(array):
    """A one-byte CUDA_MEMCPY3D from a CUDA array (srcMemoryType 3, srcArray) to device memory."""
    words = _memcpy3d_device_to_device()
    words[4], words[7] = 3, array.value
    words[22] = words[23] = words[24] = 1
    return byref(words)


def _resource(kind, handle):
    """A CUDA_RESOURCE_DESC (144 bytes): resType, then the array (or other) handle."""
    words = (c_uint64 * 18)()
    words[0], words[1] = kind, handle
    return words


def _texture_desc():
    return (c_uint * 26)()  # CUDA_TEXTURE_DESC, all defaults: wrap, point filtering


def _node_params(kind):
    """A CUgraphNodeParams (256 bytes) of that node type, its parameters all zero."""
    words = (c_uint64 * 32)()
    words[0] = kind
    return words


def _conditional_node(handle, kind, size):
    """A CUgraphNodeParams for a conditional node: type 13, then handle, kind | size << 32."""
    words = _node_params(13)
    words[2], words[3] = handle, kind | size << 32
    return words


def _tiled_args(e, rank, dtype=7):
    """cuTensorMapEncodeTiled's arguments after the map: a float32 map of e.ptr, box 16 x 1 x ..."""
    return (c_int(dtype), c_uint(rank), c_void_p(e.ptr.value), byref((c_uint64 * 6)(*[16] * 6)),
            byref((c_uint64 * 5)(*[64] * 5)), byref((c_uint * 6)(*[16] * 6)), byref((c_uint * 6)(*[1] * 6)),
            *[c_int(0)] * 4)


def _config(block=1, attrs=None, nattrs=0):
    return byref(LaunchConfig((c_uint * 3)(1, 1, 1), (c_uint * 3)(block, 1, 1), 0, None, attrs, nattrs))


# entry point -> [(why, args(env), expected CUresult)]; the symbol is the C name the fake exports.
CASES = {
    "cuInit": [("flags must be 0", lambda e: (c_uint(1),), INVALID_VALUE)],
    "cuDriverGetVersion": [("NULL out", lambda e: (NULL,), INVALID_VALUE)],
    "cuGetErrorName": [("NULL out", lambda e: (c_int(0), NULL), INVALID_VALUE),
                       ("unknown code", lambda e: (c_int(123456), e.outp), INVALID_VALUE)],
    "cuGetErrorString": [("NULL out", lambda e: (c_int(0), NULL), INVALID_VALUE),
                         ("unknown code", lambda e: (c_int(123456), e.outp), INVALID_VALUE)],
    "cuGetExportTable": [("unknown UUID", lambda e: (e.outp, b"\x01" * 16), INVALID_VALUE),
                         ("NULL table", lambda e: (NULL, b"\x01" * 16), INVALID_VALUE),
                         ("NULL UUID", lambda e: (e.outp, NULL), INVALID_VALUE)],
    "cuGetProcAddress": [("NULL symbol", lambda e: (NULL, e.outp, c_int(12000), c_uint64(0)), INVALID_VALUE)],
    "cuGetProcAddress_v2": [("NULL pfn", lambda e: (b"cuInit", NULL, c_int(12000), c_uint64(0), NULL),
                             INVALID_VALUE)],
    "cuDeviceGet": [("ordinal 1", lambda e: (e.outp, c_int(1)), INVALID_DEVICE),
                    ("NULL out", lambda e: (NULL, c_int(0)), INVALID_VALUE)],
    "cuDeviceGetCount": [("NULL out", lambda e: (NULL,), INVALID_VALUE)],
    "cuDeviceGetName": [("bad device", lambda e: (e.outp, c_int(64), DEV9), INVALID_DEVICE),
                        ("NULL out", lambda e: (NULL, c_int(64), DEV0), INVALID_VALUE),
                        ("length 0", lambda e: (e.outp, c_int(0), DEV0), INVALID_VALUE)],
    "cuDeviceGetUuid": [("bad device", lambda e: (e.outp, DEV9), INVALID_DEVICE),
                        ("NULL out", lambda e: (NULL, DEV0), INVALID_VALUE)],
    "cuDeviceGetUuid_v2": [("bad device", lambda e: (e.outp, DEV9), INVALID_DEVICE),
                           ("NULL out", lambda e: (NULL, DEV0), INVALID_VALUE)],
    "cuDeviceTotalMem_v2": [("bad device", lambda e: (e.outp, DEV9), INVALID_DEVICE),
                            ("NULL out", lambda e: (NULL, DEV0), INVALID_VALUE)],
    "cuDeviceGetAttribute": [("bad device", lambda e: (e.outp, c_int(1), DEV9), INVALID_DEVICE),
                             ("NULL out", lambda e: (NULL, c_int(1), DEV0), INVALID_VALUE),
                             ("unknown attribute", lambda e: (e.outp, c_int(100000), DEV0), INVALID_VALUE)],
    "cuDeviceComputeCapability": [("bad device", lambda e: (e.outp, e.outp, DEV9), INVALID_DEVICE),
                                  ("NULL out", lambda e: (NULL, NULL, DEV0), INVALID_VALUE)],
    "cuDeviceGetPCIBusId": [("bad device", lambda e: (e.outp, c_int(64), DEV9), INVALID_DEVICE),
                            ("NULL out", lambda e: (NULL, c_int(64), DEV0), INVALID_VALUE)],
    "cuDeviceGetDefaultMemPool": [("bad device", lambda e: (e.outp, DEV9), INVALID_DEVICE),
                                  ("NULL out", lambda e: (NULL, DEV0), INVALID_VALUE)],
    "cuDeviceGetMemPool": [("bad device", lambda e: (e.outp, DEV9), INVALID_DEVICE),
                           ("NULL out", lambda e: (NULL, DEV0), INVALID_VALUE)],
    "cuDevicePrimaryCtxRetain": [("bad device", lambda e: (e.outp, DEV9), INVALID_DEVICE),
                                 ("NULL out", lambda e: (NULL, DEV0), INVALID_VALUE)],
    "cuDevicePrimaryCtxRelease": [("bad device", lambda e: (DEV9,), INVALID_DEVICE)],
    "cuDevicePrimaryCtxRelease_v2": [("bad device", lambda e: (DEV9,), INVALID_DEVICE)],
    "cuDevicePrimaryCtxSetFlags_v2": [("bad device", lambda e: (DEV9, c_uint(0)), INVALID_DEVICE),
                                      ("unknown flags", lambda e: (DEV0, c_uint(0x80000000)), INVALID_VALUE)],
    "cuDevicePrimaryCtxGetState": [("bad device", lambda e: (DEV9, e.outp, e.outp), INVALID_DEVICE),
                                   ("NULL out", lambda e: (DEV0, NULL, NULL), INVALID_VALUE)],
    "cuDevicePrimaryCtxReset_v2": [("bad device", lambda e: (DEV9,), INVALID_DEVICE)],
    "cuCtxCreate_v2": [("bad device", lambda e: (e.outp, c_uint(0), DEV9), INVALID_DEVICE),
                       ("NULL out", lambda e: (NULL, c_uint(0), DEV0), INVALID_VALUE)],
    "cuCtxCreate_v3": [("bad device", lambda e: (e.outp, NULL, c_int(0), c_uint(0), DEV9), INVALID_DEVICE),
                       ("NULL out", lambda e: (NULL, NULL, c_int(0), c_uint(0), DEV0), INVALID_VALUE)],
    "cuCtxCreate_v4": [("bad device", lambda e: (e.outp, NULL, c_uint(0), DEV9), INVALID_DEVICE),
                       ("NULL out", lambda e: (NULL, NULL, c_uint(0), DEV0), INVALID_VALUE)],
    "cuCtxDestroy_v2": [("bad context", lambda e: (BAD,), INVALID_CONTEXT)],
    "cuCtxPushCurrent_v2": [("bad context", lambda e: (BAD,), INVALID_CONTEXT)],
    "cuCtxPopCurrent_v2": [("nothing current", lambda e: (e.outp,), INVALID_CONTEXT, "no context")],
    "cuCtxSetCurrent": [("bad context", lambda e: (BAD,), INVALID_CONTEXT)],
    "cuCtxGetCurrent": [("NULL out", lambda e: (NULL,), INVALID_VALUE)],
    "cuCtxGetDevice": [("NULL out", lambda e: (NULL,), INVALID_VALUE),
                       ("nothing current", lambda e: (e.outp,), INVALID_CONTEXT, "no context")],
    "cuCtxGetFlags": [("NULL out", lambda e: (NULL,), INVALID_VALUE),
                      ("nothing current", lambda e: (e.outp,), INVALID_CONTEXT, "no context")],
    "cuCtxGetId": [("bad context", lambda e: (BAD, e.outp), INVALID_CONTEXT),
                   ("NULL out", lambda e: (NULL, NULL), INVALID_VALUE)],
    "cuCtxSynchronize": [("nothing current", lambda e: (), INVALID_CONTEXT, "no context")],
    "cuProfilerStart": [("nothing current", lambda e: (), INVALID_CONTEXT, "no context")],
    "cuProfilerStop": [("nothing current", lambda e: (), INVALID_CONTEXT, "no context")],
    "cuCtxGetApiVersion": [("bad context", lambda e: (BAD, e.outp), INVALID_CONTEXT),
                           ("NULL out", lambda e: (NULL, NULL), INVALID_VALUE)],
    "cuCtxGetStreamPriorityRange": [("nothing current", lambda e: (e.outp, e.outp), INVALID_CONTEXT,
                                     "no context")],
    "cuCtxGetLimit": [("NULL out", lambda e: (NULL, c_int(0)), INVALID_VALUE),
                      ("unknown limit", lambda e: (e.outp, c_int(1000)), INVALID_VALUE)],
    "cuCtxSetLimit": [("unknown limit", lambda e: (c_int(1000), c_size_t(0)), INVALID_VALUE),
                      ("nothing current", lambda e: (c_int(0), c_size_t(1024)), INVALID_CONTEXT, "no context")],
    "cuCtxGetCacheConfig": [("NULL out", lambda e: (NULL,), INVALID_VALUE)],
    "cuCtxSetCacheConfig": [("unknown config", lambda e: (c_int(99),), INVALID_VALUE)],
    "cuCtxGetSharedMemConfig": [("NULL out", lambda e: (NULL,), INVALID_VALUE),
                                ("nothing current", lambda e: (e.outp,), INVALID_CONTEXT, "no context")],
    "cuCtxSetSharedMemConfig": [("unknown config", lambda e: (c_int(99),), INVALID_VALUE),
                                ("nothing current", lambda e: (c_int(0),), INVALID_CONTEXT, "no context")],
    "cuMemGetInfo_v2": [("NULL out", lambda e: (NULL, NULL), INVALID_VALUE),
                        ("nothing current", lambda e: (e.outp, e.outp), INVALID_CONTEXT, "no context")],
    "cuMemAlloc_v2": [("size 0", lambda e: (e.outp, c_size_t(0)), INVALID_VALUE),
                      ("NULL out", lambda e: (NULL, c_size_t(64)), INVALID_VALUE),
                      ("nothing current", lambda e: (e.outp, c_size_t(64)), INVALID_CONTEXT, "no context")],
    "cuMemAllocPitch_v2": [("element size 3", lambda e: (e.outp, e.outp, c_size_t(64), c_size_t(4), c_uint(3)),
                            INVALID_VALUE),
                           ("NULL out", lambda e: (NULL, NULL, c_size_t(64), c_size_t(4), c_uint(4)),
                            INVALID_VALUE),
                           ("pitch x height overflows", lambda e: (e.outp, e.outp, c_size_t(2 ** 40), c_size_t(2 ** 40),
                                                                   c_uint(4)), OUT_OF_MEMORY)],
    "cuMemAllocManaged": [("size 0", lambda e: (e.outp, c_size_t(0), c_uint(1)), INVALID_VALUE),
                          ("bad flags", lambda e: (e.outp, c_size_t(64), c_uint(0)), INVALID_VALUE)],
    "cuMemFree_v2": [("not an allocation", lambda e: (BADPTR,), INVALID_VALUE),
                     ("double free", lambda e: (e.freed,), INVALID_VALUE),
                     ("inside an allocation", lambda e: (c_uint64(e.ptr.value + 4),), INVALID_VALUE)],
    "cuMemGetAddressRange_v2": [("not an allocation", lambda e: (e.outp, e.outp, BADPTR), NOT_FOUND)],
    "cuMemAllocHost_v2": [("NULL out", lambda e: (NULL, c_size_t(64)), INVALID_VALUE)],
    "cuMemHostAlloc": [("NULL out", lambda e: (NULL, c_size_t(64), c_uint(0)), INVALID_VALUE),
                       ("unknown flags", lambda e: (e.outp, c_size_t(64), c_uint(0x100)), INVALID_VALUE)],
    "cuMemFreeHost": [("not pinned", lambda e: (e.hostp,), INVALID_VALUE)],
    "cuMemHostGetDevicePointer_v2": [("not pinned", lambda e: (e.outp, e.hostp, c_uint(0)), INVALID_VALUE),
                                     ("flags must be 0", lambda e: (e.outp, e.hostp, c_uint(1)), INVALID_VALUE)],
    "cuMemHostGetFlags": [("not pinned", lambda e: (e.outp, e.hostp), INVALID_VALUE)],
    "cuMemHostRegister_v2": [("NULL", lambda e: (NULL, c_size_t(64), c_uint(0)), INVALID_VALUE),
                             ("size 0", lambda e: (e.hostp, c_size_t(0), c_uint(0)), INVALID_VALUE),
                             ("a range that wraps around", lambda e: (e.hostp, c_size_t(2 ** 64 - 16), c_uint(0)),
                              INVALID_VALUE)],
    "cuMemHostUnregister": [("not registered", lambda e: (e.hostp,), 713)],  # HOST_MEMORY_NOT_REGISTERED
    "cuMemAllocAsync": [("NULL out", lambda e: (NULL, c_size_t(64), e.stream), INVALID_VALUE),
                        ("bad stream", lambda e: (e.outp, c_size_t(64), BAD), INVALID_HANDLE)],
    "cuMemAllocFromPoolAsync": [("bad pool", lambda e: (e.outp, c_size_t(64), BAD, e.stream), INVALID_HANDLE),
                                ("bad stream", lambda e: (e.outp, c_size_t(64), e.pool, BAD), INVALID_HANDLE)],
    "cuMemFreeAsync": [("not an allocation", lambda e: (BADPTR, e.stream), INVALID_VALUE),
                       ("bad stream", lambda e: (e.ptr, BAD), INVALID_HANDLE)],
    "cuMemPoolGetAttribute": [("bad pool", lambda e: (BAD, c_int(1), e.outp), INVALID_HANDLE),
                              ("unknown attribute", lambda e: (e.pool, c_int(99), e.outp), INVALID_VALUE)],
    "cuMemPoolSetAttribute": [("bad pool", lambda e: (BAD, c_int(1), e.outp), INVALID_HANDLE),
                              ("unknown attribute", lambda e: (e.pool, c_int(99), e.outp), INVALID_VALUE)],
    "cuMemPoolTrimTo": [("bad pool", lambda e: (BAD, c_size_t(0)), INVALID_HANDLE)],
    "cuMemPoolSetAccess": [("bad pool", lambda e: (BAD, byref(AccessDesc(DEVICE0, 3)), c_size_t(1)), INVALID_HANDLE),
                           ("bad device", lambda e: (e.pool, byref(AccessDesc(Location(1, 9), 3)), c_size_t(1)),
                            INVALID_DEVICE),
                           ("bad flags", lambda e: (e.pool, byref(AccessDesc(DEVICE0, 2)), c_size_t(1)), INVALID_VALUE),
                           ("NULL descriptors", lambda e: (e.pool, NULL, c_size_t(1)), INVALID_VALUE)],
    "cuMemPoolGetAccess": [("bad pool", lambda e: (e.outp, BAD, byref(DEVICE0)), INVALID_HANDLE),
                           ("NULL location", lambda e: (e.outp, e.pool, NULL), INVALID_VALUE)],
    "cuMemAdvise": [("not managed", lambda e: (e.ptr, c_size_t(256), c_int(1), DEV0), INVALID_VALUE),
                    ("bad device", lambda e: (e.managed, c_size_t(256), c_int(3), DEV9), INVALID_DEVICE)],
    "cuMemAdvise_v2": [("not managed", lambda e: (e.ptr, c_size_t(256), c_int(1), DEVICE0), INVALID_VALUE),
                       ("unknown advice", lambda e: (e.managed, c_size_t(256), c_int(99), DEVICE0), INVALID_VALUE),
                       ("accessed by a NUMA node", lambda e: (e.managed, c_size_t(256), c_int(5), HOST_NUMA0),
                        INVALID_VALUE)],
    "cuMemPrefetchAsync": [("not managed", lambda e: (e.ptr, c_size_t(256), DEV0, e.stream), INVALID_VALUE),
                           ("bad stream", lambda e: (e.managed, c_size_t(256), DEV0, BAD), INVALID_HANDLE)],
    "cuMemPrefetchAsync_v2": [
        ("past the end", lambda e: (e.managed, c_size_t(257), DEVICE0, c_uint(0), e.stream), INVALID_VALUE),
        ("flags", lambda e: (e.managed, c_size_t(256), DEVICE0, c_uint(1), e.stream), INVALID_VALUE),
        ("unknown location type", lambda e: (e.managed, c_size_t(256), Location(9, 0), c_uint(0), e.stream),
         INVALID_VALUE)],
    "cuMemPrefetchBatchAsync": [("not managed", lambda e: _batch(e, e.ptr), INVALID_VALUE),
                                ("first index not 0", lambda e: _batch(e, e.managed, first=1), INVALID_VALUE)],
    "cuMemDiscardAndPrefetchBatchAsync": [
        ("more locations than ranges", lambda e: _batch(e, e.managed, nlocs=2), INVALID_VALUE)],
    "cuMemDiscardBatchAsync": [
        ("not managed", lambda e: _batch(e, e.ptr)[:3] + (c_uint64(0), e.stream), INVALID_VALUE),
        ("bad stream", lambda e: _batch(e, e.managed)[:3] + (c_uint64(0), BAD), INVALID_HANDLE)],
    "cuMemRangeGetAttribute": [
        ("not managed", lambda e: (e.outp, c_size_t(4), c_int(1), e.ptr, c_size_t(256)), INVALID_VALUE),
        ("wrong size", lambda e: (e.outp, c_size_t(8), c_int(1), e.managed, c_size_t(256)), INVALID_VALUE),
        ("unknown attribute", lambda e: (e.outp, c_size_t(4), c_int(99), e.managed, c_size_t(256)), INVALID_VALUE)],
    "cuMemRangeGetAttributes": [
        ("NULL data", lambda e: (NULL, byref(c_size_t(4)), byref(c_int(1)), c_size_t(1), e.managed, c_size_t(256)),
         INVALID_VALUE),
        ("nothing current", lambda e: (byref(c_void_p(ctypes.addressof(e.out))), byref(c_size_t(4)), byref(c_int(1)),
                                       c_size_t(1), e.managed, c_size_t(256)), INVALID_CONTEXT, "no context")],
    "cuMemGetMemPool": [("NULL location", lambda e: (e.outp, NULL, c_int(2)), INVALID_VALUE),
                        ("pinned, NUMA node 1", lambda e: (e.outp, byref(Location(3, 1)), c_int(1)), INVALID_VALUE),
                        ("unknown type", lambda e: (e.outp, byref(DEVICE0), c_int(7)), INVALID_VALUE),
                        ("bad device", lambda e: (e.outp, byref(Location(1, 9)), c_int(2)), INVALID_DEVICE)],
    "cuMemGetDefaultMemPool": [("NULL out", lambda e: (NULL, byref(DEVICE0), c_int(2)), INVALID_VALUE)],
    "cuMemPoolCreate": [("NULL props", lambda e: (e.outp, NULL), INVALID_VALUE),
                        ("fabric handles", lambda e: (e.outp, _pool_props(1, 1, handle_types=8)), NOT_SUPPORTED),
                        ("exportable managed", lambda e: (e.outp, _pool_props(2, 1, handle_types=1)), NOT_SUPPORTED),
                        ("exportable host, not a node", lambda e: (e.outp, _pool_props(1, 2, handle_types=1)),
                         INVALID_VALUE),
                        ("bad device", lambda e: (e.outp, _pool_props(2, 1, 9)), INVALID_DEVICE)],
    "cuMemPoolExportToShareableHandle": [("bad pool", lambda e: (e.outp, BAD, c_int(1), c_uint64(0)), INVALID_HANDLE),
                                         ("not shareable", lambda e: (e.outp, e.pool, c_int(1), c_uint64(0)),
                                          INVALID_VALUE)],
    "cuMemPoolImportFromShareableHandle": [("no descriptor", lambda e: (e.outp, c_void_p(-1 & 0xFFFFFFFF), c_int(1),
                                                                         c_uint64(0)), INVALID_VALUE),
                                           ("NULL out", lambda e: (NULL, c_void_p(0), c_int(1), c_uint64(0)),
                                            INVALID_VALUE)],
    "cuMemPoolExportPointer": [("not a shared pool's", lambda e: (e.outp, e.ptr), INVALID_VALUE),
                               ("NULL out", lambda e: (NULL, e.ptr), INVALID_VALUE)],
    "cuMemPoolImportPointer": [("bad pool", lambda e: (e.outp, BAD, e.outp), INVALID_HANDLE),
                               ("not an imported pool", lambda e: (e.outp, e.pool, e.outp), INVALID_VALUE),
                               ("no context", lambda e: (e.outp, e.pool, e.outp), INVALID_CONTEXT, "no context")],
    "cuMemPoolDestroy": [("default pool", lambda e: (e.pool,), INVALID_VALUE),
                         ("bad pool", lambda e: (BAD,), INVALID_VALUE)],
    "cuPointerGetAttribute": [("NULL out", lambda e: (NULL, c_int(1), e.ptr), INVALID_VALUE),
                              ("unknown attribute", lambda e: (e.outp, c_int(999), e.ptr), INVALID_VALUE)],
    "cuPointerGetAttributes": [("NULL attributes", lambda e: (c_uint(1), NULL, NULL, e.ptr), INVALID_VALUE)],
    "cuMemcpyHtoD_v2": [("past the end", lambda e: (e.ptr, e.hostp, c_size_t(257)), INVALID_VALUE),
                        ("not an allocation", lambda e: (BADPTR, e.hostp, c_size_t(4)), INVALID_VALUE)],
    "cuMemcpyDtoH_v2": [("past the end", lambda e: (e.hostp, e.ptr, c_size_t(257)), INVALID_VALUE),
                        ("not an allocation", lambda e: (e.hostp, BADPTR, c_size_t(4)), INVALID_VALUE)],
    "cuMemcpyDtoD_v2": [("past the end", lambda e: (e.ptr, e.ptr, c_size_t(257)), INVALID_VALUE),
                        ("a size that wraps around", lambda e: (e.ptr, e.ptr, c_size_t(2 ** 64 - 8)), INVALID_VALUE),
                        ("not an allocation", lambda e: (BADPTR, e.ptr, c_size_t(4)), INVALID_VALUE)],
    "cuMemcpyHtoDAsync_v2": [("past the end", lambda e: (e.ptr, e.hostp, c_size_t(257), e.stream), INVALID_VALUE),
                             ("bad stream", lambda e: (e.ptr, e.hostp, c_size_t(4), BAD), INVALID_HANDLE)],
    "cuMemcpyDtoHAsync_v2": [("past the end", lambda e: (e.hostp, e.ptr, c_size_t(257), e.stream), INVALID_VALUE),
                             ("bad stream", lambda e: (e.hostp, e.ptr, c_size_t(4), BAD), INVALID_HANDLE)],
    "cuMemcpyDtoDAsync_v2": [("past the end", lambda e: (e.ptr, e.ptr, c_size_t(257), e.stream), INVALID_VALUE),
                             ("bad stream", lambda e: (e.ptr, e.ptr, c_size_t(4), BAD), INVALID_HANDLE)],
    "cuMemcpy": [("past the end", lambda e: (e.ptr, e.ptr, c_size_t(257)), INVALID_VALUE),
                 ("freed device address", lambda e: (e.freed, e.ptr, c_size_t(4)), INVALID_VALUE),
                 ("to a freed device address", lambda e: (e.ptr, e.freed, c_size_t(4)), INVALID_VALUE)],
    "cuMemcpyAsync": [("past the end", lambda e: (e.ptr, e.ptr, c_size_t(257), e.stream), INVALID_VALUE),
                      ("bad stream", lambda e: (e.ptr, e.ptr, c_size_t(4), BAD), INVALID_HANDLE),
                      ("freed device address", lambda e: (e.freed, e.ptr, c_size_t(4), e.stream), INVALID_VALUE)],
    "cuMemsetD8_v2": [("past the end", lambda e: (e.ptr, c_uint(0), c_size_t(257)), INVALID_VALUE)],
    "cuMemsetD16_v2": [("past the end", lambda e: (e.ptr, c_uint(0), c_size_t(129)), INVALID_VALUE),
                       ("misaligned", lambda e: (c_uint64(e.ptr.value + 1), c_uint(0), c_size_t(2)), INVALID_VALUE)],
    "cuMemsetD32_v2": [("past the end", lambda e: (e.ptr, c_uint(0), c_size_t(65)), INVALID_VALUE),
                       ("misaligned", lambda e: (c_uint64(e.ptr.value + 2), c_uint(0), c_size_t(2)), INVALID_VALUE)],
    "cuMemsetD8Async": [("past the end", lambda e: (e.ptr, c_uint(0), c_size_t(257), e.stream), INVALID_VALUE),
                        ("bad stream", lambda e: (e.ptr, c_uint(0), c_size_t(4), BAD), INVALID_HANDLE)],
    "cuMemsetD16Async": [("past the end", lambda e: (e.ptr, c_uint(0), c_size_t(129), e.stream), INVALID_VALUE),
                         ("bad stream", lambda e: (e.ptr, c_uint(0), c_size_t(4), BAD), INVALID_HANDLE)],
    "cuMemsetD32Async": [("past the end", lambda e: (e.ptr, c_uint(0), c_size_t(65), e.stream), INVALID_VALUE),
                         ("bad stream", lambda e: (e.ptr, c_uint(0), c_size_t(4), BAD), INVALID_HANDLE)],
    "cuMemsetD2D8_v2": [("pitch below width", lambda e: (e.ptr, c_size_t(8), c_uint(0), c_size_t(16), c_size_t(2)),
                         INVALID_VALUE),
                        ("past the end", lambda e: (e.ptr, c_size_t(64), c_uint(0), c_size_t(64), c_size_t(5)),
                         INVALID_VALUE),
                        ("a span that overflows", lambda e: (e.ptr, c_size_t(2 ** 63), c_uint(0), c_size_t(1),
                                                             c_size_t(3)), INVALID_VALUE)],
    "cuMemsetD2D16_v2": [("pitch below width", lambda e: (e.ptr, c_size_t(8), c_uint(0), c_size_t(8), c_size_t(2)),
                          INVALID_VALUE)],
    "cuMemsetD2D32_v2": [("pitch below width", lambda e: (e.ptr, c_size_t(8), c_uint(0), c_size_t(4), c_size_t(2)),
                          INVALID_VALUE)],
    "cuMemsetD2D8Async": [("bad stream", lambda e: (e.ptr, c_size_t(8), c_uint(0), c_size_t(8), c_size_t(2), BAD),
                           INVALID_HANDLE)],
    "cuMemsetD2D16Async": [("bad stream", lambda e: (e.ptr, c_size_t(8), c_uint(0), c_size_t(4), c_size_t(2), BAD),
                            INVALID_HANDLE)],
    "cuMemsetD2D32Async": [("bad stream", lambda e: (e.ptr, c_size_t(8), c_uint(0), c_size_t(2), c_size_t(2), BAD),
                            INVALID_HANDLE)],
    "cuStreamCreate": [("NULL out", lambda e: (NULL, c_uint(0)), INVALID_VALUE),
                       ("unknown flags", lambda e: (e.outp, c_uint(2)), INVALID_VALUE)],
    "cuStreamCreateWithPriority": [("NULL out", lambda e: (NULL, c_uint(0), c_int(0)), INVALID_VALUE)],
    "cuStreamDestroy_v2": [("bad stream", lambda e: (BAD,), INVALID_HANDLE)],
    "cuStreamQuery": [("bad stream", lambda e: (BAD,), INVALID_HANDLE)],
    "cuStreamSynchronize": [("bad stream", lambda e: (BAD,), INVALID_HANDLE)],
    "cuStreamWaitEvent": [("bad event", lambda e: (e.stream, BAD, c_uint(0)), INVALID_HANDLE),
                          ("bad stream", lambda e: (BAD, e.event, c_uint(0)), INVALID_HANDLE)],
    "cuStreamAddCallback": [("NULL callback", lambda e: (e.stream, NULL, NULL, c_uint(0)), INVALID_VALUE),
                            ("bad stream", lambda e: (BAD, e.noop, NULL, c_uint(0)), INVALID_HANDLE)],
    "cuLaunchHostFunc": [("NULL function", lambda e: (e.stream, NULL, NULL), INVALID_VALUE),
                         ("bad stream", lambda e: (BAD, e.noop, NULL), INVALID_HANDLE)],
    "cuStreamGetPriority": [("bad stream", lambda e: (BAD, e.outp), INVALID_HANDLE),
                            ("NULL out", lambda e: (e.stream, NULL), INVALID_VALUE)],
    "cuStreamGetFlags": [("bad stream", lambda e: (BAD, e.outp), INVALID_HANDLE),
                         ("NULL out", lambda e: (e.stream, NULL), INVALID_VALUE)],
    "cuStreamGetCtx": [("bad stream", lambda e: (BAD, e.outp), INVALID_HANDLE),
                       ("NULL out", lambda e: (e.stream, NULL), INVALID_VALUE)],
    "cuStreamGetId": [("bad stream", lambda e: (BAD, e.outp), INVALID_HANDLE),
                      ("NULL out", lambda e: (e.stream, NULL), INVALID_VALUE)],
    "cuStreamGetCtx_v2": [("bad stream", lambda e: (BAD, e.outp, e.outp), INVALID_HANDLE),
                          ("NULL out", lambda e: (e.stream, NULL, e.outp), INVALID_VALUE)],
    "cuCheckpointProcessGetState": [("pid 0", lambda e: (0, e.outp), INVALID_VALUE),
                                    ("NULL out", lambda e: (1, NULL), INVALID_VALUE)],
    "cuCheckpointProcessGetRestoreThreadId": [("pid 0", lambda e: (0, e.outp), INVALID_VALUE),
                                              ("NULL out", lambda e: (1, NULL), INVALID_VALUE)],
    "cuCheckpointProcessLock": [("pid 0", lambda e: (0, NULL), INVALID_VALUE)],
    "cuCheckpointProcessCheckpoint": [("pid 0", lambda e: (0, NULL), INVALID_VALUE)],
    "cuCheckpointProcessRestore": [("pid 0", lambda e: (0, NULL), INVALID_VALUE)],
    "cuCheckpointProcessUnlock": [("pid 0", lambda e: (0, NULL), INVALID_VALUE)],
    "cuDeviceGetDevResource": [("bad device", lambda e: (DEV9, e.outp, SM_RESOURCE), INVALID_DEVICE),
                               ("NULL out", lambda e: (DEV0, NULL, SM_RESOURCE), INVALID_VALUE),
                               ("unknown type", lambda e: (DEV0, e.outp, 7), INVALID_RESOURCE_TYPE)],
    "cuCtxGetDevResource": [("bad context", lambda e: (BAD, e.outp, SM_RESOURCE), INVALID_CONTEXT)],
    "cuGreenCtxGetDevResource": [("bad green context", lambda e: (BAD, e.outp, SM_RESOURCE), INVALID_HANDLE)],
    "cuStreamGetDevResource": [("bad stream", lambda e: (BAD, e.outp, SM_RESOURCE), INVALID_HANDLE),
                               ("workqueue type", lambda e: (e.stream, e.outp, 1000), INVALID_RESOURCE_TYPE)],
    "cuDevSmResourceSplitByCount": [
        ("not an SM resource", lambda e: (e.outp, byref(c_uint(1)), _zeroed_resource(), NULL, 0, 0),
         INVALID_RESOURCE_TYPE),
        ("NULL group count", lambda e: (e.outp, NULL, _sm_resource(e), NULL, 0, 0), INVALID_VALUE),
        ("unknown flag", lambda e: (e.outp, byref(c_uint(1)), _sm_resource(e), NULL, 4, 0), INVALID_VALUE)],
    "cuDevSmResourceSplit": [
        ("not an SM resource", lambda e: (NULL, 1, _zeroed_resource(), NULL, 0, _group_params()),
         INVALID_RESOURCE_TYPE),
        ("no groups", lambda e: (NULL, 0, _sm_resource(e), NULL, 0, _group_params()), INVALID_VALUE),
        ("NULL params", lambda e: (NULL, 1, _sm_resource(e), NULL, 0, NULL), INVALID_VALUE)],
    "cuDevResourceGenerateDesc": [("NULL out", lambda e: (NULL, _sm_resource(e), 1), INVALID_VALUE),
                                  ("no resources", lambda e: (e.outp, _sm_resource(e), 0), INVALID_VALUE),
                                  ("forged resource", lambda e: (e.outp, _zeroed_resource(), 1),
                                   INVALID_RESOURCE_TYPE)],
    "cuGreenCtxCreate": [("bad descriptor", lambda e: (e.outp, BAD, DEV0, 1), INVALID_HANDLE),
                         ("NULL out", lambda e: (NULL, BAD, DEV0, 1), INVALID_VALUE),
                         ("unknown flag", lambda e: (e.outp, BAD, DEV0, 2), INVALID_VALUE)],
    "cuGreenCtxDestroy": [("bad green context", lambda e: (BAD,), INVALID_HANDLE)],
    "cuCtxFromGreenCtx": [("bad green context", lambda e: (e.outp, BAD), INVALID_HANDLE)],
    "cuGreenCtxGetId": [("bad green context", lambda e: (BAD, e.outp), INVALID_HANDLE),
                        ("current context not green", lambda e: (NULL, e.outp), INVALID_CONTEXT)],
    "cuGreenCtxStreamCreate": [("bad green context", lambda e: (e.outp, BAD, 1, 0), INVALID_HANDLE)],
    "cuStreamGetGreenCtx": [("bad stream", lambda e: (BAD, e.outp), INVALID_HANDLE),
                            ("NULL out", lambda e: (e.stream, NULL), INVALID_VALUE)],
    "cuStreamIsCapturing": [("bad stream", lambda e: (BAD, e.outp), INVALID_HANDLE),
                            ("NULL out", lambda e: (e.stream, NULL), INVALID_VALUE)],
    "cuStreamBeginCapture_v2": [("bad stream", lambda e: (BAD, c_int(0)), INVALID_HANDLE),
                                ("unknown mode", lambda e: (e.stream, c_int(7)), INVALID_VALUE),
                                ("legacy stream", lambda e: (NULL, c_int(0)), CAPTURE_UNSUPPORTED)],
    "cuStreamEndCapture": [("bad stream", lambda e: (BAD, e.outp), INVALID_HANDLE),
                           ("not capturing", lambda e: (e.stream, e.outp), ILLEGAL_STATE),
                           ("NULL out", lambda e: (e.stream, NULL), INVALID_VALUE)],
    "cuStreamGetCaptureInfo_v2": [("bad stream", lambda e: (BAD, e.outp, NULL, NULL, NULL, NULL), INVALID_HANDLE),
                                  ("NULL status", lambda e: (e.stream, NULL, NULL, NULL, NULL, NULL), INVALID_VALUE)],
    "cuStreamGetCaptureInfo_v3": [("bad stream", lambda e: (BAD, e.outp, NULL, NULL, NULL, NULL, NULL),
                                   INVALID_HANDLE),
                                  ("NULL status", lambda e: (e.stream, NULL, NULL, NULL, NULL, NULL, NULL),
                                   INVALID_VALUE)],
    "cuGraphCreate": [("NULL out", lambda e: (NULL, c_uint(0)), INVALID_VALUE),
                      ("flags must be 0", lambda e: (e.outp, c_uint(1)), INVALID_VALUE)],
    "cuGraphDestroy": [("bad graph", lambda e: (BAD,), INVALID_HANDLE)],
    "cuGraphAddKernelNode_v2": [("bad graph", lambda e: (e.outp, BAD, NULL, c_size_t(0), e.kernel_node),
                                 INVALID_HANDLE),
                                ("NULL params", lambda e: (e.outp, e.graph, NULL, c_size_t(0), NULL), INVALID_VALUE),
                                ("bad dependency", lambda e: (e.outp, e.graph, e.bad_deps, c_size_t(1),
                                                              e.kernel_node), INVALID_HANDLE)],
    "cuGraphAddMemcpyNode": [("bad graph", lambda e: (e.outp, BAD, NULL, c_size_t(0), e.empty_copy, NULL),
                              INVALID_HANDLE),
                             ("NULL params", lambda e: (e.outp, e.graph, NULL, c_size_t(0), NULL, NULL),
                              INVALID_VALUE),
                             ("a span that overflows", lambda e: (e.outp, e.graph, NULL, c_size_t(0),
                                                                  _memcpy3d_overflowing(e.ptr.value), NULL),
                              INVALID_VALUE)],
    "cuGraphAddMemsetNode": [("element size 3", lambda e: (e.outp, e.graph, NULL, c_size_t(0), _memset_node(3),
                                                           NULL), INVALID_VALUE),
                             ("NULL params", lambda e: (e.outp, e.graph, NULL, c_size_t(0), NULL, NULL),
                              INVALID_VALUE)],
    "cuGraphAddHostNode": [("bad graph", lambda e: (e.outp, BAD, NULL, c_size_t(0), e.host_node), INVALID_HANDLE),
                           ("NULL params", lambda e: (e.outp, e.graph, NULL, c_size_t(0), NULL), INVALID_VALUE)],
    "cuGraphAddEventRecordNode": [("bad event", lambda e: (e.outp, e.graph, NULL, c_size_t(0), BAD), INVALID_HANDLE),
                                  ("bad graph", lambda e: (e.outp, BAD, NULL, c_size_t(0), e.event), INVALID_HANDLE)],
    "cuGraphAddEventWaitNode": [("bad event", lambda e: (e.outp, e.graph, NULL, c_size_t(0), BAD), INVALID_HANDLE),
                                ("bad graph", lambda e: (e.outp, BAD, NULL, c_size_t(0), e.event), INVALID_HANDLE)],
    "cuGraphAddChildGraphNode": [("bad child", lambda e: (e.outp, e.graph, NULL, c_size_t(0), BAD), INVALID_HANDLE),
                                 ("itself", lambda e: (e.outp, e.graph, NULL, c_size_t(0), e.graph), INVALID_VALUE)],
    "cuGraphAddEmptyNode": [("bad graph", lambda e: (e.outp, BAD, NULL, c_size_t(0)), INVALID_HANDLE),
                            ("NULL dependencies, count 1", lambda e: (e.outp, e.graph, NULL, c_size_t(1)),
                             INVALID_VALUE)],
    "cuGraphGetNodes": [("bad graph", lambda e: (BAD, NULL, e.outp), INVALID_HANDLE),
                        ("NULL count", lambda e: (e.graph, NULL, NULL), INVALID_VALUE)],
    "cuGraphNodeGetType": [("bad node", lambda e: (BAD, e.outp), INVALID_HANDLE),
                           ("NULL out", lambda e: (e.node, NULL), INVALID_VALUE)],
    "cuGraphDestroyNode": [("bad node", lambda e: (BAD,), INVALID_HANDLE)],
    "cuGraphClone": [("bad graph", lambda e: (e.outp, BAD), INVALID_HANDLE),
                     ("NULL out", lambda e: (NULL, e.graph), INVALID_VALUE)],
    "cuGraphNodeFindInClone": [("bad node", lambda e: (e.outp, BAD, e.graph), INVALID_HANDLE),
                               ("not a clone of its graph", lambda e: (e.outp, e.node, e.graph), INVALID_VALUE)],
    "cuGraphChildGraphNodeGetGraph": [("bad node", lambda e: (BAD, e.outp), INVALID_HANDLE),
                                      ("not a child graph node", lambda e: (e.node, e.outp), INVALID_VALUE)],
    "cuGraphNodeGetDependencies": [("bad node", lambda e: (BAD, NULL, e.outp), INVALID_HANDLE),
                                   ("NULL count", lambda e: (e.node, NULL, NULL), INVALID_VALUE)],
    "cuGraphNodeGetDependencies_v2": [("bad node", lambda e: (BAD, NULL, NULL, e.outp), INVALID_HANDLE),
                                      ("NULL count", lambda e: (e.node, NULL, NULL, NULL), INVALID_VALUE)],
    "cuGraphNodeGetDependentNodes": [("bad node", lambda e: (BAD, NULL, e.outp), INVALID_HANDLE),
                                     ("NULL count", lambda e: (e.node, NULL, NULL), INVALID_VALUE)],
    "cuGraphNodeGetDependentNodes_v2": [("bad node", lambda e: (BAD, NULL, NULL, e.outp), INVALID_HANDLE),
                                        ("NULL count", lambda e: (e.node, NULL, NULL, NULL), INVALID_VALUE)],
    "cuGraphGetEdges": [("bad graph", lambda e: (BAD, NULL, NULL, e.outp), INVALID_HANDLE),
                        ("from without to", lambda e: (e.graph, e.outp, NULL, e.outp), INVALID_VALUE)],
    "cuGraphGetEdges_v2": [("bad graph", lambda e: (BAD, NULL, NULL, NULL, e.outp), INVALID_HANDLE),
                           ("NULL count", lambda e: (e.graph, NULL, NULL, NULL, NULL), INVALID_VALUE)],
    "cuGraphKernelNodeSetParams_v2": [("bad node", lambda e: (BAD, e.kernel_node), INVALID_HANDLE),
                                      ("not a kernel node", lambda e: (e.node, e.kernel_node), INVALID_VALUE)],
    "cuGraphInstantiateWithFlags": [("bad graph", lambda e: (e.outp, BAD, c_uint64(0)), INVALID_HANDLE),
                                    ("unknown flags", lambda e: (e.outp, e.graph, c_uint64(0x100)), INVALID_VALUE)],
    "cuGraphInstantiateWithParams": [("NULL params", lambda e: (e.outp, e.graph, NULL), INVALID_VALUE)],
    "cuGraphExecDestroy": [("bad executable graph", lambda e: (BAD,), INVALID_HANDLE)],
    "cuGraphExecKernelNodeSetParams_v2": [("bad executable graph", lambda e: (BAD, e.node, e.kernel_node),
                                           INVALID_HANDLE),
                                          ("not a kernel node", lambda e: (e.exec, e.node, e.kernel_node),
                                           INVALID_VALUE)],
    "cuGraphExecUpdate_v2": [("bad executable graph", lambda e: (BAD, e.graph, e.outp), INVALID_HANDLE),
                             ("NULL result", lambda e: (e.exec, e.graph, NULL), INVALID_VALUE)],
    "cuGraphLaunch": [("bad executable graph", lambda e: (BAD, e.stream), INVALID_HANDLE),
                      ("bad stream", lambda e: (e.exec, BAD), INVALID_HANDLE)],
    "cuGraphUpload": [("bad executable graph", lambda e: (BAD, e.stream), INVALID_HANDLE),
                      ("bad stream", lambda e: (e.exec, BAD), INVALID_HANDLE)],
    "cuUserObjectCreate": [("NULL out", lambda e: (NULL, NULL, e.noop, c_uint(1), c_uint(1)), INVALID_VALUE),
                           ("flags without NO_DESTRUCTOR_SYNC", lambda e: (e.outp, NULL, e.noop, c_uint(1), c_uint(0)),
                            INVALID_VALUE)],
    "cuUserObjectRetain": [("bad object", lambda e: (BAD, c_uint(1)), INVALID_HANDLE),
                           ("count 0", lambda e: (e.user_object, c_uint(0)), INVALID_VALUE)],
    "cuUserObjectRelease": [("bad object", lambda e: (BAD, c_uint(1)), INVALID_HANDLE),
                            ("count 0", lambda e: (e.user_object, c_uint(0)), INVALID_VALUE)],
    "cuGraphAddMemAllocNode": [("bad graph", lambda e: (e.outp, BAD, NULL, c_size_t(0), byref(_alloc_node(64))),
                                INVALID_HANDLE),
                               ("zero bytes", lambda e: (e.outp, e.graph, NULL, c_size_t(0), byref(_alloc_node(0))),
                                INVALID_VALUE),
                               ("NULL params", lambda e: (e.outp, e.graph, NULL, c_size_t(0), NULL), INVALID_VALUE),
                               ("nothing current", lambda e: (e.outp, e.graph, NULL, c_size_t(0),
                                                              byref(_alloc_node(64))), INVALID_CONTEXT, "no context")],
    "cuGraphAddMemFreeNode": [("not graph memory", lambda e: (e.outp, e.graph, NULL, c_size_t(0), e.ptr), INVALID_VALUE),
                              ("NULL address", lambda e: (e.outp, e.graph, NULL, c_size_t(0), c_uint64(0)), INVALID_VALUE)],
    "cuGraphMemAllocNodeGetParams": [("bad node", lambda e: (BAD, e.outp), INVALID_HANDLE),
                                     ("not an allocation node", lambda e: (e.node, e.outp), INVALID_VALUE)],
    "cuGraphMemFreeNodeGetParams": [("bad node", lambda e: (BAD, e.outp), INVALID_HANDLE),
                                    ("not a free node", lambda e: (e.node, e.outp), INVALID_VALUE)],
    "cuDeviceGetGraphMemAttribute": [("bad device", lambda e: (DEV9, c_int(0), e.outp), INVALID_DEVICE),
                                     ("unknown attribute", lambda e: (DEV0, c_int(4), e.outp), INVALID_VALUE),
                                     ("NULL out", lambda e: (DEV0, c_int(0), NULL), INVALID_VALUE)],
    "cuDeviceSetGraphMemAttribute": [("a current figure", lambda e: (DEV0, c_int(0), byref(c_uint64(0))), INVALID_VALUE),
                                     ("a mark set above 0", lambda e: (DEV0, c_int(1), byref(c_uint64(1))),
                                      INVALID_VALUE),
                                     ("bad device", lambda e: (DEV9, c_int(1), byref(c_uint64(0))), INVALID_DEVICE)],
    "cuDeviceGraphMemTrim": [("bad device", lambda e: (DEV9,), INVALID_DEVICE)],
    "cuMemcpy3D_v2": [("NULL params", lambda e: (NULL,), INVALID_VALUE),
                      ("bad array", lambda e: (_memcpy3d_from_array(BAD),), INVALID_HANDLE)],
    "cuMemcpy3DAsync_v2": [("bad stream", lambda e: (e.empty_copy, BAD), INVALID_HANDLE),
                           ("NULL params", lambda e: (NULL, e.stream), INVALID_VALUE)],
    "cuArrayCreate_v2": [("NULL descriptor", lambda e: (e.outp, NULL), INVALID_VALUE),
                         ("3 channels", lambda e: (e.outp, byref(_array_desc(4, 4, 0x20, 3))), INVALID_VALUE),
                         ("nothing current", lambda e: (e.outp, byref(_array_desc(4, 4, 0x20, 1))), INVALID_CONTEXT,
                          "no context")],
    "cuArray3DCreate_v2": [("zero width", lambda e: (e.outp, byref(_array3d_desc(0, 4, 0, 0x20, 1))), INVALID_VALUE),
                           ("NULL out", lambda e: (NULL, byref(_array3d_desc(4, 4, 0, 0x20, 1))), INVALID_VALUE),
                           ("block-compressed format", lambda e: (e.outp, byref(_array3d_desc(4, 4, 0, 0x91, 1))),
                            NOT_SUPPORTED),
                           ("depth without height", lambda e: (e.outp, byref(_array3d_desc(4, 0, 4, 0x20, 1))),
                            INVALID_VALUE)],
    "cuArrayGetDescriptor_v2": [("bad array", lambda e: (e.outp, BAD), INVALID_HANDLE)],
    "cuArray3DGetDescriptor_v2": [("bad array", lambda e: (e.outp, BAD), INVALID_HANDLE)],
    "cuArrayDestroy": [("bad array", lambda e: (BAD,), INVALID_HANDLE)],
    "cuMipmappedArrayCreate": [("no levels", lambda e: (e.outp, byref(_array3d_desc(4, 4, 0, 0x20, 1)), c_uint(0)),
                                INVALID_VALUE),
                               ("more levels than halvings", lambda e: (e.outp, byref(_array3d_desc(4, 4, 0, 0x20, 1)),
                                                                        c_uint(4)), INVALID_VALUE),
                               ("NULL descriptor", lambda e: (e.outp, NULL, c_uint(1)), INVALID_VALUE)],
    "cuMipmappedArrayGetLevel": [("bad mipmapped array", lambda e: (e.outp, BAD, c_uint(0)), INVALID_HANDLE)],
    "cuMipmappedArrayDestroy": [("bad mipmapped array", lambda e: (BAD,), INVALID_HANDLE)],
    "cuTexObjectCreate": [("NULL resource", lambda e: (e.outp, NULL, byref(_texture_desc()), NULL), INVALID_VALUE),
                          ("bad array", lambda e: (e.outp, byref(_resource(0, BAD.value)), byref(_texture_desc()), NULL),
                           INVALID_HANDLE),
                          ("unknown resource type", lambda e: (e.outp, byref(_resource(7, 0)), byref(_texture_desc()),
                                                               NULL), INVALID_VALUE)],
    "cuTexObjectDestroy": [("bad object", lambda e: (BADPTR,), INVALID_HANDLE)],
    "cuTexObjectGetResourceDesc": [("bad object", lambda e: (e.outp, BADPTR), INVALID_HANDLE)],
    "cuTexObjectGetTextureDesc": [("bad object", lambda e: (e.outp, BADPTR), INVALID_HANDLE)],
    "cuTexObjectGetResourceViewDesc": [("bad object", lambda e: (e.outp, BADPTR), INVALID_HANDLE)],
    "cuSurfObjectCreate": [("linear memory", lambda e: (e.outp, byref(_resource(2, 0))), INVALID_VALUE),
                           ("bad array", lambda e: (e.outp, byref(_resource(0, BAD.value))), INVALID_HANDLE)],
    "cuSurfObjectDestroy": [("bad object", lambda e: (BADPTR,), INVALID_HANDLE)],
    "cuSurfObjectGetResourceDesc": [("bad object", lambda e: (e.outp, BADPTR), INVALID_HANDLE)],
    "cuGraphConditionalHandleCreate": [("bad graph", lambda e: (e.outp, BAD, NULL, c_uint(0), c_uint(0)), INVALID_HANDLE),
                                       ("unknown flags", lambda e: (e.outp, e.graph, NULL, c_uint(0), c_uint(2)),
                                        INVALID_VALUE),
                                       ("NULL out", lambda e: (NULL, e.graph, NULL, c_uint(0), c_uint(0)), INVALID_VALUE)],
    "cuGraphAddNode": [("NULL params", lambda e: (e.outp, e.graph, NULL, c_size_t(0), NULL), INVALID_VALUE),
                       ("conditional with a forged handle", lambda e: (e.outp, e.graph, NULL, c_size_t(0),
                                                                       byref(_conditional_node(BAD.value, 0, 1))),
                        INVALID_VALUE),
                       ("a kind without generic parameters here", lambda e: (e.outp, e.graph, NULL, c_size_t(0),
                                                                             byref(_node_params(5))), NOT_SUPPORTED)],
    "cuGraphAddNode_v2": [("NULL params", lambda e: (e.outp, e.graph, NULL, NULL, c_size_t(0), NULL), INVALID_VALUE),
                          ("bad graph", lambda e: (e.outp, BAD, NULL, NULL, c_size_t(0),
                                                   byref(_conditional_node(e.condition.value, 0, 1))), INVALID_HANDLE),
                          ("while with two bodies", lambda e: (e.outp, e.graph, NULL, NULL, c_size_t(0),
                                                               byref(_conditional_node(e.condition.value, 1, 2))),
                           INVALID_VALUE)],
    "cuGraphNodeGetParams": [("bad node", lambda e: (BAD, e.outp), INVALID_HANDLE),
                             ("NULL out", lambda e: (e.node, NULL), INVALID_VALUE)],
    "cuStreamBeginCaptureToGraph": [("bad graph", lambda e: (e.stream, BAD, NULL, NULL, c_size_t(0), c_int(0)),
                                     INVALID_HANDLE),
                                    ("a dependency from another graph", lambda e: (e.stream, e.other_graph,
                                                                                   byref(e.node), NULL, c_size_t(1),
                                                                                   c_int(0)), INVALID_VALUE),
                                    ("the legacy stream", lambda e: (NULL, e.graph, NULL, NULL, c_size_t(0), c_int(0)),
                                     CAPTURE_UNSUPPORTED)],
    "cuStreamUpdateCaptureDependencies": [("not capturing", lambda e: (e.stream, NULL, c_size_t(0), c_uint(0)),
                                           ILLEGAL_STATE),
                                          ("bad stream", lambda e: (BAD, NULL, c_size_t(0), c_uint(0)), INVALID_HANDLE)],
    "cuStreamUpdateCaptureDependencies_v2": [("not capturing", lambda e: (e.stream, NULL, NULL, c_size_t(0), c_uint(1)),
                                              ILLEGAL_STATE),
                                             ("unknown flags", lambda e: (e.stream, NULL, NULL, c_size_t(0), c_uint(2)),
                                              INVALID_VALUE)],
    "cuGraphKernelNodeGetParams_v2": [("bad node", lambda e: (BAD, e.outp), INVALID_HANDLE),
                                      ("not a kernel node", lambda e: (e.node, e.outp), INVALID_VALUE)],
    "cuGraphMemsetNodeGetParams": [("bad node", lambda e: (BAD, e.outp), INVALID_HANDLE),
                                   ("not a memset node", lambda e: (e.node, e.outp), INVALID_VALUE)],
    "cuGraphHostNodeGetParams": [("bad node", lambda e: (BAD, e.outp), INVALID_HANDLE),
                                 ("not a host node", lambda e: (e.node, e.outp), INVALID_VALUE)],
    "cuGraphEventRecordNodeGetEvent": [("bad node", lambda e: (BAD, e.outp), INVALID_HANDLE),
                                       ("not an event record node", lambda e: (e.node, e.outp), INVALID_VALUE)],
    "cuGraphEventWaitNodeGetEvent": [("bad node", lambda e: (BAD, e.outp), INVALID_HANDLE),
                                     ("not an event wait node", lambda e: (e.node, e.outp), INVALID_VALUE)],
    "cuGraphAddDependencies": [("bad graph", lambda e: (BAD, byref(e.node), byref(e.node), c_size_t(1)), INVALID_HANDLE),
                               ("a node on itself", lambda e: (e.graph, byref(e.node), byref(e.node), c_size_t(1)),
                                INVALID_VALUE),
                               ("NULL arrays", lambda e: (e.graph, NULL, NULL, c_size_t(1)), INVALID_VALUE)],
    "cuGraphAddDependencies_v2": [("bad node", lambda e: (e.graph, e.bad_deps, byref(e.node), NULL, c_size_t(1)),
                                   INVALID_HANDLE),
                                  ("a node of another graph", lambda e: (e.other_graph, byref(e.node), byref(e.node),
                                                                         NULL, c_size_t(1)), INVALID_VALUE)],
    "cuGraphRemoveDependencies": [("no such edge", lambda e: (e.graph, byref(e.node), byref(e.node2), c_size_t(1)),
                                   INVALID_VALUE),
                                  ("bad graph", lambda e: (BAD, byref(e.node), byref(e.node2), c_size_t(1)),
                                   INVALID_HANDLE)],
    "cuGraphRemoveDependencies_v2": [("no such edge", lambda e: (e.graph, byref(e.node2), byref(e.node), NULL,
                                                                 c_size_t(1)), INVALID_VALUE)],
    "cuGraphDebugDotPrint": [("bad graph", lambda e: (BAD, b"/tmp/x.dot", c_uint(0)), INVALID_HANDLE),
                             ("NULL path", lambda e: (e.graph, NULL, c_uint(0)), INVALID_VALUE)],
    "cuTensorMapEncodeTiled": [("NULL map", lambda e: (NULL, *_tiled_args(e, rank=1)), INVALID_VALUE),
                               ("rank 6", lambda e: (e.outp, *_tiled_args(e, rank=6)), INVALID_VALUE),
                               ("unknown data type", lambda e: (e.outp, *_tiled_args(e, rank=1, dtype=99)),
                                INVALID_VALUE)],
    "cuTensorMapEncodeIm2col": [("rank 2", lambda e: (e.outp, c_int(7), c_uint(2), c_void_p(e.ptr.value),
                                                      byref((c_uint64 * 2)(4, 4)), byref((c_uint64 * 1)(16)),
                                                      byref((c_int * 1)()), byref((c_int * 1)()), c_uint(4), c_uint(4),
                                                      byref((c_uint * 2)(1, 1)), *[c_int(0)] * 4), INVALID_VALUE)],
    "cuTensorMapReplaceAddress": [("not an encoded map", lambda e: (byref((c_uint64 * 16)()), c_void_p(e.ptr.value)),
                                   INVALID_VALUE),
                                  ("NULL map", lambda e: (NULL, c_void_p(e.ptr.value)), INVALID_VALUE)],
    "cuGraphRetainUserObject": [("bad graph", lambda e: (BAD, e.user_object, c_uint(1), c_uint(0)), INVALID_HANDLE),
                                ("bad object", lambda e: (e.graph, BAD, c_uint(1), c_uint(0)), INVALID_HANDLE)],
    "cuGraphReleaseUserObject": [("bad graph", lambda e: (BAD, e.user_object, c_uint(1)), INVALID_HANDLE),
                                 ("not held", lambda e: (e.graph, e.user_object, c_uint(1)), INVALID_VALUE)],
    "cuEventCreate": [("NULL out", lambda e: (NULL, c_uint(0)), INVALID_VALUE),
                      ("unknown flags", lambda e: (e.outp, c_uint(0x100)), INVALID_VALUE)],
    "cuEventRecord": [("bad event", lambda e: (BAD, e.stream), INVALID_HANDLE),
                      ("bad stream", lambda e: (e.event, BAD), INVALID_HANDLE)],
    "cuEventRecordWithFlags": [("bad event", lambda e: (BAD, e.stream, c_uint(0)), INVALID_HANDLE),
                               ("unknown flags", lambda e: (e.event, e.stream, c_uint(0x100)), INVALID_VALUE)],
    "cuEventQuery": [("bad event", lambda e: (BAD,), INVALID_HANDLE)],
    "cuIpcGetMemHandle": [("not an allocation", lambda e: (e.outp, BADPTR), INVALID_VALUE),
                          ("NULL out", lambda e: (NULL, e.ptr), INVALID_VALUE),
                          ("managed memory", lambda e: (e.outp, e.managed), INVALID_VALUE)],
    "cuIpcOpenMemHandle": [("zero handle", lambda e: (e.outp, IpcHandle(), c_uint(1)), INVALID_VALUE)],
    "cuIpcOpenMemHandle_v2": [("zero handle", lambda e: (e.outp, IpcHandle(), c_uint(1)), INVALID_VALUE),
                              ("NULL out", lambda e: (NULL, IpcHandle(), c_uint(1)), INVALID_VALUE),
                              ("bad flags", lambda e: (e.outp, IpcHandle(), c_uint(8)), INVALID_VALUE)],
    "cuIpcCloseMemHandle": [("not an opened handle", lambda e: (e.ptr,), INVALID_VALUE)],
    "cuIpcGetEventHandle": [("bad event", lambda e: (e.outp, BAD), INVALID_HANDLE),
                            ("not interprocess", lambda e: (e.outp, e.event), INVALID_VALUE)],
    "cuIpcOpenEventHandle": [("zero handle", lambda e: (e.outp, IpcHandle()), INVALID_VALUE),
                             ("NULL out", lambda e: (NULL, IpcHandle()), INVALID_VALUE)],
    "cuEventSynchronize": [("bad event", lambda e: (BAD,), INVALID_HANDLE)],
    "cuEventDestroy_v2": [("bad event", lambda e: (BAD,), INVALID_HANDLE)],
    "cuEventElapsedTime": [("bad event", lambda e: (e.outp, BAD, e.event), INVALID_HANDLE),
                           ("NULL out", lambda e: (NULL, e.event, e.event), INVALID_VALUE)],
    "cuEventElapsedTime_v2": [("bad event", lambda e: (e.outp, e.event, BAD), INVALID_HANDLE),
                              ("NULL out", lambda e: (NULL, e.event, e.event), INVALID_VALUE)],
    "cuModuleLoad": [("missing file", lambda e: (e.outp, b"/nonexistent/x.ptx"), FILE_NOT_FOUND),
                     ("NULL out", lambda e: (NULL, b"/nonexistent/x.ptx"), INVALID_VALUE)],
    "cuModuleLoadData": [("not PTX", lambda e: (e.outp, b"not ptx\0"), INVALID_PTX),
                         ("NULL image", lambda e: (e.outp, NULL), INVALID_VALUE)],
    "cuModuleLoadDataEx": [("not PTX", lambda e: (e.outp, b"not ptx\0", c_uint(0), NULL, NULL), INVALID_PTX),
                           ("NULL image", lambda e: (e.outp, NULL, c_uint(0), NULL, NULL), INVALID_VALUE)],
    "cuModuleGetLoadingMode": [("NULL mode", lambda e: (NULL,), INVALID_VALUE)],
    "cuModuleLoadFatBinary": [("not PTX", lambda e: (e.outp, b"not ptx\0"), INVALID_PTX),
                              ("SASS only", lambda e: (e.outp, _sass_only_fatbin()), NO_BINARY_FOR_GPU)],
    "cuLibraryLoadFromFile": [("missing file", lambda e: (e.outp, b"/nonexistent/x.ptx", NULL, NULL, c_uint(0), NULL,
                                                          NULL, c_uint(0)), FILE_NOT_FOUND),
                              ("NULL path", lambda e: (e.outp, NULL, NULL, NULL, c_uint(0), NULL, NULL, c_uint(0)),
                               INVALID_VALUE)],
    "cuLinkCreate_v2": [("NULL out", lambda e: (c_uint(0), NULL, NULL, NULL), INVALID_VALUE),
                        ("options without values", lambda e: (c_uint(1), NULL, NULL, e.outp), INVALID_VALUE),
                        ("nothing current", lambda e: (c_uint(0), NULL, NULL, e.outp), INVALID_CONTEXT, "no context")],
    "cuLinkAddData_v2": [("bad link state", lambda e: (BAD, c_int(1), b"x", c_size_t(1), NULL, c_uint(0), NULL, NULL),
                          INVALID_HANDLE),
                         ("PTX given as a cubin", lambda e: (e.link, c_int(0), b"// ptx\0", c_size_t(7), NULL,
                                                             c_uint(0), NULL, NULL), INVALID_IMAGE),
                         ("NVVM IR", lambda e: (e.link, c_int(5), b"x", c_size_t(1), NULL, c_uint(0), NULL, NULL),
                          NOT_SUPPORTED)],
    "cuLinkAddFile_v2": [("bad link state", lambda e: (BAD, c_int(1), b"/nonexistent", c_uint(0), NULL, NULL),
                          INVALID_HANDLE),
                         ("missing file", lambda e: (e.link, c_int(1), b"/nonexistent/x.ptx", c_uint(0), NULL, NULL),
                          FILE_NOT_FOUND)],
    "cuLinkComplete": [("bad link state", lambda e: (BAD, e.outp, e.outp), INVALID_HANDLE),
                       ("NULL out", lambda e: (e.link, NULL, NULL), INVALID_VALUE)],
    "cuLinkDestroy": [("bad link state", lambda e: (BAD,), INVALID_HANDLE)],
    "cuModuleUnload": [("bad module", lambda e: (BAD,), INVALID_HANDLE)],
    "cuModuleGetFunction": [("bad module", lambda e: (e.outp, BAD, b"touch"), INVALID_HANDLE),
                            ("missing name", lambda e: (e.outp, e.mod, b"nope"), NOT_FOUND),
                            ("NULL name", lambda e: (e.outp, e.mod, NULL), INVALID_VALUE)],
    "cuModuleGetGlobal_v2": [("bad module", lambda e: (e.outp, e.outp, BAD, b"counter"), INVALID_HANDLE),
                             ("missing name", lambda e: (e.outp, e.outp, e.mod, b"nope"), NOT_FOUND)],
    "cuLibraryLoadData": [("not PTX", lambda e: (e.outp, b"not ptx\0", NULL, NULL, c_uint(0), NULL, NULL, c_uint(0)),
                           INVALID_PTX),
                          ("NULL code", lambda e: (e.outp, NULL, NULL, NULL, c_uint(0), NULL, NULL, c_uint(0)),
                           INVALID_VALUE)],
    "cuLibraryUnload": [("bad library", lambda e: (BAD,), INVALID_HANDLE)],
    "cuLibraryGetKernel": [("bad library", lambda e: (e.outp, BAD, b"touch"), INVALID_HANDLE)],
    "cuLibraryGetModule": [("bad library", lambda e: (e.outp, BAD), INVALID_HANDLE)],
    "cuLibraryGetGlobal": [("bad library", lambda e: (e.outp, e.outp, BAD, b"counter"), INVALID_HANDLE)],
    "cuKernelGetFunction": [("bad kernel", lambda e: (e.outp, BAD), INVALID_HANDLE),
                            ("NULL out", lambda e: (NULL, e.fn), INVALID_VALUE)],
    "cuKernelGetLibrary": [("bad kernel", lambda e: (e.outp, BAD), INVALID_HANDLE),
                           ("NULL out", lambda e: (NULL, e.fn), INVALID_VALUE),
                           ("a function of a context's module", lambda e: (e.outp, e.fn), INVALID_HANDLE)],
    "cuKernelGetAttribute": [("bad kernel", lambda e: (e.outp, c_int(0), BAD, DEV0), INVALID_HANDLE),
                             ("bad device", lambda e: (e.outp, c_int(0), e.fn, DEV9), INVALID_DEVICE)],
    "cuKernelSetAttribute": [("bad kernel", lambda e: (c_int(8), c_int(0), BAD, DEV0), INVALID_HANDLE),
                             ("too much shared", lambda e: (c_int(8), c_int(1 << 30), e.fn, DEV0), INVALID_VALUE)],
    "cuKernelGetParamInfo": [("bad kernel", lambda e: (BAD, c_size_t(0), e.outp, NULL), INVALID_HANDLE),
                             ("index past the last", lambda e: (e.fn, c_size_t(1), e.outp, NULL), INVALID_VALUE),
                             ("NULL offset", lambda e: (e.fn, c_size_t(0), NULL, e.outp), INVALID_VALUE)],
    "cuFuncGetParamInfo": [("bad function", lambda e: (BAD, c_size_t(0), e.outp, NULL), INVALID_HANDLE),
                           ("index past the last", lambda e: (e.fn, c_size_t(1), e.outp, NULL), INVALID_VALUE)],
    "cuFuncGetAttribute": [("bad function", lambda e: (e.outp, c_int(0), BAD), INVALID_HANDLE),
                           ("unknown attribute", lambda e: (e.outp, c_int(99), e.fn), INVALID_VALUE),
                           ("NULL out", lambda e: (NULL, c_int(0), e.fn), INVALID_VALUE)],
    "cuFuncSetAttribute": [("bad function", lambda e: (BAD, c_int(8), c_int(0)), INVALID_HANDLE),
                           ("unknown attribute", lambda e: (e.fn, c_int(99), c_int(0)), INVALID_VALUE)],
    "cuFuncSetCacheConfig": [("bad function", lambda e: (BAD, c_int(0)), INVALID_HANDLE),
                             ("unknown config", lambda e: (e.fn, c_int(99)), INVALID_VALUE)],
    "cuKernelSetCacheConfig": [("bad kernel", lambda e: (BAD, c_int(0), DEV0), INVALID_HANDLE),
                               ("unknown config", lambda e: (e.fn, c_int(99), DEV0), INVALID_VALUE),
                               ("device 1", lambda e: (e.fn, c_int(0), c_int(1)), INVALID_DEVICE)],
    "cuFuncSetSharedMemConfig": [("bad function", lambda e: (BAD, c_int(0)), INVALID_HANDLE),
                                 ("unknown config", lambda e: (e.fn, c_int(99)), INVALID_VALUE)],
    "cuFuncGetName": [("bad function", lambda e: (e.outp, BAD), INVALID_HANDLE),
                      ("NULL function", lambda e: (e.outp, NULL), INVALID_VALUE),
                      ("NULL out", lambda e: (NULL, e.fn), INVALID_VALUE)],
    "cuKernelGetName": [("bad kernel", lambda e: (e.outp, BAD), INVALID_HANDLE),
                        ("NULL kernel", lambda e: (e.outp, NULL), INVALID_VALUE),
                        ("NULL out", lambda e: (NULL, e.fn), INVALID_VALUE)],
    "cuFuncGetModule": [("bad function", lambda e: (e.outp, BAD), INVALID_HANDLE),
                        ("NULL out", lambda e: (NULL, e.fn), INVALID_VALUE)],
    "cuLaunchKernel": [("bad function", lambda e: (BAD, *[c_uint(1)] * 6, c_uint(0), e.stream, e.params, NULL),
                        INVALID_HANDLE),
                       ("block of 0", lambda e: (e.fn, *[c_uint(1)] * 3, c_uint(0), c_uint(1), c_uint(1), c_uint(0),
                                                 e.stream, e.params, NULL), INVALID_VALUE),
                       ("bad stream", lambda e: (e.fn, *[c_uint(1)] * 6, c_uint(0), BAD, e.params, NULL),
                        INVALID_HANDLE),
                       ("no parameters", lambda e: (e.fn, *[c_uint(1)] * 6, c_uint(0), e.stream, NULL, NULL),
                        INVALID_VALUE)],
    "cuLaunchCooperativeKernel": [("bad function", lambda e: (BAD, *[c_uint(1)] * 6, c_uint(0), e.stream, e.params),
                                   INVALID_HANDLE)],
    "cuLaunchKernelEx": [("NULL config", lambda e: (NULL, e.fn, e.params, NULL), INVALID_VALUE),
                         ("bad function", lambda e: (_config(), BAD, e.params, NULL), INVALID_HANDLE),
                         ("block of 0", lambda e: (_config(block=0), e.fn, e.params, NULL), INVALID_VALUE),
                         ("attributes NULL, count 2", lambda e: (_config(nattrs=2), e.fn, e.params, NULL),
                          INVALID_VALUE)],
    "cuOccupancyMaxActiveBlocksPerMultiprocessor": [
        ("bad function", lambda e: (e.outp, BAD, c_int(128), c_size_t(0)), INVALID_HANDLE),
        ("NULL out", lambda e: (NULL, e.fn, c_int(128), c_size_t(0)), INVALID_VALUE)],
    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags": [
        ("bad function", lambda e: (e.outp, BAD, c_int(128), c_size_t(0), c_uint(0)), INVALID_HANDLE),
        ("NULL out", lambda e: (NULL, e.fn, c_int(128), c_size_t(0), c_uint(0)), INVALID_VALUE)],
    "cuOccupancyMaxPotentialBlockSize": [
        ("bad function", lambda e: (e.outp, e.outp, BAD, NULL, c_size_t(0), c_int(0)), INVALID_HANDLE),
        ("NULL out", lambda e: (NULL, NULL, e.fn, NULL, c_size_t(0), c_int(0)), INVALID_VALUE)],
    "cuOccupancyMaxPotentialClusterSize": [("bad function", lambda e: (e.outp, BAD, _config()), INVALID_HANDLE),
                                           ("NULL config", lambda e: (e.outp, e.fn, NULL), INVALID_VALUE)],
    "cuOccupancyMaxActiveClusters": [("bad function", lambda e: (e.outp, BAD, _config()), INVALID_HANDLE),
                                     ("block of 0", lambda e: (e.outp, e.fn, _config(block=0)), INVALID_VALUE),
                                     ("NULL out", lambda e: (NULL, e.fn, _config()), INVALID_VALUE)],
    "cuOccupancyAvailableDynamicSMemPerBlock": [
        ("bad function", lambda e: (e.outp, BAD, c_int(1), c_int(128)), INVALID_HANDLE),
        ("NULL out", lambda e: (NULL, e.fn, c_int(1), c_int(128)), INVALID_VALUE)],
}

ROWS = [(name, case) for name, cases in CASES.items() for case in cases]


@pytest.fixture
def env(cuda):
    return Env(cuda)


def _call(env, name, args, no_context):
    fn = getattr(env.lib, name)
    fn.restype = c_int
    if not no_context:
        return fn(*args)
    result = []
    t = threading.Thread(target=lambda: result.append(fn(*args)))  # a new thread has no current context
    t.start()
    t.join()
    return result[0]


@pytest.mark.parametrize("name,case", ROWS, ids=[f"{n}-{c[0]}" for n, c in ROWS])
def test_error_path(env, cuda, name, case):
    why, args, expected, *where = case
    got = _call(env, name, args(env), no_context=bool(where))
    assert got == expected, f"{name} ({why}): got {got}, expected {expected}"
    # the error left the context usable
    assert cuda.err(cuda.d.cuCtxSynchronize()) == cuda.d.CUresult.CUDA_SUCCESS


def test_every_entry_point_has_a_case(fake):
    missing = sorted(set(fake.entry_points()) - set(CASES))
    assert not missing, f"implemented entry points without an error-path case: {missing}"
    unknown = sorted(set(CASES) - set(fake.entry_points()))
    assert not unknown, f"cases for entry points the fake does not implement: {unknown}"
