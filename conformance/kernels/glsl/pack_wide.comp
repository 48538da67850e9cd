#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// thread 0: out = (s0, lo(a), hi(a), lo(b), hi(b), s1) — 64-bit scalars between 32-bit ones (needs kernel.int64)
layout(set = 0, binding = 0) writeonly buffer Out { uint data[]; } out_u;
layout(push_constant) uniform Args { uint s0; uint64_t a; int64_t b; uint s1; } args;

void main() {
    if (gl_GlobalInvocationID == uvec3(0u)) {
        out_u.data[0] = args.s0;
        out_u.data[1] = uint(args.a);
        out_u.data[2] = uint(args.a >> 32);
        out_u.data[3] = uint(args.b);
        out_u.data[4] = uint(uint64_t(args.b) >> 32);
        out_u.data[5] = args.s1;
    }
}
