#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// y[i] = a * x[i] + y[i] for i < n in float64 (needs kernel.float64)
layout(set = 0, binding = 0) readonly buffer X { double data[]; } x;
layout(set = 0, binding = 1) buffer Y { double data[]; } y;
layout(push_constant) uniform Args { double a; uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) y.data[i] = args.a * x.data[i] + y.data[i];
}
