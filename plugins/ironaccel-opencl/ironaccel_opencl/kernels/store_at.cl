// thread 0 only: out[index] = value - a word anywhere in a buffer (MEM-51: the last of max_alloc bytes)
__kernel void store_at(__global uint* out, uint index, uint value) {
    if (get_global_id(0) == 0 && get_global_id(1) == 0 && get_global_id(2) == 0) out[index] = value;
}
