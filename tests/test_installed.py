"""The suite outside a checkout: ironaccel and the OpenCL plugin built into wheels, installed into a fresh
virtual environment, and both ways of running the suite used from a folder that is no checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "plugins" / "ironaccel-opencl"


def run(cmd: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of the checkout on the path
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def checkout_copy(dest: Path) -> Path:
    """The checkout's files (tracked, and untracked but not ignored), copied to ``dest``: the wheels are built
    there, so that two xdist workers building at once do not share the checkout's build/ folder, and nothing
    left in it by an earlier build goes into a wheel."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True, timeout=60).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is not copied
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv (seeing this machine's numpy, wgpu, pyopencl, ...) with the two wheels installed."""
    tmp = tmp_path_factory.mktemp("installed")
    wheels = tmp / "wheels"
    copy = checkout_copy(tmp / "checkout")
    for project in (copy, copy / PLUGIN.relative_to(ROOT)):
        built = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(project)], tmp)
        assert built.returncode == 0, built.stderr
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    # --ignore-installed: the same version installed on this machine (seen through the system site-packages)
    # must not keep pip from installing the wheels just built
    pip = run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed",
               *map(str, sorted(wheels.glob("*.whl")))], tmp)
    assert pip.returncode == 0, pip.stderr
    return python


def test_the_wheel_carries_the_suite_and_the_plugin_its_kernels(installed, tmp_path):
    code = ("import ironaccel, ironaccel.cts.spec as s, ironaccel.cts.targets as t; "
            "print(ironaccel.__file__); print(s.conformance_dir()); "
            "print(t.get('opencl/pocl').kernels[0].folder); print(t.get('opencl/pocl').expectations_file)")
    proc = run([str(installed), "-c", code], tmp_path)
    assert proc.returncode == 0, proc.stderr
    module, suite, kernels, expectations = map(Path, proc.stdout.split())
    venv = installed.parent.parent
    for path in (module, suite, kernels, expectations):
        assert venv in path.parents, f"{path} is not the copy installed from the wheels"
    assert (suite / "SPEC.md").is_file() and (suite / "kernels" / "wgsl" / "saxpy.wgsl").is_file()
    assert (kernels / "saxpy.cl").is_file() and expectations.is_file()


def _runnable(python: Path, target: str, cwd: Path) -> str | None:
    proc = run([str(python), "-c", f"from ironaccel.cts import targets; print(targets.get({target!r}).missing())"], cwd)
    assert proc.returncode == 0, proc.stderr
    why = proc.stdout.strip().splitlines()[-1]
    return None if why == "None" else why


def test_pytest_pyargs_runs_the_installed_suite_from_anywhere(installed, tmp_path):
    why = _runnable(installed, "vulkan/lavapipe", tmp_path)
    if why:
        pytest.skip(f"vulkan/lavapipe cannot run here: {why}")
    out = tmp_path / "run.json"
    proc = run([str(installed), "-m", "pytest", "--pyargs", "ironaccel.conformance", "--target", "vulkan/lavapipe",
                "-q", "-p", "no:cacheprovider", "--results-json", str(out), "--only", "DEV-*", "--only", "COPY-*"],
               tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["run"]["status"] == "ok" and doc["summary"]["pass"] > 10 and not doc["summary"]["fail"]


def test_certify_a_plugin_target_from_anywhere(installed, tmp_path):
    why = _runnable(installed, "opencl/pocl", tmp_path)
    if why:
        pytest.skip(f"opencl/pocl cannot run here: {why}")
    proc = run([str(installed), "-m", "ironaccel", "certify", "--target", "opencl/pocl", "--results", "out"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    doc = json.loads((tmp_path / "out" / "opencl-pocl.json").read_text())
    assert doc["run"]["status"] == "ok" and not doc["summary"]["fail"]
    assert {"ironaccel-opencl", "pyopencl"} <= set(doc["target"]["packages"])
    cert = json.loads((tmp_path / "out" / "opencl-pocl.cert.json").read_text())
    assert cert["target"] == "opencl/pocl"
