# The CUDA image: hardware targets (cuda/nvidia, vulkan/nvidia, webgpu/nvidia, opengl/nvidia) on a host with NVIDIA GPUs and
# the NVIDIA container toolkit, which mounts the driver (libcuda.so.1, nvidia_icd.json) into the container.
# Build from the repository root (ironaccel certify --docker does it when the image is missing):
#   docker build -f ci/docker/cuda.Dockerfile -t ironaccel-ci-cuda:0.1.0 .
# Run one target:  docker run --rm --gpus all -v "$PWD/results:/results" ironaccel-ci-cuda:0.1.0 \
#                    ironaccel certify --target cuda/nvidia --results /results
FROM nvidia/cuda:12.6.3-base-ubuntu24.04

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# graphics: the toolkit also mounts the driver's Vulkan ICD and EGL library (libEGL_nvidia.so.0, 10_nvidia.json),
# which vulkan/nvidia, webgpu/nvidia and opengl/nvidia need; libegl1 + libgl1 are the glvnd loaders in front.
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1 \
    HYPOTHESIS_PROFILE=ci

# Debian/Ubuntu package versions are not pinned: the image follows the release's security updates.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-pip libvulkan1 libegl1 libgl1 \
    && rm -rf /var/lib/apt/lists/*

COPY pyproject.toml README.md /opt/ironaccel/src/
COPY ironaccel /opt/ironaccel/src/ironaccel
COPY conformance /opt/ironaccel/src/conformance
COPY fakes /opt/ironaccel/src/fakes
RUN pip install -e "/opt/ironaccel/src[cts,webgpu,vulkan,cuda,opengl]"

# uid 1000 is the base image's "ubuntu" user
USER 1000
WORKDIR /results
CMD ["ironaccel", "doctor"]
