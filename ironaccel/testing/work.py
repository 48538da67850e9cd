"""Work that keeps a device busy for a measured while, and the small host helpers it needs: shared by the
conformance suite (conformance/helpers.py re-exports them) and the backends' own tests, in a checkout and
in an installed wheel alike."""

from __future__ import annotations

import time

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
    """What the ``busy`` kernel writes at these thread indices: an iters-step LCG from the index."""
    v = np.asarray(index, dtype=np.uint32).copy()
    for _ in range(iters):
        v = v * np.uint32(1664525) + np.uint32(1013904223)
    return v


class RunningWork:
    """``busy`` launches sized on this device to keep a stream busy for about ``seconds``, so a test can
    look at a stream, an event or a wait while work is really still running (a no-op wait, a query that
    always says True or a synchronize that returns early then fail).

    The size is measured, not guessed: a launch is timed (as the difference between one and five launches
    before a synchronize, so the cost of waiting cancels out) while it grows — wider up to 2^20 threads,
    then longer loops up to 65,535 iterations, the most lavapipe runs — until it takes 10 ms or more;
    then enough launches are queued for ``seconds``."""

    def __init__(self, device, stream, kernels, seconds: float = 0.5):
        self.kernel = kernels("busy")
        self.n, self.iters = 1024, 16
        while True:
            buf = device.alloc(4 * self.n)
            self._timed(stream, buf, 1)  # untimed in effect: the first launch of a size may compile or validate
            # what a wait costs cancels out; the median of three rides out a busy host
            per_launch = max(sorted((self._timed(stream, buf, 5) - self._timed(stream, buf, 1)) / 4
                                    for _ in range(3))[1], 1e-7)
            buf.free()
            if per_launch >= 0.01 or self.iters >= 65535:
                break
            if self.n < 1 << 20:
                self.n *= 4
            else:
                self.iters = min(65535, self.iters * 4)
        self.launches = max(1, min(10_000, round(seconds / per_launch)))
        self.expected_seconds = self.launches * per_launch
        self.buf = device.alloc(4 * self.n)

    def _timed(self, stream, buf, launches: int) -> float:
        t0 = time.perf_counter()
        for _ in range(launches):
            self._launch(stream, buf)
        stream.synchronize()
        return time.perf_counter() - t0

    def _launch(self, stream, buf) -> None:
        stream.launch(self.kernel, ceil_div(self.n, 64), 64, (buf, np.uint32(self.iters), np.uint32(self.n)))

    def enqueue(self, stream, buf=None) -> None:
        """Queue the work (every launch writes the same values into ``buf``, by default ``self.buf``)."""
        for _ in range(self.launches):
            self._launch(stream, self.buf if buf is None else buf)

    def check(self, stream, buf=None) -> None:
        """The work completed with the right values (checked at 64 spread thread indices)."""
        got = read(stream, self.buf if buf is None else buf, np.uint32)
        where = np.linspace(0, self.n - 1, 64).astype(np.int64)
        np.testing.assert_array_equal(got[where], lcg(where, self.iters))

    def free(self) -> None:
        self.buf.free()
