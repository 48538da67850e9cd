"""Unit tests of MemPool on the in-memory device: buckets, reuse, tiers, cap, streams, errors."""

from __future__ import annotations

import dataclasses
import gc
import sys
import threading

import numpy as np
import pytest

from ironaccel.api import Buffer
from ironaccel.errors import InvalidArgument, OutOfMemory, UseAfterFree
from ironaccel.pool import BUCKET_SIZES, FRONT_SLOTS, MemPool, PooledBuffer, PoolStats, bucket_size
from ironaccel.cts.testing.memdevice import CATALOGUE, JUNK, MemDevice

KiB, MiB = 1 << 10, 1 << 20


@pytest.fixture
def device():
    dev = MemDevice(64 * MiB)
    yield dev
    assert dev.diagnostics() == []
    dev.close()


@pytest.fixture
def stream(device):
    return device.create_stream()


@pytest.fixture
def pool(device, stream):
    with MemPool(device, stream) as p:
        yield p


def random_bytes(n: int, seed: int = 0) -> np.ndarray:
    data = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
    data[0] = 0x5A  # never all zeros
    return data


def read_back(stream, buf, n: int | None = None) -> np.ndarray:
    out = np.full(buf.nbytes if n is None else n, 0x11, dtype=np.uint8)
    stream.copy_dtoh(out, buf)
    stream.synchronize()
    return out


# -- buckets -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("nbytes", "size"), [
    (1, KiB), (1000, KiB), (KiB, KiB), (KiB + 1, 2 * KiB), (3 * MiB, 4 * MiB), (256 * MiB, 256 * MiB),
    (256 * MiB + 1, None),
])
def test_bucket_size(nbytes, size):
    assert bucket_size(nbytes) == size


def test_buckets_are_the_powers_of_two_from_1_KiB_to_256_MiB():
    assert BUCKET_SIZES[0] == KiB and BUCKET_SIZES[-1] == 256 * MiB
    assert all(b == 2 * a for a, b in zip(BUCKET_SIZES, BUCKET_SIZES[1:]))


def test_alloc_returns_a_buffer_of_the_requested_size_backed_by_its_bucket(pool, device):
    buf = pool.alloc(1000)
    assert isinstance(buf, PooledBuffer) and isinstance(buf, Buffer)
    assert buf.nbytes == 1000 and buf.device is device and not buf.freed
    assert buf._backing("test").nbytes == KiB
    buf.free()
    assert buf.freed


def test_numpy_integer_sizes_are_accepted(pool):
    pool.alloc(np.int64(3000)).free()


def test_requests_above_256_MiB_bypass_the_buckets():
    dev = MemDevice(300 * MiB)
    pool = MemPool(dev, dev.default_stream)
    buf = pool.alloc(256 * MiB + 1)
    assert buf._backing("test").nbytes == 256 * MiB + 1
    buf.free()
    assert dev.bytes_in_use == 0 and pool.stats().bytes_cached == 0
    pool.close()
    dev.close()


def test_a_bucket_bigger_than_max_alloc_is_bypassed_with_the_exact_size():
    dev = MemDevice(64 * MiB, max_alloc=3000)
    pool = MemPool(dev, dev.default_stream)
    buf = pool.alloc(2500)  # its bucket, 4 KiB, is more than the device allocates at once
    assert buf._backing("test").nbytes == 2500
    buf.free()
    assert dev.bytes_in_use == 0
    pool.close()


def test_a_request_above_max_alloc_raises_the_devices_out_of_memory(device, stream):
    pool = MemPool(device, stream)
    cached = pool.alloc(KiB)
    cached.free()
    with pytest.raises(OutOfMemory, match="exceeds max_alloc"):
        pool.alloc(device.info.limits.max_alloc + 1)
    assert pool.stats().bytes_cached == KiB  # no point in dropping the cache for that
    pool.close()


# -- reuse and data --------------------------------------------------------------------------------------------

def test_a_freed_block_is_reused_by_the_next_request_of_its_bucket(pool):
    a = pool.alloc(1500)
    block = a._backing("test")
    a.free()
    b = pool.alloc(2000)
    assert b._backing("test") is block
    c = pool.alloc(1500)
    assert c._backing("test") is not block
    b.free()
    c.free()


def test_buckets_do_not_mix(pool):
    small = pool.alloc(KiB)
    block = small._backing("test")
    small.free()
    big = pool.alloc(KiB + 1)
    assert big._backing("test") is not block and big._backing("test").nbytes == 2 * KiB
    big.free()


def test_a_pooled_buffer_works_with_copies_fills_and_launches(pool, device, stream):
    data = random_bytes(4000)
    with pool.alloc(4000) as buf, pool.alloc(4000) as other:
        stream.copy_htod(buf, data)
        stream.copy_dtod(other, buf, 4000)
        add_one = device.python_module(CATALOGUE).kernel("add_one")
        stream.launch(add_one, 4, 256, [other, np.uint32(1000)])
        stream.fill(buf, 0x7E, offset=10, nbytes=5)
        expected = data.copy()
        expected[10:15] = 0x7E
        assert np.array_equal(read_back(stream, buf, 4000), expected)
        assert np.array_equal(read_back(stream, other, 4000).view(np.uint32), data.view(np.uint32) + 1)
        assert buf.handle is buf._backing("test").handle


def test_a_reused_block_keeps_no_promise_about_its_contents_but_holds_new_data(pool, stream):
    a = pool.alloc(KiB)
    stream.copy_htod(a, random_bytes(KiB, seed=1))
    a.free()
    b = pool.alloc(KiB)
    fresh = random_bytes(KiB, seed=2)
    stream.copy_htod(b, fresh)
    assert np.array_equal(read_back(stream, b), fresh)
    b.free()


def test_copies_are_bounded_by_the_requested_size_not_the_block(pool, stream):
    with pool.alloc(1000) as buf, pytest.raises(InvalidArgument, match="outside the 1000-byte buffer"):
        stream.copy_htod(buf, np.zeros(1024, np.uint8))


# -- errors ----------------------------------------------------------------------------------------------------

def test_double_free_is_an_error(pool):
    buf = pool.alloc(KiB)
    buf.free()
    with pytest.raises(InvalidArgument, match=r"MemPool.free: this 1024-byte pooled buffer was already freed"):
        buf.free()


def test_freeing_inside_a_with_block_makes_its_exit_a_double_free(pool):
    with pytest.raises(InvalidArgument, match="already freed"):
        with pool.alloc(KiB) as buf:
            buf.free()


def test_a_failed_double_free_does_not_hand_the_block_out_twice(pool):
    a = pool.alloc(KiB)
    a.free()
    b = pool.alloc(KiB)
    with pytest.raises(InvalidArgument):
        a.free()
    c = pool.alloc(KiB)
    assert c._backing("test") is not b._backing("test")
    b.free()
    c.free()


def test_using_a_freed_pooled_buffer_is_an_error(pool, stream):
    buf = pool.alloc(1000)
    buf.free()
    with pytest.raises(UseAfterFree, match=r"Stream.copy_htod: a 1000-byte pooled buffer .* was used after it was freed"):
        stream.copy_htod(buf, random_bytes(100))
    with pytest.raises(UseAfterFree, match=r"Buffer.handle: a 1000-byte pooled buffer"):
        _ = buf.handle


@pytest.mark.parametrize(("nbytes", "message"), [
    (0, "nbytes must be >= 1, got 0"),
    (-5, "nbytes must be >= 1, got -5"),
    (1.5, "nbytes must be an integer, got float"),
    (True, "nbytes must be an integer, got bool"),
])
def test_bad_sizes_are_rejected(pool, nbytes, message):
    with pytest.raises(InvalidArgument, match=f"MemPool.alloc: {message}"):
        pool.alloc(nbytes)


def test_constructor_arguments_are_checked(device, stream):
    other = MemDevice(MiB)
    with pytest.raises(InvalidArgument, match="MemPool: device must be a Device, got str"):
        MemPool("mem", stream)
    with pytest.raises(InvalidArgument, match="MemPool: stream must be a Stream of the pool's device"):
        MemPool(device, other.default_stream)
    with pytest.raises(InvalidArgument, match="MemPool: max_cached_bytes must be >= 0, got -1"):
        MemPool(device, stream, max_cached_bytes=-1)
    with pytest.raises(InvalidArgument, match="MemPool: max_per_bucket must be an integer, got float"):
        MemPool(device, stream, max_per_bucket=2.0)
    with pytest.raises(InvalidArgument, match="MemPool.trim: keep_bytes must be >= 0"):
        MemPool(device, stream).trim(-1)
    other_stream = other.default_stream
    other.close()
    with pytest.raises(UseAfterFree, match="MemPool: device mem:0 was used after it was closed"):
        MemPool(other, other_stream)


def test_free_on_a_stream_of_another_device_is_rejected_and_keeps_the_buffer(pool):
    other = MemDevice(MiB)
    buf = pool.alloc(KiB)
    with pytest.raises(InvalidArgument, match="MemPool.free: stream must be a Stream of the pool's device"):
        buf.free(stream=other.default_stream)
    assert not buf.freed
    buf.free()
    other.close()


# -- stats, tiers, cap -----------------------------------------------------------------------------------------

def test_stats_count_hits_misses_live_cached_and_high_water(pool):
    assert pool.stats() == PoolStats(0, 0, 0, 0, 0, 0)
    a, b = pool.alloc(1000), pool.alloc(3000)
    assert pool.stats() == PoolStats(hits=0, misses=2, bytes_live=5 * KiB, bytes_cached_front=0,
                                     bytes_cached_shared=0, high_water_bytes=5 * KiB)
    a.free()
    b.free()
    s = pool.stats()
    assert (s.bytes_live, s.bytes_cached_front, s.bytes_cached, s.high_water_bytes) == (0, 5 * KiB, 5 * KiB, 5 * KiB)
    pool.alloc(500).free()
    assert pool.stats().hits == 1 and pool.stats().misses == 2


def test_stats_are_frozen(pool):
    with pytest.raises(dataclasses.FrozenInstanceError):
        pool.stats().hits = 3  # type: ignore[misc]


def test_a_thread_keeps_a_few_blocks_per_bucket_in_front_and_the_rest_in_the_shared_cache(pool):
    bufs = [pool.alloc(KiB) for _ in range(FRONT_SLOTS + 3)]
    for b in bufs:
        b.free()
    s = pool.stats()
    assert s.bytes_cached_front == FRONT_SLOTS * KiB and s.bytes_cached_shared == 3 * KiB
    again = [pool.alloc(KiB) for _ in range(FRONT_SLOTS + 3)]
    assert pool.stats().hits == FRONT_SLOTS + 3 and pool.stats().misses == FRONT_SLOTS + 3
    for b in again:
        b.free()


def test_blocks_above_1_MiB_are_cached_in_the_shared_tier(pool):
    pool.alloc(2 * MiB).free()
    assert pool.stats().bytes_cached_shared == 2 * MiB and pool.stats().bytes_cached_front == 0


def test_the_byte_cap_counts_every_tier(device, stream):
    pool = MemPool(device, stream, max_cached_bytes=3 * KiB)
    bufs = [pool.alloc(KiB) for _ in range(5)]
    for b in bufs:
        b.free()
    assert pool.stats().bytes_cached == 3 * KiB
    assert device.bytes_in_use == 3 * KiB
    pool.close()


def test_the_block_cap_counts_every_tier(device, stream):
    pool = MemPool(device, stream, max_per_bucket=2)
    bufs = [pool.alloc(KiB) for _ in range(4)] + [pool.alloc(2 * KiB)]
    for b in bufs:
        b.free()
    assert pool.stats().bytes_cached == 2 * KiB + 2 * KiB
    pool.close()


def test_a_zero_cap_caches_nothing(device, stream):
    pool = MemPool(device, stream, max_cached_bytes=0)
    for _ in range(3):
        pool.alloc(KiB).free()
    assert pool.stats() == PoolStats(hits=0, misses=3, bytes_live=0, bytes_cached_front=0,
                                     bytes_cached_shared=0, high_water_bytes=KiB)
    assert device.bytes_in_use == 0
    pool.close()


def test_idle_front_slots_give_way_when_the_cap_is_reached(device, stream):
    pool = MemPool(device, stream, max_cached_bytes=2 * KiB)
    pool.alloc(KiB).free()  # the 1 KiB front slot now holds a reservation
    live = pool.alloc(KiB)  # ... and is empty again
    pool.alloc(2 * KiB).free()  # needs the whole cap: the idle reservation gives way
    assert pool.stats().bytes_cached == 2 * KiB
    live.free()  # no room left: back to the device
    assert pool.stats().bytes_cached == 2 * KiB and device.bytes_in_use == 2 * KiB
    pool.close()


def test_out_of_memory_drops_the_cache_and_retries():
    dev = MemDevice(8 * KiB)
    pool = MemPool(dev, dev.default_stream)
    pool.alloc(4 * KiB).free()
    pool.alloc(KiB).free()
    big = pool.alloc(8 * KiB)  # only fits once the cached 5 KiB are given back
    assert pool.stats().bytes_cached == 0 and pool.stats().bytes_live == 8 * KiB
    with pytest.raises(OutOfMemory, match="MemDevice.alloc failed: out of memory"):
        pool.alloc(KiB)  # nothing cached to give back: the device's error stands
    big.free()
    pool.close()
    dev.close()


# -- trim and close --------------------------------------------------------------------------------------------

def test_trim_gives_back_the_biggest_blocks_first_down_to_keep_bytes(pool, device):
    live = pool.alloc(8 * KiB)
    for size in (KiB, 2 * KiB, 4 * KiB, 2 * MiB):
        pool.alloc(size).free()
    assert pool.trim(keep_bytes=4 * KiB) == 2 * MiB + 4 * KiB
    assert pool.stats().bytes_cached == 3 * KiB
    assert device.bytes_in_use == 3 * KiB + 8 * KiB
    assert pool.trim() == 3 * KiB and pool.stats().bytes_cached == 0
    live.free()
    assert pool.stats().bytes_cached == 8 * KiB  # trim does not stop the pool caching


def test_trim_reaches_other_threads_front_caches(pool, device):
    parked = threading.Event()
    done = threading.Event()

    def worker():
        pool.alloc(KiB).free()
        parked.set()
        done.wait()

    t = threading.Thread(target=worker)
    t.start()
    parked.wait()
    assert pool.stats().bytes_cached_front == KiB
    assert pool.trim() == KiB
    assert device.bytes_in_use == 0
    done.set()
    t.join()


def test_an_ended_threads_front_cache_moves_to_the_shared_cache(pool):
    t = threading.Thread(target=lambda: [b.free() for b in [pool.alloc(KiB), pool.alloc(KiB)]])
    t.start()
    t.join()
    gc.collect()
    s = pool.stats()
    assert (s.bytes_cached_front, s.bytes_cached_shared) == (0, 2 * KiB)
    a, b = pool.alloc(KiB), pool.alloc(KiB)
    assert pool.stats().hits == 2
    a.free()
    b.free()


def test_close_gives_everything_back_and_is_idempotent(device, stream):
    pool = MemPool(device, stream)
    live = pool.alloc(KiB)
    for size in (KiB, 3 * KiB, 2 * MiB):
        pool.alloc(size).free()
    pool.close()
    pool.close()
    assert pool.closed and device.bytes_in_use == KiB
    with pytest.raises(UseAfterFree, match="MemPool.alloc: the MemPool was used after it was closed"):
        pool.alloc(KiB)
    live.free()  # straight back to the device
    assert device.bytes_in_use == 0 and pool.stats().bytes_live == 0


def test_a_pool_outliving_its_device_raises_clearly_and_frees_nothing_on_the_dead_device():
    dev = MemDevice(MiB)
    pool = MemPool(dev, dev.default_stream)
    live = pool.alloc(KiB)
    pool.alloc(KiB).free()
    pool.alloc(4 * MiB // 8).free()
    dev.close()
    with pytest.raises(UseAfterFree, match=r"MemPool.alloc: device mem:0 \(before its MemPool\) was used after it was closed"):
        pool.alloc(KiB)
    with pytest.raises(UseAfterFree, match="before its MemPool. was used after it was closed"):
        pool.alloc(2 * MiB)
    live.free()
    pool.trim()
    pool.close()
    assert dev.diagnostics() == []  # no Buffer.free reached the closed device


def test_repr(pool):
    assert repr(pool).startswith("<MemPool on <MemDevice mem:0") and repr(pool).endswith("open>")
    buf = pool.alloc(10)
    assert repr(buf) == "<PooledBuffer 10 B on mem:0 live>"
    buf.free()


# -- streams ---------------------------------------------------------------------------------------------------

def test_a_block_freed_on_the_pools_stream_is_reused_without_a_fence(pool, stream):
    buf = pool.alloc(KiB)
    stream.fill(buf, 1)
    buf.free()
    before = stream.pending
    again = pool.alloc(KiB)
    assert stream.pending == before  # nothing enqueued: stream order is enough
    again.free(stream=stream)  # naming the pool's own stream is the same as naming none
    assert pool.stats().bytes_cached_shared == 0


def test_a_block_freed_on_another_stream_is_fenced_before_reuse(pool, device, stream):
    other = device.create_stream()
    buf = pool.alloc(KiB)
    block = buf._backing("test")
    other.fill(buf, 0xEE)  # still pending: the lazy device runs it only when something waits
    buf.free(stream=other)
    again = pool.alloc(KiB)
    assert again._backing("test") is block
    fresh = random_bytes(KiB, seed=7)
    stream.copy_htod(again, fresh)
    stream.synchronize()  # without the fence this runs before the fill ...
    other.synchronize()  # ... and the fill lands afterwards
    assert np.array_equal(read_back(stream, again), fresh)
    again.free()


def test_a_fence_that_already_completed_costs_nothing(pool, device, stream):
    other = device.create_stream()
    buf = pool.alloc(KiB)
    other.fill(buf, 0xEE)
    buf.free(stream=other)
    other.synchronize()
    before = stream.pending
    pool.alloc(KiB).free()
    assert stream.pending == before


def test_trim_waits_for_a_fenced_blocks_last_use_before_freeing_it(pool, device):
    other = device.create_stream()
    buf = pool.alloc(KiB)
    other.fill(buf, 0xEE)
    buf.free(stream=other)
    assert other.pending == 2  # the fill and the fence
    pool.trim()
    assert other.pending == 0 and device.bytes_in_use == 0


def test_new_blocks_hold_junk_not_zeros(pool, stream):
    with pool.alloc(KiB) as buf:
        assert set(read_back(stream, buf).tolist()) == {JUNK}


def test_the_base_class_free_returns_the_block_too(pool):
    buf = pool.alloc(KiB)
    Buffer.free(buf)
    assert buf.freed and pool.stats().bytes_cached == KiB and pool.stats().bytes_live == 0


def test_pooled_buffers_are_made_and_dropped_without_leaking_or_sharing(pool):
    """The compiled alloc reuses the memory of dropped PooledBuffers (pool.inc's spare buffers): each live
    buffer is its own object, and PooledBuffer's reference count (one per instance) comes back to where it was."""
    before = sys.getrefcount(PooledBuffer)
    for _ in range(3):
        live = [pool.alloc(KiB) for _ in range(20)]
        assert len({id(b) for b in live}) == 20 and not any(b.freed for b in live)
        for b in live:
            b.free()
        del live, b
        for _ in range(100):
            pool.alloc(KiB).free()
    gc.collect()
    assert sys.getrefcount(PooledBuffer) == before


_WHICH_POOL = """
import threading
from ironaccel import native, pool as P
from ironaccel.errors import InvalidArgument
from ironaccel.cts.testing.memdevice import MemDevice
dev = MemDevice(1 << 26)
s, other = dev.create_stream(), dev.create_stream()
pool = P.MemPool(dev, s)
def work():
    for n in (1, 1024, 1025, 1 << 20, (1 << 20) + 1):
        for _ in range(3):
            b = pool.alloc(n)
            assert b.nbytes == n and b._block.size >= n
            b.free()
    b = pool.alloc(10)
    b.free(stream=other)  # fenced: the shared tier, by the pure-Python free
    b = pool.alloc(10)
    b.free(stream=s)
    try:
        b.free()
    except InvalidArgument as exc:
        assert "already freed" in str(exc)
    else:
        raise AssertionError("a second free did not raise")
threads = [threading.Thread(target=work) for _ in range(3)]
work()
[t.start() for t in threads]
[t.join() for t in threads]
st = pool.stats()
assert st.bytes_live == 0 and st.hits + st.misses == 4 * 17, st
print(type(pool).__mro__[1].__name__, type(pool.alloc(1)).__mro__[1].__name__, native.load() is None)
"""


@pytest.mark.parametrize("pure", ["1", ""])
def test_compiled_pool_unless_pure_python_is_forced(tmp_path, pure):
    """The compiled PoolCore/PooledCore are MemPool's and PooledBuffer's bases where ironaccel._fast builds,
    the pure-Python ones with IRONACCEL_PURE_PYTHON=1; either way, across threads, the warm paths and the
    cases they hand over (sizes past the front buckets, a fenced free, a double free) count and behave alike."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from ironaccel import native

    if not pure and native.load() is None:
        pytest.skip(f"the compiled path is not available here: {native.why_not}")
    script = tmp_path / "which_pool.py"
    script.write_text(_WHICH_POOL)
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "IRONACCEL_PURE_PYTHON": pure,
           "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    expected = "_PoolCore _PooledCore True" if pure else "PoolCore PooledCore False"
    assert proc.stdout.strip() == expected
