"""The conformance plugin through pytester: outcomes, expectations, clause marks, device check, results file."""

from __future__ import annotations

import json
import os
import sys

import pytest

from ironaccel.cts import results
from membackend import CONFTEST

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
    result = pytester.runpytest_subprocess("-p", "ironaccel.cts.pytest_plugin", "--target", target,
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
    result = pytester.runpytest_subprocess("-p", "ironaccel.cts.pytest_plugin")
    result.stdout.fnmatch_lines(["*pass --target backend/driver*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_expectations_syntax_errors_name_the_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n@pytest.mark.clause('MEM-1')\ndef test_x():\n    pass\n")
    exp = pytester.path / "exp.txt"
    exp.write_text("MEM-1  maybe  not a kind\n")
    result, _ = run(pytester, "mem/test", "--expectations", str(exp))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*exp.txt:1: expected `ID  xfail|skip|flaky  *| BUG | REASON`*"])


TAGGED_TESTS = "import pytest\n" + "".join(
    f"@pytest.mark.clause('MEM-{n}')\ndef test_{n}():\n    assert False\n" for n in range(1, 5))
TAGGED = """
MEM-1  xfail  device~=in-memory  os=linux  | ours: the in-memory device | applies: the device and OS match
MEM-2  xfail  device~=H200  | https://example.org/bug/2 | does not apply: another device
MEM-3  xfail  expires=2000-01-01  | upstream: gone | expired
MEM-4  xfail  never filed
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the entries' os tag says linux")
def test_expectations_apply_where_their_tags_hold(pytester: pytest.Pytester) -> None:
    """Tags are read against the device the run opened; an expired entry no longer applies; an entry
    without a bug reference applies and is warned about."""
    pytester.makepyfile(test_tagged=TAGGED_TESTS)
    exp = pytester.path / "exp.txt"
    exp.write_text(TAGGED)
    result, doc = run(pytester, "mem/test", "--expectations", str(exp))
    assert {t["id"]: t["outcome"] for t in doc["tests"]} == {
        "test_tagged.py::test_1": "xfail", "test_tagged.py::test_2": "fail", "test_tagged.py::test_3": "fail",
        "test_tagged.py::test_4": "xfail"}
    out = result.stdout.str()
    assert "exp.txt:5: MEM-4 has no bug reference" in out and "exp.txt:4: MEM-3 expired on 2000-01-01" in out
    assert "MEM-2' matches no test" not in out  # an entry that does not apply here is not unused


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
    # Hypothesis' own default differs by machine (it derandomizes when it detects CI), so the baseline is a
    # run without the plugin.
    bare = pytester.runpytest_subprocess("-p", "no:ironaccel.cts.pytest_plugin", "-s")
    [expected] = [line for line in bare.outlines if "PROFILE" in line]
    result = pytester.runpytest_subprocess("-p", "ironaccel.cts.pytest_plugin", "-s")
    result.stdout.fnmatch_lines([f"*{expected.split('test_profile.py ')[-1]}*"])
    assert result.ret == pytest.ExitCode.OK


def test_the_ini_option_gives_a_session_the_ci_profile(pytester: pytest.Pytester, monkeypatch) -> None:
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "ci")
    pytester.makepyfile(test_profile=PROFILE_TEST)
    pytester.makeini("[pytest]\nironaccel_hypothesis_profiles = true\n")
    result = pytester.runpytest_subprocess("-p", "ironaccel.cts.pytest_plugin", "-s")
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


SELECTION_TESTS = """
import pytest


@pytest.mark.clause("MEM-1")
def test_mem_one():
    pass


@pytest.mark.clause("MEM-2")
def test_mem_two():
    pass


@pytest.mark.clause("KERNEL-1")
def test_kernel_one():
    pass


@pytest.mark.clause("KERNEL-2", "MEM-3")
def test_kernel_two():
    pass


@pytest.mark.clause("COPY-1")
@pytest.mark.parametrize("n", [1, 2, 3])
def test_copy(n):
    pass
"""


def names(doc: dict) -> set[str]:
    return {t["id"].split("::")[1] for t in doc["tests"]}


def test_only_and_skip_select_by_clause_and_test_id(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sel=SELECTION_TESTS)
    result, doc = run(pytester, "mem/test", "--only", "KERNEL-*")
    assert names(doc) == {"test_kernel_one", "test_kernel_two"} and doc["run"]["status"] == "ok"
    assert doc["selection"] == {"only": ["KERNEL-*"], "skip": [], "shard": ""}
    result.stdout.fnmatch_lines(["*2 passed, 5 deselected*"])
    _, doc = run(pytester, "mem/test", "--only", "MEM-*", "--skip", "test_sel.py::test_mem_t*")
    assert names(doc) == {"test_mem_one", "test_kernel_two"}  # test_kernel_two cites MEM-3
    _, doc = run(pytester, "mem/test", "--skip", "test_sel.py::test_copy*", "--skip", "KERNEL-1")
    assert names(doc) == {"test_mem_one", "test_mem_two", "test_kernel_two"}
    _, doc = run(pytester, "mem/test", "--only", "test_sel.py::test_copy[2]")  # an exact id, brackets and all
    assert {t["id"] for t in doc["tests"]} == {"test_sel.py::test_copy[2]"}
    _, doc = run(pytester, "mem/test")
    assert len(doc["tests"]) == 7 and "selection" not in doc


def test_shards_split_the_selection_interleaved_and_merge_back(pytester: pytest.Pytester, tmp_path) -> None:
    from ironaccel.cts import certify

    pytester.makepyfile(test_sel=SELECTION_TESTS)
    _, whole = run(pytester, "mem/test")
    shards = []
    for k in (1, 2, 3):
        _, doc = run(pytester, "mem/test", "--shard", f"{k}/3")
        assert doc["selection"]["shard"] == f"{k}/3"
        path = tmp_path / f"shard{k}.json"
        results.dump(doc, path)
        shards.append(path)
    ids = sorted(t["id"] for t in whole["tests"])
    assert [{t["id"] for t in results.load(p)["tests"]} for p in shards] == [set(ids[k::3]) for k in range(3)]
    _, again = run(pytester, "mem/test", "--shard", "2/3")
    assert names(again) == names(results.load(shards[1]))  # deterministic
    merged = certify.merge(shards[::-1], tmp_path / "merged.json")
    assert [(t["id"], t["outcome"]) for t in merged["tests"]] == [(t["id"], t["outcome"]) for t in whole["tests"]]
    assert merged["run"]["status"] == "ok" and "selection" not in merged
    assert (tmp_path / "merged.cert.json").is_file() and (tmp_path / "merged.junit.xml").is_file()
    with pytest.raises(ValueError, match="shard\\(s\\) 3/3 missing"):
        certify.merge(shards[:2], tmp_path / "m.json")
    with pytest.raises(ValueError, match="shard 1/3 is also"):
        certify.merge([shards[0], shards[0], shards[1], shards[2]], tmp_path / "m.json")
    with pytest.raises(ValueError, match="not a shard"):
        certify.merge([tmp_path / "merged.json"], tmp_path / "m.json")


def test_a_shard_the_selection_leaves_empty_is_ok_but_an_empty_selection_is_not(pytester: pytest.Pytester) -> None:
    """certify splits a target into as many shards as it has cores: a selection of one test leaves the other
    shards empty, which is no failure; a selection that matches nothing still is (pytest's exit 5)."""
    pytester.makepyfile(test_sel=SELECTION_TESTS)
    result, doc = run(pytester, "mem/test", "--only", "KERNEL-1", "--shard", "2/2")
    assert result.ret == 0 and doc["tests"] == []
    assert doc["run"] == {"status": "ok", "message": "shard 2/2 of the 1 selected test(s) has none"}
    result, doc = run(pytester, "mem/test", "--only", "KERNEL-1", "--shard", "1/2")
    assert result.ret == 0 and names(doc) == {"test_kernel_one"}
    for args in (("--only", "NOPE-1"), ("--only", "NOPE-1", "--shard", "2/2")):
        result, doc = run(pytester, "mem/test", *args)
        assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED and doc["run"]["status"] == "error", args


def test_a_bad_shard_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sel=SELECTION_TESTS)
    result, _ = run(pytester, "mem/test", "--shard", "4/3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--shard '4/3': expected K/N*"])


BASELINE_TESTS = """
import os
import pytest


@pytest.mark.clause("MEM-1")
def test_steady():
    pass


@pytest.mark.clause("MEM-2")
def test_breaks():
    assert os.environ.get("BROKEN") != "1"


@pytest.mark.clause("MEM-3")
def test_gets_fixed():
    assert os.environ.get("BROKEN") == "1"
"""


def test_baseline_reports_new_failures_and_fixes_with_its_own_exit_code(pytester: pytest.Pytester, monkeypatch,
                                                                        tmp_path) -> None:
    pytester.makepyfile(test_base=BASELINE_TESTS)
    _, before = run(pytester, "mem/test")
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    results.dump(before, baseline / "mem-test.json")
    result, _ = run(pytester, "mem/test", "--baseline", str(baseline))
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # a known failure is a failure, not a regression
    result.stdout.fnmatch_lines(["*mem/test: no change from the baseline*"])
    monkeypatch.setenv("BROKEN", "1")
    result, _ = run(pytester, "mem/test", "--baseline", str(baseline))
    assert result.ret == 6
    result.stdout.fnmatch_lines(["*mem/test: new failure: test_base.py::test_breaks*",
                                 "*mem/test: fixed: test_base.py::test_gets_fixed*", "*REGRESSION (exit 6)*"])
