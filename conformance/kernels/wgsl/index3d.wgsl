override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
struct Args { nx: u32, ny: u32, nz: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<uniform> args: Args;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn index3d(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < args.nx && g.y < args.ny && g.z < args.nz) {
        out[(g.z * args.ny + g.y) * args.nx + g.x] = g.x | (g.y << 10u) | (g.z << 20u);
    }
}
