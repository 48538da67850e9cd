"""Runs the canary suite through the conformance plugin as ``ironaccel certify`` runs a target, and checks
that every outcome, clause state and verdict is recorded as it must be. Exit 0: all as expected; 1: a
difference (each printed). Run with PYTHONPATH at the ironaccel tree under test:

    python3 ci/mutants/canary_check.py --target cuda/fake --results DIR
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CANARY = Path(__file__).resolve().parent / "canary"

#: test name -> (outcome, whether that outcome fails a run)
EXPECTED = {
    "test_passes": ("pass", False),
    "test_fails": ("fail", True),
    "test_passes_only_when_rerun": ("flaky", False),
    "test_fixture_fails": ("fail", True),
    "test_teardown_fails": ("fail", True),
    "test_expected_failure_fails": ("xfail", False),
    "test_expected_failure_passes": ("xpass", True),
    "test_skipped_by_expectation": ("skip", False),
    "test_not_supported": ("not-supported", False),
    "test_known_flaky_fails": ("flaky", False),
}
CLAUSE_STATES = {"DEV-1": "pass", "MEM-1": "fail", "MEM-2": "flaky", "MEM-3": "fail", "MEM-4": "fail",
                 "MEM-5": "xfail", "MEM-6": "xpass", "COPY-1": "skip", "COPY-2": "not-supported", "COPY-3": "flaky"}


def run_canary(target: str, results_dir: Path) -> Path:
    """The canary run, with certify's own pytest command line (its default per-test limit: a standard run, whose
    level the checks below judge) plus the canary's expectations file."""
    from ironaccel.cts import certify, results, targets

    out = results_dir / results.file_name(target)
    cmd = [sys.executable, "-m", "pytest", *certify.pytest_args(target, out, certify.TEST_TIMEOUT_S, CANARY),
           "--expectations", str(CANARY / "expectations.txt")]
    env = {"HYPOTHESIS_PROFILE": "ci", **os.environ, **targets.get(target).environment()}
    with tempfile.TemporaryDirectory(prefix="ironaccel-canary-") as cwd:
        subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=300)
    return out


def synthetic(doc: dict, clauses: dict, status: str, flaky: str | None = None) -> dict:
    """A copy of ``doc`` with one test per required clause, all passing (``flaky``: that clause's is flaky)."""
    tests = [{"id": f"test_synthetic.py::test_{cid}", "clauses": [cid], "duration": 0.0, "message": "",
              "outcome": "flaky" if cid == flaky else "pass"} for cid, c in clauses.items() if c.required]
    return {**doc, "tests": tests, "run": {"status": status, "message": ""}}


def check(results_file: Path) -> list[str]:
    from ironaccel.cts import judge, results, spec
    from ironaccel.cts.results import Outcome

    problems = []
    if not results_file.exists():
        return [f"the canary run wrote no results file ({results_file})"]
    doc = results.load(results_file)
    if doc["run"]["status"] != "ok":
        problems.append(f"run status {doc['run']['status']!r}, expected 'ok': {doc['run']['message']}")
    got = {t["id"].split("::", 1)[1]: t["outcome"] for t in doc["tests"]}
    for name, (outcome, failure) in EXPECTED.items():
        if got.get(name) != outcome:
            problems.append(f"{name}: recorded {got.get(name)!r}, expected {outcome!r}")
        if Outcome(outcome).failure != failure:
            problems.append(f"outcome {outcome!r}: Outcome.failure is {not failure}, expected {failure}")
    if results.without_failures(doc["run"]["status"], doc["summary"]):
        problems.append("a run with failing tests counts as without failures")
    clauses = spec.load_clauses()
    states = judge.required_clause_states(doc, clauses)
    for cid, state in CLAUSE_STATES.items():
        if states.get(cid) != state:
            problems.append(f"clause {cid}: state {states.get(cid)!r}, expected {state!r}")
    for status, flaky, level in (("ok", None, "simulated"), ("crashed", None, "partial"), ("ok", "MEM-1", "partial")):
        run = judge.Run(synthetic(doc, clauses, status, flaky), simulated=True, stale=())
        got_level = judge.target_level(run, clauses)[0]
        if got_level != level:
            problems.append(f"a run {status} with {'a flaky' if flaky else 'every'} required clause passing "
                            f"proves {got_level!r}, expected {level!r}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cuda/fake")
    parser.add_argument("--results", type=Path, required=True)
    args = parser.parse_args()
    args.results.mkdir(parents=True, exist_ok=True)
    problems = check(run_canary(args.target, args.results.resolve()))
    for p in problems:
        print(f"canary: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
