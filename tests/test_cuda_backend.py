"""The CUDA backend on the fake libcuda: device info, compile errors and caches, driver error naming, kernel
reflection, synchronize(timeout=), held copy_dtoh destinations, devices left open at exit, threads, graphs.
Runs with no GPU; skipped, with the reason, when the fake cannot be built or loaded. Failure injection is in
test_cuda_faults.py, copies in test_cuda_copies.py, the compiled hot path in test_cuda_compiled.py.
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.cts.testing.cuda_fake import (PTX_PARAMS, PTX_SPIN, PTX_STORE, SPIN_ITERATIONS, load_fake, open_device, run_script)


@pytest.fixture(scope="module")
def fake() -> Any:
    """The loaded fake libcuda (ctypes), with the backend initialized on it (once per process)."""
    return load_fake()


@pytest.fixture
def device(fake: Any) -> Any:
    yield from open_device(fake)


def test_device_info_reports_the_fake(device):
    info = device.info
    assert info.simulated and info.driver == "ironaccel fake libcuda"
    assert info.extra["compute_capability"] == (9, 0)
    assert info.extra["uuid"].startswith("GPU-")
    assert info.limits.max_alloc == min(info.memory // 4, 4 << 30)


def test_compile_cache_survives_a_new_process_key(tmp_path, monkeypatch, device):
    """lang=cuda results are cached on disk under the cache directory, keyed by what changes the output."""
    pytest.importorskip("cuda.bindings.nvrtc")
    if not device.supports("lang.cuda"):
        pytest.skip("NVRTC is not available")
    monkeypatch.setenv("IRONACCEL_CACHE", str(tmp_path))
    source = 'extern "C" __global__ void k(unsigned* o) { o[0] = 1; }'
    device.compile(source, "cuda")
    first = sorted(p.name for p in (tmp_path / "nvrtc").iterdir())
    assert any(name.endswith(".ptx") for name in first)
    device.compile(source, "cuda", options=("-DVARIANT=1",))
    assert len(list((tmp_path / "nvrtc").iterdir())) > len(first), "different options must not share an entry"


def test_ptx_compile_error_carries_the_jit_log(device):
    with pytest.raises(ia.CompileError) as info:
        device.compile(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { bogus; }", "ptx")
    assert info.value.log.strip()


def test_sticky_illegal_address_is_reported_with_its_op(fake):
    """A kernel that writes out of bounds: the next synchronizing call says so, naming its op and the kernel."""
    from ironaccel.backends.cuda import CudaBackend

    dev = CudaBackend().open_device(0)
    s = dev.create_stream()
    kernel = dev.compile(PTX_STORE, "ptx").kernel("store")
    buf = dev.alloc(4)
    real = buf._ptr
    buf._ptr = real + (1 << 30)  # the API never makes such a buffer: point this one past every allocation
    s.launch(kernel, 1, 1, (buf, np.uint32(1)))
    buf._ptr = real
    with pytest.raises(ia.DriverError, match="cuStreamSynchronize.*CUDA_ERROR_ILLEGAL_ADDRESS") as info:
        s.synchronize()
    assert info.value.op == "cuStreamSynchronize"
    assert "store" in info.value.detail, "the fake's memcheck report names the kernel"
    with pytest.raises(ia.DriverError, match="ILLEGAL_ADDRESS"):
        dev.close()  # the context is unusable: close still releases it, and says why


def test_driver_errors_explain_common_codes(fake, device):
    """The detail carries the driver's own text and what the code usually means, for the common codes."""
    cuda_error_invalid_context = 201
    fake.ironaccel_fake_inject(b"cuMemAllocAsync", 1, cuda_error_invalid_context)
    with pytest.raises(ia.DriverError) as info:
        device.alloc(64)
    assert info.value.op == "cuMemAllocAsync" and info.value.name == "CUDA_ERROR_INVALID_CONTEXT"
    assert "no CUDA context is current" in info.value.detail
    from ironaccel.backends.cuda.native import EXPLANATIONS

    codes = {"CUDA_ERROR_INVALID_CONTEXT", "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_OUT_OF_MEMORY",
             "CUDA_ERROR_NOT_INITIALIZED", "CUDA_ERROR_NO_BINARY_FOR_GPU", "CUDA_ERROR_LAUNCH_TIMEOUT"}
    assert codes <= EXPLANATIONS.keys()


def test_checked_calls_return_values_and_name_the_function(fake, device):
    from ironaccel.backends.cuda import native

    assert native.calls.cuDeviceGetCount() >= 1  # one value: the value itself
    assert native.calls.cuCtxSynchronize() is None  # no value
    assert native.calls.cuMemGetInfo()[1] >= device.info.memory // 2  # several values: a tuple
    with pytest.raises(ia.DriverError) as info:
        native.calls.cuMemFreeHost(12345)
    assert info.value.op == "cuMemFreeHost"


def test_nvrtc_errors_name_the_nvrtc_function(device):
    if not device.supports("lang.cuda"):
        pytest.skip("NVRTC is not available")
    from ironaccel.backends.cuda import nvrtc

    with pytest.raises(ia.DriverError) as info:
        nvrtc.calls.nvrtcGetPTXSize(nvrtc.load().nvrtcProgram(0))
    assert info.value.op == "nvrtcGetPTXSize" and info.value.name.startswith("NVRTC_ERROR")


def test_kernel_params_are_reflected_from_the_ptx(device):
    params = device.compile(PTX_PARAMS, "ptx").kernel("kinds").params
    assert params == (
        ia.api.Param("buffer-or-scalar", 8, "int"), ia.api.Param("buffer", 8),
        ia.api.Param("scalar", 4, "float"), ia.api.Param("scalar", 8, "float"),
        ia.api.Param("scalar", 4, "int"), ia.api.Param("scalar", 4, "int"), ia.api.Param("scalar", 2, "int"),
        ia.api.Param("scalar", 8, "int"), ia.api.Param("scalar", 16, ""),
    )
    assert device.compile(PTX_STORE, "ptx").kernel("store").params == (
        ia.api.Param("buffer-or-scalar", 8, "int"), ia.api.Param("scalar", 4, "int"))


def test_kernel_params_of_cuda_source(device):
    if not device.supports("lang.cuda"):
        pytest.skip("NVRTC is not available")
    source = 'extern "C" __global__ void k(float* x, float a, unsigned n, double d, long long q) { }'
    params = device.compile(source, "cuda").kernel("k").params
    assert [(p.kind, p.nbytes, p.scalar) for p in params] == [
        ("buffer-or-scalar", 8, "int"), ("scalar", 4, "float"), ("scalar", 4, "int"), ("scalar", 8, "float"),
        ("buffer-or-scalar", 8, "int")]


def test_kernel_params_of_a_binary_are_sizes_only(fake, device, monkeypatch):
    """A cubin's parameters come from cuFuncGetParamInfo (the fake answers it for a function of a PTX
    module; it has no cuModuleEnumerateFunctions, so the enumeration is stood in for)."""
    from types import SimpleNamespace

    from ironaccel.backends.cuda import native, module

    loaded = device.compile(PTX_STORE, "ptx")
    function = loaded.kernel("store").native
    monkeypatch.setattr(module, "calls", SimpleNamespace(
        cuModuleGetFunctionCount=lambda _module: 1, cuModuleEnumerateFunctions=lambda _count, _module: [function],
        cuFuncGetName=lambda _fn: b"store"))
    entries = module.binary_entries(native.cu, loaded._handle)
    assert entries == {"store": (ia.api.Param("buffer-or-scalar", 8, ""), ia.api.Param("scalar", 4, ""))}


@pytest.mark.parametrize("waiter", ["Stream", "Event", "Device"])
def test_synchronize_timeout_raises_and_leaves_the_work_running(device, waiter):
    import time

    s = device.create_stream()
    kernel = device.compile(PTX_SPIN, "ptx").kernel("spin")
    with device.alloc(4) as out:
        s.fill(out, 0)
        s.launch(kernel, 1, 1, (out, np.uint32(SPIN_ITERATIONS)))
        after = s.record()
        wait = {"Stream": s.synchronize, "Event": after.synchronize, "Device": device.synchronize}[waiter]
        started = time.monotonic()
        with pytest.raises(ia.Timeout) as info:
            wait(timeout=0.05)
        waited = time.monotonic() - started
        assert info.value.op == f"{waiter}.synchronize" and info.value.seconds == 0.05
        assert 0.05 <= waited < 0.5, f"timed out after {waited:.3f} s"
        wait(timeout=60)  # the same wait, long enough: returns once the kernel is done
        assert after.query(), "the kernel must be done when the wait returns"
        host = np.zeros(1, np.uint32)
        s.copy_dtoh(host, out)  # pageable: the driver completes it before returning
        assert host[0] == SPIN_ITERATIONS


def _held_alive(refs: list) -> int:

    gc.collect()
    return sum(ref() is not None for ref in refs)


@pytest.mark.parametrize("waiter", ["event.synchronize", "event.query", "device.synchronize"])
def test_copy_dtoh_destinations_are_released_by_any_wait_that_covers_them(device, waiter):
    """400 x 1 MiB copy_dtoh, each followed by an event (or device) wait, hold nothing afterwards; before the
    wait the stream holds the destination (the copy may still be writing it)."""
    import time
    import tracemalloc
    import weakref

    s = device.create_stream()
    with device.alloc(1 << 20) as buf:
        s.fill(buf, 5)
        refs = []
        tracemalloc.start()
        try:
            for i in range(400):
                host = np.empty(1 << 20, np.uint8)
                s.copy_dtoh(host, buf)
                refs.append(weakref.ref(host))
                del host
                if i == 0:
                    assert _held_alive(refs) == 1, "the stream must hold a destination until a wait covers it"
                if waiter == "event.synchronize":
                    s.record().synchronize()
                elif waiter == "event.query":
                    event = s.record()
                    while not event.query():
                        time.sleep(1e-4)
                else:
                    device.synchronize()
            held = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert _held_alive(refs) == 0
        assert held < 16 << 20, f"{held >> 20} MiB still traced after 400 MiB of copies"


def test_an_event_releases_only_the_copies_recorded_before_it(device):
    import weakref

    s = device.create_stream()
    with device.alloc(4096) as buf:
        first, second = np.empty(4096, np.uint8), np.empty(4096, np.uint8)
        s.copy_dtoh(first, buf)
        event = s.record()
        s.copy_dtoh(second, buf)
        refs = [weakref.ref(first), weakref.ref(second)]
        del first, second
        event.synchronize()
        assert [ref() is not None for ref in refs] == [False, True]
        s.synchronize()
        assert _held_alive(refs) == 0


def test_devices_left_open_are_closed_at_exit(tmp_path):
    """A program that never calls close(): the fake (in error mode) reports no leak at exit, its staging
    ring included, and the exit status stays 0."""
    proc = run_script(
        tmp_path,
        "import numpy as np\n"
        "from ironaccel.backends.cuda import CudaBackend\n"
        "dev = CudaBackend().open_device(0)\n"
        "s = dev.create_stream()\n"
        "buf = dev.alloc(1 << 20)\n"
        "s.copy_htod(buf, np.ones(1 << 20, np.uint8))\n"
        "out = np.empty(1 << 20, np.uint8)\n"
        "s.copy_dtoh(out, buf)\n"
        "s.synchronize()\n"
        "assert out.all()\n",
        IRONACCEL_FAKE_CUDA_LEAKS="error")
    assert proc.returncode == 0, proc.stderr
    assert "leak report" not in proc.stderr


@pytest.mark.parametrize("options", [[1, 2], ["-DX=1", b"-DY=2"], [None]])
def test_compile_options_that_are_not_strings_are_rejected(device, options):
    if not device.supports("lang.cuda"):
        pytest.skip("NVRTC is not available")
    with pytest.raises(ia.InvalidArgument) as info:
        device.compile('extern "C" __global__ void k() {}', "cuda", options=options)
    assert info.value.op == "Device.compile" and "list or tuple of str" in info.value.detail  # api.py checks them


def test_exit_does_not_wait_for_a_kernel_that_runs_on(tmp_path):
    """A device left open with a kernel still running: exit waits a bounded time, then leaves it to the driver."""
    import time

    started = time.monotonic()
    proc = run_script(
        tmp_path,
        "import numpy as np\n"
        "from ironaccel.backends.cuda import CudaBackend\n"
        f"PTX = {PTX_SPIN!r}\n"
        "dev = CudaBackend().open_device(0)\n"
        "buf = dev.alloc(4)\n"
        "dev.create_stream().launch(dev.compile(PTX, 'ptx').kernel('spin'), 1, 1, (buf, np.uint32(4_000_000_000)))\n")
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 60


def test_threads_sharing_a_device_record_copy_and_wait(device):
    """Four threads on one device: streams created, events recorded and waited for, copies, device-wide waits
    in between; no error, every copy right (the spare events and the stream set are shared)."""
    import threading

    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            with device.alloc(256) as buf:
                s = device.create_stream()
                for i in range(150):
                    if i % 25 == 24:
                        s = device.create_stream()  # the old one is dropped: destroyed while others run
                    data = np.full(256, (seed * 31 + i) % 251, np.uint8)
                    s.copy_htod(buf, data)
                    out = np.empty(256, np.uint8)
                    s.copy_dtoh(out, buf)
                    s.record().synchronize()
                    if i % 10 == seed:
                        device.synchronize(timeout=30)
                    np.testing.assert_array_equal(out, data)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]


def test_graph_captures_on_its_own_stream_and_close_destroys_it(fake, device):
    """A capture runs on a private stream: the legacy default stream can be captured, a synchronize during
    the capture waits for the work enqueued before it (and does not end the capture), a buffer freed during
    it is freed on the stream, not captured; Device.close destroys the executables of graphs left open
    (the device holds them until then) and a Graph closed after its device does nothing."""
    k = device.compile(PTX_STORE, "ptx").kernel("store")
    s = device.default_stream
    out = np.zeros(1, np.uint32)
    with device.alloc(4) as buf:
        s.launch(k, 1, 1, (buf, np.uint32(1)))
        with s.capture() as graph:
            s.launch(k, 1, 1, (buf, np.uint32(2)))
            s.synchronize()  # waits for the first launch only
            scratch = device.alloc(64)
            s.fill(scratch, 0)  # the scratch buffer's last use is now the stream: its free is not captured
            scratch.free()
        s.copy_dtoh(out, buf)
        s.synchronize()
        assert out[0] == 1
        with pytest.raises(ia.UseAfterFree, match=r"Graph\.launch.*64-byte"):
            graph.launch(s)
        graph.close()
    with device.alloc(4) as buf:
        with s.capture() as graph:
            s.launch(k, 1, 1, (buf, np.uint32(5)))
        graph.launch(s)
        s.copy_dtoh(out, buf)
        s.synchronize()
        assert out[0] == 5
        destroyed = fake.ironaccel_fake_call_count(b"cuGraphExecDestroy")
    device.close()
    assert fake.ironaccel_fake_call_count(b"cuGraphExecDestroy") == destroyed + 1  # the one left open
    graph.close()  # after close: nothing left to free, no error
