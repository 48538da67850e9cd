#version 430
// bins[x[i] % 64] += 1 for i < n: per-block counts in shared memory, then one global atomic per bin
// shared-memory writes are made visible with memoryBarrierShared() before each barrier() (see sem_rounds.comp)
layout(std430, binding = 0) readonly buffer X { uint data[]; } x;
layout(std430, binding = 1) buffer Bins { uint data[]; } bins;
layout(std140, binding = 0) uniform Args { uint n; } args;

const uint NUM_BINS = 64u;
shared uint counts[NUM_BINS];

void main() {
    uint t = gl_LocalInvocationID.x;
    for (uint b = t; b < NUM_BINS; b += gl_WorkGroupSize.x) counts[b] = 0u;
    memoryBarrierShared(); barrier();
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) atomicAdd(counts[x.data[i] % NUM_BINS], 1u);
    memoryBarrierShared(); barrier();
    for (uint b = t; b < NUM_BINS; b += gl_WorkGroupSize.x)
        if (counts[b] != 0u) atomicAdd(bins.data[b], counts[b]);
}
