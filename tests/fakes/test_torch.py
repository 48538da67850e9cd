"""The PyTorch smoke (ironaccel/cts/torch_smoke.py, issue 26) on the fake: PyTorch imports (its libcusparse binds
the nvJitLink shim's versioned names), sees the simulated device, copies, runs streams and events and the
kernels it compiles through NVRTC, and a float32 matrix product through cuBLAS (its compute_120 PTX in its sm_90
machine code's place); what needs machine code (PyTorch's own prebuilt kernels) is reported as such, with the
cause. Needs a Python with PyTorch's CUDA wheel (about 3 GB with its NVIDIA libraries): this one,
or the one $IRONACCEL_TORCH_PYTHON names (`tox -e torch` installs it)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ironaccel import fakes

REPO = Path(__file__).resolve().parents[2]
#: the checks that must run on the fake: they need the driver API, NVRTC or cuBLAS's PTX, no machine code
MUST_RUN = ("properties", "creation without kernels", "copies", "streams and events", "jiterator",
            "special functions", "matmul", "synchronize")


def _torch_python() -> str:
    if os.environ.get("IRONACCEL_TORCH_PYTHON"):
        return os.environ["IRONACCEL_TORCH_PYTHON"]
    if importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is not installed: `tox -e torch`, or set IRONACCEL_TORCH_PYTHON to a Python that has "
                    "PyTorch's CUDA wheel")
    return sys.executable


def test_the_pytorch_smoke_runs_on_the_fake():
    env = fakes.child_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["USE_PYTORCH_KERNEL_CACHE"] = "0"  # each jiterator kernel through NVRTC (and the shim) now
    proc = subprocess.run([_torch_python(), "-m", "ironaccel.cts.torch_smoke"], env=env, capture_output=True,
                          text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == 0 and "torch smoke: ok" in out, out + proc.stderr[-4000:]
    assert "ironaccel fake CUDA device (simulated)" in out and "is_available=True" in out
    lines = {line.split(" [")[0]: line for line in out.splitlines() if " [" in line}
    for name in MUST_RUN:
        assert name in lines and "cannot run" not in lines[name] and "FAILED" not in lines[name], lines.get(name)
