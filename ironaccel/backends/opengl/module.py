"""GLSL compute shaders (``lang="glsl430"``, the OpenGL dialect) with the block size chosen at launch.

The dialect (conformance/kernels/README.md has the side-by-side with Vulkan's GLSL):

* ``#version 430`` or newer, no ``layout(local_size_*) in;``: the backend injects
  ``layout(local_size_x = X, local_size_y = Y, local_size_z = Z) in;`` after the ``#version``/``#extension``
  lines (with a ``#line`` so compiler messages keep the source's line numbers) and links one program per
  block size, cached. ``Device.compile`` links the (1, 1, 1) program, so a compile error surfaces there.
* Buffers: ``layout(std430, binding = i) buffer``, i = 0..k-1 in argument order.
* Scalars: at most one uniform block, ``layout(std140, binding = 0) uniform``, whose members are scalars in
  argument order, and no uniform outside it (nothing would set one: it reads 0). std140 places scalars at
  offsets aligned to their own size, which is ``pack_scalars``'s layout; the compile checks the reflected
  offsets against it, so a block that does not match is refused.
* A program has one entry point, ``main``; the module's kernel is named ``main``, or NAME with
  ``options=("-e", NAME)`` (the same option as Vulkan's GLSL).

``Kernel.params`` comes from the linked program (glGetProgramResourceiv): the storage blocks in binding
order, then the uniform block's members in offset order. GLSL does not record how buffers and scalars
interleave in the argument list, so buffers come first, and the kernel is not positional
(``Kernel._positional``): buffers match the bindings in order and scalars the members, however interleaved.
The GL compiler drops a buffer or a block the shader never uses, so it is missing from ``params`` too.
"""

from __future__ import annotations

import re
import weakref
from functools import partial
from typing import TYPE_CHECKING, Any, Sequence

from ... import api
from ...errors import CompileError, InvalidArgument
from . import native as GL
from .memory import OpenGLBuffer

if TYPE_CHECKING:
    from .device import OpenGLDevice

LANG = "glsl430"
_LOCAL_SIZE_RE = re.compile(r"layout\s*\([^)]*\blocal_size_[xyz]\b[^)]*\)\s*in\s*;")
_HEADER_LINE_RE = re.compile(r"\s*(#\s*(version|extension)\b.*)?(//.*)?$")
_BLOCK_COMMENT_RE = re.compile(r"/\*.*?\*/", re.DOTALL)


def _with_block(source: str, block: api.Dim3) -> str:
    """``source`` with the local size of ``block`` declared after its #version and #extension lines, and the
    comments and blank lines around them (GLSL lets comments come before #version: a licence block)."""
    lines = source.split("\n")
    bare = _BLOCK_COMMENT_RE.sub(lambda m: "\n" * m.group().count("\n"), source).split("\n")  # same line count
    at = 0
    while at < len(bare) and _HEADER_LINE_RE.fullmatch(bare[at]):
        at += 1
    layout = "layout(local_size_x = {}, local_size_y = {}, local_size_z = {}) in;".format(*block)
    return "\n".join([*lines[:at], layout, f"#line {at + 1}", *lines[at:]])


class OpenGLKernel(api.Kernel):
    """The one entry point of a module: its programs per block size, bindings and scalar layout."""

    module: OpenGLModule
    _positional = False  # buffers (SSBO bindings) and scalars (the uniform block) are separate spaces

    def _params(self) -> tuple[api.Param, ...]:
        return self.module.params

    def launch(self, grid: api.Dim3, block: api.Dim3, args: list[Any]) -> None:
        """Submit a dispatch; the program for a new block size is linked first, so its errors reach the caller."""
        module = self.module
        program = module._programs.get(block) or module.device.thread.run(module.program, block)
        buffers = [a.gl_buffer for a in args if isinstance(a, OpenGLBuffer)]
        scalars = api.pack_scalars([a for a in args if not isinstance(a, api.Buffer)])
        module.device.thread.submit(self._dispatch, program, grid, buffers, scalars)

    def _dispatch(self, program: Any, grid: api.Dim3, buffers: list[Any], scalars: bytes) -> None:
        """On the GL thread: bind, upload the scalars, glDispatchCompute, barrier."""
        module = self.module
        dev = module.device
        gl = dev.gl
        for binding, buf in zip(module.bindings, buffers):
            gl.glBindBufferBase(GL.SHADER_STORAGE_BUFFER, binding, buf.glo)
        uniform = None
        if module.uniform_binding is not None:
            uniform = gl.mgl("glBufferData", dev.ctx.buffer, scalars + bytes(module.uniform_size - len(scalars)))
            gl.glBindBufferBase(GL.UNIFORM_BUFFER, module.uniform_binding, uniform.glo)
        gl.glUseProgram(program.glo)
        gl.glDispatchCompute(*grid)
        gl.glMemoryBarrier(GL.ALL_BARRIER_BITS)  # shader storage writes are incoherent: make them visible
        if uniform is not None:
            uniform.release()  # GL keeps its storage until the dispatch has read it


def _release_programs(programs: dict[api.Dim3, Any]) -> None:
    """On the GL thread: delete a module's linked programs."""
    for program in programs.values():
        program.release()
    programs.clear()


class OpenGLModule(api.Module):
    def __init__(self, device: OpenGLDevice, source: str, name: str):
        super().__init__(device, LANG)
        self.device: OpenGLDevice = device
        self._source = source
        self._name = name
        self._programs: dict[api.Dim3, Any] = {}
        if _LOCAL_SIZE_RE.search(source):
            raise InvalidArgument("Device.compile", "the kernel declares its own local_size: leave it out, the block "
                                  "size is chosen at launch (the backend declares it)")
        first = self.program((1, 1, 1))  # compile errors surface at Device.compile
        self._reflect(first.glo)
        # dropped unclosed: its programs are deleted at the device's next alloc, compile or synchronize
        self._dropped = weakref.finalize(self, device.dropped.append, partial(_release_programs, self._programs))
        self._dropped.atexit = False  # at exit the context goes, and its programs with it

    def _release(self) -> None:
        """Delete the programs on the GL thread, after the dispatches already submitted (GL keeps a program
        until the commands issued before its deletion have run)."""
        self._dropped.detach()
        self.device.thread.submit(_release_programs, self._programs)

    def _kernel_names(self) -> Sequence[str]:
        return (self._name,)

    def _make_kernel(self, name: str) -> api.Kernel:
        return OpenGLKernel(self, name)

    def program(self, block: api.Dim3) -> Any:
        """The linked program for ``block`` (a moderngl.ComputeShader), compiled on first use. GL thread."""
        program = self._programs.get(block)
        if program is None:
            gl = self.device.gl
            try:
                program = self.device.ctx.compute_shader(_with_block(self._source, block))
            except Exception as exc:  # moderngl.Error carries the compiler's log
                gl.clear_errors()  # the failed compile's flags are this error's, not the next call's
                raise CompileError("glCompileShader", LANG, str(exc).replace("GLSL Compiler failed", "").strip()) from None
            gl.check("glLinkProgram")
            self._programs[block] = program
        return program

    def _reflect(self, program: int) -> None:
        gl = self.device.gl
        op = "Device.compile"
        self.bindings = sorted(gl.resource(program, GL.SHADER_STORAGE_BLOCK, i, [GL.BUFFER_BINDING])[0]
                               for i in range(gl.resource_count(program, GL.SHADER_STORAGE_BLOCK)))
        if self.bindings != list(range(len(self.bindings))):
            raise InvalidArgument(op, f"storage buffers must use bindings 0..k-1 in argument order, got {self.bindings}")
        blocks = gl.resource_count(program, GL.UNIFORM_BLOCK)
        if blocks > 1:
            raise InvalidArgument(op, f"scalars go in one uniform block; this kernel declares {blocks}")
        self.uniform_binding: int | None = None
        self.uniform_size = 0
        members: list[tuple[int, int, str]] = []  # (offset, GL type, name)
        if blocks:
            self.uniform_binding, self.uniform_size = gl.resource(program, GL.UNIFORM_BLOCK, 0,
                                                                  [GL.BUFFER_BINDING, GL.BUFFER_DATA_SIZE])
        for i in range(gl.resource_count(program, GL.UNIFORM)):
            block_index, offset, kind, size = gl.resource(program, GL.UNIFORM, i,
                                                          [GL.BLOCK_INDEX, GL.OFFSET, GL.TYPE, GL.ARRAY_SIZE])
            name = gl.resource_name(program, GL.UNIFORM, i)
            if block_index != 0:  # -1: a uniform of the default block, which no launch sets (it reads 0)
                raise InvalidArgument(op, f"uniform {name} is declared outside a uniform block: kernel scalars go in "
                                      "the one layout(std140, binding = 0) uniform block")
            if kind not in GL.SCALAR_TYPES or size != 1:
                raise InvalidArgument(op, f"uniform block member {name} is not a scalar: kernel scalars are "
                                      "float, int, uint, double, int64_t or uint64_t")
            members.append((offset, kind, name))
        members.sort()
        self.scalar_params = [api.Param("scalar", *GL.SCALAR_TYPES[k]) for _, k, _ in members]
        offsets, at = [], 0
        for p in self.scalar_params:
            at += -at % p.nbytes
            offsets.append(at)
            at += p.nbytes
        got = [off for off, _, _ in members]
        if got != offsets:
            raise InvalidArgument(op, f"the uniform block's members sit at offsets {got}, not {offsets} "
                                  "(declare it layout(std140) with scalar members only)")
        self.params = (*[api.Param("buffer") for _ in self.bindings], *self.scalar_params)
