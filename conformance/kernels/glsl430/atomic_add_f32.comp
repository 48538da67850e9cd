#version 430
#extension GL_NV_shader_atomic_float : require
// atomicAdd(out[0], x[i]) for i < n (needs kernel.atomics.float32)
layout(std430, binding = 0) readonly buffer X { float data[]; } x;
layout(std430, binding = 1) buffer Out { float data[]; } out_;
layout(std140, binding = 0) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) atomicAdd(out_.data[0], x.data[i]);
}
