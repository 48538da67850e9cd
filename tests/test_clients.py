"""``ironaccel clients``: the recording plugin, the outcome rules, and CLIENTS.md (deterministic, current)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from ironaccel import fakes
from ironaccel.cts import clients, clients_report

REPO = Path(__file__).resolve().parent.parent


def doc(client, target, tests, sample=1):
    tests = {tid: {"outcome": o, "message": m} for tid, (o, m) in tests.items()}
    return {"client": client, "version": "1.0", "target": target, "source": {"path": "x", "commit": ""}, "counts": clients.counts(tests), "tests": tests,
            "run": {"status": "finished", "seconds": 1.0, "sample": sample, "select": "", "test_timeout_s": 60,
                    "total_timeout_s": 600, "output_tail": ""}}


def test_plugin_records_every_outcome(pytester):
    pytester.makepyfile(test_suite="""
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("CUDA_ERROR_NOT_SUPPORTED in setup")

        def test_pass(): pass
        def test_fail(): assert 1 == 2, "wrong answer\\nsecond line"
        def test_skip(): pytest.skip("no device")
        def test_error(broken): pass
    """)
    pytester.makepyfile(test_broken="import no_such_module_of_a_client")
    record = pytester.path / "record.jsonl"
    pytester.runpytest_subprocess("-p", "ironaccel.cts.clients", f"--clients-record={record}",
                                  "--continue-on-collection-errors")
    tests = clients.read_record(record)
    assert tests.pop("test_broken.py") == {
        "outcome": "error", "message": "ModuleNotFoundError: No module named 'no_such_module_of_a_client'"}
    assert {t.split("::")[1]: v["outcome"] for t, v in tests.items()} == {
        "test_pass": "pass", "test_fail": "fail", "test_skip": "skip", "test_error": "error"}
    messages = {t.split("::")[1]: v["message"] for t, v in tests.items()}
    assert messages["test_fail"].startswith("AssertionError: wrong answer") and "second" not in messages["test_fail"]
    assert messages["test_skip"] == "Skipped: no device"
    assert "CUDA_ERROR_NOT_SUPPORTED" in messages["test_error"]
    assert clients.counts(tests) == {"pass": 1, "fail": 1, "error": 1, "skip": 1}


def test_xdist_workers_record_each_test_once_through_the_controller(pytester):
    pytester.makepyfile(test_suite="\n".join(f"def test_{i}(): assert {i} % 5" for i in range(12)))
    record = pytester.path / "record.jsonl"
    pytester.runpytest_subprocess("-p", "ironaccel.cts.clients", f"--clients-record={record}", "-n", "2")
    lines = [json.loads(line)["id"] for line in record.read_text().splitlines()]
    assert len(lines) == len(set(lines)) == 12
    assert clients.counts(clients.read_record(record)) == {"pass": 9, "fail": 3, "error": 0, "skip": 0}


def test_a_failure_that_carries_a_traceback_is_recorded_with_the_error_it_carries(pytester):
    """CuPy's numpy_cupy_* checks fail with "Only cupy raises error" and the CuPy error's traceback as text: the
    record keeps that error (the cause: a missing cuBLAS, a kernel that did not load), not only the first line."""
    pytester.makepyfile(test_cupy_check="""
        def test_sort():
            raise AssertionError("Only cupy raises error\\n\\nTraceback (most recent call last):\\n"
                                 "  File 'x.py', line 1, in f\\nRuntimeError: radix_sort: cudaErrorInvalidPtx\\n  attempted: libx.so.13")
    """)
    record = pytester.path / "record.jsonl"
    pytester.runpytest_subprocess("-p", "ironaccel.cts.clients", f"--clients-record={record}")
    assert clients.read_record(record)["test_cupy_check.py::test_sort"]["message"] == \
        "AssertionError: Only cupy raises error <- RuntimeError: radix_sort: cudaErrorInvalidPtx"


def test_a_test_past_its_limit_ends_its_worker_so_what_it_left_cannot_fail_the_next(pytester):
    """A test blocked past the limit (here: holding a lock the next test needs, as a hung kernel holds the
    device) is recorded as timed out, and its worker is replaced, so the worker's next test passes."""
    pytester.makepyfile(test_hang="""
        import threading, time
        DEVICE = threading.Lock()

        def test_a_hangs():
            DEVICE.acquire()
            time.sleep(30)

        def test_b_after():
            assert DEVICE.acquire(timeout=0)
    """)
    record = pytester.path / "record.jsonl"
    pytester.runpytest_subprocess("-p", "ironaccel.cts.clients", f"--clients-record={record}", "-n", "1",
                                  "-p", "ironaccel.cts.client_timeouts", "--timeout=2", "-p", "no:randomly")
    tests = clients.read_record(record)
    assert tests["test_hang.py::test_a_hangs"]["message"].startswith("Timeout (>2s): the test's worker was ended")
    assert tests["test_hang.py::test_b_after"]["outcome"] == "pass"


def test_a_subtest_with_object_parameters_reports_through_xdist(pytester):
    pytester.makepyfile(test_sub="""
        class Kind:
            pass

        def test_kinds(subtests):
            for k in (Kind(), 3):
                with subtests.test(kind=k):
                    assert k is not None
    """)
    record = pytester.path / "record.jsonl"
    pytester.runpytest_subprocess("-p", "ironaccel.cts.clients", f"--clients-record={record}", "-n", "1")
    assert clients.read_record(record) == {"test_sub.py::test_kinds": {"outcome": "pass", "message": ""}}


def test_a_failing_subtest_with_a_numpy_scalar_parameter_reports_its_own_failure_through_xdist(pytester):
    """numpy.float64 is a float to isinstance, not to execnet: the failure was recorded as a DumpError."""
    pytester.makepyfile(test_sub="""
        import numpy as np

        def test_rounds(subtests):
            with subtests.test(value=np.float64(1.5)):
                assert np.float64(1.5) == 2, "rounded wrong"
    """)
    record = pytester.path / "record.jsonl"
    pytester.runpytest_subprocess("-p", "ironaccel.cts.clients", f"--clients-record={record}", "-n", "1")
    (entry,) = clients.read_record(record).values()
    assert entry["outcome"] == "fail" and "rounded wrong" in entry["message"], entry


def test_a_cupy_that_cannot_start_is_not_installed_so_its_suite_collects(pytester):
    """cuda.core's test_utils.py builds CuPy arrays at import; a CuPy that cannot start made the module a
    collection error (233 tests not run); now its CuPy tests skip and the rest run."""
    pytester.makepyfile(cupy="def empty(n):\n    raise RuntimeError('cudaErrorSymbolNotFound')\n")
    pytester.makepyfile(test_utils="""
        import pytest
        try:
            import cupy as cp
        except ImportError:
            cp = None
        SAMPLES = [cp.empty(3)] if cp is not None else []

        @pytest.mark.skipif(cp is None, reason="CuPy is not installed")
        def test_cupy(): pass
        def test_other(): pass
    """)
    record = pytester.path / "record.jsonl"
    result = pytester.runpytest_subprocess("-p", "ironaccel.cts.clients", f"--clients-record={record}")
    tests = clients.read_record(record)
    assert {t.split("::")[1]: v["outcome"] for t, v in tests.items()} == {"test_cupy": "skip", "test_other": "pass"}
    assert "CuPy cannot start here (RuntimeError: cudaErrorSymbolNotFound)" in result.stderr.str()


def test_sample_keeps_one_test_in_n_by_a_hash_of_its_id(pytester):
    pytester.makepyfile(test_many="\n".join(f"def test_{i:02d}(): pass" for i in range(30)))
    record = pytester.path / "record.jsonl"
    pytester.runpytest_subprocess("-p", "ironaccel.cts.clients", f"--clients-record={record}", "--clients-sample=3")
    kept = sorted(clients.read_record(record))
    assert kept == sorted(f"test_many.py::test_{i:02d}" for i in range(30) if clients.Shard(1, 3).holds(f"test_many.py::test_{i:02d}"))
    assert 3 <= len(kept) <= 20  # a hash, neither all nor none


def test_a_tests_place_in_the_sample_does_not_depend_on_the_others():
    ids = [f"t.py::test_{i}" for i in range(200)]
    assert [t for t in ids if clients.Shard(1, 5).holds(t)] == [t for t in ids[::-1] if clients.Shard(1, 5).holds(t)][::-1]
    assert 20 <= sum(clients.Shard(1, 5).holds(t) for t in ids) <= 60


def test_worst_phase_wins_and_a_cut_last_line_is_ignored(tmp_path):
    record = tmp_path / "r.jsonl"
    lines = [{"id": "t::a", "when": "call", "outcome": "passed", "message": ""},
             {"id": "t::a", "when": "teardown", "outcome": "failed", "message": "leak"}]
    record.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"id": "t::b", "wh')
    assert clients.read_record(record) == {"t::a": {"outcome": "error", "message": "leak"}}


def test_causes_group_by_cuda_error_name_or_normalized_first_line():
    assert clients_report.cause("CudaAPIError: [209] Call to cuModuleLoadDataEx results in CUDA_ERROR_NO_BINARY_FOR_GPU") \
        == "CUDA_ERROR_NO_BINARY_FOR_GPU"
    assert clients_report.cause("IndexError: index 3 at 0x7f00") == clients_report.cause("IndexError: index 12 at 0x1")


def sample_docs():
    both = {"t::a": ("pass", ""), "t::b": ("pass", ""), "t::c": ("skip", "x")}
    fake = {"t::a": ("pass", ""), "t::b": ("fail", "CUDA_ERROR_NO_BINARY_FOR_GPU here"), "t::c": ("skip", "x")}
    return [doc("numba-cuda", clients.CUDASIM, both), doc("numba-cuda", clients.FAKE, fake, sample=4),
            doc("cuda-core", clients.FAKE, {"t::d": ("error", "not implemented: cuTexObjectCreate")})]


def test_report_lists_the_gap_by_cause_and_says_not_run():
    text = clients_report.render(sample_docs())
    numba = text.split("## numba-cuda")[1].split("\n## ")[0]
    assert "| cuda/fake | 1.0 | 1 | 1 | 0 | 1 | 1 test in 4, by a hash of its id; 1 s |" in numba
    assert "| cuda/nvidia | - | not run | not run | not run | not run |  |" in numba
    assert "Pass on numba/cudasim but not on cuda/fake (of the 3 tests both ran): 1 tests" in numba
    assert "| 1 | `fail: CUDA_ERROR_NO_BINARY_FOR_GPU` |" in numba and "`t::b`" in numba
    core = text.split("## cuda-core")[1].split("\n## ")[0]
    assert "| 1 | `error: not implemented: cuTexObjectCreate` |" in core
    assert "Not run on the fake yet" in text.split("## cuda-bindings")[1]


def test_a_sample_is_never_the_headline_and_workers_are_said():
    hw = {"t::a": ("pass", ""), "t::b": ("pass", "")}
    whole = doc("cuda-bindings", clients.FAKE, hw)
    whole["run"]["workers"] = "auto"
    text = clients_report.render([doc("cuda-bindings", clients.NVIDIA, hw), whole])
    assert "| cuda-bindings | cuda/nvidia | 2 | 2 | 100.0% | 0 | 0 | >= 95%: met |" in text
    assert "| cuda/fake | 1.0 | 2 | 0 | 0 | 0 | xdist -n auto; 1 s |" in text
    text = clients_report.render([doc("cuda-bindings", clients.NVIDIA, hw), doc("cuda-bindings", clients.FAKE, hw, sample=5)])
    assert "| 100.0% | 0 | 0 | a sample: not a whole-suite figure |" in text


def test_summary_gives_the_fakes_share_of_hardware_passes_against_the_goal():
    hw = {f"t::{i}": ("pass", "") for i in range(20)} | {"t::only-hw": ("pass", ""), "t::x": ("fail", "no")}
    fake = {f"t::{i}": ("pass", "") for i in range(19)} | {"t::19": ("skip", "no cupy"), "t::x": ("pass", "")}
    text = clients_report.render([doc("cuda-bindings", clients.NVIDIA, hw), doc("cuda-bindings", clients.FAKE, fake)])
    assert "| cuda-bindings | cuda/nvidia | 20 | 19 | 95.0% | 0 | 1 | >= 95%: met |" in text  # t::only-hw: not both
    fake["t::18"] = ("fail", "CUDA_ERROR_INVALID_PTX")
    text = clients_report.render([doc("cuda-bindings", clients.NVIDIA, hw), doc("cuda-bindings", clients.FAKE, fake)])
    assert "| cuda-bindings | cuda/nvidia | 20 | 18 | 90.0% | 1 | 1 | >= 95%: MISSED |" in text


def test_report_is_deterministic():
    docs = sample_docs()
    first = clients_report.render(docs)
    for seed in range(3):
        shuffled = docs[:]
        random.Random(seed).shuffle(shuffled)
        assert clients_report.render(shuffled) == first


def test_unknown_client_or_missing_source_is_a_clear_error(tmp_path):
    with pytest.raises(clients.ClientError, match="--source DIR or set IRONACCEL_CLIENTS_SOURCE_CUDA_CORE"):
        clients.run_client(clients.CLIENTS["cuda-core"], clients.FAKE, tmp_path)
    with pytest.raises(clients.ClientError, match="does not run on numba/cudasim"):
        clients.run_client(clients.CLIENTS["cuda-core"], clients.CUDASIM, tmp_path)


def test_committed_clients_md_is_current():
    assert clients_report.report(REPO / "clients" / "results", REPO / "CLIENTS.md", check=True) == 0, \
        "CLIENTS.md is stale: run `python3 -m ironaccel clients --report`"


def test_the_pin_is_the_checkouts_commit_never_that_of_a_repository_the_tests_were_copied_into(tmp_path):
    import subprocess

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                       check=True, capture_output=True)

    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("")
    (tmp_path / "copied" / "tests").mkdir(parents=True)
    (tmp_path / "copied" / "tests" / "test_b.py").write_text("")
    (tmp_path / ".gitignore").write_text("/copied/\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "c")
    assert len(clients.source_commit(tmp_path / "tests")) == 40
    assert clients.source_commit(tmp_path / "copied" / "tests") == ""


def test_a_fetched_suite_runs_with_its_own_folder_as_rootdir(tmp_path):
    ini, record = tmp_path / "pytest.ini", tmp_path / "record.jsonl"
    source = tmp_path / "cuda_bindings" / "tests"
    fetched = clients.child_command(clients.CLIENTS["cuda-bindings"], source, record, ini, 60, 1, "")
    assert fetched[fetched.index("--rootdir") + 1] == str(source)
    shipped = clients.child_command(clients.CLIENTS["numba-cuda"], None, record, ini, 60, 1, "")
    assert shipped[shipped.index("--rootdir") + 1] == str(tmp_path)


def test_cupy_runs_its_selected_folders_with_its_own_kernel_cache_on_the_fake(tmp_path):
    cupy = clients.CLIENTS["cupy"]
    source = tmp_path / "tests"
    cmd = clients.child_command(cupy, source, tmp_path / "r.jsonl", tmp_path / "pytest.ini", 60, 1, "", workers="0")
    assert cmd[-9] == "--continue-on-collection-errors"  # then the folders, not the whole suite
    assert cmd[-8:] == [str(source / "cupy_tests" / f"{d}_tests") for d in (
        "core", "creation", "manipulation", "math", "sorting", "logic", "indexing", "statistics")]
    # CUB on, as on the H200 (the fake runs its compute_120 PTX in place of the sm_90 machine code)
    assert "CUPY_ACCELERATORS" not in dict(cupy.fake_env)
    # the fake's kernel cache is its own: the H200 runs both targets on one host, and a real cubin has no PTX
    assert clients.child_env(clients.FAKE, 60, cupy)["CUPY_CACHE_DIR"] != \
        clients.child_env(clients.NVIDIA, 60, cupy).get("CUPY_CACHE_DIR")



@pytest.mark.parametrize("client", ["cupy", "numba-cuda"])
def test_every_client_that_runs_cupy_keeps_the_fakes_cupy_kernel_cache_apart(client):
    """numba-cuda's CuPy interop tests failed with CUDA_ERROR_NO_BINARY_FOR_GPU on the H200's host, where its
    real-driver run filled the shared cache with cubins that carry no PTX."""
    fake = clients.child_env(clients.FAKE, 60, clients.CLIENTS[client])["CUPY_CACHE_DIR"]
    assert fake != clients.child_env(clients.NVIDIA, 60, clients.CLIENTS[client]).get("CUPY_CACHE_DIR")
    assert fake == clients.child_env(clients.FAKE, 60, clients.CLIENTS["cupy"])["CUPY_CACHE_DIR"]

def test_a_run_names_the_conventional_cuda_toolkit_when_the_environment_names_none(tmp_path, monkeypatch):
    (tmp_path / "include").mkdir()
    monkeypatch.setattr(clients, "CONVENTIONAL_CUDA_HOME", tmp_path)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    for target in (clients.FAKE, clients.NVIDIA):
        assert clients.child_env(target, 60)["CUDA_HOME"] == str(tmp_path)
    monkeypatch.setenv("CUDA_PATH", "/opt/cuda")  # the environment's own choice stands
    assert "CUDA_HOME" not in clients.child_env(clients.NVIDIA, 60)
    monkeypatch.setattr(clients, "CONVENTIONAL_CUDA_HOME", tmp_path / "absent")
    monkeypatch.delenv("CUDA_PATH")
    assert "CUDA_HOME" not in clients.child_env(clients.NVIDIA, 60)


# -- runs are records (issue 24): a run folder per run, promotion only of a finished run, the folder's lock ------

TOY_SUITE = """
import os, time

def test_passes():
    pass

def test_may_hang():
    if os.environ.get("TOY_HANG"):
        time.sleep(60)
"""


def toy_run(tmp_path, results, monkeypatch, hang=False, timeout=120.0, **kw):
    """A two-test client suite run on numba's simulator target (no driver, no fake: quick), into ``results``."""
    source = tmp_path / "toy"
    source.mkdir(exist_ok=True)
    (source / "test_toy.py").write_text(TOY_SUITE)
    monkeypatch.setenv("TOY_HANG", "1" if hang else "")
    toy = clients.Client("toy", "pytest", (clients.CUDASIM,))
    return clients.run_client(toy, clients.CUDASIM, results, source, 30, timeout, workers="0", **kw)


def run_folders(results):
    return sorted(p for p in (results / "runs").iterdir())


def test_a_client_run_writes_a_run_folder_and_promotes_its_file_when_it_finished(tmp_path, monkeypatch):
    results = tmp_path / "results"
    doc = toy_run(tmp_path, results, monkeypatch)
    assert doc["run"]["status"] == "finished" and doc["counts"]["pass"] == 2
    (folder,) = run_folders(results)
    assert re.fullmatch(r"\d{8}T\d{6}Z-toy--numba-cudasim-[0-9a-f]{6}", folder.name), folder.name
    record = json.loads((folder / "RUN.json").read_text())
    assert record["promoted"] is True and record["not_promoted_because"] == ""
    committed = results / "toy--numba-cudasim.json"
    assert committed.read_bytes() == (folder / committed.name).read_bytes()
    assert clients_report.load_results(results) == [doc]  # CLIENTS.md reads the promoted file only, not the run folders


@pytest.mark.parametrize("case", ["stopped at its limit", "a sample over a whole run"])
def test_a_client_run_that_did_not_finish_or_ran_a_part_never_replaces_the_committed_file(tmp_path, monkeypatch, case):
    results = tmp_path / "results"
    toy_run(tmp_path, results, monkeypatch)
    committed = results / "toy--numba-cudasim.json"
    before = committed.read_bytes()
    if case == "stopped at its limit":
        doc = toy_run(tmp_path, results, monkeypatch, hang=True, timeout=8.0)
        assert doc["run"]["status"].startswith("stopped at the total limit")
    else:
        doc = toy_run(tmp_path, results, monkeypatch, sample=2)
        assert doc["run"]["status"] == "finished"
    assert committed.read_bytes() == before
    (kept,) = [p for p in run_folders(results) if not json.loads((p / "RUN.json").read_text())["promoted"]]
    assert json.loads((kept / "RUN.json").read_text())["not_promoted_because"]
    assert json.loads((kept / committed.name).read_text()) == doc  # kept as a record


TOY_SUITE_OF_TEN = "\n".join(f"def test_{i}(): pass" for i in range(10))


def toy_shards(tmp_path, monkeypatch, n):
    """Each of the n shards of a ten-test suite, run into a results folder of its own (as on the H200's calls)."""
    source = tmp_path / "ten"
    source.mkdir()
    (source / "test_ten.py").write_text(TOY_SUITE_OF_TEN)
    toy = clients.Client("toy", "pytest", (clients.CUDASIM,))
    return [clients.run_client(toy, clients.CUDASIM, tmp_path / f"shard{k}", source, 30, 120, workers="0",
                               shard=clients.Shard(k, n)) for k in range(1, n + 1)]


def test_shards_split_the_suite_by_a_hash_and_join_into_the_whole_suites_results_file(tmp_path, monkeypatch, capsys):
    from ironaccel.cts.cli import main

    shards = toy_shards(tmp_path, monkeypatch, 3)
    assert [d["run"]["shard"] for d in shards] == ["1/3", "2/3", "3/3"]
    assert all(d["counts"]["pass"] < 10 for d in shards) and sum(d["counts"]["pass"] for d in shards) == 10
    files = [str(tmp_path / f"shard{k}" / "toy--numba-cudasim.json") for k in (3, 1, 2)]  # any order
    results = tmp_path / "results"
    assert main(["clients", "--join", *files, "--results", str(results)]) == 0
    assert "3 shards joined: 10 pass" in capsys.readouterr().out
    whole = json.loads((results / "toy--numba-cudasim.json").read_text())
    assert sorted(whole["tests"]) == sorted(f"test_ten.py::test_{i}" for i in range(10))
    assert whole["counts"]["pass"] == 10 and "shard" not in whole["run"] and not clients.is_partial(whole["run"])
    assert [s["shard"] for s in whole["run"]["shards"]] == ["1/3", "2/3", "3/3"]
    assert whole["run"]["seconds"] == pytest.approx(sum(d["run"]["seconds"] for d in shards), abs=0.2)
    assert "3 shards joined" in clients_report._cell(whole)[-1]


def test_a_shard_never_replaces_a_whole_runs_committed_file(tmp_path, monkeypatch):
    results = tmp_path / "results"
    toy_run(tmp_path, results, monkeypatch)
    doc = toy_run(tmp_path, results, monkeypatch, shard=clients.Shard(1, 2))
    assert clients.kept_because(doc, results / "toy--numba-cudasim.json").startswith("it ran part of the suite")


def shard_doc(k, n, tests, **run):
    d = doc("toy", clients.CUDASIM, {t: ("pass", "") for t in tests})
    d["machine"] = {"cpus": 2}
    d["run"].update(shard=f"{k}/{n}", workers="2", **run)
    return d


def test_shards_stopped_at_their_limits_join_into_a_run_that_says_which_stopped():
    ids = [f"t::{c}" for c in "abcdefgh"]
    docs = [shard_doc(k, 2, [t for t in ids if clients.Shard(k, 2).holds(t)], total_timeout_s=limit)
            for k, limit in ((1, 530), (2, 275))]
    docs[1]["run"]["status"] = "stopped at the total limit of 275 s"
    run = clients.join_shards(docs)["run"]
    assert run["status"] == "stopped at the total limit in shards 2/2"
    assert [(s["status"], s["total_timeout_s"]) for s in run["shards"]] == [
        ("finished", 530), ("stopped at the total limit of 275 s", 275)]


def test_a_run_stopped_at_its_limit_fills_an_empty_place_but_never_replaces_a_file(tmp_path, monkeypatch):
    results = tmp_path / "results"
    doc = toy_run(tmp_path, results, monkeypatch, hang=True, timeout=8.0)
    assert doc["run"]["status"].startswith("stopped at the total limit")
    committed = results / "toy--numba-cudasim.json"
    assert json.loads(committed.read_text()) == doc  # nothing was there: its outcomes are kept, and it says it stopped
    assert clients.kept_because(doc, committed).startswith("the run ended: stopped")
    assert clients.kept_because({**doc, "run": {**doc["run"], "status": "pytest exit 2"}}, tmp_path / "none.json")


@pytest.mark.parametrize("case, error", [
    ("missing", r"needs shards 1/2 to 2/2 once each, got 1/2"),
    ("twice", r"needs shards 1/2 to 2/2 once each, got 1/2, 1/2"),
    ("broken", r"shard 2/2 did not run to its end or limit: pytest exit 2"),
    ("other machine", r"shard 2/2's machine is not shard 1/2's"),
    ("other settings", r"shard 2/2's test_timeout_s is not shard 1/2's"),
    ("stray test", r"t::b is in the file of shard 2/2, but not of that shard"),
    ("whole", r"toy on numba/cudasim is a whole run, not a shard"),
])
def test_join_refuses_anything_but_each_shard_once_run_to_its_end_on_one_machine_with_its_own_tests(case, error):
    ids = [f"t::{c}" for c in "abcdefgh"]
    one, two = ([t for t in ids if clients.Shard(k, 2).holds(t)] for k in (1, 2))
    assert one and two
    docs = [shard_doc(1, 2, one), shard_doc(2, 2, two)]
    if case == "missing":
        docs.pop()
    elif case == "twice":
        docs[1] = shard_doc(1, 2, one)
    elif case == "broken":
        docs[1]["run"]["status"] = "pytest exit 2"
    elif case == "other machine":
        docs[1]["machine"] = {"cpus": 16}
    elif case == "other settings":
        docs[1]["run"]["test_timeout_s"] = 300
    elif case == "stray test":
        docs[1]["tests"][one[0]] = {"outcome": "pass", "message": ""}
        error = error.replace("t::b", one[0])
    else:
        del docs[0]["run"]["shard"]
    with pytest.raises(clients.ClientError, match=re.escape(error) if case != "stray test" else error):
        clients.join_shards(docs)


def test_a_client_run_into_a_folder_another_run_holds_is_refused_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from ironaccel.cts import runs
    from ironaccel.cts.cli import main

    results = tmp_path / "results"
    with runs.lock(results):
        with pytest.raises(runs.Busy, match=r"in use by pid \d+"):
            toy_run(tmp_path, results, monkeypatch)
        code = main(["clients", "--client", "numba-cuda", "--target", clients.CUDASIM, "--results", str(results)])
    assert code == 2 and "is in use by pid" in capsys.readouterr().err
    assert sorted(p.name for p in results.iterdir()) == [runs.LOCK_FILE]


# -- the machine a run ran on (issue 25: the fake's runs on two machines must agree) ----------------------------

def test_a_run_records_the_machine_it_ran_on(tmp_path, monkeypatch):
    doc = toy_run(tmp_path, tmp_path / "results", monkeypatch)
    machine = doc["machine"]
    assert machine["cpus"] >= 1
    assert machine["fake_threads"] is None and machine["fake_sources"] is None  # not a fake run
    assert set(machine["cuda_toolkit"]) == {"home", "nvdisasm"}
    assert set(machine["nvidia_driver"]) == {"kernel_module", "system_libcuda"}
    assert machine["packages"] == {}  # the toy client looks for none


@pytest.mark.parametrize("value, threads", [("2", 2), ("16", 16), (" 7x", 7), ("abc", 1), ("-3", 1), ("100", 64),
                                            ("", 5)])
def test_the_fakes_thread_count_is_computed_as_the_fake_computes_it(value, threads):
    """fakes/cuda/init.c: atol of IRONACCEL_FAKE_CUDA_THREADS when set and not empty, else the online CPUs (5
    here), clipped to 1..64."""
    from ironaccel.cts import client_machine

    assert client_machine.fake_threads({"IRONACCEL_FAKE_CUDA_THREADS": value}, 5) == threads


def test_a_fake_run_records_its_clients_thread_count_and_optional_packages(monkeypatch):
    from ironaccel.cts import client_machine

    monkeypatch.setenv("IRONACCEL_FAKE_CUDA_THREADS", "2")
    core = clients.CLIENTS["cuda-core"]
    machine = client_machine.record(clients.child_env(clients.FAKE, 60, core), True, core.optional)
    assert machine["fake_threads"] == 16  # cuda-core's own setting wins over the caller's
    assert machine["fake_sources"] == fakes.source_hash() and len(machine["fake_sources"]) >= 16
    assert machine["packages"]["torch"] == clients.version_of("torch")
    assert set(machine["packages"]) == {d for d, _ in core.optional}


def test_a_real_nvidia_driver_on_the_machine_is_recorded(tmp_path, monkeypatch):
    from ironaccel.cts import client_machine

    proc = tmp_path / "version"
    proc.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Thu Sep 25 2025\nGCC version: 12\n")
    monkeypatch.setattr(client_machine, "PROC_NVIDIA", proc)
    assert client_machine.nvidia_driver()["kernel_module"].endswith("580.95.05  Thu Sep 25 2025")
    assert client_machine.record({}, True, ())["nvidia_driver"]["kernel_module"].startswith("NVRM version")
    monkeypatch.setattr(client_machine, "PROC_NVIDIA", tmp_path / "absent")
    assert client_machine.nvidia_driver()["kernel_module"] == ""
    cache = ("3 libs found in cache `/etc/ld.so.cache'\n"
             "\tlibcudart.so.13 (libc6,x86-64) => /usr/local/cuda-13.0/lib/libcudart.so.13\n"
             "\tlibcuda.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so\n")
    assert client_machine.libcuda_in(cache) == ""  # the runtime and the unversioned name are not the driver
    cache += "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
    assert client_machine.libcuda_in(cache) == "/usr/lib/x86_64-linux-gnu/libcuda.so.1"


def machine_doc(tests, torch="", test_timeout_s=60):
    d = doc("numba-cuda", clients.FAKE, tests)
    d["run"].update(workers="2", test_timeout_s=test_timeout_s)
    d["machine"] = {"cpus": 2, "nvidia_driver": {"kernel_module": "", "system_libcuda": ""}, "fake_threads": 2,
                    "packages": {"torch": torch, "cffi": "2.0.0", "numpy": "2.4.6"}}
    return d


def test_two_machines_fake_runs_agree_by_the_share_of_same_outcomes_and_every_difference_has_its_cause():
    here = machine_doc({"t::same": ("pass", ""), "t::torch": ("skip", "Skipped: PyTorch is not installed"),
                        "t::sticky": ("fail", "CudaAPIError: CUDA_ERROR_ILLEGAL_ADDRESS in numpy"), "t::slow": (
                            "fail", "Timeout (>60s): the test's worker was ended and replaced"),
                        "t::only-here": ("pass", ""), "t::quick": (
                            "fail", "subprocess.TimeoutExpired: Command '['python3', '-c', 'x']' timed out")})
    there = machine_doc({"t::same": ("pass", ""), "t::torch": ("pass", ""), "t::sticky": ("pass", ""),
                         "t::slow": ("pass", ""), "t::quick": ("pass", "")}, torch="2.11.0", test_timeout_s=300)
    there["machine"]["nvidia_driver"]["kernel_module"] = "NVRM version: 580.95.05"
    there["machine"]["packages"]["numpy"] = "2.3.5"  # recorded, never a message's cause (every message names it)
    here["machine"]["cuda_toolkit"] = {"home": "/usr/local/cuda", "nvdisasm": ""}
    text = clients_report.render([here], {"h200-host": [there]})
    section = text.split("## The fake on two machines")[1].split("\n## ")[0]
    assert "| numba-cuda | h200-host | 5 | 1 | 20.0% | 1 | 0 |" in section  # t::only-here: not in the share
    assert "| 1 | `package torch: not installed here, 2.11.0 there` |" in section  # listed, with its cause
    assert "| 1 | `here fail: CUDA_ERROR_ILLEGAL_ADDRESS / there pass` |" in section
    assert "| 1 | `the per-test time limit (60 s here, 300 s there)` |" in section
    assert "| 1 | `a time limit of the test's own (subprocess.TimeoutExpired): the machines' speed` |" in section
    assert "| CUDA toolkit | CUDA_HOME /usr/local/cuda, nvdisasm absent | not recorded |" in section
    assert "| nvidia driver | none | module NVRM version: 580.95.05 |" in section
    assert "| packages | cffi 2.0.0, numpy 2.4.6, torch not installed | cffi 2.0.0, numpy 2.3.5, torch 2.11.0 |" \
        in section
    # a package both machines have alike explains nothing: the difference keeps its outcomes
    there["machine"]["packages"]["torch"] = ""
    text = clients_report.render([here], {"h200-host": [there]})
    assert "`here skip: Skipped: PyTorch is not installed / there pass`" in text


def test_a_results_file_from_before_the_machine_field_says_not_recorded():
    here = doc("numba-cuda", clients.FAKE, {"t::torch": ("skip", "Skipped: PyTorch is not installed")})
    there = machine_doc({"t::torch": ("pass", "")}, torch="2.11.0")
    section = clients_report.render([here], {"h200-host": [there]}).split("## The fake on two machines")[1]
    assert "| fake threads | not recorded | 2 |" in section and "| xdist workers | not recorded | 2 |" in section
    assert "`package torch: not recorded here, 2.11.0 there`" in section
    assert "| numba-cuda | h200-host | 1 | 0 | 0.0% | 0 | 0 |" in section
    there = doc("numba-cuda", clients.FAKE, {"t::torch": ("pass", "")})  # neither says: the package may be why
    assert "`package torch: not recorded here, not recorded there`" in clients_report.render([here], {"m": [there]})


def test_a_second_machines_runs_are_a_subfolder_of_the_results_and_run_folders_are_not_one(tmp_path):
    results = tmp_path / "results"
    for folder in (results, results / "h200-host", results / "runs" / "20261202T130000Z-x"):
        folder.mkdir(parents=True)
        (folder / "numba-cuda--cuda-fake.json").write_text(json.dumps(machine_doc({"t::a": ("pass", "")})))
    assert list(clients_report.load_machines(results)) == ["h200-host"]
    assert clients_report.report(results, tmp_path / "CLIENTS.md") == 0
    text = (tmp_path / "CLIENTS.md").read_text()
    assert "| numba-cuda | h200-host | 1 | 1 | 100.0% | 0 | 0 |" in text and text.count("### numba-cuda: here") == 1
    assert "## The fake on two machines" not in clients_report.render([machine_doc({"t::a": ("pass", "")})])
