// 64 bins: a per-work-group histogram in local memory, then one global atomic add per non-empty bin.
__kernel void histogram(__global const uint* x, __global uint* bins, uint n) {
    __local uint local_bins[64];
    for (uint b = get_local_id(0); b < 64; b += get_local_size(0)) local_bins[b] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint i = get_global_id(0);
    if (i < n) atomic_inc(&local_bins[x[i] % 64]);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint b = get_local_id(0); b < 64; b += get_local_size(0)) {
        uint c = local_bins[b];
        if (c > 0) atomic_add(&bins[b], c);
    }
}
