"""Integer PTX the interpreter runs bit-exactly: the integer instruction classes, carry chains, funnel shifts,
sad/dp4a/dp2a/set and 16-bit pair min/max, checked against Python integers."""

import numpy as np

from kernelsrc import INTEGER_OPS


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
