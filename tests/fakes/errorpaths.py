"""What the error-path tables share (tests/fakes/errorcases_*.py, run by test_error_paths.py): the CUresult
codes the rows expect, forged handles, ``Env`` (valid objects to combine with one bad argument), the ctypes
structures and builders the rows pass, and ``call`` (one row's call, in a thread without a context when the row
asks for none)."""

import ctypes
import struct
import threading
from ctypes import byref, c_int, c_size_t, c_uint, c_uint64, c_void_p

import numpy as np

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
        self.empty_copy = byref(memcpy3d_device_to_device())
        self.host_node = byref((c_void_p * 2)(ctypes.cast(self.noop, c_void_p).value, None))
        self.link = c_void_p(int(cuda.ok(d.cuLinkCreate(0, [], []))))
        self.node2 = c_void_p(int(cuda.ok(d.cuGraphAddEmptyNode(self.graph.value, None, 0))))
        self.other_graph = c_void_p(int(cuda.ok(d.cuGraphCreate(0))))
        self.condition = c_uint64(int(cuda.ok(d.cuGraphConditionalHandleCreate(self.graph.value, cuda.ctx, 0, 0))))
        self.user_object = c_void_p(int(cuda.ok(d.cuUserObjectCreate(0, ctypes.cast(self.noop, c_void_p).value, 1, 1))))


SM_RESOURCE, INVALID_RESOURCE_TYPE = 1, 914  # CU_DEV_RESOURCE_TYPE_SM, CUDA_ERROR_INVALID_RESOURCE_TYPE
RESOURCE_BYTES = 144  # sizeof(CUdevResource), RESOURCE_ABI_VERSION 1


def zeroed_resource():
    return ctypes.create_string_buffer(RESOURCE_BYTES)


def sm_resource(e):
    """The device's SM resource, as cuDeviceGetDevResource fills it."""
    r = zeroed_resource()
    assert e.lib.cuDeviceGetDevResource(0, r, SM_RESOURCE) == SUCCESS
    return r


def group_params():
    return ctypes.create_string_buffer(64)  # one zeroed CU_DEV_SM_RESOURCE_GROUP_PARAMS


class LaunchConfig(ctypes.Structure):
    _fields_ = [("grid", c_uint * 3), ("block", c_uint * 3), ("shared", c_uint), ("stream", c_void_p),
                ("attrs", c_void_p), ("nattrs", c_uint)]


class KernelNodeParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2
    _fields_ = [("func", c_void_p), ("grid", c_uint * 3), ("block", c_uint * 3), ("shared", c_uint),
                ("params", c_void_p), ("extra", c_void_p), ("kern", c_void_p), ("ctx", c_void_p)]


def memcpy3d_device_to_device():
    """A CUDA_MEMCPY3D (25 eight-byte words) of zero bytes between device memory types."""
    words = (c_uint64 * 25)()
    words[4] = words[15] = 2  # srcMemoryType, dstMemoryType: CU_MEMORYTYPE_DEVICE
    return words


def sass_only_fatbin():
    """A fatbin whose one entry is machine code (kind 2, sm_90)."""
    entry = struct.pack("<HHIQIIHHIIIQQQ", 2, 0x0101, 64, 8, 0, 0, 0, 9, 90, 0, 0, 0, 0, 0) + bytes(8)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(entry)) + entry


def memcpy3d_overflowing(ptr):
    """A device-to-device CUDA_MEMCPY3D whose rows reach past the end of the address space."""
    words = memcpy3d_device_to_device()
    words[6] = words[17] = ptr  # srcDevice, dstDevice
    words[9] = words[20] = 2    # srcPitch, dstPitch
    words[22], words[23], words[24] = 1, 2 ** 62, 1  # WidthInBytes, Height, Depth
    return byref(words)


def memset_node(element_size):
    return byref((c_uint64 * 5)(0, 0, element_size << 32, 1, 1))  # dst, pitch, value|elementSize, width, height


def alloc_node(nbytes):
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


def pool_props(alloc_type, location_type, location_id=0, handle_types=0):
    """A CUmemPoolProps (88 bytes): allocType, handleTypes, location, then zeros."""
    words = (c_int * 22)()
    words[0], words[1], words[2], words[3] = alloc_type, handle_types, location_type, location_id
    return byref(words)


def batch(e, ptr, nlocs=1, first=0):
    """cuMemPrefetchBatchAsync's arguments for one 256-byte range at ptr, nlocs locations from index first."""
    return (byref(c_uint64(ptr.value)), byref(c_size_t(256)), c_size_t(1), byref((Location * 2)(DEVICE0, DEVICE0)),
            byref((c_size_t * 2)(first, first + 1)), c_size_t(nlocs), c_uint64(0), e.stream)


def array_desc(width, height, fmt, channels):
    """A CUDA_ARRAY_DESCRIPTOR: Width, Height, Format | NumChannels << 32."""
    return (c_uint64 * 3)(width, height, fmt | channels << 32)


def array3d_desc(width, height, depth, fmt, channels, flags=0):
    """A CUDA_ARRAY3D_DESCRIPTOR: Width, Height, Depth, Format | NumChannels << 32, Flags."""
    return (c_uint64 * 5)(width, height, depth, fmt | channels << 32, flags)


def memcpy3d_from_array(array):
    """A one-byte CUDA_MEMCPY3D from a CUDA array (srcMemoryType 3, srcArray) to device memory."""
    words = memcpy3d_device_to_device()
    words[4], words[7] = 3, array.value
    words[22] = words[23] = words[24] = 1
    return byref(words)


def resource(kind, handle):
    """A CUDA_RESOURCE_DESC (144 bytes): resType, then the array (or other) handle."""
    words = (c_uint64 * 18)()
    words[0], words[1] = kind, handle
    return words


def texture_desc():
    return (c_uint * 26)()  # CUDA_TEXTURE_DESC, all defaults: wrap, point filtering


def node_params(kind):
    """A CUgraphNodeParams (256 bytes) of that node type, its parameters all zero."""
    words = (c_uint64 * 32)()
    words[0] = kind
    return words


def conditional_node(handle, kind, size):
    """A CUgraphNodeParams for a conditional node: type 13, then handle, kind | size << 32."""
    words = node_params(13)
    words[2], words[3] = handle, kind | size << 32
    return words


def tiled_args(e, rank, dtype=7):
    """cuTensorMapEncodeTiled's arguments after the map: a float32 map of e.ptr, box 16 x 1 x ..."""
    return (c_int(dtype), c_uint(rank), c_void_p(e.ptr.value), byref((c_uint64 * 6)(*[16] * 6)),
            byref((c_uint64 * 5)(*[64] * 5)), byref((c_uint * 6)(*[16] * 6)), byref((c_uint * 6)(*[1] * 6)),
            *[c_int(0)] * 4)


def config(block=1, attrs=None, nattrs=0):
    return byref(LaunchConfig((c_uint * 3)(1, 1, 1), (c_uint * 3)(block, 1, 1), 0, None, attrs, nattrs))


def call(env, name, args, no_context):
    fn = getattr(env.lib, name)
    fn.restype = c_int
    if not no_context:
        return fn(*args)
    result = []
    t = threading.Thread(target=lambda: result.append(fn(*args)))  # a new thread has no current context
    t.start()
    t.join()
    return result[0]

