"""EGL devices, the GL thread that owns each device's context, and EGL fence syncs.

Devices are the EGL devices of EGL_EXT_device_enumeration (``eglQueryDevicesEXT``), in its order: glcontext's
EGL backend opens exactly that list (``device_index``) through EGL_PLATFORM_DEVICE_EXT, so the index means the
same thing here and there. Without the extension glcontext cannot open a headless context at all, so there
is no "default display" fallback: the backend is NotAvailable and says why.

A GL context is current on one thread at a time and glcontext makes it current on the thread that created
it, with no way to move it. So each device owns one thread that creates the context and makes every GL call;
callers on any thread hand it work, in order. ``run`` waits for the result (allocation, compilation,
queries); ``submit`` does not (the stream work: copies, fills, launches, fences), so the host runs ahead of
the device as it does on every other backend, even where the driver executes a dispatch inside the call
(llvmpipe does). An error in submitted work cannot reach its caller any more: the thread keeps the first
one and the next synchronize raises it.

Fences are EGL fence syncs (EGL_KHR_fence_sync), not GL ones: a job on the GL thread creates one in the
command stream, and any thread waits on it or polls it (eglClientWaitSyncKHR needs no current context), so
``query`` never queues behind running work and a wait with a timeout blocks only its caller.
"""

from __future__ import annotations

import ctypes
import queue
import threading
from typing import Any, Callable

from ...errors import DriverError, NotAvailable, UseAfterFree
from .native import BACKEND, GL

EGL_EXTENSIONS = 0x3055
EGL_SYNC_FENCE_KHR = 0x30F9
EGL_TIMEOUT_EXPIRED_KHR, EGL_CONDITION_SATISFIED_KHR = 0x30F5, 0x30F6
EGL_FOREVER_KHR = 0xFFFFFFFFFFFFFFFF
#: Requested context versions, newest first: the newest GLSL the driver offers, at least 4.3 (compute).
GL_VERSIONS = (460, 450, 440, 430)

_egl: Any = None


def _libegl() -> Any:
    global _egl
    if _egl is None:
        try:
            lib = ctypes.CDLL("libEGL.so.1")
        except OSError as exc:
            raise NotAvailable(BACKEND, "libEGL.so.1", f"{exc}: apt-get install libegl1 libegl-mesa0") from None
        lib.eglGetProcAddress.restype = ctypes.c_void_p
        lib.eglGetProcAddress.argtypes = [ctypes.c_char_p]
        lib.eglQueryString.restype = ctypes.c_char_p
        lib.eglQueryString.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        lib.eglGetCurrentDisplay.restype = ctypes.c_void_p
        lib.eglGetError.restype = ctypes.c_int32
        _egl = lib
    return _egl


def egl_devices() -> list[str]:
    """The device extension string of every EGL device, in enumeration order (what glcontext indexes)."""
    egl = _libegl()
    client = (egl.eglQueryString(None, EGL_EXTENSIONS) or b"").decode()
    if "EGL_EXT_device_enumeration" not in client and "EGL_EXT_device_base" not in client:
        raise NotAvailable(BACKEND, "libEGL.so.1", "EGL_EXT_device_enumeration is missing: headless contexts need "
                           f"it (client extensions: {client or 'none'})")
    query = ctypes.CFUNCTYPE(ctypes.c_uint, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p),
                             ctypes.POINTER(ctypes.c_int32))(egl.eglGetProcAddress(b"eglQueryDevicesEXT"))
    count = ctypes.c_int32()
    if not query(0, None, ctypes.byref(count)):
        raise NotAvailable(BACKEND, "eglQueryDevicesEXT", "the EGL loader could not enumerate devices")
    devices = (ctypes.c_void_p * max(count.value, 1))()
    query(count.value, devices, ctypes.byref(count))
    strings = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int32)(
        egl.eglGetProcAddress(b"eglQueryDeviceStringEXT"))
    return [(strings(devices[i], EGL_EXTENSIONS) or b"").decode() for i in range(count.value)]


class EGLSyncs:
    """EGL fence syncs of one display. ``create`` runs on the GL thread (the fence goes into its context's
    command stream); ``wait`` and ``destroy`` run on any thread."""

    def __init__(self) -> None:
        egl = _libegl()
        self._egl = egl
        self._display = egl.eglGetCurrentDisplay()
        extensions = (egl.eglQueryString(self._display, EGL_EXTENSIONS) or b"").decode()
        if "EGL_KHR_fence_sync" not in extensions.split():
            raise NotAvailable(BACKEND, "EGL_KHR_fence_sync", "the EGL display has no fence syncs, which events need")
        p, u = ctypes.c_void_p, ctypes.c_uint32
        address = egl.eglGetProcAddress
        self._create = ctypes.CFUNCTYPE(p, p, u, p)(address(b"eglCreateSyncKHR"))
        self._wait = ctypes.CFUNCTYPE(ctypes.c_int32, p, p, ctypes.c_int32, ctypes.c_uint64)(address(b"eglClientWaitSyncKHR"))
        self._destroy = ctypes.CFUNCTYPE(u, p, p)(address(b"eglDestroySyncKHR"))

    def _error(self, op: str) -> DriverError:
        code = self._egl.eglGetError()
        return DriverError(BACKEND, op, f"0x{code:04x}", "EGL error")

    def create(self) -> int:
        sync = self._create(self._display, EGL_SYNC_FENCE_KHR, None)
        if not sync:
            raise self._error("eglCreateSyncKHR")
        return sync

    def wait(self, sync: int, nanoseconds: int | None) -> bool:
        """True once ``sync`` has signalled; waits up to ``nanoseconds`` (None: for ever, 0: a poll)."""
        status = self._wait(self._display, sync, 0, EGL_FOREVER_KHR if nanoseconds is None else nanoseconds)
        if status == EGL_CONDITION_SATISFIED_KHR:
            return True
        if status == EGL_TIMEOUT_EXPIRED_KHR:
            return False
        raise self._error("eglClientWaitSyncKHR")

    def destroy(self, sync: int) -> None:
        self._destroy(self._display, sync)


class _SharedEntryPoints:
    """glcontext's context, handing moderngl one int object per GL entry point for the whole process:
    moderngl 5.13 keeps a reference to every address ``load`` returns (~900 ints, ~38 KiB a context, never
    freed), which costs nothing when the int is one it already holds."""

    _addresses: dict[int, int] = {}

    def __init__(self, native: Any):
        self._native = native

    def load(self, name: str) -> int:
        address = self._native.load(name)
        return self._addresses.setdefault(address, address)

    def __enter__(self) -> Any:
        return self._native.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self._native.__exit__(*exc)

    def release(self) -> None:
        self._native.release()


class GLThread:
    """The thread that owns one device's GL context (see the module docstring): ``run`` executes a function
    there and returns its result, ``submit`` queues one and returns at once."""

    def __init__(self, device_index: int):
        self._jobs: queue.SimpleQueue[tuple[Callable[..., Any], tuple, dict, list | None] | None] = queue.SimpleQueue()
        self._ready = threading.Event()
        self._startup: list[BaseException] = []
        self.ctx: Any = None
        self.gl: GL | None = None
        self.syncs: EGLSyncs | None = None
        self._failure: BaseException | None = None  # the first error of submitted work, not yet raised
        self._closed = False  # set with the end-of-jobs marker, under _closing: nothing is queued after it
        # Re-entrant: garbage collection can run an Event's __del__, which submits, while this thread holds it.
        self._closing = threading.RLock()
        #: jobs handed to ``submit`` so far, numbered under ``_closing``: a finish that finds none after the last
        #: one it saw complete has nothing to wait for (``OpenGLDevice.finish``). Not counted: ``run`` (its job is
        #: done when it returns, and none enqueues device work) and ``submit_release`` (frees), so that a
        #: synchronize of an idle device after an alloc or a dropped event returns at once, whatever its timeout
        self.jobs = 0
        self._index = device_index
        self._thread = threading.Thread(target=self._main, args=(device_index,), daemon=True,
                                        name=f"ironaccel-opengl-{device_index}")
        self._thread.start()
        self._ready.wait()
        if self._startup:
            raise self._startup[0]

    def _open(self, device_index: int) -> None:
        try:
            import moderngl
            from glcontext import egl
        except ImportError as exc:
            raise NotAvailable(BACKEND, "moderngl", f"{exc}: pip install moderngl glcontext") from None
        failures = []
        for version in GL_VERSIONS:
            try:
                # Sonames, not find_library's answer: that misses libraries found only through LD_LIBRARY_PATH.
                native = egl.create_context(mode="standalone", glversion=version, device_index=device_index,
                                            libgl="libGL.so.1", libegl="libEGL.so.1")
                self.ctx = moderngl.create_context(require=version, context=_SharedEntryPoints(native))
                break
            except Exception as exc:  # glcontext raises plain Exception; the next older version may work
                failures.append(f"{version}: {exc}")
        else:
            raise NotAvailable(BACKEND, "EGL", f"no OpenGL 4.3+ core context on EGL device {device_index} "
                               f"({'; '.join(failures)})")
        if self.ctx.version_code < 440 and "GL_ARB_buffer_storage" not in self.ctx.extensions:
            raise NotAvailable(BACKEND, "GL_ARB_buffer_storage", f"OpenGL {self.ctx.version_code} without persistent "
                               "buffer mappings, which copy_dtoh needs (OpenGL 4.4 or GL_ARB_buffer_storage)")
        self.gl = GL(self.ctx.mglo._context.load, set(self.ctx.extensions))
        self.syncs = EGLSyncs()

    def _main(self, device_index: int) -> None:
        try:
            self._open(device_index)
        except BaseException as exc:  # reported to the opener, which raises it
            self._startup.append(exc)
            self._ready.set()
            return
        self._ready.set()
        while (job := self._jobs.get()) is not None:
            fn, args, kwargs, box = job
            try:
                result = (True, fn(*args, **kwargs))
            except BaseException as exc:
                result = (False, exc)
                if box is None and self._failure is None:
                    self._failure = exc
            if box is not None:
                box.append(result)
                box[0].set()
        self.ctx.release()
        # glcontext leaves the context current on this thread, which ends here: a thread that ends without
        # eglReleaseThread keeps its EGL state, and the context with it (~2.2 MiB a closed device on llvmpipe)
        _libegl().eglReleaseThread()

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` on the GL thread and return what it returns."""
        if threading.current_thread() is self._thread:
            return fn(*args, **kwargs)
        done = threading.Event()
        box: list[Any] = [done]
        with self._closing:
            if self._closed:  # another thread closed the device after this call checked it was open
                raise UseAfterFree(getattr(fn, "__qualname__", "GL call"), f"the GL context of EGL device {self._index}")
            self._jobs.put((fn, args, kwargs, box))
        done.wait()
        ok, value = box[1]
        if not ok:
            raise value
        return value

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
        """Queue ``fn(*args, **kwargs)`` on the GL thread, after everything queued before; return at once,
        with the job's number (``jobs``). Once the thread is closed there is nothing left to do it on, and it
        is dropped (frees, mostly)."""
        with self._closing:
            if not self._closed:
                self.jobs += 1
                self._jobs.put((fn, args, kwargs, None))
            return self.jobs

    def submit_release(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)``, which frees GL objects and enqueues no device work, after everything queued
        before; not counted in ``jobs``. Dropped once the thread is closed."""
        with self._closing:
            if not self._closed:
                self._jobs.put((fn, args, {}, None))

    def raise_failure(self) -> None:
        """Raise the first error of submitted work since the last call, if there was one."""
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def close(self) -> None:
        """Release the context and end the thread (after the jobs already handed over)."""
        with self._closing:
            self._closed = True
            self._jobs.put(None)
        self._thread.join()
