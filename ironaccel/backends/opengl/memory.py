"""Buffers (GL buffer objects bound as SSBOs) and the readbacks of ``copy_dtoh``.

* A Buffer is one GL buffer object of its size rounded up to 4 bytes (kernels see 32-bit words); it is bound
  whole (glBindBufferBase), so GL_SHADER_STORAGE_BUFFER_OFFSET_ALIGNMENT never applies, and its size is capped
  by GL_MAX_SHADER_STORAGE_BLOCK_SIZE (``limits.max_alloc``), the largest range a kernel can bind.
* ``free`` deletes the GL name (queued after the work already enqueued): GL keeps the storage until the
  commands issued before that use it have run, so freeing a buffer a kernel still writes is safe.
* ``copy_dtoh`` must not block, so it copies the range (glCopyBufferSubData, in the command stream) into a
  staging buffer that is persistently and coherently mapped (glBufferStorage, GL 4.4 or ARB_buffer_storage).
  Once a fence after the copy has signalled, whichever thread sees it (a synchronize, or a query that finds
  an event recorded after the copy complete) copies the mapped bytes into the host array: no GL call, so it
  never waits for the GL thread. Staging buffers come in power-of-two sizes (4 KiB up) and are kept for
  reuse, up to ``STAGING_CACHE_BYTES`` in all, because mapping fresh pinned memory for every readback costs
  about as much as the copy itself. Staging buffers in flight count towards that bound too: a readback that would
  make more finishes the queued copies first (on the GL thread; the caller never waits) and reuses theirs, since
  NVIDIA's driver keeps the pinned memory of deleted staging buffers (LIFE-88: four queued readbacks of 128 MiB
  grew the process by 512 MiB on the H100, 380 MiB of it still there after the device closed).
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import api
from . import native as GL

if TYPE_CHECKING:
    from .device import OpenGLDevice

STAGING_FLAGS = GL.MAP_READ_BIT | GL.MAP_PERSISTENT_BIT | GL.MAP_COHERENT_BIT
STAGING_MIN_BYTES = 4096
STAGING_CACHE_BYTES = 256 << 20


def gl_size(nbytes: int) -> int:
    return -(-nbytes // 4) * 4


class OpenGLBuffer(api.Buffer):
    def __init__(self, device: OpenGLDevice, nbytes: int, gl_buffer: Any):
        super().__init__(device, nbytes)
        self._dev = device
        self.gl_buffer = gl_buffer  # a moderngl.Buffer
        # dropped unfreed: deleted at the device's next alloc, compile or synchronize (``OpenGLDevice.dropped``)
        self._dropped = weakref.finalize(self, device.dropped.append, gl_buffer.release)
        self._dropped.atexit = False  # at exit the context goes, and its buffers with it

    def _native_handle(self) -> int:
        """The GL buffer object name."""
        return self.gl_buffer.glo

    def _release(self) -> None:
        self._dropped.detach()
        if not self._dev.closed:
            self._dev.thread.submit_release(self.gl_buffer.release)
        self.gl_buffer = None


@dataclass(frozen=True)
class Staging:
    name: int  # GL buffer name
    mapped: int  # address of its persistent mapping
    size: int  # bytes: a power of two


@dataclass
class Readback:
    seq: int  # position among the device's readbacks: a fence delivers those up to its own
    staging: Staging
    host: np.ndarray  # the caller's array, as flat bytes


class Readbacks:
    """The device's pending readbacks, in the order they were enqueued."""

    def __init__(self, device: OpenGLDevice) -> None:
        self._dev = device
        self._lock = threading.Lock()
        self._pending: list[Readback] = []
        self._free: dict[int, list[Staging]] = {}  # size -> staging buffers ready for reuse
        self._free_bytes = 0
        self._staging_bytes = 0  # of every staging buffer made and not deleted: pending, cached or being filled
        self.seq = 0  # of the last readback enqueued; read by fences on the GL thread

    def enqueue(self, host: np.ndarray, src: Any, offset: int) -> None:
        """On the GL thread: copy ``host.nbytes`` bytes of ``src`` (a moderngl.Buffer) from ``offset`` into a
        staging buffer."""
        gl = self._dev.gl
        staging = self._take(max(STAGING_MIN_BYTES, 1 << (host.nbytes - 1).bit_length()))
        gl.glBindBuffer(GL.COPY_READ_BUFFER, src.glo)
        gl.glBindBuffer(GL.COPY_WRITE_BUFFER, staging.name)
        gl.glCopyBufferSubData(GL.COPY_READ_BUFFER, GL.COPY_WRITE_BUFFER, offset, 0, host.nbytes)
        with self._lock:
            self.seq += 1
            self._pending.append(Readback(self.seq, staging, host))

    def _take(self, size: int) -> Staging:
        """On the GL thread: a cached staging buffer of ``size`` bytes, or a new one (after the queued readbacks
        have completed and given theirs back, if it would take the staging memory past the bound)."""
        with self._lock:
            cached = self._free.get(size)  # no list in _free is empty
            if cached:
                self._free_bytes -= size
                staging = cached.pop()
                if not cached:
                    del self._free[size]
                return staging
            evicted = []  # cached buffers of other sizes make room first
            while self._free and self._staging_bytes + size > STAGING_CACHE_BYTES:
                other = next(iter(self._free))
                evicted.append(self._free[other].pop())
                if not self._free[other]:
                    del self._free[other]
                self._free_bytes -= other
                self._staging_bytes -= other
            over = self._pending and self._staging_bytes + size > STAGING_CACHE_BYTES
            if not over:
                self._staging_bytes += size
        for staging in evicted:
            self._delete(staging.name)
        gl = self._dev.gl
        if over:
            gl.glFinish()
            self.deliver(self.seq)
            return self._take(size)
        name = ctypes.c_uint()
        gl.glGenBuffers(1, ctypes.byref(name))
        gl.glBindBuffer(GL.COPY_WRITE_BUFFER, name.value)
        gl.glBufferStorage(GL.COPY_WRITE_BUFFER, size, None, STAGING_FLAGS)
        mapped = gl.glMapBufferRange(GL.COPY_WRITE_BUFFER, 0, size, STAGING_FLAGS)
        return Staging(name.value, mapped, size)

    def deliver(self, upto: int) -> None:
        """Any thread: fill the host arrays of the readbacks up to ``upto``, whose copies have completed."""
        with self._lock:  # copied under the lock: a delivery that finds nothing left knows the others are done
            ready = [r for r in self._pending if r.seq <= upto]
            self._pending = self._pending[len(ready):]
            for r in ready:
                ctypes.memmove(r.host.ctypes.data, r.staging.mapped, r.host.nbytes)
                if self._free_bytes + r.staging.size <= STAGING_CACHE_BYTES:
                    self._free.setdefault(r.staging.size, []).append(r.staging)
                    self._free_bytes += r.staging.size
                else:
                    self._staging_bytes -= r.staging.size
                    self._dev.thread.submit_release(self._delete, r.staging.name)

    def _delete(self, name: int) -> None:
        gl = self._dev.gl
        gl.glDeleteBuffers(1, ctypes.byref(ctypes.c_uint(name)))  # unmaps it too
