"""The OpenCL backend: ironaccel's api.py over pyopencl, written as any third party would write one.

* Devices are every device of every OpenCL platform the ICD loader offers, in platform order; a target
  narrows the loader to one ICD (``drivers.py``).
* A Stream is an in-order command queue with profiling on (``events.timing``); an Event is a marker on it.
  Work is flushed when an event is recorded or waited on, so a wait on another queue's event never stalls.
* ``synchronize(timeout)`` polls a marker's status instead of blocking in ``clFinish``, so a timeout leaves
  no thread stuck in the driver.
* Kernels are OpenCL C (``lang="opencl"``), built with ``-cl-kernel-arg-info`` so their parameters are
  reflected (``Kernel.params``, against which api.py checks every launch): buffers are ``__global`` pointers
  bound in argument order, scalars are passed by value. Block size is the work-group size; the global size
  is grid x block, as in CUDA.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ironaccel import api
from ironaccel.api import BackendInfo, DeviceInfo, Dim3, Limits, Param
from ironaccel.errors import CompileError, DriverError, InvalidArgument, NotAvailable, OutOfMemory, Timeout

BACKEND = "opencl"
LANG = "opencl"
BUILD_OPTIONS = ("-cl-kernel-arg-info",)  # clGetKernelArgInfo answers only for programs built with it
POLL_S = 0.0005
DROPPED_QUEUES_KEPT = 64  # past this many dropped streams' queues, creating a stream lets go of the idle ones

api.register_language(LANG, "compile(lang='opencl'): OpenCL C")

_cl: Any = None


def _import_cl() -> Any:
    global _cl
    if _cl is None:
        try:
            import pyopencl
        except ImportError as exc:
            raise NotAvailable(BACKEND, "pyopencl", f"the pyopencl package is not installed ({exc}): "
                                                    "pip install pyopencl") from None
        _cl = pyopencl
    return _cl


def _call(op: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a pyopencl call, turning its errors into ours: the one place OpenCL errors are translated."""
    try:
        return fn(*args, **kwargs)
    except _cl.Error as exc:
        error = OutOfMemory if isinstance(exc, _cl.MemoryError) else DriverError
        raise error(BACKEND, op, exc.code, _status_name(exc.code), str(exc)) from None


def _status_name(code: int) -> str:
    """CL_MEM_OBJECT_ALLOCATION_FAILURE for -4: the names OpenCL's headers give the status codes."""
    names = {v: k for k, v in vars(_cl.status_code).items() if isinstance(v, int) and not k.startswith("_")}
    return f"CL_{names[code]}" if code in names else f"OpenCL error {code}"


def _devices() -> list[Any]:
    cl = _import_cl()
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:  # ocl-icd: PLATFORM_NOT_FOUND_KHR when no ICD is installed
        raise NotAvailable(BACKEND, "OpenCL ICD", f"no OpenCL platform ({exc}): install one, e.g. "
                                                  "apt-get install pocl-opencl-icd ocl-icd-libopencl1") from None
    return [d for p in platforms for d in p.get_devices()]


class OpenCLBackend(api.Backend):
    name = BACKEND

    def probe(self) -> BackendInfo:
        try:
            devices = _devices()
        except NotAvailable as exc:
            return BackendInfo(BACKEND, False, exc.detail)
        version = _cl.VERSION_TEXT
        if not devices:
            return BackendInfo(BACKEND, False, "the OpenCL platforms have no device", version)
        names = ", ".join(f"{d.name} ({d.platform.name})" for d in devices)
        return BackendInfo(BACKEND, True, f"{len(devices)} device(s): {names}", version)

    def device_count(self) -> int:
        return len(_devices())

    def _open_device(self, index: int, **options: Any) -> OpenCLDevice:
        if options:
            raise InvalidArgument("Backend.open_device", f"opencl takes no options, got {', '.join(options)}")
        return OpenCLDevice(_devices()[index], index)


def _device_info(device: Any, index: int) -> DeviceInfo:
    cl = _cl
    sizes = tuple(device.max_work_item_sizes[:3])
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
            max_block=(sizes + (1, 1, 1))[:3],
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


class OpenCLBuffer(api.Buffer):
    def __init__(self, device: OpenCLDevice, nbytes: int, mem: Any):
        super().__init__(device, nbytes)
        self.mem = mem

    def _native_handle(self) -> Any:
        return self.mem

    def _release(self) -> None:
        self.mem.release()


def _wait_for(op: str, marker: Any, timeout: float | None) -> None:
    """Block until ``marker`` completes; past ``timeout`` seconds raise Timeout (no thread left waiting)."""
    if timeout is None:
        _call(op, marker.wait)
        return
    deadline = time.monotonic() + timeout
    complete = _cl.command_execution_status.COMPLETE
    while _call(op, lambda: marker.command_execution_status) > complete:
        if time.monotonic() >= deadline:
            raise Timeout(op, timeout)
        time.sleep(POLL_S)
    if marker.command_execution_status < 0:
        raise DriverError(BACKEND, op, marker.command_execution_status, "a command on the queue failed")


class OpenCLEvent(api.Event):
    def __init__(self, stream: OpenCLStream, timing: bool, marker: Any):
        super().__init__(stream, timing)
        self.marker = marker

    def _query(self) -> bool:
        return _call("Event.query", lambda: self.marker.command_execution_status) <= _cl.command_execution_status.COMPLETE

    def _synchronize(self, timeout: float | None) -> None:
        _wait_for("Event.synchronize", self.marker, timeout)

    def _elapsed_ms(self, end: api.Event) -> float:
        self._synchronize(None)
        end._synchronize(None)
        assert isinstance(end, OpenCLEvent)
        start_ns = _call("Event.elapsed_ms", lambda: self.marker.profile.end)
        end_ns = _call("Event.elapsed_ms", lambda: end.marker.profile.end)
        return (end_ns - start_ns) / 1e6


class OpenCLStream(api.Stream):
    def __init__(self, device: OpenCLDevice):
        super().__init__(device)
        cl = _cl
        self.queue = _call("Device.create_stream", cl.CommandQueue, device.context, device.cl_device,
                           properties=cl.command_queue_properties.PROFILING_ENABLE)
        # [queue, the event of the last command enqueued (None: none yet)]: the queue is in order, so the stream
        # is idle once that event is complete, and a wait needs no marker of its own, which a timeout shorter
        # than the driver's latency would see as not complete on an idle stream. A dropped stream leaves this
        # pair to its device, which waits on it and lets the queue go once the event is complete.
        self._tail: list[Any] = [self.queue, None]
        weakref.finalize(self, device._dropped_queues.append, self._tail).atexit = False

    @property
    def _last(self) -> Any:
        return self._tail[1]

    @_last.setter
    def _last(self, event: Any) -> None:
        self._tail[1] = event

    def _native(self) -> Any:
        return self.queue

    def _copy_htod(self, dst: api.Buffer, dst_offset: int, src: np.ndarray) -> None:
        # a private copy: the caller may reuse ``src`` as soon as this returns (pyopencl keeps it alive)
        self._last = _call("Stream.copy_htod", _cl.enqueue_copy, self.queue, dst.mem, src.copy(),
                           dst_offset=dst_offset, is_blocking=False)

    def _copy_dtoh(self, dst: np.ndarray, src: api.Buffer, src_offset: int) -> None:
        self._last = _call("Stream.copy_dtoh", _cl.enqueue_copy, self.queue, dst, src.mem, src_offset=src_offset,
                           is_blocking=False)

    def _copy_dtod(self, dst: api.Buffer, dst_offset: int, src: api.Buffer, src_offset: int, nbytes: int) -> None:
        self._last = _call("Stream.copy_dtod", _cl.enqueue_copy, self.queue, dst.mem, src.mem, byte_count=nbytes,
                           src_offset=src_offset, dst_offset=dst_offset)

    def _fill(self, buf: api.Buffer, offset: int, nbytes: int, value: int) -> None:
        self._last = _call("Stream.fill", _cl.enqueue_fill_buffer, self.queue, buf.mem, np.uint8(value), offset,
                           nbytes)

    def _record(self, timing: bool) -> OpenCLEvent:
        marker = self._last = _call("Stream.record", _cl.enqueue_marker, self.queue)
        self.queue.flush()
        return OpenCLEvent(self, timing, marker)

    def _wait(self, event: api.Event) -> None:
        assert isinstance(event, OpenCLEvent)
        event.stream.queue.flush()
        self._last = _call("Stream.wait", _cl.enqueue_barrier, self.queue, wait_for=[event.marker])

    def _synchronize(self, timeout: float | None) -> None:
        if self._last is None:
            return
        self.queue.flush()
        _wait_for("Stream.synchronize", self._last, timeout)

    def _launch(self, kernel: api.Kernel, grid: Dim3, block: Dim3, args: list[api.Buffer | np.generic]) -> None:
        assert isinstance(kernel, OpenCLKernel)
        op = "Stream.launch"  # api.py has checked the arguments against the reflected parameters
        limit = self._device.info.limits.max_shared_memory
        if kernel.local_bytes > limit:
            raise InvalidArgument(op, f"kernel {kernel.name} declares {kernel.local_bytes} bytes of __local memory; "
                                      f"the device has {limit} per work-group")
        values = [a.mem if isinstance(a, api.Buffer) else a for a in args]
        global_size = tuple(g * b for g, b in zip(grid, block))
        with kernel.lock:  # argument values live on the cl.Kernel: set and enqueue as one step
            _call(op, kernel.cl_kernel.set_args, *values)
            self._last = _call(op, _cl.enqueue_nd_range_kernel, self.queue, kernel.cl_kernel, global_size, block)


#: OpenCL C scalar type names -> (bytes, "float"/"int").
_SCALARS = {"float": (4, "float"), "double": (8, "float"), "int": (4, "int"), "uint": (4, "int"),
            "long": (8, "int"), "ulong": (8, "int"), "unsigned int": (4, "int"), "unsigned long": (8, "int")}


class OpenCLKernel(api.Kernel):
    def __init__(self, module: OpenCLModule, name: str):
        super().__init__(module, name)
        self.cl_kernel = _call("Module.kernel", _cl.Kernel, module.program, name)
        self.lock = threading.Lock()
        self._reflected = self._reflect()
        device: OpenCLDevice = module.device  # type: ignore[assignment]
        # its __local arrays: a launch past the device's local memory aborts some drivers (PoCL) instead of failing
        self.local_bytes = _call("Module.kernel", self.cl_kernel.get_work_group_info,
                                 _cl.kernel_work_group_info.LOCAL_MEM_SIZE, device.cl_device)

    def _reflect(self) -> tuple[Param, ...]:
        cl, k = _cl, self.cl_kernel
        out = []
        for i in range(k.num_args):
            qualifier = _call("Module.kernel", k.get_arg_info, i, cl.kernel_arg_info.ADDRESS_QUALIFIER)
            type_name = _call("Module.kernel", k.get_arg_info, i, cl.kernel_arg_info.TYPE_NAME).strip()
            if qualifier == cl.kernel_arg_address_qualifier.PRIVATE and type_name in _SCALARS:
                nbytes, kind = _SCALARS[type_name]
                out.append(Param("scalar", nbytes, kind))
            elif qualifier == cl.kernel_arg_address_qualifier.GLOBAL:
                out.append(Param("buffer"))
            else:
                raise InvalidArgument("Module.kernel", f"{self.name}: parameter {i} ({type_name}) is neither a "
                                                       "__global buffer nor a scalar ironaccel can pass")
        return tuple(out)

    def _params(self) -> tuple[Param, ...]:
        return self._reflected

    def _native(self) -> Any:
        return self.cl_kernel


class OpenCLModule(api.Module):
    def __init__(self, device: OpenCLDevice, program: Any):
        super().__init__(device, LANG)
        self.program = program

    def _kernel_names(self) -> Sequence[str]:
        return [n for n in self.program.kernel_names.split(";") if n]

    def _release(self) -> None:
        """Drop the cl.Program and its kernels: pyopencl releases each with its last reference, and OpenCL keeps
        what enqueued commands still use until they complete."""
        for kernel in self._kernels.values():
            kernel.cl_kernel = None  # type: ignore[attr-defined]
        self.program = None

    def _make_kernel(self, name: str) -> OpenCLKernel:
        return OpenCLKernel(self, name)


class OpenCLDevice(api.Device):
    def __init__(self, cl_device: Any, index: int):
        super().__init__(_device_info(cl_device, index))
        self.cl_device = cl_device
        self.context = _call("Backend.open_device", _cl.Context, [cl_device])
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
        complete = _cl.command_execution_status.COMPLETE
        for _ in range(len(self._dropped_queues)):
            tail = self._dropped_queues.popleft()
            queue, last = tail
            queue.flush()
            if last is not None and _call("Device.create_stream", lambda: last.command_execution_status) > complete:
                self._dropped_queues.append(tail)  # still running: kept for Device.synchronize

    def _alloc(self, nbytes: int) -> OpenCLBuffer:
        mem = _call("Device.alloc", _cl.Buffer, self.context, _cl.mem_flags.READ_WRITE, nbytes)
        return OpenCLBuffer(self, nbytes, mem)

    def _compile(self, source: str | bytes, lang: str, options: tuple[str, ...]) -> OpenCLModule:
        op = "Device.compile"
        program = _call(op, _cl.Program, self.context, source)
        try:
            # cache_dir=False: pyopencl's binary cache would hand back programs without argument info
            program.build(options=[*BUILD_OPTIONS, *options], devices=[self.cl_device], cache_dir=False)
        except _cl.RuntimeError:
            log = program.get_build_info(self.cl_device, _cl.program_build_info.LOG)
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
                _wait_for("Device.synchronize", last, left)
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
