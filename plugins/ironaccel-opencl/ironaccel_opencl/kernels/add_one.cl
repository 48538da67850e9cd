__kernel void add_one(__global uint* x, uint n) {
    uint i = get_global_id(0);
    if (i < n) x[i] += 1u;
}
