#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// out[i] = iters steps of the LCG v = v*1664525 + 1013904223 from v = i: a kernel that takes a while
layout(set = 0, binding = 0) writeonly buffer Out { uint data[]; } out_;
layout(push_constant) uniform Args { uint iters; uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= args.n) return;
    uint v = i;
    for (uint k = 0u; k < args.iters; ++k) v = v * 1664525u + 1013904223u;
    out_.data[i] = v;
}
