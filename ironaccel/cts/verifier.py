"""``ironaccel verify CERT``: is a certificate what ``certify`` wrote, for a run of a suite this ironaccel
knows, unchanged since, and (with ``--trust KEYS``) signed by one of those keys? A submission package (a
folder) is ``submission.verify``'s, which holds each of its certificates to this.

Exit codes (the README's table; ``ironaccel verify --help``):

====  ==========  ===================================================================================
0     valid       every check below holds. A weakened run (``judge.weakenings``: ``--only``, ``--skip``,
                  ``--shard``, ``--force``, a per-test limit not the default) verifies as "valid, weakened":
                  its certificate says so and proves at most partial, so it supports no production claim
2     not a       not a file a certificate can be read from, not JSON, not an object with "certificate"
      certificate and "results"; or a ``--trust`` file with no key (the CLI's "could not do it")
3     stale       made with a suite other than this ironaccel's (an earlier release, a withdrawn one, one it
                  does not know: ``releases``), by another ironaccel version or certificate schema, before
                  run options were recorded, or the target's backend, driver or expectations changed since
4     tampered    the certificate, its results file or its signature is not what ``certify`` writes, or
                  one does not say what the other says
5     untrusted   ``--trust`` given, and the certificate is unsigned or signed by a key not among them
====  ==========  ===================================================================================

The checks run in this order and the first that fails decides, so a forgery is never excused as stale:
the certificate names its results file (a duplicate key or a bad ``results`` field: tampered); the results
file is there with that sha256 (tampered); the signature (``signing``: one that does not verify is tampered;
with ``--trust``, none or another key's is untrusted); the results file is a results document of this schema
(tampered; another ironaccel version's: stale); the hardware claim against the run's evidence
(``judge.hardware``); the certificate's schema (stale) and form (an unknown or missing field, a field of the
wrong type: tampered); its facts against the results file (tampered); the suite and the target's parts
(stale); then, at the current suite, the run itself: every test of the suite (``mustpass``) that its recorded
selection picks, exactly once, with the suite's clauses and no other test (a run that did not finish may lack
tests it never reached); only allowed outcomes (not-run only in a run that did not finish; xfail and xpass only
where the target's expectations file has an xfail entry for the test, skip only where it has a skip entry;
flaky, pass, fail and not-supported anywhere); and last the whole certificate as this ironaccel judges it.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from .. import __version__
from . import expectations, judge, mustpass, releases, results, signing, spec, targets
from .certificates import CERTIFICATE_FIELDS, CERTIFICATE_SCHEMA, FACT_FIELDS, certificate, sha256_file
from .results import Outcome, RunStatus
from .selection import Selection

VERIFY_VALID, VERIFY_STALE, VERIFY_TAMPERED, VERIFY_UNTRUSTED = 0, 3, 4, 5


class _Verdict(Exception):
    def __init__(self, code: int, why: str):
        super().__init__(why)
        self.code, self.why = code, why


def _tampered(why: str) -> _Verdict:
    return _Verdict(VERIFY_TAMPERED, f"tampered: {why}")


def _stale(why: str, target: Any) -> _Verdict:
    return _Verdict(VERIFY_STALE, f"stale: {why}; re-run `ironaccel certify --target {target}`")


def verify(cert_path: Path, trusted: list[bytes] | None = None) -> tuple[int, str]:
    """(exit code, why) of a certificate; ``trusted``: the raw public keys of ``--trust`` (None: signatures
    are checked for tampering but any signer, or none, is accepted). ValueError (one line) for a file that is
    not a certificate."""
    try:
        return _verify(Path(cert_path), trusted)
    except _Verdict as verdict:
        return verdict.code, verdict.why


def _verify(cert_path: Path, trusted: list[bytes] | None) -> tuple[int, str]:
    cert = _read_certificate(cert_path)
    results_file = cert_path.with_name(cert["results"]["file"])
    _check_hash(results_file, cert["results"]["sha256"])
    signer = _check_signature(cert_path, results_file, trusted)
    doc = _load_results(results_file, cert.get("target"))
    _, contradiction = judge.hardware(doc, targets.TARGETS)
    if contradiction:
        raise _tampered(f"{results_file.name} claims hardware, but {contradiction}")
    if cert["certificate"] != CERTIFICATE_SCHEMA:
        raise _stale(f"certificate schema {cert['certificate']!r}, this ironaccel writes {CERTIFICATE_SCHEMA}",
                     cert.get("target"))
    _check_form(cert)
    expected = certificate(results_file)
    edited = [key for key in FACT_FIELDS if cert[key] != expected[key]]
    if edited:
        raise _tampered(f"the certificate's {', '.join(edited)} do not say what its results file "
                        f"{results_file.name} says")
    _check_suite(doc)
    _check_tests(doc)
    if expected != cert:
        raise _tampered("the certificate does not say what its results file says")
    weakened = f", weakened ({'; '.join(cert['weakened'])}): no production claim" if cert["weakened"] else ""
    signed = ("unsigned" if signer is None else f"signed by {signer.fingerprint}"
              + (", a trusted key" if trusted is not None else " (not checked against trusted keys: --trust)"))
    return VERIFY_VALID, (f"valid{weakened}: {cert['target']} proves {cert['proves']} at suite hash "
                          f"{cert['suite']['hash']}; {signed}")


def _read_certificate(path: Path) -> dict[str, Any]:
    """The certificate, if the file is one (ValueError otherwise); tampered when it says it is one but has a
    duplicate key or no proper ``results`` field."""
    try:
        cert = results.read_json(path)
    except results.DuplicateKey as exc:
        if _says_certificate(path):
            raise _tampered(str(exc)) from exc
        raise
    if not isinstance(cert, dict) or "certificate" not in cert or "results" not in cert:
        raise ValueError(f"{path}: not a certificate (a JSON object with \"certificate\" and \"results\")")
    if type(cert["certificate"]) is not int:
        raise _tampered(f"{path.name}: certificate must be a schema number, got {cert['certificate']!r}")
    named = cert["results"]
    if not (isinstance(named, dict) and set(named) == {"file", "sha256"}
            and all(isinstance(v, str) and v for v in named.values())):
        raise _tampered(f"{path.name}: results must be {{\"file\": name, \"sha256\": hex}}, got {named!r}")
    if Path(named["file"]).name != named["file"] or named["file"] in (".", ".."):
        raise _tampered(f"{path.name}: results.file {named['file']!r} is not a file name beside it")
    return cert


def _says_certificate(path: Path) -> bool:
    """Does the file read, keys repeated or not, as a JSON object with a "certificate" key?"""
    try:
        doc = json.loads(results.read_bytes(path).decode("utf-8"))
    except (ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and "certificate" in doc


def _check_hash(path: Path, sha256: str) -> None:
    """The results file the certificate vouches for is there, with that sha256 (tampered otherwise)."""
    if not os.path.lexists(path):
        raise _tampered(f"its results file {path} is missing")
    try:
        actual = sha256_file(path)
    except ValueError as exc:
        raise _tampered(f"its results file {exc}") from exc
    if actual != sha256:
        raise _tampered(f"{path} changed since the certificate was written (sha256 differs)")


def _load_results(path: Path, target: Any) -> dict[str, Any]:
    """The results file as a results document of this ironaccel's schema (tampered otherwise: it matched the
    certificate's hash), made by this ironaccel's version (stale otherwise)."""
    try:
        raw = results.read_json(path)
    except ValueError as exc:
        raise _tampered(f"its results file, as hashed, is not JSON a certify writes: {exc}") from exc
    suite = raw.get("suite") if isinstance(raw, dict) else None
    version = suite.get("version") if isinstance(suite, dict) else None
    if version != __version__:  # another version's schema is its own to judge
        raise _stale(f"made by ironaccel {version}, this is {__version__}", target)
    try:
        return results.validate(raw, path.name)
    except ValueError as exc:
        raise _tampered(f"its results file, as hashed, is not a results document: {exc}") from exc


def _check_signature(cert_path: Path, results_file: Path, trusted: list[bytes] | None) -> signing.Signer | None:
    try:
        signer = signing.check(cert_path, results_file)
    except signing.BadSignature as exc:
        raise _tampered(str(exc)) from exc
    if trusted is None:
        return signer
    if signer is None:
        raise _Verdict(VERIFY_UNTRUSTED, f"unsigned: {cert_path.name} has no signature "
                       f"({signing.signature_path(cert_path).name}), and --trust asks for one")
    if signer.public_key not in trusted:
        raise _Verdict(VERIFY_UNTRUSTED, f"untrusted: {cert_path.name} is signed by {signer.fingerprint}, "
                       "which is not a key of --trust")
    return signer


def _check_form(cert: dict[str, Any]) -> None:
    """Exactly the fields of ``CERTIFICATE_SCHEMA``, each of its JSON type (``true`` is not a number)."""
    unknown = sorted(set(cert) - set(CERTIFICATE_FIELDS))
    if unknown:
        raise _tampered(f"unknown certificate field(s) {', '.join(unknown)}")
    missing = sorted(set(CERTIFICATE_FIELDS) - set(cert))
    if missing:
        raise _tampered(f"certificate field(s) {', '.join(missing)} missing")
    wrong = [key for key, kind in CERTIFICATE_FIELDS.items() if not isinstance(cert[key], kind)
             or isinstance(cert[key], bool) != (kind is bool)]
    if wrong:
        raise _tampered(f"certificate field(s) {', '.join(wrong)} of the wrong type")


def _check_suite(doc: dict[str, Any]) -> None:
    """Stale unless the run's suite is this ironaccel's current one (``releases``) and its target's parts are
    unchanged, and it records its options (files from before them cannot show they were not weakened)."""
    name = doc["target"]["name"]
    state, words = releases.standing(doc["suite"]["version"], doc["suite"]["hash"],
                                     (__version__, spec.suite_hash()))
    if state != releases.CURRENT:
        raise _stale(words, name)
    changed = judge.stale_parts(doc, spec.current([name]))
    if changed:
        raise _stale(f"{'; '.join(changed)} since it was certified", name)
    if "options" not in doc:
        raise _stale("its results file records no run options (made before they were), so it cannot show "
                     "the run was not weakened", name)


def _listed(ids: list[str]) -> str:
    return ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")


def _check_tests(doc: dict[str, Any]) -> None:
    """The run's tests against the suite's (``mustpass``) and its outcomes against its expectations file."""
    suite = mustpass.tests_of_suite()
    sel = doc.get("selection") or {}
    wanted = Selection(tuple(sel.get("only", ())), tuple(sel.get("skip", ())), sel.get("shard", "")).chosen(
        suite.items())
    count = Counter(t["id"] for t in doc["tests"])
    finished = doc["run"]["status"] == RunStatus.OK
    problems = [
        ("twice", sorted(tid for tid, n in count.items() if n > 1)),
        ("not tests of the suite its selection picks", sorted(set(count) - wanted)),
        ("missing", sorted(wanted - set(count)) if finished else []),  # a crash leaves the rest unreached
        ("citing other clauses than the suite's", sorted({t["id"] for t in doc["tests"] if t["id"] in suite
                                                          and tuple(t["clauses"]) != suite[t["id"]]})),
    ]
    found = [f"{len(ids)} {label} ({_listed(ids)})" for label, ids in problems if ids]
    if found:
        raise _tampered(f"the results file does not hold the suite's tests once each: {'; '.join(found)}")
    entries = _expectations(doc)
    disallowed = [f"{t['id']} {t['outcome']}" for t in doc["tests"] if not _allowed(t, finished, entries)]
    if disallowed:
        raise _tampered(f"outcome(s) no run gives: {_listed(disallowed)} (not-run only in a run that did not "
                        "finish; xfail, xpass and skip only where the target's expectations file says so)")


def _allowed(test: dict[str, Any], finished: bool, entries: list[Any]) -> bool:
    outcome = Outcome(test["outcome"])
    if outcome == Outcome.NOT_RUN:
        return not finished
    kind = {Outcome.XFAIL: Outcome.XFAIL, Outcome.XPASS: Outcome.XFAIL, Outcome.SKIP: Outcome.SKIP}.get(outcome)
    if kind is None:
        return True
    return any(e.kind == kind and e.matches(test["id"], test["clauses"]) for e in entries)


def _expectations(doc: dict[str, Any]) -> list[Any]:
    """The entries of the target's expectations file (the one the run's expectations part hashed); an unreadable
    file raises ExpectationsError, a ValueError."""
    target = targets.registered_drivers().get(doc["target"]["name"])
    return expectations.load(target.expectations_file) if target is not None else []
