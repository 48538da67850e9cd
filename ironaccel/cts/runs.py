"""Runs are records: where a certify run writes, when its files may replace the committed ones, and the lock
that keeps two runs out of one results folder.

Each target's run writes into a run folder of its own, ``<results>/runs/<time>-<backend>-<driver>-<id>``,
made under a hidden temporary name (``.<name>.partial``) and renamed when the run has ended, whatever way it
ended. The per-target files STATUS.md reads (``<results>/<backend>-<driver>.json`` and its JUnit and
certificate) are replaced only by ``promote``, file by file through a temporary name and an atomic rename,
and only from a run that is ``complete`` (``promotable`` says why not). So a crash, a kill, Ctrl-C or a second
run leaves every committed file either the old complete one or the new complete one.

``atomic_write`` is the one way a committed file is written (results, JUnit, certificates, STATUS.md,
package manifests). ``IRONACCEL_KILL_AT=<point>`` makes the process kill itself (SIGKILL) half-way through
the write named ``point`` — the hook the fault-injection test uses to prove it (``WRITE_POINTS``).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from . import results
from .results import CERTIFICATE_SUFFIX, JUNIT_SUFFIX, SIGNATURE_SUFFIX, Outcome, RunStatus

RUNS = "runs"  # the run folders' folder inside a results folder
RUN_RECORD = "RUN.json"  # in each run folder: the command, how it ended, whether it was promoted and why
LOCK_FILE = ".ironaccel.lock"
TARGET_FILES = (".json", JUNIT_SUFFIX, CERTIFICATE_SUFFIX, ".cert.md")  # promoted in this order
KILL_AT = "IRONACCEL_KILL_AT"
WRITE_POINTS = ("results", "junit", "certificate", "status", "package")


class Busy(Exception):
    """Another run holds the results folder's lock (the message names its pid and command)."""


class Interrupted(Exception):
    """The run was stopped by Ctrl-C or SIGTERM; ``str()`` is the one-line summary."""


def _die_if_asked(point: str) -> None:
    if os.environ.get(KILL_AT) == point:
        os.kill(os.getpid(), signal.SIGKILL)


def atomic_write(path: Path, data: str | bytes, point: str) -> None:
    """Write ``path`` whole or not at all: into a temporary file beside it, flushed to disk, then renamed over
    it. ``point``: which of ``WRITE_POINTS`` this is (the kill hook's name)."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(3)}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(raw[:len(raw) // 2])
            f.flush()
            _die_if_asked(point)
            f.write(raw[len(raw) // 2:])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def new_run_folder(results_dir: Path, target: str) -> Path:
    """A new, empty, still hidden run folder for ``target`` (``finish`` gives it its name)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    folder = Path(results_dir) / RUNS / f".{stamp}-{target.replace('/', '-')}-{secrets.token_hex(3)}.partial"
    folder.mkdir(parents=True)
    return folder


def final_name(folder: Path) -> Path:
    return folder.with_name(folder.name.removeprefix(".").removesuffix(".partial"))


def complete(doc: dict[str, Any]) -> str:
    """"" when the run finished with every selected test reported (ok or failed), else why not."""
    if doc["run"]["status"] != RunStatus.OK:
        return f"the run {doc['run']['status']}" + (f" ({doc['run']['message']})" if doc["run"]["message"] else "")
    if not doc["tests"]:
        return "the run has no tests"
    left = doc["summary"].get(Outcome.NOT_RUN, 0)
    return f"{left} test(s) not run" if left else ""


def _is_hardware(doc: dict[str, Any]) -> bool:
    from .targets import registered_drivers

    known = registered_drivers().get(doc["target"]["name"])
    return not doc["target"]["simulated"] and (known is None or not known.simulated)


def promotable(doc: dict[str, Any], committed: Path, forced: bool = False) -> str:
    """"" when the run ``doc`` may replace the per-target file ``committed``, else why not: it is not
    ``complete``; it ran part of the suite and the committed file the whole; it was forced (``--force``) and
    would replace a hardware result."""
    why = complete(doc)
    if why or not committed.exists():
        return why
    try:
        old = results.load(committed)
    except ValueError:
        return ""  # a committed file that is not a results file is no evidence to keep
    if "selection" in doc and "selection" not in old:
        return f"it ran part of the suite and {committed.name} holds a whole-suite run"
    if forced and _is_hardware(old):
        return f"it was forced (--force) and {committed.name} holds a hardware result"
    return ""


def committed_hardware(results_dir: Path, target: str) -> bool:
    """Does ``results_dir`` hold a hardware result of ``target`` (one a run here must not lower)?"""
    path = Path(results_dir) / results.file_name(target)
    try:
        return _is_hardware(results.load(path))
    except ValueError:
        return False


def promote(run_file: Path, results_dir: Path) -> None:
    """Copy a run's results file, JUnit and certificate over the per-target files of ``results_dir``, each
    atomically (the results file first: a certificate never names a results file that is not there); then its
    signature, or, for an unsigned run, remove the one there (it signs the files just replaced)."""
    points = dict(zip(TARGET_FILES, ("results", "junit", "certificate", "certificate")))
    for suffix in TARGET_FILES:
        source = results.sibling(run_file, suffix)
        atomic_write(results.sibling(Path(results_dir) / run_file.name, suffix), source.read_bytes(), points[suffix])
    signature = results.sibling(run_file, SIGNATURE_SUFFIX)
    promoted = results.sibling(Path(results_dir) / run_file.name, SIGNATURE_SUFFIX)
    if signature.is_file():
        atomic_write(promoted, signature.read_bytes(), "certificate")
    else:
        promoted.unlink(missing_ok=True)


def finish(folder: Path, record: dict[str, Any]) -> Path:
    """Write the run folder's ``RUN.json`` and give the folder its final name; return it."""
    (folder / RUN_RECORD).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    final = final_name(folder)
    os.rename(folder, final)
    return final


def command_line() -> str:
    return " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python"


HOLDER_NAMING_S = 2.0  # how long a lock held but not yet named (or being given back) is waited for


@contextmanager
def lock(results_dir: Path, wait: bool = False) -> Iterator[None]:
    """Hold ``results_dir``'s lock (an fcntl lock on its ``.ironaccel.lock``, which names the holder's pid and
    command) for the ``with`` block. Busy when another process holds it, unless ``wait``: then wait for it."""
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(results_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        unnamed_until = time.monotonic() + HOLDER_NAMING_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
            if holder or time.monotonic() > unnamed_until:
                raise Busy(f"{results_dir} is in use by {holder or 'another process'}; wait for it (--wait) or use "
                           "another --results folder")
            time.sleep(0.01)  # the holder has the lock but has not named itself yet, or is giving the lock back
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} ({command_line()})\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing releases the lock


EXIT_INTERRUPTED = 130  # as a shell reports a process ended by SIGINT


@contextmanager
def interrupts() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt in the main thread for the ``with`` block, even where the
    process was started with SIGINT ignored (a shell's background job)."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
