override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
struct Args { n: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<uniform> args: Args;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn block_ids(@builtin(global_invocation_id) g: vec3<u32>, @builtin(workgroup_id) b: vec3<u32>,
             @builtin(local_invocation_id) t: vec3<u32>) {
    if (g.x < args.n) { out[g.x] = (b.x << 16u) | t.x; }
}
