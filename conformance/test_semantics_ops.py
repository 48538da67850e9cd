"""SEM-40..46: a table-driven battery of the operations kernels use most, each compared with numpy — integer
min/max/abs, bit counts, unsigned division, int -> float and float16 conversions, a constant table, a block
reduction of any block size, atomics under contention, 64-bit integers, subgroup reduction and broadcast.

Only what every kernel dialect defines alike is asserted (SPEC.md, SEM): where a dialect lets the driver pick
one of two results (a conversion that is not exact), either is accepted, and the results' digests still go to
``record_output`` so ``ironaccel status`` shows which targets picked the same."""

from __future__ import annotations

import numpy as np
import pytest

from .helpers import ceil_div, poisoned, read, rng, upload

BLOCK = 64
#: Edge values of a u32 (as i32 too: 0x80000000 is INT_MIN, 0xFFFFFFFF is -1), and around float32's 24 bits.
EDGE_U32 = np.array([0, 1, 2, 3, 5, 15, 16, 31, 32, 0xFF, 0x100, 0xFFFF, 0x10000, 0xFFFFFF, 0x1000000, 0x1000001,
                     0x1000003, 0x7FFFFF80, 0x7FFFFFC0, 0x7FFFFFFF, 0x80000000, 0x80000001, 0x80000040, 0xFF000001,
                     0xFFFFFF7F, 0xFFFFFFFE, 0xFFFFFFFF, 0x12345678, 0x9E3779B9], dtype=np.uint32)
#: The constant table every sem_ops kernel declares (digits of pi), read at index (x ^ y) & 15.
TABLE = np.array([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344, 0xA4093822, 0x299F31D0, 0x082EFA98, 0xEC4E6C89,
                  0x452821E6, 0x38D01377, 0xBE5466CF, 0x34E90C6C, 0xC0AC29B7, 0xC97C50DD, 0x3F84D5B5, 0xB5470917],
                 dtype=np.uint32)
#: The columns sem_ops writes per element: the integer ones (exact) then the two conversions to float.
INT_COLUMNS = ["min u32", "max u32", "min i32", "max i32", "abs i32", "popcount", "count leading zeros",
               "u32 x / y", "u32 x % y"]
FLOAT_COLUMNS = ["float(i32)", "float(u32)"]
OPS = len(INT_COLUMNS) + len(FLOAT_COLUMNS) + 1


def op_inputs() -> tuple[np.ndarray, np.ndarray]:
    """Every pair of edge values, then random ones (some of them small, so divisions have a quotient above 1);
    never a divisor 0."""
    a, b = (g.ravel() for g in np.meshgrid(EDGE_U32, EDGE_U32))
    r = rng(40)
    a = np.concatenate([a, r.integers(0, 2**32, 2000, dtype=np.uint32), r.integers(0, 2**32, 500, dtype=np.uint32)])
    b = np.concatenate([b, r.integers(0, 2**32, 2000, dtype=np.uint32), r.integers(1, 1000, 500, dtype=np.uint32)])
    b[b == 0] = 7
    return a, b


def bit_length(x: np.ndarray) -> np.ndarray:
    return np.array([int(v).bit_length() for v in x], dtype=np.uint32)


def int_expected(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    sa, sb = a.view(np.int32), b.view(np.int32)
    cols = [np.minimum(a, b), np.maximum(a, b), np.minimum(sa, sb).view(np.uint32), np.maximum(sa, sb).view(np.uint32),
            np.abs(np.maximum(sa, np.int32(-2**31 + 1))).view(np.uint32), np.bitwise_count(a).astype(np.uint32),
            np.uint32(32) - bit_length(a), a // b, a % b]
    return np.stack(cols, axis=1)


def float_neighbours(exact: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For integers (as float64, where they are exact): the float32 nearest (ties to even) and the float32 on the
    other side of the exact value (the same float where it is exact): a conversion may give either (SEM-41)."""
    nearest = exact.astype(np.float32)
    other = np.where(nearest.astype(np.float64) < exact, np.nextafter(nearest, np.float32(np.inf)),
                     np.where(nearest.astype(np.float64) > exact, np.nextafter(nearest, np.float32(-np.inf)), nearest))
    return nearest, other.astype(np.float32)


def run_sem_ops(device, stream, kernels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a, b = op_inputs()
    n = a.size
    ba, bb = upload(device, stream, a), upload(device, stream, b)
    out = poisoned(device, stream, 4 * OPS * n)
    stream.launch(kernels("sem_ops"), ceil_div(n, BLOCK), BLOCK, (ba, bb, out, np.uint32(n)))
    got = read(stream, out, np.uint32).reshape(n, OPS)
    for buf in (ba, bb, out):
        buf.free()
    return a, b, got


def first_wrong(name: str, bad: np.ndarray, a: np.ndarray, b: np.ndarray, got: np.ndarray, want) -> str:
    k = bad[0]
    return (f"{name}: {bad.size} of {a.size} wrong; first at x={a[k]:#010x} y={b[k]:#010x}: "
            f"got {got[k]!r}, want {want[k]!r}")


@pytest.mark.clause("SEM-40")
def test_integer_operations_match_numpy(device, stream, kernels, record_output):
    a, b, got = run_sem_ops(device, stream, kernels)
    ints = np.ascontiguousarray(got[:, :len(INT_COLUMNS)])
    record_output("ints", ints)
    want = int_expected(a, b)
    for col, name in enumerate(INT_COLUMNS):
        bad = np.flatnonzero(ints[:, col] != want[:, col])
        assert bad.size == 0, first_wrong(name, bad, a, b, ints[:, col], want[:, col])
    table = got[:, -1]
    bad = np.flatnonzero(table != TABLE[(a ^ b) & 15])
    assert bad.size == 0, first_wrong("constant table", bad, a, b, table, TABLE[(a ^ b) & 15])


@pytest.mark.clause("SEM-41")
def test_int_to_float_rounds_to_a_neighbour(device, stream, kernels, record_output):
    a, b, got = run_sem_ops(device, stream, kernels)
    floats = np.ascontiguousarray(got[:, len(INT_COLUMNS):len(INT_COLUMNS) + 2]).view(np.float32)
    record_output("floats", floats)
    for col, (name, exact) in enumerate(zip(FLOAT_COLUMNS, [a.view(np.int32).astype(np.float64),
                                                            a.astype(np.float64)])):
        nearest, other = float_neighbours(exact)
        bits = floats[:, col].view(np.uint32)
        bad = np.flatnonzero((bits != nearest.view(np.uint32)) & (bits != other.view(np.uint32)))
        assert bad.size == 0, first_wrong(name, bad, a, b, floats[:, col], nearest) + " (or the float on the other side)"


def half_inputs() -> tuple[np.ndarray, np.ndarray]:
    """x: every finite normal float16 (exact in float16), then random float32s of that range (mostly not);
    h: the bits of zero and of every finite normal float16 (twice over, as many as x). Subnormals (a driver may flush them) and values past
    float16's range (WGSL leaves their packing undefined) are left out."""
    normal = np.array([s | e << 10 | m for s in (0, 0x8000) for e in range(1, 31) for m in range(1024)], np.uint16)
    h = np.concatenate([np.zeros(1, np.uint16), normal])
    r = rng(42)
    magnitude = np.exp2(r.uniform(-14, np.log2(65504), h.size)).astype(np.float32)
    x = np.concatenate([normal.view(np.float16).astype(np.float32), np.zeros(1, np.float32),
                        np.where(r.integers(0, 2, h.size) == 1, magnitude, -magnitude)])
    return x, np.resize(h, x.size).astype(np.uint32)


@pytest.mark.clause("SEM-42")
def test_float16_conversions(device, stream, kernels, record_output):
    x, h = half_inputs()
    n = x.size
    bx, bh = upload(device, stream, x), upload(device, stream, h)
    with poisoned(device, stream, 8 * n) as out:
        stream.launch(kernels("sem_half"), ceil_div(n, BLOCK), BLOCK, (bx, bh, out, np.uint32(n)))
        got = read(stream, out, np.uint32).reshape(n, 2)
    bx.free()
    bh.free()
    record_output("half", got)
    widened = got[:, 1]
    want = h.astype(np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    bad = np.flatnonzero(widened != want)
    assert bad.size == 0, f"float16 -> float32: {bad.size} wrong; first {h[bad[0]]:#06x}: got {widened[bad[0]]:#010x}, want {want[bad[0]]:#010x}"
    nearest = x.astype(np.float16)
    toward = np.where(nearest.astype(np.float32) < x, np.float16(np.inf), np.float16(-np.inf))
    with np.errstate(over="ignore"):  # computed for every value, used only where x is not a float16
        other = np.where(nearest.astype(np.float32) == x, nearest, np.nextafter(nearest, toward))
    narrowed = got[:, 0]
    bad = np.flatnonzero((narrowed != nearest.view(np.uint16)) & (narrowed != other.view(np.uint16)))
    assert bad.size == 0, (f"float32 -> float16: {bad.size} wrong; first {x[bad[0]]!r}: got {narrowed[bad[0]]:#06x}, "
                           f"want {nearest.view(np.uint16)[bad[0]]:#06x} (or {other.view(np.uint16)[bad[0]]:#06x})")


#: Edge values of a u64 (as i64 too), and ones whose halves carry into each other.
EDGE_U64 = np.array([0, 1, 2, 63, 64, 0xFFFFFFFF, 0x100000000, 0x100000001, 0x7FFFFFFFFFFFFFFF, 0x8000000000000000,
                     0x8000000000000001, 0xFFFFFFFF00000000, 0xFFFFFFFFFFFFFFFE, 0xFFFFFFFFFFFFFFFF,
                     0x9E3779B97F4A7C15], dtype=np.uint64)


@pytest.mark.clause("SEM-45")
def test_int64_operations_match_numpy(device, stream, kernels, require, record_output):
    require("kernel.int64")
    a, b = (g.ravel() for g in np.meshgrid(EDGE_U64, EDGE_U64))
    r = rng(45)
    a = np.concatenate([a, r.integers(0, 2**64, 1000, dtype=np.uint64)])
    b = np.concatenate([b, r.integers(0, 2**64, 1000, dtype=np.uint64)])
    n = a.size
    ba, bb = upload(device, stream, a), upload(device, stream, b)
    with poisoned(device, stream, 8 * 6 * n) as out:
        stream.launch(kernels("sem_int64"), ceil_div(n, BLOCK), BLOCK, (ba, bb, out, np.uint32(n)))
        got = read(stream, out, np.uint64).reshape(n, 6)
    ba.free()
    bb.free()
    record_output("int64", got)
    s = b & np.uint64(63)
    want = np.stack([a + b, a - b, a * b, a << s, a >> s, np.minimum(a.view(np.int64), b.view(np.int64)).view(np.uint64)],
                    axis=1)
    for col, name in enumerate(["x + y", "x - y", "x * y", "x << (y & 63)", "x >> (y & 63)", "min i64"]):
        bad = np.flatnonzero(got[:, col] != want[:, col])
        assert bad.size == 0, (f"{name}: {bad.size} of {n} wrong; first at x={a[bad[0]]:#018x} y={b[bad[0]]:#018x}: "
                               f"got {got[bad[0], col]:#018x}, want {want[bad[0], col]:#018x}")


@pytest.mark.clause("SEM-43")
@pytest.mark.parametrize("block", [1, 37, 100, 256])
def test_block_reduction_of_any_size(device, stream, kernels, require, record_output, block):
    require("kernel.shared_memory")
    n = 1000
    x = rng(43).integers(0, 2**32, n, dtype=np.uint32)
    grid = ceil_div(n, block)
    bx = upload(device, stream, x)
    with poisoned(device, stream, 12 * grid) as partial, poisoned(device, stream, 4 * n) as seen:
        stream.launch(kernels("sem_reduce"), grid, block, (bx, partial, seen, np.uint32(n)))
        got = read(stream, partial, np.uint32).reshape(grid, 3)
        got_seen = read(stream, seen, np.uint32)
    bx.free()
    record_output("partial", got)
    padded = np.concatenate([x, np.zeros(grid * block - n, np.uint32)]).reshape(grid, block)
    members = (np.arange(grid * block) < n).reshape(grid, block)
    want = np.stack([padded.sum(axis=1, dtype=np.uint32), np.where(members, padded, np.uint32(2**32 - 1)).min(axis=1),
                     padded.max(axis=1)], axis=1)
    for col, name in enumerate(["sum", "min", "max"]):
        bad = np.flatnonzero(got[:, col] != want[:, col])
        assert bad.size == 0, (f"block {block}: the {name} of {bad.size} of {grid} blocks wrong; first block {bad[0]}: "
                               f"got {got[bad[0], col]:#010x}, want {want[bad[0], col]:#010x}")
    bad = np.flatnonzero(got_seen != np.repeat(want[:, 0], block)[:n])
    assert bad.size == 0, f"block {block}: {bad.size} threads read another sum than the block's after the last barrier (first thread {bad[0]})"


ATOMIC_BLOCK = 128
INT32_MIN, INT32_MAX = -2**31, 2**31 - 1


def run_sem_atomics(device, stream, kernels, require):
    """sem_atomics on 2,000 threads (the last block partial): their values x, the hashed h, and the results."""
    require("kernel.atomics.int32")
    require("kernel.shared_memory")
    n = 2000
    x = rng(44).integers(1, 1001, n, dtype=np.uint32)
    grid = ceil_div(n, ATOMIC_BLOCK)
    bufs = [upload(device, stream, x), upload(device, stream, np.array([0, 2**32 - 1, 0, 0, 0], np.uint32)),
            upload(device, stream, np.array([INT32_MAX, INT32_MIN], np.int32)), poisoned(device, stream, 20 * n),
            poisoned(device, stream, 28 * grid)]
    stream.launch(kernels("sem_atomics"), grid, ATOMIC_BLOCK, (*bufs, np.uint32(n)))
    g, gs = read(stream, bufs[1], np.uint32), read(stream, bufs[2], np.int32)
    olds, blocks = read(stream, bufs[3], np.uint32).reshape(n, 5), read(stream, bufs[4], np.uint32).reshape(grid, 7)
    for buf in bufs:
        buf.free()
    return x, x * np.uint32(0x9E3779B1), g, gs, olds, blocks


def assert_add_chain(olds: np.ndarray, x: np.ndarray, where: str) -> None:
    """The values atomic adds returned, in the order the adds took effect, are the running sums of the others."""
    order = np.argsort(olds, kind="stable")
    want = np.concatenate([[0], np.cumsum(x[order], dtype=np.uint32)[:-1]]).astype(np.uint32)
    assert np.array_equal(olds[order], want), f"{where}: the old values atomicAdd returned are not the running sums"


def assert_each_once(values: np.ndarray, want: np.ndarray, what: str) -> None:
    assert np.array_equal(np.sort(values), np.sort(want)), f"{what}: not each value once"


@pytest.mark.clause("SEM-44")
def test_global_atomics_under_contention(device, stream, kernels, require, record_output):
    x, h, g, gs, olds, _ = run_sem_atomics(device, stream, kernels, require)
    n = x.size
    record_output("global", np.concatenate([g[[0, 1, 2, 4]], gs.view(np.uint32)]))
    assert g[0] == x.sum(dtype=np.uint32), f"atomicAdd: the counter is {g[0]}, want {x.sum()}"
    assert_add_chain(olds[:, 0], x, "global atomicAdd")
    assert (g[1], g[2]) == (h.min(), h.max()), f"u32 atomicMin/Max: got {g[1]:#x}, {g[2]:#x}, want {h.min():#x}, {h.max():#x}"
    sh = h.view(np.int32)
    assert (gs[0], gs[1]) == (sh.min(), sh.max()), f"i32 atomicMin/Max: got {gs[0]}, {gs[1]}, want {sh.min()}, {sh.max()}"
    assert_each_once(np.append(olds[:, 1], g[3]), np.arange(n + 1, dtype=np.uint32),
                     "atomicExch of i + 1: the old values and the last one are not 0..n")
    assert g[4] == n, f"{n} compare-exchange increments: the counter is {g[4]}"
    assert_each_once(olds[:, 2], np.arange(n, dtype=np.uint32), "the compare-exchanges that succeeded saw 0..n-1")


@pytest.mark.clause("SEM-44")
def test_shared_atomics_under_contention(device, stream, kernels, require, record_output):
    x, h, _, _, olds, blocks = run_sem_atomics(device, stream, kernels, require)
    record_output("shared", np.ascontiguousarray(blocks[:, [0, 1, 2, 4, 5, 6]]))
    sh = h.view(np.int32)
    for b in range(blocks.shape[0]):
        m = np.arange(b * ATOMIC_BLOCK, min((b + 1) * ATOMIC_BLOCK, x.size))
        got = blocks[b]
        assert got[0] == x[m].sum(dtype=np.uint32), f"block {b}: shared atomicAdd gives {got[0]}, want {x[m].sum()}"
        assert_add_chain(olds[m, 3], x[m], f"block {b}: shared atomicAdd")
        assert (got[1], got[2]) == (h[m].min(), h[m].max()), f"block {b}: shared u32 atomicMin/Max: got {got[1]:#x}, {got[2]:#x}"
        assert (got[5:].view(np.int32) == [sh[m].min(), sh[m].max()]).all(), f"block {b}: shared i32 atomicMin/Max: got {got[5:].view(np.int32)}"
        assert_each_once(np.append(olds[m, 4], got[3]), np.append(np.uint32(0), m + 1).astype(np.uint32),
                         f"block {b}: shared atomicExch of i + 1")
        assert got[4] == m.size, f"block {b}: {m.size} shared compare-exchange increments give {got[4]}"


@pytest.mark.clause("KERNEL-61")
@pytest.mark.parametrize("block", [64, 256])
def test_subgroups_are_as_wide_as_the_warp_size_says(device, stream, kernels, require, block):
    require("kernel.subgroups")
    w = device.info.limits.warp_size
    n = 2 * block
    bx = upload(device, stream, np.arange(n, dtype=np.uint32))
    with poisoned(device, stream, 20 * n) as out:
        stream.launch(kernels("sem_subgroup"), 2, block, (bx, out, np.uint32(n)))
        size = read(stream, out, np.uint32).reshape(n, 5)[:, 2]
    bx.free()
    assert w == 0 or (size >= w).all(), f"limits.warp_size is {w}, but a kernel's subgroups are {np.unique(size)} wide"


@pytest.mark.clause("SEM-46")
@pytest.mark.parametrize("block", [40, 64, 256])
def test_subgroup_sum_and_broadcast(device, stream, kernels, require, record_output, block):
    require("kernel.subgroups")
    n = 1000
    x = rng(46).integers(0, 2**32, n, dtype=np.uint32)
    bx = upload(device, stream, x)
    with poisoned(device, stream, 20 * n) as out:
        stream.launch(kernels("sem_subgroup"), ceil_div(n, block), block, (bx, out, np.uint32(n)))
        got = read(stream, out, np.uint32).reshape(n, 5)
    bx.free()
    record_output("subgroup", got)
    sums, first, size, lane, prefix = got.T
    local = np.arange(n) % block
    assert (size == size[0]).all() and 1 <= size[0] <= 128 and size[0] & (size[0] - 1) == 0, \
        f"the subgroup sizes are not one power of two: {np.unique(size)}"
    # a subgroup: the threads of one block whose broadcast gave the same first invocation
    groups: dict[tuple[int, int], list[int]] = {}
    for i in range(n):
        groups.setdefault((i // block, int(first[i])), []).append(i)
    for (b, leader), members in groups.items():
        m = np.array(members)
        where = f"block size {block}: the subgroup of block {b} led by thread {leader}"
        assert leader in local[m], f"{where}: its first invocation is not one of its threads"
        assert m.size <= size[0] and np.unique(lane[m]).size == m.size and (lane[m] < size[0]).all(), \
            f"{where}: {m.size} threads with lanes {lane[m].tolist()} in a subgroup of {size[0]}"
        want = x[m].sum(dtype=np.uint32)
        assert (sums[m] == want).all(), f"{where}: subgroup sums {np.unique(sums[m]).tolist()}, want {want}"
        by_lane = m[np.argsort(lane[m])]
        want_prefix = np.cumsum(x[by_lane], dtype=np.uint32)
        assert (prefix[by_lane] == want_prefix).all(), f"{where}: the inclusive prefix sums are wrong"
