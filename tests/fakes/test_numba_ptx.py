"""What numba-cuda's suite needs of the fake that its H200 run showed hardware does (issue 25).

Expected values come from the PTX ISA and the hardware's allocation rules, not from the fake."""

import ctypes

import numpy as np

WARP_SZ_PTX = rb'''
.version 8.0
.target sm_90
.address_size 64
.visible .entry warp_sz(.param .u64 out)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, WARP_SZ;
    sub.s32 %r2, 0, WARP_SZ;
    st.global.u32 [%rd1], %r1;
    st.global.u32 [%rd1+4], %r2;
    ret;
}
'''

# bf16 bits: -1.5 = 0xBFC0, 2.0 = 0x4000, 2.5 = 0x4020, 0x7FC1 a NaN that is not the canonical 0x7FFF
HALVES_PTX = rb'''
.version 8.0
.target sm_90
.address_size 64
.visible .entry halves(.param .u64 out)
{
    .reg .b16 %h<12>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    mov.b16 %h1, 0xBFC0;
    mov.b16 %h2, 0x4000;
    mov.b16 %h3, 0x0000;
    mov.b16 %h6, 0x7FC1;
    fma.rn.relu.bf16 %h4, %h1, %h2, %h3;
    fma.rn.relu.bf16 %h5, %h2, %h2, %h1;
    fma.rn.relu.bf16 %h7, %h6, %h2, %h3;
    max.NaN.bf16 %h8, %h6, %h2;
    min.NaN.bf16 %h9, %h2, %h6;
    max.bf16 %h10, %h6, %h2;
    min.bf16 %h11, %h2, %h6;
    st.global.v4.b16 [%rd1], {%h4, %h5, %h7, %h8};
    st.global.v4.b16 [%rd1+8], {%h9, %h10, %h11, %h3};
    ret;
}
'''

# numba with debug=True: the kernel's input and f1's input each carry their own .weak copy of f2
WEAK_HEADER = b".version 8.0\n.target sm_90\n.address_size 64\n"
WEAK_F2 = b"""
.weak .func (.param .b32 func_retval0) f2(.param .b32 x)
{
    .reg .b32 %r<3>;
    ld.param.b32 %r1, [x];
    add.s32 %r2, %r1, 1;
    st.param.b32 [func_retval0], %r2;
    ret;
}
"""
WEAK_KERNEL = WEAK_HEADER + WEAK_F2 + b"""
.extern .func (.param .b32 func_retval0) f1(.param .b32 x);
.visible .entry kernel(.param .u64 out)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    .param .b32 a;
    .param .b32 r;
    st.param.b32 [a], 5;
    call.uni (r), f1, (a);
    ld.param.b32 %r1, [r];
    call.uni (r), f2, (a);
    ld.param.b32 %r2, [r];
    st.global.v2.u32 [%rd1], {%r1, %r2};
    ret;
}
"""
WEAK_F1 = WEAK_HEADER + WEAK_F2 + b"""
.weak .func (.param .b32 func_retval0) f1(.param .b32 x)
{
    .reg .b32 %r<3>;
    ld.param.b32 %r1, [x];
    .param .b32 a;
    .param .b32 r;
    st.param.b32 [a], %r1;
    call.uni (r), f2, (a);
    ld.param.b32 %r2, [r];
    sub.s32 %r2, %r1, %r2;
    st.param.b32 [func_retval0], %r2;
    ret;
}
"""

MANY_REGISTERS = b""".version 8.0
.target sm_90
.address_size 64
.visible .entry wide(.param .u64 out) MAXNREG
{
    .reg .b32 %r<200>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r199, 7;
    st.global.u32 [%rd1], %r199;
    ret;
}
"""

PAST_THE_END = r'''
extern "C" __global__ void axpy(int* r, int a, const int* x, const int* y, unsigned n)
{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) r[i] = a * x[i] + y[i]; }
'''


def test_warp_sz_is_the_warp_size(cuda):
    """WARP_SZ is PTX's predefined constant for the warp size, 32 (PTX ISA, "Predefined Identifiers");
    numba's cuda.warpsize compiles to it."""
    f = cuda.ok(cuda.d.cuModuleGetFunction(cuda.ok(cuda.d.cuModuleLoadData(WARP_SZ_PTX + b"\0")), b"warp_sz"))
    out = cuda.poisoned(np.zeros(2, np.int32))
    cuda.launch(f, (1,), (1,), out)
    assert list(cuda.download(out, np.zeros(2, np.int32))) == [32, -32]


def test_bf16_fma_relu_and_nan_propagating_min_max(cuda):
    """numba's hfma_relu / hmax_nan / hmin_nan (PTX ISA: fma.relu clamps a negative result to 0, .NaN min/max
    give NaN when an operand is NaN, both as the canonical NaN 0x7FFF; without .NaN the other operand)."""
    f = cuda.ok(cuda.d.cuModuleGetFunction(cuda.ok(cuda.d.cuModuleLoadData(HALVES_PTX + b"\0")), b"halves"))
    out = cuda.poisoned(np.zeros(8, np.uint16))
    cuda.launch(f, (1,), (1,), out)
    got = [hex(v) for v in cuda.download(out, np.zeros(8, np.uint16))]
    assert got == ["0x0", "0x4020", "0x7fff", "0x7fff", "0x7fff", "0x4000", "0x4000", "0x0"]


def _link(cuda, *inputs):
    d = cuda.d
    state = cuda.ok(d.cuLinkCreate(0, [], []))
    for i, ptx in enumerate(inputs):
        image = ptx + b"\0"
        err = cuda.err(d.cuLinkAddData(state, d.CUjitInputType.CU_JIT_INPUT_PTX, image, len(image), b"in%d" % i,
                                       0, [], []))
        assert err == d.CUresult.CUDA_SUCCESS
    err, *rest = d.cuLinkComplete(state)
    linked = ctypes.string_at(int(rest[0]), rest[1]) if err == d.CUresult.CUDA_SUCCESS else None
    cuda.ok(d.cuLinkDestroy(state))
    return err, linked


def test_a_weak_function_defined_by_two_linked_inputs_keeps_one_definition(cuda):
    """numba's test_chained_device_function_two_calls (debug=True): f2 is .weak in two inputs. The linker
    keeps one; f1(5) = 5 - f2(5) = -1 and f2(5) = 6."""
    err, linked = _link(cuda, WEAK_KERNEL, WEAK_F1)
    assert err == cuda.d.CUresult.CUDA_SUCCESS, cuda.control.last_report()
    f = cuda.ok(cuda.d.cuModuleGetFunction(cuda.ok(cuda.d.cuModuleLoadData(linked)), b"kernel"))
    out = cuda.poisoned(np.zeros(2, np.int32))
    cuda.launch(f, (1,), (1,), out)
    assert list(cuda.download(out, np.zeros(2, np.int32))) == [-1, 6]


def test_a_function_defined_twice_without_weak_still_fails_the_link(cuda):
    strong = WEAK_HEADER + WEAK_F2.replace(b".weak", b".visible")
    err, _ = _link(cuda, strong, strong)
    assert err == cuda.d.CUresult.CUDA_ERROR_INVALID_PTX


def _num_regs(cuda, module):
    f = cuda.ok(cuda.d.cuModuleGetFunction(module, b"wide"))
    out = cuda.poisoned(np.zeros(1, np.uint32))
    cuda.launch(f, (1,), (1,), out)  # a bound on the figure changes nothing the kernel computes
    assert cuda.download(out, np.zeros(1, np.uint32))[0] == 7
    return cuda.ok(cuda.d.cuFuncGetAttribute(cuda.d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, f))


def test_register_limits_bound_num_regs(cuda):
    """numba's max_registers (test_set_registers_*): CU_JIT_MAX_REGISTERS of cuLinkCreate (and of a direct
    cuModuleLoadDataEx) and a function's .maxnreg bound CU_FUNC_ATTRIBUTE_NUM_REGS, as ptxas's allocation is
    bounded by them; without a limit this kernel reports more than 57."""
    d = cuda.d
    plain = MANY_REGISTERS.replace(b"MAXNREG", b"")
    assert _num_regs(cuda, cuda.ok(d.cuModuleLoadData(plain + b"\0"))) > 57
    assert _num_regs(cuda, cuda.ok(d.cuModuleLoadData(MANY_REGISTERS.replace(b"MAXNREG", b".maxnreg 40") + b"\0"))) <= 40
    opt = d.CUjit_option.CU_JIT_MAX_REGISTERS
    assert _num_regs(cuda, cuda.ok(d.cuModuleLoadDataEx(plain + b"\0", 1, [opt], [38]))) <= 38
    state = cuda.ok(d.cuLinkCreate(1, [opt], [38]))
    image = plain + b"\0"
    cuda.ok(d.cuLinkAddData(state, d.CUjitInputType.CU_JIT_INPUT_PTX, image, len(image), b"wide", 0, [], []))
    linked_image, size = cuda.ok(d.cuLinkComplete(state))
    linked = ctypes.string_at(int(linked_image), size)
    cuda.ok(d.cuLinkDestroy(state))
    assert _num_regs(cuda, cuda.ok(d.cuModuleLoadData(linked))) <= 38


def _axpy_past_ten_ints(cuda, n):
    """numba's test_dispatcher_cpointer_arguments: 32 threads, n of them computing over 10-int arrays."""
    f = cuda.kernel(PAST_THE_END, "axpy")
    hx = np.arange(10, dtype=np.int32)
    x, y, r = cuda.upload(hx), cuda.upload(hx * 2), cuda.alloc(hx.nbytes)
    ptrs, boxes = cuda.args(r, np.int32(5), x, y, np.uint32(n))
    cuda.ok(cuda.d.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, 0, ptrs.ctypes.data, 0))
    return cuda.err(cuda.d.cuCtxSynchronize()), r, hx


def test_padded_memcheck_lets_a_kernel_touch_the_padding_as_hardware_does(cuda, monkeypatch):
    """40-byte arrays, 16 threads: they read and write bytes 40..63, inside the 256 bytes before the next
    allocation can start (cuMemAlloc's alignment), mapped on hardware, so the H200 runs it and the first
    ten results are 5x + 2x."""
    monkeypatch.setenv("IRONACCEL_FAKE_MEMCHECK", "padded")
    err, r, hx = _axpy_past_ten_ints(cuda, 16)
    assert err == cuda.d.CUresult.CUDA_SUCCESS, cuda.control.last_report()
    assert list(cuda.download(r, hx)) == list(7 * hx)


def test_padded_memcheck_still_faults_past_the_padding(cuda, monkeypatch):
    """Thread 64 reads byte 256 of a 40-byte allocation: past the padding, a fault even when padded."""
    monkeypatch.setenv("IRONACCEL_FAKE_MEMCHECK", "padded")
    f = cuda.kernel(PAST_THE_END, "axpy")
    hx = np.arange(10, dtype=np.int32)
    x, y, r = cuda.upload(hx), cuda.upload(hx), cuda.alloc(hx.nbytes)
    ptrs, boxes = cuda.args(r, np.int32(1), x, y, np.uint32(65))
    cuda.ok(cuda.d.cuLaunchKernel(f, 1, 1, 1, 65, 1, 1, 0, 0, ptrs.ctypes.data, 0))
    assert cuda.err(cuda.d.cuCtxSynchronize()) == cuda.d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    assert "thread (64,0,0)" in cuda.control.last_report()


def test_exact_memcheck_is_the_default(cuda, monkeypatch):
    monkeypatch.delenv("IRONACCEL_FAKE_MEMCHECK", raising=False)
    err, _, _ = _axpy_past_ten_ints(cuda, 16)
    assert err == cuda.d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    assert "thread (10,0,0)" in cuda.control.last_report()


def test_a_forked_child_finds_the_driver_not_initialized(cuda):
    """After a fork, NVIDIA's driver refuses every call in the child with CUDA_ERROR_NOT_INITIALIZED (cuInit
    too); numba-cuda's test_fork expects that code ("CUDA initialized before forking")."""
    import os

    d = cuda.d
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report the codes through the pipe, never return into pytest
        try:
            codes = [int(cuda.err(d.cuMemAlloc(64))), int(cuda.err(d.cuInit(0))),
                     int(cuda.err(d.cuCtxGetCurrent()))]
            os.write(write, bytes(codes))
        finally:
            os._exit(0)
    os.close(write)
    got = os.read(read, 16)
    os.waitpid(pid, 0)
    not_initialized = int(d.CUresult.CUDA_ERROR_NOT_INITIALIZED)
    assert list(got) == [not_initialized] * 3
    assert cuda.err(d.cuCtxSynchronize()) == d.CUresult.CUDA_SUCCESS  # the parent is unaffected
