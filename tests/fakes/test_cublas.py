"""What cuBLAS (CUDA 13) needs of the fake to run its kernels that carry PTX (issue 26): the entry points cuBLASLt
resolves with dlsym when a handle is created, kernels that read their parameters through the parameters' address
(``mov.b64 %rd, k_param_0; ld.param [%rd+8]``, as cuBLAS's small-N GEMM and GEMV kernels do), and the naming of
the machine code it tries first. cuBLAS itself runs in tests/fakes/test_torch.py (the PyTorch smoke's matmul)."""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path

import numpy as np
import pytest
from images import pack_elf

from ironaccel import fakes

NOT_SUPPORTED = 801
INVALID_VALUE = 1


def _unimplemented_exports() -> list[str]:
    text = (Path(fakes.source_dir()) / "entry_points.h").read_text()
    block = text.split("#define UNIMPLEMENTED_EXPORTS(X)", 1)[1]
    return re.findall(r"X\((\w+)\)", block)


#: every name of cuBLASLt's dlsym list (libcublasLt.so.13, 13.1) that the fake lacked before: its handle fails
#: to be created ("Driver API initialization failed") when one is missing
CUBLASLT_NEEDED = ["cuKernelGetLibrary", "cuDevicePrimaryCtxRelease", "cuStreamWaitValue32", "cuStreamBatchMemOp",
                   "cuGraphKernelNodeGetParams", "cuGraphExecKernelNodeSetParams", "cuGraphInstantiate",
                   "cuMemcpy2DAsync_v2", "cuThreadExchangeStreamCaptureMode", "cuCtxDisablePeerAccess",
                   "cuCtxEnablePeerAccess", "cuDeviceCanAccessPeer"]


def test_every_name_cublaslt_resolves_with_dlsym_is_exported(cuda):
    lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD)
    for name in CUBLASLT_NEEDED:
        assert hasattr(lib, name), f"{name} is not exported"


def test_an_exported_stub_says_not_supported_and_is_what_cugetprocaddress_gives_for_its_name(cuda, fake):
    """A stub is the old C symbol only where a newer variant is implemented (cuGraphKernelNodeGetParams, whose
    v1 struct the fake does not take): cuGetProcAddress then gives that variant, as a real driver does."""
    lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD)
    stubs = _unimplemented_exports()
    assert stubs and set(stubs) <= set(CUBLASLT_NEEDED)
    implemented = set(fake.entry_points())
    for name in stubs:
        exported = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
        resolved = ctypes.c_void_p()
        assert lib.cuGetProcAddress(name.encode(), ctypes.byref(resolved), 13000, ctypes.c_uint64(0)) == 0
        newer = f"{name}_v2" in implemented
        assert (resolved.value != exported) if newer else (resolved.value == exported), name
        getattr(lib, name).restype = ctypes.c_int
        assert getattr(lib, name)() == NOT_SUPPORTED, name


WITH_FLAGS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_uint64)
LEGACY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                          ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_size_t)


def test_cugraphinstantiate_is_the_five_argument_form_before_cuda_12_and_with_flags_from_it(cuda):
    """CUDA 12's cuda.h #defines cuGraphInstantiate to cuGraphInstantiateWithFlags, so cuGetProcAddress gives that
    from 12000 on; before, and as the exported symbol cuBLASLt resolves, it is CUDA 10/11's form (an error node
    and a log buffer, flags 0). Each form instantiates a graph that then runs."""
    d, lib = cuda.d, ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD)

    def resolve(version):
        fn = ctypes.c_void_p()
        assert lib.cuGetProcAddress(b"cuGraphInstantiate", ctypes.byref(fn), version, ctypes.c_uint64(0)) == 0
        return fn.value

    def address(name):
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value

    assert resolve(12000) == resolve(13000) == address("cuGraphInstantiateWithFlags")
    assert resolve(11000) == resolve(11080) == address("cuGraphInstantiate_v2")
    assert resolve(10000) == address("cuGraphInstantiate")
    out = cuda.alloc(16)
    g = cuda.ok(d.cuGraphCreate(0))
    p = d.CUDA_MEMSET_NODE_PARAMS()
    p.dst, p.value, p.elementSize, p.width, p.height, p.pitch = out, 7, 4, 4, 1, 0
    cuda.ok(d.cuGraphAddMemsetNode(g, None, 0, p, cuda.ctx))
    node, log = ctypes.c_void_p(), ctypes.create_string_buffer(64)
    calls = [lambda exe: WITH_FLAGS(resolve(12000))(exe, int(g), 0)] + [
        lambda exe, v=v: LEGACY(resolve(v))(exe, int(g), ctypes.byref(node), log, len(log)) for v in (10000, 11000)]
    assert WITH_FLAGS(resolve(12000))(ctypes.byref(ctypes.c_void_p()), int(g), 0x100) == INVALID_VALUE  # flags read
    for instantiate in calls:
        exe = ctypes.c_void_p()
        assert instantiate(ctypes.byref(exe)) == 0
        cuda.ok(d.cuMemsetD32(out, 0, 4))
        cuda.ok(d.cuGraphLaunch(exe.value, 0))
        cuda.ok(d.cuCtxSynchronize())
        np.testing.assert_array_equal(cuda.download(out, np.zeros(4, np.uint32)), [7] * 4)
        cuda.ok(d.cuGraphExecDestroy(exe.value))
    cuda.ok(d.cuGraphDestroy(g))


def test_a_kernel_gets_its_librarys_handle_back_and_the_old_release_is_the_release(cuda):
    d = cuda.d
    ptx = cuda.ptx('extern "C" __global__ void touch(unsigned *p) { p[threadIdx.x] = threadIdx.x + 1; }')
    lib = cuda.ok(d.cuLibraryLoadData(ptx, [], [], 0, [], [], 0))
    kernel = cuda.ok(d.cuLibraryGetKernel(lib, b"touch"))
    assert int(cuda.ok(d.cuKernelGetLibrary(kernel))) == int(lib)
    cuda.ok(d.cuLibraryUnload(lib))
    raw = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD)
    before = cuda.ok(d.cuDevicePrimaryCtxGetState(0))[1]
    ctx = ctypes.c_void_p()
    assert raw.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    assert raw.cuDevicePrimaryCtxRelease(0) == 0  # the pre-11.0 name: the same release
    assert cuda.ok(d.cuDevicePrimaryCtxGetState(0))[1] == before


#: k(struct of a u32 and two u64 at 0/8/16, u64 out): reads the struct through its address in the param space,
#: at an offset the launch gives (past the struct: an illegal address)
PARAM_ADDRESS = b"""
.version 9.0
.target sm_90
.address_size 64
.visible .entry k(.param .align 8 .b8 k_param_0[24], .param .u64 out, .param .u32 extra)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;
    mov.b64 %rd1, k_param_0;
    ld.param.u32 %r1, [%rd1];
    ld.param.u64 %rd2, [%rd1+8];
    ld.param.u64 %rd3, [%rd1+16];
    ld.param.u32 %r2, [extra];
    cvt.u64.u32 %rd4, %r2;
    add.s64 %rd5, %rd1, %rd4;
    ld.param.u32 %r3, [%rd5];
    ld.param.u64 %rd6, [out];
    cvta.to.global.u64 %rd7, %rd6;
    st.global.u32 [%rd7], %r1;
    st.global.u64 [%rd7+8], %rd2;
    st.global.u64 [%rd7+16], %rd3;
    st.global.u32 [%rd7+24], %r3;
    ret;
}
\0"""


def _launch_param_address(cuda, extra: int, sync=True):
    f = cuda.ok(cuda.d.cuModuleGetFunction(cuda.ok(cuda.d.cuModuleLoadData(PARAM_ADDRESS)), b"k"))
    out = cuda.poisoned(np.zeros(4, np.uint64))
    struct_ = np.array([7, 0x1122334455667788, 0x99], np.uint64)
    cuda.launch(f, (1,), (1,), struct_, out, np.uint32(extra), sync=sync)
    return out


def test_a_kernel_reads_its_parameters_through_their_address(cuda):
    out = _launch_param_address(cuda, 16)  # the third word, again through a computed address
    got = cuda.download(out, np.zeros(4, np.uint64))
    assert [int(got[0]) & 0xFFFFFFFF, int(got[1]), int(got[2]), int(got[3]) & 0xFFFFFFFF] == \
        [7, 0x1122334455667788, 0x99, 0x99]


def test_a_read_through_a_parameter_address_past_the_parameters_is_an_illegal_address(cuda):
    _launch_param_address(cuda, 4096, sync=False)
    assert cuda.err(cuda.d.cuCtxSynchronize()) == cuda.d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    assert "param" in cuda.control.last_report()


def test_a_register_addressed_param_read_in_a_device_function_fails_to_load_naming_it(cuda):
    ptx = PARAM_ADDRESS.replace(b".visible .entry k(", b".func f(").replace(b"mov.b64 %rd1, k_param_0;",
                                                                         b"mov.b64 %rd1, 0;")
    err, _ = cuda.d.cuModuleLoadData(ptx)
    assert cuda.err(err) == cuda.d.CUresult.CUDA_ERROR_INVALID_PTX


#: k(in, out, policy): the two forms cuBLAS's PTX needs: 256-bit ld.global.nc.v8.f32 and st.global.v8.f32 (one
#: libcublasLt fatbin; the load taken only when the policy is not 0), and loads and stores with .L2::cache_hint and
#: its 64-bit cache policy operand (one libcublas fatbin), a hint that changes nothing
CUBLAS_LOADS = b"""
.version 8.8
.target sm_90
.address_size 64
.visible .entry k(.param .u64 in, .param .u64 out, .param .u64 policy)
{
    .reg .pred %p<2>;
    .reg .f32 %f<10>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    ld.param.u64 %rd5, [policy];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mov.f32 %f1, 0fBF800000;
    mov.f32 %f2, %f1;
    mov.f32 %f3, %f1;
    mov.f32 %f4, %f1;
    mov.f32 %f5, %f1;
    mov.f32 %f6, %f1;
    mov.f32 %f7, %f1;
    mov.f32 %f8, %f1;
    setp.ne.u64 %p1, %rd5, 0;
    @%p1 ld.global.nc.v8.f32 {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, [%rd3];
    st.global.v8.f32 [%rd4], {%f5, %f6, %f7, %f8, %f1, %f2, %f3, %f4};
    ld.global.L2::cache_hint.f32 %f9, [%rd3+32], %rd5;
    st.global.L2::cache_hint.f32 [%rd4+32], %f9, %rd5;
    ret;
}
\0"""


def _cublas_loads(cuda, policy: int, in_offset: int = 0, sync=True):
    f = cuda.ok(cuda.d.cuModuleGetFunction(cuda.ok(cuda.d.cuModuleLoadData(CUBLAS_LOADS)), b"k"))
    src = cuda.upload(np.arange(1, 14, dtype=np.float32))
    out = cuda.poisoned(np.zeros(9, np.float32))
    cuda.launch(f, (1,), (1,), src + in_offset, out, np.uint64(policy), sync=sync)
    return cuda.download(out, np.zeros(9, np.float32)) if sync else None


@pytest.mark.parametrize("policy", [0x1000000000000000, 0])  # createpolicy's bits, or 0: the v8 load skipped
def test_v8_accesses_move_eight_registers_and_a_cache_hint_only_adds_its_policy_operand(cuda, policy):
    got = _cublas_loads(cuda, policy)
    loaded = [5, 6, 7, 8, 1, 2, 3, 4] if policy else [-1] * 8
    np.testing.assert_array_equal(got, np.array(loaded + [9], np.float32))


def test_a_v8_load_needs_32_byte_alignment(cuda):
    _cublas_loads(cuda, 1, in_offset=16, sync=False)  # 16-byte aligned: enough for v4, not for 256 bits
    assert cuda.err(cuda.d.cuCtxSynchronize()) == cuda.d.CUresult.CUDA_ERROR_MISALIGNED_ADDRESS


@pytest.mark.parametrize("edit", [
    (b"ld.global.nc.v8.f32", b"ld.shared.v8.f32"),  # 256-bit accesses are of global memory only
    (b"st.global.v8.f32", b"st.v8.f32"),
    (b"ld.global.nc.v8.f32", b"ld.global.nc.v8.f64"),  # and of 32-bit elements
    (b"[%rd3+32], %rd5;", b"[%rd3+32];"),  # a cache hint without its policy
])
def test_a_v8_or_cache_hint_access_outside_its_forms_fails_to_load(cuda, edit):
    err, _ = cuda.d.cuModuleLoadData(CUBLAS_LOADS.replace(*edit))
    assert cuda.err(err) == cuda.d.CUresult.CUDA_ERROR_INVALID_PTX


@pytest.mark.parametrize("abi, flags, sm", [((0x41, 8), 0x6005004, 80), ((0x33, 7), 0x500550, 80)])
def test_a_cubins_sm_is_named_by_its_abis_flags(cuda, abi, flags, sm):
    """cuBLASLt tries its sm_80 cubins first; the refusal names the SM from the flags of the cubin's ELF ABI."""
    d = cuda.d
    log = bytearray(1024)
    options = [d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER, d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
    err, _ = d.cuModuleLoadDataEx(pack_elf([(".text", b"\0" * 16)], flags=flags, abi=abi), 2, options,
                                  [log, len(log)])
    assert cuda.err(err) == d.CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU
    assert f"SASS for sm_{sm})" in bytes(log).split(b"\0")[0].decode(), log
