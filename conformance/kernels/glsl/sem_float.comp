#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// Float semantics: inf and NaN through add and mul (out[2i] = a+b, out[2i+1] = a*b), and float -> int
// conversion of in-range values, truncating toward zero (conv[i] = int(c[i])) (SPEC.md, SEM-4, SEM-5).
layout(set = 0, binding = 0) readonly buffer A { float data[]; } a;
layout(set = 0, binding = 1) readonly buffer B { float data[]; } b;
layout(set = 0, binding = 2) writeonly buffer Out { float data[]; } out_;
layout(set = 0, binding = 3) readonly buffer C { float data[]; } c;
layout(set = 0, binding = 4) writeonly buffer Conv { uint data[]; } conv;
layout(push_constant) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= args.n) return;
    out_.data[2u * i] = a.data[i] + b.data[i];
    out_.data[2u * i + 1u] = a.data[i] * b.data[i];
    conv.data[i] = uint(int(c.data[i]));
}
