"""MemPool against a model: a hypothesis state machine (one thread) and a threaded stress test.

The model's ground truth is the in-memory device: every block the pool holds is a buffer the device has
handed out and not got back, so "cached" is whatever the device holds that no live PooledBuffer uses. The
pool's stats and cap are checked against that, never against the pool's own bookkeeping.
"""

from __future__ import annotations

import os
import queue
import random
import threading
from collections import Counter

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, precondition, rule

from ironaccel.errors import InvalidArgument, UseAfterFree
from ironaccel.pool import MemPool, bucket_size
from ironaccel.cts.testing.memdevice import MemDevice

KiB, MiB = 1 << 10, 1 << 20
MAX_ALLOC = 3 * MiB  # so that requests of 2..3 MiB exercise "the bucket is more than the device allows"

sizes = st.one_of(
    st.integers(1, 4 * KiB),
    st.sampled_from([KiB, 2 * KiB, 64 * KiB, MiB]),
    st.integers(4 * KiB, 80 * KiB),
    st.integers(MiB, MAX_ALLOC),
)


class Live:
    """A live PooledBuffer with the data the model wrote into it."""

    def __init__(self, buf, nbytes: int, data: np.ndarray):
        self.buf, self.nbytes, self.data = buf, nbytes, data
        self.block = buf._backing("model")

    @property
    def block_size(self) -> int:
        size = bucket_size(self.nbytes)
        return self.nbytes if size is None or size > MAX_ALLOC else size


class PoolMachine(RuleBasedStateMachine):
    live = Bundle("live")

    def __init__(self):
        super().__init__()
        self.device = MemDevice(256 * MiB, max_alloc=MAX_ALLOC)
        self.stream = self.device.create_stream()
        self.other = self.device.create_stream()
        self.freed: list = []
        self.allocs = 0
        self.live_now: dict[int, Live] = {}
        self.peak = 0
        self.rng = np.random.default_rng(0)
        self.pool: MemPool | None = None

    @initialize(cap=st.sampled_from([0, 4 * KiB, 64 * KiB, 8 * MiB, 1 << 30]), per_bucket=st.sampled_from([0, 1, 3, 64]))
    def make_pool(self, cap, per_bucket):
        self.pool = MemPool(self.device, self.stream, max_cached_bytes=cap, max_per_bucket=per_bucket)

    # -- the model ----------------------------------------------------------------------------------------------

    def cached_blocks(self) -> list:
        """Device buffers the pool holds that no live PooledBuffer uses."""
        in_use = {id(v.block) for v in self.live_now.values()}
        return [b for b in self.device.buffers if id(b) not in in_use]

    def cached_bytes(self) -> int:
        return sum(b.nbytes for b in self.cached_blocks())

    def payload(self, n: int) -> np.ndarray:
        data = self.rng.integers(0, 256, min(n, 256), dtype=np.uint8)
        data[0] = 0xA5
        return data

    def check_data(self, item: Live) -> None:
        out = np.zeros(item.data.size, np.uint8)
        self.stream.copy_dtoh(out, item.buf)
        self.stream.synchronize()
        self.other.synchronize()  # work still pending on the other stream must not have been needed
        self.stream.copy_dtoh(out, item.buf)
        self.stream.synchronize()
        assert np.array_equal(out, item.data), "a live block's data changed under its owner"

    # -- rules --------------------------------------------------------------------------------------------------

    @rule(target=live, nbytes=sizes)
    def alloc(self, nbytes):
        before = self.pool.stats()
        cached_here = [b for b in self.cached_blocks() if b.nbytes == (bucket_size(nbytes) or -1)]
        buf = self.pool.alloc(nbytes)
        self.allocs += 1
        item = Live(buf, nbytes, self.payload(nbytes))
        assert buf.nbytes == nbytes and item.block.nbytes >= nbytes
        assert item.block.nbytes == item.block_size, "block not in the bucket the request belongs to"
        assert id(item.block) not in {id(v.block) for v in self.live_now.values()}, "block handed out twice"
        hit = self.pool.stats().hits - before.hits
        assert hit == (1 if cached_here and item.block_size == bucket_size(nbytes) else 0)
        self.stream.copy_htod(buf, item.data)
        self.live_now[id(item)] = item
        return item

    @rule(item=consumes(live))
    def free(self, item):
        self.check_data(item)
        room = self.cached_bytes() + item.block_size <= self.pool.max_cached_bytes and sum(
            b.nbytes == item.block_size for b in self.cached_blocks()) < self.pool.max_per_bucket
        cacheable = room and item.block_size == bucket_size(item.nbytes)
        del self.live_now[id(item)]
        item.buf.free()
        self.freed.append(item.buf)
        assert (item.block in self.device.buffers) == cacheable

    @rule(item=consumes(live))
    def free_after_use_on_another_stream(self, item):
        self.check_data(item)
        self.other.fill(item.buf, 0xEE, nbytes=min(item.nbytes, 64))  # pending until something waits for it
        del self.live_now[id(item)]
        item.buf.free(stream=self.other)
        self.freed.append(item.buf)

    @precondition(lambda self: self.freed)
    @rule(data=st.data())
    def double_free(self, data):
        buf = data.draw(st.sampled_from(self.freed), label="freed buffer")
        with pytest.raises(InvalidArgument, match="already freed"):
            buf.free()

    @precondition(lambda self: self.freed)
    @rule(data=st.data())
    def use_after_free(self, data):
        buf = data.draw(st.sampled_from(self.freed), label="freed buffer")
        with pytest.raises(UseAfterFree, match="pooled buffer"):
            self.stream.fill(buf, 1)

    @rule(keep=st.sampled_from([0, KiB, 10 * KiB, MiB]))
    def trim(self, keep):
        self.pool.trim(keep)
        assert self.cached_bytes() <= keep

    # -- invariants ---------------------------------------------------------------------------------------------

    @invariant()
    def stats_match_the_model(self):
        if self.pool is None:
            return
        s = self.pool.stats()
        self.peak = max(self.peak, self.device.bytes_in_use)
        assert s.bytes_live == sum(v.block_size for v in self.live_now.values())
        assert s.bytes_cached == self.cached_bytes()
        assert s.hits + s.misses == self.allocs
        assert s.misses == self.device.alloc_count
        assert s.high_water_bytes == self.peak

    @invariant()
    def cap_is_respected(self):
        if self.pool is None:
            return
        assert self.cached_bytes() <= self.pool.max_cached_bytes
        per_bucket = Counter(b.nbytes for b in self.cached_blocks())
        assert all(n <= self.pool.max_per_bucket for n in per_bucket.values())
        assert all(size == bucket_size(size) for size in per_bucket), "a bypassing block was cached"

    def teardown(self):
        if self.pool is not None:
            for item in list(self.live_now.values()):
                self.check_data(item)
                item.buf.free()
            self.live_now.clear()
            self.pool.close()
            assert self.device.bytes_in_use == 0 and not self.device.buffers
            assert self.pool.stats().bytes_cached == 0 and self.pool.stats().bytes_live == 0
        assert self.device.diagnostics() == []
        self.device.close()


TestPoolMachine = PoolMachine.TestCase
# A run of the machine costs milliseconds: more examples than the profile's default, its other settings kept.
TestPoolMachine.settings = settings(max_examples=150, stateful_step_count=50)


# -- threads -------------------------------------------------------------------------------------------------------

# Per thread: the 100000 by default (about 10 s on 2 busy cores); lower it for a quick run.
STRESS_OPS = int(os.environ.get("IRONACCEL_POOL_STRESS_OPS", "100000"))
STRESS_THREADS = 8
STRESS_SIZES = [100, 1000, KiB, 1500, 3000, 5000, 16 * KiB, 70 * KiB, 2 * MiB]
STRESS_WEIGHTS = [10, 10, 20, 10, 10, 5, 5, 2, 0.05]


def test_threads_allocating_and_freeing_each_others_buffers():
    """8 threads x STRESS_OPS alloc+free of mixed sizes; a third of the frees happen on another thread.

    Every live block is registered under its owner; a second owner of the same block is a double hand-out.
    A small cap keeps the shared tier and the device busy, and a watcher checks the cap while it runs."""
    device = MemDevice(1 << 30)
    cap = 512 * KiB
    pool = MemPool(device, device.default_stream, max_cached_bytes=cap, max_per_bucket=16)
    owners: dict[int, object] = {}
    handoff: queue.SimpleQueue = queue.SimpleQueue()
    errors: list[str] = []
    stop = threading.Event()

    def claim(buf) -> None:
        token = object()
        if owners.setdefault(id(buf._backing("stress")), token) is not token:
            errors.append(f"a {buf.nbytes}-byte block was handed out twice")

    def release(buf) -> None:
        del owners[id(buf._backing("stress"))]
        buf.free()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        sizes = rng.choices(STRESS_SIZES, STRESS_WEIGHTS, k=STRESS_OPS)
        held = []
        try:
            for i, nbytes in enumerate(sizes):
                buf = pool.alloc(nbytes)
                claim(buf)
                held.append(buf)
                if i % 3 == 0:
                    handoff.put(held.pop(rng.randrange(len(held))))
                if len(held) > 4:
                    release(held.pop(rng.randrange(len(held))))
                if i % 5 == 0:
                    try:
                        release(handoff.get_nowait())
                    except queue.Empty:
                        pass
            for buf in held:
                release(buf)
        except Exception as exc:  # surfaced by the assertion below, with the thread's error
            errors.append(f"{type(exc).__name__}: {exc}")

    def watch() -> None:
        while not stop.wait(0.01):
            if pool.stats().bytes_cached > cap:
                errors.append("the cap was exceeded")

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(STRESS_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    watcher.join()
    while not handoff.empty():
        release(handoff.get())
    assert errors == []
    assert owners == {}
    stats = pool.stats()
    assert stats.bytes_live == 0 and stats.hits + stats.misses == STRESS_THREADS * STRESS_OPS
    assert stats.misses == device.alloc_count and stats.hits > stats.misses
    assert stats.bytes_cached == device.bytes_in_use <= cap
    pool.close()
    assert device.bytes_in_use == 0 and device.diagnostics() == []
    device.close()


def test_short_lived_threads_leave_nothing_stranded():
    device = MemDevice(64 * MiB)
    pool = MemPool(device, device.default_stream, max_cached_bytes=64 * KiB)

    def burst() -> None:
        bufs = [pool.alloc(KiB) for _ in range(3)]
        for b in bufs:
            b.free()

    for _ in range(200):
        t = threading.Thread(target=burst)
        t.start()
        t.join()
    stats = pool.stats()
    assert stats.bytes_cached_front == 0 and stats.bytes_cached == device.bytes_in_use <= 64 * KiB
    assert stats.hits > 500  # ended threads' blocks were handed to the next threads
    pool.close()
    assert device.bytes_in_use == 0
