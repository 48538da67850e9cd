"""The registry of backends.

A backend distribution registers its ``Backend`` subclass by an entry point in group ``ironaccel.backends``,
named after the backend: ``"package.module:Class"``. (Its drivers, the targets the conformance suite runs
on, it registers in group ``ironaccel.drivers``, which the certification platform reads:
``ironaccel.cts.targets``.)

The built-in backends are not entry points: ``BUILTIN`` lists them in the same ``"module:attribute"`` form,
read by the same loader before the entry points (so a plain checkout on ``PYTHONPATH`` works without
installing, and an entry point cannot take a built-in's name); ``register`` adds to (or overrides) it for one
process (tests, embedding). Backend modules import their native runtime lazily, so loading the registry never
fails because a runtime is missing, and a broken plugin makes its backend unavailable, never the registry.

Every backend package, built-in or a plugin's, names its modules from one vocabulary, so that the same concern
has the same name in each (``tests/test_backend_layout.py`` reads the two lists below and checks every package):

* ``native`` (required) — loading the native runtime, its checked calls, and the one place its errors become
  ironaccel's (with the tables that explain them);
* ``backend`` (required) — the registered ``Backend`` subclass: probe, device count, open;
* ``device`` (required) — the ``Device``: info, limits, capabilities, allocation, compilation, close;
* ``stream`` (required) — streams and events;
* ``module`` (required) — compiled modules and kernels: reflection, pipelines, how launch arguments are packed;
* ``memory`` — buffers and their allocator (CUDA's stay in ``stream``: their compiled core is a stream hot path);
* ``graph`` — captured work and its replay, in a backend that has graphs;
* ``drivers`` — a plugin's targets, its ``ironaccel.drivers`` entry point (the built-ins' are the
  platform's: ``ironaccel.cts.drivers``).

A concern of its own in one backend gets its own module there, listed here with the reason it is not one of
the above:

* ``cuda.fast`` — the stream and event classes that go through the compiled hot paths (``_fast_c/``);
* ``cuda.nvrtc`` — CUDA C++ compilation by NVRTC and its cache: a second native library;
* ``cuda.staging`` — the pinned ring and copy threads behind ``copy_htod`` from pageable memory;
* ``opengl.context`` — EGL devices and the GL thread that owns each context: GL calls run on that thread only;
* ``vulkan.instance`` — the VkInstance and its validation, shared by the Backend's probe and each Device;
* ``vulkan.record`` — a launch's and a graph replay's vkCmd* calls in one call of the compiled extension
  (``_fast_c/vulkan.inc``), or through cffi without it: shared by streams and graphs;
* ``vulkan.spirv`` — reading a SPIR-V module's kernel interface, without a driver;
* ``webgpu.reflect`` — WGSL bindings, uniform members and entry points, which wgpu does not reflect.
"""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from ..api import Backend, BackendInfo
from ..errors import NotAvailable

ENTRY_POINT_GROUP = "ironaccel.backends"

BUILTIN: dict[str, str] = {
    "cuda": "ironaccel.backends.cuda:CudaBackend",
    "vulkan": "ironaccel.backends.vulkan:VulkanBackend",
    "webgpu": "ironaccel.backends.webgpu:WebGPUBackend",
    "rocm": "ironaccel.backends.probes:RocmProbe",
    "metal": "ironaccel.backends.probes:MetalProbe",
    "d3d12": "ironaccel.backends.probes:D3D12Probe",
    "opengl": "ironaccel.backends.opengl:OpenGLBackend",
    "levelzero": "ironaccel.backends.probes:LevelZeroProbe",
    "qnn": "ironaccel.backends.probes:QnnProbe",
    "tpu": "ironaccel.backends.probes:TpuProbe",
    "neuron": "ironaccel.backends.probes:NeuronProbe",
}

_registered_backends: dict[str, Any] = {}  # register(): name -> "module:Class" or a Backend subclass


def register(name: str, backend: str | type[Backend]) -> None:
    """Register ``backend`` (``"module:Class"`` or the class) as ``name`` in this process, as its entry point would.

    For tests and programs that embed ironaccel; a registration made here is not seen by child processes
    (``ironaccel certify`` runs each target in one): a distribution declares an entry point instead."""
    _registered_backends[name] = backend
    _forget()


def unregister(name: str) -> None:
    """Undo ``register(name, ...)``; built-ins and entry points stay."""
    _registered_backends.pop(name, None)
    _forget()


def _forget() -> None:
    registry.cache_clear()
    get.cache_clear()


def _load(spec: Any) -> Any:
    if not isinstance(spec, str):
        return spec
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


def _declared(group: str, builtin: Mapping[str, str], registered: Mapping[str, Any]) -> dict[str, Any]:
    """name -> spec: built-ins, then entry points of other distributions, then this process's registrations."""
    names: dict[str, Any] = dict(builtin)
    for ep in entry_points(group=group):
        names.setdefault(ep.name, ep.value)
    names.update(registered)
    return names


@cache
def registry() -> dict[str, Any]:
    """Backend name -> "module:Class" (or the class itself, for ``register``)."""
    return _declared(ENTRY_POINT_GROUP, BUILTIN, _registered_backends)


@cache
def get(name: str) -> Backend:
    """The backend instance registered under ``name``; NotAvailable when unknown or unloadable."""
    spec = registry().get(name)
    if spec is None:
        raise NotAvailable(name, "backend", f"no backend named {name!r}; registered: {', '.join(registry())}")
    quiet_display_probing()
    try:
        return _load(spec)()
    except Exception as exc:  # a broken plugin must not break enumeration
        raise NotAvailable(name, str(spec), f"could not load the backend: {type(exc).__name__}: {exc}") from exc


def infos() -> list[BackendInfo]:
    """A BackendInfo for every registered backend; never raises."""
    out = []
    for name in registry():
        try:
            out.append(get(name).probe())
        except NotAvailable as exc:
            out.append(BackendInfo(name, False, exc.detail))
    return out


def quiet_display_probing() -> None:
    """Give libwayland-client a private, empty XDG_RUNTIME_DIR when the session has none.

    wgpu-native (and Mesa's WSI) try to connect to a Wayland display on every instance they create; with no
    XDG_RUNTIME_DIR libwayland prints ``error: XDG_RUNTIME_DIR is invalid or not set`` to stderr each time
    (a dozen lines for ``ironaccel devices``). With an empty private folder the connection fails silently, as
    it would on any headless session; a set XDG_RUNTIME_DIR is never touched. Child processes inherit it."""
    if not os.environ.get("XDG_RUNTIME_DIR"):
        private = tempfile.mkdtemp(prefix="ironaccel-xdg-")  # mode 0700, as the XDG spec asks
        atexit.register(shutil.rmtree, private, ignore_errors=True)
        os.environ["XDG_RUNTIME_DIR"] = private
