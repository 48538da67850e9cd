"""What the bench times: the operations (cases) in report order, their sizes, and the goals judged on hardware.

Every implementation — ironaccel, a floor, a peer — is a dict from case name to an ``Impl``; a case is
measured for whichever implementations have it, so adding an operation means adding it here and to the
implementations that can do it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .units import format_bytes, format_ns

SIZES = (256, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20)
QUICK_SIZES = (256, 64 << 10)
ALLOC_BYTES = 1024
GRAPH_LAUNCHES = 100  # launches in the graph of the graph replay row
CALL_ONLY_BYTES = 64 << 10  # copies this small are also timed without their synchronize (host cost alone)

EVENT_RECORD = "event_record_sync"  # a new Event per record
EVENT_RERECORD = "event_rerecord_sync"  # one Event re-recorded in place (issue 30), timed against the record row's floors
DEFERRED = ".deferred"  # in a case name: copy_htod_deferred, timed against the copy_htod row's floors and peers

OURS = "ironaccel"
FLOOR = "raw"  # the same operation through the raw driver calls from Python
C_FLOOR = "C floor"  # the same driver calls from C (CUDA): cfloor.c

#: Per implementation: runs the operation ``n`` times and returns the nanoseconds it measured (an
#: implementation may leave set-up between operations, such as a synchronize, out of what it measures).
Impl = Callable[[int], int]


@dataclass(frozen=True)
class Goal:
    """A target for hardware runs: at most ``ns`` per op, or at most ``ratio`` x implementation ``of``. Where a
    semantic of the API costs the gap, ``cost`` names it and ``alternative`` is the case of the documented faster
    path without it (the table shows the difference of the two as the semantic's measured cost)."""

    ns: float | None = None
    ratio: float | None = None
    of: str = FLOOR
    cost: str | None = None
    alternative: str | None = None

    def text(self) -> str:
        return f"<= {format_ns(self.ns)}" if self.ns is not None else f"<= {self.ratio:.2f}x {self.of}"

    def met(self, ours_ns: float, ratio: float | None) -> bool | None:
        """``ratio``: the measured median ratio of ironaccel to ``of`` (None when ``of`` was not measured)."""
        if self.ns is not None:
            return ours_ns <= self.ns
        return None if ratio is None else ratio <= self.ratio


def _cuda_goals() -> dict[str, Goal]:
    """The CUDA goals of issue 14 (H200): every control-plane row within 1.15x of the C floor measured in
    the same run, the MemPool's warm cycle at most 150 ns, a 1 MiB pageable copy no slower than the raw
    floor's and a 64 MiB one at most 3 ms. Judged on hardware runs only."""
    near_c = Goal(ratio=1.15, of=C_FLOOR)
    goals = {name: near_c for name in ("stream_sync", "event_rerecord_sync", "launch.async", "launch.args4")}
    goals["event_record_sync"] = Goal(ratio=1.15, of=C_FLOOR, alternative="event_rerecord_sync",
                                      cost="Stream.record() returns a new Event (an object per record, its CUevent "
                                           "taken from the device's spares and given back when it is dropped)")
    goals["alloc_free.device"] = Goal(ratio=1.15, of=C_FLOOR, alternative="alloc_free.pool",
                                      cost="Device.alloc's buffer is usable on any stream at once (its allocation "
                                           "is waited for)")
    reuse = "COPY-4: the host array is reusable on return, so ironaccel stages the copy"
    for memory in ("pageable", "pinned"):
        for n in SIZES:
            if n <= CALL_ONLY_BYTES:
                for htod in (f"htod.{memory}.{n}.call", f"htod.{memory}.{n}"):
                    goals[htod] = Goal(ratio=1.15, of=C_FLOOR, cost=reuse, alternative=deferred(htod))
                    goals[deferred(htod)] = near_c
                goals[f"dtoh.{memory}.{n}"] = near_c
    goals["alloc_free.pool"] = Goal(ns=150)
    goals["htod.pageable.1048576"] = Goal(ratio=1.0)
    goals["htod.pageable.67108864"] = Goal(ns=3e6)
    return goals


def deferred(name: str) -> str:
    """The copy_htod_deferred case beside copy_htod case ``name`` (``htod.pinned.256.call``:
    ``htod.pinned.256.deferred.call``)."""
    return name.replace(".call", "") + DEFERRED + (".call" if name.endswith(".call") else "")


def same_operation(name: str) -> str:
    """The case whose floors also time case ``name``: a deferred copy's copy_htod case (the same driver call,
    cuMemcpyHtoDAsync from the host array), the event record's for the re-record (the floors record one event
    again and again: cuEventRecord on the same CUevent, Vulkan's and WebGPU's submit-and-wait, GL's finish),
    else ``name`` itself."""
    return EVENT_RECORD if name == EVENT_RERECORD else name.replace(DEFERRED, "")


CUDA_GOALS = _cuda_goals()


@dataclass
class Case:
    """One operation and its implementations; ``impls`` maps a name to an Impl, ironaccel first."""

    name: str
    label: str
    impls: dict[str, Impl] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # implementation -> why it has no figure
    nbytes: int = 0


def catalogue(sizes: tuple[int, ...], pinned: bool) -> list[tuple[str, str, int]]:
    """(name, label, bytes) of every operation, in report order."""
    cases = [
        ("alloc_free.device", f"alloc+free {ALLOC_BYTES} B, device", ALLOC_BYTES),
        ("alloc_free.pool", f"alloc+free {ALLOC_BYTES} B, MemPool (peers: their pool)", ALLOC_BYTES),
        ("stream_sync", "stream synchronize, idle", 0),
        (EVENT_RECORD, "event record + synchronize", 0),
        (EVENT_RERECORD, "event re-record (record(event=e)) + synchronize", 0),
        ("launch.async", "empty kernel launch, back to back (async)", 0),
        ("launch.args4", "kernel launch with 4 arguments, back to back (async)", 0),
        ("launch.single", "empty kernel launch, one from idle", 0),
        ("launch.sync", "empty kernel launch + synchronize", 0),
        (f"launch.x{GRAPH_LAUNCHES}", f"{GRAPH_LAUNCHES} empty kernel launches, back to back (async)", 0),
        (f"graph.x{GRAPH_LAUNCHES}", f"{GRAPH_LAUNCHES} empty kernel launches replayed as one graph (async)", 0),
    ]
    memories = ("pageable", "pinned") if pinned else ("pageable",)
    for memory in memories:
        for n in sizes:
            if n <= CALL_ONLY_BYTES:
                cases.append((f"htod.{memory}.{n}.call", f"htod {format_bytes(n)} {memory}, call only", n))
                cases.append((f"htod.{memory}.{n}{DEFERRED}.call",
                              f"htod {format_bytes(n)} {memory}, copy_htod_deferred, call only", n))
    for direction in ("htod", "dtoh"):
        for memory in memories:
            for n in sizes:
                cases.append((f"{direction}.{memory}.{n}", f"{direction} {format_bytes(n)} {memory}", n))
                if direction == "htod" and n <= CALL_ONLY_BYTES:
                    cases.append((f"htod.{memory}.{n}{DEFERRED}",
                                  f"htod {format_bytes(n)} {memory}, copy_htod_deferred", n))
    return cases


def pageable(n: int) -> np.ndarray:
    """Ordinary host memory, touched (so no copy pays for first-touch page faults)."""
    return np.full(n, 7, dtype=np.uint8)
