"""ROBUST: a misbehaving kernel stays inside its own buffer where the API promises it."""

from __future__ import annotations

import numpy as np
import pytest

from .helpers import POISON, assert_device_works, ceil_div, poisoned, read


@pytest.mark.clause("ROBUST-1")
def test_out_of_bounds_write_stays_in_its_buffer(device, stream, kernels, require):
    require("kernel.bounds_checked")
    # small buffers allocated together are likely neighbours in memory (one block of a suballocator)
    neighbours = [poisoned(device, stream, 256) for _ in range(8)]
    target = poisoned(device, stream, 256)
    neighbours += [poisoned(device, stream, 256) for _ in range(8)] + [poisoned(device, stream, 1 << 20)]
    n = 1 << 18  # 1 MiB of writes from a 256-byte buffer
    stream.launch(kernels("oob_write"), ceil_div(n, 256), 256, (target, np.uint32(n)))
    in_bounds = read(stream, target, np.uint32)
    assert (in_bounds == 0xDEADBEEF).all(), "the in-bounds writes did not land"
    for k, buf in enumerate(neighbours):
        got = read(stream, buf)
        changed = np.flatnonzero(got != POISON)
        assert changed.size == 0, f"neighbour {k} ({buf.nbytes} bytes) changed at {changed.size} bytes, first {changed[0]}"
    for buf in (*neighbours, target):
        buf.free()
    assert_device_works(device, kernels)
