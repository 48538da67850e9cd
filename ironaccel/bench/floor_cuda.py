"""The CUDA floor: the least a cuda.bindings program does for each case, one driver call per step, arguments
ready, on ironaccel's own context and stream (``Device.native``, ``Stream.native``, ``Kernel.native``)."""

from __future__ import annotations

import ctypes
from typing import Any, Callable

import numpy as np

from ..errors import DriverError
from .cases import ALLOC_BYTES, Impl, pageable
from .ours import KernelCall
from .stats import timed, timed_each, timed_then

EMPTY_CUDA = 'extern "C" __global__ void empty(float* x, float a, unsigned n) { if (n > 0u) x[0] = a; }'


def checked(cu: Any, op: str, result: tuple) -> Any:
    """The value of a cuda.bindings call that succeeded; a DriverError naming ``op`` otherwise."""
    if result[0] != cu.CUresult.CUDA_SUCCESS:
        raise DriverError("cuda", op, int(result[0]), result[0].name)
    return result[1] if len(result) == 2 else result[1:]


class PinnedHost:
    """Page-locked host arrays (cuMemHostAlloc), touched, freed together at ``close``."""

    def __init__(self, cu: Any):
        self._cu = cu
        self._blocks: list[int] = []

    def __call__(self, n: int) -> np.ndarray:
        ptr = int(checked(self._cu, "cuMemHostAlloc", self._cu.cuMemHostAlloc(n, 0)))
        self._blocks.append(ptr)
        host = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr))
        host[:] = 7
        return host

    def close(self) -> None:
        for ptr in self._blocks:
            self._cu.cuMemFreeHost(ptr)
        self._blocks.clear()


def setup(dev: Any, stream: Any, sizes: tuple[int, ...], pinned: PinnedHost
          ) -> tuple[dict[str, Impl], KernelCall | None, list[Callable[[], None]]]:
    """The raw floor's implementations, the kernel ironaccel launches, and the cleanup (in order)."""
    cu = dev.native.driver
    h = stream.native
    cleanup: list[Callable[[], None]] = []
    module = dev.compile(EMPTY_CUDA, "cuda") if dev.supports("lang.cuda") else None
    kbuf = dev.alloc(256)
    cleanup.append(kbuf.free)
    kernel = (module.kernel("empty"), (kbuf, np.float32(2), np.uint32(0))) if module else None
    impls: dict[str, Impl] = {}

    def alloc_free() -> None:
        _, p = cu.cuMemAllocAsync(ALLOC_BYTES, h)
        cu.cuMemFreeAsync(p, h)

    impls["alloc_free.device"] = impls["alloc_free.pool"] = timed(alloc_free)
    sync = cu.cuStreamSynchronize
    impls["stream_sync"] = timed(lambda: sync(h))
    event = checked(cu, "cuEventCreate", cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING))
    cleanup.append(lambda: cu.cuEventDestroy(event))
    record, wait = cu.cuEventRecord, cu.cuEventSynchronize
    impls["event_record_sync"] = timed(lambda: (record(event, h), wait(event)))
    if kernel is not None:
        fn = kernel[0].native
        params = np.zeros(3, dtype=np.uint64)  # one 8-byte slot per argument, packed once
        params[0] = kbuf.handle
        params.view(np.float32)[2] = 2.0
        pointers = params.ctypes.data + 8 * np.arange(3, dtype=np.uint64)
        launch = cu.cuLaunchKernel
        addr = pointers.ctypes.data

        def one() -> None:
            launch(fn, 1, 1, 1, 1, 1, 1, 0, h, addr, 0)

        impls["launch.async"] = timed_then(one, lambda: sync(h))
        impls["launch.single"] = timed_each(one, lambda: sync(h))
        impls["launch.sync"] = timed(lambda: (one(), sync(h)))
        cleanup.append(lambda: (params, pointers))  # keep the packed arguments alive to the end
    for n in sizes:
        if n > dev.info.limits.max_alloc:
            continue
        d = checked(cu, "cuMemAlloc", cu.cuMemAlloc(n))
        cleanup.append(lambda d=d: cu.cuMemFree(d))
        for memory, host in (("pageable", pageable(n)), ("pinned", pinned(n))):
            p = host.ctypes.data
            impls[f"htod.{memory}.{n}.call"] = timed_each(lambda d=d, p=p, n=n, host=host: cu.cuMemcpyHtoDAsync(d, p, n, h),
                                                          lambda: sync(h))
            impls[f"htod.{memory}.{n}"] = timed(lambda d=d, p=p, n=n, host=host: (cu.cuMemcpyHtoDAsync(d, p, n, h), sync(h)))
            impls[f"dtoh.{memory}.{n}"] = timed(lambda d=d, p=p, n=n, host=host: (cu.cuMemcpyDtoHAsync(p, d, n, h), sync(h)))
    return impls, kernel, cleanup
