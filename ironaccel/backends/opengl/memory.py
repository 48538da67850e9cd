"""Buffers (GL buffer objects bound as SSBOs) and the readbacks of ``copy_dtoh``.

* A Buffer is one GL buffer object of its size rounded up to 4 bytes (kernels see 32-bit words); it is bound
  whole (glBindBufferBase), so GL_SHADER_STORAGE_BUFFER_OFFSET_ALIGNMENT never applies, and its size is capped
  by GL_MAX_SHADER_STORAGE_BLOCK_SIZE (``limits.max_alloc``), the largest range a kernel can bind.
* ``free`` deletes the GL name at once: GL keeps the storage until the commands already issued that use it
  have run, so freeing a buffer a kernel still writes is safe.
* ``copy_dtoh`` must not block, so it copies the range into a fresh staging buffer in the command stream
  (glCopyBufferSubData) and the host array is filled (glGetBufferSubData from the staging buffer) once a fence
  after the copy has signalled: at a synchronize, or when an event recorded after it is found complete.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import api

if TYPE_CHECKING:
    from .device import OpenGLDevice


def gl_size(nbytes: int) -> int:
    return -(-nbytes // 4) * 4


class OpenGLBuffer(api.Buffer):
    def __init__(self, device: OpenGLDevice, nbytes: int, gl_buffer: Any):
        super().__init__(device, nbytes)
        self._dev = device
        self.gl_buffer = gl_buffer  # a moderngl.Buffer

    def _native_handle(self) -> int:
        """The GL buffer object name."""
        return self.gl_buffer.glo

    def _release(self) -> None:
        if not self._dev.closed:
            self._dev.thread.run(self.gl_buffer.release)
        self.gl_buffer = None


@dataclass
class Readback:
    seq: int  # position among the device's readbacks: events and fences deliver up to theirs
    staging: Any  # moderngl.Buffer holding the copied range
    host: np.ndarray  # the caller's array, as flat bytes


class Readbacks:
    """The device's pending readbacks, in the order they were enqueued. Only the GL thread touches them."""

    def __init__(self) -> None:
        self.pending: list[Readback] = []
        self.seq = 0

    def add(self, staging: Any, host: np.ndarray) -> None:
        self.seq += 1
        self.pending.append(Readback(self.seq, staging, host))

    def deliver(self, gl: Any, upto: int) -> None:
        """Fill the host arrays of readbacks up to ``upto``: their copies have completed."""
        while self.pending and self.pending[0].seq <= upto:
            r = self.pending.pop(0)
            gl.mgl("glGetBufferSubData", r.staging.read_into, r.host, r.host.nbytes)
            r.staging.release()
