#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// thread 0 only: out[index] = value - a word anywhere in a buffer (MEM-51: the last of max_alloc bytes)
layout(set = 0, binding = 0) writeonly buffer Out { uint data[]; } out_;
layout(push_constant) uniform Args { uint index; uint value; } args;

void main() {
    if (gl_GlobalInvocationID == uvec3(0u)) out_.data[args.index] = args.value;
}
