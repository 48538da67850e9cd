__kernel void grid_dims(__global uint* out) {
    if (get_local_id(0) | get_local_id(1) | get_local_id(2)) return;
    uint x = get_group_id(0), y = get_group_id(1), z = get_group_id(2);
    uint nx = get_num_groups(0), ny = get_num_groups(1), nz = get_num_groups(2);
    if ((x | y | z) == 0) { out[0] = nx; out[1] = ny; out[2] = nz; }
    if (x == nx - 1 && y == ny - 1 && z == nz - 1) { out[3] = nx; out[4] = ny; out[5] = nz; }
}
