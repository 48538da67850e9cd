"""The hot paths through the compiled module (``ironaccel/_fast_c/``, loaded as ``native.fast``).

A device opened while ``native.fast`` is set uses these subclasses for its streams and events (``copy_htod``
is checked in C: a small one goes through the device's staging ring in C, a large one from pinned memory on an
idle stream is DMA'd and waited for in C, any other large one goes to the ring; events, ``record()`` and ``synchronize()``
are the compiled EventCore's and StreamCore's, bases of FastEvent and FastStream); each makes the same driver
call as the pure-Python method it replaces, through the entry points the module took from the same libcuda,
so the semantics (ordering, held copy destinations, typed errors naming the entry point) are the pure
path's. What is not a hot path (timeouts, host data other than an ndarray) goes to the pure-Python method.
Two records are the module's too wherever it loads: each CudaKernel's last resolved launches (its KernelCore
base: StreamCore.launch's plan and argument-rule fields by stream device, dims and argument types) and
``native.current`` (a ThreadCurrent: the thread's current context in C thread-local storage).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ... import api
from ... import native as fast_c  # ironaccel.native: the compiled hot paths (_fast_c/), not this package's native.py
from ...errors import DriverError
from . import native
from .native import calls, current, fail
from .module import _FAST_CODES
from .staging import DRIVER_STAGES_BYTES, PINNED_CHECK_BYTES, REUSE_BYTES, SMALL_COPY_BYTES, STAGING_SEGMENT
from .stream import CudaBuffer, CudaEvent, CudaStream

TAKE_PYTHON_PATH = -1  # the compiled launch's "not the common case" (ironaccel/_fast_c/launch.inc)
NO_SPARE_EVENT = -1  # the compiled record's "the device has no spare CUevent"
_compiled = fast_c.load()  # what native.fast is once libcuda is loaded (None: the pure-Python classes are used)


def configure() -> None:
    """Tell the compiled module what its launch checks against, and what its event and stream methods hand
    uncommon cases to; once native.fast is loaded."""
    native.fast.configure(CudaBuffer, current, STAGING_SEGMENT, REUSE_BYTES)
    native.fast.configure_buffers(CudaBuffer._release, DriverError)
    native.fast.configure_copies(np.ndarray, api.Stream.copy_htod, api.Stream.copy_dtoh, api.Stream.copy_htod_deferred,
                                 SMALL_COPY_BYTES, PINNED_CHECK_BYTES, DRIVER_STAGES_BYTES)
    native.fast.configure_streams(FastEvent, fail_named, api.Event.synchronize, api.Event.query,
                                  CudaEvent._synchronize, api.Stream.record, api.Stream.synchronize,
                                  api.Stream.launch)
    native.fast.configure_scalars(scalar_samples())


def scalar_samples() -> tuple[tuple[str, np.generic], ...]:
    """One value of each scalar argument type with its compiled launch code: the module reads a type's values
    in place only where its read of the sample agrees with the generic conversion."""
    values = (np.uint32(0x89ABCDEF), np.int32(-0x12345678), np.float32(1.5), np.float64(-2.25),
              np.int64(-0x123456789), np.uint64(0xFEDCBA9876543210))
    return tuple((_FAST_CODES[(v.dtype.kind, v.dtype.itemsize)], v) for v in values)


def fail_named(name: str, err: int) -> None:
    """native.fail for a call the compiled module made: the entry point by name, the CUresult as an int."""
    cu = native.cu
    fail(getattr(cu, name), cu.CUresult(err))


def compiled_base(name: str) -> tuple[type, ...]:
    """The compiled module's type ``name`` as a base class; none without the module. (Loaded but without its
    entry points, where libcuda could not give them, its types hand every call to the Python methods.)"""
    return (getattr(_compiled, name),) if _compiled is not None else ()


class FastEvent(*compiled_base("EventCore"), CudaEvent):  # type: ignore[misc]
    """Made by the compiled record (``_fast_c/stream.inc``): its fields, ``query``, ``synchronize`` without a timeout and
    the CUevent's return to the spare list are its compiled base's; a timeout and ``elapsed_ms`` are
    CudaEvent's."""


class FastStream(*compiled_base("StreamCore"), CudaStream):  # type: ignore[misc]
    """``record()`` (``record(event=e)`` too), ``synchronize()``, ``launch()``, ``copy_htod()`` and
    ``copy_htod_deferred()`` are its compiled base's (a timing event, a timeout, a launch's first use of its
    dims, a large or unusual copy, a closed device or a capture: api.Stream's methods, then these overrides)."""

    def _copy_dtoh(self, dst: np.ndarray, src: api.Buffer, src_offset: int) -> None:
        dev = self._dev
        if current.device != dev._id:
            dev._make_current()
        if src._last_stream is not self:
            src._used_on(self)
        err = native.fast.copy_dtoh(dst, src._ptr + src_offset, self._address)
        if err:
            fail_named("cuMemcpyDtoHAsync", err)
        self._held.append((next(self._numbers), dst))

    def _copy_htod(self, dst: api.Buffer, dst_offset: int, src: np.ndarray) -> None:
        if src.nbytes <= SMALL_COPY_BYTES:  # staged in one C call (the ring's room, memcpy, DMA)
            err = native.fast.staged_htod(self, dst, dst_offset, src, self._dev._staging)
            if err != TAKE_PYTHON_PATH:
                if err:
                    fail_named("cuMemcpyHtoDAsync", err)
                return
        super()._copy_htod(dst, dst_offset, src)  # a large copy, a pinned source, or the ring must advance

    def _record(self, timing: bool) -> CudaEvent:
        event = native.fast.record(self, timing)
        if type(event) is int:
            if event != NO_SPARE_EVENT:
                fail_named("cuEventRecord", event)
            dev = self._dev
            flags = native.cu.CUevent_flags
            dev._make_current()
            dev._spare_events[timing].append(
                calls.cuEventCreate(flags.CU_EVENT_DEFAULT if timing else flags.CU_EVENT_DISABLE_TIMING))
            return self._record(timing)  # another thread may take the new one first: then it creates another
        return event

    def _rerecord(self, event: api.Event) -> None:
        err = native.fast.rerecord(self, event)
        if err:
            fail_named("cuEventRecord", err)

    def _launch_plan(self, plan: api.LaunchPlan, args: Sequence[object]) -> None:
        """api.Stream._launch_plan in one C call (same rule, checks and side effects); what it does not take
        (the first launch of these argument types, a capture, anything that raises) goes the Python way."""
        err = native.fast.launch(plan, self, args)
        if err:
            if err == TAKE_PYTHON_PATH:
                return super()._launch_plan(plan, args)
            fail_named("cuLaunchKernel", err)
