// Does not compile: test_compile_error_carries_log expects the compiler's log to name undefined_thing.
__kernel void broken(void) { uint x = undefined_thing; }
