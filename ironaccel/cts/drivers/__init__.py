"""The built-in backends' driver declarations, registered like any plugin's (``targets.BUILTIN_DRIVERS``).

They live in the certification platform, apart from the backends: a driver declaration is a ``Target``, which
the library never imports.
"""

from __future__ import annotations

import importlib.util

from ..targets import KernelDialect


def suite_kernels(lang: str, suffix: str, *, binary: bool = False, named_by_option: bool = False) -> KernelDialect:
    """A dialect of the conformance suite's own kernels: ``conformance/kernels/<lang>/<name><suffix>``."""
    from ..spec import conformance_dir

    return KernelDialect(lang, conformance_dir() / "kernels" / lang, suffix, binary, named_by_option)


def python_package_missing(module: str, install: str) -> str | None:
    """What to say when the Python package providing ``module`` is not importable, else None."""
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package of a dotted name is missing
        found = False
    return None if found else f"Python package {module} is missing: {install}"
