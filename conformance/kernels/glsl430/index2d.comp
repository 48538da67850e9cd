#version 430
// out[y*width + x] = (y << 16) | x for x < width, y < height
layout(std430, binding = 0) writeonly buffer Out { uint data[]; } out_;
layout(std140, binding = 0) uniform Args { uint width; uint height; } args;

void main() {
    uint x = gl_GlobalInvocationID.x, y = gl_GlobalInvocationID.y;
    if (x < args.width && y < args.height) out_.data[y * args.width + x] = (y << 16) | x;
}
