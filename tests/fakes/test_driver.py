"""Driver API behaviour of the fake: errors for bad handles and sizes, memcheck, faults, streams, leaks."""

import ctypes
import os
import subprocess
import threading
import sys
import textwrap

import numpy as np
import pytest

from ironaccel import fakes

OOB = r'''
extern "C" __global__ void write_at(unsigned* p, unsigned index) { if (threadIdx.x == 0) p[index] = 1; }
extern "C" __global__ void spin(unsigned* out, unsigned iters)
{ unsigned v = threadIdx.x; for (unsigned k = 0; k < iters; k++) v = v * 1664525u + 1013904223u; out[threadIdx.x] = v; }
'''


def test_identity_and_device(fake, cuda):
    d = cuda.d
    assert fake.identity() == fakes.IDENTITY
    name = cuda.ok(d.cuDeviceGetName(128, 0)).split(b"\0")[0].decode()
    assert "simulated" in name
    major = cuda.ok(d.cuDeviceGetAttribute(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0))
    assert major == 9
    assert cuda.ok(d.cuDeviceGetAttribute(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0)) == 32
    assert cuda.err(d.cuDeviceGet(1)) == d.CUresult.CUDA_ERROR_INVALID_DEVICE
    assert cuda.ok(d.cuGetErrorName(d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS)) == b"CUDA_ERROR_ILLEGAL_ADDRESS"
    free, total = cuda.ok(d.cuMemGetInfo())
    assert 0 < free <= total


def test_bad_handles_and_sizes(cuda):
    d = cuda.d
    E = d.CUresult
    assert cuda.err(d.cuMemAlloc(0)) == E.CUDA_ERROR_INVALID_VALUE
    assert cuda.err(d.cuMemFree(0xDEAD0000)) == E.CUDA_ERROR_INVALID_VALUE
    p = cuda.alloc(64)
    assert cuda.err(d.cuMemcpyHtoD(p, np.zeros(17, np.float32), 68)) == E.CUDA_ERROR_INVALID_VALUE
    assert cuda.err(d.cuMemsetD32(p + 4, 0, 16)) == E.CUDA_ERROR_INVALID_VALUE
    assert cuda.err(d.cuStreamSynchronize(d.CUstream(0x1234560))) == E.CUDA_ERROR_INVALID_HANDLE
    assert cuda.err(d.cuEventQuery(d.CUevent(0x1234560))) == E.CUDA_ERROR_INVALID_HANDLE
    assert cuda.err(d.cuModuleGetFunction(d.CUmodule(0x1234560), b"x")) == E.CUDA_ERROR_INVALID_HANDLE
    mod = cuda.module(OOB)
    assert cuda.err(d.cuModuleGetFunction(mod, b"missing")) == E.CUDA_ERROR_NOT_FOUND
    f = cuda.ok(d.cuModuleGetFunction(mod, b"write_at"))
    ptrs, boxes = cuda.args(p, np.uint32(0))
    assert cuda.err(d.cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, 0, ptrs.ctypes.data, 0)) == E.CUDA_ERROR_INVALID_VALUE
    assert cuda.err(d.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 1 << 20, 0, ptrs.ctypes.data, 0)) == E.CUDA_ERROR_INVALID_VALUE
    assert cuda.err(d.cuModuleLoadData(b"not ptx at all\0")) == E.CUDA_ERROR_INVALID_PTX
    assert cuda.ok(d.cuFuncGetAttribute(d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f)) == 1024


def test_unsupported_instruction_fails_load_with_line(cuda, capfd):
    ptx = b".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\tfrobnicate.b32 %r1;\n}\n\0"
    assert cuda.err(cuda.d.cuModuleLoadData(ptx)) == cuda.d.CUresult.CUDA_ERROR_INVALID_PTX


@pytest.mark.parametrize("index", [16, 1 << 20])
def test_memcheck_out_of_bounds_write_is_sticky(cuda, index):
    d = cuda.d
    f = cuda.ok(d.cuModuleGetFunction(cuda.module(OOB), b"write_at"))
    p = cuda.alloc(64)
    ptrs, boxes = cuda.args(p, np.uint32(index))
    cuda.ok(d.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, 0, ptrs.ctypes.data, 0))
    assert cuda.err(d.cuCtxSynchronize()) == d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    report = cuda.control.last_report()
    assert "write_at" in report and "block (0,0,0), thread (0,0,0)" in report and "write" in report
    assert cuda.err(d.cuMemAlloc(16)) == d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS  # sticky


def test_memcheck_use_after_free(cuda):
    d = cuda.d
    f = cuda.ok(d.cuModuleGetFunction(cuda.module(OOB), b"write_at"))
    p = int(cuda.ok(d.cuMemAlloc(64)))
    cuda.ok(d.cuMemFree(p))
    ptrs, boxes = cuda.args(p, np.uint32(0))
    cuda.ok(d.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, ptrs.ctypes.data, 0))
    assert cuda.err(d.cuCtxSynchronize()) == d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    assert "use after free" in cuda.control.last_report()


@pytest.mark.parametrize("entry, call", [
    ("cuMemAlloc_v2", lambda d: d.cuMemAlloc(64)),
    ("cuMemcpyHtoD_v2", None),
    ("cuStreamCreate", lambda d: d.cuStreamCreate(0)),
    ("cuEventCreate", lambda d: d.cuEventCreate(0)),
    ("cuModuleLoadData", None),
    ("cuLaunchKernel", None),
])
def test_fault_injection_per_entry_point_class(cuda, entry, call):
    d = cuda.d
    code = d.CUresult.CUDA_ERROR_OUT_OF_MEMORY
    before = cuda.control.call_count(entry)
    p = cuda.alloc(64)
    mod = cuda.module(OOB)
    f = cuda.ok(d.cuModuleGetFunction(mod, b"write_at"))
    ptrs, boxes = cuda.args(p, np.uint32(0))
    calls = {
        "cuMemcpyHtoD_v2": lambda d: d.cuMemcpyHtoD(p, np.zeros(4, np.uint32), 16),
        "cuModuleLoadData": lambda d: d.cuModuleLoadData(cuda.ptx(OOB)),
        "cuLaunchKernel": lambda d: d.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, ptrs.ctypes.data, 0),
    }
    call = call or calls[entry]
    cuda.control.inject(entry, 2, int(code))
    first = call(d)
    assert cuda.err(first) == d.CUresult.CUDA_SUCCESS
    assert cuda.err(call(d)) == code
    assert cuda.err(call(d)) == d.CUresult.CUDA_SUCCESS
    assert cuda.control.call_count(entry) >= before + 3
    cuda.control.reset()


def _run_child(code: str, **env) -> subprocess.CompletedProcess:
    child = fakes.child_env()
    child.update(env)
    prelude = "from cuda.bindings import driver as d\nassert d.cuInit(0)[0] == 0\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], env=child, capture_output=True,
                          text=True, timeout=60)


def test_child_process_env_faults_memory_limit_and_leaks():
    r = _run_child("""
        err, ctx = d.cuCtxCreate(None, 0, 0)
        results = [d.cuMemAlloc(1 << 20)[0] for _ in range(3)]
        big = d.cuMemAlloc(3 << 20)[0]
        from ironaccel import fakes
        print([int(e) for e in results], int(big), fakes.Control().identity())
    """, IRONACCEL_FAKE_CUDA_FAULTS="cuMemAlloc_v2:2=CUDA_ERROR_OUT_OF_MEMORY", IRONACCEL_FAKE_CUDA_MEMORY="4M",
        IRONACCEL_FAKE_CUDA_LEAKS="error")
    assert r.returncode == 3, r.stderr  # leaks in error mode
    assert "[0, 2, 0] 2 ironaccel fake libcuda" in r.stdout
    assert "leak report" in r.stderr


def test_memory_held_at_exit_is_reported_only_when_a_leak_check_is_asked_for():
    """A program may exit holding memory (CuPy's pool does): a real driver prints nothing, nor does the fake by
    default; IRONACCEL_FAKE_CUDA_LEAKS=report names what is live."""
    held = """
        err, ctx = d.cuCtxCreate(None, 0, 0)
        assert d.cuMemAlloc(512)[0] == 0
    """
    quiet = _run_child(held)
    assert quiet.returncode == 0 and "leak report" not in quiet.stderr, quiet.stderr
    checked = _run_child(held, IRONACCEL_FAKE_CUDA_LEAKS="report")
    assert checked.returncode == 0
    assert "leak report (process exit): 1 allocation(s), 512 bytes still live" in checked.stderr


def test_unimplemented_entry_point_says_so_once():
    r = _run_child("""
        print(int(d.cuDeviceCanAccessPeer(0, 0)[0]), int(d.cuDeviceCanAccessPeer(0, 0)[0]))
    """)
    assert r.stdout.split() == ["801", "801"], r.stderr
    assert r.stderr.count("cuDeviceCanAccessPeer is not implemented") == 1


def test_stream_ordering_events_and_stale_reads(cuda):
    d = cuda.d
    f = cuda.ok(d.cuModuleGetFunction(cuda.module(OOB), b"spin"))
    s1 = cuda.ok(d.cuStreamCreate(1))
    s2 = cuda.ok(d.cuStreamCreate(1))
    e0, e1, done = (cuda.ok(d.cuEventCreate(0)) for _ in range(3))
    out = cuda.alloc(4 * 32)
    cuda.ok(d.cuMemsetD32(out, 7, 32))
    host = cuda.ok(d.cuMemAllocHost(4 * 32))
    view = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint32 * 32).from_address(int(host)))
    view[:] = 0
    gate = threading.Event()
    hold = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: gate.wait(60))  # holds s1 until released
    cuda.ok(d.cuEventRecord(e0, s1))
    cuda.launch(f, (1,), (32,), out, np.uint32(200000), stream=s1, sync=False)
    cuda.ok(d.cuLaunchHostFunc(s1, d.CUhostFn(ctypes.cast(hold, ctypes.c_void_p).value), 0))
    cuda.ok(d.cuEventRecord(e1, s1))
    cuda.ok(d.cuStreamWaitEvent(s2, e1, 0))
    cuda.ok(d.cuMemcpyDtoHAsync(host, out, 4 * 32, s2))
    cuda.ok(d.cuEventRecord(done, s2))
    try:
        assert cuda.err(d.cuEventQuery(done)) == d.CUresult.CUDA_ERROR_NOT_READY
        assert not view.any()  # s2's copy waits for s1's event, which waits for the gate
    finally:
        gate.set()
    cuda.ok(d.cuEventSynchronize(done))
    assert view.all()  # the copy happened once the event completed
    assert cuda.ok(d.cuEventElapsedTime(e0, e1)) > 0
    assert cuda.err(d.cuStreamQuery(s2)) == d.CUresult.CUDA_SUCCESS
    for h in (e0, e1, done):
        cuda.ok(d.cuEventDestroy(h))
    cuda.ok(d.cuStreamDestroy(s1))
    cuda.ok(d.cuStreamDestroy(s2))
    cuda.ok(d.cuMemFreeHost(host))


def test_host_func_and_async_alloc(cuda):
    d = cuda.d
    before = cuda.control.live_allocations()
    s = cuda.ok(d.cuStreamCreate(0))
    p = cuda.ok(d.cuMemAllocAsync(256, s))
    cuda.ok(d.cuMemsetD8Async(p, 3, 256, s))
    out = np.zeros(256, np.uint8)
    cuda.ok(d.cuMemcpyDtoHAsync(out, p, 256, s))
    cuda.ok(d.cuMemFreeAsync(p, s))
    cuda.ok(d.cuStreamSynchronize(s))
    assert np.all(out == 3)
    cuda.ok(d.cuStreamDestroy(s))
    assert cuda.control.live_allocations() == before  # the stream-ordered free happened by the synchronize


FREE_RACE = r'''
extern "C" __global__ void churn(unsigned* p, unsigned iters)
{ for (unsigned k = 0; k < iters; k++) p[threadIdx.x] += k; }
'''


@pytest.mark.parametrize("free_call", ["cuMemFreeAsync", "cuMemFree"])
def test_free_while_a_kernel_uses_the_buffer_never_crashes(cuda, tmp_path, free_call):
    """A buffer freed (on another stream, or from another thread) while a kernel runs on it and more are
    queued: the running kernel finishes on mapped memory (no segfault, the release waits for it); a kernel
    that starts after the free is a use after free, reported and sticky (cuMemFree waits for all of them)."""
    ptx = tmp_path / "churn.ptx"
    ptx.write_bytes(cuda.ptx(FREE_RACE))
    r = _run_child(f"""
        import threading, time
        import numpy as np
        err, ctx = d.cuCtxCreate(None, 0, 0)
        err, mod = d.cuModuleLoadData(open({str(ptx)!r}, "rb").read() + b"\\0")
        err, f = d.cuModuleGetFunction(mod, b"churn")
        err, busy = d.cuStreamCreate(1)
        err, other = d.cuStreamCreate(1)
        err, p = d.cuMemAlloc(4 * 32)
        d.cuMemsetD32(p, 0, 32)
        print("ptr", hex(int(p)))
        boxes = [np.array([int(p)], np.uint64), np.array([400000], np.uint32)]
        params = np.array([b.ctypes.data for b in boxes], np.uint64)
        for _ in range(3):
            assert d.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, busy, params.ctypes.data, 0)[0] == 0
        time.sleep(0.05)  # the first kernel is running
        if {free_call!r} == "cuMemFreeAsync":
            print("free", int(d.cuMemFreeAsync(p, other)[0]))
        else:
            out = []
            t = threading.Thread(target=lambda: (d.cuCtxSetCurrent(ctx), out.append(int(d.cuMemFree(p)[0]))))
            t.start(); t.join()
            print("free", out[0], "queue", int(d.cuStreamQuery(busy)[0]))
        d.cuStreamSynchronize(busy)
        d.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, busy, params.ctypes.data, 0)
        print("after", int(d.cuStreamSynchronize(busy)[0]))
        from ironaccel import fakes
        print("report", fakes.Control().last_report())
    """, PYTHONPATH=os.getcwd())
    assert r.returncode == 0, r.stderr[-2000:]
    assert "free 0" in r.stdout, r.stdout + r.stderr[-2000:]
    if free_call == "cuMemFree":
        assert "queue 0" in r.stdout, r.stdout  # it waited for the queued kernels
    assert "after 700" in r.stdout, r.stdout  # CUDA_ERROR_ILLEGAL_ADDRESS, sticky
    report = r.stdout.split("report", 1)[1]
    assert "churn" in report and "thread (0,0,0)" in report and "use after free" in report, report
    assert f"at {r.stdout.split('ptr ')[1].split()[0]}" in report, report  # the freed buffer's address



def test_a_fault_report_is_there_when_the_sticky_error_is(cuda):
    """The worker writes a launch's report before it makes the error sticky, so a call that returns the sticky
    error finds the report. Deterministic: the child's stderr is a full pipe, so the worker blocks while it logs
    the fault, and a call that checks the sticky error comes while it is blocked."""
    r = _run_child(f"""
        import fcntl, os, threading, time
        import numpy as np
        from ironaccel import fakes
        err, ctx = d.cuCtxCreate(None, 0, 0)
        f = d.cuModuleGetFunction(d.cuModuleLoadData({cuda.ptx(OOB)!r})[1], b"write_at")[1]
        p = int(d.cuMemAlloc(64)[1])
        d.cuMemFree(p)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        fcntl.fcntl(2, fcntl.F_SETFL, os.O_NONBLOCK)
        try:
            while True:
                os.write(2, b"x" * 512)
        except BlockingIOError:
            pass
        fcntl.fcntl(2, fcntl.F_SETFL, 0)
        def drain():
            time.sleep(1)
            while os.read(read_end, 1 << 16):
                pass
        threading.Thread(target=drain, daemon=True).start()
        boxes = [np.array([p], dtype=np.uint64), np.array([0], dtype=np.uint32)]
        ptrs = np.array([b.ctypes.data for b in boxes], dtype=np.uint64)
        d.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, ptrs.ctypes.data, 0)
        time.sleep(0.3)
        early = int(d.cuMemAlloc(16)[0])  # returns a sticky error at once, without waiting for the stream
        early_ok = early == 0 or f"{{p:x}}" in fakes.Control().last_report()
        rc = int(d.cuCtxSynchronize()[0])
        print(early_ok, rc, f"{{p:x}}" in fakes.Control().last_report(), flush=True)
        os._exit(0)
    """)
    assert r.stdout.split() == ["True", "700", "True"], r.stdout


def test_function_attributes_as_the_driver_computes_them_and_cache_configs_accepted(cuda):
    """SHARED_SIZE_BYTES is the bytes the .shared variables declare (not rounded up for dynamic shared memory),
    CONST_SIZE_BYTES those of the .const ones; the cache and bank preferences of sm_90, which has neither
    configurable, are checked and accepted."""
    d = cuda.d
    f = cuda.kernel(r'''
    __constant__ long long table[32];
    extern "C" __global__ void k(long long* out) {
        __shared__ float a[10];
        a[threadIdx.x % 10] = 1.0f;
        __syncthreads();
        out[threadIdx.x] = table[threadIdx.x] + (long long)a[(threadIdx.x + 1) % 10];
    }''', "k")
    attr = d.CUfunction_attribute
    assert cuda.ok(d.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f)) == 40
    assert cuda.ok(d.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, f)) == 256
    assert cuda.ok(d.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f)) == 1024
    assert 0 < cuda.ok(d.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_NUM_REGS, f)) <= 255
    cuda.ok(d.cuFuncSetCacheConfig(f, d.CUfunc_cache.CU_FUNC_CACHE_PREFER_SHARED))
    cuda.ok(d.cuKernelSetCacheConfig(f, d.CUfunc_cache.CU_FUNC_CACHE_PREFER_L1, 0))
    cuda.ok(d.cuCtxSetCacheConfig(d.CUfunc_cache.CU_FUNC_CACHE_PREFER_EQUAL))
    assert cuda.ok(d.cuCtxGetCacheConfig()) == d.CUfunc_cache.CU_FUNC_CACHE_PREFER_EQUAL
    if hasattr(d, "cuCtxSetSharedMemConfig"):  # gone from cuda-bindings 13
        cuda.ok(d.cuCtxSetSharedMemConfig(d.CUsharedconfig.CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE))
        assert cuda.ok(d.cuCtxGetSharedMemConfig()) == d.CUsharedconfig.CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE


def test_the_profiler_markers_need_a_context_and_change_nothing(cuda):
    """numba-cuda's profiler test (cuda.profiling()) calls them; the fake has no profiler to attach."""
    d = cuda.d
    cuda.ok(d.cuProfilerStart())
    cuda.ok(d.cuProfilerStop())


def test_pointer_attributes_of_device_memory_in_one_call(cuda):
    """cuPointerGetAttributes answers HOST_POINTER of device memory with NULL, where cuPointerGetAttribute fails:
    the CUDA runtime's cudaPointerGetAttributes asks so (CuPy's __dlpack__, numba-cuda's CuPy interop tests)."""
    d, A = cuda.d, cuda.d.CUpointer_attribute
    p = cuda.alloc(64)
    attrs = [A.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, A.CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
             A.CU_POINTER_ATTRIBUTE_HOST_POINTER]
    kind, device, host = cuda.ok(d.cuPointerGetAttributes(len(attrs), attrs, p))
    assert int(kind) == d.CUmemorytype.CU_MEMORYTYPE_DEVICE and int(device) == p and not int(host or 0)
    assert cuda.err(d.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_HOST_POINTER, p)) == d.CUresult.CUDA_ERROR_INVALID_VALUE
