"""Targets: a backend on one named driver (``cuda/fake``, ``vulkan/lavapipe``, ``webgpu/nvidia``, ...).

Each target runs in its own process, its driver chosen through the environment (``environment()``): an
ICD json through VK_DRIVER_FILES / VK_ICD_FILENAMES for Vulkan and WebGPU, IRONACCEL_CUDA_DRIVER=fake for
the fake libcuda, the EGL vendor library for OpenGL (backends/opengl/drivers.py describes its drivers).
``matches()`` is the harness's check that the device it got is the driver the target names, so a silent
fallback to another adapter fails the run instead of passing it.
"""

from __future__ import annotations

import ctypes.util
import glob
import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .api import DeviceInfo

if TYPE_CHECKING:
    from .backends.opengl.drivers import OpenGLDriver


def cache_dir() -> Path:
    """Where provisioned drivers and built fakes live: $IRONACCEL_CACHE or ~/.cache/ironaccel."""
    return Path(os.environ.get("IRONACCEL_CACHE") or Path.home() / ".cache" / "ironaccel")


ICD_SEARCH: dict[str, tuple[str, ...]] = {
    "lavapipe": ("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json", "/usr/share/vulkan/icd.d/lvp_icd.*.json"),
    "swiftshader": ("{cache}/swiftshader/vk_swiftshader_icd.json",),
    "nvidia": (
        "/usr/share/vulkan/icd.d/nvidia_icd.json",
        "/etc/vulkan/icd.d/nvidia_icd.json",
        "/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json",
    ),
}

FIXES = {
    "lavapipe": "install Mesa's Vulkan drivers: `apt-get install mesa-vulkan-drivers libvulkan1` (or run ci/provision)",
    "swiftshader": "run `ci/provision` (extracts SwiftShader from Debian's chromium-common into the cache)",
    "nvidia": "needs an NVIDIA GPU with its driver's Vulkan ICD (nvidia_icd.json) and libvulkan1",
}


def find_icd(driver: str) -> Path | None:
    for pattern in ICD_SEARCH.get(driver, ()):
        for hit in sorted(glob.glob(pattern.format(cache=cache_dir()))):
            return Path(hit)
    return None


def _opengl_driver(name: str) -> OpenGLDriver:
    """The OpenGL backend keeps its driver knowledge in its own package (imported only when asked)."""
    from .backends.opengl.drivers import DRIVERS

    return DRIVERS[name]


@dataclass(frozen=True)
class Target:
    backend: str
    driver: str
    simulated: bool

    @property
    def name(self) -> str:
        return f"{self.backend}/{self.driver}"

    def environment(self) -> dict[str, str]:
        """Variables that make a child process select this target's driver."""
        env = {"IRONACCEL_TARGET": self.name}
        if self.backend in ("vulkan", "webgpu"):
            icd = find_icd(self.driver)
            if icd is not None:
                env["VK_DRIVER_FILES"] = env["VK_ICD_FILENAMES"] = str(icd)
        if self.backend == "cuda":
            env["IRONACCEL_CUDA_DRIVER"] = self.driver
        if self.backend == "opengl":
            env.update(_opengl_driver(self.driver).environment())
        return env

    def matches(self, info: DeviceInfo) -> bool:
        """Is ``info`` a device of this target's driver?"""
        if info.backend != self.backend:
            return False
        if self.backend == "opengl":
            return _opengl_driver(self.driver).matches(info)
        name = info.name.lower()
        if self.driver == "lavapipe":
            return "llvmpipe" in name
        if self.driver == "swiftshader":
            return "swiftshader" in name
        if self.driver == "nvidia":
            return not info.simulated and "nvidia" in (info.vendor + " " + info.name).lower()
        if self.driver == "fake":
            return info.simulated and info.driver == "ironaccel fake libcuda"
        return False

    def missing(self) -> str | None:
        """None when this machine can run the target, else what is missing and how to fix it."""
        if self.backend == "opengl":
            return _opengl_driver(self.driver).missing()
        python_pkg = {"webgpu": ("wgpu", "pip install wgpu"), "vulkan": ("vulkan", "pip install vulkan"),
                      "cuda": ("cuda.bindings", "pip install cuda-bindings nvidia-cuda-nvrtc")}[self.backend]
        try:
            found = importlib.util.find_spec(python_pkg[0]) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"Python package {python_pkg[0]} is missing: {python_pkg[1]}"
        from .backends import get as get_backend
        from .errors import NotAvailable

        try:
            get_backend(self.backend)
        except NotAvailable as exc:
            return f"the {self.backend} backend does not load: {exc.detail}"
        if self.backend in ("vulkan", "webgpu"):
            if ctypes.util.find_library("vulkan") is None:
                return "the Vulkan loader libvulkan.so.1 is missing: apt-get install libvulkan1"
            if find_icd(self.driver) is None:
                searched = ", ".join(p.format(cache=cache_dir()) for p in ICD_SEARCH[self.driver])
                return f"no {self.driver} Vulkan ICD (searched {searched}): {FIXES[self.driver]}"
            return None
        if self.driver == "fake":
            if not any(shutil.which(cc) for cc in (os.environ.get("CC", "cc"), "cc", "gcc", "clang")):
                return "no C compiler to build the fake libcuda (searched $CC, cc, gcc, clang): apt-get install gcc"
            return None
        try:
            ctypes.CDLL("libcuda.so.1")
        except OSError:
            return "no NVIDIA driver: libcuda.so.1 cannot be loaded (needs an NVIDIA GPU and its driver)"
        return None


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("cuda", "fake", True),
        Target("cuda", "nvidia", False),
        Target("vulkan", "lavapipe", True),
        Target("vulkan", "swiftshader", True),
        Target("vulkan", "nvidia", False),
        Target("webgpu", "lavapipe", True),
        Target("webgpu", "swiftshader", True),
        Target("webgpu", "nvidia", False),
        Target("opengl", "llvmpipe", True),
        Target("opengl", "nvidia", False),
    )
}


def get(name: str) -> Target:
    from .errors import InvalidArgument

    if name not in TARGETS:
        raise InvalidArgument("targets.get", f"unknown target {name!r}; known: {', '.join(TARGETS)}")
    return TARGETS[name]
