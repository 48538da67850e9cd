"""The WebGPU floor: raw wgpu-py calls on ironaccel's GPUDevice and queue (``Device.native``,
``Stream.native``), with pipelines, buffers and bind groups of its own built once from the same WGSL —
the least a wgpu-py program does per operation."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..api import pack_scalars
from . import kernels
from .cases import ALLOC_BYTES, Impl, pageable
from .stats import timed, timed_each, timed_then


def setup(dev: Any, stream: Any, sizes: tuple[int, ...]) -> tuple[dict[str, Impl], list[Callable[[], None]]]:
    """The raw floor's implementations and the cleanup."""
    import wgpu

    gpu = dev.native
    queue = stream.native
    u = wgpu.BufferUsage
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
    dispatch = {name: _dispatcher(gpu, usage, name) for name in (kernels.EMPTY, kernels.FOUR_ARGS)}
    empty, four_args = dispatch[kernels.EMPTY], dispatch[kernels.FOUR_ARGS]
    impls["launch.async"] = timed_then(lambda: queue.submit([empty().finish()]), sync)
    impls["launch.args4"] = timed_then(lambda: queue.submit([four_args().finish()]), sync)
    impls["launch.single"] = timed_each(lambda: queue.submit([empty().finish()]), sync)
    impls["launch.sync"] = timed(lambda: fence_wait(empty()))
    for n in sizes:
        if n > dev.info.limits.max_alloc:
            continue
        d = create(size=n, usage=usage)
        host = pageable(n)
        impls[f"htod.pageable.{n}.call"] = timed_each(lambda d=d, host=host: queue.write_buffer(d, 0, host), sync)
        impls[f"htod.pageable.{n}"] = timed(lambda d=d, host=host: (queue.write_buffer(d, 0, host), sync()))
        impls[f"dtoh.pageable.{n}"] = timed(lambda d=d, host=host: np.copyto(host, np.frombuffer(queue.read_buffer(d), np.uint8)))
    return impls, []


def _dispatcher(gpu: Any, usage: int, name: str) -> Callable[[], Any]:
    """A function that encodes one dispatch of kernel ``name`` (pipeline and bind group made here, once)."""
    import wgpu

    shader = gpu.create_shader_module(code=kernels.source(name, "wgsl"))
    pipeline = gpu.create_compute_pipeline(layout="auto", compute={
        "module": shader, "entry_point": name, "constants": {"BLOCK_X": 1, "BLOCK_Y": 1, "BLOCK_Z": 1}})
    scalars = pack_scalars(kernels.SCALARS[name])
    uniform = gpu.create_buffer_with_data(data=scalars + bytes(-len(scalars) % 16), usage=wgpu.BufferUsage.UNIFORM)
    resources = [gpu.create_buffer(size=kernels.KERNEL_BYTES, usage=usage) for _ in range(kernels.BUFFERS[name])]
    resources.append(uniform)
    bind = gpu.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[
        {"binding": i, "resource": {"buffer": b}} for i, b in enumerate(resources)])

    def encode() -> Any:
        encoder = gpu.create_command_encoder()
        p = encoder.begin_compute_pass()
        p.set_pipeline(pipeline)
        p.set_bind_group(0, bind)
        p.dispatch_workgroups(1, 1, 1)
        p.end()
        return encoder

    return encode
