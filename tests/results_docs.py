"""Helpers over results documents for the platform's tests (certify, farm, status, suite hash): the outcomes of a
run, and the suite's hashes as a fresh process computes them from a checkout (passing documents are made by
``ironaccel.cts.testing.documents``)."""

from __future__ import annotations

import os
from pathlib import Path

from ironaccel.cts import spec


def outcomes(doc: dict) -> dict[str, str]:
    return {t["id"].split("::")[1]: t["outcome"] for t in doc["tests"]}


def current_of(tree: Path) -> spec.Current:
    """spec.current() as computed from the checkout at ``tree`` (a fresh process: nothing cached)."""
    import json
    import subprocess
    import sys

    code = ("import json; from ironaccel.cts import spec; c = spec.current(); "
            "print(json.dumps({'suite': c.suite, 'implementations': c.implementations}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                         capture_output=True, text=True, check=True, timeout=300).stdout
    found = json.loads(out)
    return spec.Current(found["suite"], found["implementations"])
