"""WebGPU adapters as ironaccel devices: device info and limits, allocation, compilation."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ... import api
from ...api import DeviceInfo, Limits
from ...errors import CompileError, InvalidArgument
from . import native
from .native import BACKEND, call, import_wgpu
from .memory import WebGPUBuffer
from .module import WebGPUModule
from .stream import BYTE_KERNEL_BLOCK, BYTE_KERNEL_WGSL, Fence, Fencer, WebGPUStream

OPTIONAL_FEATURES = ("timestamp-query", "shader-f64", "shader-float32-atomic", "subgroup")


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
        wgpu = import_wgpu()
        self._features = frozenset(f for f in OPTIONAL_FEATURES if f in adapter.features)
        wanted_limits = {k: adapter.limits[k] for k in (
            "max-buffer-size", "max-storage-buffer-binding-size", "max-compute-invocations-per-workgroup",
            "max-compute-workgroup-size-x", "max-compute-workgroup-size-y", "max-compute-workgroup-size-z",
            "max-compute-workgroup-storage-size", "max-storage-buffers-per-shader-stage",
            "max-compute-workgroups-per-dimension")}
        self._gpu = call(adapter.request_device_sync, required_features=sorted(self._features),
                         required_limits=wanted_limits)
        self._queue = self._gpu.queue  # (a wgpu property: read once)
        self._usage = wgpu.BufferUsage
        self._byte_kernel: Any = None
        self._fence_src: Any = None
        self._unsubmitted: set[WebGPUStream] = set()  # streams with an open encoder: kept alive until flushed
        self._readbacks: list[tuple[int, Any, int, np.ndarray]] = []  # (seq, mappable buffer, start, host)
        self._readback_seq = 0
        self._readback_bytes = 0  # of the mappable buffers in _readbacks (stream.PENDING_READBACK_BOUND)
        self._lock = threading.RLock()  # the queue, the encoders and the readback list (see the package docstring)
        #: id of a GPU buffer -> (kernel's weak reference, key) of each cached dispatch that binds it: its release
        #: drops them, so a kernel's cache never keeps a freed buffer's memory (LIFE-74)
        self._dispatch_users: dict[int, list[tuple[Any, tuple]]] = {}
        self._fencer = Fencer()
        self._submissions = 0  # queue submissions and writes so far
        self._pending_writes = 0  # bytes of write_buffer since the last submission (stream.PENDING_WRITES_BOUND)
        self._last_fence: Fence | None = None  # the fence after the latest submission that has one
        self._completed = 0  # the position of the latest fence seen complete (see Fence)
        self._default = WebGPUStream(self)

    def _native(self) -> Any:
        """The GPUDevice."""
        return self._gpu

    def _capabilities(self) -> frozenset[str]:
        caps = {"lang.wgsl", "kernel.shared_memory", "kernel.atomics.int32", "kernel.bounds_checked"}  # robust by spec
        if "timestamp-query" in self._features:
            caps.add("events.timing")
        if "shader-f64" in self._features:
            caps.add("kernel.float64")
        if "shader-float32-atomic" in self._features:
            caps.add("kernel.atomics.float32")
        if "subgroup" in self._features:  # WGSL's `enable subgroups;`
            caps.add("kernel.subgroups")
        return frozenset(caps)

    def _default_stream(self) -> WebGPUStream:
        return self._default

    def _create_stream(self) -> WebGPUStream:
        return WebGPUStream(self)

    def _new_buffer(self, nbytes: int, usage: int) -> Any:
        return call(self._gpu.create_buffer, size=max(4, -(-nbytes // 4) * 4), usage=usage)

    def _alloc(self, nbytes: int) -> WebGPUBuffer:
        u = self._usage
        return WebGPUBuffer(self, nbytes, self._new_buffer(nbytes, u.STORAGE | u.COPY_SRC | u.COPY_DST))

    def _compile(self, source: str | bytes, lang: str, options: tuple[str, ...]) -> WebGPUModule:
        if options:
            raise InvalidArgument("Device.compile", f"WGSL takes no compiler options, got {options!r}")
        assert isinstance(source, str)
        try:
            shader = self._gpu.create_shader_module(code=source)
        except native._wgpu.GPUError as exc:
            raise CompileError("GPUDevice.create_shader_module", "wgsl", str(exc).strip()) from None
        return WebGPUModule(self, source, shader)

    def _synchronize(self, timeout: float | None = None) -> None:
        with self._lock:
            for s in list(self._unsubmitted):
                s._flush()
        self._default._wait_for_queue("Device.synchronize", timeout)  # one queue: a fence after all covers every stream

    def _deliver_readbacks(self, upto: int, op: str) -> None:
        """Copy the readbacks enqueued up to ``upto`` into their host arrays (their copies are done: a
        fence after them was waited for).

        Readbacks live on the device, not the stream, so a dropped Stream object still delivers. The lock
        is held through the copies: a thread that waited for its readbacks finds them delivered, not
        taken by another thread and still being copied. Each is copied once, from the mapped memory."""
        with self._lock:
            ready = [r for r in self._readbacks if r[0] <= upto]
            if not ready:
                return
            self._readbacks = [r for r in self._readbacks if r[0] > upto]
            for _, readback, start, host in ready:
                readback.wait(op, None)
                buf = readback.buffer
                host[:] = np.frombuffer(buf.read_mapped(copy=False), dtype=np.uint8)[start:start + host.nbytes]
                self._readback_bytes -= buf.size
                buf.destroy()  # (unmaps it: no unmap call of its own, one driver call fewer per readback)

    def _complete(self, position: int) -> None:
        with self._lock:
            self._completed = max(self._completed, position)

    def _fence(self, encoder: Any) -> Any:
        """The buffer of a new fence (``stream.Fence``) after everything recorded up to ``encoder``.

        A copy into a fresh mappable buffer: mapping it resolves only when the copy, and so all queue work
        before it, has finished. (wgpu-py 0.32's on_submitted_work_done fails with its bundled wgpu-native,
        so the map is our fence.)"""
        u = self._usage
        if self._fence_src is None:
            self._fence_src = self._new_buffer(4, u.COPY_SRC)
        target = self._new_buffer(4, u.MAP_READ | u.COPY_DST)
        encoder.copy_buffer_to_buffer(self._fence_src, 0, target, 0, 4)
        return target

    def _close(self) -> None:
        """Synchronize, then destroy the GPUDevice and release it and the wgpu objects the device holds, now.

        wgpu-native gives a device's memory back (40-65 MiB on SwiftShader, ~2.5 MiB on lavapipe) only when its
        last handle is released, not at destroy(); our fence buffers and byte kernel are handles, and wgpu-py's
        GPUDevice and GPUQueue refer to each other, so dropping them waited for Python's cycle collector: every
        closed Device kept its memory until then (20 in a row peaked at ~870 MiB on SwiftShader: LIFE-76).
        ``_release()`` is wgpu-py's own release (wgpu is pinned to 0.32); a Buffer or Event the caller still
        holds keeps the device until it goes."""
        try:
            self._synchronize()
        finally:
            self._fencer.close()
            self._gpu.destroy()
            self._fence_src = self._last_fence = self._byte_kernel = None
            self._readbacks.clear()
            self._readback_bytes = 0
            self._gpu._release()

    def _byte_pipeline(self) -> Any:
        """The internal byte-granular copy/fill kernel (see module docstring)."""
        if self._byte_kernel is None:
            module = self.compile(BYTE_KERNEL_WGSL, "wgsl")
            self._byte_kernel = (module._bind_layout, module._pipeline("ia_bytes", (BYTE_KERNEL_BLOCK, 1, 1)))
        return self._byte_kernel
