"""The raw GL entry points moderngl does not wrap (persistent mappings, timer queries, buffer clears,
program reflection, KHR_debug), loaded through the context's own ``eglGetProcAddress``, and the one place GL
errors become ironaccel errors.

GL reports errors through a flag read by glGetError, not through what a call returns, so each entry point is
wrapped, as wgpu-py's SafeLibCalls are: ``gl.glGenBuffers(...)`` calls the function and then raises the
error it left, named after the function itself (the op is never typed at the call site). ``gl.unchecked``
holds the bare functions: glGetError, which is the check, and any call whose error is meant to stay in the
flag (a test of the KHR_debug diagnostics). ``EXPLANATIONS`` says what the common codes mean.

Every GL call of the backend runs on the device's GL thread (``context.GLThread``), so nothing here locks.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any, Callable

from ...errors import DriverError, OutOfMemory

BACKEND = "opengl"

# -- enums (GL 4.3 core, KHR_debug, ARB_timer_query, NVX_gpu_memory_info) --------------------------
NO_ERROR = 0
ERROR_NAMES = {
    0x0500: "GL_INVALID_ENUM", 0x0501: "GL_INVALID_VALUE", 0x0502: "GL_INVALID_OPERATION",
    0x0503: "GL_STACK_OVERFLOW", 0x0504: "GL_STACK_UNDERFLOW", 0x0505: "GL_OUT_OF_MEMORY",
    0x0506: "GL_INVALID_FRAMEBUFFER_OPERATION", 0x0507: "GL_CONTEXT_LOST",
}
OUT_OF_MEMORY = 0x0505

#: What the GL error codes usually mean for a user of this library, and what to do about them; appended to
#: the DriverError's detail.
EXPLANATIONS = {
    "GL_INVALID_ENUM": "an enum argument is not one this call accepts (or one of an extension the driver lacks)",
    "GL_INVALID_VALUE": "a numeric argument is out of range: a negative size, a range past the end of the buffer, "
                        "or a binding index past the driver's limit",
    "GL_INVALID_OPERATION": "the call is not allowed in the current state: an object that does not exist or was "
                            "deleted, a buffer that is mapped or immutable, a program that did not link",
    "GL_STACK_OVERFLOW": "a push (debug group) went past the driver's stack depth",
    "GL_STACK_UNDERFLOW": "a pop (debug group) had nothing to pop",
    "GL_OUT_OF_MEMORY": "the driver could not allocate the memory: free buffers or trim a MemPool, then retry "
                        "(GL leaves the state of the failed call undefined)",
    "GL_INVALID_FRAMEBUFFER_OPERATION": "a framebuffer is incomplete; compute does not use one, so another library "
                                        "sharing the context changed its state",
    "GL_CONTEXT_LOST": "the context was lost (a GPU reset, often a kernel that ran past the driver's watchdog): "
                       "close the device and open it again; its buffers' contents are gone",
}

COPY_READ_BUFFER, COPY_WRITE_BUFFER = 0x8F36, 0x8F37
MAP_READ_BIT, MAP_PERSISTENT_BIT, MAP_COHERENT_BIT = 0x1, 0x40, 0x80
SHADER_STORAGE_BUFFER = 0x90D2
UNIFORM_BUFFER = 0x8A11
R8UI = 0x8232
RED_INTEGER = 0x8D94
UNSIGNED_BYTE = 0x1401
ALL_BARRIER_BITS = 0xFFFFFFFF

TIMESTAMP = 0x8E28
QUERY_COUNTER_BITS = 0x8864
QUERY_RESULT = 0x8866

MAX_SHADER_STORAGE_BLOCK_SIZE = 0x90DE
SHADER_STORAGE_BUFFER_OFFSET_ALIGNMENT = 0x90DF
MAX_COMPUTE_SHARED_MEMORY_SIZE = 0x8262
GPU_MEMORY_INFO_TOTAL_AVAILABLE_MEMORY_NVX = 0x9048  # KiB

# program interface queries (reflection)
UNIFORM, UNIFORM_BLOCK, SHADER_STORAGE_BLOCK = 0x92E1, 0x92E2, 0x92E6
ACTIVE_RESOURCES = 0x92F5
BUFFER_BINDING, BUFFER_DATA_SIZE, BLOCK_INDEX, OFFSET, TYPE, ARRAY_SIZE = 0x9302, 0x9303, 0x92FD, 0x92FC, 0x92FA, 0x92FB
NAME_LENGTH = 0x92F9
COMPUTE_WORK_GROUP_SIZE = 0x8267

#: GLSL scalar types as reflected: GL type -> (nbytes, Param.scalar): float, int, uint, double, int64_t, uint64_t
SCALAR_TYPES = {0x1406: (4, "float"), 0x1404: (4, "int"), 0x1405: (4, "int"),
                0x140A: (8, "float"), 0x140E: (8, "int"), 0x140F: (8, "int")}

# KHR_debug
DEBUG_OUTPUT, DEBUG_OUTPUT_SYNCHRONOUS = 0x92E0, 0x8242
DEBUG_SOURCE_SHADER_COMPILER = 0x8248
DEBUG_TYPE_ERROR, DEBUG_TYPE_UNDEFINED_BEHAVIOR = 0x824C, 0x824E
DEBUG_SOURCES = {0x8246: "API", 0x8247: "WINDOW_SYSTEM", 0x8248: "SHADER_COMPILER", 0x8249: "THIRD_PARTY",
                 0x824A: "APPLICATION", 0x824B: "OTHER"}
DEBUG_TYPES = {0x824C: "ERROR", 0x824D: "DEPRECATED_BEHAVIOR", 0x824E: "UNDEFINED_BEHAVIOR", 0x824F: "PORTABILITY",
               0x8250: "PERFORMANCE", 0x8251: "OTHER", 0x8268: "MARKER"}
DONT_CARE = 0x1100
#: Debug messages that count as diagnostics (fail the test that caused them): errors and undefined
#: behaviour. The driver is asked for these only: performance and informational notes (NVIDIA sends one
#: per buffer operation) would cost a callback each and mean nothing wrong.
DIAGNOSTIC_TYPES = (DEBUG_TYPE_ERROR, DEBUG_TYPE_UNDEFINED_BEHAVIOR)

_u, _i, _p, _sz = ctypes.c_uint, ctypes.c_int, ctypes.c_void_p, ctypes.c_ssize_t
DEBUG_PROC = ctypes.CFUNCTYPE(None, _u, _u, _u, _u, _i, ctypes.c_char_p, _p)

#: name -> (restype, argtypes)
PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "glGetError": (_u, []),
    "glFlush": (None, []),
    "glFinish": (None, []),
    "glGetIntegerv": (None, [_u, ctypes.POINTER(_i)]),
    "glGetInteger64v": (None, [_u, ctypes.POINTER(ctypes.c_int64)]),
    "glBindBuffer": (None, [_u, _u]),
    "glBindBufferBase": (None, [_u, _u, _u]),
    "glClearBufferSubData": (None, [_u, _u, _sz, _sz, _u, _u, _p]),
    "glMemoryBarrier": (None, [_u]),
    "glDispatchCompute": (None, [_u, _u, _u]),
    "glUseProgram": (None, [_u]),
    "glGenBuffers": (None, [_i, ctypes.POINTER(_u)]),
    "glDeleteBuffers": (None, [_i, ctypes.POINTER(_u)]),
    "glBufferStorage": (None, [_u, _sz, _p, _u]),
    "glMapBufferRange": (_p, [_u, _sz, _sz, _u]),
    "glCopyBufferSubData": (None, [_u, _u, _sz, _sz, _sz]),
    "glGenQueries": (None, [_i, ctypes.POINTER(_u)]),
    "glDeleteQueries": (None, [_i, ctypes.POINTER(_u)]),
    "glQueryCounter": (None, [_u, _u]),
    "glGetQueryiv": (None, [_u, _u, ctypes.POINTER(_i)]),
    "glGetQueryObjectui64v": (None, [_u, _u, ctypes.POINTER(ctypes.c_uint64)]),
    "glGetProgramInterfaceiv": (None, [_u, _u, _u, ctypes.POINTER(_i)]),
    "glGetProgramResourceiv": (None, [_u, _u, _u, _i, ctypes.POINTER(_u), _i, ctypes.POINTER(_i), ctypes.POINTER(_i)]),
    "glGetProgramResourceName": (None, [_u, _u, _u, _i, ctypes.POINTER(_i), ctypes.c_char_p]),
    "glGetProgramiv": (None, [_u, _u, ctypes.POINTER(_i)]),
    "glEnable": (None, [_u]),
    "glDebugMessageCallback": (None, [DEBUG_PROC, _p]),
    "glDebugMessageControl": (None, [_u, _u, _u, _i, ctypes.POINTER(_u), ctypes.c_ubyte]),
}


class GL:
    """The entry points of one context, checked (``gl.glX``) and bare (``gl.unchecked.glX``), the KHR_debug
    messages it reported, and the errors built from both."""

    def __init__(self, load: Callable[[str], int], extensions: set[str]):
        self.unchecked = SimpleNamespace()
        for name, (restype, argtypes) in PROTOTYPES.items():
            address = load(name)
            if not address:
                from ...errors import NotAvailable

                raise NotAvailable(BACKEND, name, "the GL driver does not export it (OpenGL 4.3 core needs it)")
            function = ctypes.CFUNCTYPE(restype, *argtypes)(address)
            setattr(self.unchecked, name, function)
            if name != "glGetError":  # the check itself
                setattr(self, name, self._checked(name, function))
        self.messages: list[str] = []  # KHR_debug messages not yet attached to an error or drained
        self._callback = DEBUG_PROC(self._on_debug_message)  # kept alive as long as the context
        if "GL_KHR_debug" in extensions:
            self.glEnable(DEBUG_OUTPUT)
            self.glEnable(DEBUG_OUTPUT_SYNCHRONOUS)  # delivered inside the offending call: attributable
            self.glDebugMessageControl(DONT_CARE, DONT_CARE, DONT_CARE, 0, None, 0)
            for kind in DIAGNOSTIC_TYPES:
                self.glDebugMessageControl(DONT_CARE, kind, DONT_CARE, 0, None, 1)
            self.glDebugMessageCallback(self._callback, None)

    def _on_debug_message(self, source: int, kind: int, ident: int, severity: int, length: int,
                          message: bytes | None, user: Any) -> None:
        if source != DEBUG_SOURCE_SHADER_COMPILER:  # compiler messages go into CompileError's log instead
            text = (message or b"").decode(errors="replace").strip()
            self.messages.append(f"GL {DEBUG_SOURCES.get(source, source)} {DEBUG_TYPES.get(kind, kind)} "
                                 f"(id {ident}): {text}")

    def _checked(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` followed by ``check(name)``: its result, or the error it left."""
        check = self.check

        def call(*args: Any) -> Any:
            result = function(*args)
            check(name)
            return result

        call.__name__ = call.__qualname__ = name
        return call

    def check(self, op: str) -> None:
        """Raise the error the last GL call ``op`` left (glGetError), with its debug messages."""
        code = self.unchecked.glGetError()
        if code == NO_ERROR:
            return
        self.clear_errors()  # GL may queue several flags; the first names the failure
        raise self.error(op, code)

    def clear_errors(self) -> None:
        """Drop the error flags GL has queued: a failure already reported must not fail the next call."""
        while self.unchecked.glGetError() != NO_ERROR:
            pass

    def error(self, op: str, code: int | None, detail: str = "") -> DriverError:
        """The DriverError of a failed ``op``: debug messages since the last check, then what the code
        means (``EXPLANATIONS``), become its detail."""
        notes = [detail] if detail else []
        notes += self.messages
        self.messages = []
        name = ERROR_NAMES.get(code, f"GL error 0x{code:04x}") if code is not None else "failed"
        if name in EXPLANATIONS:
            notes.append(EXPLANATIONS[name])
        cls = OutOfMemory if code == OUT_OF_MEMORY else DriverError
        return cls(BACKEND, op, None if code is None else f"0x{code:04x}", name, " / ".join(notes))

    def mgl(self, op: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A moderngl call: its exception, or the GL error it left, becomes ours, named ``op`` (the GL call)."""
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:  # moderngl.Error, and the ValueError/TypeError it raises for bad input
            code = self.unchecked.glGetError()
            raise self.error(op, code or None, str(exc).strip()) from None
        self.check(op)
        return result

    def integer(self, pname: int) -> int:
        value = ctypes.c_int64()
        self.glGetInteger64v(pname, ctypes.byref(value))
        return value.value

    def resource(self, program: int, interface: int, index: int, props: list[int]) -> list[int]:
        """glGetProgramResourceiv for one resource: the values of ``props``."""
        wanted = (ctypes.c_uint * len(props))(*props)
        out = (ctypes.c_int * len(props))()
        self.glGetProgramResourceiv(program, interface, index, len(props), wanted, len(props), None, out)
        return list(out)

    def resource_count(self, program: int, interface: int) -> int:
        n = ctypes.c_int()
        self.glGetProgramInterfaceiv(program, interface, ACTIVE_RESOURCES, ctypes.byref(n))
        return n.value

    def resource_name(self, program: int, interface: int, index: int) -> str:
        (length,) = self.resource(program, interface, index, [NAME_LENGTH])
        buf = ctypes.create_string_buffer(max(length, 1))
        self.glGetProgramResourceName(program, interface, index, len(buf), None, buf)
        return buf.value.decode()
