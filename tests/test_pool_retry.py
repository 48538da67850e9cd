"""MemPool after the device runs out of memory: the retry waits for the frees its trim queued (CUDA frees
in stream order), and a free that fails during a trim loses no other block."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import ironaccel as ia
from ironaccel.cts.testing.memdevice import MemBuffer, MemDevice
from ironaccel.cts import targets

RETRY_ON_THE_FAKE = r"""
import numpy as np, ironaccel as ia
dev = ia.open_device("cuda")
s = dev.create_stream()
pool = ia.MemPool(dev, s)
blocks = [pool.alloc(32 << 20) for _ in range(7)]         # 224 MiB of the fake's 256
for b in blocks:
    s.fill(b, 1)                                          # last used on the pool's busy stream
    b.free()                                              # cached, not given back
big = pool.alloc(64 << 20)                                # fits only once the cache is freed *and* reached
s.fill(big, 7); out = np.zeros(16, np.uint8); s.copy_dtoh(out, big); s.synchronize()
assert (out == 7).all()
print("retry ok", pool.stats().misses)
"""


def test_retry_after_out_of_memory_waits_for_the_trimmed_frees():
    fake = targets.get("cuda/fake")
    why = fake.missing()
    if why is not None:
        pytest.skip(f"cuda/fake cannot run here: {why}")
    env = {**os.environ, **fake.environment(), "IRONACCEL_FAKE_CUDA_MEMORY": "256M"}
    proc = subprocess.run([sys.executable, "-c", RETRY_ON_THE_FAKE], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "retry ok" in proc.stdout


def test_a_failing_free_during_trim_frees_the_other_blocks(monkeypatch):
    device = MemDevice(64 << 20)
    pool = ia.MemPool(device, device.create_stream())
    for b in [pool.alloc(1 << 20) for _ in range(4)]:
        b.free()
    real = MemBuffer._release
    calls = []

    def flaky(self):
        calls.append(self)
        if len(calls) == 1:
            raise ia.DriverError("mem", "MemDevice.free", 1, "injected")
        real(self)

    monkeypatch.setattr(MemBuffer, "_release", flaky)
    with pytest.raises(ia.DriverError, match="injected"):
        pool.trim()
    assert len(calls) == 4, "a failed free stopped the trim: the other cached blocks were dropped unfreed"
    assert device.bytes_in_use == 1 << 20  # only the block whose free failed
    assert pool.stats().bytes_cached_shared + pool.stats().bytes_cached_front == 0
    pool.close()
