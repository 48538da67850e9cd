// float32 <-> float16 conversion, which every dialect has without a float16 type (GLSL packHalf2x16, WGSL
// pack2x16float, OpenCL vstore_half, PTX cvt): out[2i] = the float16 bits of x[i], out[2i+1] = the float32 bits
// of the float16 in h[i]'s low 16 bits, for i < n (SPEC.md, SEM-42).
__kernel void sem_half(__global const float* x, __global const uint* h, __global uint* out, uint n) {
    uint i = get_global_id(0);
    if (i < n) {
        ushort bits, in = (ushort)h[i];
        vstore_half_rte(x[i], 0, (__private half*)&bits);
        out[2 * i] = bits;
        out[2 * i + 1] = as_uint(vload_half(0, (__private const half*)&in));
    }
}
