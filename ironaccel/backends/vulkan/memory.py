"""Device memory: buffers sub-allocated from a few large VkDeviceMemory blocks.

Vulkan drivers allow only a few thousand VkDeviceMemory allocations and make each one slow, so a buffer is
a 256-byte aligned range of a block (bound whole to one VkBuffer, first-fit free list); a buffer larger than
half a block gets a block of its own. The same pool type serves host-visible staging memory.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left, insort
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import api
from . import native

if TYPE_CHECKING:
    from .device import VulkanDevice

BLOCK_SIZE = 64 << 20  # bytes per sub-allocated VkDeviceMemory block (less on small heaps)
ALIGNMENT = 256  # sub-allocation granularity: covers every offset alignment Vulkan asks of buffers


class Allocation:
    """A byte range of a block's VkBuffer."""

    __slots__ = ("block", "offset", "size")

    def __init__(self, block: Block, offset: int, size: int):
        self.block, self.offset, self.size = block, offset, size

    def host(self, start: int, nbytes: int) -> np.ndarray:
        """The mapped bytes [start, start + nbytes) of this range (host-visible blocks only)."""
        base = self.offset + start
        return self.block.host[base : base + nbytes]


class Block:
    """One VkDeviceMemory bound whole to one VkBuffer, with a first-fit free list over it."""

    def __init__(self, dev: VulkanDevice, type_index: int, size: int, mapped: bool, dedicated: bool):
        vk = native.vk
        ffi, lib = vk.ffi, vk.lib
        self.size, self.dedicated = size, dedicated
        self.memory = self.buffer = None
        self.host: np.ndarray | None = None
        info = ffi.new("VkBufferCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, "size": size, "usage": dev._buffer_usage,
            "sharingMode": vk.VK_SHARING_MODE_EXCLUSIVE,
        })
        out = ffi.new("VkBuffer*")
        native.call.vkCreateBuffer(dev._handle, info, ffi.NULL, out)
        self.buffer = out[0]
        try:
            req = ffi.new("VkMemoryRequirements*")
            lib.vkGetBufferMemoryRequirements(dev._handle, self.buffer, req)
            alloc = ffi.new("VkMemoryAllocateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, "allocationSize": req.size,
                "memoryTypeIndex": type_index,
            })
            mem = ffi.new("VkDeviceMemory*")
            native.call.vkAllocateMemory(dev._handle, alloc, ffi.NULL, mem)
            self.memory = mem[0]
            native.call.vkBindBufferMemory(dev._handle, self.buffer, self.memory, 0)
            if mapped:
                ptr = ffi.new("void**")
                native.call.vkMapMemory(dev._handle, self.memory, 0, size, 0, ptr)
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
        ffi, lib = native.vk.ffi, native.vk.lib
        self.host = None
        if self.buffer is not None:
            dev._forget_buffer(self.buffer)
            lib.vkDestroyBuffer(dev._handle, self.buffer, ffi.NULL)
        if self.memory is not None:
            lib.vkFreeMemory(dev._handle, self.memory, ffi.NULL)  # unmaps too
        self.buffer = self.memory = None


class MemoryPool:
    """Buffers of one memory type: small ones sub-allocated from shared blocks, large ones dedicated.

    ``keep_bytes`` of freed dedicated blocks are kept for reuse (staging: a large copy then finds its staging
    memory mapped and already faulted in, rather than allocating, mapping, touching and freeing 64 MiB each
    time, which made staged 64 MiB copies ~4x slower than raw Vulkan calls); one empty shared block is kept."""

    def __init__(self, dev: VulkanDevice, type_index: int, mapped: bool, block_size: int, keep_bytes: int = 0):
        self._dev, self.type_index, self.mapped, self.block_size = dev, type_index, mapped, block_size
        self.keep_bytes = keep_bytes
        self._blocks: list[Block] = []
        self._spare: list[Block] = []  # freed dedicated blocks, kept for reuse (at most keep_bytes in all)
        #: dedicated blocks of live buffers: destroyed with the pool even while a caller holds their buffer (a
        #: VkDeviceMemory left at vkDestroyDevice stays allocated on NVIDIA's driver: DEV-83)
        self._dedicated: set[Block] = set()

    def alloc(self, nbytes: int) -> Allocation:
        size = -(-nbytes // ALIGNMENT) * ALIGNMENT
        if size > self.block_size // 2:
            block = self._take_spare(size) or Block(self._dev, self.type_index, size, self.mapped, dedicated=True)
            block.used = size
            self._dedicated.add(block)
            return Allocation(block, 0, size)
        for block in self._blocks:
            offset = block.take(size)
            if offset is not None:
                return Allocation(block, offset, size)
        block = Block(self._dev, self.type_index, self.block_size, self.mapped, dedicated=False)
        self._blocks.append(block)
        return Allocation(block, block.take(size), size)

    def _take_spare(self, size: int) -> Block | None:
        """The smallest kept block that holds ``size`` bytes without wasting more than half of itself."""
        fits = [b for b in self._spare if size <= b.size <= 2 * size]
        if not fits:
            return None
        block = min(fits, key=lambda b: b.size)
        self._spare.remove(block)
        return block

    def free(self, a: Allocation) -> None:
        block = a.block
        if block.dedicated:
            block.used = 0
            self._dedicated.discard(block)
            if block.size + sum(b.size for b in self._spare) <= self.keep_bytes:
                self._spare.append(block)
            else:
                block.destroy(self._dev)
            return
        block.give_back(a.offset, a.size)
        if block.used == 0 and sum(b.used == 0 for b in self._blocks) > 1:
            self._blocks.remove(block)  # keep one empty block for the next allocation, release the rest
            block.destroy(self._dev)

    def release_empty(self) -> None:
        for block in [b for b in self._blocks if b.used == 0] + self._spare:
            if block in self._blocks:
                self._blocks.remove(block)
            block.destroy(self._dev)
        self._spare.clear()

    def destroy(self) -> None:
        for block in self._blocks + self._spare + list(self._dedicated):
            block.destroy(self._dev)
        self._blocks.clear()
        self._spare.clear()
        self._dedicated.clear()


class VulkanBuffer(api.Buffer):
    """A range of a VkBuffer: ``handle`` is the VkBuffer, ``offset`` where this buffer starts in it."""

    def __init__(self, device: VulkanDevice, nbytes: int, allocation: Allocation):
        super().__init__(device, nbytes)
        self._allocation = allocation
        #: the range a descriptor binds (VkBuffer, offset, bytes): a launch's descriptor set is looked up by it
        self._binds = (allocation.block.buffer, allocation.offset, nbytes)
        # dropped unfreed: its range is released at the device's next alloc, compile or synchronize
        self._dropped = weakref.finalize(self, device._dropped.append, partial(device._free_later, allocation))
        self._dropped.atexit = False  # at exit the device's close frees every block

    @property
    def offset(self) -> int:
        self._device._check_open("VulkanBuffer.offset")
        return self._backing("VulkanBuffer.offset")._allocation.offset

    def _native_handle(self) -> Any:
        self._device._check_open("Buffer.handle")  # the VkBuffer died with the device
        return self._allocation.block.buffer

    def _release(self) -> None:
        self._dropped.detach()
        self._device._free_later(self._allocation)
