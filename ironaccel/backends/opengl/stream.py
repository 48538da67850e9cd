"""Streams and events over the one command stream of a GL context.

How Streams map: GL has one command stream per context and the device has one context, driven by one
thread (``context.GLThread``). Every Stream object submits its work to that thread, which issues it into the
command stream in the order it was submitted. So each stream keeps its own order (STREAM-1, STREAM-4), work
submitted after ``B.wait(event)`` already follows everything before the event (STREAM-3, STREAM-7: ``wait``
enqueues nothing), and streams never run concurrently with each other (the price of GL's model). Visibility
between commands is explicit: every dispatch is followed by ``glMemoryBarrier(GL_ALL_BARRIER_BITS)``,
because shader storage writes are incoherent in GL and later copies, clears or dispatches must see them.

``copy_htod`` copies the host bytes before it returns (the array is reusable at once) and submits the upload;
copies, fills and launches return without waiting for the GL thread.

Events are EGL fence syncs placed by a job on the GL thread (``Fence``); ``query`` polls and
``synchronize(timeout)`` waits in the caller's thread (never on the GL thread), raising Timeout at the
deadline. A timed event also writes a GL_TIMESTAMP query (glQueryCounter) just before its fence.
"""

from __future__ import annotations

import ctypes
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import api
from ...errors import DriverError, Timeout
from . import native as GL
from .memory import OpenGLBuffer

if TYPE_CHECKING:
    from .device import OpenGLDevice
    from .module import OpenGLKernel


class Fence:
    """A point in the command stream. ``place`` (a GL-thread job) creates its sync and, for a timed event,
    its timestamp query; ``wait`` works from any thread and, once the sync has signalled, delivers the
    readbacks enqueued before it."""

    def __init__(self, dev: OpenGLDevice, timing: bool):
        self._dev = dev
        self._timing = timing
        self._placed = threading.Event()
        self._sync: int | None = None
        self._done = False
        self.readback_seq = 0
        self.query: int | None = None
        self.job = 0  # the number of its ``place`` job (GLThread.jobs): once it signals, every job up to it is done

    def place(self) -> None:
        dev, gl = self._dev, self._dev.gl
        try:
            if self._timing:
                name = ctypes.c_uint()
                gl.glGenQueries(1, ctypes.byref(name))
                gl.glQueryCounter(name.value, GL.TIMESTAMP)
                self.query = name.value
            self.readback_seq = dev.readbacks.seq
            self._sync = dev.thread.syncs.create()
            gl.glFlush()  # the fence signals only once the commands before it have been sent to the device
        finally:
            self._placed.set()  # a failed placement is raised by the waiter (GLThread keeps the error)

    def wait(self, timeout: float | None) -> bool:
        """True once the work before the fence has completed; waits up to ``timeout`` seconds (0: a poll)."""
        if self._done:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._placed.wait(timeout):
            return False
        sync = self._sync
        if sync is None:  # placing failed: the error is the thread's
            self._dev.thread.raise_failure()
            return True
        left = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1e9))
        try:
            if not self._dev.thread.syncs.wait(sync, left):
                return False
        except DriverError:
            if self._done:  # another thread saw it signal and destroyed the sync meanwhile
                return True
            raise
        with self._dev.fence_lock:  # done only once delivered: a waiter that sees it done may read its arrays
            if not self._done:
                self._sync = None
                self._dev.thread.syncs.destroy(sync)
                self._dev.readbacks.deliver(self.readback_seq)
                self._dev.finished_jobs = max(self._dev.finished_jobs, self.job)
                self._done = True
        return True

    def discard(self) -> None:
        """On the GL thread, after ``place``: free the sync and the query of a fence no one will wait on."""
        with self._dev.fence_lock:
            sync, self._sync, self._done = self._sync, None, True
        if sync is not None:
            self._dev.thread.syncs.destroy(sync)
        if self.query is not None:
            self._dev.gl.glDeleteQueries(1, ctypes.byref(ctypes.c_uint(self.query)))
            self.query = None


def wait_for(fence: Fence, op: str, timeout: float | None) -> None:
    """Block until ``fence`` has signalled; past ``timeout`` seconds raise Timeout(op); then raise any error
    of the work submitted before it."""
    if not fence.wait(timeout):
        raise Timeout(op, timeout or 0.0, "the GL fence has not signalled")
    fence._dev.thread.raise_failure()


class OpenGLEvent(api.Event):
    def __init__(self, stream: OpenGLStream, timing: bool, fence: Fence):
        super().__init__(stream, timing)
        self._dev = stream._dev
        self._fence = fence
        self._ns: int | None = None

    def __del__(self) -> None:
        dev = getattr(self, "_dev", None)
        if dev is not None and not dev.closed:
            dev.thread.submit_release(self._fence.discard)  # queued after its placement, so there is a sync to free

    def _query(self) -> bool:
        return self._fence.wait(0)

    def _synchronize(self, timeout: float | None) -> None:
        wait_for(self._fence, "Event.synchronize", timeout)

    def _nanoseconds(self) -> int:
        if self._ns is None:
            self._synchronize(None)
            self._ns = self._dev.thread.run(self._read_timestamp)
        return self._ns

    def _read_timestamp(self) -> int:
        gl = self._dev.gl
        value = ctypes.c_uint64()
        gl.glGetQueryObjectui64v(self._fence.query, GL.QUERY_RESULT, ctypes.byref(value))
        return value.value

    def _elapsed_ms(self, end: api.Event) -> float:
        assert isinstance(end, OpenGLEvent)
        return (end._nanoseconds() - self._nanoseconds()) / 1e6


def _gl(buf: api.Buffer) -> Any:
    assert isinstance(buf, OpenGLBuffer)
    return buf.gl_buffer


class OpenGLStream(api.Stream):
    def __init__(self, device: OpenGLDevice):
        super().__init__(device)
        self._dev: OpenGLDevice = device

    def _native(self) -> Any:
        """The moderngl.Context: GL has one command stream per context, and every stream enqueues into it."""
        return self._dev.ctx

    # -- on the GL thread -------------------------------------------------------------------------
    # Jobs take the moderngl.Buffer, not the Buffer: a Buffer freed after the call lets go of it, while GL
    # keeps the storage for the commands already issued.
    def _gl_copy_htod(self, dst: Any, offset: int, src: np.ndarray) -> None:
        self._dev.gl.mgl("glBufferSubData", dst.write, src, offset)

    def _gl_copy_dtod(self, dst: Any, dst_offset: int, src: Any, src_offset: int, n: int) -> None:
        self._dev.gl.mgl("glCopyBufferSubData", self._dev.ctx.copy_buffer, dst, src, n, src_offset, dst_offset)

    def _gl_fill(self, buf: Any, offset: int, nbytes: int, value: int) -> None:
        gl = self._dev.gl
        gl.glBindBuffer(GL.COPY_WRITE_BUFFER, buf.glo)
        byte = ctypes.c_ubyte(value)
        gl.glClearBufferSubData(GL.COPY_WRITE_BUFFER, GL.R8UI, offset, nbytes, GL.RED_INTEGER, GL.UNSIGNED_BYTE,
                                ctypes.byref(byte))

    # -- the API ----------------------------------------------------------------------------------
    def _copy_htod(self, dst: api.Buffer, dst_offset: int, src: np.ndarray) -> None:
        self._dev.thread.submit(self._gl_copy_htod, _gl(dst), dst_offset, src.copy())  # the caller may reuse src

    def _copy_dtoh(self, dst: np.ndarray, src: api.Buffer, src_offset: int) -> None:
        self._dev.thread.submit(self._dev.readbacks.enqueue, dst, _gl(src), src_offset)

    def _copy_dtod(self, dst: api.Buffer, dst_offset: int, src: api.Buffer, src_offset: int, nbytes: int) -> None:
        self._dev.thread.submit(self._gl_copy_dtod, _gl(dst), dst_offset, _gl(src), src_offset, nbytes)

    def _fill(self, buf: api.Buffer, offset: int, nbytes: int, value: int) -> None:
        self._dev.thread.submit(self._gl_fill, _gl(buf), offset, nbytes, value)

    def _record(self, timing: bool) -> OpenGLEvent:
        return OpenGLEvent(self, timing, self._placed_fence(timing))

    def _rerecord(self, event: api.Event) -> None:
        """A new fence in the same event; the old one is freed as a dropped event's is (its placement first)."""
        assert isinstance(event, OpenGLEvent)
        old, event._fence = event._fence, self._placed_fence(event._timing)
        event._stream, event._ns = self, None
        self._dev.thread.submit_release(old.discard)

    def _placed_fence(self, timing: bool) -> Fence:
        """A fence after everything enqueued so far (its placement queued on the GL thread)."""
        fence = Fence(self._dev, timing)
        fence.job = self._dev.thread.submit(fence.place)
        return fence

    def _wait(self, event: api.Event) -> None:
        """Nothing to enqueue: all streams share one command stream, and the event is already in it."""

    def _synchronize(self, timeout: float | None) -> None:
        self._dev.finish("Stream.synchronize", timeout)

    def _launch(self, kernel: api.Kernel, grid: api.Dim3, block: api.Dim3, args: list[Any]) -> None:
        kernel_: OpenGLKernel = kernel  # type: ignore[assignment]
        kernel_.launch(grid, block, args)
