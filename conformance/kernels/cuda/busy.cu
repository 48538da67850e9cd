// Each thread runs an iters-step LCG from its index: a kernel that takes a while.
extern "C" __global__ void busy(unsigned* out, unsigned iters, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned v = i;
        for (unsigned k = 0; k < iters; k++) v = v * 1664525u + 1013904223u;
        out[i] = v;
    }
}
