"""Loading the CUDA driver and checking what its calls return.

Every other module of the backend calls the driver, and every failed call must become the same typed
error (``DriverError`` naming the entry point, ``OutOfMemory`` for CUDA_ERROR_OUT_OF_MEMORY), so loading
and checking live here, once: ``calls`` (``CheckedCalls``) for every call off the hot paths, ``fail`` for
the hot paths' inline checks, ``EXPLANATIONS`` for what the common codes mean, and ``wait_until_complete``
for the waits that have a timeout.

``IRONACCEL_CUDA_DRIVER=fake`` loads ironaccel's fake libcuda (``ironaccel.fakes.load()``) before
cuda.bindings does, so the whole backend runs on a machine with no GPU. Which library is really loaded is
read back from the library itself (the fake exports ``ironaccel_fake_identity``), never assumed.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Any, Callable, NoReturn

from ... import native as fast_c  # ironaccel.native: the compiled hot paths (_fast_c/)
from ...errors import DriverError, NotAvailable, OutOfMemory, Timeout

BACKEND = "cuda"
FAKE_IDENTITY = "ironaccel fake libcuda"

cu: Any = None  # cuda.bindings.driver, once initialized
fake: Any = None  # the fake libcuda (ctypes), when that is what is loaded
#: ironaccel._fast with its entry points taken from this same libcuda, once initialized; None: the
#: pure-Python hot paths (no compiled module here, or IRONACCEL_PURE_PYTHON=1)
fast: Any = None
_init_lock = threading.Lock()


class _Current(threading.local):
    device = 0  # id of the Device whose primary context this thread has current (0: none)


_compiled = fast_c.load()
#: Which Device's primary context the calling thread has current (see ``CudaDevice._make_current``): where the
#: compiled module loads, its ThreadCurrent (the same record in C thread-local storage, read by its hot paths
#: without a Python-level lookup), else a threading.local.
current = _compiled.ThreadCurrent() if _compiled is not None else _Current()


#: What a user with no NVIDIA GPU can do instead, appended to the "no driver" errors.
NO_GPU_HINT = ("; without an NVIDIA GPU, set IRONACCEL_CUDA_DRIVER=fake (or certify --target cuda/fake) to run on "
               "ironaccel's fake libcuda")

def load() -> Any:
    """cuda.bindings.driver with cuInit done; NotAvailable saying what was searched when it cannot be."""
    global cu, fake, fast
    if cu is not None:
        return cu
    with _init_lock:
        if cu is not None:
            return cu
        want_fake = os.environ.get("IRONACCEL_CUDA_DRIVER") == "fake"
        if want_fake:
            try:
                from ... import fakes

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
                               f"the NVIDIA driver library could not be loaded (searched by cuda.bindings: {exc}){NO_GPU_HINT}") from None
        if err:
            raise NotAvailable(BACKEND, "libcuda.so.1", f"cuInit failed: {error_name(driver, err)}{NO_GPU_HINT}")
        fake = _loaded_fake()
        if want_fake and fake is None:
            raise NotAvailable(BACKEND, "fake libcuda",
                               "IRONACCEL_CUDA_DRIVER=fake but the libcuda.so.1 cuda.bindings loaded is not the fake")
        fast = _compiled_path()
        cu = driver
    return cu


def _compiled_path() -> Any:
    """ironaccel._fast with the driver's entry points loaded, or None (see ironaccel.native)."""
    module = fast_c.load()
    if module is None:
        return None
    try:
        module.init()
    except OSError as exc:  # libcuda loaded under another name: the pure path still works
        fast_c.why_not = str(exc)
        return None
    return module


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


def fake_build() -> str:
    """The hash of the sources the loaded fake was built from, as the library reports it ("unrecorded" for a
    fake from before it did)."""
    report = getattr(fake, "ironaccel_fake_source_hash", None)
    if report is None:
        return "unrecorded"
    report.restype = ctypes.c_char_p
    return report().decode()


def error_name(driver: Any, err: Any) -> str:
    res, name = driver.cuGetErrorName(err)
    return name.decode() if not res and name else f"CUresult {int(err)}"


#: What the common CUresult codes usually mean for a user of this library, and what to do about them;
#: appended to the driver's own one-line description in the DriverError's detail.
EXPLANATIONS = {
    "CUDA_ERROR_NOT_INITIALIZED": "cuInit has not run or failed in this process; open devices through "
                                  "ironaccel (it calls cuInit), and in a forked child reinitialise after the fork",
    "CUDA_ERROR_DEINITIALIZED": "the driver is shutting down (interpreter exit) or was unloaded; nothing more can "
                                "run in this process",
    "CUDA_ERROR_NO_DEVICE": "the driver sees no CUDA device: check nvidia-smi and CUDA_VISIBLE_DEVICES",
    "CUDA_ERROR_INVALID_DEVICE": "the device index is not one the driver knows (CUDA_VISIBLE_DEVICES renumbers them)",
    "CUDA_ERROR_INVALID_CONTEXT": "no CUDA context is current on the calling thread, or it was destroyed: a "
                                  "Device used after close(), or another CUDA library in this process changed "
                                  "or destroyed the current context",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED": "the context was destroyed while still in use (a device closed elsewhere)",
    "CUDA_ERROR_INVALID_VALUE": "an argument was out of range for this call: a size, an offset, a flag or a "
                                "handle the driver does not accept",
    "CUDA_ERROR_INVALID_HANDLE": "a stream, event, module or function handle is stale or belongs to another "
                                 "context (it was destroyed, or created on another device)",
    "CUDA_ERROR_OUT_OF_MEMORY": "device memory is exhausted: free buffers, MemPool.trim(), or allocate less; "
                                "other processes on the GPU (nvidia-smi) also hold memory",
    "CUDA_ERROR_ILLEGAL_ADDRESS": "a kernel read or wrote memory it does not own (out of bounds, freed, or a host "
                                  "pointer). The context is now unusable (a sticky error): every later call fails "
                                  "until the process exits. Find the access with compute-sanitizer (on the fake: "
                                  "its memcheck report below)",
    "CUDA_ERROR_MISALIGNED_ADDRESS": "a kernel accessed memory at an address not aligned to the access size; the "
                                     "context is now unusable (sticky): check buffer offsets and casts in the kernel",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION": "a kernel executed an invalid instruction; the context is now unusable (sticky)",
    "CUDA_ERROR_HARDWARE_STACK_ERROR": "a kernel overflowed its call stack (deep recursion); the context is now "
                                       "unusable (sticky)",
    "CUDA_ERROR_ASSERT": "a device-side assert() failed in a kernel; the context is now unusable (sticky)",
    "CUDA_ERROR_LAUNCH_FAILED": "the kernel faulted while running; the context is now unusable (sticky)",
    "CUDA_ERROR_LAUNCH_TIMEOUT": "the kernel ran past a watchdog (a GPU that also drives a display limits kernel "
                                 "run time; the fake's is IRONACCEL_FAKE_WATCHDOG_S): shorten the kernel or use "
                                 "a GPU without a display. The context is now unusable (sticky)",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": "the block needs more registers or shared memory than a multiprocessor "
                                          "has: launch with a smaller block",
    "CUDA_ERROR_NO_BINARY_FOR_GPU": "the module has no code for this GPU's architecture: compile for its "
                                    "compute capability (lang='cuda' does), or ship PTX the driver can JIT",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": "the PTX is newer than this driver understands: update the driver or "
                                          "compile with an older toolkit",
    "CUDA_ERROR_INVALID_PTX": "the PTX did not assemble; the JIT log says where",
    "CUDA_ERROR_INVALID_IMAGE": "the module image is not a valid cubin/fatbin/PTX for this driver",
    "CUDA_ERROR_NOT_FOUND": "no symbol of that name in the module (check extern \"C\" on CUDA C++ kernels)",
    "CUDA_ERROR_NOT_SUPPORTED": "this device or driver does not support the operation (e.g. memory pools)",
    "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH": "the user-space libcuda and the kernel module are different versions: "
                                         "reboot or reinstall the driver",
    "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE": "a forward-compatibility libcuda is loaded on a GPU that does "
                                                 "not support it: use the system driver",
    "CUDA_ERROR_ECC_UNCORRECTABLE": "the GPU reported an uncorrectable memory error: see nvidia-smi -q; the "
                                    "device may need a reset",
    "CUDA_ERROR_TIMEOUT": "a wait ran past its timeout",
    "CUDA_ERROR_NOT_PERMITTED": "the operation is not allowed in the current state (e.g. while a stream is "
                                "being captured)",
    "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED": "the stream capture was invalidated by an earlier error or an "
                                             "operation not allowed during capture",
}


#: the sticky errors a kernel's fault causes, for which the fake's last report (a memcheck report, or the fault's
#: kind, kernel, block, thread and PTX line) describes the launch that caused them: a lost context runs nothing
#: more, so no later launch replaces the report
FAKE_REPORTED = frozenset({"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_ASSERT",
                           "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_INVALID_PC",
                           "CUDA_ERROR_LAUNCH_TIMEOUT"})


def fail(function: Any, err: Any) -> NoReturn:
    """Raise the typed error for a failed driver call, named after ``function`` (off the success path only)."""
    op = function.__name__
    name = error_name(cu, err)
    res, text = cu.cuGetErrorString(err)
    detail = text.decode() if not res and text else ""
    explanation = EXPLANATIONS.get(name)
    if explanation:
        detail = f"{detail} ({explanation})" if detail else explanation
    if fake is not None and name in FAKE_REPORTED:
        fake.ironaccel_fake_last_report.restype = ctypes.c_char_p
        report = fake.ironaccel_fake_last_report()
        if report:
            detail = f"{detail}\n{report.decode(errors='replace')}"
    if err == cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
        raise OutOfMemory(BACKEND, op, int(err), name, detail)
    raise DriverError(BACKEND, op, int(err), name, detail)


def wait_for(query: Any, blocking: Any, handle: Any) -> None:
    """The blocking wait ``blocking(handle)`` (cuStreamSynchronize, cuEventSynchronize), skipped when
    ``query(handle)`` (cuStreamQuery, cuEventQuery) says the work is done already: on the H200 an idle stream's
    query took 150 ns and its synchronize 190-550 ns. Anything but CUDA_SUCCESS goes to the blocking call,
    which reports an error itself (so the error names the wait, as without the query)."""
    if not query(handle)[0]:
        return
    err, = blocking(handle)
    if err:
        fail(blocking, err)


def wait_until_complete(query: Any, handle: Any, deadline: float, op: str, seconds: float) -> None:
    """Poll ``query(handle)`` (cuStreamQuery, cuEventQuery) until it stops saying NOT_READY; at ``deadline``
    (``time.monotonic()``) raise ``Timeout(op, seconds)``. A poll with a short backoff (20 us doubling to
    1 ms), never a blocking wait, so a timed-out caller leaves no thread stuck in the driver."""
    not_ready = cu.CUresult.CUDA_ERROR_NOT_READY
    pause = 0.0
    while True:
        err, = query(handle)
        if err != not_ready:
            if err:
                fail(query, err)
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise Timeout(op, seconds)
        time.sleep(min(pause, left))
        pause = min(max(2 * pause, 20e-6), 1e-3)


class CheckedCalls:
    """A native library whose every function checks the status it returns, as wgpu-py's SafeLibCalls do.

    ``calls.cuMemAllocAsync(n, stream)`` returns the pointer (a call's one value, its values as a tuple, or
    None) or raises ``fail(function, status)``: the op is the function's own name, never typed again. One
    wrapper per name, made on first use. The hot paths (launch, synchronize, record, small copies) call the
    library directly and test the status inline instead, so they pay no wrapper."""

    def __init__(self, library: Callable[[], Any], fail: Callable[[Any, Any], None]):
        self._library = library
        self._fail = fail

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        function, fail = getattr(self._library(), name), self._fail

        def call(*args: Any) -> Any:
            result = function(*args)
            if result[0]:
                fail(function, result[0])
            return result[1] if len(result) == 2 else result[1:] or None

        call.__name__ = call.__qualname__ = name
        self.__dict__[name] = call
        return call


#: cuda.bindings.driver, checked (the driver must be loaded first: ``load()``).
calls = CheckedCalls(load, fail)
