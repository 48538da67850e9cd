"""An in-memory ironaccel device over bytearrays, for testing code that sits on the API (MemPool, tools).

    dev = MemDevice(memory=64 << 20)
    s = dev.create_stream()
    add_one = dev.python_module({"add_one": add_one_kernel}).kernel("add_one")

Work is deferred, as on a GPU, and deliberately lazy: a stream queues its operations and runs them only
when something waits for them — ``Stream.synchronize``, ``Event.synchronize``, a ``Stream.wait`` whose
stream reaches them, or ``Device.synchronize`` (which drains the streams newest first). ``Event.query``
reports without running anything. So work that is ordered only by luck shows up as wrong data here: a
missing fence between two streams is a reliable failure, not an occasional one.

Kernels have no compiler: ``python_module`` wraps Python functions, called as ``fn(grid, block, *args)``
with each Buffer argument as a writable flat uint8 numpy view and scalars as given. ``CATALOGUE`` holds
Python versions of some conformance kernels (conformance/kernels/README.md).

Misuse a real driver might crash on is recorded in ``diagnostics()`` instead: freeing a buffer after its
device was closed. New buffers hold the junk byte ``JUNK``, never zeros.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections import deque
from typing import Any, Callable, Sequence, get_type_hints

import numpy as np

from ironaccel import api
from ironaccel.errors import OutOfMemory, Unsupported

JUNK = 0xCD

PythonKernel = Callable[..., None]


class MemBuffer(api.Buffer):
    def __init__(self, device: MemDevice, nbytes: int):
        super().__init__(device, nbytes)
        self.data = bytearray([JUNK]) * nbytes

    def _native_handle(self) -> Any:
        return self.data

    def _release(self) -> None:
        self._device._released(self)  # type: ignore[attr-defined]


class MemEvent(api.Event):
    """Complete once its stream has run its first ``seq`` operations."""

    def __init__(self, stream: MemStream, timing: bool, seq: int):
        super().__init__(stream, timing)
        self.seq = seq
        self.stamp: float | None = None  # host time at which the stream reached the event

    def _query(self) -> bool:
        return self._stream._done >= self.seq  # type: ignore[attr-defined]

    def _synchronize(self, timeout: float | None = None) -> None:
        self._stream.run_until(self.seq)  # type: ignore[attr-defined]

    def _elapsed_ms(self, end: api.Event) -> float:
        self._synchronize()
        end._synchronize()
        return (end.stamp - self.stamp) * 1000.0  # type: ignore[attr-defined,operator]


class MemStream(api.Stream):
    """A queue of Python closures; ``run_until(n)`` runs the first ``n`` ever enqueued."""

    def __init__(self, device: MemDevice):
        super().__init__(device)
        self._lock = device.lock
        self._queue: deque[Callable[[], None]] = deque()
        self._enqueued = 0
        self._done = 0

    def _native(self) -> deque[Callable[[], None]]:
        """The queue of pending closures: all there is under this stream."""
        return self._queue

    @property
    def pending(self) -> int:
        """Operations enqueued and not yet run."""
        return self._enqueued - self._done

    def run_until(self, seq: int) -> None:
        with self._lock:
            while self._done < seq:
                self._queue.popleft()()
                self._done += 1  # after running: a wait inside it may only need earlier work of this stream

    def _enqueue(self, work: Callable[[], None]) -> int:
        with self._lock:
            self._queue.append(work)
            self._enqueued += 1
            return self._enqueued

    def _copy_htod(self, dst: api.Buffer, dst_offset: int, src: np.ndarray) -> None:
        mem, data = dst._native_handle(), src.tobytes()  # the host array may be reused once we return

        def run() -> None:
            mem[dst_offset:dst_offset + len(data)] = data

        self._enqueue(run)

    def _copy_dtoh(self, dst: np.ndarray, src: api.Buffer, src_offset: int) -> None:
        mem = src._native_handle()

        def run() -> None:
            dst[:] = np.frombuffer(mem, np.uint8, dst.nbytes, src_offset)

        self._enqueue(run)

    def _copy_dtod(self, dst: api.Buffer, dst_offset: int, src: api.Buffer, src_offset: int, nbytes: int) -> None:
        d, s = dst._native_handle(), src._native_handle()

        def run() -> None:
            d[dst_offset:dst_offset + nbytes] = s[src_offset:src_offset + nbytes]

        self._enqueue(run)

    def _fill(self, buf: api.Buffer, offset: int, nbytes: int, value: int) -> None:
        mem = buf._native_handle()

        def run() -> None:
            mem[offset:offset + nbytes] = bytes([value]) * nbytes

        self._enqueue(run)

    def _record(self, timing: bool) -> MemEvent:
        event = MemEvent(self, timing, 0)
        self._rerecord(event)
        return event

    def _rerecord(self, event: api.Event) -> None:
        assert isinstance(event, MemEvent)
        with self._lock:
            seq = self._enqueued + 1

            def run() -> None:
                if event._stream is self and event.seq == seq:  # not re-recorded since
                    event.stamp = time.perf_counter()

            event._stream, event.seq, event.stamp = self, seq, None
            self._enqueue(run)

    def _wait(self, event: api.Event) -> None:
        assert isinstance(event, MemEvent)
        stream, seq = event._stream, event.seq  # the point as it is now: a later re-record does not move the wait
        self._enqueue(lambda: stream.run_until(seq))  # type: ignore[attr-defined]

    def _synchronize(self, timeout: float | None = None) -> None:
        with self._lock:
            self.run_until(self._enqueued)

    def _launch(self, kernel: api.Kernel, grid: api.Dim3, block: api.Dim3, args: list[Any]) -> None:
        fn = kernel.module.functions[kernel.name]  # type: ignore[attr-defined]
        views = [np.frombuffer(a._native_handle(), np.uint8) if isinstance(a, api.Buffer) else a for a in args]

        def run() -> None:
            fn(grid, block, *views)

        self._enqueue(run)


class MemModule(api.Module):
    def __init__(self, device: MemDevice, functions: dict[str, PythonKernel]):
        super().__init__(device, "python")
        self.functions = dict(functions)

    def _kernel_names(self) -> Sequence[str]:
        return list(self.functions)

    def _make_kernel(self, name: str) -> api.Kernel:
        return MemKernel(self, name)

    def _release(self) -> None:
        """Nothing to give back: its kernels are Python functions, and queued launches hold their own."""


class MemKernel(api.Kernel):
    """A Python kernel; its parameters are its annotations after (grid, block): ``np.ndarray`` for a buffer,
    a numpy scalar type for a scalar."""

    def _params(self) -> tuple[api.Param, ...]:
        fn = self.module.functions[self.name]  # type: ignore[attr-defined]
        hints = get_type_hints(fn)
        params = []
        for name in list(inspect.signature(fn).parameters)[2:]:  # after grid and block
            kind = hints.get(name)
            if kind is np.ndarray:
                params.append(api.Param("buffer"))
            elif isinstance(kind, type) and issubclass(kind, np.generic):
                params.append(api.Param("scalar", np.dtype(kind).itemsize,
                                        "float" if issubclass(kind, np.floating) else "int"))
            else:
                raise TypeError(f"parameter {name} of Python kernel {self.name} needs an np.ndarray or numpy scalar annotation")
        return tuple(params)


class MemDevice(api.Device):
    """``memory`` bytes of host memory posing as a device; allocations past it raise OutOfMemory."""

    def __init__(self, memory: int = 1 << 30, *, max_alloc: int | None = None, index: int = 0):
        limits = api.Limits(
            max_alloc=memory if max_alloc is None else max_alloc,
            max_threads_per_block=1024,
            max_block=(1024, 1024, 64),
            max_grid=(2**31 - 1, 65535, 65535),
            max_shared_memory=48 << 10,
        )
        super().__init__(api.DeviceInfo(
            backend="mem", index=index, name="in-memory test device", vendor="ironaccel tests", driver="memdevice",
            driver_version="1", simulated=True, memory=memory, limits=limits,
        ))
        self.lock = threading.RLock()
        self.buffers: set[MemBuffer] = set()  # allocated and not yet freed
        self.bytes_in_use = 0
        self.alloc_count = 0
        self.free_count = 0
        self._streams: list[MemStream] = []  # never dropped: their queued work still has to run
        self._diagnostics: list[str] = []
        self._default = self._create_stream()

    def _native(self) -> set[MemBuffer]:
        """The live buffers: all there is under this device."""
        return self.buffers

    def python_module(self, functions: dict[str, PythonKernel]) -> MemModule:
        """A Module whose kernels are Python functions ``fn(grid, block, *args)``."""
        self._check_open("MemDevice.python_module")
        return MemModule(self, functions)

    def _capabilities(self) -> frozenset[str]:
        return frozenset({"events.timing", "kernel.int64", "kernel.float64"})

    def _default_stream(self) -> api.Stream:
        return self._default

    def _create_stream(self) -> MemStream:
        stream = MemStream(self)
        with self.lock:
            self._streams.append(stream)
        return stream

    def _alloc(self, nbytes: int) -> MemBuffer:
        with self.lock:
            if self.bytes_in_use + nbytes > self.info.memory:
                raise OutOfMemory("mem", "MemDevice.alloc", None, "out of memory",
                                  f"{nbytes} bytes requested, {self.info.memory - self.bytes_in_use} free")
            buf = MemBuffer(self, nbytes)
            self.buffers.add(buf)
            self.bytes_in_use += nbytes
            self.alloc_count += 1
            return buf

    def _released(self, buf: MemBuffer) -> None:
        with self.lock:
            if self._closed:
                self._diagnostics.append(f"Buffer.free of a {buf.nbytes}-byte buffer after Device.close")
                return
            self.buffers.discard(buf)
            self.bytes_in_use -= buf.nbytes
            self.free_count += 1

    def _compile(self, source: str | bytes, lang: str, options: tuple[str, ...]) -> api.Module:
        raise Unsupported("Device.compile", f"lang.{lang}", "MemDevice runs Python kernels: use python_module()")

    def _synchronize(self, timeout: float | None = None) -> None:
        with self.lock:
            for stream in reversed(self._streams):
                stream._synchronize()

    def _drain_diagnostics(self) -> list[str]:
        with self.lock:
            out, self._diagnostics = self._diagnostics, []
            return out

    def _close(self) -> None:
        self._synchronize()
        with self.lock:
            self.buffers.clear()
            self.bytes_in_use = 0


def _add_one(grid: api.Dim3, block: api.Dim3, x: np.ndarray, n: np.uint32) -> None:
    words = x.view(np.uint32)
    count = min(int(n), grid[0] * block[0], words.size)
    words[:count] += np.uint32(1)


def _fill_u32(grid: api.Dim3, block: api.Dim3, out: np.ndarray, value: np.uint32, n: np.uint32) -> None:
    words = out.view(np.uint32)
    words[:min(int(n), grid[0] * block[0], words.size)] = value


def _saxpy(grid: api.Dim3, block: api.Dim3, x: np.ndarray, y: np.ndarray, a: np.float32, n: np.uint32) -> None:
    xs, ys = x.view(np.float32), y.view(np.float32)
    count = min(int(n), grid[0] * block[0], xs.size, ys.size)
    ys[:count] = a * xs[:count] + ys[:count]


#: Python versions of conformance kernels, same names and arguments (conformance/kernels/README.md).
CATALOGUE: dict[str, PythonKernel] = {"add_one": _add_one, "fill_u32": _fill_u32, "saxpy": _saxpy}
