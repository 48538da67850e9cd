#!/usr/bin/env python3
"""The generated-mutant run (issues 23 and 32): mutants derived from the code by operator (``operators.py``),
a fresh random sample per commit among those the tests execute, each judged by the tests that execute it.

    python3 ci/mutants/generated.py                        # the suite: 150 mutants, seed = HEAD's commit
    python3 ci/mutants/generated.py --size 20 --area cuda  # a small sample of one area
    python3 ci/mutants/generated.py --platform             # the platform modules, judged by the unit tests
    tox -e mutants

The suite (issue 23), per run of ``modules.RUNS`` (a target, maybe with extra environment):
1. coverage and baseline in one run, recorded once per tree (``covered.py``, cached by the hash of what is
   copied): the whole conformance suite certified in a copy of the tree with ``probe.py`` loaded into
   certify's test process; per test, its outcome, the Python lines it executes, the fake's entry points it
   calls and the compiled module's methods it calls;
2. a sample: every mutant of the areas' files (``modules.SUITE_AREAS``) whose line a passing test executes
   (a C mutant: whose function a called entry point or method reaches, through its build's static call graph),
   minus those ``equivalent.txt`` lists, drawn per area with ``random.Random(seed)``; the seed is the commit
   (``git rev-parse HEAD``) unless --seed says otherwise, so a run is reproducible and the next commit draws
   other mutants. A mutant that does not compile is put back and another drawn. A line run at import in the
   body of a class the compiled module stands in for (``compiled_standins``) is judged on a run without it.
   A mutant is judged on every run of its area that executes its line (a line run at import: every run that
   imports its file; its value may matter on one run alone, a default that one backend leaves to it), the
   first of them as below, the others by their tests that execute it (at most --max-tests each), before the
   escalation: a bug in shared code is caught when any target's certificate shows it (api.py's
   register_language with `binary` negated breaks every OpenCL compile and no CUDA test);
3. each mutant in its own copy (``judging.py``): a C mutant's build made first, in a cache of its own; then
   ``certify --target T --only TEST...`` (the tests that execute the line, at most --max-tests, fail-fast:
   pytest --maxfail=1). Killed: a test's outcome differs from the baseline (a baseline pass that does not
   pass), or the run did not finish; by the conformance suite alone. A mutant that survives its covering tests
   is escalated: certified again with every other test that passes unmutated on its run (fail-fast; first
   those that execute the line but --max-tests left out, then the others: two runs, each within 60 s + 4
   times the recorded run's time), and the same on every other run that executes the line (cuda/fake's
   pure-Python run: the suite reaches the code the compiled module stands in for only there; for a mutant of
   the fake, cuda/fake on the fake's ASan/UBSan build, where the suite's tests drive it as on the plain build and
   a memory error that changes no result ends the run: the sanitizer is the instrument, the tests the suite's;
   another target: api.py's default `warp_size` of 1 shows only in OpenCL's KERNEL-60, which the covering
   sample of a module-level line may leave out); it survives only if those runs miss it too: a survivor is one
   the whole suite misses, on every target that runs its line (a survivor of api.py costs six whole runs).
   A C mutant whose build is not what the run loaded (the results file's ``builds``) is "not built": not
   counted, and the run fails.
The platform (issue 32, --platform): the same with ``modules.PLATFORM_AREAS``, judged by the unit tests of
``modules.PLATFORM_TESTS`` (pytest -x on the tests that execute the line; killed: pytest does not exit 0;
a survivor escalated to every other unit test that passes unmutated, as above).

Writes the report (``reporting.py``; default ``ci/mutants/REPORT.md``, or ``PLATFORM.md`` with --platform);
exits 1 below --threshold killed overall or --area-threshold in any area, when a mutant was not built, or
when a baseline is not clean.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import fnmatch
import os
import random
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import modules  # noqa: E402
import operators  # noqa: E402
from covered import Coverage, c_tests, record_platform, record_suite  # noqa: E402
from judging import Candidate, Outcome, run_candidate  # noqa: E402
from reporting import UNJUDGED, by, rate, report  # noqa: E402
from tree import area_files, copy_tree, tree_hash  # noqa: E402
import union  # noqa: E402

EQUIVALENT = HERE / "equivalent.txt"
C_SUFFIXES = (".c", ".inc")


def read_equivalent(path: Path = EQUIVALENT) -> dict[str, str]:
    """id -> reason, from ``equivalent.txt`` (one ``ID reason`` a line; blank lines and # comments skipped)."""
    return union.read_unreachable(path)


def compiles(mutant: operators.Mutant, tree: Path) -> bool:
    """A Python mutant parses; a C mutant's build compiles (in a copy of its folder: the mutated file, or, for
    an included part, every file of the folder; type errors newer compilers reject count as not)."""
    text = mutant.apply((tree / mutant.file).read_text(encoding="utf-8"))
    if mutant.file.endswith(".py"):
        try:
            compile(text, mutant.file, "exec")
            return True
        except SyntaxError:
            return False
    folder = (tree / mutant.file).parent
    with tempfile.TemporaryDirectory(prefix="ironaccel-mutant-cc-") as tmp:
        copy = Path(tmp) / "src"
        shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("*.o", "*.so"))
        (copy / Path(mutant.file).name).write_text(text, encoding="utf-8")
        units = [copy / Path(mutant.file).name] if mutant.file.endswith(".c") else sorted(copy.glob("*.c"))
        proc = subprocess.run(["cc", "-std=gnu11", "-fsyntax-only", "-Werror=int-conversion",
                               "-Werror=incompatible-pointer-types", "-Werror=implicit-function-declaration",
                               f"-I{sysconfig.get_paths()['include']}", *map(str, units)], capture_output=True)
        return proc.returncode == 0


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


def compiled_standins(text: str) -> set[str]:
    """The module-level names a Python file uses only where the compiled module does not load: those in the
    ``else`` of a conditional expression that tests ``_compiled`` (``_compiled.PoolCore if _compiled else
    _PoolCore``). Their class bodies run at import on every run, so coverage says a test ran them, but on a run
    that loads the compiled module its class stands in for them: nothing there can tell a mutant of them."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.IfExp) and any(isinstance(n, ast.Name) and n.id == "_compiled"
                                               for n in ast.walk(node.test)):
            out.update(n.id for n in ast.walk(node.orelse) if isinstance(n, ast.Name))
    return out


def tests_finder(f: str, c_functions, cov: Coverage, usable: set[str], unused: set[str] = frozenset()):
    """mutant -> the passing tests that execute it, in one run's coverage. A Python line run at import is
    attributed to the test that imported the module first: its mutant gets the tests that run any line of the
    file, unless it lies in the body of a class of ``unused`` (one the run's compiled module stands in for:
    none). A C mutant gets the tests that reach its function (``c_functions(build, cov)``: function -> tests),
    unless gcov saw no test run its line or the build's preprocessor dropped it."""
    if f.endswith(C_SUFFIXES):
        by_fn = c_functions(modules.c_build_of(f), cov)
        unrun = {*cov.c_unrun.get(f, ()), *cov.c_inactive.get(f, ())}  # no mutant there
        return lambda m: [t for t in by_fn.get(m.function, ()) if t in usable] if m.line not in unrun else []
    by_line = cov.lines.get(f, {})
    anywhere = sorted({t for ts in by_line.values() for t in ts})

    def tests_of(m: operators.Mutant) -> list[str]:
        if m.toplevel and m.function.split(".")[0] in unused:
            return []
        return [t for t in (anywhere if m.toplevel else by_line.get(m.line, ())) if t in usable]
    return tests_of


def candidates(area: str, files: list[str], snapshot: Path, runs: list[tuple[modules.Run | None, Coverage]],
               equivalent: dict[str, str]) -> tuple[list[Candidate], list[int]]:
    """Every mutant of the area's files that a passing test executes, on the first run (of ``runs``) whose
    coverage has one and, as ``others``, the later runs that execute it too; and [derived, executed, 0,
    equivalent] for the report."""
    graphs: dict[tuple[str, int], dict[str, list[str]]] = {}

    def c_functions(build: modules.CBuild, cov: Coverage) -> dict[str, list[str]]:
        """The build's whole text (its call graph spans its files), mapped once per run."""
        if (build.folder, id(cov)) not in graphs:
            folder = snapshot / build.folder
            text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(folder.iterdir()) if p.suffix in C_SUFFIXES)
            graphs[build.folder, id(cov)] = c_tests(build, text, cov)
        return graphs[build.folder, id(cov)]

    pool: list[Candidate] = []
    derived = equiv = 0
    for f in files:
        text = (snapshot / f).read_text(encoding="utf-8")
        muts = operators.mutants_of(f, text)
        derived += len(muts)
        standins = compiled_standins(text) if f.endswith(".py") else set()
        finders = [(r, tests_finder(f, c_functions, cov, cov.usable(), standins if r and r.compiled else set()))
                   for r, cov in runs]
        for m in muts:
            if m.id in equivalent:
                equiv += 1
                continue
            found = [(r, tests) for r, tests_of in finders if (tests := tests_of(m))]
            if found:
                (r, tests), *others = found
                pool.append(Candidate(m, area, r, tests, others))
    return pool, [derived, len(pool), 0, equiv]


def capped(tests: list[str], most: int, rng: random.Random) -> list[str]:
    """At most ``most`` of ``tests``, a seeded choice."""
    return sorted(rng.sample(tests, most)) if len(tests) > most else tests


def commit_seed() -> str:
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return proc.stdout.strip() or "no-commit"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", action="store_true", help="mutate the platform modules, judged by the unit tests")
    parser.add_argument("--unit-tests", nargs="+", metavar="FILE", help="with --platform: the unit test files "
                        "(default: modules.PLATFORM_TESTS)")
    parser.add_argument("--seed", help="the sample's seed (default: git rev-parse HEAD)")
    parser.add_argument("--size", type=int, default=150, help="mutants in the sample (default 150)")
    parser.add_argument("--area", action="append", help="areas to sample (repeatable; default all)")
    parser.add_argument("--run", action="append", help="runs of modules.RUNS to use (repeatable, globs; default all)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="mutants at once (default: CPU count)")
    parser.add_argument("--max-tests", type=int, default=30, help="tests per mutant at most (a seeded choice among "
                                                                   "those executing its line; default 30)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per mutant's covering tests at most "
                        "(default 300; less where they took less unmutated: 60 s + 4 times their time; the "
                        "escalation of a survivor to the rest of the suite: 60 s + 4 times the recorded run's time)")
    parser.add_argument("--test-timeout", type=float, default=30, help="seconds per test (default 30; a run of a "
                        "test that took more than a quarter of it unmutated gets 4 times that test's time)")
    parser.add_argument("--record-timeout", type=float, default=1800, help="seconds for the coverage and baseline "
                        "recording of one run at most (default 1800; a 2-core machine shared with other work needs more)")
    parser.add_argument("--threshold", type=float, default=None, help="overall kill rate required (default 0.90; "
                                                                       "0.95 with --platform)")
    parser.add_argument("--area-threshold", type=float, default=0.85, help="kill rate required per area (default 0.85)")
    parser.add_argument("--report", type=Path, help="write the report here (default ci/mutants/REPORT.md, or "
                                                    "PLATFORM.md with --platform)")
    parser.add_argument("--list", action="store_true", help="print the sample and stop (no mutant is run)")
    args = parser.parse_args()
    args.load_at_start = os.getloadavg()[0]  # the machine may be shared: the report says how busy it was
    args.threshold = args.threshold if args.threshold is not None else (0.95 if args.platform else 0.90)
    areas_def = modules.PLATFORM_AREAS if args.platform else modules.SUITE_AREAS
    args.areas = [a for a in areas_def if not args.area or a in args.area]
    if not args.areas:
        parser.error(f"no area matches --area (areas: {', '.join(areas_def)})")
    args.runs = [r for r in modules.RUNS if not args.run or any(fnmatch.fnmatch(r.name, g) for g in args.run)]
    return args


def record(args, snapshot: Path, every_file: list[str], digest: str, notes: list[str]) -> dict[str, Coverage]:
    """run name -> its coverage and baseline ("unit tests" for the platform), recorded in parallel."""
    if args.platform:
        cov = record_platform(snapshot, every_file, digest, args.record_timeout, tuple(args.unit_tests or modules.PLATFORM_TESTS))
        failing = sorted(t for t, o in cov.outcomes.items() if o == "fail")
        notes += [f"{len(failing)} unit tests fail unmutated and are not used: {', '.join(failing[:10])}"] if failing else []
        return {"unit tests": cov}
    covs = {}
    needed = [r for r in args.runs if set(r.areas) & set(args.areas)]
    missing = [r.name for r in needed if not r.available()]
    notes += [f"run {name}: not made, {modules.NO_LIBASAN}" for name in missing]
    needed = [r for r in needed if r.name not in missing]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for r, cov in zip(needed, pool.map(lambda r: record_suite(r, snapshot, every_file, digest, args.record_timeout), needed)):
            covs[r.name] = cov
            print(f"  coverage and baseline of {r.name}: {cov.seconds:.0f} s", flush=True)
            bad = sorted(t for t, o in cov.outcomes.items() if t not in cov.usable())
            if bad:
                notes.append(f"baseline {r.name}: {len(bad)} tests do not pass unmutated and are not used: "
                             + ", ".join(bad[:8]))
    return covs


def main() -> int:
    args = parse_args()
    seed = args.seed or commit_seed()
    areas_def = modules.PLATFORM_AREAS if args.platform else modules.SUITE_AREAS
    t0 = time.monotonic()
    notes: list[str] = []
    out = args.report or (HERE / ("PLATFORM.md" if args.platform else "REPORT.md"))
    with tempfile.TemporaryDirectory(prefix="ironaccel-mutants-snapshot-") as snap:
        snapshot = Path(snap)
        copy_tree(snapshot, ROOT, args.platform)  # every copy is made from this one: edits during the run change nothing
        files, empty = area_files(snapshot, {a: areas_def[a] for a in args.areas})
        notes += [f"`modules.py`: {g} matches no file" for g in empty]
        digest = tree_hash(snapshot)
        print(f"seed {seed}; recording coverage and baselines (cached per tree: {digest})", flush=True)
        try:
            covs = record(args, snapshot, [f for a in args.areas for f in files[a]], digest, notes)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
        clause_map = {t: c for cov in covs.values() for t, c in cov.clauses.items()}
        pools, counts = {}, {}
        for area in args.areas:
            runs = [(None, covs["unit tests"])] if args.platform else \
                [(r, covs[r.name]) for r in args.runs if area in r.areas and r.name in covs]
            pools[area], counts[area] = candidates(area, files[area], snapshot, runs, read_equivalent())
        share = quotas(args.areas, args.size, {a: len(p) for a, p in pools.items()})
        sample: list[Candidate] = []
        for area in args.areas:
            chosen, counts[area][2] = draw(pools[area], share[area], random.Random(f"{seed}:{area}"), snapshot)
            for c in chosen:
                c.executing = {c.run.name if c.run else "unit tests": c.tests, **{r.name: t for r, t in c.others}}
                rng = random.Random(f"{seed}:{c.mutant.id}")
                c.tests, c.others = capped(c.tests, args.max_tests, rng), \
                    [(r, capped(t, args.max_tests, rng)) for r, t in c.others]
            sample += chosen
        # run in turns across the areas, so a run stopped early still has a share of every area
        turn = {id(c): i for area in args.areas for i, c in enumerate(x for x in sample if x.area == area)}
        sample.sort(key=lambda c: turn[id(c)])
        print(f"sample: {len(sample)} mutants ({', '.join(f'{a} {share[a]}' for a in args.areas)}); "
              f"{time.monotonic() - t0:.0f} s since start", flush=True)
        if args.list:
            for c in sample:
                print(f"  {c.mutant.id} {c.mutant.file}:{c.mutant.line} {c.mutant.change} "
                      f"[{c.run.name if c.run else 'unit'}; {len(c.tests)} tests"
                      + "".join(f"; {r.name}: {len(t)}" for r, t in c.others) + "]")
            return 0
        outcomes: list[Outcome] = []
        order = {id(c): i for i, c in enumerate(sample)}
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = [pool.submit(run_candidate, c, snapshot, covs, args.timeout, args.test_timeout, args.platform)
                       for c in sample]
            for f in concurrent.futures.as_completed(futures):
                o = f.result()
                outcomes.append(o)
                outcomes.sort(key=lambda o: order[id(o.candidate)])
                escalated = f" + {o.escalated} of the suite in {o.escalation_s:.0f} s" if o.escalation_s else ""
                print(f"  {o.status:9} {o.candidate.mutant.id} {o.candidate.mutant.change} ({o.seconds:.0f} s, "
                      f"{o.ran} tests{escalated}) {o.detail if o.status != 'killed' else ''}", flush=True)
                if len(outcomes) < len(sample):  # the report so far, saying so: a stopped run leaves it
                    partial = [f"**In progress**: {len(outcomes)} of the {len(sample)} mutants drawn have run.", *notes]
                    out.write_text(report(outcomes, args, seed, args.platform, covs, partial, clause_map,
                                          time.monotonic() - t0, counts), encoding="utf-8")
    text = report(outcomes, args, seed, args.platform, covs, notes, clause_map, time.monotonic() - t0, counts)
    out.write_text(text, encoding="utf-8")
    print(text.split("\n## Coverage")[0])
    print(f"report: {out}")
    return 1 if gate_fails(outcomes, args) else 0


def gate_fails(outcomes: list[Outcome], args) -> bool:
    """Says why the run fails its thresholds, or that a mutant was not built (the run measured nothing then)."""
    table = by(outcomes, lambda o: o.candidate.area)
    killed, survived = sum(k for k, _ in table.values()), sum(s for _, s in table.values())
    why = [f"overall: {rate(killed, survived):.0%} killed, below {args.threshold:.0%}"] \
        if rate(killed, survived) < args.threshold else []
    why += [f"area {a}: {rate(k, s):.0%} killed, below {args.area_threshold:.0%}"
            for a, (k, s) in table.items() if rate(k, s) < args.area_threshold]
    why += [f"{o.candidate.mutant.id}: {o.status} ({o.detail})" for o in outcomes if o.status in UNJUDGED]
    for line in why:
        print(line, file=sys.stderr)
    return bool(why)


if __name__ == "__main__":
    sys.exit(main())
