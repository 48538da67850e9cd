"""cuda.core (the high-level Python API) on the fake: device, streams, NVRTC, kernels, buffers, events, graphs.

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


GRAPH_SCRIPT = r'''
from ironaccel import fakes
fakes.load()
import numpy as np
from cuda.core import Device, LaunchConfig, ObjectCode, Program, ProgramOptions, launch

SCALE = r"""extern "C" __global__ void scale(float* y, float a, unsigned n)
{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] *= a; }"""

dev = Device(0)
dev.set_current()
stream = dev.create_stream()
ptx = Program(SCALE, "c++", ProgramOptions(arch=f"sm_{dev.arch}")).compile("ptx")
kernel = ObjectCode.from_ptx(ptx.code).get_kernel("scale")
n = 256
host = np.arange(n, dtype=np.float32)
buf = dev.allocate(host.nbytes, stream=stream)
from cuda.bindings import driver as d
assert d.cuMemcpyHtoD(int(buf.handle), host, host.nbytes)[0] == 0

gb = stream.create_graph_builder().begin_building()  # stream capture underneath
config = LaunchConfig(grid=n // 64, block=64)
launch(gb, config, kernel, buf, np.float32(2.0), np.uint32(n))
launch(gb, config, kernel, buf, np.float32(3.0), np.uint32(n))
calls = []
gb.callback(lambda: calls.append(len(calls)))  # a host node, kept alive by a user object
gb.end_building()
assert d.cuMemcpyDtoH(out := np.empty_like(host), int(buf.handle), host.nbytes)[0] == 0
assert np.array_equal(out, host)  # captured, not run
graph = gb.complete()
graph.upload(stream)
graph.launch(stream)
graph.launch(stream)
stream.sync()
assert d.cuMemcpyDtoH(out, int(buf.handle), host.nbytes)[0] == 0
np.testing.assert_allclose(out, host * 36)
assert calls == [0, 1], calls
graph.close()
gb.close()

# the same through an explicit GraphDefinition: fill 2.0, copy, a child graph x3, a callback, a join
from cuda.core.graph import GraphDefinition
other = dev.allocate(host.nbytes, stream=stream)
g = GraphDefinition()
fill = g.memset(buf, np.float32(2.0).view(np.uint32), n)
copy = fill.memcpy(other, buf, host.nbytes)
child = GraphDefinition()
child.launch(config, kernel, other, np.float32(3.0), np.uint32(n))
done = copy.embed(child).callback(lambda: calls.append("definition"))
g.join(done, fill)
assert len(g.nodes()) == 5 and (fill, copy) in g.edges() and list(copy.pred) == [fill]
executable = g.instantiate()
executable.launch(stream)
stream.sync()
assert d.cuMemcpyDtoH(out, int(other.handle), host.nbytes)[0] == 0
assert np.all(out == 6.0) and calls[-1] == "definition", (out[:4], calls)
executable.close()
del g, child, fill, copy, done  # the definition holds the buffers (user objects) until it goes
for b in (buf, other):
    b.close(stream)
stream.sync()
stream.close()
print("GRAPH-OK")
'''


@pytest.mark.parametrize("script, marker", [(SCRIPT, "SAXPY-OK"), (GRAPH_SCRIPT, "GRAPH-OK")], ids=["saxpy", "graph"])
def test_cuda_core(script, marker):
    pytest.importorskip("cuda.core")
    r = subprocess.run([sys.executable, "-c", script], env={**fakes.child_env(), "IRONACCEL_FAKE_CUDA_LEAKS": "report"},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert marker in r.stdout
    assert "not implemented" not in r.stderr, r.stderr
    assert "leak report" not in r.stderr, r.stderr
