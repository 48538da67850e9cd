"""Streams and the work they enqueue (copies, fills, launches), events, and device buffers.

These are the hot paths of the backend, so each method makes its driver call directly and tests the
CUresult inline; the error object is built only on failure. ``Device.default_stream`` is the legacy
default stream; ``create_stream`` makes non-blocking streams. ``copy_dtoh`` keeps its host array alive
until a wait covers it (the stream's or the device's synchronize, or an event recorded after it); into
pageable memory the driver completes it before returning, so it is not staged. ``synchronize(timeout=)``
polls instead of blocking (``native.wait_until_complete``).
"""

from __future__ import annotations

import collections
import ctypes
import itertools
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import api
from ... import native as fast_c  # ironaccel.native: the compiled hot paths (_fast_c/), not this package's native.py
from ...errors import DriverError
from . import native
from .native import calls, current, fail, wait_for, wait_until_complete
from .graph import CudaGraph, begin_capture, end_capture
from .module import CudaKernel, Signature
from .staging import DRIVER_STAGES_BYTES, PINNED_CHECK_BYTES, is_pinned

_addressof, _byte_at = ctypes.addressof, ctypes.c_char.from_buffer  # a writable buffer's address, fast

if TYPE_CHECKING:
    from .device import CudaDevice


class _BufferCore:
    """CudaBuffer's free of a buffer dropped unfreed, in Python. Where the compiled module loads, its BufferCore
    (ironaccel/_fast_c/buffers.inc) is CudaBuffer's base instead: the fields in C, ``free()`` with memory pools and this
    finalizer done there, every other case handed to ``CudaBuffer._release``."""

    _device: CudaDevice
    _freed: bool
    _ptr: int
    free: Any  # api.Buffer.free (CudaBuffer's other base)
    _fences: list[Any] | tuple[()] | None = ()  # CUevents on the streams that used the buffer before the last one
    _fenced = False  # _fences is not empty (the compiled free hands such a buffer to CudaBuffer._release)

    def __del__(self) -> None:
        """A Buffer dropped without ``free()`` gives its memory back (stream-ordered, so never too early)."""
        if not self._freed:
            try:
                self.free()
            except DriverError:  # nobody to tell: the memory stays the device's, and close() frees it
                self._device._orphans.append(self._ptr)


_compiled = fast_c.load()  # None: the pure-Python path (no compiler here, or IRONACCEL_PURE_PYTHON=1)


FENCES_KEPT = 8  # a buffer's fences past this many are queried, and the completed ones dropped


class CudaBuffer(_compiled.BufferCore if _compiled else _BufferCore, api.Buffer):  # type: ignore[misc]
    """A device allocation. Its free is ordered after all work enqueued on it so far (LIFE-1, LIFE-4): the free
    is enqueued on the stream that used it last, after that stream waits for a fence (an event) recorded on
    each stream that used it before. A fence is recorded only when another stream takes over the buffer
    (``_used_on``): a buffer used on one stream costs one comparison per use."""

    def __init__(self, device: CudaDevice, nbytes: int, ptr: int):
        self._device = device  # api.Buffer's three fields, set here directly: this runs on every alloc
        self._nbytes = nbytes
        self._freed = False
        self._ptr = ptr
        self._last_stream: CudaStream | None = None  # frees are ordered after the last use

    def _native_handle(self) -> int:
        return self._ptr

    def _used_on(self, stream: CudaStream) -> None:
        """``stream`` enqueued work on the buffer (called only when it is not ``_last_stream``): the stream that
        used it before gets a fence the free will wait for."""
        last = self._last_stream
        self._last_stream = stream
        if last is None:
            return
        fences = self._fences
        if not fences:
            fences = self._fences = []
        elif len(fences) >= FENCES_KEPT:
            fences[:] = [event for event in fences if not _completed(self._device, event)]
        fences.append(_record_fence(last))
        self._fenced = True

    def _release(self) -> None:
        """``free()`` is stream-ordered (``cuMemFreeAsync``) on the stream that last used the buffer, so
        freeing never blocks; devices without memory pools use ``cuMemFree``."""
        dev: CudaDevice = self._device  # type: ignore[assignment]
        if dev._closed:
            return  # closing the device freed it
        try:
            if current.device != dev._id:
                dev._make_current()
            last = self._last_stream  # the stream the free is ordered on; None: the allocation stream
            queue = dev._alloc_stream if last is None else last._handle
            for event in self._fences or ():  # the work of the streams that used it before the last one
                if dev._pools:
                    calls.cuStreamWaitEvent(queue, event, 0)
                else:
                    calls.cuEventSynchronize(event)
            if not dev._pools:
                calls.cuMemFree(self._ptr)
            else:  # where native.fast is loaded, BufferCore.free does this case in C (when not _fenced)
                calls.cuMemFreeAsync(self._ptr, queue)
        except DriverError:
            self._freed = False  # still live (and in dev._live): free() may be retried, close() frees it
            raise
        dev._live.pop(self._ptr, None)
        self._last_stream = None
        self._drop_fences()

    def _drop_fences(self) -> None:
        """Give the fences back to the device's spare events (a wait already enqueued on one is not affected by
        its next record)."""
        if self._fences:
            self._device._spare_events[False].extend(self._fences)
            self._fences = ()
            self._fenced = False


def _record_fence(stream: CudaStream) -> Any:
    """A spare (or new) CUevent recorded on ``stream``: a point after everything enqueued on it so far."""
    dev = stream._dev
    if current.device != dev._id:
        dev._make_current()
    try:
        event = dev._spare_events[False].pop()
    except IndexError:
        event = calls.cuEventCreate(native.cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    err, = native.cu.cuEventRecord(event, stream._handle)
    if err:
        dev._spare_events[False].append(event)
        fail(native.cu.cuEventRecord, err)
    return event


def _completed(device: CudaDevice, event: Any) -> bool:
    """Has ``event`` completed? (then it goes back to the device's spare events)"""
    err, = native.cu.cuEventQuery(event)
    if err:
        return False  # not ready; an error: kept, and the free's wait reports it
    device._spare_events[False].append(event)
    return True


class CudaEvent(api.Event):
    """A CUevent from the device's spare list, returned to it when the Event object goes away. (No __slots__:
    FastEvent's compiled base holds these fields in C, and slots here would clash with its layout.)"""

    def __init__(self, stream: CudaStream, timing: bool, handle: Any, mark: int):
        self._stream = stream  # api.Event's two fields, set here directly: this runs on every record
        self._timing = timing
        self._handle = handle
        self._mark = mark  # the stream's copy_dtoh destinations numbered below this are done once this is (0: none)

    def _query(self) -> bool:
        cu = native.cu
        stream, mark = self._stream, self._mark  # the point asked about: a re-record may move the event meanwhile
        (err,) = cu.cuEventQuery(self._handle)
        if not err:
            if mark:
                stream._release_held(mark)
            return True
        if err == cu.CUresult.CUDA_ERROR_NOT_READY:
            return False
        fail(cu.cuEventQuery, err)

    def _synchronize(self, timeout: float | None = None) -> None:
        stream, mark = self._stream, self._mark  # the point waited for: a re-record may move the event meanwhile
        if timeout is None:
            wait_for(native.cu.cuEventQuery, native.cu.cuEventSynchronize, self._handle)
        else:
            wait_until_complete(native.cu.cuEventQuery, self._handle, time.monotonic() + timeout, "Event.synchronize",
                                timeout)
        if mark:
            stream._release_held(mark)

    def _elapsed_ms(self, end: api.Event) -> float:
        assert isinstance(end, CudaEvent)
        end._synchronize()
        self._synchronize()
        return float(calls.cuEventElapsedTime(self._handle, end._handle))

    def __del__(self) -> None:
        dev = self._stream._dev
        if not dev._closed:
            dev._spare_events[self._timing].append(self._handle)


class CudaStream(api.Stream):
    def __init__(self, device: CudaDevice, handle: Any, owned: bool):
        super().__init__(device)
        self._dev = device
        self._handle = handle
        self._work = handle  # where launches, fills and copy_dtod go: a capture's own stream while capturing
        self._address = self._work_address = int(handle)  # the two as integers, for the compiled path
        self._owned = owned
        # copy_dtoh destinations, each kept alive (numbered, in a deque) until work enqueued after it is known
        # complete: a synchronize, or an event recorded after it. A wait takes a mark (the next number) before
        # it waits and then releases what is numbered below it, so nothing enqueued meanwhile by another
        # thread is released early. ``next()`` on the counter and deque appends are atomic under the GIL.
        self._held: collections.deque[tuple[int, np.ndarray]] = collections.deque()
        self._numbers = itertools.count(1)
        self._release_lock = threading.Lock()

    def _native(self) -> Any:
        return self._handle

    def _copy_htod(self, dst: api.Buffer, dst_offset: int, src: np.ndarray) -> None:
        dev = self._dev
        if current.device != dev._id:
            dev._make_current()
        if dst._last_stream is not self:
            dst._used_on(self)
        n = src.nbytes
        if n >= PINNED_CHECK_BYTES and is_pinned(native.cu, address := src.ctypes.data) and self._idle():
            # DMA'd from the caller's page-locked array, then waited for, since the caller may reuse the array
            # once this returns (COPY-4); on an idle stream the wait is the copy's own time. Behind other work
            # the staging ring copies it instead, without waiting for that work. (The compiled path decides
            # the same in C: _fast_c/copy.inc, large_htod.)
            calls.cuMemcpyHtoDAsync(dst._ptr + dst_offset, address, n, self._handle)
            calls.cuStreamSynchronize(self._handle)
        else:
            dev._staging.copy_htod(self, dst._ptr + dst_offset, src)

    def _copy_htod_deferred(self, dst: api.Buffer, dst_offset: int, src: np.ndarray) -> None:
        """cuMemcpyHtoDAsync straight from ``src``, held like a copy_dtoh destination until a wait covers it: a
        pinned source (DMA'd when the stream gets there) or a small pageable one; a larger pageable one through
        the ring, faster than the driver's own staging (DRIVER_STAGES_BYTES). (Compiled: _fast_c/copy.inc.)"""
        dev = self._dev
        if current.device != dev._id:
            dev._make_current()
        n, address = src.nbytes, src.ctypes.data  # src may be read-only: no c_char.from_buffer
        if n > DRIVER_STAGES_BYTES and not is_pinned(native.cu, address):
            return self._copy_htod(dst, dst_offset, src)
        if dst._last_stream is not self:
            dst._used_on(self)
        copy = native.cu.cuMemcpyHtoDAsync
        err, = copy(dst._ptr + dst_offset, address, n, self._handle)
        if err:
            fail(copy, err)
        self._held.append((next(self._numbers), src))

    def _idle(self) -> bool:
        """Has everything enqueued on the stream so far completed? (a non-blocking cuStreamQuery)"""
        err, = native.cu.cuStreamQuery(self._handle)
        if err == native.cu.CUresult.CUDA_ERROR_NOT_READY:
            return False
        if err:
            fail(native.cu.cuStreamQuery, err)
        return True

    def _copy_dtoh(self, dst: np.ndarray, src: api.Buffer, src_offset: int) -> None:
        dev = self._dev
        if current.device != dev._id:
            dev._make_current()
        if src._last_stream is not self:
            src._used_on(self)
        copy = native.cu.cuMemcpyDtoHAsync
        # the address through ctypes' buffer protocol: ~0.7 us cheaper than ``dst.ctypes.data``. Never the array
        # itself: cuda.bindings tries int(ptr) first, and numpy < 2 turns a 1-element array into its value.
        err, = copy(_addressof(_byte_at(dst)), src._ptr + src_offset, dst.nbytes, self._handle)
        if err:
            fail(copy, err)
        self._held.append((next(self._numbers), dst))

    def _copy_dtod(self, dst: api.Buffer, dst_offset: int, src: api.Buffer, src_offset: int, nbytes: int) -> None:
        dev = self._dev
        dev._make_current()
        for buf in (dst, src):
            if buf._last_stream is not self:
                buf._used_on(self)
        calls.cuMemcpyDtoDAsync(dst._ptr + dst_offset, src._ptr + src_offset, nbytes, self._work)

    def _fill(self, buf: api.Buffer, offset: int, nbytes: int, value: int) -> None:
        dev = self._dev
        dev._make_current()
        if buf._last_stream is not self:
            buf._used_on(self)
        calls.cuMemsetD8Async(buf._ptr + offset, value, nbytes, self._work)

    def _record(self, timing: bool) -> CudaEvent:
        dev = self._dev
        # our context made current for our own streams too: a thread's first call may be a record or a synchronize
        # (STREAM-10), and a driver may want a current context even for a stream that has one (the fake does)
        if current.device != dev._id:
            dev._make_current()
        cu = native.cu
        try:  # not "if spare: pop()": another thread may take the last one in between
            handle = dev._spare_events[timing].pop()
        except IndexError:
            flags = cu.CUevent_flags.CU_EVENT_DEFAULT if timing else cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
            handle = calls.cuEventCreate(flags)
        event = CudaEvent(self, timing, handle, next(self._numbers) if self._held else 0)
        err, = cu.cuEventRecord(handle, self._handle)
        if err:
            fail(cu.cuEventRecord, err)
        return event

    def _rerecord(self, event: api.Event) -> None:
        """The event's own CUevent recorded here (a wait already enqueued on it keeps its point: the driver's
        rule), numbered after this stream's held copy destinations, as _record numbers a new one."""
        assert isinstance(event, CudaEvent)
        dev = self._dev
        if current.device != dev._id:
            dev._make_current()
        mark = next(self._numbers) if self._held else 0
        record = native.cu.cuEventRecord
        err, = record(event._handle, self._handle)
        if err:
            fail(record, err)
        event._stream, event._mark = self, mark

    def _wait(self, event: api.Event) -> None:
        assert isinstance(event, CudaEvent)
        dev = self._dev
        dev._make_current()
        calls.cuStreamWaitEvent(self._handle, event._handle, 0)

    def _synchronize(self, timeout: float | None = None) -> None:
        if current.device != self._dev._id:
            self._dev._make_current()
        mark = next(self._numbers) if self._held else 0
        if timeout is None:
            wait_for(native.cu.cuStreamQuery, native.cu.cuStreamSynchronize, self._handle)
        else:
            wait_until_complete(native.cu.cuStreamQuery, self._handle, time.monotonic() + timeout,
                                "Stream.synchronize", timeout)
        if mark:
            self._release_held(mark)

    def _begin_capture(self) -> CudaGraph:
        return begin_capture(self)

    def _end_capture(self, graph: api.Graph, keep: bool) -> None:
        end_capture(self, graph, keep)  # type: ignore[arg-type]

    def _hold_mark(self) -> int:
        """The mark a wait takes before it waits (0: nothing held)."""
        return next(self._numbers) if self._held else 0

    def _release_held(self, mark: int) -> None:
        """Drop the held host arrays numbered below ``mark``: work enqueued after them is complete. (Compiled, the
        same steps under the same lock: _fast_c/stream.inc, release_held.)"""
        with self._release_lock:
            held = self._held
            while held and held[0][0] < mark:  # appends may land out of order: a later one only waits longer
                held.popleft()

    def _launch_prepared(self, plan: api.LaunchPlan, signature: Signature, args: list[Any]) -> None:
        kernel: CudaKernel = plan.kernel  # type: ignore[assignment]
        for i in signature.buffers:  # args is the api's own list: buffers become their pointers in place
            buf = args[i]
            if buf._last_stream is not self:
                buf._used_on(self)
            args[i] = buf._ptr
        for i in signature.float32:
            args[i] = args[i].view(np.uint32)
        view, params = kernel._slots.view_and_address
        signature.struct.pack_into(view, 0, *args)
        dev = self._dev
        if current.device != dev._id:
            dev._make_current()
        launch = native.cu.cuLaunchKernel
        err, = launch(kernel._function, *plan.grid, *plan.block, 0, self._work, params, 0)
        if err:
            fail(launch, err)

    def __del__(self) -> None:
        """The CUstream is destroyed once this object is gone, not here: collected in a reference cycle together
        with a buffer last used on it, the buffer's finalizer may run after this one, and it orders its free on
        the CUstream, after the stream's work (LIFE-91)."""
        if self._owned:
            self._destroyer = _StreamDestroyer(self._dev, self._handle, self._address)


class _StreamDestroyer:
    """Destroys a dropped CudaStream's CUstream when the stream object is deallocated: made by its ``__del__``, it
    is not among the objects of a reference cycle the stream was collected in, which are all finalized first."""

    __slots__ = ("_dev", "_handle", "_address")

    def __init__(self, dev: CudaDevice, handle: Any, address: int):
        self._dev = dev
        self._handle = handle
        self._address = address

    def __del__(self) -> None:
        dev = self._dev
        if not dev.closed:  # closing the device destroyed it
            if dev._staging.lists(self._address):  # staged copies not fenced yet: the ring fences, then destroys
                dev._staging.drop(self._handle)
            else:
                dev._cu.cuStreamDestroy(self._handle)
