#!/bin/sh
# Certify the H200's targets in one device call (run from the repository root, with .whl and .gl carried; see
# the brief's "Running on the H200"): the four nvidia targets at once into results/ (a run folder each, promoted
# only when complete), then everything under results/ the run wrote comes back as $OUT/results.tgz, with
# doctor's and nvidia-smi's answers. Untar it over the checkout's results/ and commit it as it came.
#   OUT=/some/dir sh ci/h200_certify.sh [extra certify options]
set -u
: "${OUT:?set OUT to the output directory}"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > "$OUT/pip.log" 2>&1
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
touch /tmp/certify-start
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -m ironaccel doctor; } > "$OUT/doctor.txt" 2>&1
start=$(date +%s)
python3 -m ironaccel certify --target cuda/nvidia --target vulkan/nvidia --target webgpu/nvidia \
    --target opengl/nvidia --results results "$@" 2>&1 | tee "$OUT/certify.log"
echo "certify rc=$? in $(( $(date +%s) - start )) s" | tee -a "$OUT/certify.log"
find results -newer /tmp/certify-start -type f | tar czf "$OUT/results.tgz" -T -
