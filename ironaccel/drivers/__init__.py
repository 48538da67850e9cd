"""The built-in backends' driver declarations, registered like any plugin's (``backends.BUILTIN_DRIVERS``).

They live here, apart from the backends, while the backend modules are being split into packages; each
module is to move beside its backend (``backends/cuda/drivers.py``, ``backends/vulkan/drivers.py``) with only
the registry's spec strings changing.
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
