"""A client test past its time limit ends its pytest-xdist worker, which xdist replaces (pytest plugin, loaded by
``ironaccel clients`` next to ``ironaccel.cts.clients`` when the run has workers).

pytest-timeout's signal method raises in the test only once the main thread is back in Python: a test blocked
in the driver on a long kernel (a 2 GiB reduction is minutes of the fake's interpreter) stays blocked until the
fake's watchdog ends the launch, and a watchdog timeout is sticky, as on hardware, so every later test of that
worker failed with it (in a 1-in-10 sample of CuPy's creation tests, 57 of the 62 failures). Here the test is
recorded as timed out and its worker process ends (``os._exit``), so the work it left running cannot reach
another test. Without xdist (``--workers 0``) pytest-timeout's own method applies.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

#: the record line's phase: not "call", so that xdist's report of the crashed worker, an error too, does not
#: replace this message (the first of two equal outcomes is kept)
PHASE = "timeout"


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item, settings):
    config = item.config
    record = config.getoption("clients_record", "")
    if not hasattr(config, "workerinput") or not record or settings.timeout <= 0:
        return None  # pytest-timeout's own method

    def expire():
        entry = {"id": item.nodeid, "when": PHASE, "outcome": "failed",
                 "message": f"Timeout (>{settings.timeout:g}s): the test's worker was ended and replaced"}
        with open(record, "a") as f:
            f.write(json.dumps(entry) + "\n")
        os._exit(1)

    timer = threading.Timer(settings.timeout, expire)
    timer.daemon = True
    timer.start()
    item.cancel_timeout = timer.cancel  # pytest-timeout's pytest_timeout_cancel_timer calls it
    return True
