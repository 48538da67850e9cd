"""The hash of the C sources a build is made from, and the sources of the compiled extension: every build of
ironaccel's own C embeds the hash (``IRONACCEL_SOURCE_HASH``, cbuild.py and setup.py), so what ran can be
compared with the sources a results file claims. Imports nothing of ironaccel: setup.py loads this file by
its path."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

MACRO = "IRONACCEL_SOURCE_HASH"


def source_hash(sources: Iterable[Path]) -> str:
    """sha256 (16 hex digits) over each file's name and bytes, in name order (names are unique per build)."""
    h = hashlib.sha256()
    for f in sorted(sources, key=lambda p: p.name):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def define(sources: Iterable[Path]) -> tuple[str, str]:
    """The macro a build of ``sources`` is compiled with, as (name, C string literal)."""
    return MACRO, f'"{source_hash(sources)}"'


def fast_sources(package: Path) -> list[Path]:
    """Every file the compiled extension ``ironaccel._fast`` is built from, in ``package``: ``_fast_c/fast.c``, the
    one file compiled, and the parts it includes (``*.inc``)."""
    folder = package / "_fast_c"
    return sorted(folder.glob("*.c")) + sorted(folder.glob("*.inc"))
