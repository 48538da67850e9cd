#version 430
// y[i] = a * x[i] + y[i] for i < n in float64 (needs kernel.float64)
layout(std430, binding = 0) readonly buffer X { double data[]; } x;
layout(std430, binding = 1) buffer Y { double data[]; } y;
layout(std140, binding = 0) uniform Args { double a; uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) y.data[i] = args.a * x.data[i] + y.data[i];
}
