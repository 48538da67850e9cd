"""Fixtures that drive the fake libcuda in this process through cuda.bindings + NVRTC.

The fake is loaded once per process (it cannot be unloaded); each test gets its own context, destroyed
afterwards, so a sticky launch error or a leak stays inside one test. Under pytest-xdist every worker is
its own process and loads its own copy.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

from ironaccel import fakes
from kernelsrc import CONFORMANCE


def _real_driver_already_loaded() -> bool:
    try:
        lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD)
    except OSError:
        return False
    return not hasattr(lib, "ironaccel_fake_identity")


@pytest.fixture(scope="session")
def fake():
    if _real_driver_already_loaded():
        pytest.skip("a real libcuda.so.1 is already loaded in this process; run tests/fakes on their own")
    pytest.importorskip("cuda.bindings")
    control = fakes.Control(fakes.load())
    from cuda.bindings import driver

    assert driver.cuInit(0)[0] == driver.CUresult.CUDA_SUCCESS
    return control


class Cuda:
    """A context on the fake plus helpers to compile, allocate, copy and launch."""

    def __init__(self, control: fakes.Control):
        from cuda.bindings import driver, nvrtc

        self.d, self.nvrtc, self.control = driver, nvrtc, control
        self.ctx = self.ok(driver.cuCtxCreate(None, 0, 0)) if _ctx_create_v4() else self.ok(
            driver.cuCtxCreate(0, 0))
        self.allocs: list[int] = []

    def ok(self, result):
        err, *rest = result if isinstance(result, tuple) else (result,)
        assert err == self.d.CUresult.CUDA_SUCCESS, f"{err!r}: {self.control.last_report()}"
        return rest[0] if len(rest) == 1 else tuple(rest) if rest else None

    def err(self, result):
        return result[0] if isinstance(result, tuple) else result

    def ptx(self, source: str) -> bytes:
        n = self.nvrtc
        err, prog = n.nvrtcCreateProgram(source.encode(), b"test.cu", 0, [], [])
        opts = [b"--gpu-architecture=compute_90"]
        err, = n.nvrtcCompileProgram(prog, len(opts), opts)
        if err != n.nvrtcResult.NVRTC_SUCCESS:
            _, size = n.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            n.nvrtcGetProgramLog(prog, log)
            raise AssertionError(log.decode())
        _, size = n.nvrtcGetPTXSize(prog)
        buf = b" " * size
        n.nvrtcGetPTX(prog, buf)
        return buf

    def module(self, source: str):
        return self.ok(self.d.cuModuleLoadData(self.ptx(source)))

    def kernel(self, source: str, name: str):
        return self.ok(self.d.cuModuleGetFunction(self.module(source), name.encode()))

    def alloc(self, nbytes: int) -> int:
        p = int(self.ok(self.d.cuMemAlloc(nbytes)))
        self.allocs.append(p)
        return p

    def upload(self, array: np.ndarray) -> int:
        p = self.alloc(array.nbytes)
        self.ok(self.d.cuMemcpyHtoD(p, array, array.nbytes))
        return p

    def poisoned(self, like: np.ndarray) -> int:
        """A device buffer the size of ``like`` filled with 0xA5 bytes (never all-zeros)."""
        p = self.alloc(like.nbytes)
        self.ok(self.d.cuMemsetD8(p, 0xA5, like.nbytes))
        return p

    def download(self, ptr: int, like: np.ndarray) -> np.ndarray:
        out = np.empty_like(like)
        self.ok(self.d.cuMemcpyDtoH(out, ptr, out.nbytes))
        return out

    @staticmethod
    def args(*values):
        """kernelParams for cuLaunchKernel: ints are device pointers, numpy scalars go by value."""
        boxes = [np.array([v], dtype=np.uint64) if isinstance(v, int) else np.array([v]) for v in values]
        ptrs = np.array([b.ctypes.data for b in boxes], dtype=np.uint64)
        return ptrs, boxes

    def launch(self, f, grid, block, *values, shared=0, stream=0, sync=True):
        ptrs, boxes = self.args(*values)
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        self.ok(self.d.cuLaunchKernel(f, *grid, *block, shared, stream, ptrs.ctypes.data, 0))
        if sync:
            self.ok(self.d.cuCtxSynchronize())
        return boxes

    def close(self):
        d = self.d
        for p in self.allocs:
            d.cuMemFree(p)
        d.cuCtxDestroy(self.ctx)


def _ctx_create_v4() -> bool:
    from cuda.bindings import driver

    return driver.cuCtxCreate.__doc__ is not None and "ctxCreateParams" in driver.cuCtxCreate.__doc__


@pytest.fixture
def cuda(fake):
    c = Cuda(fake)
    yield c
    c.close()


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.fixture
def conf(cuda):
    """The CONFORMANCE module's kernels by name (the test_kernels_* modules)."""
    module = cuda.module(CONFORMANCE)
    return lambda name: cuda.ok(cuda.d.cuModuleGetFunction(module, name.encode()))


def pytest_configure(config):
    config.addinivalue_line("markers", "fuzz: the seeded fuzz of the fake's front end under ASan/UBSan (minutes)")
