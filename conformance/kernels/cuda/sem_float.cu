// Float semantics: inf and NaN through add and mul (out[2i] = a+b, out[2i+1] = a*b), and float -> int
// conversion of in-range values, truncating toward zero (conv[i] = (int)c[i]) (SPEC.md, SEM-4, SEM-5).
extern "C" __global__ void sem_float(const float* a, const float* b, float* out, const float* c, unsigned* conv,
                                     unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[2 * i] = a[i] + b[i];
        out[2 * i + 1] = a[i] * b[i];
        conv[i] = (unsigned)(int)c[i];
    }
}
