__kernel void fill_u32(__global uint* out, uint value, uint n) {
    uint i = get_global_id(0);
    if (i < n) out[i] = value;
}
