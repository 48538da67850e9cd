"""Threads that wait for or contend with each other: mbarriers, atomics across the interpreter's workers, warp
match and activemask, and the device runtime's grid-wide sync."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from ironaccel import fakes


MBARRIER = r'''
__device__ unsigned long long arrive(unsigned bar, unsigned count)
{ unsigned long long state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1], %2;" : "=l"(state) : "r"(bar), "r"(count) : "memory");
  return state; }
__device__ unsigned long long arrive_drop(unsigned bar, unsigned count)
{ unsigned long long state;
  asm volatile("mbarrier.arrive_drop.shared::cta.b64 %0, [%1], %2;" : "=l"(state) : "r"(bar), "r"(count) : "memory");
  return state; }
__device__ unsigned try_wait(unsigned bar, unsigned long long state)
{ unsigned done;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(done) : "r"(bar), "l"(state) : "memory");
  return done; }
__device__ unsigned test_wait_parity(unsigned bar, unsigned parity)
{ unsigned done;
  asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  return done; }
__device__ unsigned init(unsigned long long* object, unsigned count)
{ unsigned bar = (unsigned)__cvta_generic_to_shared(object);
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
  return bar; }

/* Three rounds: each thread stores, arrives and waits (try_wait on its state), then reads what a thread of the
   other warp stored; a second arrival, waited for by parity, keeps the next round's stores after every read. */
extern "C" __global__ void rounds(const unsigned* in, unsigned* out)
{ __shared__ unsigned long long object;
  __shared__ unsigned data[64];
  unsigned t = threadIdx.x, bar = (unsigned)__cvta_generic_to_shared(&object);
  if (t == 0) init(&object, blockDim.x);
  __syncthreads();
  for (unsigned round = 0; round < 3; round++) {
    data[t] = in[t] * (round + 1);
    unsigned long long state = arrive(bar, 1);
    while (!try_wait(bar, state)) {}
    out[round * 64 + t] = data[(t + 32) % 64];
    arrive(bar, 1);
    while (!test_wait_parity(bar, 1)) {}
  } }

/* One thread: counts, arrive_drop, and waits that do not wait (test_wait of an incomplete phase). */
extern "C" __global__ void counts(unsigned* out)
{ __shared__ unsigned long long object;
  unsigned bar = init(&object, 3);
  unsigned long long a = arrive(bar, 2);
  out[0] = test_wait_parity(bar, 0);
  arrive_drop(bar, 1);                     /* the third arrival completes phase 0; each phase now expects 2 */
  out[1] = test_wait_parity(bar, 0), out[2] = try_wait(bar, a);
  unsigned long long b = arrive(bar, 1);
  out[3] = try_wait(bar, b);
  arrive(bar, 1);
  out[4] = try_wait(bar, b), out[5] = test_wait_parity(bar, 1); }
'''


def test_mbarrier_rounds_between_warps(cuda, rng):
    """mbarrier.init/arrive/try_wait/test_wait.parity (cuda::barrier's instructions in shared memory: numba's
    test_external_cooperative_func): every wait ends once the block has arrived, never before."""
    module = cuda.module(MBARRIER)
    x = rng.integers(0, 1 << 20, 64).astype(np.uint32)
    out = cuda.poisoned(np.zeros(3 * 64, np.uint32))
    cuda.launch(cuda.ok(cuda.d.cuModuleGetFunction(module, b"rounds")), (2,), (64,), cuda.upload(x), out)
    want = np.concatenate([np.roll(x, -32) * r for r in (1, 2, 3)])
    assert np.array_equal(cuda.download(out, np.zeros(3 * 64, np.uint32)), want)
    flags = cuda.poisoned(np.zeros(6, np.uint32))
    cuda.launch(cuda.ok(cuda.d.cuModuleGetFunction(module, b"counts")), (1,), (1,), flags)
    assert cuda.download(flags, np.zeros(6, np.uint32)).tolist() == [0, 1, 1, 0, 1, 1]


CONTEND = r"""
extern "C" __global__ void contend(unsigned* counter, float* fsum, int* top, unsigned* wrap, unsigned* lock,
                                   unsigned* guarded) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int k = 0; k < 32; k++) atomicAdd(counter, 1u);  // long enough for workers to overlap on a busy machine
    atomicAdd(fsum, 1.0f);
    atomicMax(top, (int)(i * 2654435761u % 1000003u));
    atomicInc(wrap, 999u);
    if (threadIdx.x == 0) {  // a lock across blocks, so across the interpreter's workers
        while (atomicCAS(lock, 0u, 1u) != 0u) {}
        __threadfence();
        volatile unsigned* g = guarded;
        *g = *g + 1;  // not atomic: only the lock keeps other blocks out
        __threadfence();
        atomicExch(lock, 0u);
    }
}"""


def test_atomics_stay_atomic_across_many_workers():
    code = textwrap.dedent(f"""
        import sys
        import numpy as np
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from cuda.bindings import driver
        from ironaccel import fakes
        assert driver.cuInit(0)[0] == 0
        from conftest import Cuda
        cuda = Cuda(fakes.Control())
        f = cuda.kernel({CONTEND!r}, "contend")
        bufs = [cuda.upload(np.zeros(1, t)) for t in (np.uint32, np.float32, np.int32, np.uint32, np.uint32, np.uint32)]
        cuda.launch(f, (2048,), (128,), *bufs)
        print(*(cuda.download(b, np.zeros(1, t))[0] for b, t in zip(bufs, (np.uint32, np.float32, np.int32, np.uint32,
                                                                          np.uint32, np.uint32))))
    """)
    env = fakes.child_env()
    env["IRONACCEL_FAKE_CUDA_THREADS"] = "8"  # more workers than cores: blocks interleave on each core
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    n = 2048 * 128
    i = np.arange(n, dtype=np.uint64)
    top = int((i * 2654435761 % (1 << 32) % 1000003).max())
    assert r.stdout.split() == [str(32 * n), f"{float(n)}", str(top), str(n % 1000), "0", "2048"], r.stdout


def test_warp_match_any_and_all(cuda, rng):
    """__match_any_sync: the lanes of the mask holding this lane's value; __match_all_sync: the mask when every
    lane of it holds the same value (and pred 1), else 0 (pred 0); 32- and 64-bit values."""
    f = cuda.kernel(r'''
    extern "C" __global__ void matches(const unsigned* x, const unsigned long long* y, unsigned* out) {
        unsigned i = threadIdx.x, mask = 0x7fffffffu;  // lane 31 is not a member
        if ((i & 31) == 31) return;
        int pred32, pred64;
        out[i] = __match_any_sync(mask, x[i]);
        out[64 + i] = __match_any_sync(mask, y[i]);
        out[128 + i] = __match_all_sync(mask, x[i] / 1000u, &pred32);
        out[192 + i] = __match_all_sync(mask, y[i], &pred64);
        out[256 + i] = pred32 | (pred64 << 1);
    }''', "matches")
    x = rng.integers(0, 4, 64).astype(np.uint32)
    y = (rng.integers(0, 3, 64).astype(np.uint64) << np.uint64(40)) | x.astype(np.uint64)  # high bits count
    y[32:] = 7 << 40  # the second warp: all equal
    out = cuda.poisoned(np.zeros(320, np.uint32))
    cuda.launch(f, (1,), (64,), cuda.upload(x), cuda.upload(y), out)
    got = cuda.download(out, np.zeros(320, np.uint32)).reshape(5, 2, 32)[:, :, :31]
    mask = 0x7FFFFFFF
    for w in range(2):
        xs, ys = x[32 * w:32 * w + 31], y[32 * w:32 * w + 31]
        assert list(got[0, w]) == [sum(1 << j for j in range(31) if xs[j] == v) for v in xs]
        assert list(got[1, w]) == [sum(1 << j for j in range(31) if ys[j] == v) for v in ys]
        assert set(got[2, w]) == {mask}  # x / 1000 is 0 everywhere
        same64 = len(set(ys.tolist())) == 1
        assert set(got[3, w]) == {mask if same64 else 0}
        assert set(got[4, w]) == {1 | (same64 << 1)}


def test_activemask_is_the_lanes_that_reach_it_together(cuda):
    """numba-cuda's test_activemask: lanes that diverged to the other branch's __activemask are not in the mask
    (the H200 gives 0x55555555 to even lanes, 0xAAAAAAAA to odd ones); converged lanes, here past the branch,
    all are, except those that exited."""
    f = cuda.kernel(r'''
    extern "C" __global__ void masks(unsigned* out) {
        unsigned i = threadIdx.x;
        if (i % 2 == 0) out[i] = __activemask(); else out[i] = __activemask();
        if (i >= 28) return;
        out[32 + i] = __activemask();
    }''', "masks")
    out = cuda.poisoned(np.zeros(60, np.uint32))
    cuda.launch(f, (1,), (32,), out)
    got = cuda.download(out, np.zeros(60, np.uint32))
    assert list(got[:32]) == [0x55555555, 0xAAAAAAAA] * 16
    assert set(got[32:]) == {0x0FFFFFFF}


# numba-cuda's cg.this_grid().sync() calls the device runtime's cudaCGGetIntrinsicHandle/cudaCGSynchronize
# (libcudadevrt.a holds machine code only; the fake implements them). Each block writes its id, the grid
# synchronizes, and each block reads the next block's slot: on the H200, out2[b] = (b + 1) % nblocks for every
# block, which only a grid-wide barrier gives (without one, a block reads a slot not yet written).
GRID_SYNC = b"""
.version 8.0
.target sm_90
.address_size 64
.extern .func (.param .b32 func_retval0) cudaCGSynchronize(.param .b64 p0, .param .b32 p1);
.extern .func (.param .b64 func_retval0) cudaCGGetIntrinsicHandle(.param .b32 p0);
.visible .entry grid_sync(.param .u64 out, .param .u64 out2, .param .u64 status)
{
    .reg .pred %p<2>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [out2];
    ld.param.u64 %rd9, [status];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %nctaid.x;
    mov.u32 %r3, %tid.x;
    setp.ne.u32 %p1, %r3, 0;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd1, %rd3;
    @!%p1 st.global.u32 [%rd4], %r1;
    {
    .param .b32 param0;
    st.param.b32 [param0+0], 1;
    .param .b64 retval0;
    call.uni (retval0), cudaCGGetIntrinsicHandle, (param0);
    ld.param.b64 %rd5, [retval0+0];
    }
    {
    .param .b64 param0;
    st.param.b64 [param0+0], %rd5;
    .param .b32 param1;
    st.param.b32 [param1+0], 0;
    .param .b32 retval0;
    call.uni (retval0), cudaCGSynchronize, (param0, param1);
    ld.param.b32 %r4, [retval0+0];
    }
    add.u32 %r5, %r1, 1;
    rem.u32 %r5, %r5, %r2;
    mul.wide.u32 %rd6, %r5, 4;
    add.s64 %rd7, %rd1, %rd6;
    ld.global.u32 %r6, [%rd7];
    add.s64 %rd8, %rd2, %rd3;
    @!%p1 st.global.u32 [%rd8], %r6;
    add.s64 %rd10, %rd9, %rd3;
    @!%p1 st.global.u32 [%rd10], %r4;
    ret;
}
\0"""


def test_cooperative_grid_sync_of_the_device_runtime(cuda):
    d = cuda.d
    f = cuda.ok(d.cuModuleGetFunction(cuda.ok(d.cuModuleLoadData(GRID_SYNC)), b"grid_sync"))
    n = 12
    out, out2, status = (cuda.poisoned(np.zeros(n, np.uint32)) for _ in range(3))
    ptrs, boxes = cuda.args(out, out2, status)
    cuda.ok(d.cuLaunchCooperativeKernel(f, n, 1, 1, 64, 1, 1, 0, 0, ptrs.ctypes.data))
    cuda.ok(d.cuCtxSynchronize())
    assert list(cuda.download(out2, np.zeros(n, np.uint32))) == [(b + 1) % n for b in range(n)]
    assert not cuda.download(status, np.zeros(n, np.uint32)).any()  # cudaSuccess
    ptrs, boxes = cuda.args(out, out2, status)  # more blocks than can be resident at once
    assert cuda.err(d.cuLaunchKernel(f, 100000, 1, 1, 1, 1, 1, 0, 0, ptrs.ctypes.data, 0)) in (
        d.CUresult.CUDA_SUCCESS, d.CUresult.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)
    assert cuda.err(d.cuCtxSynchronize()) == d.CUresult.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE


# The C++ header's grid.sync() (cooperative_groups::this_grid().sync(), what CuPy's fused multi-reductions call)
# as NVRTC emits it: the grid workspace is %envreg1:%envreg2, 0 (trap) unless the launch is cooperative; thread 0
# of each block adds 1 to the workspace's barrier word (block (0,0,0) adds 0x80000001 - nblocks, so the top bit
# flips once every block has arrived) and spins on ld.acquire until it flips. Each block writes its slot, syncs,
# and reads the next block's: out2[b] = (b + 1) % nblocks only under a grid-wide barrier. `word` gets the barrier
# word after the sync (0x80000000 from a zeroed workspace), `env3` %envreg3 (0), `ws` the workspace address.
CG_GRID_SYNC = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry cg_grid_sync(.param .u64 out, .param .u64 out2, .param .u64 word, .param .u64 env3, .param .u64 ws)
{
    .reg .pred %p<4>;
    .reg .b32 %r<24>;
    .reg .b64 %rd<80>;
    ld.param.u64 %rd10, [out];
    ld.param.u64 %rd11, [out2];
    ld.param.u64 %rd12, [word];
    ld.param.u64 %rd13, [env3];
    ld.param.u64 %rd14, [ws];
    mov.u32 %r18, %envreg2;
    cvt.u64.u32 %rd77, %r18;
    mov.u32 %r19, %envreg1;
    cvt.u64.u32 %rd78, %r19;
    bfi.b64 %rd1, %rd78, %rd77, 32, 32;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %nctaid.x;
    mov.u32 %r3, %tid.x;
    setp.ne.u32 %p1, %r3, 0;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd10, %rd3;
    add.u32 %r4, %r1, 100;
    @!%p1 st.global.u32 [%rd4], %r4;
    setp.ne.s64 %p2, %rd1, 0;
    @%p2 bra OK;
    trap;
OK:
    barrier.sync 0;
    @%p1 bra ARRIVED;
    add.s64 %rd5, %rd1, 4;
    setp.eq.u32 %p3, %r1, 0;
    mov.u32 %r5, -2147483647;
    sub.s32 %r6, %r5, %r2;
    selp.b32 %r7, %r6, 1, %p3;
    atom.add.release.gpu.u32 %r8, [%rd5], %r7;
SPIN:
    ld.acquire.gpu.u32 %r9, [%rd5];
    xor.b32 %r10, %r9, %r8;
    setp.gt.s32 %p3, %r10, -1;
    @%p3 bra SPIN;
ARRIVED:
    barrier.sync 0;
    @%p1 bra DONE;
    add.u32 %r11, %r1, 1;
    rem.u32 %r11, %r11, %r2;
    mul.wide.u32 %rd6, %r11, 4;
    add.s64 %rd7, %rd10, %rd6;
    ld.global.u32 %r12, [%rd7];
    add.s64 %rd8, %rd11, %rd3;
    st.global.u32 [%rd8], %r12;
    ld.global.u32 %r13, [%rd1+4];
    add.s64 %rd8, %rd12, %rd3;
    st.global.u32 [%rd8], %r13;
    mov.u32 %r14, %envreg3;
    add.s64 %rd8, %rd13, %rd3;
    st.global.u32 [%rd8], %r14;
    mul.wide.u32 %rd9, %r1, 8;
    add.s64 %rd8, %rd14, %rd9;
    st.global.u64 [%rd8], %rd1;
DONE:
    ret;
}
\0"""


def _cg_buffers(cuda, n):
    bufs = [cuda.poisoned(np.zeros(n, np.uint32)) for _ in range(4)] + [cuda.poisoned(np.zeros(n, np.uint64))]
    return bufs, cuda.args(*bufs)


def _cg_check(cuda, bufs, n):
    out, out2, word, env3, ws = bufs
    assert list(cuda.download(out2, np.zeros(n, np.uint32))) == [100 + (b + 1) % n for b in range(n)]
    assert list(cuda.download(word, np.zeros(n, np.uint32))) == [0x80000000] * n  # from a zeroed workspace
    assert not cuda.download(env3, np.zeros(n, np.uint32)).any()
    addresses = set(cuda.download(ws, np.zeros(n, np.uint64)).tolist())
    assert len(addresses) == 1 and 0 not in addresses  # one workspace for the launch
    return addresses.pop()


def test_cooperative_launch_gives_the_cpp_grid_sync_its_workspace(cuda):
    d = cuda.d
    f = cuda.ok(d.cuModuleGetFunction(cuda.ok(d.cuModuleLoadData(CG_GRID_SYNC)), b"cg_grid_sync"))
    n = 8
    bufs, (ptrs, boxes) = _cg_buffers(cuda, n)
    before = cuda.control.live_allocations()
    cuda.ok(d.cuLaunchCooperativeKernel(f, n, 1, 1, 64, 1, 1, 0, 0, ptrs.ctypes.data))
    cuda.ok(d.cuCtxSynchronize())
    first = _cg_check(cuda, bufs, n)
    assert cuda.control.live_allocations() == before  # the workspace is freed with the launch
    cuda.ok(d.cuLaunchCooperativeKernel(f, n, 1, 1, 64, 1, 1, 0, 0, ptrs.ctypes.data))  # a fresh zeroed one
    cuda.ok(d.cuCtxSynchronize())
    assert _cg_check(cuda, bufs, n) != first  # addresses are never reused

    config = d.CUlaunchConfig()  # cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_COOPERATIVE is cooperative too
    config.gridDimX, config.gridDimY, config.gridDimZ = n, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = 64, 1, 1
    attr = d.CUlaunchAttribute()
    attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
    attr.value.cooperative = 1
    config.attrs, config.numAttrs = [attr], 1
    bufs, (ptrs, boxes) = _cg_buffers(cuda, n)
    cuda.ok(d.cuLaunchKernelEx(config, f, ptrs.ctypes.data, 0))
    cuda.ok(d.cuCtxSynchronize())
    _cg_check(cuda, bufs, n)

    s = cuda.ok(d.cuStreamCreate(0))  # a captured cooperative launch stays one in its graph
    bufs, (ptrs, boxes) = _cg_buffers(cuda, n)
    cuda.ok(d.cuStreamBeginCapture(s, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    cuda.ok(d.cuLaunchCooperativeKernel(f, n, 1, 1, 64, 1, 1, 0, s, ptrs.ctypes.data))
    graph = cuda.ok(d.cuStreamEndCapture(s))
    exe = cuda.ok(d.cuGraphInstantiate(graph, 0))
    for _ in range(2):
        cuda.ok(d.cuGraphLaunch(exe, s))
        cuda.ok(d.cuStreamSynchronize(s))
        _cg_check(cuda, bufs, n)
    nodes, count = cuda.ok(d.cuGraphGetNodes(graph, 1))
    bufs, (ptrs, boxes) = _cg_buffers(cuda, n)  # new arguments: the node stays cooperative
    p = d.CUDA_KERNEL_NODE_PARAMS()
    p.func = f
    p.gridDimX, p.gridDimY, p.gridDimZ = n, 1, 1
    p.blockDimX, p.blockDimY, p.blockDimZ = 64, 1, 1
    p.sharedMemBytes = 0
    p.kernelParams = ptrs.ctypes.data
    cuda.ok(d.cuGraphExecKernelNodeSetParams(exe, nodes[0], p))
    cuda.ok(d.cuGraphLaunch(exe, s))
    cuda.ok(d.cuStreamSynchronize(s))
    _cg_check(cuda, bufs, n)
    cuda.ok(d.cuGraphExecDestroy(exe))
    cuda.ok(d.cuGraphDestroy(graph))
    cuda.ok(d.cuStreamDestroy(s))

    sms = cuda.ok(d.cuDeviceGetAttribute(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0))
    per_sm = cuda.ok(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, 64, 0))  # more than fit at once
    assert cuda.err(d.cuLaunchCooperativeKernel(f, sms * per_sm + 1, 1, 1, 64, 1, 1, 0, 0, ptrs.ctypes.data)) == (
        d.CUresult.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)
    cuda.ok(d.cuCtxSynchronize())  # refused at the call, not sticky


def test_cpp_grid_sync_traps_without_a_cooperative_launch(cuda):
    d = cuda.d
    f = cuda.ok(d.cuModuleGetFunction(cuda.ok(d.cuModuleLoadData(CG_GRID_SYNC)), b"cg_grid_sync"))
    bufs, (ptrs, boxes) = _cg_buffers(cuda, 4)
    cuda.ok(d.cuLaunchKernel(f, 4, 1, 1, 64, 1, 1, 0, 0, ptrs.ctypes.data, 0))  # %envreg1:%envreg2 are 0
    assert cuda.err(d.cuCtxSynchronize()) == d.CUresult.CUDA_ERROR_LAUNCH_FAILED
    assert cuda.control.last_report().startswith("trap in kernel cg_grid_sync")


def test_cpp_grid_sync_traps_under_cuLaunchKernelEx_without_the_cooperative_attribute(cuda):
    d = cuda.d
    f = cuda.ok(d.cuModuleGetFunction(cuda.ok(d.cuModuleLoadData(CG_GRID_SYNC)), b"cg_grid_sync"))
    bufs, (ptrs, boxes) = _cg_buffers(cuda, 4)
    config = d.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = 4, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = 64, 1, 1
    attr = d.CUlaunchAttribute()
    attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
    attr.value.cooperative = 0
    config.attrs, config.numAttrs = [attr], 1
    cuda.ok(d.cuLaunchKernelEx(config, f, ptrs.ctypes.data, 0))
    assert cuda.err(d.cuCtxSynchronize()) == d.CUresult.CUDA_ERROR_LAUNCH_FAILED


# A fault in one block ends a cooperative launch whose other blocks spin at grid.sync() waiting for it.
CG_FAULT = CG_GRID_SYNC.replace(b"    setp.ne.s64 %p2, %rd1, 0;", b"""    setp.eq.u32 %p2, %r1, 3;
    @%p2 st.global.u32 [%rd14+-16], %r1;
    setp.ne.s64 %p2, %rd1, 0;""")


def test_a_fault_stops_the_blocks_spinning_at_the_cpp_grid_sync(cuda):
    d = cuda.d
    assert CG_FAULT != CG_GRID_SYNC
    f = cuda.ok(d.cuModuleGetFunction(cuda.ok(d.cuModuleLoadData(CG_FAULT)), b"cg_grid_sync"))
    bufs, (ptrs, boxes) = _cg_buffers(cuda, 8)
    cuda.ok(d.cuLaunchCooperativeKernel(f, 8, 1, 1, 64, 1, 1, 0, 0, ptrs.ctypes.data))
    assert cuda.err(d.cuCtxSynchronize()) == d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    assert "block (3,0,0)" in cuda.control.last_report()
