"""Streams and events on the device's one queue, and the byte-granular copy/fill kernel.

A stream records into its own open encoder and submits it when it must. Everything that touches the
queue, an encoder or the device's readback list holds the device lock; waits for the GPU do not."""

from __future__ import annotations

import concurrent.futures
import itertools
import operator
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import api
from ...errors import Timeout
from .memory import WebGPUBuffer
from .native import call, wait
from .module import WebGPUKernel

if TYPE_CHECKING:
    from .device import WebGPUDevice


class Fencer:
    """Starts fence maps on a thread of its own, for callers that must not block. wgpu-py's ``map_async``
    wakes its poll thread, which then waits in the driver for the queue to drain while holding wgpu-native's
    lock, and ``map_async`` itself waits for that lock: called from ``record()``, ``query()`` or a wait with
    a timeout it would block the caller until the GPU is idle."""

    #: How fences map: wgpu-py's own ``read_buffer`` mode (wgpu is pinned to 0.32), which skips the empty
    #: submission its plain READ map makes first (a workaround for maps of buffers whose writes were never
    #: submitted); a Fence exists only once the copy into it was submitted.
    read_mode = "READ_NOSYNC"

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ironaccel-webgpu-fence")

    def start(self, fence: Fence) -> None:
        self._pool.submit(fence.map)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class Fence:
    """A mappable buffer that a copy at one point of the queue fills (a fence's 4 bytes, or a readback):
    its map resolves once the GPU got there. The map is started once, by the first thread to need it: a
    thread that waits without a timeout maps it itself (it blocks anyway: no hop to another thread), the
    others have the Fencer start it. ``position``: the queue submissions it comes after; once a fence is
    seen complete, every fence at or before its position is too (the device's ``_completed``).

    The started map's promise is kept on the fence itself; a Future to hand it over is made only for a
    thread that must wait for a map another thread is starting (issue 30: a Future per fence cost ~5 us
    of every synchronize and readback on lavapipe's host). ``_mapped``: a wait saw the map resolve, so a
    readback's delivery after its own fence's wait does not wait again."""

    __slots__ = ("buffer", "position", "_dev", "_started", "_handover", "_claimed", "_queued", "_mapped", "_lock")

    def __init__(self, device: WebGPUDevice, buffer: Any):
        self.buffer = buffer
        self.position = device._submissions
        self._dev = device
        self._started: tuple[Any, BaseException | None] | None = None  # (map promise, or its start's error)
        self._handover: concurrent.futures.Future | None = None  # _started for a waiter with a timeout
        self._claimed = False  # a thread has started (or is starting) the map
        self._queued = False  # the Fencer was asked to
        self._mapped = False  # the map resolved: its buffer is readable
        self._lock = threading.Lock()

    def map(self) -> None:
        """Start the map on this thread, unless another thread has."""
        with self._lock:
            if self._claimed:
                return
            self._claimed = True
        try:
            started = (call(self.buffer.map_async, self._dev._fencer.read_mode), None)
        except Exception as exc:  # the waiters' to raise
            started = (None, exc)
        with self._lock:
            self._started = started
            handover = self._handover
        if handover is not None:
            handover.set_result(started)

    def start(self) -> None:
        """Have the Fencer start the map, unless some thread has: a later query() sees the GPU's progress."""
        with self._lock:
            if self._claimed or self._queued:
                return
            self._queued = True
        self._dev._fencer.start(self)

    def done(self) -> bool:
        if self.position <= self._dev._completed:
            return True
        self.start()
        started = self._started
        if started is None:
            return False
        promise, error = started
        if error is not None:
            raise error
        if promise._state == "pending":
            return False
        self._dev._complete(self.position)
        return True

    def wait(self, op: str, timeout: float | None) -> None:
        """Wait until the GPU got here and the map resolved; Timeout(op) past ``timeout`` seconds."""
        if self._mapped:
            return
        deadline = None
        if timeout is None:
            self.map()
        else:
            deadline = time.monotonic() + timeout
            self.start()
        with self._lock:
            started = self._started
            if started is None:  # another thread is starting the map
                if self._handover is None:
                    self._handover = concurrent.futures.Future()
                handover = self._handover
        if started is None:
            try:
                started = handover.result(timeout)
            except concurrent.futures.TimeoutError:
                raise Timeout(op, timeout, "the GPU has not reached this point yet") from None  # type: ignore[arg-type]
        promise, error = started
        if error is not None:
            raise error
        wait(promise, op, timeout, deadline)
        self._mapped = True
        self._dev._complete(self.position)


class WebGPUEvent(api.Event):
    def __init__(self, stream: WebGPUStream, timing: bool, fence: Fence, readback_seq: int, timestamp: Any):
        super().__init__(stream, timing)
        self._place(stream, fence, readback_seq, timestamp)

    def _place(self, stream: WebGPUStream, fence: Fence, readback_seq: int, timestamp: Any) -> None:
        """Mark this point (a new record, or a re-record: every field of the old point replaced)."""
        self._stream = stream
        self._fence = fence  # resolves once the queue got to this event
        fence.start()
        self._readback_seq = readback_seq
        self._timestamp = timestamp  # a mappable 8-byte buffer when timing
        self._ns: int | None = None

    def _query(self) -> bool:
        if not self._fence.done():
            return False
        self._stream.device._deliver_readbacks(self._readback_seq, "Event.query")
        return True

    def _synchronize(self, timeout: float | None = None) -> None:
        self._fence.wait("Event.synchronize", timeout)
        self._stream.device._deliver_readbacks(self._readback_seq, "Event.synchronize")

    def _nanoseconds(self) -> int:
        if self._ns is None:
            self._synchronize()
            import wgpu

            buf = self._timestamp
            call(buf.map_sync, wgpu.MapMode.READ)
            self._ns = int(np.frombuffer(buf.read_mapped(), dtype=np.uint64)[0])
            buf.unmap()
        return self._ns

    def _elapsed_ms(self, end: api.Event) -> float:
        assert isinstance(end, WebGPUEvent)
        return (end._nanoseconds() - self._nanoseconds()) / 1e6


#: Bytes of ``write_buffer`` the device leaves in wgpu's pending writes before it submits them (an empty
#: submission). wgpu copies each write into staging of its own, freed only after the queue submission that
#: carries it completes: a program that only uploads would hold every upload's staging until it waits (LIFE-87).
#: 8 MiB: a submission costs ~20-30 us on lavapipe beyond the copies it carries, so the small-copy path (issue
#: 30: 256 B-64 KiB, ~7-10 us a call) pays one per 128 or more calls, and a program that only uploads holds at
#: most 8 MiB (plus one write) unsubmitted, as Vulkan's staged path holds ~8 MiB in LIFE-87's program.
PENDING_WRITES_BOUND = 8 << 20

#: Bytes of mappable readback buffers the device holds for ``copy_dtoh``s not yet delivered: a ``copy_dtoh`` that
#: would take them past it first waits for and delivers the earlier ones, so a burst of readbacks queued at once
#: holds this much (plus the one being enqueued), not a copy of the whole burst (LIFE-88: 512 MiB for a 512 MiB
#: burst before). 256 MiB, as the OpenGL backend's and the staged Vulkan backend's staging caches.
PENDING_READBACK_BOUND = 256 << 20


#: The dtype kinds of the host arrays the public copies' inline checks admit: plain numbers (bool, int, uint,
#: float, complex), which hold no Python objects and have a buffer layout (api._host_bytes's rule, narrowed).
PLAIN_KINDS = "biufc"
UINT8 = np.dtype(np.uint8)


def _inline_htod(checked: Any) -> Any:
    """``checked`` (api.Stream.copy_htod or copy_htod_deferred) with its common case admitted inline: a
    C-contiguous ndarray of plain numbers, word-aligned and in range, into a live plain buffer of this open
    device (WebGPU has no graphs: no stream captures) goes to ``write_buffer`` at once, as a raw wgpu-py
    program's one call (issue 30: the public checks cost as much as the driver call). Anything else,
    errors included, takes ``checked``."""

    def copy(self: WebGPUStream, dst: api.Buffer, src: object, *, dst_offset: int = 0) -> None:
        dev = self._dev
        if type(src) is np.ndarray and type(dst) is WebGPUBuffer and type(dst_offset) is int \
                and dst._device is dev and not dst._freed and not dev._closed:
            n = src.nbytes
            if 0 < n and 0 <= dst_offset and dst_offset + n <= dst._nbytes and not (n | dst_offset) & 3 \
                    and src.dtype.kind in PLAIN_KINDS and src.flags.c_contiguous:
                self._write(dst._gpu_buffer, dst_offset, src, n)
                return
        checked(self, dst, src, dst_offset=dst_offset)

    copy.__name__, copy.__doc__ = checked.__name__, checked.__doc__
    copy.__qualname__ = f"WebGPUStream.{checked.__name__}"
    return copy


class WebGPUStream(api.Stream):
    def __init__(self, device: WebGPUDevice):
        super().__init__(device)
        self._dev: WebGPUDevice = device
        self._encoder: Any = None
        self._pass: Any = None  # the compute pass open on the encoder: back-to-back launches share it
        self._pass_dispatch: tuple[Any, Any] | None = None  # the (pipeline, bind group) last set on it

    def _native(self) -> Any:
        """The GPUQueue (WebGPU has one queue per device: every stream records into it)."""
        return self._dev._queue

    # -- batching (callers hold the device lock) -------------------------------------------------------
    def _enc(self) -> Any:
        """The open encoder, for anything but a launch: ends the open compute pass first."""
        if self._pass is not None:
            self._pass.end()
            self._pass = self._pass_dispatch = None
        if self._encoder is None:
            self._encoder = self._dev._gpu.create_command_encoder()
            self._dev._unsubmitted.add(self)
        return self._encoder

    def _flush(self) -> None:
        if self._encoder is not None:
            enc, self._encoder = self._enc(), None
            self._dev._unsubmitted.discard(self)
            self._dev._submissions += 1
            self._dev._pending_writes = 0  # a submission carries the queue's pending writes first
            call(self._dev._queue.submit, [call(enc.finish)])

    def _bytes(self, dst: Any, dst_offset: int, src: Any, src_offset: int, nbytes: int, fill: int) -> None:
        """Byte-granular copy (``src`` given) or fill (``src`` None) through the internal kernel."""
        dev = self._dev
        layout, pipe = dev._byte_pipeline()
        first_word = dst_offset // 4
        words = -(-(dst_offset + nbytes) // 4) - first_word
        groups = -(-words // BYTE_KERNEL_BLOCK)
        gx = min(groups, dev.info.limits.max_grid[0])
        gy = -(-groups // gx)
        params = np.array([dst_offset, src_offset, nbytes, 0 if src is not None else 1, fill * 0x01010101, 0, 0, 0],
                          dtype=np.uint32)
        u = dev._usage
        uniform = call(dev._gpu.create_buffer_with_data, data=params, usage=u.UNIFORM)
        if src is None:
            src = dev._new_buffer(4, u.STORAGE)
        bind = call(dev._gpu.create_bind_group, layout=layout,
                    entries=[{"binding": 0, "resource": {"buffer": dst}}, {"binding": 1, "resource": {"buffer": src}},
                             {"binding": 2, "resource": {"buffer": uniform}}])
        p = self._enc().begin_compute_pass()
        p.set_pipeline(pipe)
        p.set_bind_group(0, bind)
        p.dispatch_workgroups(gx, gy, 1)
        p.end()

    def _write(self, gpu_buffer: Any, offset: int, src: Any, nbytes: int) -> None:
        """``write_buffer`` of word-aligned host bytes (``nbytes`` of them), after what this stream recorded
        before."""
        dev = self._dev
        with dev._lock:
            if self._encoder is not None:  # write_buffer lands on the queue timeline now: what came before goes first
                self._flush()
            dev._submissions += 1  # a write_buffer is queue work a fence must come after
            call(dev._queue.write_buffer, gpu_buffer, offset, src)
            dev._pending_writes += nbytes
            if dev._pending_writes > PENDING_WRITES_BOUND:  # LIFE-87: their staging is freed only once submitted
                dev._pending_writes = 0
                call(dev._queue.submit, [])

    # -- the public API's hot paths --------------------------------------------------------------------
    copy_htod = _inline_htod(api.Stream.copy_htod)
    copy_htod_deferred = _inline_htod(api.Stream.copy_htod_deferred)  # write_buffer copies: the stronger promise

    def copy_dtoh(self, dst: object, src: api.Buffer, *, src_offset: int = 0) -> None:
        """api.Stream.copy_dtoh with its common case admitted inline (as ``_inline_htod``'s: a writable
        C-contiguous ndarray of plain numbers, any offset and size in range); anything else takes its checks."""
        dev = self._dev
        if type(dst) is np.ndarray and type(src) is WebGPUBuffer and type(src_offset) is int \
                and src._device is dev and not src._freed and not dev._closed:
            n = dst.nbytes
            if 0 < n and 0 <= src_offset and src_offset + n <= src._nbytes and dst.dtype.kind in PLAIN_KINDS:
                flags = dst.flags
                if flags.c_contiguous and flags.writeable:
                    self._copy_dtoh(dst if dst.dtype is UINT8 and dst.ndim == 1 else dst.reshape(-1).view(UINT8),
                                    src, src_offset)
                    return
        api.Stream.copy_dtoh(self, dst, src, src_offset=src_offset)

    # -- the private API --------------------------------------------------------------------------------
    def _copy_htod(self, dst: api.Buffer, dst_offset: int, src: np.ndarray) -> None:
        n = src.nbytes
        if dst_offset % 4 == 0 and n % 4 == 0:
            self._write(dst._gpu_buffer, dst_offset, src, n)
            return
        padded = np.zeros(-(-n // 4) * 4, dtype=np.uint8)
        padded[:n] = src
        dev = self._dev
        with dev._lock:
            staging = dev._new_buffer(n, dev._usage.STORAGE | dev._usage.COPY_DST)
            self._write(staging, 0, padded, padded.nbytes)
            self._bytes(dst._native_handle(), dst_offset, staging, 0, n, 0)

    def _copy_dtoh(self, dst: np.ndarray, src: api.Buffer, src_offset: int) -> None:
        dev = self._dev
        start = src_offset // 4 * 4
        size = -(-(src_offset + dst.nbytes) // 4) * 4 - start
        u = dev._usage
        with dev._lock:
            if dev._readbacks and dev._readback_bytes + size > PENDING_READBACK_BOUND:
                dev._deliver_readbacks(dev._readback_seq, "Stream.copy_dtoh")
            buf = dev._new_buffer(size, u.MAP_READ | u.COPY_DST)
            self._enc().copy_buffer_to_buffer(src._native_handle(), start, buf, 0, size)
            self._flush()
            readback = Fence(dev, buf)  # the last queue work: a fence for everything submitted before it
            dev._readback_seq += 1
            dev._readbacks.append((dev._readback_seq, readback, src_offset - start, dst))
            dev._readback_bytes += size
            dev._last_fence = readback

    def _copy_dtod(self, dst: api.Buffer, dst_offset: int, src: api.Buffer, src_offset: int, nbytes: int) -> None:
        dev = self._dev
        d, s = dst._native_handle(), src._native_handle()
        with dev._lock:
            if dst_offset % 4 == 0 and src_offset % 4 == 0 and nbytes % 4 == 0:
                enc = self._enc()
                if d is s:  # WebGPU refuses a copy from a buffer to itself: through a scratch buffer
                    scratch = dev._new_buffer(nbytes, dev._usage.COPY_SRC | dev._usage.COPY_DST)
                    enc.copy_buffer_to_buffer(s, src_offset, scratch, 0, nbytes)
                    s, src_offset = scratch, 0
                enc.copy_buffer_to_buffer(s, src_offset, d, dst_offset, nbytes)
                return
            if d is s:  # one buffer cannot be bound twice writable: go through a scratch copy
                scratch = dev._new_buffer(nbytes + 8, dev._usage.STORAGE | dev._usage.COPY_DST)
                start = src_offset // 4 * 4
                self._enc().copy_buffer_to_buffer(s, start, scratch, 0, -(-(src_offset + nbytes) // 4) * 4 - start)
                s, src_offset = scratch, src_offset - start
            self._bytes(d, dst_offset, s, src_offset, nbytes, 0)

    def _fill(self, buf: api.Buffer, offset: int, nbytes: int, value: int) -> None:
        with self._dev._lock:
            if value == 0 and offset % 4 == 0 and nbytes % 4 == 0:
                self._enc().clear_buffer(buf._native_handle(), offset, nbytes)
            else:
                self._bytes(buf._native_handle(), offset, None, 0, nbytes, value)

    def _record(self, timing: bool) -> WebGPUEvent:
        with self._dev._lock:
            return WebGPUEvent(self, timing, *self._point(timing))

    def _rerecord(self, event: api.Event) -> None:
        """A new point (fence, readbacks, timestamp buffer) in the same event; nothing to keep for waits (_wait)."""
        assert isinstance(event, WebGPUEvent)
        with self._dev._lock:
            event._place(self, *self._point(event._timing))

    def _point(self, timing: bool) -> tuple[Fence, int, Any]:
        """(fence, readback sequence, timestamp buffer or None) after everything enqueued so far, submitted.
        (The caller holds the device lock.)"""
        dev = self._dev
        stamp = None
        if timing:
            u = dev._usage
            qs = call(dev._gpu.create_query_set, type="timestamp", count=1)
            resolved = dev._new_buffer(8, u.QUERY_RESOLVE | u.COPY_SRC)
            stamp = dev._new_buffer(8, u.MAP_READ | u.COPY_DST)
            enc = self._enc()
            enc.begin_compute_pass(timestamp_writes={"query_set": qs, "beginning_of_pass_write_index": 0}).end()
            enc.resolve_query_set(qs, 0, 1, resolved, 0)
            enc.copy_buffer_to_buffer(resolved, 0, stamp, 0, 8)
        return self._fenced_flush(), dev._readback_seq, stamp

    def _wait(self, event: api.Event) -> None:
        """Nothing to enqueue: with one queue, and record() having submitted everything before the
        event, whatever this stream submits from now on already runs after it."""

    def _synchronize(self, timeout: float | None = None) -> None:
        self._wait_for_queue("Stream.synchronize", timeout)

    def _wait_for_queue(self, op: str, timeout: float | None) -> None:
        """Wait for a fence after this stream's work and all queue work before it."""
        dev = self._dev
        with dev._lock:
            fence = self._fenced_flush()
            upto = dev._readback_seq
        fence.wait(op, timeout)
        dev._deliver_readbacks(upto, op)

    def _fenced_flush(self) -> Fence:
        """A fence after this stream's work and all queue work before it, submitted: the device's last
        fence when nothing was recorded here or submitted anywhere since, else a new one (the last from
        now on). Readbacks only come with a submission, so the readbacks a fence covers are all those
        enqueued before it is returned."""
        dev = self._dev
        last = dev._last_fence
        if self._encoder is None and last is not None and last.position == dev._submissions:
            return last
        buf = dev._fence(self._enc())
        self._flush()
        dev._last_fence = Fence(dev, buf)
        return dev._last_fence

    def _launch_prepared(self, plan: api.LaunchPlan, packing: tuple[tuple[int, ...], tuple[int, ...]],
                         args: list[Any]) -> None:
        """Encode one compute pass with the kernel's cached dispatch (``WebGPUKernel._dispatch``): the
        last launch's when every argument is the very same object (a live Buffer keeps its GPU buffer, a
        numpy scalar is immutable), else the one keyed by these GPU buffers and scalar bytes (bytes, not
        values: 0.0 and -0.0 are equal)."""
        kernel: WebGPUKernel = plan.kernel  # type: ignore[assignment]
        block, grid = plan.block, plan.grid
        with self._dev._lock:
            last = kernel._last  # (block, argument getters, dispatch); a kernel's argument count is fixed
            if last is not None and last[0] == block and all(map(operator.is_, [get() for get in last[1]], args)):
                dispatch = last[2]
            else:
                buffer_at, scalar_at = packing
                key = (block, *[args[i]._gpu_buffer for i in buffer_at], *[args[i].tobytes() for i in scalar_at])
                dispatch = kernel._dispatches.get(key)
                if dispatch is None:
                    dispatch = kernel._dispatch(key, block, tuple(args[i]._gpu_buffer for i in buffer_at),
                                                [args[i] for i in scalar_at])
                else:
                    kernel._dispatches.move_to_end(key)
                # The Buffers by weak reference: a kernel that held its last launch's Buffers kept them alive
                # after the caller dropped them, for as long as the kernel lived (LIFE-73).
                # A dead reference answers None, never an argument, so a new Buffer at a reused address misses.
                getters = [itertools.repeat(a).__next__ for a in args]
                for i in buffer_at:
                    getters[i] = weakref.ref(args[i])
                kernel._last = block, getters, dispatch
            p = self._pass
            if p is None:
                p = self._pass = self._enc().begin_compute_pass()
            if dispatch is not self._pass_dispatch:
                p.set_pipeline(dispatch[0])
                p.set_bind_group(0, dispatch[1])
                self._pass_dispatch = dispatch
            p.dispatch_workgroups(*grid)


BYTE_KERNEL_BLOCK = 64

# Merges bytes into whole words: each invocation owns one destination word, so no two write the same word.
BYTE_KERNEL_WGSL = """
struct Params { dst_off: u32, src_off: u32, n: u32, fill_mode: u32, fill: u32 }
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

fn src_byte(i: u32) -> u32 {
    let b = p.src_off + i;
    return (src[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

@compute @workgroup_size(64)
fn ia_bytes(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let w = (p.dst_off >> 2u) + g.x + g.y * nw.x * 64u;
    let end = p.dst_off + p.n;
    if (w * 4u >= end) { return; }
    var word = dst[w];
    for (var k = 0u; k < 4u; k++) {
        let b = w * 4u + k;
        if (b >= p.dst_off && b < end) {
            var v = p.fill & 0xffu;
            if (p.fill_mode == 0u) { v = src_byte(b - p.dst_off); }
            word = (word & ~(0xffu << (k * 8u))) | (v << (k * 8u));
        }
    }
    dst[w] = word;
}"""
