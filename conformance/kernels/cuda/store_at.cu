// thread 0 only: out[index] = value - a word anywhere in a buffer (MEM-51: the last of max_alloc bytes)
extern "C" __global__ void store_at(unsigned* out, unsigned index, unsigned value) {
    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0)
        out[index] = value;
}
