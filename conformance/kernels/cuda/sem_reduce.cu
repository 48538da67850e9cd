// A block-wide reduction for any block size <= 256, a power of two or not: the sum (u32, wrapping), minimum and
// maximum of the block's x[i] (i < n; the others add 0, and do not count for min and max), pairing t with
// t + s for s = 1, 2, 4, ... while t + s < block size. partial[3*block + 0..2] = sum, min, max; every thread
// i < n then reads the sum after the last barrier: seen[i] = sum (SPEC.md, SEM-43).
extern "C" __global__ void sem_reduce(const unsigned* x, unsigned* partial, unsigned* seen, unsigned n) {
    __shared__ unsigned sums[256], lows[256], highs[256];
    unsigned t = threadIdx.x, size = blockDim.x;
    unsigned i = blockIdx.x * size + t;
    sums[t] = i < n ? x[i] : 0u;
    lows[t] = i < n ? x[i] : 0xFFFFFFFFu;
    highs[t] = i < n ? x[i] : 0u;
    __syncthreads();
    for (unsigned s = 1; s < size; s *= 2) {
        if ((t & (2 * s - 1)) == 0 && t + s < size) {
            sums[t] += sums[t + s];
            lows[t] = umin(lows[t], lows[t + s]);
            highs[t] = umax(highs[t], highs[t + s]);
        }
        __syncthreads();
    }
    if (t == 0) {
        partial[3 * blockIdx.x] = sums[0];
        partial[3 * blockIdx.x + 1] = lows[0];
        partial[3 * blockIdx.x + 2] = highs[0];
    }
    if (i < n) seen[i] = sums[0];
}
