"""The registered backend: probing wgpu for compute-complete adapters, counting them, and opening one."""

from __future__ import annotations

from typing import Any

from ... import api
from ...api import BackendInfo
from ...errors import NotAvailable
from . import native
from .device import WebGPUDevice
from .native import BACKEND, import_wgpu

COMPUTE_BACKEND_TYPES = ("Vulkan", "Metal", "D3D12")


def _adapters() -> list[Any]:
    wgpu = import_wgpu()
    try:
        found = wgpu.gpu.enumerate_adapters_sync()
    except Exception as exc:  # a broken loader or ICD must not crash enumeration
        raise NotAvailable(BACKEND, "wgpu-native", f"adapter enumeration failed: {exc}") from None
    return [a for a in found if a.info.get("backend_type") in COMPUTE_BACKEND_TYPES]


class WebGPUBackend(api.Backend):
    name = BACKEND

    def probe(self) -> BackendInfo:
        try:
            adapters = _adapters()
        except NotAvailable as exc:
            return BackendInfo(BACKEND, False, exc.detail)
        version = native._wgpu.__version__
        if not adapters:
            return BackendInfo(BACKEND, False, "wgpu found no Vulkan/Metal/D3D12 adapter", version)
        names = ", ".join(a.info["device"] for a in adapters)
        return BackendInfo(BACKEND, True, f"{len(adapters)} adapter(s): {names}", version)

    def device_count(self) -> int:
        return len(_adapters())

    def _open_device(self, index: int) -> WebGPUDevice:
        return WebGPUDevice(_adapters()[index], index)
