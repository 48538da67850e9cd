"""What the site shows, as plain data (also its JSON download): derived from results folders with the
judge's and STATUS.md's own functions, so a level, a clause state or a staleness here is the one STATUS.md
prints for the same files.

A *run* is one folder of results files (the committed ``results/`` or a folder given with ``--runs``); runs
are ordered by the latest ``finished`` time of their files. The matrix, target, clause and test pages show
what counts: ``judge.runs`` over every file of every run (the current, finished, latest file per target),
exactly as STATUS.md would for the same files. History and flake rates are over the runs; diffs compare two
runs target by target with ``judge.compare``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .. import clients as clients_mod
from .. import clients_report
from .. import judge, spec, status, targets as targets_mod
from ..bench import report as bench_report
from ..results import ClauseId, Outcome


@dataclass(frozen=True)
class RunFolder:
    """One run: a folder of results files, the file that counts per target in it (``judge.runs``)."""

    key: str  # "run-1": its place in time order, used in file names
    label: str  # the folder as given
    docs: dict[str, dict[str, Any]]  # target name -> results document
    finished: str


def slug(text: str) -> str:
    """A file name for an id (a test id holds '/', ':', '[' ...): readable part plus a short hash, unique."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:70]
    return f"{readable}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def flake_rate(outcomes: list[str]) -> float | None:
    """Over the runs that ran a test on a target (not-run left out): the share of runs that were flaky or
    whose outcome is not the most common one. 0 when every run agrees on one steady outcome; None: never ran."""
    ran = [o for o in outcomes if o != Outcome.NOT_RUN]
    if not ran:
        return None
    steady = [o for o in ran if o != Outcome.FLAKY]
    most = max((steady.count(o) for o in set(steady)), default=0)
    return round(1 - most / len(ran), 4)


def load_runs(folders: list[Path], current: spec.Current, registry: Mapping[str, Any]) -> list[RunFolder]:
    loaded = []
    for folder in folders:
        chosen, _ = judge.runs(status.load_results(folder), current, registry)
        docs = {r.name: r.doc for r in chosen}
        loaded.append((max((d["finished"] for d in docs.values()), default=""), str(folder), docs))
    loaded.sort(key=lambda item: item[0])  # stable: folders given in one order keep it on ties
    return [RunFolder(f"run-{i + 1}", label, docs, finished) for i, (finished, label, docs) in enumerate(loaded)]


def _diff(old: RunFolder, new: RunFolder) -> dict[str, Any]:
    """piglit's changes pages between two runs, per target both ran: ``judge.compare``'s new failures
    (those not run now listed apart, as newly not-run), fixes and newly flaky tests."""
    per_target = []
    for name in sorted(old.docs.keys() & new.docs.keys()):
        c = judge.compare(old.docs[name], new.docs[name])
        now = {t["id"]: t["outcome"] for t in new.docs[name]["tests"]}
        per_target.append({
            "target": name,
            "new_failures": [t for t in c.new_failures if now[t] != Outcome.NOT_RUN],
            "newly_not_run": [t for t in c.new_failures if now[t] == Outcome.NOT_RUN],
            "fixes": c.fixes, "newly_flaky": c.newly_flaky, "run_worsened": c.run_worsened,
        })
    return {"key": f"{old.key}--{new.key}", "old": old.key, "new": new.key, "targets": per_target,
            "only_old": sorted(old.docs.keys() - new.docs.keys()), "only_new": sorted(new.docs.keys() - old.docs.keys()),
            "changes": sum(len(t[k]) for t in per_target for k in ("new_failures", "newly_not_run", "fixes", "newly_flaky"))}


def _bench(bench_dir: Path) -> list[dict[str, Any]]:
    """The bench reports in ``bench_dir`` (the latest) with their history: the same target's reports in its
    sub-folders (earlier sessions), oldest first."""
    out = []
    if not bench_dir.is_dir():
        return out
    for path in sorted(bench_dir.glob("bench-*.json")):
        rep = bench_report.load(path)
        history = []
        for old in sorted(bench_dir.glob(f"*/{path.name}")):
            past = bench_report.load(old)
            history.append({"label": old.parent.name, "started": past["started"],
                            "ratios": {c["name"]: c["ratios"] for c in past["cases"]}})
        history.sort(key=lambda h: h["started"])
        out.append({"name": path.stem, "report": rep, "others": bench_report.columns(rep), "history": history})
    return out


def _clients(clients_dir: Path) -> dict[str, Any]:
    docs = clients_report.load_results(clients_dir) if clients_dir.is_dir() else []
    by = {(d["client"], d["target"]): d for d in docs}
    per_client = []
    for client in clients_mod.CLIENTS.values():
        runs = {t: by[(client.name, t)] for t in client.targets if (client.name, t) in by}
        if not runs:
            continue
        ids = sorted({tid for d in runs.values() for tid in d["tests"]})
        per_client.append({
            "name": client.name, "targets": list(runs),
            "counts": {t: d["counts"] for t, d in runs.items()},
            "runs": {t: d["run"] for t, d in runs.items()},
            "tests": [{"id": tid, "on": {t: d["tests"].get(tid) for t, d in runs.items()}} for tid in ids]})
    return {"comparisons": clients_report.comparisons(by), "clients": per_client, "outcomes": list(clients_mod.OUTCOMES)}


def build(results_dir: Path, run_dirs: list[Path], clients_dir: Path, bench_dir: Path) -> dict[str, Any]:
    """Everything the site shows, from the folders (``results_dir`` is one run, as are ``run_dirs``)."""
    folders = [Path(results_dir)] + [Path(d) for d in run_dirs]
    docs = [d for f in folders for d in status.load_results(f)]
    registry = targets_mod.reported(d["target"]["name"] for d in docs)
    current = spec.current(list(registry))
    clauses = spec.load_clauses()
    counted, superseded = judge.runs(docs, current, registry)
    runs = load_runs(folders, current, registry)

    infos = {b.name: b for b in status.registry_infos()}
    backends = []
    for name in sorted(set(infos) | {r.backend for r in counted},
                       key=lambda n: (infos[n].compute is False if n in infos else False, n)):
        level, why = judge.backend_level(infos.get(name), [r for r in counted if r.backend == name], clauses, name,
                                         registry)
        backends.append({"name": name, "level": level, "why": why})

    tests: dict[str, dict[str, Any]] = {}
    target_rows = []
    for r in counted:
        level, why = judge.target_level(r, clauses)
        by_clause: dict[str, list[str]] = {}
        for t in r.doc["tests"]:
            for cid in t["clauses"]:
                by_clause.setdefault(cid, []).append(t["outcome"])
            entry = tests.setdefault(t["id"], {"id": t["id"], "slug": slug(t["id"]), "clauses": t["clauses"],
                                               "on": {}, "history": {}, "flake_rate": {}})
            entry["on"][r.name] = {"outcome": t["outcome"], "message": t.get("message", ""),
                                   "duration": t.get("duration")}
        n_required = sum(c.required for c in clauses.values())
        target_rows.append({
            "name": r.name, "slug": slug(r.name), "backend": r.backend, "simulated": r.simulated,
            "label": r.label(), "level": level, "why": why, "stale": list(r.stale), "finished": r.finished,
            "run": r.doc["run"], "summary": r.doc["summary"], "device": r.doc["target"].get("device", ""),
            "driver_version": r.doc["target"].get("driver_version", ""), "when": r.doc["finished"],
            "suite": r.doc["suite"]["hash"], "selection": r.doc.get("selection"),
            "required_passing": n_required - len(judge.required_gaps(r, clauses)), "required": n_required,
            "clause_states": {cid: judge.clause_state(by_clause.get(cid, [])) for cid in clauses}
            | {cid: judge.clause_state(o) for cid, o in by_clause.items() if cid not in clauses},
            "tests": sorted(t["id"] for t in r.doc["tests"]),
        })

    for run in runs:
        for name, doc in run.docs.items():
            for t in doc["tests"]:
                if t["id"] in tests:
                    tests[t["id"]]["history"].setdefault(name, {})[run.key] = t["outcome"]
    for entry in tests.values():
        entry["flake_rate"] = {name: flake_rate(list(h.values())) for name, h in entry["history"].items()}

    cited = {cid for t in tests.values() for cid in t["clauses"]}
    clause_rows = [{"id": c.id, "area": c.area, "required": c.required, "text": c.text, "slug": slug(c.id),
                    "tests": sorted(t["id"] for t in tests.values() if c.id in t["clauses"])}
                   for c in clauses.values()]
    clause_rows += [{"id": cid, "area": ClauseId.parse(cid).area, "required": False, "text": "(not in SPEC.md)",
                     "slug": slug(cid), "tests": sorted(t["id"] for t in tests.values() if cid in t["clauses"])}
                    for cid in sorted(cited - set(clauses))]

    return {
        "suite": current.suite,
        "backends": backends,
        "targets": target_rows,
        "superseded": [{"name": r.name, "label": r.label(), "when": r.doc["finished"]} for r in superseded],
        "clauses": clause_rows,
        "areas": list(dict.fromkeys(c["area"] for c in clause_rows)),
        "tests": [tests[k] for k in sorted(tests)],
        "runs": [{"key": r.key, "label": r.label, "finished": r.finished,
                  "targets": {n: d["summary"] for n, d in sorted(r.docs.items())}} for r in runs],
        "diffs": [_diff(a, b) for i, a in enumerate(runs) for b in runs[i + 1:]],
        "bench": _bench(Path(bench_dir)),
        "clients": _clients(Path(clients_dir)),
        "outcomes": [o.value for o in Outcome],
    }
