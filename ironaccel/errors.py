"""The one exception hierarchy of ironaccel.

Every error names the operation that failed (a native entry point such as ``cuMemAllocAsync`` or
``GPUDevice.create_buffer``, or an API method such as ``Stream.copy_htod``), so that grepping for the op
string lands on the call site. Errors are only ever built off the success path.
"""

from __future__ import annotations

__all__ = [
    "IronAccelError",
    "NotAvailable",
    "DriverError",
    "OutOfMemory",
    "InvalidArgument",
    "CompileError",
    "Unsupported",
    "UseAfterFree",
    "Timeout",
]


class IronAccelError(Exception):
    """Base of every error ironaccel raises on purpose."""


class NotAvailable(IronAccelError):
    """A backend's runtime (library, driver, tool) is missing: says what was searched."""

    def __init__(self, backend: str, lib: str, detail: str):
        self.backend, self.lib, self.detail = backend, lib, detail
        super().__init__(f"{backend}: {lib} is not available: {detail}")


class DriverError(IronAccelError):
    """A native call returned an error code."""

    def __init__(self, backend: str, op: str, code: object, name: str, detail: str = ""):
        self.backend, self.op, self.code, self.name, self.detail = backend, op, code, name, detail
        msg = f"{backend}: {op} failed: {name}"
        if code is not None and str(code) != name:
            msg += f" ({code})"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class OutOfMemory(DriverError, MemoryError):
    """The device (or a limit it reports) cannot hold the requested allocation."""


class InvalidArgument(IronAccelError, ValueError):
    """The caller passed something the operation cannot accept; nothing was enqueued."""

    def __init__(self, op: str, detail: str):
        self.op, self.detail = op, detail
        super().__init__(f"{op}: {detail}")


class CompileError(InvalidArgument):
    """Kernel source did not compile; ``log`` holds the compiler's own message."""

    def __init__(self, op: str, lang: str, log: str):
        self.lang, self.log = lang, log
        super().__init__(op, f"{lang} compilation failed:\n{log}")


class Unsupported(IronAccelError):
    """The device said no to a capability (``Device.supports(capability)`` is False)."""

    def __init__(self, op: str, capability: str, detail: str = ""):
        self.op, self.capability = op, capability
        msg = f"{op}: the device does not support {capability!r}"
        super().__init__(f"{msg}: {detail}" if detail else msg)


class UseAfterFree(IronAccelError):
    """An object was used after ``free()``/``close()`` released it."""

    def __init__(self, op: str, what: str, ended: str = "freed"):
        self.op, self.what = op, what
        super().__init__(f"{op}: {what} was used after it was {ended}")


class Timeout(IronAccelError):
    """A wait ran past its ``timeout`` (seconds). The work may still be running; nothing was lost, and the
    process can still exit (no thread is left blocked in the driver)."""

    def __init__(self, op: str, seconds: float, detail: str = ""):
        self.op, self.seconds = op, seconds
        msg = f"{op}: not complete after {seconds:g} s"
        super().__init__(f"{msg}: {detail}" if detail else msg)
