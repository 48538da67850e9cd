extern "C" __global__ void block_ids(unsigned* out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (blockIdx.x << 16) | threadIdx.x;
}
