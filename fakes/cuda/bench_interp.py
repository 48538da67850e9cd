"""Benchmark (not a test): interpreter throughput and driver-call overhead of the fake libcuda.

Run: IRONACCEL_FAKE_CUDA_THREADS=1 python fakes/cuda/bench_interp.py   (one core for the interpreter)
"""

import ctypes
import os
import time

os.environ.setdefault("IRONACCEL_FAKE_CUDA_THREADS", "1")

import numpy as np  # noqa: E402

from ironaccel import fakes  # noqa: E402

LIB = fakes.load()
from cuda.bindings import driver as d, nvrtc  # noqa: E402

SRC = r'''
extern "C" __global__ void saxpy(const float* x, float* y, float a, unsigned n)
{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }
extern "C" __global__ void reduce_sum(const float* x, float* partial, unsigned n)
{ extern __shared__ float s[]; unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f; __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) { if (t < k) s[t] += s[t + k]; __syncthreads(); }
  if (t == 0) partial[blockIdx.x] = s[0]; }
'''


REPEATS = 5


def executed_instructions():
    """The fake's exact count of thread-instructions run so far (None from a fake without the counter)."""
    counter = getattr(LIB, "ironaccel_fake_executed_instructions", None)
    if counter is None:
        return None
    counter.restype = ctypes.c_uint64
    return counter()


def ok(r):
    """Unwraps cuda.bindings' (CUresult, value...) tuple, asserting success."""
    if not isinstance(r, tuple):
        r = (r,)
    assert r[0] == 0, r
    return r[1] if len(r) == 2 else None


def ptx():
    _, prog = nvrtc.nvrtcCreateProgram(SRC.encode(), b"b.cu", 0, [], [])
    opts = [b"--gpu-architecture=compute_90"]
    assert nvrtc.nvrtcCompileProgram(prog, 1, opts)[0] == 0
    _, n = nvrtc.nvrtcGetPTXSize(prog)
    buf = b" " * n
    nvrtc.nvrtcGetPTX(prog, buf)
    return buf


def instructions_per_thread(text: bytes, name: str) -> int:
    """Static count of the kernel's instructions: a rough per-thread figure for straight-line kernels."""
    body = text.decode().split(f".entry {name}(")[1].split("\n}\n")[0]
    return sum(1 for line in body.splitlines() if line.startswith("\t") and line.strip().endswith(";")
               and not line.strip().startswith("."))


def main():
    ok(d.cuInit(0))
    ctx = ok(d.cuCtxCreate(None, 0, 0))
    text = ptx()
    mod = ok(d.cuModuleLoadData(text))
    n = 1 << 20
    x = np.random.rand(n).astype(np.float32)
    dx, dy, dp = ok(d.cuMemAlloc(4 * n)), ok(d.cuMemAlloc(4 * n)), ok(d.cuMemAlloc(4 * n))
    d.cuMemcpyHtoD(dx, x, 4 * n)
    d.cuMemcpyHtoD(dy, x, 4 * n)
    for name, values, shared, per_thread in (
        ("saxpy", [int(dx), int(dy), np.float32(2), np.uint32(n)], 0, instructions_per_thread(text, "saxpy")),
        ("reduce_sum", [int(dx), int(dp), np.uint32(n)], 256 * 4, None),
    ):
        f = ok(d.cuModuleGetFunction(mod, name.encode()))
        boxes = [np.array([v], dtype=np.uint64) if isinstance(v, int) else np.array([v]) for v in values]
        ptrs = np.array([b.ctypes.data for b in boxes], dtype=np.uint64)
        times, cpu_times, executed = [], [], None
        for _ in range(REPEATS):  # the best of several: this machine's cores are shared
            before = executed_instructions()
            t0, c0 = time.perf_counter(), time.process_time()
            ok(d.cuLaunchKernel(f, n // 256, 1, 1, 256, 1, 1, shared, 0, ptrs.ctypes.data, 0))
            ok(d.cuCtxSynchronize())
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
            executed = executed_instructions() - before if before is not None else None
        dt, cpu = min(times), min(cpu_times)
        if per_thread is None:  # 8 tree steps of ~7 instructions plus ~20 around them
            per_thread = 20 + 8 * 7
        exact = f"; exactly {executed / n:.1f} per thread executed" if executed else ""
        print(f"{name}: {n} threads x ~{per_thread} instructions in {dt:.3f} s (best of {REPEATS}) = "
              f"{n * per_thread / dt / 1e6:.0f} M thread-instructions/s, {n * per_thread / cpu / 1e6:.0f} M per "
              f"CPU-second{exact} ({os.environ['IRONACCEL_FAKE_CUDA_THREADS']} interpreter thread(s))")
    for label, call in (("cuDriverGetVersion", d.cuDriverGetVersion),
                        ("cuCtxGetCurrent", d.cuCtxGetCurrent),
                        ("cuDeviceGetAttribute", lambda: d.cuDeviceGetAttribute(
                            d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0))):
        reps = 200000
        t0 = time.perf_counter()
        for _ in range(reps):
            call()
        print(f"{label} through cuda.bindings into the fake: {(time.perf_counter() - t0) / reps * 1e9:.0f} ns/call")


if __name__ == "__main__":
    main()
