"""ironaccel.cts.testing.exhaust (MEM-7, POOL-8): its report on an in-memory device with a memory limit, and its
refusal to exhaust a GPU that does not say how much memory it has."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ironaccel import api
from ironaccel.cts import targets
from ironaccel.backends import register as register_backend, unregister
from ironaccel.cts.testing import exhaust
from ironaccel.cts.testing.memdevice import CATALOGUE, MemDevice

MiB = 1 << 20


def _backend(memory: int, reported: int):
    class Limited(api.Backend):
        name = "exhaustme"

        def probe(self):
            return api.BackendInfo("exhaustme", True, "in-memory")

        def device_count(self):
            return 1

        def _open_device(self, index):
            device = MemDevice(memory, max_alloc=64 * MiB)
            device._info = replace(device._info, backend="exhaustme", memory=reported)
            return device

    return Limited


@pytest.fixture
def registered(monkeypatch):
    def register(memory: int, reported: int, kind: str):
        target = targets.Target("exhaustme", "limited", kind == "host", recognise=lambda info: True, memory=kind)
        register_backend("exhaustme", _backend(memory, reported))
        targets.register("exhaustme", lambda: [target])
        monkeypatch.setenv("IRONACCEL_TARGET", "")  # exhaust() puts the target's selection into the environment
        monkeypatch.setattr(targets.Target, "compile_kernel",
                            lambda self, device, name: device.python_module(CATALOGUE).kernel(name))
        return target.name

    yield register
    unregister("exhaustme")
    targets.unregister("exhaustme")


def test_a_device_with_a_limit_refuses_and_the_pool_retries(registered):
    report = exhaust.exhaust(registered(160 * MiB, 160 * MiB, "device"))
    assert report["refusal"]["type"] == "OutOfMemory" and report["refusal"]["op"] == "MemDevice.alloc"
    assert report["cached_before"] == 2 * 64 * MiB
    assert report["held_bytes"] <= 32 * MiB  # what the cached blocks left of the device
    assert report["request_refused"]["type"] == "OutOfMemory"
    assert report["pool"] == {"ok": True, "cached_after": 0, "misses": 1, "contents_ok": True}
    assert report["works_after"]


def test_a_gpu_that_does_not_report_its_memory_is_not_exhausted(registered):
    report = exhaust.exhaust(registered(160 * MiB, 0, "device"))
    assert report["refusal"] is None and report["held_bytes"] == 0 and "does not report its memory" in report["why"]
