"""Runs of the "mem" suite for the evidence tests (issue 24: evidence is never lost): a suite folder a test
writes, certify's runner replaced, the ``ironaccel`` command in a child process, a snapshot of a results
folder, the checkout's committed files of a target, and results files made hostile."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ironaccel.cts import certify, results, runs
from membackend import CONFTEST, TESTS_DIR

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


def run_folders(out: Path) -> list[Path]:
    return sorted(p for p in (out / runs.RUNS).iterdir()) if (out / runs.RUNS).is_dir() else []


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



def fifo(path: Path) -> None:
    os.mkfifo(path)


def huge_sparse(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(1 << 40)


def edit_json(**changes):
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
    "a FIFO": (lambda p: (p.unlink(), fifo(p)), "not a regular file"),
    "/dev/zero": (lambda p: (p.unlink(), p.symlink_to("/dev/zero")), "not a regular file"),
    "a huge sparse file": (lambda p: (p.unlink(), huge_sparse(p)), "more than"),
    '"schema": true': (edit_json(schema=True), "schema must be 1"),
    "packages a list": (edit_json(**{"target.packages": ["numpy"]}), "target.packages"),
    "duplicate keys": (lambda p: p.write_text('{"target": 1, ' + p.read_text().lstrip()[1:]), "duplicate key"),
}


def committed_fake(tmp_path: Path) -> Path:
    return committed_copy(tmp_path, "cuda/fake")

