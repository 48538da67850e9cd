"""Every implemented entry point of the fake, called with a bad handle, a bad size or NULL, returns the
documented CUresult and does not crash.

The calls go through ctypes straight to the C symbols, so NULL and forged handles reach the fake unchanged
(cuda.bindings would reject some of them before the driver sees them). The rows are tables by concern
(errorcases_context.py, errorcases_memory.py, errorcases_streams.py, errorcases_modules.py; what they share is
errorpaths.py); ``test_every_entry_point_has_a_case`` fails when the fake gains an entry point without a row.
"""

import pytest

import errorcases_context
import errorcases_memory
import errorcases_modules
import errorcases_streams
from errorpaths import Env, call

CASES = {**errorcases_context.CASES, **errorcases_memory.CASES, **errorcases_streams.CASES, **errorcases_modules.CASES}

ROWS = [(name, case) for name, cases in CASES.items() for case in cases]


@pytest.fixture
def env(cuda):
    return Env(cuda)


@pytest.mark.parametrize("name,case", ROWS, ids=[f"{n}-{c[0]}" for n, c in ROWS])
def test_error_path(env, cuda, name, case):
    why, args, expected, *where = case
    got = call(env, name, args(env), no_context=bool(where))
    assert got == expected, f"{name} ({why}): got {got}, expected {expected}"
    # the error left the context usable
    assert cuda.err(cuda.d.cuCtxSynchronize()) == cuda.d.CUresult.CUDA_SUCCESS


def test_every_entry_point_has_a_case(fake):
    missing = sorted(set(fake.entry_points()) - set(CASES))
    assert not missing, f"implemented entry points without an error-path case: {missing}"
    unknown = sorted(set(CASES) - set(fake.entry_points()))
    assert not unknown, f"cases for entry points the fake does not implement: {unknown}"
