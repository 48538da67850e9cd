"""The mutation catalogue stays honest: every mutant applies to the tree as it is now, exactly once, and the
runner's verdicts and staleness check mean what they say (the run itself: ``tox -e mutants``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ci" / "mutants"))

import run  # noqa: E402
from ironaccel.cts import spec  # noqa: E402
from catalogue import MUTANTS  # noqa: E402

AREAS = {"webgpu", "vulkan", "cuda", "opengl", "pool", "plugin", "fake"}


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.id for m in MUTANTS])
def test_every_mutant_applies_once_and_changes_something(mutant):
    text = (ROOT / mutant.file).read_text(encoding="utf-8")
    assert text.count(mutant.old) == 1, f"{mutant.id}: the catalogue is stale for {mutant.file}"
    assert mutant.old != mutant.new
    assert mutant.area in AREAS and mutant.check in ("suite", "canary")
    assert mutant.bug and mutant.clauses


def test_the_catalogue_is_big_enough_and_cites_real_clauses():
    ids = [m.id for m in MUTANTS]
    assert len(ids) == len(set(ids)) and len(ids) >= 60
    assert {m.area for m in MUTANTS} == AREAS
    clauses = spec.load_clauses(ROOT / "conformance" / "SPEC.md")
    assert not [(m.id, c) for m in MUTANTS for c in m.clauses if c not in clauses]


def test_a_stale_mutant_fails_to_apply_loudly(tmp_path):
    mutant = MUTANTS[0]
    (tmp_path / mutant.file).parent.mkdir(parents=True)
    (tmp_path / mutant.file).write_text("the code moved on\n")
    with pytest.raises(run.Stale, match="occurs 0 times"):
        run.apply(mutant, tmp_path)
    (tmp_path / mutant.file).write_text(mutant.old + mutant.old)
    with pytest.raises(run.Stale, match="occurs 2 times"):
        run.apply(mutant, tmp_path)


def test_verdicts():
    baseline = {"a": "pass", "b": "pass", "c": "not-supported"}
    ok = {"run": {"status": "ok", "message": ""}}
    assert run.verdict({**ok, "tests": [{"id": "a", "outcome": "pass"}]}, "", baseline)[0] == "survived"
    status, killers, _ = run.verdict({**ok, "tests": [{"id": "a", "outcome": "pass"}, {"id": "b", "outcome": "flaky"},
                                                      {"id": "c", "outcome": "fail"}]}, "", baseline)
    assert status == "killed" and killers == ["b (flaky)", "c (fail)"]
    assert run.verdict({"run": {"status": "crashed", "message": "segfault"}, "tests": []}, "", baseline)[0] == "killed"
    assert run.verdict(None, "certify ran past 360 s", baseline) == ("killed", [], "certify ran past 360 s")


START_ON_WAIT_CHILD = r"""
import ctypes, os, sys, time
from ironaccel import fakes
fakes.load()
from cuda.bindings import driver as cu

def ok(result):
    err, *rest = result if isinstance(result, tuple) else (result,)
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return rest[0] if rest else None

ok(cu.cuInit(0))
ctx = ok(cu.cuDevicePrimaryCtxRetain(ok(cu.cuDeviceGet(0))))
ok(cu.cuCtxSetCurrent(ctx))
n = 1 << 20
stream, dst = ok(cu.cuStreamCreate(0)), ok(cu.cuMemAlloc(n))
src = ok(cu.cuMemHostAlloc(n, 0))  # pinned: the DMA reads it when it runs, not when it is queued
back = (ctypes.c_uint8 * n)()
got = []
for wait in ("cuStreamSynchronize", "cuStreamQuery", "cuEventQuery"):
    ctypes.memset(src, 1, n)
    ok(cu.cuMemsetD8(dst, 0, n))
    ok(cu.cuMemcpyHtoDAsync(dst, src, n, stream))
    event = ok(cu.cuEventCreate(0))
    ok(cu.cuEventRecord(event, stream))
    if os.environ["IRONACCEL_FAKE_CUDA_START_ON_WAIT"] == "1":
        time.sleep(0.2)  # ample time for the copy, were the fake to start it unasked
    else:  # the fake's device memory is host memory: watch the copy land without asking the driver
        deadline = time.monotonic() + 60
        while ctypes.string_at(int(dst) + n - 1, 1) != b"\x01":
            assert time.monotonic() < deadline, "the fake never ran the queued copy"
            time.sleep(0.001)
    ctypes.memset(src, 2, n)  # before the host looks: what the copy reads if it has not run
    if wait == "cuStreamSynchronize":
        ok(cu.cuStreamSynchronize(stream))
    else:  # polling a query alone completes the work
        poll, handle = (cu.cuStreamQuery, stream) if wait == "cuStreamQuery" else (cu.cuEventQuery, event)
        deadline = time.monotonic() + 60
        while poll(handle)[0] == cu.CUresult.CUDA_ERROR_NOT_READY:
            assert time.monotonic() < deadline, wait + " never completed the work"
    ok(cu.cuMemcpyDtoH(back, dst, n))
    got.append(f"{wait}={set(bytes(back))}")
print(" ".join(got))
"""


@pytest.mark.parametrize("mode", ["1", "0"])
def test_the_fake_starts_queued_work_only_when_the_host_looks(mode):
    """IRONACCEL_FAKE_CUDA_START_ON_WAIT=1 (the mutation run's kill of a ring reused before its fence rests on
    it): a copy queued from pinned memory has not run before the host synchronizes or queries, however long
    the host takes; without it the fake runs queued work unasked."""
    import subprocess

    from ironaccel import fakes

    pytest.importorskip("cuda.bindings")
    env = {**fakes.child_env(), "PYTHONPATH": str(ROOT), "IRONACCEL_FAKE_CUDA_START_ON_WAIT": mode}
    proc = subprocess.run([sys.executable, "-c", START_ON_WAIT_CHILD], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    value = "{2}" if mode == "1" else "{1}"
    assert proc.stdout.split() == [f"{w}={value}" for w in ("cuStreamSynchronize", "cuStreamQuery", "cuEventQuery")]
