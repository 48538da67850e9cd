override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
// A block-wide reduction for any block size <= 256, a power of two or not: the sum (u32, wrapping), minimum and
// maximum of the block's x[i] (i < n; the others add 0, and do not count for min and max), pairing t with
// t + s for s = 1, 2, 4, ... while t + s < block size. partial[3*block + 0..2] = sum, min, max; every thread
// i < n then reads the sum after the last barrier: seen[i] = sum (SPEC.md, SEM-43).
struct Args { n: u32 }
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> partial: array<u32>;
@group(0) @binding(2) var<storage, read_write> seen: array<u32>;
@group(0) @binding(3) var<uniform> args: Args;
var<workgroup> sums: array<u32, 256>;
var<workgroup> lows: array<u32, 256>;
var<workgroup> highs: array<u32, 256>;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn sem_reduce(@builtin(global_invocation_id) g: vec3<u32>, @builtin(workgroup_id) b: vec3<u32>,
              @builtin(local_invocation_id) l: vec3<u32>) {
    let t = l.x;
    let i = g.x;
    var v = 0u;
    var low = 0xFFFFFFFFu;
    if (i < args.n) { v = x[i]; low = v; }
    sums[t] = v;
    lows[t] = low;
    highs[t] = v;
    workgroupBarrier();
    for (var s = 1u; s < BLOCK_X; s = s * 2u) {
        if ((t & (2u * s - 1u)) == 0u && t + s < BLOCK_X) {
            sums[t] = sums[t] + sums[t + s];
            lows[t] = min(lows[t], lows[t + s]);
            highs[t] = max(highs[t], highs[t + s]);
        }
        workgroupBarrier();
    }
    if (t == 0u) {
        partial[3u * b.x] = sums[0];
        partial[3u * b.x + 1u] = lows[0];
        partial[3u * b.x + 2u] = highs[0];
    }
    if (i < args.n) { seen[i] = sums[0]; }
}
