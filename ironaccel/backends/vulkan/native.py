"""Loading the ``vulkan`` cffi package, and calling into it: the one place a VkResult becomes an exception.

Kept apart so that every other module of the backend imports without the package (it loads on first use:
a missing package or loader is NotAvailable, never ImportError) and so that native errors are built once.
Other modules read ``native.vk`` (the loaded ``vulkan`` module) and call through ``native.call``: a proxy
over ``vk.lib`` (as wgpu-py's SafeLibCalls) whose functions check their VkResult and name the error after
themselves, so no call site spells its op twice. Functions that return void (``vkCmd*``, ``vkDestroy*``,
most ``vkGet*``) are called on ``vk.lib`` itself, and so are the few whose result is deliberately ignored.
"""

from __future__ import annotations

from typing import Any, Callable

from ...errors import DriverError, NotAvailable, OutOfMemory

vk: Any = None  # the ``vulkan`` module once loaded
call: Any = None  # the checked proxy over ``vk.lib`` once loaded (``CheckedCalls``)

#: What the common VkResult error codes mean for a user of this library, and what to do about them.
EXPLANATIONS = {
    "VK_ERROR_OUT_OF_HOST_MEMORY": "the driver ran out of host memory: free buffers or trim a MemPool, then retry",
    "VK_ERROR_OUT_OF_DEVICE_MEMORY": "device memory is exhausted: free buffers or trim a MemPool, then retry",
    "VK_ERROR_OUT_OF_POOL_MEMORY": "a descriptor pool is exhausted (too many buffers bound in one batch)",
    "VK_ERROR_DEVICE_LOST": "the device was lost (a kernel faulted or ran past the driver's watchdog, or the GPU "
                            "reset): close the device and open it again; its buffers' contents are gone",
    "VK_ERROR_INITIALIZATION_FAILED": "the driver could not initialise (a broken ICD or an unsupported GPU)",
    "VK_ERROR_INCOMPATIBLE_DRIVER": "no driver speaks the requested Vulkan version (1.2 or later is needed)",
    "VK_ERROR_LAYER_NOT_PRESENT": "a requested layer is not installed",
    "VK_ERROR_EXTENSION_NOT_PRESENT": "a requested extension is not offered by this driver",
    "VK_ERROR_FEATURE_NOT_PRESENT": "a requested device feature is not offered by this driver",
    "VK_ERROR_TOO_MANY_OBJECTS": "the driver's limit on objects of this kind is reached: release some",
    "VK_ERROR_MEMORY_MAP_FAILED": "the memory could not be mapped into the host's address space",
    "VK_ERROR_FRAGMENTED_POOL": "a pool is too fragmented for the allocation",
    "VK_ERROR_FRAGMENTATION": "a pool is too fragmented for the allocation",
    "VK_ERROR_INVALID_SHADER_NV": "the driver rejected the SPIR-V module",
    "VK_ERROR_VALIDATION_FAILED_EXT": "the validation layer rejected the call (see Device.diagnostics())",
    "VK_ERROR_UNKNOWN": "the driver failed for a reason it does not say (run with IRONACCEL_VK_VALIDATION=1)",
}


def load() -> Any:
    """Import the ``vulkan`` package; a missing package or loader is NotAvailable, never ImportError."""
    global vk, call
    if vk is None:
        try:
            import vulkan
        except ImportError as exc:
            raise NotAvailable("vulkan", "vulkan", f"the Python package is not installed ({exc}): pip install vulkan") from None
        except OSError as exc:  # the package raises OSError when it cannot dlopen the loader
            raise NotAvailable(
                "vulkan", "libvulkan.so.1",
                f"the Vulkan loader was not found (searched libvulkan.so.1 on the library path: {exc}): "
                "apt-get install libvulkan1",
            ) from None
        vk, call = vulkan, CheckedCalls(vulkan.lib)
    return vk


def error(op: str, code: int) -> DriverError:
    """The one place a VkResult becomes an exception: DriverError with its explanation, OutOfMemory for the
    VK_ERROR_OUT_OF_*_MEMORY codes."""
    name = vk.ffi.typeof("VkResult").elements.get(code, f"VkResult({code})")
    kind = OutOfMemory if name.startswith("VK_ERROR_OUT_OF_") and name.endswith("_MEMORY") else DriverError
    return kind("vulkan", op, code, name, EXPLANATIONS.get(name, ""))


def _returns_vkresult(fn: Any) -> bool:
    return vk.ffi.typeof(fn).result.cname == "enum VkResult"


def checked(name: str, fn: Any) -> Callable[..., int]:
    """``fn`` that raises ``error(name, result)`` for a negative VkResult and returns the others (VK_SUCCESS,
    VK_TIMEOUT, VK_NOT_READY, VK_INCOMPLETE) to the caller."""

    def checked_call(*args: Any) -> int:
        result = fn(*args)
        if result < 0:
            raise error(name, result)
        return result

    checked_call.__name__ = checked_call.__qualname__ = name
    return checked_call


class CheckedCalls:
    """``call.vkX(...)`` is ``vk.lib.vkX(...)`` checked by ``checked``; each wrapper is made once, on first use."""

    def __init__(self, lib: Any):
        self._lib = lib

    def __getattr__(self, name: str) -> Callable[..., int]:
        fn = getattr(self._lib, name)
        if not _returns_vkresult(fn):
            raise AttributeError(f"{name} does not return a VkResult: call it on vk.lib")
        wrapper = checked(name, fn)
        setattr(self, name, wrapper)  # later lookups find the instance attribute, not __getattr__
        return wrapper


def instance_function(instance: Any, name: str) -> Callable[..., Any]:
    """An extension's instance-level function, checked like ``call`` when it returns a VkResult."""
    pointer = vk.lib.vkGetInstanceProcAddr(instance, name.encode())
    if pointer == vk.ffi.NULL:
        raise NotAvailable("vulkan", name, "the driver does not export it")
    fn = vk.ffi.cast(f"PFN_{name}", pointer)
    return checked(name, fn) if _returns_vkresult(fn) else fn


def version_string(v: int) -> str:
    return f"{v >> 22}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def api_version(major: int, minor: int) -> int:
    return (major << 22) | (minor << 12)


def string(chars: Any) -> str:
    return vk.ffi.string(chars).decode("utf-8", "replace")


def enumerate_items(name: str, ctype: str, *args: Any) -> Any:
    """The two-call idiom of vkEnumerate*/vkGet* ``name``: count, then fill. Returns the cffi array, which
    owns the memory of its struct elements: keep it alive while using them."""
    ffi = vk.ffi
    raw = getattr(vk.lib, name)
    fn = getattr(call, name) if _returns_vkresult(raw) else raw  # the vkGet* ones return void
    count = ffi.new("uint32_t*")
    fn(*args, count, ffi.NULL)
    items = ffi.new(f"{ctype}[]", count[0])
    fn(*args, count, items)
    return items


def c_strings(names: list[bytes]) -> tuple[list[Any], Any]:
    """C strings and a ``char**`` to them (NULL when empty); keep both alive while the pointer is used."""
    ffi = vk.ffi
    strings = [ffi.new("char[]", n) for n in names]
    return strings, ffi.new("char*[]", strings) if strings else ffi.NULL
