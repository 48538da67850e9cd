"""ironaccel's own C — the fake libcuda, the compiled hot path, the C floor — compiled with the system
compiler once per hash of its sources and flags, into ``cache_dir()/<kind>/<hash>/``; safe from parallel
processes (a build goes to a temporary file renamed into place). Every build embeds the hash of its sources
(``sourcehash.define``), which the built code reports, so what ran can be told from what is on disk."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .errors import NotAvailable
from .cache import cache_dir
from .sourcehash import define


def find_compiler() -> str:
    """$CC, cc, gcc or clang: the first found on PATH."""
    tried = []
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if not name:
            continue
        tried.append(name)
        path = shutil.which(name)
        if path:
            return path
    raise NotAvailable("cuda", "C compiler", f"searched $CC, cc, gcc, clang ({', '.join(tried)}): apt-get install gcc")


def build(kind: str, name: str, sources: Sequence[Path], flags: Sequence[str], libs: Sequence[str] = (),
          key: str = "") -> Path:
    """``cc FLAGS -DIRONACCEL_SOURCE_HASH=... -o <cache>/KIND/<hash>/NAME SOURCES(.c) LIBS``, unless already
    built; ``sources`` are every file the result depends on (headers too, all in its source hash) and ``key``
    anything else that changes it (an ABI tag)."""
    flags = (*flags, "-D%s=%s" % define(sources))
    digest = hashlib.sha256()
    for f in sources:
        digest.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    digest.update(" ".join((*flags, *libs, key)).encode())
    out = cache_dir() / kind / digest.hexdigest() / name
    if out.is_file():
        return out
    compiler = find_compiler()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=out.parent)
    os.close(fd)
    cmd = [compiler, *flags, "-o", tmp, *[str(f) for f in sources if f.suffix == ".c"], *libs]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        os.unlink(tmp)
        raise NotAvailable("cuda", f"{kind} build", f"{' '.join(cmd)} failed:\n{proc.stderr}")
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)  # atomic: a concurrent builder sees no file or a complete one
    return out
