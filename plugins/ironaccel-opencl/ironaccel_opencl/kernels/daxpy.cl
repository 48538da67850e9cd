#pragma OPENCL EXTENSION cl_khr_fp64 : enable
__kernel void daxpy(__global const double* x, __global double* y, double a, uint n) {
    uint i = get_global_id(0);
    if (i < n) y[i] = a * x[i] + y[i];
}
