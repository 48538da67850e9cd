"""The suite's test list (Khronos calls it the mustpass list): every test id with the clause ids it cites,
as pytest collects the conformance suite, in a child process (the suite's modules stay out of the caller).

The list is the same for every target: a test a target cannot run is not-supported there, never absent (the
plugin records every selected test, and nothing in collection depends on the target). So it is collected once
per suite hash (kept in ironaccel's cache folder, ``cache.cache_dir()``/mustpass, so a loop of ``verify``
calls collects once), and ``ironaccel verify`` holds each results file to it: every test the run's selection
picks, exactly once, with the clauses the suite gives it, and no other.

Loaded as a pytest plugin (``-p ironaccel.cts.mustpass``, by ``tests_of_suite`` only) it writes the collected
list to the file ``$IRONACCEL_MUSTPASS_OUT`` names.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
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
    """``suite_hash`` (with the folder): the caches' key, so an edited suite is collected afresh."""
    from ..cache import cache_dir

    kept = cache_dir() / "mustpass" / f"{suite_hash}-{hashlib.sha256(str(suite).encode()).hexdigest()[:12]}.json"
    try:
        return {tid: tuple(clauses) for tid, clauses in json.loads(kept.read_text(encoding="utf-8"))}
    except (OSError, ValueError, TypeError):  # none kept yet, or not a list of pairs: collect
        pass
    tests = _run_collection(suite)
    with contextlib.suppress(OSError):  # a read-only cache folder only costs the next call a collection
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = kept.with_name(f".{kept.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(sorted([tid, list(clauses)] for tid, clauses in tests.items())),
                           encoding="utf-8")
        partial.replace(kept)
    return tests


def _run_collection(suite: Path) -> dict[str, tuple[str, ...]]:
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
