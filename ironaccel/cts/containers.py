"""``ironaccel certify --docker``: each target in a container of its image (``ci/docker``), its files back
into the results folder."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from .. import __version__
from . import results, targets
from .certify import RETRIES, TARGET_TIMEOUT_S, TEST_TIMEOUT_S, TargetRun, _finish
from .selection import Selection

#: Images of ``--docker`` runs: simulated targets run in the GPU-less image, hardware ones in the CUDA image.
DOCKERFILES = {True: "ci/docker/gpuless.Dockerfile", False: "ci/docker/cuda.Dockerfile"}
CONTAINER_RESULTS = "/results"


class DockerUnavailable(Exception):
    """``certify --docker`` cannot run: no Docker engine answers, the docker SDK or an image is missing."""


def docker_client() -> Any:
    try:
        import docker
    except ImportError as exc:
        raise DockerUnavailable("the docker SDK is not installed: pip install docker") from exc
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        raise DockerUnavailable(f"no Docker engine is reachable at {where} ({exc}); start one, or set DOCKER_HOST, "
                             "or run without --docker") from exc
    return client


def docker_image(client: Any, simulated: bool) -> str:
    """The image tag for simulated or hardware targets, built from this checkout's ci/docker when missing."""
    import docker

    dockerfile = DOCKERFILES[simulated]
    tag = f"ironaccel-ci-{Path(dockerfile).name.split('.')[0]}:{__version__}"
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        root = Path(__file__).resolve().parents[2]
        if not (root / dockerfile).is_file():
            raise DockerUnavailable(f"image {tag} is missing and {root / dockerfile} is not there to build it: "
                                 "run from a checkout, or build the image there") from None
        client.images.build(path=str(root), dockerfile=dockerfile, tag=tag, rm=True)
    return tag


def container_runner(client: Any, names: list[str], retries: int = RETRIES) -> Callable[..., TargetRun]:
    """A ``run_target`` that runs ``ironaccel certify --target`` in a container of the target's image; the
    images ``names`` need are found (or built) first, so a missing one fails before any target starts."""
    import docker
    import requests

    images = {sim: docker_image(client, sim) for sim in {targets.get(n).simulated for n in names}}

    def run(name: str, results_dir: Path, timeout_s: float = TARGET_TIMEOUT_S,
            test_timeout_s: float = TEST_TIMEOUT_S, selection: Selection = Selection()) -> TargetRun:
        target = targets.get(name)
        results_dir = results_dir.resolve()
        out = results_dir / results.file_name(name)
        log = out.with_name("." + out.stem + ".log")
        gpus = [] if target.simulated else [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
        started, t0 = results.now(), time.monotonic()
        out.unlink(missing_ok=True)
        container = client.containers.run(
            images[target.simulated],
            ["ironaccel", "certify", "--target", name, "--results", CONTAINER_RESULTS,
             "--timeout", f"{timeout_s:g}", "--test-timeout", f"{test_timeout_s:g}", "--retries", str(retries),
             *selection.pytest_args()],
            volumes={str(results_dir): {"bind": CONTAINER_RESULTS, "mode": "rw"}},
            # the host's user, so the files it writes are the host's; HOME, since that uid has no home there
            user=f"{os.getuid()}:{os.getgid()}", environment={"HOME": "/tmp"}, device_requests=gpus, detach=True)
        try:
            exit_code, timed_out = container.wait(timeout=timeout_s + 60)["StatusCode"], False
        except requests.exceptions.RequestException:  # the container outlived its limit
            container.kill()
            exit_code, timed_out = None, True
        log.write_bytes(container.logs())
        container.remove(force=True)
        return _finish(name, out, log, started, time.monotonic() - t0, timed_out, exit_code, timeout_s)

    return run
