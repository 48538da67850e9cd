"""The machine a client run ran on, as far as it decides outcomes (issue 25: the fake's runs on the H200's host
and on a GPU-less machine must agree, so each results file says which machine it came from).

Not the hostname: what a test's outcome can depend on. The CPU count (xdist's ``auto``, the fake's default
thread count, time limits), whether a real NVIDIA driver is on the machine while the fake runs (a client that
bypasses the fake reaches it), the fake's thread count (also its reported SM count: cuda.core's green-context
tests split by it) and the optional packages the client's tests look for (a missing one is a skip).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

PROC_NVIDIA = Path("/proc/driver/nvidia/version")  # the kernel module's version, present while it is loaded
THREADS_ENV = "IRONACCEL_FAKE_CUDA_THREADS"
MAX_FAKE_THREADS = 64  # fakes/cuda/init.c's clip
_ATOL = re.compile(r"\s*([+-]?\d+)")  # what C's atol reads; no number: 0


def fake_threads(env: dict[str, str], cpus: int) -> int:
    """The fake's block threads for ``env``, as fakes/cuda/init.c computes them: the variable (atol), else the
    online CPUs, clipped to 1..64."""
    text = env.get(THREADS_ENV, "")
    if text:
        leading = _ATOL.match(text)
        n = int(leading.group(1)) if leading else 0
    else:
        n = cpus
    return max(1, min(MAX_FAKE_THREADS, n))


def nvidia_driver() -> dict[str, str]:
    """The machine's own NVIDIA driver: the kernel module's version line and the system's libcuda.so.1 (from
    the loader's cache, which LD_LIBRARY_PATH, where the fake goes, does not change); "" for each absent."""
    try:
        module = PROC_NVIDIA.read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        module = ""
    libcuda = ""
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        cache = ""
    for line in cache.splitlines():
        if line.strip().startswith("libcuda.so.1 ") and "=>" in line:
            libcuda = line.split("=>", 1)[1].strip()
            break
    return {"kernel_module": module, "system_libcuda": libcuda}


def record(env: dict[str, str], fake: bool, optional: tuple[str, ...]) -> dict:
    """The ``machine`` field of a results file. ``env``: the run's environment; ``fake``: the run is on the fake
    (else ``fake_threads`` is None); ``optional``: the distributions the client's tests look for."""
    from .clients import version_of

    cpus = os.cpu_count() or 1
    return {"cpus": cpus, "nvidia_driver": nvidia_driver(),
            "fake_threads": fake_threads(env, cpus) if fake else None,
            "packages": {d: version_of(d) for d in optional}}


NOT_RECORDED = "not recorded"


def describe(doc: dict) -> dict[str, str]:
    """A results file's machine, for a report: one text per property, "not recorded" for files from before the
    field."""
    m = doc.get("machine")
    if m is None:
        return {k: NOT_RECORDED for k in ("cpus", "nvidia driver", "fake threads", "packages")}
    driver = m["nvidia_driver"]
    parts = [f"module {driver['kernel_module']}" if driver["kernel_module"] else "",
             f"libcuda.so.1 at {driver['system_libcuda']}" if driver["system_libcuda"] else ""]
    packages = [f"{d} {v}" if v else f"{d} not installed" for d, v in sorted(m["packages"].items())]
    return {"cpus": str(m["cpus"]), "nvidia driver": "; ".join(p for p in parts if p) or "none",
            "fake threads": "-" if m["fake_threads"] is None else str(m["fake_threads"]),
            "packages": ", ".join(packages) or "none looked for"}
