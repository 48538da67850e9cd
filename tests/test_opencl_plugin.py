"""plugins/ironaccel-opencl: a backend that lives outside ironaccel, registered only by its entry points.

Its whole conformance run is ``ironaccel certify --target opencl/pocl`` (tox and CI install the plugin);
here: that ironaccel itself never names OpenCL, that every conformance kernel has an OpenCL C version, ICD
discovery, and a round trip on PoCL through the registry (where pyopencl and PoCL are installed)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.cts import targets
from ironaccel.backends import get, unregister
from ironaccel.errors import InvalidArgument

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "plugins" / "ironaccel-opencl"
PACKAGE = PLUGIN / "ironaccel_opencl"


@pytest.fixture
def opencl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The plugin installed as pip would (its package and a dist-info with its entry points), for this
    process and its children."""
    site = tmp_path / "site"
    info = site / "ironaccel_opencl-0.1.0.dist-info"
    info.mkdir(parents=True)
    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text())["project"]
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in points.items()) + "\n"
        for group, points in project["entry-points"].items()))
    for path in (PLUGIN, site):
        monkeypatch.syspath_prepend(str(path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(PLUGIN), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    unregister("opencl")  # forget registry answers cached before the plugin was there
    targets.unregister("opencl")
    yield
    monkeypatch.undo()
    unregister("opencl")
    targets.unregister("opencl")


def test_nothing_in_ironaccel_names_opencl():
    """Only through the registry: not a language, a target, a driver (a distro package's name may say it)."""
    for path in (ROOT / "ironaccel").rglob("*.py"):
        assert not re.search(r"(?<![-\w])opencl(?![-\w])", path.read_text(encoding="utf-8"), re.I), path


def test_every_conformance_kernel_has_an_opencl_c_version():
    suite = {p.stem for p in (ROOT / "conformance" / "kernels" / "cuda").glob("*.cu")}
    ours = {p.stem for p in (PACKAGE / "kernels").glob("*.cl")}
    assert ours == suite | {"broken"}
    for name in suite:
        assert re.search(rf"__kernel void {name}\(", (PACKAGE / "kernels" / f"{name}.cl").read_text()), name


def load_from_checkout(module: str):
    """The checkout's own copy of a plugin module, whatever copy of the plugin is installed."""
    spec = importlib.util.spec_from_file_location(f"checkout_{module}", PACKAGE / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded  # dataclasses look their module up there
    spec.loader.exec_module(loaded)
    return loaded


def test_every_icd_is_a_target(tmp_path, monkeypatch):
    drivers = load_from_checkout("drivers")

    (tmp_path / "pocl.icd").write_text("libpocl.so.2.10.0\n")
    (tmp_path / "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    (tmp_path / "acme.icd").write_text("/opt/acme/lib/libAcmeCL.so\n")
    (tmp_path / "empty.icd").write_text("")
    monkeypatch.setattr(drivers, "VENDORS", tmp_path)
    got = {t.driver: t for t in drivers.drivers()}
    assert list(got) == ["pocl", "acmecl", "nvidia"]
    assert [t.driver for t in got.values() if t.always] == ["pocl"]
    assert {d: t.simulated for d, t in got.items()} == {"pocl": True, "acmecl": False, "nvidia": False}
    assert got["nvidia"].select == {"OCL_ICD_VENDORS": str(tmp_path / "nvidia.icd"),
                                    "OCL_ICD_FILENAMES": "libnvidia-opencl.so.1"}
    package = Path(drivers.__file__).parent  # the checkout's, or the installed copy tox made
    assert got["pocl"].expectations_file == package / "expectations" / "opencl-pocl.txt"
    assert got["pocl"].kernels[0].folder == package / "kernels"


#: Each known ICD library -> (its driver, simulated, the platform name its devices report).
KNOWN_ICDS = {
    "libpocl.so.2": ("pocl", True, "Portable Computing Language"),
    "libnvidia-opencl.so.1": ("nvidia", False, "NVIDIA CUDA"),
    "libRusticlOpenCL.so.1": ("rusticl", False, "rusticl"),
    "libMesaOpenCL.so.1": ("clover", False, "Clover"),
    "libamdocl64.so": ("amd", False, "AMD Accelerated Parallel Processing"),
    "libigdrcl.so": ("intel", False, "Intel(R) OpenCL Graphics"),  # Intel's GPU runtime (NEO): hardware
    "libintelocl.so": ("intel-cpu", True, "Intel(R) OpenCL"),  # Intel's CPU runtime
}


def test_each_known_icd_is_a_target_of_its_kind(tmp_path, monkeypatch):
    """Every library KNOWN_LIBRARIES names becomes its driver's target, simulated only for a CPU runtime, and
    recognises its own platform's devices (Intel's two runtimes share a platform name, so each takes both)."""
    drivers = load_from_checkout("drivers")
    assert {lib.removeprefix("lib").split(".so")[0].lower() for lib in KNOWN_ICDS} == set(drivers.KNOWN_LIBRARIES)
    for i, library in enumerate(KNOWN_ICDS):
        (tmp_path / f"{i}.icd").write_text(f"/usr/lib/x86_64-linux-gnu/{library}\n")
    monkeypatch.setattr(drivers, "VENDORS", tmp_path)
    got = {t.driver: t for t in drivers.drivers()}
    assert {d: t.simulated for d, t in got.items()} == {d: sim for d, sim, _ in KNOWN_ICDS.values()}
    platforms = {d: platform for d, _, platform in KNOWN_ICDS.values()}
    for driver, target in got.items():
        recognised = {d for d, platform in platforms.items() if target.recognise(SimpleNamespace(driver=platform))}
        assert driver in recognised and recognised <= {driver, "intel", "intel-cpu"}, (driver, recognised)


def test_a_round_trip_on_pocl_through_the_registry(opencl):
    pytest.importorskip("pyopencl", reason="the OpenCL backend runs on pyopencl: pip install pyopencl")
    target = targets.get("opencl/pocl")
    why = target.missing()
    if why is not None:
        pytest.skip(f"opencl/pocl cannot run here: {why}")
    assert "opencl" in {info.name for info in ia.backends()}  # listed like a built-in
    dev = next(d for d in (get("opencl").open_device(i) for i in range(get("opencl").device_count()))
               if target.matches(d.info))
    try:
        assert dev.info.simulated and dev.languages == ("opencl",)
        saxpy = dev.compile(target.kernels[0].source("saxpy"), "opencl").kernel("saxpy")
        assert [(p.kind, p.nbytes, p.scalar) for p in saxpy.params] == [
            ("buffer", 0, ""), ("buffer", 0, ""), ("scalar", 4, "float"), ("scalar", 4, "int")]
        s = dev.create_stream()
        x, y = np.arange(100, dtype=np.float32), np.full(100, 0.5, np.float32)
        bx, by = dev.alloc(400), dev.alloc(400)
        s.copy_htod(bx, x)
        s.copy_htod(by, y)
        s.launch(saxpy, 2, 64, (bx, by, np.float32(2), np.uint32(100)))
        out = np.zeros(100, np.float32)
        s.copy_dtoh(out, by)
        s.synchronize(timeout=30)
        np.testing.assert_array_equal(out, 2 * x + y)
        with pytest.raises(InvalidArgument, match="argument 2 of saxpy is uint32; the kernel declares a"):
            s.launch(saxpy, 1, 1, (bx, by, np.uint32(2), np.uint32(100)))
        with pytest.raises(ia.CompileError) as err:
            dev.compile(target.kernels[0].source("broken"), "opencl")
        assert "undefined_thing" in err.value.log
    finally:
        dev.close()


def _pocl_device():
    pytest.importorskip("pyopencl", reason="the OpenCL backend runs on pyopencl: pip install pyopencl")
    target = targets.get("opencl/pocl")
    why = target.missing()
    if why is not None:
        pytest.skip(f"opencl/pocl cannot run here: {why}")
    return next(d for d in (get("opencl").open_device(i) for i in range(get("opencl").device_count()))
                if target.matches(d.info))


def test_a_kernel_past_the_local_memory_limit_is_refused_before_launch(opencl):
    """Issue 31 finding 8: PoCL aborts the process (an assertion) on a launch whose __local arrays exceed the
    device's local memory; the launch is refused naming Stream.launch instead, and nothing is enqueued."""
    dev = _pocl_device()
    try:
        words = dev.info.limits.max_shared_memory // 4 + 1024
        src = (f"__kernel void big(__global float *out) {{ __local float tmp[{words}]; "
               "tmp[get_local_id(0)] = 1.0f; barrier(CLK_LOCAL_MEM_FENCE); out[get_global_id(0)] = tmp[0]; }")
        big = dev.compile(src, "opencl").kernel("big")
        s = dev.create_stream()
        with dev.alloc(4096) as out:
            with pytest.raises(InvalidArgument, match=r"Stream\.launch: kernel big declares \d+ bytes of __local"):
                s.launch(big, 1, 32, (out,))
            s.synchronize(timeout=30)
    finally:
        dev.close()


def test_dropped_streams_and_their_queues_are_let_go(opencl):
    """Issue 31 finding 5: the device keeps no dropped stream, and a dropped stream's queue only until its
    work is done (LIFE-3: a copy_dtoh of a dropped stream still lands by Device.synchronize)."""
    import gc
    import weakref

    dev = _pocl_device()
    try:
        with dev.alloc(64) as buf:
            dev.default_stream.fill(buf, 7)
            host = np.zeros(64, np.uint8)
            s = dev.create_stream()
            s.copy_dtoh(host, buf)
            ref = weakref.ref(s)
            del s
            gc.collect()
            assert ref() is None, "the device keeps a dropped stream"
            dev.synchronize(timeout=30)
            assert (host == 7).all()
            assert not dev._dropped_queues, "a dropped stream's queue outlived its work"
            for _ in range(200):
                dev.create_stream().fill(buf, 1)
            gc.collect()
            assert len(dev._streams) == 1, "the device keeps dropped streams"  # the default stream
            dev.synchronize(timeout=30)
            assert not dev._dropped_queues
    finally:
        dev.close()
