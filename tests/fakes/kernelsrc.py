"""Kernel sources and numpy/Fraction oracles that more than one test_kernels_* module uses (a test module imports
no other test module)."""

from fractions import Fraction

import numpy as np


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


def lcg(n, iters):
    """What the busy kernel computes."""
    v = np.arange(n, dtype=np.uint64)
    for _ in range(iters):
        v = (v * 1664525 + 1013904223) & 0xFFFFFFFF
    return v.astype(np.uint32)


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
