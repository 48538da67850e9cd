"""results/*.json -> STATUS.md: the honest backend matrix, derived from results files alone.

``render`` is a pure function of its inputs and sorts everything it prints, so the same inputs give the
same bytes in any order and on any machine (there is no current time in the output). ``write``, ``check``
and ``command`` (for ``ironaccel status [--check]``) read the inputs from the checkout and call it.

Definitions (also printed in the file's "Levels" section):

* A clause **passes on a target** when the target has at least one test citing it and every one of
  those tests passed. not-supported, xfail, xpass, skip, flaky, fail and not-run are not passes; a
  clause whose tests there were all not-supported is reported as "not-supported".
* A target **certifies** its backend when its run finished (``run.status`` "ok") at the current suite
  hash and every required clause passes on it. Certification is per target, not pieced together
  clause by clause from several targets: one run must pass the whole required spec.
* Levels: **production** — certified on at least one hardware target and one simulated target;
  **simulated** — certified on simulated targets but on no hardware target; **partial** — results at the
  current hash, but neither of those (hardware-only certification lands here too: it lacks the
  simulated half); **probe** — registered, enumerates, no compute path (``BackendInfo.compute`` False);
  **unavailable** — a compute backend with no results at the current hash.
* Results at another suite hash are shown and marked STALE but never count toward a level. A target is
  simulated when its results file says so *or* the target registry says so, so passes on the fake
  libcuda never count as hardware whatever a file claims.
* Several results files for one target: the one that counts is the current-hash, finished, latest one;
  the others are listed in the provenance as superseded.

The backend rows use ``BackendInfo.reason`` as given. ``registry_infos`` (what ``write``/``check``
pass) builds them without probing, because probe reasons describe the machine (a library found here,
missing there) and STATUS.md must come out the same on every machine for ``--check`` to mean anything.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from . import results as results_mod
from .api import BackendInfo
from .spec import Clause
from .targets import Target

__all__ = ["LEVELS", "CERTIFICATE_SUFFIX", "render", "required_clause_states", "run_level", "registry_infos",
           "load_results", "write", "check", "command"]

LEVELS = ("production", "simulated", "partial", "probe", "unavailable")

MESSAGE_WIDTH = 160  # characters of a non-pass message kept in its one-line table cell
GAP_IDS_SHOWN = 12  # clause ids listed per category before "and N more"

#: Certificates (``ironaccel certify``) lie beside the results files; they are not results files.
CERTIFICATE_SUFFIX = ".cert.json"

LEVEL_TEXT = {
    "production": "every required clause passes on at least one hardware target and one simulated target "
    "at the current suite hash",
    "simulated": "every required clause passes on a simulated target (software driver or fake); no hardware "
    "target passes them all",
    "partial": "results at the current suite hash, but no simulated target passes every required clause",
    "probe": "registered and enumerates its runtime, but has no compute path in ironaccel yet",
    "unavailable": "a compute backend with no results at the current suite hash",
}


@dataclass(frozen=True)
class _Run:
    """One results document as STATUS.md sees it."""

    doc: dict[str, Any]
    simulated: bool
    current: bool  # its suite hash is the current one
    superseded: bool = False  # another results file of the same target is the one that counts

    @property
    def name(self) -> str:
        return self.doc["target"]["name"]

    @property
    def backend(self) -> str:
        return self.doc["target"]["backend"]

    @property
    def finished(self) -> bool:
        return self.doc["run"]["status"] == "ok"

    def label(self) -> str:
        """The target name with what a reader must know before trusting its numbers."""
        marks = ([] if self.current else ["STALE"]) + ([] if self.finished else [self.doc["run"]["status"]])
        marks += ["superseded"] if self.superseded else []
        return f"{self.name} ({', '.join(marks)})" if marks else self.name

    def tests(self) -> list[dict[str, Any]]:
        return sorted(self.doc["tests"], key=lambda t: (t["id"], t["outcome"], tuple(t["clauses"])))


def clause_state(outcomes: list[str]) -> str:
    """A clause's state on one target from its tests' outcomes there: pass, untested, or the non-pass
    outcomes seen, in OUTCOMES order joined by "/" (so "not-supported" alone means only not-supported)."""
    if not outcomes:
        return "untested"
    bad = [o for o in results_mod.OUTCOMES if o != "pass" and o in outcomes]
    return "/".join(bad) if bad else "pass"


def required_clause_states(doc: dict[str, Any], clauses: Mapping[str, Clause]) -> dict[str, str]:
    """Required clause id -> its state (``clause_state``) in one results document, in SPEC.md order."""
    by_clause: dict[str, list[str]] = {}
    for t in doc["tests"]:
        for cid in t["clauses"]:
            by_clause.setdefault(cid, []).append(t["outcome"])
    return {cid: clause_state(by_clause.get(cid, [])) for cid, c in clauses.items() if c.required}


def _required_gaps(run: _Run, clauses: Mapping[str, Clause]) -> dict[str, str]:
    """Required clause id -> its state on ``run``, for every required clause that does not pass."""
    return {cid: state for cid, state in required_clause_states(run.doc, clauses).items() if state != "pass"}


def _certifies(run: _Run, clauses: Mapping[str, Clause]) -> bool:
    return run.current and run.finished and not _required_gaps(run, clauses)


def _doc_key(doc: dict[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True)


def _runs(
    results: Iterable[dict[str, Any]], current_hash: str, targets: Mapping[str, Target]
) -> tuple[list[_Run], list[_Run]]:
    """(the run that counts per target, superseded runs), each sorted by target name."""
    by_target: dict[str, list[_Run]] = {}
    for doc in results:
        t = doc["target"]
        known = targets.get(t["name"])
        run = _Run(doc, bool(t["simulated"]) or bool(known and known.simulated), doc["suite"]["hash"] == current_hash)
        by_target.setdefault(t["name"], []).append(run)
    chosen, superseded = [], []
    for name in sorted(by_target):
        ranked = sorted(
            by_target[name],
            key=lambda r: (r.current, r.finished, r.doc.get("finished", ""), r.doc.get("started", ""), _doc_key(r.doc)),
            reverse=True,
        )
        chosen.append(ranked[0])
        superseded += [replace(r, superseded=True) for r in ranked[1:]]
    return chosen, superseded


def _cell(text: object, width: int | None = None) -> str:
    """One markdown table cell: one line, '|' escaped, cut to ``width`` characters."""
    s = re.sub(r"\s+", " ", str(text)).strip()
    if width is not None and len(s) > width:
        s = s[: width - 1].rstrip() + "…"
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _ids(ids: list[str]) -> str:
    shown = ", ".join(ids[:GAP_IDS_SHOWN])
    return shown + (f" and {len(ids) - GAP_IDS_SHOWN} more" if len(ids) > GAP_IDS_SHOWN else "")


def _gap_text(gaps: dict[str, str]) -> str:
    by_state: dict[str, list[str]] = {}
    for cid, state in gaps.items():
        by_state.setdefault(state, []).append(cid)
    return "; ".join(f"{state}: {_ids(ids)}" for state, ids in sorted(by_state.items()))


def _level(info: BackendInfo | None, runs: list[_Run], clauses: Mapping[str, Clause], name: str,
           targets: Mapping[str, Target]) -> tuple[str, str]:
    """(level, why) of one backend from its runs."""
    if info is not None and not info.compute:
        return "probe", info.reason or "no compute path in ironaccel yet"
    counted = [r for r in runs if r.current]
    if not counted:
        why = ["no results at the current suite hash"]
        stale = [r.name for r in runs if not r.current]
        if stale:
            why.append(f"stale results only ({', '.join(stale)}): re-run `ironaccel certify`")
        else:
            never = sorted(t.name for t in targets.values() if t.backend == name)
            if never:
                why.append(f"no results for {', '.join(never)}")
        if info is not None and info.reason:
            why.append(info.reason)
        return "unavailable", "; ".join(why)
    hardware = sorted(r.name for r in counted if not r.simulated and _certifies(r, clauses))
    simulated = sorted(r.name for r in counted if r.simulated and _certifies(r, clauses))
    n_required = sum(c.required for c in clauses.values())
    if hardware and simulated:
        return "production", (f"all {n_required} required clauses pass on hardware {', '.join(hardware)} "
                              f"and simulated {', '.join(simulated)}")
    if simulated:
        hw_runs = [r.name for r in counted if not r.simulated]
        hw = (f"no hardware target passes them all ({', '.join(hw_runs)})" if hw_runs
              else "no hardware results")
        return "simulated", f"all {n_required} required clauses pass on simulated {', '.join(simulated)}; {hw}"
    parts = []
    for r in counted:
        passing = n_required - len(_required_gaps(r, clauses))
        note = "" if r.finished else f", run {r.doc['run']['status']}"
        parts.append(f"{r.name}: {passing}/{n_required} required{note}")
    if hardware:
        parts.append("certified on hardware only, no simulated target passes every required clause")
    stale = [r.name for r in runs if not r.current]
    if stale:
        parts.append(f"stale, not counted: {', '.join(stale)}")
    return "partial", "; ".join(parts)


def run_level(doc: dict[str, Any], clauses: Mapping[str, Clause], current_hash: str,
              targets: Mapping[str, Target]) -> tuple[str, str]:
    """(level, why) that one results document earns its backend on its own — a certificate's level."""
    runs, _ = _runs([doc], current_hash, targets)
    return _level(None, runs, clauses, doc["target"]["backend"], targets)


def _areas(clauses: Mapping[str, Clause], runs: list[_Run]) -> list[str]:
    """Spec areas in SPEC.md order, then areas cited by tests but absent from SPEC.md, sorted."""
    known = list(dict.fromkeys(c.area for c in clauses.values()))
    cited = {cid.split("-")[0] for r in runs for t in r.doc["tests"] for cid in t["clauses"]}
    return known + sorted(cited - set(known))


def _matrix(title: str, runs: list[_Run], clauses: Mapping[str, Clause], areas: list[str]) -> list[str]:
    lines = [f"### {title}", ""]
    if not runs:
        return lines + [f"No {title.lower()} results.", ""]
    rows = []
    required = [cid for cid, c in clauses.items() if c.required]
    req_row = ["**required clauses**"]
    for r in runs:
        passing = len(required) - len(_required_gaps(r, clauses))
        req_row.append(f"{passing}/{len(required)}" + ("" if passing == len(required) else " ✗"))
    rows.append(req_row)
    for area in areas:
        row = [f"{area} tests"]
        for r in runs:
            in_area = [t for t in r.doc["tests"] if any(cid.split("-")[0] == area for cid in t["clauses"])]
            passed = sum(t["outcome"] == "pass" for t in in_area)
            row.append("—" if not in_area else f"{passed}/{len(in_area)}" + ("" if passed == len(in_area) else " ✗"))
        rows.append(row)
    return lines + _table(["Spec area"] + [_cell(r.label()) for r in runs], rows) + [""]


def _summary_text(doc: dict[str, Any]) -> str:
    counts = doc["summary"]
    return ", ".join(f"{counts[o]} {o}" for o in results_mod.OUTCOMES if counts.get(o)) or "no tests"


def render(
    results: list[dict[str, Any]],
    clauses: Mapping[str, Clause],
    backends: list[BackendInfo],
    current_hash: str,
    targets: Mapping[str, Target],
) -> str:
    """STATUS.md text from validated results documents; same inputs (in any order), same bytes."""
    runs, superseded = _runs(results, current_hash, targets)
    infos = {b.name: b for b in backends}
    names = sorted(set(infos) | {r.backend for r in runs},
                   key=lambda n: (infos[n].compute is False if n in infos else False, n))
    n_required = sum(c.required for c in clauses.values())
    stale = sum(not r.current for r in runs + superseded)

    out = [
        "# ironaccel status",
        "",
        "<!-- Generated by `ironaccel status` from results/*.json. Do not edit by hand. -->",
        "",
        f"Suite hash `{current_hash}`. SPEC.md has {len(clauses)} clauses ({n_required} required). "
        f"{len(runs) + len(superseded)} results files, {stale} stale.",
        "",
        "## Certification",
        "",
    ]
    rows = []
    for name in names:
        level, why = _level(infos.get(name), [r for r in runs if r.backend == name], clauses, name, targets)
        rows.append([f"**{_cell(name)}**", level, _cell(why)])
    out += _table(["Backend", "Level", "Why"], rows) + [""]

    out += ["## Required clauses not passing", ""]
    gap_lines = []
    for r in runs:
        gaps = _required_gaps(r, clauses)
        if gaps:
            gap_lines.append(f"- **{_cell(r.label())}**: {n_required - len(gaps)}/{n_required} pass; {_gap_text(gaps)}")
    out += (gap_lines or ["None." if runs else "No results."]) + [""]

    areas = _areas(clauses, runs)
    out += ["## Spec areas × targets", "",
            "Passed tests / tests per area; ✗ marks a cell where not all pass (details under Non-passes).", ""]
    out += _matrix("Hardware", [r for r in runs if not r.simulated], clauses, areas)
    out += _matrix("Simulated", [r for r in runs if r.simulated], clauses, areas)

    out += ["## Provenance", ""]
    rows = []
    for r in runs + superseded:
        t, run_state = r.doc["target"], r.doc["run"]["status"]
        if r.doc["run"].get("message"):
            run_state += ": " + r.doc["run"]["message"]
        if r.superseded:
            run_state = "superseded; " + run_state
        suite = r.doc["suite"]["hash"] + ("" if r.current else " **STALE**")
        rows.append([r.name, "simulated" if r.simulated else "hardware", _cell(t.get("device") or "—"),
                     _cell(t.get("driver_version") or "—"), _cell(r.doc.get("finished") or "—"), suite,
                     _cell(run_state, MESSAGE_WIDTH), _summary_text(r.doc)])
    for name in sorted(set(targets) - {r.name for r in runs}):
        rows.append([name, "simulated" if targets[name].simulated else "hardware", "—", "—", "—", "—",
                     "no results", "—"])
    # by target, the run that counts before superseded ones (whose Run cell starts with "superseded")
    rows.sort(key=lambda row: (row[0], row[6].startswith("superseded"), row))
    rows = [[_cell(row[0])] + row[1:] for row in rows]
    out += _table(["Target", "Kind", "Device", "Driver version", "Finished", "Suite hash", "Run", "Tests"], rows)
    out += [""]

    out += ["## Non-passes", ""]
    rows = []
    for r in sorted(runs + superseded, key=lambda r: (r.name, r.superseded, _doc_key(r.doc))):
        label = _cell(r.label())
        if not r.finished:
            rows.append([label, "(the run)", "—", f"run {r.doc['run']['status']}",
                         _cell(r.doc["run"].get("message", ""), MESSAGE_WIDTH)])
        for t in r.tests():
            if t["outcome"] != "pass":
                rows.append([label, _cell(t["id"]), _cell(", ".join(t["clauses"]) or "—"), t["outcome"],
                             _cell(t.get("message", ""), MESSAGE_WIDTH)])
    out += (_table(["Target", "Test", "Clauses", "Outcome", "Message"], rows) if rows
            else ["None." if runs else "No results."]) + [""]

    unknown: dict[str, set[str]] = {}
    for r in runs:
        for t in r.doc["tests"]:
            for cid in t["clauses"] or ["(none)"]:
                if cid not in clauses:
                    unknown.setdefault(cid, set()).add(r.name)
    if unknown:
        out += ["## Clause ids not in SPEC.md", "",
                "Tests cite these ids, which SPEC.md does not define (or cite none); they count toward no clause.", ""]
        out += [f"- `{_cell(cid)}`: {', '.join(sorted(names_))}" for cid, names_ in sorted(unknown.items())] + [""]

    out += ["## Levels", ""]
    out += [f"- **{level}**: {LEVEL_TEXT[level]}." for level in LEVELS]
    out += ["", "A clause passes on a target when the target has at least one test citing it and all of them "
            "passed; a target certifies its backend when its run finished at the current suite hash and every "
            "required clause passes on it. Results at another suite hash are STALE and count toward nothing; "
            "simulated targets (software drivers, the fake libcuda) never count as hardware."]
    return "\n".join(out) + "\n"


def registry_infos() -> list[BackendInfo]:
    """Every registered backend as STATUS.md shows it, built without probing this machine."""
    from .backends import _load, registry
    from .backends.probes import NO_COMPUTE, ProbeBackend

    out = []
    for name, spec in registry().items():
        try:
            cls = _load(spec)
        except Exception as exc:  # a backend module still being written must not stop the report
            out.append(BackendInfo(name, False, f"{spec} does not load: {type(exc).__name__}: {exc}"))
            continue
        if issubclass(cls, ProbeBackend):
            reason = f"probe only: detects the {cls.runtime.title}; {NO_COMPUTE}"
        else:
            reason = "" if cls.compute else NO_COMPUTE
        out.append(BackendInfo(name, False, reason, compute=cls.compute))
    return out


def load_results(results_dir: Path) -> list[dict[str, Any]]:
    """Every results/*.json but certificates, validated (ValueError naming the file and field of a bad one)."""
    paths = sorted(p for p in Path(results_dir).glob("*.json") if not p.name.endswith(CERTIFICATE_SUFFIX))
    return [results_mod.load(p) for p in paths]


def _generate(docs: list[dict[str, Any]]) -> str:
    from . import spec, targets

    return render(docs, spec.load_clauses(), registry_infos(), spec.suite_hash(), targets.standard())


def write(results_dir: Path, output: Path) -> None:
    """Regenerate ``output`` (STATUS.md) from ``results_dir``."""
    Path(output).write_text(_generate(load_results(results_dir)), encoding="utf-8")


def check(results_dir: Path, output: Path) -> bool:
    """True when ``output`` is exactly what ``results_dir`` generates."""
    path = Path(output)
    return path.is_file() and path.read_text(encoding="utf-8") == _generate(load_results(results_dir))


def command(results_dir: Path, output: Path, check: bool = False) -> int:
    """``ironaccel status [--check]``: 0 when written (or, with ``check``, current); 1 when stale."""
    docs = load_results(results_dir)
    text, path = _generate(docs), Path(output)
    if not check:
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path} from {len(docs)} results files in {results_dir}")
        return 0
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    if old == text:
        print(f"{path} is current")
        return 0
    diff = difflib.unified_diff(old.splitlines(), text.splitlines(), str(path), "generated", lineterm="", n=1)
    print(f"{path} is stale: run `ironaccel status` to regenerate it. First differences:", file=sys.stderr)
    print("\n".join(list(diff)[:40]), file=sys.stderr)
    return 1
