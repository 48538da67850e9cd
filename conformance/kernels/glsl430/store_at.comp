#version 430
// thread 0 only: out[index] = value - a word anywhere in a buffer (MEM-51: the last of max_alloc bytes)
layout(std430, binding = 0) writeonly buffer Out { uint data[]; } out_;
layout(std140, binding = 0) uniform Args { uint index; uint value; } args;

void main() {
    if (gl_GlobalInvocationID == uvec3(0u)) out_.data[args.index] = args.value;
}
