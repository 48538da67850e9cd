"""EGL devices and the GL thread that owns each device's context.

Devices are the EGL devices of EGL_EXT_device_enumeration (``eglQueryDevicesEXT``), in its order: glcontext's
EGL backend opens exactly that list (``device_index``) through EGL_PLATFORM_DEVICE_EXT, so the index means the
same thing here and there. Without the extension glcontext cannot open a headless context at all, so there
is no "default display" fallback: the backend is NotAvailable and says why.

A GL context is current on one thread at a time and glcontext makes it current on the thread that created
it, with no way to move it. So each device owns one thread that creates the context and makes every GL call
(``GLThread.run``); callers on any thread hand it work and wait for the result. GL calls are therefore
serialized in the order they were handed over, which is also the order the GL command stream runs them.
"""

from __future__ import annotations

import ctypes
import queue
import threading
from typing import Any, Callable

from ...errors import NotAvailable
from .gl import BACKEND, GL

EGL_EXTENSIONS = 0x3055
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


class GLThread:
    """The thread that owns one device's GL context; ``run`` executes a function there and returns its
    result (or raises its exception) in the caller's thread."""

    def __init__(self, device_index: int):
        self._jobs: queue.SimpleQueue[tuple[Callable[..., Any], tuple, dict, list] | None] = queue.SimpleQueue()
        self._ready = threading.Event()
        self._startup: list[BaseException] = []
        self.ctx: Any = None
        self.gl: GL | None = None
        self._thread = threading.Thread(target=self._main, args=(device_index,), daemon=True,
                                        name=f"ironaccel-opengl-{device_index}")
        self._thread.start()
        self._ready.wait()
        if self._startup:
            raise self._startup[0]

    def _open(self, device_index: int) -> None:
        try:
            import moderngl
        except ImportError as exc:
            raise NotAvailable(BACKEND, "moderngl", f"{exc}: pip install moderngl glcontext") from None
        failures = []
        for version in GL_VERSIONS:
            try:
                # Sonames, not find_library's answer: that misses libraries found only through LD_LIBRARY_PATH.
                self.ctx = moderngl.create_standalone_context(backend="egl", require=version, device_index=device_index,
                                                              libgl="libGL.so.1", libegl="libEGL.so.1")
                break
            except Exception as exc:  # glcontext raises plain Exception; the next older version may work
                failures.append(f"{version}: {exc}")
        else:
            raise NotAvailable(BACKEND, "EGL", f"no OpenGL 4.3+ core context on EGL device {device_index} "
                               f"({'; '.join(failures)})")
        self.gl = GL(self.ctx.mglo._context.load, set(self.ctx.extensions))

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
                box.append((True, fn(*args, **kwargs)))
            except BaseException as exc:
                box.append((False, exc))
            box[0].set()
        self.ctx.release()

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` on the GL thread and return what it returns."""
        if threading.current_thread() is self._thread:
            return fn(*args, **kwargs)
        done = threading.Event()
        box: list[Any] = [done]
        self._jobs.put((fn, args, kwargs, box))
        done.wait()
        ok, value = box[1]
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Release the context and end the thread (after the jobs already handed over)."""
        self._jobs.put(None)
        self._thread.join()
