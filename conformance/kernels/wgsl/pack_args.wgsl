override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
struct Args { s0: u32, s1: f32, s2: i32, s3: u32 }
@group(0) @binding(0) var<storage, read_write> out_u: array<u32>;
@group(0) @binding(1) var<storage, read_write> out_f: array<f32>;
@group(0) @binding(2) var<uniform> args: Args;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn pack_args(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x == 0u && g.y == 0u && g.z == 0u) {
        out_u[0] = args.s0;
        out_u[1] = bitcast<u32>(args.s2);
        out_u[2] = args.s3;
        out_f[0] = args.s1;
    }
}
