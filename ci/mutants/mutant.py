"""What one mutant of the catalogue (catalogue.py) is, and the extra environments its run may need."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Mutant:
    """One mutant: catalogue.py's docstring says what each field means."""
    id: str
    area: str  # webgpu, vulkan, cuda, opengl, pool, plugin, fake
    file: str
    old: str
    new: str
    target: str
    bug: str  # the user-visible bug, one line
    clauses: tuple[str, ...]
    check: str = "suite"
    env: dict[str, str] = field(default_factory=dict)
    equivalent: str = ""


PURE = {"IRONACCEL_PURE_PYTHON": "1"}  # code the compiled hot paths (ironaccel/_fast_c/: CUDA's, the MemPool's) replace when they load
