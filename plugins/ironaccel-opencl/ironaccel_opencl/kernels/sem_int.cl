// 32-bit integer semantics every dialect defines: unsigned wrap-around, signed division and remainder
// truncated toward zero, shifts by 0..31. out[7*i + k] for i < n (SPEC.md, SEM-1..3).
__kernel void sem_int(__global const uint* a, __global const uint* b, __global uint* out, uint n) {
    uint i = get_global_id(0);
    if (i < n) {
        uint x = a[i], y = b[i];
        int sx = as_int(x), sy = as_int(y);  // the host never passes y == 0 or (INT_MIN, -1)
        __global uint* o = out + 7 * i;
        o[0] = x + y;
        o[1] = x - y;
        o[2] = x * y;
        o[3] = as_uint(sx / sy);
        o[4] = as_uint(sx % sy);
        o[5] = x << (y & 31u);
        o[6] = x >> (y & 31u);
    }
}
