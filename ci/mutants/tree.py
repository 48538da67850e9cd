"""The copies of the tree a generated-mutant run works in (``generated.py``): what is copied, its hash (the
key of the cached coverage), the files of each area, and the import path of a copy."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLUGIN = "plugins/ironaccel-opencl"
COPIED = ("ironaccel", "conformance", "fakes", "pyproject.toml", PLUGIN)
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", "*.so", "*.egg-info", "build")


def copy_tree(dest: Path, src: Path, platform: bool) -> None:
    """The files a run needs: for the suite, what certify reads; for the platform, every tracked file."""
    if platform and not (src / ".git").exists():  # a copy of the snapshot: all of it
        shutil.copytree(src, dest, ignore=IGNORED, dirs_exist_ok=True, symlinks=True)
        return
    if platform:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=src, capture_output=True, text=True, check=True)
        for name in files.stdout.split("\0"):
            if name and (src / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src / name, dest / name)
        return
    for name in COPIED:
        if (src / name).is_dir():
            shutil.copytree(src / name, dest / name, ignore=IGNORED)
        else:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / name, dest / name)


def tree_hash(tree: Path) -> str:
    """What a copy holds, and the engine's files that change what its coverage recording records."""
    digest = hashlib.sha256()
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(tree)).encode() + b"\0" + path.read_bytes())
    for f in (HERE / "probe.py", HERE / "modules.py", HERE / "covered.py"):
        digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def area_files(tree: Path, areas: dict[str, tuple[str, ...]]) -> tuple[dict[str, list[str]], list[str]]:
    """area -> files (relative), and the globs that matched nothing."""
    out, empty = {}, []
    for area, globs in areas.items():
        files = []
        for g in globs:
            found = sorted(str(p.relative_to(tree)) for p in tree.glob(g) if p.is_file())
            empty += [] if found else [g]
            files += found
        out[area] = files
    return out, empty


def python_path(tree: Path, probe: bool = False) -> str:
    return os.pathsep.join([str(tree), str(tree / PLUGIN), *([str(HERE)] if probe else [])])


def unshared_cache(dest: Path, fresh: tuple[str, ...]) -> dict[str, str]:
    """The environment of a run whose cache kinds ``fresh`` start empty in the cache ``dest`` (every other kind
    is the shared cache's, linked); made once, the same for each run of one mutant."""
    from ironaccel.cache import cache_dir

    shared = cache_dir()
    dest.mkdir(exist_ok=True)
    for entry in shared.iterdir() if shared.is_dir() else ():
        if entry.name not in (*fresh, "mutants") and not (dest / entry.name).exists():
            (dest / entry.name).symlink_to(entry)
    return {"IRONACCEL_CACHE": str(dest)}


def private_cache(dest: Path, rebuilt: tuple[str, ...], objects: Path, gcov: bool = False) -> dict[str, str]:
    """The environment of a run whose C builds of the kinds ``rebuilt`` are made anew, by ``cc.py``, into the
    cache ``dest`` (``unshared_cache``); its objects kept in ``objects`` (``gcov``: built with --coverage, the
    counters written beside them when the test process exits)."""
    return {**unshared_cache(dest, rebuilt), "CC": str(HERE / "cc.py"), "IRONACCEL_MUTANTS_OBJECTS": str(objects),
            **({"IRONACCEL_MUTANTS_GCOV": "1"} if gcov else {})}
