"""Buffers: a cl.Buffer each, made by ``OpenCLDevice._alloc``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ironaccel import api

if TYPE_CHECKING:
    from .device import OpenCLDevice


class OpenCLBuffer(api.Buffer):
    def __init__(self, device: OpenCLDevice, nbytes: int, mem: Any):
        super().__init__(device, nbytes)
        self.mem = mem

    def _native_handle(self) -> Any:
        return self.mem

    def _release(self) -> None:
        self.mem.release()
