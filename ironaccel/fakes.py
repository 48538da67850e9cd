"""The fake libcuda (fakes/cuda): build it, load it before cuda.bindings does, and drive its control API.

The fake is a real ``libcuda.so.1`` compiled from C with the system compiler into
``cache_dir()/fakecuda/<sha256 of the sources>/libcuda.so.1``. cuda.bindings (12.x and 13.x) accepts an
already-loaded driver found by its soname, so ``load()`` must run before cuda.bindings first touches the
driver; a child process gets it through ``child_env()`` (LD_LIBRARY_PATH) instead.

With it comes the simulated toolchain (fakes/cuda/toolchain): shims of NVRTC and nvJitLink under the real
libraries' sonames that forward every call to the real library and make the cubins they return carry the
program's PTX, which the fake runs. cuda.pathfinder (which loads both for cuda.bindings) takes an
already-loaded library of the soname first, so ``load()`` loads the shims before it, and ``child_env()``
preloads them (LD_PRELOAD).
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

from . import cbuild
from .errors import NotAvailable

__all__ = ["IDENTITY", "source_dir", "build", "toolchain", "load", "child_env", "Control"]

#: What ``ironaccel_fake_identity()`` returns; the CUDA backend compares against it.
IDENTITY = "ironaccel fake libcuda"

CFLAGS = ("-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-ffp-contract=off",
          "-Wl,-soname,libcuda.so.1")
LIBS = ("-lpthread", "-lm", "-ldl")  # dl: the driver version looks for a loadable NVRTC
#: With IRONACCEL_FAKE_SANITIZE=1 the fake is built with AddressSanitizer and UndefinedBehaviorSanitizer (every
#: report fatal), cached apart (the flags are part of the cache key). A Python process can load that build only
#: with the compiler's libasan preloaded: tests/fakes/fakeprobe.py's sanitizer_env() says how.
SANITIZE_CFLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer", "-g")


def source_dir() -> Path:
    """fakes/cuda in a checkout, or the copy shipped inside the package."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "fakes" / "cuda", here / "fakes_cuda"):
        if (candidate / "fake.h").is_file():
            return candidate
    raise NotAvailable("cuda", "fake libcuda sources", f"searched {here.parent / 'fakes' / 'cuda'}")


def _sources(src: Path) -> list[Path]:
    return sorted(p for p in src.iterdir() if p.suffix in (".c", ".h"))


def build() -> Path:
    """Compiles the fake once per source hash (cached); safe to call from parallel processes."""
    flags = CFLAGS + (SANITIZE_CFLAGS if os.environ.get("IRONACCEL_FAKE_SANITIZE") == "1" else ())
    return cbuild.build("fakecuda", "libcuda.so.1", _sources(source_dir()), flags, LIBS)


#: The toolchain libraries shimmed: cuda.pathfinder's name -> the variable naming the real library for the
#: shim, and the shim's own source beside toolchain/shim.c.
SHIMMED = {"nvrtc": ("IRONACCEL_FAKE_NVRTC_LIBRARY", "nvrtc.c"),
           "nvJitLink": ("IRONACCEL_FAKE_NVJITLINK_LIBRARY", "nvjitlink.c")}
_SHIM_CFLAGS = ("-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden")
_FIND_REAL = """import sys
from cuda.pathfinder import load_nvidia_dynamic_lib
for name in sys.argv[1:]:
    try:
        print(name, load_nvidia_dynamic_lib(name).abs_path)
    except Exception:
        print(name)
"""


@functools.cache
def _real_toolchain() -> dict[str, str]:
    """cuda.pathfinder's name -> path of the real library, for those found: from the shims' variables
    when set (a child of a fake-target process), else asked of cuda.pathfinder in a fresh interpreter
    (loading it here would make it, not the shim, the library found by soname), with no shim preloaded."""
    found = {name: os.environ[var] for name, (var, _) in SHIMMED.items() if os.environ.get(var)}
    missing = [name for name in SHIMMED if name not in found]
    if missing:
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        try:
            proc = subprocess.run([sys.executable, "-c", _FIND_REAL, *missing], capture_output=True, text=True,
                                  env=env, timeout=120)
        except subprocess.TimeoutExpired:
            return found
        for line in proc.stdout.splitlines():
            name, _, path = line.partition(" ")
            if name in missing and path:
                found[name] = path
    return found


def toolchain() -> dict[str, tuple[Path, str]]:
    """Builds the toolchain shims (cached): cuda.pathfinder's name -> (shim, real library it forwards to),
    for each library this machine has (none without cuda.pathfinder or the NVIDIA wheels)."""
    src = source_dir() / "toolchain"
    shims = {}
    for name, path in _real_toolchain().items():
        soname = re.match(r"lib[\w.-]*?\.so\.\d+", Path(path).name)  # libnvrtc.so.13(.5.37) -> libnvrtc.so.13
        if soname is None:
            continue
        sources = [src / "shim.h", src / "shim.c", src / SHIMMED[name][1]]
        shim = cbuild.build("faketoolchain", soname.group(0), sources,
                            (*_SHIM_CFLAGS, f"-Wl,-soname,{soname.group(0)}"), ("-lpthread", "-ldl"))
        shims[name] = (shim, path)
    return shims


_loaded: ctypes.CDLL | None = None


def load() -> ctypes.CDLL:
    """Builds and loads the fake globally, so cuda.bindings finds it by soname instead of a real driver.

    Must run before cuda.bindings loads the driver in this process, and before it loads NVRTC or nvJitLink
    for their shims to be the ones found; once loaded the fake stays.
    """
    global _loaded
    if _loaded is None:
        for name, (shim, real) in toolchain().items():
            os.environ[SHIMMED[name][0]] = real  # read by the shim at its first call
            ctypes.CDLL(str(shim), mode=ctypes.RTLD_GLOBAL)
        _loaded = ctypes.CDLL(str(build()), mode=ctypes.RTLD_GLOBAL)
        _loaded.ironaccel_fake_identity.restype = ctypes.c_char_p
        _loaded.ironaccel_fake_identity.argtypes = []
    return _loaded


def child_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment in which a child process loads the fake as libcuda.so.1, and the toolchain shims."""
    env = dict(os.environ if base is None else base)
    preload = []
    for name, (shim, real) in toolchain().items():
        env[SHIMMED[name][0]] = real
        preload.append(str(shim))
    if preload:
        # what was preloaded stays first: a sanitizer runtime (IRONACCEL_FAKE_SANITIZE) must be the first library
        kept = [p for p in env.get("LD_PRELOAD", "").split(":") if p and p not in preload]
        env["LD_PRELOAD"] = ":".join(kept + preload)
    lib_dir = str(build().parent)
    old = env.get("LD_LIBRARY_PATH", "")
    env["LD_LIBRARY_PATH"] = lib_dir + (os.pathsep + old if old else "")
    env["IRONACCEL_CUDA_DRIVER"] = "fake"
    return env


class Control:
    """ctypes wrapper of the fake's control API (faults, counts, allocations, reports)."""

    def __init__(self, lib: ctypes.CDLL | None = None):
        self.lib = lib or load()
        sig = {
            "ironaccel_fake_identity": (ctypes.c_char_p, []),
            "ironaccel_fake_inject": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_int]),
            "ironaccel_fake_reset": (None, []),
            "ironaccel_fake_call_count": (ctypes.c_int64, [ctypes.c_char_p]),
            "ironaccel_fake_live_allocations": (ctypes.c_uint64, []),
            "ironaccel_fake_live_bytes": (ctypes.c_uint64, []),
            "ironaccel_fake_set_memory_limit": (None, [ctypes.c_uint64]),
            "ironaccel_fake_last_report": (ctypes.c_char_p, []),
            "ironaccel_fake_entry_points": (ctypes.c_char_p, []),
        }
        for name, (restype, argtypes) in sig.items():
            fn = getattr(self.lib, name)
            fn.restype, fn.argtypes = restype, argtypes

    def identity(self) -> str:
        return self.lib.ironaccel_fake_identity().decode()

    def inject(self, entry_point: str, nth_call: int, code: int) -> None:
        """Fail the ``nth_call``-th call from now (1 = the next) of ``entry_point`` with CUresult ``code``."""
        if self.lib.ironaccel_fake_inject(entry_point.encode(), int(nth_call), int(code)) != 0:
            raise ValueError(f"cannot inject into {entry_point!r} (unknown entry point or nth_call < 1)")

    def reset(self) -> None:
        """Forget injected faults and zero the call counts."""
        self.lib.ironaccel_fake_reset()

    def call_count(self, entry_point: str) -> int:
        n = self.lib.ironaccel_fake_call_count(entry_point.encode())
        if n < 0:
            raise ValueError(f"{entry_point!r} is not implemented by the fake")
        return n

    def live_allocations(self) -> int:
        return self.lib.ironaccel_fake_live_allocations()

    def live_bytes(self) -> int:
        return self.lib.ironaccel_fake_live_bytes()

    def set_memory_limit(self, nbytes: int) -> None:
        self.lib.ironaccel_fake_set_memory_limit(int(nbytes))

    def last_report(self) -> str:
        """The last memcheck / launch-failure report, '' when none."""
        return self.lib.ironaccel_fake_last_report().decode()

    def entry_points(self) -> list[str]:
        return self.lib.ironaccel_fake_entry_points().decode().split()
