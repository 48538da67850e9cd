// Atomics under contention, on global and on shared memory. For i < n, with v = x[i] and h = v * 0x9E3779B1
// (u32, wrapping: mixed signs as i32): global g[0] += v, g[1] = min(g[1], h), g[2] = max(g[2], h) (u32),
// g[3] exchanged with i + 1, g[4] incremented by a compare-exchange loop; gs[0], gs[1] = min, max of i32(h);
// the same on the block's shared counters (started at 0, 2^32-1, 0, 0, 0 and INT_MAX, INT_MIN), written out by
// thread 0 after a barrier: blocks[7b..7b+6]. olds[5i..5i+4] = the old values of the global add, the global
// exchange, the compare-exchange that succeeded, the shared add and the shared exchange (SPEC.md, SEM-44).
__device__ unsigned cas_increment(unsigned* p) {
    unsigned expected = 0;
    for (;;) {
        unsigned old = atomicCAS(p, expected, expected + 1);
        if (old == expected) return expected;
        expected = old;
    }
}

extern "C" __global__ void sem_atomics(const unsigned* x, unsigned* g, int* gs, unsigned* olds, unsigned* blocks,
                                       unsigned n) {
    __shared__ unsigned su[5];
    __shared__ int ss[2];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x == 0) {
        su[0] = 0, su[1] = 0xFFFFFFFFu, su[2] = 0, su[3] = 0, su[4] = 0;
        ss[0] = 2147483647, ss[1] = -2147483647 - 1;
    }
    __syncthreads();
    if (i < n) {
        unsigned v = x[i], h = v * 0x9E3779B1u;
        unsigned* o = olds + 5 * i;
        o[0] = atomicAdd(&g[0], v);
        atomicMin(&g[1], h);
        atomicMax(&g[2], h);
        o[1] = atomicExch(&g[3], i + 1);
        o[2] = cas_increment(&g[4]);
        atomicMin(&gs[0], (int)h);
        atomicMax(&gs[1], (int)h);
        o[3] = atomicAdd(&su[0], v);
        atomicMin(&su[1], h);
        atomicMax(&su[2], h);
        o[4] = atomicExch(&su[3], i + 1);
        cas_increment(&su[4]);
        atomicMin(&ss[0], (int)h);
        atomicMax(&ss[1], (int)h);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned* b = blocks + 7 * blockIdx.x;
        for (int k = 0; k < 5; k++) b[k] = su[k];
        b[5] = (unsigned)ss[0];
        b[6] = (unsigned)ss[1];
    }
}
