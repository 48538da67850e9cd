"""The CUDA floor: the least a cuda.bindings program does for each case, one driver call per step, arguments
ready, on ironaccel's own context, stream and kernels (``Device.native``, ``Stream.native``,
``Kernel.native``); and the pinned host memory the CUDA copies use."""

from __future__ import annotations

import ctypes
from typing import Any, Callable

import numpy as np

from ...errors import DriverError
from . import kernels
from .cases import ALLOC_BYTES, GRAPH_LAUNCHES, Impl, pageable
from .ours import KernelCall
from .stats import timed, timed_each, timed_then


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


def packed(args: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray]:
    """cuLaunchKernel's kernelParams for ``args``, packed once: one 8-byte slot per argument (a Buffer's
    device pointer, a scalar's bytes) and the array of pointers to the slots; both must outlive the launches."""
    slots = np.zeros(len(args), dtype=np.uint64)
    for i, a in enumerate(args):
        if isinstance(a, np.generic):
            slots[i:i + 1].view(np.uint8)[:a.nbytes] = np.frombuffer(a.tobytes(), np.uint8)
        else:
            slots[i] = a.handle
    pointers = slots.ctypes.data + 8 * np.arange(len(args), dtype=np.uint64)
    return slots, pointers


def _captured(cu: Any, h: Any, one: Callable[[], None], cleanup: list[Callable[[], Any]]) -> Any:
    """An executable graph of ``GRAPH_LAUNCHES`` calls of ``one`` captured on a private stream."""
    capture = checked(cu, "cuStreamCreate", cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
    checked(cu, "cuStreamBeginCapture",
            cu.cuStreamBeginCapture(capture, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
    for _ in range(GRAPH_LAUNCHES):
        one(capture)
    graph = checked(cu, "cuStreamEndCapture", cu.cuStreamEndCapture(capture))
    executable = checked(cu, "cuGraphInstantiate", cu.cuGraphInstantiate(graph, 0))
    cu.cuGraphDestroy(graph)
    cu.cuStreamDestroy(capture)
    cleanup.append(lambda: cu.cuGraphExecDestroy(executable))
    return executable


def setup(dev: Any, stream: Any, sizes: tuple[int, ...], pinned: PinnedHost, launches: dict[str, KernelCall]
          ) -> tuple[dict[str, Impl], list[Callable[[], None]]]:
    """The raw floor's implementations (launching ironaccel's kernels through ``Kernel.native``) and the
    cleanup, in order."""
    cu = dev.native.driver
    h = stream.native
    cleanup: list[Callable[[], None]] = []
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
    launch = cu.cuLaunchKernel
    for name, (kernel, args) in launches.items():
        fn = kernel.native
        slots, pointers = packed(args)
        addr = pointers.ctypes.data
        cleanup.append(lambda keep=(slots, pointers): keep)  # the packed arguments live to the end

        def one(stream: Any = h, fn: Any = fn, addr: int = addr) -> None:
            launch(fn, 1, 1, 1, 1, 1, 1, 0, stream, addr, 0)

        if name == kernels.EMPTY:
            impls["launch.async"] = timed_then(one, lambda: sync(h))
            impls["launch.single"] = timed_each(one, lambda: sync(h))
            impls["launch.sync"] = timed(lambda one=one: (one(), sync(h)))
            impls[f"launch.x{GRAPH_LAUNCHES}"] = timed_then(lambda one=one: [one() for _ in range(GRAPH_LAUNCHES)],
                                                            lambda: sync(h))
            graph = _captured(cu, h, one, cleanup)
            impls[f"graph.x{GRAPH_LAUNCHES}"] = timed_then(lambda: cu.cuGraphLaunch(graph, h), lambda: sync(h))
        else:
            impls["launch.args4"] = timed_then(one, lambda: sync(h))
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
    return impls, cleanup
