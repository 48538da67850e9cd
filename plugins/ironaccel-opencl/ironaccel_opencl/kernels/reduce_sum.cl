// Local-memory tree reduction; the work-group size is a power of two <= 256.
__kernel void reduce_sum(__global const float* x, __global float* partial, uint n) {
    __local float tile[256];
    uint t = get_local_id(0);
    uint i = get_global_id(0);
    tile[t] = i < n ? x[i] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint stride = get_local_size(0) / 2; stride > 0; stride /= 2) {
        if (t < stride) tile[t] += tile[t + stride];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t == 0) partial[get_group_id(0)] = tile[0];
}
