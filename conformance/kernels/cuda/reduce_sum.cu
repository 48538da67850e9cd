// Shared-memory tree reduction; the block size is a power of two <= 256.
extern "C" __global__ void reduce_sum(const float* x, float* partial, unsigned n) {
    __shared__ float tile[256];
    unsigned t = threadIdx.x;
    unsigned i = blockIdx.x * blockDim.x + t;
    tile[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (t < stride) tile[t] += tile[t + stride];
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x] = tile[0];
}
