"""One mutant judged in its own copy of the tree (``generated.py``): applied, its C build (if any) made in a
cache of its own, then certified with the tests that execute it, fail-fast, and compared with the baseline (a
line run at import: on each run that imports it, since its value may matter on one alone); a survivor is
escalated to the rest of the suite (every other test that passes unmutated, fail-fast) on its run and on
every other run that executes the line (another target's test may be the one that shows it), since the
covering tests are a sample (at most --max-tests), a module-level line is "covered" by every test, and what
runs in a session fixture's setup is credited to the first test alone: a survivor is one the whole suite
misses (issue 23: killed by the conformance suite alone, any test of it). A platform mutant is judged the
same way by the unit tests (pytest -x): its covering tests, then the rest of the platform's (issue 32).

A C mutant counts only if the run loaded the mutant's build: the results file's ``builds`` must report the
source hash of the mutated sources, else the mutant is "not built" (never "survived", never "killed"). A run the
machine kept from starting its processes on every try (run.certify's MACHINE_EXHAUSTED) is "not judged", likewise."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import modules
from covered import Coverage
from operators import Mutant
from run import NOT_JUDGED, caught, certify, reaped
from tree import copy_tree, private_cache, python_path, unshared_cache

from ironaccel.cache import cache_dir

BUILD_LIMIT = 600  # seconds to build a mutant's C (a fake mutant compiles its file and the one naming the hash)
SLOWDOWN = 4  # a certify run past this many times its tests' unmutated time (and a minute) is a hang: a kill


@dataclass
class Candidate:
    mutant: Mutant
    area: str
    run: modules.Run | None  # None: the platform's unit tests
    tests: list[str]
    #: the area's other runs that execute the line, with their tests that do (a line run at import: that run its
    #: file; its value may be used on one run only: a default another backend leaves to it)
    others: list[tuple[modules.Run, list[str]]] = field(default_factory=list)
    #: run name ("unit tests": the platform's) -> every test that executes the line there, before --max-tests
    #: chose ``tests``: the escalation runs those first (``likely_first``)
    executing: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Other:
    """Another run that executes the mutant's line: its judge, its covering tests and their time limit, its
    baseline, and the tests of that run that execute the line."""
    name: str
    judge: Callable[[list[str], str, float], tuple[str, list[str], str, int]]
    tests: list[str]
    base: Coverage
    covering: float
    executing: list[str]


@dataclass
class Outcome:
    candidate: Candidate
    status: str  # killed, survived, not built
    seconds: float = 0.0
    killers: list[str] = field(default_factory=list)
    detail: str = ""
    ran: int = 0  # covering tests run
    stage: str = ""  # a kill's: "covering" (its covering tests), "other run" (those of another run, ``others``)
    # or "suite" (the escalation to the rest of the suite)
    escalated: int = 0  # tests the escalation ran
    escalation_s: float = 0.0
    killed_on: str = ""  # a kill's run, when not the mutant's first (``Candidate.run``): another run's tests killed it


def mutant_env(c: Candidate, tree: Path, scratch: Path) -> dict[str, str]:
    """A C mutant's build goes to a cache of its own (the other builds are the shared cache's), compiled by
    ``cc.py``, which reuses the objects of the sources the mutant leaves alone; a mutant of a file that fills a
    cache (``modules.CACHE_WRITERS``) fills one of its own."""
    env = {**os.environ, "PYTHONPATH": python_path(tree), "HYPOTHESIS_PROFILE": "ci", "PYTEST_ADDOPTS": "--maxfail=1"}
    if c.run is not None:
        env = c.run.environment(env)
    if is_c(c.mutant.file):
        env.update(private_cache(scratch / "cache", (modules.c_build_of(c.mutant.file).cache,),
                                 cache_dir() / "mutants" / "objects"))
    elif c.mutant.file in modules.CACHE_WRITERS:
        env.update(unshared_cache(scratch / "cache", (modules.CACHE_WRITERS[c.mutant.file],)))
    return env


def is_c(file: str) -> bool:
    return file.endswith((".c", ".inc", ".h"))


def build_mutant(c: Candidate, tree: Path, env: dict[str, str]) -> tuple[str | None, str]:
    """(the source hash of the mutant's build, '') once built; (None, why) when it could not be. The build
    imports ironaccel with the compiled module off: a mutant that compiles but breaks the module's import
    (PyInit reading past its table) is built, and its run, which loads it, shows what a user would see."""
    build = modules.c_build_of(c.mutant.file)
    try:
        proc = subprocess.run([sys.executable, "-c", build.build], cwd=tree, env={**env, "IRONACCEL_PURE_PYTHON": "1"},
                              capture_output=True, text=True, timeout=BUILD_LIMIT)
    except subprocess.TimeoutExpired:
        return None, f"the {build.cache} build ran past {BUILD_LIMIT} s"
    lines = proc.stdout.split()
    if proc.returncode or not lines:
        return None, f"the {build.cache} build failed: {proc.stderr.strip()[-300:]}"
    return lines[-1], ""


def run_candidate(c: Candidate, snapshot: Path, baselines: dict[str, Coverage], limit: float,
                  test_timeout: float, platform: bool) -> Outcome:
    """The mutant's verdict (``escalated``): the platform's by the unit tests (pytest), the suite's by certify
    on its run, a C mutant's once its build is made."""
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
            return escalated(c, baselines["unit tests"], limit, t0,
                             lambda tests, stage, seconds: _unit_tests(tree, env, tests, seconds, test_timeout),
                             executing=c.executing.get("unit tests", c.tests))
        built = None
        if is_c(c.mutant.file):
            built, problem = build_mutant(c, tree, env)
            if built is None:
                return Outcome(c, "not built", time.monotonic() - t0, detail=problem)
        base = baselines[c.run.name]

        def on(run: modules.Run) -> Callable[[list[str], str, float], tuple[str, list[str], str, int]]:
            """The judge of another run that executes the line, against that run's baseline; a C mutant's build
            for that run made first (its own flags: the sanitized run's is another build), when it is judged."""
            other = replace(c, run=run)
            folder = scratch / run.name.replace("/", "-").replace(" ", "-")

            def judge(tests: list[str], stage: str, seconds: float) -> tuple[str, list[str], str, int]:
                other_env = mutant_env(other, tree, scratch)
                made = None
                if built is not None:
                    made, problem = build_mutant(other, tree, other_env)  # a cache hit once made
                    if made is None:
                        return "not built", [], f"{run.name}: {problem}", 0
                return _judged(other, tree, other_env, folder / stage, baselines[run.name], tests, seconds,
                               test_timeout, made)
            return judge
        return escalated(c, base, covering_limit(base, c.tests, limit), t0, lambda tests, stage, seconds: _judged(
            c, tree, env, scratch / stage, base, tests, seconds, test_timeout, built),
            [Other(r.name, on(r), tests, baselines[r.name], covering_limit(baselines[r.name], tests, limit),
                   c.executing.get(r.name, tests)) for r, tests in c.others],
            c.executing.get(c.run.name, c.tests))


def covering_limit(base: Coverage, tests: list[str], limit: float) -> float:
    """A hang is a kill: the tests get what they took unmutated, SLOWDOWN times over, and a minute to start."""
    return min(limit, 60 + SLOWDOWN * sum(base.durations.get(t, 1.0) for t in tests))


def test_limit(base: Coverage, tests: list[str], test_timeout: float) -> float:
    """The per-test timeout of a run of ``tests``: ``test_timeout``, or SLOWDOWN times the slowest of them
    unmutated where that is more (a test that takes 31 s unmutated, GLSL's endless-macro refusal, timed out at
    30 s under any mutant: a kill of the machine, not of the mutant)."""
    return max(test_timeout, SLOWDOWN * max((base.durations.get(t, 0.0) for t in tests), default=0.0))


def likely_first(rest: list[str], executing: list[str]) -> list[list[str]]:
    """The escalation's tests in two runs, fail-fast, the likely killers first: those that execute the line but
    --max-tests left out (of the suite kills of a full sample, most were by one of them, hundreds of tests into
    the suite's order); then the rest. Either may be empty (not run). Each run keeps the suite's order."""
    ran = set(executing)
    likely = [t for t in rest if t in ran]
    return [part for part in (likely, [t for t in rest if t not in ran]) if part]


def escalated(c: Candidate, base: Coverage, covering: float, t0: float,
              judge: Callable[[list[str], str, float], tuple[str, list[str], str, int]],
              others: list[Other] = (), executing: list[str] = ()) -> Outcome:
    """The rule of both runners: the mutant's covering tests first (within ``covering`` seconds), then its tests
    on each other run that executes its line (``others``); a survivor of those is escalated to every other test
    that passes unmutated on its run (fail-fast, the likely killers first: ``likely_first``; each of its two runs
    within 60 s + SLOWDOWN times the recorded run's time), then on each other run that executes its line (a
    module-level default of api.py that one backend alone leaves to it shows on that backend's run alone, by a
    test the covering sample may leave out), and survives only if those miss it too.
    ``judge(tests, stage, seconds)`` runs ``tests`` on the mutant: (status, killers, detail, tests run)."""
    status, killers, detail, ran = judge(c.tests, "covering", covering)
    if status != "survived":
        return Outcome(c, status, time.monotonic() - t0, killers, detail, ran,
                       stage="covering" if status == "killed" else "")
    for other in others:
        status, killers, detail, more = other.judge(other.tests, "covering", other.covering)
        ran += more
        if status != "survived":
            return Outcome(c, status, time.monotonic() - t0, killers, detail, ran,
                           stage="other run" if status == "killed" else "",
                           killed_on=other.name if status == "killed" else "")
    t1 = time.monotonic()
    escalations = [("", judge, base, c.tests, executing or c.tests)] + \
        [(o.name, o.judge, o.base, o.tests, o.executing) for o in others]
    more = 0
    for name, judge_on, base_on, tests_on, executing_on in escalations:
        for i, part in enumerate(likely_first(sorted(base_on.usable() - set(tests_on)), executing_on)):
            status, killers, detail, count = judge_on(part, f"suite-{i}", 60 + SLOWDOWN * base_on.seconds)
            more += count
            if status != "survived":
                return Outcome(c, status, time.monotonic() - t0, killers, detail, ran, stage="suite",
                               escalated=more, escalation_s=time.monotonic() - t1,
                               killed_on=name if status == "killed" else "")
    if status == "survived" and more:
        runs = f" (on {len(c.others) + 1} runs)" if c.others else ""
        detail = f"{ran} covering tests{runs} and the suite's {more} others ran, all as in the baseline"
    return Outcome(c, status, time.monotonic() - t0, killers, detail, ran,
                   escalated=more, escalation_s=time.monotonic() - t1 if more else 0.0)


def _judged(c: Candidate, tree: Path, env: dict[str, str], results: Path, base: Coverage, tests: list[str],
            limit: float, test_timeout: float, built: str | None) -> tuple[str, list[str], str, int]:
    """(status, killers, detail, tests run) of ``certify --only`` on ``tests``, against the baseline: killed
    when a test's outcome differs from the baseline's (``run.caught``) or the run did not finish. A kill by
    flaky outcomes alone (a test that passed only when re-run) is confirmed by one more run of those tests, and
    stands only where that run fails one of them outright (or does not finish): a loaded machine, or the
    sanitized build, makes a timing- or memory-sensitive test flaky unmutated too, so a test that passes on a
    re-run twice shows no difference (a kill counted from it inflated the fake's figure, session 29)."""
    test_timeout = test_limit(base, tests, test_timeout)
    doc, problem = certify(tree, c.run.target, env, results, tuple(tests), limit, test_timeout)
    if doc is None:
        return ("not judged", [], problem, 0) if problem.startswith(NOT_JUDGED) else ("killed", [], problem, len(tests))
    got = {t["id"]: t["outcome"] for t in doc["tests"]}
    differing = [tid for tid in tests if tid in got and caught(base.outcomes.get(tid), got[tid])]
    if differing and doc["run"]["status"] == "ok" and all(got[tid] == "flaky" for tid in differing):
        again, _ = certify(tree, c.run.target, env, results, tuple(differing), limit, test_timeout)
        if again is not None and again["run"]["status"] == "ok":
            confirmed = {t["id"]: t["outcome"] for t in again["tests"]}
            differing = [tid for tid in differing if confirmed.get(tid) not in (None, "flaky")
                         and caught(base.outcomes.get(tid), confirmed[tid])]
            got.update((tid, confirmed[tid]) for tid in differing)
    killers = [f"{tid} ({got[tid]})" for tid in differing]
    ran = sum(1 for tid in tests if got.get(tid) not in (None, "not-run"))
    # fail-fast (--maxfail=1) leaves the tests after the first failure not run: the run says so, and a
    # run that did not finish is a kill whatever the tests say
    problem = "" if doc["run"]["status"] == "ok" else f"run {doc['run']['status']}: {doc['run']['message'][:200]}"
    status = "killed" if killers or problem else "survived"
    if built is not None:  # a run that failed before it could say what it loaded (no device) is a kill
        key = modules.c_build_of(c.mutant.file).reported
        loaded = (doc.get("builds") or {}).get(key)
        if loaded != built and (loaded is not None or status == "survived"):
            return "not built", [], f"the run loaded the {key} build {loaded}, not the mutant's {built}", ran
    return status, killers, problem if status == "killed" else f"{ran} tests ran, all as in the baseline", ran


def _unit_tests(tree: Path, env: dict[str, str], tests: list[str], limit: float,
                test_timeout: float) -> tuple[str, list[str], str, int]:
    """The platform's judge: pytest -x on ``tests`` (node ids); killed when it does not exit 0."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0",
           "--timeout", f"{test_timeout:g}", *tests]
    env = {k: v for k, v in env.items() if k != "PYTEST_ADDOPTS"}
    try:
        proc = reaped(cmd, limit, env, cwd=tree)
    except subprocess.TimeoutExpired:
        return "killed", [], f"pytest ran past {limit:g} s", len(tests)
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)
    status = "survived" if proc.returncode == 0 else "killed"
    detail = "" if failed or status == "survived" else f"pytest exited {proc.returncode}: " + proc.stdout.strip()[-200:]
    return status, failed, detail, len(tests)
