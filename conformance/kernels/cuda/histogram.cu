// 64 bins: a per-block histogram in shared memory, then one global atomic add per non-empty bin.
extern "C" __global__ void histogram(const unsigned* x, unsigned* bins, unsigned n) {
    __shared__ unsigned local_bins[64];
    for (unsigned b = threadIdx.x; b < 64; b += blockDim.x) local_bins[b] = 0;
    __syncthreads();
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&local_bins[x[i] % 64], 1u);
    __syncthreads();
    for (unsigned b = threadIdx.x; b < 64; b += blockDim.x) {
        unsigned c = local_bins[b];
        if (c > 0) atomicAdd(&bins[b], c);
    }
}
