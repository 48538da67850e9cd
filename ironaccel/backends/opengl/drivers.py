"""What a target needs to know about the OpenGL drivers: how a child process selects one, how the harness
recognises its device, what is missing and how to fix it. Plain data and functions, so whatever registry
``ironaccel.targets`` grows can register them.

Selection goes through libglvnd: ``__EGL_VENDOR_LIBRARY_FILENAMES`` names the one EGL vendor library the
process may load, so Mesa's software device and NVIDIA's devices never mix in one enumeration. Within Mesa,
``GALLIUM_DRIVER=llvmpipe`` makes the software device llvmpipe (not softpipe or zink) and
``LIBGL_ALWAYS_SOFTWARE=1`` keeps Mesa off any GPU it would otherwise drive. glcontext always opens its
display through EGL_PLATFORM_DEVICE_EXT on an enumerated device (never ``eglGetDisplay``), so
``EGL_PLATFORM`` plays no part and is not set.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
from dataclasses import dataclass, field
from typing import Callable

from ...api import DeviceInfo

VENDOR_DIRS = ("/usr/share/glvnd/egl_vendor.d", "/etc/glvnd/egl_vendor.d", "/usr/local/share/glvnd/egl_vendor.d")
DRI_DIRS = ("/usr/lib/x86_64-linux-gnu/dri", "/usr/lib/aarch64-linux-gnu/dri", "/usr/lib64/dri", "/usr/lib/dri")


def vendor_json(pattern: str) -> str | None:
    """The first glvnd EGL vendor file matching ``pattern`` ("*mesa*.json"), or None."""
    for folder in VENDOR_DIRS:
        for hit in sorted(glob.glob(f"{folder}/{pattern}")):
            return hit
    return None


def _python_packages() -> str | None:
    for name in ("moderngl", "glcontext"):
        if importlib.util.find_spec(name) is None:
            return f"Python package {name} is missing: pip install moderngl glcontext (or pip install ironaccel[opengl])"
    return None


def _loaders() -> str | None:
    """libglvnd's EGL and GL dispatch libraries (glcontext opens both; the vendor's library sits behind them)."""
    for soname, package in (("libEGL.so.1", "libegl1"), ("libGL.so.1", "libgl1")):
        try:
            ctypes.CDLL(soname)
        except OSError as exc:
            return f"the GL vendor-neutral loader {soname} does not load ({exc}): apt-get install {package}"
    return None


def _llvmpipe_missing() -> str | None:
    if vendor_json("*mesa*.json") is None:
        return (f"Mesa's EGL vendor library is not registered (no *mesa*.json under {', '.join(VENDOR_DIRS)}): "
                "apt-get install libegl-mesa0 (or run ci/provision)")
    if not any(glob.glob(f"{d}/swrast_dri.so") for d in DRI_DIRS):
        return (f"Mesa's software rasterizer swrast_dri.so is missing (searched {', '.join(DRI_DIRS)}): "
                "apt-get install libgl1-mesa-dri (or run ci/provision)")
    return None


def _nvidia_missing() -> str | None:
    if vendor_json("*nvidia*.json") is None:
        return (f"no NVIDIA EGL vendor library (no *nvidia*.json under {', '.join(VENDOR_DIRS)}): needs an NVIDIA GPU "
                "and its driver's libEGL_nvidia.so.0; in a container, NVIDIA_DRIVER_CAPABILITIES must include graphics")
    return None


def _llvmpipe_environment() -> dict[str, str]:
    env = {"GALLIUM_DRIVER": "llvmpipe", "LIBGL_ALWAYS_SOFTWARE": "1"}
    mesa = vendor_json("*mesa*.json")
    if mesa is not None:
        env["__EGL_VENDOR_LIBRARY_FILENAMES"] = mesa
    return env


def _nvidia_environment() -> dict[str, str]:
    nvidia = vendor_json("*nvidia*.json")
    return {"__EGL_VENDOR_LIBRARY_FILENAMES": nvidia} if nvidia is not None else {}


@dataclass(frozen=True)
class OpenGLDriver:
    name: str
    simulated: bool
    environment: Callable[[], dict[str, str]]  # what a child process sets to select the driver
    matches: Callable[[DeviceInfo], bool]  # is this device the driver's?
    _missing: Callable[[], str | None] = field(repr=False)

    def missing(self) -> str | None:
        """None when this machine can run the driver, else what is missing and how to fix it."""
        return _python_packages() or _loaders() or self._missing()


DRIVERS: dict[str, OpenGLDriver] = {
    "llvmpipe": OpenGLDriver("llvmpipe", True, _llvmpipe_environment,
                             lambda info: info.simulated and info.driver == "llvmpipe", _llvmpipe_missing),
    "nvidia": OpenGLDriver("nvidia", False, _nvidia_environment,
                           lambda info: not info.simulated and info.vendor.startswith("NVIDIA"), _nvidia_missing),
}
