"""CUDA C++ kernels compiled by NVRTC and run by the fake's PTX interpreter, checked against numpy."""

import ctypes
import os
import shutil
import subprocess
import sys
import textwrap
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from ironaccel import fakes

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


def test_declared_alignment_of_shared_and_local_arrays_holds_for_their_addresses(cuda):
    """`.align N` on .shared and .local variables (numba asks for up to 256) holds for the generic address,
    in the kernel and in a called function's frame, for every thread."""
    f = cuda.kernel(r'''
    __device__ __noinline__ unsigned long long deep(int k) {
        __align__(128) volatile char l[40];
        l[k] = 1;
        return (unsigned long long)&l[0];
    }
    extern "C" __global__ void where(unsigned long long* out) {
        __shared__ __align__(256) char s[24];
        __align__(64) volatile char l[24];
        unsigned t = threadIdx.x;
        l[t % 24] = 1; s[t % 24] = 1;
        out[3 * t] = (unsigned long long)&s[0];
        out[3 * t + 1] = (unsigned long long)&l[0];
        out[3 * t + 2] = deep(t % 40);
    }''', "where")
    like = np.zeros(3 * 64, dtype=np.uint64)
    out = cuda.poisoned(like)
    cuda.launch(f, (2,), (64,), out)
    got = cuda.download(out, like).reshape(64, 3)
    assert np.all(got != 0)
    assert np.all(got % np.array([256, 64, 128], dtype=np.uint64) == 0), [hex(int(v)) for v in got[:2].ravel()]
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


def test_a_kernel_that_returns_at_once_runs_no_block(cuda, monkeypatch):
    """5.7e9 threads of an empty kernel (numba's test_issue_9229, whose compiler proves its body dead) finish at once,
    as on the H200; block by block they took minutes, past the watchdog."""
    monkeypatch.setenv("IRONACCEL_FAKE_WATCHDOG_S", "5")
    d = cuda.d
    f = cuda.kernel('extern "C" __global__ void nothing(unsigned* out) {}', "nothing")
    out = cuda.alloc(4)
    ptrs, boxes = cuda.args(out)
    cuda.ok(d.cuLaunchKernel(f, 22121216, 1, 1, 256, 1, 1, 0, 0, ptrs.ctypes.data, 0))
    cuda.ok(d.cuCtxSynchronize())


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


# ---- PTX that ordinary code emits: carry chains, rounding modes, funnel shifts, f16/bf16, long names ----

FORMATS = {"f16": (10, 5), "bf16": (7, 8), "f32": (23, 8), "f64": (52, 11)}  # mantissa bits, exponent bits


def rounded(q: Fraction, fmt: str, mode: str) -> Fraction | float:
    """The exact rational q rounded to a float format by mode (rn, rz, rm, rp): the test's oracle."""
    m, e_bits = FORMATS[fmt]
    if q == 0:
        return Fraction(0)
    neg, a = q < 0, abs(q)
    bias = (1 << (e_bits - 1)) - 1
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    unit = Fraction(2) ** (max(e, 1 - bias) - m)
    scaled = a / unit
    low = scaled.numerator // scaled.denominator
    rest = scaled - low
    up = {"rz": False, "rm": neg and rest > 0, "rp": not neg and rest > 0,
          "rn": rest > Fraction(1, 2) or (rest == Fraction(1, 2) and low % 2 == 1)}[mode]
    value = (low + up) * unit
    if value >= Fraction(2) ** (bias + 1):  # overflow
        to_inf = {"rn": True, "rz": False, "rm": neg, "rp": not neg}[mode]
        value = float("inf") if to_inf else (2 - Fraction(2) ** -m) * Fraction(2) ** bias
    return -value if neg else value


def bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def as_fraction(v) -> Fraction | float:
    v = float(v)
    return v if np.isinf(v) else Fraction(v)


def sqrt_rounded_ok(got, x: Fraction, mode: str) -> bool:
    """Whether got is sqrt(x) rounded by mode: the neighbours' squares bracket x (sqrt is not rational)."""
    g = Fraction(float(got))
    lo, hi = (Fraction(float(np.nextafter(got, type(got)(s)))) for s in (-np.inf, np.inf))
    if mode in ("rz", "rm"):
        return g * g <= x < hi * hi
    if mode == "rp":
        return lo * lo < x <= g * g
    return ((lo + g) / 2) ** 2 <= x <= ((g + hi) / 2) ** 2


ROUNDED = r"""
#define MODES(X, ...) X##_rn(__VA_ARGS__), X##_rz(__VA_ARGS__), X##_rd(__VA_ARGS__), X##_ru(__VA_ARGS__)
extern "C" __global__ void rounded(const float* a, const float* b, const float* c, const double* da, const double* db,
                                   const double* dc, const int* ia, const long long* la, float* o, double* od,
                                   unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
    float x = a[i], y = b[i], z = c[i];
    float r[] = {MODES(__fadd, x, y), MODES(__fsub, x, y), MODES(__fmul, x, y), MODES(__fdiv, x, y),
                 MODES(__fmaf, x, y, z), MODES(__frcp, x), MODES(__double2float, da[i]), MODES(__int2float, ia[i]),
                 MODES(__ll2float, la[i]), MODES(__fsqrt, fabsf(x))};
    for (int k = 0; k < 40; k++) o[i * 40 + k] = r[k];
    double dx = da[i], dy = db[i], dz = dc[i];
    double d[] = {MODES(__dadd, dx, dy), MODES(__dmul, dx, dy), MODES(__ddiv, dx, dy), MODES(__fma, dx, dy, dz),
                  MODES(__drcp, dx), MODES(__ll2double, la[i]), MODES(__dsqrt, fabs(dx))};
    for (int k = 0; k < 28; k++) od[i * 28 + k] = d[k];
}"""


def test_rounding_modes_f32_f64_exact(cuda, rng):
    ptx = cuda.ptx(ROUNDED).decode()
    for inst in ("add.rz.f32", "fma.rm.f32", "div.rp.f32", "sqrt.rz.f32", "rcp.rm.f32", "cvt.rm.f32.f64",
                 "cvt.rp.f32.s32", "cvt.rz.f32.s64", "mul.rm.f64", "fma.rp.f64", "cvt.rm.f64.s64", "sqrt.rp.f64"):
        assert inst in ptx, inst  # NVRTC emits each form this test checks
    f = cuda.ok(cuda.d.cuModuleGetFunction(cuda.module(ROUNDED), b"rounded"))
    n = 96
    a, b, c = ((rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(np.float32) for _ in range(3))
    da = rng.standard_normal(n) * np.exp2(rng.integers(-8, 8, n))
    db, dc = rng.standard_normal(n), rng.standard_normal(n)
    ia = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32) | 0x7F  # more bits than f32 keeps
    la = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64) | 0x7FF  # more bits than f64 keeps
    o, od = np.zeros(n * 40, np.float32), np.zeros(n * 28)
    do, dd = cuda.poisoned(o), cuda.poisoned(od)
    cuda.launch(f, (1,), (n,), *map(cuda.upload, (a, b, c, da, db, dc, ia, la)), do, dd, np.uint32(n))
    r, d = cuda.download(do, o).reshape(n, 40), cuda.download(dd, od).reshape(n, 28)
    F, modes = Fraction, ("rn", "rz", "rm", "rp")
    for i in range(n):
        x, y, z, dx, dy, dz = (F(float(v[i])) for v in (a, b, c, da, db, dc))
        exact32 = [x + y, x - y, x * y, x / y, x * y + z, 1 / x, dx, F(int(ia[i])), F(int(la[i]))]
        exact64 = [dx + dy, dx * dy, dx / dy, dx * dy + dz, 1 / dx, F(int(la[i]))]
        for j, mode in enumerate(modes):
            for k, q in enumerate(exact32):
                assert as_fraction(r[i, 4 * k + j]) == rounded(q, "f32", mode), (i, k, mode)
            for k, q in enumerate(exact64):
                assert as_fraction(d[i, 4 * k + j]) == rounded(q, "f64", mode), (i, k, mode)
            assert sqrt_rounded_ok(r[i, 36 + j], abs(x), mode), (i, "sqrt.f32", mode)
            assert sqrt_rounded_ok(d[i, 24 + j], abs(dx), mode), (i, "sqrt.f64", mode)


CARRY = r"""
extern "C" __global__ void carry(const unsigned* a, const unsigned* b, unsigned* o, unsigned long long* w,
                                 const double* x, double* sc, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
    unsigned a0 = a[2 * i], a1 = a[2 * i + 1], b0 = b[2 * i], b1 = b[2 * i + 1], *r = o + 12 * i;
    asm("add.cc.u32 %0, %3, %5;\n\taddc.cc.u32 %1, %4, %6;\n\taddc.u32 %2, 0, 0;"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]) : "r"(a0), "r"(a1), "r"(b0), "r"(b1));
    asm("sub.cc.u32 %0, %3, %5;\n\tsubc.cc.u32 %1, %4, %6;\n\tsubc.u32 %2, 0, 0;"
        : "=r"(r[3]), "=r"(r[4]), "=r"(r[5]) : "r"(a0), "r"(a1), "r"(b0), "r"(b1));
    asm("mul.lo.u32 %0, %4, %6;\n\tmul.hi.u32 %1, %4, %6;\n\t"
        "mad.lo.cc.u32 %1, %4, %7, %1;\n\tmadc.hi.u32 %2, %4, %7, 0;\n\t"
        "mad.lo.cc.u32 %1, %5, %6, %1;\n\tmadc.hi.cc.u32 %2, %5, %6, %2;\n\tmadc.hi.u32 %3, %5, %7, 0;\n\t"
        "mad.lo.cc.u32 %2, %5, %7, %2;\n\taddc.u32 %3, %3, 0;"
        : "=r"(r[6]), "=r"(r[7]), "=r"(r[8]), "=r"(r[9]) : "r"(a0), "r"(a1), "r"(b0), "r"(b1));
    asm("mad.hi.cc.s32 %0, %2, %3, %4;\n\taddc.u32 %1, 0, 0;" : "=r"(r[10]), "=r"(r[11]) : "r"(a0), "r"(b0), "r"(a1));
    unsigned long long wa = ((unsigned long long)a1 << 32) | a0, wb = ((unsigned long long)b1 << 32) | b0, lo, hi;
    asm("add.cc.u64 %0, %2, %3;\n\taddc.u64 %1, %2, %3;" : "=l"(lo), "=l"(hi) : "l"(wa), "l"(wb));
    w[2 * i] = lo; w[2 * i + 1] = hi;
    sc[2 * i] = sin(x[i]); sc[2 * i + 1] = cos(x[i]);  // large arguments: libdevice's Payne-Hanek reduction
}"""


def test_carry_chains_exact_and_double_sin_cos(cuda, rng):
    ptx = cuda.ptx(CARRY).decode()
    for inst in ("mad.lo.cc.u32", "madc.hi.cc.u32", "madc.lo.cc.u32"):
        assert ptx.count(inst) > ("mad.lo.cc.u32" == inst) * 3, inst  # NVRTC's own double sin/cos emit them too
    f = cuda.ok(cuda.d.cuModuleGetFunction(cuda.module(CARRY), b"carry"))
    n = 128
    a, b = (rng.integers(0, 1 << 32, 2 * n, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    a[:4], b[:4] = 0xFFFFFFFF, [1, 0xFFFFFFFF, 0, 0]  # carries through both limbs
    x = rng.uniform(-1e300, 1e300, n)
    x[:8] = [1e22, -1e22, 3.0, 0.5, 1e6, 2.0 ** 1000, 5.0e-310, 1e15]
    o, w, sc = np.zeros(12 * n, np.uint32), np.zeros(2 * n, np.uint64), np.zeros(2 * n)
    do, dw, ds = cuda.poisoned(o), cuda.poisoned(w), cuda.poisoned(sc)
    cuda.launch(f, (1,), (n,), cuda.upload(a), cuda.upload(b), do, dw, cuda.upload(x), ds, np.uint32(n))
    r, w, sc = cuda.download(do, o).reshape(n, 12), cuda.download(dw, w), cuda.download(ds, sc)
    M = 1 << 32

    def signed(v):
        return v - M if v >= M // 2 else v

    for i in range(n):
        a0, a1, b0, b1 = int(a[2 * i]), int(a[2 * i + 1]), int(b[2 * i]), int(b[2 * i + 1])
        A, B = a0 | a1 << 32, b0 | b1 << 32
        s, diff, p = A + B, (A - B) % (1 << 96), A * B
        assert [int(v) for v in r[i, :3]] == [s % M, s >> 32 & (M - 1), s >> 64], i
        assert [int(v) for v in r[i, 3:6]] == [diff % M, diff >> 32 & (M - 1), diff >> 64], i
        assert [int(v) for v in r[i, 6:10]] == [p >> (32 * k) & (M - 1) for k in range(4)], i
        t = ((signed(a0) * signed(b0)) >> 32 & (M - 1)) + a1
        assert [int(r[i, 10]), int(r[i, 11])] == [t % M, t >> 32], i
        assert [int(w[2 * i]), int(w[2 * i + 1])] == [s % (1 << 64), (s + (s >> 64)) % (1 << 64)], i
    for got, want in ((sc[0::2], np.sin(x)), (sc[1::2], np.cos(x))):  # CUDA documents 2 ulp for both
        ulps = np.abs(got - want) / np.spacing(np.abs(want))
        assert ulps.max() <= 2, (ulps.max(), x[ulps.argmax()])


FUNNEL = r"""
extern "C" __global__ void funnel(const unsigned* a, const unsigned* b, const unsigned* s, unsigned* o, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
    unsigned x = a[i], y = b[i], k = s[i];
    o[5 * i] = __funnelshift_l(x, y, k); o[5 * i + 1] = __funnelshift_lc(x, y, k);
    o[5 * i + 2] = __funnelshift_r(x, y, k); o[5 * i + 3] = __funnelshift_rc(x, y, k);
    o[5 * i + 4] = (x << (k & 31)) | (x >> ((32 - k) & 31));  // a variable rotate
}"""


def test_funnel_shifts(cuda, rng):
    ptx = cuda.ptx(FUNNEL).decode()
    for inst in ("shf.l.wrap.b32", "shf.l.clamp.b32", "shf.r.wrap.b32", "shf.r.clamp.b32"):
        assert inst in ptx, inst
    f = cuda.ok(cuda.d.cuModuleGetFunction(cuda.module(FUNNEL), b"funnel"))
    n = 200
    a, b = (rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    s = rng.integers(0, 70, n).astype(np.uint32)
    s[:4] = [0, 32, 31, 64]
    o = np.zeros(5 * n, np.uint32)
    do = cuda.poisoned(o)
    cuda.launch(f, (1,), (256,), cuda.upload(a), cuda.upload(b), cuda.upload(s), do, np.uint32(n))
    r = cuda.download(do, o).reshape(n, 5)
    M = (1 << 32) - 1
    for i in range(n):
        x, y, k = int(a[i]), int(b[i]), int(s[i])
        both = y << 32 | x
        want = [both << (k & 31) >> 32 & M, both << min(k, 32) >> 32 & M, both >> (k & 31) & M,
                both >> min(k, 32) & M, (x << (k & 31) | x >> ((32 - k) & 31)) & M]
        assert [int(v) for v in r[i]] == want, (i, x, y, k)


HALVES = r"""
#define ASM1(inst, out, x) asm(inst " %0, %1;" : "=h"(out) : "h"(x))
#define ASM2(inst, out, x, y) asm(inst " %0, %1, %2;" : "=h"(out) : "h"(x), "h"(y))
#define ASM3(inst, out, x, y, z) asm(inst " %0, %1, %2, %3;" : "=h"(out) : "h"(x), "h"(y), "h"(z))
#define CVT4(to, out, x, c) asm("cvt.rn." to "." c " %0, %4;\n\tcvt.rz." to "." c " %1, %4;\n\t" \
    "cvt.rm." to "." c " %2, %4;\n\tcvt.rp." to "." c " %3, %4;" \
    : "=h"(out[0]), "=h"(out[1]), "=h"(out[2]), "=h"(out[3]) : C(x))
extern "C" __global__ void halves(const unsigned short* h, const unsigned short* g, const float* f, const double* d,
                                  unsigned short* o, unsigned* o2, float* of, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
    unsigned short x = h[3 * i], y = h[3 * i + 1], z = h[3 * i + 2];
    unsigned short bx = g[3 * i], by = g[3 * i + 1], bz = g[3 * i + 2];
    unsigned short* r = o + 32 * i;
    ASM2("add.rn.f16", r[0], x, y); ASM2("sub.rn.f16", r[1], x, y); ASM2("mul.rn.f16", r[2], x, y);
    ASM3("fma.rn.f16", r[3], x, y, z); ASM2("min.f16", r[4], x, y); ASM2("max.f16", r[5], x, y);
    ASM1("neg.f16", r[6], x); ASM1("abs.f16", r[7], x);
    ASM2("add.rn.bf16", r[8], bx, by); ASM2("sub.rn.bf16", r[9], bx, by); ASM2("mul.rn.bf16", r[10], bx, by);
    ASM3("fma.rn.bf16", r[11], bx, by, bz); ASM2("min.bf16", r[12], bx, by); ASM2("max.bf16", r[13], bx, by);
    ASM1("neg.bf16", r[14], bx); ASM1("abs.bf16", r[15], bx);
#define C(v) "f"(v)
    CVT4("f16", (r + 16), f[i], "f32"); CVT4("bf16", (r + 20), f[i], "f32");
#undef C
#define C(v) "d"(v)
    CVT4("f16", (r + 24), d[i], "f64"); CVT4("bf16", (r + 28), d[i], "f64");
    unsigned px = x | (unsigned)y << 16, py = y | (unsigned)z << 16, pz = z | (unsigned)x << 16, *q = o2 + 6 * i;
    unsigned pbx = bx | (unsigned)by << 16, pby = by | (unsigned)bz << 16;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(q[0]) : "r"(px), "r"(py));
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(q[1]) : "r"(px), "r"(py), "r"(pz));
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(q[2]) : "r"(pbx), "r"(pby));
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(q[3]) : "f"(f[i]), "f"(-f[i] * 3.0f));
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(q[4]) : "f"(f[i]), "f"(-f[i] * 3.0f));
    asm("{\n\t.reg .pred p;\n\tsetp.lt.f16 p, %1, %2;\n\tselp.u32 %0, 1, 0, p;\n\t}" : "=r"(q[5]) : "h"(x), "h"(y));
    asm("cvt.f32.f16 %0, %1;" : "=f"(of[2 * i]) : "h"(x));
    asm("cvt.f32.bf16 %0, %1;" : "=f"(of[2 * i + 1]) : "h"(bx));
}"""


def test_f16_bf16_arithmetic_and_conversions_exact(cuda, rng):
    f = cuda.kernel(HALVES, "halves")
    n = 128
    h = (rng.standard_normal(3 * n) * np.exp2(rng.integers(-14, 8, 3 * n))).astype(np.float16)
    h[:3] = [60000, 30000, 2]  # overflow to inf
    g = (rng.standard_normal(3 * n) * np.exp2(rng.integers(-60, 60, 3 * n))).astype(np.float32)
    gb = (g.view(np.uint32) >> 16).astype(np.uint16)  # bf16 bits
    fv = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 20, n))).astype(np.float32)
    fv[:3] = [65520.0, 1e-8, -5.96e-8]  # f16 overflow and subnormals
    dv = rng.standard_normal(n) * np.exp2(rng.integers(-30, 20, n))
    o, o2, of = np.zeros(32 * n, np.uint16), np.zeros(6 * n, np.uint32), np.zeros(2 * n, np.float32)
    do, do2, dof = cuda.poisoned(o), cuda.poisoned(o2), cuda.poisoned(of)
    cuda.launch(f, (1,), (n,), cuda.upload(h.view(np.uint16)), cuda.upload(gb), cuda.upload(fv), cuda.upload(dv),
                do, do2, dof, np.uint32(n))
    r, q, of = cuda.download(do, o).reshape(n, 32), cuda.download(do2, o2).reshape(n, 6), cuda.download(dof, of)
    F, modes = Fraction, ("rn", "rz", "rm", "rp")

    def f16(bits):
        return as_fraction(np.uint16(bits).view(np.float16))

    def bf16(bits):
        return as_fraction(bf16_values(np.array([bits]))[0])

    for i in range(n):
        x, y, z = (F(float(v)) for v in h[3 * i:3 * i + 3])
        bx, by, bz = (bf16(v) for v in gb[3 * i:3 * i + 3])
        want16 = [x + y, x - y, x * y, x * y + z, min(x, y), max(x, y), -x, abs(x)]
        for k, w in enumerate(want16):
            assert f16(r[i, k]) == rounded(w, "f16", "rn"), (i, k)
        wantb = [bx + by, bx - by, bx * by, bx * by + bz, min(bx, by), max(bx, by), -bx, abs(bx)]
        for k, w in enumerate(wantb):
            assert bf16(r[i, 8 + k]) == rounded(w, "bf16", "rn"), (i, 8 + k)
        for j, mode in enumerate(modes):
            assert f16(r[i, 16 + j]) == rounded(F(float(fv[i])), "f16", mode), (i, "f16.f32", mode)
            assert bf16(r[i, 20 + j]) == rounded(F(float(fv[i])), "bf16", mode), (i, "bf16.f32", mode)
            assert f16(r[i, 24 + j]) == rounded(F(dv[i]), "f16", mode), (i, "f16.f64", mode)
            assert bf16(r[i, 28 + j]) == rounded(F(dv[i]), "bf16", mode), (i, "bf16.f64", mode)
        lanes = [(x, y, z), (y, z, x)]
        assert [f16(q[i, 0] & 0xFFFF), f16(q[i, 0] >> 16)] == [rounded(a + b, "f16", "rn") for a, b, _ in lanes]
        assert [f16(q[i, 1] & 0xFFFF), f16(q[i, 1] >> 16)] == [rounded(a * b + c, "f16", "rn") for a, b, c in lanes]
        assert [bf16(q[i, 2] & 0xFFFF), bf16(q[i, 2] >> 16)] == [rounded(bx * by, "bf16", "rn"),
                                                                  rounded(by * bz, "bf16", "rn")]
        hi, lo = F(float(fv[i])), F(float(-fv[i] * np.float32(3)))
        assert [f16(q[i, 3] >> 16), f16(q[i, 3] & 0xFFFF)] == [rounded(hi, "f16", "rn"), rounded(lo, "f16", "rn")]
        assert [bf16(q[i, 4] >> 16), bf16(q[i, 4] & 0xFFFF)] == [rounded(hi, "bf16", "rn"), rounded(lo, "bf16", "rn")]
        assert q[i, 5] == (x < y), i
        assert F(float(of[2 * i])) == x and F(float(of[2 * i + 1])) == bx, i


HALF_APPROX = r"""
extern "C" __global__ void approx(const unsigned short* h, const unsigned short* g, unsigned short* o, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
    unsigned short x = h[i], b = g[i], *r = o + 4 * i;
    asm("tanh.approx.f16 %0, %1;" : "=h"(r[0]) : "h"(x)); asm("tanh.approx.bf16 %0, %1;" : "=h"(r[1]) : "h"(b));
    asm("ex2.approx.f16 %0, %1;" : "=h"(r[2]) : "h"(x)); asm("ex2.approx.ftz.bf16 %0, %1;" : "=h"(r[3]) : "h"(b));
}"""


def test_f16_bf16_tanh_and_ex2_approx_are_the_function_rounded_once(cuda, rng):
    """numba's bfloat16 math (tanh) and cuda_fp16's h2exp emit these; .approx is computed correctly rounded."""
    f = cuda.kernel(HALF_APPROX, "approx")
    n = 64
    h = rng.uniform(-4, 4, n).astype(np.float16)
    g = (rng.uniform(-4, 4, n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # bf16 bits
    out = cuda.poisoned(np.zeros(4 * n, dtype=np.uint16))
    cuda.launch(f, (1,), (64,), cuda.upload(h.view(np.uint16)), cuda.upload(g), out, np.uint32(n))
    r = cuda.download(out, np.zeros(4 * n, dtype=np.uint16)).reshape(n, 4)
    got_f16 = r[:, [0, 2]].copy().view(np.float16)
    got_bf16 = bf16_values(r[:, [1, 3]].copy())
    for i in range(n):
        x, b = float(h[i]), float(bf16_values(g[i:i + 1])[0])
        assert Fraction(float(got_f16[i, 0])) == rounded(Fraction(np.tanh(x)), "f16", "rn"), i
        assert Fraction(float(got_f16[i, 1])) == rounded(Fraction(np.exp2(x)), "f16", "rn"), i
        assert Fraction(float(got_bf16[i, 0])) == rounded(Fraction(np.tanh(b)), "bf16", "rn"), i
        assert Fraction(float(got_bf16[i, 1])) == rounded(Fraction(np.exp2(b)), "bf16", "rn"), i


LONG = "k_" + "averyveryverylongkernelname" * 11  # 299 characters, like numba's mangled names
LONG_SOURCE = r"""
namespace outer_namespace_with_a_long_name { namespace inner_namespace_with_an_even_longer_name_than_that {
template <typename T> __device__ __noinline__ T scaled_by_a_template_parameter_of_some_length(T v) { return v * 3; }
} }
extern "C" __device__ __noinline__ float HELPER(float value) { return value + 1.0f; }
extern "C" __global__ void KERNEL(float* PARAM, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) PARAM[i] = HELPER(outer_namespace_with_a_long_name::inner_namespace_with_an_even_longer_name_than_that::
                                 scaled_by_a_template_parameter_of_some_length<float>(PARAM[i]));
}""".replace("KERNEL", LONG).replace("HELPER", "h_" + "helperfunctionname" * 10).replace("PARAM", "p_" + "x" * 200)


def test_identifiers_of_any_length(cuda, rng):
    ptx = cuda.ptx(LONG_SOURCE).decode()
    assert any(len(w) > 150 for w in ptx.split() if w.startswith("_ZN"))  # the mangled callee, too
    f = cuda.ok(cuda.d.cuModuleGetFunction(cuda.module(LONG_SOURCE), LONG.encode()))
    assert cuda.ok(cuda.d.cuFuncGetName(f)).decode() == LONG
    x = rng.integers(-100, 100, 50).astype(np.float32)
    dx = cuda.upload(x)
    cuda.launch(f, (1,), (64,), dx, np.uint32(50))
    assert np.array_equal(cuda.download(dx, x), x * 3 + 1)


def test_committed_ptx_coverage_table_is_current(fake):
    coverage = fake.lib.ironaccel_fake_ptx_coverage
    coverage.restype = ctypes.c_char_p
    committed = Path(fakes.source_dir(), "PTX_COVERAGE.md").read_text()
    assert committed == coverage().decode(), "stale: run python fakes/cuda/gen_coverage.py"
    assert "| `shf.l` | .b32 | .wrap .clamp |" in committed


@pytest.mark.parametrize("inst, named", [("min.NaN.f32 %f1, %f1, %f1;", ".NaN are supported on f16/bf16 types only"),
                                         ("add.sat.s32 %r1, %r1, %r1;", ".sat is supported on float types only"),
                                         ("add.rz.f16 %h1, %h1, %h1;", "rounds to nearest (.rn) only"),
                                         ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 %f1, %f1;",
                                          "tensor-core matrix instructions are not implemented")])
def test_unsupported_form_fails_the_load_naming_it(cuda, capfd, inst, named):
    ptx = (".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n"
           f"\t.reg .f32 %f<2>;\n\t.reg .b32 %r<2>;\n\t.reg .b16 %h<2>;\n\t{inst}\n\tret;\n}}\n\0").encode()
    assert cuda.err(cuda.d.cuModuleLoadData(ptx)) == cuda.d.CUresult.CUDA_ERROR_INVALID_PTX
    err = capfd.readouterr().err
    assert "line 9: " in err and named in err, err


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


SAD_DOT_SET = r"""
extern "C" __global__ void sds(const int* a, const int* b, const int* c, const unsigned short* h, int* o, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
    int x = a[i], y = b[i], z = c[i], *r = o + 12 * i;
    r[0] = __sad(x, y, z); r[1] = __usad(x, y, z);
    r[2] = __dp4a(x, y, z); r[3] = __dp4a((unsigned)x, (unsigned)y, (unsigned)z);
    r[4] = __dp2a_lo(x, y, z); r[5] = __dp2a_hi((unsigned)x, (unsigned)y, (unsigned)z);
    asm("set.lt.u32.s32 %0, %1, %2;" : "=r"(r[6]) : "r"(x), "r"(y));
    asm("set.lt.u32.u32 %0, %1, %2;" : "=r"(r[7]) : "r"(x), "r"(y));
    asm("set.gt.f32.f32 %0, %1, %2;" : "=r"(r[8]) : "f"((float)x), "f"((float)y));
    asm("{\n\t.reg .pred p;\n\tsetp.ne.s32 p, %3, 0;\n\tset.ge.and.u32.s32 %0, %1, %2, p;\n\t}"
        : "=r"(r[9]) : "r"(x), "r"(y), "r"(z & 1));
    unsigned short e;
    asm("set.le.f16.f16 %0, %1, %2;" : "=h"(e) : "h"(h[2 * i]), "h"(h[2 * i + 1]));
    r[10] = e;
    asm("set.lt.u32.f16x2 %0, %1, %2;" : "=r"(r[11]) : "r"(h[2 * i] | (unsigned)h[2 * i + 1] << 16),
                                                     "r"(h[2 * i + 1] | (unsigned)h[2 * i] << 16));
}"""


def test_sad_dot_products_and_set(cuda, rng):
    ptx = cuda.ptx(SAD_DOT_SET).decode()
    for inst in ("sad.s32", "sad.u32", "dp4a.s32.s32", "dp4a.u32.u32", "dp2a.lo.s32.s32", "dp2a.hi.u32.u32"):
        assert inst in ptx, inst
    f = cuda.kernel(SAD_DOT_SET, "sds")
    n = 200
    a, b, c = (rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32) for _ in range(3))
    b[:3] = a[:3]  # equal operands
    a[3:5], b[3:5] = [-2**31, 2**31 - 1], [3, -2**31]  # differences past the int range
    h = (rng.standard_normal(2 * n) * 10).astype(np.float16)
    h[1] = h[0]
    o = np.zeros(12 * n, np.int32)
    do = cuda.poisoned(o)
    cuda.launch(f, (1,), (256,), cuda.upload(a), cuda.upload(b), cuda.upload(c), cuda.upload(h.view(np.uint16)), do,
                np.uint32(n))
    r = cuda.download(do, o).reshape(n, 12).view(np.uint32)
    M = 1 << 32

    def parts(v, width, signed):
        out = [(v >> (width * k)) & ((1 << width) - 1) for k in range(32 // width)]
        return [p - (1 << width) if signed and p >> (width - 1) else p for p in out]

    for i in range(n):
        x, y, z = int(a[i]), int(b[i]), int(c[i])
        ux, uy = x % M, y % M
        dot4 = sum(p * q for p, q in zip(parts(ux, 8, True), parts(uy, 8, True))) + z
        udot4 = sum(p * q for p, q in zip(parts(ux, 8, False), parts(uy, 8, False))) + z
        dot2lo = sum(p * q for p, q in zip(parts(ux, 16, True), parts(uy, 8, True)[:2])) + z
        udot2hi = sum(p * q for p, q in zip(parts(ux, 16, False), parts(uy, 8, False)[2:])) + z
        hx, hy = float(h[2 * i]), float(h[2 * i + 1])
        want = [(z + abs(x - y)) % M, (z + abs(ux - uy)) % M, dot4 % M, udot4 % M, dot2lo % M, udot2hi % M,
                M - 1 if x < y else 0, M - 1 if ux < uy else 0,
                0x3F800000 if float(np.float32(x)) > float(np.float32(y)) else 0,
                M - 1 if x >= y and z & 1 else 0, 0x3C00 if hx <= hy else 0,
                (0xFFFF if hx < hy else 0) | (0xFFFF0000 if hy < hx else 0)]
        assert [int(v) for v in r[i]] == want, i


MINMAX_X2 = r"""
extern "C" __global__ void mm(const unsigned* a, const unsigned* b, unsigned* o, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
    asm("min.s16x2 %0, %1, %2;" : "=r"(o[4 * i]) : "r"(a[i]), "r"(b[i]));
    asm("min.u16x2 %0, %1, %2;" : "=r"(o[4 * i + 1]) : "r"(a[i]), "r"(b[i]));
    asm("max.s16x2 %0, %1, %2;" : "=r"(o[4 * i + 2]) : "r"(a[i]), "r"(b[i]));
    asm("max.u16x2 %0, %1, %2;" : "=r"(o[4 * i + 3]) : "r"(a[i]), "r"(b[i]));
}"""


def test_min_max_of_16_bit_integer_pairs(cuda, rng):
    """min/max.{s16x2,u16x2} (sm_90; CUB's compute_120 PTX has them) work on each half on its own."""
    f = cuda.kernel(MINMAX_X2, "mm")
    n = 256
    a, b = (rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    a[:4], b[:4] = [0x80007FFF, 0x00010000, 0xFFFF0001, 7], [0x7FFF8000, 0x00000001, 0x0001FFFF, 7]
    o = np.zeros(4 * n, np.uint32)
    do = cuda.poisoned(o)
    cuda.launch(f, (1,), (256,), cuda.upload(a), cuda.upload(b), do, np.uint32(n))
    got = cuda.download(do, o).reshape(n, 4)
    def halves(v, t):
        return v.view(np.uint16).view(t).reshape(n, 2)

    want = [np.minimum(halves(a, np.int16), halves(b, np.int16)), np.minimum(halves(a, np.uint16), halves(b, np.uint16)),
            np.maximum(halves(a, np.int16), halves(b, np.int16)), np.maximum(halves(a, np.uint16), halves(b, np.uint16))]
    for k, w in enumerate(want):
        np.testing.assert_array_equal(got[:, k], w.view(np.uint16).reshape(n, 2).copy().view(np.uint32).ravel(), str(k))


def toolkit_include() -> Path | None:
    """A CUDA toolkit's include directory (cuda_fp16.h, CUB, cooperative groups), where one is installed."""
    for d in sorted(Path("/usr/local").glob("cuda*/include"), reverse=True):
        if (d / "cuda_fp16.h").is_file() and (d / "cccl").is_dir():
            return d
    return None


HEADERS = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
namespace cg = cooperative_groups;
extern "C" __global__ void library(const __half* h, const __nv_bfloat16* b, const float* f, const int* v,
                                   __half* oh, __nv_bfloat16* ob, float* of, int* oi) {
    unsigned t = threadIdx.x;
    __half x = h[2 * t], y = h[2 * t + 1];
    oh[4 * t] = __hadd(x, y); oh[4 * t + 1] = __hmul(x, y); oh[4 * t + 2] = __hfma(x, y, x);
    oh[4 * t + 3] = __float2half_rz(f[t]);
    __nv_bfloat16 bx = b[2 * t], by = b[2 * t + 1];
    ob[2 * t] = __hadd(bx, by); ob[2 * t + 1] = __float2bfloat16_rn(f[t]);
    of[2 * t] = __half2float(x) + __bfloat162float(bx); of[2 * t + 1] = (float)(x < y) + 2.0f * (float)(bx > by);
    using Reduce = cub::BlockReduce<int, 128>; using Scan = cub::BlockScan<int, 128>;
    __shared__ typename Reduce::TempStorage rs; __shared__ typename Scan::TempStorage ss;
    int sum = Reduce(rs).Sum(v[t]);
    __syncthreads();
    int prefix;
    Scan(ss).ExclusiveSum(v[t], prefix);
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(cg::this_thread_block());
    int warp_max = cg::reduce(warp, v[t], cg::greater<int>());
    oi[2 * t] = prefix; oi[2 * t + 1] = warp_max;
    if (t == 0) oi[256] = sum;
}"""


@pytest.mark.skipif(toolkit_include() is None, reason="no CUDA toolkit headers (cuda_fp16.h, CUB) installed here")
def test_library_headers_fp16_bf16_cub_cooperative_groups(cuda, rng):
    n = cuda.nvrtc
    inc = toolkit_include()
    err, prog = n.nvrtcCreateProgram(HEADERS.encode(), b"lib.cu", 0, [], [])
    opts = [b"--gpu-architecture=compute_90", b"--std=c++17", f"-I{inc}".encode(), f"-I{inc / 'cccl'}".encode()]
    assert n.nvrtcCompileProgram(prog, len(opts), opts)[0] == n.nvrtcResult.NVRTC_SUCCESS
    _, size = n.nvrtcGetPTXSize(prog)
    ptx = b" " * size
    n.nvrtcGetPTX(prog, ptx)
    f = cuda.ok(cuda.d.cuModuleGetFunction(cuda.ok(cuda.d.cuModuleLoadData(ptx)), b"library"))
    h = (rng.standard_normal(256) * 8).astype(np.float16)
    g = (rng.standard_normal(256) * 8).astype(np.float32)
    gb = (g.view(np.uint32) >> 16).astype(np.uint16)
    fv = (rng.standard_normal(128) * 100).astype(np.float32)
    v = rng.integers(-1000, 1000, 128).astype(np.int32)
    oh, ob = np.zeros(512, np.uint16), np.zeros(256, np.uint16)
    of, oi = np.zeros(256, np.float32), np.zeros(257, np.int32)
    outs = [cuda.poisoned(a) for a in (oh, ob, of, oi)]
    ins = [cuda.upload(a) for a in (h.view(np.uint16), gb, fv, v)]
    cuda.launch(f, (1,), (128,), *ins, *outs)
    oh, ob, of, oi = (cuda.download(p, a) for p, a in zip(outs, (oh, ob, of, oi)))
    x, y = h[0::2], h[1::2]
    got16 = oh.view(np.float16).reshape(128, 4)
    assert np.array_equal(got16[:, 0], x + y) and np.array_equal(got16[:, 1], x * y)
    want_fma = [rounded(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(a)), "f16", "rn")
                for a, b in zip(x, y)]
    assert [as_fraction(v) for v in got16[:, 2]] == want_fma
    assert [as_fraction(v) for v in got16[:, 3]] == [rounded(Fraction(float(a)), "f16", "rz") for a in fv]
    bx, by = bf16_values(gb[0::2]), bf16_values(gb[1::2])
    gotb = bf16_values(ob).reshape(128, 2)
    assert [as_fraction(v) for v in gotb[:, 0]] == [rounded(Fraction(float(a)) + Fraction(float(b)), "bf16", "rn")
                                                    for a, b in zip(bx, by)]
    assert [as_fraction(v) for v in gotb[:, 1]] == [rounded(Fraction(float(a)), "bf16", "rn") for a in fv]
    of = of.reshape(128, 2)
    assert np.array_equal(of[:, 0], x.astype(np.float32) + bx)
    assert np.array_equal(of[:, 1], (x < y).astype(np.float32) + 2 * (bx > by))
    oi2 = oi[:256].reshape(128, 2)
    assert np.array_equal(oi2[:, 0], np.concatenate([[0], np.cumsum(v)[:-1]]))
    assert np.array_equal(oi2[:, 1], np.repeat(v.reshape(4, 32).max(axis=1), 32))
    assert oi[256] == v.sum()


def test_switch_dispatch_and_trace_builds_compute_the_same(tmp_path):
    """The interpreter's other dispatch (a plain switch) and its tracing build, built and run in a child."""
    src = fakes.source_dir()
    lib = tmp_path / "libcuda.so.1"
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    build = subprocess.run([cc, *fakes.CFLAGS, "-O0", "-DFAKECUDA_SWITCH_DISPATCH", "-DFAKECUDA_TRACE", "-o", str(lib),
                            *map(str, sorted(src.glob("*.c"))), "-lpthread", "-lm"], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    code = textwrap.dedent(f"""
        import ctypes, os, sys
        import numpy as np
        lib = ctypes.CDLL({str(lib)!r}, mode=os.RTLD_GLOBAL)
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from cuda.bindings import driver
        from ironaccel import fakes
        assert driver.cuInit(0)[0] == 0
        from conftest import Cuda
        cuda = Cuda(fakes.Control(lib))
        out = cuda.poisoned(np.zeros(40, np.uint32))
        cuda.launch(cuda.kernel({CONFORMANCE!r}, "busy"), (1,), (64,), out, np.uint32(7), np.uint32(40))
        print(*cuda.download(out, np.zeros(40, np.uint32)))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [int(v) for v in r.stdout.split()] == list(lcg(40, 7))
    assert "fakecuda trace: block (0,0,0) thread 63 pc " in r.stderr and " MAD_LO_I32\n" in r.stderr


MUTATE = r"""
import random, re, sys
import numpy as np
from cuda.bindings import driver as d
assert d.cuInit(0)[0] == 0
source = sys.stdin.buffer.read()
rng = random.Random(1234)
ctx = d.cuCtxCreate(None, 0, 0)[1]
buf = d.cuMemAlloc(1 << 20)[1]
loaded = 0
for _ in range(150):
    toks = re.split(rb"(\s+)", source)
    for _ in range(rng.randint(1, 4)):
        k = rng.randrange(len(toks))
        op = rng.randrange(4)
        if op == 0:
            toks[k] = b""
        elif op == 1:
            toks.insert(k, toks[rng.randrange(len(toks))])
        elif op == 2 and toks[k]:
            t = bytearray(toks[k])
            t[rng.randrange(len(t))] = rng.choice(b"0123456789%_rdfp.-")
            toks[k] = bytes(t)
        else:
            toks[k] = rng.choice([b"%r1", b"%rd1", b"%f1", b"%p1", b"0", b"-1", b"4096", b"%tid.x", b"{", b"}"])
    text = b"".join(toks) + b"\0"
    err, mod = d.cuModuleLoadData(text)
    if err:
        continue
    loaded += 1
    for name in re.findall(rb"\.entry\s+([\w$]+)", text)[:2]:
        err, f = d.cuModuleGetFunction(mod, name)
        if err:
            continue
        params = np.full(64, int(buf), np.uint64)
        size = np.array([params.nbytes], np.uint64)
        extra = np.array([1, params.ctypes.data, 2, size.ctypes.data, 0], np.uint64)
        d.cuLaunchKernel(f, 2, 1, 1, 64, 1, 1, 0, 0, 0, extra.ctypes.data)
        if d.cuCtxSynchronize()[0]:  # a fault is sticky: start over in a new context
            d.cuCtxDestroy(ctx)
            ctx, mod = d.cuCtxCreate(None, 0, 0)[1], None
            buf = d.cuMemAlloc(1 << 20)[1]
            break
    if mod is not None:
        d.cuModuleUnload(mod)
print("loaded", loaded)
"""


def test_mutated_ptx_never_crashes_or_hangs(cuda):
    """Mutated PTX (tokens dropped, repeated, altered) either fails the load or runs: no signal, no hang."""
    env = fakes.child_env()
    env.update(IRONACCEL_FAKE_WATCHDOG_S="0.2", IRONACCEL_FAKE_CUDA_LEAKS="off")
    r = subprocess.run([sys.executable, "-c", MUTATE], input=cuda.ptx(CONFORMANCE + INTEGER_OPS + FLOAT_OPS),
                       env=env, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    assert int(r.stdout.split()[-1]) > 10  # enough of them load and run to matter


def test_nanosleep_sleeps(cuda):
    f = cuda.kernel(r"""
    extern "C" __global__ void naps(unsigned* out, unsigned n)
    { for (unsigned k = 0; k < n; k++) __nanosleep(1000000); out[threadIdx.x] = n; }""", "naps")
    out = cuda.poisoned(np.zeros(1, np.uint32))
    t0 = time.monotonic()
    cuda.launch(f, (1,), (1,), out, np.uint32(20))
    assert time.monotonic() - t0 >= 0.019  # 20 x 1 ms (the most one nanosleep may take)
    assert cuda.download(out, np.zeros(1, np.uint32))[0] == 20


COMPARE_BRANCH = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry branches(.param .u64 out)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r2, 0;
$L1:
    add.s32 %r2, %r2, 1;
    setp.lt.s32 %p1, %r2, 10;
    @%p1 bra $L1;
    selp.u32 %r6, 1, 0, %p1;
    mov.u32 %r3, 0;
$L2:
    add.s32 %r3, %r3, 1;
    setp.eq.u32 %p2, %r3, 5;
    @!%p2 bra $L2;
    mov.u32 %r4, 0;
    setp.eq.s32 %p1, %r4, 0;
    bra.uni $L5;
$L4:
    setp.ne.s32 %p1, %r4, 0;
$L5:
    @%p1 bra $L6;
    add.s32 %r4, %r4, 7;
$L6:
    mov.u32 %r5, 3;
    setp.eq.s32 %p2, %r5, 3;
    setp.eq.s32 %p1, %r5, 3;
    @!%p2 setp.ne.s32 %p1, %r5, 3;
    @%p1 bra $L7;
    add.s32 %r5, %r5, 1000;
$L7:
    st.global.v4.u32 [%rd1], {%r2, %r3, %r4, %r5};
    st.global.u32 [%rd1+16], %r6;
    ret;
}
\0"""


def test_compare_and_branch_fusion_keeps_branch_semantics(cuda):
    """setp + @p bra run as one instruction, except where a label lands on the bra or the setp is guarded."""
    f = cuda.ok(cuda.d.cuModuleGetFunction(cuda.ok(cuda.d.cuModuleLoadData(COMPARE_BRANCH)), b"branches"))
    out = cuda.poisoned(np.zeros(5, np.uint32))
    cuda.launch(f, (1,), (1,), out)
    assert list(cuda.download(out, np.zeros(5, np.uint32))) == [10, 5, 0, 3, 0]


# numba-cuda's test_sm.py::test_dynshared_slice_gaps as NVVM compiles it: the extern shared array is declared
# 16-aligned, so its seven int32 are read back as two ld.shared.v4 (bytes 0..15 and 16..31) although the launch
# asked for 28 bytes. Shared memory is allocated in 128-byte units, so the H200 reads the last vector without a
# fault and the kernel writes [99, 1, 2, 99, 3, 4, 99]; lane 3 of the second vector is past the 28 bytes and
# unspecified. A read past the whole unit (byte 128) is still out of the block's shared memory.
DYNSHARED_SLICE_GAPS = b"""
.version 8.0
.target sm_90
.address_size 64
.extern .shared .align 16 .b8 smem[];
.visible .entry slice_gaps(.param .u64 out, .param .u32 past)
{
    .reg .b32 %r<24>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r8, 99;
    st.shared.v4.u32 [smem], {%r8, %r8, %r8, %r8};
    st.shared.v2.u32 [smem+16], {%r8, %r8};
    st.shared.u32 [smem+24], %r8;
    mov.u64 %rd2, smem;
    mov.u32 %r1, 1;
    mov.u32 %r2, 2;
    mov.u32 %r3, 3;
    mov.u32 %r4, 4;
    st.shared.u32 [%rd2+4], %r1;
    st.shared.u32 [%rd2+8], %r2;
    st.shared.u32 [%rd2+16], %r3;
    st.shared.u32 [%rd2+20], %r4;
    ld.shared.v4.u32 {%r10, %r11, %r12, %r13}, [smem];
    ld.shared.v4.u32 {%r14, %r15, %r16, %r17}, [smem+16];
    st.global.v4.u32 [%rd1], {%r10, %r11, %r12, %r13};
    st.global.v2.u32 [%rd1+16], {%r14, %r15};
    st.global.u32 [%rd1+24], %r16;
    ld.param.u32 %r18, [past];
    ld.shared.u32 %r19, [%r18];
    st.global.u32 [%rd1+28], %r19;
    ret;
}
\0"""


def test_dynamic_shared_read_past_the_bytes_asked_inside_the_allocation_unit(cuda):
    f = cuda.ok(cuda.d.cuModuleGetFunction(cuda.ok(cuda.d.cuModuleLoadData(DYNSHARED_SLICE_GAPS)), b"slice_gaps"))
    out = cuda.poisoned(np.zeros(8, np.int32))
    cuda.launch(f, (1,), (1,), out, np.uint32(124), shared=28)
    assert list(cuda.download(out, np.zeros(8, np.int32))[:7]) == [99, 1, 2, 99, 3, 4, 99]
    cuda.launch(f, (1,), (1,), out, np.uint32(128), shared=28, sync=False)
    assert cuda.err(cuda.d.cuCtxSynchronize()) == cuda.d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    assert "invalid shared read of 4 bytes at 0x80" in cuda.control.last_report()


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


# Static shared memory is a kernel's, not a module's: two kernels of 40 KiB each (CuPy's CUB module declares
# hundreds), a device function both call naming a third variable, and dynamic memory one of them uses. Each
# kernel gets the variables it and its callees name, at most 48 KiB; `common` has one address for both.
PER_KERNEL_SHARED = b"""
.version 8.0
.target sm_90
.address_size 64
.shared .align 4 .b8 big_a[40960];
.shared .align 4 .b8 big_b[40960];
.shared .align 4 .b8 common[256];
.extern .shared .align 16 .b8 dyn[];
.func (.param .b32 func_retval0) twice(.param .b32 x)
{
    .reg .b32 %r<3>;
    ld.param.b32 %r1, [x];
    st.shared.u32 [common+252], %r1;
    ld.shared.u32 %r2, [common+252];
    add.u32 %r2, %r2, %r2;
    st.param.b32 [func_retval0], %r2;
    ret;
}
.visible .entry kernel_a(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, 7;
    st.shared.u32 [big_a+40956], %r1;
    ld.shared.u32 %r2, [big_a+40956];
    { .param .b32 p; .param .b32 q; st.param.b32 [p], %r2; call.uni (q), twice, (p); ld.param.b32 %r3, [q]; }
    st.global.u32 [%rd1], %r3;
    ret;
}
.visible .entry kernel_b(.param .u64 out)
{
    .reg .b32 %r<6>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, 5;
    st.shared.u32 [big_b], %r1;
    mov.u32 %r4, 6;
    st.shared.u32 [dyn+4092], %r4;
    ld.shared.u32 %r2, [big_b];
    ld.shared.u32 %r5, [dyn+4092];
    add.u32 %r2, %r2, %r5;
    { .param .b32 p; .param .b32 q; st.param.b32 [p], %r2; call.uni (q), twice, (p); ld.param.b32 %r3, [q]; }
    st.global.u32 [%rd1], %r3;
    ret;
}
\0"""


def test_static_shared_memory_is_bounded_per_kernel_not_per_module(cuda):
    d, attr = cuda.d, cuda.d.CUfunction_attribute
    module = cuda.ok(d.cuModuleLoadData(PER_KERNEL_SHARED))  # 80 KiB declared in all: loads
    out = cuda.poisoned(np.zeros(1, np.uint32))
    for name, shared, want in ((b"kernel_a", 0, 14), (b"kernel_b", 4096, 22)):
        f = cuda.ok(d.cuModuleGetFunction(module, name))
        assert cuda.ok(d.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f)) == 40960 + 256
        assert cuda.ok(d.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f)) == 49152 - 41216
        cuda.launch(f, (1,), (1,), out, shared=shared)
        assert cuda.download(out, np.zeros(1, np.uint32))[0] == want
    one_kernel_too_much = PER_KERNEL_SHARED.replace(b"st.shared.u32 [big_b], %r1;", b"st.shared.u32 [big_a], %r1;")
    assert cuda.err(d.cuModuleLoadData(one_kernel_too_much)) == d.CUresult.CUDA_ERROR_INVALID_PTX
