#!/bin/sh
# Traces of the export tables on a real driver (the H200), the spec fakes/cuda/export_tables.c follows:
# builds export_trace.so, then runs under it, each into its own trace in $OUT:
#   cupy.log   CuPy start-up and tools/cupy_smoke.py (if CuPy is installed; CUB/Thrust on, as CuPy defaults)
#   torch.log  the PyTorch smoke, python3 -m ironaccel.cts.torch_smoke (if PyTorch is installed)
#   nvcc.log   tools/runtime_smoke.cu built by nvcc (if nvcc is on PATH or in /usr/local/cuda/bin)
# and writes driver.txt (driver version, GPU) and each program's output (*.out). Then runs the same programs on
# the fake libcuda (ironaccel.fakes.child_env(), IRONACCEL_FAKE_LOG): fake-<name>.out and fake-<name>.log, CuPy
# with its default accelerators, as on the real driver. Run from the repository root:
#   OUT=/some/dir sh fakes/cuda/tools/trace_h200.sh
set -u
: "${OUT:?set OUT to the output directory}"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
cc -std=gnu11 -O2 -fPIC -shared -o "$work/export_trace.so" "$here/export_trace.c" -ldl -lpthread || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/driver.txt" 2>&1
python3 -c 'import ctypes; v = ctypes.c_int(); ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v)); print("cuDriverGetVersion", v.value)' >> "$OUT/driver.txt" 2>&1

traced() { # name, command...
    name=$1; shift
    rm -f "$OUT/$name.log"
    IRONACCEL_EXPORT_TRACE="$OUT/$name.log" LD_PRELOAD="$work/export_trace.so" "$@" > "$OUT/$name.out" 2>&1
    echo "$name: exit $? ($(wc -l < "$OUT/$name.log" 2>/dev/null || echo 0) trace lines)" | tee -a "$OUT/driver.txt"
}

if python3 -c 'import cupy' 2>/dev/null; then traced cupy python3 "$here/cupy_smoke.py"
else echo "cupy: not installed" | tee -a "$OUT/driver.txt"; fi
if python3 -c 'import torch' 2>/dev/null; then traced torch env PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" python3 -m ironaccel.cts.torch_smoke
else echo "torch: not installed" | tee -a "$OUT/driver.txt"; fi
nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
if [ -n "$nvcc" ] && "$nvcc" -gencode arch=compute_90,code=compute_90 -gencode arch=compute_90,code=sm_90 \
        -o "$work/runtime_smoke" "$here/runtime_smoke.cu" > "$OUT/nvcc-build.out" 2>&1; then
    traced nvcc "$work/runtime_smoke"
else echo "nvcc: not found or the build failed (nvcc-build.out)" | tee -a "$OUT/driver.txt"; fi

on_fake() { # name, command... (the fake as libcuda.so.1, the toolchain shims preloaded)
    name=$1; shift
    rm -f "$OUT/fake-$name.log"
    PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" IRONACCEL_FAKE_LOG="$OUT/fake-$name.log" python3 -c '
import os, subprocess, sys
from ironaccel import fakes
env = fakes.child_env()
env.update(x.split("=", 1) for x in sys.argv[1].split(",") if x)
sys.exit(subprocess.run(sys.argv[2:], env=env).returncode)' "$@" > "$OUT/fake-$name.out" 2>&1
    echo "fake $name: exit $?" | tee -a "$OUT/driver.txt"
}
if python3 -c 'import cupy' 2>/dev/null; then on_fake cupy "" python3 "$here/cupy_smoke.py"; fi
if python3 -c 'import torch' 2>/dev/null; then on_fake torch USE_PYTORCH_KERNEL_CACHE=0 python3 -m ironaccel.cts.torch_smoke; fi
if [ -x "$work/runtime_smoke" ]; then on_fake nvcc "" "$work/runtime_smoke"; fi
rm -rf "$work"
