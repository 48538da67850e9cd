#!/usr/bin/env python3
"""The generated-mutant run (issues 23 and 32): mutants derived from the code by operator (``operators.py``),
a fresh random sample per commit among those the tests execute, each judged by the tests that execute it.

    python3 ci/mutants/generated.py                        # the suite: 150 mutants, seed = HEAD's commit
    python3 ci/mutants/generated.py --size 20 --area cuda  # a small sample of one area
    python3 ci/mutants/generated.py --platform             # the platform modules, judged by the unit tests
    tox -e mutants

The suite (issue 23), per run of ``modules.RUNS`` (a target, maybe with extra environment):
1. coverage, recorded once per tree (cached by the hash of what is copied): the whole conformance suite is
   certified in a copy of the tree with ``probe.py`` loaded into certify's test process; per test, the
   Python lines it executes, the fake's entry points it calls and the compiled module's methods it calls;
2. a baseline: the whole suite certified in the copy, unmutated, without the probe (its outcomes are what
   a mutant's run is compared with);
3. a sample: every mutant of the areas' files (``modules.SUITE_AREAS``) whose line some test executes (a C
   mutant: whose function a called entry point or method reaches, through the file's static call graph),
   minus those ``equivalent.txt`` lists, drawn per area with ``random.Random(seed)``; the seed is the commit
   (``git rev-parse HEAD``) unless --seed says otherwise, so a run is reproducible and the next commit draws
   other mutants. A mutant that does not compile is put back and another drawn;
4. each mutant in its own copy: ``certify --target T --only TEST...`` (the tests that execute the line, at
   most --max-tests, fail-fast: pytest --maxfail=1). Killed: a test's outcome differs from the baseline (a
   baseline pass that does not pass), or the run did not finish; by the conformance suite alone.
The platform (issue 32, --platform): the same with ``modules.PLATFORM_AREAS``, judged by the unit tests of
``modules.PLATFORM_TESTS`` (pytest -x on the tests that execute the line; killed: pytest does not exit 0).

Writes the report (default ``ci/mutants/REPORT.md``, or ``PLATFORM.md`` with --platform); exits 1 below
--threshold killed overall or --area-threshold in any area, or when a baseline is not clean.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import modules  # noqa: E402
import operators  # noqa: E402
from operators import Mutant  # noqa: E402
from run import certify  # noqa: E402  (the catalogue's runner certifies a tree the same way)

from ironaccel.cts import tables  # noqa: E402
from ironaccel.cache import cache_dir  # noqa: E402

EQUIVALENT = HERE / "equivalent.txt"
PLUGIN = "plugins/ironaccel-opencl"
COPIED = ("ironaccel", "conformance", "fakes", "pyproject.toml", PLUGIN)
PASSING = ("pass", "not-supported")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", "*.so", "*.egg-info", "build")


# -- the tree ---------------------------------------------------------------------------------------------

def copy_tree(dest: Path, src: Path, platform: bool) -> None:
    """The files a run needs: for the suite, what certify reads; for the platform, every tracked file."""
    if platform and not (src / ".git").exists():  # a copy of the snapshot: all of it
        shutil.copytree(src, dest, ignore=IGNORED, dirs_exist_ok=True, symlinks=True)
        return
    if platform:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=src, capture_output=True, text=True, check=True)
        for name in files.stdout.split("\0"):
            if name and (src / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src / name, dest / name)
        return
    for name in COPIED:
        if (src / name).is_dir():
            shutil.copytree(src / name, dest / name, ignore=IGNORED)
        else:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / name, dest / name)


def tree_hash(tree: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(tree)).encode() + b"\0" + path.read_bytes())
    for f in (HERE / "probe.py", HERE / "modules.py"):
        digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def area_files(tree: Path, areas: dict[str, tuple[str, ...]]) -> tuple[dict[str, list[str]], list[str]]:
    """area -> files (relative), and the globs that matched nothing."""
    out, empty = {}, []
    for area, globs in areas.items():
        files = []
        for g in globs:
            found = sorted(str(p.relative_to(tree)) for p in tree.glob(g) if p.is_file())
            empty += [] if found else [g]
            files += found
        out[area] = files
    return out, empty


def python_path(tree: Path, probe: bool = False) -> str:
    return os.pathsep.join([str(tree), str(tree / PLUGIN), *([str(HERE)] if probe else [])])


# -- coverage: which tests execute which code -------------------------------------------------------------

@dataclass
class Coverage:
    """Per run: file -> line -> tests executing it; test -> fake entry points / compiled methods it calls;
    file -> (statements, covered, branches, covered branches)."""
    lines: dict[str, dict[int, list[str]]]
    calls: dict[str, dict[str, list[str]]]
    summary: dict[str, list[int]]
    seconds: float

    def to_json(self) -> dict:
        return {"lines": self.lines, "calls": self.calls, "summary": self.summary, "seconds": self.seconds}

    @classmethod
    def from_json(cls, d: dict) -> "Coverage":
        return cls({f: {int(k): v for k, v in ln.items()} for f, ln in d["lines"].items()}, d["calls"], d["summary"],
                   d["seconds"])


def probe_env(probe_dir: Path, tree: Path, files: list[str]) -> dict[str, str]:
    """The environment that makes the test process (and its children) record coverage into ``probe_dir``."""
    rc = probe_dir / "coveragerc"
    include = "".join(f"\n    {tree / f}" for f in files if f.endswith(".py"))
    rc.write_text(f"[run]\nbranch = True\nparallel = True\ndata_file = {probe_dir / 'coverage'}\ninclude ={include}\n")
    return {"PYTHONPATH": python_path(tree, probe=True), "IRONACCEL_MUTANTS_PROBE": str(probe_dir),
            "COVERAGE_PROCESS_START": str(rc)}


def collect(probe_dir: Path, tree: Path, files: list[str], seconds: float) -> Coverage:
    import coverage

    cov = coverage.Coverage(data_file=str(probe_dir / "coverage"))
    cov.combine([str(probe_dir)], keep=True)
    data = cov.get_data()
    lines: dict[str, dict[int, list[str]]] = {}
    for measured in data.measured_files():
        rel = os.path.relpath(measured, tree)
        if rel not in files:
            continue
        by_line = data.contexts_by_lineno(measured)
        lines[rel] = {ln: sorted(c for c in ctx if c) for ln, ctx in by_line.items() if any(ctx)}
    summary = {}
    report = probe_dir / "coverage.json"
    py_files = [str(tree / f) for f in files if f.endswith(".py")]
    try:
        cov.json_report(outfile=str(report), include=py_files)
        for measured, entry in json.loads(report.read_text())["files"].items():
            s = entry["summary"]
            summary[os.path.relpath(os.path.join(tree, measured), tree) if not os.path.isabs(measured)
                    else os.path.relpath(measured, tree)] = [s["num_statements"], s["covered_lines"],
                                                             s.get("num_branches", 0), s.get("covered_branches", 0)]
    except coverage.exceptions.NoDataError:
        pass
    calls: dict[str, dict[str, list[str]]] = {}
    for f in probe_dir.glob("calls-*.json"):
        calls.update(json.loads(f.read_text()))
    return Coverage(lines, calls, summary, seconds)


def record_suite(run: modules.Run, tree: Path, files: list[str], digest: str, limit: float) -> Coverage:
    """The whole suite certified on ``run`` with the probe loaded (cached per tree and run)."""
    cached = cache_dir() / "mutants" / f"{digest}-{re.sub(r'[^A-Za-z0-9]+', '-', run.name)}.json"
    if cached.is_file():
        return Coverage.from_json(json.loads(cached.read_text()))
    with tempfile.TemporaryDirectory(prefix="ironaccel-mutants-probe-") as tmp:
        probe_dir = Path(tmp)
        env = {**os.environ, **run.env, "HYPOTHESIS_PROFILE": "ci", "PYTEST_ADDOPTS": "-p probe",
               **probe_env(probe_dir, tree, files)}
        t0 = time.monotonic()
        doc, problem = certify(tree, run.target, env, probe_dir / "results", (), limit)
        if doc is None:
            raise RuntimeError(f"coverage of {run.name}: {problem}")
        result = collect(probe_dir, tree, files, time.monotonic() - t0)
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(result.to_json()))
    return result


def baseline_of(run: modules.Run, tree: Path, digest: str) -> tuple[dict | None, str]:
    """The whole suite certified on ``run`` in ``tree``, unmutated (cached per tree and run when clean)."""
    cached = cache_dir() / "mutants" / f"{digest}-{re.sub(r'[^A-Za-z0-9]+', '-', run.name)}-baseline.json"
    if cached.is_file():
        return json.loads(cached.read_text()), ""
    env = {**os.environ, **run.env, "PYTHONPATH": python_path(tree), "HYPOTHESIS_PROFILE": "ci"}
    with tempfile.TemporaryDirectory(prefix="ironaccel-mutants-baseline-") as tmp:
        doc, problem = certify(tree, run.target, env, Path(tmp), (), 900)
    if doc is not None and doc["run"]["status"] == "ok":
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(doc))
    return doc, problem


# -- C: which functions a test reaches --------------------------------------------------------------------

_METHOD_ROW = re.compile(r'\{\s*"(\w+)"\s*,\s*(?:\((?:[^()]|\([^()]*\))*\)\s*)*(\w+)\s*,')


class CallGraph:
    """A C file's functions and what each references (calls, or passes as a pointer): token level."""

    def __init__(self, text: str):
        toks = operators.c_tokens(text)
        self.functions = operators.c_functions(toks)
        names = {f.name for f in self.functions}
        self.refs: dict[str, set[str]] = {}
        inside = set()
        for f in self.functions:
            lo, hi = f.body
            inside.update(range(lo, hi + 1))
            self.refs.setdefault(f.name, set()).update(t.text for t in toks[lo:hi] if t.kind == "ident" and t.text in names)
        #: functions named outside any function body (method tables, type slots, the module's init)
        self.tabled = {t.text for i, t in enumerate(toks) if i not in inside and t.kind == "ident" and t.text in names}
        self.methods: dict[str, set[str]] = defaultdict(set)  # Python method name -> C functions
        for m in _METHOD_ROW.finditer(text):
            if m[2] in names:
                self.methods[m[1]].add(m[2])
        self.spans = {f.name: f for f in self.functions}

    def reach(self, roots: set[str]) -> set[str]:
        seen, todo = set(), [r for r in roots if r in self.refs]
        while todo:
            f = todo.pop()
            if f not in seen:
                seen.add(f)
                todo.extend(self.refs.get(f, ()))
        return seen


def c_tests(file: str, text: str, cov: Coverage) -> dict[str, list[str]]:
    """C function -> the tests that reach it: the fake's through the entry points a test called, the compiled
    module's through the methods a test called (functions only a type slot or the module's init names are
    reached by every test that used the module at all)."""
    graph = CallGraph(text)
    out: dict[str, set[str]] = defaultdict(set)
    fast = file.endswith("_fast.c")
    slot_roots = graph.tabled - {f for fs in graph.methods.values() for f in fs}
    from_slots = graph.reach(slot_roots) if fast else set()
    for test, called in cov.calls.items():
        if fast:
            if not called.get("fast"):
                continue
            roots = {f for name in called["fast"] for f in graph.methods.get(name, ())}
            reached = graph.reach(roots) | from_slots
        else:
            reached = graph.reach(set(called.get("fake", ())))
        for f in reached:
            out[f].add(test)
    return {f: sorted(t) for f, t in out.items()}


# -- mutants, sample -------------------------------------------------------------------------------------

def read_equivalent(path: Path = EQUIVALENT) -> dict[str, str]:
    """id -> reason, from ``equivalent.txt`` (one ``ID reason`` a line; blank lines and # comments skipped)."""
    out = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                mid, _, reason = line.strip().partition(" ")
                out[mid] = reason.strip()
    return out


@dataclass
class Candidate:
    mutant: Mutant
    area: str
    run: modules.Run | None  # None: the platform's unit tests
    tests: list[str]


@dataclass
class Outcome:
    candidate: Candidate
    status: str  # killed, survived
    seconds: float = 0.0
    killers: list[str] = field(default_factory=list)
    detail: str = ""
    ran: int = 0  # tests run


def compiles(mutant: Mutant, tree: Path) -> bool:
    """A Python mutant parses; a C mutant compiles (type errors that newer compilers reject count as not)."""
    text = mutant.apply((tree / mutant.file).read_text(encoding="utf-8"))
    if mutant.file.endswith(".py"):
        try:
            compile(text, mutant.file, "exec")
            return True
        except SyntaxError:
            return False
    with tempfile.NamedTemporaryFile("w", suffix=".c", dir=(tree / mutant.file).parent, delete=False) as f:
        f.write(text)
    try:
        proc = subprocess.run(["cc", "-std=gnu11", "-fsyntax-only", "-Werror=int-conversion",
                               "-Werror=incompatible-pointer-types", "-Werror=implicit-function-declaration",
                               f"-I{sysconfig.get_paths()['include']}", f.name], capture_output=True)
        return proc.returncode == 0
    finally:
        os.unlink(f.name)


def draw(pool: list[Candidate], n: int, rng: random.Random, tree: Path) -> tuple[list[Candidate], int]:
    """``n`` candidates drawn at random; those that do not compile are put back (and counted)."""
    order = pool[:]
    rng.shuffle(order)
    chosen, invalid = [], 0
    for c in order:
        if len(chosen) == n:
            break
        if compiles(c.mutant, tree):
            chosen.append(c)
        else:
            invalid += 1
    return chosen, invalid


def quotas(areas: list[str], size: int, available: dict[str, int]) -> dict[str, int]:
    """``size`` split evenly over the areas (what an area cannot use goes to the others)."""
    share = dict.fromkeys(areas, 0)
    left = size
    while left > 0:
        open_ = [a for a in areas if share[a] < available.get(a, 0)]
        if not open_:
            break
        for a in open_:
            if left == 0:
                break
            share[a] += 1
            left -= 1
    return share


# -- running a mutant ------------------------------------------------------------------------------------

def mutant_env(c: Candidate, tree: Path, scratch: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": python_path(tree), "HYPOTHESIS_PROFILE": "ci", "PYTEST_ADDOPTS": "--maxfail=1"}
    if c.run is not None:
        env.update(c.run.env)
    if c.mutant.file.endswith(".c"):  # the mutated build goes to a cache of its own; the rest is shared
        shared = cache_dir()
        own = scratch / "cache"
        own.mkdir()
        rebuilt = "fast" if c.mutant.file.endswith("_fast.c") else "fakecuda"
        for entry in shared.iterdir() if shared.is_dir() else ():
            if entry.name not in (rebuilt, "mutants"):
                (own / entry.name).symlink_to(entry)
        env["IRONACCEL_CACHE"] = str(own)
        env["CC"] = str(HERE / "cc.py")  # compiles the one mutated source, the others' objects cached
        env["IRONACCEL_MUTANTS_OBJECTS"] = str(shared / "mutants" / "objects")
    return env


def run_candidate(c: Candidate, snapshot: Path, baselines: dict[str, dict[str, str]], limit: float,
                  test_timeout: float, platform: bool, durations: dict[str, dict[str, float]]) -> Outcome:
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
        # a hang is a kill: give the run what the tests took unmutated, four times over, and a minute to start
        spent = sum(durations.get(c.run.name, {}).get(t, 1.0) for t in c.tests)
        limit = min(limit, 60 + 4 * spent)
        doc, problem = certify(tree, c.run.target, env, scratch / "results", tuple(c.tests), limit, test_timeout)
        if doc is None:
            return Outcome(c, "killed", time.monotonic() - t0, detail=problem, ran=len(c.tests))
        base = baselines[c.run.name]
        got = {t["id"]: t["outcome"] for t in doc["tests"]}
        killers = [f"{tid} ({got[tid]})" for tid in c.tests if tid in got and got[tid] != base.get(tid)
                   and got[tid] not in PASSING + ("not-run",)]
        ran = sum(1 for tid in c.tests if got.get(tid) not in (None, "not-run"))
        # fail-fast (--maxfail=1) leaves the tests after the first failure not run: the run says so, and a
        # run that did not finish is a kill whatever the tests say
        problem = "" if doc["run"]["status"] == "ok" else f"run {doc['run']['status']}: {doc['run']['message'][:200]}"
        status = "killed" if killers or problem else "survived"
        return Outcome(c, status, time.monotonic() - t0, killers,
                       problem if status == "killed" else f"{ran} tests ran, all as in the baseline", ran)


# -- the platform's unit tests ----------------------------------------------------------------------------

def record_platform(tree: Path, files: list[str], digest: str, limit: float, tests: tuple[str, ...]
                    ) -> tuple[Coverage, dict[str, str]]:
    """The platform's unit tests run once with the probe: coverage per test, and each test's outcome."""
    key = hashlib.sha256(" ".join(tests).encode()).hexdigest()[:8]
    cached = cache_dir() / "mutants" / f"{digest}-platform-{key}.json"
    if cached.is_file():
        d = json.loads(cached.read_text())
        return Coverage.from_json(d["coverage"]), d["outcomes"]
    with tempfile.TemporaryDirectory(prefix="ironaccel-mutants-probe-") as tmp:
        probe_dir = Path(tmp)
        env = {**os.environ, **probe_env(probe_dir, tree, files)}
        env.pop("PYTEST_ADDOPTS", None)
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "probe", "-p", "no:cacheprovider", "-n", "0",
                        *[t for t in tests if (tree / t).is_file()]],
                       cwd=tree, env=env, capture_output=True, text=True, timeout=limit)
        cov = collect(probe_dir, tree, files, time.monotonic() - t0)
        outcomes = {}
        for f in probe_dir.glob("outcomes-*.json"):
            outcomes.update(json.loads(f.read_text()))
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps({"coverage": cov.to_json(), "outcomes": outcomes}))
    return cov, outcomes


# -- the report ------------------------------------------------------------------------------------------

def rate(killed: int, survived: int) -> float:
    return killed / (killed + survived) if killed + survived else 1.0


def by(outcomes: list[Outcome], key) -> dict[str, tuple[int, int]]:
    out: dict[str, list[int]] = {}
    for o in outcomes:
        row = out.setdefault(key(o), [0, 0])
        row[0 if o.status == "killed" else 1] += 1
    return {k: (v[0], v[1]) for k, v in sorted(out.items())}


def rate_table(title: str, rows: dict[str, tuple[int, int]]) -> list[str]:
    total = (sum(k for k, _ in rows.values()), sum(s for _, s in rows.values()))
    lines = tables.markdown([title, "mutants", "killed", "survived", "kill rate"],
                            [[name, str(k + s), str(k), str(s), f"{rate(k, s):.0%}"]
                             for name, (k, s) in [*rows.items(), ("**all**", total)]])
    return lines


def clauses_of(tests: list[str], clause_map: dict[str, list[str]]) -> str:
    found = sorted({c for t in tests for c in clause_map.get(t, [])})
    return ", ".join(found[:6]) + (f" (+{len(found) - 6})" if len(found) > 6 else "") or "(no clause)"


def report(outcomes: list[Outcome], args, seed: str, platform: bool, covs: dict[str, Coverage],
           notes: list[str], clause_map: dict[str, list[str]], wall_s: float, counts: dict[str, list[int]]) -> str:
    judged = "the unit tests of `modules.PLATFORM_TESTS` (pytest -x)" if platform else \
        "the conformance suite alone (`certify --only` on the tests that execute the line, fail-fast)"
    lines = [
        "# Generated mutants" + (": the platform" if platform else ": the conformance suite"),
        "",
        f"Generated by `python3 ci/mutants/generated.py{' --platform' if platform else ''}` (never edit by hand): "
        "mutants derived from the code by operator (`operators.py`), a random sample among those the tests "
        f"execute, each judged by {judged}.",
        f"Run {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, seed `{seed}`, {len(outcomes)} mutants, "
        f"{args.jobs} at a time, {wall_s / 60:.1f} min wall time (coverage recording included; load average "
        f"{args.load_at_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores). Thresholds: {args.threshold:.0%} killed "
        f"overall, {args.area_threshold:.0%} per area.",
        "",
    ]
    if args.area or args.run:
        notes = [f"**A partial run** (areas: {', '.join(args.area or ['all'])}; runs: {', '.join(args.run or ['all'])}): "
                 "not the full sample `tox -e mutants` draws.", *notes]
    lines += notes and ["**Notes:**", "", *[f"- {n}" for n in notes], ""]
    lines += ["## Kill rate per area", ""] + rate_table("area", by(outcomes, lambda o: o.candidate.area))
    lines += ["", "## Kill rate per operator", ""] + rate_table("operator", by(outcomes, lambda o: o.candidate.mutant.operator))
    lines += ["", "## Mutants available", "",
              "Per area: every mutant the operators derive from its files, those the tests execute (the population "
              "the sample is drawn from), those drawn that did not compile (put back), those `equivalent.txt` lists.", ""]
    lines += tables.markdown(["area", "derived", "executed by a test", "drawn, did not compile", "equivalent"],
                             [[a, *map(str, v)] for a, v in sorted(counts.items())])
    survivors = [o for o in outcomes if o.status == "survived"]
    lines += ["", "## Survivors", "",
              "Each with its line and the clauses of the tests that execute it (the clauses that should have caught it)."
              if not platform else "Each with its line and the unit tests that execute it.", ""]
    for o in survivors:
        m = o.candidate.mutant
        where = f"{o.candidate.run.name}: " if o.candidate.run else ""
        should = clauses_of(o.candidate.tests, clause_map) if not platform else \
            ", ".join(sorted({t.split("::")[0] for t in o.candidate.tests}))
        lines.append(f"- `{m.id}` {m.file}:{m.line} ({m.function or 'module'}): {m.change}; {where}{o.ran} tests; "
                     f"should be caught by {should}")
    lines += [] if survivors else ["None."]
    lines += ["", "## Coverage of each module" + ("" if platform else " per run"), "",
              "Line and branch coverage by " + ("the platform's unit tests" if platform else "the whole conformance "
              "suite, recorded with coverage.py from the start of certify's test process") + " (code run in child "
              "processes the tests start counts here, but is attributed to no test, so no mutant is drawn for it "
              "from that run)." + ("" if platform else " C files: a mutant is drawn in a function a test reaches "
              "through the fake's entry points or the compiled module's methods it calls (the file's call graph).")]
    lines += [""]
    rows = []
    for run_name, cov in covs.items():
        for f, (stmts, covered, branches, bcovered) in sorted(cov.summary.items()):
            rows.append([run_name, f, f"{covered}/{stmts}", f"{covered / stmts:.0%}" if stmts else "-",
                         f"{bcovered}/{branches}", f"{bcovered / branches:.0%}" if branches else "-"])
    lines += tables.markdown(["run", "module", "lines", "line %", "branches", "branch %"], rows)
    rows = []
    for o in outcomes:
        m = o.candidate.mutant
        caught = "; ".join(o.killers[:2]) + (f" (+{len(o.killers) - 2})" if len(o.killers) > 2 else "") or o.detail
        rows.append([f"`{m.id}`", o.candidate.area, f"{m.file}:{m.line}", tables.cell(m.change, 80),
                     o.candidate.run.name if o.candidate.run else "unit tests", f"{o.ran}/{len(o.candidate.tests)}",
                     o.status, tables.cell(caught, 140), f"{o.seconds:.0f}"])
    lines += ["", "## Every mutant", ""]
    lines += tables.markdown(["mutant", "area", "line", "change", "run", "tests", "result", "caught by", "s"], rows)
    return "\n".join(lines) + "\n"


# -- main ------------------------------------------------------------------------------------------------

def commit_seed() -> str:
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return proc.stdout.strip() or "no-commit"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", action="store_true", help="mutate the platform modules, judged by the unit tests")
    parser.add_argument("--unit-tests", nargs="+", metavar="FILE", help="with --platform: the unit test files "
                        "(default: modules.PLATFORM_TESTS)")
    parser.add_argument("--seed", help="the sample's seed (default: git rev-parse HEAD)")
    parser.add_argument("--size", type=int, default=150, help="mutants in the sample (default 150)")
    parser.add_argument("--area", action="append", help="areas to sample (repeatable; default all)")
    parser.add_argument("--run", action="append", help="runs of modules.RUNS to use (repeatable, globs; default all)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="mutants at once (default: CPU count)")
    parser.add_argument("--max-tests", type=int, default=60, help="tests per mutant at most (a seeded choice among "
                                                                   "those executing its line; default 60)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per mutant at most (default 300; "
                        "less where its tests took less unmutated: 60 s + 4 times their time)")
    parser.add_argument("--test-timeout", type=float, default=30, help="seconds per test (default 30)")
    parser.add_argument("--threshold", type=float, default=None, help="overall kill rate required (default 0.90; "
                                                                       "0.95 with --platform)")
    parser.add_argument("--area-threshold", type=float, default=0.85, help="kill rate required per area (default 0.85)")
    parser.add_argument("--report", type=Path, help="write the report here (default ci/mutants/REPORT.md, or "
                                                    "PLATFORM.md with --platform)")
    parser.add_argument("--list", action="store_true", help="print the sample and stop (no mutant is run)")
    args = parser.parse_args()
    args.load_at_start = os.getloadavg()[0]  # the machine may be shared: the report says how busy it was
    platform = args.platform
    args.threshold = args.threshold if args.threshold is not None else (0.95 if platform else 0.90)
    seed = args.seed or commit_seed()
    areas_def = modules.PLATFORM_AREAS if platform else modules.SUITE_AREAS
    areas = [a for a in areas_def if not args.area or a in args.area]
    if not areas:
        parser.error(f"no area matches --area (areas: {', '.join(areas_def)})")
    runs = [r for r in modules.RUNS if not args.run or any(fnmatch.fnmatch(r.name, g) for g in args.run)]
    t0 = time.monotonic()
    notes: list[str] = []
    equivalent = read_equivalent()
    with tempfile.TemporaryDirectory(prefix="ironaccel-mutants-snapshot-") as snap:
        snapshot = Path(snap)
        copy_tree(snapshot, ROOT, platform)  # every copy is made from this one: edits during the run change nothing
        files, empty = area_files(snapshot, {a: areas_def[a] for a in areas})
        notes += [f"`modules.py`: {g} matches no file" for g in empty]
        every_file = [f for a in areas for f in files[a]]
        digest = tree_hash(snapshot)
        covs: dict[str, Coverage] = {}
        baselines: dict[str, dict[str, str]] = {}
        durations: dict[str, dict[str, float]] = {}  # run -> test -> seconds, unmutated
        clause_map: dict[str, list[str]] = {}
        print(f"seed {seed}; recording coverage (cached per tree: {digest})", flush=True)
        if platform:
            cov, outcomes = record_platform(snapshot, every_file, digest, 1800,
                                            tuple(args.unit_tests or modules.PLATFORM_TESTS))
            covs["unit tests"] = cov
            failing = sorted(t for t, o in outcomes.items() if o == "fail")
            notes += [f"{len(failing)} unit tests fail unmutated and are not used: {', '.join(failing[:10])}"] if failing else []
            passing = {t for t, o in outcomes.items() if o == "pass"}
        else:
            needed = [r for r in runs if set(r.areas) & set(areas)]

            def prepare(r):  # its coverage, and its baseline: the whole suite, unmutated, without the probe
                return r, record_suite(r, snapshot, every_file, digest, 1800), baseline_of(r, snapshot, digest)

            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                for r, cov, (doc, problem) in pool.map(prepare, needed):
                    covs[r.name] = cov
                    print(f"  coverage and baseline of {r.name} (coverage: {cov.seconds:.0f} s)", flush=True)
                    if doc is None or doc["run"]["status"] != "ok":
                        print(f"baseline {r.name}: {problem or doc['run']['message']}", file=sys.stderr)
                        return 1
                    baselines[r.name] = {t["id"]: t["outcome"] for t in doc["tests"]}
                    durations[r.name] = {t["id"]: t.get("duration") or 0.0 for t in doc["tests"]}
                    clause_map.update({t["id"]: t.get("clauses", []) for t in doc["tests"]})
                    bad = sorted(t for t, o in baselines[r.name].items() if o not in PASSING)
                    if bad:
                        notes.append(f"baseline {r.name}: {len(bad)} tests do not pass unmutated and are not used: "
                                     + ", ".join(bad[:8]))
            print(f"  coverage and baselines: {time.monotonic() - t0:.0f} s since start", flush=True)

        # every mutant, and the tests that execute it
        pools: dict[str, list[Candidate]] = {}
        counts: dict[str, list[int]] = {}
        for area in areas:
            pool_: list[Candidate] = []
            derived = equiv = 0
            for f in files[area]:
                text = (snapshot / f).read_text(encoding="utf-8")
                muts = operators.mutants_of(f, text)
                derived += len(muts)
                if platform:
                    runs_for = [(None, covs["unit tests"], passing)]
                else:
                    runs_for = [(r, covs[r.name], {t for t, o in baselines[r.name].items() if o in PASSING})
                                for r in runs if area in r.areas and r.name in covs]
                per_run = []
                for r, cov, usable in runs_for:
                    if f.endswith(".c"):
                        by_fn = c_tests(f, text, cov)
                        per_run.append((r, lambda m, by_fn=by_fn, usable=usable: [t for t in by_fn.get(m.function, ()) if t in usable]))
                    else:
                        by_line = cov.lines.get(f, {})
                        # a line run at import is attributed to the test that imported the module first: its
                        # mutant runs the tests that execute any line of the file
                        anywhere = sorted({t for ts in by_line.values() for t in ts})
                        per_run.append((r, lambda m, by_line=by_line, anywhere=anywhere, usable=usable: [
                            t for t in (anywhere if m.toplevel else by_line.get(m.line, ())) if t in usable]))
                for m in muts:
                    if m.id in equivalent:
                        equiv += 1
                        continue
                    for r, tests_of in per_run:
                        tests = tests_of(m)
                        if tests:
                            pool_.append(Candidate(m, area, r, tests))
                            break
            pools[area] = pool_
            counts[area] = [derived, len(pool_), 0, equiv]
        share = quotas(areas, args.size, {a: len(p) for a, p in pools.items()})
        sample: list[Candidate] = []
        for area in areas:
            rng = random.Random(f"{seed}:{area}")
            chosen, invalid = draw(pools[area], share[area], rng, snapshot)
            counts[area][2] = invalid
            for c in chosen:
                if len(c.tests) > args.max_tests:
                    c.tests = sorted(random.Random(f"{seed}:{c.mutant.id}").sample(c.tests, args.max_tests))
            sample += chosen
        # run in turns across the areas, so a run stopped early still has a share of every area
        turn = {id(c): i for area in areas for i, c in enumerate(x for x in sample if x.area == area)}
        sample.sort(key=lambda c: turn[id(c)])
        print(f"sample: {len(sample)} mutants ({', '.join(f'{a} {share[a]}' for a in areas)}); "
              f"{time.monotonic() - t0:.0f} s since start", flush=True)
        if args.list:
            for c in sample:
                print(f"  {c.mutant.id} {c.mutant.file}:{c.mutant.line} {c.mutant.change} "
                      f"[{c.run.name if c.run else 'unit'}; {len(c.tests)} tests]")
            return 0
        outcomes_: list[Outcome] = []
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = {pool.submit(run_candidate, c, snapshot, baselines, args.timeout, args.test_timeout, platform,
                                   durations): c
                       for c in sample}
            order = {id(c): i for i, c in enumerate(sample)}
            out = args.report or (HERE / ("PLATFORM.md" if platform else "REPORT.md"))
            for f in concurrent.futures.as_completed(futures):
                o = f.result()
                outcomes_.append(o)
                outcomes_.sort(key=lambda o: order[id(o.candidate)])
                print(f"  {o.status:8} {o.candidate.mutant.id} {o.candidate.mutant.change} ({o.seconds:.0f} s, "
                      f"{o.ran} tests) {o.detail if o.status == 'survived' else ''}", flush=True)
                if len(outcomes_) < len(sample):  # the report so far, saying so: a stopped run leaves it
                    partial = [f"**In progress**: {len(outcomes_)} of the {len(sample)} mutants drawn have run.", *notes]
                    out.write_text(report(outcomes_, args, seed, platform, covs, partial, clause_map,
                                          time.monotonic() - t0, counts), encoding="utf-8")
    text = report(outcomes_, args, seed, platform, covs, notes, clause_map, time.monotonic() - t0, counts)
    out.write_text(text, encoding="utf-8")
    print(text.split("\n## Coverage")[0])
    print(f"report: {out}")
    table = by(outcomes_, lambda o: o.candidate.area)
    killed, survived = sum(k for k, _ in table.values()), sum(s for _, s in table.values())
    failed = False
    if rate(killed, survived) < args.threshold:
        print(f"overall: {rate(killed, survived):.0%} killed, below {args.threshold:.0%}", file=sys.stderr)
        failed = True
    for a, (k, s) in table.items():
        if rate(k, s) < args.area_threshold:
            print(f"area {a}: {rate(k, s):.0%} killed, below {args.area_threshold:.0%}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
