#version 430
// y[i] = a * x[i] + y[i] for i < n
layout(std430, binding = 0) readonly buffer X { float data[]; } x;
layout(std430, binding = 1) buffer Y { float data[]; } y;
layout(std140, binding = 0) uniform Args { float a; uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) y.data[i] = args.a * x.data[i] + y.data[i];
}
