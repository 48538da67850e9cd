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
CALL_ONLY_BYTES = 64 << 10  # copies this small are also timed without their synchronize (host cost alone)

OURS = "ironaccel"
FLOOR = "raw"  # the same operation through the raw driver calls from Python

#: Per implementation: runs the operation ``n`` times and returns the nanoseconds it measured (an
#: implementation may leave set-up between operations, such as a synchronize, out of what it measures).
Impl = Callable[[int], int]


@dataclass(frozen=True)
class Goal:
    """A target from issue 8, for hardware runs: at most ``ns`` per op, or at most ``ratio`` x the floor."""

    ns: float | None = None
    ratio: float | None = None

    def text(self) -> str:
        return f"<= {format_ns(self.ns)}" if self.ns is not None else f"<= {self.ratio:.2f}x raw"

    def met(self, ours_ns: float, floor_ratio: float | None) -> bool | None:
        if self.ns is not None:
            return ours_ns <= self.ns
        return None if floor_ratio is None else floor_ratio <= self.ratio


#: The CUDA goals of issue 8 (measured on the H200); judged on hardware runs only.
CUDA_GOALS = {
    "alloc_free.pool": Goal(ns=250),
    "stream_sync": Goal(ratio=1.10),
    "event_record_sync": Goal(ns=3000),
    "launch.async": Goal(ns=4500),
    "htod.pageable.256.call": Goal(ns=3000),
    "htod.pageable.67108864": Goal(ns=1.5e6),
}


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
        ("event_record_sync", "event record + synchronize", 0),
        ("launch.async", "empty kernel launch, back to back (async)", 0),
        ("launch.single", "empty kernel launch, one from idle", 0),
        ("launch.sync", "empty kernel launch + synchronize", 0),
    ]
    memories = ("pageable", "pinned") if pinned else ("pageable",)
    for memory in memories:
        for n in sizes:
            if n <= CALL_ONLY_BYTES:
                cases.append((f"htod.{memory}.{n}.call", f"htod {format_bytes(n)} {memory}, call only", n))
    for direction in ("htod", "dtoh"):
        for memory in memories:
            for n in sizes:
                cases.append((f"{direction}.{memory}.{n}", f"{direction} {format_bytes(n)} {memory}", n))
    return cases


def pageable(n: int) -> np.ndarray:
    """Ordinary host memory, touched (so no copy pays for first-touch page faults)."""
    return np.full(n, 7, dtype=np.uint8)
