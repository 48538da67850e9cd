"""The Device: info and limits from the cl.Device, its context, streams, allocation, compilation."""

from __future__ import annotations

import collections
import contextlib
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

from ironaccel import api
from ironaccel.api import DeviceInfo, Limits
from ironaccel.errors import CompileError, Timeout

from . import native
from .memory import OpenCLBuffer
from .module import BUILD_OPTIONS, LANG, OpenCLModule
from .native import BACKEND, call
from .stream import OpenCLStream, wait_for


DROPPED_QUEUES_KEPT = 64  # past this many dropped streams' queues, creating a stream lets go of the idle ones


def _device_info(device: Any, index: int) -> DeviceInfo:
    cl = native.cl
    # every device clGetDeviceIDs(CL_DEVICE_TYPE_ALL) lists has at least 3 work-item dimensions (only
    # CL_DEVICE_TYPE_CUSTOM devices, never listed there and without OpenCL C, may have fewer)
    x, y, z, *_ = device.max_work_item_sizes
    return DeviceInfo(
        backend=BACKEND,
        index=index,
        name=device.name.strip(),
        vendor=device.vendor.strip(),
        driver=device.platform.name.strip(),
        driver_version=f"{device.version.strip()}, driver {device.driver_version.strip()}",
        simulated=bool(device.type & cl.device_type.CPU),
        memory=device.global_mem_size,
        limits=Limits(
            max_alloc=device.max_mem_alloc_size,
            max_threads_per_block=device.max_work_group_size,
            max_block=(x, y, z),
            # OpenCL bounds only the global size (a size_t): grid x block must fit 32 bits here, as ids are uint
            max_grid=(2**31 - 1, 65535, 65535),
            max_shared_memory=device.local_mem_size,
        ),
        extra={"device_type": cl.device_type.to_string(device.type), "platform_version": device.platform.version},
    )


@dataclass(frozen=True)
class OpenCLHandles:
    """``Device.native``: the pyopencl context and device."""

    context: Any
    device: Any


class OpenCLDevice(api.Device):
    def __init__(self, cl_device: Any, index: int):
        super().__init__(_device_info(cl_device, index))
        self.cl_device = cl_device
        self.context = call("Backend.open_device", native.cl.Context, [cl_device])
        self._streams: weakref.WeakSet[OpenCLStream] = weakref.WeakSet()  # for synchronize; the lock guards it
        # queues of streams dropped (their work may still run): Device.synchronize waits for them, then lets go
        self._dropped_queues: collections.deque[Any] = collections.deque()
        self._lock = threading.Lock()
        self._default = self._create_stream()
        self._caps = self._probe_capabilities()

    def _probe_capabilities(self) -> frozenset[str]:
        d = self.cl_device
        caps = {"events.timing", "kernel.atomics.int32", "kernel.atomics.float32", "kernel.int64",
                "kernel.shared_memory", f"lang.{LANG}"}
        if d.double_fp_config:
            caps.add("kernel.float64")
        return frozenset(caps)

    def _native(self) -> OpenCLHandles:
        return OpenCLHandles(self.context, self.cl_device)

    def _capabilities(self) -> frozenset[str]:
        return self._caps

    def _default_stream(self) -> OpenCLStream:
        return self._default

    def _create_stream(self) -> OpenCLStream:
        if len(self._dropped_queues) > DROPPED_QUEUES_KEPT:
            self._let_go_of_idle_queues()
        stream = OpenCLStream(self)
        with self._lock:
            self._streams.add(stream)
        return stream

    def _let_go_of_idle_queues(self) -> None:
        """Release the dropped streams' queues whose work has completed (their last command's event says)."""
        complete = native.cl.command_execution_status.COMPLETE
        for _ in range(len(self._dropped_queues)):
            tail = self._dropped_queues.popleft()
            queue, last = tail
            queue.flush()
            if last is not None and call("Device.create_stream", lambda: last.command_execution_status) > complete:
                self._dropped_queues.append(tail)  # still running: kept for Device.synchronize

    def _alloc(self, nbytes: int) -> OpenCLBuffer:
        mem = call("Device.alloc", native.cl.Buffer, self.context, native.cl.mem_flags.READ_WRITE, nbytes)
        return OpenCLBuffer(self, nbytes, mem)

    def _compile(self, source: str | bytes, lang: str, options: tuple[str, ...]) -> OpenCLModule:
        op = "Device.compile"
        program = call(op, native.cl.Program, self.context, source)
        try:
            # cache_dir=False: pyopencl's binary cache would hand back programs without argument info
            program.build(options=[*BUILD_OPTIONS, *options], devices=[self.cl_device], cache_dir=False)
        except native.cl.RuntimeError:
            log = program.get_build_info(self.cl_device, native.cl.program_build_info.LOG)
            raise CompileError(op, lang, log.strip() or "the OpenCL compiler failed and logged nothing") from None
        return OpenCLModule(self, program)

    def _synchronize(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            streams = list(self._streams)
        dropped = list(self._dropped_queues)
        for queue, last in [stream._tail for stream in streams] + dropped:
            if last is None:
                continue
            left = None if deadline is None else max(deadline - time.monotonic(), 1e-6)
            queue.flush()
            try:
                wait_for("Device.synchronize", last, left)
            except Timeout:
                raise Timeout("Device.synchronize", timeout) from None
        for tail in dropped:  # their work is done: let them go
            with contextlib.suppress(ValueError):  # another thread's create_stream let go of it first
                self._dropped_queues.remove(tail)

    def _close(self) -> None:
        with self._lock:
            queues = [stream.queue for stream in self._streams]
        for queue in queues + [queue for queue, _ in self._dropped_queues]:
            queue.finish()
        self._dropped_queues.clear()
