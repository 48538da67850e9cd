"""EVENT: record, query, synchronize, timing."""

from __future__ import annotations

import gc
import math
import time
import weakref

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.backends import get as get_backend

from .helpers import (RunningWork, assert_device_works, assert_wait_outlasts_running_work, ceil_div, context_current,
                      cuda_driver, lcg, poisoned, poll_until_complete, read, resident_growth, wait_then)

N = 1 << 16


def busy(stream, kernels, buf, iters: int) -> None:
    stream.launch(kernels("busy"), ceil_div(N, 128), 128, (buf, np.uint32(iters), np.uint32(N)))


@pytest.mark.clause("EVENT-1")
def test_event_completes_after_work(device, stream, kernels):
    with device.alloc(4 * N) as buf:
        busy(stream, kernels, buf, 50)
        host = np.zeros(N, np.uint32)
        stream.copy_dtoh(host, buf)
        ev = stream.record()
        ev.synchronize()
        assert ev.query() is True
        np.testing.assert_array_equal(host, lcg(np.arange(N), 50))


@pytest.mark.clause("EVENT-1")
def test_event_synchronize_waits_for_running_work(device, stream, kernels):
    assert_wait_outlasts_running_work(device, stream, kernels, lambda s, event: event.synchronize(), "Event.synchronize")


@pytest.mark.clause("EVENT-2")
def test_elapsed_ms_monotonic(device, stream, kernels, require):
    require("events.timing")
    with device.alloc(4 * N) as buf:
        e0 = stream.record(timing=True)
        busy(stream, kernels, buf, 200)
        e1 = stream.record(timing=True)
        busy(stream, kernels, buf, 200)
        e2 = stream.record(timing=True)
        e2.synchronize()
        first, total = e0.elapsed_ms(e1), e0.elapsed_ms(e2)
        assert math.isfinite(first) and math.isfinite(total)
        assert 0 <= first <= total
        assert total > 0


@pytest.mark.clause("EVENT-3", "ERR-1")
def test_timing_errors(device, stream):
    a, b = stream.record(), stream.record()
    with pytest.raises(ia.InvalidArgument, match=r"Event\.elapsed_ms.*timing=True"):
        a.elapsed_ms(b)
    if not device.supports("events.timing"):
        with pytest.raises(ia.Unsupported, match=r"Stream\.record.*events\.timing"):
            stream.record(timing=True)


@pytest.mark.clause("EVENT-4")
def test_query_never_blocks(device, stream, kernels):
    with device.alloc(4 * N) as buf:
        for _ in range(5):
            busy(stream, kernels, buf, 100)
        ev = stream.record()
        t0 = time.perf_counter()
        first = ev.query()
        assert time.perf_counter() - t0 < 0.5, "query() blocked"
        assert isinstance(first, bool)
        deadline = time.monotonic() + 60
        while not ev.query():
            assert time.monotonic() < deadline, "event never completed"
            time.sleep(0.001)


@pytest.mark.clause("EVENT-5")
def test_query_is_false_while_work_runs(device, stream, kernels):
    with device.alloc(4) as marker:
        for work in RunningWork.tries(device, stream, kernels):
            stream.fill(marker, 0)
            work.enqueue(stream)
            stream.fill(marker, 7)  # the last command before the event
            ev = stream.record()
            done = ev.query()
            if not work.looked_in_time():  # the host was away for most of the work: no conclusion, more work
                ev.synchronize()
                continue
            assert done is False, f"query() said complete while ~{work.expected_seconds:.2f} s of work was queued"
            ev.synchronize()
            assert ev.query() is True
            # read on a stream not ordered after the work: the fill has landed only if the event really completed
            # after everything enqueued before it (not after an earlier part of it)
            assert (read(device.create_stream(), marker) == 7).all(), "the event completed before the work before it"
            work.check(stream)
            return
    pytest.fail("the host never got to query() within a third of the work's time, however long the work")


@pytest.mark.clause("EVENT-6")
def test_elapsed_ms_measures_the_work_between_the_events(device, stream, kernels, require):
    require("events.timing")
    work = RunningWork(device, stream, kernels)
    try:
        stream.synchronize()
        t0 = time.perf_counter()
        e0 = stream.record(timing=True)
        work.enqueue(stream)
        e1 = stream.record(timing=True)
        e2 = stream.record(timing=True)
        e2.synchronize()
        wall_ms = (time.perf_counter() - t0) * 1e3
        timed, idle = e0.elapsed_ms(e1), e1.elapsed_ms(e2)
        assert timed <= wall_ms * 1.05 + 2, f"elapsed {timed:.3f} ms exceeds the host's {wall_ms:.3f} ms (units?)"
        assert timed >= 0.1 * work.expected_seconds * 1e3, (
            f"elapsed {timed:.3f} ms for work that takes ~{work.expected_seconds * 1e3:.0f} ms (units or the wrong work timed?)")
        assert 0 <= idle < 0.5 * timed, f"two events with nothing between them are {idle:.3f} ms apart"
    finally:
        work.free()


@pytest.mark.clause("EVENT-20")
def test_elapsed_ms_is_in_milliseconds_not_a_fraction_of_them(device, stream, kernels, require):
    """EVENT-6's bounds are loose (a tenth of the work's time): an interval off by a factor of 2 passes them.
    The device's time between two events can never exceed the host's wall time around them, and with work
    filling that wall time it comes close to it: an interval scaled by 1/2 never gets above half."""
    require("events.timing")
    ratios = []
    for seconds in (0.3, 0.3, 0.6, 0.6, 1.2):
        work = RunningWork(device, stream, kernels, seconds)
        try:
            stream.synchronize()
            t0 = time.perf_counter()
            start = stream.record(timing=True)
            work.enqueue(stream)
            end = stream.record(timing=True)
            end.synchronize()
            wall_ms = (time.perf_counter() - t0) * 1e3
            ratios.append(start.elapsed_ms(end) / wall_ms)
        finally:
            work.free()
        if ratios[-1] > 0.6:
            return
    pytest.fail(f"elapsed_ms around work that fills the host's wait is at most {max(ratios):.0%} of the host's "
                f"wall time in {len(ratios)} tries ({', '.join(f'{r:.0%}' for r in ratios)}): a wrong unit or scale?")


@pytest.mark.clause("EVENT-7")
def test_a_query_that_says_true_has_delivered_the_readback(device, stream, kernels):
    """No synchronize anywhere: a backend that fills copy_dtoh arrays only in its waits, not when query()
    finds the event complete, leaves the array empty here."""
    with device.alloc(4 * N) as buf:
        busy(stream, kernels, buf, 50)
        host = np.zeros(N, np.uint32)
        stream.copy_dtoh(host, buf)
        ev = stream.record()
        deadline = time.monotonic() + 60
        while not ev.query():
            assert time.monotonic() < deadline, "event never completed"
            time.sleep(0.001)
        np.testing.assert_array_equal(host, lcg(np.arange(N), 50),
                                      err_msg="query() said True before the copy_dtoh before the event filled its array")


@pytest.mark.clause("EVENT-7")
@pytest.mark.parametrize("waiter", ["Stream.synchronize", "Device.synchronize", "a later Event.synchronize"])
def test_events_before_a_completed_wait_are_complete(device, stream, kernels, waiter):
    other = device.create_stream()
    with device.alloc(4 * N) as a, device.alloc(4 * N) as b:
        busy(stream, kernels, a, 200)
        first = stream.record()
        busy(stream, kernels, a, 300)
        second = stream.record()
        busy(other, kernels, b, 200)
        elsewhere = other.record()
        if waiter == "Stream.synchronize":
            stream.synchronize()
            done = [first, second]
        elif waiter == "Device.synchronize":
            device.synchronize()
            done = [first, second, elsewhere]
        else:
            stream.record().synchronize()
            done = [first, second]
        for i, ev in enumerate(done):
            assert ev.query() is True, f"event {i} is not complete after {waiter} returned"
        other.synchronize()


@pytest.mark.clause("EVENT-8")
def test_elapsed_ms_waits_spans_streams_and_is_consistent(device, stream, kernels, require):
    require("events.timing")
    other = device.create_stream()
    work = RunningWork(device, stream, kernels)
    try:
        stream.synchronize()
        e0 = stream.record(timing=True)
        work.enqueue(stream)
        e1 = stream.record(timing=True)
        other.wait(e1)
        e2 = other.record(timing=True)
        timed = e0.elapsed_ms(e1)  # nothing synchronized: elapsed_ms waits for both events itself
        assert e1.query() is True, "elapsed_ms returned before its end event completed"
        assert math.isfinite(timed) and timed >= 0.1 * work.expected_seconds * 1e3, (
            f"elapsed {timed:.3f} ms for work that takes ~{work.expected_seconds * 1e3:.0f} ms")
        tolerance = 0.01 + 1e-4 * timed  # a timestamp's resolution
        assert e1.elapsed_ms(e0) == pytest.approx(-timed, abs=tolerance), "b.elapsed_ms(a) is not -a.elapsed_ms(b)"
        after_wait = e1.elapsed_ms(e2)
        assert after_wait >= -tolerance, f"an event after a wait is {-after_wait:.3f} ms before the event waited for"
        assert e0.elapsed_ms(e2) == pytest.approx(timed + after_wait, abs=tolerance), "elapsed_ms is not additive"
        work.check(stream)
    finally:
        work.free()


@pytest.mark.clause("EVENT-8", "ERR-1")
def test_elapsed_ms_rejects_what_it_cannot_time(device, stream, require):
    require("events.timing")
    second = get_backend(device.info.backend).open_device(device.info.index)
    try:
        foreign = second.create_stream().record(timing=True)
        foreign.synchronize()
        timed, untimed = stream.record(timing=True), stream.record()
        timed.synchronize()
        cases = {
            "an end that is not an Event": lambda: timed.elapsed_ms(1.0),
            "no end": lambda: timed.elapsed_ms(None),
            "an end of another device": lambda: timed.elapsed_ms(foreign),
            "a start of another device": lambda: foreign.elapsed_ms(timed),
            "an end recorded without timing": lambda: timed.elapsed_ms(untimed),
            "a start recorded without timing": lambda: untimed.elapsed_ms(timed),
        }
        for what, call in cases.items():
            with pytest.raises(ia.InvalidArgument, match=r"^Event\.elapsed_ms: "):
                call()
                pytest.fail(f"{what}: accepted")
        assert timed.elapsed_ms(timed) == 0.0
    finally:
        second.close()


@pytest.mark.clause("EVENT-7")
def test_an_event_completes_before_the_work_after_it(device, stream, kernels):
    """An event marks its point, not the stream: a wait for it that lasts until the stream is idle (a backend
    that waits for its last submission, or the device) never returns while the work after it still runs. A
    fourth, longer try: on a loaded 2-core host, SwiftShader's early wait once woke up too late on all three."""
    with device.alloc(4) as marker:
        for work in RunningWork.tries(device, stream, kernels, count=4):
            stream.fill(marker, 5)
            early = stream.record()
            work.enqueue(stream)
            late = stream.record()
            early.synchronize()
            in_time = work.looked_in_time()
            assert early.query() is True
            late.synchronize()
            work.check(stream)
            if in_time:
                assert (read(device.create_stream(), marker) == 5).all()
                return
    pytest.fail("Event.synchronize of an event before the work never returned within a third of the work's time")


#: How a test learns that a copy_dtoh enqueued before ``event`` is done.
WAITS = {
    "Event.synchronize": lambda device, stream, event: event.synchronize(),
    "Event.synchronize(timeout)": lambda device, stream, event: event.synchronize(timeout=60),
    "Event.query": lambda device, stream, event: poll_until_complete(event),
    "a later Event.synchronize": lambda device, stream, event: stream.record().synchronize(),
    "Stream.synchronize": lambda device, stream, event: stream.synchronize(),
    "Stream.synchronize(timeout)": lambda device, stream, event: stream.synchronize(timeout=60),
    "Device.synchronize": lambda device, stream, event: device.synchronize(),
}


@pytest.mark.clause("EVENT-9")
@pytest.mark.parametrize("wait", list(WAITS))
def test_a_readback_a_wait_covered_is_let_go(device, stream, kernels, wait):
    """copy_dtoh's host array must be kept alive while the copy is pending, and only then: once a wait has
    shown the copy complete, the library holds no reference to it. A backend that forgets to let go on one of
    the waits (a release tied to the wrong mark, or to the stream's synchronize alone) keeps every array a
    loop of copies reads into, waited for that way: host memory grows without bound."""
    with device.alloc(4 * N) as buf:
        busy(stream, kernels, buf, 20)
        readback = [np.zeros(N, np.uint32)]
        stream.copy_dtoh(readback[0], buf)
        WAITS[wait](device, stream, stream.record())
        _assert_let_go(readback, wait)
        stream.synchronize()


@pytest.mark.clause("EVENT-50")
def test_a_readback_before_an_event_is_let_go_while_a_later_one_is_pending(device, stream, kernels):
    """EVENT-9 with a second copy_dtoh enqueued after the event: the wait on the event shows the first copy
    complete, and the library must let go of its array though the newer one is still held (a backend that
    drops held arrays from the oldest only while the newest is below the mark lets go of none)."""
    with device.alloc(4 * N) as buf:
        busy(stream, kernels, buf, 20)
        readback = [np.zeros(N, np.uint32)]
        stream.copy_dtoh(readback[0], buf)
        event = stream.record()
        later = np.zeros(N, np.uint32)
        busy(stream, kernels, buf, 30)
        stream.copy_dtoh(later, buf)
        event.synchronize()
        _assert_let_go(readback, "Event.synchronize, with a later copy_dtoh enqueued")
        stream.synchronize()
        np.testing.assert_array_equal(later, lcg(np.arange(N), 30))


def _assert_let_go(readback: list[np.ndarray], wait: str) -> None:
    """The one array in ``readback`` (the caller's only reference) holds the busy kernel's result, and once
    the list lets go of it nothing keeps it alive."""
    np.testing.assert_array_equal(readback[0], lcg(np.arange(N), 20), err_msg=f"{wait} returned before the copy_dtoh")
    gone = weakref.ref(readback.pop())
    gc.collect()
    assert gone() is None, f"the host array of a copy_dtoh is still referenced after {wait} showed it complete"


@pytest.mark.clause("EVENT-10")
def test_elapsed_ms_waits_for_a_start_that_completes_last(device, stream, kernels, require):
    """The start event may complete after the end one (two streams): elapsed_ms waits for both, not for its
    end alone, answers a finite number (negative where the end really came first), and lets go of the
    copy_dtoh before its start as the start's own synchronize would (EVENT-9)."""
    require("events.timing")
    other = device.create_stream()
    work = RunningWork(device, stream, kernels)
    try:
        with device.alloc(4 * N) as buf:
            busy(stream, kernels, buf, 20)
            readback = [np.zeros(N, np.uint32)]
            stream.copy_dtoh(readback[0], buf)
            work.enqueue(stream)
            start = stream.record(timing=True)
            end = other.record(timing=True)
            timed = start.elapsed_ms(end)
            _assert_let_go(readback, "Event.elapsed_ms")  # before any query(), which would deliver the copy itself
            assert start.query() is True, "elapsed_ms returned before its start event completed"
            assert end.query() is True, "elapsed_ms returned before its end event completed"
            assert math.isfinite(timed), timed
            work.check(stream)
    finally:
        work.free()


@pytest.mark.clause("EVENT-11")
def test_each_event_keeps_its_own_point(device, stream, kernels):
    """Events are cheap to record because backends recycle what is behind them (CUDA's CUevents, fences, query
    slots): a recycled one handed to two live events at once, or re-recorded while an event still refers to
    it, makes an early event answer for a later point. Events recorded and dropped by the hundred, pending ones
    among them, then an early event, running work and a late event: each answers for its own point."""
    with device.alloc(4 * N) as buf:
        for i in range(200):
            if i % 50 == 0:
                busy(stream, kernels, buf, 1)
            stream.record()  # dropped at once, some still pending
        stream.synchronize()
        for work in RunningWork.tries(device, stream, kernels):
            early = [stream.record() for _ in range(3)]
            stream.synchronize()
            work.enqueue(stream)
            late = [stream.record() for _ in range(3)]
            answers = [ev.query() for ev in early + late]
            in_time = work.looked_in_time()
            assert answers[:3] == [True] * 3, f"an event recorded before the work answers {answers[:3]}"
            for ev in late:
                ev.synchronize()
            assert [ev.query() for ev in early + late] == [True] * 6
            work.check(stream)
            if in_time:
                assert answers[3:] == [False] * 3, f"events recorded behind running work answer {answers[3:]}"
                return
    pytest.fail("the host never got to query() within a third of the work's time, however long the work")


@pytest.mark.clause("EVENT-12")
@pytest.mark.parametrize("where", ["its own stream", "another stream"])
def test_a_re_recorded_event_answers_for_its_new_point(device, stream, kernels, where):
    """``record(event=e)`` moves ``e`` to the point the record marks: recorded behind running work it answers
    False, then True once the work is done, and its wait lets go of the copy_dtoh before it (EVENT-9). A re-record
    that leaves the event at its old point answers True at once; one that keeps the old point's bookkeeping (CUDA:
    the held copies' mark, or the stream they are held on) never lets go of the array."""
    here = stream if where == "its own stream" else device.create_stream()
    with device.alloc(4 * N) as buf:
        event = stream.record()
        event.synchronize()
        for work in RunningWork.tries(device, here, kernels):
            busy(here, kernels, buf, 20)
            readback = [np.zeros(N, np.uint32)]
            here.copy_dtoh(readback[0], buf)
            work.enqueue(here)
            same = here.record(event=event)
            done = event.query()
            in_time = work.looked_in_time()
            assert same is event, "record(event=e) returned another object"
            assert event.stream is here, f"a re-recorded event's stream is not the stream that re-recorded it ({where})"
            event.synchronize()
            assert event.query() is True
            _assert_let_go(readback, f"Event.synchronize of an event re-recorded on {where}")
            work.check(here)
            if in_time:
                assert done is False, f"an event re-recorded behind running work on {where} answers query() True"
                return
    pytest.fail("the host never got to query() within a third of the work's time, however long the work")


def _re_record_after_another(stream: ia.Stream, event: ia.Event, bystander: ia.Event) -> ia.Event:
    """``stream.record(event=event)`` right after an expression that held ``bystander`` one slot past where the
    call's argument goes (CPython's value stack: the method, the stream, ``event``; the tuple's fourth item): a
    compiled record that reads its arguments past the one it was given finds the bystander there."""
    held = (stream, stream, stream, bystander)  # noqa: F841 (what matters is the slot it leaves behind)
    return stream.record(event=event)


@pytest.mark.clause("EVENT-12")
def test_a_re_record_moves_the_event_named_and_no_other(device, stream):
    """``record(event=e)`` moves ``e`` and leaves every other Event where it was, also one the calling frame held
    just before. A compiled record that takes the event from past its argument array re-records whatever Event
    it finds there and returns ``e`` unmoved."""
    other = device.create_stream()
    event, bystander = stream.record(), stream.record()
    for _ in range(3):  # the interpreter specialises a call after a few runs: each form must hold
        same = _re_record_after_another(other, event, bystander)
        assert same is event, "record(event=e) returned another object"
        assert event.stream is other, "record(event=e) did not move e to the stream that re-recorded it"
        assert bystander.stream is stream, "record(event=e) moved another Event (one the caller held just before)"
        stream.record(event=event)
    stream.synchronize()  # both events' last points are on stream: other's synchronize would not cover them
    assert event.query() is True and bystander.query() is True


@pytest.mark.clause("EVENT-12")
def test_a_wait_before_a_re_record_keeps_the_old_point(device, stream, kernels):
    """``B.wait(e)`` waits for the point ``e`` marked when the wait was enqueued: re-recording ``e`` afterwards on
    an idle stream (a point complete at once) must not let B's synchronize (a wait is work of B: STREAM-11)
    return before the work before the old point. A backend that resolves a wait's event when it submits the
    wait, not when it is enqueued, follows the event to its new point."""
    other, idle = device.create_stream(), device.create_stream()
    work = RunningWork(device, stream, kernels)
    try:
        work.enqueue(stream)
        old_point = stream.record()  # just before the event's point, in an event no one re-records: complete once
        event = stream.record()      # the event's is (an event that completes after a later one is EVENT-7's bug)
        other.wait(event)
        idle.record(event=event)
        other.synchronize()
        assert old_point.query() is True, ("a stream that waited for an event synchronized before the event's old "
                                           "point: the wait followed the event's re-record")
        work.check(stream)
    finally:
        work.free()


@pytest.mark.clause("EVENT-12")
def test_re_recorded_timed_events_time_their_new_points(device, stream, kernels, require):
    """A timed event re-recorded with ``timing=True`` times its new point: a backend that caches the old
    timestamp (or keeps the old query slot's value) answers the interval between the old points."""
    require("events.timing")
    start, end = stream.record(timing=True), stream.record(timing=True)
    assert start.elapsed_ms(end) >= 0
    work = RunningWork(device, stream, kernels)
    try:
        stream.synchronize()
        stream.record(timing=True, event=start)
        work.enqueue(stream)
        stream.record(timing=True, event=end)
        timed = start.elapsed_ms(end)
        assert math.isfinite(timed) and timed >= 0.1 * work.expected_seconds * 1e3, (
            f"elapsed {timed:.3f} ms between re-recorded events around ~{work.expected_seconds * 1e3:.0f} ms of work")
        work.check(stream)
    finally:
        work.free()


@pytest.mark.clause("EVENT-12", "ERR-1")
def test_re_record_rejects_what_it_cannot_re_record(device, stream):
    second = get_backend(device.info.backend).open_device(device.info.index)
    try:
        foreign = second.create_stream().record()
        untimed = stream.record()
        buf, other_stream = device.alloc(256), device.create_stream()
        cases = {
            "an event that is not an Event": lambda: stream.record(event=1.0),
            # the library's other objects, which a compiled record that takes any object for an Event reads as
            # an event's fields (a Buffer's: its device where the event's stream is, a 0 byte where its timing)
            "a Buffer": lambda: stream.record(event=buf),
            "a Stream": lambda: stream.record(event=other_stream),
            "the Device": lambda: stream.record(event=device),
            "an event of another device": lambda: stream.record(event=foreign),
            "timing=True for an event recorded without timing": lambda: stream.record(timing=True, event=untimed),
        }
        if device.supports("events.timing"):
            timed = stream.record(timing=True)
            cases["timing=False for a timed event"] = lambda: stream.record(event=timed)
        for what, call in cases.items():
            with pytest.raises(ia.InvalidArgument, match=r"^Stream\.record: "):
                call()
                pytest.fail(f"{what}: accepted")
        buf.free()
        assert untimed.stream is stream
        # record's arguments are keyword-only, and only event= names the event to re-record: an Event passed
        # positionally (beside event= too) or as timing= is not re-recorded (a compiled record that reads the
        # event from the first argument whenever one keyword is given moves it to the other stream)
        other = device.create_stream()
        for what, call in {"record(e)": lambda: other.record(untimed),
                           "record(e, event=e)": lambda: other.record(untimed, event=untimed)}.items():
            with pytest.raises(TypeError):
                call()
                pytest.fail(f"{what}: accepted")
        try:
            made = other.record(timing=untimed)  # a truthy timing: a new timed event
        except ia.Unsupported:
            made = None
        assert made is not untimed and untimed.stream is stream, "record(timing=e) re-recorded e"
        untimed.synchronize()
        if device.supports("graphs"):
            with pytest.raises(ia.InvalidArgument, match=r"^Stream\.record: "):
                with stream.capture():
                    stream.record(event=untimed)
        foreign_stream = foreign.stream
        second.close()
        with pytest.raises(ia.UseAfterFree, match=r"^Stream\.record: "):
            foreign_stream.record(event=foreign)
    finally:
        second.close()


@pytest.mark.clause("EVENT-51")
def test_the_first_work_of_a_fresh_device_is_not_taken_as_done(device, stream, kernels, target):
    """A backend that numbers its queue points may start its "complete up to" mark at the first point
    instead of before it: then only the very first work of a device reads as done at once. RunningWork is
    sized on the shared device (its sizing submits work of its own), then the same launches are the first
    work of a freshly opened Device."""
    for work in RunningWork.tries(device, stream, kernels):
        fresh = get_backend(device.info.backend).open_device(device.info.index)
        try:
            busy = target.compile_kernel(fresh, "busy")
            s = fresh.create_stream()
            with fresh.alloc(4 * work.n) as buf:
                started = time.perf_counter()
                for _ in range(work.launches):
                    s.launch(busy, ceil_div(work.n, 64), 64, (buf, np.uint32(work.iters), np.uint32(work.n)))
                ev = s.record()
                done = ev.query()
                in_time = time.perf_counter() - started < work.expected_seconds / 3
                ev.synchronize()
                assert ev.query() is True
                where = np.linspace(0, work.n - 1, 64).astype(np.int64)
                np.testing.assert_array_equal(read(s, buf, np.uint32)[where], lcg(where, work.iters))
                if in_time:
                    assert done is False, (
                        f"query() said complete while ~{work.expected_seconds:.2f} s of a fresh device's first work was queued")
                    return
        finally:
            fresh.close()
    pytest.fail("the host never got to query() within a third of the work's time, however long the work")


#: events EVENT-52 keeps alive at once: enough that a driver's table of live handles grows many times over (the
#: fake's registry that forgot slot 0 of the old table: caught in 8 of 8 runs, 5,000 caught it in 8 of 10), few
#: enough to stay fast everywhere (opengl/llvmpipe: 2.5 s; 20,000 took it 16 s)
MANY_EVENTS = 10000


@pytest.mark.clause("EVENT-52")
def test_thousands_of_live_events_each_still_answer(device, stream):
    """A driver keeps its live handles in a table that grows as more are made; a growth that loses an entry
    (one slot of the old table not carried over) turns that event's next synchronize, record or query into an
    invalid-handle error. Thousands of events held at once on one stream make it grow many times; each is
    then waited for, re-recorded and queried."""
    with device.alloc(4) as buf:
        stream.fill(buf, 0)
        events = [stream.record() for _ in range(MANY_EVENTS)]
        for i, event in enumerate(events):
            event.synchronize()
            assert stream.record(event=event) is event, i
        stream.synchronize()
        pending = [i for i, event in enumerate(events) if event.query() is not True]
        assert not pending, (f"{len(pending)} of {MANY_EVENTS} re-recorded events not complete after synchronize: "
                             f"{pending[:8]}")


@pytest.mark.clause("EVENT-53")
def test_a_graph_holding_an_event_record_node_instantiates_and_launches(device, stream):
    """cuEventRecordWithFlags(CU_EVENT_RECORD_EXTERNAL) on a capturing stream puts an event record node in the
    graph (clients so signal other streams or processes from inside a replayed graph). Through `Stream.native`: a
    capture of a memset, such a record and another memset ends with a graph holding an event record node, which
    cuGraphInstantiate with flags 0 takes (only CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH limits a graph to
    kernel, memcpy and memset nodes); its launch sets both ranges and the event is complete once the stream is
    synchronized."""
    cu = cuda_driver(device, "cuEventRecordWithFlags, cuGraphInstantiate")
    with poisoned(device, stream, 128) as out:
        stream.synchronize()
        with context_current(device):
            event = graph = executable = None
            errors: dict[str, object] = {}
            kinds: list[object] = []
            try:
                err, event = cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)
                assert not err, f"cuEventCreate: {err}"
                errors["cuStreamBeginCapture"], = cu.cuStreamBeginCapture(
                    stream.native, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL)
                errors["cuMemsetD8Async"], = cu.cuMemsetD8Async(out.handle, 0x33, 64, stream.native)
                errors["cuEventRecordWithFlags(CU_EVENT_RECORD_EXTERNAL)"], = cu.cuEventRecordWithFlags(
                    event, stream.native, cu.CUevent_record_flags.CU_EVENT_RECORD_EXTERNAL)
                errors["the second cuMemsetD8Async"], = cu.cuMemsetD8Async(int(out.handle) + 64, 0x44, 64,
                                                                           stream.native)
                errors["cuStreamEndCapture"], graph = cu.cuStreamEndCapture(stream.native)
                if not any(errors.values()):
                    errors["cuGraphGetNodes"], _, count = cu.cuGraphGetNodes(graph, 0)
                    errors["cuGraphGetNodes"], nodes, _ = cu.cuGraphGetNodes(graph, count)
                    kinds = [cu.cuGraphNodeGetType(node)[1] for node in nodes[:count]]
                    errors["cuGraphInstantiate(flags 0)"], executable = cu.cuGraphInstantiate(graph, 0)
                    if not errors["cuGraphInstantiate(flags 0)"]:
                        errors["cuGraphLaunch"], = cu.cuGraphLaunch(executable, stream.native)
                        errors["cuStreamSynchronize"], = cu.cuStreamSynchronize(stream.native)
                        errors["cuEventQuery after the launch"], = cu.cuEventQuery(event)
            finally:
                if executable is not None:
                    cu.cuGraphExecDestroy(executable)
                if graph is not None and int(graph):
                    cu.cuGraphDestroy(graph)
                if event is not None:
                    cu.cuEventDestroy(event)
        failed = {name: err for name, err in errors.items() if err}
        assert not failed, f"the graph with an event record node: {failed}"
        assert cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_EVENT_RECORD in kinds, \
            f"the captured graph's nodes are {kinds}: no event record node"
        got = read(stream, out, np.uint8).tolist()
        assert got == [0x33] * 64 + [0x44] * 64, \
            f"the graph's launch left {sorted(set(got[:64]))} in the first half (0x33), {sorted(set(got[64:]))} in " \
            "the second (0x44)"


@pytest.mark.clause("EVENT-56")
def test_re_record_checks_every_keyword_whatever_their_order(device, stream):
    """record(event=e, timing=...) is record(timing=..., event=e): the keywords' order changes nothing. With
    event= first, a timing that is not the event's raises InvalidArgument and a keyword record does not take
    raises TypeError, each leaving the event where it was; the event's own timing re-records it. A compiled
    record that looks only at the first keyword re-records the event whatever follows."""
    untimed = stream.record()
    other = device.create_stream()
    cases = {"event=e, timing=True for an untimed event": (ia.InvalidArgument,
                                                            lambda: other.record(event=untimed, timing=True)),
             "event=e, bogus=1": (TypeError, lambda: other.record(event=untimed, bogus=1))}
    if device.supports("events.timing"):
        timed = stream.record(timing=True)
        cases["event=e, timing=False for a timed event"] = (ia.InvalidArgument,
                                                            lambda: other.record(event=timed, timing=False))
        cases["event=e, bogus=1 for a timed event"] = (TypeError, lambda: other.record(event=timed, bogus=1))
    for what, (error, call) in cases.items():
        other.record(event=other.record())  # a good re-record first: the path warm
        with pytest.raises(error):
            call()
            pytest.fail(f"record({what}): accepted")
        assert untimed.stream is stream, f"record({what}) moved the event"
    assert other.record(event=untimed, timing=False) is untimed and untimed.stream is other
    untimed.synchronize()


@pytest.mark.clause("EVENT-57")
@pytest.mark.parametrize("then", ["Stream.synchronize", "Stream.synchronize(timeout)", "Event.synchronize"])
def test_a_wait_for_the_first_point_after_a_stream_was_waited_for_is_kept(device, stream, kernels, then):
    """STREAM-11 at its edge: the stream was just synchronized (everything it did is known complete), then gets
    one running launch and an event, nothing else, so the event is the very next point after the last one seen
    complete. A second stream's wait for it must hold that stream until the launch is done. A backend that skips
    a wait for an event it believes complete, comparing the event's point with the last completed one off by one,
    skips exactly this wait (STREAM-11 records more points after the last one waited for)."""
    work = RunningWork(device, stream, kernels, seconds=0)  # one launch (10 ms or more): one point after the synchronize
    try:
        for _ in range(3):  # the wait must hold each time; a skipped one shows when the host looks within the launch
            stream.synchronize()
            work.enqueue(stream)
            event = stream.record()
            wait_then(then)(stream, event)
            assert event.query() is True, (f"Stream.wait then {then} on the waiting stream returned while the "
                                           "event it waited for was still pending")
        work.check(stream)
    finally:
        work.free()


@pytest.mark.clause("EVENT-58")
def test_the_first_point_after_a_synchronize_is_pending_while_its_launch_runs(device, stream, kernels):
    """EVENT-5 at its edge: the stream was just synchronized, then gets one running launch and an event, nothing
    else, so the event is the very next point after the last one seen complete; its query() is False while the
    launch runs. A backend that answers query() from the last point it saw complete, off by one, says True for
    exactly this event (EVENT-5's work is several points, and its event is not the next one)."""
    work = RunningWork(device, stream, kernels, seconds=0)  # one launch (10 ms or more): one point after the synchronize
    looked = 0
    deadline = time.monotonic() + 20  # a loaded host looks late at many tries: try until three looks came in time
    try:
        for _ in range(200):
            if looked >= 3 or time.monotonic() > deadline:
                break
            stream.synchronize()
            work.enqueue(stream)
            event = stream.record()
            answer = event.query()
            if work.looked_in_time():  # the launch certainly still ran when query() answered
                looked += 1
                assert answer is False, "query() of an event behind a running launch answered True"
            event.synchronize()
            assert event.query() is True, "an event waited for answers query() False"
        work.check(stream)
    finally:
        work.free()
    assert looked, "the host never queried the event within a third of the launch's time"


#: A draw that covers the framebuffer with one triangle, each fragment running an ``iters``-step LCG: work that
#: a GL driver runs after the flush (llvmpipe rasterizes it on its own threads), unlike a compute dispatch,
#: which llvmpipe runs to its end inside the GL call that issues it.
DRAW_VERTEX = """#version 430
void main() { gl_Position = vec4(float((gl_VertexID & 1) * 4 - 1), float((gl_VertexID & 2) * 2 - 1), 0.0, 1.0); }
"""
DRAW_FRAGMENT = """#version 430
uniform int iters;
out vec4 color;
void main() {
    uint v = uint(gl_FragCoord.x) * 7u + uint(gl_FragCoord.y);
    for (int i = 0; i < iters; i++) v = v * 1664525u + 1013904223u;
    color = vec4(float(v & 255u) / 255.0, 0.0, 0.0, 1.0);
}
"""


class _GLDraw:
    """DRAW_FRAGMENT over 512 x 512 pixels on the device's own GL context, issued on its GL thread through
    ``Device.native.run`` (as a client that renders beside the library does)."""

    def __init__(self, native):
        self.native = native
        self.bound = native.run(lambda: native.context.fbo)  # bound again before the release: moderngl binds
        self.program, self.framebuffer, self.vertices = native.run(self._make)  # it back after making one

    def _make(self):
        ctx = self.native.context
        program = ctx.program(vertex_shader=DRAW_VERTEX, fragment_shader=DRAW_FRAGMENT)
        return program, ctx.simple_framebuffer((512, 512)), ctx.vertex_array(program, [])

    def issue(self, iters: int) -> None:
        def draw():
            self.program["iters"].value = iters
            self.framebuffer.use()
            self.vertices.render(mode=self.native.context.TRIANGLES, vertices=3)
        self.native.run(draw)

    def seconds(self, iters: int) -> float:
        """The draw's wall time, glFinish included."""
        t0 = time.perf_counter()
        self.issue(iters)
        self.native.run(self.native.context.finish)
        return time.perf_counter() - t0

    def release(self) -> None:
        def release():
            self.bound.use()
            for obj in (self.vertices, self.framebuffer, self.program):
                obj.release()
        self.native.run(release)


@pytest.mark.clause("EVENT-64")
def test_query_of_an_event_behind_a_running_draw_never_blocks(device, stream, kernels, require):
    """EVENT-4 for work the driver runs after the fence's flush: a GL backend waits on its fence with a
    timeout, 0 for a query; a timeout computed wrong (from the deadline plus the clock, say) turns query() into
    a wait for the work. llvmpipe finishes a compute dispatch inside glDispatchCompute, so behind the library's
    own work every fence has signalled when it is placed; a client's draw is still being rasterized."""
    require("lang.glsl430")
    draw = _GLDraw(device.native)
    try:
        iters = 64
        while (took := draw.seconds(iters)) < 0.1:  # ~1 s of drawing, measured, not guessed
            iters *= 4
        iters = max(iters, round(iters / took))
        draw.issue(iters)
        event = stream.record()
        start, longest, answers = time.perf_counter(), 0.0, []
        while not (answers and answers[-1]):
            assert time.perf_counter() - start < 120, "query() never became True behind a draw"
            t0 = time.perf_counter()
            answers.append(event.query())
            longest = max(longest, time.perf_counter() - t0)
        total = time.perf_counter() - start
        assert answers[0] is False, "query() of an event behind a running draw answered True at once"
        assert longest < total / 2, (f"one query() took {longest:.3f} s of the {total:.3f} s the draw ran on after "
                                     f"the record: a query waited for the work ({len(answers)} calls)")
    finally:
        draw.release()
    assert_device_works(device, kernels)


@pytest.mark.clause("EVENT-65")
def test_a_re_recorded_event_gives_back_what_its_last_point_held(device, stream, kernels):
    """LIFE-70 for ``record(event=e)``: the event keeps one point, so each re-record must give back the driver
    objects of the point it leaves (a fence or sync, a timestamp query), as a dropped event does; a backend that
    forgets them leaks with every re-record of an event kept in a loop. One event (timed where the device has
    timing) re-recorded in thousands, synchronized every 1,000; at most 200,000 or 10 s of them."""
    timing = device.supports("events.timing")
    event = stream.record(timing=timing)

    def rerecord(count: int) -> None:
        for _ in range(count):
            assert stream.record(event=event, timing=timing) is event
        stream.synchronize()
        gc.collect()

    done, grown = resident_growth(rerecord, 1000, 200_000)
    assert event.query() is True
    assert grown < 16 << 20, f"one event re-recorded {done} times left {grown / 2**20:.1f} MiB more resident memory"
    assert_device_works(device, kernels)
