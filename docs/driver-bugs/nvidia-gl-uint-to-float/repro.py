"""GLSL's float(uint) on NVIDIA's OpenGL driver, standalone reproducer (conformance SEM-41 on opengl/nvidia).

Needs only numpy and moderngl with an EGL context (`pip install numpy moderngl`); it does not use ironaccel.

    python3 repro.py

Converts uints with the top bit set (and a few below it) to float in a compute shader, twice: in a shader that
converts only the uint, and in one that also converts int(x), the same bits read as signed, as conformance's
sem_ops kernel does. GLSL says float(uint) is the nearest float to the unsigned value: 0x80000000 is
2147483648.0. Prints each shader's results and exits 1 when any is the signed value's float instead.
"""

import sys

import moderngl
import numpy as np

HEAD = """#version 430
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) writeonly buffer Out { uint o[]; };
uniform uint n;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= n) return;
    uint x = a[i];
"""
SHADERS = {
    "float(x) alone": HEAD + "    o[2u * i] = floatBitsToUint(float(x));\n    o[2u * i + 1u] = 0u;\n}\n",
    "float(int(x)) and float(x)": HEAD + "    int sx = int(x);\n    o[2u * i] = floatBitsToUint(float(x));\n"
                                        "    o[2u * i + 1u] = floatBitsToUint(float(sx));\n}\n",
}
X = np.array([7, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xC0000000, 0xFFFFFFFF], np.uint32)


def main() -> int:
    ctx = moderngl.create_context(standalone=True, backend="egl", require=430)
    print(f"GL: {ctx.info['GL_RENDERER']}, {ctx.info['GL_VERSION']}")
    want = X.astype(np.float64).astype(np.float32)
    wrong = 0
    for name, source in SHADERS.items():
        shader = ctx.compute_shader(source)
        shader["n"] = X.size
        src, out = ctx.buffer(X.tobytes()), ctx.buffer(reserve=8 * X.size)
        src.bind_to_storage_buffer(0)
        out.bind_to_storage_buffer(1)
        shader.run(group_x=1)
        got = np.frombuffer(out.read(), np.uint32).reshape(-1, 2)[:, 0].view(np.float32)
        bad = got != want
        wrong += int(bad.sum())
        print(f"{name}: " + ", ".join(f"{x:#010x} -> {g:.10g}{' (want %.10g)' % w if b else ''}"
                                      for x, g, w, b in zip(X, got, want, bad)))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
