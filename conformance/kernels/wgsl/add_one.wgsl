override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
struct Args { n: u32 }
@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@group(0) @binding(1) var<uniform> args: Args;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn add_one(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < args.n) { x[g.x] = x[g.x] + 1u; }
}
