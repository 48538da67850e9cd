"""Shared helpers of the conformance tests: poisoned buffers, round trips, the "device still works" check."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import threading
import warnings

import numpy as np
import pytest

from ironaccel.cts.pytest_plugin import NOT_SUPPORTED_PREFIX
from ironaccel.cts.testing.work import RunningWork, ceil_div, lcg, read

__all__ = ["NOP", "POISON", "RunningWork", "assert_device_works", "assert_wait_outlasts_running_work", "ceil_div",
           "child_json", "context_current", "cuda_driver", "host_pages_above", "host_pages_low", "lcg", "memory_churn",
           "nop_kernels", "poisoned", "poll_until_complete", "raises_naming", "random_bytes", "read", "resident_growth",
           "rng", "rss_bytes", "upload"]

POISON = 0xA5


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def random_bytes(n: int, seed: int = 0) -> np.ndarray:
    """Random bytes with no zero byte, so a missed write can never look like a correct zero."""
    return rng(seed).integers(1, 256, n, dtype=np.uint8)


def raises_naming(error: type[BaseException], op: str, what: str):
    """``pytest.raises`` for ``error`` whose message is "op: detail" with ``what`` in the detail: the public op
    that was called (never another one the library went through) and the argument or object that was wrong."""
    return pytest.raises(error, match=f"(?s)^{re.escape(op)}: .*{re.escape(what)}")


def child_json(target, script: str, *args: str, timeout: float = 120, env: dict[str, str] | None = None):
    """The JSON value that ``script`` prints as its last line, run with ``python -c`` in a child process on
    ``target`` (argv: the target's name, then ``args``; its environment plus ``env``): for the clauses about
    process-wide state (primary contexts, faults that end a context, the environment, resident memory), which
    a fresh process alone shows as it is."""
    proc = subprocess.run([sys.executable, "-c", script, target.name, *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **target.environment(), **(env or {})})
    assert proc.returncode == 0, f"the child exited with status {proc.returncode}: {proc.stderr[-1500:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cuda_driver(device, calls: str):
    """The CUDA driver module behind a cuda device, for the clauses that call the driver's own API beside the
    library (as clients mixing libraries do); on any other backend the test is not-supported, naming ``calls``."""
    if device.info.backend != "cuda":
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a CUDA driver ({calls})")
    return device.native.driver


@contextlib.contextmanager
def context_current(device):
    """The device's CUDA context pushed current on this thread for the test's own driver calls, popped on exit
    (the library pushes it around its own calls only)."""
    cu = device.native.driver
    err, = cu.cuCtxPushCurrent(device.native.context)
    assert not err, f"cuCtxPushCurrent: {err}"
    try:
        yield cu
    finally:
        cu.cuCtxPopCurrent()


def poisoned(device, stream, nbytes: int):
    """A buffer whose every byte is POISON, so untouched bytes are recognisable."""
    buf = device.alloc(nbytes)
    stream.fill(buf, POISON)
    return buf


def upload(device, stream, host: np.ndarray):
    buf = device.alloc(host.nbytes)
    stream.copy_htod(buf, host)
    return buf


def wait_then(then: str):
    """``wait(stream, event)``: ``other.wait(event)`` on a new stream ``other`` (nothing else enqueued on it), then
    ``then`` on it: "Stream.synchronize", "Stream.synchronize(timeout)" or "Event.synchronize" (of an event
    recorded on it)."""

    def wait(stream, event) -> None:
        other = stream.device.create_stream()
        other.wait(event)
        if then == "Stream.synchronize":
            other.synchronize()
        elif then == "Stream.synchronize(timeout)":
            other.synchronize(timeout=60)
        else:
            other.record().synchronize()

    return wait


def assert_wait_outlasts_running_work(device, stream, kernels, wait, op: str) -> None:
    """Running work, a marker's fill and an event on ``stream``, then ``wait(stream, event)``: once it returns the
    event's query() is True and the marker has landed for a stream not ordered after the work (seen from
    outside the stream: where a copy_dtoh into pageable memory waits by itself, as CUDA's does, a read on the
    same stream cannot tell a wait that returns early)."""
    work = RunningWork(device, stream, kernels)
    try:
        with device.alloc(4) as marker:
            stream.fill(marker, 0)
            work.enqueue(stream)
            stream.fill(marker, 7)
            event = stream.record()
            wait(stream, event)
            assert event.query() is True, f"{op} returned before the event completed"
            assert (read(device.create_stream(), marker) == 7).all(), f"{op} returned before the work"
            work.check(stream)
    finally:
        work.free()


def unreported_errors(monkeypatch) -> list[str]:
    """The exceptions that reach ``sys.unraisablehook`` (a finalizer's, a weakref callback's) or
    ``threading.excepthook`` (a library thread's) for the rest of the test, as "Type: message": reported nowhere
    else, each is a release that failed and something lost."""
    raised: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: raised.append(f"{u.exc_type.__name__}: {u.exc_value}"))
    monkeypatch.setattr(threading, "excepthook", lambda a: raised.append(f"{a.exc_type.__name__}: {a.exc_value}"))
    return raised


def poll_until_complete(event, seconds: float = 60) -> None:
    """Wait for ``event`` with ``query()`` alone (no synchronize), failing after ``seconds``."""
    import time

    deadline = time.monotonic() + seconds
    while not event.query():
        assert time.monotonic() < deadline, f"query() never said True within {seconds:g} s"
        time.sleep(0.0005)


def assert_device_works(device, kernels) -> None:
    """A saxpy round trip gives numpy's result: the clause "the device still works"."""
    s = device.create_stream()
    n = 1000
    x = rng(7).standard_normal(n).astype(np.float32)
    y = rng(8).standard_normal(n).astype(np.float32)
    bx, by = upload(device, s, x), upload(device, s, y)
    s.launch(kernels("saxpy"), ceil_div(n, 64), 64, (bx, by, np.float32(3.0), np.uint32(n)))
    got = read(s, by, np.float32)
    np.testing.assert_allclose(got, np.float32(3.0) * x + y, rtol=1e-6, atol=1e-6)
    bx.free()
    by.free()


def rss_bytes() -> int:
    """The process's resident memory (Linux: /proc/self/statm), where a CPU driver's device memory lives,
    once the C allocator has given back its free pages (glibc's malloc_trim): memory freed but kept in the
    heap is not in use, and a heap fragmented around someone else's leak keeps a lot of it (opengl/llvmpipe:
    moderngl leaks ~18 KiB a context, and the heap then grows ~120 bytes for each event a Device recorded
    before close, all of them freed: LIFE-82)."""
    import ctypes
    import os

    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc only
    if trim is not None:
        trim(0)
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def resident_growth(repeat, batch: int, most: int, seconds: float = 10.0) -> tuple[int, int]:
    """(done, grown bytes): ``repeat(2 * batch)`` first, so what the first rounds set up once (pools, caches) is
    not counted, then ``repeat(batch)`` until ``most`` are done or ``seconds`` have passed (a slow driver does fewer);
    ``repeat`` leaves its work completed and collected."""
    import time

    repeat(2 * batch)
    before = rss_bytes()
    done, deadline = 0, time.monotonic() + seconds
    while done < most and time.monotonic() < deadline:
        repeat(batch)
        done += batch
    return done, rss_bytes() - before


def memory_churn(device, target) -> tuple[int, int, int]:
    """(size, rounds, touched): buffers of ``size`` bytes, ``touched`` of them filled, ``rounds`` of them
    together several times what the device holds, for a test that allocates and gives them back in turn (a
    backend that loses them runs out, or on a CPU driver grows the process by about ``rounds * size``)."""
    info = device.info
    if target.memory_kind == "device" and info.memory:  # the driver counts its memory
        size = min(info.limits.max_alloc, max(info.memory // 8, 4096))
        return size, 2 * info.memory // size + 2, 4096
    if target.memory_kind == "device":  # a device that does not say how much it holds (wgpu): a few GiB go round
        return min(info.limits.max_alloc, 256 << 20), 16, 4096
    # a CPU driver's memory is the process's: filled (so it is really taken) and measured
    size = min(info.limits.max_alloc, 8 << 20)
    return size, 32, size  # 256 MiB: SwiftShader's WebGPU fills it in ~1 min


def _spirv_nop() -> bytes:
    """SPIR-V of ``nop`` (the GLSL one below, assembled by hand: a device may compile SPIR-V alone)."""
    def op(code: int, *operands: int) -> list[int]:
        return [(len(operands) + 1) << 16 | code, *operands]

    name = int.from_bytes(b"nop\0", "little")
    words = [0x07230203, 0x00010300, 0, 12, 0,  # magic, SPIR-V 1.3, generator, id bound, schema
             *op(17, 1), *op(14, 0, 1), *op(15, 5, 4, name),  # Shader; Logical GLSL450; GLCompute %4 "nop"
             *op(16, 4, 17, 1, 1, 1), *op(71, 7, 1, 0), *op(71, 8, 1, 1), *op(71, 9, 1, 2),  # LocalSize; SpecId 0..2
             *op(71, 11, 11, 25), *op(19, 2), *op(33, 3, 2), *op(21, 6, 32, 0),  # %11 WorkgroupSize; void; fn; u32
             *op(50, 6, 7, 1), *op(50, 6, 8, 1), *op(50, 6, 9, 1), *op(23, 10, 6, 3), *op(51, 10, 11, 7, 8, 9),
             *op(54, 2, 4, 0, 3), *op(248, 5), *op(253), *op(56)]  # %4 = function { label; return }
    return np.array(words, "<u4").tobytes()


#: ``nop``: a kernel that takes no argument, in each dialect the suite's targets compile.
NOP = {
    "cuda": 'extern "C" __global__ void nop() {}',
    "ptx": ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry nop() { ret; }",
    "glsl": "#version 450\nlayout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;\nvoid main() {}",
    "spirv": _spirv_nop(),
    "glsl430": "#version 430\nvoid main() {}",
    "wgsl": ("override BLOCK_X: u32 = 64;\noverride BLOCK_Y: u32 = 1;\noverride BLOCK_Z: u32 = 1;\n"
             "@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z) fn nop() {}"),
    "opencl": "__kernel void nop(void) {}",
}


def nop_kernels(device) -> list[tuple[str, object]]:
    """(language, kernel) of ``nop`` in each language of NOP the device compiles (at least one, else fails)."""
    langs = [lang for lang in device.languages if lang in NOP]
    assert langs, f"the suite has no nop kernel for {device.languages}"
    return [(lang, device.compile(NOP[lang], lang, options=["-e", "nop"] if lang.startswith("glsl") else []).kernel("nop"))
            for lang in langs]


def in_forked_child(check, seconds: float = 30.0) -> str:
    """Run ``check()`` (which returns "" or what went wrong) in a forked child; what it said, "crashed" with the
    signal or exit status, or "hung". The child leaves with os._exit: nothing of pytest runs twice."""
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a process with threads: what is tested
        pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            verdict = check() or "ok"
        except BaseException as exc:  # noqa: BLE001 - everything the child met goes back to the parent
            verdict = f"raised {exc!r}"
        os.write(write_end, verdict.encode()[:4000])
        os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + seconds
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([read_end], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return "hung"
            chunk = os.read(read_end, 4096)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
    _, status = os.waitpid(pid, 0)
    said = b"".join(chunks).decode()
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status):
        return f"crashed ({status:#x}) after saying {said!r}"
    return said


_HOST_PAGES_CALLS = [0]


def host_pages_above(address: int, size: int) -> tuple[int, object]:
    """Anonymous host pages, mapped above ``address`` where there is room (else wherever the system puts them),
    and the function that unmaps them. Each call starts one GiB higher, so that a rerun of a failed test does
    not meet what the failed run left registered."""
    # a driver reserving its device address range in one piece reserves at most 256 GiB above ``address``
    return _host_pages_from((address + (1 << 38)) & ~((1 << 30) - 1), size)


def host_pages_low(size: int) -> tuple[int, object]:
    """As host_pages_above, from 64 GiB up: far below where Linux puts a process's shared libraries and the
    anonymous memory it maps without an address (just under the stack, near 128 TiB), so below the memory a
    driver maps for itself there."""
    return _host_pages_from(1 << 36, size)


def _host_pages_from(start: int, size: int) -> tuple[int, object]:
    """Anonymous host pages at the first free GiB boundary from ``start`` (else wherever the system puts
    them), and the function that unmaps them."""
    import ctypes
    import mmap
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    prot, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    fixed_noreplace, failed = 0x100000, ctypes.c_void_p(-1).value
    start += _HOST_PAGES_CALLS[0] * (1 << 30)
    for i in range(256):
        p = libc.mmap(start + i * (1 << 30), size, prot, flags | fixed_noreplace, -1, 0)
        if p not in (None, failed) and p == start + i * (1 << 30):
            _HOST_PAGES_CALLS[0] += i + 1
            break
        if p not in (None, failed):
            libc.munmap(p, size)
    else:
        p = libc.mmap(None, size, prot, flags, -1, 0)
        assert p not in (None, failed), f"mmap of {size} bytes failed"
    ctypes.memset(p, 5, size)
    return p, lambda: libc.munmap(p, size)
