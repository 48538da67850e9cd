#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// out[i] = 0xDEADBEEF for every i < n, with no bounds check against the buffer: a launch with n past the
// buffer's end writes out of bounds (SPEC.md, ROBUST-1).
layout(set = 0, binding = 0) writeonly buffer Out { uint data[]; } out_;
layout(push_constant) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) out_.data[i] = 0xDEADBEEFu;
}
