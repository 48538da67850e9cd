"""Certify over a farm of machines on Ray (``ironaccel certify --ray ADDRESS|auto|local``).

Each target (or each shard of one, ``--shard-size N``) becomes a Ray task that runs exactly what
``certify`` runs on one machine (``certify.run_target``: the suite in its own process) on a node that
advertises the target. A node advertises what its own ``ironaccel doctor`` finds runnable, as Ray custom
resources ``{"target:vulkan/lavapipe": 1, ..., "hardware-slot": 1}``::

    ray start --address HEAD:6379 --resources "$(ironaccel doctor --ray-resources)"

A task asks for ``TASK_SHARE`` of its target's resource and one CPU, so any number of one target's tasks
share a node, bounded by its CPUs (as ``certify`` bounds a machine's targets by its cores). A hardware
target's task (or one of a target this machine does not know) also takes the node's one ``hardware-slot``
whole: hardware targets run one at a time on a node, as ``certify`` runs them on one machine (they share
its GPU, and MEM-7 exhausts its memory).

What goes over the wire: to the node, the target's name, the selection, the time limits (and, for tests,
a suite folder); back, as the task's stream, the node's name, the results file each time the node's test
process rewrites it (after every test: the caller's copy is what the progress line reads), and at the end
every file the run wrote (results, JUnit, certificate, the log of a failed run) as bytes, into the caller's
``--results``, as certify's runs are (``runs``): under the results folder's lock, into a run folder per
target (``<results>/runs/<time>-<target>-<id>/``), promoted over ``<results>/<stem>.json`` (and its JUnit and
certificate) only when complete. Shards go to ``<run folder>/shards/<stem>-<K>of<N>/`` and merge into
``<run folder>/<stem>.json``.

A node that dies mid-run (its task raises a Ray error; tasks are never retried, so nothing runs twice
behind the caller's back) leaves its target ``crashed``: the last copy of its results file, the tests it
had not finished ``not-run``; a task whose target no live node advertises any more is cancelled and
recorded the same way (kept in its run folder, not promoted). ``--resume`` runs again only the targets
whose results file in ``<results>`` is missing or ``crashed``, and of a sharded target only the shards that
its newest earlier run folder does not hold finished.

A farm run gives the results files a plain ``certify`` gives, apart from timings and where it ran
(``differences``); CI checks it on its own machine::

    python -m ironaccel.cts.farm compare PLAIN_RESULTS FARM_RESULTS
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from . import certify, results, runs, spec, targets
from .certify import TARGET_TIMEOUT_S, TEST_TIMEOUT_S, TargetRun
from ..errors import InvalidArgument
from .results import RunStatus
from .selection import Selection

RESOURCE_PREFIX = "target:"
TASK_SHARE = 0.001  # of a node's target resource (1): Ray's resolution is 0.0001
HARDWARE_SLOT = "hardware-slot"
INSTALL_HINT = "pip install 'ironaccel[farm]' (or pip install ray)"
SHARDS_FOLDER = "shards"
NODE_POLL_S = 1.0  # how often a node looks at its results file for the caller's progress line
STRANDED_CHECK_S = 5.0  # how often the caller checks that waiting tasks still have a node that can run them


class FarmUnavailable(Exception):
    """``certify --ray`` cannot run: Ray is not installed, no cluster answers, or no node advertises a target."""


def resource(target: str) -> str:
    return RESOURCE_PREFIX + target


def node_resources() -> dict[str, float]:
    """The Ray custom resources of this machine: one per target its doctor finds runnable, and its one
    hardware slot."""
    return {**{resource(name): 1.0 for name in certify.runnable_targets()}, HARDWARE_SLOT: 1.0}


def task_resources(target: str) -> dict[str, float]:
    """What a run of ``target`` asks of a node, besides a CPU: a share of the target, and for a hardware
    target or one unknown here (it may be hardware) the node's hardware slot."""
    known = targets.registered_drivers().get(target)
    return {resource(target): TASK_SHARE, **({} if known and known.simulated else {HARDWARE_SLOT: 1.0})}


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise FarmUnavailable(f"Ray is not installed: {INSTALL_HINT}") from exc
    return ray


def connect(address: str) -> Any:
    """Ray, connected: to ``address`` (``host:port``, ``ray://host:10001`` or ``auto``, a cluster that
    ``ray start`` began), or for ``local`` to a new single-machine cluster advertising this machine's
    targets. A process already connected (a test, a notebook) keeps its connection."""
    ray = import_ray()
    if not ray.is_initialized():
        options: dict[str, Any] = {"include_dashboard": False, "logging_level": "warning"}
        if address == "local":
            options["resources"] = node_resources()
        try:
            ray.init(address=address, **options)
        except ConnectionError as exc:
            raise FarmUnavailable(f"no Ray cluster answers at {address!r} ({exc}); start one with `ray start "
                                  "--head`, or use --ray local; a head with token authentication (it found "
                                  "~/.ray/auth_token) also needs RAY_AUTH_MODE=token and its token here") from exc
    return ray


def advertised(ray: Any) -> dict[str, int]:
    """Target -> how many live nodes advertise it."""
    counts: dict[str, int] = {}
    for node in ray.nodes():
        if node["Alive"]:
            for key in node["Resources"]:
                if key.startswith(RESOURCE_PREFIX):
                    counts[key[len(RESOURCE_PREFIX):]] = counts.get(key[len(RESOURCE_PREFIX):], 0) + 1
    return counts


# -- what runs on a node ----------------------------------------------------------------------------------

def node_name(ray: Any) -> str:
    return f"{socket.gethostname()}@{ray.get_runtime_context().get_node_id()[:8]}"


def count_tests(target: str, selection: Selection, suite: str | None) -> int:
    """On a node: how many tests ``selection`` picks on ``target`` (a collect-only run of the suite)."""
    with tempfile.TemporaryDirectory(prefix="ironaccel-farm-") as tmp:
        out = Path(tmp) / results.file_name(target)
        suite_dir = Path(suite) if suite else spec.conformance_dir()
        cmd = [sys.executable, "-m", "pytest", *certify.pytest_args(target, out, TEST_TIMEOUT_S, suite_dir.resolve(),
                                                                   selection), "--collect-only"]
        proc = subprocess.run(cmd, env=certify.child_environment(target), cwd=tmp, capture_output=True, text=True,
                              timeout=600)
        if not out.is_file():
            raise RuntimeError(f"collecting {target}'s tests wrote no results file: {proc.stdout[-500:]}")
        return len(results.load(out)["tests"])


def run_on_node(target: str, selection: Selection, timeout_s: float, test_timeout_s: float, suite: str | None,
                runner: Callable[..., TargetRun] = certify.run_target):
    """On a node (a Ray generator task): run the target with ``runner`` (the farm's simulation passes one
    that runs nothing), yielding the node's name, each new version of the results file, and at the end the
    run and every file it wrote."""
    import ray

    yield {"node": node_name(ray)}
    with tempfile.TemporaryDirectory(prefix="ironaccel-farm-") as tmp, ThreadPoolExecutor(1) as pool:
        folder = Path(tmp)
        out = folder / results.file_name(target)
        running = pool.submit(runner, target, folder, timeout_s, test_timeout_s, Path(suite) if suite else None,
                              selection)
        last = b""
        while not wait([running], timeout=NODE_POLL_S).done:
            try:
                data = out.read_bytes()  # the plugin replaces the file whole: never half written
            except OSError:
                continue
            if data != last:
                last = data
                yield {"progress": data}
        run = running.result()
        yield {"run": {"status": run.status, "summary": run.summary, "seconds": run.seconds,
                       "message": run.message.replace(tmp, "{folder}")},
               "files": {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}}


# -- the caller -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Job:
    """One Ray task: a target, or one shard of it."""

    target: str
    selection: Selection
    sharded: bool = False

    @property
    def label(self) -> str:
        return f"{self.target} {self.selection.shard}" if self.sharded else self.target

    def folder(self, results_dir: Path) -> Path:
        if not self.sharded:
            return results_dir
        k, n = self.selection.shard.split("/")
        return results_dir / SHARDS_FOLDER / f"{results.file_name(self.target).removesuffix('.json')}-{k}of{n}"

    def results_file(self, results_dir: Path) -> Path:
        return self.folder(results_dir) / results.file_name(self.target)


def finished(path: Path) -> bool:
    """Does ``path`` hold a run that ``--resume`` keeps (a valid results file, not crashed)?"""
    try:
        return results.load(path)["run"]["status"] != RunStatus.CRASHED
    except ValueError:
        return False


def plan(ray: Any, names: list[str], selection: Selection, shard_size: int | None, suite: str | None) -> dict[str, list[Job]]:
    """Each target's jobs: the whole target, or with ``shard_size`` shards of about that many tests, counted
    on a node of the target (a target whose tests cannot be counted, its collection failing or its node
    dying, runs whole: its own run then records what is wrong)."""
    if not shard_size:
        return {name: [Job(name, selection)] for name in names}
    counter = ray.remote(num_cpus=1, max_retries=0)(count_tests)
    refs = {name: counter.options(resources={resource(name): TASK_SHARE}).remote(name, selection, suite)
            for name in names}
    jobs = {}
    for name, ref in refs.items():
        try:
            n = max(1, math.ceil(ray.get(ref) / shard_size))
        except ray.exceptions.RayError:
            n = 1
        jobs[name] = ([Job(name, Selection(selection.only, selection.skip, f"{k}/{n}"), True) for k in range(1, n + 1)]
                      if n > 1 else [Job(name, selection)])
    return jobs


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _from_file(target: str, path: Path, seconds: float, node: str) -> TargetRun:
    doc = results.load(path)
    return TargetRun(target, path, doc["run"]["status"], doc["summary"], seconds, doc["run"]["message"], node)


def _crashed(job: Job, run_folder: Path, node: str, why: str, seconds: float) -> TargetRun:
    """Record a job its node never finished: its last results file (if one came back) marked crashed, or
    a crashed results file without tests; a target this machine does not know gets no file, only the run."""
    path = job.results_file(run_folder)
    message = f"{node or 'no node'}: {why}"
    if path.is_file():
        doc = results.load(path)
        doc["run"] = {"status": RunStatus.CRASHED.value, "message": message}
    else:
        try:
            target = targets.get(job.target)
        except InvalidArgument:  # a target only the farm's nodes know: nothing to write it with here
            return TargetRun(job.target, path, RunStatus.CRASHED.value, None, seconds, message + " (no results file)", node)
        doc = results.document(target, spec.current([job.target]).parts(job.target), results.now(), RunStatus.CRASHED,
                               message, selection=None if job.selection.everything else job.selection.record())
    results.dump(doc, path)
    certify.write_junit_and_certificate(path)
    return _from_file(job.target, path, seconds, node)


def run_jobs(ray: Any, jobs: list[Job], folders: dict[str, Path], timeout_s: float, test_timeout_s: float,
             suite: str | None, progress: certify.Progress,
             runner: Callable[..., TargetRun] = certify.run_target) -> dict[Job, TargetRun]:
    """Submit every job, then follow their streams until each has finished or failed; each job's files go to
    its target's run folder (``folders``)."""
    task = ray.remote(num_cpus=1, max_retries=0)(run_on_node)
    streams = {}
    for job in jobs:
        job.results_file(folders[job.target]).unlink(missing_ok=True)  # stale progress, or what --resume re-runs
        streams[task.options(resources=task_resources(job.target)).remote(
            job.target, job.selection, timeout_s, test_timeout_s, suite, runner)] = job
    nodes: dict[Job, str] = {}
    started: dict[Job, float] = {}
    ended: dict[Job, TargetRun] = {}
    checked = time.monotonic()

    def end(stream: Any, run: TargetRun) -> None:
        job = streams.pop(stream)
        ended[job] = run
        progress.done(run, job.label)

    while streams:
        ready, _ = ray.wait(list(streams), num_returns=1, timeout=1.0)
        for stream in ready:
            run_job = streams[stream]
            seconds = time.monotonic() - started.get(run_job, time.monotonic())
            try:
                item = ray.get(next(stream))
            except StopIteration:  # ended without its final item: cannot happen unless the node lies
                end(stream, _crashed(run_job, folders[run_job.target], nodes.get(run_job, ""), "the task ended without its results", seconds))
                continue
            except ray.exceptions.RayError as exc:
                why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                end(stream, _crashed(run_job, folders[run_job.target], nodes.get(run_job, ""),
                                     f"the node's task failed before the run ended ({type(exc).__name__}: {why})", seconds))
                continue
            path = run_job.results_file(folders[run_job.target])
            if "node" in item:
                nodes[run_job], started[run_job] = item["node"], time.monotonic()
                progress.started(run_job.label, path, item["node"])
            elif "progress" in item:
                _write(path, item["progress"])
            else:
                folder = run_job.folder(folders[run_job.target])
                for name, data in item["files"].items():
                    _write(folder / name, data)
                r = item["run"]
                end(stream, TargetRun(run_job.target, path, r["status"], r["summary"], r["seconds"],
                                      r["message"].replace("{folder}", str(folder)), nodes[run_job]))
        if not ready and time.monotonic() - checked > STRANDED_CHECK_S:
            checked = time.monotonic()
            offered = advertised(ray)
            for stream, job in list(streams.items()):
                if job not in nodes and job.target not in offered:
                    ray.cancel(stream, force=True)
                    end(stream, _crashed(job, folders[job.target], "", f"no live node advertises {resource(job.target)} "
                                                                "any more; the task was cancelled", 0.0))
    return ended


def certify_on_farm(names: list[str] | None, results_dir: Path, address: str = "local",
                    timeout_s: float = TARGET_TIMEOUT_S, test_timeout_s: float = TEST_TIMEOUT_S,
                    selection: Selection = Selection(), shard_size: int | None = None, resume: bool = False,
                    suite: Path | None = None, stream=None,
                    runner: Callable[..., TargetRun] = certify.run_target) -> list[TargetRun]:
    """Certify ``names`` (None: every target a live node advertises) on the farm at ``address``; return
    each target's run, in ``names``' order, its files in ``results_dir``. ``suite`` and ``runner`` are
    ``certify.run_target``'s (tests and the farm simulation change them)."""
    ray = connect(address)
    offered = advertised(ray)
    names = list(names) if names else sorted(offered)
    if not names:
        raise FarmUnavailable("no node of the farm advertises a target: start each node with "
                              "`ray start ... --resources \"$(ironaccel doctor --ray-resources)\"`")
    absent = [n for n in names if n not in offered]
    if absent:
        raise FarmUnavailable(f"no live node advertises {', '.join(absent)} (resources "
                              f"{', '.join(resource(n) for n in absent)}); the farm has: {', '.join(sorted(offered)) or 'none'}")
    results_dir = Path(results_dir).resolve()
    suite_arg = str(Path(suite).resolve()) if suite else None
    with runs.lock(results_dir):
        jobs = plan(ray, names, selection, shard_size, suite_arg)
        kept = [n for n in names if resume and finished(results_dir / results.file_name(n))]
        folders = {n: runs.new_run_folder(results_dir, n) for n in names if n not in kept}
        try:
            todo = [j for n, folder in folders.items() for j in jobs[n]
                    if not (resume and _resumed(j, results_dir, folder))]
            nodes = sum(1 for n in ray.nodes() if n["Alive"])
            unit = "shards and targets" if shard_size else "targets"
            with certify.Progress(len(todo), stream, unit=unit) as progress:
                earlier = sum(len(js) for js in jobs.values()) - len(todo)
                progress.echo(f"certifying {len(names)} target(s) as {len(todo)} Ray task(s) on a farm of {nodes} "
                              f"node(s)" + (f", keeping {earlier} finished earlier" if earlier else "")
                              + f": {', '.join(names)}")
                done = run_jobs(ray, todo, folders, timeout_s, test_timeout_s, suite_arg, progress, runner)
        except BaseException as exc:  # Ctrl-C, a lost cluster: every run folder is kept as a record, none promoted
            for n, folder in folders.items():
                runs.finish(folder, {"target": n, "command": runs.command_line(), "pid": os.getpid(),
                                     "promoted": False, "not_promoted_because": f"the farm run stopped ({exc!r})"})
            raise
        out = []
        for name in names:
            if name in kept:
                out.append(_from_file(name, results_dir / results.file_name(name), 0.0, "earlier run"))
                continue
            folder = folders[name]
            ran = [done.get(j) or _from_file(name, j.results_file(folder), 0.0, "earlier run") for j in jobs[name]]
            run = certify.merge_shard_runs(name, ran, folder) if jobs[name][0].sharded else ran[0]
            out.append(certify.settle(run, folder, results_dir, selection, None))
    return out


def _resumed(job: Job, results_dir: Path, folder: Path) -> bool:
    """With --resume: does the newest earlier run folder of ``job``'s target hold its shard finished? Then
    its files are copied into the new run ``folder`` and the shard is not run again."""
    if not job.sharded:
        return False
    for earlier in sorted((results_dir / runs.RUNS).glob(f"*-{job.target.replace('/', '-')}-*"), reverse=True):
        if earlier.name.startswith(".") or not (earlier / runs.RUN_RECORD).is_file():
            continue
        if json.loads((earlier / runs.RUN_RECORD).read_text()).get("target") != job.target:
            continue
        if not finished(job.results_file(earlier)):
            return False
        shutil.copytree(job.folder(earlier), job.folder(folder))
        return True
    return False


# -- a farm run against a plain one -----------------------------------------------------------------------

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def comparable(doc: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A results document without what two runs of the same tests on one machine differ in: when they
    ran (started, finished, each test's duration), the results folder named in messages, the numbers in
    messages (a failing measurement, such as LIFE-76's resident MiB in an expected failure, says another number
    each run, as a duration does), and whether a test that passed needed its re-run (flaky: a pass whose first
    attempt failed, which is chance, not where it ran; ``flaky_in_one_run`` names them); tests by id."""
    def local(message: str) -> str:
        return _NUMBER.sub("#", message.replace(str(folder), "{results}"))

    def settled(test: dict[str, Any]) -> dict[str, Any]:
        if test["outcome"] in (results.Outcome.PASS, results.Outcome.FLAKY):  # a flaky one's message: its first try's
            plain = {k: v for k, v in test.items() if k not in ("tries", "passes")}  # a re-run test's counts
            return dict(plain, duration=0.0, outcome=results.Outcome.PASS.value, message="")
        return dict(test, duration=0.0, message=local(test["message"]))

    tests = {t["id"]: settled(t) for t in doc["tests"]}
    summary = dict(doc["summary"])
    summary["pass"] = summary.get("pass", 0) + summary.get("flaky", 0)
    summary["flaky"] = 0
    return dict(doc, started="", finished="", run=dict(doc["run"], message=local(doc["run"]["message"])),
                tests=tests, summary=summary)


def flaky_in_one_run(plain: Path, farmed: Path) -> list[str]:
    """The tests flaky in one of the two runs and a plain pass in the other (what ``comparable`` settles)."""
    out = []
    for path in sorted(Path(plain).glob("*.json")):
        other = Path(farmed) / path.name
        if path.name.endswith(results.CERTIFICATE_SUFFIX) or not other.is_file():
            continue
        mine, theirs = ({t["id"]: t["outcome"] for t in results.load(p)["tests"]} for p in (path, other))
        for tid in sorted(set(mine) & set(theirs)):
            if {mine[tid], theirs[tid]} == {results.Outcome.FLAKY.value, results.Outcome.PASS.value}:
                run = "plain" if mine[tid] == results.Outcome.FLAKY else "farm"
                out.append(f"{path.name}: {tid} flaky in the {run} run only")
    return out


def _differences(a: Any, b: Any, where: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for key in sorted(set(a) | set(b), key=str)
                for d in (_differences(a[key], b[key], f"{where}.{key}") if key in a and key in b
                          else [f"{where}.{key}: only in the {'plain' if key in a else 'farm'} run"])]
    return [] if a == b else [f"{where}: {a!r} in the plain run, {b!r} in the farm run"]


def differences(plain: Path, farmed: Path) -> list[str]:
    """What differs between the results folders of a plain run (``plain``) and a farm run (``farmed``) of
    the same targets: which files there are, then each results file (every test's outcome, clauses and
    message, the run's status, summary, suite and environment) as ``comparable``; and each of the farm's
    certificates must verify. Empty when they are the same."""
    plain, farmed = Path(plain).resolve(), Path(farmed).resolve()
    names = {folder: {p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")}
             for folder in (plain, farmed)}
    out = [f"{name}: only in the {'plain' if name in names[plain] else 'farm'} run"
           for name in sorted(names[plain] ^ names[farmed])]
    for name in sorted(names[plain] & names[farmed]):
        if name.endswith(results.CERTIFICATE_SUFFIX):
            code, why = certify.verify(farmed / name)
            out += [] if code == certify.VERIFY_VALID else [f"{name} of the farm run: {why}"]
        elif name.endswith(".json"):
            out += _differences(comparable(results.load(plain / name), plain),
                                comparable(results.load(farmed / name), farmed), name)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m ironaccel.cts.farm compare PLAIN FARM``: exit 1 naming the first differences."""
    parser = argparse.ArgumentParser(prog="python -m ironaccel.cts.farm")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare", help="do a farm run's results files say what a plain run's say, times apart?")
    c.add_argument("plain", type=Path, help="the results folder of `ironaccel certify`")
    c.add_argument("farm", type=Path, help="the results folder of `ironaccel certify --ray`")
    c.add_argument("--show", type=int, default=20, metavar="N", help="differences to print (default 20)")
    args = parser.parse_args(argv)
    for folder in (args.plain, args.farm):
        if not folder.is_dir():
            print(f"python -m ironaccel.cts.farm compare: {folder}: no such results folder", file=sys.stderr)
            return 2
    found = differences(args.plain, args.farm)
    if found:
        print(f"the farm run's results files differ from the plain run's in {len(found)} place(s):", file=sys.stderr)
        print("\n".join(found[:args.show]), file=sys.stderr)
        return 1
    for line in flaky_in_one_run(args.plain, args.farm):
        print(f"note: {line} (its re-run passed; compared as a pass)")
    docs = [results.load(p) for p in args.plain.glob("*.json") if not p.name.endswith(results.CERTIFICATE_SUFFIX)]
    print(f"the farm run's results files are the plain run's, times apart: {len(docs)} targets, "
          f"{sum(len(d['tests']) for d in docs)} tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
