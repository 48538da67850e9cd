"""The abstract interface every backend implements — the one file to read first.

Public methods live here: they check and coerce their arguments (raising ``InvalidArgument`` or
``UseAfterFree`` naming the method), then call a private ``_method`` that a backend fills in. So every
backend rejects bad input the same way, and a backend module only ever sees valid, normalised input.

Semantics shared by every backend (the conformance suite, ``conformance/SPEC.md``, checks them):

* Work on one stream happens in the order enqueued. ``copy_htod`` may return before the device has the
  data, but the host array may be reused as soon as it returns. ``copy_dtoh`` fills the host array by the
  time the stream has synchronized (or an event recorded after it has completed).
* Sizes and offsets are in bytes, with no alignment requirement.
* Kernel arguments: Buffers bind in argument order; sized numpy scalars (``np.float32(2)``,
  ``np.uint32(n)``) are packed in argument order with natural alignment (``pack_scalars``). Grid and block
  are chosen at launch; the grid counts blocks, as in CUDA.
"""

from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import numpy as np

from .errors import InvalidArgument, OutOfMemory, Unsupported, UseAfterFree

__all__ = [
    "CAPABILITIES",
    "LANGUAGES",
    "BackendInfo",
    "Limits",
    "DeviceInfo",
    "Buffer",
    "Event",
    "Graph",
    "Stream",
    "Module",
    "Kernel",
    "Device",
    "Backend",
    "Dim3",
    "ArgRule",
    "LaunchPlan",
    "Param",
    "pack_scalars",
    "register_language",
]

#: Capability names understood by ``Device.supports``. A conformance test that needs one of these asks
#: ``supports`` first; a "no" is recorded as the not-supported outcome, never as a failure or a skip.
CAPABILITIES: dict[str, str] = {
    "events.timing": "Event.elapsed_ms between events recorded with timing=True",
    "graphs": "Stream.capture(): stream work captured once into a Graph and replayed with Graph.launch",
    "kernel.atomics.int32": "32-bit integer atomics on global and shared memory",
    "kernel.atomics.float32": "atomic add on 32-bit floats",
    "kernel.float64": "64-bit floats in kernels and as scalar arguments",
    "kernel.int64": "64-bit integers in kernels and as scalar arguments",
    "kernel.shared_memory": "per-block shared memory with a block-wide barrier",
    "kernel.bounds_checked": "a kernel's out-of-bounds buffer accesses never touch another buffer (robust buffer access)",
    "kernel.subgroups": "subgroup (warp) operations in kernels: an invocation's subgroup size and index in it, the "
                        "add-reduction over the subgroup and the broadcast of its first invocation's value",
    "lang.cuda": "compile(lang='cuda'): CUDA C++",
    "lang.ptx": "compile(lang='ptx'): PTX text",
    "lang.cubin": "compile(lang='cubin'): a CUDA binary (bytes) built for the device's architecture",
    "lang.glsl": "compile(lang='glsl'): GLSL compute shaders, Vulkan dialect (GL_KHR_vulkan_glsl)",
    "lang.glsl430": "compile(lang='glsl430'): GLSL compute shaders, OpenGL 4.3+ dialect (conformance/kernels/README.md)",
    "lang.spirv": "compile(lang='spirv'): SPIR-V bytes",
    "lang.wgsl": "compile(lang='wgsl'): WGSL",
}

#: Kernel languages, in the order a backend prefers them when it supports several.
LANGUAGES = ("cuda", "ptx", "cubin", "spirv", "glsl", "glsl430", "wgsl")

#: Languages whose source is a binary image (bytes) rather than text.
BINARY_LANGUAGES = ("cubin", "spirv")


def register_language(lang: str, description: str, *, binary: bool = False) -> None:
    """Add a kernel language that a backend outside ironaccel compiles (a plugin's own dialect), after the
    built-in ones: ``lang.<lang>`` becomes a capability and ``Device.compile`` accepts it. Idempotent."""
    global LANGUAGES, BINARY_LANGUAGES
    if lang in LANGUAGES:
        return
    CAPABILITIES[f"lang.{lang}"] = description
    LANGUAGES += (lang,)
    if binary:
        BINARY_LANGUAGES += (lang,)

Dim3 = tuple[int, int, int]


@dataclass(frozen=True)
class BackendInfo:
    """What ``ironaccel.backends()`` reports for one registered backend; ``reason`` says why not."""

    name: str
    available: bool
    reason: str = ""
    version: str = ""
    compute: bool = True  # False for probe-only backends (no compute path yet)


@dataclass(frozen=True)
class Limits:
    max_alloc: int  # largest single allocation, bytes
    max_threads_per_block: int
    max_block: Dim3
    max_grid: Dim3
    max_shared_memory: int  # bytes per block
    warp_size: int = 0  # subgroup/warp width, 0 when the backend cannot tell


@dataclass(frozen=True)
class DeviceInfo:
    backend: str
    index: int
    name: str
    vendor: str
    driver: str  # the driver's name: "llvmpipe", "SwiftShader", "NVIDIA", "ironaccel fake libcuda"
    driver_version: str
    simulated: bool  # a CPU/software device: results never count as hardware
    memory: int  # bytes of device memory (0 when the backend cannot tell)
    limits: Limits
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def _check_int(op: str, what: str, value: object, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgument(op, f"{what} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise InvalidArgument(op, f"{what} must be >= {minimum}, got {value}")
    return int(value)


_UINT8 = np.dtype(np.uint8)


def _host_bytes(op: str, obj: object, *, writable: bool) -> np.ndarray:
    """A flat uint8 view of a C-contiguous host buffer (numpy array, bytes, bytearray, memoryview).

    Only plain data crosses to the device: an array holding Python objects would copy raw PyObject
    addresses (and a copy into one would plant garbage pointers the interpreter later follows).

    A plain C-contiguous ndarray of plain data is the common case: it is checked by its flags and dtype
    alone (a 1-D uint8 array is returned as it is), without the memoryview and frombuffer of the general
    path (~1 us per copy)."""
    if type(obj) is np.ndarray:
        dtype, flags = obj.dtype, obj.flags
        if flags.c_contiguous and (flags.writeable or not writable) and not dtype.hasobject \
                and dtype.kind not in "Mm":
            return obj if dtype is _UINT8 and obj.ndim == 1 else obj.reshape(-1).view(np.uint8)
    dtype = getattr(obj, "dtype", None)
    if isinstance(dtype, np.dtype):
        if dtype.hasobject:
            raise InvalidArgument(op, f"host array of dtype {dtype} holds Python objects, not data: use a numeric dtype")
        if dtype.kind in "Mm":
            raise InvalidArgument(op, f"host array of dtype {dtype} has no buffer layout: pass arr.view(np.int64)")
    try:
        view = memoryview(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError, BufferError) as exc:
        raise InvalidArgument(
            op, f"host data must support the buffer protocol (numpy array, bytearray), got {type(obj).__name__}: {exc}"
        ) from None
    if "O" in view.format:
        raise InvalidArgument(op, f"host buffer of format {view.format!r} holds Python objects, not data")
    if not view.c_contiguous:
        raise InvalidArgument(op, "host array must be C-contiguous (use np.ascontiguousarray)")
    if writable and view.readonly:
        raise InvalidArgument(op, "host destination is read-only")
    if view.nbytes == 0:
        return np.empty(0, dtype=np.uint8)
    return np.frombuffer(view, dtype=np.uint8)


def _check_utf8(op: str, lang: str, source: str) -> None:
    """Kernel source text reaches every compiler as UTF-8: text that has no UTF-8 form (a lone surrogate, as
    ``surrogateescape`` decoding leaves) is refused here, once for every backend, before a driver sees it."""
    try:
        source.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(op, f"{lang} source cannot be encoded as UTF-8: {exc.reason} at character "
                                  f"{exc.start} ({source[exc.start:exc.end]!r})") from None


def _check_timeout(op: str, value: object) -> float | None:
    """Seconds > 0; infinity means no limit (None), as backends wait without one."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not value > 0:
        raise InvalidArgument(op, f"timeout must be a number of seconds > 0 or None, got {value!r}")
    return None if np.isinf(value) else float(value)


def _check_range(op: str, what: str, buf: Buffer, offset: object, nbytes: int) -> int:
    """``buf`` is the caller's Buffer, not its backing: a pooled buffer is bounded by its requested size."""
    if type(offset) is int and 0 <= offset and offset + nbytes <= buf._nbytes:
        return offset  # the common case, checked inline; anything else gets the full checks and their errors
    offset = _check_int(op, f"{what} offset", offset)
    if offset + nbytes > buf.nbytes:
        raise InvalidArgument(
            op, f"{what} range [{offset}, {offset + nbytes}) is outside the {buf.nbytes}-byte buffer"
        )
    return offset


def _dim3(op: str, what: str, value: object) -> Dim3:
    dims = (value,) if isinstance(value, (int, np.integer)) else value
    if not isinstance(dims, (tuple, list)) or not 1 <= len(dims) <= 3:
        raise InvalidArgument(op, f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    x, y, z = (*(_check_int(op, what, d, 1) for d in dims), 1, 1)[:3]
    return (x, y, z)


def _launch_dims(op: str, lim: Limits, grid: object, block: object) -> tuple[Dim3, Dim3]:
    g, b = _dim3(op, "grid", grid), _dim3(op, "block", block)
    threads = b[0] * b[1] * b[2]
    if threads > lim.max_threads_per_block:
        raise InvalidArgument(op, f"block {b} has {threads} threads; the device allows {lim.max_threads_per_block}")
    for axis, (n, most) in enumerate(zip(b, lim.max_block)):
        if n > most:
            raise InvalidArgument(op, f"block {b}: axis {'xyz'[axis]} is {n}, the device allows {most}")
    for axis, (n, most) in enumerate(zip(g, lim.max_grid)):
        if n > most:
            raise InvalidArgument(op, f"grid {g}: axis {'xyz'[axis]} is {n}, the device allows {most}")
    return g, b


#: Scalar kernel argument types, each with the capability it needs (None: every device takes it).
_SCALAR_CAPABILITY: dict[type, str | None] = {
    np.float32: None, np.int32: None, np.uint32: None,
    np.float64: "kernel.float64", np.int64: "kernel.int64", np.uint64: "kernel.int64",
}
_NOT_A_SCALAR = "not a scalar"


def pack_scalars(scalars: Sequence[np.generic]) -> bytes:
    """Pack scalar kernel arguments in order, each at an offset aligned to its own size.

    This is the layout of CUDA's by-value parameters, of a Vulkan push-constant block (std430) and of a
    WGSL uniform struct of 4-byte members, so one packing serves every backend.
    """
    out = bytearray()
    for s in scalars:
        size = s.dtype.itemsize
        out += bytes(-len(out) % size)
        out += s.tobytes()
    return bytes(out)


class Buffer(abc.ABC):
    """Device memory of ``nbytes`` bytes. ``free()`` is idempotent; a context manager frees on exit."""

    __slots__ = ()  # subclasses choose: a backend's buffer keeps a __dict__, a pooled one is made on every alloc

    def __init__(self, device: Device, nbytes: int):
        self._device = device
        self._nbytes = nbytes
        self._freed = False

    @property
    def device(self) -> Device:
        return self._device

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def freed(self) -> bool:
        return self._freed

    @property
    def handle(self) -> Any:
        """The backend's native object (CUDA: device pointer int, Vulkan: VkBuffer, WebGPU: GPUBuffer)."""
        backing = self._backing("Buffer.handle")
        backing._device._check_open("Buffer.handle")
        return backing._native_handle()

    def free(self) -> None:
        if self._freed:
            return
        self._freed = True
        self._release()

    def _backing(self, op: str) -> Buffer:
        """The backend buffer that holds the bytes; raises UseAfterFree once freed. Pools override this."""
        if self._freed:
            raise UseAfterFree(op, f"a {self._nbytes}-byte buffer")
        return self

    @abc.abstractmethod
    def _release(self) -> None: ...

    @abc.abstractmethod
    def _native_handle(self) -> Any: ...

    def __enter__(self) -> Buffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def __repr__(self) -> str:
        state = "freed" if self._freed else "live"
        return f"<{type(self).__name__} {self._nbytes} B on {self._device.info.backend}:{self._device.info.index} {state}>"


class Event(abc.ABC):
    """A point in a stream's work. Complete once everything enqueued before it has completed."""

    def __init__(self, stream: Stream, timing: bool):
        self._stream = stream
        self._timing = timing

    @property
    def stream(self) -> Stream:
        return self._stream

    def query(self) -> bool:
        """True when the device has reached this event; never blocks."""
        self._stream.device._check_open("Event.query")
        return self._query()

    def synchronize(self, timeout: float | None = None) -> None:
        """Block the calling thread until the event is complete; past ``timeout`` seconds raise Timeout."""
        if self._stream._device._closed:  # inline _check_open: a hot path
            self._stream._device._check_open("Event.synchronize")
        self._synchronize(timeout if timeout is None else _check_timeout("Event.synchronize", timeout))

    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds from this event to ``end``; both must be recorded with ``timing=True``."""
        op = "Event.elapsed_ms"
        if not isinstance(end, Event) or end._stream.device is not self._stream.device:
            raise InvalidArgument(op, "end must be an Event of the same device")
        if not (self._timing and end._timing):
            raise InvalidArgument(op, "record both events with stream.record(timing=True) to time them")
        self._stream.device._check_open(op)
        return self._elapsed_ms(end)

    @abc.abstractmethod
    def _query(self) -> bool: ...

    @abc.abstractmethod
    def _synchronize(self, timeout: float | None) -> None:
        """Wait; with a ``timeout`` (seconds > 0) raise ``Timeout("Event.synchronize", timeout)`` when it expires."""

    @abc.abstractmethod
    def _elapsed_ms(self, end: Event) -> float: ...


class Graph(abc.ABC):
    """Stream work captured once by ``with stream.capture() as graph:`` and replayed by ``launch(stream)``.

    Captured: launches, fills and ``copy_dtod``, with their arguments as they were at capture (scalars by
    value; buffers by reference: a replay reads and writes their contents as they are then). Nothing runs
    while capturing. Host copies, event records and waits are rejected during a capture: a replay cannot
    give them their one-shot meaning (``copy_htod``'s source is reusable on return, an Event marks one
    point), and so is launching a graph (graphs do not nest). The buffers and modules a graph uses stay
    referenced by it; ``launch`` raises UseAfterFree if one was freed or closed. ``close()`` (idempotent; a
    context manager closes on exit) frees the graph; replays still pending finish first."""

    def __init__(self, device: Device):
        self._device = device
        self._buffers: dict[int, Buffer] = {}  # id -> a Buffer the captured work uses, as the caller passed it
        self._modules: dict[int, Module] = {}  # id -> a Module whose kernels the captured work launches
        self._ready = False  # the capture has ended
        self._closed = False

    @property
    def device(self) -> Device:
        return self._device

    def _uses(self, buffers: Sequence[Buffer]) -> None:
        for buf in buffers:
            self._buffers[id(buf)] = buf

    def launch(self, stream: Stream) -> None:
        """Enqueue the captured work on ``stream``, in the order it was captured."""
        op = "Graph.launch"
        # Stream in the MRO, not isinstance: Stream is an ABC, whose isinstance costs a Python-level call
        if Stream not in type(stream).__mro__ or stream._device is not self._device:
            raise InvalidArgument(op, "stream must be a Stream of the graph's device")
        if self._closed:
            raise UseAfterFree(op, "a graph", "closed")
        if not self._ready:
            raise InvalidArgument(op, "the graph is still being captured: launch it after the capture's with block")
        if stream._capturing is not None:
            raise InvalidArgument(op, "the stream is capturing a graph and graphs do not nest: launch this one "
                                      "before or after the capture")
        if self._device._closed:  # inline _check_open: a hot path
            self._device._check_open(op)
        for buf in self._buffers.values():
            if buf._freed:
                raise UseAfterFree(op, f"a {buf.nbytes}-byte buffer the graph uses")
        for module in self._modules.values():
            if module._closed:  # (its device is the graph's, checked above)
                module._check_open(op)
        self._launch(stream)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._ready and not self._device._closed:  # closing the device freed it
                self._release()
            self._buffers.clear()
            self._modules.clear()

    def __enter__(self) -> Graph:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abc.abstractmethod
    def _launch(self, stream: Stream) -> None: ...

    @abc.abstractmethod
    def _release(self) -> None: ...


@dataclass(frozen=True)
class Param:
    """One kernel parameter as its backend reflected it from the compiled code; ``Stream.launch`` checks
    every argument against these before anything is enqueued, the same way on every backend.

    ``kind`` is "buffer", "scalar", or "buffer-or-scalar" (a CUDA ``.u64`` parameter: a pointer or a 64-bit
    integer look the same in PTX). ``nbytes`` is a scalar's size; ``scalar`` is "float", "int" or "" where the
    code does not say (a cubin's parameters have sizes only)."""

    kind: str
    nbytes: int = 0
    scalar: str = ""


def _describe(params: Sequence[Param]) -> str:
    """``buffer, float32, int32`` for a parameter list, as error messages show it."""
    words = []
    for p in params:
        if p.kind == "buffer":
            words.append("buffer")
        elif p.kind == "buffer-or-scalar":
            words.append("buffer or 64-bit scalar")
        else:
            words.append(f"{p.scalar or 'scalar'}{8 * p.nbytes}")
    return ", ".join(words) or "no parameters"


def _dims_key(value: object) -> object:
    """A cache key for grid or block that only exact ints make (``(True,)`` equals ``(1,)`` but is no dim)."""
    if type(value) is int:
        return value
    if type(value) is tuple and all(type(d) is int for d in value):
        return value
    return None


class ArgRule:
    """One sequence of argument types, checked once against a kernel's parameters (``Kernel._arg_rule``):
    where its Buffers are (each resolved and checked on every call), and what the backend prepared to pack
    it (``Kernel._prepare_args``), so a launch classifies nothing."""

    __slots__ = ("buffers", "packing")

    def __init__(self, buffers: tuple[int, ...], packing: Any):
        self.buffers, self.packing = buffers, packing


class LaunchPlan:
    """``Kernel.prepare(grid, block)``: the configuration checked once. Calling it with a stream and the
    arguments does only what can change per call — the arguments against the kernel's parameters (an
    ``ArgRule`` cached per sequence of argument types), the buffers' liveness — and the backend's launch."""

    __slots__ = ("kernel", "grid", "block")

    def __init__(self, kernel: Kernel, grid: Dim3, block: Dim3):
        self.kernel, self.grid, self.block = kernel, grid, block

    def __call__(self, stream: Stream, *args: object) -> None:
        # Stream in the MRO, not isinstance: Stream is an ABC, whose isinstance costs a Python-level call
        if Stream not in type(stream).__mro__ or stream._device is not self.kernel.module.device:
            raise InvalidArgument("Stream.launch", "a plan launches on a Stream of its kernel's device")
        stream._launch_plan(self, args)

    def __repr__(self) -> str:
        return f"<LaunchPlan {self.kernel.name} grid={self.grid} block={self.block}>"


class Kernel:
    """One entry point of a compiled Module, launched with ``Stream.launch`` or through ``prepare``."""

    #: True where the code has one parameter list (CUDA): arguments match ``params`` position by position.
    #: False where buffers and scalars are separate binding spaces (Vulkan, WebGPU): buffer arguments match
    #: the buffer parameters in order and scalars the scalar ones, however the two are interleaved.
    _positional: ClassVar[bool] = True

    def __init__(self, module: Module, name: str):
        self.module = module
        self.name = name
        self._plans: dict[tuple[object, object], LaunchPlan] = {}  # Stream.launch's plans, by exact grid/block
        self._arg_rules: dict[tuple[type, ...], ArgRule] = {}  # by the exact argument types

    def prepare(self, grid: object, block: object) -> LaunchPlan:
        """Check ``grid`` and ``block`` against the device limits once; the plan launches with arguments."""
        device = self.module.device
        self.module._check_open("Kernel.prepare")
        g, b = _launch_dims("Kernel.prepare", device.info.limits, grid, block)
        return LaunchPlan(self, g, b)

    def _plan(self, op: str, grid: object, block: object) -> LaunchPlan:
        if type(grid) is int and type(block) is int:  # the common one-off form, without _dims_key's calls
            key: tuple[object, object] = (grid, block)
        else:
            key = (_dims_key(grid), _dims_key(block))
        plan = self._plans.get(key)
        if plan is None:
            g, b = _launch_dims(op, self.module.device.info.limits, grid, block)
            plan = LaunchPlan(self, g, b)
            if key[0] is not None and key[1] is not None and len(self._plans) < 256:
                self._plans[key] = plan
        return plan

    def _arg_rule(self, types: tuple[type, ...]) -> ArgRule:
        """Check one sequence of argument types once; its rule, cached for the next launches (a closed module
        leaves none cached: every launch of its kernels comes here, and raises)."""
        op = "Stream.launch"
        self.module._check_open(op)
        device = self.module.device
        buffers = []
        for i, t in enumerate(types):
            need = _SCALAR_CAPABILITY.get(t, _NOT_A_SCALAR)
            if need is _NOT_A_SCALAR:
                if not issubclass(t, Buffer):
                    raise InvalidArgument(op, f"argument {i} is {t.__name__}; pass a Buffer or a sized numpy "
                                              "scalar such as np.float32(2.0) or np.uint32(n)")
                buffers.append(i)
            elif need is not None and not device.supports(need):
                raise Unsupported(op, need, f"argument {i} is {t.__name__}")
        self._match_params(types)
        rule = ArgRule(tuple(buffers), self._prepare_args(types, tuple(buffers)))
        if len(self._arg_rules) < 256:
            self._arg_rules[types] = rule
        return rule

    def _prepare_args(self, types: tuple[type, ...], buffers: tuple[int, ...]) -> Any:
        """What the backend packs arguments of these (checked) types with, made once per sequence of types
        and handed to ``Stream._launch_prepared``; ``buffers``: the positions of the Buffers. None by default."""
        return None

    @property
    def native(self) -> Any:
        """The backend's own handle of this kernel (CUDA: the CUfunction), for interop and raw-driver floors."""
        self.module._check_open("Kernel.native")
        return self._native()

    def _native(self) -> Any:
        raise Unsupported("Kernel.native", "native", f"{self.module.device.info.backend} kernels have no single native handle")

    @property
    def params(self) -> tuple[Param, ...]:
        """The parameters in order, reflected from the compiled code (see ``Param``)."""
        return self._params()

    def _params(self) -> tuple[Param, ...]:
        """Filled in by each backend from its reflection (PTX, SPIR-V, WGSL)."""
        raise NotImplementedError(f"{type(self).__name__} does not reflect its parameters")

    def _match_params(self, types: tuple[type, ...]) -> None:
        """InvalidArgument unless these argument types bind to the kernel's parameters (see ``_positional``)."""
        params = self.params
        if self._positional:
            pairs = list(enumerate(zip(types, params)))
            counts = (len(types), len(params))
        else:
            bufs = [i for i, t in enumerate(types) if issubclass(t, Buffer)]
            scalars = [i for i, t in enumerate(types) if not issubclass(t, Buffer)]
            pbufs = [p for p in params if p.kind != "scalar"]
            pscalars = [p for p in params if p.kind == "scalar"]
            if len(bufs) != len(pbufs) or len(scalars) != len(pscalars):
                raise InvalidArgument("Stream.launch", f"kernel {self.name} takes {len(pbufs)} buffer(s) and "
                                      f"{len(pscalars)} scalar(s) ({_describe(params)}), got {len(bufs)} and {len(scalars)}")
            pairs = [(i, (types[i], p)) for i, p in zip(bufs + scalars, pbufs + pscalars)]
            counts = (0, 0)
        if counts[0] != counts[1]:
            raise InvalidArgument("Stream.launch", f"kernel {self.name} takes {len(params)} argument(s) "
                                  f"({_describe(params)}), got {len(types)}")
        for i, (t, p) in pairs:
            if issubclass(t, Buffer):
                if p.kind == "scalar":
                    raise InvalidArgument("Stream.launch", f"argument {i} of {self.name} is a Buffer; the kernel "
                                          f"declares a {_describe((p,))} there")
                continue
            size = np.dtype(t).itemsize
            kind = "float" if issubclass(t, np.floating) else "int"
            if p.kind == "buffer" or size != p.nbytes or (p.scalar and p.scalar != kind):
                raise InvalidArgument("Stream.launch", f"argument {i} of {self.name} is {t.__name__}; the kernel "
                                      f"declares a {_describe((p,))} there")

    def __repr__(self) -> str:
        return f"<Kernel {self.name} ({self.module.lang})>"


class Module(abc.ABC):
    """Compiled kernel code; ``kernel(name)`` looks up an entry point.

    ``close()`` (idempotent; a context manager closes on exit) releases the driver's module and the pipelines
    made from it, once the work already enqueued with them has completed; its kernels then raise UseAfterFree
    naming the op (``Stream.launch``, ``Kernel.prepare``, ...). A Module collected unclosed is released too
    (by the device's next alloc, compile or synchronize at the latest), and closing the device releases all."""

    def __init__(self, device: Device, lang: str):
        self.device = device
        self.lang = lang
        self._kernels: dict[str, Kernel] = {}
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for kernel in self._kernels.values():  # a launch finds no cached plan or rule: the first one checks
            kernel._plans.clear()
            kernel._arg_rules.clear()
        if not self.device._closed:  # closing the device released it
            self._release()
        self._kernels.clear()

    def _check_open(self, op: str) -> None:
        self.device._check_open(op)
        if self._closed:
            raise UseAfterFree(op, f"a {self.lang} module", "closed")

    @abc.abstractmethod
    def _release(self) -> None:
        """Give the driver's module and pipelines back once the work enqueued with them has completed."""

    def __enter__(self) -> Module:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def kernel(self, name: str) -> Kernel:
        op = "Module.kernel"
        if not isinstance(name, str):
            raise InvalidArgument(op, f"kernel name must be a str, got {type(name).__name__}")
        self._check_open(op)
        if name not in self._kernels:
            names = self._kernel_names()
            if name not in names:
                have = ", ".join(sorted(names)) or "none"
                raise InvalidArgument(op, f"no kernel {name!r} in this module (it has: {have})")
            self._kernels[name] = self._make_kernel(name)
        return self._kernels[name]

    @abc.abstractmethod
    def _kernel_names(self) -> Sequence[str]: ...

    def _make_kernel(self, name: str) -> Kernel:
        return Kernel(self, name)


class Stream(abc.ABC):
    """An in-order queue of device work."""

    _capturing: Graph | None = None  # the Graph this stream's work goes into, during ``capture``

    def __init__(self, device: Device):
        self._device = device

    @property
    def device(self) -> Device:
        return self._device

    @property
    def native(self) -> Any:
        """The backend's own queue handle (CUstream, VkQueue, GPUQueue), for interop and raw-driver floors."""
        self._device._check_open("Stream.native")
        return self._native()

    @abc.abstractmethod
    def _native(self) -> Any: ...

    @contextlib.contextmanager
    def capture(self) -> Any:
        """``with stream.capture() as graph:`` — the launches, fills and copy_dtod enqueued on this stream
        inside the block are captured into ``graph`` instead of running (see ``Graph``); needs "graphs"."""
        op = "Stream.capture"
        self._device._check_open(op)
        if not self._device.supports("graphs"):
            raise Unsupported(op, "graphs")
        if self._capturing is not None:
            raise InvalidArgument(op, "this stream is already capturing a graph")
        graph = self._begin_capture()
        self._capturing = graph
        try:
            yield graph
        except BaseException:
            self._capturing = None
            self._end_capture(graph, keep=False)
            graph.close()
            raise
        self._capturing = None
        self._end_capture(graph, keep=True)
        graph._ready = True

    def _not_capturing(self, op: str) -> None:
        if self._capturing is not None:
            raise InvalidArgument(op, "not allowed while the stream is capturing a graph (graphs capture "
                                      "launches, fills and copy_dtod only)")

    def _buffer(self, op: str, what: str, buf: object) -> Buffer:
        if Buffer not in type(buf).__mro__:  # isinstance of an ABC costs a Python-level call on this hot path
            raise InvalidArgument(op, f"{what} must be a Buffer, got {type(buf).__name__}")
        backing = buf._backing(op)
        if backing.device is not self._device:
            raise InvalidArgument(op, f"{what} belongs to another device")
        return backing

    def copy_htod(self, dst: Buffer, src: object, *, dst_offset: int = 0) -> None:
        """Copy all of host ``src`` into ``dst`` at ``dst_offset``. ``src`` is reusable on return."""
        op = "Stream.copy_htod"
        host = _host_bytes(op, src, writable=False)
        buf = self._buffer(op, "dst", dst)
        dst_offset = _check_range(op, "dst", dst, dst_offset, host.nbytes)
        self._not_capturing(op)
        if host.nbytes:
            self._device._check_open(op)
            self._copy_htod(buf, dst_offset, host)

    def copy_htod_deferred(self, dst: Buffer, src: object, *, dst_offset: int = 0) -> None:
        """``copy_htod`` that may read ``src`` as late as when the stream reaches the copy: the caller leaves it
        unchanged until the stream synchronizes (or an event recorded after the copy completes); it is kept alive
        until then. The faster copy where copy_htod's reuse-on-return costs a staging copy (a pinned source on
        CUDA is DMA'd straight from the array). Backends without a direct path make the copy_htod copy."""
        op = "Stream.copy_htod_deferred"
        host = _host_bytes(op, src, writable=False)
        buf = self._buffer(op, "dst", dst)
        dst_offset = _check_range(op, "dst", dst, dst_offset, host.nbytes)
        self._not_capturing(op)
        if host.nbytes:
            self._device._check_open(op)
            self._copy_htod_deferred(buf, dst_offset, host)

    def copy_dtoh(self, dst: object, src: Buffer, *, src_offset: int = 0) -> None:
        """Fill all of host ``dst`` from ``src`` at ``src_offset``; valid once the stream synchronizes."""
        op = "Stream.copy_dtoh"
        host = _host_bytes(op, dst, writable=True)
        buf = self._buffer(op, "src", src)
        src_offset = _check_range(op, "src", src, src_offset, host.nbytes)
        self._not_capturing(op)
        if host.nbytes:
            self._device._check_open(op)
            self._copy_dtoh(host, buf, src_offset)

    def copy_dtod(self, dst: Buffer, src: Buffer, nbytes: int, *, dst_offset: int = 0, src_offset: int = 0) -> None:
        """Copy ``nbytes`` between device buffers; overlapping ranges of one buffer are rejected."""
        op = "Stream.copy_dtod"
        nbytes = _check_int(op, "nbytes", nbytes)
        d, s = self._buffer(op, "dst", dst), self._buffer(op, "src", src)
        dst_offset = _check_range(op, "dst", dst, dst_offset, nbytes)
        src_offset = _check_range(op, "src", src, src_offset, nbytes)
        if d is s and nbytes and dst_offset < src_offset + nbytes and src_offset < dst_offset + nbytes:
            raise InvalidArgument(op, "source and destination ranges overlap")
        if nbytes:
            self._device._check_open(op)
            if self._capturing is not None:
                self._capturing._uses((dst, src))
            self._copy_dtod(d, dst_offset, s, src_offset, nbytes)

    def fill(self, buf: Buffer, value: int, *, offset: int = 0, nbytes: int | None = None) -> None:
        """Set ``nbytes`` bytes (default: to the end) of ``buf`` from ``offset`` to the byte ``value``."""
        op = "Stream.fill"
        b = self._buffer(op, "buf", buf)
        value = _check_int(op, "value", value)
        if value > 255:
            raise InvalidArgument(op, f"value is one byte, 0..255, got {value}")
        offset = _check_int(op, "offset", offset)
        nbytes = buf.nbytes - offset if nbytes is None else _check_int(op, "nbytes", nbytes)
        offset = _check_range(op, "buf", buf, offset, max(nbytes, 0))
        if nbytes:
            self._device._check_open(op)
            if self._capturing is not None:
                self._capturing._uses((buf,))
            self._fill(b, offset, nbytes, value)

    def record(self, *, timing: bool = False, event: Event | None = None) -> Event:
        """An event marking everything enqueued so far; ``timing=True`` makes it usable by elapsed_ms.

        With ``event=`` (an Event of this device, recorded with the same ``timing``) that event is re-recorded
        here and returned, the same object, instead of a new one: from then on it answers for this point and its
        ``stream`` is this stream; a ``wait`` enqueued before keeps the point it was given. The cheaper record in
        a loop: a new Event per record costs an allocation (issue 30)."""
        if self._device._closed or self._capturing is not None:  # inline checks: a hot path
            self._device._check_open("Stream.record")
            self._not_capturing("Stream.record")
        if event is not None:
            if Event not in type(event).__mro__ or event._stream._device is not self._device:
                raise InvalidArgument("Stream.record", "event must be an Event recorded on a stream of this device")
            if bool(timing) != event._timing:
                raise InvalidArgument("Stream.record", f"the event was recorded with timing={event._timing}: "
                                                       f"re-record it with timing={event._timing}")
            self._rerecord(event)
            return event
        if timing and not self._device.supports("events.timing"):
            raise Unsupported("Stream.record", "events.timing")
        return self._record(bool(timing))

    def wait(self, event: Event) -> None:
        """Make later work on this stream wait until ``event`` completes (on any stream of the device)."""
        op = "Stream.wait"
        if not isinstance(event, Event) or event.stream.device is not self._device:
            raise InvalidArgument(op, "event must be an Event recorded on a stream of this device")
        self._device._check_open(op)
        self._not_capturing(op)
        self._wait(event)

    def synchronize(self, timeout: float | None = None) -> None:
        """Block until all work enqueued on this stream has completed; past ``timeout`` seconds raise Timeout."""
        if self._device._closed:  # inline _check_open: a hot path
            self._device._check_open("Stream.synchronize")
        self._synchronize(timeout if timeout is None else _check_timeout("Stream.synchronize", timeout))

    def launch(self, kernel: Kernel, grid: object, block: object, args: Sequence[object] = ()) -> None:
        """Run ``kernel`` over ``grid`` blocks of ``block`` threads with ``args`` (Buffers and numpy scalars).

        The same as ``kernel.prepare(grid, block)(stream, *args)``, with the plan cached on the kernel."""
        op = "Stream.launch"
        if not isinstance(kernel, Kernel) or kernel.module.device is not self._device:
            raise InvalidArgument(op, "kernel must be a Kernel compiled on this device")
        if type(args) is not tuple and type(args) is not list:
            raise InvalidArgument(op, f"args must be a tuple or list of Buffers and numpy scalars, got {type(args).__name__}")
        self._launch_plan(kernel._plan(op, grid, block), args)

    def _launch_plan(self, plan: LaunchPlan, args: Sequence[object]) -> None:
        """The hot path of every launch: the argument rule is cached per sequence of argument types."""
        kernel = plan.kernel
        types = tuple(map(type, args))
        rule = kernel._arg_rules.get(types)
        if rule is None:
            rule = kernel._arg_rule(types)
        checked = list(args)
        device = self._device
        for i in rule.buffers:  # Buffers by the rule: only their liveness and device are left to check
            backing = args[i]._backing("Stream.launch")  # type: ignore[attr-defined]
            if backing._device is not device:
                self._buffer("Stream.launch", f"argument {i}", args[i])  # raises, naming the argument
            checked[i] = backing
        if device._closed or self._capturing is not None:
            device._check_open("Stream.launch")
            if self._capturing is not None:
                self._capturing._uses([args[i] for i in rule.buffers])  # type: ignore[misc]
                self._capturing._modules[id(kernel.module)] = kernel.module
        self._launch_prepared(plan, rule.packing, checked)

    def _launch_prepared(self, plan: LaunchPlan, packing: Any, args: list[Buffer | np.generic]) -> None:
        """The backend's launch of checked arguments (Buffers resolved to their backing), ``packing`` being
        what ``Kernel._prepare_args`` made for their types. By default ``_launch``, which needs no packing."""
        self._launch(plan.kernel, plan.grid, plan.block, args)

    def _begin_capture(self) -> Graph:
        """Start capturing this stream's work into a new Graph (backends that list "graphs")."""
        raise Unsupported("Stream.capture", "graphs")

    def _end_capture(self, graph: Graph, keep: bool) -> None:
        """Stop capturing; with ``keep`` make ``graph`` launchable, else discard what was captured."""
        raise Unsupported("Stream.capture", "graphs")

    @abc.abstractmethod
    def _copy_htod(self, dst: Buffer, dst_offset: int, src: np.ndarray) -> None: ...

    def _copy_htod_deferred(self, dst: Buffer, dst_offset: int, src: np.ndarray) -> None:
        """A backend with a copy that reads the host array later overrides this; the staged copy keeps the
        weaker promise too."""
        self._copy_htod(dst, dst_offset, src)

    @abc.abstractmethod
    def _copy_dtoh(self, dst: np.ndarray, src: Buffer, src_offset: int) -> None: ...

    @abc.abstractmethod
    def _copy_dtod(self, dst: Buffer, dst_offset: int, src: Buffer, src_offset: int, nbytes: int) -> None: ...

    @abc.abstractmethod
    def _fill(self, buf: Buffer, offset: int, nbytes: int, value: int) -> None: ...

    @abc.abstractmethod
    def _record(self, timing: bool) -> Event: ...

    def _rerecord(self, event: Event) -> None:
        """Move ``event`` (of this device, its timing checked) to a new point on this stream: ``_record``'s point,
        set in the same object (its ``_stream`` this stream); waits already enqueued on it are not affected.
        Not abstract, so that a backend written before ``record(event=)`` still loads (EVENT-12 fails on it)."""
        raise NotImplementedError(f"Stream.record(event=): the {self._device.info.backend} backend has no _rerecord "
                                  "(docs/backend-authors.md)")

    @abc.abstractmethod
    def _wait(self, event: Event) -> None: ...

    @abc.abstractmethod
    def _synchronize(self, timeout: float | None) -> None:
        """Wait; with a ``timeout`` (seconds > 0) raise ``Timeout("Stream.synchronize", timeout)`` when it expires."""

    def _launch(self, kernel: Kernel, grid: Dim3, block: Dim3, args: list[Buffer | np.generic]) -> None:
        """A backend implements this, or ``_launch_prepared`` when it packs arguments by a prepared rule."""
        raise NotImplementedError(f"{type(self).__name__} implements neither _launch nor _launch_prepared")


class Device(abc.ABC):
    """An opened device: memory, streams, compilation. ``close()`` is idempotent."""

    def __init__(self, info: DeviceInfo):
        self._info = info
        self._closed = False

    @property
    def info(self) -> DeviceInfo:
        return self._info

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def native(self) -> Any:
        """The backend's own device handles, for interop and raw-driver floors; each backend documents the shape."""
        self._check_open("Device.native")
        return self._native()

    @abc.abstractmethod
    def _native(self) -> Any: ...

    def _check_open(self, op: str) -> None:
        if self._closed:
            raise UseAfterFree(op, f"device {self._info.backend}:{self._info.index}", "closed")

    def supports(self, capability: str) -> bool:
        """The only source of "not supported": ask before using an optional feature."""
        if not isinstance(capability, str) or capability not in CAPABILITIES:
            raise InvalidArgument("Device.supports", f"unknown capability {capability!r}; known: {', '.join(CAPABILITIES)}")
        return capability in self._capabilities()

    @property
    def languages(self) -> tuple[str, ...]:
        """Kernel languages this device compiles, in the backend's order of preference."""
        return tuple(lang for lang in LANGUAGES if self.supports(f"lang.{lang}"))

    @property
    def default_stream(self) -> Stream:
        self._check_open("Device.default_stream")
        return self._default_stream()

    def create_stream(self) -> Stream:
        self._check_open("Device.create_stream")
        return self._create_stream()

    def alloc(self, nbytes: int) -> Buffer:
        """``nbytes`` >= 1 of device memory; more than ``info.limits.max_alloc`` raises OutOfMemory."""
        if type(nbytes) is int and 0 < nbytes <= self._info.limits.max_alloc and not self._closed:
            return self._alloc(nbytes)  # the common case, checked inline; anything else gets the errors below
        op = "Device.alloc"
        nbytes = _check_int(op, "nbytes", nbytes, 1)
        self._check_open(op)
        if nbytes > self._info.limits.max_alloc:
            raise OutOfMemory(
                self._info.backend, op, None, "exceeds max_alloc",
                f"{nbytes} bytes requested, the device allows {self._info.limits.max_alloc} in one allocation",
            )
        return self._alloc(nbytes)

    def compile(self, source: str | bytes, lang: str, *, options: Sequence[str] = ()) -> Module:
        """Compile kernel ``source`` written in ``lang``; a CompileError carries the compiler's log."""
        op = "Device.compile"
        self._check_open(op)  # a closed device says so whatever the source
        if lang not in LANGUAGES:
            raise InvalidArgument(op, f"unknown kernel language {lang!r}; known: {', '.join(LANGUAGES)}")
        if not self.supports(f"lang.{lang}"):
            raise Unsupported(op, f"lang.{lang}", f"this device compiles {', '.join(self.languages)}")
        if lang in BINARY_LANGUAGES:
            if not isinstance(source, (bytes, bytearray, memoryview)):
                raise InvalidArgument(op, f"{lang} source is a binary image and must be bytes")
        elif not isinstance(source, str):
            raise InvalidArgument(op, f"{lang} source must be str")
        else:
            _check_utf8(op, lang, source)
        if isinstance(options, (str, bytes)) or not isinstance(options, (tuple, list)) \
                or not all(isinstance(o, str) for o in options):
            raise InvalidArgument(op, f"options must be a list or tuple of str, got {options!r}")
        return self._compile(source, lang, tuple(options))

    def synchronize(self, timeout: float | None = None) -> None:
        """Block until all work on every stream of this device has completed; past ``timeout`` s raise Timeout."""
        self._check_open("Device.synchronize")
        self._synchronize(timeout if timeout is None else _check_timeout("Device.synchronize", timeout))

    def diagnostics(self) -> list[str]:
        """Drain the messages the driver reported since the last call (e.g. Vulkan validation layers).

        The conformance plugin fails any test that leaves a message here."""
        return self._drain_diagnostics()

    def _drain_diagnostics(self) -> list[str]:
        return []

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        i = self._info
        return f"<{type(self).__name__} {i.backend}:{i.index} {i.name!r}>"

    @abc.abstractmethod
    def _capabilities(self) -> frozenset[str]: ...

    @abc.abstractmethod
    def _default_stream(self) -> Stream: ...

    @abc.abstractmethod
    def _create_stream(self) -> Stream: ...

    @abc.abstractmethod
    def _alloc(self, nbytes: int) -> Buffer: ...

    @abc.abstractmethod
    def _compile(self, source: str | bytes, lang: str, options: tuple[str, ...]) -> Module: ...

    @abc.abstractmethod
    def _synchronize(self, timeout: float | None) -> None:
        """Wait; with a ``timeout`` (seconds > 0) raise ``Timeout("Device.synchronize", timeout)`` when it expires."""

    @abc.abstractmethod
    def _close(self) -> None: ...


class Backend(abc.ABC):
    """A registered backend (entry-point group ``ironaccel.backends``). ``probe`` never raises."""

    name: ClassVar[str]
    compute: ClassVar[bool] = True
    #: The keyword options ``_open_device`` takes (Vulkan: ``validation``); ``open_device`` refuses any other.
    options: ClassVar[tuple[str, ...]] = ()

    @abc.abstractmethod
    def probe(self) -> BackendInfo:
        """Whether this machine can run the backend, and why not; never raises."""

    @abc.abstractmethod
    def device_count(self) -> int:
        """Number of devices; NotAvailable when the runtime is missing."""

    def open_device(self, index: int = 0, **options: Any) -> Device:
        """Open device ``index`` (an int, 0 <= index < device_count()); NotAvailable when the runtime is missing.

        ``options`` are backend-specific (Vulkan: ``validation=``); the backend rejects ones it does not know."""
        op = "Backend.open_device"
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise InvalidArgument(op, f"device index must be an int, got {type(index).__name__}")
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            takes = f"it takes {', '.join(self.options)}" if self.options else "it takes none"
            raise InvalidArgument(op, f"the {self.name} backend has no option {', '.join(unknown)} ({takes})")
        count = self.device_count()
        if not 0 <= index < count:
            raise InvalidArgument(op, f"{self.name} device index {int(index)} is out of range: {count} device(s)")
        return self._open_device(int(index), **options)

    @abc.abstractmethod
    def _open_device(self, index: int, **options: Any) -> Device:
        """Open a device whose index is known to be in range."""
