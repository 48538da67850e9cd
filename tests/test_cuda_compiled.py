"""The CUDA backend's compiled hot path on the fake libcuda: when the pure-Python path is used, launch arguments
and resolved launches, events and stream waits, buffer bookkeeping, the checks on every form, and a failed build
of the compiled module. Runs with no GPU.
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.cts.testing.cuda_fake import (CUDA_ERROR_INVALID_VALUE, PTX_DIMS, PTX_STORE64, QUERY_BEFORE, fail_next_wait, load_fake, open_device, run_script)


@pytest.fixture(scope="module")
def fake() -> Any:
    """The loaded fake libcuda (ctypes), with the backend initialized on it (once per process)."""
    return load_fake()


@pytest.fixture
def device(fake: Any) -> Any:
    yield from open_device(fake)


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
    proc = run_script(tmp_path, _WHICH_PATH, IRONACCEL_PURE_PYTHON=pure)
    assert proc.returncode == 0, proc.stderr
    expected = ("CudaStream CudaStream StagingRing CudaEvent True" if pure
                else "FastStream FastStream StagingRing FastEvent False")
    assert proc.stdout.split("\n")[-2] == expected


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


def test_a_re_record_keeps_its_cuevent_and_the_api(fake, device):
    """Stream.record(event=e) (compiled: StreamCore.record and fast.rerecord; pure: CudaStream._rerecord): the
    event keeps its CUevent (no spare taken or given back), moves to the stream that re-records it, its wait
    releases the copy_dtoh held before the re-record, a failed cuEventRecord names its entry point and leaves
    the event where it was, and after close the re-record names Stream.record."""
    import weakref

    s, other = device.create_stream(), device.create_stream()
    spare = device._spare_events[False]
    with device.alloc(64) as buf:
        event = s.record()
        handle, count = event._handle, len(spare)
        out = np.empty(64, np.uint8)
        other.copy_dtoh(out, buf)
        held = weakref.ref(out)
        del out
        assert other.record(event=event) is event and event.stream is other
        assert event._handle is handle and len(spare) == count, "a re-record keeps the event's own CUevent"
        event.synchronize()
        assert held() is None, "the re-recorded event's wait releases the copy held before the re-record"
        fake.ironaccel_fake_inject(b"cuEventRecord", 1, CUDA_ERROR_INVALID_VALUE)
        with pytest.raises(ia.DriverError) as info:
            s.record(event=event)
        assert info.value.op == "cuEventRecord"
        assert event.stream is other, "a failed re-record leaves the event at its old point"
        timed = s.record(timing=True)
        assert s.record(timing=True, event=timed) is timed
    device.close()
    with pytest.raises(ia.UseAfterFree, match="Stream.record"):
        s.record(event=event)


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
                     lambda: type(buf).free(object()), lambda: type(buf).__new__(type(buf)).free(),
                     lambda: fast.rerecord("a stream", s.record()), lambda: fast.rerecord(s, "an event"),
                     lambda: fast.rerecord(s, FastEvent())):
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
    proc = run_script(tmp_path, _BUILD_FAILS, tree, CC="false", IRONACCEL_PURE_PYTHON="0")  # a build is tried
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[-2] == "True ['_BufferCore', '_PoolCore', '_PooledCore']"
