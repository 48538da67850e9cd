// 64-bit integers loaded from and stored to memory (needs kernel.int64): out[6i..6i+5] = x + y, x - y, x * y
// (u64, wrapping), x << (y & 63), x >> (y & 63), min(i64(x), i64(y)) for x = a[i], y = b[i], i < n (SPEC.md,
// SEM-45).
extern "C" __global__ void sem_int64(const unsigned long long* a, const unsigned long long* b, unsigned long long* out,
                                     unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned long long x = a[i], y = b[i];
        unsigned long long* o = out + 6 * i;
        o[0] = x + y;
        o[1] = x - y;
        o[2] = x * y;
        o[3] = x << (y & 63u);
        o[4] = x >> (y & 63u);
        o[5] = (unsigned long long)min((long long)x, (long long)y);
    }
}
