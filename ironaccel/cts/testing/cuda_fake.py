"""The CUDA backend on the fake libcuda, for the unit tests (tests/test_cuda_*.py): loading the fake with its
fault-injection controls, a device whose leaks are checked, the small PTX kernels the tests launch, and a child
process on the fake. Kept here so the test modules share it without importing each other."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ironaccel as ia

CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NOT_READY = 600
#: the query each blocking wait asks first (native.wait_for): when it says done, the wait is skipped
QUERY_BEFORE = {"cuStreamSynchronize": "cuStreamQuery", "cuEventSynchronize": "cuEventQuery"}


def fail_next_wait(fake, wait: str) -> None:
    """Make the next blocking ``wait`` fail with CUDA_ERROR_INVALID_VALUE: its query first says not ready, so
    the wait is made even on an idle stream."""
    fake.ironaccel_fake_inject(QUERY_BEFORE[wait].encode(), 1, CUDA_ERROR_NOT_READY)
    fake.ironaccel_fake_inject(wait.encode(), 1, CUDA_ERROR_INVALID_VALUE)


def load_fake() -> Any:
    """The loaded fake libcuda (ctypes), with the backend initialized on it (once per process)."""
    from ironaccel.backends.cuda import native

    with pytest.MonkeyPatch.context() as env:
        env.setenv("IRONACCEL_CUDA_DRIVER", "fake")
        try:
            native.load()
        except ia.NotAvailable as exc:
            pytest.skip(f"the fake libcuda is not available: {exc}")
    lib = native.fake
    if lib is None:
        pytest.skip("the CUDA backend was initialized on a real driver earlier in this process")
    lib.ironaccel_fake_inject.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_int]
    lib.ironaccel_fake_live_allocations.restype = ctypes.c_uint64
    lib.ironaccel_fake_call_count.restype = ctypes.c_int64
    return lib


def open_device(fake: Any) -> Iterator[Any]:
    """A device on the loaded fake; on teardown the fake's injected failures are cleared and the device closed."""
    from ironaccel.backends.cuda import CudaBackend

    baseline = fake.ironaccel_fake_live_allocations()
    dev = CudaBackend().open_device(0)
    dev.live_allocations_before_open = baseline
    yield dev
    fake.ironaccel_fake_reset()
    dev.close()


PTX_STORE = """.version 8.0
.target sm_90
.address_size 64
.visible .entry store(.param .u64 out, .param .u32 value)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [value];
    cvta.to.global.u64 %rd2, %rd1;
    st.global.u32 [%rd2], %r1;
    ret;
}
"""


def assert_device_works(device: Any) -> None:
    s = device.create_stream()
    with device.alloc(4096) as buf:
        data = np.arange(4096, dtype=np.uint8)
        s.copy_htod(buf, data)
        s.fill(buf, 9, offset=100, nbytes=10)
        out = np.empty(4096, np.uint8)
        s.copy_dtoh(out, buf)
        s.synchronize()
    data[100:110] = 9
    np.testing.assert_array_equal(out, data)


PTX_SAXPY = """.version 8.0
.target sm_90
.address_size 64
.visible .entry saxpy(.param .u64 y, .param .u64 x, .param .f32 a, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<5>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [y];
    ld.param.u64 %rd2, [x];
    ld.param.f32 %f1, [a];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd4, %rd5;
    ld.global.f32 %f2, [%rd6];
    add.s64 %rd7, %rd3, %rd5;
    ld.global.f32 %f3, [%rd7];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    st.global.f32 [%rd7], %f4;
DONE:
    ret;
}
"""


def assert_saxpy_works(backend: Any) -> None:
    """A fresh device computes y = 2x + y correctly."""
    with backend.open_device(0) as dev:
        assert_saxpy_works_on(dev)


def assert_saxpy_works_on(dev: Any) -> None:
    """``dev`` computes y = 2x + y correctly, directly and replayed from a captured graph."""
    s = dev.create_stream()
    n = 1000
    x, y = np.arange(n, dtype=np.float32), np.full(n, 3, np.float32)
    with dev.alloc(4 * n) as bx, dev.alloc(4 * n) as by:
        s.copy_htod(bx, x)
        s.copy_htod(by, y)
        kernel = dev.compile(PTX_SAXPY, "ptx").kernel("saxpy")
        s.launch(kernel, 4, 256, (by, bx, np.float32(2), np.uint32(n)))
        with s.capture() as graph:
            s.launch(kernel, 4, 256, (by, bx, np.float32(2), np.uint32(n)))
        graph.launch(s)
        graph.close()
        out = np.empty(n, np.float32)
        s.copy_dtoh(out, by)
        s.synchronize()
    np.testing.assert_array_equal(out, 4 * x + y)


PTX_PARAMS = """.version 8.0
.target sm_90
.address_size 64
.visible .entry kinds(.param .u64 data, .param .u64 .ptr .global .align 4 out, .param .f32 a, .param .f64 b,
    .param .u32 n, .param .s32 m, .param .b16 h, .param .s64 big, .param .align 8 .b8 pair[16])
{
    ret;
}
"""


PTX_SPIN = """.version 8.0
.target sm_90
.address_size 64
.visible .entry spin(.param .u64 out, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, 0;
LOOP:
    add.u32 %r2, %r2, 1;
    setp.lt.u32 %p1, %r2, %r1;
    @%p1 bra LOOP;
    cvta.to.global.u64 %rd2, %rd1;
    st.global.u32 [%rd2], %r2;
    ret;
}
"""
SPIN_ITERATIONS = 50_000_000  # about a second in the fake's interpreter here; the waits below time out at 50 ms


def run_script(tmp_path: Any, source: str, tree: Any = None, **env_extra: str) -> Any:
    """Run ``source`` in a child on the fake, importing ironaccel from ``tree`` (default: this checkout)."""
    from ironaccel import fakes

    script = tmp_path / "script.py"
    script.write_text(source)
    try:
        env = fakes.child_env()
    except ia.NotAvailable as exc:
        pytest.skip(f"the fake libcuda cannot be built: {exc}")
    env.update(env_extra, PYTHONPATH=str(tree or Path(ia.__file__).resolve().parents[1]))
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)


PTX_STORE64 = """.version 8.0
.target sm_90
.address_size 64
.visible .entry store64(.param .u64 out, .param .u64 value)
{
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [value];
    cvta.to.global.u64 %rd3, %rd1;
    st.global.u64 [%rd3], %rd2;
    ret;
}
"""


PTX_DIMS = """.version 8.0
.target sm_90
.address_size 64
.visible .entry dims(.param .u64 out, .param .u32 tag)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r7, [tag];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %nctaid.x;
    mov.u32 %r2, %nctaid.y;
    mov.u32 %r3, %nctaid.z;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %ntid.y;
    mov.u32 %r6, %ntid.z;
    st.global.u32 [%rd2], %r1;
    st.global.u32 [%rd2+4], %r2;
    st.global.u32 [%rd2+8], %r3;
    st.global.u32 [%rd2+12], %r4;
    st.global.u32 [%rd2+16], %r5;
    st.global.u32 [%rd2+20], %r6;
    st.global.u32 [%rd2+24], %r7;
    ret;
}
"""
