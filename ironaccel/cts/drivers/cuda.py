"""The CUDA backend's drivers: ``fake`` (the fake libcuda of fakes/cuda, simulated) and ``nvidia``."""

from __future__ import annotations

import ctypes
from pathlib import Path

from ...api import DeviceInfo
from ...cbuild import find_compiler
from ...errors import NotAvailable
from ..targets import Target
from . import python_package_missing, suite_kernels

FAKE_DRIVER_NAME = "ironaccel fake libcuda"  # DeviceInfo.driver of the fake (it says so itself)
CUDA_PACKAGES = ("cuda.bindings", "pip install cuda-bindings nvidia-cuda-nvrtc")


def _is_fake(info: DeviceInfo) -> bool:
    return info.simulated and info.driver == FAKE_DRIVER_NAME


def _is_nvidia(info: DeviceInfo) -> bool:
    return not info.simulated and "nvidia" in f"{info.vendor} {info.name}".lower()


def _fake_requirements() -> str | None:
    why = python_package_missing(*CUDA_PACKAGES)
    if why is None:
        try:
            find_compiler()
        except NotAvailable as exc:
            why = f"no C compiler to build the fake libcuda ({exc.detail})"
    return why


def _nvidia_requirements() -> str | None:
    why = python_package_missing(*CUDA_PACKAGES)
    if why is not None:
        return why
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return ("no NVIDIA driver: libcuda.so.1 cannot be loaded (needs an NVIDIA GPU and its driver); without one, "
                "target cuda/fake runs the CUDA backend on the fake libcuda")
    return None


def _fake_sources() -> dict[str, Path]:
    """The fake libcuda's C sources and its loader, fakes.py (a build without the sources hashes without them)."""
    from ...fakes import source_dir

    found = {"ironaccel/fakes.py": Path(__file__).resolve().parents[2] / "fakes.py"}
    try:
        found["fakes/cuda"] = source_dir()
    except NotAvailable:
        pass
    return found


def _fake_build_hash() -> str | None:
    from ...fakes import source_hash

    return source_hash()


def native_op(op: str) -> bool:
    """A function of the CUDA driver API or of NVRTC, as cuda.bindings names them (``cuMemAllocAsync``)."""
    from cuda.bindings import driver, nvrtc

    return (op.startswith("cu") and callable(getattr(driver, op, None))) or (
        op.startswith("nvrtc") and callable(getattr(nvrtc, op, None)))


def drivers() -> list[Target]:
    kernels = (suite_kernels("cuda", ".cu"), suite_kernels("ptx", ".ptx"))  # cubins: KERNEL-13 loads its own
    return [
        # the fake's memory is its own: a limit (16 GiB, IRONACCEL_FAKE_CUDA_MEMORY) it enforces like a GPU
        Target("cuda", "fake", True, {"IRONACCEL_CUDA_DRIVER": "fake"}, _is_fake, _fake_requirements, kernels,
               native_op=native_op, memory="device", sources=_fake_sources(), build_hash=_fake_build_hash,
               library=r"/fakecuda/[^/]+/libcuda\.so", leak_check={"IRONACCEL_FAKE_CUDA_LEAKS": "error"},
               kernel_time_limit="IRONACCEL_FAKE_WATCHDOG_S"),
        Target("cuda", "nvidia", False, {"IRONACCEL_CUDA_DRIVER": "nvidia"}, _is_nvidia, _nvidia_requirements, kernels,
               native_op=native_op, library=r"/libcuda\.so"),  # the fake's name too: the judge tells them apart
    ]
