"""``ironaccel repro TEST --target T --out DIR``: a standalone reproducer of a failing conformance test, for a
driver's maintainers, that does not need ironaccel.

It covers one kind of test, the kernel-value kind: a compute kernel launched over inputs whose outputs are
checked. The test runs twice under the launch recorder (``record``): on T, where it fails, and on a reference
target where it passes (default ``DEFAULT_REFERENCE``). The first launch that got the same kernel, grid,
block, arguments and input bytes on both but left different bytes in a buffer is the case: DIR/repro.py makes
that one launch with the backend's own Python API (``generate``) and compares every buffer with the
reference's bytes, printing the wrong values. A test that launches no kernel, or whose launches all agree with
the reference (it fails on something else: an error code, a timing, a limit), gets ``NoRepro`` saying that
this kind of test has no standalone repro.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import results

DEFAULT_REFERENCE = "cuda/fake"  # our PTX interpreter: on every machine that can build it, and a conforming one
RECORD_TIMEOUT_S = 600
FAILED = (results.Outcome.FAIL, results.Outcome.XFAIL, results.Outcome.FLAKY)


class NoRepro(Exception):
    """Why no standalone repro can be written (one line, for the command's error)."""


@dataclass
class Case:
    """The one launch the repro makes, with what the two targets left in its buffers."""

    test: dict[str, Any]  # the test's results entry on the target
    target: str
    reference: str
    device: str  # the target's device name, as its results file has it
    driver_version: str
    launch: int
    launches: int
    kernel: str
    lang: str
    source: str | bytes
    options: list[str]
    grid: list[int]
    block: list[int]
    args: list[tuple]  # ("buffer", k) or ("scalar", dtype, value), in the launch's order
    inputs: list[np.ndarray]  # per buffer argument, its bytes before the launch
    expected: list[np.ndarray]  # the reference's bytes after it
    observed: list[np.ndarray]  # the target's bytes after it
    readable: str = ""  # for a binary source, the text it was compiled from (when the target has one)


@dataclass
class Recorded:
    doc: dict[str, Any]
    test: dict[str, Any] | None
    launches: list[dict[str, Any]]
    arrays: dict[str, np.ndarray]
    truncated: str


def record(target: str, test: str, suite: Path | None = None) -> Recorded:
    """Run one test on ``target`` (in its own process, as certify does, without re-runs) under the launch
    recorder."""
    from .. import certify, spec
    from ..selection import Selection
    from . import recorder

    suite = (suite or spec.conformance_dir()).resolve()
    with tempfile.TemporaryDirectory(prefix="ironaccel-repro-") as tmp:
        res, rec = Path(tmp) / "results.json", Path(tmp) / "launches.npz"
        cmd = [sys.executable, "-m", "pytest",
               *certify.pytest_args(target, res, certify.TEST_TIMEOUT_S, suite, Selection(only=(test,)), retries=0),
               "-p", "ironaccel.cts.repro.recorder", "--repro-record", str(rec)]
        proc = subprocess.run(cmd, env=certify.child_environment(target), cwd=tmp, capture_output=True, text=True,
                              timeout=RECORD_TIMEOUT_S)
        if not res.exists():
            tail = " / ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
            raise NoRepro(f"{test} on {target}: the run wrote no results (exit {proc.returncode}): {tail}")
        doc = results.load(res)
        meta, arrays = recorder.load(rec) if rec.exists() else ({"launches": [], "truncated": ""}, {})
    entry = next((t for t in doc["tests"] if t["id"] == test), None)
    return Recorded(doc, entry, meta["launches"], arrays, meta["truncated"])


def find_case(test: str, target: str, on_target: Recorded, reference: str, on_reference: Recorded) -> Case:
    """The first launch whose inputs agree on both targets and whose outputs do not; NoRepro otherwise."""
    if on_target.test is None:
        raise NoRepro(f"{target} has no test {test!r} (a test id as results files write it: "
                      "test_semantics.py::test_long_loop_runs_every_iteration[65536])")
    if on_target.test["outcome"] not in FAILED:
        raise NoRepro(f"{test} does not fail on {target} ({on_target.test['outcome']}): nothing to reproduce")
    if on_reference.test is None or on_reference.test["outcome"] != results.Outcome.PASS:
        got = on_reference.test["outcome"] if on_reference.test else "not there"
        raise NoRepro(f"{test} does not pass on the reference {reference} ({got}): name another with --reference")
    if not on_target.launches:
        raise NoRepro(f"no standalone repro for this kind of test: {test} launches no kernel (repro covers tests "
                      "that run a compute kernel over inputs and check its outputs)")
    for n, (mine, theirs) in enumerate(zip(on_target.launches, on_reference.launches)):
        if (mine["kernel"], mine["grid"], mine["block"], mine["args"]) != (
                theirs["kernel"], theirs["grid"], theirs["block"], theirs["args"]):
            raise NoRepro(f"{test}: launch {n} differs between {target} and {reference} ({mine['kernel']} "
                          f"{mine['args']} vs {theirs['kernel']} {theirs['args']}) before any output does")
        buffers = [i for i, a in enumerate(mine["args"]) if "buffer" in a]
        inputs = [on_target.arrays[f"L{n}_A{i}_in"] for i in buffers]
        if any(not np.array_equal(a, on_reference.arrays[f"L{n}_A{i}_in"]) for a, i in zip(inputs, buffers)):
            raise NoRepro(f"{test}: launch {n}'s input buffers differ between {target} and {reference} before "
                          "any output does (an earlier step, not a kernel, went another way)")
        expected = [on_reference.arrays[f"L{n}_A{i}_out"] for i in buffers]
        observed = [on_target.arrays[f"L{n}_A{i}_out"] for i in buffers]
        if all(np.array_equal(a, b) for a, b in zip(expected, observed)):
            continue
        source = mine["source"]
        if source is None:
            raise NoRepro(f"{test}: launch {n}'s kernel was compiled before the recorder started")
        text = on_target.arrays[source["array"]].tobytes()
        k = iter(range(len(buffers)))
        return Case(on_target.test, target, reference, on_target.doc["target"]["device"],
                    on_target.doc["target"]["driver_version"], n, len(on_target.launches), mine["kernel"],
                    source["lang"], text if source["binary"] else text.decode(), source["options"], mine["grid"],
                    mine["block"], [("buffer", next(k)) if "buffer" in a else ("scalar", a["scalar"], a["value"])
                                    for a in mine["args"]], inputs, expected, observed)
    more = f"; {on_target.truncated}" if on_target.truncated else ""
    raise NoRepro(f"no standalone repro for this kind of test: every one of {test}'s {len(on_target.launches)} "
                  f"kernel launch(es) on {target} left the same bytes as on {reference}, so it fails on something "
                  f"else than a kernel's values (an error, a limit, a timing){more}")


def repro(test: str, target: str, out: Path, reference: str = DEFAULT_REFERENCE, suite: Path | None = None) -> Path:
    """Write DIR/repro.py for ``test`` failing on ``target``; return its path."""
    from .. import targets
    from . import generate

    for name in (target, reference):
        missing = targets.get(name).missing()
        if missing:
            raise NoRepro(f"{name} cannot run on this machine: {missing}")
    backend = targets.get(target).backend
    if generate.template(backend) is None:
        raise NoRepro(f"no standalone repro generator for the {backend} backend (ironaccel's: "
                      f"{', '.join(generate.BACKENDS)}; a plugin ships {generate.PLUGIN_TEMPLATE} beside its Backend)")
    case = find_case(test, target, record(target, test, suite), reference, record(reference, test, suite))
    if isinstance(case.source, bytes):  # a binary (SPIR-V): show the text it was made from, where the target has it
        case.readable = next((text for d in targets.get(target).kernels if d.lang != case.lang
                              and isinstance(text := d.source(case.kernel), str)), "")
    return generate.write(case, backend, environment(target), Path(out))


def environment(target: str) -> dict[str, str]:
    """The variables that make a process without ironaccel load the target's driver: the target's selection,
    and for our fake CUDA driver the library paths ``ironaccel fake run`` would set (where this machine built it)."""
    import os

    from .. import targets

    t = targets.get(target)
    env = t.environment()
    if t.backend == "cuda" and t.simulated:
        from ...fakes import child_env

        env.update({k: v for k, v in child_env().items() if os.environ.get(k) != v})
    return env


def add_arguments(p: Any) -> None:
    p.add_argument("test", metavar="TEST", help="a test id, as results files write it "
                   "(test_semantics.py::test_long_loop_runs_every_iteration[65536])")
    p.add_argument("--target", required=True, metavar="BACKEND/DRIVER", help="where the test fails")
    p.add_argument("--out", required=True, metavar="DIR", help="the folder to write repro.py into (made if needed)")
    p.add_argument("--reference", default=DEFAULT_REFERENCE, metavar="BACKEND/DRIVER",
                   help=f"where the test passes: its values are the expected ones (default: {DEFAULT_REFERENCE})")
    p.set_defaults(func=command)


def command(args: Any) -> int:
    """Exit 0 with the script written; 2 when there is no standalone repro (saying why)."""
    from ...errors import IronAccelError

    try:
        path = repro(args.test, args.target, Path(args.out), args.reference)
    except (NoRepro, IronAccelError, ValueError, subprocess.TimeoutExpired) as exc:
        print(f"ironaccel repro: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}: run it with `python3 {path}` (no ironaccel needed)")
    return 0
