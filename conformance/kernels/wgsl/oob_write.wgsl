override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
// out[i] = 0xDEADBEEF for every i < n, with no bounds check against the buffer: a launch with n past the
// buffer's end writes out of bounds (SPEC.md, ROBUST-1).
struct Args { n: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<uniform> args: Args;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn oob_write(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < args.n) { out[g.x] = 0xDEADBEEFu; }
}
