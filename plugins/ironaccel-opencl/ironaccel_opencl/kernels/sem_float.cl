// Float semantics: inf and NaN through add and mul (out[2i] = a+b, out[2i+1] = a*b), and float -> int
// conversion of in-range values, truncating toward zero (conv[i] = (int)c[i]) (SPEC.md, SEM-4, SEM-5).
__kernel void sem_float(__global const float* a, __global const float* b, __global float* out,
                        __global const float* c, __global uint* conv, uint n) {
    uint i = get_global_id(0);
    if (i < n) {
        out[2 * i] = a[i] + b[i];
        out[2 * i + 1] = a[i] * b[i];
        conv[i] = as_uint((int)c[i]);
    }
}
