// 64-bit integers loaded from and stored to memory (needs kernel.int64): out[6i..6i+5] = x + y, x - y, x * y
// (u64, wrapping), x << (y & 63), x >> (y & 63), min(i64(x), i64(y)) for x = a[i], y = b[i], i < n (SPEC.md,
// SEM-45).
__kernel void sem_int64(__global const ulong* a, __global const ulong* b, __global ulong* out, uint n) {
    uint i = get_global_id(0);
    if (i < n) {
        ulong x = a[i], y = b[i];
        __global ulong* o = out + 6 * i;
        o[0] = x + y;
        o[1] = x - y;
        o[2] = x * y;
        o[3] = x << (y & 63);
        o[4] = x >> (y & 63);
        o[5] = as_ulong(min(as_long(x), as_long(y)));
    }
}
