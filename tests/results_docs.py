"""Results documents for the platform's tests (certify, status, submission, farm, suite hash): a passing run of a
target with the device and driver evidence a real run of it records, and the outcomes of one."""

from __future__ import annotations

import os
from pathlib import Path

from ironaccel.cts import results, spec, targets


def outcomes(doc: dict) -> dict[str, str]:
    return {t["id"].split("::")[1]: t["outcome"] for t in doc["tests"]}


#: target -> (device name, vendor, DeviceInfo.driver, simulated, the driver library a run of it loads)
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



def passing_doc(target: str) -> dict:
    """A current, finished run in which every required clause of SPEC.md passes, with the device and driver
    evidence a run of ``target`` records (``SEEN``; none for other targets)."""
    from ironaccel.api import DeviceInfo, Limits

    required = [cid for cid, c in spec.load_clauses().items() if c.required]
    tests = [{"id": f"test_x.py::test_{cid}", "clauses": [cid], "outcome": "pass", "duration": 0.0, "message": ""}
             for cid in required]
    device = evidence = None
    if target in SEEN:
        name, vendor, driver, simulated, library = SEEN[target]
        device = DeviceInfo(target.split("/")[0], 0, name, vendor, driver, "1.0", simulated, 0,
                            Limits(0, 0, (0, 0, 0), (0, 0, 0), 0))
        evidence = {"driver": driver, "simulated": simulated, "libraries": [{"path": library, "sha256": "0" * 64}]}
    return results.document(targets.get(target), spec.current([target]).parts(target), "2026-11-30T04:30:00Z",
                            "ok", "", tests, device, evidence=evidence)


def current_of(tree: Path) -> spec.Current:
    """spec.current() as computed from the checkout at ``tree`` (a fresh process: nothing cached)."""
    import json
    import subprocess
    import sys

    code = ("import json; from ironaccel.cts import spec; c = spec.current(); "
            "print(json.dumps({'suite': c.suite, 'implementations': c.implementations}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                         capture_output=True, text=True, check=True, timeout=300).stdout
    found = json.loads(out)
    return spec.Current(found["suite"], found["implementations"])
