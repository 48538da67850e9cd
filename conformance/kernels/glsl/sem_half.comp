#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// float32 <-> float16 conversion, which every dialect has without a float16 type (GLSL packHalf2x16, WGSL
// pack2x16float, OpenCL vstore_half, PTX cvt): out[2i] = the float16 bits of x[i], out[2i+1] = the float32 bits
// of the float16 in h[i]'s low 16 bits, for i < n (SPEC.md, SEM-42).
layout(set = 0, binding = 0) readonly buffer X { float data[]; } x;
layout(set = 0, binding = 1) readonly buffer H { uint data[]; } h;
layout(set = 0, binding = 2) writeonly buffer Out { uint data[]; } out_;
layout(push_constant) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= args.n) return;
    out_.data[2u * i] = packHalf2x16(vec2(x.data[i], 0.0));
    out_.data[2u * i + 1u] = floatBitsToUint(unpackHalf2x16(h.data[i] & 0xFFFFu).x);
}
