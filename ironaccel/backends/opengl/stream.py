"""Streams and events over the one command stream of a GL context.

How Streams map: GL has one command stream per context and the device has one context, driven by one
thread (``context.GLThread``). Every Stream object enqueues into that command stream, in the order the calls
reach the GL thread. So each stream keeps its own order (STREAM-1, STREAM-4), work enqueued after
``B.wait(event)`` already follows everything before the event (STREAM-3: ``wait`` enqueues nothing), and
streams never run concurrently with each other (the price of GL's model). Visibility between commands is
made explicit: every dispatch is followed by ``glMemoryBarrier(GL_ALL_BARRIER_BITS)``, because shader
storage writes are incoherent in GL and later copies, clears or dispatches must see them.

Events are fence syncs (glFenceSync, flushed so they signal without a further call); ``query`` asks
glClientWaitSync with a zero timeout; ``synchronize(timeout)`` waits in slices of at most ``WAIT_SLICE_S`` so
one waiting thread never holds the GL thread (and other threads' work) for long, and raises Timeout at the
deadline. A timed event also writes a GL_TIMESTAMP query (glQueryCounter) just before its fence.
"""

from __future__ import annotations

import ctypes
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import api
from ...errors import Timeout
from . import gl as GL
from .memory import OpenGLBuffer

if TYPE_CHECKING:
    from .device import OpenGLDevice
    from .module import OpenGLKernel

WAIT_SLICE_S = 0.005


class Fence:
    """A GL fence sync and the readbacks it completes; only the GL thread calls its methods."""

    def __init__(self, dev: OpenGLDevice, timestamp_query: int | None):
        gl = dev.gl
        self._dev = dev
        self.readback_seq = dev.readbacks.seq
        self.query = timestamp_query
        self.sync = gl.glFenceSync(GL.SYNC_GPU_COMMANDS_COMPLETE, 0)
        gl.check("glFenceSync")
        gl.glFlush()  # a fence signals only once the commands before it reach the GPU
        gl.check("glFlush")

    def wait(self, nanoseconds: int) -> bool:
        """glClientWaitSync for up to ``nanoseconds``; on completion deliver the readbacks before it."""
        if self.sync is None:
            return True
        gl = self._dev.gl
        status = gl.glClientWaitSync(self.sync, 0, nanoseconds)
        if status == GL.WAIT_FAILED:
            gl.check("glClientWaitSync")
            raise gl.error("glClientWaitSync", None, "GL_WAIT_FAILED")
        if status == GL.TIMEOUT_EXPIRED:
            return False
        gl.glDeleteSync(self.sync)
        self.sync = None
        self._dev.readbacks.deliver(gl, self.readback_seq)
        return True

    def discard(self) -> None:
        if self.sync is not None:
            self._dev.gl.glDeleteSync(self.sync)
            self.sync = None
        if self.query is not None:
            self._dev.gl.glDeleteQueries(1, ctypes.byref(ctypes.c_uint(self.query)))
            self.query = None


def wait_for(dev: OpenGLDevice, fence: Fence, op: str, timeout: float | None) -> None:
    """Block until ``fence`` signals; past ``timeout`` seconds raise Timeout(op)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    slice_ns = int(WAIT_SLICE_S * 1e9)
    while True:
        if deadline is not None:
            slice_ns = max(0, min(slice_ns, int((deadline - time.monotonic()) * 1e9)))
        if dev.thread.run(fence.wait, slice_ns):
            return
        if deadline is not None and time.monotonic() >= deadline:
            raise Timeout(op, timeout or 0.0, "the GL fence has not signalled")


class OpenGLEvent(api.Event):
    def __init__(self, stream: OpenGLStream, timing: bool, fence: Fence):
        super().__init__(stream, timing)
        self._dev = stream._dev
        self._fence = fence
        self._ns: int | None = None

    def __del__(self) -> None:
        dev = getattr(self, "_dev", None)
        if dev is not None:
            dev.discard(self._fence)  # the GL thread deletes the sync and the query later

    def _query(self) -> bool:
        return self._dev.thread.run(self._fence.wait, 0)

    def _synchronize(self, timeout: float | None) -> None:
        wait_for(self._dev, self._fence, "Event.synchronize", timeout)

    def _nanoseconds(self) -> int:
        if self._ns is None:
            self._synchronize(None)
            self._ns = self._dev.thread.run(self._read_timestamp)
        return self._ns

    def _read_timestamp(self) -> int:
        gl = self._dev.gl
        value = ctypes.c_uint64()
        gl.glGetQueryObjectui64v(self._fence.query, GL.QUERY_RESULT, ctypes.byref(value))
        gl.check("glGetQueryObjectui64v")
        return value.value

    def _elapsed_ms(self, end: api.Event) -> float:
        assert isinstance(end, OpenGLEvent)
        return (end._nanoseconds() - self._nanoseconds()) / 1e6


class OpenGLStream(api.Stream):
    def __init__(self, device: OpenGLDevice):
        super().__init__(device)
        self._dev: OpenGLDevice = device

    def _native(self) -> Any:
        """The moderngl.Context: GL has one command stream per context, and every stream enqueues into it."""
        return self._dev.ctx

    # -- on the GL thread -------------------------------------------------------------------------
    def _gl_copy_htod(self, dst: OpenGLBuffer, offset: int, src: np.ndarray) -> None:
        self._dev.gl.mgl("glBufferSubData", dst.gl_buffer.write, src, offset)  # copies src before returning

    def _gl_copy_dtoh(self, dst: np.ndarray, src: OpenGLBuffer, offset: int) -> None:
        dev = self._dev
        staging = dev.gl.mgl("glBufferData", dev.ctx.buffer, reserve=dst.nbytes)
        dev.gl.mgl("glCopyBufferSubData", dev.ctx.copy_buffer, staging, src.gl_buffer, dst.nbytes, offset, 0)
        dev.readbacks.add(staging, dst)

    def _gl_copy_dtod(self, dst: OpenGLBuffer, dst_offset: int, src: OpenGLBuffer, src_offset: int, n: int) -> None:
        self._dev.gl.mgl("glCopyBufferSubData", self._dev.ctx.copy_buffer, dst.gl_buffer, src.gl_buffer, n,
                         src_offset, dst_offset)

    def _gl_fill(self, buf: OpenGLBuffer, offset: int, nbytes: int, value: int) -> None:
        gl = self._dev.gl
        gl.glBindBuffer(GL.COPY_WRITE_BUFFER, buf.gl_buffer.glo)
        gl.check("glBindBuffer")
        byte = ctypes.c_ubyte(value)
        gl.glClearBufferSubData(GL.COPY_WRITE_BUFFER, GL.R8UI, offset, nbytes, GL.RED_INTEGER, GL.UNSIGNED_BYTE,
                                ctypes.byref(byte))
        gl.check("glClearBufferSubData")

    def _gl_record(self, timing: bool) -> Fence:
        dev = self._dev
        dev.collect_garbage()
        query = None
        if timing:
            gl = dev.gl
            name = ctypes.c_uint()
            gl.glGenQueries(1, ctypes.byref(name))
            gl.check("glGenQueries")
            gl.glQueryCounter(name.value, GL.TIMESTAMP)
            gl.check("glQueryCounter")
            query = name.value
        return Fence(dev, query)

    # -- the API ----------------------------------------------------------------------------------
    def _copy_htod(self, dst: api.Buffer, dst_offset: int, src: np.ndarray) -> None:
        self._dev.thread.run(self._gl_copy_htod, dst, dst_offset, src)

    def _copy_dtoh(self, dst: np.ndarray, src: api.Buffer, src_offset: int) -> None:
        self._dev.thread.run(self._gl_copy_dtoh, dst, src, src_offset)

    def _copy_dtod(self, dst: api.Buffer, dst_offset: int, src: api.Buffer, src_offset: int, nbytes: int) -> None:
        self._dev.thread.run(self._gl_copy_dtod, dst, dst_offset, src, src_offset, nbytes)

    def _fill(self, buf: api.Buffer, offset: int, nbytes: int, value: int) -> None:
        self._dev.thread.run(self._gl_fill, buf, offset, nbytes, value)

    def _record(self, timing: bool) -> OpenGLEvent:
        return OpenGLEvent(self, timing, self._dev.thread.run(self._gl_record, timing))

    def _wait(self, event: api.Event) -> None:
        """Nothing to enqueue: all streams share one command stream, and the event is already in it."""

    def _synchronize(self, timeout: float | None) -> None:
        self._dev.finish("Stream.synchronize", timeout)

    def _launch(self, kernel: api.Kernel, grid: api.Dim3, block: api.Dim3, args: list[Any]) -> None:
        kernel_: OpenGLKernel = kernel  # type: ignore[assignment]
        self._dev.thread.run(kernel_.dispatch, grid, block, args)
