extern "C" __global__ void atomic_add_f32(const float* x, float* out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&out[0], x[i]);
}
