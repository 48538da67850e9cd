"""The CUDA backend on the fake libcuda: failure paths, leaks, waits, reflection, exit.

The fault-injection matrix makes the fake fail the 1st and the 3rd call of every driver entry point the
backend calls, and checks that the typed error names it, that nothing leaks (the fake's live allocation
count) and that a fresh saxpy is still right. Other tests: held copy_dtoh destinations and when they are
released, failed frees and context releases, synchronize(timeout=), Kernel.params, devices left open at
exit, sticky errors. Runs with no GPU; skipped, with the reason, when the fake cannot be built or loaded.
"""

from __future__ import annotations

import ctypes
import gc
from typing import Any

import numpy as np
import pytest

import ironaccel as ia

CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NOT_READY = 600
#: the query each blocking wait asks first (native.wait_for): when it says done, the wait is skipped
QUERY_BEFORE = {"cuStreamSynchronize": "cuStreamQuery", "cuEventSynchronize": "cuEventQuery"}


def fail_next_wait(fake, wait: str) -> None:
    """Make the next blocking ``wait`` fail with CUDA_ERROR_INVALID_VALUE: its query first says not ready, so
    the wait is made even on an idle stream."""
    fake.ironaccel_fake_inject(QUERY_BEFORE[wait].encode(), 1, CUDA_ERROR_NOT_READY)
    fake.ironaccel_fake_inject(wait.encode(), 1, CUDA_ERROR_INVALID_VALUE)
CUDA_ERROR_OUT_OF_MEMORY = 2


@pytest.fixture(scope="module")
def fake() -> Any:
    """The loaded fake libcuda (ctypes), with the backend initialized on it (once per process)."""
    from ironaccel.backends.cuda import native

    with pytest.MonkeyPatch.context() as env:
        env.setenv("IRONACCEL_CUDA_DRIVER", "fake")
        try:
            native.load()
        except ia.NotAvailable as exc:
            pytest.skip(f"the fake libcuda is not available: {exc}")
    lib = native.fake
    if lib is None:
        pytest.skip("the CUDA backend was initialized on a real driver earlier in this process")
    lib.ironaccel_fake_inject.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_int]
    lib.ironaccel_fake_live_allocations.restype = ctypes.c_uint64
    lib.ironaccel_fake_call_count.restype = ctypes.c_int64
    return lib


@pytest.fixture
def device(fake: Any) -> Any:
    from ironaccel.backends.cuda import CudaBackend

    baseline = fake.ironaccel_fake_live_allocations()
    dev = CudaBackend().open_device(0)
    dev.live_allocations_before_open = baseline
    yield dev
    fake.ironaccel_fake_reset()
    dev.close()


PTX_STORE = """.version 8.0
.target sm_90
.address_size 64
.visible .entry store(.param .u64 out, .param .u32 value)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [value];
    cvta.to.global.u64 %rd2, %rd1;
    st.global.u32 [%rd2], %r1;
    ret;
}
"""


def assert_device_works(device: Any) -> None:
    s = device.create_stream()
    with device.alloc(4096) as buf:
        data = np.arange(4096, dtype=np.uint8)
        s.copy_htod(buf, data)
        s.fill(buf, 9, offset=100, nbytes=10)
        out = np.empty(4096, np.uint8)
        s.copy_dtoh(out, buf)
        s.synchronize()
    data[100:110] = 9
    np.testing.assert_array_equal(out, data)


PTX_SAXPY = """.version 8.0
.target sm_90
.address_size 64
.visible .entry saxpy(.param .u64 y, .param .u64 x, .param .f32 a, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<5>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [y];
    ld.param.u64 %rd2, [x];
    ld.param.f32 %f1, [a];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd4, %rd5;
    ld.global.f32 %f2, [%rd6];
    add.s64 %rd7, %rd3, %rd5;
    ld.global.f32 %f3, [%rd7];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    st.global.f32 [%rd7], %f4;
DONE:
    ret;
}
"""


def assert_saxpy_works(backend: Any) -> None:
    """A fresh device computes y = 2x + y correctly."""
    with backend.open_device(0) as dev:
        assert_saxpy_works_on(dev)


def assert_saxpy_works_on(dev: Any) -> None:
    """``dev`` computes y = 2x + y correctly, directly and replayed from a captured graph."""
    s = dev.create_stream()
    n = 1000
    x, y = np.arange(n, dtype=np.float32), np.full(n, 3, np.float32)
    with dev.alloc(4 * n) as bx, dev.alloc(4 * n) as by:
        s.copy_htod(bx, x)
        s.copy_htod(by, y)
        kernel = dev.compile(PTX_SAXPY, "ptx").kernel("saxpy")
        s.launch(kernel, 4, 256, (by, bx, np.float32(2), np.uint32(n)))
        with s.capture() as graph:
            s.launch(kernel, 4, 256, (by, bx, np.float32(2), np.uint32(n)))
        graph.launch(s)
        graph.close()
        out = np.empty(n, np.float32)
        s.copy_dtoh(out, by)
        s.synchronize()
    np.testing.assert_array_equal(out, 4 * x + y)


def _workload(opened: list) -> None:
    """One of nearly everything the backend does, most of it three times (so a third call fails too)."""
    from ironaccel.backends.cuda import CudaBackend

    dev = CudaBackend().open_device(0)
    opened.append(dev)
    s, t = dev.create_stream(), dev.create_stream()
    a, b, c = dev.alloc(1 << 20), dev.alloc(1 << 20), dev.alloc(9 << 20)
    small = np.arange(256, dtype=np.uint8)
    for _ in range(3):
        s.copy_htod(a, small)
        s.copy_dtod(b, a, 4096)
        s.fill(a, 1, nbytes=64)
    s.synchronize()  # the large copy then reuses the ring's segment on every run: the same driver calls each time
    s.copy_htod(c, np.ones(9 << 20, np.uint8))  # large: chunked through the ring's segments, fenced by events
    out = np.empty(4096, np.uint8)
    for _ in range(3):
        s.copy_dtoh(out, b)
    events = [s.record(timing=True) for _ in range(3)]  # more than spare: cuEventCreate
    for event in events:
        t.wait(event)
    end = t.record(timing=True)
    end.synchronize()
    events[0].query()
    events[1].synchronize(timeout=30)
    events[0].elapsed_ms(end)
    del events, event, end  # dropped before close, as a program would: their CUevents go back to the device's spares
    kernels = [dev.compile(PTX_SAXPY, "ptx").kernel("saxpy") for _ in range(3)]
    for kernel in kernels:
        s.launch(kernel, 1, 256, (a, b, np.float32(2), np.uint32(256)))
    t.wait(s.record())  # t's graphs use a and b after s's launches (and so does a free ordered on t)
    graphs = []
    for kernel in kernels:  # stream capture: cuStreamBeginCapture, EndCapture, GraphInstantiate, GraphDestroy
        with t.capture() as graph:
            t.launch(kernel, 1, 256, (a, b, np.float32(2), np.uint32(256)))
            t.fill(b, 3, nbytes=64)
        graphs.append(graph)
    for graph in graphs:
        graph.launch(t)  # cuGraphLaunch
    t.synchronize()
    for graph in graphs:
        graph.close()  # cuGraphExecDestroy
    for _ in range(3):
        s.synchronize()
    s.synchronize(timeout=30)
    dev.synchronize()
    dev.synchronize(timeout=30)
    for buf in (a, b, c):
        buf.free()
    # a device without memory pools (MEMORY_POOLS_SUPPORTED 0; the fake's has them) allocates with
    # cuMemAlloc and frees with cuMemFree: the backend's switch, set as _device_info would set it
    bare = CudaBackend().open_device(0)
    opened.append(bare)
    bare._pools = False
    blocks = [bare.alloc(4096) for _ in range(3)]
    u = bare.create_stream()
    u.copy_htod(blocks[0], small)
    u.synchronize()
    for block in blocks:
        block.free()
    bare.close()
    dev.close()


#: Entry points the fake implements through another one (counted, and failing, for both), or that the
#: binding resolves to a newer one: the error names the one the backend called.
FAKE_CALLS_THROUGH = {"cuEventRecordWithFlags": "cuEventRecord", "cuStreamCreateWithPriority": "cuStreamCreate",
                      "cuGraphInstantiateWithFlags": "cuGraphInstantiate"}

#: Entry points whose failure is not an error of the operation, with the reason.
NOT_RAISED = {
    "cuPointerGetAttribute": "asks whether a large copy's source is pinned; a failed query means 'not pinned', "
                             "and the copy is staged instead (correct either way)",
}

#: Entry points whose failure leaves the device that failed broken, with the bug (backends/cuda's to fix;
#: once fixed, the matrix fails until the entry is removed).
BREAKS_THE_DEVICE: dict[str, str] = {}

#: Driver objects the workload makes: kind -> (the fake entry point that makes one, the one that destroys it).
DRIVER_OBJECTS = {
    "primary context": ("cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2"),
    "stream": ("cuStreamCreateWithPriority", "cuStreamDestroy_v2"),  # what the fake's cuStreamCreate calls
    "event": ("cuEventCreate", "cuEventDestroy_v2"),
    "module": ("cuModuleLoadDataEx", "cuModuleUnload"),
    "captured graph": ("cuStreamEndCapture", "cuGraphDestroy"),
    "graph exec": ("cuGraphInstantiateWithFlags", "cuGraphExecDestroy"),
}


def _entry_points_called(fake_control: Any) -> dict[str, int]:
    """The fake's entry points the workload calls (fake name -> calls), from the fake's own call counts."""
    names = fake_control.entry_points()
    fake_control.reset()
    _workload([])
    return {name: n for name in names if (n := fake_control.call_count(name))}


def _objects_left(fake_control: Any, failed: str | None) -> dict[str, int]:
    """Per kind of driver object, how many were made and not destroyed since the counts were reset, from the
    fake's call counts. The ``failed`` (injected) call made nothing, or destroyed nothing: the object a failed
    destroy leaves is the driver's refusal, not counted."""
    left = {}
    for kind, (make, destroy) in DRIVER_OBJECTS.items():
        made = fake_control.call_count(make) - (failed == make) - (failed == destroy)
        left[kind] = made - (fake_control.call_count(destroy) - (failed == destroy))
    return left


def _close_all(opened: list) -> None:
    """Close what the workload opened, as the program would after an error (or exit would)."""
    from ironaccel.backends.cuda import device as device_module

    gc.collect()  # streams and events the failed workload's frames held
    for dev in opened:
        try:
            dev.close()
        except ia.IronAccelError:
            pass
    while device_module._unreleased_contexts:  # what exit would do
        device_module.native.cu.cuDevicePrimaryCtxRelease(device_module._unreleased_contexts.pop())


def test_fault_injection_matrix(fake):
    """For every entry point the backend calls, its 1st and its 3rd call fail in turn: a typed error naming
    that entry point (a failed query before a blocking wait may raise nothing: the wait, made then, decides, as
    test_events_and_stream_waits_keep_their_api checks);
    the device that failed still computes a saxpy (directly and from a graph) when the
    error left it open, and a fresh one does; nothing leaked: not the fake's live allocations, and no more
    streams, events, modules, graphs or contexts left undestroyed than the run without a fault leaves."""
    import re

    from ironaccel import fakes
    from ironaccel.backends.cuda import CudaBackend

    control = fakes.Control(fake)
    backend = CudaBackend()
    called = _entry_points_called(control)
    assert {"cuLaunchKernel", "cuMemAllocAsync", "cuEventRecord", "cuStreamQuery", "cuStreamBeginCapture_v2",
            "cuGraphLaunch", "cuMemAlloc_v2", "cuMemFree_v2"} <= called.keys()
    baseline = control.live_allocations()
    control.reset()
    opened: list = []
    _workload(opened)
    _close_all(opened)
    unfaulted = _objects_left(control, None)
    assert not any(unfaulted.values()), unfaulted
    failures = []
    cases = unfired = 0
    for name, count in sorted(called.items()):
        op = re.sub(r"_v\d+$", "", name)  # the fake's versioned symbol; the binding (and the error) name it without
        op = FAKE_CALLS_THROUGH.get(op, op)
        for nth in (1, 3):
            if nth > count:
                continue
            cases += 1
            opened = []
            control.reset()
            control.inject(name, nth, 999)  # CUDA_ERROR_UNKNOWN: no special meaning to any caller
            error = None
            try:
                _workload(opened)
            except ia.IronAccelError as exc:
                error = exc.with_traceback(None)  # its frames would keep the workload's streams and events alive
            fired = control.call_count(name) >= nth  # a wait skipped by its query makes fewer calls on a quick run
            unfired += not fired
            where = f"{name} call {nth}"
            faulted = next((dev for dev in reversed(opened) if not dev.closed), None)
            if faulted is not None:
                try:
                    assert_saxpy_works_on(faulted)
                    if op in BREAKS_THE_DEVICE:
                        failures.append(f"{where}: the device that failed works now: drop {op} from BREAKS_THE_DEVICE")
                except Exception as exc:  # what it was is the failure's message
                    if op not in BREAKS_THE_DEVICE:
                        failures.append(f"{where}: the device that failed no longer works: {exc!r}")
            _close_all(opened)
            left = _objects_left(control, name)
            control.reset()
            if op in NOT_RAISED:
                if error is not None:
                    failures.append(f"{where}: raised {error!r}, expected none ({NOT_RAISED[op]})")
            elif error is None:
                if fired and op not in QUERY_BEFORE.values():  # a failed query before a wait: the wait decides
                    failures.append(f"{where}: nothing raised")
            elif getattr(error, "op", None) != op:
                failures.append(f"{where}: raised {error!r}, not naming {op}")
            leaked = control.live_allocations() - baseline
            if leaked:
                failures.append(f"{where}: {leaked} allocation(s) leaked")
            more = {kind: n - unfaulted[kind] for kind, n in left.items() if n > unfaulted[kind]}
            if more:
                failures.append(f"{where}: left undestroyed, beyond the unfaulted run's: {more}")
            assert_saxpy_works(backend)
    assert not failures, f"{len(failures)} of {cases} cases:\n" + "\n".join(failures)
    assert cases - unfired > 2 * 30


def test_a_stream_that_copied_is_destroyed_at_close(fake):
    """The staging ring remembers the streams that used a segment; Device.close frees the ring before it
    destroys the streams, so it holds them first (else the last reference went with the ring, and the stream's
    finalizer saw a closed device and left its CUstream)."""
    from ironaccel import fakes
    from ironaccel.backends.cuda import CudaBackend

    control = fakes.Control(fake)
    control.reset()
    dev = CudaBackend().open_device(0)
    s = dev.create_stream()
    with dev.alloc(64) as buf:
        s.copy_htod(buf, np.zeros(64, np.uint8))
        s.synchronize()
    del s
    gc.collect()
    dev.close()
    made, destroyed = control.call_count("cuStreamCreate"), control.call_count("cuStreamDestroy_v2")
    control.reset()
    assert made == destroyed == 2, f"{made} streams made (one the device's own), {destroyed} destroyed"


def test_out_of_memory_from_the_driver_is_typed(fake, device):
    fake.ironaccel_fake_inject(b"cuMemAllocAsync", 1, CUDA_ERROR_OUT_OF_MEMORY)
    with pytest.raises(ia.OutOfMemory, match="cuMemAllocAsync.*CUDA_ERROR_OUT_OF_MEMORY"):
        device.alloc(1 << 20)
    assert_device_works(device)
    device.close()
    assert fake.ironaccel_fake_live_allocations() == device.live_allocations_before_open


def test_free_is_ordered_after_the_last_use(fake, device):
    """A buffer freed right after a copy on some stream is freed after that copy, not before it."""
    s = device.create_stream()
    buf = device.alloc(1 << 16)
    out = np.zeros(1 << 16, np.uint8)
    s.fill(buf, 3)
    s.copy_dtoh(out, buf)
    buf.free()
    s.synchronize()
    assert (out == 3).all()


def test_a_free_waits_for_every_stream_that_used_the_buffer(fake, device):
    """LIFE-4's mechanism, on both paths: a buffer used on one stream records no fence; each use on another
    stream than the last fences the last one (one cuEventRecord), completed fences are dropped past
    FENCES_KEPT, and free() makes its stream wait for those left (cuStreamWaitEvent) before cuMemFreeAsync."""
    from ironaccel.backends.cuda.stream import FENCES_KEPT

    a, b = device.create_stream(), device.create_stream()
    buf = device.alloc(4096)
    out = np.zeros(16, np.uint8)
    count = fake.ironaccel_fake_call_count
    records = count(b"cuEventRecord")
    for _ in range(5):
        a.fill(buf, 1)
        a.copy_htod(buf, out)
        a.copy_dtoh(out, buf)
    assert count(b"cuEventRecord") == records, "a buffer used on one stream must cost no fence"
    for i in range(20):
        (b, a)[i % 2].fill(buf, i)  # each one switches
        device.synchronize()
    assert count(b"cuEventRecord") == records + 20
    assert 0 < len(buf._fences) <= FENCES_KEPT and buf._fenced
    waits, fences = count(b"cuStreamWaitEvent"), len(buf._fences)
    buf.free()
    assert count(b"cuStreamWaitEvent") == waits + fences and not buf._fences and not buf._fenced
    device.synchronize()


def test_staged_copies_wrap_the_ring_and_free_the_host_array_at_once(device):
    """Many small and a few large pageable copies, each host array overwritten right after the call."""
    from ironaccel.backends.cuda import STAGING_BYTES

    s, other = device.create_stream(), device.create_stream()
    small = 12345
    count = STAGING_BYTES // small * 2 + 3  # wraps the ring twice
    with device.alloc(small * 64) as buf, device.alloc(STAGING_BYTES + 4097) as big:
        host = np.empty(small, np.uint8)
        for i in range(count):
            host[:] = i % 251
            slot = i % 64  # each slot is written by one stream only: two streams' copies are unordered
            (other if slot % 3 == 0 else s).copy_htod(buf, host, dst_offset=small * slot)
            host[:] = 255
        large = np.random.default_rng(1).integers(0, 256, big.nbytes, dtype=np.uint8)
        s.copy_htod(big, large)
        expect_large = large.copy()
        large[:] = 0
        s.synchronize()
        other.synchronize()
        out = np.empty(buf.nbytes, np.uint8)
        s.copy_dtoh(out, buf)
        out_large = np.empty(big.nbytes, np.uint8)
        s.copy_dtoh(out_large, big)
        s.synchronize()
    last = {i % 64: i % 251 for i in range(count)}
    for slot, value in last.items():
        assert (out[slot * small:(slot + 1) * small] == value).all(), f"slot {slot}"
    np.testing.assert_array_equal(out_large, expect_large)


@pytest.mark.parametrize("extra", [1, 5])
def test_mid_size_copies_are_filled_and_sent_in_pieces_at_any_offset(device, extra):
    """A pageable copy too small for the copy threads is filled into the ring and DMA'd a piece at a time:
    every piece lands at its own offset, also when the size is no multiple of the piece or of 16 bytes (the
    non-temporal stores' alignment) and the host array is overwritten right after the call."""
    from ironaccel.backends.cuda.staging import PARALLEL_COPY_BYTES, PIPELINE_PIECE, SMALL_COPY_BYTES

    s = device.create_stream()
    rng = np.random.default_rng(extra)
    for n in (SMALL_COPY_BYTES + extra, 3 * PIPELINE_PIECE + extra, PARALLEL_COPY_BYTES - extra):
        with device.alloc(n + 2 * extra) as buf:
            s.fill(buf, 0)
            host = rng.integers(0, 256, n, dtype=np.uint8)
            expect = host.copy()
            s.copy_htod(buf, host[:], dst_offset=extra)
            host[:] = 0
            out = np.empty(buf.nbytes, np.uint8)
            s.copy_dtoh(out, buf)
            s.synchronize()
        np.testing.assert_array_equal(out[extra:extra + n], expect, err_msg=f"{n} bytes")
        assert not out[:extra].any() and not out[extra + n:].any(), f"{n} bytes: written outside the range"


@pytest.mark.parametrize("threads", [0, 3])
def test_compiled_copy_threads_fill_every_piece(device, monkeypatch, threads):
    """The compiled staged_copy fills a chunk with the caller and C copy threads and DMAs each piece in order:
    with any number of threads (the host's count is what the bench uses; 3 forces several here), copies of
    one chunk and of several, at an unaligned offset, land byte-exactly, the host array overwritten right
    after the call (the call returns only once no thread reads it)."""
    from ironaccel.backends.cuda import native
    from ironaccel.backends.cuda.staging import STAGING_SEGMENT

    if native.fast is None:
        pytest.skip("the compiled module is not loaded (IRONACCEL_PURE_PYTHON=1 or no compiler)")
    monkeypatch.setattr(device._staging, "_threads", threads)
    s = device.create_stream()
    rng = np.random.default_rng(threads)
    for n in ((1 << 20) + 3, 2 * STAGING_SEGMENT + 5):
        with device.alloc(n + 14) as buf:
            s.fill(buf, 0)
            host = rng.integers(0, 256, n, dtype=np.uint8)
            expect = host.copy()
            s.copy_htod(buf, host, dst_offset=7)
            host[:] = 0
            out = np.empty(buf.nbytes, np.uint8)
            s.copy_dtoh(out, buf)
            s.synchronize()
        np.testing.assert_array_equal(out[7:7 + n], expect, err_msg=f"{n} bytes")
        assert not out[:7].any() and not out[7 + n:].any(), f"{n} bytes: written outside the range"


def test_two_devices_rings_share_the_copy_threads_safely(device, monkeypatch):
    """The compiled copy threads serve one chunk at a time, whichever ring asks: two devices (two rings, two
    locks) copying large arrays from two threads at once each get their own bytes."""
    import threading

    from ironaccel.backends.cuda import CudaBackend, native

    if native.fast is None:
        pytest.skip("the compiled module is not loaded (IRONACCEL_PURE_PYTHON=1 or no compiler)")
    other = CudaBackend().open_device(0)
    n = (1 << 20) + 11  # one chunk: the threads' hand-offs come often
    results: dict[int, bool] = {}

    def copy_rounds(dev: Any, seed: int) -> None:
        monkeypatch.setattr(dev._staging, "_threads", 2)
        s = dev.create_stream()
        rng = np.random.default_rng(seed)
        with dev.alloc(n) as buf:
            ok = True
            for _ in range(24):
                host = rng.integers(0, 256, n, dtype=np.uint8)
                expect = host.copy()
                s.copy_htod(buf, host)
                host[:] = 0
                out = np.empty(n, np.uint8)
                s.copy_dtoh(out, buf)
                s.synchronize()
                ok = ok and bool((out == expect).all())
        results[seed] = ok

    try:
        threads = [threading.Thread(target=copy_rounds, args=(dev, seed)) for seed, dev in ((1, device), (2, other))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == {1: True, 2: True}
    finally:
        other.close()


def test_a_failed_piece_dma_stops_the_copy_and_leaves_the_threads_usable(fake, device, monkeypatch):
    """A DMA that fails in the middle of a threaded chunk raises the typed error naming cuMemcpyHtoDAsync,
    enqueues no DMA after it, and the next large copy (the copy threads done with the failed job) lands."""
    from ironaccel.backends.cuda import native

    if native.fast is None:
        pytest.skip("the compiled module is not loaded (IRONACCEL_PURE_PYTHON=1 or no compiler)")
    monkeypatch.setattr(device._staging, "_threads", 3)
    s = device.create_stream()
    n = 1 << 20  # 8 pieces of 128 KiB with 3 threads
    with device.alloc(n) as buf:
        host = np.full(n, 9, np.uint8)
        before = fake.ironaccel_fake_call_count(b"cuMemcpyHtoDAsync")
        fake.ironaccel_fake_inject(b"cuMemcpyHtoDAsync", 3, CUDA_ERROR_INVALID_VALUE)
        with pytest.raises(ia.DriverError, match="cuMemcpyHtoDAsync"):
            s.copy_htod(buf, host)
        assert fake.ironaccel_fake_call_count(b"cuMemcpyHtoDAsync") == before + 3, "DMAs enqueued after the failure"
        s.synchronize()
        host[:] = 4
        s.copy_htod(buf, host)
        out = np.empty(n, np.uint8)
        s.copy_dtoh(out, buf)
        s.synchronize()
    assert (out == 4).all()


def test_staging_reuses_a_segment_only_when_its_copies_are_done(device):
    """A staged copy of REUSE_BYTES or more on an idle stream that alone used the ring's segment fills it again
    from its start (bytes still in the cache); behind a running kernel the segment is not reused, or the
    second copy would overwrite the first's bytes before their DMA runs."""
    from ironaccel.backends.cuda.staging import REUSE_BYTES

    s, ring = device.create_stream(), device._staging
    n = REUSE_BYTES
    with device.alloc(2 * n) as buf, device.alloc(4) as out:
        host = np.full(n, 1, np.uint8)
        for _ in range(3):
            s.copy_htod(buf, host)
            s.synchronize()
        assert ring._used == n, "an idle stream's copy must reuse the segment from its start"
        kernel = device.compile(PTX_SPIN, "ptx").kernel("spin")
        s.launch(kernel, 1, 1, (out, np.uint32(SPIN_ITERATIONS // 20)))
        s.copy_htod(buf, host)  # queued behind the kernel: its staged bytes must stay untouched
        host[:] = 2
        s.copy_htod(buf, host, dst_offset=n)
        assert ring._used == 3 * n
        result = np.empty(2 * n, np.uint8)
        s.copy_dtoh(result, buf)
        s.synchronize()
    assert (result[:n] == 1).all() and (result[n:] == 2).all()


def test_pinned_source_is_copied_directly(fake, device):
    from ironaccel.backends.cuda import PINNED_CHECK_BYTES, native

    cu = native.cu
    n = PINNED_CHECK_BYTES
    ptr = native.calls.cuMemHostAlloc(n, 0)
    try:
        pinned = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(int(ptr)))
        pinned[:] = np.arange(n) % 253
        s = device.create_stream()
        with device.alloc(n) as buf:
            before = fake.ironaccel_fake_call_count(b"cuMemcpyHtoDAsync")
            s.copy_htod(buf, pinned)
            assert fake.ironaccel_fake_call_count(b"cuMemcpyHtoDAsync") == before + 1
            s.synchronize()
            out = np.empty(n, np.uint8)
            s.copy_dtoh(out, buf)
            s.synchronize()
        np.testing.assert_array_equal(out, pinned)
        assert device._staging._base == 0, "a pinned source must not touch the staging ring"
    finally:
        cu.cuMemFreeHost(ptr)


def test_a_pinned_source_may_be_overwritten_when_copy_htod_returns(device):
    """COPY-4 for page-locked host memory too: the copy is enqueued behind a kernel still running, and the
    source is overwritten as soon as copy_htod returns; the device must get what the array held at the call."""
    from ironaccel.backends.cuda import PINNED_CHECK_BYTES, native

    n = 4 * PINNED_CHECK_BYTES
    ptr = native.calls.cuMemHostAlloc(n, 0)
    try:
        pinned = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(int(ptr)))
        pinned[:] = np.arange(n) % 251
        expect = pinned.copy()
        s = device.create_stream()
        spin = device.compile(PTX_SPIN, "ptx").kernel("spin")
        with device.alloc(n) as buf, device.alloc(4) as flag:
            s.launch(spin, 1, 1, (flag, np.uint32(SPIN_ITERATIONS // 10)))
            s.copy_htod(buf, pinned)
            pinned[:] = 0xEE
            s.synchronize()
            out = np.empty(n, np.uint8)
            s.copy_dtoh(out, buf)
            s.synchronize()
        np.testing.assert_array_equal(out, expect)
    finally:
        native.cu.cuMemFreeHost(ptr)


@pytest.mark.parametrize("pure", ["0", "1"])
def test_a_direct_pinned_copy_is_complete_when_copy_htod_returns(tmp_path, pure):
    """COPY-4 on the direct path: a pinned source on an idle stream is DMA'd from the caller's array, so the
    call must wait for that DMA before it returns. The fake started with START_ON_WAIT runs queued work only
    when the host waits or queries, so a copy left queued would read the bytes written after the call."""
    proc = _run_script(
        tmp_path,
        "import ctypes\n"
        "import numpy as np\n"
        "from ironaccel.backends.cuda import CudaBackend, PINNED_CHECK_BYTES, native\n"
        "dev = CudaBackend().open_device(0)\n"
        "n = PINNED_CHECK_BYTES\n"
        "ptr = int(native.calls.cuMemHostAlloc(n, 0))\n"
        "pinned = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr))\n"
        "pinned[:] = np.arange(n) % 249\n"
        "expect = pinned.copy()\n"
        "s = dev.create_stream()\n"
        "buf = dev.alloc(n)\n"
        "s.copy_htod(buf, pinned)\n"
        "pinned[:] = 0xEE\n"
        "out = np.empty(n, np.uint8)\n"
        "s.copy_dtoh(out, buf)\n"
        "s.synchronize()\n"
        "assert dev._staging._base == 0, 'not the direct path'\n"
        "print('same' if (out == expect).all() else 'overwritten')\n"
        "buf.free()\n"
        "native.cu.cuMemFreeHost(ptr)\n"
        "dev.close()\n",
        IRONACCEL_FAKE_CUDA_START_ON_WAIT="1", IRONACCEL_PURE_PYTHON=pure)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "same"


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


PTX_PARAMS = """.version 8.0
.target sm_90
.address_size 64
.visible .entry kinds(.param .u64 data, .param .u64 .ptr .global .align 4 out, .param .f32 a, .param .f64 b,
    .param .u32 n, .param .s32 m, .param .b16 h, .param .s64 big, .param .align 8 .b8 pair[16])
{
    ret;
}
"""


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


PTX_SPIN = """.version 8.0
.target sm_90
.address_size 64
.visible .entry spin(.param .u64 out, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, 0;
LOOP:
    add.u32 %r2, %r2, 1;
    setp.lt.u32 %p1, %r2, %r1;
    @%p1 bra LOOP;
    cvta.to.global.u64 %rd2, %rd1;
    st.global.u32 [%rd2], %r2;
    ret;
}
"""
SPIN_ITERATIONS = 50_000_000  # about a second in the fake's interpreter here; the waits below time out at 50 ms


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
    import gc

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


def test_failed_free_keeps_the_buffer_live_and_close_frees_it(fake, device):
    before = fake.ironaccel_fake_live_allocations()
    buf = device.alloc(64)
    fake.ironaccel_fake_inject(b"cuMemFreeAsync", 1, CUDA_ERROR_INVALID_VALUE)
    with pytest.raises(ia.DriverError) as info:
        buf.free()
    assert info.value.op == "cuMemFreeAsync"
    assert not buf.freed, "a buffer whose free failed is still live"
    assert fake.ironaccel_fake_live_allocations() == before + 1
    buf.free()  # a retry frees it
    device.synchronize()
    assert buf.freed and fake.ironaccel_fake_live_allocations() == before
    dropped = device.alloc(64)
    fake.ironaccel_fake_inject(b"cuMemFreeAsync", 1, CUDA_ERROR_INVALID_VALUE)
    del dropped  # __del__'s free fails: nobody to tell, the device keeps the pointer for close
    assert fake.ironaccel_fake_live_allocations() == before + 1
    device.close()
    assert fake.ironaccel_fake_live_allocations() == device.live_allocations_before_open


def test_failed_wait_inside_alloc_frees_the_allocation(fake, device):
    before = fake.ironaccel_fake_live_allocations()
    fail_next_wait(fake, "cuStreamSynchronize")
    with pytest.raises(ia.DriverError) as info:
        device.alloc(4096)
    assert info.value.op == "cuStreamSynchronize"
    device.synchronize()
    assert fake.ironaccel_fake_live_allocations() == before
    assert_device_works(device)


def test_failed_context_release_closes_the_device_and_is_retried_at_exit(fake):
    from ironaccel.backends.cuda import CudaBackend, device as device_module

    baseline = fake.ironaccel_fake_live_allocations()
    dev = CudaBackend().open_device(0)
    s = dev.create_stream()
    with dev.alloc(64) as buf:
        s.copy_htod(buf, np.zeros(64, np.uint8))  # the staging ring too
    fake.ironaccel_fake_inject(b"cuDevicePrimaryCtxRelease", 1, CUDA_ERROR_INVALID_VALUE)
    with pytest.raises(ia.DriverError) as info:
        dev.close()
    assert info.value.op == "cuDevicePrimaryCtxRelease"
    assert dev.closed and fake.ironaccel_fake_live_allocations() == baseline
    dev.close()  # closed is closed: nothing more to do, nothing raised
    assert device_module._unreleased_contexts == [dev._dev]
    assert_device_works(CudaBackend().open_device(0))
    device_module._unreleased_contexts.pop()
    assert dev._cu.cuDevicePrimaryCtxRelease(dev._dev)[0] == 0  # what exit would do


def _run_script(tmp_path: Any, source: str, tree: Any = None, **env_extra: str) -> Any:
    """Run ``source`` in a child on the fake, importing ironaccel from ``tree`` (default: this checkout)."""
    import subprocess
    import sys
    from pathlib import Path

    from ironaccel import fakes

    script = tmp_path / "script.py"
    script.write_text(source)
    try:
        env = fakes.child_env()
    except ia.NotAvailable as exc:
        pytest.skip(f"the fake libcuda cannot be built: {exc}")
    env.update(env_extra, PYTHONPATH=str(tree or Path(__file__).resolve().parents[1]))
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)


def test_devices_left_open_are_closed_at_exit(tmp_path):
    """A program that never calls close(): the fake (in error mode) reports no leak at exit, its staging
    ring included, and the exit status stays 0."""
    proc = _run_script(
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


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_tiny_copies_land_in_the_host_array(device, n):
    """The smallest copies both ways (a 1-element array must be taken as memory, never as a number)."""
    s = device.create_stream()
    with device.alloc(64) as buf:
        s.fill(buf, 0)
        s.copy_htod(buf, np.arange(1, n + 1, dtype=np.uint8), dst_offset=5)
        out = np.full(n, 0xEE, np.uint8)
        s.copy_dtoh(out, buf, src_offset=5)
        s.synchronize()
    np.testing.assert_array_equal(out, np.arange(1, n + 1, dtype=np.uint8))


def test_exit_does_not_wait_for_a_kernel_that_runs_on(tmp_path):
    """A device left open with a kernel still running: exit waits a bounded time, then leaves it to the driver."""
    import time

    started = time.monotonic()
    proc = _run_script(
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


_WHICH_PATH = (
    "import numpy as np\n"
    "from ironaccel.backends.cuda import CudaBackend, native\n"
    "dev = CudaBackend().open_device(0)\n"
    "s = dev.create_stream()\n"
    "with dev.alloc(64) as buf:\n"
    "    s.copy_htod(buf, np.arange(16, dtype=np.uint32))\n"
    "    out = np.zeros(16, np.uint32)\n"
    "    s.copy_dtoh(out, buf)\n"
    "    s.record().synchronize()\n"
    "    assert (out == np.arange(16)).all(), out\n"
    "events = {type(e).__name__ for e in [s.record() for _ in range(3)]}  # none spare: each one made anew\n"
    "assert len(events) == 1, events\n"
    "print(type(s).__name__, type(dev.default_stream).__name__, type(dev._staging).__name__, *events, native.fast is None)\n"
)


@pytest.mark.parametrize("pure", ["1", ""])
def test_pure_python_path_is_used_when_forced(tmp_path, pure):
    """IRONACCEL_PURE_PYTHON=1: no compiled module is loaded and every stream, event and the staging ring
    are the pure-Python classes; without it, where ironaccel._fast builds here, the compiled ones (events
    too when no spare CUevent is left and one is created)."""
    from ironaccel import native

    if not pure and native.load() is None:
        pytest.skip(f"the compiled path is not available here: {native.why_not}")
    proc = _run_script(tmp_path, _WHICH_PATH, IRONACCEL_PURE_PYTHON=pure)
    assert proc.returncode == 0, proc.stderr
    expected = ("CudaStream CudaStream StagingRing CudaEvent True" if pure
                else "FastStream FastStream StagingRing FastEvent False")
    assert proc.stdout.split("\n")[-2] == expected


PTX_STORE64 = """.version 8.0
.target sm_90
.address_size 64
.visible .entry store64(.param .u64 out, .param .u64 value)
{
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [value];
    cvta.to.global.u64 %rd3, %rd1;
    st.global.u64 [%rd3], %rd2;
    ret;
}
"""


def test_launch_arguments_plain_pooled_64_bit_and_rejected(device):
    """What the compiled launch takes in one call (a cached rule, plain and pooled buffers, every scalar
    code) lands right, and what it hands to the Python path (a first launch, a freed buffer, a buffer of
    another device, a closed device) raises the API's errors, naming the launch; nothing is enqueued then."""
    s = device.create_stream()
    k = device.compile(PTX_STORE64, "ptx").kernel("store64")
    out = np.zeros(1, np.uint64)
    pool = ia.MemPool(device, s)
    for buf in (device.alloc(8), pool.alloc(8)):
        for value in (np.uint64(2**64 - 3), np.uint64(5), np.int64(-2)):
            for _ in range(2):  # the first launch of these types makes the rule, the second uses it
                s.launch(k, 1, 1, (buf, value))
                s.copy_dtoh(out, buf)
                s.synchronize()
                assert out[0] == value.astype(np.uint64), (type(buf).__name__, value)
        buf.free()
        with pytest.raises(ia.UseAfterFree, match="Stream.launch"):
            s.launch(k, 1, 1, (buf, np.uint64(1)))
    from ironaccel.backends.cuda import CudaBackend

    other = CudaBackend().open_device(0)
    plan = k.prepare(1, 1)
    try:
        foreign = other.alloc(8)
        with pytest.raises(ia.InvalidArgument, match="argument 0 belongs to another device"):
            s.launch(k, 1, 1, (foreign, np.uint64(1)))
        for not_ours in (other.create_stream(), "a stream", None):
            with pytest.raises(ia.InvalidArgument, match="a plan launches on a Stream of its kernel's device"):
                plan(not_ours, foreign, np.uint64(1))
    finally:
        other.close()
    with device.alloc(8) as buf:
        plan(s, buf, np.uint64(9))
        s.copy_dtoh(out, buf)
        s.synchronize()
        assert out[0] == 9
        pool.close()
        device.close()
        with pytest.raises(ia.UseAfterFree, match="Stream.launch"):
            plan(s, buf, np.uint64(1))


def test_events_and_stream_waits_keep_their_api(fake, device):
    """Stream.record/synchronize and Event.query/synchronize (compiled: _fast_c's StreamCore and EventCore, on
    both paths the same): a wait releases the copy_dtoh destinations held before it, a dropped event gives its
    CUevent back to the device (a failed record too), a timeout and a timing event work, wrong arguments are
    TypeError or InvalidArgument, a failed driver call names its entry point, and after close each names its op."""
    import weakref

    s = device.create_stream()
    spare = device._spare_events[False]
    with device.alloc(64) as buf:
        event = s.record()
        before = len(spare)
        del event
        assert len(spare) == before + 1, "a dropped event gives its CUevent back"
        event = s.record()
        assert len(spare) == before, "record takes a spare CUevent"
        out = np.empty(64, np.uint8)
        s.copy_dtoh(out, buf)
        held = weakref.ref(out)
        del out
        after_copy = s.record()
        after_copy.synchronize()
        assert held() is None, "the event's wait releases the copy recorded before it"
        assert after_copy.query() is True and event.query() is True
        event.synchronize(timeout=5.0)
        event.synchronize(None)
        s.synchronize(timeout=5.0)
        s.synchronize(None)
        start, end = s.record(timing=True), s.record(timing=True)
        assert start.elapsed_ms(end) >= 0.0
        with pytest.raises(ia.InvalidArgument, match="Event.synchronize"):
            event.synchronize(timeout=-1)
        with pytest.raises(ia.InvalidArgument, match="Stream.synchronize"):
            s.synchronize(timeout=0)
        with pytest.raises(TypeError):
            s.record(True)  # timing is keyword-only
        with pytest.raises(TypeError):
            event.synchronize(1.0, 2.0)
        for entry_point, wait in (("cuEventSynchronize", lambda: s.record().synchronize()),
                                  ("cuEventQuery", lambda: s.record().query()),
                                  ("cuStreamSynchronize", s.synchronize)):
            if entry_point in QUERY_BEFORE:
                fail_next_wait(fake, entry_point)
            else:
                fake.ironaccel_fake_inject(entry_point.encode(), 1, CUDA_ERROR_INVALID_VALUE)
            with pytest.raises(ia.DriverError) as info:
                wait()
            assert info.value.op == entry_point
        for wait, query, work_done in (("cuStreamSynchronize", "cuStreamQuery", s.synchronize),
                                       ("cuEventSynchronize", "cuEventQuery", lambda: s.record().synchronize())):
            s.synchronize()
            waits = fake.ironaccel_fake_call_count(wait.encode())
            queries = fake.ironaccel_fake_call_count(query.encode())
            work_done()
            assert fake.ironaccel_fake_call_count(query.encode()) == queries + 1, f"{wait} asks {query} first"
            if wait == "cuStreamSynchronize":
                assert fake.ironaccel_fake_call_count(wait.encode()) == waits, "an idle stream: no blocking wait"
            fake.ironaccel_fake_inject(query.encode(), 1, CUDA_ERROR_INVALID_VALUE)
            work_done()  # a failed query is no answer: the blocking wait decides
            assert fake.ironaccel_fake_call_count(wait.encode()) > waits
        count = len(spare)
        fake.ironaccel_fake_inject(b"cuEventRecord", 1, CUDA_ERROR_INVALID_VALUE)
        with pytest.raises(ia.DriverError) as info:
            s.record()
        assert info.value.op == "cuEventRecord"
        del info  # its traceback holds the pure path's frame, and so the event
        assert len(spare) == count, "a failed record gives its CUevent back"
    device.close()
    for wait, op in ((event.synchronize, "Event.synchronize"), (event.query, "Event.query"),
                     (s.record, "Stream.record"), (s.synchronize, "Stream.synchronize")):
        with pytest.raises(ia.UseAfterFree, match=op):
            wait()
    count = len(spare)
    del event  # its CUevent was destroyed by close: nothing goes back
    assert len(spare) == count


def test_buffers_keep_their_bookkeeping(fake, device):
    """Device.alloc and Buffer.free (compiled: _fast_c's DeviceCore, alloc and BufferCore; on both paths the same): a live
    buffer is in device._live by a weak reference and leaves it when freed, free() is idempotent across threads
    (one cuMemFreeAsync), a buffer dropped unfreed frees itself, one used on a stream frees after that use, and a
    failed alloc wait gives the memory back and names cuStreamSynchronize; bad sizes and a closed device raise the
    API's errors naming Device.alloc."""
    import threading

    before = fake.ironaccel_fake_live_allocations()
    buf = device.alloc(256)
    assert device._live[buf._ptr]() is buf and not buf.freed
    frees = fake.ironaccel_fake_call_count(b"cuMemFreeAsync")
    threads = [threading.Thread(target=buf.free) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    buf.free()
    assert buf.freed and buf._ptr not in device._live
    assert fake.ironaccel_fake_call_count(b"cuMemFreeAsync") == frees + 1
    with pytest.raises(ia.UseAfterFree, match="Buffer.handle"):
        buf.handle
    dropped = device.alloc(256)
    ptr = dropped._ptr
    del dropped
    assert ptr not in device._live
    s = device.create_stream()
    used = device.alloc(256)
    s.fill(used, 1)
    assert used._last_stream is s
    used.free()  # ordered after the fill, on s
    assert used._last_stream is None
    device.synchronize()
    assert fake.ironaccel_fake_live_allocations() == before
    fail_next_wait(fake, "cuStreamSynchronize")
    with pytest.raises(ia.DriverError) as info:
        device.alloc(256)
    assert info.value.op == "cuStreamSynchronize"
    device.synchronize()
    assert fake.ironaccel_fake_live_allocations() == before and not device._live
    for nbytes in (0, -1, True, 1.5):
        with pytest.raises(ia.InvalidArgument, match="Device.alloc"):
            device.alloc(nbytes)
    for nbytes in (device.info.limits.max_alloc + 1, 2**64):
        with pytest.raises(ia.OutOfMemory, match="Device.alloc"):
            device.alloc(nbytes)
    device.close()
    with pytest.raises(ia.UseAfterFree, match="Device.alloc"):
        device.alloc(256)


PTX_DIMS = """.version 8.0
.target sm_90
.address_size 64
.visible .entry dims(.param .u64 out, .param .u32 tag)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r7, [tag];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %nctaid.x;
    mov.u32 %r2, %nctaid.y;
    mov.u32 %r3, %nctaid.z;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %ntid.y;
    mov.u32 %r6, %ntid.z;
    st.global.u32 [%rd2], %r1;
    st.global.u32 [%rd2+4], %r2;
    st.global.u32 [%rd2+8], %r3;
    st.global.u32 [%rd2+12], %r4;
    st.global.u32 [%rd2+16], %r5;
    st.global.u32 [%rd2+20], %r6;
    st.global.u32 [%rd2+24], %r7;
    ret;
}
"""


def test_launches_resolved_per_kernel_dims_and_types(device):
    """Stream.launch resolves a launch once per (kernel, stream's device, dims, argument types) and keeps the last
    few (compiled: _fast_c's KernelCore): more configurations than it keeps, each repeated, dims equal but not
    the same objects, two streams, argument types that pack differently for one parameter (a Buffer's pointer or
    a u64), each launch landing with its own dims and values; after the device closes, UseAfterFree; a dropped
    kernel is collected though its kept launches refer back to it."""
    import weakref

    streams = (device.create_stream(), device.create_stream())
    k = device.compile(PTX_DIMS, "ptx").kernel("dims")
    configs = [(1, 1), (2, 1), (1, (3, 1, 1)), ((2, 2, 1), (1, 2, 1)), (3, 4), ((1, 1, 2), 2), (300, (1, 1, 1))]
    out = np.zeros(7, np.uint32)
    with device.alloc(28) as buf:
        for round_ in range(3):
            for i, (grid, block) in enumerate(configs):
                for tag_type in (np.uint32, np.int32):
                    s = streams[(i + round_) % 2]
                    tag = 1000 * round_ + 10 * i + (tag_type is np.int32)
                    fresh = lambda d: int(str(d)) if type(d) is int else tuple(int(str(x)) for x in d)  # equal, not the same
                    s.launch(k, fresh(grid), fresh(block), (buf, tag_type(tag)))
                    s.copy_dtoh(out, buf)
                    s.synchronize()
                    g = (grid, 1, 1) if type(grid) is int else grid
                    b = (block, 1, 1) if type(block) is int else block
                    assert out.tolist() == [*g, *b, tag], (grid, block, tag_type)
        store = device.compile(PTX_STORE64, "ptx").kernel("store64")
        value = np.zeros(1, np.uint64)
        with device.alloc(8) as other:
            for _ in range(3):
                for arg in (other, np.uint64(12345)):
                    streams[0].launch(store, 1, 1, (buf, arg))
                    streams[0].copy_dtoh(value, buf)
                    streams[0].synchronize()
                    assert value[0] == (int(other.handle) if arg is other else 12345)
        s = streams[0]
        s.launch(k, 1, 1, (buf, np.uint32(1)))
        device.close()
        with pytest.raises(ia.UseAfterFree, match="Stream.launch"):
            s.launch(k, 1, 1, (buf, np.uint32(1)))
    gone = weakref.ref(k)
    del k, store
    gc.collect()
    assert gone() is None


def test_threads_share_a_kernels_resolved_launches(device):
    """Threads launching one kernel, each on its own stream, with more configurations together than the kernel
    keeps resolved (KernelCore), so each replaces the others': every launch lands with its own dims and value."""
    import threading

    k = device.compile(PTX_DIMS, "ptx").kernel("dims")
    configs = [(1, 1), (2, 1), (1, 3), ((2, 2, 1), 1), (3, (1, 2, 1)), (1, (1, 1, 2))]
    failures: list[object] = []

    def launches(t: int) -> None:
        try:
            s = device.create_stream()
            out = np.zeros(7, np.uint32)
            with device.alloc(28) as buf:
                for i in range(40):
                    grid, block = configs[(i + t) % len(configs)]
                    s.launch(k, grid, block, (buf, np.uint32(100 * t + i)))
                    s.copy_dtoh(out, buf)
                    s.synchronize()
                    g = (grid, 1, 1) if type(grid) is int else grid
                    b = (block, 1, 1) if type(block) is int else block
                    if out.tolist() != [*g, *b, 100 * t + i]:
                        failures.append((t, i, out.tolist()))
        except Exception as exc:  # reported by the assert below, not lost in the thread
            failures.append(exc)

    threads = [threading.Thread(target=launches, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_launches_make_their_device_current_on_each_thread(device):
    """A launch makes its device's context current where the thread's record (native.current: the compiled
    module's ThreadCurrent, in C thread-local storage, or a threading.local) names another device or none: on
    a thread whose first call is a launch resolved on another thread (the fake refuses a launch without a
    current context), and after another Device's call on the same thread; each thread's record is its own."""
    import threading

    from ironaccel.backends.cuda import CudaBackend, native

    s = device.create_stream()
    k = device.compile(PTX_STORE64, "ptx").kernel("store64")
    out = np.zeros(1, np.uint64)
    other = CudaBackend().open_device(0)
    try:
        with device.alloc(8) as buf, other.alloc(8) as theirs:
            for _ in range(2):  # the plan, then the launch resolved
                s.launch(k, 1, 1, (buf, np.uint64(1)))
                assert native.current.device == device._id
            other.default_stream.fill(theirs, 0)
            assert native.current.device == other._id
            s.launch(k, 1, 1, (buf, np.uint64(2)))
            assert native.current.device == device._id
            seen: list[object] = []

            def first_call_a_launch() -> None:
                seen.append(native.current.device)
                try:
                    s.launch(k, 1, 1, (buf, np.uint64(77)))
                except ia.IronAccelError as exc:
                    seen.append(exc)
                seen.append(native.current.device)

            thread = threading.Thread(target=first_call_a_launch)
            thread.start()
            thread.join()
            assert seen == [0, device._id]
            assert native.current.device == device._id
            s.copy_dtoh(out, buf)
            s.synchronize()
            assert out[0] == 77
    finally:
        other.close()


def test_launch_checks_hold_on_every_form(device):
    """Stream.launch (compiled: _fast_c's StreamCore.launch once the kernel has a plan for the dims): int and
    tuple dims, args by keyword or as a list, each launch landing; a kernel of another device, a non-kernel,
    args that are no tuple or list, and dims that are no exact ints raise the API's errors, cached plan or not."""
    s = device.create_stream()
    k = device.compile(PTX_STORE64, "ptx").kernel("store64")
    out = np.zeros(1, np.uint64)
    with device.alloc(8) as buf:
        for value, launch in enumerate((lambda v: s.launch(k, 1, 1, (buf, np.uint64(v))),
                                        lambda v: s.launch(k, (1, 1, 1), (1,), [buf, np.uint64(v)]),
                                        lambda v: s.launch(k, 1, 1, args=(buf, np.uint64(v))),
                                        lambda v: s.launch(k, grid=1, block=1, args=(buf, np.uint64(v))))):
            for attempt in range(2):  # the first use of the dims makes the plan, the second uses it
                launch(100 * value + attempt)
                s.copy_dtoh(out, buf)
                s.synchronize()
                assert out[0] == 100 * value + attempt
        with pytest.raises(ia.InvalidArgument, match="Stream.launch.*compiled on this device"):
            s.launch("store64", 1, 1, (buf, np.uint64(1)))
        with pytest.raises(ia.InvalidArgument, match="Stream.launch.*tuple or list"):
            s.launch(k, 1, 1, np.uint64(1))
        for grid in (True, (1, True), 0, (1, 2.0)):
            with pytest.raises(ia.InvalidArgument, match="Stream.launch"):
                s.launch(k, grid, 1, (buf, np.uint64(1)))
        with pytest.raises(TypeError):
            s.launch(k, 1)
        from ironaccel.backends.cuda import CudaBackend

        other = CudaBackend().open_device(0)
        try:
            theirs = other.compile(PTX_STORE64, "ptx").kernel("store64")
            for _ in range(2):  # a plan for (1, 1) there, then its launch resolved for that device
                other.default_stream.launch(theirs, 1, 1, (other.alloc(8), np.uint64(1)))
            with pytest.raises(ia.InvalidArgument, match="Stream.launch.*compiled on this device"):
                s.launch(theirs, 1, 1, (buf, np.uint64(1)))
        finally:
            other.close()


def test_small_copy_htod_checks_hold_on_every_form(device):
    """Stream.copy_htod of a small host array (compiled: _fast_c's StreamCore.copy_htod, on both paths the
    same): any C-contiguous plain-data ndarray, bytes, an offset, a pooled buffer, each landing exactly; and the
    API's errors, naming the op, for what the compiled check hands back (non-contiguous, object and datetime
    arrays, out of range, freed plain and pooled buffers, another device's buffer, a capture, a closed device)."""
    s = device.create_stream()
    pool = ia.MemPool(device, s)
    out = np.zeros(64, np.uint8)
    with device.alloc(64) as buf:
        pooled = pool.alloc(64)
        for target in (buf, pooled):
            for src, offset in ((np.arange(16, dtype=np.uint32).reshape(4, 4), 0), (np.arange(8, dtype=np.uint8), 56),
                                (bytes(range(100, 132)), 16), (np.float64([1.5, -2.0]), 8)):
                expected = np.frombuffer(bytes(memoryview(src)), np.uint8)
                s.fill(target, 0)
                s.copy_htod(target, src, dst_offset=offset)
                s.copy_dtoh(out, target)
                s.synchronize()
                assert out[offset:offset + expected.size].tolist() == expected.tolist(), (type(target).__name__, offset)
                assert not out[:offset].any() and not out[offset + expected.size:].any()
        s.copy_htod(buf, np.zeros(0, np.uint8), dst_offset=64)  # nothing to copy, in range
        op = "Stream.copy_htod"
        for src, offset in ((np.zeros((4, 4), np.uint8)[:, ::2], 0), (np.array([None] * 4, object), 0),
                            (np.zeros(2, "datetime64[s]"), 0), (np.zeros(16, np.uint8), 56), (np.zeros(1, np.uint8), -1),
                            (np.zeros(1, np.uint8), 1.0)):
            with pytest.raises(ia.InvalidArgument, match=op):
                s.copy_htod(buf, src, dst_offset=offset)
        with pytest.raises(TypeError):
            s.copy_htod(buf, np.zeros(4, np.uint8), 0)  # dst_offset is keyword-only
        pooled.free()
        with pytest.raises(ia.UseAfterFree, match=op):
            s.copy_htod(pooled, np.zeros(4, np.uint8))
        with pytest.raises(ia.InvalidArgument, match=op):
            s.copy_htod(s, np.zeros(4, np.uint8))
        from ironaccel.backends.cuda import CudaBackend

        other = CudaBackend().open_device(0)
        try:
            with pytest.raises(ia.InvalidArgument, match="another device"):
                s.copy_htod(other.alloc(64), np.zeros(4, np.uint8))
        finally:
            other.close()
        with s.capture():
            with pytest.raises(ia.InvalidArgument, match=op):
                s.copy_htod(buf, np.zeros(4, np.uint8))
    with pytest.raises(ia.UseAfterFree, match=op):
        s.copy_htod(buf, np.zeros(4, np.uint8))
    kept = device.alloc(64)
    pool.close()
    device.close()
    with pytest.raises(ia.UseAfterFree, match=op):
        s.copy_htod(kept, np.zeros(4, np.uint8))


def test_compiled_entry_points_refuse_what_is_not_theirs(device):
    """The compiled module's functions and its types' methods, given objects they were not made for (another
    type, a half-made instance), raise TypeError or the Python error instead of reading foreign memory."""
    from ironaccel.backends.cuda import native
    from ironaccel.backends.cuda.fast import FastEvent

    fast = native.fast
    if fast is None:
        pytest.skip("the compiled path is not loaded (IRONACCEL_PURE_PYTHON=1 or no compiler)")
    s = device.create_stream()
    with device.alloc(64) as buf:
        host = np.zeros(4, np.uint8)
        for call in (lambda: fast.record("a stream", False), lambda: fast.alloc("a device", 8),
                     lambda: fast.staged_htod("a stream", buf, 0, host, device._staging),
                     lambda: fast.staged_htod(s, "a buffer", 0, host, device._staging), lambda: FastEvent(),
                     lambda: type(s).record(object()), lambda: type(device)._alloc(object(), 8),
                     lambda: type(buf).free(object()), lambda: type(buf).__new__(type(buf)).free()):
            with pytest.raises(TypeError):
                call()
        with pytest.raises(AttributeError):
            fast.launch(None, s, ())


def test_compiled_launch_reads_only_verified_scalar_layouts(device):
    """The compiled launch reads a numpy scalar's value in place only for types whose sample it verified against
    the generic conversion: all six argument types on this numpy, none for a type laid out otherwise (an int)."""
    from ironaccel.backends.cuda import native, fast

    if native.fast is None:
        pytest.skip("the compiled path is not loaded (IRONACCEL_PURE_PYTHON=1 or no compiler)")
    try:
        assert native.fast.configure_scalars((("i", 7), ("q", 2**40))) == 0
        assert native.fast.configure_scalars(fast.scalar_samples()) == 6
    finally:
        native.fast.configure_scalars(fast.scalar_samples())


_BUILD_FAILS = (
    "import numpy as np\n"
    "import ironaccel as ia\n"
    "from ironaccel import native as fast_c\n"
    "from ironaccel.backends.cuda import CudaBackend, native\n"
    "assert fast_c.load() is None and 'build' in fast_c.why_not, fast_c.why_not\n"
    "dev = CudaBackend().open_device(0)\n"
    "s = dev.create_stream()\n"
    "pool = ia.MemPool(dev, s)\n"
    "with dev.alloc(64) as buf:\n"
    "    pooled = pool.alloc(64)\n"
    "    s.copy_htod(buf, np.arange(16, dtype=np.uint32))\n"
    "    s.copy_dtod(pooled, buf, 64)\n"
    "    out = np.zeros(16, np.uint32)\n"
    "    s.copy_dtoh(out, pooled)\n"
    "    s.record().synchronize()\n"
    "    assert (out == np.arange(16)).all(), out\n"
    "    pooled.free()\n"
    "pool.close()\n"
    "bases = {c.__name__ for t in (type(dev), type(s), type(buf), type(s.record()), type(pooled), type(pool))\n"
    "         for c in t.__mro__}\n"
    "print(native.fast is None, sorted(b for b in bases if b.endswith('Core')))\n"
)


def test_a_failed_build_of_the_compiled_module_leaves_the_pure_python_path(tmp_path):
    """When ironaccel._fast cannot be built (here: a copy of the tree whose _fast_c/ was never built, and a $CC
    that fails), load() says why, every class is the pure one (no compiled base), and copies, events and the
    MemPool work."""
    import shutil
    import uuid
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    tree = tmp_path / "tree"
    for part in ("ironaccel", "fakes"):  # the fake's sources hash as before: its cached build is found
        shutil.copytree(root / part, tree / part, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    source = tree / "ironaccel" / "_fast_c" / "fast.c"
    source.write_text(source.read_text() + f"\n/* never built: {uuid.uuid4()} */\n")  # no cached build matches
    proc = _run_script(tmp_path, _BUILD_FAILS, tree, CC="false", IRONACCEL_PURE_PYTHON="0")  # a build is tried
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[-2] == "True ['_BufferCore', '_PoolCore', '_PooledCore']"
