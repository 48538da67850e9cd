#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// A block-wide reduction for any block size <= 256, a power of two or not: the sum (u32, wrapping), minimum and
// maximum of the block's x[i] (i < n; the others add 0, and do not count for min and max), pairing t with
// t + s for s = 1, 2, 4, ... while t + s < block size. partial[3*block + 0..2] = sum, min, max; every thread
// i < n then reads the sum after the last barrier: seen[i] = sum (SPEC.md, SEM-43).
layout(set = 0, binding = 0) readonly buffer X { uint data[]; } x;
layout(set = 0, binding = 1) writeonly buffer Partial { uint data[]; } partial;
layout(set = 0, binding = 2) writeonly buffer Seen { uint data[]; } seen;
layout(push_constant) uniform Args { uint n; } args;

shared uint sums[256], lows[256], highs[256];

void main() {
    uint t = gl_LocalInvocationID.x, size = gl_WorkGroupSize.x;
    uint i = gl_GlobalInvocationID.x;
    sums[t] = i < args.n ? x.data[i] : 0u;
    lows[t] = i < args.n ? x.data[i] : 0xFFFFFFFFu;
    highs[t] = i < args.n ? x.data[i] : 0u;
    barrier();
    for (uint s = 1u; s < size; s *= 2u) {
        if ((t & (2u * s - 1u)) == 0u && t + s < size) {
            sums[t] += sums[t + s];
            lows[t] = min(lows[t], lows[t + s]);
            highs[t] = max(highs[t], highs[t + s]);
        }
        barrier();
    }
    if (t == 0u) {
        partial.data[3u * gl_WorkGroupID.x] = sums[0];
        partial.data[3u * gl_WorkGroupID.x + 1u] = lows[0];
        partial.data[3u * gl_WorkGroupID.x + 2u] = highs[0];
    }
    if (i < args.n) seen.data[i] = sums[0];
}
