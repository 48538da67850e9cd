"""THREAD: several host threads on one device, each with its own stream, and one MemPool shared by threads."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import ironaccel as ia
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
