"""Mesa llvmpipe ends a compute-shader loop after 65,535 iterations — standalone reproducer.

Needs only numpy, moderngl and glcontext (`pip install numpy moderngl glcontext`) and Mesa's EGL with
llvmpipe (`apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri`); it does not use ironaccel.

    python3 repro.py            # exit 1 and the wrong values when the driver shows the bug, exit 0 otherwise

Each of 32 invocations runs `iters` steps of the LCG v = v*1664525 + 1013904223 from v = its index and
writes v. The expected values are computed on the host with the same uint32 wrap-around.
"""

import sys

import moderngl
import numpy as np

SHADER = """
#version 430
layout(local_size_x = 32) in;
layout(std430, binding = 0) writeonly buffer Out { uint data[]; } out_;
uniform uint iters;
void main() {
    uint v = gl_GlobalInvocationID.x;
    for (uint k = 0u; k < iters; ++k) v = v * 1664525u + 1013904223u;
    out_.data[gl_GlobalInvocationID.x] = v;
}
"""
N = 32


def lcg(iters: int) -> np.ndarray:
    """The LCG on the host, vectorised over the 32 start values, by repeated squaring of the affine map."""
    v = np.arange(N, dtype=np.uint64)
    mul, add = np.uint64(1664525), np.uint64(1013904223)
    mask = np.uint64(0xFFFFFFFF)
    while iters:
        if iters & 1:
            v = (v * mul + add) & mask
        add = (add * mul + add) & mask
        mul = (mul * mul) & mask
        iters >>= 1
    return v.astype(np.uint32)


def main() -> int:
    ctx = moderngl.create_context(standalone=True, backend="egl", require=430)
    print(f"GL_RENDERER: {ctx.info['GL_RENDERER']}\nGL_VERSION:  {ctx.info['GL_VERSION']}")
    shader = ctx.compute_shader(SHADER)
    buf = ctx.buffer(reserve=4 * N)
    buf.bind_to_storage_buffer(0)
    wrong = 0
    for iters in (65_534, 65_535, 65_536, 100_003):
        shader["iters"] = iters
        shader.run(1)
        ctx.finish()
        got = np.frombuffer(buf.read(), dtype=np.uint32)
        want = lcg(iters)
        ok = np.array_equal(got, want)
        note = ""
        if not ok:
            wrong += 1
            if np.array_equal(got, lcg(65_535)):
                note = "  <- these are the values of 65,535 iterations: the loop stopped early"
        print(f"iters={iters:>7}: {'ok' if ok else 'WRONG'}  got[1]={got[1]:#010x} want[1]={want[1]:#010x}{note}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
