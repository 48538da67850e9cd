override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
struct Args { n: u32 }
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> bins: array<atomic<u32>>;
@group(0) @binding(2) var<uniform> args: Args;
var<workgroup> local_bins: array<atomic<u32>, 64>;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn histogram(@builtin(global_invocation_id) g: vec3<u32>, @builtin(local_invocation_id) t: vec3<u32>) {
    for (var i = t.x; i < 64u; i = i + BLOCK_X) { atomicStore(&local_bins[i], 0u); }
    workgroupBarrier();
    if (g.x < args.n) { atomicAdd(&local_bins[x[g.x] % 64u], 1u); }
    workgroupBarrier();
    for (var i = t.x; i < 64u; i = i + BLOCK_X) {
        let c = atomicLoad(&local_bins[i]);
        if (c > 0u) { atomicAdd(&bins[i], c); }
    }
}
