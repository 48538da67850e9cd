"""The conformance plugin through pytester: outcomes, expectations, clause marks, device check, results file."""

from __future__ import annotations

import json
import os

import pytest

from ironaccel import results


# Registers target "mem/test" (and "mem/wrong", whose driver never matches) over the in-memory device.
CONFTEST = """
import importlib
from ironaccel.testing.memdevice import MemDevice
from ironaccel import api, targets

registry = importlib.import_module("ironaccel.backends")


class MemTarget(targets.Target):
    def environment(self):
        return {}

    def matches(self, info):
        return info.backend == "mem" and self.driver == "test"


class MemBackend(api.Backend):
    name = "mem"

    def probe(self):
        return api.BackendInfo("mem", True, "in-memory")

    def device_count(self):
        return 1

    def _open_device(self, index):
        return MemDevice(1 << 20)


for driver in ("test", "wrong"):
    targets.TARGETS["mem/" + driver] = MemTarget("mem", driver, True)
_real_get = registry.get
registry.get = lambda name: MemBackend() if name == "mem" else _real_get(name)
"""

OUTCOMES_TESTS = """
import os
import numpy as np
import pytest


@pytest.mark.clause("MEM-1")
def test_passes(device, stream):
    buf = device.alloc(8)
    stream.copy_htod(buf, np.arange(8, dtype=np.uint8))
    out = np.zeros(8, np.uint8)
    stream.copy_dtoh(out, buf)
    stream.synchronize()
    assert list(out) == list(range(8))


@pytest.mark.clause("MEM-2")
def test_fails(device):
    assert device.info.name == "a different device"


@pytest.mark.clause("MEM-3")
def test_expected_to_fail():
    assert 1 == 2


@pytest.mark.clause("MEM-4")
def test_expected_to_fail_but_passes():
    pass


@pytest.mark.clause("MEM-5")
def test_skipped_by_policy():
    raise AssertionError("a skipped test must not run")


@pytest.mark.clause("MEM-6")
def test_flaky():
    assert False, "sometimes"


@pytest.mark.clause("KERNEL-1")
def test_needs_a_capability(require):
    require("lang.wgsl")
    raise AssertionError("not reached")


@pytest.mark.clause("KERNEL-2")
def test_leaves_diagnostics(device):
    device._diagnostics.append("validation: something was misused")
"""

EXPECTATIONS = """
# comment lines and blank lines are ignored

MEM-3  xfail  known driver bug
test_outcomes.py::test_expected_to_fail_but_passes  xfail  fixed upstream?
test_outcomes.py::test_skipped_by_policy  skip  takes an hour on this driver
MEM-6  flaky  races in the driver
NOPE-9  xfail  matches nothing
"""


def run(pytester: pytest.Pytester, target: str, *args: str) -> tuple[pytest.RunResult, dict]:
    pytester.makeconftest(CONFTEST)
    out = pytester.path / "results.json"
    result = pytester.runpytest_subprocess("-p", "ironaccel.pytest_plugin", "--target", target,
                                           "--results-json", str(out), *args)
    return result, (json.loads(out.read_text()) if out.exists() else {})


def test_every_outcome_is_recorded(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_outcomes=OUTCOMES_TESTS)
    exp = pytester.path / "exp.txt"
    exp.write_text(EXPECTATIONS)
    result, doc = run(pytester, "mem/test", "--expectations", str(exp))
    results.validate(doc)
    got = {t["id"].split("::")[1]: t["outcome"] for t in doc["tests"]}
    assert got == {
        "test_passes": "pass",
        "test_fails": "fail",
        "test_expected_to_fail": "xfail",
        "test_expected_to_fail_but_passes": "xpass",
        "test_skipped_by_policy": "skip",
        "test_flaky": "flaky",
        "test_needs_a_capability": "not-supported",
        "test_leaves_diagnostics": "fail",
    }
    by_name = {t["id"].split("::")[1]: t for t in doc["tests"]}
    assert "a different device" in by_name["test_fails"]["message"]
    assert by_name["test_needs_a_capability"]["message"] == "lang.wgsl"
    assert "something was misused" in by_name["test_leaves_diagnostics"]["message"]
    assert "takes an hour" in by_name["test_skipped_by_policy"]["message"]
    assert by_name["test_passes"]["clauses"] == ["MEM-1"]
    assert doc["run"]["status"] == "ok"
    assert doc["target"]["name"] == "mem/test" and doc["target"]["device"] == "in-memory test device"
    assert doc["target"]["simulated"] is True
    assert doc["summary"]["pass"] == 1 and doc["summary"]["fail"] == 2
    result.stdout.fnmatch_lines(["*expectation 'NOPE-9' matches no test*"])


def test_missing_clause_mark_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_unmarked():\n    pass\n")
    result, _ = run(pytester, "mem/test")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*needs @pytest.mark.clause*"])


def test_unknown_clause_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n@pytest.mark.clause('MEM-999')\ndef test_x():\n    pass\n")
    result, _ = run(pytester, "mem/test")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*MEM-999*not defined in SPEC.md*"])


def test_wrong_driver_fails_every_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_outcomes=OUTCOMES_TESTS)
    result, doc = run(pytester, "mem/wrong")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    device_tests = [t for t in doc["tests"] if t["id"].split("::")[1] in ("test_passes", "test_fails")]
    assert all(t["outcome"] == "fail" for t in device_tests)
    assert all("no device is the wrong driver" in t["message"] for t in device_tests)
    assert doc["run"]["status"] == "error" and "in-memory test device" in doc["run"]["message"]


def test_crash_leaves_a_crashed_results_file(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_crash="""
import os, pytest

@pytest.mark.clause("MEM-1")
def test_a_first():
    pass

@pytest.mark.clause("MEM-2")
def test_b_dies():
    os._exit(3)

@pytest.mark.clause("MEM-3")
def test_c_never_runs():
    pass
""")
    result, doc = run(pytester, "mem/test")
    assert result.ret == 3
    assert doc["run"]["status"] == "crashed"
    assert [t["outcome"] for t in doc["tests"]] == ["pass", "not-run", "not-run"]


def test_without_a_target_conformance_fixtures_say_how(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n@pytest.mark.clause('MEM-1')\ndef test_x(device):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "ironaccel.pytest_plugin")
    result.stdout.fnmatch_lines(["*pass --target backend/driver*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_expectations_syntax_errors_name_the_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n@pytest.mark.clause('MEM-1')\ndef test_x():\n    pass\n")
    exp = pytester.path / "exp.txt"
    exp.write_text("MEM-1  maybe  not a kind\n")
    result, _ = run(pytester, "mem/test", "--expectations", str(exp))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*exp.txt:1: expected `id  xfail|skip|flaky  reason`*"])


RERUN_TESTS = """
import pathlib
import pytest

ATTEMPTS = pathlib.Path(__file__).with_name("attempts")


@pytest.mark.clause("MEM-1")
def test_fails_once_then_passes():
    failed_before = ATTEMPTS.exists()
    ATTEMPTS.write_text("1")
    assert failed_before, "first attempt"


@pytest.mark.clause("MEM-2")
def test_always_fails():
    assert False, "every attempt"


@pytest.mark.clause("MEM-3")
def test_passes():
    pass
"""


def test_pass_on_rerun_is_flaky_not_pass(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_rerun=RERUN_TESTS)
    result, doc = run(pytester, "mem/test", "--reruns", "1")
    by_name = {t["id"].split("::")[1]: t for t in doc["tests"]}
    assert {name: t["outcome"] for name, t in by_name.items()} == {
        "test_fails_once_then_passes": "flaky", "test_always_fails": "fail", "test_passes": "pass"}
    assert "first attempt" in by_name["test_fails_once_then_passes"]["message"]
    assert "passed only when re-run" in by_name["test_fails_once_then_passes"]["message"]
    assert by_name["test_always_fails"]["message"].startswith("failed again when re-run")
    assert doc["summary"]["flaky"] == 1 and doc["run"]["status"] == "ok"
    assert result.parseoutcomes()["rerun"] == 2


def test_hung_test_times_out_and_the_run_goes_on(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_hang="""
import time, pytest

@pytest.mark.clause("MEM-1")
def test_hangs():
    time.sleep(60)

@pytest.mark.clause("MEM-2")
def test_after():
    pass
""")
    result, doc = run(pytester, "mem/test", "--timeout", "1")
    outcomes = {t["id"].split("::")[1]: (t["outcome"], t["message"]) for t in doc["tests"]}
    assert outcomes["test_hangs"][0] == "fail" and "Timeout" in outcomes["test_hangs"][1]
    assert outcomes["test_after"] == ("pass", "")
    assert doc["run"]["status"] == "ok"


def test_a_run_stopped_early_is_an_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_outcomes=OUTCOMES_TESTS)
    result, doc = run(pytester, "mem/test", "-x")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert doc["run"]["status"] == "error" and "never ran" in doc["run"]["message"]


PROFILE_TEST = """
from hypothesis import settings


def test_profile():
    print("PROFILE", settings().max_examples, settings().derandomize)
"""


def test_without_a_target_the_plugin_leaves_hypothesis_alone(pytester: pytest.Pytester, monkeypatch) -> None:
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "ci")
    pytester.makepyfile(test_profile=PROFILE_TEST)
    result = pytester.runpytest_subprocess("-p", "ironaccel.pytest_plugin", "-s")
    result.stdout.fnmatch_lines(["*PROFILE 100 False*"])  # Hypothesis' own default profile
    assert result.ret == pytest.ExitCode.OK


def test_the_ini_option_gives_a_session_the_ci_profile(pytester: pytest.Pytester, monkeypatch) -> None:
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "ci")
    pytester.makepyfile(test_profile=PROFILE_TEST)
    pytester.makeini("[pytest]\nironaccel_hypothesis_profiles = true\n")
    result = pytester.runpytest_subprocess("-p", "ironaccel.pytest_plugin", "-s")
    result.stdout.fnmatch_lines(["*PROFILE 25 True*"])


def test_tests_here_run_under_the_ci_profile_when_asked() -> None:
    from hypothesis import settings

    if os.environ.get("HYPOTHESIS_PROFILE") == "ci":
        assert settings().derandomize and settings().max_examples == 25
    else:
        assert settings().max_examples == 25  # dev


@pytest.mark.parametrize("kind", ["not utf-8", "directory"])
def test_an_unreadable_expectations_file_is_a_usage_error(pytester: pytest.Pytester, kind) -> None:
    pytester.makepyfile("import pytest\n@pytest.mark.clause('MEM-1')\ndef test_x():\n    pass\n")
    exp = pytester.path / "exp.txt"
    if kind == "directory":
        exp.mkdir()
    else:
        exp.write_bytes(b"MEM-1  xfail  caf\xe9\n")
    result, _ = run(pytester, "mem/test", "--expectations", str(exp))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in result.stderr.str() + result.stdout.str()
    result.stderr.fnmatch_lines([f"*expectations {exp}: {'a directory' if kind == 'directory' else 'not UTF-8'}*"])
