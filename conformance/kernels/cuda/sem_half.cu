// float32 <-> float16 conversion, which every dialect has without a float16 type (GLSL packHalf2x16, WGSL
// pack2x16float, OpenCL vstore_half, PTX cvt): out[2i] = the float16 bits of x[i], out[2i+1] = the float32 bits
// of the float16 in h[i]'s low 16 bits, for i < n (SPEC.md, SEM-42).
extern "C" __global__ void sem_half(const float* x, const unsigned* h, unsigned* out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned short bits, in = (unsigned short)h[i];
        float widened;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(x[i]));
        asm("cvt.f32.f16 %0, %1;" : "=f"(widened) : "h"(in));
        out[2 * i] = bits;
        out[2 * i + 1] = __float_as_uint(widened);
    }
}
