override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
// Atomics under contention, on global and on shared memory. For i < n, with v = x[i] and h = v * 0x9E3779B1
// (u32, wrapping: mixed signs as i32): global g[0] += v, g[1] = min(g[1], h), g[2] = max(g[2], h) (u32),
// g[3] exchanged with i + 1, g[4] incremented by a compare-exchange loop; gs[0], gs[1] = min, max of i32(h);
// the same on the block's shared counters (started at 0, 2^32-1, 0, 0, 0 and INT_MAX, INT_MIN), written out by
// thread 0 after a barrier: blocks[7b..7b+6]. olds[5i..5i+4] = the old values of the global add, the global
// exchange, the compare-exchange that succeeded, the shared add and the shared exchange (SPEC.md, SEM-44).
struct Args { n: u32 }
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> g: array<atomic<u32>>;
@group(0) @binding(2) var<storage, read_write> gs: array<atomic<i32>>;
@group(0) @binding(3) var<storage, read_write> olds: array<u32>;
@group(0) @binding(4) var<storage, read_write> blocks: array<u32>;
@group(0) @binding(5) var<uniform> args: Args;
var<workgroup> su: array<atomic<u32>, 5>;
var<workgroup> ss: array<atomic<i32>, 2>;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn sem_atomics(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wg: vec3<u32>,
               @builtin(local_invocation_id) l: vec3<u32>) {
    let i = gid.x;
    if (l.x == 0u) {
        atomicStore(&su[0], 0u);
        atomicStore(&su[1], 0xFFFFFFFFu);
        atomicStore(&su[2], 0u);
        atomicStore(&su[3], 0u);
        atomicStore(&su[4], 0u);
        atomicStore(&ss[0], 2147483647i);
        atomicStore(&ss[1], bitcast<i32>(0x80000000u));
    }
    workgroupBarrier();
    if (i < args.n) {
        let v = x[i];
        let h = v * 0x9E3779B1u;
        let o = 5u * i;
        olds[o + 0u] = atomicAdd(&g[0], v);
        atomicMin(&g[1], h);
        atomicMax(&g[2], h);
        olds[o + 1u] = atomicExchange(&g[3], i + 1u);
        var expected = 0u;
        loop {
            let r = atomicCompareExchangeWeak(&g[4], expected, expected + 1u);
            if (r.exchanged) { break; }
            expected = r.old_value;
        }
        olds[o + 2u] = expected;
        atomicMin(&gs[0], bitcast<i32>(h));
        atomicMax(&gs[1], bitcast<i32>(h));
        olds[o + 3u] = atomicAdd(&su[0], v);
        atomicMin(&su[1], h);
        atomicMax(&su[2], h);
        olds[o + 4u] = atomicExchange(&su[3], i + 1u);
        expected = 0u;
        loop {
            let r = atomicCompareExchangeWeak(&su[4], expected, expected + 1u);
            if (r.exchanged) { break; }
            expected = r.old_value;
        }
        atomicMin(&ss[0], bitcast<i32>(h));
        atomicMax(&ss[1], bitcast<i32>(h));
    }
    workgroupBarrier();
    if (l.x == 0u) {
        let b = 7u * wg.x;
        for (var k = 0u; k < 5u; k = k + 1u) { blocks[b + k] = atomicLoad(&su[k]); }
        blocks[b + 5u] = bitcast<u32>(atomicLoad(&ss[0]));
        blocks[b + 6u] = bitcast<u32>(atomicLoad(&ss[1]));
    }
}
