#version 430
// out[i] = 0xDEADBEEF for every i < n, with no bounds check against the buffer: a launch with n past the
// buffer's end writes out of bounds (SPEC.md, ROBUST-1).
layout(std430, binding = 0) writeonly buffer Out { uint data[]; } out_;
layout(std140, binding = 0) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) out_.data[i] = 0xDEADBEEFu;
}
