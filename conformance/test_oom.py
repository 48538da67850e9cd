"""MEM-7, POOL-8, ERR-4: a driver's real out-of-memory refusal, the native call it names, the pool's retry.

The device is exhausted in a child process (``ironaccel.cts.testing.exhaust``, which says how each kind of driver
is exhausted safely), once for the module; the tests judge its report. The child runs inside the first test's
call, not in a fixture, so a driver that crashes fails the tests (an expectation can then xfail them).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from ironaccel.cts.testing import exhaust

CHILD_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def exhausted(target, device):
    """The child's report of exhausting this target's device, as a function that runs it on first call
    (``device`` first: the run's own device is open while the child exhausts its memory)."""
    runs = []

    def report():
        if not runs:
            runs.append(subprocess.run([sys.executable, "-m", "ironaccel.cts.testing.exhaust", target.name],
                                       capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
                                       env={**os.environ, **target.environment()}))
        proc = runs[0]
        if proc.returncode != 0:
            pytest.fail(f"the exhaustion child exited with {proc.returncode}: {proc.stderr.strip()[-1500:]}",
                        pytrace=False)
        return json.loads(proc.stdout.strip().splitlines()[-1])

    return report


def _refusal(report):
    if "why" in report:
        pytest.fail(f"cannot exhaust the device: {report['why']}", pytrace=False)
    refusal = report["refusal"]
    stopped_by = {"bound": "stopped at its memory plus one allocation: the driver over-commits",
                  "deadline": "stopped at the deadline"}.get(report.get("stopped_by", ""), "")
    assert refusal is not None, (
        f"the device never refused an allocation: {report['held_bytes']} bytes held in {report['seconds']} s "
        f"({report['memory_kind']} memory, reported memory {report['memory']}; {stopped_by})")
    return refusal


@pytest.mark.clause("MEM-7", "ERR-4")
def test_driver_refusal_is_out_of_memory_naming_the_native_call(target, exhausted):
    exhausted = exhausted()
    refusal = _refusal(exhausted)
    assert refusal["type"] == "OutOfMemory", f"the driver's refusal became {refusal['type']}: {refusal['message']}"
    op = refusal["op"]
    assert op and op in refusal["message"], f"the error does not name its op: {refusal['message']}"
    assert target.native_op is not None, f"target {target.name} does not say which ops are native (Target.native_op)"
    assert target.native_op(op), f"{op!r} is not a native entry point of {target.name}: {refusal['message']}"
    if exhausted["memory_kind"] == "device" and exhausted["memory"]:
        assert exhausted["held_bytes"] <= exhausted["memory"], "the device handed out more than its memory"
    after = exhausted.get("error_after")
    assert exhausted["works_after"], f"the device does not work once its memory is freed: {after}"


#: how runtimes spell their out-of-memory statuses (CUDA, Vulkan, OpenGL, OpenCL; wgpu's messages say it in words)
OUT_OF_MEMORY_NAMES = r"OUT_OF_(DEVICE_|HOST_)?MEMORY|MEM_OBJECT_ALLOCATION_FAILURE|OUT_OF_RESOURCES|(?i:out ?of ?memory)"


@pytest.mark.clause("ERR-50")
def test_the_refusal_names_the_out_of_memory_status(exhausted):
    """The name after "failed: " is the runtime's own status: a backend whose table of status names is off by
    one entry calls an out-of-memory refusal something else (an incomplete framebuffer, a lost context) and
    sends the reader after the wrong cause."""
    refusal = _refusal(exhausted())
    named = re.search(r" failed: (.*)", refusal["message"])
    assert named, f"the refusal does not say what failed: {refusal['message']}"
    assert re.match(rf"\S*({OUT_OF_MEMORY_NAMES})", named.group(1)), (
        f"the refusal names another status than running out of memory: {refusal['message']}")


@pytest.mark.clause("POOL-8")
def test_pool_gives_its_cache_back_and_retries_when_the_device_refuses(exhausted):
    exhausted = exhausted()
    _refusal(exhausted)
    refused = exhausted.get("request_refused")
    assert refused is not None, (
        f"the exhaustion stopped before the device refused a {exhaust.REQUEST}-byte allocation: "
        f"{exhausted['held_bytes']} bytes held after {exhausted['seconds']} s")
    assert refused["type"] == "OutOfMemory", refused["message"]
    pool = exhausted["pool"]
    assert exhausted["cached_before"] >= exhaust.CACHED_BLOCKS * exhaust.REQUEST
    assert pool["ok"], f"MemPool.alloc failed, though its cache could serve it: {pool['error']['message']}"
    assert pool["cached_after"] == 0, "the pool did not give its cache back before retrying"
    assert pool["misses"] == 1, "the pooled request did not go to the device"
    assert pool["contents_ok"], "the retried pooled buffer does not round-trip"
