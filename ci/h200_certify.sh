#!/bin/sh
# Certify the H200's targets in one device call (run from the repository root, with .whl and .gl carried; see
# the brief's "Running on the H200"): each target of $TARGETS in turn (default: the four nvidia targets) into
# results/ (a run folder each, promoted only when complete). After each target, everything under results/ the
# call wrote so far is in $OUT/results.tgz, so a call stopped at its time limit still brings back the targets it
# finished; doctor's and nvidia-smi's answers in $OUT/doctor.txt. Untar it over the checkout's results/ and
# commit it as it came. .gl holds glslang-tools too (apt-get download glslang-tools): the host has no
# glslangValidator, and without it Vulkan has no lang="glsl" and OpenGL no macro-expansion limit (KERNEL-79).
#   OUT=/some/dir [TARGETS="cuda/nvidia vulkan/nvidia"] sh ci/h200_certify.sh [extra certify options]
set -u
: "${OUT:?set OUT to the output directory}"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > "$OUT/pip.log" 2>&1
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
touch /tmp/certify-start
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -m ironaccel doctor; } > "$OUT/doctor.txt" 2>&1
for target in ${TARGETS:-cuda/nvidia vulkan/nvidia webgpu/nvidia opengl/nvidia}; do
    start=$(date +%s)
    python3 -m ironaccel certify --target "$target" --results results "$@" 2>&1 | tee -a "$OUT/certify.log"
    echo "certify $target: done in $(( $(date +%s) - start )) s" | tee -a "$OUT/certify.log"
    find results -newer /tmp/certify-start -type f ! -name .ironaccel.lock | tar czf "$OUT/results.tgz" -T -
done
