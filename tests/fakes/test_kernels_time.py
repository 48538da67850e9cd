"""Kernels and time: the watchdog (wall clock and instruction budget) that ends a runaway kernel, an empty grid
that finishes at once, and __nanosleep."""

import time

import numpy as np

from kernelsrc import lcg


SPIN = r'''
extern "C" __global__ void spin(const volatile unsigned* flag, unsigned* out)
{ while (flag[0] == 0) {} out[blockIdx.x * blockDim.x + threadIdx.x] = 1; }'''


def test_watchdog_ends_an_endless_kernel_with_a_sticky_timeout(cuda, monkeypatch):
    monkeypatch.setenv("IRONACCEL_FAKE_WATCHDOG_S", "0.3")
    d = cuda.d
    f = cuda.kernel(SPIN, "spin")
    flag, out = cuda.upload(np.zeros(1, np.uint32)), cuda.alloc(4 * 64)
    ptrs, boxes = cuda.args(flag, out)
    t0 = time.monotonic()
    cuda.ok(d.cuLaunchKernel(f, 4, 1, 1, 16, 1, 1, 0, 0, ptrs.ctypes.data, 0))  # blocks on every worker
    assert cuda.err(d.cuCtxSynchronize()) == d.CUresult.CUDA_ERROR_LAUNCH_TIMEOUT
    assert 0.3 <= time.monotonic() - t0 < 30
    report = cuda.control.last_report()
    assert report.startswith("watchdog: kernel spin ran longer than 0.3 s (IRONACCEL_FAKE_WATCHDOG_S); stopped in "
                             "block ("), report
    assert ", thread (" in report and "PTX line" in report
    assert cuda.err(d.cuMemAlloc(16)) == d.CUresult.CUDA_ERROR_LAUNCH_TIMEOUT  # sticky, as on hardware


def test_a_kernel_that_returns_at_once_runs_no_block(cuda, monkeypatch):
    """5.7e9 threads of an empty kernel (numba's test_issue_9229, whose compiler proves its body dead) finish at once,
    as on the H200; block by block they took minutes, past the watchdog."""
    monkeypatch.setenv("IRONACCEL_FAKE_WATCHDOG_S", "5")
    d = cuda.d
    f = cuda.kernel('extern "C" __global__ void nothing(unsigned* out) {}', "nothing")
    out = cuda.alloc(4)
    ptrs, boxes = cuda.args(out)
    cuda.ok(d.cuLaunchKernel(f, 22121216, 1, 1, 256, 1, 1, 0, 0, ptrs.ctypes.data, 0))
    cuda.ok(d.cuCtxSynchronize())


def test_watchdog_instruction_budget(cuda, conf, monkeypatch):
    monkeypatch.setenv("IRONACCEL_FAKE_WATCHDOG_INSTRUCTIONS", "200000")
    d = cuda.d
    n, iters = 64, 100  # about 64 x 600 instructions: within the budget, and the values are right
    p = cuda.poisoned(np.zeros(n, np.uint32))
    cuda.launch(conf("busy"), (1,), (n,), p, np.uint32(iters), np.uint32(n))
    assert np.array_equal(cuda.download(p, np.zeros(n, np.uint32)), lcg(n, iters))
    ptrs, boxes = cuda.args(p, np.uint32(1 << 30), np.uint32(n))
    cuda.ok(d.cuLaunchKernel(conf("busy"), 1, 1, 1, n, 1, 1, 0, 0, ptrs.ctypes.data, 0))
    assert cuda.err(d.cuCtxSynchronize()) == d.CUresult.CUDA_ERROR_LAUNCH_TIMEOUT
    report = cuda.control.last_report()
    assert report.startswith("watchdog: kernel busy ran more than 200000 thread-instructions "
                             "(IRONACCEL_FAKE_WATCHDOG_INSTRUCTIONS)"), report


def test_watchdog_bad_setting_leaves_it_off(cuda, conf, monkeypatch):
    monkeypatch.setenv("IRONACCEL_FAKE_WATCHDOG_S", "soon")
    p = cuda.poisoned(np.zeros(32, np.uint32))
    cuda.launch(conf("busy"), (1,), (32,), p, np.uint32(2000), np.uint32(32))
    assert np.array_equal(cuda.download(p, np.zeros(32, np.uint32)), lcg(32, 2000))


def test_nanosleep_sleeps(cuda):
    f = cuda.kernel(r"""
    extern "C" __global__ void naps(unsigned* out, unsigned n)
    { for (unsigned k = 0; k < n; k++) __nanosleep(1000000); out[threadIdx.x] = n; }""", "naps")
    out = cuda.poisoned(np.zeros(1, np.uint32))
    t0 = time.monotonic()
    cuda.launch(f, (1,), (1,), out, np.uint32(20))
    assert time.monotonic() - t0 >= 0.019  # 20 x 1 ms (the most one nanosleep may take)
    assert cuda.download(out, np.zeros(1, np.uint32))[0] == 20
