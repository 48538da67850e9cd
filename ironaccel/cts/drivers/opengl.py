"""The OpenGL backend's drivers (registered as ``targets.BUILTIN_DRIVERS["opengl"]``): ``llvmpipe``
(Mesa's CPU driver, simulated) and ``nvidia``; for each, how a child process selects it, how the harness
recognises its device, what is missing and how to fix it, and its kernels (conformance/kernels/glsl430).

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
from typing import Callable

from ...api import DeviceInfo
from . import python_package_missing, suite_kernels
from ..targets import Target, count_devices
from ...backends.opengl.module import LANG

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
        why = python_package_missing(name, "pip install moderngl glcontext (or pip install ironaccel[opengl])")
        if why is not None:
            return why
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
    nvidia = vendor_json("*nvidia*.json")
    if nvidia is None:
        return (f"no NVIDIA EGL vendor library (no *nvidia*.json under {', '.join(VENDOR_DIRS)}): needs an NVIDIA GPU "
                "and its driver's libEGL_nvidia.so.0; in a container, NVIDIA_DRIVER_CAPABILITIES must include graphics")
    if count_devices("opengl", _nvidia_environment()) == 0:
        return f"NVIDIA's EGL ({nvidia}) enumerates no device: this machine has no NVIDIA GPU EGL can open"
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


def _is_llvmpipe(info: DeviceInfo) -> bool:
    return info.simulated and info.driver == "llvmpipe"  # zink on lavapipe says llvmpipe in its name, not here


def _is_nvidia(info: DeviceInfo) -> bool:
    return not info.simulated and info.vendor.startswith("NVIDIA")


def native_op(op: str) -> bool:
    """A GL or EGL function, as libglvnd's dispatch libraries export it (``glBufferData``, ``eglInitialize``)."""
    if not op.startswith(("gl", "egl")):
        return False
    for soname in ("libOpenGL.so.0", "libGL.so.1", "libEGL.so.1"):
        try:
            if hasattr(ctypes.CDLL(soname), op):
                return True
        except OSError:
            continue
    return False


def _needs(driver_missing: Callable[[], str | None]) -> Callable[[], str | None]:
    return lambda: _python_packages() or _loaders() or driver_missing()


def drivers() -> list[Target]:
    kernels = (suite_kernels(LANG, ".comp", named_by_option=True),)
    packages = ("moderngl", "glcontext")  # their versions go into the results files
    return [
        Target("opengl", "llvmpipe", True, _llvmpipe_environment(), _is_llvmpipe, _needs(_llvmpipe_missing), kernels,
               packages=packages, native_op=native_op, library=r"/(kms_)?swrast_dri\.so|/libgallium[-.]"),
        Target("opengl", "nvidia", False, _nvidia_environment(), _is_nvidia, _needs(_nvidia_missing), kernels,
               packages=packages, native_op=native_op, library=r"/lib(EGL|GLX)_nvidia\.so|/libnvidia-glcore\.so"),
    ]
