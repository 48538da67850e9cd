"""What is committed stays the evidence (issue 24): bench never overwrites the committed measurement with a
smoke run, STATUS.md is a function of the committed results alone, build outputs and run records are
git-ignored."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ironaccel.cts import targets
from ironaccel.cts.cli import main
from membackend import registered
from memruns import ROOT, files


# -- 5. bench never overwrites the committed measurement with a smoke run ------------------------------------

def test_bench_quick_never_writes_into_the_committed_results_and_defaults_to_a_scratch_folder(tmp_path, monkeypatch,
                                                                                            capsys):
    """Issue 24: `ironaccel bench --quick` overwrote the committed 61-round files with a 9-round smoke run."""
    from ironaccel.cts.bench import runner

    committed = ROOT / "benchmarks" / "results"
    before = files(committed)
    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("bench measured before refusing"))
    assert main(["bench", "--backend", "mem", "--quick", "--out", str(committed)]) == 2
    assert "never writes into" in capsys.readouterr().err
    written: list[Path] = []
    monkeypatch.setattr(runner, "run", lambda *a, **k: {"simulated": True})
    monkeypatch.setattr(runner, "write", lambda report, out: written.append(out) or [])
    assert main(["bench", "--backend", "mem", "--quick"]) == 0
    assert written and committed.resolve() not in (written[0].resolve(), *written[0].resolve().parents)
    assert files(committed) == before


# -- 8. build outputs are ignored ------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["ironaccel/_fast.cpython-311-x86_64-linux-gnu.so", "ironaccel/_fast.abi3.so",
                                  "fakes/cuda/x.o", "results/runs/20261201T000000Z-cuda-fake-abc123/RUN.json",
                                  "results/.ironaccel.lock", "ironaccel/__pycache__/api.cpython-311.pyc",
                                  ".mypy_cache/x", "build/lib/x.py", "results/.cuda-fake.json.123.abcdef.tmp",
                                  ".pkg.123.partial/MANIFEST.json"])
def test_build_outputs_and_run_records_are_git_ignored(path):
    """Issue 24: every package said "dirty" because the in-tree `ironaccel/_fast*.so` was not ignored."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    assert subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT).returncode == 0, path


# -- 7. STATUS.md is a function of the committed results alone ---------------------------------------------------

def _status(tmp_path: Path, *args: str) -> str:
    out = tmp_path / f"S{len(list(tmp_path.glob('S*')))}.md"
    assert main(["status", "--results", str(ROOT / "results"), "--output", str(out), *args]) == 0
    return out.read_text()


def test_status_is_the_same_without_the_opencl_plugin(tmp_path, monkeypatch):
    """Issue 24: without the OpenCL plugin its committed results read STALE. A fresh clone with only the
    library installed is simulated by hiding every plugin's entry points."""
    import importlib

    backends = importlib.import_module("ironaccel.backends")
    if "opencl" not in backends.registry():
        pytest.skip("the OpenCL plugin is not installed here")

    def forget() -> None:
        backends.registry.cache_clear()
        backends.get.cache_clear()
        targets.registered_drivers.cache_clear()

    with_plugin = _status(tmp_path)
    real = backends.entry_points
    monkeypatch.setattr(backends, "entry_points",
                        lambda group: [] if group.startswith("ironaccel.") else real(group=group))
    forget()
    try:
        assert "opencl" not in backends.registry()
        without = _status(tmp_path)
    finally:
        monkeypatch.undo()
        forget()
    assert without == with_plugin
    assert "**opencl**" in without and "is not here to check" not in without


def test_a_backend_installed_without_results_is_listed_only_with_installed(tmp_path):
    """Issue 24: with an extra plugin a row appeared and `status --check` failed."""
    plain = _status(tmp_path)
    with registered():
        assert _status(tmp_path) == plain
        assert "**mem**" in _status(tmp_path, "--installed")
