"""Which tests execute which code, recorded once per copy of the tree (``generated.py``): the whole suite of a
run (or the platform's unit tests) with ``probe.py`` loaded; that one run is also the baseline a mutant's
outcomes are compared with. Python: coverage.py lines per test; C: the functions a test reaches through the
fake's entry points or the compiled module's methods it called (the build's static call graph)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import modules
import operators
from run import PASSING, certify  # the catalogue's runner certifies a tree the same way
from tree import private_cache, python_path

from ironaccel.cache import cache_dir


@dataclass
class Coverage:
    """One recorded run: file -> line -> tests executing it; test -> fake entry points / compiled methods it
    calls; file -> (statements, covered, branches, covered branches); and, per test, its outcome, seconds and
    clauses (the baseline: what a mutant's run is compared with); and the lines of the C builds that hold code no
test ran (gcov, over the whole run: not per test), and those compiled into nothing."""
    lines: dict[str, dict[int, list[str]]]
    calls: dict[str, dict[str, list[str]]]
    summary: dict[str, list[int]]
    seconds: float
    outcomes: dict[str, str]
    durations: dict[str, float]
    clauses: dict[str, list[str]]
    c_unrun: dict[str, list[int]] = field(default_factory=dict)  # C file -> lines of code no test ran (gcov)
    #: C file -> its lines the build's preprocessor dropped (an ``#if`` branch not taken: no code; ``cc.py``)
    c_inactive: dict[str, list[int]] = field(default_factory=dict)
    #: Python file -> what the whole run executed, by any test or none (coverage.py's JSON report): "lines" and
    #: "missing_lines", branch arcs "taken" and "missing" ([from, to]; to < 0: leaving the function). The
    #: branch coverage of a module over several runs is the union of their "taken" arcs (``union.py``).
    executed: dict[str, dict[str, list]] = field(default_factory=dict)

    def usable(self) -> set[str]:
        """The tests that pass unmutated: a mutant is judged by these alone."""
        return {t for t, o in self.outcomes.items() if o in PASSING}

    @classmethod
    def from_json(cls, d: dict) -> "Coverage":
        return cls(**{**d, "lines": {f: {int(k): v for k, v in ln.items()} for f, ln in d["lines"].items()}})


def probe_env(probe_dir: Path, tree: Path, files: list[str]) -> dict[str, str]:
    """The environment that makes the test process (and its children) record coverage into ``probe_dir``."""
    rc = probe_dir / "coveragerc"
    include = "".join(f"\n    {tree / f}" for f in files if f.endswith(".py"))
    rc.write_text(f"[run]\nbranch = True\nparallel = True\ndata_file = {probe_dir / 'coverage'}\ninclude ={include}\n")
    return {"PYTHONPATH": python_path(tree, probe=True), "IRONACCEL_MUTANTS_PROBE": str(probe_dir),
            "COVERAGE_PROCESS_START": str(rc)}


def collect(probe_dir: Path, tree: Path, files: list[str]) -> tuple[dict, dict, dict, dict]:
    """(lines, calls, summary, executed) from what the probe wrote (``Coverage`` says what each holds)."""
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
    summary, executed = {}, {}
    report = probe_dir / "coverage.json"
    try:
        cov.json_report(outfile=str(report), include=[str(tree / f) for f in files if f.endswith(".py")])
        for measured, entry in json.loads(report.read_text())["files"].items():
            s = entry["summary"]
            rel = os.path.relpath(os.path.join(tree, measured), tree)
            summary[rel] = [s["num_statements"], s["covered_lines"], s.get("num_branches", 0), s.get("covered_branches", 0)]
            executed[rel] = {"lines": entry["executed_lines"], "missing_lines": entry["missing_lines"],
                             "taken": entry.get("executed_branches", []), "missing": entry.get("missing_branches", [])}
    except coverage.exceptions.NoDataError:
        pass
    calls: dict[str, dict[str, list[str]]] = {}
    for f in probe_dir.glob("calls-*.json"):
        calls.update(json.loads(f.read_text()))
    return lines, calls, summary, executed


def _cached(name: str) -> Path:
    return cache_dir() / "mutants" / f"{re.sub(r'[^A-Za-z0-9]+', '-', name)}.json"


def record_suite(run: modules.Run, tree: Path, files: list[str], digest: str, limit: float) -> Coverage:
    """The whole suite certified on ``run`` with the probe loaded: coverage and baseline in one run (cached per
    tree and run when the run finished)."""
    cached = _cached(f"{digest}-{run.name}-v6")
    if cached.is_file():
        return Coverage.from_json(json.loads(cached.read_text()))
    with tempfile.TemporaryDirectory(prefix="ironaccel-mutants-probe-") as tmp:
        probe_dir = Path(tmp)
        env = run.environment({**os.environ, "HYPOTHESIS_PROFILE": "ci", "PYTEST_ADDOPTS": "-p probe",
                               **probe_env(probe_dir, tree, files),
                               **({"IRONACCEL_MUTANTS_FAST_CALLS": "1"} if "fast" in run.areas else {})})
        builds = [b for b in modules.C_BUILDS if any(f.startswith(b.folder + "/") for f in files)]
        if builds and set(run.areas) & {a for a, globs in modules.SUITE_AREAS.items()
                                        if any(g.startswith(b.folder + "/") for b in builds for g in globs)}:
            env.update(private_cache(probe_dir / "cache", tuple(b.cache for b in builds), probe_dir / "objects",
                                     gcov=True))
        t0 = time.monotonic()
        doc, problem = certify(tree, run.target, env, probe_dir / "results", (), limit)
        if doc is None or doc["run"]["status"] != "ok":
            raise RuntimeError(f"coverage and baseline of {run.name}: {problem or doc['run']['message']}")
        lines, calls, summary, executed = collect(probe_dir, tree, files)
        result = Coverage(lines, calls, summary, time.monotonic() - t0,
                          {t["id"]: t["outcome"] for t in doc["tests"]},
                          {t["id"]: t.get("duration") or 0.0 for t in doc["tests"]},
                          {t["id"]: t.get("clauses", []) for t in doc["tests"]}, executed=executed)
        result.c_unrun, c_summary = gcov_lines(probe_dir / "objects", tree)
        result.c_inactive = inactive_lines(probe_dir / "objects", tree)
        result.summary.update({f: s for f, s in c_summary.items() if f in files})
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(asdict(result)))
    return result


def record_platform(tree: Path, files: list[str], digest: str, limit: float, tests: tuple[str, ...]) -> Coverage:
    """The platform's unit tests run once with the probe: coverage per test, and each test's outcome."""
    key = hashlib.sha256(" ".join(tests).encode()).hexdigest()[:8]
    cached = _cached(f"{digest}-platform-{key}-v2")
    if cached.is_file():
        return Coverage.from_json(json.loads(cached.read_text()))
    with tempfile.TemporaryDirectory(prefix="ironaccel-mutants-probe-") as tmp:
        probe_dir = Path(tmp)
        env = {**os.environ, **probe_env(probe_dir, tree, files)}
        env.pop("PYTEST_ADDOPTS", None)
        t0 = time.monotonic()
        try:
            subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "probe", "-p", "no:cacheprovider", "-n", "0",
                            *[t for t in tests if (tree / t).is_file()]],
                           cwd=tree, env=env, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:  # a busy machine: say so and how to allow more, not a traceback
            raise RuntimeError(f"coverage and baseline of the platform's unit tests ran past {limit:g} s "
                               f"(load average {os.getloadavg()[0]:.1f}): nothing recorded; rerun on a quieter "
                               "machine or with a larger --record-timeout") from None
        outcomes = {}
        for f in probe_dir.glob("outcomes-*.json"):
            outcomes.update(json.loads(f.read_text()))
        lines, calls, summary, executed = collect(probe_dir, tree, files)
        result = Coverage(lines, calls, summary, time.monotonic() - t0, outcomes, {}, {}, executed=executed)
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(asdict(result)))
    return result


def gcov_lines(objects: Path, tree: Path) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """From the counters of the objects built with --coverage in ``objects``: C file (relative to ``tree``) ->
    the lines with code that never ran (a line gcov does not list, which optimisation merged into another,
    is not among them); and C file -> [lines with code, executed, 0, 0] for the report. Empty without counters."""
    executed: dict[str, set[int]] = defaultdict(set)
    code: dict[str, set[int]] = defaultdict(set)
    for gcda in sorted(objects.glob("*.gcda")) if objects.is_dir() else ():
        proc = subprocess.run(["gcov", "--json-format", "--stdout", str(gcda.with_suffix(".o"))], cwd=objects,
                              capture_output=True, text=True)
        for line in proc.stdout.splitlines():
            for entry in json.loads(line).get("files", []) if line.startswith("{") else ():
                path = Path(entry["file"])
                rel = os.path.relpath(path if path.is_absolute() else objects / path, tree)
                code[rel].update(ln["line_number"] for ln in entry["lines"])
                executed[rel].update(ln["line_number"] for ln in entry["lines"] if ln["count"])
    return ({f: sorted(lines - executed[f]) for f, lines in code.items()},
            {f: [len(lines), len(executed[f]), 0, 0] for f, lines in code.items()})


def inactive_lines(objects: Path, tree: Path) -> dict[str, list[int]]:
    """C file (relative to ``tree``) -> the lines every compile of the build that includes it dropped (what
    ``cc.py`` wrote beside the objects of a coverage build); empty without them."""
    dropped: dict[str, set[int]] = {}
    for found in sorted(objects.glob("*.inactive.json")) if objects.is_dir() else ():
        for path, lines in json.loads(found.read_text()).items():
            rel = os.path.relpath(path, tree)
            dropped[rel] = dropped[rel] & set(lines) if rel in dropped else set(lines)
    return {f: sorted(lines) for f, lines in dropped.items()}


# -- C: which functions a test reaches --------------------------------------------------------------------

_METHOD_ROW = re.compile(r'\{\s*"(\w+)"\s*,\s*(?:\((?:[^()]|\([^()]*\))*\)\s*)*(\w+)\s*,')


class CallGraph:
    """C functions and what each references (calls, or passes as a pointer): token level, over the text of a
    whole build (its files joined: a static function's name may then stand for two, which only widens)."""

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

    def reach(self, roots: set[str]) -> set[str]:
        seen, todo = set(), [r for r in roots if r in self.refs]
        while todo:
            f = todo.pop()
            if f not in seen:
                seen.add(f)
                todo.extend(self.refs.get(f, ()))
        return seen


def c_tests(build: modules.CBuild, text: str, cov: Coverage) -> dict[str, list[str]]:
    """C function of ``build`` (``text``: all its files) -> the tests that reach it: the fake's through the
    entry points a test called, the compiled module's through the methods a test called (functions only a type
    slot or the module's init names are reached by every test that called into the module at all)."""
    graph = CallGraph(text)
    out: dict[str, set[str]] = defaultdict(set)
    from_slots = graph.reach(graph.tabled - {f for fs in graph.methods.values() for f in fs})
    for test, called in cov.calls.items():
        names = set(called.get(build.roots, ()))
        if build.roots == "fast":
            reached = graph.reach({f for name in names for f in graph.methods.get(name, ())}) | from_slots \
                if names else set()
        else:
            reached = graph.reach(names)
        for f in reached:
            out[f].add(test)
    return {f: sorted(t) for f, t in out.items()}
