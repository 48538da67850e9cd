#version 430
// The common integer operations every dialect defines alike: min/max (unsigned and signed), abs, popcount,
// count leading zeros, unsigned division and remainder, int -> float, and a constant table read at a run-time
// index. out[12*i + k] for i < n (SPEC.md, SEM-40, SEM-41).
layout(std430, binding = 0) readonly buffer A { uint data[]; } a;
layout(std430, binding = 1) readonly buffer B { uint data[]; } b;
layout(std430, binding = 2) writeonly buffer Out { uint data[]; } out_;
layout(std140, binding = 0) uniform Args { uint n; } args;
const uint TABLE[16] = uint[16](0x243F6A88u, 0x85A308D3u, 0x13198A2Eu, 0x03707344u, 0xA4093822u, 0x299F31D0u, 0x082EFA98u, 0xEC4E6C89u, 0x452821E6u, 0x38D01377u, 0xBE5466CFu, 0x34E90C6Cu, 0xC0AC29B7u, 0xC97C50DDu, 0x3F84D5B5u, 0xB5470917u);

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= args.n) return;
    uint x = a.data[i], y = b.data[i];  // the host never passes y == 0
    int sx = int(x), sy = int(y);
    uint o = 12u * i;
    out_.data[o + 0u] = min(x, y);
    out_.data[o + 1u] = max(x, y);
    out_.data[o + 2u] = uint(min(sx, sy));
    out_.data[o + 3u] = uint(max(sx, sy));
    out_.data[o + 4u] = uint(abs(max(sx, -2147483647)));  // abs(INT_MIN) is undefined in C
    out_.data[o + 5u] = uint(bitCount(x));
    out_.data[o + 6u] = uint(31 - findMSB(x));  // findMSB(0) is -1: 32 leading zeros
    out_.data[o + 7u] = x / y;
    out_.data[o + 8u] = x % y;
    out_.data[o + 9u] = floatBitsToUint(float(sx));
    out_.data[o + 10u] = floatBitsToUint(float(x));
    out_.data[o + 11u] = TABLE[(x ^ y) & 15u];
}
