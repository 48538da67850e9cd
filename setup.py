"""The one thing pyproject.toml cannot declare: the optional C extension ``ironaccel._fast`` (the compiled
hot path, see ironaccel/native.py). ``optional=True``: without a C compiler the install still succeeds and
ironaccel runs its pure-Python path; a checkout on PYTHONPATH builds the same source on first use."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("ironaccel._fast", ["ironaccel/_fast.c"], extra_compile_args=["-O2"],
                             libraries=["dl"], optional=True)])
