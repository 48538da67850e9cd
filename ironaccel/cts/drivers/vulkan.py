"""The Vulkan and WebGPU backends' drivers: one target per Vulkan ICD on this machine, for both backends.

The Vulkan loader finds drivers through ICD manifests (``*.json`` naming the driver's library) in its
standard folders; a target selects one by pointing VK_DRIVER_FILES (and the older VK_ICD_FILENAMES) at its
manifest. Each manifest found becomes ``vulkan/<driver>`` and ``webgpu/<driver>``, the driver named from its
library (``libvulkan_lvp.so`` -> lavapipe, ``libvulkan_radeon.so`` -> radv, ``libGLX_nvidia.so.0`` ->
nvidia; an unknown ``libvulkan_foo.so`` -> foo). Whether it is simulated comes from the device type the ICD
reports (``VK_PHYSICAL_DEVICE_TYPE_CPU``: a software driver), asked in a child process (the loader reads
VK_DRIVER_FILES once per process) and cached per manifest and library version in the cache folder; only an
ICD that reports no device (absent, or no GPU of its kind here) takes the kind its name has in
``KNOWN_LIBRARIES``. At run time the opened device's own type decides what the results file records.

lavapipe, SwiftShader and NVIDIA are declared even where no manifest is found, so ``ironaccel doctor`` says
how to get them and CI's job matrix has a fixed list (``Target.always``).

A Vulkan driver can also be run in a configuration of its own, a target named ``<driver>-<configuration>``
(``STAGED``): lavapipe maps device memory into the host, so the backend's staging path (copies through
host-visible staging buffers, the path discrete GPUs take) never runs on it unless IRONACCEL_VK_DIRECT_MAPPING=0
forces it; ``vulkan/lavapipe-staged`` is lavapipe so forced, and with the validation layer's synchronization
validation on (IRONACCEL_VK_VALIDATION=sync), recognised only when its device says it stages and validates
synchronization.

Why synchronization validation, and why there (issue 23): lavapipe and SwiftShader run a command buffer's
commands one after another, so a barrier missing between two of them gives the right result on them and only
the layer's check sees it (a hazard is a validation message, and the conformance plugin fails the test that
left one). On the staged target every copy and fill is a recorded command too, so the check covers the most
commands; a target of its own would cost CI a fourth Vulkan run for the same tests. The layer's own memory
grows with the command buffers it checks, which two tests that measure the process's memory growth see: they
are expected to fail there (conformance/expectations/vulkan-lavapipe-staged.txt) and run on the other targets.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ...api import DeviceInfo
from ...cache import cache_dir
from ..targets import KernelDialect, Target, count_devices
from . import python_package_missing, suite_kernels


@dataclass(frozen=True)
class KnownDriver:
    driver: str
    simulated: bool  # its kind when its ICD reports no device (absent here, or no GPU of its kind)
    words: tuple[str, ...]  # a device of this driver has one of these in its name, vendor or driver name
    fix: str = ""  # how to get it, for drivers declared even when absent


#: Library name (without lib prefix and .so suffix) -> the driver's target name, how its devices are recognised,
#: and its kind for when no device of it can be asked (the device type decides when one can).
KNOWN_LIBRARIES: dict[str, KnownDriver] = {
    "vulkan_lvp": KnownDriver("lavapipe", True, ("llvmpipe",),
                              "install Mesa's Vulkan drivers: `apt-get install mesa-vulkan-drivers libvulkan1` "
                              "(or run ci/provision)"),
    "vk_swiftshader": KnownDriver("swiftshader", True, ("swiftshader",),
                                  "run `ci/provision` (extracts SwiftShader from Debian's chromium-common into the cache)"),
    "GLX_nvidia": KnownDriver("nvidia", False, ("nvidia",),
                              "needs an NVIDIA GPU with its driver's Vulkan ICD (nvidia_icd.json) and libvulkan1"),
    "vulkan_radeon": KnownDriver("radv", False, ("radv",)),
    "amdvlk64": KnownDriver("amdvlk", False, ("amd",)),
    "vulkan_intel": KnownDriver("intel", False, ("intel",)),
    "vulkan_intel_hasvk": KnownDriver("intel_hasvk", False, ("intel",)),
    "vulkan_nouveau": KnownDriver("nvk", False, ("nvk",)),
    "vulkan_dzn": KnownDriver("dozen", False, ("microsoft", "dozen")),
    "vulkan_virtio": KnownDriver("venus", False, ("venus",)),
    "vulkan_freedreno": KnownDriver("turnip", False, ("turnip", "adreno")),
    "vulkan_broadcom": KnownDriver("v3dv", False, ("v3d",)),
    "vulkan_panfrost": KnownDriver("panvk", False, ("panvk", "mali")),
    "vulkan_asahi": KnownDriver("asahi", False, ("apple", "asahi")),
}
KNOWN_LIBRARIES["EGL_nvidia"] = KNOWN_LIBRARIES["GLX_nvidia"]  # headless and container installs name this one
ALWAYS_DECLARED = ("vulkan_lvp", "vk_swiftshader", "GLX_nvidia")


def loader_folders(kind: str) -> list[Path]:
    """Where the Linux loader searches manifests of ``kind`` (``icd.d``, ``explicit_layer.d``), in its order."""
    home = Path.home()
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    config_dirs = (os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")
    data_home = os.environ.get("XDG_DATA_HOME") or str(home / ".local" / "share")
    data_dirs = (os.environ.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share").split(":")
    bases = [config_home, *config_dirs, "/etc", data_home, *data_dirs, "/usr/local/nvidia/share"]
    return list(dict.fromkeys(Path(b) / "vulkan" / kind for b in bases if b))


def icd_folders() -> list[Path]:
    """Where ICD manifests are searched, in the Linux loader's order, then the provisioned SwiftShader."""
    return loader_folders("icd.d") + [cache_dir() / "swiftshader"]


VALIDATION_LAYER_MANIFEST = "VkLayer_khronos_validation.json"


def validation_layer_found() -> bool:
    """Is the Khronos validation layer's manifest where the loader looks (VK_LAYER_PATH replaces the folders)?"""
    paths = os.environ.get("VK_LAYER_PATH", "")
    folders = [Path(p) for p in paths.split(os.pathsep) if p] if paths else loader_folders("explicit_layer.d")
    return any((folder / VALIDATION_LAYER_MANIFEST).is_file() for folder in folders)


@dataclass(frozen=True)
class ICD:
    manifest: Path
    library: str  # as the manifest names it

    @property
    def stem(self) -> str:
        """``/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so`` -> ``vulkan_lvp``."""
        return re.sub(r"\.so(\..*)?$|\.dll$|\.dylib$", "", Path(self.library).name).removeprefix("lib")

    @property
    def known(self) -> KnownDriver:
        found = KNOWN_LIBRARIES.get(self.stem)
        if found is not None:
            return found
        name = re.sub(r"[^a-z0-9_-]+", "_", re.sub(r"^(vulkan_|vk_)", "", self.stem.lower())) or "unknown"
        return KnownDriver(name, False, (name,))


def _read_manifest(path: Path) -> ICD | None:
    """The ICD a manifest names, or None for a file that is not one or whose library is not there."""
    try:
        library = json.loads(path.read_text(encoding="utf-8"))["ICD"]["library_path"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(library, str) or not library:
        return None
    if "/" in library:  # a path (relative ones are relative to the manifest); a bare name is the loader's to find
        resolved = (path.parent / library).resolve()
        if not resolved.is_file():
            return None
    return ICD(path, library)


def discover() -> dict[str, ICD]:
    """Driver name -> its ICD, for every manifest found; the first in search order wins a name, and in a
    folder, manifests of this machine's architecture come first (``lvp_icd.x86_64.json`` before ``.i686``)."""
    machine = platform.machine()
    found: dict[str, ICD] = {}
    for folder in icd_folders():
        try:
            manifests = sorted(folder.glob("*.json"), key=lambda p: (machine not in p.name, p.name))
        except OSError:
            continue
        for path in manifests:
            icd = _read_manifest(path)
            if icd is not None:
                found.setdefault(icd.known.driver, icd)
    return found


#: Run in a child process with VK_DRIVER_FILES naming one manifest: the types of the Vulkan 1.2+ devices that
#: ICD reports (the backend's own instance), as a JSON list; [] when the loader or the driver refuses.
_DEVICE_TYPES_PROBE = """
import json
from ironaccel.backends.vulkan import native
from ironaccel.backends.vulkan.instance import Instance
from ironaccel.errors import IronAccelError
found = []
try:
    instance = Instance(validation=False)
    try:
        ffi, lib = native.vk.ffi, native.vk.lib
        names = ffi.typeof("VkPhysicalDeviceType").elements
        for physical in instance.physical_devices():
            props = ffi.new("VkPhysicalDeviceProperties*")
            lib.vkGetPhysicalDeviceProperties(physical, props)
            found.append(names.get(props.deviceType, str(props.deviceType)))
    finally:
        instance.destroy()
except IronAccelError:
    pass
print(json.dumps(found))
"""
CPU_DEVICE = "VK_PHYSICAL_DEVICE_TYPE_CPU"
DEVICE_TYPES_CACHE = "vulkan-device-types.json"  # in cache_dir(): manifest -> {"version", "types"}
_PROBE_TIMEOUT_S = 60


def _version(icd: ICD) -> str:
    """The manifest's and, when it names one by path, its library's mtimes: a driver upgrade that rewrites
    either is asked again."""
    stamps = [icd.manifest.stat().st_mtime_ns]
    if "/" in icd.library:
        stamps.append((icd.manifest.parent / icd.library).resolve().stat().st_mtime_ns)
    return " ".join(map(str, stamps))


def _start_probe(icd: ICD) -> subprocess.Popen[str]:
    root = str(Path(__file__).resolve().parents[2])  # the folder ironaccel is imported from, checkout or install
    env = {**os.environ, "VK_DRIVER_FILES": str(icd.manifest), "VK_ICD_FILENAMES": str(icd.manifest),
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    return subprocess.Popen([sys.executable, "-c", _DEVICE_TYPES_PROBE], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)


def _answer(proc: subprocess.Popen[str]) -> list[str] | None:
    """The device types a probe printed; [] for a probe killed by a signal (a broken ICD crashed it: asking
    again would crash again); None when the probe itself failed or did not finish in time (asked again)."""
    try:
        out, _ = proc.communicate(timeout=_PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None
    if proc.returncode < 0:
        return []
    try:
        types = json.loads(out.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except (ValueError, IndexError):
        return None
    return [str(t) for t in types] if isinstance(types, list) else None


def _read_cache(path: Path) -> dict[str, dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def device_types(icds: Iterable[ICD]) -> dict[Path, list[str]]:
    """Manifest -> the device types its ICD reports (``VK_PHYSICAL_DEVICE_TYPE_CPU``, ...), from the cache or
    asked in child processes, all at once. Without the vulkan Python package nothing can be asked: {}."""
    if python_package_missing("vulkan", "") is not None:
        return {}
    icds = list(icds)
    path = cache_dir() / DEVICE_TYPES_CACHE
    cached = _read_cache(path)
    versions = {str(icd.manifest): _version(icd) for icd in icds}
    asked = {str(icd.manifest): _start_probe(icd) for icd in icds
             if cached.get(str(icd.manifest), {}).get("version") != versions[str(icd.manifest)]}
    answers = {manifest: _answer(proc) for manifest, proc in asked.items()}
    new = {m: {"version": versions[m], "types": types} for m, types in answers.items() if types is not None}
    if new:
        cached = {**_read_cache(path), **new}  # another process may have written meanwhile
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=path.name, delete=False) as f:
                json.dump(cached, f, indent=1, sort_keys=True)
            os.replace(f.name, path)
        except OSError:  # a read-only cache: asked again next time
            pass
    return {Path(m): cached[m]["types"] for m, version in versions.items()
            if cached.get(m, {}).get("version") == version and isinstance(cached[m].get("types"), list)}


def is_simulated(known: KnownDriver, types: list[str] | None) -> bool:
    """A driver whose devices are all CPUs is simulated; one that reports no device has its name's kind."""
    return all(t == CPU_DEVICE for t in types) if types else known.simulated


#: Drivers that also run as ``vulkan/<driver>-staged``: they map device memory directly by themselves.
STAGED = ("lavapipe",)


def vulkan_native_op(op: str) -> bool:
    """A Vulkan command, as the vulkan package names it (``vkAllocateMemory``)."""
    import vulkan

    return op.startswith("vk") and callable(getattr(vulkan, op, None))


def webgpu_native_op(op: str) -> bool:
    """A method of one of wgpu-py's GPU classes (``GPUDevice.create_buffer``), which call wgpu-native."""
    import wgpu

    cls, _, method = op.partition(".")
    return cls.startswith("GPU") and callable(getattr(getattr(wgpu, cls, None), method, None))


def _icd_target(backend: str, known: KnownDriver, icd: ICD | None, simulated: bool, kernels: tuple[KernelDialect, ...],
                python_package: tuple[str, str], always: bool, native_op: Callable[[str], bool]) -> Target:
    words = known.words

    def recognise(info: DeviceInfo) -> bool:
        seen = f"{info.name} {info.vendor} {info.driver}".lower()
        return any(w in seen for w in words)

    def requirements() -> str | None:
        why = python_package_missing(*python_package)
        if why is None and ctypes.util.find_library("vulkan") is None:
            why = "the Vulkan loader libvulkan.so.1 is missing: apt-get install libvulkan1"
        if why is None and icd is None:
            why = (f"no {known.driver} Vulkan ICD manifest in the loader's icd.d folders or "
                   f"{cache_dir() / 'swiftshader'}: {known.fix}")
        if why is None and not simulated and count_devices(backend, select) == 0:
            why = f"the {known.driver} Vulkan ICD ({icd.manifest}) finds no device: this machine has no such GPU"
        return why

    select = {} if icd is None else {"VK_DRIVER_FILES": str(icd.manifest), "VK_ICD_FILENAMES": str(icd.manifest)}
    stems = {stem for stem, k in KNOWN_LIBRARIES.items() if k == known} | ({icd.stem} if icd is not None else set())
    library = "/lib(" + "|".join(sorted(map(re.escape, stems))) + r")\.so"
    return Target(backend, known.driver, simulated, select, recognise, requirements, kernels, always=always,
                  native_op=native_op, library=library)


def _drivers(backend: str, kernels: tuple[KernelDialect, ...], python_package: tuple[str, str],
             native_op: Callable[[str], bool]) -> list[Target]:
    found = discover()
    types = device_types(found.values())

    def target(known: KnownDriver, icd: ICD | None, always: bool) -> Target:
        simulated = is_simulated(known, None if icd is None else types.get(icd.manifest))
        return _icd_target(backend, known, icd, simulated, kernels, python_package, always, native_op)

    declared = [KNOWN_LIBRARIES[stem] for stem in ALWAYS_DECLARED]
    always = {k.driver for k in declared}
    return ([target(k, found.get(k.driver), True) for k in declared]
            + [target(icd.known, icd, False) for name, icd in found.items() if name not in always])


def staged(target: Target) -> Target:
    """``target`` with the Vulkan backend's staging path forced (IRONACCEL_VK_DIRECT_MAPPING=0) and synchronization
    validation on (IRONACCEL_VK_VALIDATION=sync), as a target of its own: its device must say it stages
    (``DeviceInfo.extra["direct_mapping"]`` False) and validates synchronization; it needs the validation layer."""
    from ...backends.vulkan.device import DIRECT_MAPPING_ENV
    from ...backends.vulkan.instance import SYNC, VALIDATION_ENV

    def recognise(info: DeviceInfo) -> bool:
        return (target.recognise(info) and info.extra.get("direct_mapping") is False
                and info.extra.get("synchronization_validation") is True)

    def requirements() -> str | None:
        return target.requirements() or (None if validation_layer_found() else (
            f"the Khronos validation layer ({VALIDATION_LAYER_MANIFEST}) is not installed: "
            "apt-get install vulkan-validationlayers (or run ci/provision)"))

    return replace(target, driver=f"{target.driver}-staged", recognise=recognise, requirements=requirements,
                   select={**target.select, DIRECT_MAPPING_ENV: "0", VALIDATION_ENV: SYNC})


def vulkan_drivers() -> list[Target]:
    kernels = (suite_kernels("spirv", ".spv", binary=True), suite_kernels("glsl", ".comp", named_by_option=True))
    out = _drivers("vulkan", kernels, ("vulkan", "pip install vulkan"), vulkan_native_op)
    return out + [staged(t) for t in out if t.driver in STAGED]


def webgpu_drivers() -> list[Target]:
    return _drivers("webgpu", (suite_kernels("wgsl", ".wgsl"),), ("wgpu", "pip install wgpu"), webgpu_native_op)
