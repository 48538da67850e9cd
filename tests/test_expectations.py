"""Expectations files (``ironaccel.cts.expectations``): the line format, tags, bug references, expiry, the
update from a run, and the committed files themselves."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from ironaccel.cts import cli, expectations, results, spec, targets
from ironaccel.cts.expectations import ExpectationsError, Tag

TODAY = date(2026, 12, 2)
LAVAPIPE = expectations.facts("Mesa 22.3.6 (LLVM 15.0.6)", "llvmpipe (LLVM 15.0.6, 256 bits)", "Mesa",
                              "Linux-6.1-x86_64-with-glibc2.36")
LLVMPIPE_GL = dict(LAVAPIPE, driver="4.5 (Core Profile) Mesa 22.3.6")
H200 = expectations.facts("CUDA 13.0, NVIDIA 580.159.04", "NVIDIA H200", "NVIDIA", "Linux-6.18-x86_64")


@pytest.mark.parametrize("line, key, kind, bug, reason", [
    ("SEM-6  xfail  | upstream: Mesa, not filed | the loop ends", "SEM-6", "xfail", "upstream: Mesa, not filed",
     "the loop ends"),
    ("test_oom.py::  skip  | ours: no bound | a | in the reason", "test_oom.py::", "skip", "ours: no bound",
     "a | in the reason"),
    ("MEM-1 flaky | https://example.org/1 | races", "MEM-1", "flaky", "https://example.org/1", "races"),
    ("MEM-1  xfail  | | new, needs a reason", "MEM-1", "xfail", "", "new, needs a reason"),
    ("MEM-1  xfail  the first format: no bug", "MEM-1", "xfail", "", "the first format: no bug"),
])
def test_an_entry_is_read(line, key, kind, bug, reason):
    e = expectations.parse_line(line)
    assert (e.key, e.kind, e.bug, e.reason) == (key, kind, bug, reason)
    assert expectations.parse_line(e.format()) == e  # what update writes reads back the same


@pytest.mark.parametrize("line, says", [
    ("MEM-1  maybe  | ours: x | y", "expected `ID  xfail|skip|flaky"),
    ("MEM-1  xfail", "expected `ID"),
    ("MEM-1  xfail  | ours: x |", "expected `ID"),
    ("MEM-1  xfail  | ours: x  no second bar", "needs a second `|`"),
    ("MEM-1  xfail  | see the wiki | y", "is not a URL, `upstream: ...` or `ours: ...`"),
    ("MEM-1  xfail  dvice~=H200  | ours: x | y", "not a tag"),
    ("MEM-1  xfail  driver>=new  | ours: x | y", "Invalid version"),
    ("MEM-1  xfail  device~=(  | ours: x | y", "option 'device~=('"),
    ("MEM-1  xfail  driver:mesa~=22  | ours: x | y", "compares versions"),
    ("MEM-1  xfail  expires=soon  | ours: x | y", "option 'expires=soon'"),
    ("MEM-1  xfail  clean-runs=0/5  | ours: x | y", "for flaky entries"),
    ("MEM-1  flaky  clean-runs=5/5  | ours: x | y", "0 <= K < N"),
])
def test_a_bad_line_is_refused_naming_it(line, says):
    with pytest.raises(ExpectationsError, match="exp.txt:3: ") as err:
        expectations.parse(f"# header\n\n{line}\n", "exp.txt")
    assert says in str(err.value)


@pytest.mark.parametrize("tag, facts, holds", [
    ("os=linux", LAVAPIPE, True),
    ("os=windows", LAVAPIPE, False),
    ("os!=windows", LAVAPIPE, True),
    ("device~=H200", H200, True),
    ("device~=h200", H200, True),
    ("device~=H200", LAVAPIPE, False),
    ("device=nvidia", H200, False),  # = compares the whole name ("NVIDIA H200"); ~= searches in it
    ("vendor=nvidia", H200, True),
    ("driver>=22.3", LAVAPIPE, True),  # the first version in the string
    ("driver>=24.2", LAVAPIPE, False),
    ("driver<24.2", LAVAPIPE, True),
    ("driver>=22.3", LLVMPIPE_GL, False),  # there the first version is OpenGL's, 4.5 ...
    ("driver:mesa>=22.3", LLVMPIPE_GL, True),  # ... so name the one meant
    ("driver:mesa=22.3.6", LLVMPIPE_GL, True),
    ("driver:llvm<15", LAVAPIPE, False),
    ("driver:nvidia>=580", H200, True),
    ("driver:nvidia>580.159.04", H200, False),
    ("driver:nvidia>=580", LAVAPIPE, False),  # no such version: the tag does not hold
    ("driver>=1", expectations.facts("not reported by wgpu"), False),
])
def test_a_tag_holds_where_the_run_says(tag, facts, holds):
    entry = expectations.parse_line(f"SEM-6  xfail  {tag}  | ours: x | y")
    assert entry.tags[0].holds(facts) is holds
    assert entry.applies(facts, TODAY) is holds


def test_an_entry_applies_only_where_every_tag_holds_and_until_it_expires():
    entry = expectations.parse_line("SEM-6  xfail  os=linux  device~=llvmpipe  expires=2026-12-02  | ours: x | y")
    assert entry.tags == (Tag("os", "=", "linux"), Tag("device", "~=", "llvmpipe"))
    assert entry.applies(LAVAPIPE, TODAY) and not entry.applies(H200, TODAY)
    assert not entry.applies(LAVAPIPE, date(2026, 12, 3))
    assert entry.needs_device and not expectations.parse_line("X-1 xfail os=linux | ours: x | y").needs_device


def test_entries_without_a_bug_and_expired_ones_are_warned():
    entries = expectations.parse("A-1 xfail | ours: x | y\nA-2 xfail no bug\nA-3 xfail expires=2026-01-01 | ours: x | y\n",
                                 "e.txt")
    assert expectations.warnings_for(entries, "e.txt", TODAY) == [
        "e.txt:2: A-2 has no bug reference (a URL, `upstream: ...` or `ours: ...`)",
        "e.txt:3: A-3 expired on 2026-01-01: it no longer applies"]


def run_doc(outcomes: dict[str, str], device: str = "llvmpipe (LLVM 15.0.6, 256 bits)", **extra) -> dict:
    """A results document of a run on lavapipe whose tests (``id -> outcome``) each check the clause of their
    name's first part."""
    tests = [{"id": tid, "clauses": [tid.split("::")[0]], "outcome": o, "duration": 0.0,
              "message": "boom\nmore" if o in ("fail", "flaky") else "", **extra.get(tid, {})}
             for tid, o in outcomes.items()]
    return {"target": {"name": "vulkan/lavapipe", "driver_version": "Mesa 22.3.6", "device": device,
                       "vendor": "Mesa", "os": "Linux-6.1-x86_64"},
            "finished": "2026-12-02T01:00:00Z", "tests": tests}


FILE = """\
# a comment stays
A-1  xfail  | upstream: fixed since | passes now
B-1  xfail  | upstream: still broken | still fails
C-1  xfail  device~=H200  | ours: other device | not this run's device, so left alone
D-1  skip  | ours: slow | skipped: nothing to learn
E-1  flaky  clean-runs=3/5  | https://example.org/e | counted
F-1  flaky  clean-runs=4/5  | https://example.org/f | retired at 5
G-1  flaky  clean-runs=2/5  | https://example.org/g | flaky again: back to 0
H-1  xfail  | ours: not run | its test did not run
"""


def test_update_adds_failures_and_flakes_removes_passes_and_counts_clean_runs():
    doc = run_doc({"A-1::t": "xpass", "B-1::t": "xfail", "C-1::t": "pass", "D-1::t": "skip", "E-1::t": "pass",
                   "F-1::t": "pass", "G-1::t": "flaky", "H-1::t": "not-run", "N-1::t": "fail", "N-2::t": "flaky",
                   "N-3::t": "pass"}, **{"N-2::t": {"tries": 2, "passes": 1}})
    text, change = expectations.update(FILE, doc, "e.txt", TODAY)
    assert text.splitlines() == [
        "# a comment stays",
        "B-1  xfail  | upstream: still broken | still fails",
        "C-1  xfail  device~=H200  | ours: other device | not this run's device, so left alone",
        "D-1  skip  | ours: slow | skipped: nothing to learn",
        "E-1  flaky  clean-runs=4/5  | https://example.org/e | counted",
        "G-1  flaky  clean-runs=0/5  | https://example.org/g | flaky again: back to 0",
        "H-1  xfail  | ours: not run | its test did not run",
        "N-1::t  xfail  | | new, needs a reason: fail on vulkan/lavapipe, 2026-12-02T01:00:00Z: boom",
        "N-2::t  flaky  | | new, needs a reason: flaky (1/2 tries passed) on vulkan/lavapipe, 2026-12-02T01:00:00Z: boom",
    ]
    assert change.added == ["N-1::t (xfail)", "N-2::t (flaky)"]
    assert change.removed == ["A-1 (xfail): its 1 test(s) passed", "F-1 (flaky): 5 clean runs"]
    assert change.counted == ["E-1: 4/5 clean runs", "G-1: 0/5 clean runs"]
    _, second = expectations.update(text, doc, "e.txt", TODAY)  # the same run again: nothing new to add
    assert (second.added, second.removed, second.counted) == ([], ["E-1 (flaky): 5 clean runs"], ["G-1: 0/5 clean runs"])


def write_results(path: Path, outcomes: dict[str, str]) -> None:
    """A valid results file of a vulkan/lavapipe run with these tests (``run_doc``'s)."""
    results.dump(results.document(targets.get("vulkan/lavapipe"), {"suite": "0"}, "2026-12-02T01:00:00Z", "ok",
                                  tests=run_doc(outcomes)["tests"]), path)


def test_update_round_trips_a_run_through_the_command(tmp_path, capsys):
    """``ironaccel expectations update --from RUN``: a run folder's results file, its target's file found
    through --expectations; the new entries read back, and a later passing run removes them."""
    folder = tmp_path / "run"
    folder.mkdir()
    exp = tmp_path / "vulkan-lavapipe.txt"
    write_results(folder / "vulkan-lavapipe.json", {"SEM-6::a": "fail", "SEM-6::b": "fail", "MEM-1::a": "pass"})
    (folder / "RUN.json").write_text("{}")  # not a results file: passed over
    assert cli.main(["expectations", "update", "--from", str(folder), "--expectations", str(exp)]) == 0
    entries = expectations.load(exp)
    assert [(e.key, e.kind, e.bug) for e in entries] == [("SEM-6::a", "xfail", ""), ("SEM-6::b", "xfail", "")]
    assert exp.read_text().startswith(expectations.HEADER)
    assert "added SEM-6::a (xfail)" in capsys.readouterr().out
    write_results(folder / "vulkan-lavapipe.json", {"SEM-6::a": "xpass", "SEM-6::b": "xfail"})
    assert cli.main(["expectations", "update", "--from", str(folder / "vulkan-lavapipe.json"),
                     "--expectations", str(exp)]) == 0
    assert [e.key for e in expectations.load(exp)] == ["SEM-6::b"]


@pytest.mark.parametrize("what, says", [("missing", "no results file"), ("empty", "no results file")])
def test_update_from_nothing_is_a_usage_error(tmp_path, capsys, what, says):
    path = tmp_path / "nothing.json" if what == "missing" else tmp_path
    assert cli.main(["expectations", "update", "--from", str(path)]) == 2
    assert says in capsys.readouterr().err


def test_expected_to_fail_required_clauses():
    doc = run_doc({"SEM-6::a": "xfail", "SEM-6::b": "xfail", "MEM-7::a": "xfail", "MEM-1::a": "pass"})
    assert expectations.expected_to_fail_required(doc, ["MEM-1", "SEM-6", "KERNEL-1"]) == ["SEM-6"]


SUITE_FILES = sorted((spec.conformance_dir() / "expectations").glob("*.txt"))
PLUGIN_FILES = sorted(Path(__file__).resolve().parents[1].glob("plugins/*/*/expectations/*.txt"))


@pytest.mark.parametrize("path", SUITE_FILES + PLUGIN_FILES, ids=lambda p: p.name)
def test_every_committed_entry_has_a_bug_reference_and_the_format_header(path):
    entries = expectations.load(path)
    assert entries and all(e.bug for e in entries), [e.key for e in entries if not e.bug]
    assert path.read_text().startswith(expectations.HEADER)


def test_the_driver_bugs_entries_cite_their_repro_folders():
    """The two driver bugs this suite found: every entry for them points at its folder under docs/driver-bugs."""
    cited = {e.bug for p in SUITE_FILES for e in expectations.load(p) if e.bug.startswith("upstream:")}
    docs = Path(__file__).resolve().parents[1] / "docs" / "driver-bugs"
    for folder in ("mesa-llvmpipe-loop-65535", "wgpu-nvidia-i32-remainder"):
        assert (docs / folder / "BUG.md").exists()
        assert any(f"docs/driver-bugs/{folder}" in bug for bug in cited), folder


def conformance_run(target: str, only: str, exp: Path, out: Path) -> dict:
    """One conformance run of the tests ``only`` selects on ``target`` with the expectations file ``exp``."""
    import subprocess
    import sys

    from ironaccel.cts import certify
    from ironaccel.cts.selection import Selection

    args = certify.pytest_args(target, out, certify.TEST_TIMEOUT_S, spec.conformance_dir(), Selection(only=(only,)))
    subprocess.run([sys.executable, "-m", "pytest", *args, "--expectations", str(exp)],
                   env=certify.child_environment(target), cwd=out.parent, capture_output=True, timeout=600)
    return results.load(out)


def test_update_round_trips_real_runs(tmp_path):
    """SEM-6 fails on lavapipe and passes on SwiftShader: update adds its entries from the first run, they
    make the tests xfail on the next, and a run where the tests pass (xpass) removes them."""
    if targets.get("vulkan/lavapipe").missing() or targets.get("vulkan/swiftshader").missing():
        pytest.skip("needs vulkan/lavapipe and vulkan/swiftshader")
    exp = tmp_path / "exp.txt"
    exp.write_text("")
    first = tmp_path / "first.json"
    assert {t["outcome"] for t in conformance_run("vulkan/lavapipe", "SEM-6", exp, first)["tests"]} == {"fail"}
    assert cli.main(["expectations", "update", "--from", str(first), "--expectations", str(exp)]) == 0
    assert {e.key for e in expectations.load(exp)} == {
        "test_semantics.py::test_long_loop_runs_every_iteration[65536]",
        "test_semantics.py::test_long_loop_runs_every_iteration[100003]"}
    again = conformance_run("vulkan/lavapipe", "SEM-6", exp, tmp_path / "again.json")
    assert {t["outcome"] for t in again["tests"]} == {"xfail"}
    passing = tmp_path / "passing.json"
    assert {t["outcome"] for t in conformance_run("vulkan/swiftshader", "SEM-6", exp, passing)["tests"]} == {"xpass"}
    assert cli.main(["expectations", "update", "--from", str(passing), "--expectations", str(exp)]) == 0
    assert expectations.load(exp) == [] and exp.read_text() == expectations.HEADER
