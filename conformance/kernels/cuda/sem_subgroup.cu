// Subgroup (warp) operations in uniform control flow (needs kernel.subgroups): for every thread of the grid,
// with v = x[i] (0 for i >= n), out[5i..5i+4] = the sum of v over its subgroup, the index in its block of the
// subgroup's first invocation (broadcast), the subgroup size, its index in the subgroup and the inclusive
// prefix sum of v over the subgroup's invocations up to its own index, for i < n (SPEC.md, SEM-46).
// The warp's lanes are those its (1-D) block has; the sum shuffles each lane's value in turn, so a partial
// warp is summed as well, on any architecture; the prefix sum shifts values up by 1, 2, 4, 8 and 16 lanes.
extern "C" __global__ void sem_subgroup(const unsigned* x, unsigned* out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned v = i < n ? x[i] : 0u;
    unsigned lanes = min(blockDim.x - threadIdx.x / 32 * 32, 32u);
    unsigned active = lanes == 32 ? 0xFFFFFFFFu : (1u << lanes) - 1, sum = 0;
    for (int lane = 0; lane < 32; lane++)
        if (active >> lane & 1u) sum += __shfl_sync(active, v, lane);
    unsigned first = __shfl_sync(active, threadIdx.x, __ffs(active) - 1);
    unsigned lane = threadIdx.x % 32, prefix = v;
    for (unsigned delta = 1; delta < 32; delta *= 2) {
        unsigned below = __shfl_up_sync(active, prefix, delta);
        if (lane >= delta) prefix += below;
    }
    if (i < n) {
        out[5 * i] = sum;
        out[5 * i + 1] = first;
        out[5 * i + 2] = warpSize;
        out[5 * i + 3] = lane;
        out[5 * i + 4] = prefix;
    }
}
