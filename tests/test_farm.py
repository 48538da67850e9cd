"""``ironaccel certify --ray``: certify on a farm of Ray nodes.

The farm here is a local Ray cluster this module starts (``ray.cluster_utils.Cluster``, Ray's own
multi-node test harness): a head without CPUs and two worker nodes, each a raylet with its own worker
processes, advertising different fake resources — node A ``mem/test`` and ``cuda/fake``, node B
``mem/test`` and ``mem/wrong`` — so where a task may run is decided by the resources alone. "mem/test" is
the in-memory target of tests/test_certify.py (registered in Ray's workers by a worker setup hook);
cuda/fake is the real simulated target. The plain-run comparison runs ``--ray local`` in a child process.

The two worker nodes also stand for a farm of ``FAKE_NODES`` machines: each advertises the targets of half
of them (``sim042/cuda``, ``sim042/vulkan``, ...), and a runner that runs nothing measures what the farm
costs per task (scheduling, the node's stream, the files coming back).
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ironaccel.cts import certify, farm, results, spec, status, targets
from ironaccel.cts.cli import main
from ironaccel.cts.selection import Selection
from ironaccel.cts.testing.documents import verified_against
from membackend import MemBackend, mem_drivers, registered, suite
from results_docs import outcomes

ray = pytest.importorskip("ray", reason="the farm needs Ray: pip install 'ironaccel[farm]'")

TESTS_DIR = Path(__file__).resolve().parent
ROOT = TESTS_DIR.parent

FOUR_TESTS = "".join(f"""
@pytest.mark.clause("MEM-{i}")
def test_{i}(device):
    assert device.info.name
""" for i in range(1, 5))  # on mem/wrong each fails: its driver never matches the device

# test_b (on mem/test only, until the file "resumed" exists) writes the pids of its Ray worker and its own
# process, then waits to be killed
KILLED_MID_RUN = """
HERE = pathlib.Path(__file__).parent

@pytest.mark.clause("MEM-1")
def test_a_passes():
    pass

@pytest.mark.clause("MEM-2")
def test_b_is_killed_the_first_time():
    if os.environ["IRONACCEL_TARGET"] == "mem/test" and not (HERE / "resumed").exists():
        (HERE / "pids").write_text(f"{os.getppid()} {os.getpid()}")
        time.sleep(120)

@pytest.mark.clause("MEM-3")
def test_c_passes():
    pass
"""


FAKE_NODES = 100
FAKE_DRIVERS = ("cuda", "vulkan")


def fake_targets(first: int, last: int) -> list[str]:
    return [f"sim{i:03d}/{driver}" for i in range(first, last) for driver in FAKE_DRIVERS]


def instant_run(name, results_dir, timeout_s, test_timeout_s, suite=None, selection=Selection()):
    """``certify.run_target`` without a test process: a results file with one passing test (and its JUnit and
    certificate, which a run is promoted with), at once."""
    backend, driver = name.split("/")
    out = results_dir / results.file_name(name)
    test = {"id": "test_sim.py::test_scheduled", "clauses": ["MEM-1"], "outcome": "pass", "duration": 0.0,
            "message": ""}
    results.dump(results.document(targets.Target(backend, driver, True), {"suite": "0" * 16}, results.now(), "ok",
                                  tests=[test]), out)
    certify.write_junit_and_certificate(out)
    return certify.TargetRun(name, out, "ok", results.load(out)["summary"])


def register_mem_backend() -> None:
    """Ray's worker setup hook: the mem backend in every worker process of the test cluster."""
    from ironaccel.backends import register
    from ironaccel.cts import targets

    register("mem", MemBackend)
    targets.register("mem", mem_drivers)


def test_farm_run_gives_the_same_results_files_as_a_plain_run(tmp_path):
    """`certify --ray local --all` and `certify --all`, each test file's first tests only (to be quick):
    the same results files, times apart, for every target this machine can run."""
    only = ["--only", "test_err.py::*"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for mode, extra in (("plain", []), ("farm", ["--ray", "local", "--status", str(tmp_path / "STATUS.md")])):
        proc = subprocess.run([sys.executable, "-m", "ironaccel", "certify", "--all", *only, *extra,
                               "--results", str(tmp_path / mode)], env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "node" in proc.stdout.split("\n\n")[-1].splitlines()[0]  # the farm's summary table names nodes
    assert status.command(tmp_path / "farm", tmp_path / "STATUS.md", check=True) == 0  # --status wrote it
    assert farm.differences(tmp_path / "plain", tmp_path / "farm") == []
    plain = {p.name for p in (tmp_path / "plain").glob("*.json") if not p.name.endswith(".cert.json")}
    assert {"cuda-fake.json", "vulkan-lavapipe.json"} <= plain  # this machine's simulated targets at least
    for name in plain:
        tests = results.load(tmp_path / "farm" / name)["tests"]
        # test_err.py's optional clauses (ERR-51: OpenGL, ERR-52: PTX) are not-supported elsewhere
        assert tests and {t["outcome"] for t in tests} <= {"pass", "not-supported"}, name
        assert any(t["outcome"] == "pass" for t in tests), name


def cuda_fake_results(folder: Path, outcome: str = "pass", duration: float = 0.1, measured: float = 42.57) -> Path:
    """A cuda/fake results file (one test, messages naming ``folder`` and a ``measured`` number) with its JUnit
    and certificate."""
    folder.mkdir(parents=True, exist_ok=True)
    test = {"id": "test_err.py::test_one", "clauses": ["ERR-1"], "outcome": outcome, "duration": duration,
            "message": f"see {folder}/one.log: {measured} MiB"}
    out = folder / "cuda-fake.json"
    results.dump(results.document(targets.get("cuda/fake"), spec.current(["cuda/fake"]).parts("cuda/fake"),
                                  results.now(), "ok", f"log: {folder}/run.log", tests=[test],
                                  host=results.host_environment()), out)
    certify.write_junit_and_certificate(out)
    return out


def test_the_comparison_ignores_times_and_folders_and_names_what_differs(tmp_path, capsys, monkeypatch):
    from ironaccel.cts import mustpass

    monkeypatch.setattr(mustpass, "tests_of_suite", lambda suite=None: {"test_err.py::test_one": ("ERR-1",)})
    plain = cuda_fake_results(tmp_path / "plain")
    time.sleep(1.1)  # another second in started/finished
    farmed = cuda_fake_results(tmp_path / "farm", duration=0.7)
    assert farm.main(["compare", str(plain.parent), str(farmed.parent)]) == 0
    assert "1 targets, 1 tests" in capsys.readouterr().out

    cuda_fake_results(tmp_path / "farm", outcome="flaky")  # it passed on its re-run: chance, not the farm
    assert farm.main(["compare", str(plain.parent), str(farmed.parent)]) == 0
    assert "note: cuda-fake.json: test_err.py::test_one flaky in the farm run only" in capsys.readouterr().out

    cuda_fake_results(tmp_path / "farm", outcome="fail", measured=42.87)  # a failing measurement says another number
    cuda_fake_results(tmp_path / "plain", outcome="fail")
    assert farm.differences(plain.parent, farmed.parent) == []
    cuda_fake_results(tmp_path / "plain")

    cuda_fake_results(tmp_path / "farm", outcome="fail")
    (tmp_path / "farm" / "extra.json").write_text("{}")
    doc = results.load(farmed)
    doc["target"]["packages"]["numpy"] = "0.0"
    results.dump(doc, farmed)  # after its certificate: tampered
    found = farm.differences(plain.parent, farmed.parent)
    assert found[0] == "extra.json: only in the farm run"
    assert "cuda-fake.cert.json of the farm run: tampered" in found[1]
    assert found[2:] == [f"cuda-fake.json.summary.{o}: {int(o == 'pass')} in the plain run, {int(o == 'fail')} in "
                         "the farm run" for o in ("fail", "pass")] + [
        f"cuda-fake.json.target.packages.numpy: {results.load(plain)['target']['packages']['numpy']!r} in the plain "
        "run, '0.0' in the farm run",
        "cuda-fake.json.tests.test_err.py::test_one.message: '' in the plain run, 'see {results}/one.log: # MiB' in the farm run",
        "cuda-fake.json.tests.test_err.py::test_one.outcome: 'pass' in the plain run, 'fail' in the farm run"]
    assert farm.main(["compare", str(plain.parent), str(farmed.parent), "--show", "1"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "the farm run's results files differ from the plain run's in 7 place(s):", "extra.json: only in the farm run"]
    assert farm.main(["compare", str(plain.parent), str(tmp_path / "nowhere")]) == 2
    assert "nowhere: no such results folder" in capsys.readouterr().err


def test_without_ray_the_command_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    assert main(["certify", "--ray", "local", "--target", "cuda/fake"]) == 2
    assert "pip install 'ironaccel[farm]'" in capsys.readouterr().err


def test_farm_options_need_ray_and_a_positive_shard_size(capsys):
    assert main(["certify", "--target", "cuda/fake", "--shard-size", "5"]) == 2
    assert "--shard-size needs --ray" in capsys.readouterr().err
    assert main(["certify", "--target", "cuda/fake", "--resume"]) == 2
    assert "--resume needs --ray" in capsys.readouterr().err
    assert main(["certify", "--ray", "local", "--target", "cuda/fake", "--shard-size", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err


def test_doctor_prints_the_runnable_targets_as_ray_resources(monkeypatch, capsys):
    monkeypatch.setattr(certify, "runnable_targets", lambda: ["cuda/fake", "vulkan/lavapipe"])
    assert main(["doctor", "--ray-resources"]) == 0
    assert json.loads(capsys.readouterr().out) == {"target:cuda/fake": 1.0, "target:vulkan/lavapipe": 1.0,
                                                   "hardware-slot": 1.0}


def test_hardware_targets_and_unknown_ones_take_the_nodes_one_hardware_slot():
    assert farm.task_resources("cuda/fake") == {"target:cuda/fake": farm.TASK_SHARE}
    for name in ("cuda/nvidia", "vulkan/nvidia", "sim042/cuda"):  # the last one no registry here knows
        assert farm.task_resources(name) == {f"target:{name}": farm.TASK_SHARE, "hardware-slot": 1.0}


# -- on a cluster of several nodes ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def nodes():
    """Node name (as the farm reports it) by role, of a head and two worker nodes of a local cluster."""
    from ray.cluster_utils import Cluster

    with pytest.MonkeyPatch.context() as mp, registered():
        # the nodes' worker processes inherit this environment: they import membackend and test_farm from here
        mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), str(ROOT), os.environ.get("PYTHONPATH", "")]))
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
        try:
            half = FAKE_NODES // 2
            a = cluster.add_node(num_cpus=1, resources={
                "target:mem/test": 1, "target:cuda/fake": 1, farm.HARDWARE_SLOT: 1,
                **{farm.resource(t): 1 for t in fake_targets(0, half)}})
            b = cluster.add_node(num_cpus=1, resources={
                "target:mem/test": 1, "target:mem/wrong": 1, farm.HARDWARE_SLOT: 1,
                **{farm.resource(t): 1 for t in fake_targets(half, FAKE_NODES)}})
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, logging_level="warning",
                     runtime_env={"worker_process_setup_hook": "test_farm.register_mem_backend"})
            host = socket.gethostname()
            yield {"a": f"{host}@{a.node_id[:8]}", "b": f"{host}@{b.node_id[:8]}"}
        finally:
            ray.shutdown()
            cluster.shutdown()


def test_targets_run_on_the_nodes_that_advertise_them_and_shards_merge(tmp_path, nodes, monkeypatch):
    stream, folder = io.StringIO(), suite(tmp_path, FOUR_TESTS)
    verified_against(monkeypatch, folder)
    runs = farm.certify_on_farm(["mem/test", "mem/wrong"], tmp_path / "results", address="auto", shard_size=2,
                                suite=folder, stream=stream)
    by_target = {r.target: r for r in runs}
    assert by_target["mem/wrong"].node == nodes["b"]  # the only node advertising it
    assert set(by_target["mem/test"].node.split(", ")) <= set(nodes.values())
    mem = results.load(tmp_path / "results" / "mem-test.json")
    assert outcomes(mem) == {f"test_{i}": "pass" for i in range(1, 5)} and "selection" not in mem
    assert by_target["mem/test"].ok and (by_target["mem/test"].status, by_target["mem/wrong"].ok) == ("ok", False)
    shards = sorted(p.parent.name for p in (tmp_path / "results" / "runs").glob("*/shards/*/*.json")
                    if not p.name.endswith(".cert.json"))  # each target's run folder holds its shards
    assert shards == ["mem-test-1of2", "mem-test-2of2", "mem-wrong-1of2", "mem-wrong-2of2"]
    cert = results.sibling(tmp_path / "results" / "mem-test.json", ".cert.json")
    assert certify.verify(cert)[0] == certify.VERIFY_VALID
    text = stream.getvalue()
    assert f"start  mem/wrong 1/2 on {nodes['b']}" in text and "4 Ray task(s) on a farm of 3 node(s)" in text
    assert certify.summary_table(runs).splitlines()[0].split()[-1] == "node"

    # --resume: a target without its results file runs again only the shards its last run folder lacks finished
    (earlier,) = (tmp_path / "results" / "runs").glob("*-mem-test-*")
    second = earlier / "shards" / "mem-test-2of2" / "mem-test.json"
    doc = results.load(second)
    doc["run"] = {"status": "crashed", "message": "its node died"}
    results.dump(doc, second)
    (tmp_path / "results" / "mem-test.json").unlink()
    stream = io.StringIO()
    resumed, _ = farm.certify_on_farm(["mem/test", "mem/wrong"], tmp_path / "results", address="auto", shard_size=2,
                                      suite=folder, resume=True, stream=stream)
    assert "1 Ray task(s)" in stream.getvalue() and "keeping 3 finished earlier" in stream.getvalue()
    assert resumed.ok and outcomes(results.load(tmp_path / "results" / "mem-test.json")) == \
        {f"test_{i}": "pass" for i in range(1, 5)}


def test_a_real_simulated_target_runs_on_its_node(tmp_path, nodes):
    (run,) = farm.certify_on_farm(["cuda/fake"], tmp_path, address="auto",
                                  selection=Selection(only=("test_err.py::*",)), stream=io.StringIO())
    assert (run.node, run.ok) == (nodes["a"], True)
    doc = results.load(tmp_path / "cuda-fake.json")
    assert doc["target"]["device"] and doc["tests"]
    assert {t["outcome"] for t in doc["tests"]} == {"pass", "not-supported"}  # ERR-51 is OpenGL's alone
    assert results.sibling(tmp_path / "cuda-fake.json", ".junit.xml").is_file()


def test_a_target_no_node_advertises_is_refused_before_anything_runs(tmp_path, nodes):
    with pytest.raises(farm.FarmUnavailable, match="no live node advertises vulkan/lavapipe"):
        farm.certify_on_farm(["vulkan/lavapipe"], tmp_path, address="auto")
    assert not list(tmp_path.iterdir())


def test_a_farm_run_into_a_folder_another_run_holds_is_refused_and_writes_nothing(tmp_path, nodes, capsys):
    from ironaccel.cts import runs

    out = tmp_path / "results"
    with runs.lock(out):
        with pytest.raises(runs.Busy, match=r"in use by pid \d+"):
            farm.certify_on_farm(["mem/test"], out, address="auto", suite=suite(tmp_path, FOUR_TESTS),
                                 stream=io.StringIO())
        assert main(["certify", "--ray", "auto", "--target", "mem/test", "--results", str(out)]) == 2
    assert "is in use by pid" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [runs.LOCK_FILE]


def test_a_worker_killed_mid_run_leaves_its_target_crashed_and_resume_completes_it(tmp_path, nodes):
    folder, out = suite(tmp_path, KILLED_MID_RUN), tmp_path / "results"
    got: dict = {}
    first = threading.Thread(target=lambda: got.update(runs=farm.certify_on_farm(
        ["mem/test", "mem/wrong"], out, address="auto", suite=folder, stream=io.StringIO())))
    first.start()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (folder / "pids").exists():
        time.sleep(0.2)
    while time.monotonic() < deadline:  # the caller's copy of the results file, in its run folder, has test_a's pass
        try:
            (running,) = (out / "runs").glob(".*-mem-test-*.partial/mem-test.json")
            if outcomes(results.load(running))["test_a_passes"] == "pass":
                break
        except (ValueError, KeyError):
            pass
        time.sleep(0.2)
    worker, child = map(int, (folder / "pids").read_text().split())
    os.kill(worker, signal.SIGKILL)
    os.kill(child, signal.SIGKILL)
    first.join(timeout=120)
    assert not first.is_alive()
    crashed, wrong = got["runs"]
    assert (crashed.status, crashed.ok) == ("crashed", False) and "WorkerCrashedError" in crashed.message
    assert not (out / "mem-test.json").exists() and crashed.kept  # a crashed run is a record, never promoted
    assert crashed.results_file.parent.parent == out / "runs"
    doc = results.load(crashed.results_file)
    assert outcomes(doc) == {"test_a_passes": "pass", "test_b_is_killed_the_first_time": "not-run",
                             "test_c_passes": "not-run"}
    assert doc["run"]["status"] == "crashed" and crashed.node in doc["run"]["message"]
    assert results.sibling(crashed.results_file, ".junit.xml").is_file()
    assert wrong.status != "crashed"
    kept = (out / "mem-wrong.json").read_bytes()

    (folder / "resumed").write_text("")
    stream = io.StringIO()
    resumed, again = farm.certify_on_farm(["mem/test", "mem/wrong"], out, address="auto", suite=folder,
                                          resume=True, stream=stream)
    assert "1 Ray task(s)" in stream.getvalue() and "keeping 1 finished earlier" in stream.getvalue()
    assert resumed.ok and set(outcomes(results.load(out / "mem-test.json")).values()) == {"pass"}
    assert (out / "mem-wrong.json").read_bytes() == kept and again.node == "earlier run"


def test_a_farm_of_100_fake_nodes_runs_each_ones_targets_where_it_is_advertised(tmp_path, nodes, record_property):
    """Every fake node's targets scheduled onto the worker node that advertises them; the farm's cost per
    task (wall time x the 2 task slots / tasks) recorded as a property, which conftest.py prints."""
    names = fake_targets(0, FAKE_NODES)
    t0 = time.monotonic()
    runs = farm.certify_on_farm(names, tmp_path, address="auto", runner=instant_run, stream=io.StringIO())
    wall = time.monotonic() - t0
    assert [r.target for r in runs] == names and all(r.ok for r in runs)
    for r in runs:
        assert r.node == nodes["a" if int(r.target[3:6]) < FAKE_NODES // 2 else "b"], r.target
    assert all(results.load(tmp_path / results.file_name(n))["run"]["status"] == "ok" for n in names)
    record_property("farm_overhead_per_task_ms", round(wall * 2 / len(names) * 1000, 1))
    record_property("farm_simulation", f"{FAKE_NODES} fake nodes, {len(names)} tasks on 2 task slots in {wall:.1f} s")
