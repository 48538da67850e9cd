// Barriers in a loop: `rounds` times, a local-memory tree reduction of the work-group's values, then each
// value becomes v*3 + total + round (u32). Every work-item takes part (values of i >= n start at 0);
// out[i] = the final value for i < n. The work-group size is a power of two <= 256.
__kernel void sem_rounds(__global const uint* x, __global uint* out, uint rounds, uint n) {
    __local uint vals[256];
    __local uint scratch[256];
    uint t = get_local_id(0);
    uint i = get_global_id(0);
    vals[t] = i < n ? x[i] : 0u;
    for (uint r = 0; r < rounds; r++) {
        scratch[t] = vals[t];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint stride = get_local_size(0) / 2; stride > 0; stride /= 2) {
            if (t < stride) scratch[t] += scratch[t + stride];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        uint total = scratch[0];
        barrier(CLK_LOCAL_MEM_FENCE);
        vals[t] = vals[t] * 3u + total + r;
    }
    if (i < n) out[i] = vals[t];
}
