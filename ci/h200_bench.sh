#!/bin/sh
# The H200 bench in one device call (run from the repository root, with .whl and .gl carried; see the brief's
# "Running on the H200"): `ironaccel bench` of cuda (with its peers: cuda.core, CuPy, PyTorch), vulkan, webgpu
# and opengl, one after another on the otherwise idle machine, into benchmarks/results/; everything the benches
# wrote is in $OUT/bench.tgz (untar it over the checkout's benchmarks/results/ and commit it as it came), their
# printed tables in $OUT/bench.log. About 3 minutes.
#   OUT=/some/dir [BACKENDS="cuda vulkan"] sh ci/h200_bench.sh
set -u
: "${OUT:?set OUT to the output directory}"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > "$OUT/pip.log" 2>&1
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
mkdir -p /tmp/bench
for backend in ${BACKENDS:-cuda vulkan webgpu opengl}; do
    peers=""; [ "$backend" = cuda ] || [ "$backend" = opengl ] && peers=--peers
    start=$(date +%s)
    python3 -m ironaccel bench --backend "$backend" $peers --out /tmp/bench 2>&1 | tee -a "$OUT/bench.log"
    echo "bench $backend: done in $(( $(date +%s) - start )) s" | tee -a "$OUT/bench.log"
    (cd /tmp/bench && tar czf "$OUT/bench.tgz" .)
done
