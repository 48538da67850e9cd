"""The WebGPU backend's own behaviour, beyond the shared conformance suite, on every software driver this
machine has (webgpu/lavapipe, webgpu/swiftshader).

wgpu-native picks its Vulkan driver once per process, so each target's scenario runs in a child process
(this file run as a script, ``python tests/test_webgpu_backend.py SCENARIO TARGET``) that prints what it
saw as JSON; the assertions are the parent's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ironaccel import targets

WEBGPU = ["webgpu/lavapipe", "webgpu/swiftshader"]

# A shader whose storage binding is a fixed-size array: a smaller buffer bound to it is a validation error.
FIXED_ARRAY_WGSL = """
@group(0) @binding(0) var<storage, read_write> data: array<u32, 1024>;
@compute @workgroup_size(64)
fn fill_fixed(@builtin(global_invocation_id) g: vec3<u32>) { data[g.x] = 7u; }
"""
FILL_BYTE = 0xAB


def undersized_binding_after_fill(target: str) -> dict:
    """A fill, then a launch that binds 64 bytes where the shader's array needs 4096 (issue 12, item 3:
    the launch returned normally, synchronize() raised a raw wgpu error and the fill was dropped)."""
    import numpy as np

    import ironaccel as ia

    dev = ia.open_device("webgpu", 0)
    seen: dict = {"device": dev.info.name, "matches": targets.get(target).matches(dev.info)}
    kernel = dev.compile(FIXED_ARRAY_WGSL, "wgsl").kernel("fill_fixed")
    s = dev.create_stream()
    kept, small = dev.alloc(256), dev.alloc(64)
    s.fill(kept, FILL_BYTE)
    try:
        s.launch(kernel, 1, 64, (small,))
        seen["launch"] = None
    except Exception as exc:  # what it raised is the parent's to judge
        seen["launch"] = [type(exc).__name__, isinstance(exc, ia.InvalidArgument), str(exc)]
    try:
        out = np.zeros(256, np.uint8)
        s.copy_dtoh(out, kept)
        s.synchronize(timeout=60)
        seen["kept"] = out.tolist()
    except Exception as exc:
        seen["kept"] = f"{type(exc).__name__}: {exc}"
    seen["diagnostics"] = dev.diagnostics()
    dev.close()
    return seen


SCENARIOS = {f.__name__: f for f in (undersized_binding_after_fill,)}


def run_scenario(name: str, target: str) -> dict:
    why = targets.get(target).missing()
    if why is not None:
        pytest.skip(f"{target} cannot run here: {why}")
    env = {**os.environ, **targets.get(target).environment()}
    proc = subprocess.run([sys.executable, __file__, name, target], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode} (negative: a signal)\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}"
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["matches"], f"{target}: the child got device {seen['device']!r}, another driver"
    return seen


@pytest.mark.parametrize("target", WEBGPU)
def test_undersized_binding_fails_at_the_launch_and_keeps_earlier_work(target):
    seen = run_scenario("undersized_binding_after_fill", target)
    assert seen["launch"] is not None, "a launch binding 64 bytes to a 4096-byte array returned normally"
    kind, typed, message = seen["launch"]
    assert typed, f"the launch raised {kind}, not InvalidArgument: {message}"
    assert "Stream.launch" in message and "fill_fixed" in message, message
    assert seen["kept"] == [FILL_BYTE] * 256, f"the fill before the bad launch was not kept: {seen['kept']}"
    assert seen["diagnostics"] == []


if __name__ == "__main__":
    scenario, target_name = sys.argv[1:3]
    print(json.dumps(SCENARIOS[scenario](target_name)))
