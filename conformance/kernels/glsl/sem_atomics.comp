#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// Atomics under contention, on global and on shared memory. For i < n, with v = x[i] and h = v * 0x9E3779B1
// (u32, wrapping: mixed signs as i32): global g[0] += v, g[1] = min(g[1], h), g[2] = max(g[2], h) (u32),
// g[3] exchanged with i + 1, g[4] incremented by a compare-exchange loop; gs[0], gs[1] = min, max of i32(h);
// the same on the block's shared counters (started at 0, 2^32-1, 0, 0, 0 and INT_MAX, INT_MIN), written out by
// thread 0 after a barrier: blocks[7b..7b+6]. olds[5i..5i+4] = the old values of the global add, the global
// exchange, the compare-exchange that succeeded, the shared add and the shared exchange (SPEC.md, SEM-44).
layout(set = 0, binding = 0) readonly buffer X { uint data[]; } x;
layout(set = 0, binding = 1) buffer G { uint data[]; } g;
layout(set = 0, binding = 2) buffer GS { int data[]; } gs;
layout(set = 0, binding = 3) writeonly buffer Olds { uint data[]; } olds;
layout(set = 0, binding = 4) writeonly buffer Blocks { uint data[]; } blocks;
layout(push_constant) uniform Args { uint n; } args;

shared uint su[5];
shared int ss[2];

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (gl_LocalInvocationID.x == 0u) {
        su[0] = 0u; su[1] = 0xFFFFFFFFu; su[2] = 0u; su[3] = 0u; su[4] = 0u;
        ss[0] = 2147483647; ss[1] = -2147483647 - 1;
    }
    barrier();
    if (i < args.n) {
        uint v = x.data[i], h = v * 0x9E3779B1u;
        uint o = 5u * i;
        olds.data[o + 0u] = atomicAdd(g.data[0], v);
        atomicMin(g.data[1], h);
        atomicMax(g.data[2], h);
        olds.data[o + 1u] = atomicExchange(g.data[3], i + 1u);
        uint expected = 0u;
        for (;;) {
            uint old = atomicCompSwap(g.data[4], expected, expected + 1u);
            if (old == expected) break;
            expected = old;
        }
        olds.data[o + 2u] = expected;
        atomicMin(gs.data[0], int(h));
        atomicMax(gs.data[1], int(h));
        olds.data[o + 3u] = atomicAdd(su[0], v);
        atomicMin(su[1], h);
        atomicMax(su[2], h);
        olds.data[o + 4u] = atomicExchange(su[3], i + 1u);
        expected = 0u;
        for (;;) {
            uint old = atomicCompSwap(su[4], expected, expected + 1u);
            if (old == expected) break;
            expected = old;
        }
        atomicMin(ss[0], int(h));
        atomicMax(ss[1], int(h));
    }
    barrier();
    if (gl_LocalInvocationID.x == 0u) {
        uint b = 7u * gl_WorkGroupID.x;
        for (uint k = 0u; k < 5u; k++) blocks.data[b + k] = su[k];
        blocks.data[b + 5u] = uint(ss[0]);
        blocks.data[b + 6u] = uint(ss[1]);
    }
}
