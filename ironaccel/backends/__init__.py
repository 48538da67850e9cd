"""The backend registry.

The built-in backends are listed in ``BUILTIN`` (so a plain checkout on ``PYTHONPATH`` works without
installing); other distributions add backends through the entry-point group ``ironaccel.backends``, each
entry naming a ``Backend`` subclass. Backend modules import their native runtime lazily, so loading the
registry never fails because a runtime is missing.
"""

from __future__ import annotations

import importlib
from functools import cache
from importlib.metadata import entry_points

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


def _load(spec: str) -> type[Backend]:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


@cache
def registry() -> dict[str, str]:
    """Backend name -> "module:Class", built-ins first, then entry points of other distributions."""
    names = dict(BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        names.setdefault(ep.name, ep.value)
    return names


@cache
def get(name: str) -> Backend:
    """The backend instance registered under ``name``; NotAvailable when unknown or unloadable."""
    spec = registry().get(name)
    if spec is None:
        raise NotAvailable(name, "backend", f"no backend named {name!r}; registered: {', '.join(registry())}")
    try:
        return _load(spec)()
    except Exception as exc:  # a broken plugin must not break enumeration
        raise NotAvailable(name, spec, f"could not load the backend: {type(exc).__name__}: {exc}") from exc


def infos() -> list[BackendInfo]:
    """A BackendInfo for every registered backend; never raises."""
    out = []
    for name in registry():
        try:
            out.append(get(name).probe())
        except NotAvailable as exc:
            out.append(BackendInfo(name, False, exc.detail))
    return out
