"""The ``ironaccel`` command: help, devices, doctor, certify argument handling, status."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ironaccel import certify, targets
from ironaccel.backends import registry
from ironaccel.cli import main

GOLDEN_RESULTS = Path(__file__).parent / "golden" / "status"


def test_help_explains_targets_and_commands(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for word in ("target", "devices", "doctor", "certify", "status", "webgpu/lavapipe"):
        assert word in out


def test_python_dash_m_runs_the_cli():
    proc = subprocess.run([sys.executable, "-m", "ironaccel", "doctor"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "cuda/fake" in proc.stdout


def test_devices_lists_every_registered_backend(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    for name in registry():
        assert f"\n{name} " in out or out.startswith(f"{name} ")


def test_doctor_lists_every_target_with_a_fix(capsys, monkeypatch):
    monkeypatch.setattr(targets.Target, "missing", lambda self: None if self.driver != "nvidia" else "needs a GPU")
    assert main(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in targets.TARGETS:
        row = next(line for line in lines if line.startswith(name + " "))
        assert ("needs a GPU" in row) == name.endswith("/nvidia")


def test_certify_needs_targets(capsys):
    assert main(["certify"]) == 2
    assert "--target" in capsys.readouterr().err


def test_certify_rejects_unknown_target(capsys):
    assert main(["certify", "--target", "cuda/imaginary"]) == 2
    assert "unknown target 'cuda/imaginary'" in capsys.readouterr().err


def test_certify_all_with_nothing_runnable(capsys, monkeypatch):
    monkeypatch.setattr(certify, "runnable_targets", lambda: [])
    assert main(["certify", "--all"]) == 2
    assert "doctor" in capsys.readouterr().err


def test_certify_reports_failure_in_exit_code(capsys, monkeypatch, tmp_path):
    def fake_certify(names, results_dir, **options):
        return [certify.TargetRun(n, results_dir / "x.json", "ok", {"pass": 3, "fail": 1}, 1.0) for n in names]

    monkeypatch.setattr(certify, "certify", fake_certify)
    assert main(["certify", "--target", "webgpu/lavapipe", "--results", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "webgpu/lavapipe" in out and "FAILED" in out


def test_status_writes_then_checks(tmp_path, capsys):
    results = tmp_path / "results"
    shutil.copytree(GOLDEN_RESULTS / "results", results)
    out = tmp_path / "STATUS.md"
    assert main(["status", "--results", str(results), "--output", str(out), "--check"]) == 1
    assert main(["status", "--results", str(results), "--output", str(out)]) == 0
    assert out.read_text().startswith("# ")
    assert main(["status", "--results", str(results), "--output", str(out), "--check"]) == 0
    out.write_text(out.read_text() + "hand edit\n")
    assert main(["status", "--results", str(results), "--output", str(out), "--check"]) == 1
