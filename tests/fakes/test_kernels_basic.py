"""CUDA C++ kernels compiled by NVRTC and run by the fake's PTX interpreter, checked against numpy: whole programs
(fills, saxpy, 2D/3D indexing, shared-memory reduction, atomics, argument packing, warp shuffles, matmul, calls)."""

import numpy as np
import pytest

from kernelsrc import lcg


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
