"""KERNEL: compilation errors, launches in 1-D/2-D/3-D, argument packing, shared memory, atomics."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.backends import get as get_backend
from ironaccel.cts.pytest_plugin import NOT_SUPPORTED_PREFIX
from ironaccel.cts.spec import conformance_dir

from .helpers import (POISON, assert_device_works, ceil_div, child_json, nop_kernels, poisoned, raises_naming, read,
                      rng, upload)

BROKEN = {
    "wgsl": "@compute @workgroup_size(1) fn broken() { let x: u32 = undefined_thing; }",
    "cuda": 'extern "C" __global__ void broken() { int x = undefined_thing; }',
    "ptx": ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry broken() { bogus.instruction; }",
    "glsl": "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { uint x = undefined_thing; }",
    "glsl430": "#version 430\nvoid main() { uint x = undefined_thing; }",
    "spirv": b"\x03\x02\x23\x07not really spir-v",
    "cubin": b"\x7fELF but not a CUDA binary" * 4,
}


@pytest.mark.clause("KERNEL-1", "ERR-1", "ERR-2")
def test_compile_error_carries_log(device, kernels, kernel_source):
    lang = device.languages[0]
    broken = BROKEN[lang] if lang in BROKEN else kernel_source("broken", lang)  # a plugin's dialect: its own file
    with pytest.raises(ia.CompileError) as info:
        device.compile(broken, lang)
    err = info.value
    assert err.log.strip(), "the compiler's log is empty"
    assert err.lang == lang and err.op in str(err)
    if lang not in ("spirv", "ptx"):
        assert "undefined_thing" in err.log, err.log
    assert_device_works(device, kernels)


@pytest.mark.clause("KERNEL-174")
def test_a_module_names_its_language_and_device(device):
    """Module.lang and Module.device are what the module was compiled from and on, in every language the device
    lists: a caller that keeps modules of several languages (or devices) tells them apart by these, and a backend
    that hands its base class the two the wrong way round gives a module whose language is a Device."""
    for lang, kernel in nop_kernels(device):
        module = kernel.module
        assert module.lang == lang, f"a {lang} module says its language is {module.lang!r}"
        assert module.device is device, f"a {lang} module says its device is {module.device!r}, not {device!r}"


@pytest.mark.clause("KERNEL-69", "ERR-2")
def test_every_language_rejects_broken_code_with_its_log(device, kernels, kernel_source):
    """KERNEL-1 takes the device's first language; each other one reaches the driver another way (CUDA: PTX
    and cubins are loaded as they are, CUDA C goes through NVRTC first; Vulkan: SPIR-V is reflected by the
    backend, GLSL compiled by glslang)."""
    for lang in device.languages:
        broken = BROKEN[lang] if lang in BROKEN else kernel_source("broken", lang)
        with pytest.raises(ia.CompileError) as info:
            device.compile(broken, lang)
        err = info.value
        assert err.lang == lang, f"{lang}: a CompileError for {err.lang!r}: {err}"
        assert err.log.strip(), f"{lang}: the compiler's log is empty"
        assert err.op in str(err), f"{lang}: {err}"
    assert_device_works(device, kernels)


#: PTX whose one error (an undeclared register) is on line 12, after a line comment and a block comment over
#: three lines: only a reader that counts every newline (in comments too) names that line.
PTX_ERROR_ON_LINE_12 = """.version 7.0
.target sm_70
.address_size 64
// a line comment
/* a block comment
   over
   three lines */
.visible .entry misnamed(.param .u64 misnamed_param_0)
{
    .reg .b32 %r<2>;
    mov.u32 %r1, %tid.x;
    mov.u32 %r1, %undefined_thing;
    ret;
}
"""


@pytest.mark.clause("KERNEL-96")
def test_a_ptx_compile_error_names_its_line(device, kernels, require):
    """ptxas writes ``ptxas application ptx input, line 12; error : ...``: the line is how the user finds the
    mistake in PTX they generated or wrote."""
    require("lang.ptx")
    with pytest.raises(ia.CompileError) as info:
        device.compile(PTX_ERROR_ON_LINE_12, "ptx")
    err = info.value
    assert err.lang == "ptx" and err.log.strip(), err
    lines = [int(n) for n in re.findall(r"\bline (-?\d+)", err.log)]
    assert lines and set(lines) == {12}, f"the log names lines {lines}, not line 12 alone: {err.log!r}"
    assert_device_works(device, kernels)


#: a kernel in each source language whose one error (an undeclared name) is on line 7, after a blank line (and,
#: in GLSL, after the #version line a backend may add lines behind)
SOURCE_ERROR_ON_LINE_7 = {
    "glsl": "#version 450\nlayout(local_size_x = 64) in;\nlayout(std430, binding = 0) buffer B { uint v[]; };\n"
            "void main() {\n    uint i = gl_GlobalInvocationID.x;\n\n    v[i] = undeclared_name;\n}\n",
    "glsl430": "#version 430\nlayout(std430, binding = 0) buffer B { uint v[]; };\n\n"
               "void main() {\n    uint i = gl_GlobalInvocationID.x;\n\n    v[i] = undeclared_name;\n}\n",
    "wgsl": "@group(0) @binding(0) var<storage, read_write> v: array<u32>;\n\n@compute @workgroup_size(64)\n"
            "fn main(@builtin(global_invocation_id) g: vec3<u32>) {\n    let i = g.x;\n\n    v[i] = undeclared_name;\n}\n",
    "cuda": 'extern "C" __global__ void line_seven(unsigned *v)\n{\n    unsigned i = threadIdx.x;\n\n\n\n'
            "    v[i] = undeclared_name;\n}\n",
    "opencl": "__kernel void line_seven(__global uint *v)\n{\n    uint i = get_global_id(0);\n\n\n\n"
              "    v[i] = undeclared_name;\n}\n",
}
#: how compilers name a line in their logs: glslang "kernel.comp:7:", Mesa "0:7(9)", NVIDIA's GL "0(7) :",
#: naga "wgsl:7:12", NVRTC "kernel.cu(7):", clang "<source>:7:5:"
LOG_LINE = re.compile(r"[:(](\d+)[:()]")


@pytest.mark.clause("KERNEL-178")
def test_a_source_compile_error_names_its_line(device, kernels):
    """The line in a compiler's log is how the user finds the mistake; a backend that adds lines to the source
    (a block size, a header) must keep the log's lines those of the source as given (GLSL's #line)."""
    langs = [lang for lang in device.languages if lang in SOURCE_ERROR_ON_LINE_7]
    if not langs:
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a source language ({', '.join(SOURCE_ERROR_ON_LINE_7)})")
    for lang in langs:
        with pytest.raises(ia.CompileError) as info:
            device.compile(SOURCE_ERROR_ON_LINE_7[lang], lang)
        log = info.value.log
        named = {int(n) for n in LOG_LINE.findall(log)}
        assert 7 in named and not named & {6, 8}, f"{lang}: the log names lines {sorted(named)}, want 7: {log!r}"
    assert_device_works(device, kernels)


#: A PTX module whose line 6 moves an integer literal of 70 decimal digits (10^69, past 2^64) into a register
PTX_LONG_LITERAL_ON_LINE_6 = """.version 7.0
.target sm_70
.address_size 64
.visible .entry long_literal() {
    .reg .b32 %r<2>;
    mov.u32 %r1, 1""" + "0" * 69 + """;
    ret;
}
"""

#: KERNEL-143's child: compiles the module of argv[2] on the target's device, then NOP-like PTX (argv[3]);
#: prints the first's error class and the lines its log names, and whether the second compiled
LONG_LITERAL_CHILD = """
import json, re, sys
import ironaccel as ia
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
try:
    device.compile(sys.argv[2], "ptx")
    outcome = {"error": None, "lines": []}
except ia.IronAccelError as err:
    lines = re.findall(r"\\bline (-?\\d+)", getattr(err, "log", ""))
    outcome = {"error": type(err).__name__, "lines": [int(n) for n in lines]}
device.compile(sys.argv[3], "ptx")
print(json.dumps(outcome))
"""


@pytest.mark.clause("KERNEL-143")
def test_a_ptx_literal_too_long_for_64_bits_is_a_compile_error_naming_its_line(device, target, require):
    """A generator that prints a constant it should have folded (or a person who typed one digit too many)
    writes a literal no 64-bit value holds: the load fails with a log naming the literal's line, like any
    other mistake (KERNEL-96), and the process goes on to load the next module. The literal is longer than
    any buffer a reader might keep a number in, and a reader's message about it is the code path that runs
    (a child process runs it: a reader that formats its message wrong may crash)."""
    require("lang.ptx")
    outcome = child_json(target, LONG_LITERAL_CHILD, PTX_LONG_LITERAL_ON_LINE_6, NOP_PTX, timeout=120)
    assert outcome["error"] == "CompileError", f"a 70-digit literal: {outcome}"
    lines = outcome["lines"]
    assert lines and set(lines) == {6}, f"the log names lines {lines}, not line 6 alone"


#: A PTX module that loads on every device that takes PTX (the suite has no PTX kernel files: CUDA's are CUDA C)
NOP_PTX = ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry nop() { ret; }\n"


def _as_is_code(lang: str, device) -> str | bytes:
    """A module in a language loaded as it is, valid for ``device``."""
    if lang == "ptx":
        return NOP_PTX
    if lang == "spirv":
        return (conformance_dir() / "kernels" / "spirv" / "saxpy.spv").read_bytes()
    major, minor = device.info.extra["compute_capability"]
    path = conformance_dir() / "kernels" / "cubin" / f"saxpy.sm_{major}{minor}.cubin"
    if not path.exists():
        pytest.fail(f"no committed cubin for sm_{major}{minor}: regenerate them with ci/gen_cubin")
    return path.read_bytes()


@pytest.mark.clause("KERNEL-72")
def test_languages_loaded_as_they_are_take_no_options(device, kernels, require):
    """PTX, cubins and SPIR-V go to the driver (or the backend's reader) as they are: an option given with them
    configures nothing, and a caller who passed ``-arch`` or ``-O0`` must hear so, not get a module built
    without it. Each module is valid, so only the options can be what is refused."""
    langs = [lang for lang in device.languages if lang in ("ptx", "cubin", "spirv")]
    if not langs:
        require("lang.ptx")
    for lang in langs:
        code = _as_is_code(lang, device)
        device.compile(code, lang).close()  # loads without options
        with raises_naming(ia.InvalidArgument, "Device.compile", "-O3"):
            device.compile(code, lang, options=["-O3"])
    assert_device_works(device, kernels)


#: Options each of these languages refuses (GLSL 4.30 takes only ("-e", NAME), WGSL none), with what is named
REFUSED_OPTIONS = {"glsl430": [(["-O3"], "-O3"), (["-e", "not a name"], "not a name"), (["-e"], "-e")],
                   "wgsl": [(["-O3"], "-O3"), (["-e", "fill_u32"], "fill_u32")]}


@pytest.mark.clause("KERNEL-74")
def test_options_a_text_language_does_not_take_are_refused(device, kernels, kernel_source, require):
    """The compilers behind these languages are given no command line (OpenGL's names its entry point with
    ``-e``, WGSL's takes nothing): an option the caller gave must be refused, not dropped."""
    langs = [lang for lang in device.languages if lang in REFUSED_OPTIONS]
    if not langs:
        require("lang.glsl430")
    for lang in langs:
        source = kernel_source("fill_u32", lang)
        for options, named in REFUSED_OPTIONS[lang]:
            with raises_naming(ia.InvalidArgument, "Device.compile", named):
                device.compile(source, lang, options=options)
    assert_device_works(device, kernels)


@pytest.mark.clause("KERNEL-2")
@pytest.mark.parametrize("block", [1, 32, 64, 256])
@pytest.mark.parametrize("n", [1, 1000, 4099])
def test_fill_saxpy_vecadd(device, stream, kernels, block, n):
    grid = ceil_div(n, block)
    r = rng(n + block)
    out = poisoned(device, stream, 4 * n + 64)
    stream.launch(kernels("fill_u32"), grid, block, (out, np.uint32(0xC0FFEE), np.uint32(n)))
    got = read(stream, out, np.uint32, count=n + 16)
    assert (got[:n] == 0xC0FFEE).all()
    assert (got[n:] == 0xA5A5A5A5).all(), "fill_u32 wrote past n"

    x = r.standard_normal(n).astype(np.float32)
    y = r.standard_normal(n).astype(np.float32)
    bx, by = upload(device, stream, x), upload(device, stream, y)
    stream.launch(kernels("saxpy"), grid, block, (bx, by, np.float32(-1.75), np.uint32(n)))
    np.testing.assert_allclose(read(stream, by, np.float32), np.float32(-1.75) * x + y, rtol=1e-6, atol=1e-6)

    bc = poisoned(device, stream, 4 * n)
    stream.launch(kernels("vecadd"), grid, block, (bx, by, bc, np.uint32(n)))
    np.testing.assert_allclose(read(stream, bc, np.float32), x + (np.float32(-1.75) * x + y), rtol=1e-6, atol=1e-6)
    for b in (out, bx, by, bc):
        b.free()


@pytest.mark.clause("KERNEL-3")
@pytest.mark.parametrize("block", [(16, 16), (8, 4), (1, 32), (32, 1)])
def test_index2d(device, stream, kernels, block):
    width, height = 77, 45
    with poisoned(device, stream, 4 * width * height) as out:
        grid = (ceil_div(width, block[0]), ceil_div(height, block[1]))
        stream.launch(kernels("index2d"), grid, block, (out, np.uint32(width), np.uint32(height)))
        y, x = np.mgrid[0:height, 0:width].astype(np.uint32)
        np.testing.assert_array_equal(read(stream, out, np.uint32).reshape(height, width), (y << 16) | x)


@pytest.mark.clause("KERNEL-4")
@pytest.mark.parametrize("block", [(4, 4, 4), (8, 2, 1), (1, 1, 16), (2, 8, 4)])
def test_index3d(device, stream, kernels, block):
    nx, ny, nz = 13, 9, 7
    with poisoned(device, stream, 4 * nx * ny * nz) as out:
        grid = tuple(ceil_div(n, b) for n, b in zip((nx, ny, nz), block))
        stream.launch(kernels("index3d"), grid, block, (out, np.uint32(nx), np.uint32(ny), np.uint32(nz)))
        z, y, x = np.mgrid[0:nz, 0:ny, 0:nx].astype(np.uint32)
        np.testing.assert_array_equal(read(stream, out, np.uint32).reshape(nz, ny, nx), x | (y << 10) | (z << 20))


@pytest.mark.clause("KERNEL-5")
@pytest.mark.parametrize("block", [1, 7, 96, 256])
def test_block_and_thread_ids(device, stream, kernels, block):
    n = 1000
    with poisoned(device, stream, 4 * n) as out:
        stream.launch(kernels("block_ids"), ceil_div(n, block), block, (out, np.uint32(n)))
        i = np.arange(n, dtype=np.uint32)
        np.testing.assert_array_equal(read(stream, out, np.uint32), ((i // block) << 16) | (i % block))


@pytest.mark.clause("KERNEL-6")
def test_argument_packing(device, stream, kernels):
    with poisoned(device, stream, 16) as out_u, poisoned(device, stream, 8) as out_f:
        stream.launch(kernels("pack_args"), 1, 1,
                      (out_u, np.uint32(0xA1B2C3D4), np.float32(-2.5e-3), np.int32(-123456), out_f, np.uint32(77)))
        got_u = read(stream, out_u, np.uint32)
        assert list(got_u[:3]) == [0xA1B2C3D4, np.int32(-123456).view(np.uint32), 77]
        assert got_u[3] == 0xA5A5A5A5
        assert read(stream, out_f, np.float32)[0] == np.float32(-2.5e-3)


@pytest.mark.clause("KERNEL-6")
def test_relaunch_with_new_scalars(device, stream, kernels):
    """The same kernel on the same buffers, scalars changed between launches: each launch sees its own."""
    n = 256
    with poisoned(device, stream, 4 * n) as out:
        for value, count in [(0x11111111, n), (0x22222222, n), (0x33333333, n // 2), (0x11111111, n // 4)]:
            stream.launch(kernels("fill_u32"), ceil_div(count, 64), 64, (out, np.uint32(value), np.uint32(count)))
        got = read(stream, out, np.uint32)
        expect = np.full(n, 0x22222222, np.uint32)
        expect[: n // 2] = 0x33333333
        expect[: n // 4] = 0x11111111
        np.testing.assert_array_equal(got, expect)


@pytest.mark.clause("KERNEL-16")
def test_back_to_back_launches_bind_each_launchs_own_buffers(device, stream, kernels):
    """Launches queued in one burst, on buffers of one size (likely sub-allocated side by side), then on the same
    buffers in another order: a binding cached by size, by block or by the set of buffers writes the wrong one."""
    n, count = 64, 8
    bufs = [device.alloc(4 * n) for _ in range(count)]
    try:
        for i, buf in enumerate(bufs):
            stream.fill(buf, POISON)
        for i, buf in enumerate(bufs):
            stream.launch(kernels("fill_u32"), 1, 64, (buf, np.uint32(0x1000 + i), np.uint32(n)))
        for i, buf in enumerate(bufs):
            np.testing.assert_array_equal(read(stream, buf, np.uint32), np.full(n, 0x1000 + i, np.uint32),
                                          err_msg=f"buffer {i} of {count}")
        x, y = rng(16).standard_normal((2, n)).astype(np.float32)
        stream.copy_htod(bufs[0], x)
        stream.copy_htod(bufs[1], y)
        saxpy = kernels("saxpy")  # y = a * x + y
        stream.launch(saxpy, 1, 64, (bufs[0], bufs[1], np.float32(2), np.uint32(n)))
        stream.launch(saxpy, 1, 64, (bufs[1], bufs[0], np.float32(2), np.uint32(n)))  # the same two, swapped
        y = np.float32(2) * x + y
        x = np.float32(2) * y + x
        np.testing.assert_allclose(read(stream, bufs[1], np.float32), y, rtol=1e-6)
        np.testing.assert_allclose(read(stream, bufs[0], np.float32), x, rtol=1e-6)
        if device.supports("graphs"):  # the same pair recorded into one graph, whose bindings are made together
            stream.copy_htod(bufs[2], x)
            stream.copy_htod(bufs[3], y)
            with stream.capture() as graph:
                stream.launch(saxpy, 1, 64, (bufs[2], bufs[3], np.float32(2), np.uint32(n)))
                stream.launch(saxpy, 1, 64, (bufs[3], bufs[2], np.float32(2), np.uint32(n)))
                for i, buf in enumerate(bufs[4:]):
                    stream.launch(kernels("fill_u32"), 1, 64, (buf, np.uint32(0x2000 + i), np.uint32(n)))
            graph.launch(stream)
            for i, buf in enumerate(bufs[4:]):
                np.testing.assert_array_equal(read(stream, buf, np.uint32), np.full(n, 0x2000 + i, np.uint32),
                                              err_msg=f"buffer {4 + i} of {count}, filled in the graph")
            y = np.float32(2) * x + y
            x = np.float32(2) * y + x
            np.testing.assert_allclose(read(stream, bufs[3], np.float32), y, rtol=1e-6)
            np.testing.assert_allclose(read(stream, bufs[2], np.float32), x, rtol=1e-6)
    finally:
        for buf in bufs:
            buf.free()


@pytest.mark.clause("KERNEL-7")
@pytest.mark.parametrize("block", [2, 32, 128, 256])
def test_shared_memory_reduction(device, stream, kernels, block, require):
    require("kernel.shared_memory")
    n = 10_000
    x = rng(block).integers(-8, 9, n).astype(np.float32)  # small integers: the sum is exact in f32
    blocks = ceil_div(n, block)
    bx = upload(device, stream, x)
    with poisoned(device, stream, 4 * blocks) as partial:
        stream.launch(kernels("reduce_sum"), blocks, block, (bx, partial, np.uint32(n)))
        padded = np.zeros(blocks * block, np.float32)
        padded[:n] = x
        np.testing.assert_array_equal(read(stream, partial, np.float32), padded.reshape(blocks, block).sum(axis=1))
    bx.free()


@pytest.mark.clause("KERNEL-8")
@pytest.mark.parametrize("block", [64, 256])
def test_histogram_atomics(device, stream, kernels, block, require):
    require("kernel.atomics.int32")
    n = 50_000
    x = rng(3).integers(0, 1 << 20, n, dtype=np.uint32)
    bx = upload(device, stream, x)
    with device.alloc(64 * 4) as bins:
        start = rng(4).integers(0, 1000, 64, dtype=np.uint32)  # bins accumulate onto what is there
        stream.copy_htod(bins, start)
        stream.launch(kernels("histogram"), ceil_div(n, block), block, (bx, bins, np.uint32(n)))
        np.testing.assert_array_equal(read(stream, bins, np.uint32), start + np.bincount(x % 64, minlength=64))
    bx.free()


@pytest.mark.clause("KERNEL-9")
def test_float_atomic_add(device, stream, kernels, require):
    require("kernel.atomics.float32")
    n = 4096
    x = rng(5).integers(-50, 50, n).astype(np.float32) / 4  # quarters: exact in any order
    bx = upload(device, stream, x)
    with device.alloc(4) as out:
        stream.copy_htod(out, np.array([1.5], np.float32))
        stream.launch(kernels("atomic_add_f32"), ceil_div(n, 128), 128, (bx, out, np.uint32(n)))
        assert read(stream, out, np.float32)[0] == np.float32(1.5) + x.sum(dtype=np.float64)
    bx.free()


@pytest.mark.clause("KERNEL-10")
def test_float64_daxpy(device, stream, kernels, require):
    require("kernel.float64")
    n = 1000
    x, y = rng(6).standard_normal(n), rng(7).standard_normal(n)
    bx, by = upload(device, stream, x), upload(device, stream, y)
    a = np.float64(1.0 / 3.0)
    stream.launch(kernels("daxpy"), ceil_div(n, 64), 64, (bx, by, a, np.uint32(n)))
    np.testing.assert_allclose(read(stream, by, np.float64), a * x + y, rtol=1e-15, atol=1e-15)
    bx.free()
    by.free()


def threads_over_the_limit_in_3d(lim: ia.Limits) -> tuple[int, int, int]:
    """A block whose every axis is within its limit but whose threads, twice the most x and y allow together,
    are more than the device takes: a count of threads that misses an axis accepts it."""
    x = min(lim.max_block[0], lim.max_threads_per_block)
    y = min(lim.max_block[1], ceil_div(lim.max_threads_per_block, x))
    return (x, y, 2)


def threads_over_the_limit_on_every_axis(lim: ia.Limits) -> tuple[int, int, int]:
    """A block of at least 2 threads on every axis, each within its limit, whose threads are more than the device
    takes: a count that divides by an axis where it should multiply (x // y * z) accepts it."""
    x = min(lim.max_block[0], lim.max_threads_per_block)
    y = min(lim.max_block[1], max(2, ceil_div(lim.max_threads_per_block + 1, 2 * x)))
    return (x, y, 2)


@pytest.mark.clause("KERNEL-11", "ERR-1", "ERR-2")
def test_bad_launches(device, stream, kernels):
    k = kernels("fill_u32")
    lim = device.info.limits
    with device.alloc(64) as out:
        bad = {
            "python float": dict(grid=1, block=16, args=(out, 1.0, np.uint32(16))),
            "python int": dict(grid=1, block=16, args=(out, np.uint32(1), 16)),
            "zero grid": dict(grid=0, block=16, args=(out, np.uint32(1), np.uint32(16))),
            "zero block": dict(grid=1, block=(16, 0), args=(out, np.uint32(1), np.uint32(16))),
            "four dims": dict(grid=(1, 1, 1, 1), block=16, args=(out, np.uint32(1), np.uint32(16))),
            "no grid dims": dict(grid=(), block=16, args=(out, np.uint32(1), np.uint32(16))),
            "no block dims": dict(grid=1, block=[], args=(out, np.uint32(1), np.uint32(16))),
            "huge block": dict(grid=1, block=lim.max_threads_per_block + 1, args=(out, np.uint32(1), np.uint32(16))),
            "huge 3-d block": dict(grid=1, block=threads_over_the_limit_in_3d(lim),
                                   args=(out, np.uint32(1), np.uint32(16))),
            "huge block of 2 or more on every axis": dict(grid=1, block=threads_over_the_limit_on_every_axis(lim),
                                                          args=(out, np.uint32(1), np.uint32(16))),
            "huge grid": dict(grid=lim.max_grid[0] + 1, block=1, args=(out, np.uint32(1), np.uint32(16))),
            "too few args": dict(grid=1, block=16, args=(out,)),
            "not a buffer": dict(grid=1, block=16, args=(np.zeros(4), np.uint32(1), np.uint32(16))),
        }
        for what, kw in bad.items():
            with pytest.raises(ia.InvalidArgument, match=r"Stream\.launch"):
                stream.launch(k, **kw)
                stream.synchronize()
                pytest.fail(f"{what}: no InvalidArgument")
        with pytest.raises(ia.InvalidArgument, match=r"Module\.kernel.*no_such_kernel"):
            k.module.kernel("no_such_kernel")
    assert_device_works(device, kernels)


@pytest.mark.clause("KERNEL-12")
def test_block_sizes_alternate(device, stream, kernels):
    n = 3000
    with device.alloc(4 * n) as buf:
        stream.fill(buf, 0)
        blocks = [32, 256, 32, 64, 256, 1, 64]
        for b in blocks:
            stream.launch(kernels("add_one"), ceil_div(n, b), b, (buf, np.uint32(n)))
        assert (read(stream, buf, np.uint32) == len(blocks)).all()


@pytest.mark.clause("KERNEL-13")
def test_cubin_loads_directly(device, stream, require):
    require("lang.cubin")
    major, minor = device.info.extra["compute_capability"]
    path = conformance_dir() / "kernels" / "cubin" / f"saxpy.sm_{major}{minor}.cubin"
    if not path.exists():
        pytest.fail(f"no committed cubin for sm_{major}{minor}: regenerate them with ci/gen_cubin")
    k = device.compile(path.read_bytes(), "cubin").kernel("saxpy")
    n = 3000
    x, y = rng(9).standard_normal(n).astype(np.float32), rng(10).standard_normal(n).astype(np.float32)
    bx, by = upload(device, stream, x), upload(device, stream, y)
    stream.launch(k, ceil_div(n, 128), 128, (bx, by, np.float32(0.5), np.uint32(n)))
    np.testing.assert_allclose(read(stream, by, np.float32), np.float32(0.5) * x + y, rtol=1e-6, atol=1e-6)
    with pytest.raises(ia.InvalidArgument, match=r"Stream\.launch.*takes 4 argument"):
        stream.launch(k, 1, 32, (bx, by, np.float32(0.5)))
    with pytest.raises(ia.CompileError):
        device.compile(b"\x7fELF but not a CUDA binary" * 4, "cubin")
    bx.free()
    by.free()


@pytest.mark.clause("KERNEL-14")
def test_a_rejected_launch_keeps_the_work_before_it(device, stream, kernels):
    with poisoned(device, stream, 4096) as buf:
        stream.fill(buf, 0x3C)
        with pytest.raises(ia.InvalidArgument, match=r"^Stream\.launch: "):
            stream.launch(kernels("add_one"), 1, 64, (buf,))
        stream.fill(buf, 0x3D, offset=2048)
        got = read(stream, buf)
        assert (got[:2048] == 0x3C).all() and (got[2048:] == 0x3D).all(), "work around a rejected launch was lost"
    assert_device_works(device, kernels)


@pytest.mark.clause("KERNEL-15", "ERR-1")
def test_arguments_are_checked_against_the_kernels_parameters(device, stream, kernels):
    saxpy = kernels("saxpy")  # (x: buffer, y: buffer, a: float32, n: uint32)
    # what the checks compare with, as Kernel.params shows it: a buffer's size is 0 (no scalar) or a pointer's
    # (CUDA's PTX declares pointers as 64-bit integers), never a negative size a sum of parameter sizes miscounts
    params = saxpy.params
    assert [p.kind for p in params[:2]] in (["buffer"] * 2, ["buffer-or-scalar"] * 2), params
    assert all(p.nbytes in (0, 4, 8) for p in params[:2]), f"a buffer parameter's nbytes: {params}"
    assert [(p.kind, p.nbytes) for p in params[2:]] == [("scalar", 4)] * 2, params
    assert params[2].scalar in ("float", "") and params[3].scalar in ("int", ""), params
    with poisoned(device, stream, 64) as x, poisoned(device, stream, 64) as y:
        a, n = np.float32(2), np.uint32(16)
        bad = {
            "a scalar too many": (x, y, a, n, np.uint32(1)),
            "a scalar too few": (x, y, a),
            "a buffer too few": (x, a, n),
            "a buffer too many": (x, y, x, a, n),
            "u32 where f32 is declared": (x, y, np.uint32(2), n),
            "f32 where u32 is declared": (x, y, a, np.float32(16)),
            "i64 where u32 is declared": (x, y, a, np.int64(16)),
            "a scalar where a buffer is declared": (x, np.float32(1), a, n),
            "a buffer where f32 is declared": (x, y, x, n),
            "a buffer where u32 is declared": (x, y, a, y),
            # each argument of another type than the good launches' (a cache keyed by the types finds nothing)
            "a buffer too few, every argument's type another": (a, n, x, a),
        }
        if device.supports("kernel.float64"):
            bad["f64 where f32 is declared"] = (x, y, np.float64(2), n)
        for _ in range(2):  # good launches first: their checks are cached, and a compiled path remembers them
            stream.launch(saxpy, 1, 16, (x, y, np.float32(0), np.uint32(0)))
        for what, args in bad.items():
            try:
                stream.launch(saxpy, 1, 16, args)
            except (ia.InvalidArgument, ia.Unsupported) as err:  # Unsupported: a 64-bit scalar the device cannot take
                assert str(err).startswith("Stream.launch: ") and err.op == "Stream.launch", f"{what}: {err}"
                continue
            pytest.fail(f"{what}: the launch was accepted")
        for _ in range(2):  # args omitted (its default, no arguments): every parameter too few, after good launches
            with pytest.raises(ia.InvalidArgument, match="^Stream.launch: ") as err:
                stream.launch(saxpy, 1, 16)
            assert err.value.op == "Stream.launch", err.value
        assert (read(stream, y) == POISON).all(), "a rejected launch ran"
    assert_device_works(device, kernels)


def _bad_fill_args(out, other_device_buffer):
    """Arguments ``fill_u32(out: u32[], value: u32, n: u32)`` must refuse, each with what is wrong."""
    v, n = np.uint32(7), np.uint32(16)
    return {
        "too few": (out, v),
        "too many": (out, v, n, np.uint32(1)),
        "a buffer too many": (out, out, v, n),
        "i64 where u32 is declared": (out, np.int64(7), n),
        "u64 where u32 is declared": (out, v, np.uint64(16)),
        "f32 where u32 is declared": (out, np.float32(7), n),
        "f64 where u32 is declared": (out, v, np.float64(16)),
        "a buffer where u32 is declared": (out, out, n),
        "a scalar where a buffer is declared": (np.uint32(0), v, n),
        "a python int": (out, 7, n),
        "a host array": (np.zeros(16, np.uint32), v, n),
        "a buffer of another device": (other_device_buffer, v, n),
    }


@pytest.mark.clause("KERNEL-17", "ERR-1")
def test_prepared_plans_check_limits_devices_and_arguments(device, stream, kernels):
    k = kernels("fill_u32")
    lim = device.info.limits
    second = get_backend(device.info.backend).open_device(device.info.index)
    try:
        # the limits themselves are accepted (a boundary checked with < where <= is meant refuses them)
        k.prepare(lim.max_grid, 1)
        k.prepare(1, lim.max_threads_per_block)
        for axis in range(3):
            block = [1, 1, 1]
            block[axis] = min(lim.max_block[axis], lim.max_threads_per_block)
            k.prepare(1, tuple(block))
        over = {
            "threads per block": (1, lim.max_threads_per_block + 1),
            "threads per 3-d block": (1, threads_over_the_limit_in_3d(lim)),
            "threads per block of 2 or more on every axis": (1, threads_over_the_limit_on_every_axis(lim)),
            **{f"grid axis {'xyz'[a]}": (tuple(lim.max_grid[i] + (i == a) for i in range(3)), 1) for a in range(3)},
            **{f"block axis {'xyz'[a]}": (1, tuple(lim.max_block[i] + 1 if i == a else 1 for i in range(3)))
               for a in range(3)},
            "zero grid": (0, 1), "zero block": (1, (1, 0)), "a bool": ((True,), 1), "a float": (1, 32.0),
            "four dims": ((1, 1, 1, 1), 1),
            "no grid dims": ((), 1), "no block dims": (1, []),
        }
        for what, (grid, block) in over.items():
            with pytest.raises(ia.InvalidArgument, match=r"^Kernel\.prepare: "):
                k.prepare(grid, block)
                pytest.fail(f"{what}: prepared")
        n = 1000
        with poisoned(device, stream, 4 * n) as out, second.alloc(64) as foreign:
            plan = k.prepare(ceil_div(n, 64), 64)
            for _ in range(2):  # good arguments first: their checks are cached, and a compiled path remembers them
                plan(stream, out, np.uint32(5), np.uint32(n))
            for what, args in _bad_fill_args(out, foreign).items():
                try:
                    plan(stream, *args)
                except (ia.InvalidArgument, ia.Unsupported) as err:  # Unsupported: a 64-bit scalar the device cannot take
                    assert str(err).startswith("Stream.launch: ") and err.op == "Stream.launch", f"{what}: {err}"
                    continue
                pytest.fail(f"{what}: the plan launched")
            small = k.prepare(1, 16)
            for what, target, buf in [("a stream of another device (its buffer too)", second.create_stream(), foreign),
                                      ("not a stream", None, out), ("a device", device, out)]:
                with pytest.raises(ia.InvalidArgument, match=r"^Stream\.launch: "):
                    small(target, buf, np.uint32(9), np.uint32(16))
                    pytest.fail(f"{what}: the plan launched")
            for _ in range(2):  # the kernel warm on its own device, with the dims and types used next
                stream.launch(k, 1, 16, (out, np.uint32(5), np.uint32(16)))
            with pytest.raises(ia.InvalidArgument, match=r"^Stream\.launch: "):
                second.create_stream().launch(k, 1, 16, (foreign, np.uint32(6), np.uint32(16)))
                pytest.fail("a kernel launched on a stream of another device")
            np.testing.assert_array_equal(read(stream, out, np.uint32), np.full(n, 5, np.uint32),
                                          err_msg="a rejected plan launch ran")
            assert (read(second.create_stream(), foreign) != 6).any(), "another device's kernel ran"
            # each plan keeps its own grid and block, however many plans the kernel has
            small, wide = k.prepare(1, 32), k.prepare(ceil_div(n, 128), 128)  # after other plans of the kernel
            wide(stream, out, np.uint32(1), np.uint32(n))
            small(stream, out, np.uint32(2), np.uint32(n))
            got = read(stream, out, np.uint32)
            assert (got[:32] == 2).all() and (got[32:] == 1).all(), "a plan ran with another plan's grid or block"
    finally:
        second.close()
    assert_device_works(device, kernels)


@pytest.mark.clause("KERNEL-18")
@pytest.mark.parametrize("via", ["Stream.launch", "a prepared plan"])
def test_each_launch_uses_its_own_arguments(device, stream, kernels, via):
    """One burst, no synchronize: every launch of fill_u32 writes its own value over its own count, so the
    result is a staircase that shows which launch wrote what. A dispatch cache keyed too loosely (by kernel,
    by size, by buffer), scalars packed at submit time rather than at the call, or one argument list read
    late gives another step."""
    k = kernels("fill_u32")
    n = 4096
    steps = [  # (buffer, value, count, block)
        (0, 0xFFFFFFFF, 4096, 64), (1, 0, 4096, 64), (0, 0x80000000, 3001, 256), (1, 17, 2049, 32),
        (0, 0, 2048, 128), (0, 0x7FFFFFFF, 1025, 1), (1, 0xDEADBEEF, 100, 64), (0, 3, 64, 64), (1, 4, 63, 16),
    ]
    with poisoned(device, stream, 4 * n) as a, poisoned(device, stream, 4 * n) as b:
        bufs = (a, b)
        expect = [np.full(n, POISON * 0x01010101, np.uint32) for _ in bufs]
        args = [a, np.uint32(0), np.uint32(0)]  # one list, rewritten for every launch
        for i, value, count, block in steps:
            args[:] = [bufs[i], np.uint32(value), np.uint32(count)]
            if via == "Stream.launch":
                stream.launch(k, ceil_div(count, block), block, args)
            else:
                k.prepare(ceil_div(count, block), block)(stream, *args)
            expect[i][:count] = value
        args[:] = [b, np.uint32(1), np.uint32(n)]  # changed after the last launch, before anything ran
        for name, buf, want in zip("ab", bufs, expect):
            np.testing.assert_array_equal(read(stream, buf, np.uint32), want, err_msg=f"buffer {name}")
        # the very same argument objects with a smaller block, then a bigger one: the block is part of the launch
        same = (a, np.uint32(9), np.uint32(64))
        for block in (8, 8, 64):  # twice first: a compiled path remembers a launch it has seen twice
            if via == "Stream.launch":
                stream.launch(k, 1, block, same)
            else:
                k.prepare(1, block)(stream, *same)
        assert (read(stream, a, np.uint32, count=64) == 9).all(), "a launch ran with the block of the launch before"
        # a grid equal to the block (twice), then another grid with that block, each over the whole buffer: a
        # launch looked up by (block, block) instead of (grid, block) runs the last with the first's 64 blocks
        for grid in (64, 64, 1):
            if via == "Stream.launch":
                stream.launch(k, grid, 64, (a, np.uint32(grid), np.uint32(n)))
            else:
                k.prepare(grid, 64)(stream, a, np.uint32(grid), np.uint32(n))
        want = np.full(n, 64, np.uint32)
        want[:64] = 1
        np.testing.assert_array_equal(read(stream, a, np.uint32), want, err_msg="grid 1 after grid 64, block 64")


@pytest.mark.clause("KERNEL-19", "ERR-1", "ERR-2")
def test_a_source_that_is_not_utf8_is_an_invalid_argument(device, kernels):
    """A lone surrogate cannot be encoded as UTF-8: every text language says so naming Device.compile, before
    any compiler sees the source (no garbage log, no stale driver error), and the device still works."""
    text = [lang for lang in device.languages if lang not in ia.api.BINARY_LANGUAGES]  # none: the rule holds as is
    for lang in text:
        with pytest.raises(ia.InvalidArgument) as info:
            device.compile("// \udc80 not UTF-8\n" + BROKEN.get(lang, "x"), lang)
        assert type(info.value) is ia.InvalidArgument, f"{lang}: {info.value!r}"
        assert info.value.op == "Device.compile" and "UTF-8" in str(info.value), f"{lang}: {info.value}"
    assert device.diagnostics() == []
    assert_device_works(device, kernels)


#: (grid, block) tuples, each differing from the one before in every axis: a launch cache that matches dims
#: by one axis, by any axis, or by the object and not its values hands a launch the one before's dims.
DIMS_2D = [((2, 3), (8, 4)), ((3, 5), (16, 2)), ((1, 2), (4, 8)), ((5, 1), (2, 16)), ((2, 3), (8, 4))]
DIMS_3D = [((1, 2, 3), (4, 4, 2)), ((2, 3, 1), (2, 2, 8)), ((3, 1, 2), (8, 1, 4)), ((1, 2, 3), (4, 4, 2))]


def _expected_index(shape: tuple[int, ...]) -> np.ndarray:
    """What index2d (shape (width, height)) or index3d (shape (nx, ny, nz)) writes over exactly that domain."""
    if len(shape) == 2:
        y, x = np.mgrid[0:shape[1], 0:shape[0]].astype(np.uint32)
        return ((y << 16) | x).ravel()
    z, y, x = np.mgrid[0:shape[2], 0:shape[1], 0:shape[0]].astype(np.uint32)
    return (x | (y << 10) | (z << 20)).ravel()


@pytest.mark.clause("KERNEL-20")
def test_each_launch_uses_its_own_dims_given_as_tuples(device, stream, kernels):
    """One burst, no synchronize: index2d and index3d launched over grids and blocks given as tuples, each
    (grid, block) differing from the one before in every axis, each launched twice in a row (a compiled path
    remembers a launch it has seen twice) and the first one again at the end as new but equal tuples. Each
    launch writes its own buffer over exactly its grid times its block: a launch that ran with remembered
    dims of another leaves cells poisoned (or, bounds-checked, writes nothing past its domain)."""
    launches = []
    for name, steps in (("index2d", DIMS_2D), ("index3d", DIMS_3D)):
        kernel = kernels(name)
        for grid, block in steps:
            grid, block = tuple(list(grid)), tuple(list(block))  # equal to an earlier step's, never the same object
            shape = tuple(g * b for g, b in zip(grid, block))
            out = poisoned(device, stream, 4 * int(np.prod(shape)))
            for _ in range(2):
                stream.launch(kernel, grid, block, (out, *map(np.uint32, shape)))
            launches.append((name, grid, block, shape, out))
    try:
        for name, grid, block, shape, out in launches:
            np.testing.assert_array_equal(read(stream, out, np.uint32), _expected_index(shape),
                                          err_msg=f"{name} over grid {grid}, block {block}")
    finally:
        for *_, out in launches:
            out.free()


#: pack_wide's scalars (s0: u32, a: u64, b: i64, s1: u32) at the edges of their widths
WIDE_CASES = [(0xFFFFFFFF, 0xFEDCBA9876543210, -0x123456789ABCDEF, 7), (1, 1 << 63, -(1 << 63), 0),
              (0, (1 << 64) - 1, -1, 0xFFFFFFFF), (0x80000000, 0x100000001, (1 << 63) - 1, 3), (5, 0, 0, 6)]


@pytest.mark.clause("KERNEL-21")
def test_64_bit_integer_scalars_between_32_bit_ones(device, stream, kernels, require):
    """A 64-bit scalar after a 32-bit one sits at the next 8-byte boundary (4 bytes of padding), and all its
    64 bits count: a packer that puts it at offset 4, truncates it to 32 bits, or loses the sign of an i64,
    gives other words; launched twice each, back to back (a compiled path takes the second)."""
    require("kernel.int64")
    k = kernels("pack_wide")
    outs = [poisoned(device, stream, 4 * 6) for _ in WIDE_CASES]
    try:
        for out, (s0, a, b, s1) in zip(outs, WIDE_CASES):
            for _ in range(2):
                stream.launch(k, 1, 1, (out, np.uint32(s0), np.uint64(a), np.int64(b), np.uint32(s1)))
        for out, (s0, a, b, s1) in zip(outs, WIDE_CASES):
            b_bits = b % (1 << 64)
            want = [s0, a & 0xFFFFFFFF, a >> 32, b_bits & 0xFFFFFFFF, b_bits >> 32, s1]
            got = read(stream, out, np.uint32).tolist()
            assert got == want, f"pack_wide(s0={s0:#x}, a={a:#x}, b={b:#x}, s1={s1:#x}) wrote {[hex(w) for w in got]}"
    finally:
        for out in outs:
            out.free()


#: fill_iota(out, value, n): out[i] = value + i, as NVRTC emits it for sm_70, with its pointer parameter marked
#: ``.ptr .global`` as clang and hand-written PTX mark them (NVRTC's own output leaves pointers plain ``.u64``)
PTX_MARKED_POINTER = """.version 7.0
.target sm_70
.address_size 64

.visible .entry fill_iota(
    .param .u64 .ptr .global .align 4 fill_iota_param_0,
    .param .u32 fill_iota_param_1,
    .param .u32 fill_iota_param_2
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [fill_iota_param_0];
    ld.param.u32 %r2, [fill_iota_param_1];
    ld.param.u32 %r3, [fill_iota_param_2];
    mov.u32 %r4, %ctaid.x;
    mov.u32 %r5, %ntid.x;
    mov.u32 %r6, %tid.x;
    mad.lo.s32 %r1, %r4, %r5, %r6;
    setp.ge.u32 %p1, %r1, %r3;
    @%p1 bra $L__BB0_2;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    add.s32 %r7, %r1, %r2;
    st.global.u32 [%rd4], %r7;
$L__BB0_2:
    ret;
}
"""


@pytest.mark.clause("KERNEL-50")
def test_a_ptx_pointer_marked_as_one_takes_a_buffer(device, stream, require):
    require("lang.ptx")
    k = device.compile(PTX_MARKED_POINTER, "ptx").kernel("fill_iota")
    assert [p.kind for p in k.params] == ["buffer", "scalar", "scalar"], k.params
    n = 1000
    with poisoned(device, stream, 4 * n + 64) as out:
        stream.launch(k, ceil_div(n, 128), 128, (out, np.uint32(7), np.uint32(n)))
        got = read(stream, out, np.uint32, count=n + 16)
        np.testing.assert_array_equal(got[:n], 7 + np.arange(n, dtype=np.uint32))
        assert (got[n:] == 0xA5A5A5A5).all(), "fill_iota wrote past n"
        with pytest.raises(ia.InvalidArgument, match=r"^Stream\.launch: .*argument 0 of fill_iota"):
            stream.launch(k, 1, 1, (np.uint64(0), np.uint32(7), np.uint32(n)))  # a 64-bit integer is no buffer
        stream.synchronize()


@pytest.mark.clause("KERNEL-60")
def test_warp_size_is_zero_or_a_subgroup_width(device):
    lim = device.info.limits
    w = lim.warp_size
    assert type(w) is int and (w == 0 or (w & (w - 1) == 0 and 1 <= w <= lim.max_threads_per_block)), \
        f"limits.warp_size is {w!r}: not 0 (cannot tell) nor a power of two up to {lim.max_threads_per_block}"
    if "opencl" in device.languages:  # the plugin's language: an OpenCL device has no subgroup width to report
        assert w == 0, f"limits.warp_size is {w} on an OpenCL device, which reports no subgroup width (0: cannot tell)"


@pytest.mark.clause("KERNEL-87")
def test_launches_on_hundreds_of_distinct_buffers_each_bind_their_own(device, stream, kernels):
    """A backend may keep what binds a launch's buffers in pools of fixed size (Vulkan: descriptor sets, 256 a
    pool): launches on more distinct buffers than a pool holds go on in a new pool, and a pool retired once its
    work completed is reused; a launch must still bind its own buffer, never one of an earlier launch's set."""
    count, n = 600, 16
    add_one = kernels("add_one")
    bufs = [device.alloc(4 * n) for _ in range(count)]
    for i, buf in enumerate(bufs):
        stream.copy_htod(buf, np.full(n, i, np.uint32))
    for half in (bufs[:count // 2], bufs[count // 2:]):  # a synchronize between: the first pool's work completes
        for buf in half:
            stream.launch(add_one, 1, 32, (buf, np.uint32(n)))
        stream.synchronize()
    for buf in bufs[::-1]:  # again, on the same buffers: the sets made for them, or new ones
        stream.launch(add_one, 1, 32, (buf, np.uint32(n)))
    wrong = [i for i, buf in enumerate(bufs) if not (read(stream, buf, np.uint32) == i + 2).all()]
    assert not wrong, f"{len(wrong)} of {count} buffers not incremented twice, the first: {wrong[:8]}"
    for buf in bufs:
        buf.free()
    assert_device_works(device, kernels)


@pytest.mark.clause("KERNEL-89")
def test_float32_scalars_reach_the_kernel_bit_for_bit(device, stream, kernels):
    """A float32 scalar's bits are the caller's: a backend that packs scalars through a double (Python's
    ``struct``) quiets a signalling NaN on the way, and one that packs by value must not drop a NaN's payload
    or sign. ``pack_args`` stores the f32 it is given without arithmetic, each launch twice (a cached path)."""
    with poisoned(device, stream, 16) as out_u, poisoned(device, stream, 8) as out_f:
        for bits in (0x7F800001, 0xFFC00123, 0x7FC00000, 0xFF800000, 0x80000000, 0x3FC00000):
            for _ in range(2):
                stream.launch(kernels("pack_args"), 1, 1, (out_u, np.uint32(1), np.uint32(bits).view(np.float32),
                                                           np.int32(2), out_f, np.uint32(3)))
                got = read(stream, out_f, np.uint32)[0]
                assert got == bits, f"the float32 scalar with bits {bits:#010x} reached the kernel as {got:#010x}"


@pytest.mark.clause("KERNEL-151")
def test_a_float32_scalar_equal_in_value_to_the_last_launchs_reaches_the_kernel_bit_for_bit(device, stream, kernels):
    """KERNEL-89 for a launch that follows one with the same buffers and a float32 equal in value but of other
    bits: 0.0 after -0.0 and -0.0 after 0.0 (equal as numbers), and the quiet NaNs of either sign (each unequal
    to itself). A backend that remembers a launch's bindings keyed by its scalars' values, not their bytes,
    replays the last launch's zero: the sign a caller set (a -0.0 bias, a sign mask) is lost."""
    pack = kernels("pack_args")
    with poisoned(device, stream, 16) as out_u, poisoned(device, stream, 8) as out_f:
        for bits in (0x00000000, 0x80000000, 0x00000000, 0x7FC00000, 0xFFC00000):
            for _ in range(2):  # the second launch takes a cached path
                stream.launch(pack, 1, 1, (out_u, np.uint32(1), np.uint32(bits).view(np.float32), np.int32(2), out_f,
                                           np.uint32(3)))
                got = read(stream, out_f, np.uint32)[0]
                assert got == bits, f"the float32 scalar with bits {bits:#010x}, launched after the same kernel " \
                    f"with the same buffers, reached the kernel as {got:#010x}"


@pytest.mark.clause("KERNEL-125")
def test_launches_the_signature_refuses_raise_type_error_and_run_nothing(device, stream, kernels):
    """Stream.launch(kernel, grid, block, args=()) called as its signature refuses: block missing, an argument
    after args, a keyword it does not take (alone and beside args=), args given twice. Each, right after good
    launches of the same kernel, dims and argument types (a compiled path remembers them), raises TypeError and
    runs nothing. A compiled launch that counts its positional arguments wrongly launches with no arguments, or
    reads one past the caller's."""
    fill = kernels("fill_u32")  # (out: u32[], value: u32, n: u32)
    with poisoned(device, stream, 64) as warm, poisoned(device, stream, 64) as out:
        good = (warm, np.uint32(1), np.uint32(16))
        args = (out, np.uint32(2), np.uint32(16))
        calls = {
            "block missing": lambda: stream.launch(fill, 1),
            "an argument after args": lambda: stream.launch(fill, 1, 16, args, ()),
            "an unknown keyword": lambda: stream.launch(fill, 1, 16, bogus=1),
            "an unknown keyword beside args=": lambda: stream.launch(fill, 1, 16, args=args, bogus=1),
            "args given twice": lambda: stream.launch(fill, 1, 16, args, args=args),
        }
        for what, call in calls.items():
            for _ in range(2):
                stream.launch(fill, 1, 16, good)
            with pytest.raises(TypeError):
                call()
                pytest.fail(f"{what}: the launch was accepted")
            assert (read(stream, out) == POISON).all(), f"{what}: a refused launch ran"
        stream.launch(fill, 1, 16, args=args)  # args= by keyword is the signature's too
        assert (read(stream, out, np.uint32) == 2).all(), "launch(..., args=...) did not run"
    assert_device_works(device, kernels)


@pytest.mark.clause("KERNEL-126", "ERR-1")
def test_an_argument_of_another_type_in_any_one_place_is_refused(device, stream, kernels):
    """KERNEL-15 with one argument of another type at a time, in each place, the others as in the good launches
    before it: a launch path that remembers resolved launches by their argument types (CUDA's compiled one) and
    compares only some places finds the good launches' packing and passes a scalar as a buffer. Each raises
    InvalidArgument naming Stream.launch, and nothing runs."""
    saxpy = kernels("saxpy")  # (x: buffer, y: buffer, a: float32, n: uint32)
    with poisoned(device, stream, 64) as x, poisoned(device, stream, 64) as y:
        good = [x, y, np.float32(0), np.uint32(0)]
        other = [np.float32(1), np.uint32(1), y, x]  # per place: a value of a type the kernel does not take there
        for place in range(len(good)):
            args = list(good)
            args[place] = other[place]
            for _ in range(2):  # good launches first: a compiled path remembers them
                stream.launch(saxpy, 1, 16, tuple(good))
            with pytest.raises(ia.InvalidArgument, match=r"^Stream\.launch: "):
                stream.launch(saxpy, 1, 16, tuple(args))
                pytest.fail(f"argument {place} of another type: the launch was accepted")
        assert (read(stream, y) == POISON).all(), "a refused launch ran"
    assert_device_works(device, kernels)


@pytest.mark.clause("KERNEL-127", "ERR-1")
def test_a_freed_pooled_buffer_is_refused_by_warm_launches(device, stream, kernels):
    """A MemPool's buffer launched with (by Stream.launch and by a prepared plan, twice each: a compiled path
    remembers the launches), then freed: the next launch with it raises UseAfterFree naming Stream.launch, by
    either way, and nothing runs. A compiled launch that meets the refusal while packing the arguments and
    hands the launch on to the Python path with the error still pending answers a SystemError instead."""
    pool = ia.MemPool(device, stream)
    try:
        _assert_warm_launches_refuse_once_freed(device, stream, kernels, pool.alloc)
    finally:
        pool.close()
    assert_device_works(device, kernels)


@pytest.mark.clause("KERNEL-150", "ERR-1")
def test_a_freed_buffer_is_refused_by_warm_launches(device, stream, kernels):
    """KERNEL-127 for a plain Buffer: one launched with (by Stream.launch and by a prepared plan, twice each: a
    compiled path remembers the launches), then freed: the next launch with it raises UseAfterFree naming
    Stream.launch, by either way, and nothing runs. A warm launch that packs the freed buffer's old address
    writes memory the buffer no longer owns (on a GPU, an illegal address that loses the context, or another
    allocation's bytes)."""
    _assert_warm_launches_refuse_once_freed(device, stream, kernels, device.alloc)
    assert_device_works(device, kernels)


def _assert_warm_launches_refuse_once_freed(device, stream, kernels, alloc) -> None:
    """For each way to launch (Stream.launch, a prepared plan): a 64-byte buffer from ``alloc`` launched with
    twice (the way warm), then freed, is refused by the next launch with UseAfterFree naming Stream.launch, and
    a good launch by the same way still runs."""
    fill = kernels("fill_u32")  # (out: u32[], value: u32, n: u32)
    plan = fill.prepare(1, 16)
    with poisoned(device, stream, 64) as out:
        for way, launch in (("Stream.launch", lambda b, v: stream.launch(fill, 1, 16, (b, v, np.uint32(16)))),
                            ("a prepared plan", lambda b, v: plan(stream, b, v, np.uint32(16)))):
            buf = alloc(64)
            for _ in range(2):
                launch(buf, np.uint32(1))
            stream.synchronize()
            buf.free()
            with pytest.raises(ia.UseAfterFree, match=r"^Stream\.launch: "):
                launch(buf, np.uint32(2))
                pytest.fail(f"{way}: a launch with a freed {type(buf).__name__} was accepted")
            launch(out, np.uint32(3))  # the way still launches
            assert (read(stream, out, np.uint32) == 3).all(), f"{way}: a good launch after the refused one"


@pytest.mark.clause("KERNEL-149")
def test_a_launch_refuses_a_narrower_scalar_where_a_64_bit_one_is_declared(device, stream, kernels, require):
    """A scalar argument binds only to a parameter of its own width: a float32 where daxpy declares its float64
    ``a`` (and an int32 or uint32 there) is refused by Stream.launch and by a prepared plan, after good launches
    of the kernel, and nothing runs. A width check that refuses only wider scalars (as the buffers' 8-byte
    pointers of CUDA make every narrower one wrong anyway) packs 4 bytes where the kernel reads 8."""
    require("kernel.float64")
    k = kernels("daxpy")
    n = 64
    x = np.random.default_rng(18).standard_normal(n)
    y = np.random.default_rng(19).standard_normal(n)
    with device.alloc(8 * n) as bx, device.alloc(8 * n) as by:
        stream.copy_htod(bx, x)
        stream.copy_htod(by, y)
        plan = k.prepare(1, n)
        for _ in range(2):  # good launches first (a = 0: y unchanged): the argument checks cached, fast paths warm
            stream.launch(k, 1, n, (bx, by, np.float64(0.0), np.uint32(n)))
            plan(stream, bx, by, np.float64(0.0), np.uint32(n))
        for narrow in (np.float32(2.0), np.int32(2), np.uint32(2)):
            for how, launch in (("Stream.launch", lambda args: stream.launch(k, 1, n, args)),
                                ("a prepared plan", lambda args: plan(stream, *args))):
                with pytest.raises(ia.InvalidArgument, match=r"^Stream\.launch: .*float64"):
                    launch((bx, by, narrow, np.uint32(n)))
                    pytest.fail(f"{how} took a {type(narrow).__name__} where daxpy declares a float64")
        np.testing.assert_array_equal(read(stream, by, np.float64), y, err_msg="a refused launch ran")


#: A PTX kernel whose line 7 declares what is no PTX name (``{decl}``: a lone `.`, a name starting with a digit)
PTX_NOT_A_NAME_ON_LINE_7 = """.version 7.5
.target sm_75
.address_size 64

.visible .entry not_a_name(.param .u64 not_a_name_param_0)
{{
    {decl}
    ret;
}}
"""


@pytest.mark.clause("KERNEL-156")
@pytest.mark.parametrize("decl", [".reg .b32 .;", ".reg .b32 %r<2>, .;", ".reg .b32 %r<2>, 7r;", ".local .u32 .;"])
def test_a_ptx_declaration_of_what_is_no_name_is_refused_naming_its_line(device, kernels, require, decl):
    """A PTX name starts with a letter or one of `_`, `$`, `%` (the PTX ISA's identifiers): ptxas refuses a
    declaration of anything else as a syntax error on its line. A reader that takes any token for the name it
    declares accepts `.reg .b32 .;`, and the module the user's generator got wrong loads."""
    require("lang.ptx")
    with pytest.raises(ia.CompileError) as info:
        device.compile(PTX_NOT_A_NAME_ON_LINE_7.format(decl=decl), "ptx")
        pytest.fail(f"PTX declaring {decl!r} compiled")
    lines = [int(n) for n in re.findall(r"\bline (-?\d+)", info.value.log)]
    assert lines and set(lines) == {7}, f"the log names lines {lines}, not line 7 alone: {info.value.log!r}"
    assert_device_works(device, kernels)
