#version 430
#extension GL_ARB_gpu_shader_int64 : require
// 64-bit integers loaded from and stored to memory (needs kernel.int64): out[6i..6i+5] = x + y, x - y, x * y
// (u64, wrapping), x << (y & 63), x >> (y & 63), min(i64(x), i64(y)) for x = a[i], y = b[i], i < n (SPEC.md,
// SEM-45).
layout(std430, binding = 0) readonly buffer A { uint64_t data[]; } a;
layout(std430, binding = 1) readonly buffer B { uint64_t data[]; } b;
layout(std430, binding = 2) writeonly buffer Out { uint64_t data[]; } out_;
layout(std140, binding = 0) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= args.n) return;
    uint64_t x = a.data[i], y = b.data[i];
    uint o = 6u * i;
    out_.data[o + 0u] = x + y;
    out_.data[o + 1u] = x - y;
    out_.data[o + 2u] = x * y;
    out_.data[o + 3u] = x << uint(y & 63ul);
    out_.data[o + 4u] = x >> uint(y & 63ul);
    out_.data[o + 5u] = uint64_t(min(int64_t(x), int64_t(y)));
}
