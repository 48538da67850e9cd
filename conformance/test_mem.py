"""MEM: allocation, sizes, free, use after free, out of memory."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.cts.pytest_plugin import NOT_SUPPORTED_PREFIX

from .helpers import (POISON, assert_device_works, child_json, context_current, cuda_driver, host_pages_above,
                      host_pages_low, memory_churn, poisoned, raises_naming, random_bytes, read, resident_growth,
                      rss_bytes)


@pytest.mark.clause("MEM-1")
@pytest.mark.parametrize("nbytes", [1, 2, 3, 4, 5, 7, 64, 1000, 4097, 1 << 20])
def test_alloc_sizes_round_trip(device, stream, nbytes):
    with device.alloc(nbytes) as buf:
        assert buf.nbytes == nbytes
        data = random_bytes(nbytes, seed=nbytes)
        stream.copy_htod(buf, data)
        np.testing.assert_array_equal(read(stream, buf), data)


@pytest.mark.clause("MEM-1")
def test_alloc_device_limit(device, stream):
    n = device.info.limits.max_alloc
    with device.alloc(n) as buf:
        assert buf.nbytes == n
        tail = random_bytes(4096, seed=3)
        stream.copy_htod(buf, tail, dst_offset=n - tail.nbytes)
        stream.copy_htod(buf, tail[:17], dst_offset=0)
        np.testing.assert_array_equal(read(stream, buf, count=4096, offset=n - 4096), tail)
        np.testing.assert_array_equal(read(stream, buf, count=17), tail[:17])


@pytest.mark.clause("MEM-51")
def test_a_kernel_reaches_the_last_word_of_the_largest_buffer(device, stream, kernels):
    """max_alloc is the largest buffer the device allocates, and a Buffer is what kernels take: its last
    word must be within what a kernel can bind and address, not only what copies reach (MEM-1)."""
    n = device.info.limits.max_alloc
    last = n // 4 - 1
    store_at = kernels("store_at")
    with device.alloc(n) as buf:
        for index, value in ((last, 0xC0FFEE01), (0, 0xC0FFEE02)):
            stream.launch(store_at, 1, 1, (buf, np.uint32(index), np.uint32(value)))
        np.testing.assert_array_equal(read(stream, buf, np.uint32, count=1, offset=4 * last), [0xC0FFEE01],
                                      err_msg=f"the word at byte {4 * last} of a buffer of max_alloc = {n} bytes")
        np.testing.assert_array_equal(read(stream, buf, np.uint32, count=1), [0xC0FFEE02])
    assert_device_works(device, kernels)


@pytest.mark.clause("MEM-2", "ERR-1")
@pytest.mark.parametrize("bad", [0, -1, 1.5, "8", True])
def test_alloc_rejects_bad_sizes(device, bad):
    with raises_naming(ia.InvalidArgument, "Device.alloc", "nbytes"):
        device.alloc(bad)


@pytest.mark.clause("MEM-3")
def test_free_is_idempotent_and_context_manager_frees(device):
    buf = device.alloc(256)
    assert not buf.freed
    buf.free()
    buf.free()
    assert buf.freed
    with device.alloc(256) as other:
        assert not other.freed
    assert other.freed


@pytest.mark.clause("MEM-4", "ERR-1")
def test_use_after_free_raises(device, stream, kernels):
    buf = device.alloc(64)
    live = device.alloc(64)
    buf.free()
    host = np.zeros(64, np.uint8)
    for op, call in [
        ("Stream.copy_htod", lambda: stream.copy_htod(buf, host)),
        ("Stream.copy_dtoh", lambda: stream.copy_dtoh(host, buf)),
        ("Stream.copy_dtod", lambda: stream.copy_dtod(live, buf, 8)),
        ("Stream.fill", lambda: stream.fill(buf, 1)),
        ("Stream.launch", lambda: stream.launch(kernels("fill_u32"), 1, 16, (buf, np.uint32(1), np.uint32(16)))),
        ("Buffer.handle", lambda: buf.handle),
    ]:
        with pytest.raises(ia.UseAfterFree, match=op.replace(".", r"\.")):
            call()
    live.free()


@pytest.mark.clause("MEM-5", "ERR-1", "ERR-2")
def test_over_limit_is_out_of_memory(device, kernels):
    """The error tells the caller what went wrong in its own words: its ``name`` says why (a string, as a driver's
    error name would be), and its message gives the bytes asked for and the limit."""
    limit = device.info.limits.max_alloc
    with pytest.raises(ia.OutOfMemory, match=r"Device\.alloc") as info:
        device.alloc(limit + 1)
    assert isinstance(info.value.name, str) and info.value.name, f"OutOfMemory.name is {info.value.name!r}"
    assert str(limit + 1) in str(info.value) and str(limit) in str(info.value), str(info.value)
    assert_device_works(device, kernels)


@pytest.mark.clause("MEM-6")
def test_five_thousand_live_buffers(device, stream):
    """More live buffers than the 4096 device allocations many Vulkan drivers allow: small buffers must share."""
    count = 5000
    bufs = [device.alloc(16 + i % 7) for i in range(count)]
    for i, b in enumerate(bufs):
        stream.fill(b, i % 251 + 1)
    stream.synchronize()
    for i in range(0, count, 37):
        got = read(stream, bufs[i])
        assert (got == i % 251 + 1).all(), f"buffer {i} lost its contents"
    for b in bufs:
        b.free()


@pytest.mark.clause("MEM-20")
def test_free_gives_the_memory_back_while_the_buffer_object_lives(device, stream, kernels, target):
    """MEM-3's free() must release the memory itself, not leave it to the collector of the Buffer object (LIFE-7
    covers dropped buffers): a program may well keep its freed Buffers around, in a list or a cache."""
    _churn_keeping_freed_buffers(device, [stream], kernels, target)


@pytest.mark.clause("MEM-50")
def test_free_gives_back_the_memory_of_a_buffer_used_on_two_streams(device, stream, kernels, target):
    """A buffer used on two streams has its free ordered after the work of both (LIFE-4): a backend whose
    free takes another path then (a wait on the other stream's work first) must still give the memory back."""
    _churn_keeping_freed_buffers(device, [device.create_stream(), stream], kernels, target)


def _churn_keeping_freed_buffers(device, streams, kernels, target) -> None:
    """Buffers of several times the device's memory, each filled on ``streams`` in turn and freed, every freed
    object kept: the device never runs out (a CPU driver's process stays within a bound)."""
    size, rounds, touched = memory_churn(device, target)
    freed = []
    before = 0
    for i in range(rounds):
        buf = device.alloc(size)
        for s in streams:
            s.fill(buf, i & 0xFF, nbytes=touched)
        buf.free()
        freed.append(buf)  # the object lives on: only free() can have given its memory back
        if i % 4 == 3 or touched < size:  # memory comes back once the work enqueued with it has completed
            for s in streams:
                s.synchronize()
        if i == rounds // 2 - 1:  # the second half is measured: a driver's caches fill in the first (PoCL's do)
            before = rss_bytes()
    device.synchronize()
    if target.memory_kind != "device":
        grown = rss_bytes() - before
        measured = rounds - rounds // 2
        assert grown < measured * size // 2, (  # a leak grows by measured * size
            f"{measured} freed {size >> 20} MiB buffers, their objects kept, grew the process by {grown >> 20} MiB")
    assert_device_works(device, kernels)


@pytest.mark.clause("MEM-52")
def test_freeing_every_small_buffer_gives_their_memory_back(device, stream, kernels, target):
    """Small buffers share larger allocations in some backends (Vulkan sub-allocates up to 32 MiB from 64 MiB
    blocks): a block whose every buffer is freed must go back to the driver. A backend whose count of a block's
    use never returns to zero keeps every block the program ever filled, for as long as the device lives; its
    later allocations reuse them, so only the memory the process holds after the frees shows it."""
    size, count = 32 << 20, 12  # six 64 MiB blocks of two each; a malloc of 32 MiB is always its own mapping
    before = rss_bytes()
    bufs = [device.alloc(size) for _ in range(count)]
    for i, buf in enumerate(bufs):
        stream.fill(buf, i + 1)
    stream.synchronize()
    grown = rss_bytes() - before
    for buf in bufs:
        buf.free()
    assert_device_works(device, kernels)  # the program goes on (OpenGL deletes the freed names on its next call)
    device.synchronize()
    kept = rss_bytes() - before
    if target.memory_kind != "device":  # a CPU driver's memory is the process's
        assert grown > count * size // 2, f"{count} filled {size >> 20} MiB buffers grew the process by {grown >> 20} MiB only"
        assert kept < count * size // 2, (  # wgpu keeps about a third of them for its next allocations
            f"{count} freed {size >> 20} MiB buffers still hold {kept >> 20} MiB of the process's memory")


@pytest.mark.clause("MEM-53")
def test_the_drivers_own_free_takes_back_what_its_alloc_gave_and_only_that(device, stream):
    """Clients that mix libraries allocate and free with the driver's own calls in the device's context:
    cuMemFree of what cuMemAlloc gave succeeds, and cuMemFreeHost of what cuMemHostAlloc gave; a pointer inside
    an allocation (not its start) and one already freed are refused, and the refused free leaves the memory
    allocated and its bytes unchanged; 0 bytes are refused (as cuMemAlloc documents), 1 byte is not. A driver whose free fails (or frees the wrong allocation) leaks every
    allocation, or frees memory still in use, without a word."""
    cu = cuda_driver(device, "cuMemAlloc, cuMemFree")
    stream.synchronize()
    with context_current(device):
        err, p = cu.cuMemAlloc(1 << 20)
        assert not err, f"cuMemAlloc: {err}"
        err, = cu.cuMemsetD8(p, 0x3C, 1 << 20)
        assert not err, f"cuMemsetD8: {err}"
        err_inner, = cu.cuMemFree(int(p) + 4096)
        host = np.zeros(1 << 20, dtype=np.uint8)
        err_read, = cu.cuMemcpyDtoH(host.ctypes.data, p, 1 << 20)
        err_free, = cu.cuMemFree(p)
        err_again, = cu.cuMemFree(p)
        err, h = cu.cuMemHostAlloc(1 << 16, 0)
        assert not err, f"cuMemHostAlloc: {err}"
        err_host, = cu.cuMemFreeHost(h)
        err_empty, _ = cu.cuMemAlloc(0)
        err_byte, byte = cu.cuMemAlloc(1)
        err_byte_free = cu.cuMemFree(byte)[0] if not err_byte else None
    assert err_empty == cu.CUresult.CUDA_ERROR_INVALID_VALUE, f"cuMemAlloc of 0 bytes: {err_empty}"
    assert not err_byte and err_byte_free == cu.CUresult.CUDA_SUCCESS, \
        f"cuMemAlloc of 1 byte: {err_byte}, its cuMemFree: {err_byte_free}"
    assert err_inner != cu.CUresult.CUDA_SUCCESS, "cuMemFree of a pointer 4 KiB inside an allocation succeeded"
    assert not err_read and (host == 0x3C).all(), f"after the refused free: {err_read}, bytes {set(host.tolist())}"
    assert err_free == cu.CUresult.CUDA_SUCCESS, f"cuMemFree of what cuMemAlloc gave: {err_free}"
    assert err_again != cu.CUresult.CUDA_SUCCESS, "cuMemFree of a pointer already freed succeeded"
    assert err_host == cu.CUresult.CUDA_SUCCESS, f"cuMemFreeHost of what cuMemHostAlloc gave: {err_host}"


@pytest.mark.clause("MEM-64")
def test_a_cuda_buffer_comes_from_the_devices_memory_pool(device):
    """Where the device has memory pools, a Buffer is a stream-ordered allocation from the device's current pool
    (CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, which the driver documents as the pool an allocation came from): the
    pool's release threshold and cuMemPoolTrimTo, which clients that mix libraries set for the whole process,
    then govern it, and it costs no synchronous cuMemAlloc. A backend whose Device.alloc falls back to cuMemAlloc
    on one path (the pure-Python one) while its free stays stream-ordered mixes the two allocators."""
    cu = cuda_driver(device, "cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE)")
    if not device.info.extra.get("memory_pools"):
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}memory pools (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)")
    buffers = [device.alloc(n) for n in (4, 1 << 20)]
    try:
        with context_current(device):
            err, pool = cu.cuDeviceGetMemPool(device.native.device)
            assert not err, f"cuDeviceGetMemPool: {err}"
            got = {}
            for buf in buffers:
                err, handle = cu.cuPointerGetAttribute(
                    cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, buf.handle)
                got[buf.nbytes] = (int(err), int(handle) if not err else None)
    finally:
        for buf in buffers:
            buf.free()
    want = {n: (0, int(pool)) for n in got}
    assert got == want, f"(status, pool) of each buffer by size: {got}, want the device's pool {int(pool):#x}"


@pytest.mark.clause("MEM-54")
def test_host_memory_registered_once_cannot_be_registered_again(device):
    """Clients that mix libraries page-lock their host memory with the driver's own cuMemHostRegister: a range of
    which part or all is registered already is refused with CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED (the same
    range again, and one containing it), and after cuMemHostUnregister the whole range registers. Done with the
    pages far below every other allocation of the driver, then above a device buffer, so that the registration
    is the first, then a later entry of a driver table kept in address order. A driver that takes an overlapping
    registration makes two owners of the pages: the first unregister unpins them under the other."""
    if device.info.backend != "cuda" or not sys.platform.startswith("linux"):
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a CUDA driver on Linux (cuMemHostRegister)")
    cu = device.native.driver
    ok, already = cu.CUresult.CUDA_SUCCESS, cu.CUresult.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
    size, half = 1 << 20, 1 << 19
    err, = cu.cuCtxPushCurrent(device.native.context)
    assert not err, err
    try:
        with device.alloc(size) as buf:
            for place in ("below", "above"):
                host, unmap = host_pages_low(size) if place == "below" else host_pages_above(int(buf.handle), size)
                where = f"the {size} bytes at {host:#x} ({place} the device buffer at {int(buf.handle):#x})"
                registered = False
                try:
                    err, = cu.cuMemHostRegister(host, half, 0)
                    assert err == ok, f"cuMemHostRegister of the first half of {where}: {err}"
                    registered = True
                    err, = cu.cuMemHostRegister(host, half, 0)
                    assert err == already, f"cuMemHostRegister of the first half of {where} again: {err}"
                    err, = cu.cuMemHostRegister(host, size, 0)
                    assert err == already, \
                        f"cuMemHostRegister of {where}, whose first half is registered already: {err}"
                    err, = cu.cuMemHostUnregister(host)
                    assert err == ok, f"cuMemHostUnregister of the first half of {where}: {err}"
                    registered = False
                    err, = cu.cuMemHostRegister(host, size, 0)
                    assert err == ok, f"cuMemHostRegister of {where} after its first half was unregistered: {err}"
                    registered = True
                finally:  # a driver that took a second registration has two to drop: a rerun must not meet them
                    for _ in range(3 if registered else 0):
                        if cu.cuMemHostUnregister(host)[0] != ok:
                            break
                    unmap()
    finally:
        err, _ = cu.cuCtxPopCurrent()
    assert not err, f"cuCtxPopCurrent: {err}"


#: PTX with a 16 MiB module-scope .global array and a kernel that stores into it
PTX_BIG_GLOBAL = """.version 7.0
.target sm_70
.address_size 64

.visible .global .align 4 .b8 big_words[16777216];

.visible .entry touch_big_words()
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<4>;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd1, %r1, 4;
    mov.u64 %rd2, big_words;
    add.s64 %rd3, %rd2, %rd1;
    st.global.u32 [%rd3], %r1;
    ret;
}
"""


@pytest.mark.clause("MEM-55")
def test_linking_ptx_takes_no_device_memory_it_keeps(device, stream):
    """The driver's linker (cuLinkCreate, cuLinkAddData, cuLinkComplete, cuLinkDestroy, as numba-cuda links PTX)
    makes an image; the device memory of the image's .global variables is the module's, taken when the image
    is loaded. Eight links of PTX with a 16 MiB .global array, none of them loaded, leave cuMemGetInfo's free
    memory within 16 MiB of where it was. A linker that checks the image by loading it and keeps what that load
    allocated takes 128 MiB here, and a client linking in a loop runs out of memory it never asked for."""
    cu = cuda_driver(device, "cuLinkCreate")
    data = PTX_BIG_GLOBAL.encode() + b"\0"
    links, array = 8, 16 << 20
    stream.synchronize()
    with context_current(device):
        err, free_before, _ = cu.cuMemGetInfo()
        assert not err, f"cuMemGetInfo: {err}"
        for i in range(links):
            err, state = cu.cuLinkCreate(0, [], [])
            assert not err, f"cuLinkCreate: {err}"
            try:
                err, = cu.cuLinkAddData(state, cu.CUjitInputType.CU_JIT_INPUT_PTX, data, len(data), b"big.ptx", 0,
                                        [], [])
                assert not err, f"cuLinkAddData: {err}"
                err, _, size = cu.cuLinkComplete(state)
                assert not err and size > 0, f"cuLinkComplete of link {i}: {err}, {size} bytes"
            finally:
                cu.cuLinkDestroy(state)
        err, free_after, _ = cu.cuMemGetInfo()
        assert not err, f"cuMemGetInfo: {err}"
    assert free_after > free_before - array, (
        f"{links} links of PTX with a {array >> 20} MiB .global array, none loaded, took "
        f"{(free_before - free_after) >> 20} MiB of device memory (cuMemGetInfo)")


#: bytes of PTX each MEM-61 link takes in: a small kernel padded with comment lines (as generated PTX carries
#: its source lines), so that a link state kept after cuLinkDestroy holds about this much of the process
LINKED_PTX_BYTES = 1 << 20


def _padded_ptx(size: int) -> bytes:
    """PTX of an empty kernel `padded` and comment lines, ``size`` bytes with the NUL that ends it."""
    kernel = b".version 7.0\n.target sm_70\n.address_size 64\n\n.visible .entry padded()\n{\n    ret;\n}\n"
    lines, rest = divmod(size - 1 - len(kernel), 128)
    last = b"// " + b"p" * (rest - 4) + b"\n" if rest >= 4 else b"\n" * rest
    return kernel + (b"// " + b"p" * 124 + b"\n") * lines + last + b"\0"


@pytest.mark.clause("MEM-61")
def test_destroying_a_link_gives_its_memory_back(device):
    """cuLinkDestroy ends a link and frees what it holds (CUDA: the inputs, the linked image): a client that
    links in a loop (numba-cuda links each kernel it compiles) keeps the process's memory bounded. Links of
    1 MiB of PTX (cuLinkCreate, cuLinkAddData, cuLinkComplete, cuLinkDestroy), 16 first and then up to 64 more
    (or 30 s of them), grow the process by less than half a MiB a link; a driver that keeps each destroyed
    link's state grows it by more than the PTX each one took in."""
    cu = cuda_driver(device, "cuLinkCreate")
    data = _padded_ptx(LINKED_PTX_BYTES)
    assert len(data) == LINKED_PTX_BYTES

    def link(count: int) -> None:
        for _ in range(count):
            err, state = cu.cuLinkCreate(0, [], [])
            assert not err, f"cuLinkCreate: {err}"
            try:
                err, = cu.cuLinkAddData(state, cu.CUjitInputType.CU_JIT_INPUT_PTX, data, len(data), b"padded.ptx",
                                        0, [], [])
                assert not err, f"cuLinkAddData: {err}"
                err, _, size = cu.cuLinkComplete(state)
                assert not err and size > 0, f"cuLinkComplete: {err}, {size} bytes"
            finally:
                err, = cu.cuLinkDestroy(state)
            assert not err, f"cuLinkDestroy: {err}"

    with context_current(device):
        linked, grown = resident_growth(link, 8, 64, seconds=30)
    assert grown < linked * LINKED_PTX_BYTES // 2, (
        f"{linked} links of {LINKED_PTX_BYTES >> 20} MiB of PTX, each destroyed, left {grown / 2**20:.1f} MiB more "
        "resident memory")


#: MEM-62's child: opens the target's device (argv[1]) and, its context pushed, creates an interprocess event,
#: takes its IPC handle, memsets 1 MiB on stream a and records the event there; stream b waits for it and copies
#: the buffer's last word to the host; then b, the event and a query of it. Prints what each call returned.
IPC_EVENT_CHILD = """
import json, sys
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
cu = device.native.driver
a, b = device.create_stream(), device.create_stream()
words = 1 << 18
buf = device.alloc(4 * words)
host = np.zeros(1, np.uint32)
got = {}
cu.cuCtxPushCurrent(device.native.context)
flags = cu.CUevent_flags.CU_EVENT_INTERPROCESS | cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
err, event = cu.cuEventCreate(flags)
got["cuEventCreate"] = err.name
got["cuIpcGetEventHandle"] = cu.cuIpcGetEventHandle(event)[0].name
got["cuMemsetD32Async"] = cu.cuMemsetD32Async(buf.handle, 0x5EED5EED, words, a.native)[0].name
got["cuEventRecord"] = cu.cuEventRecord(event, a.native)[0].name
got["cuStreamWaitEvent"] = cu.cuStreamWaitEvent(b.native, event, 0)[0].name
got["cuMemcpyDtoHAsync"] = cu.cuMemcpyDtoHAsync(host.ctypes.data, buf.handle + 4 * (words - 1), 4, b.native)[0].name
got["cuStreamSynchronize"] = cu.cuStreamSynchronize(b.native)[0].name
got["cuEventSynchronize"] = cu.cuEventSynchronize(event)[0].name
got["cuEventQuery"] = cu.cuEventQuery(event)[0].name
got["last word"] = hex(int(host[0]))
cu.cuEventDestroy(event)
cu.cuCtxPopCurrent()
print(json.dumps(got))
"""


@pytest.mark.clause("MEM-62")
def test_an_interprocess_event_orders_work_like_any_event(device, target):
    """An event made to be shared with other processes (CU_EVENT_INTERPROCESS, with timing disabled, as CUDA
    requires; cuIpcGetEventHandle, in the driver API's memory management with cuIpcGetMemHandle, hands it over)
    works in the process that made it as any event does: another stream's wait for it (cuStreamWaitEvent) lets
    that stream's copy see the memset recorded before it, and cuEventSynchronize of it returns. A driver that
    keeps such an event's state where other processes read it, and takes a record as done only once a later one
    has completed, never ends either wait. A child process runs it, so that a wait that never ends is seen."""
    cuda_driver(device, "CU_EVENT_INTERPROCESS")
    if not sys.platform.startswith("linux"):
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}Linux (CUDA's interprocess events)")
    try:
        got = child_json(target, IPC_EVENT_CHILD, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the child had not ended 60 s after it started: a wait for the interprocess event hangs")
    assert all(v == "CUDA_SUCCESS" for k, v in got.items() if k != "last word"), got
    assert got["last word"] == hex(0x5EED5EED), f"stream b's copy after its wait for the event: {got['last word']}"


@pytest.mark.clause("MEM-60")
def test_the_drivers_16_bit_memsets_write_16_bit_values(device, stream):
    """cuMemsetD16Async and cuMemsetD2D16Async (through `Stream.native`, the device's context pushed) set each
    16-bit element they cover to the value, and nothing else: 8 elements at a buffer's start, then 2 rows of 4
    elements at a pitch of 16 bytes further on; every other byte keeps its poison. A driver that stores 16-bit
    memsets as 32-bit words writes twice the bytes, zeros between the values."""
    cu = cuda_driver(device, "cuMemsetD16Async")
    with poisoned(device, stream, 128) as buf:
        stream.synchronize()
        base = int(buf.handle)
        with context_current(device):
            errors = {"cuMemsetD16Async": cu.cuMemsetD16Async(base, 0xBEEF, 8, stream.native)[0],
                      "cuMemsetD2D16Async": cu.cuMemsetD2D16Async(base + 64, 16, 0x1234, 4, 2, stream.native)[0],
                      "cuStreamSynchronize": cu.cuStreamSynchronize(stream.native)[0]}
        assert not any(errors.values()), errors
        got = read(stream, buf, np.uint8)
    want = np.full(128, POISON, np.uint8)
    want[:16] = np.full(8, 0xBEEF, np.uint16).view(np.uint8)
    for row in range(2):
        start = 64 + 16 * row
        want[start:start + 8] = np.full(4, 0x1234, np.uint16).view(np.uint8)
    assert got.tolist() == want.tolist(), f"after the 16-bit memsets the buffer holds {got.tolist()}"


#: MEM-63's child: opens the target's device, fills a 64 KiB buffer with a conformance kernel, copies pageable
#: memory into it and back (the staging path), and closes the device with the buffer and the kernel's module
#: never closed; told "leak", it also allocates 512 bytes through the driver's own API in the device's context
#: first and never frees them. Prints the words it read back.
LEAK_CHECK_CHILD = """
import json, sys
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
target = get(sys.argv[1])
device = _open(target)
stream = device.create_stream()
buf = device.alloc(1 << 16)
stream.launch(target.compile_kernel(device, "fill_u32"), 128, 128, (buf, np.uint32(7), np.uint32(1 << 14)))
stream.copy_htod(buf, np.arange(4, dtype=np.uint32))
out = np.zeros(8, np.uint32)
stream.copy_dtoh(out, buf)
stream.synchronize()
if sys.argv[2:] == ["leak"]:
    cu = device.native.driver
    assert not cu.cuCtxPushCurrent(device.native.context)[0]
    err, _ = cu.cuMemAlloc(512)
    assert not err, err
    cu.cuCtxPopCurrent()
device.close()
print(json.dumps(out.tolist()))
"""


@pytest.mark.clause("MEM-63")
def test_closing_a_device_leaves_the_drivers_leak_check_nothing_to_report(device, target):
    """Closing a device gives back everything the library allocated in the driver for it, the buffers its
    caller never freed, a module never closed and the staging memory of pageable copies included: the driver's
    own leak check (where the target has one: the fake libcuda's), asked for, finds nothing when the context
    ends or the process exits. The driver counts every allocation, where LIFE's resident-memory bounds see only
    what grows past them. The same program that also leaves 512 bytes it allocated through the driver's own API
    must fail the check: a check that cannot fail shows nothing."""
    cuda_driver(device, "its own cuMemAlloc, for the leak the check must find")
    if not target.leak_check:
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a driver leak check (Target.leak_check)")
    runs = {}
    for case in ("closed", "leak"):
        runs[case] = subprocess.run([sys.executable, "-c", LEAK_CHECK_CHILD, target.name, case], capture_output=True,
                                    text=True, timeout=120,
                                    env={**os.environ, **target.environment(), **target.leak_check})
    closed, leak = runs["closed"], runs["leak"]
    assert closed.returncode == 0, f"closing the device left the driver's leak check something: {closed.stderr[-1500:]}"
    for run in (closed, leak):  # each ran to its end
        assert run.stdout.strip().endswith("[0, 1, 2, 3, 7, 7, 7, 7]"), f"{run.stdout[-500:]}; {run.stderr[-1500:]}"
    assert leak.returncode != 0, (
        f"the driver's leak check did not find 512 bytes allocated through cuMemAlloc and never freed: the "
        f"program exited with status {leak.returncode}; {leak.stderr[-1500:]}")


@pytest.mark.clause("MEM-68")
def test_a_memset_on_the_legacy_stream_waits_for_the_blocking_streams_alone(device, stream):
    """CUDA's legacy default stream (the NULL stream, what cuMemsetD8Async(..., 0) and every runtime call without
    a stream use) starts its work only after the work queued before it on each blocking stream of its context
    (cuStreamCreate with flags 0), and never waits for a CU_STREAM_NON_BLOCKING one: clients that mix the
    runtime's default stream with streams of their own rely on the first, libraries like this one (whose streams
    are non-blocking) on the second. A host function (cuLaunchHostFunc) holds each stream until released."""
    cu = cuda_driver(device, "cuLaunchHostFunc")
    released = threading.Event()
    hold = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: released.wait(20) and None)
    function = cu.CUhostFn(ctypes.cast(hold, ctypes.c_void_p).value)
    waited, done = {}, {}
    with poisoned(device, stream, 64) as buf:
        stream.synchronize()
        with context_current(device):
            for kind, flags in (("blocking", 0), ("non-blocking", cu.CUstream_flags.CU_STREAM_NON_BLOCKING)):
                released.clear()
                err, held = cu.cuStreamCreate(flags)
                assert not err, f"cuStreamCreate({kind}): {err}"
                try:
                    assert not cu.cuLaunchHostFunc(held, function, 0)[0], "cuLaunchHostFunc"
                    assert not cu.cuMemsetD8Async(int(buf.handle), 0x11, 64, 0)[0], "cuMemsetD8Async on the NULL stream"
                    deadline, states = time.monotonic() + (0.3 if kind == "blocking" else 10), []
                    while time.monotonic() < deadline and cu.CUresult.CUDA_SUCCESS not in states:
                        states.append(cu.cuStreamQuery(0)[0])
                        time.sleep(0.01)
                    waited[kind] = cu.CUresult.CUDA_SUCCESS not in states
                    assert set(states) <= {cu.CUresult.CUDA_SUCCESS, cu.CUresult.CUDA_ERROR_NOT_READY}, states
                finally:
                    released.set()
                    done[kind] = cu.cuCtxSynchronize()[0]
                    cu.cuStreamDestroy(held)
        assert done == {"blocking": 0, "non-blocking": 0}, f"cuCtxSynchronize after the release: {done}"
        assert read(stream, buf, np.uint8).tolist() == [0x11] * 64
    assert waited == {"blocking": True, "non-blocking": False}, \
        f"the NULL stream's memset waited for the held stream (True) or completed while it was held: {waited}"


@pytest.mark.clause("MEM-69")
def test_the_driver_finds_the_allocation_of_an_address_and_none_for_a_freed_one(device):
    """cuMemGetAddressRange names the allocation that holds an address (clients find a buffer's start and size
    from an interior pointer so), and fails for an address no allocation holds any more: a driver whose lookup
    answers some other allocation for an address it does not find hands a freed pointer the range of memory
    that is not its own, and every check built on that lookup (a copy's or a memset's range) lets it through."""
    cu = cuda_driver(device, "cuMemGetAddressRange")
    n = 4 << 20  # of a size a driver maps on its own, not one it carves out of a larger mapping
    with context_current(device):
        err, kept = cu.cuMemAlloc(n)
        assert not err, f"cuMemAlloc: {err}"
        try:
            err, freed = cu.cuMemAlloc(n)
            assert not err, f"cuMemAlloc: {err}"
            assert not cu.cuMemFree(freed)[0], "cuMemFree"
            err_kept, base, size = cu.cuMemGetAddressRange(int(kept) + 100)
            after_free = {at: cu.cuMemGetAddressRange(int(freed) + at)[0] for at in (0, 100)}
        finally:
            cu.cuMemFree(kept)
    assert not err_kept, f"cuMemGetAddressRange of byte 100 of a live allocation: {err_kept}"
    assert int(base) == int(kept) and int(size) >= n, \
        f"byte 100 of the allocation at {int(kept):#x} of {n} bytes is said to lie in [{int(base):#x}, +{int(size)})"
    found = {at: err for at, err in after_free.items() if err == cu.CUresult.CUDA_SUCCESS}
    assert not found, f"cuMemGetAddressRange found an allocation for bytes {sorted(found)} of a freed one"


#: the child of MEM-70: with a host function holding a CU_STREAM_NON_BLOCKING stream, allocates 1 MiB on it
#: (cuMemAllocAsync), frees it on it (cuMemFreeAsync) and queues after the free a copy into it (argv[2]
#: "copy_to": cuMemcpyHtoDAsync from pinned memory), out of it ("copy_from": cuMemcpyDtoHAsync into pinned
#: memory) or a memset of it ("memset": cuMemsetD8Async); then releases the stream and waits for it; prints the
#: queueing call's and the wait's results
USE_AFTER_STREAM_FREE_CHILD = """
import ctypes, json, sys, threading
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
case, n = sys.argv[2], 1 << 20
cu = device.native.driver
assert not cu.cuCtxPushCurrent(device.native.context)[0], "cuCtxPushCurrent"
released = threading.Event()
hold = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: released.wait(20) and None)
err, held = cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING)
assert not err, f"cuStreamCreate: {err}"
err, host = cu.cuMemAllocHost(n)
assert not err, f"cuMemAllocHost: {err}"
assert not cu.cuLaunchHostFunc(held, cu.CUhostFn(ctypes.cast(hold, ctypes.c_void_p).value), 0)[0], "cuLaunchHostFunc"
err, p = cu.cuMemAllocAsync(n, held)
assert not err, f"cuMemAllocAsync: {err}"
assert not cu.cuMemFreeAsync(p, held)[0], "cuMemFreeAsync"
if case == "copy_to":
    call = cu.cuMemcpyHtoDAsync(p, host, n, held)[0]
elif case == "copy_from":
    call = cu.cuMemcpyDtoHAsync(host, p, n, held)[0]
else:
    call = cu.cuMemsetD8Async(p, 0x5A, n, held)[0]
released.set()
sync = cu.cuStreamSynchronize(held)[0]
print(json.dumps({"call": call.name, "sync": sync.name}))
"""


@pytest.mark.clause("MEM-70")
@pytest.mark.parametrize("case", ["copy_to", "copy_from", "memset"])
def test_a_copy_queued_after_its_memorys_stream_ordered_free_ends_without_a_crash(device, target, case):
    """A copy or memset queued on a stream after that stream's cuMemFreeAsync of its memory (a use after free
    that the call cannot see: the memory is live when the call is made, freed by the time the stream reaches
    the copy) is undefined in CUDA, but the program that made the mistake must be able to see it: the copy
    completes into memory the pool still maps, or the stream's wait reports a fault. A driver (or simulator)
    that notices the memory is gone and still touches it kills the process with a segmentation fault, with
    nothing to debug from. A host function holds the stream until all three are queued; a child process runs it,
    since a fault loses the context."""
    cuda_driver(device, "cuMemAllocAsync, cuMemFreeAsync and cuLaunchHostFunc")
    got = child_json(target, USE_AFTER_STREAM_FREE_CHILD, case, timeout=60)  # a negative status: the killing signal
    assert got["sync"].startswith("CUDA_"), f"{case}: cuStreamSynchronize gave {got}"
