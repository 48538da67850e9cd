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
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from . import cbuild, sourcehash
from .errors import NotAvailable

__all__ = ["IDENTITY", "source_dir", "build", "source_hash", "driver_dir", "toolchain", "load", "child_env", "check",
           "in_fake_env", "exec_with_fake", "sanitizer_env", "Control"]

#: What ``ironaccel_fake_identity()`` returns; the CUDA backend compares against it.
IDENTITY = "ironaccel fake libcuda"

#: What C only warns about and a build never shows (cbuild keeps a successful build's output to itself) fails
#: it: above all a call to a function no header declares, which C takes to return int and accept anything
#: (export_tables.c called six entry points so). GCC 14 makes these errors by default; older compilers do not.
STRICT_CFLAGS = ("-Werror=implicit-function-declaration", "-Werror=implicit-int", "-Werror=int-conversion",
                 "-Werror=incompatible-pointer-types", "-Werror=return-type")
CFLAGS = ("-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-ffp-contract=off",
          "-Wl,-soname,libcuda.so.1", *STRICT_CFLAGS)
LIBS = ("-lpthread", "-lm", "-ldl")  # dl: the driver version looks for a loadable NVRTC
#: With IRONACCEL_FAKE_SANITIZE=1 the fake is built with AddressSanitizer and UndefinedBehaviorSanitizer (every
#: report fatal), cached apart (the flags are part of the cache key). A Python process can load that build only
#: with the compiler's libasan preloaded: ``sanitizer_env()`` says how.
SANITIZE_CFLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer", "-g")


def sanitizer_env(base: dict[str, str] | None = None) -> dict[str, str] | None:
    """``base`` (default: this process's environment) made one in which a Python process and its children load
    the fake's ASan/UBSan build, or None without libasan: how tests/fakes runs under the sanitizers, and the
    mutant engine's sanitized run of cuda/fake (ci/mutants/modules.py), where a memory error ends the run.

    The ASan runtime must be the first library of the process, and python is not built with it: it is
    preloaded (the compiler's own libasan, ``cc -print-file-name=libasan.so``). detect_leaks=0: the
    interpreter's own allocations at exit are not the fake's; allocator_may_return_null=1: an allocation too
    large fails with NULL as without ASan (the fake must cope), instead of a report. Every UBSan report is fatal
    (-fno-sanitize-recover in SANITIZE_CFLAGS), every ASan report too (halt_on_error, the default). NVRTC's own
    folder goes on LD_LIBRARY_PATH: under ASan's dlopen interceptor NVRTC no longer finds libnvrtc-builtins
    beside itself through its $ORIGIN run path.
    """
    compiler = cbuild.find_compiler()
    found = subprocess.run([compiler, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not found or not Path(found).is_absolute() or not Path(found).exists():
        return None
    env = dict(base if base is not None else os.environ)
    env["LD_PRELOAD"] = ":".join([found] + [p for p in env.get("LD_PRELOAD", "").split(":") if p and p != found])
    env["ASAN_OPTIONS"] = "detect_leaks=0:allocator_may_return_null=1:halt_on_error=1:abort_on_error=0"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    env["IRONACCEL_FAKE_SANITIZE"] = "1"
    nvrtc = _real_toolchain().get("nvrtc")
    if nvrtc:
        folders = [str(Path(nvrtc).parent)] + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
        env["LD_LIBRARY_PATH"] = os.pathsep.join(dict.fromkeys(folders))
    return env


def source_dir() -> Path:
    """fakes/cuda in a checkout, or the copy shipped inside the package."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "fakes" / "cuda", here / "fakes_cuda"):
        if (candidate / "fake.h").is_file():
            return candidate
    raise NotAvailable("cuda", "fake libcuda sources", f"searched {here.parent / 'fakes' / 'cuda'}")


def _sources(src: Path) -> list[Path]:
    """Every file the build depends on: the files compiled (.c), headers (.h) and the parts interp.c
    includes (.inc)."""
    return sorted(p for p in src.iterdir() if p.suffix in (".c", ".h", ".inc"))


def build() -> Path:
    """Compiles the fake once per source hash (cached); safe to call from parallel processes."""
    flags = CFLAGS + (SANITIZE_CFLAGS if os.environ.get("IRONACCEL_FAKE_SANITIZE") == "1" else ())
    return cbuild.build("fakecuda", "libcuda.so.1", _sources(source_dir()), flags, LIBS)


def driver_dir() -> Path:
    """The folder of the built fake, which holds it as ``libcuda.so.1`` and as ``libcuda.so`` (a link):
    numba-cuda opens ``libcuda.so``, so without the link a machine with a GPU gives numba the real driver
    while cuda.bindings in the same process gets the fake."""
    lib = build()
    link = lib.parent / "libcuda.so"
    if not link.is_symlink():
        tmp = lib.parent / f".libcuda.so.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        os.symlink(lib.name, tmp)
        os.replace(tmp, link)  # atomic, as the build itself
    return lib.parent


def source_hash() -> str | None:
    """The hash a build of the fake's sources here embeds (``ironaccel_fake_source_hash()``); None without them."""
    try:
        return sourcehash.source_hash(_sources(source_dir()))
    except NotAvailable:
        return None


#: The toolchain libraries shimmed: cuda.pathfinder's name -> the variable naming the real library for the
#: shim, and the shim's own source beside toolchain/shim.c.
SHIMMED = {"nvrtc": ("IRONACCEL_FAKE_NVRTC_LIBRARY", "nvrtc.c"),
           "nvJitLink": ("IRONACCEL_FAKE_NVJITLINK_LIBRARY", "nvjitlink.c")}
_SHIM_CFLAGS = ("-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", *STRICT_CFLAGS)
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
        soname = re.match(r"lib[\w.-]*?\.so\.(\d+)", Path(path).name)  # libnvrtc.so.13(.5.37) -> libnvrtc.so.13
        if soname is None:
            continue
        sources = [source_dir() / "linked_image.h", src / "shim.h", src / "shim.c", src / SHIMMED[name][1]]
        shim = cbuild.build("faketoolchain", soname.group(0), sources,
                            (*_SHIM_CFLAGS, f"-Wl,-soname,{soname.group(0)}", f"-DSHIM_SONAME_MAJOR={soname.group(1)}"),
                            ("-lpthread", "-ldl"))
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
    lib_dir = str(driver_dir())
    rest = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p != lib_dir]
    env["LD_LIBRARY_PATH"] = os.pathsep.join([lib_dir, *rest])
    env["IRONACCEL_CUDA_DRIVER"] = "fake"
    return env


#: What a process finds by each name the CUDA libraries open the driver by (cuda.bindings and CuPy the
#: soname, numba-cuda the plain name): its file, whether it is the fake, and the device's name.
_PROBE = r"""
import ctypes, json
class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p),
                ("saddr", ctypes.c_void_p)]
libc = ctypes.CDLL(None)
for name in ("libcuda.so.1", "libcuda.so"):
    out = {"name": name}
    try:
        lib = ctypes.CDLL(name)
        info = DlInfo()
        libc.dladdr(ctypes.cast(lib.cuInit, ctypes.c_void_p), ctypes.byref(info))
        out["file"] = (info.fname or b"?").decode()
        out["fake"] = hasattr(lib, "ironaccel_fake_identity")
        dev, buf = ctypes.c_int(), ctypes.create_string_buffer(256)
        err = lib.cuInit(0) or lib.cuDeviceGet(ctypes.byref(dev), 0) or lib.cuDeviceGetName(buf, 256, dev)
        out["device"] = buf.value.decode(errors="replace") if err == 0 else f"none (CUresult {err})"
    except (OSError, AttributeError) as exc:
        out["error"] = str(exc)
    print(json.dumps(out))
"""


def check(env: dict[str, str]) -> None:
    """Refuses (NotAvailable) an environment in which a process would not get the fake as its driver, by
    either name the CUDA libraries open it by, naming what it would get instead; asked of a child process
    with that environment, since a process's library path is fixed when it starts."""
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    found = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    wrong = [f for f in found if not f.get("fake") or "simulated" not in f.get("device", "")]
    if proc.returncode != 0 or len(found) != 2 or wrong:
        said = "; ".join(f"{f['name']} is {f.get('file') or 'not loadable: ' + f.get('error', '?')}"
                         f" (device {f.get('device', '?')!r})" for f in wrong) or proc.stderr.strip()[-500:]
        raise NotAvailable("cuda", "the fake libcuda as the driver", f"a process started with its environment "
                           f"does not get it: {said}")


def in_fake_env() -> bool:
    """Whether this process was started with ``child_env()``'s environment (by ``ironaccel fake run``)."""
    return child_env() == dict(os.environ)


def exec_with_fake(argv: list[str]) -> None:
    """Replaces this process with ``argv`` run with the fake as its driver (``ironaccel fake run``), after
    ``check``; returns only when the environment already is the fake's (a process started that way)."""
    if in_fake_env():
        return
    env = child_env()
    check(env)
    os.execvpe(argv[0], argv, env)


class Control:
    """ctypes wrapper of the fake's control API (faults, counts, allocations, reports)."""

    def __init__(self, lib: ctypes.CDLL | None = None):
        self.lib = lib or load()
        sig = {
            "ironaccel_fake_identity": (ctypes.c_char_p, []),
            "ironaccel_fake_source_hash": (ctypes.c_char_p, []),
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

    def source_hash(self) -> str:
        """The hash of the sources this library was built from, as it reports it (``sourcehash.py``)."""
        return self.lib.ironaccel_fake_source_hash().decode()

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
