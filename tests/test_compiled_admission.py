"""The compiled API methods admit no more than api.py's rules (issue 27: a rule lives in one place).

FastStream's ``copy_htod``, ``copy_dtoh``, ``launch``, ``record`` and ``synchronize`` and FastEvent's ``query`` and
``synchronize`` are their compiled bases' (``ironaccel/_fast_c/``): each does the common case itself only when
every rule of the api method holds, and hands anything else, unchanged, to that method, the one place the rule
and its typed error are written. Here each call that breaks a rule, and each that sits on a rule's edge, goes
through the compiled method and through api.py's (its Python definition) on the same stream: the outcome (the
error's type and text, or success and the bytes moved) must be the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import ironaccel as ia
from ironaccel import api
from ironaccel.cts.testing.cuda_fake import PTX_STORE, load_fake


@pytest.fixture(scope="module")
def backend() -> Any:
    """The CUDA backend on the fake libcuda, with the compiled module loaded."""
    from ironaccel.backends.cuda import CudaBackend, native

    load_fake()
    if native.fast is None:
        pytest.skip("the compiled path is not loaded (IRONACCEL_PURE_PYTHON=1 or no compiler)")
    return CudaBackend()


@pytest.fixture
def device(backend: Any) -> Iterator[Any]:
    dev = backend.open_device(0)
    yield dev
    dev.close()


def outcome(call: Callable[[], object]) -> tuple[str, str]:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the outcome compared is any error
        return type(exc).__name__, str(exc)
    return "ok", ""


def assert_same(stream: Any, method: str, *args: object, **kwargs: object) -> tuple[str, str]:
    """The outcome of ``stream.method(*args, **kwargs)`` through the compiled method equals api.py's."""
    compiled = getattr(type(stream), method)
    python = getattr(api.Stream if isinstance(stream, api.Stream) else api.Event, method)
    assert compiled is not python and "Core" in compiled.__qualname__, compiled
    got = outcome(lambda: compiled(stream, *args, **kwargs))
    assert got == outcome(lambda: python(stream, *args, **kwargs)), (method, args, kwargs)
    return got


def hosts() -> list[object]:
    """Host data on each side of the rules of api._host_bytes."""
    fortran = np.asfortranarray(np.arange(16, dtype=np.uint8).reshape(4, 4))
    readonly = np.arange(16, dtype=np.uint8)
    readonly.flags.writeable = False
    return [np.arange(16, dtype=np.uint8), np.arange(32, dtype=np.uint8)[::2], fortran,
            np.arange(16, dtype=np.uint8).reshape(4, 4), np.array([1, 2], dtype=object), np.zeros(0, np.uint8),
            np.zeros(65, np.uint8), readonly, np.zeros(2, "datetime64[s]"), bytearray(8), b"12345678", [1, 2]]


OFFSETS = [0, 48, 49, 64, -1, 1.0, True, 2**70, np.int64(8), None]


@pytest.mark.parametrize("method, keyword", [("copy_htod", "dst_offset"), ("copy_dtoh", "src_offset")])
def test_copies_admit_what_the_api_admits(device, method, keyword):
    s = device.create_stream()
    pool = ia.MemPool(device, s)
    buf, freed, pooled, freed_pooled = device.alloc(64), device.alloc(64), pool.alloc(64), pool.alloc(64)
    freed.free()
    freed_pooled.free()
    seen = set()
    for target in (buf, pooled, freed, freed_pooled, "a buffer"):
        for host in hosts():
            for offset in OFFSETS:
                args = (target, host) if method == "copy_htod" else (host, target)
                kwargs = {} if offset is None else {keyword: offset}
                seen.add(assert_same(s, method, *args, **kwargs)[0])
    assert seen >= {"ok", "InvalidArgument", "UseAfterFree"}  # the cases reach each side of the rules
    with s.capture():
        assert assert_same(s, method, *((buf, hosts()[0]) if method == "copy_htod" else (hosts()[0], buf)))[0] \
            == "InvalidArgument"
    pooled.free()
    pool.close()


def test_copied_bytes_are_the_same_both_ways(device):
    s = device.create_stream()
    with device.alloc(64) as buf:
        for method in ("compiled", "python"):
            copy_htod = type(s).copy_htod if method == "compiled" else api.Stream.copy_htod
            copy_htod(s, buf, np.arange(16, dtype=np.uint8) + (method == "python"), dst_offset=48)
            out = np.zeros(16, np.uint8)
            (type(s).copy_dtoh if method == "compiled" else api.Stream.copy_dtoh)(s, out, buf, src_offset=48)
            s.synchronize()
            assert (out == np.arange(16) + (method == "python")).all()


def test_a_closed_devices_calls_refuse_alike(backend):
    dev = backend.open_device(0)
    s = dev.create_stream()
    buf = dev.alloc(64)
    event = s.record()
    dev.close()
    host = np.zeros(4, np.uint8)
    assert assert_same(s, "copy_htod", buf, host)[0] == "UseAfterFree"
    assert assert_same(s, "copy_dtoh", host, buf)[0] == "UseAfterFree"
    assert assert_same(s, "record")[0] == "UseAfterFree"
    assert assert_same(s, "synchronize")[0] == "UseAfterFree"
    assert assert_same(event, "query")[0] == "UseAfterFree"
    assert assert_same(event, "synchronize")[0] == "UseAfterFree"


def test_a_buffer_of_another_device_is_refused_alike(backend, device):
    other = backend.open_device(0)
    try:
        s, theirs = device.create_stream(), other.alloc(64)
        assert assert_same(s, "copy_htod", theirs, np.zeros(4, np.uint8))[0] == "InvalidArgument"
        assert assert_same(s, "copy_dtoh", np.zeros(4, np.uint8), theirs)[0] == "InvalidArgument"
        kernel = device.compile(PTX_STORE, "ptx").kernel("store")
        assert assert_same(s, "launch", kernel, 1, 1, (theirs, np.uint32(7)))[0] == "InvalidArgument"
        assert assert_same(s, "launch", other.compile(PTX_STORE, "ptx").kernel("store"), 1, 1,
                           (device.alloc(64), np.uint32(7)))[0] == "InvalidArgument"
    finally:
        other.close()


def test_waits_and_records_admit_what_the_api_admits(device):
    s = device.create_stream()
    for kwargs in ({}, {"timeout": None}, {"timeout": 1.0}, {"timeout": -1}, {"timeout": 0}, {"timeout": "1"}):
        assert_same(s, "synchronize", **kwargs)
        assert_same(s.record(), "synchronize", **kwargs)
    for args, kwargs in (((), {}), ((), {"timing": True}), ((), {"timing": False}), ((True,), {})):
        assert_same(s, "record", *args, **kwargs)
    with s.capture():
        assert assert_same(s, "record")[0] == "InvalidArgument"


def test_launches_admit_what_the_api_admits(device, monkeypatch):
    """api.Stream.launch's Python definition: with FastStream's one-call _launch_plan taken away, the api's own
    checks run (api.Stream._launch_plan) before the backend's launch."""
    from ironaccel.backends.cuda.fast import FastStream

    monkeypatch.delattr(FastStream, "_launch_plan")
    s = device.create_stream()
    pool = ia.MemPool(device, s)
    kernel = device.compile(PTX_STORE, "ptx").kernel("store")
    buf, freed, freed_pooled = device.alloc(64), device.alloc(64), pool.alloc(64)
    freed.free()
    freed_pooled.free()
    value = np.uint32(7)
    cases = [(kernel, 1, 1, (buf, value)), (kernel, 1, 1, [buf, value]), (kernel, (1,), (1, 1), (buf, value)),
             (kernel, (True,), 1, (buf, value)), (kernel, 0, 1, (buf, value)), (kernel, 1, 2048, (buf, value)),
             (kernel, 1, 1, (freed, value)), (kernel, 1, 1, (freed_pooled, value)), (kernel, 1, 1, (buf,)),
             (kernel, 1, 1, (value, buf)), (kernel, 1, 1, (buf, 7)), (kernel, 1, 1, (buf, np.float32(7))),
             (kernel, 1, 1, iter((buf, value))), ("a kernel", 1, 1, (buf, value)), (kernel, 1, 1)]
    seen = set()
    for args in cases:
        for _ in range(2):  # the second call of each: the compiled launch's cached resolution
            seen.add(assert_same(s, "launch", *args)[0])
    assert seen >= {"ok", "InvalidArgument", "UseAfterFree"}
    pool.close()


def test_a_captured_launch_is_recorded_alike(device, monkeypatch):
    """A launch on a capturing stream goes to the Python method, which records the buffers the graph uses: a
    graph whose buffer was freed then refuses to launch, whichever method captured it."""
    from ironaccel.backends.cuda.fast import FastStream

    s = device.create_stream()
    kernel = device.compile(PTX_STORE, "ptx").kernel("store")
    with device.alloc(64) as warm:  # the kernel's plan and rule made: the compiled launch takes the next one
        for _ in range(2):
            s.launch(kernel, 1, 1, (warm, np.uint32(7)))
        s.synchronize()
    outcomes = []
    for launch in (type(s).launch, None):
        if launch is None:
            monkeypatch.delattr(FastStream, "_launch_plan")
            launch = api.Stream.launch
        buf = device.alloc(64)
        with s.capture() as graph:
            launch(s, kernel, 1, 1, (buf, np.uint32(7)))
        buf.free()
        outcomes.append(outcome(lambda: graph.launch(s)))
        graph.close()
    assert outcomes[0] == outcomes[1] and outcomes[0][0] == "UseAfterFree", outcomes
