"""The results file: one JSON document per target run — the only input STATUS.md is made from.

Schema (``SCHEMA_VERSION``)::

    {
      "schema": 1,
      "suite": {"version": "0.1.0", "hash": "<spec.suite_hash()>"},
      "target": {"name": "webgpu/lavapipe", "backend": "webgpu", "driver": "lavapipe",
                 "driver_version": "...", "device": "llvmpipe (LLVM 15...)", "vendor": "Mesa",
                 "simulated": true, "os": "Linux-6.1-x86_64", "python": "3.11.7",
                 "packages": {"wgpu": "0.32.0", "numpy": "2.4.6", ...}},
      "started": "2026-11-30T04:30:00Z", "finished": "2026-11-30T04:31:10Z",
      "run": {"status": "ok" | "error" | "crashed" | "timeout", "message": ""},
      "tests": [{"id": "test_mem.py::test_alloc_sizes[1]", "clauses": ["MEM-1"],
                 "outcome": "pass", "duration": 0.01, "message": ""}],
      "summary": {"pass": 10, "fail": 0, ...every OUTCOMES key...}
    }

``target.device`` etc. are empty when the run never reached a device (``run.status`` then says why).
Outcomes: see ``OUTCOMES``. Files are named ``<backend>-<driver>.json`` (``file_name``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1

#: Per-test outcomes. not-supported comes only from Device.supports(); skip only from an expectations
#: entry or a documented policy; not-run means the target produced no result for the test.
OUTCOMES = ("pass", "fail", "xfail", "xpass", "not-supported", "skip", "flaky", "not-run")

RUN_STATUSES = ("ok", "error", "crashed", "timeout")

JSON_TYPE_NAMES = {dict: "object", list: "array", str: "string"}


def file_name(target: str) -> str:
    """results file name of a target: ``webgpu/lavapipe`` -> ``webgpu-lavapipe.json``."""
    return target.replace("/", "-") + ".json"


def summarize(tests: list[dict[str, Any]]) -> dict[str, int]:
    counts = dict.fromkeys(OUTCOMES, 0)
    for t in tests:
        counts[t["outcome"]] += 1
    return counts


def validate(doc: Any, source: str = "results") -> dict[str, Any]:
    """Check a loaded results document against the schema; ValueError naming the file and the field."""

    def need(cond: bool, what: str) -> None:
        if not cond:
            raise ValueError(f"{source}: {what}")

    need(isinstance(doc, dict), "not a JSON object")
    need(doc.get("schema") == SCHEMA_VERSION, f"schema must be {SCHEMA_VERSION}, got {doc.get('schema')!r}")
    for key in ("suite", "target", "run", "tests", "summary", "started", "finished"):
        need(key in doc, f"missing {key!r}")
    for key, kind in (("suite", dict), ("target", dict), ("run", dict), ("tests", list), ("summary", dict),
                      ("started", str), ("finished", str)):
        need(isinstance(doc[key], kind), f"{key} must be a JSON {JSON_TYPE_NAMES[kind]}")
    need(isinstance(doc["suite"].get("hash"), str), "suite.hash must be a string")
    for key in ("name", "backend", "driver", "simulated"):
        need(key in doc["target"], f"target.{key} missing")
    for key in ("name", "backend", "driver"):
        need(isinstance(doc["target"][key], str), f"target.{key} must be a string")
    need(isinstance(doc["target"]["simulated"], bool), "target.simulated must be true or false")
    need(doc["run"].get("status") in RUN_STATUSES, f"run.status must be one of {RUN_STATUSES}")
    for i, t in enumerate(doc["tests"]):
        need(isinstance(t, dict), f"tests[{i}] must be a JSON object")
        need(isinstance(t.get("id"), str), f"tests[{i}].id must be a string")
        need(t.get("outcome") in OUTCOMES, f"tests[{i}].outcome {t.get('outcome')!r} is not one of {OUTCOMES}")
        need(isinstance(t.get("clauses"), list) and all(isinstance(c, str) for c in t["clauses"]),
             f"tests[{i}].clauses must be a list of clause id strings")
    need(doc["summary"] == summarize(doc["tests"]), "summary does not match the tests")
    return doc


def load(path: Path) -> dict[str, Any]:
    return validate(json.loads(Path(path).read_text(encoding="utf-8")), str(path))


def dump(doc: dict[str, Any], path: Path) -> None:
    validate(doc, str(path))
    Path(path).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
