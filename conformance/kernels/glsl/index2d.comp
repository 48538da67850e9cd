#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// out[y*width + x] = (y << 16) | x for x < width, y < height
layout(set = 0, binding = 0) writeonly buffer Out { uint data[]; } out_;
layout(push_constant) uniform Args { uint width; uint height; } args;

void main() {
    uint x = gl_GlobalInvocationID.x, y = gl_GlobalInvocationID.y;
    if (x < args.width && y < args.height) out_.data[y * args.width + x] = (y << 16) | x;
}
