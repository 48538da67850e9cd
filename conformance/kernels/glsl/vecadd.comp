#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// c[i] = a[i] + b[i] for i < n
layout(set = 0, binding = 0) readonly buffer A { float data[]; } a;
layout(set = 0, binding = 1) readonly buffer B { float data[]; } b;
layout(set = 0, binding = 2) writeonly buffer C { float data[]; } c;
layout(push_constant) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) c.data[i] = a.data[i] + b.data[i];
}
