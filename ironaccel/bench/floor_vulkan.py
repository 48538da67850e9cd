"""The Vulkan floor: raw ``vulkan`` calls on ironaccel's VkDevice and queue (``Device.native``,
``Stream.native``), with buffers, memory, a command buffer and a fence of its own."""

from __future__ import annotations

import ctypes
from typing import Any, Callable

import numpy as np

from .cases import ALLOC_BYTES, Impl, pageable
from .ours import KernelCall
from .stats import timed


EMPTY_GLSL = """#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(std430, set = 0, binding = 0) buffer X { float x[]; };
layout(push_constant) uniform P { float a; uint n; };
void main() { if (n > 0u) x[0] = a; }
"""


class VulkanRaw:
    """One command buffer and one fence on ironaccel's VkDevice: record, submit, wait — the raw sequence."""

    def __init__(self, native: Any, queue: Any, max_bytes: int):
        import vulkan as vk

        self.vk, self.ffi, self.lib = vk, vk.ffi, vk.lib
        self.native, self.handle, self.queue = native, native.device, queue
        ffi, lib = self.ffi, self.lib
        pool = ffi.new("VkCommandPool*")
        self._ok(lib.vkCreateCommandPool(self.handle, ffi.new("VkCommandPoolCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, "queueFamilyIndex": native.queue_family,
            "flags": vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT}), ffi.NULL, pool))
        self.pool = pool[0]
        cmd = ffi.new("VkCommandBuffer*")
        self._ok(lib.vkAllocateCommandBuffers(self.handle, ffi.new("VkCommandBufferAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": self.pool,
            "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, "commandBufferCount": 1}), cmd))
        self.cmd_array = cmd
        self.cmd = cmd[0]
        fence = ffi.new("VkFence*")
        self._ok(lib.vkCreateFence(self.handle, ffi.new("VkFenceCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO}), ffi.NULL, fence))
        self.fence_array = fence
        self.fence = fence[0]
        self.begin_info = ffi.new("VkCommandBufferBeginInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
            "flags": vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT})
        self.submit_cmd = ffi.new("VkSubmitInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO,
                                                    "commandBufferCount": 1, "pCommandBuffers": cmd})
        self.buffers: list[tuple[Any, Any]] = []
        self.staging, self.staging_memory = self.buffer(max_bytes, native.staging_memory_type)
        mapped = ffi.new("void**")
        self._ok(lib.vkMapMemory(self.handle, self.staging_memory, 0, max_bytes, 0, mapped))
        self.mapped = int(ffi.cast("uintptr_t", mapped[0]))
        self.region = ffi.new("VkBufferCopy*")

    def _ok(self, result: int) -> None:
        if result < 0:
            raise RuntimeError(f"raw vulkan call failed: VkResult {result}")

    def buffer(self, n: int, type_index: int) -> tuple[Any, Any]:
        """vkCreateBuffer + vkAllocateMemory + vkBindBufferMemory: a buffer with its own memory."""
        vk, ffi, lib = self.vk, self.ffi, self.lib
        out = ffi.new("VkBuffer*")
        self._ok(lib.vkCreateBuffer(self.handle, ffi.new("VkBufferCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, "size": n, "usage": self.native.buffer_usage,
            "sharingMode": vk.VK_SHARING_MODE_EXCLUSIVE}), ffi.NULL, out))
        req = ffi.new("VkMemoryRequirements*")
        lib.vkGetBufferMemoryRequirements(self.handle, out[0], req)
        mem = ffi.new("VkDeviceMemory*")
        self._ok(lib.vkAllocateMemory(self.handle, ffi.new("VkMemoryAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, "allocationSize": req.size,
            "memoryTypeIndex": type_index}), ffi.NULL, mem))
        self._ok(lib.vkBindBufferMemory(self.handle, out[0], mem[0], 0))
        self.buffers.append((out[0], mem[0]))
        return out[0], mem[0]

    def alloc_free(self) -> None:
        buf, mem = self.buffer(ALLOC_BYTES, self.native.device_memory_type)
        self.buffers.pop()
        self.lib.vkDestroyBuffer(self.handle, buf, self.ffi.NULL)
        self.lib.vkFreeMemory(self.handle, mem, self.ffi.NULL)

    def submit_wait(self, submit: Any, count: int) -> None:
        lib = self.lib
        self._ok(lib.vkQueueSubmit(self.queue, count, submit, self.fence))
        self._ok(lib.vkWaitForFences(self.handle, 1, self.fence_array, 1, 0xFFFFFFFFFFFFFFFF))
        self._ok(lib.vkResetFences(self.handle, 1, self.fence_array))

    def copy(self, src: Any, dst: Any, n: int) -> None:
        lib = self.lib
        self._ok(lib.vkBeginCommandBuffer(self.cmd, self.begin_info))
        self.region.size = n
        lib.vkCmdCopyBuffer(self.cmd, src, dst, 1, self.region)
        self._ok(lib.vkEndCommandBuffer(self.cmd))
        self.submit_wait(self.submit_cmd, 1)

    def close(self) -> None:
        lib, ffi = self.lib, self.ffi
        lib.vkQueueWaitIdle(self.queue)
        for buf, mem in self.buffers:
            lib.vkDestroyBuffer(self.handle, buf, ffi.NULL)
            lib.vkFreeMemory(self.handle, mem, ffi.NULL)
        lib.vkDestroyFence(self.handle, self.fence, ffi.NULL)
        lib.vkDestroyCommandPool(self.handle, self.pool, ffi.NULL)


def setup(dev: Any, stream: Any, sizes: tuple[int, ...]) -> tuple[dict[str, Impl], KernelCall | None, list[Callable[[], None]]]:
    """The raw floor's implementations, the kernel ironaccel launches (GLSL, when glslang is here), the cleanup."""
    usable = [n for n in sizes if n <= dev.info.limits.max_alloc]
    raw = VulkanRaw(dev.native, stream.native, max(usable, default=ALLOC_BYTES))
    impls: dict[str, Impl] = {}
    impls["alloc_free.device"] = impls["alloc_free.pool"] = timed(raw.alloc_free)
    queue_wait = raw.lib.vkQueueWaitIdle
    impls["stream_sync"] = timed(lambda: queue_wait(raw.queue))
    empty_submit = raw.ffi.NULL
    impls["event_record_sync"] = timed(lambda: raw.submit_wait(empty_submit, 0))
    for n in usable:
        d, _ = raw.buffer(n, raw.native.device_memory_type)
        host = pageable(n)

        def htod(d: Any = d, n: int = n, host: np.ndarray = host) -> None:  # the default keeps host alive
            ctypes.memmove(raw.mapped, host.ctypes.data, n)
            raw.copy(raw.staging, d, n)

        def dtoh(d: Any = d, n: int = n, host: np.ndarray = host) -> None:
            raw.copy(d, raw.staging, n)
            ctypes.memmove(host.ctypes.data, raw.mapped, n)

        impls[f"htod.pageable.{n}"] = impls[f"htod.pageable.{n}.call"] = timed(htod)  # the raw copy waits anyway
        impls[f"dtoh.pageable.{n}"] = timed(dtoh)
    kernel = None
    if dev.supports("lang.glsl"):
        kbuf = dev.alloc(256)
        kernel = (dev.compile(EMPTY_GLSL, "glsl").kernel("main"), (kbuf, np.float32(2), np.uint32(0)))
    return impls, kernel, [raw.close]
