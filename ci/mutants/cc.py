#!/usr/bin/env python3
"""A C compiler for the mutation run ($CC of a mutant's certify): ``cc FLAGS -o OUT a.c b.c ... -lLIBS`` as
ironaccel's ``cbuild`` calls it, done one object per source, each cached by the hash of its source and flags in
$IRONACCEL_MUTANTS_OBJECTS, then linked. A fake mutant changes one of the fake's 25 sources: its build
compiles that one file instead of all of them (minutes to seconds): the define of the build's source hash,
which differs in every mutant's build, is part of the key only of the objects whose source (or a header or
``*.inc`` part beside it) names the macro. ccache does not cache a command that compiles several sources at
once, which is how cbuild compiles. With IRONACCEL_MUTANTS_GCOV=1 (the coverage run, ``covered.py``) every
object is built with --coverage: the test process leaves gcov's counters beside the objects when it exits, and
the lines the preprocessor drops of each file of its folder are written beside it (``<object>.inactive.json``):
a line in an ``#if`` branch not taken (the Python 3.12 branch on 3.11) is compiled into nothing, so a mutant there
can only survive.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

COMPILER = shutil.which("gcc") or shutil.which("cc") or "cc"
# the macro cbuild defines in every build (loaded by its path, as setup.py does: importing ironaccel is slow)
_spec = importlib.util.spec_from_file_location("sourcehash", Path(__file__).resolve().parents[2] / "ironaccel" / "sourcehash.py")
_sourcehash = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_sourcehash)
SOURCE_HASH_MACRO = _sourcehash.MACRO
SOURCE_HASH_DEFINE = f"-D{SOURCE_HASH_MACRO}="
C_PARTS = (".c", ".h", ".inc")
_MARK = re.compile(r"__ironaccel_line_(\d+)_(\d+)__")


def marked(text: str, index: int) -> tuple[str, list[int]]:
    """``text`` with each line that is not part of a preprocessor directive marked at both ends by an identifier
    naming its file (``index``) and line (a comment may swallow one end), and the numbers of those lines."""
    out, lines, directive = [], [], False
    for n, line in enumerate(text.splitlines(), 1):
        if directive or line.lstrip().startswith("#"):
            out.append(line)
            directive = line.rstrip().endswith("\\")
        else:
            mark = f"__ironaccel_line_{index}_{n}__"
            out.append(f"{mark} {line} {mark}")
            lines.append(n)
    return "\n".join(out) + "\n", lines


def inactive_lines(compile_flags: list[str], src: Path) -> dict[str, list[int]]:
    """File of ``src``'s folder (absolute path) -> its lines that compiling ``src`` drops: those in an ``#if``
    branch not taken, and comments (a line of a macro's definition is never among them)."""
    parts = sorted(p for p in src.parent.iterdir() if p.suffix in C_PARTS)
    candidates: dict[int, list[int]] = {}
    with tempfile.TemporaryDirectory(prefix="ironaccel-cc-active-") as tmp:
        for index, part in enumerate(parts):
            text, candidates[index] = marked(part.read_text(encoding="utf-8"), index)
            (Path(tmp) / part.name).write_text(text, encoding="utf-8")
        proc = subprocess.run([COMPILER, *[f for f in compile_flags if f != "--coverage"], "-E",
                               str(Path(tmp) / src.name)], capture_output=True, text=True, check=True)
        # the parts this compile reads: its line markers name them (``# 1 "/tmp/.../part.h"``)
        read = {m[1] for m in re.finditer(r'^# \d+ "([^"]+)"', proc.stdout, re.M)}
    kept = {(int(m[1]), int(m[2])) for m in _MARK.finditer(proc.stdout)}
    return {str(part.resolve()): [n for n in candidates[i] if (i, n) not in kept]
            for i, part in enumerate(parts) if str(Path(tmp) / part.name) in read}


def main(argv: list[str]) -> int:
    out = argv[argv.index("-o") + 1]
    rest = argv[:argv.index("-o")] + argv[argv.index("-o") + 2:]
    sources = [a for a in rest if a.endswith(".c")]
    libs = [a for a in rest if a.startswith("-l")]
    flags = [a for a in rest if a not in sources and a not in libs]
    if os.environ.get("IRONACCEL_MUTANTS_GCOV") == "1":  # the coverage run: which lines the suite executes
        flags.append("--coverage")
    compile_flags = [f for f in flags if f != "-shared" and not f.startswith("-Wl,")]
    cache = Path(os.environ["IRONACCEL_MUTANTS_OBJECTS"])
    cache.mkdir(parents=True, exist_ok=True)
    objects = []
    for src in sources:
        path = Path(src)
        # a header or included part changes every object of its folder
        included = [p.read_bytes() for p in sorted(path.parent.glob("*.h")) + sorted(path.parent.glob("*.inc"))]
        text = path.read_bytes() + b"".join(included)
        # the source-hash define differs in every mutant's build: only the objects that use it depend on it
        keyed = [f for f in compile_flags if not f.startswith(SOURCE_HASH_DEFINE)] \
            if SOURCE_HASH_MACRO.encode() not in text else compile_flags
        digest = hashlib.sha256(" ".join(keyed).encode() + text).hexdigest()
        obj = cache / f"{path.stem}-{digest[:20]}.o"
        if not obj.exists():
            fd, tmp = tempfile.mkstemp(suffix=".o", dir=cache)
            os.close(fd)
            proc = subprocess.run([COMPILER, *compile_flags, "-c", src, "-o", tmp])
            if proc.returncode:
                os.unlink(tmp)
                return proc.returncode
            os.replace(tmp, obj)
        inactive = obj.with_suffix(".inactive.json")
        if os.environ.get("IRONACCEL_MUTANTS_GCOV") == "1" and not inactive.exists():
            inactive.write_text(json.dumps(inactive_lines(compile_flags, path)))
        objects.append(str(obj))
    return subprocess.run([COMPILER, *flags, "-o", out, *objects, *libs]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
