"""Running a target: open its device as the conformance runs do, build every implementation (ironaccel, the
floor, the peers), measure each case in paired rounds, and assemble the report; and the command's options."""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Collection

from ...errors import InvalidArgument
from ..results import PACKAGES, host_environment, now
from . import cfloor, floor_cuda, floor_opengl, floor_vulkan, floor_webgpu, gate, kernels, peers as peer_libraries
from .cases import C_FLOOR, CUDA_GOALS, FLOOR, OURS, QUICK_SIZES, SIZES, Case, Impl, catalogue, same_operation
from .kernels import KernelCall
from .ours import api_impls
from .report import SIMULATED_LABEL, load, table, write
from .stats import BOOTSTRAP_RESAMPLES, CONFIDENCE, SEED, measure, summarize, why
from .units import format_ns

HELP = "host-overhead benchmarks against the raw driver calls and peer libraries (JSON, Markdown, plot)"
SCHEMA = 1


def open_target(name: str) -> tuple[Any, str]:
    """Open ``backend``, ``backend/driver`` (its driver selected as the conformance runs do) or ``mem``."""
    if name == "mem":
        from ..testing.memdevice import MemDevice

        return MemDevice(), "mem/memdevice"
    import ironaccel as ia

    backend, _, driver = name.partition("/")
    if driver:
        from ..targets import get

        target = get(name)
        os.environ.update(target.environment())
        dev = ia.open_device(backend)
        if not target.matches(dev.info):
            dev.close()
            raise ia.NotAvailable(backend, driver, f"the device opened is {dev.info.name!r}, not the {driver} driver")
        return dev, name
    dev = ia.open_device(backend)
    return dev, f"{backend}/{_driver_of(dev.info)}"


def _driver_of(info: Any) -> str:
    from ..targets import TARGETS

    for t in TARGETS.values():
        if t.matches(info):
            return t.driver
    return "unknown"


def _launches(dev: Any) -> tuple[dict[str, KernelCall], str | bytes | None, list[Callable[[], None]]]:
    """ironaccel's kernels (``kernels.launches``) in the device's dialect, the CUDA image the C floor loads,
    and the cleanup; no kernels where the device compiles none of the bench's dialects."""
    backend = dev.info.backend
    if backend == "cuda" and dev.supports("lang.cuda"):
        cubin = not dev.info.simulated and dev.supports("lang.cubin")  # what ironaccel itself loads on a GPU
        lang, image = kernels.cuda_image(dev.info.extra["compute_capability"], cubin)
        launches, cleanup = kernels.launches(dev, lang, lambda name: image)
        return launches, image, cleanup
    for lang in ("spirv", "wgsl", "glsl430"):
        if backend != "cuda" and dev.supports(f"lang.{lang}"):
            launches, cleanup = kernels.launches(dev, lang, lambda name, lang=lang: kernels.source(name, lang))
            return launches, None, cleanup
    return {}, None, []


def _others(dev: Any, stream: Any, sizes: tuple[int, ...], peers: bool, launches: dict[str, KernelCall],
            image: str | bytes | None, cleanup: list[Callable[[], None]]
            ) -> tuple[dict[str, dict[str, Impl]], floor_cuda.PinnedHost | None, dict[str, str]]:
    """Every implementation but ironaccel's (the floor, the C floor, the peers), by name; the pinned host
    allocator (CUDA only); and why an implementation that should be there is not. What to clean up is
    appended to ``cleanup`` (which runs in reverse)."""
    backend = dev.info.backend
    others: dict[str, dict[str, Impl]] = {}
    unavailable: dict[str, str] = {}
    if backend == "cuda":
        pinned = floor_cuda.PinnedHost(dev.native.driver)
        others[FLOOR], extra = floor_cuda.setup(dev, stream, sizes, pinned, launches)
        cleanup += extra
        try:
            usable = tuple(n for n in sizes if n <= dev.info.limits.max_alloc)
            c_floor = cfloor.CFloor(cfloor.driver_library(dev.info), image, usable)
        except Exception as exc:
            unavailable[C_FLOOR] = why(exc)
        else:
            cleanup.append(c_floor.close)
            others[C_FLOOR] = c_floor.impls()
        if peers:
            found, missing = peer_libraries.cuda_peers(sizes, cleanup)
            others.update(found)
            unavailable.update(missing)
        cleanup.append(pinned.close)  # runs before the peers' and the floor's cleanup
        return others, pinned, unavailable
    floors = {"webgpu": floor_webgpu, "vulkan": floor_vulkan, "opengl": floor_opengl}
    if backend in floors:  # (the in-memory test device has no floor: ironaccel alone)
        others[FLOOR], extra = floors[backend].setup(dev, stream, sizes)
        cleanup += extra
    return others, None, unavailable


def run(target: str, *, peers: bool, quick: bool, samples: int | None = None,
        sample_ms: float | None = None, rows: Collection[str] | None = None,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    """Benchmark one target; returns the report (see ``write``). ``rows``: measure only these cases (by name),
    and copies only of the sizes they name."""
    started = now()
    dev, name = open_target(target)
    info = dev.info
    sizes = QUICK_SIZES if quick else SIZES
    if rows is not None:
        sizes = tuple(n for n in SIZES if any(case in rows and nbytes == n for case, _, nbytes in catalogue(SIZES, True)))
    samples = samples or (9 if quick else 61)
    sample_ns = (sample_ms or (0.5 if quick else 3.0)) * 1e6
    cleanup: list[Callable[[], None]] = []
    unavailable: dict[str, str] = {}
    try:
        stream = dev.create_stream()
        backend = info.backend
        launches, image, extra = _launches(dev)
        cleanup += extra
        others, pinned, unavailable = _others(dev, stream, sizes, peers, launches, image, cleanup)
        ours, extra = api_impls(dev, stream, launches, sizes, pinned)
        cleanup += extra
        goals = CUDA_GOALS if backend == "cuda" else {}
        cases = []
        for case_name, label, nbytes in catalogue(sizes, pinned is not None):
            if rows is not None and case_name not in rows:
                continue
            case = Case(case_name, label, nbytes=nbytes)
            if case_name in ours:
                case.impls[OURS] = ours[case_name]
            else:
                case.errors[OURS] = "not measured: no kernel for this device" if "launch" in case_name else "over max_alloc"
            for other, impls in others.items():
                # the floors time a deferred copy as copy_htod's (the same driver call) and the event re-record as
                # the record (they re-record one event already); the peers have no such rows
                timed_as = same_operation(case_name) if other in (FLOOR, C_FLOOR) else case_name
                if timed_as in impls:
                    case.impls[other] = impls[timed_as]
                else:
                    case.errors[other] = "not measured: no implementation of this operation for it here"
            if not case.impls:
                continue
            gc.collect()
            gc.disable()  # a collection inside one side of a pair is noise, not overhead
            try:
                timings = measure(case, samples, sample_ns)
            finally:
                gc.enable()
            summary = summarize(case, timings, goals.get(case_name), info.simulated)
            cases.append(summary)
            log(_progress_line(summary))
        dev.synchronize()
    finally:
        for step in reversed(cleanup):
            try:
                step()
            except Exception as exc:  # cleanup of a peer must not hide the results
                log(f"cleanup: {why(exc)}")
        dev.close()
    backend_name, _, driver = name.partition("/")
    simulated = bool(info.simulated)
    host = host_environment(PACKAGES + peer_libraries.DISTRIBUTIONS)
    return {
        "schema": SCHEMA,
        "tool": "ironaccel bench",
        "simulated": simulated,
        "label": SIMULATED_LABEL if simulated else "hardware",
        "target": {"name": name, "backend": backend_name, "driver": driver, "device": info.name,
                   "vendor": info.vendor, "driver_version": info.driver_version, "simulated": simulated},
        "host": {"python": host["python"], "platform": host["os"], "cpus": os.cpu_count()},
        "compiled_hot_path": _compiled_hot_path(),
        "packages": host["packages"],
        "settings": {"quick": quick, "peers": peers, "samples": samples, "sample_ms": sample_ns / 1e6,
                     **({"rows": sorted(rows)} if rows is not None else {}),
                     "bootstrap_resamples": BOOTSTRAP_RESAMPLES, "confidence": CONFIDENCE, "seed": SEED},
        "peers_unavailable": unavailable,
        "started": started,
        "finished": now(),
        "cases": cases,
    }



def _compiled_hot_path() -> str:
    """Whether ironaccel's rows ran on the compiled hot path (``ironaccel/_fast_c/``) or pure Python, and why."""
    from ... import native

    return "compiled" if native.load() is not None else f"pure Python ({native.why_not})"


def _measurements_in(folder: Path) -> list[Path]:
    """The full (not --quick) bench JSON files in folder: wherever the checkout or the package lives, a smoke run
    must not replace them. A file that is not a bench JSON counts as kept, to be safe."""
    kept = []
    for path in sorted(folder.glob("bench-*.json")):
        try:
            quick = load(path).get("settings", {}).get("quick") is True
        except InvalidArgument:
            quick = False
        if not quick:
            kept.append(path)
    return kept


def _progress_line(case: dict[str, Any]) -> str:
    parts = [f"{name} {format_ns(t['median_ns'])}" for name, t in case["impls"].items()]
    return f"{case['label']:48} " + ", ".join(parts)


# -- the command ----------------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default="cuda", metavar="B",
                   help="backend (cuda, vulkan, webgpu, opengl), target (cuda/fake, opengl/llvmpipe, ...) or mem "
                        "(the in-memory test device); default: cuda")
    p.add_argument("--peers", action="store_true", help="also time the peer libraries that import (cuda.core, CuPy, PyTorch)")
    p.add_argument("--out", default=None, metavar="DIR", help="output folder (default: a new scratch folder, printed; "
                   "a measurement to keep: --out benchmarks/results, never with --quick)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and samples: a smoke run, not a measurement")
    p.add_argument("--check", metavar="BASELINE", help="the perf gate: measure the rows BASELINE names on its targets and "
                   "exit 1 when a row's ratio to its floor got slower than the baseline's by more than its threshold "
                   "(the table and reports into --out when given)")
    p.add_argument("--write-baseline", metavar="BASELINE", help="measure the perf gate's rows on its targets (several "
                   "runs each) and write BASELINE: on purpose, never in CI")
    p.add_argument("--table", metavar="FILE.json", help="measure nothing: print the README's Markdown table (C floor, "
                   "raw floor and peers columns) made from the bench JSON FILE.json")
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    if args.table:
        print(table(load(Path(args.table))), end="")
        return 0
    if args.check:
        return gate.check(Path(args.check), Path(args.out) if args.out else None)
    if args.write_baseline:
        return gate.write_baseline(Path(args.write_baseline))
    kept = _measurements_in(Path(args.out)) if args.quick and args.out else []
    if kept:
        print(f"ironaccel bench: --quick is a smoke run, not a measurement: it never writes into {args.out}, which "
              f"holds full measurements ({', '.join(p.name for p in kept)}); leave out --out (a scratch folder) "
              "or name another", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="ironaccel-bench-"))
    report = run(args.backend, peers=args.peers, quick=args.quick)
    for path in write(report, out):
        print(path)
    if report["simulated"]:
        print(SIMULATED_LABEL)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ironaccel bench", description=HELP)
    add_arguments(p)
    return command(p.parse_args(argv))

