__kernel void block_ids(__global uint* out, uint n) {
    uint i = get_global_id(0);
    if (i < n) out[i] = ((uint)get_group_id(0) << 16) | (uint)get_local_id(0);
}
