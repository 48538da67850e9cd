#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
#extension GL_EXT_shader_atomic_float : require
// atomicAdd(out[0], x[i]) for i < n (needs kernel.atomics.float32)
layout(set = 0, binding = 0) readonly buffer X { float data[]; } x;
layout(set = 0, binding = 1) buffer Out { float data[]; } out_;
layout(push_constant) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) atomicAdd(out_.data[0], x.data[i]);
}
