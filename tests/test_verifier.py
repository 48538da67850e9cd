"""``ironaccel verify``, the strict verifier (issue 29, item 3): every kind of tampering a forger who can
re-hash throws at it, each with its exact exit code; and the suite release table.

Each case starts from a valid certificate of a whole cuda/fake run at the current suite (the suite's real
test list, ``ironaccel.cts.testing.documents``), edits the results file or the certificate, and writes the
certificate anew where a forger would (``certificates.write_certificate`` re-hashes the results file), or
patches its sha256 by hand where the edited file is no results document certify could judge.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from ironaccel.cts import certificates, releases, results, spec, verifier
from ironaccel.cts.cli import main
from ironaccel.cts.testing.documents import passing_doc

VALID, STALE, TAMPERED, NOT_A_CERTIFICATE = (verifier.VERIFY_VALID, verifier.VERIFY_STALE, verifier.VERIFY_TAMPERED,
                                             2)
TARGET = "cuda/fake"


@pytest.fixture(scope="module")
def whole_run() -> dict:
    return passing_doc(TARGET, whole_suite=True)


def certified(folder: Path, doc: dict) -> Path:
    """``doc`` as a results file in ``folder`` with its certificate (written as certify writes it)."""
    path = folder / results.file_name(doc["target"]["name"])
    results.dump(doc, path)
    return certificates.write_certificate(path)


def rehash(cert: Path) -> None:
    """The forger's last step when the results file is no longer one certify can judge: the certificate's
    sha256 made the edited file's."""
    doc = json.loads(cert.read_text())
    doc["results"]["sha256"] = hashlib.sha256(cert.with_name(doc["results"]["file"]).read_bytes()).hexdigest()
    cert.write_text(json.dumps(doc, indent=1, sort_keys=True))


def edit_raw(cert: Path, change) -> None:
    """Edit the results file's JSON text (``change(text) -> text``), then re-hash the certificate."""
    path = cert.with_name(json.loads(cert.read_text())["results"]["file"])
    path.write_text(change(path.read_text()))
    rehash(cert)


def edit_json(cert: Path, change) -> None:
    """Edit the results file as JSON (``change(doc)`` in place; no schema check), then re-hash."""
    def apply(text: str) -> str:
        doc = json.loads(text)
        change(doc)
        return json.dumps(doc, indent=1, sort_keys=True)
    edit_raw(cert, apply)


def edit_doc(change):
    """A forgery that stays a valid results document: edited, summary fixed, certificate written anew."""
    def forge(cert: Path) -> None:
        path = cert.with_name(json.loads(cert.read_text())["results"]["file"])
        doc = results.load(path)
        change(doc)
        doc["summary"] = results.summarize(doc["tests"])
        certified(path.parent, doc)
    return forge


def edit_cert(change):
    def forge(cert: Path) -> None:
        doc = json.loads(cert.read_text())
        change(doc)
        cert.write_text(json.dumps(doc, indent=1, sort_keys=True))
    return forge


def _set(doc, dotted: str, value) -> None:
    *path, last = dotted.split(".")
    for key in path:
        doc = doc[int(key)] if isinstance(doc, list) else doc[key]
    doc[last] = value


TAMPERING = {
    # the run is not the suite's
    "a required test missing": (edit_doc(lambda d: d["tests"].pop(0)), TAMPERED, "1 missing"),
    "a test twice": (edit_doc(lambda d: d["tests"].append(dict(d["tests"][0]))), TAMPERED, "1 twice"),
    "a test the suite does not have": (edit_doc(lambda d: d["tests"].append(dict(d["tests"][0], id="test_x.py::x"))),
                                       TAMPERED, "not tests of the suite"),
    "a test citing other clauses": (edit_doc(lambda d: d["tests"][0].update(clauses=["MEM-1"])), TAMPERED,
                                    "citing other clauses"),
    "a failure turned xfail without an expectation": (edit_doc(lambda d: d["tests"][0].update(outcome="xfail")),
                                                      TAMPERED, "outcome(s) no run gives"),
    "not-run in a run that finished": (edit_doc(lambda d: d["tests"][0].update(outcome="not-run")), TAMPERED,
                                       "outcome(s) no run gives"),
    "an --only run relabelled whole": (edit_doc(lambda d: d.update(tests=[t for t in d["tests"]
                                                                          if "EVENT-1" in t["clauses"]])),
                                       TAMPERED, "missing"),
    # a weakened run claiming production
    "a weakened run whose certificate claims simulated": (
        lambda c: (edit_doc(lambda d: d["options"].update(test_timeout=3600))(c),
                   edit_cert(lambda d: d.update(proves="simulated", weakened=[]))(c)), TAMPERED, "weakened"),
    "a weakened run's options removed": (edit_doc(lambda d: d.pop("options")), STALE, "records no run options"),
    # the results file edited and re-hashed into something certify never writes
    "a re-hashed results file whose summary disagrees": (
        lambda c: edit_json(c, lambda d: d["tests"][0].update(outcome="fail")), TAMPERED, "summary does not match"),
    "duplicate keys in the results file": (
        lambda c: edit_raw(c, lambda t: t.replace('"schema": 1', '"schema": 1, "schema": 1', 1)), TAMPERED,
        "duplicate key 'schema'"),
    "an unknown key in the results file": (lambda c: edit_json(c, lambda d: d.update(production=True)), TAMPERED,
                                           "unknown key(s) production"),
    "an unknown key in a test": (lambda c: edit_json(c, lambda d: d["tests"][0].update(waived=True)), TAMPERED,
                                 "unknown key(s) tests[].waived"),
    "a wrong type in the results file": (lambda c: edit_json(c, lambda d: _set(d, "tests.0.duration", "0.1")),
                                         TAMPERED, "tests[0].duration must be a number"),
    "a wrong type in options": (lambda c: edit_json(c, lambda d: _set(d, "options.test_timeout", True)), TAMPERED,
                                "options must be"),
    "the results file not JSON": (lambda c: edit_raw(c, lambda t: t[:-10]), TAMPERED, "not JSON"),
    "the results file missing": (lambda c: c.with_name("cuda-fake.json").unlink(), TAMPERED, "is missing"),
    "the results file a FIFO": (lambda c: (c.with_name("cuda-fake.json").unlink(),
                                           os.mkfifo(c.with_name("cuda-fake.json"))), TAMPERED, "not a regular file"),
    # the certificate itself
    "duplicate keys in the certificate": (lambda c: c.write_text(c.read_text().replace(
        '"proves": "simulated"', '"proves": "simulated", "proves": "hardware"')), TAMPERED, "duplicate key 'proves'"),
    "an unknown key in the certificate": (edit_cert(lambda d: d.update(production=True)), TAMPERED,
                                          "unknown certificate field(s) production"),
    "a wrong type in the certificate": (edit_cert(lambda d: d.update(weakened="none")), TAMPERED,
                                        "weakened of the wrong type"),
    "the schema a string": (edit_cert(lambda d: d.update(certificate="3")), TAMPERED, "must be a schema number"),
    "results.file outside its folder": (edit_cert(lambda d: d["results"].update(file="../cuda-fake.json")),
                                        TAMPERED, "not a file name beside it"),
    "the level edited": (edit_cert(lambda d: d.update(proves="hardware")), TAMPERED, "does not say what"),
    # suites this ironaccel does not accept
    "an unknown suite hash": (edit_doc(lambda d: d["suite"].update(hash="f" * 16, parts=dict(d["suite"]["parts"],
                                                                                                suite="f" * 16))),
                              STALE, "is no release listed"),
    "an earlier release": (edit_doc(lambda d: d["suite"].update(hash="c356e46450143a0b", parts=dict(
        d["suite"]["parts"], suite="c356e46450143a0b"))), STALE, "is an earlier release"),
    "another ironaccel version": (edit_doc(lambda d: d["suite"].update(version="0.0.1")), STALE, "ironaccel 0.0.1"),
    # not a certificate at all
    "a JSON array": (lambda c: c.write_text("[1, 2]"), NOT_A_CERTIFICATE, "not a certificate"),
    "a results file given as the certificate": (lambda c: c.write_text(c.with_name("cuda-fake.json").read_text()),
                                                NOT_A_CERTIFICATE, "not a certificate"),
}


def test_a_whole_run_verifies_valid(tmp_path, whole_run, capsys):
    cert = certified(tmp_path, whole_run)
    assert main(["verify", str(cert)]) == VALID
    out = capsys.readouterr().out
    assert out.startswith("valid: cuda/fake proves simulated at suite hash") and "unsigned" in out


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_every_kind_of_tampering_gets_its_exit_code(tmp_path, whole_run, capsys, case):
    forge, code, says = TAMPERING[case]
    cert = certified(tmp_path, whole_run)
    forge(cert)
    assert main(["verify", str(cert)]) == code, capsys.readouterr()
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err


@pytest.mark.parametrize("weakening, says", [
    ({"selection": {"only": ["EVENT-*"], "skip": [], "shard": ""}}, "--only EVENT-*"),
    ({"selection": {"only": [], "skip": ["test_oom.py::*"], "shard": ""}}, "--skip test_oom.py::*"),
    ({"forced": {"missing": "no GPU", "by": "ironaccel certify --force"}}, "--force (no GPU)"),
    ({"options": {"test_timeout": 600}}, "per-test limit 600 s, not 120 s"),
    ({"options": {"test_timeout": None}}, "no per-test limit"),
])
def test_a_weakened_run_verifies_as_valid_weakened_and_proves_at_most_partial(tmp_path, whole_run, capsys,
                                                                               weakening, says):
    doc = json.loads(json.dumps(whole_run))
    doc.update(weakening)
    if "selection" in weakening:
        from ironaccel.cts.selection import Selection

        sel = Selection(tuple(weakening["selection"]["only"]), tuple(weakening["selection"]["skip"]))
        doc["tests"] = [t for t in doc["tests"] if t["id"] in sel.chosen((t["id"], t["clauses"]) for t in doc["tests"])]
        doc["summary"] = results.summarize(doc["tests"])
    cert = json.loads(certified(tmp_path, doc).read_text())
    assert cert["proves"] == "partial" and says in cert["weakened"][0] and "weakened run" in cert["why"]
    assert main(["verify", str(tmp_path / "cuda-fake.cert.json")]) == VALID
    assert f"valid, weakened ({says}" in capsys.readouterr().out
    assert "**Weakened run**" in (tmp_path / "cuda-fake.cert.md").read_text()


def test_xfail_and_skip_are_allowed_where_the_expectations_file_says_so(tmp_path, capsys):
    """vulkan/lavapipe's expectations xfail SEM-6: its two long-loop tests may be xfail (or xpass), no other."""
    doc = passing_doc("vulkan/lavapipe", whole_suite=True)
    for t in doc["tests"]:
        if "SEM-6" in t["clauses"]:
            t["outcome"] = "xfail"
    doc["summary"] = results.summarize(doc["tests"])
    cert = certified(tmp_path, doc)
    assert main(["verify", str(cert)]) == VALID, capsys.readouterr()
    doc["tests"][0]["outcome"] = "skip"
    doc["summary"] = results.summarize(doc["tests"])
    assert main(["verify", str(certified(tmp_path, doc))]) == TAMPERED
    assert f"{doc['tests'][0]['id']} skip" in capsys.readouterr().err


def test_a_run_that_did_not_finish_may_lack_the_tests_it_never_reached(tmp_path, whole_run, capsys):
    """certify writes a results file with no tests for a target that crashed before collecting: not tampered."""
    doc = dict(whole_run, run={"status": "crashed", "message": "exit code -11"}, tests=[])
    doc["summary"] = results.summarize([])
    assert main(["verify", str(certified(tmp_path, doc))]) == VALID
    assert "proves partial" in capsys.readouterr().out


def test_a_withdrawn_suite_is_refused_with_its_reason(tmp_path, whole_run, monkeypatch, capsys):
    from ironaccel import __version__

    cert = certified(tmp_path, whole_run)
    withdrawn = releases.Release(__version__, spec.suite_hash(), "this tree", withdrawn="MEM-3 passed on a leak")
    monkeypatch.setattr(releases, "RELEASES", (withdrawn,))
    assert main(["verify", str(cert)]) == STALE
    assert "was withdrawn: MEM-3 passed on a leak" in capsys.readouterr().err


def test_release_standing():
    current = ("0.2.0", "a" * 16)
    table = (releases.Release("0.1.0", "b" * 16, "first"), releases.Release("0.1.1", "c" * 16, "x", withdrawn="bug"))
    assert releases.standing("0.2.0", "a" * 16, current, table)[0] == releases.CURRENT
    assert releases.standing("0.1.0", "b" * 16, current, table)[0] == releases.RELEASED
    assert releases.standing("0.1.1", "c" * 16, current, table) == (releases.WITHDRAWN, f"suite 0.1.1 {'c' * 16} "
                                                                    "was withdrawn: bug")
    assert releases.standing("0.1.0", "c" * 16, current, table)[0] == releases.UNKNOWN  # version and hash together


def test_the_suite_test_list_is_what_a_real_run_records():
    """mustpass collects what the plugin records: the committed cuda/fake results have exactly its tests (their
    suite is older, so only the ids and clauses that did not change since are compared)."""
    from ironaccel.cts import mustpass

    suite = mustpass.tests_of_suite()
    committed = results.load(Path(__file__).parents[1] / "results" / "cuda-fake.json")
    recorded = {t["id"]: tuple(t["clauses"]) for t in committed["tests"]}
    assert len(suite) >= len(recorded) - 5 and len(set(suite) & set(recorded)) >= 0.9 * len(recorded)
    assert all(suite[tid] == clauses for tid, clauses in recorded.items() if tid in suite)
