"""Pinned staging for ``copy_htod`` from pageable memory: a ring of page-locked host memory and copy threads.

Given pageable memory the driver stages the copy itself, synchronously and at a fraction of pinned
bandwidth. So the data goes through a pinned ring (``STAGING_BYTES``, allocated on first use) instead: a
small copy is one memmove into the ring plus one DMA (no event per copy: the ring is fenced per segment);
a large copy is cut into ``STAGING_SEGMENT`` chunks. With the compiled module (``_fast_c/copy.inc``: ``staged_copy``)
each chunk, 1 MiB ones too, is filled in pieces by the caller and ``COPY_THREADS`` C threads that need no
GIL, with non-temporal stores, and each piece is DMA'd by the caller, in order, as soon as it is filled: one
thread memcpy'd 1 MiB at about 7 GB/s on the H200's host (167 us against the driver's own pageable 107 us).
The pure-Python path fills a chunk of ``PARALLEL_COPY_BYTES`` or more with ``CopyWorkers`` while the DMA
of the previous one runs, and a smaller one in ``PIPELINE_PIECE`` pieces, each DMA'd as soon as it is
filled (a 1 MiB copy in one memmove and then one DMA took twice the driver's own pageable copy, which
overlaps the two). A pinned source of ``PINNED_CHECK_BYTES`` or more is copied directly when its stream is
idle, and waited for (``is_pinned``).
"""

from __future__ import annotations

import collections
import ctypes
import os
import queue
import threading
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ... import native as fast_c  # ironaccel.native: the compiled hot paths (_fast_c/)
from . import native
from .native import calls, fail

if TYPE_CHECKING:
    from .device import CudaDevice
    from .stream import CudaStream

STAGING_SEGMENT = 4 << 20  # bytes of one ring segment, and of one chunk of a large copy
STAGING_SEGMENTS = 8
STAGING_BYTES = STAGING_SEGMENT * STAGING_SEGMENTS
SMALL_COPY_BYTES = 64 << 10  # staged with one memmove and one DMA, no chunking
PARALLEL_COPY_BYTES = 2 << 20  # chunks this big are filled by several threads (below: the handoff costs more)
PIPELINE_PIECE = 256 << 10  # a smaller chunk is filled and DMA'd in pieces this big, the two overlapping
COPY_THREADS = 7  # worker threads that fill the ring (at most cpu_count - 1), besides the caller
PINNED_CHECK_BYTES = 256 << 10
REUSE_BYTES = 16 << 10  # a staged copy this big first asks whether it may fill the segment again from its start
# A pageable copy_htod_deferred up to this size goes straight to cuMemcpyHtoDAsync (the driver stages it): on the
# H200 the driver's own staging beat the ring at 4 KiB (call only 3.88 us raw against 4.82 us) and lost at 64 KiB
# (10.8 against 7.65 us). Not copy_htod's: the driver documents no return only after its staging copy (COPY-4).
DRIVER_STAGES_BYTES = 16 << 10


def is_pinned(cu: Any, address: int) -> bool:
    """Is ``address`` page-locked host memory the driver knows (cuMemHostAlloc, cuMemHostRegister)?"""
    err, kind = cu.cuPointerGetAttribute(cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, address)
    return not err and kind == cu.CUmemorytype.CU_MEMORYTYPE_HOST


class CopyWorkers:
    """The pure-Python path's threads that copy host memory in parallel: one thread cannot read pageable memory
    as fast as a PCIe 5 DMA engine drains pinned memory. ``ctypes.memmove`` releases the GIL, so the copies
    really overlap (each hand-off takes the GIL, though: the compiled path's threads need none)."""

    def __init__(self, count: int, memmove: Callable[[int, int, int], Any]):
        self._count = count
        self._memmove = memmove  # releases the GIL, so the copies really overlap
        self._tasks: queue.SimpleQueue[tuple[int, int, int]] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._pid = 0  # the process whose threads serve the queues (0: none started; a forked child has none)

    def copy(self, dst: int, src: int, n: int) -> None:
        """memmove(dst, src, n), cut into one piece per worker plus one for the calling thread."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._tasks, self._done = queue.SimpleQueue(), queue.SimpleQueue()
            for i in range(self._count):
                threading.Thread(target=self._serve, name=f"ironaccel-copy-{i}", daemon=True).start()
        piece = -(-n // (self._count + 1) // 4096) * 4096
        others = 0
        for first in range(piece, n, piece):
            self._tasks.put((dst + first, src + first, min(piece, n - first)))
            others += 1
        self._memmove(dst, src, min(piece, n))
        for _ in range(others):
            self._done.get()

    def _serve(self) -> None:
        tasks, done, memmove = self._tasks, self._done, self._memmove  # this process's queues
        while True:
            dst, src, n = tasks.get()
            memmove(dst, src, n)
            done.put(None)


_compiled = fast_c.load()


class StagingRing(*((_compiled.RingCore,) if _compiled else ())):  # type: ignore[misc]
    """Pinned host memory used as a ring: pageable ``copy_htod`` data is copied in, then DMA'd from there.

    The ring is ``STAGING_SEGMENTS`` segments of ``STAGING_SEGMENT`` bytes. Copies take consecutive ranges of
    the current segment, so a small copy costs one host memcpy and one ``cuMemcpyHtoDAsync`` (the pinned
    bounce buffer) and records nothing. Leaving a segment records one event on each stream that used it;
    entering a segment again first waits for those events. A copy of ``REUSE_BYTES`` or more on the segment's
    only user, idle, fills the segment again from its start instead (its bytes still in the cache). A large copy is cut into segment-sized chunks,
    each filled by ``CopyWorkers`` while the DMA of the previous one runs. Thread-safe: one lock.

    The ring knows its users by their CUstream's address, not the Stream object, so it keeps no Stream alive
    (the compiled ``staged_htod`` too). A Stream collected while a segment lists it leaves its CUstream to
    the ring (``drop``), which fences it and then destroys it at its next segment change or the device's
    ``create_stream``, ``synchronize`` or ``close`` (``destroy_dropped``).

    Where the compiled module loads, its RingCore is the base: ``_lock``, ``_users``, ``_base``, ``_segment`` and
    ``_used`` are C fields, which the compiled ``staged_htod`` reads and writes in place."""

    def __init__(self, device: CudaDevice):
        self._dev = device
        self._lock = threading.Lock()
        self._base = 0  # pinned address, 0 until the first staged copy
        self._ring: memoryview | None = None  # byte view of the pinned ring
        self._segment = 0  # the segment copies are taking bytes from
        self._used = 0  # bytes of it taken
        self._users: list[dict[int, None]] = [{} for _ in range(STAGING_SEGMENTS)]  # CUstream addresses
        self._dropped: collections.deque[Any] = collections.deque()  # CUstreams of dropped Streams (``drop``)
        self._fences: list[list[Any]] = [[] for _ in range(STAGING_SEGMENTS)]  # CUevents to wait for
        self._spare: list[Any] = []
        self._threads = min(COPY_THREADS, max((os.cpu_count() or 1) - 1, 1))  # copy threads besides the caller
        # the compiled staged_copy has its own threads, which need no GIL; these serve the pure-Python path
        self._workers = CopyWorkers(self._threads, ctypes.memmove) if native.fast is None else None

    def _reserve(self, n: int, stream: CudaStream, reuse: bool) -> tuple[int, bool]:
        """Offset in the ring of ``n`` <= STAGING_SEGMENT free pinned bytes for a copy on ``stream``, and whether
        they were used just before (so likely in the CPU's cache). ``reuse``: may ask ``_reusable`` (not for a
        large copy's later chunks: the stream then still has the earlier ones to do, and the driver calls a
        copy makes stay the same from run to run). The common case (room left in the current segment) is these
        few lines; ``_reusable`` and ``_advance`` do the rest."""
        reused = reuse and n >= REUSE_BYTES and self._used > 0 and self._reusable(stream)
        if reused:
            self._used = 0
        elif self._used + n > STAGING_SEGMENT or not self._base:
            self._advance()
        segment, used = self._segment, self._used
        self._used = used + n
        self._users[segment][stream._address] = None
        return segment * STAGING_SEGMENT + used, reused

    def _reusable(self, stream: CudaStream) -> bool:
        """May the current segment be filled again from its start? Only when ``stream`` alone copied from it and
        has completed all its work (``cuStreamQuery``): then no DMA reading the segment is pending. The ring's
        fresh bytes are cold in the cache, the reused ones hot: 64 KiB took 4.6 us into cold memory and 1.2 us
        into hot on one core here (asked from REUSE_BYTES on: for a smaller copy the query costs more)."""
        users = self._users[self._segment]
        return len(users) == 1 and stream._address in users and stream._idle()

    def _advance(self) -> None:
        """Allocate the ring on first use; later, move to the next segment (fencing this one, waiting for it)."""
        if not self._base:
            self._base = int(calls.cuMemHostAlloc(STAGING_BYTES, 0))
            # a byte view of the ring: a small copy is a slice assignment, no ``ndarray.ctypes`` lookup
            self._ring = memoryview((ctypes.c_uint8 * STAGING_BYTES).from_address(self._base)).cast("B")
            return
        self._leave(self._segment)
        self._segment = (self._segment + 1) % STAGING_SEGMENTS
        self._enter(self._segment)
        self._used = 0

    def _leave(self, segment: int) -> None:
        """Fence the segment's copies: an event on every stream that copied from it."""
        self._destroy_dropped()
        users = self._users[segment]
        for address in users:
            self._fence(segment, address)
        users.clear()

    def _fence(self, segment: int, address: int) -> None:
        """Record, on the CUstream at ``address``, the event that entering ``segment`` again waits for."""
        cu = native.cu
        event = self._spare.pop() if self._spare else calls.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        self._fences[segment].append(event)
        calls.cuEventRecord(event, cu.CUstream(address))

    def lists(self, address: int) -> bool:
        """Does a segment still list the CUstream at ``address`` as a user (its copies from it not yet fenced)?"""
        return any(address in users for users in self._users)

    def drop(self, handle: Any) -> None:
        """Take over the CUstream of a Stream being collected while a segment lists it: fenced, then
        destroyed, by ``destroy_dropped``. Only appends: a collector may run inside the ring's own steps."""
        self._dropped.append(handle)

    def destroy_dropped(self) -> None:
        """Fence and destroy the dropped Streams' CUstreams (``drop``)."""
        if self._dropped:
            with self._lock:
                self._destroy_dropped()

    def _destroy_dropped(self) -> None:
        while self._dropped:
            handle = self._dropped.popleft()
            address = int(handle)
            for segment, users in enumerate(self._users):
                if users.pop(address, False) is None:
                    self._fence(segment, address)
            calls.cuStreamDestroy(handle)

    def _enter(self, segment: int) -> None:
        """Wait until the DMAs that last read the segment are done."""
        fences = self._fences[segment]
        while fences:
            event = fences.pop()
            self._spare.append(event)
            calls.cuEventSynchronize(event)

    def copy_htod(self, stream: CudaStream, dst: int, src: np.ndarray) -> None:
        n = src.nbytes
        handle = stream._handle
        with self._lock:
            if n <= SMALL_COPY_BYTES:
                start, _ = self._reserve(n, stream, True)  # first: it may allocate the ring
                self._ring[start:start + n] = src
                copy = native.cu.cuMemcpyHtoDAsync
                err, = copy(dst, self._base + start, n, handle)
                if err:
                    fail(copy, err)
                return
            for first in range(0, n, STAGING_SEGMENT):
                size = min(STAGING_SEGMENT, n - first)
                start, reused = self._reserve(size, stream, first == 0)  # first: it may allocate the ring
                self._send(dst + first, self._base + start, src, first, size, handle, reused)

    def _send(self, dst: int, staged: int, src: np.ndarray, first: int, size: int, handle: Any, hot: bool) -> None:
        """``src[first:first + size]`` into the ring at ``staged`` (``hot``: bytes just used, in the cache), then
        DMA'd to ``dst``."""
        if native.fast is not None:
            err = native.fast.staged_copy(dst, staged, src, first, size, self._threads, int(handle), hot)
            if err:
                fail(native.cu.cuMemcpyHtoDAsync, native.cu.CUresult(err))
        elif size >= PARALLEL_COPY_BYTES:
            self._workers.copy(staged, src.ctypes.data + first, size)
            calls.cuMemcpyHtoDAsync(dst, staged, size, handle)
        else:
            address = src.ctypes.data + first
            for done in range(0, size, PIPELINE_PIECE):
                piece = min(PIPELINE_PIECE, size - done)
                ctypes.memmove(staged + done, address + done, piece)
                calls.cuMemcpyHtoDAsync(dst + done, staged + done, piece, handle)

    def close(self, release: Callable[..., None]) -> None:
        """Free the ring through ``release(function, *args)`` (which records failures); the device is idle."""
        cu = self._dev._cu
        while self._dropped:
            release(cu.cuStreamDestroy, self._dropped.popleft())
        for event in [e for fences in self._fences for e in fences] + self._spare:
            release(cu.cuEventDestroy, event)
        for fences in self._fences:
            fences.clear()
        for users in self._users:
            users.clear()
        self._spare.clear()
        if self._base:
            release(cu.cuMemFreeHost, self._base)
            self._base, self._ring = 0, None
