"""THREAD: several host threads on one device, each with its own stream, and one MemPool shared by threads."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.backends import get as get_backend
from ironaccel.pool import MemPool

from .helpers import assert_device_works, ceil_div, random_bytes

THREADS = 4


def run_threads(work, count: int = THREADS) -> None:
    """Run ``work(i)`` on ``count`` threads at once; re-raise the first failure."""
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def body(i: int) -> None:
        try:
            start.wait()
            work(i)
        except BaseException as exc:  # the test thread reports it
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
        assert not t.is_alive(), "a thread hung"
    if errors:
        raise errors[0]


@pytest.mark.clause("THREAD-1")
def test_threads_with_their_own_streams(device, kernels):
    n = 4096
    add_one = kernels("add_one")

    def work(i: int) -> None:
        s = device.create_stream()
        with device.alloc(4 * n) as buf:
            for step in range(15):
                data = random_bytes(4 * n, 100 * i + step).view(np.uint32) >> 1
                s.copy_htod(buf, data)
                s.launch(add_one, ceil_div(n, 64), 64, (buf, np.uint32(n)))
                got = np.empty(n, np.uint32)
                s.copy_dtoh(got, buf)
                s.synchronize()
                np.testing.assert_array_equal(got, data + 1, err_msg=f"thread {i}, step {step}")

    run_threads(work)
    assert_device_works(device, kernels)


@pytest.mark.clause("THREAD-1")
def test_threads_reading_back_in_a_loop(device, kernels):
    """Each thread copies back and synchronizes its own stream as fast as it can (a device-wide readback
    list changed without a lock aborts the process here)."""

    def work(i: int) -> None:
        s = device.create_stream()
        with device.alloc(256) as buf:
            s.fill(buf, i + 1)
            for _ in range(100):
                got = np.zeros(256, np.uint8)
                s.copy_dtoh(got, buf)
                s.synchronize()
                assert (got == i + 1).all()

    run_threads(work, 8)
    assert_device_works(device, kernels)


#: COPY-64's sizes where CUDA's staged copies are filled in pieces by copy threads (256 KiB pieces from 64 KiB,
#: threads from 2 MiB, 4 MiB chunks), off by a few bytes
STAGED_IN_PIECES = ((1 << 20) + 3, (2 << 20) + 5, (4 << 20) + 7)


@pytest.mark.clause("THREAD-64")
def test_threads_copying_to_two_devices_at_once(device, kernels):
    """Two Devices of one index (DEV-8) each stage their own large copy_htods, from two host threads each at
    the same time; a backend whose copy threads serve every device (CUDA's compiled staging: one job at a time)
    must not let one device's copy take over the job another device's copy is still filling or sending."""
    second = get_backend(device.info.backend).open_device(device.info.index)
    devices = (device, second)
    deadline = time.monotonic() + 8

    def work(i: int) -> None:
        dev = devices[i % 2]
        s = dev.create_stream()
        with dev.alloc(max(STAGED_IN_PIECES)) as buf:
            for step in range(48):
                if step >= 16 and time.monotonic() > deadline:  # a slow driver: 16 each, as many as fit in 8 s
                    break
                n = STAGED_IN_PIECES[step % len(STAGED_IN_PIECES)]
                data = random_bytes(n, 64 * i + step)
                s.copy_htod(buf, data)
                got = np.zeros(n, np.uint8)
                s.copy_dtoh(got, buf)
                s.synchronize()
                wrong = np.flatnonzero(got != data)
                assert not wrong.size, f"thread {i} (device {i % 2}), copy {step} of {n} bytes: {wrong.size} " \
                                       f"bytes differ, the first at {wrong[0]}"

    try:
        run_threads(work, 4)
    finally:
        second.close()
    assert_device_works(device, kernels)


@pytest.mark.clause("THREAD-2")
def test_one_mempool_shared_by_threads(device, kernels):
    stream = device.create_stream()
    pool = ia.MemPool(device, stream)

    def work(i: int) -> None:
        s = device.create_stream()
        for step in range(40):
            size = 64 << (step % 6)
            buf = pool.alloc(size)
            value = (i * 40 + step) % 251 + 1
            s.fill(buf, value)
            got = np.zeros(size, np.uint8)
            s.copy_dtoh(got, buf)
            s.synchronize()
            assert (got == value).all(), f"thread {i} step {step}: a pooled block was shared while live"
            buf.free(stream=s)

    try:
        run_threads(work)
        stats = pool.stats()
        assert stats.bytes_live == 0
    finally:
        pool.close()
    assert_device_works(device, kernels)


@pytest.mark.clause("THREAD-2")
def test_blocks_cached_by_threads_that_ended_come_back(device, kernels):
    """Blocks a thread freed into its own front cache are the pool's again once the thread ends."""
    pool = ia.MemPool(device, device.create_stream())

    def work(i: int) -> None:
        pool.alloc(4096 << i).free()  # on the pool's stream: into this thread's front cache

    try:
        run_threads(work)
        gc.collect()  # the threads' local storage goes: their front caches return to the pool
        stats = pool.stats()
        expect = sum(4096 << i for i in range(THREADS))
        assert (stats.bytes_live, stats.bytes_cached, stats.misses) == (0, expect, THREADS), stats
        pool.alloc(4096).free()
        assert pool.stats().hits == 1, "a block cached by an ended thread was not reused"
    finally:
        pool.close()


@pytest.mark.clause("POOL-30")
def test_a_living_threads_front_cache_is_its_own(device, stream):
    """A block the main thread freed waits in its own front cache: another thread's request of that bucket
    is a miss that takes a new block (nothing else is cached), never the main thread's block (a front cache
    looked up by the wrong thread hands one thread's blocks to another), and the main thread's next request
    takes its own block back."""
    with MemPool(device, stream) as pool:
        first = pool.alloc(1000)
        mine = first._backing("test")
        first.free()
        again = pool.alloc(1000)  # the main thread's front cache found and remembered
        assert again._backing("test") is mine
        again.free()
        taken: list = []
        worker = threading.Thread(target=lambda: taken.append(pool.alloc(1000)))
        worker.start()
        worker.join()
        assert taken, "the other thread's MemPool.alloc raised"
        assert taken[0]._backing("test") is not mine, "another thread was handed a block of this thread's front cache"
        s = pool.stats()
        assert (s.hits, s.misses) == (1, 2), s
        back = pool.alloc(1000)
        assert back._backing("test") is mine, "the main thread's own cached block did not come back to it"
        back.free()
        taken[0].free()


def _on_a_fresh_thread(what: str, call) -> None:
    """``call()`` as the first call a new thread makes into the library; its failure re-raised, named."""
    errors: list[BaseException] = []

    def body() -> None:
        try:
            call()
        except BaseException as exc:  # the test thread reports it
            errors.append(exc)

    t = threading.Thread(target=body, name=f"fresh: {what}")
    t.start()
    t.join(timeout=300)
    assert not t.is_alive(), f"{what} on a fresh thread hung"
    if errors:
        raise AssertionError(f"{what}, the first call of a fresh thread, raised {errors[0]!r}") from errors[0]


@pytest.mark.clause("THREAD-63")
def test_each_op_works_as_the_first_call_of_a_fresh_thread(device, stream, kernels):
    """Objects made on the test's thread, each op then made by a thread that has called nothing before it: a
    backend whose driver keeps per-thread state (CUDA's current context) must set it up on every path an op
    can take first (a compiled fast path, a plan, a graph replay, a wait), not only where a thread starts."""
    n = 1024
    fill_u32, add_one = kernels("fill_u32"), kernels("add_one")
    big = random_bytes(256 << 10, 63)  # past any one-piece staging
    other = device.create_stream()
    with device.alloc(4 * n) as a, device.alloc(4 * n) as b, device.alloc(big.nbytes) as c:
        for _ in range(2):  # the fast paths warm on this thread first
            stream.launch(fill_u32, ceil_div(n, 128), 128, (a, np.uint32(0), np.uint32(n)))
        plan = add_one.prepare(ceil_div(n, 128), 128)
        plan(stream, a, np.uint32(n))
        graph = None
        if device.supports("graphs"):
            with stream.capture() as graph:
                stream.launch(add_one, ceil_div(n, 128), 128, (a, np.uint32(n)))
        shared = device.alloc(4096)  # used on two streams: its free waits for both
        stream.fill(shared, 1)
        other.fill(shared, 2)
        stream.synchronize()
        want = 1
        back, raw = np.zeros(n, np.uint32), bytearray(4 * n)
        ops = [
            ("Stream.fill", lambda: stream.fill(b, 0)),
            ("Stream.fill of a buffer last used on another stream", lambda: (other.fill(b, 0), other.synchronize())),
            ("Stream.copy_htod", lambda: stream.copy_htod(b, np.full(n, 7, np.uint32))),
            ("Stream.copy_htod_deferred", lambda: stream.copy_htod_deferred(b, np.full(n, 8, np.uint32))),
            ("Stream.copy_htod of 256 KiB", lambda: stream.copy_htod(c, big)),
            ("Stream.copy_htod of 256 KiB of bytes", lambda: stream.copy_htod(c, big.tobytes())),
            ("Stream.launch", lambda: stream.launch(add_one, ceil_div(n, 128), 128, (a, np.uint32(n)))),
            ("Stream.launch on a buffer last used on another stream",
             lambda: (other.launch(add_one, ceil_div(n, 128), 128, (a, np.uint32(n))), other.synchronize())),
            ("a prepared plan", lambda: plan(stream, a, np.uint32(n))),
            ("Stream.copy_dtod", lambda: stream.copy_dtod(b, a, 4 * n)),
            ("Stream.record and Event.synchronize", lambda: stream.record().synchronize()),
            ("Stream.copy_dtoh", lambda: stream.copy_dtoh(back, b)),
            ("Stream.copy_dtoh into a bytearray", lambda: stream.copy_dtoh(raw, b)),
            ("Stream.synchronize", stream.synchronize),
            ("Buffer.free of a buffer used on two streams", shared.free),
            ("Device.alloc and Buffer.free", lambda: device.alloc(4096).free()),
            ("Device.synchronize", device.synchronize),
        ]
        if graph is not None:
            ops.insert(9, ("Graph.launch", lambda: graph.launch(stream)))
        for what, call in ops:
            if what == "Stream.launch on a buffer last used on another stream":
                # streams are not ordered with each other: without this wait (made here, so the fresh thread's
                # first call is still the launch) other's add_one of `a` may run beside stream's, just before
                # it, and one increment of an element is lost
                other.wait(stream.record())
            _on_a_fresh_thread(what, call)
            want += what.startswith("Stream.launch") or what in ("a prepared plan", "Graph.launch")
        np.testing.assert_array_equal(back, np.full(n, want, np.uint32), err_msg="the ops on fresh threads")
        assert bytes(raw) == back.tobytes(), "a copy_dtoh into a bytearray made on a fresh thread"
        got = np.zeros(big.nbytes, np.uint8)
        stream.copy_dtoh(got, c)
        stream.synchronize()
        assert (got == big).all(), "a copy_htod made on a fresh thread did not land"
        if graph is not None:
            graph.close()
    assert_device_works(device, kernels)
