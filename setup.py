"""The one thing pyproject.toml cannot declare: the optional C extension ``ironaccel._fast`` (the compiled
hot path, see ironaccel/native.py). ``optional=True``: without a C compiler the install still succeeds and
ironaccel runs its pure-Python path; a checkout on PYTHONPATH builds the same source on first use. The build
embeds its sources' hash (ironaccel/sourcehash.py, loaded by path: building must not import ironaccel), which
ironaccel.native compares with the sources before it uses the extension."""

import importlib.util
from pathlib import Path

from setuptools import Extension, setup

_spec = importlib.util.spec_from_file_location("sourcehash", "ironaccel/sourcehash.py")
sourcehash = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sourcehash)
SOURCES = sourcehash.fast_sources(Path("ironaccel"))

setup(ext_modules=[Extension("ironaccel._fast", [str(f) for f in SOURCES if f.suffix == ".c"],
                             define_macros=[sourcehash.define(SOURCES)], extra_compile_args=["-O2"],
                             libraries=["dl"], optional=True)])
