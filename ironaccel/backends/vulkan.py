"""The Vulkan backend, over the ``vulkan`` cffi package (imported lazily: the module loads without it).

How the shared API maps onto Vulkan:

* **Device** — one VkInstance (validation layer and a debug-utils messenger when ``IRONACCEL_VK_VALIDATION=1``
  or ``open_device(..., validation=True)``), one physical device, one logical device with up to four queues
  of a compute-capable family. Physical devices older than Vulkan 1.2 (no timeline semaphores) are not listed.
* **Stream** — a timeline semaphore and a command pool (released when the stream is collected: the device
  keeps only streams with work outstanding); streams take the device's queues in turn. Work is recorded into
  the stream's open command buffer (a full memory barrier between commands keeps stream order) and submitted,
  without a host wait, as soon as the stream's earlier submissions have completed (so work starts at once on
  an idle device), else at ``record``, ``synchronize``, ``Device.synchronize`` or every ``BATCH_COMMANDS``
  commands. Each submission waits for the stream's previous value and for the events passed to ``wait``, and
  signals the next value. The host waits only when ``MAX_IN_FLIGHT`` submissions are outstanding.
* **Event** — a (stream, timeline value) pair; ``timing=True`` adds a timestamp query. Host-side work that a
  submission owes (filling a ``copy_dtoh`` destination from staging, recycling staging memory, command
  buffers and descriptor pools) runs when any event/stream/device query or wait sees it complete.
* **Memory** — buffers are sub-allocated (256-byte aligned) from ``BLOCK_SIZE`` VkDeviceMemory blocks, each
  bound whole to one VkBuffer; large ones get their own. ``Buffer.handle`` is that VkBuffer and
  ``VulkanBuffer.offset`` the buffer's byte offset in it. Copies go through host-visible staging memory; when
  device memory is itself host-visible, coherent and cached (lavapipe, SwiftShader) and the stream has no
  work outstanding, copies and fills touch the mapped memory directly (``IRONACCEL_VK_DIRECT_MAPPING=0`` turns
  that off, so CPU drivers exercise the staging path discrete GPUs take). A freed buffer's range is reused only
  once every stream has finished the work enqueued before the free.
* **Kernels** — ``lang="spirv"`` (bytes; kernel names are the GLCompute OpEntryPoint names) and
  ``lang="glsl"`` (glslangValidator; the kernel is ``main``, or ``NAME`` with ``options=("-e", NAME)``).
  Buffers bind as storage buffers set 0, bindings 0..k-1; scalars are one push-constant block packed by
  ``api.pack_scalars``; the block size is specialization constants 0, 1, 2. Pipelines are cached per
  (kernel, block, argument layout).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import weakref
from bisect import bisect_left, insort
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .. import api
from ..api import BackendInfo, DeviceInfo, Dim3, Limits
from ..errors import CompileError, DriverError, InvalidArgument, NotAvailable, OutOfMemory

__all__ = ["VulkanBackend", "VulkanDevice", "VulkanStream", "VulkanEvent", "VulkanBuffer", "VulkanModule",
           "spirv_entry_points"]

VALIDATION_ENV = "IRONACCEL_VK_VALIDATION"
DIRECT_MAPPING_ENV = "IRONACCEL_VK_DIRECT_MAPPING"
VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
GLSLANG = "glslangValidator"

BLOCK_SIZE = 64 << 20  # bytes per sub-allocated VkDeviceMemory block (less on small heaps)
ALIGNMENT = 256  # sub-allocation granularity: covers every offset alignment Vulkan asks of buffers
BATCH_COMMANDS = 64  # commands recorded before a stream submits on its own
MAX_IN_FLIGHT = 64  # submissions per stream before the host waits for the oldest
MAX_QUEUES = 4
TIMESTAMP_SLOTS = 1024  # timestamp queries per VkQueryPool

_U64_MAX = (1 << 64) - 1
_VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel", 0x13B5: "ARM", 0x5143: "Qualcomm",
            0x1010: "Imagination", 0x106B: "Apple", 0x1AE0: "Google", 0x10005: "Mesa"}

_vk: Any = None  # the ``vulkan`` module once loaded


def _load() -> Any:
    """Import the ``vulkan`` package; a missing package or loader is NotAvailable, never ImportError."""
    global _vk
    if _vk is None:
        try:
            import vulkan
        except ImportError as exc:
            raise NotAvailable("vulkan", "vulkan", f"the Python package is not installed ({exc}): pip install vulkan") from None
        except OSError as exc:  # the package raises OSError when it cannot dlopen the loader
            raise NotAvailable(
                "vulkan", "libvulkan.so.1",
                f"the Vulkan loader was not found (searched libvulkan.so.1 on the library path: {exc}): "
                "apt-get install libvulkan1",
            ) from None
        _vk = vulkan
    return _vk


def _error(op: str, code: int, detail: str = "") -> DriverError:
    """The one place a VkResult becomes an exception: DriverError, or OutOfMemory for the OOM codes."""
    name = _vk.ffi.typeof("VkResult").elements.get(code, f"VkResult({code})")
    if code in (_vk.VK_ERROR_OUT_OF_DEVICE_MEMORY, _vk.VK_ERROR_OUT_OF_HOST_MEMORY):
        return OutOfMemory("vulkan", op, code, name, detail or "free buffers or trim a MemPool, then retry")
    return DriverError("vulkan", op, code, name, detail)


def _check(op: str, result: int) -> int:
    """Raise for a negative VkResult; return non-negative ones (VK_TIMEOUT, VK_NOT_READY) to the caller."""
    if result < 0:
        raise _error(op, result)
    return result


def _version(v: int) -> str:
    return f"{v >> 22}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def _api_version(major: int, minor: int) -> int:
    return (major << 22) | (minor << 12)


def _string(chars: Any) -> str:
    return _vk.ffi.string(chars).decode("utf-8", "replace")


def _enumerate(op: str, fn: Callable[..., int], ctype: str, *args: Any) -> Any:
    """The two-call idiom of vkEnumerate*/vkGet*: count, then fill. Returns the cffi array, which owns the
    memory of its struct elements: keep it alive while using them."""
    ffi = _vk.ffi
    count = ffi.new("uint32_t*")
    result = fn(*args, count, ffi.NULL)
    if result is not None:  # the vkGet* ones return void
        _check(op, result)
    items = ffi.new(f"{ctype}[]", count[0])
    result = fn(*args, count, items)
    if result is not None:
        _check(op, result)
    return items


def _c_strings(names: list[bytes]) -> tuple[list[Any], Any]:
    """C strings and a ``char**`` to them (NULL when empty); keep both alive while the pointer is used."""
    ffi = _vk.ffi
    strings = [ffi.new("char[]", n) for n in names]
    return strings, ffi.new("char*[]", strings) if strings else ffi.NULL


@dataclass(frozen=True)
class KernelInterface:
    """What a SPIR-V entry point expects of a launch, read from the module so a mismatch is an error, not a crash."""

    buffers: int  # storage buffers bound at set 0, bindings 0..buffers-1
    scalar_bytes: int  # size of the push-constant block (0 when it has none)
    fixed_block: Dim3 | None  # the LocalSize when it is not specialization constants 0, 1, 2


def _spirv_words(code: bytes) -> np.ndarray:
    words = np.frombuffer(code, dtype="<u4") if len(code) % 4 == 0 else np.empty(0, "<u4")
    if len(words) >= 5 and words[0] == 0x03022307:
        words = words.byteswap()
    if len(words) < 5 or words[0] != 0x07230203:
        raise CompileError("Device.compile", "spirv", "not a SPIR-V module (bad magic number, or not a whole number of 32-bit words)")
    return words


def spirv_interfaces(code: bytes) -> dict[str, KernelInterface]:
    """The GLCompute entry points of a SPIR-V module, in order, with what each expects of a launch."""
    words = _spirv_words(code)
    per_entry_interface = int(words[1]) >= 0x00010400  # SPIR-V 1.4+ lists every global an entry point uses
    entries: dict[str, tuple[int, list[int]]] = {}
    local_size: dict[int, Dim3] = {}
    decorations: dict[int, dict[int, int]] = {}
    offsets: dict[tuple[int, int], int] = {}
    variables: dict[int, tuple[int, int]] = {}  # id -> (storage class, pointer type)
    pointers: dict[int, int] = {}  # pointer type -> pointee
    structs: dict[int, list[int]] = {}
    sizes: dict[int, int] = {}  # scalar and vector types -> bytes
    spec_ids_of_workgroup: set[int] = set()
    composites: dict[int, list[int]] = {}
    i = 5
    while i < len(words):
        count, opcode = int(words[i]) >> 16, int(words[i]) & 0xFFFF
        if count == 0 or i + count > len(words):
            raise CompileError("Device.compile", "spirv", f"malformed SPIR-V: instruction at word {i} has length {count}")
        op = [int(w) for w in words[i + 1 : i + count]]
        if opcode == 15 and op[0] == 5:  # OpEntryPoint GLCompute %id "name" %interface...
            raw = words[i + 3 : i + count].tobytes()
            name_words = raw.index(0) // 4 + 1
            entries[raw[: raw.index(0)].decode()] = (op[1], op[2 + name_words :])
        elif opcode == 16 and op[1] == 17:  # OpExecutionMode %id LocalSize x y z
            local_size[op[0]] = (op[2], op[3], op[4])
        elif opcode == 71 and len(op) >= 3:  # OpDecorate %id decoration literal
            decorations.setdefault(op[0], {})[op[1]] = op[2]
        elif opcode == 71 and op[1] in (2, 3):  # Block, BufferBlock
            decorations.setdefault(op[0], {})[op[1]] = 1
        elif opcode == 72 and op[2] == 35:  # OpMemberDecorate %struct member Offset n
            offsets[(op[0], op[1])] = op[3]
        elif opcode == 59:  # OpVariable %type %id storage-class
            variables[op[1]] = (op[2], op[0])
        elif opcode == 32:  # OpTypePointer %id storage-class %type
            pointers[op[0]] = op[2]
        elif opcode == 30:  # OpTypeStruct %id members...
            structs[op[0]] = op[1:]
        elif opcode in (21, 22):  # OpTypeInt / OpTypeFloat %id width
            sizes[op[0]] = op[1] // 8
        elif opcode == 23 and op[1] in sizes:  # OpTypeVector %id %component count
            sizes[op[0]] = sizes[op[1]] * op[2]
        elif opcode == 51:  # OpSpecConstantComposite %type %id constituents...
            composites[op[1]] = op[2:]
        i += count
    for target, decoration in decorations.items():
        if decoration.get(11) == 25 and target in composites:  # BuiltIn WorkgroupSize
            spec_ids_of_workgroup = {decorations.get(c, {}).get(1, -1) for c in composites[target]}
    adjustable = spec_ids_of_workgroup == {0, 1, 2}

    def interface(function: int, globals_: list[int]) -> KernelInterface:
        chosen = globals_ if per_entry_interface else list(variables)
        bindings, scalar_bytes = set(), 0
        for var in chosen:
            storage, pointer = variables.get(var, (None, None))
            block = pointers.get(pointer)
            if storage == 12 or (storage == 2 and 3 in decorations.get(block, {})):  # StorageBuffer / BufferBlock
                if decorations.get(var, {}).get(34, 0) == 0:
                    bindings.add(decorations.get(var, {}).get(33, 0))
            elif storage == 9 and block in structs:  # PushConstant
                ends = [offsets.get((block, m), 0) + sizes.get(t, 0) for m, t in enumerate(structs[block])]
                scalar_bytes = max(ends, default=0)
        return KernelInterface(max(bindings, default=-1) + 1, scalar_bytes,
                               None if adjustable else local_size.get(function, (1, 1, 1)))

    return {name: interface(function, globals_) for name, (function, globals_) in entries.items()}


def spirv_entry_points(code: bytes) -> list[str]:
    """Names of the GLCompute entry points of a SPIR-V module, in order; InvalidArgument when it is not one."""
    return list(spirv_interfaces(code))


def _instance_layers() -> set[str]:
    return {_string(p.layerName) for p in _enumerate("vkEnumerateInstanceLayerProperties",
                                                      _vk.lib.vkEnumerateInstanceLayerProperties,
                                                      "VkLayerProperties")}


def _instance_extensions(layer: Any) -> set[str]:
    return {_string(p.extensionName) for p in _enumerate("vkEnumerateInstanceExtensionProperties",
                                                          _vk.lib.vkEnumerateInstanceExtensionProperties,
                                                          "VkExtensionProperties", layer)}


class _Instance:
    """A VkInstance, with the validation layer and a messenger that collects its messages when asked."""

    def __init__(self, validation: bool):
        vk = _load()
        ffi, lib = vk.ffi, vk.lib
        self.messages: list[str] = []
        layers: list[bytes] = []
        extensions: list[bytes] = []
        messenger_info = ffi.NULL
        if validation:
            if VALIDATION_LAYER not in _instance_layers():
                searched = os.environ.get("VK_LAYER_PATH") or "/usr/share/vulkan/explicit_layer.d, /etc/vulkan/explicit_layer.d"
                raise NotAvailable("vulkan", VALIDATION_LAYER,
                                   f"the validation layer is not installed (searched {searched}): "
                                   "apt-get install vulkan-validationlayers, or unset " + VALIDATION_ENV)
            layers.append(VALIDATION_LAYER.encode())
            if "VK_EXT_debug_utils" in _instance_extensions(ffi.NULL) | _instance_extensions(layers[0]):
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
        # cffi does not keep an initializer's pointees alive: every pointed-to object is a local here.
        c_layers, layer_names = _c_strings(layers)
        c_exts, extension_names = _c_strings(extensions)
        c_name = ffi.new("char[]", b"ironaccel")
        app = ffi.new("VkApplicationInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_APPLICATION_INFO, "pApplicationName": c_name, "pEngineName": c_name,
            "apiVersion": _api_version(1, 3),
        })
        info = ffi.new("VkInstanceCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
            "pNext": messenger_info,
            "pApplicationInfo": app,
            "enabledLayerCount": len(layers),
            "ppEnabledLayerNames": layer_names,
            "enabledExtensionCount": len(extensions),
            "ppEnabledExtensionNames": extension_names,
        })
        out = ffi.new("VkInstance*")
        _check("vkCreateInstance", lib.vkCreateInstance(info, ffi.NULL, out))
        self.handle = out[0]
        self._messenger = None
        if messenger_info != ffi.NULL:
            create = ffi.cast("PFN_vkCreateDebugUtilsMessengerEXT",
                              lib.vkGetInstanceProcAddr(self.handle, b"vkCreateDebugUtilsMessengerEXT"))
            messenger = ffi.new("VkDebugUtilsMessengerEXT*")
            _check("vkCreateDebugUtilsMessengerEXT", create(self.handle, messenger_info, ffi.NULL, messenger))
            self._messenger = messenger[0]

    def _on_message(self, severity: int, kind: int, data: Any, user: Any) -> int:
        label = "error" if severity & _vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT else "warning"
        self.messages.append(f"vulkan validation {label}: {_string(data.pMessage)}")
        return 0  # VK_FALSE: never abort the call

    def physical_devices(self) -> list[Any]:
        """Physical devices that speak Vulkan 1.2 or later (timeline semaphores are core there)."""
        ffi, lib = _vk.ffi, _vk.lib
        found = list(_enumerate("vkEnumeratePhysicalDevices", lib.vkEnumeratePhysicalDevices, "VkPhysicalDevice",
                                self.handle))
        usable = []
        for pd in found:
            props = ffi.new("VkPhysicalDeviceProperties*")
            lib.vkGetPhysicalDeviceProperties(pd, props)
            if props.apiVersion >= _api_version(1, 2):
                usable.append(pd)
        return usable

    def destroy(self) -> None:
        ffi, lib = _vk.ffi, _vk.lib
        if self._messenger is not None:
            destroy = ffi.cast("PFN_vkDestroyDebugUtilsMessengerEXT",
                               lib.vkGetInstanceProcAddr(self.handle, b"vkDestroyDebugUtilsMessengerEXT"))
            destroy(self.handle, self._messenger, ffi.NULL)
            self._messenger = None
        lib.vkDestroyInstance(self.handle, ffi.NULL)


def _device_name(physical: Any) -> str:
    props = _vk.ffi.new("VkPhysicalDeviceProperties*")
    _vk.lib.vkGetPhysicalDeviceProperties(physical, props)
    return _string(props.deviceName)


def _validation_requested(validation: bool | None) -> bool:
    return os.environ.get(VALIDATION_ENV, "") not in ("", "0") if validation is None else validation


class VulkanBackend(api.Backend):
    name = "vulkan"

    def probe(self) -> BackendInfo:
        try:
            instance = _Instance(validation=False)
            try:
                names = [_device_name(pd) for pd in instance.physical_devices()]
            finally:
                instance.destroy()
            version = _version(_instance_version())
        except (NotAvailable, DriverError) as exc:
            return BackendInfo(self.name, False, str(exc))
        if not names:
            return BackendInfo(self.name, False, "no Vulkan 1.2 device: install a driver (apt-get install "
                               "mesa-vulkan-drivers for lavapipe) or set VK_DRIVER_FILES to its ICD json", version)
        return BackendInfo(self.name, True, f"{len(names)} device(s): {', '.join(names)}", version)

    def device_count(self) -> int:
        instance = _Instance(validation=False)
        try:
            return len(instance.physical_devices())
        finally:
            instance.destroy()

    def _open_device(self, index: int, *, validation: bool | None = None) -> VulkanDevice:
        """``validation`` defaults to the ``IRONACCEL_VK_VALIDATION`` variable."""
        instance = _Instance(_validation_requested(validation))
        try:
            return VulkanDevice(instance, instance.physical_devices()[index], index)
        except BaseException:
            instance.destroy()
            raise


def _instance_version() -> int:
    out = _vk.ffi.new("uint32_t*")
    _check("vkEnumerateInstanceVersion", _vk.lib.vkEnumerateInstanceVersion(out))
    return out[0]


class _Allocation:
    """A byte range of a block's VkBuffer."""

    __slots__ = ("block", "offset", "size")

    def __init__(self, block: _Block, offset: int, size: int):
        self.block, self.offset, self.size = block, offset, size

    def host(self, start: int, nbytes: int) -> np.ndarray:
        """The mapped bytes [start, start + nbytes) of this range (host-visible blocks only)."""
        base = self.offset + start
        return self.block.host[base : base + nbytes]


class _Block:
    """One VkDeviceMemory bound whole to one VkBuffer, with a first-fit free list over it."""

    def __init__(self, dev: VulkanDevice, type_index: int, size: int, mapped: bool, dedicated: bool):
        vk = _vk
        ffi, lib = vk.ffi, vk.lib
        self.size, self.dedicated = size, dedicated
        self.memory = self.buffer = None
        self.host: np.ndarray | None = None
        info = ffi.new("VkBufferCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, "size": size, "usage": dev._buffer_usage,
            "sharingMode": vk.VK_SHARING_MODE_EXCLUSIVE,
        })
        out = ffi.new("VkBuffer*")
        _check("vkCreateBuffer", lib.vkCreateBuffer(dev._handle, info, ffi.NULL, out))
        self.buffer = out[0]
        try:
            req = ffi.new("VkMemoryRequirements*")
            lib.vkGetBufferMemoryRequirements(dev._handle, self.buffer, req)
            alloc = ffi.new("VkMemoryAllocateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, "allocationSize": req.size,
                "memoryTypeIndex": type_index,
            })
            mem = ffi.new("VkDeviceMemory*")
            _check("vkAllocateMemory", lib.vkAllocateMemory(dev._handle, alloc, ffi.NULL, mem))
            self.memory = mem[0]
            _check("vkBindBufferMemory", lib.vkBindBufferMemory(dev._handle, self.buffer, self.memory, 0))
            if mapped:
                ptr = ffi.new("void**")
                _check("vkMapMemory", lib.vkMapMemory(dev._handle, self.memory, 0, size, 0, ptr))
                self.host = np.frombuffer(ffi.buffer(ptr[0], size), dtype=np.uint8)
        except BaseException:
            self.destroy(dev)
            raise
        self._free_offsets = [0]
        self._free_sizes = {0: size}
        self.used = 0

    def take(self, size: int) -> int | None:
        """First-fit: the offset of ``size`` free bytes, or None."""
        for offset in self._free_offsets:
            have = self._free_sizes[offset]
            if have >= size:
                i = bisect_left(self._free_offsets, offset)
                del self._free_offsets[i], self._free_sizes[offset]
                if have > size:
                    insort(self._free_offsets, offset + size)
                    self._free_sizes[offset + size] = have - size
                self.used += size
                return offset
        return None

    def give_back(self, offset: int, size: int) -> None:
        """Return a range, merging it with free neighbours."""
        self.used -= size
        i = bisect_left(self._free_offsets, offset)
        if i < len(self._free_offsets) and self._free_offsets[i] == offset + size:
            size += self._free_sizes.pop(offset + size)
            del self._free_offsets[i]
        if i > 0:
            prev = self._free_offsets[i - 1]
            if prev + self._free_sizes[prev] == offset:
                self._free_sizes[prev] += size
                return
        self._free_offsets.insert(i, offset)
        self._free_sizes[offset] = size

    def destroy(self, dev: VulkanDevice) -> None:
        ffi, lib = _vk.ffi, _vk.lib
        self.host = None
        if self.buffer is not None:
            lib.vkDestroyBuffer(dev._handle, self.buffer, ffi.NULL)
        if self.memory is not None:
            lib.vkFreeMemory(dev._handle, self.memory, ffi.NULL)  # unmaps too
        self.buffer = self.memory = None


class _MemoryPool:
    """Buffers of one memory type: small ones sub-allocated from shared blocks, large ones dedicated."""

    def __init__(self, dev: VulkanDevice, type_index: int, mapped: bool, block_size: int):
        self._dev, self.type_index, self.mapped, self.block_size = dev, type_index, mapped, block_size
        self._blocks: list[_Block] = []

    def alloc(self, nbytes: int) -> _Allocation:
        size = -(-nbytes // ALIGNMENT) * ALIGNMENT
        if size > self.block_size // 2:
            block = _Block(self._dev, self.type_index, size, self.mapped, dedicated=True)
            block.used = size
            return _Allocation(block, 0, size)
        for block in self._blocks:
            offset = block.take(size)
            if offset is not None:
                return _Allocation(block, offset, size)
        block = _Block(self._dev, self.type_index, self.block_size, self.mapped, dedicated=False)
        self._blocks.append(block)
        return _Allocation(block, block.take(size), size)

    def free(self, a: _Allocation) -> None:
        block = a.block
        if block.dedicated:
            block.destroy(self._dev)
            return
        block.give_back(a.offset, a.size)
        if block.used == 0 and sum(b.used == 0 for b in self._blocks) > 1:
            self._blocks.remove(block)  # keep one empty block for the next allocation, release the rest
            block.destroy(self._dev)

    def release_empty(self) -> None:
        for block in [b for b in self._blocks if b.used == 0]:
            self._blocks.remove(block)
            block.destroy(self._dev)

    def destroy(self) -> None:
        for block in self._blocks:
            block.destroy(self._dev)
        self._blocks.clear()


class VulkanBuffer(api.Buffer):
    """A range of a VkBuffer: ``handle`` is the VkBuffer, ``offset`` where this buffer starts in it."""

    def __init__(self, device: VulkanDevice, nbytes: int, allocation: _Allocation):
        super().__init__(device, nbytes)
        self._allocation = allocation

    @property
    def offset(self) -> int:
        return self._backing("VulkanBuffer.offset")._allocation.offset

    def _native_handle(self) -> Any:
        return self._allocation.block.buffer

    def _release(self) -> None:
        self._device._free_later(self._allocation)


class _Batch:
    """One submission of a stream: its command buffer and what the host owes it once it completes."""

    __slots__ = ("cmd", "commands", "value", "staging", "descriptor_pool", "on_complete")

    def __init__(self, cmd: Any):
        self.cmd = cmd
        self.commands = 0
        self.value = 0
        self.staging: list[_Allocation] = []
        self.descriptor_pool: _DescriptorPool | None = None
        self.on_complete: list[Callable[[], None]] = []


class _DescriptorPool:
    """A VkDescriptorPool for one batch's launches; reset and reused once that batch completes."""

    SETS = 256
    DESCRIPTORS = 1024

    def __init__(self, dev: VulkanDevice):
        vk = _vk
        ffi = vk.ffi
        size = ffi.new("VkDescriptorPoolSize*", {"type": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                 "descriptorCount": self.DESCRIPTORS})
        info = ffi.new("VkDescriptorPoolCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, "maxSets": self.SETS,
            "poolSizeCount": 1, "pPoolSizes": size,
        })
        out = ffi.new("VkDescriptorPool*")
        _check("vkCreateDescriptorPool", vk.lib.vkCreateDescriptorPool(dev._handle, info, ffi.NULL, out))
        self.handle = out[0]
        self.sets_left, self.descriptors_left = self.SETS, self.DESCRIPTORS

    def fits(self, descriptors: int) -> bool:
        return self.sets_left >= 1 and self.descriptors_left >= descriptors

    def reset(self, dev: VulkanDevice) -> None:
        _check("vkResetDescriptorPool", _vk.lib.vkResetDescriptorPool(dev._handle, self.handle, 0))
        self.sets_left, self.descriptors_left = self.SETS, self.DESCRIPTORS


class VulkanEvent(api.Event):
    """A value of its stream's timeline semaphore, plus a timestamp query slot when timed."""

    def __init__(self, stream: VulkanStream, timing: bool, value: int, timestamp: tuple[Any, int] | None):
        super().__init__(stream, timing)
        self._value = value
        self._timestamp = timestamp
        if timestamp is not None:
            weakref.finalize(self, stream._device._timestamps.release, timestamp)

    def _query(self) -> bool:
        self._stream._device._check_open("Event.query")  # the semaphore died with the device
        return self._stream._device._reached(self._stream, self._value)

    def _synchronize(self, timeout: float | None = None) -> None:
        self._stream._device._check_open("Event.synchronize")
        self._stream._device._wait([(self._stream, self._value)])

    def _elapsed_ms(self, end: api.Event) -> float:
        assert isinstance(end, VulkanEvent)
        dev = self._stream._device
        dev._check_open("Event.elapsed_ms")
        dev._wait([(self._stream, self._value), (end._stream, end._value)])
        return dev._timestamps.elapsed_ms(self._timestamp, end._timestamp)


class _Timestamps:
    """Timestamp query slots, handed out to timed events and returned when the event is collected."""

    def __init__(self, dev: VulkanDevice, valid_bits: int, period_ns: float):
        self._dev, self._valid_bits, self._period_ns = dev, valid_bits, period_ns
        self._pools: list[Any] = []
        self._free: list[tuple[Any, int]] = []

    def take(self) -> tuple[Any, int]:
        if not self._free:
            vk = _vk
            info = vk.ffi.new("VkQueryPoolCreateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, "queryType": vk.VK_QUERY_TYPE_TIMESTAMP,
                "queryCount": TIMESTAMP_SLOTS,
            })
            out = vk.ffi.new("VkQueryPool*")
            _check("vkCreateQueryPool", vk.lib.vkCreateQueryPool(self._dev._handle, info, vk.ffi.NULL, out))
            self._pools.append(out[0])
            self._free = [(out[0], i) for i in reversed(range(TIMESTAMP_SLOTS))]
        return self._free.pop()

    def release(self, slot: tuple[Any, int]) -> None:
        self._free.append(slot)

    def _read(self, slot: tuple[Any, int]) -> int:
        vk = _vk
        out = vk.ffi.new("uint64_t*")
        _check("vkGetQueryPoolResults", vk.lib.vkGetQueryPoolResults(
            self._dev._handle, slot[0], slot[1], 1, 8, out, 8, vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT))
        return out[0]

    def elapsed_ms(self, start: tuple[Any, int], end: tuple[Any, int]) -> float:
        bits = self._valid_bits
        ticks = (self._read(end) - self._read(start)) & ((1 << bits) - 1)
        if ticks >= 1 << (bits - 1):  # end before start: a negative interval
            ticks -= 1 << bits
        return ticks * self._period_ns / 1e6

    def destroy(self) -> None:
        for pool in self._pools:
            _vk.lib.vkDestroyQueryPool(self._dev._handle, pool, _vk.ffi.NULL)
        self._pools.clear()


class _Queue:
    def __init__(self, handle: Any):
        self.handle = handle
        self.lock = threading.Lock()


class VulkanStream(api.Stream):
    """An in-order queue of work on a timeline semaphore; see the module docstring."""

    def __init__(self, device: VulkanDevice, queue: _Queue):
        super().__init__(device)
        vk = _vk
        ffi, lib = vk.ffi, vk.lib
        self._queue = queue
        self._submitted = 0  # the timeline value of the last submission
        self._completed = 0  # the highest value known to have completed
        self._batch: _Batch | None = None  # recording, not yet submitted
        self._waits: list[tuple[VulkanStream, int]] = []  # event waits for the next submission
        self._in_flight: deque[_Batch] = deque()
        self._free_cmds: list[Any] = []
        self._free_descriptor_pools: list[_DescriptorPool] = []
        type_info = ffi.new("VkSemaphoreTypeCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO, "semaphoreType": vk.VK_SEMAPHORE_TYPE_TIMELINE,
        })
        info = ffi.new("VkSemaphoreCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, "pNext": type_info})
        out = ffi.new("VkSemaphore*")
        _check("vkCreateSemaphore", lib.vkCreateSemaphore(device._handle, info, ffi.NULL, out))
        self._semaphore = out[0]
        pool_info = ffi.new("VkCommandPoolCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
            "flags": vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT | vk.VK_COMMAND_POOL_CREATE_TRANSIENT_BIT,
            "queueFamilyIndex": device._family,
        })
        pool = ffi.new("VkCommandPool*")
        result = lib.vkCreateCommandPool(device._handle, pool_info, ffi.NULL, pool)
        if result < 0:
            lib.vkDestroySemaphore(device._handle, self._semaphore, ffi.NULL)
            raise _error("vkCreateCommandPool", result)
        self._command_pool = pool[0]
        # Handles go when the stream is collected (the device holds busy streams) or the device closes.
        self._destroy = weakref.finalize(self, _destroy_stream_handles, device._handle, self._semaphore,
                                         self._command_pool, self._free_descriptor_pools)

    # -- recording ----------------------------------------------------------------------------------

    def _recording(self) -> _Batch:
        """The open batch, with a barrier that orders the next command after the ones before it."""
        vk = _vk
        lib = vk.lib
        batch = self._batch
        if batch is None:
            if self._free_cmds:
                cmd = self._free_cmds.pop()
            else:
                info = vk.ffi.new("VkCommandBufferAllocateInfo*", {
                    "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": self._command_pool,
                    "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, "commandBufferCount": 1,
                })
                out = vk.ffi.new("VkCommandBuffer*")
                _check("vkAllocateCommandBuffers", lib.vkAllocateCommandBuffers(self._device._handle, info, out))
                cmd = out[0]
            _check("vkBeginCommandBuffer", lib.vkBeginCommandBuffer(cmd, self._device._begin_info))
            batch = self._batch = _Batch(cmd)
            self._device._busy.add(self)
        elif batch.commands:
            self._device._barrier(batch.cmd, self._device._between_commands)
        batch.commands += 1
        return batch

    def _recorded(self) -> None:
        """Submit now when the device has caught up with this stream (so work starts at once), else keep
        batching while earlier work runs, up to BATCH_COMMANDS commands."""
        batch = self._batch
        if batch is not None and (batch.commands >= BATCH_COMMANDS or self._device._counter(self) >= self._submitted):
            self._submit()

    def _submit(self) -> None:
        """Submit the open batch and pending waits, signalling the next timeline value. The host waits only
        when the stream already has MAX_IN_FLIGHT submissions outstanding (back-pressure)."""
        batch = self._batch
        if batch is None and not self._waits:
            return
        vk = _vk
        ffi, lib = vk.ffi, vk.lib
        dev = self._device
        if len(self._in_flight) >= MAX_IN_FLIGHT:
            dev._wait([(self, self._in_flight[0].value)])
        waits = [(s._semaphore, v) for s, v in self._waits]
        if self._submitted > self._completed:
            waits.append((self._semaphore, self._submitted))
        value = self._submitted + 1
        cmds = ffi.NULL
        if batch is not None:
            dev._barrier(batch.cmd, dev._to_host)
            _check("vkEndCommandBuffer", lib.vkEndCommandBuffer(batch.cmd))
            cmds = ffi.new("VkCommandBuffer[1]", [batch.cmd])
        wait_values = ffi.new("uint64_t[]", [v for _, v in waits] or 1)
        signal_value = ffi.new("uint64_t[1]", [value])
        timeline = ffi.new("VkTimelineSemaphoreSubmitInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
            "waitSemaphoreValueCount": len(waits), "pWaitSemaphoreValues": wait_values,
            "signalSemaphoreValueCount": 1, "pSignalSemaphoreValues": signal_value,
        })
        wait_semaphores = ffi.new("VkSemaphore[]", [s for s, _ in waits] or 1)
        stages = ffi.new("VkPipelineStageFlags[]", [vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT] * max(len(waits), 1))
        signal = ffi.new("VkSemaphore[1]", [self._semaphore])
        submit = ffi.new("VkSubmitInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, "pNext": timeline,
            "waitSemaphoreCount": len(waits), "pWaitSemaphores": wait_semaphores, "pWaitDstStageMask": stages,
            "commandBufferCount": 0 if batch is None else 1, "pCommandBuffers": cmds,
            "signalSemaphoreCount": 1, "pSignalSemaphores": signal,
        })
        with self._queue.lock:
            result = lib.vkQueueSubmit(self._queue.handle, 1, submit, ffi.NULL)
        _check("vkQueueSubmit", result)
        self._submitted = value
        self._waits = []
        self._batch = None
        batch = batch or _Batch(None)  # a submission of waits only: tracked so the stream stays alive for it
        batch.value = value
        self._in_flight.append(batch)

    def _pending_value(self) -> int:
        """The timeline value that will mark everything enqueued so far."""
        return self._submitted + (1 if self._batch is not None or self._waits else 0)

    def _retire(self) -> None:
        """Do the host's share of every completed submission and recycle its resources."""
        if not self._in_flight:
            return
        value = self._device._counter(self)
        while self._in_flight and self._in_flight[0].value <= value:
            batch = self._in_flight.popleft()
            for finish in batch.on_complete:
                finish()
            for allocation in batch.staging:
                self._device._staging.free(allocation)
            if batch.descriptor_pool is not None:
                batch.descriptor_pool.reset(self._device)
                self._free_descriptor_pools.append(batch.descriptor_pool)
            if batch.cmd is not None:
                _check("vkResetCommandBuffer", _vk.lib.vkResetCommandBuffer(batch.cmd, 0))
                self._free_cmds.append(batch.cmd)
        if not self._in_flight and self._batch is None and not self._waits:
            self._device._busy.discard(self)

    def _idle(self) -> bool:
        """Nothing enqueued on this stream is outstanding: the host may touch its buffers directly."""
        if self._batch is not None or self._waits:
            return False
        self._retire()  # first, so a staged copy_dtoh still owed lands before a direct copy that follows it
        return not self._in_flight

    def _direct(self) -> bool:
        """Copy through mapped device memory on the host: it is mapped and this stream has nothing outstanding."""
        return self._device._direct_mapping and self._idle()

    def _copy_region(self, cmd: Any, src: Any, src_offset: int, dst: Any, dst_offset: int, nbytes: int) -> None:
        region = _vk.ffi.new("VkBufferCopy*", {"srcOffset": src_offset, "dstOffset": dst_offset, "size": nbytes})
        _vk.lib.vkCmdCopyBuffer(cmd, src, dst, 1, region)

    # -- the private API --------------------------------------------------------------------------------

    def _native(self) -> Any:
        """The VkQueue this stream submits to."""
        return self._queue.handle

    def _copy_htod(self, dst: api.Buffer, dst_offset: int, src: np.ndarray) -> None:
        assert isinstance(dst, VulkanBuffer)
        with self._device._lock:
            if self._direct():
                dst._allocation.host(dst_offset, src.nbytes)[:] = src
                return
            staging = self._device._staging.alloc(src.nbytes)
            staging.host(0, src.nbytes)[:] = src
            batch = self._recording()
            batch.staging.append(staging)
            self._copy_region(batch.cmd, staging.block.buffer, staging.offset,
                              dst._allocation.block.buffer, dst._allocation.offset + dst_offset, src.nbytes)
            self._recorded()

    def _copy_dtoh(self, dst: np.ndarray, src: api.Buffer, src_offset: int) -> None:
        assert isinstance(src, VulkanBuffer)
        with self._device._lock:
            if self._direct():
                dst[:] = src._allocation.host(src_offset, dst.nbytes)
                return
            staging = self._device._staging.alloc(dst.nbytes)
            batch = self._recording()
            batch.staging.append(staging)
            self._copy_region(batch.cmd, src._allocation.block.buffer, src._allocation.offset + src_offset,
                              staging.block.buffer, staging.offset, dst.nbytes)

            def finish(dst: np.ndarray = dst, staging: _Allocation = staging) -> None:
                dst[:] = staging.host(0, dst.nbytes)

            batch.on_complete.append(finish)
            self._recorded()

    def _copy_dtod(self, dst: api.Buffer, dst_offset: int, src: api.Buffer, src_offset: int, nbytes: int) -> None:
        assert isinstance(dst, VulkanBuffer) and isinstance(src, VulkanBuffer)
        with self._device._lock:
            if self._direct():
                dst._allocation.host(dst_offset, nbytes)[:] = src._allocation.host(src_offset, nbytes)
                return
            batch = self._recording()
            self._copy_region(batch.cmd, src._allocation.block.buffer, src._allocation.offset + src_offset,
                              dst._allocation.block.buffer, dst._allocation.offset + dst_offset, nbytes)
            self._recorded()

    def _fill(self, buf: api.Buffer, offset: int, nbytes: int, value: int) -> None:
        """vkCmdFillBuffer for the 4-byte-aligned middle; the unaligned edges (<= 3 bytes each) are staged."""
        assert isinstance(buf, VulkanBuffer)
        with self._device._lock:
            if self._direct():
                buf._allocation.host(offset, nbytes)[:] = value
                return
            start = buf._allocation.offset + offset  # blocks place buffers 256-byte aligned
            head = min(-start % 4, nbytes)
            middle = (nbytes - head) // 4 * 4
            tail = nbytes - head - middle
            edge = np.full(3, value, dtype=np.uint8)
            if head:
                self._copy_htod(buf, offset, edge[:head])
            if middle:
                batch = self._recording()
                _vk.lib.vkCmdFillBuffer(batch.cmd, buf._allocation.block.buffer, start + head, middle, value * 0x01010101)
                self._recorded()
            if tail:
                self._copy_htod(buf, offset + head + middle, edge[:tail])

    def _record(self, timing: bool) -> api.Event:
        dev = self._device
        with dev._lock:
            timestamp = None
            if timing:
                timestamp = dev._timestamps.take()
                batch = self._recording()
                lib = _vk.lib
                lib.vkCmdResetQueryPool(batch.cmd, timestamp[0], timestamp[1], 1)
                lib.vkCmdWriteTimestamp(batch.cmd, _vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timestamp[0], timestamp[1])
            self._submit()
            return VulkanEvent(self, timing, self._submitted, timestamp)

    def _wait(self, event: api.Event) -> None:
        assert isinstance(event, VulkanEvent)
        source = event._stream
        with self._device._lock:
            if source is self or source._completed >= event._value:
                return
            self._waits.append((source, event._value))
            self._device._busy.add(self)

    def _synchronize(self, timeout: float | None = None) -> None:
        with self._device._lock:
            self._submit()
            value = self._submitted
        self._device._wait([(self, value)])

    def _launch(self, kernel: api.Kernel, grid: Dim3, block: Dim3, args: list[api.Buffer | np.generic]) -> None:
        dev = self._device
        vk = _vk
        ffi, lib = vk.ffi, vk.lib
        buffers = [a for a in args if isinstance(a, VulkanBuffer)]
        scalars = pack_scalars_for(args)
        module = kernel.module
        assert isinstance(module, VulkanModule)
        module._check_launch(kernel.name, block, len(buffers), len(scalars))
        with dev._lock:
            layout, set_layout = dev._pipeline_layout(len(buffers), len(scalars))
            pipeline = module._pipeline(kernel.name, block, len(buffers), len(scalars), layout)
            if buffers and self._batch is not None:
                pool = self._batch.descriptor_pool
                if pool is not None and not pool.fits(len(buffers)):
                    self._submit()  # the batch's descriptor pool is full: the next batch gets another
            batch = self._recording()
            cmd = batch.cmd
            lib.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline)
            if buffers:
                if batch.descriptor_pool is None:
                    batch.descriptor_pool = (self._free_descriptor_pools.pop() if self._free_descriptor_pools
                                             else _DescriptorPool(dev))
                descriptor_set = dev._descriptor_set(batch.descriptor_pool, set_layout, buffers)
                lib.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, descriptor_set, 0, ffi.NULL)
            if scalars:
                lib.vkCmdPushConstants(cmd, layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, len(scalars), ffi.from_buffer(scalars))
            lib.vkCmdDispatch(cmd, *grid)
            self._recorded()



def _destroy_stream_handles(device: Any, semaphore: Any, command_pool: Any, descriptor_pools: list[_DescriptorPool]) -> None:
    ffi, lib = _vk.ffi, _vk.lib
    for pool in descriptor_pools:
        lib.vkDestroyDescriptorPool(device, pool.handle, ffi.NULL)
    lib.vkDestroyCommandPool(device, command_pool, ffi.NULL)  # frees its command buffers
    lib.vkDestroySemaphore(device, semaphore, ffi.NULL)


def pack_scalars_for(args: Sequence[object]) -> bytes:
    """The push-constant bytes of a launch: ``api.pack_scalars`` of the scalar arguments, in order."""
    return api.pack_scalars([a for a in args if isinstance(a, np.generic)])


class VulkanModule(api.Module):
    """A VkShaderModule and its compute pipelines, one per (entry point, block, argument layout)."""

    def __init__(self, device: VulkanDevice, lang: str, code: bytes):
        super().__init__(device, lang)
        self._interfaces = spirv_interfaces(code)
        if not self._interfaces:
            raise CompileError("Device.compile", lang, "the SPIR-V module has no GLCompute OpEntryPoint")
        vk = _vk
        ffi = vk.ffi
        words = ffi.new("char[]", code)
        info = ffi.new("VkShaderModuleCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, "codeSize": len(code),
            "pCode": ffi.cast("uint32_t*", words),
        })
        out = ffi.new("VkShaderModule*")
        _check("vkCreateShaderModule", vk.lib.vkCreateShaderModule(device._handle, info, ffi.NULL, out))
        self._handle = out[0]
        self._pipelines: dict[tuple[str, Dim3, int, int], Any] = {}
        device._modules.append(self)

    def _kernel_names(self) -> Sequence[str]:
        return list(self._interfaces)

    def _check_launch(self, name: str, block: Dim3, n_buffers: int, scalar_bytes: int) -> None:
        """Reject a launch the kernel was not written for (the driver would read unbound memory)."""
        expects = self._interfaces[name]
        if (n_buffers, scalar_bytes) != (expects.buffers, expects.scalar_bytes):
            raise InvalidArgument(
                "Stream.launch",
                f"kernel {name!r} takes {expects.buffers} buffer(s) (set 0, bindings 0..) and {expects.scalar_bytes} "
                f"bytes of scalars (push constants); got {n_buffers} buffer(s) and {scalar_bytes} bytes of scalars",
            )
        if expects.fixed_block is not None and block != expects.fixed_block:
            raise InvalidArgument(
                "Stream.launch",
                f"kernel {name!r} has a fixed block {expects.fixed_block}, got {block}: declare "
                "layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in; to choose it at launch",
            )

    def _pipeline(self, name: str, block: Dim3, n_buffers: int, scalar_bytes: int, layout: Any) -> Any:
        key = (name, block, n_buffers, scalar_bytes)
        pipeline = self._pipelines.get(key)
        if pipeline is None:
            pipeline = self._pipelines[key] = self._create_pipeline(name, block, layout)
        return pipeline

    def _create_pipeline(self, name: str, block: Dim3, layout: Any) -> Any:
        vk = _vk
        ffi = vk.ffi
        entries = ffi.new("VkSpecializationMapEntry[3]", [
            {"constantID": i, "offset": 4 * i, "size": 4} for i in range(3)])
        data = ffi.new("uint32_t[3]", list(block))
        spec = ffi.new("VkSpecializationInfo*", {"mapEntryCount": 3, "pMapEntries": entries, "dataSize": 12, "pData": data})
        c_name = ffi.new("char[]", name.encode())
        info = ffi.new("VkComputePipelineCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            "stage": {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      "stage": vk.VK_SHADER_STAGE_COMPUTE_BIT, "module": self._handle, "pName": c_name,
                      "pSpecializationInfo": spec},
            "layout": layout,
        })
        out = ffi.new("VkPipeline*")
        dev = self.device
        assert isinstance(dev, VulkanDevice)
        _check("vkCreateComputePipelines",
               vk.lib.vkCreateComputePipelines(dev._handle, dev._pipeline_cache, 1, info, ffi.NULL, out))
        return out[0]

    def _destroy(self, device_handle: Any) -> None:
        ffi, lib = _vk.ffi, _vk.lib
        for pipeline in self._pipelines.values():
            lib.vkDestroyPipeline(device_handle, pipeline, ffi.NULL)
        lib.vkDestroyShaderModule(device_handle, self._handle, ffi.NULL)


def _compile_glsl(source: str, options: tuple[str, ...]) -> bytes:
    """GLSL -> SPIR-V with glslangValidator; ``-e NAME`` renames ``main`` to NAME."""
    tool = shutil.which(GLSLANG)
    if tool is None:
        raise NotAvailable("vulkan", GLSLANG, "not found on PATH: apt-get install glslang-tools")
    extra = list(options)
    if "-e" in extra and "--source-entrypoint" not in extra:
        extra += ["--source-entrypoint", "main"]
    with tempfile.TemporaryDirectory(prefix="ironaccel-glsl-") as tmp:
        src, out = Path(tmp) / "kernel.comp", Path(tmp) / "kernel.spv"
        src.write_text(source)
        proc = subprocess.run([tool, "-V", "--target-env", "vulkan1.2", *extra, "-o", str(out), str(src)],
                              capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            raise CompileError("Device.compile", "glsl", (proc.stdout + proc.stderr).strip())
        return out.read_bytes()


@dataclass(frozen=True)
class VulkanHandles:
    """``VulkanDevice.native``: what a raw ``vulkan`` program needs to work beside ironaccel on one VkDevice."""

    instance: Any
    physical_device: Any
    device: Any
    queue_family: int
    buffer_usage: int  #: the usage flags of ironaccel's storage buffers
    device_memory_type: int  #: the memory type index of device buffers
    staging_memory_type: int  #: the memory type index of host-visible staging


class VulkanDevice(api.Device):
    """One logical VkDevice over one physical device; see the module docstring."""

    def __init__(self, instance: _Instance, physical: Any, index: int):
        vk = _vk
        ffi, lib = vk.ffi, vk.lib
        self._instance = instance
        self._physical = physical
        self._handle = None
        self._lock = threading.RLock()
        self._busy: set[VulkanStream] = set()  # streams with work recorded, waiting or in flight
        self._stream_handles: list[weakref.finalize] = []
        self._modules: list[VulkanModule] = []
        self._layouts: dict[tuple[int, int], tuple[Any, Any]] = {}
        self._deferred: list[tuple[_Allocation, list[tuple[VulkanStream, int]]]] = []
        self._counter_value = ffi.new("uint64_t*")

        extensions = {_string(e.extensionName) for e in _enumerate(
            "vkEnumerateDeviceExtensionProperties", lib.vkEnumerateDeviceExtensionProperties,
            "VkExtensionProperties", physical, ffi.NULL)}
        props, features, families = self._query(physical, extensions)
        self._family, family = next(((i, f) for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT),
                                    (None, None))
        if family is None:
            raise NotAvailable("vulkan", "compute queue", f"device {index} has no compute-capable queue family")
        limits = props["core"].properties.limits

        memory = ffi.new("VkPhysicalDeviceMemoryProperties*")
        lib.vkGetPhysicalDeviceMemoryProperties(physical, memory)
        device_local = [memory.memoryHeaps[i].size for i in range(memory.memoryHeapCount)
                        if memory.memoryHeaps[i].flags & vk.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT]
        largest_heap = max(device_local, default=0)

        # -- capabilities and the logical device
        caps = {"lang.spirv", "kernel.shared_memory", "kernel.atomics.int32"}
        if shutil.which(GLSLANG):
            caps.add("lang.glsl")
        core = features["core"].features
        if core.shaderFloat64:
            caps.add("kernel.float64")
        if core.shaderInt64:
            caps.add("kernel.int64")
        enable_exts = []
        atomic_float = features.get("atomic_float")
        if atomic_float is not None and atomic_float.shaderBufferFloat32AtomicAdd:
            caps.add("kernel.atomics.float32")
            enable_exts.append(b"VK_EXT_shader_atomic_float")
        if "VK_KHR_portability_subset" in extensions:
            enable_exts.append(b"VK_KHR_portability_subset")
        period = limits.timestampPeriod
        if family.timestampValidBits > 0 and period > 0:
            caps.add("events.timing")
        self._caps = frozenset(caps)

        queue_count = min(family.queueCount, MAX_QUEUES)
        priorities = ffi.new("float[]", [1.0] * queue_count)
        queue_info = ffi.new("VkDeviceQueueCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, "queueFamilyIndex": self._family,
            "queueCount": queue_count, "pQueuePriorities": priorities,
        })
        want12 = ffi.new("VkPhysicalDeviceVulkan12Features*", {
            "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, "timelineSemaphore": 1,
        })
        chain = want12
        if "kernel.atomics.float32" in caps:
            chain = ffi.new("VkPhysicalDeviceShaderAtomicFloatFeaturesEXT*", {
                "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT, "pNext": want12,
                "shaderBufferFloat32AtomicAdd": 1,
            })
        want = ffi.new("VkPhysicalDeviceFeatures2*", {
            "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, "pNext": chain,
            "features": {"shaderFloat64": core.shaderFloat64, "shaderInt64": core.shaderInt64},
        })
        c_exts, extension_names = _c_strings(enable_exts)
        info = ffi.new("VkDeviceCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, "pNext": want,
            "queueCreateInfoCount": 1, "pQueueCreateInfos": queue_info,
            "enabledExtensionCount": len(enable_exts), "ppEnabledExtensionNames": extension_names,
        })
        out = ffi.new("VkDevice*")
        _check("vkCreateDevice", lib.vkCreateDevice(physical, info, ffi.NULL, out))
        self._handle = out[0]
        try:
            self._queues = []
            for i in range(queue_count):
                q = ffi.new("VkQueue*")
                lib.vkGetDeviceQueue(self._handle, self._family, i, q)
                self._queues.append(_Queue(q[0]))

            # -- memory: a pool for buffers, one for staging
            self._buffer_usage = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
                                  | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT)
            type_bits = self._buffer_type_bits()
            flags = [memory.memoryTypes[i].propertyFlags if type_bits >> i & 1 else None for i in range(memory.memoryTypeCount)]
            heap_of = [memory.memoryTypes[i].heapIndex for i in range(memory.memoryTypeCount)]
            local, visible = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
            coherent, cached = vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT

            def first(required: int, *, heap_at_least: int = 0) -> int | None:
                return next((i for i, f in enumerate(flags) if f is not None and f & required == required
                             and memory.memoryHeaps[heap_of[i]].size >= heap_at_least), None)

            mappable = first(local | visible | coherent | cached, heap_at_least=largest_heap)
            device_type = mappable if mappable is not None else first(local)
            if device_type is None:
                device_type = first(0)
            staging_type = first(visible | coherent | cached)
            if staging_type is None:
                staging_type = first(visible | coherent)
            if device_type is None or staging_type is None:
                raise NotAvailable("vulkan", "memory type", f"device {index} has no memory type for storage buffers and staging")
            self._direct_mapping = mappable is not None and os.environ.get(DIRECT_MAPPING_ENV, "1") != "0"
            heap = memory.memoryHeaps[heap_of[device_type]].size
            max_allocation = props["maintenance3"].maxMemoryAllocationSize
            block = max(1 << 20, min(BLOCK_SIZE, heap // 16, max_allocation))
            self._memory = _MemoryPool(self, device_type, self._direct_mapping, block)
            self._staging = _MemoryPool(self, staging_type, True, block)

            # One granule under maxMemoryAllocationSize: SwiftShader 5.0 reports 1 GiB there but fails to allocate
            # exactly 1 GiB (VK_ERROR_OUT_OF_DEVICE_MEMORY), and max_alloc promises an allocation that works.
            max_alloc = min(max_allocation - ALIGNMENT, limits.maxStorageBufferRange, heap) // ALIGNMENT * ALIGNMENT
            driver = props["driver"]
            driver_name = _string(driver.driverName).removesuffix(" driver") or "unknown"
            core_props = props["core"].properties
            info_ = DeviceInfo(
                backend="vulkan",
                index=index,
                name=_string(core_props.deviceName),
                vendor=_VENDORS.get(core_props.vendorID, f"0x{core_props.vendorID:04x}"),
                driver=driver_name,
                driver_version=_string(driver.driverInfo) or _version(core_props.driverVersion),
                simulated=core_props.deviceType == vk.VK_PHYSICAL_DEVICE_TYPE_CPU,
                memory=largest_heap,  # not the sum: a BAR heap is a window onto the same memory
                limits=Limits(
                    max_alloc=max_alloc,
                    max_threads_per_block=limits.maxComputeWorkGroupInvocations,
                    max_block=tuple(limits.maxComputeWorkGroupSize),
                    max_grid=tuple(limits.maxComputeWorkGroupCount),
                    max_shared_memory=limits.maxComputeSharedMemorySize,
                    warp_size=props["subgroup"].subgroupSize,
                ),
                extra={
                    "api_version": _version(core_props.apiVersion),
                    "vendor_id": core_props.vendorID,
                    "device_id": core_props.deviceID,
                    "driver_id": driver.driverID,
                    "device_type": vk.ffi.typeof("VkPhysicalDeviceType").elements.get(core_props.deviceType, ""),
                    "queue_family": self._family,
                    "queues": queue_count,
                    "validation": instance._messenger is not None,
                    "direct_mapping": self._direct_mapping,
                    "max_push_constants": limits.maxPushConstantsSize,
                    "max_storage_buffers": limits.maxPerStageDescriptorStorageBuffers,
                },
            )
            super().__init__(info_)

            # -- reusable structures of the hot path
            self._begin_info = ffi.new("VkCommandBufferBeginInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                "flags": vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
            })
            memory_access = vk.VK_ACCESS_MEMORY_READ_BIT | vk.VK_ACCESS_MEMORY_WRITE_BIT
            all_commands = vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT
            self._between_commands = (all_commands, all_commands, ffi.new("VkMemoryBarrier*", {
                "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER, "srcAccessMask": memory_access, "dstAccessMask": memory_access}))
            self._to_host = (all_commands, vk.VK_PIPELINE_STAGE_HOST_BIT, ffi.new("VkMemoryBarrier*", {
                "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER, "srcAccessMask": vk.VK_ACCESS_MEMORY_WRITE_BIT,
                "dstAccessMask": vk.VK_ACCESS_HOST_READ_BIT | vk.VK_ACCESS_HOST_WRITE_BIT}))
            cache_info = ffi.new("VkPipelineCacheCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO})
            cache = ffi.new("VkPipelineCache*")
            _check("vkCreatePipelineCache", lib.vkCreatePipelineCache(self._handle, cache_info, ffi.NULL, cache))
            self._pipeline_cache = cache[0]
            self._timestamps = _Timestamps(self, family.timestampValidBits, period)
            self._next_queue = 0
            self._default = self._create_stream()
        except BaseException:
            lib.vkDeviceWaitIdle(self._handle)
            lib.vkDestroyDevice(self._handle, ffi.NULL)  # children die with it; only an error path gets here
            raise

    def _query(self, physical: Any, extensions: set[str]) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
        """Properties (core, driver, subgroup, maintenance3), features and queue families of a device."""
        vk = _vk
        ffi, lib = vk.ffi, vk.lib
        driver = ffi.new("VkPhysicalDeviceDriverProperties*", {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES})
        subgroup = ffi.new("VkPhysicalDeviceSubgroupProperties*", {
            "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, "pNext": driver})
        maintenance3 = ffi.new("VkPhysicalDeviceMaintenance3Properties*", {
            "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, "pNext": subgroup})
        core = ffi.new("VkPhysicalDeviceProperties2*", {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                                         "pNext": maintenance3})
        lib.vkGetPhysicalDeviceProperties2(physical, core)
        props = {"core": core, "driver": driver, "subgroup": subgroup, "maintenance3": maintenance3}

        features: dict[str, Any] = {}
        chain = ffi.NULL
        if "VK_EXT_shader_atomic_float" in extensions:
            chain = features["atomic_float"] = ffi.new("VkPhysicalDeviceShaderAtomicFloatFeaturesEXT*", {
                "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT})
        features["core"] = ffi.new("VkPhysicalDeviceFeatures2*", {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                                                  "pNext": chain})
        lib.vkGetPhysicalDeviceFeatures2(physical, features["core"])
        families = _enumerate("vkGetPhysicalDeviceQueueFamilyProperties", lib.vkGetPhysicalDeviceQueueFamilyProperties,
                              "VkQueueFamilyProperties", physical)
        return props, features, families

    def _buffer_type_bits(self) -> int:
        """The memory types our buffers may live in (asked of a throwaway buffer)."""
        vk = _vk
        ffi, lib = vk.ffi, vk.lib
        info = ffi.new("VkBufferCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, "size": ALIGNMENT,
                                               "usage": self._buffer_usage, "sharingMode": vk.VK_SHARING_MODE_EXCLUSIVE})
        out = ffi.new("VkBuffer*")
        _check("vkCreateBuffer", lib.vkCreateBuffer(self._handle, info, ffi.NULL, out))
        req = ffi.new("VkMemoryRequirements*")
        lib.vkGetBufferMemoryRequirements(self._handle, out[0], req)
        lib.vkDestroyBuffer(self._handle, out[0], ffi.NULL)
        if req.alignment > ALIGNMENT:
            raise NotAvailable("vulkan", "buffer alignment", f"the device wants {req.alignment}-byte aligned buffers")
        return req.memoryTypeBits

    # -- synchronisation helpers shared by streams and events ---------------------------------------------

    def _barrier(self, cmd: Any, barrier: tuple[int, int, Any]) -> None:
        src, dst, memory = barrier
        _vk.lib.vkCmdPipelineBarrier(cmd, src, dst, 0, 1, memory, 0, _vk.ffi.NULL, 0, _vk.ffi.NULL)

    def _counter(self, stream: VulkanStream) -> int:
        """Read a stream's timeline value (and remember it)."""
        _check("vkGetSemaphoreCounterValue",
               _vk.lib.vkGetSemaphoreCounterValue(self._handle, stream._semaphore, self._counter_value))
        stream._completed = max(stream._completed, self._counter_value[0])
        return stream._completed

    def _reached(self, stream: VulkanStream, value: int) -> bool:
        with self._lock:
            if stream._completed < value and self._counter(stream) < value:
                return False
            self._retire()
            return True

    def _wait(self, points: list[tuple[VulkanStream, int]]) -> None:
        """Block until every (stream, value) is reached, then do the host's share of completed work."""
        vk = _vk
        ffi = vk.ffi
        with self._lock:
            points = [(s, v) for s, v in points if s._completed < v]
        if points:
            semaphores = ffi.new("VkSemaphore[]", [s._semaphore for s, _ in points])
            values = ffi.new("uint64_t[]", [v for _, v in points])
            info = ffi.new("VkSemaphoreWaitInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, "semaphoreCount": len(points),
                "pSemaphores": semaphores, "pValues": values,
            })
            _check("vkWaitSemaphores", vk.lib.vkWaitSemaphores(self._handle, info, _U64_MAX))
        with self._lock:
            for s, v in points:
                s._completed = max(s._completed, v)
            self._retire()

    def _retire(self) -> None:
        for stream in list(self._busy):
            stream._retire()
        if self._deferred:
            still = []
            for allocation, points in self._deferred:
                if all(s._completed >= v for s, v in points):
                    self._memory.free(allocation)
                else:
                    still.append((allocation, points))
            self._deferred = still

    def _free_later(self, allocation: _Allocation) -> None:
        """Release a buffer's range once the work enqueued before now, on every stream, has completed."""
        if self._closed:
            return
        with self._lock:
            points = [(s, s._pending_value()) for s in self._busy if s._pending_value() > s._completed]
            if points:
                self._deferred.append((allocation, points))
            else:
                self._memory.free(allocation)

    # -- descriptors ------------------------------------------------------------------------------------

    def _pipeline_layout(self, n_buffers: int, scalar_bytes: int) -> tuple[Any, Any]:
        """The (VkPipelineLayout, VkDescriptorSetLayout) of the argument convention, cached."""
        key = (n_buffers, scalar_bytes)
        cached = self._layouts.get(key)
        if cached is not None:
            return cached
        vk = _vk
        ffi, lib = vk.ffi, vk.lib
        extra = self._info.extra
        if n_buffers > extra["max_storage_buffers"]:
            raise InvalidArgument("Stream.launch", f"{n_buffers} buffer arguments; the device binds at most "
                                  f"{extra['max_storage_buffers']} storage buffers per kernel")
        if scalar_bytes > extra["max_push_constants"]:
            raise InvalidArgument("Stream.launch", f"scalar arguments take {scalar_bytes} bytes; the device's push "
                                  f"constants hold {extra['max_push_constants']}")
        bindings = ffi.new("VkDescriptorSetLayoutBinding[]", [
            {"binding": i, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "descriptorCount": 1,
             "stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT} for i in range(n_buffers)] or 1)
        set_info = ffi.new("VkDescriptorSetLayoutCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, "bindingCount": n_buffers,
            "pBindings": bindings})
        set_layout = ffi.new("VkDescriptorSetLayout*")
        _check("vkCreateDescriptorSetLayout", lib.vkCreateDescriptorSetLayout(self._handle, set_info, ffi.NULL, set_layout))
        push = ffi.new("VkPushConstantRange*", {"stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT, "offset": 0,
                                                "size": scalar_bytes})
        layout_info = ffi.new("VkPipelineLayoutCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, "setLayoutCount": 1, "pSetLayouts": set_layout,
            "pushConstantRangeCount": 1 if scalar_bytes else 0, "pPushConstantRanges": push if scalar_bytes else ffi.NULL,
        })
        layout = ffi.new("VkPipelineLayout*")
        result = lib.vkCreatePipelineLayout(self._handle, layout_info, ffi.NULL, layout)
        if result < 0:
            lib.vkDestroyDescriptorSetLayout(self._handle, set_layout[0], ffi.NULL)
            raise _error("vkCreatePipelineLayout", result)
        cached = self._layouts[key] = (layout[0], set_layout[0])
        return cached

    def _descriptor_set(self, pool: _DescriptorPool, set_layout: Any, buffers: list[VulkanBuffer]) -> Any:
        vk = _vk
        ffi, lib = vk.ffi, vk.lib
        layouts = ffi.new("VkDescriptorSetLayout[1]", [set_layout])
        info = ffi.new("VkDescriptorSetAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, "descriptorPool": pool.handle,
            "descriptorSetCount": 1, "pSetLayouts": layouts})
        out = ffi.new("VkDescriptorSet[1]")
        _check("vkAllocateDescriptorSets", lib.vkAllocateDescriptorSets(self._handle, info, out))
        pool.sets_left -= 1
        pool.descriptors_left -= len(buffers)
        infos = ffi.new("VkDescriptorBufferInfo[]", [
            {"buffer": b._allocation.block.buffer, "offset": b._allocation.offset, "range": b.nbytes} for b in buffers])
        writes = ffi.new("VkWriteDescriptorSet[]", [
            {"sType": vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, "dstSet": out[0], "dstBinding": i,
             "descriptorCount": 1, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "pBufferInfo": infos + i}
            for i in range(len(buffers))])
        lib.vkUpdateDescriptorSets(self._handle, len(buffers), writes, 0, ffi.NULL)
        return out

    # -- the private API --------------------------------------------------------------------------------

    def _native(self) -> VulkanHandles:
        return VulkanHandles(self._instance.handle, self._physical, self._handle, self._family, self._buffer_usage,
                             self._memory.type_index, self._staging.type_index)

    def _capabilities(self) -> frozenset[str]:
        return self._caps

    def _default_stream(self) -> api.Stream:
        return self._default

    def _create_stream(self) -> VulkanStream:
        with self._lock:
            stream = VulkanStream(self, self._queues[self._next_queue % len(self._queues)])
            self._next_queue += 1
            if len(self._stream_handles) > 64:
                self._stream_handles = [f for f in self._stream_handles if f.alive]
            self._stream_handles.append(stream._destroy)
            return stream

    def _alloc(self, nbytes: int) -> api.Buffer:
        with self._lock:
            try:
                allocation = self._memory.alloc(nbytes)
            except OutOfMemory:
                self._synchronize()
                self._memory.release_empty()
                self._staging.release_empty()
                allocation = self._memory.alloc(nbytes)
            return VulkanBuffer(self, nbytes, allocation)

    def _synchronize(self, timeout: float | None = None) -> None:
        with self._lock:
            busy = list(self._busy)
            for stream in busy:
                stream._submit()
            points = [(s, s._submitted) for s in busy]
        self._wait(points)

    def _compile(self, source: str | bytes, lang: str, options: tuple[str, ...]) -> api.Module:
        if lang == "glsl":
            code = _compile_glsl(str(source), options)
        else:
            if options:
                raise InvalidArgument("Device.compile", f"lang='spirv' takes no options, got {options!r}")
            code = bytes(source)
        with self._lock:
            return VulkanModule(self, lang, code)

    def _drain_diagnostics(self) -> list[str]:
        messages, self._instance.messages = self._instance.messages, []
        return messages

    def _close(self) -> None:
        """Finish enqueued work (so owed copy_dtoh results land), then destroy everything, device last."""
        ffi, lib = _vk.ffi, _vk.lib
        handle = self._handle
        try:
            self._synchronize()
        finally:
            lib.vkDeviceWaitIdle(handle)
            with self._lock:
                for module in self._modules:
                    module._destroy(handle)
                for layout, set_layout in self._layouts.values():
                    lib.vkDestroyPipelineLayout(handle, layout, ffi.NULL)
                    lib.vkDestroyDescriptorSetLayout(handle, set_layout, ffi.NULL)
                for stream in self._busy:  # a failed synchronize leaves pools with batches
                    pending = [*stream._in_flight, *([stream._batch] if stream._batch else [])]
                    stream._free_descriptor_pools += [b.descriptor_pool for b in pending if b.descriptor_pool]
                for destroy in self._stream_handles:
                    destroy()
                self._busy.clear()
                self._timestamps.destroy()
                lib.vkDestroyPipelineCache(handle, self._pipeline_cache, ffi.NULL)
                self._memory.destroy()
                self._staging.destroy()
                lib.vkDestroyDevice(handle, ffi.NULL)
                self._instance.destroy()
