"""Kills at every write point and at random times lose nothing (issue 24 (9)): every committed file is the
old complete one or the new complete one, and runs into one folder at once lose nothing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ironaccel.cts import certify, results, runs
from ironaccel.cts.testing.documents import verified_against
from membackend import TESTS_DIR
from memruns import (CLI_SCRIPT, NAME, PASSING, ROOT, committed_copy, edit_json, files, run_folders, start_cli,
                     write_suite)


# -- 9. kills at every write point and at random times lose nothing --------------------------------------------

def _complete(path: Path, versions: list[bytes]) -> bool:
    return not path.exists() and b"" in versions or path.exists() and path.read_bytes() in versions


def _in_child(work, kill_at: str = "", delay_s: float | None = None) -> int:
    """Run ``work()`` in a forked child (with ``IRONACCEL_KILL_AT=kill_at``), SIGKILLed after ``delay_s`` when
    given; its wait status."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            if kill_at:
                os.environ[runs.KILL_AT] = kill_at
            work()
        finally:
            os._exit(0)
    if delay_s is not None:
        time.sleep(delay_s)
        with __import__("contextlib").suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    """Two complete runs of cuda/fake that differ (the committed one and one a test later), as run files."""
    tmp = tmp_path_factory.mktemp("runs")
    old = committed_copy(tmp / "old", "cuda/fake") / "cuda-fake.json"
    new_dir = committed_copy(tmp / "new", "cuda/fake")
    edit_json(finished="2099-01-01T00:00:00Z")(new_dir / "cuda-fake.json")
    certify.write_junit_and_certificate(new_dir / "cuda-fake.json")
    return old, new_dir / "cuda-fake.json"


def test_sigkill_at_every_write_point_and_at_random_times_leaves_old_or_new_files(tmp_path, monkeypatch, two_runs):
    """Issue 24 (9): 200 kills; every committed file is the old complete one or the new complete one. What
    does not write (hashing the suite, asking git) is computed once, so 200 kills take seconds."""
    import random

    from ironaccel.cts import judge, spec, status, submission

    current, suite, clauses, words = spec.current(["cuda/fake"]), spec.suite_hash(), spec.load_clauses(), judge.definitions()
    monkeypatch.setattr(spec, "current", lambda names=None: current)
    monkeypatch.setattr(spec, "suite_hash", lambda: suite)
    monkeypatch.setattr(spec, "load_clauses", lambda spec_md=None: clauses)
    monkeypatch.setattr(judge, "definitions", lambda spec_md=None: words)
    monkeypatch.setattr(submission, "_git", lambda root, *args: None)

    old_run, new_run = two_runs
    committed = tmp_path / "results"
    shutil.copytree(old_run.parent, committed)
    names = [results.sibling(old_run, s).name for s in runs.TARGET_FILES]
    versions = {n: [(old_run.parent / n).read_bytes(), (new_run.parent / n).read_bytes()] for n in names}
    status_md, pkg = tmp_path / "STATUS.md", tmp_path / "pkg"
    assert status.command(new_run.parent, status_md) == 0
    status_versions = [b"", status_md.read_bytes()]  # none yet, or the new results' (written after promotion)
    status_md.unlink()

    def work() -> None:
        runs.promote(new_run, committed)
        status.command(committed, status_md)
        submission.package(committed, pkg)

    def check(label: str) -> None:
        for n in names:
            assert (committed / n).read_bytes() in versions[n], f"{label}: {n} half-written or lost"
        assert _complete(status_md, status_versions), f"{label}: STATUS.md half-written"
        if pkg.exists():
            assert submission.verify(pkg)[0] != certify.VERIFY_TAMPERED, f"{label}: a half-written package"
        # what a kill leaves (a temporary file, a package folder not yet renamed) is hidden and git-ignored
        assert all(p.name.startswith(".") for p in (*tmp_path.iterdir(), *committed.iterdir())
                   if p.name not in (*names, "STATUS.md", "pkg", "results")), label

    def reset() -> None:
        for leftover in (*tmp_path.glob(".pkg.*"), *committed.glob(".*.tmp")):
            shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
        for n in names:
            shutil.copyfile(old_run.parent / n, committed / n)
        status_md.unlink(missing_ok=True)
        shutil.rmtree(pkg, ignore_errors=True)

    kills = 0
    for point in runs.WRITE_POINTS:  # each named write point, 8 times
        for _ in range(8):
            reset()
            st = _in_child(work, kill_at=point)
            assert os.WIFSIGNALED(st) and os.WTERMSIG(st) == signal.SIGKILL, point
            kills += 1
            check(point)
    rng = random.Random(24)
    t = time.monotonic()
    _in_child(work)
    whole_s = time.monotonic() - t
    while kills < 200:  # and at random times within the whole sequence
        reset()
        st = _in_child(work, delay_s=rng.uniform(0, whole_s))
        kills += os.WIFSIGNALED(st)
        check(f"random kill {kills}")
    assert kills == 200


@pytest.mark.parametrize("n, wait", [(2, False), (4, True)])
def test_concurrent_runs_into_one_folder_lose_nothing(tmp_path, monkeypatch, n, wait):
    """Issue 24: two runs into one folder printed each other's counts, both exited 0 and one's results were lost.
    Now each run either refuses at once (exit 2, naming the holder) or, with --wait, runs after the other; every
    run that ran has its own record, and the committed files are one whole run's."""
    good = write_suite(tmp_path / "good", PASSING)
    verified_against(monkeypatch, good)
    out = tmp_path / "results"
    procs = [start_cli(good, "certify", "--target", NAME, "--results", str(out), *(["--wait"] if wait else []))
             for _ in range(n)]
    ended = [(p.wait(timeout=600), p.stdout.read(), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _, _ in ended)
    assert set(codes) <= {0, 2} and codes[0] == 0, ended
    if wait:
        assert codes == [0] * n
    for code, _, err in ended:
        if code == 2:
            assert "is in use by pid" in err and "certify" in err
    records = [json.loads((f / runs.RUN_RECORD).read_text()) for f in run_folders(out)]
    assert len(records) == codes.count(0) and all(r["promoted"] for r in records)
    assert not list((out / runs.RUNS).glob(".*")), "a run folder left half-made"
    committed = (out / "mem-test.json").read_bytes()
    assert committed in [(f / "mem-test.json").read_bytes() for f in run_folders(out)]
    assert certify.verify(out / "mem-test.cert.json")[0] != certify.VERIFY_TAMPERED


def test_sigkill_of_certify_at_a_named_write_point(tmp_path):
    """The hook reaches a real certify: killed while promoting its results file, the old files stay whole."""
    out = tmp_path / "results"
    first = start_cli(write_suite(tmp_path / "good", PASSING), "certify", "--target", NAME, "--results", str(out))
    assert first.wait(timeout=300) == 0
    before = {k: v for k, v in files(out).items() if not k.startswith(runs.RUNS)}
    other = write_suite(tmp_path / "other", PASSING.replace("test_b_passes", "test_c_passes"))
    script = CLI_SCRIPT.format(tests=str(TESTS_DIR), suite=str(other))
    proc = subprocess.run([sys.executable, "-c", script, "certify", "--target", NAME, "--results", str(out)],
                          env={**os.environ, "PYTHONPATH": str(ROOT), runs.KILL_AT: "junit"}, capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    after = {k: v for k, v in files(out).items() if not k.startswith(runs.RUNS)}
    assert after["mem-test.junit.xml"] == before["mem-test.junit.xml"]  # killed writing it: the old one
    assert after["mem-test.json"] != before["mem-test.json"]  # promoted just before: the new one, whole
    results.load(out / "mem-test.json")
