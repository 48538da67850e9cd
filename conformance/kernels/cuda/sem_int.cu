// 32-bit integer semantics every dialect defines: unsigned wrap-around, signed division and remainder
// truncated toward zero, shifts by 0..31. out[7*i + k] for i < n (SPEC.md, SEM-1..3).
extern "C" __global__ void sem_int(const unsigned* a, const unsigned* b, unsigned* out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned x = a[i], y = b[i];
        int sx = (int)x, sy = (int)y;  // the host never passes y == 0 or (INT_MIN, -1)
        unsigned* o = out + 7 * i;
        o[0] = x + y;
        o[1] = x - y;
        o[2] = x * y;
        o[3] = (unsigned)(sx / sy);
        o[4] = (unsigned)(sx % sy);
        o[5] = x << (y & 31u);
        o[6] = x >> (y & 31u);
    }
}
