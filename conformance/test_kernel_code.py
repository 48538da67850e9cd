"""KERNEL: kernel code as users bring it — SPIR-V from older tools or cut short, scalar blocks laid out by hand,
source text without a final newline (test_kernel.py holds the launches of the conformance kernels)."""

from __future__ import annotations

import ctypes
import json
import os
import re
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.cts.pytest_plugin import NOT_SUPPORTED_PREFIX
from ironaccel.cts.spec import conformance_dir

from .helpers import (POISON, assert_device_works, ceil_div, child_json, context_current, cuda_driver, poisoned,
                      raises_naming, read, rng, upload)


@pytest.mark.clause("KERNEL-22")
def test_spirv_for_vulkan_1_0_is_reflected_with_its_buffers(device, stream, require):
    """Tools targeting Vulkan 1.0 (SPIR-V before 1.3) put storage buffers in the Uniform storage class, decorated
    BufferBlock, not in StorageBuffer: a reader that knows only the latter finds a kernel with no buffers."""
    require("lang.spirv")
    code = (conformance_dir() / "kernels" / "spirv" / "vulkan1.0" / "saxpy.spv").read_bytes()
    k = device.compile(code, "spirv").kernel("saxpy")
    assert [p.kind for p in k.params] == ["buffer", "buffer", "scalar", "scalar"], k.params
    n = 3000
    x, y = rng(11).standard_normal(n).astype(np.float32), rng(12).standard_normal(n).astype(np.float32)
    bx, by = upload(device, stream, x), upload(device, stream, y)
    stream.launch(k, ceil_div(n, 128), 128, (bx, by, np.float32(0.5), np.uint32(n)))
    np.testing.assert_allclose(read(stream, by, np.float32), np.float32(0.5) * x + y, rtol=1e-6, atol=1e-6)
    bx.free()
    by.free()


#: KERNEL-179: two_entries.spv's OpEntryPoint of ``a`` (GLCompute, %1, "a", its interface %2 %3 %4), and the
#: same entry named ``abc`` with its interface listed from its storage buffer, %3 (the order is free)
ENTRY_A = np.array([0x7000F, 5, 1, 0x61, 2, 3, 4], "<u4").tobytes()
ENTRY_ABC = np.array([0x7000F, 5, 1, 0x636261, 3, 2, 4], "<u4").tobytes()


@pytest.mark.clause("KERNEL-179")
@pytest.mark.parametrize("name", ["a", "abc"])
def test_each_entry_point_of_a_spirv_1_4_module_has_its_own_interface(device, stream, require, name):
    """From SPIR-V 1.4 an entry point's OpEntryPoint lists every global it uses, so two entry points of one module
    bind different buffers and push constants; before 1.4 it lists its inputs and outputs only, and a reader
    takes every global of the module. A module of exactly version 1.4 read the old way gives each entry point
    the other's buffers too; an interface read one word early takes the name's last word for an id (``a``'s:
    97, the id of ``pair``'s second buffer). ``abc`` fills its word to the last byte, the nul, and lists its
    buffer first: a reader that counts the name's words wrong (3 bytes a word) starts the interface one word
    late, past that buffer."""
    require("lang.spirv")
    code = (conformance_dir() / "kernels" / "spirv" / "spirv1.4" / "two_entries.spv").read_bytes()
    assert code.count(ENTRY_A) == 1, "two_entries.spv no longer has the entry point a as KERNEL-179 knows it"
    code = code.replace(ENTRY_A, ENTRY_A if name == "a" else ENTRY_ABC)
    with device.compile(code, "spirv") as module:
        a, pair = module.kernel(name), module.kernel("pair")
        assert [(p.kind, p.nbytes) for p in a.params] == [("buffer", 0), ("scalar", 4)], a.params
        assert [p.kind for p in pair.params] == ["buffer", "buffer"], pair.params
        n = 1000
        x = np.arange(n, dtype=np.uint32)
        bx, by = upload(device, stream, x), upload(device, stream, np.zeros(n, np.uint32))
        try:
            stream.launch(a, ceil_div(n, 64), 64, (bx, np.uint32(n - 1)))
            stream.launch(pair, ceil_div(n, 64), 64, (bx, by))
            want = x.copy()
            want[: n - 1] += 1
            np.testing.assert_array_equal(read(stream, bx, np.uint32), want)
            np.testing.assert_array_equal(read(stream, by, np.uint32), want + 7)
        finally:
            bx.free()
            by.free()


def _fill_u32_of_block(size: tuple[int, int, int], *, local_size: bool, workgroup: bool) -> bytes:
    """``fill_u32.spv`` with its block size fixed in the module, as tools other than glslang write it: its
    WorkgroupSize object made of OpConstants ``size`` (no SpecId; the decoration dropped unless ``workgroup``),
    its ``LocalSize 1 1 1`` (which a WorkgroupSize object overrides) kept or dropped."""
    words = np.frombuffer((conformance_dir() / "kernels" / "spirv" / "fill_u32.spv").read_bytes(), "<u4")
    out, at, made = [int(w) for w in words[:5]], 5, 0
    while at < len(words):
        count, opcode = int(words[at]) >> 16, int(words[at]) & 0xFFFF
        ins = [int(w) for w in words[at:at + count]]
        at += count
        if (opcode == 71 and ins[2] == 1  # OpDecorate SpecId
                or opcode == 71 and ins[2:4] == [11, 25] and not workgroup  # OpDecorate BuiltIn WorkgroupSize
                or opcode == 16 and ins[2] == 17 and not local_size):  # OpExecutionMode LocalSize
            continue
        if opcode == 50:  # OpSpecConstant (fill_u32's three are its block size) -> OpConstant
            ins[0], ins[3], made = count << 16 | 43, size[made], made + 1
        elif opcode == 51:  # OpSpecConstantComposite -> OpConstantComposite
            ins[0] = count << 16 | 44
        out += ins
    assert made == 3, f"fill_u32.spv has {made} specialization constants, not its block size's 3"
    return np.array(out, "<u4").tobytes()


@pytest.mark.clause("KERNEL-85")
def test_spirv_with_a_constant_block_size_launches_with_that_block(device, stream, require):
    """A WorkgroupSize object of constants is the kernel's block size, over any LocalSize: a launch with that
    block runs (one with another is refused), also with no LocalSize at all; a module that declares no block
    size is a CompileError. A reader that knows only LocalSize and specialization constants takes the module's
    block for (1, 1, 1): it refuses the launch with the real block and lets one with (1, 1, 1) run 32 times the
    threads asked for."""
    require("lang.spirv")
    n = 200
    for local_size in (True, False):
        k = device.compile(_fill_u32_of_block((32, 1, 1), local_size=local_size, workgroup=True), "spirv").kernel("fill_u32")
        with poisoned(device, stream, 4 * 256) as out:
            stream.launch(k, 8, 32, (out, np.uint32(7), np.uint32(n)))
            got = read(stream, out, np.uint32)
            assert (got[:n] == 7).all() and (got[n:] == POISON * 0x01010101).all(), (
                f"with LocalSize {'1 1 1' if local_size else 'absent'}: {np.flatnonzero(got[:n] != 7)[:8]} of the "
                f"first {n} not written, {np.count_nonzero(got[n:] != POISON * 0x01010101)} written past them")
            with raises_naming(ia.InvalidArgument, "Stream.launch", "(32, 1, 1)"):
                stream.launch(k, 256, 1, (out, np.uint32(9), np.uint32(n)))
            assert (read(stream, out, np.uint32)[:n] == 7).all(), "a refused launch wrote its buffer"
    k = device.compile(_fill_u32_of_block((32, 1, 1), local_size=True, workgroup=False), "spirv").kernel("fill_u32")
    with poisoned(device, stream, 4 * 256) as out:  # LocalSize 1 1 1 alone
        stream.launch(k, n, 1, (out, np.uint32(5), np.uint32(n)))
        assert (read(stream, out, np.uint32)[:n] == 5).all(), "LocalSize 1 1 1 alone: not every element written"
    with raises_naming(ia.CompileError, "Device.compile", "fill_u32"):
        device.compile(_fill_u32_of_block((32, 1, 1), local_size=False, workgroup=False), "spirv")


def _spirv_declaring(buffers: int, scalars: int, *, model: int = 5) -> bytes:
    """SPIR-V 1.3 of a kernel ``wide`` that does nothing but declare ``buffers`` storage buffers (set 0, bindings
    0..buffers-1) and a push-constant block of ``scalars`` u32 members: what a launch of it must bind. ``model``
    is its entry point's execution model (5: GLCompute, with LocalSize 1 1 1; 0: a vertex shader)."""
    def op(code: int, *operands: int) -> list[int]:
        return [(len(operands) + 1) << 16 | code, *operands]

    void, fn_type, u32, array, block, sb_ptr, args, pc_ptr, pc, fn, label = range(1, 12)
    variables = range(12, 12 + buffers)
    words = [0x07230203, 0x00010300, 0, 12 + buffers, 0, *op(17, 1), *op(14, 0, 1),  # Shader; Logical GLSL450
             *op(15, model, fn, int.from_bytes(b"wide", "little"), 0), *(op(16, fn, 17, 1, 1, 1) if model == 5 else []),
             *op(71, array, 6, 4), *op(71, block, 2), *op(72, block, 0, 35, 0)]  # ArrayStride 4; Block; Offset 0
    for binding, var in enumerate(variables):
        words += [*op(71, var, 34, 0), *op(71, var, 33, binding)]  # DescriptorSet 0, Binding
    if scalars:
        words += op(71, args, 2)
        for member in range(scalars):
            words += op(72, args, member, 35, 4 * member)
    words += [*op(19, void), *op(33, fn_type, void), *op(21, u32, 32, 0), *op(29, array, u32), *op(30, block, array),
              *op(32, sb_ptr, 12, block)]  # a StorageBuffer pointer to struct { uint data[]; }
    for var in variables:
        words += op(59, sb_ptr, var, 12)
    if scalars:
        words += [*op(30, args, *[u32] * scalars), *op(32, pc_ptr, 9, args), *op(59, pc_ptr, pc, 9)]
    words += [*op(54, void, fn, 0, fn_type), *op(248, label), *op(253), *op(56)]
    return np.array(words, "<u4").tobytes()


@pytest.mark.clause("KERNEL-86")
def test_a_kernel_binding_more_than_the_device_takes_is_refused_at_launch(device, stream, kernels, require):
    """Vulkan bounds the storage buffers a kernel binds (maxPerStageDescriptorStorageBuffers: 32 on lavapipe) and
    its push constants (maxPushConstantsSize: 128 bytes on lavapipe, 256 on NVIDIA); a pipeline layout past
    either is invalid usage, which a driver may accept and then read past its push-constant storage."""
    require("lang.spirv")
    extra = device.info.extra
    assert "max_storage_buffers" in extra and "max_push_constants" in extra, (
        f"a device that compiles SPIR-V reports its binding limits in DeviceInfo.extra: {sorted(extra)}")
    most_buffers, most_bytes = extra["max_storage_buffers"], extra["max_push_constants"]
    scalars = most_bytes // 4 + 1
    k = device.compile(_spirv_declaring(0, scalars), "spirv").kernel("wide")
    with raises_naming(ia.InvalidArgument, "Stream.launch", f"{4 * scalars} bytes"):
        stream.launch(k, 1, 1, [np.uint32(i) for i in range(scalars)])
    for buffers in sorted({min(most_buffers + 1, 1025), 1025}):  # a Vulkan launch binds at most 1,024 buffers
        k = device.compile(_spirv_declaring(buffers, 0), "spirv").kernel("wide")
        bufs = [device.alloc(4) for _ in range(buffers)]
        try:
            with raises_naming(ia.InvalidArgument, "Stream.launch", f"{buffers} buffer arguments"):
                stream.launch(k, 1, 1, bufs)
        finally:
            for b in bufs:
                b.free()
    k = device.compile(_spirv_declaring(min(most_buffers, 8), min(most_bytes // 4, 8)), "spirv").kernel("wide")
    bufs = [device.alloc(4) for _ in range(min(most_buffers, 8))]
    stream.launch(k, 1, 1, [*bufs, *[np.uint32(i) for i in range(min(most_bytes // 4, 8))]])  # within both: runs
    stream.synchronize()
    for b in bufs:
        b.free()
    assert_device_works(device, kernels)


@pytest.mark.clause("KERNEL-88")
def test_spirv_without_a_compute_entry_point_is_a_compile_error(device, require):
    """A valid SPIR-V module of another stage (a vertex shader, as a graphics toolchain writes) has no kernel to
    give: compiling it must say so, not load a module none of whose names ``Module.kernel`` knows."""
    require("lang.spirv")
    with raises_naming(ia.CompileError, "Device.compile", "GLCompute"):
        device.compile(_spirv_declaring(1, 1, model=0), "spirv")


PADDED_PUSH_CONSTANTS = """#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(set = 0, binding = 0) buffer Out { uint data[]; } o;
layout(push_constant) uniform Args { layout(offset = 0) uint a; layout(offset = 8) uint b; } args;
void main() { if (gl_GlobalInvocationID.x == 0u) { o.data[0] = args.a; o.data[1] = args.b; } }
"""


@pytest.mark.clause("KERNEL-23")
def test_a_scalar_block_laid_out_otherwise_is_refused_or_read_whole(device, stream, require):
    """The convention packs scalars each at its own size's alignment; a Vulkan GLSL push-constant block with an
    explicit gap does not match it, and a launch that went ahead anyway would read its second scalar from bytes
    nobody wrote."""
    require("lang.glsl")
    k = device.compile(PADDED_PUSH_CONSTANTS, "glsl", options=["-e", "padded"]).kernel("padded")
    with poisoned(device, stream, 8) as out:
        try:
            stream.launch(k, 1, 1, (out, np.uint32(5), np.uint32(7)))
        except ia.InvalidArgument as exc:
            assert str(exc).startswith("Stream.launch: "), exc
            assert (read(stream, out) == POISON).all(), "a refused launch wrote its buffer"
        else:
            got = read(stream, out, np.uint32)
            assert list(got) == [5, 7], f"the scalars reached the kernel as {list(got)}, not [5, 7]"


#: KERNEL-23's vector member: a uvec2 after two uints (at offset 8, the convention's place for an 8-byte scalar)
VECTOR_PUSH_CONSTANTS = """#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(set = 0, binding = 0) buffer Out { uint data[]; } o;
layout(push_constant) uniform Args { uint a; uint b; uvec2 v; } args;
void main() { if (gl_GlobalInvocationID.x == 0u) { o.data[0] = args.a; o.data[1] = args.b; o.data[2] = args.v.x;
                                                   o.data[3] = args.v.y; } }
"""


@pytest.mark.clause("KERNEL-23")
def test_a_vector_in_the_scalar_block_is_refused_or_one_scalar_of_its_size(device, stream, require):
    """A push-constant block with a vector member (a uvec2 after two uints) is refused by Device.compile, or
    the vector is one parameter of its size: Kernel.params lists it as an 8-byte scalar, and a u64 passed for
    it reaches the kernel whole (its low word is the vector's x). A reader of the module that loses the
    vector's size lists a 0-byte scalar no launch can pass and a block 8 bytes short."""
    require("lang.glsl")
    try:
        k = device.compile(VECTOR_PUSH_CONSTANTS, "glsl", options=["-e", "vector"]).kernel("vector")
    except ia.InvalidArgument as exc:
        assert str(exc).startswith("Device.compile: "), exc
        return
    sizes = [(p.kind, p.nbytes) for p in k.params]
    assert sizes == [("buffer", 0), ("scalar", 4), ("scalar", 4), ("scalar", 8)], (
        f"Kernel.params of (buffer, uint, uint, uvec2) read {sizes}")
    if not device.supports("kernel.int64"):
        return  # no u64 argument to pass for it (SwiftShader): its size in Kernel.params is what can be checked
    with poisoned(device, stream, 16) as out:
        stream.launch(k, 1, 1, (out, np.uint32(5), np.uint32(7), np.uint64(0x0000000B_00000009)))
        got = read(stream, out, np.uint32)
    assert list(got) == [5, 7, 9, 11], f"the scalars reached the kernel as {list(got)}, not [5, 7, 9, 11]"


#: KERNEL-175's kernel: adds 1 to the first word of each of its eight buffers.
ADD_ONE_TO_EIGHT = (
    "#version 450\nlayout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;\n"
    + "".join(f"layout(set = 0, binding = {b}) buffer B{b} {{ uint data[]; }} b{b};\n" for b in range(8))
    + "void main() { if (gl_GlobalInvocationID.x == 0u) { " + " ".join(f"b{b}.data[0] += 1u;" for b in range(8))
    + " } }\n")


@pytest.mark.clause("KERNEL-175")
def test_launches_binding_eight_buffers_each_bind_their_own(device, stream, kernels, require):
    """KERNEL-87 where a pool runs out of descriptors before it runs out of sets: a Vulkan descriptor pool of
    256 sets and 1,024 storage buffers holds 128 sets of eight. A backend that counts sets alone asks a full pool
    for more, which a driver may refuse (SwiftShader: VK_ERROR_OUT_OF_POOL_MEMORY) or serve past its memory."""
    require("lang.glsl")
    k = device.compile(ADD_ONE_TO_EIGHT, "glsl", options=["-e", "add_one_to_eight"]).kernel("add_one_to_eight")
    count = 40
    bufs = [device.alloc(4) for _ in range(count)]
    for buf in bufs:
        stream.copy_htod(buf, np.zeros(1, np.uint32))
    bound = np.zeros(count, np.int64)
    for stride in range(1, 8):  # 280 launches, each on its own ordered choice of eight distinct buffers
        for start in range(count):
            picked = [(start + j * stride) % count for j in range(8)]
            stream.launch(k, 1, 1, [bufs[i] for i in picked])
            bound[picked] += 1
    got = np.array([read(stream, buf, np.uint32)[0] for buf in bufs], np.int64)
    assert (got == bound).all(), (f"{np.count_nonzero(got != bound)} of {count} buffers do not count the launches "
                                  f"that bound them, the first: {np.flatnonzero(got != bound)[:8]}")
    for buf in bufs:
        buf.free()
    assert_device_works(device, kernels)


#: The SPIR-V instructions that declare a module's interface: OpEntryPoint, OpExecutionMode, OpTypeInt,
#: OpTypeFloat, OpTypeVector, OpTypeStruct, OpTypePointer, OpConstant, OpConstantComposite, OpSpecConstant,
#: OpSpecConstantComposite, OpVariable, OpDecorate, OpMemberDecorate.
INTERFACE_OPCODES = {15, 16, 21, 22, 23, 30, 32, 43, 44, 50, 51, 59, 71, 72}


@pytest.mark.clause("KERNEL-25")
def test_spirv_with_an_instruction_cut_short_is_a_compile_error(device, kernels, require):
    """What a broken toolchain or a truncated file gives: every interface instruction of saxpy in turn cut to
    each shorter length (its word count lowered to match, so the rest of the module still parses). A reader of
    the module's interface that indexes past an instruction's end raises IndexError (or reads the next one)."""
    require("lang.spirv")
    words = np.frombuffer((conformance_dir() / "kernels" / "spirv" / "saxpy.spv").read_bytes(), "<u4")
    at, cut = 5, 0
    while at < len(words):
        count, opcode = int(words[at]) >> 16, int(words[at]) & 0xFFFF
        for keep in range(1, count if opcode in INTERFACE_OPCODES else 1):  # words kept, the opcode's included
            shorter = np.concatenate([words[:at], [keep << 16 | opcode], words[at + 1:at + keep],
                                      words[at + count:]]).astype("<u4")
            try:
                device.compile(shorter.tobytes(), "spirv").close()  # what remains may still be valid SPIR-V
            except ia.CompileError as exc:
                assert exc.op == "Device.compile" and exc.lang == "spirv" and exc.log.strip(), (exc.lang, exc.log)
            cut += 1
        at += count
    assert cut > 40, f"only {cut} cuts of interface instructions in saxpy.spv"
    assert_device_works(device, kernels)


@pytest.mark.clause("KERNEL-24")
def test_a_source_without_a_final_newline_compiles(device, stream, target, require):
    """An editor or a string literal often leaves the last line unterminated: a backend that rewrites the source
    (a declaration injected after the header lines, a preamble) must not depend on a final newline. A device
    that compiles no text language (Vulkan where no GLSL compiler is installed: SPIR-V only) has nothing to show."""
    dialects = {d.lang: d for d in target.kernels if not d.binary and d.source("fill_u32") is not None}
    assert dialects, f"the target has no text dialect of fill_u32 (the suite's own fault): {target.kernels}"
    langs = [lang for lang in device.languages if lang in dialects]
    if not langs:
        require(f"lang.{next(iter(dialects))}")
    for lang in langs:
        source = dialects[lang].source("fill_u32").rstrip()
        options = ["-e", "fill_u32"] if dialects[lang].named_by_option else []
        k = device.compile(source, lang, options=options).kernel("fill_u32")
        with poisoned(device, stream, 4 * 100) as out:
            stream.launch(k, 2, 64, (out, np.uint32(9), np.uint32(100)))
            assert (read(stream, out, np.uint32) == 9).all(), f"{lang}: fill_u32 without a final newline"


@pytest.mark.clause("KERNEL-70")
def test_a_source_no_cache_holds_compiles(device, stream, target, require):
    """Compilers' results are cached in memory and on disk, so the suite's own kernels, compiled on every run,
    reach the compiler only on a machine that never ran it: a source that differs by a comment naming this run
    (one line comments are ``//`` in every text language the suite has kernels in) reaches it on every run."""
    dialects = {d.lang: d for d in target.kernels if not d.binary and d.source("fill_u32") is not None}
    assert dialects, f"the target has no text dialect of fill_u32 (the suite's own fault): {target.kernels}"
    langs = [lang for lang in device.languages if lang in dialects]
    if not langs:
        require(f"lang.{next(iter(dialects))}")
    fresh = f"\n// KERNEL-70: compiled first at {time.time_ns()} by process {os.getpid()}\n"
    for lang in langs:
        source = dialects[lang].source("fill_u32") + fresh
        options = ["-e", "fill_u32"] if dialects[lang].named_by_option else []
        for value in (0x5EED, 0xF00D):  # compiled, then from the cache
            k = device.compile(source, lang, options=options).kernel("fill_u32")
            with poisoned(device, stream, 4 * 100) as out:
                stream.launch(k, 2, 64, (out, np.uint32(value), np.uint32(100)))
                assert (read(stream, out, np.uint32) == value).all(), f"{lang}: fill_u32 compiled anew"


#: GLSL 4.30 kernels outside OpenGL's argument convention, each with what the refusal names
GLSL430_OUTSIDE_CONVENTION = {
    "local_size": ("layout(local_size_x = 64) in;\n"
                   "layout(std430, binding = 0) buffer Out { uint data[]; } out_;\n"
                   "void main() { out_.data[gl_GlobalInvocationID.x] = 1u; }", "local_size"),
    "bindings 0 and 2": ("layout(std430, binding = 0) buffer A { uint data[]; } a;\n"
                         "layout(std430, binding = 2) buffer B { uint data[]; } b;\n"
                         "void main() { b.data[gl_GlobalInvocationID.x] = a.data[gl_GlobalInvocationID.x]; }",
                         "[0, 2]"),
    "two uniform blocks": ("layout(std430, binding = 0) buffer Out { uint data[]; } out_;\n"
                           "layout(std140, binding = 0) uniform A { uint value; } a;\n"
                           "layout(std140, binding = 1) uniform B { uint n; } b;\n"
                           "void main() { if (gl_GlobalInvocationID.x < b.n) out_.data[gl_GlobalInvocationID.x] = a.value; }",
                           "declares 2"),
    "a vector member": ("layout(std430, binding = 0) buffer Out { uint data[]; } out_;\n"
                        "layout(std140, binding = 0) uniform Args { uvec2 value; uint n; } args;\n"
                        "void main() { if (gl_GlobalInvocationID.x < args.n) out_.data[gl_GlobalInvocationID.x] = "
                        "args.value.y; }", "value"),
    "an array member": ("layout(std430, binding = 0) buffer Out { uint data[]; } out_;\n"
                        "layout(std140, binding = 0) uniform Args { uint value[2]; uint n; } args;\n"
                        "void main() { if (gl_GlobalInvocationID.x < args.n) out_.data[gl_GlobalInvocationID.x] = "
                        "args.value[1]; }", "not a scalar"),
    "a member past its packed offset": ("#extension GL_ARB_enhanced_layouts : require\n"
                                        "layout(std430, binding = 0) buffer Out { uint data[]; } out_;\n"
                                        "layout(std140, binding = 0) uniform Args { uint value; layout(offset = 8) "
                                        "uint n; } args;\n"
                                        "void main() { if (gl_GlobalInvocationID.x < args.n) "
                                        "out_.data[gl_GlobalInvocationID.x] = args.value; }", "[0, 8]"),
    "a uniform beside the block": ("layout(std430, binding = 0) buffer Out { uint data[]; } out_;\n"
                                   "uniform uint loose_value;\n"
                                   "layout(std140, binding = 0) uniform Args { uint n; } args;\n"
                                   "void main() { if (gl_GlobalInvocationID.x < args.n) "
                                   "out_.data[gl_GlobalInvocationID.x] = loose_value; }", "loose_value"),
    "a uniform and no block": ("layout(std430, binding = 0) buffer Out { uint data[]; } out_;\n"
                               "uniform uint loose_value;\n"
                               "void main() { out_.data[gl_GlobalInvocationID.x] = loose_value; }", "loose_value"),
}


@pytest.mark.clause("KERNEL-71")
@pytest.mark.parametrize("case", sorted(GLSL430_OUTSIDE_CONVENTION))
def test_glsl430_outside_the_argument_convention_is_refused_at_compile(device, kernels, require, case):
    """The OpenGL backend binds buffers by binding index, writes the scalars into one uniform block at the
    convention's offsets and declares the local size itself: a kernel it cannot launch that way must be refused
    where it is compiled, not launched with buffers or scalars in places it does not read."""
    require("lang.glsl430")
    body, what = GLSL430_OUTSIDE_CONVENTION[case]
    with raises_naming(ia.InvalidArgument, "Device.compile", what):
        device.compile("#version 430\n" + body + "\n", "glsl430")
    assert_device_works(device, kernels)


#: pair(out, p): a struct of two u32 passed by value (NVRTC's PTX declares it ``.param .align 4 .b8 p[8]``)
CUDA_STRUCT_PARAM = """struct Pair { unsigned a; unsigned b; };
extern "C" __global__ void pair(unsigned *out, Pair p) { out[0] = p.a; out[1] = p.b; }
"""


@pytest.mark.clause("KERNEL-73")
def test_a_struct_passed_by_value_is_a_scalar_of_its_size(device, stream, kernels, require):
    """CUDA kernels take structs by value; their PTX declares such a parameter as an array of bytes, which a
    reader of scalar declarations alone sizes as one element (or refuses)."""
    require("lang.cuda")
    k = device.compile(CUDA_STRUCT_PARAM, "cuda").kernel("pair")
    assert len(k.params) == 2 and k.params[1].nbytes == 8, k.params
    packed = np.array([0x1234_5678, 0xFEDC_BA98], np.uint32).view(np.uint64)[0]  # a then b, little-endian
    with poisoned(device, stream, 8) as out:
        stream.launch(k, 1, 1, (out, packed))
        np.testing.assert_array_equal(read(stream, out, np.uint32), [0x1234_5678, 0xFEDC_BA98])
        with raises_naming(ia.InvalidArgument, "Stream.launch", "argument 1"):
            stream.launch(k, 1, 1, (out, np.uint32(7)))
    assert_device_works(device, kernels)


@pytest.mark.clause("KERNEL-75")
def test_an_option_nvrtc_does_not_take_is_its_error(device, kernels, require):
    """NVRTC refuses an option it does not know before it compiles anything (NVRTC_ERROR_INVALID_OPTION):
    a failed call of NVRTC's, named after it (ERR-4), never a program read back from a compilation that did
    not happen (an error of the PTX read that follows, or a module built without the option)."""
    require("lang.cuda")
    source = CUDA_STRUCT_PARAM + f"// KERNEL-75 {time.time_ns()}\n"  # no cache holds it: NVRTC is asked
    with pytest.raises((ia.DriverError, ia.CompileError)) as info:
        device.compile(source, "cuda", options=["--no-such-option"])
    assert info.value.op == "nvrtcCompileProgram", info.value
    assert "INVALID_OPTION" in str(info.value) or "no-such-option" in str(info.value), info.value
    if isinstance(info.value, ia.DriverError):  # NVRTC's status as NVRTC names and numbers it
        err = info.value
        assert (err.name, err.code) == ("NVRTC_ERROR_INVALID_OPTION", 5), f"name {err.name!r}, code {err.code!r}"
        assert "failed: NVRTC_ERROR_INVALID_OPTION (5)" in str(err), str(err)
    assert_device_works(device, kernels)


#: big_local(out): a work-group's __local array of WORDS words (filled in by the test: the device's limit + 4 KiB)
OPENCL_BIG_LOCAL = """__kernel void big_local(__global uint *out) {
    __local uint scratch[WORDS];
    scratch[get_local_id(0)] = 1;
    scratch[WORDS - 1 - get_local_id(0)] = 2;
    barrier(CLK_LOCAL_MEM_FENCE);
    out[get_global_id(0)] = scratch[0] + scratch[WORDS - 1];
}
"""


@pytest.mark.clause("KERNEL-76")
def test_opencl_local_memory_beyond_the_limit_is_refused_at_launch(device, stream, kernels):
    """OpenCL C compiles a __local array of any size; the work-group's memory is only checked when the kernel
    is enqueued. The backend refuses it before (limits.max_shared_memory is what the device reports), so the
    caller hears what is wrong, not a driver's out-of-resources status. A __local array of exactly the limit
    is the device's to use: it launches and runs."""
    if "opencl" not in device.languages:  # the plugin's language: not a capability where it is not loaded
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}lang.opencl")
    limit = device.info.limits.max_shared_memory
    k = device.compile(OPENCL_BIG_LOCAL.replace("WORDS", str(limit // 4 + 1024)), "opencl").kernel("big_local")
    with poisoned(device, stream, 256) as out:
        with raises_naming(ia.InvalidArgument, "Stream.launch", "__local"):
            stream.launch(k, 1, 64, (out,))
        assert (read(stream, out, np.uint8) == POISON).all(), "a refused launch wrote"
    k = device.compile(OPENCL_BIG_LOCAL.replace("WORDS", str(limit // 4)), "opencl").kernel("big_local")
    with poisoned(device, stream, 256) as out:
        stream.launch(k, 1, 64, (out,))
        got = read(stream, out, np.uint32)
    assert (got == 3).all(), f"a kernel with a __local array of the limit, {limit} bytes, wrote {got[:4]}"
    assert_device_works(device, kernels)


#: WGSL kernels outside WebGPU's argument convention, each with what the refusal names
WGSL_PRELUDE = ("override BLOCK_X: u32 = 64;\noverride BLOCK_Y: u32 = 1;\noverride BLOCK_Z: u32 = 1;\n"
                "@group(0) @binding(0) var<storage, read_write> out: array<u32>;\n")
WGSL_MAIN = ("@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)\n"
             "fn k(@builtin(global_invocation_id) g: vec3<u32>) {{ if (g.x < {n}) {{ out[g.x] = {value}; }} }}\n")
WGSL_OUTSIDE_CONVENTION = {
    "two uniform blocks": ("struct A { value: u32 }\nstruct B { n: u32 }\n"
                           "@group(0) @binding(1) var<uniform> a: A;\n@group(0) @binding(2) var<uniform> b: B;\n"
                           + WGSL_MAIN.format(n="b.n", value="a.value"), "2"),
    "a uniform that is no struct": ("@group(0) @binding(1) var<uniform> n: u32;\n" + WGSL_MAIN.format(n="n", value="1u"),
                                    "u32"),
    "a vector member": ("struct Args { value: vec2<u32>, n: u32 }\n@group(0) @binding(1) var<uniform> args: Args;\n"
                        + WGSL_MAIN.format(n="args.n", value="args.value.y"), "value"),
}


@pytest.mark.clause("KERNEL-77")
@pytest.mark.parametrize("case", sorted(WGSL_OUTSIDE_CONVENTION))
def test_wgsl_outside_the_argument_convention_is_refused_at_compile(device, kernels, require, case):
    """KERNEL-71 for WGSL: the WebGPU backend writes the scalars into one uniform struct of scalars at the
    convention's offsets, so a module whose uniform it cannot fill that way must be refused where it is
    compiled, not launched with its scalars in places it does not read."""
    require("lang.wgsl")
    body, what = WGSL_OUTSIDE_CONVENTION[case]
    with pytest.raises((ia.CompileError, ia.InvalidArgument)) as info:
        device.compile(WGSL_PRELUDE + body, "wgsl")
    assert info.value.op == "Device.compile" and what in str(info.value), info.value
    if isinstance(info.value, ia.CompileError):  # as KERNEL-69's: the language compiled, the reason in its log
        assert info.value.lang == "wgsl" and what in info.value.log, (info.value.lang, info.value.log)
    assert_device_works(device, kernels)


#: fixed_array(out): a storage binding of a fixed size (1 KiB), each of the first 256 threads writing its index
WGSL_FIXED_ARRAY = ("override BLOCK_X: u32 = 64;\noverride BLOCK_Y: u32 = 1;\noverride BLOCK_Z: u32 = 1;\n"
                    "@group(0) @binding(0) var<storage, read_write> out: array<u32, 256>;\n"
                    "@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)\n"
                    "fn fixed_array(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < 256u) { out[g.x] = g.x; } }\n")


@pytest.mark.clause("KERNEL-103")
def test_wgsl_binding_smaller_than_its_fixed_array_is_refused_naming_the_kernel(device, stream, kernels, require):
    """WebGPU validates a binding's size against the shader's fixed-size array: the backend's refusal of a
    buffer too small for it must be Stream.launch's, say which kernel could not be dispatched, write nothing,
    and leave the kernel launchable with a buffer that fits."""
    require("lang.wgsl")
    k = device.compile(WGSL_FIXED_ARRAY, "wgsl").kernel("fixed_array")
    with poisoned(device, stream, 16) as small, poisoned(device, stream, 1024) as fits:
        for _ in range(2):  # and again, once the refusal may be remembered
            with pytest.raises(ia.InvalidArgument, match=r"^Stream\.launch: ") as info:
                stream.launch(k, 1, 64, (small,))
            assert "fixed_array" in str(info.value), f"the refusal does not name the kernel: {info.value}"
            assert re.search(r"\b16\b", str(info.value)) and re.search(r"\b1024\b", str(info.value)), \
                f"the refusal does not carry wgpu's explanation (16 bytes bound, 1024 expected): {info.value}"
            assert re.search(r"failed: GPUValidationError\b", str(info.value)), \
                f"the refusal does not name the kind of wgpu error it was: {info.value}"
        assert (read(stream, small, np.uint8) == POISON).all(), "a refused launch wrote"
        stream.launch(k, 4, 64, (fits,))
        np.testing.assert_array_equal(read(stream, fits, np.uint32), np.arange(256, dtype=np.uint32))
    assert_device_works(device, kernels)


#: imm_forms(out): thread 0 stores integer immediates written in each of PTX's notations
PTX_INTEGER_FORMS = """.version 7.0
.target sm_70
.address_size 64

.visible .entry imm_forms(.param .u64 imm_forms_param_0)
{
    .reg .b32 %r<6>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [imm_forms_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, 0x1F;
    st.global.u32 [%rd2], %r1;
    mov.u32 %r2, 0X2E;
    st.global.u32 [%rd2+4], %r2;
    mov.u32 %r3, 017;
    st.global.u32 [%rd2+8], %r3;
    mov.u32 %r4, 0b101;
    st.global.u32 [%rd2+12], %r4;
    mov.u32 %r5, 42U;
    st.global.u32 [%rd2+16], %r5;
    ret;
}
"""


PTX_FLOAT_FORMS = """.version 7.0
.target sm_70
.address_size 64

.visible .entry float_forms(.param .u64 float_forms_param_0)
{
    .reg .f32 %f<5>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [float_forms_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.f32 %f1, 0f3FC00000;
    st.global.f32 [%rd2], %f1;
    mov.f32 %f2, 0F40490FDB;
    st.global.f32 [%rd2+4], %f2;
    add.f32 %f3, %f1, 0F3F800000;
    st.global.f32 [%rd2+8], %f3;
    mul.f32 %f4, %f2, 0fC0000000;
    st.global.f32 [%rd2+12], %f4;
    ret;
}
"""


@pytest.mark.clause("KERNEL-62")
def test_ptx_float_immediates_in_both_cases(device, stream, require):
    """PTX writes a float32 immediate as 0f or 0F and eight hex digits of its bits: NVRTC emits 0f, so a
    reader that takes 0F for something else (an integer, another width) is found only here."""
    require("lang.ptx")
    k = device.compile(PTX_FLOAT_FORMS, "ptx").kernel("float_forms")
    with poisoned(device, stream, 16) as out:
        stream.launch(k, 1, 1, (out,))
        got = read(stream, out, np.float32, count=4)
    want = np.array([1.5, np.float32(np.pi), 2.5, -2 * np.float32(np.pi)], np.float32)
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist(), f"got {got.tolist()}, want {want.tolist()}"


@pytest.mark.clause("KERNEL-52")
def test_ptx_integer_immediates_in_every_notation(device, stream, require):
    """PTX writes integers in hexadecimal (0x, 0X), octal, binary and decimal, with an optional U: NVRTC emits
    decimal, so a reader of hand-written or other tools' PTX that gets a notation wrong is found only here."""
    require("lang.ptx")
    k = device.compile(PTX_INTEGER_FORMS, "ptx").kernel("imm_forms")
    with poisoned(device, stream, 32) as out:
        stream.launch(k, 1, 1, (out,))
        np.testing.assert_array_equal(read(stream, out, np.uint32, count=5), [0x1F, 0x2E, 0o17, 0b101, 42])


#: index3d (kernels/README.md) with its block fixed in the code at (4, 2, 8), as a user often writes it.
FIXED_INDEX3D = {
    "glsl": """#version 450
layout(local_size_x = 4, local_size_y = 2, local_size_z = 8) in;
layout(set = 0, binding = 0) writeonly buffer Out { uint data[]; } out_;
layout(push_constant) uniform Args { uint nx; uint ny; uint nz; } args;
void main() {
    uvec3 g = gl_GlobalInvocationID;
    if (g.x < args.nx && g.y < args.ny && g.z < args.nz)
        out_.data[(g.z * args.ny + g.y) * args.nx + g.x] = g.x | (g.y << 10) | (g.z << 20);
}
""",
    "wgsl": """struct Args { nx: u32, ny: u32, nz: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<uniform> args: Args;
@compute @workgroup_size(4, 2, 8)
fn fixed3d(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < args.nx && g.y < args.ny && g.z < args.nz) {
        out[(g.z * args.ny + g.y) * args.nx + g.x] = g.x | (g.y << 10u) | (g.z << 20u);
    }
}
""",
}


@pytest.mark.clause("KERNEL-67")
def test_a_block_fixed_in_the_code_is_the_one_launched(device, stream, require):
    """A block written into the kernel (GLSL local_size_x/y/z, WGSL @workgroup_size) is read from the code: the
    launch with it covers a 3-D domain exactly, and any other block is refused, since the driver would run the
    code's block anyway (a reader that takes one axis for another refuses the right block, or runs a wrong one)."""
    langs = [lang for lang in device.languages if lang in FIXED_INDEX3D]
    if not langs:
        require("lang.wgsl")
    nx, ny, nz = 9, 5, 17
    z, y, x = np.mgrid[0:nz, 0:ny, 0:nx].astype(np.uint32)
    args = (np.uint32(nx), np.uint32(ny), np.uint32(nz))
    for lang in langs:
        options = ["-e", "fixed3d"] if lang == "glsl" else []
        k = device.compile(FIXED_INDEX3D[lang], lang, options=options).kernel("fixed3d")
        with poisoned(device, stream, 4 * nx * ny * nz) as out:
            for block in [(8, 2, 4), (4, 8, 2), (2, 4, 8), (4, 2, 2), (4, 2, 4), (2, 2, 8)]:
                grid = tuple(ceil_div(n, b) for n, b in zip((nx, ny, nz), block))
                with pytest.raises(ia.InvalidArgument, match=r"^Stream\.launch: .*\(4, 2, 8\)"):
                    stream.launch(k, grid, block, (out, *args))
            assert (read(stream, out) == POISON).all(), f"{lang}: a refused launch wrote its buffer"
            stream.launch(k, (3, 3, 3), (4, 2, 8), (out, *args))
            got = read(stream, out, np.uint32).reshape(nz, ny, nx)
            np.testing.assert_array_equal(got, x | (y << 10) | (z << 20), err_msg=f"{lang}: the fixed block (4, 2, 8)")


#: fp8_pairs(out, src): thread t converts src[2t], src[2t+1] (f32) to a pair of e4m3 and of e5m2 (`.rn.satfinite`,
#: the first in the upper byte) and both pairs back to f16x2; out[t] = e4m3 pair (u16), e5m2 pair, f16x2, f16x2.
PTX_FP8_PAIRS = """.version 8.1
.target sm_89
.address_size 64

.visible .entry fp8_pairs(.param .u64 fp8_pairs_param_0, .param .u64 fp8_pairs_param_1)
{
    .reg .f32 %f<3>;
    .reg .b16 %h<3>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<9>;
    ld.param.u64 %rd1, [fp8_pairs_param_0];
    ld.param.u64 %rd2, [fp8_pairs_param_1];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd5, %r1, 8;
    add.s64 %rd6, %rd4, %rd5;
    ld.global.f32 %f1, [%rd6];
    ld.global.f32 %f2, [%rd6+4];
    cvt.rn.satfinite.e4m3x2.f32 %h1, %f1, %f2;
    cvt.rn.satfinite.e5m2x2.f32 %h2, %f1, %f2;
    cvt.rn.f16x2.e4m3x2 %r2, %h1;
    cvt.rn.f16x2.e5m2x2 %r3, %h2;
    mul.wide.u32 %rd7, %r1, 12;
    add.s64 %rd8, %rd3, %rd7;
    st.global.b16 [%rd8], %h1;
    st.global.b16 [%rd8+2], %h2;
    st.global.b32 [%rd8+4], %r2;
    st.global.b32 [%rd8+8], %r3;
    ret;
}
"""

#: (a, b) -> the e4m3 and e5m2 bytes of each (OCP FP8: e4m3 bias 7, max 448; e5m2 bias 15, max 57344) and
#: the values those bytes hold. Ties round to even (1.0625, 1.1875 in e4m3); past the largest finite value
#: .satfinite gives it (1000 and -1e6 in e4m3, -1e6 in e5m2; 1000 rounds to 1024 in e5m2); e5m2's top binade
#: (exponent 30: 32768 and 57344, its largest) holds its values exactly.
FP8_CASES = [
    ((1.0, 2.0), (0x38, 0x40), (0x3C, 0x40), (1.0, 2.0), (1.0, 2.0)),
    ((-1.5, 0.5), (0xBC, 0x30), (0xBE, 0x38), (-1.5, 0.5), (-1.5, 0.5)),
    ((1000.0, -1e6), (0x7E, 0xFE), (0x64, 0xFB), (448.0, -448.0), (1024.0, -57344.0)),
    ((1.0625, 1.1875), (0x38, 0x3A), (0x3C, 0x3D), (1.0, 1.25), (1.0, 1.25)),
    ((0.0, -0.0), (0x00, 0x80), (0x00, 0x80), (0.0, -0.0), (0.0, -0.0)),
    ((32768.0, 57344.0), (0x7E, 0x7E), (0x78, 0x7B), (448.0, 448.0), (32768.0, 57344.0)),
    # subnormals (exponent field 0): e4m3's in units of 2^-9, e5m2's of 2^-16, ties to even among them too
    ((2**-9, -3 * 2**-9), (0x01, 0x83), (0x18, 0x9E), (2**-9, -3 * 2**-9), (2**-9, -3 * 2**-9)),
    ((7 * 2**-9, 2**-6), (0x07, 0x08), (0x23, 0x24), (7 * 2**-9, 2**-6), (7 * 2**-9, 2**-6)),
    ((2**-16, 3 * 2**-16), (0x00, 0x00), (0x01, 0x03), (0.0, 0.0), (2**-16, 3 * 2**-16)),
    ((3 * 2**-10, 5 * 2**-18), (0x02, 0x00), (0x1A, 0x01), (2**-8, 0.0), (3 * 2**-10, 2**-16)),
]
#: a NaN and 448 (e4m3's largest finite value, 0x7E, which e5m2 holds exactly, 0x5F): the NaN is a NaN in both
#: formats (e4m3 has one, 0x7F or 0xFF; e5m2 any exponent 31 with a mantissa) and back in f16
FP8_NAN_CASE = (float("nan"), 448.0)


@pytest.mark.clause("KERNEL-68")
def test_ptx_fp8_conversions_round_to_nearest_even(device, stream, require):
    """cvt to and from pairs of 8-bit floats takes .rn (the only rounding PTX defines for them): a PTX reader
    that loses .rn among the rounding modifiers refuses these conversions, which Hopper kernels use for
    their fp8 inputs, as malformed."""
    require("lang.ptx")
    if tuple(device.info.extra.get("compute_capability", (9, 0))) < (8, 9):  # ptxas refuses these before sm_89
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}cvt .e4m3x2/.e5m2x2 (sm_89 or later)")
    k = device.compile(PTX_FP8_PAIRS, "ptx").kernel("fp8_pairs")
    src = np.array([x for case in FP8_CASES for x in case[0]] + list(FP8_NAN_CASE), np.float32)
    n = len(FP8_CASES) + 1
    with upload(device, stream, src) as inputs, poisoned(device, stream, 12 * n) as out:
        stream.launch(k, 1, n, (out, inputs))
        got = read(stream, out, np.uint8).reshape(n, 12)
    for row, (pair, e4m3, e5m2, e4m3_values, e5m2_values) in zip(got, FP8_CASES):
        words = row[:4].view(np.uint16)
        assert words.tolist() == [e4m3[0] << 8 | e4m3[1], e5m2[0] << 8 | e5m2[1]], \
            f"{pair}: e4m3 pair {words[0]:#06x}, e5m2 pair {words[1]:#06x}"
        for name, half, values in (("e4m3", row[4:8], e4m3_values), ("e5m2", row[8:12], e5m2_values)):
            back = half.view(np.float16)  # the lower half first: b, then a
            want = np.array(values[::-1], np.float16)
            assert back.view(np.uint16).tolist() == want.view(np.uint16).tolist(), \
                f"{pair}: {name} back to f16x2 gave {back.tolist()}, want {want.tolist()}"
    e4m3_pair, e5m2_pair = (int(w) for w in got[-1][:4].view(np.uint16))
    assert e4m3_pair & 0x7FFF == 0x7F7E, f"{FP8_NAN_CASE}: e4m3 pair {e4m3_pair:#06x}, want a NaN (0x7F or 0xFF), 0x7E"
    assert e5m2_pair & 0x7CFF == 0x7C5F and e5m2_pair & 0x0300, \
        f"{FP8_NAN_CASE}: e5m2 pair {e5m2_pair:#06x}, want a NaN (exponent 31, a mantissa), 0x5F"
    for name, half in (("e4m3", got[-1][4:8]), ("e5m2", got[-1][8:12])):
        b, a = half.view(np.float16).tolist()
        assert np.isnan(a) and b == 448.0, f"{FP8_NAN_CASE}: {name} back to f16x2 gave {[b, a]}, want [448.0, nan]"


#: the first line of a GLSL source, by dialect
GLSL_VERSIONS = {"glsl": "#version 450", "glsl430": "#version 430"}
#: seconds a compile that never ends may take to be refused: the library's 30 s, with room for a loaded machine
ENDLESS_COMPILE_LIMIT_S = 120


def endless_macros(version: str) -> str:
    """GLSL whose macros expand to 2**40 tokens: a front end given it runs for hours."""
    defines = "\n".join(f"#define A{i} A{i - 1} A{i - 1}" for i in range(1, 41))
    return f"{version}\n#define A0 x+\n{defines}\nvoid main() {{ int x = 0; x = A40 1; }}\n"


@pytest.mark.clause("KERNEL-79")
def test_a_glsl_source_whose_macros_never_end_is_refused_in_time(device, kernels):
    """Each GLSL dialect of the device. The GL compiler would hang the process; the library must refuse the
    source before it gets there."""
    dialects = [lang for lang in device.languages if lang in GLSL_VERSIONS]
    if not dialects:
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}lang.glsl")
    for lang in dialects:
        started = time.monotonic()
        with pytest.raises(ia.CompileError, match="^Device.compile: "):
            device.compile(endless_macros(GLSL_VERSIONS[lang]), lang)
        took = time.monotonic() - started
        assert took < ENDLESS_COMPILE_LIMIT_S, f"{lang}: the endless source was refused only after {took:.0f} s"


#: read_globals(out): module-scope variables of several types, alignments and initialisers, each read into a
#: 64-bit slot of out; counter is incremented by every launch
CUDA_MODULE_VARIABLES = r"""
struct Pair { unsigned short a; double b; };
__device__ unsigned char bytes[5] = {1, 2, 3, 250, 255};
__device__ short halves[3] = {-2, 300, 7};
__device__ unsigned words[4] = {0xDEADBEEFu, 1u, 77u, 0x80000000u};
__device__ unsigned long long wide = 0x0123456789ABCDEFull;
__device__ float single = -1.5f;
__device__ double twice = 3.25;
__device__ Pair pair = {0xBEEF, -0.125};
__device__ unsigned zeroed[3];
__constant__ unsigned table[3] = {11u, 22u, 33u};
__device__ unsigned *first = words;
__device__ unsigned *third = &words[2];
__device__ const unsigned *constant = &table[1];
__device__ const char *text = "hi!";
__device__ unsigned **indirect = &third;
__device__ unsigned doubled(unsigned x) { return 2 * x; }
__device__ unsigned tripled(unsigned x) { return 3 * x; }
__device__ unsigned (*functions[2])(unsigned) = {doubled, tripled};
__device__ unsigned counter = 100;

extern "C" __global__ void read_globals(unsigned long long *out) {
    out[0] = bytes[0] | bytes[1] << 8 | bytes[2] << 16 | (unsigned long long)bytes[3] << 24
             | (unsigned long long)bytes[4] << 32;
    out[1] = (unsigned long long)(long long)halves[0];
    out[2] = halves[1] * 1000 + halves[2];
    out[3] = words[0] | (unsigned long long)words[3] << 32;
    out[4] = wide;
    out[5] = __float_as_uint(single);
    out[6] = __double_as_longlong(twice);
    out[7] = pair.a;
    out[8] = __double_as_longlong(pair.b);
    out[9] = zeroed[0] | zeroed[1] | zeroed[2];
    out[10] = table[0] + table[1] * 100 + table[2] * 10000;
    out[11] = first[1] * 1000 + *third;
    out[12] = *constant * 1000 + **indirect;
    out[13] = text[0] | text[1] << 8 | text[2] << 16 | (unsigned long long)text[3] << 24;
    out[14] = functions[0](10) * 1000 + functions[1](10);
    out[15] = counter;
    counter += 1;
}
"""

#: what read_globals reads at a module's first launch, slot by slot (counter last)
MODULE_VARIABLE_VALUES = [
    0xFF_FA_03_02_01, (-2) & (2**64 - 1), 300_007, 0x8000_0000_DEAD_BEEF, 0x0123_4567_89AB_CDEF,
    int(np.float32(-1.5).view(np.uint32)), int(np.float64(3.25).view(np.uint64)), 0xBEEF,
    int(np.float64(-0.125).view(np.uint64)), 0, 33_22_11, 1077, 22_077, int.from_bytes(b"hi!\0", "little"),
    20_030, 100,
]


@pytest.mark.clause("KERNEL-80")
def test_module_scope_variables_keep_their_initial_values(device, stream, require):
    """NVRTC writes a module's `__device__` and `__constant__` variables as byte arrays with initialisers, a
    pointer's as the address of another variable (`generic(words)+8`) and a function pointer's as the
    function's name: a module loader that misreads one gives kernels values nobody wrote."""
    require("lang.cuda")
    slots = len(MODULE_VARIABLE_VALUES)
    with device.compile(CUDA_MODULE_VARIABLES, "cuda") as one, device.compile(CUDA_MODULE_VARIABLES, "cuda") as two:
        with poisoned(device, stream, 8 * slots) as out:
            for module, launch in ((one, 0), (one, 1), (two, 0)):  # the counter is each module's own
                stream.launch(module.kernel("read_globals"), 1, 1, (out,))
                got = read(stream, out, np.uint64).tolist()
                want = MODULE_VARIABLE_VALUES[:-1] + [MODULE_VARIABLE_VALUES[-1] + launch]
                wrong = {i: (hex(g), hex(w)) for i, (g, w) in enumerate(zip(got, want)) if g != w}
                assert not wrong, f"launch {launch} of a module: slot: (got, want): {wrong}"


#: two kernels, each with its own 28 KiB .shared array named buf (together more than a block's 48 KiB of static
#: shared memory): each stores FIRST and FIRST + 1 at its array's two ends and reads them back into out
PTX_SHARED_NAMESAKES = """.version 7.0
.target sm_70
.address_size 64
""" + "".join(f"""
.visible .entry {name}(.param .u64 {name}_param_0)
{{
    .shared .align 4 .b8 buf[28672];
    .reg .b32 %r<3>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [{name}_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    st.shared.u32 [buf], {first};
    st.shared.u32 [buf+28668], {first + 1};
    ld.shared.u32 %r1, [buf];
    ld.shared.u32 %r2, [buf+28668];
    st.global.u32 [%rd2], %r1;
    st.global.u32 [%rd2+4], %r2;
    ret;
}}
""" for name, first in (("namesake_a", 10), ("namesake_b", 20)))


@pytest.mark.clause("KERNEL-81")
def test_shared_variables_of_one_name_in_two_kernels_are_each_their_own(device, stream, require):
    """A `.shared` variable declared inside a function belongs to that function: another function may declare
    one of the same name. A PTX reader that takes the first for a module-level variable gives the second
    kernel both arrays (more static shared memory than a block has) or one array for two."""
    require("lang.ptx")
    module = device.compile(PTX_SHARED_NAMESAKES, "ptx")
    with poisoned(device, stream, 8) as out:
        for name, first in (("namesake_a", 10), ("namesake_b", 20), ("namesake_a", 10)):
            stream.launch(module.kernel(name), 1, 1, (out,))
            assert read(stream, out, np.uint32).tolist() == [first, first + 1], name
    module.close()


#: two module-level .shared variables: in_callee named only in exchange (which stores its argument there and
#: returns what was there), in_kernel only in the kernel: the kernel stores 11 to in_kernel, exchanges 22 then 33,
#: and writes out[0] = in_kernel (11) and out[1] = what the second exchange found (22); callee_shared_too does
#: the same with a variable declared in its body (own): a second kernel reaching the same callee
PTX_SHARED_OF_A_CALLEE = """.version 7.8
.target sm_75
.address_size 64

.shared .align 4 .b8 in_callee[64];
.shared .align 4 .b8 in_kernel[64];

.func (.param .b32 exchange_old) exchange(.param .b32 exchange_new)
{
    .reg .b32 %r<3>;
    ld.param.b32 %r1, [exchange_new];
    ld.shared.u32 %r2, [in_callee];
    st.shared.u32 [in_callee], %r1;
    st.param.b32 [exchange_old], %r2;
    ret;
}

.visible .entry callee_shared(.param .u64 callee_shared_param_0)
{
    .reg .b32 %r<5>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [callee_shared_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, 11;
    st.shared.u32 [in_kernel], %r1;
    mov.u32 %r2, 22;
    { .param .b32 p; .param .b32 q; st.param.b32 [p], %r2; call.uni (q), exchange, (p); ld.param.b32 %r3, [q]; }
    mov.u32 %r2, 33;
    { .param .b32 p; .param .b32 q; st.param.b32 [p], %r2; call.uni (q), exchange, (p); ld.param.b32 %r3, [q]; }
    ld.shared.u32 %r4, [in_kernel];
    st.global.u32 [%rd2], %r4;
    st.global.u32 [%rd2+4], %r3;
    ret;
}

.visible .entry callee_shared_too(.param .u64 callee_shared_too_param_0)
{
    .shared .align 4 .b8 own[64];
    .reg .b32 %r<5>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [callee_shared_too_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, 11;
    st.shared.u32 [own], %r1;
    mov.u32 %r2, 22;
    { .param .b32 p; .param .b32 q; st.param.b32 [p], %r2; call.uni (q), exchange, (p); ld.param.b32 %r3, [q]; }
    mov.u32 %r2, 33;
    { .param .b32 p; .param .b32 q; st.param.b32 [p], %r2; call.uni (q), exchange, (p); ld.param.b32 %r3, [q]; }
    ld.shared.u32 %r4, [own];
    st.global.u32 [%rd2], %r4;
    st.global.u32 [%rd2+4], %r3;
    ret;
}
"""


@pytest.mark.clause("KERNEL-93")
def test_shared_variable_named_only_in_a_callee_is_the_kernels_own(device, stream, require):
    """A module-level `.shared` variable belongs to every kernel whose calls reach a function naming it: a PTX
    reader that misses the callee (here the kernel's first and only one) lays the variable out for no kernel,
    over the kernel's own, and the callee's stores overwrite the kernel's variable. The second kernel reaches the
    same callee: a reader that marks the callee as seen by the first kernel and so skips it for the next one
    places the second kernel's own variable over the callee's."""
    require("lang.ptx")
    with device.compile(PTX_SHARED_OF_A_CALLEE, "ptx") as module:
        for name in ("callee_shared", "callee_shared_too"):
            with poisoned(device, stream, 8) as out:
                stream.launch(module.kernel(name), 1, 1, (out,))
                assert read(stream, out, np.uint32).tolist() == [11, 22], (
                    f"{name}: [its own variable, what the second exchange found]")


#: warp_sz(out): out[0] = WARP_SZ, out[1] = WARP_SZ + 100, out[2] = 100 + OPERAND (filled in: -WARP_SZ, or WARP_SZ)
PTX_WARP_SZ = """.version 7.0
.target sm_70
.address_size 64

.visible .entry warp_sz(.param .u64 warp_sz_param_0)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [warp_sz_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, WARP_SZ;
    add.s32 %r2, %r1, 100;
    mov.u32 %r3, 100;
    add.s32 %r3, %r3, OPERAND;
    st.global.u32 [%rd2], %r1;
    st.global.u32 [%rd2+4], %r2;
    st.global.u32 [%rd2+8], %r3;
    ret;
}
"""


@pytest.mark.clause("KERNEL-82")
def test_ptx_warp_sz_is_the_warp_width(device, stream, require):
    """WARP_SZ is PTX's predefined constant for the warp width, which numba-cuda's PTX uses as an immediate;
    NVRTC writes 32. A reader that gets it or its negation wrong miscomputes every lane index derived from it."""
    require("lang.ptx")
    with poisoned(device, stream, 12) as out:
        with device.compile(PTX_WARP_SZ.replace("OPERAND", "WARP_SZ"), "ptx") as plain:
            stream.launch(plain.kernel("warp_sz"), 1, 1, (out,))
            assert read(stream, out, np.int32).tolist() == [32, 132, 132]
        try:
            negated = device.compile(PTX_WARP_SZ.replace("OPERAND", "-WARP_SZ"), "ptx")
        except ia.CompileError:  # an assembler that takes no sign on the constant refuses it: so may a reader
            return
        with negated:
            stream.launch(negated.kernel("warp_sz"), 1, 1, (out,))
            assert read(stream, out, np.int32).tolist() == [32, 132, 68], "-WARP_SZ is not -32"


#: fill7(out): out[0] = 7; PTX ISA 7.5 for sm_75, so the PTX version is 75 by either number a driver reports
PTX_SM75 = """.version 7.5
.target sm_75
.address_size 64

.visible .entry fill7(.param .u64 fill7_param_0)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [fill7_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, 7;
    st.global.u32 [%rd2], %r1;
    ret;
}
"""


@pytest.mark.clause("KERNEL-83")
def test_a_cuda_kernels_native_handle_describes_it(device, stream, require):
    """`Kernel.native` is there for the driver's own API: the CUfunction of that kernel, whose attributes say
    what its code was built for (a profiler or a JIT cache reads them) and which ran on the device."""
    require("lang.ptx")
    cu = cuda_driver(device, "cuFuncGetAttribute")
    attribute = cu.CUfunction_attribute
    major, minor = device.info.extra["compute_capability"]
    with device.compile(PTX_SM75, "ptx") as module, poisoned(device, stream, 4) as out:
        kernel = module.kernel("fill7")
        stream.launch(kernel, 1, 1, (out,))
        assert read(stream, out, np.uint32).tolist() == [7]
        got = {name: cu.cuFuncGetAttribute(getattr(attribute, f"CU_FUNC_ATTRIBUTE_{name}"), kernel.native)
               for name in ("PTX_VERSION", "BINARY_VERSION", "MAX_THREADS_PER_BLOCK")}
        assert all(not err for err, _ in got.values()), got
        values = {name: value for name, (_, value) in got.items()}
        assert values["PTX_VERSION"] == 75, values
        assert values["BINARY_VERSION"] == 10 * major + minor, values
        assert 1 <= values["MAX_THREADS_PER_BLOCK"] <= device.info.limits.max_threads_per_block, values


@pytest.mark.clause("KERNEL-101")
def test_the_drivers_own_launch_and_memset_work_on_a_cuda_devices_handles(device, stream, require):
    """`Kernel.native`, `Stream.native` and `Buffer.handle` are there for the driver's own API, as clients
    that mix libraries use them: cuLaunchKernelEx (a launch configuration without attributes or dynamic shared
    memory) runs the kernel, and cuMemsetD32Async sets 32-bit words, on the library's stream in its order. The
    device's context is pushed for the calls and popped after, as a library that shares the context does."""
    require("lang.ptx")
    cu = cuda_driver(device, "cuLaunchKernelEx, cuMemsetD32Async")
    with device.compile(PTX_SM75, "ptx") as module, poisoned(device, stream, 64) as out:
        kernel = module.kernel("fill7")
        config = cu.CUlaunchConfig()
        config.gridDimX = config.gridDimY = config.gridDimZ = 1
        config.blockDimX = config.blockDimY = config.blockDimZ = 1
        config.sharedMemBytes = 0
        config.hStream = stream.native
        config.numAttrs = 0
        with context_current(device):
            err_set, = cu.cuMemsetD32Async(out.handle + 16, 0x01020304, 8, stream.native)
            err_launch, = cu.cuLaunchKernelEx(config, kernel.native, ((out.handle,), (ctypes.c_void_p,)), 0)
        assert not err_set, f"cuMemsetD32Async: {err_set}"
        assert not err_launch, f"cuLaunchKernelEx: {err_launch}"
        got = read(stream, out, np.uint32).tolist()
    poison = POISON * 0x01010101
    assert got == [7] + [poison] * 3 + [0x01020304] * 8 + [poison] * 4, [hex(v) for v in got]


@pytest.mark.clause("KERNEL-108")
@pytest.mark.parametrize("block", [(1024, 2, 1), (2, 1024, 1), (1, 512, 4), (32, 32, 2)])
def test_the_drivers_own_launch_refuses_a_block_of_more_threads_than_the_device_runs(device, stream, require, block):
    """A block counts the threads of all three axes: one whose every axis is within MAX_BLOCK_DIM_* but whose
    product is over MAX_THREADS_PER_BLOCK (1024 on every capability from 2.0 on) cannot run, and cuLaunchKernel
    of `Kernel.native` on `Stream.native` must say so (CUDA documents CUDA_ERROR_INVALID_VALUE) and run
    nothing, however the axes share the threads. The library checks a block itself before it launches, so a
    driver that multiplies the wrong axes shows only through its own API, as clients that mix libraries call it."""
    require("lang.ptx")
    cu = cuda_driver(device, "cuLaunchKernel")
    with device.compile(PTX_SM75, "ptx") as module, poisoned(device, stream, 16) as out:
        kernel = module.kernel("fill7")
        with context_current(device):
            err_launch, = cu.cuLaunchKernel(kernel.native, 1, 1, 1, *block, 0, stream.native,
                                            ((out.handle,), (ctypes.c_void_p,)), 0)
        got = read(stream, out, np.uint32).tolist()
    assert err_launch == cu.CUresult.CUDA_ERROR_INVALID_VALUE, \
        f"cuLaunchKernel of a block {block} ({block[0] * block[1] * block[2]} threads) gave {err_launch}"
    assert got == [POISON * 0x01010101] * 4, f"the refused launch ran: {got}"


@pytest.mark.clause("KERNEL-138")
@pytest.mark.parametrize("axis", ["block z", "grid y", "grid z"])
def test_the_drivers_own_launch_refuses_an_axis_past_its_limit(device, stream, require, axis):
    """A launch one past an axis's limit (MAX_BLOCK_DIM_Z, 64 on every capability from 2.0 on, with the block's
    threads well within MAX_THREADS_PER_BLOCK; MAX_GRID_DIM_Y or _Z, 65,535) cannot run, and cuLaunchKernel of
    `Kernel.native` on `Stream.native` must say so (CUDA_ERROR_INVALID_VALUE) and run nothing. The library checks
    the limits itself (`limits.max_block`, `limits.max_grid`) before it launches, so a driver that lets one axis
    one past its limit through shows only through its own API, as clients that mix libraries call it."""
    require("lang.ptx")
    cu = cuda_driver(device, "cuLaunchKernel")
    limits = device.info.limits
    grid, block = [1, 1, 1], [1, 1, 1]
    dims, index = {"block z": (block, 2), "grid y": (grid, 1), "grid z": (grid, 2)}[axis]
    dims[index] = (limits.max_block if dims is block else limits.max_grid)[index] + 1
    with device.compile(PTX_SM75, "ptx") as module, poisoned(device, stream, 16) as out:
        kernel = module.kernel("fill7")
        with context_current(device):
            err_launch, = cu.cuLaunchKernel(kernel.native, *grid, *block, 0, stream.native,
                                            ((out.handle,), (ctypes.c_void_p,)), 0)
        got = read(stream, out, np.uint32).tolist()
    assert err_launch == cu.CUresult.CUDA_ERROR_INVALID_VALUE, \
        f"cuLaunchKernel of a grid {tuple(grid)} and a block {tuple(block)} gave {err_launch}"
    assert got == [POISON * 0x01010101] * 4, f"the refused launch ran: {got}"


#: each thread writes 3 * its index + 1 to its own word: a per-thread 64-bit address and a value, so the code
#: holds at least two registers at once on any architecture
PTX_PER_THREAD = """.version 7.5
.target sm_75
.address_size 64

.visible .entry per_thread(.param .u64 per_thread_param_0)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [per_thread_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mad.lo.s32 %r2, %r1, 3, 1;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r2;
    ret;
}
"""


@pytest.mark.clause("KERNEL-90")
def test_a_cuda_kernels_register_count_is_what_its_code_holds(device, stream, require):
    """An occupancy calculator divides the multiprocessor's registers by NUM_REGS: a count of one for code that
    holds an address and a value at once (a module loaded without CU_JIT_MAX_REGISTERS, capped anyway) makes
    it promise more resident blocks than the device runs."""
    require("lang.ptx")
    cu = cuda_driver(device, "cuFuncGetAttribute")
    with device.compile(PTX_PER_THREAD, "ptx") as module, poisoned(device, stream, 4 * 32) as out:
        kernel = module.kernel("per_thread")
        stream.launch(kernel, 1, 32, (out,))
        assert read(stream, out, np.uint32).tolist() == [3 * i + 1 for i in range(32)]
        err, regs = cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, kernel.native)
        assert not err, err
        assert 2 <= regs <= 255, regs
    for live in (240, 300):  # about as many registers as a thread may have, and more than it may
        with device.compile(ptx_many_live(live), "ptx") as module:
            values = np.arange(live, dtype=np.uint32) * np.uint32(2654435761) + np.uint32(live)
            with upload(device, stream, values) as src, poisoned(device, stream, 4) as out:
                kernel = module.kernel("many_live")
                stream.launch(kernel, 1, 1, (src, out))
                assert read(stream, out, np.uint32).tolist() == [int(values.sum(dtype=np.uint32))], live
                err, regs = cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, kernel.native)
                assert not err, err
                assert 2 <= regs <= 255, f"{live} values loaded before they are summed: NUM_REGS is {regs}"


def ptx_many_live(live: int) -> str:
    """``many_live(in, out)``: one thread loads ``live`` 32-bit words of ``in`` into as many registers, then
    stores their sum (mod 2^32) to ``out``: code that needs more registers than a thread has (a compiler
    spills the rest), declared in registers %r1 .. %r<live>."""
    loads = "".join(f"    ld.global.u32 %r{i + 1}, [%rd3+{4 * i}];\n" for i in range(live))
    sums = "".join(f"    add.u32 %r1, %r1, %r{i};\n" for i in range(live, 1, -1))
    return (".version 7.0\n.target sm_70\n.address_size 64\n\n"
            ".visible .entry many_live(.param .u64 many_live_param_0, .param .u64 many_live_param_1)\n{\n"
            f"    .reg .b32 %r<{live + 1}>;\n    .reg .b64 %rd<5>;\n"
            "    ld.param.u64 %rd1, [many_live_param_0];\n    ld.param.u64 %rd2, [many_live_param_1];\n"
            "    cvta.to.global.u64 %rd3, %rd1;\n    cvta.to.global.u64 %rd4, %rd2;\n"
            f"{loads}{sums}    st.global.u32 [%rd4], %r1;\n    ret;\n}}\n")


#: thread i narrows the f64 in[i] to f32 in each rounding mode: out[4i..4i+3] = .rn, .rz, .rm, .rp
PTX_NARROW_TINY = """.version 7.5
.target sm_75
.address_size 64

.visible .entry narrow(.param .u64 narrow_param_0, .param .u64 narrow_param_1)
{
    .reg .b32 %r<2>;
    .reg .f32 %f<5>;
    .reg .f64 %fd<2>;
    .reg .b64 %rd<9>;
    ld.param.u64 %rd1, [narrow_param_0];
    ld.param.u64 %rd2, [narrow_param_1];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd5, %r1, 8;
    add.s64 %rd6, %rd3, %rd5;
    ld.global.f64 %fd1, [%rd6];
    cvt.rn.f32.f64 %f1, %fd1;
    cvt.rz.f32.f64 %f2, %fd1;
    cvt.rm.f32.f64 %f3, %fd1;
    cvt.rp.f32.f64 %f4, %fd1;
    mul.wide.u32 %rd7, %r1, 16;
    add.s64 %rd8, %rd4, %rd7;
    st.global.v4.f32 [%rd8], {%f1, %f2, %f3, %f4};
    ret;
}
"""


@pytest.mark.clause("KERNEL-91")
def test_ptx_narrows_a_double_below_floats_smallest_subnormal_by_its_rounding_mode(device, stream, require):
    """A double far below float's smallest subnormal (2^-149) narrows to a signed zero, or to that subnormal
    when the mode rounds away from zero (.rp of a positive, .rm of a negative): PTX's cvt without .ftz."""
    require("lang.ptx")
    tiny = np.array([1e-300, -1e-300, 2.0 ** -1000, -(2.0 ** -1000)])
    smallest, negative = 0x00000001, 0x80000000
    with device.compile(PTX_NARROW_TINY, "ptx") as module, upload(device, stream, tiny) as src, \
            poisoned(device, stream, 16 * len(tiny)) as out:
        stream.launch(module.kernel("narrow"), 1, len(tiny), (src, out))
        got = read(stream, out, np.uint32).reshape(len(tiny), 4).tolist()
    positive_row, negative_row = [0, 0, 0, smallest], [negative, negative, negative | smallest, negative]
    assert got == [positive_row, negative_row, positive_row, negative_row], [[hex(v) for v in row] for row in got]


@pytest.mark.clause("KERNEL-119")
def test_ptx_narrows_infinities_and_nans_keeping_their_sign(device, stream, require):
    """cvt.{rn,rz,rm,rp}.f32.f64 of an infinity gives float's infinity of the same sign in every mode, and of a
    NaN a NaN (the exponent all ones, the mantissa not zero): an interpreter that builds the target format's
    infinity from the wrong exponent mask sets the sign bit as well (+inf narrowed to -inf)."""
    require("lang.ptx")
    special = np.array([np.inf, -np.inf, np.nan])
    with device.compile(PTX_NARROW_TINY, "ptx") as module, upload(device, stream, special) as src, \
            poisoned(device, stream, 16 * len(special)) as out:
        stream.launch(module.kernel("narrow"), 1, len(special), (src, out))
        got = read(stream, out, np.uint32).reshape(len(special), 4).tolist()
    shown = [[hex(v) for v in row] for row in got]
    assert got[:2] == [[0x7F800000] * 4, [0xFF800000] * 4], shown
    assert all(v & 0x7F800000 == 0x7F800000 and v & 0x007FFFFF for v in got[2]), shown


@pytest.mark.clause("KERNEL-180")
def test_ptx_converts_a_value_the_float_holds_exactly_to_itself_in_every_mode(device, stream, require):
    """A double that float32 holds exactly (a normal, a subnormal, the largest float, of both signs), and a small
    integer, convert to that float in every rounding mode: nothing is lost, so no mode has anything to round.
    An interpreter that takes an exact value for an inexact one moves it a unit away in the directed modes
    (-3 by .rm to the float below -3.0)."""
    require("lang.ptx")
    exact = np.array([1.0, -1.0, 0.5, -3.0, 2.0 ** -149, -(2.0 ** -149), 2.0 ** -126, float(np.finfo(np.float32).max),
                      -float(np.finfo(np.float32).max), 1.0 + 2.0 ** -23])
    want = exact.astype(np.float32).view(np.uint32)
    with device.compile(PTX_NARROW_TINY, "ptx") as module, upload(device, stream, exact) as src, \
            poisoned(device, stream, 16 * len(exact)) as out:
        stream.launch(module.kernel("narrow"), 1, len(exact), (src, out))
        got = read(stream, out, np.uint32).reshape(len(exact), 4)
    modes = ("rn", "rz", "rm", "rp")
    wrong = {f"{v!r} {mode}": hex(g) for v, w, row in zip(exact, want, got) for mode, g in zip(modes, row) if g != w}
    assert not wrong, f"narrowed to another float (each should be itself): {wrong}"
    with device.compile(PTX_INT_TO_FLOAT, "ptx") as module, poisoned(device, stream, 4 * len(INT_TO_FLOAT)) as out:
        stream.launch(module.kernel("int_to_float"), 1, 1, (out, np.uint32(3), np.uint32(5)))
        got = read(stream, out, np.uint32).tolist()
    small = [0x40400000] * 3 + [0xC0400000] * 3 + [0x4500, 0x4500, 0xC500, 0xC500]  # 3.0, -3.0; f16 5.0, -5.0
    wrong = {name.replace("2^24+3", "3").replace("2049", "5"): hex(g)
             for name, w, g in zip(INT_TO_FLOAT, small, got) if g != w}
    assert not wrong, f"small integers converted to another float (each should be itself): {wrong}"


#: thread i converts the f32 in32[i] and the f64 in64[i] to signed integers: out[3i] = cvt.rzi.s32.f32,
#: out[3i + 1] = cvt.rni.s32.f64, out[3i + 2] = cvt.rzi.s16.f32 (sign-extended to 32 bits)
PTX_TO_SIGNED = """.version 7.5
.target sm_75
.address_size 64

.visible .entry to_signed(.param .u64 to_signed_param_0, .param .u64 to_signed_param_1,
                          .param .u64 to_signed_param_2)
{
    .reg .b16 %rs<2>;
    .reg .b32 %r<5>;
    .reg .f32 %f<2>;
    .reg .f64 %fd<2>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [to_signed_param_0];
    ld.param.u64 %rd2, [to_signed_param_1];
    ld.param.u64 %rd3, [to_signed_param_2];
    cvta.to.global.u64 %rd4, %rd1;
    cvta.to.global.u64 %rd5, %rd2;
    cvta.to.global.u64 %rd6, %rd3;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd7, %r1, 4;
    add.s64 %rd8, %rd4, %rd7;
    ld.global.f32 %f1, [%rd8];
    mul.wide.u32 %rd9, %r1, 8;
    add.s64 %rd10, %rd5, %rd9;
    ld.global.f64 %fd1, [%rd10];
    cvt.rzi.s32.f32 %r2, %f1;
    cvt.rni.s32.f64 %r3, %fd1;
    cvt.rzi.s16.f32 %rs1, %f1;
    cvt.s32.s16 %r4, %rs1;
    mul.wide.u32 %rd11, %r1, 12;
    add.s64 %rd11, %rd6, %rd11;
    st.global.u32 [%rd11], %r2;
    st.global.u32 [%rd11+4], %r3;
    st.global.u32 [%rd11+8], %r4;
    ret;
}
"""

#: floats at and around the ends of int32's and int16's ranges, and beyond them, and a NaN (0 in both: PTX gives
#: 0 for a NaN unless the source is .f64 or the destination 64 bits wide)
TO_SIGNED_INPUTS = [2.0 ** 31, -(2.0 ** 31), 2.0 ** 31 - 128, 3e9, -3e9, 32768.0, -32768.0, 32767.75, 40000.0,
                    -40000.0, 1.5, -2.5, float("nan")]
#: doubles rounded to nearest even: 2^31 - 0.25 and 2^31 - 0.5 round up to 2^31, past int32's maximum
TO_SIGNED_DOUBLES = [2.0 ** 31, -(2.0 ** 31), 2.0 ** 31 - 0.25, 2.0 ** 31 - 0.5, 2.0 ** 31 - 1.5, -(2.0 ** 31) - 0.5,
                     -(2.0 ** 31) - 0.75, 3e9, -3e9, 2.5, -1.5, 0.5, 0.75]


@pytest.mark.clause("KERNEL-99")
def test_ptx_float_to_signed_conversion_clamps_to_the_destination_range(device, stream, require):
    """PTX's float-to-integer cvt clamps to the destination's range (.sat is implied): 2^31 converts to
    int32's maximum and 32768 to int16's, never wraps to the minimum. A value exactly one past the range's end
    is where a clamp written with the wrong bound lets a conversion through that wraps."""
    require("lang.ptx")
    floats = np.array(TO_SIGNED_INPUTS, np.float32)
    doubles = np.array(TO_SIGNED_DOUBLES, np.float64)
    n = len(floats)
    with device.compile(PTX_TO_SIGNED, "ptx") as module, upload(device, stream, floats) as src32, \
            upload(device, stream, doubles) as src64, poisoned(device, stream, 12 * n) as out:
        stream.launch(module.kernel("to_signed"), 1, n, (src32, src64, out))
        got = read(stream, out, np.int32).reshape(n, 3).tolist()
    want = [[0 if np.isnan(f) else int(np.clip(np.trunc(f), -2 ** 31, 2 ** 31 - 1)),
             int(np.clip(np.rint(d), -2 ** 31, 2 ** 31 - 1)),
             0 if np.isnan(f) else int(np.clip(np.trunc(f), -2 ** 15, 2 ** 15 - 1))]
            for f, d in zip(floats.tolist(), doubles.tolist())]
    wrong = {(float(floats[i]), float(doubles[i])): (got[i], want[i]) for i in range(n) if got[i] != want[i]}
    assert not wrong, f"(f32 in, f64 in): (got, want) of [rzi.s32.f32, rni.s32.f64, rzi.s16.f32]: {wrong}"


#: thread i converts the double reals[i] and the 64-bit integer ints[i]: out[4i] = cvt.rzi.s64.f64,
#: out[4i + 1] = cvt.rzi.u64.f64, out[4i + 2] = cvt.sat.u64.s64, out[4i + 3] = cvt.sat.s64.u64
PTX_TO_64 = """.version 7.5
.target sm_75
.address_size 64

.visible .entry to_64(.param .u64 to_64_param_0, .param .u64 to_64_param_1, .param .u64 to_64_param_2)
{
    .reg .b32 %r<2>;
    .reg .f64 %fd<2>;
    .reg .b64 %rd<14>;
    ld.param.u64 %rd1, [to_64_param_0];
    ld.param.u64 %rd2, [to_64_param_1];
    ld.param.u64 %rd3, [to_64_param_2];
    cvta.to.global.u64 %rd4, %rd1;
    cvta.to.global.u64 %rd5, %rd2;
    cvta.to.global.u64 %rd6, %rd3;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd7, %r1, 8;
    add.s64 %rd8, %rd4, %rd7;
    ld.global.f64 %fd1, [%rd8];
    add.s64 %rd8, %rd5, %rd7;
    ld.global.u64 %rd9, [%rd8];
    cvt.rzi.s64.f64 %rd10, %fd1;
    cvt.rzi.u64.f64 %rd11, %fd1;
    cvt.sat.u64.s64 %rd12, %rd9;
    cvt.sat.s64.u64 %rd13, %rd9;
    mul.wide.u32 %rd7, %r1, 32;
    add.s64 %rd8, %rd6, %rd7;
    st.global.u64 [%rd8], %rd10;
    st.global.u64 [%rd8+8], %rd11;
    st.global.u64 [%rd8+16], %rd12;
    st.global.u64 [%rd8+24], %rd13;
    ret;
}
"""

#: doubles at, inside and beyond the ends of int64's and uint64's ranges (2^63 - 1024 and 2^64 - 2048 are the
#: largest doubles inside them), and NaN, which converts to 0x8000000000000000 in both (as the H200 gives it)
TO_64_REALS = [2.0 ** 63, -(2.0 ** 63), 2.0 ** 63 - 1024, 1e19, -1e19, 2.0 ** 64, 2.0 ** 64 - 2048, 1e20, -1.5,
               3.75, -7.25, float("nan")]
#: 64-bit integers (as int64) around the ends of both ranges
TO_64_INTS = [0, 1, -1, 5, -(2 ** 63), 2 ** 63 - 1, 2 ** 62, -(2 ** 62), 123456789012345, -2, 7, -123456789012345]


def _clamp(v: float | int, lo: int, hi: int) -> int:
    """v clamped to [lo, hi], as a 64-bit pattern; NaN gives 0x8000000000000000."""
    return 2 ** 63 if v != v else int(max(lo, min(hi, v))) % 2 ** 64


@pytest.mark.clause("KERNEL-99")
def test_ptx_conversions_to_64_bit_integers_clamp_to_the_destination_range(device, stream, require):
    """KERNEL-99 for 64-bit destinations: `cvt.rzi.s64.f64` and `cvt.rzi.u64.f64` clamp to int64's and
    uint64's ranges (2^63 and 1e19 give int64's maximum, 2^64 uint64's, negatives 0 as unsigned, NaN
    0x8000000000000000 in both: the H200's answer), and
    `.sat` between s64 and u64 clamps as well (a negative to 0, what is past int64's maximum to it). At 64 bits
    the bound cannot be computed as 2^bits - 1 in the destination's own type, so a converter needs a case of
    its own there, and one that misses it wraps the largest values to 0 or the minimum."""
    require("lang.ptx")
    reals = np.array(TO_64_REALS, np.float64)
    ints = np.array(TO_64_INTS, np.int64)
    n = len(reals)
    with device.compile(PTX_TO_64, "ptx") as module, upload(device, stream, reals) as src_reals, \
            upload(device, stream, ints) as src_ints, poisoned(device, stream, 32 * n) as out:
        stream.launch(module.kernel("to_64"), 1, n, (src_reals, src_ints, out))
        got = read(stream, out, np.uint64).reshape(n, 4).tolist()
    want = []
    for r, i in zip(reals.tolist(), ints.tolist()):
        t = r if r != r else float(np.trunc(r))
        want.append([_clamp(t, -2 ** 63, 2 ** 63 - 1), _clamp(t, 0, 2 ** 64 - 1), max(i, 0),
                     min(i % 2 ** 64, 2 ** 63 - 1)])
    wrong = {(reals[k].item(), ints[k].item()): (got[k], want[k]) for k in range(n) if got[k] != want[k]}
    assert not wrong, ("(f64 in, s64 in): (got, want) as u64 of "
                       f"[rzi.s64.f64, rzi.u64.f64, sat.u64.s64, sat.s64.u64]: {wrong}")


#: thread i saturates the 64-bit integer ints[i] into narrower integers: out[9i + k] (u32) for k = 0..8 is
#: cvt.sat of it as s64 to s8, s16, s32, u8, u16, u32, of its low half as s32 to s8 and s16, and of it as u64 to
#: s32 (8- and 16-bit results widened by cvt.s32.s8 / .s16 / cvt.u32.u8 / .u16, which read only their own bits)
PTX_SAT_NARROW = """.version 7.5
.target sm_75
.address_size 64

.visible .entry sat_narrow(.param .u64 sat_narrow_param_0, .param .u64 sat_narrow_param_1)
{
    .reg .b16 %rs<8>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [sat_narrow_param_0];
    ld.param.u64 %rd2, [sat_narrow_param_1];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd5, %r1, 8;
    add.s64 %rd5, %rd3, %rd5;
    ld.global.u64 %rd6, [%rd5];
    cvt.u32.u64 %r2, %rd6;
    mul.wide.u32 %rd7, %r1, 36;
    add.s64 %rd7, %rd4, %rd7;
    cvt.sat.s8.s64 %rs1, %rd6;
    cvt.s32.s8 %r3, %rs1;
    st.global.u32 [%rd7], %r3;
    cvt.sat.s16.s64 %rs2, %rd6;
    cvt.s32.s16 %r4, %rs2;
    st.global.u32 [%rd7+4], %r4;
    cvt.sat.s32.s64 %r5, %rd6;
    st.global.u32 [%rd7+8], %r5;
    cvt.sat.u8.s64 %rs3, %rd6;
    cvt.u32.u8 %r6, %rs3;
    st.global.u32 [%rd7+12], %r6;
    cvt.sat.u16.s64 %rs4, %rd6;
    cvt.u32.u16 %r7, %rs4;
    st.global.u32 [%rd7+16], %r7;
    cvt.sat.u32.s64 %r8, %rd6;
    st.global.u32 [%rd7+20], %r8;
    cvt.sat.s8.s32 %rs5, %r2;
    cvt.s32.s8 %r9, %rs5;
    st.global.u32 [%rd7+24], %r9;
    cvt.sat.s16.s32 %rs6, %r2;
    cvt.s32.s16 %r10, %rs6;
    st.global.u32 [%rd7+28], %r10;
    cvt.sat.s32.u64 %r11, %rd6;
    st.global.u32 [%rd7+32], %r11;
    ret;
}
"""

#: 64-bit integers around the ends of the 8-, 16- and 32-bit ranges, signed and unsigned, and far past them
SAT_NARROW_INTS = [-(10 ** 12), -(2 ** 31) - 1, -(2 ** 31), -40000, -32769, -300, -129, -128, -5, 0, 5, 127, 128,
                   255, 256, 300, 32767, 32768, 65535, 65536, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 5 * 10 ** 9,
                   -1 - 2 ** 32 + 100]


@pytest.mark.clause("KERNEL-99")
def test_ptx_saturating_conversions_to_narrower_integers_clamp(device, stream, require):
    """KERNEL-99 for `.sat` between integers of different widths: an s64 saturated to s8, s16, s32, u8, u16 and
    u32, an s32 to s8 and s16, a u64 to s32, each clamps to the destination's range (a negative to 0 when it is
    unsigned). A converter that gets one end of a signed range wrong (its minimum computed as 0) turns every
    negative input into 0 with no test of the conformance kernels noticing: they saturate no narrow integer."""
    require("lang.ptx")
    ints = np.array(SAT_NARROW_INTS, np.int64)
    n = len(ints)
    with device.compile(PTX_SAT_NARROW, "ptx") as module, upload(device, stream, ints) as src, \
            poisoned(device, stream, 36 * n) as out:
        stream.launch(module.kernel("sat_narrow"), 1, n, (src, out))
        got = read(stream, out, np.int32).reshape(n, 9).view(np.uint32).tolist()

    def clamp(v: int, bits: int, signed: bool) -> int:
        lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2 ** bits - 1)
        return max(lo, min(hi, v)) % 2 ** 32

    want = []
    for v in ints.tolist():
        low = (v + 2 ** 31) % 2 ** 32 - 2 ** 31  # its low half as s32
        want.append([clamp(v, 8, True), clamp(v, 16, True), clamp(v, 32, True), clamp(v, 8, False),
                     clamp(v, 16, False), clamp(v, 32, False), clamp(low, 8, True), clamp(low, 16, True),
                     clamp(v % 2 ** 64, 32, True)])
    wrong = {ints[k].item(): (got[k], want[k]) for k in range(n) if got[k] != want[k]}
    assert not wrong, ("s64 in: (got, want) as u32 of [sat.s8.s64, sat.s16.s64, sat.s32.s64, sat.u8.s64, "
                       f"sat.u16.s64, sat.u32.s64, sat.s8.s32, sat.s16.s32, sat.s32.u64]: {wrong}")


#: thread i converts the 64-bit integer ints[i] (x) and its low half (x32) without .sat between signed integers
#: of different widths, the narrow result held in a wider register: out32[7i + k] (u32) for k = 0..6 is
#: cvt.s8.s32 and cvt.s16.s32 of x32 into 32-bit registers, cvt.s8.s32 into a 16-bit register widened by
#: cvt.s32.s16 (which reads all 16 bits), cvt.s32.s8 and cvt.s32.s16 of x32 (which read only their own bits) and
#: cvt.rn.f32.s8 and cvt.rn.f32.s16 of x32 (as f32 bits); out64[5i + k] (u64) for k = 0..4 is cvt.s8.s64,
#: cvt.s16.s64 and cvt.s32.s64 of x into 64-bit registers and cvt.s64.s8 and cvt.s64.s16 of x32
PTX_WRAP_SIGNED = """.version 7.5
.target sm_75
.address_size 64

.visible .entry wrap_signed(.param .u64 wrap_signed_param_0, .param .u64 wrap_signed_param_1,
                            .param .u64 wrap_signed_param_2)
{
    .reg .b16 %rs<2>;
    .reg .b32 %r<10>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<17>;
    ld.param.u64 %rd1, [wrap_signed_param_0];
    ld.param.u64 %rd2, [wrap_signed_param_1];
    ld.param.u64 %rd3, [wrap_signed_param_2];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd4, %r1, 8;
    add.s64 %rd4, %rd1, %rd4;
    ld.global.u64 %rd5, [%rd4];
    cvt.u32.u64 %r2, %rd5;
    mul.wide.u32 %rd6, %r1, 28;
    add.s64 %rd6, %rd2, %rd6;
    mul.wide.u32 %rd7, %r1, 40;
    add.s64 %rd7, %rd3, %rd7;
    cvt.s8.s32 %r3, %r2;
    st.global.u32 [%rd6], %r3;
    cvt.s16.s32 %r4, %r2;
    st.global.u32 [%rd6+4], %r4;
    cvt.s8.s32 %rs1, %r2;
    cvt.s32.s16 %r5, %rs1;
    st.global.u32 [%rd6+8], %r5;
    cvt.s32.s8 %r6, %r2;
    st.global.u32 [%rd6+12], %r6;
    cvt.s32.s16 %r7, %r2;
    st.global.u32 [%rd6+16], %r7;
    cvt.rn.f32.s8 %f1, %r2;
    st.global.f32 [%rd6+20], %f1;
    cvt.rn.f32.s16 %f2, %r2;
    st.global.f32 [%rd6+24], %f2;
    cvt.s8.s64 %rd8, %rd5;
    st.global.u64 [%rd7], %rd8;
    cvt.s16.s64 %rd9, %rd5;
    st.global.u64 [%rd7+8], %rd9;
    cvt.s32.s64 %rd10, %rd5;
    st.global.u64 [%rd7+16], %rd10;
    cvt.s64.s8 %rd11, %r2;
    st.global.u64 [%rd7+24], %rd11;
    cvt.s64.s16 %rd12, %r2;
    st.global.u64 [%rd7+32], %rd12;
    ret;
}
"""

#: 64-bit integers whose low 8, 16 and 32 bits are each range's ends and -1 (as signed), with other bits above
WRAP_SIGNED_INTS = [-1, 0, 1, 127, 128, -128, -129, 255, 256, 0x17F, 0x180, -32768, -32769, 32767, 32768, 65535,
                    65536, 0x18000, 0x1FFFF, -(2 ** 31), 2 ** 31 - 1, 2 ** 31, -(2 ** 31) - 1, 2 ** 32 - 1,
                    3 * 2 ** 31, -(2 ** 40) - 5, 2 ** 63 - 128, -(2 ** 63)]


@pytest.mark.clause("KERNEL-132")
def test_ptx_conversions_to_narrower_signed_integers_wrap_and_sign_extend_into_the_register(device, stream,
                                                                                          require):
    """A conversion without `.sat` to a narrower signed integer keeps the destination type's low bits and, held
    in a wider register, sign-extends them to the register's width (PTX's rules for operands wider than the
    instruction type); a conversion from a narrower signed integer reads only the source type's bits of its
    register and sign-extends them. Each result is checked against numpy's wrapping casts (astype) for values
    whose low 8, 16 and 32 bits are -1, the ends of each range and just past them: one register bit left
    unextended turns -128 into 0xFFFFFE80, which a later 32-bit add or compare sees."""
    require("lang.ptx")
    ints = np.array(WRAP_SIGNED_INTS, np.int64)
    n = len(ints)
    with device.compile(PTX_WRAP_SIGNED, "ptx") as module, upload(device, stream, ints) as src, \
            poisoned(device, stream, 28 * n) as out32, poisoned(device, stream, 40 * n) as out64:
        stream.launch(module.kernel("wrap_signed"), 1, n, (src, out32, out64))
        got32 = read(stream, out32, np.uint32).reshape(n, 7)
        got64 = read(stream, out64, np.uint64).reshape(n, 5)
    low = ints.astype(np.int32)
    s8, s16 = low.astype(np.int8).astype(np.int32), low.astype(np.int16).astype(np.int32)
    want32 = np.stack([s8, s16, s8, s8, s16, s8.astype(np.float32).view(np.int32),
                       s16.astype(np.float32).view(np.int32)], axis=1).view(np.uint32)
    want64 = np.stack([ints.astype(np.int8), ints.astype(np.int16), ints.astype(np.int32), s8, s16],
                      axis=1).astype(np.int64).view(np.uint64)
    wrong = {ints[k].item(): ([hex(v) for v in got32[k].tolist()], [hex(v) for v in want32[k].tolist()])
             for k in range(n) if (got32[k] != want32[k]).any()}
    assert not wrong, ("in: (got, want) as u32 of [s8.s32, s16.s32, s8.s32 in 16 bits widened, s32.s8, s32.s16, "
                       f"rn.f32.s8, rn.f32.s16]: {wrong}")
    wrong = {ints[k].item(): ([hex(v) for v in got64[k].tolist()], [hex(v) for v in want64[k].tolist()])
             for k in range(n) if (got64[k] != want64[k]).any()}
    assert not wrong, f"in: (got, want) as u64 of [s8.s64, s16.s64, s32.s64, s64.s8, s64.s16]: {wrong}"


#: each of 32 threads applies its 64-bit value v (vals[t]) to words[0..8] with one 64-bit global atomic each —
#: add.u64, and.b64, or.b64, xor.b64, min.s64, max.u64, exch.b64, cas.b64 (expecting words[9], the cas word's
#: first value) and add.f64 of (double)(v >> 20) — and stores what each returned to olds[9t .. 9t + 8]
PTX_ATOMICS_64 = """.version 7.5
.target sm_75
.address_size 64

.visible .entry atomics64(.param .u64 atomics64_words, .param .u64 atomics64_vals, .param .u64 atomics64_olds)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<21>;
    .reg .f64 %fd<3>;
    ld.param.u64 %rd1, [atomics64_words];
    ld.param.u64 %rd2, [atomics64_vals];
    ld.param.u64 %rd3, [atomics64_olds];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd4, %r1, 8;
    add.s64 %rd5, %rd2, %rd4;
    ld.global.u64 %rd6, [%rd5];
    mul.wide.u32 %rd7, %r1, 72;
    add.s64 %rd8, %rd3, %rd7;
    atom.global.add.u64 %rd10, [%rd1], %rd6;
    st.global.u64 [%rd8], %rd10;
    atom.global.and.b64 %rd11, [%rd1+8], %rd6;
    st.global.u64 [%rd8+8], %rd11;
    atom.global.or.b64 %rd12, [%rd1+16], %rd6;
    st.global.u64 [%rd8+16], %rd12;
    atom.global.xor.b64 %rd13, [%rd1+24], %rd6;
    st.global.u64 [%rd8+24], %rd13;
    atom.global.min.s64 %rd14, [%rd1+32], %rd6;
    st.global.u64 [%rd8+32], %rd14;
    atom.global.max.u64 %rd15, [%rd1+40], %rd6;
    st.global.u64 [%rd8+40], %rd15;
    atom.global.exch.b64 %rd16, [%rd1+48], %rd6;
    st.global.u64 [%rd8+48], %rd16;
    ld.global.u64 %rd9, [%rd1+72];
    atom.global.cas.b64 %rd17, [%rd1+56], %rd9, %rd6;
    st.global.u64 [%rd8+56], %rd17;
    shr.u64 %rd18, %rd6, 20;
    cvt.rn.f64.u64 %fd1, %rd18;
    atom.global.add.f64 %fd2, [%rd1+64], %fd1;
    st.global.f64 [%rd8+64], %fd2;
    ret;
}
"""


def _atomics64_start() -> np.ndarray:
    """words[0..9] before KERNEL-134's kernel: each with bits in both halves (the add's about to carry out of its
    low half, the min's the largest s64), the f64 add's an integer below 2^53, and words[9] the cas word's."""
    start = np.array([0x1FFFFFFF0, 2 ** 64 - 1, 0x8000000000000001, 0x0123456789ABCDEF, 2 ** 63 - 1, 0,
                      0x1111111122222222, 0x3333333344444444, 0, 0x3333333344444444], np.uint64)
    start[8] = np.array([2.0 ** 45 + 3], np.float64).view(np.uint64)[0]
    return start


@pytest.mark.clause("KERNEL-134")
def test_ptx_64_bit_global_atomics_act_on_the_whole_word(device, stream, require):
    """64-bit atomics (CUDA C++'s atomicAdd, atomicMin, atomicCAS, ... of unsigned long long and double) update
    all 64 bits of their word: 32 threads each apply a value with bits in both halves to one word per operation,
    and every word ends as numpy's reduction of its first value and the 32 values; the values the threads got
    back chain from the first value to the last (each old value, with the thread's own applied, is another's old
    value or the final word), cas succeeds for exactly one thread, and exch hands every value on once. A driver
    that treats a 64-bit atomic as a 32-bit one changes only the low half: the add's carry, the high bits of
    and/or/xor and exch, a minimum decided by the sign bit, are lost."""
    require("lang.ptx")
    threads = 32
    vals = (np.arange(1, threads + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) | np.uint64(0xFFFF0000)
    start = _atomics64_start()
    with device.compile(PTX_ATOMICS_64, "ptx") as module, upload(device, stream, start) as words, \
            upload(device, stream, vals) as src, poisoned(device, stream, 72 * threads) as olds:
        stream.launch(module.kernel("atomics64"), 1, threads, (words, src, olds))
        got = [int(w) for w in read(stream, words, np.uint64)]
        old = read(stream, olds, np.uint64).reshape(threads, 9).T.tolist()
    v = [int(x) for x in vals]
    first = [int(w) for w in start]
    mask = 2 ** 64 - 1

    def signed(x: int) -> int:
        return x - 2 ** 64 if x >> 63 else x

    def f64(x: int) -> float:
        return float(np.array([x], np.uint64).view(np.float64)[0])

    def bits(x: float) -> int:
        return int(np.array([x], np.float64).view(np.uint64)[0])

    ops = {"add.u64": lambda a, b: (a + b) & mask, "and.b64": lambda a, b: a & b, "or.b64": lambda a, b: a | b,
           "xor.b64": lambda a, b: a ^ b, "min.s64": lambda a, b: min(a, b, key=signed),
           "max.u64": max, "exch.b64": lambda a, b: b, "cas.b64": None,
           "add.f64": lambda a, b: bits(f64(a) + float(b >> 20))}
    wrong = {}
    for k, (name, op) in enumerate(ops.items()):
        if op is None:
            continue
        want = first[k]
        for x in v:
            want = op(want, x)
        chained = sorted([first[k]] + [op(o, x) for o, x in zip(old[k], v)]) == sorted(old[k] + [got[k]])
        if name == "exch.b64":
            want = got[k] if got[k] in v else None  # the last value applied, whichever thread's it was
        if got[k] != want or not chained:
            wrong[name] = (hex(got[k]), hex(want) if want is not None else "one of the values",
                           "chained" if chained else f"olds {[hex(o) for o in old[k]]}")
    assert not wrong, f"64-bit atomics: (final word, want, the values returned): {wrong}"
    cas = old[7]
    winners = [t for t in range(threads) if cas[t] == first[7]]
    assert len(winners) == 1 and got[7] == v[winners[0]] and \
        all(cas[t] == got[7] for t in range(threads) if t != winners[0]), (
        f"cas.b64 of 32 threads expecting {first[7]:#x}: the word ends {got[7]:#x}, the values returned "
        f"{[hex(c) for c in cas]}")


#: thread i takes x = xs[i], y = ys[i] (u64; x32, y32 their low halves) and k = ks[i] (u32: pos = k & 63,
#: len = (k >> 6) & 63, n = k & 63, sel = k >> 16) and stores out[10i .. 10i + 9] (u64): brev.b32 x32, brev.b64 x,
#: popc.b64 x, clz.b64 x, bfe.u32 and bfe.s32 of x32 at pos, len, bfi.b32 of x32 into y32 at pos, len,
#: prmt.b32 x32, y32, sel, shf.l.wrap.b32 and shf.r.clamp.b32 of x32 (low word), y32 (high word) by n
PTX_BIT_OPS = """.version 7.5
.target sm_75
.address_size 64

.visible .entry bit_ops(.param .u64 bit_ops_xs, .param .u64 bit_ops_ys, .param .u64 bit_ops_ks,
                        .param .u64 bit_ops_out)
{
    .reg .b32 %r<24>;
    .reg .b64 %rd<20>;
    ld.param.u64 %rd1, [bit_ops_xs];
    ld.param.u64 %rd2, [bit_ops_ys];
    ld.param.u64 %rd3, [bit_ops_ks];
    ld.param.u64 %rd4, [bit_ops_out];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    cvta.to.global.u64 %rd4, %rd4;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd5, %r1, 8;
    add.s64 %rd6, %rd1, %rd5;
    ld.global.u64 %rd7, [%rd6];
    add.s64 %rd6, %rd2, %rd5;
    ld.global.u64 %rd8, [%rd6];
    mul.wide.u32 %rd5, %r1, 4;
    add.s64 %rd6, %rd3, %rd5;
    ld.global.u32 %r2, [%rd6];
    mul.wide.u32 %rd5, %r1, 80;
    add.s64 %rd9, %rd4, %rd5;
    cvt.u32.u64 %r3, %rd7;
    cvt.u32.u64 %r4, %rd8;
    and.b32 %r5, %r2, 63;
    shr.u32 %r6, %r2, 6;
    and.b32 %r6, %r6, 63;
    shr.u32 %r7, %r2, 16;
    brev.b32 %r10, %r3;
    cvt.u64.u32 %rd10, %r10;
    st.global.u64 [%rd9], %rd10;
    brev.b64 %rd11, %rd7;
    st.global.u64 [%rd9+8], %rd11;
    popc.b64 %r11, %rd7;
    cvt.u64.u32 %rd12, %r11;
    st.global.u64 [%rd9+16], %rd12;
    clz.b64 %r12, %rd7;
    cvt.u64.u32 %rd13, %r12;
    st.global.u64 [%rd9+24], %rd13;
    bfe.u32 %r13, %r3, %r5, %r6;
    cvt.u64.u32 %rd14, %r13;
    st.global.u64 [%rd9+32], %rd14;
    bfe.s32 %r14, %r3, %r5, %r6;
    cvt.u64.u32 %rd15, %r14;
    st.global.u64 [%rd9+40], %rd15;
    bfi.b32 %r15, %r3, %r4, %r5, %r6;
    cvt.u64.u32 %rd16, %r15;
    st.global.u64 [%rd9+48], %rd16;
    prmt.b32 %r16, %r3, %r4, %r7;
    cvt.u64.u32 %rd17, %r16;
    st.global.u64 [%rd9+56], %rd17;
    shf.l.wrap.b32 %r17, %r3, %r4, %r5;
    cvt.u64.u32 %rd18, %r17;
    st.global.u64 [%rd9+64], %rd18;
    shf.r.clamp.b32 %r18, %r3, %r4, %r5;
    cvt.u64.u32 %rd19, %r18;
    st.global.u64 [%rd9+72], %rd19;
    ret;
}
"""


def _bit_ops_want(x: int, y: int, k: int) -> list[int]:
    """What PTX_BIT_OPS stores for one thread, from the PTX ISA's definitions of each instruction."""
    m32 = 2 ** 32 - 1
    x32, y32, pos, length, n, sel = x & m32, y & m32, k & 63, (k >> 6) & 63, k & 63, k >> 16

    def bit(v: int, i: int) -> int:
        return v >> i & 1

    def bfe(signed: bool) -> int:
        sbit = bit(x32, min(pos + length - 1, 31)) if signed and length else 0
        return sum((bit(x32, pos + i) if i < length and pos + i <= 31 else sbit) << i for i in range(32))

    bfi = y32
    for i in range(length):
        if pos + i <= 31:
            bfi = bfi & ~(1 << pos + i) | bit(x32, i) << pos + i
    source = (y32 << 32 | x32).to_bytes(8, "little")
    prmt = 0
    for i in range(4):
        nibble = sel >> 4 * i & 15
        byte = source[nibble & 7]
        prmt |= ((0xFF if byte & 0x80 else 0) if nibble & 8 else byte) << 8 * i
    pair = y32 << 32 | x32
    return [int(f"{x32:032b}"[::-1], 2), int(f"{x:064b}"[::-1], 2), bin(x).count("1"), 64 - x.bit_length(),
            bfe(False), bfe(True), bfi, prmt, (pair << (n & 31)) >> 32 & m32, pair >> min(n, 32) & m32]


@pytest.mark.clause("KERNEL-136")
def test_ptx_bit_manipulation_instructions_match_their_definitions(device, stream, require):
    """brev, popc and clz of 64-bit values, bfe (unsigned and signed), bfi, prmt and the funnel shifts (shf.l
    .wrap, shf.r.clamp) as the PTX ISA defines them, for 64 threads of random and edge values with positions,
    lengths, selectors and shift counts reaching past the word (pos and len up to 63, counts up to 63): what
    CUDA C++'s __brev, __brevll, __popcll, __clzll, __byte_perm and __funnelshift_* and bit-field code compile
    to. A driver that gets one step of a bit reversal wrong (a shift the wrong way) reverses only some values
    right; the conformance kernels use none of these instructions."""
    require("lang.ptx")
    r = rng(136)
    edges = [0, 2 ** 64 - 1, 1, 2 ** 63, 0x5555555555555555, 0xAAAAAAAAAAAAAAAA, 0x00000000FFFFFFFF,
             0x0123456789ABCDEF]
    xs = np.concatenate([np.array(edges, np.uint64), r.integers(0, 2 ** 64, 64 - len(edges), dtype=np.uint64)])
    ys = r.integers(0, 2 ** 64, 64, dtype=np.uint64)
    ks = r.integers(0, 2 ** 32, 64, dtype=np.uint32)
    ks[:4] = [0, 63 | 63 << 6, 32 | 32 << 6, 31 | 1 << 6]  # nothing, everything past the word, a word's worth
    n = len(xs)
    with device.compile(PTX_BIT_OPS, "ptx") as module, upload(device, stream, xs) as bx, \
            upload(device, stream, ys) as by, upload(device, stream, ks) as bk, poisoned(device, stream, 80 * n) as out:
        stream.launch(module.kernel("bit_ops"), 1, n, (bx, by, bk, out))
        got = read(stream, out, np.uint64).reshape(n, 10).tolist()
    names = ["brev.b32", "brev.b64", "popc.b64", "clz.b64", "bfe.u32", "bfe.s32", "bfi.b32", "prmt.b32",
             "shf.l.wrap", "shf.r.clamp"]
    wrong = {}
    for t in range(n):
        want = _bit_ops_want(int(xs[t]), int(ys[t]), int(ks[t]))
        for name, g, w in zip(names, got[t], want):
            if g != w:
                wrong.setdefault(name, []).append((hex(int(xs[t])), hex(int(ys[t])), hex(int(ks[t])), hex(g), hex(w)))
    assert not wrong, ("(x, y, k, got, want) of the first wrong threads: "
                       f"{ {name: cases[:3] for name, cases in wrong.items()} }")


#: thread i widens the float16 halves[i] (u16 bits): out32[i] = cvt.f32.f16 of it, out64[i] = cvt.f64.f16 of it
PTX_WIDEN_HALF = """.version 7.5
.target sm_75
.address_size 64

.visible .entry widen_half(.param .u64 widen_half_in, .param .u64 widen_half_out32, .param .u64 widen_half_out64)
{
    .reg .b16 %rs<2>;
    .reg .b32 %r<2>;
    .reg .f32 %f<2>;
    .reg .f64 %fd<2>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [widen_half_in];
    ld.param.u64 %rd2, [widen_half_out32];
    ld.param.u64 %rd3, [widen_half_out64];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd4, %r1, 2;
    add.s64 %rd4, %rd1, %rd4;
    ld.global.u16 %rs1, [%rd4];
    cvt.f32.f16 %f1, %rs1;
    mul.wide.u32 %rd5, %r1, 4;
    add.s64 %rd5, %rd2, %rd5;
    st.global.f32 [%rd5], %f1;
    cvt.f64.f16 %fd1, %rs1;
    mul.wide.u32 %rd6, %r1, 8;
    add.s64 %rd6, %rd3, %rd6;
    st.global.f64 [%rd6], %fd1;
    ret;
}
"""

#: float16 bits: +-0, the smallest and largest subnormals, the smallest normal, 1, the largest finite, +-inf, and
#: NaNs (quiet, signalling, negative)
HALF_SPECIALS = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00,
                 0x7C01, 0xFE00]


@pytest.mark.clause("KERNEL-137")
def test_ptx_widening_a_half_keeps_infinities_nans_and_subnormals(device, stream, require):
    """cvt.f32.f16 and cvt.f64.f16 widen exactly (every float16 is a float32 and a float64): +-inf stays +-inf,
    a NaN stays a NaN, and zeros, subnormals and the largest finite keep their values and signs, as numpy's
    astype. SEM-42 checks the finite normal float16s only (GLSL and WGSL leave the rest undefined); a converter
    that builds the all-ones exponent from the wrong mask turns an infinity into the largest float32 and a NaN
    into a number, and a kernel's overflow check (isinf, isnan) passes data that overflowed."""
    require("lang.ptx")
    halves = np.array(HALF_SPECIALS, np.uint16)
    n = len(halves)
    with device.compile(PTX_WIDEN_HALF, "ptx") as module, upload(device, stream, halves) as src, \
            poisoned(device, stream, 4 * n) as out32, poisoned(device, stream, 8 * n) as out64:
        stream.launch(module.kernel("widen_half"), 1, n, (src, out32, out64))
        got32 = read(stream, out32, np.float32)
        got64 = read(stream, out64, np.float64)
    values = halves.view(np.float16)
    wrong = {}
    for got, width in ((got32, np.float32), (got64, np.float64)):
        want = values.astype(width)
        for k in range(n):
            nan = bool(np.isnan(want[k]))
            if (nan and not np.isnan(got[k])) or (not nan and got[k].tobytes() != want[k].tobytes()):
                wrong.setdefault(f"f{np.dtype(width).itemsize * 8}", []).append(
                    (hex(int(halves[k])), float(got[k]), float(want[k])))
    assert not wrong, f"cvt.f32.f16 / cvt.f64.f16: (float16 bits, got, want): {wrong}"


#: each thread writes two 64-bit words made from its index to its own 16 bytes of .local memory, waits for the
#: whole block (bar.sync: every thread's writes are done), reads them back and stores them to out[2t], out[2t + 1]
PTX_LOCAL_OWN = """.version 7.5
.target sm_75
.address_size 64

.visible .entry local_own(.param .u64 local_own_param_0)
{
    .local .align 8 .b8 mine[16];
    .local .align 8 .b8 more[16];
    .reg .b32 %r<2>;
    .reg .b64 %rd<18>;
    ld.param.u64 %rd1, [local_own_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    cvt.u64.u32 %rd3, %r1;
    mov.u64 %rd4, mine;
    mad.lo.s64 %rd5, %rd3, 4294967297, 1311768467463790320;
    not.b64 %rd6, %rd5;
    st.local.u64 [%rd4], %rd5;
    st.local.u64 [%rd4+8], %rd6;
    mov.u64 %rd11, more;
    add.s64 %rd12, %rd11, 8;
    cvta.local.u64 %rd13, %rd12;
    st.u64 [%rd13], %rd6;
    bar.sync 0;
    ld.local.u64 %rd7, [%rd4];
    ld.local.u64 %rd8, [%rd4+8];
    ld.local.u64 %rd14, [%rd11+8];
    cvta.to.local.u64 %rd15, %rd13;
    ld.local.u64 %rd16, [%rd15];
    mul.wide.u32 %rd9, %r1, 32;
    add.s64 %rd10, %rd2, %rd9;
    st.global.u64 [%rd10], %rd7;
    st.global.u64 [%rd10+8], %rd8;
    st.global.u64 [%rd10+16], %rd14;
    st.global.u64 [%rd10+24], %rd16;
    ret;
}
"""


@pytest.mark.clause("KERNEL-100")
def test_each_threads_local_memory_is_its_own(device, stream, require):
    """.local memory is private to its thread and as large as the kernel declares: what one thread stored
    there is what it loads back, however many threads of its block stored to theirs in between. An area sized
    too small faults at its last bytes or overlaps the next thread's; overlapping areas pass any test whose
    threads store and load with nothing between, so a barrier makes every thread's stores come before any load.
    A second array is written through the generic address `cvta.local` makes of a .local address 8 bytes into
    it, and read back both as .local and through `cvta.to.local` of that generic address (the kernels NVRTC
    writes convert only the start of their local depot, where an offset added the wrong way goes unseen)."""
    require("lang.ptx")
    threads = 64
    with device.compile(PTX_LOCAL_OWN, "ptx") as module, poisoned(device, stream, 32 * threads) as out:
        stream.launch(module.kernel("local_own"), 1, threads, (out,))
        got = read(stream, out, np.uint64).reshape(threads, 4).tolist()
    mask = 2 ** 64 - 1
    want = [[(t * 4294967297 + 1311768467463790320) & mask] + [~(t * 4294967297 + 1311768467463790320) & mask] * 3
            for t in range(threads)]
    wrong = {t: [hex(v) for v in got[t]] for t in range(threads) if got[t] != want[t]}
    assert not wrong, f"threads that loaded other words than they stored to .local: {dict(list(wrong.items())[:6])}"


#: say(): one thread's printf(PRINTF_FORMAT, -7, 0xbeef, 2^40, 2.5, "ok", 0x12345, 70000), as NVRTC writes a printf
#: call: the arguments packed in a local buffer, each at a multiple of its size (4, 4, 8, 8, 8, 4, 4 bytes: offsets 0,
#: 4, 8, 16, 24, 32, 36); the last two printed as short (h: the int converted). Not hh: CUDA's printf documents the
#: sizes h, l and ll only, and an H100 printed 107 for %hhd of -129 (C's printf: 127)
PRINTF_FORMAT = b"kernel printf: %5d %-6x| %lld %.3f %s| %hx %hu|\n"
PRINTF_SAYS = "kernel printf:    -7 beef  | 1099511627776 2.500 ok| 2345 4464|"
PTX_PRINTF = f""".version 7.8
.target sm_75
.address_size 64

.extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);
.global .align 1 .b8 say_format[{len(PRINTF_FORMAT) + 1}] = {{{", ".join(str(b) for b in PRINTF_FORMAT + bytes(1))}}};
.global .align 1 .b8 say_ok[3] = {{111, 107, 0}};

.visible .entry say()
{{
    .local .align 8 .b8 say_depot[40];
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;
    .reg .f64 %fd<2>;
    mov.u64 %rd1, say_depot;
    cvta.local.u64 %rd2, %rd1;
    mov.u32 %r1, -7;
    mov.u32 %r2, 48879;
    st.local.v2.u32 [%rd1], {{%r1, %r2}};
    mov.u64 %rd3, 1099511627776;
    st.local.u64 [%rd1+8], %rd3;
    mov.f64 %fd1, 0d4004000000000000;
    st.local.f64 [%rd1+16], %fd1;
    mov.u64 %rd4, say_ok;
    cvta.global.u64 %rd5, %rd4;
    st.local.u64 [%rd1+24], %rd5;
    mov.u32 %r1, 74565;
    mov.u32 %r2, 70000;
    st.local.v2.u32 [%rd1+32], {{%r1, %r2}};
    mov.u64 %rd6, say_format;
    cvta.global.u64 %rd7, %rd6;
    {{
    .param .b64 param0; st.param.b64 [param0], %rd7;
    .param .b64 param1; st.param.b64 [param1], %rd2;
    .param .b32 retval0;
    call.uni (retval0), vprintf, (param0, param1);
    ld.param.b32 %r3, [retval0];
    }}
    ret;
}}
"""

#: the child of KERNEL-94: opens the target's device, launches say on one thread and waits for it
PRINTF_CHILD = """
import sys
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
stream = device.create_stream()
stream.launch(device.compile(sys.argv[2], "ptx").kernel("say"), 1, 1, ())
stream.synchronize()
"""


@pytest.mark.clause("KERNEL-94")
def test_a_kernels_printf_reaches_the_processs_standard_output(device, target, require):
    """printf is how kernels are debugged: the driver copies what a launch's vprintf calls wrote to the host's
    standard output. A child process runs it, since that output is the process's own (not the test's)."""
    require("lang.ptx")
    cuda_driver(device, "vprintf")
    proc = subprocess.run([sys.executable, "-c", PRINTF_CHILD, target.name, PTX_PRINTF], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **target.environment()})
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert PRINTF_SAYS in proc.stdout.splitlines(), proc.stdout[-1500:]


#: counted(out): one thread's printf(COUNTED_FORMATS[0], 3, 0xab) and printf(COUNTED_FORMATS[1]), as NVRTC writes
#: them (the first's two arguments packed in a local buffer, the second's buffer a null pointer); each call's
#: return value is stored to out[0] and out[1]
COUNTED_FORMATS = (b"kernel printf count: %d %x|\n", b"kernel printf count: none|\n")
PTX_PRINTF_COUNTED = f""".version 7.8
.target sm_75
.address_size 64

.extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);
.global .align 1 .b8 two_format[{len(COUNTED_FORMATS[0]) + 1}] = {{{", ".join(str(b) for b in COUNTED_FORMATS[0] + bytes(1))}}};
.global .align 1 .b8 none_format[{len(COUNTED_FORMATS[1]) + 1}] = {{{", ".join(str(b) for b in COUNTED_FORMATS[1] + bytes(1))}}};

.visible .entry counted(.param .u64 counted_param_0)
{{
    .local .align 8 .b8 counted_depot[8];
    .reg .b32 %r<6>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd8, [counted_param_0];
    cvta.to.global.u64 %rd9, %rd8;
    mov.u64 %rd1, counted_depot;
    cvta.local.u64 %rd2, %rd1;
    mov.u32 %r1, 3;
    mov.u32 %r2, 171;
    st.local.v2.u32 [%rd1], {{%r1, %r2}};
    mov.u64 %rd3, two_format;
    cvta.global.u64 %rd4, %rd3;
    {{
    .param .b64 param0; st.param.b64 [param0], %rd4;
    .param .b64 param1; st.param.b64 [param1], %rd2;
    .param .b32 retval0;
    call.uni (retval0), vprintf, (param0, param1);
    ld.param.b32 %r3, [retval0];
    }}
    st.global.u32 [%rd9], %r3;
    mov.u64 %rd5, none_format;
    cvta.global.u64 %rd6, %rd5;
    mov.u64 %rd7, 0;
    {{
    .param .b64 param0; st.param.b64 [param0], %rd6;
    .param .b64 param1; st.param.b64 [param1], %rd7;
    .param .b32 retval0;
    call.uni (retval0), vprintf, (param0, param1);
    ld.param.b32 %r4, [retval0];
    }}
    st.global.u32 [%rd9+4], %r4;
    ret;
}}
"""


@pytest.mark.clause("KERNEL-111")
def test_a_kernels_printf_returns_the_number_of_arguments_it_read(device, stream, require):
    """CUDA's printf returns the number of arguments it parsed (0 when none follow the format), not the number
    of characters as C's does: a kernel that checks it for an error (a negative value) sees what the driver
    gave back from the call."""
    require("lang.ptx")
    cuda_driver(device, "vprintf")
    with device.compile(PTX_PRINTF_COUNTED, "ptx") as module, poisoned(device, stream, 8) as out:
        stream.launch(module.kernel("counted"), 1, 1, (out,))
        got = read(stream, out, np.int32).tolist()
    assert got == [2, 0], f"printf of {COUNTED_FORMATS[0]!r} with 2 arguments and of {COUNTED_FORMATS[1]!r} with " \
                          f"none returned {got}, want [2, 0]"


#: one thread stores four words (a 16-byte vector) 1 TiB past its buffer: an aligned address no allocation covers
PTX_FAR_STORE = """.version 7.5
.target sm_75
.address_size 64

.visible .entry far_store(.param .u64 far_store_param_0)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [far_store_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    add.s64 %rd3, %rd2, 1099511627776;
    mov.u32 %r1, 7;
    st.global.v4.u32 [%rd3], {%r1, %r1, %r1, %r1};
    ret;
}
"""

#: misaligned_atomic_<type>_<offset>: one thread adds 1 atomically (atom.global.add) to the 32- or 64-bit word
#: <offset> bytes into its buffer, an address inside the allocation that is not a multiple of the word's size
MISALIGNED_ATOMICS = {"misaligned_atomic_u32_1": (32, 1), "misaligned_atomic_u32_2": (32, 2),
                      "misaligned_atomic_u32_3": (32, 3), "misaligned_atomic_u64_4": (64, 4)}
PTX_MISALIGNED_ATOMICS = ".version 7.5\n.target sm_75\n.address_size 64\n" + "".join(f"""
.visible .entry {name}(.param .u64 {name}_param_0)
{{
    .reg .b{bits} %v<3>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [{name}_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    add.s64 %rd3, %rd2, {offset};
    mov.u{bits} %v1, 1;
    atom.global.add.u{bits} %v2, [%rd3], %v1;
    st.global.u{bits} [%rd2+8], %v2;
    ret;
}}
""" for name, (bits, offset) in MISALIGNED_ATOMICS.items())

#: the child of KERNEL-92, ERR-52, KERNEL-95, KERNEL-97 and KERNEL-102: opens the target's device, runs the kernel
#: argv[3] of the PTX argv[2] on its buffer on stream a (grid and block argv[4], argv[5] as JSON lists where given,
#: else one thread), then uses the buffer from stream b; prints how each step ended (None: it raised nothing)
FAR_STORE_CHILD = """
import json, sys
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
a, b = device.create_stream(), device.create_stream()
buf = device.alloc(4096)
dims = [tuple(json.loads(arg)) for arg in sys.argv[4:6]] or [1, 1]
a.launch(device.compile(sys.argv[2], "ptx").kernel(sys.argv[3]), dims[0], dims[1], (buf,))
steps = {"synchronize": a.synchronize, "copy_htod": lambda: b.copy_htod(buf, np.zeros(16, np.uint8)),
         "fill": lambda: b.fill(buf, 1), "copy_dtoh": lambda: b.copy_dtoh(np.zeros(16, np.uint8), buf)}
outcomes = {}
for name, step in steps.items():
    try:
        step()
        outcomes[name] = None
    except Exception as exc:
        outcomes[name] = {"type": type(exc).__name__, "message": str(exc), "op": getattr(exc, "op", None)}
print(json.dumps(outcomes))
"""


def far_store_outcomes(device, target, require, ptx: str = PTX_FAR_STORE, kernel: str = "far_store",
                       dims: tuple = (), seconds: float = 120) -> dict:
    """How each step of FAR_STORE_CHILD ended with `kernel` of `ptx` (far_store unless told) launched with
    `dims` (grid, block: one thread unless told), on a CUDA device with PTX (else the test skips); the child
    not ended after `seconds` raises subprocess.TimeoutExpired."""
    require("lang.ptx")
    cuda_driver(device, "its fault codes")
    return child_json(target, FAR_STORE_CHILD, ptx, kernel, *(json.dumps(list(d)) for d in dims), timeout=seconds)


@pytest.mark.clause("KERNEL-92")
def test_a_store_far_outside_any_allocation_is_reported_as_an_illegal_address(device, target, require):
    """The fault a bad pointer causes is named for what it is: an aligned store to an address no allocation
    covers is CUDA_ERROR_ILLEGAL_ADDRESS, never MISALIGNED_ADDRESS (which sends the user after alignment), from
    the wait that reported it (ERR-4). The context is lost after the fault, so a child process runs it."""
    outcome = far_store_outcomes(device, target, require)["synchronize"]
    assert outcome is not None, "a store 1 TiB past its buffer raised nothing"
    assert outcome["type"] == "DriverError" and "CUDA_ERROR_ILLEGAL_ADDRESS" in outcome["message"], outcome
    assert outcome["op"] == "cuStreamSynchronize", f"the fault is reported by the wait, not a query before it: {outcome}"


@pytest.mark.clause("KERNEL-95")
@pytest.mark.parametrize("kernel", MISALIGNED_ATOMICS)
def test_a_misaligned_atomic_is_reported_as_a_misaligned_address(device, target, require, kernel):
    """An atomic on an address that is not a multiple of its size faults as MISALIGNED_ADDRESS, like a load or
    store, although the address lies inside the buffer: ILLEGAL_ADDRESS would send the user looking for a pointer
    outside every allocation. 1 and 3 bytes in as well as 2: a check of the address against a wrong size (one of
    3 bytes tests only bit 1) passes an odd one. The context is lost after the fault, so a child process runs it."""
    outcome = far_store_outcomes(device, target, require, PTX_MISALIGNED_ATOMICS, kernel)["synchronize"]
    bits, offset = MISALIGNED_ATOMICS[kernel]
    assert outcome is not None, f"a {bits}-bit atomic add {offset} bytes into its buffer raised nothing"
    assert outcome["type"] == "DriverError" and "CUDA_ERROR_MISALIGNED_ADDRESS" in outcome["message"], outcome


#: far_<access>: one thread loads or stores a 32- or 64-bit word 1 TiB past its buffer (the instructions), then
#: stores into its buffer what it loaded (7 after a store); with the access as a memcheck report names it
FAR_ACCESSES = {
    "far_load_u32": ("ld.global.u32 %r1, [%rd3];", "global read of 4 bytes"),
    "far_load_u64": ("ld.global.u64 %rd1, [%rd3];\n    cvt.u32.u64 %r1, %rd1;", "global read of 8 bytes"),
    "far_store_u32": ("st.global.u32 [%rd3], %r1;", "global write of 4 bytes"),
    "far_store_u64": ("st.global.u64 [%rd3], %rd3;", "global write of 8 bytes"),
}
PTX_FAR_ACCESSES = ".version 7.5\n.target sm_75\n.address_size 64\n" + "".join(f"""
.visible .entry {name}(.param .u64 {name}_param_0)
{{
    .reg .b32 %r<2>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [{name}_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    add.s64 %rd3, %rd2, 1099511627776;
    mov.u32 %r1, 7;
    {instructions}
    st.global.u32 [%rd2], %r1;
    ret;
}}
""" for name, (instructions, _) in FAR_ACCESSES.items())


#: end_load(x): over a 3 x 2 grid of 2-thread blocks, thread (1,0,0) of block (2,1,0) alone loads the 32-bit word at
#: byte 4096 of x (the end of FAR_STORE_CHILD's 4 KiB buffer) and stores it into x
PTX_END_LOAD = PTX_FAR_ACCESSES.split(".visible")[0] + """
.visible .entry end_load(.param .u64 end_load_param_0)
{
    .reg .pred %p<4>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<3>;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ctaid.y;
    mov.u32 %r3, %tid.x;
    setp.ne.u32 %p1, %r1, 2;
    @%p1 bra DONE;
    setp.ne.u32 %p2, %r2, 1;
    @%p2 bra DONE;
    setp.ne.u32 %p3, %r3, 1;
    @%p3 bra DONE;
    ld.param.u64 %rd1, [end_load_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    ld.global.u32 %r4, [%rd2+4096];
    st.global.u32 [%rd2], %r4;
DONE:
    ret;
}
"""


@pytest.mark.clause("KERNEL-177")
def test_a_fault_report_names_the_access_the_kernel_made(device, target, require):
    """A driver that explains a memory fault in its error (the fake libcuda's memcheck report, as
    compute-sanitizer words it) sends the user to the instruction by what it says: a load reported as a write,
    or a global access as shared memory, sends them to the wrong one; and to the thread and the element by
    their ids and the distance: a load just past the end of a buffer is 0 bytes past it (the classic off-by-one),
    made by the one thread of the grid that made it. Each kernel in a child process (the fault loses the context)."""
    reports = {}
    for kernel, (_, access) in FAR_ACCESSES.items():
        outcome = far_store_outcomes(device, target, require, PTX_FAR_ACCESSES, kernel)["synchronize"]
        assert outcome is not None and "CUDA_ERROR_ILLEGAL_ADDRESS" in outcome["message"], (kernel, outcome)
        lines = [line for line in outcome["message"].splitlines() if line.startswith("memcheck:")]
        reports[kernel] = (access, lines)
    if not any(lines for _, lines in reports.values()):
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a driver that describes a faulting access in its error")
    for kernel, (access, lines) in reports.items():
        assert lines and f"invalid {access} at " in lines[0] and f"in kernel {kernel}," in lines[0], (
            f"{kernel}: the report says {lines[:1]}, want an invalid {access} in kernel {kernel}")
    outcome = far_store_outcomes(device, target, require, PTX_END_LOAD, "end_load", ((3, 2, 1), (2, 1, 1)))["synchronize"]
    assert outcome is not None and "CUDA_ERROR_ILLEGAL_ADDRESS" in outcome["message"], (
        f"a 4-byte load at the end of a 4,096-byte buffer (the only one): {outcome}")
    report = "\n".join(line for line in outcome["message"].splitlines() if line.startswith("memcheck:"))
    assert "block (2,1,0)" in report and "thread (1,0,0)" in report, (
        f"a load by thread (1,0,0) of block (2,1,0) is reported as {report!r}")
    assert re.search(r"\b0 bytes (past the end of|after)\b", report), (
        f"a load at the buffer's very end, 0 bytes past it, is reported as {report!r}")


#: one thread stores (misaligned_shared_store) or loads (misaligned_shared_load) the 32-bit word 2 bytes into a
#: word-aligned shared array (2 * %ntid.x, with a block of one thread: an address the compiler cannot fold), then
#: writes 7 to its buffer
PTX_MISALIGNED_SHARED = """.version 7.5
.target sm_75
.address_size 64

.visible .entry misaligned_shared_store(.param .u64 misaligned_shared_store_param_0)
{
    .shared .align 4 .b8 words[64];
    .reg .b32 %r<5>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [misaligned_shared_store_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, words;
    mov.u32 %r2, %ntid.x;
    shl.b32 %r3, %r2, 1;
    add.s32 %r4, %r1, %r3;
    st.shared.u32 [%r4], %r2;
    bar.sync 0;
    mov.u32 %r2, 7;
    st.global.u32 [%rd2], %r2;
    ret;
}

.visible .entry misaligned_shared_load(.param .u64 misaligned_shared_load_param_0)
{
    .shared .align 4 .b8 words[64];
    .reg .b32 %r<6>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [misaligned_shared_load_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, words;
    mov.u32 %r2, %ntid.x;
    shl.b32 %r3, %r2, 1;
    add.s32 %r4, %r1, %r3;
    ld.shared.u32 %r5, [%r4];
    st.global.u32 [%rd2+4], %r5;
    mov.u32 %r2, 7;
    st.global.u32 [%rd2], %r2;
    ret;
}
"""


@pytest.mark.clause("KERNEL-97")
@pytest.mark.parametrize("kernel", ["misaligned_shared_store", "misaligned_shared_load"])
def test_a_misaligned_shared_access_is_reported_as_a_misaligned_address(device, target, require, kernel):
    """A 4-byte shared-memory store or load 2 bytes into a word-aligned array faults as MISALIGNED_ADDRESS,
    as a global one does: the address is inside the block's shared memory, and ILLEGAL_ADDRESS would send the
    user looking for an access outside it. The context is lost after the fault, so a child process runs it."""
    outcome = far_store_outcomes(device, target, require, PTX_MISALIGNED_SHARED, kernel)["synchronize"]
    assert outcome is not None, f"{kernel}: a 4-byte shared access 2 bytes into a word array raised nothing"
    assert outcome["type"] == "DriverError" and "CUDA_ERROR_MISALIGNED_ADDRESS" in outcome["message"], outcome


#: the 64-bit access of misaligned_global_load64 (kept: stored to the buffer) and misaligned_global_store64
_MISALIGNED_64_ACCESS = {"load": "    ld.global.u64 %rd5, [%rd4];\n    st.global.u64 [%rd2+8], %rd5;",
                         "store": "    st.global.u64 [%rd4+8], %rd3;"}

#: one thread loads (misaligned_global_load) or stores (misaligned_global_store) the 32-bit word `%ntid.x` times
#: the kernel's scalar bytes into its buffer (ld/st.global.u32; the offset computed from %ntid.x, with a block of
#: one thread, so no compiler folds it: 1 and 2 bytes, both inside the allocation, neither a multiple of 4), or
#: (misaligned_global_load64, misaligned_global_store64) the 64-bit word 1, 2 or 4 bytes in (ld/st.global.u64:
#: none a multiple of 8), then writes 7 to its buffer's first word
PTX_MISALIGNED_GLOBAL = """.version 7.5
.target sm_75
.address_size 64

.visible .entry misaligned_global_load_1(.param .u64 misaligned_global_load_1_param_0)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [misaligned_global_load_1_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %ntid.x;
    cvt.u64.u32 %rd3, %r1;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r2, [%rd4];
    st.global.u32 [%rd2+8], %r2;
    mov.u32 %r3, 7;
    st.global.u32 [%rd2], %r3;
    ret;
}

.visible .entry misaligned_global_load_2(.param .u64 misaligned_global_load_2_param_0)
{
    .reg .b32 %r<5>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [misaligned_global_load_2_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %ntid.x;
    shl.b32 %r4, %r1, 1;
    cvt.u64.u32 %rd3, %r4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r2, [%rd4];
    st.global.u32 [%rd2+8], %r2;
    mov.u32 %r3, 7;
    st.global.u32 [%rd2], %r3;
    ret;
}

.visible .entry misaligned_global_store_1(.param .u64 misaligned_global_store_1_param_0)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [misaligned_global_store_1_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %ntid.x;
    cvt.u64.u32 %rd3, %r1;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4+8], %r1;
    mov.u32 %r3, 7;
    st.global.u32 [%rd2], %r3;
    ret;
}

.visible .entry misaligned_global_store_2(.param .u64 misaligned_global_store_2_param_0)
{
    .reg .b32 %r<5>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [misaligned_global_store_2_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %ntid.x;
    shl.b32 %r4, %r1, 1;
    cvt.u64.u32 %rd3, %r4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4+8], %r1;
    mov.u32 %r3, 7;
    st.global.u32 [%rd2], %r3;
    ret;
}
""" + "".join(f"""
.visible .entry misaligned_global_{op}64_{k}(.param .u64 misaligned_global_{op}64_{k}_param_0)
{{
    .reg .b32 %r<5>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [misaligned_global_{op}64_{k}_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %ntid.x;
    mul.lo.u32 %r4, %r1, {k};
    cvt.u64.u32 %rd3, %r4;
    add.s64 %rd4, %rd2, %rd3;
{_MISALIGNED_64_ACCESS[op]}
    mov.u32 %r3, 7;
    st.global.u32 [%rd2], %r3;
    ret;
}}
""" for op in ("load", "store") for k in (1, 2, 4))


@pytest.mark.clause("KERNEL-110")
@pytest.mark.parametrize("kernel", ["misaligned_global_load_1", "misaligned_global_load_2",
                                    "misaligned_global_store_1", "misaligned_global_store_2",
                                    *(f"misaligned_global_{op}64_{k}" for op in ("load", "store") for k in (1, 2, 4))])
def test_a_misaligned_global_word_access_is_reported_as_a_misaligned_address(device, target, require, kernel):
    """A 4-byte global load or store 1 or 2 bytes past a word boundary, or an 8-byte one 1, 2 or 4 bytes past
    a multiple of 8, inside its buffer, faults as MISALIGNED_ADDRESS: the hardware does not split it, and
    ILLEGAL_ADDRESS would send the user looking for a pointer outside every allocation. The context is lost
    after the fault, so a child process runs it."""
    outcome = far_store_outcomes(device, target, require, PTX_MISALIGNED_GLOBAL, kernel)["synchronize"]
    assert outcome is not None, f"{kernel}: a global access inside its buffer, not at a multiple of its size, " \
                                "raised nothing"
    assert outcome["type"] == "DriverError" and "CUDA_ERROR_MISALIGNED_ADDRESS" in outcome["message"], outcome


#: each thread t takes 8 bytes from the device heap (malloc, as CUDA C++'s malloc compiles), writes the pointer to
#: out[t]; where it is 16-byte aligned, stores a 64-bit value made from t through it and loads it back into
#: out[4 + t] (a misaligned pointer is left alone: the store would fault and lose the context); once every thread's
#: block is held (bar.sync), each frees its own
PTX_DEVICE_MALLOC = """.version 7.5
.target sm_75
.address_size 64

.extern .func (.param .b64 func_retval0) malloc
(
    .param .b64 malloc_param_0
)
;
.extern .func free
(
    .param .b64 free_param_0
)
;

.visible .entry heap_words(.param .u64 heap_words_param_0)
{
    .reg .pred %p<2>;
    .reg .b32 %r<2>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [heap_words_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 8;
    add.s64 %rd4, %rd2, %rd3;
    mov.u64 %rd5, 8;
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd5;
    .param .b64 retval0;
    call.uni (retval0), malloc, (param0);
    ld.param.b64 %rd6, [retval0];
    }
    st.global.u64 [%rd4], %rd6;
    and.b64 %rd7, %rd6, 15;
    setp.ne.s64 %p1, %rd7, 0;
    @%p1 bra HELD;
    setp.eq.s64 %p1, %rd6, 0;
    @%p1 bra HELD;
    cvt.u64.u32 %rd8, %r1;
    mad.lo.s64 %rd9, %rd8, 4294967297, 81985529216486895;
    st.u64 [%rd6], %rd9;
    ld.u64 %rd10, [%rd6];
    st.global.u64 [%rd4+32], %rd10;
HELD:
    bar.sync 0;
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd6;
    call.uni free, (param0);
    }
    ret;
}
"""


@pytest.mark.clause("KERNEL-98")
def test_device_malloc_gives_16_byte_aligned_memory(device, stream, require):
    """CUDA guarantees that the device heap's malloc returns memory aligned to 16 bytes, so that any type (a
    double2, an int4) may be stored there: a heap that hands out blocks at another alignment makes such stores
    fault as misaligned. Four threads each take 8 bytes and store and load a 64-bit word through the pointer;
    their pointers, all held at once, are distinct and 16-byte aligned; then each thread frees its own."""
    require("lang.ptx")
    cuda_driver(device, "the device heap's malloc")
    with device.compile(PTX_DEVICE_MALLOC, "ptx") as module, poisoned(device, stream, 64) as out:
        stream.launch(module.kernel("heap_words"), 1, 4, (out,))
        got = read(stream, out, np.uint64).tolist()
    pointers, words = got[:4], got[4:]
    assert all(pointers) and len(set(pointers)) == 4, f"malloc(8) in four threads gave {[hex(p) for p in pointers]}"
    misaligned = [hex(p) for p in pointers if p % 16]
    assert not misaligned, f"malloc(8) gave pointers not aligned to 16 bytes: {misaligned}"
    assert words == [(t * 4294967297 + 81985529216486895) % 2**64 for t in range(4)], [hex(w) for w in words]


#: the child of KERNEL-112: twice, opens the target's device, runs heap_words (PTX argv[2]) on four threads and
#: reads its 64 bytes back, then closes the device (the library's close() releases the primary context, its last
#: reference in this process); prints each round's eight words, or the exception it raised
HEAP_AGAIN_CHILD = """
import json, sys
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
rounds = []
for _ in range(2):
    device = _open(get(sys.argv[1]))
    try:
        stream = device.create_stream()
        buf = device.alloc(64)
        stream.fill(buf, 0)
        stream.launch(device.compile(sys.argv[2], "ptx").kernel("heap_words"), 1, 4, (buf,))
        out = np.zeros(8, np.uint64)
        stream.copy_dtoh(out, buf)
        stream.synchronize()
        rounds.append(out.tolist())
    except Exception as exc:
        rounds.append(f"{type(exc).__name__}: {exc}"[:800])
    try:
        device.close()
    except Exception:
        pass
print(json.dumps(rounds))
"""


@pytest.mark.clause("KERNEL-112")
def test_device_malloc_works_again_after_the_primary_context_is_released_and_retained(device, target, require):
    """A program that closes its device and opens it again (a test harness, a server that reinitializes) gets a
    fresh primary context: CUDA resets the context when its last reference is released, heap included, and the
    next kernel that calls malloc gets a heap of the new context. In a child process, where the library holds
    the only reference, KERNEL-98's four threads malloc, store through, load back and free, in two rounds with
    the device closed and opened between them; both rounds give the same kind of result."""
    require("lang.ptx")
    cuda_driver(device, "the device heap's malloc")
    rounds = child_json(target, HEAP_AGAIN_CHILD, PTX_DEVICE_MALLOC)
    want = [(t * 4294967297 + 81985529216486895) % 2**64 for t in range(4)]
    for k, got in enumerate(rounds):
        name = ["first round", "second round, after close() and a new device"][k]
        assert isinstance(got, list), f"{name}: {got}"
        pointers, words = got[:4], got[4:]
        assert all(pointers) and len(set(pointers)) == 4 and not any(p % 16 for p in pointers), \
            f"{name}: malloc(8) in four threads gave {[hex(p) for p in pointers]}"
        assert words == want, f"{name}: words loaded back through the pointers {[hex(w) for w in words]}"


#: one thread takes 1 MiB from the device heap and gives it back, out[0] times; out[1] counts the null pointers
#: malloc returned, out[2] holds the last pointer; free(NULL) is called once first, which CUDA ignores
PTX_DEVICE_HEAP_REUSE = """.version 7.5
.target sm_75
.address_size 64

.extern .func (.param .b64 func_retval0) malloc
(
    .param .b64 malloc_param_0
)
;
.extern .func free
(
    .param .b64 free_param_0
)
;

.visible .entry heap_reuse(.param .u64 heap_reuse_param_0)
{
    .reg .pred %p<3>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [heap_reuse_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    ld.global.u32 %r1, [%rd2];
    mov.u32 %r2, 0;
    mov.u64 %rd3, 0;
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd3;
    call.uni free, (param0);
    }
    mov.u64 %rd4, 1048576;
LOOP:
    setp.eq.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd4;
    .param .b64 retval0;
    call.uni (retval0), malloc, (param0);
    ld.param.b64 %rd5, [retval0];
    }
    setp.eq.s64 %p2, %rd5, 0;
    selp.u32 %r3, 1, 0, %p2;
    add.u32 %r2, %r2, %r3;
    st.global.u64 [%rd2+16], %rd5;
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd5;
    call.uni free, (param0);
    }
    sub.u32 %r1, %r1, 1;
    bra.uni LOOP;
DONE:
    st.global.u32 [%rd2+8], %r2;
    ret;
}
"""


@pytest.mark.clause("KERNEL-107")
def test_device_heap_memory_that_is_freed_is_given_again(device, stream, require):
    """A kernel that allocates and frees in a loop (a per-item scratch buffer) relies on ``free`` giving the
    memory back to the device heap: 64 rounds of malloc(1 MiB) then free, in one thread, take 64 MiB in all,
    eight times the heap CUDA gives a context (CU_LIMIT_MALLOC_HEAP_SIZE, 8 MiB unless raised), so a heap
    that does not take freed blocks back returns null pointers. free(NULL) first, which CUDA's programming
    guide says is ignored."""
    require("lang.ptx")
    cuda_driver(device, "the device heap's malloc and free")
    rounds = 64
    with device.compile(PTX_DEVICE_HEAP_REUSE, "ptx") as module, \
            upload(device, stream, np.array([rounds, 0, 0, 0, 0, 0], dtype=np.uint32)) as out:
        stream.launch(module.kernel("heap_reuse"), 1, 1, (out,))
        got = read(stream, out, np.uint32).tolist()
    nulls, last = got[2], got[4] | got[5] << 32
    assert nulls == 0, f"{nulls} of {rounds} rounds of malloc(1 MiB) then free got a null pointer: freed memory " \
        "did not go back to the device heap"
    assert last and last % 16 == 0, hex(last)


#: one thread takes two 64-byte blocks (p, then q) from the device heap and, while q is live, frees p twice
#: (free_twice_beside) or frees p + 16 (free_inside), or, while p is live, frees q twice (free_last_twice):
#: pointers malloc did not return (or no longer holds); then stores 7 to out[0]
PTX_BAD_FREES = """.version 7.5
.target sm_75
.address_size 64

.extern .func (.param .b64 func_retval0) malloc
(
    .param .b64 malloc_param_0
)
;
.extern .func free
(
    .param .b64 free_param_0
)
;

.visible .entry free_twice_beside(.param .u64 free_twice_beside_param_0)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [free_twice_beside_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u64 %rd3, 64;
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd3;
    .param .b64 retval0;
    call.uni (retval0), malloc, (param0);
    ld.param.b64 %rd4, [retval0];
    }
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd3;
    .param .b64 retval0;
    call.uni (retval0), malloc, (param0);
    ld.param.b64 %rd5, [retval0];
    }
    add.s64 %rd6, %rd4, 16;
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd4;
    call.uni free, (param0);
    }
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd4;
    call.uni free, (param0);
    }
    mov.u32 %r1, 7;
    st.global.u32 [%rd2], %r1;
    ret;
}

.visible .entry free_last_twice(.param .u64 free_last_twice_param_0)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [free_last_twice_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u64 %rd3, 64;
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd3;
    .param .b64 retval0;
    call.uni (retval0), malloc, (param0);
    ld.param.b64 %rd4, [retval0];
    }
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd3;
    .param .b64 retval0;
    call.uni (retval0), malloc, (param0);
    ld.param.b64 %rd5, [retval0];
    }
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd5;
    call.uni free, (param0);
    }
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd5;
    call.uni free, (param0);
    }
    mov.u32 %r1, 7;
    st.global.u32 [%rd2], %r1;
    ret;
}

.visible .entry free_inside(.param .u64 free_inside_param_0)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [free_inside_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u64 %rd3, 64;
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd3;
    .param .b64 retval0;
    call.uni (retval0), malloc, (param0);
    ld.param.b64 %rd4, [retval0];
    }
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd3;
    .param .b64 retval0;
    call.uni (retval0), malloc, (param0);
    ld.param.b64 %rd5, [retval0];
    }
    add.s64 %rd6, %rd4, 16;
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd6;
    call.uni free, (param0);
    }
    mov.u32 %r1, 7;
    st.global.u32 [%rd2], %r1;
    ret;
}
"""


@pytest.mark.clause("KERNEL-133")
@pytest.mark.parametrize("kernel", ["free_twice_beside", "free_inside", "free_last_twice"])
def test_a_kernel_that_frees_what_malloc_did_not_return_ends(device, target, require, kernel):
    """A heap bug in a kernel (a block freed twice, a pointer into a block freed) must end the launch, fault
    or not: CUDA leaves what such a free does undefined, and a memory checker reports it, but a driver whose
    free searches its blocks for the pointer and never stops when it is not there hangs the process that made
    the mistake, with nothing to debug from. A second block stays live meanwhile, so the search has blocks on
    both sides of the pointer, or (free_last_twice) only below it on a first-fit heap, where a search that reads
    one entry past its block list finds the freed block's stale entry. The context may be lost, so a child
    process runs it (KERNEL-92's)."""
    try:
        outcomes = far_store_outcomes(device, target, require, PTX_BAD_FREES, kernel, seconds=60)
    except subprocess.TimeoutExpired:
        outcomes = None
    assert outcomes is not None, f"{kernel}: the child process had not ended 60 s after it started (the launch hangs)"
    outcome = outcomes["synchronize"]
    assert outcome is None or outcome["type"] == "DriverError", f"{kernel}: the stream's synchronize(): {outcome}"


#: of a grid of 2 x 2 blocks of 4 x 2 threads, only thread (3,1,0) of block (0,1,0) stores 1 TiB past its buffer
PTX_ONE_FAR_STORE = """.version 7.5
.target sm_75
.address_size 64

.visible .entry one_far_store(.param .u64 one_far_store_param_0)
{
    .reg .pred %p<5>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [one_far_store_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ctaid.y;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %tid.y;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    setp.ne.u32 %p2, %r2, 1;
    @%p2 bra DONE;
    setp.ne.u32 %p3, %r3, 3;
    @%p3 bra DONE;
    setp.ne.u32 %p4, %r4, 1;
    @%p4 bra DONE;
    add.s64 %rd3, %rd2, 1099511627776;
    mov.u32 %r5, 7;
    st.global.u32 [%rd3], %r5;
DONE:
    ret;
}
"""


@pytest.mark.clause("KERNEL-102")
def test_a_fault_report_that_locates_the_thread_names_the_one_that_faulted(device, target, require):
    """A driver's fault text that locates the faulting thread (a memcheck report: the fake's, appended to the
    DriverError, gives `block (x,y,z), thread (x,y,z)`) is what the user debugs from: it names the one thread
    that stored out of bounds, with the coordinates in their order. A driver whose text locates nothing (the
    hardware driver's "an illegal memory access was encountered") has nothing here to be wrong."""
    outcome = far_store_outcomes(device, target, require, PTX_ONE_FAR_STORE, "one_far_store",
                                 ((2, 2, 1), (4, 2, 1)))["synchronize"]
    assert outcome is not None, "a store 1 TiB past its buffer raised nothing"
    assert outcome["type"] == "DriverError" and "CUDA_ERROR_ILLEGAL_ADDRESS" in outcome["message"], outcome
    located = re.findall(r"block \(\d+,\d+,\d+\), thread \(\d+,\d+,\d+\)", outcome["message"])
    assert all(place == "block (0,1,0), thread (3,1,0)" for place in located), (located, outcome["message"])


#: KERNEL-102's grid and thread, which executes `trap` instead of its store
PTX_ONE_TRAP = PTX_ONE_FAR_STORE.replace("one_far_store", "one_trap").replace(
    "    add.s64 %rd3, %rd2, 1099511627776;\n    mov.u32 %r5, 7;\n    st.global.u32 [%rd3], %r5;\n", "    trap;\n")
#: how a memcheck report describes a free of what the device heap did not hand out
FREE_DESCRIBED = re.compile(r"invalid free")


@pytest.mark.clause("KERNEL-135")
def test_a_trap_is_reported_as_a_launch_failure_of_the_thread_that_trapped(device, target, require):
    """A kernel that executes `trap` (CUDA C++'s __trap(), a failed check that gives up) fails its launch with
    CUDA_ERROR_LAUNCH_FAILED, and a fault text that locates the thread (the fake's report, appended to the
    DriverError) names the one thread that trapped, coordinates in order, and describes no memory access: a
    trap touches no memory, and a report of an invalid read, write or free at address 0 sends the user after a
    pointer. A driver whose text locates nothing ("unspecified launch failure") has nothing here to be wrong."""
    outcome = far_store_outcomes(device, target, require, PTX_ONE_TRAP, "one_trap",
                                 ((2, 2, 1), (4, 2, 1)))["synchronize"]
    assert outcome is not None, "a kernel whose thread executed trap raised nothing"
    message = outcome["message"]
    assert outcome["type"] == "DriverError" and "CUDA_ERROR_LAUNCH_FAILED" in message, outcome
    located = re.findall(r"block \(\d+,\d+,\d+\), thread \(\d+,\d+,\d+\)", message)
    assert all(place == "block (0,1,0), thread (3,1,0)" for place in located), (located, message)
    described = [pattern.pattern for pattern in (ACCESS_DESCRIBED, FREE_DESCRIBED, BLOCK_MEMORY, ALLOCATION_NAMED)
                 if pattern.search(message)]
    assert not described, f"a trap's report describes a memory access ({described}): {message}"


@pytest.mark.clause("ERR-52")
def test_operations_after_a_lost_context_raise_driver_errors(device, target, require):
    """Once a fault has lost the context, using the faulting kernel's buffer from another stream (which fences
    the first stream's work first), filling it or reading it back raises DriverError, the error a caller
    catches: an internal step that fails and is not reported at once surfaces later as a SystemError."""
    outcomes = far_store_outcomes(device, target, require)
    for step in ("copy_htod", "fill", "copy_dtoh"):
        assert outcomes[step] is None or outcomes[step]["type"] == "DriverError", (step, outcomes[step])


#: the child of ERR-54: opens the target's device, allocates three buffers, faults far_store (PTX argv[2]) on the
#: first, then frees the second (never used), frees it again, and drops the third unfreed; prints how each step
#: ended (None: it raised nothing), the second's ``freed`` after its first free, and what reached
#: sys.unraisablehook
FREE_AFTER_FAULT_CHILD = """
import gc, json, sys
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
stream = device.create_stream()
faulting, kept, dropped = device.alloc(4096), device.alloc(4096), device.alloc(4096)
stream.launch(device.compile(sys.argv[2], "ptx").kernel("far_store"), 1, 1, (faulting,))
unraisable = []
sys.unraisablehook = lambda u: unraisable.append(f"{type(u.exc_value).__name__}: {u.exc_value}")
outcomes = {}
def step(name, call):
    try:
        call()
        outcomes[name] = None
    except Exception as exc:
        outcomes[name] = {"type": type(exc).__name__, "message": str(exc), "op": getattr(exc, "op", None)}
step("synchronize", stream.synchronize)
step("free", kept.free)
outcomes["freed"] = kept.freed
step("free again", kept.free)
del dropped
gc.collect()
outcomes["unraisable"] = unraisable
print(json.dumps(outcomes))
"""


@pytest.mark.clause("ERR-54")
def test_a_free_the_driver_refuses_leaves_the_buffer_live(device, target, require):
    """Once a fault has lost the context, the driver refuses every free: ``free()`` raises DriverError and the
    buffer stays live (``freed`` False, a second ``free()`` asks the driver again and is refused again), and a
    buffer dropped unfreed is kept for ``close()`` quietly, nothing reaching sys.unraisablehook. A free that
    marks the buffer freed although the driver refused it (a compiled free that does not recognise the
    refusal as a DriverError) turns the retry into a silent no-op and the dropped buffer's refusal into an
    unraisable exception."""
    require("lang.ptx")
    cuda_driver(device, "its lost context")
    outcomes = child_json(target, FREE_AFTER_FAULT_CHILD, PTX_FAR_STORE)
    assert outcomes["synchronize"] is not None, f"the store 1 TiB past its buffer raised nothing: {outcomes}"
    if outcomes["free"] is None:
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a driver that refuses a free once the context is lost")
    for step in ("free", "free again"):
        assert outcomes[step] is not None and outcomes[step]["type"] == "DriverError", (step, outcomes)
    assert outcomes["freed"] is False, f"a free the driver refused left the buffer marked freed: {outcomes}"
    assert not outcomes["unraisable"], f"a buffer dropped unfreed after the fault: {outcomes['unraisable']}"


def refused_after_fault(target, child: str, refused: dict[str, str]) -> dict:
    """Run ``child`` (a child script that faults far_store, waits, then runs each step named in ``refused``) and
    check what a lost context must give: the wait reports an illegal address, and each step raises DriverError
    naming the driver call ``refused`` gives for it. Returns every step's outcome."""
    outcomes = child_json(target, child, PTX_FAR_STORE)
    fault = outcomes["synchronize"]
    assert fault is not None and "CUDA_ERROR_ILLEGAL_ADDRESS" in fault["message"], \
        f"the store 1 TiB past its buffer was not reported as an illegal address: {outcomes}"
    wrong = {step: outcomes[step] for step, call in refused.items()
             if outcomes[step] is None or outcomes[step]["type"] != "DriverError" or outcomes[step]["op"] != call}
    assert not wrong, f"want each a DriverError naming {refused}, got: {wrong}"
    return outcomes


#: the child of GRAPH-13: opens the target's device, captures a fill into a graph on stream a and replays it, then
#: opens a second capture on a and, inside it, faults far_store (PTX argv[2]) on stream b and waits for b; then
#: replays the first graph; prints how each step ended (None: it raised nothing)
GRAPH_AFTER_FAULT_CHILD = """
import json, sys
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
a, b = device.create_stream(), device.create_stream()
kept, faulting = device.alloc(4096), device.alloc(4096)
with a.capture() as graph:
    a.fill(kept, 1)
far_store = device.compile(sys.argv[2], "ptx").kernel("far_store")
outcomes = {}
def step(name, call):
    try:
        call()
        outcomes[name] = None
    except Exception as exc:
        outcomes[name] = {"type": type(exc).__name__, "message": str(exc), "op": getattr(exc, "op", None)}
step("replay before", lambda: (graph.launch(a), a.synchronize()))
def capture_across_the_fault():
    with a.capture():
        b.launch(far_store, 1, 1, (faulting,))
        step("synchronize", b.synchronize)
step("end capture", capture_across_the_fault)
step("replay after", lambda: graph.launch(a))
print(json.dumps(outcomes))
"""


@pytest.mark.clause("GRAPH-13")
def test_graph_calls_after_a_lost_context_raise_driver_errors(device, target, require):
    """Once a fault has lost the context, the driver refuses the graph calls too, and the caller hears it
    from the call that failed: a capture open when the fault was reported (on another stream) ends by raising
    DriverError naming cuStreamEndCapture, and the replay of a graph captured before raises DriverError
    naming cuGraphLaunch. A backend that takes the refused replay for queued work reports the fault later,
    naming a call that did nothing wrong; one that treats a refused end of capture as a captured graph goes
    on with a graph it never got."""
    require("graphs")
    require("lang.ptx")
    cuda_driver(device, "its lost context")
    outcomes = refused_after_fault(target, GRAPH_AFTER_FAULT_CHILD,
                                   {"end capture": "cuStreamEndCapture", "replay after": "cuGraphLaunch"})
    assert outcomes["replay before"] is None, f"the graph did not replay before the fault: {outcomes}"


#: the child of ERR-59: opens the target's device, copies 16 bytes to a buffer, records two events and a timing
#: one and waits for them, keeping one of each kind and dropping the others (the paths a warm program takes: spare
#: events, a staging ring), faults far_store (PTX argv[2]) on the buffer and waits; then on the same stream copies
#: from and to the buffer (an ndarray, and bytes or a bytearray, which take the Python path), records (plain,
#: timing, and the kept timing event again), launches far_store again (its dims, and new ones), queries and waits
#: for the kept event, and compiles the PTX again; prints how each step ended (None: it raised nothing)
WARM_AFTER_FAULT_CHILD = """
import json, sys
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
stream = device.create_stream()
buf = device.alloc(4096)
far_store = device.compile(sys.argv[2], "ptx").kernel("far_store")
stream.copy_htod(buf, np.zeros(16, np.uint8))
kept, timed = stream.record(), stream.record(timing=True)
stream.record().synchronize()
stream.record(timing=True).synchronize()
kept.synchronize()
stream.launch(far_store, 1, 1, (buf,))
outcomes = {}
def step(name, call):
    try:
        call()
        outcomes[name] = None
    except Exception as exc:
        outcomes[name] = {"type": type(exc).__name__, "message": str(exc), "op": getattr(exc, "op", None)}
step("synchronize", stream.synchronize)
step("copy_dtoh", lambda: stream.copy_dtoh(np.zeros(16, np.uint8), buf))
step("copy_dtoh into a bytearray", lambda: stream.copy_dtoh(bytearray(16), buf))
step("copy_htod", lambda: stream.copy_htod(buf, np.ones(16, np.uint8)))
step("copy_htod of bytes", lambda: stream.copy_htod(buf, bytes(16)))
step("record", stream.record)
step("record(timing=True)", lambda: stream.record(timing=True))
step("record(timing=True, event=)", lambda: stream.record(timing=True, event=timed))
step("launch", lambda: stream.launch(far_store, 1, 1, (buf,)))
step("launch with new dims", lambda: stream.launch(far_store, 2, 1, (buf,)))
step("Event.query", kept.query)
step("Event.synchronize", kept.synchronize)
step("compile", lambda: device.compile(sys.argv[2], "ptx"))
print(json.dumps(outcomes))
"""

#: ERR-59's steps after the fault -> the driver call that refuses each
REFUSED_AFTER_FAULT = {
    "copy_dtoh": "cuMemcpyDtoHAsync", "copy_dtoh into a bytearray": "cuMemcpyDtoHAsync",
    "copy_htod": "cuMemcpyHtoDAsync", "copy_htod of bytes": "cuMemcpyHtoDAsync", "record": "cuEventRecord",
    "record(timing=True)": "cuEventRecord", "record(timing=True, event=)": "cuEventRecord",
    "launch": "cuLaunchKernel", "launch with new dims": "cuLaunchKernel", "Event.query": "cuEventQuery",
    "Event.synchronize": "cuEventSynchronize", "compile": "cuModuleLoadDataEx"}


@pytest.mark.clause("ERR-59")
def test_each_call_after_a_lost_context_names_the_driver_call_that_refused_it(device, target, require):
    """Once a fault has lost the context, every later call on the faulting stream is refused by the driver, and
    the DriverError names the call that was refused (ERR-4), whichever path took it (the compiled one a warm
    program takes, or Python's): copies each way, records, launches, an event's query and wait, and the compile
    of PTX that compiled before, which is a DriverError, not a CompileError blaming the source. A call whose
    refusal is dropped returns as though its work were queued (or done); a compile refused for the context and
    reported as a bad image sends the user to fix code that is fine."""
    require("lang.ptx")
    cuda_driver(device, "its lost context")
    refused_after_fault(target, WARM_AFTER_FAULT_CHILD, REFUSED_AFTER_FAULT)


#: the child of COPY-77: opens the target's device, runs each copy and fill below once (their paths warm: the compiled
#: one for an ndarray, Python's for bytes), faults far_store (PTX argv[2]) on the first buffer and waits; then runs
#: each again on the same stream and prints how each ended (None: it raised nothing)
COPIES_AFTER_FAULT_CHILD = """
import json, sys
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
stream = device.create_stream()
buf, other = device.alloc(4096), device.alloc(4096)
far_store = device.compile(sys.argv[2], "ptx").kernel("far_store")
steps = {
    "fill": lambda: stream.fill(buf, 1),
    "fill of a range": lambda: stream.fill(buf, 2, offset=4, nbytes=8),
    "copy_dtod": lambda: stream.copy_dtod(other, buf, 16),
    "copy_htod_deferred": lambda: stream.copy_htod_deferred(buf, np.ones(16, np.uint8)),
    "copy_htod_deferred of bytes": lambda: stream.copy_htod_deferred(buf, bytes(16)),
}
for call in steps.values():
    call()
stream.synchronize()
stream.launch(far_store, 1, 1, (buf,))
outcomes = {}
for name, call in [("synchronize", stream.synchronize), *steps.items()]:
    try:
        call()
        outcomes[name] = None
    except Exception as exc:
        outcomes[name] = {"type": type(exc).__name__, "message": str(exc), "op": getattr(exc, "op", None)}
print(json.dumps(outcomes))
"""

#: COPY-77's steps after the fault -> the driver call that refuses each
COPIES_REFUSED_AFTER_FAULT = {
    "fill": "cuMemsetD8Async", "fill of a range": "cuMemsetD8Async", "copy_dtod": "cuMemcpyDtoDAsync",
    "copy_htod_deferred": "cuMemcpyHtoDAsync", "copy_htod_deferred of bytes": "cuMemcpyHtoDAsync"}


@pytest.mark.clause("COPY-77")
def test_fills_and_copies_after_a_lost_context_name_the_driver_call_that_refused_them(device, target, require):
    """ERR-59 for the copies and fills it leaves out: once a fault has lost the context, `fill` (whole and a
    range), `copy_dtod` and `copy_htod_deferred` (an ndarray and bytes) on the faulting stream, each warm, are
    refused by the driver, and each DriverError names the call refused (ERR-4). A fill or copy whose status is
    dropped returns as though its work were queued: the caller learns of the fault only at the next wait, from
    a call that did not fail."""
    require("lang.ptx")
    cuda_driver(device, "its lost context")
    refused_after_fault(target, COPIES_AFTER_FAULT_CHILD, COPIES_REFUSED_AFTER_FAULT)


#: the child of COPY-78: opens the target's device and two streams, stages a 128 KiB copy_htod on each into one buffer
#: (the first allocates the staging ring; with two streams listed, the ring's segment is not refilled from its start,
#: so no stream query comes before the DMA), faults far_store (PTX argv[2]) on the first stream and waits; then runs
#: each staged copy below on that stream and prints how each ended (None: it raised nothing)
STAGED_AFTER_FAULT_CHILD = """
import json, sys
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
stream, other = device.create_stream(), device.create_stream()
buf = device.alloc(4 << 20)
far_store = device.compile(sys.argv[2], "ptx").kernel("far_store")
for s in (stream, other):
    s.copy_htod(buf, np.ones(128 << 10, np.uint8))
    s.synchronize()
stream.launch(far_store, 1, 1, (buf,))
outcomes = {}
for name, call in [("synchronize", stream.synchronize),
                   ("copy_htod of 128 KiB", lambda: stream.copy_htod(buf, np.full(128 << 10, 3, np.uint8))),
                   ("copy_htod of 3 MiB", lambda: stream.copy_htod(buf, np.full(3 << 20, 4, np.uint8))),
                   ("copy_htod_deferred of 128 KiB",
                    lambda: stream.copy_htod_deferred(buf, np.full(128 << 10, 5, np.uint8)))]:
    try:
        call()
        outcomes[name] = None
    except Exception as exc:
        outcomes[name] = {"type": type(exc).__name__, "message": str(exc), "op": getattr(exc, "op", None)}
print(json.dumps(outcomes))
"""

#: COPY-78's staged copies after the fault: each one's DMA from the ring is what the driver refuses
STAGED_REFUSED_AFTER_FAULT = dict.fromkeys(
    ("copy_htod of 128 KiB", "copy_htod of 3 MiB", "copy_htod_deferred of 128 KiB"), "cuMemcpyHtoDAsync")


@pytest.mark.clause("COPY-78")
def test_staged_copies_after_a_lost_context_name_the_driver_call_that_refused_them(device, target, require):
    """COPY-77 for the copies staged through the pinned ring: once a fault has lost the context, a pageable
    `copy_htod` of 128 KiB (one DMA, or DMAs of pieces) and of 3 MiB (pieces filled by several threads), and a
    pageable `copy_htod_deferred` of 128 KiB (staged too), are each refused by the driver at their DMA, and the
    DriverError names cuMemcpyHtoDAsync (ERR-4). A staged copy whose refused DMA is dropped returns as though its
    bytes were on their way, and the fault is blamed on the next call."""
    require("lang.ptx")
    cuda_driver(device, "its lost context")
    refused_after_fault(target, STAGED_AFTER_FAULT_CHILD, STAGED_REFUSED_AFTER_FAULT)


#: the child of ERR-60: opens the target's device and two streams, records an event on the first and waits for it
#: (kept), faults far_store (PTX argv[2]) on that stream and waits; then runs each wait below and prints how each
#: ended (None: it raised nothing)
WAITS_AFTER_FAULT_CHILD = """
import json, sys
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
stream, other = device.create_stream(), device.create_stream()
buf = device.alloc(4096)
far_store = device.compile(sys.argv[2], "ptx").kernel("far_store")
kept = stream.record()
other.wait(kept)
kept.synchronize(timeout=5.0)
stream.synchronize(timeout=5.0)
device.synchronize()
stream.launch(far_store, 1, 1, (buf,))
outcomes = {}
for name, call in [("synchronize", stream.synchronize),
                   ("Stream.wait", lambda: other.wait(kept)),
                   ("Stream.synchronize(timeout)", lambda: stream.synchronize(timeout=5.0)),
                   ("Event.synchronize(timeout)", lambda: kept.synchronize(timeout=5.0)),
                   ("Device.synchronize", device.synchronize),
                   ("Device.synchronize(timeout)", lambda: device.synchronize(timeout=5.0))]:
    try:
        call()
        outcomes[name] = None
    except Exception as exc:
        outcomes[name] = {"type": type(exc).__name__, "message": str(exc), "op": getattr(exc, "op", None)}
print(json.dumps(outcomes))
"""

#: ERR-60's waits after the fault -> the driver call that refuses each
WAITS_REFUSED_AFTER_FAULT = {
    "Stream.wait": "cuStreamWaitEvent", "Stream.synchronize(timeout)": "cuStreamQuery",
    "Event.synchronize(timeout)": "cuEventQuery", "Device.synchronize": "cuCtxSynchronize",
    "Device.synchronize(timeout)": "cuStreamQuery"}


@pytest.mark.clause("ERR-60")
def test_waits_after_a_lost_context_name_the_driver_call_that_refused_them(device, target, require):
    """ERR-59 for the waits it leaves out: once a fault has lost the context, `Stream.wait` on an event,
    `synchronize(timeout=)` of a stream and of an event (a poll, not the blocking wait) and `Device.synchronize`
    with and without a timeout are refused by the driver, and each DriverError names the call refused (ERR-4). A
    wait whose refusal is dropped returns as though the work it waits for were done (or ordered), and the next
    call, which did not fail, is blamed."""
    require("lang.ptx")
    cuda_driver(device, "its lost context")
    refused_after_fault(target, WAITS_AFTER_FAULT_CHILD, WAITS_REFUSED_AFTER_FAULT)


#: the child of ERR-61: opens the target's device and two streams, records an untimed event on the first and
#: re-records it there and on the second (the compiled re-record warm), waits, faults far_store (PTX argv[2]) on the
#: first stream and waits; then re-records the kept event each way below and prints how each ended (None: it raised
#: nothing)
RERECORDS_AFTER_FAULT_CHILD = """
import json, sys
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
stream, other = device.create_stream(), device.create_stream()
buf = device.alloc(4096)
far_store = device.compile(sys.argv[2], "ptx").kernel("far_store")
kept = stream.record()
for _ in range(2):
    stream.record(event=kept)
    other.record(event=kept)
    stream.record(timing=False, event=kept)
kept.synchronize()
stream.launch(far_store, 1, 1, (buf,))
outcomes = {}
for name, call in [("synchronize", stream.synchronize),
                   ("record(event=)", lambda: stream.record(event=kept)),
                   ("record(event=) on another stream", lambda: other.record(event=kept)),
                   ("record(timing=False, event=)", lambda: stream.record(timing=False, event=kept))]:
    try:
        call()
        outcomes[name] = None
    except Exception as exc:
        outcomes[name] = {"type": type(exc).__name__, "message": str(exc), "op": getattr(exc, "op", None)}
print(json.dumps(outcomes))
"""

#: ERR-61's re-records after the fault: each is refused at cuEventRecord
RERECORDS_REFUSED_AFTER_FAULT = dict.fromkeys(
    ("record(event=)", "record(event=) on another stream", "record(timing=False, event=)"), "cuEventRecord")


@pytest.mark.clause("ERR-61")
def test_re_records_of_an_untimed_event_after_a_lost_context_name_the_driver_call_that_refused_them(
        device, target, require):
    """ERR-59 for the re-record it leaves out: ERR-59 re-records a timing event, which a backend may take by
    another path than an untimed one (CUDA's compiled module takes `record(event=e)` of an untimed event itself,
    and `record(timing=False, event=e)` by the Python method). Once a fault has lost the context, each of these,
    warm, on the faulting stream and on another one, is refused by the driver, and the DriverError names
    cuEventRecord (ERR-4). A re-record whose refusal is dropped returns the event as though it marked a new
    point, and a wait on it then orders nothing."""
    require("lang.ptx")
    cuda_driver(device, "its lost context")
    refused_after_fault(target, RERECORDS_AFTER_FAULT_CHILD, RERECORDS_REFUSED_AFTER_FAULT)


@pytest.mark.clause("KERNEL-130")
def test_occupancy_answers_for_every_block_size(device, require):
    """cuOccupancyMaxActiveBlocksPerMultiprocessor of a kernel (KERNEL-83's fill7, through Kernel.native) answers
    for every block size from one thread to the kernel's MAX_THREADS_PER_BLOCK: at least one block, and never
    more blocks as the block grows (1, 32, the largest); one thread past the largest, no block (0, or the size
    refused). Launch tuners sweep the block size from 1 up; a driver that refuses a one-thread block (a bound
    check off by one) breaks the sweep at its first step, and one that counts a block no launch may have stops
    it past the end with a size every launch of it refuses."""
    require("lang.ptx")
    cu = cuda_driver(device, "cuOccupancyMaxActiveBlocksPerMultiprocessor")
    with device.compile(PTX_SM75, "ptx") as module:
        kernel = module.kernel("fill7")
        err, largest = cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                             kernel.native)
        assert not err and largest >= 32, f"cuFuncGetAttribute(MAX_THREADS_PER_BLOCK): {err}, {largest}"
        with context_current(device):
            blocks = {size: cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel.native, size, 0)
                      for size in (1, 32, largest)}
            err_past, past = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel.native, largest + 1, 0)
    failed = {size: err for size, (err, _) in blocks.items() if err}
    assert not failed, f"cuOccupancyMaxActiveBlocksPerMultiprocessor refused block sizes {failed}"
    counts = [blocks[size][1] for size in (1, 32, largest)]
    assert counts[-1] >= 1 and counts == sorted(counts, reverse=True), \
        f"blocks a multiprocessor holds for blocks of 1, 32 and {largest} threads: {counts}"
    assert err_past == cu.CUresult.CUDA_ERROR_INVALID_VALUE or (not err_past and past == 0), \
        f"a block of {largest + 1} threads, one past the kernel's limit, answered {err_past} and {past} blocks"


#: KERNEL-129: PTX_SM75's `mov.u32 %r1, 7;` made into instructions the PTX ISA does not define
UNDEFINED_INSTRUCTIONS = {
    "an undefined modifier": "mov.bogus.u32 %r1, 7;",
    "a type the instruction has no form for": "mov.u32 %r1, 7;\n    not.f32 %r1, %r1;",
    "a state space on an arithmetic instruction": "mov.u32 %r1, 7;\n    add.global.u32 %r1, %r1, 1;",
    "a register past its declared range": "mov.u32 %r1, 7;\n    mov.u32 %r2, %r1;",  # %r<2>: %r0 and %r1
}


@pytest.mark.clause("KERNEL-129")
@pytest.mark.parametrize("what", list(UNDEFINED_INSTRUCTIONS))
def test_ptx_with_an_instruction_the_isa_does_not_define_is_refused(device, kernels, require, what):
    """An instruction is its opcode with the modifiers and types the PTX ISA defines for it, on registers the
    function declares: one with others is not PTX, and a driver refuses the module (a CompileError from the
    module load, with the driver's log) — it never builds a kernel from a guess at what was meant, ignoring the
    word it does not know or taking an undeclared register for another's storage."""
    require("lang.ptx")
    source = PTX_SM75.replace("mov.u32 %r1, 7;", UNDEFINED_INSTRUCTIONS[what])
    with pytest.raises(ia.CompileError) as info:
        device.compile(source, "ptx")
    assert info.value.op == "cuModuleLoadDataEx", info.value
    assert "\0" not in str(info.value), f"the log buffer's unused bytes in the message: {str(info.value)[:200]!r}..."
    assert_device_works(device, kernels)


#: the PTX ISA version that first has each architecture newer than sm_90 (PTX ISA notes)
NEWER_ARCHITECTURES = {100: "8.6", 120: "8.7", 121: "8.8"}


@pytest.mark.clause("KERNEL-84")
def test_ptx_for_a_newer_architecture_is_refused(device, stream, kernels, require):
    """PTX names the architecture it was written for, and a driver can only build it for that one or a newer
    device: a module for a newer GPU than this one is a CompileError with the driver's log (never a kernel that
    runs instructions the device lacks, or an error of another kind)."""
    require("lang.ptx")
    major, minor = device.info.extra["compute_capability"]
    newer = [arch for arch in NEWER_ARCHITECTURES if arch > 10 * major + minor]
    if not newer:
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}an architecture newer than sm_{major}{minor} in this test's list")
    arch = newer[0]
    source = PTX_SM75.replace(".version 7.5", f".version {NEWER_ARCHITECTURES[arch]}").replace(
        ".target sm_75", f".target sm_{arch}")
    with pytest.raises(ia.CompileError) as info:
        device.compile(source, "ptx")
    assert info.value.op == "cuModuleLoadDataEx", info.value
    assert_device_works(device, kernels)


#: KERNEL-166: `.target` words that name no architecture: one letter before an architecture's number, and sm_75
#: without its underscore (the PTX ISA's targets are sm_XY and compute_XY, with an optional a or f suffix)
UNKNOWN_TARGETS = ("x75", "sm75")


@pytest.mark.clause("KERNEL-166")
@pytest.mark.parametrize("word", UNKNOWN_TARGETS)
def test_ptx_for_a_target_that_names_no_architecture_is_refused(device, kernels, require, word):
    """`.target` names the architecture the PTX was written for, and ptxas knows each by its whole name: a word
    that only ends in an architecture's number is no target, and the module is a CompileError from the module
    load, never a kernel built for a number read from the wrong place of the word."""
    require("lang.ptx")
    source = PTX_SM75.replace(".target sm_75", f".target {word}")
    with pytest.raises(ia.CompileError) as info:
        device.compile(source, "ptx")
    assert info.value.op == "cuModuleLoadDataEx", info.value
    assert_device_works(device, kernels)


#: shared_places(out): thread 0 stores the shared-window addresses of two static .shared arrays (align 4 and 8)
#: and of the module's dynamic (.extern) one (align 16), then the generic address of the dynamic one (cvta.shared)
PTX_SHARED_PLACES = """.version 7.5
.target sm_75
.address_size 64

.extern .shared .align 16 .b8 dyn[];

.visible .entry shared_places(.param .u64 shared_places_param_0)
{
    .shared .align 4 .b8 small[4];
    .shared .align 8 .b8 mid[12];
    .reg .pred %p<2>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [shared_places_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r4, %tid.x;
    setp.ne.u32 %p1, %r4, 0;
    @%p1 bra DONE;
    mov.u32 %r1, small;
    mov.u32 %r2, mid;
    mov.u32 %r3, dyn;
    st.shared.u32 [small], %r4;
    st.shared.u32 [mid+8], %r4;
    st.global.u32 [%rd2], %r1;
    st.global.u32 [%rd2+4], %r2;
    st.global.u32 [%rd2+8], %r3;
    mov.u64 %rd3, dyn;
    cvta.shared.u64 %rd3, %rd3;
    st.global.u64 [%rd2+16], %rd3;
DONE:
    ret;
}
"""


@pytest.mark.clause("KERNEL-104")
def test_shared_variables_are_placed_at_their_alignment_and_dynamic_memory_after_static(device, stream, require):
    """Each `.shared` variable starts at a multiple of its `.align`, the static ones do not overlap, and the
    dynamic (`.extern`) array starts after them, 16-byte aligned as declared: kernels store vectors (`v4.u32`,
    a float4) there. A layout that rounds the end of the static memory to another multiple puts the dynamic
    array at an address where such a store faults as misaligned."""
    require("lang.ptx")
    cuda_driver(device, "PTX's .shared state space")
    with device.compile(PTX_SHARED_PLACES, "ptx") as module, poisoned(device, stream, 24) as out:
        stream.launch(module.kernel("shared_places"), 1, 32, (out,))
        small, mid, dyn, _ = read(stream, out, np.uint32).tolist()[:4]
        generic = read(stream, out, np.uint64).tolist()[2]
    places = {"small": small, "mid": mid, "dyn": dyn, "generic dyn": generic}
    assert small % 4 == 0 and mid % 8 == 0 and dyn % 16 == 0 and generic % 16 == 0, (
        f"shared addresses not at their .align (4, 8, 16, 16): {places}")
    assert small + 4 <= mid or mid + 12 <= small, f"the static arrays overlap: {places}"
    assert dyn >= max(small + 4, mid + 12), f"the dynamic array starts inside the static ones: {places}"


#: one thread stores a 32-bit word 4096 bytes into a 64-byte .shared array (4096 * %ntid.x, with a block of one
#: thread: an offset the compiler cannot fold, past any block's shared memory), then writes 7 to its buffer
PTX_FAR_SHARED_STORE = """.version 7.5
.target sm_75
.address_size 64

.visible .entry far_shared_store(.param .u64 far_shared_store_param_0)
{
    .shared .align 4 .b8 words[64];
    .reg .b32 %r<5>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [far_shared_store_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, words;
    mov.u32 %r2, %ntid.x;
    shl.b32 %r3, %r2, 12;
    add.s32 %r4, %r1, %r3;
    st.shared.u32 [%r4], %r2;
    bar.sync 0;
    mov.u32 %r2, 7;
    st.global.u32 [%rd2], %r2;
    ret;
}
"""

#: how a memcheck report describes the faulting access, and how it counts the block's own memory
ACCESS_DESCRIBED = re.compile(r"(invalid|misaligned) (\w+) (read|write) of (\d+) bytes at 0x[0-9a-f]+")
BLOCK_MEMORY = re.compile(r"the block has (\d+) bytes of (\w+) memory")
#: how it relates a global address to the device's allocations
ALLOCATION_NAMED = re.compile(r"nearest allocation|use after free|no live allocation")


@pytest.mark.clause("KERNEL-105")
@pytest.mark.parametrize("case", ["far_store", "far_shared_store"])
def test_a_fault_report_describes_the_access_that_faulted(device, target, require, case):
    """KERNEL-102's report, of the access: a fault text that locates the faulting thread also says what it did
    (an invalid, not misaligned, write, of the store's size, in the store's state space), and where it counts
    the block's own memory, that is the faulting space's (shared or local: a block has no global memory of its
    own) and holds what the kernel declares there; a shared address is never explained by device allocations.
    A driver whose text locates nothing has nothing to get wrong."""
    ptx, space, size, declared = {"far_store": (PTX_FAR_STORE, "global", 16, 0),
                                  "far_shared_store": (PTX_FAR_SHARED_STORE, "shared", 4, 64)}[case]
    outcome = far_store_outcomes(device, target, require, ptx, case)["synchronize"]
    assert outcome is not None, f"{case} raised nothing"
    assert outcome["type"] == "DriverError", outcome
    message = outcome["message"]
    located = re.findall(r"block \(\d+,\d+,\d+\), thread \(\d+,\d+,\d+\)", message)
    described = ACCESS_DESCRIBED.findall(message)
    assert described or not located, f"the report locates the thread but does not describe its access: {message}"
    assert all(d == ("invalid", space, "write", str(size)) for d in described), (
        f"want an invalid {space} write of {size} bytes: {described}; {message}")
    if space not in ("global", "generic"):
        assert not ALLOCATION_NAMED.search(message), (
            f"a {space} address, an offset in the block's own memory, is explained by device allocations: {message}")
    for n, where in BLOCK_MEMORY.findall(message):
        assert where == space and where in ("shared", "local") and int(n) >= declared, (
            f"the {space} fault counts the block's {where} memory as {n} bytes (the kernel declares {declared} "
            f"in {space}): {message}")


#: KERNEL-92's far_store, storing 1 TiB before its buffer instead of past it
PTX_FAR_STORE_BEFORE = PTX_FAR_STORE.replace("%rd2, 1099511627776;", "%rd2, -1099511627776;")
#: how a memcheck report relates a global address to the allocation nearest it: base, size, distance, relation
NEAREST_ALLOCATION = re.compile(r"nearest allocation: [\w ]+ #\d+ \[0x([0-9a-f]+), \+(\d+)\), "
                                r"address is (\d+) bytes (before|into|past the end of) it")


@pytest.mark.clause("KERNEL-139")
@pytest.mark.parametrize("where", ["past", "before"])
def test_a_fault_report_measures_the_address_from_the_allocation_it_names(device, target, require, where):
    """KERNEL-105's report, of where the access was: a fault text that relates the faulting address to the
    allocation nearest it (`nearest allocation: ... [0xBASE, +SIZE), address is N bytes before|into|past the end
    of it`) gives the distance from the address it reports the access at, for a store 1 TiB past its buffer and
    one 1 TiB before it. The user goes looking for an index off by N; a distance measured wrong (the address
    added to the base instead of subtracted) sends them after one no code computes. A driver whose text names no
    allocation has nothing here to get wrong."""
    ptx = PTX_FAR_STORE if where == "past" else PTX_FAR_STORE_BEFORE
    outcome = far_store_outcomes(device, target, require, ptx)["synchronize"]
    assert outcome is not None and outcome["type"] == "DriverError", f"a store 1 TiB {where} its buffer: {outcome}"
    message = outcome["message"]
    accesses = [int(address, 16) for address in re.findall(r"of \d+ bytes at 0x([0-9a-f]+)", message)]
    named = NEAREST_ALLOCATION.findall(message)
    assert not named or len(accesses) == 1, f"the report names an allocation but not the one access: {message}"
    for base, size, distance, relation in named:
        base, end, address = int(base, 16), int(base, 16) + int(size), accesses[0]
        want = {"before": base - address, "into": address - base, "past the end of": address - end}[relation]
        assert int(distance) == want, (
            f"the access at {address:#x} is {want} bytes {relation} [{base:#x}, {end:#x}), the report says "
            f"{distance}: {message}")


#: int_edges(out, s): thread 0 stores, as 64-bit words, shifts by amounts at and past the register's width (from
#: s = 31, so no compiler folds them), bfind of values whose sign bit alone is set, 16-bit wide products, and
#: bfind.s32 of the largest positive power of two
PTX_INT_EDGES = """.version 7.5
.target sm_75
.address_size 64

.visible .entry int_edges(.param .u64 int_edges_param_0, .param .u32 int_edges_param_1)
{
    .reg .b16 %h<6>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<16>;
    ld.param.u64 %rd1, [int_edges_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    ld.param.u32 %r1, [int_edges_param_1];
    add.u32 %r2, %r1, 1;
    add.u32 %r3, %r1, 2;
    add.u32 %r4, %r1, 32;
    add.u32 %r5, %r1, 33;
    mov.u32 %r6, 305419897;
    shl.b32 %r7, %r6, %r1;
    cvt.u64.u32 %rd3, %r7;
    st.global.u64 [%rd2], %rd3;
    shl.b32 %r7, %r6, %r2;
    cvt.u64.u32 %rd3, %r7;
    st.global.u64 [%rd2+8], %rd3;
    shl.b32 %r7, %r6, %r3;
    cvt.u64.u32 %rd3, %r7;
    st.global.u64 [%rd2+16], %rd3;
    mov.u64 %rd4, -5;
    shr.s64 %rd5, %rd4, %r4;
    st.global.u64 [%rd2+24], %rd5;
    shr.s64 %rd5, %rd4, %r5;
    st.global.u64 [%rd2+32], %rd5;
    mov.u64 %rd4, 5;
    shr.s64 %rd5, %rd4, %r5;
    st.global.u64 [%rd2+40], %rd5;
    mov.u64 %rd4, -1;
    shr.u64 %rd5, %rd4, %r5;
    st.global.u64 [%rd2+48], %rd5;
    shl.b64 %rd5, %rd4, %r4;
    st.global.u64 [%rd2+56], %rd5;
    mov.u32 %r8, -2147483648;
    bfind.s32 %r9, %r8;
    cvt.u64.u32 %rd3, %r9;
    st.global.u64 [%rd2+64], %rd3;
    bfind.u32 %r9, %r8;
    cvt.u64.u32 %rd3, %r9;
    st.global.u64 [%rd2+72], %rd3;
    mov.u32 %r8, -1;
    bfind.s32 %r9, %r8;
    cvt.u64.u32 %rd3, %r9;
    st.global.u64 [%rd2+80], %rd3;
    mov.u64 %rd6, -9223372036854775808;
    bfind.s64 %r9, %rd6;
    cvt.u64.u32 %rd3, %r9;
    st.global.u64 [%rd2+88], %rd3;
    mov.u16 %h1, 65535;
    mul.wide.u16 %r10, %h1, %h1;
    cvt.u64.u32 %rd3, %r10;
    st.global.u64 [%rd2+96], %rd3;
    mov.u16 %h2, -32768;
    mul.wide.s16 %r10, %h2, %h2;
    cvt.u64.u32 %rd3, %r10;
    st.global.u64 [%rd2+104], %rd3;
    mov.u16 %h3, 3;
    mul.wide.s16 %r10, %h2, %h3;
    cvt.u64.u32 %rd3, %r10;
    st.global.u64 [%rd2+112], %rd3;
    mov.u32 %r8, 1073741824;
    bfind.s32 %r9, %r8;
    cvt.u64.u32 %rd3, %r9;
    st.global.u64 [%rd2+120], %rd3;
    mov.u32 %r11, -2147483647;
    shr.u32 %r12, %r11, %r1;
    cvt.u64.u32 %rd3, %r12;
    st.global.u64 [%rd2+128], %rd3;
    shr.u32 %r12, %r11, %r2;
    cvt.u64.u32 %rd3, %r12;
    st.global.u64 [%rd2+136], %rd3;
    shr.u32 %r12, %r11, %r3;
    cvt.u64.u32 %rd3, %r12;
    st.global.u64 [%rd2+144], %rd3;
    mov.u32 %r11, -5;
    shr.s32 %r12, %r11, %r1;
    cvt.u64.u32 %rd3, %r12;
    st.global.u64 [%rd2+152], %rd3;
    shr.s32 %r12, %r11, %r2;
    cvt.u64.u32 %rd3, %r12;
    st.global.u64 [%rd2+160], %rd3;
    mov.u32 %r11, 5;
    shr.s32 %r12, %r11, %r2;
    cvt.u64.u32 %rd3, %r12;
    st.global.u64 [%rd2+168], %rd3;
    sub.u32 %r13, %r1, 16;
    sub.u32 %r14, %r1, 15;
    mov.u16 %h4, -32767;
    shl.b16 %h5, %h4, %r13;
    cvt.u64.u16 %rd3, %h5;
    st.global.u64 [%rd2+176], %rd3;
    shl.b16 %h5, %h4, %r14;
    cvt.u64.u16 %rd3, %h5;
    st.global.u64 [%rd2+184], %rd3;
    shr.u16 %h5, %h4, %r14;
    cvt.u64.u16 %rd3, %h5;
    st.global.u64 [%rd2+192], %rd3;
    shr.s16 %h5, %h4, %r13;
    cvt.u64.u16 %rd3, %h5;
    st.global.u64 [%rd2+200], %rd3;
    shr.s16 %h5, %h4, %r14;
    cvt.u64.u16 %rd3, %h5;
    st.global.u64 [%rd2+208], %rd3;
    mov.u64 %rd7, 1;
    bfind.shiftamt.u64 %r9, %rd7;
    cvt.u64.u32 %rd3, %r9;
    st.global.u64 [%rd2+216], %rd3;
    mov.u32 %r8, 1;
    bfind.shiftamt.u32 %r9, %r8;
    cvt.u64.u32 %rd3, %r9;
    st.global.u64 [%rd2+224], %rd3;
    ret;
}
"""

#: what each word of int_edges holds (PTX ISA: shl/shr clamp the amount to the width, so a left or logical
#: shift by it gives 0 and an arithmetic one the sign; bfind.s32 of a negative finds the highest bit that
#: differs from the sign bit, and none gives 0xffffffff; of a positive, its highest set bit, as bfind.u32)
INT_EDGES = {"shl.b32 0x12345679 << 31": 0x80000000, "shl.b32 << 32": 0, "shl.b32 << 33": 0,
             "shr.s64 -5 >> 63": 2 ** 64 - 1, "shr.s64 -5 >> 64": 2 ** 64 - 1, "shr.s64 5 >> 64": 0,
             "shr.u64 ~0 >> 64": 0, "shl.b64 ~0 << 63": 2 ** 63, "bfind.s32 0x80000000": 30,
             "bfind.u32 0x80000000": 31, "bfind.s32 -1": 0xFFFFFFFF, "bfind.s64 INT64_MIN": 62,
             "mul.wide.u16 65535 * 65535": 0xFFFE0001, "mul.wide.s16 -32768 * -32768": 0x40000000,
             "mul.wide.s16 -32768 * 3 (as u32)": 2 ** 32 - 98304, "bfind.s32 0x40000000": 30,
             "shr.u32 0x80000001 >> 31": 1, "shr.u32 0x80000001 >> 32": 0, "shr.u32 0x80000001 >> 33": 0,
             "shr.s32 -5 >> 31": 0xFFFFFFFF, "shr.s32 -5 >> 32": 0xFFFFFFFF, "shr.s32 5 >> 32": 0,
             "shl.b16 0x8001 << 15": 0x8000, "shl.b16 0x8001 << 16": 0, "shr.u16 0x8001 >> 16": 0,
             "shr.s16 0x8001 >> 15": 0xFFFF, "shr.s16 0x8001 >> 16": 0xFFFF, "bfind.shiftamt.u64 1": 63,
             "bfind.shiftamt.u32 1": 31}


@pytest.mark.clause("KERNEL-106")
def test_ptx_integer_instructions_at_the_edges_of_their_width(device, stream, require):
    """Shifts by amounts at and past the register's width, bfind of values whose sign bit alone is set (and
    bfind.s32 of a positive one, which only a negative is inverted for), and 16-bit wide multiplies at their
    extremes: where an interpreter written in C would hit undefined shifts or an off-by-one bound (or a sign
    test that is always true), PTX defines every result."""
    require("lang.ptx")
    cuda_driver(device, "PTX's integer instructions")
    with device.compile(PTX_INT_EDGES, "ptx") as module, poisoned(device, stream, 8 * len(INT_EDGES)) as out:
        stream.launch(module.kernel("int_edges"), 1, 1, (out, np.uint32(31)))
        got = read(stream, out, np.uint64).tolist()
    wrong = {name: (hex(g), hex(w)) for (name, w), g in zip(INT_EDGES.items(), got) if g != w}
    assert not wrong, f"(got, want): {wrong}"


#: int_to_float(out, a, b): out[k] (u32) holds, as float bits, integer-to-float conversions of a = 2^24 + 3 and
#: -a to f32 and of b = 2049 and -b to f16 (zero-extended), each with the rounding modifier INT_TO_FLOAT names
PTX_INT_TO_FLOAT = """.version 7.5
.target sm_75
.address_size 64

.visible .entry int_to_float(.param .u64 int_to_float_param_0, .param .u32 int_to_float_param_1,
                             .param .u32 int_to_float_param_2)
{
    .reg .b16 %h<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [int_to_float_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    ld.param.u32 %r1, [int_to_float_param_1];
    ld.param.u32 %r2, [int_to_float_param_2];
    neg.s32 %r3, %r1;
    neg.s32 %r4, %r2;
    cvt.rn.f32.u32 %f1, %r1;
    st.global.f32 [%rd2], %f1;
    cvt.rz.f32.u32 %f1, %r1;
    st.global.f32 [%rd2+4], %f1;
    cvt.rp.f32.u32 %f1, %r1;
    st.global.f32 [%rd2+8], %f1;
    cvt.rm.f32.s32 %f1, %r3;
    st.global.f32 [%rd2+12], %f1;
    cvt.rp.f32.s32 %f1, %r3;
    st.global.f32 [%rd2+16], %f1;
    cvt.rz.f32.s32 %f1, %r3;
    st.global.f32 [%rd2+20], %f1;
    cvt.rn.f16.u32 %h1, %r2;
    cvt.u32.u16 %r5, %h1;
    st.global.u32 [%rd2+24], %r5;
    cvt.rp.f16.u32 %h1, %r2;
    cvt.u32.u16 %r5, %h1;
    st.global.u32 [%rd2+28], %r5;
    cvt.rz.f16.s32 %h1, %r4;
    cvt.u32.u16 %r5, %h1;
    st.global.u32 [%rd2+32], %r5;
    cvt.rm.f16.s32 %h1, %r4;
    cvt.u32.u16 %r5, %h1;
    st.global.u32 [%rd2+36], %r5;
    ret;
}
"""

#: what each word of int_to_float holds: 2^24 + 3 lies halfway between the f32s 2^24 + 2 (odd significand) and
#: 2^24 + 4 (even), 2049 halfway between the f16s 2048 (even) and 2050 (odd): .rn takes the even one, .rz the one
#: nearer 0, .rm the lower, .rp the higher (IEEE 754, as the PTX ISA's cvt rounding modifiers say)
INT_TO_FLOAT = {"cvt.rn.f32.u32 2^24+3": 0x4B800002, "cvt.rz.f32.u32 2^24+3": 0x4B800001,
                "cvt.rp.f32.u32 2^24+3": 0x4B800002, "cvt.rm.f32.s32 -(2^24+3)": 0xCB800002,
                "cvt.rp.f32.s32 -(2^24+3)": 0xCB800001, "cvt.rz.f32.s32 -(2^24+3)": 0xCB800001,
                "cvt.rn.f16.u32 2049": 0x6800, "cvt.rp.f16.u32 2049": 0x6801, "cvt.rz.f16.s32 -2049": 0xE800,
                "cvt.rm.f16.s32 -2049": 0xE801}


@pytest.mark.clause("KERNEL-167")
def test_ptx_integer_to_float_conversions_round_as_their_modifier_says(device, stream, require):
    """An integer past the destination's significand converts with the rounding modifier the instruction names,
    into the destination's own format: an interpreter that converts with the host's cast (round to nearest f32)
    whatever the modifier and the destination gets every .rz/.rm/.rp and every f16 result wrong here."""
    require("lang.ptx")
    with device.compile(PTX_INT_TO_FLOAT, "ptx") as module, poisoned(device, stream, 4 * len(INT_TO_FLOAT)) as out:
        stream.launch(module.kernel("int_to_float"), 1, 1, (out, np.uint32(2 ** 24 + 3), np.uint32(2049)))
        got = read(stream, out, np.uint32).tolist()
    wrong = {name: (hex(g), hex(w)) for (name, w), g in zip(INT_TO_FLOAT.items(), got) if g != w}
    assert not wrong, f"(got, want): {wrong}"


#: probe(a, b, c: u32) stores its block's x size (%ntid.x) in the module's global seen_ntid, whatever its scalar
#: arguments; fetch(out) copies seen_ntid to out[0]. No buffer among probe's arguments, so they can be value-equal
#: to a block tuple (np.uint32(64) == 64, with the same hash).
PTX_NTID_PROBE = """.version 7.5
.target sm_75
.address_size 64

.global .align 4 .u32 seen_ntid;

.visible .entry probe(.param .u32 probe_a, .param .u32 probe_b, .param .u32 probe_c)
{
    .reg .b32 %r<2>;
    mov.u32 %r1, %ntid.x;
    st.global.u32 [seen_ntid], %r1;
    ret;
}

.visible .entry fetch(.param .u64 fetch_out)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [fetch_out];
    cvta.to.global.u64 %rd2, %rd1;
    ld.global.u32 %r1, [seen_ntid];
    st.global.u32 [%rd2], %r1;
    ret;
}
"""


@pytest.mark.clause("KERNEL-113")
def test_a_launch_runs_with_its_own_block_when_its_arguments_equal_another_block(device, stream, require):
    """A backend may remember what it worked out for a launch by the launch's dims; the arguments are no part of
    that key. Here a kernel of three u32 scalars is launched with a 64-thread block, then (three times, so a
    remembered launch is used too) with a 32-thread block and the arguments (64, 1, 1): value-equal, and equal in
    hash, to the first block. Each launch must run with the block it was given."""
    require("lang.ptx")
    cuda_driver(device, "a PTX module's global variable")
    u32 = np.uint32
    with device.compile(PTX_NTID_PROBE, "ptx") as module, poisoned(device, stream, 4) as out:
        probe, fetch = module.kernel("probe"), module.kernel("fetch")
        stream.launch(probe, (1, 1, 1), (64, 1, 1), (u32(7), u32(7), u32(7)))
        stream.launch(fetch, (1, 1, 1), (1, 1, 1), (out,))
        assert read(stream, out, np.uint32)[0] == 64, "the probe does not see its own 64-thread block"
        for attempt in range(3):
            stream.launch(probe, (1, 1, 1), (32, 1, 1), (u32(64), u32(1), u32(1)))
            stream.launch(fetch, (1, 1, 1), (1, 1, 1), (out,))
            got = int(read(stream, out, np.uint32)[0])
            assert got == 32, (f"launch {attempt + 1} with block (32, 1, 1) and arguments (64, 1, 1) ran with "
                               f"{got} threads a block: the block of another launch whose dims equal its arguments")


#: one warp: every lane votes five predicates (lane odd, lane 0, lane > 100, lane < 32, not lane 0) with
#: vote.sync.ballot.b32 over the full mask; lane 0 writes the five ballots to out[0..4]
PTX_BALLOTS = """.version 7.0
.target sm_70
.address_size 64

.visible .entry ballots(.param .u64 ballots_param_0)
{
    .reg .pred %p<5>;
    .reg .b32 %r<9>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [ballots_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %laneid;
    and.b32 %r2, %r1, 1;
    setp.ne.u32 %p1, %r2, 0;
    setp.eq.u32 %p2, %r1, 0;
    setp.gt.u32 %p3, %r1, 100;
    setp.lt.u32 %p4, %r1, 32;
    vote.sync.ballot.b32 %r3, %p1, 0xffffffff;
    vote.sync.ballot.b32 %r4, %p2, 0xffffffff;
    vote.sync.ballot.b32 %r5, %p3, 0xffffffff;
    vote.sync.ballot.b32 %r6, %p4, 0xffffffff;
    vote.sync.ballot.b32 %r7, !%p2, 0xffffffff;
    @!%p2 bra DONE;
    st.global.u32 [%rd2], %r3;
    st.global.u32 [%rd2+4], %r4;
    st.global.u32 [%rd2+8], %r5;
    st.global.u32 [%rd2+12], %r6;
    st.global.u32 [%rd2+16], %r7;
DONE:
    ret;
}
"""


@pytest.mark.clause("KERNEL-109")
def test_ptx_vote_ballot_sets_exactly_the_bits_of_the_lanes_whose_predicate_holds(device, stream, require):
    """vote.sync.ballot.b32 gives each lane a mask with bit i set exactly when lane i's predicate is true (or,
    negated, false): lane 0's bit included, so a ballot that starts from anything but an empty mask reports
    lane 0 voting yes when it did not."""
    require("lang.ptx")
    with device.compile(PTX_BALLOTS, "ptx") as module, poisoned(device, stream, 20) as out:
        stream.launch(module.kernel("ballots"), 1, 32, (out,))
        got = [hex(v) for v in read(stream, out, np.uint32).tolist()[:5]]
    want = [hex(v) for v in (0xAAAAAAAA, 0x1, 0x0, 0xFFFFFFFF, 0xFFFFFFFE)]
    assert got == want, "ballots of [lane odd, lane 0, lane > 100, lane < 32, not lane 0]"


#: one block of 32 threads: four .shared arrays (u32, u64, u16, u32; the u64 one 8-aligned), each thread t stores
#: 1000 + t, 2000 + t, 3000 + t and 4000 + t into its slot of each; after bar.sync thread t reads slot 31 - t of
#: each into out[4 t .. 4 t + 3] (u32, the u64 and u16 values widened or narrowed)
PTX_SHARED_ARRAYS = """.version 7.5
.target sm_75
.address_size 64

.visible .entry shared_arrays(.param .u64 shared_arrays_param_0)
{
    .shared .align 4 .b8 s_a[128];
    .shared .align 8 .b8 s_b[256];
    .shared .align 2 .b8 s_c[64];
    .shared .align 4 .b8 s_d[128];
    .reg .b16 %h<3>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<24>;
    ld.param.u64 %rd1, [shared_arrays_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    mul.wide.u32 %rd4, %r1, 8;
    mul.wide.u32 %rd5, %r1, 2;
    mov.u64 %rd6, s_a;
    add.s64 %rd7, %rd6, %rd3;
    add.s32 %r2, %r1, 1000;
    st.shared.u32 [%rd7], %r2;
    mov.u64 %rd8, s_b;
    add.s64 %rd9, %rd8, %rd4;
    cvt.u64.u32 %rd10, %r1;
    add.s64 %rd10, %rd10, 2000;
    st.shared.u64 [%rd9], %rd10;
    mov.u64 %rd11, s_c;
    add.s64 %rd12, %rd11, %rd5;
    add.s32 %r3, %r1, 3000;
    cvt.u16.u32 %h1, %r3;
    st.shared.u16 [%rd12], %h1;
    mov.u64 %rd13, s_d;
    add.s64 %rd14, %rd13, %rd3;
    add.s32 %r4, %r1, 4000;
    st.shared.u32 [%rd14], %r4;
    bar.sync 0;
    mov.u32 %r5, 31;
    sub.s32 %r6, %r5, %r1;
    mul.wide.u32 %rd15, %r6, 4;
    mul.wide.u32 %rd16, %r6, 8;
    mul.wide.u32 %rd17, %r6, 2;
    mul.wide.u32 %rd18, %r1, 16;
    add.s64 %rd19, %rd2, %rd18;
    add.s64 %rd20, %rd6, %rd15;
    ld.shared.u32 %r7, [%rd20];
    st.global.u32 [%rd19], %r7;
    add.s64 %rd21, %rd8, %rd16;
    ld.shared.u64 %rd22, [%rd21];
    cvt.u32.u64 %r8, %rd22;
    st.global.u32 [%rd19+4], %r8;
    add.s64 %rd23, %rd11, %rd17;
    ld.shared.u16 %h2, [%rd23];
    cvt.u32.u16 %r9, %h2;
    st.global.u32 [%rd19+8], %r9;
    add.s64 %rd20, %rd13, %rd15;
    ld.shared.u32 %r10, [%rd20];
    st.global.u32 [%rd19+12], %r10;
    ret;
}
"""


@pytest.mark.clause("KERNEL-114")
def test_a_kernels_shared_arrays_are_each_its_own(device, stream, require):
    """Each of a kernel's `.shared` declarations gets memory of its own, at its own alignment: four arrays, each
    thread writes its slot of each and reads another thread's slot of each. A compiler or driver that lays them
    out wrong (two at one offset, an entry found for the wrong declaration) makes them overwrite each other; the
    conformance kernels declare at most two."""
    require("lang.ptx")
    t = np.arange(32, dtype=np.uint32)
    with device.compile(PTX_SHARED_ARRAYS, "ptx") as module, poisoned(device, stream, 4 * 4 * 32) as out:
        stream.launch(module.kernel("shared_arrays"), 1, 32, (out,))
        got = read(stream, out, np.uint32).reshape(32, 4)
    want = np.stack([1000 + 31 - t, 2000 + 31 - t, 3000 + 31 - t, 4000 + 31 - t], axis=1)
    wrong = [name for k, name in enumerate(("first (u32)", "second (u64)", "third (u16)", "fourth (u32)"))
             if not (got[:, k] == want[:, k]).all()]
    assert not wrong, f"the {', '.join(wrong)} shared array(s) read back wrong: {got[:2].tolist()} for {want[:2].tolist()}"


#: one warp of 32 threads: lane i loads in[i] and reduces it over the full mask with each redux.sync operation
#: (add.u32, min.u32, max.u32, min.s32, max.s32, and.b32, or.b32, xor.b32, add.s32); every lane stores the nine
#: results to out[9 i .. 9 i + 8]
PTX_REDUXES = """.version 7.0
.target sm_80
.address_size 64

.visible .entry reduxes(.param .u64 reduxes_param_0, .param .u64 reduxes_param_1)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [reduxes_param_0];
    ld.param.u64 %rd2, [reduxes_param_1];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mov.u32 %r1, %laneid;
    mul.wide.u32 %rd5, %r1, 4;
    add.s64 %rd6, %rd3, %rd5;
    ld.global.u32 %r2, [%rd6];
    redux.sync.add.u32 %r3, %r2, 0xffffffff;
    redux.sync.min.u32 %r4, %r2, 0xffffffff;
    redux.sync.max.u32 %r5, %r2, 0xffffffff;
    redux.sync.min.s32 %r6, %r2, 0xffffffff;
    redux.sync.max.s32 %r7, %r2, 0xffffffff;
    redux.sync.and.b32 %r8, %r2, 0xffffffff;
    redux.sync.or.b32 %r9, %r2, 0xffffffff;
    redux.sync.xor.b32 %r10, %r2, 0xffffffff;
    redux.sync.add.s32 %r11, %r2, 0xffffffff;
    mul.wide.u32 %rd5, %r1, 36;
    add.s64 %rd7, %rd4, %rd5;
    st.global.u32 [%rd7], %r3;
    st.global.u32 [%rd7+4], %r4;
    st.global.u32 [%rd7+8], %r5;
    st.global.u32 [%rd7+12], %r6;
    st.global.u32 [%rd7+16], %r7;
    st.global.u32 [%rd7+20], %r8;
    st.global.u32 [%rd7+24], %r9;
    st.global.u32 [%rd7+28], %r10;
    st.global.u32 [%rd7+32], %r11;
    ret;
}
"""


def _needs_sm80(device) -> None:
    """redux.sync is sm_80's: a CUDA device of an older capability cannot load it."""
    if device.info.backend == "cuda" and tuple(device.info.extra["compute_capability"]) < (8, 0):
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}redux.sync (compute capability 8.0)")


@pytest.mark.clause("KERNEL-115")
def test_ptx_redux_sync_gives_every_lane_the_reduction_of_all_lanes(device, stream, require):
    """Each of redux.sync's operations over a full warp gives every lane the reduction of the 32 lanes' values:
    the 32-bit wrapping sum (as .u32 and as .s32), the unsigned and the signed minimum and maximum (the values
    mix signs, so the two orders differ), and the bitwise and, or and xor. A warp reduction that skips one
    operation, or starts from a value no lane gave, answers what the lanes did not hold."""
    require("lang.ptx")
    _needs_sm80(device)
    values = rng(115).integers(0, 1 << 32, 32, dtype=np.uint64).astype(np.uint32)
    values = (values & np.uint32(0x0FF0FFF0)) | np.uint32(0x10000005)  # common bits, so that and is not 0
    values[1::2] |= np.uint32(0x80000000)  # the odd lanes' values negative as s32
    signed = values.view(np.int32)
    want = [int(values.astype(np.uint64).sum()) & 0xFFFFFFFF, int(values.min()), int(values.max()),
            int(signed.min()) & 0xFFFFFFFF, int(signed.max()) & 0xFFFFFFFF,
            int(np.bitwise_and.reduce(values)), int(np.bitwise_or.reduce(values)),
            int(np.bitwise_xor.reduce(values)), int(values.astype(np.uint64).sum()) & 0xFFFFFFFF]
    names = ["add.u32", "min.u32", "max.u32", "min.s32", "max.s32", "and.b32", "or.b32", "xor.b32", "add.s32"]
    with device.compile(PTX_REDUXES, "ptx") as module, upload(device, stream, values) as src, \
            poisoned(device, stream, 9 * 4 * 32) as out:
        stream.launch(module.kernel("reduxes"), 1, 32, (src, out))
        got = read(stream, out, np.uint32).reshape(32, 9)
    wrong = [f"{name}: lane 0 got {int(got[0, k]):#x}, want {want[k]:#x}" for k, name in enumerate(names)
             if not (got[:, k] == want[k]).all()]
    assert not wrong, "redux.sync over 32 lanes: " + "; ".join(wrong)


#: a block of two warps; in each, lane 0 leaves at once and lanes 1..31 run warp collectives over the member mask
#: 0xfffffffe: bar.warp.sync, redux.sync.add of the lane id, shfl.sync.idx of 3 * tid from lane 7, shfl.sync.down
#: by 1 (its value and its in-range predicate), vote.sync.ballot of "lane odd", vote.sync.all of "lane > 0",
#: match.any.sync of lane & 1 and redux.sync.min of 3 * tid; thread tid stores the eight results and its lane id
#: to out[9 tid .. 9 tid + 8]
PTX_WITHOUT_LANE_0 = """.version 7.0
.target sm_80
.address_size 64

.visible .entry without_lane_0(.param .u64 without_lane_0_param_0)
{
    .reg .pred %p<6>;
    .reg .b32 %r<24>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [without_lane_0_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %laneid;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    mov.u32 %r2, %tid.x;
    mul.lo.u32 %r3, %r2, 3;
    and.b32 %r4, %r1, 1;
    setp.ne.u32 %p2, %r4, 0;
    setp.gt.u32 %p3, %r1, 0;
    bar.warp.sync 0xfffffffe;
    redux.sync.add.u32 %r5, %r1, 0xfffffffe;
    shfl.sync.idx.b32 %r6, %r3, 7, 31, 0xfffffffe;
    shfl.sync.down.b32 %r7|%p4, %r3, 1, 31, 0xfffffffe;
    selp.u32 %r8, 1, 0, %p4;
    vote.sync.ballot.b32 %r9, %p2, 0xfffffffe;
    vote.sync.all.pred %p5, %p3, 0xfffffffe;
    selp.u32 %r10, 1, 0, %p5;
    match.any.sync.b32 %r11, %r4, 0xfffffffe;
    redux.sync.min.u32 %r13, %r3, 0xfffffffe;
    mul.wide.u32 %rd3, %r2, 36;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r5;
    st.global.u32 [%rd4+4], %r6;
    st.global.u32 [%rd4+8], %r7;
    st.global.u32 [%rd4+12], %r8;
    st.global.u32 [%rd4+16], %r9;
    st.global.u32 [%rd4+20], %r10;
    st.global.u32 [%rd4+24], %r11;
    st.global.u32 [%rd4+28], %r13;
    st.global.u32 [%rd4+32], %r1;
DONE:
    ret;
}
"""


@pytest.mark.clause("KERNEL-116")
def test_ptx_warp_collectives_of_lanes_without_lane_0(device, stream, require):
    """Warp collectives whose member mask leaves out lane 0 (it has returned): the lanes that take part are
    1..31 of each warp, and each collective computes over exactly those. A warp that looks for the instruction
    its lanes wait at, or for the lanes taking part, by starting from lane 0 finds nothing there (or another
    warp's lane) and answers with something none of these lanes computed."""
    require("lang.ptx")
    _needs_sm80(device)
    with device.compile(PTX_WITHOUT_LANE_0, "ptx") as module, poisoned(device, stream, 9 * 4 * 64) as out:
        stream.launch(module.kernel("without_lane_0"), 1, 64, (out,))
        got = read(stream, out, np.uint32).reshape(64, 9)
    poison = POISON * 0x01010101
    names = ["redux.add(lane)", "shfl.idx(3 tid, 7)", "shfl.down(3 tid, 1)", "shfl.down's predicate",
             "ballot(lane odd)", "vote.all(lane > 0)", "match.any(lane & 1)", "redux.min(3 tid)", "%laneid"]
    wrong = []
    for tid in range(64):
        lane, warp = tid % 32, tid // 32
        if lane == 0:
            if (got[tid] != poison).any():
                wrong.append(f"thread {tid} (lane 0, returned first) wrote {[hex(v) for v in got[tid].tolist()]}")
            continue
        want = [496, 3 * (32 * warp + 7), 3 * (tid + 1) if lane < 31 else 3 * tid, int(lane < 31), 0xAAAAAAAA, 1,
                0xAAAAAAAA if lane & 1 else 0x55555554, 3 * (32 * warp + 1), lane]
        wrong += [f"thread {tid}: {name} gave {int(g):#x}, want {w:#x}"
                  for name, g, w in zip(names, got[tid].tolist(), want) if g != w]
    assert not wrong, f"{len(wrong)} wrong results, the first: " + "; ".join(wrong[:4])


#: two PTX inputs for the driver's linker: a library that defines `triple` (.visible) and `bump` (.weak), and a
#: kernel module that declares `triple` (.extern), defines the same .weak `bump` again, and whose kernel `linked`
#: stores bump(triple(tid)) = 3 tid + 1000 to out[tid]
PTX_LINK_LIBRARY = """.version 7.0
.target sm_70
.address_size 64

.visible .func (.param .b32 func_retval0) triple(.param .b32 triple_param_0)
{
    .reg .b32 %r<3>;
    ld.param.u32 %r1, [triple_param_0];
    mul.lo.u32 %r2, %r1, 3;
    st.param.b32 [func_retval0+0], %r2;
    ret;
}

.weak .func (.param .b32 func_retval0) bump(.param .b32 bump_param_0)
{
    .reg .b32 %r<3>;
    ld.param.u32 %r1, [bump_param_0];
    add.u32 %r2, %r1, 1000;
    st.param.b32 [func_retval0+0], %r2;
    ret;
}
"""

PTX_LINK_KERNEL = """.version 7.0
.target sm_70
.address_size 64

.extern .func (.param .b32 func_retval0) triple(.param .b32 triple_param_0);

.weak .func (.param .b32 func_retval0) bump(.param .b32 bump_param_0)
{
    .reg .b32 %r<3>;
    ld.param.u32 %r1, [bump_param_0];
    add.u32 %r2, %r1, 1000;
    st.param.b32 [func_retval0+0], %r2;
    ret;
}

.visible .entry linked(.param .u64 linked_param_0)
{
    .reg .b32 %r<5>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [linked_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    {
    .param .b32 param0;
    st.param.b32 [param0+0], %r1;
    .param .b32 retval0;
    call.uni (retval0), triple, (param0);
    ld.param.b32 %r2, [retval0+0];
    }
    {
    .param .b32 param0;
    st.param.b32 [param0+0], %r2;
    .param .b32 retval0;
    call.uni (retval0), bump, (param0);
    ld.param.b32 %r3, [retval0+0];
    }
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r3;
    ret;
}
"""


@pytest.mark.clause("KERNEL-117")
@pytest.mark.parametrize("order", ["library first", "kernel first"])
def test_a_module_the_drivers_linker_made_of_two_ptx_inputs_runs_on_the_librarys_stream(device, stream, require,
                                                                                       order):
    """A client links its PTX with a library's (cuLinkCreate, cuLinkAddData of each, cuLinkComplete), as
    numba-cuda links PTX files, loads the image in the device's context and launches its kernel on
    `Stream.native` into a library Buffer. One input calls a function only the other defines (declared there
    .extern), and both define the same .weak function, as two inputs compiled from one header do: the linker
    resolves the declaration to the definition, before or after it, and keeps one of the weak definitions."""
    require("lang.ptx")
    cu = cuda_driver(device, "cuLinkCreate")
    inputs = [(PTX_LINK_LIBRARY, b"library.ptx"), (PTX_LINK_KERNEL, b"kernel.ptx")]
    if order == "kernel first":
        inputs.reverse()
    with poisoned(device, stream, 4 * 32) as out:
        with context_current(device):
            state = module = None
            try:
                err, state = cu.cuLinkCreate(0, [], [])
                assert not err, f"cuLinkCreate: {err}"
                for text, name in inputs:
                    data = text.encode() + b"\0"
                    err, = cu.cuLinkAddData(state, cu.CUjitInputType.CU_JIT_INPUT_PTX, data, len(data), name, 0, [], [])
                    assert not err, f"cuLinkAddData of {name.decode()}: {err}"
                err, image, size = cu.cuLinkComplete(state)
                assert not err, f"cuLinkComplete of the {order}: {err}"
                err, module = cu.cuModuleLoadData(image)
                assert not err, f"cuModuleLoadData of the linked image: {err}"
                err, function = cu.cuModuleGetFunction(module, b"linked")
                assert not err, f"cuModuleGetFunction: {err}"
                err, = cu.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, stream.native,
                                         ((out.handle,), (ctypes.c_void_p,)), 0)
                assert not err, f"cuLaunchKernel: {err}"
            finally:
                if module is not None:
                    cu.cuCtxSynchronize()  # the kernel has run before its module goes
                    cu.cuModuleUnload(module)
                if state is not None:
                    cu.cuLinkDestroy(state)
        got = read(stream, out, np.uint32).tolist()
    assert got == [3 * t + 1000 for t in range(32)], got


LINK_LOG_BYTES = 4096


def _log_text(log: bytearray, which: str) -> str:
    """The log the driver wrote into a zeroed buffer: its bytes up to the NUL that ends it, checked to be text."""
    assert 0 in log, f"the {which} log fills its {len(log)}-byte buffer without the NUL that ends a string"
    text = bytes(log[:log.index(0)])
    assert all(32 <= b < 127 or b in b"\t\n\r" for b in text), f"the {which} log is not text: {text[:80]!r}"
    return text.decode()


@pytest.mark.clause("KERNEL-120")
@pytest.mark.parametrize("inputs", ["library and kernel", "kernel alone"])
def test_the_drivers_linker_writes_text_into_its_log_buffers(device, require, inputs):
    """A client gives the linker info and error log buffers (CU_JIT_INFO_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER,
    zeroed, as numba-cuda does) and shows or raises what they hold: each is a string, empty or text, whether
    the link succeeds or fails (the kernel alone calls `triple`, which only the library defines), a failed
    link says why in the error log, and a successful one, asked for verbose logs (CU_JIT_LOG_VERBOSE), says
    something in the info log; where that counts the inputs linked, it counts the two added, and where it states
    the linked image's size, it is the size cuLinkComplete hands back."""
    require("lang.ptx")
    cu = cuda_driver(device, "cuLinkCreate")
    opt = cu.CUjit_option
    texts = [PTX_LINK_LIBRARY, PTX_LINK_KERNEL] if inputs == "library and kernel" else [PTX_LINK_KERNEL]
    info, error = bytearray(LINK_LOG_BYTES), bytearray(LINK_LOG_BYTES)
    with context_current(device):
        state = None
        try:
            err, state = cu.cuLinkCreate(5, [opt.CU_JIT_INFO_LOG_BUFFER, opt.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                                             opt.CU_JIT_ERROR_LOG_BUFFER, opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                                             opt.CU_JIT_LOG_VERBOSE],
                                         [info, LINK_LOG_BYTES, error, LINK_LOG_BYTES, 1])
            assert not err, f"cuLinkCreate: {err}"
            for i, text in enumerate(texts):
                data = text.encode() + b"\0"
                err, = cu.cuLinkAddData(state, cu.CUjitInputType.CU_JIT_INPUT_PTX, data, len(data), b"input%d.ptx" % i,
                                        0, [], [])
                if err:
                    break
            else:
                err, _, size = cu.cuLinkComplete(state)
            info_text, error_text = _log_text(info, "info"), _log_text(error, "error")
        finally:
            if state is not None:
                cu.cuLinkDestroy(state)
    if inputs == "library and kernel":
        assert not err, f"the link of the library and the kernel: {err} ({error_text!r})"
        assert info_text.strip(), "the verbose link (CU_JIT_LOG_VERBOSE 1) succeeded and left the info log empty"
        counted = re.findall(r"(-?\d+) inputs?\b", info_text)  # "2 inputs", "2 input(s)"
        assert all(int(n) == len(texts) for n in counted), \
            f"the info log of a link of {len(texts)} inputs counts {counted}: {info_text!r}"
        stated = re.findall(r"\bimage \((-?\d+) bytes\)", info_text)  # "the linked image (N bytes)"
        assert all(int(n) == size for n in stated), \
            f"the info log states the image's size as {stated} bytes, cuLinkComplete {size}: {info_text!r}"
    else:
        assert err, "the kernel linked alone, with `triple` defined nowhere"
        assert error_text.strip(), f"the failed link ({err}) left the error log empty"


#: KERNEL-173's input names: printf directives (which read and write through arguments never given), and a long
#: run of them (a file's name is at most 255 bytes)
HOSTILE_LINK_NAMES = ["%s%s%s%s%s%s%n%n", "%n%s%x" * 40 + ".cubin"]

#: KERNEL-173's child: links, on the target's device with its context pushed, an input that is no cubin under each
#: name of argv[3:], given by cuLinkAddData and (a file of that name in folder argv[2]) by cuLinkAddFile, each
#: with a 4 KiB error log; prints, for each, the CUresult of the first call that failed (cuLinkAddData or
#: cuLinkAddFile, else cuLinkComplete; 0 where none did) and the error log's bytes up to its NUL (latin-1)
LINK_NAME_CHILD = """
import json, os, sys
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
cu = device.native.driver
err, = cu.cuCtxPushCurrent(device.native.context)
assert not err, err
opt = cu.CUjit_option
cubin = cu.CUjitInputType.CU_JIT_INPUT_CUBIN
junk = b"this is not a cubin, a fatbin or an ELF object\\n" * 8 + b"\\0"
outcome = []
for name in sys.argv[3:]:
    path = os.path.join(sys.argv[2], name)
    with open(path, "wb") as f:
        f.write(junk)
    for how in ("cuLinkAddData", "cuLinkAddFile"):
        log = bytearray(4096)
        err, state = cu.cuLinkCreate(2, [opt.CU_JIT_ERROR_LOG_BUFFER, opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES],
                                     [log, len(log)])
        assert not err, err
        if how == "cuLinkAddData":
            err, = cu.cuLinkAddData(state, cubin, junk, len(junk), name.encode(), 0, [], [])
        else:
            err, = cu.cuLinkAddFile(state, cubin, path.encode(), 0, [], [])
        if not err:
            err, _, _ = cu.cuLinkComplete(state)
        outcome.append([how, name, int(err), bytes(log[:log.index(0)] if 0 in log else log).decode("latin-1")])
        cu.cuLinkDestroy(state)
print(json.dumps(outcome))
"""


@pytest.mark.clause("KERNEL-173")
def test_the_drivers_linker_takes_an_input_name_as_text(device, target, tmp_path):
    """cuLinkAddData's name and cuLinkAddFile's path are the caller's (a file name, a user's kernel name), and a
    driver prints them into its messages: as text, never as a printf format, which reads and writes through
    arguments it was never given for each directive a name holds (`%s`, `%n`) and crashes the process, or, with a
    name of none, prints the name in place of the message. Run in a child process (a crash loses the process):
    an input that is no cubin, under names full of directives, is refused (the call returns an error) and the
    process lives on, and the error log, where the driver writes one, is text."""
    cuda_driver(device, "cuLinkAddData")
    outcome = child_json(target, LINK_NAME_CHILD, str(tmp_path), *HOSTILE_LINK_NAMES, timeout=120)
    assert len(outcome) == 2 * len(HOSTILE_LINK_NAMES), outcome
    for how, name, err, log in outcome:
        assert err, f"{how} of an input that is no cubin, named {name!r}: the link succeeded"
        assert all(32 <= ord(c) < 127 or c in "\t\n\r" for c in log), \
            f"{how} named {name!r}: the error log is not text: {log[:120]!r}"


#: KERNEL-144's fatbins: `scale` (y = 2x + 1) as compute_90 PTX, one compressed with each codec nvcc has, and
#: the library each codec's decompressor comes in on a Linux system (where a driver loads it rather than
#: carrying its own), with the other codec's name, which a message about this codec has no reason to name
COMPRESSED_FATBINS = {"lz4": ("liblz4.so.1", "zstd"), "zstd": ("libzstd.so.1", "lz4")}

#: KERNEL-144's child: loads each fatbin of argv[2:] (cuModuleLoadDataEx with a 4 KiB error log) on the target's
#: device, its context pushed; prints, for each, the load's CUresult and the error log
FATBIN_LOAD_CHILD = """
import json, sys
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
cu = device.native.driver
err, = cu.cuCtxPushCurrent(device.native.context)
assert not err, err
opt = cu.CUjit_option
outcome = {}
for path in sys.argv[2:]:
    log = bytearray(4096)
    with open(path, "rb") as f:
        image = f.read()
    err, _ = cu.cuModuleLoadDataEx(image, 2, [opt.CU_JIT_ERROR_LOG_BUFFER, opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES],
                                   [log, len(log)])
    outcome[path] = [int(err), bytes(log[:log.index(0)]).decode(errors="replace")]
print(json.dumps(outcome))
"""


def _host_library(stem: str) -> str:
    """The file of a shared library this process has loaded (libm: Python links it), for KERNEL-144's shadows."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path).startswith(stem + ".so"):
                return os.path.realpath(path)
    pytest.fail(f"{stem} is not loaded in this process (/proc/self/maps)")


def _run_scale_fatbin(device, stream, cu, path, what: str) -> None:
    """Loads the fatbin at `path` (`what`, for messages) with cuModuleLoadData, the device's context pushed, and
    checks that its `scale` launched with cuLaunchKernel over 256 floats writes y = 2x + 1."""
    x = np.arange(256, dtype=np.float32)
    with upload(device, stream, x) as px, poisoned(device, stream, x.nbytes) as py:
        with context_current(device):
            err, module = cu.cuModuleLoadData(path.read_bytes())
            assert not err, f"cuModuleLoadData of {what}: {err}"
            try:
                err, function = cu.cuModuleGetFunction(module, b"scale")
                assert not err, f"cuModuleGetFunction: {err}"
                err, = cu.cuLaunchKernel(function, 4, 1, 1, 64, 1, 1, 0, stream.native,
                                         ((py.handle, px.handle, x.size),
                                          (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint)), 0)
                assert not err, f"cuLaunchKernel: {err}"
            finally:
                cu.cuCtxSynchronize()  # the kernel has run before its module goes
                cu.cuModuleUnload(module)
        np.testing.assert_array_equal(read(stream, py, np.float32), 2 * x + 1, err_msg=f"{what}: y = 2x + 1")


@pytest.mark.clause("KERNEL-144")
def test_a_compressed_fatbin_runs_or_is_refused_naming_its_codec(device, stream, target, tmp_path, require):
    """nvcc compresses a fatbin's entries (LZ4 by default since CUDA 12.x, zstd when asked), and CuPy's and
    PyTorch's prebuilt kernels ship so: each codec's fatbin loads (cuModuleLoadData) and its kernel runs. A driver
    that decompresses with the system's libraries (as the fake libcuda does) cannot where they are missing: run
    in a child process whose library path shadows liblz4.so.1 and libzstd.so.1 with a library that has neither
    codec (libm), each fatbin loads, or is refused with CUDA_ERROR_NOT_SUPPORTED and an error log naming the
    library that codec needs and not the other codec, which is what the user must install."""
    require("lang.ptx")
    cu = cuda_driver(device, "cuModuleLoadData")
    folder = conformance_dir() / "kernels" / "fatbin"
    paths = {codec: folder / f"scale.{codec}.fatbin" for codec in COMPRESSED_FATBINS}
    for codec, path in paths.items():
        _run_scale_fatbin(device, stream, cu, path, f"the {codec}-compressed fatbin")
    libm = _host_library("libm")
    for library, _ in COMPRESSED_FATBINS.values():
        (tmp_path / library).symlink_to(libm)
    shadowed = f"{tmp_path}:{os.environ.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    outcome = child_json(target, FATBIN_LOAD_CHILD, *map(str, paths.values()), timeout=120,
                         env={"LD_LIBRARY_PATH": shadowed})
    not_supported = int(cu.CUresult.CUDA_ERROR_NOT_SUPPORTED)
    for codec, path in paths.items():
        err, log = outcome[str(path)]
        library, other = COMPRESSED_FATBINS[codec]
        if err:
            assert err == not_supported and library in log and other not in log.lower(), \
                f"the {codec}-compressed fatbin, {library} shadowed: CUresult {err}, log {log!r}"


@pytest.mark.clause("KERNEL-168")
def test_an_uncompressed_fatbin_runs(device, stream, require):
    """nvcc leaves a fatbin's entries uncompressed when told (`--compress-mode=none`): the entry's flags then
    name no codec and its payload is the PTX text itself. A driver that takes every entry as compressed refuses
    such a fatbin or runs garbage; KERNEL-144's `scale`, built so (`kernels/fatbin/scale.plain.fatbin`), loads
    and its kernel runs."""
    require("lang.ptx")
    cu = cuda_driver(device, "cuModuleLoadData")
    _run_scale_fatbin(device, stream, cu, conformance_dir() / "kernels" / "fatbin" / "scale.plain.fatbin",
                      "the uncompressed fatbin")


def _fatbin_of_machine_code(cubin: bytes, arch: int) -> bytes:
    """A fatbin whose one entry is ``cubin``, machine code (kind 2, ELF) for sm_<arch>, laid out as nvcc lays out
    `scale.plain.fatbin` (fakes/cuda/image.c describes the layout): that fatbin's 16-byte header and its entry's
    header, with the entry's kind, payload size and architecture changed, then the cubin padded to 8 bytes."""
    template = (conformance_dir() / "kernels" / "fatbin" / "scale.plain.fatbin").read_bytes()
    header_size, = struct.unpack_from("<I", template, 16 + 4)
    entry = bytearray(template[16:16 + header_size])
    payload = cubin + bytes(-len(cubin) % 8)
    struct.pack_into("<H", entry, 0, 2)
    struct.pack_into("<Q", entry, 8, len(payload))
    struct.pack_into("<I", entry, 28, arch)
    head = bytearray(template[:16])
    struct.pack_into("<Q", head, 8, len(entry) + len(payload))
    return bytes(head + entry + payload)


def _foreign_cubin(device) -> tuple[int, bytes]:
    """The architecture and bytes of a committed NVRTC saxpy cubin for a major architecture other than the
    device's: sm_75, or sm_80 on a 7.x device."""
    major, _ = device.info.extra["compute_capability"]
    arch = 80 if major == 7 else 75
    return arch, (conformance_dir() / "kernels" / "cubin" / f"saxpy.sm_{arch}.cubin").read_bytes()


@pytest.mark.clause("KERNEL-169")
def test_a_fatbin_of_machine_code_for_another_architecture_is_refused(device, target, tmp_path):
    """Machine code runs only on devices of its own major architecture, and a prebuilt library built without the
    user's architecture ships a fatbin of machine code alone for others: loading it must be refused, never crash.
    A driver that takes the absent PTX entry for a compressed one reads through a null pointer. The fatbin is
    built here from a committed NVRTC cubin, so a driver may also call it an invalid image; a child process
    loads it (KERNEL-144's), so that a crash fails the test rather than the run."""
    cu = cuda_driver(device, "cuModuleLoadDataEx")
    arch, cubin = _foreign_cubin(device)
    path = tmp_path / f"saxpy.sm_{arch}.fatbin"
    path.write_bytes(_fatbin_of_machine_code(cubin, arch))
    err, log = child_json(target, FATBIN_LOAD_CHILD, str(path), timeout=120)[str(path)]
    refusals = {int(cu.CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU), int(cu.CUresult.CUDA_ERROR_INVALID_IMAGE)}
    assert err in refusals, f"a fatbin of sm_{arch} machine code alone on a {device.info.name}: CUresult {err}, " \
        f"log {log!r}"


def _fatbin_of_machine_code_then_ptx(cubin: bytes, arch: int) -> bytes:
    """``_fatbin_of_machine_code(cubin, arch)`` with `scale.plain.fatbin`'s PTX entry (its header and payload)
    after the machine code's: the order nvcc writes for `-gencode arch=compute_75,code=sm_75 -gencode
    arch=compute_90,code=compute_90`."""
    machine = _fatbin_of_machine_code(cubin, arch)
    ptx = (conformance_dir() / "kernels" / "fatbin" / "scale.plain.fatbin").read_bytes()[16:]
    head = bytearray(machine[:16])
    struct.pack_into("<Q", head, 8, len(machine) - 16 + len(ptx))
    return bytes(head) + machine[16:] + ptx


@pytest.mark.clause("KERNEL-168")
def test_an_uncompressed_ptx_entry_after_machine_code_runs(device, stream, tmp_path, require):
    """A library built for an older GPU's machine code and newer PTX ships a fatbin whose PTX entry comes
    second, after the machine code; the device runs the PTX. Its text is as long as its own entry header says:
    a driver (or simulator) that takes the size from anywhere else (the 8 bytes before the entry, the fatbin's
    total when the PTX comes first) cuts the text short or reads past it, which `scale.plain.fatbin` alone, its
    PTX first and padded with NULs, never shows. The machine code is KERNEL-169's cubin for another major
    architecture, so only the PTX can run."""
    require("lang.ptx")
    cu = cuda_driver(device, "cuModuleLoadData")
    arch, cubin = _foreign_cubin(device)
    path = tmp_path / f"scale.sm_{arch}.compute_90.fatbin"
    path.write_bytes(_fatbin_of_machine_code_then_ptx(cubin, arch))
    _run_scale_fatbin(device, stream, cu, path, f"the fatbin of sm_{arch} machine code, then uncompressed PTX")


#: the register cap KERNEL-131 gives the JIT, and the values its kernel holds at once (more than the cap)
JIT_REGISTER_CAP, CAPPED_LIVE = 32, 100


def _load_capped(cu, way: str, text: bytes) -> tuple[object, object]:
    """Loads PTX ``text`` with CU_JIT_MAX_REGISTERS JIT_REGISTER_CAP given to the linker (``link``:
    cuLinkCreate's option, then cuLinkAddData, cuLinkComplete and cuModuleLoadData of the image) or to the load
    itself (``load``: cuModuleLoadDataEx's option); the device's context is current. Returns (err, module)."""
    cap = cu.CUjit_option.CU_JIT_MAX_REGISTERS
    if way == "load":
        return cu.cuModuleLoadDataEx(text, 1, [cap], [JIT_REGISTER_CAP])
    err, state = cu.cuLinkCreate(1, [cap], [JIT_REGISTER_CAP])
    assert not err, f"cuLinkCreate with CU_JIT_MAX_REGISTERS {JIT_REGISTER_CAP}: {err}"
    try:
        err, = cu.cuLinkAddData(state, cu.CUjitInputType.CU_JIT_INPUT_PTX, text, len(text), b"many_live.ptx", 0, [],
                                [])
        assert not err, f"cuLinkAddData: {err}"
        err, image, _ = cu.cuLinkComplete(state)
        assert not err, f"cuLinkComplete: {err}"
        return cu.cuModuleLoadData(image)  # before cuLinkDestroy, which frees the image
    finally:
        cu.cuLinkDestroy(state)


@pytest.mark.clause("KERNEL-131")
@pytest.mark.parametrize("way", ["link", "load"])
def test_a_register_cap_given_to_the_jit_bounds_the_kernels_register_count(device, stream, require, way):
    """A client caps the registers a thread may use (CU_JIT_MAX_REGISTERS, numba-cuda's `max_registers`, given
    to cuLinkCreate or to cuModuleLoadDataEx) to fit more blocks on a multiprocessor: the kernel it loads, one
    thread holding 100 values at once (KERNEL-90's `many_live`), reports NUM_REGS within the cap of 32 (the
    compiler spills the rest) and still stores their sum. A driver that drops the cap of a linked image reports
    the kernel's uncapped count, and the client's occupancy arithmetic (the multiprocessor's registers divided
    by NUM_REGS) promises fewer resident blocks than the launch gets."""
    require("lang.ptx")
    cu = cuda_driver(device, "CU_JIT_MAX_REGISTERS")
    values = np.arange(CAPPED_LIVE, dtype=np.uint32) * np.uint32(2654435761) + np.uint32(7)
    text = ptx_many_live(CAPPED_LIVE).encode() + b"\0"
    with upload(device, stream, values) as src, poisoned(device, stream, 4) as out:
        with context_current(device):
            module = None
            try:
                err, module = _load_capped(cu, way, text)
                assert not err, f"loading the {way}ed image: {err}"
                err, function = cu.cuModuleGetFunction(module, b"many_live")
                assert not err, f"cuModuleGetFunction: {err}"
                err, regs = cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, function)
                assert not err, f"cuFuncGetAttribute(NUM_REGS): {err}"
                err, = cu.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream.native,
                                         ((src.handle, out.handle), (ctypes.c_void_p, ctypes.c_void_p)), 0)
                assert not err, f"cuLaunchKernel: {err}"
            finally:
                if module is not None:
                    cu.cuCtxSynchronize()  # the kernel has run before its module goes
                    cu.cuModuleUnload(module)
        got = read(stream, out, np.uint32).tolist()
    assert got == [int(values.sum(dtype=np.uint32))], f"the {way}ed kernel stored {got}"
    assert regs <= JIT_REGISTER_CAP, \
        f"{CAPPED_LIVE} values held at once, {way}ed with CU_JIT_MAX_REGISTERS {JIT_REGISTER_CAP}: NUM_REGS {regs}"


def _long_kernel(steps: int) -> str:
    """PTX of a kernel `long_kernel` that sets r = tid + 1, then runs `mad.lo.u32 r, r, 5, 7` ``steps`` times (as
    a fully unrolled loop does) and stores r to out[tid]."""
    body = "\n".join("    mad.lo.u32 %r1, %r1, 5, 7;" for _ in range(steps))
    return f""".version 7.0
.target sm_70
.address_size 64

.visible .entry long_kernel(.param .u64 long_kernel_param_0)
{{
    .reg .b32 %r<3>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [long_kernel_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r2, %tid.x;
    add.u32 %r1, %r2, 1;
{body}
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r1;
    ret;
}}
"""


@pytest.mark.clause("KERNEL-118")
def test_a_long_kernel_that_repeats_its_immediates_runs_with_a_full_block(device, stream, require):
    """A kernel of 24,000 instructions that each name the same two immediates (`mad.lo.u32 r, r, 5, 7`, a fully
    unrolled loop) needs a handful of registers, and launches with a block of 1024 threads. An immediate is part
    of its instruction: an implementation that gives each use of one storage of its own (a register, a constant
    slot) needs 48,000 of them a thread, and refuses the launch for want of resources or runs out of memory."""
    require("lang.ptx")
    steps, threads = 24000, 1024
    want = np.arange(threads, dtype=np.uint32) + np.uint32(1)
    for _ in range(steps):
        want = want * np.uint32(5) + np.uint32(7)
    with device.compile(_long_kernel(steps), "ptx") as module, poisoned(device, stream, 4 * threads) as out:
        stream.launch(module.kernel("long_kernel"), 1, threads, (out,))
        got = read(stream, out, np.uint32)
    wrong = np.flatnonzero(got != want)
    assert not wrong.size, (f"{wrong.size} threads wrong, the first {int(wrong[0])}: {int(got[wrong[0]]):#x}, "
                            f"want {int(want[wrong[0]]):#x}")


def _cooperative_config(cu, grid: tuple[int, int, int], threads: int, stream: object) -> object:
    """cuLaunchKernelEx's configuration of a cooperative launch, CU_LAUNCH_ATTRIBUTE_COOPERATIVE given after
    another attribute (the stream's own priority, 0): a driver must read every attribute, not the first."""
    priority = cu.CUlaunchAttribute()
    priority.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PRIORITY
    priority.value.priority = 0
    cooperative = cu.CUlaunchAttribute()
    cooperative.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
    cooperative.value.cooperative = 1
    config = cu.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = threads, 1, 1
    config.sharedMemBytes = 0
    config.hStream = stream
    config.attrs = [priority, cooperative]
    config.numAttrs = 2
    return config


def _cooperative_driver(device, require) -> tuple[object, int]:
    """The CUDA driver module and MULTIPROCESSOR_COUNT of a device that launches cooperatively (PTX kernels)."""
    require("lang.ptx")
    cu = cuda_driver(device, "cuLaunchCooperativeKernel")
    attribute = cu.CUdevice_attribute
    err, cooperative = cu.cuDeviceGetAttribute(attribute.CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, device.native.device)
    assert not err, f"cuDeviceGetAttribute(COOPERATIVE_LAUNCH): {err}"
    if not cooperative:
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a device that launches cooperatively")
    err, sms = cu.cuDeviceGetAttribute(attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device.native.device)
    assert not err and sms > 0, f"cuDeviceGetAttribute(MULTIPROCESSOR_COUNT): {err}, {sms}"
    return cu, sms


@pytest.mark.clause("KERNEL-121")
def test_a_cooperative_launch_counts_the_blocks_of_every_grid_dimension(device, stream, require):
    """A cooperative launch (cuLaunchCooperativeKernel, for kernels whose blocks wait for each other) runs only
    when every block of the grid can be resident at once: CUDA refuses a grid of more blocks than
    cuOccupancyMaxActiveBlocksPerMultiprocessor times MULTIPROCESSOR_COUNT with
    CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE. The blocks are those of all three dimensions: a grid of (limit, 1,
    2) is refused, and (limit // 2, 1, 2) and (limit, 1, 1) run; the same through cuLaunchKernelEx with
    CU_LAUNCH_ATTRIBUTE_COOPERATIVE after another attribute. A driver that miscounts a dimension, or reads only a
    launch's first attribute, lets a grid through whose blocks cannot all be resident, and a kernel whose blocks
    wait for each other then hangs."""
    cu, sms = _cooperative_driver(device, require)
    threads = 32
    with device.compile(PTX_SM75, "ptx") as module, poisoned(device, stream, 4) as out:
        kernel = module.kernel("fill7")
        stream.synchronize()
        with context_current(device):
            results = {}
            err, per_sm = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel.native, threads, 0)
            assert not err and per_sm > 0, f"cuOccupancyMaxActiveBlocksPerMultiprocessor: {err}, {per_sm}"
            limit = per_sm * sms
            grids = [(limit, 1, 2), (limit, 1, 1)] + ([(limit // 2, 1, 2)] if limit >= 2 else [])
            for grid in grids:
                results[grid], = cu.cuLaunchCooperativeKernel(kernel.native, *grid, threads, 1, 1, 0, stream.native,
                                                              ((out.handle,), (ctypes.c_void_p,)))
                results["cuLaunchKernelEx", grid], = cu.cuLaunchKernelEx(
                    _cooperative_config(cu, grid, threads, stream.native), kernel.native,
                    ((out.handle,), (ctypes.c_void_p,)), 0)
            err_sync, = cu.cuStreamSynchronize(stream.native)
        too_large = cu.CUresult.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
        for how in ((limit, 1, 2), ("cuLaunchKernelEx", (limit, 1, 2))):
            assert results[how] == too_large, (
                f"a cooperative launch ({how}) of a grid (limit, 1, 2) = {2 * limit} blocks, {per_sm} per "
                f"multiprocessor on {sms} fitting at once: {results[how]}, not CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE")
        ran = {how: err for how, err in results.items() if (limit, 1, 2) not in (how, how[1])}
        assert all(err == cu.CUresult.CUDA_SUCCESS for err in ran.values()), \
            f"cooperative launches of grids of at most {limit} blocks ({per_sm} per multiprocessor on {sms}): {ran}"
        assert not err_sync, f"cuStreamSynchronize: {err_sync}"
        assert read(stream, out, np.uint32).tolist() == [7]


#: KERNEL-176: one thread a block writes its word (block + 1), arrives at the grid barrier in the cooperative
#: launch's workspace (%envreg1:%envreg2, high:low; {u32 size; u32 barrier}) as cooperative_groups' grid.sync()
#: does, then copies the next block's word to its word past the grid's.
GRID_BARRIER = """.version 7.5
.target sm_75
.address_size 64

.visible .entry grid_barrier(.param .u64 grid_barrier_out)
{
    .reg .pred %p<3>;
    .reg .b32 %r<13>;
    .reg .b64 %rd<7>;
    mov.u32 %r3, %tid.x;
    setp.ne.u32 %p1, %r3, 0;
    @%p1 bra DONE;
    ld.param.u64 %rd1, [grid_barrier_out];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %nctaid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd2, %rd1, %rd2;
    add.u32 %r4, %r1, 1;
    st.global.u32 [%rd2], %r4;
    mov.u32 %r5, %envreg1;
    mov.u32 %r6, %envreg2;
    mov.b64 %rd3, {%r6, %r5};
    add.s64 %rd3, %rd3, 4;
    mov.u32 %r7, 1;
    setp.eq.u32 %p2, %r1, 0;
    mov.u32 %r12, 0x80000001;
    @%p2 sub.u32 %r7, %r12, %r2;
    atom.release.gpu.global.add.u32 %r8, [%rd3], %r7;
WAIT:
    ld.acquire.gpu.global.u32 %r9, [%rd3];
    xor.b32 %r10, %r8, %r9;
    and.b32 %r10, %r10, 0x80000000;
    setp.eq.u32 %p1, %r10, 0;
    @%p1 bra WAIT;
    rem.u32 %r4, %r4, %r2;
    mul.wide.u32 %rd4, %r4, 4;
    add.s64 %rd4, %rd1, %rd4;
    ld.global.u32 %r11, [%rd4];
    add.u32 %r4, %r1, %r2;
    mul.wide.u32 %rd5, %r4, 4;
    add.s64 %rd5, %rd1, %rd5;
    st.global.u32 [%rd5], %r11;
DONE:
    ret;
}
"""


@pytest.mark.clause("KERNEL-176")
def test_a_cooperative_launch_gives_its_grid_a_barrier_every_block_reaches(device, stream, require):
    """CUDA C's grid.sync() (cooperative_groups, CCCL) needs no -rdc: it reads the grid workspace's address from
    %envreg1:%envreg2 and counts each block's arrival in its second word, with the top bit flipping once all
    have arrived (block 0 adds 0x80000000 - (blocks - 1), the others 1). A driver that gives a cooperative launch
    no workspace faults every grid.sync; one whose blocks do not all run at once hangs it."""
    cu, sms = _cooperative_driver(device, require)
    threads = 32
    with device.compile(GRID_BARRIER, "ptx") as module:
        kernel = module.kernel("grid_barrier")
        with context_current(device):
            err, per_sm = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel.native, threads, 0)
        assert not err and per_sm > 0, f"cuOccupancyMaxActiveBlocksPerMultiprocessor: {err}, {per_sm}"
        blocks = min(per_sm * sms, 16)
        with poisoned(device, stream, 8 * blocks) as out:
            for _ in range(2):  # a second launch: a workspace left as the first left it still counts right
                stream.synchronize()
                with context_current(device):
                    err, = cu.cuLaunchCooperativeKernel(kernel.native, blocks, 1, 1, threads, 1, 1, 0, stream.native,
                                                        ((out.handle,), (ctypes.c_void_p,)))
                    err_sync, = cu.cuStreamSynchronize(stream.native)
                assert not err and not err_sync, f"a cooperative launch of {blocks} blocks: {err}, then {err_sync}"
                got = read(stream, out, np.uint32)
                want = [*range(1, blocks + 1), *[(b + 1) % blocks + 1 for b in range(blocks)]]
                assert got.tolist() == want, (f"{blocks} blocks past the grid barrier read the next block's word as "
                                              f"{got[blocks:].tolist()}, not {want[blocks:]}")


def _immediate_chain(name: str, immediates: list[int]) -> str:
    """PTX: each thread adds the immediates, one `add.u32` each, to its index and stores the sum at its word."""
    adds = "\n".join(f"    add.u32 %r1, %r1, {k};" for k in immediates)
    return f""".version 7.5
.target sm_75
.address_size 64

.visible .entry {name}(.param .u64 {name}_out)
{{
    .reg .b32 %r<2>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [{name}_out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd2, %rd2, %rd3;
{adds}
    st.global.u32 [%rd2], %r1;
    ret;
}}
"""


@pytest.mark.clause("KERNEL-122")
def test_a_kernels_register_count_does_not_grow_with_its_distinct_immediates(device, stream, require):
    """NUM_REGS counts the registers each thread uses, and an immediate is part of its instruction: two kernels
    that differ only in their immediates (100 `add.u32` of the same 5, and of 1, 2, ..., 100) run (each thread
    stores its index plus the sum) and report register counts within 16 of each other, and no local memory
    (LOCAL_SIZE_BYTES 0: they declare none, call nothing and hold a value or two). An implementation that
    counts a register for each distinct immediate reports about 100 more for the second, which an occupancy
    calculator (the multiprocessor's registers divided by NUM_REGS) takes for a kernel that fits a third as
    many blocks; one that gives every kernel a frame reports local memory a launch must reserve for nothing."""
    require("lang.ptx")
    cu = cuda_driver(device, "cuFuncGetAttribute")
    threads, count = 32, 100
    chains = {"same_immediate": [5] * count, "distinct_immediates": list(range(1, count + 1))}
    registers = {}
    for name, immediates in chains.items():
        with device.compile(_immediate_chain(name, immediates), "ptx") as module, \
                poisoned(device, stream, 4 * threads) as out:
            kernel = module.kernel(name)
            stream.launch(kernel, 1, threads, (out,))
            got = read(stream, out, np.uint32)
            want = np.arange(threads, dtype=np.uint32) + np.uint32(sum(immediates))
            assert (got == want).all(), f"{name}: {got.tolist()}, want {want.tolist()}"
            err, registers[name] = cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS,
                                                         kernel.native)
            assert not err, f"cuFuncGetAttribute(NUM_REGS) of {name}: {err}"
            err, local = cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
                                               kernel.native)
            assert not err and local == 0, \
                f"{name}, which declares no local memory and calls nothing, reports LOCAL_SIZE_BYTES {local} ({err})"
    assert abs(registers["distinct_immediates"] - registers["same_immediate"]) <= 16, (
        f"NUM_REGS {registers['same_immediate']} for 100 adds of the same immediate, "
        f"{registers['distinct_immediates']} for 100 adds of distinct ones")


#: lane 0 alone runs a warp shuffle (member mask 1) in a branch the other lanes skip; then every lane votes with
#: the full member mask and stores the ballot (plus the shuffle's result, 0, on lane 0)
PTX_LATE_LANE = """.version 7.5
.target sm_75
.address_size 64

.visible .entry late_lane(.param .u64 late_lane_out)
{
    .reg .pred %p<3>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [late_lane_out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd2, %rd2, %rd3;
    mov.u32 %r2, 0;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra VOTE;
    shfl.sync.idx.b32 %r2, %r1, 0, 31, 1;
VOTE:
    setp.lt.u32 %p2, %r1, 32;
    vote.sync.ballot.b32 %r3, %p2, 0xffffffff;
    add.u32 %r4, %r3, %r2;
    st.global.u32 [%rd2], %r4;
    ret;
}
"""


@pytest.mark.clause("KERNEL-123")
def test_a_full_warp_vote_waits_for_the_lane_that_ran_a_collective_alone(device, stream, require):
    """A `.sync` warp collective names the lanes that take part (its member mask), and each named lane takes
    part, wherever it comes from: lane 0 alone runs a shuffle (member mask 1) in a branch the other 31 lanes
    skip, then all 32 vote (`vote.sync.ballot` with the full mask, each voting true), and every lane's ballot is
    0xFFFFFFFF. An implementation that runs the vote of the lanes that got there first, without the lane still
    in its branch, gives them 0xFFFFFFFE."""
    require("lang.ptx")
    cuda_driver(device, "PTX warp collectives")
    with device.compile(PTX_LATE_LANE, "ptx") as module, poisoned(device, stream, 4 * 32) as out:
        stream.launch(module.kernel("late_lane"), 1, 32, (out,))
        got = read(stream, out, np.uint32)
    wrong = {lane: f"{int(v):#x}" for lane, v in enumerate(got) if v != 0xFFFFFFFF}
    assert not wrong, f"ballots of the full warp other than 0xffffffff (lane: ballot): {wrong}"



#: a kernel that stores each thread's index in a module-scope .shared array, calls the module's first function (which
#: does nothing) and then its last (which stores index + 100 in another module-scope .shared array, named nowhere
#: else, and returns what it reads back), and stores the sum of its own word read back and the returned value
PTX_SHARED_THROUGH_CALLS = """.version 7.5
.target sm_75
.address_size 64

.shared .align 4 .b32 kernel_words[32];
.shared .align 4 .b32 callee_words[32];

.func first_fn()
{
    ret;
}

.func (.param .b32 back) store_in_callee_words(.param .b32 tid);

.visible .entry calls_two(.param .u64 calls_two_out)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [calls_two_out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    mov.u64 %rd4, kernel_words;
    add.s64 %rd5, %rd4, %rd3;
    st.shared.u32 [%rd5], %r1;
    call.uni first_fn, ();
    {
    .param .b32 p0;
    .param .b32 r0;
    st.param.b32 [p0], %r1;
    call.uni (r0), store_in_callee_words, (p0);
    ld.param.b32 %r3, [r0];
    }
    bar.sync 0;
    ld.shared.u32 %r2, [%rd5];
    add.u32 %r4, %r2, %r3;
    add.s64 %rd2, %rd2, %rd3;
    st.global.u32 [%rd2], %r4;
    ret;
}

.func (.param .b32 back) store_in_callee_words(.param .b32 tid)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.b32 %r1, [tid];
    add.u32 %r2, %r1, 100;
    mul.wide.u32 %rd1, %r1, 4;
    mov.u64 %rd2, callee_words;
    add.s64 %rd3, %rd2, %rd1;
    st.shared.u32 [%rd3], %r2;
    ld.shared.u32 %r3, [%rd3];
    st.param.b32 [back], %r3;
    ret;
}
"""


@pytest.mark.clause("KERNEL-124")
def test_a_shared_array_only_a_called_function_names_is_apart_from_the_kernels_own(device, stream, require):
    """Module-scope `.shared` variables are distinct memory of each block, whichever function names them: a kernel
    stores each thread's index in one, calls the module's first function and then its last, which stores index
    + 100 in another (named by no other function) and returns it read back; the kernel reads its own word back
    and stores the sum, 2 * index + 100. An implementation that lays out a block's shared memory from the
    functions each kernel calls, and loses a call (the module's first and last functions taken for one), places
    the callee's array on the kernel's, and the kernel reads back the callee's value."""
    require("lang.ptx")
    cuda_driver(device, "PTX with module-scope .shared variables")
    threads = 32
    with device.compile(PTX_SHARED_THROUGH_CALLS, "ptx") as module, poisoned(device, stream, 4 * threads) as out:
        stream.launch(module.kernel("calls_two"), 1, threads, (out,))
        got = read(stream, out, np.uint32)
    want = 2 * np.arange(threads, dtype=np.uint32) + np.uint32(100)
    wrong = np.flatnonzero(got != want)
    assert not wrong.size, (f"{wrong.size} threads wrong, the first {int(wrong[0])}: {int(got[wrong[0]])}, want "
                            f"{int(want[wrong[0]])} (its own word {int(wrong[0])} plus the callee's)")


#: hex_floats(out): a hexadecimal float32 immediate moved to out's first word (line 12) and a float64 one to its
#: second 8 bytes (line 14); a case fills in {f32} and {f64}
PTX_HEX_FLOATS = """.version 7.5
.target sm_75
.address_size 64

.visible .entry hex_floats(.param .u64 hex_floats_param_0)
{{
    .reg .f32 %f<2>;
    .reg .f64 %fd<2>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [hex_floats_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.f32 %f1, {f32};
    st.global.f32 [%rd2], %f1;
    mov.f64 %fd1, {f64};
    st.global.f64 [%rd2+8], %fd1;
    ret;
}}
"""


@pytest.mark.clause("KERNEL-140")
def test_ptx_hexadecimal_float_immediates_take_a_minus_as_ptxas_does(device, kernels, stream, require):
    """A negative float in PTX is written as its own bits (`0fBF800000` for -1, as NVRTC writes it). ptxas refuses
    a unary minus before a 32-bit hexadecimal float (`-0f3F800000`: "Parsing error near '0f3F800000'", CUDA 13.0)
    and takes one before a 64-bit float as a flip of its sign bit (`-0d3FF8000000000000` is -1.5, `-0d0` is -0.0:
    the H100, driver 580.159.04). A reader that takes the f32 minus runs a kernel ptxas would not load; one that
    refuses the f64 minus refuses PTX a GPU loads; one that negates the bits as an integer stores another number."""
    require("lang.ptx")
    with pytest.raises(ia.CompileError) as info:
        device.compile(PTX_HEX_FLOATS.format(f32="-0f3F800000", f64="0dBFF8000000000000"), "ptx")
    lines = [int(n) for n in re.findall(r"\bline (-?\d+)", info.value.log)]
    assert lines and set(lines) == {12}, (
        f"mov of -0f3F800000: the log names lines {lines}, not line 12 alone: {info.value.log!r}")
    for f32, f64, bits in (("0fBF800000", "0dBFF8000000000000", 0xBFF8000000000000),
                           ("0fBF800000", "-0d3FF8000000000000", 0xBFF8000000000000),
                           ("0fBF800000", "-0d0000000000000000", 0x8000000000000000)):
        with device.compile(PTX_HEX_FLOATS.format(f32=f32, f64=f64), "ptx") as module, \
                poisoned(device, stream, 16) as out:
            stream.launch(module.kernel("hex_floats"), 1, 1, (out,))
            got32 = read(stream, out, np.uint32, count=1).tolist()
            got64 = read(stream, out, np.uint64)[1:].tolist()
        assert (got32, got64) == ([0xBF800000], [bits]), (
            f"mov of {f32} and {f64}: float32 bits {[hex(v) for v in got32]}, float64 bits {[hex(v) for v in got64]}, "
            f"not 0xbf800000 and {bits:#x}")
    assert_device_works(device, kernels)


#: the 64-bit comparisons of KERNEL-141, each setting bit i of a thread's word when it holds
COMPARE64 = [("eq", "s64"), ("ne", "s64"), ("lt", "s64"), ("le", "s64"), ("gt", "s64"), ("ge", "s64"),
             ("lt", "u64"), ("le", "u64"), ("gt", "u64"), ("ge", "u64")]
#: compare64(a, b, out): thread t compares a[t] with b[t] (64-bit words) by each of COMPARE64 (`setp`, then
#: `selp` of the comparison's bit) and stores the sum of the bits that hold as out[t] (32-bit)
PTX_COMPARE64 = """.version 7.5
.target sm_75
.address_size 64

.visible .entry compare64(.param .u64 compare64_a, .param .u64 compare64_b, .param .u64 compare64_out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [compare64_a];
    ld.param.u64 %rd2, [compare64_b];
    ld.param.u64 %rd3, [compare64_out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd4, %r1, 8;
    add.s64 %rd5, %rd1, %rd4;
    ld.global.u64 %rd6, [%rd5];
    add.s64 %rd5, %rd2, %rd4;
    ld.global.u64 %rd7, [%rd5];
    mov.u32 %r2, 0;
""" + "".join(f"""    setp.{op}.{ty} %p1, %rd6, %rd7;
    selp.u32 %r3, {1 << i}, 0, %p1;
    add.u32 %r2, %r2, %r3;
""" for i, (op, ty) in enumerate(COMPARE64)) + """    mul.wide.u32 %rd8, %r1, 4;
    add.s64 %rd9, %rd3, %rd8;
    st.global.u32 [%rd9], %r2;
    ret;
}
"""


@pytest.mark.clause("KERNEL-141")
def test_ptx_64_bit_comparisons_match_their_definitions(device, stream, require):
    """setp of 64-bit integers, signed (eq, ne, lt, le, gt, ge) and unsigned (lt, le, gt, ge), for 64 pairs:
    equal ones, ones that differ only in the sign, only in the high word or only in the low word (the two words
    ordered opposite ways), and random ones: what CUDA C++'s comparisons of long long and size_t (loop bounds
    over 64-bit sizes, pointer comparisons) compile to. A driver that mixes up a comparison's operands or its
    kind gets some pairs right by chance; the conformance kernels compare 32-bit values or against 0."""
    require("lang.ptx")
    top, word = 2 ** 63, 2 ** 32
    pairs = [(0, 0), (5, 5), (-5, -5), (-1, 0), (0, -1), (top - 1, -top), (-top, top - 1), (word, 1), (1, word),
             (-word, -1), (-1, -word), (word + 1, 2 * word), (3 * word + 7, 3 * word + 6), (-top, -top)]
    r = rng(141)
    random = r.integers(-top, top, (64 - len(pairs), 2), dtype=np.int64).tolist()
    a, b = (np.array(side, np.int64) for side in zip(*pairs, *random))

    def holds(x: int, y: int, op: str, ty: str) -> bool:
        if ty == "u64":
            x, y = x % 2 ** 64, y % 2 ** 64
        return {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[op]

    want = [sum(holds(x, y, op, ty) << i for i, (op, ty) in enumerate(COMPARE64))
            for x, y in zip(a.tolist(), b.tolist())]
    with device.compile(PTX_COMPARE64, "ptx") as module, upload(device, stream, a) as ba, \
            upload(device, stream, b) as bb, poisoned(device, stream, 4 * len(want)) as out:
        stream.launch(module.kernel("compare64"), 1, len(want), (ba, bb, out))
        got = read(stream, out, np.uint32).tolist()
    wrong = [(int(a[t]), int(b[t]), [f"{op}.{ty}" for i, (op, ty) in enumerate(COMPARE64)
                                     if (got[t] ^ want[t]) >> i & 1]) for t in range(len(want)) if got[t] != want[t]]
    assert not wrong, f"(a, b, the comparisons that came out wrong) of the first wrong threads: {wrong[:5]}"


@pytest.mark.clause("KERNEL-142")
def test_occupancy_counts_the_shared_memory_of_a_block(device, require):
    """cuOccupancyMaxActiveBlocksPerMultiprocessor of a kernel (KERNEL-83's fill7, 32 threads a block, through
    `Kernel.native`) given the most dynamic shared memory a block may have without opting in
    (MAX_SHARED_MEMORY_PER_BLOCK) answers at least one block, and no more blocks than the multiprocessor's shared
    memory (MAX_SHARED_MEMORY_PER_MULTIPROCESSOR) holds at that size. Launch tuners and cooperative launches
    size grids by the answer; a driver that counts shared memory wrongly (multiplies by a block's bytes
    instead of dividing) answers the thread limit and promises blocks that cannot all be resident."""
    require("lang.ptx")
    cu = cuda_driver(device, "cuOccupancyMaxActiveBlocksPerMultiprocessor")
    attribute = cu.CUdevice_attribute
    err_block, per_block = cu.cuDeviceGetAttribute(attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
                                                   device.native.device)
    err_sm, per_sm = cu.cuDeviceGetAttribute(attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                                             device.native.device)
    assert not err_block and not err_sm and 0 < per_block <= per_sm, (
        f"MAX_SHARED_MEMORY_PER_BLOCK {err_block}, {per_block}; _PER_MULTIPROCESSOR {err_sm}, {per_sm}")
    with device.compile(PTX_SM75, "ptx") as module:
        kernel = module.kernel("fill7")
        with context_current(device):
            err, blocks = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel.native, 32, per_block)
    assert not err, f"cuOccupancyMaxActiveBlocksPerMultiprocessor with {per_block} bytes of shared memory: {err}"
    assert 1 <= blocks <= per_sm // per_block, (
        f"{blocks} blocks of {per_block} bytes of shared memory each on a multiprocessor of {per_sm} bytes")


#: a module whose dynamic (.extern) shared array comes first, used by two kernels of 64 threads: each thread
#: stores its index + 1 to dyn's word t and, after a barrier, writes word t ^ 63 to out[t]; dynamic_and_static
#: also stores 1000 + t to word 960 + t of its 4 KiB static array (the end nearest the dynamic memory) and
#: writes word 960 + (t ^ 63) to out[64 + t]
PTX_DYNAMIC_BESIDE_STATIC = """.version 7.5
.target sm_75
.address_size 64

.extern .shared .align 16 .b8 dyn[];

.visible .entry dynamic_only(.param .u64 dynamic_only_param_0)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [dynamic_only_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, dyn;
    shl.b32 %r3, %r1, 2;
    add.s32 %r4, %r2, %r3;
    add.s32 %r5, %r1, 1;
    st.shared.u32 [%r4], %r5;
    bar.sync 0;
    xor.b32 %r6, %r1, 63;
    shl.b32 %r6, %r6, 2;
    add.s32 %r6, %r2, %r6;
    ld.shared.u32 %r7, [%r6];
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r7;
    ret;
}

.visible .entry dynamic_and_static(.param .u64 dynamic_and_static_param_0)
{
    .shared .align 16 .b8 big[4096];
    .reg .b32 %r<12>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [dynamic_and_static_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, dyn;
    mov.u32 %r8, big;
    shl.b32 %r3, %r1, 2;
    add.s32 %r4, %r2, %r3;
    add.s32 %r5, %r1, 1;
    st.shared.u32 [%r4], %r5;
    add.s32 %r9, %r8, %r3;
    add.s32 %r10, %r1, 1000;
    st.shared.u32 [%r9+3840], %r10;
    bar.sync 0;
    xor.b32 %r6, %r1, 63;
    shl.b32 %r6, %r6, 2;
    add.s32 %r11, %r8, %r6;
    add.s32 %r6, %r2, %r6;
    ld.shared.u32 %r7, [%r6];
    ld.shared.u32 %r10, [%r11+3840];
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r7;
    st.global.u32 [%rd4+256], %r10;
    ret;
}
"""


@pytest.mark.clause("KERNEL-145")
def test_every_kernel_has_all_its_dynamic_shared_memory_beside_another_kernels_static(device, stream, require):
    """A kernel's dynamic shared memory (the `.extern .shared` array) is as many bytes as its launch asks for,
    after that kernel's own static variables: here 256 bytes for 64 threads, in a module where another kernel
    naming the same array has 4 KiB of static shared memory. A PTX reader that places the dynamic array after
    the largest static memory of any kernel naming it must give each such kernel that much static memory;
    one that misses the first variable of the module does not, and the smaller kernel's stores to its
    dynamic memory land past the end of its block's shared memory (the launch faults)."""
    require("lang.ptx")
    cu = cuda_driver(device, "cuLaunchKernel with dynamic shared memory")
    flipped = [(t ^ 63) for t in range(64)]
    with device.compile(PTX_DYNAMIC_BESIDE_STATIC, "ptx") as module:
        for name, want in (("dynamic_only", [t + 1 for t in flipped]),
                           ("dynamic_and_static", [t + 1 for t in flipped] + [1000 + t for t in flipped])):
            with poisoned(device, stream, 512) as out:
                with context_current(device):
                    err, = cu.cuLaunchKernel(module.kernel(name).native, 1, 1, 1, 64, 1, 1, 256, stream.native,
                                             ((out.handle,), (ctypes.c_void_p,)), 0)
                assert not err, f"cuLaunchKernel of {name} with 256 bytes of dynamic shared memory: {err}"
                got = read(stream, out, np.uint32).tolist()[:len(want)]
            assert got == want, f"{name}: [dynamic word t ^ 63] (+ [static word 960 + (t ^ 63)]): {got}"


#: last_byte(edge, out) loads the byte one past a 7-byte buffer's end (edge + 7) with ld.global.u8,
#: last_word and last_word_signed the aligned word at edge + 4 (bytes 4 to 7) with ld.global.u32 and .s32;
#: each stores what it loaded to out[0]
PTX_EDGE_LOADS = """.version 7.5
.target sm_75
.address_size 64
""" + "".join(f"""
.visible .entry {name}(.param .u64 {name}_param_0, .param .u64 {name}_param_1)
{{
    .reg .b32 %r<2>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [{name}_param_0];
    ld.param.u64 %rd2, [{name}_param_1];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    ld.global.{ty} %r1, [%rd3+{offset}];
    st.global.u32 [%rd4], %r1;
    ret;
}}
""" for name, ty, offset in (("last_byte", "u8", 7), ("last_word", "u32", 4), ("last_word_signed", "s32", 4)))

#: the child of KERNEL-146: opens the target's device, copies bytes 1..7 into a 7-byte buffer, runs kernel
#: argv[3] of the PTX argv[2] on it (one thread) and prints how the wait ended (None: it raised nothing) and
#: the word the kernel stored
EDGE_LOAD_CHILD = """
import json, sys
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
stream = device.create_stream()
edge, out = device.alloc(7), device.alloc(4)
stream.copy_htod(edge, np.arange(1, 8, dtype=np.uint8))
stream.fill(out, 0)
stream.launch(device.compile(sys.argv[2], "ptx").kernel(sys.argv[3]), 1, 1, (edge, out))
try:
    stream.synchronize()
    word = np.zeros(1, np.uint32)
    stream.copy_dtoh(word, out)
    print(json.dumps({"fault": None, "word": int(word[0])}))
except Exception as exc:
    print(json.dumps({"fault": {"type": type(exc).__name__, "message": str(exc)}, "word": None}))
"""


@pytest.mark.clause("KERNEL-146")
def test_a_load_faults_by_every_byte_it_touches(device, target, require):
    """Whether a load faults depends on every byte it touches: the word at bytes 4 to 7 of a 7-byte buffer
    (`ld.global.u32`, `.s32`) includes the byte one past the end, so it faults exactly when a byte load of that
    byte does. Hardware maps memory in pages, so none of them is expected to fault there (not yet run on one); a memory check
    that reports the byte load (the fake libcuda's, compute-sanitizer) must report the word loads too, or a
    kernel that reads one element past a buffer in words goes unseen. A completed word load has the buffer's
    bytes 4 to 6 in its low three bytes. The context may be lost, so each load runs in its own child process."""
    require("lang.ptx")
    cuda_driver(device, "its fault codes")
    got = {name: child_json(target, EDGE_LOAD_CHILD, PTX_EDGE_LOADS, name)
           for name in ("last_byte", "last_word", "last_word_signed")}
    faulted = {name: outcome["fault"] is not None for name, outcome in got.items()}
    assert len(set(faulted.values())) == 1, f"some loads of byte 7 of a 7-byte buffer faulted, some not: {faulted}"
    for name, outcome in got.items():
        if outcome["fault"] is not None:
            assert outcome["fault"]["type"] == "DriverError", outcome
            assert "CUDA_ERROR_ILLEGAL_ADDRESS" in outcome["fault"]["message"], outcome
        elif name != "last_byte":
            assert outcome["word"] & 0xFFFFFF == 0x070605, f"{name} loaded {outcome['word']:#x}: bytes 4..6 are 5, 6, 7"


@pytest.mark.clause("KERNEL-147")
@pytest.mark.parametrize("block", [32, 64])
def test_occupancy_without_shared_memory_is_the_multiprocessors_block_limit(device, require, block):
    """cuOccupancyMaxActiveBlocksPerMultiprocessor of a kernel without shared memory (KERNEL-83's fill7, a few
    registers) for small blocks answers what the multiprocessor's limits allow: MAX_BLOCKS_PER_MULTIPROCESSOR
    blocks, or fewer where MAX_THREADS_PER_MULTIPROCESSOR holds fewer such blocks. Launch tuners size grids by the
    answer; a driver that counts a kernel with no shared memory as one limited by it, by a block less than the
    hardware's limit, leaves a multiprocessor's last block slot idle in every grid sized so."""
    require("lang.ptx")
    cu = cuda_driver(device, "cuOccupancyMaxActiveBlocksPerMultiprocessor")
    attribute = cu.CUdevice_attribute
    err_blocks, max_blocks = cu.cuDeviceGetAttribute(attribute.CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
                                                     device.native.device)
    err_threads, max_threads = cu.cuDeviceGetAttribute(
        attribute.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, device.native.device)
    assert not err_blocks and not err_threads and max_blocks > 0 and max_threads >= block, (
        f"MAX_BLOCKS_PER_MULTIPROCESSOR {err_blocks}, {max_blocks}; MAX_THREADS_PER_MULTIPROCESSOR {err_threads}, "
        f"{max_threads}")
    with device.compile(PTX_SM75, "ptx") as module:
        kernel = module.kernel("fill7")
        with context_current(device):
            err, blocks = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel.native, block, 0)
    assert not err, f"cuOccupancyMaxActiveBlocksPerMultiprocessor of blocks of {block} threads: {err}"
    assert blocks == min(max_blocks, max_threads // block), (
        f"{blocks} blocks of {block} threads without shared memory; the multiprocessor runs {max_blocks} blocks and "
        f"{max_threads} threads")


#: spin_while_set(flag): thread (1,0,0) of block (1,1,0) (KERNEL-148 launches 2 x 2 x 2 blocks of 2 threads) loads
#: the word at flag until it reads 0 (a volatile load each time, so no compiler folds the loop), the others return;
#: with a flag that stays set it runs until something ends the launch
PTX_SPIN = """.version 7.5
.target sm_75
.address_size 64

.visible .entry spin_while_set(.param .u64 spin_while_set_param_0)
{
    .reg .pred %p<3>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    mov.u32 %r2, %ctaid.z;
    mov.u32 %r3, %ctaid.y;
    mad.lo.u32 %r2, %r2, 2, %r3;
    mov.u32 %r3, %ctaid.x;
    mad.lo.u32 %r2, %r2, 2, %r3;
    mov.u32 %r3, %tid.x;
    mad.lo.u32 %r2, %r3, 8, %r2;
    setp.ne.u32 %p2, %r2, 11;
    @%p2 bra $L_done;
    ld.param.u64 %rd1, [spin_while_set_param_0];
    cvta.to.global.u64 %rd2, %rd1;
$L_spin:
    ld.volatile.global.u32 %r1, [%rd2];
    setp.ne.s32 %p1, %r1, 0;
    @%p1 bra $L_spin;
$L_done:
    ret;
}
"""

#: the child of KERNEL-148: prints the device's KERNEL_EXEC_TIMEOUT and, given "run", whether a short kernel's
#: result read back right, how spin_while_set (of the PTX argv[2]) over a set flag ended (None: it raised
#: nothing) and how long after its launch
KERNEL_TIME_LIMIT_CHILD = """
import json, sys, time
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
target = get(sys.argv[1])
device = _open(target)
cu = device.native.driver
err, limited = cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT,
                                       device.native.device)
assert not err, f"cuDeviceGetAttribute(KERNEL_EXEC_TIMEOUT): {err}"
report = {"limited": limited}
if sys.argv[3:] == ["run"]:
    stream = device.create_stream()
    buf, flag = device.alloc(1 << 16), device.alloc(4)
    stream.launch(target.compile_kernel(device, "fill_u32"), 128, 128, (buf, np.uint32(7), np.uint32(1 << 14)))
    words = np.zeros(1 << 14, np.uint32)
    stream.copy_dtoh(words, buf)
    stream.fill(flag, 1)
    stream.synchronize()
    report["short"] = bool((words == 7).all())
    spin = device.compile(sys.argv[2], "ptx").kernel("spin_while_set")
    start = time.monotonic()
    stream.launch(spin, (2, 2, 2), (2, 1, 1), (flag,))
    try:
        stream.synchronize()
        report["spin"] = None
    except Exception as exc:
        report["spin"] = {"type": type(exc).__name__, "message": str(exc)}
    report["seconds"] = time.monotonic() - start
print(json.dumps(report))
"""


@pytest.mark.clause("KERNEL-148")
def test_a_kernel_past_the_drivers_time_limit_ends_with_launch_timeout(device, target, require):
    """A driver that limits a kernel's run time (a display GPU's watchdog; the fake libcuda's, set by
    `Target.kernel_time_limit`) says so by KERNEL_EXEC_TIMEOUT, lets a short kernel finish, and ends one that runs
    past the limit with CUDA_ERROR_LAUNCH_TIMEOUT no sooner than the limit: a limit measured from the wrong time
    ends every kernel (or none), and one the attribute hides lets tuners plan work that runs into it. Where the
    error's text locates the thread it stopped (`block (x,y,z), thread (x,y,z)`, as KERNEL-102's fault report), it
    is the one thread of the grid that spins, coordinates in order. In child processes (the timeout loses the
    context), one with the limit set to 1 s and one without it."""
    require("lang.ptx")
    cuda_driver(device, "KERNEL_EXEC_TIMEOUT and CUDA_ERROR_LAUNCH_TIMEOUT")
    if not target.kernel_time_limit:
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a settable limit on a kernel's run time (Target.kernel_time_limit)")
    unset = {k: v for k, v in os.environ.items() if k != target.kernel_time_limit}
    got = {}
    for case, limit in (("without", {}), ("with", {target.kernel_time_limit: "1"})):
        args = [sys.executable, "-c", KERNEL_TIME_LIMIT_CHILD, target.name, PTX_SPIN] + (["run"] if limit else [])
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=30,
                                  env={**unset, **target.environment(), **limit})
        except subprocess.TimeoutExpired:
            pytest.fail(f"a kernel that spins forever still ran 30 s after its launch {case} a 1 s limit")
        assert proc.returncode == 0, f"the child {case} the limit exited with status {proc.returncode}: {proc.stderr[-1500:]}"
        got[case] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["without"]["limited"] == 0, f"KERNEL_EXEC_TIMEOUT is {got['without']['limited']} with no limit set"
    run = got["with"]
    assert run["limited"] == 1, f"KERNEL_EXEC_TIMEOUT is {run['limited']} with a 1 s limit set"
    assert run["short"], "a short kernel (fill_u32 over 64 KiB) did not write its result under a 1 s limit"
    assert run["spin"] is not None and run["spin"]["type"] == "DriverError" and (
        "CUDA_ERROR_LAUNCH_TIMEOUT" in run["spin"]["message"]), (
        f"a kernel spinning past a 1 s limit ended with {run['spin']}, not DriverError naming CUDA_ERROR_LAUNCH_TIMEOUT")
    assert run["seconds"] >= 1.0, f"a kernel under a 1 s limit was ended {run['seconds']:.3f} s after its launch"
    located = re.findall(r"block \(\d+,\d+,\d+\), thread \(\d+,\d+,\d+\)", run["spin"]["message"])
    assert all(place == "block (1,1,0), thread (1,0,0)" for place in located), (
        f"the one thread that spun, thread (1,0,0) of block (1,1,0), is located as {located}: {run['spin']['message']}")


#: lane_masks(out): each thread stores its %laneid and its five lane masks (eq, lt, le, gt, ge) as six u32 words
#: at out + 24 * %tid.x
PTX_LANE_MASKS = """.version 7.5
.target sm_75
.address_size 64

.visible .entry lane_masks(.param .u64 lane_masks_param_0)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [lane_masks_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 24;
    add.s64 %rd4, %rd2, %rd3;
    mov.u32 %r2, %laneid;
    mov.u32 %r3, %lanemask_eq;
    mov.u32 %r4, %lanemask_lt;
    mov.u32 %r5, %lanemask_le;
    mov.u32 %r6, %lanemask_gt;
    mov.u32 %r7, %lanemask_ge;
    st.global.u32 [%rd4], %r2;
    st.global.u32 [%rd4+4], %r3;
    st.global.u32 [%rd4+8], %r4;
    st.global.u32 [%rd4+12], %r5;
    st.global.u32 [%rd4+16], %r6;
    st.global.u32 [%rd4+20], %r7;
    ret;
}
"""


@pytest.mark.clause("KERNEL-153")
def test_each_lane_sees_its_own_lane_masks(device, stream, require):
    """%laneid and the lane masks, as the PTX ISA defines them for a thread of lane L: eq 1 << L, lt the lanes
    below L, le those and L, gt the lanes above L, ge L and those. Warp-level code counts the lanes of a ballot
    below a thread with them (stream compaction, a warp's prefix sum); one wrong mask puts a thread's element in
    another thread's slot."""
    require("lang.ptx")
    threads = 64  # two warps: the lane is the thread's index modulo the warp
    with device.compile(PTX_LANE_MASKS, "ptx") as module, device.alloc(24 * threads) as out:
        stream.fill(out, 0xEE)
        stream.launch(module.kernel("lane_masks"), 1, threads, (out,))
        got = read(stream, out, np.uint32).reshape(threads, 6)
    full = 0xFFFFFFFF
    for t in range(threads):
        lane = t % 32
        below = (1 << lane) - 1
        want = [lane, 1 << lane, below, below | 1 << lane, full & ~(below | 1 << lane), full & ~below]
        assert got[t].tolist() == want, (
            f"thread {t} (lane {lane}): [laneid, eq, lt, le, gt, ge] = {[hex(v) for v in got[t]]}, "
            f"want {[hex(v) for v in want]}")


#: dyn_bytes(out, n), blocks of 128 threads: the threads store byte i of the dynamic shared array as
#: (7 i + 3) & 255 for every i < n, meet at a barrier, and copy byte n - 1 - i of it to out[i]
PTX_DYNAMIC_BYTES = """.version 7.5
.target sm_75
.address_size 64

.extern .shared .align 16 .b8 dyn_bytes_shared[];

.visible .entry dyn_bytes(.param .u64 dyn_bytes_param_0, .param .u32 dyn_bytes_param_1)
{
    .reg .pred %p<3>;
    .reg .b32 %r<9>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [dyn_bytes_param_0];
    ld.param.u32 %r1, [dyn_bytes_param_1];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, dyn_bytes_shared;
    mov.u32 %r4, %r2;
$L_store:
    setp.ge.u32 %p1, %r4, %r1;
    @%p1 bra $L_stored;
    mad.lo.u32 %r5, %r4, 7, 3;
    add.s32 %r6, %r3, %r4;
    st.shared.u8 [%r6], %r5;
    add.s32 %r4, %r4, 128;
    bra $L_store;
$L_stored:
    bar.sync 0;
    mov.u32 %r4, %r2;
$L_load:
    setp.ge.u32 %p2, %r4, %r1;
    @%p2 bra $L_done;
    sub.s32 %r7, %r1, 1;
    sub.s32 %r7, %r7, %r4;
    add.s32 %r6, %r3, %r7;
    ld.shared.u8 %r8, [%r6];
    cvt.u64.u32 %rd3, %r4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u8 [%rd4], %r8;
    add.s32 %r4, %r4, 128;
    bra $L_load;
$L_done:
    ret;
}
"""

#: the child of KERNEL-159: launches dyn_bytes (of the PTX argv[2]) with each byte count of argv[3:] of dynamic
#: shared memory, in that order, and prints for each what out read back, or the error that ended the launch
DYNAMIC_BYTES_CHILD = """
import ctypes, json, sys
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
from ironaccel.cts.testing.work import read
device = _open(get(sys.argv[1]))
cu = device.native.driver
stream = device.create_stream()
kernel = device.compile(sys.argv[2], "ptx").kernel("dyn_bytes")
got = {}
for n in map(int, sys.argv[3:]):
    out = device.alloc(n)
    stream.fill(out, 0)
    assert not cu.cuCtxPushCurrent(device.native.context)[0]
    err, = cu.cuLaunchKernel(kernel.native, 1, 1, 1, 128, 1, 1, n, stream.native,
                             ((out.handle, n), (ctypes.c_void_p, ctypes.c_uint32)), 0)
    cu.cuCtxPopCurrent()
    try:
        assert not err, f"cuLaunchKernel: {err}"
        got[n] = read(stream, out).tolist()
    except Exception as exc:
        got[n] = f"{type(exc).__name__}: {exc}"
        break
print(json.dumps(got))
"""


@pytest.mark.clause("KERNEL-159")
def test_a_kernel_has_every_byte_of_dynamic_shared_memory_its_launch_asks_for(device, target, require):
    """A launch's dynamic shared memory is exactly as many bytes as it asks for, however few: 1, 129 and 4097
    bytes (a byte past a multiple of 128, the granularity a driver may round a block's shared memory up to),
    each byte stored and read back by another thread. A driver that rounds the request down where it means up
    gives the block a unit less than it asked for, and the stores to the last bytes fault (or land in another
    block's memory). In a child process, since a fault loses the context."""
    require("lang.ptx")
    cuda_driver(device, "cuLaunchKernel with dynamic shared memory")
    sizes = (1, 129, 4097)
    got = child_json(target, DYNAMIC_BYTES_CHILD, PTX_DYNAMIC_BYTES, *map(str, sizes))
    for n in sizes:
        want = [(7 * (n - 1 - i) + 3) & 255 for i in range(n)]
        assert got.get(str(n)) == want, (
            f"{n} bytes of dynamic shared memory: byte n - 1 - i of what the threads stored should reach out[i]; "
            f"got {str(got.get(str(n)))[:300]}")


PLUS7_CU = b"""extern "C" __global__ void plus7(unsigned *a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += 7u;
}
"""


@pytest.mark.clause("KERNEL-170")
def test_a_cubin_nvrtc_builds_for_the_device_loads_and_runs(device, stream):
    """NVRTC compiles CUDA C to a CUDA binary for the device's architecture (nvrtcGetCUBIN, -arch=sm_XY), an ELF
    image, which cuModuleLoadData loads as it is and whose kernel runs: how clients that compile ahead (cached
    cubins, JIT libraries) load their code. A driver that takes an ELF image for PTX text refuses it."""
    cu = cuda_driver(device, "cuModuleLoadData")
    from cuda.bindings import nvrtc

    major, minor = device.info.extra["compute_capability"]
    err, prog = nvrtc.nvrtcCreateProgram(PLUS7_CU, b"plus7.cu", 0, [], [])
    assert not err, f"nvrtcCreateProgram: {err}"
    try:
        err, = nvrtc.nvrtcCompileProgram(prog, 1, [f"-arch=sm_{major}{minor}".encode()])
        assert not err, f"nvrtcCompileProgram -arch=sm_{major}{minor}: {err}"
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        assert not err and size, f"nvrtcGetCUBINSize: {err}, {size}"
        cubin = b" " * size
        assert not nvrtc.nvrtcGetCUBIN(prog, cubin)[0], "nvrtcGetCUBIN"
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    assert cubin[:4] == b"\x7fELF", f"NVRTC's CUBIN is no ELF image: {cubin[:16]!r}"
    n = 300
    with poisoned(device, stream, 4 * n) as buf:
        stream.fill(buf, 0)
        stream.synchronize()
        with context_current(device):
            err, module = cu.cuModuleLoadData(cubin)
            assert not err, f"cuModuleLoadData of NVRTC's sm_{major}{minor} cubin: {err}"
            try:
                err, function = cu.cuModuleGetFunction(module, b"plus7")
                assert not err, f"cuModuleGetFunction: {err}"
                err, = cu.cuLaunchKernel(function, ceil_div(n, 128), 1, 1, 128, 1, 1, 0, stream.native,
                                         ((buf.handle, n), (ctypes.c_void_p, ctypes.c_uint)), 0)
                assert not err, f"cuLaunchKernel: {err}"
            finally:
                cu.cuCtxSynchronize()  # the kernel has run before its module goes
                cu.cuModuleUnload(module)
        got = read(stream, buf, np.uint32)
    assert got.tolist() == [7] * n, f"the cubin's kernel left {got[:8].tolist()}..."



def _ptx_storing_scalars(count: int) -> str:
    """PTX of ``store_scalars(out, s0, ..., s<count-1>)``, its parameters named as NVRTC names them: thread 0 stores
    each u32 scalar s_i at out[i]."""
    params = ",\n    ".join(f".param .u{64 if i == 0 else 32} store_scalars_param_{i}" for i in range(count + 1))
    stores = "\n".join(f"    ld.param.u32 %r1, [store_scalars_param_{i + 1}];\n    st.global.u32 [%rd2+{4 * i}], %r1;"
                       for i in range(count))
    return f""".version 7.0
.target sm_70
.address_size 64

.visible .entry store_scalars(
    {params})
{{
    .reg .b32 %r<2>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [store_scalars_param_0];
    cvta.to.global.u64 %rd2, %rd1;
{stores}
    ret;
}}
"""


@pytest.mark.clause("KERNEL-160")
def test_a_kernel_of_hundreds_of_parameters_gets_every_one(device, stream, require):
    """A launch path that packs the arguments into a table of its own has a fixed size (the compiled CUDA path:
    512 arguments, 4 KiB of 8-byte slots); a launch of more arguments than it holds must go another way, never
    write past it. The counts on both sides of 512, and the most that 4 KiB of parameters hold."""
    require("lang.ptx")
    for count in (511, 512, 999):  # scalars after the buffer: 512, 513 and 1,000 arguments (4,004 bytes)
        k = device.compile(_ptx_storing_scalars(count), "ptx").kernel("store_scalars")
        assert len(k.params) == count + 1, f"{count} scalars and a buffer: Kernel.params has {len(k.params)}"
        plan = k.prepare(1, 1)
        with poisoned(device, stream, 4 * count) as out:
            for turn in range(6):  # three by Stream.launch, three by the plan: a compiled path has remembered them
                values = np.arange(count, dtype=np.uint32) * 7 + 1000 * turn + 1
                args = [out, *map(np.uint32, values)]
                if turn < 3:
                    stream.launch(k, 1, 1, args)
                else:
                    plan(stream, *args)
                got = read(stream, out, np.uint32)
                wrong = np.flatnonzero(got != values)
                assert not wrong.size, (f"{count + 1} arguments, launch {turn + 1}: {wrong.size} scalars wrong, the "
                                        f"first s{wrong[0]} = {got[wrong[0]]:#x}, want {values[wrong[0]]:#x}")


#: a kernel name as long as generated ones are (fused-kernel and template names run past 100 characters)
LONG_KERNEL_NAME = ("fused_layernorm_gelu_dropout_residual_add_bf16_rows_4096_cols_1024_tile_128x64_stages_3_warps_8_"
                    "split_k_1_vectorized_v4_kernel")
#: LONG_KERNEL_NAME(out): a module-level static .shared array of {nbytes} bytes that the one kernel uses: its
#: one thread stores 12345 + %tid.x to the array's first and last words and copies both to out[1] and out[0]
PTX_STATIC_SHARED_OF_SIZE = """.version 7.5
.target sm_75
.address_size 64

.shared .align 4 .b8 tile[{nbytes}];

.visible .entry {name}(.param .u64 {name}_param_0)
{{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [{name}_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    add.u32 %r2, %r1, 12345;
    st.shared.u32 [tile], %r2;
    st.shared.u32 [tile+{last}], %r2;
    bar.sync 0;
    ld.shared.u32 %r3, [tile+{last}];
    st.global.u32 [%rd2], %r3;
    ld.shared.u32 %r3, [tile];
    st.global.u32 [%rd2+4], %r3;
    ret;
}}
"""


@pytest.mark.clause("KERNEL-171")
def test_static_shared_memory_past_the_block_limit_is_refused_naming_the_kernel(device, stream, kernels, require):
    """A kernel may declare as much static shared memory as a block can have with opt-in
    (`max_shared_memory_optin`: 227 KiB, 0x38c00 bytes, on sm_90): PTX of sm_75 JIT-compiled for the H100 loads
    48 KiB + 16 bytes and the whole 0x38c00 and runs them (driver 580.159.04), and more is refused at load with a
    log that names the kernel (ptxas: "Entry function '...' uses too much shared data (0x493e0 bytes, 0x38c00
    max)"), so that the user knows which of a module's kernels to shrink. Generated kernels have long names:
    the log gives at least the name's first 100 characters (the fake libcuda shortens a name past that; ptxas gives
    it whole)."""
    require("lang.ptx")
    limit = device.info.extra.get("max_shared_memory_optin")
    if not limit:
        pytest.skip("the device reports no opt-in shared memory limit (extra['max_shared_memory_optin'])")
    for nbytes in (49152, 49168, limit):
        with device.compile(PTX_STATIC_SHARED_OF_SIZE.format(name=LONG_KERNEL_NAME, nbytes=nbytes, last=nbytes - 4),
                            "ptx") as module, poisoned(device, stream, 8) as out:
            stream.launch(module.kernel(LONG_KERNEL_NAME), 1, 1, (out,))
            got = read(stream, out, np.uint32).tolist()
        assert got == [12345, 12345], f"a kernel with {nbytes} bytes of static shared memory: its last and first words {got}"
    with pytest.raises(ia.CompileError) as info:
        device.compile(PTX_STATIC_SHARED_OF_SIZE.format(name=LONG_KERNEL_NAME, nbytes=limit + 16, last=limit + 12),
                       "ptx")
    assert LONG_KERNEL_NAME[:100] in info.value.log, (
        f"a kernel with {limit} + 16 bytes of static shared memory was refused with a log that does not name it "
        f"(the first 100 characters of its {len(LONG_KERNEL_NAME)}-character name): {info.value.log!r}")
    assert_device_works(device, kernels)


#: what far_printf prints (if anything), with one argument
FAR_PRINTF_FORMAT = b"kernel printf far: %d|\n"
#: what far_printf of PTX_FAR_STRING_PRINTF prints (if anything): a string
FAR_STRING_FORMAT = b"kernel printf far: %s|\n"
#: a readable argument buffer (a local depot) whose one argument is the pointer 1 TiB past far_printf's buffer
FAR_ARGUMENT_IN_DEPOT = ("    .local .align 8 .b8 far_printf_depot[8];\n", """    mov.u64 %rd6, far_printf_depot;
    cvta.local.u64 %rd7, %rd6;
    st.local.u64 [%rd6], %rd3;
""", "%rd7")


def _far_printf_ptx(fmt: bytes, depot: tuple[str, str, str] = ("", "", "%rd3")) -> str:
    """far_printf(out): one thread calls vprintf(fmt, arguments) as NVRTC writes a printf call and stores the
    call's return value to out[0]; the argument buffer is out + 1 TiB, where no allocation is, or ``depot``'s
    (its declaration, the code that fills it, its register)."""
    declare, fill, arguments = depot
    return f""".version 7.8
.target sm_75
.address_size 64

.extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);
.global .align 1 .b8 far_format[{len(fmt) + 1}] = {{{", ".join(str(b) for b in fmt + bytes(1))}}};

.visible .entry far_printf(.param .u64 far_printf_param_0)
{{
{declare}    .reg .b32 %r<2>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [far_printf_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    add.s64 %rd3, %rd1, 1099511627776;
{fill}    mov.u64 %rd4, far_format;
    cvta.global.u64 %rd5, %rd4;
    {{
    .param .b64 param0; st.param.b64 [param0], %rd5;
    .param .b64 param1; st.param.b64 [param1], {arguments};
    .param .b32 retval0;
    call.uni (retval0), vprintf, (param0, param1);
    ld.param.b32 %r1, [retval0];
    }}
    st.global.u32 [%rd2], %r1;
    ret;
}}
"""


#: far_printf with its argument buffer where no allocation is
PTX_FAR_PRINTF = _far_printf_ptx(FAR_PRINTF_FORMAT)
#: far_printf of a %s with a readable argument buffer whose one argument, the string's pointer, is out + 1 TiB
PTX_FAR_STRING_PRINTF = _far_printf_ptx(FAR_STRING_FORMAT, FAR_ARGUMENT_IN_DEPOT)

#: the child of KERNEL-172: launches far_printf (of the PTX argv[2]) on one thread over a word set to 0x7F7F7F7F
#: and waits; prints how the wait ended (None: it raised nothing) and, if it raised nothing, the word after it
FAR_PRINTF_CHILD = """
import json, sys
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
stream = device.create_stream()
buf = device.alloc(4)
stream.copy_htod(buf, np.array([0x7F7F7F7F], np.uint32))
stream.launch(device.compile(sys.argv[2], "ptx").kernel("far_printf"), 1, 1, (buf,))
report = {"synchronize": None, "returned": None}
try:
    stream.synchronize()
except Exception as exc:
    report["synchronize"] = {"type": type(exc).__name__, "message": str(exc)}
else:
    word = np.zeros(1, np.int32)
    stream.copy_dtoh(word, buf)
    stream.synchronize()
    report["returned"] = int(word[0])
print(json.dumps(report))
"""


#: KERNEL-172's cases: what lies 1 TiB past far_printf's buffer, and its kernel
FAR_PRINTF_CASES = {"its argument buffer": PTX_FAR_PRINTF, "the string of its %s": PTX_FAR_STRING_PRINTF}


@pytest.mark.clause("KERNEL-172")
@pytest.mark.parametrize("far", list(FAR_PRINTF_CASES))
def test_a_printf_whose_arguments_are_unreadable_faults_or_returns_an_internal_error(device, target, require, far):
    """A printf call reads its arguments from a buffer (vprintf's second parameter), and a `%s` its string from
    where its argument points; one whose buffer or string lies where no allocation is (a bad pointer handed to a
    hand-written vprintf call, a corrupted stack, a string pointer never set) must not pass as a print: the read
    faults (the wait raises DriverError), or the call returns -2, the one value CUDA documents for printf's
    internal error (KERNEL-111: -1 is a null format). A driver (or simulator) that notices the bad read and
    returns some other value (or ends the string where its read failed and prints on) lets a kernel that checks
    for -2 run on as if it had printed. The context may be lost, so a child process runs it (KERNEL-92's)."""
    require("lang.ptx")
    cuda_driver(device, "vprintf")
    got = child_json(target, FAR_PRINTF_CHILD, FAR_PRINTF_CASES[far], timeout=120)
    if got["synchronize"] is not None:
        assert got["synchronize"]["type"] == "DriverError", f"the wait after far_printf: {got['synchronize']}"
    else:
        assert got["returned"] == -2, (
            f"printf with {far} 1 TiB past an allocation raised nothing and returned "
            f"{got['returned']} (0x7F7F7F7F: nothing stored), not -2 (CUDA's internal error)")
