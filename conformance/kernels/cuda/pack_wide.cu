extern "C" __global__ void pack_wide(unsigned* out, unsigned s0, unsigned long long a, long long b, unsigned s1) {
    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 &&
        threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        out[0] = s0;
        out[1] = (unsigned)a;
        out[2] = (unsigned)(a >> 32);
        out[3] = (unsigned)b;
        out[4] = (unsigned)((unsigned long long)b >> 32);
        out[5] = s1;
    }
}
