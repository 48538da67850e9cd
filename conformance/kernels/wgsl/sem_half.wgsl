override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
// float32 <-> float16 conversion, which every dialect has without a float16 type (GLSL packHalf2x16, WGSL
// pack2x16float, OpenCL vstore_half, PTX cvt): out[2i] = the float16 bits of x[i], out[2i+1] = the float32 bits
// of the float16 in h[i]'s low 16 bits, for i < n (SPEC.md, SEM-42).
struct Args { n: u32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> h: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<uniform> args: Args;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn sem_half(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x;
    if (i < args.n) {
        out[2u * i] = pack2x16float(vec2<f32>(x[i], 0.0));
        out[2u * i + 1u] = bitcast<u32>(unpack2x16float(h[i] & 0xFFFFu).x);
    }
}
