"""The Vulkan backend's own behaviour, beyond the shared conformance suite: both copy paths (mapped and
staged), sub-allocation, deferred frees, batching and back-pressure, descriptor-pool rotation, the lifetime
of graphs' resources, GLSL naming, launch checks against the SPIR-V interface, error mapping and
validation-message collection.

Runs on every software driver this machine has (lavapipe, SwiftShader), with the validation layer on when it
is installed; each device must end its test with no validation message.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ironaccel as ia
from ironaccel.cts import targets
from ironaccel.api import Param
from ironaccel.backends.vulkan.module import DescriptorPool
from hostile_sources import macro_bomb

KERNELS = Path(__file__).resolve().parents[1] / "conformance" / "kernels"
LAYER = Path("/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json")

# (target, direct mapping): lavapipe both ways, so the staging path discrete GPUs take is tested here too.
CONFIGS = [("vulkan/lavapipe", True), ("vulkan/lavapipe", False), ("vulkan/swiftshader", True)]


def _missing(target: str) -> str | None:
    return targets.get(target).missing()


@pytest.fixture(params=CONFIGS, ids=[f"{t.split('/')[1]}-{'mapped' if d else 'staged'}" for t, d in CONFIGS])
def device(request, monkeypatch):
    target, direct = request.param
    missing = _missing(target)
    if missing:
        pytest.skip(f"{target}: {missing}")
    from ironaccel.backends.vulkan import VulkanBackend

    for key, value in targets.get(target).environment().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("IRONACCEL_VK_DIRECT_MAPPING", "1" if direct else "0")
    dev = VulkanBackend().open_device(0, validation=LAYER.exists())
    assert targets.get(target).matches(dev.info), dev.info
    yield dev
    messages = dev.diagnostics()
    dev.close()
    assert not messages, "\n".join(messages)


@pytest.fixture
def stream(device):
    return device.create_stream()


def spirv(device, name):
    return device.compile((KERNELS / "spirv" / f"{name}.spv").read_bytes(), "spirv").kernel(name)


def read(stream, buf, count=None, offset=0):
    out = np.zeros(buf.nbytes - offset if count is None else count, dtype=np.uint8)
    stream.copy_dtoh(out, buf, src_offset=offset)
    stream.synchronize()
    return out


def test_info_describes_the_driver(device):
    info = device.info
    assert info.driver in ("llvmpipe", "SwiftShader")
    assert info.simulated and info.memory > 0 and info.vendor in ("Mesa", "Google")
    assert info.limits.max_alloc % 256 == 0 and info.limits.warp_size > 0
    assert device.supports("lang.spirv") and device.supports("kernel.shared_memory")
    assert device.languages[0] == "spirv"
    assert info.extra["robust_buffer_access"]  # both drivers have it
    assert info.extra["robust_buffer_access2"] == (info.driver == "llvmpipe")  # VK_EXT_robustness2: lavapipe only


def test_random_copies_and_fills_match_a_model(device, stream):
    """Byte-granular htod/dtod/fill at arbitrary offsets, all enqueued before one synchronize."""
    rng = np.random.default_rng(5)
    size = 3001
    bufs = [device.alloc(size) for _ in range(2)]
    model = [np.zeros(size, np.uint8) for _ in range(2)]
    for buf in bufs:
        stream.fill(buf, 0)
    for _ in range(300):
        op, i = rng.integers(3), rng.integers(2)
        start = int(rng.integers(size))
        n = int(rng.integers(1, size - start + 1))
        if op == 0:
            data = rng.integers(0, 256, n, dtype=np.uint8)
            stream.copy_htod(bufs[i], data, dst_offset=start)
            model[i][start : start + n] = data
            data[:] = 0  # the source is reusable on return
        elif op == 1:
            value = int(rng.integers(256))
            stream.fill(bufs[i], value, offset=start, nbytes=n)
            model[i][start : start + n] = value
        else:
            src_start = int(rng.integers(size - n + 1))
            stream.copy_dtod(bufs[1 - i], bufs[i], n, dst_offset=start, src_offset=src_start)
            model[1 - i][start : start + n] = model[i][src_start : src_start + n]
    for buf, expected in zip(bufs, model):
        np.testing.assert_array_equal(read(stream, buf), expected)


@pytest.mark.parametrize("offset", range(5))
@pytest.mark.parametrize("nbytes", [1, 2, 3, 4, 5, 6, 7, 8, 9, 63])
def test_fill_unaligned_edges(device, stream, offset, nbytes):
    with device.alloc(80) as buf:
        stream.fill(buf, 0xAB)
        stream.fill(buf, 0x5C, offset=offset, nbytes=nbytes)
        expected = np.full(80, 0xAB, np.uint8)
        expected[offset : offset + nbytes] = 0x5C
        np.testing.assert_array_equal(read(stream, buf), expected)


def test_thousands_of_buffers_share_a_few_blocks(device, stream):
    bufs = [device.alloc(100 + i % 7) for i in range(3000)]
    blocks = {id(b._allocation.block) for b in bufs}
    assert len(blocks) <= 2
    ranges = sorted((b._allocation.block.buffer, b.offset) for b in bufs)
    assert len(set(ranges)) == len(bufs) and all(offset % 256 == 0 for _, offset in ranges)
    for i in (0, 1234, 2999):
        stream.copy_htod(bufs[i], np.full(bufs[i].nbytes, i % 251, np.uint8))
    for i in (0, 1234, 2999):
        assert (read(stream, bufs[i]) == i % 251).all()
    for b in bufs:
        b.free()
    fresh = device.alloc(100)
    assert fresh.offset == 0  # every range came back and merged
    fresh.free()


def test_large_staged_copies_reuse_their_staging_memory(device, stream):
    """A copy larger than half a block stages through a dedicated block; the next large copy reuses it (mapped
    and faulted in already) instead of allocating, mapping and freeing one each time."""
    if device.info.extra["direct_mapping"]:
        pytest.skip("copies touch mapped device memory directly: nothing is staged")
    staging = device._staging
    n = staging.block_size // 2 + 4096
    rng = np.random.default_rng(7)
    first, second = rng.integers(0, 256, n, dtype=np.uint8), rng.integers(0, 256, n, dtype=np.uint8)
    with device.alloc(n) as buf:
        stream.copy_htod(buf, first)
        stream.synchronize()
        kept = list(staging._spare)
        assert len(kept) == 1 and kept[0].size >= n
        stream.copy_htod(buf, second)
        out = np.zeros(n, np.uint8)
        stream.copy_dtoh(out, buf)
        stream.synchronize()
        np.testing.assert_array_equal(out, second)
        assert len(staging._spare) == 2 and kept[0] in staging._spare  # reused, and a second for the overlap
        device.synchronize()
    staging.release_empty()  # what an out-of-memory retry does: the kept blocks go
    assert staging._spare == []


def test_free_keeps_the_range_until_enqueued_work_is_done(device):
    """A buffer freed while a kernel still writes it is not handed out again until the kernel is done."""
    busy = spirv(device, "busy")
    writer, other = device.create_stream(), device.create_stream()
    n = 4096
    doomed = device.alloc(4 * n)
    writer.launch(busy, grid=n // 64, block=64, args=(doomed, np.uint32(3000), np.uint32(n)))
    doomed.free()
    reused = device.alloc(4 * n)
    other.fill(reused, 0)
    other.synchronize()
    writer.synchronize()
    assert (read(other, reused) == 0).all()
    reused.free()


def test_long_batches_and_many_submissions(device, stream):
    """Hundreds of launches in batches, and more events than submissions allowed in flight."""
    add_one = spirv(device, "add_one")
    n = 256
    buf = device.alloc(4 * n)
    stream.fill(buf, 0)
    events = []
    for i in range(300):
        stream.launch(add_one, grid=n // 64, block=64, args=(buf, np.uint32(n)))
        if i % 2:
            events.append(stream.record())
    events[-1].synchronize()
    assert all(e.query() for e in events)
    assert (read(stream, buf).view(np.uint32) == 300).all()
    buf.free()


def _burst(monkeypatch):
    """A long burst window, so that on a slow machine too a launch right after a submission is deferred."""
    from ironaccel.backends.vulkan import stream as vk_stream

    monkeypatch.setattr(vk_stream, "SUBMIT_GAP_S", 0.3)
    return vk_stream


def test_a_burst_is_batched_and_the_flusher_submits_its_end_without_a_host_call(device, stream, monkeypatch):
    _burst(monkeypatch)
    add_one = spirv(device, "add_one")
    buf = device.alloc(4 * 64)
    stream.fill(buf, 0)
    stream.synchronize()
    threading.Event().wait(0.31)  # past the burst window of the synchronize's submission
    stream.launch(add_one, grid=1, block=64, args=(buf, np.uint32(64)))  # idle: submitted at once
    assert stream._batch is None
    submitted = stream._submitted
    stream.launch(add_one, grid=1, block=64, args=(buf, np.uint32(64)))  # within the burst: recorded
    stream.launch(add_one, grid=1, block=64, args=(buf, np.uint32(64)))
    assert stream._batch is not None and stream._batch.commands == 2 and stream._submitted == submitted
    for _ in range(200):  # no call on the stream: the flusher submits the batch ~0.3 s after the first launch
        if stream._batch is None:
            break
        threading.Event().wait(0.01)
    assert stream._batch is None and stream._submitted == submitted + 1, "the flusher never submitted the batch"
    assert (read(stream, buf).view(np.uint32) == 3).all()
    buf.free()


def test_a_failed_flush_is_raised_by_the_streams_next_call(device, stream, monkeypatch):
    _burst(monkeypatch)
    add_one = spirv(device, "add_one")
    buf = device.alloc(4 * 64)
    stream.launch(add_one, grid=1, block=64, args=(buf, np.uint32(64)))
    failure = ia.DriverError("vulkan", "vkQueueSubmit", -4, "VK_ERROR_DEVICE_LOST", "simulated")
    real_submit = stream._submit

    def lost(limit=None):
        raise failure

    monkeypatch.setattr(stream, "_submit", lost)
    stream.launch(add_one, grid=1, block=64, args=(buf, np.uint32(64)))  # deferred; the flusher's submit fails
    for _ in range(200):
        if stream._flush_error is not None:
            break
        threading.Event().wait(0.01)
    assert stream._flush_error is failure
    monkeypatch.setattr(stream, "_submit", real_submit)
    with pytest.raises(ia.DriverError, match="vkQueueSubmit") as info:
        stream.synchronize()
    assert info.value is failure
    with pytest.raises(ia.DriverError, match="vkQueueSubmit"):  # and the stream's later work, not only once
        stream.launch(add_one, grid=1, block=64, args=(buf, np.uint32(64)))
    stream._flush_error = None  # so the fixture can close the device (a real lost device would not come back)
    stream.synchronize()
    buf.free()


def test_launches_that_bind_the_same_buffers_share_a_descriptor_set_across_batches(device, stream):
    add_one = spirv(device, "add_one")
    a, b = device.alloc(4 * 64), device.alloc(4 * 64)
    stream.fill(a, 0)
    stream.fill(b, 0)
    for buf in (a, a, b, a):
        stream.launch(add_one, grid=1, block=64, args=(buf, np.uint32(64)))
    stream.synchronize()  # the batch is done: its sets stay for the next launches
    sets = device._descriptor_sets._pool.sets
    made = dict(sets)
    assert len(made) == 2, "one set per distinct buffer range"
    stream.launch(add_one, grid=1, block=64, args=(b, np.uint32(64)))
    assert sets == made, "a later batch's launch on the same buffer made another set"
    assert (read(stream, a).view(np.uint32) == 3).all() and (read(stream, b).view(np.uint32) == 2).all()
    a.free()
    b.free()


def test_a_destroyed_vk_buffers_descriptor_sets_are_forgotten(device, stream):
    """A large buffer has a VkBuffer of its own, destroyed when it is freed: the handle may come back for the
    next one, so the sets that bound it must not be found again."""
    add_one = spirv(device, "add_one")
    nbytes = device._memory.block_size // 2 + 4096
    big = device.alloc(nbytes)
    handle = big.handle
    stream.fill(big, 0)
    stream.launch(add_one, grid=1, block=64, args=(big, np.uint32(64)))
    stream.synchronize()
    def bound(sets):  # the VkBuffers the sets' ranges are in: a key is (set layout, *(VkBuffer, offset, size))
        return {vk_buffer for _, *ranges in sets for vk_buffer, _, _ in ranges}

    assert handle in bound(device._descriptor_sets._pool.sets)
    big.free()
    device.synchronize()  # the free's release has run: the VkBuffer is destroyed
    assert handle not in bound(device._descriptor_sets._pool.sets)
    again = device.alloc(nbytes)
    stream.fill(again, 0)
    stream.launch(add_one, grid=1, block=64, args=(again, np.uint32(64)))
    assert (read(stream, again)[: 4 * 64].view(np.uint32) == 1).all()
    again.free()


def test_descriptor_pools_rotate_when_full(device, stream, monkeypatch):
    """Launches on many distinct buffer combinations fill the current descriptor pool; the stream moves on to
    another, and the full one is reset for reuse only once the launches that bound its sets completed."""
    if not device.supports("lang.glsl"):
        pytest.skip("glslangValidator is not on PATH")
    _burst(monkeypatch)  # the launches stay recorded while the pool fills
    k = min(20, device.info.extra["max_storage_buffers"])
    decls = "\n".join(f"layout(set = 0, binding = {i}) buffer B{i} {{ uint v; }} b{i};" for i in range(k))
    body = "\n".join(f"    b{i}.v += {i + 1}u;" for i in range(k))
    source = f"#version 450\nlayout(local_size_x_id = 0) in;\n{decls}\nvoid main() {{\n{body}\n}}\n"
    kernel = device.compile(source, "glsl", options=("-e", "many")).kernel("many")
    n = 3 * k
    bufs = [device.alloc(4) for _ in range(n)]
    for b in bufs:
        stream.fill(b, 0)
    expected = np.zeros(n, dtype=np.uint32)
    windows = 2 * DescriptorPool.DESCRIPTORS // k  # distinct combinations: twice what one pool holds
    for w in range(windows):
        picked = [(w + i) % n for i in range(k)]
        stream.launch(kernel, grid=1, block=1, args=[bufs[j] for j in picked])
        for i, j in enumerate(picked):
            expected[j] += i + 1
    assert len(device._descriptor_sets._pools) > 1, "the pool never rotated"
    got = np.array([read(stream, b).view(np.uint32)[0] for b in bufs])
    assert (got == expected).all()
    for b in bufs:
        b.free()


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


def test_timing_measures_a_busy_kernel(device, stream):
    if not device.supports("events.timing"):
        pytest.skip("not-supported: events.timing")
    busy = spirv(device, "busy")
    out = device.alloc(4 * 1024)
    start = stream.record(timing=True)
    stream.launch(busy, grid=16, block=64, args=(out, np.uint32(2000), np.uint32(1024)))
    end = stream.record(timing=True)
    assert start.elapsed_ms(end) > 0
    assert end.elapsed_ms(start) < 0
    out.free()


def _lcg(start, steps):
    v = start
    for _ in range(steps):
        v = (v * 1664525 + 1013904223) & 0xFFFFFFFF
    return v


def test_synchronize_timeouts_expire_while_a_kernel_runs(device, stream):
    """Each wait gives up after its timeout with Timeout naming the op, the kernel still running (so the wait
    did not last until the end); a wait without timeout then completes the work, nothing lost."""
    busy = spirv(device, "busy")
    n, iters = 8192, 65535  # ~0.5 s on lavapipe here, ~1 s on SwiftShader; lavapipe ends loops at 65,535
    out = device.alloc(4 * n)
    stream.launch(busy, grid=n // 64, block=64, args=(out, np.uint32(iters), np.uint32(n)))
    event = stream.record()
    for op, wait in (("Stream.synchronize", stream.synchronize), ("Event.synchronize", event.synchronize),
                     ("Device.synchronize", device.synchronize)):
        with pytest.raises(ia.Timeout, match=op.replace(".", r"\.")) as err:
            wait(timeout=0.01)
        assert err.value.op == op and err.value.seconds == 0.01
        assert not event.query(), f"{op} returned only once the kernel had finished"
    stream.synchronize()
    assert event.query()
    result = read(stream, out).view(np.uint32)
    assert [int(result[i]) for i in (0, 1, n - 1)] == [_lcg(i, iters) for i in (0, 1, n - 1)]
    out.free()


def test_streams_on_threads(device):
    """Threads each with their own stream allocate, copy, launch and free at the same time."""
    add_one = spirv(device, "add_one")
    errors = []

    def work(seed):
        try:
            s = device.create_stream()
            rng = np.random.default_rng(seed)
            for _ in range(20):
                n = int(rng.integers(1, 2000))
                data = rng.integers(0, 1 << 30, n, dtype=np.uint32)
                with device.alloc(4 * n) as buf:
                    s.copy_htod(buf, data)
                    s.launch(add_one, grid=(n + 63) // 64, block=64, args=(buf, np.uint32(n)))
                    out = np.zeros(n, np.uint32)
                    s.copy_dtoh(out, buf)
                    s.synchronize()
                    np.testing.assert_array_equal(out, data + 1)
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_validation_messages_are_collected_and_drained(device):
    if not device.info.extra["validation"]:
        pytest.skip("VK_LAYER_KHRONOS_validation is not installed")
    import vulkan as vk

    info = vk.ffi.new("VkBufferCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, "size": 0,
                                              "usage": vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT})
    out = vk.ffi.new("VkBuffer*")
    vk.lib.vkCreateBuffer(device._handle, info, vk.ffi.NULL, out)  # size 0 is invalid usage
    vk.lib.vkDestroyBuffer(device._handle, out[0], vk.ffi.NULL)
    messages = device.diagnostics()
    assert any("VUID-VkBufferCreateInfo-size" in m for m in messages), messages
    assert device.diagnostics() == []


def test_vkresult_errors_name_the_call():
    if _missing("vulkan/lavapipe") and _missing("vulkan/swiftshader"):
        pytest.skip("no Vulkan driver")
    from ironaccel.backends.vulkan import native

    native.load()
    oom = native.error("vkAllocateMemory", -2)
    assert isinstance(oom, ia.OutOfMemory) and oom.name == "VK_ERROR_OUT_OF_DEVICE_MEMORY"
    assert "vkAllocateMemory" in str(oom) and "free buffers" in oom.detail
    assert isinstance(native.error("vkQueueSubmit", -1), ia.OutOfMemory)  # VK_ERROR_OUT_OF_HOST_MEMORY
    lost = native.error("vkQueueSubmit", -4)
    assert type(lost) is ia.DriverError and (lost.op, lost.code, lost.name) == ("vkQueueSubmit", -4, "VK_ERROR_DEVICE_LOST")
    assert "close the device" in lost.detail
    unknown = native.error("vkFoo", -123456)
    assert unknown.name == "VkResult(-123456)" and type(unknown) is ia.DriverError


def test_checked_calls_raise_named_after_the_function(device):
    """A real driver error through the proxy: the op is the function's own name, the explanation attached."""
    import vulkan as vk

    from ironaccel.backends.vulkan import native

    info = vk.ffi.new("VkMemoryAllocateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                                "allocationSize": 1 << 60, "memoryTypeIndex": 0})
    out = vk.ffi.new("VkDeviceMemory*")
    with pytest.raises(ia.OutOfMemory, match=r"vkAllocateMemory failed: VK_ERROR_OUT_OF_DEVICE_MEMORY") as err:
        native.call.vkAllocateMemory(device.native.device, info, vk.ffi.NULL, out)
    assert err.value.op == "vkAllocateMemory" and err.value.code == -2
    device.diagnostics()  # the validation layer, where present, also says the size exceeds the heap
    assert native.call.vkDeviceWaitIdle.__name__ == "vkDeviceWaitIdle"
    assert native.call.vkDeviceWaitIdle(device.native.device) == 0  # success is returned, not raised
    with pytest.raises(AttributeError, match="vkCmdDispatch does not return a VkResult"):
        native.call.vkCmdDispatch


def test_missing_package_is_not_available(monkeypatch):
    from ironaccel.backends import vulkan as backend
    from ironaccel.backends.vulkan import native

    monkeypatch.setattr(native, "vk", None)
    monkeypatch.setitem(sys.modules, "vulkan", None)  # import vulkan -> ImportError
    info = backend.VulkanBackend().probe()
    assert not info.available and "pip install vulkan" in info.reason
    with pytest.raises(ia.NotAvailable, match="vulkan"):
        backend.VulkanBackend().open_device(0)


def test_validation_requested_without_the_layer_is_not_available(monkeypatch):
    if _missing("vulkan/lavapipe"):
        pytest.skip(_missing("vulkan/lavapipe"))
    from ironaccel.backends import vulkan as backend
    from ironaccel.backends.vulkan import instance

    monkeypatch.setattr(instance, "instance_layers", lambda: set())
    with pytest.raises(ia.NotAvailable, match="VK_LAYER_KHRONOS_validation"):
        backend.VulkanBackend().open_device(0, validation=True)


def test_dropped_streams_give_their_handles_to_the_next_streams(device):
    """A collected stream's semaphore and command pool are reused, not destroyed (lavapipe's queue thread may
    still touch a semaphore just after its last signal), so a hundred short-lived streams need only a few."""
    import gc

    buf = device.alloc(64)
    semaphores = set()
    for i in range(100):
        s = device.create_stream()
        semaphores.add(s._semaphore)
        s.fill(buf, i)
        s.record().synchronize()
        del s
        gc.collect()
    device.synchronize()
    gc.collect()
    assert sum(f.alive for f in device._stream_handles) <= 2  # the default stream (and a straggler at most)
    assert len(semaphores) <= 2
    reused = device.create_stream()  # starts from the reused semaphore's value: its first wait is not stale
    reused.fill(buf, 0xEE)
    assert (read(reused, buf) == 0xEE).all()
    buf.free()


def test_close_finishes_owed_copies(device, stream):
    buf = device.alloc(256)
    stream.fill(buf, 9)
    out = np.zeros(256, np.uint8)
    stream.copy_dtoh(out, buf)
    device.close()
    assert (out == 9).all()


def test_events_of_a_closed_device_raise(device, stream):
    event = stream.record()
    device.close()
    for call in (event.query, event.synchronize):
        with pytest.raises(ia.UseAfterFree, match=r"Event\."):
            call()


def test_buffers_of_a_closed_device_raise(device):
    buf = device.alloc(64)
    assert buf.handle is not None and buf.offset >= 0
    device.close()
    with pytest.raises(ia.UseAfterFree, match=r"Buffer\.handle"):
        buf.handle
    with pytest.raises(ia.UseAfterFree, match=r"VulkanBuffer\.offset"):
        buf.offset
    buf.free()  # still idempotent and harmless


def test_a_closed_graph_is_released_once_its_replays_complete(device, stream):
    """Closing a graph whose replay waits behind a busy kernel keeps its command buffer, descriptor sets and
    staging until the replay is done; the device releases them then, and Device.close releases graphs left
    open (the fixture checks that the validation layer saw nothing amiss)."""
    busy, add_one = spirv(device, "busy"), spirv(device, "add_one")
    n = 1 << 16
    slow, buf = device.alloc(4 * n), device.alloc(4 * 64 + 2)
    stream.fill(buf, 0)
    with stream.capture() as graph:
        stream.launch(add_one, grid=1, block=64, args=(buf, np.uint32(64)))
        stream.fill(buf, 7, offset=4 * 64, nbytes=2)  # an unaligned fill: staged edges the graph owns
    stream.launch(busy, grid=n // 64, block=64, args=(slow, np.uint32(3000), np.uint32(n)))
    graph.launch(stream)
    graph.close()
    assert len(device._graphs) == 1 and device._deferred  # the replay is pending: nothing released yet
    got = read(stream, buf)
    assert (got[:4 * 64].view(np.uint32) == 1).all() and (got[4 * 64:] == 7).all()
    assert not device._graphs
    with stream.capture() as left_open:
        stream.launch(add_one, grid=1, block=64, args=(buf, np.uint32(64)))
    left_open.launch(stream)
    assert device._graphs == {left_open._resources}
    slow.free()
    buf.free()


def test_a_glsl_compile_has_a_time_limit(device, monkeypatch):
    from ironaccel import glslang

    monkeypatch.setattr(glslang, "COMPILE_TIME_LIMIT_S", 2.0)
    started = time.monotonic()
    with pytest.raises(ia.CompileError, match="ran past 2 s and was stopped"):
        device.compile(macro_bomb("#version 450\nlayout(local_size_x = 1) in;"), "glsl")
    assert time.monotonic() - started < 60  # the limit plus killing glslang, with room for a loaded CI machine
