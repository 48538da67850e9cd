"""``ironaccel repro``: the generated scripts compute what the kernel computes on each backend (table-driven,
run without ironaccel importable), and the command finds the failing launch of a real failing test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ironaccel.cts import cli, repro, targets
from ironaccel.cts.repro import Case, generate

N, ITERS = 32, 10
NO_IRONACCEL = 'raise ImportError("a standalone repro must not import ironaccel")\n'


def lcg(iters: int) -> np.ndarray:
    v = np.arange(N, dtype=np.uint64)
    for _ in range(iters):
        v = (v * 1664525 + 1013904223) & 0xFFFFFFFF
    return v.astype(np.uint32)


def run_without_ironaccel(script: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run a script where ``import ironaccel`` fails (a module of that name that raises comes first on the path)."""
    shadow = tmp_path / "shadow"
    shadow.mkdir(exist_ok=True)
    (shadow / "ironaccel.py").write_text(NO_IRONACCEL)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, str(script)], env={**env, "PYTHONPATH": str(shadow)}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("target", ["webgpu/lavapipe", "opengl/llvmpipe", "vulkan/lavapipe", "cuda/fake", "opencl/pocl"])
@pytest.mark.parametrize("wrong", [False, True], ids=["right", "wrong"])
def test_each_backends_script_makes_the_launch_and_compares(tmp_path, target, wrong):
    """The `busy` kernel (ITERS LCG steps per thread) in the target's first dialect: the script's own launch
    gives the host's values, so it passes against them and fails, naming the word, against a changed one."""
    t = targets.get(target) if target in targets.registered_drivers() else None
    if t is None or t.missing():
        pytest.skip(f"{target} cannot run here: {t.missing() if t else 'not installed'}")
    dialect = t.kernels[0]
    expected = lcg(ITERS)
    if wrong:
        expected[5] ^= 1
    poison = np.full(4 * N, 0xAB, np.uint8)
    case = Case({"id": "test_x.py::test_busy", "clauses": ["SEM-6"], "outcome": "fail", "message": "made up"},
                target, "the host", "", "", 0, 1, "busy", dialect.lang, dialect.source("busy"), [], [1, 1, 1],
                [N, 1, 1], [("buffer", 0), ("scalar", "<u4", ITERS), ("scalar", "<u4", N)], [poison],
                [expected.view(np.uint8)], [lcg(ITERS - 1).view(np.uint8)])
    script = generate.write(case, t.backend, repro.environment(target), tmp_path / "out")
    proc = run_without_ironaccel(script, tmp_path)
    assert "ImportError" not in proc.stderr, proc.stderr
    if wrong:
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"WRONG: 1 differ\n  [5] got {lcg(ITERS)[5]:#x}, want {expected[5]:#x}" in proc.stdout
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "every value is right" in proc.stdout


LOOP = "test_semantics.py::test_long_loop_runs_every_iteration[65536]"


def test_repro_of_the_lavapipe_loop_bug_runs_without_ironaccel_and_prints_the_wrong_values(tmp_path, capsys):
    if targets.get("vulkan/lavapipe").missing() or targets.get("cuda/fake").missing():
        pytest.skip("needs vulkan/lavapipe and cuda/fake")
    assert cli.main(["repro", LOOP, "--target", "vulkan/lavapipe", "--out", str(tmp_path / "out")]) == 0
    script = tmp_path / "out" / "repro.py"
    assert "import ironaccel" not in script.read_text() and "from ironaccel" not in script.read_text()
    proc = run_without_ironaccel(script, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # 0xa58368aa: thread 1's value after 65,535 iterations, not 65,536 (docs/driver-bugs/mesa-llvmpipe-loop-65535)
    assert "WRONG: 32 differ" in proc.stdout and "[1] got 0xa58368aa, want 0x38690001" in proc.stdout


@pytest.mark.parametrize("test, target, says", [
    ("test_mem.py::test_alloc_sizes_round_trip[1000]", "vulkan/lavapipe", "does not fail on vulkan/lavapipe (pass)"),
    ("test_nope.py::test_nothing", "vulkan/lavapipe", "vulkan/lavapipe has no test 'test_nope.py::test_nothing'"),
])
def test_no_repro_is_a_clear_error(tmp_path, capsys, test, target, says):
    if targets.get(target).missing() or targets.get("cuda/fake").missing():
        pytest.skip(f"needs {target} and cuda/fake")
    assert cli.main(["repro", test, "--target", target, "--out", str(tmp_path / "out")]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def recorded(outcome: str, launches: list[dict], arrays: dict | None = None) -> repro.Recorded:
    return repro.Recorded({"target": {"device": "d", "driver_version": "1"}},
                          {"id": "t", "clauses": ["SEM-1"], "outcome": outcome, "message": ""}, launches,
                          arrays or {}, "")


LAUNCH = {"kernel": "k", "grid": [1, 1, 1], "block": [4, 1, 1], "args": [{"buffer": 4}],
          "source": {"array": "module0", "lang": "wgsl", "options": [], "binary": False}}
SAME = {"L0_A0_in": np.zeros(4, np.uint8), "L0_A0_out": np.ones(4, np.uint8), "module0": np.frombuffer(b"src", np.uint8)}


@pytest.mark.parametrize("mine, theirs, says", [
    (recorded("fail", []), recorded("pass", []), "no standalone repro for this kind of test: t launches no kernel"),
    (recorded("fail", [LAUNCH], SAME), recorded("pass", [LAUNCH], SAME),
     "no standalone repro for this kind of test: every one of t's 1 kernel launch(es)"),
    (recorded("fail", [LAUNCH], SAME), recorded("fail", [LAUNCH], SAME), "does not pass on the reference R (fail)"),
    (recorded("fail", [LAUNCH], SAME), recorded("pass", [dict(LAUNCH, grid=[2, 1, 1])], SAME),
     "launch 0 differs between T and R"),
    (recorded("fail", [LAUNCH], SAME), recorded("pass", [LAUNCH], dict(SAME, L0_A0_in=np.ones(4, np.uint8))),
     "launch 0's input buffers differ"),
])
def test_find_case_says_why_there_is_no_case(mine, theirs, says):
    with pytest.raises(repro.NoRepro) as err:
        repro.find_case("t", "T", mine, "R", theirs)
    assert says in str(err.value)


def test_find_case_takes_the_first_launch_whose_outputs_differ():
    second = {f"L1_{k[3:]}": v for k, v in SAME.items() if k.startswith("L0_")}
    theirs = recorded("pass", [LAUNCH, LAUNCH], {**SAME, **second, "L1_A0_out": np.full(4, 7, np.uint8)})
    case = repro.find_case("t", "T", recorded("fail", [LAUNCH, LAUNCH], {**SAME, **second}), "R", theirs)
    assert (case.launch, case.kernel, case.source, case.args) == (1, "k", "src", [("buffer", 0)])
    assert case.expected[0].tolist() == [7] * 4 and case.observed[0].tolist() == [1] * 4
