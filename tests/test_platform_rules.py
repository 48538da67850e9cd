"""Small rules of the certification platform (results, judge, status, spec, certify, submission, selection)
that the other unit test files left unchecked: each test here kills generated mutants that survived them
(``ci/mutants/generated.py --platform``, issue 32), named in its docstring."""

from __future__ import annotations

import re
from pathlib import Path

from ironaccel.cts import certify


def test_the_summary_names_why_each_failed_run_failed_and_nothing_for_a_passing_one():
    """certify.summary_table: ``not r.ok and r.message`` negated, ``r.ok`` negated."""
    runs = [certify.TargetRun("a/ok", Path("a.json"), "ok", {"pass": 3}, 1.0, message="a note"),
            certify.TargetRun("b/failed", Path("b.json"), "ok", {"pass": 1, "fail": 1}, 1.0, message="see the log"),
            certify.TargetRun("c/crashed", Path("c.json"), "crashed", None, 1.0, message="exit code -9")]
    lines = certify.summary_table(runs).splitlines()
    assert [line.split()[2] for line in lines[2:5]] == ["OK", "FAILED", "FAILED"]  # the result column
    assert lines[-2:] == ["b/failed: see the log", "c/crashed: exit code -9"]
    assert not any(line.startswith("a/ok:") for line in lines)


def test_a_farm_runs_summary_ends_each_row_with_the_node_it_ran_on():
    """certify.summary_table: ``nodes`` negated in a row (s12a's survivor: the rows of a farm run lost their
    node, the header kept it, and the table could not be laid out; tests/test_farm.py saw it, outside this set)."""
    farm = [certify.TargetRun("a/x", Path("a.json"), "ok", {"pass": 1}, 1.0, node="node-a"),
            certify.TargetRun("b/y", Path("b.json"), "ok", {"pass": 1}, 2.0, node="node-b")]
    lines = certify.summary_table(farm).splitlines()
    assert lines[0].split()[-1] == "node" and [line.split()[-1] for line in lines[2:4]] == ["node-a", "node-b"]
    here = [certify.TargetRun("a/x", Path("a.json"), "ok", {"pass": 1}, 1.5)]
    assert certify.summary_table(here).splitlines()[2].split()[-1] == "1.5"  # no node column on this machine


def test_an_expectations_file_is_its_targets_part_never_the_suites(tmp_path, monkeypatch):
    """spec._tree: ``exclude is not None`` flipped (every expectations edit would stale every target)."""
    from ironaccel.cts import spec

    suite = tmp_path / "conformance"
    (suite / "expectations").mkdir(parents=True)
    (suite / "test_mem.py").write_text("def test_x(): pass\n")
    expectations = suite / "expectations" / "mem-test.txt"
    expectations.write_text("test_mem.py::test_x  xfail  a reason\n")
    monkeypatch.setattr(spec, "conformance_dir", lambda: suite)
    before = spec.suite_hash()
    expectations.write_text("test_mem.py::test_x  skip  another reason\n")
    assert spec.suite_hash() == before
    (suite / "test_mem.py").write_text("def test_x(): assert True\n")
    assert spec.suite_hash() != before


def test_a_bad_shard_is_refused_where_a_selection_is_made():
    """selection.Selection.__post_init__: an early ``return`` (a bad shard reached pytest unchecked)."""
    import pytest

    from ironaccel.cts.selection import Selection

    for bad in ("3/2", "0/2", "1/0", "one/two"):
        with pytest.raises(ValueError):
            Selection(shard=bad)
    assert Selection(shard="2/2").shard == "2/2"


def test_status_lists_twelve_clause_ids_of_a_gap_then_says_how_many_more():
    """status.GAP_IDS_SHOWN 12 -> 11 (what STATUS.md shows of a long gap)."""
    from ironaccel.cts import status

    ids = [f"MEM-{i}" for i in range(1, 14)]
    assert status._ids(ids) == ", ".join(ids[:12]) + " and 1 more"
    assert status._ids(ids[:12]) == ", ".join(ids[:12])


def test_a_manifest_naming_a_file_outside_its_package_is_refused_naming_it(tmp_path):
    """submission.check_manifest: the ``_inside(name)`` check's arguments swapped (never refused)."""
    import pytest

    from ironaccel.cts import submission

    for name in ("../results/cuda-fake.json", "/etc/passwd", "results/../../x.json"):
        manifest = {"package": submission.PACKAGE_SCHEMA, "files": {name: "0" * 64}}
        with pytest.raises(ValueError, match="not a path inside the package"):
            submission.check_manifest(manifest, tmp_path)


def _manifest() -> dict:
    """A well-formed package manifest: ironaccel's checkout clean, a plugin's backend from no checkout."""
    from ironaccel.cts import submission

    plugin = {"commit": "", "dirty": None, "untracked": [], "note": "not in a git checkout", "diff_file": "git-tiny.diff"}
    return {"package": submission.PACKAGE_SCHEMA, "files": {"results/cuda-fake.json": "0" * 64},
            "suite": {"version": "1.0", "hash": "0123456789abcdef"}, "targets": {"cuda/fake": "simulated"},
            "backends": {"cuda": "simulated"}, "signers": {}, "parts": {"cuda/fake": {"suite": "0123456789abcdef"}},
            "git": {"commit": "a" * 40, "dirty": False, "untracked": [], "note": "",
                    "backends": {"cuda": {"repository": "ironaccel"}, "tiny": plugin}}}


def _set(path: str, value):
    def edit(manifest: dict) -> None:
        *parents, last = path.split(".")
        node = manifest
        for key in parents:
            node = node[key]
        node[last] = value
    return edit


BAD_MANIFEST = {
    "package a boolean": (_set("package", True), "package must be the number"),
    "files a list": (_set("files", []), "files must map file names to sha256 strings"),
    "a short sha256": (_set("files", {"results/cuda-fake.json": "0" * 63}),
                       "files['results/cuda-fake.json'] must be a sha256 string"),
    "suite hash a number": (_set("suite.hash", 1), "suite must map version and hash to strings"),
    "targets' level a number": (_set("targets.cuda/fake", 3), "targets must map names to levels"),
    "backends a list": (_set("backends", ["cuda"]), "backends must map names to levels"),
    "signers missing": (lambda m: m.pop("signers"), "signers must map target names to public keys (base64)"),
    "a part a number": (_set("parts.cuda/fake", 1), "parts must map target names to their hashes"),
    "git a string": (_set("git", "clean"), "git must be a JSON object"),
    "backends not an object": (_set("git.backends", []), "git.backends must be a JSON object"),
    "a backend's state not an object": (_set("git.backends.tiny", "clean"), "git.backends['tiny'] must be a JSON object"),
    "a short commit": (_set("git.commit", "abc123"), "git.commit must be a 40-hex-digit commit or empty"),
    "a plugin's short commit": (_set("git.backends.tiny.commit", "abc123"),
                                "git.backends['tiny'].commit must be a 40-hex-digit commit or empty"),
    "dirty the number 1": (_set("git.dirty", 1), "git.dirty must be true, false or null"),
    "dirty the number 0": (_set("git.backends.tiny.dirty", 0), "git.backends['tiny'].dirty must be true, false or null"),
    "untracked outside": (_set("git.untracked", ["../x"]), "git.untracked must list relative paths"),
    "note not a string": (_set("git.note", None), "git.note must be a string"),
    "another diff file": (_set("git.backends.tiny.diff_file", "git-cuda.diff"),
                          "git.backends['tiny'].diff_file must be git-tiny.diff"),
}


def test_a_manifest_is_checked_field_by_field(tmp_path):
    """submission.check_manifest: a ``need``'s arguments swapped (never refused), ``dirty`` compared with ``in``
    (the numbers 1 and 0 passed as true and false)."""
    import pytest

    from ironaccel.cts import submission

    assert submission.check_manifest(_manifest(), tmp_path) == _manifest()
    with pytest.raises(ValueError, match="not a package manifest .*: not a JSON object"):
        submission.check_manifest([_manifest()], tmp_path)
    for case, (edit, message) in BAD_MANIFEST.items():
        manifest = _manifest()
        edit(manifest)
        with pytest.raises(ValueError, match=f"not a package manifest .*: {re.escape(message)}"):
            submission.check_manifest(manifest, tmp_path)
            pytest.fail(f"{case}: accepted")


SELECTABLE = [("test_copy.py::test_roundtrip[4096]", ["MEM-1"]), ("test_copy.py::test_roundtrip[16]", ["MEM-1"]),
              ("test_kernel.py::test_launch", ["KERNEL-1", "KERNEL-2"]), ("test_event.py::test_sync", ["EVENT-1"])]


def test_a_selection_matches_test_ids_exactly_or_by_glob_and_clause_ids():
    """selection._matches: ``==`` flipped (every pattern matched every test), fnmatch's arguments swapped (a glob
    matched nothing). An id with brackets is matched as written, though fnmatch would read them as a class."""
    from ironaccel.cts.selection import Selection

    def chosen(**options) -> set[str]:
        return Selection(**options).chosen(SELECTABLE)

    assert chosen(only=("test_copy.py::test_roundtrip[4096]",)) == {"test_copy.py::test_roundtrip[4096]"}
    assert chosen(only=("KERNEL-*",)) == {"test_kernel.py::test_launch"}
    assert chosen(only=("test_copy.py::*",), skip=("*[[]16]",)) == {"test_copy.py::test_roundtrip[4096]"}
    assert chosen(skip=("EVENT-1", "MEM-*")) == {"test_kernel.py::test_launch"}
    assert chosen(only=("KERNEL-2", "test_event.py::test_sync")) == {"test_kernel.py::test_launch",
                                                                    "test_event.py::test_sync"}
    assert chosen(only=("kernel-*",)) == set()  # case-sensitive
    # shard K/N: every N-th of the selected tests sorted by id, from the K-th
    assert chosen(shard="1/2") == {"test_copy.py::test_roundtrip[16]", "test_event.py::test_sync"}
    assert chosen(skip=("EVENT-1",), shard="2/3") == {"test_copy.py::test_roundtrip[4096]"}


def test_the_readme_states_the_per_target_limit_certify_uses():
    """certify.TARGET_TIMEOUT_S 1800 -> 1801: the README's "default limit" of a target's run is the one in force."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    (stated,) = re.findall(r"default limit (\d+) s", readme)
    assert float(stated) == certify.TARGET_TIMEOUT_S
