override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
// Float semantics: inf and NaN through add and mul (out[2i] = a+b, out[2i+1] = a*b), and float -> int
// conversion of in-range values, truncating toward zero (conv[i] = i32(c[i])) (SPEC.md, SEM-4, SEM-5).
struct Args { n: u32 }
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> c: array<f32>;
@group(0) @binding(4) var<storage, read_write> conv: array<u32>;
@group(0) @binding(5) var<uniform> args: Args;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn sem_float(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x;
    if (i < args.n) {
        out[2u * i] = a[i] + b[i];
        out[2u * i + 1u] = a[i] * b[i];
        conv[i] = bitcast<u32>(i32(c[i]));
    }
}
