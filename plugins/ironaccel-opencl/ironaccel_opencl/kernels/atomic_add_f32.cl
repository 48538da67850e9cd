// OpenCL C 1.2 has no float atomic add: a compare-and-swap loop on the float's bits is one.
__kernel void atomic_add_f32(__global const float* x, __global float* out, uint n) {
    uint i = get_global_id(0);
    if (i < n) {
        volatile __global uint* target = (volatile __global uint*)out;
        uint seen = *target, expected;
        do {
            expected = seen;
            seen = atomic_cmpxchg(target, expected, as_uint(as_float(expected) + x[i]));
        } while (seen != expected);
    }
}
