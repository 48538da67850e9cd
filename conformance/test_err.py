"""ERR: every error is typed and names its op; the device survives every kind of error."""

from __future__ import annotations

import numpy as np
import pytest

import ironaccel as ia

from .helpers import assert_device_works

ERRORS = {
    "invalid argument": lambda d, s: s.fill(d.alloc(4), 300),
    "compile error": lambda d, s: d.compile({"spirv": b"\x00" * 8}.get(d.languages[0], "this is not a kernel"),
                                            d.languages[0]),
    "out of memory": lambda d, s: d.alloc(d.info.limits.max_alloc + 4096),
    "use after free": lambda d, s: _freed(d, s),
    "unsupported or invalid capability": lambda d, s: d.supports("no.such.capability"),
}


def _freed(device, stream):
    buf = device.alloc(8)
    buf.free()
    stream.copy_htod(buf, np.zeros(8, np.uint8))


@pytest.mark.clause("ERR-1", "ERR-2")
@pytest.mark.parametrize("kind", sorted(ERRORS))
def test_typed_error_then_device_works(device, stream, kernels, kind):
    with pytest.raises(ia.IronAccelError) as info:
        ERRORS[kind](device, stream)
    err = info.value
    op = getattr(err, "op", None)
    assert op and op in str(err), f"{type(err).__name__} does not name its op: {err}"
    assert_device_works(device, kernels)
