// out[i] = 0xDEADBEEF for every i < n, with no bounds check against the buffer: a launch with n past the
// buffer's end writes out of bounds (SPEC.md, ROBUST-1).
__kernel void oob_write(__global uint* out, uint n) {
    uint i = get_global_id(0);
    if (i < n) out[i] = 0xDEADBEEFu;
}
