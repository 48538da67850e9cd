"""The OpenCL backend's drivers: one target per OpenCL ICD (``/etc/OpenCL/vendors/*.icd``), PoCL always.

An ICD file names the vendor's library; a target narrows the ICD loader to it through OCL_ICD_VENDORS (the
ocl-icd loader: an .icd file) and OCL_ICD_FILENAMES (the Khronos loader: the library). The driver is named
from the library (``libpocl.so.2`` -> pocl, ``libnvidia-opencl.so.1`` -> nvidia, ``libRusticlOpenCL.so.1``
-> rusticl, an unknown ``libfoo.so`` -> foo) and recognised by the platform name its devices report
(``DeviceInfo.driver``). PoCL's CPU device is simulated; at run time the device's own type decides.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from ironaccel.api import DeviceInfo
from ironaccel.cts.targets import KernelDialect, Target, count_devices

HERE = Path(__file__).resolve().parent
VENDORS = Path("/etc/OpenCL/vendors")
KERNELS = (KernelDialect("opencl", HERE / "kernels", ".cl"),)


@dataclass(frozen=True, kw_only=True)  # rows name their fields: a bare True or False says nothing on its own
class KnownDriver:
    driver: str
    simulated: bool
    words: tuple[str, ...]  # one of these is in the platform name of its devices
    fix: str = ""


#: Library stem (no lib prefix, no .so suffix, lower case) -> the driver.
KNOWN_LIBRARIES = {
    "pocl": KnownDriver(driver="pocl", simulated=True, words=("portable computing language",),
                        fix="apt-get install pocl-opencl-icd ocl-icd-libopencl1"),
    "nvidia-opencl": KnownDriver(driver="nvidia", simulated=False, words=("nvidia",)),
    "rusticlopencl": KnownDriver(driver="rusticl", simulated=False, words=("rusticl",)),
    "mesaopencl": KnownDriver(driver="clover", simulated=False, words=("clover",)),
    "amdocl64": KnownDriver(driver="amd", simulated=False, words=("amd accelerated parallel processing",)),
    "igdrcl": KnownDriver(driver="intel", simulated=False, words=("intel(r) opencl",)),
    "intelocl": KnownDriver(driver="intel-cpu", simulated=True, words=("intel(r) opencl",)),
}
ALWAYS_DECLARED = ("pocl",)


@dataclass(frozen=True)
class ICD:
    file: Path
    library: str

    @property
    def stem(self) -> str:
        """``/usr/lib/x86_64-linux-gnu/libpocl.so.2`` -> ``pocl`` (lower case)."""
        return re.sub(r"\.so(\..*)?$", "", Path(self.library).name).removeprefix("lib").lower()

    @property
    def known(self) -> KnownDriver:
        stem = self.stem
        if stem in KNOWN_LIBRARIES:
            return KNOWN_LIBRARIES[stem]
        name = re.sub(r"[^a-z0-9_-]+", "_", stem) or "unknown"
        return KnownDriver(driver=name, simulated=False, words=(name,))


def discover() -> dict[str, ICD]:
    """Driver name -> its ICD for every readable .icd file in VENDORS (the first file wins a name)."""
    found: dict[str, ICD] = {}
    for path in sorted(VENDORS.glob("*.icd")) if VENDORS.is_dir() else ():
        try:
            library = path.read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if library:
            icd = ICD(path, library)
            found.setdefault(icd.known.driver, icd)
    return found


def _target(known: KnownDriver, icd: ICD | None, always: bool) -> Target:
    words = known.words
    select = {} if icd is None else {"OCL_ICD_VENDORS": str(icd.file), "OCL_ICD_FILENAMES": icd.library}

    def recognise(info: DeviceInfo) -> bool:
        return any(w in info.driver.lower() for w in words)

    def requirements() -> str | None:
        if importlib.util.find_spec("pyopencl") is None:
            return "Python package pyopencl is missing: pip install pyopencl"
        if ctypes.util.find_library("OpenCL") is None:
            return "the OpenCL ICD loader libOpenCL.so.1 is missing: apt-get install ocl-icd-libopencl1"
        if icd is None:
            return f"no {known.driver} OpenCL ICD in {VENDORS}: {known.fix}"
        if count_devices("opencl", select) == 0:
            return f"the {known.driver} OpenCL ICD ({icd.file}) finds no device"
        return None

    expectations = HERE / "expectations" / f"opencl-{known.driver}.txt"
    stems = {stem for stem, k in KNOWN_LIBRARIES.items() if k == known} | ({icd.stem} if icd is not None else set())
    library = "(?i)/lib(" + "|".join(sorted(map(re.escape, stems))) + r")\.so"
    return Target("opencl", known.driver, known.simulated, select, recognise, requirements, KERNELS, expectations,
                  always, packages=("ironaccel-opencl", "pyopencl"), library=library)


def drivers() -> list[Target]:
    found = discover()
    out = [_target(KNOWN_LIBRARIES[stem], found.get(KNOWN_LIBRARIES[stem].driver), True) for stem in ALWAYS_DECLARED]
    always = {t.driver for t in out}
    return out + [_target(icd.known, icd, False) for name, icd in found.items() if name not in always]
