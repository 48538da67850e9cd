"""Reads the conformance spec (SPEC.md) — the source of truth for what is required and what the levels mean.

A clause is one line of SPEC.md: ``**MEM-3** (required) text...`` or ``**KERNEL-9** (optional) text...``.
Its area is the part of the id before the dash (``results.ClauseId``). The certification section defines
each target and backend level on a line of its own (``DEFINITION_LINE``); ``ironaccel.judge`` applies them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from .results import CLAUSE_ID, ClauseId

CLAUSE_LINE = re.compile(rf"^\*\*({CLAUSE_ID})\*\* \((required|optional)\) (.+)$")
#: A definition of the certification section: ``**production** (backend) text`` or ``**hardware** (target) text``.
DEFINITION_LINE = re.compile(r"^\*\*([a-z-]+)\*\* \((backend|target)\) (.+)$")


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
            cid = m[1]
            if cid in clauses:
                raise ValueError(f"{path}: clause {cid} is defined twice")
            clauses[cid] = Clause(cid, ClauseId.parse(cid).area, m[2] == "required", m[3])
    return clauses


def load_definitions(spec_md: Path | None = None) -> dict[tuple[str, str], str]:
    """(``backend`` | ``target``, level) -> its definition, from SPEC.md's certification section."""
    path = spec_md or conformance_dir() / "SPEC.md"
    found: dict[tuple[str, str], str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = DEFINITION_LINE.match(line)
        if m:
            if (m[2], m[1]) in found:
                raise ValueError(f"{path}: {m[2]} level {m[1]} is defined twice")
            found[(m[2], m[1])] = m[3]
    return found


HASHED_SUFFIXES = {".py", ".md", ".txt", ".wgsl", ".cu", ".ptx", ".cubin", ".comp", ".spv", ".c", ".h"}


def suite_hash() -> str:
    """sha256 over the conformance suite, the library and the fake libcuda's sources.

    Results at another hash are stale. Each part is hashed under a fixed label, so a checkout and an
    installed wheel (where conformance/ and the fake's sources live inside the package) hash alike."""
    from .errors import NotAvailable
    from .fakes import source_dir

    package = Path(__file__).resolve().parent
    parts = {"conformance": conformance_dir(), "ironaccel": package}
    try:
        parts["fakes/cuda"] = source_dir()
    except NotAvailable:  # a build without the fake's sources hashes without them
        pass
    nested = {p.resolve() for p in parts.values() if p != package}
    h = hashlib.sha256()
    for label, base in parts.items():
        for f in sorted(base.rglob("*")):
            if not f.is_file() or f.suffix not in HASHED_SUFFIXES or "__pycache__" in f.parts:
                continue
            if label == "ironaccel" and any(d in f.resolve().parents for d in nested):
                continue
            h.update(f"{label}/{f.relative_to(base).as_posix()}".encode())
            h.update(b"\0")
            h.update(f.read_bytes())
            h.update(b"\0")
    return h.hexdigest()[:16]
