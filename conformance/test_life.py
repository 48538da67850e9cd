"""LIFE: lifetimes that end while work is still queued or running — frees, device close, dropped streams."""

from __future__ import annotations

import gc
import statistics
import sys
import time
import weakref

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.backends import get as get_backend
from ironaccel.cts.pytest_plugin import NOT_SUPPORTED_PREFIX

from .helpers import (RunningWork, assert_device_works, ceil_div, child_json, lcg, memory_churn, random_bytes, read,
                      resident_growth, rng, rss_bytes, unreported_errors)


@pytest.mark.clause("LIFE-1")
@pytest.mark.parametrize("pooled", [False, True], ids=["plain", "pooled"])
def test_free_while_a_kernel_still_writes_the_buffer(device, stream, kernels, pooled):
    work = RunningWork(device, stream, kernels)
    pool = ia.MemPool(device, stream) if pooled else None
    alloc = pool.alloc if pool else device.alloc
    try:
        target = alloc(4 * work.n)
        work.enqueue(stream, target)
        target.free()  # the kernels are still queued or running
        others = [alloc(4 * work.n) for _ in range(4)]
        # A pooled block is reused in the order of the pool's stream (so its next owner works there); a
        # plain buffer is usable on any stream once alloc returns.
        user = stream if pooled else device.create_stream()
        for i, b in enumerate(others):
            user.fill(b, 0x40 + i)
        device.synchronize()
        for i, b in enumerate(others):
            assert (read(user, b) == 0x40 + i).all(), "memory of a freed buffer was reused while a kernel wrote it"
            b.free()
    finally:
        work.free()
        if pool:
            pool.close()
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-4")
def test_free_while_another_stream_still_uses_the_buffer(device, stream, kernels):
    """Kernels write the first part of a buffer on one stream; another stream then fills its tail (the buffer's
    last use, in call order) and the buffer is freed while the kernels are still queued: the free must wait for
    every stream's work, not only the last one's."""
    work = RunningWork(device, stream, kernels)
    tail = 4096
    try:
        target = device.alloc(4 * work.n + tail)
        other = device.create_stream()
        work.enqueue(stream, target)
        other.fill(target, 0x3C, offset=4 * work.n, nbytes=tail)
        target.free()  # the kernels on `stream` are still queued or running
        others = [device.alloc(4 * work.n + tail) for _ in range(4)]
        for i, b in enumerate(others):
            other.fill(b, 0x40 + i)
        device.synchronize()
        for i, b in enumerate(others):
            assert (read(other, b) == 0x40 + i).all(), "memory of a freed buffer was reused while a kernel wrote it"
            b.free()
    finally:
        work.free()
    assert_device_works(device, kernels)



@pytest.mark.clause("LIFE-68")
def test_free_after_many_stream_switches_still_waits_for_the_first_streams_work(device, stream, kernels):
    """LIFE-4 with the buffer passed back and forth between two other streams (12 fills of its tail, each on
    the other stream) after the kernels on the first one: a backend that keeps a fence per switch and, past
    some number of them, drops the ones it takes for completed must not drop the first stream's, still
    running, so the free waits for it."""
    tail = 4096
    streams = [device.create_stream(), device.create_stream()]
    for work in RunningWork.tries(device, stream, kernels):
        target = device.alloc(4 * work.n + tail)
        stream.synchronize()
        work.enqueue(stream, target)
        for i in range(12):
            streams[i % 2].fill(target, 0x3C, offset=4 * work.n, nbytes=tail)
        target.free()  # the kernels on `stream` are still queued or running
        if not work.looked_in_time():  # the host was away for most of the work: no conclusion, more work
            device.synchronize()
            continue
        others = [device.alloc(4 * work.n + tail) for _ in range(4)]
        for i, b in enumerate(others):
            streams[0].fill(b, 0x40 + i)
        device.synchronize()
        for i, b in enumerate(others):
            assert (read(streams[0], b) == 0x40 + i).all(), "a freed buffer's memory was reused while a kernel wrote it"
            b.free()
        break
    else:
        pytest.fail("the host never looked while the work still ran (a busy host): no conclusion")
    assert_device_works(device, kernels)



@pytest.mark.clause("LIFE-69")
def test_the_garbage_collector_can_walk_the_librarys_objects(device, stream, kernels):
    """The cycle collector and gc.get_referents/get_referrers walk an object with its type's traverse
    function, which must say it finished: one that reports an error makes get_referents raise SystemError and
    get_referrers count the object as a referrer of anything, so leak hunters see false paths."""
    from ironaccel.pool import MemPool

    marker = object()
    kernel = kernels("fill_u32")
    buf = device.alloc(4096)
    stream.launch(kernel, 1, 64, (buf, np.uint32(0), np.uint32(0)))  # a used buffer, stream and kernel
    with MemPool(device, stream) as pool:
        objects = {"Device": device, "Stream": stream, "created Stream": device.create_stream(), "Buffer": buf,
                   "Event": stream.record(), "Kernel": kernel, "MemPool": pool, "PooledBuffer": pool.alloc(4096)}
        for name, obj in objects.items():
            gc.get_referents(obj)  # raises SystemError where its traverse reports an error
        referrers = [name for name, obj in objects.items() if any(r is obj for r in gc.get_referrers(marker))]
        assert referrers == [], f"gc.get_referrers counts these as referrers of an unrelated object: {referrers}"
        # and it visits what it holds: a Buffer holds its device, a Device its info (a traverse that visits
        # nothing hides every cycle through the object from the collector). An instance's attributes may be
        # reached through its __dict__ (always before Python 3.11; once the dict exists after), which is then the
        # referent (and the referrer) in the object's place.
        def held_by(obj):
            held = gc.get_referents(obj)
            dicts = [r for r in held if type(r) is dict]
            return held, dicts, [*held, *(x for d in dicts for x in gc.get_referents(d))]

        held, dicts, reached = held_by(buf)
        assert any(r is device for r in reached), \
            f"gc.get_referents of a used Buffer misses its device: {[type(r).__name__ for r in held]}"
        assert any(r is buf or any(r is d for d in dicts) for r in gc.get_referrers(device)), \
            "gc.get_referrers of the device misses a used Buffer of it"
        held, _, reached = held_by(device)
        assert any(r is device.info for r in reached), \
            f"gc.get_referents of the Device misses its DeviceInfo: {[type(r).__name__ for r in held]}"
        stream.synchronize()
        objects["PooledBuffer"].free()
    buf.free()



#: The writers of LIFE-8: (name, bytes written) — a small and a large (chunked) staged copy_htod, a fill, a
#: copy_dtod into the buffer.
WRITERS = [("copy_htod", 4096), ("copy_htod", 6 << 20), ("fill", 4096), ("copy_dtod", 4096)]


@pytest.mark.clause("LIFE-8")
@pytest.mark.parametrize("writer, nbytes", WRITERS, ids=[f"{w}-{n}" for w, n in WRITERS])
def test_free_while_a_copy_or_fill_still_writes_the_buffer(device, stream, kernels, writer, nbytes):
    """LIFE-1 for the writers that are not kernels: each is queued behind running work, so it has not run when
    the buffer is freed; a backend that orders a free only after the kernels that used the buffer (a copy or a
    fill that does not mark the buffer as used on its stream) lets the write land in the next owner's memory."""
    with device.alloc(nbytes) as source:
        stream.fill(source, 0xEE)
        host = np.full(nbytes, 0xEE, np.uint8)
        for work in RunningWork.tries(device, stream, kernels):
            target = device.alloc(nbytes)
            stream.synchronize()
            work.enqueue(stream)
            if writer == "copy_htod":
                stream.copy_htod(target, host)
            elif writer == "fill":
                stream.fill(target, 0xEE)
            else:
                stream.copy_dtod(target, source, nbytes)
            target.free()  # the write is still queued behind the work
            in_time = work.looked_in_time()
            _assert_new_buffers_intact(device, nbytes, f"a {writer} into a freed buffer landed in a new one")
            work.check(stream)
            if in_time:
                break
        else:
            pytest.fail("the host never freed the buffer within a third of the work's time, however long the work")
    assert_device_works(device, kernels)


def _assert_new_buffers_intact(device, nbytes: int, what: str, user=None) -> None:
    """Buffers allocated right after a free and filled on ``user`` (a new stream by default) keep their fills
    once the device is idle."""
    user = user or device.create_stream()
    others = [device.alloc(nbytes) for _ in range(4)]
    for i, b in enumerate(others):
        user.fill(b, 0x40 + i)
    device.synchronize()
    for i, b in enumerate(others):
        assert (read(user, b) == 0x40 + i).all(), what
        b.free()


#: LIFE-10's second uses, on another stream, of a buffer that kernels still write: each touches its tail only.
SECOND_USES = {
    "copy_htod": lambda s, kernels, buf, tail: s.copy_htod(buf, np.full(tail, 0x3C, np.uint8),
                                                           dst_offset=buf.nbytes - tail),
    "copy_dtoh": lambda s, kernels, buf, tail: s.copy_dtoh(np.empty(tail, np.uint8), buf, src_offset=buf.nbytes - tail),
    "launch": lambda s, kernels, buf, tail: s.launch(kernels("fill_u32"), 1, 64, (buf, np.uint32(0), np.uint32(0))),
}


@pytest.mark.clause("LIFE-10")
@pytest.mark.parametrize("second", list(SECOND_USES))
def test_free_after_a_copy_or_launch_on_another_stream(device, stream, kernels, second):
    """LIFE-4 with the second use a copy or a kernel launch (on some backends a compiled path of its own, that
    must hand the buffer's earlier stream a fence as a fill does): the free still waits for the kernels."""
    tail = 4096
    other = device.create_stream()
    for work in RunningWork.tries(device, stream, kernels):
        target = device.alloc(4 * work.n + tail)
        for _ in range(2):  # a compiled path takes the launch, with these arguments, from the second on
            SECOND_USES[second](other, kernels, target, tail)
        other.synchronize()
        work.enqueue(stream, target)  # the buffer's use moves to `stream`...
        SECOND_USES[second](other, kernels, target, tail)  # ...and back to `other`, the kernels still queued
        target.free()
        in_time = work.looked_in_time()
        _assert_new_buffers_intact(device, 4 * work.n + tail, "memory of a freed buffer was reused while a kernel "
                                   "wrote it", other)
        if in_time:
            break
    else:
        pytest.fail("the host never freed the buffer within a third of the work's time, however long the work")
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-2")
def test_close_with_pending_work_completes_it(device, kernels):
    other = get_backend(device.info.backend).open_device(device.info.index)
    s = other.create_stream()
    n = min(16 << 20, other.info.limits.max_alloc)
    buf = other.alloc(n)
    s.fill(buf, 0x5E)
    host = np.zeros(n, np.uint8)
    s.copy_dtoh(host, buf)
    other.close()  # nothing synchronized: the fill and the copy may still be queued
    assert (host == 0x5E).all(), "close() dropped pending work"
    with pytest.raises(ia.UseAfterFree, match=r"^Stream\.synchronize: "):
        s.synchronize()
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-2")
def test_close_with_running_kernels_and_no_live_buffers(device, kernels, target):
    """close() must wait for the work itself, not only as a side effect of freeing buffers still live."""
    other = get_backend(device.info.backend).open_device(device.info.index)
    busy = target.compile_kernel(other, "busy")
    s = other.create_stream()
    work = RunningWork(other, s, lambda name: busy)
    buf = other.alloc(4096)
    work.enqueue(s)
    s.fill(buf, 0x6B)
    filled, computed = np.zeros(4096, np.uint8), np.zeros(work.n, np.uint32)
    s.copy_dtoh(filled, buf)
    s.copy_dtoh(computed, work.buf)
    buf.free()  # freed while queued: nothing live is left for close() to free
    work.free()
    other.close()
    assert (filled == 0x6B).all(), "close() returned before the work queued behind the kernels"
    np.testing.assert_array_equal(computed, lcg(np.arange(work.n), work.iters), err_msg="close() dropped running kernels")
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-3")
def test_a_dropped_stream_still_delivers_its_readback(device, stream, kernels):
    s = device.create_stream()
    with device.alloc(4096) as buf:
        s.fill(buf, 0x77)
        host = np.zeros(4096, np.uint8)
        s.copy_dtoh(host, buf)
        del s
        gc.collect()
        device.synchronize()
        assert (host == 0x77).all(), "a copy_dtoh of a dropped stream was lost"



def _reuse_at_once(device, nbytes: int, value: int, count: int = 4) -> list:
    """Buffers of ``nbytes`` allocated and written on a new stream and waited for there: where freed memory is
    handed out again at once, these writes land in it while work queued before the free still reads it."""
    other = device.create_stream()
    bufs = [device.alloc(nbytes) for _ in range(count)]
    for b in bufs:
        other.fill(b, value)
    other.synchronize()
    return bufs


@pytest.mark.clause("LIFE-5")
@pytest.mark.parametrize("reader", ["copy_dtod", "copy_dtoh", "kernel"])
def test_free_while_queued_work_still_reads_the_buffer(device, stream, kernels, reader):
    n = 1 << 14
    data = rng(21).standard_normal(n).astype(np.float32)
    work = RunningWork(device, stream, kernels)
    try:
        with device.alloc(4 * n) as zeros, device.alloc(4 * n) as out:
            src = device.alloc(4 * n)
            stream.copy_htod(src, data)
            stream.fill(zeros, 0)
            stream.fill(out, 0xEE)
            stream.synchronize()
            host = np.zeros(n, np.float32)
            work.enqueue(stream)  # the reader queues behind it
            if reader == "copy_dtod":
                stream.copy_dtod(out, src, 4 * n)
            elif reader == "copy_dtoh":
                stream.copy_dtoh(host, src)
            else:
                stream.launch(kernels("vecadd"), ceil_div(n, 128), 128, (src, zeros, out, np.uint32(n)))
            src.free()  # the read is still queued
            reused = _reuse_at_once(device, 4 * n, 0x3F)  # 0x3F3F3F3F: 0.747 as a float
            got = host if reader == "copy_dtoh" else read(stream, out, np.float32)
            stream.synchronize()
            np.testing.assert_array_equal(got, data, err_msg=f"the {reader} read memory reused after the free")
            for b in reused:
                assert (read(stream, b) == 0x3F).all(), "a buffer allocated after the free was changed"
                b.free()
        work.check(stream)
    finally:
        work.free()


@pytest.mark.clause("LIFE-85")
@pytest.mark.parametrize("reader", ["copy_dtod", "kernel"])
def test_free_right_after_a_queued_read_waits_for_the_read_not_for_the_work_before_it(device, stream, kernels,
                                                                                      reader):
    """LIFE-5 with the work before the read known complete when the freed memory is handed out again: the
    read, queued behind one more busy launch in the same burst, must still see the old contents. (A backend
    that orders the free after the work it has handed to the driver, not after all the work enqueued, frees
    the memory while the read is still queued.) The burst is a few calls; it is repeated, as a backend may
    hand it over partway."""
    n = 1 << 14
    data = rng(22).standard_normal(n).astype(np.float32)
    before = RunningWork(device, stream, kernels, 0.02)
    between = RunningWork(device, stream, kernels, 0.02)
    try:
        with device.alloc(4 * n) as zeros, device.alloc(4 * n) as out:
            stream.fill(zeros, 0)
            for attempt in range(5):
                src = device.alloc(4 * n)
                stream.copy_htod(src, data)
                stream.fill(out, 0xEE)
                before.enqueue(stream)
                done = stream.record()
                between.enqueue(stream)  # the read queues behind it, in the same burst as the free
                if reader == "copy_dtod":
                    stream.copy_dtod(out, src, 4 * n)
                else:
                    stream.launch(kernels("vecadd"), ceil_div(n, 128), 128, (src, zeros, out, np.uint32(n)))
                src.free()
                done.synchronize()  # the work before the read is complete; the read may still be queued
                reused = _reuse_at_once(device, 4 * n, 0x3F)
                got = read(stream, out, np.float32)
                np.testing.assert_array_equal(got, data, err_msg=f"attempt {attempt}: the {reader} read memory "
                                                                 "handed out again after the free")
                for b in reused:
                    b.free()
        between.check(stream)
    finally:
        before.free()
        between.free()


@pytest.mark.clause("LIFE-6", "ERR-1")
def test_a_closed_modules_queued_launches_run_and_its_kernels_raise(device, stream, kernels, target):
    n = 1 << 16
    grid = ceil_div(n, 64)
    kernel = target.compile_kernel(device, "fill_u32")
    module = kernel.module
    plan = kernel.prepare(grid, 64)
    out = [device.alloc(4 * n) for _ in range(3)]
    work = RunningWork(device, stream, kernels)
    try:
        work.enqueue(stream)  # the launches below stay queued behind it while the module closes
        for i, buf in enumerate(out):
            stream.launch(kernel, grid, 64, (buf, np.uint32(i + 1), np.uint32(n)))
        module.close()
        module.close()
        assert module.closed
        for i, buf in enumerate(out):
            assert (read(stream, buf, np.uint32) == i + 1).all(), "a launch queued before Module.close() was lost"
        for op, call in (("Stream.launch", lambda: stream.launch(kernel, grid, 64, (out[0], np.uint32(9), np.uint32(n)))),
                         ("Stream.launch", lambda: plan(stream, out[0], np.uint32(9), np.uint32(n))),
                         ("Kernel.prepare", lambda: kernel.prepare(grid, 64)),
                         ("Kernel.native", lambda: kernel.native),
                         ("Module.kernel", lambda: module.kernel(kernel.name))):
            # ERR-1: the op, then what was used after it ended: the module, closed
            with pytest.raises(ia.UseAfterFree, match=rf"^{op.replace('.', '[.]')}: .*\bmodule\b.*\bclosed\b"):
                call()
        assert (read(stream, out[0], np.uint32) == 1).all(), "a kernel of a closed module ran"
        with target.compile_kernel(device, "fill_u32").module as other:
            stream.launch(other.kernel(kernel.name), grid, 64, (out[1], np.uint32(7), np.uint32(n)))
        assert other.closed and (read(stream, out[1], np.uint32) == 7).all()
        if device.supports("graphs"):
            captured = target.compile_kernel(device, "fill_u32")
            with stream.capture() as graph:
                stream.launch(captured, grid, 64, (out[2], np.uint32(5), np.uint32(n)))
            captured.module.close()
            with pytest.raises(ia.UseAfterFree, match=r"^Graph[.]launch: "):
                graph.launch(stream)
            graph.close()
            assert (read(stream, out[2], np.uint32) == 3).all(), "a graph launched a closed module's kernel"
    finally:
        work.free()
        for buf in out:
            buf.free()
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-7")
def test_dropped_buffers_give_their_memory_back(device, stream, kernels, target):
    work = RunningWork(device, stream, kernels)
    try:
        doomed = device.alloc(4 * work.n)
        work.enqueue(stream, doomed)
        del doomed  # dropped while the kernels still write it
        gc.collect()
        others = [device.alloc(4 * work.n) for _ in range(4)]
        for i, b in enumerate(others):
            stream.fill(b, 0x50 + i)
        device.synchronize()
        for i, b in enumerate(others):
            assert (read(stream, b) == 0x50 + i).all(), "memory of a dropped buffer was reused while a kernel wrote it"
            b.free()
    finally:
        work.free()
    size, rounds, touched = memory_churn(device, target)  # more than the device holds, dropped
    before = rss_bytes()
    for i in range(rounds):
        buf = device.alloc(size)
        stream.fill(buf, i & 0xFF, nbytes=touched)
        del buf
        if i % 4 == 3 or touched < size:  # memory comes back once the work enqueued with it has completed
            stream.synchronize()
            gc.collect()
    device.synchronize()
    gc.collect()
    device.synchronize()
    if target.memory_kind != "device":
        grown = rss_bytes() - before
        assert grown < rounds * size // 3, f"{rounds} dropped {size >> 20} MiB buffers grew the process by {grown >> 20} MiB"
    assert_device_works(device, kernels)


def _thread_count() -> int:
    """The process's threads (Linux: /proc/self/status), where a driver's per-stream worker threads show."""
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


@pytest.mark.clause("LIFE-9")
def test_dropped_streams_give_their_resources_back(device, kernels):
    """A stream costs the driver something (a queue, a command pool, a worker thread): a backend that never
    destroys the streams it created (an ownership flag read the wrong way round) grows with every one."""
    with device.alloc(4096) as buf:

        def use_a_stream() -> None:
            s = device.create_stream()
            s.fill(buf, 3)
            s.record()
            s.synchronize()

        for _ in range(20):  # what the first streams set up once (caches, spare events) is not counted
            use_a_stream()
        gc.collect()
        device.synchronize()
        threads, rss = _thread_count(), rss_bytes()
        for _ in range(1000):
            use_a_stream()
        gc.collect()
        device.synchronize()
        gc.collect()
        grown_threads, grown_rss = _thread_count() - threads, rss_bytes() - rss
    assert grown_threads < 16, f"1000 streams created and dropped left {grown_threads} more threads"
    assert grown_rss < 64 << 20, f"1000 streams created and dropped grew the process by {grown_rss >> 20} MiB"
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-63")
def test_dropped_streams_that_staged_copies_give_their_resources_back(device, kernels):
    """LIFE-9 with copies: a stream whose small copy_htod was staged (CUDA's pinned ring lists the streams
    that copied from each segment, so a dropped one is fenced and destroyed later, not by its finalizer)
    must be given back too: a backend that takes such streams over and never destroys them grows with
    every one."""
    host = np.arange(1024, dtype=np.uint32)
    with device.alloc(host.nbytes) as buf:

        def use_a_stream() -> None:
            s = device.create_stream()
            s.copy_htod(buf, host)
            s.synchronize()

        for _ in range(20):  # what the first streams set up once (the ring, caches) is not counted
            use_a_stream()
        gc.collect()
        device.synchronize()
        threads, rss = _thread_count(), rss_bytes()
        for i in range(1000):
            use_a_stream()
            if i % 50 == 49:
                device.synchronize()  # a backend may give dropped streams back when the device next waits
        gc.collect()
        device.synchronize()
        gc.collect()
        grown_threads, grown_rss = _thread_count() - threads, rss_bytes() - rss
        np.testing.assert_array_equal(read(device.create_stream(), buf, np.uint32), host)
    assert grown_threads < 16, f"1000 streams that staged a copy, dropped, left {grown_threads} more threads"
    assert grown_rss < 64 << 20, f"1000 streams that staged a copy, dropped, grew the process by {grown_rss >> 20} MiB"
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-90")
def test_a_buffer_alternated_between_streams_keeps_bounded_bookkeeping(device, stream, kernels):
    """LIFE-90: a backend orders a buffer's free after the work of every stream that used it, so it keeps a
    fence of each stream that gave the buffer up, and must drop those that completed. After 32 alternations of a
    buffer between two streams behind running work (every fence then pending), then 20,000 more with the work done
    (what a driver sets up once is not counted: wgpu on the H100 grows by 12.9 MiB once, in its first 10,000),
    40,000 alternations (a 4-byte fill on each stream, both synchronized every 1,000) grow the process by less than
    4 MiB, and the buffer holds the last fills. A backend that prunes its fences only while it holds fewer than it
    keeps (CUDA's FENCES_KEPT, with the comparison inverted) keeps every fence from the ninth on: an event each."""
    other = device.create_stream()
    with device.alloc(8) as buf:
        work = RunningWork(device, stream, kernels, seconds=0.3)
        work.enqueue(stream)
        for i in range(32):
            (other if i % 2 else stream).fill(buf, i + 1, offset=4 * (i % 2), nbytes=4)
        stream.synchronize()
        other.synchronize()
        work.check(stream)

        def alternate(count: int) -> None:
            for i in range(count):
                stream.fill(buf, i & 0xFF, offset=0, nbytes=4)
                other.fill(buf, ~i & 0xFF, offset=4, nbytes=4)
                if i % 1000 == 999:
                    stream.synchronize()
                    other.synchronize()
            stream.synchronize()
            other.synchronize()
            gc.collect()

        batch = 10_000
        done, grown = resident_growth(alternate, batch, 40_000, seconds=30)
        got = read(stream, buf, np.uint32).tolist()
        work.free()
    assert grown < 4 << 20, (
        f"{done:,} alternations of a buffer between two streams (after 32 behind running work) grew the process by "
        f"{grown / 2**20:.1f} MiB")
    last = batch - 1
    assert got == [(last & 0xFF) * 0x01010101, (~last & 0xFF) * 0x01010101], f"the last fills: {[hex(v) for v in got]}"
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-89")
def test_large_copies_leave_no_threads_behind(device, stream, kernels):
    """A backend may copy large host arrays with threads of its own (the compiled CUDA path fills its staging
    ring with copier threads; hostcopy's pool): threads made once and reused, never one more a copy. A copier
    start that counts a thread only when its creation failed makes an uncounted, never-ending thread each copy."""
    size = 16 << 20
    host = np.resize(np.arange(251, dtype=np.uint8), size)
    with device.alloc(size) as buf:
        for _ in range(10):  # the copy threads a backend makes once are not counted
            stream.copy_htod(buf, host)
        stream.synchronize()
        threads = _thread_count()
        for _ in range(100):
            stream.copy_htod(buf, host)
        stream.synchronize()
        grown = _thread_count() - threads
        np.testing.assert_array_equal(read(stream, buf), host)
    assert grown < 8, f"100 copy_htod of {size >> 20} MiB of pageable memory left {grown} more threads"
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-65")
def test_streams_dropped_after_work_queued_behind_running_work_are_released(device, stream, kernels):
    """Work recorded behind running work may be left for a background submitter (Vulkan's flusher submits a
    burst's open batch once it is due): the streams it was handed must be let go once nothing of theirs is
    pending, or every such stream, dropped, keeps its driver resources (a command pool, a semaphore) for good."""
    work = RunningWork(device, stream, kernels, seconds=0.02)
    gone = []
    with device.alloc(4096) as buf:
        for i in range(8):
            s = device.create_stream()
            work.enqueue(s)
            for k in range(4):  # queued behind the running work, back to back
                s.fill(buf, i, offset=1024 * k, nbytes=1024)
            s.synchronize()
            gone.append(weakref.ref(s))
            del s
        np.testing.assert_array_equal(read(stream, buf), np.full(4096, 7, np.uint8))
    work.check(stream)
    deadline = time.monotonic() + 10
    while any(ref() is not None for ref in gone) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    held = sum(ref() is not None for ref in gone)
    assert not held, f"{held} of {len(gone)} streams synchronized and dropped are still alive 10 s later"
    work.free()
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-11")
def test_a_stream_dropped_with_copies_queued_still_runs_them(device, stream, kernels):
    """copy_htod may stage its data in memory the backend reuses (CUDA's pinned ring, fenced per piece on the
    copy's stream): a stream dropped while such copies are queued behind running work must leave them to
    land, and the staging they hold must be neither reused under them nor fenced on a stream that is gone,
    however much is staged on other streams after."""
    doomed = device.create_stream()
    work = RunningWork(device, doomed, kernels)
    sizes = [4096, 300 << 10, 5 << 20]
    hosts = [random_bytes(n, seed=i) for i, n in enumerate(sizes)]
    bufs = [device.alloc(n) for n in sizes]
    scratch = device.alloc(4 << 20)
    try:
        work.enqueue(doomed)
        for buf, host in zip(bufs, hosts):
            doomed.copy_htod(buf, host)
        # the buffers' last use moves to `stream`, ordered after the copies, so nothing holds the dropped stream
        stream.wait(doomed.record())
        outs = [np.zeros(n, np.uint8) for n in sizes]
        for out, buf in zip(outs, bufs):
            stream.copy_dtoh(out, buf)
        stream.fill(work.buf, 0, nbytes=4)  # the work's buffer too (the work wrote it with the same values)
        del doomed
        gc.collect()
        chunk = random_bytes(4 << 20, seed=99)
        for i in range(12):  # 48 MiB staged on another stream: more than any staging ring a backend keeps
            chunk[0] = i
            stream.copy_htod(scratch, chunk)
        device.synchronize()
        for n, out, host in zip(sizes, outs, hosts):
            assert (out == host).all(), f"a {n}-byte copy_htod of a dropped stream did not land"
        assert (read(stream, scratch) == chunk).all(), "the copies staged after the drop did not land"
        got = read(stream, work.buf, np.uint32)
        assert (got[1:] == lcg(np.arange(1, work.n), work.iters)).all(), "the dropped stream's work did not run"
    finally:
        work.free()
        for buf in bufs + [scratch]:
            buf.free()
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-20")
def test_objects_dropped_unclosed_are_released_without_an_error(device, kernels, target, monkeypatch):
    """A release that raises in a finalizer is reported nowhere but ``sys.unraisablehook`` (or, in a library
    thread, ``threading.excepthook``), and what it should have given back is lost: a leak no other test sees."""
    raised = unreported_errors(monkeypatch)
    timing = device.supports("events.timing")
    for _ in range(3):
        kernel = target.compile_kernel(device, "fill_u32")  # a module of its own, never closed
        stream = device.create_stream()
        buf = device.alloc(4096)
        stream.launch(kernel, 16, 64, (buf, np.uint32(7), np.uint32(1024)))
        events = [stream.record(timing=timing) for _ in range(2)]
        if timing:
            events[0].elapsed_ms(events[1])
        stream.synchronize()
        del kernel, stream, buf, events
        gc.collect()
    device.synchronize()  # where a backend runs the releases the collector queued
    device.alloc(4096).free()
    gc.collect()
    assert not raised, f"releasing objects dropped unclosed raised: {raised[:3]}"
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-30")
def test_modules_dropped_unclosed_are_released_quietly(device, stream, kernels, target, monkeypatch):
    """A Module collected without close() is released by a finalizer of the backend's: one set up wrongly fails
    where nobody can see it (an exception in a finalizer or weakref callback only reaches sys.unraisablehook),
    and the driver's module is never given back. Modules compiled, used and dropped unclosed leave nothing
    unraisable behind, each collected, and the device still works."""
    lost = unreported_errors(monkeypatch)
    with device.alloc(64) as x, device.alloc(64) as y:
        gone = []
        for i in range(8):
            saxpy = target.compile_kernel(device, "saxpy")  # a module of its own each time
            if i % 2:
                stream.launch(saxpy, 1, 16, (x, y, np.float32(1), np.uint32(16)))
            gone.append(weakref.ref(saxpy.module))
            del saxpy
        stream.synchronize()
        gc.collect()
        device.synchronize()
        gc.collect()
    assert not lost, f"dropping modules lost {len(lost)} exception(s) in finalizers: {lost[0]}"
    held = sum(ref() is not None for ref in gone)
    assert not held, f"{held} of {len(gone)} modules dropped unclosed are still alive after a collection"
    assert_device_works(device, kernels)


#: touch_big(out): reads the last word of a module-scope array of BYTES bytes into out, then writes it
PTX_BIG_VARIABLE = """.version 7.0
.target sm_70
.address_size 64

.global .align 4 .b8 big[BYTES];

.visible .entry touch_big(.param .u64 touch_big_param_0)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [touch_big_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u64 %rd3, big;
    add.s64 %rd4, %rd3, LAST;
    ld.global.u32 %r1, [%rd4];
    st.global.u32 [%rd2], %r1;
    mov.u32 %r2, 1234567;
    st.global.u32 [%rd4], %r2;
    ret;
}
"""


def _big_variable_modules(device, require) -> tuple[str, int]:
    """PTX_BIG_VARIABLE with an eighth of the device's memory (1 GiB at most), and how many of its modules
    together need more than the device holds; the test skips without PTX or a reported memory size."""
    require("lang.ptx")
    memory = device.info.memory
    if not memory:
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a device that reports its memory")
    size = min(1 << 30, memory // 8) // 4 * 4
    return PTX_BIG_VARIABLE.replace("BYTES", str(size)).replace("LAST", str(size - 4)), memory // size + 2


@pytest.mark.clause("LIFE-66")
def test_closing_a_module_gives_back_its_variables_memory(device, stream, kernels, require):
    """A module's `.global` (`__device__`) variables live in device memory from its load to its unload: a
    backend that never unloads closed modules, or a driver that keeps a variable past its module's unload,
    leaks that memory with every module a program compiles and closes (a JIT that builds kernels as it goes)."""
    source, count = _big_variable_modules(device, require)
    with device.alloc(4) as out:
        for i in range(count):
            with device.compile(source, "ptx") as module:
                stream.launch(module.kernel("touch_big"), 1, 1, (out,))
                assert read(stream, out, np.uint32)[0] == 0, f"module {i}: its variable did not start zeroed"


@pytest.mark.clause("LIFE-98")
def test_a_module_dropped_unclosed_gives_back_its_variables_memory(device, stream, kernels, require):
    """LIFE-66 for modules the program drops without closing them: a backend that may not unload a module from its
    finalizer (CUDA: the finalizer may run on any thread, inside any call) keeps it for a later unload, and must
    do that unload, or every module compiled and dropped keeps its variables' memory for the device's life."""
    source, count = _big_variable_modules(device, require)
    with device.alloc(4) as out:
        for i in range(count):
            module = device.compile(source, "ptx")
            stream.launch(module.kernel("touch_big"), 1, 1, (out,))
            assert read(stream, out, np.uint32)[0] == 0, f"module {i}: its variable did not start zeroed"
            del module
            gc.collect()
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-96")
def test_a_module_that_fails_to_load_keeps_no_memory(device, stream, kernels, require):
    """LIFE-66 for a load that fails: a driver that places a module's `.global` variables as it reads them and
    then meets an error further on must give them back with the rest of the failed module; a JIT that retries
    bad source (a tuner trying variants) otherwise loses the variables' memory with each try."""
    source, count = _big_variable_modules(device, require)
    broken = source.replace("    ret;\n", "    not_an_instruction.u32 %r1, %r2;\n    ret;\n")
    for _ in range(count):
        with pytest.raises(ia.CompileError):
            device.compile(broken, "ptx")
    with device.alloc(4) as out, device.compile(source, "ptx") as module:
        stream.launch(module.kernel("touch_big"), 1, 1, (out,))
        assert read(stream, out, np.uint32)[0] == 0, "a module loaded after the failed loads: its variable is not zeroed"
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-95")
def test_closing_a_device_unloads_the_modules_left_open(device, kernels, require):
    """A module left open when its Device closes is the close's to unload: while another Device holds the
    driver's context (the tests' device, on the same index), nothing else ever will, and its `.global`
    variables keep their device memory. The Modules are kept, so no finalizer unloads them first."""
    source, count = _big_variable_modules(device, require)
    kept = []
    for i in range(count):
        other = get_backend(device.info.backend).open_device(device.info.index)
        try:
            stream = other.create_stream()
            module = other.compile(source, "ptx")
            with other.alloc(4) as out:
                stream.launch(module.kernel("touch_big"), 1, 1, (out,))
                assert read(stream, out, np.uint32)[0] == 0, f"module {i}: its variable did not start zeroed"
            kept.append(module)
        finally:
            other.close()
    for module in kept:
        module.close()  # a quiet no-op after the close (LIFE-67)
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-67")
def test_freeing_after_the_device_closed_is_quiet(device, kernels, target):
    """A program's cleanup often runs after its device's: ``free()`` of the buffers and ``close()`` of the modules
    then have nothing left to give back (closing the device released them), and must not call into the closed
    device (Vulkan: destroying a VkBuffer or freeing memory of a destroyed VkDevice)."""
    other = get_backend(device.info.backend).open_device(device.info.index)
    stream = other.create_stream()
    bufs = [other.alloc(n) for n in (4096, 40 << 20)]  # one sub-allocated, one its own allocation (Vulkan)
    for buf in bufs:
        stream.fill(buf, 7)
    module = target.compile_kernel(other, "saxpy").module
    target.compile_kernel(other, "add_one")  # dropped unclosed, with a buffer dropped unfreed: their releases are
    other.alloc(4096)  # queued by their finalizers and come due in the close itself
    gc.collect()
    stream.synchronize()
    other.close()
    for buf in bufs:
        buf.free()
        buf.free()
        assert buf.freed
    module.close()
    assert module.closed
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-70")
def test_dropped_events_give_their_driver_resources_back(device, stream, kernels):
    """Each event holds driver objects (a CUevent, a fence or sync, a timestamp query) until it is dropped: a
    backend that never releases them leaks with every record. Timed events where the device has them (they
    hold the most), dropped in thousands, synchronized every 1,000; at most 200,000 or 10 s of them (a CUevent
    the fake libcuda never gets back costs it ~200 bytes: 30,000 of them stay under the bound)."""
    timing = device.supports("events.timing")

    def record_and_drop(count: int) -> None:
        for _ in range(count):
            stream.record(timing=timing)
        stream.synchronize()
        gc.collect()

    recorded, grown = resident_growth(record_and_drop, 1000, 200_000)
    assert grown < 16 << 20, f"{recorded} events recorded and dropped left {grown / 2**20:.1f} MiB more resident memory"
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-71")
def test_a_closed_module_keeps_none_of_its_launches_arguments_alive(device, stream, kernels, target):
    """close() gives back what a module holds for its launches (pipelines, argument bindings, a remembered last
    launch), even while the caller still holds the Module and its Kernel: buffers last launched with it, then
    dropped unclosed, are collected. A module that keeps them pins their device memory for as long as anyone
    holds the module."""
    saxpy = target.compile_kernel(device, "saxpy")
    module = saxpy.module
    x, y = device.alloc(64), device.alloc(64)
    for _ in range(2):  # the second launch with the very same arguments, which a backend may remember
        stream.launch(saxpy, 1, 16, (x, y, np.float32(2), np.uint32(16)))
    stream.synchronize()
    module.close()
    gone = [weakref.ref(x), weakref.ref(y)]
    del x, y
    gc.collect()
    device.synchronize()
    gc.collect()
    held = sum(ref() is not None for ref in gone)
    assert not held, f"{held} of 2 buffers last launched with a closed module are still alive after a collection"
    assert module.closed and saxpy.module is module
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-72")
def test_a_buffer_handed_between_two_streams_keeps_bounded_bookkeeping(device, stream, kernels):
    """A producer and a consumer on two streams hand one buffer back and forth: each hand-over may record a fence
    for the buffer's eventual free (CUDA: an event on the stream that used it before), and the fences already
    passed must be let go. A backend that keeps them (or gives one back to its spare list at every check while
    also keeping it) grows with every hand-over, quadratically in the worst case, and frees the buffer after
    thousands of waits. 4,000 hand-overs (fills of its first word, alternately on two streams, each stream
    waiting for an event the other recorded after its fill), after 200 not counted, grow the process by less
    than 8 MiB; the last fill is what the buffer holds."""
    other = device.create_stream()
    with device.alloc(4096) as buf:

        def hand_over(start: int, count: int) -> None:
            for i in range(start, start + count):  # each stream waits for the other's last fill, then fills
                now, before = (other, stream) if i % 2 else (stream, other)
                now.wait(before.record())
                now.fill(buf, i & 0xFF, nbytes=4)
            other.synchronize()
            stream.synchronize()

        hand_over(0, 200)
        gc.collect()
        before = rss_bytes()
        hand_over(200, 4000)
        gc.collect()
        grown = rss_bytes() - before
        last = (200 + 4000 - 1) & 0xFF
        assert (read(stream, buf, np.uint8)[:4] == last).all(), "the last hand-over's fill is not what the buffer holds"
    assert grown < 8 << 20, f"4,000 hand-overs of one buffer between two streams grew the process by {grown >> 20} MiB"


def _alive_kinds(watched: list[tuple[str, weakref.ref]]) -> list[str]:
    """The kinds in ``watched`` whose object is still alive after collections (the device synchronized between)."""
    return sorted({kind for kind, ref in watched if ref() is not None})


@pytest.mark.clause("LIFE-73")
def test_objects_used_and_dropped_are_collected(device, stream, kernels, target):
    """What the library hands out and the caller drops after using it the way a program does must not be kept
    by a registry, a cache, a callback list or a finalizer that holds it (the CUDA device kept every unclosed
    Graph, GRAPH-12): buffers a kernel and a prepared plan launched with, dropped while the caller still holds
    the module, its kernel and the plan; then a created stream that ran work, events recorded on it (waited by
    another stream, synchronized; timed ones and elapsed_ms where the device has them), a module whose kernel was
    launched, another whose kernel was only launched through a prepared plan, a MemPool and the pooled buffer a
    launch used (returned, and another dropped unfreed); last, a Device opened on the same index, closed and dropped
    with its two buffers (one freed, one not: each buffer names its device until it is collected). LaunchPlan and
    PooledBuffer take no weak reference: one kept alive keeps its kernel's module or its pool alive, which is what
    is watched for them."""
    watched: list[tuple[str, weakref.ref]] = []

    def watch(kind: str, obj: object) -> None:
        watched.append((kind, weakref.ref(obj)))

    def collect() -> list[str]:
        gc.collect()
        device.synchronize()
        gc.collect()
        return _alive_kinds(watched)

    s = device.create_stream()
    saxpy = target.compile_kernel(device, "saxpy")  # launched directly
    planned = target.compile_kernel(device, "saxpy")  # a module of its own, launched only through a plan
    plan = planned.prepare(1, 16)
    x, y, px, py = (device.alloc(64) for _ in range(4))
    for b in (x, y, px, py):
        s.fill(b, 0)
    for _ in range(2):  # twice with the same arguments, which a backend may remember
        s.launch(saxpy, 1, 16, (x, y, np.float32(2), np.uint32(16)))
        plan(s, px, py, np.float32(2), np.uint32(16))
    s.synchronize()
    for kind, b in (("a buffer launched with", x), ("a buffer launched with", y),
                    ("a buffer a prepared plan launched with", px), ("a buffer a prepared plan launched with", py)):
        watch(kind, b)
    del x, y, px, py, b
    held = collect()
    assert not held, (f"not collected once dropped, the module, kernel and plan still held: {', '.join(held)}")

    pool = ia.MemPool(device, s)
    pooled, unfreed = pool.alloc(64), pool.alloc(64)
    s.fill(pooled, 0)
    s.fill(unfreed, 0)
    s.launch(saxpy, 1, 16, (pooled, unfreed, np.float32(1), np.uint32(16)))
    plan(s, pooled, unfreed, np.float32(1), np.uint32(16))
    event = s.record()
    stream.wait(event)
    event.synchronize()
    stream.synchronize()
    watch("an Event recorded, waited and synchronized", event)
    if device.supports("events.timing"):
        start = s.record(timing=True)
        s.fill(pooled, 1)
        end = s.record(timing=True)
        end.synchronize()
        start.elapsed_ms(end)
        watch("a timing Event", start)
        watch("a timing Event", end)
        del start, end
    pooled.free()
    s.synchronize()
    device.synchronize()
    watch("a created Stream that ran work", s)
    watch("a Kernel launched", saxpy)
    watch("a Module whose kernel was launched", saxpy.module)
    watch("a Kernel launched through a prepared plan (or the plan)", planned)
    watch("a Module launched through a prepared plan (or the plan)", planned.module)
    watch("a MemPool (or a PooledBuffer of it) used by launches", pool)
    del s, saxpy, planned, plan, event, pooled, unfreed, pool
    held = collect()
    assert not held, f"not collected once dropped: {', '.join(held)}"

    other = get_backend(device.info.backend).open_device(device.info.index)
    freed, unfreed = other.alloc(64), other.alloc(64)
    for b in (freed, unfreed):
        other.default_stream.fill(b, 0)
    other.synchronize()
    freed.free()
    other.close()
    watch("a closed Device whose buffers were dropped (one freed, one not)", other)
    del other, freed, unfreed, b
    held = collect()
    assert not held, f"not collected once dropped: {', '.join(held)}"
    assert_device_works(device, kernels)


#: What each resident-memory child below starts with: its imports, ``rss()`` (the process's resident bytes), the
#: target named by argv[1] and ``_open`` for its device
GROWTH_CHILD_PRELUDE = """
import gc, json, sys, time
import numpy as np
from ironaccel.backends import get as get_backend
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
def rss():
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * 4096
target = get(sys.argv[1])
"""

#: glibc's mmap threshold held fixed in those children: glibc raises it (up to 32 MiB) each time a large block is
#: freed, after which blocks of that size stay in its arenas once freed, and how many stay depends on the order in
#: which a driver's threads free them, so on a loaded host PoCL's process grew by 80-160 MiB over the same churn
#: either way. Held at 1 MiB, every block of a buffer's size goes back to the system when freed (0 MiB on PoCL,
#: loaded or not); memory a backend still holds stays resident, so a leak shows as before.
FIXED_MMAP_THRESHOLD = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}


def _child_growth(script: str, target, *args: int) -> int:
    """The resident-memory growth in bytes that ``script`` (after GROWTH_CHILD_PRELUDE) prints as its last line,
    run in a child process on ``target`` with ``args`` and FIXED_MMAP_THRESHOLD (a fresh process: what earlier
    tests left in the allocators hides a leak or shows one that is not there)."""
    return child_json(target, GROWTH_CHILD_PRELUDE + script, *map(str, args), timeout=600,
                      env=FIXED_MMAP_THRESHOLD)["grown"]


#: LIFE-74's, LIFE-84's and KERNEL-152's churn in a child process (a fresh allocator: what a first try freed would
#: otherwise hide what a re-run pins): buffers of argv's size, each filled, launched with add_one (compiled in argv's
#: number of modules, used in turn; 0: unlaunched; with argv's beside 1: saxpy, its x a buffer kept throughout) and
#: freed; prints the process's growth
FREED_AFTER_LAUNCH_CHILD = """
size, rounds, touched, kernels, beside = map(int, sys.argv[2:7])
device = _open(target)
stream = device.create_stream()
kept = device.alloc(4096)
stream.fill(kept, 0)
def args(buf):
    return (kept, buf, np.float32(1), np.uint32(64)) if beside else (buf, np.uint32(64))
launched = [target.compile_kernel(device, "saxpy" if beside else "add_one") for _ in range(max(kernels, 1))]
warm = device.alloc(4096)  # a driver may build a kernel at its first launch (PoCL): not counted
stream.fill(warm, 0)
for kernel in launched:
    stream.launch(kernel, 1, 64, args(warm))
device.synchronize()
before = rss()
for i in range(rounds):
    buf = device.alloc(size)
    stream.fill(buf, 0, nbytes=touched)
    if kernels:
        stream.launch(launched[i % kernels], 1, 64, args(buf))
    buf.free()
    if i % 4 == 3:
        stream.synchronize()
device.synchronize()
print(json.dumps({"grown": rss() - before}))
"""


@pytest.mark.clause("LIFE-74")
def test_freed_buffers_a_kernel_launched_with_give_their_memory_back(device, target):
    """A backend may cache what it works out for a launch (bind groups, descriptor sets) keyed by the buffers it
    binds; such a cache must let go of a buffer once it is freed. One that keeps it pins the freed buffer's
    memory for as long as the entry lives: with a cache of 16 launches a kernel, 16 freed buffers' memory. In a
    child process, buffers of memory_churn's size, each launched with (`add_one` on its first words) and freed,
    together several times what the device holds: no OutOfMemory; on a CPU driver the process grows by at most
    four buffers more than in a child that frees the same buffers unlaunched (FIXED_MMAP_THRESHOLD: without it
    PoCL's process kept 80-160 MiB of freed buffers either way)."""
    _freed_after_launch(device, target, kernels=1)


def _freed_after_launch(device, target, kernels: int, beside: bool = False) -> None:
    """LIFE-74's, LIFE-84's and KERNEL-152's churn: memory_churn's buffers, each launched with one of ``kernels``
    add_one kernels in turn (``beside``: saxpy, beside a buffer kept throughout) and freed, in a child process (no
    OutOfMemory); on a CPU driver the child grows by at most four buffers more than a child that frees the same
    buffers unlaunched."""
    size, rounds, touched = memory_churn(device, target)

    grown = _child_growth(FREED_AFTER_LAUNCH_CHILD, target, size, rounds, touched, kernels, int(beside))
    if target.memory_kind != "device":
        unlaunched = _child_growth(FREED_AFTER_LAUNCH_CHILD, target, size, rounds, touched, 0, 0)
        assert grown - unlaunched < 4 * size, f"{rounds} freed {size >> 20} MiB buffers that {kernels} kernel(s) " \
            f"were launched with (in turn) grew the process by {grown >> 20} MiB, " \
            f"{(grown - unlaunched) >> 20} MiB more than unlaunched"


#: LIFE-84's kernels: more than LIFE-74's bound of four buffers, so one pinned buffer a kernel is seen
KERNELS_LAUNCHED_IN_TURN = 8


@pytest.mark.clause("LIFE-84")
def test_a_freed_buffer_a_kernel_last_launched_with_gives_its_memory_back(device, target):
    """A backend may remember a kernel's last launch to repeat it cheaply (WebGPU: its dispatch, whose bind group
    binds the buffers); a freed buffer must go from that too, or every kernel pins the last buffer it ran on for as
    long as it lives. LIFE-74's one kernel pins one buffer, which its bound of four cannot tell from an allocator's
    slack: here 8 kernels (add_one compiled 8 times) take the freed buffers in turn."""
    _freed_after_launch(device, target, kernels=KERNELS_LAUNCHED_IN_TURN)


@pytest.mark.clause("KERNEL-152")
def test_a_freed_buffer_a_kernel_launched_beside_a_kept_one_gives_its_memory_back(device, target):
    """LIFE-74 for a kernel's other buffers: LIFE-74's churn, each buffer launched with `saxpy` as its y beside
    one x buffer kept for the whole churn. A backend that caches a launch's bindings under every buffer they bind
    must forget the entry under each of them when one is freed; one that forgets it only under the freed buffer
    leaves an entry a launch under the kept buffer, each holding a freed buffer's driver object, and with it
    (WebGPU releases, not destroys, a freed buffer) its memory, for as long as the kept buffer lives."""
    _freed_after_launch(device, target, kernels=1, beside=True)


#: LIFE-75's and LIFE-76's devices in a child process (in the suite's process LIFE-76 came out flaky on llvmpipe
#: and passing on wgpu-native's known leak): a Device kept open as the tests' is, then Devices on its index opened,
#: used by argv's number of streams (each a pageable copy_htod of 64 KiB, argv's rounds of them; with 0 streams: a
#: stream, a fill read back) and closed, 3 not counted, then argv's count; prints the process's growth
DEVICES_OPENED_AND_CLOSED_CHILD = """
streams, rounds, devices = map(int, sys.argv[2:5])
kept = _open(target)
data = np.random.default_rng(75).integers(0, 256, 64 << 10, dtype=np.uint8)
def open_use_close():
    other = get_backend(kept.info.backend).open_device(kept.info.index)
    if streams:
        used = [other.create_stream() for _ in range(streams)]
        buf = other.alloc(data.nbytes)
        for _ in range(rounds):
            for s in used:
                s.copy_htod(buf, data)
        other.synchronize()
        want = data
    else:
        used = [other.create_stream()]
        buf = other.alloc(4096)
        used[0].fill(buf, 0x76)
        want = np.full(4096, 0x76, np.uint8)
    got = np.zeros_like(want)
    used[-1].copy_dtoh(got, buf)
    used[-1].synchronize()
    other.close()
    assert (got == want).all(), "the device's last copy or fill did not arrive"
for _ in range(3):  # what the first devices set up once (caches, the driver's own pools) is not counted
    open_use_close()
gc.collect()
before = rss()
for _ in range(devices):
    open_use_close()
gc.collect()
print(json.dumps({"grown": rss() - before}))
"""




@pytest.mark.clause("LIFE-75")
def test_a_closed_device_gives_back_what_its_copies_made(device, target):
    """Closing a device gives back the driver objects its work made, also those a staged copy path keeps for
    reuse (CUDA: the staging ring's events, one per stream that copied from a segment): in a child process,
    Devices opened on the index of one kept open (so the driver's context outlives them, as another library's use
    keeps a CUDA primary context), given small pageable copy_htods from 64 streams (9 rounds of 64 KiB each:
    36 MiB, more than a staging ring holds), synchronized and closed, 24 of them after 3 not counted, leave the
    process with at most 1 MiB and 16 KiB a device more resident memory than before them (a ring that keeps its
    512 events at close: ~140 KiB a device on the fake libcuda). Only on CUDA, whose staged copies this is about:
    a device's own open and close is LIFE-76's, with a wider bound (an OpenGL device on llvmpipe leaves ~0.06 MiB,
    more than this bound's 16 KiB a device)."""
    if device.info.backend != "cuda":
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a CUDA device (its staging ring's events)")
    grown = _child_growth(DEVICES_OPENED_AND_CLOSED_CHILD, target, 64, 9, 24)  # streams, rounds, devices
    assert grown <= (1 << 20) + 24 * (16 << 10), (
        f"24 devices opened, given copies from 64 streams and closed left {grown / 2**20:.2f} MiB more resident "
        f"memory")


@pytest.mark.clause("LIFE-76")
def test_a_closed_device_gives_back_what_opening_it_took(target):
    """Closing a device gives back its context and what the driver keeps for it: in a child process, Devices
    opened on the index of one kept open, each given a stream, a buffer and a fill read back, and closed, 20 of
    them after 3 not counted, leave the process with at most 2 MiB and 256 KiB a device more resident memory than
    before them. The OpenGL backend's GL thread ended without eglReleaseThread, which kept its context alive:
    ~2.4 MiB a closed device on llvmpipe (a program that opens a device per job, or a test suite, runs out of
    memory)."""
    grown = _child_growth(DEVICES_OPENED_AND_CLOSED_CHILD, target, 0, 0, 20)  # streams, rounds, devices
    assert grown <= (2 << 20) + 20 * (256 << 10), (
        f"20 devices opened, used and closed left {grown / 2**20:.2f} MiB more resident memory")


#: LIFE-86's devices in a child process: a Device kept open as the tests' is, then Devices on its index opened, each
#: given two buffers of argv's size filled whole and read back, one freed and one still held at close() (dropped
#: after it), 2 not counted, then argv's count; prints the process's growth
BUFFERS_AT_CLOSE_CHILD = """
size, devices = map(int, sys.argv[2:4])
kept = _open(target)
back = np.zeros(size, np.uint8)
def open_use_close():
    other = get_backend(kept.info.backend).open_device(kept.info.index)
    stream = other.create_stream()
    freed, held = other.alloc(size), other.alloc(size)
    for value, buf in ((0x86, freed), (0x68, held)):
        back[:] = 0
        stream.fill(buf, value)
        stream.copy_dtoh(back, buf)
        stream.synchronize()
        assert (back == value).all(), "a fill did not arrive"
    freed.free()
    other.close()
for _ in range(2):  # what the first devices set up once (caches, the driver's own pools) is not counted
    open_use_close()
gc.collect()
before = rss()
for _ in range(devices):
    open_use_close()
gc.collect()
print(json.dumps({"grown": rss() - before}))
"""


@pytest.mark.clause("LIFE-86")
def test_a_closed_device_gives_back_the_memory_of_its_buffers(target):
    """LIFE-86: close() gives back the device memory it holds for buffers, freed (kept for reuse) or not. In a
    child process, 8 Devices each filling two 40 MiB buffers whole (read back: staged where memory is not
    mapped), freeing one and holding the other at close(), grow the process by less than one such buffer (with
    FIXED_MMAP_THRESHOLD a driver that mallocs device memory returns it to the system at once). On a driver whose
    device memory is host memory (lavapipe, SwiftShader) memory left at the device's destruction is leaked
    there (vkDestroyDevice frees no VkDeviceMemory), which DEV-83 sees only where the device's memory runs out."""
    size = 40 << 20
    grown = _child_growth(BUFFERS_AT_CLOSE_CHILD, target, size, 8)
    assert grown < size, (
        f"8 devices, each closed after filling two {size >> 20} MiB buffers (one freed, one held), left "
        f"{grown / 2**20:.1f} MiB more resident memory")


#: LIFE-87's uploads in a child process: on a fresh stream of a Device, argv's count of copy_htod of argv's size into
#: one buffer, the host array refilled after each returns (COPY-4) and 10 ms apart, nothing waited for (4 first on
#: another stream, then synchronized, not counted); prints the process's growth after the uploads, checked once waited for
UPLOADS_ONLY_CHILD = """
size, uploads = map(int, sys.argv[2:4])
device = _open(target)
buf = device.alloc(size)
host = np.empty(size, np.uint8)
def upload(stream, value):
    host[:] = value
    stream.copy_htod(buf, host)
first = device.create_stream()
for i in range(4):  # what the first copies set up once (staging, the driver's pools) is not counted
    upload(first, i)
first.synchronize()
stream = device.create_stream()  # fresh: it has never waited for (nor recycled) anything
before = rss()
for i in range(uploads):
    upload(stream, 0x80 + i)
    time.sleep(0.01)
grown = rss() - before
back = np.zeros(size, np.uint8)
stream.copy_dtoh(back, buf)
stream.synchronize()
assert (back == 0x80 + uploads - 1).all(), "the last upload did not land"
print(json.dumps({"grown": grown}))
"""


@pytest.mark.clause("LIFE-87")
def test_a_program_that_only_uploads_stays_bounded(target):
    """LIFE-87: a backend may stage a copy_htod (copy it into memory of its own so the host array can be reused at
    once) and give the staging back when the copy is done; a program that only uploads, never waiting, must get
    it back too. In a child process, 48 copy_htod of 8 MiB on a fresh stream, 10 ms apart, grow the process by
    less than 64 MiB (8 of them). Vulkan: a stream whose free command buffers ran out recycles none of its
    batches until 64 are in flight (every batch's staging held); WebGPU: ``write_buffer`` staging waits in
    wgpu's pending writes for the next queue submission, which a program that only uploads never makes."""
    size, uploads = 8 << 20, 48
    grown = _child_growth(UPLOADS_ONLY_CHILD, target, size, uploads)
    assert grown < 8 * size, (
        f"{uploads} copy_htod of {size >> 20} MiB on one stream, nothing waited for, grew the process by "
        f"{grown / 2**20:.1f} MiB")


#: LIFE-88's readbacks in a child process: a buffer of argv's size (128 MiB, or the largest power of two a buffer
#: may be) holding a pattern; argv's total of copy_dtoh of all of it queued at once on one stream into two host
#: arrays, then synchronized, twice (the host arrays reset between); after each burst a 4 KiB readback,
#: synchronized (a backend may give memory back lazily, by its next operation); prints the process's growth
#: from before the first burst to after each, and its peak over both (VmHWM, reset before the first burst)
READBACK_BURSTS_CHILD = """
size, total = map(int, sys.argv[2:4])
device = _open(target)
size = min(size, 1 << (device.info.limits.max_alloc.bit_length() - 1))
stream = device.create_stream()
buf = device.alloc(size)
pattern = np.resize(np.arange(251, dtype=np.uint8), size)
stream.copy_htod(buf, pattern)
hosts = [np.full(size, 0xFF, np.uint8) for _ in range(2)]
small = np.empty(4096, np.uint8)
stream.copy_dtoh(small, buf)  # what a first readback sets up once (the driver's pools) is not counted
stream.synchronize()
def burst():
    for h in hosts:
        h[:] = 0xFF
    for i in range(total // size):
        stream.copy_dtoh(hosts[i % len(hosts)], buf)
    stream.synchronize()
    stream.copy_dtoh(small, buf)
    stream.synchronize()
    assert all(np.array_equal(h, pattern) for h in hosts), "a readback did not land"
    return rss() - before
with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
    clear.write("5")  # the peak resident memory (VmHWM) starts again from now
before = rss()
first = burst()
second = burst()
with open("/proc/self/status", encoding="ascii") as status:
    peak = next(int(line.split()[1]) << 10 for line in status if line.startswith("VmHWM:")) - before
print(json.dumps({"grown": [first, second, peak]}))
"""


#: LIFE-88's bound on the growth at any moment of the bursts (the process's peak): seven eighths of a burst. A
#: bounded staging path holds its bound and one copy beyond it (measured: OpenGL's and WebGPU's 256 MiB, the staged
#: Vulkan one's 384 MiB, 128 MiB or less on the others); one whose bound counts only what it caches, not what is
#: pending, stages the whole burst at once (512 MiB).
PEAK_READBACK_BOUND = 448 << 20


@pytest.mark.clause("LIFE-88")
def test_a_burst_of_readbacks_leaves_a_bounded_cache(target):
    """LIFE-88: a backend may read back through staging memory of its own (host memory a copy_dtoh lands in
    before it is copied into the caller's array; host memory on a GPU too, where device memory is not resident)
    and keep some of it for the next readbacks, but a bounded amount: not as much as a burst the program once
    queued. In a child process, two bursts of 512 MiB of copy_dtoh queued at once (4 of 128 MiB), each
    synchronized, grow the process by less than 384 MiB (three quarters of a burst). The OpenGL backend keeps up
    to 256 MiB of staging buffers and the staged Vulkan one 256 MiB of its staging pool, 128 MiB below the bound
    (measured: 128 MiB on both, 0.3 MiB or less on the others, which stage nothing that outlives the copy). A cache
    whose bound check lets buffers in past the bound (384 MiB after the first burst, 512 MiB after the second) or
    that has no bound (all 512 MiB) crosses it.
    And while the bursts run, the process's peak stays below PEAK_READBACK_BOUND: staging for the readbacks still
    pending is bounded too (WebGPU held a mappable buffer for every pending copy_dtoh, 512 MiB at the peak)."""
    size, total = 128 << 20, 512 << 20
    first, second, peak = _child_growth(READBACK_BURSTS_CHILD, target, size, total)
    bound = 384 << 20
    assert max(first, second) < bound, (
        f"bursts of {total >> 20} MiB of copy_dtoh queued at once on one stream, each synchronized, grew the "
        f"process by {first / 2**20:.1f} MiB after the first and {second / 2**20:.1f} MiB after the second")
    assert peak < PEAK_READBACK_BOUND, (
        f"bursts of {total >> 20} MiB of copy_dtoh queued at once on one stream held up to {peak / 2**20:.1f} MiB "
        f"more resident memory while they ran: the staging of a whole burst at once")


def _opencl_queues(device):
    """On an OpenCL device, a count that each command queue of the device's context adds one to: the context's
    reference count (CL_CONTEXT_REFERENCE_COUNT, which OpenCL offers for finding leaks; PoCL's queues retain
    their context). None elsewhere."""
    if device.info.backend != "opencl":
        return None
    import pyopencl as cl

    context = device.native.context
    return lambda: int(context.get_info(cl.context_info.REFERENCE_COUNT))


@pytest.mark.clause("LIFE-77")
def test_dropped_streams_are_given_back_without_a_device_synchronize(device, kernels):
    """A backend may keep a dropped stream's queue while its work runs (OpenCL: Device.synchronize waits for
    it) and let it go later; a program that only ever synchronizes its streams must still get the idle ones
    back. After a burst of 100 streams dropped with their work not waited for, 2,000 streams each created, given
    a fill, synchronized and dropped, with no Device.synchronize until the end: the process grows by less than
    16 MiB, and on OpenCL (where the 100 streams raised the context's reference count by at least 100: their
    queues retain it) fewer than 1,000 more queues hold the context than before the burst. A backend that lets
    idle queues go only below a count the burst passed, or only at Device.synchronize, keeps every one."""
    queues = _opencl_queues(device)
    with device.alloc(4096) as buf:
        device.synchronize()
        gc.collect()
        before = queues() if queues else 0
        burst = [device.create_stream() for _ in range(100)]
        counted = queues is not None and queues() - before >= 100
        for i, s in enumerate(burst):
            s.fill(buf, 1 + i % 8, offset=8 * i, nbytes=8)
        del burst, s  # dropped with their fills not waited for
        gc.collect()

        def use_a_stream(value: int) -> None:
            s = device.create_stream()
            s.fill(buf, value, offset=1024, nbytes=8)
            s.synchronize()

        for i in range(200):  # what the first streams set up once is not counted
            use_a_stream(i & 0xFF)
        gc.collect()
        rss = rss_bytes()
        for i in range(2000):
            use_a_stream(i & 0xFF)
        gc.collect()
        grown = rss_bytes() - rss
        held = queues() - before if counted else None
        device.synchronize()
        got = read(device.create_stream(), buf)
    assert held is None or held < 1000, (
        f"after 100 streams dropped with work queued, 2,000 streams created, synchronized and dropped without a "
        f"Device.synchronize leave {held} more queues holding the OpenCL context than before them")
    assert grown < 16 << 20, (
        f"2,000 streams created, synchronized and dropped without a Device.synchronize (after 100 dropped with "
        f"work queued) grew the process by {grown >> 20} MiB")
    np.testing.assert_array_equal(got[:800], np.repeat(1 + np.arange(100) % 8, 8).astype(np.uint8),
                                  "the fills of the streams dropped with their work queued did not land")
    assert (got[1024:1032] == 1999 & 0xFF).all(), "the last stream's fill did not land"
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-81")
def test_objects_dropped_while_an_exception_propagates_leave_it_unchanged(device, stream, kernels):
    """An object made in an expression that raises is dropped while the interpreter unwinds, with the exception
    pending: a finalizer written in C (CUDA's buffers and events) runs then, and one that sets the pending
    exception aside and puts it back with its parts swapped hands the caller the exception's class, its traceback
    or another error instead. Each kind, dropped so three times, leaves the ZeroDivisionError as it was raised."""
    zero = 0
    try:
        1 // zero
    except ZeroDivisionError as exc:
        expected = str(exc)
    pool = ia.MemPool(device, stream)
    makers = {"a Buffer never freed": lambda: device.alloc(64), "an Event": stream.record,
              "a created Stream": device.create_stream, "a PooledBuffer never freed": lambda: pool.alloc(64)}
    if device.supports("events.timing"):
        makers["a timed Event"] = lambda: stream.record(timing=True)
    for what, make in makers.items():
        for _ in range(3):
            caught: object = None
            try:
                (make(), 1 // zero)  # the new object is dropped as the ZeroDivisionError unwinds this expression
            except BaseException as exc:  # noqa: BLE001 - whatever arrives is what is checked
                caught = exc
            assert type(caught) is ZeroDivisionError and str(caught) == expected, (
                f"{what} dropped while a ZeroDivisionError propagated: the caller caught {caught!r}")
            assert caught.__traceback__ is not None and caught.__traceback__.tb_frame is sys._getframe(), (
                f"{what} dropped while a ZeroDivisionError propagated: its traceback was replaced")
    del caught  # its traceback holds this frame
    stream.synchronize()
    pool.close()
    assert_device_works(device, kernels)


#: LIFE-82: events each Device of a cycle records and waits for before it is closed
CLOSED_EVENTS = 256


#: LIFE-82/83: the cycles of a batch, and what the median pair of batches (one kind each) may differ by beyond 2 KiB a
#: cycle: what a process's resident memory does by itself from one batch to the next
PAIR_CYCLES, PAIR_SLACK = 10, 200 << 10


def _paired_close_growth(device, use) -> tuple[int, int]:
    """LIFE-82's measure: Devices opened on the index the tests' device keeps open (so the driver's context
    outlives each), in pairs of batches of ten cycles, one batch that calls ``use(other)`` before
    ``other.close()`` (what it returns is dropped only after the close) and one that does not, ordered A B, B A,
    A B, ... (a swing that alternates batch by batch then falls on both kinds alike), for 20 pairs or 10 s (after
    20 cycles with ``use`` not counted). Returns the pairs counted and the median of their differences (growth
    with ``use`` minus growth without): the pairing takes out what an open and close costs by itself, and the
    median takes out the odd batch in which the process's memory swings by itself (tens of MB on llvmpipe in a
    loaded run), while a leak of ``use`` shows in every pair."""
    backend = get_backend(device.info.backend)

    def cycles(n: int, used: bool) -> int:
        gc.collect()
        before = rss_bytes()
        for _ in range(n):
            other = backend.open_device(device.info.index)
            kept = None
            try:
                if used:
                    kept = use(other)
            finally:
                other.close()
            del kept
        gc.collect()
        return rss_bytes() - before

    cycles(20, True)  # what the first devices set up once is not counted
    differences: list[int] = []
    deadline = time.monotonic() + 10
    while len(differences) < 20 and time.monotonic() < deadline:
        order = (True, False) if len(differences) % 2 == 0 else (False, True)
        grown = {used: cycles(PAIR_CYCLES, used) for used in order}
        differences.append(grown[True] - grown[False])
    return len(differences), int(statistics.median(differences))


@pytest.mark.clause("LIFE-82")
def test_a_closed_device_gives_back_the_events_it_kept(device, kernels):
    """A backend may keep the native events (fences) of dropped Events for reuse, but close() must give them
    back: the driver's context outlives the Device while anyone else holds it (the tests' device here), and
    what is left in it stays for as long. Devices opened on the index the tests' device keeps open, in
    pairs of batches of cycles that record and wait for 256 events or none before close(), grow the process by
    less than 200 KiB plus 2 KiB a cycle more with the events than without, at the median pair (the pairing takes
    out what an open and close costs by itself). A backend that keeps its spare events past close() leaks them
    all each cycle."""

    def record_events(other) -> None:
        s = other.create_stream()
        recorded = [s.record() for _ in range(CLOSED_EVENTS)]
        s.synchronize()
        del recorded, s

    pairs, more = _paired_close_growth(device, record_events)
    assert more < PAIR_SLACK + 2048 * PAIR_CYCLES, (
        f"{PAIR_CYCLES} devices each closed after {CLOSED_EVENTS} events grew the process by {more} bytes more than "
        f"{PAIR_CYCLES} closed after none, at the median of {pairs} pairs: the events outlive their Device")
    assert_device_works(device, kernels)


#: LIFE-83: graphs each Device of a cycle captures and leaves open at its close, and the fills each captures
CLOSED_GRAPHS, GRAPH_FILLS = 16, 64


@pytest.mark.clause("LIFE-83")
def test_a_closed_device_gives_back_the_graphs_left_open(device, kernels, require):
    """close() ends every graph of the Device, and so must give back their executables (CUDA: the CUgraphExecs
    it holds until a graph is closed): the driver's context outlives the Device while anyone else holds it (the
    tests' device here), and an executable left in it stays for as long. LIFE-82's paired cycles, with 16
    graphs of 64 fills each captured, launched once and left open at close() (dropped after it), grow the
    process by less than 200 KiB plus 2 KiB a cycle more than cycles without, at the median pair. A close that
    forgets them leaks
    every graph of every cycle (the fake libcuda: a copy of each graph's nodes)."""
    require("graphs")

    def capture_graphs(other) -> list:
        s = other.create_stream()
        buf = other.alloc(4 * GRAPH_FILLS)
        graphs = []
        for _ in range(CLOSED_GRAPHS):
            with s.capture() as graph:
                for i in range(GRAPH_FILLS):
                    s.fill(buf, i, offset=4 * i, nbytes=4)
            graph.launch(s)
            graphs.append(graph)
        s.synchronize()
        return graphs  # open at close(), dropped after it

    pairs, more = _paired_close_growth(device, capture_graphs)
    assert more < PAIR_SLACK + 2048 * PAIR_CYCLES, (
        f"{PAIR_CYCLES} devices each closed with {CLOSED_GRAPHS} graphs open grew the process by {more} bytes more "
        f"than {PAIR_CYCLES} closed with none, at the median of {pairs} pairs: the graphs' executables outlive "
        "their Device")
    assert_device_works(device, kernels)


@pytest.mark.clause("LIFE-91")
def test_a_buffer_collected_with_the_stream_it_was_last_used_on(device, stream, kernels, target, monkeypatch):
    """A buffer keeps the stream it was last used on until it is freed, so the two are collected together only
    in a reference cycle, and the collector then finalizes them in an order of its own: the stream may be
    destroyed before the buffer's free runs, which must then not be ordered on it, nor come before the work the
    stream still ran."""
    raised = unreported_errors(monkeypatch)

    def dropped_in_a_cycle(stream_first: bool, size: int, use) -> None:
        """A new stream and a new buffer of ``size`` (made in the order ``stream_first`` says), ``use(stream,
        buf)``, then both dropped in a reference cycle and collected."""
        if stream_first:
            user = device.create_stream()
            buf = device.alloc(size)
        else:
            buf = device.alloc(size)
            user = device.create_stream()
        use(user, buf)
        cycle: list = [user, buf]
        cycle.append(cycle)
        del user, buf, cycle
        gc.collect()

    work = RunningWork(device, stream, kernels)
    try:
        for stream_first in (True, False):  # dropped while a kernel on the stream still writes the buffer
            dropped_in_a_cycle(stream_first, 4 * work.n, work.enqueue)
            others = [device.alloc(4 * work.n) for _ in range(4)]
            for i, b in enumerate(others):
                stream.fill(b, 0x60 + i)
            device.synchronize()
            for i, b in enumerate(others):
                assert (read(stream, b) == 0x60 + i).all(), (
                    "memory of a buffer collected with its stream was reused while a kernel on that stream wrote it")
                b.free()
    finally:
        work.free()
    size, rounds, touched = memory_churn(device, target)  # more than the device holds, each dropped in a cycle
    before = rss_bytes()
    for i in range(rounds):
        dropped_in_a_cycle(i % 2 == 0, size, lambda user, buf: user.fill(buf, i & 0xFF, nbytes=touched))
        if i % 4 == 3:
            device.synchronize()
            gc.collect()
    device.synchronize()
    gc.collect()
    device.synchronize()
    assert not raised, f"collecting buffers with their streams raised: {raised[:3]}"
    if target.memory_kind != "device":
        grown = rss_bytes() - before
        assert grown < rounds * size // 3, (
            f"{rounds} {size >> 20} MiB buffers collected with their streams grew the process by {grown >> 20} MiB")
    assert_device_works(device, kernels)


#: LIFE-92's rounds in a child process (a launch through a stale binding writes freed memory, which may crash the
#: process): buffers of argv's size, each launched with fill_u32 (its round's value on its first 1,024 words), read
#: back, freed and the device synchronized, then as many bytes of host memory allocated and filled where the freed
#: buffer's memory may come back; prints the rounds whose buffer read back another value and the host arrays the
#: launches wrote. The rounds run on a second device of the target's index opened without validation where the
#: backend has it (the simulated Vulkan targets turn the layer on, and it wraps every handle in one of its own,
#: never reused, which hides the driver's reuse of a destroyed buffer's handle).
REUSED_HANDLE_CHILD = """
import json, sys
import numpy as np
from ironaccel.backends import get as get_backend
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
target = get(sys.argv[1])
size, rounds = map(int, sys.argv[2:4])
kept = _open(target)
backend = get_backend(kept.info.backend)
device = backend.open_device(kept.info.index, **({"validation": False} if "validation" in backend.options else {}))
stream = device.create_stream()
kernel = target.compile_kernel(device, "fill_u32")
wrong, hosts = [], []
for i in range(1, rounds + 1):
    buf = device.alloc(size)
    stream.launch(kernel, 16, 64, (buf, np.uint32(i), np.uint32(1024)))
    got = np.zeros(1024, np.uint32)
    stream.copy_dtoh(got, buf)
    stream.synchronize()
    if not (got == i).all():
        wrong.append(i)
    buf.free()
    device.synchronize()
    hosts.append(np.full(size // 4, 0xEEEEEEEE, np.uint32))
written = sum(int((h[:1024] != 0xEEEEEEEE).any()) for h in hosts)
print(json.dumps({"wrong": wrong, "written": written}))
"""


@pytest.mark.clause("LIFE-92")
def test_a_launch_never_binds_a_freed_buffer_whose_handle_came_back(target):
    """A backend may cache what it works out for a launch (Vulkan: descriptor sets, WebGPU: bind groups) keyed
    by the driver's handles of the buffers it binds. A driver hands a destroyed buffer's handle out again, to the
    next buffer made: an entry the free did not drop then binds the destroyed buffer's memory for the new one, so
    the launch writes memory that now belongs to something else (here, the host arrays made after each free)
    and the new buffer never gets the writes. 12 rounds of a 40 MiB buffer (large enough for a memory block of
    its own: Vulkan's dedicated allocations start past 32 MiB), in a child process."""
    size = 40 << 20
    got = child_json(target, REUSED_HANDLE_CHILD, str(size), "12", timeout=300)
    assert not got["wrong"] and not got["written"], (
        f"a buffer launched with fill_u32 after freed buffers of its size did not read back its own value in "
        f"rounds {got['wrong']}, and {got['written']} host arrays made after a free were written: a launch bound "
        f"a freed buffer whose handle came back")


#: LIFE-93's and LIFE-94's rounds in a child process (a fresh one: no other test's threads allocating beside it):
#: the heap in use (glibc's mallinfo2, summed over every arena: bytes allocated and not freed, mapped blocks
#: included) after each round of argv's operation, once its work is complete and collected; null where the C
#: library has no mallinfo2 (glibc before 2.33, musl). Unlike the resident memory, it does not move with what the
#: allocator keeps of freed memory or with a fragmented heap, so a leak of a few hundred bytes an operation shows.
HEAP_ROUNDS_CHILD = """
import ctypes
import ironaccel as ia
from ironaccel.cts.testing.work import RunningWork
class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
if not hasattr(libc, "mallinfo2"):
    print(json.dumps(None))
    sys.exit(0)
libc.mallinfo2.restype = Mallinfo2
def heap():
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd
operation, each, rounds = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
device = _open(target)
stream = device.create_stream()
def kernels(name):
    return target.compile_kernel(device, name)
buf = device.alloc(4096)
host = np.zeros(1024, np.uint32)
add_one = kernels("add_one")
def timed_out_waits():
    work.enqueue(stream)
    event = stream.record(timing=device.supports("events.timing"))
    timed_out = 0
    for i in range(each):
        for wait in (device.synchronize, stream.synchronize, event.synchronize):
            try:
                wait(timeout=1e-6 if i % 2 else 1e-4)
            except ia.Timeout:
                timed_out += 1
    return timed_out
def streams():
    for i in range(each):
        s = device.create_stream()
        s.fill(buf, i & 0xFF, nbytes=4)
        s.record()
        s.synchronize()
def events():
    again = stream.record()
    for i in range(each):
        stream.record(timing=bool(i % 2) and device.supports("events.timing"))
        stream.record(event=again)
def buffers():
    for i in range(each):
        b = device.alloc(4096)
        stream.fill(b, i & 0xFF)
        stream.synchronize()
        b.free()
def launches():
    plan = add_one.prepare(1, 64)
    for i in range(each):
        stream.launch(add_one, 1, 64, (buf, np.uint32(64)))
        plan(stream, buf, np.uint32(64))
def copies():
    for i in range(each):
        stream.copy_htod(buf, host)
        stream.copy_dtod(buf, buf, 2048, dst_offset=2048)
        stream.copy_dtoh(host, buf)
def bindings():
    for i, x in enumerate(bound):
        for y in bound:
            if y is not x:  # WebGPU refuses one buffer bound both read-only and read-write
                stream.launch(saxpy, 1, 64, (y, x, np.float32(2.0), np.uint32(64)))
        if i % 3 == 2:
            stream.synchronize()  # every 87 launches: what is in flight, however far behind the driver, stays small
def modules():
    for i in range(each):
        kernels("reduce_sum").module.close()
def graphs():
    for i in range(each):
        with stream.capture() as graph:
            stream.launch(add_one, 1, 64, (buf, np.uint32(64)))
        graph.launch(stream)
        graph.close()
if operation == "timed_out_waits":
    work = RunningWork(device, stream, kernels, 3.0)
if operation == "bindings":  # every ordered pair of two of n buffers, n(n - 1) = each: each launch binds its own pair
    saxpy, bound = kernels("saxpy"), [device.alloc(256) for _ in range((int((4 * each + 1) ** 0.5) + 1) // 2)]
step = globals()[operation]
done, heaps = [], []
for r in range(rounds):
    done.append(step())
    device.synchronize()
    gc.collect()
    heaps.append(heap())
print(json.dumps({"done": done, "heaps": heaps}))
"""


def _heap_rounds(target, operation: str, each: int, rounds: int = 4) -> tuple[list, int]:
    """(what each round returned, the heap's growth in bytes from after the second round to after the last): the
    first two set up what the operation keeps once (pools, caches, a driver's lazily made objects: PoCL's program
    builds grow the heap by 560 KiB in the second round of 100 compiles, and by 20 KiB a round after)."""
    got = child_json(target, GROWTH_CHILD_PRELUDE + HEAP_ROUNDS_CHILD, operation, str(each), str(rounds), timeout=300)
    if got is None:
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a C library that counts its heap in use (glibc's mallinfo2)")
    return got["done"], got["heaps"][-1] - got["heaps"][1]


#: LIFE-93's and LIFE-94's bound on the heap's growth over two rounds: measured 70 KiB or less on every simulated
#: target (a round's growth swings by a few KiB: Python's own objects; PoCL's compiles add 20 KiB a round). A leak
#: of 100 bytes an operation crosses it in 2,600 operations, one of 450 bytes in 600.
HEAP_ROUNDS_BOUND = 256 << 10


@pytest.mark.clause("LIFE-93")
def test_waits_that_time_out_keep_nothing(target):
    """A wait with a timeout may make a native object to wait on (an EGL sync, a fence) and give it back when
    the wait ends, including when the timeout ends it. Four rounds, each behind 3 s of running work: 1,500
    each of Device.synchronize, Stream.synchronize and Event.synchronize (a timed event where the target has
    events.timing) with a timeout of 1 µs or 0.1 ms, most of them timing out, then the device synchronized. After
    the first two rounds, the next two grow the heap in use by less than HEAP_ROUNDS_BOUND. An OpenGL device whose
    timed-out synchronize never deleted its EGL sync kept 320 bytes a wait: 1 MiB over the two rounds."""
    each = 1500
    timed_out, grown = _heap_rounds(target, "timed_out_waits", each)
    assert min(timed_out) >= each, (
        f"of {3 * each} waits with a timeout of at most 0.1 ms behind 3 s of running work, only {timed_out} "
        f"timed out a round: the work ended too soon to tell")
    assert grown < HEAP_ROUNDS_BOUND, (
        f"two rounds of {3 * each} waits that timed out grew the heap in use by {grown / 1024:.0f} KiB")


#: LIFE-94's operations (HEAP_ROUNDS_CHILD's functions) and how many of each make a round.
EVERYDAY_OPERATIONS = {"streams": 300, "events": 2000, "buffers": 300, "launches": 1000, "bindings": 870, "copies": 500,
                       "modules": 100, "graphs": 300}


@pytest.mark.clause("LIFE-94")
@pytest.mark.parametrize("operation", EVERYDAY_OPERATIONS)
def test_everyday_operations_keep_nothing(target, device, operation):
    """What an operation makes in the driver or the backend (a stream's queue and semaphore, an event's fence or
    query, a buffer's memory and bindings, a launch's descriptors or bind group, a copy's staging, a graph's
    executable, a module's code) is given back once the operation's work is done and its objects dropped or
    closed; "bindings" launches saxpy over every ordered pair of two of 30 buffers, more distinct bindings than a
    backend's cache of descriptor sets keeps, so the sets it retires must go back to the pools. Four rounds of
    each operation, the device synchronized after each: after the first two, the next two grow the heap in use by
    less than HEAP_ROUNDS_BOUND (a leak of 450 bytes an operation crosses it, of 1.3 KiB a module)."""
    if operation == "graphs" and not device.supports("graphs"):
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}graphs")
    each = EVERYDAY_OPERATIONS[operation]
    _, grown = _heap_rounds(target, operation, each)
    assert grown < HEAP_ROUNDS_BOUND, (
        f"two rounds of {each} {operation} (each round's work completed and collected) grew the heap in use by "
        f"{grown / 1024:.0f} KiB")
