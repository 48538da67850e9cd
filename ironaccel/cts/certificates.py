"""A target run's files made from its results file alone: the JUnit XML and the certificate (what the
target proves, every required clause, how the run was weakened, environment, hashes; ``.cert.json`` and
``.cert.md``).

A certificate holds nothing that its results file and the suite do not determine (no issue time), so
``ironaccel verify`` (``verifier``) recomputes it and compares.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from . import judge, results, spec, tables, targets
from .results import CERTIFICATE_SUFFIX, JUNIT_SUFFIX, Outcome

#: 2: "proves" (what the target proves, judge.TARGET_LEVELS) replaced "level"; 3: "weakened" (judge.weakenings)
CERTIFICATE_SCHEMA = 3


def write_junit_and_certificate(results_file: Path) -> dict[str, Any]:
    """Write the JUnit XML and the certificate beside a finished results file; return its document."""
    doc = results.load(results_file)
    results.sibling(results_file, JUNIT_SUFFIX).write_text(junit_xml(doc), encoding="utf-8")
    write_certificate(results_file)
    return doc


def junit_xml(doc: dict[str, Any]) -> str:
    """A results document as JUnit XML, each test case with its outcome's element (``Outcome.junit``): fail
    and xpass are failures, not-run an error, xfail, skip and not-supported skipped; flaky passes with a
    ``flakyFailure``."""
    import xml.etree.ElementTree as ET

    tests, target = doc["tests"], doc["target"]
    counts = {element: sum(n for o, n in doc["summary"].items() if Outcome(o).junit == element)
              for element in ("failure", "error", "skipped")}
    suite = ET.Element("testsuite", name=target["name"], tests=str(len(tests)), failures=str(counts["failure"]),
                       errors=str(counts["error"]), skipped=str(counts["skipped"]),
                       time=f"{sum(t['duration'] for t in tests):.3f}", timestamp=doc["started"])
    props = ET.SubElement(suite, "properties")
    for key, value in (("run", doc["run"]["status"]), ("run_message", doc["run"]["message"]),
                       ("suite_hash", doc["suite"]["hash"]), ("device", target["device"]),
                       ("driver_version", target["driver_version"]), ("simulated", str(target["simulated"]).lower())):
        ET.SubElement(props, "property", name=key, value=value)
    for t in tests:
        module, _, name = t["id"].partition("::")
        case = ET.SubElement(suite, "testcase", classname=module.removesuffix(".py"), name=name,
                             time=f"{t['duration']:.3f}")
        ET.SubElement(case, "properties").append(ET.Element("property", name="clauses", value=" ".join(t["clauses"])))
        outcome = Outcome(t["outcome"])
        if outcome.junit:
            text = t["message"] or (f"run {doc['run']['status']}: {doc['run']['message']}"
                                    if outcome == Outcome.NOT_RUN else "")
            first_line = text.splitlines()[0] if text else ""
            ET.SubElement(case, outcome.junit,
                          message=outcome + (f": {first_line}" if first_line else "")).text = text
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def sha256_file(path: Path) -> str:
    """The sha256 of a regular file of bounded size (``results.read_bytes``: ValueError for anything else)."""
    return hashlib.sha256(results.read_bytes(path)).hexdigest()


#: Certificate fields its results file alone determines; the others are judged by the suite (SPEC.md).
FACT_FIELDS = ("certificate", "target", "weakened", "environment", "run", "suite", "results")
#: Every field of a certificate (``CERTIFICATE_SCHEMA``), with its JSON type.
CERTIFICATE_FIELDS = {"certificate": int, "target": str, "proves": str, "why": str, "weakened": list,
                      "required_clauses_passing": str, "required_clauses": list, "environment": dict, "run": dict,
                      "suite": dict, "results": dict}


def certificate(results_file: Path) -> dict[str, Any]:
    """The certificate of one results file, judged by the current SPEC.md and suite hash."""
    doc = results.load(results_file)
    clauses = spec.load_clauses()
    (run,), _ = judge.runs([doc], spec.current([doc["target"]["name"]]), targets.TARGETS)
    proves, why = judge.target_level(run, clauses)
    states = judge.required_clause_states(doc, clauses)
    t = doc["target"]
    return {
        "certificate": CERTIFICATE_SCHEMA,
        "target": t["name"],
        "proves": proves,
        "why": why,
        "weakened": judge.weakenings(doc),
        "required_clauses_passing": f"{sum(s == 'pass' for s in states.values())}/{len(states)}",
        "required_clauses": [{"id": cid, "outcome": state} for cid, state in states.items()],  # SPEC.md order
        "environment": {key: t.get(key, "") for key in
                        ("backend", "driver", "driver_version", "device", "vendor", "simulated", "os", "python",
                         "packages")},
        "run": {"status": doc["run"]["status"], "started": doc["started"], "finished": doc["finished"]},
        "suite": dict(doc["suite"]),
        "results": {"file": Path(results_file).name, "sha256": sha256_file(results_file)},
    }


def certificate_markdown(cert: dict[str, Any]) -> str:
    env = cert["environment"]
    packages = ", ".join(f"{k} {v}" for k, v in sorted(env["packages"].items())) or "—"
    run = cert["run"]
    lines = [
        f"# Certificate: {cert['target']}",
        "",
        f"**Proves: {cert['proves']}** — {cert['why']}. (What a target proves and how a backend's level "
        "combines its targets: SPEC.md, Certification.)",
        "",
        *([f"**Weakened run** ({'; '.join(cert['weakened'])}): it supports no production claim.", ""]
          if cert["weakened"] else []),
        *tables.markdown(["", ""], [
            ["Device", f"{env['device'] or '—'} ({env['vendor'] or '—'}, "
                       f"{'simulated' if env['simulated'] else 'hardware'})"],
            ["Driver", f"{env['driver']} {env['driver_version']}"],
            ["OS, Python", f"{env['os'] or '—'}, Python {env['python'] or '—'}"],
            ["Packages", packages],
            ["Run", f"{run['status']}, {run['started']} → {run['finished']}"],
            ["Suite", f"{cert['suite']['version']}, hash `{cert['suite']['hash']}`"],
            ["Results file", f"`{cert['results']['file']}`, sha256 `{cert['results']['sha256']}`"],
        ]),
        "",
        f"## Required clauses ({cert['required_clauses_passing']} pass)",
        "",
        *tables.markdown(["Clause", "Outcome"], [[c["id"], c["outcome"]] for c in cert["required_clauses"]]),
        "",
        f"Check it with `ironaccel verify {cert['results']['file'].removesuffix('.json')}"
        f"{CERTIFICATE_SUFFIX}`.",
    ]
    return "\n".join(lines) + "\n"


def write_certificate(results_file: Path) -> Path:
    """Write ``<stem>.cert.json`` and ``<stem>.cert.md`` beside ``results_file``; return the JSON's path."""
    cert = certificate(results_file)
    path = results.sibling(results_file, CERTIFICATE_SUFFIX)
    path.write_text(json.dumps(cert, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    results.sibling(results_file, ".cert.md").write_text(certificate_markdown(cert), encoding="utf-8")
    return path
