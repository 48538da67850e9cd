"""Streams and events: in-order queues of work on a timeline semaphore, and points in them.

A stream records work into an open command buffer and submits it in batches (see the package docstring for
when); an event is a (stream, timeline value) pair, with a timestamp query slot when timed. What the host
owes a completed submission (a ``copy_dtoh`` destination filled from staging, staging memory and command
buffers recycled) is done here when a query or a wait sees it complete; a launch's descriptor set comes
from the device's ``module.DescriptorSets``, which outlive batches.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ... import api, hostcopy
from ...api import Dim3
from ...errors import Timeout
from . import native
from .memory import Allocation, VulkanBuffer
from .module import Binds, LaunchBinding

if TYPE_CHECKING:
    from .device import VulkanDevice
    from .graph import VulkanGraph

BATCH_COMMANDS = 64  # commands recorded before a stream submits on its own
#: A stream that submitted less than this long ago keeps recording (a burst of commands: a vkQueueSubmit
#: costs ~40 µs on the H200's driver, 5x a recorded launch); the device's Flusher submits what a burst leaves.
SUBMIT_GAP_S = 500e-6
FLUSHER_IDLE_S = 1.0  # the flusher's longest sleep: a device collected without close() frees its thread
MAX_IN_FLIGHT = 64  # submissions per stream before the host waits for the oldest
TIMESTAMP_SLOTS = 1024  # timestamp queries per VkQueryPool


class Deadline:
    """The time limit of a ``synchronize(timeout=)``: the op its Timeout names, and the time left. Every wait
    under it is a finite vkWaitSemaphores, so no thread stays blocked in the driver past it."""

    __slots__ = ("op", "seconds", "_end")

    def __init__(self, op: str, seconds: float):
        self.op, self.seconds = op, seconds
        self._end = time.monotonic() + seconds

    def nanoseconds_left(self) -> int:
        return max(0, int((self._end - time.monotonic()) * 1e9))

    def expired(self) -> Timeout:
        return Timeout(self.op, self.seconds, "the work is still running; nothing was lost: synchronize again to wait for it")


def deadline(op: str, timeout: float | None) -> Deadline | None:
    return None if timeout is None else Deadline(op, timeout)


class Batch:
    """One submission of a stream: its command buffer and what the host owes it once it completes. A
    graph's recording is one too (``graph.py``): the same fields, kept until the graph is released.

    ``pipeline``, ``ranges`` and ``scalars`` are what the command buffer has bound for launches (None:
    nothing known): the pipeline, the buffer ranges of the descriptor set and the push-constant bytes, so a
    launch records only the binds that differ and looks up no descriptor set for the ranges bound already.
    Bound state lasts across dispatches, barriers, copies, fills and timestamps; a new command buffer or a
    ``vkCmdExecuteCommands`` (after which the spec leaves it undefined) starts from nothing. (A bound set
    stays valid while the batch is open: its buffers and pool are released only after the work enqueued.)"""

    __slots__ = ("cmd", "handle", "commands", "value", "staging", "on_complete", "pipeline", "ranges", "scalars")

    def __init__(self, cmd: Any, handle: Any = None):
        self.cmd = cmd
        self.handle = handle  # cmd as the device's ``Recording`` takes it
        self.commands = 0
        self.value = 0
        self.staging: list[Allocation] = []
        self.on_complete: list[Callable[[], None]] = []
        self.pipeline: Any = None  # the bound VkPipeline's handle; the other two are valid only with it
        self.ranges: list[Binds] | None = None
        self.scalars: bytes | None = None


class VulkanEvent(api.Event):
    """A value of its stream's timeline semaphore, plus a timestamp query slot when timed. (``api.Event``
    raises UseAfterFree before any of these is called on a closed device, whose semaphores are gone.)"""

    def __init__(self, stream: VulkanStream, timing: bool, value: int, timestamp: tuple[Any, int] | None):
        super().__init__(stream, timing)
        self._value = value
        self._timestamp = timestamp
        if timestamp is not None:
            weakref.finalize(self, stream._device._timestamps.release, timestamp)

    def _query(self) -> bool:
        return self._stream._device._reached(self._stream, self._value)

    def _synchronize(self, timeout: float | None = None) -> None:
        self._stream._device._wait([(self._stream, self._value)], deadline("Event.synchronize", timeout))

    def _elapsed_ms(self, end: api.Event) -> float:
        assert isinstance(end, VulkanEvent)
        dev = self._stream._device
        dev._wait([(self._stream, self._value), (end._stream, end._value)])
        return dev._timestamps.elapsed_ms(self._timestamp, end._timestamp)


class Timestamps:
    """Timestamp query slots, handed out to timed events and returned when the event is collected."""

    def __init__(self, dev: VulkanDevice, valid_bits: int, period_ns: float):
        self._dev, self._valid_bits, self._period_ns = dev, valid_bits, period_ns
        self._pools: list[Any] = []
        self._free: list[tuple[Any, int]] = []

    def take(self) -> tuple[Any, int]:
        if not self._free:
            vk = native.vk
            info = vk.ffi.new("VkQueryPoolCreateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, "queryType": vk.VK_QUERY_TYPE_TIMESTAMP,
                "queryCount": TIMESTAMP_SLOTS,
            })
            out = vk.ffi.new("VkQueryPool*")
            native.call.vkCreateQueryPool(self._dev._handle, info, vk.ffi.NULL, out)
            self._pools.append(out[0])
            self._free = [(out[0], i) for i in reversed(range(TIMESTAMP_SLOTS))]
        return self._free.pop()

    def release(self, slot: tuple[Any, int]) -> None:
        self._free.append(slot)

    def _read(self, slot: tuple[Any, int]) -> int:
        vk = native.vk
        out = vk.ffi.new("uint64_t*")
        native.call.vkGetQueryPoolResults(
            self._dev._handle, slot[0], slot[1], 1, 8, out, 8, vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
        return out[0]

    def elapsed_ms(self, start: tuple[Any, int], end: tuple[Any, int]) -> float:
        bits = self._valid_bits
        ticks = (self._read(end) - self._read(start)) & ((1 << bits) - 1)
        if ticks >= 1 << (bits - 1):  # end before start: a negative interval
            ticks -= 1 << bits
        return ticks * self._period_ns / 1e6

    def destroy(self) -> None:
        for pool in self._pools:
            native.vk.lib.vkDestroyQueryPool(self._dev._handle, pool, native.vk.ffi.NULL)
        self._pools.clear()


class Flusher:
    """Submits the batches streams leave open within a burst of commands, ``SUBMIT_GAP_S`` after each stream's
    last submission, so the end of a burst starts on the device without another host call. One daemon thread
    per device, started at the first deferred batch; it submits under the device lock, as streams do."""

    def __init__(self, lock: threading.RLock):
        self._wake = threading.Condition(lock)
        self._armed: set[VulkanStream] = set()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def arm(self, stream: VulkanStream) -> None:
        """Have ``stream``'s open batch submitted when it is due (called under the device lock)."""
        if stream in self._armed:
            return  # the thread re-reads every armed stream's due time when it wakes
        self._armed.add(stream)
        if self._thread is None:
            self._thread = threading.Thread(target=Flusher._run, args=(weakref.ref(self), self._wake),
                                            name="ironaccel-vulkan-flusher", daemon=True)
            self._thread.start()
        self._wake.notify()

    def stop(self) -> None:
        """End the thread (Device.close): nothing is submitted after this returns."""
        with self._wake:
            self._stopped = True
            self._armed.clear()
            self._wake.notify()
        if self._thread is not None:
            # bounded: a caller that holds the device lock keeps the thread from waking until it lets go,
            # and the thread then ends without submitting (it reads _stopped first)
            self._thread.join(timeout=1.0)

    def _submit_due(self) -> float:
        """Submit the armed batches that are due; the seconds until the next one is (FLUSHER_IDLE_S: none)."""
        now = time.monotonic()
        wait = FLUSHER_IDLE_S
        for stream in list(self._armed):
            due = stream._last_submit + SUBMIT_GAP_S
            if stream._batch is None:
                self._armed.discard(stream)
            elif len(stream._in_flight) >= MAX_IN_FLIGHT:  # it never waits (under the lock, without a deadline):
                wait = min(wait, SUBMIT_GAP_S)  # the stream's next host call applies the back-pressure
            elif now >= due:
                self._armed.discard(stream)
                stream._flush()
            else:
                wait = min(wait, due - now)
        return wait

    @staticmethod
    def _run(ref: weakref.ref[Flusher], wake: threading.Condition) -> None:
        with wake:
            while True:
                flusher = ref()
                if flusher is None or flusher._stopped:
                    return
                wait = flusher._submit_due()
                del flusher  # while asleep, only the lock is held: a device dropped without close() can go
                wake.wait(wait)


class Queue:
    def __init__(self, handle: Any):
        self.handle = handle
        self.lock = threading.Lock()


class Submission:
    """The VkSubmitInfo of one timeline semaphore's submissions, made once and filled in for each (so a
    submission makes no cffi structs): one command buffer or none, the waits (the arrays grow when a
    submission has more than ever before), and the value it signals. Filled under the device lock."""

    __slots__ = ("info", "_timeline", "_cmds", "_signal", "_signal_value", "_wait_semaphores", "_wait_values",
                 "_stages", "_capacity")

    def __init__(self, semaphore: Any):
        vk = native.vk
        ffi = vk.ffi
        self._cmds = ffi.new("VkCommandBuffer[1]")
        self._signal = ffi.new("VkSemaphore[1]", [semaphore])
        self._signal_value = ffi.new("uint64_t[1]")
        self._timeline = ffi.new("VkTimelineSemaphoreSubmitInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
            "signalSemaphoreValueCount": 1, "pSignalSemaphoreValues": self._signal_value,
        })
        self.info = ffi.new("VkSubmitInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, "pNext": self._timeline, "pCommandBuffers": self._cmds,
            "signalSemaphoreCount": 1, "pSignalSemaphores": self._signal,
        })
        self._capacity = 0
        self._grow(2)  # the stream's own previous value and one event

    def _grow(self, count: int) -> None:
        vk = native.vk
        ffi = vk.ffi
        self._wait_semaphores = ffi.new("VkSemaphore[]", count)
        self._wait_values = ffi.new("uint64_t[]", count)
        self._stages = ffi.new("VkPipelineStageFlags[]", [vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT] * count)
        self.info.pWaitSemaphores, self.info.pWaitDstStageMask = self._wait_semaphores, self._stages
        self._timeline.pWaitSemaphoreValues = self._wait_values
        self._capacity = count

    def fill(self, cmd: Any, waits: list[tuple[Any, int]], value: int) -> Any:
        """The VkSubmitInfo* of ``cmd`` (None: no command buffer), waiting for each (semaphore, value) of
        ``waits`` and signalling ``value``."""
        count = len(waits)
        if count > self._capacity:
            self._grow(count)
        for i, (semaphore, wait_value) in enumerate(waits):
            self._wait_semaphores[i] = semaphore
            self._wait_values[i] = wait_value
        info = self.info
        info.waitSemaphoreCount = self._timeline.waitSemaphoreValueCount = count
        if cmd is None:
            info.commandBufferCount = 0
        else:
            self._cmds[0] = cmd
            info.commandBufferCount = 1
        self._signal_value[0] = value
        return info


class StreamHandles:
    """A stream's timeline semaphore and command pool, with the command buffers it recycles. A collected stream's handles are kept for the next stream rather than destroyed (until
    Device.close): lavapipe's queue thread may still touch a timeline semaphore just after its last signal is
    visible, and destroying it then crashed the process now and then (and reuse makes streams cheaper)."""

    __slots__ = ("semaphore", "command_pool", "free_cmds", "submission", "value")

    def __init__(self, dev: VulkanDevice):
        vk = native.vk
        ffi, lib = vk.ffi, vk.lib
        type_info = ffi.new("VkSemaphoreTypeCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO, "semaphoreType": vk.VK_SEMAPHORE_TYPE_TIMELINE,
        })
        info = ffi.new("VkSemaphoreCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, "pNext": type_info})
        out = ffi.new("VkSemaphore*")
        native.call.vkCreateSemaphore(dev._handle, info, ffi.NULL, out)
        self.semaphore = out[0]
        pool_info = ffi.new("VkCommandPoolCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
            "flags": vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT | vk.VK_COMMAND_POOL_CREATE_TRANSIENT_BIT,
            "queueFamilyIndex": dev._family,
        })
        pool = ffi.new("VkCommandPool*")
        try:
            native.call.vkCreateCommandPool(dev._handle, pool_info, ffi.NULL, pool)
        except BaseException:
            lib.vkDestroySemaphore(dev._handle, self.semaphore, ffi.NULL)
            raise
        self.command_pool = pool[0]
        self.free_cmds: list[Any] = []
        self.submission = Submission(self.semaphore)
        self.value = 0  # the semaphore's value once its stream's work is done: where the next stream starts

    def destroy(self, device_handle: Any) -> None:
        ffi, lib = native.vk.ffi, native.vk.lib
        lib.vkDestroyCommandPool(device_handle, self.command_pool, ffi.NULL)  # frees its command buffers
        lib.vkDestroySemaphore(device_handle, self.semaphore, ffi.NULL)


class VulkanStream(api.Stream):
    """An in-order queue of work on a timeline semaphore; see the package docstring."""

    _capturing: VulkanGraph | None

    def __init__(self, device: VulkanDevice, queue: Queue, handles: StreamHandles):
        super().__init__(device)
        self._queue = queue
        self._handles = handles
        self._semaphore = handles.semaphore
        self._command_pool = handles.command_pool
        self._submitted = handles.value  # the timeline value of the last submission
        self._completed = handles.value  # the highest value known to have completed
        self._batch: Batch | None = None  # recording, not yet submitted
        self._waits: list[tuple[VulkanStream, int]] = []  # event waits for the next submission
        self._in_flight: deque[Batch] = deque()
        self._last_submit = 0.0  # time.monotonic() of the last submission: within SUBMIT_GAP_S, keep recording
        self._next_check = 0.0  # when a launch may next read the timeline to see whether the device caught up
        #: the flusher's failed submission: its batch is ended but unsubmitted, so every later submission or
        #: recording on this stream raises it (as after a failed submission by the host's own call)
        self._flush_error: BaseException | None = None
        self._free_cmds = handles.free_cmds
        self._pipeline_barrier = native.vk.lib.vkCmdPipelineBarrier  # looked up once: every command records one
        self._between_commands = device._between_commands
        self._barrier_handle = device._between_handle  # the barrier as the device's ``Recording`` takes it
        # When the stream is collected (the device holds busy ones) its handles go back to the device's spares.
        self._give_back = weakref.finalize(self, device._spare_handles.append, handles)

    # -- recording ----------------------------------------------------------------------------------

    def _recording(self) -> Batch:
        """The open batch (while capturing: the graph's recording), with a barrier that orders the next
        command after the ones before it."""
        batch = self._open()
        if batch.commands:
            self._pipeline_barrier(batch.cmd, *self._between_commands)
        batch.commands += 1
        return batch

    def _open(self) -> Batch:
        """The batch the next command goes into (while capturing: the graph's recording), begun if need be;
        the caller records the barrier when ``commands`` is not 0, and counts its command."""
        if self._capturing is not None:
            return self._capturing._resources.recording
        if self._flush_error is not None:
            raise self._flush_error
        return self._batch or self._begin()

    def _begin(self) -> Batch:
        """Open a batch: a recycled command buffer (a new one when none is free), begun."""
        if not self._free_cmds:
            self._retire()  # command buffers of completed batches come back
        if self._free_cmds:
            cmd = self._free_cmds.pop()
        else:
            vk = native.vk
            info = vk.ffi.new("VkCommandBufferAllocateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": self._command_pool,
                "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, "commandBufferCount": 1,
            })
            out = vk.ffi.new("VkCommandBuffer*")
            native.call.vkAllocateCommandBuffers(self._device._handle, info, out)
            cmd = out[0]
        native.call.vkBeginCommandBuffer(cmd, self._device._begin_info)
        batch = self._batch = Batch(cmd, self._device._record.handle(cmd))
        self._device._busy.add(self)
        return batch

    def _recorded(self) -> None:
        """Submit now when the batch is full, or when the stream's last submission is SUBMIT_GAP_S old and the
        device has caught up with it (so work starts at once on an idle device); else keep recording, and
        arm the device's flusher, which submits the batch when it is due if no host call did first. A device
        found still busy is asked again only SUBMIT_GAP_S later (the flusher submits meanwhile): reading the
        timeline costs as much as recording a launch."""
        batch = self._batch
        if batch is None:
            return
        if batch.commands >= BATCH_COMMANDS:
            self._submit()
            return
        now = time.monotonic()
        if now >= self._next_check:
            if self._device._counter(self) >= self._submitted:
                self._submit()
                return
            self._next_check = now + SUBMIT_GAP_S
        if batch.commands == 1:  # the flusher keeps a stream armed until its open batch is submitted
            self._device._flusher.arm(self)

    def _flush(self) -> None:
        """The flusher's submission (under the device lock): a failure is kept, for the host's next call."""
        try:
            self._submit()
        except Exception as exc:  # the flusher's thread has no caller: the stream's next host call raises it
            self._flush_error = exc

    def _submit(self, limit: Deadline | None = None) -> None:
        """Submit the open batch and pending waits, signalling the next timeline value. The host waits only
        when the stream already has MAX_IN_FLIGHT submissions outstanding (back-pressure), within ``limit``."""
        if self._flush_error is not None:
            raise self._flush_error
        batch = self._batch
        if batch is None and not self._waits:
            return
        dev = self._device
        if len(self._in_flight) >= MAX_IN_FLIGHT:
            dev._retire()  # the completed ones first, and the releases that waited for them
            if len(self._in_flight) >= MAX_IN_FLIGHT:
                dev._wait([(self, self._in_flight[0].value)], limit)
        waits = [(s._semaphore, v) for s, v in self._waits]
        if self._submitted > self._completed:
            waits.append((self._semaphore, self._submitted))
        value = self._submitted + 1
        cmd = None
        if batch is not None:
            cmd = batch.cmd
            dev._barrier(cmd, dev._to_host)
            native.call.vkEndCommandBuffer(cmd)
        submit = self._handles.submission.fill(cmd, waits, value)
        with self._queue.lock:
            native.call.vkQueueSubmit(self._queue.handle, 1, submit, native.vk.ffi.NULL)
        self._last_submit = time.monotonic()
        self._next_check = self._last_submit + SUBMIT_GAP_S
        self._submitted = self._handles.value = value
        self._waits = []
        self._batch = None
        batch = batch or Batch(None)  # a submission of waits only: tracked so the stream stays alive for it
        batch.value = value
        self._in_flight.append(batch)

    def _pending_value(self) -> int:
        """The timeline value that will mark everything enqueued so far."""
        return self._submitted + (1 if self._batch is not None or self._waits else 0)

    def _retire(self) -> None:
        """Do the host's share of every completed submission and recycle its resources."""
        if not self._in_flight:
            return
        value = self._device._counter(self)
        while self._in_flight and self._in_flight[0].value <= value:
            batch = self._in_flight.popleft()
            for finish in batch.on_complete:
                finish()
            for allocation in batch.staging:
                self._device._staging.free(allocation)
            if batch.cmd is not None:
                native.call.vkResetCommandBuffer(batch.cmd, 0)  # here, not at the next begin: off the launch path
                self._free_cmds.append(batch.cmd)
        if not self._in_flight and self._batch is None and not self._waits:
            self._device._busy.discard(self)

    def _idle(self) -> bool:
        """Nothing enqueued on this stream is outstanding: the host may touch its buffers directly."""
        if self._batch is not None or self._waits:
            return False
        self._retire()  # first, so a staged copy_dtoh still owed lands before a direct copy that follows it
        return not self._in_flight

    def _direct(self) -> bool:
        """Copy through mapped device memory on the host: it is mapped, this stream has nothing outstanding
        and is not capturing (captured work is recorded, to run at each replay)."""
        return self._device._direct_mapping and self._capturing is None and self._idle()

    def _copy_region(self, cmd: Any, src: Any, src_offset: int, dst: Any, dst_offset: int, nbytes: int) -> None:
        region = native.vk.ffi.new("VkBufferCopy*", {"srcOffset": src_offset, "dstOffset": dst_offset, "size": nbytes})
        native.vk.lib.vkCmdCopyBuffer(cmd, src, dst, 1, region)

    # -- the private API --------------------------------------------------------------------------------

    def _native(self) -> Any:
        """The VkQueue this stream submits to."""
        return self._queue.handle

    def _copy_htod(self, dst: api.Buffer, dst_offset: int, src: np.ndarray) -> None:
        assert isinstance(dst, VulkanBuffer)
        with self._device._lock:
            if self._direct():
                hostcopy.copy(dst._allocation.host(dst_offset, src.nbytes), src)
                return
            staging = self._device._staging.alloc(src.nbytes)
            hostcopy.copy(staging.host(0, src.nbytes), src)
            batch = self._recording()
            batch.staging.append(staging)
            self._copy_region(batch.cmd, staging.block.buffer, staging.offset,
                              dst._allocation.block.buffer, dst._allocation.offset + dst_offset, src.nbytes)
            self._recorded()

    def _copy_dtoh(self, dst: np.ndarray, src: api.Buffer, src_offset: int) -> None:
        assert isinstance(src, VulkanBuffer)
        with self._device._lock:
            if self._direct():
                hostcopy.copy(dst, src._allocation.host(src_offset, dst.nbytes))
                return
            staging = self._device._staging.alloc(dst.nbytes)
            batch = self._recording()
            batch.staging.append(staging)
            self._copy_region(batch.cmd, src._allocation.block.buffer, src._allocation.offset + src_offset,
                              staging.block.buffer, staging.offset, dst.nbytes)

            def finish(dst: np.ndarray = dst, staging: Allocation = staging) -> None:
                hostcopy.copy(dst, staging.host(0, dst.nbytes))

            batch.on_complete.append(finish)
            self._recorded()

    def _copy_dtod(self, dst: api.Buffer, dst_offset: int, src: api.Buffer, src_offset: int, nbytes: int) -> None:
        assert isinstance(dst, VulkanBuffer) and isinstance(src, VulkanBuffer)
        with self._device._lock:
            if self._direct():
                dst._allocation.host(dst_offset, nbytes)[:] = src._allocation.host(src_offset, nbytes)
                return
            batch = self._recording()
            self._copy_region(batch.cmd, src._allocation.block.buffer, src._allocation.offset + src_offset,
                              dst._allocation.block.buffer, dst._allocation.offset + dst_offset, nbytes)
            self._recorded()

    def _fill(self, buf: api.Buffer, offset: int, nbytes: int, value: int) -> None:
        """vkCmdFillBuffer for the 4-byte-aligned middle; the unaligned edges (<= 3 bytes each) are staged."""
        assert isinstance(buf, VulkanBuffer)
        with self._device._lock:
            if self._direct():
                buf._allocation.host(offset, nbytes)[:] = value
                return
            start = buf._allocation.offset + offset  # blocks place buffers 256-byte aligned
            head = min(-start % 4, nbytes)
            middle = (nbytes - head) // 4 * 4
            tail = nbytes - head - middle
            edge = np.full(3, value, dtype=np.uint8)
            if head:
                self._copy_htod(buf, offset, edge[:head])
            if middle:
                batch = self._recording()
                native.vk.lib.vkCmdFillBuffer(batch.cmd, buf._allocation.block.buffer, start + head, middle, value * 0x01010101)
                self._recorded()
            if tail:
                self._copy_htod(buf, offset + head + middle, edge[:tail])

    def _record(self, timing: bool) -> api.Event:
        dev = self._device
        with dev._lock:
            timestamp = dev._timestamps.take() if timing else None
            return VulkanEvent(self, timing, self._point(timestamp), timestamp)

    def _rerecord(self, event: api.Event) -> None:
        """The event's timestamp slot (if timed) written again here; a wait already enqueued holds the old
        (stream, value) pair, not the event."""
        assert isinstance(event, VulkanEvent)
        with self._device._lock:
            event._value = self._point(event._timestamp)
            event._stream = self

    def _point(self, timestamp: tuple[Any, int] | None) -> int:
        """The timeline value that marks everything enqueued so far, submitted; with ``timestamp``, the slot
        written there first. (The caller holds the device lock.)"""
        if timestamp is not None:
            batch = self._recording()
            lib = native.vk.lib
            lib.vkCmdResetQueryPool(batch.cmd, timestamp[0], timestamp[1], 1)
            lib.vkCmdWriteTimestamp(batch.cmd, native.vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timestamp[0], timestamp[1])
        self._submit()
        return self._submitted

    def _wait(self, event: api.Event) -> None:
        assert isinstance(event, VulkanEvent)
        source = event._stream
        with self._device._lock:
            if source is self or source._completed >= event._value:
                return
            self._waits.append((source, event._value))
            self._device._busy.add(self)

    def _begin_capture(self) -> api.Graph:
        return self._device._create_graph()

    def _end_capture(self, graph: api.Graph, keep: bool) -> None:
        graph._end(keep)  # type: ignore[attr-defined]  # the VulkanGraph of _begin_capture

    def _synchronize(self, timeout: float | None = None) -> None:
        limit = deadline("Stream.synchronize", timeout)
        with self._device._lock:
            self._submit(limit)
            value = self._submitted
        self._device._wait([(self, value)], limit)

    def _launch_prepared(self, plan: api.LaunchPlan, binding: LaunchBinding, args: list[Any]) -> None:
        """Record barrier, bind-pipeline, bind-descriptors (a set made once for these buffers), push constants and
        dispatch in one call of the device's ``Recording``: what ``binding`` worked out for these argument types
        is not worked out again, and what the command buffer already has bound is not bound again (``Batch``,
        which says so only once the commands are recorded: a set lookup that raises leaves it as it was)."""
        pipeline = binding.pipelines.get(plan.block) or binding.pipeline(plan.block)
        scalars = binding.pack(args) if binding.scalars else None
        dev = self._device
        with dev._lock:
            batch = self._open()
            bind = pipeline if batch.pipeline is not pipeline else None
            sets = None
            if binding.buffers:
                ranges = [args[i]._binds for i in binding.buffers]
                if bind is not None or ranges != batch.ranges:
                    graph = self._capturing
                    sets = dev._record.handle(dev._descriptor_sets.get(binding.set_layout, ranges) if graph is None
                                              else graph._descriptor_set(binding.set_layout, ranges))
            push = scalars if scalars is not None and (bind is not None or scalars != batch.scalars) else None
            dev._record.dispatch(batch.handle, self._barrier_handle if batch.commands else None, bind,
                                 binding.layout_handle, sets, push, *plan.grid)
            batch.commands += 1
            if bind is not None:
                batch.pipeline, batch.ranges, batch.scalars = pipeline, None, None
            if sets is not None:
                batch.ranges = ranges
            if push is not None:
                batch.scalars = push
            self._recorded()
