"""CUDA backend over cuda-python's driver API (``cuda.bindings.driver``) and NVRTC (``cuda.bindings.nvrtc``).

One module per concern, each with its reasons in its docstring:

* ``native``  — loading libcuda (the real one or ironaccel's fake) and checking what its calls return;
* ``nvrtc``   — CUDA C++ compilation and its cache;
* ``staging`` — the pinned ring and copy threads behind ``copy_htod`` from pageable memory;
* ``device``  — the backend, device info, memory, compilation, close;
* ``stream``  — streams, events and buffers: the hot paths;
* ``module``  — modules, kernels, and how launch arguments are packed.
"""

from __future__ import annotations

from .backend import CudaBackend
from .device import CudaDevice, CudaHandles
from .module import CudaKernel, CudaModule
from .staging import PINNED_CHECK_BYTES, STAGING_BYTES
from .stream import CudaBuffer, CudaEvent, CudaStream

__all__ = ["CudaBackend", "CudaDevice", "CudaHandles", "CudaStream", "CudaEvent", "CudaBuffer", "CudaModule",
           "CudaKernel", "STAGING_BYTES", "PINNED_CHECK_BYTES"]
