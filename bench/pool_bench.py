"""Warm 1 KiB alloc+free: MemPool against the device's own alloc+free, measured side by side.

    python bench/pool_bench.py                      # the in-memory test device only
    python bench/pool_bench.py cuda/nvidia webgpu   # plus targets (backend/driver) or plain backends

Each sample times a batch of cycles of one kind; pool and raw samples alternate so that drift on a busy
machine hits both alike, and the figure is the median over many samples. A benchmark, not a test: it
asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import ironaccel as ia  # noqa: E402
from ironaccel.pool import MemPool  # noqa: E402

NBYTES = 1024


def pool_cycles(pool: MemPool, n: int) -> float:
    alloc = pool.alloc
    start = time.perf_counter_ns()
    for _ in range(n):
        alloc(NBYTES).free()
    return (time.perf_counter_ns() - start) / n


def raw_cycles(device: ia.Device, n: int) -> float:
    alloc = device.alloc
    start = time.perf_counter_ns()
    for _ in range(n):
        alloc(NBYTES).free()
    return (time.perf_counter_ns() - start) / n


def loop_overhead(n: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(n):
        pass
    return (time.perf_counter_ns() - start) / n


def measure(device: ia.Device, samples: int, batch: int) -> dict[str, float]:
    """Median ns per cycle of each kind, over ``samples`` alternating batches of ``batch`` cycles."""
    pool = MemPool(device, device.create_stream())
    pool.alloc(NBYTES).free()  # warm: the block now waits in this thread's front cache
    raw_batch = max(batch // 10, 10)  # the driver path is slower; keep the samples similar in length
    times: dict[str, list[float]] = {"pool": [], "raw": [], "loop": []}
    for _ in range(samples):
        times["pool"].append(pool_cycles(pool, batch))
        times["raw"].append(raw_cycles(device, raw_batch))
        times["loop"].append(loop_overhead(batch))
    device.synchronize()
    stats = pool.stats()
    pool.close()
    assert stats.misses == 1, stats  # every timed pool cycle was a hit
    return {kind: statistics.median(values) for kind, values in times.items()}


def open_target(name: str) -> ia.Device:
    """``backend/driver`` selects the driver as the conformance runs do; a plain backend takes the default."""
    if "/" in name:
        from ironaccel.targets import get

        os.environ.update(get(name).environment())
        name = name.split("/")[0]
    return ia.open_device(name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", help="backend or backend/driver, e.g. cuda/nvidia, webgpu/lavapipe")
    parser.add_argument("--samples", type=int, default=101)
    parser.add_argument("--batch", type=int, default=2000, help="pool cycles per sample")
    args = parser.parse_args(argv)

    from memdevice import MemDevice

    print(f"Python {sys.version.split()[0]}, warm {NBYTES} B alloc+free, median of {args.samples} samples "
          "(ns per cycle; loop = empty-loop overhead included in both)")
    print(f"{'device':38} {'MemPool':>9} {'raw':>9} {'speed-up':>9} {'loop':>6}")
    devices = [("memdevice (in-memory)", MemDevice)] + [(t, lambda t=t: open_target(t)) for t in args.targets]
    for label, opener in devices:
        try:
            device = opener()
        except ia.IronAccelError as exc:
            print(f"{label:38} not available: {exc}")
            continue
        try:
            r = measure(device, args.samples, args.batch)
        finally:
            device.close()
        name = f"{label} [{device.info.name}]" if label != "memdevice (in-memory)" else label
        print(f"{name[:38]:38} {r['pool']:9.0f} {r['raw']:9.0f} {r['raw'] / r['pool']:8.1f}x {r['loop']:6.0f}")


if __name__ == "__main__":
    main()
