"""Runs the conformance suite on targets, each in its own process, and writes their results files.

A target process that crashes or hangs is never lost: the plugin rewrites its results file after every test
(status "crashed" until the run ends), and on a timeout the process is killed and the file marked "timeout".
A target that wrote no file at all gets one here saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from . import __version__, results, targets
from .spec import conformance_dir, suite_hash

TARGET_TIMEOUT_S = 1800


@dataclass
class TargetRun:
    target: str
    results_file: Path
    status: str = "not-run"
    summary: dict[str, int] | None = None
    seconds: float = 0.0
    message: str = ""

    @property
    def ok(self) -> bool:
        s = self.summary or {}
        return self.status == "ok" and not s.get("fail") and not s.get("xpass") and sum(s.values()) > 0


def runnable_targets() -> list[str]:
    """Every target this machine can run (``ironaccel doctor`` explains the others)."""
    return [name for name, t in targets.TARGETS.items() if t.missing() is None]


def _placeholder(target: targets.Target, status: str, message: str, started: str) -> dict:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "schema": results.SCHEMA_VERSION,
        "suite": {"version": __version__, "hash": suite_hash()},
        "target": {"name": target.name, "backend": target.backend, "driver": target.driver, "driver_version": "",
                   "device": "", "vendor": "", "simulated": target.simulated, "os": "", "python": "", "packages": {}},
        "started": started, "finished": now,
        "run": {"status": status, "message": message},
        "tests": [], "summary": results.summarize([]),
    }


def run_target(name: str, results_dir: Path, timeout_s: float = TARGET_TIMEOUT_S, extra_args: tuple[str, ...] = ()) -> TargetRun:
    target = targets.get(name)
    results_dir = results_dir.resolve()
    out = results_dir / results.file_name(name)
    run = TargetRun(name, out)
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", str(conformance_dir()), "-p", "ironaccel.pytest_plugin",
           "-p", "no:cacheprovider", "--rootdir", str(conformance_dir()), "-q", "--target", name,
           "--results-json", str(out), *extra_args]
    env = {**os.environ, **target.environment()}
    out.unlink(missing_ok=True)
    log = results_dir / f".{out.stem}.log"
    with open(log, "w", encoding="utf-8") as log_file:
        # cwd away from any checkout: `ironaccel` must import from where it is installed (or PYTHONPATH)
        proc = subprocess.Popen(cmd, env=env, cwd=results_dir, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            timed_out = True
    run.seconds = time.monotonic() - t0
    if out.exists():
        doc = json.loads(out.read_text(encoding="utf-8"))
        if timed_out:
            doc["run"] = {"status": "timeout", "message": f"killed after {timeout_s:.0f} s"}
            results.dump(doc, out)
        elif doc["run"]["status"] == "crashed":
            doc["run"]["message"] = f"the test process exited with code {proc.returncode} before finishing"
            results.dump(doc, out)
    else:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
        status = "timeout" if timed_out else "crashed"
        results.dump(_placeholder(target, status, f"exit code {proc.returncode}: " + " / ".join(tail), started), out)
    doc = results.load(out)
    run.status, run.summary, run.message = doc["run"]["status"], doc["summary"], doc["run"]["message"]
    if run.ok:
        log.unlink(missing_ok=True)
    else:
        run.message = (run.message + f" (log: {log})").strip()
    return run


def certify(names: list[str], results_dir: Path, jobs: int | None = None, timeout_s: float = TARGET_TIMEOUT_S,
            echo=print) -> list[TargetRun]:
    """Run ``names`` in parallel processes (bounded by cores); print progress; return every run."""
    results_dir.mkdir(parents=True, exist_ok=True)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(names)))
    echo(f"certifying {len(names)} target(s) with {jobs} process(es): {', '.join(names)}")

    def one(name: str) -> TargetRun:
        echo(f"  start  {name}")
        run = run_target(name, results_dir, timeout_s)
        echo(f"  done   {name}: {run.status}, {_counts(run)} in {run.seconds:.1f} s")
        return run

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, names))


def _counts(run: TargetRun) -> str:
    s = run.summary or {}
    return ", ".join(f"{v} {k}" for k, v in s.items() if v) or "no tests"


def summary_table(runs: list[TargetRun]) -> str:
    rows = [("target", "run", "result", "outcomes", "seconds")]
    for r in runs:
        rows.append((r.target, r.status, "OK" if r.ok else "FAILED", _counts(r), f"{r.seconds:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in runs:
        if not r.ok and r.message:
            lines.append(f"{r.target}: {r.message}")
    return "\n".join(lines)
