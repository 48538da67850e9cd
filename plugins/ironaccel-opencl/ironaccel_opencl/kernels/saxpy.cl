__kernel void saxpy(__global const float* x, __global float* y, float a, uint n) {
    uint i = get_global_id(0);
    if (i < n) y[i] = a * x[i] + y[i];
}
