"""Timing and statistics: batches calibrated to a sample length, paired alternating rounds, bootstrap ratios.

A round times one batch of every implementation of a case back to back, in an order that alternates
between rounds; a ratio is taken within a round (so drift on a busy machine hits both sides of a pair
alike) and the reported ratio is the median of the per-round ratios, with a percentile bootstrap interval
of that median (numpy, fixed seed). Ratios are ironaccel / other: below 1 means ironaccel is faster.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from .cases import OURS, Case, Goal, Impl

MAX_BATCH = 20000
BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 8


def timed(op: Callable[[], Any]) -> Impl:
    """An Impl that times ``n`` calls of ``op`` in one loop."""

    def run(n: int) -> int:
        clock = time.perf_counter_ns
        start = clock()
        for _ in range(n):
            op()
        return clock() - start

    return run


def timed_each(op: Callable[[], Any], between: Callable[[], Any]) -> Impl:
    """An Impl that times each call of ``op`` alone and runs ``between`` (untimed) after each."""

    def run(n: int) -> int:
        clock = time.perf_counter_ns
        total = 0
        for _ in range(n):
            start = clock()
            op()
            total += clock() - start
            between()
        return total

    return run


def timed_then(op: Callable[[], Any], after: Callable[[], Any]) -> Impl:
    """An Impl that times ``n`` calls of ``op`` and runs ``after`` once, untimed (e.g. drain a queue)."""
    loop = timed(op)

    def run(n: int) -> int:
        elapsed = loop(n)
        after()
        return elapsed

    return run


def calibrate(impl: Impl, sample_ns: float) -> int:
    """A batch size whose run takes about ``sample_ns``; warms the implementation up while finding it.

    Each size is timed twice and the faster run counts: one slow call (the first, paying one-time costs such
    as a cache miss or a lazily created handle, or a stall) must not end the search at a tiny batch, whose
    samples then time a cold operation (the --quick H200 run of 2026-12-01 got batches of 2-3 this way)."""
    n = 1
    while True:
        elapsed = max(min(impl(n), impl(n)), 1)
        if elapsed >= sample_ns / 4 or n >= MAX_BATCH:
            return int(min(max(n * sample_ns / elapsed, 1), MAX_BATCH))
        n = min(n * 4, MAX_BATCH)


def paired_ratio(ours: np.ndarray, other: np.ndarray, *, rng: np.random.Generator,
                 resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE) -> dict[str, float]:
    """Median of the per-pair ratios ours/other, with a percentile bootstrap interval of that median."""
    ratios = np.asarray(ours, dtype=float) / np.asarray(other, dtype=float)
    median = float(np.median(ratios))
    picks = rng.integers(0, len(ratios), size=(resamples, len(ratios)))
    boot = np.median(ratios[picks], axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(boot, [tail, 1 - tail])
    return {"median": median, "ci_low": float(low), "ci_high": float(high), "pairs": len(ratios)}


def measure(case: Case, samples: int, sample_ns: float) -> dict[str, Any]:
    """Paired, alternating samples of every implementation of ``case``; ns per operation."""
    batches: dict[str, int] = {}
    for name, impl in list(case.impls.items()):
        try:
            batches[name] = calibrate(impl, sample_ns)
            impl(batches[name])  # one more warm batch at the final size
        except Exception as exc:  # a peer that cannot do this operation loses its column, not the run
            case.errors[name] = why(exc)
            del case.impls[name]
    names = list(case.impls)
    per_op: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(samples):
        for name in names if round_ % 2 == 0 else reversed(names):
            per_op[name].append(case.impls[name](batches[name]) / batches[name])
    return {name: {"batch": batches[name], "samples_ns": per_op[name],
                   "median_ns": float(np.median(per_op[name]))} for name in names}


def summarize(case: Case, timings: dict[str, Any], goal: Goal | None, simulated: bool) -> dict[str, Any]:
    """The report entry of one case: its timings, the paired ratios of ironaccel to each other, the goal."""
    rng = np.random.default_rng(SEED)
    out: dict[str, Any] = {"name": case.name, "label": case.label, "nbytes": case.nbytes, "impls": timings,
                           "errors": case.errors, "ratios": {}}
    if OURS in timings:
        ours = np.asarray(timings[OURS]["samples_ns"])
        for name, t in timings.items():
            if name != OURS:
                out["ratios"][name] = paired_ratio(ours, np.asarray(t["samples_ns"]), rng=rng)
    if goal is not None:
        ratio = out["ratios"].get(goal.of, {}).get("median")
        met = goal.met(timings[OURS]["median_ns"], ratio) if OURS in timings else None
        out["goal"] = {"text": goal.text(), "met": None if simulated else met, "met_here": met}
        if goal.alternative is not None:
            out["goal"].update(cost=goal.cost, alternative=goal.alternative)
    return out


def why(exc: BaseException) -> str:
    """One line saying why an implementation has no figure (the exception's type and first line)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
