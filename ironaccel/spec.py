"""Reads the clause ids of the conformance spec (SPEC.md) — the source of truth for what is required.

A clause is one line of SPEC.md: ``**MEM-3** (required) text...`` or ``**KERNEL-9** (optional) text...``.
Its area is the part of the id before the dash.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

CLAUSE_LINE = re.compile(r"^\*\*([A-Z]+)-(\d+)\*\* \((required|optional)\) (.+)$")


@dataclass(frozen=True)
class Clause:
    id: str
    area: str
    required: bool
    text: str


def conformance_dir() -> Path:
    """The conformance suite: the installed ``ironaccel.conformance`` package, else the checkout's."""
    import importlib.util

    found = importlib.util.find_spec("ironaccel.conformance")
    if found is not None and found.submodule_search_locations:
        return Path(list(found.submodule_search_locations)[0])
    return Path(__file__).resolve().parent.parent / "conformance"


def load_clauses(spec_md: Path | None = None) -> dict[str, Clause]:
    """Clause id -> Clause, in SPEC.md order."""
    path = spec_md or conformance_dir() / "SPEC.md"
    clauses: dict[str, Clause] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = CLAUSE_LINE.match(line)
        if m:
            cid = f"{m[1]}-{m[2]}"
            if cid in clauses:
                raise ValueError(f"{path}: clause {cid} is defined twice")
            clauses[cid] = Clause(cid, m[1], m[3] == "required", m[4])
    return clauses


def suite_hash() -> str:
    """sha256 over the conformance suite and the library sources: results at another hash are stale."""
    root_pkg = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for base in (conformance_dir(), root_pkg):
        for f in sorted(base.rglob("*")):
            if f.is_file() and f.suffix in {".py", ".md", ".txt", ".wgsl", ".cu", ".ptx", ".comp", ".spv", ".glsl"} \
                    and "__pycache__" not in f.parts:
                h.update(f.relative_to(base).as_posix().encode())
                h.update(b"\0")
                h.update(f.read_bytes())
                h.update(b"\0")
    return h.hexdigest()[:16]
