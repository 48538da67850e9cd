"""The suite hash covers every library module a conformance run executes, so editing one makes results stale."""

from __future__ import annotations

import ast
from pathlib import Path

from ironaccel import spec

ROOT = Path(__file__).resolve().parent.parent
#: Hashed elsewhere: each backend's package is its own part, the fake's loader is part of cuda/fake's driver;
#: and judge, which the plugin calls only to compare a finished run with a baseline (it changes no outcome).
HASHED_APART = ("ironaccel.backends.", "ironaccel.fakes", "ironaccel.judge")


def _module_file(name: str) -> Path | None:
    base = ROOT / name.replace(".", "/")
    for f in (base / "__init__.py", base.with_suffix(".py")):
        if f.is_file():
            return f
    return None


def _imports(path: Path, package: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(parts + ([node.module] if node.module else []))
            found |= {module} | {f"{module}.{a.name}" for a in node.names}
    return {m for m in found if m.split(".")[0] == "ironaccel"}


def _executed_library_modules() -> set[str]:
    """ironaccel modules reached from conformance/ and the pytest plugin, following imports."""
    todo = {"ironaccel.pytest_plugin"}
    for f in (ROOT / "conformance").rglob("*.py"):
        todo |= _imports(f, "conformance")
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        path = _module_file(module)
        if module in seen or path is None or module.startswith(HASHED_APART):
            continue
        seen.add(module)
        todo |= _imports(path, module if path.name == "__init__.py" else module.rpartition(".")[0])
    return seen


def test_every_library_module_a_run_executes_is_in_the_suite_hash() -> None:
    hashed = {ROOT / "ironaccel" / name for name in spec.SUITE_LIBRARY}
    def covered(path: Path) -> bool:
        return any(path == h or h in path.parents for h in hashed)
    missing = sorted(m for m in _executed_library_modules() if not covered(_module_file(m)))
    assert not missing, f"modules a conformance run executes but the suite hash ignores: {missing}"
    assert "ironaccel.testing.work" in _executed_library_modules()  # the walk follows conformance's imports


def test_the_compiled_hot_path_source_is_hashed() -> None:
    """native.py builds _fast.c, which the pool (every backend) and the CUDA backend run instead of Python."""
    assert {"native.py", "_fast.c", "cbuild.py"} <= set(spec.SUITE_LIBRARY)
