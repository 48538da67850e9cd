"""Per-call host cost of ironaccel's CUDA hot paths on the H200, before and after importing the peers."""
import sys, time, gc
import numpy as np
import ironaccel as ia
from ironaccel.pool import MemPool
import ironaccel.native as native

def t(name, f, n=5000, r=31):
    xs = []
    for _ in range(r):
        t0 = time.perf_counter_ns()
        for _ in range(n): f()
        xs.append((time.perf_counter_ns() - t0) / n)
    xs.sort(); print(f"  {name:44s} median {xs[r//2]:8.0f} ns  min {xs[0]:8.0f}", flush=True)

dev = ia.open_device("cuda")
s = dev.create_stream()
pool = MemPool(dev, s)
k = dev.compile("extern \"C\" __global__ void empty() {}", "cuda").kernel("empty")
print("compiled:", native.load() is not None, "gc thresholds", gc.get_threshold(), "tracked", len(gc.get_objects()))
def run(label):
    print(label)
    t("lambda: None", lambda: None)
    pa = pool.alloc; t("MemPool alloc+free 1 KiB", lambda: pa(1024).free())
    al = dev.alloc; t("Device alloc+free 1 KiB", lambda: al(1024).free(), n=2000)
    t("Stream.synchronize idle", s.synchronize)
    rec = s.record; t("record+synchronize", lambda: rec().synchronize(), n=2000)
    t("record only (event dropped)", lambda: rec(), n=2000); s.synchronize()
    la = s.launch; t("launch empty", lambda: la(k, 1, 1), n=2000); s.synchronize()
    gc.disable(); t("MemPool alloc+free, gc disabled", lambda: pa(1024).free()); gc.enable()
run("ironaccel alone")
import cupy, torch  # noqa
print("peers imported; tracked", len(gc.get_objects()))
run("after importing CuPy and PyTorch")
