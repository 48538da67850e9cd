// Every thread i < n adds 1 to counter[0] and keeps the value it saw: olds is then a permutation of 0..n-1.
extern "C" __global__ void sem_atomic(unsigned* counter, unsigned* olds, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) olds[i] = atomicAdd(&counter[0], 1u);
}
