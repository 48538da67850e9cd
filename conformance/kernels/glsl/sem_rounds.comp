#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// Barriers in a loop: `rounds` times, a shared-memory tree reduction of the block's values, then each
// value becomes v*3 + total + round (u32). Every thread of the block takes part (values of i >= n start
// at 0); out[i] = the final value for i < n. The block size is a power of two <= 256.
layout(set = 0, binding = 0) readonly buffer X { uint data[]; } x;
layout(set = 0, binding = 1) writeonly buffer Out { uint data[]; } out_;
layout(push_constant) uniform Args { uint rounds; uint n; } args;

shared uint vals[256];
shared uint scratch[256];

void main() {
    uint t = gl_LocalInvocationID.x;
    uint i = gl_GlobalInvocationID.x;
    vals[t] = i < args.n ? x.data[i] : 0u;
    for (uint r = 0u; r < args.rounds; ++r) {
        scratch[t] = vals[t];
        barrier();
        for (uint stride = gl_WorkGroupSize.x / 2u; stride > 0u; stride /= 2u) {
            if (t < stride) scratch[t] += scratch[t + stride];
            barrier();
        }
        uint total = scratch[0];
        barrier();
        vals[t] = vals[t] * 3u + total + r;
    }
    if (i < args.n) out_.data[i] = vals[t];
}
