#version 430
// Every thread i < n adds 1 to counter[0] and keeps the value it saw: olds is then a permutation of 0..n-1.
layout(std430, binding = 0) buffer Counter { uint data[]; } counter;
layout(std430, binding = 1) writeonly buffer Olds { uint data[]; } olds;
layout(std140, binding = 0) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) olds.data[i] = atomicAdd(counter.data[0], 1u);
}
