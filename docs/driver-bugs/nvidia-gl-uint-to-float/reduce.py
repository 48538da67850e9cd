"""SEM-41's kernel on OpenGL, reduced line by line (standalone: numpy and moderngl with an EGL context).

repro.py's two small shaders convert uint to float correctly on the H200 (its first run, session 11), so the
wrong float(u32) of the conformance run is not the plain conversion. This runs conformance's own
kernels/glsl430/sem_ops.comp verbatim on every pair of SEM-41's edge values, then the same kernel with each other
output line replaced by a constant, and prints for each variant how many float(u32) results (out[12i + 10]) are
the float of the bits read as signed instead of the unsigned value:

    python3 reduce.py        # exits 1 when any variant gives a wrong float(u32)
"""

import re
import sys
from pathlib import Path

import moderngl
import numpy as np

KERNEL = Path(__file__).resolve().parents[3] / "conformance/kernels/glsl430/sem_ops.comp"
EDGE = np.array([0, 1, 2, 3, 5, 15, 16, 31, 32, 0xFF, 0x100, 0xFFFF, 0x10000, 0xFFFFFF, 0x1000000, 0x1000001,
                 0x1000003, 0x7FFFFF80, 0x7FFFFFC0, 0x7FFFFFFF, 0x80000000, 0x80000001, 0x80000040, 0xFF000001,
                 0xFFFFFF7F, 0xFFFFFFFE, 0xFFFFFFFF, 0x12345678, 0x9E3779B9], np.uint32)
OUT_LINE = re.compile(r"^(\s*out_\.data\[o \+ (\d+)u\] = ).*;(.*)$", re.M)


def variants(source: str) -> dict[str, str]:
    """The kernel as it is, then without each output but the two conversions (k 9, 10)."""
    out = {"verbatim": source}
    for m in OUT_LINE.finditer(source):
        k = int(m.group(2))
        if k not in (9, 10):
            out[f"without out[{k}]"] = source.replace(m.group(0), f"{m.group(1)}0u;")
    out["only out[9], out[10]"] = OUT_LINE.sub(lambda m: m.group(0) if m.group(2) in ("9", "10")
                                               else f"{m.group(1)}0u;", source)
    return out


def run(ctx, source: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # the block size, as ironaccel's OpenGL backend declares it (the dialect leaves it out)
    shader = ctx.compute_shader(source.replace("#version 430\n", "#version 430\nlayout(local_size_x = 64) in;\n", 1))
    n = a.size
    bufs = [ctx.buffer(a.tobytes()), ctx.buffer(b.tobytes()), ctx.buffer(reserve=48 * n)]
    for i, buf in enumerate(bufs):
        buf.bind_to_storage_buffer(i)
    ctx.buffer(np.array([n, 0, 0, 0], np.uint32).tobytes()).bind_to_uniform_block(0)
    shader.run(group_x=(n + 63) // 64)
    return np.frombuffer(bufs[2].read(), np.uint32).reshape(n, 12)


def main() -> int:
    ctx = moderngl.create_context(standalone=True, backend="egl", require=430)
    print(f"GL: {ctx.info['GL_RENDERER']}, {ctx.info['GL_VERSION']}")
    a, b = (g.ravel().astype(np.uint32) for g in np.meshgrid(EDGE, EDGE))
    want, signed = a.astype(np.float32).view(np.uint32), a.view(np.int32).astype(np.float32).view(np.uint32)
    failing = 0
    for name, source in variants(KERNEL.read_text()).items():
        got = run(ctx, source, a, b)[:, 10]
        wrong = np.flatnonzero(got != want)
        as_signed = int(np.count_nonzero(got[wrong] == signed[wrong]))
        failing += bool(wrong.size)
        first = f"; first x={a[wrong[0]]:#010x}: got {got[wrong[0]:wrong[0] + 1].view(np.float32)[0]:.10g}" if wrong.size else ""
        print(f"{name}: float(u32) wrong {wrong.size} of {a.size} ({as_signed} are the signed float){first}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
