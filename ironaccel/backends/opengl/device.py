"""The OpenGL backend and its devices: limits and capabilities from the context, KHR_debug diagnostics."""

from __future__ import annotations

import collections
import ctypes
import threading
from dataclasses import dataclass
from typing import Any, Callable

from ... import api, glslang
from ...api import DeviceInfo, Limits
from ...errors import InvalidArgument
from . import native as GL
from .context import GLThread
from .memory import OpenGLBuffer, Readbacks, gl_size
from .module import LANG, OpenGLModule
from .stream import Fence, OpenGLStream, wait_for

#: Renderer substrings of CPU implementations: llvmpipe, softpipe, and zink on lavapipe ("zink (... llvmpipe
#: ...)") are simulated; anything else is hardware.
SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swrast", "swiftshader")
#: Mesa drivers whose renderer string starts with their name; other Mesa drivers are reported as "Mesa".
MESA_NAMED_DRIVERS = ("llvmpipe", "softpipe", "swrast", "zink")
SUBGROUP_SIZE_KHR = 0x9532


@dataclass(frozen=True)
class OpenGLHandles:
    """``Device.native``: for interop and raw-driver floors."""

    context: Any  # moderngl.Context
    gl: GL.GL  # GL entry points, checked (gl.glQueryCounter, ...) and bare (gl.unchecked), and gl.mgl
    run: Callable[..., Any]  # run(fn, *args): call fn on the GL thread, return its result


def _device_info(ctx: Any, gl: GL.GL, index: int, egl_extensions: str) -> DeviceInfo:
    info, ext = ctx.info, set(ctx.extensions)
    renderer, vendor, version = info["GL_RENDERER"], info["GL_VENDOR"], info["GL_VERSION"]
    software = "EGL_MESA_device_software" in egl_extensions or any(s in renderer.lower() for s in SOFTWARE_RENDERERS)
    if vendor.startswith("NVIDIA"):
        driver = "NVIDIA"
    elif "Mesa" in version:
        first = renderer.split()[0].lower()  # "llvmpipe (LLVM 15.0.6, 256 bits)", "zink Vulkan 1.3(llvmpipe ...)"
        driver = first if first in MESA_NAMED_DRIVERS else "Mesa"
    else:
        driver = vendor
    memory = gl.integer(GL.GPU_MEMORY_INFO_TOTAL_AVAILABLE_MEMORY_NVX) * 1024 if "GL_NVX_gpu_memory_info" in ext else 0
    return DeviceInfo(
        backend=GL.BACKEND,
        index=index,
        name=renderer,
        vendor=vendor,
        driver=driver,
        driver_version=version,
        simulated=software,
        memory=memory,
        limits=Limits(
            max_alloc=gl.integer(GL.MAX_SHADER_STORAGE_BLOCK_SIZE) // 4 * 4,
            max_threads_per_block=info["GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS"],
            max_block=tuple(info["GL_MAX_COMPUTE_WORK_GROUP_SIZE"]),
            max_grid=tuple(info["GL_MAX_COMPUTE_WORK_GROUP_COUNT"]),
            max_shared_memory=gl.integer(GL.MAX_COMPUTE_SHARED_MEMORY_SIZE),
            warp_size=gl.integer(SUBGROUP_SIZE_KHR) if "GL_KHR_shader_subgroup" in ext else 0,
        ),
        extra={"gl_version": version, "context_version": ctx.version_code, "egl_device_extensions": egl_extensions,
               "ssbo_offset_alignment": gl.integer(GL.SHADER_STORAGE_BUFFER_OFFSET_ALIGNMENT)},
    )


def _capabilities(ctx: Any, gl: GL.GL) -> frozenset[str]:
    ext = set(ctx.extensions)
    caps = {f"lang.{LANG}", "kernel.shared_memory", "kernel.atomics.int32"}  # GL 4.3 core
    bits = ctypes.c_int()
    gl.glGetQueryiv(GL.TIMESTAMP, GL.QUERY_COUNTER_BITS, ctypes.byref(bits))
    if bits.value > 0:
        caps.add("events.timing")
    for extension, capability in (("GL_ARB_gpu_shader_fp64", "kernel.float64"),
                                  ("GL_ARB_gpu_shader_int64", "kernel.int64"),
                                  ("GL_NV_shader_atomic_float", "kernel.atomics.float32")):
        if extension in ext:
            caps.add(capability)
    return frozenset(caps)


class OpenGLDevice(api.Device):
    def __init__(self, index: int, egl_extensions: str):
        self.thread = GLThread(index)  # raises NotAvailable when the context or its fences are missing
        self.ctx = self.thread.ctx
        self.gl: GL.GL = self.thread.gl  # type: ignore[assignment]
        info, caps = self.thread.run(lambda: (_device_info(self.ctx, self.gl, index, egl_extensions),
                                              _capabilities(self.ctx, self.gl)))
        super().__init__(info)
        self._caps = caps
        self.readbacks = Readbacks(self)
        self.fence_lock = threading.Lock()  # a fence completes once, whichever thread sees it first
        self.finished_jobs = -1  # GLThread.jobs up to which all is done: the job of the last fence seen signalled
        self._default = OpenGLStream(self)
        # GL deletions of buffers and modules collected unfreed, submitted at the next alloc, compile or
        # synchronize: a collector only appends here (it may run on the GL thread, or inside a submit)
        self.dropped: collections.deque[Callable[[], None]] = collections.deque()

    def _submit_dropped(self) -> None:
        while self.dropped:
            self.thread.submit(self.dropped.popleft())

    def _native(self) -> OpenGLHandles:
        """The context, its raw entry points, and the function that runs code on the GL thread: every GL call
        must go through ``run`` (the context is current on that thread only)."""
        return OpenGLHandles(self.ctx, self.gl, self.thread.run)

    def _capabilities(self) -> frozenset[str]:
        return self._caps

    def _default_stream(self) -> OpenGLStream:
        return self._default

    def _create_stream(self) -> OpenGLStream:
        return OpenGLStream(self)

    def _alloc(self, nbytes: int) -> OpenGLBuffer:
        self._submit_dropped()
        buf = self.thread.run(self.gl.mgl, "glBufferData", self.ctx.buffer, reserve=gl_size(nbytes))
        return OpenGLBuffer(self, nbytes, buf)

    def _compile(self, source: str | bytes, lang: str, options: tuple[str, ...]) -> OpenGLModule:
        name = "main"
        if options:
            if len(options) != 2 or options[0] != "-e" or not options[1].isidentifier():
                raise InvalidArgument("Device.compile", f"{LANG} takes only options=('-e', NAME) to name its kernel, "
                                      f"got {options!r}")
            name = options[1]
        glslang.check_expansion(lang, str(source))  # the GL compiler, on the GL thread, cannot be stopped
        self._submit_dropped()
        return self.thread.run(OpenGLModule, self, str(source), name)

    def finish(self, op: str, timeout: float | None) -> None:
        """Wait for everything submitted so far to the device's one command stream: at once when no job was
        handed to the GL thread after the last fence seen signalled (an event's or a finish's: an idle
        synchronize costs no round trip to that thread, so any timeout holds)."""
        if self.thread.jobs == self.finished_jobs:
            self.thread.raise_failure()
            return
        fence = Fence(self, False)
        fence.job = self.thread.submit(fence.place)
        try:
            wait_for(fence, op, timeout)  # once signalled, finished_jobs is the fence's job
        finally:
            self.thread.submit_release(fence.discard)  # frees the sync, signalled or not (after a Timeout)

    def _synchronize(self, timeout: float | None) -> None:
        self._submit_dropped()
        self.finish("Device.synchronize", timeout)

    def _drain_diagnostics(self) -> list[str]:
        def drain() -> list[str]:
            messages, self.gl.messages = self.gl.messages, []
            return messages

        return [] if self._closed else self.thread.run(drain)

    def _close(self) -> None:
        try:
            self.finish("Device.close", None)
        finally:
            self.thread.close()
