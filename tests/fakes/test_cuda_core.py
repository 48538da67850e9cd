"""cuda.core (the high-level Python API) on the fake: device, streams, NVRTC, kernels, buffers, events.

It runs in a child process so that the fake is the libcuda.so.1 cuda.core finds (``fakes.load()`` first),
whatever this process has already loaded; the child's stderr must carry no "not implemented" line, so any
entry point cuda.core needs and the fake lacks fails here by name.
"""

import subprocess
import sys

import pytest

from ironaccel import fakes

SCRIPT = r'''
import ctypes
from ironaccel import fakes
fakes.load()
import numpy as np
from cuda.core import (Device, EventOptions, LaunchConfig, LegacyPinnedMemoryResource, ObjectCode, Program,
                       ProgramOptions, launch)

SAXPY = r"""extern "C" __global__ void saxpy(const float* x, float* y, float a, unsigned n)
{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }"""

dev = Device(0)
dev.set_current()
assert "simulated" in dev.name and dev.compute_capability == (9, 0), (dev.name, dev.compute_capability)
assert dev.properties.warp_size == 32
stream = dev.create_stream()
ptx = Program(SAXPY, "c++", ProgramOptions(arch=f"sm_{dev.arch}")).compile("ptx")
assert ptx.code_type == "ptx"
kernel = ObjectCode.from_ptx(ptx.code).get_kernel("saxpy")
assert kernel.num_arguments == 4
assert [info.size for info in kernel.arguments_info] == [8, 8, 4, 4]
assert kernel.attributes.max_threads_per_block == 1024

n, a = 1000, np.float32(2.5)
rng = np.random.default_rng()
x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
pinned = LegacyPinnedMemoryResource()
host = {name: pinned.allocate(x.nbytes, stream=stream) for name in ("x", "y", "out")}
view = {name: np.ctypeslib.as_array((ctypes.c_float * n).from_address(int(b.handle))) for name, b in host.items()}
view["x"][:], view["y"][:], view["out"][:] = x, y, np.nan  # poisoned output
dx, dy, dcopy = (dev.allocate(x.nbytes, stream=stream) for _ in range(3))
dx.copy_from(host["x"], stream=stream)
dy.copy_from(host["y"], stream=stream)

timing = EventOptions(timing_enabled=True)
start = stream.record(options=timing)
launch(stream, LaunchConfig(grid=(n + 127) // 128, block=128), kernel, dx, dy, a, np.uint32(n))
end = stream.record(options=timing)
other = dev.create_stream()
other.wait(end)  # the device-to-device copy on another stream must see the kernel's result
dcopy.copy_from(dy, stream=other)
dcopy.copy_to(host["out"], stream=other)
other.sync()
end.sync()
assert end.is_done and end - start >= 0.0
expected = a * x + y  # NVRTC may contract to fma: compare to within one rounding
np.testing.assert_allclose(view["out"], expected, rtol=1e-6)
assert not np.isnan(view["out"]).any()

for b in (dx, dy, dcopy):
    b.close(stream)
for b in host.values():
    b.close()
stream.close()
other.close()
print("SAXPY-OK")
'''


def test_saxpy_through_cuda_core():
    pytest.importorskip("cuda.core")
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=fakes.child_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "SAXPY-OK" in r.stdout
    assert "not implemented" not in r.stderr, r.stderr
    assert "leak report" not in r.stderr, r.stderr
