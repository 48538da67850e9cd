"""Reads the conformance spec (SPEC.md) — the source of truth for what is required and what the levels mean.

A clause is one line of SPEC.md: ``**MEM-3** (required) text...`` or ``**KERNEL-9** (optional) text...``.
Its area is the part of the id before the dash (``results.ClauseId``). The certification section defines
each target and backend level on a line of its own (``DEFINITION_LINE``); ``ironaccel.cts.judge`` applies them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
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
    """The conformance suite beside the ``ironaccel`` that is running: the checkout's when it runs from a
    checkout (conformance/SPEC.md beside ironaccel/; on PYTHONPATH or installed editable), else the installed
    ``ironaccel.conformance`` package. Not the other way round: an editable install maps
    ``ironaccel.conformance`` to its own checkout, so a copy of the tree on PYTHONPATH would run (and hash)
    its own code against the installed checkout's suite and expectations."""
    import importlib.util

    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "conformance" / "SPEC.md").is_file():
        return checkout / "conformance"
    found = importlib.util.find_spec("ironaccel.conformance")
    if found is not None and found.submodule_search_locations:
        return Path(list(found.submodule_search_locations)[0])
    return checkout / "conformance"


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


HASHED_SUFFIXES = {".py", ".md", ".txt", ".wgsl", ".cu", ".ptx", ".cubin", ".comp", ".spv", ".c", ".h", ".inc", ".cl"}

#: The library files every target's run goes through, hashed with conformance/ as the "suite" part: the
#: interface and errors, the pool (POOL clauses) and the compiled hot path it and the CUDA backend load
#: (native.py, _fast_c/, built by cbuild.py into cache.py's folder), the helpers the tests drive the device with
#: (cts/testing/: busy work, exhaustion), target and backend registries and the helpers driver declarations
#: share (cts/drivers/__init__.py), the plugin and the results vocabulary it writes with. Each backend's driver
#: declarations (cts/drivers/cuda.py, ...) are hashed with that backend instead (``implementation``). Judging and
#: reporting (judge, status, certify, cli) are not in it: they do not change what a run does.
SUITE_LIBRARY = ("__init__.py", "api.py", "errors.py", "pool.py", "native.py", "_fast_c", "sourcehash.py", "cbuild.py", "cache.py", "glslang.py",
                 "cts/__init__.py", "cts/testing", "cts/targets.py", "cts/drivers/__init__.py", "cts/pytest_plugin.py", "cts/results.py",
                 "cts/expectations.py",
                 "cts/selection.py", "cts/spec.py", "backends/__init__.py")


def _digest(files: list[tuple[str, Path]]) -> str:
    """sha256 (16 hex digits) over (label, file) pairs: each file under its fixed label, so a checkout and
    an installed wheel (where conformance/ and the fake's sources live inside the package) hash alike."""
    h = hashlib.sha256()
    for label, f in sorted(files, key=lambda pair: pair[0]):
        h.update(label.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _tree(label: str, base: Path, exclude: Path | None = None) -> list[tuple[str, Path]]:
    if base.is_file():
        return [(label, base)]
    return [(f"{label}/{f.relative_to(base).as_posix()}", f) for f in base.rglob("*")
            if f.is_file() and f.suffix in HASHED_SUFFIXES and "__pycache__" not in f.parts
            and not (exclude is not None and exclude in f.parents)]


def suite_hash() -> str:
    """The "suite" part: conformance/ (but its per-target expectations files) and ``SUITE_LIBRARY``."""
    package = Path(__file__).resolve().parent.parent  # ironaccel/: the names above are relative to it
    suite = conformance_dir()
    files = _tree("conformance", suite, exclude=suite / "expectations")
    files += [pair for name in SUITE_LIBRARY for pair in _tree(f"ironaccel/{name}", package / name)]
    return _digest(files)


def _module_location(module: str) -> Path | None:
    """The file of a module, or the folder of a package; None when it is not found."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if found is None or not found.origin or not Path(found.origin).is_file():
        return None
    origin = Path(found.origin)
    return origin.parent if origin.name == "__init__.py" else origin


def _spec_module(spec_: object) -> str:
    """The module of a registry entry: ``"package.module:attr"``, or the registered class or function itself."""
    return spec_.partition(":")[0] if isinstance(spec_, str) else spec_.__module__  # type: ignore[attr-defined]


def package_location(backend: str) -> Path | None:
    """Where a registered backend's code lives: its module or package (``ironaccel.backends.cuda``), or a
    third party's whole top-level package; None for a backend that is not registered or not found."""
    from ..backends import registry

    spec_ = registry().get(backend)
    if spec_ is None:
        return None
    module = _spec_module(spec_)
    return _module_location(module if module.startswith("ironaccel.") else module.split(".")[0])


def implementation(backend: str) -> list[tuple[str, Path]]:
    """The files of a backend's "backend" part: its code (``package_location``) and the module its drivers are
    declared in, when that lies outside it (the built-ins' ``ironaccel/drivers/<name>.py``). So editing
    drivers/cuda.py stales only cuda's results, and drivers/vulkan.py, which declares the Vulkan and the WebGPU
    targets (both backends' targets are the Vulkan ICDs found), stales vulkan's and webgpu's."""
    from .targets import driver_declarations

    where = package_location(backend)
    files = [] if where is None else _tree(f"backend/{backend}", where)
    declared = driver_declarations().get(backend)
    module = None if declared is None else _spec_module(declared)
    declaration = None if module is None else _module_location(module)
    if declaration is not None and not (where is not None and (declaration == where or where in declaration.parents)):
        files += _tree(f"drivers/{module}", declaration)
    return files


@dataclass(frozen=True)
class Current:
    """The hashes results are judged against. A results file records the same parts for its target
    (``parts``); it is stale when any differs: the suite, its backend's implementation, its driver's sources
    (the fake), or its expectations file. Another backend's change leaves it current. ``builds``: the source
    hashes that builds of the C here embed, which the builds a run loaded (its ``builds``) must report."""

    suite: str
    implementations: dict[str, str]  # "backend/<name>", "driver/<target>", "expectations/<target>" -> hash
    builds: dict[str, str] = field(default_factory=dict)  # "compiled" (ironaccel._fast), "driver/<target>" -> hash

    def parts(self, target: str) -> dict[str, str]:
        backend = target.partition("/")[0]
        out = {"suite": self.suite}
        for label, key in (("backend", f"backend/{backend}"), ("driver", f"driver/{target}"),
                           ("expectations", f"expectations/{target}")):
            if key in self.implementations:
                out[label] = self.implementations[key]
        return out


def current(target_names: list[str] | None = None) -> Current:
    """Current hashes for every registered backend and ``target_names`` (default: the target registry)."""
    from ..backends import registry
    from .targets import TARGETS

    names = list(TARGETS) if target_names is None else list(target_names)
    found: dict[str, str] = {}
    for backend in sorted(set(registry()) | {n.partition("/")[0] for n in names}):
        files = implementation(backend)
        if files:
            found[f"backend/{backend}"] = _digest(files)
    for name in names:
        sources = TARGETS[name].sources if name in TARGETS else {}
        if sources:
            found[f"driver/{name}"] = _digest([pair for label, path in sources.items() for pair in _tree(label, path)])
        exp = (TARGETS[name].expectations_file if name in TARGETS
               else conformance_dir() / "expectations" / f"{name.replace('/', '-')}.txt")
        if exp.is_file():
            found[f"expectations/{name}"] = _digest([(exp.name, exp)])
    from .. import native

    builds = {"compiled": native.sources_hash()}
    for name in names:
        builds[f"driver/{name}"] = TARGETS[name].build_hash() if name in TARGETS else None
    return Current(suite_hash(), found, {key: value for key, value in builds.items() if value is not None})
