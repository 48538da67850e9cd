"""What ``ironaccel certify`` refuses before it starts anything (exit 2, nothing written): a target it does
not know (with the names it may have meant), a target this machine cannot run (``doctor``'s answer: what
is missing and how to fix it) unless ``--force``, and a run that would lower a committed hardware result
with a run from a machine that cannot run that target, even with ``--force`` (run it into another folder)."""

from __future__ import annotations

import difflib
from pathlib import Path

from . import runs, targets


def did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    return f"; did you mean {' or '.join(close)}?" if close else f"; known: {', '.join(known)}"


def refusal(names: list[str], results_dir: Path, force: bool, docker: bool = False) -> str:
    """Why ``certify --target NAMES`` must not start ("" when it may). ``docker``: the targets run in
    containers, so what this machine lacks does not matter."""
    known = targets.registered_drivers()
    for name in names:
        if name not in known:
            return f"unknown target {name!r}{did_you_mean(name, sorted(known))} (`ironaccel doctor` lists them)"
    if docker:
        return ""
    lines = []
    for name in names:
        why = known[name].missing()
        if why is None:
            continue
        if runs.committed_hardware(results_dir, name):
            lines.append(f"{name}: this machine cannot run it ({why}), and {results_dir} holds its hardware "
                         "result, which a run here would replace; certify it on a machine that can, or into "
                         "another --results folder (with --force)")
        elif not force:
            lines.append(f"{name}: this machine cannot run it: {why} (what `ironaccel doctor` says; --force runs "
                         "it anyway and records that in its results file)")
    return "\n".join(lines)
