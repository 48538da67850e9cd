"""The Vulkan floor: raw ``vulkan`` calls on ironaccel's VkDevice and queue (``Device.native``,
``Stream.native``), with buffers, memory, a command buffer, a fence and compute pipelines of its own.

A launch records bind-pipeline, bind-descriptors and push-constants (once per command buffer and kernel, as a
raw program does: back-to-back launches of one kernel on the same arguments record a barrier and a dispatch
each) and a dispatch into an open command buffer, after a full memory barrier when a command precedes it
(stream order: each launch sees the writes of the one before, as on ironaccel's streams); the next
synchronize ends the command buffer (after a barrier that makes device writes visible to the host), submits it
and waits for it. ironaccel's streams record the same commands and barriers (binding a descriptor set made
once for the launch's buffers, as this floor does), with one difference that is part of what they cost: a
batch is submitted as soon as the device has caught up with the stream (so work starts at once) and by the
device's flusher within a burst, which this floor never does, so on a fast device ironaccel's "back to back"
rows include submissions the floor's do not.
The graph row executes a secondary command buffer of 100 recorded launches (with their barriers) as one
command, as ironaccel's Vulkan graphs do."""

from __future__ import annotations

import ctypes
from typing import Any, Callable

import numpy as np

from ...api import pack_scalars
from . import kernels
from .cases import ALLOC_BYTES, GRAPH_LAUNCHES, Impl, pageable
from .stats import timed, timed_each, timed_then


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
        memory_access = vk.VK_ACCESS_MEMORY_READ_BIT | vk.VK_ACCESS_MEMORY_WRITE_BIT
        self.between_commands = ffi.new("VkMemoryBarrier*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER, "srcAccessMask": memory_access, "dstAccessMask": memory_access})
        self.to_host = ffi.new("VkMemoryBarrier*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER, "srcAccessMask": vk.VK_ACCESS_MEMORY_WRITE_BIT,
            "dstAccessMask": vk.VK_ACCESS_HOST_READ_BIT})
        self.recording = False
        self.bound: tuple[Any, Any] | None = None  # (command buffer, Dispatch) whose binds it has
        self.objects: list[tuple[Callable[..., None], Any]] = []  # (vkDestroy*, handle) of the pipelines' parts

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

    def barrier(self, cmd: Any, memory: Any, dst_stage: int) -> None:
        vk = self.vk
        self.lib.vkCmdPipelineBarrier(cmd, vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, dst_stage, 0, 1, memory, 0,
                                      self.ffi.NULL, 0, self.ffi.NULL)

    def end_submit_wait(self) -> None:
        """End the command buffer after the barrier to the host, submit it, wait for it."""
        self.barrier(self.cmd, self.to_host, self.vk.VK_PIPELINE_STAGE_HOST_BIT)
        self._ok(self.lib.vkEndCommandBuffer(self.cmd))
        self.submit_wait(self.submit_cmd, 1)

    def copy(self, src: Any, dst: Any, n: int) -> None:
        lib = self.lib
        self._ok(lib.vkBeginCommandBuffer(self.cmd, self.begin_info))
        self.region.size = n
        lib.vkCmdCopyBuffer(self.cmd, src, dst, 1, self.region)
        self.end_submit_wait()

    def record(self, commands: Callable[[Any], None]) -> None:
        """Record ``commands(cmd)`` into the open command buffer: begun when none is open, else after a
        barrier that orders it after the commands before."""
        if not self.recording:
            self._ok(self.lib.vkBeginCommandBuffer(self.cmd, self.begin_info))
            self.recording = True
            self.bound = None
        else:
            self.barrier(self.cmd, self.between_commands, self.vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT)
        commands(self.cmd)

    def flush(self) -> None:
        """End the open command buffer (if any), submit it and wait for it: the synchronize of the launches."""
        if self.recording:
            self.recording = False
            self.end_submit_wait()

    def secondary(self, commands: Callable[[Any], None], count: int) -> Callable[[Any], None]:
        """A secondary command buffer of ``count`` x ``commands`` with barriers between them, recorded once
        (SIMULTANEOUS_USE: executed again before the last execution completed); returns what executes it."""
        vk, ffi, lib = self.vk, self.ffi, self.lib
        cmds = ffi.new("VkCommandBuffer[1]")
        self._ok(lib.vkAllocateCommandBuffers(self.handle, ffi.new("VkCommandBufferAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": self.pool,
            "level": vk.VK_COMMAND_BUFFER_LEVEL_SECONDARY, "commandBufferCount": 1}), cmds))
        inheritance = ffi.new("VkCommandBufferInheritanceInfo*", {"sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_INHERITANCE_INFO})
        self._ok(lib.vkBeginCommandBuffer(cmds[0], ffi.new("VkCommandBufferBeginInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
            "flags": vk.VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT, "pInheritanceInfo": inheritance})))
        for i in range(count):
            if i:
                self.barrier(cmds[0], self.between_commands, vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT)
            commands(cmds[0])
        self._ok(lib.vkEndCommandBuffer(cmds[0]))
        execute = lib.vkCmdExecuteCommands

        def replay(cmd: Any) -> None:
            execute(cmd, 1, cmds)
            self.bound = None  # the bound state is undefined after vkCmdExecuteCommands
        return replay

    def close(self) -> None:
        lib, ffi = self.lib, self.ffi
        self.flush()
        lib.vkQueueWaitIdle(self.queue)
        for destroy, handle in reversed(self.objects):
            destroy(self.handle, handle, ffi.NULL)
        for buf, mem in self.buffers:
            lib.vkDestroyBuffer(self.handle, buf, ffi.NULL)
            lib.vkFreeMemory(self.handle, mem, ffi.NULL)
        lib.vkDestroyFence(self.handle, self.fence, ffi.NULL)
        lib.vkDestroyCommandPool(self.handle, self.pool, ffi.NULL)


class Dispatch:
    """One conformance kernel as a raw program sets it up once: shader module, descriptor set layout and set
    (its buffers, made here), pipeline layout with the push-constant range, pipeline for a 1x1x1 block."""

    def __init__(self, raw: VulkanRaw, name: str):
        vk, ffi, lib = raw.vk, raw.ffi, raw.lib
        device = raw.handle
        self.raw = raw
        code = kernels.source(name, "spirv")
        assert isinstance(code, bytes)
        words = ffi.new("char[]", code)
        shader = ffi.new("VkShaderModule*")
        raw._ok(lib.vkCreateShaderModule(device, ffi.new("VkShaderModuleCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, "codeSize": len(code),
            "pCode": ffi.cast("uint32_t*", words)}), ffi.NULL, shader))
        raw.objects.append((lib.vkDestroyShaderModule, shader[0]))
        count = kernels.BUFFERS[name]
        bindings = ffi.new("VkDescriptorSetLayoutBinding[]", [
            {"binding": i, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "descriptorCount": 1,
             "stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT} for i in range(count)])
        set_layout = ffi.new("VkDescriptorSetLayout*")
        raw._ok(lib.vkCreateDescriptorSetLayout(device, ffi.new("VkDescriptorSetLayoutCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, "bindingCount": count,
            "pBindings": bindings}), ffi.NULL, set_layout))
        raw.objects.append((lib.vkDestroyDescriptorSetLayout, set_layout[0]))
        self.scalars = ffi.new("char[]", pack_scalars(kernels.SCALARS[name]))
        self.scalar_bytes = len(pack_scalars(kernels.SCALARS[name]))
        push = ffi.new("VkPushConstantRange*", {"stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT, "offset": 0,
                                                "size": self.scalar_bytes})
        layout = ffi.new("VkPipelineLayout*")
        raw._ok(lib.vkCreatePipelineLayout(device, ffi.new("VkPipelineLayoutCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, "setLayoutCount": 1, "pSetLayouts": set_layout,
            "pushConstantRangeCount": 1, "pPushConstantRanges": push}), ffi.NULL, layout))
        raw.objects.append((lib.vkDestroyPipelineLayout, layout[0]))
        self.layout = layout[0]
        block = ffi.new("uint32_t[3]", [1, 1, 1])  # specialization constants 0, 1, 2: local_size x, y, z
        entries = ffi.new("VkSpecializationMapEntry[3]", [
            {"constantID": i, "offset": 4 * i, "size": 4} for i in range(3)])
        specialization = ffi.new("VkSpecializationInfo*", {"mapEntryCount": 3, "pMapEntries": entries, "dataSize": 12,
                                                           "pData": block})
        entry_name = ffi.new("char[]", name.encode())
        pipeline = ffi.new("VkPipeline*")
        raw._ok(lib.vkCreateComputePipelines(device, ffi.NULL, 1, ffi.new("VkComputePipelineCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, "layout": self.layout,
            "basePipelineIndex": -1,
            "stage": {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      "stage": vk.VK_SHADER_STAGE_COMPUTE_BIT, "module": shader[0], "pName": entry_name,
                      "pSpecializationInfo": specialization}}),
            ffi.NULL, pipeline))
        raw.objects.append((lib.vkDestroyPipeline, pipeline[0]))
        self.pipeline = pipeline[0]
        pool = ffi.new("VkDescriptorPool*")
        sizes = ffi.new("VkDescriptorPoolSize*", {"type": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "descriptorCount": count})
        raw._ok(lib.vkCreateDescriptorPool(device, ffi.new("VkDescriptorPoolCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, "maxSets": 1, "poolSizeCount": 1,
            "pPoolSizes": sizes}), ffi.NULL, pool))
        raw.objects.append((lib.vkDestroyDescriptorPool, pool[0]))
        self.descriptor_set = ffi.new("VkDescriptorSet*")
        raw._ok(lib.vkAllocateDescriptorSets(device, ffi.new("VkDescriptorSetAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, "descriptorPool": pool[0],
            "descriptorSetCount": 1, "pSetLayouts": set_layout}), self.descriptor_set))
        buffers = [raw.buffer(kernels.KERNEL_BYTES, raw.native.device_memory_type)[0] for _ in range(count)]
        infos = [ffi.new("VkDescriptorBufferInfo*", {"buffer": b, "offset": 0, "range": kernels.KERNEL_BYTES})
                 for b in buffers]
        writes = ffi.new("VkWriteDescriptorSet[]", [
            {"sType": vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, "dstSet": self.descriptor_set[0], "dstBinding": i,
             "descriptorCount": 1, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "pBufferInfo": info}
            for i, info in enumerate(infos)])
        lib.vkUpdateDescriptorSets(device, count, writes, 0, ffi.NULL)

    def commands(self, cmd: Any) -> None:
        raw = self.raw
        lib, vk, ffi = raw.lib, raw.vk, raw.ffi
        if raw.bound != (cmd, self):  # a raw program binds once per command buffer, as ironaccel's streams do
            lib.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self.pipeline)
            lib.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self.layout, 0, 1,
                                        self.descriptor_set, 0, ffi.NULL)
            lib.vkCmdPushConstants(cmd, self.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, self.scalar_bytes,
                                   self.scalars)
            raw.bound = (cmd, self)
        lib.vkCmdDispatch(cmd, 1, 1, 1)


def setup(dev: Any, stream: Any, sizes: tuple[int, ...]) -> tuple[dict[str, Impl], list[Callable[[], None]]]:
    """The raw floor's implementations and the cleanup."""
    usable = [n for n in sizes if n <= dev.info.limits.max_alloc]
    raw = VulkanRaw(dev.native, stream.native, max(usable, default=ALLOC_BYTES))
    impls: dict[str, Impl] = {}
    impls["alloc_free.device"] = impls["alloc_free.pool"] = timed(raw.alloc_free)
    queue_wait = raw.lib.vkQueueWaitIdle
    impls["stream_sync"] = timed(lambda: queue_wait(raw.queue))
    empty_submit = raw.ffi.NULL
    impls["event_record_sync"] = timed(lambda: raw.submit_wait(empty_submit, 0))
    record, flush = raw.record, raw.flush
    empty = Dispatch(raw, kernels.EMPTY).commands
    four_args = Dispatch(raw, kernels.FOUR_ARGS).commands
    impls["launch.async"] = timed_then(lambda: record(empty), flush)
    impls["launch.args4"] = timed_then(lambda: record(four_args), flush)
    impls["launch.single"] = timed_each(lambda: record(empty), flush)
    impls["launch.sync"] = timed(lambda: (record(empty), flush()))
    if dev.supports("graphs"):  # where ironaccel has the graph row and the launches it replaces
        impls[f"launch.x{GRAPH_LAUNCHES}"] = timed_then(lambda: [record(empty) for _ in range(GRAPH_LAUNCHES)], flush)
        graph = raw.secondary(empty, GRAPH_LAUNCHES)
        impls[f"graph.x{GRAPH_LAUNCHES}"] = timed_then(lambda: record(graph), flush)
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
    return impls, [raw.close]
