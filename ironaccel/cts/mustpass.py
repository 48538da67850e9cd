"""The suite's test list (Khronos calls it the mustpass list): every test id with the clause ids it cites,
as pytest collects the conformance suite, in a child process (the suite's modules stay out of the caller).

The list is the same for every target: a test a target cannot run is not-supported there, never absent (the
plugin records every selected test, and nothing in collection depends on the target). So it is collected once
per suite hash, and ``ironaccel verify`` holds each results file to it: every test the run's selection picks,
exactly once, with the clauses the suite gives it, and no other.

Loaded as a pytest plugin (``-p ironaccel.cts.mustpass``, by ``tests_of_suite`` only) it writes the collected
list to the file ``$IRONACCEL_MUSTPASS_OUT`` names.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

OUT_ENV = "IRONACCEL_MUSTPASS_OUT"


def tests_of_suite(suite: Path | None = None) -> dict[str, tuple[str, ...]]:
    """Test id -> the clause ids it cites, of every test of ``suite`` (default: the installed conformance
    suite); RuntimeError saying what pytest said when the suite does not collect."""
    from . import spec

    return _collect((suite or spec.conformance_dir()).resolve(), spec.suite_hash())


@functools.lru_cache(maxsize=4)
def _collect(suite: Path, suite_hash: str) -> dict[str, tuple[str, ...]]:
    """``suite_hash``: the cache's key, so an edit of the suite in this process is collected afresh."""
    with tempfile.TemporaryDirectory(prefix="ironaccel-mustpass-") as tmp:
        out = Path(tmp) / "tests.json"
        env = {key: value for key, value in os.environ.items() if key != "IRONACCEL_TARGET"}  # the plugin inert
        env[OUT_ENV] = str(out)
        cmd = [sys.executable, "-m", "pytest", str(suite), "-p", "ironaccel.cts.pytest_plugin", "-p", __name__,
               "-p", "no:cacheprovider", "--rootdir", str(suite), "--collect-only", "-q"]
        proc = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=600)
        if not out.is_file():
            raise RuntimeError(f"collecting the suite {suite} failed (pytest exit {proc.returncode}): "
                               + " / ".join(proc.stdout.strip().splitlines()[-5:]))
        return {tid: tuple(clauses) for tid, clauses in json.loads(out.read_text(encoding="utf-8"))}


def pytest_collection_finish(session: Any) -> None:
    """Write the collected tests, as ``[[test id, [clause ids]], ...]``, to ``$IRONACCEL_MUSTPASS_OUT``."""
    out = os.environ.get(OUT_ENV)
    if not out:
        return
    from .pytest_plugin import test_id

    tests = []
    for item in session.items:
        mark = item.get_closest_marker("clause")
        tests.append([test_id(item), list(mark.args) if mark else []])
    Path(out).write_text(json.dumps(tests), encoding="utf-8")
