"""CUDA C++ kernels whose float results are checked exactly: f32/f64 instruction classes, every rounding mode,
f16/bf16 arithmetic and conversions, .approx functions, and the toolkit headers (cuda_fp16, CUB, cooperative groups)."""

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from kernelsrc import FLOAT_OPS, as_fraction, bf16_values, rounded, sqrt_rounded_ok


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


# mul.f64 then sub.f64 with no rounding modifier: what NVRTC writes for CuPy's float remainder, x - floor(x / y) * y
# (-fmad=true, the default). ptxas contracts the pair into one fma on hardware (the PTX ISA allows it for mul/add
# without a rounding modifier), so the product is not rounded on its own: for x = 255.6, y = 1.2 an H200 gives
# 3.77e-15 (CuPy's unwrap tests depend on it), two roundings give 0. With .rn on both (-fmad=false) nothing is fused.
CONTRACT_PTX = """.version 8.0
.target sm_90
.address_size 64
.visible .entry contract(.param .u64 p_x, .param .u64 p_y, .param .u64 p_out)
{
    .reg .f64 %fd<12>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [p_x];
    ld.param.u64 %rd2, [p_y];
    ld.param.u64 %rd3, [p_out];
    ld.global.f64 %fd1, [%rd1];
    ld.global.f64 %fd2, [%rd2];
    div.rn.f64 %fd3, %fd1, %fd2;
    cvt.rmi.f64.f64 %fd4, %fd3;
    mul.f64 %fd5, %fd4, %fd2;
    sub.f64 %fd6, %fd1, %fd5;
    st.global.f64 [%rd3], %fd6;
    mul.rn.f64 %fd7, %fd4, %fd2;
    sub.rn.f64 %fd8, %fd1, %fd7;
    st.global.f64 [%rd3+8], %fd8;
    mul.f64 %fd9, %fd4, %fd2;
    add.f64 %fd10, %fd9, %fd1;
    st.global.f64 [%rd3+16], %fd10;
    mul.f64 %fd11, %fd4, %fd2;
    sub.f64 %fd11, %fd11, %fd1;
    st.global.f64 [%rd3+24], %fd11;
    st.global.f64 [%rd3+32], %fd9;
    ret;
}
"""


def test_mul_then_add_without_rounding_modifier_is_contracted_as_ptxas_does(cuda):
    f = cuda.ok(cuda.d.cuModuleGetFunction(cuda.ok(cuda.d.cuModuleLoadData(CONTRACT_PTX.encode() + b"\0")),
                                           b"contract"))
    x, y = np.array([255.6]), np.array([1.2])
    out = np.zeros(5)
    dout = cuda.poisoned(out)
    cuda.launch(f, (1,), (1,), cuda.upload(x), cuda.upload(y), dout)
    r = cuda.download(dout, out)
    q = np.floor(x[0] / y[0])
    exact = Fraction(255.6) - Fraction(q) * Fraction(1.2)  # what one fma rounds once
    assert r[0] == float(exact) and r[0] != 0.0, r[0]  # contracted: 3.77e-15, not 0
    assert r[1] == 0.0  # .rn on both: two roundings, as written
    assert r[2] == float(Fraction(q) * Fraction(1.2) + Fraction(255.6))  # add: fma(a, b, c)
    assert r[3] == float(Fraction(q) * Fraction(1.2) - Fraction(255.6))  # product - c (the mul's register reused)
    assert r[4] == q * 1.2  # the product itself is still written, rounded
