"""Targets: a backend on one named driver (``cuda/fake``, ``vulkan/lavapipe``, ``webgpu/radv``, ...).

A target is data that a backend's distribution declares, built-ins and third parties alike: this module's
registry loads each backend's driver list — the built-ins' from ``ironaccel.cts.drivers``, a plugin's from
its entry point in group ``ironaccel.drivers`` — and ``TARGETS`` is their union. A target says

* whether its driver is hardware or simulated (a software driver, a fake: its passes never count as hardware);
* ``select``: the environment that makes a child process pick its driver (an ICD json through
  VK_DRIVER_FILES, IRONACCEL_CUDA_DRIVER=fake for the fake libcuda); each target runs in its own process;
* ``recognise``: the harness's check that the device it got is this driver, so a silent fallback to another
  adapter fails the run instead of passing it;
* ``requirements``: what this machine lacks to run it, and how to fix that (None: nothing);
* where its conformance kernels (one ``KernelDialect`` per language) and its expectations file live, and
  which distributions' versions its results record;
* ``native_op``: which operation names are entry points of its native runtime (ERR-4: what a DriverError's
  ``op`` must be), and ``memory``: how the out-of-memory clause (MEM-7) can exhaust it safely;
* ``sources``: the driver's own sources, when it is built here (the fake libcuda), hashed into its results,
  and ``build_hash``: the source hash a build of them reports (``DeviceInfo.extra["driver_build"]``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..api import DeviceInfo
from ..backends import _declared, _load
from ..backends import get as get_backend
from ..errors import InvalidArgument, NotAvailable
from .spec import conformance_dir


@dataclass(frozen=True)
class KernelDialect:
    """The conformance kernels in one language: ``<folder>/<kernel name><suffix>`` (conformance/kernels/README.md)."""

    lang: str  # as ``Device.compile`` takes it
    folder: Path
    suffix: str
    binary: bool = False  # the files are images (bytes), not text
    named_by_option: bool = False  # the entry point is always ``main``: ``options=("-e", NAME)`` names it (GLSL)

    def source(self, name: str) -> str | bytes | None:
        """Kernel ``name`` in this dialect, or None when the dialect has no file for it."""
        path = self.folder / f"{name}{self.suffix}"
        if not path.is_file():
            return None
        return path.read_bytes() if self.binary else path.read_text(encoding="utf-8")


def _recognises_nothing(info: DeviceInfo) -> bool:
    return False


def _needs_nothing() -> str | None:
    return None


@dataclass(frozen=True)
class Target:
    """One driver of one backend, as its distribution declares it (see the module docstring)."""

    backend: str
    driver: str
    simulated: bool
    select: Mapping[str, str] = field(default_factory=dict)
    recognise: Callable[[DeviceInfo], bool] = _recognises_nothing
    requirements: Callable[[], str | None] = _needs_nothing
    kernels: tuple[KernelDialect, ...] = ()
    expectations: Path | None = None  # None: the suite's own conformance/expectations/<backend>-<driver>.txt
    #: False for a driver only found by scanning this machine (an ICD file): CI's job matrix lists the others.
    always: bool = True
    #: Distributions whose versions a results file records besides ironaccel's own (a plugin, its runtime).
    packages: tuple[str, ...] = ()
    #: Is ``op`` the name of an entry point of this driver's native runtime, as the runtime exports it
    #: (``cuMemAllocAsync``, ``vkAllocateMemory``, ``GPUDevice.create_buffer``)? None: the target does not say,
    #: and ERR-4 fails on it.
    native_op: Callable[[str], bool] | None = None
    #: Where its device memory lives, which decides how MEM-7 exhausts it (``ironaccel.cts.testing.exhaust``):
    #: ``device`` (a GPU's own memory, the fake's limit: allocate until the driver refuses) or ``host`` (a CPU
    #: driver's memory is the process's, committed lazily, so it never refuses on its own: exhaust an address-space
    #: limit in a child process instead). Empty: ``host`` for a simulated driver, ``device`` for hardware.
    memory: str = ""
    #: The sources of the driver itself, where ironaccel or the distribution builds it (the fake libcuda): label
    #: -> file or folder, hashed as the "driver" part of its results (labels, not paths: a checkout and an
    #: installed wheel hash alike). Empty for a driver that comes from elsewhere.
    sources: Mapping[str, Path] = field(default_factory=dict)
    #: For a driver built here: the hash of its sources here as a build of them embeds it (``sourcehash.py``),
    #: which the judge compares with the build a run loaded (its device's ``extra["driver_build"]``). None: not
    #: built here, or the sources are missing.
    build_hash: Callable[[], str | None] = _needs_nothing
    #: A regular expression that the path of this driver's library matches, as the process maps it: the results
    #: file records the libraries of the backend's drivers that a run loaded (``results.driver_evidence``), and
    #: the judge counts a run as hardware only when it loaded this driver's and no simulated driver's. Empty:
    #: the driver has no library to tell (its runs never count as hardware).
    library: str = ""
    #: The environment that turns on this driver's leak check (as compute-sanitizer's ``--leak-check``): memory
    #: still allocated when a context is destroyed or the process exits makes the process's exit status nonzero.
    #: Empty: the driver has no such check (MEM-63 is not-supported on it).
    leak_check: Mapping[str, str] = field(default_factory=dict)
    #: The environment variable that sets this driver's limit on a kernel's run time, in seconds (a display
    #: GPU's watchdog; the fake libcuda's ``IRONACCEL_FAKE_WATCHDOG_S``): KERNEL-148 sets it in a child process.
    #: Empty: the limit cannot be set (KERNEL-148 is not-supported on it).
    kernel_time_limit: str = ""

    @property
    def name(self) -> str:
        return f"{self.backend}/{self.driver}"

    @property
    def memory_kind(self) -> str:
        """``memory``, or its default: ``host`` for a simulated driver, ``device`` for hardware."""
        return self.memory or ("host" if self.simulated else "device")

    @property
    def expectations_file(self) -> Path:
        if self.expectations is not None:
            return self.expectations
        return conformance_dir() / "expectations" / f"{self.backend}-{self.driver}.txt"

    def compile_kernel(self, device: Any, name: str) -> Any:
        """Conformance kernel ``name`` compiled on ``device``: from the first of the device's languages that
        this target has a file for."""
        dialects = {d.lang: d for d in self.kernels}
        for lang in device.languages:
            source = dialects[lang].source(name) if lang in dialects else None
            if source is not None:
                options = ("-e", name) if dialects[lang].named_by_option else ()
                return device.compile(source, lang, options=options).kernel(name)
        where = ", ".join(str(d.folder) for d in self.kernels) or "no kernel folder"
        raise FileNotFoundError(f"no conformance kernel {name!r} for languages {device.languages} in {where}")

    def environment(self) -> dict[str, str]:
        """Variables that make a child process select this target's driver."""
        return {"IRONACCEL_TARGET": self.name, **self.select}

    def library_loaded(self, paths: Iterable[str]) -> str | None:
        """The first of ``paths`` (of loaded libraries) that is this driver's library, or None."""
        return next((p for p in paths if self.library and re.search(self.library, p)), None)

    def matches(self, info: DeviceInfo) -> bool:
        """Is ``info`` a device of this target's driver?"""
        return info.backend == self.backend and self.recognise(info)

    def missing(self) -> str | None:
        """None when this machine can run the target, else what is missing and how to fix it."""
        why = self.requirements()
        if why is not None:
            return why
        try:
            get_backend(self.backend)
        except NotAvailable as exc:
            return f"the {self.backend} backend does not load: {exc.detail}"
        return None


@cache
def _count_in_child(backend: str, select: tuple[tuple[str, str], ...]) -> int:
    code = "import sys\nfrom ironaccel.backends import get\nprint(get(sys.argv[1]).device_count())"
    try:
        proc = subprocess.run([sys.executable, "-c", code, backend], env={**os.environ, **dict(select)},
                              capture_output=True, text=True, timeout=120)
        return int(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else 0
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return 0


def count_devices(backend: str, select: Mapping[str, str]) -> int:
    """How many devices ``backend`` has in a child process with ``select`` in its environment (0 when it
    cannot tell), for a driver's ``requirements``: a driver's manifest (an ICD file) alone does not mean
    this machine has its hardware (Mesa installs one for every GPU family it supports), and loaders read
    their environment once, so only a fresh process can be asked."""
    return _count_in_child(backend, tuple(sorted(select.items())))


DRIVERS_GROUP = "ironaccel.drivers"

#: The built-in backends' driver lists, in an entry point's ``"module:function"`` form, read before the entry
#: points of group ``DRIVERS_GROUP`` (as ``ironaccel.backends.BUILTIN`` is for the backends).
BUILTIN_DRIVERS: dict[str, str] = {
    "cuda": "ironaccel.cts.drivers.cuda:drivers",
    "vulkan": "ironaccel.cts.drivers.vulkan:vulkan_drivers",
    "webgpu": "ironaccel.cts.drivers.vulkan:webgpu_drivers",
    "opengl": "ironaccel.cts.drivers.opengl:drivers",
}

_registered: dict[str, Any] = {}  # register(): backend name -> "module:function" or the function


def register(backend: str, drivers: str | Callable[[], Iterable[Target]]) -> None:
    """Register ``backend``'s drivers in this process, as its entry point in group ``ironaccel.drivers`` would.

    For tests and programs that embed ironaccel (with ``ironaccel.backends.register`` for the backend itself);
    child processes do not see it: a distribution declares an entry point instead."""
    _registered[backend] = drivers
    registered_drivers.cache_clear()


def unregister(backend: str) -> None:
    """Undo ``register(backend, ...)`` and forget the drivers read so far; built-ins and entry points stay."""
    _registered.pop(backend, None)
    registered_drivers.cache_clear()


def driver_declarations() -> dict[str, Any]:
    """Backend name -> where its drivers are declared: "module:function" (or the function, for ``register``)."""
    return _declared(DRIVERS_GROUP, BUILTIN_DRIVERS, _registered)


@cache
def registered_drivers() -> Mapping[str, Target]:
    """Target name -> Target from every backend's registered drivers (read-only; ``register`` adds more).

    A drivers function that raises is reported as a warning and contributes nothing."""
    found: dict[str, Target] = {}
    for backend, spec in driver_declarations().items():
        try:
            declared = list(_load(spec)())
        except Exception as exc:
            warnings.warn(f"ironaccel: the drivers of backend {backend!r} ({spec}) could not be loaded: "
                          f"{type(exc).__name__}: {exc}", stacklevel=2)
            continue
        for target in declared:
            if target.backend != backend:
                warnings.warn(f"ironaccel: {spec} declared {target.name}, not a driver of {backend!r}; ignored",
                              stacklevel=2)
                continue
            found.setdefault(target.name, target)
    return MappingProxyType(found)


def __getattr__(name: str) -> Mapping[str, Target]:
    if name == "TARGETS":  # computed on first use: drivers are found by scanning this machine
        return registered_drivers()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


TARGETS: Mapping[str, Target]  # name -> Target, every registered backend's drivers (read-only)


def get(name: str) -> Target:
    known = registered_drivers()
    if name not in known:
        raise InvalidArgument("targets.get", f"unknown target {name!r}; known: {', '.join(known)}")
    return known[name]


def standard() -> dict[str, Target]:
    """The targets declared whatever this machine has (``Target.always``): CI's job matrix."""
    return {name: t for name, t in registered_drivers().items() if t.always}


def reported(names: Iterable[str]) -> dict[str, Target]:
    """STATUS.md's targets: the standard ones, and those of ``names`` (its results files) registered here —
    a driver found only by scanning a machine (``vulkan/radv``) gets a row once it has results."""
    names = set(names)
    return {name: t for name, t in registered_drivers().items() if t.always or name in names}
