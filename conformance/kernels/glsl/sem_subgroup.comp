#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_ballot : require
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// Subgroup (warp) operations in uniform control flow (needs kernel.subgroups): for every thread of the grid,
// with v = x[i] (0 for i >= n), out[5i..5i+4] = the sum of v over its subgroup, the index in its block of the
// subgroup's first invocation (broadcast), the subgroup size, its index in the subgroup and the inclusive
// prefix sum of v over the subgroup's invocations up to its own index, for i < n (SPEC.md, SEM-46).
layout(set = 0, binding = 0) readonly buffer X { uint data[]; } x;
layout(set = 0, binding = 1) writeonly buffer Out { uint data[]; } out_;
layout(push_constant) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    uint v = i < args.n ? x.data[i] : 0u;
    uint sum = subgroupAdd(v);
    uint first = subgroupBroadcastFirst(gl_LocalInvocationID.x);
    uint prefix = subgroupInclusiveAdd(v);
    if (i < args.n) {
        out_.data[5u * i] = sum;
        out_.data[5u * i + 1u] = first;
        out_.data[5u * i + 2u] = gl_SubgroupSize;
        out_.data[5u * i + 3u] = gl_SubgroupInvocationID;
        out_.data[5u * i + 4u] = prefix;
    }
}
