"""KERNEL (dims): launches whose grid and block are each other's, which a launch cache must tell apart."""

from __future__ import annotations

import numpy as np
import pytest

from .helpers import POISON, poisoned, read

#: (grid, block) pairs and their swaps, as ints and as tuples: the same number of threads each time
SWAPPED = [(4, 64), (64, 4), (8, 32), (32, 8), ((2, 1, 1), (128, 1, 1)), ((128, 1, 1), (2, 1, 1))]


@pytest.mark.clause("KERNEL-63")
@pytest.mark.parametrize("via", ["Stream.launch", "a prepared plan"])
def test_launches_with_grid_and_block_swapped_use_their_own(device, stream, kernels, via):
    """block_ids writes (blockIdx.x << 16) | threadIdx.x: launches of 256 threads cut into blocks one way, then
    the other way round, each twice (a compiled path remembers a launch it has seen twice), back to back into
    buffers of their own, each see their own block and thread indices. A launch cache that looks a launch up
    with its grid and block exchanged, or by their product, runs one with the other's dims."""
    k = kernels("block_ids")
    n = 256
    outs = [poisoned(device, stream, 4 * n) for _ in range(2 * len(SWAPPED))]
    try:
        for i, (grid, block) in enumerate(SWAPPED):
            for out in outs[2 * i:2 * i + 2]:
                if via == "Stream.launch":
                    stream.launch(k, grid, block, (out, np.uint32(n)))
                else:
                    k.prepare(grid, block)(stream, out, np.uint32(n))
        i = np.arange(n, dtype=np.uint32)
        for j, (grid, block) in enumerate(SWAPPED):
            width = block if isinstance(block, int) else block[0]
            want = ((i // width) << 16) | (i % width)
            for out in outs[2 * j:2 * j + 2]:
                got = read(stream, out, np.uint32)
                assert (got != POISON * 0x01010101).all(), f"grid {grid}, block {block}: not every thread ran"
                np.testing.assert_array_equal(got, want, err_msg=f"grid {grid}, block {block}: another launch's dims")
    finally:
        for out in outs:
            out.free()


@pytest.mark.clause("KERNEL-78")
@pytest.mark.parametrize("grid", [(3, 2, 5), (7, 1, 1), (1, 4, 2)])
def test_a_kernel_sees_its_grid(device, stream, kernels, grid):
    """grid_dims: the first and the last block report the blocks per axis; axes of different sizes, so a count
    taken from the wrong axis shows."""
    with poisoned(device, stream, 4 * 6) as out:
        stream.launch(kernels("grid_dims"), grid, (4, 2, 1), (out,))
        got = read(stream, out, np.uint32)
    np.testing.assert_array_equal(got, [*grid, *grid], err_msg=f"grid {grid}: first block, then last block")


#: grids as tuples, each one the last one extended by an axis (or cut back): the same first axes, other lengths
GRIDS_OF_OTHER_LENGTHS = [(3,), (3, 2), (3, 2, 5), (3,), (3, 2, 5), (3, 2)]


@pytest.mark.clause("KERNEL-155")
def test_a_grid_tuple_that_extends_a_cached_ones_launches_with_its_own_axes(device, stream, kernels):
    """grid_dims (KERNEL-78) launched by Stream.launch with grids given as tuples of one, two and three axes that
    share their first axes, each twice in a row (a compiled path remembers a launch it has seen twice), then
    back to shorter ones: each launch sees its own grid, the missing axes 1. A launch cache that compares two
    tuples only over the cached one's length runs (3, 2) with (3,)'s grid, and reads past the end of a shorter
    one."""
    k = kernels("grid_dims")
    outs = [poisoned(device, stream, 4 * 6) for _ in range(2 * len(GRIDS_OF_OTHER_LENGTHS))]
    try:
        for i, grid in enumerate(GRIDS_OF_OTHER_LENGTHS):
            for out in outs[2 * i:2 * i + 2]:
                stream.launch(k, grid, (4, 2, 1), (out,))
        for i, grid in enumerate(GRIDS_OF_OTHER_LENGTHS):
            full = (*grid, 1, 1)[:3]
            for out in outs[2 * i:2 * i + 2]:
                np.testing.assert_array_equal(read(stream, out, np.uint32), [*full, *full],
                                              err_msg=f"grid {grid}: another launch's grid (first block, then last)")
    finally:
        for out in outs:
            out.free()
