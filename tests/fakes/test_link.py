"""Linking and loading like a driver: cuLink* over PTX, PTX carried by fatbins and ELF files, and a clear
refusal of machine code (the simulated device runs PTX only)."""

import ctypes
import struct
from pathlib import Path

import numpy as np
import pytest
from images import pack_elf, pack_fatbin

CALLER = r'''
extern __device__ float twice(float v);
extern "C" __global__ void apply(float* y, unsigned n)
{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = twice(y[i]) + 1.0f; }
'''
CALLEE = r'''
__device__ float twice(float v) { return 2.0f * v; }
'''
SCALE = r'''
extern "C" __global__ void scale(float* y, float a, unsigned n)
{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] *= a; }
'''
CUBINS = Path(__file__).resolve().parents[2] / "conformance" / "kernels" / "cubin"
N = 128
JIT_ERROR_LOG, JIT_ERROR_LOG_SIZE = 5, 6


def _rdc_ptx(cuda, source):
    n = cuda.nvrtc
    _, prog = n.nvrtcCreateProgram(source.encode(), b"rdc.cu", 0, [], [])
    opts = [b"--gpu-architecture=compute_90", b"--relocatable-device-code=true"]
    assert n.nvrtcCompileProgram(prog, len(opts), opts)[0] == n.nvrtcResult.NVRTC_SUCCESS
    _, size = n.nvrtcGetPTXSize(prog)
    buf = b" " * size
    n.nvrtcGetPTX(prog, buf)
    return buf


def _load_ex(cuda, image):
    """cuModuleLoadDataEx with an error log: (CUresult, module, log text)."""
    d = cuda.d
    log = bytearray(1024)
    opts = [d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER, d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
    err, mod = d.cuModuleLoadDataEx(image, 2, opts, [log, len(log)])
    return err, mod, bytes(log).split(b"\0")[0].decode()


def _run_scale(cuda, mod, name=b"scale"):
    d = cuda.d
    f = cuda.ok(d.cuModuleGetFunction(mod, name))
    y = np.arange(N, dtype=np.float32)
    p = cuda.upload(y)
    cuda.launch(f, (N // 64,), (64,), p, np.float32(3.0), np.uint32(N))
    np.testing.assert_array_equal(cuda.download(p, y), 3 * y)


def test_link_two_ptx_inputs_into_an_image_that_runs(cuda, tmp_path):
    d = cuda.d
    callee = tmp_path / "callee.ptx"
    callee.write_bytes(_rdc_ptx(cuda, CALLEE).rstrip(b"\0"))
    state = cuda.ok(d.cuLinkCreate(0, [], []))
    caller = _rdc_ptx(cuda, CALLER)
    cuda.ok(d.cuLinkAddData(state, d.CUjitInputType.CU_JIT_INPUT_PTX, caller, len(caller), b"caller", 0, [], []))
    cuda.ok(d.cuLinkAddFile(state, d.CUjitInputType.CU_JIT_INPUT_PTX, str(callee).encode(), 0, [], []))
    image, size = cuda.ok(d.cuLinkComplete(state))
    linked = ctypes.string_at(int(image), size)
    assert linked.startswith(b"// ironaccel fake linked image")
    mod = cuda.ok(d.cuModuleLoadData(linked))
    cuda.ok(d.cuLinkDestroy(state))  # the image was the link state's: the module keeps its own copy
    f = cuda.ok(d.cuModuleGetFunction(mod, b"apply"))
    y = np.arange(N, dtype=np.float32)
    p = cuda.upload(y)
    cuda.launch(f, (N // 64,), (64,), p, np.uint32(N))
    np.testing.assert_array_equal(cuda.download(p, y), 2 * y + 1)


def test_link_with_an_unresolved_call_fails_with_the_reason_in_the_log(cuda):
    d = cuda.d
    log = bytearray(1024)
    opts = [d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER, d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
    state = cuda.ok(d.cuLinkCreate(2, opts, [log, len(log)]))
    caller = _rdc_ptx(cuda, CALLER)
    cuda.ok(d.cuLinkAddData(state, d.CUjitInputType.CU_JIT_INPUT_PTX, caller, len(caller), b"caller", 0, [], []))
    assert cuda.err(d.cuLinkComplete(state)) == d.CUresult.CUDA_ERROR_INVALID_PTX
    assert "twice" in bytes(log).decode(errors="replace") and "not defined" in bytes(log).decode(errors="replace")
    cuda.ok(d.cuLinkDestroy(state))


def test_ptx_carried_by_fatbins_and_elf_files_runs(cuda, tmp_path):
    d = cuda.d
    ptx = cuda.ptx(SCALE).rstrip(b"\0")
    fatbin = pack_fatbin((2, 90, b"\x7fELF not really sass", 0), (1, 80, ptx, 0), (1, 120, b"not this one", 0))
    _run_scale(cuda, cuda.ok(d.cuModuleLoadData(fatbin)))
    _run_scale(cuda, cuda.ok(d.cuModuleLoadData(pack_elf([(".nv_fatbin", fatbin)]))))
    _run_scale(cuda, cuda.ok(d.cuModuleLoadData(pack_elf([(".nv_debug_ptx_txt", ptx)]))))
    wrapper = (ctypes.c_uint32 * 2)(0x466243B1, 1)
    keep = ctypes.create_string_buffer(fatbin)
    wrapped = ctypes.create_string_buffer(bytes(wrapper) + struct.pack("<QQ", ctypes.addressof(keep), 0))
    _run_scale(cuda, cuda.ok(d.cuModuleLoadFatBinary(ctypes.addressof(wrapped))))
    path = tmp_path / "scale.fatbin"
    path.write_bytes(fatbin)
    lib = cuda.ok(d.cuLibraryLoadFromFile(str(path).encode(), [], [], 0, [], [], 0))
    _run_scale(cuda, cuda.ok(d.cuLibraryGetModule(lib)))
    state = cuda.ok(d.cuLinkCreate(0, [], []))
    cuda.ok(d.cuLinkAddData(state, d.CUjitInputType.CU_JIT_INPUT_FATBINARY, fatbin, len(fatbin), b"fb", 0, [], []))
    image, size = cuda.ok(d.cuLinkComplete(state))
    _run_scale(cuda, cuda.ok(d.cuModuleLoadData(ctypes.string_at(int(image), size))))
    cuda.ok(d.cuLinkDestroy(state))


def _real_nvrtc_cubin(source):
    """A cubin of the real NVRTC (the toolchain shim in this process would add the PTX), through ctypes."""
    from ironaccel import fakes

    nvrtc = ctypes.CDLL(fakes.toolchain()["nvrtc"][1])
    prog = ctypes.c_void_p()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"s.cu", 0, None, None) == 0
    assert nvrtc.nvrtcCompileProgram(prog, 1, (ctypes.c_char_p * 1)(b"--gpu-architecture=sm_90")) == 0
    size = ctypes.c_size_t()
    assert nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size)) == 0
    image = ctypes.create_string_buffer(size.value)
    assert nvrtc.nvrtcGetCUBIN(prog, image) == 0
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return image.raw


@pytest.mark.parametrize("kind", ["committed cubin", "NVRTC cubin", "fatbin of SASS"])
def test_machine_code_alone_is_refused_with_what_the_device_needs(cuda, kind):
    d = cuda.d
    if kind == "committed cubin":
        image = (CUBINS / "saxpy.sm_90.cubin").read_bytes()
    elif kind == "NVRTC cubin":
        image = _real_nvrtc_cubin(SCALE)
    else:
        image = pack_fatbin((2, 90, (CUBINS / "saxpy.sm_90.cubin").read_bytes(), 0))
    err, _, log = _load_ex(cuda, image)
    assert err == d.CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU
    assert "runs PTX" in log and "compute_90" in log, log
    assert "SASS for sm_90" in log, log
