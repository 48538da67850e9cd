// out[i] = 0xDEADBEEF for every i < n, with no bounds check against the buffer: a launch with n past the
// buffer's end writes out of bounds (SPEC.md, ROBUST-1).
extern "C" __global__ void oob_write(unsigned* out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 0xDEADBEEFu;
}
