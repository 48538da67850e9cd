// A block-wide reduction for any block size <= 256, a power of two or not: the sum (u32, wrapping), minimum and
// maximum of the block's x[i] (i < n; the others add 0, and do not count for min and max), pairing t with
// t + s for s = 1, 2, 4, ... while t + s < block size. partial[3*block + 0..2] = sum, min, max; every thread
// i < n then reads the sum after the last barrier: seen[i] = sum (SPEC.md, SEM-43).
__kernel void sem_reduce(__global const uint* x, __global uint* partial, __global uint* seen, uint n) {
    __local uint sums[256], lows[256], highs[256];
    uint t = get_local_id(0), size = get_local_size(0);
    uint i = get_global_id(0);
    sums[t] = i < n ? x[i] : 0u;
    lows[t] = i < n ? x[i] : 0xFFFFFFFFu;
    highs[t] = i < n ? x[i] : 0u;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = 1; s < size; s *= 2) {
        if ((t & (2 * s - 1)) == 0 && t + s < size) {
            sums[t] += sums[t + s];
            lows[t] = min(lows[t], lows[t + s]);
            highs[t] = max(highs[t], highs[t + s]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t == 0) {
        partial[3 * get_group_id(0)] = sums[0];
        partial[3 * get_group_id(0) + 1] = lows[0];
        partial[3 * get_group_id(0) + 2] = highs[0];
    }
    if (i < n) seen[i] = sums[0];
}
