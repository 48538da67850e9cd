"""Backend "mem" over the in-memory device, with targets "mem/test" and "mem/wrong" (whose driver never
matches), for the plugin's and certify's tests: the suites they run register it from here (``CONFTEST``, the conftest of
a ``suite`` folder), and the test process does too (``registered``), so both hash the same backend code."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

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


TESTS_DIR = Path(__file__).resolve().parent

# Registers target "mem/test" (and "mem/wrong", whose driver never matches) over the in-memory device.
CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS_DIR)!r})
from membackend import MemBackend, mem_drivers
from ironaccel.backends import register
from ironaccel.cts import targets

register("mem", MemBackend)
targets.register("mem", mem_drivers)
"""


def suite(tmp_path: Path, tests: str) -> Path:
    """A suite folder holding ``tests`` (the body of one test module) and the conftest that registers "mem"."""
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_suite.py").write_text("import os, pathlib, time\nimport pytest\n" + tests)
    return folder
