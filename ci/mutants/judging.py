"""One mutant judged in its own copy of the tree (``generated.py``): applied, its C build (if any) made in a
cache of its own, then certified with the tests that execute it, fail-fast, and compared with the baseline.

A C mutant counts only if the run loaded the mutant's build: the results file's ``builds`` must report the
source hash of the mutated sources, else the mutant is "not built" (never "survived", never "killed")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import modules
from covered import PASSING, Coverage
from operators import Mutant
from run import certify
from tree import copy_tree, private_cache, python_path

from ironaccel.cache import cache_dir

BUILD_LIMIT = 600  # seconds to build a mutant's C (a fake mutant compiles its file and the one naming the hash)


@dataclass
class Candidate:
    mutant: Mutant
    area: str
    run: modules.Run | None  # None: the platform's unit tests
    tests: list[str]


@dataclass
class Outcome:
    candidate: Candidate
    status: str  # killed, survived, not built
    seconds: float = 0.0
    killers: list[str] = field(default_factory=list)
    detail: str = ""
    ran: int = 0  # tests run


def mutant_env(c: Candidate, tree: Path, scratch: Path) -> dict[str, str]:
    """A C mutant's build goes to a cache of its own (the other builds are the shared cache's), compiled by
    ``cc.py``, which reuses the objects of the sources the mutant leaves alone."""
    env = {**os.environ, "PYTHONPATH": python_path(tree), "HYPOTHESIS_PROFILE": "ci", "PYTEST_ADDOPTS": "--maxfail=1"}
    if c.run is not None:
        env.update(c.run.env)
    if c.mutant.file.endswith((".c", ".inc", ".h")):
        env.update(private_cache(scratch / "cache", (modules.c_build_of(c.mutant.file).cache,),
                                 cache_dir() / "mutants" / "objects"))
    return env


def build_mutant(c: Candidate, tree: Path, env: dict[str, str]) -> tuple[str | None, str]:
    """(the source hash of the mutant's build, '') once built; (None, why) when it could not be."""
    build = modules.c_build_of(c.mutant.file)
    try:
        proc = subprocess.run([sys.executable, "-c", build.build], cwd=tree, env=env, capture_output=True, text=True,
                              timeout=BUILD_LIMIT)
    except subprocess.TimeoutExpired:
        return None, f"the {build.cache} build ran past {BUILD_LIMIT} s"
    lines = proc.stdout.split()
    if proc.returncode or not lines:
        return None, f"the {build.cache} build failed: {proc.stderr.strip()[-300:]}"
    return lines[-1], ""


def run_candidate(c: Candidate, snapshot: Path, baselines: dict[str, Coverage], limit: float,
                  test_timeout: float, platform: bool) -> Outcome:
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ironaccel-mutant-") as tmp:
        scratch = Path(tmp)
        tree = scratch / "tree"
        tree.mkdir()
        copy_tree(tree, snapshot, platform)
        path = tree / c.mutant.file
        path.write_text(c.mutant.apply(path.read_text(encoding="utf-8")), encoding="utf-8")
        env = mutant_env(c, tree, scratch)
        if platform:
            return _unit_tests(c, tree, env, limit, test_timeout, t0)
        built = None
        if "IRONACCEL_CACHE" in env:
            built, problem = build_mutant(c, tree, env)
            if built is None:
                return Outcome(c, "not built", time.monotonic() - t0, detail=problem)
        # a hang is a kill: give the tests what they took unmutated, four times over, and a minute to start
        base = baselines[c.run.name]
        limit = min(limit, 60 + 4 * sum(base.durations.get(t, 1.0) for t in c.tests))
        doc, problem = certify(tree, c.run.target, env, scratch / "results", tuple(c.tests), limit, test_timeout)
        if doc is None:
            return Outcome(c, "killed", time.monotonic() - t0, detail=problem, ran=len(c.tests))
        got = {t["id"]: t["outcome"] for t in doc["tests"]}
        killers = [f"{tid} ({got[tid]})" for tid in c.tests if tid in got and got[tid] != base.outcomes.get(tid)
                   and got[tid] not in PASSING + ("not-run",)]
        ran = sum(1 for tid in c.tests if got.get(tid) not in (None, "not-run"))
        # fail-fast (--maxfail=1) leaves the tests after the first failure not run: the run says so, and a
        # run that did not finish is a kill whatever the tests say
        problem = "" if doc["run"]["status"] == "ok" else f"run {doc['run']['status']}: {doc['run']['message'][:200]}"
        status = "killed" if killers or problem else "survived"
        if built is not None:  # a run that failed before it could say what it loaded (no device) is a kill
            key = modules.c_build_of(c.mutant.file).reported
            loaded = (doc.get("builds") or {}).get(key)
            if loaded != built and (loaded is not None or status == "survived"):
                return Outcome(c, "not built", time.monotonic() - t0, ran=ran,
                               detail=f"the run loaded the {key} build {loaded}, not the mutant's {built}")
        return Outcome(c, status, time.monotonic() - t0, killers,
                       problem if status == "killed" else f"{ran} tests ran, all as in the baseline", ran)


def _unit_tests(c: Candidate, tree: Path, env: dict[str, str], limit: float, test_timeout: float,
                t0: float) -> Outcome:
    """The platform's mutant: pytest -x on the unit tests that execute its line; killed when it does not exit 0."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0",
           "--timeout", f"{test_timeout:g}", *c.tests]
    env.pop("PYTEST_ADDOPTS")
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return Outcome(c, "killed", time.monotonic() - t0, detail=f"pytest ran past {limit:g} s", ran=len(c.tests))
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)
    status = "survived" if proc.returncode == 0 else "killed"
    detail = "" if failed or status == "survived" else f"pytest exited {proc.returncode}: " + proc.stdout.strip()[-200:]
    return Outcome(c, status, time.monotonic() - t0, failed, detail, len(c.tests))
