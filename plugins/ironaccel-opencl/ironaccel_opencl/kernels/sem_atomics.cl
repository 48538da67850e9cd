// Atomics under contention, on global and on shared memory. For i < n, with v = x[i] and h = v * 0x9E3779B1
// (u32, wrapping: mixed signs as i32): global g[0] += v, g[1] = min(g[1], h), g[2] = max(g[2], h) (u32),
// g[3] exchanged with i + 1, g[4] incremented by a compare-exchange loop; gs[0], gs[1] = min, max of i32(h);
// the same on the block's shared counters (started at 0, 2^32-1, 0, 0, 0 and INT_MAX, INT_MIN), written out by
// thread 0 after a barrier: blocks[7b..7b+6]. olds[5i..5i+4] = the old values of the global add, the global
// exchange, the compare-exchange that succeeded, the shared add and the shared exchange (SPEC.md, SEM-44).
uint cas_increment_global(volatile __global uint* p) {
    uint expected = 0;
    for (;;) {
        uint old = atomic_cmpxchg(p, expected, expected + 1);
        if (old == expected) return expected;
        expected = old;
    }
}

uint cas_increment_local(volatile __local uint* p) {
    uint expected = 0;
    for (;;) {
        uint old = atomic_cmpxchg(p, expected, expected + 1);
        if (old == expected) return expected;
        expected = old;
    }
}

__kernel void sem_atomics(__global const uint* x, __global uint* g, __global int* gs, __global uint* olds,
                          __global uint* blocks, uint n) {
    __local uint su[5];
    __local int ss[2];
    uint i = get_global_id(0);
    if (get_local_id(0) == 0) {
        su[0] = 0; su[1] = 0xFFFFFFFFu; su[2] = 0; su[3] = 0; su[4] = 0;
        ss[0] = 2147483647; ss[1] = -2147483647 - 1;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (i < n) {
        uint v = x[i], h = v * 0x9E3779B1u;
        __global uint* o = olds + 5 * i;
        o[0] = atomic_add(&g[0], v);
        atomic_min(&g[1], h);
        atomic_max(&g[2], h);
        o[1] = atomic_xchg(&g[3], i + 1);
        o[2] = cas_increment_global(&g[4]);
        atomic_min(&gs[0], as_int(h));
        atomic_max(&gs[1], as_int(h));
        o[3] = atomic_add(&su[0], v);
        atomic_min(&su[1], h);
        atomic_max(&su[2], h);
        o[4] = atomic_xchg(&su[3], i + 1);
        cas_increment_local(&su[4]);
        atomic_min(&ss[0], as_int(h));
        atomic_max(&ss[1], as_int(h));
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        __global uint* b = blocks + 7 * get_group_id(0);
        for (int k = 0; k < 5; k++) b[k] = su[k];
        b[5] = as_uint(ss[0]);
        b[6] = as_uint(ss[1]);
    }
}
