"""The kernels of the launch rows: conformance kernels (conformance/kernels, shipped in the wheel) launched
with n = 0, so each launch is one bounds check and nothing else, and ironaccel, the raw floors, the C floor
and the peers all launch the same code in each dialect.

``EMPTY`` (fill_u32: one buffer, two scalars) is the empty-kernel launch; ``FOUR_ARGS`` (saxpy: two
buffers, two scalars) is the launch with four arguments.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...errors import CompileError, DriverError
from ..spec import conformance_dir

EMPTY = "fill_u32"
FOUR_ARGS = "saxpy"
KERNEL_BYTES = 256  # each buffer argument

#: The scalar arguments of each kernel (n = 0 last: no thread does any work).
SCALARS = {EMPTY: (np.uint32(7), np.uint32(0)), FOUR_ARGS: (np.float32(2), np.uint32(0))}
#: How many buffer arguments come before the scalars.
BUFFERS = {EMPTY: 1, FOUR_ARGS: 2}

#: A kernel to launch and the arguments it is launched with.
KernelCall = tuple[Any, tuple[Any, ...]]

_FILES = {"cuda": ("cuda", ".cu"), "spirv": ("spirv", ".spv"), "wgsl": ("wgsl", ".wgsl"),
          "glsl430": ("glsl430", ".comp")}


def source(name: str, lang: str) -> str | bytes:
    """The committed source of conformance kernel ``name`` in ``lang`` (bytes for SPIR-V)."""
    folder, ext = _FILES[lang]
    path = conformance_dir() / "kernels" / folder / f"{name}{ext}"
    return path.read_bytes() if lang == "spirv" else path.read_text(encoding="utf-8")


def cuda_source() -> str:
    """Both kernels in one CUDA translation unit (one module, one load)."""
    return "\n".join(str(source(name, "cuda")) for name in (EMPTY, FOUR_ARGS))


def cuda_image(compute_capability: tuple[int, int], cubin: bool) -> tuple[str, str | bytes]:
    """``cuda_source()`` compiled by NVRTC as ironaccel does it: with ``cubin`` (a GPU that loads them) a
    cubin for the device's architecture, else PTX (a simulated device, or an architecture newer than NVRTC
    knows: PTX for the newest it does, JIT-compiled by the driver). Returns (lang, image): the same image
    for ironaccel (``Device.compile``), the raw floor (its CUfunction) and the C floor (cuModuleLoadData)."""
    from cuda.bindings import nvrtc

    def ok(op: str, result: tuple) -> Any:
        if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise DriverError("cuda", op, int(result[0]), result[0].name)
        return result[1] if len(result) > 1 else None

    supported = ok("nvrtcGetSupportedArchs", nvrtc.nvrtcGetSupportedArchs())
    arch = compute_capability[0] * 10 + compute_capability[1]
    binary = cubin and arch in supported
    if arch not in supported:
        arch = max((a for a in supported if a <= arch), default=min(supported))
    prog = ok("nvrtcCreateProgram", nvrtc.nvrtcCreateProgram(cuda_source().encode(), b"bench.cu", 0, [], []))
    try:
        flags = [f"--gpu-architecture={'sm' if binary else 'compute'}_{arch}".encode()]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(flags), flags)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            log = b" " * ok("nvrtcGetProgramLogSize", nvrtc.nvrtcGetProgramLogSize(prog))
            ok("nvrtcGetProgramLog", nvrtc.nvrtcGetProgramLog(prog, log))
            raise CompileError("nvrtcCompileProgram", "cuda", log.rstrip(b"\0").decode(errors="replace"))
        if binary:
            elf = b" " * ok("nvrtcGetCUBINSize", nvrtc.nvrtcGetCUBINSize(prog))
            ok("nvrtcGetCUBIN", nvrtc.nvrtcGetCUBIN(prog, elf))
            return "cubin", elf
        ptx = b" " * ok("nvrtcGetPTXSize", nvrtc.nvrtcGetPTXSize(prog))
        ok("nvrtcGetPTX", nvrtc.nvrtcGetPTX(prog, ptx))
        return "ptx", ptx.rstrip(b"\0").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def launches(dev: Any, lang: str, code: Callable[[str], str | bytes]) -> tuple[dict[str, KernelCall], list[Callable[[], None]]]:
    """ironaccel's side: each kernel (by name) compiled on ``dev`` from ``code(name)`` in ``lang``, with
    buffers of its own, as (Kernel, launch arguments); and the cleanup that frees the buffers."""
    out: dict[str, KernelCall] = {}
    cleanup: list[Callable[[], None]] = []
    for name in (EMPTY, FOUR_ARGS):
        options = ("-e", name) if lang == "glsl430" else ()  # a GLSL program's one kernel is main unless named
        kernel = dev.compile(code(name), lang, options=options).kernel(name)
        buffers = tuple(dev.alloc(KERNEL_BYTES) for _ in range(BUFFERS[name]))
        cleanup += [b.free for b in buffers]
        out[name] = (kernel, buffers + SCALARS[name])
    return out, cleanup
