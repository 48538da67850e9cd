"""The perf gate: ``ironaccel bench --check BASELINE`` fails when a hot path got slower than the committed baseline.

What is compared is a ratio, never a time: each gated row's ironaccel time over its floor's (the C floor or the
raw calls, ``cases``), measured in the same paired rounds, so a machine that is slower or busier than the one that
made the baseline slows both sides of a pair alike. A row fails when the whole 95% interval of its ratio lies
above ``THRESHOLD`` times the baseline's ratio; a row that cannot be measured, or a run whose hot path differs
from the baseline's (compiled or pure Python), fails too.

How the rows and settings were chosen (measured on a 2-core machine under a load of 5-60: README, "Perf gate"):
samples are short (``SAMPLE_MS``), so that most pairs run between two preemptions of a loaded machine, and
many (``SAMPLES``), so that the median ratio ignores the pairs a preemption hit; a row is gated only where its
ratio stayed within about 20% above its median across runs and held under tox, which leaves out the rows whose
time is a hand-off between threads (the simulated driver's, a backend's helper thread) that load stretches on one
side of a pair more than on the other.

The baseline (``benchmarks/baseline/gate.json``) is made on purpose, never by CI:
``ironaccel bench --write-baseline benchmarks/baseline/gate.json`` measures every gated target ``RUNS`` times
and keeps each row's highest median ratio over the runs, with every run's ratio beside it (their spread). Each
target is measured in a process of its own, its driver selected as ``ironaccel bench --backend`` selects it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...errors import InvalidArgument
from .. import tables
from ..results import now
from .cases import FLOOR, OURS
from .report import read_json

SCHEMA = 1
TOOL = "ironaccel bench --check baseline"
THRESHOLD = 1.15  # a row fails when its whole interval is past this times the baseline's ratio
SAMPLES = 201
SAMPLE_MS = 0.2
RUNS = 5  # runs per target that make a baseline
CHILD_TIMEOUT_S = 240.0
REGENERATE = "ironaccel bench --write-baseline benchmarks/baseline/gate.json"

#: The gated rows of each target and the floor each is divided by (why these: the module's docstring).
GATE: dict[str, dict[str, str]] = {
    "cuda/fake": {
        "stream_sync": FLOOR,
        "event_record_sync": FLOOR,
        "launch.sync": FLOOR,
        "dtoh.pinned.256": FLOOR,
        "htod.pageable.65536": FLOOR,
    },
    "webgpu/lavapipe": {
        "alloc_free.device": FLOOR,
        "launch.sync": FLOOR,
    },
}


class NotMeasured(Exception):
    """A target's bench process gave no report (its message says why)."""


def measure(target: str, rows: dict[str, str], samples: int, sample_ms: float) -> dict[str, Any]:
    """One bench run of ``rows`` on ``target`` in a child process (its driver chosen there); the report."""
    with tempfile.TemporaryDirectory(prefix="ironaccel-gate-") as folder:
        out = Path(folder) / "report.json"
        command = [sys.executable, "-c", "import sys; from ironaccel.cts.bench import gate; gate.child(sys.argv[1:])",
                   target, ",".join(rows), str(samples), str(sample_ms), str(out)]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise NotMeasured(f"{target}: no report within {CHILD_TIMEOUT_S:.0f} s") from None
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            raise NotMeasured(f"{target}: the bench did not run: {tail}")
        return json.loads(out.read_text(encoding="utf-8"))


def ratios(report: dict[str, Any], rows: dict[str, str]) -> dict[str, dict[str, float] | str]:
    """Each gated row's ratio to its floor in a report, or why the report has none."""
    by_name = {case["name"]: case for case in report["cases"]}
    out: dict[str, dict[str, float] | str] = {}
    for row, floor in rows.items():
        case = by_name.get(row)
        if case is None:
            out[row] = "not measured on this target"
        elif floor not in case["ratios"]:
            errors = case["errors"].get(OURS) or case["errors"].get(floor) or "no figure"
            out[row] = f"no ratio to {floor}: {errors}"
        else:
            out[row] = case["ratios"][floor]
    return out


def make_baseline(targets: dict[str, dict[str, str]], runs: int = RUNS, samples: int = SAMPLES,
                  sample_ms: float = SAMPLE_MS, log=print) -> dict[str, Any]:
    """Measure every target ``runs`` times; each row's ratio is the highest of the runs' median ratios, so that
    the spread between runs seen while making the baseline can never fail the gate on its own."""
    made: dict[str, Any] = {}
    for target, rows in targets.items():
        reports = []
        for i in range(runs):
            reports.append(measure(target, rows, samples, sample_ms))
            log(f"{target}: run {i + 1} of {runs}")
        entries = {}
        for row, floor in rows.items():
            found = [ratios(r, rows)[row] for r in reports]
            missing = [f for f in found if isinstance(f, str)]
            if missing:
                raise NotMeasured(f"{target} {row}: {missing[0]}")
            medians = [f["median"] for f in found]  # type: ignore[index]
            entries[row] = {"against": floor, "label": _label(reports[0], row),
                            "ratio": max(medians), "runs": medians}
        made[target] = {"compiled_hot_path": reports[0]["compiled_hot_path"], "device": reports[0]["target"]["device"],
                        "rows": entries}
    return {"tool": TOOL, "schema": SCHEMA, "threshold": THRESHOLD, "samples": samples, "sample_ms": sample_ms,
            "runs": runs, "made": now(), "regenerate": REGENERATE, "targets": made}


def _label(report: dict[str, Any], row: str) -> str:
    return next(case["label"] for case in report["cases"] if case["name"] == row)


def load_baseline(path: Path) -> dict[str, Any]:
    """A baseline written by ``--write-baseline``; InvalidArgument naming the file when it is not one."""
    op = "bench --check"
    baseline = read_json(path, op)
    if not isinstance(baseline, dict) or baseline.get("tool") != TOOL or baseline.get("schema") != SCHEMA:
        raise InvalidArgument(op, f"{path} is not a perf-gate baseline (make one with: {REGENERATE})")
    return baseline


def verdicts(baseline: dict[str, Any], reports: dict[str, dict[str, Any] | str]) -> list[dict[str, Any]]:
    """One verdict per gated row: ``ok``, ``faster`` (the whole interval below baseline / threshold: time to
    regenerate the baseline) or ``FAILED`` (slower, not measured, or another hot path), with why."""
    threshold = baseline["threshold"]
    out = []
    for target, gated in baseline["targets"].items():
        report = reports.get(target, "not run")
        rows = {row: entry["against"] for row, entry in gated["rows"].items()}
        found = ratios(report, rows) if isinstance(report, dict) else dict.fromkeys(rows, report)
        hot_path = report.get("compiled_hot_path") if isinstance(report, dict) else None
        for row, entry in gated["rows"].items():
            base = entry["ratio"]
            verdict = {"target": target, "row": row, "label": entry["label"], "against": entry["against"],
                       "baseline": base, "limit": base * threshold, "measured": None}
            ratio = found[row]
            if isinstance(ratio, str):
                verdict.update(verdict="FAILED", why=ratio)
            elif hot_path != gated["compiled_hot_path"]:
                verdict.update(measured=ratio, verdict="FAILED",
                               why=f"hot path {hot_path!r}, the baseline's {gated['compiled_hot_path']!r}")
            elif ratio["ci_low"] > base * threshold:
                verdict.update(measured=ratio, verdict="FAILED",
                               why=f"slower: the whole interval is above {threshold:.2f}x the baseline's ratio")
            elif ratio["ci_high"] < base / threshold:
                verdict.update(measured=ratio, verdict="faster", why=f"regenerate the baseline: {REGENERATE}")
            else:
                verdict.update(measured=ratio, verdict="ok", why="")
            out.append(verdict)
    return out


def markdown(verdicts_: list[dict[str, Any]], baseline: dict[str, Any]) -> str:
    head = ["target", "operation", "vs", "baseline ratio", "limit", "measured ratio [95% interval]", "verdict"]
    rows = []
    for v in verdicts_:
        m = v["measured"]
        measured = f"{m['median']:.2f}× [{m['ci_low']:.2f}–{m['ci_high']:.2f}]" if m else "—"
        rows.append([v["target"], v["label"], v["against"], f"{v['baseline']:.2f}×", f"{v['limit']:.2f}×", measured,
                     v["verdict"] + (f": {v['why']}" if v["why"] else "")])
    failed = sum(v["verdict"] == "FAILED" for v in verdicts_)
    settings = (f"Baseline made {baseline['made'][:10]} ({baseline['runs']} runs of {baseline['samples']} paired rounds "
                f"of {baseline['sample_ms']} ms); a row fails when its whole interval is above the limit "
                f"({baseline['threshold']:.2f}× the baseline's ratio). SIMULATED targets: ratios of host-side work.")
    lines = [f"# ironaccel perf gate: {'FAILED' if failed else 'passed'} ({failed} of {len(verdicts_)} rows failed)", "",
             settings, ""]
    return "\n".join(lines + tables.markdown(head, rows)) + "\n"


def _measure_all(baseline: dict[str, Any], only: set[tuple[str, str]] | None = None
                 ) -> dict[str, dict[str, Any] | str]:
    """Every target of the baseline measured (``only``: just these (target, row) pairs); a report or why none."""
    reports: dict[str, dict[str, Any] | str] = {}
    for target, gated in baseline["targets"].items():
        rows = {row: e["against"] for row, e in gated["rows"].items() if only is None or (target, row) in only}
        if rows:
            try:
                reports[target] = measure(target, rows, baseline["samples"], baseline["sample_ms"])
            except NotMeasured as exc:
                reports[target] = str(exc)
    return reports


def check(baseline_path: Path, out: Path | None, log=print) -> int:
    """``bench --check``: 0 when every row passes, 1 when one fails; the table and the reports into ``out``.

    A row found slower is measured once more, in a new process, and fails only when it is slower again: a true
    regression is slower every time, a burst of load on a shared machine seldom twice (README, "Perf gate")."""
    baseline = load_baseline(baseline_path)
    reports = _measure_all(baseline)
    found = verdicts(baseline, reports)
    slower = {(v["target"], v["row"]) for v in found if v["verdict"] == "FAILED" and v["measured"] is not None}
    if slower:
        log(f"slower on a first run, measured again: {', '.join(f'{t} {r}' for t, r in sorted(slower))}")
        again = verdicts(_subset(baseline, slower), _measure_all(baseline, slower))
        by_row = {(v["target"], v["row"]): v for v in again}
        found = [by_row.get((v["target"], v["row"]), v) for v in found]
        for v in found:
            if (v["target"], v["row"]) in slower:
                v["why"] = (v["why"] + "; " if v["why"] else "") + "measured twice"
    text = markdown(found, baseline)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "gate.md").write_text(text, encoding="utf-8")
        for target, report in reports.items():
            if isinstance(report, dict):
                name = target.replace("/", "-")
                (out / f"gate-{name}.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    log(text.rstrip())
    return 1 if any(v["verdict"] == "FAILED" for v in found) else 0


def _subset(baseline: dict[str, Any], keep: set[tuple[str, str]]) -> dict[str, Any]:
    """The baseline with only the (target, row) pairs in ``keep``."""
    targets = {}
    for target, gated in baseline["targets"].items():
        rows = {row: e for row, e in gated["rows"].items() if (target, row) in keep}
        if rows:
            targets[target] = {**gated, "rows": rows}
    return {**baseline, "targets": targets}


def write_baseline(path: Path, log=print) -> int:
    """``bench --write-baseline``: measure the gated targets and write the baseline to ``path``."""
    baseline = make_baseline(GATE, log=log)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(baseline, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    log(str(path))
    return 0


def child(argv: Iterable[str]) -> None:
    """The measuring process: TARGET ROWS SAMPLES SAMPLE_MS OUT.json (what ``measure`` starts)."""
    p = argparse.ArgumentParser(prog="gate.child")
    for name in ("target", "rows", "samples", "sample_ms", "out"):
        p.add_argument(name)
    a = p.parse_args(list(argv))
    from .runner import run

    report = run(a.target, peers=False, quick=False, samples=int(a.samples), sample_ms=float(a.sample_ms),
                 rows=a.rows.split(","), log=lambda line: None)
    Path(a.out).write_text(json.dumps(report) + "\n", encoding="utf-8")
