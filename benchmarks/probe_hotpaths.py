"""Where the time of three CUDA hot paths goes, layer by layer (issue 30): a probe, not a bench row.

    PYTHONPATH=$PWD python3 benchmarks/probe_hotpaths.py [--backend cuda] > $OUT/probe.txt

For each path it times the public call, then the same work with one layer less each time: the compiled leaf
without the API's admission (``native.fast.*``), and the driver calls alone through cuda.bindings. Each line
is the median over 21 batches of the time per call, and the bench's own ``lambda: None`` loop is printed first
so the harness's share can be taken off. The difference between two lines is the cost of the layer between
them: that is the figure the bench's notes need for a semantic (COPY-4's staging, the spare event) or a gap.
Only the H200 tells: on cuda/fake the fake's own thread handoffs swamp the rest.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

BATCHES = 21
CALLS = int(os.environ.get("PROBE_CALLS", "5000"))  # calls per batch (fewer: a smoke run)


def per_call(op, between=None) -> float:
    """Median ns per call of ``op``: timed in a loop, or each alone with ``between`` untimed after it."""
    clock = time.perf_counter_ns
    samples = []
    for _ in range(BATCHES):
        if between is None:
            start = clock()
            for _ in range(CALLS):
                op()
            samples.append((clock() - start) / CALLS)
        else:
            total = 0
            for _ in range(CALLS):
                start = clock()
                op()
                total += clock() - start
                between()
            samples.append(total / CALLS)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cuda", help="cuda (the GPU) or cuda/fake")
    target = parser.parse_args().backend
    from ironaccel.backends.cuda import native
    from ironaccel.cts.bench.runner import open_target
    from ironaccel.pool import MemPool

    dev, name = open_target(target)
    stream = dev.create_stream()
    cu, fast = native.cu, native.fast
    sync = stream.synchronize
    rows: list[tuple[str, float]] = [("harness: lambda: None", per_call(lambda: None))]

    pool = MemPool(dev, stream)
    alloc = pool.alloc
    rows.append(("pool: alloc(1024).free()", per_call(lambda: alloc(1024).free())))
    pool.close()

    record = stream.record
    rows.append(("event: record().synchronize()", per_call(lambda: record().synchronize())))
    rows.append(("event: record() (dropped: its CUevent back to the spares)", per_call(lambda: record())))
    # the leaf while a spare CUevent is free (the one record() just gave back): with none it returns
    # NO_SPARE_EVENT at once, without recording (session 11's H200 probe timed that: 151 ns)
    if type(fast.record(stream, False)) is int:
        raise SystemExit("probe: fast.record found no spare CUevent: its row would time the NO_SPARE_EVENT return")
    rows.append(("event: fast.record(stream, False), the leaf", per_call(lambda: fast.record(stream, False))))
    done = record()
    done.synchronize()
    rows.append(("event: synchronize() of a complete event", per_call(done.synchronize)))
    handle, queue = done._handle, stream._handle
    rows.append(("event: cuEventRecord + cuEventQuery (cuda.bindings)",
                 per_call(lambda: (cu.cuEventRecord(handle, queue), cu.cuEventQuery(handle)))))
    rows.append(("event: cuEventRecord + cuEventSynchronize (cuda.bindings)",
                 per_call(lambda: (cu.cuEventRecord(handle, queue), cu.cuEventSynchronize(handle)))))

    copy_htod, deferred, ring = stream.copy_htod, stream.copy_htod_deferred, dev._staging
    for n in (256, 4096):
        buf = dev.alloc(n)
        host = np.arange(n, dtype=np.uint8)
        ptr, src = buf._ptr, host.ctypes.data
        rows.append((f"htod {n} B pageable: copy_htod, call only",
                     per_call(lambda b=buf, h=host: copy_htod(b, h), sync)))
        rows.append((f"htod {n} B pageable: fast.staged_htod, the leaf (the full call where the ring must advance)",
                     per_call(lambda b=buf, h=host: fast.staged_htod(stream, b, 0, h, ring) == -1 and copy_htod(b, h),
                              sync)))
        rows.append((f"htod {n} B pageable: cuMemcpyHtoDAsync from the array (cuda.bindings)",
                     per_call(lambda p=ptr, h=src, n=n: cu.cuMemcpyHtoDAsync(p, h, n, queue), sync)))
        rows.append((f"htod {n} B pageable: copy_htod_deferred, call only",
                     per_call(lambda b=buf, h=host: deferred(b, h), sync)))
        buf.free()
    sync()
    print(f"probe_hotpaths on {name} ({dev.info.name}); ns per call, median of {BATCHES} batches of {CALLS}")
    for label, ns in rows:
        print(f"{ns:10.0f}  {label}")
    dev.close()


if __name__ == "__main__":
    main()
