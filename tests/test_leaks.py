"""Issue 31 finding 5: objects created and dropped by the thousand leave memory and threads flat, per backend.

Each simulated target runs ``CHURN`` in a child process (its driver selected there, as certify does): streams that
each did a small ``copy_htod`` (the CUDA staging ring once kept every one, and on the fake one thread each),
events, buffers dropped without ``free()`` after a fill (never reclaimed on Vulkan and OpenGL), and modules
compiled, launched once and dropped unclosed (never released anywhere). After a warm-up, the process's resident
memory may grow by at most ``RSS_BOUND`` and its thread count by at most ``THREAD_BOUND``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ironaccel.cts import targets

ROOT = Path(__file__).resolve().parent.parent
RSS_BOUND = 96 << 20
THREAD_BOUND = 2
#: (streams, events and buffers; modules) per target: 10,000, but fewer modules where one compile takes long on
#: the CPU driver (PoCL's LLVM ~0.3 s, wgpu's ~30 ms) or where the driver keeps some of each one by design: the
#: fake libcuda keeps every unloaded module's decoded PTX (~10 KiB, fakes/cuda/module.c: so that a stale handle
#: is recognised), 100 MiB per 10,000. (The fake's modules are PTX: NVRTC would take ~40 ms each.)
COUNTS = {"cuda/fake": (10_000, 2_000), "vulkan/lavapipe": (10_000, 10_000), "webgpu/lavapipe": (10_000, 2_000),
          "opengl/llvmpipe": (10_000, 2_000), "opencl/pocl": (10_000, 200)}
#: how each target runs: the CUDA backend both through its compiled hot path and without it
RUNS = [pytest.param("cuda/fake", {}, id="cuda/fake-compiled"),
        pytest.param("cuda/fake", {"IRONACCEL_PURE_PYTHON": "1"}, id="cuda/fake-pure-python"),
        *[pytest.param(name, {}, id=name) for name in sorted(COUNTS) if name != "cuda/fake"]]

CHURN = r'''
import gc, json, os, sys
import numpy as np
from ironaccel.cts import targets
target = targets.get(sys.argv[1])
count, modules = int(sys.argv[2]), int(sys.argv[3])
from ironaccel.backends import get
dev = next(d for d in (get(target.backend).open_device(i) for i in range(get(target.backend).device_count()))
           if target.matches(d.info))
fill = target.compile_kernel(dev, "fill_u32")
lang, source = fill.module.lang, None
if lang == "cuda":  # compile PTX repeatedly: NVRTC is the slow part, and unchanged
    from ironaccel.backends.cuda import nvrtc
    source, lang = nvrtc.compile_source(target.kernels[0].source("fill_u32"), (), dev._arch, want_cubin=False)[0], "ptx"
stream = dev.create_stream()
host = np.arange(64, dtype=np.uint32)

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def module():
    if source is not None:
        return dev.compile(source, lang).kernel("fill_u32")
    return target.compile_kernel(dev, "fill_u32")

def churn(n, m):
    for i in range(n):
        s = dev.create_stream()
        s.copy_htod(buf, host)
        e = s.record()
        b = dev.alloc(64 << 10)  # 640 MiB per 10,000 if dropped buffers were kept
        s.fill(b, i & 0xFF)
        del s, e, b
        if i % 500 == 499:
            dev.synchronize(); gc.collect()
    for i in range(m):
        k = module()
        stream.launch(k, 1, 64, (buf, np.uint32(i), np.uint32(64)))
        del k
        if i % 100 == 99:
            dev.synchronize(); gc.collect()
    dev.synchronize(); gc.collect(); dev.synchronize()

buf = dev.alloc(256)
churn(count // 10, modules // 10)
before = (rss(), len(os.listdir("/proc/self/task")))
churn(count, modules)
after = (rss(), len(os.listdir("/proc/self/task")))
print(json.dumps({"rss": [before[0], after[0]], "threads": [before[1], after[1]]}))
dev.close()
'''


@pytest.mark.parametrize("name, extra_env", RUNS)
def test_churn_leaves_memory_and_threads_flat(name, extra_env):
    target = targets.get(name)
    why = target.missing()
    if why is not None:
        pytest.skip(f"{name} cannot run here: {why}")
    count, modules = COUNTS[name]
    env = {**os.environ, **target.environment(), **extra_env, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), str(ROOT / "plugins" / "ironaccel-opencl"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", CHURN, name, str(count), str(modules)], env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    (rss0, rss1), (threads0, threads1) = seen["rss"], seen["threads"]
    assert rss1 - rss0 < RSS_BOUND, f"{name}: {count} streams/events/buffers and {modules} modules grew the " \
                                    f"process by {(rss1 - rss0) >> 20} MiB"
    assert threads1 - threads0 <= THREAD_BOUND, f"{name}: threads went from {threads0} to {threads1}"
