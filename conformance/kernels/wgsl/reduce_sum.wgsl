override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
struct Args { n: u32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> partial: array<f32>;
@group(0) @binding(2) var<uniform> args: Args;
var<workgroup> tile: array<f32, 256>;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn reduce_sum(@builtin(global_invocation_id) g: vec3<u32>, @builtin(workgroup_id) b: vec3<u32>,
              @builtin(local_invocation_id) t: vec3<u32>) {
    var v = 0.0;
    if (g.x < args.n) { v = x[g.x]; }
    tile[t.x] = v;
    workgroupBarrier();
    for (var stride = BLOCK_X / 2u; stride > 0u; stride = stride / 2u) {
        if (t.x < stride) { tile[t.x] = tile[t.x] + tile[t.x + stride]; }
        workgroupBarrier();
    }
    if (t.x == 0u) { partial[b.x] = tile[0]; }
}
