override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
struct Args { n: u32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<atomic<f32>>;
@group(0) @binding(2) var<uniform> args: Args;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn atomic_add_f32(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < args.n) { atomicAdd(&out[0], x[g.x]); }
}
