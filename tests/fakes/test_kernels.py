"""CUDA C++ kernels compiled by NVRTC and run by the fake's PTX interpreter, checked against numpy."""

import time

import numpy as np
import pytest

CONFORMANCE = r'''
extern "C" __global__ void fill_u32(unsigned* out, unsigned value, unsigned n)
{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = value; }
extern "C" __global__ void add_one(unsigned* x, unsigned n)
{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1; }
extern "C" __global__ void saxpy(const float* x, float* y, float a, unsigned n)
{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }
extern "C" __global__ void vecadd(const float* a, const float* b, float* c, unsigned n)
{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }
extern "C" __global__ void index2d(unsigned* out, unsigned w, unsigned h)
{ unsigned x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) out[y * w + x] = (y << 16) | x; }
extern "C" __global__ void index3d(unsigned* out, unsigned nx, unsigned ny, unsigned nz)
{ unsigned x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y,
           z = blockIdx.z * blockDim.z + threadIdx.z;
  if (x < nx && y < ny && z < nz) out[(z * ny + y) * nx + x] = x | (y << 10) | (z << 20); }
extern "C" __global__ void block_ids(unsigned* out, unsigned n)
{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = (blockIdx.x << 16) | threadIdx.x; }
extern "C" __global__ void reduce_sum(const float* x, float* partial, unsigned n)
{ extern __shared__ float s[]; unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f; __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) { if (t < k) s[t] += s[t + k]; __syncthreads(); }
  if (t == 0) partial[blockIdx.x] = s[0]; }
extern "C" __global__ void histogram(const unsigned* x, unsigned* bins, unsigned n)
{ __shared__ unsigned h[64];
  for (unsigned b = threadIdx.x; b < 64; b += blockDim.x) h[b] = 0;
  __syncthreads();
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&h[x[i] % 64], 1u);
  __syncthreads();
  for (unsigned b = threadIdx.x; b < 64; b += blockDim.x) if (h[b]) atomicAdd(&bins[b], h[b]); }
extern "C" __global__ void atomic_add_f32(const float* x, float* out, unsigned n)
{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) atomicAdd(out, x[i]); }
extern "C" __global__ void pack_args(unsigned* ou, unsigned s0, float s1, int s2, float* of, unsigned s3)
{ if (threadIdx.x == 0 && blockIdx.x == 0) { ou[0] = s0; ou[1] = (unsigned)s2; ou[2] = s3; of[0] = s1; } }
extern "C" __global__ void daxpy(const double* x, double* y, double a, unsigned n)
{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }
extern "C" __global__ void busy(unsigned* out, unsigned iters, unsigned n)
{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { unsigned v = i; for (unsigned k = 0; k < iters; k++) v = v * 1664525u + 1013904223u; out[i] = v; } }
'''


@pytest.fixture
def conf(cuda):
    module = cuda.module(CONFORMANCE)
    return lambda name: cuda.ok(cuda.d.cuModuleGetFunction(module, name.encode()))


def test_fill_and_add_one(cuda, conf):
    n = 1000
    out = np.zeros(n, np.uint32)
    p = cuda.poisoned(out)
    cuda.launch(conf("fill_u32"), (8,), (128,), p, np.uint32(0xDEADBEEF), np.uint32(n))
    cuda.launch(conf("add_one"), (4,), (256,), p, np.uint32(n - 1))
    want = np.full(n, 0xDEADBEEF, np.uint32)
    want[: n - 1] += 1
    assert np.array_equal(cuda.download(p, out), want)


@pytest.mark.parametrize("block", [1, 32, 96, 256])
def test_saxpy_vecadd(cuda, conf, rng, block):
    n = 777
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    dx, dy = cuda.upload(x), cuda.upload(y)
    cuda.launch(conf("saxpy"), ((n + block - 1) // block,), (block,), dx, dy, np.float32(1.75), np.uint32(n))
    assert np.array_equal(cuda.download(dy, y), (np.float64(1.75) * x + y).astype(np.float32))
    c = cuda.poisoned(x)
    cuda.launch(conf("vecadd"), ((n + block - 1) // block,), (block,), dx, dy, c, np.uint32(n))
    assert np.array_equal(cuda.download(c, x), x + cuda.download(dy, y))


def test_index2d_index3d_block_ids(cuda, conf):
    w, h = 37, 19
    out = np.zeros(w * h, np.uint32)
    p = cuda.poisoned(out)
    cuda.launch(conf("index2d"), (3, 5), (16, 4), p, np.uint32(w), np.uint32(h))
    ys, xs = np.mgrid[0:h, 0:w]
    assert np.array_equal(cuda.download(p, out), ((ys << 16) | xs).ravel().astype(np.uint32))
    nx, ny, nz = 9, 7, 5
    out = np.zeros(nx * ny * nz, np.uint32)
    p = cuda.poisoned(out)
    cuda.launch(conf("index3d"), (3, 2, 3), (4, 4, 2), p, np.uint32(nx), np.uint32(ny), np.uint32(nz))
    zs, ys, xs = np.mgrid[0:nz, 0:ny, 0:nx]
    assert np.array_equal(cuda.download(p, out), (xs | (ys << 10) | (zs << 20)).ravel().astype(np.uint32))
    out = np.zeros(300, np.uint32)
    p = cuda.poisoned(out)
    cuda.launch(conf("block_ids"), (5,), (64,), p, np.uint32(300))
    i = np.arange(300)
    assert np.array_equal(cuda.download(p, out), ((i // 64) << 16 | (i % 64)).astype(np.uint32))


@pytest.mark.parametrize("block", [32, 128, 256])
def test_reduce_sum_shared_tree(cuda, conf, rng, block):
    n = 1000
    x = rng.integers(-100, 100, n).astype(np.float32)  # integers: the sum is exact in any order
    blocks = (n + block - 1) // block
    part = np.zeros(blocks, np.float32)
    dp = cuda.poisoned(part)
    cuda.launch(conf("reduce_sum"), (blocks,), (block,), cuda.upload(x), dp, np.uint32(n), shared=block * 4)
    padded = np.zeros(blocks * block, np.float32)
    padded[:n] = x
    assert np.array_equal(cuda.download(dp, part), padded.reshape(blocks, block).sum(axis=1))


def test_histogram_shared_and_global_atomics(cuda, conf, rng):
    n = 5000
    x = rng.integers(0, 1 << 20, n).astype(np.uint32)
    bins = np.zeros(64, np.uint32)
    db = cuda.upload(bins + 3)
    cuda.launch(conf("histogram"), ((n + 127) // 128,), (128,), cuda.upload(x), db, np.uint32(n))
    assert np.array_equal(cuda.download(db, bins), np.bincount(x % 64, minlength=64).astype(np.uint32) + 3)


def test_atomic_add_f32(cuda, conf, rng):
    n = 2000
    x = rng.integers(-50, 50, n).astype(np.float32)
    out = cuda.upload(np.array([0.5], np.float32))
    cuda.launch(conf("atomic_add_f32"), ((n + 255) // 256,), (256,), cuda.upload(x), out, np.uint32(n))
    assert cuda.download(out, np.zeros(1, np.float32))[0] == np.float32(x.sum() + 0.5)


def test_pack_args_and_daxpy(cuda, conf, rng):
    ou = np.zeros(3, np.uint32)
    of = np.zeros(1, np.float32)
    du, df = cuda.poisoned(ou), cuda.poisoned(of)
    cuda.launch(conf("pack_args"), (1,), (32,), du, np.uint32(7), np.float32(-2.5), np.int32(-9), df, np.uint32(11))
    assert list(cuda.download(du, ou)) == [7, np.uint32(np.int32(-9).view(np.uint32)), 11]
    assert cuda.download(df, of)[0] == np.float32(-2.5)
    n = 500
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    dy = cuda.upload(y)
    cuda.launch(conf("daxpy"), (4,), (128,), cuda.upload(x), dy, np.float64(0.3), np.uint32(n))
    assert np.allclose(cuda.download(dy, y), 0.3 * x + y, rtol=0, atol=1e-15)


def lcg(n, iters):
    """What the busy kernel computes."""
    v = np.arange(n, dtype=np.uint64)
    for _ in range(iters):
        v = (v * 1664525 + 1013904223) & 0xFFFFFFFF
    return v.astype(np.uint32)


def test_busy_lcg(cuda, conf):
    n, iters = 200, 50
    out = np.zeros(n, np.uint32)
    p = cuda.poisoned(out)
    cuda.launch(conf("busy"), (2,), (128,), p, np.uint32(iters), np.uint32(n))
    assert np.array_equal(cuda.download(p, out), lcg(n, iters))


def test_warp_shuffle_reduction_and_ballot(cuda, rng):
    f = cuda.kernel(r'''
    extern "C" __global__ void warpsum(const int* x, int* sums, unsigned* ballots, int* bcast) {
        unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
        int v = x[i];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
        unsigned b = __ballot_sync(0xffffffff, x[i] > 0);
        int first = __shfl_sync(0xffffffff, x[i], 3);
        int up = __shfl_up_sync(0xffffffff, x[i], 1);
        int fly = __shfl_xor_sync(0xffffffff, x[i], 5);
        if ((threadIdx.x & 31) == 0) { sums[i / 32] = v; ballots[i / 32] = b; bcast[i / 32] = first; }
        bcast[64 + i] = up + 1000 * fly;
        if (__all_sync(0xffffffff, x[i] > -1000) && !__any_sync(0xffffffff, x[i] > 1000)) bcast[64 + 256 + i] = 1;
    }''', "warpsum")
    x = rng.integers(-100, 100, 256).astype(np.int32)
    sums, ballots = np.zeros(8, np.int32), np.zeros(8, np.uint32)
    bc = np.zeros(64 + 512, np.int32)
    ds, db, dc = cuda.poisoned(sums), cuda.poisoned(ballots), cuda.poisoned(bc)
    cuda.launch(f, (2,), (128,), cuda.upload(x), ds, db, dc)
    w = x.reshape(8, 32)
    assert np.array_equal(cuda.download(ds, sums), w.sum(axis=1))
    got = cuda.download(dc, bc)
    assert np.array_equal(cuda.download(db, ballots), ((w > 0) * (1 << np.arange(32, dtype=np.uint64))).sum(axis=1).astype(np.uint32))
    assert np.array_equal(got[:8], w[:, 3])
    lane = np.arange(32)
    up = np.where(lane >= 1, w[:, np.maximum(lane - 1, 0)], w)
    assert np.array_equal(got[64:64 + 256], (up + 1000 * w[:, lane ^ 5]).ravel())
    assert np.all(got[64 + 256:64 + 512] == 1)


def test_tiled_matmul(cuda, rng):
    f = cuda.kernel(r'''
    #define T 8
    extern "C" __global__ void matmul(const float* a, const float* b, float* c, int n, int k, int m) {
        __shared__ float ta[T][T], tb[T][T];
        int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
        float acc = 0.0f;
        for (int t = 0; t < (k + T - 1) / T; t++) {
            ta[threadIdx.y][threadIdx.x] = (row < n && t * T + threadIdx.x < k) ? a[row * k + t * T + threadIdx.x] : 0.0f;
            tb[threadIdx.y][threadIdx.x] = (col < m && t * T + threadIdx.y < k) ? b[(t * T + threadIdx.y) * m + col] : 0.0f;
            __syncthreads();
            for (int j = 0; j < T; j++) acc += ta[threadIdx.y][j] * tb[j][threadIdx.x];
            __syncthreads();
        }
        if (row < n && col < m) c[row * m + col] = acc;
    }''', "matmul")
    n, k, m = 19, 23, 13
    a = rng.integers(-8, 8, (n, k)).astype(np.float32)
    b = rng.integers(-8, 8, (k, m)).astype(np.float32)
    c = np.zeros((n, m), np.float32)
    dc = cuda.poisoned(c)
    cuda.launch(f, ((m + 7) // 8, (n + 7) // 8), (8, 8), cuda.upload(a), cuda.upload(b), dc, np.int32(n), np.int32(k), np.int32(m))
    assert np.array_equal(cuda.download(dc, c), a @ b)


def test_device_function_call(cuda, rng):
    f = cuda.kernel(r'''
    __device__ __noinline__ float poly(float v, int k) { float r = 0; for (int i = 0; i < k; i++) r = r * v + i; return r; }
    __device__ __noinline__ int twice(int v) { return 2 * v; }
    extern "C" __global__ void callf(float* x, int* y, unsigned n) {
        unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) { x[i] = poly(x[i], 4); y[i] = twice(y[i]) + twice(3); }
    }''', "callf")
    n = 100
    x = rng.integers(-5, 5, n).astype(np.float32)
    y = rng.integers(-1000, 1000, n).astype(np.int32)
    dx, dy = cuda.upload(x), cuda.upload(y)
    cuda.launch(f, (1,), (128,), dx, dy, np.uint32(n))
    assert np.array_equal(cuda.download(dx, x), ((x * 0 + 0) * x + 1) * x * x + 2 * x + 3 + 0 * x)
    assert np.array_equal(cuda.download(dy, y), 2 * y + 6)


INTEGER_OPS = r'''
extern "C" __global__ void intops(const int* a, const int* b, int* o, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
    int x = a[i], y = b[i]; unsigned ux = x, uy = y;
    long long lx = x; unsigned long long ulx = ux;
    int* r = o + i * 20;
    r[0] = x / y; r[1] = x % y; r[2] = (int)(ux / uy); r[3] = (int)(ux % uy);
    r[4] = min(x, y); r[5] = max(x, y); r[6] = (int)min(ux, uy); r[7] = abs(x);
    r[8] = __popc(ux); r[9] = __clz(x); r[10] = (int)__brev(ux); r[11] = __mulhi(x, y);
    r[12] = (int)__umulhi(ux, uy); r[13] = x >> (uy & 31); r[14] = (int)(ux >> (uy & 31)); r[15] = x << (uy & 31);
    r[16] = (int)((lx * y) >> 7); r[17] = (int)((ulx * uy) >> 33); r[18] = __ffs(x); r[19] = (x & y) ^ (x | ~y);
}'''


def test_integer_instruction_classes(cuda, rng):
    f = cuda.kernel(INTEGER_OPS, "intops")
    n = 300
    a = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    b[b == 0] = 7
    b[:5] = [1, -1, 3, 31, 2]
    o = np.zeros(n * 20, np.int32)
    do = cuda.poisoned(o)
    cuda.launch(f, (3,), (128,), cuda.upload(a), cuda.upload(b), do, np.uint32(n))
    r = cuda.download(do, o).reshape(n, 20)
    A, B = a.astype(np.int64), b.astype(np.int64)
    UA, UB = A & 0xFFFFFFFF, B & 0xFFFFFFFF
    q = np.trunc(A / B).astype(np.int64)
    exp = [q, A - q * B, UA // UB, UA % UB, np.minimum(A, B), np.maximum(A, B), np.minimum(UA, UB), np.abs(A),
           [bin(v).count("1") for v in UA], [32 - int(v).bit_length() for v in UA],
           [int(format(int(v), "032b")[::-1], 2) for v in UA], (A * B) >> 32, (UA * UB) >> 32, A >> (UB & 31),
           UA >> (UB & 31), A << (UB & 31), (A * B) >> 7, [int(u) * int(v) >> 33 for u, v in zip(UA, UB)],
           [(int(v) & -int(v)).bit_length() if v else 0 for v in UA], (A & B) ^ (A | ~B)]
    for k, e in enumerate(exp):
        want = (np.array(e, dtype=object).astype(np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
        assert np.array_equal(r[:, k], want), f"column {k}"


FLOAT_OPS = r'''
extern "C" __global__ void floatops(const float* a, const float* b, float* o, const double* da, double* od,
                                    int* oi, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
    float x = a[i], y = b[i]; double dx = da[i];
    float* r = o + i * 10;
    r[0] = x + y; r[1] = x - y; r[2] = x * y; r[3] = x / y; r[4] = fmaf(x, y, 1.5f);
    r[5] = fminf(x, y); r[6] = fmaxf(x, y); r[7] = sqrtf(fabsf(x)); r[8] = -x; r[9] = (float)dx;
    double* d = od + i * 6;
    d[0] = dx * dx + 1.0; d[1] = dx / 3.0; d[2] = sqrt(fabs(dx)); d[3] = (double)x; d[4] = fma(dx, 2.0, dx);
    d[5] = (double)(long long)(dx * 1000.0);
    int* k = oi + i * 6;
    k[0] = (int)x; k[1] = __float2int_rn(x); k[2] = (int)floorf(x); k[3] = x < y; k[4] = isnan(x / y) ? 1 : 0;
    k[5] = (int)(unsigned char)(int)x;
}'''


def test_float_instruction_classes(cuda, rng):
    f = cuda.kernel(FLOAT_OPS, "floatops")
    n = 256
    a = (rng.standard_normal(n) * 100).astype(np.float32)
    b = (rng.standard_normal(n) * 100).astype(np.float32)
    b[0], a[1], b[1] = 0.0, 0.0, 0.0
    da = rng.standard_normal(n) * 1e3
    o, od, oi = np.zeros(n * 10, np.float32), np.zeros(n * 6), np.zeros(n * 6, np.int32)
    do, dd, di = cuda.poisoned(o), cuda.poisoned(od), cuda.poisoned(oi)
    cuda.launch(f, (2,), (128,), cuda.upload(a), cuda.upload(b), do, cuda.upload(da), dd, di, np.uint32(n))
    r, d, k = cuda.download(do, o).reshape(n, 10), cuda.download(dd, od).reshape(n, 6), cuda.download(di, oi).reshape(n, 6)
    with np.errstate(all="ignore"):
        fma = (a.astype(np.float64) * b + 1.5).astype(np.float32)
        exp = [a + b, a - b, a * b, a / b, fma, np.fmin(a, b), np.fmax(a, b), np.sqrt(np.abs(a)), -a, da.astype(np.float32)]
        for j, e in enumerate(exp):
            assert np.array_equal(r[:, j], e, equal_nan=True), f"f32 column {j}"
        dexp = [da * da + 1.0, da / 3.0, np.sqrt(np.abs(da)), a.astype(np.float64), da * 2.0 + da, np.trunc(da * 1000.0)]
        for j, e in enumerate(dexp):
            assert np.allclose(d[:, j], e, rtol=1e-15, atol=0), f"f64 column {j}"
        iexp = [np.trunc(a), np.rint(a), np.floor(a), a < b, np.isnan(a / b), np.trunc(a).astype(np.int64) & 0xFF]
        for j, e in enumerate(iexp):
            assert np.array_equal(k[:, j], np.asarray(e).astype(np.int32)), f"int column {j}"


SPIN = r'''
extern "C" __global__ void spin(const volatile unsigned* flag, unsigned* out)
{ while (flag[0] == 0) {} out[blockIdx.x * blockDim.x + threadIdx.x] = 1; }'''


def test_watchdog_ends_an_endless_kernel_with_a_sticky_timeout(cuda, monkeypatch):
    monkeypatch.setenv("IRONACCEL_FAKE_WATCHDOG_S", "0.3")
    d = cuda.d
    f = cuda.kernel(SPIN, "spin")
    flag, out = cuda.upload(np.zeros(1, np.uint32)), cuda.alloc(4 * 64)
    ptrs, boxes = cuda.args(flag, out)
    t0 = time.monotonic()
    cuda.ok(d.cuLaunchKernel(f, 4, 1, 1, 16, 1, 1, 0, 0, ptrs.ctypes.data, 0))  # blocks on every worker
    assert cuda.err(d.cuCtxSynchronize()) == d.CUresult.CUDA_ERROR_LAUNCH_TIMEOUT
    assert 0.3 <= time.monotonic() - t0 < 30
    report = cuda.control.last_report()
    assert report.startswith("watchdog: kernel spin ran longer than 0.3 s (IRONACCEL_FAKE_WATCHDOG_S); stopped in "
                             "block ("), report
    assert ", thread (" in report and "PTX line" in report
    assert cuda.err(d.cuMemAlloc(16)) == d.CUresult.CUDA_ERROR_LAUNCH_TIMEOUT  # sticky, as on hardware


def test_watchdog_instruction_budget(cuda, conf, monkeypatch):
    monkeypatch.setenv("IRONACCEL_FAKE_WATCHDOG_INSTRUCTIONS", "200000")
    d = cuda.d
    n, iters = 64, 100  # about 64 x 600 instructions: within the budget, and the values are right
    p = cuda.poisoned(np.zeros(n, np.uint32))
    cuda.launch(conf("busy"), (1,), (n,), p, np.uint32(iters), np.uint32(n))
    assert np.array_equal(cuda.download(p, np.zeros(n, np.uint32)), lcg(n, iters))
    ptrs, boxes = cuda.args(p, np.uint32(1 << 30), np.uint32(n))
    cuda.ok(d.cuLaunchKernel(conf("busy"), 1, 1, 1, n, 1, 1, 0, 0, ptrs.ctypes.data, 0))
    assert cuda.err(d.cuCtxSynchronize()) == d.CUresult.CUDA_ERROR_LAUNCH_TIMEOUT
    report = cuda.control.last_report()
    assert report.startswith("watchdog: kernel busy ran more than 200000 thread-instructions "
                             "(IRONACCEL_FAKE_WATCHDOG_INSTRUCTIONS)"), report


def test_watchdog_bad_setting_leaves_it_off(cuda, conf, monkeypatch):
    monkeypatch.setenv("IRONACCEL_FAKE_WATCHDOG_S", "soon")
    p = cuda.poisoned(np.zeros(32, np.uint32))
    cuda.launch(conf("busy"), (1,), (32,), p, np.uint32(2000), np.uint32(32))
    assert np.array_equal(cuda.download(p, np.zeros(32, np.uint32)), lcg(32, 2000))
