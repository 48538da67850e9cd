"""pytest plugin of the mutation engine's coverage recording (``generated.py``), loaded into the test process
with ``-p probe`` (PYTEST_ADDOPTS, so certify's child loads it unchanged): per test, what it executes.

- Python: coverage.py with branch coverage (configured by the engine's $COVERAGE_PROCESS_START), one dynamic
  context per test (its node id; lines run at import, between tests or in child processes get the empty one);
- the fake libcuda: the entry points a test calls (the fake's own call counters, read before and after);
- the compiled hot path (``ironaccel._fast``): the methods a test calls on its objects and module (a profile
  hook: c_call events, on the runs that judge its mutants: $IRONACCEL_MUTANTS_FAST_CALLS), which the engine maps
  to C functions through the module's method tables.

Writes into $IRONACCEL_MUTANTS_PROBE: ``coverage.*`` (coverage.py data, one file per process) and
``calls-<pid>.json`` ({test id: {"fake": [entry points], "fast": [method names]}}) and ``outcomes-<pid>.json``
({test id: pass | fail | skip}).
"""

from __future__ import annotations

import json
import os
import sys
import threading

import coverage
import pytest

OUT = os.environ["IRONACCEL_MUTANTS_PROBE"]
FAST_CALLS = "IRONACCEL_MUTANTS_FAST_CALLS"  # "1": record the compiled module's methods (a run that judges its mutants)
# Started at interpreter start-up (COVERAGE_PROCESS_START, through the .pth coverage installs), so that what
# pytest imports before loading this plugin (ironaccel, through its own plugin) is measured, and so are the
# child processes the tests start (their lines have no test's context); started here where that hook is missing.
_cov = coverage.Coverage.current()
if _cov is None:
    _cov = coverage.Coverage(config_file=os.environ["COVERAGE_PROCESS_START"])
    _cov.start()

_calls: dict[str, dict[str, list[str]]] = {}
_outcomes: dict[str, str] = {}  # test id -> pass | fail | skip (the platform's unit tests are judged by it)
_fast_seen: set[str] = set()
_fast_type: dict[type, bool] = {}
_control = None
_counts_before: dict[str, int] = {}


def _is_fast(owner: object) -> bool:
    kind = type(owner)
    known = _fast_type.get(kind)
    if known is None:
        known = _fast_type[kind] = any(getattr(k, "__module__", "") == "ironaccel._fast" for k in kind.__mro__)
    return known or getattr(owner, "__name__", None) == "ironaccel._fast"


def _profile(frame, event, arg):  # noqa: ARG001
    if event == "c_call":
        owner = getattr(arg, "__self__", None)
        if owner is not None and _is_fast(owner):
            _fast_seen.add(arg.__name__)


def _fake_counts() -> dict[str, int]:
    global _control
    from ironaccel import fakes
    if fakes._loaded is None:
        return {}
    if _control is None:
        _control = fakes.Control(fakes._loaded)
        _control.names = _control.entry_points()
    return {n: _control.lib.ironaccel_fake_call_count(n.encode()) for n in _control.names}


def pytest_configure(config):  # noqa: ARG001
    if os.environ.get(FAST_CALLS) == "1":
        threading.setprofile(_profile)
        sys.setprofile(_profile)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logstart(nodeid, location):  # noqa: ARG001
    global _counts_before
    _fast_seen.clear()
    _counts_before = _fake_counts()
    _cov.switch_context(nodeid)


@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid, location):  # noqa: ARG001
    after = _fake_counts()
    fake = {n for n, c in after.items() if c != _counts_before.get(n, 0)}
    _calls[nodeid] = {"fake": sorted(fake), "fast": sorted(_fast_seen)}
    _cov.switch_context("")


def pytest_runtest_logreport(report):
    was = _outcomes.get(report.nodeid, "pass")
    now = "fail" if report.failed else "skip" if report.skipped else "pass"
    _outcomes[report.nodeid] = "fail" if "fail" in (was, now) else "skip" if "skip" in (was, now) else "pass"


def pytest_unconfigure(config):  # noqa: ARG001
    sys.setprofile(None)
    threading.setprofile(None)
    _cov.stop()
    _cov.save()
    with open(os.path.join(OUT, f"calls-{os.getpid()}.json"), "w", encoding="utf-8") as f:
        json.dump(_calls, f)
    with open(os.path.join(OUT, f"outcomes-{os.getpid()}.json"), "w", encoding="utf-8") as f:
        json.dump(_outcomes, f)
