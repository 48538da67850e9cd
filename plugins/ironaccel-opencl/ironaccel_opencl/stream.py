"""Streams (in-order command queues with profiling) and events (markers on them)."""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ironaccel import api
from ironaccel.api import Dim3
from ironaccel.errors import DriverError, InvalidArgument, Timeout

from . import native
from .module import OpenCLKernel
from .native import BACKEND, call

if TYPE_CHECKING:
    from .device import OpenCLDevice


POLL_S = 0.0005


def wait_for(op: str, marker: Any, timeout: float | None) -> None:
    """Block until ``marker`` completes; past ``timeout`` seconds raise Timeout (no thread left waiting)."""
    if timeout is None:
        call(op, marker.wait)
        return
    deadline = time.monotonic() + timeout
    complete = native.cl.command_execution_status.COMPLETE
    while call(op, lambda: marker.command_execution_status) > complete:
        if time.monotonic() >= deadline:
            raise Timeout(op, timeout)
        time.sleep(POLL_S)
    if marker.command_execution_status < 0:
        raise DriverError(BACKEND, op, marker.command_execution_status, "a command on the queue failed")


class OpenCLEvent(api.Event):
    def __init__(self, stream: OpenCLStream, timing: bool, marker: Any):
        super().__init__(stream, timing)
        self.marker = marker

    def _query(self) -> bool:
        return call("Event.query", lambda: self.marker.command_execution_status) <= native.cl.command_execution_status.COMPLETE

    def _synchronize(self, timeout: float | None) -> None:
        wait_for("Event.synchronize", self.marker, timeout)

    def _elapsed_ms(self, end: api.Event) -> float:
        self._synchronize(None)
        end._synchronize(None)
        assert isinstance(end, OpenCLEvent)
        start_ns = call("Event.elapsed_ms", lambda: self.marker.profile.end)
        end_ns = call("Event.elapsed_ms", lambda: end.marker.profile.end)
        return (end_ns - start_ns) / 1e6


class OpenCLStream(api.Stream):
    def __init__(self, device: OpenCLDevice):
        super().__init__(device)
        cl = native.cl
        self.queue = call("Device.create_stream", cl.CommandQueue, device.context, device.cl_device,
                           properties=cl.command_queue_properties.PROFILING_ENABLE)
        # [queue, the event of the last command enqueued (None: none yet)]: the queue is in order, so the stream
        # is idle once that event is complete, and a wait needs no marker of its own, which a timeout shorter
        # than the driver's latency would see as not complete on an idle stream. A dropped stream leaves this
        # pair to its device, which waits on it and lets the queue go once the event is complete.
        self._tail: list[Any] = [self.queue, None]
        weakref.finalize(self, device._dropped_queues.append, self._tail).atexit = False

    @property
    def _last(self) -> Any:
        return self._tail[1]

    @_last.setter
    def _last(self, event: Any) -> None:
        self._tail[1] = event

    def _native(self) -> Any:
        return self.queue

    def _copy_htod(self, dst: api.Buffer, dst_offset: int, src: np.ndarray) -> None:
        # a private copy: the caller may reuse ``src`` as soon as this returns (pyopencl keeps it alive)
        self._last = call("Stream.copy_htod", native.cl.enqueue_copy, self.queue, dst.mem, src.copy(),
                           dst_offset=dst_offset, is_blocking=False)

    def _copy_dtoh(self, dst: np.ndarray, src: api.Buffer, src_offset: int) -> None:
        self._last = call("Stream.copy_dtoh", native.cl.enqueue_copy, self.queue, dst, src.mem, src_offset=src_offset,
                           is_blocking=False)

    def _copy_dtod(self, dst: api.Buffer, dst_offset: int, src: api.Buffer, src_offset: int, nbytes: int) -> None:
        self._last = call("Stream.copy_dtod", native.cl.enqueue_copy, self.queue, dst.mem, src.mem, byte_count=nbytes,
                           src_offset=src_offset, dst_offset=dst_offset)

    def _fill(self, buf: api.Buffer, offset: int, nbytes: int, value: int) -> None:
        self._last = call("Stream.fill", native.cl.enqueue_fill_buffer, self.queue, buf.mem, np.uint8(value), offset,
                           nbytes)

    def _record(self, timing: bool) -> OpenCLEvent:
        return OpenCLEvent(self, timing, self._marker())

    def _rerecord(self, event: api.Event) -> None:
        """A new marker in the same event; a wait already enqueued holds the old marker."""
        assert isinstance(event, OpenCLEvent)
        event.marker, event._stream = self._marker(), self

    def _marker(self) -> Any:
        """A marker after everything enqueued so far, flushed."""
        marker = self._last = call("Stream.record", native.cl.enqueue_marker, self.queue)
        self.queue.flush()
        return marker

    def _wait(self, event: api.Event) -> None:
        assert isinstance(event, OpenCLEvent)
        event.stream.queue.flush()
        self._last = call("Stream.wait", native.cl.enqueue_barrier, self.queue, wait_for=[event.marker])

    def _synchronize(self, timeout: float | None) -> None:
        if self._last is None:
            return
        self.queue.flush()
        wait_for("Stream.synchronize", self._last, timeout)

    def _launch(self, kernel: api.Kernel, grid: Dim3, block: Dim3, args: list[api.Buffer | np.generic]) -> None:
        assert isinstance(kernel, OpenCLKernel)
        op = "Stream.launch"  # api.py has checked the arguments against the reflected parameters
        limit = self._device.info.limits.max_shared_memory
        if kernel.local_bytes > limit:
            raise InvalidArgument(op, f"kernel {kernel.name} declares {kernel.local_bytes} bytes of __local memory; "
                                      f"the device has {limit} per work-group")
        values = [a.mem if isinstance(a, api.Buffer) else a for a in args]
        global_size = tuple(g * b for g, b in zip(grid, block))
        with kernel.lock:  # argument values live on the cl.Kernel: set and enqueue as one step
            call(op, kernel.cl_kernel.set_args, *values)
            self._last = call(op, native.cl.enqueue_nd_range_kernel, self.queue, kernel.cl_kernel, global_size, block)
