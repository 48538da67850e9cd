"""CUDA backend over cuda-python's driver API (``cuda.bindings.driver``) and NVRTC (``cuda.bindings.nvrtc``).

One module per concern (named as every backend names them: ``ironaccel.backends``), each with its reasons in
its docstring:

* ``native``  — loading libcuda (the real one or ironaccel's fake) and checking what its calls return;
* ``backend`` — the registered Backend: probe, device count, open;
* ``device``  — device info, memory, compilation, close;
* ``stream``  — streams, events and buffers: the hot paths;
* ``module``  — modules, kernels, and how launch arguments are packed;
* ``graph``   — stream capture replayed with cuGraphLaunch;
* ``nvrtc``   — CUDA C++ compilation and its cache;
* ``staging`` — the pinned ring and copy threads behind ``copy_htod`` from pageable memory;
* ``fast``    — the streams and events that go through the compiled hot paths when they load.
"""

from __future__ import annotations

from .backend import CudaBackend
from .device import CudaDevice, CudaHandles
from .module import CudaKernel, CudaModule
from .staging import DRIVER_STAGES_BYTES, PINNED_CHECK_BYTES, STAGING_BYTES
from .stream import CudaBuffer, CudaEvent, CudaStream

__all__ = ["CudaBackend", "CudaDevice", "CudaHandles", "CudaStream", "CudaEvent", "CudaBuffer", "CudaModule",
           "CudaKernel", "STAGING_BYTES", "PINNED_CHECK_BYTES", "DRIVER_STAGES_BYTES"]
