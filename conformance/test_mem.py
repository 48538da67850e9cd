"""MEM: allocation, sizes, free, use after free, out of memory."""

from __future__ import annotations

import numpy as np
import pytest

import ironaccel as ia

from .helpers import assert_device_works, random_bytes, read


@pytest.mark.clause("MEM-1")
@pytest.mark.parametrize("nbytes", [1, 2, 3, 4, 5, 7, 64, 1000, 4097, 1 << 20])
def test_alloc_sizes_round_trip(device, stream, nbytes):
    with device.alloc(nbytes) as buf:
        assert buf.nbytes == nbytes
        data = random_bytes(nbytes, seed=nbytes)
        stream.copy_htod(buf, data)
        np.testing.assert_array_equal(read(stream, buf), data)


@pytest.mark.clause("MEM-1")
def test_alloc_device_limit(device, stream):
    n = device.info.limits.max_alloc
    with device.alloc(n) as buf:
        assert buf.nbytes == n
        tail = random_bytes(4096, seed=3)
        stream.copy_htod(buf, tail, dst_offset=n - tail.nbytes)
        stream.copy_htod(buf, tail[:17], dst_offset=0)
        np.testing.assert_array_equal(read(stream, buf, count=4096, offset=n - 4096), tail)
        np.testing.assert_array_equal(read(stream, buf, count=17), tail[:17])


@pytest.mark.clause("MEM-2", "ERR-1")
@pytest.mark.parametrize("bad", [0, -1, 1.5, "8", True])
def test_alloc_rejects_bad_sizes(device, bad):
    with pytest.raises(ia.InvalidArgument, match=r"Device\.alloc"):
        device.alloc(bad)


@pytest.mark.clause("MEM-3")
def test_free_is_idempotent_and_context_manager_frees(device):
    buf = device.alloc(256)
    assert not buf.freed
    buf.free()
    buf.free()
    assert buf.freed
    with device.alloc(256) as other:
        assert not other.freed
    assert other.freed


@pytest.mark.clause("MEM-4", "ERR-1")
def test_use_after_free_raises(device, stream, kernels):
    buf = device.alloc(64)
    live = device.alloc(64)
    buf.free()
    host = np.zeros(64, np.uint8)
    for op, call in [
        ("Stream.copy_htod", lambda: stream.copy_htod(buf, host)),
        ("Stream.copy_dtoh", lambda: stream.copy_dtoh(host, buf)),
        ("Stream.copy_dtod", lambda: stream.copy_dtod(live, buf, 8)),
        ("Stream.fill", lambda: stream.fill(buf, 1)),
        ("Stream.launch", lambda: stream.launch(kernels("fill_u32"), 1, 16, (buf, np.uint32(1), np.uint32(16)))),
        ("Buffer.handle", lambda: buf.handle),
    ]:
        with pytest.raises(ia.UseAfterFree, match=op.replace(".", r"\.")):
            call()
    live.free()


@pytest.mark.clause("MEM-5", "ERR-1", "ERR-2")
def test_over_limit_is_out_of_memory(device, kernels):
    with pytest.raises(ia.OutOfMemory, match=r"Device\.alloc"):
        device.alloc(device.info.limits.max_alloc + 1)
    assert_device_works(device, kernels)


@pytest.mark.clause("MEM-6")
def test_thousand_live_buffers(device, stream):
    bufs = [device.alloc(16 + i % 7) for i in range(1000)]
    for i, b in enumerate(bufs):
        stream.fill(b, i % 251 + 1)
    stream.synchronize()
    for i in range(0, 1000, 37):
        got = read(stream, bufs[i])
        assert (got == i % 251 + 1).all(), f"buffer {i} lost its contents"
    for b in bufs:
        b.free()
