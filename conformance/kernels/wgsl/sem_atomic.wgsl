override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
// Every thread i < n adds 1 to counter[0] and keeps the value it saw: olds is then a permutation of 0..n-1.
struct Args { n: u32 }
@group(0) @binding(0) var<storage, read_write> counter: array<atomic<u32>>;
@group(0) @binding(1) var<storage, read_write> olds: array<u32>;
@group(0) @binding(2) var<uniform> args: Args;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn sem_atomic(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < args.n) { olds[g.x] = atomicAdd(&counter[0], 1u); }
}
