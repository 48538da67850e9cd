#version 430
#extension GL_ARB_gpu_shader_int64 : require
// thread 0: out = (s0, lo(a), hi(a), lo(b), hi(b), s1) — 64-bit scalars between 32-bit ones (needs kernel.int64)
layout(std430, binding = 0) writeonly buffer Out { uint data[]; } out_u;
layout(std140, binding = 0) uniform Args { uint s0; uint64_t a; int64_t b; uint s1; } args;

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
