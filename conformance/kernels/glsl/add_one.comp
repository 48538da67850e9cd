#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// x[i] += 1 for i = gid.x < n
layout(set = 0, binding = 0) buffer X { uint data[]; } x;
layout(push_constant) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) x.data[i] += 1u;
}
