#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// 32-bit integer semantics every dialect defines: unsigned wrap-around, signed division and remainder
// truncated toward zero, shifts by 0..31. out[7*i + k] for i < n (SPEC.md, SEM-1..3).
// GLSL leaves % of negative operands undefined, so the remainder is x - (x / y) * y here (SEM-2).
layout(set = 0, binding = 0) readonly buffer A { uint data[]; } a;
layout(set = 0, binding = 1) readonly buffer B { uint data[]; } b;
layout(set = 0, binding = 2) writeonly buffer Out { uint data[]; } out_;
layout(push_constant) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= args.n) return;
    uint x = a.data[i], y = b.data[i];
    int sx = int(x), sy = int(y);  // the host never passes y == 0 or (INT_MIN, -1)
    int q = sx / sy;
    out_.data[7u * i + 0u] = x + y;
    out_.data[7u * i + 1u] = x - y;
    out_.data[7u * i + 2u] = x * y;
    out_.data[7u * i + 3u] = uint(q);
    out_.data[7u * i + 4u] = uint(sx - q * sy);
    out_.data[7u * i + 5u] = x << (y & 31u);
    out_.data[7u * i + 6u] = x >> (y & 31u);
}
