"""Runs the conformance suite on targets, each in its own process (or Docker container: ``containers``), and
writes, per target, beside each other in its run folder (``runs``: promoted over the results folder's files
when complete; for webgpu/lavapipe)::

    webgpu-lavapipe.json        the results file (``ironaccel.cts.results``), the only input of STATUS.md
    webgpu-lavapipe.junit.xml   the same run as JUnit XML, for CI systems (made from the results file, so a
                                run that crashed or timed out has one too, its unfinished tests as errors)
    webgpu-lavapipe.cert.json   the certificate: what the target proves (``judge.target_level``), every
                                required clause, environment, hashes
    webgpu-lavapipe.cert.md     the certificate for people

Each test has a time limit (pytest-timeout, signal method: the hung test fails and the run goes on) and a
failing test is re-run up to ``retries`` more times (default ``RETRIES``; pytest-rerunfailures, which stops at
the first pass; the plugin records a pass on re-run as ``flaky``, and a re-run test's ``passes``/``tries``).
A target process that crashes or hangs is never lost: the plugin rewrites its results file after every test
(status "crashed" until the run ends), and past the target's time limit the process is killed and the file
marked "timeout". A target that wrote no file at all gets one here saying so.

The signal reaches only Python code: a test blocked in a native wait (an endless kernel behind a
``synchronize()`` without timeout) would hold the run until the target's limit. So certify watches each
test phase too (the plugin's ``--watch-file``): a phase still running ``WATCHDOG_GRACE_S`` past its limit
has its process killed, and a process that dies in a test (a signal, ``os._exit``) is named by it, with the
fatal error report it printed (faulthandler's stacks). The run goes on in a new process with the tests not yet
run (``run_target``), into the same results file. A test that died is among them while it has re-runs left:
it is a failing test like any other (``retries``), so a pass in the new process makes it ``flaky``, its message
keeping how the attempt that died ended. A test that died in its last try, or hung (a re-run would cost its
whole limit again), is recorded as a failure saying so.

The JUnit file and the certificate are ``certificates``', their check (``verify``) is ``verifier``'s;
their names are importable from here too. Shards of one run are joined by ``merge``;
``ironaccel.cts.submission`` bundles a results folder into a package that is verified whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from . import expectations, judge, results, runs, spec, tables, targets
from .certificates import (certificate, junit_xml, sha256_file, write_certificate,  # noqa: F401
                           write_junit_and_certificate)
from .results import Outcome, RunStatus
from .selection import Selection
from .verifier import VERIFY_STALE, VERIFY_TAMPERED, VERIFY_UNTRUSTED, VERIFY_VALID, verify  # noqa: F401

TARGET_TIMEOUT_S = 1800
TEST_TIMEOUT_S = results.DEFAULT_TEST_TIMEOUT_S  # the slowest conformance test takes seconds on a CPU driver
RETRIES = 1  # how many more times a failing test runs (``--retries``)
WATCHDOG_GRACE_S = 5.0  # how long past its limit a test phase may run before its process is killed
WATCHDOG_POLL_S = 0.5
CRASH_REPORT_LINES = 60  # of a dead test process's fatal error report kept in its test's message
INTERRUPTED = "interrupted (Ctrl-C or SIGTERM) before the run ended"


@dataclass
class TargetRun:
    target: str
    results_file: Path
    status: str  # a RunStatus value
    summary: dict[str, int] | None = None
    seconds: float = 0.0
    message: str = ""
    node: str = ""  # where it ran, for a farm run (``ironaccel.cts.farm``); "" on this machine
    kept: str = ""  # why its run folder was not promoted over the committed files ("" when it was)
    interrupted: bool = False  # stopped by Ctrl-C or SIGTERM (``STOP``)

    @property
    def ok(self) -> bool:
        """The run finished and every test ran without a failure or an unexpected pass."""
        return results.without_failures(self.status, self.summary)


#: Set on Ctrl-C or SIGTERM: every target's test process is killed and its run recorded as interrupted.
STOP = threading.Event()


def runnable_targets() -> list[str]:
    """Every target this machine can run (``ironaccel doctor`` explains the others)."""
    return [name for name, t in targets.TARGETS.items() if t.missing() is None]


def simulated_targets() -> list[str]:
    """Every simulated target: what ``--docker --all`` runs, since the GPU-less image can run them all."""
    return [name for name, t in targets.TARGETS.items() if t.simulated]


def pytest_args(name: str, results_file: Path, test_timeout_s: float, suite: Path,
                selection: Selection = Selection(), watch_file: Path | None = None, retries: int = RETRIES) -> list[str]:
    """The pytest command line (after ``python -m pytest``) of one target's run.

    The test timer covers the test function only (``timeout_func_only``): armed per call, so a re-run gets
    its own; a whole-protocol timer spans both attempts and is spent by the first. A hang in a fixture, or
    one the signal cannot interrupt, is the watchdog's (``watch_file``: the plugin's ``--watch-file``)."""
    return [str(suite), "-p", "ironaccel.cts.pytest_plugin", "-p", "no:cacheprovider", "-p", "no:benchmark",
            "--rootdir", str(suite), "-q",
            "--target", name, "--results-json", str(results_file), "--timeout", f"{test_timeout_s:g}", "--timeout-method", "signal", "-o", "timeout_func_only=true",
            "--reruns", str(retries), *selection.pytest_args(), *(["--watch-file", str(watch_file)] if watch_file else [])]


def _finish(name: str, out: Path, log: Path, started: str, seconds: float, timed_out: bool, exit_code: int | None,
            timeout_s: float, stopped: tuple[str, ...] = (), interrupted: bool = False,
            test_timeout_s: float = TEST_TIMEOUT_S, selection: Selection = Selection()) -> TargetRun:
    """Record how the target's process ended in its results file, write its certificate, return the run.
    ``stopped``: the tests the watchdog stopped or a process died in (``run_target``), for the run's message.
    A process that died before writing one gets a crash record with its ``selection``, so that a crashed shard
    still merges with its siblings (its tests not-run) and its message says why."""
    if out.exists():
        doc = results.read_json(out)
        if timed_out:
            doc["run"] = {"status": RunStatus.TIMEOUT.value, "message": f"killed after {timeout_s:g} s"}
        elif interrupted:
            doc["run"] = {"status": RunStatus.ERROR.value, "message": INTERRUPTED}
        elif doc["run"]["status"] == RunStatus.CRASHED:
            doc["run"]["message"] = f"the test process exited with code {exit_code} before finishing"
        elif exit_code not in (0, 1):  # 0: all passed, 1: some failed; else pytest itself gave up
            doc["run"] = {"status": RunStatus.ERROR.value, "message": f"the test process exited with code {exit_code} "
                          "(pytest: 2 interrupted, 3 internal error, 4 usage error, 5 no tests collected)"}
        if stopped:
            doc["run"]["message"] = "; ".join([*stopped, doc["run"]["message"]]).strip("; ")
        results.dump(doc, out)
    else:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
        results.dump(results.document(targets.get(name), spec.current([name]).parts(name), started,
                                      RunStatus.TIMEOUT if timed_out else RunStatus.CRASHED,
                                      f"exit code {exit_code}: " + " / ".join(tail), test_timeout=test_timeout_s,
                                      selection=None if selection.everything else selection.record()), out)
    doc = write_junit_and_certificate(out)
    run = TargetRun(name, out, doc["run"]["status"], doc["summary"], seconds, doc["run"]["message"],
                    interrupted=interrupted)
    if run.ok:
        log.unlink(missing_ok=True)
    else:
        run.message = (run.message + f" (log: {log})").strip()
    return run


def child_environment(name: str) -> dict[str, str]:
    """The environment of a target's test process: this one's, the target's driver selection, and
    Hypothesis' ``ci`` profile unless HYPOTHESIS_PROFILE says otherwise."""
    return {"HYPOTHESIS_PROFILE": "ci", **os.environ, **targets.get(name).environment()}


def run_target(name: str, results_dir: Path, timeout_s: float = TARGET_TIMEOUT_S,
               test_timeout_s: float = TEST_TIMEOUT_S, suite: Path | None = None,
               selection: Selection = Selection(), retries: int = RETRIES) -> TargetRun:
    """Run the suite (default: the installed conformance suite) on ``name`` in a child process, with
    Hypothesis' ``ci`` profile (derandomized, no example database) unless HYPOTHESIS_PROFILE says otherwise;
    a failing test re-run up to ``retries`` more times."""
    suite = (suite or spec.conformance_dir()).resolve()
    results_dir = results_dir.resolve()
    out = results_dir / results.file_name(name)
    log = out.with_name("." + out.stem + ".log")
    watch = out.with_name("." + out.stem + ".watch.json")
    part = out.with_name("." + out.stem + ".part.json")  # the results of a process that goes on with the run
    env = child_environment(name)
    started, t0 = results.now(), time.monotonic()
    deadline = t0 + timeout_s
    out.unlink(missing_ok=True)
    part.unlink(missing_ok=True)
    stopped: list[str] = []  # per test the watchdog stopped, or a process died in: what happened
    deaths: dict[str, list[str]] = {}  # test id -> how each of its attempts that stopped its process ended
    # cwd: a scratch folder away from any checkout (`ironaccel` must import from where it is installed, or
    # PYTHONPATH) that takes what tools leave in cwd (Hypothesis' .hypothesis/) away from the results folder
    with open(log, "w", encoding="utf-8") as log_file, tempfile.TemporaryDirectory(prefix="ironaccel-") as cwd:
        into, sel = out, selection
        while True:
            cmd = [sys.executable, "-m", "pytest", *pytest_args(name, into, test_timeout_s, suite, sel, watch, retries)]
            log_file.flush()
            log_start = log_file.tell()
            exit_code, timed_out, ended = _run_watched(cmd, env, cwd, log_file, watch, deadline)
            if into == part and part.exists():
                _go_on_with(out, results.load(part), deaths)
                part.unlink()
            if ended is None or not out.exists() or STOP.is_set():
                break
            left, note = _record_stopped_test(out, ended, exit_code, stopped, deaths, retries,
                                              _crash_report(log, log_start))
            if not left:  # the stopped test was the last: every test has its outcome, one a failure
                exit_code = 1
                break
            log_file.write(f"\n[ironaccel certify] {note}; going on with {len(left)} test(s) in a new process\n")
            log_file.flush()
            into, sel = part, Selection(only=tuple(left))
    return _finish(name, out, log, started, time.monotonic() - t0, timed_out, exit_code, timeout_s, tuple(stopped),
                   interrupted=STOP.is_set() and exit_code not in (0, 1), test_timeout_s=test_timeout_s,
                   selection=selection)


def _run_watched(cmd: list[str], env: dict[str, str], cwd: str, log_file: Any, watch: Path,
                 deadline: float) -> tuple[int, bool, dict[str, Any] | None]:
    """Run one pytest process of a target's run and watch its test phases (``Watch`` of the plugin): (its
    exit code, whether it was killed at the target's ``deadline``, the phase it was stopped in or died in,
    with ``"hung"`` true when the watchdog killed it; None when it ended between tests or normally)."""
    watch.unlink(missing_ok=True)
    # a session of its own: Ctrl-C reaches certify alone, which stops the process and all it started (``_kill``)
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    ended: dict[str, Any] | None = None
    while True:
        try:
            proc.wait(timeout=max(0.0, min(WATCHDOG_POLL_S, deadline - time.monotonic())))
            break
        except subprocess.TimeoutExpired:
            pass
        if STOP.is_set():
            _kill(proc)
            return proc.returncode, False, None
        if time.monotonic() >= deadline:
            _kill(proc)
            return proc.returncode, True, None
        phase = _read_watch(watch)
        if phase and phase["limit"] and time.time() > phase["since"] + phase["limit"] + WATCHDOG_GRACE_S:
            _kill(proc)
            ended = dict(phase, hung=True)
            break
    if ended is None:
        phase = _read_watch(watch)  # still naming a test: the process died in it (a clean end removes the file)
        ended = dict(phase, hung=False) if phase else None
    watch.unlink(missing_ok=True)
    return proc.returncode, False, ended


def _kill(proc: subprocess.Popen) -> None:
    """Kill a test process and every process it started (its session), and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _read_watch(watch: Path) -> dict[str, Any] | None:
    """The test phase a watch file names (None: no file, no test running, or a write not finished)."""
    try:
        phase = json.loads(watch.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return phase if isinstance(phase, dict) and phase.get("test") else None


def _crash_report(log: Path, start: int) -> str:
    """What a test process that died printed from its fatal error on (faulthandler's report: the signal and
    every thread's Python stack), read from its part of the target's log starting at byte ``start``; "" if none."""
    with open(log, "rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    at = text.find("Fatal Python error")
    return "" if at < 0 else "\n".join(text[at:].splitlines()[:CRASH_REPORT_LINES])


def _record_stopped_test(out: Path, ended: dict[str, Any], exit_code: int, stopped: list[str],
                         deaths: dict[str, list[str]], retries: int, crash: str = "") -> tuple[list[str], str]:
    """Note the test a process was stopped (or died) in, with the process's ``crash`` report, in ``deaths``;
    in the results file ``out``, leave it to run again in the next process while it has ``retries`` left, else
    record it as a failure saying so and note it in ``stopped`` (the run's message); return the ids of the
    tests still to run and what happened."""
    doc = results.load(out)
    tests = {t["id"]: t for t in doc["tests"]}
    tid, when = ended["test"], ended["when"]
    elapsed = time.time() - ended["since"]
    if ended["hung"]:
        message = (f"timeout: [{when}] still running {elapsed:.0f} s after it started, past its {ended['limit']:g} s "
                   "limit, where pytest-timeout's signal could not stop it (e.g. a native wait); the watchdog "
                   "killed the test process")
        note = f"{tid} hung past its {ended['limit']:g} s limit"
    else:
        how = f"signal {-exit_code}" if exit_code < 0 else f"exit code {exit_code}"
        message = f"[{when}] the test process died during this test ({how})" + (f"\n{crash}" if crash else "")
        note = f"the test process died in {tid} ({how})"
    attempts = deaths.setdefault(tid, [])
    attempts.append(message)
    rerun = not ended["hung"] and len(attempts) <= retries  # a hang's re-run would cost its whole limit again
    if rerun:
        note += "; re-run in a new process"
    else:
        stopped.append(note)
    if tid in tests:
        entry = tests[tid]
        entry["duration"] = round(entry["duration"] + elapsed, 4)
        if rerun:
            entry.update(outcome=Outcome.NOT_RUN.value, message="")
        else:
            entry.update(outcome=Outcome.FAIL.value, message=_first_attempts(message, attempts[:-1]))
            if len(attempts) > 1:
                entry.update(tries=len(attempts), passes=0)
    left = sorted(t["id"] for t in doc["tests"] if t["outcome"] == Outcome.NOT_RUN)
    if not left:
        doc["run"] = {"status": RunStatus.OK.value, "message": ""}
    doc["summary"] = results.summarize(doc["tests"])
    results.dump(doc, out)
    return left, note


def _first_attempts(message: str, earlier: list[str]) -> str:
    """A re-run test's message: how its last attempt ended, then how each ``earlier`` one stopped its process."""
    return "\n".join([message, *(f"attempt {i} stopped its process: {m}" for i, m in enumerate(earlier, 1))])


def _go_on_with(out: Path, part: dict[str, Any], deaths: dict[str, list[str]]) -> None:
    """Fold the results of a process that went on with a run into the run's results file: its tests' entries,
    how it ended, and the device when the first process never reached one. A test re-run after it stopped a
    process (``deaths``) that passes now is ``flaky``, one that fails fails again; either way its tries count
    the stopped attempts, and its message says how they ended."""
    doc = results.load(out)
    tests = {t["id"]: t for t in doc["tests"]}
    tests.update({t["id"]: t for t in part["tests"]})
    for entry in part["tests"]:
        earlier = deaths.get(entry["id"])
        if not earlier or entry["outcome"] == Outcome.NOT_RUN:  # not re-run here, or it stopped this process too
            continue
        tries = len(earlier) + entry.get("tries", 1)
        if entry["outcome"] == Outcome.PASS:
            entry.update(outcome=Outcome.FLAKY.value, passes=1,
                         message=_first_attempts(f"passed only when re-run in a new process (at try {tries})", earlier))
        else:
            entry.update(passes=entry.get("passes", 0), message=_first_attempts(entry["message"], earlier))
        entry["tries"] = tries
    doc.update(tests=sorted(tests.values(), key=lambda t: t["id"]), finished=part["finished"], run=part["run"])
    doc["summary"] = results.summarize(doc["tests"])
    if not doc["target"]["device"]:
        doc["target"].update({k: part["target"][k] for k in results.DEVICE_FIELDS if k in part["target"]})
    results.dump(doc, out)


# -- many targets, progress, summary ----------------------------------------------------------------------

class Progress:
    """One line saying how far each running target has got, read from its results file (the plugin rewrites
    it after every test): redrawn in place on a terminal, printed every ``log_every_s`` elsewhere (CI logs)."""

    def __init__(self, total: int, stream=None, log_every_s: float = 15.0, unit: str = "targets"):
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.total, self.finished, self.log_every_s, self.unit = total, 0, log_every_s, unit
        self.running: dict[str, Path] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.t0 = time.monotonic()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> "Progress":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self._print("")

    def echo(self, text: str) -> None:
        self._print(text + "\n")

    def started(self, name: str, results_file: Path, node: str = "") -> None:
        with self.lock:
            self.running[name] = results_file
        self.echo(f"  start  {name}" + (f" on {node}" if node else ""))

    def done(self, run: TargetRun, name: str = "") -> None:
        """``name``: what ``started`` was given, when it is not the run's target (a farm's shard)."""
        name = name or run.target
        with self.lock:
            self.running.pop(name, None)
            self.finished += 1
        self.echo(f"  done   {name}" + (f" on {run.node}" if run.node else "")
                  + f": {run.status}, {_counts(run)} in {run.seconds:.1f} s")

    def line(self) -> str:
        with self.lock:
            running = dict(self.running)
        parts = [f"[{time.monotonic() - self.t0:4.0f} s] {self.finished}/{self.total} {self.unit} done"]
        for name, path in sorted(running.items()):
            try:
                tests = results.read_json(path)["tests"]
                parts.append(f"{name} {sum(t['outcome'] != 'not-run' for t in tests)}/{len(tests)}")
            except (OSError, ValueError, KeyError):  # not written yet: still starting
                parts.append(f"{name} starting")
        return " · ".join(parts)

    def _print(self, text: str) -> None:
        with self.lock:
            if self.tty:
                self.stream.write("\r\033[K")
            self.stream.write(text)
            self.stream.flush()

    def _loop(self) -> None:
        interval = 1.0 if self.tty else self.log_every_s
        while not self.stop.wait(interval):
            self._print(self.line() + ("" if self.tty else "\n"))


def plan(names: list[str], jobs: int, selection: Selection) -> list[tuple[str, Selection]]:
    """The processes of a run, in the order they start: one per target, except that when the targets do not
    divide evenly among ``jobs`` processes, each of the last ``len(names) % jobs`` runs as ``jobs`` interleaved
    shards, so the last round keeps every core busy (7 targets on 2 cores: 3 rounds of two targets, then two
    halves, not a 4th round of one target beside an idle core). A run that is itself a shard is not split."""
    rest = 0 if selection.shard or len(names) <= jobs else len(names) % jobs
    whole = names[:len(names) - rest]
    return [(n, selection) for n in whole] + [(n, dataclasses.replace(selection, shard=f"{k}/{jobs}"))
                                              for n in names[len(whole):] for k in range(1, jobs + 1)]


def merge_shard_runs(target: str, runs: list[TargetRun], results_dir: Path) -> TargetRun:
    """The target's run from its shards' runs (shard 1/N first), their results files merged into ``results_dir``
    (with JUnit and certificate); seconds are the shards' total. A shard that never opened its device (it crashed first, or
    its farm node died) takes its siblings' device, so its tests merge as not-run."""
    out = results_dir / results.file_name(target)
    node = ", ".join(sorted({r.node for r in runs if r.node}))
    seconds = sum(r.seconds for r in runs)
    if any(r.summary is None for r in runs):  # a shard without a results file (a target unknown here)
        return TargetRun(target, out, RunStatus.CRASHED.value, None, seconds,
                         "; ".join(f"{target} {k}/{len(runs)}: {r.message}" for k, r in enumerate(runs, 1)
                                   if r.summary is None), node)
    docs = [results.load(r.results_file) for r in runs]
    device = next((d["target"] for d in docs if d["target"]["device"]), None)
    for doc in docs:
        if device and not doc["target"]["device"]:
            doc["target"].update({k: device[k] for k in results.DEVICE_FIELDS if k in device})
    try:
        merged = results.merge(docs, [str(r.results_file) for r in runs])
    except ValueError as exc:  # e.g. the suite changed between the shards' starts: no results file is right
        return TargetRun(target, out, RunStatus.ERROR.value, None, seconds, f"the shards do not merge: {exc}", node)
    results.dump(merged, out)
    doc = write_junit_and_certificate(out)
    return TargetRun(target, out, doc["run"]["status"], doc["summary"], seconds, doc["run"]["message"], node)


SHARDS_FOLDER = ".shards"  # certify's own shards (``plan``), inside the target's run folder, merged there


def certify(names: list[str], results_dir: Path, jobs: int | None = None, timeout_s: float = TARGET_TIMEOUT_S,
            test_timeout_s: float = TEST_TIMEOUT_S, runner: Callable[..., TargetRun] = run_target,
            stream=None, selection: Selection = Selection(), forced: dict[str, str] | None = None,
            wait: bool = False, signer: Any = None) -> list[TargetRun]:
    """Run ``names`` with ``runner`` in parallel (bounded by cores; ``plan`` splits the last round into
    shards), showing progress; return every target's run, in ``names``' order.

    Each target runs into a run folder of its own, promoted over ``results_dir``'s files only when complete
    (``ironaccel.cts.runs``), under the folder's lock (``runs.Busy`` when another run holds it, unless
    ``wait``). ``forced``: target -> what ``doctor`` says it lacks, for targets run with ``--force``; recorded
    in their results files. ``signer``: an ed25519 private key (``signing.load_private_key``) that signs each
    run's certificate and results file before promotion (None: unsigned). Ctrl-C (or SIGTERM, as KeyboardInterrupt) stops every test process, records
    every run as it stands, promotes only the complete ones, and raises ``runs.Interrupted``.

    Hardware targets run one at a time (simulated ones beside them): they share the machine's GPU, and a
    clause such as MEM-7 exhausts its memory, which would fail another target's allocations mid-run."""
    forced = forced or {}
    with runs.lock(results_dir, wait):
        STOP.clear()
        folders = {name: runs.new_run_folder(results_dir, name) for name in names}
        done, interrupted = _run_all(names, folders, jobs, timeout_s, test_timeout_s, runner, stream, selection)
        with _ignoring_interrupts():  # recording and promoting take moments: a Ctrl-C now must not cut them short
            out = [settle(run, folders[run.target], results_dir, selection, forced.get(run.target), signer)
                   for run in done]
    if interrupted:
        finished = [r.target for r in out if not r.interrupted]
        stopped = [r.target for r in out if r.interrupted]
        raise runs.Interrupted(f"interrupted: {len(finished)} target(s) finished ({', '.join(finished) or '-'}), "
                               f"{len(stopped)} interrupted ({', '.join(stopped)}); nothing incomplete was promoted; "
                               f"the records are in {Path(results_dir) / runs.RUNS}")
    return out


def _run_all(names: list[str], folders: dict[str, Path], jobs: int | None, timeout_s: float, test_timeout_s: float,
             runner: Callable[..., TargetRun], stream, selection: Selection) -> tuple[list[TargetRun], bool]:
    """Every target's run into its folder (shards merged), in ``names``' order; and whether it was interrupted."""
    known = targets.registered_drivers()
    hardware = {n for n in names if n in known and not known[n].simulated}
    one_gpu_at_a_time = threading.Lock()
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(names)))
    processes = plan(names, jobs, selection)
    interrupted = False
    with Progress(len(processes), stream, unit="processes") as progress:
        split = sorted({n for n, sel in processes if sel.shard != selection.shard}, key=names.index)
        progress.echo(f"certifying {len(names)} target(s) with {jobs} process(es): {', '.join(names)}"
                      + (f" ({', '.join(split)} as {jobs} shards)" if split else ""))

        def one(process: tuple[str, Selection]) -> TargetRun:
            name, sel = process
            folder = folders[name]
            if sel.shard != selection.shard:
                k, n = sel.shard.split("/")
                folder = folder / SHARDS_FOLDER / f"{k}of{n}"
                folder.mkdir(parents=True, exist_ok=True)
            label = name + (f" {sel.shard}" if folder != folders[name] else "")
            with one_gpu_at_a_time if name in hardware else contextlib.nullcontext():
                if STOP.is_set():
                    return TargetRun(name, folder / results.file_name(name), RunStatus.ERROR.value, None,
                                     message="not started: " + INTERRUPTED, interrupted=True)
                progress.started(label, folder.resolve() / results.file_name(name))
                run = runner(name, folder, timeout_s, test_timeout_s, selection=sel)
            progress.done(run, label)
            return run

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(one, p) for p in processes]
            try:
                ran = [f.result() for f in futures]
            except KeyboardInterrupt:
                STOP.set()
                interrupted = True
                progress.echo("  stopping: killing the test processes (Ctrl-C again is ignored until they are)")
                with _ignoring_interrupts():
                    ran = [f.result() for f in futures]
    out = []
    for name in names:
        mine = [(sel, r) for (n, sel), r in zip(processes, ran) if n == name]
        if len(mine) == 1:
            out.append(mine[0][1])
            continue
        run = merge_shard_runs(name, [r for _, r in mine], folders[name])
        run.interrupted = any(r.interrupted for _, r in mine)
        if run.ok:  # the shards' files are in the merged one; a failed shard's log stays, named in the message
            shutil.rmtree(folders[name] / SHARDS_FOLDER)
        else:
            run.message = "; ".join([run.message] + [f"shard {sel.shard}: {r.message}" for sel, r in mine if not r.ok])
        out.append(run)
    return out, interrupted


@contextlib.contextmanager
def _ignoring_interrupts():
    """SIGINT and SIGTERM ignored for the ``with`` block (in the main thread; elsewhere they cannot arrive)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def settle(run: TargetRun, folder: Path, results_dir: Path, selection: Selection, forced: str | None,
            signer: Any = None) -> TargetRun:
    """Record a target's run: its forced flag into the results file, its signature (``signer``), RUN.json, the
    folder's final name; then
    promote it over ``results_dir``'s files if ``runs.promotable``, or say in ``run.kept`` why not. A run whose
    selection matched nothing is removed (``run.status`` "empty"); one that crashed or timed out before
    collecting a test is kept, with its log."""
    doc = results.load(run.results_file) if run.results_file.is_file() else None
    if (doc is not None and not doc["tests"] and not selection.everything and not run.interrupted
            and doc["run"]["status"] not in (RunStatus.CRASHED, RunStatus.TIMEOUT)):
        shutil.rmtree(folder)
        with contextlib.suppress(OSError):
            folder.parent.rmdir()  # runs/, when this was its only run
        run.status, run.kept = "empty", f"the selection {' '.join(selection.pytest_args())} matches no test"
        return run
    if doc is not None and forced:
        doc["forced"] = {"missing": forced, "by": runs.command_line()}
        results.dump(doc, run.results_file)
        write_junit_and_certificate(run.results_file)
    if doc is not None and signer is not None:
        from . import signing

        signing.sign(results.sibling(run.results_file, results.CERTIFICATE_SUFFIX), signer)
    committed = Path(results_dir) / results.file_name(run.target)
    why = (runs.promotable(doc, committed, bool(forced)) if doc is not None
           else f"no results file ({run.message or run.status})")
    if run.interrupted:
        why = INTERRUPTED
    run.message = run.message.replace(str(folder), str(runs.final_name(folder)))
    final = runs.finish(folder, {"target": run.target, "command": runs.command_line(), "pid": os.getpid(),
                                 "status": run.status, "message": run.message, "forced": forced or "",
                                 "promoted": not why, "not_promoted_because": why})
    run.results_file = final / results.file_name(run.target)
    if why:
        run.kept = why
    else:
        runs.promote(run.results_file, results_dir)
    return run


def _counts(run: TargetRun) -> str:
    s = run.summary or {}
    return ", ".join(f"{v} {k}" for k, v in s.items() if v) or "no tests"


def summary_table(runs: list[TargetRun]) -> str:
    """One row per run, with how many required clauses its expectations say fail there ("required xfail");
    a "node" column when the runs say where they ran (a farm's). Under it: why a run failed, and each re-run
    test's passes/tries (its flake rate in this run)."""
    required = [c.id for c in spec.load_clauses().values() if c.required]
    docs = {r.target: results.load(r.results_file) for r in runs if r.summary is not None and r.results_file.is_file()}
    nodes = any(r.node for r in runs)
    rows = [["target", "run", "result", "outcomes", "required xfail", "seconds"] + (["node"] if nodes else [])]
    for r in runs:
        xfail = expectations.expected_to_fail_required(docs[r.target], required) if r.target in docs else None
        rows.append([r.target, r.status, "OK" if r.ok else "FAILED", _counts(r),
                     "-" if xfail is None else f"{len(xfail)}/{len(required)}" + (f" ({', '.join(xfail)})" if xfail else ""),
                     f"{r.seconds:.1f}"] + ([r.node] if nodes else []))
    lines = [tables.plain(rows)]
    for r in runs:
        if not r.ok and r.message:
            lines.append(f"{r.target}: {r.message}")
    for target, doc in docs.items():
        for t in doc["tests"]:
            if "\nFatal Python error" in (t.get("message") or ""):  # a crash, in its last try or an earlier one
                lines.append(f"{target}: {t['id']}: " + t["message"].replace("\n", "\n    "))
            if "tries" in t:
                lines.append(f"{target}: {t['id']} {t['outcome']}, passed {t['passes']} of {t['tries']} tries")
    return "\n".join(lines)


def compare_with_baseline(runs: list[TargetRun], baseline_dir: Path) -> list[judge.Comparison | None]:
    """Each run against its target's results file in ``baseline_dir`` (None where there is none)."""
    out: list[judge.Comparison | None] = []
    for r in runs:
        earlier = Path(baseline_dir) / results.file_name(r.target)
        out.append(judge.compare(results.load(earlier), results.load(r.results_file)) if earlier.exists() else None)
    return out


def merge(paths: list[Path], output: Path) -> dict[str, Any]:
    """Merge shard results files of one target into ``output`` (``results.merge``), with its JUnit and
    certificate beside it; return the merged document."""
    doc = results.merge([results.load(p) for p in paths], [str(p) for p in paths])
    results.dump(doc, output)
    return write_junit_and_certificate(output)
