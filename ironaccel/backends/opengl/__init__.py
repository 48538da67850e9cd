"""OpenGL backend: OpenGL 4.3+ compute shaders over moderngl on a headless EGL context.

Split by concern: ``context`` (EGL devices, the GL thread that owns each context, EGL fence syncs), ``native``
(raw entry points, KHR_debug, GL errors -> ironaccel errors), ``memory`` (SSBO buffers, readbacks through
persistently mapped staging), ``stream`` (streams over the context's one command stream, events, timer
queries), ``module`` (the ``glsl430`` dialect, programs per block size, reflection), ``device`` (limits,
capabilities), ``backend`` (the registered Backend: probe, count, open); the names every backend uses
(``ironaccel.backends``). How a target selects and recognises llvmpipe or NVIDIA is the platform's
(``ironaccel.cts.drivers``). Each module's docstring records its decisions. Needs OpenGL 4.3 (compute) with
buffer storage (4.4 or GL_ARB_buffer_storage) and EGL_KHR_fence_sync: Mesa's llvmpipe and NVIDIA's driver
have all three.
"""

from .backend import OpenGLBackend
from .device import OpenGLDevice

__all__ = ["OpenGLBackend", "OpenGLDevice"]
