"""ERR: every error is typed and names its op; the device survives every kind of error."""

from __future__ import annotations

import ctypes
import re
import threading
import time

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.backends import get as get_backend
from ironaccel.cts.pytest_plugin import NOT_SUPPORTED_PREFIX
from ironaccel.pool import MemPool

from .helpers import assert_device_works, in_forked_child, nop_kernels, raises_naming, read, upload

KIB = 1024

# kind -> (the op the error must name: the public one called, or None where it may be the compiler's own; the call)
ERRORS = {
    "invalid argument": ("Stream.fill", lambda d, s: s.fill(d.alloc(4), 300)),
    "compile error": (None, lambda d, s: d.compile({"spirv": b"\x00" * 8}.get(d.languages[0], "this is not a kernel"),
                                                   d.languages[0])),
    "out of memory": ("Device.alloc", lambda d, s: d.alloc(d.info.limits.max_alloc + 4096)),
    "use after free": ("Stream.copy_htod", lambda d, s: _freed(d, s)),
    "unsupported or invalid capability": ("Device.supports", lambda d, s: d.supports("no.such.capability")),
}


def _freed(device, stream):
    buf = device.alloc(8)
    buf.free()
    stream.copy_htod(buf, np.zeros(8, np.uint8))


@pytest.mark.clause("ERR-1", "ERR-2")
@pytest.mark.parametrize("kind", sorted(ERRORS))
def test_typed_error_then_device_works(device, stream, kernels, kind):
    op, call = ERRORS[kind]
    with pytest.raises(ia.IronAccelError) as info:
        call(device, stream)
    err = info.value
    named = getattr(err, "op", None)
    assert named and named in str(err) and named == (op or named), f"{type(err).__name__} does not name {op}: {err}"
    assert_device_works(device, kernels)


def _wrong_types(device, stream, kernels):
    """(op, call) pairs of public methods given arguments of the wrong type."""
    backend = get_backend(device.info.backend)
    saxpy = kernels("saxpy")
    buf, other = device.alloc(64), device.alloc(64)
    args = (other, buf, np.float32(1), np.uint32(0))
    stream.launch(saxpy, (1,), (1,), args)  # the ints first: a cache of checked dims must not admit bools later,
    stream.launch(saxpy, 1, 1, args)  # nor floats, in either form (True == 1 and 1.0 == 1 as dict keys),
    stream.launch(saxpy, (np.int64(1),), (np.int64(1),), args)  # nor after numpy ints, which equal them too
    lang = device.languages[0]
    return buf, other, [
        ("Device.supports", lambda: device.supports(["events.timing"])),
        ("Module.kernel", lambda: saxpy.module.kernel(["saxpy"])),
        ("Device.compile", lambda: device.compile("x" if lang not in ("spirv", "cubin") else b"x", lang, options=None)),
        ("Device.compile", lambda: device.compile("x" if lang not in ("spirv", "cubin") else b"x", lang, options=[1, 2])),
        ("Device.compile", lambda: device.compile("x" if lang not in ("spirv", "cubin") else b"x", lang, options="-O3")),
        ("Stream.launch", lambda: stream.launch(saxpy, 1, 1, None)),
        ("Stream.launch", lambda: stream.launch(saxpy, (True,), (1,), args)),
        ("Stream.launch", lambda: stream.launch(saxpy, (1,), (1.0,), args)),
        ("Stream.launch", lambda: stream.launch(saxpy, (True,), (np.int64(1),), args)),
        ("Stream.launch", lambda: stream.launch(saxpy, (np.int64(1),), (1.0,), args)),
        ("Stream.launch", lambda: stream.launch(saxpy, True, 1, args)),
        ("Stream.launch", lambda: stream.launch(saxpy, 1, True, args)),
        ("Stream.launch", lambda: stream.launch(saxpy, 1.0, 1, args)),
        ("Stream.launch", lambda: stream.launch(saxpy, 1, np.float32(1), args)),
        ("Stream.synchronize", lambda: stream.synchronize(timeout="soon")),
        ("Stream.synchronize", lambda: stream.synchronize(timeout=-1)),
        *[("Backend.open_device", lambda index=index: backend.open_device(index)) for index in ("0", 0.0, None, False)],
    ]


@pytest.mark.clause("ERR-3", "ERR-1")
def test_wrong_argument_types_are_invalid_arguments(device, stream, kernels):
    buf, other, cases = _wrong_types(device, stream, kernels)
    with buf, other:
        stream.fill(buf, 0x11)
        for op, call in cases:
            with pytest.raises(ia.InvalidArgument, match="^" + op.replace(".", r"\.") + ": "):
                call()
        got = np.empty(64, np.uint8)
        stream.copy_dtoh(got, buf)
        stream.synchronize()
        assert (got == 0x11).all(), "a rejected launch ran"
    assert_device_works(device, kernels)


@pytest.mark.clause("ERR-3", "KERNEL-18")
def test_dims_of_other_accepted_types_launch_with_their_own_values(device, stream, kernels):
    """Grids and blocks given as numpy integers or lists are valid but no cache key of exact ints: launches
    with other such values (grid or block alike) after one another each run with their own, never with dims
    checked and kept for an earlier one."""
    k = kernels("fill_u32")
    n = 1024
    with device.alloc(4 * n) as out:
        for value, (grid, block) in enumerate([(np.int64(2), 64), (np.int64(4), 64), (np.uint32(16), 64),
                                               ([8], 64), ([3], 64), (2, np.int32(32)), (2, np.int64(128)),
                                               (2, [256]), (2, [64])], start=1):
            stream.fill(out, 0)
            stream.launch(k, grid, block, (out, np.uint32(value), np.uint32(n)))
            threads = int(np.ravel(grid)[0]) * int(np.ravel(block)[0])
            want = np.where(np.arange(n) < threads, value, 0).astype(np.uint32)
            np.testing.assert_array_equal(read(stream, out, np.uint32), want,
                                          err_msg=f"launch {value} (grid {grid!r}, block {block!r})")


@pytest.mark.clause("ERR-3", "KERNEL-18")
def test_dims_of_a_kernel_without_parameters_are_checked_when_args_are_given(device, stream, kernels):
    """The dims are checked whatever the args are: a kernel that takes nothing, launched with an explicit empty
    argument tuple after a launch of the same dims as ints (so a plan for them exists), launches with a list
    block or grid and refuses a float one. A check that reads the args in the block's place finds ``()`` (a
    tuple of ints, like exact dims) and lets the block through unchecked: a list then fails as a dict key with a
    bare TypeError and a float one launches with the plan of the int it equals."""
    for lang, k in nop_kernels(device):
        stream.launch(k, 1, 64, ())
        stream.launch(k, (1,), (64,), ())
        for grid, block in [(1, [64]), ([1], 64), ((1,), [64]), ([1], [64])]:
            stream.launch(k, grid, block, ())
        for grid, block in [(1, 64.0), (1.0, 64), ((1,), (64.0,)), ((1.0,), (64,)), (1, True), (True, 64)]:
            with pytest.raises(ia.InvalidArgument, match=r"^Stream\.launch: "):
                stream.launch(k, grid, block, ())
        stream.synchronize()
    assert_device_works(device, kernels)


@pytest.mark.clause("POOL-31")
@pytest.mark.parametrize("cap", ["max_cached_bytes", "max_per_bucket"])
@pytest.mark.parametrize("bad", [-1, 1.5, "8", True, None])
def test_a_pools_bad_caps_raise_naming_the_constructor_and_the_cap(device, stream, cap, bad):
    with raises_naming(ia.InvalidArgument, "MemPool", cap):
        MemPool(device, stream, **{cap: bad})


@pytest.mark.clause("POOL-31")
def test_a_pools_device_and_stream_are_checked(device, stream):
    with raises_naming(ia.InvalidArgument, "MemPool", "device"):
        MemPool(stream, stream)
    with pytest.raises(ia.InvalidArgument, match="^MemPool: ") as info:
        MemPool(None, stream)
    # the device is at fault, not the (good) stream: a check that lets a non-Device through to the stream's
    # check blames the stream ("stream must be a Stream of the pool's device")
    assert "device" in str(info.value) and "stream" not in str(info.value), info.value
    for bad in (None, device):
        with raises_naming(ia.InvalidArgument, "MemPool", "stream"):
            MemPool(device, bad)


@pytest.mark.clause("ERR-30", "KERNEL-15")
def test_launch_argument_errors_describe_the_kernels_parameters(device, stream, kernels):
    """saxpy takes (x: buffer, y: buffer, a: f32, n: u32). A rejected launch says what the kernel takes, as
    reflected from its code, so the caller can fix the call: the list in order for a wrong count, and what is
    declared at the position at fault (a description that calls buffers scalars or scalars buffers misleads)."""
    saxpy = kernels("saxpy")
    scalar = r"(float|int|scalar)32"
    with device.alloc(64) as x, device.alloc(64) as y:
        cases = [
            ((x, y, np.float32(1)), rf"\(buffer[^,]*, buffer[^,]*, {scalar}, {scalar}\)"),
            ((x, y, np.uint32(1), np.uint32(0)), r"argument 2 of saxpy is uint32; .*declares a float32 there"),
        ]
        for args, want in cases:
            with pytest.raises(ia.InvalidArgument, match="^Stream.launch: ") as info:
                stream.launch(saxpy, 1, 1, args)
            assert re.search(want, str(info.value)), f"{info.value} (wanted {want})"


def _dispatch_with_no_program(gl) -> None:
    """On the GL thread: glDispatchCompute with no program in use, which GL refuses (GL_INVALID_OPERATION)."""
    gl.glUseProgram(0)
    gl.glDispatchCompute(1, 1, 1)


def _bind_to_no_target(gl) -> None:
    """On the GL thread: glBindBuffer to a target GL does not have, which GL refuses (GL_INVALID_ENUM)."""
    gl.glBindBuffer(0x1234, 0)


@pytest.mark.clause("ERR-51")
@pytest.mark.parametrize("call, op, name", [(_dispatch_with_no_program, "glDispatchCompute", "GL_INVALID_OPERATION"),
                                            (_bind_to_no_target, "glBindBuffer", "GL_INVALID_ENUM")],
                         ids=["invalid_operation", "invalid_enum"])
def test_a_gl_error_is_named_as_gl_names_it_with_the_drivers_message(device, kernels, require, call, op, name):
    """A GL error is a flag read by glGetError: the backend turns the code into its GL name through a table,
    and asks the driver (KHR_debug, GL 4.3 core) for its own message, which says what was wrong."""
    require("lang.glsl430")
    native = device.native
    with pytest.raises(ia.DriverError) as info:
        native.run(call, native.gl)
    err = info.value
    assert type(err) is ia.DriverError and err.op == op, repr(err)
    assert err.name == name and f"failed: {name}" in str(err), str(err)
    assert "GL API ERROR" in err.detail, f"no KHR_debug message of the driver's in the error: {err}"
    explained = [note for note in err.detail.split(" / ") if note and not note.startswith("GL ")]
    assert explained, f"the error says nothing of what {err.name} means beside the driver's messages: {err}"
    assert device.diagnostics() == [], "the driver's message belongs to the error it explains"
    assert_device_works(device, kernels)


def _delete_buffer_object(gl, name: int) -> None:
    """On the GL thread: delete a GL buffer object behind the library's back (its later use fails in GL)."""
    gl.glDeleteBuffers(1, ctypes.byref(ctypes.c_uint(name)))


@pytest.mark.clause("ERR-64")
def test_a_failure_of_queued_gl_work_reaches_the_next_device_synchronize(device, kernels, require):
    """OpenGL work runs on the backend's GL thread after the call returned: a GL error there is kept and raised
    by the next wait. An Event.query that sees the work complete makes the device look idle, and an idle
    Device.synchronize that returns at once without raising the kept error loses it for good. On a Device of
    its own: the deleted buffer object's name may be handed out again, to no one else's buffer."""
    require("lang.glsl430")
    other = get_backend(device.info.backend).open_device(device.info.index)
    try:
        stream = other.create_stream()
        buf = other.alloc(4096)
        stream.fill(buf, 0)
        stream.synchronize()
        other.native.run(_delete_buffer_object, other.native.gl, buf.handle)
        stream.fill(buf, 1)  # queued: fails on the GL thread
        event = stream.record()
        raised = []
        for wait in (event.query, other.synchronize, other.synchronize):
            try:
                while wait() is False:
                    time.sleep(0.001)
            except ia.DriverError as exc:
                raised.append(exc)
        assert len(raised) == 1, f"the failed fill's GL error was raised {len(raised)} times by the waits: {raised}"
        assert raised[0].op.startswith("gl"), f"the error names {raised[0].op!r}, not the GL function that failed"
    finally:
        other.close()
    assert_device_works(device, kernels)


@pytest.mark.clause("POOL-32")
def test_a_pool_used_as_a_context_manager_is_closed_on_exit(device, stream):
    with MemPool(device, stream) as pool:
        pool.alloc(KIB).free()
    with raises_naming(ia.UseAfterFree, "MemPool.alloc", "closed"):
        pool.alloc(KIB)
    assert pool.stats().bytes_cached == 0, "a pool left by its with block still caches blocks"
    with pytest.raises(RuntimeError), MemPool(device, stream) as failed:
        raise RuntimeError("the block failed")
    with raises_naming(ia.UseAfterFree, "MemPool.alloc", "closed"):
        failed.alloc(KIB)


@pytest.mark.clause("ERR-53")
def test_a_thread_of_a_forked_child_gets_driver_errors(device, stream, kernels):
    """CUDA is not usable in a forked child: the driver refuses its calls (CUDA_ERROR_NOT_INITIALIZED), and a
    thread the child starts must first make the device's context current, which fails. Each call then raises
    that DriverError or works, never another exception type: a compiled path that takes the failed
    context switch for success carries on with the error still set, and the caller gets a SystemError. The
    launches are warm (launched twice before the fork), so a compiled launch path takes them."""
    if device.info.backend != "cuda":
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a CUDA device (the driver's contexts and fork)")
    buf = device.alloc(4096)
    saxpy = kernels("saxpy")
    args = (buf, buf, np.float32(1.0), np.uint32(64))
    plan = saxpy.prepare(1, 64)
    for _ in range(2):
        stream.launch(saxpy, 1, 64, args)
        plan(stream, *args)
    event = stream.record()
    stream.synchronize()
    calls = {
        "Device.alloc": lambda: device.alloc(1024).free(),
        "Device.create_stream": device.create_stream,
        "Stream.copy_htod": lambda: stream.copy_htod(buf, np.zeros(1024, np.uint8)),
        "Stream.copy_dtoh": lambda: stream.copy_dtoh(np.zeros(1024, np.uint8), buf),
        "Stream.fill": lambda: stream.fill(buf, 1),
        "Stream.record": stream.record,
        "Stream.record(event=)": lambda: stream.record(event=event),
        "Stream.synchronize": stream.synchronize,
        "Stream.launch": lambda: stream.launch(saxpy, 1, 64, args),
        "LaunchPlan": lambda: plan(stream, *args),
    }

    def child() -> str:
        wrong: list[str] = []

        def thread() -> None:
            for name, call in calls.items():
                try:
                    call()
                except ia.DriverError:
                    pass
                except BaseException as exc:  # noqa: BLE001 - what is tested
                    wrong.append(f"{name} raised {exc!r}")

        t = threading.Thread(target=thread)
        t.start()
        t.join()
        return "; ".join(wrong)

    try:
        verdict = in_forked_child(child)
        assert verdict == "ok", f"in a thread of the forked child: {verdict}"
    finally:
        buf.free()


@pytest.mark.clause("ERR-63", "ERR-1")
def test_a_warm_kernel_launched_with_a_prefix_or_an_extension_of_its_arguments_refuses_it(device, stream, kernels):
    """saxpy launched the right way twice (a compiled path remembers a launch it has seen twice), then with its
    first three arguments only and with a fifth one added, of the same types as the warm launch's so far: each
    raises InvalidArgument naming Stream.launch and runs nothing, and the right launch still runs. A launch cache
    that matches the argument types only over the shorter of the two lists launches the prefix with a parameter
    left unset (the kernel reads whatever the slot held) and reads past the end of a cached list."""
    k = kernels("saxpy")
    n = 64
    x = np.arange(n, dtype=np.float32)
    bx, by = upload(device, stream, x), upload(device, stream, np.zeros(n, np.float32))
    try:
        good = (bx, by, np.float32(2.0), np.uint32(n))
        for _ in range(2):
            stream.launch(k, 1, n, good)
        stream.synchronize()
        want = read(stream, by, np.float32)
        for args in (good[:3], (*good, np.uint32(1)), good[:3], (*good, np.uint32(1))):
            with pytest.raises(ia.InvalidArgument, match=r"^Stream\.launch: "):
                stream.launch(k, 1, n, args)
        np.testing.assert_array_equal(read(stream, by, np.float32), want, err_msg="a refused launch ran")
        stream.launch(k, 1, n, good)
        np.testing.assert_array_equal(read(stream, by, np.float32), want + 2 * x, err_msg="the right launch after")
    finally:
        bx.free()
        by.free()
