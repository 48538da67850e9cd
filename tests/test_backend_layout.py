"""Every backend package names its modules from the one vocabulary ``ironaccel/backends/__init__.py`` states.

The vocabulary is read from that docstring (its two lists), so the rule and its check cannot drift apart; the
packages checked are every built-in backend package and the OpenCL plugin's.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ROOT / "ironaccel" / "backends"
PLUGIN_PACKAGES = (ROOT / "plugins" / "ironaccel-opencl" / "ironaccel_opencl",)


def vocabulary() -> tuple[set[str], set[str], dict[str, set[str]]]:
    """(required module names, allowed module names, backend -> its extras) from the registry's docstring."""
    doc = importlib.import_module("ironaccel.backends").__doc__ or ""  # ironaccel.backends is also a function
    common = re.findall(r"^\* ``(\w+)``( \(required\))? —", doc, re.M)
    extras: dict[str, set[str]] = {}
    for backend, name in re.findall(r"^\* ``(\w+)\.(\w+)`` —", doc, re.M):
        extras.setdefault(backend, set()).add(name)
    return {n for n, req in common if req}, {n for n, _ in common}, extras


def backend_packages() -> dict[str, Path]:
    """backend name -> its package folder: the built-ins' subpackages, and the plugins' (ironaccel_<name>)."""
    found = {p.parent.name: p.parent for p in BACKENDS.glob("*/__init__.py")}
    found.update({p.name.removeprefix("ironaccel_"): p for p in PLUGIN_PACKAGES})
    return found


def layout_problems(backend: str, modules: set[str]) -> list[str]:
    """What is wrong with a backend package made of ``modules`` (file stems, ``__init__`` left out)."""
    required, allowed, extras = vocabulary()
    mine = extras.get(backend, set())
    problems = [f"{backend}: no {name}.py" for name in sorted(required - modules)]
    problems += [f"{backend}: {name}.py is not in the vocabulary (ironaccel/backends/__init__.py)"
                 for name in sorted(modules - allowed - mine)]
    problems += [f"{backend}: the vocabulary lists {backend}.{name}, which has no module"
                 for name in sorted(mine - modules)]
    return problems


def test_the_vocabulary_is_read_from_the_docstring():
    required, allowed, extras = vocabulary()
    assert required == {"native", "backend", "device", "stream", "module"}
    assert allowed > required and "memory" in allowed and "graph" in allowed
    assert extras["cuda"] == {"fast", "nvrtc", "staging"}


def test_every_backend_package_uses_the_vocabulary():
    packages = backend_packages()
    assert {"cuda", "opengl", "vulkan", "webgpu", "opencl"} <= set(packages)
    _, _, extras = vocabulary()
    assert set(extras) <= set(packages), "an extra is listed for a backend that has no package"
    problems = []
    for backend, folder in sorted(packages.items()):
        problems += layout_problems(backend, {p.stem for p in folder.glob("*.py")} - {"__init__"})
    assert problems == []


def test_a_wrong_name_or_a_missing_module_is_seen():
    """The check can fail: the names cuda had before the vocabulary, and another backend's extra, are refused."""
    before = {"driver", "device", "stream", "module", "graph", "fast", "nvrtc", "staging"}
    assert layout_problems("cuda", before) == [
        "cuda: no backend.py", "cuda: no native.py",
        "cuda: driver.py is not in the vocabulary (ironaccel/backends/__init__.py)"]
    webgpu = {"native", "backend", "device", "stream", "module", "reflect", "staging"}
    assert layout_problems("webgpu", webgpu) == [
        "webgpu: staging.py is not in the vocabulary (ironaccel/backends/__init__.py)"]
    assert layout_problems("webgpu", webgpu - {"staging", "reflect"}) == [
        "webgpu: the vocabulary lists webgpu.reflect, which has no module"]
