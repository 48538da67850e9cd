__kernel void pack_wide(__global uint* out, uint s0, ulong a, long b, uint s1) {
    if (get_global_id(0) == 0 && get_global_id(1) == 0 && get_global_id(2) == 0) {
        out[0] = s0;
        out[1] = (uint)a;
        out[2] = (uint)(a >> 32);
        out[3] = (uint)b;
        out[4] = (uint)((ulong)b >> 32);
        out[5] = s1;
    }
}
