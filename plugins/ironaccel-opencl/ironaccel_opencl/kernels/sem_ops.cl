// The common integer operations every dialect defines alike: min/max (unsigned and signed), abs, popcount,
// count leading zeros, unsigned division and remainder, int -> float, and a constant table read at a run-time
// index. out[12*i + k] for i < n (SPEC.md, SEM-40, SEM-41).
__constant uint TABLE[16] = {0x243F6A88u, 0x85A308D3u, 0x13198A2Eu, 0x03707344u, 0xA4093822u, 0x299F31D0u, 0x082EFA98u, 0xEC4E6C89u, 0x452821E6u, 0x38D01377u, 0xBE5466CFu, 0x34E90C6Cu, 0xC0AC29B7u, 0xC97C50DDu, 0x3F84D5B5u, 0xB5470917u};

__kernel void sem_ops(__global const uint* a, __global const uint* b, __global uint* out, uint n) {
    uint i = get_global_id(0);
    if (i < n) {
        uint x = a[i], y = b[i];  // the host never passes y == 0
        int sx = as_int(x), sy = as_int(y);
        __global uint* o = out + 12 * i;
        o[0] = min(x, y);
        o[1] = max(x, y);
        o[2] = as_uint(min(sx, sy));
        o[3] = as_uint(max(sx, sy));
        o[4] = abs(max(sx, -2147483647));  // abs(INT_MIN) is undefined in C
        o[5] = popcount(x);
        o[6] = clz(x);
        o[7] = x / y;
        o[8] = x % y;
        o[9] = as_uint(convert_float(sx));
        o[10] = as_uint(convert_float(x));
        o[11] = TABLE[(x ^ y) & 15u];
    }
}
