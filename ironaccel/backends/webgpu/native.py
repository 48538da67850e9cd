"""Loading wgpu-py and the one place its errors become ironaccel's.

``call(fn, *args)`` names the op after the wgpu method itself (``GPUDevice.create_buffer``), so no call
site types its op twice, and turns wgpu's exceptions into typed errors carrying wgpu's message."""

from __future__ import annotations

import time
from typing import Any

from ...errors import DriverError, NotAvailable, OutOfMemory, Timeout

BACKEND = "webgpu"

_wgpu: Any = None


def import_wgpu() -> Any:
    global _wgpu
    if _wgpu is None:
        try:
            import wgpu
        except ImportError as exc:
            raise NotAvailable(BACKEND, "wgpu", f"the wgpu package is not installed ({exc}): pip install wgpu") from None
        _wgpu = wgpu
    return _wgpu


def op_name(fn: Any) -> str:
    """``GPUDevice.create_buffer`` for a bound wgpu method."""
    owner = getattr(fn, "__self__", None)
    return f"{type(owner).__name__}.{fn.__name__}" if owner is not None else fn.__qualname__


def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a wgpu method, turning its errors into ours."""
    try:
        return fn(*args, **kwargs)
    except _wgpu.GPUError as exc:
        raise translate(op_name(fn), exc) from None


def translate(op: str, exc: Exception) -> DriverError:
    if isinstance(exc, _wgpu.GPUOutOfMemoryError):
        return OutOfMemory(BACKEND, op, None, "GPUOutOfMemoryError", _first_line(exc))
    if "Not enough memory left" in str(exc):  # wgpu-native reports allocation failure as validation
        return OutOfMemory(BACKEND, op, None, "GPUOutOfMemoryError", clean(exc))
    return DriverError(BACKEND, op, None, type(exc).__name__, clean(exc))


def wait(promise: Any, op: str, timeout: float | None, deadline: float | None = None) -> Any:
    """The promise's value; with a ``timeout`` (counted to ``deadline`` when given), Timeout(op) when it is
    still pending by then.

    wgpu-py resolves promises from its own poll thread, so waiting is watching the promise's state; no
    thread of ours is left blocked in wgpu-native when the wait gives up."""
    if timeout is not None:
        deadline = time.monotonic() + timeout if deadline is None else deadline
        pause = 1e-5
        while promise._state == "pending":  # wgpu's promise: pending until the queue got there
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout(op, timeout, "the GPU has not reached this point yet")
            time.sleep(min(pause, left))
            pause = min(pause * 2, 5e-3)
    return call(promise.sync_wait)


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def clean(exc: Exception) -> str:
    """wgpu's message without its boilerplate first lines, on one line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    lines = [ln for ln in lines if ln not in ("Validation Error", "Caused by:")]
    return " / ".join(lines) or type(exc).__name__
