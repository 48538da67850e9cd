"""Evidence is never lost (issue 24): certify refuses what it cannot run, runs are records promoted only when
complete, Ctrl-C and SIGTERM stop cleanly, one run per results folder at a time.

Targets are "mem/test" over the in-memory device (tests/membackend.py); ``cli_script`` runs the ``ironaccel``
command in a child process with mem registered and the suite folder the test wrote.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ironaccel.cts import certify, results, runs, targets
from ironaccel.cts.cli import main
from ironaccel.cts.testing.documents import verified_against
from membackend import CONFTEST, TESTS_DIR, registered

ROOT = Path(__file__).resolve().parents[1]
NAME = "mem/test"

PASSING = """
import pytest

@pytest.mark.clause("MEM-1")
def test_a_passes():
    pass

@pytest.mark.clause("MEM-2")
def test_b_passes():
    pass
"""

SLOW = """
import time
import pytest

@pytest.mark.clause("MEM-1")
def test_a_passes():
    pass

@pytest.mark.clause("MEM-2")
def test_b_sleeps():
    time.sleep(600)
"""


def write_suite(folder: Path, tests: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_suite.py").write_text(tests)
    return folder


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


def calls_recorded(monkeypatch) -> list[str]:
    """certify's runner replaced by one that records the targets it was asked to run and runs none."""
    called: list[str] = []

    def runner(name, *args, **kwargs):
        called.append(name)
        raise AssertionError("certify ran a target it should have refused")

    monkeypatch.setattr(certify, "run_target", runner)
    return called


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (the lock file aside: it holds no evidence) and its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != runs.LOCK_FILE} if folder.exists() else {}


def committed_copy(tmp_path: Path, target: str) -> Path:
    """A results folder holding the checkout's committed files of ``target``."""
    folder = tmp_path / "committed"
    folder.mkdir(parents=True)
    stem = results.file_name(target).removesuffix(".json")
    for path in (ROOT / "results").glob(stem + ".*"):
        shutil.copyfile(path, folder / path.name)
    return folder


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

def run_folders(out: Path) -> list[Path]:
    return sorted(p for p in (out / runs.RUNS).iterdir()) if (out / runs.RUNS).is_dir() else []


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

CLI_SCRIPT = """
import functools, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from membackend import registered
from ironaccel.cts import certify, cli
certify.run_target = functools.partial(certify.run_target, suite=Path({suite!r}))
with registered():
    sys.exit(cli.main(sys.argv[1:]))
"""


def start_cli(suite: Path, *args: str) -> subprocess.Popen:
    """``ironaccel ARGS`` in a child process with mem registered and certify running ``suite``."""
    script = CLI_SCRIPT.format(tests=str(TESTS_DIR), suite=str(suite))
    return subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


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


# -- 5. bench never overwrites the committed measurement with a smoke run ------------------------------------

def test_bench_quick_never_writes_into_the_committed_results_and_defaults_to_a_scratch_folder(tmp_path, monkeypatch,
                                                                                            capsys):
    """Issue 24: `ironaccel bench --quick` overwrote the committed 61-round files with a 9-round smoke run."""
    from ironaccel.cts.bench import runner

    committed = ROOT / "benchmarks" / "results"
    before = files(committed)
    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("bench measured before refusing"))
    assert main(["bench", "--backend", "mem", "--quick", "--out", str(committed)]) == 2
    assert "never writes into" in capsys.readouterr().err
    written: list[Path] = []
    monkeypatch.setattr(runner, "run", lambda *a, **k: {"simulated": True})
    monkeypatch.setattr(runner, "write", lambda report, out: written.append(out) or [])
    assert main(["bench", "--backend", "mem", "--quick"]) == 0
    assert written and committed.resolve() not in (written[0].resolve(), *written[0].resolve().parents)
    assert files(committed) == before


# -- 6. every bad input a clear error, exit 2, nothing written ------------------------------------------------

def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _huge_sparse(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(1 << 40)


def _edit_json(**changes):
    def edit(path: Path) -> None:
        doc = json.loads(path.read_text())
        for dotted, value in changes.items():
            where = doc
            *parents, key = dotted.split(".")
            for p in parents:
                where = where[p]
            where[key] = value
        path.write_text(json.dumps(doc))
    return edit


BAD_RESULTS_FILES = {
    "a FIFO": (lambda p: (p.unlink(), _fifo(p)), "not a regular file"),
    "/dev/zero": (lambda p: (p.unlink(), p.symlink_to("/dev/zero")), "not a regular file"),
    "a huge sparse file": (lambda p: (p.unlink(), _huge_sparse(p)), "more than"),
    '"schema": true': (_edit_json(schema=True), "schema must be 1"),
    "packages a list": (_edit_json(**{"target.packages": ["numpy"]}), "target.packages"),
    "duplicate keys": (lambda p: p.write_text('{"target": 1, ' + p.read_text().lstrip()[1:]), "duplicate key"),
}


def committed_fake(tmp_path: Path) -> Path:
    return committed_copy(tmp_path, "cuda/fake")


@pytest.mark.parametrize("case", sorted(BAD_RESULTS_FILES))
@pytest.mark.timeout(60)
def test_status_and_package_on_a_hostile_results_file_exit_2_and_write_nothing(tmp_path, capsys, case):
    """Issue 31 (7): whole-file reads on huge sparse files and /dev/zero, a FIFO hanging status; wrong types."""
    change, message = BAD_RESULTS_FILES[case]
    folder = committed_fake(tmp_path)
    change(folder / "cuda-fake.json")
    out = tmp_path / "STATUS.md"
    assert main(["status", "--results", str(folder), "--output", str(out)]) == 2
    assert message in capsys.readouterr().err and not out.exists()
    assert main(["certify", "--package", str(tmp_path / "pkg"), "--results", str(folder)]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "pkg").exists()


@pytest.mark.parametrize("where", ["no/S.md", "a-file/S.md"])
def test_status_into_a_missing_folder_exits_2(tmp_path, capsys, where):
    """Issue 24: `status --output /no/such/dir/S.md` ended in a traceback."""
    (tmp_path / "a-file").write_text("not a folder")
    assert main(["status", "--results", str(ROOT / "results"), "--output", str(tmp_path / where)]) == 2
    assert "cannot write" in capsys.readouterr().err and not (tmp_path / "no").exists()


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


@pytest.mark.parametrize("case", ["a FIFO", "/dev/zero", "a huge sparse file", "duplicate keys"])
@pytest.mark.timeout(60)
def test_verify_of_a_hostile_certificate_or_results_file_exits_2_or_4(tmp_path, capsys, case):
    """Not a certificate (2) when the certificate cannot be read; tampered (4) when a certificate has a
    duplicate key or names a results file that is no regular file (issue 29)."""
    change, message = BAD_RESULTS_FILES[case]
    for name in ("cuda-fake.cert.json", "cuda-fake.json")[:1 if case == "duplicate keys" else 2]:
        folder = committed_copy(tmp_path / name, "cuda/fake")
        change(folder / name)
        code = 2 if name.endswith(".cert.json") and case != "duplicate keys" else certify.VERIFY_TAMPERED
        assert main(["certify", "--verify", str(folder / "cuda-fake.cert.json")]) == code, name
        assert message in capsys.readouterr().err


def test_a_certificate_of_another_suite_version_is_stale_and_says_so(tmp_path, capsys):
    folder = committed_fake(tmp_path)
    _edit_json(**{"suite.version": "0.0.1"})(folder / "cuda-fake.json")
    certify.write_certificate(folder / "cuda-fake.json")
    assert main(["certify", "--verify", str(folder / "cuda-fake.cert.json")]) == certify.VERIFY_STALE
    assert "ironaccel 0.0.1" in capsys.readouterr().err


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    from ironaccel.cts import submission

    tmp = tmp_path_factory.mktemp("pkg")
    return submission.package(committed_copy(tmp, "cuda/fake"), tmp / "pkg")


def _manifest(**changes):
    return lambda pkg: _edit_json(**changes)(pkg / "MANIFEST.json")


def _name_outside(pkg: Path) -> None:
    m = json.loads((pkg / "MANIFEST.json").read_text())
    m["files"]["../outside.json"] = m["files"].pop("environment.json")
    (pkg / "MANIFEST.json").write_text(json.dumps(m))


BAD_PACKAGES = {  # change -> (exit code, message)
    '"package": true': (_manifest(package=True), 2, "package must be the number 2"),
    "files a list": (_manifest(files=["results/cuda-fake.json"]), 2, "files must map"),
    "targets a list": (_manifest(targets=["cuda/fake"]), 2, "targets must map"),
    "a path outside": (_name_outside, 2, "not a path inside the package"),
    "an absolute path": (_manifest(**{"files./etc/passwd": "0" * 64}), 2, "not a path inside the package"),
    "git.commit not a commit": (_manifest(**{"git.commit": "HEAD"}), 2, "git.commit"),
    "git.dirty a string": (_manifest(**{"git.dirty": "no"}), 2, "git.dirty"),
    "a symlinked manifest": (lambda p: (p.joinpath("M").write_bytes(p.joinpath("MANIFEST.json").read_bytes()),
                                        p.joinpath("MANIFEST.json").unlink(),
                                        p.joinpath("MANIFEST.json").symlink_to("M")), 2, "symbolic link"),
    "a missing file": (lambda p: (p / "environment.json").unlink(), 4, "missing from the package"),
    "an extra file": (lambda p: (p / "extra.txt").write_text("x"), 4, "not in the manifest"),
    "a symlinked file": (lambda p: ((p / "environment.json").rename(p / "e"),
                                    (p / "environment.json").symlink_to("e")), 4, "symbolic links"),
    "a FIFO": (lambda p: _fifo(p / "results" / "extra.json"), 4, "FIFOs"),
    "git.dirty flipped": (lambda p: _edit_json(**{"git.dirty": not json.loads(
        (p / "MANIFEST.json").read_text())["git"]["dirty"]})(p / "MANIFEST.json"), 4, "git.dirty and git.diff"),
}


@pytest.mark.parametrize("case", sorted(BAD_PACKAGES))
@pytest.mark.timeout(60)
def test_verify_of_a_hostile_package(tmp_path, capsys, package, case):
    """Issue 24 and 31 (7): missing, extra and symlinked files, paths outside, wrong types, FIFOs, git fields."""
    change, code, message = BAD_PACKAGES[case]
    copy = tmp_path / "copy"
    shutil.copytree(package, copy, symlinks=True)
    change(copy)
    assert main(["certify", "--verify", str(copy)]) == code
    assert message in capsys.readouterr().err


# -- 8. build outputs are ignored ------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["ironaccel/_fast.cpython-311-x86_64-linux-gnu.so", "ironaccel/_fast.abi3.so",
                                  "fakes/cuda/x.o", "results/runs/20261201T000000Z-cuda-fake-abc123/RUN.json",
                                  "results/.ironaccel.lock", "ironaccel/__pycache__/api.cpython-311.pyc",
                                  ".mypy_cache/x", "build/lib/x.py", "results/.cuda-fake.json.123.abcdef.tmp",
                                  ".pkg.123.partial/MANIFEST.json"])
def test_build_outputs_and_run_records_are_git_ignored(path):
    """Issue 24: every package said "dirty" because the in-tree `ironaccel/_fast*.so` was not ignored."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    assert subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT).returncode == 0, path


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
    _edit_json(finished="2099-01-01T00:00:00Z")(new_dir / "cuda-fake.json")
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


# -- 7. STATUS.md is a function of the committed results alone ---------------------------------------------------

def _status(tmp_path: Path, *args: str) -> str:
    out = tmp_path / f"S{len(list(tmp_path.glob('S*')))}.md"
    assert main(["status", "--results", str(ROOT / "results"), "--output", str(out), *args]) == 0
    return out.read_text()


def test_status_is_the_same_without_the_opencl_plugin(tmp_path, monkeypatch):
    """Issue 24: without the OpenCL plugin its committed results read STALE. A fresh clone with only the
    library installed is simulated by hiding every plugin's entry points."""
    import importlib

    backends = importlib.import_module("ironaccel.backends")
    if "opencl" not in backends.registry():
        pytest.skip("the OpenCL plugin is not installed here")

    def forget() -> None:
        backends.registry.cache_clear()
        backends.get.cache_clear()
        targets.registered_drivers.cache_clear()

    with_plugin = _status(tmp_path)
    real = backends.entry_points
    monkeypatch.setattr(backends, "entry_points",
                        lambda group: [] if group.startswith("ironaccel.") else real(group=group))
    forget()
    try:
        assert "opencl" not in backends.registry()
        without = _status(tmp_path)
    finally:
        monkeypatch.undo()
        forget()
    assert without == with_plugin
    assert "**opencl**" in without and "is not here to check" not in without


def test_a_backend_installed_without_results_is_listed_only_with_installed(tmp_path):
    """Issue 24: with an extra plugin a row appeared and `status --check` failed."""
    plain = _status(tmp_path)
    with registered():
        assert _status(tmp_path) == plain
        assert "**mem**" in _status(tmp_path, "--installed")


# -- one command per verb (issue 27, step 2) ---------------------------------------------------------------------

def test_verify_and_package_are_verbs_and_the_old_spellings_still_work(tmp_path, capsys):
    folder = committed_fake(tmp_path)
    cert = folder / "cuda-fake.cert.json"
    code = main(["verify", str(cert)])
    assert code in (certify.VERIFY_VALID, certify.VERIFY_STALE)
    assert main(["certify", "--verify", str(cert)]) == code
    assert "the new name: `ironaccel verify" in capsys.readouterr().err
    assert main(["package", str(tmp_path / "pkg"), "--results", str(folder)]) == 0
    assert main(["verify", str(tmp_path / "pkg")]) in (certify.VERIFY_VALID, certify.VERIFY_STALE)
    assert main(["certify", "--package", str(tmp_path / "pkg2"), "--results", str(folder)]) == 0
    assert "the new name: `ironaccel package" in capsys.readouterr().err
    assert main(["package", str(tmp_path / "no" / "pkg"), "--results", str(folder)]) == 2
    assert "no such folder" in capsys.readouterr().err and not (tmp_path / "no").exists()
