"""CUDA C++ to PTX (and cubin) with NVRTC, and the cache of its results.

Compiling is slow (tens of milliseconds per kernel) and its output depends only on the source, the
options, the target architecture and the NVRTC version, so results are cached in memory and on disk
(``cache.cache_dir()/nvrtc``) under a hash of those. NVRTC is a library of its own, loaded on first use:
a machine with a driver but no NVRTC still runs PTX.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from ...cache import cache_dir
from ...errors import CompileError, DriverError, NotAvailable
from .native import BACKEND, CheckedCalls

_nvrtc: Any = None  # cuda.bindings.nvrtc, once its library loaded
_nvrtc_error = ""  # why NVRTC is unavailable, when it is
_compiled: dict[str, tuple[str, bytes | None]] = {}  # cache key -> (PTX, cubin or None)


def load() -> Any:
    """cuda.bindings.nvrtc once libnvrtc loads; None (and ``_nvrtc_error`` says why) when it does not."""
    global _nvrtc, _nvrtc_error
    if _nvrtc is None and not _nvrtc_error:
        try:
            from cuda.bindings import nvrtc

            res, major, minor = nvrtc.nvrtcVersion()
            if res:
                raise RuntimeError(f"nvrtcVersion returned {res}")
            nvrtc.version = (major, minor)
            _nvrtc = nvrtc
        except Exception as exc:
            _nvrtc_error = (f"NVRTC could not be loaded (libnvrtc.so.* from the nvidia-cuda-nvrtc wheel or the CUDA "
                            f"toolkit, searched by cuda.bindings): {type(exc).__name__}: {exc}; pip install nvidia-cuda-nvrtc")
    return _nvrtc


def compile_source(source: str, options: tuple[str, ...], arch: int, want_cubin: bool) -> tuple[str, bytes | None]:
    """PTX (and a cubin for ``sm_<arch>`` when ``want_cubin``), from memory, disk or NVRTC, in that order."""
    nvrtc = load()
    if nvrtc is None:
        raise NotAvailable(BACKEND, "NVRTC", _nvrtc_error)
    supported = calls.nvrtcGetSupportedArchs()
    if arch not in supported and arch < max(supported):
        raise NotAvailable(BACKEND, "NVRTC", f"NVRTC {nvrtc.version} cannot target sm_{arch} (it supports {supported})")
    if arch not in supported:  # newer than this NVRTC knows: PTX for its newest target, JIT-compiled by the driver
        arch, want_cubin = max(supported), False
    flags = list(options)
    if not any(o.startswith(("-arch", "--gpu-architecture")) for o in flags):
        flags.append(f"--gpu-architecture={'sm' if want_cubin else 'compute'}_{arch}")
    key = hashlib.sha256(repr((source, flags, arch, want_cubin, nvrtc.version)).encode()).hexdigest()
    hit = _compiled.get(key)
    if hit is None:
        hit = _disk_read(key, want_cubin) or _disk_write(key, *_nvrtc_run(nvrtc, source, flags, want_cubin))
        _compiled[key] = hit
    return hit


def _fail(function: Any, err: Any) -> None:
    """Raise the typed error for a failed NVRTC call, named after ``function``."""
    _res, text = _nvrtc.nvrtcGetErrorString(err)
    raise DriverError(BACKEND, function.__name__, int(err), err.name, text.decode() if text else "")


#: cuda.bindings.nvrtc, checked like the driver (``driver.CheckedCalls``); only used once ``load()`` succeeded.
calls = CheckedCalls(load, _fail)


def _nvrtc_run(nvrtc: Any, source: str, flags: list[str], want_cubin: bool) -> tuple[str, bytes | None]:
    prog = calls.nvrtcCreateProgram(source.encode(), b"ironaccel.cu", 0, [], [])
    try:
        encoded = [f.encode() for f in flags]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        if err:
            size = calls.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            calls.nvrtcGetProgramLog(prog, log)
            text = log.rstrip(b"\0").decode(errors="replace").strip()
            if err == nvrtc.nvrtcResult.NVRTC_ERROR_COMPILATION:
                raise CompileError("nvrtcCompileProgram", "cuda", text)
            _fail(nvrtc.nvrtcCompileProgram, err)
        size = calls.nvrtcGetPTXSize(prog)
        ptx = b" " * size
        calls.nvrtcGetPTX(prog, ptx)
        cubin = None
        if want_cubin:
            size = calls.nvrtcGetCUBINSize(prog)
            cubin = b" " * size
            calls.nvrtcGetCUBIN(prog, cubin)
        return ptx.rstrip(b"\0").decode(), cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _disk_dir() -> Path:
    return cache_dir() / "nvrtc"


def _disk_read(key: str, want_cubin: bool) -> tuple[str, bytes | None] | None:
    base = _disk_dir() / key
    try:
        ptx = base.with_suffix(".ptx").read_text(encoding="utf-8")
        cubin = base.with_suffix(".cubin").read_bytes() if want_cubin else None
    except OSError:
        return None
    return ptx, cubin


def _disk_write(key: str, ptx: str, cubin: bytes | None) -> tuple[str, bytes | None]:
    """Store a compilation; the cache is an optimisation, so a read-only cache directory is not an error."""
    base = _disk_dir() / key
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
        files = [(".ptx", ptx.encode())] + ([(".cubin", cubin)] if cubin is not None else [])
        for suffix, data in reversed(files):  # .ptx last: its presence means the entry is complete
            tmp = base.with_suffix(f"{suffix}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            tmp.replace(base.with_suffix(suffix))
    except OSError:
        pass
    return ptx, cubin
