"""The two wings (README, Layout): the library (``ironaccel``) never imports the certification platform
(``ironaccel.cts``), and it runs with the platform's dependencies (pytest, hypothesis, ...) absent."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ironaccel import cbuild
from ironaccel.errors import NotAvailable

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "ironaccel"
PLATFORM = "ironaccel.cts"
#: ``python -m ironaccel`` is the ``ironaccel`` command, which the platform provides: run, never imported.
COMMAND = LIBRARY / "__main__.py"
#: A registry entry naming a platform module (``"ironaccel.cts.drivers.cuda:drivers"``): loaded by importlib,
#: it is an import all the same.
PLATFORM_SPEC = re.compile(rf"^{re.escape(PLATFORM)}(\.\w+)*(:\w+)?$")


def _library_files() -> list[Path]:
    return sorted(f for f in LIBRARY.rglob("*.py")
                  if (LIBRARY / "cts") not in f.parents and f != COMMAND and "__pycache__" not in f.parts)


def _platform_uses(path: Path, package: tuple[str, ...]) -> list[str]:
    """What in ``path``, a module of ``package``, imports or names a module of the platform: ``line: text``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(package[:len(package) - node.level + 1]) if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            modules = [module] + [f"{module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and PLATFORM_SPEC.match(node.value):
            modules = [node.value]
        if any(m == PLATFORM or m.startswith(PLATFORM + ".") for m in modules):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)[:100]}")
    return found


def test_the_library_never_imports_the_platform():
    files = _library_files()
    assert LIBRARY / "api.py" in files and LIBRARY / "backends" / "cuda" / "native.py" in files
    uses = [use for f in files for use in _platform_uses(f, f.parent.relative_to(ROOT).parts)]
    assert not uses, "the library imports the certification platform:\n" + "\n".join(uses)


def test_the_scan_sees_an_import_of_the_platform(tmp_path):
    """The scan above can fail: relative, absolute and registry-string forms are each found, prose is not."""
    module = tmp_path / "probe.py"
    module.write_text('from ..cts import targets\nimport ironaccel.cts.spec\nSPEC = "ironaccel.cts.drivers.cuda:drivers"\n'
                      'DOC = "see ironaccel.cts for the platform"\n')
    assert len(_platform_uses(module, ("ironaccel", "backends"))) == 3


#: The platform's dependencies, made unimportable (``sys.modules[name] = None``) before ironaccel is imported.
PLATFORM_DEPENDENCIES = ("pytest", "_pytest", "hypothesis", "pytest_timeout", "pytest_rerunfailures", "xdist")

WITHOUT_THE_PLATFORM = f"""
import sys
for name in {PLATFORM_DEPENDENCIES!r}:
    sys.modules[name] = None
import numpy as np
import ironaccel as ia
names = [b.name for b in ia.backends()]
assert "cuda" in names, names
dev = ia.open_device("cuda", 0)
assert dev.info.simulated, dev.info
data = np.arange(1024, dtype=np.uint8)
buf = dev.alloc(data.nbytes)
stream = dev.create_stream()
stream.copy_htod(buf, data)
back = np.zeros_like(data)
stream.copy_dtoh(back, buf)
stream.synchronize()
assert (back == data).all()
buf.free()
dev.close()
platform = sorted(m for m in sys.modules if m == "ironaccel.cts" or m.startswith("ironaccel.cts."))
assert not platform, platform
print("ok", len(names))
"""


def test_the_library_runs_without_the_platforms_dependencies():
    """``import ironaccel``, list the backends, and a copy round trip on cuda/fake, with pytest and
    hypothesis unimportable: the library needs numpy alone (and a backend's runtime)."""
    try:
        cbuild.find_compiler()
    except NotAvailable as exc:  # the fake libcuda is built from C here
        pytest.skip(f"no C compiler for the fake libcuda: {exc}")
    env = {**os.environ, "IRONACCEL_CUDA_DRIVER": "fake",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", WITHOUT_THE_PLATFORM], env=env, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ok ")


def _test_module_imports(path: Path) -> list[str]:
    """The test modules (``test_*``) that ``path`` imports: shared helpers live in helper modules, never in tests."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found += [f"{path.parent.name}/{path.name}:{node.lineno}: {name}" for name in names
                  if name.split(".")[-1].startswith("test_")]
    return found


def test_no_test_module_imports_another():
    files = sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "conformance").rglob("*.py"))
    assert ROOT / "tests" / "test_certify.py" in files
    imports = [use for f in files for use in _test_module_imports(f)]
    assert not imports, "test modules importing test modules (move the helper to a helper module):\n" + "\n".join(imports)


def test_the_test_import_scan_sees_both_forms(tmp_path):
    module = tmp_path / "test_probe.py"
    module.write_text("from test_certify import suite\nimport test_plugin\nimport testing\nfrom membackend import x\n")
    assert len(_test_module_imports(module)) == 2
