"""The compiled hot path (``ironaccel/_fast.c``): found installed, else built here on demand, else absent.

One C source, two ways to a built module: ``pip install`` compiles it as the extension ``ironaccel._fast``
(setup.py, ``optional=True``: an install without a compiler still succeeds), and a checkout used from
``PYTHONPATH`` compiles it on first use with the system compiler into
``cache_dir()/fast/<sha256 of the source, flags and Python ABI>/``, as ``ironaccel.fakes`` builds the fake
libcuda. ``load()`` returns None (the pure-Python path) when ``IRONACCEL_PURE_PYTHON=1`` or when neither
exists nor can be built; it never raises.

Two users: the CUDA backend (``driver.fast``, once libcuda is loaded) and the MemPool, on every backend
(``pool.py`` picks its base classes when it is imported, so a checkout's first ``import ironaccel`` builds it).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import subprocess
import sysconfig
from pathlib import Path
from types import ModuleType

from . import cbuild
from .errors import NotAvailable

SOURCE = Path(__file__).with_name("_fast.c")
CFLAGS = ("-O2", "-fPIC", "-shared", "-fvisibility=hidden")  # setup.py builds with the same
PURE_PYTHON = "IRONACCEL_PURE_PYTHON"

_loaded: ModuleType | None = None
why_not = ""  # why load() returned None, for `ironaccel doctor`-style reports and tests


def pure_python_forced() -> bool:
    return os.environ.get(PURE_PYTHON) == "1"


def load() -> ModuleType | None:
    """The compiled module, or None (see the module docstring); cached after the first call."""
    global _loaded, why_not
    if pure_python_forced():
        why_not = f"{PURE_PYTHON}=1"
        return None
    if _loaded is None:
        try:
            from . import _fast  # type: ignore[attr-defined]  # installed by pip
        except ImportError:
            try:
                _fast = _import(build())
            except (OSError, ImportError, subprocess.SubprocessError, NotAvailable) as exc:
                why_not = f"{type(exc).__name__}: {exc}"
                return None
        _loaded = _fast
    return _loaded


def build() -> Path:
    """Compile ``_fast.c`` once per source hash and Python ABI (cached; safe from parallel processes)."""
    include = sysconfig.get_paths()["include"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return cbuild.build("fast", f"_fast{suffix}", [SOURCE], (*CFLAGS, f"-I{include}"), ("-ldl",), key=suffix)


def _import(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader("ironaccel._fast", str(path))
    spec = importlib.util.spec_from_file_location("ironaccel._fast", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
