// Every work-item i < n adds 1 to counter[0] and keeps the value it saw: olds is then a permutation of 0..n-1.
__kernel void sem_atomic(__global uint* counter, __global uint* olds, uint n) {
    uint i = get_global_id(0);
    if (i < n) olds[i] = atomic_add(&counter[0], 1u);
}
