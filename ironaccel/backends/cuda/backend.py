"""The registered backend: probing for the CUDA driver, counting its devices, and opening one."""

from __future__ import annotations

from ... import api
from ...api import BackendInfo
from ...errors import DriverError, NotAvailable
from . import native
from .device import CudaDevice, _device_name, _driver_version
from .native import BACKEND, calls


class CudaBackend(api.Backend):
    name = BACKEND

    def probe(self) -> BackendInfo:
        try:
            cu = native.load()
            count = calls.cuDeviceGetCount()
            version = _driver_version(cu)
        except (NotAvailable, DriverError) as exc:
            return BackendInfo(BACKEND, False, str(exc))
        if not count:
            return BackendInfo(BACKEND, False, "the CUDA driver reports no devices", version)
        names = ", ".join(_device_name(cu, calls.cuDeviceGet(i)) for i in range(count))
        return BackendInfo(BACKEND, True, f"{count} device(s): {names}", version)

    def device_count(self) -> int:
        native.load()
        return calls.cuDeviceGetCount()

    def _open_device(self, index: int) -> CudaDevice:
        return CudaDevice(index)
