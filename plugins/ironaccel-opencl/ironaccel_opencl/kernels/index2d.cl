__kernel void index2d(__global uint* out, uint width, uint height) {
    uint x = get_global_id(0);
    uint y = get_global_id(1);
    if (x < width && y < height) out[y * width + x] = (y << 16) | x;
}
