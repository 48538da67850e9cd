override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
// Subgroup (warp) operations in uniform control flow (needs kernel.subgroups): for every thread of the grid,
// with v = x[i] (0 for i >= n), out[5i..5i+4] = the sum of v over its subgroup, the index in its block of the
// subgroup's first invocation (broadcast), the subgroup size, its index in the subgroup and the inclusive
// prefix sum of v over the subgroup's invocations up to its own index, for i < n (SPEC.md, SEM-46).
// No `enable subgroups;`: wgpu-native 29's naga refuses it ("not yet supported") and takes the subgroup
// builtins once the device has the "subgroup" feature; a naga that requires the directive needs it here.
struct Args { n: u32 }
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<uniform> args: Args;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn sem_subgroup(@builtin(global_invocation_id) g: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>,
                @builtin(subgroup_size) size: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let i = g.x;
    var v = 0u;
    if (i < args.n) { v = x[i]; }
    let sum = subgroupAdd(v);
    let first = subgroupBroadcastFirst(l.x);
    let prefix = subgroupInclusiveAdd(v);
    if (i < args.n) {
        out[5u * i] = sum;
        out[5u * i + 1u] = first;
        out[5u * i + 2u] = size;
        out[5u * i + 3u] = lane;
        out[5u * i + 4u] = prefix;
    }
}
