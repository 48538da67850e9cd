#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
// Every thread i < n adds 1 to counter[0] and keeps the value it saw: olds is then a permutation of 0..n-1.
layout(set = 0, binding = 0) buffer Counter { uint data[]; } counter;
layout(set = 0, binding = 1) writeonly buffer Olds { uint data[]; } olds;
layout(push_constant) uniform Args { uint n; } args;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < args.n) olds.data[i] = atomicAdd(counter.data[0], 1u);
}
