"""POOL: MemPool on the backend under test — sizes, reuse, stats, trim and close, stream safety, cap, errors."""

from __future__ import annotations

import os
import threading
from collections import Counter

import numpy as np
import pytest
from hypothesis import example, given, strategies as st

import ironaccel as ia
from ironaccel.backends import get as get_backend
from ironaccel.cts.pytest_plugin import NOT_SUPPORTED_PREFIX
from ironaccel.pool import FRONT_SLOTS, MemPool, PoolStats

from .helpers import (POISON, RunningWork, assert_device_works, ceil_div, in_forked_child, random_bytes,
                      raises_naming, read)

KiB = 1 << 10
MiB = 1 << 20
N = 1 << 14  # u32 words written by the busy kernel
BUSY_ITERS = 20000  # long enough that a copy enqueued after it on another stream would finish first


@pytest.fixture
def pool(device, stream):
    p = MemPool(device, stream)
    yield p
    p.close()


def block_of(buf):
    """The backend buffer behind a pooled buffer: its identity (a handle may be shared by sub-allocations)."""
    return buf._backing("block_of")


def busy(stream, kernels, buf, n: int = N) -> None:
    """A kernel that takes a while, then writes every u32 of ``buf[:n]``."""
    stream.launch(kernels("busy"), ceil_div(n, 64), 64, (buf, np.uint32(BUSY_ITERS), np.uint32(n)))


@pytest.mark.clause("POOL-1")
@pytest.mark.parametrize("nbytes", [1, 3, 1000, 1024, 1025, 4097, 65537, (1 << 20) + 1])
def test_pooled_buffers_have_the_requested_size_and_round_trip(pool, stream, nbytes):
    with pool.alloc(nbytes) as buf:
        assert isinstance(buf, ia.Buffer) and buf.nbytes == nbytes
        stream.fill(buf, POISON)
        data = random_bytes(nbytes, seed=nbytes)
        stream.copy_htod(buf, data[1:], dst_offset=1)
        expect = data.copy()
        expect[0] = POISON
        np.testing.assert_array_equal(read(stream, buf), expect)


@pytest.mark.clause("POOL-67")
def test_a_pooled_buffer_past_a_gibibyte_has_its_size_after_small_ones_were_freed(device, pool, stream):
    """A size past 2**30 is a two-digit Python int (30-bit digits): a fast path that reads sizes in place must
    not take its low digit alone, or a request of 1 GiB and 64 bytes looks like one of 128 and gets a small
    block the pool holds (freed 128-byte buffers put such blocks there first), while reading as 1 GiB long."""
    n = (1 << 30) + 64
    memory = device.info.memory
    if device.info.limits.max_alloc < n or (memory and memory < 4 * n):
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}an allocation of 1 GiB and 64 bytes (max_alloc, a quarter of memory)")
    for _ in range(2):
        for size in (64, 128, 256):
            pool.alloc(size).free()
    stream.synchronize()
    data = random_bytes(4096, seed=30)
    with pool.alloc(n) as buf:
        assert buf.nbytes == n
        stream.copy_htod(buf, data, dst_offset=n - 4096)
        back = np.zeros(4096, np.uint8)
        stream.copy_dtoh(back, buf, src_offset=n - 4096)
        stream.synchronize()
        np.testing.assert_array_equal(back, data, err_msg=f"the last 4 KiB of a pooled buffer of {n} bytes")


@pytest.mark.clause("POOL-1")
def test_pooled_buffers_work_in_copies_and_launches(pool, stream, kernels):
    n = 3000
    data = random_bytes(4 * n, seed=1).view(np.uint32)
    with pool.alloc(4 * n) as a, pool.alloc(4 * n) as b:
        stream.copy_htod(a, data)
        stream.copy_dtod(b, a, 4 * n)
        stream.launch(kernels("add_one"), ceil_div(n, 64), 64, (b, np.uint32(n)))
        np.testing.assert_array_equal(read(stream, b, np.uint32), data + np.uint32(1))
        np.testing.assert_array_equal(read(stream, a, np.uint32), data)


@pytest.mark.clause("POOL-2")
def test_a_freed_block_comes_back_for_its_bucket_and_only_for_it(pool, stream):
    a = pool.alloc(1500)
    block = block_of(a)
    a.free()
    b = pool.alloc(2000)  # the same 2 KiB bucket
    assert block_of(b) is block and pool.stats().hits == 1
    c = pool.alloc(1500)  # b still holds the block
    assert block_of(c) is not block
    c.free()
    small = pool.alloc(KiB)
    assert block_of(small) is not block  # another bucket
    data = random_bytes(2000, seed=2)
    stream.copy_htod(b, data)
    np.testing.assert_array_equal(read(stream, b), data)
    b.free()
    small.free()
    assert block_of(pool.alloc(2000)) is block  # live: the 2 KiB bucket's front cache has room for one block
    again = pool.alloc(KiB)  # a front-cache hit, freed as one: back to the 1 KiB bucket, never the 2 KiB one
    kept = block_of(again)
    again.free()
    assert block_of(pool.alloc(2000)) is not kept, "a freed 1 KiB block came back for the 2 KiB bucket"


@pytest.mark.clause("POOL-2")
def test_live_pooled_buffers_keep_independent_contents(pool, stream):
    sizes = [1, 700, 1024, 1025, 3000, 4096, 9000, 70000] * 8
    bufs = [pool.alloc(n) for n in sizes]
    datas = [random_bytes(n, seed=i) for i, n in enumerate(sizes)]
    for buf, data in zip(bufs, datas):
        stream.copy_htod(buf, data)
    for i, (buf, data) in enumerate(zip(bufs, datas)):
        np.testing.assert_array_equal(read(stream, buf), data, err_msg=f"buffer {i} ({buf.nbytes} B)")
    for buf in bufs[::2]:
        buf.free()
    again = [pool.alloc(n) for n in sizes[::2]]  # reuse while the others stay live
    for buf in again:
        stream.fill(buf, 0x3C)
    for buf, data in zip(bufs[1::2], datas[1::2]):
        np.testing.assert_array_equal(read(stream, buf), data)
        buf.free()
    for buf in again:
        assert (read(stream, buf) == 0x3C).all()
        buf.free()


@pytest.mark.clause("POOL-3")
def test_stats_count_what_happened(pool):
    assert pool.stats() == PoolStats(0, 0, 0, 0, 0, 0)
    a, b = pool.alloc(1000), pool.alloc(3000)
    s = pool.stats()
    assert (s.hits, s.misses, s.bytes_live, s.bytes_cached, s.high_water_bytes) == (0, 2, 5 * KiB, 0, 5 * KiB)
    a.free()
    b.free()
    s = pool.stats()
    assert (s.bytes_live, s.bytes_cached, s.high_water_bytes) == (0, 5 * KiB, 5 * KiB)
    assert s.bytes_cached_front + s.bytes_cached_shared == s.bytes_cached
    pool.alloc(500).free()
    s = pool.stats()
    assert (s.hits, s.misses, s.high_water_bytes) == (1, 2, 5 * KiB)


@pytest.mark.clause("POOL-3")
def test_a_request_of_a_bucket_size_holds_that_size(pool):
    bufs = [pool.alloc(n) for n in (2 * KiB, 4 * KiB, MiB, 2 * MiB)]
    assert pool.stats().bytes_live == 6 * KiB + 3 * MiB
    for buf in bufs:
        buf.free()
    s = pool.stats()  # blocks up to 1 MiB (its bucket included) wait in this thread's front cache, bigger ones shared
    assert (s.bytes_live, s.bytes_cached_front, s.bytes_cached_shared) == (0, 6 * KiB + MiB, 2 * MiB)


@pytest.mark.clause("POOL-3")
def test_a_front_cache_holds_front_slots_blocks_of_a_bucket(pool):
    """The calling thread's front cache keeps FRONT_SLOTS blocks of one bucket; more wait in the shared tier."""
    bufs = [pool.alloc(KiB) for _ in range(FRONT_SLOTS + 2)]
    for buf in bufs:
        buf.free()
    s = pool.stats()
    assert (s.bytes_cached_front, s.bytes_cached_shared) == (FRONT_SLOTS * KiB, 2 * KiB), s


@pytest.mark.clause("POOL-2", "POOL-3")
def test_a_block_taken_back_from_the_shared_tier_is_a_live_hit(pool):
    big = pool.alloc(2 * MiB)
    block = block_of(big)
    big.free()  # blocks above 1 MiB wait in the shared tier
    again = pool.alloc(2 * MiB)
    assert block_of(again) is block
    s = pool.stats()
    assert (s.hits, s.misses, s.bytes_live, s.bytes_cached_front, s.bytes_cached_shared) == (1, 1, 2 * MiB, 0, 0)
    again.free()
    s = pool.stats()
    assert (s.bytes_live, s.bytes_cached_shared, s.high_water_bytes) == (0, 2 * MiB, 2 * MiB)


@pytest.mark.clause("POOL-3")
def test_the_high_water_mark_never_goes_down(pool):
    big = pool.alloc(1 << 20)
    big.free()
    pool.trim()
    small = pool.alloc(KiB)  # a device allocation far below the earlier peak
    s = pool.stats()
    assert (s.bytes_live, s.bytes_cached, s.high_water_bytes) == (KiB, 0, 1 << 20)
    small.free()


@pytest.mark.clause("POOL-4")
def test_trim_to_what_is_cached_gives_nothing_back(pool):
    for n in (KiB, 2 * MiB, 4 * MiB):  # the front cache (1 KiB) and the shared one (blocks above 1 MiB)
        pool.alloc(n).free()
    cached = pool.stats().bytes_cached
    assert cached == 6 * MiB + KiB
    assert pool.trim(keep_bytes=cached) == 0 and pool.stats().bytes_cached == cached
    assert pool.trim(keep_bytes=2 * MiB + KiB) == 4 * MiB and pool.stats().bytes_cached == 2 * MiB + KiB
    assert pool.trim(keep_bytes=KiB) == 2 * MiB and pool.stats().bytes_cached == KiB


@pytest.mark.clause("POOL-4")
def test_trim_gives_back_cached_blocks_while_buffers_stay_live(device, stream):
    pool = MemPool(device, stream)
    live = pool.alloc(8 * KiB)
    data = random_bytes(8 * KiB, seed=4)
    stream.copy_htod(live, data)
    for n in (KiB, 2 * KiB, 4 * KiB, 1 << 20):
        pool.alloc(n).free()
    assert pool.trim(keep_bytes=4 * KiB) == (1 << 20) + 4 * KiB
    assert pool.stats().bytes_cached == 3 * KiB
    assert pool.trim() == 3 * KiB and pool.stats().bytes_cached == 0
    np.testing.assert_array_equal(read(stream, live), data)
    assert pool.stats().bytes_live == 8 * KiB
    live.free()
    pool.close()


@pytest.mark.clause("POOL-4", "ERR-1")
def test_close_gives_everything_back_and_later_allocs_raise(device, stream, kernels):
    pool = MemPool(device, stream)
    live = pool.alloc(3 * KiB)
    data = random_bytes(3 * KiB, seed=5)
    stream.copy_htod(live, data)
    pool.alloc(KiB).free()
    pool.close()
    pool.close()
    assert pool.stats().bytes_cached == 0
    with raises_naming(ia.UseAfterFree, "MemPool.alloc", "the MemPool was used after it was closed"):
        pool.alloc(KiB)
    np.testing.assert_array_equal(read(stream, live), data)  # still valid after close
    live.free()  # straight back to the device: a closed pool caches nothing, so has nothing to hand out
    assert (pool.stats().bytes_live, pool.stats().bytes_cached) == (0, 0)
    with raises_naming(ia.UseAfterFree, "MemPool.alloc", "the MemPool was used after it was closed"):
        pool.alloc(3 * KiB)
    assert_device_works(device, kernels)


@pytest.mark.clause("POOL-5")
def test_a_block_freed_on_the_pools_stream_is_reused_in_stream_order(device, pool, stream, kernels):
    work = RunningWork(device, stream, kernels)
    buf = pool.alloc(4 * work.n)
    block = block_of(buf)
    work.enqueue(stream, buf)  # still running when the block is handed out again
    buf.free()
    again = pool.alloc(4 * work.n)
    assert block_of(again) is block
    data = random_bytes(4 * work.n, seed=6)
    stream.copy_htod(again, data)
    np.testing.assert_array_equal(read(stream, again), data)
    again.free()
    work.free()


@pytest.mark.clause("POOL-5")
@pytest.mark.parametrize("words", [1024, 1 << 20], ids=["4KiB", "4MiB"])
def test_a_block_freed_after_use_on_another_stream_is_fenced_before_reuse(device, pool, stream, kernels, words):
    """The block's last use on the other stream waits there behind long work, so it is still to come when the
    block is handed out again. 4 KiB blocks are cached per thread, 4 MiB ones under the pool's lock."""
    assert_fenced_before_reuse(device, pool, stream, kernels, words)


@pytest.mark.clause("POOL-64")
@pytest.mark.parametrize("words", [1024, 1 << 18], ids=["4KiB", "1MiB"])  # the smallest and biggest front buckets
@pytest.mark.parametrize("passed", ["keyword", "positional"])
def test_a_block_freed_on_another_stream_into_a_warm_pool_is_fenced_before_reuse(device, pool, stream, kernels,
                                                                                   words, passed):
    """POOL-5 once this thread has freed and taken back blocks of the bucket on the pool's stream, so a free
    may take the pool's quickest path (the thread's front cache): a free(stream=other) must still fence, and so
    must a free(other), the stream passed positionally (a compiled free that reads only the keyword ignores it)."""
    for _ in range(3):
        pool.alloc(4 * words).free()
    assert_fenced_before_reuse(device, pool, stream, kernels, words, positional=passed == "positional")


@pytest.mark.clause("POOL-65")
@pytest.mark.parametrize("nbytes", [2 * KiB, 512 * KiB], ids=["2KiB", "512KiB"])
def test_a_warm_pool_serves_an_exact_bucket_size_from_its_own_bucket(pool, nbytes):
    """POOL-2 on a warm pool: with only the next bucket's block in this thread's front cache, a request of
    exactly a bucket size is a miss that holds a block of that size, and the bigger block stays cached."""
    for _ in range(3):
        pool.alloc(2 * nbytes).free()  # the bigger bucket's block now waits in this thread's front cache
    before = pool.stats()
    buf = pool.alloc(nbytes)
    after = pool.stats()
    assert (after.hits, after.misses) == (before.hits, before.misses + 1)
    assert after.bytes_live - before.bytes_live == nbytes
    assert after.bytes_cached == before.bytes_cached == 2 * nbytes
    buf.free()


@pytest.mark.clause("POOL-65")
@pytest.mark.parametrize("nbytes", [2 * KiB, 512 * KiB], ids=["2KiB", "512KiB"])
def test_a_warm_pool_serves_a_byte_past_a_bucket_from_the_next(pool, stream, nbytes):
    """With blocks of a bucket and of the next one in this thread's front cache, a request one byte past the
    bucket's size is served by the next bucket, and all its bytes round-trip: a quick path that takes the
    bucket one size too low hands out a block a byte smaller than the buffer, and a write of its last byte lands
    in another block."""
    for _ in range(3):
        pool.alloc(nbytes).free()
        pool.alloc(2 * nbytes).free()
    before = pool.stats()
    buf = pool.alloc(nbytes + 1)
    after = pool.stats()
    assert after.bytes_live - before.bytes_live == 2 * nbytes, (
        f"a request of {nbytes + 1} bytes holds a block of {after.bytes_live - before.bytes_live} bytes")
    data = random_bytes(nbytes + 1, 65)
    stream.copy_htod(buf, data)
    assert bytes(read(stream, buf)) == bytes(data)
    buf.free()


@pytest.mark.clause("POOL-66")
def test_a_warm_pool_files_each_freed_block_under_its_own_bucket(device, pool, stream, kernels):
    """With this thread's front caches of two buckets warm (1 KiB and 4 KiB, three blocks each), a 1 KiB block
    taken from its front cache and freed while the 4 KiB front has room goes back to its own bucket: the next
    4 KiB request gets a 4 KiB block (its 4 KiB of data round-trip, the pool counts 4 KiB live for it) and every
    other live buffer keeps its data. A free that reads the block's bucket wrongly (two buckets up) files the
    1 KiB block under 4 KiB, and the next 4 KiB buffer lies in 1 KiB."""
    bufs = [pool.alloc(n) for n in (KiB, 4 * KiB) for _ in range(3)]
    for buf in bufs:
        buf.free()  # each into this thread's front cache, which gains the room (credit) for it
    for _ in range(3):
        pool.alloc(KiB).free()
        pool.alloc(4 * KiB).free()
    held = pool.alloc(4 * KiB)  # the 4 KiB front now has room for one
    small = [pool.alloc(KiB) for _ in range(2)]
    datas = [random_bytes(KiB, seed=20 + i) for i in range(len(small))]
    for buf, data in zip(small, datas):
        stream.copy_htod(buf, data)
    pool.alloc(KiB).free()  # the third 1 KiB block, from the front cache and back
    big = pool.alloc(4 * KiB)
    assert pool.stats().bytes_live == 2 * 4 * KiB + 2 * KiB, pool.stats()
    data = random_bytes(4 * KiB, seed=23)
    stream.copy_htod(big, data)
    np.testing.assert_array_equal(read(stream, big), data)
    for buf, want in zip(small, datas):
        np.testing.assert_array_equal(read(stream, buf), want, err_msg="a live 1 KiB buffer was overwritten")
    for buf in (held, big, *small):
        buf.free()
    assert pool.stats().bytes_live == 0
    assert_device_works(device, kernels)


def assert_fenced_before_reuse(device, pool, stream, kernels, words: int, positional: bool = False) -> None:
    """A block of ``words`` u32 freed with free(stream=other) (``positional``: free(other)) while a kernel on
    other still writes it: the next owner's copy on the pool's stream waits for that kernel and keeps its bytes."""
    other = device.create_stream()
    for work in RunningWork.tries(device, other, kernels):
        buf = pool.alloc(4 * words)
        block = block_of(buf)
        other.wait(stream.record())  # a pooled block is ready in the pool stream's order
        work.enqueue(other)
        other.launch(work.kernel, ceil_div(words, 64), 64, (buf, np.uint32(16), np.uint32(words)))  # the late use
        if positional:
            buf.free(other)
        else:
            buf.free(stream=other)
        again = pool.alloc(4 * words)
        assert block_of(again) is block
        data = random_bytes(4 * words, seed=7)
        if not work.looked_in_time():  # the host was away for most of the work: no conclusion, more work
            device.synchronize()
            again.free()
            continue
        stream.copy_htod(again, data)
        try:  # the pool's stream must now be behind the other stream's work
            stream.record().synchronize(timeout=0.01)
            waited = False
        except ia.Timeout:
            waited = True
        if work.looked_in_time():  # (a copy_htod that itself waits for the work can only be judged by the data)
            assert waited, "the pool's stream did not wait for the block's last use on another stream"
        device.synchronize()  # had the copy not waited for the late use, that kernel's values landed after it
        np.testing.assert_array_equal(read(stream, again), data)
        again.free()
        return
    pytest.fail("the host never got to reuse the block within a third of the work's time, however long the work")


@pytest.mark.clause("POOL-5")
def test_a_block_whose_other_stream_work_finished_is_reused_directly(device, pool, stream, kernels):
    other = device.create_stream()
    buf = pool.alloc(4 * N)
    other.wait(stream.record())
    busy(other, kernels, buf, n=16)
    buf.free(stream=other)
    other.synchronize()
    again = pool.alloc(4 * N)
    data = random_bytes(4 * N, seed=8)
    stream.copy_htod(again, data)
    np.testing.assert_array_equal(read(stream, again), data)
    again.free()


@pytest.mark.clause("POOL-6", "ERR-1")
@pytest.mark.parametrize("freed_on", ["pool-stream", "other-stream"])
def test_double_free_and_use_after_free_raise_naming_the_op(device, pool, stream, kernels, freed_on):
    buf = pool.alloc(64)
    live = pool.alloc(64)
    other = device.create_stream()
    buf.free(stream=other if freed_on == "other-stream" else None)
    assert buf.freed
    for again in (None, other):
        with raises_naming(ia.InvalidArgument, "MemPool.free", "already freed"):
            buf.free(stream=again)
    host = np.zeros(64, np.uint8)
    add_one = kernels("add_one")
    plan = add_one.prepare(1, 16)
    for _ in range(2):  # a launch and a prepared launch of a live pooled buffer first: the next ones are warm
        stream.launch(add_one, 1, 16, (live, np.uint32(16)))
        plan(stream, live, np.uint32(16))
    for op, call in [
        ("Stream.copy_htod", lambda: stream.copy_htod(buf, host)),
        ("Stream.copy_dtoh", lambda: stream.copy_dtoh(host, buf)),
        ("Stream.copy_dtod", lambda: stream.copy_dtod(live, buf, 64)),
        ("Stream.fill", lambda: stream.fill(buf, 1)),
        ("Stream.launch", lambda: stream.launch(kernels("add_one"), 1, 16, (buf, np.uint32(16)))),
        ("Stream.launch", lambda: stream.launch(add_one, 1, 16, (buf, np.uint32(16)))),
        ("Stream.launch", lambda: plan(stream, buf, np.uint32(16))),
        ("Buffer.handle", lambda: buf.handle),
    ]:
        with raises_naming(ia.UseAfterFree, op, "pooled buffer"):
            call()
    live.free()
    assert pool.stats().bytes_live == 0
    assert_device_works(device, kernels)


@pytest.mark.clause("POOL-6", "ERR-1")
@pytest.mark.parametrize("passed", ["keyword", "positional"])
def test_a_free_on_what_is_no_stream_of_the_device_raises_on_a_warm_pool(device, pool, stream, kernels, passed):
    """Once this thread has freed and taken back a 4 KiB block (so a free may take the thread's front cache, the
    compiled path included), a free given something that is no Stream of the pool's device, as ``stream=`` or
    positionally, raises InvalidArgument naming MemPool.free and frees nothing: a free that drops a positional
    stream puts the block back unfenced, unchecked."""
    for _ in range(3):
        pool.alloc(4 * KiB).free()
    buf = pool.alloc(4 * KiB)
    live = pool.stats().bytes_live
    for bad in ("x", device, 0):
        with raises_naming(ia.InvalidArgument, "MemPool.free", "stream"):
            buf.free(bad) if passed == "positional" else buf.free(stream=bad)
        assert not buf.freed, f"a refused free({bad!r}) freed the buffer"
        assert pool.stats().bytes_live == live
    buf.free(stream) if passed == "positional" else buf.free(stream=stream)  # the pool's own stream is fine
    assert buf.freed and pool.stats().bytes_live == live - 4 * KiB
    assert_device_works(device, kernels)


@pytest.mark.clause("POOL-6", "ERR-1")
@pytest.mark.parametrize("bad", [0, -1, 1.5, "8", True])
def test_bad_sizes_raise_naming_the_op(pool, bad):
    with raises_naming(ia.InvalidArgument, "MemPool.alloc", "nbytes"):
        pool.alloc(bad)


@pytest.mark.clause("POOL-6", "ERR-1")
@pytest.mark.parametrize("bad", [-1, 1.5, "8", True])
def test_bad_trims_raise_naming_the_op(pool, bad):
    with raises_naming(ia.InvalidArgument, "MemPool.trim", "keep_bytes"):
        pool.trim(bad)


@pytest.mark.clause("POOL-7")
def test_the_cap_bounds_what_stays_cached(device, stream):
    by_bytes = MemPool(device, stream, max_cached_bytes=3 * KiB)
    by_count = MemPool(device, stream, max_per_bucket=2)
    for pool, cached in ((by_bytes, 3 * KiB), (by_count, 2 * KiB)):
        bufs = [pool.alloc(KiB) for _ in range(5)]
        for i, buf in enumerate(bufs):
            stream.copy_htod(buf, random_bytes(KiB, seed=i))
        for buf in bufs:
            buf.free()
        s = pool.stats()
        assert (s.bytes_cached, s.bytes_live, s.misses) == (cached, 0, 5)
        pool.close()


@pytest.mark.clause("POOL-7")
def test_a_pool_made_without_caps_has_the_documented_defaults(device, stream):
    """MemPool's defaults are part of its contract (a program sizes its memory by them): 1 GiB of cached blocks
    and 64 blocks of one size. The second is shown by use: 65 blocks of one size freed, 64 stay cached."""
    pool = MemPool(device, stream)
    assert (pool.max_cached_bytes, pool.max_per_bucket) == (1 << 30, 64)
    bufs = [pool.alloc(KiB) for _ in range(65)]
    for buf in bufs:
        buf.free()
    s = pool.stats()
    assert (s.bytes_cached, s.bytes_live) == (64 * KiB, 0), s
    pool.close()


def block_size(nbytes: int, max_alloc: int) -> int | None:
    """The block a request holds (POOL-3): the smallest power of two from 1 KiB to 256 MiB that fits it, or None
    where the request goes straight to the device (above 256 MiB, or a bucket above the device's max_alloc)."""
    size = max(KiB, 1 << (nbytes - 1).bit_length())
    return size if size <= min(256 * MiB, max_alloc) else None


class PoolModel:
    """What POOL-10 says a pool used by one thread holds: a freed block stays cached exactly when both caps
    leave room for it, and the next request of its size takes it back; trim gives back the biggest first."""

    def __init__(self, max_alloc: int, max_cached_bytes: int, max_per_bucket: int):
        self.max_alloc, self.max_cached_bytes, self.max_per_bucket = max_alloc, max_cached_bytes, max_per_bucket
        self.cached: Counter[int] = Counter()  # block size -> blocks cached
        self.live_bytes = self.hits = self.misses = self.high_water = 0

    @property
    def cached_bytes(self) -> int:
        return sum(size * n for size, n in self.cached.items())

    def alloc(self, nbytes: int) -> int:
        size = block_size(nbytes, self.max_alloc)
        if size is not None and self.cached[size]:
            self.cached[size] -= 1
            self.hits += 1
        else:
            size = size or nbytes
            self.misses += 1
            self.high_water = max(self.high_water, self.live_bytes + size + self.cached_bytes)
        self.live_bytes += size
        return size

    def free(self, nbytes: int, size: int) -> None:
        self.live_bytes -= size
        if (block_size(nbytes, self.max_alloc) is not None and self.cached_bytes + size <= self.max_cached_bytes
                and self.cached[size] < self.max_per_bucket):
            self.cached[size] += 1

    def trim(self, keep_bytes: int) -> int:
        given = 0
        for size in sorted(self.cached, reverse=True):
            while self.cached_bytes > keep_bytes and self.cached[size]:
                self.cached[size] -= 1
                given += size
        return given

    def check(self, pool: MemPool, after: str) -> None:
        s = pool.stats()
        got = (s.hits, s.misses, s.bytes_live, s.bytes_cached, s.high_water_bytes)
        want = (self.hits, self.misses, self.live_bytes, self.cached_bytes, self.high_water)
        assert got == want, f"after {after}: (hits, misses, live, cached, high water) are {got}, not {want}"


POOL_SIZES = (1, 1000, KiB, KiB + 1, 3000, 65536, MiB, MiB + 1, 3 * MiB)
POOL_OPS = st.lists(st.one_of(st.tuples(st.just("alloc"), st.sampled_from(POOL_SIZES)),
                              st.tuples(st.just("free"), st.integers(0, 40)),
                              st.tuples(st.just("free on other"), st.integers(0, 40)),
                              st.tuples(st.just("trim"), st.sampled_from((0, KiB, 3 * KiB, 4 * MiB + KiB)))),
                    max_size=40)
A1, A3, T = ("alloc", 1000), ("alloc", 3 * MiB), ("trim", 0)  # a 1 KiB block (front cache), a 4 MiB one (shared)


@pytest.mark.clause("POOL-10", "POOL-2", "POOL-3", "POOL-7")
@given(caps=st.tuples(st.sampled_from((2 * KiB, 5 * KiB, 5 * MiB, 1 << 30)), st.sampled_from((1, 2, 3, 64))),
       ops=POOL_OPS)
# each a sequence where a pool that miscounts its room caches a block the caps leave no room for, or gives back
# one they do: a block taken back from the shared tier, trims of either tier, fenced frees, a thread's reserved
# front slots, cycles past the slots a bucket had at first, a bucket's blocks all taken and returned
@example(caps=(1 << 30, 1), ops=[A3, A3, ("free", 0), ("free", 0), A3, A3, ("free", 0), ("free", 0), A3, A3])
@example(caps=(8 * MiB, 64), ops=[A3, A3, ("free", 0), ("free", 0), T, A3, A3, ("free", 0), ("free", 0), A3, A3])
@example(caps=(1 << 30, 1), ops=[A3, ("free", 0), T, A3, A3, ("free", 0), ("free", 0), A3, A3])
@example(caps=(1 << 30, 1), ops=[A1, ("free", 0), T, A1, A1, ("free", 0), ("free", 0), A1, A1, ("free", 0), A1])
@example(caps=(2 * KiB, 64), ops=[A1, ("free", 0), T, A1, A1, ("free", 0), ("free", 0), A1, A1])
@example(caps=(1 << 30, 2), ops=[A1, ("free", 0), A1, ("free", 0), A1, ("free", 0), A1, ("free", 0), A1])
@example(caps=(1 << 30, 2), ops=[A1, A1, ("free", 0), ("free", 0), A1, A1, ("free", 0), ("free", 0), A1, A1])
@example(caps=(2 * KiB, 64), ops=[A1, ("free", 0), A1, ("alloc", 2000), ("free", 1), ("free", 0), A1, ("alloc", 2000)])
@example(caps=(5 * KiB, 2), ops=[A1, A1, ("free on other", 0), ("free on other", 0), A1, A1, A1, ("free", 0),
                                 ("free", 0), ("free", 0), ("trim", KiB), A1, A1])
# a 2 KiB free takes back the 1 KiB bucket's reserved slot, and the 1 KiB block freed next must find it room
# again under a cap of one block per bucket (a take-back that subtracts the slot crowds that block out)
@example(caps=(2 * KiB, 1), ops=[A1, ("free", 0), A1, ("alloc", 2000), ("free", 1), ("alloc", 2000), ("free", 0)])
def test_a_pool_used_by_one_thread_keeps_exact_accounts(device, caps, ops):
    stream = device.create_stream()
    other = device.create_stream()
    model = PoolModel(device.info.limits.max_alloc, *caps)
    live: list[tuple[ia.Buffer, int]] = []  # (buffer, its block size)
    with MemPool(device, stream, max_cached_bytes=caps[0], max_per_bucket=caps[1]) as pool:
        for i, (op, arg) in enumerate(ops):
            if op == "alloc":
                live.append((pool.alloc(arg), model.alloc(arg)))
            elif op == "trim":
                assert pool.trim(arg) == model.trim(arg), f"op {i}: trim({arg}) gave back other blocks"
            elif live:
                buf, size = live.pop(arg % len(live))
                buf.free(stream=other if op == "free on other" else None)
                model.free(buf.nbytes, size)
            model.check(pool, f"op {i} ({op} {arg}) of {ops}")
        for buf, _ in live:
            buf.free()


@pytest.mark.clause("POOL-10", "THREAD-2")
@pytest.mark.parametrize("cap", [dict(max_per_bucket=2), dict(max_cached_bytes=2 * KiB)], ids=["blocks", "bytes"])
def test_a_thread_that_ended_leaves_its_blocks_and_no_reservation_behind(device, stream, cap):
    """A thread caches two 1 KiB blocks, takes one back out and ends: its cached block is the pool's (the
    next request of any thread takes it) and the slot it kept for the block it took is free again, so two
    blocks fit under a cap of two (blocks of the bucket, or their bytes) once all three are freed."""
    with MemPool(device, stream, **cap) as pool:
        handed: list[ia.Buffer] = []

        def cache_two_take_one() -> None:
            a, b = pool.alloc(1000), pool.alloc(1000)
            a.free()
            b.free()
            handed.append(pool.alloc(1000))

        thread = threading.Thread(target=cache_two_take_one)
        thread.start()
        thread.join()
        s = pool.stats()
        assert (s.hits, s.misses, s.bytes_live, s.bytes_cached) == (1, 2, KiB, KiB), s
        d, e = pool.alloc(1000), pool.alloc(1000)
        s = pool.stats()
        assert (s.hits, s.misses, s.bytes_live, s.bytes_cached) == (2, 3, 3 * KiB, 0), s
        for buf in (handed[0], d, e):
            buf.free()
        s = pool.stats()
        assert (s.bytes_live, s.bytes_cached) == (0, 2 * KiB), f"a cap of two blocks kept {s.bytes_cached} bytes"


@pytest.mark.clause("POOL-68")
@pytest.mark.parametrize("cap", [dict(max_per_bucket=2), dict(max_cached_bytes=2 * KiB)], ids=["blocks", "bytes"])
def test_a_trim_leaves_no_reservation_of_its_thread_behind(device, stream, cap):
    """A thread caches two 1 KiB blocks (its front cache reserves the cap's room for both) and trims them:
    the trim gives that room back with them, so a block another thread then frees fits under a cap of two
    and stays cached, and that thread's next request of the bucket takes it back. Only the owner of a front
    cache can take its empty slots' reservation back, and the other thread cannot."""
    with MemPool(device, stream, **cap) as pool:
        a, b = pool.alloc(1000), pool.alloc(1000)
        a.free()
        b.free()
        assert pool.trim() == 2 * KiB
        seen: list[PoolStats] = []

        def free_one_then_take_it_back() -> None:
            x = pool.alloc(1000)
            x.free()
            seen.append(pool.stats())
            pool.alloc(1000).free()
            seen.append(pool.stats())

        thread = threading.Thread(target=free_one_then_take_it_back)
        thread.start()
        thread.join()
        freed, taken = seen
        assert freed.bytes_cached == KiB, f"a block freed under an emptied cap went to the device: {freed}"
        assert (taken.hits, taken.misses) == (1, 3), f"the next request of the bucket missed: {taken}"


@pytest.mark.clause("POOL-3")
def test_the_largest_bucket_is_256_mib(pool, device):
    """A request above 128 MiB holds a 256 MiB block where the device allows one, and goes back to the cache;
    one above 256 MiB goes straight to the device and back to it. (A device whose max_alloc is smaller gets
    its largest request instead: a bucket within max_alloc, or none.)"""
    max_alloc = device.info.limits.max_alloc
    sizes = {min(128 * MiB + 1, max_alloc), min(256 * MiB + 1, max_alloc)}
    if max_alloc <= 256 * MiB:  # a bucket of exactly max_alloc bytes is a bucket: a request just above half holds it
        sizes.add(max_alloc // 2 + 1)
    for nbytes in sorted(sizes):
        size = block_size(nbytes, max_alloc)
        buf = pool.alloc(nbytes)
        assert pool.stats().bytes_live == (size or nbytes), f"a request of {nbytes} bytes"
        buf.free()
        s = pool.stats()
        assert (s.bytes_live, s.bytes_cached) == (0, size or 0), f"a request of {nbytes} bytes"
        pool.trim()


@pytest.mark.clause("POOL-11", "ERR-1")
def test_a_pool_of_a_closed_device_hands_out_nothing(device, kernels):
    """Whatever the pool caches (a block in this thread's front cache, one in the shared tier) or not."""
    other = get_backend(device.info.backend).open_device(device.info.index)
    other_stream = other.create_stream()
    pool = MemPool(other, other_stream)
    live = pool.alloc(5000)
    for n in (1000, 3 * MiB):
        pool.alloc(n).free()
    other.close()
    with raises_naming(ia.UseAfterFree, "MemPool", "closed"):
        MemPool(other, other_stream)
        pytest.fail("a MemPool was made for a closed device")
    for n in (1000, 3 * MiB, 70000):
        with raises_naming(ia.UseAfterFree, "MemPool.alloc", "closed"):
            pool.alloc(n)
            pytest.fail(f"alloc({n}) on a closed device handed out a block")
    live.free()
    assert pool.stats().bytes_live == 0
    pool.trim()
    pool.close()
    with raises_naming(ia.UseAfterFree, "MemPool.alloc", "closed"):
        pool.alloc(1000)
    assert_device_works(device, kernels)


@pytest.mark.clause("POOL-9")
def test_a_forked_child_gets_none_of_the_parents_blocks(device, stream, kernels):
    if not hasattr(os, "fork"):
        pytest.fail("POOL-9 needs os.fork: run the suite on a POSIX host")
    data = random_bytes(4096, 41)
    with MemPool(device, stream) as pool:
        live = pool.alloc(4096)
        stream.copy_htod(live, data)
        sizes = (1000, 4096, 100_000, 3 << 20)  # front buckets and a shared-tier one
        cached = [pool.alloc(n) for n in sizes]
        ours = [pool.alloc(n) for n in sizes]  # live in the parent, and freed by the child too
        parents = {id(block_of(b)) for b in (live, *cached, *ours)}
        for b in cached:
            b.free()
        stream.synchronize()

        def child() -> str:
            for buf in (*ours, live):  # what the parent's pool lent, freed here: no later alloc may hand it out
                buf.free()
            for n in sizes:
                try:
                    buf = pool.alloc(n)
                except ia.IronAccelError as err:
                    if not str(err).startswith("MemPool.alloc: "):
                        return f"alloc({n}) raised an error that does not name MemPool.alloc: {err}"
                    continue
                if id(block_of(buf)) in parents:
                    return f"alloc({n}) handed out a block of the parent's"
            pool.stats()
            pool.trim()
            pool.close()
            return ""

        verdict = in_forked_child(child)
        assert verdict == "ok", f"the forked child: {verdict}"
        # the parent's pool is untouched: its cached blocks come back, its live buffer kept its bytes
        again = [pool.alloc(n) for n in sizes]
        assert {id(block_of(b)) for b in again} <= parents and pool.stats().hits >= len(sizes)
        np.testing.assert_array_equal(read(stream, live), data)
        for i, b in enumerate(ours):  # live in the parent whatever the child freed
            mine = random_bytes(b.nbytes, 42 + i)
            stream.copy_htod(b, mine)
            np.testing.assert_array_equal(read(stream, b), mine)
        for b in (live, *again, *ours):
            b.free()
    assert_device_works(device, kernels)


@pytest.mark.clause("POOL-69")
def test_a_free_the_signature_refuses_raises_type_error_and_frees_nothing(device, pool, stream):
    """PooledBuffer.free(stream=None) called as its signature refuses — two positional arguments, the stream both
    positionally and by keyword, a keyword it does not take (one sorting before `stream`, one after) — on a warm
    pool (this thread's front cache holds the bucket's blocks, the quickest free path) raises TypeError and frees
    nothing: the buffer stays live, holds its bytes, and the pool's live bytes are unchanged. A compiled free that
    parses its arguments itself and takes whichever it finds frees the block while the caller still uses it."""
    for _ in range(3):
        pool.alloc(4 * KiB).free()
    buf = pool.alloc(4 * KiB)
    stream.fill(buf, 0x5A)
    live = pool.stats().bytes_live
    calls = {
        "two positional arguments": lambda: buf.free(stream, stream),
        "the stream positionally and by keyword": lambda: buf.free(stream, stream=stream),
        "bogus= (sorts before stream)": lambda: buf.free(bogus=1),
        "timeout= (sorts after stream)": lambda: buf.free(timeout=1),
        "bogus= beside stream=": lambda: buf.free(stream=stream, bogus=1),
    }
    for what, call in calls.items():
        with pytest.raises(TypeError):
            call()
            pytest.fail(f"free() with {what}: accepted")
        assert not buf.freed and pool.stats().bytes_live == live, f"free() with {what}: the buffer was freed"
    assert (read(stream, buf) == 0x5A).all(), "a refused free() changed the buffer"
    buf.free(stream=stream)
    assert buf.freed and pool.stats().bytes_live == live - 4 * KiB


@pytest.mark.clause("POOL-70")
def test_a_child_forked_while_another_thread_uses_the_pool_does_not_hang_on_it(device, stream, kernels):
    """POOL-9 with a second thread of the parent using the pool at each fork (allocs and frees of a shared-tier
    size and `stats()`, in a loop, all of which take the pool's lock): in each child, `stats()`, an alloc, a
    free of what the parent lent, `trim()` and `close()` return within seconds. A fork copies a lock another
    thread held at that moment as held, and no thread of the child will release it: a pool that keeps its lock
    into the child hangs there on the first call that takes it."""
    if not hasattr(os, "fork"):
        pytest.fail("POOL-70 needs os.fork: run the suite on a POSIX host")
    with MemPool(device, stream) as pool:
        lent = [pool.alloc(3 << 20) for _ in range(5)]
        stop = threading.Event()

        def busy() -> None:
            while not stop.is_set():
                pool.alloc(3 << 20).free()  # a shared-tier size: the slow path, under the lock
                pool.stats()

        def child(buf) -> str:
            pool.stats()
            try:
                pool.alloc(1000).free()
            except ia.IronAccelError as err:
                if not str(err).startswith("MemPool.alloc: "):
                    return f"alloc raised an error that does not name MemPool.alloc: {err}"
            buf.free()
            pool.trim()
            pool.close()
            return ""

        user = threading.Thread(target=busy, daemon=True)
        user.start()
        try:
            verdicts = [in_forked_child(lambda buf=buf: child(buf), seconds=10.0) for buf in lent]
        finally:
            stop.set()
            user.join()
        assert verdicts == ["ok"] * len(lent), f"the forked children: {verdicts}"
        for buf in lent:  # the parent's pool is untouched by what the children did
            stream.fill(buf, 0x5A)
            assert (read(stream, buf) == 0x5A).all()
            buf.free()
    assert_device_works(device, kernels)
