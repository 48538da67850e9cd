"""Loading the ``vulkan`` cffi package, and the one place a VkResult becomes an exception.

Kept apart so that every other module of the backend imports without the package (it loads on first use:
a missing package or loader is NotAvailable, never ImportError) and so that native errors are built once.
Other modules read ``native.vk`` (the loaded ``vulkan`` module), which ``load()`` fills in.
"""

from __future__ import annotations

from typing import Any, Callable

from ...errors import DriverError, NotAvailable, OutOfMemory

vk: Any = None  # the ``vulkan`` module once loaded


def load() -> Any:
    """Import the ``vulkan`` package; a missing package or loader is NotAvailable, never ImportError."""
    global vk
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
        vk = vulkan
    return vk


def error(op: str, code: int, detail: str = "") -> DriverError:
    """The one place a VkResult becomes an exception: DriverError, or OutOfMemory for the OOM codes."""
    name = vk.ffi.typeof("VkResult").elements.get(code, f"VkResult({code})")
    if code in (vk.VK_ERROR_OUT_OF_DEVICE_MEMORY, vk.VK_ERROR_OUT_OF_HOST_MEMORY):
        return OutOfMemory("vulkan", op, code, name, detail or "free buffers or trim a MemPool, then retry")
    return DriverError("vulkan", op, code, name, detail)


def check(op: str, result: int) -> int:
    """Raise for a negative VkResult; return non-negative ones (VK_TIMEOUT, VK_NOT_READY) to the caller."""
    if result < 0:
        raise error(op, result)
    return result


def version_string(v: int) -> str:
    return f"{v >> 22}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def api_version(major: int, minor: int) -> int:
    return (major << 22) | (minor << 12)


def string(chars: Any) -> str:
    return vk.ffi.string(chars).decode("utf-8", "replace")


def enumerate_items(op: str, fn: Callable[..., int], ctype: str, *args: Any) -> Any:
    """The two-call idiom of vkEnumerate*/vkGet*: count, then fill. Returns the cffi array, which owns the
    memory of its struct elements: keep it alive while using them."""
    ffi = vk.ffi
    count = ffi.new("uint32_t*")
    result = fn(*args, count, ffi.NULL)
    if result is not None:  # the vkGet* ones return void
        check(op, result)
    items = ffi.new(f"{ctype}[]", count[0])
    result = fn(*args, count, items)
    if result is not None:
        check(op, result)
    return items


def c_strings(names: list[bytes]) -> tuple[list[Any], Any]:
    """C strings and a ``char**`` to them (NULL when empty); keep both alive while the pointer is used."""
    ffi = vk.ffi
    strings = [ffi.new("char[]", n) for n in names]
    return strings, ffi.new("char*[]", strings) if strings else ffi.NULL
