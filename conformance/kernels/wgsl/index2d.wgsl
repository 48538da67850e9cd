override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
struct Args { width: u32, height: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<uniform> args: Args;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn index2d(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < args.width && g.y < args.height) { out[g.y * args.width + g.x] = (g.y << 16u) | g.x; }
}
