# The CUDA image: hardware targets (cuda/nvidia, vulkan/nvidia, webgpu/nvidia, opengl/nvidia) on a host with NVIDIA GPUs and
# the NVIDIA container toolkit, which mounts the driver (libcuda.so.1, nvidia_icd.json) into the container.
# Build from the repository root (ironaccel certify --docker does it when the image is missing):
#   docker build -f ci/docker/cuda.Dockerfile -t ironaccel-ci-cuda:0.1.0 .
# Run one target:  docker run --rm --gpus all -v "$PWD/results:/results" ironaccel-ci-cuda:0.1.0 \
#                    ironaccel certify --target cuda/nvidia --results /results
# The base image's CUDA version pins the CUDA wheels below (nvidia-cuda-nvrtc and cuda-bindings of the same
# major.minor), so NVRTC and the bindings are the toolkit the image says it is. 13.0: what the committed
# cuda/nvidia results ran with (driver 580, CUDA 13.0; nvidia-cuda-nvrtc 13.0.88). The container toolkit
# refuses an image newer than the host driver's CUDA, so raise it only with the driver.
ARG CUDA_VERSION=13.0.0
FROM nvidia/cuda:${CUDA_VERSION}-base-ubuntu24.04
ARG CUDA_VERSION

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# graphics: the toolkit also mounts the driver's Vulkan ICD and EGL library (libEGL_nvidia.so.0, 10_nvidia.json),
# which vulkan/nvidia, webgpu/nvidia and opengl/nvidia need; libegl1 + libgl1 are the glvnd loaders in front.
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1 \
    HYPOTHESIS_PROFILE=ci

# Debian/Ubuntu package versions are not pinned: the image follows the release's security updates.
# gcc, libc6-dev and python3-dev: setup.py compiles the hot path (ironaccel._fast) at install.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-pip python3-dev gcc libc6-dev libvulkan1 libegl1 libgl1 \
    && rm -rf /var/lib/apt/lists/*

COPY pyproject.toml setup.py README.md /opt/ironaccel/src/
COPY ironaccel /opt/ironaccel/src/ironaccel
COPY conformance /opt/ironaccel/src/conformance
COPY fakes /opt/ironaccel/src/fakes
RUN pip install -e "/opt/ironaccel/src[cts,webgpu,vulkan,cuda,opengl]" \
        "nvidia-cuda-nvrtc==${CUDA_VERSION%.*}.*" "cuda-bindings==${CUDA_VERSION%.*}.*" \
    && python3 -c "from ironaccel import native; assert native.load() is not None, native.why_not"

# uid 1000 is the base image's "ubuntu" user
USER 1000
WORKDIR /results
CMD ["ironaccel", "doctor"]
