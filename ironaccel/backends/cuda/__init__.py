"""CUDA backend over cuda-python's driver API (``cuda.bindings.driver``) and NVRTC (``cuda.bindings.nvrtc``).

One module per concern, each with its reasons in its docstring:

* ``driver``  — loading libcuda (the real one or ironaccel's fake) and checking what its calls return;
* ``nvrtc``   — CUDA C++ compilation and its cache;
* ``staging`` — the pinned ring and copy threads behind ``copy_htod`` from pageable memory;
* ``device``  — the backend, device info, memory, compilation, close;
* ``stream``  — streams, events and buffers: the hot paths;
* ``module``  — modules, kernels, and how launch arguments are packed.
"""

from __future__ import annotations

from typing import Any

from . import driver
from .device import CudaBackend, CudaDevice, CudaHandles
from .module import CudaKernel, CudaModule
from .staging import PINNED_CHECK_BYTES, STAGING_BYTES
from .stream import CudaBuffer, CudaEvent, CudaStream

__all__ = ["CudaBackend", "CudaDevice", "CudaHandles", "CudaStream", "CudaEvent", "CudaBuffer", "CudaModule",
           "CudaKernel", "STAGING_BYTES", "PINNED_CHECK_BYTES"]


def _check(op: str, result: tuple) -> Any:
    """ironaccel.bench's raw floor checks its own ``cuMemHostAlloc`` with this, until it uses ``Device.native``
    (``CudaHandles.driver``) and ``driver.calls``; nothing in the backend calls it."""
    if result[0]:
        driver.fail(getattr(driver.cu, op), result[0])
    return result[1]


def __getattr__(name: str) -> Any:
    """``_cu`` (cuda.bindings.driver, read by ironaccel.bench's raw floor) and ``_fake`` (the fake's ctypes
    handle) are set when the driver loads."""
    if name == "_cu":
        return driver.cu
    if name == "_fake":
        return driver.fake
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
