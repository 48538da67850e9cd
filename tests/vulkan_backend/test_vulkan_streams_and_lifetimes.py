"""The Vulkan backend's own behaviour, beyond the shared conformance suite:
timing, synchronize timeouts, streams on threads, error mapping and
validation-message collection, and the lifetime of streams, events, buffers and graphs across a device's close.

Runs on every software driver this machine has (lavapipe, SwiftShader), with the validation layer on when it
is installed; each device must end its test with no validation message (the fixtures: conftest.py).
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.backends.vulkan import stream as vulkan_stream
from ironaccel.cts import targets
from vulkan_helpers import LAYER, missing, read, spirv


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
    if missing("vulkan/lavapipe") and missing("vulkan/swiftshader"):
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
    if missing("vulkan/lavapipe"):
        pytest.skip(missing("vulkan/lavapipe"))
    from ironaccel.backends import vulkan as backend
    from ironaccel.backends.vulkan import instance

    monkeypatch.setattr(instance, "instance_layers", lambda: set())
    with pytest.raises(ia.NotAvailable, match="VK_LAYER_KHRONOS_validation"):
        backend.VulkanBackend().open_device(0, validation=True)


@pytest.mark.parametrize("validation, barrier, hazard", [
    ("sync", True, False), ("sync", False, True), (True, False, False)],
    ids=["sync-with the barrier", "sync-barrier dropped", "plain-barrier dropped"])
def test_synchronization_validation_reports_launches_left_unordered_in_one_batch(monkeypatch, validation, barrier,
                                                                                  hazard):
    """With ``validation="sync"`` a launch that reads what the launch before it in its batch wrote, with no
    barrier between them, is a hazard the layer reports; lavapipe runs them in order (the result is right),
    and the layer without synchronization validation says nothing. (The layer of SDK 1.3.239 reports a read
    after a write and a write after a read, not two writes: a storage buffer the kernel does not declare
    NonWritable counts as written only.)"""
    why = missing("vulkan/lavapipe") or (None if LAYER.exists() else "VK_LAYER_KHRONOS_validation is not installed")
    if why:
        pytest.skip(why)
    from ironaccel.backends.vulkan import VulkanBackend

    for key, value in targets.get("vulkan/lavapipe").environment().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(vulkan_stream, "SUBMIT_GAP_S", 60.0)  # the launches below share a batch
    dev = VulkanBackend().open_device(0, validation=validation)
    try:
        assert dev.info.extra["synchronization_validation"] == (validation == "sync")
        s = dev.create_stream()
        if not barrier:
            s._barrier_handle = None
        fill, saxpy = spirv(dev, "fill_u32"), spirv(dev, "saxpy")
        x, y = dev.alloc(4 * 64), dev.alloc(4 * 64)
        one, two = (np.float32(v).view(np.uint32) for v in (1, 2))
        s.launch(fill, grid=1, block=64, args=(y, two, np.uint32(64)))  # submitted at once: the device is idle
        s.launch(fill, grid=1, block=64, args=(x, one, np.uint32(64)))  # these two share a batch
        s.launch(saxpy, grid=1, block=64, args=(x, y, np.float32(2), np.uint32(64)))  # y = 2 * x + y
        assert (read(s, y).view(np.float32) == 4).all()
        x.free()
        y.free()
        messages = dev.diagnostics()
    finally:
        dev.close()
    assert any("SYNC-HAZARD-READ-AFTER-WRITE" in m for m in messages) == hazard and len(messages) == hazard, messages


def test_validation_is_true_false_or_sync(monkeypatch):
    from ironaccel.backends.vulkan import VulkanBackend
    from ironaccel.backends.vulkan.instance import validation_requested

    for value, wanted in (("", (False, False)), ("0", (False, False)), ("1", (True, False)), ("sync", (True, True))):
        monkeypatch.setenv("IRONACCEL_VK_VALIDATION", value)
        assert validation_requested(None) == wanted, value
    assert validation_requested(False) == (False, False) and validation_requested("sync") == (True, True)
    refusal = "^Backend.open_device: validation must be True, False or 'sync', not 'yes'"
    with pytest.raises(ia.InvalidArgument, match=refusal):
        VulkanBackend().open_device(0, validation="yes")


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


def test_launches_in_one_batch_bind_only_what_changed_and_each_runs_with_its_own_arguments(device, stream,
                                                                                         monkeypatch):
    """Back-to-back launches skip the binds the batch already has (stream.Batch): one that changes only a
    scalar, only a buffer, or the kernel still runs with its own arguments."""
    monkeypatch.setattr(vulkan_stream, "SUBMIT_GAP_S", 60.0)  # the launches below share a batch
    add_one, fill = spirv(device, "add_one"), spirv(device, "fill_u32")
    a, b = device.alloc(4 * 64), device.alloc(4 * 64)
    stream.fill(a, 0)
    stream.fill(b, 0)
    for buf, n in ((a, 64), (a, 64), (a, 32), (b, 32), (a, 32)):
        stream.launch(add_one, grid=1, block=64, args=(buf, np.uint32(n)))
    stream.launch(fill, grid=1, block=64, args=(b, np.uint32(9), np.uint32(16)))
    stream.launch(add_one, grid=1, block=64, args=(b, np.uint32(8)))
    expected_a = np.array([4] * 32 + [2] * 32, dtype=np.uint32)
    expected_b = np.array([10] * 8 + [9] * 8 + [1] * 16 + [0] * 32, dtype=np.uint32)
    assert (read(stream, a).view(np.uint32) == expected_a).all()
    assert (read(stream, b).view(np.uint32) == expected_b).all()
    a.free()
    b.free()


def test_a_launch_after_a_graph_replay_binds_its_own_arguments_again(device, stream, monkeypatch):
    """A launch skips the binds its batch already has (stream.Batch); a replayed graph binds its own, after
    which the batch's are undefined, so the same launch after a replay in the same batch binds again (else
    it would run on the graph's buffer)."""
    monkeypatch.setattr(vulkan_stream, "SUBMIT_GAP_S", 60.0)  # the launches and replays below share a batch
    add_one = spirv(device, "add_one")
    a, b = device.alloc(4 * 64), device.alloc(4 * 64)
    stream.fill(a, 0)
    stream.fill(b, 0)
    with stream.capture() as graph:
        stream.launch(add_one, grid=1, block=64, args=(b, np.uint32(64)))
    for _ in range(2):
        stream.launch(add_one, grid=1, block=64, args=(a, np.uint32(64)))
        graph.launch(stream)
    stream.launch(add_one, grid=1, block=64, args=(a, np.uint32(64)))
    assert (read(stream, a).view(np.uint32) == 3).all() and (read(stream, b).view(np.uint32) == 2).all()
    graph.close()
    a.free()
    b.free()


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
