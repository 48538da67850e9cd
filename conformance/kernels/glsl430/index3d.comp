#version 430
// out[(z*ny + y)*nx + x] = x | (y << 10) | (z << 20) for (x, y, z) < (nx, ny, nz)
layout(std430, binding = 0) writeonly buffer Out { uint data[]; } out_;
layout(std140, binding = 0) uniform Args { uint nx; uint ny; uint nz; } args;

void main() {
    uvec3 g = gl_GlobalInvocationID;
    if (g.x < args.nx && g.y < args.ny && g.z < args.nz)
        out_.data[(g.z * args.ny + g.y) * args.nx + g.x] = g.x | (g.y << 10) | (g.z << 20);
}
