"""Old vs new WebGPU backend code in one process, each against the raw wgpu-py floor (issue 30, item 4): a
probe, not a bench row. Two bench runs of two trees differ by more than a change's effect on a loaded
machine; here two devices on one adapter, one opened through the old tree's webgpu package and one through
this tree's, are timed in the same rounds, each beside its raw floor.

    mkdir -p /tmp/abbase && git archive BASE_COMMIT ironaccel/backends/webgpu | tar -x -C /tmp/abbase
    PYTHONPATH=$PWD python3 benchmarks/probe_webgpu_ab.py --target webgpu/lavapipe --base /tmp/abbase

``--base`` holds the old tree's ``ironaccel/backends/webgpu``; it is loaded as the package
``ironaccel.backends.webgpu_base`` (its imports are relative, so it runs on this tree's api). Rows are the
bench's own: ironaccel's side from ``ours.api_impls`` and the floor from ``floor_webgpu.setup``, built on
each device, so the very calls the bench times. Each round times a burst of old-ours, old-raw, new-ours and
new-raw for every row, the order reversed every other round. Printed per row: the medians (us per call), each
side's ratio to its own raw floor (median of per-round ratios, with their interquartile range as the noise),
and new/old (the median of per-round ratios of the two ratios, and how many rounds new was faster).

``--clock cpu`` times with the calling thread's CPU time (``time.thread_time_ns`` in place of the bench's
``perf_counter_ns``): a readback's wait for the GPU drops out, and with it most of a loaded machine's noise,
leaving the Python and driver work each side does on the calling thread.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import numpy as np

SIZES = (256, 4096, 65536)
ROWS = tuple(f"htod.pageable.{n}.call" for n in SIZES) + tuple(f"dtoh.pageable.{n}" for n in SIZES)


def load_base(folder: str) -> object:
    """The old tree's webgpu package, as ``ironaccel.backends.webgpu_base``."""
    path = os.path.join(os.path.abspath(folder), "ironaccel", "backends", "webgpu")
    spec = importlib.util.spec_from_file_location("ironaccel.backends.webgpu_base", os.path.join(path, "__init__.py"),
                                                  submodule_search_locations=[path])
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="webgpu/lavapipe")
    parser.add_argument("--base", required=True, help="the folder holding the old tree's ironaccel/backends/webgpu")
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--burst", type=int, default=100, help="calls per burst (dtoh rows: a quarter as many)")
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    opts = parser.parse_args()
    if opts.clock == "cpu":
        time.perf_counter_ns = time.thread_time_ns  # read by the bench's timers at each call
    from ironaccel.cts.bench import floor_webgpu, ours
    from ironaccel.cts.bench.runner import open_target

    new_dev, _ = open_target(opts.target)
    base = load_base(opts.base)
    old_dev = base.backend.WebGPUBackend()._open_device(new_dev.info.index)  # type: ignore[attr-defined]
    impls = {}
    for side, dev in (("old", old_dev), ("new", new_dev)):
        stream = dev.create_stream()
        impls[side, "ours"] = ours.api_impls(dev, stream, {}, SIZES, None)[0]
        impls[side, "raw"] = floor_webgpu.setup(dev, stream, SIZES)[0]
    rows = opts.rows.split(",")
    order = [("old", "ours"), ("old", "raw"), ("new", "ours"), ("new", "raw")]
    times: dict[tuple[str, str, str], list[float]] = {(r, *k): [] for r in rows for k in order}
    for row in rows:  # warm up
        for k in order:
            impls[k][row](10)
    for i in range(opts.rounds):
        for row in rows:
            burst = opts.burst if row.startswith("htod") else max(opts.burst // 4, 1)
            for k in (order if i % 2 == 0 else order[::-1]):
                times[(row, *k)].append(impls[k][row](burst) / burst)
    print(f"{opts.target}, {opts.clock} clock: {opts.rounds} rounds; us per call (median); "
          "ratio to raw: median [q1-q3] of per-round ratios")
    for row in rows:
        t = {k: np.array(times[(row, *k)]) for k in order}
        ratio = {s: t[s, "ours"] / t[s, "raw"] for s in ("old", "new")}
        cols = []
        for s in ("old", "new"):
            q1, med, q3 = np.quantile(ratio[s], [0.25, 0.5, 0.75])
            cols.append(f"{s} {np.median(t[s, 'ours']) / 1e3:7.2f} / raw {np.median(t[s, 'raw']) / 1e3:7.2f}"
                        f" = {med:.3f} [{q1:.3f}-{q3:.3f}]")
        change = ratio["new"] / ratio["old"]
        print(f"{row:24s} {' | '.join(cols)} | new/old {np.median(change):.3f}, new faster in "
              f"{int((change < 1).sum())}/{len(change)}")
    old_dev.close()
    new_dev.close()


if __name__ == "__main__":
    main()
