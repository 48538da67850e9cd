#version 430
// x[i] += 1 for i = gid.x < n
layout(std430, binding = 0) buffer X { uint data[]; } x;
layout(std140, binding = 0) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) x.data[i] += 1u;
}
