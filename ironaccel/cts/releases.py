"""The suite versions this ironaccel knows, as Khronos' ``verify_submission`` knows the released CTS versions.

A suite is its version (ironaccel's) and its hash (``spec.suite_hash``: conformance/ and the library files
every run goes through). The current suite is computed from this tree; the earlier ones are listed in
``RELEASES``, each released (results made with it are stale: the suite moved on, re-certify) or withdrawn (a
defect was found in it: its results prove nothing, and ``ironaccel verify`` says why). A suite in neither is
unknown: a tree that was never released (someone's checkout), or a forged hash; stale too, since
re-certifying with this ironaccel is the remedy.

To withdraw a suite, add it here with ``withdrawn=`` the reason. This file is not part of the suite hash, so
withdrawing one changes no current result.
"""

from __future__ import annotations

from dataclasses import dataclass

CURRENT, RELEASED, WITHDRAWN, UNKNOWN = "current", "released", "withdrawn", "unknown"


@dataclass(frozen=True)
class Release:
    version: str
    suite_hash: str
    note: str  # what it was: when, which certification
    withdrawn: str = ""  # why it was withdrawn ("" while it stands)


RELEASES: tuple[Release, ...] = (
    Release("0.1.0", "c356e46450143a0b", "the suite of the results committed on 2026-12-01: the H200 and every "
            "simulated target certified at it"),
)


def standing(version: str, suite_hash: str, current: tuple[str, str],
             releases: tuple[Release, ...] | None = None) -> tuple[str, str]:
    """(CURRENT | RELEASED | WITHDRAWN | UNKNOWN, in words) of the suite (``version``, ``suite_hash``);
    ``current``: this tree's (version, hash); ``releases``: default ``RELEASES``. A withdrawn suite is
    withdrawn even when it is this tree's."""
    table = RELEASES if releases is None else releases
    known = next((r for r in table if (r.version, r.suite_hash) == (version, suite_hash)), None)
    label = f"suite {version} {suite_hash}"
    if known is not None and known.withdrawn:
        return WITHDRAWN, f"{label} was withdrawn: {known.withdrawn}"
    if (version, suite_hash) == current:
        return CURRENT, f"{label}, this ironaccel's"
    if known is not None:
        return RELEASED, f"{label} is an earlier release ({known.note}); this ironaccel's is {current[0]} {current[1]}"
    return UNKNOWN, (f"{label}: the suite changed since (this ironaccel's is {current[0]} {current[1]}), and it "
                     "is no release listed in ironaccel/cts/releases.py")
