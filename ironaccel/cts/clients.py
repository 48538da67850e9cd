"""``ironaccel clients``: other projects' CUDA test suites, run on the fake and on hardware -> CLIENTS.md.

Our conformance suite proves what we thought of; a client suite (numba-cuda's, cuda.core's, cuda.bindings',
CuPy's) proves what real code needs. Each (client, target) runs the whole suite with pytest in its own child process,
spread over pytest-xdist workers (``-n auto``, as a CUDA project's CI runs it), with a per-test and a total
time limit; ``--sample N`` runs one test in N, for a quick look, never the headline figure; ``--shard K/N`` runs
the K-th of N parts of the suite, and ``--join`` joins the N parts' results files into the whole suite's (a suite too
long for one machine's time limit, run in parts: issue 26's CuPy selection on the fake, in 10-minute device calls).
This module is also the pytest plugin of that child (``-p ironaccel.cts.clients``): it
records every test's outcome to a JSON-lines file as the run goes, so a run killed at its time limit still
leaves the outcomes it reached, and it provides the little harness numba-cuda's repository-only conftest
gives its suite (the wheel ships the tests, not the conftest).

Results files: ``<dir>/<client>--<target with / as ->.json``; CLIENTS.md is generated from them only. Runs are
records, as certify's are (``runs``): each run writes into a run folder of its own, ``<dir>/runs/<time>-<client>--
<target>-<id>/`` (its results file and ``RUN.json``), under the folder's lock, and replaces ``<dir>``'s file only
when it finished with tests reported (``kept_because``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..cache import cache_dir
from . import client_machine, runs

#: Comparison targets: cuda/fake and cuda/nvidia are ironaccel targets; numba/cudasim is numba's own
#: CUDA simulator (NUMBA_ENABLE_CUDASIM=1), which only numba-cuda has.
FAKE, NVIDIA, CUDASIM = "cuda/fake", "cuda/nvidia", "numba/cudasim"
TARGETS = (FAKE, NVIDIA, CUDASIM)
OUTCOMES = ("pass", "fail", "error", "skip")
TEST_TIMEOUT_S = 60.0
TOTAL_TIMEOUT_S = 3600.0
WORKERS = "auto"  # pytest-xdist's -n; "0": one process, no xdist
MAX_WORKER_RESTARTS = 1000  # workers ended by a test's time limit or a crash, replaced; then xdist stops
SOURCE_ENV = "IRONACCEL_CLIENTS_SOURCE_{}"  # + CUDA_CORE / CUDA_BINDINGS / CUPY: where its tests/ folder is


@dataclass(frozen=True)
class Client:
    """A test suite of another project: how to find its tests and which targets it runs on."""

    name: str
    distribution: str  # the installed distribution whose version the results record
    targets: tuple[str, ...]
    pyargs: str = ""  # tests shipped inside an installed package (numba-cuda)
    #: numba-cuda's tests live in a package whose parent folder holds a package named ``cuda``, which
    #: shadows cuda.bindings when pytest prepends it to sys.path, and its pytest.ini considers namespace
    #: packages; cuda-python's tests need their folder on sys.path and their plain module names
    import_mode: str = "prepend"
    ini: str = ""
    how_to_get: str = ""  # for a suite fetched at run time: how to get its tests folder
    #: the share of the tests that pass on cuda/nvidia that must pass on the fake too (issue 25: 99% for
    #: numba-cuda and cuda.core, 95% for cuda.bindings; issue 26: 90% for CuPy); 0: none set
    fake_goal: float = 0.0
    #: folders of a fetched suite to run, relative to its source folder (empty: all of it)
    paths: tuple[str, ...] = ()
    #: variables a run on the fake adds to the environment, each with its reason in CLIENTS
    fake_env: tuple[tuple[str, str], ...] = ()
    #: (distribution, the word its skip messages name it by, case aside) for each package the suite's tests look
    #: for: a results file records which are installed (``client_machine``), and a difference between two
    #: machines' runs whose message names one that differs is put down to it. numpy, which every suite needs and
    #: machines have at different versions (the H200 carries 2.3 for numba), is recorded with no word: too many
    #: messages name it to put a difference down to it
    optional: tuple[tuple[str, str], ...] = ()

    def source_env(self) -> str:
        return SOURCE_ENV.format(self.name.upper().replace("-", "_"))


#: CuPy's on-disk kernel cache on the fake: a folder of its own. The cache is keyed by source, options and NVRTC
#: version, not by driver, so a cubin a run on the real driver cached (machine code, no PTX) would fail to load on
#: the fake (CUDA_ERROR_NO_BINARY_FOR_GPU), as numba-cuda's CuPy interop tests did on the H200's host, where both
#: targets' runs go at once.
FAKE_CUPY_CACHE = ("CUPY_CACHE_DIR", str(cache_dir() / "cupy-fake"))

CLIENTS = {
    c.name: c for c in (
        # numba-cuda's test_dispatcher_cpointer_arguments computes 16 elements of arrays of 10 int32s: it reads
        # and writes 24 bytes past 40-byte allocations, which hardware allows (those bytes are mapped and no
        # allocation starts before the next 256-byte boundary) and the fake's exact memcheck reports, after
        # which the sticky error failed every later test of the worker. So its run on the fake lets kernels
        # touch that padding (IRONACCEL_FAKE_MEMCHECK=padded), as the H200 does.
        Client("numba-cuda", "numba-cuda", (FAKE, NVIDIA, CUDASIM), pyargs="numba.cuda.tests",
               import_mode="importlib", ini="consider_namespace_packages = true\n", fake_goal=0.99,
               fake_env=(("IRONACCEL_FAKE_MEMCHECK", "padded"), FAKE_CUPY_CACHE),
               optional=(("numpy", ""), ("cupy-cuda13x", "cupy"), ("torch", "torch"), ("ml_dtypes", "ml_dtypes"),
                         ("filecheck", "filecheck"), ("cffi", "cffi"), ("nvidia-nvjitlink", "nvjitlink"))),
        # cuda.core's green-context tests split the device's SMs into groups of 8, sm_90's partition size; the
        # fake reports one SM per host thread that runs blocks, two on a 2-core machine, where no group fits.
        # So its run on the fake has 16 (IRONACCEL_FAKE_CUDA_THREADS), what it reports on the H200's 16-core
        # host: two 8-SM groups, as the H200 splits.
        Client("cuda-core", "cuda-core", (FAKE, NVIDIA), how_to_get=(
            "a checkout of https://github.com/NVIDIA/cuda-python at the commit of cuda-core {version} "
            "(its tests need the checkout's cuda_python_test_helpers/ beside cuda_core/): "
            "--source cuda-core=CHECKOUT/cuda_core/tests"), fake_goal=0.99,
               fake_env=(("IRONACCEL_FAKE_CUDA_THREADS", "16"),),
               optional=(("numpy", ""), ("cupy-cuda13x", "cupy"), ("torch", "torch"), ("numba-cuda", "numba"),
                         ("ml_dtypes", "ml_dtypes"), ("pyglet", "pyglet"), ("Cython", "cython"),
                         ("nvidia-cufile", "cufile"))),
        Client("cuda-bindings", "cuda-bindings", (FAKE, NVIDIA), how_to_get=(
            "a checkout of https://github.com/NVIDIA/cuda-python at tag v{version} "
            "(with its cuda_python_test_helpers/): --source cuda-bindings=CHECKOUT/cuda_bindings/tests"), fake_goal=0.95),
        # CuPy links the CUDA runtime (issue 26). It runs with its default accelerators (CUB) on both targets:
        # its prebuilt CUB/Thrust kernels carry sm_90 machine code, which the H200 runs, and PTX for compute_120
        # only, which the fake runs in the machine code's place (fakes/cuda/README.md says why). Tests that need
        # cuBLAS/cuRAND/cuFFT/cudadevrt fail where those host libraries are not installed.
        # CuPy's kernel cache is a folder of its own on the fake (FAKE_CUPY_CACHE). Issue 26's selection: the
        # folders below.
        Client("cupy", "cupy-cuda13x", (FAKE, NVIDIA), how_to_get=(
            "a checkout of https://github.com/cupy/cupy at tag v{version}: --source cupy=CHECKOUT/tests"),
            fake_goal=0.90, fake_env=(FAKE_CUPY_CACHE,),
            paths=tuple(f"cupy_tests/{d}_tests" for d in ("core", "creation", "manipulation", "math", "sorting",
                                                           "logic", "indexing", "statistics"))),
        # The PyTorch smoke (issue 26, ironaccel/cts/torch_smoke.py): what needs machine code PyTorch's wheel or
        # cuBLAS lacks PTX for is a skip naming that cause on the fake. PyTorch's on-disk kernel cache is off on
        # the fake: a jiterator cubin cached by a run without the toolchain shims carries no PTX.
        Client("pytorch", "torch", (FAKE, NVIDIA), pyargs="ironaccel.cts.torch_smoke",
               fake_env=(("USE_PYTORCH_KERNEL_CACHE", "0"),)),
    )
}


class ClientError(ValueError):
    """A client run that cannot start (unknown name, missing tests folder); the CLI prints it."""


def version_of(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return ""


def source_commit(source: Path | None) -> str:
    """The git commit of a fetched client's checkout (its pin), "" when it is not a git checkout: a folder of
    tests copied into another repository (ignored there, or untracked) is not pinned by that repository's commit."""
    if source is None:
        return ""

    def git(*args: str) -> str:
        proc = subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    return git("rev-parse", "HEAD") if git("ls-files", "--", ".") else ""


def results_path(results: Path, client: str, target: str) -> Path:
    return results / f"{client}--{target.replace('/', '-')}.json"


@dataclass(frozen=True)
class Shard:
    """Part ``k`` of ``n`` of a suite, chosen by a crc32 of each test's id: the same test is in the same part
    whichever other tests a target collects (by position, numba's simulator and the fake shared only 64 of ~400
    sampled tests). A ``--sample N`` is part 1 of N."""

    k: int
    n: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        k, sep, n = text.partition("/")
        if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
            raise ValueError(f"a shard is K/N with 1 <= K <= N, not {text!r}")
        return cls(int(k), int(n))

    def holds(self, test_id: str) -> bool:
        return zlib.crc32(test_id.encode()) % self.n == self.k - 1

    def __str__(self) -> str:
        return f"{self.k}/{self.n}"


WHOLE = Shard(1, 1)


# -- the child process ------------------------------------------------------------------------------------

#: where a CUDA toolkit is by convention; suites find its headers only through CUDA_HOME or CUDA_PATH
#: (cuda.core's latch-kernel tests skip with "need CUDA header" otherwise, and pass on the H200 and the fake)
CONVENTIONAL_CUDA_HOME = Path("/usr/local/cuda")


def child_env(target: str, test_timeout_s: float, client: Client | None = None) -> dict[str, str]:
    """The environment of a client run: the fake as libcuda.so.1, the real driver, or numba's simulator;
    CUDA_HOME names the conventional toolkit when neither it nor CUDA_PATH is set, on every target alike."""
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    if not env.get("CUDA_HOME") and not env.get("CUDA_PATH") and (CONVENTIONAL_CUDA_HOME / "include").is_dir():
        env["CUDA_HOME"] = str(CONVENTIONAL_CUDA_HOME)
    if target == FAKE:
        from .. import fakes

        env = fakes.child_env(env)
        # a hung kernel ends as an error, not a stall; after the test's own limit, which ends its worker first
        # (client_timeouts), so that the watchdog's sticky error does not fail that worker's later tests
        env["IRONACCEL_FAKE_WATCHDOG_S"] = f"{2 * test_timeout_s:g}"
        env.update(client.fake_env if client else ())
    elif target == CUDASIM:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    return env


def child_command(client: Client, source: Path | None, record: Path, ini: Path, test_timeout_s: float,
                   sample: int, select: str, workers: str = WORKERS, shard: Shard = WHOLE) -> list[str]:
    """The child's pytest command. A fetched suite's rootdir is its own tests folder: with the ini's folder as
    rootdir, conftest files outside it applied to every test (cuda-bindings' cudla/conftest.py replaced the
    ``ctx`` fixture of all its tests with one that makes no context)."""
    rootdir = ini.parent if source is None else source
    cmd = [sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", str(rootdir), "-q",
           "-p", "no:cacheprovider", "-p", "ironaccel.cts.clients", f"--clients-record={record}",
           f"--timeout={test_timeout_s:g}", f"--import-mode={client.import_mode}", "--continue-on-collection-errors"]
    if workers != "0":  # a test past its limit ends its worker, which xdist replaces (client_timeouts)
        cmd += ["-n", workers, "-p", "ironaccel.cts.client_timeouts", f"--max-worker-restart={MAX_WORKER_RESTARTS}"]
    if sample > 1:
        cmd.append(f"--clients-sample={sample}")
    if shard != WHOLE:
        cmd.append(f"--clients-shard={shard}")
    if select:
        cmd += ["-k", select]
    if client.pyargs:
        cmd += ["--pyargs", client.pyargs]
    else:
        cmd += [str(source / p) for p in client.paths] or [str(source)]
    return cmd


def run_client(client: Client, target: str, results: Path, source: Path | None = None,
               test_timeout_s: float = TEST_TIMEOUT_S, total_timeout_s: float = TOTAL_TIMEOUT_S,
               sample: int = 1, select: str = "", workers: str = WORKERS, shard: Shard = WHOLE) -> dict:
    """Runs one client's suite (or one shard of it) on one target in a child process and writes its results file."""
    if target not in client.targets:
        raise ClientError(f"{client.name} does not run on {target} (its targets: {', '.join(client.targets)})")
    if not client.pyargs and (source is None or not source.is_dir()):
        raise ClientError(f"{client.name}: its tests are fetched at run time, not shipped: pass --source DIR or "
                          f"set {client.source_env()} ({client.how_to_get.format(version=version_of(client.distribution))})")
    with runs.lock(results):
        folder = runs.new_run_folder(results, f"{client.name}--{target}")
        committed = results_path(results, client.name, target)
        try:
            doc = _run_child(client, target, source, test_timeout_s, total_timeout_s, sample, select, workers, shard)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (``runs.interrupts``): the child is stopped; recorded, kept
            _settle(folder, committed, None, "interrupted (Ctrl-C or SIGTERM) before the run ended")
            raise
        _settle(folder, committed, doc, kept_because(doc, committed))
    return doc


def kept_because(doc: dict, committed: Path) -> str:
    """"" when the run ``doc`` may replace the results file ``committed``, else why not: it did not finish (a run
    stopped at its total limit fills an empty place with the outcomes it reached, and says so, but never replaces
    a file), it reported no test, or it ran part of the suite (``--sample``, ``-k``,
    ``--shard``) and ``committed`` holds the whole."""
    status = doc["run"]["status"]
    if status != "finished" and (committed.exists() or not status.startswith(STOPPED)):
        return f"the run ended: {status}"
    if not doc["tests"]:
        return "the run reported no test"
    try:
        old = json.loads(committed.read_text())["run"]
    except (OSError, ValueError, KeyError, TypeError):  # none, or not a results file: no evidence to keep
        return ""
    if is_partial(doc["run"]) and not is_partial(old):
        return f"it ran part of the suite and {committed.name} holds a whole-suite run"
    return ""


#: what every shard of a joined run must share: the results file's fields, then its run's
SHARED_FIELDS = ("client", "version", "target", "source", "machine")
SHARED_RUN = ("sample", "workers", "select", "test_timeout_s")
STOPPED = "stopped at the total limit"  # how a run's status begins when its total limit ended it


def join_shards(docs: list[dict]) -> dict:
    """The whole suite's results document from the results documents of its N shards (``--shard K/N``): each
    shard once, finished or stopped at its total limit (with the outcomes it reached; then the joined run says
    which shards stopped, as one run stopped at its limit would), all of one client, version, target, tests
    commit, machine and settings (each shard's total limit may differ), each test in the shard its id hashes to.
    Its seconds are the shards' sum (the machine time the suite took)."""
    if not docs:
        raise ClientError("--join: no results files")
    shards = []
    for doc in docs:
        shard = Shard.parse(doc["run"].get("shard", str(WHOLE)))
        if shard.n == 1:
            raise ClientError(f"--join: {doc['client']} on {doc['target']} is a whole run, not a shard")
        if doc["run"]["status"] != "finished" and not doc["run"]["status"].startswith(STOPPED):
            raise ClientError(f"--join: shard {shard} did not run to its end or limit: {doc['run']['status']}")
        differs = [f for f in SHARED_FIELDS if doc[f] != docs[0][f]] + [
            f for f in SHARED_RUN if doc["run"][f] != docs[0]["run"][f]]
        if differs:
            raise ClientError(f"--join: shard {shard}'s {differs[0]} is not shard {docs[0]['run']['shard']}'s")
        stray = next((t for t in doc["tests"] if not shard.holds(t)), None)
        if stray is not None:
            raise ClientError(f"--join: {stray} is in the file of shard {shard}, but not of that shard")
        shards.append(shard)
    n = shards[0].n
    if sorted(shards, key=lambda s: (s.n, s.k)) != [Shard(k, n) for k in range(1, n + 1)]:
        raise ClientError(f"--join: needs shards 1/{n} to {n}/{n} once each, got {', '.join(map(str, shards))}")
    tests = dict(sorted(t for doc in docs for t in doc["tests"].items()))
    first = docs[0]
    run = {field: first["run"][field] for field in SHARED_RUN}
    ordered = sorted(zip(shards, docs), key=lambda p: p[0].k)
    stopped = [str(s) for s, d in ordered if d["run"]["status"] != "finished"]
    run.update(status=f"{STOPPED} in shards {', '.join(stopped)}" if stopped else "finished", output_tail="",
               seconds=round(sum(d["run"]["seconds"] for d in docs), 1), total_timeout_s=None,
               shards=[{"shard": str(s), "status": d["run"]["status"], "seconds": d["run"]["seconds"],
                        "total_timeout_s": d["run"]["total_timeout_s"]} for s, d in ordered])
    return {**{field: first[field] for field in SHARED_FIELDS}, "run": run, "counts": counts(tests), "tests": tests}


def join_files(files: list[Path], results: Path) -> dict:
    """``--join``: the shards' results files joined into the whole suite's, written to ``results`` as a run
    of its own would be (a run folder, then promoted)."""
    doc = join_shards([json.loads(f.read_text()) for f in files])
    with runs.lock(results):
        folder = runs.new_run_folder(results, f"{doc['client']}--{doc['target']}")
        committed = results_path(results, doc["client"], doc["target"])
        _settle(folder, committed, doc, kept_because(doc, committed))
    return doc


def is_partial(run: dict) -> bool:
    """Whether a results file's ``run`` covers part of the suite only (a sample, a -k selection, a shard)."""
    return run.get("sample", 1) > 1 or bool(run.get("select")) or run.get("shard", str(WHOLE)) != str(WHOLE)


def _settle(folder: Path, committed: Path, doc: dict | None, why: str) -> None:
    """Write the run's results file (``doc``, when there is one) and ``RUN.json`` into its run folder, name the
    folder, then promote the file over ``committed`` unless ``why`` says why not."""
    if doc is not None:
        (folder / committed.name).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    final = runs.finish(folder, {"command": runs.command_line(), "pid": os.getpid(), "promoted": not why,
                                 "not_promoted_because": why, "status": doc["run"]["status"] if doc else why})
    if not why:
        runs.atomic_write(committed, (final / committed.name).read_bytes(), "results")


def _run_child(client: Client, target: str, source: Path | None, test_timeout_s: float, total_timeout_s: float,
               sample: int, select: str, workers: str, shard: Shard) -> dict:
    """The client's suite on ``target`` in a child process: its results document."""
    with tempfile.TemporaryDirectory(prefix="ironaccel-clients-") as tmp:
        ini, record = Path(tmp) / "pytest.ini", Path(tmp) / "record.jsonl"
        # An empty ini of our own: neither ironaccel's pytest settings nor the client's checkout's apply.
        ini.write_text("[pytest]\n" + client.ini)
        cmd = child_command(client, source, record, ini, test_timeout_s, sample, select, workers, shard)
        env = child_env(target, test_timeout_s, client)
        machine = client_machine.record(env, target == FAKE, client.optional)  # as the run starts
        start = time.monotonic()
        status = "finished"
        try:
            proc = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True,
                                  text=True, errors="replace", timeout=total_timeout_s)
            tail = proc.stdout[-2000:] + proc.stderr[-2000:]
            if proc.returncode not in (0, 1):  # 1: some test failed; anything else: the run itself broke
                status = f"pytest exit {proc.returncode}"
        except subprocess.TimeoutExpired as exc:
            status = f"{STOPPED} of {total_timeout_s:g} s"
            tail = (exc.stdout or b"")[-2000:].decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        tests = read_record(record)
        doc = {
            "client": client.name, "version": version_of(client.distribution), "target": target,
            "source": {"path": str(source or client.pyargs), "commit": source_commit(source)},
            "run": {"status": status, "seconds": round(time.monotonic() - start, 1), "sample": sample,
                    "workers": workers, **({"shard": str(shard)} if shard != WHOLE else {}),
                    "select": select, "test_timeout_s": test_timeout_s, "total_timeout_s": total_timeout_s,
                    "output_tail": "" if tests else tail},
            "machine": machine,
            "counts": counts(tests),
            "tests": tests,
        }
    return doc


def read_record(record: Path) -> dict[str, dict]:
    """Test id -> {"outcome", "message"} from the plugin's JSON lines (the worst phase wins)."""
    tests: dict[str, dict] = {}
    if not record.is_file():
        return tests
    for line in record.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:  # the last line of a killed run may be cut
            continue
        outcome = outcome_of(entry["when"], entry["outcome"])
        old = tests.get(entry["id"])
        if old is None or OUTCOME_RANK[outcome] > OUTCOME_RANK[old["outcome"]]:
            tests[entry["id"]] = {"outcome": outcome, "message": entry["message"]}
    return dict(sorted(tests.items()))


OUTCOME_RANK = {"pass": 0, "skip": 1, "fail": 2, "error": 3}


def outcome_of(when: str, pytest_outcome: str) -> str:
    """One pytest phase report -> pass/fail/error/skip: a failing setup or teardown is an error."""
    if pytest_outcome == "skipped":
        return "skip"
    if pytest_outcome == "failed":
        return "fail" if when == "call" else "error"
    return "pass"


def counts(tests: dict[str, dict]) -> dict[str, int]:
    out = dict.fromkeys(OUTCOMES, 0)
    for t in tests.values():
        out[t["outcome"]] += 1
    return out


# -- the pytest plugin (loaded in the child with -p ironaccel.cts.clients) -----------------------------------

def pytest_addoption(parser):
    group = parser.getgroup("ironaccel-clients")
    group.addoption("--clients-record", default="", help="append each test phase's outcome to this JSON-lines file")
    group.addoption("--clients-sample", type=int, default=1, help="run one test in N (by a hash of its id)")
    group.addoption("--clients-shard", type=Shard.parse, default=WHOLE, help="run shard K of N (by a hash of test ids)")
    # numba-cuda's suite reads this option (in its repository's conftest, not in the wheel)
    group.addoption("--dump-failed-filechecks", action="store_true", help="numba-cuda: dump failed FileCheck inputs")


def pytest_collection_modifyitems(config, items):
    parts = [Shard(1, config.getoption("clients_sample")), config.getoption("clients_shard")]
    keep = {item.nodeid for item in items if all(p.holds(item.nodeid) for p in parts)}
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.nodeid not in keep])
        items[:] = [i for i in items if i.nodeid in keep]


@pytest.fixture(scope="class")
def initialize_from_pytest_config(request):
    """numba-cuda's CUDATestCase uses this fixture to read --dump-failed-filechecks into its class."""
    request.cls._dump_failed_filechecks = request.config.getoption("dump_failed_filechecks")


_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(Error|Exception)\b")


def first_line(report) -> str:
    """The failure's first line; for a module that does not import, its last ``E`` line (the exception)."""
    if report.when == "collect":
        errors = [line[1:].strip() for line in str(report.longrepr).splitlines() if line.startswith("E ")]
        if errors:
            return errors[-1][:300]
    if report.skipped and isinstance(report.longrepr, tuple):
        text = str(report.longrepr[2])
    else:
        crash = getattr(report.longrepr, "reprcrash", None)
        text = crash.message if crash is not None else str(report.longrepr or "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and "Traceback (most recent call last):" in lines:  # CuPy's "Only cupy raises error"
        raised = [line for line in lines[1:] if _EXCEPTION_LINE.match(line)] or lines[-1:]
        return f"{lines[0][:140]} <- {raised[-1][:160]}"  # carries the error it saw: that is the cause
    return lines[0][:300] if lines else ""


def pytest_runtest_logreport(report):
    config = _CONFIG.get("config")
    path = config.getoption("clients_record") if config is not None else ""
    # under xdist the controller gets every worker's reports: it alone writes
    if not path or hasattr(config, "workerinput") or (report.passed and report.when != "call"):
        return
    entry = {"id": report.nodeid, "when": report.when, "outcome": report.outcome,
             "message": "" if report.passed else first_line(report)}
    with open(path, "a") as f:  # one line per phase, flushed now: a killed run keeps what it reached
        f.write(json.dumps(entry) + "\n")


def pytest_collectreport(report):
    """A module that fails to import is one error, one skipped whole (importorskip) one skip: its tests are
    never collected, so they would not be counted at all."""
    if report.failed or report.skipped:
        pytest_runtest_logreport(report)


@pytest.hookimpl(wrapper=True)
def pytest_report_to_serializable(report):
    """A subtest's parameters go from an xdist worker to the controller as their repr when they are not plain
    values: execnet cannot send objects (numba-cuda's test_shfl_sync_types passes numba types), nor subclasses
    of plain types (a failing subtest of test_round_to_f8 passes numpy.float64s), and the test would fail with
    DumpError, its own failure hidden, on any target."""
    data = yield
    context = data.get("_subtest.context") if isinstance(data, dict) else None
    if context and context.get("kwargs"):
        plain = (str, int, float, bool, type(None))
        context["kwargs"] = {k: v if type(v) in plain else repr(v) for k, v in context["kwargs"].items()}
    return data


_CONFIG: dict = {}


def pytest_configure(config):
    _CONFIG["config"] = config
    _hide_cupy_that_cannot_start()


def _hide_cupy_that_cannot_start() -> None:
    """A CuPy that imports but cannot start on this driver (on the fake: it needs the CUDA runtime's private
    export tables) is made unimportable, so suites that build CuPy arrays at import (cuda.core's
    test_utils.py) skip their CuPy tests instead of failing to collect, and run the rest."""
    try:
        import cupy
    except ImportError:
        return
    try:
        cupy.empty(1)
    except Exception as exc:  # CuPy's CUDARuntimeError and driver errors have no common base but Exception
        for name in [m for m in sys.modules if m == "cupy" or m.startswith(("cupy.", "cupy_backends"))]:
            del sys.modules[name]
        sys.modules["cupy"] = None  # import cupy: ImportError
        print(f"ironaccel clients: CuPy cannot start here ({type(exc).__name__}: {str(exc)[:200]}); "
              "treated as not installed", file=sys.stderr)


def command(args) -> int:
    results = Path(args.results)
    if args.report:
        from .clients_report import report

        return report(results, Path(args.output), check=args.check)
    if args.join:
        try:
            doc = join_files([Path(f) for f in args.join], results)
        except (ClientError, runs.Busy) as exc:
            print(f"ironaccel clients: {exc}", file=sys.stderr)
            return 2
        c = doc["counts"]
        print(f"{doc['client']} on {doc['target']}: {len(doc['run']['shards'])} shards joined: {c['pass']} pass, "
              f"{c['fail']} fail, {c['error']} error, {c['skip']} skip ({doc['run']['seconds']:g} s in all)")
        return 0
    names = args.client or list(CLIENTS)
    targets = args.target or [FAKE]
    plan = []
    for name in names:
        client = CLIENTS.get(name)
        if client is None:
            print(f"ironaccel clients: unknown client {name!r} (known: {', '.join(CLIENTS)})", file=sys.stderr)
            return 2
        for target in targets:
            if target not in TARGETS:
                print(f"ironaccel clients: unknown target {target!r} (known: {', '.join(TARGETS)})", file=sys.stderr)
                return 2
            if target in client.targets:
                plan.append((client, target))
    code = 0
    for client, target in plan:
        source = args.source.get(client.name) or os.environ.get(client.source_env())
        try:
            with runs.interrupts():
                doc = run_client(client, target, results, Path(source) if source else None, args.test_timeout,
                                 args.timeout, args.sample, args.select, args.workers, args.shard)
        except ClientError as exc:
            print(f"ironaccel clients: {exc}", file=sys.stderr)
            code = 2
            continue
        except runs.Busy as exc:
            print(f"ironaccel clients: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"\nironaccel clients: interrupted: {client.name} on {target} is kept, not promoted, in "
                  f"{results / runs.RUNS}", file=sys.stderr)
            return runs.EXIT_INTERRUPTED
        c = doc["counts"]
        print(f"{client.name} on {target}: {c['pass']} pass, {c['fail']} fail, {c['error']} error, "
              f"{c['skip']} skip ({doc['run']['status']}, {doc['run']['seconds']:g} s)")
        if doc["run"]["status"] != "finished":
            code = 1
    return code


def _source_arg(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or name not in CLIENTS:
        raise ValueError(f"--source takes CLIENT=DIR with CLIENT one of {', '.join(CLIENTS)}")
    return name, path


def _shard_arg(text: str) -> Shard:
    try:
        return Shard.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(p) -> None:
    p.add_argument("--client", action="append", metavar="NAME", help=f"a client (repeatable; default all: {', '.join(CLIENTS)})")
    p.add_argument("--target", action="append", metavar="T", help=f"{', '.join(TARGETS)} (repeatable; default {FAKE})")
    p.add_argument("--results", default="clients/results", metavar="DIR", help="results files (default clients/results)")
    p.add_argument("--source", action="append", type=_source_arg, default=[], metavar="CLIENT=DIR",
                   help="the tests folder of a client fetched at run time (or $IRONACCEL_CLIENTS_SOURCE_<CLIENT>)")
    p.add_argument("--test-timeout", type=float, default=TEST_TIMEOUT_S, metavar="S", help="per-test time limit")
    p.add_argument("--timeout", type=float, default=TOTAL_TIMEOUT_S, metavar="S", help="per-run time limit")
    p.add_argument("--workers", default=WORKERS, metavar="N|auto", help="pytest-xdist workers of a run (default "
                   f"{WORKERS}: one per CPU, as a project's CI runs its suite); 0: one process, no xdist")
    p.add_argument("--sample", type=int, default=1, metavar="N", help="run one test in N only (by a hash of its id): "
                   "a quick look, not a whole-suite figure")
    p.add_argument("--shard", type=_shard_arg, default=WHOLE, metavar="K/N", help="run part K of N of the suite "
                   "(by a hash of each test's id), to be joined with the other parts by --join")
    p.add_argument("--join", nargs="+", metavar="FILE", help="join the results files of a suite's N shards into "
                   "the whole suite's results file in --results; run nothing")
    p.add_argument("-k", dest="select", default="", metavar="EXPR", help="pytest -k selection")
    p.add_argument("--report", action="store_true", help="regenerate CLIENTS.md from the results files; run nothing")
    p.add_argument("--output", default="CLIENTS.md", metavar="FILE", help="with --report: the file (default CLIENTS.md)")
    p.add_argument("--check", action="store_true", help="with --report: exit 1 if FILE is not what the results give")
    p.set_defaults(func=lambda args: command(_with_sources(args)))


def _with_sources(args):
    args.source = dict(args.source)
    return args
