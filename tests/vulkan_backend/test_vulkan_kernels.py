"""The Vulkan backend's own behaviour, beyond the shared conformance suite:
kernels: scalars, GLSL naming and its compile time limit, the SPIR-V reader
on hostile bytes, validation of invalid SPIR-V, launch checks against the SPIR-V interface, reflected
parameters, out-of-bounds writes, and the binds a launch records in a batch (compiled and cffi recording).

Runs on every software driver this machine has (lavapipe, SwiftShader), with the validation layer on when it
is installed; each device must end its test with no validation message (the fixtures: conftest.py).
"""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ironaccel as ia
from ironaccel.api import Param
from hostile_sources import macro_bomb
from vulkan_helpers import KERNELS, read, spirv


def test_float32_scalars_reach_the_kernel_bit_for_bit(device, stream):
    """Push constants are packed by ``struct``, which converts a float32 through a double: the bits of a NaN
    (a signalling one, a payload, a sign) must still arrive as given, as ``api.pack_scalars`` packs them."""
    if not device.supports("lang.glsl"):
        pytest.skip("glslangValidator is not on PATH")
    source = ("#version 450\nlayout(local_size_x = 1) in;\nlayout(set = 0, binding = 0) buffer Out { uint bits[]; } out_;\n"
              "layout(push_constant) uniform Args { uint n; float value; } args;\n"
              "void main() { out_.bits[0] = args.n; out_.bits[1] = floatBitsToUint(args.value); }\n")
    kernel = device.compile(source, "glsl").kernel("main")
    out = device.alloc(8)
    for bits in (0x7F800001, 0xFFC00123, 0x7FC00000, 0x3FC00000, 0x80000000, 0x00000001):
        value = np.uint32(bits).view(np.float32)
        stream.launch(kernel, grid=1, block=1, args=(out, np.uint32(7), value))
        assert read(stream, out).view(np.uint32).tolist() == [7, bits], hex(bits)
    out.free()


def test_glsl_kernels_are_named_main_or_by_option(device):
    if not device.supports("lang.glsl"):
        pytest.skip("glslangValidator is not on PATH")
    source = (KERNELS / "glsl" / "add_one.comp").read_text()
    assert device.compile(source, "glsl").kernel("main").name == "main"
    assert device.compile(source, "glsl", options=("-e", "add_one")).kernel("add_one").name == "add_one"
    with pytest.raises(ia.CompileError, match="ERROR") as info:
        device.compile(source.replace("+= 1u", "+= undefined_name"), "glsl")
    assert "undefined_name" in info.value.log


def test_glsl_without_glslang_is_not_available(device, monkeypatch):
    if not device.supports("lang.glsl"):
        pytest.skip("glslangValidator is not on PATH")
    monkeypatch.setenv("PATH", "")
    with pytest.raises(ia.NotAvailable, match="glslangValidator"):
        device.compile("#version 450\nvoid main() {}\n", "glsl")


def test_bad_spirv_is_a_compile_error(device):
    good = (KERNELS / "spirv" / "saxpy.spv").read_bytes()
    for bad in (b"", b"\x03\x02\x23\x07", good[:-2], good[:20] + b"\x00\x00\x00\x00" + good[24:]):
        with pytest.raises(ia.CompileError, match=r"Device\.compile"):
            device.compile(bad, "spirv")


SAXPY_SPV = (KERNELS / "spirv" / "saxpy.spv").read_bytes()


def _entry_points_or_compile_error(code):
    from ironaccel.backends.vulkan.spirv import spirv_interfaces

    try:
        interfaces = spirv_interfaces(code)
    except ia.CompileError as exc:
        assert "Device.compile" in str(exc)
        return None
    assert all(isinstance(name, str) for name in interfaces)
    return interfaces


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_spirv_reader_never_raises_anything_but_compile_error_on_bytes(code):
    _entry_points_or_compile_error(code)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), max_size=24), st.sampled_from([0x07230203, 0x03022307]))
def test_spirv_reader_never_raises_anything_but_compile_error_on_words(words, magic):
    """Any header-correct sequence of words: instructions of odd lengths and operands, strings without nul."""
    header = [magic, 0x00010500, 0, 64, 0]
    _entry_points_or_compile_error(np.array(header + words, dtype="<u4").tobytes())


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_spirv_reader_never_raises_anything_but_compile_error_on_mutants(data):
    """A real module truncated, or with words replaced: what a broken toolchain or a flipped bit gives."""
    words = np.frombuffer(SAXPY_SPV, dtype="<u4").copy()
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        at = data.draw(st.integers(5, len(words) - 1), label="word")
        words[at] = data.draw(st.sampled_from([0, 1, 0xFFFFFFFF, 0x00010000 | int(words[at]) & 0xFFFF,
                                               int(words[at]) & 0xFFFF, 0x80 << 24 | 0xFF]), label="value")
    cut = data.draw(st.integers(5, len(words)), label="length")
    _entry_points_or_compile_error(words[:cut].tobytes())


def test_spirv_reader_refuses_a_binding_no_launch_could_fill_without_building_its_parameters():
    """A Binding decoration of 0xFFFFFFFF (a flipped word, found by the fuzz below: the reader built four billion
    parameters and the process was killed for memory) is a CompileError, at once."""
    from ironaccel.backends.vulkan.spirv import spirv_interfaces

    words = np.frombuffer(SAXPY_SPV, dtype="<u4").copy()
    words[147] = 0xFFFFFFFF  # the Binding of saxpy's first buffer
    with pytest.raises(ia.CompileError, match="binding 4294967295"):
        spirv_interfaces(words.tobytes())


@pytest.mark.parametrize("code", [
    SAXPY_SPV[:24],  # a header and one word
    np.array([0x07230203, 0x10500, 0, 9, 0, 15 | 2 << 16, 5], "<u4").tobytes(),  # OpEntryPoint with 1 operand
    np.array([0x07230203, 0x10500, 0, 9, 0, 15 | 4 << 16, 5, 1, 0x41414141], "<u4").tobytes(),  # name without nul
    np.array([0x07230203, 0x10500, 0, 9, 0, 15 | 4 << 16, 5, 1, 0xFF], "<u4").tobytes(),  # name not UTF-8
    np.array([0x07230203, 0x10500, 0, 9, 0, 16 | 3 << 16, 1, 17], "<u4").tobytes(),  # LocalSize without sizes
    np.array([0x07230203, 0x10500, 0, 9, 0, 72 | 4 << 16, 1, 0, 35], "<u4").tobytes(),  # Offset without a value
], ids=["one-word", "short-entry-point", "name-without-nul", "name-not-utf8", "short-local-size", "short-offset"])
def test_spirv_reader_odd_modules_are_compile_errors(code):
    with pytest.raises(ia.CompileError, match="SPIR-V"):
        from ironaccel.backends.vulkan.spirv import spirv_interfaces

        spirv_interfaces(code)


def _out_of_range_access_chain(code):
    """saxpy whose buffer access chains index member 1 of a one-member struct: invalid SPIR-V that crashes
    lavapipe (SIGSEGV) and SwiftShader (SIGILL) at launch when it reaches them."""
    words = np.frombuffer(code, dtype="<u4").copy()
    i, constants, chains = 5, {}, []
    while i < len(words):
        count, opcode = int(words[i]) >> 16, int(words[i]) & 0xFFFF
        if opcode == 43:  # OpConstant %type %id value
            constants[int(words[i + 2])] = int(words[i + 3])
        elif opcode == 65 and count == 6:  # OpAccessChain %type %id %base %member %element
            chains.append(i + 4)
        i += count
    assert chains
    words[chains] = next(id_ for id_, value in constants.items() if value == 1)
    return words.tobytes()


def test_invalid_spirv_is_rejected_before_the_driver_sees_it(device):
    from ironaccel.backends.vulkan.module import SPIRV_VAL

    if shutil.which(SPIRV_VAL) is None:
        pytest.skip("spirv-val is not on PATH (apt-get install spirv-tools)")
    with pytest.raises(ia.CompileError, match=r"Device\.compile") as err:
        device.compile(_out_of_range_access_chain(SAXPY_SPV), "spirv")
    assert "OpAccessChain" in err.value.log and "out of bounds" in err.value.log


def test_without_spirv_val_the_validation_layer_rejects_invalid_spirv(device, monkeypatch):
    if not device.info.extra["validation"]:
        pytest.skip("VK_LAYER_KHRONOS_validation is not installed")
    from ironaccel.backends.vulkan import module as vulkan_module

    monkeypatch.setattr(vulkan_module, "SPIRV_VAL", "spirv-val-not-installed")
    with pytest.raises(ia.CompileError, match=r"Device\.compile") as err:
        device.compile(_out_of_range_access_chain(SAXPY_SPV), "spirv")
    assert "OpAccessChain" in err.value.log
    assert device.diagnostics() == []  # the message went into the error
    assert device.compile(SAXPY_SPV, "spirv").kernel("saxpy")  # a valid module still compiles


def test_launch_must_match_the_kernel_interface(device, stream):
    saxpy = spirv(device, "saxpy")
    buf = device.alloc(64)
    with pytest.raises(ia.InvalidArgument, match=r"saxpy takes 2 buffer\(s\) and 2 scalar\(s\).*got 1 and 2"):
        stream.launch(saxpy, grid=1, block=16, args=(buf, np.float32(2), np.uint32(16)))
    with pytest.raises(ia.InvalidArgument, match=r"got 2 and 1"):
        stream.launch(saxpy, grid=1, block=16, args=(buf, buf, np.uint32(16)))
    with pytest.raises(ia.InvalidArgument, match=r"argument 2 of saxpy is uint32; the kernel declares a float32"):
        stream.launch(saxpy, grid=1, block=16, args=(buf, buf, np.uint32(2), np.uint32(16)))
    stream.launch(saxpy, grid=1, block=16, args=(buf, np.float32(2), buf, np.uint32(16)))  # interleaving is fine
    if device.supports("lang.glsl"):
        offsets = device.compile("#version 450\nlayout(local_size_x_id = 0) in;\n"
                                 "layout(push_constant) uniform P { layout(offset = 16) uint n; } p;\n"
                                 "void main() {}\n", "glsl").kernel("main")
        with pytest.raises(ia.InvalidArgument, match="20-byte push-constant block.*pack into 4 bytes"):
            stream.launch(offsets, grid=1, block=1, args=(np.uint32(1),))
    if device.supports("lang.glsl"):
        fixed = device.compile("#version 450\nlayout(local_size_x = 8) in;\nvoid main() {}\n", "glsl").kernel("main")
        stream.launch(fixed, grid=1, block=8)
        with pytest.raises(ia.InvalidArgument, match=r"fixed block \(8, 1, 1\)"):
            stream.launch(fixed, grid=1, block=16)
    buf.free()


BUF = Param("buffer")
U32 = I32 = Param("scalar", 4, "int")
F32 = Param("scalar", 4, "float")


@pytest.mark.parametrize(("name", "params"), [
    ("saxpy", (BUF, BUF, F32, U32)),
    ("vecadd", (BUF, BUF, BUF, U32)),
    ("busy", (BUF, U32, U32)),
    ("pack_args", (BUF, BUF, U32, F32, I32, U32)),  # buffers first: SPIR-V does not say where they sat
    ("daxpy", (BUF, BUF, Param("scalar", 8, "float"), U32)),
])
def test_params_are_reflected_from_the_spirv(device, name, params):
    if name == "daxpy" and not device.supports("kernel.float64"):
        pytest.skip("not-supported: kernel.float64")
    assert spirv(device, name).params == params


def test_params_of_glsl_kernels(device):
    if not device.supports("lang.glsl"):
        pytest.skip("glslangValidator is not on PATH")
    none = device.compile("#version 450\nlayout(local_size_x_id = 0) in;\nvoid main() {}\n", "glsl").kernel("main")
    assert none.params == ()
    source = """#version 450
layout(local_size_x_id = 0) in;
layout(set = 0, binding = 1) buffer B1 { float v[]; } b1;
layout(set = 0, binding = 0) buffer B0 { uint v[]; } b0;
layout(push_constant) uniform P { int i; float f; uint u; } p;
void main() { b0.v[0] = uint(p.i) + p.u; b1.v[0] = p.f; }
"""
    assert device.compile(source, "glsl").kernel("main").params == (BUF, BUF, I32, F32, U32)


@pytest.mark.parametrize("blocks", [16, 65535], ids=["16KiB-past", "64MiB-past"])
def test_out_of_bounds_writes_never_change_a_neighbouring_buffer(device, stream, blocks):
    """fill_u32 told to write far past the end of its 1 KiB buffer (16 KiB; 64 MiB, beyond its memory block):
    the next buffer of the same VkBuffer (sub-allocated right after it) keeps its bytes, nothing crashes
    (robust buffer access and per-buffer descriptor ranges)."""
    assert device.info.extra["robust_buffer_access"]
    fill = spirv(device, "fill_u32")
    target, neighbour = device.alloc(1024), device.alloc(4096)
    assert neighbour._allocation.block is target._allocation.block
    assert neighbour.offset == target.offset + 1024  # really the next bytes of the same VkBuffer
    stream.fill(target, 0)
    stream.fill(neighbour, 0x5A)
    stream.launch(fill, grid=blocks, block=256, args=(target, np.uint32(0xDEADBEEF), np.uint32(blocks * 256)))
    assert (read(stream, target).view(np.uint32) == 0xDEADBEEF).all()  # the in-bounds part was written
    assert (read(stream, neighbour) == 0x5A).all()
    target.free()
    neighbour.free()


def test_a_glsl_compile_has_a_time_limit(device, monkeypatch):
    from ironaccel import glslang

    monkeypatch.setattr(glslang, "COMPILE_TIME_LIMIT_S", 2.0)
    started = time.monotonic()
    with pytest.raises(ia.CompileError, match="ran past 2 s and was stopped"):
        device.compile(macro_bomb("#version 450\nlayout(local_size_x = 1) in;"), "glsl")
    assert time.monotonic() - started < 60  # the limit plus killing glslang, with room for a loaded CI machine


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled-recording", "cffi-recording"])
def test_launches_in_one_batch_bind_what_changed_in_either_recording(device, monkeypatch, compiled):
    """A launch records only the binds its batch does not have (record.Recording: one call of the compiled
    extension, or cffi calls without it): launches in one batch that change the buffer, then the scalars, then
    the kernel, around a graph replay (after which nothing is bound), each find their own arguments."""
    if not compiled:
        monkeypatch.setenv("IRONACCEL_PURE_PYTHON", "1")
    elif ia.native.load() is None:
        pytest.skip(f"no compiled extension here: {ia.native.why_not}")
    from ironaccel.backends.vulkan import VulkanBackend
    from ironaccel.backends.vulkan import stream as vulkan_stream

    monkeypatch.setattr(vulkan_stream, "SUBMIT_GAP_S", 60.0)  # after the first launch's batch, one batch
    dev = VulkanBackend().open_device(0)
    try:
        s = dev.create_stream()
        fill, add = spirv(dev, "fill_u32"), spirv(dev, "add_one")
        a, b = dev.alloc(64), dev.alloc(64)
        with s.capture() as graph:
            s.launch(add, 1, 16, [a, np.uint32(16)])
        s.launch(fill, 1, 16, [a, np.uint32(5), np.uint32(16)])  # submitted at once: the device was idle
        s.launch(fill, 1, 16, [b, np.uint32(5), np.uint32(16)])  # a new batch: everything bound
        s.launch(fill, 1, 16, [a, np.uint32(3), np.uint32(16)])  # another buffer, other scalars
        s.launch(fill, 1, 16, [b, np.uint32(7), np.uint32(16)])  # another buffer
        s.launch(fill, 1, 16, [b, np.uint32(9), np.uint32(8)])  # other scalars
        graph.launch(s)  # a += 1
        s.launch(fill, 1, 16, [b, np.uint32(9), np.uint32(4)])  # after the replay: everything bound again
        s.launch(add, 1, 16, [b, np.uint32(16)])  # another kernel
        assert s._submitted == 1  # the rest was one batch
        assert read(s, a).view(np.uint32).tolist() == [4] * 16
        assert read(s, b).view(np.uint32).tolist() == [10] * 8 + [8] * 8
        graph.close()
    finally:
        dev.close()
