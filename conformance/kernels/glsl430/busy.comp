#version 430
// out[i] = iters steps of the LCG v = v*1664525 + 1013904223 from v = i: a kernel that takes a while
layout(std430, binding = 0) writeonly buffer Out { uint data[]; } out_;
layout(std140, binding = 0) uniform Args { uint iters; uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= args.n) return;
    uint v = i;
    for (uint k = 0u; k < args.iters; ++k) v = v * 1664525u + 1013904223u;
    out_.data[i] = v;
}
