"""The peer libraries, each doing the same operations its own way: cuda.core, CuPy and PyTorch.

A peer that does not import, or finds no GPU, is listed as unavailable with the reason; one that cannot do
an operation loses that column only (``stats.measure``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import kernels
from .cases import ALLOC_BYTES, Impl, pageable
from .stats import timed, timed_each, timed_then, why

#: The peers' distributions, whose versions a report records (beside ``results.PACKAGES``).
DISTRIBUTIONS = ("cuda-core", "cupy-cuda13x", "cupy-cuda12x", "torch")


def cuda_peers(sizes: tuple[int, ...], cleanup: list[Callable[[], None]]) -> tuple[dict[str, dict[str, Impl]], dict[str, str]]:
    """The implementations of every peer that loads, by name, and why the others did not."""
    found: dict[str, dict[str, Impl]] = {}
    unavailable: dict[str, str] = {}
    for name, make in (("cuda.core", _cuda_core_peer), ("CuPy", _cupy_peer), ("PyTorch", _torch_peer)):
        try:
            found[name] = make(sizes, cleanup)
        except Exception as exc:
            unavailable[name] = why(exc)
    return found, unavailable


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
    program = cc.Program(kernels.cuda_source(), code_type="c++", options=cc.ProgramOptions(arch=f"sm_{arch}"))
    code = program.compile("ptx")
    empty, four_args = code.get_kernel(kernels.EMPTY), code.get_kernel(kernels.FOUR_ARGS)
    x, y = dev.allocate(kernels.KERNEL_BYTES, stream=s), dev.allocate(kernels.KERNEL_BYTES, stream=s)
    s.sync()
    config = cc.LaunchConfig(grid=1, block=1)
    launch = cc.launch
    empty_args = (x, *kernels.SCALARS[kernels.EMPTY])
    four_args_args = (x, y, *kernels.SCALARS[kernels.FOUR_ARGS])

    def one() -> None:
        launch(s, config, empty, *empty_args)

    impls["launch.async"] = timed_then(one, s.sync)
    impls["launch.args4"] = timed_then(lambda: launch(s, config, four_args, *four_args_args), s.sync)
    impls["launch.single"] = timed_each(one, s.sync)
    impls["launch.sync"] = timed(lambda: (one(), s.sync()))
    cleanup.append(lambda: (x.close(), y.close(), s.close()))
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
    module = cp.RawModule(code=kernels.cuda_source())
    empty, four_args = module.get_function(kernels.EMPTY), module.get_function(kernels.FOUR_ARGS)
    x, y = cp.empty(kernels.KERNEL_BYTES // 4, cp.float32), cp.empty(kernels.KERNEL_BYTES // 4, cp.float32)
    empty_args = (x, *kernels.SCALARS[kernels.EMPTY])
    four_args_args = (x, y, *kernels.SCALARS[kernels.FOUR_ARGS])

    def one() -> None:
        empty((1,), (1,), empty_args)

    impls["launch.async"] = timed_then(one, s.synchronize)
    impls["launch.args4"] = timed_then(lambda: four_args((1,), (1,), four_args_args), s.synchronize)
    impls["launch.single"] = timed_each(one, s.synchronize)
    impls["launch.sync"] = timed(lambda: (one(), s.synchronize()))
    for n in sizes:
        d = cp.empty(n, cp.uint8)
        for memory, host in (("pageable", pageable(n)), ("pinned", cupyx.empty_pinned(n, np.uint8))):
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
