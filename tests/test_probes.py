"""The probe-only backends: never available, never raising from probe(), always NotAvailable to open."""

from __future__ import annotations

import ctypes
import importlib
import re
import sys

import pytest

from ironaccel.backends import BUILTIN
from ironaccel.backends.probes import NO_COMPUTE, ProbeBackend, RocmProbe
from ironaccel.errors import NotAvailable

PROBES = {name: spec for name, spec in BUILTIN.items() if spec.startswith("ironaccel.backends.probes:")}


def probe_class(name: str) -> type[ProbeBackend]:
    module, _, attr = PROBES[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def test_every_probe_backend_is_registered():
    assert sorted(PROBES) == ["d3d12", "levelzero", "metal", "neuron", "qnn", "rocm", "tpu"]
    for name in PROBES:
        cls = probe_class(name)
        assert cls.name == name
        assert cls.compute is False


@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe_on_this_machine_is_unavailable_with_a_reason(name):
    info = probe_class(name)().probe()
    assert (info.name, info.available, info.compute) == (name, False, False)
    assert info.reason
    if info.reason.startswith("runtime found"):
        assert NO_COMPUTE in info.reason
    else:
        assert "searched" in info.reason or "exists only on" in info.reason


class Boom(Exception):
    pass


ERRORS = [
    OSError("libfoo.so: cannot open shared object file: No such file or directory"),
    OSError("libfoo.so: wrong ELF class: ELFCLASS32"),
    RuntimeError("the dynamic loader is having a bad day"),
    Boom("anything at all"),
    MemoryError(),
]


@pytest.mark.parametrize("platform", ["linux", "darwin", "win32"])
@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__ + ":" + str(e)[:20])
@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe_never_raises_whatever_ctypes_does(monkeypatch, name, error, platform):
    def cdll(*args, **kwargs):
        raise error

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    monkeypatch.setattr(sys, "platform", platform)
    backend = probe_class(name)()
    info = backend.probe()
    assert (info.name, info.available, info.compute) == (name, False, False)
    assert info.reason
    with pytest.raises(NotAvailable, match=f"^{name}: .*no compute path yet") as excinfo:
        backend.open_device(0)
    assert excinfo.value.backend == name


def test_a_library_that_fails_to_load_says_why(monkeypatch):
    def cdll(name, *args, **kwargs):
        raise OSError(f"{name}: wrong ELF class: ELFCLASS32")

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    reason = RocmProbe().probe().reason
    assert reason.startswith("no AMD ROCm HIP runtime (searched libamdhip64.so, ")
    assert "wrong ELF class" in reason


def test_a_missing_dependency_is_not_taken_for_a_missing_runtime(monkeypatch):
    def cdll(name, *args, **kwargs):
        raise OSError("libhsa-runtime64.so.1: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    assert "one failed to load: libhsa-runtime64.so.1: cannot open" in RocmProbe().probe().reason


def test_an_unexpected_error_is_reported_in_the_reason(monkeypatch):
    def cdll(*args, **kwargs):
        raise Boom("loader exploded")

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    assert RocmProbe().probe().reason == "probing the AMD ROCm HIP runtime failed: Boom: loader exploded"


class FakeHip:
    """Stands in for libamdhip64.so: the two calls the probe makes."""

    def __init__(self, name, *args, **kwargs):
        self._name = name

    def hipRuntimeGetVersion(self, out):
        out._obj.value = 60_241_133  # HIP 6.2.41133
        return 0

    def hipGetDeviceCount(self, out):
        out._obj.value = 8
        return 0


def test_a_found_runtime_is_still_unavailable(monkeypatch):
    monkeypatch.setattr(ctypes, "CDLL", FakeHip)
    backend = RocmProbe()
    info = backend.probe()
    assert info.available is False
    assert info.reason == f"runtime found (libamdhip64.so): {NO_COMPUTE}"
    assert info.version == "6.2.41133"
    assert backend.device_count() == 8
    with pytest.raises(NotAvailable, match=r"^rocm: libamdhip64.so is not available: no compute path yet: "):
        backend.open_device()


@pytest.mark.parametrize("name", sorted(set(PROBES) - {"rocm"}))
def test_found_runtime_without_a_count_call_raises_not_available(monkeypatch, name):
    class SilentLib:
        def __init__(self, path, *args, **kwargs):
            self._name = path

    monkeypatch.setattr(ctypes, "CDLL", SilentLib)
    monkeypatch.setattr(sys, "platform", {"metal": "darwin", "d3d12": "win32"}.get(name, "linux"))
    backend = probe_class(name)()
    info = backend.probe()
    assert info.reason.startswith("runtime found (") and info.available is False
    with pytest.raises(NotAvailable, match=f"^{name}: .*does not ask it for a device count"):
        backend.device_count()


def test_a_version_reader_that_fails_leaves_the_version_empty(monkeypatch):
    class BrokenHip(FakeHip):
        def hipRuntimeGetVersion(self, out):
            raise Boom("no version today")

    monkeypatch.setattr(ctypes, "CDLL", BrokenHip)
    info = RocmProbe().probe()
    assert info.reason.startswith("runtime found") and info.version == ""


def test_platform_gated_runtimes_never_touch_ctypes_elsewhere(monkeypatch):
    def cdll(*args, **kwargs):
        raise AssertionError("ctypes.CDLL must not be called")

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    monkeypatch.setattr(sys, "platform", "linux")
    for name, only_on in (("metal", "darwin"), ("d3d12", "win32")):
        assert probe_class(name)().probe().reason.endswith(f"exists only on {only_on}; this is linux")


def test_the_version_comes_from_the_loaded_file_name(monkeypatch):
    real_cdll = ctypes.CDLL
    try:
        vulkan = real_cdll("libvulkan.so.1")  # libvulkan.so.1 -> libvulkan.so.1.3.239 on Debian 12
    except OSError:
        pytest.skip("needs libvulkan.so.1 as a stand-in for a runtime with a versioned file name")
    monkeypatch.setattr(ctypes, "CDLL", lambda name, *args, **kwargs: vulkan)
    info = probe_class("levelzero")().probe()
    assert info.reason.startswith("runtime found (libze_loader.so.1)")
    assert re.fullmatch(r"1\.\d+\.\d+", info.version)
