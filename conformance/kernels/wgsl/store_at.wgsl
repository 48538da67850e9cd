override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
struct Args { index: u32, value: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<uniform> args: Args;

// thread 0 only: out[index] = value - a word anywhere in a buffer (MEM-51: the last of max_alloc bytes)
@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn store_at(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x == 0u && g.y == 0u && g.z == 0u) { out[args.index] = args.value; }
}
