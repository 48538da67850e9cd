"""POOL (warm): the checks of POOL-6 once the thread's front cache serves the bucket (a compiled path may)."""

from __future__ import annotations

import pytest

import ironaccel as ia
from ironaccel.pool import MemPool

from .helpers import assert_device_works, raises_naming, read


@pytest.mark.clause("POOL-63", "ERR-1")
def test_a_buffer_freed_into_a_warm_front_cache_is_freed(device, stream, kernels):
    """POOL-6 after this thread has already freed and taken back blocks of the bucket, so the free takes the
    pool's quickest path (the thread's own front cache): the buffer is marked freed there too. A quick path
    that caches the block but leaves the buffer live lets a second free() cache it again, and two later
    allocations then share one block."""
    with MemPool(device, stream) as pool:
        for _ in range(3):  # warm: the thread's front for this bucket exists and has room
            pool.alloc(1000).free()
        buf = pool.alloc(1000)
        buf.free()
        assert buf.freed, "a buffer freed into the front cache still says it is live"
        with raises_naming(ia.InvalidArgument, "MemPool.free", "already freed"):
            buf.free()
            pytest.fail("a second free() was accepted")
        with raises_naming(ia.UseAfterFree, "Stream.fill", "pooled buffer"):
            stream.fill(buf, 1)
        a, b = pool.alloc(1000), pool.alloc(1000)  # two owners must get two blocks
        stream.fill(a, 0x11)
        stream.fill(b, 0x22)
        assert (read(stream, a) == 0x11).all() and (read(stream, b) == 0x22).all(), "two buffers share one block"
        assert pool.stats().bytes_live == 2 * 1024, pool.stats()  # two 1 KiB blocks
        a.free()
        b.free()
    assert_device_works(device, kernels)
