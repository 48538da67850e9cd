__kernel void index3d(__global uint* out, uint nx, uint ny, uint nz) {
    uint x = get_global_id(0);
    uint y = get_global_id(1);
    uint z = get_global_id(2);
    if (x < nx && y < ny && z < nz) out[(z * ny + y) * nx + x] = x | (y << 10) | (z << 20);
}
