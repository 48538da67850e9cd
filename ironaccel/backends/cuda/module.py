"""Loaded modules, their kernels, and how launch arguments are packed for ``cuLaunchKernel``.

A kernel's parameters are read from the PTX ``.entry`` declaration (or asked of the driver for a cubin),
so ``Stream.launch`` (api.py) rejects wrong arguments instead of launching undefined behaviour. Arguments are
packed by one ``struct.pack_into`` per launch into per-thread slots; the struct is built once per kernel
and sequence of argument types.
"""

from __future__ import annotations

import re
import struct
import threading
import weakref
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ... import api
from ... import native as fast_c  # ironaccel.native: the compiled hot paths (_fast_c/), not this package's native.py
from .native import calls, fail

if TYPE_CHECKING:
    from .device import CudaDevice

_ENTRY_RE = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(([^)]*)\)")
_PARAM_RE = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.([a-z]+)(\d+)\s+(\.ptr\s+(?:\.\w+\s+|\d+\s+)*)?[\w$]+(?:\[(\d+)\])?")


def _ptx_param(kind: str, bits: str, pointer: str, count: str) -> api.Param:
    """One ``.param`` declaration as a Param: ``.ptr`` marks a buffer; a ``.u64``/``.b64`` is a pointer or a
    64-bit integer (PTX does not say which); an array (a struct passed by value) is bytes of no kind."""
    nbytes = int(bits) // 8 * int(count or 1)
    if pointer:
        return api.Param("buffer", nbytes)
    if count:
        return api.Param("scalar", nbytes, "")
    if nbytes == 8 and kind in ("u", "b"):
        return api.Param("buffer-or-scalar", nbytes, "int")
    return api.Param("scalar", nbytes, "float" if kind == "f" else "int")


def ptx_entries(ptx: str) -> dict[str, tuple[api.Param, ...]]:
    """Kernel name -> its parameters, read from the PTX ``.entry`` declarations."""
    return {name: tuple(_ptx_param(*found) for found in _PARAM_RE.findall(params))
            for name, params in _ENTRY_RE.findall(ptx)}


def binary_entries(cu: Any, module: Any) -> dict[str, tuple[api.Param, ...]]:
    """Kernel name -> parameters of a loaded binary image, asked of the driver (a cubin has no PTX): sizes
    only, so an 8-byte parameter may be a buffer and no scalar has a known kind."""
    count = calls.cuModuleGetFunctionCount(module)
    entries = {}
    for fn in calls.cuModuleEnumerateFunctions(count, module):
        name = calls.cuFuncGetName(fn)
        params = []
        while True:
            err, _offset, size = cu.cuFuncGetParamInfo(fn, len(params))
            if err == cu.CUresult.CUDA_ERROR_INVALID_VALUE:  # past the last parameter
                break
            if err:
                fail(cu.cuFuncGetParamInfo, err)
            params.append(api.Param("buffer-or-scalar" if size == 8 else "scalar", int(size), ""))
        entries[name.decode() if isinstance(name, bytes) else str(name)] = tuple(params)
    return entries


class CudaModule(api.Module):
    """A loaded CUmodule. Unloaded by ``close()`` once the device's queued work is done, or, dropped unclosed,
    by the device's next compile or close (``CudaDevice._unload``): a collector never waits for the device."""

    def __init__(self, device: CudaDevice, lang: str, handle: Any, entries: dict[str, tuple[api.Param, ...]]):
        super().__init__(device, lang)
        self._handle = handle
        self._entries = entries
        device._modules[int(handle)] = handle
        self._dropped = weakref.finalize(self, device._dropped_modules.append, int(handle))
        self._dropped.atexit = False  # at exit the device's close unloads it

    def _release(self) -> None:
        self._dropped.detach()
        for kernel in self._kernels.values():
            kernel._function_address = 0  # the compiled launch resolves no launch of it again
        self.device._unload([int(self._handle)])

    def _kernel_names(self) -> Sequence[str]:
        return list(self._entries)

    def _make_kernel(self, name: str) -> CudaKernel:
        dev = self.device
        dev._make_current()
        fn = calls.cuModuleGetFunction(self._handle, name.encode())
        return CudaKernel(self, name, fn, self._entries[name])


#: struct codes of the scalar argument types, each padded to its 8-byte parameter slot
_SCALAR_CODES = {("f", 4): "I4x", ("f", 8): "d", ("i", 4): "i4x", ("i", 8): "q", ("u", 4): "I4x", ("u", 8): "Q"}
#: the compiled launch's codes of the same types (ironaccel/_fast_c/launch.inc): B a buffer's pointer
_FAST_CODES = {("f", 4): "f", ("f", 8): "d", ("i", 4): "i", ("i", 8): "q", ("u", 4): "i", ("u", 8): "Q"}


class Signature:
    """How one sequence of argument types is packed: a struct over the kernel's 8-byte parameter slots (the
    pure-Python launch) and one code byte per argument (the compiled one). Made once per sequence of types
    from the api's rule (``Kernel._prepare_args``): the types were checked against ``Kernel.params`` and
    ``buffers`` says where the Buffers are."""

    __slots__ = ("struct", "buffers", "codes", "float32")

    def __init__(self, types: Sequence[type], buffers: tuple[int, ...]):
        kinds = [None if i in buffers else (np.dtype(t).kind, np.dtype(t).itemsize) for i, t in enumerate(types)]
        self.struct = struct.Struct("<" + "".join("Q" if k is None else _SCALAR_CODES[k] for k in kinds))
        self.buffers = buffers
        self.codes = "".join("B" if k is None else _FAST_CODES[k] for k in kinds).encode()
        # packed as their bits (``I``): struct's ``f`` converts through a double, which quiets a signalling NaN
        self.float32 = tuple(i for i, k in enumerate(kinds) if k == ("f", 4))


class _Slots(threading.local):
    """One thread's parameter slots of a kernel: 8 bytes per parameter and the void** array pointing at them."""

    def __init__(self, count: int):
        self.storage = np.zeros(max(count, 1), dtype=np.uint64)
        self.pointers = self.storage.ctypes.data + 8 * np.arange(len(self.storage), dtype=np.uint64)
        # what a launch reads, as one attribute: each read of a thread-local costs ~40 ns
        self.view_and_address = (memoryview(self.storage).cast("B"), self.pointers.ctypes.data)


_compiled = fast_c.load()  # None: the pure-Python path (no compiler here, or IRONACCEL_PURE_PYTHON=1)


class CudaKernel(*((_compiled.KernelCore,) if _compiled else ()), api.Kernel):  # type: ignore[misc]
    """A CUfunction and its parameters. A launch packs its arguments with one ``struct.pack_into`` into
    the calling thread's reusable slots (or in C), by the Signature prepared with the api's rule. Where the
    compiled module loads, its KernelCore base holds ``_function_address`` and the launches its
    StreamCore.launch resolved for this kernel."""

    def __init__(self, module: CudaModule, name: str, function: Any, params: tuple[api.Param, ...]):
        super().__init__(module, name)
        self._function = function
        self._function_address = int(function)  # for the compiled launch
        self._param_list = params
        self._slots = _Slots(len(params))

    def _native(self) -> Any:
        return self._function

    def _params(self) -> tuple[api.Param, ...]:
        return self._param_list

    def _prepare_args(self, types: tuple[type, ...], buffers: tuple[int, ...]) -> Signature:
        return Signature(types, buffers)
