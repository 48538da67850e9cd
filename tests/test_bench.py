"""``ironaccel bench``: the paired statistics on synthetic data, the outputs' shape, and a quick real run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ironaccel.cts import bench
from ironaccel.cts.bench.units import format_ns
from ironaccel.errors import NotAvailable
from ironaccel.cts.bench import cases, cfloor, stats
from ironaccel.cts.bench import report as outputs

ROOT = Path(__file__).resolve().parent.parent


def test_paired_ratio_recovers_a_known_ratio_through_shared_drift():
    """Both sides share a drifting machine speed; the per-pair ratio cancels it, the CI covers the truth."""
    rng = np.random.default_rng(1)
    drift = np.exp(np.cumsum(rng.normal(0, 0.05, 200)))  # the machine slows and speeds up over time
    other = 1000 * drift * rng.lognormal(0, 0.02, 200)
    ours = 0.8 * 1000 * drift * rng.lognormal(0, 0.02, 200)
    r = stats.paired_ratio(ours, other, rng=np.random.default_rng(2))
    assert r["ci_low"] <= 0.8 <= r["ci_high"]
    assert abs(r["median"] - 0.8) < 0.01
    assert r["ci_high"] - r["ci_low"] < 0.02
    assert r["pairs"] == 200


def test_paired_ratio_interval_widens_with_noise_and_is_deterministic():
    rng = np.random.default_rng(3)
    other = rng.lognormal(0, 0.3, 50) * 500
    ours = 2 * rng.lognormal(0, 0.3, 50) * 500
    a = stats.paired_ratio(ours, other, rng=np.random.default_rng(stats.SEED))
    b = stats.paired_ratio(ours, other, rng=np.random.default_rng(stats.SEED))
    assert a == b
    assert a["ci_low"] < 2 < a["ci_high"]
    assert a["ci_high"] - a["ci_low"] > 0.2


def test_measure_alternates_pairs_and_reports_ns_per_op():
    order: list[str] = []

    def fake(name: str, ns_per_op: int) -> cases.Impl:
        def run(n: int) -> int:
            order.append(name)
            return ns_per_op * n

        return run

    case = cases.Case("x", "x", impls={"ironaccel": fake("ironaccel", 100), "raw": fake("raw", 50)})
    order.clear()
    timings = stats.measure(case, samples=4, sample_ns=1e6)
    timed_rounds = order[-8:]
    assert timed_rounds == ["ironaccel", "raw", "raw", "ironaccel"] * 2
    assert timings["ironaccel"]["median_ns"] == 100 and timings["raw"]["median_ns"] == 50
    summary = stats.summarize(case, timings, cases.Goal(ratio=1.1), simulated=False)
    assert summary["ratios"]["raw"]["median"] == 2.0
    assert summary["goal"]["met"] is False


def test_an_implementation_that_fails_loses_its_column_not_the_run():
    def broken(n: int) -> int:
        raise RuntimeError("no such API")

    case = cases.Case("x", "x", impls={"ironaccel": lambda n: 10 * n, "peer": broken})
    timings = stats.measure(case, samples=3, sample_ns=1e5)
    assert list(timings) == ["ironaccel"]
    assert case.errors["peer"].startswith("RuntimeError: no such API")


def test_goals_are_not_judged_on_simulated_runs():
    case = cases.Case("alloc_free.pool", "x")
    timings = {"ironaccel": {"samples_ns": [100.0], "median_ns": 100.0, "batch": 1}}
    summary = stats.summarize(case, timings, cases.CUDA_GOALS["alloc_free.pool"], simulated=True)
    assert summary["goal"]["met"] is None and summary["goal"]["met_here"] is True


def _check_outputs(out: Path, stem: str, simulated: bool) -> dict:
    files = sorted(p.name for p in out.iterdir())
    assert files[:2] == [f"{stem}.json", f"{stem}.md"] and files[2] in (f"{stem}.png", f"{stem}.svg"), files
    assert len(files) == 3
    report = json.loads((out / f"{stem}.json").read_text())
    assert report["schema"] == bench.SCHEMA and report["simulated"] is simulated
    for case in report["cases"]:
        assert {"name", "label", "impls", "ratios", "errors"} <= set(case)
        for name, timing in case["impls"].items():
            assert len(timing["samples_ns"]) == report["settings"]["samples"]
            assert timing["median_ns"] > 0
        for ratio in case["ratios"].values():
            assert ratio["ci_low"] <= ratio["median"] <= ratio["ci_high"]
    md = (out / f"{stem}.md").read_text()
    assert md.count("\n| ") == len(report["cases"]) + 1  # the header and one row per case
    plot = out / files[2]
    if plot.suffix == ".svg":
        assert plot.read_text().startswith("<svg") and ("SIMULATED" in plot.read_text()) is simulated
    if simulated:
        assert "SIMULATED" in md.splitlines()[0] and "SIMULATED" in report["label"]
    return report


def test_quick_run_on_the_in_memory_device(tmp_path):
    report = bench.run("mem", peers=False, quick=True, samples=3, sample_ms=0.2, log=lambda line: None)
    outputs.write(report, tmp_path)
    report = _check_outputs(tmp_path, "bench-mem-memdevice", simulated=True)
    names = [c["name"] for c in report["cases"]]
    assert "alloc_free.pool" in names and "htod.pageable.256" in names and "dtoh.pageable.65536" in names
    assert all(list(c["impls"]) == ["ironaccel"] for c in report["cases"])  # no floor on the test device


def test_quick_run_on_the_fake_libcuda_through_the_command(tmp_path):
    """The real command, in its own process as a target runs, on cuda/fake: the raw and the C floor measured in
    the same rounds for every case, the launch rows (4 arguments too), goals not judged."""
    pytest.importorskip("cuda.bindings")
    from ironaccel import fakes
    from ironaccel.cts import targets

    try:
        env = fakes.child_env()
    except Exception as exc:
        pytest.skip(f"the fake libcuda cannot be built: {exc}")
    env.update(targets.get("cuda/fake").environment())
    code = "import sys; from ironaccel.cts import bench; sys.exit(bench.main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", code, "--backend", "cuda/fake", "--quick", "--out", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "SIMULATED" in proc.stdout
    report = _check_outputs(tmp_path, "bench-cuda-fake", simulated=True)
    names = [c["name"] for c in report["cases"]]
    assert {"launch.async", "launch.args4", "launch.single", "launch.sync", "htod.pinned.256.call",
            "htod.pinned.256.deferred.call", "htod.pageable.65536.deferred"} <= set(names)
    for case in report["cases"]:
        assert set(case["impls"]) == {"ironaccel", "raw", cases.C_FLOOR}, (case["name"], case["errors"])
        assert cases.C_FLOOR in case["ratios"]
    pool = next(c for c in report["cases"] if c["name"] == "alloc_free.pool")
    assert pool["goal"]["met"] is None  # simulated: not judged
    md = (tmp_path / "bench-cuda-fake.md").read_text()
    assert "not judged: simulated" in md and "| vs C floor |" in md


LAUNCH_ROWS = {"launch.async", "launch.args4", "launch.single", "launch.sync"}
GRAPH_ROWS = {f"launch.x{cases.GRAPH_LAUNCHES}", f"graph.x{cases.GRAPH_LAUNCHES}"}


@pytest.mark.parametrize("target, rows", [("vulkan/lavapipe", LAUNCH_ROWS | GRAPH_ROWS),
                                          ("webgpu/lavapipe", LAUNCH_ROWS), ("opengl/llvmpipe", LAUNCH_ROWS)])
def test_quick_run_on_a_software_driver_has_every_row_against_the_raw_floor(tmp_path, target, rows):
    """Launch rows (and the graph replay row where the backend has graphs), copies, synchronize: each
    measured for ironaccel and the raw floor in the same rounds."""
    from ironaccel.cts import targets

    missing = targets.get(target).missing()
    if missing:
        pytest.skip(f"{target} cannot run here: {missing}")
    code = ("import sys; from pathlib import Path; from ironaccel.cts.bench import report, runner; "
            "r = runner.run(sys.argv[1], peers=False, quick=True, samples=3, sample_ms=0.2, log=lambda line: None); "
            "report.write(r, Path(sys.argv[2]))")
    proc = subprocess.run([sys.executable, "-c", code, target, str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = _check_outputs(tmp_path, "bench-" + target.replace("/", "-"), simulated=True)
    names = {c["name"] for c in report["cases"]}
    assert {n for n in names if n.startswith(("launch.", "graph."))} == rows
    assert {"stream_sync", "event_record_sync", "htod.pageable.256.call", "htod.pageable.65536", "dtoh.pageable.256"} <= names
    for case in report["cases"]:
        assert set(case["impls"]) == {"ironaccel", "raw"}, (case["name"], case["errors"])


@pytest.fixture
def c_floor_image():
    """The fake's path and the bench's kernels as PTX (what the C floor gets on cuda/fake)."""
    pytest.importorskip("cuda.bindings")
    from ironaccel import fakes
    from ironaccel.cts.bench import kernels

    try:
        library = str(fakes.build())
        cfloor.build()
    except Exception as exc:
        pytest.skip(f"no C compiler to build the fake and the C floor: {exc}")
    lang, image = kernels.cuda_image((9, 0), cubin=False)
    assert lang == "ptx" and ".entry fill_u32" in image and ".entry saxpy" in image
    return library, image


def test_cuda_image_is_a_cubin_for_a_gpu_that_loads_them_and_ptx_past_what_nvrtc_knows():
    pytest.importorskip("cuda.bindings")
    from ironaccel.cts.bench import kernels

    lang, image = kernels.cuda_image((9, 0), cubin=True)
    assert lang == "cubin" and image[:4] == b"\x7fELF"
    lang, image = kernels.cuda_image((99, 9), cubin=True)  # newer than any NVRTC: PTX for its newest target
    assert lang == "ptx" and ".entry saxpy" in image


def test_c_floor_times_every_case_it_lists_and_rejects_others(c_floor_image):
    floor = cfloor.CFloor(*c_floor_image, (256, 4096))
    try:
        impls = floor.impls()
        assert {"alloc_free.device", "stream_sync", "event_record_sync", "launch.async", "launch.args4",
                "launch.single", "launch.sync", "htod.pinned.4096.call", "dtoh.pageable.256"} <= set(impls)
        for name, impl in impls.items():
            assert impl(3) > 0, name
        for bad in ("htod.pinned.512", "dtoh.pinned.256.call", "nonsense"):
            with pytest.raises(RuntimeError, match="request unknown"):
                floor.impl(bad)(1)
    finally:
        floor.close()
    assert floor._proc.returncode == 0


def test_c_floor_without_a_kernel_lists_no_launch(c_floor_image):
    floor = cfloor.CFloor(c_floor_image[0], None, (256,))
    try:
        assert not [c for c in floor.cases if c.startswith("launch")] and "stream_sync" in floor.cases
    finally:
        floor.close()


def test_c_floor_reports_the_driver_call_that_failed(c_floor_image, monkeypatch):
    monkeypatch.setenv("IRONACCEL_FAKE_CUDA_FAULTS", "cuMemAllocAsync:2+=CUDA_ERROR_OUT_OF_MEMORY")
    floor = cfloor.CFloor(*c_floor_image, (256,))
    try:
        alloc_free = floor.impl("alloc_free.device")
        assert alloc_free(1) > 0  # the first call succeeds
        with pytest.raises(RuntimeError, match="cuMemAllocAsync 2 CUDA_ERROR_OUT_OF_MEMORY"):
            alloc_free(1)
        assert floor.impl("stream_sync")(2) > 0  # a failure ends the request, not the program
    finally:
        floor.close()


def test_c_floor_that_cannot_load_the_driver_is_not_available(tmp_path):
    try:
        cfloor.build()
    except Exception as exc:
        pytest.skip(f"no C compiler: {exc}")
    with pytest.raises(NotAvailable, match="dlopen"):
        cfloor.CFloor(str(tmp_path / "libcuda.so.1"), None, (256,))


def test_svg_plot_without_matplotlib_is_well_formed():
    import xml.etree.ElementTree as ET

    report = {"simulated": False, "target": {"name": "cuda/nvidia", "device": "GPU <x>"}, "cases": [
        {"label": "a & b", "ratios": {"raw": {"median": 1.2, "ci_low": 1.1, "ci_high": 1.3},
                                      "CuPy": {"median": 0.5, "ci_low": 0.4, "ci_high": 0.6}},
         "impls": {"ironaccel": {}, "raw": {}, "CuPy": {}}},
    ]}
    root = ET.fromstring(outputs.svg_plot(report))
    assert root.tag.endswith("svg")
    assert len(root.findall("{http://www.w3.org/2000/svg}rect")) == 2 + 2  # two bars, two legend keys


def test_table_from_the_committed_h200_report_has_its_headline_rows_and_peer_columns():
    report = json.loads((ROOT / "benchmarks" / "results" / "bench-cuda-nvidia.json").read_text())
    text = outputs.table(report)
    lines = text.splitlines()
    head = next(line for line in lines if line.startswith("| operation"))
    assert head == ("| operation | ironaccel | C floor | vs C floor | raw floor | vs raw | cuda.core | CuPy | PyTorch "
                    "| goal |")
    rows = [line for line in lines if line.startswith("| ") and line != head]
    have = {c["name"] for c in report["cases"]}
    assert len(rows) == len([n for n in outputs.HEADLINE if n in have]) > 8
    pool = next(c for c in report["cases"] if c["name"] == "alloc_free.pool")
    ours, raw = (format_ns(pool["impls"][impl]["median_ns"]) for impl in ("ironaccel", "raw"))
    ratio = pool["ratios"]["raw"]["median"]
    row = next(row for row in rows if row.startswith(f"| {pool['label']} |"))
    assert f"| {ours} |" in row and f"| {raw} | {ratio:.2f}× [" in row, row


def test_table_shows_the_ratio_to_the_c_floor_and_the_verdict_of_hardware_goals():
    samples = {"batch": 1, "samples_ns": [1.0], "median_ns": 1200.0}
    report = {"simulated": False, "started": "2026-12-01T00:00:00+00:00", "host": {"python": "3.12"},
              "settings": {"samples": 61, "confidence": 0.95},
              "target": {"name": "cuda/nvidia", "device": "NVIDIA H200", "driver_version": "580"},
              "cases": [{"name": "launch.args4", "label": "kernel launch with 4 arguments", "impls": {
                  "ironaccel": samples, cases.C_FLOOR: dict(samples, median_ns=1000.0), "raw": samples},
                  "ratios": {cases.C_FLOOR: {"median": 1.2, "ci_low": 1.1, "ci_high": 1.3},
                             "raw": {"median": 1.0, "ci_low": 0.9, "ci_high": 1.1}},
                  "goal": {"text": "<= 1.15x C floor", "met": False}}]}
    row = outputs.table(report).splitlines()[-1]
    assert row == ("| kernel launch with 4 arguments | 1.20 µs | 1.00 µs | 1.20× [1.10–1.30] | 1.20 µs | "
                   "1.00× [0.90–1.10] | <= 1.15x C floor: MISSED |")


def test_a_missed_goal_names_the_semantic_that_costs_it_and_the_alternative_row():
    """A row whose gap a semantic of the API costs (COPY-4 for a small pinned copy_htod) says which, the cost
    measured (its time less the alternative's) and the copy_htod_deferred row with its own verdict; a met one
    says nothing more."""
    name = "htod.pinned.256.call"
    goal, alternative = cases.CUDA_GOALS[name], cases.CUDA_GOALS[cases.deferred(name)]
    assert goal.alternative == "htod.pinned.256.deferred.call" and "COPY-4" in goal.cost

    def case(name: str, label: str, ns: float, c_floor: float, goal: cases.Goal) -> dict:
        timings = {"ironaccel": {"batch": 1, "samples_ns": [ns] * 3, "median_ns": ns},
                   cases.C_FLOOR: {"batch": 1, "samples_ns": [c_floor] * 3, "median_ns": c_floor}}
        return stats.summarize(cases.Case(name, label), timings, goal, simulated=False)

    report = {"simulated": False, "started": "2026-12-01T00:00:00+00:00", "host": {"python": "3.12"},
              "settings": {"samples": 3, "confidence": 0.95},
              "target": {"name": "cuda/nvidia", "device": "NVIDIA H200", "driver_version": "580"},
              "cases": [case(name, "htod 256 B pinned, call only", 3800.0, 2700.0, goal),
                        case(alternative_name := cases.deferred(name),
                             "htod 256 B pinned, copy_htod_deferred, call only", 2900.0, 2700.0, alternative)]}
    rows = outputs.table(report, (name, alternative_name)).splitlines()[-2:]
    assert rows[0].endswith("| <= 1.15x C floor: MISSED; the gap is " + goal.cost + "; its measured cost (this "
                            "row less the alternative): 900 ns; "
                            "alternative: htod 256 B pinned, copy_htod_deferred, call only (2.90 µs, met) |"), rows[0]
    assert rows[1].endswith("| <= 1.15x C floor: met |"), rows[1]


def test_table_command_prints_the_table_and_rejects_what_is_not_a_report(tmp_path, capsys):
    from ironaccel.cts.cli import main

    assert main(["bench", "--table", str(ROOT / "benchmarks" / "results" / "bench-cuda-nvidia.json")]) == 0
    assert "| operation | ironaccel | C floor |" in capsys.readouterr().out
    (tmp_path / "other.json").write_text('{"schema": 1}')
    assert main(["bench", "--table", str(tmp_path / "other.json")]) == 2
    assert "is not a report of ironaccel bench" in capsys.readouterr().err
