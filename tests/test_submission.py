"""The submission package's git state: ironaccel's checkout and each backend's own repository (a plugin
certified from its repository records that repository's commit), untracked files counted and listed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import ironaccel
from ironaccel.cts import certify, results, submission, targets
from ironaccel.backends import register, unregister
from ironaccel.cts.cli import main
from ironaccel.cts.testing.documents import passing_doc

PLUGIN = '''
from ironaccel import api


class TinyBackend(api.Backend):
    name = "tiny"

    def probe(self):
        return api.BackendInfo("tiny", True, "a plugin in a repository of its own")

    def device_count(self):
        return 0

    def _open_device(self, index):
        raise NotImplementedError
'''


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def committed_repository(path: Path, files: dict[str, str]) -> str:
    """A git repository at ``path`` holding ``files``, committed; its commit."""
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "init", "-q")
    git(path, "add", ".")
    git(path, "commit", "-qm", "first")
    return git(path, "rev-parse", "HEAD")


def test_untracked_files_make_the_tree_dirty_and_are_listed_not_diffed(tmp_path):
    commit = committed_repository(tmp_path, {"a.txt": "one\n"})
    assert submission.git_state(tmp_path) == {"commit": commit, "dirty": False, "untracked": [], "diff": "",
                                              "note": ""}
    (tmp_path / "new dir").mkdir()
    (tmp_path / "new dir" / "b.txt").write_text("not in the diff\n")
    state = submission.git_state(tmp_path)
    assert state["dirty"] is True and state["untracked"] == ["new dir/b.txt"]
    assert "not in the diff" not in state["diff"]


def test_code_outside_any_checkout_has_no_repository(tmp_path):
    # the repository is made here: the tests themselves may run from a copy that is no checkout (the mutant
    # engine's snapshot, an unpacked sdist), so ironaccel's own tree proves nothing either way
    committed_repository(tmp_path, {"a.txt": "one\n", "lib/tracked/__init__.py": ""})
    (tmp_path / "venv" / "pkg").mkdir(parents=True)  # an installed package inside a repository it is not part of
    (tmp_path / "venv" / "pkg" / "__init__.py").write_text("")
    assert submission.repository_of(tmp_path / "venv" / "pkg") is None
    assert submission.repository_of(tmp_path / "a.txt") == tmp_path.resolve()
    assert submission.repository_of(tmp_path / "lib" / "tracked") == tmp_path.resolve()


@pytest.fixture
def plugin_repository(tmp_path, monkeypatch):
    """Backend ``tiny`` whose package lives in a git repository of its own, committed then edited."""
    repo = tmp_path / "tiny-repo"
    commit = committed_repository(repo, {"tinyplug/__init__.py": PLUGIN, "README.md": "tiny\n"})
    (repo / "tinyplug" / "__init__.py").write_text(PLUGIN + "\n# an uncommitted edit\n")
    (repo / "tinyplug" / "extra.py").write_text("UNTRACKED = 1\n")
    monkeypatch.syspath_prepend(str(repo))
    register("tiny", "tinyplug:TinyBackend")
    targets.register("tiny", lambda: [targets.Target("tiny", "sim", True)])
    yield repo, commit
    unregister("tiny")
    targets.unregister("tiny")


def test_package_records_the_plugins_own_repository_and_ironaccels(tmp_path, plugin_repository, capsys):
    repo, commit = plugin_repository
    res = tmp_path / "results"
    res.mkdir()
    for name in ("tiny/sim", "webgpu/lavapipe"):
        results.dump(passing_doc(name, whole_suite=True), res / results.file_name(name))
    pkg = submission.package(res, tmp_path / "pkg")
    manifest = json.loads((pkg / "MANIFEST.json").read_text())

    checkout = submission.repository_of(Path(ironaccel.__file__).resolve().parent)  # None: installed (tox)
    if checkout is None:
        assert manifest["git"]["commit"] == "" and "is not in a git checkout" in manifest["git"]["note"]
        assert manifest["git"]["backends"]["webgpu"]["commit"] == ""  # built in, installed with ironaccel
    else:
        assert manifest["git"]["commit"] == git(checkout, "rev-parse", "HEAD")  # ironaccel's own checkout
        assert manifest["git"]["backends"]["webgpu"] == {"repository": "ironaccel"}  # built in: that checkout says it
    assert manifest["git"]["backends"]["tiny"] == {
        "commit": commit, "dirty": True, "untracked": ["tinyplug/extra.py"], "note": "", "diff_file": "git-tiny.diff"}
    diff = (pkg / "git-tiny.diff").read_text()
    assert "+# an uncommitted edit" in diff and "UNTRACKED" not in diff
    assert "git-tiny.diff" in manifest["files"]
    assert main(["certify", "--verify", str(pkg)]) == certify.VERIFY_VALID
    assert f"tiny at commit {commit} (dirty, see git-tiny.diff)" in capsys.readouterr().out

    copy = tmp_path / "copy"
    shutil.copytree(pkg, copy)
    (copy / "git-tiny.diff").unlink()
    forged = json.loads((copy / "MANIFEST.json").read_text())
    del forged["files"]["git-tiny.diff"]
    (copy / "MANIFEST.json").write_text(json.dumps(forged))
    assert main(["certify", "--verify", str(copy)]) == certify.VERIFY_TAMPERED
    assert "the tiny backend's checkout was dirty but its diff is missing" in capsys.readouterr().err


def test_a_backend_installed_outside_a_checkout_records_why_there_is_no_commit(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "tinysite").mkdir(parents=True)
    (site / "tinysite" / "__init__.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(site))
    register("tiny", "tinysite:TinyBackend")
    targets.register("tiny", lambda: [targets.Target("tiny", "sim", True)])
    try:
        res = tmp_path / "results"
        res.mkdir()
        results.dump(passing_doc("tiny/sim"), res / results.file_name("tiny/sim"))
        manifest = json.loads((submission.package(res, tmp_path / "pkg") / "MANIFEST.json").read_text())
    finally:
        unregister("tiny")
        targets.unregister("tiny")
    state = manifest["git"]["backends"]["tiny"]
    assert state["commit"] == "" and state["dirty"] is None
    assert state["note"] == f"the tiny backend ({site / 'tinysite'}) is not in a git checkout"
