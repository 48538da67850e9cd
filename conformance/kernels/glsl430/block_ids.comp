#version 430
// out[i] = (blockIdx.x << 16) | threadIdx.x for i = gid.x < n
layout(std430, binding = 0) writeonly buffer Out { uint data[]; } out_;
layout(std140, binding = 0) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) out_.data[i] = (gl_WorkGroupID.x << 16) | gl_LocalInvocationID.x;
}
