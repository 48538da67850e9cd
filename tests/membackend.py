"""Backend "mem" over the in-memory device, with targets "mem/test" and "mem/wrong" (whose driver never
matches), for the plugin's and certify's tests: the suites they run register it from here (``CONFTEST``
in test_plugin.py), and the test process does too (``registered``), so both hash the same backend code."""

from __future__ import annotations

from contextlib import contextmanager

from ironaccel import api
from ironaccel.cts import targets
from ironaccel.backends import register, unregister
from ironaccel.cts.testing.memdevice import MemDevice


class MemBackend(api.Backend):
    name = "mem"

    def probe(self):
        return api.BackendInfo("mem", True, "in-memory")

    def device_count(self):
        return 1

    def _open_device(self, index):
        return MemDevice(1 << 20)


def mem_drivers():
    return [targets.Target("mem", driver, True, recognise=lambda info, driver=driver: driver == "test")
            for driver in ("test", "wrong")]


@contextmanager
def registered():
    register("mem", MemBackend)
    targets.register("mem", mem_drivers)
    try:
        yield
    finally:
        unregister("mem")
        targets.unregister("mem")
