"""STATUS.md generation: golden output, determinism, certification levels, and the committed file.

The golden inputs live in tests/golden/status/ (a tiny SPEC.md and results/*.json covering every outcome
kind, stale files, a crashed run, a superseded run and a missing target). After an intended change to
the generator, regenerate the golden file with ``UPDATE_GOLDEN=1 pytest tests/test_status.py`` and
review its diff.
"""

from __future__ import annotations

import copy
import os
import random
from pathlib import Path

import pytest

from ironaccel.cts import judge, results, spec, status
from ironaccel.api import BackendInfo
from ironaccel.backends import BUILTIN
from ironaccel.cts.targets import Target, standard
from ironaccel.cts.testing.documents import SEEN, passing_doc
from results_docs import current_of

GOLDEN = Path(__file__).parent / "golden" / "status"
REPO = Path(__file__).resolve().parent.parent
CURRENT = "c0ffee00c0ffee00"  # the suite hash the golden results count as current
TARGETS = {name: t for name, t in standard().items() if t.backend in BUILTIN}  # not plugins' nor this machine's

BACKENDS = [
    BackendInfo("cuda", False, "libcuda.so.1 cannot be loaded"),
    BackendInfo("vulkan", True),
    BackendInfo("webgpu", True),
    BackendInfo("opencl", False, "ironaccel_opencl:Backend does not load: ModuleNotFoundError"),
    BackendInfo("rocm", False, "probe only: detects the AMD ROCm HIP runtime; no compute path", compute=False),
    BackendInfo("metal", False, "exists only on darwin | needs macOS", compute=False),
]


@pytest.fixture(scope="module")
def clauses():
    return spec.load_clauses(GOLDEN / "SPEC.md")


@pytest.fixture(scope="module")
def docs():
    return status.load_results(GOLDEN / "results")


def render(docs, clauses, backends=BACKENDS, current=CURRENT, targets=TARGETS):
    """STATUS.md of the golden inputs, whose files record only the suite hash (``current`` counts as current)."""
    return status.render(docs, clauses, backends, spec.Current(current, {}), targets, judge.definitions())


def levels(text: str) -> dict[str, str]:
    """Backend -> level, read back from the Certification table."""
    section = text.split("## Certification")[1].split("\n## ")[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| **")]
    return {row[0].strip("| *"): row[1] for row in rows}


def test_golden(docs, clauses):
    text = render(docs, clauses)
    golden = GOLDEN / "STATUS.md"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8"), "regenerate with UPDATE_GOLDEN=1 and review the diff"


def test_golden_inputs_cover_every_case(docs):
    outcomes = {t["outcome"] for d in docs for t in d["tests"]}
    assert outcomes == set(results.OUTCOMES)
    assert {d["run"]["status"] for d in docs} >= {"ok", "crashed"}
    assert any(d["suite"]["hash"] != CURRENT for d in docs)
    assert set(TARGETS) - {d["target"]["name"] for d in docs}, "a target with no results"


def test_levels(docs, clauses):
    assert levels(render(docs, clauses)) == {
        "cuda": "simulated",  # cuda/nvidia passes everything but is stale
        "vulkan": "partial",  # fails and a not-supported required clause on lavapipe; swiftshader stale
        "webgpu": "production",  # nvidia + lavapipe certify; the crashed swiftshader run does not matter
        "opencl": "unavailable",
        "rocm": "probe",
        "metal": "probe",
    }


@pytest.mark.parametrize("seed", range(5))
def test_input_order_does_not_matter(docs, clauses, seed):
    shuffled = copy.deepcopy(docs)
    rng = random.Random(seed)
    rng.shuffle(shuffled)
    for d in shuffled:
        rng.shuffle(d["tests"])
    backends = list(BACKENDS)
    rng.shuffle(backends)
    assert render(shuffled, clauses, backends) == render(docs, clauses)


def test_a_duplicate_results_file_is_listed_as_superseded(docs, clauses):
    once = render(docs, clauses)
    twice = render(docs + [copy.deepcopy(docs[0])], clauses)
    assert levels(twice) == levels(once)
    assert twice.count("| superseded; ") == once.count("| superseded; ") + 1


NEWER = {"started": "2026-12-01T04:00:00Z", "finished": "2026-12-01T04:30:00Z"}


def _stale(doc):  # however recent
    doc.update(NEWER)
    doc["suite"]["parts"]["suite"] = doc["suite"]["hash"] = "0123456789abcdef"


def _crashed(doc):  # however recent
    doc.update(NEWER, run={"status": "crashed", "message": "the test process died"})


def _finished_earlier(doc):  # though started later
    doc.update(started="2026-11-30T04:10:00Z", finished="2026-11-30T04:20:00Z")


def _started_earlier(doc):  # finished at the same time, and its file sorts after the other (the last tie-break)
    doc.update(started="2026-11-30T03:00:00Z", run={"status": "ok", "message": "with 1 retry"})


@pytest.mark.parametrize("worse", [_stale, _crashed, _finished_earlier, _started_earlier])
def test_the_run_that_counts_is_current_then_finished_then_latest(worse):
    """Of two files of one target, the judge counts the current one over a stale one, then a finished one over
    one that did not finish, then the one that finished later, then the one that started later; in either
    order. Each case makes the other file win every criterion after the one it loses."""
    counts = passing_doc("cuda/fake")
    counts.update(started="2026-11-30T04:00:00Z", finished="2026-11-30T04:30:00Z")
    other = copy.deepcopy(counts)
    worse(other)
    current = spec.current(["cuda/fake"])
    for order in ([counts, other], [other, counts]):
        (chosen,), (superseded,) = judge.runs(order, current, TARGETS)
        assert chosen.doc is counts and superseded.doc is other and superseded.superseded


def test_stale_results_are_marked_and_never_count(docs, clauses):
    text = render(docs, clauses)
    assert "0123456789abcdef **STALE**" in text
    assert "cuda/nvidia (STALE)" in text
    # With the old hash as current, the old files count and the current ones become stale.
    old = levels(render(docs, clauses, current="0123456789abcdef"))
    assert old["vulkan"] == "simulated"  # vulkan/swiftshader passes everything; lavapipe is now stale
    assert old["cuda"] == "partial"  # cuda/nvidia alone: certified on hardware only


def test_every_non_pass_is_listed_on_one_line(docs, clauses):
    text = render(docs, clauses)
    section = text.split("## Non-passes")[1].split("\n## ")[0]
    listed = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Target")]
    non_passes = [t for d in docs for t in d["tests"] if t["outcome"] != "pass"]
    crashed = [d for d in docs if d["run"]["status"] != "ok"]
    assert len(listed) == len(non_passes) + len(crashed)
    fail = next(line for line in listed if "test_roundtrip[4096]" in line and "| fail |" in line)
    assert "index 3 \\| got 0" in fail  # '|' escaped, newline flattened
    assert fail.endswith("… |") and len(fail) < 300  # long message cut


def test_required_clause_with_only_not_supported_is_reported_as_such(docs, clauses):
    text = render(docs, clauses)
    assert "- **vulkan/lavapipe**: 1/4 pass; fail: MEM-1; not-supported: KERNEL-1; xfail: MEM-2" in text


def test_every_registered_backend_has_a_row_with_its_reason(docs, clauses):
    text = render(docs, clauses)
    assert "| **metal** | probe | exists only on darwin \\| needs macOS |" in text
    assert "| **opencl** | unavailable | no current results; ironaccel_opencl" in text


def _doc(target: str, simulated: bool, outcome: str = "pass", suite: str = CURRENT) -> dict:
    tests = [{"id": f"t::{cid}", "clauses": [cid], "outcome": outcome, "duration": 0.0, "message": ""}
             for cid in ("DEV-1", "MEM-1", "MEM-2", "KERNEL-1")]
    backend, driver = target.split("/")
    doc = {"schema": 1, "suite": {"version": "0", "hash": suite},
           "target": {"name": target, "backend": backend, "driver": driver, "simulated": simulated},
           "started": "", "finished": "", "run": {"status": "ok", "message": ""}, "tests": tests,
           "summary": results.summarize(tests)}
    if target in SEEN:  # the device and driver evidence a run of it records
        doc["target"].update({k: v for k, v in passing_doc(target)["target"].items()
                              if k in ("device", "vendor", "evidence")})
    return doc


def test_passes_on_the_fake_never_count_as_hardware(clauses):
    lying_fake = _doc("cuda/fake", simulated=False)  # the registry knows cuda/fake is simulated
    text = render([lying_fake, _doc("cuda/nvidia", False)], clauses, [BackendInfo("cuda", True)])
    assert levels(text)["cuda"] == "production"
    assert levels(render([lying_fake], clauses, [BackendInfo("cuda", True)]))["cuda"] == "simulated"


def test_hardware_only_certification_is_partial(clauses):
    text = render([_doc("webgpu/nvidia", False)], clauses, [BackendInfo("webgpu", True)])
    assert levels(text)["webgpu"] == "partial"
    assert "certified on hardware only" in text


def test_a_clause_needs_a_test_to_pass(clauses):
    doc = _doc("webgpu/lavapipe", True)
    doc["tests"] = [t for t in doc["tests"] if t["clauses"] != ["MEM-2"]]
    doc["summary"] = results.summarize(doc["tests"])
    text = render([doc], clauses, [BackendInfo("webgpu", True)])
    assert levels(text)["webgpu"] == "partial"
    assert "untested: MEM-2" in text


def test_results_of_an_unregistered_backend_still_get_a_row(clauses):
    target = Target("plugin", "sim", True)
    text = render([_doc("plugin/sim", True)], clauses, [], targets={target.name: target})
    assert levels(text) == {"plugin": "simulated"}


def test_command_writes_then_checks(tmp_path, capsys):
    out = tmp_path / "STATUS.md"
    empty = tmp_path / "results"
    empty.mkdir()
    assert status.command(empty, out, check=True) == 1
    assert status.command(empty, out) == 0
    assert status.check(empty, out)
    assert status.command(empty, out, check=True) == 0
    out.write_text(out.read_text() + "edited by hand\n")
    assert not status.check(empty, out)
    assert status.command(empty, out, check=True) == 1
    err = capsys.readouterr().err
    assert "is stale" in err
    # the hint is a diff from the file as it is to what would be generated: the hand edit is a line to remove
    assert f"--- {out}\n+++ generated\n" in err and "\n-edited by hand" in err


def test_a_bad_results_file_is_named(tmp_path):
    (tmp_path / "webgpu-lavapipe.json").write_text('{"schema": 1}')
    with pytest.raises(ValueError, match=r"webgpu-lavapipe\.json: missing 'suite'"):
        status.load_results(tmp_path)


def test_committed_status_is_current():
    results_dir = REPO / "results"
    if not any(results_dir.glob("*.json")):
        pytest.skip("results/ has no results files yet: nothing to generate STATUS.md from")
    committed = REPO / "STATUS.md"
    assert status.check(results_dir, committed), (
        "STATUS.md differs from what results/ generates: run `ironaccel status` and commit it"
    )


def test_an_unregistered_target_never_counts_as_hardware(clauses):
    relabelled = _doc("cuda/h100", simulated=False)  # a fake's results claiming a hardware target
    text = render([relabelled, _doc("cuda/fake", True)], clauses, [BackendInfo("cuda", True)])
    assert levels(text)["cuda"] == "simulated"
    assert "| cuda/h100 | simulated (its file claims hardware, the target registry does not know it) |" in text
    assert levels(render([relabelled], clauses, [BackendInfo("cuda", True)]))["cuda"] == "simulated"


def test_names_from_results_files_are_escaped(clauses):
    doc = _doc("webgpu/lavapipe", True)
    doc["target"]["device"] = "llvm | pipe\n## injected <b>"
    doc["tests"][0]["clauses"] = ["NOPE-1"]
    doc["tests"][0]["message"] = "line one\n| forged | row |"
    doc["tests"][0]["outcome"] = "fail"
    doc["summary"] = results.summarize(doc["tests"])
    text = render([doc], clauses, [BackendInfo("webgpu", True)])
    assert "\n## injected" not in text and "| forged |" not in text and "<b>" not in text
    assert "llvm \\| pipe ## injected &lt;b>" in text


def test_flaky_tests_are_listed_with_their_history(clauses):
    def with_flaky(target, flaky, finished):
        doc = _doc(target, True)
        doc["tests"][1]["outcome"] = "flaky" if flaky else "pass"
        doc["summary"] = results.summarize(doc["tests"])
        doc["finished"] = finished
        return doc

    docs = [with_flaky("webgpu/lavapipe", True, "2026-11-30"), with_flaky("webgpu/lavapipe", True, "2026-11-01"),
            with_flaky("vulkan/lavapipe", False, "2026-11-30")]
    text = render(docs, clauses, [BackendInfo("webgpu", True), BackendInfo("vulkan", True)])
    section = text.split("## Flaky tests")[1].split("\n## ")[0]
    assert ("| t::MEM-1 | webgpu/lavapipe | flaky in 2 of 3 results files "
            "(webgpu/lavapipe, webgpu/lavapipe (superseded)) |") in section
    assert "None." in render(docs[2:], clauses, [BackendInfo("vulkan", True)]).split("## Flaky tests")[1].split("\n## ")[0]
    docs[0]["tests"][1].update(tries=2, passes=1)  # re-run by certify --retries: the rate over the tries shows
    docs[1]["tests"][1].update(tries=3, passes=1)
    section = render(docs, clauses, [BackendInfo("webgpu", True), BackendInfo("vulkan", True)]).split("## Flaky tests")[1]
    assert "(webgpu/lavapipe, webgpu/lavapipe (superseded)); re-runs: 2 of 5 tries passed |" in section


def test_editing_one_backend_leaves_the_other_backends_results_current(tmp_path, clauses):
    import shutil

    tree = tmp_path / "checkout"
    for part in ("ironaccel", "conformance", "fakes/cuda"):
        shutil.copytree(REPO / part, tree / part, ignore=shutil.ignore_patterns("__pycache__", "*.so", "build"))
    before = current_of(tree)
    names = ("cuda/fake", "cuda/nvidia", "vulkan/lavapipe", "webgpu/lavapipe", "webgpu/nvidia")
    docs = []
    for name in names:
        doc = _doc(name, TARGETS[name].simulated)
        doc["suite"] = {"version": "0", "hash": before.suite, "parts": before.parts(name)}
        docs.append(doc)
    assert docs[0]["suite"]["parts"].keys() >= {"suite", "backend", "driver"}  # the fake's sources count for cuda/fake

    webgpu = next((tree / "ironaccel" / "backends").glob("webgpu*"))
    edited = webgpu / "__init__.py" if webgpu.is_dir() else webgpu
    edited.write_text(edited.read_text() + "\n# an edit\n")
    after = current_of(tree)
    assert after.suite == before.suite
    runs, _ = judge.runs(docs, after, TARGETS)
    stale = {r.name: r.stale for r in runs}
    assert stale == {"cuda/fake": (), "cuda/nvidia": (), "vulkan/lavapipe": (),
                     "webgpu/lavapipe": ("the webgpu backend changed",), "webgpu/nvidia": ("the webgpu backend changed",)}
    text = status.render(docs, clauses, [BackendInfo(b, True) for b in ("cuda", "vulkan", "webgpu")], after, TARGETS,
                         judge.definitions())
    assert "**STALE**: the webgpu backend changed" in text
    assert levels(text)["cuda"] == "production" and levels(text)["webgpu"] == "unavailable"

    (tree / "fakes" / "cuda" / "fake.h").write_text((tree / "fakes" / "cuda" / "fake.h").read_text() + "\n")
    (tree / "conformance" / "SPEC.md").write_text((tree / "conformance" / "SPEC.md").read_text() + "\n")
    runs, _ = judge.runs(docs, current_of(tree), TARGETS)
    stale = {r.name: r.stale for r in runs}
    assert stale["cuda/fake"] == ("the suite changed", "the fake driver's sources changed")
    assert stale["cuda/nvidia"] == ("the suite changed",)


def test_the_registry_says_no_compute_path_only_of_backends_without_one():
    """STATUS.md's reason for a backend with no results comes from registry_infos: a compute backend has none,
    a probe says it only probes, and 'no compute path' is never said of a backend that has one."""
    from ironaccel.backends.probes import NO_COMPUTE

    infos = {info.name: info for info in status.registry_infos()}
    for name in ("cuda", "vulkan", "webgpu", "opengl"):
        assert infos[name].compute and infos[name].reason == "", (name, infos[name].reason)
    probes = [info for info in infos.values() if not info.compute]
    assert probes and all(info.reason.startswith("probe only") and NO_COMPUTE in info.reason for info in probes)
