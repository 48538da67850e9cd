"""The conformance plugin (entry point ``pytest11``): targets, clause marks, expectations, results files.

Inert unless a target is given (``--target backend/driver`` or ``IRONACCEL_TARGET``): without one it only
declares the ``clause`` mark and the conformance fixtures (which then fail, saying a target is needed),
and touches no settings (Hypothesis profiles only with the ini option ``ironaccel_hypothesis_profiles``).
With a target it:

* puts the target's driver selection into the environment before any backend loads;
* opens the first device of the backend that ``Target.matches`` — and fails every test, loudly, when no
  device is the driver the target names (a silent fallback to another adapter never passes);
* requires a ``@pytest.mark.clause("MEM-1", ...)`` on every conformance test, each id defined in SPEC.md;
* runs the tests ``--only`` / ``--skip`` / ``--shard`` select (``ironaccel.cts.selection``), recording the
  selection in the results file; the others are deselected, not recorded;
* with ``--baseline DIR``, compares the run with the target's results file there (``judge.compare``):
  new failures, fixes, newly flaky tests; exit code ``judge.EXIT_REGRESSION`` on a regression;
* applies ``conformance/expectations/<backend>-<driver>.txt`` (``ironaccel.cts.expectations``: id, outcome,
  tags, bug, reason) where the entry's tags hold for the device; entries that match nothing, have no bug
  reference or have expired are reported as warnings;
* records not-supported only from ``Device.supports`` (the ``require`` fixture);
* keeps the digests a test passes to ``record_output`` in its entry (``outputs``), for STATUS.md's
  cross-target agreement table;
* fails a test that leaves driver diagnostics (``Device.diagnostics()``, e.g. Vulkan validation messages);
* writes the results file (``--results-json``; schema in ``ironaccel.cts.results``) after every test, so a run
  that crashes still leaves what it did, marked ``crashed``, with the rest ``not-run``;
* under pytest-rerunfailures (``--reruns N``: ``ironaccel certify --retries N``, 1 by default) records a test
  that failed and then passed when re-run as ``flaky``, never ``pass``; one that failed every time is ``fail``;
  a re-run test's entry records ``tries`` (attempts made; re-runs stop at the first pass) and ``passes``;
* with ``--watch-file PATH`` (certify passes one), writes there which test phase is running, since when and
  its time limit (``Watch``), so the runner can stop a test that hangs where pytest-timeout's signal cannot
  reach it (a native wait) or name the test a crash happened in, and go on with the rest.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
import warnings
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any, Callable

import pytest

from . import expectations, judge, results
from ..errors import IronAccelError
from .judge import EXIT_REGRESSION, Comparison
from .results import Outcome, RunStatus
from .selection import Selection

NOT_SUPPORTED_PREFIX = "not-supported: "
VALIDATION_LAYER_JSON = "/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ironaccel", "ironaccel conformance")
    group.addoption("--target", default=os.environ.get("IRONACCEL_TARGET"),
                    help="conformance target backend/driver, e.g. webgpu/lavapipe (env IRONACCEL_TARGET)")
    group.addoption("--results-json", default=None, help="write the results file for this target run here")
    group.addoption("--expectations", default=None,
                    help="expectations file (default: the target's own; the suite's are conformance/expectations/"
                         "<backend>-<driver>.txt)")
    group.addoption("--only", action="append", default=[], metavar="GLOB",
                    help="run only tests whose id or a cited clause matches (repeatable): KERNEL-*, test_copy.py::*")
    group.addoption("--skip", action="append", default=[], metavar="GLOB",
                    help="do not run tests whose id or a cited clause matches (repeatable)")
    group.addoption("--shard", default="", metavar="K/N",
                    help="run shard K of N of the selected tests (interleaved by test id); merge the shards' "
                    "results files with `ironaccel merge`")
    group.addoption("--baseline", default=None, metavar="DIR",
                    help="compare the run with DIR/<backend>-<driver>.json: report new failures, fixes and newly "
                    f"flaky tests; exit {EXIT_REGRESSION} on a regression")
    group.addoption("--watch-file", default=None, metavar="PATH",
                    help="keep the running test phase, its start and time limit in PATH (JSON; for a runner's "
                    "watchdog: `ironaccel certify` passes one)")
    parser.getgroup("ironaccel-fake", "ironaccel fake CUDA driver").addoption(
        "--cuda-fake", action="store_true", help="run the session with ironaccel's fake libcuda as the CUDA driver "
        "(pytest restarts itself in `ironaccel fake run`'s environment; refused if the fake would not load)")
    parser.addini(HYPOTHESIS_INI, type="bool", default=False,
                  help="load ironaccel's Hypothesis profiles (dev, ci: HYPOTHESIS_PROFILE picks) without a target")


HYPOTHESIS_INI = "ironaccel_hypothesis_profiles"


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """--cuda-fake: a process's library path is fixed when it starts, so pytest restarts itself (before any
    conftest can load a driver) as ``ironaccel fake run`` would start it; xdist workers inherit that."""
    if not early_config.known_args_namespace.cuda_fake:
        return
    from .. import fakes

    if fakes.in_fake_env():
        return
    main = getattr(sys.modules.get("__main__"), "__spec__", None)
    if getattr(main, "name", "") not in ("pytest", "pytest.__main__") and Path(sys.argv[0]).name not in ("pytest", "py.test"):
        raise pytest.UsageError("--cuda-fake restarts pytest, so it works from the pytest command only; "
                                "in-process, run the caller under `ironaccel fake run --`")
    capture = early_config.pluginmanager.getplugin("capturemanager")
    if capture is not None:  # it holds fds 1 and 2 by now: the restarted pytest must write to the real ones
        capture.stop_global_capturing()
    try:
        fakes.exec_with_fake([sys.executable, *sys.orig_argv[1:]])
    except IronAccelError as exc:
        raise pytest.UsageError(f"--cuda-fake: {exc}") from exc


def _load_hypothesis_profile() -> None:
    """Register profiles ``dev`` and ``ci`` (derandomized, no deadline, no example database) and load the
    one HYPOTHESIS_PROFILE names (default: ``ci`` under CI, else ``dev``).

    The one place they are registered: conformance runs (a target given) and sessions that ask for them
    with the ini option ``ironaccel_hypothesis_profiles = true`` (tests/, through pyproject) get them; any
    other session keeps Hypothesis' own settings."""
    from hypothesis import settings

    settings.register_profile("dev", max_examples=25, deadline=None)
    settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True, database=None,
                              print_blob=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


def test_id(item: pytest.Item) -> str:
    """A test's id independent of where pytest was started: ``test_mem.py::test_alloc[1]``."""
    return Path(item.nodeid.split("::", 1)[0]).name + "::" + item.nodeid.split("::", 1)[1]


class Conformance:
    """Per-session state of a conformance run on one target."""

    def __init__(self, config: pytest.Config, target_name: str):
        from . import targets
        from .spec import current, load_clauses

        self.target = targets.get(target_name)
        os.environ.update(self.target.environment())
        if self.target.backend == "vulkan" and os.path.exists(VALIDATION_LAYER_JSON):
            os.environ.setdefault("IRONACCEL_VK_VALIDATION", "1")
        self.clauses = load_clauses()
        self.parts = current([self.target.name]).parts(self.target.name)
        exp = config.getoption("--expectations")
        self.expectations_path = Path(exp) if exp else self.target.expectations_file
        try:
            self.expectations = expectations.load(self.expectations_path)
        except expectations.ExpectationsError as exc:
            raise pytest.UsageError(str(exc)) from None
        out = config.getoption("--results-json")
        self.results_path = Path(out) if out else None
        try:
            self.selection = Selection(tuple(config.getoption("--only")), tuple(config.getoption("--skip")),
                                       config.getoption("--shard"))
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        baseline = config.getoption("--baseline")
        self.baseline_path = Path(baseline) / results.file_name(self.target.name) if baseline else None
        if self.baseline_path is not None and self.baseline_path.exists():
            try:
                results.load(self.baseline_path)
            except ValueError as exc:
                raise pytest.UsageError(f"--baseline: {exc}") from None
        self.comparison: Comparison | None = None
        limit = config.getoption("timeout", None)  # pytest-timeout's --timeout; 0 or none: no limit
        self.test_timeout = float(limit) if limit else None
        self.started = results.now()
        self.host = results.host_environment((*results.PACKAGES, *self.target.packages))
        self.device: Any = None
        self.evidence: dict[str, Any] | None = None  # results.driver_evidence, taken as the device opens
        self.device_error = ""
        self.tests: dict[str, dict[str, Any]] = {}
        self.nodeids: dict[str, str] = {}  # pytest node id -> test id
        self.flaky: set[str] = set()
        self.empty_shard = ""  # why this run has no test though its selection has some (``pytest_collection_modifyitems``)
        self.reruns: dict[str, str] = {}  # test id -> why its first attempt failed (pytest-rerunfailures)
        self.failed_tries: dict[str, int] = {}  # test id -> attempts that failed and were re-run

    # -- the device under test ----------------------------------------------------------------------
    def open_device(self) -> Any:
        if self.device is None and not self.device_error:
            from ..backends import get as get_backend
            from .targets import registered_drivers

            seen = []
            try:
                backend = get_backend(self.target.backend)
                for i in range(backend.device_count()):
                    dev = backend.open_device(i)
                    if self.target.matches(dev.info):
                        self.device = dev
                        self.evidence = results.driver_evidence(dev.info, [
                            t.library for t in registered_drivers().values() if t.backend == self.target.backend])
                        break
                    seen.append(f"{dev.info.name!r} (driver {dev.info.driver!r})")
                    dev.close()
                else:
                    self.device_error = (f"target {self.target.name}: no device is the {self.target.driver} driver; "
                                         f"the backend offered: {', '.join(seen) or 'no devices'}")
            except Exception as exc:
                self.device_error = f"target {self.target.name}: could not open a device: {type(exc).__name__}: {exc}"
        if self.device is None:
            pytest.fail(self.device_error, pytrace=False)
        return self.device

    def facts(self) -> dict[str, str]:
        """What expectations' tags are evaluated against: the device (opened for it only when a tag reads it;
        none when it cannot be opened: every test then fails saying why) and this machine's OS."""
        if self.device is None and not self.device_error and any(e.needs_device for e in self.expectations):
            with contextlib.suppress(pytest.fail.Exception):
                self.open_device()
        info = self.device.info if self.device is not None else None
        return expectations.facts(info.driver_version, info.name, info.vendor) if info else expectations.facts()

    # -- pytest hooks (this object is registered as a plugin) ----------------------------------------
    def pytest_report_header(self) -> list[str]:
        return [f"ironaccel target: {self.target.name}  suite hash: {self.parts['suite']}  "
                f"expectations: {self.expectations_path.name} ({len(self.expectations)} entries)"]

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        for item in items:
            mark = item.get_closest_marker("clause")
            if mark is None or not mark.args:
                raise pytest.UsageError(f"{item.nodeid}: every conformance test needs @pytest.mark.clause(<ids>)")
            unknown = [c for c in mark.args if c not in self.clauses]
            if unknown:
                raise pytest.UsageError(f"{item.nodeid}: clause(s) {unknown} are not defined in SPEC.md")
        today = date.today()
        run_facts = self.facts()
        applicable = [e for e in self.expectations if e.applies(run_facts, today)]
        pairs = [(test_id(i), i.get_closest_marker("clause").args) for i in items]
        chosen = self.selection.chosen(pairs)
        if self.selection.shard and not chosen:  # fewer selected tests than shards: this one has none, and that is fine
            unsharded = len(replace(self.selection, shard="").chosen(pairs))
            self.empty_shard = f"shard {self.selection.shard} of the {unsharded} selected test(s) has none" if unsharded else ""
        for item in items:
            mark = item.get_closest_marker("clause")
            tid = test_id(item)
            if tid in chosen:
                self.nodeids[item.nodeid] = tid
                self.tests[tid] = {"id": tid, "clauses": list(mark.args), "outcome": Outcome.NOT_RUN.value,
                                   "duration": 0.0, "message": ""}
            for exp in applicable:
                if exp.matches(tid, mark.args):
                    exp.used = True
                    reason = f"{self.expectations_path.name}: {exp.reason}"
                    if exp.kind == Outcome.XFAIL:
                        item.add_marker(pytest.mark.xfail(reason=reason, strict=False))
                    elif exp.kind == Outcome.SKIP:
                        item.add_marker(pytest.mark.skip(reason=reason))
                    else:
                        self.flaky.add(tid)
        for exp in applicable:
            if not exp.used:
                warnings.warn(f"{self.expectations_path.name}: expectation {exp.key!r} matches no test", stacklevel=1)
        for text in expectations.warnings_for(self.expectations, self.expectations_path.name, today):
            warnings.warn(text, stacklevel=1)
        deselected = [item for item in items if item.nodeid not in self.nodeids]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if item.nodeid in self.nodeids]
        self.write(RunStatus.CRASHED, "the run did not finish")

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self) -> None:
        """Fail a conformance test that left driver diagnostics (validation messages), after its fixtures
        are torn down."""
        if self.device is not None and not self.device.closed:
            messages = self.device.diagnostics()
            if messages:
                pytest.fail("driver diagnostics:\n" + "\n".join(messages), pytrace=False)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        tid = self.nodeids.get(report.nodeid)
        if tid is None:
            return
        wasxfail = hasattr(report, "wasxfail")
        if report.outcome == "rerun":  # pytest-rerunfailures: this attempt failed and the test runs again
            self.reruns.setdefault(tid, f"[{report.when}] {_message(report)}")
            self.failed_tries[tid] = self.failed_tries.get(tid, 0) + 1
            entry = self.tests[tid]
            entry.update(outcome=Outcome.NOT_RUN.value, message="", duration=round(entry["duration"] + report.duration, 4))
            return
        if report.passed:
            if report.when == "call":
                self.record(tid, Outcome.XPASS if wasxfail else Outcome.PASS, report.duration,
                            report.wasxfail if wasxfail else "")
        elif report.skipped:
            msg = _message(report)
            if wasxfail:
                self.record(tid, Outcome.XFAIL, report.duration, f"{report.wasxfail}\n{msg}".strip())
            elif msg.startswith(NOT_SUPPORTED_PREFIX):
                self.record(tid, Outcome.NOT_SUPPORTED, report.duration, msg[len(NOT_SUPPORTED_PREFIX):])
            else:
                self.record(tid, Outcome.SKIP, report.duration, msg)
        else:
            self.record(tid, Outcome.FAIL, report.duration, f"[{report.when}] {_message(report)}")
        if report.when == "teardown":
            self.write(RunStatus.CRASHED, "the run did not finish")

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """The run is "ok" only when pytest ran the tests to the end on the target's device."""
        if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and self.empty_shard:
            exitstatus = session.exitstatus = pytest.ExitCode.OK
        finished = exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
        unfinished = [t for t in self.tests.values() if t["outcome"] == Outcome.NOT_RUN]
        if self.device_error:
            status, message = RunStatus.ERROR, ""
        elif not finished:
            status, message = RunStatus.ERROR, f"pytest stopped: {pytest.ExitCode(exitstatus).name}"
        elif unfinished:
            status, message = RunStatus.ERROR, f"{len(unfinished)} test(s) never ran (-x or --maxfail?)"
        else:
            status, message = RunStatus.OK, self.empty_shard
        self.write(status, message)
        if self.device is not None:
            self.device.close()
        if self.baseline_path is not None and self.baseline_path.exists():
            self.comparison = judge.compare(results.load(self.baseline_path), self.document(status, message))
            if self.comparison.regressed:
                session.exitstatus = EXIT_REGRESSION

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.baseline_path is None:
            return
        terminalreporter.section(f"ironaccel baseline {self.baseline_path}")
        if self.comparison is None:
            terminalreporter.write_line("no baseline results for this target: nothing to compare")
            return
        for line in self.comparison.report() or [f"{self.target.name}: no change from the baseline"]:
            terminalreporter.write_line(line)
        if self.comparison.regressed:
            terminalreporter.write_line(f"REGRESSION (exit {EXIT_REGRESSION})")

    # -- results ------------------------------------------------------------------------------------
    def record(self, tid: str, outcome: Outcome, duration: float, message: str) -> None:
        """Record one phase's outcome; a failed (or flaky) phase is never overwritten by a later one, except a
        re-run's passing call by a failure of its teardown (that attempt failed too: the test fails)."""
        entry = self.tests[tid]
        entry["duration"] = round(entry["duration"] + duration, 4)
        if entry["outcome"] == Outcome.FAIL or (entry["outcome"] == Outcome.FLAKY and outcome != Outcome.FAIL):
            return
        if tid in self.reruns:
            entry.update(tries=self.failed_tries[tid] + 1, passes=int(outcome in (Outcome.PASS, Outcome.XPASS)))
        if outcome == Outcome.FAIL and tid in self.flaky:
            outcome = Outcome.FLAKY
        elif outcome == Outcome.PASS and tid in self.reruns:
            outcome, message = Outcome.FLAKY, (f"passed only when re-run (at try {entry['tries']}); the first attempt "
                                               f"failed: {self.reruns[tid]}")
        elif outcome == Outcome.FAIL and tid in self.reruns:
            message = f"failed again when re-run ({entry['tries']} tries): {message}"
        entry.update(outcome=outcome.value, message=message[:2000])

    def document(self, status: str, message: str = "") -> dict[str, Any]:
        return results.document(self.target, self.parts, self.started, status, message or self.device_error,
                                self.tests.values(), self.device.info if self.device is not None else None,
                                self.host, None if self.selection.everything else self.selection.record(),
                                self.builds(), self.evidence, self.test_timeout)

    def builds(self) -> dict[str, str | None]:
        """The C builds this run loaded, as they report their sources' hash: the compiled extension (None: pure
        Python) and the driver built here (the device's ``driver_build``; None: none, or no device)."""
        from .. import native

        extra = self.device.info.extra if self.device is not None else {}
        return {"compiled": native.loaded_hash(), "driver": extra.get("driver_build")}

    def write(self, status: str, message: str = "") -> None:
        if self.results_path is not None:
            self.results_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.results_path.with_suffix(".tmp")
            results.dump(self.document(status, message), tmp)
            tmp.replace(self.results_path)


class Watch:
    """Keeps ``{"test", "when", "since", "limit"}`` of the test phase now running in a file (``null`` test
    between tests; the file removed at the end of the session), written before the phase starts.

    pytest-timeout's signal method fails a test that runs past its limit only when Python code runs: a
    native wait that retries on EINTR (vkWaitSemaphores, a futex) never sees it, and a thread in the target
    process may never get the GIL back. So the watchdog is the parent's (``ironaccel.cts.certify``): it reads
    this file, kills a process whose phase is past its limit, and knows which test a crash happened in."""

    def __init__(self, path: Path):
        self.path = path

    def write(self, state: dict[str, Any]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state), encoding="utf-8")
        tmp.replace(self.path)

    def phase(self, item: pytest.Item, when: str) -> None:
        self.write({"test": test_id(item), "when": when, "since": time.time(), "limit": time_limit(item)})

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.phase(item, "setup")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        self.phase(item, "call")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        self.phase(item, "teardown")

    def pytest_runtest_logfinish(self) -> None:
        self.write({"test": None})

    def pytest_sessionfinish(self) -> None:
        self.path.unlink(missing_ok=True)


def time_limit(item: pytest.Item) -> float | None:
    """The test's pytest-timeout limit in seconds: its ``timeout`` mark, else ``--timeout`` (None: none)."""
    mark = item.get_closest_marker("timeout")
    value = (mark.args[0] if mark.args else mark.kwargs.get("timeout")) if mark else None
    if value is None:
        value = item.config.getoption("timeout", None)
    return float(value) if value else None


_KEY = pytest.StashKey[Conformance]()


def _state(config: pytest.Config) -> Conformance | None:
    return config.stash.get(_KEY, None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clause(*ids): the SPEC.md clause ids this conformance test checks")
    target = config.getoption("--target")
    if target or config.getini(HYPOTHESIS_INI):
        _load_hypothesis_profile()
    if target:
        if getattr(config.option, "numprocesses", None):
            raise pytest.UsageError("a conformance run is one process per target; `ironaccel certify --all` "
                                    "runs targets in parallel (drop -n)")
        state = Conformance(config, target)
        config.stash[_KEY] = state
        config.pluginmanager.register(state, "ironaccel-conformance")
        watch = config.getoption("--watch-file")
        if watch:
            config.pluginmanager.register(Watch(Path(watch)), "ironaccel-watch")


def _message(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    text = getattr(report, "longreprtext", "") or ""
    # pytest's "E " lines carry the assertion and its values; otherwise keep the end of the text
    lines = [ln for ln in text.splitlines() if ln.startswith("E ")] or text.splitlines()[-3:]
    return "\n".join(ln[2:].strip() if ln.startswith("E ") else ln for ln in lines)


# -- fixtures -------------------------------------------------------------------------------------------

def _conformance(request: pytest.FixtureRequest) -> Conformance:
    state = _state(request.config)
    if state is None:
        pytest.fail("conformance tests need a target: pass --target backend/driver (see `ironaccel doctor`)",
                    pytrace=False)
    return state


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> Any:
    """The device of the target under test (asserted to be the driver the target names)."""
    return _conformance(request).open_device()


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest) -> Any:
    """The Target under test: its kernels can be compiled on a second device (``target.compile_kernel``)."""
    return _conformance(request).target


@pytest.fixture
def stream(device: Any) -> Any:
    """A fresh stream, synchronized after the test."""
    s = device.create_stream()
    yield s
    if not device.closed:
        s.synchronize()


@pytest.fixture
def require(device: Any) -> Callable[[str], None]:
    """``require("events.timing")``: not-supported (not a skip, not a failure) when the device says no."""

    def check(capability: str) -> None:
        if not device.supports(capability):
            pytest.skip(f"{NOT_SUPPORTED_PREFIX}{capability}")

    return check


@pytest.fixture
def record_output(request: pytest.FixtureRequest) -> Callable[[str, Any], None]:
    """``record_output("sums", array)``: keep the sha256 of a kernel's result bytes in the test's results entry
    (``outputs``), so ``ironaccel status`` can compare the same kernel's results across targets."""
    state = _conformance(request)

    def record(name: str, data: Any) -> None:
        tid = state.nodeids.get(request.node.nodeid)
        if tid is not None:
            digest = hashlib.sha256(memoryview(data).cast("B")).hexdigest()[:16]
            state.tests[tid].setdefault("outputs", {})[name] = digest

    return record


@pytest.fixture(scope="session")
def kernel_source(request: pytest.FixtureRequest) -> Callable[[str, str], str | bytes]:
    """``kernel_source("broken", lang)``: the source of a kernel file in one of the target's dialects."""
    dialects = {d.lang: d for d in _conformance(request).target.kernels}

    def source(name: str, lang: str) -> str | bytes:
        found = dialects[lang].source(name) if lang in dialects else None
        if found is None:
            raise FileNotFoundError(f"target {_conformance(request).target.name} has no {lang} kernel {name!r}")
        return found

    return source


@pytest.fixture(scope="session")
def kernels(request: pytest.FixtureRequest, device: Any) -> Callable[[str], Any]:
    """``kernels("saxpy")``: the conformance kernel in the device's first language that the target has a
    file for (``Target.kernels``: the suite's conformance/kernels/<lang>/, or a plugin's own folder)."""
    return conformance_kernels(device, _conformance(request).target)


def conformance_kernels(device: Any, target: Any) -> Callable[[str], Any]:
    """The target's conformance kernels by name, each compiled on ``device`` once (``Target.compile_kernel``):
    the ``kernels`` fixture, and what ``ironaccel.cts.testing.fuzz`` launches."""
    cache: dict[str, Any] = {}

    def load(name: str) -> Any:
        if name not in cache:
            cache[name] = target.compile_kernel(device, name)
        return cache[name]

    return load
