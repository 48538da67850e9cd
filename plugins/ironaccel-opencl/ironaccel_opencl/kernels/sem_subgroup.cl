// Subgroup (warp) operations in uniform control flow (needs kernel.subgroups, which this plugin does not claim
// yet: the kernel is here for devices with cl_khr_subgroups, checked by compilation only): for every thread of
// the grid, with v = x[i] (0 for i >= n), out[5i..5i+4] = the sum of v over its subgroup, the index in its
// block of the subgroup's first invocation (broadcast), the subgroup size, its index in the subgroup and the
// inclusive prefix sum of v over the subgroup's invocations up to its own index, for i < n (SPEC.md, SEM-46).
#pragma OPENCL EXTENSION cl_khr_subgroups : enable

__kernel void sem_subgroup(__global const uint* x, __global uint* out, uint n) {
    uint i = get_global_id(0);
    uint v = i < n ? x[i] : 0u;
    uint sum = sub_group_reduce_add(v);
    uint first = sub_group_broadcast((uint)get_local_id(0), 0);
    uint prefix = sub_group_scan_inclusive_add(v);
    if (i < n) {
        out[5 * i] = sum;
        out[5 * i + 1] = first;
        out[5 * i + 2] = get_max_sub_group_size();  // the launch's size, as GLSL's gl_SubgroupSize
        out[5 * i + 3] = get_sub_group_local_id();
        out[5 * i + 4] = prefix;
    }
}
