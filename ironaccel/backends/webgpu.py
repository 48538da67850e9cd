"""WebGPU backend over wgpu-py: adapters as devices, one queue, WGSL kernels.

Decisions, written down here because WebGPU leaves them to us:

* Devices are the adapters of wgpu's compute-complete backends (Vulkan, Metal, D3D12); OpenGL adapters
  are skipped (no storage-buffer atomics guarantees, no timestamps).
* ``limits.max_alloc`` is the largest buffer usable everywhere a buffer is, kernels included:
  ``max-storage-buffer-binding-size``.
* All Stream objects share the device's single queue, so each keeps its own order and a cross-stream wait
  only has to flush the recorded stream. A stream batches its commands in one open encoder and submits it
  when it must (before a ``write_buffer``, at ``record``/``synchronize``/``copy_dtoh``).
* WebGPU copies need 4-byte aligned offsets and sizes; the API promises byte granularity, so unaligned
  copies and non-zero fills run an internal WGSL kernel that merges bytes into whole words.
* ``copy_dtoh`` copies into a mappable readback buffer; the host array is filled when the stream, the
  device or an event recorded after it is synchronized (or queried complete).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from .. import api
from ..api import BackendInfo, DeviceInfo, Limits
from ..errors import CompileError, DriverError, InvalidArgument, NotAvailable, OutOfMemory

BACKEND = "webgpu"
COMPUTE_BACKEND_TYPES = ("Vulkan", "Metal", "D3D12")
OPTIONAL_FEATURES = ("timestamp-query", "shader-f64", "shader-float32-atomic")

_wgpu: Any = None


def _import_wgpu() -> Any:
    global _wgpu
    if _wgpu is None:
        try:
            import wgpu
        except ImportError as exc:
            raise NotAvailable(BACKEND, "wgpu", f"the wgpu package is not installed ({exc}): pip install wgpu") from None
        _wgpu = wgpu
    return _wgpu


def _call(op: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a wgpu call, turning its errors into ours; the one place native errors are translated."""
    wgpu = _wgpu
    try:
        return fn(*args, **kwargs)
    except wgpu.GPUOutOfMemoryError as exc:
        raise OutOfMemory(BACKEND, op, None, "GPUOutOfMemoryError", _first_line(exc)) from None
    except wgpu.GPUError as exc:
        if "Not enough memory left" in str(exc):  # wgpu-native reports allocation failure as validation
            raise OutOfMemory(BACKEND, op, None, "GPUOutOfMemoryError", _clean(exc)) from None
        raise DriverError(BACKEND, op, None, type(exc).__name__, _clean(exc)) from None


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _clean(exc: Exception) -> str:
    """wgpu's message without its boilerplate first lines, on one line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    lines = [ln for ln in lines if ln not in ("Validation Error", "Caused by:")]
    return " / ".join(lines) or type(exc).__name__


def _adapters() -> list[Any]:
    wgpu = _import_wgpu()
    try:
        found = wgpu.gpu.enumerate_adapters_sync()
    except Exception as exc:  # a broken loader or ICD must not crash enumeration
        raise NotAvailable(BACKEND, "wgpu-native", f"adapter enumeration failed: {exc}") from None
    return [a for a in found if a.info.get("backend_type") in COMPUTE_BACKEND_TYPES]


class WebGPUBackend(api.Backend):
    name = BACKEND

    def probe(self) -> BackendInfo:
        try:
            adapters = _adapters()
        except NotAvailable as exc:
            return BackendInfo(BACKEND, False, exc.detail)
        version = _wgpu.__version__
        if not adapters:
            return BackendInfo(BACKEND, False, "wgpu found no Vulkan/Metal/D3D12 adapter", version)
        names = ", ".join(a.info["device"] for a in adapters)
        return BackendInfo(BACKEND, True, f"{len(adapters)} adapter(s): {names}", version)

    def device_count(self) -> int:
        return len(_adapters())

    def _open_device(self, index: int) -> WebGPUDevice:
        return WebGPUDevice(_adapters()[index], index)


def _device_info(adapter: Any, index: int) -> DeviceInfo:
    info, lim = adapter.info, adapter.limits
    cpu = info.get("adapter_type") == "CPU"
    name = info.get("device") or "unknown adapter"
    vendor = info.get("vendor") or f"0x{info.get('vendor_id', 0):04x}"
    driver = "SwiftShader" if "swiftshader" in name.lower() else vendor
    per_axis = lim["max-compute-workgroups-per-dimension"]
    return DeviceInfo(
        backend=BACKEND,
        index=index,
        name=name,
        vendor=vendor,
        driver=driver,
        driver_version=info.get("description") or "not reported by wgpu",
        simulated=cpu,
        memory=0,
        limits=Limits(
            max_alloc=min(lim["max-buffer-size"], lim["max-storage-buffer-binding-size"]) // 4 * 4,
            max_threads_per_block=lim["max-compute-invocations-per-workgroup"],
            max_block=(lim["max-compute-workgroup-size-x"], lim["max-compute-workgroup-size-y"],
                       lim["max-compute-workgroup-size-z"]),
            max_grid=(per_axis, per_axis, per_axis),
            max_shared_memory=lim["max-compute-workgroup-storage-size"],
            warp_size=int(info.get("subgroup_min_size", 0) or 0),
        ),
        extra={"backend_type": info.get("backend_type"), "adapter_type": info.get("adapter_type")},
    )


class WebGPUDevice(api.Device):
    def __init__(self, adapter: Any, index: int):
        super().__init__(_device_info(adapter, index))
        wgpu = _import_wgpu()
        self._features = frozenset(f for f in OPTIONAL_FEATURES if f in adapter.features)
        wanted_limits = {k: adapter.limits[k] for k in (
            "max-buffer-size", "max-storage-buffer-binding-size", "max-compute-invocations-per-workgroup",
            "max-compute-workgroup-size-x", "max-compute-workgroup-size-y", "max-compute-workgroup-size-z",
            "max-compute-workgroup-storage-size", "max-storage-buffers-per-shader-stage",
            "max-compute-workgroups-per-dimension")}
        self._gpu = _call("GPUAdapter.request_device", adapter.request_device_sync,
                          required_features=sorted(self._features), required_limits=wanted_limits)
        self._usage = wgpu.BufferUsage
        self._byte_kernel: Any = None
        self._fence_src: Any = None
        self._unsubmitted: set[WebGPUStream] = set()  # streams with an open encoder: kept alive until flushed
        self._readbacks: list[tuple[int, Any, int, np.ndarray]] = []  # (seq, mappable buffer, start, host)
        self._readback_seq = 0
        self._default = WebGPUStream(self)

    def _native(self) -> Any:
        """The GPUDevice."""
        return self._gpu

    def _capabilities(self) -> frozenset[str]:
        caps = {"lang.wgsl", "kernel.shared_memory", "kernel.atomics.int32"}
        if "timestamp-query" in self._features:
            caps.add("events.timing")
        if "shader-f64" in self._features:
            caps.add("kernel.float64")
        if "shader-float32-atomic" in self._features:
            caps.add("kernel.atomics.float32")
        return frozenset(caps)

    def _default_stream(self) -> WebGPUStream:
        return self._default

    def _create_stream(self) -> WebGPUStream:
        return WebGPUStream(self)

    def _new_buffer(self, op: str, nbytes: int, usage: int) -> Any:
        return _call(op, self._gpu.create_buffer, size=max(4, -(-nbytes // 4) * 4), usage=usage)

    def _alloc(self, nbytes: int) -> WebGPUBuffer:
        u = self._usage
        return WebGPUBuffer(self, nbytes, self._new_buffer("GPUDevice.create_buffer", nbytes, u.STORAGE | u.COPY_SRC | u.COPY_DST))

    def _compile(self, source: str | bytes, lang: str, options: tuple[str, ...]) -> WebGPUModule:
        if options:
            raise InvalidArgument("Device.compile", f"WGSL takes no compiler options, got {options!r}")
        assert isinstance(source, str)
        try:
            shader = self._gpu.create_shader_module(code=source)
        except _wgpu.GPUError as exc:
            raise CompileError("GPUDevice.create_shader_module", "wgsl", str(exc).strip()) from None
        return WebGPUModule(self, source, shader)

    def _synchronize(self, timeout: float | None = None) -> None:
        for s in list(self._unsubmitted):
            s._flush()
        self._default._synchronize()  # one queue: a fence after everything covers every stream

    def _deliver_readbacks(self, upto: int | None) -> None:
        """Copy finished readbacks into their host arrays: all, or those enqueued up to ``upto``.

        Readbacks live on the device, not the stream, so a dropped Stream object still delivers."""
        ready = [r for r in self._readbacks if upto is None or r[0] <= upto]
        if not ready:
            return
        self._readbacks = [r for r in self._readbacks if upto is not None and r[0] > upto]
        for _, buf, start, host in ready:
            _call("GPUBuffer.map", buf.map_sync, _wgpu.MapMode.READ)
            host[:] = np.frombuffer(buf.read_mapped(), dtype=np.uint8)[start:start + host.nbytes]
            buf.unmap()

    def _fence(self, encoder: Any) -> Any:
        """A promise that resolves once the GPU has run everything submitted up to ``encoder``.

        A copy into a fresh mappable buffer, then map_async: the mapping resolves only when the copy, and
        so all queue work before it, has finished. (wgpu-py 0.32's on_submitted_work_done fails with its
        bundled wgpu-native, so the map is our fence.)"""
        u = self._usage
        if self._fence_src is None:
            self._fence_src = self._new_buffer("GPUDevice.create_buffer", 4, u.COPY_SRC)
        target = self._new_buffer("GPUDevice.create_buffer", 4, u.MAP_READ | u.COPY_DST)
        encoder.copy_buffer_to_buffer(self._fence_src, 0, target, 0, 4)
        return target

    def _close(self) -> None:
        try:
            self._synchronize()
        finally:
            self._gpu.destroy()

    def _byte_pipeline(self) -> Any:
        """The internal byte-granular copy/fill kernel (see module docstring)."""
        if self._byte_kernel is None:
            module = self.compile(BYTE_KERNEL_WGSL, "wgsl")
            self._byte_kernel = (module._bind_layout, module._pipeline("ia_bytes", (BYTE_KERNEL_BLOCK, 1, 1)))
        return self._byte_kernel


class WebGPUBuffer(api.Buffer):
    def __init__(self, device: WebGPUDevice, nbytes: int, gpu_buffer: Any):
        super().__init__(device, nbytes)
        self._gpu_buffer = gpu_buffer

    def _native_handle(self) -> Any:
        return self._gpu_buffer

    def _release(self) -> None:
        # Release, not destroy: work already submitted that uses the buffer keeps it alive until done.
        self._gpu_buffer = None


_KERNEL_RE = re.compile(r"@compute\b[^;{]*?\bfn\s+([A-Za-z_]\w*)")
_BINDING_RE = re.compile(r"@group\(\s*0\s*\)\s*@binding\(\s*(\d+)\s*\)\s*var\s*<\s*(storage|uniform)\s*(?:,\s*(read_write|read))?\s*>")
_OVERRIDE_RE = re.compile(r"\boverride\s+(BLOCK_[XYZ])\b")
_FIXED_SIZE_RE = re.compile(r"@workgroup_size\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?(?:,\s*(\d+)\s*)?\)")


class WebGPUModule(api.Module):
    """A WGSL module. Bindings are read from the source: storage buffers 0..k-1, then one uniform at k."""

    def __init__(self, device: WebGPUDevice, source: str, shader: Any):
        super().__init__(device, "wgsl")
        self._shader = shader
        self._names = _KERNEL_RE.findall(source)
        bindings = sorted((int(b), kind, access or "read") for b, kind, access in _BINDING_RE.findall(source))
        self._storage = [access for _, kind, access in bindings if kind == "storage"]
        self._has_uniform = any(kind == "uniform" for _, kind, _ in bindings)
        self._overrides = set(_OVERRIDE_RE.findall(source))
        fixed = _FIXED_SIZE_RE.search(source)
        self._fixed_block = tuple(int(v or 1) for v in fixed.groups()) if fixed and not self._overrides else None
        self._pipelines: dict[tuple[str, api.Dim3], Any] = {}
        u = _wgpu.ShaderStage.COMPUTE
        entries = [{"binding": i, "visibility": u,
                    "buffer": {"type": "storage" if acc == "read_write" else "read-only-storage"}}
                   for i, acc in enumerate(self._storage)]
        if self._has_uniform:
            entries.append({"binding": len(self._storage), "visibility": u, "buffer": {"type": "uniform"}})
        gpu = device._gpu
        self._bind_layout = _call("GPUDevice.create_bind_group_layout", gpu.create_bind_group_layout, entries=entries)
        self._layout = _call("GPUDevice.create_pipeline_layout", gpu.create_pipeline_layout,
                             bind_group_layouts=[self._bind_layout])

    def _kernel_names(self) -> Sequence[str]:
        return self._names

    def _pipeline(self, name: str, block: api.Dim3) -> Any:
        key = (name, block)
        pipe = self._pipelines.get(key)
        if pipe is None:
            if self._fixed_block is not None and block != self._fixed_block:
                raise InvalidArgument("Stream.launch", f"kernel {name} has a fixed @workgroup_size{self._fixed_block}; "
                                      "declare `override BLOCK_X/BLOCK_Y/BLOCK_Z` to choose the block at launch")
            constants = {k: v for k, v in zip(("BLOCK_X", "BLOCK_Y", "BLOCK_Z"), block) if k in self._overrides}
            pipe = _call("GPUDevice.create_compute_pipeline", self.device._gpu.create_compute_pipeline,
                         layout=self._layout,
                         compute={"module": self._shader, "entry_point": name, "constants": constants})
            self._pipelines[key] = pipe
        return pipe


class WebGPUEvent(api.Event):
    def __init__(self, stream: WebGPUStream, timing: bool, fence: Any, readback_seq: int, timestamp: Any):
        super().__init__(stream, timing)
        self._done = _call("GPUBuffer.map_async", fence.map_async, _wgpu.MapMode.READ)
        self._readback_seq = readback_seq
        self._timestamp = timestamp  # a mappable 8-byte buffer when timing
        self._ns: int | None = None

    def _query(self) -> bool:
        if self._done._state == "pending":  # wgpu's promise: pending until the queue reached the event
            return False
        self._stream.device._deliver_readbacks(self._readback_seq)
        return True

    def _synchronize(self, timeout: float | None = None) -> None:
        _call("GPUBuffer.map_async", self._done.sync_wait)
        self._stream.device._deliver_readbacks(self._readback_seq)

    def _nanoseconds(self) -> int:
        if self._ns is None:
            self._synchronize()
            buf = self._timestamp
            _call("GPUBuffer.map", buf.map_sync, _wgpu.MapMode.READ)
            self._ns = int(np.frombuffer(buf.read_mapped(), dtype=np.uint64)[0])
            buf.unmap()
        return self._ns

    def _elapsed_ms(self, end: api.Event) -> float:
        assert isinstance(end, WebGPUEvent)
        return (end._nanoseconds() - self._nanoseconds()) / 1e6


class WebGPUStream(api.Stream):
    def __init__(self, device: WebGPUDevice):
        super().__init__(device)
        self._dev: WebGPUDevice = device
        self._encoder: Any = None

    def _native(self) -> Any:
        """The GPUQueue (WebGPU has one queue per device: every stream records into it)."""
        return self._dev._gpu.queue

    # -- batching ---------------------------------------------------------------------------------
    def _enc(self) -> Any:
        if self._encoder is None:
            self._encoder = self._dev._gpu.create_command_encoder()
            self._dev._unsubmitted.add(self)
        return self._encoder

    def _flush(self) -> None:
        if self._encoder is not None:
            enc, self._encoder = self._encoder, None
            self._dev._unsubmitted.discard(self)
            _call("GPUQueue.submit", self._dev._gpu.queue.submit, [enc.finish()])

    def _bytes(self, dst: Any, dst_offset: int, src: Any, src_offset: int, nbytes: int, fill: int) -> None:
        """Byte-granular copy (``src`` given) or fill (``src`` None) through the internal kernel."""
        dev = self._dev
        layout, pipe = dev._byte_pipeline()
        first_word = dst_offset // 4
        words = -(-(dst_offset + nbytes) // 4) - first_word
        groups = -(-words // BYTE_KERNEL_BLOCK)
        gx = min(groups, dev.info.limits.max_grid[0])
        gy = -(-groups // gx)
        params = np.array([dst_offset, src_offset, nbytes, 0 if src is not None else 1, fill * 0x01010101, 0, 0, 0],
                          dtype=np.uint32)
        u = dev._usage
        uniform = _call("GPUDevice.create_buffer_with_data", dev._gpu.create_buffer_with_data, data=params, usage=u.UNIFORM)
        if src is None:
            src = dev._new_buffer("GPUDevice.create_buffer", 4, u.STORAGE)
        bind = _call("GPUDevice.create_bind_group", dev._gpu.create_bind_group,
                     layout=layout,
                     entries=[{"binding": 0, "resource": {"buffer": dst}}, {"binding": 1, "resource": {"buffer": src}},
                              {"binding": 2, "resource": {"buffer": uniform}}])
        p = self._enc().begin_compute_pass()
        p.set_pipeline(pipe)
        p.set_bind_group(0, bind)
        p.dispatch_workgroups(gx, gy, 1)
        p.end()

    # -- the API ----------------------------------------------------------------------------------
    def _copy_htod(self, dst: api.Buffer, dst_offset: int, src: np.ndarray) -> None:
        dev = self._dev
        n = src.nbytes
        self._flush()  # write_buffer lands on the queue timeline now: commands enqueued before go first
        if dst_offset % 4 == 0 and n % 4 == 0:
            _call("GPUQueue.write_buffer", dev._gpu.queue.write_buffer, dst._native_handle(), dst_offset, src)
            return
        padded = np.zeros(-(-n // 4) * 4, dtype=np.uint8)
        padded[:n] = src
        staging = dev._new_buffer("GPUDevice.create_buffer", n, dev._usage.STORAGE | dev._usage.COPY_DST)
        _call("GPUQueue.write_buffer", dev._gpu.queue.write_buffer, staging, 0, padded)
        self._bytes(dst._native_handle(), dst_offset, staging, 0, n, 0)

    def _copy_dtoh(self, dst: np.ndarray, src: api.Buffer, src_offset: int) -> None:
        dev = self._dev
        start = src_offset // 4 * 4
        size = -(-(src_offset + dst.nbytes) // 4) * 4 - start
        u = dev._usage
        readback = dev._new_buffer("GPUDevice.create_buffer", size, u.MAP_READ | u.COPY_DST)
        self._enc().copy_buffer_to_buffer(src._native_handle(), start, readback, 0, size)
        dev._readback_seq += 1
        dev._readbacks.append((dev._readback_seq, readback, src_offset - start, dst))
        self._flush()

    def _copy_dtod(self, dst: api.Buffer, dst_offset: int, src: api.Buffer, src_offset: int, nbytes: int) -> None:
        d, s = dst._native_handle(), src._native_handle()
        if dst_offset % 4 == 0 and src_offset % 4 == 0 and nbytes % 4 == 0:
            self._enc().copy_buffer_to_buffer(s, src_offset, d, dst_offset, nbytes)
            return
        if d is s:  # one buffer cannot be bound twice writable: go through a scratch copy
            scratch = self._dev._new_buffer("GPUDevice.create_buffer", nbytes + 8, self._dev._usage.STORAGE | self._dev._usage.COPY_DST)
            start = src_offset // 4 * 4
            self._enc().copy_buffer_to_buffer(s, start, scratch, 0, -(-(src_offset + nbytes) // 4) * 4 - start)
            s, src_offset = scratch, src_offset - start
        self._bytes(d, dst_offset, s, src_offset, nbytes, 0)

    def _fill(self, buf: api.Buffer, offset: int, nbytes: int, value: int) -> None:
        if value == 0 and offset % 4 == 0 and nbytes % 4 == 0:
            self._enc().clear_buffer(buf._native_handle(), offset, nbytes)
        else:
            self._bytes(buf._native_handle(), offset, None, 0, nbytes, value)

    def _record(self, timing: bool) -> WebGPUEvent:
        dev = self._dev
        stamp = None
        if timing:
            u = dev._usage
            qs = _call("GPUDevice.create_query_set", dev._gpu.create_query_set, type="timestamp", count=1)
            resolved = dev._new_buffer("GPUDevice.create_buffer", 8, u.QUERY_RESOLVE | u.COPY_SRC)
            stamp = dev._new_buffer("GPUDevice.create_buffer", 8, u.MAP_READ | u.COPY_DST)
            enc = self._enc()
            enc.begin_compute_pass(timestamp_writes={"query_set": qs, "beginning_of_pass_write_index": 0}).end()
            enc.resolve_query_set(qs, 0, 1, resolved, 0)
            enc.copy_buffer_to_buffer(resolved, 0, stamp, 0, 8)
        fence = dev._fence(self._enc())
        self._flush()
        return WebGPUEvent(self, timing, fence, dev._readback_seq, stamp)

    def _wait(self, event: api.Event) -> None:
        """Nothing to enqueue: with one queue, and record() having submitted everything before the
        event, whatever this stream submits from now on already runs after it."""

    def _synchronize(self, timeout: float | None = None) -> None:
        fence = self._dev._fence(self._enc())
        self._flush()
        _call("GPUBuffer.map", fence.map_sync, _wgpu.MapMode.READ)
        self._dev._deliver_readbacks(None)

    def _launch(self, kernel: api.Kernel, grid: api.Dim3, block: api.Dim3, args: list[Any]) -> None:
        op = "Stream.launch"
        module = kernel.module
        assert isinstance(module, WebGPUModule)
        buffers = [a for a in args if isinstance(a, api.Buffer)]
        scalars = [a for a in args if not isinstance(a, api.Buffer)]
        if len(buffers) != len(module._storage):
            raise InvalidArgument(op, f"kernel {kernel.name} binds {len(module._storage)} storage buffer(s), got {len(buffers)}")
        if bool(scalars) != module._has_uniform:
            want = "a uniform block for its scalars" if module._has_uniform else "no scalar arguments"
            raise InvalidArgument(op, f"kernel {kernel.name} takes {want}, got {len(scalars)} scalar(s)")
        pipe = module._pipeline(kernel.name, block)
        dev = self._dev
        entries = [{"binding": i, "resource": {"buffer": b._native_handle()}} for i, b in enumerate(buffers)]
        if scalars:
            packed = api.pack_scalars(scalars)
            packed += bytes(-len(packed) % 16)
            uniform = _call("GPUDevice.create_buffer_with_data", dev._gpu.create_buffer_with_data,
                            data=packed, usage=dev._usage.UNIFORM)
            entries.append({"binding": len(buffers), "resource": {"buffer": uniform}})
        bind = _call("GPUDevice.create_bind_group", dev._gpu.create_bind_group, layout=module._bind_layout, entries=entries)
        p = self._enc().begin_compute_pass()
        p.set_pipeline(pipe)
        p.set_bind_group(0, bind)
        p.dispatch_workgroups(*grid)
        p.end()


BYTE_KERNEL_BLOCK = 64

# Merges bytes into whole words: each invocation owns one destination word, so no two write the same word.
BYTE_KERNEL_WGSL = """
struct Params { dst_off: u32, src_off: u32, n: u32, fill_mode: u32, fill: u32 }
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

fn src_byte(i: u32) -> u32 {
    let b = p.src_off + i;
    return (src[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

@compute @workgroup_size(64)
fn ia_bytes(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let w = (p.dst_off >> 2u) + g.x + g.y * nw.x * 64u;
    let end = p.dst_off + p.n;
    if (w * 4u >= end) { return; }
    var word = dst[w];
    for (var k = 0u; k < 4u; k++) {
        let b = w * 4u + k;
        if (b >= p.dst_off && b < end) {
            var v = p.fill & 0xffu;
            if (p.fill_mode == 0u) { v = src_byte(b - p.dst_off); }
            word = (word & ~(0xffu << (k * 8u))) | (v << (k * 8u));
        }
    }
    dst[w] = word;
}
"""
