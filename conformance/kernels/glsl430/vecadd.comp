#version 430
// c[i] = a[i] + b[i] for i < n
layout(std430, binding = 0) readonly buffer A { float data[]; } a;
layout(std430, binding = 1) readonly buffer B { float data[]; } b;
layout(std430, binding = 2) writeonly buffer C { float data[]; } c;
layout(std140, binding = 0) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) c.data[i] = a.data[i] + b.data[i];
}
