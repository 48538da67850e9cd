"""ironaccel: a low-level, hardware-agnostic GPU driver layer, proven by a shared conformance suite.

    import ironaccel as ia
    ia.backends()                       # which backends this machine can run, and why not
    dev = ia.open_device("webgpu", 0)   # NotAvailable when the runtime is missing
"""

from __future__ import annotations

from . import backends as _backends
from .api import BackendInfo, Buffer, Device, DeviceInfo, Event, Graph, Kernel, Limits, Module, Stream
from .errors import (
    CompileError,
    DriverError,
    InvalidArgument,
    IronAccelError,
    NotAvailable,
    OutOfMemory,
    Timeout,
    Unsupported,
    UseAfterFree,
)
from .pool import MemPool, PooledBuffer, PoolStats

__version__ = "0.1.0"

__all__ = [
    "backends",
    "open_device",
    "MemPool",
    "PooledBuffer",
    "PoolStats",
    "BackendInfo",
    "Buffer",
    "Device",
    "DeviceInfo",
    "Event",
    "Graph",
    "Kernel",
    "Limits",
    "Module",
    "Stream",
    "IronAccelError",
    "NotAvailable",
    "DriverError",
    "OutOfMemory",
    "InvalidArgument",
    "CompileError",
    "Unsupported",
    "UseAfterFree",
    "Timeout",
]


def backends() -> list[BackendInfo]:
    """Every registered backend, available or not, with the reason; never raises."""
    return _backends.infos()


def open_device(backend: str, index: int = 0) -> Device:
    """Open device ``index`` of ``backend``; NotAvailable when its runtime is missing."""
    return _backends.get(backend).open_device(index)
