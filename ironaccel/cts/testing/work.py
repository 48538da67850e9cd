"""Work that keeps a device busy for a measured while, and the small host helpers it needs: shared by the
conformance suite (conformance/helpers.py re-exports them) and the backends' own tests, in a checkout and
in an installed wheel alike."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def read(stream, buf, dtype=np.uint8, count: int | None = None, offset: int = 0) -> np.ndarray:
    """Copy a buffer (or part of it) back and synchronize."""
    itemsize = np.dtype(dtype).itemsize
    n = (buf.nbytes - offset) // itemsize if count is None else count
    out = np.empty(n, dtype=dtype)
    out.view(np.uint8)[:] = 0x5A  # the opposite of the suite's POISON (0xA5): a copy that never happened shows
    stream.copy_dtoh(out, buf, src_offset=offset)
    stream.synchronize()
    return out


def lcg(index: np.ndarray, iters: int) -> np.ndarray:
    """What the ``busy`` kernel writes at these thread indices: an iters-step LCG from the index, as the one affine
    map the steps compose to (squared log2(iters) times: a fast GPU's launches loop millions of times)."""
    step, total = (1664525, 1013904223), (1, 0)  # (a, c): v -> a*v + c (mod 2^32)
    while iters:
        if iters & 1:
            total = ((step[0] * total[0]) & 0xFFFFFFFF, (step[0] * total[1] + step[1]) & 0xFFFFFFFF)
        step = ((step[0] * step[0]) & 0xFFFFFFFF, (step[0] * step[1] + step[1]) & 0xFFFFFFFF)
        iters >>= 1
    v = np.asarray(index, dtype=np.uint64) & np.uint64(0xFFFFFFFF)
    return ((v * np.uint64(total[0]) + np.uint64(total[1])) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


#: Per device (``_device_key``): the ``busy`` launch size RunningWork has grown to in this process, and the
#: fastest time a launch of that size has taken.
_SIZES: dict[tuple, "_BusySize"] = {}

GROWN_LAUNCH_S = 0.01  # a launch grows until it takes this long: few launches make the work, queued in no time
SOFTWARE_ITERS = 65535  # the most loop iterations lavapipe runs: past them only a device that is not a CPU grows
MAX_ITERS = 1 << 24
#: the most launches a RunningWork makes: CUDA's cuLaunchKernel blocks once about 1,020 launches are pending (the H100,
#: driver 580.159.04: the 1,022nd tiny launch behind a long one waited), so more would make enqueue() wait for the work
MAX_LAUNCHES = 1000


@dataclass
class _BusySize:
    n: int = 1024
    iters: int = 16
    per_launch: float = 0.0  # 0: not timed yet

    def grow(self) -> None:
        """Wider up to 2^20 threads, then longer loops."""
        if self.n < 1 << 20:
            self.n *= 4
        else:
            self.iters = min(MAX_ITERS, SOFTWARE_ITERS if self.iters < SOFTWARE_ITERS < self.iters * 4
                             else self.iters * 4)
        self.per_launch = 0.0

    @property
    def grown(self) -> bool:
        return self.per_launch >= GROWN_LAUNCH_S or self.iters >= MAX_ITERS


def _device_key(device) -> tuple:
    info = device.info
    return info.backend, info.index, info.name, info.driver, info.driver_version


class RunningWork:
    """``busy`` launches sized on this device to keep a stream busy for about ``seconds``, so a test can look
    at a stream, an event or a wait while work is really still running (a no-op wait, a query that always says
    True or a synchronize that returns early then fail).

    The size is measured, not guessed, and kept for the device: every RunningWork times its launch, and while
    the fastest time seen is under 10 ms the launch grows (wider up to 2^20 threads, then longer loops: 65,535
    iterations, the most lavapipe runs, take 1.4 ms on an H100, so a device that runs them in under 10 ms grows on
    up to 2^24). At most MAX_LAUNCHES launches make the work, fewer than CUDA lets pend before a launch blocks.
    A launch is timed with the synchronize that ends it, and on a busy host that synchronize can wake up late by
    more than the launch itself takes: a timing of one launch would then stop the growth early and count too few
    launches, so the work would end long before ``expected_seconds`` says (a correct ``query()`` saying True
    while ``looked_in_time`` holds). So a launch's
    time is the difference between three launches and one, each with its synchronize, which cancels the fixed
    wake-up cost; it is never taken above the one launch's timing, nor below a quarter of it. The fastest
    time seen is kept: a timing taken while the host was busy elsewhere is corrected by the next quiet one."""

    def __init__(self, device, stream, kernels, seconds: float = 0.1):
        self.kernel = kernels("busy")
        size = _SIZES.setdefault(_device_key(device), _BusySize())
        while True:
            self.n, self.iters = size.n, size.iters
            self.buf = device.alloc(4 * self.n)
            if size.per_launch == 0.0:  # a new size: its first launch may compile or validate
                self._timed(stream, self.buf)
                size.per_launch = self._per_launch(stream, self.buf)
            size.per_launch = min(size.per_launch, self._per_launch(stream, self.buf))
            if size.grown:
                break
            self.buf.free()
            size.grow()
        stream.fill(self.buf, 0)  # what the timing wrote is not taken for the work's results (``check``)
        stream.synchronize()
        self.launches = max(1, min(MAX_LAUNCHES, round(seconds / size.per_launch)))
        self.expected_seconds = self.launches * size.per_launch
        self.enqueued_at: float | None = None

    def on(self, device, kernels) -> "RunningWork":
        """The same launches (size, count, expected time) on another device, untimed: for a test whose device
        must run nothing before the work, where this one's timing would have run launches first."""
        work = object.__new__(RunningWork)
        work.kernel = kernels("busy")
        work.n, work.iters = self.n, self.iters
        work.launches, work.expected_seconds = self.launches, self.expected_seconds
        work.buf = device.alloc(4 * self.n)
        work.enqueued_at = None
        return work

    @classmethod
    def tries(cls, device, stream, kernels, seconds: float = 0.1, count: int = 3):
        """RunningWork of ``seconds``, then 3 and 9 times as long, each freed after its try: for a test that
        must look at the work while it runs, and so cannot conclude when the host (busy elsewhere) looked only
        after most of it (``looked_in_time``). A test that never concludes fails."""
        for k in range(count):
            work = cls(device, stream, kernels, seconds * 3 ** k)
            try:
                yield work
            finally:
                work.free()

    def looked_in_time(self) -> bool:
        """Whether it is now less than a third of the work's expected time since ``enqueue`` began, so the work
        is certainly still running (timed as the class says, the work has taken at least 3/5 of its expected
        time even on a host that got quieter)."""
        return time.perf_counter() - self.enqueued_at < self.expected_seconds / 3

    def _per_launch(self, stream, buf) -> float:
        """Seconds one launch keeps the device busy: (T(3) - T(1)) / 2, within [T(1) / 4, T(1)] (class docstring)."""
        one = self._timed(stream, buf, 1)
        three = self._timed(stream, buf, 3)
        return min(one, max((three - one) / 2, one / 4))

    def _timed(self, stream, buf, launches: int = 1) -> float:
        """Seconds ``launches`` back-to-back launches take, one synchronize included (which must have waited for
        them: a synchronize that returns early would otherwise make the work grow without end)."""
        t0 = time.perf_counter()
        for _ in range(launches):
            self._launch(stream, buf)
        done = stream.record()
        stream.synchronize()
        seconds = time.perf_counter() - t0
        assert done.query() is True, "Stream.synchronize() returned before the work enqueued before it completed"
        return seconds

    def _launch(self, stream, buf) -> None:
        stream.launch(self.kernel, ceil_div(self.n, 64), 64, (buf, np.uint32(self.iters), np.uint32(self.n)))

    def enqueue(self, stream, buf=None) -> None:
        """Queue the work (every launch writes the same values into ``buf``, by default ``self.buf``)."""
        self.enqueued_at = time.perf_counter()
        for _ in range(self.launches):
            self._launch(stream, self.buf if buf is None else buf)

    def check(self, stream, buf=None) -> None:
        """The work completed with the right values (checked at 64 spread thread indices)."""
        got = read(stream, self.buf if buf is None else buf, np.uint32)
        where = np.linspace(0, self.n - 1, 64).astype(np.int64)
        np.testing.assert_array_equal(got[where], lcg(where, self.iters))

    def free(self) -> None:
        self.buf.free()
