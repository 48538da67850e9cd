"""ironaccel.hostcopy: large copies in slices on several threads, complete and exact on return."""

from __future__ import annotations

import numpy as np
import pytest

from ironaccel import hostcopy


@pytest.mark.parametrize("nbytes", [0, 1, hostcopy.PARALLEL_BYTES - 1, hostcopy.PARALLEL_BYTES,
                                    hostcopy.PARALLEL_BYTES + 3, 9 * hostcopy.SLICE_BYTES + 7])
def test_copy_is_exact_at_every_size(nbytes):
    src = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    dst = np.full(nbytes + 2, 0xA5, np.uint8)
    hostcopy.copy(dst[1:-1], src)
    np.testing.assert_array_equal(dst[1:-1], src)
    assert dst[0] == dst[-1] == 0xA5, "nothing written beside the destination"


def test_large_copies_use_the_threads_and_errors_reach_the_caller(monkeypatch):
    if hostcopy._workers()[0] is None:
        pytest.skip("a one-core host copies on the caller's thread only")
    seen = []
    real = hostcopy._copy_slice

    def recording(dst, src, start, end):
        seen.append((start, end))
        real(dst, src, start, end)

    monkeypatch.setattr(hostcopy, "_copy_slice", recording)
    nbytes = 4 * hostcopy.SLICE_BYTES
    src = np.arange(nbytes, dtype=np.uint32).view(np.uint8)[:nbytes]
    dst = np.zeros(nbytes, np.uint8)
    hostcopy.copy(dst, src)
    np.testing.assert_array_equal(dst, src)
    assert len(seen) > 1 and sorted(seen)[0][0] == 0 and sorted(seen)[-1][1] == nbytes
    readonly = np.zeros(nbytes, np.uint8)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        hostcopy.copy(readonly, src)
