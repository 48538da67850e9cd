"""ironaccel's side of every case, on the public API alone, so it runs on every backend the same way."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...pool import MemPool
from . import kernels
from .cases import ALLOC_BYTES, CALL_ONLY_BYTES, DEFERRED, EVENT_RECORD, EVENT_RERECORD, GRAPH_LAUNCHES, Impl, pageable
from .kernels import KernelCall
from .stats import timed, timed_each, timed_then

def api_impls(dev: Any, stream: Any, launches: dict[str, KernelCall], sizes: tuple[int, ...],
              pinned: Callable[[int], np.ndarray] | None) -> tuple[dict[str, Impl], list[Callable[[], None]]]:
    """ironaccel's implementation of each case (by case name), and what to call to clean up; ``launches``
    holds the kernels of ``kernels`` that this device compiled, by kernel name."""
    impls: dict[str, Impl] = {}
    cleanup: list[Callable[[], None]] = []
    alloc = dev.alloc
    impls["alloc_free.device"] = timed(lambda: alloc(ALLOC_BYTES).free())
    pool = MemPool(dev, stream)
    cleanup.append(pool.close)
    pool_alloc = pool.alloc
    impls["alloc_free.pool"] = timed(lambda: pool_alloc(ALLOC_BYTES).free())
    sync = stream.synchronize
    impls["stream_sync"] = timed(sync)
    record = stream.record
    impls[EVENT_RECORD] = timed(lambda: record().synchronize())
    event = record()
    impls[EVENT_RERECORD] = timed(lambda: record(event=event).synchronize())
    launch = stream.launch
    for name, (k, args) in launches.items():
        def one(k: Any = k, args: tuple[Any, ...] = args) -> None:
            launch(k, 1, 1, args)

        if name == kernels.EMPTY:
            impls["launch.async"] = timed_then(one, sync)
            impls["launch.single"] = timed_each(one, sync)
            impls["launch.sync"] = timed(lambda: (one(), sync()))
            if dev.supports("graphs"):  # the graph replay row and the launches it replaces
                impls[f"launch.x{GRAPH_LAUNCHES}"] = timed_then(lambda one=one: [one() for _ in range(GRAPH_LAUNCHES)],
                                                                sync)
                with stream.capture() as graph:
                    for _ in range(GRAPH_LAUNCHES):
                        one()
                cleanup.append(graph.close)
                impls[f"graph.x{GRAPH_LAUNCHES}"] = timed_then(lambda: graph.launch(stream), sync)
        else:
            impls["launch.args4"] = timed_then(one, sync)
    for n in sizes:
        if n > dev.info.limits.max_alloc:
            continue
        buf = dev.alloc(n)
        cleanup.append(buf.free)
        hosts = {"pageable": pageable(n)}
        if pinned is not None:
            hosts["pinned"] = pinned(n)
        for memory, host in hosts.items():
            impls[f"htod.{memory}.{n}.call"] = timed_each(lambda b=buf, h=host: stream.copy_htod(b, h), sync)
            impls[f"htod.{memory}.{n}"] = timed(lambda b=buf, h=host: (stream.copy_htod(b, h), sync()))
            if n <= CALL_ONLY_BYTES:
                deferred = stream.copy_htod_deferred
                impls[f"htod.{memory}.{n}{DEFERRED}.call"] = timed_each(lambda b=buf, h=host: deferred(b, h), sync)
                impls[f"htod.{memory}.{n}{DEFERRED}"] = timed(lambda b=buf, h=host: (deferred(b, h), sync()))
            impls[f"dtoh.{memory}.{n}"] = timed(lambda b=buf, h=host: (stream.copy_dtoh(h, b), sync()))
    return impls, cleanup
