"""The Vulkan backend's own behaviour, beyond the shared conformance suite:
both copy paths (mapped and staged), sub-allocation, deferred frees,
batching and back-pressure, descriptor-set reuse and descriptor-pool rotation.

Runs on every software driver this machine has (lavapipe, SwiftShader), with the validation layer on when it
is installed; each device must end its test with no validation message (the fixtures: conftest.py).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.backends.vulkan.module import DescriptorPool
from vulkan_helpers import read, spirv


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


def test_close_frees_the_dedicated_blocks_of_buffers_still_held(device):
    """DEV-83 on the H200: a buffer larger than half a block has a VkDeviceMemory of its own, which close() must
    free while the caller still holds the buffer (NVIDIA's driver keeps what vkDestroyDevice finds unfreed; the
    software drivers free it with the device, so the conformance test passes there either way)."""
    from ironaccel.backends.vulkan import VulkanBackend

    other = VulkanBackend().open_device(0)
    held = [other.alloc(other._memory.block_size // 2 + 4096) for _ in range(2)]
    held[1].free()  # a freed one is kept as a spare or destroyed: close frees both kinds
    assert held[0]._allocation.block.dedicated and held[0]._allocation.block.memory is not None
    other.close()
    assert [b._allocation.block.memory for b in held] == [None, None]


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
