#!/bin/sh
# Whole client suites on the H200 (issue 25 item 5, issue 26 items 4-5), in one device call of at most 9 minutes:
# numba-cuda's and cuda.core's suites, whole, and CuPy's selection, on pytest-xdist workers, on the real driver
# (cuda/nvidia) and on the fake (cuda/fake, started through `ironaccel fake run`, which refuses to start unless the
# process sees the fake), and the PyTorch smoke on both. A client whose fetched tests are absent is left out (said
# in run.log). All four suite runs go at once (the real driver's are light on the CPU, the
# fake's heavy), each under a total limit, so the script ends in time whatever the suites do; a run stopped at its
# limit keeps the outcomes it reached and its results file says so.
#
# Nothing can be fetched there, so everything comes with the working tree (run from the repository root):
#   .whl/ and .whlc/   numba-cuda 0.30.4, cuda-core 1.2.2, cuda-bindings 13.5.0, cuda-pathfinder 1.9.1 (what the
#            fake's runs here use), filecheck and ml_dtypes (numba-cuda's tests): cp312 manylinux wheels
#   .np23/   numpy 2.3 (the H200's numba refuses its numpy 2.5)
#   .clients-src/cuda-python/   a checkout of NVIDIA/cuda-python at cb56ab9f9ae3b4a0ef19666697336945925589a5 (the
#            commit the committed cuda-core results were run at) holding at least cuda_core/tests/ and
#            cuda_python_test_helpers/, with its .git (shallow is enough) so the results record the commit;
#            $CUDA_PYTHON_CHECKOUT names another folder
#   .clients-src/cupy/tests/   CuPy's tests at the installed version (the H200's cupy-cuda13x 14.2.0: the tests/
#            folder of PyPI's cupy-14.2.0.tar.gz, which is tag v14.2.0's)
# The wheels go to /tmp/site, first on PYTHONPATH. Writes to $OUT: clients-results.tgz (each run's folder: its
# results file <client>--<target>.json and run record, for clients/results/), env.txt (driver, versions, the
# checkout's commit) and run.log (each run's summary line).
#
#   OUT=/some/dir [RUNS='cuda/fake:5:numba-cuda[:300] ...'] [LIMIT_S=390] sh clients/h200_whole_suites.sh
#
# A run's optional fourth field is its per-test limit in seconds (default 60, `ironaccel clients`' own): a fake run
# meant to be compared with a GPU-less machine's run of the same client (CLIENTS.md, "The fake on two machines")
# takes that run's workers and per-test limit, so that only the machine differs; its results file then goes to
# clients/results/h200-host/ (clients/README.md, "The fake on two machines"). Its optional fifth, K/N, runs shard K of
# N of the suite (`ironaccel clients --shard`), for a suite longer than one call: each call runs one shard into a
# folder of its own; `ironaccel clients --join` then joins the N results files into the whole suite's.
#
#   OUT=/some/dir RUNS='cuda/fake:8:cupy:60:1/4 cuda/fake:8:cupy:60:2/4' LIMIT_S=530 sh clients/h200_whole_suites.sh
# then 3/4 and 4/4 the same way. Measured 2026-12-03 for CuPy's selection on the fake: that first call reached 98% of
# its two shards in 530 s (a cold call is NVRTC-bound: it compiles every kernel), the second, with CuPy's kernel
# cache warm on the same machine, 97-99% in 275 s; six shards, two a call, would finish whole.
set -u
: "${OUT:?set OUT to the output directory}"
LIMIT_S=${LIMIT_S:-390}  # each run's total limit: the runs go at once, after about 40 s of set-up
checkout=${CUDA_PYTHON_CHECKOUT:-$PWD/.clients-src/cuda-python}
cupy_tests=$PWD/.clients-src/cupy/tests
log="$OUT/run.log"

# the wheels of whichever of the three folders came (a CuPy-only call needs none of .whlc/ and .np23/)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    $(ls .whl/*.whl .whlc/*.whl .np23/*.whl 2>/dev/null) > "$log" 2>&1 || { echo "wheel install failed (run.log)"; tail -5 "$log"; exit 1; }
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
# the fake reports as many multiprocessors as it has block threads: 2, as on the GPU-less machine its committed
# runs come from, so both machines' runs see the same device
export IRONACCEL_FAKE_CUDA_THREADS=2

{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import importlib.metadata as m
for d in ("numba", "numba-cuda", "cuda-core", "cuda-bindings", "cuda-pathfinder", "numpy", "torch", "filecheck", "ml_dtypes", "pytest", "pytest-xdist"):
    try: print(d, m.version(d))
    except m.PackageNotFoundError: print(d, "not installed")'
    echo "cuda-python checkout: $checkout at $(git -C "$checkout" rev-parse HEAD 2>/dev/null || echo 'no git metadata')"
    nproc
} > "$OUT/env.txt" 2>&1
[ -d "$checkout/cuda_core/tests" ] || echo "no cuda-python checkout at $checkout (see the header): cuda-core left out" | tee -a "$log"
[ -d "$cupy_tests/cupy_tests" ] || echo "no CuPy tests at $cupy_tests (see the header): cupy left out" | tee -a "$log"

# build the fake and the toolchain shims once, before the runs start (not inside their time limits)
python3 -c 'from ironaccel import fakes; print(fakes.build(), fakes.toolchain())' >> "$log" 2>&1 \
    || { echo "the fake did not build"; tail -20 "$log"; exit 1; }

suite() { # target workers client test-limit shard: one `ironaccel clients` run, in the background; the fake's
    # through `fake run`.
    # Each run has a results folder of its own (a results folder takes one run at a time); they are joined below.
    target=$1
    folder="$OUT/$3--$(echo "$target" | tr / -)${5:+--shard$(echo "$5" | tr / -)}"
    set -- python3 -m ironaccel clients --client "$3" --target "$target" --workers "$2" --timeout "$LIMIT_S" \
        --test-timeout "$4" --shard "${5:-1/1}" \
        --results "$folder" --source "cuda-core=$checkout/cuda_core/tests" \
        --source "cupy=$cupy_tests"
    if [ "$target" = cuda/fake ]; then set -- python3 -m ironaccel fake run -- "$@"; fi
    "$@" >> "$log" 2>&1 &
}
start=$(date +%s)
# RUNS: "target:workers:client[:test-limit[:K/N]] ..." (default: every suite this machine has the tests of). Workers from the
# committed one-in-five runs, times 5 for the whole suite, over about 200 s each: numba-cuda about 790 s in one
# process on either target, cuda.core 760 s on the H200 and 85 s on the fake
runs=${RUNS:-"cuda/nvidia:4:numba-cuda cuda/fake:5:numba-cuda cuda/nvidia:5:cuda-core cuda/fake:2:cuda-core cuda/nvidia:2:cupy cuda/fake:4:cupy cuda/nvidia:0:pytorch cuda/fake:0:pytorch"}
for run in $runs; do
    client=$(echo "$run" | cut -d: -f3)
    test_limit=$(echo "$run" | cut -d: -f4)
    case $client in
        cuda-core) [ -d "$checkout/cuda_core/tests" ] || continue ;;
        cupy) [ -d "$cupy_tests/cupy_tests" ] || continue ;;
    esac
    suite "${run%%:*}" "$(echo "$run" | cut -d: -f2)" "$client" "${test_limit:-60}" "$(echo "$run" | cut -d: -f5)"
done
wait
echo "all: $(( $(date +%s) - start )) s" >> "$log"
# everything the runs wrote (results files and run records), for clients/results/
(cd "$OUT" && tar czf clients-results.tgz --exclude=.ironaccel.lock -- *--cuda-* && rm -rf -- *--cuda-*)
cat "$log" | grep -E " on cuda/| s$|refus|error" || true
