"""STREAM: in-order execution, synchronize, cross-stream waits, independent streams."""

from __future__ import annotations

import gc
import math
import threading
import time

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.backends import get as get_backend

from .helpers import (POISON, RunningWork, assert_wait_outlasts_running_work, ceil_div, context_current, cuda_driver,
                      poisoned, poll_until_complete, random_bytes, read, wait_then)

N = 1 << 16


def add_one(stream, kernels, buf, n: int) -> None:
    stream.launch(kernels("add_one"), ceil_div(n, 128), 128, (buf, np.uint32(n)))


@pytest.mark.clause("STREAM-1")
def test_in_order_mixed_work(device, stream, kernels):
    with device.alloc(4 * N) as buf, device.alloc(4 * N) as other:
        stream.fill(buf, 0x01)  # every u32 = 0x01010101
        for _ in range(5):
            add_one(stream, kernels, buf, N)
        stream.copy_dtod(other, buf, 4 * N)
        stream.fill(buf, 0)
        add_one(stream, kernels, other, N // 2)
        got = read(stream, other, np.uint32)
        expect = np.full(N, 0x01010101 + 5, np.uint32)
        expect[: N // 2] += 1
        np.testing.assert_array_equal(got, expect)
        assert (read(stream, buf, np.uint32) == 0).all()


@pytest.mark.clause("STREAM-2")
def test_synchronize_completes_dtoh(device, stream, kernels):
    with device.alloc(4 * N) as buf:
        stream.fill(buf, 0)
        for _ in range(20):
            add_one(stream, kernels, buf, N)
        host = np.full(N, 0xDEADBEEF, np.uint32)
        stream.copy_dtoh(host, buf)
        stream.synchronize()
        assert (host == 20).all(), np.unique(host)


@pytest.mark.clause("STREAM-2")
def test_synchronize_waits_for_running_work(device, stream, kernels):
    assert_wait_outlasts_running_work(device, stream, kernels, lambda s, event: s.synchronize(), "Stream.synchronize")


@pytest.mark.clause("STREAM-3")
def test_cross_stream_wait(device, kernels):
    a, b = device.create_stream(), device.create_stream()
    with device.alloc(4 * N) as buf:
        a.fill(buf, 0)
        for _ in range(30):
            add_one(a, kernels, buf, N)
        ev = a.record()
        b.wait(ev)
        add_one(b, kernels, buf, N)
        host = np.zeros(N, np.uint32)
        b.copy_dtoh(host, buf)
        b.synchronize()
        assert (host == 31).all(), np.unique(host)


@pytest.mark.clause("STREAM-4")
def test_streams_keep_their_own_order(device, kernels):
    streams = [device.create_stream() for _ in range(3)]
    bufs = [device.alloc(4 * N) for _ in streams]
    for s, b in zip(streams, bufs):
        s.fill(b, 0)
    for step in range(6):
        for i, (s, b) in enumerate(zip(streams, bufs)):
            if step % (i + 1) == 0:
                add_one(s, kernels, b, N)
    for i, (s, b) in enumerate(zip(streams, bufs)):
        expect = len([step for step in range(6) if step % (i + 1) == 0])
        assert (read(s, b, np.uint32) == expect).all()
        b.free()


@pytest.mark.clause("STREAM-5")
def test_default_stream_and_device_synchronize(device):
    default = device.default_stream
    assert default is device.default_stream
    data = random_bytes(4096, 21)
    outs = []
    bufs = []
    for i, s in enumerate([default, device.create_stream(), device.create_stream()]):
        buf = poisoned(device, s, 4096)
        s.copy_htod(buf, data[i:])
        out = np.zeros(4096 - i, np.uint8)
        s.copy_dtoh(out, buf)
        outs.append(out)
        bufs.append(buf)
    device.synchronize()
    for i, out in enumerate(outs):
        np.testing.assert_array_equal(out, data[i:])
    for b in bufs:
        b.free()


@pytest.mark.clause("STREAM-6")
def test_device_synchronize_completes_launches_and_fills_on_every_stream(device, kernels):
    streams = [device.create_stream() for _ in range(3)]
    work = RunningWork(device, streams[0], kernels)
    bufs = [device.alloc(4 * work.n) for _ in streams]
    reader = device.create_stream()
    try:
        events = []
        for i, (s, b) in enumerate(zip(streams, bufs)):
            work.enqueue(s, b)
            s.fill(b, 0x10 + i, nbytes=64)
            events.append(s.record())
            s.fill(b, 0x20 + i, offset=64, nbytes=64)  # after the last event: nothing but Device.synchronize covers it
        device.synchronize()
        assert all(ev.query() for ev in events), "Device.synchronize() returned before every stream's work"
        for i, b in enumerate(bufs):  # read on another stream: the work must be complete, not merely ordered
            got = read(reader, b, count=128)
            assert (got[:64] == 0x10 + i).all(), "a fill after the launches did not land"
            assert (got[64:] == 0x20 + i).all(), "a fill enqueued after the last event did not land"
    finally:
        work.free()
        for b in bufs:
            b.free()


@pytest.mark.clause("STREAM-7")
def test_cross_stream_wait_on_running_work(device, kernels):
    a, b = device.create_stream(), device.create_stream()
    work = RunningWork(device, a, kernels)
    try:
        with poisoned(device, b, 4 * work.n) as copy, device.alloc(4) as flag, poisoned(device, b, 4) as flag_copy:
            b.synchronize()
            a.fill(work.buf, 0)
            a.fill(flag, 0)
            work.enqueue(a)
            a.fill(flag, 1)  # behind all the work (the work's values are final after its first launch)
            ev = a.record()
            b.wait(ev)
            b.copy_dtod(copy, work.buf, 4 * work.n)
            b.copy_dtod(flag_copy, flag, 4)
            work.check(b, copy)  # a wait that did not wait copies zeros (or poison)
            assert (read(b, flag_copy) == 1).all(), "b's copy ran before a's work was done"
    finally:
        work.free()


@pytest.mark.clause("STREAM-7")
def test_cross_stream_wait_on_one_running_launch(device, kernels):
    """The event follows one launch on a stream that had completed everything before it: a wait that takes the
    event's work for done when only the work before it is (an off-by-one against the last completed point)
    lets B copy what the launch has not written yet."""
    a, b = device.create_stream(), device.create_stream()
    for work in RunningWork.tries(device, a, kernels, seconds=0.0, count=6):  # one launch, as long as a grown one
        with poisoned(device, b, 4 * work.n) as copy:
            b.synchronize()
            a.synchronize()
            work.enqueue(a)
            b.wait(a.record())
            b.copy_dtod(copy, work.buf, 4 * work.n)
            in_time = work.looked_in_time()
            work.check(b, copy)  # a wait that did not wait copies zeros
        if in_time:
            return
    pytest.fail("the wait and the copy were never enqueued within a third of the launch's time")


def _waits(device, stream, event=None) -> dict:
    """The waits a test parametrizes over, by name (without an event: the stream's and the device's)."""
    waits = {"Stream.synchronize": stream.synchronize, "Device.synchronize": device.synchronize}
    if event is not None:
        waits["Event.synchronize"] = event.synchronize
    return waits


@pytest.mark.clause("STREAM-8")
@pytest.mark.parametrize("waiter", ["Stream.synchronize", "Event.synchronize", "Device.synchronize"])
def test_synchronize_timeout_while_work_runs(device, stream, kernels, waiter):
    for work in RunningWork.tries(device, stream, kernels):
        work.enqueue(stream)
        ev = stream.record()
        wait = _waits(device, stream, ev)[waiter]
        try:
            wait(timeout=0.01)
            timeout = None
        except ia.Timeout as exc:
            timeout = exc
        if not work.looked_in_time():  # the wait returned only after most of the work: no conclusion, more work
            wait(timeout=600)
            continue
        assert timeout is not None, f"{waiter}(timeout=0.01) returned while the work was still running"
        assert str(timeout).startswith(waiter + ": ") and timeout.seconds == 0.01, str(timeout)
        wait(timeout=600)  # the work still completes, and the results are right
        work.check(stream)
        return
    pytest.fail(f"{waiter}(timeout=0.01) never returned within a third of the work's time, however long the work")


@pytest.mark.clause("STREAM-9", "ERR-1")
@pytest.mark.parametrize("waiter", ["Stream.synchronize", "Event.synchronize", "Device.synchronize"])
def test_timeout_edge_values(device, stream, kernels, waiter):
    not_timeouts = (0, 0.0, -0.0, np.float32(0), -1e-9, -math.inf, math.nan)
    work = RunningWork(device, stream, kernels)
    try:
        with device.alloc(4) as marker:
            stream.fill(marker, 1)
            stream.synchronize()
            # earlier tests' garbage collected now, not in the loop below: a live Buffer in a reference cycle is
            # freed by its finalizer, stream-ordered work that Device.synchronize(timeout=1e-9) may find pending
            gc.collect()
            wait = _waits(device, stream, stream.record())[waiter]
            wait()
            for tiny in (1e-9, 1e-9, np.float64(1e-6), np.float32(1e-3), 1):  # complete work: no Timeout, however short
                done = stream.record()  # an event waited for and dropped: bookkeeping, no work left to wait for
                done.synchronize()
                del done
                gc.collect()
                wait(timeout=tiny)
            for bad in not_timeouts:
                with pytest.raises(ia.InvalidArgument, match="^" + waiter.replace(".", r"\.") + ": "):
                    wait(timeout=bad)
                    pytest.fail(f"{waiter}(timeout={bad!r}) was accepted on an idle stream")
            work.enqueue(stream)
            stream.fill(marker, 2)
            wait = _waits(device, stream, stream.record())[waiter]
            for bad in not_timeouts:
                with pytest.raises(ia.InvalidArgument, match="^" + waiter.replace(".", r"\.") + ": "):
                    wait(timeout=bad)
                    pytest.fail(f"{waiter}(timeout={bad!r}) was accepted while work ran")
            wait(timeout=math.inf)  # no limit: returns once the work is done
            assert (read(device.create_stream(), marker) == 2).all(), f"{waiter}(timeout=inf) returned before the work"
            work.check(stream)
    finally:
        work.free()



def _in_a_new_thread(call) -> None:
    """Run ``call`` as the first thing a new host thread does; re-raise what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 (handed to the test's thread)
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if raised:
        raise raised[0]


FIRST_CALLS = {
    "Stream.record": lambda s, event: s.record().synchronize(),
    "Stream.synchronize": lambda s, event: s.synchronize(),
    "Event.synchronize": lambda s, event: event.synchronize(),
    "Event.query": lambda s, event: poll_until_complete(event),
}


@pytest.mark.clause("STREAM-10")
@pytest.mark.parametrize("which", ["the default stream", "a created stream"])
@pytest.mark.parametrize("first", list(FIRST_CALLS))
def test_a_new_thread_may_start_with_a_wait(device, kernels, which, first):
    """A host thread whose first call waits on a stream another thread filled (a consumer thread) works as on
    the thread that made the stream: a backend that sets up its per-thread state (a current context) only in
    the calls that enqueue work fails there, or waits on nothing."""
    s = device.default_stream if which == "the default stream" else device.create_stream()
    call = FIRST_CALLS[first]
    assert_wait_outlasts_running_work(device, s, kernels, lambda s, event: _in_a_new_thread(lambda: call(s, event)),
                                      f"{first} as a new thread's first call")


#: STREAM-19's first calls: ``other`` is a stream made on the test's thread, with no work of its own
ORDERING_FIRST_CALLS = {
    "Stream.record(event=)": lambda s, other, event: s.record(event=event).synchronize(),
    "Stream.record(timing=False, event=)": lambda s, other, event: s.record(timing=False, event=event).synchronize(),
    "Stream.wait": lambda s, other, event: (other.wait(event), other.record().synchronize()),
}


@pytest.mark.clause("STREAM-19")
@pytest.mark.parametrize("which", ["the default stream", "a created stream"])
@pytest.mark.parametrize("first", list(ORDERING_FIRST_CALLS))
def test_a_new_thread_may_start_by_ordering_on_an_event(device, kernels, which, first):
    """STREAM-10 for the calls that order work on an event rather than wait: a re-record (``record(event=)``, both
    forms) or a ``wait`` as a new thread's first call. A backend that sets up its per-thread state (a current
    context) in the other calls but not here fails on the thread that only hands events on (a producer's
    helper thread), or records nothing."""
    s = device.default_stream if which == "the default stream" else device.create_stream()
    other = device.create_stream()
    call = ORDERING_FIRST_CALLS[first]
    assert_wait_outlasts_running_work(device, s, kernels,
                                      lambda s, event: _in_a_new_thread(lambda: call(s, other, event)),
                                      f"{first} as a new thread's first call")


@pytest.mark.clause("STREAM-11")
@pytest.mark.parametrize("then", ["Stream.synchronize", "Stream.synchronize(timeout)", "Event.synchronize"])
def test_a_wait_is_work_of_its_stream(device, stream, kernels, then):
    """A stream whose only work is a wait for another stream's running work is not idle: its synchronize (or
    an event recorded on it after the wait) returns only once that work is done. A backend that keeps a wait
    until the stream's next submission, or that synchronizes only what it submitted itself, returns at once."""
    assert_wait_outlasts_running_work(device, stream, kernels, wait_then(then), f"Stream.wait then {then}")


@pytest.mark.clause("STREAM-12")
def test_a_cuda_stream_created_with_a_priority_reports_it(device):
    """Clients that mix libraries create streams of their own at the context's greatest priority (a latency-
    critical copy beside bulk work) and read the priority back: a stream made by cuStreamCreateWithPriority
    with a priority inside cuCtxGetStreamPriorityRange is a stream like any other (queryable, destroyable) and
    cuStreamGetPriority gives the priority it was created with, for the greatest and the least alike."""
    cu = cuda_driver(device, "cuStreamCreateWithPriority")
    with context_current(device):
        err, least, greatest = cu.cuCtxGetStreamPriorityRange()
        assert not err, f"cuCtxGetStreamPriorityRange: {err}"
        got = {}
        for priority in sorted({int(greatest), int(least)}):
            err, handle = cu.cuStreamCreateWithPriority(1, priority)  # CU_STREAM_NON_BLOCKING
            assert not err, f"cuStreamCreateWithPriority(priority={priority}): {err}"
            try:
                err, reported = cu.cuStreamGetPriority(handle)
                got[priority] = (int(err), None if err else int(reported))
                err, = cu.cuStreamQuery(handle)
                assert not err, f"cuStreamQuery of a new stream of priority {priority}: {err}"
            finally:
                err, = cu.cuStreamDestroy(handle)
                assert not err, f"cuStreamDestroy of the stream of priority {priority}: {err}"
    want = {priority: (0, priority) for priority in got}
    assert got == want, f"(status, priority) cuStreamGetPriority gave per priority created with: {got}, " \
                        f"want {want} (range: least {int(least)}, greatest {int(greatest)})"


@pytest.mark.clause("STREAM-13")
def test_a_capture_forked_onto_a_second_stream_and_joined_back_ends_with_both_streams_work(device, stream):
    """CUDA's stream capture follows events across streams: an event recorded on the capturing stream and waited
    by a second stream draws that stream into the capture (a fork), and an event recorded there and waited by the
    capturing stream joins it back. Through `Stream.native` (clients that mix libraries capture so, e.g. a
    library's own streams inside a framework's capture): a memset captured on each stream, forked and joined
    back, ends with a graph (cuStreamEndCapture succeeds: every forked stream was joined), and its launch sets
    both ranges. A driver that takes a joined stream for an unjoined one refuses every fork-join capture
    (CUDA_ERROR_STREAM_CAPTURE_UNJOINED)."""
    cu = cuda_driver(device, "cuStreamBeginCapture")
    side = device.create_stream()
    with poisoned(device, stream, 128) as out:
        stream.synchronize()
        with context_current(device):
            forked = joined = graph = executable = None
            errors: dict[str, object] = {}
            try:
                err, forked = cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)
                assert not err, f"cuEventCreate: {err}"
                err, joined = cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)
                assert not err, f"cuEventCreate: {err}"
                mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL
                errors["cuStreamBeginCapture"], = cu.cuStreamBeginCapture(stream.native, mode)
                errors["cuMemsetD8Async on the capturing stream"], = cu.cuMemsetD8Async(out.handle, 0x11, 64,
                                                                                         stream.native)
                errors["cuEventRecord (the fork)"], = cu.cuEventRecord(forked, stream.native)
                errors["cuStreamWaitEvent of the second stream"], = cu.cuStreamWaitEvent(side.native, forked, 0)
                errors["cuMemsetD8Async on the second stream"], = cu.cuMemsetD8Async(int(out.handle) + 64, 0x22, 64,
                                                                                      side.native)
                errors["cuEventRecord on the second stream (the join)"], = cu.cuEventRecord(joined, side.native)
                errors["cuStreamWaitEvent of the capturing stream"], = cu.cuStreamWaitEvent(stream.native, joined, 0)
                errors["cuStreamEndCapture"], graph = cu.cuStreamEndCapture(stream.native)
                if not any(errors.values()):
                    before = read(stream, out, np.uint8).tolist()
                    errors["cuGraphInstantiate"], executable = cu.cuGraphInstantiate(graph, 0)
                    if not errors["cuGraphInstantiate"]:
                        errors["cuGraphLaunch"], = cu.cuGraphLaunch(executable, stream.native)
            finally:
                if executable is not None:
                    cu.cuGraphExecDestroy(executable)
                if graph is not None and int(graph):
                    cu.cuGraphDestroy(graph)
                for event in (forked, joined):
                    if event is not None:
                        cu.cuEventDestroy(event)
        failed = {name: err for name, err in errors.items() if err}
        assert not failed, f"the fork-join capture: {failed}"
        assert before == [POISON] * 128, "the captured memsets ran while they were captured"
        got = read(stream, out, np.uint8).tolist()
        assert got == [0x11] * 64 + [0x22] * 64, \
            f"the graph's launch left {sorted(set(got[:64]))} in the first half (0x11), {sorted(set(got[64:]))} in " \
            "the second (0x22)"
    unjoined = _unjoined_fork_status(cu, device, stream, side)
    assert unjoined == cu.CUresult.CUDA_ERROR_STREAM_CAPTURE_UNJOINED, \
        f"cuStreamEndCapture of a capture forked onto a second stream and never joined back: {unjoined}"


def _unjoined_fork_status(cu, device, stream, side) -> object:
    """What cuStreamEndCapture answers for a capture forked onto ``side`` (a memset there) and never joined back:
    CUDA refuses it with CUDA_ERROR_STREAM_CAPTURE_UNJOINED (the forked work has nothing after it to wait on)."""
    with context_current(device):
        forked = graph = None
        try:
            with device.alloc(64) as buf:
                err, forked = cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)
                assert not err, f"cuEventCreate: {err}"
                err, = cu.cuStreamBeginCapture(stream.native, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL)
                assert not err, f"cuStreamBeginCapture: {err}"
                for step in (lambda: cu.cuMemsetD8Async(buf.handle, 1, 32, stream.native),
                             lambda: cu.cuEventRecord(forked, stream.native),
                             lambda: cu.cuStreamWaitEvent(side.native, forked, 0),
                             lambda: cu.cuMemsetD8Async(int(buf.handle) + 32, 2, 32, side.native)):
                    err, = step()
                    assert not err, f"a step of the unjoined fork's capture: {err}"
                err, graph = cu.cuStreamEndCapture(stream.native)
        finally:
            if graph is not None and int(graph):
                cu.cuGraphDestroy(graph)
            if forked is not None:
                cu.cuEventDestroy(forked)
    return err


@pytest.mark.clause("STREAM-15")
def test_waits_the_signature_refuses_raise_type_error(device, stream):
    """Stream.synchronize(timeout=None) and Event.synchronize(timeout=None) called as their signatures refuse —
    a second positional argument after None, the timeout both positionally and by keyword, a keyword they do not
    take — raise TypeError, each right after a good wait (its fast path warm); then both still wait. A compiled
    wait that reads a first None as "no timeout" and ignores what follows waits where Python raises."""
    event = stream.record()
    calls = {
        "Stream.synchronize(None, None)": lambda: stream.synchronize(None, None),
        "Stream.synchronize(None, timeout=5.0)": lambda: stream.synchronize(None, timeout=5.0),
        "Stream.synchronize(None, bogus=1)": lambda: stream.synchronize(None, bogus=1),
        "Stream.synchronize(bogus=1)": lambda: stream.synchronize(bogus=1),
        "Event.synchronize(None, None)": lambda: event.synchronize(None, None),
        "Event.synchronize(None, timeout=5.0)": lambda: event.synchronize(None, timeout=5.0),
        "Event.synchronize(None, bogus=1)": lambda: event.synchronize(None, bogus=1),
        "Event.synchronize(bogus=1)": lambda: event.synchronize(bogus=1),
    }
    for what, call in calls.items():
        stream.synchronize()
        event.synchronize(None)
        with pytest.raises(TypeError):
            call()
            pytest.fail(f"{what}: accepted")
    stream.synchronize(None)
    event.synchronize(timeout=5.0)


#: STREAM-16's timeout: long enough that a wait giving up early is seen, short against the work it waits for
PATIENT_TIMEOUT = 0.25


@pytest.mark.clause("STREAM-16")
@pytest.mark.parametrize("waiter", ["Stream.synchronize", "Event.synchronize", "Device.synchronize"])
def test_synchronize_timeout_waits_out_its_timeout(device, stream, kernels, waiter):
    """A wait with a timeout raises Timeout only once that timeout has passed: a wait that stops polling with
    time still left (WebGPU's once less than a second was left) gives up on work that would have finished in
    time, which STREAM-8's 0.01 s timeout cannot tell from a correct wait. The work runs about four times the
    timeout and more; a wait that returned (the work done sooner than timed) concludes nothing."""
    for work in RunningWork.tries(device, stream, kernels, seconds=4 * PATIENT_TIMEOUT, count=2):
        work.enqueue(stream)
        ev = stream.record()
        wait = _waits(device, stream, ev)[waiter]
        start = time.monotonic()
        try:
            wait(timeout=PATIENT_TIMEOUT)
        except ia.Timeout:
            waited = time.monotonic() - start
        else:
            continue
        assert waited >= PATIENT_TIMEOUT - 0.001, \
            f"{waiter}(timeout={PATIENT_TIMEOUT}) raised Timeout after {waited:.3f} s, before its timeout"
        wait(timeout=600)  # the work still completes, and the results are right
        work.check(stream)
        return
    pytest.fail(f"{waiter}(timeout={PATIENT_TIMEOUT}) never raised Timeout, however long the work")


#: STREAM-16's long timeout: past 2^32 ns (4.29 s), so a wait that hands the driver its nanoseconds in 32 bits
#: waits 4.5e9 mod 2^32 ns, 0.2 s, instead
LONG_TIMEOUT = 4.5


@pytest.mark.clause("STREAM-16")
@pytest.mark.parametrize("waiter", ["Stream.synchronize", "Event.synchronize", "Device.synchronize"])
def test_a_timeout_past_32_bits_of_nanoseconds_is_waited_out(device, stream, kernels, waiter):
    """A timeout longer than 2^32 ns is waited for whole: work of about 1 s, waited for with a timeout of 4.5 s,
    ends the wait with no Timeout (or with one only after 4.5 s: a host too slow to run the work in time), and the
    work is complete when it returns. A wait that gives the driver its timeout in 32 bits of nanoseconds waits
    0.2 s and raises Timeout on work that was to finish well within it."""
    work = RunningWork(device, stream, kernels, seconds=1.0)
    try:
        work.enqueue(stream)
        ev = stream.record()
        wait = _waits(device, stream, ev)[waiter]
        start = time.monotonic()
        try:
            wait(timeout=LONG_TIMEOUT)
        except ia.Timeout:
            waited = time.monotonic() - start
            assert waited >= LONG_TIMEOUT - 0.001, \
                f"{waiter}(timeout={LONG_TIMEOUT}) raised Timeout after {waited:.3f} s, before its timeout"
            wait(timeout=600)
        assert ev.query() is True, f"{waiter}(timeout={LONG_TIMEOUT}) returned before the work completed"
        work.check(stream)
    finally:
        work.free()


@pytest.mark.clause("STREAM-17")
@pytest.mark.parametrize("early_on", ["the same stream", "another stream"])
def test_an_earlier_event_seen_complete_completes_nothing_after_it(device, stream, kernels, early_on):
    """An event recorded before running work, polled with query() until True (no wait called), says nothing of
    an event recorded behind that work: the later one still answers False. A backend that counts its points
    in one sequence and, on seeing a point complete, marks everything submitted so far complete (instead of
    up to that point) answers True for the later event while its work still runs."""
    here = stream if early_on == "the same stream" else device.create_stream()
    with device.alloc(4) as marker:
        for work in RunningWork.tries(device, stream, kernels):
            stream.synchronize()
            here.synchronize()
            here.fill(marker, 1)  # work of its own before the early event: its own point (not the last one waited for)
            early = here.record()
            work.enqueue(stream)
            late = stream.record()
            while not early.query():  # nothing before it still runs: it completes without the work
                time.sleep(1e-4)
            answer = late.query()
            in_time = work.looked_in_time()
            late.synchronize()
            assert late.query(), "an event waited for answers query() False"
            work.check(stream)
            if in_time:
                assert answer is False, ("an event recorded behind running work answered query() True once an "
                                         "event recorded before the work had")
                return
    pytest.fail("the host never queried the later event within a third of the work's time, however long the work")


@pytest.mark.clause("STREAM-18")
@pytest.mark.parametrize("timeout", [None, 30.0], ids=["Device.synchronize", "Device.synchronize(timeout)"])
def test_device_synchronize_completes_the_work_of_a_dropped_stream(device, stream, kernels, timeout):
    """STREAM-5 for a stream dropped before the synchronize: its work still runs (LIFE-11), and
    Device.synchronize() returns only once it has."""
    for work in RunningWork.tries(device, stream, kernels, 0.3):
        with poisoned(device, stream, 4096) as flag:
            stream.fill(flag, 0)
            stream.synchronize()
            doomed = device.create_stream()
            work.enqueue(doomed)
            doomed.fill(flag, 1)  # behind the running work
            del doomed  # no event, no wait: nothing but the device holds its work
            gc.collect()
            in_time = work.looked_in_time()  # the fill was still queued when the synchronize began
            device.synchronize(timeout=timeout)
            if not in_time:
                continue  # the host got here only after most of the work: this try tells nothing
            got = read(stream, flag)
            assert (got == 1).all(), "Device.synchronize() returned before the work of a dropped stream completed"
            return
    pytest.fail("the host was too slow to drop the stream while its work was running, in every try")


BURST = 160  # commands enqueued behind running work by STREAM-20: more than a backend's 64 outstanding submissions


def _fills_behind_running_work(device, stream, kernels, count: int, gap_s: float, seconds: float) -> None:
    """STREAM-20's and STREAM-21's check: ``count`` one-word fills enqueued ``gap_s`` apart behind running work of
    about ``seconds`` all land, and an event recorded before them answers query() False while the work runs (in
    the first try where the host got through them before most of the work had run)."""
    with device.alloc(4 * count) as marks:
        for work in RunningWork.tries(device, stream, kernels, seconds):
            stream.fill(marks, 0)
            stream.synchronize()
            work.enqueue(stream)
            behind = stream.record()
            for i in range(count):
                stream.fill(marks, i % 251 + 1, offset=4 * i, nbytes=4)
                if gap_s:
                    time.sleep(gap_s)
            in_time = work.looked_in_time()
            answer = behind.query()
            stream.synchronize()
            work.check(stream)
            got = read(stream, marks, np.uint32)
            np.testing.assert_array_equal(got, (np.arange(count) % 251 + 1) * 0x01010101, err_msg="the fills")
            if in_time:
                assert answer is False, "an event recorded behind running work answered query() True"
                return
    pytest.fail(f"{count} fills enqueued {gap_s * 1e3:.0f} ms apart behind running work returned only after most of "
                "the work had run, however long the work: an enqueue waited for running work")


@pytest.mark.clause("STREAM-20")
def test_a_burst_of_commands_behind_running_work_does_not_wait_for_it(device, stream, kernels):
    """STREAM-20: enqueueing is asynchronous. A backend that submits each command on its own and bounds its
    outstanding submissions (Vulkan: 64 a stream) makes the host wait for the running work within a burst;
    one that batches the burst does not."""
    _fills_behind_running_work(device, stream, kernels, BURST, 0, 0.3)


#: STREAM-21: fills enqueued behind running work one at a time, each its own submission: more than a backend's 64
#: outstanding submissions, and fewer than 64 past them (Vulkan's batch of 64 commands, which the host submits itself)
SPACED, SPACED_GAP_S = 100, 0.004


@pytest.mark.clause("STREAM-21")
def test_commands_spaced_out_behind_running_work_do_not_wait_for_it(device, stream, kernels):
    """STREAM-21: STREAM-20 with the fills 4 ms apart, so a batching backend submits each on its own (Vulkan:
    its flusher, 0.5 ms after the last submission, late on a loaded host) and reaches its bound of outstanding submissions; the next
    fills must wait in the open batch, not make the host (or the flusher, holding the device's lock) wait for the
    running work."""
    _fills_behind_running_work(device, stream, kernels, SPACED, SPACED_GAP_S, 1.5)


def _assert_waited_for(work: RunningWork, waiter: str) -> None:
    """A wait (``waiter``, described) that just returned after RunningWork's one launch waited for it: no sooner
    than a third of the launch's time after it was enqueued (RunningWork: the work takes at least three fifths)."""
    waited = time.perf_counter() - work.enqueued_at
    assert waited >= work.expected_seconds / 3, (
        f"a launch of about {work.expected_seconds * 1e3:.1f} ms: {waiter} returned {waited * 1e3:.2f} ms after "
        "the launch was enqueued")


@pytest.mark.clause("STREAM-23")
@pytest.mark.parametrize("waiter", ["Stream.synchronize", "Device.synchronize"])
def test_a_wait_after_an_upload_behind_running_work_waits_for_it(device, stream, kernels, waiter):
    """A backend that answers a wait with the last fence it made when nothing was submitted since (WebGPU: the
    device's last fence, when its queue position is the device's count of submissions) must count every piece
    of queue work, an upload's write included: a count that an upload moves the wrong way comes back to the
    fence's position after the launch before it, and the wait returns while the launch runs. The stream is
    synchronized first (the device has a last fence); then RunningWork's one launch, a 4-byte copy_htod on the
    same stream, and the wait, which returns no sooner than a third of the launch's time after it was enqueued."""
    work = RunningWork(device, stream, kernels, seconds=0)  # one launch
    try:
        with device.alloc(4) as small:
            stream.synchronize()
            work.enqueue(stream)
            stream.copy_htod(small, np.array([0x5A5A5A5A], np.uint32))
            _waits(device, stream)[waiter]()
            _assert_waited_for(work, f"{waiter}() after a copy_htod behind it")
            work.check(stream)
            assert read(stream, small, np.uint32)[0] == 0x5A5A5A5A, "the upload did not land"
    finally:
        work.free()


@pytest.mark.clause("STREAM-22")
@pytest.mark.parametrize("waiter", ["Stream.synchronize", "Device.synchronize"])
def test_a_new_devices_first_work_is_waited_for(device, stream, kernels, target, waiter):
    """A backend that counts the work it submitted, to answer a wait at once when nothing is outstanding
    (OpenGL: the GL thread's jobs against the job of the last fence seen signalled), must not take a new device
    for one whose work is done: a count that starts where "done" starts returns from the wait after the device's
    first job, while it runs. On a Device opened on the tests' index, whose first work is one launch of the
    busy kernel (RunningWork's size, measured on the tests' device: 10 ms or more), the wait returns no sooner
    than a third of that launch's time after it was enqueued (RunningWork: the work takes at least three fifths
    of it), and the results are right."""
    sized = RunningWork(device, stream, kernels, seconds=0)  # one launch
    sized.free()
    other = get_backend(device.info.backend).open_device(device.info.index)
    try:
        on = other.create_stream()
        work = sized.on(other, lambda name: target.compile_kernel(other, name))
        work.enqueue(on)
        _waits(other, on)[waiter]()
        _assert_waited_for(work, f"{waiter}() on a new device whose first work it was")
        work.check(on)
    finally:
        other.close()


@pytest.mark.clause("STREAM-24")
def test_enqueued_work_runs_with_no_further_call(device, stream, kernels):
    """Work starts once enqueued, not at the next wait: a backend that gathers the commands recorded while the
    device is busy into one submission (Vulkan's open batch) must submit them with no further call from the
    host (Vulkan's flusher), or a program that enqueues work and then does its own gets no overlap: the work
    runs only inside its next wait. After the host sleeps for three times the work's time, the wait finds it
    done; the same work is tried again when the wait was slow (a host busy elsewhere). Longer work would not do:
    past 64 commands a batch submits itself, and the few left over would take too little time to tell."""
    waited = []
    work = RunningWork(device, stream, kernels, seconds=0.3)
    try:
        for _ in range(3):
            work.enqueue(stream)
            time.sleep(3 * work.expected_seconds + 0.5)
            start = time.perf_counter()
            stream.synchronize()
            waited.append(round(time.perf_counter() - start, 3))
            work.check(stream)
            if waited[-1] < work.expected_seconds / 3:
                return
    finally:
        work.free()
    pytest.fail(f"after sleeping three times the work's time, synchronize() still waited {waited} s of "
                f"its {work.expected_seconds:.2f} s: the work enqueued before the sleep started only at the wait")
