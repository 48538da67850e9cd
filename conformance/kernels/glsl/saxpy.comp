#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// y[i] = a * x[i] + y[i] for i < n
layout(set = 0, binding = 0) readonly buffer X { float data[]; } x;
layout(set = 0, binding = 1) buffer Y { float data[]; } y;
layout(push_constant) uniform Args { float a; uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) y.data[i] = args.a * x.data[i] + y.data[i];
}
