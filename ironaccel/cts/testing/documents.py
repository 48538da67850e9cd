"""Results documents for the platform's tests: what a run of the conformance suite records, without running
it (the suite's test list is ``mustpass``'s), so a test can judge, certify, tamper with and verify one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import mustpass, results, spec, targets


def verified_against(monkeypatch: Any, suite: Path) -> None:
    """Make ``ironaccel verify`` hold results to the tests of ``suite`` (a test's own small suite, which its
    runs ran) instead of the conformance suite's, for the rest of the test (``monkeypatch``: pytest's)."""
    collect = mustpass.tests_of_suite
    monkeypatch.setattr(mustpass, "tests_of_suite", lambda suite_dir=None: collect(suite))


def suite_tests(outcome: str = "pass") -> list[dict[str, Any]]:
    """Every test of the conformance suite, each with ``outcome``: the tests a whole run records."""
    return [{"id": tid, "clauses": list(clauses), "outcome": outcome, "duration": 0.0, "message": ""}
            for tid, clauses in mustpass.tests_of_suite().items()]


#: target -> (device name, vendor, driver, simulated, a driver library) as a run of it records them.
SEEN = {
    "cuda/fake": ("ironaccel fake GPU", "ironaccel (simulated NVIDIA GPU)", "ironaccel fake libcuda", True,
                  "/root/.cache/ironaccel/fakecuda/27c4d8a8/libcuda.so.1"),
    "cuda/nvidia": ("NVIDIA H200", "NVIDIA", "NVIDIA", False, "/usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15"),
    "vulkan/lavapipe": ("llvmpipe (LLVM 15.0.6, 256 bits)", "Mesa", "llvmpipe", True,
                        "/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so"),
    "vulkan/nvidia": ("NVIDIA H200", "NVIDIA", "NVIDIA", False, "/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.570.86.15"),
    "opengl/llvmpipe": ("llvmpipe (LLVM 15.0.6, 256 bits)", "Mesa", "llvmpipe", True,
                        "/usr/lib/x86_64-linux-gnu/dri/swrast_dri.so"),
    "opengl/nvidia": ("NVIDIA H200/PCIe/SSE2", "NVIDIA Corporation", "NVIDIA", False,
                      "/usr/lib/x86_64-linux-gnu/libEGL_nvidia.so.570.86.15"),
}
SEEN["webgpu/lavapipe"], SEEN["webgpu/nvidia"] = SEEN["vulkan/lavapipe"], SEEN["vulkan/nvidia"]


def passing_doc(target: str, whole_suite: bool = False) -> dict[str, Any]:
    """A current, finished run in which every required clause of SPEC.md passes, with the device and driver
    evidence a run of ``target`` records (``SEEN``; none for other targets). Its tests: one per required
    clause (``test_x.py::test_MEM-1``: quick, for the judge), or with ``whole_suite`` every test of the suite,
    as ``ironaccel verify`` wants them."""
    from ...api import DeviceInfo, Limits

    required = [cid for cid, c in spec.load_clauses().items() if c.required]
    tests = suite_tests() if whole_suite else [
        {"id": f"test_x.py::test_{cid}", "clauses": [cid], "outcome": "pass", "duration": 0.0, "message": ""}
        for cid in required]
    device = evidence = None
    if target in SEEN:
        name, vendor, driver, simulated, library = SEEN[target]
        device = DeviceInfo(target.split("/")[0], 0, name, vendor, driver, "1.0", simulated, 0,
                            Limits(0, 0, (0, 0, 0), (0, 0, 0), 0))
        evidence = {"driver": driver, "simulated": simulated, "libraries": [{"path": library, "sha256": "0" * 64}]}
    return results.document(targets.get(target), spec.current([target]).parts(target), "2026-11-30T04:30:00Z",
                            "ok", "", tests, device, evidence=evidence)
