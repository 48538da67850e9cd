"""Programs and kernels: OpenCL C built with argument info, kernel parameters reflected from it."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Sequence

from ironaccel import api
from ironaccel.api import Param
from ironaccel.errors import InvalidArgument

from . import native
from .native import call

if TYPE_CHECKING:
    from .device import OpenCLDevice


LANG = "opencl"
BUILD_OPTIONS = ("-cl-kernel-arg-info",)  # clGetKernelArgInfo answers only for programs built with it

api.register_language(LANG, "compile(lang='opencl'): OpenCL C")


#: OpenCL C scalar type names -> (bytes, "float"/"int").
_SCALARS = {"float": (4, "float"), "double": (8, "float"), "int": (4, "int"), "uint": (4, "int"),
            "long": (8, "int"), "ulong": (8, "int"), "unsigned int": (4, "int"), "unsigned long": (8, "int")}


class OpenCLKernel(api.Kernel):
    def __init__(self, module: OpenCLModule, name: str):
        super().__init__(module, name)
        self.cl_kernel = call("Module.kernel", native.cl.Kernel, module.program, name)
        self.lock = threading.Lock()
        self._reflected = self._reflect()
        device: OpenCLDevice = module.device  # type: ignore[assignment]
        # its __local arrays: a launch past the device's local memory aborts some drivers (PoCL) instead of failing
        self.local_bytes = call("Module.kernel", self.cl_kernel.get_work_group_info,
                                 native.cl.kernel_work_group_info.LOCAL_MEM_SIZE, device.cl_device)

    def _reflect(self) -> tuple[Param, ...]:
        cl, k = native.cl, self.cl_kernel
        out = []
        for i in range(k.num_args):
            qualifier = call("Module.kernel", k.get_arg_info, i, cl.kernel_arg_info.ADDRESS_QUALIFIER)
            type_name = call("Module.kernel", k.get_arg_info, i, cl.kernel_arg_info.TYPE_NAME).strip()
            if qualifier == cl.kernel_arg_address_qualifier.PRIVATE and type_name in _SCALARS:
                nbytes, kind = _SCALARS[type_name]
                out.append(Param("scalar", nbytes, kind))
            elif qualifier == cl.kernel_arg_address_qualifier.GLOBAL:
                out.append(Param("buffer"))
            else:
                raise InvalidArgument("Module.kernel", f"{self.name}: parameter {i} ({type_name}) is neither a "
                                                       "__global buffer nor a scalar ironaccel can pass")
        return tuple(out)

    def _params(self) -> tuple[Param, ...]:
        return self._reflected

    def _native(self) -> Any:
        return self.cl_kernel


class OpenCLModule(api.Module):
    def __init__(self, device: OpenCLDevice, program: Any):
        super().__init__(device, LANG)
        self.program = program

    def _kernel_names(self) -> Sequence[str]:
        return [n for n in self.program.kernel_names.split(";") if n]

    def _release(self) -> None:
        """Drop the cl.Program and its kernels: pyopencl releases each with its last reference, and OpenCL keeps
        what enqueued commands still use until they complete."""
        for kernel in self._kernels.values():
            kernel.cl_kernel = None  # type: ignore[attr-defined]
        self.program = None

    def _make_kernel(self, name: str) -> OpenCLKernel:
        return OpenCLKernel(self, name)
