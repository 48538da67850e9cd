"""The perf gate (``ironaccel bench --check``): its verdicts on synthetic reports, and on the fake libcuda that it
fails when ironaccel's side of a row is slowed and passes the same row unslowed, against a baseline made here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ironaccel.cts.bench import gate
from ironaccel.cts.bench.cases import C_FLOOR, FLOOR
from ironaccel.errors import InvalidArgument

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "benchmarks" / "baseline" / "gate.json"


def _baseline(ratio: float = 2.0) -> dict:
    return {"tool": gate.TOOL, "schema": gate.SCHEMA, "threshold": 1.15, "samples": 9, "sample_ms": 0.2, "runs": 3,
            "made": "2026-12-02T00:00:00Z", "regenerate": gate.REGENERATE,
            "targets": {"cuda/fake": {"compiled_hot_path": "compiled", "device": "fake",
                                      "rows": {"stream_sync": {"against": C_FLOOR, "label": "stream synchronize, idle",
                                                               "ratio": ratio, "runs": [ratio] * 3}}}}}


def _report(median: float, low: float, high: float, hot_path: str = "compiled", against: str = C_FLOOR) -> dict:
    ratio = {"median": median, "ci_low": low, "ci_high": high, "pairs": 9}
    return {"compiled_hot_path": hot_path,
            "cases": [{"name": "stream_sync", "label": "stream synchronize, idle", "errors": {},
                       "ratios": {against: ratio}}]}


@pytest.mark.parametrize("median, low, high, verdict", [
    (2.0, 1.9, 2.1, "ok"),
    (2.4, 2.2, 2.6, "ok"),        # the median is past the limit (2.3), the interval is not wholly past it
    (2.5, 2.31, 2.7, "FAILED"),   # the whole interval is past 1.15 x 2.0
    (1.5, 1.4, 1.7, "faster"),    # the whole interval is below 2.0 / 1.15: time to regenerate the baseline
])
def test_a_row_fails_only_when_its_whole_interval_is_past_the_threshold(median, low, high, verdict):
    [found] = gate.verdicts(_baseline(), {"cuda/fake": _report(median, low, high)})
    assert found["verdict"] == verdict, found
    assert found["limit"] == pytest.approx(2.3)


def test_a_row_not_measured_another_hot_path_or_a_target_not_run_fails():
    base = _baseline()
    [no_floor] = gate.verdicts(base, {"cuda/fake": _report(2.0, 1.9, 2.1, against=FLOOR)})
    assert no_floor["verdict"] == "FAILED" and "no ratio to C floor" in no_floor["why"]
    [pure] = gate.verdicts(base, {"cuda/fake": _report(2.0, 1.9, 2.1, hot_path="pure Python (no compiler)")})
    assert pure["verdict"] == "FAILED" and "hot path" in pure["why"]
    [absent] = gate.verdicts(base, {"cuda/fake": "cuda/fake: the bench did not run: NotAvailable"})
    assert absent["verdict"] == "FAILED" and "did not run" in absent["why"]
    text = gate.markdown([no_floor, pure, absent], base)
    assert text.startswith("# ironaccel perf gate: FAILED (3 of 3 rows failed)")


def test_a_baseline_keeps_each_rows_highest_ratio_over_its_runs(monkeypatch):
    medians = iter([2.1, 2.4, 2.2])

    def measured(target, rows, samples, sample_ms):
        report = _report(next(medians), 0, 9)
        report["target"] = {"device": "fake"}
        return report

    monkeypatch.setattr(gate, "measure", measured)
    made = gate.make_baseline({"cuda/fake": {"stream_sync": C_FLOOR}}, runs=3, log=lambda line: None)
    entry = made["targets"]["cuda/fake"]["rows"]["stream_sync"]
    assert entry["ratio"] == 2.4 and entry["runs"] == [2.1, 2.4, 2.2] and entry["against"] == C_FLOOR
    assert made["tool"] == gate.TOOL and made["runs"] == 3
    monkeypatch.setattr(gate, "measure", lambda *a: _report(2.0, 1.9, 2.1, against=FLOOR) | {"target": {"device": "x"}})
    with pytest.raises(gate.NotMeasured, match="no ratio to C floor"):
        gate.make_baseline({"cuda/fake": {"stream_sync": C_FLOOR}}, runs=1, log=lambda line: None)


def test_the_baseline_file_is_checked(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"tool": "ironaccel bench", "cases": []}))
    with pytest.raises(InvalidArgument, match="not a perf-gate baseline.*--write-baseline"):
        gate.load_baseline(path)
    with pytest.raises(InvalidArgument, match="cannot read"):
        gate.load_baseline(tmp_path / "missing.json")


def test_the_committed_baseline_gates_every_row_the_gate_names():
    baseline = gate.load_baseline(BASELINE)
    assert {t: set(g["rows"]) for t, g in baseline["targets"].items()} == {t: set(r) for t, r in gate.GATE.items()}
    for target, gated in baseline["targets"].items():
        for row, entry in gated["rows"].items():
            assert entry["against"] == gate.GATE[target][row]
            assert len(entry["runs"]) == baseline["runs"]


SLOWED = """
import time
from ironaccel.backends.cuda import fast

_plain = fast.FastStream.synchronize


def synchronize(self, timeout=None):
    end = time.perf_counter_ns() + {ns}
    while time.perf_counter_ns() < end:
        pass
    return _plain(self, timeout)


fast.FastStream.synchronize = synchronize
"""


@pytest.mark.parametrize("slowed_ns", [0, 100])
def test_the_gate_fails_on_a_slowed_hot_path_and_passes_it_unslowed(tmp_path, monkeypatch, slowed_ns):
    """The gate's idle stream synchronize row on the fake (ironaccel's compiled synchronize against the raw
    cuStreamSynchronize), against a baseline the test makes first on this machine: the committed one was made on
    another, and this checks the gate, not how alike two machines are (tox -e perf checks the committed one).
    Slowed: a Python wrapper with a 100 ns busy loop around ironaccel's synchronize, loaded into the gate's
    measuring process by a sitecustomize module."""
    pytest.importorskip("cuda.bindings")
    from ironaccel import native

    if native.load() is None:
        pytest.skip(f"the compiled hot path is not loaded here: {native.why_not}")
    row = {"stream_sync": gate.GATE["cuda/fake"]["stream_sync"]}
    baseline = gate.make_baseline({"cuda/fake": row}, runs=2, log=lambda line: None)
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(baseline))
    if slowed_ns:
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SLOWED.format(ns=slowed_ns))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    lines: list[str] = []
    status = gate.check(path, tmp_path / "out", log=lines.append)
    table = (tmp_path / "out" / "gate.md").read_text()
    verdict = next(line for line in table.splitlines() if "stream synchronize" in line)
    if slowed_ns:
        assert status == 1 and "FAILED: slower" in verdict, table
    else:  # passed: "ok", or "faster" where the machine's load eased after the baseline was taken
        assert status == 0 and ("| ok" in verdict or "| faster" in verdict), table
