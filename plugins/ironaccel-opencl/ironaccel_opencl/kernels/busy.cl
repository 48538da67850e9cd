// Each work-item runs an iters-step LCG from its index: a kernel that takes a while.
__kernel void busy(__global uint* out, uint iters, uint n) {
    uint i = get_global_id(0);
    if (i < n) {
        uint v = i;
        for (uint k = 0; k < iters; k++) v = v * 1664525u + 1013904223u;
        out[i] = v;
    }
}
