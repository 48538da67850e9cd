"""Old vs new code of the Vulkan launch path in one process, on one device, alternating (issue 30): a probe,
not a bench row. Two bench runs of two trees differ by more than a change's effect on a loaded machine;
here the same stream, buffers and kernel serve both, and only the code differs from one burst to the next.

    mkdir -p .abbase && echo /.abbase/ >> .git/info/exclude
    git archive BASE_COMMIT ironaccel | tar -x -C .abbase && mv .abbase/ironaccel .abbase/ironaccel_base
    PYTHONPATH=$PWD python3 benchmarks/probe_vulkan_ab.py --backend vulkan --base .abbase

``--base`` holds an older tree's package renamed ``ironaccel_base`` (its imports are relative). Each function
named by ``--swap`` (``module:Class.attr`` under the package) is taken from it, its code rebound to this
tree's module globals, and put in place of this tree's for every "old" burst. Rows, each the median over
rounds of the fastest of ``--reps`` bursts (old and new alternating, the order flipped every round):

* ``launch``: ``stream.launch`` of the empty kernel, back to back, as the bench's launch.async times it
  (its submissions within the burst included; a synchronize after each burst, untimed);
* ``launch-nosub``: the same, the stream never submitting within the burst (BATCH_COMMANDS and SUBMIT_GAP_S
  huge, the flusher off): the Python and the recorded commands alone;
* ``graph``: ``graph.launch(stream)`` of 100 captured launches, as the bench's graph row times it;
* ``graph-nosub``: the same, the stream never submitting within the burst;
* ``raw``: vkCmdPipelineBarrier + vkCmdDispatch into the stream's open command buffer (the raw floor's
  recording, without its submission), the same code for old and new: a control;
* ``graph-raw``: vkCmdPipelineBarrier + vkCmdExecuteCommands of the graph's secondary command buffer into
  the stream's open one (the raw floor's graph row, without its submission): a control too.

Printed per row: the old and new medians (ns per call), the median of the per-round ratios new/old and how
many rounds new was faster; and each median over its floor's (launch rows: raw; graph rows: graph-raw).
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
import types

ROWS = ("launch", "launch-nosub", "raw", "graph", "graph-nosub", "graph-raw")
FLOOR = {"launch": "raw", "launch-nosub": "raw", "raw": "raw", "graph": "graph-raw", "graph-nosub": "graph-raw", "graph-raw": "graph-raw"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="vulkan", help="vulkan (the GPU) or vulkan/lavapipe, vulkan/swiftshader")
    parser.add_argument("--base", required=True, help="the folder holding the old tree's package as ironaccel_base")
    parser.add_argument("--swap", default="backends.vulkan.stream:VulkanStream._launch_prepared",
                        help="comma-separated module:Class.attr functions to swap")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--burst", type=int, default=200, help="launches per burst (graph: a tenth as many replays)")
    opts = parser.parse_args()
    sys.path.insert(0, os.path.abspath(opts.base))
    from ironaccel.backends.vulkan import native
    from ironaccel.backends.vulkan import stream as vs
    from ironaccel.cts.bench import kernels
    from ironaccel.cts.bench.runner import open_target

    swaps = []  # (owner class, attribute, old function or None, new function or None)
    for spec in opts.swap.split(","):
        mod, _, qual = spec.partition(":")
        cls, attr = qual.split(".")
        new_mod = importlib.import_module("ironaccel." + mod)
        old = getattr(importlib.import_module("ironaccel_base." + mod), cls).__dict__.get(attr)
        if old is not None:
            old = types.FunctionType(old.__code__, new_mod.__dict__, old.__name__, old.__defaults__, old.__closure__)
        owner = getattr(new_mod, cls)
        swaps.append((owner, attr, old, owner.__dict__.get(attr)))

    def use(which: str) -> None:
        for owner, attr, old, new in swaps:
            f = old if which == "old" else new
            if f is not None:
                setattr(owner, attr, f)
            elif attr in owner.__dict__:
                delattr(owner, attr)

    dev, name = open_target(opts.backend)
    stream = dev.create_stream()
    launches, _ = kernels.launches(dev, "spirv", lambda n: kernels.source(n, "spirv"))
    kernel, args = launches[kernels.EMPTY]
    launch, sync = stream.launch, stream.synchronize
    with stream.capture() as graph:
        for _ in range(100):
            launch(kernel, 1, 1, args)
    lib = native.vk.lib
    barrier, dispatch, between = lib.vkCmdPipelineBarrier, lib.vkCmdDispatch, dev._between_commands
    execute = lib.vkCmdExecuteCommands
    clock, burst = time.perf_counter_ns, opts.burst

    def run(row: str) -> float:
        quiet = row in ("launch-nosub", "raw", "graph-nosub", "graph-raw")
        if quiet:
            saved = vs.BATCH_COMMANDS, vs.SUBMIT_GAP_S
            vs.BATCH_COMMANDS, vs.SUBMIT_GAP_S = 10**9, 1e9
            dev._flusher.arm = lambda s: None
            stream._next_check = 1e18  # no look at the timeline, so no submission
            launch(kernel, 1, 1, args)  # an open batch, untimed
        calls = burst // 10 if row.startswith("graph") else burst
        start = clock()
        if row == "raw":
            cmd = stream._batch.cmd
            for _ in range(calls):
                barrier(cmd, *between)
                dispatch(cmd, 1, 1, 1)
        elif row == "graph-raw":
            cmd, cmds = stream._batch.cmd, graph._resources.cmds
            for _ in range(calls):
                barrier(cmd, *between)
                execute(cmd, 1, cmds)
        elif row.startswith("graph"):
            for _ in range(calls):
                graph.launch(stream)
        else:
            for _ in range(calls):
                launch(kernel, 1, 1, args)
        elapsed = (clock() - start) / calls
        if quiet:
            vs.BATCH_COMMANDS, vs.SUBMIT_GAP_S = saved
            stream._next_check = 0.0
            del dev._flusher.arm
        sync()
        return elapsed

    for which in ("old", "new"):  # warm both up
        use(which)
        for row in ROWS:
            run(row)
    times = {(w, row): [] for w in ("old", "new") for row in ROWS}
    for r in range(opts.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for row in ROWS:
            best: dict[str, list[float]] = {w: [] for w in order}
            for _ in range(opts.reps):
                for w in order:
                    use(w)
                    best[w].append(run(row))
            for w in order:
                times[(w, row)].append(min(best[w]))
    use("new")
    print(f"{name}: {opts.rounds} rounds, {opts.reps} bursts of {burst} (graph: {burst // 10}) each; swapped {opts.swap}")
    for row in ROWS:
        old, new = times[("old", row)], times[("new", row)]
        ratio = statistics.median(b / a for a, b in zip(old, new))
        faster = sum(b < a for a, b in zip(old, new))
        mo, mn = statistics.median(old), statistics.median(new)
        fo, fn = (statistics.median(times[(w, FLOOR[row])]) for w in ("old", "new"))
        print(f"{row:13s} old {mo:8.0f} ns ({mo / fo:5.2f}x floor)  new {mn:8.0f} ns ({mn / fn:5.2f}x floor)"
              f"  new/old {ratio:.3f}, new faster in {faster}/{len(old)} rounds")
    graph.close()
    dev.close()


if __name__ == "__main__":
    main()
