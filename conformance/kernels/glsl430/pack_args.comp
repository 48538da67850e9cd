#version 430
// thread 0: out_u = (s0, bitcast<u32>(s2), s3), out_f[0] = s1 - checks scalar packing around buffers
layout(std430, binding = 0) writeonly buffer OutU { uint data[]; } out_u;
layout(std430, binding = 1) writeonly buffer OutF { float data[]; } out_f;
layout(std140, binding = 0) uniform Args { uint s0; float s1; int s2; uint s3; } args;

void main() {
    if (gl_GlobalInvocationID == uvec3(0u)) {
        out_u.data[0] = args.s0;
        out_u.data[1] = uint(args.s2);
        out_u.data[2] = args.s3;
        out_f.data[0] = args.s1;
    }
}
