"""What a graph replay's submission costs the host, as a secondary executed into a batch vs as a pre-recorded
primary command buffer appended to the submission (issue 30): a probe, not a bench row.

    PYTHONPATH=$PWD python3 benchmarks/probe_vulkan_primary.py [--backend vulkan]

The graph is 100 empty dispatches with a full barrier between them, recorded once (SIMULTANEOUS_USE) twice:
as a secondary command buffer and as a primary one. Rows, per vkQueueSubmit (no wait; the queue drained,
untimed, after each), median of BATCHES submissions:

* ``secondary xk``: one primary executing the secondary k times (barriers between): what a batch of k
  replays submits today (the primary re-recorded untimed before each submission);
* ``primary xk``: one VkSubmitInfo holding the graph's primary k times: what k replays appended to a
  submission would submit, nothing recorded per replay.
"""

from __future__ import annotations

import argparse
import statistics
import time

BATCHES = 21


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="vulkan", help="vulkan (the GPU) or vulkan/lavapipe, vulkan/swiftshader")
    target = parser.parse_args().backend
    from ironaccel.cts.bench import floor_vulkan, kernels
    from ironaccel.cts.bench.runner import open_target

    dev, name = open_target(target)
    stream = dev.create_stream()
    raw = floor_vulkan.VulkanRaw(dev.native, stream.native, 1024)
    lib, ffi, vk = raw.lib, raw.ffi, raw.vk
    empty = floor_vulkan.Dispatch(raw, kernels.EMPTY).commands
    replay_secondary = raw.secondary(empty, 100)

    def allocate(level: int) -> object:
        cmds = ffi.new("VkCommandBuffer[1]")
        raw._ok(lib.vkAllocateCommandBuffers(raw.handle, ffi.new("VkCommandBufferAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": raw.pool,
            "level": level, "commandBufferCount": 1}), cmds))
        return cmds

    reusable = ffi.new("VkCommandBufferBeginInfo*", {"sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                                     "flags": vk.VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT})
    graph = allocate(vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY)
    raw._ok(lib.vkBeginCommandBuffer(graph[0], reusable))
    raw.bound = None
    raw.barrier(graph[0], raw.between_commands, vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT)
    for i in range(100):
        if i:
            raw.barrier(graph[0], raw.between_commands, vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT)
        empty(graph[0])
    raw.barrier(graph[0], raw.to_host, vk.VK_PIPELINE_STAGE_HOST_BIT)
    raw._ok(lib.vkEndCommandBuffer(graph[0]))
    outer = allocate(vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY)

    def secondary_of(k: int) -> object:
        raw._ok(lib.vkResetCommandBuffer(outer[0], 0))
        raw._ok(lib.vkBeginCommandBuffer(outer[0], reusable))
        for i in range(k):
            if i:
                raw.barrier(outer[0], raw.between_commands, vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT)
            replay_secondary(outer[0])
        raw._ok(lib.vkEndCommandBuffer(outer[0]))
        return ffi.new("VkSubmitInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, "commandBufferCount": 1,
                                         "pCommandBuffers": outer})

    def primary_of(k: int) -> object:
        cmds = ffi.new("VkCommandBuffer[]", [graph[0]] * k)
        return ffi.new("VkSubmitInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, "commandBufferCount": k,
                                         "pCommandBuffers": cmds}), cmds

    rows = []
    clock = time.perf_counter_ns
    for k in (1, 8, 24, 64):
        for label, make in (("secondary", lambda k=k: (secondary_of(k), None)), ("primary", lambda k=k: primary_of(k))):
            samples = []
            for _ in range(BATCHES):
                submit, keep = make()
                start = clock()
                raw._ok(lib.vkQueueSubmit(raw.queue, 1, submit, ffi.NULL))
                samples.append(clock() - start)
                lib.vkQueueWaitIdle(raw.queue)
            rows.append((f"{label} x{k}", statistics.median(samples)))
    print(f"probe_vulkan_primary on {name} ({dev.info.name}); ns per vkQueueSubmit, median of {BATCHES}")
    for label, ns in rows:
        print(f"{ns:10.0f}  {label}  ({ns / int(label.split('x')[1]):.0f} per replay)")
    raw.close()
    dev.close()


if __name__ == "__main__":
    main()
