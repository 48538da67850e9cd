"""The machine a client run ran on, as far as it decides outcomes (issue 25: the fake's runs on the H200's host
and on a GPU-less machine must agree, so each results file says which machine it came from).

Not the hostname: what a test's outcome can depend on. The CPU count (xdist's ``auto``, the fake's default
thread count, time limits), whether a real NVIDIA driver is on the machine while the fake runs (a client that
bypasses the fake reaches it), the fake's thread count (also its reported SM count: cuda.core's green-context
tests split by it), the hash of the fake's sources the run built (the fake is the machine's driver: two fake runs
compare only with one fake; a copy of the project on the H200's host carries no git commit to tell it) and the
optional packages the client's tests look for (a missing one is a skip).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from .. import fakes

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
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        cache = ""
    return {"kernel_module": module, "system_libcuda": libcuda_in(cache)}


def libcuda_in(cache: str) -> str:
    """The path of libcuda.so.1 in ``ldconfig -p``'s listing, "" when it lists none."""
    for line in cache.splitlines():
        name, arrow, path = line.strip().partition(" => ")
        if arrow and name.split(" ", 1)[0] == "libcuda.so.1":
            return path.strip()
    return ""


def record(env: dict[str, str], fake: bool, optional: tuple[tuple[str, str], ...]) -> dict:
    """The ``machine`` field of a results file. ``env``: the run's environment; ``fake``: the run is on the fake
    (else ``fake_threads`` and ``fake_sources`` are None); ``optional``: the client's (distribution, word) pairs."""
    from .clients import version_of

    cpus = os.cpu_count() or 1
    # numba-cuda's tests look for CUDA headers under CUDA_HOME (curand_kernel.h) and for nvdisasm on PATH
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH") or ""
    toolkit = {"home": home, "nvdisasm": shutil.which("nvdisasm", path=env.get("PATH")) or ""}
    return {"cpus": cpus, "nvidia_driver": nvidia_driver(), "cuda_toolkit": toolkit,
            "fake_threads": fake_threads(env, cpus) if fake else None,
            "fake_sources": fakes.source_hash() if fake else None,
            "packages": {d: version_of(d) for d, _ in optional}}


NOT_RECORDED = "not recorded"


def describe(doc: dict) -> dict[str, str]:
    """A results file's machine, for a report: one text per property, "not recorded" for files from before the
    field."""
    m = doc.get("machine")
    if m is None:
        return {k: NOT_RECORDED for k in ("cpus", "nvidia driver", "CUDA toolkit", "fake threads", "fake sources",
                                          "packages")}
    driver = m["nvidia_driver"]
    parts = [f"module {driver['kernel_module']}" if driver["kernel_module"] else "",
             f"libcuda.so.1 at {driver['system_libcuda']}" if driver["system_libcuda"] else ""]
    packages = [f"{d} {v}" if v else f"{d} not installed" for d, v in sorted(m["packages"].items())]
    toolkit = m.get("cuda_toolkit")  # not in the first files that had "machine"
    kit = NOT_RECORDED if toolkit is None else ", ".join(
        [f"CUDA_HOME {toolkit['home'] or 'unset'}", f"nvdisasm {toolkit['nvdisasm'] or 'absent'}"])
    return {"cpus": str(m["cpus"]), "nvidia driver": "; ".join(p for p in parts if p) or "none", "CUDA toolkit": kit,
            "fake threads": "-" if m["fake_threads"] is None else str(m["fake_threads"]),
            "fake sources": _fake_sources(m),
            "packages": ", ".join(packages) or "none looked for"}


def _fake_sources(machine: dict) -> str:
    if "fake_sources" not in machine:  # not in the files from before the field
        return NOT_RECORDED
    return "-" if machine["fake_sources"] is None else f"hashed {machine['fake_sources']}"


# -- two machines' fake runs of one client --------------------------------------------------------------------

def difference_cause(here: dict, there: dict, a: dict, b: dict, optional: tuple[tuple[str, str], ...]) -> str:
    """Why a test ended differently on two machines' runs ``here`` and ``there`` (its entries ``a`` and ``b``):
    a package whose version differs between them (or is not recorded) and which a message names; else the
    per-test time limit, when a message is a timeout, or the test's own; else the two outcomes with their
    causes."""
    from .clients_report import cause

    text = f"{a['message']}\n{b['message']}".lower()
    for dist, word in optional:
        if word and word.lower() in text:
            versions = [_package(doc, dist) for doc in (here, there)]
            if versions[0] != versions[1] or NOT_RECORDED in versions:
                return f"package {dist}: {versions[0]} here, {versions[1]} there"
    if "timeout (>" in text:
        return (f"the per-test time limit ({here['run']['test_timeout_s']:g} s here, "
                f"{there['run']['test_timeout_s']:g} s there)")
    if "timeoutexpired" in text:
        return "a time limit of the test's own (subprocess.TimeoutExpired): the machines' speed"
    return " / ".join(f"{side} {t['outcome']}" + (f": {cause(t['message'])}" if t["message"] else "")
                      for side, t in (("here", a), ("there", b)))


def _package(doc: dict, dist: str) -> str:
    machine = doc.get("machine")
    if machine is None or dist not in machine["packages"]:
        return NOT_RECORDED
    return machine["packages"][dist] or "not installed"


def agreement(here: dict, there: dict, optional: tuple[tuple[str, str], ...]) -> dict:
    """Two fake runs of one client on two machines: of the tests both ran, how many ended alike (the share is
    ``same / both``; tests only one ran are counted apart), and each difference's cause -> test ids."""
    both = here["tests"].keys() & there["tests"].keys()
    causes: dict[str, list[str]] = {}
    for tid in sorted(both):
        a, b = here["tests"][tid], there["tests"][tid]
        if a["outcome"] != b["outcome"]:
            causes.setdefault(difference_cause(here, there, a, b, optional), []).append(tid)
    different = sum(len(ids) for ids in causes.values())
    return {"both": len(both), "same": len(both) - different, "share": (len(both) - different) / len(both) if both else 0.0,
            "only_here": len(here["tests"].keys() - both), "only_there": len(there["tests"].keys() - both),
            "causes": causes}
