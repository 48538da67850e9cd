"""Probe-only backends: runtimes ironaccel can detect but cannot run work on yet.

rocm, metal, d3d12, levelzero, qnn, tpu and neuron each look for their runtime so that
``ironaccel devices`` can say what this machine has. None has a compute path, so every probe reports
``available=False`` (and ``compute=False``); the reason says whether the runtime was found, or what was
searched. ``open_device`` always raises NotAvailable.

One implementation, driven by a table: each backend class is a name plus a ``Runtime`` record (libraries
to dlopen, platform, how to read a version or a device count). Decisions:

* ``probe()`` never raises (the ``Backend`` contract). A library that fails to load with OSError is "not
  found"; any other exception from ctypes or from a version reader is caught at the probe boundary and
  reported in the reason, because a broken or exotic runtime must not break ``ironaccel.backends()``.
* Library names are the Linux ones (plus the runtime's usual install folders); Metal and D3D12 are gated by
  ``sys.platform`` first, so they never touch ctypes elsewhere.
* Versions come from the runtime when that is one safe call (HIP), else from the loaded file's name
  (``libze_loader.so.1.17.6`` -> ``1.17.6``), else stay empty.
* ``device_count`` asks the runtime only where one well-known call answers it (HIP); elsewhere it raises
  NotAvailable rather than guess.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import platform
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from ..api import Backend, BackendInfo, Device
from ..errors import NotAvailable

__all__ = [
    "Runtime",
    "ProbeBackend",
    "RocmProbe",
    "MetalProbe",
    "D3D12Probe",
    "LevelZeroProbe",
    "QnnProbe",
    "TpuProbe",
    "NeuronProbe",
]

NO_COMPUTE = "no compute path in ironaccel yet"


@dataclass(frozen=True)
class Runtime:
    """What one probe-only backend looks for."""

    title: str  # "AMD ROCm HIP runtime": used in reasons
    #: Each entry is one required library, given as candidate names; the first that loads wins.
    libraries: tuple[tuple[str, ...], ...]
    #: Absolute candidate paths tried after the loader's search (install folders, environment variables),
    #: matched to a library by file name.
    extra_paths: Callable[[], list[str]] = field(default=lambda: [])
    platform: str = ""  # sys.platform prefix the runtime exists on; "" for any
    install: str = ""  # how a user gets the runtime, appended to "not found" reasons
    version: Callable[[list[ctypes.CDLL]], str] | None = None  # None: from the library file's name
    count: Callable[[list[ctypes.CDLL]], int] | None = None  # None: device_count raises NotAvailable


@dataclass
class _Search:
    """The outcome of looking for a runtime: the loaded libraries, or why there are none."""

    loaded: list[tuple[str, ctypes.CDLL]]
    missing: str = ""  # empty when every library loaded

    @property
    def names(self) -> str:
        return ", ".join(name for name, _ in self.loaded)


def _absent(candidate: str, exc: OSError) -> bool:
    """Did dlopen fail because ``candidate`` itself is not there (rather than a dependency, or a bad file)?

    glibc says "<name>: cannot open shared object file: No such file or directory" — naming the missing
    dependency instead when that is what is missing, which must be reported, not taken for "not found"."""
    msg = str(exc)
    names_candidate = msg.startswith(f"{candidate}:") or msg.startswith(f"dlopen({candidate},")
    return names_candidate and any(s in msg.lower() for s in ("no such file", "not found"))


def _under(env: str, *parts: str) -> list[str]:
    root = os.environ.get(env)
    return [os.path.join(root, *parts)] if root else []


def _file_version(lib: ctypes.CDLL) -> str:
    """``1.17.6`` from the real file behind ``lib`` (``libze_loader.so.1.17.6``); "" if it says no more
    than the soname's major number."""
    name = getattr(lib, "_name", "") or ""
    path = name if os.path.isabs(name) else ""
    if not path and os.path.exists("/proc/self/maps"):
        stem = os.path.basename(name).split(".so")[0] + ".so"
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            path = next((p for line in maps if os.path.basename(p := line.split()[-1]).startswith(stem)), "")
    m = re.search(r"\.so\.(\d+(?:\.\d+)+)$", os.path.realpath(path)) if path else None
    return m[1] if m else ""


def _hip_version(libs: list[ctypes.CDLL]) -> str:
    v = ctypes.c_int()
    if libs[0].hipRuntimeGetVersion(ctypes.byref(v)) != 0:
        return ""
    # HIP_VERSION = major * 10_000_000 + minor * 100_000 + patch
    return f"{v.value // 10_000_000}.{v.value // 100_000 % 100}.{v.value % 100_000}"


def _hip_device_count(libs: list[ctypes.CDLL]) -> int:
    n = ctypes.c_int()
    status = libs[0].hipGetDeviceCount(ctypes.byref(n))
    if status != 0:
        raise NotAvailable("rocm", "libamdhip64.so", f"hipGetDeviceCount returned hipError {status}")
    return n.value


def _libtpu_paths() -> list[str]:
    paths = [os.environ["TPU_LIBRARY_PATH"]] if os.environ.get("TPU_LIBRARY_PATH") else []
    try:
        spec = importlib.util.find_spec("libtpu")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        paths += [os.path.join(loc, "libtpu.so") for loc in spec.submodule_search_locations]
    return paths


def _platform_version(_: list[ctypes.CDLL]) -> str:
    return platform.mac_ver()[0] if sys.platform == "darwin" else platform.version()


class ProbeBackend(Backend):
    """A backend that only detects its runtime. Subclasses set ``name`` and ``runtime``."""

    compute = False
    runtime: ClassVar[Runtime]

    def probe(self) -> BackendInfo:
        try:
            search = self._search()
            if search.missing:
                return BackendInfo(self.name, False, search.missing, compute=False)
            return BackendInfo(
                self.name, False, f"runtime found ({search.names}): {NO_COMPUTE}", self._version(search), False
            )
        except Exception as exc:  # never raise from probe: see the module docstring
            return BackendInfo(
                self.name, False, f"probing the {self.runtime.title} failed: {type(exc).__name__}: {exc}",
                compute=False,
            )

    def device_count(self) -> int:
        search = self._search()
        if search.missing:
            raise NotAvailable(self.name, self._primary_library(), search.missing)
        if self.runtime.count is None:
            raise NotAvailable(self.name, search.names, f"the {self.runtime.title} is present, but ironaccel has "
                               "no compute path for it and does not ask it for a device count")
        return self.runtime.count([lib for _, lib in search.loaded])

    def open_device(self, index: int = 0, **options: Any) -> Device:
        """NotAvailable before the index is checked: a probe may not know its device count."""
        return self._open_device(index, **options)

    def _open_device(self, index: int, **options: Any) -> Device:
        try:
            search = self._search()
        except Exception as exc:  # the error below matters more than why the search broke
            search = _Search([], f"probing failed: {type(exc).__name__}: {exc}")
        if search.missing:
            raise NotAvailable(self.name, self._primary_library(), f"no compute path yet, and {search.missing}")
        raise NotAvailable(self.name, search.names, f"no compute path yet: the {self.runtime.title} is present, "
                           "but ironaccel cannot run work on it")

    def _primary_library(self) -> str:
        return self.runtime.libraries[0][0]

    def _version(self, search: _Search) -> str:
        libs = [lib for _, lib in search.loaded]
        try:
            return self.runtime.version(libs) if self.runtime.version else _file_version(libs[0])
        except Exception:  # a version is a nicety: a runtime that will not say is still found
            return ""

    def _search(self) -> _Search:
        rt = self.runtime
        if rt.platform and not sys.platform.startswith(rt.platform):
            return _Search([], f"the {rt.title} exists only on {rt.platform}; this is {sys.platform}")
        loaded: list[tuple[str, ctypes.CDLL]] = []
        extra = rt.extra_paths()
        for candidates in rt.libraries:
            searched, failures = [], []
            for candidate in [*candidates, *(p for p in extra if os.path.basename(p) in candidates)]:
                searched.append(candidate)
                try:
                    loaded.append((candidate, ctypes.CDLL(candidate)))
                    break
                except OSError as exc:
                    if not _absent(candidate, exc):
                        failures.append(str(exc))
            else:
                why = f"; one failed to load: {failures[0]}" if failures else ""
                fix = f"; {rt.install}" if rt.install else ""
                return _Search(loaded, f"no {rt.title} (searched {', '.join(searched)}){why}{fix}")
        return _Search(loaded)


class RocmProbe(ProbeBackend):
    name = "rocm"
    runtime = Runtime(
        "AMD ROCm HIP runtime",
        (("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"),),
        extra_paths=lambda: _under("ROCM_PATH", "lib", "libamdhip64.so") + ["/opt/rocm/lib/libamdhip64.so"],
        install="install ROCm: https://rocm.docs.amd.com",
        version=_hip_version,
        count=_hip_device_count,
    )


class MetalProbe(ProbeBackend):
    name = "metal"
    runtime = Runtime(
        "Apple Metal framework",
        (("/System/Library/Frameworks/Metal.framework/Metal",),),
        platform="darwin",
        version=_platform_version,
    )


class D3D12Probe(ProbeBackend):
    name = "d3d12"
    runtime = Runtime("Direct3D 12 runtime", (("d3d12.dll",),), platform="win32", version=_platform_version)


class LevelZeroProbe(ProbeBackend):
    name = "levelzero"
    runtime = Runtime(
        "oneAPI Level Zero loader",
        (("libze_loader.so.1", "libze_loader.so"),),
        install="install Intel's compute runtime: apt-get install libze1 intel-opencl-icd",
    )


class QnnProbe(ProbeBackend):
    name = "qnn"
    runtime = Runtime(
        "Qualcomm QNN HTP backend",
        (("libQnnHtp.so",),),
        extra_paths=lambda: _under("QNN_SDK_ROOT", "lib", "x86_64-linux-clang", "libQnnHtp.so")
        + _under("QNN_SDK_ROOT", "lib", "aarch64-ubuntu-gcc9.4", "libQnnHtp.so"),
        install="install the Qualcomm AI Engine Direct SDK and set QNN_SDK_ROOT",
    )


class TpuProbe(ProbeBackend):
    name = "tpu"
    runtime = Runtime(
        "Google TPU runtime (libtpu)",
        (("libtpu.so",),),
        extra_paths=_libtpu_paths,
        install="on a Cloud TPU VM: pip install libtpu, or set TPU_LIBRARY_PATH",
    )


class NeuronProbe(ProbeBackend):
    name = "neuron"
    runtime = Runtime(
        "AWS Neuron runtime",
        (("libnrt.so.1", "libnrt.so"),),
        extra_paths=lambda: ["/opt/aws/neuron/lib/libnrt.so.1"],
        install="on an AWS Inferentia/Trainium instance: install aws-neuronx-runtime-lib",
    )
