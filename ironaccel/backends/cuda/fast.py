"""The hot paths through the compiled module (``ironaccel/_fast.c``, loaded as ``driver.fast``).

A device opened while ``driver.fast`` is set uses these subclasses for its streams and events (a small
pageable ``copy_htod`` goes through the device's staging ring in C); each override makes the same driver call as the pure-Python method it replaces, through the entry
points the module took from the same libcuda, so the semantics (ordering, held copy destinations, typed
errors naming the entry point) are the pure path's. What is not a hot path (timeouts, large copies,
pinned sources) goes to the pure-Python method.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ... import api
from . import driver
from .driver import calls, current, fail
from .staging import REUSE_BYTES, SMALL_COPY_BYTES, STAGING_SEGMENT
from .stream import CudaBuffer, CudaEvent, CudaStream

CUDA_ERROR_NOT_READY = 600
TAKE_PYTHON_PATH = -1  # the compiled launch's "not the common case" (ironaccel/_fast.c)
NO_SPARE_EVENT = -1  # the compiled record's "the device has no spare CUevent"


def configure() -> None:
    """Tell the compiled module what its launch checks against; once driver.fast is loaded."""
    driver.fast.configure(CudaBuffer, current, STAGING_SEGMENT, REUSE_BYTES)


def fail_named(name: str, err: int) -> None:
    """driver.fail for a call the compiled module made: the entry point by name, the CUresult as an int."""
    cu = driver.cu
    fail(getattr(cu, name), cu.CUresult(err))


class FastEvent(CudaEvent):
    """Made by the compiled record (``_fast.c``), which sets every field; ``_address``: the CUevent as an int."""

    __slots__ = ("_address",)

    def _query(self) -> bool:
        err = driver.fast.event_query(self._address)
        if not err:
            if self._mark:
                self._stream._release_held(self._mark)
            return True
        if err == CUDA_ERROR_NOT_READY:
            return False
        fail_named("cuEventQuery", err)
        return False

    def _synchronize(self, timeout: float | None = None) -> None:
        if timeout is not None:
            return super()._synchronize(timeout)
        err = driver.fast.event_synchronize(self._address)
        if err:
            fail_named("cuEventSynchronize", err)
        if self._mark:
            self._stream._release_held(self._mark)


class FastStream(CudaStream):
    def _copy_dtoh(self, dst: np.ndarray, src: api.Buffer, src_offset: int) -> None:
        dev = self._dev
        if current.device != dev._id:
            dev._make_current()
        src._last_stream = self
        err = driver.fast.copy_dtoh(dst, src._ptr + src_offset, self._address)
        if err:
            fail_named("cuMemcpyDtoHAsync", err)
        self._held.append((next(self._numbers), dst))

    def _copy_htod(self, dst: api.Buffer, dst_offset: int, src: np.ndarray) -> None:
        if src.nbytes <= SMALL_COPY_BYTES:  # staged in one C call (the ring's room, memcpy, DMA)
            err = driver.fast.staged_htod(self, dst, dst_offset, src, self._dev._staging)
            if err != TAKE_PYTHON_PATH:
                if err:
                    fail_named("cuMemcpyHtoDAsync", err)
                return
        super()._copy_htod(dst, dst_offset, src)  # a large copy, a pinned source, or the ring must advance

    def _record(self, timing: bool) -> CudaEvent:
        event = driver.fast.record(self, timing, FastEvent)
        if type(event) is int:
            if event != NO_SPARE_EVENT:
                fail_named("cuEventRecord", event)
            dev = self._dev
            flags = driver.cu.CUevent_flags
            dev._make_current()
            dev._spare_events[timing].append(
                calls.cuEventCreate(flags.CU_EVENT_DEFAULT if timing else flags.CU_EVENT_DISABLE_TIMING))
            return self._record(timing)  # another thread may take the new one first: then it creates another
        return event

    def _synchronize(self, timeout: float | None = None) -> None:
        if timeout is not None:
            return super()._synchronize(timeout)
        if self._needs_current and current.device != self._dev._id:
            self._dev._make_current()
        mark = next(self._numbers) if self._held else 0
        err = driver.fast.stream_synchronize(self._address)
        if err:
            fail_named("cuStreamSynchronize", err)
        if mark:
            self._release_held(mark)

    def _launch_plan(self, plan: api.LaunchPlan, args: Sequence[object]) -> None:
        """api.Stream._launch_plan in one C call (same rule, checks and side effects); what it does not take
        (the first launch of these argument types, a capture, anything that raises) goes the Python way."""
        err = driver.fast.launch(plan, self, args)
        if err:
            if err == TAKE_PYTHON_PATH:
                return super()._launch_plan(plan, args)
            fail_named("cuLaunchKernel", err)
