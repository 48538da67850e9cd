#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// out[i] = value for i = gid.x < n
layout(set = 0, binding = 0) buffer Out { uint data[]; } out_;
layout(push_constant) uniform Args { uint value; uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) out_.data[i] = args.value;
}
