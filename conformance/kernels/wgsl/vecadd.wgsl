override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
struct Args { n: u32 }
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> args: Args;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn vecadd(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < args.n) { c[g.x] = a[g.x] + b[g.x]; }
}
