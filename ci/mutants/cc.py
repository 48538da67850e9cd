#!/usr/bin/env python3
"""A C compiler for the mutation run ($CC of a mutant's certify): ``cc FLAGS -o OUT a.c b.c ... -lLIBS`` as
ironaccel's ``cbuild`` calls it, done one object per source, each cached by the hash of its source and flags in
$IRONACCEL_MUTANTS_OBJECTS, then linked. A fake mutant changes one of the fake's 25 sources: its build
compiles that one file instead of all of them (minutes to seconds). ccache does not cache a command that
compiles several sources at once, which is how cbuild compiles.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

COMPILER = shutil.which("gcc") or shutil.which("cc") or "cc"


def main(argv: list[str]) -> int:
    out = argv[argv.index("-o") + 1]
    rest = argv[:argv.index("-o")] + argv[argv.index("-o") + 2:]
    sources = [a for a in rest if a.endswith(".c")]
    libs = [a for a in rest if a.startswith("-l")]
    flags = [a for a in rest if a not in sources and a not in libs]
    compile_flags = [f for f in flags if f != "-shared" and not f.startswith("-Wl,")]
    cache = Path(os.environ["IRONACCEL_MUTANTS_OBJECTS"])
    cache.mkdir(parents=True, exist_ok=True)
    objects = []
    for src in sources:
        path = Path(src)
        includes = sorted(p for p in path.parent.glob("*.h"))  # a header change changes every object
        digest = hashlib.sha256(" ".join(compile_flags).encode() + path.read_bytes()
                                + b"".join(h.read_bytes() for h in includes)).hexdigest()
        obj = cache / f"{path.stem}-{digest[:20]}.o"
        if not obj.exists():
            fd, tmp = tempfile.mkstemp(suffix=".o", dir=cache)
            os.close(fd)
            proc = subprocess.run([COMPILER, *compile_flags, "-c", src, "-o", tmp])
            if proc.returncode:
                os.unlink(tmp)
                return proc.returncode
            os.replace(tmp, obj)
        objects.append(str(obj))
    return subprocess.run([COMPILER, *flags, "-o", out, *objects, *libs]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
