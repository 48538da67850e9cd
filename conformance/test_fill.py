"""FILL: byte fills of any range; bad values and ranges."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, strategies as st

import ironaccel as ia

from .helpers import POISON, poisoned, raises_naming, read

BUF = 1024


@st.composite
def ranges(draw):
    nbytes = draw(st.integers(1, BUF), label="nbytes")
    return draw(st.integers(0, BUF - nbytes), label="offset"), nbytes


@pytest.mark.clause("FILL-1")
@given(r=ranges(), value=st.integers(0, 255))
# the edges, always drawn: the values 0 (a driver's clear path) and 255, whole and empty-edged buffers, aligned
# and unaligned ranges, sizes around the 4-byte word and a 256-byte alignment
@example(r=(0, BUF), value=0)
@example(r=(0, BUF), value=255)
@example(r=(256, 256), value=0)
@example(r=(4, 8), value=0)
@example(r=(3, 1), value=255)
@example(r=(1, 4), value=0)
@example(r=(252, 260), value=255)
@example(r=(BUF - 5, 5), value=0)
@example(r=(0, 0), value=255)  # empty ranges, at the start and at the very end: nothing is written
@example(r=(BUF, 0), value=0)
@example(r=(0, 3), value=255)  # sizes either side of the 4-byte word and of 256 bytes
@example(r=(7, 5), value=0)
@example(r=(3, 8), value=0)  # zero fills of whole words off the 4-byte word, and on it of sizes that are no
@example(r=(10, 8), value=0)  # whole number of words (multiples of 2, 3 and 5): a driver's clear path takes none
@example(r=(8, 30), value=0)
@example(r=(1, 255), value=255)
@example(r=(256, 257), value=0)
def test_fill_exact_range(device, r, value):
    offset, nbytes = r
    s = device.create_stream()
    with poisoned(device, s, BUF) as buf:
        s.fill(buf, value, offset=offset, nbytes=nbytes)
        expect = np.full(BUF, POISON, np.uint8)
        expect[offset:offset + nbytes] = value
        np.testing.assert_array_equal(read(s, buf), expect)


@pytest.mark.clause("FILL-1")
def test_fill_defaults_to_the_end(device, stream):
    with poisoned(device, stream, 100) as buf:
        stream.fill(buf, 7, offset=33)
        expect = np.full(100, POISON, np.uint8)
        expect[33:] = 7
        np.testing.assert_array_equal(read(stream, buf), expect)


FILL_ERRORS = [  # (kwargs, what the error must name)
    (dict(value=256), "value"), (dict(value=-1), "value"), (dict(value=1.0), "value"),
    (dict(value=1, offset=60, nbytes=5), "buf range"), (dict(value=1, offset=65), "buf range"),
    (dict(value=1, offset=-1), "offset"), (dict(value=1, offset=None), "offset"),
    (dict(value=1, nbytes=-2), "nbytes"), (dict(value=1, nbytes=2.0), "nbytes"),
]


@pytest.mark.clause("FILL-2", "ERR-1")
@pytest.mark.parametrize("kwargs, what", FILL_ERRORS, ids=[",".join(f"{k}={v}" for k, v in kw.items()) for kw, _ in FILL_ERRORS])
def test_fill_errors_write_nothing(device, stream, kwargs, what):
    with poisoned(device, stream, 64) as buf:
        kwargs = dict(kwargs)
        value = kwargs.pop("value")
        with raises_naming(ia.InvalidArgument, "Stream.fill", what):
            stream.fill(buf, value, **kwargs)
        assert (read(stream, buf) == POISON).all()
