__kernel void pack_args(__global uint* out_u, uint s0, float s1, int s2, __global float* out_f, uint s3) {
    if (get_global_id(0) == 0 && get_global_id(1) == 0 && get_global_id(2) == 0) {
        out_u[0] = s0;
        out_u[1] = (uint)s2;
        out_u[2] = s3;
        out_f[0] = s1;
    }
}
