"""MemPool: an opt-in cache of device buffers in power-of-two buckets, on every backend.

    pool = MemPool(dev, stream)
    with pool.alloc(1000) as buf:      # a PooledBuffer: a Buffer backed by a 1 KiB block
        stream.copy_htod(buf, data)
    pool.stats(); pool.trim(); pool.close()

Buckets are the powers of two from 1 KiB to 256 MiB; a request is served by the smallest bucket that holds
it (so anything up to 1 KiB uses the 1 KiB bucket). Larger requests, and buckets bigger than the device's
``max_alloc``, bypass the buckets: they go straight to the device and back to it on free.

Where a freed block waits for its next use, fastest first:

* front: one per thread, ``FRONT_SLOTS`` blocks per bucket up to 1 MiB, touched without a lock. A warm
  alloc+free cycle only ever touches the calling thread's front cache.
* shared: one per pool, under a lock; blocks of every bucket, reachable from every thread.
* the device: ``Device.alloc`` on a miss, ``Buffer.free`` when the cap is reached.

The cap (``max_cached_bytes``, ``max_per_bucket``) counts cached blocks in every tier. A front cache may only
fill slots it has reserved against the cap under the lock ("credit"), so its lock-free path cannot
exceed the cap. Credit stays with a front cache while its slots are empty, so that the next free of a warm
cycle needs no lock; a thread short of room takes back its own idle credit first, and a thread's credit
and blocks return to the shared tier when the thread ends. Other threads' idle credit can make the pool
release a block slightly before the cap is reached, never after it.

Streams: a block is reused in the order of the pool's stream. A buffer last used on another stream is
freed with ``buf.free(stream=that_stream)``; the pool records an event there and, before the block's next
use, makes the pool's stream wait for it (unless it is already complete); such a fenced block waits in
the shared tier, so the lock-free path never meets a fence. A block handed out by ``alloc``
is ready for work on the pool's stream; to use it on another stream, order that stream after the pool's
stream first (an event and ``Stream.wait``), as with any stream-ordered allocator.

Compiled: where ``ironaccel._fast`` loads (``ironaccel.native``), MemPool's and PooledBuffer's bases are its
PoolCore and PooledCore, which do the warm alloc and free (a front-cache hit, a free into a credited slot)
in C on these same objects, with the GIL held throughout, and hand every other case to the pure-Python
``_PoolCore.alloc`` and ``_PooledCore.free`` below, the bases when it does not load (or with
``IRONACCEL_PURE_PYTHON=1``). One set of semantics, two speeds.

Sizes: ``stats()`` and the cap count block sizes (a 1000-byte request holds a 1024-byte block).

Fork: a child forked while a pool is open inherits the pool object but not its memory, which is the
parent's: in the child the pool is closed, hands out no cached block (``alloc`` raises InvalidArgument
naming ``MemPool.alloc``) and gives nothing back to the device (POOL-9); the child opens its own device and
pool.

Freeing a pooled buffer twice raises InvalidArgument, unlike a plain Buffer's idempotent ``free()``: a block
returned twice could be handed out to two owners at once.
"""

from __future__ import annotations

import os
import threading
import weakref
from dataclasses import dataclass

from . import native
from .api import Buffer, Device, Event, Stream, _check_int
from .errors import InvalidArgument, OutOfMemory, UseAfterFree

__all__ = ["MemPool", "PooledBuffer", "PoolStats", "BUCKET_SIZES", "FRONT_SLOTS", "bucket_size"]

MIN_SHIFT = 10  # 1 KiB
MAX_SHIFT = 28  # 256 MiB
BUCKET_SIZES = tuple(1 << s for s in range(MIN_SHIFT, MAX_SHIFT + 1))
FRONT_BUCKETS = 11  # buckets 1 KiB .. 1 MiB have front slots; bigger blocks are rare enough for the lock
FRONT_SLOTS = 4
DIRECT = len(BUCKET_SIZES)  # bucket index of a block that bypasses the buckets

DEFAULT_MAX_CACHED_BYTES = 1 << 30
DEFAULT_MAX_PER_BUCKET = 64


def bucket_size(nbytes: int) -> int | None:
    """The block size that serves a request of ``nbytes``; None when it goes straight to the device."""
    shift = (nbytes - 1).bit_length()
    if shift > MAX_SHIFT:
        return None
    return 1 << max(shift, MIN_SHIFT)


@dataclass(frozen=True)
class PoolStats:
    """A snapshot of a MemPool. Bytes are block sizes; exact when no other thread is inside the pool."""

    hits: int  # allocations served from a cache
    misses: int  # allocations that went to the device (bypassing ones included)
    bytes_live: int  # handed out and not yet freed
    bytes_cached_front: int  # waiting in the threads' front caches
    bytes_cached_shared: int  # waiting in the shared cache
    high_water_bytes: int  # the most device memory the pool has held at once (live + cached)

    @property
    def bytes_cached(self) -> int:
        return self.bytes_cached_front + self.bytes_cached_shared


class _Block:
    """A device buffer owned by the pool, with the event to wait for before its next use."""

    __slots__ = ("buffer", "bucket", "size", "fence")

    def __init__(self, buffer: Buffer, bucket: int, size: int):
        self.buffer = buffer
        self.bucket = bucket
        self.size = size
        self.fence: Event | None = None


class _Slots(list):
    """One bucket of a front cache: its blocks, and ``credit``, how many it may hold (reserved in the cap)."""

    __slots__ = ("credit",)

    def __init__(self) -> None:
        super().__init__()
        self.credit = 0


class _Front(list):
    """One thread's front cache, a _Slots per front bucket. Only its thread appends; others only pop."""

    __slots__ = ("hits",)

    def __init__(self) -> None:
        super().__init__(_Slots() for _ in range(FRONT_BUCKETS))
        self.hits = 0


class _ThreadMark:
    """Lives in the thread-local storage next to the front cache; its death tells the pool the thread ended."""

    __slots__ = ("__weakref__",)


class _PooledCore:
    """PooledBuffer's fields and its ``free`` in Python. Where the compiled module loads, its PooledCore
    (ironaccel/_fast_c/pool.inc) is PooledBuffer's base instead: the same fields, and a ``free`` that does the warm case
    (a block of a front bucket into this thread's credited slot) in C and hands every other case to this one."""

    __slots__ = ("_device", "_nbytes", "_freed", "_pool", "_block")
    _pool: MemPool
    _block: _Block

    def free(self, stream: Stream | None = None) -> None:
        """Return the block to the pool; ``stream``: the stream that last used it, if not the pool's."""
        if self._freed:
            raise InvalidArgument(
                "MemPool.free",
                f"this {self._nbytes}-byte pooled buffer was already freed (a pooled block returned twice "
                "could be handed out twice; plain Buffers allow it, pooled ones do not)",
            )
        pool, block = self._pool, self._block
        if stream is not None and stream is not pool._stream:
            pool._fence(block, stream)
            self._freed = True
            pool._put_slow(block)
            return
        self._freed = True
        # the warm free: into this thread's front cache if it has a reserved slot
        bucket = block.bucket
        if bucket < FRONT_BUCKETS:
            try:
                slots = pool._local.front[bucket]
            except AttributeError:
                slots = pool._new_front()[bucket]
            if len(slots) < slots.credit:
                slots.append(block)
                return
        pool._put_slow(block)



class _PoolCore:
    """MemPool's ``alloc`` in Python; where the compiled module loads, its PoolCore is MemPool's base instead
    and serves front-cache hits in C (counted in ``_fast_hits``), handing every other case to this one."""

    _fast_hits = 0  # hits counted by the compiled alloc: none here

    def alloc(self: MemPool, nbytes: int) -> PooledBuffer:  # type: ignore[misc]
        """A buffer of ``nbytes`` >= 1 bytes, ready for work on the pool's stream."""
        if type(nbytes) is not int or nbytes < 1:
            nbytes = _check_int("MemPool.alloc", "nbytes", nbytes, 1)
        if nbytes <= 1024:
            bucket = 0
        else:
            bucket = (nbytes - 1).bit_length() - MIN_SHIFT
            if bucket >= FRONT_BUCKETS:
                return self._alloc_slow(nbytes, bucket)
        if self._device._closed:
            self._check_usable("MemPool.alloc")
        try:
            front = self._local.front
        except AttributeError:
            front = self._new_front()
        try:
            block = front[bucket].pop()
        except IndexError:
            return self._alloc_slow(nbytes, bucket)
        front.hits += 1
        return PooledBuffer(self, block, nbytes)


_compiled = native.load()  # None: the pure-Python path (no compiler here, or IRONACCEL_PURE_PYTHON=1)


class PooledBuffer(_compiled.PooledCore if _compiled else _PooledCore, Buffer):  # type: ignore[misc]
    """A Buffer lent by a MemPool; usable wherever a Buffer is (backends resolve it through ``_backing``).

    ``free(stream=None)`` returns the block to the pool; pass the stream that last used the buffer when it is
    not the pool's. Unlike a plain Buffer, whose ``free`` is idempotent, a second free raises
    InvalidArgument: a block returned twice could be handed out to two owners at once. A PooledBuffer
    dropped without ``free()`` takes its block with it, as an unfreed Buffer would.
    """

    __slots__ = ()  # no __dict__ nor __weakref__ to set up and tear down on every alloc+free

    def __init__(self, pool: MemPool, block: _Block, nbytes: int):
        # Buffer.__init__'s three fields, set here directly: this runs on every alloc.
        self._device = pool._device
        self._nbytes = nbytes
        self._freed = False
        self._pool = pool
        self._block = block

    def _release(self) -> None:
        """Buffer.free's hook, reached only by calling ``Buffer.free(buf)`` directly: the locked path."""
        self._pool._put_slow(self._block)

    def _backing(self, op: str) -> Buffer:
        if self._freed:
            raise UseAfterFree(op, f"a {self._nbytes}-byte pooled buffer (its block may serve another allocation now)")
        return self._block.buffer

    def _native_handle(self) -> object:
        return self._block.buffer._native_handle()


class MemPool(_compiled.PoolCore if _compiled else _PoolCore):  # type: ignore[misc]
    """A cache of device buffers for ``device``, reused in the order of ``stream``; see the module docstring.

    ``max_cached_bytes`` caps the bytes of cached blocks (default 1 GiB), ``max_per_bucket`` the number of
    cached blocks of one size (default 64), both counted over every tier. Not thread-safe to ``close()`` while
    other threads use it.
    """

    def __init__(
        self,
        device: Device,
        stream: Stream,
        *,
        max_cached_bytes: int = DEFAULT_MAX_CACHED_BYTES,
        max_per_bucket: int = DEFAULT_MAX_PER_BUCKET,
    ):
        op = "MemPool"
        if not isinstance(device, Device):
            raise InvalidArgument(op, f"device must be a Device, got {type(device).__name__}")
        if not isinstance(stream, Stream) or stream.device is not device:
            raise InvalidArgument(op, "stream must be a Stream of the pool's device")
        device._check_open(op)
        self._device = device
        self._stream = stream
        self._max_cached_bytes = _check_int(op, "max_cached_bytes", max_cached_bytes)
        self._max_per_bucket = _check_int(op, "max_per_bucket", max_per_bucket)
        self._max_alloc = device.info.limits.max_alloc
        self._local = threading.local()
        self._lock = threading.Lock()
        self._closed = False
        self._pid = os.getpid()  # the process whose device memory the blocks are (a forked child's: _orphan)
        _POOLS.add(self)
        # Everything below is guarded by _lock.
        self._fronts: list[_Front] = []
        self._ended: list[_Front] = []  # fronts of ended threads, appended by a finalizer (list.append is atomic)
        self._shared: list[list[_Block]] = [[] for _ in BUCKET_SIZES]
        self._shared_bytes = 0
        self._room_bytes = self._max_cached_bytes  # cap minus shared bytes minus front credit
        self._room_blocks = [self._max_per_bucket] * len(BUCKET_SIZES)
        self._shared_hits = 0
        self._ended_hits = 0
        self._misses = 0
        self._held = 0  # bytes obtained from the device and not given back
        self._high_water = 0

    @property
    def device(self) -> Device:
        return self._device

    @property
    def stream(self) -> Stream:
        return self._stream

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def max_cached_bytes(self) -> int:
        return self._max_cached_bytes

    @property
    def max_per_bucket(self) -> int:
        return self._max_per_bucket

    # -- the slow paths -----------------------------------------------------------------------------------

    def _new_front(self) -> _Front:
        front = _Front()
        mark = _ThreadMark()
        weakref.finalize(mark, self._ended.append, front).atexit = False
        self._local.front = front
        self._local.mark = mark
        with self._lock:
            self._fronts.append(front)
        return front

    def _alloc_slow(self, nbytes: int, bucket: int) -> PooledBuffer:
        size = BUCKET_SIZES[bucket] if bucket < DIRECT else nbytes
        if bucket >= DIRECT or size > self._max_alloc:
            bucket, size = DIRECT, nbytes  # too big for a bucket, or the bucket is more than the device allows
        with self._lock:
            self._check_usable("MemPool.alloc")
            self._adopt_ended()
            block = self._shared[bucket].pop() if bucket < DIRECT and self._shared[bucket] else None
            if block is not None:
                self._shared_bytes -= size
                self._room_bytes += size
                self._room_blocks[bucket] += 1
                self._shared_hits += 1
        if block is None:
            block = _Block(self._device_alloc(size), bucket, size)
        elif block.fence is not None:
            self._clear_fence(block)
        return PooledBuffer(self, block, nbytes)

    def _device_alloc(self, size: int) -> Buffer:
        """``Device.alloc``; on OutOfMemory, give every cached block back and try once more — after the
        device has reached those frees: a stream-ordered free (CUDA's cuMemFreeAsync) returns the memory only
        when its stream gets there, and that is the stream that last used the block (the pool's, another
        one the block was freed on, or the device's own allocation stream for a block never used)."""
        try:
            buffer = self._device.alloc(size)
        except OutOfMemory:
            if size > self._max_alloc:
                raise  # no cache can help
            self.trim()
            self._device.synchronize()
            buffer = self._device.alloc(size)
        with self._lock:
            self._misses += 1
            self._held += size
            self._high_water = max(self._high_water, self._held)
        return buffer

    def _put_slow(self, block: _Block) -> None:
        """Cache a freed block under the lock, or give it back to the device when the cap is reached.

        Fenced blocks go to the shared tier only, so that the lock-free path never has a fence to check."""
        bucket, size = block.bucket, block.size
        with self._lock:
            if not (self._closed or self._device._closed or bucket == DIRECT):
                self._adopt_ended()
                front = getattr(self._local, "front", None)
                if self._fits(size, bucket, front):
                    self._room_bytes -= size
                    self._room_blocks[bucket] -= 1
                    slots = front[bucket] if front is not None and bucket < FRONT_BUCKETS else None
                    if slots is not None and slots.credit < FRONT_SLOTS and block.fence is None:
                        slots.credit += 1
                        slots.append(block)
                    else:
                        self._shared[bucket].append(block)
                        self._shared_bytes += size
                    return
            self._held -= size
        self._give_to_device(block)

    def _fits(self, size: int, bucket: int, front: _Front | None) -> bool:
        """Whether the cap has room for one more block; takes back ``front``'s idle credit if that helps."""
        if self._room_bytes >= size and self._room_blocks[bucket] > 0:
            return True
        if front is None:
            return False
        self._take_back_idle_credit(front)
        return self._room_bytes >= size and self._room_blocks[bucket] > 0

    def _take_back_idle_credit(self, front: _Front) -> None:
        """Return the calling thread's reserved but empty front slots to the cap (caller holds the lock)."""
        for b, slots in enumerate(front):
            idle = slots.credit - len(slots)
            if idle > 0:
                slots.credit -= idle
                self._room_bytes += idle * BUCKET_SIZES[b]
                self._room_blocks[b] += idle

    def _adopt_ended(self) -> None:
        """Move the fronts of ended threads into the shared tier (caller holds the lock)."""
        while self._ended:
            front = self._ended.pop()
            self._fronts = [f for f in self._fronts if f is not front]
            self._ended_hits += front.hits
            for b, slots in enumerate(front):
                idle = slots.credit - len(slots)
                self._room_bytes += idle * BUCKET_SIZES[b]
                self._room_blocks[b] += idle
                self._shared_bytes += len(slots) * BUCKET_SIZES[b]
                self._shared[b] += slots
                slots.clear()
                slots.credit = 0

    def _give_to_device(self, block: _Block) -> None:
        """Free a block's buffer; not on a closed device, whose close already released it, nor in a forked
        child, where it is the parent's memory."""
        if self._device._closed or self._pid != os.getpid():
            return
        if block.fence is not None:
            block.fence.synchronize()
        block.buffer.free()

    # -- streams ------------------------------------------------------------------------------------------

    def _fence(self, block: _Block, stream: Stream) -> None:
        """Record on ``stream`` the event the block's next user must wait for."""
        if not isinstance(stream, Stream) or stream.device is not self._device:
            raise InvalidArgument("MemPool.free", "stream must be a Stream of the pool's device")
        if not self._device._closed:
            block.fence = stream.record()

    def _clear_fence(self, block: _Block) -> None:
        """Order the pool's stream after the block's last use on another stream (unless that is done)."""
        fence, block.fence = block.fence, None
        if fence is not None and not fence.query():
            self._stream.wait(fence)

    # -- the rest of the API ------------------------------------------------------------------------------

    def _check_usable(self, op: str) -> None:
        if self._pid != os.getpid():
            raise InvalidArgument(op, f"this MemPool belongs to process {self._pid}, the parent of this forked "
                                      "child, and its blocks to the parent's device: open a device and a MemPool "
                                      "in the child")
        if self._closed:
            raise UseAfterFree(op, "the MemPool", "closed")
        if self._device._closed:
            info = self._device.info
            raise UseAfterFree(op, f"device {info.backend}:{info.index} (before its MemPool)", "closed")

    def _front_bytes(self) -> int:
        return sum(len(slots) * BUCKET_SIZES[b] for front in self._fronts for b, slots in enumerate(front))

    def stats(self) -> PoolStats:
        with self._lock:
            self._adopt_ended()
            front_bytes = self._front_bytes()
            return PoolStats(
                hits=self._shared_hits + self._ended_hits + sum(f.hits for f in self._fronts) + self._fast_hits,
                misses=self._misses,
                bytes_live=self._held - front_bytes - self._shared_bytes,
                bytes_cached_front=front_bytes,
                bytes_cached_shared=self._shared_bytes,
                high_water_bytes=self._high_water,
            )

    def trim(self, keep_bytes: int = 0) -> int:
        """Give cached blocks back to the device, biggest first, until at most ``keep_bytes`` stay cached.

        Safe at any time, also while buffers are out and while other threads use the pool. Returns the
        number of bytes given back."""
        keep_bytes = _check_int("MemPool.trim", "keep_bytes", keep_bytes)
        with self._lock:
            victims = self._take_cached(keep_bytes)
        failure: Exception | None = None
        for block in victims:  # every victim gets its free, even after one fails; then the first failure
            try:
                self._give_to_device(block)
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return sum(b.size for b in victims)

    def _take_cached(self, keep_bytes: int) -> list[_Block]:
        """Remove cached blocks, biggest first, until at most ``keep_bytes`` stay (caller holds the lock).

        Other threads' front caches keep their credit: their owners may be filling them right now."""
        self._adopt_ended()
        mine = getattr(self._local, "front", None)
        if mine is not None:
            self._take_back_idle_credit(mine)
        cached = self._shared_bytes + self._front_bytes()
        victims: list[_Block] = []
        for b in reversed(range(len(BUCKET_SIZES))):
            size = BUCKET_SIZES[b]
            shared = self._shared[b]
            while cached > keep_bytes and shared:
                victims.append(shared.pop())
                cached -= size
                self._shared_bytes -= size
                self._room_bytes += size
                self._room_blocks[b] += 1
            for front in self._fronts if b < FRONT_BUCKETS else ():
                slots = front[b]
                while cached > keep_bytes:
                    try:
                        victims.append(slots.pop())  # its owner may pop concurrently
                    except IndexError:
                        break
                    cached -= size
                    if front is mine:
                        slots.credit -= 1
                        self._room_bytes += size
                        self._room_blocks[b] += 1
        self._held -= sum(v.size for v in victims)
        return victims

    def close(self) -> None:
        """Give every cached block back to the device; later allocs raise. Idempotent.

        Buffers still out stay valid; freeing them later gives them straight back to the device. Call it
        once no other thread uses the pool. On a closed device the cache is dropped without freeing."""
        with self._lock:
            if self._closed:
                return
            victims = self._take_cached(0)
            self._closed = True
            for front in self._fronts:
                for slots in front:
                    slots.credit = 0
            self._room_bytes = self._max_cached_bytes
            self._room_blocks = [self._max_per_bucket] * len(BUCKET_SIZES)
        for block in victims:
            self._give_to_device(block)

    def _orphan(self) -> None:
        """In a forked child (``_orphan_after_fork``): every cached block is the parent's device memory, which
        an alloc here would hand out to a second owner and a free could release under the parent (a driver
        may share the device between the two processes). The fronts, which alloc serves without a check, are
        emptied in place (the compiled alloc keeps a reference to the forking thread's) and lose their credit,
        so no free refills them; every other path checks the pool's process first (``_check_usable``,
        ``_give_to_device``). Only this thread runs now: the lock another thread may have held at the fork is
        replaced, not taken."""
        self._lock = threading.Lock()
        for front in self._fronts:
            for slots in front:
                slots.clear()
                slots.credit = 0
        self._closed = True

    def __enter__(self) -> MemPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<MemPool on {self._device!r} {state}>"


_POOLS: weakref.WeakSet[MemPool] = weakref.WeakSet()  # every MemPool of this process, for the fork hook


def _orphan_after_fork() -> None:
    """A forked child inherits its parent's pools, not their device memory (MemPool._orphan)."""
    for pool in list(_POOLS):
        pool._orphan()


os.register_at_fork(after_in_child=_orphan_after_fork)

if _compiled:
    _compiled.configure_pool(PooledBuffer, _PoolCore.alloc, _PooledCore.free, FRONT_BUCKETS, MIN_SHIFT, _Slots, MemPool)
