"""Buffers: a wgpu GPUBuffer each, made by ``WebGPUDevice._alloc`` (storage, copy source and destination)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ... import api

if TYPE_CHECKING:
    from .device import WebGPUDevice


class WebGPUBuffer(api.Buffer):
    def __init__(self, device: WebGPUDevice, nbytes: int, gpu_buffer: Any):
        super().__init__(device, nbytes)
        self._gpu_buffer = gpu_buffer

    def _native_handle(self) -> Any:
        return self._gpu_buffer

    def _release(self) -> None:
        # Release, not destroy: work already submitted that uses the buffer keeps it alive until done.
        self._gpu_buffer = None
