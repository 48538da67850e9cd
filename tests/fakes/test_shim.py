"""The simulated toolchain (fakes/cuda/toolchain): a program that asks NVRTC or nvJitLink for a cubin on
cuda/fake gets one the fake runs (the real cubin plus the program's PTX), while machine code alone is still
refused. Each check runs in a child process set up as ``ironaccel clients --target cuda/fake`` sets up
its runs (``fakes.child_env()``: the fake as libcuda.so.1, the shims preloaded)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap

import pytest

from ironaccel import fakes

pytest.importorskip("cuda.bindings")
pytestmark = pytest.mark.skipif(set(fakes.toolchain()) != {"nvrtc", "nvJitLink"},
                                reason="NVRTC and nvJitLink (the nvidia-cuda-nvrtc, nvidia-nvjitlink wheels) not found")

#: Prelude of every child: a context on the fake and the checked-call helpers.
PRELUDE = r'''
import ctypes, json, os, sys
import numpy as np
from cuda.bindings import driver as d, nvrtc as n, nvjitlink as j

def ok(r):
    err, *rest = r if isinstance(r, tuple) else (r,)
    assert int(err) == 0, r
    return rest[0] if len(rest) == 1 else rest

ok(d.cuInit(0))
ctx = ok(d.cuCtxCreate(None, 0, ok(d.cuDeviceGet(0))))
assert b"simulated" in ok(d.cuDeviceGetName(64, 0))

def nvrtc(source, get, *options):
    prog = ok(n.nvrtcCreateProgram(source.encode(), b"t.cu", 0, [], []))
    opts = [o.encode() for o in options]
    ok(n.nvrtcCompileProgram(prog, len(opts), opts))
    out = b" " * ok(getattr(n, f"nvrtcGet{get}Size")(prog))
    ok(getattr(n, f"nvrtcGet{get}")(prog, out))
    ok(n.nvrtcDestroyProgram(prog))
    return out

def link(options, *inputs):
    h = j.create(len(options), options)
    for kind, data in inputs:
        j.add_data(h, kind, data, len(data), "input")
    j.complete(h)
    cubin = bytearray(j.get_linked_cubin_size(h))
    j.get_linked_cubin(h, cubin)
    j.destroy(h)
    return bytes(cubin)

def load(image):
    """(CUresult name, module, JIT error log)."""
    log = bytearray(2048)
    opts = [d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER, d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
    err, mod = d.cuModuleLoadDataEx(image, 2, opts, [log, len(log)])
    return err.name, mod, bytes(log).split(b"\0")[0].decode()

def run_apply(mod):
    """y = apply(y) over 64 floats, y = 0..63 beforehand: the result."""
    f = ok(d.cuModuleGetFunction(mod, b"apply"))
    y = np.arange(64, dtype=np.float32)
    dy = ok(d.cuMemAlloc(y.nbytes))
    ok(d.cuMemcpyHtoD(dy, y, y.nbytes))
    arg = np.array([int(dy)], dtype=np.uint64)
    params = np.array([arg.ctypes.data], dtype=np.uint64)
    ok(d.cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, 0, params.ctypes.data, 0))
    out = np.full(64, -7.0, dtype=np.float32)  # poisoned: a launch that did nothing cannot pass
    ok(d.cuMemcpyDtoH(out, dy, out.nbytes))
    ok(d.cuMemFree(dy))
    return out.tolist()
'''

APPLY = 'extern "C" __global__ void apply(float* y) { y[threadIdx.x] = 3.0f * y[threadIdx.x] + 1.0f; }'
CALLER = ('extern __device__ float twice(float v);\n'
          'extern "C" __global__ void apply(float* y) { y[threadIdx.x] = twice(y[threadIdx.x]) + 1.0f; }')
CALLEE = '__device__ float twice(float v) { return 2.0f * v; }'
THRICE_PLUS_ONE = [3.0 * i + 1.0 for i in range(64)]
TWICE_PLUS_ONE = [2.0 * i + 1.0 for i in range(64)]


def _child(body: str, timeout: float = 300) -> tuple[dict, str]:
    """Runs PRELUDE + body (which prints one JSON line last) on the fake: (that JSON, stderr)."""
    code = PRELUDE + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], env=fakes.child_env(), capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _sections(elf: bytes) -> list[str]:
    """Section names of an ELF64 image."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shnum, shstrndx = struct.unpack_from("<HH", elf, 0x3C)
    names_at, = struct.unpack_from("<Q", elf, shoff + shstrndx * 64 + 24)
    out = []
    for i in range(shnum):
        name, = struct.unpack_from("<I", elf, shoff + i * 64)
        out.append(elf[names_at + name:elf.index(b"\0", names_at + name)].decode())
    return out


def test_an_nvrtc_cubin_runs_on_the_fake_and_keeps_its_machine_code(tmp_path):
    out = tmp_path / "apply.cubin"
    result, _ = _child(f'''
        cubin = nvrtc({APPLY!r}, "CUBIN", "-arch=sm_90")
        open({str(out)!r}, "wb").write(cubin)
        err, mod, log = load(cubin)
        print(json.dumps({{"load": err, "log": log, "y": run_apply(mod) if mod else None}}))
    ''')
    assert result["load"] == "CUDA_SUCCESS", result["log"]
    assert result["y"] == THRICE_PLUS_ONE
    cubin = out.read_bytes()
    sections = _sections(cubin)
    assert cubin[:4] == b"\x7fELF" and ".text.apply" in sections, sections  # the real cubin's machine code
    assert sections[-1] == ".nv_debug_ptx_txt", sections  # and the PTX, which the fake ran


def test_the_real_nvrtc_cubin_alone_is_still_refused():
    """The shim adds PTX, it never makes machine code runnable: the real NVRTC's cubin (called by its path,
    past the shim) gets NO_BINARY_FOR_GPU with the fake's reason."""
    result, _ = _child(f'''
        real = ctypes.CDLL(os.environ["IRONACCEL_FAKE_NVRTC_LIBRARY"])
        prog = ctypes.c_void_p()
        assert real.nvrtcCreateProgram(ctypes.byref(prog), {APPLY!r}.encode(), b"t.cu", 0, None, None) == 0
        assert real.nvrtcCompileProgram(prog, 1, (ctypes.c_char_p * 1)(b"-arch=sm_90")) == 0
        size = ctypes.c_size_t()
        assert real.nvrtcGetCUBINSize(prog, ctypes.byref(size)) == 0
        cubin = ctypes.create_string_buffer(size.value)
        assert real.nvrtcGetCUBIN(prog, cubin) == 0
        err, mod, log = load(cubin.raw)
        print(json.dumps({{"load": err, "log": log}}))
    ''')
    assert result["load"] == "CUDA_ERROR_NO_BINARY_FOR_GPU"
    assert "SASS for sm_90" in result["log"] and "runs PTX" in result["log"], result["log"]


def test_nvjitlink_links_ptx_modules_into_a_cubin_that_runs():
    result, _ = _child(f'''
        caller = nvrtc({CALLER!r}, "PTX", "-arch=compute_90", "-rdc=true")
        callee = nvrtc({CALLEE!r}, "PTX", "-arch=compute_90", "-rdc=true")
        cubin = link(["-arch=sm_90"], (j.InputType.PTX, caller), (j.InputType.PTX, callee))
        err, mod, log = load(cubin)
        print(json.dumps({{"load": err, "log": log, "y": run_apply(mod) if mod else None}}))
    ''')
    assert result["load"] == "CUDA_SUCCESS", result["log"]
    assert result["y"] == TWICE_PLUS_ONE


def test_nvjitlink_versioned_names_link_through_the_shim():
    """Code built against nvJitLink's header (libcusparse, which PyTorch loads at import) calls the versioned
    names, __nvJitLinkCreate_13_0 and the like: the shim exports them, and a link made through them gives a
    cubin that carries its PTX; a version the real library lacks is an error at the call, never a crash."""
    result, _ = _child(f'''
        shim = ctypes.CDLL("libnvJitLink.so.13", mode=os.RTLD_NOLOAD)
        v = lambda name, minor: getattr(shim, f"__nvJitLink{{name}}_13_{{minor}}")
        ptx = nvrtc({APPLY!r}, "PTX", "-arch=compute_90")
        h = ctypes.c_void_p()
        assert v("Create", 0)(ctypes.byref(h), 1, (ctypes.c_char_p * 1)(b"-arch=sm_90")) == 0
        assert v("AddData", 0)(h, 2, ptx, ctypes.c_size_t(len(ptx)), b"apply.ptx") == 0  # 2: PTX
        assert v("Complete", 0)(h) == 0
        size = ctypes.c_size_t()
        assert v("GetLinkedCubinSize", 0)(h, ctypes.byref(size)) == 0
        cubin = ctypes.create_string_buffer(size.value)
        assert v("GetLinkedCubin", 0)(h, cubin) == 0
        assert v("Destroy", 0)(ctypes.byref(h)) == 0
        unknown = v("Create", 9)(ctypes.byref(ctypes.c_void_p()), 0, None)  # no real nvJitLink 13.9 yet
        err, mod, log = load(cubin.raw)
        print(json.dumps({{"load": err, "log": log, "y": run_apply(mod) if mod else None, "unknown": unknown}}))
    ''')
    assert result["load"] == "CUDA_SUCCESS", result["log"]
    assert result["y"] == THRICE_PLUS_ONE
    assert result["unknown"] == 6  # NVJITLINK_ERROR_INTERNAL: the real library has no __nvJitLinkCreate_13_9


def test_nvjitlink_takes_the_ptx_of_cubin_inputs_and_lto_ir():
    """A shim cubin as an input (its PTX comes with it, even though nvJitLink copies its PTX section into the
    output) and an all-LTO-IR link (its PTX made by the real nvJitLink with -ptx)."""
    result, _ = _child(f'''
        caller = nvrtc({CALLER!r}, "PTX", "-arch=sm_90", "-rdc=true")
        callee = nvrtc({CALLEE!r}, "CUBIN", "-arch=sm_90", "-rdc=true")
        with_cubin = load(link(["-arch=sm_90"], (j.InputType.PTX, caller), (j.InputType.CUBIN, callee)))
        lto = [nvrtc(s, "LTOIR", "-arch=sm_90", "-rdc=true", "-dlto") for s in ({CALLER!r}, {CALLEE!r})]
        with_lto = load(link(["-arch=sm_90", "-lto"], *[(j.InputType.LTOIR, x) for x in lto]))
        print(json.dumps({{name: [r[0], r[2], run_apply(r[1]) if r[1] else None]
                          for name, r in (("cubin", with_cubin), ("lto", with_lto))}}))
    ''')
    for name in ("cubin", "lto"):
        err, log, y = result[name]
        assert err == "CUDA_SUCCESS", (name, log)
        assert y == TWICE_PLUS_ONE, name


def test_nvjitlink_maxrregcount_bounds_the_linked_kernels_registers():
    """-maxrregcount=N of nvJitLinkCreate reaches the fake, for PTX and LTO-IR links alike: NUM_REGS is at
    most N, as the real linker's machine code is (numba-cuda's max_registers, test_set_registers_*); a link
    without it reports the kernel's own count."""
    many = ('extern "C" __global__ void apply(float* y) { float a[24]; for (int i = 0; i < 24; i++) '
            'a[i] = y[i] * (i + 1); float s = 0; for (int i = 0; i < 24; i++) s += a[i] * a[23 - i]; '
            'y[threadIdx.x] = 3.0f * y[threadIdx.x] + 1.0f + 0.0f * s; }')
    result, _ = _child(f'''
        regs = {{}}
        for name, opts, kind, image in (
                ("ptx", ["-arch=sm_90", "-maxrregcount=24"], j.InputType.PTX,
                 nvrtc({many!r}, "PTX", "-arch=compute_90")),
                ("lto", ["-arch=sm_90", "-lto", "-maxrregcount=24"], j.InputType.LTOIR,
                 nvrtc({many!r}, "LTOIR", "-arch=sm_90", "-dlto")),
                ("none", ["-arch=sm_90"], j.InputType.PTX, nvrtc({many!r}, "PTX", "-arch=compute_90"))):
            err, mod, log = load(link(opts, (kind, image)))
            assert err == "CUDA_SUCCESS", (name, log)
            f = ok(d.cuModuleGetFunction(mod, b"apply"))
            regs[name] = ok(d.cuFuncGetAttribute(d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, f))
            regs[name + " runs"] = run_apply(mod)[:64] == {THRICE_PLUS_ONE!r}
        print(json.dumps(regs))
    ''')
    assert result["ptx"] <= 24 and result["lto"] <= 24, result
    assert result["none"] > 24, result
    assert result["ptx runs"] and result["lto runs"] and result["none runs"], result


def test_a_ptx_input_calls_a_function_only_lto_ir_defines():
    """nvJitLink's -ptx link takes LTO-IR alone, so LTO dropped a function only a PTX input calls (numba-cuda's
    NRT_Allocate from linked PTX; the fake's load failed naming it): the shim keeps it, and the kernel that keeps
    it (which also takes vprintf's address, a builtin of the fake) is not in the module."""
    caller = CALLER.replace("{ y[threadIdx.x]", '{ if (threadIdx.x == 64) printf("never"); y[threadIdx.x]')
    result, _ = _child(f'''
        ptx = nvrtc({caller!r}, "PTX", "-arch=compute_90", "-rdc=true")
        lto = nvrtc({CALLEE!r}, "LTOIR", "-arch=sm_90", "-rdc=true", "-dlto")
        err, mod, log = load(link(["-arch=sm_90", "-lto"], (j.InputType.PTX, ptx), (j.InputType.LTOIR, lto)))
        keeper = d.cuModuleGetFunction(mod, b"__ironaccel_keep_ptx_callees")[0].name if mod else None
        print(json.dumps({{"load": err, "log": log, "y": run_apply(mod) if mod else None, "keeper": keeper}}))
    ''')
    assert result["load"] == "CUDA_SUCCESS", result["log"]
    assert result["y"] == TWICE_PLUS_ONE
    assert result["keeper"] == "CUDA_ERROR_NOT_FOUND"


def test_a_link_with_a_machine_code_input_stays_machine_code():
    """An input with no PTX (the real NVRTC's cubin): the linked cubin is the real one alone, the shim says
    why on stderr, and the fake refuses it."""
    result, stderr = _child(f'''
        real = ctypes.CDLL(os.environ["IRONACCEL_FAKE_NVRTC_LIBRARY"])
        prog = ctypes.c_void_p()
        assert real.nvrtcCreateProgram(ctypes.byref(prog), {CALLEE!r}.encode(), b"t.cu", 0, None, None) == 0
        opts = (ctypes.c_char_p * 2)(b"-arch=sm_90", b"-rdc=true")
        assert real.nvrtcCompileProgram(prog, 2, opts) == 0
        size = ctypes.c_size_t()
        assert real.nvrtcGetCUBINSize(prog, ctypes.byref(size)) == 0
        sass = ctypes.create_string_buffer(size.value)
        assert real.nvrtcGetCUBIN(prog, sass) == 0
        caller = nvrtc({CALLER!r}, "PTX", "-arch=sm_90", "-rdc=true")
        err, mod, log = load(link(["-arch=sm_90"], (j.InputType.PTX, caller), (j.InputType.CUBIN, sass.raw)))
        print(json.dumps({{"load": err, "log": log}}))
    ''')
    assert result["load"] == "CUDA_ERROR_NO_BINARY_FOR_GPU", result
    assert "machine code only" in stderr and "carries no PTX" in stderr, stderr


def test_without_the_real_library_a_call_fails_saying_why():
    env = fakes.child_env()
    env.pop("IRONACCEL_FAKE_NVRTC_LIBRARY")
    code = ("from cuda.bindings import nvrtc as n\n"
            "err, _, _ = n.nvrtcVersion()\n"
            "print(err.name)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip().splitlines()[-1] == "NVRTC_ERROR_INTERNAL_ERROR", proc.stdout + proc.stderr
    assert "IRONACCEL_FAKE_NVRTC_LIBRARY is not set" in proc.stderr


def test_a_numba_kernel_runs_on_the_fake():
    """numba-cuda compiles with NVVM and links through nvJitLink to a cubin (cuda.core's Linker)."""
    pytest.importorskip("numba.cuda")
    code = textwrap.dedent('''
        import json
        import numpy as np
        from numba import cuda

        @cuda.jit
        def axpy(a, x, y):
            i = cuda.grid(1)
            if i < x.size:
                y[i] = a * x[i] + y[i]

        x = np.arange(300, dtype=np.float32)
        dy = cuda.to_device(np.ones_like(x))
        axpy[3, 128](np.float32(2.5), cuda.to_device(x), dy)
        print(json.dumps({"device": str(cuda.get_current_device().name), "y": dy.copy_to_host().tolist()}))
    ''')
    proc = subprocess.run([sys.executable, "-c", code], env=fakes.child_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "simulated" in result["device"]
    assert result["y"] == [2.5 * i + 1.0 for i in range(300)]


def test_a_cuda_core_program_compiled_to_cubin_runs_on_the_fake():
    """cuda.core's default target is a cubin (nvrtcGetCUBIN), loaded lazily by get_kernel."""
    pytest.importorskip("cuda.core")
    code = textwrap.dedent('''
        import json
        import numpy as np
        from cuda.bindings import driver
        from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch

        dev = Device()
        dev.set_current()
        stream = dev.create_stream()
        source = 'extern "C" __global__ void fill(int* y) { y[threadIdx.x] = 7 * threadIdx.x + 1; }'
        code = Program(source, "c++", ProgramOptions(arch=f"sm_{dev.arch}")).compile("cubin")
        buf = dev.memory_resource.allocate(4 * 32, stream=stream)
        launch(stream, LaunchConfig(grid=1, block=32), code.get_kernel("fill"), buf)
        stream.sync()
        out = np.full(32, -1, dtype=np.int32)
        assert driver.cuMemcpyDtoH(out, int(buf.handle), out.nbytes)[0] == 0
        print(json.dumps({"elf": code.code[:4] == b"\\x7fELF", "y": out.tolist()}))
    ''')
    proc = subprocess.run([sys.executable, "-c", code], env=fakes.child_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"elf": True, "y": [7 * i + 1 for i in range(32)]}
