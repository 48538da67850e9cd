override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
// Barriers in a loop: `rounds` times, a workgroup-memory tree reduction of the block's values, then each
// value becomes v*3 + total + round (u32). Every thread of the block takes part (values of i >= n start
// at 0); out[i] = the final value for i < n. The block size is a power of two <= 256.
struct Args { rounds: u32, n: u32 }
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<uniform> args: Args;
var<workgroup> vals: array<u32, 256>;
var<workgroup> scratch: array<u32, 256>;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn sem_rounds(@builtin(global_invocation_id) g: vec3<u32>, @builtin(local_invocation_id) t: vec3<u32>) {
    var v = 0u;
    if (g.x < args.n) { v = x[g.x]; }
    vals[t.x] = v;
    for (var r = 0u; r < args.rounds; r = r + 1u) {
        scratch[t.x] = vals[t.x];
        workgroupBarrier();
        for (var stride = BLOCK_X / 2u; stride > 0u; stride = stride / 2u) {
            if (t.x < stride) { scratch[t.x] = scratch[t.x] + scratch[t.x + stride]; }
            workgroupBarrier();
        }
        let total = scratch[0];
        workgroupBarrier();
        vals[t.x] = vals[t.x] * 3u + total + r;
    }
    if (g.x < args.n) { out[g.x] = vals[t.x]; }
}
