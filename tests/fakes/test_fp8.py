"""cvt to and from pairs of 8-bit floats (.e4m3x2, .e5m2x2: what numba's and CUDA's fp8 types emit), checked
against ml_dtypes' float8_e4m3fn and float8_e5m2."""

import numpy as np
import pytest

PTX = r'''
.version 8.6
.target sm_90
.address_size 64
.visible .entry f8(.param .u64 src, .param .u64 dst, .param .u32 relu)
{
    .reg .pred %p<2>;
    .reg .b16 %rs<5>;
    .reg .b32 %r<8>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [dst];
    ld.param.u32 %r7, [relu];
    setp.ne.u32 %p1, %r7, 0;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 8;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.v2.f32 {%f1, %f2}, [%rd4];
    mul.wide.u32 %rd3, %r1, 16;
    add.s64 %rd5, %rd2, %rd3;
    cvt.rn.satfinite.e4m3x2.f32 %rs1, %f1, %f2;
    cvt.rn.satfinite.e5m2x2.f32 %rs2, %f1, %f2;
    cvt.rn.f16x2.e4m3x2 %r2, %rs1;
    cvt.rn.f16x2.e5m2x2 %r3, %rs2;
    @%p1 cvt.rn.relu.f16x2.e4m3x2 %r2, %rs1;
    @%p1 cvt.rn.relu.f16x2.e5m2x2 %r3, %rs2;
    @%p1 cvt.rn.satfinite.relu.e4m3x2.f32 %rs1, %f1, %f2;
    @%p1 cvt.rn.satfinite.relu.e5m2x2.f32 %rs2, %f1, %f2;
    st.global.u16 [%rd5], %rs1;
    st.global.u16 [%rd5+2], %rs2;
    st.global.u32 [%rd5+4], %r2;
    st.global.u32 [%rd5+8], %r3;
    mov.b32 %r4, {%rs2, %rs1};
    cvt.rn.satfinite.e4m3x2.f16x2 %rs3, %r4;
    st.global.u16 [%rd5+12], %rs3;
    ret;
}
'''

DTYPE = np.dtype([("e4m3", "<u2"), ("e5m2", "<u2"), ("h4", "<u4"), ("h5", "<u4"), ("from_half", "<u2"),
                  ("pad", "<u2")])


def _to_f8(values, dtype, largest, relu):
    """Round to nearest even with .satfinite: beyond the largest finite is the largest; NaN is 0x7F."""
    v = np.asarray(values, np.float32)
    if relu:
        v = np.where(np.isnan(v) | (v > 0), v, np.float32(0))  # -0.0 becomes +0 too
    bits = np.clip(v, -largest, largest).astype(dtype).view(np.uint8)
    return np.where(np.isnan(v), np.uint8(0x7F), bits)


def _pair(hi, lo):
    return hi.astype(np.uint16) << 8 | lo.astype(np.uint16)


@pytest.mark.parametrize("relu", [0, 1])
def test_cvt_to_and_from_8_bit_float_pairs_matches_ml_dtypes(cuda, rng, relu):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    d = cuda.d
    f = cuda.ok(d.cuModuleGetFunction(cuda.ok(d.cuModuleLoadData(PTX.encode() + b"\0")), b"f8"))
    special = [0.0, -0.0, np.nan, np.inf, -np.inf, 448.0, 449.0, 464.0, 480.0, -1e6, 57344.0, 61440.0, 2.0 ** -9,
               2.0 ** -10, 3 * 2.0 ** -11, 2.0 ** -16, 2.0 ** -17, 1.0625, 1.1875, -0.3, 240.0, 256.0]
    values = np.concatenate([np.array(special, np.float32),
                             (rng.standard_normal(106) * rng.choice([1e-3, 1.0, 100.0, 1e4], 106)).astype(np.float32)])
    src = values.reshape(-1, 2)  # thread i converts the pair (src[i, 0], src[i, 1]): the first in the high byte
    n = len(src)
    out = np.zeros(n, DTYPE)
    dout = cuda.poisoned(out)
    cuda.launch(f, (1,), (n,), cuda.upload(src), dout, np.uint32(relu))
    got = cuda.download(dout, out)
    e4 = [_to_f8(src[:, k], ml_dtypes.float8_e4m3fn, 448.0, relu) for k in (0, 1)]
    e5 = [_to_f8(src[:, k], ml_dtypes.float8_e5m2, 57344.0, relu) for k in (0, 1)]
    assert got["e4m3"].tolist() == _pair(*e4).tolist()
    assert got["e5m2"].tolist() == _pair(*e5).tolist()

    def widened(pairs, dtype):  # each byte's exact value as f16, NaN as 0x7FFF; the low byte in the low half
        halves = [(pairs >> s & 0xFF).astype(np.uint8).view(dtype).astype(np.float16) for s in (0, 8)]
        if relu:  # negative values (-0 too) become +0
            halves = [np.where(~np.isnan(h) & np.signbit(h), np.float16(0), h) for h in halves]
        halves = [np.where(np.isnan(h), np.uint16(0x7FFF), h.view(np.uint16)) for h in halves]
        return (halves[1].astype(np.uint32) << 16 | halves[0]).tolist()

    # widened from the pairs made without .relu (the kernel widens before it packs again with .relu)
    plain4 = _pair(*[_to_f8(src[:, k], ml_dtypes.float8_e4m3fn, 448.0, 0) for k in (0, 1)])
    plain5 = _pair(*[_to_f8(src[:, k], ml_dtypes.float8_e5m2, 57344.0, 0) for k in (0, 1)])
    assert got["h4"].tolist() == widened(plain4, ml_dtypes.float8_e4m3fn)
    assert got["h5"].tolist() == widened(plain5, ml_dtypes.float8_e5m2)
    # from an f16x2 whose high half holds the e4m3 pair's bits and low half the e5m2 pair's, read as halves
    high, low = (got[k].view(np.float16).astype(np.float32) for k in ("e4m3", "e5m2"))
    want = _pair(_to_f8(high, ml_dtypes.float8_e4m3fn, 448.0, 0), _to_f8(low, ml_dtypes.float8_e4m3fn, 448.0, 0))
    assert got["from_half"].tolist() == want.tolist()


def test_8_bit_float_conversions_outside_what_ptx_allows_fail_to_load(cuda):
    d = cuda.d
    for bad in ("cvt.rn.e4m3x2.f32 %rs1, %f1, %f2;",  # .satfinite is required
                "cvt.rz.satfinite.e5m2x2.f32 %rs1, %f1, %f2;",  # .rn only
                "cvt.rn.satfinite.f32.f16 %f1, %rs1;"):  # .satfinite is for 8-bit pairs
        ptx = PTX.replace("cvt.rn.satfinite.e4m3x2.f32 %rs1, %f1, %f2;", bad, 1)
        assert cuda.err(d.cuModuleLoadData(ptx.encode() + b"\0")) == d.CUresult.CUDA_ERROR_INVALID_PTX, bad
