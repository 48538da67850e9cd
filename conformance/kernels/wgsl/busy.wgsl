override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
struct Args { iters: u32, n: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<uniform> args: Args;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn busy(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < args.n) {
        var v = g.x;
        for (var k = 0u; k < args.iters; k = k + 1u) { v = v * 1664525u + 1013904223u; }
        out[g.x] = v;
    }
}
