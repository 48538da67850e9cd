#version 430
// out[i] = value for i = gid.x < n
layout(std430, binding = 0) buffer Out { uint data[]; } out_;
layout(std140, binding = 0) uniform Args { uint value; uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) out_.data[i] = args.value;
}
