"""The PTX interpreter itself: identifiers of any length, its coverage table, loads that name what they do not
support, its other dispatch and tracing builds, mutated PTX, and compare-and-branch fusion."""

import ctypes
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ironaccel import fakes
from kernelsrc import CONFORMANCE, FLOAT_OPS, INTEGER_OPS, lcg


LONG = "k_" + "averyveryverylongkernelname" * 11  # 299 characters, like numba's mangled names

LONG_SOURCE = r"""
namespace outer_namespace_with_a_long_name { namespace inner_namespace_with_an_even_longer_name_than_that {
template <typename T> __device__ __noinline__ T scaled_by_a_template_parameter_of_some_length(T v) { return v * 3; }
} }
extern "C" __device__ __noinline__ float HELPER(float value) { return value + 1.0f; }
extern "C" __global__ void KERNEL(float* PARAM, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) PARAM[i] = HELPER(outer_namespace_with_a_long_name::inner_namespace_with_an_even_longer_name_than_that::
                                 scaled_by_a_template_parameter_of_some_length<float>(PARAM[i]));
}""".replace("KERNEL", LONG).replace("HELPER", "h_" + "helperfunctionname" * 10).replace("PARAM", "p_" + "x" * 200)


def test_identifiers_of_any_length(cuda, rng):
    ptx = cuda.ptx(LONG_SOURCE).decode()
    assert any(len(w) > 150 for w in ptx.split() if w.startswith("_ZN"))  # the mangled callee, too
    f = cuda.ok(cuda.d.cuModuleGetFunction(cuda.module(LONG_SOURCE), LONG.encode()))
    assert cuda.ok(cuda.d.cuFuncGetName(f)).decode() == LONG
    x = rng.integers(-100, 100, 50).astype(np.float32)
    dx = cuda.upload(x)
    cuda.launch(f, (1,), (64,), dx, np.uint32(50))
    assert np.array_equal(cuda.download(dx, x), x * 3 + 1)


def test_committed_ptx_coverage_table_is_current(fake):
    coverage = fake.lib.ironaccel_fake_ptx_coverage
    coverage.restype = ctypes.c_char_p
    committed = Path(fakes.source_dir(), "PTX_COVERAGE.md").read_text()
    assert committed == coverage().decode(), "stale: run python fakes/cuda/gen_coverage.py"
    assert "| `shf.l` | .b32 | .wrap .clamp |" in committed


@pytest.mark.parametrize("inst, named", [("min.NaN.f32 %f1, %f1, %f1;", ".NaN are supported on f16/bf16 types only"),
                                         ("add.sat.s32 %r1, %r1, %r1;", ".sat is supported on float types only"),
                                         ("add.rz.f16 %h1, %h1, %h1;", "rounds to nearest (.rn) only"),
                                         ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 %f1, %f1;",
                                          "tensor-core matrix instructions are not implemented")])
def test_unsupported_form_fails_the_load_naming_it(cuda, capfd, inst, named):
    ptx = (".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n"
           f"\t.reg .f32 %f<2>;\n\t.reg .b32 %r<2>;\n\t.reg .b16 %h<2>;\n\t{inst}\n\tret;\n}}\n\0").encode()
    assert cuda.err(cuda.d.cuModuleLoadData(ptx)) == cuda.d.CUresult.CUDA_ERROR_INVALID_PTX
    err = capfd.readouterr().err
    assert "line 9: " in err and named in err, err


def test_switch_dispatch_and_trace_builds_compute_the_same(tmp_path):
    """The interpreter's other dispatch (a plain switch) and its tracing build, built and run in a child."""
    src = fakes.source_dir()
    lib = tmp_path / "libcuda.so.1"
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    build = subprocess.run([cc, *fakes.CFLAGS, "-O0", "-DFAKECUDA_SWITCH_DISPATCH", "-DFAKECUDA_TRACE", "-o", str(lib),
                            *map(str, sorted(src.glob("*.c"))), "-lpthread", "-lm"], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    code = textwrap.dedent(f"""
        import ctypes, os, sys
        import numpy as np
        lib = ctypes.CDLL({str(lib)!r}, mode=os.RTLD_GLOBAL)
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from cuda.bindings import driver
        from ironaccel import fakes
        assert driver.cuInit(0)[0] == 0
        from conftest import Cuda
        cuda = Cuda(fakes.Control(lib))
        out = cuda.poisoned(np.zeros(40, np.uint32))
        cuda.launch(cuda.kernel({CONFORMANCE!r}, "busy"), (1,), (64,), out, np.uint32(7), np.uint32(40))
        print(*cuda.download(out, np.zeros(40, np.uint32)))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [int(v) for v in r.stdout.split()] == list(lcg(40, 7))
    assert "fakecuda trace: block (0,0,0) thread 63 pc " in r.stderr and " MAD_LO_I32\n" in r.stderr


MUTATE = r"""
import random, re, sys
import numpy as np
from cuda.bindings import driver as d
assert d.cuInit(0)[0] == 0
source = sys.stdin.buffer.read()
rng = random.Random(1234)
ctx = d.cuCtxCreate(None, 0, 0)[1]
buf = d.cuMemAlloc(1 << 20)[1]
loaded = 0
for _ in range(150):
    toks = re.split(rb"(\s+)", source)
    for _ in range(rng.randint(1, 4)):
        k = rng.randrange(len(toks))
        op = rng.randrange(4)
        if op == 0:
            toks[k] = b""
        elif op == 1:
            toks.insert(k, toks[rng.randrange(len(toks))])
        elif op == 2 and toks[k]:
            t = bytearray(toks[k])
            t[rng.randrange(len(t))] = rng.choice(b"0123456789%_rdfp.-")
            toks[k] = bytes(t)
        else:
            toks[k] = rng.choice([b"%r1", b"%rd1", b"%f1", b"%p1", b"0", b"-1", b"4096", b"%tid.x", b"{", b"}"])
    text = b"".join(toks) + b"\0"
    err, mod = d.cuModuleLoadData(text)
    if err:
        continue
    loaded += 1
    for name in re.findall(rb"\.entry\s+([\w$]+)", text)[:2]:
        err, f = d.cuModuleGetFunction(mod, name)
        if err:
            continue
        params = np.full(64, int(buf), np.uint64)
        size = np.array([params.nbytes], np.uint64)
        extra = np.array([1, params.ctypes.data, 2, size.ctypes.data, 0], np.uint64)
        d.cuLaunchKernel(f, 2, 1, 1, 64, 1, 1, 0, 0, 0, extra.ctypes.data)
        if d.cuCtxSynchronize()[0]:  # a fault is sticky: start over in a new context
            d.cuCtxDestroy(ctx)
            ctx, mod = d.cuCtxCreate(None, 0, 0)[1], None
            buf = d.cuMemAlloc(1 << 20)[1]
            break
    if mod is not None:
        d.cuModuleUnload(mod)
print("loaded", loaded)
"""


def test_mutated_ptx_never_crashes_or_hangs(cuda):
    """Mutated PTX (tokens dropped, repeated, altered) either fails the load or runs: no signal, no hang."""
    env = fakes.child_env()
    env.update(IRONACCEL_FAKE_WATCHDOG_S="0.2", IRONACCEL_FAKE_CUDA_LEAKS="off")
    r = subprocess.run([sys.executable, "-c", MUTATE], input=cuda.ptx(CONFORMANCE + INTEGER_OPS + FLOAT_OPS),
                       env=env, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    assert int(r.stdout.split()[-1]) > 10  # enough of them load and run to matter


COMPARE_BRANCH = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry branches(.param .u64 out)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r2, 0;
$L1:
    add.s32 %r2, %r2, 1;
    setp.lt.s32 %p1, %r2, 10;
    @%p1 bra $L1;
    selp.u32 %r6, 1, 0, %p1;
    mov.u32 %r3, 0;
$L2:
    add.s32 %r3, %r3, 1;
    setp.eq.u32 %p2, %r3, 5;
    @!%p2 bra $L2;
    mov.u32 %r4, 0;
    setp.eq.s32 %p1, %r4, 0;
    bra.uni $L5;
$L4:
    setp.ne.s32 %p1, %r4, 0;
$L5:
    @%p1 bra $L6;
    add.s32 %r4, %r4, 7;
$L6:
    mov.u32 %r5, 3;
    setp.eq.s32 %p2, %r5, 3;
    setp.eq.s32 %p1, %r5, 3;
    @!%p2 setp.ne.s32 %p1, %r5, 3;
    @%p1 bra $L7;
    add.s32 %r5, %r5, 1000;
$L7:
    st.global.v4.u32 [%rd1], {%r2, %r3, %r4, %r5};
    st.global.u32 [%rd1+16], %r6;
    ret;
}
\0"""


def test_compare_and_branch_fusion_keeps_branch_semantics(cuda):
    """setp + @p bra run as one instruction, except where a label lands on the bra or the setp is guarded."""
    f = cuda.ok(cuda.d.cuModuleGetFunction(cuda.ok(cuda.d.cuModuleLoadData(COMPARE_BRANCH)), b"branches"))
    out = cuda.poisoned(np.zeros(5, np.uint32))
    cuda.launch(f, (1,), (1,), out)
    assert list(cuda.download(out, np.zeros(5, np.uint32))) == [10, 5, 0, 3, 0]
