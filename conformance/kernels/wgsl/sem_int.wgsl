override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
// 32-bit integer semantics every dialect defines: unsigned wrap-around, signed division and remainder
// truncated toward zero, shifts by 0..31. out[7*i + k] for i < n (SPEC.md, SEM-1..3).
struct Args { n: u32 }
@group(0) @binding(0) var<storage, read> a: array<u32>;
@group(0) @binding(1) var<storage, read> b: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<uniform> args: Args;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn sem_int(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x;
    if (i < args.n) {
        let x = a[i];
        let y = b[i];
        let sx = bitcast<i32>(x);
        let sy = bitcast<i32>(y);  // the host never passes y == 0 or (INT_MIN, -1)
        out[7u * i + 0u] = x + y;
        out[7u * i + 1u] = x - y;
        out[7u * i + 2u] = x * y;
        out[7u * i + 3u] = bitcast<u32>(sx / sy);
        out[7u * i + 4u] = bitcast<u32>(sx % sy);
        out[7u * i + 5u] = x << (y & 31u);
        out[7u * i + 6u] = x >> (y & 31u);
    }
}
