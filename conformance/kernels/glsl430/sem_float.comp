#version 430
// Float semantics: inf and NaN through add and mul (out[2i] = a+b, out[2i+1] = a*b), and float -> int
// conversion of in-range values, truncating toward zero (conv[i] = int(c[i])) (SPEC.md, SEM-4, SEM-5).
layout(std430, binding = 0) readonly buffer A { float data[]; } a;
layout(std430, binding = 1) readonly buffer B { float data[]; } b;
layout(std430, binding = 2) writeonly buffer Out { float data[]; } out_;
layout(std430, binding = 3) readonly buffer C { float data[]; } c;
layout(std430, binding = 4) writeonly buffer Conv { uint data[]; } conv;
layout(std140, binding = 0) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= args.n) return;
    out_.data[2u * i] = a.data[i] + b.data[i];
    out_.data[2u * i + 1u] = a.data[i] * b.data[i];
    conv.data[i] = uint(int(c.data[i]));
}
