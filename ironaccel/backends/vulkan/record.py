"""Recording a launch and a graph replay into a command buffer: the commands of one launch (barrier, the binds
that changed, dispatch) or replay (barrier, vkCmdExecuteCommands) in one call of the compiled extension where
it is built (``ironaccel/_fast_c/vulkan.inc``), else one cffi call per vkCmd*. Through cffi each call costs a
few hundred ns and gives the GIL up and back (issue 30: a launch recorded 2.1x the raw floor's time on
lavapipe, 1.8x on the H200, with no submission in the burst), where the driver records a command in tens.

Both ways take the same arguments, handles as ``Recording.handle`` gives them (once, where the handle is made or
first bound: the compiled way takes addresses, cffi the cdata itself), None for what is not recorded.
"""

from __future__ import annotations

from typing import Any, Callable

from ... import native as compiled
from . import native


class Recording:
    """``dispatch(cmd, barrier, pipeline, layout, sets, push, x, y, z)``: into ``cmd`` the memory barrier at
    ``barrier``, vkCmdBindPipeline, vkCmdBindDescriptorSets of the one set ``sets`` (a VkDescriptorSet[1]),
    vkCmdPushConstants of the bytes ``push`` (each when not None) and vkCmdDispatch;
    ``execute(cmd, barrier, cmds)``: the barrier when not None, vkCmdExecuteCommands of ``cmds`` (a
    VkCommandBuffer[1]); ``handle(cdata)``: what they take for a handle or a cdata array."""

    __slots__ = ("dispatch", "execute", "handle")

    def __init__(self) -> None:
        vk = native.vk
        ffi, lib = vk.ffi, vk.lib
        fast = compiled.load()
        if fast is not None:
            def address(cdata: Any) -> int:
                return int(ffi.cast("uintptr_t", cdata))

            fast.vk_configure(*(address(getattr(lib, name)) for name in (
                "vkCmdPipelineBarrier", "vkCmdBindPipeline", "vkCmdBindDescriptorSets", "vkCmdPushConstants",
                "vkCmdDispatch", "vkCmdExecuteCommands")))
            self.dispatch: Callable[..., None] = fast.vk_dispatch
            self.execute: Callable[[Any, Any, Any], None] = fast.vk_execute
            self.handle: Callable[[Any], Any] = address
            return
        compute, stage, null = vk.VK_PIPELINE_BIND_POINT_COMPUTE, vk.VK_SHADER_STAGE_COMPUTE_BIT, ffi.NULL
        all_commands = vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT
        barrier_, bind, bind_sets, push_, dispatch_, execute_ = (
            lib.vkCmdPipelineBarrier, lib.vkCmdBindPipeline, lib.vkCmdBindDescriptorSets, lib.vkCmdPushConstants,
            lib.vkCmdDispatch, lib.vkCmdExecuteCommands)

        def dispatch(cmd: Any, barrier: Any, pipeline: Any, layout: Any, sets: Any, push: bytes | None,
                     x: int, y: int, z: int) -> None:
            if barrier is not None:
                barrier_(cmd, all_commands, all_commands, 0, 1, barrier, 0, null, 0, null)
            if pipeline is not None:
                bind(cmd, compute, pipeline)
            if sets is not None:
                bind_sets(cmd, compute, layout, 0, 1, sets, 0, null)
            if push is not None:
                push_(cmd, layout, stage, 0, len(push), push)
            dispatch_(cmd, x, y, z)

        def execute(cmd: Any, barrier: Any, cmds: Any) -> None:
            if barrier is not None:
                barrier_(cmd, all_commands, all_commands, 0, 1, barrier, 0, null, 0, null)
            execute_(cmd, 1, cmds)

        self.dispatch, self.execute, self.handle = dispatch, execute, lambda cdata: cdata
