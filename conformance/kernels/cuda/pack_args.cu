extern "C" __global__ void pack_args(unsigned* out_u, unsigned s0, float s1, int s2, float* out_f, unsigned s3) {
    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 &&
        threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        out_u[0] = s0;
        out_u[1] = (unsigned)s2;
        out_u[2] = s3;
        out_f[0] = s1;
    }
}
