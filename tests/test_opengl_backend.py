"""The OpenGL backend's own behaviour, beyond the shared conformance suite: the glsl430 dialect (block
injection, line numbers, naming, bindings, the scalar block), reflection, launch checks, deferred readbacks,
fences and timeouts, GL errors and KHR_debug diagnostics, several threads on one device, and the driver
table the targets use.

Runs on every OpenGL target this machine has (opengl/llvmpipe here, opengl/nvidia on an NVIDIA machine);
each device must end its test with no diagnostics.
"""

from __future__ import annotations

import gc
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.cts import targets
from ironaccel.api import DeviceInfo, Limits, Param
from ironaccel.backends.opengl import native as GL
from ironaccel.backends.opengl.module import _with_block

from ironaccel.cts.testing.work import RunningWork
from hostile_sources import macro_bomb

KERNELS = Path(__file__).resolve().parents[1] / "conformance" / "kernels" / "glsl430"
TARGETS = ["opengl/llvmpipe", "opengl/nvidia"]


@pytest.fixture(scope="module", params=TARGETS, ids=[t.split("/")[1] for t in TARGETS])
def device(request):
    target = targets.get(request.param)
    missing = target.missing()
    if missing:
        pytest.skip(f"{target.name}: {missing}")
    from ironaccel.backends.opengl import OpenGLBackend

    backend = OpenGLBackend()  # the process's EGL may list both drivers' devices: take the target's
    for index in range(backend.device_count()):
        dev = backend.open_device(index)
        if target.matches(dev.info):
            break
        dev.close()
    else:
        pytest.fail(f"no {target.name} device among the EGL devices")
    yield dev
    dev.close()


@pytest.fixture(autouse=True)
def _no_diagnostics(request):
    yield
    if "device" in request.fixturenames:
        dev = request.getfixturevalue("device")
        if not dev.closed:
            messages = dev.diagnostics()
            assert not messages, "\n".join(messages)


@pytest.fixture
def stream(device):
    s = device.create_stream()
    yield s
    s.synchronize()


def kernel(device, name):
    return device.compile((KERNELS / f"{name}.comp").read_text(), "glsl430", options=("-e", name)).kernel(name)


def read(stream, buf, dtype=np.uint32):
    out = np.empty(buf.nbytes // np.dtype(dtype).itemsize, dtype)
    stream.copy_dtoh(out, buf)
    stream.synchronize()
    return out


# -- devices ------------------------------------------------------------------------------------------

def test_device_info_comes_from_the_context(device):
    info = device.info
    software = "EGL_MESA_device_software" in info.extra["egl_device_extensions"]
    assert info.backend == "opengl" and info.simulated is software
    if software:
        assert info.driver == "llvmpipe" and "llvmpipe" in info.name and "Mesa" in info.driver_version
    else:
        assert info.driver == "NVIDIA" and info.vendor.startswith("NVIDIA") and info.memory > 0
    assert info.limits.max_alloc > 0 and info.limits.max_alloc % 4 == 0
    assert info.extra["context_version"] >= 430
    assert device.languages == ("glsl430",)
    assert device.supports("events.timing")


def test_open_device_rejects_options(device):
    from ironaccel.backends.opengl import OpenGLBackend

    with pytest.raises(ia.InvalidArgument, match=r"Backend\.open_device.*no option validation"):
        OpenGLBackend().open_device(0, validation=True)


def test_native_handles_run_raw_gl_on_the_gl_thread(device):
    handles = device.native
    thread_names = handles.run(lambda: threading.current_thread().name)
    assert thread_names.startswith("ironaccel-opengl-")
    assert handles.run(handles.gl.integer, GL.MAX_SHADER_STORAGE_BLOCK_SIZE) // 4 * 4 == device.info.limits.max_alloc


# -- the glsl430 dialect ------------------------------------------------------------------------------

def test_block_is_injected_after_version_and_extensions():
    src = "#version 430\n#extension GL_NV_shader_atomic_float : require\n// note\nvoid main() {}"
    lines = _with_block(src, (8, 4, 2)).split("\n")
    assert lines[:3] == ["#version 430", "#extension GL_NV_shader_atomic_float : require", "// note"]
    assert lines[3] == "layout(local_size_x = 8, local_size_y = 4, local_size_z = 2) in;"
    assert lines[4] == "#line 4" and lines[5] == "void main() {}"


@pytest.mark.parametrize("comment", ["/* SPDX-License-Identifier: MIT */", "/*\n * a licence\n */"])
def test_block_is_injected_after_a_leading_block_comment_and_version(device, stream, comment):
    """GLSL allows comments before #version; a local size declared above the #version fails to compile."""
    src = f"{comment}\n#version 430\nlayout(std430, binding = 0) buffer B {{ uint v[]; }};\nvoid main() {{ v[0] = 7u; }}"
    after_version = comment.count("\n") + 2
    layout = _with_block(src, (1, 1, 1)).split("\n")[after_version]
    assert layout == "layout(local_size_x = 1, local_size_y = 1, local_size_z = 1) in;"
    with device.compile(src, "glsl430") as module, device.alloc(4) as buf:
        stream.launch(module.kernel("main"), 1, 1, (buf,))
        assert read(stream, buf)[0] == 7


def test_compile_errors_keep_the_source_line_numbers(device):
    src = "#version 430\nlayout(std430, binding = 0) buffer B { uint d[]; } b;\n\nvoid main() { b.d[0] = nope; }"
    with pytest.raises(ia.CompileError, match=r"glCompileShader") as info:
        device.compile(src, "glsl430")
    # Mesa says "0:4(24): error", NVIDIA "0(4) : error": line 4 either way
    assert re.search(r"\b0[:(]4\b", info.value.log) and "nope" in info.value.log, info.value.log


def test_kernel_is_main_unless_named(device):
    src = (KERNELS / "add_one.comp").read_text()
    assert device.compile(src, "glsl430").kernel("main").name == "main"
    with pytest.raises(ia.InvalidArgument, match=r"Module\.kernel.*add_one"):
        device.compile(src, "glsl430").kernel("add_one")
    for bad in (("-e",), ("-O",), ("-e", "not a name"), ("-e", "a", "-e", "b")):
        with pytest.raises(ia.InvalidArgument, match=r"Device\.compile.*-e"):
            device.compile(src, "glsl430", options=bad)


@pytest.mark.parametrize("src, complaint", [
    ("layout(local_size_x = 64) in;\nlayout(std430, binding = 0) buffer B { uint d[]; } b;\nvoid main() { b.d[0] = 1u; }",
     "local_size"),
    ("layout(std430, binding = 1) buffer B { uint d[]; } b;\nvoid main() { b.d[0] = 1u; }", "bindings 0..k-1"),
    ("layout(std430, binding = 0) buffer B { uint d[]; } b;\nlayout(std140, binding = 0) uniform A { uint n; } a;\n"
     "layout(std140, binding = 1) uniform C { uint m; } c;\nvoid main() { b.d[0] = a.n + c.m; }", "one uniform block"),
    ("layout(std430, binding = 0) buffer B { uint d[]; } b;\nlayout(std140, binding = 0) uniform A { uvec4 v; } a;\n"
     "void main() { b.d[0] = a.v.x; }", "not a scalar"),
])
def test_dialect_violations_are_refused_at_compile(device, src, complaint):
    with pytest.raises(ia.InvalidArgument, match=rf"Device\.compile.*{complaint}"):
        device.compile("#version 430\n" + src, "glsl430")


def test_params_reflect_bindings_then_scalars(device):
    assert kernel(device, "pack_args").params == (
        Param("buffer"), Param("buffer"),
        Param("scalar", 4, "int"), Param("scalar", 4, "float"), Param("scalar", 4, "int"), Param("scalar", 4, "int"))
    assert kernel(device, "daxpy").params == (Param("buffer"), Param("buffer"), Param("scalar", 8, "float"),
                                              Param("scalar", 4, "int"))
    assert kernel(device, "add_one").params == (Param("buffer"), Param("scalar", 4, "int"))


def test_one_program_per_block_size(device, stream):
    k = kernel(device, "add_one")
    n, blocks = 1000, (32, 64, 32, 128, 64)
    with device.alloc(4 * n) as buf:
        stream.fill(buf, 0)
        for block in blocks:
            stream.launch(k, -(-n // block), block, (buf, np.uint32(n)))
        assert set(k.module._programs) == {(1, 1, 1), (32, 1, 1), (64, 1, 1), (128, 1, 1)}
        np.testing.assert_array_equal(read(stream, buf), len(blocks))


def test_reflected_params_check_launches(device, stream):
    k = kernel(device, "saxpy")
    with device.alloc(64) as x, device.alloc(64) as y:
        for args in ((x, y, np.uint32(2), np.uint32(16)), (x, y, np.float32(2)), (x, y, np.float64(2), np.uint32(16)),
                     (x, np.float32(2), np.uint32(16)), (x, y, y, np.float32(2), np.uint32(16))):
            with pytest.raises(ia.InvalidArgument, match=r"Stream\.launch.*saxpy"):
                stream.launch(k, 1, 16, args)
        stream.launch(k, 1, 16, (np.float32(2), x, np.uint32(16), y))  # interleaved any way: buffers, then scalars


# -- copies, readbacks, fences ------------------------------------------------------------------------

def test_copy_dtoh_is_delivered_by_the_first_fence_after_it(device, stream):
    with device.alloc(16) as buf:
        stream.copy_htod(buf, np.arange(4, dtype=np.uint32))
        before = stream.record()
        host = np.full(4, 7, np.uint32)
        stream.copy_dtoh(host, buf)
        before.synchronize()
        np.testing.assert_array_equal(host, 7)  # an event recorded before the copy does not deliver it
        after = stream.record()
        while not after.query():
            time.sleep(0.001)
        np.testing.assert_array_equal(host, np.arange(4))


def test_readback_staging_is_reused(device, stream, monkeypatch):
    created = []
    real = device.gl.glBufferStorage
    monkeypatch.setattr(device.gl, "glBufferStorage", lambda *a: created.append(a[1]) or real(*a))
    with device.alloc(3000) as buf:
        stream.fill(buf, 3)
        for n in (1000, 3000, 17, 3000):  # one 4 KiB class: the first readback's staging serves them all
            host = np.zeros(n, np.uint8)
            stream.copy_dtoh(host, buf)
            stream.synchronize()
            assert (host == 3).all()
    assert created in ([], [4096])  # [] when an earlier test left a 4 KiB staging buffer in the cache


def test_readbacks_in_flight_stay_within_the_staging_bound(device, stream, monkeypatch):
    """Staging buffers of queued readbacks count towards the bound: past it, the queued copies are finished and
    their staging reused (NVIDIA's driver keeps the pinned memory of deleted staging buffers: LIFE-88)."""
    from ironaccel.backends.opengl import memory

    monkeypatch.setattr(memory, "STAGING_CACHE_BYTES", 64 << 10)
    created = []
    real = device.gl.glBufferStorage
    monkeypatch.setattr(device.gl, "glBufferStorage", lambda *a: created.append(a[1]) or real(*a))
    size, count = 32 << 10, 8
    pattern = np.resize(np.arange(251, dtype=np.uint8), size * count)
    hosts = [np.zeros(size, np.uint8) for _ in range(count)]
    with device.alloc(size * count) as buf:
        stream.copy_htod(buf, pattern)
        for i, host in enumerate(hosts):  # queued together, none synchronized
            stream.copy_dtoh(host, buf, src_offset=i * size)
        stream.synchronize()
    for i, host in enumerate(hosts):
        np.testing.assert_array_equal(host, pattern[i * size:(i + 1) * size], err_msg=f"readback {i}")
    assert created.count(size) <= 2, f"{created.count(size)} staging buffers of {size} bytes for a bound of two"


def test_copies_and_fills_are_byte_exact(device, stream):
    with device.alloc(37) as a, device.alloc(37) as b:
        stream.fill(a, 0x11)
        stream.fill(a, 0xEE, offset=3, nbytes=5)
        stream.copy_htod(a, np.array([1, 2, 3], np.uint8), dst_offset=30)
        stream.fill(b, 0)
        stream.copy_dtod(b, a, 35, dst_offset=1, src_offset=1)
        expected = np.full(37, 0x11, np.uint8)
        expected[3:8] = 0xEE
        expected[30:33] = [1, 2, 3]
        expected[[0, 36]] = 0
        np.testing.assert_array_equal(read(stream, b, np.uint8), expected)


def test_dropped_events_free_their_sync_and_query(device, stream, monkeypatch):
    syncs, gl = device.thread.syncs, device.gl
    destroyed, deleted = [], []
    real_destroy, real_delete = syncs.destroy, gl.glDeleteQueries
    monkeypatch.setattr(syncs, "destroy", lambda sync: destroyed.append(sync) or real_destroy(sync))
    monkeypatch.setattr(gl, "glDeleteQueries", lambda n, names: deleted.append(n) or real_delete(n, names))
    for _ in range(20):
        stream.record(timing=True)
    gc.collect()
    device.synchronize()  # runs after the frees the dropped events queued
    assert len(destroyed) >= 20 and len(deleted) == 20


@pytest.mark.parametrize("op", ["Stream.synchronize", "Event.synchronize", "Device.synchronize"])
def test_synchronize_timeout_on_running_work(device, stream, op):
    """About half a second of work: llvmpipe is still running it on the GL thread (its dispatches run inside
    glDispatchCompute, so the fence is not even placed), a GPU is running it behind a placed fence. A try where
    the host looked only after most of the work proves nothing and is made again with more work."""
    for work in RunningWork.tries(device, stream, lambda name: kernel(device, name), seconds=0.5):
        work.enqueue(stream)
        ev = stream.record()
        wait = {"Stream.synchronize": stream.synchronize, "Event.synchronize": ev.synchronize,
                "Device.synchronize": device.synchronize}[op]
        t0 = time.monotonic()
        timeout = None
        try:
            wait(timeout=0.05)
        except ia.Timeout as exc:
            timeout = exc
        waited = time.monotonic() - t0
        if not work.looked_in_time():
            wait()
            continue
        assert timeout is not None and op in str(timeout), f"{op}(timeout=0.05) returned while the work ran"
        assert 0.05 <= waited < 0.4 and timeout.seconds == 0.05
        assert ev.query() is False
        wait()
        assert ev.query() is True
        work.check(stream)
        return
    pytest.fail(f"{op}(timeout=0.05) never returned within a third of the work's time, however long the work")


def test_a_waiting_thread_does_not_hold_the_gl_thread(device, stream, monkeypatch):
    """A wait blocks its caller in eglClientWaitSyncKHR, not the GL thread: other work gets through."""
    real_wait = device.thread.syncs.wait
    started = threading.Event()

    def slow_wait(sync, nanoseconds):
        if nanoseconds:
            started.set()
            time.sleep(nanoseconds / 1e9)
            return False
        return real_wait(sync, nanoseconds)

    monkeypatch.setattr(device.thread.syncs, "wait", slow_wait)
    pending = device.alloc(4)
    stream.fill(pending, 1)  # a job since the last fence seen signalled: the synchronize below has to wait
    timeouts = []
    waiter = threading.Thread(target=lambda: timeouts.append(pytest.raises(ia.Timeout, stream.synchronize, timeout=0.5)))
    waiter.start()
    assert started.wait(5)
    t0 = time.monotonic()
    with device.alloc(4) as buf:
        other = device.create_stream()
        other.copy_htod(buf, np.array([9], np.uint32))
        assert device.native.run(lambda: True)  # the GL thread has run the upload and answers
    assert time.monotonic() - t0 < 0.3, "work on another stream waited for the waiting thread"
    waiter.join()
    assert timeouts
    pending.free()


def test_timed_events_measure_work(device, stream):
    k = kernel(device, "busy")
    n = 1 << 14
    with device.alloc(4 * n) as buf:
        e0 = stream.record(timing=True)
        stream.launch(k, n // 128, 128, (buf, np.uint32(2000), np.uint32(n)))
        e1 = stream.record(timing=True)
        assert e0.elapsed_ms(e1) > 0


# -- errors and diagnostics ---------------------------------------------------------------------------

def test_gl_errors_name_the_call_and_carry_the_debug_message(device):
    gl = device.gl

    with pytest.raises(ia.DriverError, match=r"opengl: glBindBuffer failed: GL_INVALID_ENUM") as info:
        device.native.run(gl.glBindBuffer, 0xDEAD, 0)
    assert info.value.op == "glBindBuffer" and "GL API ERROR" in info.value.detail  # the KHR_debug message
    assert GL.EXPLANATIONS["GL_INVALID_ENUM"] in info.value.detail
    assert device.diagnostics() == []  # the message went into the error


def test_unchecked_gl_errors_become_diagnostics(device):
    gl = device.gl
    device.native.run(gl.unchecked.glBindBuffer, 0xDEAD, 0)
    messages = device.diagnostics()
    assert len(messages) == 1 and "GL_INVALID_ENUM" in messages[0] and "ERROR" in messages[0]
    assert device.native.run(gl.unchecked.glGetError) == 0x0500
    assert device.diagnostics() == []


def test_out_of_memory_from_gl_is_typed(device):
    """GL_OUT_OF_MEMORY is OutOfMemory naming the call; llvmpipe reports it for a 64 TiB glBufferData at once
    (NVIDIA accepts the call and would fail later, at first use, so it is not asked)."""
    gl = device.gl
    err = gl.error("glBufferData", GL.OUT_OF_MEMORY)
    assert isinstance(err, ia.OutOfMemory) and err.op == "glBufferData" and "GL_OUT_OF_MEMORY" in str(err)
    if device.info.driver == "llvmpipe":
        with pytest.raises(ia.OutOfMemory, match=r"glBufferData.*GL_OUT_OF_MEMORY"):
            device.native.run(gl.mgl, "glBufferData", device.native.context.buffer, reserve=1 << 46)
    assert device.diagnostics() == []


def test_submit_reentered_from_a_finalizer_does_not_deadlock(device, stream):
    """Garbage collection may run an Event's __del__, which submits, while this thread is inside submit
    (seen on the H200: a deadlock). Re-entering with the submit lock held stands for that."""
    done = threading.Event()

    def reenter():
        with device.thread._closing:  # what the interrupted submit holds
            stream.record()  # submits its fence, then drops the event: __del__ submits again
        done.set()

    threading.Thread(target=reenter, daemon=True).start()
    assert done.wait(10), "submit deadlocked when re-entered"
    stream.synchronize()


def test_gl_work_after_close_is_use_after_free_not_a_hang(device):
    from ironaccel.backends.opengl import OpenGLBackend

    dev = OpenGLBackend().open_device(device.info.index)
    buf = dev.alloc(16)
    thread = dev.thread
    dev.close()
    with pytest.raises(ia.UseAfterFree, match="GL context"):
        thread.run(lambda: None)  # what a call that checked the device just before close() would reach
    buf.free()  # nothing left to free it on: dropped
    thread.submit(lambda: None)


# -- threads ------------------------------------------------------------------------------------------

def test_several_threads_share_one_device(device):
    k = kernel(device, "add_one")
    n, rounds, errors = 4096, 20, []

    def work(seed):
        try:
            s = device.create_stream()
            start = np.arange(n, dtype=np.uint32) * seed
            with device.alloc(4 * n) as buf:
                s.copy_htod(buf, start)
                for _ in range(rounds):
                    s.launch(k, n // 64, 64, (buf, np.uint32(n)))
                np.testing.assert_array_equal(read(s, buf), start + rounds)
        except BaseException as exc:  # reported to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# -- drivers ------------------------------------------------------------------------------------------

def _info(**kw):
    base = dict(backend="opengl", index=0, name="x", vendor="x", driver="x", driver_version="x", simulated=False,
                memory=0, limits=Limits(1, 1, (1, 1, 1), (1, 1, 1), 1))
    return DeviceInfo(**{**base, **kw})


def test_drivers_recognise_their_devices():
    llvmpipe, nvidia = targets.get("opengl/llvmpipe"), targets.get("opengl/nvidia")
    lp = _info(name="llvmpipe (LLVM 15.0.6, 256 bits)", vendor="Mesa/X.org", driver="llvmpipe", simulated=True)
    zink = _info(name="zink Vulkan 1.3(llvmpipe (LLVM 15.0.6, 256 bits))", vendor="Mesa", driver="zink", simulated=True)
    h200 = _info(name="NVIDIA H200/PCIe/SSE2", vendor="NVIDIA Corporation", driver="NVIDIA")
    assert llvmpipe.matches(lp) and not llvmpipe.matches(zink) and not llvmpipe.matches(h200)
    assert nvidia.matches(h200) and not nvidia.matches(lp)
    assert not nvidia.matches(_info(backend="vulkan", name="NVIDIA H200", vendor="NVIDIA Corporation"))
    assert [d.lang for d in llvmpipe.kernels] == ["glsl430"] and llvmpipe.kernels[0].source("saxpy")


def test_driver_environments_select_the_egl_vendor():
    env = targets.get("opengl/llvmpipe").environment()
    assert env["GALLIUM_DRIVER"] == "llvmpipe" and env["LIBGL_ALWAYS_SOFTWARE"] == "1"
    if "__EGL_VENDOR_LIBRARY_FILENAMES" in env:
        assert "mesa" in Path(env["__EGL_VENDOR_LIBRARY_FILENAMES"]).name
    nvidia = targets.get("opengl/nvidia")
    if nvidia.missing() is None:
        assert "nvidia" in Path(nvidia.environment()["__EGL_VENDOR_LIBRARY_FILENAMES"]).name
    else:
        assert "__EGL_VENDOR_LIBRARY_FILENAMES" not in nvidia.environment()
        assert "NVIDIA" in nvidia.missing() or "loader" in nvidia.missing()


def test_an_idle_synchronize_makes_no_round_trip_to_the_gl_thread(device, stream):
    stream.synchronize()
    jobs = device.thread.jobs
    stream.synchronize()
    device.synchronize()
    assert device.thread.jobs == jobs, "a synchronize with nothing enqueued placed a fence"
    with device.alloc(16) as buf:
        stream.fill(buf, 3)  # a job since: the next synchronize must wait for it
        stream.synchronize()
        assert device.thread.jobs >= jobs + 2  # the fill, the fence (its discard is a release: not counted)
        assert (read(stream, buf, np.uint8) == 3).all()


def test_a_glsl_compile_has_a_time_limit(device, monkeypatch):
    """The GL compiler runs in this process and cannot be stopped: a source's macros are expanded by
    glslangValidator first, in time (issue 31 finding 8)."""
    from ironaccel import glslang

    if glslang.tool() is None:
        pytest.skip("no glslangValidator: the GL compiler runs without a time limit")
    monkeypatch.setattr(glslang, "COMPILE_TIME_LIMIT_S", 2.0)
    started = time.monotonic()
    with pytest.raises(ia.CompileError, match="ran past 2 s and was stopped"):
        device.compile(macro_bomb("#version 430"), "glsl430")
    assert time.monotonic() - started < 60  # the limit plus killing glslang, with room for a loaded CI machine
