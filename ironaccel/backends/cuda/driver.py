"""Loading the CUDA driver and checking what its calls return.

Every other module of the backend calls the driver, and every failed call must become the same typed
error (``DriverError`` naming the entry point, ``OutOfMemory`` for CUDA_ERROR_OUT_OF_MEMORY), so loading
and checking live here, once.

``IRONACCEL_CUDA_DRIVER=fake`` loads ironaccel's fake libcuda (``ironaccel.fakes.load()``) before
cuda.bindings does, so the whole backend runs on a machine with no GPU. Which library is really loaded is
read back from the library itself (the fake exports ``ironaccel_fake_identity``), never assumed.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

from ...errors import DriverError, NotAvailable, OutOfMemory

BACKEND = "cuda"
FAKE_IDENTITY = "ironaccel fake libcuda"

cu: Any = None  # cuda.bindings.driver, once initialized
fake: Any = None  # the fake libcuda (ctypes), when that is what is loaded
_init_lock = threading.Lock()


class _Current(threading.local):
    device = 0  # id of the Device whose primary context this thread has current (0: none)


#: Which Device's primary context the calling thread has current (see ``CudaDevice._make_current``).
current = _Current()


def load() -> Any:
    """cuda.bindings.driver with cuInit done; NotAvailable saying what was searched when it cannot be."""
    global cu, fake
    if cu is not None:
        return cu
    with _init_lock:
        if cu is not None:
            return cu
        want_fake = os.environ.get("IRONACCEL_CUDA_DRIVER") == "fake"
        if want_fake:
            try:
                from ... import fakes

                fakes.load()
            except Exception as exc:  # a fake that does not build or load is "not available", not a crash
                raise NotAvailable(BACKEND, "fake libcuda", f"ironaccel.fakes.load() failed: {type(exc).__name__}: {exc}") from None
        try:
            from cuda.bindings import driver
        except ImportError as exc:
            raise NotAvailable(BACKEND, "cuda.bindings",
                               f"the cuda-bindings package is not installed ({exc}): pip install cuda-bindings") from None
        try:
            (err,) = driver.cuInit(0)
        except Exception as exc:  # cuda.bindings raises when it cannot dlopen libcuda
            raise NotAvailable(BACKEND, "libcuda.so.1",
                               f"the NVIDIA driver library could not be loaded (searched by cuda.bindings: {exc})") from None
        if err:
            raise NotAvailable(BACKEND, "libcuda.so.1", f"cuInit failed: {error_name(driver, err)}")
        fake = _loaded_fake()
        if want_fake and fake is None:
            raise NotAvailable(BACKEND, "fake libcuda",
                               "IRONACCEL_CUDA_DRIVER=fake but the libcuda.so.1 cuda.bindings loaded is not the fake")
        cu = driver
    return cu


def _loaded_fake() -> ctypes.CDLL | None:
    """The libcuda.so.1 this process loaded, when it says it is the fake; None for a real driver."""
    try:
        lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
    except OSError:
        return None
    identity = getattr(lib, "ironaccel_fake_identity", None)
    if identity is None:
        return None
    identity.restype = ctypes.c_char_p
    return lib if identity() == FAKE_IDENTITY.encode() else None


def error_name(driver: Any, err: Any) -> str:
    res, name = driver.cuGetErrorName(err)
    return name.decode() if not res and name else f"CUresult {int(err)}"


def fail(op: str, err: Any) -> None:
    """Build and raise the typed error for a failed driver call (off the success path only)."""
    name = error_name(cu, err)
    res, text = cu.cuGetErrorString(err)
    detail = text.decode() if not res and text else ""
    if fake is not None and int(err) == int(cu.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS):
        fake.ironaccel_fake_last_report.restype = ctypes.c_char_p
        report = fake.ironaccel_fake_last_report()
        if report:
            detail = f"{detail}\n{report.decode(errors='replace')}"
    if err == cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
        raise OutOfMemory(BACKEND, op, int(err), name, detail)
    raise DriverError(BACKEND, op, int(err), name, detail)


def check(op: str, result: tuple) -> Any:
    """The one place a CUresult is checked: returns the call's value (or values), raises on failure."""
    if result[0]:
        fail(op, result[0])
    if len(result) == 2:
        return result[1]
    return result[1:] or None
