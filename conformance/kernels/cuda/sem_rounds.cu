// Barriers in a loop: `rounds` times, a shared-memory tree reduction of the block's values, then each
// value becomes v*3 + total + round (u32). Every thread of the block takes part (values of i >= n start
// at 0); out[i] = the final value for i < n. The block size is a power of two <= 256.
extern "C" __global__ void sem_rounds(const unsigned* x, unsigned* out, unsigned rounds, unsigned n) {
    __shared__ unsigned vals[256];
    __shared__ unsigned scratch[256];
    unsigned t = threadIdx.x;
    unsigned i = blockIdx.x * blockDim.x + t;
    vals[t] = i < n ? x[i] : 0u;
    for (unsigned r = 0; r < rounds; r++) {
        scratch[t] = vals[t];
        __syncthreads();
        for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
            if (t < stride) scratch[t] += scratch[t + stride];
            __syncthreads();
        }
        unsigned total = scratch[0];
        __syncthreads();
        vals[t] = vals[t] * 3u + total + r;
    }
    if (i < n) out[i] = vals[t];
}
