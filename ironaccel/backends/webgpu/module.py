"""WGSL modules: the shader, its reflected interface, pipelines cached per (kernel, block), launch
validation cached per (kernel, block, binding sizes), and each kernel's dispatches (pipeline and bind group
with its uniform buffer) cached per (block, buffers, scalars)."""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Sequence

from ... import api
from ...errors import DriverError, InvalidArgument
from .native import call
from .reflect import reflect

if TYPE_CHECKING:
    from .device import WebGPUDevice

#: Dispatches kept per kernel: a loop relaunching a kernel on the same buffers and scalars reuses them.
DISPATCH_CACHE = 16


class WebGPUModule(api.Module):
    """A WGSL module. Bindings are read from the source: storage buffers 0..k-1, then one uniform at k."""

    def __init__(self, device: WebGPUDevice, source: str, shader: Any):
        super().__init__(device, "wgsl")
        import wgpu

        self._shader = shader
        self._interface = reflect(source)
        self._pipelines: dict[tuple[str, api.Dim3], Any] = {}
        self._validated: set[tuple[str, api.Dim3, tuple[int, ...]]] = set()
        u = wgpu.ShaderStage.COMPUTE
        storage = self._interface.storage_access
        entries = [{"binding": i, "visibility": u,
                    "buffer": {"type": "storage" if acc == "read_write" else "read-only-storage"}}
                   for i, acc in enumerate(storage)]
        if self._interface.has_uniform:
            entries.append({"binding": len(storage), "visibility": u, "buffer": {"type": "uniform"}})
        gpu = device._gpu
        self._bind_layout = call(gpu.create_bind_group_layout, entries=entries)
        self._layout = call(gpu.create_pipeline_layout, bind_group_layouts=[self._bind_layout])

    def _kernel_names(self) -> Sequence[str]:
        return self._interface.entry_points

    def _release(self) -> None:
        """Drop the module's wgpu objects (shader, layouts, pipelines, its kernels' bind groups): wgpu releases
        each when its last reference goes, and keeps what submitted work still uses until that work is done."""
        for kernel in self._kernels.values():
            kernel._dispatches.clear()  # type: ignore[attr-defined]
            kernel._last = None  # type: ignore[attr-defined]
        self._pipelines.clear()
        self._validated.clear()
        self._shader = self._bind_layout = self._layout = None

    def _make_kernel(self, name: str) -> api.Kernel:
        return WebGPUKernel(self, name)

    def _pipeline(self, name: str, block: api.Dim3) -> Any:
        key = (name, block)
        pipe = self._pipelines.get(key)
        if pipe is None:
            fixed = self._interface.fixed_block
            if fixed is not None and block != fixed:
                raise InvalidArgument("Stream.launch", f"kernel {name} has a fixed @workgroup_size{fixed}; "
                                      "declare `override BLOCK_X/BLOCK_Y/BLOCK_Z` to choose the block at launch")
            overrides = self._interface.overrides
            constants = {k: v for k, v in zip(("BLOCK_X", "BLOCK_Y", "BLOCK_Z"), block) if k in overrides}
            pipe = call(self.device._gpu.create_compute_pipeline, layout=self._layout,
                        compute={"module": self._shader, "entry_point": name, "constants": constants})
            self._pipelines[key] = pipe
        return pipe

    def _bind_group(self, buffers: tuple[Any, ...], packed: bytes) -> Any:
        """A new bind group of these GPU buffers and a new uniform buffer holding ``packed``."""
        dev = self.device
        entries = [{"binding": i, "resource": {"buffer": b}} for i, b in enumerate(buffers)]
        if self._interface.has_uniform:
            uniform = call(dev._gpu.create_buffer_with_data, data=packed, usage=dev._usage.UNIFORM)
            entries.append({"binding": len(buffers), "resource": {"buffer": uniform}})
        return call(dev._gpu.create_bind_group, layout=self._bind_layout, entries=entries)

    def _validate(self, name: str, block: api.Dim3, pipe: Any, group: Any, sizes: tuple[int, ...]) -> None:
        """Record this dispatch alone, of no workgroups, and finish it: WebGPU's validation of the dispatch
        (binding sizes against the shader's arrays, ...) runs now, not when the stream's batch is
        finished — where it would throw away every command batched with it. Submitted (it runs nothing):
        wgpu-native never frees what a command buffer that is finished but not submitted holds (the
        pipeline and bind group: ~220 KiB a module on lavapipe)."""
        key = (name, block, sizes)
        if key in self._validated:
            return
        gpu = self.device._gpu
        encoder = gpu.create_command_encoder()
        p = encoder.begin_compute_pass()
        p.set_pipeline(pipe)
        p.set_bind_group(0, group)
        p.dispatch_workgroups(0, 0, 0)
        p.end()
        try:
            commands = call(encoder.finish)
        except DriverError as err:
            raise InvalidArgument("Stream.launch", f"kernel {name} cannot be dispatched with these buffers: {err}") from None
        call(gpu.queue.submit, [commands])
        self._validated.add(key)


def forget_dispatch(users: dict[int, list[tuple[Any, tuple]]], kernel_ref: Any, key: tuple) -> None:
    """Drop a cached dispatch's entries (``kernel_ref``'s, keyed ``key``) from the device's ``_dispatch_users``,
    one under each GPU buffer it binds: an entry left under a live buffer keeps the key, and with it the other
    GPU buffers, for as long as that buffer lives (KERNEL-152). The caller holds the device lock."""
    entry = (kernel_ref, key)
    for buffer in key[1:]:  # the block, then its GPU buffers and its scalars' bytes
        entries = None if isinstance(buffer, bytes) else users.get(id(buffer))
        if entries and entry in entries:
            entries.remove(entry)
            if not entries:
                del users[id(buffer)]


class WebGPUKernel(api.Kernel):
    # Storage buffers and the uniform block are separate binding spaces: buffer arguments bind in their
    # order and scalars pack in theirs, however the two are interleaved in the call.
    _positional = False

    def __init__(self, module: WebGPUModule, name: str):
        super().__init__(module, name)
        #: (pipeline, bind group) by (block, GPU buffers..., each scalar's bytes...), least recently used first
        self._dispatches: OrderedDict[tuple, tuple[Any, Any]] = OrderedDict()
        #: the last launch's (block, a getter of each argument: a weak reference for buffers, dispatch) (see Stream)
        self._last: tuple[api.Dim3, list[Any], tuple[Any, Any]] | None = None
        self._ref = weakref.ref(self)  # what the device's _dispatch_users holds of it

    def _prepare_args(self, types: tuple[type, ...], buffers: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The positions of the buffers and of the scalars, which key a launch's cached dispatch."""
        return buffers, tuple(i for i in range(len(types)) if i not in buffers)

    def _dispatch(self, key: tuple, block: api.Dim3, buffers: tuple[Any, ...], scalars: list[Any]) -> tuple[Any, Any]:
        """Make, validate and cache the pipeline and bind group a launch with ``key`` dispatches (the caller
        holds the device lock)."""
        module: WebGPUModule = self.module  # type: ignore[assignment]
        packed = b""
        if scalars:
            packed = api.pack_scalars(scalars)
            packed += bytes(-len(packed) % 16)
        pipe = module._pipeline(self.name, block)
        group = module._bind_group(buffers, packed)
        module._validate(self.name, block, pipe, group, tuple(b.size for b in buffers))
        self._dispatches[key] = dispatch = pipe, group  # the one object: a release compares it with _last's
        users = module.device._dispatch_users  # type: ignore[attr-defined]
        for buffer in buffers:  # a buffer's release drops the entry (WebGPUBuffer._release)
            users.setdefault(id(buffer), []).append((self._ref, key))
        if len(self._dispatches) > DISPATCH_CACHE:
            evicted, _ = self._dispatches.popitem(last=False)
            forget_dispatch(users, self._ref, evicted)
        return dispatch

    def _params(self) -> tuple[api.Param, ...]:
        return self.module._interface.params  # type: ignore[attr-defined]
