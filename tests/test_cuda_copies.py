"""The CUDA backend's copies on the fake libcuda: the staging ring, mid-size pieces and the copy threads, pinned
sources copied directly, tiny copies, and the compiled copy_htod's checks on every form. Runs with no GPU.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.cts.testing.cuda_fake import (CUDA_ERROR_INVALID_VALUE, PTX_SPIN, SPIN_ITERATIONS, load_fake, open_device, run_script)


@pytest.fixture(scope="module")
def fake() -> Any:
    """The loaded fake libcuda (ctypes), with the backend initialized on it (once per process)."""
    return load_fake()


@pytest.fixture
def device(fake: Any) -> Any:
    yield from open_device(fake)


def test_staged_copies_wrap_the_ring_and_free_the_host_array_at_once(device):
    """Many small and a few large pageable copies, each host array overwritten right after the call."""
    from ironaccel.backends.cuda import STAGING_BYTES

    s, other = device.create_stream(), device.create_stream()
    small = 12345
    count = STAGING_BYTES // small * 2 + 3  # wraps the ring twice
    with device.alloc(small * 64) as buf, device.alloc(STAGING_BYTES + 4097) as big:
        host = np.empty(small, np.uint8)
        for i in range(count):
            host[:] = i % 251
            slot = i % 64  # each slot is written by one stream only: two streams' copies are unordered
            (other if slot % 3 == 0 else s).copy_htod(buf, host, dst_offset=small * slot)
            host[:] = 255
        large = np.random.default_rng(1).integers(0, 256, big.nbytes, dtype=np.uint8)
        s.copy_htod(big, large)
        expect_large = large.copy()
        large[:] = 0
        s.synchronize()
        other.synchronize()
        out = np.empty(buf.nbytes, np.uint8)
        s.copy_dtoh(out, buf)
        out_large = np.empty(big.nbytes, np.uint8)
        s.copy_dtoh(out_large, big)
        s.synchronize()
    last = {i % 64: i % 251 for i in range(count)}
    for slot, value in last.items():
        assert (out[slot * small:(slot + 1) * small] == value).all(), f"slot {slot}"
    np.testing.assert_array_equal(out_large, expect_large)


@pytest.mark.parametrize("extra", [1, 5])
def test_mid_size_copies_are_filled_and_sent_in_pieces_at_any_offset(device, extra):
    """A pageable copy too small for the copy threads is filled into the ring and DMA'd a piece at a time:
    every piece lands at its own offset, also when the size is no multiple of the piece or of 16 bytes (the
    non-temporal stores' alignment) and the host array is overwritten right after the call."""
    from ironaccel.backends.cuda.staging import PARALLEL_COPY_BYTES, PIPELINE_PIECE, SMALL_COPY_BYTES

    s = device.create_stream()
    rng = np.random.default_rng(extra)
    for n in (SMALL_COPY_BYTES + extra, 3 * PIPELINE_PIECE + extra, PARALLEL_COPY_BYTES - extra):
        with device.alloc(n + 2 * extra) as buf:
            s.fill(buf, 0)
            host = rng.integers(0, 256, n, dtype=np.uint8)
            expect = host.copy()
            s.copy_htod(buf, host[:], dst_offset=extra)
            host[:] = 0
            out = np.empty(buf.nbytes, np.uint8)
            s.copy_dtoh(out, buf)
            s.synchronize()
        np.testing.assert_array_equal(out[extra:extra + n], expect, err_msg=f"{n} bytes")
        assert not out[:extra].any() and not out[extra + n:].any(), f"{n} bytes: written outside the range"


@pytest.mark.parametrize("threads", [0, 3])
def test_compiled_copy_threads_fill_every_piece(device, monkeypatch, threads):
    """The compiled staged_copy fills a chunk with the caller and C copy threads and DMAs each piece in order:
    with any number of threads (the host's count is what the bench uses; 3 forces several here), copies of
    one chunk and of several, at an unaligned offset, land byte-exactly, the host array overwritten right
    after the call (the call returns only once no thread reads it)."""
    from ironaccel.backends.cuda import native
    from ironaccel.backends.cuda.staging import STAGING_SEGMENT

    if native.fast is None:
        pytest.skip("the compiled module is not loaded (IRONACCEL_PURE_PYTHON=1 or no compiler)")
    monkeypatch.setattr(device._staging, "_threads", threads)
    s = device.create_stream()
    rng = np.random.default_rng(threads)
    for n in ((1 << 20) + 3, 2 * STAGING_SEGMENT + 5):
        with device.alloc(n + 14) as buf:
            s.fill(buf, 0)
            host = rng.integers(0, 256, n, dtype=np.uint8)
            expect = host.copy()
            s.copy_htod(buf, host, dst_offset=7)
            host[:] = 0
            out = np.empty(buf.nbytes, np.uint8)
            s.copy_dtoh(out, buf)
            s.synchronize()
        np.testing.assert_array_equal(out[7:7 + n], expect, err_msg=f"{n} bytes")
        assert not out[:7].any() and not out[7 + n:].any(), f"{n} bytes: written outside the range"


def test_two_devices_rings_share_the_copy_threads_safely(device, monkeypatch):
    """The compiled copy threads serve one chunk at a time, whichever ring asks: two devices (two rings, two
    locks) copying large arrays from two threads at once each get their own bytes."""
    import threading

    from ironaccel.backends.cuda import CudaBackend, native

    if native.fast is None:
        pytest.skip("the compiled module is not loaded (IRONACCEL_PURE_PYTHON=1 or no compiler)")
    other = CudaBackend().open_device(0)
    n = (1 << 20) + 11  # one chunk: the threads' hand-offs come often
    results: dict[int, bool] = {}

    def copy_rounds(dev: Any, seed: int) -> None:
        monkeypatch.setattr(dev._staging, "_threads", 2)
        s = dev.create_stream()
        rng = np.random.default_rng(seed)
        with dev.alloc(n) as buf:
            ok = True
            for _ in range(24):
                host = rng.integers(0, 256, n, dtype=np.uint8)
                expect = host.copy()
                s.copy_htod(buf, host)
                host[:] = 0
                out = np.empty(n, np.uint8)
                s.copy_dtoh(out, buf)
                s.synchronize()
                ok = ok and bool((out == expect).all())
        results[seed] = ok

    try:
        threads = [threading.Thread(target=copy_rounds, args=(dev, seed)) for seed, dev in ((1, device), (2, other))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == {1: True, 2: True}
    finally:
        other.close()


def test_a_failed_piece_dma_stops_the_copy_and_leaves_the_threads_usable(fake, device, monkeypatch):
    """A DMA that fails in the middle of a threaded chunk raises the typed error naming cuMemcpyHtoDAsync,
    enqueues no DMA after it, and the next large copy (the copy threads done with the failed job) lands."""
    from ironaccel.backends.cuda import native

    if native.fast is None:
        pytest.skip("the compiled module is not loaded (IRONACCEL_PURE_PYTHON=1 or no compiler)")
    monkeypatch.setattr(device._staging, "_threads", 3)
    s = device.create_stream()
    n = 1 << 20  # 8 pieces of 128 KiB with 3 threads
    with device.alloc(n) as buf:
        host = np.full(n, 9, np.uint8)
        before = fake.ironaccel_fake_call_count(b"cuMemcpyHtoDAsync")
        fake.ironaccel_fake_inject(b"cuMemcpyHtoDAsync", 3, CUDA_ERROR_INVALID_VALUE)
        with pytest.raises(ia.DriverError, match="cuMemcpyHtoDAsync"):
            s.copy_htod(buf, host)
        assert fake.ironaccel_fake_call_count(b"cuMemcpyHtoDAsync") == before + 3, "DMAs enqueued after the failure"
        s.synchronize()
        host[:] = 4
        s.copy_htod(buf, host)
        out = np.empty(n, np.uint8)
        s.copy_dtoh(out, buf)
        s.synchronize()
    assert (out == 4).all()


def test_staging_reuses_a_segment_only_when_its_copies_are_done(device):
    """A staged copy of REUSE_BYTES or more on an idle stream that alone used the ring's segment fills it again
    from its start (bytes still in the cache); behind a running kernel the segment is not reused, or the
    second copy would overwrite the first's bytes before their DMA runs."""
    from ironaccel.backends.cuda.staging import REUSE_BYTES

    s, ring = device.create_stream(), device._staging
    n = REUSE_BYTES
    kernel = device.compile(PTX_SPIN, "ptx").kernel("spin")
    for spin in (SPIN_ITERATIONS // 20, SPIN_ITERATIONS // 4, SPIN_ITERATIONS):  # longer where the host was too slow
        with device.alloc(2 * n) as buf, device.alloc(4) as out:
            host = np.full(n, 1, np.uint8)
            for _ in range(3):
                s.copy_htod(buf, host)
                s.synchronize()
            assert ring._used == n, "an idle stream's copy must reuse the segment from its start"
            s.launch(kernel, 1, 1, (out, np.uint32(spin)))
            spun = s.record()
            s.copy_htod(buf, host)  # queued behind the kernel: its staged bytes must stay untouched
            host[:] = 2
            s.copy_htod(buf, host, dst_offset=n)
            used, behind_the_kernel = ring._used, not spun.query()
            result = np.empty(2 * n, np.uint8)
            s.copy_dtoh(result, buf)
            s.synchronize()
        assert (result[:n] == 1).all() and (result[n:] == 2).all()
        if behind_the_kernel:  # else the kernel had ended before the copies: reusing was right, so try longer
            assert used == 3 * n
            return
    pytest.fail("the spin kernel ended before two copies could be queued behind it, three times")


def test_pinned_source_is_copied_directly(fake, device):
    from ironaccel.backends.cuda import PINNED_CHECK_BYTES, native

    cu = native.cu
    n = PINNED_CHECK_BYTES
    ptr = native.calls.cuMemHostAlloc(n, 0)
    try:
        pinned = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(int(ptr)))
        pinned[:] = np.arange(n) % 253
        s = device.create_stream()
        with device.alloc(n) as buf:
            before = fake.ironaccel_fake_call_count(b"cuMemcpyHtoDAsync")
            s.copy_htod(buf, pinned)
            assert fake.ironaccel_fake_call_count(b"cuMemcpyHtoDAsync") == before + 1
            s.synchronize()
            out = np.empty(n, np.uint8)
            s.copy_dtoh(out, buf)
            s.synchronize()
        np.testing.assert_array_equal(out, pinned)
        assert device._staging._base == 0, "a pinned source must not touch the staging ring"
    finally:
        cu.cuMemFreeHost(ptr)


def test_a_pinned_source_may_be_overwritten_when_copy_htod_returns(device):
    """COPY-4 for page-locked host memory too: the copy is enqueued behind a kernel still running, and the
    source is overwritten as soon as copy_htod returns; the device must get what the array held at the call."""
    from ironaccel.backends.cuda import PINNED_CHECK_BYTES, native

    n = 4 * PINNED_CHECK_BYTES
    ptr = native.calls.cuMemHostAlloc(n, 0)
    try:
        pinned = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(int(ptr)))
        pinned[:] = np.arange(n) % 251
        expect = pinned.copy()
        s = device.create_stream()
        spin = device.compile(PTX_SPIN, "ptx").kernel("spin")
        with device.alloc(n) as buf, device.alloc(4) as flag:
            s.launch(spin, 1, 1, (flag, np.uint32(SPIN_ITERATIONS // 10)))
            s.copy_htod(buf, pinned)
            pinned[:] = 0xEE
            s.synchronize()
            out = np.empty(n, np.uint8)
            s.copy_dtoh(out, buf)
            s.synchronize()
        np.testing.assert_array_equal(out, expect)
    finally:
        native.cu.cuMemFreeHost(ptr)


@pytest.mark.parametrize("pure", ["0", "1"])
def test_a_direct_pinned_copy_is_complete_when_copy_htod_returns(tmp_path, pure):
    """COPY-4 on the direct path: a pinned source on an idle stream is DMA'd from the caller's array, so the
    call must wait for that DMA before it returns. The fake started with START_ON_WAIT runs queued work only
    when the host waits or queries, so a copy left queued would read the bytes written after the call."""
    proc = run_script(
        tmp_path,
        "import ctypes\n"
        "import numpy as np\n"
        "from ironaccel.backends.cuda import CudaBackend, PINNED_CHECK_BYTES, native\n"
        "dev = CudaBackend().open_device(0)\n"
        "n = PINNED_CHECK_BYTES\n"
        "ptr = int(native.calls.cuMemHostAlloc(n, 0))\n"
        "pinned = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr))\n"
        "pinned[:] = np.arange(n) % 249\n"
        "expect = pinned.copy()\n"
        "s = dev.create_stream()\n"
        "buf = dev.alloc(n)\n"
        "s.copy_htod(buf, pinned)\n"
        "pinned[:] = 0xEE\n"
        "out = np.empty(n, np.uint8)\n"
        "s.copy_dtoh(out, buf)\n"
        "s.synchronize()\n"
        "assert dev._staging._base == 0, 'not the direct path'\n"
        "print('same' if (out == expect).all() else 'overwritten')\n"
        "buf.free()\n"
        "native.cu.cuMemFreeHost(ptr)\n"
        "dev.close()\n",
        IRONACCEL_FAKE_CUDA_START_ON_WAIT="1", IRONACCEL_PURE_PYTHON=pure)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "same"


PINNED_COPY_SCRIPT = """
import ctypes, gc, weakref
import numpy as np
from ironaccel.backends.cuda import CudaBackend, native
dev = CudaBackend().open_device(0)
s = dev.create_stream()
for n in (256, 64 << 10, 1 << 20):
    ptr = int(native.calls.cuMemHostAlloc(n, 0))
    pinned = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr))
    pinned[:] = 7
    buf = dev.alloc(n)
    getattr(s, COPY)(buf, pinned)
    gone = weakref.ref(pinned)
    view = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr))
    del pinned
    gc.collect()
    held = gone() is not None
    view[:] = 0xEE  # after the call: the direct DMA, run only when the host waits, reads this
    out = np.empty(n, np.uint8)
    s.copy_dtoh(out, buf)
    s.synchronize()
    gc.collect()
    print(n, int(out[0]) if (out == out[0]).all() else "mixed", held, gone() is None)
    buf.free()
    native.cu.cuMemFreeHost(ptr)
print("ring", dev._staging._base != 0)
dev.close()
"""


@pytest.mark.parametrize("pure", ["0", "1"])
def test_a_deferred_pinned_copy_is_the_direct_dma_and_holds_its_source(tmp_path, pure):
    """copy_htod_deferred from page-locked memory is cuMemcpyHtoDAsync straight from the array, with no staging
    copy and no wait: on the fake started with START_ON_WAIT the DMA runs only when the host waits, so it reads
    what the array holds then (0xEE, written after the call). The array is held until that wait (COPY-60)."""
    proc = run_script(tmp_path, "COPY = 'copy_htod_deferred'\n" + PINNED_COPY_SCRIPT,
                      IRONACCEL_FAKE_CUDA_START_ON_WAIT="1", IRONACCEL_PURE_PYTHON=pure)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:4] == ["256 238 True True", "65536 238 True True", "1048576 238 True True",
                                           "ring False"]


@pytest.mark.parametrize("pure", ["0", "1"])
def test_copy_htod_from_pinned_memory_of_any_size_lets_the_caller_reuse_it(tmp_path, pure):
    """COPY-4 beside the deferred copy: copy_htod from the same pinned arrays lands what they held at the call
    (a small one through the ring, a large one DMA'd and waited for) and holds nothing."""
    proc = run_script(tmp_path, "COPY = 'copy_htod'\n" + PINNED_COPY_SCRIPT,
                      IRONACCEL_FAKE_CUDA_START_ON_WAIT="1", IRONACCEL_PURE_PYTHON=pure)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["256 7 False True", "65536 7 False True", "1048576 7 False True"]


def test_a_small_deferred_pageable_copy_is_one_direct_call(fake, device):
    """copy_htod_deferred of pageable memory up to DRIVER_STAGES_BYTES is one cuMemcpyHtoDAsync from the array
    (the driver stages it) and leaves the ring alone; a larger one goes through the ring, as copy_htod."""
    from ironaccel.backends.cuda import DRIVER_STAGES_BYTES

    s = device.create_stream()
    with device.alloc(2 * DRIVER_STAGES_BYTES) as buf:
        for n, ring in ((3, False), (DRIVER_STAGES_BYTES, False), (DRIVER_STAGES_BYTES + 1, True)):
            host = np.arange(n, dtype=np.uint8)
            before = fake.ironaccel_fake_call_count(b"cuMemcpyHtoDAsync")
            s.copy_htod_deferred(buf, host)
            assert fake.ironaccel_fake_call_count(b"cuMemcpyHtoDAsync") == before + 1
            assert (device._staging._base != 0) == ring, n
            out = np.empty(n, np.uint8)
            s.copy_dtoh(out, buf)
            s.synchronize()
            np.testing.assert_array_equal(out, host)


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_tiny_copies_land_in_the_host_array(device, n):
    """The smallest copies both ways (a 1-element array must be taken as memory, never as a number)."""
    s = device.create_stream()
    with device.alloc(64) as buf:
        s.fill(buf, 0)
        s.copy_htod(buf, np.arange(1, n + 1, dtype=np.uint8), dst_offset=5)
        out = np.full(n, 0xEE, np.uint8)
        s.copy_dtoh(out, buf, src_offset=5)
        s.synchronize()
    np.testing.assert_array_equal(out, np.arange(1, n + 1, dtype=np.uint8))


def test_small_copy_htod_checks_hold_on_every_form(device):
    """Stream.copy_htod of a small host array (compiled: _fast_c's StreamCore.copy_htod, on both paths the
    same): any C-contiguous plain-data ndarray, bytes, an offset, a pooled buffer, each landing exactly; and the
    API's errors, naming the op, for what the compiled check hands back (non-contiguous, object and datetime
    arrays, out of range, freed plain and pooled buffers, another device's buffer, a capture, a closed device)."""
    s = device.create_stream()
    pool = ia.MemPool(device, s)
    out = np.zeros(64, np.uint8)
    with device.alloc(64) as buf:
        pooled = pool.alloc(64)
        for target in (buf, pooled):
            for src, offset in ((np.arange(16, dtype=np.uint32).reshape(4, 4), 0), (np.arange(8, dtype=np.uint8), 56),
                                (bytes(range(100, 132)), 16), (np.float64([1.5, -2.0]), 8)):
                expected = np.frombuffer(bytes(memoryview(src)), np.uint8)
                s.fill(target, 0)
                s.copy_htod(target, src, dst_offset=offset)
                s.copy_dtoh(out, target)
                s.synchronize()
                assert out[offset:offset + expected.size].tolist() == expected.tolist(), (type(target).__name__, offset)
                assert not out[:offset].any() and not out[offset + expected.size:].any()
        s.copy_htod(buf, np.zeros(0, np.uint8), dst_offset=64)  # nothing to copy, in range
        op = "Stream.copy_htod"
        for src, offset in ((np.zeros((4, 4), np.uint8)[:, ::2], 0), (np.array([None] * 4, object), 0),
                            (np.zeros(2, "datetime64[s]"), 0), (np.zeros(16, np.uint8), 56), (np.zeros(1, np.uint8), -1),
                            (np.zeros(1, np.uint8), 1.0)):
            with pytest.raises(ia.InvalidArgument, match=op):
                s.copy_htod(buf, src, dst_offset=offset)
        with pytest.raises(TypeError):
            s.copy_htod(buf, np.zeros(4, np.uint8), 0)  # dst_offset is keyword-only
        pooled.free()
        with pytest.raises(ia.UseAfterFree, match=op):
            s.copy_htod(pooled, np.zeros(4, np.uint8))
        with pytest.raises(ia.InvalidArgument, match=op):
            s.copy_htod(s, np.zeros(4, np.uint8))
        from ironaccel.backends.cuda import CudaBackend

        other = CudaBackend().open_device(0)
        try:
            with pytest.raises(ia.InvalidArgument, match="another device"):
                s.copy_htod(other.alloc(64), np.zeros(4, np.uint8))
        finally:
            other.close()
        with s.capture():
            with pytest.raises(ia.InvalidArgument, match=op):
                s.copy_htod(buf, np.zeros(4, np.uint8))
    with pytest.raises(ia.UseAfterFree, match=op):
        s.copy_htod(buf, np.zeros(4, np.uint8))
    kept = device.alloc(64)
    pool.close()
    device.close()
    with pytest.raises(ia.UseAfterFree, match=op):
        s.copy_htod(kept, np.zeros(4, np.uint8))
