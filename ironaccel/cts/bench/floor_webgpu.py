"""The WebGPU floor: raw wgpu-py calls on ironaccel's GPUDevice and queue (``Device.native``,
``Stream.native``), with pipelines, buffers and bind groups of its own built once from the same WGSL —
the least a wgpu-py program does per operation.

A launch encodes one compute pass into an open command encoder, which the next synchronize finishes,
submits and waits for: what ironaccel's WebGPU streams do (they submit at a synchronize or an event), so
"back to back" means encoded back to back on both sides."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...api import pack_scalars
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
    open_encoder: list[Any] = []  # the encoder launches are encoded into, until the next flush

    def launcher(encode: Callable[[Any], None]) -> Callable[[], None]:
        def launch() -> None:
            if not open_encoder:
                open_encoder.append(gpu.create_command_encoder())
            encode(open_encoder[0])

        return launch

    def flush() -> None:
        fence_wait(open_encoder.pop() if open_encoder else gpu.create_command_encoder())

    empty = launcher(_dispatcher(gpu, usage, kernels.EMPTY))
    four_args = launcher(_dispatcher(gpu, usage, kernels.FOUR_ARGS))
    impls["launch.async"] = timed_then(empty, flush)
    impls["launch.args4"] = timed_then(four_args, flush)
    impls["launch.single"] = timed_each(empty, flush)
    impls["launch.sync"] = timed(lambda: (empty(), flush()))
    for n in sizes:
        if n > dev.info.limits.max_alloc:
            continue
        d = create(size=n, usage=usage)
        host = pageable(n)
        impls[f"htod.pageable.{n}.call"] = timed_each(lambda d=d, host=host: queue.write_buffer(d, 0, host), sync)
        impls[f"htod.pageable.{n}"] = timed(lambda d=d, host=host: (queue.write_buffer(d, 0, host), sync()))
        impls[f"dtoh.pageable.{n}"] = timed(lambda d=d, host=host: np.copyto(host, np.frombuffer(queue.read_buffer(d), np.uint8)))
    return impls, []


def _dispatcher(gpu: Any, usage: int, name: str) -> Callable[[Any], None]:
    """A function that encodes one dispatch of kernel ``name`` into an encoder (pipeline and bind group
    made here, once)."""
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

    def encode(encoder: Any) -> None:
        p = encoder.begin_compute_pass()
        p.set_pipeline(pipeline)
        p.set_bind_group(0, bind)
        p.dispatch_workgroups(1, 1, 1)
        p.end()

    return encode
