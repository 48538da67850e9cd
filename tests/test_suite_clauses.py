"""The suite's clause marks agree with SPEC.md's required/optional split, checked on the committed results of this
suite (a stale file's marks are its own suite's, which SPEC.md no longer describes)."""

from __future__ import annotations

import json
from pathlib import Path

from ironaccel.cts import spec

RESULTS = Path(__file__).resolve().parent.parent / "results"


def test_a_test_a_capability_can_skip_cites_only_optional_clauses() -> None:
    """A not-supported test that cites a required clause leaves that clause unproven on every device without the
    capability (GRAPH-7's test once cited ERR-1 and made WebGPU, OpenGL and OpenCL fail ERR-1)."""
    required = {cid for cid, clause in spec.load_clauses().items() if clause.required}
    suite = spec.suite_hash()
    wrong = {}
    for path in sorted(RESULTS.glob("*.json")):
        doc = json.loads(path.read_text())
        if "tests" not in doc or doc["suite"]["parts"]["suite"] != suite:
            continue
        for test in doc["tests"]:
            cited = required.intersection(test.get("clauses", ()))
            if test["outcome"] == "not-supported" and cited:
                wrong[test["id"]] = sorted(cited)
    assert not wrong, f"tests skipped for a capability cite required clauses: {wrong}"
