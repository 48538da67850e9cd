"""Run a target's device out of memory, safely, and see what the driver's refusal becomes (MEM-7, POOL-8, ERR-4).

``python -m ironaccel.cts.testing.exhaust TARGET`` opens the target's device in this (child) process and prints one
JSON report as its last line. It always runs in a child of the conformance run: a driver that crashes when its
memory runs out then fails the test instead of ending the run, and an address-space limit stays in the child.

How the device is exhausted depends on where its memory lives (``Target.memory_kind``):

* ``device`` (a GPU, the fake libcuda's limit): allocations of ``limits.max_alloc`` bytes until the driver
  refuses, never holding more than ``DeviceInfo.memory`` plus one allocation (a driver that over-commits or
  spills into host memory is reported, not chased), within ``DEADLINE_S``; a device that does not report its
  memory is not exhausted at all (reported as such);
* ``host`` (a CPU driver: its device memory is this process's memory, committed lazily, so it never refuses on
  its own): the same, under an address-space limit (RLIMIT_AS) of ``HOST_BUDGET`` bytes more than the process
  maps already, so what runs out is the driver's real allocation, and the machine is never at risk.

Then the chunk halves after each refusal down to ``FLOOR``, and allocations of ``REQUEST`` bytes go on until
one is refused, so the next one of that size is known to be refused. A MemPool holding ``CACHED_BLOCKS`` blocks of
its biggest bucket (within max_alloc) must then serve ``REQUEST`` by giving its cache back and retrying.

The exhaustion of one device at a time holds a lock (``LOCK``, one per user), so targets certified in parallel on one
machine do not exhaust the same GPU at once; their other tests may still meet the full GPU while it is held (a
second or so on an H200), so hardware targets sharing a GPU are best certified one after the other.
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import sys
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Iterator

import numpy as np

MiB = 1 << 20
FLOOR = 16 * MiB  # the smallest chunk the exhaustion halves down to
REQUEST = 32 * MiB  # what the pool is asked for once the device refuses it
CACHED_BLOCKS = 2  # blocks of the pool's biggest bucket that fits max_alloc, cached beforehand
HOST_BUDGET = 512 * MiB  # address space a host-memory driver may map beyond what it maps at the start
#: The exhaustion gives up (and reports so) after this long: NVIDIA's OpenGL driver takes ~0.3 s per 2 GiB
#: buffer, 22 s for the H200's 150 GB (measured), and must reach its bound, not this deadline.
DEADLINE_S = 60.0
SYNC_EVERY = 8  # allocations between synchronizations (a lazily allocating driver fails at its first use)
#: One per user: a lock file another user made may be unwritable.
LOCK = Path(tempfile.gettempdir()) / f"ironaccel-exhaust-{os.getuid()}.lock"


def _mapped_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


@contextmanager
def _address_space_limit(extra: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (_mapped_bytes() + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextmanager
def _exclusive() -> Iterator[None]:
    with open(LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _error(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "op": getattr(exc, "op", None), "message": str(exc)[:1000]}


def _open(target: Any) -> Any:
    from ...backends import get

    backend = get(target.backend)
    for index in range(backend.device_count()):
        device = backend.open_device(index)
        if target.matches(device.info):
            return device
        device.close()
    raise RuntimeError(f"no device of {target.name}")


def _fill_until_refused(device: Any, stream: Any, held: list[Any], chunk: int, bound: int,
                        deadline: float) -> dict[str, Any] | None:
    """Allocate ``chunk`` bytes at a time into ``held`` until the device refuses (the refusal is returned), or
    None when ``bound`` bytes are held or the deadline passed without one."""
    from ...errors import OutOfMemory

    while sum(b.nbytes for b in held) + chunk <= bound and time.monotonic() < deadline:
        try:
            buf = device.alloc(chunk)
            held.append(buf)
            stream.fill(buf, 0x3C, nbytes=1)  # a driver that allocates at first use allocates now
            if len(held) % SYNC_EVERY == 0:
                stream.synchronize()
        except OutOfMemory as exc:
            return _error(exc)
    return None


def exhaust(target_name: str) -> dict[str, Any]:
    from ... import MemPool
    from ...errors import IronAccelError
    from ...pool import BUCKET_SIZES
    from ..targets import get

    target = get(target_name)
    os.environ.update(target.environment())
    device = _open(target)
    info = device.info
    stream = device.create_stream()
    report: dict[str, Any] = {"memory_kind": target.memory_kind, "memory": info.memory,
                              "max_alloc": info.limits.max_alloc}
    if target.memory_kind == "device" and not info.memory:  # a GPU driver may spill into host memory
        device.close()
        return {**report, "refusal": None, "held_bytes": 0, "seconds": 0.0,
                "why": "the device does not report its memory (DeviceInfo.memory is 0), so its exhaustion cannot "
                       "be bounded safely"}
    saxpy = target.compile_kernel(device, "saxpy")  # before: a compiler needs memory too
    pool = MemPool(device, stream)
    cached_size = max(b for b in BUCKET_SIZES if b <= info.limits.max_alloc)
    if cached_size <= REQUEST:
        raise RuntimeError(f"max_alloc {info.limits.max_alloc} leaves no pool bucket above {REQUEST} bytes")
    cached = [pool.alloc(cached_size) for _ in range(CACHED_BLOCKS)]
    for buf in cached:
        buf.free()
    report["cached_before"] = pool.stats().bytes_cached
    held: list[Any] = []
    host = target.memory_kind == "host"
    chunk = min(info.limits.max_alloc, HOST_BUDGET // 4) if host else info.limits.max_alloc
    bound = 2 * HOST_BUDGET if host else info.memory + info.limits.max_alloc
    pooled = None
    with _exclusive(), (_address_space_limit(HOST_BUDGET) if host else nullcontext()):
        # timed from here: the wait for the lock (another target's exhaustion, certifications run in parallel)
        # must not use up the deadline
        deadline = time.monotonic() + DEADLINE_S
        started = time.monotonic()
        try:
            refusals = []
            while chunk >= FLOOR:
                refusal = _fill_until_refused(device, stream, held, chunk, bound, deadline)
                if refusal is None:
                    break
                refusals.append(refusal)
                chunk //= 2
            report["refusal"] = refusals[0] if refusals else None
            report["held_bytes"] = sum(b.nbytes for b in held)
            if not refusals:  # the bound: the driver over-commits or spills into host memory
                report["stopped_by"] = "deadline" if time.monotonic() >= deadline else "bound"
            if refusals and chunk < FLOOR:
                last = _fill_until_refused(device, stream, held, REQUEST, bound, deadline)
                report["request_refused"] = last
                if last is not None:
                    misses = pool.stats().misses
                    try:  # right after the device refused this size: the pool must give its cache back and retry
                        pooled = pool.alloc(REQUEST)
                    except IronAccelError as exc:
                        report["pool"] = {"ok": False, "error": _error(exc)}
                    else:
                        stats = pool.stats()
                        report["pool"] = {"ok": True, "cached_after": stats.bytes_cached,
                                          "misses": stats.misses - misses}
        finally:
            for buf in held:
                buf.free()
            held.clear()
    report["seconds"] = round(time.monotonic() - started, 3)
    try:
        device.synchronize()
        if pooled is not None:  # used only now: a copy may need staging memory, which the limit left none of
            report["pool"]["contents_ok"] = _round_trips(stream, pooled)
            pooled.free()
        report["works_after"] = _saxpy_works(device, stream, saxpy)
    except IronAccelError as exc:
        report["works_after"] = False
        report["error_after"] = _error(exc)
    pool.close()
    device.close()
    return report


def _round_trips(stream: Any, buf: Any) -> bool:
    data = np.random.default_rng(11).integers(1, 256, buf.nbytes, dtype=np.uint8)
    stream.copy_htod(buf, data)
    got = np.zeros(buf.nbytes, np.uint8)
    stream.copy_dtoh(got, buf)
    stream.synchronize()
    return bool(np.array_equal(got, data))


def _saxpy_works(device: Any, stream: Any, saxpy: Any) -> bool:
    n = 4096
    x = np.arange(n, dtype=np.float32)
    y = np.full(n, 2.0, np.float32)
    with device.alloc(x.nbytes) as bx, device.alloc(y.nbytes) as by:
        stream.copy_htod(bx, x)
        stream.copy_htod(by, y)
        stream.launch(saxpy, (n // 64,), (64,), (bx, by, np.float32(3.0), np.uint32(n)))
        got = np.empty(n, np.float32)
        stream.copy_dtoh(got, by)
        stream.synchronize()
    return bool(np.array_equal(got, np.float32(3.0) * x + y))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m ironaccel.cts.testing.exhaust TARGET", file=sys.stderr)
        return 2
    print(json.dumps(exhaust(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
