"""Writes a ``Case`` as a self-contained script: a docstring that says what it shows, the driver's selection,
the kernel source, the launch, the buffers' input, expected and observed bytes (compressed, base64), one
backend's ``run()`` from ``templates/<backend>.py.in`` (raw calls of that backend's Python API; a plugin's
backend ships its own ``repro.py.in`` beside its Backend class) and the common comparison
(``templates/main.py.in``). The script imports numpy and that API, never ironaccel.
"""

from __future__ import annotations

import base64
import io
import json
import re
import textwrap
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from . import Case

#: backend -> (what the script's run() calls, the packages it needs)
BACKENDS = {
    "webgpu": ("wgpu-py (wgpu-native)", "numpy wgpu"),
    "opengl": ("moderngl over headless EGL", "numpy moderngl glcontext"),
    "vulkan": ("the Vulkan API (the `vulkan` package's cffi bindings)", "numpy vulkan"),
    "cuda": ("the CUDA driver API and NVRTC (cuda.bindings)", "numpy cuda-bindings nvidia-cuda-nvrtc"),
}
PLUGIN_TEMPLATE = "repro.py.in"  # a plugin's, beside its Backend class; first line: ``# repro: API | PACKAGES``


def template(backend: str) -> tuple[str, str, str] | None:
    """(what the script's run() calls, the packages it needs, run()'s source) for ``backend``: ironaccel's own
    template, or the one the package of a plugin's Backend class ships; None when there is neither."""
    if backend in BACKENDS:
        api, packages = BACKENDS[backend]
        return api, packages, (resources.files(__package__) / "templates" / f"{backend}.py.in").read_text("utf-8")
    from ...backends import registry

    spec = registry().get(backend)
    if not isinstance(spec, str):
        return None
    module = spec.partition(":")[0]
    shipped = resources.files(module.rpartition(".")[0] or module) / PLUGIN_TEMPLATE
    if not shipped.is_file():
        return None
    first, _, body = shipped.read_text("utf-8").partition("\n")
    api, _, packages = first.removeprefix("# repro:").partition("|")
    return api.strip(), packages.strip(), body


def _literal(source: str | bytes) -> str:
    """The kernel source as a Python literal: a raw triple-quoted string when it can be one, else base64 bytes."""
    if isinstance(source, bytes):
        return f"base64.b64decode({_b64(source)})"
    if '"""' not in source and not source.endswith("\\"):
        return f'r"""{source}"""'
    return repr(source)


def _comment(case: Case) -> str:
    """For a binary kernel, the text it was compiled from, as comment lines ("" for none)."""
    if not case.readable:
        return ""
    lines = [f"# SOURCE is {case.lang} compiled from this source (the suite's file of kernel {case.kernel!r}):"]
    return "\n".join(lines + [f"#   {ln}".rstrip() for ln in case.readable.splitlines()]) + "\n"


def _b64(data: bytes) -> str:
    lines = textwrap.wrap(base64.b64encode(data).decode(), 100)
    return "(\n" + "".join(f'    b"{ln}"\n' for ln in lines) + ")"


def _data(case: Case) -> bytes:
    arrays = {}
    for k, (i, e, o) in enumerate(zip(case.inputs, case.expected, case.observed)):
        arrays.update({f"in{k}": i, f"expected{k}": e, f"observed{k}": o})
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def script(case: Case, backend: str, environment: dict[str, str]) -> str:
    from ... import __version__

    api, packages, run = template(backend)
    said = textwrap.shorten(case.test["message"].replace(chr(34) * 3, chr(39) * 3), 600) or case.test["outcome"]
    message = "\n".join(textwrap.wrap(said, 110, initial_indent="    ", subsequent_indent="    "))
    env = {k: v for k, v in environment.items() if k != "IRONACCEL_TARGET"}
    header = f'''\
"""{case.test["id"]} on {case.target}: a standalone reproducer written by `ironaccel repro` (ironaccel {__version__}).

The conformance test {case.test["id"]} (clauses {", ".join(case.test["clauses"])}) fails on {case.target}
({case.device}, driver {case.driver_version or "version not reported"}); the suite said ({case.test["outcome"]}):
{message}

Launch {case.launch + 1} of its {case.launches} kernel launch(es), `{case.kernel}` ({case.lang}) over a grid of
{tuple(case.grid)} blocks of {tuple(case.block)} threads, leaves values that differ from those {case.reference}
computes from the same inputs. This script makes that one launch through {api} alone (no ironaccel) and
compares each buffer with the reference's values ("want"); "ironaccel saw" is what the suite read back on
{case.target} where it differs from what this script reads.

Needs: pip install {packages}.  Run: python3 repro.py
Exit status 1 and the wrong values when the driver shows the bug, 0 when every value is right.
"""

import base64
import io
import os
import re
import sys

import numpy as np

# The driver under test, chosen as ironaccel chose it (loaders read these when they start: the script restarts
# itself once with them; a variable already set in your environment wins).
ENVIRONMENT = {env!r}
if any(k not in os.environ for k in ENVIRONMENT):
    os.execve(sys.executable, [sys.executable, *sys.argv], {{**ENVIRONMENT, **os.environ}})

DEVICE = {re.escape(case.device)!r}  # the device the test failed on (a regular expression)
ENTRY = {case.kernel!r}
LANG = {case.lang!r}
OPTIONS = {tuple(case.options)!r}  # the compiler options the suite passed
GRID = {tuple(case.grid)!r}
BLOCK = {tuple(case.block)!r}
ARGS = {case.args!r}  # in launch order: ("buffer", k) or ("scalar", dtype, value)
BUFFERS = {len(case.inputs)}
SOURCE = {_literal(case.source)}
{_comment(case)}# per buffer k: in<k> (its bytes before the launch), expected<k> ({case.reference}'s after), observed<k> ({case.target}'s)
DATA = np.load(io.BytesIO(base64.b64decode({_b64(_data(case))})))

'''
    return header + run + (resources.files(__package__) / "templates" / "main.py.in").read_text(encoding="utf-8")


def write(case: Case, backend: str, environment: dict[str, str], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "repro.py"
    path.write_text(script(case, backend, environment), encoding="utf-8")
    (out / "case.json").write_text(json.dumps({
        "test": case.test["id"], "target": case.target, "reference": case.reference, "device": case.device,
        "driver_version": case.driver_version, "launch": case.launch, "kernel": case.kernel, "lang": case.lang,
        "grid": case.grid, "block": case.block, "args": case.args}, indent=1) + "\n", encoding="utf-8")
    return path
