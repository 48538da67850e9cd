override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
// The common integer operations every dialect defines alike: min/max (unsigned and signed), abs, popcount,
// count leading zeros, unsigned division and remainder, int -> float, and a constant table read at a run-time
// index. out[12*i + k] for i < n (SPEC.md, SEM-40, SEM-41).
struct Args { n: u32 }
@group(0) @binding(0) var<storage, read> a: array<u32>;
@group(0) @binding(1) var<storage, read> b: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<uniform> args: Args;
const TABLE = array<u32, 16>(0x243F6A88u, 0x85A308D3u, 0x13198A2Eu, 0x03707344u, 0xA4093822u, 0x299F31D0u, 0x082EFA98u, 0xEC4E6C89u, 0x452821E6u, 0x38D01377u, 0xBE5466CFu, 0x34E90C6Cu, 0xC0AC29B7u, 0xC97C50DDu, 0x3F84D5B5u, 0xB5470917u);

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn sem_ops(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x;
    if (i < args.n) {
        let x = a[i];
        let y = b[i];  // the host never passes y == 0
        let sx = bitcast<i32>(x);
        let sy = bitcast<i32>(y);
        let o = 12u * i;
        out[o + 0u] = min(x, y);
        out[o + 1u] = max(x, y);
        out[o + 2u] = bitcast<u32>(min(sx, sy));
        out[o + 3u] = bitcast<u32>(max(sx, sy));
        out[o + 4u] = bitcast<u32>(abs(max(sx, -2147483647i)));  // abs(INT_MIN) is undefined in C
        out[o + 5u] = countOneBits(x);
        out[o + 6u] = countLeadingZeros(x);
        out[o + 7u] = x / y;
        out[o + 8u] = x % y;
        out[o + 9u] = bitcast<u32>(f32(sx));
        out[o + 10u] = bitcast<u32>(f32(x));
        let table = TABLE;
        out[o + 11u] = table[(x ^ y) & 15u];
    }
}
