"""``ironaccel certify``: target processes that crash, hang or misuse pytest; per-test timeouts, re-runs, JUnit;
certificates and their verification; the progress line.

Targets here are "mem/test" over the in-memory device (tests/membackend.py), registered in the child process
by the suite folder's conftest (membackend.CONFTEST) and in this process by ``mem_target``;
``run_target(suite=...)`` runs that folder instead of the conformance suite.
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from ironaccel.cts import certify, results, spec, targets
from ironaccel.cts.cli import main
from ironaccel.cts.selection import Selection
from ironaccel.cts.testing.documents import passing_doc, verified_against
from membackend import registered, suite
from results_docs import outcomes

NAME = "mem/test"


@pytest.fixture
def mem_target() -> None:
    with registered():
        yield


def run(tmp_path: Path, tests: str, **kwargs) -> tuple[certify.TargetRun, dict]:
    out = tmp_path / "results"
    out.mkdir()
    r = certify.run_target(NAME, out, suite=suite(tmp_path, tests), **kwargs)
    return r, results.load(r.results_file)


def test_a_target_that_crashes_is_recorded_as_crashed(tmp_path, mem_target):
    r, doc = run(tmp_path, """
@pytest.mark.clause("MEM-1")
def test_a_passes():
    pass

@pytest.mark.clause("MEM-2")
def test_b_kills_the_process():
    os._exit(7)

@pytest.mark.clause("MEM-3")
def test_c_runs_in_a_new_process():
    pass
""")
    assert (r.status, r.ok) == ("ok", False)  # every test has its outcome; one is a failure
    assert r.message.startswith("the test process died in test_suite.py::test_b_kills_the_process (exit code 7) (log:")
    assert outcomes(doc) == {"test_a_passes": "pass", "test_b_kills_the_process": "fail", "test_c_runs_in_a_new_process": "pass"}
    died = next(t for t in doc["tests"] if "test_b" in t["id"])
    assert died["message"] == ("[call] the test process died during this test (exit code 7)\nattempt 1 stopped its "
                               "process: [call] the test process died during this test (exit code 7)")
    assert (died["tries"], died["passes"]) == (2, 0)
    assert results.sibling(r.results_file, ".cert.json").is_file()
    junit = ET.parse(results.sibling(r.results_file, ".junit.xml")).getroot()
    failures = [case.get("name") for case in junit.iter("testcase") if case.find("failure") is not None]
    assert failures == ["test_b_kills_the_process"] and junit.get("failures") == "1"
    assert "died during this test" in junit.find("testcase/failure").get("message")


@pytest.mark.parametrize(("death", "how"), [("signal.signal(signal.SIGHUP, signal.SIG_DFL); os.kill(os.getpid(), signal.SIGHUP)",
                                             "signal 1"),  # the default action: a run under nohup ignores SIGHUP
                                            ("os._exit(0)", "exit code 0")])
def test_a_test_process_death_says_how_it_died(tmp_path, mem_target, death, how):
    """A signal (a negative exit code, SIGHUP's -1 too) is named as one; an exit with code 0 in the middle of a
    test is a death all the same, not a signal."""
    r, doc = run(tmp_path, f"""
import signal

@pytest.mark.clause("MEM-1")
def test_a_dies():
    {death}
""")
    assert (r.status, r.ok) == ("ok", False)
    assert f"died in test_suite.py::test_a_dies ({how})" in r.message
    assert doc["tests"][0]["message"].startswith(f"[call] the test process died during this test ({how})\n")


def test_a_native_crash_keeps_the_stacks_the_process_printed(tmp_path, mem_target):
    """A segfault's report (the signal and each thread's Python stack, faulthandler's) is the only clue a CI
    log can give: it goes into the test's message and under the summary table, not only into the log file."""
    r, doc = run(tmp_path, """
import ctypes

def read_address_eight():
    ctypes.string_at(8, 1)

@pytest.mark.clause("MEM-1")
def test_a_crashes():
    read_address_eight()
""")
    message = doc["tests"][0]["message"]
    assert message.startswith("[call] the test process died during this test (signal 11)\nFatal Python error: Segmentation")
    assert "read_address_eight" in message and "test_a_crashes" in message
    table = certify.summary_table([r])
    assert "test_suite.py::test_a_crashes: [call] the test process died" in table and "    Fatal Python error" in table


def test_a_test_whose_process_died_once_is_flaky_when_its_re_run_passes(tmp_path, mem_target):
    """A test that dies is a failing test like any other: re-run (in a new process), it is flaky when the re-run
    passes, and its message keeps how the attempt that died ended; with no re-runs it fails."""
    died_once = """
import ctypes
from pathlib import Path

@pytest.mark.clause("MEM-1")
def test_a_crashes_once():
    mark = Path(__file__).with_name("crashed-once")
    if not mark.exists():
        mark.write_text("")
        ctypes.string_at(8, 1)

@pytest.mark.clause("MEM-2")
def test_b_passes():
    pass
"""
    r, doc = run(tmp_path, died_once)
    assert outcomes(doc) == {"test_a_crashes_once": "flaky", "test_b_passes": "pass"} and r.ok
    entry = doc["tests"][0]
    assert (entry["tries"], entry["passes"]) == (2, 1)
    assert entry["message"].startswith("passed only when re-run in a new process (at try 2)\nattempt 1 stopped its "
                                       "process: [call] the test process died during this test (signal 11)\nFatal")
    assert "test_suite.py::test_a_crashes_once flaky, passed 1 of 2 tries" in certify.summary_table([r])
    assert doc["run"] == {"status": "ok", "message": ""}  # as a run whose failing test passed on its re-run
    (tmp_path / "again").mkdir()
    r, doc = run(tmp_path / "again", died_once, retries=0)
    assert outcomes(doc) == {"test_a_crashes_once": "fail", "test_b_passes": "pass"} and "tries" not in doc["tests"][0]


def test_a_crash_in_a_fixture_teardown_fails_the_test_it_ended(tmp_path, mem_target):
    r, doc = run(tmp_path, """
@pytest.fixture(scope="module")
def dies_at_the_end():
    yield
    os._exit(7)

@pytest.mark.clause("MEM-1")
def test_a_passes(dies_at_the_end):
    pass
""")
    assert (r.status, r.ok) == ("ok", False)
    assert doc["tests"][0]["message"].startswith("[teardown] the test process died during this test (exit code 7)\n")


NATIVE_HANG = """
import ctypes
import os
from pathlib import Path

@pytest.mark.clause("MEM-1")
def test_a_passes():
    pass

@pytest.mark.clause("MEM-2")
@pytest.mark.parametrize("library", ["CDLL", "PyDLL"])  # a native wait that lets go of the GIL, one that holds it
def test_b_waits_forever_in_native_code(library):
    Path(__file__).with_name(f"hung-pid-{library}").write_text(str(os.getpid()))  # for the check it is gone
    libc = getattr(ctypes, library)(None)
    mutex = ctypes.create_string_buffer(64)  # zeroes: PTHREAD_MUTEX_INITIALIZER, a normal (non-recursive) mutex
    assert libc.pthread_mutex_lock(mutex) == 0
    libc.pthread_mutex_lock(mutex)  # never returns, signals or not: a futex wait retried on EINTR

@pytest.mark.clause("MEM-3")
def test_c_runs_after_the_hang():
    pass
"""


def test_a_test_hung_in_native_code_is_a_timeout_failure_and_the_run_goes_on(tmp_path, mem_target):
    """pytest-timeout's signal cannot end a wait in native code; the watchdog kills the process at the
    test's limit (plus WATCHDOG_GRACE_S), records the test as a timeout failure, and runs the rest."""
    t0 = time.monotonic()
    r, doc = run(tmp_path, NATIVE_HANG, test_timeout_s=2, timeout_s=300)
    assert outcomes(doc) == {"test_a_passes": "pass", "test_b_waits_forever_in_native_code[CDLL]": "fail",
                             "test_b_waits_forever_in_native_code[PyDLL]": "fail", "test_c_runs_after_the_hang": "pass"}
    assert [t["id"] for t in doc["tests"]] == sorted({t["id"] for t in doc["tests"]})  # each test once
    for t in doc["tests"]:
        if "waits_forever" in t["id"]:
            assert t["message"].startswith("timeout: [call] still running") and "past its 2 s limit" in t["message"], t
            assert 2 <= t["duration"] < 60
    assert (r.status, r.ok) == ("ok", False) and doc["summary"]["fail"] == 2
    assert "test_b_waits_forever_in_native_code[CDLL] hung past its 2 s limit" in r.message
    assert time.monotonic() - t0 < 120  # two hangs of 2 s + grace each and three processes, not the target's limit
    hung = [int(p.read_text()) for p in tmp_path.rglob("hung-pid-*")]
    assert len(hung) == 2
    for pid in hung:  # killed and reaped: a hung process left behind would hold its device to the end of certify
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    junit = ET.parse(results.sibling(r.results_file, ".junit.xml")).getroot()
    assert junit.get("tests") == "4" and junit.get("failures") == "2"
    assert not list(r.results_file.parent.glob(".*.part.json")) and not list(r.results_file.parent.glob(".*.watch.json"))


def test_a_hang_in_the_last_test_still_ends_the_run_with_every_outcome(tmp_path, mem_target):
    r, doc = run(tmp_path, NATIVE_HANG, test_timeout_s=2, timeout_s=300,
                 selection=Selection(only=("test_suite.py::test_b_waits_forever_in_native_code[PyDLL]",)))
    assert outcomes(doc) == {"test_b_waits_forever_in_native_code[PyDLL]": "fail"}
    assert (r.status, r.ok) == ("ok", False) and doc["selection"]["only"] == [
        "test_suite.py::test_b_waits_forever_in_native_code[PyDLL]"]


def test_an_endless_kernel_behind_a_synchronize_without_timeout_is_a_timeout_failure(tmp_path):
    """The case the watchdog is for, on a real simulated target: the fake libcuda (no kernel watchdog set)
    runs a kernel of 2^32 - 1 loop iterations per thread, and ``synchronize()`` waits for it in the driver."""
    why = targets.get("cuda/fake").missing()
    if why is not None:
        pytest.skip(f"cuda/fake cannot run here: {why}")
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "test_endless.py").write_text("""
import numpy as np
import pytest

@pytest.mark.clause("STREAM-1")
def test_a_waits_for_an_endless_kernel(device, stream, kernels):
    buf = device.alloc(4 * 64)
    stream.launch(kernels("busy"), 1, 64, (buf, np.uint32(2**32 - 1), np.uint32(64)))
    stream.synchronize()

@pytest.mark.clause("STREAM-1")
def test_b_runs_after_it(device, stream):
    stream.synchronize()
""")
    t0 = time.monotonic()
    (tmp_path / "results").mkdir()
    r = certify.run_target("cuda/fake", tmp_path / "results", suite=folder, test_timeout_s=2, timeout_s=300)
    doc = results.load(r.results_file)
    assert outcomes(doc) == {"test_a_waits_for_an_endless_kernel": "fail", "test_b_runs_after_it": "pass"}
    assert doc["tests"][0]["message"].startswith("timeout: [call]") and "2 s limit" in doc["tests"][0]["message"]
    assert (r.status, r.ok) == ("ok", False) and doc["target"]["device"]
    assert time.monotonic() - t0 < 90


def test_a_process_that_writes_nothing_still_gets_a_results_file(tmp_path, mem_target):
    r, doc = run(tmp_path, "raise SystemExit(9)\n")  # the import of the test module ends the process
    assert r.status in ("crashed", "error") and not r.ok
    assert doc["target"]["name"] == NAME


def test_pytest_giving_up_is_an_error_not_ok(tmp_path, mem_target):
    r, doc = run(tmp_path, """
def test_without_a_clause_mark():
    pass
""")
    assert (r.status, r.ok) == ("error", False)
    assert "exited with code 4" in doc["run"]["message"]


def test_per_test_timeout_rerun_flaky_and_junit(tmp_path, mem_target):
    r, doc = run(tmp_path, """
ATTEMPTS = pathlib.Path(__file__).with_name("attempts")

@pytest.mark.clause("MEM-1")
def test_hangs():
    time.sleep(120)

@pytest.mark.clause("MEM-2")
def test_flaky():
    failed_before = ATTEMPTS.exists()
    ATTEMPTS.write_text("1")
    assert failed_before

@pytest.mark.clause("MEM-3")
def test_passes():
    pass
""", test_timeout_s=1)
    assert r.status == "ok" and not r.ok
    assert outcomes(doc) == {"test_hangs": "fail", "test_flaky": "flaky", "test_passes": "pass"}
    hang_message = next(t["message"] for t in doc["tests"] if "test_hangs" in t["id"])
    assert hang_message.startswith("failed again when re-run") and "Timeout" in hang_message
    assert r.seconds < 60
    junit = ET.parse(results.sibling(r.results_file, ".junit.xml")).getroot()
    cases = {case.get("name"): case for case in junit.iter("testcase")}
    assert set(cases) == {"test_hangs", "test_flaky", "test_passes"}
    assert "Timeout" in cases["test_hangs"].find("failure").get("message")
    assert cases["test_flaky"].find("flakyFailure") is not None and len(cases["test_passes"]) == 1  # properties
    assert junit.get("tests") == "3" and junit.get("failures") == "1"


@pytest.mark.parametrize("retries, want", [
    # retries: outcome and passes/tries of a test that fails twice then passes, and of one that always fails
    (0, {"test_third_try": ("fail", None), "test_always": ("fail", None)}),
    (1, {"test_third_try": ("fail", (0, 2)), "test_always": ("fail", (0, 2))}),
    (3, {"test_third_try": ("flaky", (1, 3)), "test_always": ("fail", (0, 4))}),
])
def test_retries_rerun_a_failing_test_until_it_passes_and_record_passes_of_tries(tmp_path, mem_target, retries, want):
    r, doc = run(tmp_path, """
TRIES = pathlib.Path(__file__).with_name("tries")

@pytest.mark.clause("MEM-1")
def test_third_try():
    TRIES.write_text(TRIES.read_text() + "x" if TRIES.exists() else "x")
    assert len(TRIES.read_text()) >= 3

@pytest.mark.clause("MEM-2")
def test_always():
    assert False

@pytest.mark.clause("MEM-3")
def test_passes():
    pass
""", retries=retries)
    by_name = {t["id"].split("::")[1]: t for t in doc["tests"]}
    got = {name: (t["outcome"], (t["passes"], t["tries"]) if "tries" in t else None) for name, t in by_name.items()}
    assert got == {**want, "test_passes": ("pass", None)}
    table = certify.summary_table([r])
    for name, (outcome, counts) in want.items():
        assert (f"::{name} {outcome}, passed {counts[0]} of {counts[1]} tries" in table) if counts else (name not in table)


PASSING = """
@pytest.mark.clause("MEM-1")
def test_passes(device):
    assert device.info.name
"""


def test_certificate_records_level_clauses_environment_and_hashes(tmp_path, mem_target):
    r, doc = run(tmp_path, PASSING)
    cert_path = results.sibling(r.results_file, ".cert.json")
    cert = json.loads(cert_path.read_text())
    assert cert["target"] == NAME and cert["proves"] == "partial"
    required = [cid for cid, c in spec.load_clauses().items() if c.required]
    assert [c["id"] for c in cert["required_clauses"]] == required
    states = {c["id"]: c["outcome"] for c in cert["required_clauses"]}
    assert states.pop("MEM-1") == "pass" and set(states.values()) == {"untested"}
    assert cert["environment"]["device"] == "in-memory test device"
    assert cert["environment"]["python"] == doc["target"]["python"]
    assert cert["suite"] == doc["suite"] and cert["suite"]["hash"] == spec.suite_hash()
    assert cert["results"] == {"file": r.results_file.name, "sha256": certify.sha256_file(r.results_file)}
    page = results.sibling(r.results_file, ".cert.md").read_text()
    assert page.startswith(f"# Certificate: {NAME}") and "| MEM-1 | pass |" in page and cert["results"]["sha256"] in page


def test_verify_valid_tampered_and_stale(tmp_path, mem_target, monkeypatch, capsys):
    r, doc = run(tmp_path, PASSING)
    cert_path = results.sibling(r.results_file, ".cert.json")
    assert main(["verify", str(cert_path)]) == certify.VERIFY_TAMPERED  # not the conformance suite's tests
    assert "1 not tests of the suite" in capsys.readouterr().err
    verified_against(monkeypatch, tmp_path / "suite")
    assert main(["certify", "--verify", str(cert_path)]) == certify.VERIFY_VALID
    assert "valid" in capsys.readouterr().out

    original = cert_path.read_text()
    forged = json.loads(original)
    forged["proves"] = "hardware"
    cert_path.write_text(json.dumps(forged))
    assert certify.verify(cert_path)[0] == certify.VERIFY_TAMPERED
    cert_path.write_text(original)

    monkeypatch.setattr(spec, "suite_hash", lambda: "0" * 16)
    assert main(["certify", "--verify", str(cert_path)]) == certify.VERIFY_STALE
    assert "stale" in capsys.readouterr().err
    monkeypatch.undo()
    verified_against(monkeypatch, tmp_path / "suite")

    doc["tests"][0]["duration"] += 1
    results.dump(doc, r.results_file)
    assert main(["certify", "--verify", str(cert_path)]) == certify.VERIFY_TAMPERED
    assert "changed since the certificate was written" in capsys.readouterr().err
    r.results_file.unlink()
    assert certify.verify(cert_path)[0] == certify.VERIFY_TAMPERED


def test_verify_of_something_that_is_not_a_certificate(tmp_path, capsys):
    bogus = tmp_path / "x.cert.json"
    bogus.write_text("[1, 2]")
    assert main(["certify", "--verify", str(bogus)]) == 2
    assert "x.cert.json: not a certificate" in capsys.readouterr().err


def test_certify_runs_targets_in_parallel_with_progress_and_a_summary(tmp_path, mem_target):
    calls = []

    def runner(name, results_dir, timeout_s, test_timeout_s, selection):
        assert selection.everything
        calls.append((name, timeout_s, test_timeout_s))
        return certify.TargetRun(name, results_dir / "x.json", "ok", {"pass": 2}, 0.5)

    stream = io.StringIO()
    runs = certify.certify([NAME, "webgpu/lavapipe"], tmp_path, jobs=2, timeout_s=9, test_timeout_s=3,
                           runner=runner, stream=stream)
    assert sorted(calls) == [(NAME, 9, 3), ("webgpu/lavapipe", 9, 3)]
    assert [r.target for r in runs] == [NAME, "webgpu/lavapipe"]
    text = stream.getvalue()
    assert "certifying 2 target(s) with 2 process(es)" in text and f"done   {NAME}: ok, 2 pass" in text
    table = certify.summary_table(runs)
    assert table.splitlines()[0].split() == ["target", "run", "result", "outcomes", "required", "xfail", "seconds"]


def test_hardware_targets_run_one_at_a_time_beside_simulated_ones(tmp_path):
    """They share the GPU (MEM-7 exhausts its memory); simulated targets still run in parallel with them."""
    lock = threading.Lock()
    running: set[str] = set()
    overlaps = []

    def runner(name, results_dir, timeout_s, test_timeout_s, selection):
        with lock:
            running.add(name)
            overlaps.append(frozenset(running))
        time.sleep(0.2)
        with lock:
            running.discard(name)
        return certify.TargetRun(name, results_dir / "x.json", "ok", {"pass": 1}, 0.2)

    names = ["cuda/nvidia", "vulkan/nvidia", "webgpu/nvidia", "vulkan/lavapipe"]
    certify.certify(names, tmp_path, jobs=4, runner=runner, stream=io.StringIO())
    hardware = {"cuda/nvidia", "vulkan/nvidia", "webgpu/nvidia"}
    assert all(len(seen & hardware) <= 1 for seen in overlaps), overlaps
    assert any("vulkan/lavapipe" in seen and seen & hardware for seen in overlaps), "simulated ran alone"


def test_the_last_round_is_split_into_shards_so_no_core_idles():
    sel = Selection(only=("MEM-*",))
    assert certify.plan(["a", "b", "c"], 2, sel) == [("a", sel), ("b", sel), ("c", Selection(("MEM-*",), (), "1/2")),
                                                     ("c", Selection(("MEM-*",), (), "2/2"))]
    assert certify.plan(["a", "b", "c", "d"], 2, sel) == [(n, sel) for n in "abcd"]  # even rounds: nothing split
    assert certify.plan(["a", "b"], 4, sel) == [("a", sel), ("b", sel)]  # fewer targets than cores
    mine = Selection(shard="1/3")
    assert certify.plan(["a", "b", "c"], 2, mine) == [(n, mine) for n in "abc"]  # a shard is not split again


def test_a_target_run_as_shards_merges_into_the_same_results_as_a_whole_run(tmp_path, mem_target):
    tests = "".join(f"""
@pytest.mark.clause("MEM-{i % 3 + 1}")
def test_{i}():
    assert {i} != 4
""" for i in range(7))
    folder = suite(tmp_path, tests)
    whole = certify.run_target(NAME, tmp_path, suite=folder)

    def runner(name, results_dir, timeout_s, test_timeout_s, selection):
        if name != NAME:
            return certify.TargetRun(name, results_dir / "x.json", "ok", {"pass": 1}, 0.1)
        return certify.run_target(name, results_dir, timeout_s, test_timeout_s, suite=folder, selection=selection)

    out = tmp_path / "sharded"
    stream = io.StringIO()
    runs = certify.certify(["a/x", "b/y", NAME], out, jobs=2, runner=runner, stream=stream)
    assert f"({NAME} as 2 shards)" in stream.getvalue() and f"done   {NAME} 2/2" in stream.getvalue()
    merged = runs[2]  # recorded in its run folder, and promoted: every test reported
    assert merged.results_file.parent.parent == out / "runs" and merged.summary == whole.summary
    assert (out / results.file_name(NAME)).read_bytes() == merged.results_file.read_bytes()
    doc, expected = results.load(merged.results_file), results.load(whole.results_file)
    assert outcomes(doc) == outcomes(expected) and outcomes(doc)["test_4"] == "fail"
    assert "selection" not in doc and doc["run"] == {"status": "ok", "message": ""}
    assert results.sibling(merged.results_file, ".junit.xml").is_file()
    log = next(merged.results_file.parent.glob(f"{certify.SHARDS_FOLDER}/*/.mem-test.log"))  # the failed shard's log stays
    assert not merged.ok and str(log) in merged.message

    skip = Selection(skip=("test_suite.py::test_4",))  # every test passes: nothing is left of the shards
    again = certify.certify(["a/x", "b/y", NAME], out, jobs=2, runner=runner, stream=io.StringIO(), selection=skip)[2]
    assert again.ok and outcomes(results.load(again.results_file)) == {k: v for k, v in outcomes(expected).items()
                                                                      if k != "test_4"}
    assert sorted(p.name for p in out.iterdir()) == [".ironaccel.lock", "mem-test.cert.json", "mem-test.cert.md",
                                                     "mem-test.json", "mem-test.junit.xml", "runs"]
    assert not (again.results_file.parent / certify.SHARDS_FOLDER).exists()


def test_shards_that_do_not_merge_are_an_error_not_a_results_file(tmp_path):
    doc = dict(passing_doc("webgpu/lavapipe"), selection={"only": [], "skip": [], "shard": "1/2"})
    runs = []
    for k in (1, 2):  # both say they are shard 1/2
        results.dump(doc, tmp_path / f"{k}.json")
        runs.append(certify.TargetRun("webgpu/lavapipe", tmp_path / f"{k}.json", "ok", doc["summary"], 1.0))
    run = certify.merge_shard_runs("webgpu/lavapipe", runs, tmp_path)
    assert (run.status, run.summary, run.ok, run.seconds) == ("error", None, False, 2.0)
    assert run.message.startswith("the shards do not merge: ") and "shard 1/2 is also" in run.message
    assert not (tmp_path / results.file_name("webgpu/lavapipe")).exists()


def test_shards_that_crash_before_collecting_are_kept_with_their_log_and_say_why(tmp_path, mem_target):
    """A selection's shards whose processes die before collecting a test are a crash, not a selection that
    matched nothing (the run folder and the logs used to be removed) nor shards that do not merge."""
    folder = suite(tmp_path, "def test_a():\n    pass\n")
    with (folder / "conftest.py").open("a") as conftest:
        conftest.write("raise ImportError('the suite does not import')\n")

    def runner(name, results_dir, timeout_s, test_timeout_s, selection):
        if name != NAME:
            return certify.TargetRun(name, results_dir / "x.json", "ok", {"pass": 1}, 0.1)
        return certify.run_target(name, results_dir, timeout_s, test_timeout_s, suite=folder, selection=selection)

    out = tmp_path / "out"
    run = certify.certify(["a/x", "b/y", NAME], out, jobs=2, runner=runner, stream=io.StringIO(),
                          selection=Selection(only=("test_suite.py::*",)))[2]
    assert run.status == "crashed" and "shard 1/2: crashed: exit code" in run.message
    assert "do not merge" not in run.message and "the suite does not import" in run.message
    assert run.results_file.parent.parent == out / "runs" and not (out / results.file_name(NAME)).exists()
    assert list(run.results_file.parent.glob(f"{certify.SHARDS_FOLDER}/*/.mem-test.log"))


def test_progress_line_counts_finished_tests_from_the_results_file(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"tests": [{"outcome": "pass"}, {"outcome": "not-run"}, {"outcome": "fail"}]}))
    progress = certify.Progress(3, io.StringIO())
    progress.running.update({"a/one": path, "b/two": tmp_path / "not-yet.json"})
    line = progress.line()
    assert "0/3 targets done" in line and "a/one 2/3" in line and "b/two starting" in line


def test_a_run_with_tests_left_not_run_is_not_ok():
    assert not certify.TargetRun("x/y", Path("x.json"), "ok", {"pass": 3, "not-run": 1}).ok
    assert certify.TargetRun("x/y", Path("x.json"), "ok", {"pass": 3, "not-supported": 1, "flaky": 1}).ok


def relabel(doc: dict, target: str, **evidence) -> dict:
    """``doc`` renamed to ``target`` and claiming hardware, its device and driver evidence left as recorded
    (but for ``evidence``'s fields): issue 31's forgery."""
    forged = json.loads(json.dumps(doc))
    backend, driver = target.split("/")
    forged["target"].update(name=target, backend=backend, driver=driver, simulated=False)
    forged["target"]["evidence"].update(evidence)
    forged["suite"]["parts"] = spec.current([target]).parts(target)
    forged["suite"]["hash"] = forged["suite"]["parts"]["suite"]
    return forged


FORGERIES = [(sim, hw, edit) for sim, hw in (("cuda/fake", "cuda/nvidia"), ("vulkan/lavapipe", "vulkan/nvidia"),
                                            ("webgpu/lavapipe", "webgpu/nvidia"), ("opengl/llvmpipe", "opengl/nvidia"))
             for edit in ({}, {"simulated": False}, {"simulated": False, "driver": "NVIDIA"})]


@pytest.mark.parametrize("simulated, hardware, edit", FORGERIES)
def test_a_relabelled_simulated_run_is_tampered_and_never_hardware(tmp_path, capsys, simulated, hardware, edit):
    """Issue 31 finding 2: a simulated run's file renamed to a hardware target with ``simulated: false`` (and
    its evidence's own flags flipped too) neither certifies nor verifies as hardware, nor makes production."""
    from ironaccel.cts import judge, status

    genuine = tmp_path / results.file_name(simulated)
    results.dump(passing_doc(simulated), genuine)
    forged = tmp_path / results.file_name(hardware)
    results.dump(relabel(results.load(genuine), hardware, **edit), forged)
    cert = json.loads(certify.write_certificate(forged).read_text())
    assert cert["proves"] != "hardware"
    assert main(["certify", "--verify", str(results.sibling(forged, results.CERTIFICATE_SUFFIX))]) \
        == certify.VERIFY_TAMPERED
    assert "claims hardware, but" in capsys.readouterr().err
    text = status.render(status.load_results(tmp_path), spec.load_clauses(), status.registry_infos(),
                         spec.current(), targets.TARGETS, judge.definitions())
    assert f"| **{hardware.split('/')[0]}** | simulated |" in text
    assert f"| {hardware} | simulated (its file claims hardware, tampered: " in text


@pytest.mark.parametrize("hardware", ["cuda/nvidia", "vulkan/nvidia", "webgpu/nvidia", "opengl/nvidia"])
def test_a_hardware_run_with_its_evidence_is_hardware(tmp_path, capsys, hardware):
    path = tmp_path / results.file_name(hardware)
    results.dump(passing_doc(hardware, whole_suite=True), path)
    assert json.loads(certify.write_certificate(path).read_text())["proves"] == "hardware"
    assert main(["certify", "--verify", str(results.sibling(path, results.CERTIFICATE_SUFFIX))]) \
        == certify.VERIFY_VALID
    doc = results.load(path)
    del doc["target"]["evidence"]  # a file from before the evidence: proves no hardware, but is not tampered
    results.dump(doc, path)
    assert json.loads(certify.write_certificate(path).read_text())["proves"] == "simulated"
    assert main(["certify", "--verify", str(results.sibling(path, results.CERTIFICATE_SUFFIX))]) \
        == certify.VERIFY_VALID


def test_a_run_records_its_driver_library(monkeypatch):
    """The results writer's evidence: the mapped libraries that are the backend's drivers, with their hashes."""
    lib = next(p for p in results.loaded_libraries() if "libpython" in p or "/lib-dynload/" in p or "libc.so" in p)
    evidence = results.driver_evidence(SimpleNamespace(driver="x", simulated=False), [r"libc\.so|libpython|lib-dynload"])
    assert evidence["driver"] == "x" and evidence["simulated"] is False
    assert lib in [e["path"] for e in evidence["libraries"]]
    assert all(len(e["sha256"]) == 64 for e in evidence["libraries"])


MAPS = """\
55d0c0a00000-55d0c0a21000 r--p 00000000 fd:01 131090                     /usr/bin/python3.12
7f1c2a000000-7f1c2a021000 rw-p 00000000 00:00 0 \n\
7f1c2a200000-7f1c2a228000 r--p 00000000 fd:01 136433                     /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c2a228000-7f1c2a3bd000 r-xp 00028000 fd:01 136433                     /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c2a400000-7f1c2a401000 r--p 00000000 fd:01 140001                     /home/u/.sockets/state.bin
7f1c2a500000-7f1c2a501000 r-xp 00000000 fd:01 140002                     /opt/my drivers/libcuda.so.1 (deleted)
7ffd1c9f3000-7ffd1c9f5000 r-xp 00000000 00:00 0                          [vdso]
"""


def test_loaded_libraries_are_the_mapped_files_named_like_shared_libraries(monkeypatch):
    """Each mapped file whose name holds ".so" once, with spaces in its path kept; a folder named ".so..." or a
    mapping of no file is none."""
    monkeypatch.setattr(results, "open", lambda *a, **k: io.StringIO(MAPS), raising=False)
    assert results.loaded_libraries() == ["/opt/my drivers/libcuda.so.1 (deleted)",
                                          "/usr/lib/x86_64-linux-gnu/libc.so.6"]


def test_certificates_and_status_say_the_same_thing(tmp_path):
    """The H200 case: each certificate states what its target proves; STATUS.md combines them."""
    from ironaccel.cts import judge, status

    for name in ("webgpu/nvidia", "webgpu/lavapipe"):
        results.dump(passing_doc(name), tmp_path / results.file_name(name))
    proves = {}
    for name in ("webgpu/nvidia", "webgpu/lavapipe"):
        cert = json.loads(certify.write_certificate(tmp_path / results.file_name(name)).read_text())
        proves[name] = cert["proves"]
    assert proves == {"webgpu/nvidia": "hardware", "webgpu/lavapipe": "simulated"}
    text = status.render(status.load_results(tmp_path), spec.load_clauses(), status.registry_infos(),
                         spec.current(), targets.TARGETS, judge.definitions())
    assert "| **webgpu** | production |" in text
    for name, word in proves.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| {name} | "))
        assert row.endswith(f"| {word} |")


def test_every_level_is_defined_in_spec_md(tmp_path):
    from ironaccel.cts import judge

    defined = judge.definitions()
    assert [name for kind, name in defined if kind == "target"] == list(judge.TARGET_LEVELS)
    assert [name for kind, name in defined if kind == "backend"] == list(judge.LEVELS)
    partial = tmp_path / "SPEC.md"
    partial.write_text("**hardware** (target) proven\n")
    with pytest.raises(ValueError, match="does not define target level simulated"):
        judge.definitions(partial)


def test_verify_rejects_duplicate_keys_and_an_edit_that_also_changes_the_suite_hash(tmp_path, mem_target, capsys):
    r, doc = run(tmp_path, PASSING)
    cert_path = results.sibling(r.results_file, ".cert.json")
    original = cert_path.read_text()
    cert_path.write_text(original.replace('"proves": "partial"', '"proves": "partial", "proves": "hardware"'))
    assert main(["certify", "--verify", str(cert_path)]) == certify.VERIFY_TAMPERED
    assert "duplicate key 'proves'" in capsys.readouterr().err

    forged = json.loads(original)
    forged["proves"] = "hardware"
    forged["suite"]["hash"] = "f" * 16  # would read as stale if the suite were checked first
    cert_path.write_text(json.dumps(forged))
    assert main(["certify", "--verify", str(cert_path)]) == certify.VERIFY_TAMPERED
    assert "suite" in capsys.readouterr().err


def _package(tmp_path: Path) -> Path:
    """A submission package of passing webgpu/nvidia and webgpu/lavapipe runs, from a dirty git checkout."""
    import subprocess

    from ironaccel.cts import submission

    res = tmp_path / "results"
    res.mkdir()
    for name in ("webgpu/nvidia", "webgpu/lavapipe"):
        results.dump(passing_doc(name, whole_suite=True), res / results.file_name(name))
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    (repo / "a.txt").write_text("two\n")
    return submission.package(res, tmp_path / "pkg", root=repo)


def test_package_round_trip_and_tampering(tmp_path, capsys, monkeypatch):
    import shutil

    pkg = _package(tmp_path)
    manifest = json.loads((pkg / "MANIFEST.json").read_text())
    assert manifest["backends"] == {"webgpu": "production"}
    assert manifest["targets"] == {"webgpu/lavapipe": "simulated", "webgpu/nvidia": "hardware"}
    assert manifest["git"]["dirty"] is True and len(manifest["git"]["commit"]) == 40
    assert "+two" in (pkg / "git.diff").read_text()
    assert {"results/webgpu-nvidia.json", "results/webgpu-nvidia.junit.xml", "results/webgpu-nvidia.cert.json",
            "results/webgpu-nvidia.cert.md", "environment.json", "git.diff"} <= set(manifest["files"])
    assert main(["certify", "--verify", str(pkg)]) == certify.VERIFY_VALID
    assert "valid: 2 results files, webgpu production" in capsys.readouterr().out

    def tampered(change) -> str:
        copy = tmp_path / f"copy{len(list(tmp_path.glob('copy*')))}"
        shutil.copytree(pkg, copy)
        change(copy)
        assert main(["certify", "--verify", str(copy)]) == certify.VERIFY_TAMPERED
        return capsys.readouterr().err

    def edit_manifest(copy, **changes):
        m = json.loads((copy / "MANIFEST.json").read_text())
        m.update(changes)
        (copy / "MANIFEST.json").write_text(json.dumps(m))

    def forge_results(copy):  # the results file edited, its JUnit remade, both sha256 updated in the manifest
        path = copy / "results" / "webgpu-nvidia.json"
        doc = results.load(path)
        doc["tests"][0]["duration"] = 9.0
        results.dump(doc, path)
        junit = results.sibling(path, ".junit.xml")
        junit.write_text(certify.junit_xml(doc))
        m = json.loads((copy / "MANIFEST.json").read_text())
        for f in (path, junit):
            m["files"][f"results/{f.name}"] = certify.sha256_file(f)
        (copy / "MANIFEST.json").write_text(json.dumps(m))

    assert "changed since the package was made" in tampered(
        lambda c: (c / "results" / "webgpu-nvidia.junit.xml").write_text("<testsuite/>"))
    assert "missing from the package: results/webgpu-nvidia.cert.md" in tampered(
        lambda c: (c / "results" / "webgpu-nvidia.cert.md").unlink())
    assert "not in the manifest: extra.json" in tampered(lambda c: (c / "extra.json").write_text("{}"))
    assert "changed since the certificate was written" in tampered(forge_results)
    assert "backends" in tampered(lambda c: edit_manifest(c, backends={"webgpu": "simulated"}))
    assert "targets" in tampered(lambda c: edit_manifest(c, targets={"webgpu/lavapipe": "hardware",
                                                                     "webgpu/nvidia": "hardware"}))

    monkeypatch.setattr(spec, "suite_hash", lambda: "0" * 16)
    assert main(["certify", "--verify", str(pkg)]) == certify.VERIFY_STALE
    assert "the suite changed" in capsys.readouterr().err
    monkeypatch.undo()

    (tmp_path / "empty").mkdir()
    assert main(["certify", "--verify", str(tmp_path / "empty")]) == 2
    assert "MANIFEST.json" in capsys.readouterr().err


def test_package_refuses_an_existing_folder_and_an_empty_results_folder(tmp_path, capsys):
    (tmp_path / "res").mkdir()
    assert main(["certify", "--package", str(tmp_path / "out"), "--results", str(tmp_path / "res")]) == 2
    assert "no results files to package" in capsys.readouterr().err
    assert main(["certify", "--package", str(tmp_path / "res"), "--results", str(tmp_path / "res")]) == 2
    assert "already exists" in capsys.readouterr().err
