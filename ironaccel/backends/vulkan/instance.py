"""The VkInstance: the validation layer and a messenger that collects its messages when asked, and the
physical devices the backend can use (Vulkan 1.2 or later: timeline semaphores are core there).

The layer's synchronization validation (``IRONACCEL_VK_VALIDATION=sync``, ``open_device(validation="sync")``)
also reports hazards: two commands of one command buffer that touch the same memory with no barrier between
them. CPU drivers run a command buffer's commands one after another, so a missing barrier gives the right
result there and only this check sees it. The layer of Vulkan SDK 1.3.239 (Debian 12) checks within command
buffers only: it does not model timeline semaphores, so its check across submissions
(``VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT``) is left off; it reports every ordering
by a timeline wait as a hazard. Between two dispatches it sees a read after a write and a write after a read,
not two writes (a storage buffer a kernel does not declare NonWritable counts as written, not read).

Apart from the device because the backend's ``probe`` and ``device_count`` need an instance and no device.
"""

from __future__ import annotations

import os
from typing import Any

from ...errors import InvalidArgument, NotAvailable
from . import native

VALIDATION_ENV = "IRONACCEL_VK_VALIDATION"
VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
SYNC = "sync"  # the validation setting that adds synchronization validation


def instance_layers() -> set[str]:
    return {native.string(p.layerName)
            for p in native.enumerate_items("vkEnumerateInstanceLayerProperties", "VkLayerProperties")}


def instance_extensions(layer: Any) -> set[str]:
    return {native.string(p.extensionName)
            for p in native.enumerate_items("vkEnumerateInstanceExtensionProperties", "VkExtensionProperties", layer)}


class Instance:
    """A VkInstance, with the validation layer and a messenger that collects its messages when asked, and
    the layer's synchronization validation when ``synchronization`` (which needs ``validation``)."""

    def __init__(self, validation: bool, synchronization: bool = False):
        vk = native.load()
        ffi, lib = vk.ffi, vk.lib
        self.messages: list[str] = []
        layers: list[bytes] = []
        extensions: list[bytes] = []
        messenger_info = ffi.NULL
        self.synchronization = validation and synchronization
        if validation:
            if VALIDATION_LAYER not in instance_layers():
                searched = os.environ.get("VK_LAYER_PATH") or "/usr/share/vulkan/explicit_layer.d, /etc/vulkan/explicit_layer.d"
                raise NotAvailable("vulkan", VALIDATION_LAYER,
                                   f"the validation layer is not installed (searched {searched}): "
                                   "apt-get install vulkan-validationlayers, or unset " + VALIDATION_ENV)
            layers.append(VALIDATION_LAYER.encode())
            if "VK_EXT_debug_utils" in instance_extensions(ffi.NULL) | instance_extensions(layers[0]):
                extensions.append(b"VK_EXT_debug_utils")
                self._callback = ffi.callback("PFN_vkDebugUtilsMessengerCallbackEXT", self._on_message)
                messenger_info = ffi.new("VkDebugUtilsMessengerCreateInfoEXT*", {
                    "sType": vk.VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
                    "messageSeverity": vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
                    | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
                    "messageType": vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT
                    | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
                    | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
                    "pfnUserCallback": self._callback,
                })
        chain = messenger_info
        if self.synchronization:
            extensions.append(b"VK_EXT_validation_features")  # the layer's own extension
            enabled = ffi.new("VkValidationFeatureEnableEXT[1]",
                              [vk.VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT])
            chain = ffi.new("VkValidationFeaturesEXT*", {
                "sType": vk.VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT, "pNext": messenger_info,
                "enabledValidationFeatureCount": 1, "pEnabledValidationFeatures": enabled,
            })
        # cffi does not keep an initializer's pointees alive: every pointed-to object is a local here.
        c_layers, layer_names = native.c_strings(layers)
        c_exts, extension_names = native.c_strings(extensions)
        c_name = ffi.new("char[]", b"ironaccel")
        app = ffi.new("VkApplicationInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_APPLICATION_INFO, "pApplicationName": c_name, "pEngineName": c_name,
            "apiVersion": native.api_version(1, 3),
        })
        info = ffi.new("VkInstanceCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
            "pNext": chain,
            "pApplicationInfo": app,
            "enabledLayerCount": len(layers),
            "ppEnabledLayerNames": layer_names,
            "enabledExtensionCount": len(extensions),
            "ppEnabledExtensionNames": extension_names,
        })
        out = ffi.new("VkInstance*")
        native.call.vkCreateInstance(info, ffi.NULL, out)
        self.handle = out[0]
        self._messenger = None
        if messenger_info != ffi.NULL:
            messenger = ffi.new("VkDebugUtilsMessengerEXT*")
            try:
                native.instance_function(self.handle, "vkCreateDebugUtilsMessengerEXT")(
                    self.handle, messenger_info, ffi.NULL, messenger)
            except BaseException:
                lib.vkDestroyInstance(self.handle, ffi.NULL)
                raise
            self._messenger = messenger[0]

    def _on_message(self, severity: int, kind: int, data: Any, user: Any) -> int:
        label = "error" if severity & native.vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT else "warning"
        self.messages.append(f"vulkan validation {label}: {native.string(data.pMessage)}")
        return 0  # VK_FALSE: never abort the call

    def physical_devices(self) -> list[Any]:
        """Physical devices that speak Vulkan 1.2 or later (timeline semaphores are core there)."""
        ffi, lib = native.vk.ffi, native.vk.lib
        found = list(native.enumerate_items("vkEnumeratePhysicalDevices", "VkPhysicalDevice", self.handle))
        usable = []
        for pd in found:
            props = ffi.new("VkPhysicalDeviceProperties*")
            lib.vkGetPhysicalDeviceProperties(pd, props)
            if props.apiVersion >= native.api_version(1, 2):
                usable.append(pd)
        return usable

    def destroy(self) -> None:
        ffi, lib = native.vk.ffi, native.vk.lib
        if self._messenger is not None:
            destroy = native.instance_function(self.handle, "vkDestroyDebugUtilsMessengerEXT")
            destroy(self.handle, self._messenger, ffi.NULL)
            self._messenger = None
        lib.vkDestroyInstance(self.handle, ffi.NULL)


def device_name(physical: Any) -> str:
    props = native.vk.ffi.new("VkPhysicalDeviceProperties*")
    native.vk.lib.vkGetPhysicalDeviceProperties(physical, props)
    return native.string(props.deviceName)


def validation_requested(validation: bool | str | None) -> tuple[bool, bool]:
    """(the validation layer, its synchronization validation) that ``validation`` asks for: False, True or
    ``"sync"``; None reads ``IRONACCEL_VK_VALIDATION`` ("" or "0": off, "sync", anything else: on)."""
    if validation is None:
        value = os.environ.get(VALIDATION_ENV, "")
        return value not in ("", "0"), value == SYNC
    if validation is True or validation is False:
        return validation, False
    if validation == SYNC:
        return True, True
    raise InvalidArgument("Backend.open_device", f"validation must be True, False or {SYNC!r}, not {validation!r}")



def instance_version() -> int:
    out = native.vk.ffi.new("uint32_t*")
    native.call.vkEnumerateInstanceVersion(out)
    return out[0]
