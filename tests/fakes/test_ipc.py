"""Interprocess memory and events on the fake (fakes/cuda/ipc.c): a second process opens what this one
exports, reads it, writes back and runs a kernel on it; events complete across processes; handles that are
garbage, tampered with, of freed memory, of a dead process or opened by their own process are refused with
the real driver's codes."""

import ctypes
import subprocess
import sys
import textwrap
import threading

import numpy as np

from ironaccel import fakes

SUCCESS, INVALID_VALUE, INVALID_CONTEXT, INVALID_HANDLE, NOT_READY = 0, 1, 201, 400, 600
LAZY_PEER = 1
EVENT_FLAGS = 0x2 | 0x4  # CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS

INCREMENT = r'''
extern "C" __global__ void inc(unsigned* p, unsigned n) { unsigned i = threadIdx.x; if (i < n) p[i] += 1000; }
'''

# The child: a context on the fake, and helpers to turn hex back into handles.
PRELUDE = '''
import ctypes, sys
import numpy as np
from cuda.bindings import driver as d
assert d.cuInit(0)[0] == 0
ctx = d.cuCtxCreate(None, 0, 0)[1]
def handle(cls, hexed):
    h = cls()
    ctypes.memmove(h.getPtr(), bytes.fromhex(hexed), 64)
    return h
'''


def raw(h) -> bytes:
    return ctypes.string_at(h.getPtr(), 64)


def handle(cls, data: bytes):
    h = cls()
    ctypes.memmove(h.getPtr(), data, 64)
    return h


def child(code: str, *args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(code), *args], env=fakes.child_env(),
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def finish(p: subprocess.Popen) -> str:
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    return out


def test_child_opens_reads_writes_back_and_runs_a_kernel(cuda, tmp_path):
    d = cuda.d
    data = np.arange(256, dtype=np.uint32)
    ptr = cuda.upload(data)
    h = cuda.ok(d.cuIpcGetMemHandle(ptr))
    ptx = tmp_path / "inc.ptx"
    ptx.write_bytes(cuda.ptx(INCREMENT))
    out = finish(child('''
        h = handle(d.CUipcMemHandle, sys.argv[1])
        err, p = d.cuIpcOpenMemHandle(h, 1)
        assert err == 0, err
        assert int(d.cuIpcOpenMemHandle(h, 1)[1]) == int(p)  # a second open: the same address, counted
        assert d.cuIpcCloseMemHandle(p)[0] == 0
        got = np.empty(256, np.uint32)
        assert d.cuMemcpyDtoH(got, p, got.nbytes)[0] == 0
        print(int(got.sum()))
        fn = d.cuModuleGetFunction(d.cuModuleLoadData(open(sys.argv[2], "rb").read())[1], b"inc")[1]
        box = [np.array([int(p)], np.uint64), np.array([256], np.uint32)]
        args = np.array([b.ctypes.data for b in box], np.uint64)
        assert d.cuLaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, 0, args.ctypes.data, 0)[0] == 0
        assert d.cuCtxSynchronize()[0] == 0
        assert d.cuMemsetD32(int(p), 7, 1)[0] == 0
        assert d.cuIpcCloseMemHandle(p)[0] == 0
        assert d.cuIpcCloseMemHandle(p)[0] == 1  # closed: no longer an opened mapping
        p = d.cuIpcOpenMemHandle(h, 1)[1]  # the memory checker knows the mapping's end: one element past it
        box[0][0], box[1][0] = int(p) + 1024, 1
        assert d.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, args.ctypes.data, 0)[0] == 0
        print(int(d.cuCtxSynchronize()[0]))
    ''', raw(h).hex(), str(ptx)))
    total, past_the_end = (int(x) for x in out.split())
    assert total == int(data.sum())
    assert past_the_end == 700  # CUDA_ERROR_ILLEGAL_ADDRESS
    expected = data + 1000
    expected[0] = 7
    np.testing.assert_array_equal(cuda.download(ptr, data), expected)
    assert cuda.ok(d.cuIpcGetMemHandle(ptr)) is not None  # exporting again: the same file


def test_hostile_memory_handles(cuda):
    d = cuda.d
    ptr = cuda.upload(np.arange(64, dtype=np.uint32))
    good = raw(cuda.ok(d.cuIpcGetMemHandle(ptr)))
    tampered = bytearray(good)
    tampered[16] ^= 1
    freed = int(cuda.ok(d.cuMemAlloc(4096)))
    freed_handle = raw(cuda.ok(d.cuIpcGetMemHandle(freed)))
    cuda.ok(d.cuMemFree(freed))
    out = finish(child('''
        for hexed in sys.argv[1:]:
            print(int(d.cuIpcOpenMemHandle(handle(d.CUipcMemHandle, hexed), 1)[0]))
        print(int(d.cuIpcOpenMemHandle(handle(d.CUipcMemHandle, sys.argv[1]), 2)[0]))
    ''', bytes(64).hex(), bytes(range(64)).hex(), bytes(tampered).hex(), freed_handle.hex()))
    assert [int(x) for x in out.split()] == [INVALID_VALUE, INVALID_VALUE, INVALID_VALUE, INVALID_HANDLE,
                                               INVALID_VALUE]
    # the process that exported it, a dead exporter, a pointer that is not an opened mapping
    assert cuda.err(d.cuIpcOpenMemHandle(handle(d.CUipcMemHandle, good), LAZY_PEER)) == INVALID_CONTEXT
    dead = finish(child('''
        p = d.cuMemAlloc(4096)[1]
        h = d.cuIpcGetMemHandle(p)[1]  # held: string_at reads it after getPtr() returns
        print(bytes(ctypes.string_at(h.getPtr(), 64)).hex())
    ''')).strip()
    assert cuda.err(d.cuIpcOpenMemHandle(handle(d.CUipcMemHandle, bytes.fromhex(dead)), LAZY_PEER)) == \
        INVALID_HANDLE
    assert cuda.err(d.cuIpcCloseMemHandle(ptr)) == INVALID_VALUE
    managed = int(cuda.ok(d.cuMemAllocManaged(256, 1)))
    cuda.allocs.append(managed)
    assert cuda.err(d.cuIpcGetMemHandle(managed)) == INVALID_VALUE
    assert cuda.err(d.cuIpcGetMemHandle(0xDEAD0000)) == INVALID_VALUE


def test_event_completes_across_processes(cuda):
    d = cuda.d
    event = cuda.ok(d.cuEventCreate(EVENT_FLAGS))
    stream = cuda.ok(d.cuStreamCreate(0))
    gate = threading.Event()
    hold = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: gate.wait(60))  # holds the stream until released
    cuda.ok(d.cuLaunchHostFunc(stream, d.CUhostFn(ctypes.cast(hold, ctypes.c_void_p).value), 0))
    cuda.ok(d.cuEventRecord(event, stream))
    p = child('''
        e = d.cuIpcOpenEventHandle(handle(d.CUipcEventHandle, sys.argv[1]))[1]
        print(int(d.cuEventQuery(e)[0]), flush=True)
        s = d.cuStreamCreate(0)[1]
        assert d.cuStreamWaitEvent(s, e, 0)[0] == 0
        assert d.cuStreamSynchronize(s)[0] == 0
        print(int(d.cuEventQuery(e)[0]), int(d.cuEventSynchronize(e)[0]))
        assert d.cuEventRecord(e, s)[0] == 0  # the opener may record it too
        assert d.cuEventSynchronize(e)[0] == 0
        assert d.cuEventDestroy(e)[0] == 0
    ''', raw(cuda.ok(d.cuIpcGetEventHandle(event))).hex(), stdin=subprocess.DEVNULL)
    try:
        assert int(p.stdout.readline()) == NOT_READY  # the exporter's stream is still held
    finally:
        gate.set()
    assert [int(x) for x in finish(p).split()] == [SUCCESS, SUCCESS]
    cuda.ok(d.cuEventSynchronize(event))
    cuda.ok(d.cuStreamDestroy(stream))
    cuda.ok(d.cuEventDestroy(event))


def test_event_handle_needs_an_interprocess_event(cuda):
    d = cuda.d
    attr = d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED
    assert cuda.ok(d.cuDeviceGetAttribute(attr, 0)) == 1
    plain = cuda.ok(d.cuEventCreate(0x2))
    assert cuda.err(d.cuIpcGetEventHandle(plain)) == INVALID_VALUE
    assert cuda.err(d.cuEventCreate(0x4)) == INVALID_VALUE  # interprocess events must disable timing
    shared = cuda.ok(d.cuEventCreate(EVENT_FLAGS))
    good = raw(cuda.ok(d.cuIpcGetEventHandle(shared)))
    assert cuda.err(d.cuIpcOpenEventHandle(handle(d.CUipcEventHandle, good))) == INVALID_CONTEXT
    assert cuda.err(d.cuIpcOpenEventHandle(handle(d.CUipcEventHandle, bytes(64)))) == INVALID_VALUE
    mem = raw(cuda.ok(d.cuIpcGetMemHandle(cuda.alloc(64))))  # a memory handle is not an event handle
    assert cuda.err(d.cuIpcOpenEventHandle(handle(d.CUipcEventHandle, mem))) == INVALID_VALUE
    for e in (plain, shared):
        cuda.ok(d.cuEventDestroy(e))
