"""The OpenCL backend: ironaccel's api.py over pyopencl, written as any third party would write one.

* Devices are every device of every OpenCL platform the ICD loader offers, in platform order; a target
  narrows the loader to one ICD (``drivers.py``).
* A Stream is an in-order command queue with profiling on (``events.timing``); an Event is a marker on it.
  Work is flushed when an event is recorded or waited on, so a wait on another queue's event never stalls.
* ``synchronize(timeout)`` polls a marker's status instead of blocking in ``clFinish``, so a timeout leaves
  no thread stuck in the driver.
* Kernels are OpenCL C (``lang="opencl"``), built with ``-cl-kernel-arg-info`` so their parameters are
  reflected (``Kernel.params``, against which api.py checks every launch): buffers are ``__global`` pointers
  bound in argument order, scalars are passed by value. Block size is the work-group size; the global size
  is grid x block, as in CUDA.

Modules, named as every ironaccel backend names them (``ironaccel.backends``): ``native`` (importing
pyopencl, its errors -> ironaccel's), ``backend`` (this one: the registered Backend), ``device``, ``memory``,
``stream``, ``module`` (OpenCL C, kernel reflection, the ``opencl`` language), ``drivers`` (the targets).
"""

from __future__ import annotations

from typing import Any

from ironaccel import api
from ironaccel.api import BackendInfo
from ironaccel.errors import NotAvailable

from . import native
from .device import OpenCLDevice
from .native import BACKEND


def _devices() -> list[Any]:
    cl = native.import_cl()
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:  # ocl-icd: PLATFORM_NOT_FOUND_KHR when no ICD is installed
        raise NotAvailable(BACKEND, "OpenCL ICD", f"no OpenCL platform ({exc}): install one, e.g. "
                                                  "apt-get install pocl-opencl-icd ocl-icd-libopencl1") from None
    return [d for p in platforms for d in p.get_devices()]


class OpenCLBackend(api.Backend):
    name = BACKEND

    def probe(self) -> BackendInfo:
        try:
            devices = _devices()
        except NotAvailable as exc:
            return BackendInfo(BACKEND, False, exc.detail)
        version = native.cl.VERSION_TEXT
        if not devices:
            return BackendInfo(BACKEND, False, "the OpenCL platforms have no device", version)
        names = ", ".join(f"{d.name} ({d.platform.name})" for d in devices)
        return BackendInfo(BACKEND, True, f"{len(devices)} device(s): {names}", version)

    def device_count(self) -> int:
        return len(_devices())

    def _open_device(self, index: int) -> OpenCLDevice:
        return OpenCLDevice(_devices()[index], index)
