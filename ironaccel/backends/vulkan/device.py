"""The device: one logical VkDevice over one physical device, and what every stream of it shares.

Opening a device is a sequence of named steps (query the physical device, choose a compute queue family and
the capabilities, create the logical device, choose memory types, describe it in a DeviceInfo, prepare the
structures of the hot path). The device also owns the device-wide synchronisation state: which streams have
work outstanding, the host's share of completed work, and buffer ranges whose free waits on that work.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from ... import api, glslang
from ...api import DeviceInfo, Limits
from ...errors import InvalidArgument, NotAvailable, OutOfMemory
from . import native
from .graph import GraphResources, VulkanGraph
from .instance import Instance
from .record import Recording
from .memory import ALIGNMENT, BLOCK_SIZE, MemoryPool, VulkanBuffer, Allocation
from .module import (DescriptorSets, PipelineLayouts, ShaderResources, VulkanModule, compile_glsl,
                       spirv_target_env)
from .stream import Deadline, Flusher, Queue, StreamHandles, Timestamps, VulkanStream, deadline

DIRECT_MAPPING_ENV = "IRONACCEL_VK_DIRECT_MAPPING"
MAX_QUEUES = 4
STAGING_KEPT_BLOCKS = 4  # freed large staging kept for the next copies, in blocks (256 MiB with 64 MiB blocks)

_U64_MAX = (1 << 64) - 1
_VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel", 0x13B5: "ARM", 0x5143: "Qualcomm",
            0x1010: "Imagination", 0x106B: "Apple", 0x1AE0: "Google", 0x10005: "Mesa"}


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


def _device_extensions(physical: Any) -> set[str]:
    return {native.string(e.extensionName) for e in native.enumerate_items(
        "vkEnumerateDeviceExtensionProperties", "VkExtensionProperties", physical, native.vk.ffi.NULL)}


def _query(physical: Any, extensions: set[str]) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    """Properties (core, driver, subgroup, maintenance3), features and queue families of a device."""
    vk = native.vk
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
    if "VK_EXT_robustness2" in extensions:
        chain = features["robustness2"] = ffi.new("VkPhysicalDeviceRobustness2FeaturesEXT*", {
            "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ROBUSTNESS_2_FEATURES_EXT, "pNext": chain})
    features["core"] = ffi.new("VkPhysicalDeviceFeatures2*", {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                                              "pNext": chain})
    lib.vkGetPhysicalDeviceFeatures2(physical, features["core"])
    families = native.enumerate_items("vkGetPhysicalDeviceQueueFamilyProperties", "VkQueueFamilyProperties", physical)
    return props, features, families


def _compute_family(families: Any, index: int) -> tuple[int, Any]:
    """The first queue family that can run compute work."""
    for i, family in enumerate(families):
        if family.queueFlags & native.vk.VK_QUEUE_COMPUTE_BIT:
            return i, family
    raise NotAvailable("vulkan", "compute queue", f"device {index} has no compute-capable queue family")


def _capabilities(props: dict[str, Any], features: dict[str, Any], extensions: set[str],
                  family: Any) -> tuple[set[str], list[bytes]]:
    """The capability names the device supports, and the device extensions to enable (for them, and
    VK_EXT_robustness2 where the device has robustBufferAccess2)."""
    caps = {"lang.spirv", "kernel.shared_memory", "kernel.atomics.int32", "graphs"}
    if glslang.tool():
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
    vk = native.vk
    subgroup = props["subgroup"]
    # what the GLSL kernels use: gl_SubgroupSize/InvocationID (basic), subgroupAdd (arithmetic),
    # subgroupBroadcastFirst (ballot)
    operations = (vk.VK_SUBGROUP_FEATURE_BASIC_BIT | vk.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT
                  | vk.VK_SUBGROUP_FEATURE_BALLOT_BIT)
    compute = subgroup.supportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT
    if compute and subgroup.supportedOperations & operations == operations:
        caps.add("kernel.subgroups")
    robustness2 = features.get("robustness2")
    if robustness2 is not None and robustness2.robustBufferAccess2:
        enable_exts.append(b"VK_EXT_robustness2")
        # bounds by each descriptor's range; plain robustBufferAccess bounds only by the shared block's VkBuffer
        caps.add("kernel.bounds_checked")
    if "VK_KHR_portability_subset" in extensions:
        enable_exts.append(b"VK_KHR_portability_subset")
    if family.timestampValidBits > 0 and props["core"].properties.limits.timestampPeriod > 0:
        caps.add("events.timing")
    return caps, enable_exts


def _memory_types(memory: Any, type_bits: int, index: int) -> tuple[int, int, bool]:
    """(device type, staging type, whether device memory is host-mappable) among the types a buffer may use.

    Device memory: host-visible, coherent and cached on the largest device-local heap when there is such a
    type (CPU drivers, resizable BAR), else device-local. Staging: host-visible and coherent, cached if it can."""
    vk = native.vk
    largest_heap = _largest_device_heap(memory)
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
    return device_type, staging_type, mappable is not None


def _largest_device_heap(memory: Any) -> int:
    """Bytes of the largest device-local heap (not the sum: a BAR heap is a window onto the same memory)."""
    return max((memory.memoryHeaps[i].size for i in range(memory.memoryHeapCount)
                if memory.memoryHeaps[i].flags & native.vk.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT), default=0)


class VulkanDevice(api.Device):
    """One logical VkDevice over one physical device; see the package docstring."""

    def __init__(self, instance: Instance, physical: Any, index: int):
        vk = native.vk
        ffi, lib = vk.ffi, vk.lib
        self._instance = instance
        self._physical = physical
        self._handle = None
        self._lock = threading.RLock()
        self._busy: set[VulkanStream] = set()  # streams with work recorded, waiting or in flight
        self._flusher = Flusher(self._lock)  # submits the batches a burst of commands leaves open
        self._stream_handles: list[weakref.finalize] = []  # each gives a live stream's handles back at close
        self._spare_handles: list[StreamHandles] = []  # of collected streams, for the next ones
        self._modules: set[ShaderResources] = set()  # of modules not yet released: close destroys them
        # releases of buffers and modules collected unclosed, run at the next alloc, compile or synchronize: a
        # collector only appends here (it may run inside this device's own locked code, mid-update)
        self._dropped: collections.deque[Callable[[], None]] = collections.deque()
        self._layouts = PipelineLayouts(self)
        self._descriptor_sets = DescriptorSets(self)  # of every stream's launches, kept across batches
        # releases that wait for enqueued work (a freed buffer's range, a closed graph), with the points
        # (stream, timeline value) it must reach first
        self._deferred: list[tuple[Callable[[], None], list[tuple[VulkanStream, int]]]] = []
        self._graphs: set[GraphResources] = set()  # of graphs not yet released
        self._graph_pool: Any = None  # the VkCommandPool of graphs' command buffers, made at the first capture
        self._counter_value = ffi.new("uint64_t*")

        extensions = _device_extensions(physical)
        props, features, families = _query(physical, extensions)
        self._family, family = _compute_family(families, index)
        caps, enable_exts = _capabilities(props, features, extensions, family)
        self._caps = frozenset(caps)
        queue_count = min(family.queueCount, MAX_QUEUES)
        self._handle = self._create_logical_device(features, queue_count, enable_exts)
        try:
            self._queues = []
            for i in range(queue_count):
                q = ffi.new("VkQueue*")
                lib.vkGetDeviceQueue(self._handle, self._family, i, q)
                self._queues.append(Queue(q[0]))
            memory = ffi.new("VkPhysicalDeviceMemoryProperties*")
            lib.vkGetPhysicalDeviceMemoryProperties(physical, memory)
            max_alloc = self._create_memory_pools(memory, props, index)
            super().__init__(self._describe(props, memory, index, queue_count, max_alloc))
            self._spirv_target_env = spirv_target_env(props["core"].properties.apiVersion)
            self._prepare_hot_path(family, props["core"].properties.limits.timestampPeriod)
        except BaseException:
            lib.vkDeviceWaitIdle(self._handle)  # unchecked: the error being raised is the one to report
            lib.vkDestroyDevice(self._handle, ffi.NULL)  # children die with it; only an error path gets here
            raise

    # -- the steps of opening a device ------------------------------------------------------------------

    def _create_logical_device(self, features: dict[str, Any], queue_count: int, enable_exts: list[bytes]) -> Any:
        """The VkDevice with ``queue_count`` queues of the compute family, timeline semaphores, the features
        the capabilities need, and robust buffer access where the device has it: a kernel's out-of-bounds
        access then stays inside its own buffer. Each buffer binds only its own range of the block's VkBuffer;
        robustBufferAccess2 (VK_EXT_robustness2) bounds accesses by that range, as the spec guarantees;
        plain robustBufferAccess promises only the whole VkBuffer, though drivers bound by the range too."""
        vk = native.vk
        ffi = vk.ffi
        core = features["core"].features
        self._robust_buffer_access = core.robustBufferAccess
        self._robust_buffer_access2 = b"VK_EXT_robustness2" in enable_exts
        priorities = ffi.new("float[]", [1.0] * queue_count)
        queue_info = ffi.new("VkDeviceQueueCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, "queueFamilyIndex": self._family,
            "queueCount": queue_count, "pQueuePriorities": priorities,
        })
        want12 = ffi.new("VkPhysicalDeviceVulkan12Features*", {
            "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, "timelineSemaphore": 1,
        })
        extra_features = [want12]  # a pNext chain: cffi keeps each struct alive only while this list holds it
        if self._robust_buffer_access2:
            extra_features.append(ffi.new("VkPhysicalDeviceRobustness2FeaturesEXT*", {
                "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ROBUSTNESS_2_FEATURES_EXT, "pNext": extra_features[-1],
                "robustBufferAccess2": 1,
            }))
        if "kernel.atomics.float32" in self._caps:
            extra_features.append(ffi.new("VkPhysicalDeviceShaderAtomicFloatFeaturesEXT*", {
                "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT,
                "pNext": extra_features[-1], "shaderBufferFloat32AtomicAdd": 1,
            }))
        want = ffi.new("VkPhysicalDeviceFeatures2*", {
            "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, "pNext": extra_features[-1],
            "features": {"shaderFloat64": core.shaderFloat64, "shaderInt64": core.shaderInt64,
                         "robustBufferAccess": core.robustBufferAccess},
        })
        c_exts, extension_names = native.c_strings(enable_exts)
        info = ffi.new("VkDeviceCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, "pNext": want,
            "queueCreateInfoCount": 1, "pQueueCreateInfos": queue_info,
            "enabledExtensionCount": len(enable_exts), "ppEnabledExtensionNames": extension_names,
        })
        out = ffi.new("VkDevice*")
        native.call.vkCreateDevice(self._physical, info, ffi.NULL, out)
        return out[0]

    def _create_memory_pools(self, memory: Any, props: dict[str, Any], index: int) -> int:
        """The pools for buffers and for staging; returns the largest allocation the device promises."""
        vk = native.vk
        self._buffer_usage = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
                              | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT)
        device_type, staging_type, mappable = _memory_types(memory, self._buffer_type_bits(), index)
        self._direct_mapping = mappable and os.environ.get(DIRECT_MAPPING_ENV, "1") != "0"
        heap = memory.memoryHeaps[memory.memoryTypes[device_type].heapIndex].size
        max_allocation = props["maintenance3"].maxMemoryAllocationSize
        block = max(1 << 20, min(BLOCK_SIZE, heap // 16, max_allocation))
        self._memory = MemoryPool(self, device_type, self._direct_mapping, block)
        self._staging = MemoryPool(self, staging_type, True, block, keep_bytes=STAGING_KEPT_BLOCKS * block)
        # One granule under maxMemoryAllocationSize: SwiftShader 5.0 reports 1 GiB there but fails to allocate
        # exactly 1 GiB (VK_ERROR_OUT_OF_DEVICE_MEMORY), and max_alloc promises an allocation that works.
        limits = props["core"].properties.limits
        return min(max_allocation - ALIGNMENT, limits.maxStorageBufferRange, heap) // ALIGNMENT * ALIGNMENT

    def _buffer_type_bits(self) -> int:
        """The memory types our buffers may live in (asked of a throwaway buffer)."""
        vk = native.vk
        ffi, lib = vk.ffi, vk.lib
        info = ffi.new("VkBufferCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, "size": ALIGNMENT,
                                               "usage": self._buffer_usage, "sharingMode": vk.VK_SHARING_MODE_EXCLUSIVE})
        out = ffi.new("VkBuffer*")
        native.call.vkCreateBuffer(self._handle, info, ffi.NULL, out)
        req = ffi.new("VkMemoryRequirements*")
        lib.vkGetBufferMemoryRequirements(self._handle, out[0], req)
        lib.vkDestroyBuffer(self._handle, out[0], ffi.NULL)
        if req.alignment > ALIGNMENT:
            raise NotAvailable("vulkan", "buffer alignment", f"the device wants {req.alignment}-byte aligned buffers")
        return req.memoryTypeBits

    def _describe(self, props: dict[str, Any], memory: Any, index: int, queue_count: int, max_alloc: int) -> DeviceInfo:
        vk = native.vk
        limits = props["core"].properties.limits
        driver = props["driver"]
        core_props = props["core"].properties
        return DeviceInfo(
            backend="vulkan",
            index=index,
            name=native.string(core_props.deviceName),
            vendor=_VENDORS.get(core_props.vendorID, f"0x{core_props.vendorID:04x}"),
            driver=native.string(driver.driverName).removesuffix(" driver") or "unknown",
            driver_version=native.string(driver.driverInfo) or native.version_string(core_props.driverVersion),
            simulated=core_props.deviceType == vk.VK_PHYSICAL_DEVICE_TYPE_CPU,
            memory=_largest_device_heap(memory),
            limits=Limits(
                max_alloc=max_alloc,
                max_threads_per_block=limits.maxComputeWorkGroupInvocations,
                max_block=tuple(limits.maxComputeWorkGroupSize),
                max_grid=tuple(limits.maxComputeWorkGroupCount),
                max_shared_memory=limits.maxComputeSharedMemorySize,
                warp_size=props["subgroup"].subgroupSize,
            ),
            extra={
                "api_version": native.version_string(core_props.apiVersion),
                "vendor_id": core_props.vendorID,
                "device_id": core_props.deviceID,
                "driver_id": driver.driverID,
                "device_type": vk.ffi.typeof("VkPhysicalDeviceType").elements.get(core_props.deviceType, ""),
                "queue_family": self._family,
                "queues": queue_count,
                "validation": self._instance._messenger is not None,
                # its hazards, too, are collected (diagnostics())
                "synchronization_validation": self._instance._messenger is not None and self._instance.synchronization,
                "direct_mapping": self._direct_mapping,
                "robust_buffer_access": bool(self._robust_buffer_access),
                "robust_buffer_access2": self._robust_buffer_access2,
                "max_push_constants": limits.maxPushConstantsSize,
                "max_storage_buffers": limits.maxPerStageDescriptorStorageBuffers,
            },
        )

    def _prepare_hot_path(self, family: Any, timestamp_period: float) -> None:
        """Structures every recording reuses, the pipeline cache, timestamp slots and the default stream."""
        vk = native.vk
        ffi = vk.ffi
        self._begin_info = ffi.new("VkCommandBufferBeginInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
            "flags": vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
        })
        self._graph_inheritance = ffi.new("VkCommandBufferInheritanceInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_INHERITANCE_INFO})  # outside any render pass
        self._graph_begin_info = ffi.new("VkCommandBufferBeginInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
            "flags": vk.VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT, "pInheritanceInfo": self._graph_inheritance,
        })
        memory_access = vk.VK_ACCESS_MEMORY_READ_BIT | vk.VK_ACCESS_MEMORY_WRITE_BIT
        all_commands = vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT
        # vkCmdPipelineBarrier's arguments after the command buffer: one global memory barrier
        self._between_commands = (all_commands, all_commands, 0, 1, ffi.new("VkMemoryBarrier*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER, "srcAccessMask": memory_access, "dstAccessMask": memory_access}),
            0, ffi.NULL, 0, ffi.NULL)
        self._to_host = (all_commands, vk.VK_PIPELINE_STAGE_HOST_BIT, 0, 1, ffi.new("VkMemoryBarrier*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER, "srcAccessMask": vk.VK_ACCESS_MEMORY_WRITE_BIT,
            "dstAccessMask": vk.VK_ACCESS_HOST_READ_BIT | vk.VK_ACCESS_HOST_WRITE_BIT}), 0, ffi.NULL, 0, ffi.NULL)
        self._record = Recording()  # how launches and graph replays are recorded
        self._between_handle = self._record.handle(self._between_commands[4])
        cache_info = ffi.new("VkPipelineCacheCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO})
        cache = ffi.new("VkPipelineCache*")
        native.call.vkCreatePipelineCache(self._handle, cache_info, ffi.NULL, cache)
        self._pipeline_cache = cache[0]
        self._timestamps = Timestamps(self, family.timestampValidBits, timestamp_period)
        self._next_queue = 0
        self._default = self._create_stream()

    # -- synchronisation helpers shared by streams and events ---------------------------------------------

    def _barrier(self, cmd: Any, barrier: tuple[Any, ...]) -> None:
        native.vk.lib.vkCmdPipelineBarrier(cmd, *barrier)

    def _counter(self, stream: VulkanStream) -> int:
        """Read a stream's timeline value (and remember it)."""
        native.call.vkGetSemaphoreCounterValue(self._handle, stream._semaphore, self._counter_value)
        stream._completed = max(stream._completed, self._counter_value[0])
        return stream._completed

    def _reached(self, stream: VulkanStream, value: int) -> bool:
        with self._lock:
            if stream._completed < value and self._counter(stream) < value:
                return False
            self._retire()
            return True

    def _wait(self, points: list[tuple[VulkanStream, int]], limit: Deadline | None = None) -> None:
        """Block until every (stream, value) is reached, then do the host's share of completed work; past
        ``limit`` raise its Timeout."""
        vk = native.vk
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
            timeout_ns = _U64_MAX if limit is None else limit.nanoseconds_left()
            if native.call.vkWaitSemaphores(self._handle, info, timeout_ns) == vk.VK_TIMEOUT:
                assert limit is not None  # an endless wait never times out
                raise limit.expired()
        with self._lock:
            for s, v in points:
                s._completed = max(s._completed, v)
            self._retire()

    def _retire(self) -> None:
        for stream in list(self._busy):
            stream._retire()
        if self._deferred:
            due, still = [], []
            for release, points in self._deferred:
                (due if all(s._completed >= v for s, v in points) else still).append((release, points))
            self._deferred = still
            for release, _ in due:
                release()

    def _release_after(self, points: list[tuple[VulkanStream, int]], release: Callable[[], None]) -> None:
        """Call ``release`` once every (stream, value) is reached: now when all already are."""
        with self._lock:
            points = [(s, v) for s, v in points if v > s._completed]
            if points:
                self._deferred.append((release, points))
            else:
                release()

    def _free_later(self, allocation: Allocation) -> None:
        """Release a buffer's range once the work enqueued before now, on every stream, has completed."""
        if self._closed:
            return
        with self._lock:
            points = [(s, s._pending_value()) for s in self._busy]
            self._release_after(points, lambda: self._memory.free(allocation))

    def _release_dropped(self) -> None:
        """Run the releases of what was collected unclosed (``_dropped``), each ordered after the work enqueued
        before now."""
        while self._dropped:
            self._dropped.popleft()()

    def _release_module(self, resources: ShaderResources) -> None:
        """Destroy a module's shader and pipelines once the work enqueued before now, on every stream, has
        completed (``Module.close``, or the module collected unclosed)."""
        if self._closed:
            return
        with self._lock:
            self._modules.discard(resources)
            points = [(s, s._pending_value()) for s in self._busy]
            self._release_after(points, lambda: resources.destroy(self._handle))

    def _forget_buffer(self, vk_buffer: Any) -> None:
        """A VkBuffer is being destroyed: no descriptor set made for it is bound again (by a stream, or by a
        graph still capturing), as its handle may come back for another buffer."""
        self._descriptor_sets.forget(vk_buffer)
        for graph in self._graphs:
            for pool in graph.descriptor_pools:
                pool.forget(vk_buffer)

    def _graph_command_pool(self) -> Any:
        """The VkCommandPool that graphs' secondary command buffers come from (recorded under ``_lock``)."""
        if self._graph_pool is None:
            vk = native.vk
            info = vk.ffi.new("VkCommandPoolCreateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, "queueFamilyIndex": self._family})
            out = vk.ffi.new("VkCommandPool*")
            native.call.vkCreateCommandPool(self._handle, info, vk.ffi.NULL, out)
            self._graph_pool = out[0]
        return self._graph_pool

    # -- the private API --------------------------------------------------------------------------------

    def _native(self) -> VulkanHandles:
        return VulkanHandles(self._instance.handle, self._physical, self._handle, self._family, self._buffer_usage,
                             self._memory.type_index, self._staging.type_index)

    def _capabilities(self) -> frozenset[str]:
        return self._caps

    def _default_stream(self) -> api.Stream:
        return self._default

    def _create_graph(self) -> VulkanGraph:
        with self._lock:
            self._release_dropped()
            return VulkanGraph(self)

    def _create_stream(self) -> VulkanStream:
        with self._lock:
            handles = self._spare_handles.pop() if self._spare_handles else StreamHandles(self)
            stream = VulkanStream(self, self._queues[self._next_queue % len(self._queues)], handles)
            self._next_queue += 1
            if len(self._stream_handles) > 64:
                self._stream_handles = [f for f in self._stream_handles if f.alive]
            self._stream_handles.append(stream._give_back)
            return stream

    def _alloc(self, nbytes: int) -> api.Buffer:
        with self._lock:
            self._release_dropped()
            try:
                allocation = self._memory.alloc(nbytes)
            except OutOfMemory:
                self._synchronize()
                self._memory.release_empty()
                self._staging.release_empty()
                allocation = self._memory.alloc(nbytes)
            return VulkanBuffer(self, nbytes, allocation)

    def _synchronize(self, timeout: float | None = None) -> None:
        limit = deadline("Device.synchronize", timeout)
        with self._lock:
            self._release_dropped()
            busy = list(self._busy)
            for stream in busy:
                stream._submit(limit)
            points = [(s, s._submitted) for s in busy]
        self._wait(points, limit)

    def _compile(self, source: str | bytes, lang: str, options: tuple[str, ...]) -> api.Module:
        if lang == "glsl":
            code = compile_glsl(str(source), options)
        else:
            if options:
                raise InvalidArgument("Device.compile", f"lang='spirv' takes no options, got {options!r}")
            code = bytes(source)
        with self._lock:
            self._release_dropped()
            return VulkanModule(self, lang, code)

    def _drain_diagnostics(self) -> list[str]:
        messages, self._instance.messages = self._instance.messages, []
        return messages

    def _close(self) -> None:
        """Finish enqueued work (so owed copy_dtoh results land), then destroy everything, device last."""
        ffi, lib = native.vk.ffi, native.vk.lib
        handle = self._handle
        self._flusher.stop()  # before the synchronize, which submits what it left open
        try:
            self._synchronize()
        finally:
            lib.vkDeviceWaitIdle(handle)  # unchecked: a lost device is torn down all the same
            with self._lock:
                for resources in self._modules:
                    resources.destroy(handle)
                self._modules.clear()
                for graph in list(self._graphs):  # open graphs, and closed ones whose release still waited
                    graph.destroy(self)
                self._deferred.clear()
                if self._graph_pool is not None:
                    lib.vkDestroyCommandPool(handle, self._graph_pool, ffi.NULL)
                self._descriptor_sets.destroy()
                self._layouts.destroy()
                for give_back in self._stream_handles:
                    give_back()
                for handles in self._spare_handles:
                    handles.destroy(handle)
                self._spare_handles.clear()
                self._busy.clear()
                self._timestamps.destroy()
                lib.vkDestroyPipelineCache(handle, self._pipeline_cache, ffi.NULL)
                self._memory.destroy()
                self._staging.destroy()
                lib.vkDestroyDevice(handle, ffi.NULL)
                self._instance.destroy()
