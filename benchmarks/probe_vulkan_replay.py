"""Where the time of the Vulkan graph replay and back-to-back launch rows goes (issue 30): a probe, not a bench row.

    PYTHONPATH=$PWD python3 benchmarks/probe_vulkan_replay.py [--backend vulkan] > $OUT/probe-vulkan.txt

Each line is the median over 21 batches of the time per call, a batch being BURST calls timed back to back and
then a synchronize, untimed (the bench's ``timed_then``). Rows, from the public call down:

* the public call (``graph.launch(stream)``, ``stream.launch``), as the bench times it: with the submissions
  the stream makes within the burst (the first call finds the stream idle and submits at once; later ones
  when the device has caught up or the batch is full; the device's flusher thread SUBMIT_GAP_S after the
  last submission);
* the same with the flusher off (its arm a no-op): the stream's own submissions only, so the difference is
  what the flusher's thread (its wake-ups, the device lock it takes, its submissions) costs the row;
* the same call with the stream never submitting within the burst (SUBMIT_GAP_S and BATCH_COMMANDS huge, the
  flusher off): the Python and the recorded commands alone, what the raw floor's row measures plus the API;
* the raw floor's recording (``floor_vulkan``): barrier + vkCmdExecuteCommands of ironaccel's own graph's
  secondary command buffer into an open primary, never submitted in the burst (the bench's raw row), and the
  same while one submission that executes the secondary is still pending on the device (as in ironaccel's
  row, whose first replay is submitted at once): a driver that copies or patches a SIMULTANEOUS_USE
  secondary that is pending shows it here;
* vkQueueSubmit (no wait) of a primary holding k executes of the secondary, per submission: what the
  stream's submissions within a burst cost the host.

The difference between the public call's two lines is what the submissions cost the row; between the second
and the raw floor's, the Python. Only a GPU tells which dominates: on lavapipe the device is the CPU, so
its execution of submitted work competes with the timed loop.
"""

from __future__ import annotations

import argparse
import statistics
import time

BATCHES = 21
BURST = 200  # calls per batch


def per_call(op, after) -> float:
    clock = time.perf_counter_ns
    samples = []
    for _ in range(BATCHES):
        start = clock()
        for _ in range(BURST):
            op()
        samples.append((clock() - start) / BURST)
        after()
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="vulkan", help="vulkan (the GPU) or vulkan/lavapipe, vulkan/swiftshader")
    target = parser.parse_args().backend
    from ironaccel.backends.vulkan import stream as vk_stream
    from ironaccel.cts.bench import floor_vulkan, kernels
    from ironaccel.cts.bench.cases import GRAPH_LAUNCHES
    from ironaccel.cts.bench.runner import open_target

    dev, name = open_target(target)
    stream = dev.create_stream()
    launches, cleanup = kernels.launches(dev, "spirv", lambda n: kernels.source(n, "spirv"))
    kernel, args = launches[kernels.EMPTY]
    launch, sync = stream.launch, stream.synchronize

    def one() -> None:
        launch(kernel, 1, 1, args)

    with stream.capture() as graph:
        for _ in range(GRAPH_LAUNCHES):
            one()
    raw = floor_vulkan.VulkanRaw(dev.native, stream.native, 1024)
    record, flush, lib, ffi, vk = raw.record, raw.flush, raw.lib, raw.ffi, raw.vk
    cmds = graph._resources.cmds  # ironaccel's secondary command buffer
    execute = lib.vkCmdExecuteCommands

    def replay_raw(cmd) -> None:
        execute(cmd, 1, cmds)
        raw.bound = None

    empty = floor_vulkan.Dispatch(raw, kernels.EMPTY).commands
    rows: list[tuple[str, float]] = [("harness: lambda: None", per_call(lambda: None, lambda: None))]
    replay = graph.launch
    rows.append(("graph: graph.launch(stream), as the bench", per_call(lambda: replay(stream), sync)))
    rows.append(("launch: stream.launch, as the bench", per_call(one, sync)))

    dev._flusher.arm = lambda s: None
    rows.append(("graph: graph.launch(stream), the flusher off", per_call(lambda: replay(stream), sync)))
    rows.append(("launch: stream.launch, the flusher off", per_call(one, sync)))
    saved = (vk_stream.SUBMIT_GAP_S, vk_stream.BATCH_COMMANDS)
    vk_stream.SUBMIT_GAP_S, vk_stream.BATCH_COMMANDS = 1e9, 1 << 30

    def quiet_sync() -> None:
        sync()
        stream._next_check = float("inf")

    quiet_sync()
    rows.append(("graph: graph.launch(stream), no submission in the burst",
                 per_call(lambda: replay(stream), quiet_sync)))
    rows.append(("launch: stream.launch, no submission in the burst", per_call(one, quiet_sync)))
    vk_stream.SUBMIT_GAP_S, vk_stream.BATCH_COMMANDS = saved
    del dev._flusher.arm
    sync()

    rows.append(("graph raw: barrier + vkCmdExecuteCommands (the bench's raw row)",
                 per_call(lambda: record(replay_raw), flush)))
    rows.append(("launch raw: barrier + dispatch (the bench's raw row)", per_call(lambda: record(empty), flush)))

    # the same recording while one submission that executes the secondary is pending on the device
    second = ffi.new("VkCommandBuffer*")
    raw._ok(lib.vkAllocateCommandBuffers(raw.handle, ffi.new("VkCommandBufferAllocateInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": raw.pool,
        "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, "commandBufferCount": 1}), second))
    reusable = ffi.new("VkCommandBufferBeginInfo*", {"sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                                     "flags": vk.VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT})

    def primary_of(k: int) -> None:
        raw._ok(lib.vkResetCommandBuffer(second[0], 0))
        raw._ok(lib.vkBeginCommandBuffer(second[0], reusable))
        for i in range(k):
            if i:
                raw.barrier(second[0], raw.between_commands, vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT)
            execute(second[0], 1, cmds)
        raw._ok(lib.vkEndCommandBuffer(second[0]))

    submit_second = ffi.new("VkSubmitInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO,
                                              "commandBufferCount": 1, "pCommandBuffers": second})
    primary_of(1)

    def submit_then_flush() -> None:
        flush()
        lib.vkQueueWaitIdle(raw.queue)
        raw._ok(lib.vkQueueSubmit(raw.queue, 1, submit_second, ffi.NULL))  # pending through the next batch

    submit_then_flush()
    rows.append(("graph raw: the same while a submission executing the secondary is pending",
                 per_call(lambda: record(replay_raw), submit_then_flush)))
    lib.vkQueueWaitIdle(raw.queue)
    for k in (1, 24, 64):
        primary_of(k)
        clock = time.perf_counter_ns
        samples = []
        for _ in range(BATCHES):
            start = clock()
            raw._ok(lib.vkQueueSubmit(raw.queue, 1, submit_second, ffi.NULL))
            samples.append(clock() - start)
            lib.vkQueueWaitIdle(raw.queue)
        rows.append((f"vkQueueSubmit of a primary executing the secondary {k}x (per submission, no wait)",
                     statistics.median(samples)))
    sync()
    print(f"probe_vulkan_replay on {name} ({dev.info.name}); ns per call, median of {BATCHES} batches of {BURST} "
          f"(the graph: {GRAPH_LAUNCHES} empty launches)")
    for label, ns in rows:
        print(f"{ns:10.0f}  {label}")
    raw.close()
    graph.close()
    for step in reversed(cleanup):
        step()
    dev.close()


if __name__ == "__main__":
    main()
