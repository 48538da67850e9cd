"""The MemPool's warm alloc+free with and without PooledBuffer's own fast path, in one process (issue 30): a
probe, not a bench row. ``configure_pool`` (ironaccel/_fast_c/pool.inc, own_fast_path) gives MemPool and
PooledBuffer their own ``alloc`` and ``free`` method descriptors and PooledBuffer, in place of subtype_dealloc, its own
tp_dealloc; this probe takes them away again (``del MemPool.alloc``, ``del PooledBuffer.free``; tp_dealloc set back
to subtype_dealloc through ctypes, read from a plain Python class) for the "old" bursts, so the same pool, blocks
and loop serve both sides and only that differs.

    PYTHONPATH=$PWD python3 benchmarks/probe_pool_ab.py --backend cuda/fake

Variants: ``old`` (none), ``free`` (own alloc and free only), ``dealloc`` (own tp_dealloc only), ``new`` (all:
what configure_pool installs). Rows: ``bench``, the bench's alloc_free.pool loop (``timed(lambda: pool_alloc(1024).free())``);
``inline``, ``pool.alloc(1024).free()`` written out in a loop; ``floor``, ``timed(lambda: None)``: the loop and the
lambda call alone. Each burst is the fastest of ``--reps`` runs of ``--burst`` cycles; variants alternate within a
round, their order reversed every other round. Printed: each variant's median ns per cycle, and against ``old``
the median of the per-round ratios and how many rounds it won.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time

VARIANTS = ("old", "free", "dealloc", "new")
TP_DEALLOC = 6 * ctypes.sizeof(ctypes.c_void_p)  # ob_refcnt, ob_type, ob_size, tp_name, tp_basicsize, tp_itemsize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cuda/fake")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--burst", type=int, default=20000)
    opts = parser.parse_args()
    from ironaccel.cts.bench.runner import open_target
    from ironaccel.cts.bench.stats import timed
    from ironaccel.pool import MemPool, PooledBuffer

    own_free, own_alloc = PooledBuffer.__dict__.get("free"), MemPool.__dict__.get("alloc")
    if own_free is None or own_alloc is None:
        sys.exit("MemPool or PooledBuffer has no method of its own: the compiled module is not loaded, or predates own_fast_path")

    class Plain:
        pass

    slot = ctypes.c_void_p.from_address(id(PooledBuffer) + TP_DEALLOC)
    own_dealloc, subtype_dealloc = slot.value, ctypes.c_void_p.from_address(id(Plain) + TP_DEALLOC).value

    def use(variant: str) -> None:
        for cls, name, own in ((PooledBuffer, "free", own_free), (MemPool, "alloc", own_alloc)):
            if variant in ("free", "new"):
                setattr(cls, name, own)
            elif name in cls.__dict__:
                delattr(cls, name)
        slot.value = own_dealloc if variant in ("dealloc", "new") else subtype_dealloc

    dev, name = open_target(opts.backend)
    stream = dev.create_stream()
    pool = MemPool(dev, stream)
    pool_alloc = pool.alloc

    def inline(n: int) -> int:
        clock = time.perf_counter_ns
        start = clock()
        for _ in range(n):
            pool.alloc(1024).free()
        return clock() - start

    rows = {"bench": timed(lambda: pool_alloc(1024).free()), "inline": inline, "floor": timed(lambda: None)}
    times = {(r, v): [] for r in rows for v in VARIANTS}
    try:
        for v in VARIANTS:  # warm up: specialize the loops' calls under each variant
            use(v)
            for run in rows.values():
                run(opts.burst)
        for rnd in range(opts.rounds):
            order = VARIANTS if rnd % 2 == 0 else VARIANTS[::-1]
            for row, run in rows.items():
                for v in order:
                    use(v)
                    times[row, v].append(min(run(opts.burst) for _ in range(opts.reps)) / opts.burst)
    finally:
        use("new")
    stats = pool.stats()
    pool.close()
    print(f"{name}, Python {sys.version.split()[0]}, {opts.rounds} rounds of best-of-{opts.reps} bursts of "
          f"{opts.burst}; hits {stats.hits}, misses {stats.misses}")
    for row in rows:
        old = times[row, "old"]
        cells = []
        for v in VARIANTS:
            t = times[row, v]
            cell = f"{v} {statistics.median(t):6.1f} ns"
            if v != "old":
                ratios = [a / b for a, b in zip(t, old)]
                wins = sum(r < 1 for r in ratios)
                cell += f" ({statistics.median(ratios):.3f}x, won {wins}/{len(ratios)})"
            cells.append(cell)
        print(f"{row:7s} " + " | ".join(cells))


if __name__ == "__main__":
    main()
