"""Branch coverage of each backend module on its own targets (issue 23): the union over its backend's runs
(a line or branch counts as covered when any of them ran it: the compiled and the pure-Python CUDA runs, the
plain and the staged Vulkan runs), from the arcs each run recorded (``Coverage.executed``), never from the
percentages; and, beside each branch no run took, the reason ``unreachable.txt`` gives why no simulated target
can take it."""

from __future__ import annotations

import difflib
import fnmatch
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import modules
from covered import Coverage

from ironaccel.cts import tables

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
UNREACHABLE = HERE / "unreachable.txt"
BACKENDS = ("cuda", "vulkan", "webgpu", "opengl", "opencl")  # the areas of modules.SUITE_AREAS that are backends
GOAL = 0.85


def read_unreachable(path: Path = UNREACHABLE) -> dict[str, str]:
    """branch (``file:from->to``, as ``branch_name`` writes it) -> why no simulated target takes it; one
    ``BRANCH reason`` a line, blank lines and # comments skipped (equivalent.txt's format: its reader too)."""
    out = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                branch, _, reason = line.strip().partition(" ")
                out[branch] = reason.strip()
    return out


def branch_name(file: str, arc: tuple[int, int]) -> str:
    """``file:12->15``; an arc that leaves the function (coverage.py's negative target) is ``file:12->exit``."""
    return f"{file}:{arc[0]}->{arc[1] if arc[1] > 0 else 'exit'}"


@dataclass
class ModuleUnion:
    """One module's coverage over the runs of its backend."""
    file: str
    backend: str
    runs: list[str]
    lines: set[int] = field(default_factory=set)  # statements
    lines_run: set[int] = field(default_factory=set)
    branches: set[tuple[int, int]] = field(default_factory=set)
    taken: set[tuple[int, int]] = field(default_factory=set)

    @property
    def missing(self) -> list[str]:
        """The branches no run of the backend took, in line order."""
        return [branch_name(self.file, a) for a in sorted(self.branches - self.taken)]

    def reachable(self, unreachable: dict[str, str]) -> int:
        """The branches less those not taken that ``unreachable`` explains."""
        return len(self.branches) - sum(b in unreachable for b in self.missing)


def backend_of(file: str) -> str | None:
    return next((b for b in BACKENDS if any(fnmatch.fnmatch(file, g) for g in modules.SUITE_AREAS[b])), None)


def union(covs: dict[str, Coverage]) -> list[ModuleUnion]:
    """Per backend module measured by a run of its own backend (``modules.RUNS``' areas): the union of those
    runs' lines and branch arcs. A run missing from ``covs`` (not recorded) is left out, and says so by its
    absence from ``runs``."""
    out: dict[str, ModuleUnion] = {}
    for run in modules.RUNS:
        cov = covs.get(run.name)
        for file, ran in sorted(cov.executed.items()) if cov else ():
            backend = backend_of(file)
            if backend is None or backend not in run.areas:
                continue
            m = out.setdefault(file, ModuleUnion(file, backend, []))
            m.runs.append(run.name)
            m.lines_run.update(ran["lines"])
            m.lines.update(ran["lines"], ran["missing_lines"])
            taken = {tuple(a) for a in ran["taken"]}
            m.taken |= taken
            m.branches |= taken | {tuple(a) for a in ran["missing"]}
    return [out[f] for f in sorted(out)]


def pct(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def section(covs: dict[str, Coverage], unreachable: dict[str, str] | None = None) -> list[str]:
    """The report's table of the union per module, then the branches not taken of each module under the goal
    (with the reason ``unreachable.txt`` gives), then the entries of ``unreachable.txt`` that name no branch
    left untaken (a branch a run now takes, or code that moved: to be removed or renumbered)."""
    unreachable = read_unreachable() if unreachable is None else unreachable
    mods = union(covs)
    lines = ["## Branch coverage of each backend module on its own targets", "",
             "The union over the runs of the module's own backend (a line or branch counts as covered when any of "
             "them ran it), from the arcs each run recorded. \"unreachable\": the branches not taken that "
             "`unreachable.txt` explains (a person read the code and found no API call sequence that takes them "
             f"on a simulated target); \"of reachable\": the branches taken of those left. Goal: {GOAL:.0%}.", ""]
    if not mods:
        return lines + ["No run recorded the arcs of a backend module (coverage cached before they were kept)."]
    rows = []
    for m in mods:
        reach = m.reachable(unreachable)
        rows.append([m.file, " + ".join(m.runs), f"{len(m.lines_run)}/{len(m.lines)}", pct(len(m.lines_run), len(m.lines)),
                     f"{len(m.taken)}/{len(m.branches)}", pct(len(m.taken), len(m.branches)),
                     str(len(m.branches) - reach), pct(len(m.taken), reach)])
    lines += tables.markdown(["module", "runs", "lines", "line %", "branches", "branch %", "unreachable",
                              "branch % of reachable"], rows)
    under = [m for m in mods if m.branches and len(m.taken) / len(m.branches) < GOAL]
    lines += ["", "### Branches not taken, of the modules under the goal", ""]
    for m in under:
        lines += [f"- `{m.file}` ({pct(len(m.taken), len(m.branches))}; "
                  f"{pct(len(m.taken), m.reachable(unreachable))} of reachable):"]
        lines += [f"  - `{b}`" + (f": unreachable: {unreachable[b]}" if b in unreachable else "") for b in m.missing]
    lines += [] if under else ["None."]
    missing = {b for m in mods for b in m.missing}
    measured = {m.file for m in mods}
    stale = sorted(b for b in unreachable if b not in missing and b.rpartition(":")[0] in measured)
    if stale:
        lines += ["", "### Stale entries of `unreachable.txt`", "",
                  "Branches it lists that no module's union leaves untaken (a run takes them now, or the code "
                  "moved): remove them, or renumber them (`union.py --renumber COMMIT`).", ""] + \
            [f"- `{b}`" for b in stale]
    return lines


def moved_lines(file: str, since: str, repo: Path = REPO) -> dict[int, int]:
    """Line number in ``file`` at commit ``since`` -> its number now, for the lines no change since touched
    (difflib's equal blocks between the two texts)."""
    old = subprocess.run(["git", "show", f"{since}:{file}"], cwd=repo, capture_output=True, text=True, check=True)
    a, b = old.stdout.splitlines(), (repo / file).read_text(encoding="utf-8").splitlines()
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return {i + k + 1: j + k + 1 for i, j, size in matcher.get_matching_blocks() for k in range(size)}


def renumber(since: str, path: Path = UNREACHABLE, repo: Path = REPO) -> list[str]:
    """Rewrite ``path``'s branches to the lines their code has now, given the commit whose code its numbers
    were read against; an entry whose line changed since is left as it is (the report lists it as stale, for a
    person to read again). Returns the entries moved, as ``old -> new``."""
    maps: dict[str, dict[int, int]] = {}
    moved, out = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        branch, _, reason = line.partition(" ")
        if line.strip() and not line.lstrip().startswith("#"):
            file, _, arc = branch.rpartition(":")
            start, _, end = arc.partition("->")
            if file not in maps:
                maps[file] = moved_lines(file, since, repo)
            lines = maps[file]
            if int(start) in lines and (end == "exit" or int(end) in lines):
                new = branch_name(file, (lines[int(start)], lines[int(end)] if end != "exit" else -1))
                if new != branch:
                    moved.append(f"{branch} -> {new}")
                line = f"{new} {reason}"
        out.append(line)
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return moved


if __name__ == "__main__":
    # python3 ci/mutants/union.py --renumber COMMIT: after the backend modules changed, the entries moved with
    # their code (COMMIT: the one their numbers were read against, e.g. unreachable.txt's last change).
    if len(sys.argv) != 3 or sys.argv[1] != "--renumber":
        sys.exit("usage: union.py --renumber COMMIT")
    print("\n".join(renumber(sys.argv[2])) or "nothing moved")
