"""OpenGL backend: OpenGL 4.3+ compute shaders over moderngl on a headless EGL context.

Split by concern: ``context`` (EGL devices, the GL thread that owns each context), ``gl`` (raw entry points,
KHR_debug, GL errors -> ironaccel errors), ``memory`` (SSBO buffers, readbacks), ``stream`` (streams over
the context's one command stream, fence-sync events, timer queries), ``module`` (the ``glsl430`` dialect,
programs per block size, reflection), ``device`` (the backend, limits, capabilities), ``drivers`` (how a
target selects and recognises llvmpipe or NVIDIA). Each module's docstring records its decisions.
"""

from .device import OpenGLBackend, OpenGLDevice

__all__ = ["OpenGLBackend", "OpenGLDevice"]
