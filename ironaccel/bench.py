"""``ironaccel bench``: host-side overhead of ironaccel against the raw driver calls and peer libraries.

    ironaccel bench --backend cuda/nvidia --peers --out bench/results      # on a GPU
    ironaccel bench --backend webgpu/lavapipe --peers --quick                # simulated: labelled so

Every operation is timed for ironaccel, for the raw driver calls that do the same thing (the *floor*:
cuda.bindings, the ``vulkan`` package or wgpu-py, on the same device) and, with ``--peers``, for each peer
library that can be imported (cuda.core, CuPy, PyTorch). How, so that the figures mean something:

* A warm-up first: each implementation runs until its batch size is calibrated to ``sample_ms``.
* Samples are paired: one round times one batch of every implementation, back to back, in an order that
  alternates between rounds; a ratio is taken within a round (so drift on a busy machine hits both sides
  of a pair alike) and the reported ratio is the median of the per-round ratios, with a percentile
  bootstrap confidence interval of that median (numpy, fixed seed). Ratios are ironaccel / other: below 1
  means ironaccel is faster.
* Copies are timed to completion (the copy, then a stream synchronize): that is what a bandwidth means,
  and it is the only definition under which a pinned copy (whose source must not change until the copy is
  done) compares with a pageable one. Copies up to ``CALL_ONLY_BYTES`` are also timed as the call alone
  ("call only": until the host array may be reused, with the synchronize between calls left out): that is
  their host-side overhead. Allocation and launch figures are host time only.
* Results on a simulated device (the fake libcuda, lavapipe, SwiftShader, the in-memory test device) say
  SIMULATED in every output: they measure the Python layer over a CPU driver, never a GPU.

Outputs, in ``--out``: ``bench-<backend>-<driver>.json`` (every sample), ``.md`` (the table) and a plot
(``.png`` with matplotlib, else an ``.svg`` written here).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import gc
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

HELP = "host-overhead benchmarks against the raw driver calls and peer libraries (JSON, Markdown, plot)"
SCHEMA = 1
SIZES = (256, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20)
QUICK_SIZES = (256, 64 << 10)
ALLOC_BYTES = 1024
CALL_ONLY_BYTES = 64 << 10  # copies this small are also timed without their synchronize (host cost alone)
MAX_BATCH = 20000
BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 8

FLOOR = "raw"
OURS = "ironaccel"

#: Per implementation: runs the operation ``n`` times and returns the nanoseconds it measured (an
#: implementation may leave set-up between operations, such as a synchronize, out of what it measures).
Impl = Callable[[int], int]


@dataclass(frozen=True)
class Goal:
    """A target from issue 8, for hardware runs: at most ``ns`` per op, or at most ``ratio`` x the floor."""

    ns: float | None = None
    ratio: float | None = None

    def text(self) -> str:
        return f"<= {_ns(self.ns)}" if self.ns is not None else f"<= {self.ratio:.2f}x raw"

    def met(self, ours_ns: float, floor_ratio: float | None) -> bool | None:
        if self.ns is not None:
            return ours_ns <= self.ns
        return None if floor_ratio is None else floor_ratio <= self.ratio


#: The CUDA goals of issue 8 (measured on the H200); judged on hardware runs only.
CUDA_GOALS = {
    "alloc_free.pool": Goal(ns=250),
    "stream_sync": Goal(ratio=1.10),
    "event_record_sync": Goal(ns=3000),
    "launch.async": Goal(ns=4500),
    "htod.pageable.256.call": Goal(ns=3000),
    "htod.pageable.67108864": Goal(ns=1.5e6),
}


@dataclass
class Case:
    """One operation and its implementations; ``impls`` maps a name to an Impl, ironaccel first."""

    name: str
    label: str
    impls: dict[str, Impl] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # implementation -> why it has no figure
    nbytes: int = 0


def case_catalogue(sizes: tuple[int, ...], pinned: bool) -> list[tuple[str, str, int]]:
    """(name, label, bytes) of every operation, in report order."""
    cases = [
        ("alloc_free.device", f"alloc+free {ALLOC_BYTES} B, device", ALLOC_BYTES),
        ("alloc_free.pool", f"alloc+free {ALLOC_BYTES} B, MemPool (peers: their pool)", ALLOC_BYTES),
        ("stream_sync", "stream synchronize, idle", 0),
        ("event_record_sync", "event record + synchronize", 0),
        ("launch.async", "empty kernel launch, back to back (async)", 0),
        ("launch.single", "empty kernel launch, one from idle", 0),
        ("launch.sync", "empty kernel launch + synchronize", 0),
    ]
    memories = ("pageable", "pinned") if pinned else ("pageable",)
    for memory in memories:
        for n in sizes:
            if n <= CALL_ONLY_BYTES:
                cases.append((f"htod.{memory}.{n}.call", f"htod {_bytes(n)} {memory}, call only", n))
    for direction in ("htod", "dtoh"):
        for memory in memories:
            for n in sizes:
                cases.append((f"{direction}.{memory}.{n}", f"{direction} {_bytes(n)} {memory}", n))
    return cases


# -- timing and statistics ------------------------------------------------------------------------------

def timed(op: Callable[[], Any]) -> Impl:
    """An Impl that times ``n`` calls of ``op`` in one loop."""

    def run(n: int) -> int:
        clock = time.perf_counter_ns
        start = clock()
        for _ in range(n):
            op()
        return clock() - start

    return run


def timed_each(op: Callable[[], Any], between: Callable[[], Any]) -> Impl:
    """An Impl that times each call of ``op`` alone and runs ``between`` (untimed) after each."""

    def run(n: int) -> int:
        clock = time.perf_counter_ns
        total = 0
        for _ in range(n):
            start = clock()
            op()
            total += clock() - start
            between()
        return total

    return run


def timed_then(op: Callable[[], Any], after: Callable[[], Any]) -> Impl:
    """An Impl that times ``n`` calls of ``op`` and runs ``after`` once, untimed (e.g. drain a queue)."""
    loop = timed(op)

    def run(n: int) -> int:
        elapsed = loop(n)
        after()
        return elapsed

    return run


def calibrate(impl: Impl, sample_ns: float) -> int:
    """A batch size whose run takes about ``sample_ns``; warms the implementation up while finding it."""
    n = 1
    while True:
        elapsed = max(impl(n), 1)
        if elapsed >= sample_ns / 4 or n >= MAX_BATCH:
            return int(min(max(n * sample_ns / elapsed, 1), MAX_BATCH))
        n = min(n * 4, MAX_BATCH)


def paired_ratio(ours: np.ndarray, other: np.ndarray, *, rng: np.random.Generator,
                 resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE) -> dict[str, float]:
    """Median of the per-pair ratios ours/other, with a percentile bootstrap interval of that median."""
    ratios = np.asarray(ours, dtype=float) / np.asarray(other, dtype=float)
    median = float(np.median(ratios))
    picks = rng.integers(0, len(ratios), size=(resamples, len(ratios)))
    boot = np.median(ratios[picks], axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(boot, [tail, 1 - tail])
    return {"median": median, "ci_low": float(low), "ci_high": float(high), "pairs": len(ratios)}


def measure(case: Case, samples: int, sample_ns: float) -> dict[str, Any]:
    """Paired, alternating samples of every implementation of ``case``; ns per operation."""
    batches: dict[str, int] = {}
    for name, impl in list(case.impls.items()):
        try:
            batches[name] = calibrate(impl, sample_ns)
            impl(batches[name])  # one more warm batch at the final size
        except Exception as exc:  # a peer that cannot do this operation loses its column, not the run
            case.errors[name] = _why(exc)
            del case.impls[name]
    names = list(case.impls)
    per_op: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(samples):
        for name in names if round_ % 2 == 0 else reversed(names):
            per_op[name].append(case.impls[name](batches[name]) / batches[name])
    return {name: {"batch": batches[name], "samples_ns": per_op[name],
                   "median_ns": float(np.median(per_op[name]))} for name in names}


def summarize(case: Case, timings: dict[str, Any], goal: Goal | None, simulated: bool) -> dict[str, Any]:
    rng = np.random.default_rng(SEED)
    out: dict[str, Any] = {"name": case.name, "label": case.label, "nbytes": case.nbytes, "impls": timings,
                           "errors": case.errors, "ratios": {}}
    if OURS in timings:
        ours = np.asarray(timings[OURS]["samples_ns"])
        for name, t in timings.items():
            if name != OURS:
                out["ratios"][name] = paired_ratio(ours, np.asarray(t["samples_ns"]), rng=rng)
    if goal is not None:
        floor = out["ratios"].get(FLOOR, {}).get("median")
        met = goal.met(timings[OURS]["median_ns"], floor) if OURS in timings else None
        out["goal"] = {"text": goal.text(), "met": None if simulated else met, "met_here": met}
    return out


# -- implementations on the ironaccel API (every backend) -----------------------------------------------

def api_impls(dev: Any, stream: Any, kernel: tuple[Any, tuple[Any, ...]] | None, sizes: tuple[int, ...],
              pinned: Callable[[int], np.ndarray] | None) -> tuple[dict[str, Impl], list[Callable[[], None]]]:
    """ironaccel's implementation of each case (by case name), and what to call to clean up."""
    from .pool import MemPool

    impls: dict[str, Impl] = {}
    cleanup: list[Callable[[], None]] = []
    alloc = dev.alloc
    impls["alloc_free.device"] = timed(lambda: alloc(ALLOC_BYTES).free())
    pool = MemPool(dev, stream)
    cleanup.append(pool.close)
    pool_alloc = pool.alloc
    impls["alloc_free.pool"] = timed(lambda: pool_alloc(ALLOC_BYTES).free())
    sync = stream.synchronize
    impls["stream_sync"] = timed(sync)
    record = stream.record
    impls["event_record_sync"] = timed(lambda: record().synchronize())
    if kernel is not None:
        k, args = kernel
        launch = stream.launch

        def one() -> None:
            launch(k, 1, 1, args)

        impls["launch.async"] = timed_then(one, sync)
        impls["launch.single"] = timed_each(one, sync)
        impls["launch.sync"] = timed(lambda: (one(), sync()))
    for n in sizes:
        if n > dev.info.limits.max_alloc:
            continue
        buf = dev.alloc(n)
        cleanup.append(buf.free)
        hosts = {"pageable": _pageable(n)}
        if pinned is not None:
            hosts["pinned"] = pinned(n)
        for memory, host in hosts.items():
            impls[f"htod.{memory}.{n}.call"] = timed_each(lambda b=buf, h=host: stream.copy_htod(b, h), sync)
            impls[f"htod.{memory}.{n}"] = timed(lambda b=buf, h=host: (stream.copy_htod(b, h), sync()))
            impls[f"dtoh.{memory}.{n}"] = timed(lambda b=buf, h=host: (stream.copy_dtoh(h, b), sync()))
    return impls, cleanup


def _pageable(n: int) -> np.ndarray:
    """Ordinary host memory, touched (so no copy pays for first-touch page faults)."""
    return np.full(n, 7, dtype=np.uint8)


# -- CUDA: the raw floor and the peers ------------------------------------------------------------------

EMPTY_CUDA = 'extern "C" __global__ void empty(float* x, float a, unsigned n) { if (n > 0u) x[0] = a; }'


def cuda_setup(dev: Any, stream: Any, sizes: tuple[int, ...], peers: bool) -> tuple[dict[str, dict[str, Impl]], dict[str, str], Any, Callable[[int], np.ndarray], list[Callable[[], None]]]:
    """The raw cuda.bindings floor and the peers, the kernel for ironaccel, and pinned host memory."""
    from .backends import cuda as backend

    cu = backend._cu
    cleanup: list[Callable[[], None]] = []
    lang = "cuda" if dev.supports("lang.cuda") else None
    module = dev.compile(EMPTY_CUDA, lang) if lang else None
    kbuf = dev.alloc(256)
    cleanup.append(kbuf.free)
    kernel = (module.kernel("empty"), (kbuf, np.float32(2), np.uint32(0))) if module else None

    pinned_blocks: list[int] = []

    def pinned(n: int) -> np.ndarray:
        ptr = int(backend._check("cuMemHostAlloc", cu.cuMemHostAlloc(n, 0)))
        pinned_blocks.append(ptr)
        host = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr))
        host[:] = 7
        return host

    def free_pinned() -> None:
        for ptr in pinned_blocks:
            cu.cuMemFreeHost(ptr)

    others: dict[str, dict[str, Impl]] = {FLOOR: _cuda_raw(cu, dev, stream, module, kbuf, sizes, pinned, cleanup)}
    unavailable: dict[str, str] = {}
    if peers:
        for name, make in (("cuda.core", _cuda_core_peer), ("CuPy", _cupy_peer), ("PyTorch", _torch_peer)):
            try:
                others[name] = make(sizes, cleanup)
            except Exception as exc:
                unavailable[name] = _why(exc)
    cleanup.append(free_pinned)  # last: after the peers' buffers
    return others, unavailable, kernel, pinned, cleanup


def _cuda_raw(cu: Any, dev: Any, stream: Any, module: Any, kbuf: Any, sizes: tuple[int, ...],
              pinned: Callable[[int], np.ndarray], cleanup: list[Callable[[], None]]) -> dict[str, Impl]:
    """The least a cuda.bindings program does for each operation: one driver call per step, arguments ready."""
    h = stream._handle
    impls: dict[str, Impl] = {}

    def alloc_free() -> None:
        _, p = cu.cuMemAllocAsync(ALLOC_BYTES, h)
        cu.cuMemFreeAsync(p, h)

    impls["alloc_free.device"] = impls["alloc_free.pool"] = timed(alloc_free)
    sync = cu.cuStreamSynchronize
    impls["stream_sync"] = timed(lambda: sync(h))
    _, event = cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    cleanup.append(lambda: cu.cuEventDestroy(event))
    record, wait = cu.cuEventRecord, cu.cuEventSynchronize
    impls["event_record_sync"] = timed(lambda: (record(event, h), wait(event)))
    if module is not None:
        fn = module.kernel("empty")._function
        params = np.zeros(3, dtype=np.uint64)  # one 8-byte slot per argument, packed once
        params[0] = kbuf.handle
        params.view(np.float32)[2] = 2.0
        pointers = params.ctypes.data + 8 * np.arange(3, dtype=np.uint64)
        launch = cu.cuLaunchKernel
        addr = pointers.ctypes.data

        def one() -> None:
            launch(fn, 1, 1, 1, 1, 1, 1, 0, h, addr, 0)

        impls["launch.async"] = timed_then(one, lambda: sync(h))
        impls["launch.single"] = timed_each(one, lambda: sync(h))
        impls["launch.sync"] = timed(lambda: (one(), sync(h)))
        cleanup.append(lambda: (params, pointers))  # keep the packed arguments alive to the end
    for n in sizes:
        if n > dev.info.limits.max_alloc:
            continue
        _, d = cu.cuMemAlloc(n)
        cleanup.append(lambda d=d: cu.cuMemFree(d))
        for memory, host in (("pageable", _pageable(n)), ("pinned", pinned(n))):
            p = host.ctypes.data
            impls[f"htod.{memory}.{n}.call"] = timed_each(lambda d=d, p=p, n=n, host=host: cu.cuMemcpyHtoDAsync(d, p, n, h),
                                                          lambda: sync(h))
            impls[f"htod.{memory}.{n}"] = timed(lambda d=d, p=p, n=n, host=host: (cu.cuMemcpyHtoDAsync(d, p, n, h), sync(h)))
            impls[f"dtoh.{memory}.{n}"] = timed(lambda d=d, p=p, n=n, host=host: (cu.cuMemcpyDtoHAsync(p, d, n, h), sync(h)))
    return impls


def _cuda_core_peer(sizes: tuple[int, ...], cleanup: list[Callable[[], None]]) -> dict[str, Impl]:
    try:
        import cuda.core as cc
        cc.Device  # noqa: B018 - older releases keep the API in cuda.core.experimental
    except (ImportError, AttributeError):
        import cuda.core.experimental as cc
    dev = cc.Device(0)
    dev.set_current()
    s = dev.create_stream()
    impls: dict[str, Impl] = {}
    allocate = dev.allocate
    impls["alloc_free.device"] = impls["alloc_free.pool"] = timed(lambda: allocate(ALLOC_BYTES, stream=s).close(s))
    impls["stream_sync"] = timed(s.sync)
    impls["event_record_sync"] = timed(lambda: s.record().sync())
    arch = "".join(str(v) for v in dev.compute_capability)
    code = cc.Program(EMPTY_CUDA, code_type="c++", options=cc.ProgramOptions(arch=f"sm_{arch}")).compile("ptx")
    kernel = code.get_kernel("empty")
    buf = dev.allocate(256, stream=s)
    s.sync()
    config = cc.LaunchConfig(grid=1, block=1)
    launch = cc.launch
    a, n = np.float32(2), np.uint32(0)

    def one() -> None:
        launch(s, config, kernel, buf, a, n)

    impls["launch.async"] = timed_then(one, s.sync)
    impls["launch.single"] = timed_each(one, s.sync)
    impls["launch.sync"] = timed(lambda: (one(), s.sync()))
    cleanup.append(lambda: (buf.close(), s.close()))
    return impls


def _cupy_peer(sizes: tuple[int, ...], cleanup: list[Callable[[], None]]) -> dict[str, Impl]:
    import cupy as cp
    import cupyx

    s = cp.cuda.Stream(non_blocking=True)
    s.use()  # CuPy's kernels and its pool work on the current stream
    impls: dict[str, Impl] = {}
    alloc = cp.cuda.alloc
    impls["alloc_free.device"] = impls["alloc_free.pool"] = timed(lambda: alloc(ALLOC_BYTES))  # freed to its pool at once
    impls["stream_sync"] = timed(s.synchronize)
    impls["event_record_sync"] = timed(lambda: s.record().synchronize())
    kernel = cp.RawKernel(EMPTY_CUDA, "empty")
    x = cp.empty(64, cp.float32)
    args = (x, np.float32(2), np.uint32(0))

    def one() -> None:
        kernel((1,), (1,), args)

    impls["launch.async"] = timed_then(one, s.synchronize)
    impls["launch.single"] = timed_each(one, s.synchronize)
    impls["launch.sync"] = timed(lambda: (one(), s.synchronize()))
    for n in sizes:
        d = cp.empty(n, cp.uint8)
        for memory, host in (("pageable", _pageable(n)), ("pinned", cupyx.empty_pinned(n, np.uint8))):
            host[:] = 7
            impls[f"htod.{memory}.{n}.call"] = timed_each(lambda d=d, host=host: d.set(host, stream=s), s.synchronize)
            impls[f"htod.{memory}.{n}"] = timed(lambda d=d, host=host: (d.set(host, stream=s), s.synchronize()))
            impls[f"dtoh.{memory}.{n}"] = timed(lambda d=d, host=host: (d.get(stream=s, out=host), s.synchronize()))
    cleanup.append(lambda: cp.get_default_memory_pool().free_all_blocks())
    return impls


def _torch_peer(sizes: tuple[int, ...], cleanup: list[Callable[[], None]]) -> dict[str, Impl]:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    s = torch.cuda.Stream()
    impls: dict[str, Impl] = {}
    empty, u8 = torch.empty, torch.uint8
    impls["alloc_free.device"] = impls["alloc_free.pool"] = timed(lambda: empty(ALLOC_BYTES, dtype=u8, device="cuda"))
    impls["stream_sync"] = timed(s.synchronize)
    impls["event_record_sync"] = timed(lambda: s.record_event().synchronize())
    with torch.cuda.stream(s):
        for n in sizes:
            d = torch.empty(n, dtype=u8, device="cuda")
            for memory, host in (("pageable", torch.full((n,), 7, dtype=u8)),
                                 ("pinned", torch.full((n,), 7, dtype=u8).pin_memory())):
                impls[f"htod.{memory}.{n}.call"] = timed_each(lambda d=d, host=host: d.copy_(host, non_blocking=True),
                                                              s.synchronize)
                impls[f"htod.{memory}.{n}"] = timed(lambda d=d, host=host: (d.copy_(host, non_blocking=True), s.synchronize()))
                impls[f"dtoh.{memory}.{n}"] = timed(lambda d=d, host=host: (host.copy_(d, non_blocking=True), s.synchronize()))
    # torch's copy_ enqueues on the current stream: each timed call runs under torch.cuda.stream(s)
    for key, impl in list(impls.items()):
        if key.startswith(("htod", "dtoh")):
            impls[key] = _under(torch.cuda.stream, s, impl)
    cleanup.append(torch.cuda.empty_cache)
    return impls


def _under(context: Callable[[Any], Any], arg: Any, impl: Impl) -> Impl:
    def run(n: int) -> int:
        with context(arg):
            return impl(n)

    return run


# -- WebGPU: raw wgpu-py calls ---------------------------------------------------------------------------

EMPTY_WGSL = """
struct Params { a: f32, n: u32 }
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;
override BLOCK_X: u32 = 1u;
override BLOCK_Y: u32 = 1u;
override BLOCK_Z: u32 = 1u;
@compute @workgroup_size(BLOCK_X, BLOCK_Y, BLOCK_Z)
fn empty(@builtin(global_invocation_id) g: vec3<u32>) { if (p.n > 0u) { x[0] = p.a; } }
"""


def webgpu_setup(dev: Any, stream: Any, sizes: tuple[int, ...]) -> tuple[dict[str, Impl], Any, list[Callable[[], None]]]:
    """The raw wgpu-py floor on ironaccel's GPUDevice, and the kernel for ironaccel."""
    import wgpu

    gpu, queue = dev._gpu, dev._gpu.queue
    u = wgpu.BufferUsage
    module = dev.compile(EMPTY_WGSL, "wgsl")
    kbuf = dev.alloc(256)
    kernel = (module.kernel("empty"), (kbuf, np.float32(2), np.uint32(0)))
    impls: dict[str, Impl] = {}
    create = gpu.create_buffer
    usage = u.STORAGE | u.COPY_SRC | u.COPY_DST
    impls["alloc_free.device"] = impls["alloc_free.pool"] = timed(lambda: create(size=ALLOC_BYTES, usage=usage).destroy())
    fence_src = create(size=4, usage=u.COPY_SRC)

    def fence_wait(encoder: Any) -> None:
        """A copy into a fresh mappable buffer, submitted, then mapped: the wait ironaccel also uses."""
        target = create(size=4, usage=u.MAP_READ | u.COPY_DST)
        encoder.copy_buffer_to_buffer(fence_src, 0, target, 0, 4)
        queue.submit([encoder.finish()])
        target.map_sync(wgpu.MapMode.READ)
        target.unmap()

    impls["stream_sync"] = impls["event_record_sync"] = timed(lambda: fence_wait(gpu.create_command_encoder()))
    pipeline = module._pipeline("empty", (1, 1, 1))
    uniform = gpu.create_buffer_with_data(data=np.array([2.0, 0, 0, 0], np.float32).tobytes(), usage=u.UNIFORM)
    bind = gpu.create_bind_group(layout=module._bind_layout, entries=[
        {"binding": 0, "resource": {"buffer": kbuf.handle}}, {"binding": 1, "resource": {"buffer": uniform}}])

    def dispatch() -> Any:
        encoder = gpu.create_command_encoder()
        p = encoder.begin_compute_pass()
        p.set_pipeline(pipeline)
        p.set_bind_group(0, bind)
        p.dispatch_workgroups(1, 1, 1)
        p.end()
        return encoder

    def sync() -> None:
        fence_wait(gpu.create_command_encoder())

    impls["launch.async"] = timed_then(lambda: queue.submit([dispatch().finish()]), sync)
    impls["launch.single"] = timed_each(lambda: queue.submit([dispatch().finish()]), sync)
    impls["launch.sync"] = timed(lambda: fence_wait(dispatch()))
    cleanup: list[Callable[[], None]] = [kbuf.free]
    for n in sizes:
        if n > dev.info.limits.max_alloc:
            continue
        d = create(size=n, usage=usage)
        host = _pageable(n)
        impls[f"htod.pageable.{n}.call"] = timed_each(lambda d=d, host=host: queue.write_buffer(d, 0, host), sync)
        impls[f"htod.pageable.{n}"] = timed(lambda d=d, host=host: (queue.write_buffer(d, 0, host), sync()))
        impls[f"dtoh.pageable.{n}"] = timed(lambda d=d, host=host: np.copyto(host, np.frombuffer(queue.read_buffer(d), np.uint8)))
    return impls, kernel, cleanup


# -- Vulkan: raw vulkan calls ----------------------------------------------------------------------------

EMPTY_GLSL = """#version 450
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(std430, set = 0, binding = 0) buffer X { float x[]; };
layout(push_constant) uniform P { float a; uint n; };
void main() { if (n > 0u) x[0] = a; }
"""


class _VulkanRaw:
    """One command buffer and one fence on ironaccel's VkDevice: record, submit, wait — the raw sequence."""

    def __init__(self, dev: Any, queue: Any, max_bytes: int):
        import vulkan as vk

        self.vk, self.ffi, self.lib = vk, vk.ffi, vk.lib
        self.dev, self.handle, self.queue = dev, dev._handle, queue
        ffi, lib = self.ffi, self.lib
        pool = ffi.new("VkCommandPool*")
        self._ok(lib.vkCreateCommandPool(self.handle, ffi.new("VkCommandPoolCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, "queueFamilyIndex": dev._family,
            "flags": vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT}), ffi.NULL, pool))
        self.pool = pool[0]
        cmd = ffi.new("VkCommandBuffer*")
        self._ok(lib.vkAllocateCommandBuffers(self.handle, ffi.new("VkCommandBufferAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": self.pool,
            "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, "commandBufferCount": 1}), cmd))
        self.cmd_array = cmd
        self.cmd = cmd[0]
        fence = ffi.new("VkFence*")
        self._ok(lib.vkCreateFence(self.handle, ffi.new("VkFenceCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO}), ffi.NULL, fence))
        self.fence_array = fence
        self.fence = fence[0]
        self.begin_info = ffi.new("VkCommandBufferBeginInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
            "flags": vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT})
        self.submit_cmd = ffi.new("VkSubmitInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO,
                                                    "commandBufferCount": 1, "pCommandBuffers": cmd})
        self.buffers: list[tuple[Any, Any]] = []
        self.staging, self.staging_memory = self.buffer(max_bytes, dev._staging.type_index)
        mapped = ffi.new("void**")
        self._ok(lib.vkMapMemory(self.handle, self.staging_memory, 0, max_bytes, 0, mapped))
        self.mapped = int(ffi.cast("uintptr_t", mapped[0]))
        self.region = ffi.new("VkBufferCopy*")

    def _ok(self, result: int) -> None:
        if result < 0:
            raise RuntimeError(f"raw vulkan call failed: VkResult {result}")

    def buffer(self, n: int, type_index: int) -> tuple[Any, Any]:
        """vkCreateBuffer + vkAllocateMemory + vkBindBufferMemory: a buffer with its own memory."""
        vk, ffi, lib = self.vk, self.ffi, self.lib
        out = ffi.new("VkBuffer*")
        self._ok(lib.vkCreateBuffer(self.handle, ffi.new("VkBufferCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, "size": n, "usage": self.dev._buffer_usage,
            "sharingMode": vk.VK_SHARING_MODE_EXCLUSIVE}), ffi.NULL, out))
        req = ffi.new("VkMemoryRequirements*")
        lib.vkGetBufferMemoryRequirements(self.handle, out[0], req)
        mem = ffi.new("VkDeviceMemory*")
        self._ok(lib.vkAllocateMemory(self.handle, ffi.new("VkMemoryAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, "allocationSize": req.size,
            "memoryTypeIndex": type_index}), ffi.NULL, mem))
        self._ok(lib.vkBindBufferMemory(self.handle, out[0], mem[0], 0))
        self.buffers.append((out[0], mem[0]))
        return out[0], mem[0]

    def alloc_free(self) -> None:
        buf, mem = self.buffer(ALLOC_BYTES, self.dev._memory.type_index)
        self.buffers.pop()
        self.lib.vkDestroyBuffer(self.handle, buf, self.ffi.NULL)
        self.lib.vkFreeMemory(self.handle, mem, self.ffi.NULL)

    def submit_wait(self, submit: Any, count: int) -> None:
        lib = self.lib
        self._ok(lib.vkQueueSubmit(self.queue, count, submit, self.fence))
        self._ok(lib.vkWaitForFences(self.handle, 1, self.fence_array, 1, 0xFFFFFFFFFFFFFFFF))
        self._ok(lib.vkResetFences(self.handle, 1, self.fence_array))

    def copy(self, src: Any, dst: Any, n: int) -> None:
        lib = self.lib
        self._ok(lib.vkBeginCommandBuffer(self.cmd, self.begin_info))
        self.region.size = n
        lib.vkCmdCopyBuffer(self.cmd, src, dst, 1, self.region)
        self._ok(lib.vkEndCommandBuffer(self.cmd))
        self.submit_wait(self.submit_cmd, 1)

    def close(self) -> None:
        lib, ffi = self.lib, self.ffi
        lib.vkQueueWaitIdle(self.queue)
        for buf, mem in self.buffers:
            lib.vkDestroyBuffer(self.handle, buf, ffi.NULL)
            lib.vkFreeMemory(self.handle, mem, ffi.NULL)
        lib.vkDestroyFence(self.handle, self.fence, ffi.NULL)
        lib.vkDestroyCommandPool(self.handle, self.pool, ffi.NULL)


def vulkan_setup(dev: Any, stream: Any, sizes: tuple[int, ...]) -> tuple[dict[str, Impl], Any, list[Callable[[], None]]]:
    """The raw vulkan floor on ironaccel's VkDevice, and the kernel for ironaccel (GLSL when glslang is here)."""
    usable = [n for n in sizes if n <= dev.info.limits.max_alloc]
    raw = _VulkanRaw(dev, stream._queue.handle, max(usable, default=ALLOC_BYTES))
    impls: dict[str, Impl] = {}
    impls["alloc_free.device"] = impls["alloc_free.pool"] = timed(raw.alloc_free)
    queue_wait = raw.lib.vkQueueWaitIdle
    impls["stream_sync"] = timed(lambda: queue_wait(raw.queue))
    empty_submit = raw.ffi.NULL
    impls["event_record_sync"] = timed(lambda: raw.submit_wait(empty_submit, 0))
    for n in usable:
        d, _ = raw.buffer(n, dev._memory.type_index)
        host = _pageable(n)

        def htod(d: Any = d, n: int = n, host: np.ndarray = host) -> None:  # the default keeps host alive
            ctypes.memmove(raw.mapped, host.ctypes.data, n)
            raw.copy(raw.staging, d, n)

        def dtoh(d: Any = d, n: int = n, host: np.ndarray = host) -> None:
            raw.copy(d, raw.staging, n)
            ctypes.memmove(host.ctypes.data, raw.mapped, n)

        impls[f"htod.pageable.{n}"] = impls[f"htod.pageable.{n}.call"] = timed(htod)  # the raw copy waits anyway
        impls[f"dtoh.pageable.{n}"] = timed(dtoh)
    kernel = None
    if dev.supports("lang.glsl"):
        kbuf = dev.alloc(256)
        kernel = (dev.compile(EMPTY_GLSL, "glsl").kernel("main"), (kbuf, np.float32(2), np.uint32(0)))
    return impls, kernel, [raw.close]


# -- running a target -----------------------------------------------------------------------------------

def open_target(name: str) -> tuple[Any, str]:
    """Open ``backend``, ``backend/driver`` (its driver selected as the conformance runs do) or ``mem``."""
    if name == "mem":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from memdevice import MemDevice

        return MemDevice(), "mem/memdevice"
    import ironaccel as ia

    backend, _, driver = name.partition("/")
    if driver:
        from .targets import get

        target = get(name)
        os.environ.update(target.environment())
        dev = ia.open_device(backend)
        if not target.matches(dev.info):
            dev.close()
            raise ia.NotAvailable(backend, driver, f"the device opened is {dev.info.name!r}, not the {driver} driver")
        return dev, name
    dev = ia.open_device(backend)
    return dev, f"{backend}/{_driver_of(dev.info)}"


def _driver_of(info: Any) -> str:
    from .targets import TARGETS

    for t in TARGETS.values():
        if t.matches(info):
            return t.driver
    return "unknown"


def run(target: str, *, peers: bool, quick: bool, samples: int | None = None,
        sample_ms: float | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Benchmark one target; returns the report (see ``write``)."""
    started = _now()
    dev, name = open_target(target)
    info = dev.info
    sizes = QUICK_SIZES if quick else SIZES
    samples = samples or (9 if quick else 61)
    sample_ns = (sample_ms or (0.5 if quick else 3.0)) * 1e6
    cleanup: list[Callable[[], None]] = []
    others: dict[str, dict[str, Impl]] = {}
    unavailable: dict[str, str] = {}
    pinned = None
    kernel = None
    try:
        stream = dev.create_stream()
        backend = info.backend
        if backend == "cuda":
            others, unavailable, kernel, pinned, extra = cuda_setup(dev, stream, sizes, peers)
            cleanup += extra
        elif backend == "webgpu":
            floor, kernel, extra = webgpu_setup(dev, stream, sizes)
            others[FLOOR] = floor
            cleanup += extra
        elif backend == "vulkan":
            floor, kernel, extra = vulkan_setup(dev, stream, sizes)
            others[FLOOR] = floor
            cleanup += extra
        ours, extra = api_impls(dev, stream, kernel, sizes, pinned)
        cleanup += extra
        goals = CUDA_GOALS if backend == "cuda" else {}
        cases = []
        for case_name, label, nbytes in case_catalogue(sizes, pinned is not None):
            case = Case(case_name, label, nbytes=nbytes)
            if case_name in ours:
                case.impls[OURS] = ours[case_name]
            else:
                case.errors[OURS] = "not measured: no kernel for this device" if "launch" in case_name else "over max_alloc"
            for other, impls in others.items():
                if case_name in impls:
                    case.impls[other] = impls[case_name]
                else:
                    case.errors[other] = "not measured: no implementation of this operation for it here"
            if not case.impls:
                continue
            gc.collect()
            gc.disable()  # a collection inside one side of a pair is noise, not overhead
            try:
                timings = measure(case, samples, sample_ns)
            finally:
                gc.enable()
            summary = summarize(case, timings, goals.get(case_name), info.simulated)
            cases.append(summary)
            log(_progress_line(summary))
        dev.synchronize()
    finally:
        for step in reversed(cleanup):
            try:
                step()
            except Exception as exc:  # cleanup of a peer must not hide the results
                log(f"cleanup: {_why(exc)}")
        dev.close()
    backend_name, _, driver = name.partition("/")
    simulated = bool(info.simulated)
    return {
        "schema": SCHEMA,
        "tool": "ironaccel bench",
        "simulated": simulated,
        "label": SIMULATED_LABEL if simulated else "hardware",
        "target": {"name": name, "backend": backend_name, "driver": driver, "device": info.name,
                   "vendor": info.vendor, "driver_version": info.driver_version, "simulated": simulated},
        "host": {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count()},
        "packages": _versions(),
        "settings": {"quick": quick, "peers": peers, "samples": samples, "sample_ms": sample_ns / 1e6,
                     "bootstrap_resamples": BOOTSTRAP_RESAMPLES, "confidence": CONFIDENCE, "seed": SEED},
        "peers_unavailable": unavailable,
        "started": started,
        "finished": _now(),
        "cases": cases,
    }


SIMULATED_LABEL = "SIMULATED (a CPU driver, not a GPU: these figures measure the host-side layer only)"


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("ironaccel", "numpy", "cuda-bindings", "cuda-core", "cupy-cuda13x", "cupy-cuda12x", "torch",
                 "wgpu", "vulkan"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _progress_line(case: dict[str, Any]) -> str:
    parts = [f"{name} {_ns(t['median_ns'])}" for name, t in case["impls"].items()]
    return f"{case['label']:48} " + ", ".join(parts)


# -- outputs --------------------------------------------------------------------------------------------

def _ns(ns: float | None) -> str:
    if ns is None or not math.isfinite(ns):
        return "—"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e4:
        return f"{ns / 1e3:.1f} µs"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns:.0f} ns"


def _bytes(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def _ratio(r: dict[str, float] | None) -> str:
    if not r:
        return "—"
    return f"{r['median']:.2f}× [{r['ci_low']:.2f}–{r['ci_high']:.2f}]"


def columns(report: dict[str, Any]) -> list[str]:
    """The implementations other than ironaccel that appear in the report, floor first."""
    seen: list[str] = []
    for case in report["cases"]:
        for name in case["impls"]:
            if name != OURS and name not in seen:
                seen.append(name)
    return sorted(seen, key=lambda n: (n != FLOOR, n))


def markdown(report: dict[str, Any]) -> str:
    t = report["target"]
    others = columns(report)
    lines = [f"# ironaccel bench: {t['name']}" + (" — SIMULATED" if report["simulated"] else ""), ""]
    if report["simulated"]:
        lines += [f"**{SIMULATED_LABEL}.** No figure here says anything about GPU performance.", ""]
    s = report["settings"]
    lines += [
        f"Device: {t['device']} ({t['vendor']}, driver {t['driver_version']}). Python {report['host']['python']}, "
        f"{report['host']['cpus']} CPUs; {report['started']}.",
        f"Time per operation, median of {s['samples']} paired rounds; ratio = ironaccel / other, the median of "
        f"per-round ratios with a {int(s['confidence'] * 100)}% bootstrap interval (below 1: ironaccel is faster). "
        "Copies are timed to completion (copy + stream synchronize) except the *call only* rows (the call alone, "
        f"synchronized between calls, untimed). `{FLOOR}` is the floor: the same operation "
        "through the raw driver calls.",
        "",
    ]
    head = ["operation", OURS] + [h for o in others for h in (o, f"vs {o}")] + ["goal"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case in report["cases"]:
        impls = case["impls"]
        row = [case["label"], _ns(impls.get(OURS, {}).get("median_ns"))]
        for o in others:
            row += [_ns(impls.get(o, {}).get("median_ns")), _ratio(case["ratios"].get(o))]
        goal = case.get("goal")
        if goal is None:
            row.append("")
        elif report["simulated"]:
            row.append(f"{goal['text']} (not judged: simulated)")
        else:
            row.append(f"{goal['text']}: {'met' if goal['met'] else 'MISSED'}")
        lines.append("| " + " | ".join(row) + " |")
    missing = {name: why for name, why in report.get("peers_unavailable", {}).items()}
    if missing:
        lines += ["", "Peers not measured: " + "; ".join(f"{k} ({v})" for k, v in missing.items()) + "."]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path_stem: Path) -> Path:
    """Ratio ironaccel / other per operation with its interval: a PNG via matplotlib, else an SVG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        path = path_stem.with_suffix(".svg")
        path.write_text(svg_plot(report), encoding="utf-8")
        return path
    others = columns(report)
    cases = report["cases"]
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(cases) * max(len(others), 1) + 1.5))
    height = 0.8 / max(len(others), 1)
    for j, other in enumerate(others):
        ys, xs, lo, hi = [], [], [], []
        for i, case in enumerate(cases):
            r = case["ratios"].get(other)
            if r:
                ys.append(i + j * height)
                xs.append(r["median"])
                lo.append(r["median"] - r["ci_low"])
                hi.append(r["ci_high"] - r["median"])
        ax.barh(ys, xs, height=height, xerr=[lo, hi], label=f"vs {other}")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(cases))], [c["label"] for c in cases], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ironaccel time / other time (log; < 1: ironaccel faster)")
    ax.set_title(_plot_title(report), fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = path_stem.with_suffix(".png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_title(report: dict[str, Any]) -> str:
    t = report["target"]
    return f"ironaccel bench: {t['name']} ({t['device']})" + (" — SIMULATED" if report["simulated"] else "")


SVG_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3")


def svg_plot(report: dict[str, Any]) -> str:
    """The same chart as ``plot`` as a hand-written SVG (log-scale bars, intervals as whiskers)."""
    others = columns(report)
    cases = report["cases"]
    bar, label_w, plot_w, top = 9, 300, 480, 50
    row_h = bar * max(len(others), 1) + 6
    height = top + row_h * len(cases) + 40
    ratios = [r[k] for c in cases for r in c["ratios"].values() for k in ("ci_low", "ci_high") if r[k] > 0]
    lo_exp = math.floor(math.log10(min(ratios, default=0.5)))
    hi_exp = math.ceil(math.log10(max(ratios, default=2.0)))
    if lo_exp == hi_exp:
        hi_exp += 1

    def x(v: float) -> float:
        return label_w + plot_w * (math.log10(max(v, 10.0 ** lo_exp)) - lo_exp) / (hi_exp - lo_exp)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + plot_w + 20}" height="{height}" '
           'font-family="sans-serif" font-size="10">',
           f'<text x="10" y="16" font-size="12">{_xml(_plot_title(report))}</text>',
           f'<text x="10" y="32">{_xml("ironaccel time / other time, log scale; < 1: ironaccel faster; whiskers: 95% CI")}</text>']
    for e in range(lo_exp, hi_exp + 1):
        xe = x(10.0 ** e)
        out.append(f'<line x1="{xe:.1f}" y1="{top - 4}" x2="{xe:.1f}" y2="{height - 30}" stroke="#ddd"/>')
        out.append(f'<text x="{xe:.1f}" y="{height - 18}" text-anchor="middle">{10.0 ** e:g}</text>')
    one = x(1.0)
    out.append(f'<line x1="{one:.1f}" y1="{top - 4}" x2="{one:.1f}" y2="{height - 30}" stroke="black"/>')
    for i, case in enumerate(cases):
        y0 = top + i * row_h
        out.append(f'<text x="{label_w - 6}" y="{y0 + row_h / 2 + 3:.1f}" text-anchor="end">{_xml(case["label"])}</text>')
        for j, other in enumerate(others):
            r = case["ratios"].get(other)
            if not r:
                continue
            y = y0 + j * bar
            x0, x1 = sorted((one, x(r["median"])))
            color = SVG_COLORS[j % len(SVG_COLORS)]
            out.append(f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0, 1):.1f}" height="{bar - 1}" fill="{color}"/>')
            yc = y + (bar - 1) / 2
            out.append(f'<line x1="{x(r["ci_low"]):.1f}" y1="{yc:.1f}" x2="{x(r["ci_high"]):.1f}" y2="{yc:.1f}" stroke="black"/>')
    for j, other in enumerate(others):
        lx = label_w + 10 + j * 110
        out.append(f'<rect x="{lx}" y="{height - 12}" width="10" height="8" fill="{SVG_COLORS[j % len(SVG_COLORS)]}"/>')
        out.append(f'<text x="{lx + 14}" y="{height - 4}">{_xml("vs " + other)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def write(report: dict[str, Any], out_dir: Path) -> list[Path]:
    """The three outputs: JSON (every sample), Markdown (the table) and the plot."""
    out_dir.mkdir(parents=True, exist_ok=True)
    t = report["target"]
    stem = out_dir / f"bench-{t['backend']}-{t['driver']}"
    json_path = stem.with_suffix(".json")
    json_path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    md_path = stem.with_suffix(".md")
    md_path.write_text(markdown(report), encoding="utf-8")
    return [json_path, md_path, plot(report, stem)]


# -- the command ----------------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default="cuda", metavar="B",
                   help="backend (cuda, vulkan, webgpu), target (cuda/fake, webgpu/lavapipe, ...) or mem "
                        "(the in-memory test device); default: cuda")
    p.add_argument("--peers", action="store_true", help="also time the peer libraries that import (cuda.core, CuPy, PyTorch)")
    p.add_argument("--out", default="bench/results", metavar="DIR", help="output folder (default: bench/results)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and samples: a smoke run, not a measurement")
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    report = run(args.backend, peers=args.peers, quick=args.quick)
    for path in write(report, Path(args.out)):
        print(path)
    if report["simulated"]:
        print(SIMULATED_LABEL)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ironaccel bench", description=HELP)
    add_arguments(p)
    return command(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
