"""The hardening property test (ironaccel.cts.testing.fuzz) on every simulated target this machine runs, each in
its own process: a signal or a hang fails the test as surely as an untyped error or a corrupted buffer."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.cts import targets
from ironaccel.cts.testing import fuzz
from ironaccel.cts.testing.memdevice import CATALOGUE, MemDevice, MemStream

SIMULATED = sorted(name for name, t in targets.standard().items() if t.simulated)
EXAMPLES = 60  # per target, derandomized: the same sequences on every run


@pytest.mark.parametrize("name", SIMULATED)
def test_fuzzed_calls_give_typed_errors_and_corrupt_nothing(name):
    why = targets.get(name).missing()
    if why is not None:
        pytest.skip(f"{name} cannot run here: {why}")
    proc = subprocess.run([sys.executable, "-m", "ironaccel.cts.testing.fuzz", "--target", name, "--examples",
                           str(EXAMPLES)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"exit {proc.returncode} (negative: a signal)\n{proc.stdout[-3000:]}{proc.stderr[-6000:]}"
    assert "every error typed, nothing corrupted" in proc.stdout


def test_the_fuzz_catches_a_copy_that_writes_past_its_range(monkeypatch):
    """The property test can fail: a fill that also writes the byte after its range changes a buffer the
    fuzzed call was not given, or fails the saxpy, and the run says so."""
    real = MemStream._fill

    def sloppy(self, buf, offset, nbytes, value):
        real(self, buf, offset, min(nbytes + 1, buf.nbytes - offset), value)
        for other in list(self._device.buffers):
            if other is not buf:
                real(self, other, 0, 1, value)

    monkeypatch.setattr(MemStream, "_fill", sloppy)
    device = MemDevice(64 << 20)
    kernels = device.python_module(CATALOGUE).kernel
    with pytest.raises(AssertionError, match="changed a buffer|Not equal|Mismatch"):
        fuzz.run(device, kernels, examples=40)


def test_the_fuzz_catches_an_untyped_error(monkeypatch):
    real = MemDevice.supports

    def broken(self, capability):
        if capability == "nope":
            raise KeyError(capability)
        return real(self, capability)

    monkeypatch.setattr(MemDevice, "supports", broken)
    device = MemDevice(64 << 20)
    with pytest.raises(AssertionError, match="supports raised KeyError"):
        fuzz.run(device, device.python_module(CATALOGUE).kernel, examples=40)


def test_protected_buffers_start_with_known_bytes():
    device = MemDevice(1 << 20)
    sess = fuzz.Session(device, device.python_module(CATALOGUE).kernel)
    for buf, data in sess.protected:
        assert bytes(buf.handle) == data.tobytes()
    sess.intact()
    assert np.all([b.nbytes == 4096 for b, _ in sess.protected])


def test_the_fuzz_reports_an_attribute_error_of_the_library_that_looks_like_its_own_junk(monkeypatch):
    """The fuzz skips its own junk buffers itself, so the AttributeError its junk would cause, raised by the
    library (a None it forgot to check), is reported, not taken for the fuzz's."""
    real = MemDevice.supports

    def careless(self, capability):
        if capability == "nope":
            return None.startswith("lang.")  # AttributeError: 'NoneType' object has no attribute 'startswith'
        return real(self, capability)

    monkeypatch.setattr(MemDevice, "supports", careless)
    device = MemDevice(64 << 20)
    with pytest.raises(AssertionError, match="supports raised AttributeError: 'NoneType' object"):
        fuzz.run(device, device.python_module(CATALOGUE).kernel, examples=40)


def _raised(call) -> BaseException:
    try:
        call()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing raised")


def test_junk_buffers_are_the_library_s_to_reject_except_for_their_own_methods():
    device = MemDevice(1 << 20)
    sess = fuzz.Session(device, device.python_module(CATALOGUE).kernel)
    ops = fuzz.operations(sess)
    assert ops["free"][1](1) is None and ops["handle"][1](1) is None  # pick 1: "not a buffer", no method to call
    exc = _raised(lambda: ops["fill"][1](1, 0, 0, None))
    assert isinstance(exc, ia.IronAccelError) and "Stream.fill" in str(exc)
