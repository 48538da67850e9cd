"""What ran is what is recorded (issue 32): every C build embeds the hash of its sources; the loader never uses a
compiled extension built from other sources; a results file records the hashes the loaded builds report; the
judge refuses a run whose loaded builds are not builds of the sources it claims."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from ironaccel import cbuild, fakes, native
from ironaccel.cts import judge, results, spec, targets
from ironaccel.sourcehash import source_hash

ROOT = Path(__file__).resolve().parents[1]
EXT = sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def stale_checkout(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A copy of the checkout with an in-tree ``ironaccel/_fast*.so`` built from older sources (as an earlier
    ``pip install -e .`` leaves it), and that build's source hash."""
    tree = tmp / "checkout"
    for name in ("ironaccel", "conformance", "fakes"):
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    older = tmp / "older"
    older.mkdir()
    for f in native.SOURCES:
        text = f.read_text()
        (older / f.name).write_text(text + ("\n/* an older revision */\n" if f.suffix == ".c" else ""))
    sources = [older / f.name for f in native.SOURCES]
    monkeypatch.setenv("IRONACCEL_CACHE", str(tmp / "old-cache"))
    try:
        built = native.cbuild.build("fast", f"_fast{EXT}", sources,
                                    (*native.CFLAGS, f"-I{sysconfig.get_paths()['include']}"), ("-ldl",), key=EXT)
    except Exception as exc:  # no compiler here: nothing to be stale
        pytest.skip(f"cannot build the compiled extension here: {exc}")
    monkeypatch.delenv("IRONACCEL_CACHE")
    shutil.copy(built, tree / "ironaccel" / f"_fast{EXT}")
    return tree, source_hash(sources)


def run_python(tree: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(tree), **env}
    environment.pop("IRONACCEL_PURE_PYTHON", None)
    return subprocess.run([sys.executable, "-W", "always", "-c", code], cwd=tree, env=environment,
                          capture_output=True, text=True, timeout=300)


def test_the_loader_never_uses_a_stale_in_tree_build(tmp_path, monkeypatch):
    """A stale in-tree ``_fast*.so`` is refused: a fresh build of the sources is used instead and a warning names
    both; where no fresh build can be made (no compiler, an empty cache), pure Python, and a warning says so."""
    tree, stale = stale_checkout(tmp_path, monkeypatch)
    report = "from ironaccel import native; m = native.load(); print(m and m.SOURCE_HASH, native.sources_hash())"
    fresh = run_python(tree, report)
    assert fresh.returncode == 0, fresh.stderr
    loaded, expected = fresh.stdout.split()
    assert loaded == expected != stale
    assert f"built from sources hashed {stale}" in fresh.stderr and "a fresh build of the sources is" in fresh.stderr

    none = run_python(tree, report, CC="false", IRONACCEL_CACHE=str(tmp_path / "empty-cache"))
    assert none.returncode == 0, none.stderr
    assert none.stdout.split()[0] == "None"
    assert f"built from sources hashed {stale}" in none.stderr and "pure Python" in none.stderr


def test_a_copy_of_the_tree_runs_a_build_of_its_own_files(tmp_path):
    """A copy of the checkout with no build in it (the mutation engine's) builds its own sources into its cache:
    it never runs the build of the checkout pip installed (editable: its import hook answers for
    ``ironaccel._fast`` whichever ``ironaccel`` imported it), which was not built from these files."""
    tree = tmp_path / "copy"
    for name in ("ironaccel", "fakes"):
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    cache = tmp_path / "cache"
    run = run_python(tree, "from ironaccel import native; m = native.load(); print(m and m.__file__, native.why_not)",
                     IRONACCEL_CACHE=str(cache))
    assert run.returncode == 0, run.stderr
    if run.stdout.startswith("None"):
        pytest.skip(f"cannot build the compiled extension here: {run.stdout}")
    assert Path(run.stdout.split()[0]).is_relative_to(cache / "fast"), run.stdout


def test_a_build_that_does_not_record_its_sources_is_stale(tmp_path, monkeypatch):
    """A build made without the hash (not through cbuild or setup.py) reports "unrecorded" and is not used."""
    monkeypatch.setenv("IRONACCEL_CACHE", str(tmp_path))
    include = sysconfig.get_paths()["include"]
    out = tmp_path / f"_fast{EXT}"
    cc = subprocess.run([cbuild.find_compiler(), *native.CFLAGS, f"-I{include}", "-o", str(out),
                         *map(str, (f for f in native.SOURCES if f.suffix == ".c")), "-ldl"], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    module = native._import(out)
    assert module.SOURCE_HASH == "unrecorded"
    assert "sources hashed unrecorded" in native._stale(module)


def test_a_stale_build_cannot_produce_results_claiming_the_current_sources(tmp_path, monkeypatch):
    """A conformance run in a checkout holding a stale ``_fast*.so`` records the build that really ran (the
    fresh one: the stale one is refused) and the fake it loaded, as they report themselves; a file whose
    builds are not builds of the current sources is judged stale, whatever parts it claims."""
    tree, stale = stale_checkout(tmp_path, monkeypatch)
    out = tmp_path / "results"
    code = ("import sys; from ironaccel.cts.cli import main; "
            f"sys.exit(main(['certify', '--target', 'cuda/fake', '--only', 'LIFE-4', '--results', {str(out)!r}]))")
    run = run_python(tree, code)
    doc = results.load(out / "cuda-fake.json")
    assert doc["run"]["status"] == "ok", run.stdout + run.stderr
    current = spec.current(["cuda/fake"])
    assert doc["builds"] == {"compiled": native.sources_hash(), "driver": fakes.source_hash()}
    assert doc["suite"]["parts"] == current.parts("cuda/fake") and judge.stale_parts(doc, current) == ()
    forged = json.loads(json.dumps(doc))
    forged["builds"]["compiled"] = stale  # what the stale build reports had it been loaded
    (why,) = judge.stale_parts(forged, current)
    assert f"compiled extension that ran is a build of other sources ({stale})" in why
    (run_, ), _ = judge.runs([forged], current, targets.TARGETS)
    assert judge.target_level(run_, spec.load_clauses())[0] == "stale"
    forged = json.loads(json.dumps(doc))
    forged["builds"]["driver"] = "0123456789abcdef"  # another build of the fake
    assert "the fake driver that ran is a build of other sources" in judge.stale_parts(forged, current)[0]
    results.validate(forged)
    forged["builds"]["compiled"] = 1
    with pytest.raises(ValueError, match="builds must map"):
        results.validate(forged)
