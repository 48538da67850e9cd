"""The WebGPU floor: raw wgpu-py calls on ironaccel's GPUDevice (``Device.native``), with a pipeline and a bind
group of its own built from the WGSL source once — the least a wgpu-py program does per operation."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .cases import ALLOC_BYTES, Impl, pageable
from .ours import KernelCall
from .stats import timed, timed_each, timed_then

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


def setup(dev: Any, stream: Any, sizes: tuple[int, ...]) -> tuple[dict[str, Impl], KernelCall, list[Callable[[], None]]]:
    """The raw floor's implementations, the kernel ironaccel launches, and the cleanup."""
    import wgpu

    gpu = dev.native
    queue = stream.native
    u = wgpu.BufferUsage
    kbuf = dev.alloc(256)
    kernel = (dev.compile(EMPTY_WGSL, "wgsl").kernel("empty"), (kbuf, np.float32(2), np.uint32(0)))
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

    def sync() -> None:
        fence_wait(gpu.create_command_encoder())

    impls["stream_sync"] = impls["event_record_sync"] = timed(sync)
    shader = gpu.create_shader_module(code=EMPTY_WGSL)
    pipeline = gpu.create_compute_pipeline(layout="auto", compute={
        "module": shader, "entry_point": "empty", "constants": {"BLOCK_X": 1, "BLOCK_Y": 1, "BLOCK_Z": 1}})
    target = create(size=256, usage=usage)
    uniform = gpu.create_buffer_with_data(data=np.array([2.0, 0, 0, 0], np.float32).tobytes(), usage=u.UNIFORM)
    bind = gpu.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[
        {"binding": 0, "resource": {"buffer": target}}, {"binding": 1, "resource": {"buffer": uniform}}])

    def dispatch() -> Any:
        encoder = gpu.create_command_encoder()
        p = encoder.begin_compute_pass()
        p.set_pipeline(pipeline)
        p.set_bind_group(0, bind)
        p.dispatch_workgroups(1, 1, 1)
        p.end()
        return encoder

    impls["launch.async"] = timed_then(lambda: queue.submit([dispatch().finish()]), sync)
    impls["launch.single"] = timed_each(lambda: queue.submit([dispatch().finish()]), sync)
    impls["launch.sync"] = timed(lambda: fence_wait(dispatch()))
    for n in sizes:
        if n > dev.info.limits.max_alloc:
            continue
        d = create(size=n, usage=usage)
        host = pageable(n)
        impls[f"htod.pageable.{n}.call"] = timed_each(lambda d=d, host=host: queue.write_buffer(d, 0, host), sync)
        impls[f"htod.pageable.{n}"] = timed(lambda d=d, host=host: (queue.write_buffer(d, 0, host), sync()))
        impls[f"dtoh.pageable.{n}"] = timed(lambda d=d, host=host: np.copyto(host, np.frombuffer(queue.read_buffer(d), np.uint8)))
    return impls, kernel, [kbuf.free]
