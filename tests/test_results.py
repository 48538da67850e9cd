"""The results-file schema: a good document passes; each kind of bad one is a ValueError naming the field."""

from __future__ import annotations

import copy
import json
import re

import pytest

from ironaccel.cts import results


def good() -> dict:
    tests = [
        {"id": "test_mem.py::test_alloc[1]", "clauses": ["MEM-1"], "outcome": "pass", "duration": 0.01, "message": ""},
        {"id": "test_event.py::test_timing", "clauses": ["EVENT-3"], "outcome": "not-supported", "duration": 0.0,
         "message": "events.timing"},
    ]
    return {
        "schema": results.SCHEMA_VERSION,
        "suite": {"version": "0.1.0", "hash": "0123456789abcdef"},
        "target": {"name": "webgpu/lavapipe", "backend": "webgpu", "driver": "lavapipe", "driver_version": "Mesa",
                   "device": "llvmpipe", "vendor": "Mesa", "simulated": True, "os": "Linux", "python": "3.11.7",
                   "packages": {"wgpu": "0.32.0"}},
        "started": "2026-11-30T04:30:00Z",
        "finished": "2026-11-30T04:31:10Z",
        "run": {"status": "ok", "message": ""},
        "tests": tests,
        "summary": results.summarize(tests),
    }


def test_a_good_document_passes_and_round_trips(tmp_path):
    doc = good()
    assert results.validate(copy.deepcopy(doc)) == doc
    path = tmp_path / results.file_name("webgpu/lavapipe")
    results.dump(doc, path)
    assert path.name == "webgpu-lavapipe.json"
    assert results.load(path) == doc


def test_a_run_that_never_reached_a_device_is_valid():
    doc = good()
    doc["target"].update(device="", driver_version="", vendor="")
    doc["run"] = {"status": "crashed", "message": "no adapter"}
    doc["tests"], doc["summary"] = [], results.summarize([])
    results.validate(doc)


def _parent(doc, path):
    for key in path[:-1]:
        doc = doc[key]
    return doc


def delete(*path):
    """A change to a good document: remove the item at ``path``."""

    def change(doc):
        del _parent(doc, path)[path[-1]]
        return doc

    return change


def set_to(value, *path):
    """A change to a good document: replace the item at ``path``."""

    def change(doc):
        _parent(doc, path)[path[-1]] = value
        return doc

    return change


BAD = {
    "not an object": (lambda doc: [], "not a JSON object"),
    "schema": (set_to(99, "schema"), "schema must be 1, got 99"),
    "schema missing": (delete("schema"), "schema must be 1, got None"),
    "suite missing": (delete("suite"), "missing 'suite'"),
    "target missing": (delete("target"), "missing 'target'"),
    "run missing": (delete("run"), "missing 'run'"),
    "tests missing": (delete("tests"), "missing 'tests'"),
    "summary missing": (delete("summary"), "missing 'summary'"),
    "started missing": (delete("started"), "missing 'started'"),
    "finished missing": (delete("finished"), "missing 'finished'"),
    "suite not an object": (set_to("abc", "suite"), "suite must be a JSON object"),
    "target not an object": (set_to("webgpu/lavapipe", "target"), "target must be a JSON object"),
    "run not an object": (set_to("ok", "run"), "run must be a JSON object"),
    "tests not an array": (set_to({}, "tests"), "tests must be a JSON array"),
    "summary not an object": (set_to([], "summary"), "summary must be a JSON object"),
    "finished not a string": (set_to(1764477070, "finished"), "finished must be a JSON string"),
    "suite.hash": (delete("suite", "hash"), "suite.hash must be a string"),
    "target.name": (delete("target", "name"), "target.name missing"),
    "target.backend": (delete("target", "backend"), "target.backend missing"),
    "target.driver": (delete("target", "driver"), "target.driver missing"),
    "target.simulated": (delete("target", "simulated"), "target.simulated missing"),
    "target.simulated type": (set_to("yes", "target", "simulated"), "target.simulated must be true or false"),
    "target.name type": (set_to(None, "target", "name"), "target.name must be a string"),
    "run.status": (set_to("exploded", "run", "status"), "run.status must be one of"),
    "test not an object": (set_to("test_mem.py::x", "tests", 0), "tests[0] must be a JSON object"),
    "test id": (delete("tests", 1, "id"), "tests[1].id must be a string"),
    "test outcome": (set_to("passed", "tests", 0, "outcome"), "tests[0].outcome 'passed' is not one of"),
    "test clauses": (set_to("MEM-1", "tests", 0, "clauses"), "tests[0].clauses must be a list"),
    "test clause ids": (set_to([1], "tests", 0, "clauses"), "tests[0].clauses must be a list of clause id strings"),
    "summary counts": (set_to(5, "summary", "pass"), "summary does not match the tests"),
    # each field validate() checks (generated mutants of its checks survived without these rows, issue 32)
    "suite.version": (set_to(1, "suite", "version"), "suite.version must be a string"),
    "suite.parts": (set_to({"suite": "0" * 16}, "suite", "parts"), "suite.parts must map part names"),
    "suite.parts values": (set_to({"suite": None}, "suite", "parts"), "suite.parts must map part names"),
    "builds key": (set_to({"kernel": "ab"}, "builds"), "builds must map compiled and driver"),
    "builds value": (set_to({"compiled": 1}, "builds"), "builds must map compiled and driver"),
    "target.name form": (set_to("webgpu lavapipe", "target", "name"), "target.name 'webgpu lavapipe' is not backend/driver"),
    "target.name parts": (set_to("webgpu/other", "target", "name"),
                          "target.name 'webgpu/other' is not target.backend/target.driver"),
    "target.device": (set_to(0, "target", "device"), "target.device must be a string"),
    "target.evidence": (set_to({"driver": "x", "simulated": "no", "libraries": []}, "target", "evidence"),
                        "target.evidence must be"),
    "target.evidence libraries": (set_to({"driver": "x", "simulated": False, "libraries": [{"path": "p"}]},
                                         "target", "evidence"), "target.evidence must be"),
    "target.packages": (set_to({"numpy": 2}, "target", "packages"), "target.packages must map names"),
    "run.message": (set_to(["x"], "run", "message"), "run.message must be a string"),
    "test message": (set_to(None, "tests", 0, "message"), "tests[0].message must be a string"),
    "test duration": (set_to(True, "tests", 0, "duration"), "tests[0].duration must be a number"),
    "test outputs": (set_to({"out": 1}, "tests", 0, "outputs"), "tests[0].outputs must map output names"),
    "selection": (set_to({"only": "x", "skip": [], "shard": ""}, "selection"), "selection must be"),
    "selection.shard": (set_to({"only": [], "skip": [], "shard": "3/2"}, "selection"), "selection.shard: "),
}


@pytest.mark.parametrize("kind", BAD)
def test_a_bad_document_is_rejected_naming_the_field(kind):
    change, message = BAD[kind]
    doc = change(good())
    with pytest.raises(ValueError, match="^results/webgpu-lavapipe.json: " + re.escape(message)):
        results.validate(doc, "results/webgpu-lavapipe.json")


def test_load_names_the_file(tmp_path):
    path = tmp_path / "cuda-fake.json"
    doc = good()
    doc["run"]["status"] = "maybe"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=re.escape(f"{path}: run.status must be one of")):
        results.load(path)


def test_dump_refuses_to_write_a_bad_document(tmp_path):
    doc = good()
    doc["summary"]["fail"] = 1
    path = tmp_path / "x.json"
    with pytest.raises(ValueError, match="summary does not match"):
        results.dump(doc, path)
    assert not path.exists()


def test_summarize_counts_every_outcome():
    tests = [{"outcome": o} for o in results.OUTCOMES for _ in range(2)]
    assert results.summarize(tests) == dict.fromkeys(results.OUTCOMES, 2)


def test_outcomes_are_strings_that_know_failure_and_junit():
    assert json.dumps({results.Outcome.NOT_RUN: results.Outcome.PASS}) == '{"not-run": "pass"}'
    assert {o for o in results.Outcome if o.failure} == {"fail", "xpass", "not-run"}
    assert results.Outcome.FLAKY.junit == "flakyFailure" and results.Outcome.PASS.junit is None
    assert f"{results.Outcome.NOT_SUPPORTED}" == "not-supported"
    assert results.without_failures("ok", {"pass": 2, "flaky": 1})
    assert not results.without_failures("ok", {"pass": 2, "xpass": 1})
    assert not results.without_failures("crashed", {"pass": 2})
    assert not results.without_failures("ok", {})


@pytest.mark.parametrize("text", ["MEM", "mem-1", "MEM-", "MEM-1x", "-1", "", 1, None, "MEM-1\n"])
def test_clause_id_parse_rejects_what_is_not_a_clause_id(text):
    with pytest.raises(ValueError, match="is not a clause id"):
        results.ClauseId.parse(text)


def test_clause_id_parse():
    cid = results.ClauseId.parse("KERNEL-12")
    assert (cid.area, cid.number, str(cid)) == ("KERNEL", 12, "KERNEL-12")


def test_document_without_a_device_is_valid_and_says_the_targets_kind():
    from ironaccel.cts.targets import Target

    doc = results.document(Target("cuda", "fake", True), {"suite": "0123456789abcdef"}, "2026-11-30T04:30:00Z", "crashed",
                           "no device", [{"id": "b::x", "clauses": ["MEM-1"], "outcome": "not-run", "duration": 0.0,
                                          "message": ""},
                                         {"id": "a::y", "clauses": ["MEM-2"], "outcome": "pass", "duration": 0.0,
                                          "message": ""}])
    results.validate(doc)
    assert doc["target"]["simulated"] is True and doc["target"]["device"] == ""
    assert [t["id"] for t in doc["tests"]] == ["a::y", "b::x"] and doc["summary"]["not-run"] == 1
    with pytest.raises(ValueError):
        results.document(Target("cuda", "fake", True), {"suite": "h"}, "", "exploded")


def test_shards_merge_only_when_every_shard_is_there():
    """results.merge: shards 1/3 and 3/3 are no whole run (the missing 2/3 named); 1/2 and 2/2 are, every test of
    both in one document with no selection left."""
    from ironaccel.cts.testing.documents import passing_doc

    whole = passing_doc("cuda/fake")

    def shards(n: int, ks: tuple[int, ...]) -> list[dict]:
        return [dict(copy.deepcopy(whole), selection={"only": [], "skip": [], "shard": f"{k}/{n}"},
                     tests=copy.deepcopy(whole["tests"][k - 1::n])) for k in ks]

    with pytest.raises(ValueError, match=r"merge: shard\(s\) 2/3 missing"):
        results.merge(shards(3, (1, 3)), ["1.json", "3.json"])
    merged = results.merge(shards(2, (2, 1)), ["2.json", "1.json"])
    assert merged["tests"] == sorted(whole["tests"], key=lambda t: t["id"]) and "selection" not in merged
