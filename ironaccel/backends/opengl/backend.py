"""The registered backend: probing for OpenGL through EGL, counting its devices, and opening one."""

from __future__ import annotations

from ... import api
from ...api import BackendInfo
from ...errors import NotAvailable
from . import native as GL
from .context import egl_devices
from .device import OpenGLDevice


class OpenGLBackend(api.Backend):
    name = GL.BACKEND

    def probe(self) -> BackendInfo:
        try:
            import moderngl
        except ImportError as exc:
            return BackendInfo(self.name, False, f"moderngl is not installed ({exc}): pip install moderngl glcontext")
        try:
            devices = egl_devices()
        except NotAvailable as exc:
            return BackendInfo(self.name, False, exc.detail, moderngl.__version__)
        if not devices:
            return BackendInfo(self.name, False, "EGL enumerates no devices", moderngl.__version__)
        return BackendInfo(self.name, True, f"{len(devices)} EGL device(s)", moderngl.__version__)

    def device_count(self) -> int:
        return len(egl_devices())

    def _open_device(self, index: int) -> OpenGLDevice:
        return OpenGLDevice(index, egl_devices()[index])
