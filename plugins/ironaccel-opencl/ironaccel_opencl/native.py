"""pyopencl, imported when first needed, and the one place its errors become ironaccel's."""

from __future__ import annotations

from typing import Any

from ironaccel.errors import DriverError, NotAvailable, OutOfMemory

BACKEND = "opencl"

cl: Any = None  # pyopencl, once import_cl has imported it


def import_cl() -> Any:
    global cl
    if cl is None:
        try:
            import pyopencl
        except ImportError as exc:
            raise NotAvailable(BACKEND, "pyopencl", f"the pyopencl package is not installed ({exc}): "
                                                    "pip install pyopencl") from None
        cl = pyopencl
    return cl


def call(op: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a pyopencl call, turning its errors into ours: the one place OpenCL errors are translated."""
    try:
        return fn(*args, **kwargs)
    except cl.Error as exc:
        error = OutOfMemory if isinstance(exc, cl.MemoryError) else DriverError
        raise error(BACKEND, op, exc.code, _status_name(exc.code), str(exc)) from None


def _status_name(code: int) -> str:
    """CL_MEM_OBJECT_ALLOCATION_FAILURE for -4: the names OpenCL's headers give the status codes."""
    names = {v: k for k, v in vars(cl.status_code).items() if isinstance(v, int) and not k.startswith("_")}
    return f"CL_{names[code]}" if code in names else f"OpenCL error {code}"
