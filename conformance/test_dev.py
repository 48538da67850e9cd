"""DEV: enumeration, device info, capabilities, opening and closing."""

from __future__ import annotations

import ctypes
import json
import os
import re
import select
import subprocess
import sys
import threading

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.backends import get as get_backend, registry
from ironaccel.api import CAPABILITIES
from ironaccel.cts.pytest_plugin import NOT_SUPPORTED_PREFIX

from .helpers import (NOP, RunningWork, assert_device_works, child_json, context_current, cuda_driver, host_pages_above,
                      host_pages_low, poisoned, raises_naming, read)


@pytest.mark.clause("DEV-1")
def test_backends_lists_every_registered_backend(device):
    infos = ia.backends()
    names = [i.name for i in infos]
    assert sorted(names) == sorted(registry())
    for info in infos:
        assert isinstance(info.available, bool)
        assert info.reason, f"{info.name} gives no reason"
        # whether it has a compute path is the backend's, not its probe's outcome: a probe-only backend whose
        # runtime is missing (or found) says compute=False, as STATUS.md's "probe" level reads it
        try:
            own = get_backend(info.name).compute
        except Exception:  # a registered backend that does not load: its listing says so, nothing to compare
            continue
        assert info.compute is own, f"{info.name}: backends() says compute={info.compute}, the backend {own}"
    assert any(i.name == device.info.backend and i.available for i in infos)


#: probe-only backends whose runtime's install folder an environment variable names: (variable, library under it)
INSTALL_FOLDERS = {
    "rocm": ("ROCM_PATH", (os.path.join("lib", "libamdhip64.so"),)),
    # the SDK's folder for each Linux host it ships the library for
    "qnn": ("QNN_SDK_ROOT", tuple(os.path.join("lib", host, "libQnnHtp.so")
                                  for host in ("x86_64-linux-clang", "aarch64-ubuntu-gcc9.4"))),
}


@pytest.mark.clause("DEV-72")
@pytest.mark.parametrize("name", sorted(INSTALL_FOLDERS))
def test_a_probe_searches_the_install_folder_its_variable_names(name, monkeypatch, tmp_path):
    """DEV-1 only asks for a reason: a probe that breaks on an unset variable still gives one ("probing failed")."""
    variable, libraries = INSTALL_FOLDERS[name]

    monkeypatch.delenv(variable, raising=False)
    unset = get_backend(name).probe().reason
    monkeypatch.setenv(variable, str(tmp_path))
    named = get_backend(name).probe().reason
    for state, why in (("unset", unset), ("set", named)):
        assert why.startswith("runtime found") or re.match(r"no .+ \(searched ", why), \
            f"{name} with {variable} {state}: the reason is not a search's outcome: {why!r}"
    if not named.startswith("runtime found"):
        for library in libraries:
            assert str(tmp_path / library) in named, f"{name} did not search {variable}={tmp_path} for {library}: {named!r}"


@pytest.mark.clause("DEV-72")
def test_every_probe_gives_the_outcome_of_its_search():
    """Every probe-only backend, whatever its runtime's search paths are made of (an install folder, a Python
    package's location: libtpu's), says what its search found; a search that breaks (the absent package's
    locations read from None) is caught and reported as "probing failed", which DEV-1's any-reason passes. The
    runtime is named in words (its title, never a repr of its library names: no quotes), and one not found is
    followed by how to install it: the reason is the one place a user looking at `ironaccel doctor` learns it."""
    searched = re.compile(r"(runtime found|no [^'\"]+ \(searched |the [^'\"]+ exists only on )")
    wrong = {i.name: i.reason for i in ia.backends() if not i.compute and not searched.match(i.reason)}
    assert not wrong, f"probes whose reason is not a search's outcome: {wrong}"
    # a runtime not found: after the paths searched, how to get it ("; install ...", "; on a ...: pip install ...")
    unhelpful = {i.name: i.reason for i in ia.backends()
                 if not i.compute and i.reason.startswith("no ") and not re.search(r"\); .*install", i.reason)}
    assert not unhelpful, f"probes whose runtime was not found and that do not say how to install it: {unhelpful}"


@pytest.mark.clause("DEV-31")
def test_the_backend_under_test_says_how_many_devices_it_found(device):
    """An available backend's reason is what it found: it starts with the number of devices (adapters) it
    counts, so a listing that put another field (a version) in the reason's place reads as such."""
    info = next(i for i in ia.backends() if i.name == device.info.backend)
    count = get_backend(device.info.backend).device_count()
    assert info.available and count >= 1, info
    assert re.match(rf"{count} \D", info.reason), f"{info.name}: the reason does not start with {count} device(s): " \
                                                   f"{info.reason!r}"


@pytest.mark.clause("DEV-2")
def test_device_info_is_complete(device):
    info = device.info
    for field in ("backend", "name", "vendor", "driver", "driver_version"):
        value = getattr(info, field)
        assert isinstance(value, str) and value.strip(), f"DeviceInfo.{field} is empty"
    assert isinstance(info.simulated, bool)
    lim = info.limits
    assert lim.max_alloc >= 1 << 20
    assert lim.max_threads_per_block >= 64
    assert all(b >= 1 for b in lim.max_block) and all(g >= 1 for g in lim.max_grid)
    assert lim.max_threads_per_block <= lim.max_block[0] * lim.max_block[1] * lim.max_block[2]
    assert lim.max_shared_memory >= 1024


#: GL limits (glGetInteger64v) and what DeviceInfo.limits makes of each: OpenGL binds a Buffer whole as one
#: shader storage block, so the largest a kernel can address is the largest such block, in whole 32-bit words.
GL_LIMITS = {
    "max_alloc": (0x90DE, lambda v: v // 4 * 4),  # GL_MAX_SHADER_STORAGE_BLOCK_SIZE
    "max_threads_per_block": (0x90EB, lambda v: v),  # GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS
    "max_shared_memory": (0x8262, lambda v: v),  # GL_MAX_COMPUTE_SHARED_MEMORY_SIZE
}
#: warp_size: the context's subgroup size where it has GL_KHR_shader_subgroup (0: it cannot tell)
GL_SUBGROUP_SIZE_KHR = 0x9532


@pytest.mark.clause("DEV-69")
def test_opengl_limits_are_the_contexts_own(device, require):
    """DEV-2 and DEV-7 bound the limits from below (a launch at each runs); a limit under the driver's refuses
    allocations and blocks the device could run, and one over it (a buffer past the largest storage block)
    may run on a CPU driver that does not clamp the binding and lose its tail on one that does."""
    require("lang.glsl430")
    native = device.native
    for field, (pname, expected) in GL_LIMITS.items():
        want = expected(native.run(native.gl.integer, pname))
        got = getattr(device.info.limits, field)
        assert got == want, f"limits.{field} is {got}, the GL context's (0x{pname:04X}) gives {want}"
    has_subgroups = native.run(lambda: "GL_KHR_shader_subgroup" in native.context.extensions)
    want = native.run(native.gl.integer, GL_SUBGROUP_SIZE_KHR) if has_subgroups else 0
    assert device.info.limits.warp_size == want, \
        f"limits.warp_size is {device.info.limits.warp_size}, the GL context's subgroup size is {want}"


#: DeviceInfo.limits field: its value from the GPUDevice's limits (wgpu's dict of WebGPU limit names)
WEBGPU_LIMITS = {
    "max_alloc": lambda lim: min(lim["max-buffer-size"], lim["max-storage-buffer-binding-size"]) // 4 * 4,
    "max_threads_per_block": lambda lim: lim["max-compute-invocations-per-workgroup"],
    "max_block": lambda lim: tuple(lim[f"max-compute-workgroup-size-{axis}"] for axis in "xyz"),
    "max_grid": lambda lim: (lim["max-compute-workgroups-per-dimension"],) * 3,
    "max_shared_memory": lambda lim: lim["max-compute-workgroup-storage-size"],
}


@pytest.mark.clause("DEV-71")
def test_webgpu_limits_are_the_gpu_devices_own(device, require):
    """DEV-69 for WebGPU: DEV-2 and DEV-7 bound the limits from below, and a lower limit is honoured by every
    check, so only the device's own limits tell a max_alloc cut short (buffers a kernel could bind refused)."""
    require("lang.wgsl")
    limits = device.native.limits
    for field, expected in WEBGPU_LIMITS.items():
        got, want = getattr(device.info.limits, field), expected(limits)
        assert got == want, f"limits.{field} is {got}, the GPUDevice's limits give {want}"
    # warp_size: WebGPU's GPUAdapterInfo.subgroupMinSize where wgpu reports it, else 0 (KERNEL-60: it cannot tell)
    reported = device.native.adapter.info.get("subgroup_min_size")
    want = int(reported or 0)
    assert device.info.limits.warp_size == want, (
        f"limits.warp_size is {device.info.limits.warp_size}, the adapter reports subgroup_min_size={reported!r}, "
        f"so it should be {want}")


@pytest.mark.clause("DEV-6")
def test_simulated_is_what_the_registry_says_of_the_driver(device, target):
    kind = "a simulated (software or fake)" if target.simulated else "a hardware"
    assert device.info.simulated is target.simulated, (
        f"{target.name} is {kind} driver, but its device {device.info.name!r} reports simulated={device.info.simulated}")


@pytest.mark.clause("DEV-68")
def test_a_driver_built_here_names_the_build_it_loaded(device, target):
    """Only a driver built from this tree's sources has a build to name; any other passes at once."""
    want = target.build_hash()
    if want is None:
        return
    got = device.info.extra.get("driver_build")
    assert got == want, f"{target.name}: the device reports driver build {got!r}, its sources here hash to {want!r}"


@pytest.mark.clause("DEV-3")
@pytest.mark.parametrize("capability", sorted(CAPABILITIES))
def test_supports_answers_every_capability(device, capability):
    assert isinstance(device.supports(capability), bool)


@pytest.mark.clause("DEV-3")
def test_supports_rejects_unknown_names_and_languages_exist(device):
    with pytest.raises(ia.InvalidArgument, match="Device.supports.*unknown capability"):
        device.supports("teleportation")
    assert device.languages, "the device compiles no kernel language"


@pytest.mark.clause("DEV-4")
def test_open_device_out_of_range(device):
    backend = get_backend(device.info.backend)
    count = backend.device_count()
    with pytest.raises(ia.InvalidArgument, match="^Backend.open_device: .* out of range"):
        backend.open_device(count + 5)


@pytest.mark.clause("DEV-67", "ERR-3")
def test_open_device_refuses_an_option_it_does_not_know(device):
    """Options are backend-specific (Vulkan's ``validation``): a misspelt one must be refused by name, not
    ignored and not a TypeError from the backend's own signature."""
    backend = get_backend(device.info.backend)
    with raises_naming(ia.InvalidArgument, "Backend.open_device", "no_such_option"):
        backend.open_device(device.info.index, no_such_option=True)
    with raises_naming(ia.InvalidArgument, "Backend.open_device", "no_such_option") as refused:
        backend.open_device(device.info.index, **dict.fromkeys(backend.options, None), no_such_option=1)
    takes = [name for name in backend.options if name not in str(refused.value)]
    assert not takes if backend.options else "takes none" in str(refused.value), (
        f"the refusal does not say which options the {backend.name} backend takes {list(backend.options)}: "
        f"{refused.value}")


@pytest.mark.clause("DEV-90")
def test_a_device_says_whether_its_validation_is_on(device):
    """A program (or a certificate) that finds no diagnostics trusts ``extra["validation"]`` to say whether
    anything was checked at all; a value that is no bool (a string from a config file, 1) is refused by name, as
    DEV-67 refuses an unknown option, rather than read as on or off."""
    backend = get_backend(device.info.backend)
    if "validation" not in backend.options:
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a backend with a validation option")
    for asked in (False, True):
        try:
            other = backend.open_device(device.info.index, validation=asked)
        except ia.NotAvailable:
            assert asked, "a device opened without validation was refused"
            continue  # the validation layer is not installed here
        try:
            assert other.info.extra.get("validation") is asked, (
                f"a device opened with validation={asked} says extra['validation'] = "
                f"{other.info.extra.get('validation')!r}")
        finally:
            other.close()
    for bad in ("yes", 1, 0.0):  # neither True nor False: refused by name, not taken for on or off
        with raises_naming(ia.InvalidArgument, "Backend.open_device", "validation"):
            backend.open_device(device.info.index, validation=bad).close()


#: How each backend with a validation option is made not to find its validation layer: its environment, with
#: ``{empty}`` an empty folder (Vulkan's loader looks for explicit layers in VK_LAYER_PATH alone when it is set)
HIDE_VALIDATION = {"vulkan": {"VK_LAYER_PATH": "{empty}"}}

#: DEV-90's child, the validation layer hidden: the backend's probe, its device count, and a device of argv's
#: index opened without and with validation (an error's type name, or what extra["validation"] says)
NO_VALIDATION_LAYER_CHILD = """
import json, sys
import ironaccel as ia
from ironaccel.backends import get as get_backend
backend = get_backend(sys.argv[2])
info = backend.probe()
opened = {}
for asked in (False, True):
    try:
        other = backend.open_device(int(sys.argv[3]), validation=asked)
    except ia.IronAccelError as exc:
        opened[str(asked)] = type(exc).__name__
    else:
        opened[str(asked)] = other.info.extra.get("validation")
        other.close()
print(json.dumps({"available": info.available, "reason": info.reason, "count": backend.device_count(),
                  "opened": opened}))
"""


@pytest.mark.clause("DEV-90")
def test_a_backend_works_without_its_validation_layer(device, target, tmp_path):
    """The validation layer is a developer's tool that most machines do not have (nor, most likely, the H100):
    a backend that asks for it to probe or count its devices says it is unavailable there. In a child process
    that cannot find the layer, the probe says available with the same device count, a device opens without
    validation and says so, and one asked for with validation is refused with NotAvailable."""
    backend = get_backend(device.info.backend)
    if backend.name not in HIDE_VALIDATION:
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a backend with a validation layer a test can hide")
    env = {name: value.format(empty=tmp_path) for name, value in HIDE_VALIDATION[backend.name].items()}
    got = child_json(target, NO_VALIDATION_LAYER_CHILD, backend.name, str(device.info.index), env=env)
    assert got["available"], f"without its validation layer the backend says it is unavailable: {got['reason']}"
    assert got["count"] == backend.device_count(), (
        f"without its validation layer the backend counts {got['count']} devices, not {backend.device_count()}")
    assert got["opened"] == {"False": False, "True": "NotAvailable"}, (
        f"without its validation layer, devices opened with validation False and True gave {got['opened']}")


@pytest.mark.clause("DEV-5", "ERR-1")
def test_closed_device_raises_use_after_free(device, kernels, target):
    other = get_backend(device.info.backend).open_device(device.info.index)
    s = other.create_stream()
    buf = other.alloc(64)
    ev = s.record()
    timed = s.record(timing=True) if other.supports("events.timing") else None
    saxpy = target.compile_kernel(other, "saxpy")
    module = saxpy.module
    plan = saxpy.prepare(1, 32)
    args = (buf, buf, np.float32(1), np.uint32(16))
    host = np.zeros(16, np.uint8)
    other.close()
    other.close()  # idempotent
    for op, call in [
        ("Device.default_stream", lambda: other.default_stream),
        ("Device.native", lambda: other.native),
        ("Stream.copy_htod", lambda: s.copy_htod(buf, host)),
        ("Stream.copy_dtoh", lambda: s.copy_dtoh(host, buf)),
        ("Stream.copy_dtod", lambda: s.copy_dtod(buf, buf, 16, dst_offset=32)),
        ("Stream.launch", lambda: s.launch(saxpy, 1, 32, args)),
        ("Stream.launch", lambda: plan(s, *args)),
        ("Stream.record", s.record),
        ("Stream.wait", lambda: s.wait(ev)),
        ("Stream.native", lambda: s.native),
        ("Kernel.prepare", lambda: saxpy.prepare(1, 32)),
        ("Kernel.native", lambda: saxpy.native),
        *([("Event.elapsed_ms", lambda: timed.elapsed_ms(timed))] if timed is not None else []),
        ("Device.alloc", lambda: other.alloc(16)),
        ("Device.create_stream", other.create_stream),
        ("Device.synchronize", other.synchronize),
        ("Stream.fill", lambda: s.fill(buf, 1)),
        ("Stream.synchronize", s.synchronize),
        ("Event.query", ev.query),
        ("Event.synchronize", ev.synchronize),
        ("Device.compile", lambda: other.compile("x", other.languages[0])),
        ("Buffer.handle", lambda: buf.handle),
        ("Module.kernel", lambda: module.kernel("saxpy")),
    ]:
        with pytest.raises(ia.UseAfterFree, match="^" + op.replace(".", r"\.") + ": ") as info:
            call()
        if op.startswith("Device.") or op in ("Module.kernel", "Kernel.native", "Buffer.handle"):  # the device is what was wrong
            said = f"device {other.info.backend}:{other.info.index}"
            assert re.search(rf"{re.escape(said)}\b.*\bclosed\b", str(info.value)), \
                f"a closed device should say it is the device {said} that is closed: {info.value}"
    assert_device_works(device, kernels)


@pytest.mark.clause("DEV-65", "ERR-1")
def test_closed_device_refuses_a_launch_with_no_buffer(device, kernels):
    """DEV-5's launches pass a buffer, whose own check names the closed device: a kernel that takes none (here
    none at all), launched before the close, has only the device's check left between the launch and the
    driver's destroyed context, device or queue."""
    other = get_backend(device.info.backend).open_device(device.info.index)
    langs = [lang for lang in other.languages if lang in NOP]
    assert langs, f"the suite has no nop kernel for {other.languages}"
    launches = []
    for lang in langs:
        k = other.compile(NOP[lang], lang, options=["-e", "nop"] if lang.startswith("glsl") else []).kernel("nop")
        plan = k.prepare(2, 32)
        s = other.create_stream()
        s.launch(k, 2, 32, ())
        plan(s)
        s.synchronize()
        launches += [(lang, lambda s=s, k=k: s.launch(k, 2, 32, ())), (lang, lambda s=s, plan=plan: plan(s))]
    other.close()
    for lang, launch in launches:
        with pytest.raises(ia.UseAfterFree, match=r"^Stream\.launch: ") as info:
            launch()
        assert "closed" in str(info.value), f"{lang}: {info.value}"
    assert_device_works(device, kernels)



#: The most blocks DEV-7 launches along one grid axis: a grid axis beyond it (CUDA's x: 2^31 - 1) is launched at
#: this many, the rest of its range being the api's to check (KERNEL-17), not something to run in a test.
GRID_RUN_AT_MOST = 1 << 16


def _launch_along(device, stream, kernels, axis: int, grid_extent: int, block_extent: int) -> None:
    """One launch whose grid (or block) spans ``grid_extent`` blocks (``block_extent`` threads) along ``axis``,
    through the kernel that writes one element per thread index along that axis (fill_u32, index2d, index3d
    over a domain one element wide on the other axes); every element must be written."""
    count = grid_extent * block_extent
    grid, block = [1, 1, 1], [1, 1, 1]
    grid[axis], block[axis] = grid_extent, block_extent
    with poisoned(device, stream, 4 * count) as out:
        if axis == 0:
            stream.launch(kernels("fill_u32"), tuple(grid), tuple(block), (out, np.uint32(7), np.uint32(count)))
            want = np.full(count, 7, np.uint32)
        elif axis == 1:
            stream.launch(kernels("index2d"), tuple(grid[:2]), tuple(block[:2]), (out, np.uint32(1), np.uint32(count)))
            want = np.arange(count, dtype=np.uint32) << np.uint32(16)
        else:
            stream.launch(kernels("index3d"), tuple(grid), tuple(block),
                          (out, np.uint32(1), np.uint32(1), np.uint32(count)))
            want = np.arange(count, dtype=np.uint32) << np.uint32(20)
        got = read(stream, out, np.uint32)
    assert (got == want).all(), (f"axis {'xyz'[axis]}: grid {tuple(grid)}, block {tuple(block)} (the device's limits "
                                 f"{device.info.limits}) left {(got != want).sum()} of {count} elements unwritten")


@pytest.mark.clause("DEV-7")
def test_the_reported_limits_launch(device, stream, kernels):
    """The limits DeviceInfo reports are what the driver runs, not only what the api lets through: a device
    that reports a block or grid limit its driver refuses (or runs wrongly) fails here, as does a backend
    that maps the limits onto the wrong axes."""
    lim = device.info.limits
    _launch_along(device, stream, kernels, 0, 1, lim.max_threads_per_block)
    for axis in range(3):
        _launch_along(device, stream, kernels, axis, 1, min(lim.max_block[axis], lim.max_threads_per_block))
        _launch_along(device, stream, kernels, axis, min(lim.max_grid[axis], GRID_RUN_AT_MOST), 1)
    assert_device_works(device, kernels)


@pytest.mark.clause("DEV-8", "ERR-1")
def test_another_devices_objects_are_refused(device, stream, kernels):
    """Two Devices of one index may share a driver context (CUDA's primary context), so a copy into the other
    one's buffer would even work: a check that a compiled path skips goes unnoticed there. Each op that takes
    a buffer or an event refuses one of another Device, in its usual form and after it was done with its own
    device's objects (a compiled path remembers), and writes nothing."""
    second = get_backend(device.info.backend).open_device(device.info.index)
    try:
        theirs = second.alloc(64)
        their_event = second.create_stream().record()
        second.default_stream.fill(theirs, 0x33)
        second.synchronize()
        with poisoned(device, stream, 64) as mine, device.alloc(64) as spare:
            host = np.full(64, 0x44, np.uint8)
            calls = {
                "Stream.copy_htod": lambda dst: stream.copy_htod(dst, host),
                "Stream.copy_dtoh": lambda src: stream.copy_dtoh(np.empty(64, np.uint8), src),
                "Stream.copy_dtod": lambda dst: stream.copy_dtod(dst, mine, 64),
                "Stream.fill": lambda buf: stream.fill(buf, 0x55),
            }
            for op, call in calls.items():
                for _ in range(2):  # its own device's buffer first, twice
                    call(spare if op == "Stream.copy_dtod" else mine)
                with pytest.raises(ia.InvalidArgument, match=rf"^{op}: "):
                    call(theirs)
                    pytest.fail(f"{op} took a buffer of another Device")
            with pytest.raises(ia.InvalidArgument, match=r"^Stream\.copy_dtod: "):
                stream.copy_dtod(mine, theirs, 64)  # as the source
            stream.wait(stream.record())
            with pytest.raises(ia.InvalidArgument, match=r"^Stream\.wait: "):
                stream.wait(their_event)
            stream.synchronize()
        assert (read(second.default_stream, theirs) == 0x33).all(), "another Device's buffer was written"
    finally:
        second.close()
    assert_device_works(device, kernels)


def _open_use_close(device, target=None) -> tuple:
    """A second Device on ``device``'s index given a fill, an event recorded, queried and waited for, then
    closed: the device, its stream and the event, for a test that keeps them. With ``target``, the fill waits
    behind running work (launches back to back, which a backend may leave to a background submitter)."""
    other = get_backend(device.info.backend).open_device(device.info.index)
    s = other.create_stream()
    work = None if target is None else RunningWork(other, s, lambda name: target.compile_kernel(other, name), 0.02)
    with other.alloc(64) as buf:
        if work is not None:
            work.enqueue(s)
        s.fill(buf, 1)
        ev = s.record()
        ev.query()
        ev.synchronize(timeout=60)
        ev.query()
    if work is not None:
        work.free()
    other.close()
    return other, s, ev


def _new_threads(before: set) -> list[str]:
    """The names of the threads alive now that were not in ``before``: counted by identity, not by
    ``threading.active_count()``, whose difference a thread of an earlier test's device ending meanwhile (its
    pool collected with it) offsets, so that a close() that ends no thread passed after other tests (DEV-30/66
    missed WebGPU's Fencer.close() returning at once in the mutant run)."""
    return sorted(t.name for t in threading.enumerate() if t not in before)


@pytest.mark.clause("DEV-30")
def test_closing_a_device_gives_its_threads_back(device):
    """A backend may run threads of its own for a device (a thread that starts the waits of events, say):
    close() must end them, or a process that opens and closes devices gathers threads without bound."""
    _open_use_close(device)  # what the first device sets up once for the process (a runtime's own threads) is not counted
    before = set(threading.enumerate())
    for _ in range(6):
        _open_use_close(device)
    grown = _new_threads(before)
    assert len(grown) < 3, f"6 devices opened, used and closed left {len(grown)} more threads: {grown}"


@pytest.mark.clause("DEV-66")
def test_closing_a_device_ends_its_threads_while_it_is_still_referenced(device, target):
    """DEV-30 drops each device once closed, and a thread pool whose owner is collected ends its threads by
    itself: a close() that never stops a thread passes there. Here the closed devices, their streams and
    events stay referenced (as a caller's registry or a traceback keeps them), so only close() can end them;
    their fill waits behind running work, so a backend's background submitter (Vulkan's flusher) has started."""
    _open_use_close(device, target)  # what the first device sets up once for the process is not counted
    before = set(threading.enumerate())
    kept = [_open_use_close(device, target) for _ in range(4)]
    grown = _new_threads(before)
    assert len(grown) < 3, f"4 devices opened, used and closed, still referenced, left {len(grown)} more threads: {grown}"
    assert all(d.closed for d, _, _ in kept)


#: CUdevice_attribute names CUDA documents as yes/no ("1 if ..., 0 if not"), as cuda.bindings spells them
CUDA_YES_NO_ATTRIBUTES = (
    "KERNEL_EXEC_TIMEOUT", "INTEGRATED", "CAN_MAP_HOST_MEMORY", "CONCURRENT_KERNELS", "ECC_ENABLED", "TCC_DRIVER",
    "UNIFIED_ADDRESSING", "STREAM_PRIORITIES_SUPPORTED", "GLOBAL_L1_CACHE_SUPPORTED", "LOCAL_L1_CACHE_SUPPORTED",
    "MANAGED_MEMORY", "MULTI_GPU_BOARD", "HOST_NATIVE_ATOMIC_SUPPORTED", "PAGEABLE_MEMORY_ACCESS",
    "CONCURRENT_MANAGED_ACCESS", "COMPUTE_PREEMPTION_SUPPORTED", "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM",
    "COOPERATIVE_LAUNCH", "HOST_REGISTER_SUPPORTED", "PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES",
    "DIRECT_MANAGED_MEM_ACCESS_FROM_HOST", "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED", "MEMORY_POOLS_SUPPORTED",
    "CLUSTER_LAUNCH", "IPC_EVENT_SUPPORTED",
)


@pytest.mark.clause("DEV-73")
def test_a_cuda_devices_yes_no_attributes_are_0_or_1(device):
    """Clients test these attributes as CUDA documents them (``== 1``, or as flags ANDed together); and every
    64-bit platform CUDA runs on gives the device one address space with the host (UVA), which the library's
    pointer queries (is a host source pinned?) and a pointer passed as a plain integer rely on."""
    cuda_driver(device, "cuDeviceGetAttribute")
    native = device.native
    attribute = native.driver.CUdevice_attribute
    values = {}
    for name in CUDA_YES_NO_ATTRIBUTES:
        which = getattr(attribute, f"CU_DEVICE_ATTRIBUTE_{name}", None)
        if which is None:  # a cuda.bindings older than the attribute
            continue
        err, values[name] = native.driver.cuDeviceGetAttribute(which, native.device)
        assert not err, f"cuDeviceGetAttribute({name}): {err}"
    odd = {name: v for name, v in values.items() if v not in (0, 1)}
    assert not odd, f"yes/no attributes that are not 0 or 1: {odd}"
    assert values["UNIFIED_ADDRESSING"] == 1, "the device does not share one address space with the host (UVA)"


#: CUdevice_attribute names that are alignments in bytes (a power of two by their meaning)
CUDA_ALIGNMENT_ATTRIBUTES = ("TEXTURE_ALIGNMENT", "TEXTURE_PITCH_ALIGNMENT", "SURFACE_ALIGNMENT")


@pytest.mark.clause("DEV-74")
def test_a_cuda_devices_alignment_and_register_attributes_are_what_cuda_documents(device):
    """Clients round sizes and offsets up to the alignment attributes (a mask of ``value - 1``) and
    occupancy calculators divide the register file by a kernel's registers per thread: an alignment that is
    not a power of two, or a register count off by one, gives them wrong answers without an error. CUDA's
    programming guide gives 64 K 32-bit registers per block and per multiprocessor for every compute
    capability from 7.0 on (earlier ones: 32 K or 64 K)."""
    cuda_driver(device, "cuDeviceGetAttribute")
    native = device.native
    attribute = native.driver.CUdevice_attribute
    values = {}
    for name in CUDA_ALIGNMENT_ATTRIBUTES + ("MAX_REGISTERS_PER_BLOCK", "MAX_REGISTERS_PER_MULTIPROCESSOR"):
        err, values[name] = native.driver.cuDeviceGetAttribute(getattr(attribute, f"CU_DEVICE_ATTRIBUTE_{name}"),
                                                               native.device)
        assert not err, f"cuDeviceGetAttribute({name}): {err}"
    odd = {name: v for name, v in values.items() if v <= 0 or v & (v - 1)}
    assert not odd, f"alignments or register counts that are not powers of two: {odd}"
    per_block, per_sm = values["MAX_REGISTERS_PER_BLOCK"], values["MAX_REGISTERS_PER_MULTIPROCESSOR"]
    assert 32768 <= per_block <= per_sm, values
    if device.info.extra["compute_capability"] >= (7, 0):
        assert per_block == per_sm == 65536, values


#: (CUdevice_attribute name, value) fixed by CUDA's programming guide ("Technical Specifications per Compute
#: Capability") for every compute capability from 5.0 on: the launch geometry's limits and the warp size
CUDA_FIXED_GEOMETRY = (("MAX_THREADS_PER_BLOCK", 1024), ("MAX_BLOCK_DIM_X", 1024), ("MAX_BLOCK_DIM_Y", 1024),
                       ("MAX_BLOCK_DIM_Z", 64), ("MAX_GRID_DIM_X", 2**31 - 1), ("MAX_GRID_DIM_Y", 65535),
                       ("MAX_GRID_DIM_Z", 65535), ("WARP_SIZE", 32))


@pytest.mark.clause("DEV-75")
def test_a_cuda_devices_launch_limits_and_cooperative_launch_are_what_cuda_documents(device):
    """Clients size grids from MAX_GRID_DIM_* and blocks from MAX_BLOCK_DIM_*/MAX_THREADS_PER_BLOCK (a grid of
    65535 rows is common), and choose cooperative kernels (grid-wide sync) by COOPERATIVE_LAUNCH: a limit one
    short, or a device that says it cannot launch cooperatively, sends them down a slower or failing path with
    no error. The programming guide fixes these for every capability from 5.0 on; cooperative launch is there
    from 6.0 on (Linux; Windows' WDDM is not asserted)."""
    cuda_driver(device, "cuDeviceGetAttribute")
    native = device.native
    attribute = native.driver.CUdevice_attribute

    def value(name):
        err, v = native.driver.cuDeviceGetAttribute(getattr(attribute, f"CU_DEVICE_ATTRIBUTE_{name}"), native.device)
        assert not err, f"cuDeviceGetAttribute({name}): {err}"
        return v

    cc = device.info.extra["compute_capability"]
    if cc >= (5, 0):
        got = {name: value(name) for name, _ in CUDA_FIXED_GEOMETRY}
        wrong = {name: got[name] for name, want in CUDA_FIXED_GEOMETRY if got[name] != want}
        assert not wrong, f"launch limits other than CUDA documents for compute capability {cc}: {wrong}"
    if cc >= (6, 0) and sys.platform.startswith("linux"):
        assert value("COOPERATIVE_LAUNCH") == 1, f"compute capability {cc} says it cannot launch cooperatively"


@pytest.mark.clause("DEV-76")
def test_destroying_the_current_cuda_context_makes_the_one_below_current_again(device, stream):
    """A client that makes a context of its own beside the library's (a profiler, a second library) pushes the
    device's context, creates its own (cuCtxCreate makes it current above that), and destroys it: CUDA's
    cuCtxDestroy pops a context that is current to the calling thread, as cuCtxPopCurrent would, so the
    device's context is current again and the library's next call on this thread still works."""
    cu = cuda_driver(device, "cuCtxCreate, cuCtxDestroy")
    primary = device.native.context
    err, = cu.cuCtxPushCurrent(primary)
    assert not err, err
    try:
        err, own = cu.cuCtxCreate(None, 0, device.native.device)
        assert not err, f"cuCtxCreate: {err}"
        err, current = cu.cuCtxGetCurrent()
        assert not err and int(current) == int(own), f"the created context is not current: {err}, {current}"
        err, = cu.cuCtxDestroy(own)
        assert not err, f"cuCtxDestroy: {err}"
        err, current = cu.cuCtxGetCurrent()
        assert not err, err
        assert int(current) == int(primary), \
            f"after cuCtxDestroy of the current context, the current one is {current}, not the context below it"
    finally:
        err, popped = cu.cuCtxPopCurrent()
    assert not err and int(popped) == int(primary), f"cuCtxPopCurrent: {err}, {popped}"
    with device.alloc(64) as buf:
        stream.fill(buf, 7)
        stream.synchronize()


@pytest.mark.clause("DEV-77")
def test_cuda_get_proc_address_answers_names_it_does_not_know_consistently(device):
    """A runtime or library newer than the driver asks cuGetProcAddress for entry points the driver may not
    have, several of them, and the same name again later: each unknown name is either not found (no pointer,
    a status other than SUCCESS, and CUDA_ERROR_NOT_FOUND or, as the H200's driver 580 answers, CUDA_SUCCESS) or
    a function of its own, the same function every time it is asked for, and the driver's known entry points
    still resolve."""
    cu = cuda_driver(device, "cuGetProcAddress")
    flags = cu.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT
    found = cu.CUdriverProcAddressQueryResult.CU_GET_PROC_ADDRESS_SUCCESS
    names = [f"cuIronaccelNoSuchEntry{c}".encode() for c in "ABC"] * 2 + [b"cuIronaccelNoSuchEntryA"]
    answers = {}
    for name in names:
        err, fn, status = cu.cuGetProcAddress(name, 12000, flags)
        if status == found:
            assert err == cu.CUresult.CUDA_SUCCESS and int(fn), f"{name}: {err} with {status}, pointer {fn}"
            answer = int(fn)
        else:
            assert err in (cu.CUresult.CUDA_SUCCESS, cu.CUresult.CUDA_ERROR_NOT_FOUND) and not int(fn), \
                f"{name}: {err} with {status}, pointer {fn}"
            answer = None
        assert answers.setdefault(name, answer) == answer, f"{name} asked again gave {answer}, not {answers[name]}"
    pointers = [p for p in answers.values() if p is not None]
    assert len(set(pointers)) == len(pointers), f"two unknown names gave one function: {answers}"
    err, fn, status = cu.cuGetProcAddress(b"cuMemAlloc", 12000, flags)
    assert not err and status == found and int(fn), (err, fn, status)


@pytest.mark.clause("DEV-70")
def test_a_cuda_devices_driver_version_is_the_drivers_own(device):
    """CUDA's driver API documents its version as 1000 * major + 10 * minor: DeviceInfo.driver_version names
    that version, read through the device's native handles, so a backend or driver that computes it otherwise
    (another scale, another field) shows here."""
    cuda_driver(device, "cuDriverGetVersion")
    err, version = device.native.driver.cuDriverGetVersion()
    assert not err and version > 0, (err, version)
    assert version % 10 == 0, f"cuDriverGetVersion gave {version}: not 1000 * major + 10 * minor"
    name = f"CUDA {version // 1000}.{version % 1000 // 10}"
    assert re.match(rf"{re.escape(name)}\b", device.info.driver_version), (device.info.driver_version, version)


@pytest.mark.clause("DEV-78")
def test_destroying_a_cuda_context_releases_its_memory_and_host_registrations(device):
    """A client's own context (a profiler, a second library) allocates device memory and page-locks host memory
    (cuMemHostRegister) and is destroyed without freeing either: cuCtxDestroy releases what the context holds,
    so the device's free memory (cuMemGetInfo) is back, and the same host pages can be registered again in the
    device's context. It is done twice: with the host pages above the device memory, then far below it, so
    that they are the last, then the first entry of a driver table kept in address order."""
    if device.info.backend != "cuda" or not sys.platform.startswith("linux"):
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a CUDA driver on Linux (cuCtxCreate, cuMemHostRegister)")
    cu = device.native.driver
    primary, ok = device.native.context, cu.CUresult.CUDA_SUCCESS
    size, pages = 64 << 20, 1 << 20
    err, = cu.cuCtxPushCurrent(primary)
    assert not err, err
    unmap = None
    try:
        for place in ("above", "below"):
            err, free_before, _ = cu.cuMemGetInfo()
            assert err == ok, f"cuMemGetInfo: {err}"
            err, own = cu.cuCtxCreate(None, 0, device.native.device)
            assert err == ok, f"cuCtxCreate: {err}"
            err, dptr = cu.cuMemAlloc(size)
            assert err == ok, f"cuMemAlloc({size}) in the new context: {err}"
            host, unmap = host_pages_above(int(dptr), pages) if place == "above" else host_pages_low(pages)
            where = f"{pages} bytes at {host:#x} ({place} the device memory at {int(dptr):#x})"
            err, = cu.cuMemHostRegister(host, pages, 0)
            assert err == ok, f"cuMemHostRegister of {where} in the new context: {err}"
            err, = cu.cuCtxDestroy(own)
            assert err == ok, f"cuCtxDestroy: {err}"
            err, free_after, _ = cu.cuMemGetInfo()
            assert err == ok, f"cuMemGetInfo: {err}"
            assert free_after > free_before - size, (
                f"after cuCtxDestroy, {free_before - free_after} of the {size} bytes the context allocated are "
                "still in use")
            err, = cu.cuMemHostRegister(host, pages, 0)
            assert err == ok, f"cuMemHostRegister of the {where} the destroyed context had registered: {err}"
            err, = cu.cuMemHostUnregister(host)
            assert err == ok, f"cuMemHostUnregister: {err}"
            unmap()
            unmap = None
    finally:
        err, popped = cu.cuCtxPopCurrent()
        if unmap:
            unmap()
    assert not err and int(popped) == int(primary), f"cuCtxPopCurrent: {err}, {popped}"


@pytest.mark.clause("DEV-79")
def test_device_memory_is_unknown_or_holds_the_largest_allocation(device):
    """``DeviceInfo.memory`` is 0 when the backend cannot tell (WebGPU reports no memory size); a count it
    does report holds at least one buffer of ``limits.max_alloc`` bytes, which the device allocates (MEM-1)."""
    info = device.info
    assert isinstance(info.memory, int) and not isinstance(info.memory, bool), f"DeviceInfo.memory is {info.memory!r}"
    assert info.memory == 0 or info.memory >= info.limits.max_alloc, (
        f"DeviceInfo.memory is {info.memory} bytes, neither 0 (unknown) nor at least limits.max_alloc "
        f"({info.limits.max_alloc} bytes, a buffer the device allocates)")


#: lists the backends, opens and closes the target's device, then prints the variables set before that changed
ENVIRONMENT_CHILD = """
import json, os, sys
before = dict(os.environ)
import ironaccel
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
ironaccel.backends()
_open(get(sys.argv[1])).close()
print(json.dumps({name: [value, os.environ.get(name)] for name, value in before.items() if os.environ.get(name) != value}))
"""


@pytest.mark.clause("DEV-81")
def test_the_variables_a_process_set_are_left_as_they_were(target, tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    changed = child_json(target, ENVIRONMENT_CHILD, env={"XDG_RUNTIME_DIR": str(runtime), "IRONACCEL_DEV81": "kept"})
    assert not changed, f"variables the process had set were changed (name: [before, after]): {changed}"


#: the child of DEV-80: opens the target's device, then asks the driver for the primary context's state while the
#: device is open, after close(), and what a further cuDevicePrimaryCtxRelease answers; prints them as JSON
PRIMARY_RELEASE_CHILD = """
import json, sys
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
cu, dev = device.native.driver, device.native.device
def state():
    err, flags, active = cu.cuDevicePrimaryCtxGetState(dev)
    return [int(err), int(active)]
out = {"open": state()}
device.close()
out["closed"] = state()
err, = cu.cuDevicePrimaryCtxRelease(dev)
out["released_again"] = int(err)
print(json.dumps(out))
"""


@pytest.mark.clause("DEV-80")
def test_closing_the_only_cuda_device_releases_the_primary_context(device, target):
    """The library retains the device's primary context when it opens the device and releases it at close();
    CUDA resets the context when its last reference is released, and refuses a release of a context no longer
    retained. In a process where nothing else retains it (a child), the context is active while the device is
    open and inactive after close(), and one more release is refused."""
    cuda_driver(device, "cuDevicePrimaryCtxGetState")
    got = child_json(target, PRIMARY_RELEASE_CHILD)
    assert got["open"] == [0, 1], f"cuDevicePrimaryCtxGetState while the device is open: [status, active] {got['open']}"
    assert got["closed"] == [0, 0], \
        f"cuDevicePrimaryCtxGetState after close() released the only reference: [status, active] {got['closed']}"
    assert got["released_again"] == 201, \
        f"cuDevicePrimaryCtxRelease of a context no longer retained returned {got['released_again']}, " \
        "not CUDA_ERROR_INVALID_CONTEXT (201)"


#: the child of DEV-82: opens the target's device, registers an exit handler, then compiles add_one (the first
#: weakref finalizer of the process may be made here, registering weakref's own exit hook after the handler); at
#: exit the handler compiles fill_u32, launches it and then add_one on a new buffer, and prints what it reads
EXIT_HANDLER_CHILD = """
import atexit, json, sys
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
target = get(sys.argv[1])
device = _open(target)
stream = device.create_stream()
def at_exit():
    try:
        fill = target.compile_kernel(device, "fill_u32")
        buf = device.alloc(256)
        stream.launch(fill, 1, 64, (buf, np.uint32(5), np.uint32(64)))
        stream.launch(add_one, 1, 64, (buf, np.uint32(64)))
        got = np.zeros(64, np.uint32)
        stream.copy_dtoh(got, buf)
        stream.synchronize()
        print(json.dumps({"words": sorted(set(got.tolist()))}), flush=True)
    except Exception as exc:  # noqa: BLE001 - what the handler met goes to the parent
        print(json.dumps({"raised": repr(exc)}), flush=True)
atexit.register(at_exit)
add_one = target.compile_kernel(device, "add_one")
"""


@pytest.mark.clause("DEV-82")
def test_exit_handlers_may_still_use_the_device_and_its_modules(target):
    """Python runs exit handlers in the reverse order of registration: one registered after opening the device
    runs before the library's exit cleanup (closing what was left open), but after what was registered later,
    such as weakref.finalize's exit hook (registered when the process makes its first finalizer). A module
    finalizer that runs at exit (``atexit`` left true) releases a module the program still holds: the handler's
    next compile unloads it (CUDA: its kernel's launch fails with CUDA_ERROR_INVALID_HANDLE)."""
    proc = subprocess.run([sys.executable, "-c", EXIT_HANDLER_CHILD, target.name], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **target.environment()})
    assert proc.returncode == 0, proc.stderr[-1500:]
    lines = proc.stdout.strip().splitlines()
    assert lines, f"the exit handler printed nothing: {proc.stderr[-1500:]}"
    got = json.loads(lines[-1])
    assert got == {"words": [6]}, f"at exit, fill_u32 (5) then add_one read back {got}, want every word 6"


@pytest.mark.clause("DEV-83")
def test_closing_a_device_gives_back_the_buffers_its_caller_still_holds(device, kernels):
    """A program's buffers often outlive its Device (held by an object, a cache, a traceback): close() must give
    their memory back, since nothing can use it afterwards (every operation on them is refused, and their free()
    is a no-op, LIFE-67). Devices opened on the index the tests' device keeps open, each allocating an eighth of
    the device's memory (at most ``max_alloc``) and closed while the caller still holds that buffer, more of them
    than the device's memory holds at once, never run out. A backend that skips the buffers still referenced at
    close leaks them for as long as anyone holds the driver's context (the tests' device here)."""
    memory = device.info.memory
    if not memory:
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a device that reports its memory")
    size = min(memory // 8, device.info.limits.max_alloc) // 4096 * 4096
    count = memory // size + 2  # together more than the device holds
    if count > 40:
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}allocations of at least 1/38 of the device's memory")
    held = []
    try:
        for i in range(count):
            other = get_backend(device.info.backend).open_device(device.info.index)
            try:
                held.append(other.alloc(size))
            except ia.OutOfMemory as exc:
                raise AssertionError(
                    f"device {i}: alloc of {size} bytes ran out of memory after {i} devices, each closed while "
                    f"its caller held such a buffer ({memory} bytes of device memory): {exc}") from exc
            finally:
                other.close()
    finally:
        held.clear()
    assert_device_works(device, kernels)


#: the child of DEV-84: opens the target's device and closes it (the primary context inactive again), sets the
#: primary context's flags to CU_CTX_SCHED_BLOCKING_SYNC, opens the device again (the library retains the
#: context, which CUDA creates now, with those flags), and prints what the driver reports and whether a fill works
PRIMARY_FLAGS_CHILD = """
import json, sys
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
target = get(sys.argv[1])
device = _open(target)
cu, dev = device.native.driver, device.native.device
device.close()
blocking = int(cu.CUctx_flags.CU_CTX_SCHED_BLOCKING_SYNC)
out = {"wanted": blocking, "set": int(cu.cuDevicePrimaryCtxSetFlags(dev, blocking)[0])}
device = _open(target)
err, flags, active = cu.cuDevicePrimaryCtxGetState(dev)
out["state"] = [int(err), int(flags), int(active)]
err, flags = cu.cuCtxGetFlags()
out["current"] = [int(err), int(flags)]
stream = device.create_stream()
with device.alloc(256) as buf:
    stream.fill(buf, 7)
    got = np.zeros(256, np.uint8)
    stream.copy_dtoh(got, buf)
    stream.synchronize()
out["filled"] = sorted(set(got.tolist()))
device.close()
print(json.dumps(out))
"""


@pytest.mark.clause("DEV-84")
def test_the_primary_context_is_created_with_the_flags_set_for_it(device, target):
    """cuDevicePrimaryCtxSetFlags sets the flags the primary context is created with (a client picks how its
    thread waits for the GPU this way before any library retains the context). In a child process, with the
    flags set to CU_CTX_SCHED_BLOCKING_SYNC while the context is inactive, the context the library retains when it
    opens the device again has them: cuCtxGetFlags (the context current) and cuDevicePrimaryCtxGetState report
    that scheduling mode (CU_CTX_SCHED_MASK's bits; a driver may set others, as CU_CTX_MAP_HOST), and the device
    works."""
    cuda_driver(device, "cuDevicePrimaryCtxSetFlags")
    got = child_json(target, PRIMARY_FLAGS_CHILD)
    sched_mask = int(device.native.driver.CUctx_flags.CU_CTX_SCHED_MASK)
    wanted = got["wanted"]
    assert got["set"] == 0, f"cuDevicePrimaryCtxSetFlags({wanted:#x}) of the inactive primary context: {got['set']}"
    err, flags, active = got["state"]
    assert err == 0 and active == 1, f"cuDevicePrimaryCtxGetState with the device open again: {got['state']}"
    assert flags & sched_mask == wanted, \
        f"cuDevicePrimaryCtxGetState reports flags {flags:#x}, scheduling mode {flags & sched_mask:#x}, not {wanted:#x}"
    err, flags = got["current"]
    assert err == 0, f"cuCtxGetFlags: {err}"
    assert flags & sched_mask == wanted, (
        f"the primary context, created after its flags were set to {wanted:#x} (CU_CTX_SCHED_BLOCKING_SYNC), has "
        f"flags {flags:#x} (cuCtxGetFlags): scheduling mode {flags & sched_mask:#x}")
    assert got["filled"] == [7], f"a fill of 7 read back as {got['filled']}"


@pytest.mark.clause("DEV-85")
def test_a_cuda_devices_uuid_identifies_it(device):
    """Clients tell devices apart, and match them to NVML's and nvidia-smi's, by the UUID cuDeviceGetUuid gives:
    16 bytes that are not the nil UUID (all zero, which identifies nothing), the same each time asked, and what
    `DeviceInfo.extra["uuid"]` spells as nvidia-smi does (GPU-8-4-4-4-12 hex digits); an ordinal past
    cuDeviceGetCount's is refused with CUDA_ERROR_INVALID_DEVICE, never answered with some UUID."""
    cu = cuda_driver(device, "cuDeviceGetUuid")
    answers = []
    for _ in range(2):
        err, uuid = cu.cuDeviceGetUuid(device.native.device)
        assert err == cu.CUresult.CUDA_SUCCESS, f"cuDeviceGetUuid: {err}"
        answers.append(bytes(uuid.bytes)[:16])
    assert answers[0] != bytes(16), "cuDeviceGetUuid gave the nil UUID (16 zero bytes)"
    assert answers[0] == answers[1], f"cuDeviceGetUuid gave {answers[0].hex()}, then {answers[1].hex()}"
    h = answers[0].hex()
    assert device.info.extra["uuid"] == f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}", \
        f"DeviceInfo.extra['uuid'] is {device.info.extra['uuid']!r}, cuDeviceGetUuid's bytes {h}"
    err, count = cu.cuDeviceGetCount()
    assert err == cu.CUresult.CUDA_SUCCESS, f"cuDeviceGetCount: {err}"
    err, _ = cu.cuDeviceGetUuid(cu.CUdevice(count))
    assert err == cu.CUresult.CUDA_ERROR_INVALID_DEVICE, \
        f"cuDeviceGetUuid of device {count} (cuDeviceGetCount says {count}): {err}, not CUDA_ERROR_INVALID_DEVICE"


@pytest.mark.clause("DEV-85")
def test_a_cuda_devices_pci_bus_id_is_the_drivers(device):
    """Clients match a device to NVML's, nvidia-smi's and the system's PCI tree by its bus id: what
    `DeviceInfo.extra["pci_bus_id"]` says is what cuDeviceGetPCIBusId writes (up to its NUL), in the form the
    driver documents, [domain]:[bus]:[device].[function] in hexadecimal; never the bytes after the NUL."""
    cu = cuda_driver(device, "cuDeviceGetPCIBusId")
    err, raw = cu.cuDeviceGetPCIBusId(32, device.native.device)
    assert err == cu.CUresult.CUDA_SUCCESS, f"cuDeviceGetPCIBusId: {err}"
    text = bytes(raw).split(b"\0", 1)[0].decode()
    assert re.fullmatch(r"[0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+", text), \
        f"cuDeviceGetPCIBusId gave {text!r}, not domain:bus:device.function"
    assert device.info.extra["pci_bus_id"] == text, \
        f"DeviceInfo.extra['pci_bus_id'] is {device.info.extra['pci_bus_id']!r}, cuDeviceGetPCIBusId's {text!r}"


#: (attribute, the attribute it implies): support for a location of an API family is support for that family
CUDA_IMPLIED_SUPPORT = [("HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED", "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"),
                        ("HOST_NUMA_MEMORY_POOLS_SUPPORTED", "MEMORY_POOLS_SUPPORTED"),
                        ("HOST_MEMORY_POOLS_SUPPORTED", "MEMORY_POOLS_SUPPORTED")]


@pytest.mark.clause("DEV-86")
def test_a_cuda_devices_host_numa_support_attributes_agree_with_the_apis(device, stream):
    """CUDA documents HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED as support for the HOST_NUMA location with
    cuMemCreate, cuMemMap and related APIs, and HOST_NUMA_MEMORY_POOLS_SUPPORTED (HOST_MEMORY_POOLS_SUPPORTED) as
    support for the HOST_NUMA (HOST) location with cuMemAllocAsync and the cuMemPool family: a device can only
    say so where it supports those APIs at all (VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, MEMORY_POOLS_SUPPORTED), and
    a pool of pinned memory at the location (host NUMA node HOST_NUMA_ID; the host) is made, and gives an
    allocation, exactly where the attribute says so. Allocators (PyTorch's, RMM) pick their paths by these
    attributes."""
    cuda_driver(device, "cuDeviceGetAttribute")
    cu, dev = device.native.driver, device.native.device

    def value(name: str) -> int:
        err, v = cu.cuDeviceGetAttribute(getattr(cu.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"), dev)
        assert not err, f"cuDeviceGetAttribute({name}): {err}"
        return v

    claimed = {(name, implied): (value(name), value(implied)) for name, implied in CUDA_IMPLIED_SUPPORT}
    wrong = {f"{name} without {implied}": got for (name, implied), got in claimed.items() if got[0] and not got[1]}
    assert not wrong, f"support for a location of an API family the device does not support (values): {wrong}"
    locations = {"HOST_NUMA_MEMORY_POOLS_SUPPORTED": ("CU_MEM_LOCATION_TYPE_HOST_NUMA", value("HOST_NUMA_ID")),
                 "HOST_MEMORY_POOLS_SUPPORTED": ("CU_MEM_LOCATION_TYPE_HOST", 0)}
    stream.synchronize()
    with context_current(device):
        made = {}
        for name, (location, node) in locations.items():
            props = cu.CUmemPoolProps()
            props.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
            props.handleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
            props.location.type = getattr(cu.CUmemLocationType, location)
            props.location.id = node
            err_create, pool = cu.cuMemPoolCreate(props)
            made[name] = err_create
            if err_create:
                continue
            err_alloc, p = cu.cuMemAllocFromPoolAsync(1 << 16, pool, stream.native)
            if not err_alloc:
                cu.cuMemFreeAsync(p, stream.native)
            err_sync, = cu.cuStreamSynchronize(stream.native)
            err_destroy, = cu.cuMemPoolDestroy(pool)
            assert not (err_alloc or err_sync or err_destroy), (
                f"a pool at {location} {node}: cuMemAllocFromPoolAsync of 64 KiB {err_alloc}, cuStreamSynchronize "
                f"{err_sync}, cuMemPoolDestroy {err_destroy}")
    disagree = {name: (value(name), str(err)) for name, err in made.items() if bool(value(name)) != (not err)}
    assert not disagree, ("support attributes that disagree with cuMemPoolCreate of a pinned pool at that location "
                          f"(attribute, cuMemPoolCreate's status): {disagree}")


@pytest.mark.clause("DEV-87")
def test_a_cuda_device_says_whether_mapped_host_memory_keeps_its_host_address(device):
    """CUDA documents what CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM promises about mapped host memory: where
    every visible device reports it non-zero, cuMemHostGetDevicePointer gives back the host pointer itself
    (kernels may use either), and where any reports zero, a pointer that does not match. Clients pick the
    pointer they hand a kernel by the attribute; a driver whose attribute and pointers disagree has them use a
    pointer the device cannot, or copy needlessly. Checked for pages registered with
    CU_MEMHOSTREGISTER_DEVICEMAP and for cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP."""
    if device.info.backend != "cuda" or not sys.platform.startswith("linux"):
        pytest.skip(f"{NOT_SUPPORTED_PREFIX}a CUDA driver on Linux (cuMemHostRegister)")
    import ctypes
    import mmap

    cu = device.native.driver
    attribute = cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM
    size = 1 << 16
    pages = mmap.mmap(-1, size)
    view = ctypes.c_char.from_buffer(pages)
    host = ctypes.addressof(view)
    try:
        with context_current(device):
            err, count = cu.cuDeviceGetCount()
            assert not err, f"cuDeviceGetCount: {err}"
            claims = []
            for i in range(count):
                err, ordinal = cu.cuDeviceGet(i)
                assert not err, f"cuDeviceGet({i}): {err}"
                err, value = cu.cuDeviceGetAttribute(attribute, ordinal)
                assert not err, \
                    f"cuDeviceGetAttribute(CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM) of device {i}: {err}"
                claims.append(value)
            err, = cu.cuMemHostRegister(host, size, cu.CU_MEMHOSTREGISTER_DEVICEMAP)
            assert not err, f"cuMemHostRegister(DEVICEMAP): {err}"
            try:
                err, registered = cu.cuMemHostGetDevicePointer(host, 0)
                assert not err, f"cuMemHostGetDevicePointer of the registered pages: {err}"
            finally:
                cu.cuMemHostUnregister(host)
            err, allocated = cu.cuMemHostAlloc(4096, cu.CU_MEMHOSTALLOC_DEVICEMAP)
            assert not err, f"cuMemHostAlloc(DEVICEMAP): {err}"
            try:
                err, allocated_device = cu.cuMemHostGetDevicePointer(allocated, 0)
                assert not err, f"cuMemHostGetDevicePointer of cuMemHostAlloc's memory: {err}"
            finally:
                cu.cuMemFreeHost(allocated)
    finally:
        del view
        pages.close()
    every = all(claims)
    for what, host_pointer, device_pointer in (("registered pages", host, registered),
                                                ("cuMemHostAlloc's memory", allocated, allocated_device)):
        assert (int(device_pointer) == int(host_pointer)) == every, (
            f"CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM {claims} (per visible device), and the device pointer of "
            f"{what} is {int(device_pointer):#x} for the host pointer {int(host_pointer):#x}")


def _egl_device_strings() -> list[str]:
    """EGL_EXTENSIONS of every EGL device, in eglQueryDevicesEXT's order, asked of libEGL by this test itself."""
    egl = ctypes.CDLL("libEGL.so.1")
    egl.eglGetProcAddress.restype = ctypes.c_void_p
    egl.eglGetProcAddress.argtypes = [ctypes.c_char_p]
    query = ctypes.CFUNCTYPE(ctypes.c_uint, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p),
                             ctypes.POINTER(ctypes.c_int32))(egl.eglGetProcAddress(b"eglQueryDevicesEXT"))
    string = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int32)(
        egl.eglGetProcAddress(b"eglQueryDeviceStringEXT"))
    count = ctypes.c_int32()
    assert query(0, None, ctypes.byref(count)), "eglQueryDevicesEXT could not count the devices"
    devices = (ctypes.c_void_p * max(count.value, 1))()
    assert query(count.value, devices, ctypes.byref(count)), "eglQueryDevicesEXT could not list the devices"
    return [(string(devices[i], 0x3055) or b"").decode() for i in range(count.value)]  # EGL_EXTENSIONS


@pytest.mark.clause("DEV-88")
def test_an_opengl_device_reports_its_egl_devices_extensions(device, require):
    """An EGL device's extensions say what it is (EGL_MESA_device_software: Mesa's software rasterizer;
    EGL_EXT_device_drm: a kernel driver's device) before any context is made. eglQueryDeviceStringEXT takes
    the device handle, a pointer, first: bound with its argument types swapped, the handle is cut to 32 bits,
    the driver refuses it (EGL_BAD_DEVICE) and every device reads as having no extensions at all."""
    require("lang.glsl430")
    strings = _egl_device_strings()
    assert device.info.index < len(strings), f"device {device.info.index} of {len(strings)} EGL devices"
    want = strings[device.info.index]
    assert want, f"EGL device {device.info.index} has no extensions at all"
    got = device.info.extra.get("egl_device_extensions")
    assert got == want, f"DeviceInfo.extra['egl_device_extensions'] is {got!r}, the EGL device's {want!r}"
    if "EGL_MESA_device_software" in want.split():
        assert device.info.simulated is True, "an EGL device of Mesa's software rasterizer is not simulated"


#: DEV-89's child: the calling thread's blocked signals before a device is opened and after it was used (a stream, a
#: fill, a copy back: where a backend starts its threads), then whether SIGINT raised at that thread interrupts it
SIGNAL_MASK_CHILD = """
import json, signal, sys
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
def blocked():
    return sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))
# a parent may ignore SIGINT and block signals (a Ray worker does both), and a child inherits both: start from
# Python's own SIGINT handler on a thread that takes every signal
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.pthread_sigmask(signal.SIG_SETMASK, [])
before = blocked()
device = _open(get(sys.argv[1]))
stream = device.create_stream()
buf = device.alloc(1 << 20)
stream.fill(buf, 0x59)
back = np.zeros(1 << 20, np.uint8)
stream.copy_dtoh(back, buf)
stream.synchronize()
assert (back == 0x59).all(), "the fill did not arrive"
after = blocked()
try:
    signal.raise_signal(signal.SIGINT)
    interrupted = False
except KeyboardInterrupt:
    interrupted = True
print(json.dumps({"before": before, "after": after, "interrupted": interrupted}))
"""


@pytest.mark.clause("DEV-89")
def test_opening_and_using_a_device_leaves_the_callers_signal_mask_as_it_was(target):
    """A driver that starts threads of its own blocks every signal around their creation, so that a signal meant
    for the program never lands on them, and must give the calling thread its own mask back: one that does not
    leaves the program's thread deaf to Ctrl-C (SIGINT stays pending, KeyboardInterrupt never comes) and to every
    other signal, for good. In a child process: the blocked signals after opening a device and using it are those
    before, and SIGINT raised at the thread then interrupts it."""
    got = child_json(target, SIGNAL_MASK_CHILD)
    assert got["after"] == got["before"], (
        f"opening and using a device changed the calling thread's blocked signals from {got['before']} to "
        f"{got['after']}")
    assert got["interrupted"], "SIGINT raised at the thread after it opened a device did not interrupt it"


#: DEV-91's child: a device holding 1 MiB of a known pattern; for each line on stdin it copies the buffer back and
#: prints whether the pattern is intact
CHECKPOINTED_CHILD = """
import sys
import numpy as np
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
stream = device.create_stream()
pattern = np.arange(1 << 18, dtype=np.uint32) * np.uint32(2654435761)
buf = device.alloc(pattern.nbytes)
stream.copy_htod(buf, pattern)
stream.synchronize()
print("READY", flush=True)
for line in sys.stdin:
    back = np.zeros_like(pattern)
    stream.copy_dtoh(back, buf)
    stream.synchronize()
    print("INTACT" if (back == pattern).all() else "BROKEN", flush=True)
"""


def _answer(child: subprocess.Popen, timeout: float) -> str:
    """The child's next line, "" when none comes within ``timeout`` seconds."""
    ready, _, _ = select.select([child.stdout], [], [], timeout)
    return child.stdout.readline().strip() if ready else ""


@pytest.mark.clause("DEV-91")
def test_the_drivers_checkpoint_steps_keep_a_locked_process_waiting_and_its_memory(device, target):
    """cuda-checkpoint and CRIU move a CUDA process through the driver's checkpoint API (CUDA 12.8): lock (its
    CUDA calls then wait), checkpoint (device memory saved to the host), restore, unlock. A driver that cannot
    reach the process (the fake libcuda's agent in each process), lets a locked process's calls through or
    restores other bytes breaks a checkpoint that looked successful."""
    cu = cuda_driver(device, "cuCheckpointProcess*")
    states, illegal = cu.CUprocessState, cu.CUresult.CUDA_ERROR_ILLEGAL_STATE
    child = subprocess.Popen([sys.executable, "-c", CHECKPOINTED_CHILD, target.name], text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, **target.environment()})
    try:
        assert _answer(child, 120) == "READY", f"the child did not start: {child.stderr.read()[-1500:]}"
        pid = child.pid
        err, _ = cu.cuCheckpointProcessGetState(pid)
        if err in (cu.CUresult.CUDA_ERROR_NOT_FOUND, cu.CUresult.CUDA_ERROR_NOT_SUPPORTED):  # cuda.core's reading
            pytest.skip(f"{NOT_SUPPORTED_PREFIX}a driver with checkpointing (cuCheckpointProcessGetState: {err})")

        def state():
            err, got = cu.cuCheckpointProcessGetState(pid)
            assert err == cu.CUresult.CUDA_SUCCESS, f"cuCheckpointProcessGetState: {err}"
            return got

        assert state() == states.CU_PROCESS_STATE_RUNNING
        assert cu.cuCheckpointProcessUnlock(pid, None)[0] == illegal, "unlocked a running process"
        assert cu.cuCheckpointProcessCheckpoint(pid, None)[0] == illegal, "checkpointed a running process"
        assert cu.cuCheckpointProcessLock(pid, None)[0] == cu.CUresult.CUDA_SUCCESS
        assert state() == states.CU_PROCESS_STATE_LOCKED
        child.stdin.write("copy\n")
        child.stdin.flush()
        assert _answer(child, 0.5) == "", "a locked process's copy returned"
        assert cu.cuCheckpointProcessCheckpoint(pid, None)[0] == cu.CUresult.CUDA_SUCCESS
        assert state() == states.CU_PROCESS_STATE_CHECKPOINTED
        assert cu.cuCheckpointProcessUnlock(pid, None)[0] == illegal, "unlocked a checkpointed process"
        assert cu.cuCheckpointProcessRestore(pid, None)[0] == cu.CUresult.CUDA_SUCCESS
        assert state() == states.CU_PROCESS_STATE_LOCKED
        assert cu.cuCheckpointProcessUnlock(pid, None)[0] == cu.CUresult.CUDA_SUCCESS
        assert state() == states.CU_PROCESS_STATE_RUNNING
        assert _answer(child, 60) == "INTACT", "the copy that waited at the lock read other bytes"
        child.stdin.write("copy\n")
        child.stdin.flush()
        assert _answer(child, 60) == "INTACT", "the restored memory reads other bytes"
    finally:
        child.kill()
        child.wait()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        err, _ = cu.cuCheckpointProcessGetState(sleeper.pid)
        assert err == cu.CUresult.CUDA_ERROR_NOT_INITIALIZED, f"the state of a process without CUDA: {err}"
    finally:
        sleeper.kill()
        sleeper.wait()
