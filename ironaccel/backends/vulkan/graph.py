"""Graphs: stream work recorded once into a secondary command buffer, replayed by executing it.

While a stream captures, the commands it would record into its own batch go into the graph's recording
instead: a secondary command buffer begun with SIMULTANEOUS_USE (a replay may be pending on several
streams, or twice in one batch), with the same full memory barrier between commands that a stream's batch
has. The host-side shortcuts of an idle stream (copies and fills through mapped memory) are off while it
captures, so every captured operation is a recorded command. What the commands refer to lives as long as
the graph: descriptor sets (from descriptor pools of the graph's own) and the staging bytes of a fill's
unaligned edges.

A replay is one command of the replaying stream's batch: ``vkCmdExecuteCommands`` after the barrier every
command gets, with the next command after another, so the replay is ordered after the stream's earlier work
and before its later work on any driver; what the batch had bound for launches is undefined after it, so
the next launch binds everything again. ``close()`` hands the graph's resources to the device, which
releases them once every stream that replayed the graph has completed its last replay (a replay still
running keeps working); a graph collected unclosed is handed over the same way, at the device's next
capture, allocation, compile or synchronize; the device releases the graphs still open when it closes.
"""

from __future__ import annotations

import weakref
from functools import partial
from typing import TYPE_CHECKING, Any

from ... import api
from . import native
from .module import Binds, DescriptorPool
from .stream import Batch

if TYPE_CHECKING:
    from .device import VulkanDevice
    from .stream import VulkanStream


class GraphResources:
    """What a graph's recorded commands use: the secondary command buffer, its descriptor pools (the last
    one in use), its staging. Released once, by the device."""

    __slots__ = ("cmds", "cmds_handle", "recording", "descriptor_pools")

    def __init__(self, cmds: Any, cmds_handle: Any, recording: Batch):
        self.cmds = cmds  # VkCommandBuffer[1], as vkCmdExecuteCommands takes it
        self.cmds_handle = cmds_handle  # the same, as the device's Recording takes it
        self.recording = recording
        self.descriptor_pools: list[DescriptorPool] = []

    def destroy(self, dev: VulkanDevice) -> None:
        for pool in self.descriptor_pools:
            pool.destroy(dev)
        for allocation in self.recording.staging:
            dev._staging.free(allocation)
        native.vk.lib.vkFreeCommandBuffers(dev._handle, dev._graph_command_pool(), 1, self.cmds)
        self.descriptor_pools, self.recording.staging = [], []
        dev._graphs.discard(self)


class VulkanGraph(api.Graph):
    """A secondary command buffer of captured work; see the module docstring."""

    def __init__(self, device: VulkanDevice):
        super().__init__(device)
        vk = native.vk
        ffi = vk.ffi
        pool = device._graph_command_pool()
        info = ffi.new("VkCommandBufferAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": pool,
            "level": vk.VK_COMMAND_BUFFER_LEVEL_SECONDARY, "commandBufferCount": 1,
        })
        cmds = ffi.new("VkCommandBuffer[1]")
        native.call.vkAllocateCommandBuffers(device._handle, info, cmds)
        handle = device._record.handle
        self._resources = GraphResources(cmds, handle(cmds), Batch(cmds[0], handle(cmds[0])))
        device._graphs.add(self._resources)
        try:
            native.call.vkBeginCommandBuffer(cmds[0], device._graph_begin_info)
        except BaseException:
            self._resources.destroy(device)
            raise
        self._replays: dict[VulkanStream, int] = {}  # stream -> the timeline value of its last replay
        self._dropped = weakref.finalize(self, device._dropped.append,
                                         partial(release_after_replays, device, self._resources, self._replays))
        self._dropped.atexit = False  # at exit the device's close releases it

    # -- capture (called by VulkanStream, which records into ``_resources.recording``) ----------------------

    def _descriptor_set(self, set_layout: Any, ranges: list[Binds]) -> Any:
        """A set of the graph's own binding ``ranges``: it lives as long as the recorded commands."""
        dev: VulkanDevice = self._device  # type: ignore[assignment]
        pools = self._resources.descriptor_pools
        made = pools[-1].allocate(dev, set_layout, ranges) if pools else None
        if made is None:  # none yet, or full: a full pool stays, its sets are recorded
            pools.append(DescriptorPool(dev))
            made = pools[-1].allocate(dev, set_layout, ranges)
        return made

    def _end(self, keep: bool) -> None:
        dev: VulkanDevice = self._device  # type: ignore[assignment]
        with dev._lock:
            try:
                native.call.vkEndCommandBuffer(self._resources.recording.cmd)
            except BaseException:
                self._dropped.detach()
                self._resources.destroy(dev)
                raise
            if not keep:  # never submitted: nothing to wait for
                self._dropped.detach()
                self._resources.destroy(dev)

    # -- the private API --------------------------------------------------------------------------------

    def _launch(self, stream: api.Stream) -> None:
        s: VulkanStream = stream  # type: ignore[assignment]
        dev: VulkanDevice = self._device  # type: ignore[assignment]
        with dev._lock:
            batch = s._open()
            dev._record.execute(batch.handle, s._barrier_handle if batch.commands else None,
                                self._resources.cmds_handle)
            batch.commands += 1
            batch.pipeline = None  # what the batch had bound is undefined after a secondary command buffer
            s._recorded()
            self._replays[s] = s._pending_value()

    def _release(self) -> None:
        self._dropped.detach()
        release_after_replays(self._device, self._resources, self._replays)  # type: ignore[arg-type]


def release_after_replays(dev: VulkanDevice, resources: GraphResources, replays: dict[VulkanStream, int]) -> None:
    """Destroy a graph's resources once every stream that replayed it has completed its last replay."""
    with dev._lock:
        points = [(s, v) for s, v in replays.items() if v > s._completed]
        replays.clear()
        dev._release_after(points, lambda: resources.destroy(dev))
