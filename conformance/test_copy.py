"""COPY: host<->device and device<->device copies at any size and offset; bad ranges."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest
from hypothesis import example, given, strategies as st

import ironaccel as ia
from ironaccel.backends import get as get_backend
from ironaccel.cts.pytest_plugin import NOT_SUPPORTED_PREFIX

from .helpers import (POISON, RunningWork, child_json, context_current, cuda_driver, poisoned, raises_naming,
                      random_bytes, read)

BUF = 4096


@st.composite
def ranges(draw, size: int = BUF):
    nbytes = draw(st.integers(1, size), label="nbytes")
    offset = draw(st.integers(0, size - nbytes), label="offset")
    return offset, nbytes


@pytest.mark.clause("COPY-1")
@given(r=ranges(), seed=st.integers(0, 2**16))
@example(r=(0, BUF), seed=1)  # the whole buffer
@example(r=(256, 256), seed=2)  # aligned offset and size
@example(r=(4, 4), seed=3)
@example(r=(1, 4), seed=4)  # a word at an unaligned offset
@example(r=(3, 257), seed=5)
@example(r=(BUF - 1, 1), seed=6)  # the last byte
@example(r=(0, 0), seed=7)  # empty ranges, at the start and at the very end
@example(r=(BUF, 0), seed=8)
@example(r=(2, 3), seed=9)  # sizes either side of the 4-byte word and of 256 bytes
@example(r=(5, 5), seed=10)
@example(r=(0, 255), seed=11)
@example(r=(5, 8), seed=12)  # whole words at an unaligned offset
def test_htod_dtoh_round_trip(device, r, seed):
    offset, nbytes = r
    s = device.create_stream()
    with poisoned(device, s, BUF) as buf:
        data = random_bytes(nbytes, seed)
        s.copy_htod(buf, data, dst_offset=offset)
        expect = np.full(BUF, POISON, np.uint8)
        expect[offset:offset + nbytes] = data
        np.testing.assert_array_equal(read(s, buf), expect)
        # and back out of the middle of the buffer
        part = np.zeros(nbytes, np.uint8)
        s.copy_dtoh(part, buf, src_offset=offset)
        s.synchronize()
        np.testing.assert_array_equal(part, data)


@pytest.mark.clause("COPY-1")
@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_round_trip_through_bytes_objects_empty_ones_too(device, stream, kind):
    """Host data need not be an array: a bytes or bytearray object of any size, an empty one at the start and at
    the very end of the buffer included, copies its own bytes and nothing else."""
    for offset, nbytes in ((0, 0), (BUF, 0), (3, 5)):
        with poisoned(device, stream, BUF) as buf:
            data = kind(random_bytes(nbytes, nbytes + 1).tobytes())
            stream.copy_htod(buf, data, dst_offset=offset)
            expect = np.full(BUF, POISON, np.uint8)
            expect[offset:offset + nbytes] = np.frombuffer(bytes(data), np.uint8)
            np.testing.assert_array_equal(read(stream, buf), expect, err_msg=f"{nbytes} bytes at {offset}")
            back = bytearray(nbytes)
            stream.copy_dtoh(back, buf, src_offset=offset)
            stream.synchronize()
            assert bytes(back) == bytes(data), f"copy_dtoh of {nbytes} bytes at {offset} into a bytearray"


KiB = 1 << 10


@pytest.mark.clause("COPY-1")
# sizes that take a backend's other copy paths: past a one-piece staging copy (CUDA's is 64 KiB), several pieces
# of a pipelined one (256 KiB each), and past a 4 MiB ring segment, at offsets that are not word-aligned
@pytest.mark.parametrize("nbytes", [64 * KiB + 1, 1024 * KiB + 3, 4 * 1024 * KiB + 5])
def test_htod_dtoh_round_trip_of_larger_copies(device, stream, nbytes):
    offset = 7
    data = random_bytes(nbytes, nbytes)
    with poisoned(device, stream, offset + nbytes + 9) as buf:
        stream.copy_htod(buf, data, dst_offset=offset)
        back = read(stream, buf)
        assert (back[:offset] == POISON).all() and (back[offset + nbytes:] == POISON).all(), "wrote outside the range"
        mismatch = np.flatnonzero(back[offset:offset + nbytes] != data)
        assert not mismatch.size, f"{mismatch.size} bytes differ, the first at {mismatch[0]}"
        part = np.zeros(nbytes, np.uint8)
        stream.copy_dtoh(part, buf, src_offset=offset)
        stream.synchronize()
        mismatch = np.flatnonzero(part != data)
        assert not mismatch.size, f"copy_dtoh: {mismatch.size} bytes differ, the first at {mismatch[0]}"


@pytest.mark.clause("COPY-2")
@given(src=ranges(), dst_offset=st.integers(0, BUF - 1), seed=st.integers(0, 2**16))
@example(src=(0, BUF), dst_offset=0, seed=1)
@example(src=(256, 256), dst_offset=512, seed=2)
@example(src=(1, 7), dst_offset=2, seed=3)
@example(src=(4, 4), dst_offset=BUF - 4, seed=4)
@example(src=(0, 0), dst_offset=0, seed=5)  # empty ranges
@example(src=(BUF, 0), dst_offset=BUF - 1, seed=6)
@example(src=(3, 255), dst_offset=257, seed=7)  # around 256 bytes, unaligned both sides
@example(src=(0, 257), dst_offset=256, seed=8)
@example(src=(4, 8), dst_offset=10, seed=9)  # aligned source and size, destination off the 4-byte word
@example(src=(8, 6), dst_offset=12, seed=10)  # word-aligned offsets, a size a multiple of 2 and 3 but not of 4
@example(src=(4, 8), dst_offset=3, seed=11)  # aligned source and size, destination 3 bytes into a word
@example(src=(6, 8), dst_offset=4, seed=12)  # aligned destination and size, source a multiple of 2 and 3, not of 4
def test_dtod_any_offsets(device, src, dst_offset, seed):
    src_offset, nbytes = src
    nbytes = min(nbytes, BUF - dst_offset)
    s = device.create_stream()
    data = random_bytes(BUF, seed)
    with device.alloc(BUF) as a, poisoned(device, s, BUF) as b:
        s.copy_htod(a, data)
        s.copy_dtod(b, a, nbytes, dst_offset=dst_offset, src_offset=src_offset)
        expect = np.full(BUF, POISON, np.uint8)
        expect[dst_offset:dst_offset + nbytes] = data[src_offset:src_offset + nbytes]
        np.testing.assert_array_equal(read(s, b), expect)


OUT_OF_RANGE = {  # case -> (op, what the error must name, the call on (stream, buf, other))
    "htod-past-end": ("Stream.copy_htod", "dst range",
                      lambda s, buf, other: s.copy_htod(buf, np.ones(16, np.uint8), dst_offset=49)),
    "htod-negative": ("Stream.copy_htod", "dst offset",
                      lambda s, buf, other: s.copy_htod(buf, np.ones(4, np.uint8), dst_offset=-1)),
    "htod-offset-not-an-int": ("Stream.copy_htod", "dst offset",
                               lambda s, buf, other: s.copy_htod(buf, np.ones(4, np.uint8), dst_offset=1.0)),
    "dtoh-past-end": ("Stream.copy_dtoh", "src range", lambda s, buf, other: s.copy_dtoh(np.ones(65, np.uint8), buf)),
    "dtoh-negative": ("Stream.copy_dtoh", "src offset",
                      lambda s, buf, other: s.copy_dtoh(np.ones(4, np.uint8), buf, src_offset=-2)),
    "dtod-src-past-end": ("Stream.copy_dtod", "src range", lambda s, buf, other: s.copy_dtod(other, buf, 8, src_offset=60)),
    "dtod-dst-past-end": ("Stream.copy_dtod", "dst range", lambda s, buf, other: s.copy_dtod(other, buf, 8, dst_offset=57)),
    "dtod-src-negative": ("Stream.copy_dtod", "src offset", lambda s, buf, other: s.copy_dtod(other, buf, 8, src_offset=-3)),
    "dtod-negative-size": ("Stream.copy_dtod", "nbytes", lambda s, buf, other: s.copy_dtod(other, buf, -8)),
    "dtod-size-not-an-int": ("Stream.copy_dtod", "nbytes", lambda s, buf, other: s.copy_dtod(other, buf, "8")),
    # offset + size past a signed 64-bit sum (issue 31): a check in 64-bit arithmetic must not wrap
    "htod-offset-near-2**63": ("Stream.copy_htod", "dst range",
                               lambda s, buf, other: s.copy_htod(buf, np.ones(16, np.uint8), dst_offset=2**63 - 8)),
    "dtoh-offset-near-2**63": ("Stream.copy_dtoh", "src range",
                               lambda s, buf, other: s.copy_dtoh(np.ones(16, np.uint8), buf, src_offset=2**63 - 8)),
}


@pytest.mark.clause("COPY-3", "ERR-1")
@pytest.mark.parametrize("case", list(OUT_OF_RANGE))
def test_out_of_range_is_invalid_and_copies_nothing(device, stream, case):
    op, what, call = OUT_OF_RANGE[case]
    with poisoned(device, stream, 64) as buf, poisoned(device, stream, 64) as other:
        with raises_naming(ia.InvalidArgument, op, what):
            call(stream, buf, other)
        assert (read(stream, buf) == POISON).all() and (read(stream, other) == POISON).all()


@pytest.mark.clause("ERR-3", "ERR-1")
def test_buffer_arguments_that_are_no_buffer_of_the_device_are_named(device, stream):
    """Each buffer argument of the copies and fills, given a host array, None or a Buffer of another device."""
    second = get_backend(device.info.backend).open_device(device.info.index)
    host = np.ones(16, np.uint8)
    try:
        with poisoned(device, stream, 64) as buf, second.alloc(64) as foreign:
            for bad in (host, None, foreign):
                for op, what, call in [
                    ("Stream.copy_htod", "dst", lambda bad: stream.copy_htod(bad, host)),
                    ("Stream.copy_dtoh", "src", lambda bad: stream.copy_dtoh(host, bad)),
                    ("Stream.copy_dtod", "dst", lambda bad: stream.copy_dtod(bad, buf, 16)),
                    ("Stream.copy_dtod", "src", lambda bad: stream.copy_dtod(buf, bad, 16)),
                    ("Stream.fill", "buf", lambda bad: stream.fill(bad, 1)),
                ]:
                    with raises_naming(ia.InvalidArgument, op, what):
                        call(bad)
            assert (read(stream, buf) == POISON).all() and (host == 1).all(), "a rejected copy or fill wrote"
    finally:
        second.close()


@pytest.mark.clause("COPY-4")
def test_htod_source_reusable_on_return(device, stream, kernels):
    n = 1 << 16
    host = random_bytes(n, 11)
    expect = host.copy()
    work = RunningWork(device, stream, kernels)
    try:
        with device.alloc(n) as buf:
            work.enqueue(stream)  # the copy queues behind it: a backend that reads the host array later reads 0x11
            stream.copy_htod(buf, host)
            host[:] = 0x11  # overwrite before the device is known to have the data
            np.testing.assert_array_equal(read(stream, buf), expect)
        work.check(stream)
    finally:
        work.free()


@pytest.mark.clause("COPY-5", "ERR-1")
def test_host_layout_errors(device, stream):
    with device.alloc(64) as buf:
        strided = np.zeros(32, np.uint16)[::2]
        with raises_naming(ia.InvalidArgument, "Stream.copy_htod", "contiguous"):
            stream.copy_htod(buf, strided)
        readonly = np.zeros(16, np.uint8)
        readonly.flags.writeable = False
        with raises_naming(ia.InvalidArgument, "Stream.copy_dtoh", "read-only"):
            stream.copy_dtoh(readonly, buf)
        with raises_naming(ia.InvalidArgument, "Stream.copy_htod", "buffer protocol"):
            stream.copy_htod(buf, [1, 2, 3])
        # 2-D and typed arrays are fine: bytes are bytes
        grid = np.arange(16, dtype=np.float32).reshape(4, 4)
        stream.copy_htod(buf, grid)
        np.testing.assert_array_equal(read(stream, buf, np.float32), grid.ravel())
        # a source need not be writable: a read-only array, bytes
        readonly = random_bytes(64, 14)
        readonly.flags.writeable = False
        stream.copy_htod(buf, readonly)
        np.testing.assert_array_equal(read(stream, buf), readonly)
        stream.copy_htod(buf, bytes(range(64)))
        np.testing.assert_array_equal(read(stream, buf), np.arange(64, dtype=np.uint8))



@pytest.mark.clause("COPY-5")
@pytest.mark.parametrize("nbytes", [1, 2, 5])
def test_host_data_that_is_no_array_copies_its_bytes(device, stream, nbytes):
    """`bytes`, `bytearray` and `memoryview` take the general host path, not an ndarray's: a single byte of
    them is data to copy like any other size (a path that took one byte for none copies nothing)."""
    data = random_bytes(nbytes, nbytes).tobytes()
    offset = 3
    with poisoned(device, stream, offset + nbytes + 4) as buf:
        expect = np.full(buf.nbytes, POISON, np.uint8)
        expect[offset:offset + nbytes] = np.frombuffer(data, np.uint8)
        for source in (data, bytearray(data), memoryview(data)):
            stream.fill(buf, POISON)
            stream.copy_htod(buf, source, dst_offset=offset)
            np.testing.assert_array_equal(read(stream, buf), expect, err_msg=f"copy_htod from {type(source).__name__}")
        for back in (bytearray(nbytes), memoryview(bytearray(nbytes))):
            stream.copy_dtoh(back, buf, src_offset=offset)
            stream.synchronize()
            assert bytes(back) == data, f"copy_dtoh into a {type(back).__name__} of {nbytes} bytes: {bytes(back)!r}"

NOT_DATA = {
    "object": lambda: np.empty(16, object),
    "structured with an object field": lambda: np.zeros(2, [("n", np.int32), ("o", object)]),
    "datetime64": lambda: np.zeros(2, "datetime64[s]"),
    "memoryview of objects": lambda: memoryview(np.empty(2, object)),
}


@pytest.mark.clause("COPY-7", "ERR-1")
@pytest.mark.parametrize("kind", sorted(NOT_DATA))
def test_host_arrays_that_are_not_data_are_rejected(device, stream, kind):
    with poisoned(device, stream, 64) as buf:
        with pytest.raises(ia.InvalidArgument, match=r"^Stream\.copy_htod: "):
            stream.copy_htod(buf, NOT_DATA[kind]())
        host = NOT_DATA[kind]()
        with pytest.raises(ia.InvalidArgument, match=r"^Stream\.copy_dtoh: "):
            stream.copy_dtoh(host, buf)
        repr(host)  # a copy into an object array would plant pointers that this dereferences
        assert (read(stream, buf) == POISON).all(), "a rejected copy wrote to the buffer"


@pytest.mark.clause("COPY-6", "ERR-1")
def test_dtod_within_one_buffer(device, stream):
    data = random_bytes(256, 5)
    with device.alloc(256) as buf:
        stream.copy_htod(buf, data)
        stream.copy_dtod(buf, buf, 61, dst_offset=131, src_offset=3)
        expect = data.copy()
        expect[131:192] = data[3:64]
        np.testing.assert_array_equal(read(stream, buf), expect)
        stream.copy_dtod(buf, buf, 33, dst_offset=5, src_offset=70)  # source past the first word, unaligned
        expect[5:38] = expect[70:103]
        np.testing.assert_array_equal(read(stream, buf), expect)
        stream.copy_dtod(buf, buf, 16, dst_offset=201, src_offset=185)  # adjacent ranges do not overlap
        expect[201:217] = expect[185:201]
        stream.copy_dtod(buf, buf, 15, dst_offset=217, src_offset=232)
        expect[217:232] = expect[232:247]
        stream.copy_dtod(buf, buf, 16, dst_offset=200, src_offset=184)  # aligned: a copy within one buffer too
        expect[200:216] = expect[184:200]
        np.testing.assert_array_equal(read(stream, buf), expect)
        with raises_naming(ia.InvalidArgument, "Stream.copy_dtod", "overlap"):
            stream.copy_dtod(buf, buf, 64, dst_offset=10, src_offset=0)


BIG = 40 << 20  # more than any staging ring a backend keeps (CUDA's pinned ring is 32 MiB)


@pytest.mark.clause("COPY-8")
def test_large_copies_behind_running_work(device, stream, kernels):
    offset = 4099  # unaligned, and not a multiple of any segment size
    n = min(BIG, device.info.limits.max_alloc - offset)
    work = RunningWork(device, stream, kernels)
    data = random_bytes(n, 12)
    try:
        with poisoned(device, stream, n + offset) as buf:
            stream.synchronize()
            work.enqueue(stream)  # the copies queue behind it: staging they use must stay untouched till they run
            stream.copy_htod(buf, data, dst_offset=offset)
            back = np.zeros(n, np.uint8)
            stream.copy_dtoh(back, buf, src_offset=offset)
            stream.synchronize()
            mismatch = np.flatnonzero(back != data)
            assert not mismatch.size, f"{mismatch.size} bytes differ, the first at {mismatch[0]}"
            assert (read(stream, buf, count=offset) == POISON).all(), "the copy wrote before its offset"
        work.check(stream)
    finally:
        work.free()


STAGED_SIZES = (1, 3, 64, 255, 4096, 4099, 65535, 65536, 65537, 1 << 20)  # one round: about 1.2 MiB
STAGED_TOTAL = 48 << 20  # more than any backend's staging ring (CUDA's: 32 MiB)


@pytest.mark.clause("COPY-9")
def test_many_copies_through_one_reused_host_array(device, stream, kernels):
    """Each copy_htod reads the host array as it is at the call, and each copy_dtoh fills its own part, when a
    staging slot, segment or readback buffer is taken again while the copies before are still queued (behind
    work long enough that, where copies are enqueued faster than they run, the rings go round under it)."""
    pattern = random_bytes((1 << 20) + 256, 13)
    sizes = []
    while sum(sizes) < min(STAGED_TOTAL, device.info.limits.max_alloc // 2):
        sizes += STAGED_SIZES
    offsets = np.cumsum([1] + sizes)  # from byte 1: nothing is aligned
    expect = np.full(int(offsets[-1]), POISON, np.uint8)
    for i, (size, at) in enumerate(zip(sizes, offsets)):
        expect[at:at + size] = pattern[i % 256:i % 256 + size]
    host = np.empty(max(sizes), np.uint8)  # one array, rewritten before every copy
    work = RunningWork(device, stream, kernels, seconds=0.3)
    try:
        with poisoned(device, stream, expect.size) as buf:
            stream.synchronize()
            work.enqueue(stream)  # every copy queues behind it
            for i, (size, at) in enumerate(zip(sizes, offsets)):
                host[:size] = pattern[i % 256:i % 256 + size]
                stream.copy_htod(buf, host[:size], dst_offset=int(at))
            back = np.zeros_like(expect)
            for size, at in zip(sizes, offsets):  # readbacks into parts of one array, as many, no wait between
                stream.copy_dtoh(back[at:at + size], buf, src_offset=int(at))
            stream.synchronize()
            for what, got, want in (("copy_htod", read(stream, buf), expect), ("copy_dtoh", back[1:], expect[1:])):
                wrong = np.flatnonzero(got != want)
                assert not wrong.size, f"{what}: {wrong.size} bytes differ, the first at {wrong[0]}"
        work.check(stream)
    finally:
        work.free()


@pytest.mark.clause("COPY-30")
def test_copy_htod_lets_go_of_its_host_data(device, stream):
    """COPY-4 lets the caller overwrite the source as soon as copy_htod returns; nor may the library keep
    the source itself: an export of its buffer left unreleased on some path (a staging ring that had to
    advance, say) keeps every array alive and a bytearray unresizable. Small copies, together more than any
    staging segment, and a large one, from fresh arrays: once the stream is synchronized nothing holds them."""
    sizes = [48 << 10] * 160 + [3, 4099, 5 << 20]  # 7.5 MiB of small copies: staging segments fill and advance
    with poisoned(device, stream, max(sizes) + 1) as buf:
        gone = []
        for i, size in enumerate(sizes):
            host = random_bytes(size, seed=i)
            stream.copy_htod(buf, host, dst_offset=1)
            gone.append(weakref.ref(host))
        del host
        raw = bytearray(random_bytes(4099, seed=7).tobytes())
        stream.copy_htod(buf, raw, dst_offset=1)
        try:
            raw.extend(b"still resizable")
        except BufferError:
            pytest.fail("a bytearray given to copy_htod cannot be resized after the call: an export of it is held")
        stream.copy_htod(buf, bytes(raw[:4099]), dst_offset=1)
        stream.synchronize()
        gc.collect()
        held = sum(ref() is not None for ref in gone)
        assert not held, f"{held} of {len(gone)} host arrays given to copy_htod are still referenced after it"
        np.testing.assert_array_equal(read(stream, buf, count=4099, offset=1), np.frombuffer(raw[:4099], np.uint8))


@pytest.mark.clause("COPY-31")
def test_large_copies_between_runs_of_small_ones_behind_running_work(device, stream, kernels):
    """A large copy_htod is staged in pieces (filled by several threads on CUDA) into a ring whose other parts
    still hold the data of small copies queued before it: filling one piece too many, or past its part, changes
    what those copies land. Runs of small copies (4 MiB each) and copies of 4 MiB + 1 byte, alternating, more
    than twice any staging ring a backend keeps, all enqueued behind running work, each land their own bytes."""
    pattern = random_bytes(6 << 20, 17)
    sizes: list[int] = []
    while sum(sizes) < min(64 << 20, device.info.limits.max_alloc // 2):
        sizes += [(64 << 10) - 3] * 64 + [(4 << 20) + 1]
    offsets = np.cumsum([0] + sizes)
    work = RunningWork(device, stream, kernels, seconds=0.5)
    try:
        with poisoned(device, stream, int(offsets[-1])) as buf:
            stream.synchronize()
            work.enqueue(stream)  # every copy queues behind it
            for i, (size, at) in enumerate(zip(sizes, offsets)):
                stream.copy_htod(buf, pattern[i % 4096:i % 4096 + size], dst_offset=int(at))
            got = read(stream, buf)
            wrong = [i for i, (size, at) in enumerate(zip(sizes, offsets))
                     if not np.array_equal(got[at:at + size], pattern[i % 4096:i % 4096 + size])]
            assert not wrong, f"{len(wrong)} of {len(sizes)} copies landed other bytes, the first copy {wrong[0]} " \
                              f"({sizes[wrong[0]]} bytes)"
        work.check(stream)
    finally:
        work.free()


@pytest.mark.clause("COPY-60")
def test_deferred_htod_lands_its_source_dropped_on_return(device, stream, kernels):
    """copy_htod_deferred may read its source when the stream gets to the copy, behind work still running; the
    caller leaves the bytes unchanged but need not keep the array: the library keeps it until the stream is
    synchronized (a backend DMA-ing from freed memory lands what reused it, 0xEE here), then lets it go."""
    sizes = [1, 4099, 64 << 10, (1 << 20) + 3]
    work = RunningWork(device, stream, kernels)
    try:
        with poisoned(device, stream, max(sizes) + 1) as buf:
            for seed, n in enumerate(sizes):
                host = random_bytes(n, seed=seed)
                expect, gone = host.copy(), weakref.ref(host)
                work.enqueue(stream)  # the copy queues behind it
                stream.copy_htod_deferred(buf, host, dst_offset=1)
                del host
                reuse = [np.full(n, 0xEE, np.uint8) for _ in range(4)]  # takes the memory of a freed source
                np.testing.assert_array_equal(read(stream, buf, count=n, offset=1), expect)
                del reuse
                gc.collect()
                assert gone() is None, f"copy_htod_deferred of {n} B still holds its source after a synchronize"
                work.check(stream)
    finally:
        work.free()


@pytest.mark.clause("COPY-61", "ERR-1")
def test_deferred_htod_checks_as_copy_htod(device, stream):
    """The checks of copy_htod (ranges, layout, plain data), named Stream.copy_htod_deferred; nothing written."""
    op = "Stream.copy_htod_deferred"
    with poisoned(device, stream, 64) as buf:
        with raises_naming(ia.InvalidArgument, op, "dst"):
            stream.copy_htod_deferred(buf, np.zeros(16, np.uint8), dst_offset=60)
        with raises_naming(ia.InvalidArgument, op, "dst"):
            stream.copy_htod_deferred(buf, np.zeros(16, np.uint8), dst_offset=-1)
        with raises_naming(ia.InvalidArgument, op, "contiguous"):
            stream.copy_htod_deferred(buf, np.zeros(32, np.uint16)[::2])
        with raises_naming(ia.InvalidArgument, op, "buffer protocol"):
            stream.copy_htod_deferred(buf, [1, 2, 3])
        with raises_naming(ia.InvalidArgument, op, "dst must be a Buffer"):
            stream.copy_htod_deferred(np.zeros(64, np.uint8), b"\x01\x02\x03")
        stream.copy_htod_deferred(buf, b"\x01\x02\x03", dst_offset=61)  # read-only host data is fine
        out = read(stream, buf)
    assert (out[:61] == POISON).all()
    np.testing.assert_array_equal(out[61:], [1, 2, 3])


@contextlib.contextmanager
def page_locked(device, stream, n: int):
    """``n`` bytes of page-locked host memory from the CUDA driver (cuMemHostAlloc), as a numpy array; freed on
    exit once the device is idle (the library lets go of the arrays it was given at a synchronize)."""
    stream.synchronize()
    with context_current(device) as driver:
        err, address = driver.cuMemHostAlloc(n, 0)
        assert not err, f"cuMemHostAlloc({n}): {err}"
    host = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(int(address)))
    try:
        yield host
    finally:
        device.synchronize()
        del host
        gc.collect()  # the library's views of the array: none may outlive the memory
        err, = driver.cuMemFreeHost(address)
        assert not err, f"cuMemFreeHost: {err}"


@pytest.mark.clause("COPY-67")
def test_a_deferred_copy_from_page_locked_memory_does_not_wait_for_the_streams_work(device, stream, kernels):
    """CUDA: a page-locked source is what copy_htod_deferred exists for (COPY-60): the driver DMAs from the array
    when the stream gets to the copy. A backend that stages it through its ring instead (copy_htod's way) copies
    it twice, and a source larger than the ring (32 MiB) must wait for the DMA of its own first chunks, behind
    the running work, before it can fill the ring again: the call then returns only once that work is done."""
    cuda_driver(device, "cuMemHostAlloc")
    n = BIG
    with page_locked(device, stream, n) as host:
        expect = random_bytes(n, seed=67)
        host[:] = expect
        with poisoned(device, stream, n + 1) as buf:
            for work in RunningWork.tries(device, stream, kernels):
                work.enqueue(stream)
                stream.copy_htod_deferred(buf, host, dst_offset=1)
                in_time = work.looked_in_time()
                got = read(stream, buf, count=n, offset=1)
                mismatch = np.flatnonzero(got != expect)
                assert not mismatch.size, f"{mismatch.size} bytes differ, the first at {mismatch[0]}"
                work.check(stream)
                if in_time:
                    return
            pytest.fail(f"copy_htod_deferred of {n >> 20} MiB of page-locked memory returned only after most of the "
                        f"work queued before it had run, however long the work: it waited for the stream")


PAGEABLE_BEHIND_WORK = 28 << 20  # COPY-69: 7 of CUDA's 8 ring segments, so that copy itself never waits for the work
PINNED_ON_IDLE = 12 << 20  # COPY-69: staged, it would need three segments, at least one still queued for the other


@pytest.mark.clause("COPY-69")
def test_a_page_locked_copy_on_an_idle_stream_does_not_wait_for_another_streams_work(device, stream, kernels):
    """CUDA: a page-locked source of an idle stream's copy_htod can be DMA'd directly and waited for (COPY-4),
    which takes only the copy's own time. A backend that stages it through its ring instead (a pageable source's
    way) needs ring segments that another stream's copies, queued behind that stream's running work, have filled:
    it waits for that work before it can fill them again, though the two streams share nothing."""
    cuda_driver(device, "cuMemHostAlloc")
    n = PINNED_ON_IDLE
    other = device.create_stream()
    with page_locked(device, stream, n) as host:
        expect = random_bytes(n, seed=69)
        host[:] = expect
        pageable = random_bytes(PAGEABLE_BEHIND_WORK, seed=70)
        with poisoned(device, stream, PAGEABLE_BEHIND_WORK) as busy_buf, poisoned(device, other, n + 1) as buf:
            for work in RunningWork.tries(device, stream, kernels):
                stream.synchronize()
                other.synchronize()  # idle: nothing of its own queued
                work.enqueue(stream)
                stream.copy_htod(busy_buf, pageable)  # staged: the ring's segments queued behind the work
                other.copy_htod(buf, host, dst_offset=1)
                in_time = work.looked_in_time()
                host[:] = 0  # COPY-4: the source may be reused once the call returns
                got = read(other, buf, count=n, offset=1)
                mismatch = np.flatnonzero(got != expect)
                assert not mismatch.size, f"{mismatch.size} bytes differ, the first at {mismatch[0]}"
                host[:] = expect
                busy = read(stream, busy_buf)
                mismatch = np.flatnonzero(busy != pageable)
                assert not mismatch.size, (f"the busy stream's copy: {mismatch.size} bytes differ, "
                                           f"the first at {mismatch[0]}")
                work.check(stream)
                if in_time:
                    return
            pytest.fail(f"copy_htod of {n >> 20} MiB of page-locked memory on an idle stream returned only after "
                        f"most of another stream's work had run, however long the work: it waited for that stream")


IDLE_COPY = 16 << 10  # COPY-75: the smallest copy CUDA's ring refills its segment for (REUSE_BYTES)
IDLE_COPIES = 2560  # COPY-75: 40 MiB of them, more than any staging ring a backend keeps


@pytest.mark.clause("COPY-75")
def test_an_idle_streams_small_copies_do_not_wait_for_another_streams_work(device, stream, kernels):
    """CUDA: a device's streams share its staging ring, fenced per segment, so a copy that enters a segment again
    waits for every stream that copied from it: the busy stream's copy, queued behind its work, is in one. An
    idle stream that alone uses its segment may fill it again from its start (from 16 KiB), and so never comes
    back round to that one; a ring that does not (at 16 KiB exactly: a comparison off by one) takes the next
    segments in turn, and after 32 MiB waits for the other stream's work, which its copies have nothing to do
    with."""
    if device.info.backend != "cuda":
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a CUDA device (its staging ring shared by streams)")
    other = device.create_stream()
    busy_data = random_bytes(BUF, seed=75)
    idle_data = random_bytes(IDLE_COPY * IDLE_COPIES, seed=76)
    with poisoned(device, stream, BUF) as busy_buf, poisoned(device, other, idle_data.nbytes) as idle_buf:
        for work in RunningWork.tries(device, stream, kernels, seconds=1.0):
            stream.synchronize()
            work.enqueue(stream)
            stream.copy_htod(busy_buf, busy_data)  # staged: its segment fenced behind the work
            for at in range(0, idle_data.nbytes, IDLE_COPY):
                other.synchronize()  # idle: its own copies done, the busy stream's still queued
                other.copy_htod(idle_buf, idle_data[at:at + IDLE_COPY], dst_offset=at)
            in_time = work.looked_in_time()
            for name, s, buf, data in (("busy", stream, busy_buf, busy_data), ("idle", other, idle_buf, idle_data)):
                wrong = np.flatnonzero(read(s, buf) != data)
                assert not wrong.size, f"the {name} stream's copies: {wrong.size} bytes differ, the first at {wrong[0]}"
            work.check(stream)
            if in_time:
                return
        pytest.fail(f"{IDLE_COPIES} copy_htods of {IDLE_COPY >> 10} KiB on an idle stream returned only after most of "
                    f"another stream's work had run, however long the work: they waited for that stream")


PINNED_REUSED = 64 << 20  # COPY-76: a DMA of it takes a millisecond or more, a page's overwrite microseconds
OVERWRITE_STRIDE = 4 << 20  # COPY-76: one page overwritten in every 4 MiB, head to tail, at once


@pytest.mark.clause("COPY-76")
def test_a_page_locked_source_of_an_idle_stream_is_reusable_on_return(device, stream):
    """CUDA: an idle stream's copy_htod of a page-locked array is the one the driver may DMA straight from the
    array, asynchronously; the call must wait for that DMA before it returns (COPY-4). A page in every 4 MiB,
    overwritten the moment it returns, lands as it was at the call: a copy still running then reads at least
    the last of them (a DMA front to back) or the first (back to front). Three rounds, each on an idle stream."""
    cuda_driver(device, "cuMemHostAlloc")
    n = PINNED_REUSED
    expect = random_bytes(n, seed=76)
    with page_locked(device, stream, n) as host, poisoned(device, stream, n) as buf:
        pages = host.reshape(-1, OVERWRITE_STRIDE)[:, :4096]
        flipped = ~expect.reshape(-1, OVERWRITE_STRIDE)[:, :4096]  # every byte differs from what the call saw
        for _ in range(3):
            host[:] = expect
            stream.synchronize()  # idle: nothing queued before the copy
            stream.copy_htod(buf, host)
            pages[:] = flipped  # COPY-4: the source may be reused once the call returns
            got = read(stream, buf)
            wrong = np.flatnonzero(got != expect)
            assert not wrong.size, (f"copy_htod of {n >> 20} MiB of page-locked memory on an idle stream read the "
                                    f"array after it returned: {wrong.size} bytes differ, the first at {wrong[0]}")


#: ops on a pooled buffer of 1000 bytes (its block is 1 KiB), each at or past its end: (op, what the error
#: names, the call on (stream, pooled, plain)); a check against the block's size accepts all but the last two
POOLED_PAST_END = {
    "htod": ("Stream.copy_htod", "dst", lambda s, p, q: s.copy_htod(p, np.ones(16, np.uint8), dst_offset=992)),
    "htod-deferred": ("Stream.copy_htod_deferred", "dst",
                      lambda s, p, q: s.copy_htod_deferred(p, np.ones(16, np.uint8), dst_offset=992)),
    "dtoh": ("Stream.copy_dtoh", "src", lambda s, p, q: s.copy_dtoh(np.ones(16, np.uint8), p, src_offset=992)),
    "dtod-dst": ("Stream.copy_dtod", "dst", lambda s, p, q: s.copy_dtod(p, q, 16, dst_offset=992)),
    "dtod-src": ("Stream.copy_dtod", "src", lambda s, p, q: s.copy_dtod(q, p, 16, src_offset=992)),
    "fill": ("Stream.fill", "buf", lambda s, p, q: s.fill(p, 1, offset=992, nbytes=16)),
    "fill-at-end": ("Stream.fill", "buf", lambda s, p, q: s.fill(p, 1, offset=1001)),
    "htod-at-end": ("Stream.copy_htod", "dst", lambda s, p, q: s.copy_htod(p, np.ones(1, np.uint8), dst_offset=1000)),
}


@pytest.mark.clause("COPY-63", "ERR-1")
def test_a_pooled_buffers_range_is_its_own_size_not_its_blocks(device, stream):
    """A MemPool serves 1000 bytes from a 1 KiB block: every range check is against the 1000 bytes the
    caller asked for (a check that reads the block's size, as a compiled fast path holding the block may,
    lets a copy write bytes past the buffer), and each op is first run up to the very end, twice."""
    with ia.MemPool(device, stream) as pool, poisoned(device, stream, 64) as plain:
        buf = pool.alloc(1000)
        stream.fill(buf, POISON)
        data = random_bytes(8, 1)
        for _ in range(2):  # good calls first: a compiled path remembers what it has seen
            stream.copy_htod(buf, data, dst_offset=992)
            stream.copy_htod_deferred(buf, data, dst_offset=992)
            stream.copy_dtod(plain, buf, 8, src_offset=992)
            stream.copy_dtod(buf, plain, 8, dst_offset=992)
            stream.fill(buf, POISON, offset=992)
        for case, (op, what, call) in POOLED_PAST_END.items():
            with raises_naming(ia.InvalidArgument, op, what):
                call(stream, buf, plain)
                pytest.fail(f"{case}: accepted a range past the pooled buffer's 1000 bytes")
        got = np.zeros(1000, np.uint8)
        stream.copy_dtoh(got, buf)
        stream.synchronize()
        assert (got == POISON).all(), "a rejected op wrote the pooled buffer"
        buf.free()


#: copy sizes at the edges a backend's copy paths switch at: every size over two 64-byte periods from just
#: under 16 KiB (CUDA's switch to streaming stores, 64 bytes a step, then the tail), and one either side of
#: 64 KiB (one-piece staging), 256 KiB (pipelined pieces), 2 MiB (parallel fills) and 4 MiB (a ring segment)
EDGE_SIZES = [*range((16 << 10) - 2, (16 << 10) + 128), *(edge + d for edge in (64 << 10, 256 << 10, 2 << 20, 4 << 20)
                                                           for d in (-1, 0, 1))]


@pytest.mark.clause("COPY-64")
def test_copies_of_every_size_at_the_copy_paths_edges_land_exactly(device, stream):
    """Each size's copy_htod lands in its own range of one buffer, back to back, and is read back both as a
    whole and by its own copy_dtoh: a vectorized fill whose tail loop is off by one (it takes a 64-byte step
    where 63 bytes are left) or a path switch that loses the last piece shows up at one of these sizes."""
    total = sum(EDGE_SIZES)
    data = random_bytes(total, 64)
    starts = np.cumsum([0, *EDGE_SIZES])
    with poisoned(device, stream, total + 1) as buf:
        for n, at in zip(EDGE_SIZES, starts):
            stream.copy_htod(buf, data[at:at + n], dst_offset=int(at))
        back = read(stream, buf)
        assert back[total] == POISON, "a copy wrote past its range"
        for n, at in zip(EDGE_SIZES, starts):
            wrong = np.flatnonzero(back[at:at + n] != data[at:at + n])
            assert not wrong.size, f"copy_htod of {n} bytes: {wrong.size} bytes differ, the first at {wrong[0]}"
        outs = [np.zeros(n + 1, np.uint8) for n in EDGE_SIZES]
        for out, n, at in zip(outs, EDGE_SIZES, starts):
            stream.copy_dtoh(out[:n], buf, src_offset=int(at))
        stream.synchronize()
        for out, n, at in zip(outs, EDGE_SIZES, starts):
            wrong = np.flatnonzero(out[:n] != data[at:at + n])
            assert not wrong.size, f"copy_dtoh of {n} bytes: {wrong.size} bytes differ, the first at {wrong[0]}"
            assert out[n] == 0, f"copy_dtoh of {n} bytes wrote past its host range"


#: one round of COPY-66: on the busy stream a copy that fills a staging segment (CUDA's: 4 MiB) and a small one
#: (then the first of a fresh segment), on the idle stream two small ones from 16 KiB (where CUDA's ring may take
#: its current segment again from the start), the idle stream synchronized before each
CROSS_STREAM_ROUND = ((4 << 20, (64 << 10) - 3), (16 << 10, (16 << 10) + 5))


@pytest.mark.clause("COPY-66")
def test_an_idle_streams_copies_leave_a_busy_streams_queued_copies_alone(device, stream, kernels):
    """A device's streams share its staging: a backend that fills staging again from its start for a copy on an
    idle stream (its own earlier copies done) must ask whether another stream's copies still read those bytes.
    One that asks only whether the copying stream is idle, or takes bytes another stream used too, overwrites
    what the busy stream's queued copies are still to DMA, and they land the idle stream's bytes instead."""
    busy_sizes, idle_sizes = CROSS_STREAM_ROUND
    rounds = 3  # CUDA: 6 of its ring's 8 segments, so no segment is waited for while the work runs
    busy_total, idle_total = rounds * sum(busy_sizes), rounds * sum(idle_sizes)
    busy_data, idle_data = random_bytes(busy_total, 66), random_bytes(idle_total, 67)
    other = device.create_stream()
    work = RunningWork(device, stream, kernels, seconds=1.0)
    try:
        with poisoned(device, stream, busy_total) as busy_buf, poisoned(device, other, idle_total) as idle_buf:
            stream.synchronize()
            other.synchronize()
            work.enqueue(stream)  # every copy on stream queues behind it
            busy_at = idle_at = 0
            for _ in range(rounds):
                for n in busy_sizes:
                    stream.copy_htod(busy_buf, busy_data[busy_at:busy_at + n], dst_offset=busy_at)
                    busy_at += n
                for n in idle_sizes:
                    other.synchronize()  # idle: its own copies done, the busy stream's still queued
                    other.copy_htod(idle_buf, idle_data[idle_at:idle_at + n], dst_offset=idle_at)
                    idle_at += n
            for name, s, buf, data in (("busy", stream, busy_buf, busy_data), ("idle", other, idle_buf, idle_data)):
                wrong = np.flatnonzero(read(s, buf) != data)
                assert not wrong.size, f"the {name} stream's copies: {wrong.size} bytes differ, the first at {wrong[0]}"
        work.check(stream)
    finally:
        work.free()


#: the child of COPY-68: opens the target's device (argv[1]) and copies host arrays that end where a mapping ends,
#: its next page made inaccessible (mprotect PROT_NONE), each after a 1..3-byte copy on a second stream (which moves
#: where a shared staging ring puts the next copy); prints what did not land, or "ok". A read or write past the
#: array's end kills it with SIGSEGV.
GUARDED_COPY_CHILD = """
import ctypes, mmap, sys
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
page = mmap.PAGESIZE
sizes = [16 << 10, (16 << 10) + 5, (64 << 10) - 3, 64 << 10, (256 << 10) + 7]
span = -(-max(sizes) // page) * page
mapping = mmap.mmap(-1, span + page)
base = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
libc = ctypes.CDLL(None, use_errno=True)
if libc.mprotect(ctypes.c_void_p(base + span), ctypes.c_size_t(page), 0):
    raise OSError(ctypes.get_errno(), "mprotect")
a, b = device.create_stream(), device.create_stream()
wrong = []
with device.alloc(max(sizes)) as buf, device.alloc(16) as nudge:
    for shift in range(1, 4):
        for n in sizes:
            host = np.frombuffer(mapping, np.uint8, n, span - n)
            host[:] = np.random.default_rng(n + shift).integers(0, 256, n, np.uint8)
            b.copy_htod(nudge, np.ones(shift, np.uint8))
            a.copy_htod(buf, host)
            out = np.zeros(n, np.uint8)
            a.copy_dtoh(out, buf)
            a.synchronize()  # a copy_dtoh's array is written once the stream is waited for
            if not np.array_equal(out, host):
                wrong.append(f"copy_htod of {n} bytes (after {shift})")
            host[:] = 0
            a.copy_dtoh(host, buf)
            a.synchronize()
            if not np.array_equal(out, host):
                wrong.append(f"copy_dtoh of {n} bytes (after {shift})")
            del host
print("; ".join(wrong) or "ok")
"""


@pytest.mark.clause("COPY-68")
def test_copies_touch_no_host_byte_past_the_array(target):
    """A host array may end where the process's memory ends (the tail of a file's np.memmap, a buffer at the
    end of an mmap): a copy that reads or writes a byte past it crashes the process there, and elsewhere reads
    or overwrites whatever follows. The array here ends at a PROT_NONE page, so any such byte is a SIGSEGV; a
    child process runs it so that the crash is reported rather than ending the run."""
    if not sys.platform.startswith("linux"):
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}mprotect through the C library (Linux)")
    proc = subprocess.run([sys.executable, "-c", GUARDED_COPY_CHILD, target.name], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **target.environment()})
    assert proc.returncode == 0, (f"copies from and to host arrays that end at an inaccessible page: the process "
                                  f"ended with {proc.returncode} (a negative number is the signal): "
                                  f"{proc.stderr[-1500:]}")
    said = proc.stdout.strip().splitlines()[-1]
    assert said == "ok", f"copies from and to host arrays that end at an inaccessible page did not land: {said}"


#: each op with its offset (and fill's range) passed positionally: (name, call on (stream, buf, host))
POSITIONAL_OFFSETS = {
    "copy_htod": lambda s, b, h: s.copy_htod(b, np.ones(16, np.uint8), 8),
    "copy_htod_deferred": lambda s, b, h: s.copy_htod_deferred(b, np.ones(16, np.uint8), 8),
    "copy_dtoh": lambda s, b, h: s.copy_dtoh(h, b, 8),
    "copy_dtod": lambda s, b, h: s.copy_dtod(b, b, 8, 16),
    "fill": lambda s, b, h: s.fill(b, 1, 8, 8),
}


@pytest.mark.clause("COPY-65")
@pytest.mark.parametrize("op", sorted(POSITIONAL_OFFSETS))
def test_offsets_passed_positionally_raise_type_error_and_copy_nothing(device, stream, op):
    """The calls as the signatures refuse them: a fast path that ignored the extra argument would write at 0."""
    host = np.full(16, 7, np.uint8)
    with poisoned(device, stream, 32) as buf:
        with pytest.raises(TypeError):
            POSITIONAL_OFFSETS[op](stream, buf, host)
        assert (read(stream, buf) == POISON).all(), f"{op} wrote the buffer"
    assert (host == 7).all(), f"{op} wrote the host array"


#: each op with its offset keyword (fill: its range's), as (name, call on (stream, buf, host, extra keywords))
OFFSET_KEYWORDS = {
    "copy_htod": lambda s, b, h, kw: s.copy_htod(b, np.ones(16, np.uint8), **kw),
    "copy_htod_deferred": lambda s, b, h, kw: s.copy_htod_deferred(b, np.ones(16, np.uint8), **kw),
    "copy_dtoh": lambda s, b, h, kw: s.copy_dtoh(h, b, **kw),
    "copy_dtod": lambda s, b, h, kw: s.copy_dtod(b, b, 8, **kw),
    "fill": lambda s, b, h, kw: s.fill(b, 1, **kw),
}
OFFSET_KEYWORD = {"copy_htod": "dst_offset", "copy_htod_deferred": "dst_offset", "copy_dtoh": "src_offset",
                  "copy_dtod": "dst_offset", "fill": "offset"}


@pytest.mark.clause("COPY-70")
@pytest.mark.parametrize("where", ["alone", "after the offset", "before the offset"])
@pytest.mark.parametrize("op", sorted(OFFSET_KEYWORDS))
def test_an_unknown_keyword_raises_type_error_and_copies_nothing(device, stream, op, where):
    """A misspelt or foreign keyword (`bogus=1`) is refused as by any Python function, also right after a good call
    of the op: a fast path that reads the offset keyword and ignores the rest would copy as if the caller's other
    keyword were not there."""
    offset = {OFFSET_KEYWORD[op]: 16}
    keywords = {"alone": {"bogus": 1}, "after the offset": {**offset, "bogus": 1},
                "before the offset": {"bogus": 1, **offset}}[where]
    host = np.full(16, 7, np.uint8)
    with poisoned(device, stream, 32) as scratch, poisoned(device, stream, 32) as buf:
        OFFSET_KEYWORDS[op](stream, scratch, np.zeros(16, np.uint8), offset)  # the op's paths warm (CUDA: the ring)
        with pytest.raises(TypeError):
            OFFSET_KEYWORDS[op](stream, buf, host, keywords)
        assert (read(stream, buf) == POISON).all(), f"{op} wrote the buffer"
    assert (host == 7).all(), f"{op} wrote the host array"


#: each op called as its signature refuses, other than COPY-65's and COPY-70's: (name, call on (stream, buf, host))
#: for each op; the wrong keywords are the other ops' offset and range keywords and `stream`
MISCALLS = {
    "copy_htod": {
        "the source missing": lambda s, b, h: s.copy_htod(b),
        "the source missing, the offset given": lambda s, b, h: s.copy_htod(b, dst_offset=8),
        "an extra positional argument beside the offset": lambda s, b, h: s.copy_htod(b, np.ones(8, np.uint8), 8,
                                                                                        dst_offset=8),
    },
    "copy_htod_deferred": {
        "the source missing": lambda s, b, h: s.copy_htod_deferred(b),
        "the source missing, the offset given": lambda s, b, h: s.copy_htod_deferred(b, dst_offset=8),
        "an extra positional argument beside the offset": lambda s, b, h: s.copy_htod_deferred(
            b, np.ones(8, np.uint8), 8, dst_offset=8),
    },
    "copy_dtoh": {
        "the source missing": lambda s, b, h: s.copy_dtoh(h),
        "the source missing, the offset given": lambda s, b, h: s.copy_dtoh(h, src_offset=8),
        "an extra positional argument beside the offset": lambda s, b, h: s.copy_dtoh(h, b, 8, src_offset=8),
    },
    "copy_dtod": {
        "nbytes missing": lambda s, b, h: s.copy_dtod(b, b),
        "nbytes missing, the offset given": lambda s, b, h: s.copy_dtod(b, b, dst_offset=16),
        "an extra positional argument beside the offset": lambda s, b, h: s.copy_dtod(b, b, 8, 16, dst_offset=16),
    },
    "fill": {
        "the value missing": lambda s, b, h: s.fill(b),
        "the value missing, the offset given": lambda s, b, h: s.fill(b, offset=8),
        "an extra positional argument beside the offset": lambda s, b, h: s.fill(b, 1, 8, offset=8),
    },
}
WRONG_KEYWORDS = ("dst_offset", "src_offset", "offset", "nbytes", "stream")
TAKEN_KEYWORDS = {"copy_htod": {"dst_offset"}, "copy_htod_deferred": {"dst_offset"}, "copy_dtoh": {"src_offset"},
                  "copy_dtod": {"dst_offset", "src_offset"}, "fill": {"offset", "nbytes"}}


@pytest.mark.clause("COPY-74")
@pytest.mark.parametrize("op", sorted(MISCALLS))
def test_calls_the_signature_refuses_raise_type_error_and_copy_nothing(device, stream, op):
    """An argument missing (alone, and beside the offset keyword), an extra positional argument beside the offset
    keyword, and another op's keyword in place of this op's: each raises TypeError, as the signature does, right
    after a good call of the op (its fast path warm), and writes neither the buffer nor the host array. A compiled
    path that reads the offset from the third argument, or takes any one keyword that is not its own for the
    offset, copies where the caller asked for an error."""
    calls = dict(MISCALLS[op])
    for keyword in WRONG_KEYWORDS:
        if keyword not in TAKEN_KEYWORDS[op]:
            calls[f"{keyword}= in place of its own keyword"] = (
                lambda s, b, h, keyword=keyword: OFFSET_KEYWORDS[op](s, b, h, {keyword: 8}))
    host = np.full(16, 7, np.uint8)
    with poisoned(device, stream, 32) as scratch, poisoned(device, stream, 32) as buf:
        for what, call in calls.items():
            OFFSET_KEYWORDS[op](stream, scratch, np.zeros(16, np.uint8), {OFFSET_KEYWORD[op]: 16})  # warm
            with pytest.raises(TypeError):
                call(stream, buf, host)
                pytest.fail(f"{op}, {what}: accepted")
            assert (read(stream, buf) == POISON).all(), f"{op}, {what}: the buffer was written"
            assert (host == 7).all(), f"{op}, {what}: the host array was written"


@pytest.mark.clause("ERR-58")
def test_refused_copies_keep_no_reference_to_their_host_arrays(device, stream):
    """A copy refused with a typed error takes nothing from the caller: the host array it was given (made for
    the call, dropped after) is collected. A path that exports the array's buffer before its checks and keeps
    the export when it hands the refusal on (CUDA's compiled copies) keeps every refused array alive."""
    freed = device.alloc(64)
    freed.free()
    gone = []
    with device.alloc(64) as buf:
        stream.copy_htod(buf, np.ones(16, np.uint8), dst_offset=8)  # the copy paths warm
        cases = {
            "copy_htod into a freed buffer": (ia.UseAfterFree, lambda h: stream.copy_htod(freed, h)),
            "copy_htod past the buffer's end": (ia.InvalidArgument, lambda h: stream.copy_htod(buf, h, dst_offset=60)),
            "copy_htod at a negative offset": (ia.InvalidArgument, lambda h: stream.copy_htod(buf, h, dst_offset=-8)),
            "copy_htod_deferred past the buffer's end": (
                ia.InvalidArgument, lambda h: stream.copy_htod_deferred(buf, h, dst_offset=60)),
            "copy_dtoh from a freed buffer": (ia.UseAfterFree, lambda h: stream.copy_dtoh(h, freed)),
            "copy_dtoh past the buffer's end": (ia.InvalidArgument, lambda h: stream.copy_dtoh(h, buf, src_offset=60)),
        }
        for what, (error, call) in cases.items():
            for _ in range(3):
                host = np.full(16, 7, np.uint8)
                with pytest.raises(error):
                    call(host)
                gone.append((what, weakref.ref(host)))
        del host
        stream.synchronize()
        gc.collect()
        held = sorted({what for what, ref in gone if ref() is not None})
    assert not held, f"host arrays of refused copies are still referenced after them: {', '.join(held)}"


#: the child of COPY-79: a process that sees one CPU (its affinity one CPU, and ``os.cpu_count()`` 1 as on a
#: one-core host) copies 8 MiB and 8 MiB + 3 bytes each way on an idle stream and behind a fill; prints the sizes
#: whose bytes came back wrong
ONE_CPU_CHILD = """
import json, os, sys
if hasattr(os, "sched_setaffinity"):  # Linux
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
os.cpu_count = lambda: 1
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
stream = device.create_stream()
wrong = []
with device.alloc(1 << 20) as other:
    for nbytes in (8 << 20, (8 << 20) + 3):
        for behind in (False, True):
            src = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
            back = np.zeros(nbytes, np.uint8)
            with device.alloc(nbytes) as buf:
                stream.synchronize()
                if behind:
                    stream.fill(other, 1)
                stream.copy_htod(buf, src)
                if behind:
                    stream.fill(other, 2)
                stream.copy_dtoh(back, buf)
                stream.synchronize()
            if not np.array_equal(back, src):
                wrong.append([nbytes, behind])
device.close()
print(json.dumps(wrong))
"""


@pytest.mark.clause("COPY-79")
def test_large_copies_on_a_one_cpu_host(target):
    """COPY-79: a backend that spreads large host copies over helper threads has none on a one-core host."""
    wrong = child_json(target, ONE_CPU_CHILD)
    assert not wrong, f"copies whose bytes came back wrong in a process that sees one CPU ([bytes, behind a fill]): " \
        f"{wrong}"


@pytest.mark.clause("COPY-80")
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_zero_dimensional_host_arrays(device, stream, dtype):
    """COPY-80: a 0-d array is the bytes of its one element, as a 1-element 1-D array is."""
    itemsize = np.dtype(dtype).itemsize
    value = np.array(0x7B, dtype)
    with device.alloc(4 * itemsize) as buf:
        stream.fill(buf, 0)
        stream.copy_htod(buf, value, dst_offset=itemsize)
        stream.copy_htod_deferred(buf, np.array(0x5C, dtype), dst_offset=3 * itemsize)
        back = np.array(0, dtype)
        stream.copy_dtoh(back, buf, src_offset=itemsize)
        stream.synchronize()
        assert back.shape == () and back[()] == value[()], f"copy_dtoh into a 0-d {np.dtype(dtype)} array got {back!r}"
        expect = np.array([0, 0x7B, 0, 0x5C], dtype).view(np.uint8)
        got = read(stream, buf)
        np.testing.assert_array_equal(got, expect, err_msg="copy_htod/copy_htod_deferred of 0-d arrays")


#: (op, the argument's name in the error, a call of the op with ``bad`` in that argument's place)
NON_INTEGER_ARGUMENTS = {
    "copy_htod dst_offset": ("Stream.copy_htod", "dst offset",
                             lambda s, b, o, h, bad: s.copy_htod(b, np.ones(16, np.uint8), dst_offset=bad)),
    "copy_htod_deferred dst_offset": ("Stream.copy_htod_deferred", "dst offset",
                                      lambda s, b, o, h, bad: s.copy_htod_deferred(b, np.ones(16, np.uint8),
                                                                                   dst_offset=bad)),
    "copy_dtoh src_offset": ("Stream.copy_dtoh", "src offset", lambda s, b, o, h, bad: s.copy_dtoh(h, b, src_offset=bad)),
    "copy_dtod dst_offset": ("Stream.copy_dtod", "dst offset", lambda s, b, o, h, bad: s.copy_dtod(b, o, 8, dst_offset=bad)),
    "copy_dtod src_offset": ("Stream.copy_dtod", "src offset", lambda s, b, o, h, bad: s.copy_dtod(o, b, 8, src_offset=bad)),
    "copy_dtod nbytes": ("Stream.copy_dtod", "nbytes", lambda s, b, o, h, bad: s.copy_dtod(b, o, bad)),
    "fill offset": ("Stream.fill", "offset", lambda s, b, o, h, bad: s.fill(b, 1, offset=bad, nbytes=8)),
    "fill nbytes": ("Stream.fill", "nbytes", lambda s, b, o, h, bad: s.fill(b, 1, nbytes=bad)),
    "fill value": ("Stream.fill", "value", lambda s, b, o, h, bad: s.fill(b, bad)),
}
NON_INTEGERS = {"True": True, "False": False, "4.0": 4.0, "'4'": "4", "None": None, "numpy 4.0": np.float32(4.0)}


@pytest.mark.clause("COPY-85", "ERR-1")
@pytest.mark.parametrize("case", list(NON_INTEGER_ARGUMENTS))
def test_offsets_and_sizes_that_are_not_integers_are_named_and_copy_nothing(device, stream, case):
    """A bool, a float, a str or None as an offset, size or fill value raises InvalidArgument naming the op and
    the argument, right after good calls of the op with integers (its fast path warm: a Python int, a numpy
    integer), and writes neither the buffer nor the host array. A fast path that admits an offset by its type
    alone and the wrong one (a bool is an int to isinstance; WebGPU's inline copy_dtoh tested `is int`) copies
    from offset 1 for True, or fails with an untyped error for None."""
    op, what, call = NON_INTEGER_ARGUMENTS[case]
    host = np.full(16, 7, np.uint8)
    with poisoned(device, stream, 64) as buf, poisoned(device, stream, 64) as other:
        for name, bad in NON_INTEGERS.items():
            if case == "fill nbytes" and bad is None:
                continue  # fill's nbytes=None is its default: to the end
            with poisoned(device, stream, 64) as scratch, poisoned(device, stream, 64) as scratch2:
                for good in (8, np.int64(8)):  # warm, with the integers the op takes
                    call(stream, scratch, scratch2, np.zeros(16, np.uint8), good)
            with raises_naming(ia.InvalidArgument, op, what):
                call(stream, buf, other, host, bad)
                pytest.fail(f"{case}={name}: accepted")
            assert (read(stream, buf) == POISON).all(), f"{case}={name}: the buffer was written"
            assert (read(stream, other) == POISON).all(), f"{case}={name}: the other buffer was written"
            assert (host == 7).all(), f"{case}={name}: the host array was written"
