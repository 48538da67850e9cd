"""The compiled hot path (``ironaccel/_fast_c/``): found installed, else built here on demand, else absent.

One C source, two ways to a built module: ``pip install`` compiles it as the extension ``ironaccel._fast``
(setup.py, ``optional=True``: an install without a compiler still succeeds), and a checkout used from
``PYTHONPATH`` compiles it on first use with the system compiler into
``cache_dir()/fast/<sha256 of the source, flags and Python ABI>/``, as ``ironaccel.fakes`` builds the fake
libcuda. ``load()`` returns None (the pure-Python path) when ``IRONACCEL_PURE_PYTHON=1`` or when neither
exists nor can be built; it never raises.

Every build embeds the hash of the sources it was built from (``SOURCE_HASH``, ``sourcehash.py``). A build
whose hash is not that of the sources here (an in-tree ``_fast*.so`` left by an earlier ``pip install -e .``,
a tampered cache) is never used: ``load()`` builds the sources into the cache instead, or, where that fails,
runs pure Python, and says which once (a RuntimeWarning; ``why_not``). ``loaded_hash()`` is what a results
file records: the hash the loaded module reports, not one computed from the sources.

Three users: the CUDA backend (``native.fast``, once libcuda is loaded), the MemPool, on every backend
(``pool.py`` picks its base classes when it is imported, so a checkout's first ``import ironaccel`` builds it),
and the Vulkan backend's recording of launches and graph replays (``backends/vulkan/record.py``).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import warnings
from pathlib import Path
from types import ModuleType

from . import cbuild
from .errors import NotAvailable
from .sourcehash import fast_sources, source_hash

SOURCES = fast_sources(Path(__file__).parent)
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
        _fast = _installed()
        stale = _stale(_fast)
        if _fast is None or stale:
            try:
                _fast = _import(build())
            except (OSError, ImportError, subprocess.SubprocessError, NotAvailable) as exc:
                why_not = f"{stale}{'; ' if stale else ''}{type(exc).__name__}: {exc}"
                if stale:
                    warnings.warn(f"{stale}: it is not used, and no fresh build could be made: pure Python "
                                  f"({type(exc).__name__}: {exc})", RuntimeWarning, stacklevel=2)
                return None
            fresh_stale = _stale(_fast)
            if fresh_stale:  # the cache holds a build of other sources under this source hash
                why_not = fresh_stale
                warnings.warn(f"{fresh_stale}: it is not used: pure Python", RuntimeWarning, stacklevel=2)
                return None
            if stale:
                warnings.warn(f"{stale}: it is not used: a fresh build of the sources is, {_fast.__file__}",
                              RuntimeWarning, stacklevel=2)
        sys.modules[_fast.__name__] = _fast
        _loaded = _fast
    return _loaded


def sources_hash() -> str | None:
    """The hash of the sources here (what a build of them embeds); None where they are not shipped."""
    return source_hash(SOURCES) if all(f.is_file() for f in SOURCES) else None


def loaded_hash() -> str | None:
    """The source hash the loaded compiled module reports (None: pure Python, it is not loaded)."""
    return None if _loaded is None or pure_python_forced() else _loaded.SOURCE_HASH


def _stale(module: ModuleType | None) -> str:
    """Why ``module`` may not be used: it was built from other sources than these ('' when it may, or when
    the sources are not here to compare: an installed wheel ships its build alone)."""
    expected = sources_hash()
    found = getattr(module, "SOURCE_HASH", None)
    if module is None or expected is None or found == expected:
        return ""
    built = f"sources hashed {found}" if found else "sources from before builds recorded their hash"
    return f"{module.__file__} was built from {built}, not from these ({expected})"


def build() -> Path:
    """Compile ``_fast_c/`` once per source hash and Python ABI (cached; safe from parallel processes)."""
    include = sysconfig.get_paths()["include"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return cbuild.build("fast", f"_fast{suffix}", SOURCES, (*CFLAGS, f"-I{include}"), ("-ldl",), key=suffix)


def _installed() -> ModuleType | None:
    """The build pip installed in this package's own folder, if any. Not ``from . import _fast``: where another
    checkout is installed editable, its import hook answers for ``ironaccel._fast`` too, so a copy of the tree
    (the mutation engine's) would run that checkout's build, of the same sources but not built from these files
    (and not with the copy's coverage counters)."""
    spec = importlib.machinery.PathFinder.find_spec("ironaccel._fast", [str(Path(__file__).parent)])
    if spec is None or spec.origin is None:
        return None
    try:
        return _import(Path(spec.origin))
    except ImportError:
        return None


def _import(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader("ironaccel._fast", str(path))
    spec = importlib.util.spec_from_file_location("ironaccel._fast", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
