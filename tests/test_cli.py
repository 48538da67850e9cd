"""The ``ironaccel`` command: help, devices, doctor, certify argument handling, status."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ironaccel.cts import certify, targets
from ironaccel.backends import registry
from ironaccel.cts.cli import main

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


def _good_results(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    shutil.copytree(GOLDEN_RESULTS / "results", folder)
    return folder


def _bad_files():
    """name -> (how to make the bad cuda-fake.json, what the one line says)."""
    import os

    def write(data: bytes):
        return lambda path: path.write_bytes(data)

    def deep(path):
        path.write_text("[" * 200000 + "]" * 200000)

    def message(path):
        doc = json.loads((GOLDEN_RESULTS / "results" / "cuda-fake.json").read_text())
        doc["run"]["message"] = {"not": "a string"}
        path.write_text(json.dumps(doc))

    def newline_name(path):
        doc = json.loads((GOLDEN_RESULTS / "results" / "cuda-fake.json").read_text())
        doc["target"]["name"] = "cuda/fake\n## injected"
        path.write_text(json.dumps(doc))

    def duplicate(path):
        text = (GOLDEN_RESULTS / "results" / "cuda-fake.json").read_text()
        path.write_text(text.replace('"schema": 1', '"schema": 1, "schema": 1', 1))

    def directory(path):
        path.unlink()
        path.mkdir()

    def dangling(path):
        path.unlink()
        os.symlink(path.with_name("gone.json"), path)

    good = (GOLDEN_RESULTS / "results" / "cuda-fake.json").read_bytes()
    return {
        "malformed": (write(b'{"schema": 1,'), "not JSON"),
        "empty": (write(b""), "empty file"),
        "bom": (write(b"\xef\xbb\xbf" + good), "byte-order mark"),
        "not utf-8": (write(good.replace(b"ironaccel", b"iron\xffaccel", 1)), "not UTF-8"),
        "directory": (directory, "a directory"),
        "dangling symlink": (dangling, "does not exist"),
        "deep nesting": (deep, "nested too deeply"),
        "non-string run.message": (message, "run.message must be a string"),
        "newline in target name": (newline_name, "is not backend/driver"),
        "duplicate key": (duplicate, "duplicate key 'schema'"),
    }


@pytest.mark.parametrize("kind", list(_bad_files()))
def test_status_on_a_bad_results_file_says_which_and_why_and_exits_2(tmp_path, capsys, kind):
    make, says = _bad_files()[kind]
    folder = _good_results(tmp_path)
    make(folder / "cuda-fake.json")
    out = tmp_path / "STATUS.md"
    assert main(["status", "--results", str(folder), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cuda-fake.json" in err and says in err, err
    assert not out.exists()


def test_status_on_a_missing_results_folder_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "STATUS.md"
    assert main(["status", "--results", str(tmp_path / "nowhere"), "--output", str(out)]) == 2
    assert "no such results folder" in capsys.readouterr().err
    assert not out.exists()


BAD_JSON = [k for k in _bad_files() if k not in ("non-string run.message", "newline in target name")]


@pytest.mark.parametrize("kind", BAD_JSON)
def test_verify_on_a_bad_certificate_says_which_and_why_and_exits_2(tmp_path, capsys, kind):
    make, says = _bad_files()[kind]
    cert = tmp_path / "cuda-fake.json"  # _bad_files makes its file from this name
    cert.write_text("{}")
    make(cert)
    assert main(["verify", str(cert)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def _one_test_doc(outcome: str, status: str = "ok") -> dict:
    from ironaccel.cts import results, spec

    tests = [{"id": "test_mem.py::test_a", "clauses": ["MEM-1"], "outcome": outcome, "duration": 0.0, "message": ""},
             {"id": "test_mem.py::test_b", "clauses": ["MEM-2"], "outcome": "fail", "duration": 0.0, "message": ""}]
    return results.document(targets.get("webgpu/lavapipe"), spec.current().parts("webgpu/lavapipe"),
                            "2026-11-30T04:30:00Z", status, "", tests)


@pytest.mark.parametrize("before, now, code", [
    ("pass", "pass", 1),  # test_b fails in both: a failure, not a regression
    ("pass", "fail", 6),  # test_a is a new failure
    ("fail", "pass", 1),  # a fix
    ("pass", "flaky", 1),  # newly flaky: reported, not a regression
])
def test_certify_baseline_exit_codes(capsys, monkeypatch, tmp_path, before, now, code):
    from ironaccel.cts import results

    baseline, out = tmp_path / "baseline", tmp_path / "results"
    baseline.mkdir()
    results.dump(_one_test_doc(before), baseline / "webgpu-lavapipe.json")

    def fake_certify(names, results_dir, **options):
        assert options["selection"].only == ("MEM-*",)
        results_dir.mkdir(exist_ok=True)
        path = results_dir / "webgpu-lavapipe.json"
        results.dump(_one_test_doc(now), path)
        doc = results.load(path)
        return [certify.TargetRun(n, path, "ok", doc["summary"], 1.0) for n in names]

    monkeypatch.setattr(certify, "certify", fake_certify)
    assert main(["certify", "--target", "webgpu/lavapipe", "--results", str(out), "--only", "MEM-*",
                 "--baseline", str(baseline)]) == code
    text = capsys.readouterr().out
    assert ("new failure: test_mem.py::test_a" in text) == (code == 6)
    assert ("fixed: test_mem.py::test_a" in text) == (before == "fail")
    assert ("newly flaky: test_mem.py::test_a" in text) == (now == "flaky")


def test_certify_rejects_a_bad_shard_and_a_missing_baseline(capsys, tmp_path):
    assert main(["certify", "--target", "webgpu/lavapipe", "--shard", "0/2"]) == 2
    assert "expected K/N" in capsys.readouterr().err
    assert main(["certify", "--target", "webgpu/lavapipe", "--baseline", str(tmp_path / "nope")]) == 2
    assert "no such results folder" in capsys.readouterr().err


def test_certify_help_documents_every_exit_code(capsys):
    from ironaccel.cts import judge

    with pytest.raises(SystemExit):
        main(["certify", "--help"])
    text = capsys.readouterr().out
    for code in (0, 1, 2, judge.EXIT_REGRESSION):
        assert f"{code} " in text
    assert "--only" in text and "--shard" in text and "--baseline" in text
    with pytest.raises(SystemExit):
        main(["verify", "--help"])
    text = capsys.readouterr().out
    for code in (certify.VERIFY_VALID, 2, certify.VERIFY_STALE, certify.VERIFY_TAMPERED, certify.VERIFY_UNTRUSTED):
        assert f"  {code} " in text
    assert "--trust" in text


def test_merge_command_says_what_is_wrong(tmp_path, capsys):
    from ironaccel.cts import results

    path = tmp_path / "whole.json"
    results.dump(_one_test_doc("pass"), path)
    assert main(["merge", str(path), "--output", str(tmp_path / "m.json")]) == 2
    assert "not a shard" in capsys.readouterr().err


def test_pytest_args_pass_the_selection_on():
    from ironaccel.cts.selection import Selection

    args = certify.pytest_args("webgpu/lavapipe", Path("r.json"), 5, Path("suite"),
                               Selection(("KERNEL-*",), ("test_copy.py::*",), "2/4"))
    assert args[-6:] == ["--only", "KERNEL-*", "--skip", "test_copy.py::*", "--shard", "2/4"]
