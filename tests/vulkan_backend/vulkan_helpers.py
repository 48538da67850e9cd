"""What the Vulkan backend's tests share: the software drivers and copy paths they run on, and two helpers
(a kernel of conformance/kernels/spirv, a buffer's bytes read back); the fixtures are in conftest.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ironaccel.cts import targets

KERNELS = Path(__file__).resolve().parents[2] / "conformance" / "kernels"
LAYER = Path("/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json")

# (target, direct mapping): lavapipe both ways, so the staging path discrete GPUs take is tested here too.
CONFIGS = [("vulkan/lavapipe", True), ("vulkan/lavapipe", False), ("vulkan/swiftshader", True)]


def missing(target: str) -> str | None:
    return targets.get(target).missing()


def spirv(device, name):
    return device.compile((KERNELS / "spirv" / f"{name}.spv").read_bytes(), "spirv").kernel(name)


def read(stream, buf, count=None, offset=0):
    out = np.zeros(buf.nbytes - offset if count is None else count, dtype=np.uint8)
    stream.copy_dtoh(out, buf, src_offset=offset)
    stream.synchronize()
    return out
