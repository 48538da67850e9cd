"""SEM: what a kernel computes, where drivers have been seen to differ — integer wrap-around, signed division,
shifts, inf/NaN, float->int conversion, long loops, atomics under contention, barriers in loops.

Inputs are fixed (seeded), so every target computes the same thing: each test records its results' digest
(``record_output``) and ``ironaccel status`` lists which targets agree (the differential check)."""

from __future__ import annotations

import numpy as np
import pytest

from .helpers import ceil_div, lcg, poisoned, read, rng, upload

#: Results sem_int writes per element: x+y, x-y, x*y, sx/sy, sx%sy, x<<(y&31), x>>(y&31).
INT_OPS = 7
BLOCK = 64
EDGE_U32 = np.array([0, 1, 2, 3, 7, 31, 32, 33, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFFFE, 0xFFFFFFFF,
                     0x10000, 0xFFFF, 0x12345678, 0x9E3779B9], dtype=np.uint32)


def int_inputs() -> tuple[np.ndarray, np.ndarray]:
    """Every pair of edge values, then random ones; never a divisor 0 nor INT_MIN / -1 (undefined everywhere)."""
    a, b = (g.ravel() for g in np.meshgrid(EDGE_U32, EDGE_U32))
    r = rng(11)
    a = np.concatenate([a, r.integers(0, 2**32, 3000, dtype=np.uint32)])
    b = np.concatenate([b, r.integers(0, 2**32, 3000, dtype=np.uint32)])
    b[b == 0] = 5
    b[(a == 0x80000000) & (b == 0xFFFFFFFF)] = 3
    return a, b


def int_expected(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's uint32 arithmetic wraps; signed division truncates toward zero (numpy's // floors, so it is
    built from magnitudes), and the remainder takes the dividend's sign."""
    sa, sb = a.view(np.int32).astype(np.int64), b.view(np.int32).astype(np.int64)
    q = np.sign(sa) * np.sign(sb) * (np.abs(sa) // np.abs(sb))
    s = b & np.uint32(31)
    cols = [a + b, a - b, a * b, q.astype(np.int32).view(np.uint32), (sa - q * sb).astype(np.int32).view(np.uint32),
            a << s, a >> s]
    return np.stack(cols, axis=1).ravel()


def run_sem_int(device, stream, kernels) -> tuple[np.ndarray, np.ndarray]:
    a, b = int_inputs()
    n = a.size
    ba, bb = upload(device, stream, a), upload(device, stream, b)
    out = poisoned(device, stream, 4 * INT_OPS * n)
    stream.launch(kernels("sem_int"), ceil_div(n, BLOCK), BLOCK, (ba, bb, out, np.uint32(n)))
    got = read(stream, out, np.uint32).reshape(n, INT_OPS)
    for buf in (ba, bb, out):
        buf.free()
    return got, int_expected(a, b).reshape(n, INT_OPS)


def assert_ops_equal(got: np.ndarray, want: np.ndarray, a: np.ndarray, b: np.ndarray, names: list[str]) -> None:
    for col, name in enumerate(names):
        bad = np.flatnonzero(got[:, col] != want[:, col])
        assert bad.size == 0, (f"{name}: {bad.size} wrong; first at a={a[bad[0]]:#010x} b={b[bad[0]]:#010x}: "
                               f"got {got[bad[0], col]:#010x}, want {want[bad[0], col]:#010x}")


@pytest.mark.clause("SEM-1")
def test_u32_wraps(device, stream, kernels, record_output):
    got, want = run_sem_int(device, stream, kernels)
    record_output("wrap", np.ascontiguousarray(got[:, :3]))
    a, b = int_inputs()
    assert_ops_equal(got[:, :3], want[:, :3], a, b, ["x + y", "x - y", "x * y"])


@pytest.mark.clause("SEM-2")
def test_signed_division_truncates(device, stream, kernels, record_output):
    got, want = run_sem_int(device, stream, kernels)
    record_output("divmod", np.ascontiguousarray(got[:, 3:5]))
    a, b = int_inputs()
    assert_ops_equal(got[:, 3:5], want[:, 3:5], a, b, ["i32 x / y", "i32 x % y"])


@pytest.mark.clause("SEM-3")
def test_shifts_below_width(device, stream, kernels, record_output):
    got, want = run_sem_int(device, stream, kernels)
    record_output("shifts", np.ascontiguousarray(got[:, 5:]))
    a, b = int_inputs()
    assert_ops_equal(got[:, 5:], want[:, 5:], a, b, ["x << (y & 31)", "x >> (y & 31)"])


SPECIAL_F32 = np.array([0.0, 1.0, -1.0, 1.5, -2.25, 1e-3, 3.0e38, -3.0e38, np.inf, -np.inf, np.nan], dtype=np.float32)
#: float -> int inputs, all inside int32's range: fractions either side of zero, and the largest float32s below 2^31
CONVERT_F32 = np.array([0.0, 0.5, -0.5, 0.99, -0.99, 1.0, -1.0, 1.5, -1.5, 2.7, -2.7, 123.999, -123.999,
                        16777217.0, -16777217.0, 2147483520.0, -2147483520.0, -2147483648.0], dtype=np.float32)


def canonical(x: np.ndarray) -> np.ndarray:
    """One NaN and one zero: NaN payloads and the sign of a zero are not what SEM-4 compares."""
    x = x.copy()
    x[np.isnan(x)] = np.float32(np.nan)
    x[x == 0] = 0.0
    return x


def run_sem_float(device, stream, kernels):
    a, b = (g.ravel() for g in np.meshgrid(SPECIAL_F32, SPECIAL_F32))
    r = rng(12)
    a = np.concatenate([a, (r.standard_normal(1000) * 100).astype(np.float32)])
    b = np.concatenate([b, (r.standard_normal(1000) * 100).astype(np.float32)])
    c = np.concatenate([CONVERT_F32, r.uniform(-2.1e9, 2.1e9, 1000).astype(np.float32),
                        r.uniform(-1000, 1000, a.size - CONVERT_F32.size - 1000).astype(np.float32)])
    n = a.size
    bufs = [upload(device, stream, a), upload(device, stream, b), poisoned(device, stream, 8 * n),
            upload(device, stream, c), poisoned(device, stream, 4 * n)]
    stream.launch(kernels("sem_float"), ceil_div(n, BLOCK), BLOCK, (*bufs, np.uint32(n)))
    out = read(stream, bufs[2], np.float32).reshape(n, 2)
    conv = read(stream, bufs[4], np.uint32)
    for buf in bufs:
        buf.free()
    return a, b, c, out, conv


@pytest.mark.clause("SEM-4")
def test_inf_nan_propagate(device, stream, kernels, record_output):
    a, b, _, out, _ = run_sem_float(device, stream, kernels)
    record_output("addmul", canonical(out))
    with np.errstate(all="ignore"):
        want = np.stack([a + b, a * b], axis=1)
    for col, name in enumerate(["a + b", "a * b"]):
        got_c, want_c = canonical(out[:, col]), canonical(want[:, col])
        bad = np.flatnonzero(got_c.view(np.uint32) != want_c.view(np.uint32))
        assert bad.size == 0, f"{name}: {bad.size} wrong; first a={a[bad[0]]} b={b[bad[0]]}: got {got_c[bad[0]]}, want {want_c[bad[0]]}"


@pytest.mark.clause("SEM-5")
def test_float_to_int_truncates(device, stream, kernels, record_output):
    _, _, c, _, conv = run_sem_float(device, stream, kernels)
    record_output("conv", conv)
    want = np.trunc(c.astype(np.float64)).astype(np.int32).view(np.uint32)
    bad = np.flatnonzero(conv != want)
    assert bad.size == 0, f"{bad.size} wrong; first int({c[bad[0]]!r}) gave {conv[bad[0]].view(np.int32)}, want {want[bad[0]].view(np.int32)}"


@pytest.mark.clause("SEM-6")
@pytest.mark.parametrize("iters", [65_536, 100_003])
def test_long_loop_runs_every_iteration(device, stream, kernels, record_output, iters):
    n = 32
    with poisoned(device, stream, 4 * n) as out:
        stream.launch(kernels("busy"), 1, n, (out, np.uint32(iters), np.uint32(n)))
        got = read(stream, out, np.uint32)
    record_output("lcg", got)
    want = lcg(np.arange(n), iters)
    if not np.array_equal(got, want):
        short = [k for k in (65_535, 65_536, 65_535 * 2) if k < iters and np.array_equal(got, lcg(np.arange(n), k))]
        pytest.fail(f"a {iters}-iteration loop gave wrong values" +
                    (f": those of {short[0]} iterations (the loop stopped early)" if short else ""))


@pytest.mark.clause("SEM-7")
def test_atomic_add_under_contention(device, stream, kernels, require, record_output):
    require("kernel.atomics.int32")
    n, block = 1 << 16, 256
    counter = device.alloc(4)
    stream.fill(counter, 0)
    with poisoned(device, stream, 4 * n) as olds:
        stream.launch(kernels("sem_atomic"), n // block, block, (counter, olds, np.uint32(n)))
        total = read(stream, counter, np.uint32)[0]
        seen = np.sort(read(stream, olds, np.uint32))
    counter.free()
    record_output("counter", np.array([total], dtype=np.uint32))
    assert total == n, f"{n} threads each added 1: counter is {total}"
    assert np.array_equal(seen, np.arange(n, dtype=np.uint32)), "the values atomicAdd returned are not 0..n-1 once each"


def rounds_expected(x: np.ndarray, block: int, rounds: int) -> np.ndarray:
    grid = ceil_div(x.size, block)
    vals = np.zeros(grid * block, dtype=np.uint32)
    vals[:x.size] = x
    vals = vals.reshape(grid, block)
    for r in range(rounds):
        total = vals.sum(axis=1, dtype=np.uint32, keepdims=True)
        vals = vals * np.uint32(3) + total + np.uint32(r)
    return vals.ravel()[:x.size]


@pytest.mark.clause("SEM-8")
@pytest.mark.parametrize("block", [64, 256])
def test_barriers_in_loop(device, stream, kernels, require, record_output, block):
    require("kernel.shared_memory")
    n, rounds = 1000, 6
    x = rng(13).integers(0, 2**32, n, dtype=np.uint32)
    bx = upload(device, stream, x)
    with poisoned(device, stream, 4 * n) as out:
        stream.launch(kernels("sem_rounds"), ceil_div(n, block), block, (bx, out, np.uint32(rounds), np.uint32(n)))
        got = read(stream, out, np.uint32)
    bx.free()
    record_output("rounds", got)
    want = rounds_expected(x, block, rounds)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{bad.size} of {n} wrong (first at {bad[0]}, block {bad[0] // block}): a barrier in the loop did not hold"
