# The GPU-less image: every simulated target (vulkan/webgpu on Mesa lavapipe and SwiftShader, cuda/fake, and
# opencl/pocl from plugins/ironaccel-opencl, installed beside ironaccel as a third party's backend would be).
# Build from the repository root (ironaccel certify --docker does it when the image is missing):
#   docker build -f ci/docker/gpuless.Dockerfile -t ironaccel-ci-gpuless:0.1.0 .
# Run one target:  docker run --rm -v "$PWD/results:/results" ironaccel-ci-gpuless:0.1.0 \
#                    ironaccel certify --target vulkan/lavapipe --results /results
FROM python:3.11.7-slim-bookworm

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV IRONACCEL_CACHE=/opt/ironaccel/cache \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HYPOTHESIS_PROFILE=ci

# gcc builds the fake libcuda; ci/provision installs the Vulkan side (mesa-vulkan-drivers, libvulkan1,
# glslang-tools, vulkan-validationlayers), PoCL (pocl-opencl-icd, ocl-icd-libopencl1), Mesa's EGL
# and llvmpipe for OpenGL, and extracts SwiftShader from chromium-common into $IRONACCEL_CACHE.
# Debian package versions are not pinned: the image follows bookworm's security updates.
COPY ci/provision /opt/ironaccel/src/ci/provision
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && bash /opt/ironaccel/src/ci/provision \
    && rm -rf /var/lib/apt/lists/*

COPY pyproject.toml setup.py README.md /opt/ironaccel/src/
COPY ironaccel /opt/ironaccel/src/ironaccel
COPY conformance /opt/ironaccel/src/conformance
COPY fakes /opt/ironaccel/src/fakes
COPY plugins /opt/ironaccel/src/plugins
# Editable: the fake libcuda's C sources are found beside the package. setup.py compiles the hot path
# (ironaccel._fast). Everything ironaccel builds is built now, and the build fails if any of it does not:
# the fake libcuda, its NVRTC and nvJitLink shims (nvJitLink where its wheel is installed) and the hot path,
# so a container run as any user (certify --docker runs as the host's) finds them in the cache. The cache
# stays writable for what a run adds (NVRTC's compiled kernels), sticky so no user removes another's files.
RUN pip install -e "/opt/ironaccel/src[cts,webgpu,vulkan,cuda,opengl]" \
    && pip install -e /opt/ironaccel/src/plugins/ironaccel-opencl \
    && ironaccel fakes build \
    && python -c "from ironaccel import fakes, native; shims = fakes.toolchain(); assert 'nvrtc' in shims, shims; assert native.load() is not None, native.why_not" \
    && chmod -R a+rX "$IRONACCEL_CACHE" \
    && chmod 1777 "$IRONACCEL_CACHE" \
    && useradd --create-home --uid 1000 ironaccel

USER 1000
WORKDIR /results
CMD ["ironaccel", "doctor"]
