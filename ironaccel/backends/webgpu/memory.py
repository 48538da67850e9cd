"""Buffers: a wgpu GPUBuffer each, made by ``WebGPUDevice._alloc`` (storage, copy source and destination)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ... import api
from .module import forget_dispatch

if TYPE_CHECKING:
    from .device import WebGPUDevice


class WebGPUBuffer(api.Buffer):
    def __init__(self, device: WebGPUDevice, nbytes: int, gpu_buffer: Any):
        super().__init__(device, nbytes)
        self._gpu_buffer = gpu_buffer

    def _native_handle(self) -> Any:
        return self._gpu_buffer

    def _release(self) -> None:
        # Release, not destroy: work already submitted that uses the buffer keeps it alive until done. The
        # kernels' cached dispatches that bind it go too (their bind groups would keep its memory).
        dev: WebGPUDevice = self._device  # type: ignore[assignment]
        with dev._lock:
            users = dev._dispatch_users
            for kernel_ref, key in users.pop(id(self._gpu_buffer), ()):
                forget_dispatch(users, kernel_ref, key)  # its entries under the other buffers it binds
                kernel = kernel_ref()
                if kernel is not None:
                    dispatch = kernel._dispatches.pop(key, None)
                    if dispatch is not None and kernel._last is not None and kernel._last[2] is dispatch:
                        kernel._last = None
        self._gpu_buffer = None
