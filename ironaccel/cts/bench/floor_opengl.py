"""The OpenGL floor: moderngl calls on ironaccel's context (``Device.native``), with buffers and compute
programs of its own built once from the same GLSL — what a moderngl program does per operation.

A GL context is current on one thread only, so every timed loop of the floor runs on the thread that owns
it (``native.run``): the floor pays no hand-over per operation, as a program that owns its context would
not. ironaccel's side is timed from the caller, whose work is handed to that thread (stream work without
waiting for it). A launch binds the kernel's buffers and its uniform block, dispatches one 1x1x1 block and
puts the barrier that makes its writes visible to what follows, as ironaccel's launches do; a synchronize
(and an event recorded and waited for: moderngl has no fence) is ``glFinish``."""

from __future__ import annotations

from typing import Any, Callable

from ...api import pack_scalars
from . import kernels
from .cases import ALLOC_BYTES, Impl, pageable
from .stats import timed, timed_each, timed_then


def setup(dev: Any, stream: Any, sizes: tuple[int, ...]) -> tuple[dict[str, Impl], list[Callable[[], None]]]:
    """The raw floor's implementations and the cleanup."""
    native = dev.native
    ctx, run = native.context, native.run
    owned: list[Any] = []  # moderngl objects of the floor, released at cleanup

    def on_gl_thread(impl: Impl) -> Impl:
        return lambda n: run(impl, n)

    impls: dict[str, Impl] = {}
    impls["alloc_free.device"] = impls["alloc_free.pool"] = on_gl_thread(
        timed(lambda: ctx.buffer(reserve=ALLOC_BYTES).release()))
    finish = ctx.finish
    impls["stream_sync"] = impls["event_record_sync"] = on_gl_thread(timed(finish))
    empty = run(_dispatcher, ctx, kernels.EMPTY, owned)
    four_args = run(_dispatcher, ctx, kernels.FOUR_ARGS, owned)
    impls["launch.async"] = on_gl_thread(timed_then(empty, finish))
    impls["launch.args4"] = on_gl_thread(timed_then(four_args, finish))
    impls["launch.single"] = on_gl_thread(timed_each(empty, finish))
    impls["launch.sync"] = on_gl_thread(timed(lambda: (empty(), finish())))
    for n in sizes:
        if n > dev.info.limits.max_alloc:
            continue
        d = run(ctx.buffer, reserve=n)
        owned.append(d)
        host = pageable(n)
        impls[f"htod.pageable.{n}.call"] = on_gl_thread(timed_each(lambda d=d, host=host: d.write(host), finish))
        impls[f"htod.pageable.{n}"] = on_gl_thread(timed(lambda d=d, host=host: (d.write(host), finish())))
        impls[f"dtoh.pageable.{n}"] = on_gl_thread(timed(lambda d=d, host=host: d.read_into(host)))

    def release() -> None:
        for obj in reversed(owned):
            obj.release()

    return impls, [lambda: run(release)]


def _dispatcher(ctx: Any, name: str, owned: list[Any]) -> Callable[[], None]:
    """On the GL thread: a function that dispatches kernel ``name`` once (its program, uniform block and
    buffers made here, once). The committed source leaves the block size out; a raw program declares it."""
    version, _, body = str(kernels.source(name, "glsl430")).partition("\n")
    program = ctx.compute_shader(f"{version}\nlayout(local_size_x = 1, local_size_y = 1, local_size_z = 1) in;\n{body}")
    scalars = pack_scalars(kernels.SCALARS[name])
    uniform = ctx.buffer(scalars + bytes(-len(scalars) % 16))
    buffers = [ctx.buffer(reserve=kernels.KERNEL_BYTES) for _ in range(kernels.BUFFERS[name])]
    owned += [program, uniform, *buffers]
    barrier = ctx.memory_barrier

    def dispatch() -> None:
        for binding, buf in enumerate(buffers):
            buf.bind_to_storage_buffer(binding)
        uniform.bind_to_uniform_block(0)
        program.run(1, 1, 1)
        barrier()

    return dispatch
