"""The registered backend: probing for Vulkan, counting its devices, and opening one.

Each call makes its own VkInstance (probes and counts destroy theirs at once; an opened device owns its own),
so a device's validation setting never leaks into another's.
"""

from __future__ import annotations

from ... import api
from ...api import BackendInfo
from ...errors import DriverError, NotAvailable
from . import native
from .device import VulkanDevice
from .instance import Instance, device_name, instance_version, validation_requested


class VulkanBackend(api.Backend):
    name = "vulkan"
    options = ("validation",)

    def probe(self) -> BackendInfo:
        try:
            instance = Instance(validation=False)
            try:
                names = [device_name(pd) for pd in instance.physical_devices()]
            finally:
                instance.destroy()
            version = native.version_string(instance_version())
        except (NotAvailable, DriverError) as exc:
            return BackendInfo(self.name, False, str(exc))
        if not names:
            return BackendInfo(self.name, False, "no Vulkan 1.2 device: install a driver (apt-get install "
                               "mesa-vulkan-drivers for lavapipe) or set VK_DRIVER_FILES to its ICD json", version)
        return BackendInfo(self.name, True, f"{len(names)} device(s): {', '.join(names)}", version)

    def device_count(self) -> int:
        instance = Instance(validation=False)
        try:
            return len(instance.physical_devices())
        finally:
            instance.destroy()

    def _open_device(self, index: int, *, validation: bool | str | None = None) -> VulkanDevice:
        """``validation`` (True, False, or ``"sync"``: with synchronization validation) defaults to the
        ``IRONACCEL_VK_VALIDATION`` variable."""
        instance = Instance(*validation_requested(validation))
        try:
            return VulkanDevice(instance, instance.physical_devices()[index], index)
        except BaseException:
            instance.destroy()
            raise
