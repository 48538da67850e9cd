"""Where kernels' memory lies and how far it reaches: declared alignment of shared and local arrays, dynamic
shared memory read within its allocation unit, static shared memory bounded per kernel, and module-scope
pointers initialised with a variable's address."""

import numpy as np


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


# Static shared memory is a kernel's, not a module's: two kernels of 40 KiB each (CuPy's CUB module declares
# hundreds), a device function both call naming a third variable, and dynamic memory one of them uses. Each
# kernel gets the variables it and its callees name, at most the block's opt-in maximum (0x38c00 bytes on sm_90,
# what ptxas allowed on the H100); `common` has one address for both.
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
    larger = PER_KERNEL_SHARED.replace(b"[40960]", b"[122880]")  # 240 KiB declared in all, 120 KiB a kernel: loads
    cuda.ok(d.cuModuleUnload(cuda.ok(d.cuModuleLoadData(larger))))
    one_kernel_too_much = larger.replace(b"st.shared.u32 [big_b], %r1;", b"st.shared.u32 [big_a], %r1;")
    assert cuda.err(d.cuModuleLoadData(one_kernel_too_much)) == d.CUresult.CUDA_ERROR_INVALID_PTX


# A table of addresses as module-scope initialisers, in the forms PTX allows and NVRTC writes for `__device__ T *p
# = &x[i]` (generic(x)+8), `= x` (generic(x)) and hand-written PTX writes (x+4: the global-space address).
ADDRESS_INITIALISERS = b"""
.version 8.0
.target sm_90
.address_size 64
.global .align 4 .b8 words[16] = {1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4};
.global .align 8 .u64 table[3] = {generic(words), generic(words)+8, words+4};
.visible .entry deref(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    ld.global.u64 %rd2, [table];
    ld.global.u64 %rd3, [table+8];
    ld.global.u64 %rd4, [table+16];
    ld.u32 %r1, [%rd2];
    ld.u32 %r2, [%rd3];
    ld.global.u32 %r3, [%rd4];
    st.global.v2.u32 [%rd1], {%r1, %r2};
    st.global.u32 [%rd1+8], %r3;
    ret;
}
\0"""


def test_address_initialisers_point_at_their_variable(cuda):
    """generic(x), generic(x)+N and x+N initialise a pointer with x's address (plus N); a name no variable
    or function declared before has is refused as a malformed module."""
    d = cuda.d
    f = cuda.ok(d.cuModuleGetFunction(cuda.ok(d.cuModuleLoadData(ADDRESS_INITIALISERS)), b"deref"))
    like = np.zeros(3, dtype=np.uint32)
    out = cuda.poisoned(like)
    cuda.launch(f, (1,), (1,), out)
    assert cuda.download(out, like).tolist() == [1, 3, 2]
    unknown = ADDRESS_INITIALISERS.replace(b"generic(words)+8", b"generic(nowhere)+8")
    assert cuda.err(d.cuModuleLoadData(unknown)) == d.CUresult.CUDA_ERROR_INVALID_PTX
