#!/usr/bin/env python3
"""The project's mutation run: every mutant of ``catalogue.py`` applied to its own temporary copy of the tree,
certified on its target, and a report of what the suite caught.

    python3 ci/mutants/run.py                 # every mutant, CPU-count at a time; writes ci/mutants/CATALOGUE.md
    python3 ci/mutants/run.py --only 'vk-*'   # some mutants; prints the report instead of writing it
    tox -e catalogue

Per mutant: ``ironaccel/``, ``conformance/``, ``fakes/`` and ``pyproject.toml`` are copied to a temporary
folder, the mutant's ``old`` text (which must occur exactly once, else the run fails loudly: the catalogue has
gone stale) is replaced by ``new``, and ``python3 -m ironaccel certify --target T --only CLAUSE...`` runs there
with PYTHONPATH at the copy (``--whole-suite``: no ``--only``). Killed: a test that passed on the unmutated
tree does not pass (fail, flaky, not-run), the run did not finish, or it crashed or ran past the time limit;
survived: every test passed. Plugin mutants run the canary suite (``canary_check.py``) instead: killed when
its known outcomes are recorded differently. Unmutated baselines of every (target, environment) and of the
canary run first and must be clean. Exit 1 when any area kills fewer than 95% of its non-equivalent mutants,
when a mutant did not apply, or when a baseline is not clean.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from catalogue import MUTANTS  # noqa: E402
from mutant import Mutant  # noqa: E402

from ironaccel.cts import runs, spec, tables  # noqa: E402

COPIED = ("ironaccel", "conformance", "fakes", "pyproject.toml")
THRESHOLD = 0.95
PASSING = ("pass", "not-supported")
REPORT = HERE / "CATALOGUE.md"


class Stale(Exception):
    """A mutant's old text is not in its file exactly once: the code moved on, the catalogue must follow."""


@dataclass
class Result:
    mutant: Mutant
    status: str  # killed, survived, equivalent, stale, baseline
    seconds: float = 0.0
    killers: list[str] = field(default_factory=list)  # test ids (or canary lines) that caught it
    detail: str = ""


def copy_tree(dest: Path, root: Path = ROOT) -> None:
    for name in COPIED:
        src = root / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis"))
        else:
            shutil.copy2(src, dest / name)


def apply(mutant: Mutant, tree: Path) -> None:
    path = tree / mutant.file
    if not path.exists():
        raise Stale(f"{mutant.id}: {mutant.file} does not exist")
    text = path.read_text(encoding="utf-8")
    count = text.count(mutant.old)
    if count != 1:
        raise Stale(f"{mutant.id}: the text to replace occurs {count} times in {mutant.file} (must be once)")
    path.write_text(text.replace(mutant.old, mutant.new), encoding="utf-8")


def environment(tree: Path, mutant: Mutant | None, scratch: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "HYPOTHESIS_PROFILE": "ci"}
    if mutant is not None:
        env.update(mutant.env)
        if mutant.area == "fake":
            env["IRONACCEL_CACHE"] = str(scratch / "cache")  # the mutated fake is built here, not in the shared cache
    return env


def reaped(cmd: list[str], limit: float, env: dict[str, str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """subprocess.run(cmd, capture_output, text, timeout=limit), and then every process it left is killed: a
    mutant's run can leave processes behind (a hung test's workers; a mutated certify that no longer kills its
    test process), and they would hold CPU and memory for the rest of the sample. What it started is found by
    a mark in the environment, which every descendant inherits, also those in sessions of their own. Its
    output goes through files, not pipes, so that a process left holding them cannot keep the run waiting."""
    mark = f"{os.getpid()}-{uuid.uuid4().hex}"
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, env={**env, REAP_MARK: mark}, stdout=out, stderr=err, **kwargs)
        try:
            proc.wait(timeout=limit)  # past it: TimeoutExpired, once what it started is killed
        finally:
            kill_marked(mark)
            proc.wait()
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read())


REAP_MARK = "IRONACCEL_MUTANT_RUN"


def kill_marked(mark: str) -> None:
    """SIGKILL every process whose environment holds REAP_MARK=mark (Linux: /proc/PID/environ), and wait (10 s
    at most) until each is gone or a zombie."""
    needle = f"{REAP_MARK}={mark}".encode()
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(entry / "stat")
        except (OSError, ValueError):
            pass  # gone meanwhile, or not ours to read
    deadline = time.monotonic() + 10
    while killed and time.monotonic() < deadline:
        killed = [stat for stat in killed if _alive(stat)]
        time.sleep(0.01)


def _alive(stat: Path) -> bool:
    try:
        return stat.read_text().rsplit(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


#: What a run that could not start its processes prints (fork or thread creation refused: EAGAIN, ENOMEM) — the
#: machine's state at that moment, no verdict on the mutant: a sample saw a few seconds of it kill 7 mutants in 1 s
MACHINE_EXHAUSTED = ("Resource temporarily unavailable", "Cannot allocate memory", "can't start new thread")
#: The problem of a certify that the machine kept from running, its tries used up: no verdict (never a kill)
NOT_JUDGED = "not judged: "
EXHAUSTED_TRIES = 3


def certify(tree: Path, target: str, env: dict[str, str], results: Path, only: tuple[str, ...], limit: float,
            test_timeout: float = 60) -> tuple[dict | None, str]:
    """Certify ``target`` in ``tree``; (its results document or None, what went wrong). A run that left no results
    file because the machine refused it processes (MACHINE_EXHAUSTED) is tried again, 10 s later, then 20 s;
    after EXHAUSTED_TRIES the problem starts with NOT_JUDGED."""
    cmd = [sys.executable, "-m", "ironaccel", "certify", "--target", target, "--results", str(results), "--jobs", "1",
           "--test-timeout", f"{test_timeout:g}", "--timeout", f"{limit:g}", *[a for c in only for a in ("--only", c)]]
    problem = ""
    for attempt in range(EXHAUSTED_TRIES):
        time.sleep(10 * attempt)
        try:
            proc = reaped(cmd, limit + 60, env, cwd=tree)
        except subprocess.TimeoutExpired:
            return None, f"certify ran past {limit + 60:g} s"
        except OSError as exc:  # the engine's own fork refused
            problem = f"certify could not start: {exc}"
            continue
        out = results / (target.replace("/", "-") + ".json")
        if not out.exists():  # a run that did not finish (fail-fast stopped it) is not promoted: its run folder has it
            out = max((results / runs.RUNS).glob(f"*/{out.name}"), default=out)
        if out.exists():
            return json.loads(out.read_text(encoding="utf-8")), ""
        problem = f"certify exited {proc.returncode} without a results file: {proc.stderr.strip()[-300:]}"
        if not any(sign in proc.stderr for sign in MACHINE_EXHAUSTED):
            return None, problem
    return None, f"{NOT_JUDGED}the machine refused processes {EXHAUSTED_TRIES} times: {problem}"


def caught(was: str | None, got: str) -> bool:
    """The kill rule (issue 23: any test outcome that differs from the baseline's): a test that ran and ended
    otherwise than unmutated. A pass that became not-supported counts: the certificate claims less."""
    return got != was and got != "not-run"


def verdict(doc: dict | None, problem: str, baseline: dict[str, str]) -> tuple[str, list[str], str]:
    """(killed | survived, the tests that caught it, detail) of one certify run against the baseline outcomes."""
    if doc is None:
        if problem.startswith(NOT_JUDGED):
            raise RuntimeError(problem)  # the catalogue's run fails loudly: no mutant is counted from it
        return "killed", [], problem
    if doc["run"]["status"] != "ok":
        return "killed", [], f"run {doc['run']['status']}: {doc['run']['message'][:200]}"
    got = {t["id"]: t["outcome"] for t in doc["tests"]}
    killers = [f"{tid} ({got.get(tid, 'missing')})" for tid, was in sorted(baseline.items())
               if tid in got and caught(was, got[tid])]
    if killers:
        return "killed", killers, ""
    return "survived", [], f"{len(got)} tests ran, all as in the baseline"


def run_mutant(mutant: Mutant, snapshot: Path, baselines: dict, limit: float, whole_suite: bool) -> Result:
    if mutant.equivalent:
        return Result(mutant, "equivalent", detail=mutant.equivalent)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"ironaccel-mutant-{mutant.id}-") as tmp:
        scratch = Path(tmp)
        tree = scratch / "tree"
        tree.mkdir()
        copy_tree(tree, snapshot)
        try:
            apply(mutant, tree)
        except Stale as exc:
            return Result(mutant, "stale", detail=str(exc))
        env = environment(tree, mutant, scratch)
        if mutant.check == "canary":
            try:
                proc = subprocess.run([sys.executable, str(HERE / "canary_check.py"), "--target", mutant.target,
                                       "--results", str(scratch / "results")], cwd=tree, env=env,
                                      capture_output=True, text=True, timeout=limit)
            except subprocess.TimeoutExpired:
                return Result(mutant, "killed", time.monotonic() - t0, detail=f"canary ran past {limit:g} s")
            lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
            status = "survived" if proc.returncode == 0 else "killed"
            return Result(mutant, status, time.monotonic() - t0, lines[:3] if status == "killed" else [],
                          "" if lines or status == "survived" else f"canary exited {proc.returncode}")
        only = () if whole_suite else mutant.clauses
        doc, problem = certify(tree, mutant.target, env, scratch / "results", only, limit)
        status, killers, detail = verdict(doc, problem, baselines[key(mutant)])
        return Result(mutant, status, time.monotonic() - t0, killers, detail)


def key(mutant: Mutant) -> tuple[str, tuple[tuple[str, str], ...]]:
    return mutant.target, tuple(sorted(mutant.env.items()))


def run_baselines(mutants: list[Mutant], snapshot: Path, limit: float, whole_suite: bool, jobs: int
                  ) -> tuple[dict, list[str]]:
    """Certify every (target, environment) the suite mutants use, unmutated, on the clauses those mutants run
    (``whole_suite``: every clause); and the canary. Problems listed."""
    problems: list[str] = []
    baselines: dict = {}
    keys = sorted({key(m) for m in mutants if m.check == "suite" and not m.equivalent})
    canary = any(m.check == "canary" and not m.equivalent for m in mutants)
    with tempfile.TemporaryDirectory(prefix="ironaccel-mutant-baseline-") as tmp:
        scratch = Path(tmp)
        tree = scratch / "tree"
        tree.mkdir()
        copy_tree(tree, snapshot)

        def one(k):
            target, env_items = k
            env = {**environment(tree, None, scratch), **dict(env_items)}
            results = scratch / ("results-" + str(abs(hash(k))))
            only = () if whole_suite else tuple(sorted({c for m in mutants if key(m) == k for c in m.clauses}))
            return k, certify(tree, target, env, results, only, limit)

        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            for k, (doc, problem) in pool.map(one, keys):
                label = k[0] + "".join(f" {a}={b}" for a, b in k[1])
                if doc is None or doc["run"]["status"] != "ok":
                    problems.append(f"baseline {label}: {problem or doc['run']['message']}")
                    continue
                bad = [t["id"] for t in doc["tests"] if t["outcome"] not in PASSING]
                if bad:
                    problems.append(f"baseline {label}: not passing unmutated: {', '.join(bad)}")
                baselines[k] = {t["id"]: t["outcome"] for t in doc["tests"]}
        if canary:
            proc = subprocess.run([sys.executable, str(HERE / "canary_check.py"), "--results", str(scratch / "canary")],
                                  cwd=tree, env=environment(tree, None, scratch), capture_output=True, text=True)
            if proc.returncode:
                problems.append("baseline canary: " + " / ".join((proc.stdout + proc.stderr).split("\n")[:5]))
    return baselines, problems


def rates(results: list[Result]) -> dict[str, tuple[int, int, int, int]]:
    """area -> (mutants, equivalent, killed, survived)."""
    out: dict[str, list[int]] = {}
    for r in results:
        row = out.setdefault(r.mutant.area, [0, 0, 0, 0])
        row[0] += 1
        row[1] += r.status == "equivalent"
        row[2] += r.status == "killed"
        row[3] += r.status == "survived"
    return {a: tuple(v) for a, v in out.items()}  # type: ignore[misc]


def rate(killed: int, survived: int) -> float:
    return killed / (killed + survived) if killed + survived else 1.0


def report(results: list[Result], problems: list[str], wall_s: float, jobs: int, whole_suite: bool) -> str:
    table = rates(results)
    lines = [
        "# Mutation run",
        "",
        "Generated by `python3 ci/mutants/run.py` (never edit by hand): each mutant of `ci/mutants/catalogue.py`",
        "applied to a temporary copy of the tree and certified on its target "
        + ("with the whole suite." if whole_suite else "with the clauses that should catch it (`certify --only`)."),
        f"Run {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, {len(results)} mutants, {jobs} at a time, "
        f"{wall_s / 60:.1f} min wall time. Threshold: {THRESHOLD:.0%} killed per area (equivalent mutants not counted).",
        "",
    ]
    totals = tuple(sum(v[i] for v in table.values()) for i in range(4))
    rows = [[area, str(n), str(eq), str(killed), str(survived), f"{rate(killed, survived):.0%}"]
            for area, (n, eq, killed, survived) in [*sorted(table.items()), ("**all**", totals)]]
    lines += tables.markdown(["area", "mutants", "equivalent", "killed", "survived", "kill rate"], rows)
    if problems:
        lines += ["", "## Problems (the run is not valid)", ""] + [f"- {p}" for p in problems]
    survivors = [r for r in results if r.status == "survived"]
    lines += ["", "## Survivors", ""]
    lines += [f"- `{r.mutant.id}` ({r.mutant.target}): {r.mutant.bug}; should be caught by "
              f"{', '.join(r.mutant.clauses)}" for r in survivors] or ["None."]
    lines += ["", "## Equivalent mutants", ""]
    lines += [f"- `{r.mutant.id}`: {r.mutant.equivalent}" for r in results if r.status == "equivalent"] or ["None."]
    rows = []
    for r in results:
        target = r.mutant.target + "".join(f" {a}={b}" for a, b in r.mutant.env.items())
        caught = "; ".join(r.killers[:2]) + (f" (+{len(r.killers) - 2})" if len(r.killers) > 2 else "") or r.detail
        rows.append([f"`{r.mutant.id}`", r.mutant.area, target, r.mutant.bug, r.status, tables.cell(caught, 160),
                     f"{r.seconds:.0f}"])
    lines += ["", "## Every mutant", ""]
    lines += tables.markdown(["mutant", "area", "target", "bug", "result", "caught by", "s"], rows)
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", metavar="GLOB", help="mutant ids to run (repeatable)")
    parser.add_argument("--area", action="append", help="areas to run (repeatable)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="mutants run at once (default: CPU count)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per mutant (default 300)")
    parser.add_argument("--whole-suite", action="store_true", help="certify the whole suite, not the mutant's clauses")
    parser.add_argument("--report", type=Path, help=f"write the report here (default: {REPORT.relative_to(ROOT)} for a "
                                                     "run of every mutant, else print it)")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if (not args.only or any(fnmatch.fnmatch(m.id, g) for g in args.only))
              and (not args.area or m.area in args.area)]
    if not chosen:
        parser.error("no mutant matches --only/--area")
    ids = [m.id for m in MUTANTS]
    problems = [f"mutant id {i!r} is used twice" for i in sorted(set(ids)) if ids.count(i) > 1]
    from_spec = spec.load_clauses(ROOT / "conformance" / "SPEC.md")
    problems += [f"{m.id}: clause {c} is not in SPEC.md" for m in MUTANTS for c in m.clauses if c not in from_spec]
    t0 = time.monotonic()
    print(f"mutants: {len(chosen)} of {len(MUTANTS)}; baselines first", flush=True)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="ironaccel-mutant-snapshot-") as snapshot:
        copy_tree(Path(snapshot))  # every copy is made from this one, so edits made during the run change nothing
        baselines, baseline_problems = run_baselines(chosen, Path(snapshot), args.timeout, args.whole_suite, args.jobs)
        problems += baseline_problems
        if not baseline_problems:
            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                futures = [pool.submit(run_mutant, m, Path(snapshot), baselines, args.timeout, args.whole_suite)
                           for m in chosen]
                for m, f in zip(chosen, futures):
                    r = f.result()
                    results.append(r)
                    print(f"  {r.status:10} {m.id} ({r.seconds:.0f} s) {r.detail if r.status != 'killed' else ''}",
                          flush=True)
    problems += [r.detail for r in results if r.status == "stale"]
    text = report(results, problems, time.monotonic() - t0, args.jobs, args.whole_suite)
    full = not args.only and not args.area
    out = args.report or (REPORT if full else None)
    if out:
        out.write_text(text, encoding="utf-8")
        print(text.split("\n## Every mutant")[0])  # the kill rates, problems, survivors and equivalents
        print(f"report: {out}")
    else:
        print(text)
    low = [a for a, (_, _, k, s) in rates(results).items() if rate(k, s) < THRESHOLD]
    for a in low:
        print(f"area {a}: below {THRESHOLD:.0%} killed", file=sys.stderr)
    for p in problems:
        print(f"problem: {p}", file=sys.stderr)
    return 1 if low or problems else 0


if __name__ == "__main__":
    sys.exit(main())
