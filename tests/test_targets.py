"""Targets as registered data: a throwaway distribution's entry points add a backend and its drivers, which
certify like the built-ins; every Vulkan ICD manifest found becomes a vulkan/ and a webgpu/ target."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ironaccel.cts import certify, results, targets
from ironaccel.api import DeviceInfo, Limits
from ironaccel.backends import get, registry, unregister
from ironaccel.cts.drivers import vulkan as vulkan_drivers
from ironaccel.errors import InvalidArgument

ROOT = Path(__file__).resolve().parent.parent

# A third party's backend "mem" over the in-memory test device (whose DeviceInfo says backend "mem"), and its
# two drivers.
THROWAWAY = '''
from pathlib import Path
from ironaccel.cts.testing.memdevice import MemDevice
from ironaccel import api
from ironaccel.cts.targets import Target

HERE = Path(__file__).resolve().parent


class ThrowawayBackend(api.Backend):
    name = "mem"

    def probe(self):
        return api.BackendInfo("mem", True, "in-memory")

    def device_count(self):
        return 1

    def _open_device(self, index):
        return MemDevice(1 << 20)


def drivers():
    return [
        Target("mem", "throwaway", True, {"THROWAWAY_DRIVER": "mem"},
               recognise=lambda info: info.driver == "memdevice", expectations=HERE / "mem-throwaway.txt"),
        Target("mem", "absent", False, requirements=lambda: "needs the absent driver: there is none"),
    ]
'''

SUITE = '''
import os
import pytest


@pytest.mark.clause("MEM-1")
def test_the_driver_was_selected_and_recognised(device):
    assert os.environ["THROWAWAY_DRIVER"] == "mem"
    assert device.info.driver == "memdevice"


@pytest.mark.clause("MEM-2")
def test_an_expected_failure_from_the_plugins_own_expectations():
    assert False
'''


def make_distribution(site: Path) -> None:
    """``throwaway`` as pip would install it: a module and a dist-info with its two entry points."""
    package = site / "throwaway_backend"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(THROWAWAY)
    (package / "mem-throwaway.txt").write_text("MEM-2  xfail  the throwaway driver cannot do it\n")
    info = site / "throwaway_backend-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: throwaway-backend\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[ironaccel.backends]\nmem = throwaway_backend:ThrowawayBackend\n\n"
        "[ironaccel.drivers]\nmem = throwaway_backend:drivers\n")


@pytest.fixture
def throwaway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    make_distribution(site)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    unregister("mem")  # forget what the registries cached before the distribution existed
    targets.unregister("mem")
    yield site
    monkeypatch.undo()
    unregister("mem")
    targets.unregister("mem")


def test_an_installed_distribution_registers_its_backend_and_drivers(throwaway):
    assert registry()["mem"] == "throwaway_backend:ThrowawayBackend"
    assert get("mem").probe().available
    mem = targets.get("mem/throwaway")
    assert mem.simulated and mem.environment() == {"IRONACCEL_TARGET": "mem/throwaway", "THROWAWAY_DRIVER": "mem"}
    assert mem.missing() is None
    assert targets.get("mem/absent").missing() == "needs the absent driver: there is none"
    assert mem.expectations_file == throwaway / "throwaway_backend" / "mem-throwaway.txt"
    assert set(targets.standard()) >= {"mem/throwaway", "mem/absent"}


def test_an_entry_point_cannot_take_a_built_in_name(tmp_path, monkeypatch):
    """The built-ins are read before the entry points (README, Conformance suite): a distribution that
    declares ``cuda`` changes nothing."""
    site = tmp_path / "site"
    info = site / "impostor-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: impostor\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[ironaccel.backends]\ncuda = impostor:Backend\n\n"
                                           "[ironaccel.drivers]\ncuda = impostor:drivers\n")
    monkeypatch.syspath_prepend(str(site))
    unregister("cuda")  # forgets the cached registries; the built-in stays
    targets.unregister("cuda")
    try:
        assert registry()["cuda"] == "ironaccel.backends.cuda:CudaBackend"
        assert {"cuda/fake", "cuda/nvidia"} <= set(targets.registered_drivers())
    finally:
        monkeypatch.undo()
        unregister("cuda")
        targets.unregister("cuda")


def test_a_throwaway_distribution_certifies(throwaway, tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_throwaway.py").write_text(SUITE)
    out = tmp_path / "results"
    out.mkdir()
    run = certify.run_target("mem/throwaway", out, suite=suite)
    doc = results.load(run.results_file)
    assert run.ok, (run.status, run.message, doc["tests"])
    assert {t["id"].split("::")[1]: t["outcome"] for t in doc["tests"]} == {
        "test_the_driver_was_selected_and_recognised": "pass",
        "test_an_expected_failure_from_the_plugins_own_expectations": "xfail",
    }
    assert doc["target"]["device"] == "in-memory test device" and doc["target"]["simulated"] is True
    assert doc["target"]["select"] == {"THROWAWAY_DRIVER": "mem"}  # the configuration it ran in, recorded
    assert "mem-throwaway.txt: the throwaway driver cannot do it" in doc["tests"][0]["message"] + doc["tests"][1]["message"]
    assert json.loads(run.results_file.with_suffix(".cert.json").read_text())["target"] == "mem/throwaway"


def _info(**kw) -> DeviceInfo:
    fields = dict(backend="vulkan", index=0, name="x", vendor="x", driver="x", driver_version="1", simulated=False,
                  memory=0, limits=Limits(1 << 30, 256, (256, 256, 64), (65535, 65535, 65535), 1 << 15))
    return DeviceInfo(**{**fields, **kw})


def test_register_in_process_and_a_broken_drivers_function():
    def broken():
        raise RuntimeError("no such thing")

    targets.register("broken", broken)
    try:
        with pytest.warns(UserWarning, match="drivers of backend 'broken'.*RuntimeError: no such thing"):
            assert not any(name.startswith("broken/") for name in targets.registered_drivers())
        assert "cuda/fake" in targets.registered_drivers()
    finally:
        targets.unregister("broken")
    with pytest.raises(InvalidArgument, match="targets.get: unknown target 'broken/x'"):
        targets.get("broken/x")
    with pytest.raises(TypeError):
        targets.TARGETS["mine/x"] = targets.Target("mine", "x", True)  # register, never patch the table


def test_a_driver_declared_for_another_backend_is_ignored():
    targets.register("one", lambda: [targets.Target("other", "x", True)])
    try:
        with pytest.warns(UserWarning, match="declared other/x, not a driver of 'one'"):
            assert "other/x" not in targets.registered_drivers()
    finally:
        targets.unregister("one")


def manifest(folder: Path, name: str, library: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps({"file_format_version": "1.0.0", "ICD": {"library_path": library,
                                                                        "api_version": "1.3.0"}}))
    return path


@pytest.fixture
def no_device_answers(monkeypatch):
    """No ICD reports a device (as without the vulkan package): each driver has its name's kind."""
    monkeypatch.setattr(vulkan_drivers, "device_types", lambda icds: {})


def test_every_icd_manifest_is_a_vulkan_and_a_webgpu_target(tmp_path, monkeypatch, no_device_answers):
    data = tmp_path / "data"
    icd_d = data / "vulkan" / "icd.d"
    libs = tmp_path / "lib"
    libs.mkdir()
    for lib in ("libvulkan_lvp.so", "libvulkan_radeon.so", "libvulkan_acme.so.1", "libvk_swiftshader.so"):
        (libs / lib).write_bytes(b"")
    lvp = manifest(icd_d, "lvp_icd.x86_64.json", str(libs / "libvulkan_lvp.so"))
    manifest(icd_d, "lvp_icd.i686.json", str(libs / "libvulkan_lvp.so"))  # same driver: first one wins
    radv = manifest(icd_d, "radeon_icd.x86_64.json", str(libs / "libvulkan_radeon.so"))
    acme = manifest(icd_d, "acme.json", "../../../lib/libvulkan_acme.so.1")  # relative to the manifest
    manifest(icd_d, "gone.json", str(libs / "libvulkan_gone.so"))  # its library is not there
    (icd_d / "broken.json").write_text("{not json")
    cache = tmp_path / "cache"
    swiftshader = manifest(cache / "swiftshader", "vk_swiftshader_icd.json", str(libs / "libvk_swiftshader.so"))
    monkeypatch.setenv("XDG_DATA_DIRS", f"{tmp_path / 'nothing'}:{data}")
    monkeypatch.setenv("IRONACCEL_CACHE", str(cache))
    folders = vulkan_drivers.icd_folders()
    assert folders.index(tmp_path / "nothing" / "vulkan" / "icd.d") + 1 == folders.index(icd_d)
    assert folders[-1] == cache / "swiftshader"
    monkeypatch.setattr(vulkan_drivers, "icd_folders", lambda: [tmp_path / "nothing", icd_d, cache / "swiftshader"])

    found = vulkan_drivers.discover()
    assert {name: icd.manifest for name, icd in found.items()} == {
        "lavapipe": lvp, "radv": radv, "acme": acme, "swiftshader": swiftshader}

    for backend, declare in (("vulkan", vulkan_drivers.vulkan_drivers), ("webgpu", vulkan_drivers.webgpu_drivers)):
        got = {t.driver: t for t in declare() if not t.driver.endswith("-staged")}  # configurations: test below
        assert set(got) == {"lavapipe", "swiftshader", "nvidia", "radv", "acme"}
        assert [t.driver for t in got.values() if t.always] == ["lavapipe", "swiftshader", "nvidia"]
        assert {d: t.simulated for d, t in got.items()} == {
            "lavapipe": True, "swiftshader": True, "nvidia": False, "radv": False, "acme": False}
        assert got["radv"].environment()["VK_DRIVER_FILES"] == str(radv)
        assert got["acme"].select == {"VK_DRIVER_FILES": str(acme), "VK_ICD_FILENAMES": str(acme)}
        assert got["nvidia"].select == {}
        assert "no nvidia Vulkan ICD" in (got["nvidia"].missing() or "")
        assert got["lavapipe"].matches(_info(backend=backend, name="llvmpipe (LLVM 15.0.6, 256 bits)"))
        assert not got["lavapipe"].matches(_info(backend=backend, name="SwiftShader Device (Subzero)"))
        assert not got["lavapipe"].matches(_info(backend="cuda", name="llvmpipe"))
        assert got["radv"].matches(_info(backend=backend, name="AMD Radeon RX 6800 (RADV NAVI21)", driver="radv"))
        assert got["acme"].matches(_info(backend=backend, name="Acme GPU", vendor="Acme"))


def test_lavapipe_with_staging_forced_is_a_vulkan_target_of_its_own(tmp_path, monkeypatch, no_device_answers):
    lvp = manifest(tmp_path / "icd.d", "lvp_icd.x86_64.json", "libvulkan_lvp.so")
    monkeypatch.setattr(vulkan_drivers, "icd_folders", lambda: [tmp_path / "icd.d"])
    got = {t.name: t for t in vulkan_drivers.vulkan_drivers()}
    staged, plain = got["vulkan/lavapipe-staged"], got["vulkan/lavapipe"]
    assert staged.simulated and staged.always and staged.memory_kind == "host"
    assert staged.select == {**plain.select, "IRONACCEL_VK_DIRECT_MAPPING": "0", "IRONACCEL_VK_VALIDATION": "sync"}
    assert staged.select["VK_DRIVER_FILES"] == str(lvp) and "IRONACCEL_VK_DIRECT_MAPPING" not in plain.select
    assert "IRONACCEL_VK_VALIDATION" not in plain.select
    assert staged.expectations_file.name == "vulkan-lavapipe-staged.txt" and staged.expectations_file.is_file()
    lavapipe = dict(name="llvmpipe (LLVM 15.0.6, 256 bits)", simulated=True)
    checked = {"direct_mapping": False, "synchronization_validation": True}
    assert staged.matches(_info(**lavapipe, extra=checked))
    assert not staged.matches(_info(**lavapipe, extra={**checked, "direct_mapping": True}))  # staging was not forced
    assert not staged.matches(_info(**lavapipe, extra={**checked, "synchronization_validation": False}))
    assert not staged.matches(_info(**lavapipe))
    assert plain.matches(_info(**lavapipe, extra={"direct_mapping": True}))
    assert not any(t.driver.endswith("-staged") for t in vulkan_drivers.webgpu_drivers())


def test_lavapipe_staged_needs_the_validation_layer(tmp_path, monkeypatch, no_device_answers):
    """Its synchronization validation is the layer's: without the layer's manifest where the loader looks, the
    target says what to install (and the plain target does not need it)."""
    manifest(tmp_path / "icd.d", "lvp_icd.x86_64.json", "libvulkan_lvp.so")
    monkeypatch.setattr(vulkan_drivers, "icd_folders", lambda: [tmp_path / "icd.d"])
    monkeypatch.setenv("VK_LAYER_PATH", str(tmp_path / "layers"))
    got = {t.name: t for t in vulkan_drivers.vulkan_drivers()}
    staged, plain = got["vulkan/lavapipe-staged"], got["vulkan/lavapipe"]
    assert "apt-get install vulkan-validationlayers" in (staged.requirements() or "")
    (tmp_path / "layers").mkdir()
    (tmp_path / "layers" / vulkan_drivers.VALIDATION_LAYER_MANIFEST).write_text("{}")
    assert staged.requirements() == plain.requirements()


LAVAPIPE_LIBRARY = Path("/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so")


def test_a_cpu_icd_under_an_unknown_name_is_simulated_by_its_device_type(tmp_path, monkeypatch):
    """The kind comes from the device the ICD reports, not from its library's name: lavapipe renamed is a
    driver the name table does not know, and still simulated (as hardware it would fail DEV-6)."""
    pytest.importorskip("vulkan")
    if not LAVAPIPE_LIBRARY.is_file():
        pytest.skip(f"lavapipe is not installed ({LAVAPIPE_LIBRARY}): apt-get install mesa-vulkan-drivers")
    (tmp_path / "lib").mkdir()
    renamed = tmp_path / "lib" / "libvulkan_mycpu.so"
    renamed.symlink_to(LAVAPIPE_LIBRARY)
    mycpu = manifest(tmp_path / "icd.d", "mycpu_icd.json", str(renamed))
    monkeypatch.setattr(vulkan_drivers, "icd_folders", lambda: [tmp_path / "icd.d"])
    monkeypatch.setenv("IRONACCEL_CACHE", str(tmp_path / "cache"))
    for declare in (vulkan_drivers.vulkan_drivers, vulkan_drivers.webgpu_drivers):
        got = {t.driver: t for t in declare()}
        assert got["mycpu"].simulated and not got["mycpu"].always, got["mycpu"]
        assert got["mycpu"].select["VK_DRIVER_FILES"] == str(mycpu)
        assert got["mycpu"].memory_kind == "host"  # MEM-7 exhausts it as the CPU driver it is
    cached = json.loads((tmp_path / "cache" / vulkan_drivers.DEVICE_TYPES_CACHE).read_text())
    assert cached[str(mycpu)]["types"] == ["VK_PHYSICAL_DEVICE_TYPE_CPU"]


def test_device_types_are_cached_per_manifest_version_and_beat_the_name(tmp_path, monkeypatch):
    pytest.importorskip("vulkan")
    (tmp_path / "libvulkan_lvp.so").write_bytes(b"")
    (tmp_path / "libvulkan_acme.so").write_bytes(b"")
    lvp = manifest(tmp_path / "icd.d", "lvp_icd.json", str(tmp_path / "libvulkan_lvp.so"))
    acme = manifest(tmp_path / "icd.d", "acme_icd.json", str(tmp_path / "libvulkan_acme.so"))
    reports = {lvp: ["VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU"], acme: ["VK_PHYSICAL_DEVICE_TYPE_CPU"]}
    asked = []

    def fake_probe(icd):  # a child that reports what ``reports`` says for this manifest
        asked.append(icd.manifest)
        return subprocess.Popen([sys.executable, "-c", f"print({json.dumps(json.dumps(reports[icd.manifest]))})"],
                                stdout=subprocess.PIPE, text=True)

    monkeypatch.setattr(vulkan_drivers, "_start_probe", fake_probe)
    monkeypatch.setattr(vulkan_drivers, "icd_folders", lambda: [tmp_path / "icd.d"])
    monkeypatch.setenv("IRONACCEL_CACHE", str(tmp_path / "cache"))
    kinds = {t.driver: t.simulated for t in vulkan_drivers.vulkan_drivers()}
    assert kinds["lavapipe"] is False and kinds["acme"] is True  # the devices say so, whatever the names say
    assert kinds["swiftshader"] is True and kinds["nvidia"] is False  # declared without an ICD: the name's kind
    assert sorted(asked) == sorted([lvp, acme])
    vulkan_drivers.webgpu_drivers()
    assert len(asked) == 2  # both answers came from the cache
    reports[acme] = ["VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU"]
    os.utime(tmp_path / "libvulkan_acme.so", ns=(1, 1))  # the driver was upgraded
    assert {t.driver: t.simulated for t in vulkan_drivers.webgpu_drivers()}["acme"] is False
    assert asked[2:] == [acme]


@pytest.mark.parametrize("ending, cached", [("raise SystemExit(3)", False), ("import os; os.abort()", True)])
def test_a_probe_that_fails_is_asked_again_and_one_an_icd_crashed_is_not(tmp_path, monkeypatch, ending, cached):
    """A probe that fails by itself (exit status) may work next time; one killed by a signal was crashed by
    its ICD, which would crash it again: that is remembered as reporting no device."""
    pytest.importorskip("vulkan")
    (tmp_path / "libvulkan_acme.so").write_bytes(b"")
    acme = manifest(tmp_path / "icd.d", "acme_icd.json", str(tmp_path / "libvulkan_acme.so"))
    asked = []

    def failing_probe(icd):
        asked.append(icd.manifest)
        return subprocess.Popen([sys.executable, "-c", ending], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)

    monkeypatch.setattr(vulkan_drivers, "_start_probe", failing_probe)
    monkeypatch.setenv("IRONACCEL_CACHE", str(tmp_path / "cache"))
    icd = vulkan_drivers._read_manifest(acme)
    assert vulkan_drivers.device_types([icd]) == ({acme: []} if cached else {})
    vulkan_drivers.device_types([icd])
    assert len(asked) == (1 if cached else 2)


def test_native_ops_are_looked_up_in_the_runtime():
    for runtime in ("cuda.bindings", "vulkan", "wgpu"):
        pytest.importorskip(runtime)
    from ironaccel.cts.drivers.cuda import native_op as cuda_op

    assert cuda_op("cuMemAllocAsync") and cuda_op("nvrtcCompileProgram")
    assert not cuda_op("CUDA_ERROR_OUT_OF_MEMORY") and not cuda_op("Device.alloc") and not cuda_op("cuNoSuchCall")
    assert vulkan_drivers.vulkan_native_op("vkAllocateMemory")
    assert not vulkan_drivers.vulkan_native_op("VK_ERROR_OUT_OF_DEVICE_MEMORY")
    assert vulkan_drivers.webgpu_native_op("GPUDevice.create_buffer")
    assert not vulkan_drivers.webgpu_native_op("GPUOutOfMemoryError") and not vulkan_drivers.webgpu_native_op("Device.alloc")


@pytest.mark.parametrize("library", ["libGLX_nvidia.so.0", "libEGL_nvidia.so.0"])
def test_nvidias_manifest_is_vulkan_nvidia_by_discovery(tmp_path, monkeypatch, library, no_device_answers):
    nvidia = manifest(tmp_path / "icd.d", "nvidia_icd.json", library)  # a bare name: the loader finds it
    monkeypatch.setattr(vulkan_drivers, "icd_folders", lambda: [tmp_path / "icd.d"])
    got = {t.name: t for t in vulkan_drivers.vulkan_drivers()}
    assert got["vulkan/nvidia"].select["VK_DRIVER_FILES"] == str(nvidia) and not got["vulkan/nvidia"].simulated
    assert got["vulkan/nvidia"].matches(_info(name="NVIDIA H200", vendor="NVIDIA", driver="NVIDIA"))
    assert not got["vulkan/nvidia"].matches(_info(name="llvmpipe (LLVM 15.0.6, 256 bits)", vendor="Mesa"))


def test_a_hardware_manifest_without_its_gpu_is_not_runnable(tmp_path, monkeypatch, no_device_answers):
    """Mesa installs manifests for every GPU family: the target asks the loader whether the GPU is there."""
    icd_d = tmp_path / "icd.d"
    (tmp_path / "libvulkan_radeon.so").write_bytes(b"")
    radv = manifest(icd_d, "radeon_icd.x86_64.json", str(tmp_path / "libvulkan_radeon.so"))
    monkeypatch.setattr(vulkan_drivers, "icd_folders", lambda: [icd_d])
    monkeypatch.setattr(vulkan_drivers, "python_package_missing", lambda *a: None)
    monkeypatch.setattr(vulkan_drivers.ctypes.util, "find_library", lambda name: "libvulkan.so.1")
    asked = []
    monkeypatch.setattr(vulkan_drivers, "count_devices", lambda backend, select: asked.append((backend, select)) or 0)
    target = next(t for t in vulkan_drivers.vulkan_drivers() if t.driver == "radv")
    assert target.missing() == f"the radv Vulkan ICD ({radv}) finds no device: this machine has no such GPU"
    assert asked == [("vulkan", target.select)]


def test_devices_keeps_wayland_noise_off_the_terminal():
    """libwayland-client prints "XDG_RUNTIME_DIR is invalid or not set" for every wgpu instance without one."""
    pytest.importorskip("wgpu", reason="the noise comes from wgpu-native's display probing")
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-m", "ironaccel", "devices"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "webgpu" in proc.stdout
    assert "XDG_RUNTIME_DIR" not in proc.stderr, proc.stderr
