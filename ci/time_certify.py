#!/usr/bin/env python3
"""Where the time of `ironaccel certify --all` goes: wall time of the whole run, CPU use of the target
processes against what the cores could give, and per target its process time split into test time (the
results file's per-test durations) and the rest (interpreter start, imports, collection, device open/close),
then the slowest tests.

    python3 ci/time_certify.py [--jobs N] [--results DIR] [--top N]

Results go to a scratch folder unless --results is given; nothing committed is touched.
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from ironaccel.cts import certify, results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=None, help="parallel target processes (default: CPU count)")
    p.add_argument("--results", default=None, metavar="DIR", help="results folder (default: a scratch folder)")
    p.add_argument("--top", type=int, default=10, help="slowest tests to list")
    args = p.parse_args()

    names = certify.runnable_targets()
    out = Path(args.results or tempfile.mkdtemp(prefix="ironaccel-time-"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    runs = certify.certify(names, out, jobs=args.jobs, stream=io.StringIO())
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    cores = min(args.jobs or len(names), len(names), os.cpu_count() or 1)

    print(f"certify --all: {len(runs)} targets, wall {wall:.1f} s; target processes used {cpu:.1f} CPU-s "
          f"= {cpu / wall / cores:.0%} of {cores} core(s) over the run")
    print()
    print(f"{'target':20} {'status':8} {'process s':>9} {'tests s':>8} {'other s':>8}  tests")
    slowest = []
    for r in runs:
        doc = results.load(r.results_file)
        test_s = sum(t["duration"] for t in doc["tests"])
        slowest += [(t["duration"], r.target, t["id"]) for t in doc["tests"]]
        print(f"{r.target:20} {r.status:8} {r.seconds:9.1f} {test_s:8.1f} {r.seconds - test_s:8.1f}  {len(doc['tests'])}")
    print()
    print(f"slowest {args.top} tests:")
    for seconds, target, test in sorted(slowest, reverse=True)[: args.top]:
        print(f"  {seconds:6.2f} s  {target:20} {test}")
    print()
    print(certify.summary_table(runs))
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
