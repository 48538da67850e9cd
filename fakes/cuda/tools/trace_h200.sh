#!/bin/sh
# Traces of the export tables on a real driver (the H200), the spec fakes/cuda/export_tables.c follows:
# builds export_trace.so (tools/export_trace.c, with cc), then runs under it, each into its own trace in $OUT:
#   cupy.log   CuPy start-up and tools/cupy_smoke.py (if CuPy is installed; CUB/Thrust on, as CuPy defaults)
#   torch.log  the PyTorch smoke, python3 -m ironaccel.cts.torch_smoke (if PyTorch is installed)
#   nvcc.log   tools/runtime_smoke.cu: the binary $RUNTIME_SMOKE if set, else built here by nvcc (if nvcc is on
#              PATH or in /usr/local/cuda/bin; its output in nvcc-build.out)
# and writes driver.txt (driver version, GPU, then one line a program: its exit status and trace lines) and each
# program's output (*.out). Each program runs under `timeout $TRACE_TIMEOUT` (120 s; exit 124 = timed out).
# Should the CuPy smoke fail under the tracer (the first tracer's killed it, exit 139), fallbacks follow, with
# CUPY_FALLBACK=auto (the default; =always runs them anyway, =never not at all):
#   cupy-nocub.log  the smoke with CUB and cuTENSOR off (CUPY_ACCELERATORS=""), every table traced
#   cupy-lookups.log  the smoke as CuPy defaults, lookups only, no table patched (IRONACCEL_EXPORT_TRACE_WRAP=none)
# and torch-lookups.log, nvcc-lookups.log the same way should the PyTorch or the nvcc-built smoke fail.
# Then runs the same programs on the fake libcuda (ironaccel.fakes.child_env(), IRONACCEL_FAKE_LOG):
# fake-<name>.out and fake-<name>.log, CuPy with its default accelerators, as on the real driver.
#
# Run from the repository root:
#   OUT=/some/dir sh fakes/cuda/tools/trace_h200.sh
#   OUT=/some/dir RUNTIME_SMOKE=build/trace/runtime_smoke sh fakes/cuda/tools/trace_h200.sh
# $RUNTIME_SMOKE: runtime_smoke.cu built elsewhere, for a machine without nvcc, as tests/fakes build it:
#   nvcc -gencode arch=compute_90,code=compute_90 -gencode arch=compute_90,code=sm_90 \
#        -o build/trace/runtime_smoke fakes/cuda/tools/runtime_smoke.cu
# (nvcc links the CUDA runtime statically by default: the binary needs only libc, libm, libstdc++ and
# libgcc_s, glibc 2.34 or newer, and finds libcuda.so.1 by dlopen; `ldd` it to check. build/ is ignored by git,
# so carry it to the machine.)
set -u
: "${OUT:?set OUT to the output directory}"
mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
limit=${TRACE_TIMEOUT:-120}
fallback=${CUPY_FALLBACK:-auto}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -std=gnu11 -O2 -fPIC -shared -o "$work/export_trace.so" "$here/export_trace.c" -ldl -lpthread || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/driver.txt" 2>&1
python3 -c 'import ctypes; v = ctypes.c_int(); ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v)); print("cuDriverGetVersion", v.value)' >> "$OUT/driver.txt" 2>&1

status=0 # the exit status of the last traced() or on_fake()
traced() { # name, [VAR=value,...], command...: the command under the tracer, its trace in $OUT/<name>.log
    name=$1; vars=$2; shift 2
    rm -f "$OUT/$name.log"
    : > "$OUT/$name.log"
    env IRONACCEL_EXPORT_TRACE="$OUT/$name.log" LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD:}$work/export_trace.so" \
        $(echo "$vars" | tr ',' ' ') timeout "$limit" "$@" > "$OUT/$name.out" 2>&1
    status=$?
    echo "$name: exit $status ($(wc -l < "$OUT/$name.log") trace lines)${vars:+ with $vars}" | tee -a "$OUT/driver.txt"
}

if python3 -c 'import cupy' 2>/dev/null; then
    traced cupy "" python3 "$here/cupy_smoke.py"
    if [ "$fallback" = always ] || { [ "$fallback" = auto ] && [ "$status" -ne 0 ]; }; then
        traced cupy-nocub "CUPY_ACCELERATORS=" python3 "$here/cupy_smoke.py"
        traced cupy-lookups "IRONACCEL_EXPORT_TRACE_WRAP=none" python3 "$here/cupy_smoke.py"
    fi
else echo "cupy: not installed" | tee -a "$OUT/driver.txt"; fi
lookups_if_failed() { # name, [VAR=value,...], command...: again with no table patched, should the traced run fail
    name=$1; vars=$2; shift 2
    if [ "$fallback" = always ] || { [ "$fallback" = auto ] && [ "$status" -ne 0 ]; }; then
        traced "$name-lookups" "IRONACCEL_EXPORT_TRACE_WRAP=none${vars:+,$vars}" "$@"
    fi
}
torch_vars="PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}"
if python3 -c 'import torch' 2>/dev/null; then
    traced torch "$torch_vars" python3 -m ironaccel.cts.torch_smoke
    lookups_if_failed torch "$torch_vars" python3 -m ironaccel.cts.torch_smoke
else echo "torch: not installed" | tee -a "$OUT/driver.txt"; fi
smoke=
if [ -n "${RUNTIME_SMOKE:-}" ]; then
    if [ -x "$RUNTIME_SMOKE" ]; then smoke=$RUNTIME_SMOKE; echo "nvcc: the prebuilt $RUNTIME_SMOKE" | tee -a "$OUT/driver.txt"
    else echo "nvcc: RUNTIME_SMOKE=$RUNTIME_SMOKE is no executable" | tee -a "$OUT/driver.txt"; fi
else
    nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
    if [ -n "$nvcc" ] && "$nvcc" -gencode arch=compute_90,code=compute_90 -gencode arch=compute_90,code=sm_90 \
            -o "$work/runtime_smoke" "$here/runtime_smoke.cu" > "$OUT/nvcc-build.out" 2>&1; then
        smoke=$work/runtime_smoke
    else echo "nvcc: not found or the build failed (nvcc-build.out); RUNTIME_SMOKE names a prebuilt one" | tee -a "$OUT/driver.txt"; fi
fi
if [ -n "$smoke" ]; then traced nvcc "" "$smoke"; lookups_if_failed nvcc "" "$smoke"; fi

on_fake() { # name, VAR=value,..., command... (the fake as libcuda.so.1, the toolchain shims preloaded)
    name=$1; shift
    rm -f "$OUT/fake-$name.log"
    PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" IRONACCEL_FAKE_LOG="$OUT/fake-$name.log" timeout "$limit" python3 -c '
import os, subprocess, sys
from ironaccel import fakes
env = fakes.child_env()
env.update(x.split("=", 1) for x in sys.argv[1].split(",") if x)
sys.exit(subprocess.run(sys.argv[2:], env=env).returncode)' "$@" > "$OUT/fake-$name.out" 2>&1
    status=$?
    echo "fake $name: exit $status" | tee -a "$OUT/driver.txt"
}
# CuPy on the fake compiles into a kernel cache of its own: the traced run before it filled the default one with
# the real driver's machine code, which the fake refuses (CUDA_ERROR_NO_BINARY_FOR_GPU, the 2026-12-04 run).
if python3 -c 'import cupy' 2>/dev/null; then on_fake cupy "CUPY_CACHE_DIR=$work/cupy-fake-cache" python3 "$here/cupy_smoke.py"; fi
if python3 -c 'import torch' 2>/dev/null; then on_fake torch USE_PYTORCH_KERNEL_CACHE=0 python3 -m ironaccel.cts.torch_smoke; fi
if [ -n "$smoke" ]; then on_fake nvcc "" "$smoke"; fi
exit 0
