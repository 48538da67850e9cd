"""``ironaccel fake run`` / ``fake env`` / ``pytest --cuda-fake``: another project's command with the fake as its
CUDA driver, refused when the command would get another driver; and the README's GPU-less CI job, run."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ironaccel import cbuild, fakes

ROOT = Path(__file__).resolve().parent.parent
DEVICE_NAME = ("from cuda.bindings import driver as d; d.cuInit(0); "
               "print(d.cuDeviceGetName(64, 0)[1].split(b'\\0')[0].decode())")

pytest.importorskip("cuda.bindings")


def ironaccel(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    base = dict(os.environ if env is None else env)
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT), *[p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p]])
    return subprocess.run([sys.executable, "-m", "ironaccel", *args], env=base, cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_fake_run_gives_the_command_the_fake_and_its_exit_status():
    proc = ironaccel("fake", "run", "--", sys.executable, "-c", DEVICE_NAME + "; raise SystemExit(5)")
    assert proc.returncode == 5, proc.stderr
    assert "simulated" in proc.stdout


def test_fake_dir_holds_both_names_numba_and_cuda_bindings_open():
    folder = fakes.driver_dir()
    assert (folder / "libcuda.so").resolve() == (folder / "libcuda.so.1").resolve()


def test_fake_env_exports_what_fake_run_sets(tmp_path):
    proc = ironaccel("fake", "env")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^export LD_LIBRARY_PATH=", proc.stdout, re.M)
    script = tmp_path / "s.sh"
    script.write_text(proc.stdout + f"exec {shlex.quote(sys.executable)} -c {shlex.quote(DEVICE_NAME)}\n")
    out = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=120)
    assert "simulated" in out.stdout, out.stderr
    github = ironaccel("fake", "env", "--github").stdout
    assert "IRONACCEL_CUDA_DRIVER=fake" in github.splitlines()


def test_fake_run_refuses_when_the_command_would_load_another_libcuda(tmp_path):
    """A libcuda.so that comes first (here preloaded, as a GPU machine's driver can be) is what numba-cuda
    would get: the run is refused, naming it, and the command never starts."""
    stub_c = tmp_path / "stub.c"
    stub_c.write_text("int cuInit(unsigned f) { (void)f; return 100; }\n")
    stub = tmp_path / "libcuda.so"
    subprocess.run([cbuild.find_compiler(), "-shared", "-fPIC", "-Wl,-soname,libcuda.so", "-o", str(stub),
                    str(stub_c)], check=True)
    marker = tmp_path / "started"
    env = {**os.environ, "LD_PRELOAD": str(stub)}
    proc = ironaccel("fake", "run", "--", "touch", str(marker), env=env)
    assert proc.returncode == 2
    assert f"libcuda.so is {stub}" in proc.stderr and "CUresult 100" in proc.stderr, proc.stderr
    assert not marker.exists()


def test_fake_run_without_a_command_says_how():
    proc = ironaccel("fake", "run")
    assert proc.returncode == 2 and "ironaccel fake run -- CMD" in proc.stderr


PROJECT_TEST = '''
import pytest

def test_cuda_bindings_gets_the_fake():
    from cuda.bindings import driver as d
    assert d.cuInit(0)[0] == d.CUresult.CUDA_SUCCESS
    assert b"simulated" in d.cuDeviceGetName(64, 0)[1]

def test_numba_gets_the_fake():
    cuda = pytest.importorskip("numba.cuda")
    name = cuda.get_current_device().name
    assert "simulated" in (name.decode() if isinstance(name, bytes) else name)
    with open("/proc/self/maps") as maps:  # numba opens libcuda.so: that too is the fake, no other driver
        assert {line.split()[-1] for line in maps if "/libcuda.so" in line} <= {{FAKE}}
'''


def project_test() -> str:
    return PROJECT_TEST.replace("{{FAKE}}", "{" + repr(str(fakes.build())) + "}")


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_pytest_cuda_fake_restarts_pytest_with_the_fake(tmp_path, workers):
    (tmp_path / "test_project.py").write_text(project_test())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "ironaccel.cts.pytest_plugin", "-p", "no:cacheprovider",
                           "-q", "--cuda-fake", *workers, "test_project.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"\b2 passed|1 passed, 1 skipped", proc.stdout), proc.stdout[-2000:]


def readme_ci_job() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- gpu-less-ci -->\n```yaml\n(.*?)```", text, re.S)
    assert block, "README.md lost its GPU-less CI snippet"
    return [re.sub(r"\s+#.*$", "", line.split("- run:", 1)[1]).strip() for line in block.group(1).splitlines()
            if "- run:" in line]


def test_readme_gpu_less_ci_job_runs_from_a_fresh_venv(tmp_path):
    """The three lines in a fresh virtual environment (with the system's site packages, so that what pip needs
    beyond build tools is there), on a small CUDA project: ironaccel from this checkout instead of its URL,
    the rest as written."""
    install_ironaccel, install_project, run_tests = readme_ci_job()
    assert install_ironaccel.startswith('pip install "ironaccel[cuda] @ ')
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_gpu.py").write_text(project_test())
    (project / "pyproject.toml").write_text(textwrap.dedent('''
        [project]
        name = "gpu-project"
        version = "0"
        [project.optional-dependencies]
        test = ["pytest", "pytest-xdist"]
        [tool.setuptools]
        py-modules = []
        '''))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv))
    steps = [install_ironaccel.replace(install_ironaccel.split("@ ", 1)[1].rstrip('"'), ROOT.as_uri()),
             install_project, run_tests]
    for step in steps:
        proc = subprocess.run(step, shell=True, cwd=project, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{step}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert re.search(r"\b2 passed|1 passed, 1 skipped", proc.stdout), proc.stdout[-2000:]
