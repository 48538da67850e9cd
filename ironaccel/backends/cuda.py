"""CUDA backend over cuda-python's driver API (``cuda.bindings.driver``) and NVRTC (``cuda.bindings.nvrtc``).

Decisions, written down here because CUDA leaves them to us:

* ``IRONACCEL_CUDA_DRIVER=fake`` loads ironaccel's fake libcuda (``ironaccel.fakes.load()``) before
  cuda.bindings does, so the whole backend runs on a machine with no GPU. Which library is really loaded is
  read back from the library itself (the fake exports ``ironaccel_fake_identity``), never assumed.
* Each Device retains the device's primary context once and makes it current once per thread (a
  thread-local records which context the thread has current).
* ``limits.max_alloc`` is ``min(total memory // 4, 4 GiB)``: one allocation of all of device memory never
  succeeds in practice (the context, the pool and other processes need some), and a test that allocates
  ``max_alloc`` must be able to. Larger allocations are still possible through the driver directly.
* ``Device.alloc`` takes no stream, so memory comes from ``cuMemAllocAsync`` on an internal stream that is
  synchronized before the Buffer is handed out (usable on any stream). ``free()`` is stream-ordered
  (``cuMemFreeAsync``) on the stream that last used the buffer, so freeing never blocks. Devices without
  memory pools fall back to ``cuMemAlloc``/``cuMemFree``.
* ``Device.default_stream`` is the legacy default stream; ``create_stream`` makes non-blocking streams.
* Kernels from ``lang="cuda"`` are compiled by NVRTC for the device's architecture: to a cubin on a real
  driver, to PTX on the fake (it interprets PTX). Results are cached in memory and on disk
  (``targets.cache_dir()/nvrtc``), keyed by source, options, architecture and NVRTC version. Kernel names
  and parameter sizes are read from the PTX, so a launch with the wrong arguments is an InvalidArgument
  instead of undefined behaviour.
* ``copy_htod`` from pageable memory goes through a pinned staging ring (``STAGING_BYTES``, allocated on
  first use): the driver would otherwise stage it itself, synchronously and at a fraction of pinned
  bandwidth. A small copy is one memmove into the ring plus one DMA (the pinned bounce buffer; no event per
  copy: the ring is fenced per segment). A large copy is cut into ``STAGING_SEGMENT`` chunks, each filled by
  several threads while the DMA of the previous one runs. A pinned source (``cuPointerGetAttribute`` says
  host memory) of ``PINNED_CHECK_BYTES`` or more is copied directly.
* Kernel arguments are packed by one ``struct.pack_into`` per launch into per-thread slots; the struct is
  built once per kernel and sequence of argument types.
* Results of driver calls are checked by testing the CUresult; the error object is built only on failure.
* ``copy_dtoh`` keeps its host array alive until the stream is synchronized. Into pageable memory the
  driver completes it before returning; it is not staged.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import os
import queue
import re
import struct
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import api
from ..api import BackendInfo, DeviceInfo, Limits
from ..errors import CompileError, DriverError, InvalidArgument, NotAvailable, OutOfMemory

BACKEND = "cuda"
FAKE_IDENTITY = "ironaccel fake libcuda"
MAX_ALLOC_CAP = 4 << 30
LOG_BYTES = 16384
STAGING_SEGMENT = 4 << 20  # bytes of one ring segment, and of one chunk of a large copy
STAGING_SEGMENTS = 8
STAGING_BYTES = STAGING_SEGMENT * STAGING_SEGMENTS
SMALL_COPY_BYTES = 64 << 10  # staged with one memmove and one DMA, no chunking
PARALLEL_COPY_BYTES = 2 << 20  # chunks this big are filled by several threads (below: the handoff costs more)
COPY_THREADS = 7  # worker threads that fill the ring (at most cpu_count - 1), besides the caller
PINNED_CHECK_BYTES = 256 << 10

_cu: Any = None  # cuda.bindings.driver, once initialized
_nvrtc: Any = None  # cuda.bindings.nvrtc, once its library loaded
_nvrtc_error = ""  # why NVRTC is unavailable, when it is
_fake: Any = None  # the fake libcuda (ctypes), when that is what is loaded
_init_lock = threading.Lock()


class _Current(threading.local):
    device = 0  # id of the Device whose primary context this thread has current (0: none)


_current = _Current()
_device_ids = itertools.count(1)


def _driver() -> Any:
    """cuda.bindings.driver with cuInit done; NotAvailable saying what was searched when it cannot be."""
    global _cu, _fake
    if _cu is not None:
        return _cu
    with _init_lock:
        if _cu is not None:
            return _cu
        want_fake = os.environ.get("IRONACCEL_CUDA_DRIVER") == "fake"
        if want_fake:
            try:
                from .. import fakes

                fakes.load()
            except Exception as exc:  # a fake that does not build or load is "not available", not a crash
                raise NotAvailable(BACKEND, "fake libcuda", f"ironaccel.fakes.load() failed: {type(exc).__name__}: {exc}") from None
        try:
            from cuda.bindings import driver
        except ImportError as exc:
            raise NotAvailable(BACKEND, "cuda.bindings",
                               f"the cuda-bindings package is not installed ({exc}): pip install cuda-bindings") from None
        try:
            (err,) = driver.cuInit(0)
        except Exception as exc:  # cuda.bindings raises when it cannot dlopen libcuda
            raise NotAvailable(BACKEND, "libcuda.so.1",
                               f"the NVIDIA driver library could not be loaded (searched by cuda.bindings: {exc})") from None
        if err:
            raise NotAvailable(BACKEND, "libcuda.so.1", f"cuInit failed: {_error_name(driver, err)}")
        _fake = _loaded_fake()
        if want_fake and _fake is None:
            raise NotAvailable(BACKEND, "fake libcuda",
                               "IRONACCEL_CUDA_DRIVER=fake but the libcuda.so.1 cuda.bindings loaded is not the fake")
        _cu = driver
    return _cu


def _loaded_fake() -> ctypes.CDLL | None:
    """The libcuda.so.1 this process loaded, when it says it is the fake; None for a real driver."""
    try:
        lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
    except OSError:
        return None
    identity = getattr(lib, "ironaccel_fake_identity", None)
    if identity is None:
        return None
    identity.restype = ctypes.c_char_p
    return lib if identity() == FAKE_IDENTITY.encode() else None


def _error_name(driver: Any, err: Any) -> str:
    res, name = driver.cuGetErrorName(err)
    return name.decode() if not res and name else f"CUresult {int(err)}"


def _raise(op: str, err: Any) -> None:
    """Build and raise the typed error for a failed driver call (off the success path only)."""
    cu = _cu
    name = _error_name(cu, err)
    res, text = cu.cuGetErrorString(err)
    detail = text.decode() if not res and text else ""
    if _fake is not None and int(err) == int(cu.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS):
        _fake.ironaccel_fake_last_report.restype = ctypes.c_char_p
        report = _fake.ironaccel_fake_last_report()
        if report:
            detail = f"{detail}\n{report.decode(errors='replace')}"
    if err == cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
        raise OutOfMemory(BACKEND, op, int(err), name, detail)
    raise DriverError(BACKEND, op, int(err), name, detail)


def _check(op: str, result: tuple) -> Any:
    """The one place a CUresult is checked: returns the call's value (or values), raises on failure."""
    if result[0]:
        _raise(op, result[0])
    if len(result) == 2:
        return result[1]
    return result[1:] or None


def _load_nvrtc() -> Any:
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


class CudaBackend(api.Backend):
    name = BACKEND

    def probe(self) -> BackendInfo:
        try:
            cu = _driver()
            count = _check("cuDeviceGetCount", cu.cuDeviceGetCount())
            version = _driver_version(cu)
        except (NotAvailable, DriverError) as exc:
            return BackendInfo(BACKEND, False, str(exc))
        if not count:
            return BackendInfo(BACKEND, False, "the CUDA driver reports no devices", version)
        names = ", ".join(_device_name(cu, _check("cuDeviceGet", cu.cuDeviceGet(i))) for i in range(count))
        return BackendInfo(BACKEND, True, f"{count} device(s): {names}", version)

    def device_count(self) -> int:
        cu = _driver()
        return _check("cuDeviceGetCount", cu.cuDeviceGetCount())

    def _open_device(self, index: int) -> CudaDevice:
        return CudaDevice(index)


def _driver_version(cu: Any) -> str:
    v = _check("cuDriverGetVersion", cu.cuDriverGetVersion())
    text = f"CUDA {v // 1000}.{v % 1000 // 10}"
    if _fake is None:
        try:  # the kernel module's version is what `nvidia-smi` calls the driver version
            first = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
            found = re.search(r"Kernel Module\s+(?:for \w+\s+)?([\d.]+)", first)
            if found:
                text += f", NVIDIA {found.group(1)}"
        except OSError:
            pass
    return text


def _device_name(cu: Any, dev: Any) -> str:
    return _check("cuDeviceGetName", cu.cuDeviceGetName(256, dev)).split(b"\0", 1)[0].decode()


def _uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _device_info(cu: Any, dev: Any, index: int) -> DeviceInfo:
    attr = cu.CUdevice_attribute

    def get(name: str) -> int:
        return _check("cuDeviceGetAttribute", cu.cuDeviceGetAttribute(getattr(attr, "CU_DEVICE_ATTRIBUTE_" + name), dev))

    memory = _check("cuDeviceTotalMem", cu.cuDeviceTotalMem(dev))
    cc = (get("COMPUTE_CAPABILITY_MAJOR"), get("COMPUTE_CAPABILITY_MINOR"))
    simulated = _fake is not None
    uuid = _check("cuDeviceGetUuid", cu.cuDeviceGetUuid(dev))
    extra = {
        "uuid": _uuid_text(bytes(uuid.bytes)[:16]),
        "compute_capability": cc,
        "multiprocessors": get("MULTIPROCESSOR_COUNT"),
        "pci_bus_id": _check("cuDeviceGetPCIBusId", cu.cuDeviceGetPCIBusId(32, dev)).split(b"\0", 1)[0].decode(),
        "memory_pools": bool(get("MEMORY_POOLS_SUPPORTED")),
        "max_shared_memory_optin": get("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
    }
    return DeviceInfo(
        backend=BACKEND,
        index=index,
        name=_device_name(cu, dev),
        vendor="ironaccel (simulated NVIDIA GPU)" if simulated else "NVIDIA",
        driver=FAKE_IDENTITY if simulated else "NVIDIA",
        driver_version=_driver_version(cu),
        simulated=simulated,
        memory=memory,
        limits=Limits(
            max_alloc=min(memory // 4, MAX_ALLOC_CAP),
            max_threads_per_block=get("MAX_THREADS_PER_BLOCK"),
            max_block=(get("MAX_BLOCK_DIM_X"), get("MAX_BLOCK_DIM_Y"), get("MAX_BLOCK_DIM_Z")),
            max_grid=(get("MAX_GRID_DIM_X"), get("MAX_GRID_DIM_Y"), get("MAX_GRID_DIM_Z")),
            max_shared_memory=get("MAX_SHARED_MEMORY_PER_BLOCK"),
            warp_size=get("WARP_SIZE"),
        ),
        extra=extra,
    )


@dataclass(frozen=True)
class CudaHandles:
    """``CudaDevice.native``: the cuda.bindings driver module, the CUdevice and the (primary) CUcontext."""

    driver: Any
    device: Any
    context: Any


class CudaDevice(api.Device):
    def __init__(self, index: int):
        cu = _driver()
        self._cu = cu
        self._dev = _check("cuDeviceGet", cu.cuDeviceGet(index))
        super().__init__(_device_info(cu, self._dev, index))
        self._ctx = _check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(self._dev))
        self._id = next(_device_ids)  # not the context handle: a released and re-retained context may reuse it
        try:
            self._make_current()
            self._alloc_stream = _check("cuStreamCreate", cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
        except DriverError:
            cu.cuDevicePrimaryCtxRelease(self._dev)
            raise
        self._pools = self._info.extra["memory_pools"]
        self._default = CudaStream(self, cu.CUstream(cu.CU_STREAM_LEGACY), owned=False)
        # Buffers not yet freed, freed at close: the primary context outlives this Device.
        self._live: weakref.WeakValueDictionary[int, CudaBuffer] = weakref.WeakValueDictionary()
        self._caps: frozenset[str] | None = None
        self._spare_events: dict[bool, list[Any]] = {False: [], True: []}  # timing -> CUevents to reuse
        self._modules: list[Any] = []
        self._staging = _StagingRing(self)
        cc = self._info.extra["compute_capability"]
        self._arch = cc[0] * 10 + cc[1]

    def _native(self) -> CudaHandles:
        return CudaHandles(self._cu, self._dev, self._ctx)

    def _make_current(self) -> None:
        """Make the primary context current on the calling thread, once per thread."""
        if _current.device != self._id:
            _check("cuCtxSetCurrent", self._cu.cuCtxSetCurrent(self._ctx))
            _current.device = self._id

    def _capabilities(self) -> frozenset[str]:
        if self._caps is None:
            caps = {"lang.ptx", "kernel.shared_memory", "kernel.atomics.int32", "kernel.atomics.float32",
                    "kernel.float64", "kernel.int64", "events.timing"}
            if _load_nvrtc() is not None:
                caps.add("lang.cuda")
            if not self._info.simulated:  # the fake loads PTX only
                caps.add("lang.cubin")
            self._caps = frozenset(caps)
        return self._caps

    def _default_stream(self) -> CudaStream:
        return self._default

    def _create_stream(self) -> CudaStream:
        self._make_current()
        cu = self._cu
        handle = _check("cuStreamCreate", cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
        return CudaStream(self, handle, owned=True)

    def _alloc(self, nbytes: int) -> CudaBuffer:
        self._make_current()
        cu = self._cu
        if self._pools:
            ptr = _check("cuMemAllocAsync", cu.cuMemAllocAsync(nbytes, self._alloc_stream))
            _check("cuStreamSynchronize", cu.cuStreamSynchronize(self._alloc_stream))
        else:
            ptr = _check("cuMemAlloc", cu.cuMemAlloc(nbytes))
        buf = CudaBuffer(self, nbytes, int(ptr))
        self._live[buf._ptr] = buf
        return buf

    # -- compilation ------------------------------------------------------------------------------------
    def _compile(self, source: str | bytes, lang: str, options: tuple[str, ...]) -> CudaModule:
        if lang == "cubin":
            if options:
                raise InvalidArgument("Device.compile", f"a cubin is loaded as is and takes no options, got {options!r}")
            self._make_current()
            handle = self._load_module(bytes(source), lang)
            self._modules.append(handle)
            return CudaModule(self, lang, handle, _binary_entries(self._cu, handle))
        assert isinstance(source, str)
        if lang == "ptx":
            if options:
                raise InvalidArgument("Device.compile", f"PTX is loaded as is and takes no options, got {options!r}")
            ptx, image = source, source.encode() + b"\0"
        else:
            ptx, cubin = _nvrtc_compile(source, options, self._arch, want_cubin=not self._info.simulated)
            image = cubin if cubin is not None else ptx.encode() + b"\0"
        entries = _ptx_entries(ptx)
        self._make_current()
        handle = self._load_module(image, lang)
        self._modules.append(handle)
        return CudaModule(self, lang, handle, entries)

    def _load_module(self, image: bytes, lang: str) -> Any:
        cu = self._cu
        opt = cu.CUjit_option
        log = bytearray(LOG_BYTES)
        result = cu.cuModuleLoadDataEx(image, 2, [opt.CU_JIT_ERROR_LOG_BUFFER, opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES],
                                       [log, LOG_BYTES])
        if result[0]:
            err = result[0]
            codes = cu.CUresult
            if lang in ("ptx", "cubin") and err in (
                    codes.CUDA_ERROR_INVALID_PTX, codes.CUDA_ERROR_INVALID_IMAGE, codes.CUDA_ERROR_INVALID_SOURCE,
                    codes.CUDA_ERROR_UNSUPPORTED_PTX_VERSION, codes.CUDA_ERROR_NO_BINARY_FOR_GPU):
                text = bytes(log).split(b"\0", 1)[0].decode(errors="replace").strip()
                raise CompileError("cuModuleLoadDataEx", lang, text or _error_name(cu, err))
            _raise("cuModuleLoadDataEx", err)
        return result[1]

    def _synchronize(self, timeout: float | None = None) -> None:
        self._make_current()
        _check("cuCtxSynchronize", self._cu.cuCtxSynchronize())
        self._default._host_refs.clear()

    def _close(self) -> None:
        """Wait for the device, free what this Device still holds, release the primary context.

        Everything is released even when the wait fails (a sticky error); that failure is raised last."""
        cu = self._cu
        self._make_current()
        failure = cu.cuCtxSynchronize()[0]
        for buf in list(self._live.values()):
            buf._freed = True
            cu.cuMemFree(buf._ptr)
        self._live.clear()
        self._staging.close()
        for handle in self._modules:
            cu.cuModuleUnload(handle)
        for spare in self._spare_events.values():
            for ev in spare:
                cu.cuEventDestroy(ev)
        cu.cuStreamDestroy(self._alloc_stream)
        _check("cuDevicePrimaryCtxRelease", cu.cuDevicePrimaryCtxRelease(self._dev))
        if failure:
            _raise("cuCtxSynchronize", failure)


# -- NVRTC ------------------------------------------------------------------------------------------------

_compiled: dict[str, tuple[str, bytes | None]] = {}  # cache key -> (PTX, cubin or None)


def _nvrtc_compile(source: str, options: tuple[str, ...], arch: int, want_cubin: bool) -> tuple[str, bytes | None]:
    """PTX (and a cubin for ``sm_<arch>`` when ``want_cubin``), from memory, disk or NVRTC, in that order."""
    nvrtc = _load_nvrtc()
    if nvrtc is None:
        raise NotAvailable(BACKEND, "NVRTC", _nvrtc_error)
    supported = _check_nvrtc("nvrtcGetSupportedArchs", nvrtc.nvrtcGetSupportedArchs())
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


def _check_nvrtc(op: str, result: tuple) -> Any:
    if result[0]:
        _res, text = _nvrtc.nvrtcGetErrorString(result[0])
        raise DriverError(BACKEND, op, int(result[0]), result[0].name, text.decode() if text else "")
    return result[1] if len(result) == 2 else None


def _nvrtc_run(nvrtc: Any, source: str, flags: list[str], want_cubin: bool) -> tuple[str, bytes | None]:
    prog = _check_nvrtc("nvrtcCreateProgram", nvrtc.nvrtcCreateProgram(source.encode(), b"ironaccel.cu", 0, [], []))
    try:
        encoded = [f.encode() for f in flags]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        if err:
            size = _check_nvrtc("nvrtcGetProgramLogSize", nvrtc.nvrtcGetProgramLogSize(prog))
            log = b" " * size
            _check_nvrtc("nvrtcGetProgramLog", nvrtc.nvrtcGetProgramLog(prog, log))
            text = log.rstrip(b"\0").decode(errors="replace").strip()
            if err == nvrtc.nvrtcResult.NVRTC_ERROR_COMPILATION:
                raise CompileError("nvrtcCompileProgram", "cuda", text)
            _check_nvrtc("nvrtcCompileProgram", (err,))
        size = _check_nvrtc("nvrtcGetPTXSize", nvrtc.nvrtcGetPTXSize(prog))
        ptx = b" " * size
        _check_nvrtc("nvrtcGetPTX", nvrtc.nvrtcGetPTX(prog, ptx))
        cubin = None
        if want_cubin:
            size = _check_nvrtc("nvrtcGetCUBINSize", nvrtc.nvrtcGetCUBINSize(prog))
            cubin = b" " * size
            _check_nvrtc("nvrtcGetCUBIN", nvrtc.nvrtcGetCUBIN(prog, cubin))
        return ptx.rstrip(b"\0").decode(), cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _disk_dir() -> Path:
    from ..targets import cache_dir

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


# -- modules and kernels ------------------------------------------------------------------------------

_ENTRY_RE = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(([^)]*)\)")
_PARAM_RE = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.([a-z]+)(\d+)\s+(?:\.ptr\s+(?:\.\w+\s+)*)?[\w$]+(?:\[(\d+)\])?")


def _ptx_entries(ptx: str) -> dict[str, tuple[int, ...]]:
    """Kernel name -> size in bytes of each parameter, read from the PTX ``.entry`` declarations."""
    entries = {}
    for name, params in _ENTRY_RE.findall(ptx):
        entries[name] = tuple(int(bits) // 8 * int(count or 1) for _kind, bits, count in _PARAM_RE.findall(params))
    return entries


def _binary_entries(cu: Any, module: Any) -> dict[str, tuple[int, ...]]:
    """Kernel name -> parameter sizes of a loaded binary image, asked of the driver (a cubin has no PTX)."""
    count = _check("cuModuleGetFunctionCount", cu.cuModuleGetFunctionCount(module))
    entries = {}
    for fn in _check("cuModuleEnumerateFunctions", cu.cuModuleEnumerateFunctions(count, module)):
        name = _check("cuFuncGetName", cu.cuFuncGetName(fn))
        sizes = []
        while True:
            err, _offset, size = cu.cuFuncGetParamInfo(fn, len(sizes))
            if err == cu.CUresult.CUDA_ERROR_INVALID_VALUE:  # past the last parameter
                break
            if err:
                _raise("cuFuncGetParamInfo", err)
            sizes.append(int(size))
        entries[name.decode() if isinstance(name, bytes) else str(name)] = tuple(sizes)
    return entries


class CudaModule(api.Module):
    def __init__(self, device: CudaDevice, lang: str, handle: Any, entries: dict[str, tuple[int, ...]]):
        super().__init__(device, lang)
        self._handle = handle
        self._entries = entries

    def _kernel_names(self) -> Sequence[str]:
        return list(self._entries)

    def _make_kernel(self, name: str) -> CudaKernel:
        dev = self.device
        dev._make_current()
        fn = _check("cuModuleGetFunction", dev._cu.cuModuleGetFunction(self._handle, name.encode()))
        return CudaKernel(self, name, fn, self._entries[name])


#: struct codes of the scalar argument types, each padded to its 8-byte parameter slot
_SCALAR_CODES = {("f", 4): "f4x", ("f", 8): "d", ("i", 4): "i4x", ("i", 8): "q", ("u", 4): "I4x", ("u", 8): "Q"}


class _Signature:
    """How one sequence of argument types is packed: a struct over the kernel's 8-byte parameter slots."""

    __slots__ = ("struct", "buffers")

    def __init__(self, kernel: CudaKernel, args: Sequence[Any]):
        op, sizes = "Stream.launch", kernel._param_sizes
        if len(args) != len(sizes):
            raise InvalidArgument(op, f"kernel {kernel.name} takes {len(sizes)} argument(s), got {len(args)}")
        codes = []
        for i, (arg, size) in enumerate(zip(args, sizes)):
            if isinstance(arg, CudaBuffer):
                if size != 8:
                    raise InvalidArgument(op, f"argument {i} of {kernel.name} is a {size}-byte value, got a Buffer")
                codes.append("Q")
            else:
                if arg.dtype.itemsize != size:
                    raise InvalidArgument(op, f"argument {i} of {kernel.name} is {size} bytes, got {arg.dtype} "
                                              f"({arg.dtype.itemsize} bytes)")
                codes.append(_SCALAR_CODES[arg.dtype.kind, size])
        self.struct = struct.Struct("<" + "".join(codes))
        self.buffers = tuple(i for i, code in enumerate(codes) if code == "Q" and isinstance(args[i], CudaBuffer))


class _Slots(threading.local):
    """One thread's parameter slots of a kernel: 8 bytes per parameter and the void** array pointing at them."""

    def __init__(self, count: int):
        self.storage = np.zeros(max(count, 1), dtype=np.uint64)
        self.pointers = self.storage.ctypes.data + 8 * np.arange(len(self.storage), dtype=np.uint64)
        self.view = memoryview(self.storage).cast("B")
        self.address = self.pointers.ctypes.data


class CudaKernel(api.Kernel):
    """A CUfunction and its parameter sizes. A launch packs its arguments with one ``struct.pack_into`` into
    the calling thread's reusable slots; the struct is built once per sequence of argument types."""

    def __init__(self, module: CudaModule, name: str, function: Any, param_sizes: tuple[int, ...]):
        super().__init__(module, name)
        self._function = function
        self._param_sizes = param_sizes
        self._slots = _Slots(len(param_sizes))
        self._signatures: dict[tuple[type, ...], _Signature] = {}

    def _native(self) -> Any:
        return self._function


def _is_pinned(cu: Any, address: int) -> bool:
    """Is ``address`` page-locked host memory the driver knows (cuMemHostAlloc, cuMemHostRegister)?"""
    err, kind = cu.cuPointerGetAttribute(cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, address)
    return not err and kind == cu.CUmemorytype.CU_MEMORYTYPE_HOST


class _CopyWorkers:
    """Threads that copy host memory in parallel: one thread cannot read pageable memory as fast as a PCIe 5
    DMA engine drains pinned memory. ``ctypes.memmove`` releases the GIL, so the copies really overlap."""

    def __init__(self, count: int):
        self._count = count
        self._tasks: queue.SimpleQueue[tuple[int, int, int]] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._pid = 0  # the process whose threads serve the queues (0: none started; a forked child has none)

    def copy(self, dst: int, src: int, n: int) -> None:
        """memmove(dst, src, n), cut into one piece per worker plus one for the calling thread."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._tasks, self._done = queue.SimpleQueue(), queue.SimpleQueue()
            for i in range(self._count):
                threading.Thread(target=self._serve, name=f"ironaccel-copy-{i}", daemon=True).start()
        piece = -(-n // (self._count + 1) // 4096) * 4096
        others = 0
        for first in range(piece, n, piece):
            self._tasks.put((dst + first, src + first, min(piece, n - first)))
            others += 1
        ctypes.memmove(dst, src, min(piece, n))
        for _ in range(others):
            self._done.get()

    def _serve(self) -> None:
        tasks, done, memmove = self._tasks, self._done, ctypes.memmove  # this process's queues
        while True:
            dst, src, n = tasks.get()
            memmove(dst, src, n)
            done.put(None)


class _StagingRing:
    """Pinned host memory used as a ring: pageable ``copy_htod`` data is copied in, then DMA'd from there.

    The ring is ``STAGING_SEGMENTS`` segments of ``STAGING_SEGMENT`` bytes. Copies take consecutive ranges of
    the current segment, so a small copy costs one host memcpy and one ``cuMemcpyHtoDAsync`` (the pinned
    bounce buffer) and records nothing. Leaving a segment records one event on each stream that used it;
    entering a segment again first waits for those events. A large copy is cut into segment-sized chunks,
    each filled by ``_CopyWorkers`` while the DMA of the previous one runs. Thread-safe: one lock."""

    def __init__(self, device: CudaDevice):
        self._dev = device
        self._lock = threading.Lock()
        self._base = 0  # pinned address, 0 until the first staged copy
        self._ring: np.ndarray | None = None  # uint8 view of the pinned ring
        self._segment = 0  # the segment copies are taking bytes from
        self._used = 0  # bytes of it taken
        self._users: list[dict[CudaStream, None]] = [{} for _ in range(STAGING_SEGMENTS)]
        self._fences: list[list[Any]] = [[] for _ in range(STAGING_SEGMENTS)]  # CUevents to wait for
        self._spare: list[Any] = []
        self._workers = _CopyWorkers(min(COPY_THREADS, max((os.cpu_count() or 1) - 1, 1)))

    def _reserve(self, n: int, stream: CudaStream) -> int:
        """Address of ``n`` <= STAGING_SEGMENT free pinned bytes for a copy on ``stream``."""
        if not self._base:
            self._base = int(_check("cuMemHostAlloc", _cu.cuMemHostAlloc(STAGING_BYTES, 0)))
            # numpy's view of the ring: a small copy is a slice assignment, no ``ndarray.ctypes`` lookup
            self._ring = np.ctypeslib.as_array((ctypes.c_uint8 * STAGING_BYTES).from_address(self._base))
        segment, used = self._segment, self._used
        if used + n > STAGING_SEGMENT:
            self._leave(segment)
            segment = self._segment = (segment + 1) % STAGING_SEGMENTS
            self._enter(segment)
            used = 0
        self._used = used + n
        self._users[segment][stream] = None
        return self._base + segment * STAGING_SEGMENT + used

    def _leave(self, segment: int) -> None:
        """Fence the segment's copies: an event on every stream that copied from it."""
        users, fences = self._users[segment], self._fences[segment]
        for stream in users:
            event = self._spare.pop() if self._spare else _check(
                "cuEventCreate", _cu.cuEventCreate(_cu.CUevent_flags.CU_EVENT_DISABLE_TIMING))
            fences.append(event)
            _check("cuEventRecord", _cu.cuEventRecord(event, stream._handle))
        users.clear()

    def _enter(self, segment: int) -> None:
        """Wait until the DMAs that last read the segment are done."""
        fences = self._fences[segment]
        while fences:
            event = fences.pop()
            self._spare.append(event)
            _check("cuEventSynchronize", _cu.cuEventSynchronize(event))

    def copy_htod(self, stream: CudaStream, dst: int, src: np.ndarray) -> None:
        n = src.nbytes
        handle = stream._handle
        with self._lock:
            if n <= SMALL_COPY_BYTES:
                staged = self._reserve(n, stream)
                start = staged - self._base
                self._ring[start:start + n] = src
                err, = _cu.cuMemcpyHtoDAsync(dst, staged, n, handle)
                if err:
                    _raise("cuMemcpyHtoDAsync", err)
                return
            address = src.ctypes.data
            for first in range(0, n, STAGING_SEGMENT):
                size = min(STAGING_SEGMENT, n - first)
                staged = self._reserve(size, stream)
                if size >= PARALLEL_COPY_BYTES:
                    self._workers.copy(staged, address + first, size)
                else:
                    ctypes.memmove(staged, address + first, size)
                _check("cuMemcpyHtoDAsync", _cu.cuMemcpyHtoDAsync(dst + first, staged, size, handle))

    def close(self) -> None:
        """Free the ring; the device has been synchronized."""
        cu = self._dev._cu
        for event in [e for fences in self._fences for e in fences] + self._spare:
            cu.cuEventDestroy(event)
        for fences in self._fences:
            fences.clear()
        for users in self._users:
            users.clear()
        self._spare.clear()
        if self._base:
            cu.cuMemFreeHost(self._base)
            self._base, self._ring = 0, None


# -- memory, events, streams ----------------------------------------------------------------------------

class CudaBuffer(api.Buffer):
    def __init__(self, device: CudaDevice, nbytes: int, ptr: int):
        super().__init__(device, nbytes)
        self._ptr = ptr
        self._last_stream: CudaStream | None = None  # frees are ordered after the last use

    def _native_handle(self) -> int:
        return self._ptr

    def _release(self) -> None:
        dev = self._device
        assert isinstance(dev, CudaDevice)
        if dev.closed:
            return  # closing the device freed it
        dev._make_current()
        dev._live.pop(self._ptr, None)
        cu = dev._cu
        if dev._pools:
            last = self._last_stream
            stream = last._handle if last is not None and last._alive else dev._alloc_stream
            _check("cuMemFreeAsync", cu.cuMemFreeAsync(self._ptr, stream))
        else:
            _check("cuMemFree", cu.cuMemFree(self._ptr))
        self._last_stream = None

    def __del__(self) -> None:
        """A Buffer dropped without ``free()`` gives its memory back (stream-ordered, so never too early)."""
        if not self._freed:
            self.free()


class CudaEvent(api.Event):
    """A CUevent from the device's spare list, returned to it when the Event object goes away."""

    __slots__ = ("_stream", "_timing", "_handle")

    def __init__(self, stream: CudaStream, timing: bool, handle: Any):
        self._stream = stream  # api.Event's two fields, set here directly: this runs on every record
        self._timing = timing
        self._handle = handle

    def _query(self) -> bool:
        cu = self._stream._dev._cu
        (err,) = cu.cuEventQuery(self._handle)
        if not err:
            return True
        if err == cu.CUresult.CUDA_ERROR_NOT_READY:
            return False
        _raise("cuEventQuery", err)
        return False

    def _synchronize(self, timeout: float | None = None) -> None:
        err, = _cu.cuEventSynchronize(self._handle)
        if err:
            _raise("cuEventSynchronize", err)

    def _elapsed_ms(self, end: api.Event) -> float:
        assert isinstance(end, CudaEvent)
        end._synchronize()
        self._synchronize()
        return float(_check("cuEventElapsedTime", self._stream._dev._cu.cuEventElapsedTime(self._handle, end._handle)))

    def __del__(self) -> None:
        dev = self._stream._dev
        if not dev.closed:
            dev._spare_events[self._timing].append(self._handle)


class CudaStream(api.Stream):
    def __init__(self, device: CudaDevice, handle: Any, owned: bool):
        super().__init__(device)
        self._dev = device
        self._handle = handle
        self._owned = owned
        self._alive = True  # False once the handle is destroyed (a buffer may outlive its last stream)
        # Synchronize and record on a stream of our own use the stream's context, current or not; the legacy
        # default stream means "the current context's", so it needs ours current.
        self._needs_current = not owned
        self._host_refs: list[np.ndarray] = []  # copy_dtoh destinations, kept alive until synchronize

    def _native(self) -> Any:
        return self._handle

    def _copy_htod(self, dst: api.Buffer, dst_offset: int, src: np.ndarray) -> None:
        dev = self._dev
        if _current.device != dev._id:
            dev._make_current()
        dst._last_stream = self
        n = src.nbytes
        if n >= PINNED_CHECK_BYTES and _is_pinned(_cu, src.ctypes.data):
            _check("cuMemcpyHtoDAsync", _cu.cuMemcpyHtoDAsync(dst._ptr + dst_offset, src.ctypes.data, n, self._handle))
        else:
            dev._staging.copy_htod(self, dst._ptr + dst_offset, src)

    def _copy_dtoh(self, dst: np.ndarray, src: api.Buffer, src_offset: int) -> None:
        dev = self._dev
        if _current.device != dev._id:
            dev._make_current()
        src._last_stream = self
        err, = _cu.cuMemcpyDtoHAsync(dst.ctypes.data, src._ptr + src_offset, dst.nbytes, self._handle)
        if err:
            _raise("cuMemcpyDtoHAsync", err)
        self._host_refs.append(dst)

    def _copy_dtod(self, dst: api.Buffer, dst_offset: int, src: api.Buffer, src_offset: int, nbytes: int) -> None:
        dev = self._dev
        dev._make_current()
        dst._last_stream = src._last_stream = self
        _check("cuMemcpyDtoDAsync", dev._cu.cuMemcpyDtoDAsync(dst._ptr + dst_offset, src._ptr + src_offset, nbytes,
                                                              self._handle))

    def _fill(self, buf: api.Buffer, offset: int, nbytes: int, value: int) -> None:
        dev = self._dev
        dev._make_current()
        buf._last_stream = self
        _check("cuMemsetD8Async", dev._cu.cuMemsetD8Async(buf._ptr + offset, value, nbytes, self._handle))

    def _record(self, timing: bool) -> CudaEvent:
        dev = self._dev
        if self._needs_current and _current.device != dev._id:
            dev._make_current()
        spare = dev._spare_events[timing]
        if spare:
            handle = spare.pop()
        else:
            flags = _cu.CUevent_flags.CU_EVENT_DEFAULT if timing else _cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
            handle = _check("cuEventCreate", _cu.cuEventCreate(flags))
        event = CudaEvent(self, timing, handle)
        err, = _cu.cuEventRecord(handle, self._handle)
        if err:
            _raise("cuEventRecord", err)
        return event

    def _wait(self, event: api.Event) -> None:
        assert isinstance(event, CudaEvent)
        dev = self._dev
        dev._make_current()
        _check("cuStreamWaitEvent", dev._cu.cuStreamWaitEvent(self._handle, event._handle, 0))

    def _synchronize(self, timeout: float | None = None) -> None:
        if self._needs_current and _current.device != self._dev._id:
            self._dev._make_current()
        err, = _cu.cuStreamSynchronize(self._handle)
        if err:
            _raise("cuStreamSynchronize", err)
        if self._host_refs:
            self._host_refs.clear()

    def _launch(self, kernel: api.Kernel, grid: api.Dim3, block: api.Dim3, args: list[Any]) -> None:
        assert isinstance(kernel, CudaKernel)
        key = tuple(map(type, args))
        signature = kernel._signatures.get(key)
        if signature is None:
            signature = kernel._signatures[key] = _Signature(kernel, args)
        for i in signature.buffers:  # args is launch()'s own list: buffers become their pointers in place
            buf = args[i]
            buf._last_stream = self
            args[i] = buf._ptr
        slots = kernel._slots
        signature.struct.pack_into(slots.view, 0, *args)
        dev = self._dev
        if _current.device != dev._id:
            dev._make_current()
        err, = _cu.cuLaunchKernel(kernel._function, *grid, *block, 0, self._handle, slots.address, 0)
        if err:
            _raise("cuLaunchKernel", err)

    def __del__(self) -> None:
        self._alive = False
        if self._owned and not self._dev.closed:
            self._dev._cu.cuStreamDestroy(self._handle)
