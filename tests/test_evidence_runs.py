"""Evidence is never lost (issue 24): certify refuses what it cannot run, runs are records promoted only when
complete, Ctrl-C and SIGTERM stop cleanly, one run per results folder at a time.

Targets are "mem/test" over the in-memory device (tests/membackend.py); ``start_cli`` (tests/memruns.py) runs
the ``ironaccel`` command in a child process with mem registered and the suite folder the test wrote.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from ironaccel.cts import certify, results, runs, targets
from ironaccel.cts.cli import main
from ironaccel.cts.testing.documents import verified_against
from membackend import registered
from memruns import (BAD_RESULTS_FILES, NAME, PASSING, ROOT, SLOW, calls_recorded, committed_copy, files,
                     run_folders, start_cli, write_suite)


@pytest.fixture
def mem_suite(tmp_path, monkeypatch):
    """mem registered here, and certify's runner running the given suite: call it with the tests' text."""
    def use(tests: str = PASSING) -> Path:
        suite = write_suite(tmp_path / f"suite{len(list(tmp_path.glob('suite*')))}", tests)
        monkeypatch.setattr(certify, "run_target", functools.partial(certify.run_target, suite=suite))
        verified_against(monkeypatch, suite)
        return suite

    with registered():
        yield use


# -- 1. certify refuses what it cannot run ------------------------------------------------------------------

@pytest.mark.parametrize("target", ["cuda/nvidia", "vulkan/nvidia"])
def test_certify_refuses_a_hardware_target_this_machine_cannot_run_and_keeps_its_committed_result(
        tmp_path, monkeypatch, capsys, target):
    """Issue 24: `certify --target cuda/nvidia` on a machine with no GPU replaced the committed H200 results."""
    why = targets.get(target).missing()
    if why is None:
        pytest.skip(f"this machine can run {target}")
    folder = committed_copy(tmp_path, target)
    before = files(folder)
    called = calls_recorded(monkeypatch)
    assert main(["certify", "--target", target, "--results", str(folder)]) == 2
    err = capsys.readouterr().err
    assert why in err and target in err
    assert called == [] and files(folder) == before
    assert main(["certify", "--target", target, "--results", str(folder), "--force"]) == 2, \
        "--force must not lower a committed hardware result either"
    assert "hardware result" in capsys.readouterr().err
    assert called == [] and files(folder) == before


def test_certify_refuses_what_doctor_says_cannot_run_and_force_records_itself(tmp_path, monkeypatch, capsys,
                                                                              mem_suite):
    mem_suite()
    targets.register("mem", lambda: [targets.Target("mem", "test", True, recognise=lambda info: True,
                                                    requirements=lambda: "no widget: apt-get install widget")])
    out = tmp_path / "results"
    assert main(["certify", "--target", NAME, "--results", str(out)]) == 2
    assert "no widget: apt-get install widget" in capsys.readouterr().err
    assert not out.exists()
    argv = ["certify", "--target", NAME, "--results", str(out), "--force"]
    monkeypatch.setattr(sys, "argv", ["ironaccel", *argv])
    assert main(argv) == 0
    doc = results.load(out / "mem-test.json")
    assert doc["forced"]["missing"] == "no widget: apt-get install widget"
    assert "--force" in doc["forced"]["by"]
    assert certify.verify(out / "mem-test.cert.json")[0] != certify.VERIFY_TAMPERED  # its certificate covers it


def test_certify_refuses_a_broken_plugin_target(tmp_path, monkeypatch, capsys):
    """A backend whose entry point does not load: doctor's answer, exit 2, nothing run."""
    from ironaccel.backends import register, unregister

    register("mem", "no_such_module_here:Backend")
    targets.register("mem", lambda: [targets.Target("mem", "test", True)])
    called = calls_recorded(monkeypatch)
    try:
        assert main(["certify", "--target", NAME, "--results", str(tmp_path / "r")]) == 2
    finally:
        unregister("mem")
        targets.unregister("mem")
    assert "mem backend does not load" in capsys.readouterr().err
    assert called == [] and not (tmp_path / "r").exists()


def test_an_unknown_target_gets_did_you_mean(tmp_path, monkeypatch, capsys):
    called = calls_recorded(monkeypatch)
    assert main(["certify", "--target", "cuda/fak", "--results", str(tmp_path / "r")]) == 2
    assert "did you mean cuda/fake" in capsys.readouterr().err
    assert called == [] and not (tmp_path / "r").exists()


def test_a_selection_that_matches_nothing_exits_2_and_writes_nothing(tmp_path, capsys, mem_suite):
    """Issue 24: `--only KERNEL-99` wrote an error results file and certificate and exited 1."""
    mem_suite()
    out = tmp_path / "results"
    assert main(["certify", "--target", NAME, "--results", str(out), "--only", "KERNEL-99"]) == 2
    assert "matches no test" in capsys.readouterr().err
    assert files(out) == {}


# -- 2. runs are records, promoted only when complete ---------------------------------------------------------

def test_a_complete_run_is_promoted_and_kept_as_a_record(tmp_path, mem_suite):
    mem_suite()
    out = tmp_path / "results"
    assert main(["certify", "--target", NAME, "--results", str(out)]) == 0
    (folder,) = run_folders(out)
    assert folder.name.endswith(tuple("0123456789abcdef")) and "-mem-test-" in folder.name
    record = json.loads((folder / runs.RUN_RECORD).read_text())
    assert record["promoted"] and record["status"] == "ok"
    for suffix in runs.TARGET_FILES:
        assert (out / ("mem-test" + suffix)).read_bytes() == (folder / ("mem-test" + suffix)).read_bytes()
    assert certify.verify(out / "mem-test.cert.json")[0] == certify.VERIFY_VALID


@pytest.mark.parametrize("tests, why", [
    ("import os\nos._exit(3)\n", "crashed"),
    ("import pytest\n@pytest.mark.clause('MEM-1')\ndef test_a():\n    pass\n"
     "def test_b(\n", "error"),
])
def test_an_incomplete_run_never_replaces_the_committed_files(tmp_path, mem_suite, tests, why):
    out = tmp_path / "results"
    mem_suite()
    assert main(["certify", "--target", NAME, "--results", str(out)]) == 0
    before = {k: v for k, v in files(out).items() if not k.startswith(runs.RUNS)}
    mem_suite(tests)
    main(["certify", "--target", NAME, "--results", str(out)])
    assert {k: v for k, v in files(out).items() if not k.startswith(runs.RUNS)} == before
    kept = [json.loads((f / runs.RUN_RECORD).read_text()) for f in run_folders(out)]
    assert sorted(r["promoted"] for r in kept) == [False, True]


def test_a_partial_suite_run_does_not_replace_a_whole_suite_result(tmp_path, mem_suite):
    out = tmp_path / "results"
    mem_suite()
    assert main(["certify", "--target", NAME, "--results", str(out)]) == 0
    whole = (out / "mem-test.json").read_bytes()
    assert main(["certify", "--target", NAME, "--results", str(out), "--only", "MEM-1"]) == 0
    assert (out / "mem-test.json").read_bytes() == whole
    reasons = [json.loads((f / runs.RUN_RECORD).read_text())["not_promoted_because"] for f in run_folders(out)]
    assert any("part of the suite" in r for r in reasons)


# -- 3. Ctrl-C and SIGTERM -----------------------------------------------------------------------------------

def wait_for(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def live_processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_stop_the_children_summarise_and_replace_nothing(tmp_path, sig):
    """Issue 24: Ctrl-C during certify gave a raw traceback and replaced complete results with an error file."""
    out = tmp_path / "results"
    good = write_suite(tmp_path / "good", PASSING)
    first = start_cli(good, "certify", "--target", NAME, "--results", str(out))
    assert first.wait(timeout=300) == 0, first.stderr.read()
    before = {k: v for k, v in files(out).items() if not k.startswith(runs.RUNS)}
    slow = write_suite(tmp_path / "slow", SLOW)
    proc = start_cli(slow, "certify", "--target", NAME, "--results", str(out))

    def sleeping() -> bool:
        partial = [f for f in (out / runs.RUNS).glob(".*.partial")]
        try:
            return bool(partial) and "test_b_sleeps" in (partial[0] / ".mem-test.watch.json").read_text()
        except OSError:
            return False

    wait_for(sleeping)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == runs.EXIT_INTERRUPTED, stderr
    assert "Traceback" not in stderr
    (summary,) = [line for line in stderr.splitlines() if "interrupted:" in line]
    assert "0 target(s) finished" in summary and "1 interrupted (mem/test)" in summary and str(out) in summary
    assert {k: v for k, v in files(out).items() if not k.startswith(runs.RUNS)} == before
    assert live_processes_mentioning(str(slow)) == []
    records = [json.loads((f / runs.RUN_RECORD).read_text()) for f in run_folders(out)]
    assert sorted(r["promoted"] for r in records) == [False, True]
    assert not list((out / runs.RUNS).glob(".*")), "the interrupted run folder got its final name"


# -- 4. one run per results folder ---------------------------------------------------------------------------

def test_a_second_run_into_the_same_folder_refuses_naming_the_first(tmp_path, monkeypatch, capsys, mem_suite):
    """Issue 24: two certify runs into one folder lost one run's results without a word."""
    mem_suite()
    out = tmp_path / "results"
    with runs.lock(out):
        assert main(["certify", "--target", NAME, "--results", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"pid {os.getpid()}" in err and "--wait" in err
    assert files(out) == {}


@pytest.mark.parametrize("names_itself", [True, False])
def test_a_holder_caught_between_locking_and_naming_itself(tmp_path, names_itself):
    """CI saw a refusal that named "another process": the second run read the lock file in the moment after the
    first took the lock and before it wrote its pid. A holder that names itself soon is named; one that gives the
    lock back unnamed (a run ending) lets the next take it."""
    out = tmp_path / "results"
    out.mkdir()
    fd = os.open(out / runs.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)

    def later() -> None:
        time.sleep(0.3)
        if names_itself:
            os.pwrite(fd, b"pid 4242 (certify)\n", 0)
        else:
            os.close(fd)

    threading.Thread(target=later).start()
    if names_itself:
        with pytest.raises(runs.Busy, match="in use by pid 4242"):
            with runs.lock(out):
                pass
        os.close(fd)
    else:
        with runs.lock(out):
            assert (out / runs.LOCK_FILE).read_text().startswith(f"pid {os.getpid()} ")


def test_wait_waits_for_the_first_run(tmp_path, mem_suite):
    mem_suite()
    out = tmp_path / "results"
    held = threading.Event()

    def hold() -> None:
        with runs.lock(out):
            held.set()
            time.sleep(1.0)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    t0 = time.monotonic()
    assert main(["certify", "--target", NAME, "--results", str(out), "--wait"]) == 0
    assert time.monotonic() - t0 >= 0.9
    holder.join()


# -- 6. a corrupt baseline is refused before anything runs --------------------------------------------------

@pytest.mark.parametrize("case", sorted(BAD_RESULTS_FILES))
@pytest.mark.timeout(60)
def test_a_corrupt_baseline_exits_2_before_anything_runs(tmp_path, monkeypatch, capsys, mem_suite, case):
    """Issue 24: `--baseline` with a corrupt results file ended in a traceback (after the run)."""
    change, message = BAD_RESULTS_FILES[case]
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    shutil.copyfile(ROOT / "results" / "cuda-fake.json", baseline / "mem-test.json")
    change(baseline / "mem-test.json")
    with registered():
        called = calls_recorded(monkeypatch)
        assert main(["certify", "--target", NAME, "--results", str(tmp_path / "r"), "--baseline", str(baseline)]) == 2
    assert message in capsys.readouterr().err
    assert called == [] and not (tmp_path / "r").exists()
