override BLOCK_X: u32 = 64;
override BLOCK_Y: u32 = 1;
override BLOCK_Z: u32 = 1;
@group(0) @binding(0) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn grid_dims(@builtin(num_workgroups) n: vec3<u32>, @builtin(workgroup_id) b: vec3<u32>,
             @builtin(local_invocation_id) t: vec3<u32>) {
    if ((t.x | t.y | t.z) != 0u) { return; }
    if ((b.x | b.y | b.z) == 0u) { out[0] = n.x; out[1] = n.y; out[2] = n.z; }
    if (all(b == n - vec3<u32>(1u))) { out[3] = n.x; out[4] = n.y; out[5] = n.z; }
}
