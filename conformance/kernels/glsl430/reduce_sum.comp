#version 430
// partial[block] = sum of the block's x[i] (i < n): a shared-memory tree reduction; block size a power of two <= 256
// shared-memory writes are made visible with memoryBarrierShared() before each barrier() (see sem_rounds.comp)
layout(std430, binding = 0) readonly buffer X { float data[]; } x;
layout(std430, binding = 1) writeonly buffer Partial { float data[]; } partial;
layout(std140, binding = 0) uniform Args { uint n; } args;

shared float sums[256];

void main() {
    uint t = gl_LocalInvocationID.x;
    uint i = gl_GlobalInvocationID.x;
    sums[t] = i < args.n ? x.data[i] : 0.0;
    memoryBarrierShared(); barrier();
    for (uint stride = gl_WorkGroupSize.x / 2u; stride > 0u; stride /= 2u) {
        if (t < stride) sums[t] += sums[t + stride];
        memoryBarrierShared(); barrier();
    }
    if (t == 0u) partial.data[gl_WorkGroupID.x] = sums[0];
}
