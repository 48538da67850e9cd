"""Calls the fake runs beyond a fixed call tree: recursion, calls through function pointers (.callprototype),
and device malloc/free (numba's runtime, NRT, needs all three), compiled by NVRTC and checked against
Python."""

import numpy as np
import pytest

RECURSION = r'''
__device__ __noinline__ long long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__device__ __noinline__ int is_odd(int n);
__device__ __noinline__ int is_even(int n) { return n == 0 ? 1 : is_odd(n - 1); }
__device__ __noinline__ int is_odd(int n) { return n == 0 ? 0 : is_even(n - 1); }
__device__ __noinline__ int depth(int n) {  /* the volatile read after the call keeps it a real recursion */
    volatile int here = n;
    if (n == 0) return 0;
    int below = depth(n - 1);
    return below + here - n + 1;
}
extern "C" __global__ void recurse(long long* fibs, int* parity, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { fibs[i] = fib((int)i % 16); parity[i] = is_even((int)i % 20); }
}
extern "C" __global__ void deep(int* out, int n) { out[threadIdx.x] = depth(n); }
'''


def _fib(n):
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


def test_recursive_and_mutually_recursive_device_functions(cuda):
    module = cuda.module(RECURSION)
    f = cuda.ok(cuda.d.cuModuleGetFunction(module, b"recurse"))
    n = 70
    fibs, parity = np.zeros(n, np.int64), np.zeros(n, np.int32)
    dfibs, dparity = cuda.poisoned(fibs), cuda.poisoned(parity)
    cuda.launch(f, (2,), (40,), dfibs, dparity, np.uint32(n))
    assert cuda.download(dfibs, fibs).tolist() == [_fib(i % 16) for i in range(n)]
    assert cuda.download(dparity, parity).tolist() == [int(i % 20 % 2 == 0) for i in range(n)]


def test_recursion_within_the_call_depth_runs_and_deeper_ends_with_a_stack_error(cuda):
    d = cuda.d
    module = cuda.module(RECURSION)
    f = cuda.ok(d.cuModuleGetFunction(module, b"deep"))
    out = np.zeros(32, np.int32)
    dout = cuda.poisoned(out)
    cuda.launch(f, (1,), (32,), dout, np.int32(30))
    assert cuda.download(dout, out).tolist() == [30] * 32
    ptrs, _ = cuda.args(dout, np.int32(1000))
    cuda.ok(d.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, 0, ptrs.ctypes.data, 0))
    assert cuda.err(d.cuCtxSynchronize()) == d.CUresult.CUDA_ERROR_HARDWARE_STACK_ERROR


POINTERS = r'''
typedef int (*op_t)(int, int);
__device__ __noinline__ int add(int a, int b) { return a + b; }
__device__ __noinline__ int mul(int a, int b) { return a * b; }
__device__ __noinline__ int sub(int a, int b) { return a - b; }
__device__ op_t table[3] = {add, mul, sub};
extern "C" __global__ void apply(const int* which, const int* a, const int* b, int* out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { op_t f = table[which[i]]; out[i] = f(a[i], b[i]); }
}
extern "C" __global__ void call_forged(unsigned long long bits, int* out) {
    op_t f; memcpy(&f, &bits, sizeof f);
    out[0] = f(1, 2);
}
'''


def test_calls_through_function_pointers_reach_the_function_stored(cuda, rng):
    module = cuda.module(POINTERS)
    f = cuda.ok(cuda.d.cuModuleGetFunction(module, b"apply"))
    n = 200
    which = rng.integers(0, 3, n).astype(np.int32)
    a, b = rng.integers(-100, 100, n).astype(np.int32), rng.integers(-100, 100, n).astype(np.int32)
    out = np.zeros(n, np.int32)
    dout = cuda.poisoned(out)
    cuda.launch(f, (4,), (64,), cuda.upload(which), cuda.upload(a), cuda.upload(b), dout, np.uint32(n))
    want = np.select([which == 0, which == 1, which == 2], [a + b, a * b, a - b])
    assert np.array_equal(cuda.download(dout, out), want)


def test_a_call_through_a_pointer_that_is_no_function_ends_the_launch(cuda):
    d = cuda.d
    module = cuda.module(POINTERS)
    f = cuda.ok(d.cuModuleGetFunction(module, b"call_forged"))
    out = np.zeros(1, np.int32)
    ptrs, _ = cuda.args(np.uint64(0x1234), cuda.poisoned(out))
    cuda.ok(d.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, ptrs.ctypes.data, 0))
    assert cuda.err(d.cuCtxSynchronize()) == d.CUresult.CUDA_ERROR_INVALID_PC


HEAP = r'''
extern "C" __global__ void per_thread_blocks(unsigned long long* where, int* sums, int n) {
    unsigned t = threadIdx.x;
    int* p = (int*)malloc(n * sizeof(int));
    where[t] = (unsigned long long)p;
    if (!p) return;
    for (int i = 0; i < n; i++) p[i] = (int)t + i;
    __syncthreads();  /* every thread's block is live at once */
    int s = 0;
    for (int i = 0; i < n; i++) s += p[i];
    sums[t] = s;
    free(p);
}
extern "C" __global__ void too_big(unsigned long long* where) { where[0] = (unsigned long long)malloc(1ull << 40); }
extern "C" __global__ void free_twice(int* out) { void* p = malloc(64); free(p); free(p); out[0] = 1; }
extern "C" __global__ void free_inside(unsigned long long* where) {
    char* p = (char*)malloc(64);
    where[0] = (unsigned long long)malloc(64);  /* live after p: the free's search has a block on each side */
    free(p + 16);
}
'''


def test_device_malloc_gives_distinct_aligned_blocks_that_free_returns(cuda):
    module = cuda.module(HEAP)
    f = cuda.ok(cuda.d.cuModuleGetFunction(module, b"per_thread_blocks"))
    threads, n = 64, 100
    where, sums = np.zeros(threads, np.uint64), np.zeros(threads, np.int32)
    dwhere, dsums = cuda.poisoned(where), cuda.poisoned(sums)
    for _ in range(3):  # freed blocks are reused: many launches never run out
        cuda.launch(f, (1,), (threads,), dwhere, dsums, np.int32(n))
    got = cuda.download(dwhere, where)
    assert (got != 0).all() and (got % 16 == 0).all()
    starts = np.sort(got.astype(np.int64))
    assert (np.diff(starts) >= n * 4).all()  # no two threads' blocks overlap
    assert cuda.download(dsums, sums).tolist() == [n * t + n * (n - 1) // 2 for t in range(threads)]


def test_device_malloc_past_the_heap_returns_null_and_a_double_free_ends_the_launch(cuda):
    d = cuda.d
    module = cuda.module(HEAP)
    where = np.zeros(1, np.uint64)
    dwhere = cuda.poisoned(where)
    cuda.launch(cuda.ok(d.cuModuleGetFunction(module, b"too_big")), (1,), (1,), dwhere)
    assert cuda.download(dwhere, where).tolist() == [0]
    ptrs, _ = cuda.args(cuda.poisoned(np.zeros(1, np.int32)))
    cuda.ok(d.cuLaunchKernel(cuda.ok(d.cuModuleGetFunction(module, b"free_twice")), 1, 1, 1, 1, 1, 1, 0, 0,
                             ptrs.ctypes.data, 0))
    assert cuda.err(d.cuCtxSynchronize()) == d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS



@pytest.mark.timeout(60, method="thread")  # a free whose search never ends hangs the launch
def test_a_device_free_of_a_pointer_into_a_block_ends_the_launch_with_a_report_that_says_so(cuda):
    d = cuda.d
    module = cuda.module(HEAP)
    ptrs, _ = cuda.args(cuda.poisoned(np.zeros(1, np.uint64)))
    cuda.ok(d.cuLaunchKernel(cuda.ok(d.cuModuleGetFunction(module, b"free_inside")), 1, 1, 1, 1, 1, 1, 0, 0,
                             ptrs.ctypes.data, 0))
    assert cuda.err(d.cuCtxSynchronize()) == d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    report = cuda.control.last_report()
    assert report.startswith("memcheck: invalid free (not a block the device heap's malloc handed out and kept) "
                             "at 0x"), report
    assert "address is " in report and " bytes into it" in report, report

PRINTF = r'''
extern "C" __global__ void say(int* counts, const char* word) {
    unsigned t = threadIdx.x;
    long long big = -5000000000LL * (long long)(t + 1);
    counts[t] = printf("t=%u i=%d neg=%+05d big=%lld hex=%#x short=%hd char=%c f=%.3f e=%10.2e s=%s|%-6s| 100%%\n",
                       t, (int)t * 7, -(int)t, big, 255u + t, (short)(70000 + t), 'a' + (int)t, 1.5f * t, 12345.678 * t,
                       word, word);
}
extern "C" __global__ void plain() { printf("no arguments\n"); }
'''


def test_device_printf_writes_each_threads_line_to_stdout_when_the_launch_ends(cuda, capfd):
    d = cuda.d
    module = cuda.module(PRINTF)
    word = np.frombuffer(b"hey\0", np.uint8)
    counts = np.zeros(4, np.int32)
    dcounts = cuda.poisoned(counts)
    capfd.readouterr()
    cuda.launch(cuda.ok(d.cuModuleGetFunction(module, b"say")), (1,), (4,), dcounts, cuda.upload(word))
    cuda.launch(cuda.ok(d.cuModuleGetFunction(module, b"plain")), (1,), (2,))
    lines = capfd.readouterr().out.splitlines()
    want = ["t=%u i=%d neg=%+05d big=%d hex=%#x short=%d char=%c f=%.3f e=%10.2e s=%s|%-6s| 100%%"
            % (t, 7 * t, -t, -5000000000 * (t + 1), 255 + t, (70000 + t + 2 ** 15) % 2 ** 16 - 2 ** 15, chr(97 + t), 1.5 * t, 12345.678 * t,
               "hey", "hey") for t in range(4)]
    assert sorted(lines[:4]) == want and lines[4:] == ["no arguments"] * 2
    assert cuda.download(dcounts, counts).tolist() == [11] * 4  # printf returns the arguments it read
