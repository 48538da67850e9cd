"""Kernels: SPIR-V (or GLSL through glslangValidator) to shader modules, compute pipelines and the
descriptor machinery that binds a launch's buffers.

The argument convention lives here: buffers are storage buffers set 0, bindings 0..k-1; scalars one
push-constant block; the block size specialization constants 0, 1, 2. Pipelines are cached per (kernel,
block, argument layout), pipeline layouts per argument layout, what a launch records per kernel and argument
types (``LaunchBinding``), descriptor sets per argument layout and buffer ranges (``DescriptorSets``).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
import weakref
from functools import lru_cache, partial
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ... import api, glslang
from ...api import Dim3
from ...errors import CompileError, InvalidArgument, NotAvailable
from . import native
from .spirv import spirv_interfaces

if TYPE_CHECKING:
    from .device import VulkanDevice

SPIRV_VAL = "spirv-val"
#: what a descriptor binds: (VkBuffer, offset, bytes), a buffer's ``VulkanBuffer._binds``
Binds = tuple[Any, int, int]
#: ``struct`` codes of the scalar argument types (``api._SCALAR_CAPABILITY``'s keys)
_STRUCT_CODES = {np.float32: "f", np.int32: "i", np.uint32: "I", np.float64: "d", np.int64: "q", np.uint64: "Q"}


class DescriptorPool:
    """A VkDescriptorPool and the descriptor sets made from it, one per (set layout, exact buffer ranges in
    order): a launch that binds the same ranges as an earlier one gets the earlier set (a set is never
    written after it is made). Who owns the pool decides when its sets may go: a graph keeps its own while
    it lives; the device's ``DescriptorSets`` keeps one pool for every stream's launches."""

    SETS = 256
    DESCRIPTORS = 1024

    def __init__(self, dev: VulkanDevice):
        vk = native.vk
        ffi = vk.ffi
        size = ffi.new("VkDescriptorPoolSize*", {"type": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                 "descriptorCount": self.DESCRIPTORS})
        info = ffi.new("VkDescriptorPoolCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, "maxSets": self.SETS,
            "poolSizeCount": 1, "pPoolSizes": size,
        })
        out = ffi.new("VkDescriptorPool*")
        native.call.vkCreateDescriptorPool(dev._handle, info, ffi.NULL, out)
        self.handle = out[0]
        self.sets_left, self.descriptors_left = self.SETS, self.DESCRIPTORS
        self.sets: dict[tuple[Any, ...], Any] = {}  # (set layout, bound ranges) -> the set made for them
        self._keys_of: dict[Any, list[tuple[Any, ...]]] = {}  # VkBuffer -> the keys of the sets that bind it

    def allocate(self, dev: VulkanDevice, set_layout: Any, ranges: list[Binds]) -> Any:
        """The descriptor set of ``set_layout`` binding ``ranges`` (each buffer's ``VulkanBuffer._binds``) at
        bindings 0..k-1 (a ``VkDescriptorSet[1]``), made now unless made before; None when a new set does not
        fit in the pool."""
        key = (set_layout, *ranges)
        made = self.sets.get(key)
        if made is not None:
            return made
        if self.sets_left < 1 or self.descriptors_left < len(ranges):
            return None
        vk = native.vk
        ffi, lib = vk.ffi, vk.lib
        layouts = ffi.new("VkDescriptorSetLayout[1]", [set_layout])
        info = ffi.new("VkDescriptorSetAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, "descriptorPool": self.handle,
            "descriptorSetCount": 1, "pSetLayouts": layouts})
        out = ffi.new("VkDescriptorSet[1]")
        native.call.vkAllocateDescriptorSets(dev._handle, info, out)
        self.sets_left -= 1
        self.descriptors_left -= len(ranges)
        infos = ffi.new("VkDescriptorBufferInfo[]", [
            {"buffer": buffer, "offset": offset, "range": nbytes} for buffer, offset, nbytes in ranges])
        writes = ffi.new("VkWriteDescriptorSet[]", [
            {"sType": vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, "dstSet": out[0], "dstBinding": i,
             "descriptorCount": 1, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "pBufferInfo": infos + i}
            for i in range(len(ranges))])
        lib.vkUpdateDescriptorSets(dev._handle, len(ranges), writes, 0, ffi.NULL)
        self.sets[key] = out
        for buffer, _, _ in ranges:
            self._keys_of.setdefault(buffer, []).append(key)
        return out

    def forget(self, vk_buffer: Any) -> None:
        """No later lookup finds a set that binds ``vk_buffer`` (being destroyed)."""
        for key in self._keys_of.pop(vk_buffer, ()):
            self.sets.pop(key, None)

    def reset(self, dev: VulkanDevice) -> None:
        native.call.vkResetDescriptorPool(dev._handle, self.handle, 0)
        self.sets_left, self.descriptors_left = self.SETS, self.DESCRIPTORS
        self.sets.clear()
        self._keys_of.clear()

    def destroy(self, dev: VulkanDevice) -> None:
        native.vk.lib.vkDestroyDescriptorPool(dev._handle, self.handle, native.vk.ffi.NULL)


class DescriptorSets:
    """The descriptor sets of every stream's launches, kept across launches and batches in one current
    pool (so back-to-back launches on the same buffers write no descriptors, as a raw program that makes
    its set once). A set is looked up by what it binds, the VkBuffer ranges themselves, so a freed buffer
    whose range is reused binds correctly; when a VkBuffer is destroyed its sets are forgotten (its handle
    may come back for another buffer). A full pool is retired: its sets are forgotten at once, and the pool
    is reset for reuse once the work every stream enqueued until then has completed (called under the
    device lock)."""

    def __init__(self, dev: VulkanDevice):
        self._dev = dev
        self._pool: DescriptorPool | None = None
        self._spare: list[DescriptorPool] = []  # retired pools whose work completed, reset
        self._pools: list[DescriptorPool] = []  # every pool made, destroyed with the device

    def get(self, set_layout: Any, ranges: list[Binds]) -> Any:
        """The set binding ``ranges`` (at most ``DescriptorPool.DESCRIPTORS`` of them), made if need be."""
        pool = self._pool
        made = None if pool is None else pool.allocate(self._dev, set_layout, ranges)
        if made is None:
            made = self._next_pool().allocate(self._dev, set_layout, ranges)
        return made

    def _next_pool(self) -> DescriptorPool:
        dev = self._dev
        retired = self._pool
        if retired is not None:
            points = [(s, s._pending_value()) for s in dev._busy]
            dev._release_after(points, lambda: self._recycle(retired))
        if self._spare:
            self._pool = self._spare.pop()
        else:
            self._pool = DescriptorPool(dev)
            self._pools.append(self._pool)
        return self._pool

    def _recycle(self, pool: DescriptorPool) -> None:
        pool.reset(self._dev)
        self._spare.append(pool)

    def forget(self, vk_buffer: Any) -> None:
        """``vk_buffer`` is being destroyed: no later launch may bind a set that names it (a retired pool's
        sets are never bound again)."""
        if self._pool is not None:
            self._pool.forget(vk_buffer)

    def destroy(self) -> None:
        for pool in self._pools:
            pool.destroy(self._dev)
        self._pools.clear()
        self._spare.clear()
        self._pool = None


class PipelineLayouts:
    """The (VkPipelineLayout, VkDescriptorSetLayout) of each argument layout (buffers, push-constant bytes)."""

    def __init__(self, dev: VulkanDevice):
        self._dev = dev
        self._layouts: dict[tuple[int, int], tuple[Any, Any]] = {}

    def get(self, n_buffers: int, scalar_bytes: int) -> tuple[Any, Any]:
        key = (n_buffers, scalar_bytes)
        cached = self._layouts.get(key)
        if cached is not None:
            return cached
        vk = native.vk
        ffi, lib = vk.ffi, vk.lib
        extra = self._dev.info.extra
        if n_buffers > extra["max_storage_buffers"]:
            raise InvalidArgument("Stream.launch", f"{n_buffers} buffer arguments; the device binds at most "
                                  f"{extra['max_storage_buffers']} storage buffers per kernel")
        if scalar_bytes > extra["max_push_constants"]:
            raise InvalidArgument("Stream.launch", f"scalar arguments take {scalar_bytes} bytes; the device's push "
                                  f"constants hold {extra['max_push_constants']}")
        bindings = ffi.new("VkDescriptorSetLayoutBinding[]", [
            {"binding": i, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "descriptorCount": 1,
             "stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT} for i in range(n_buffers)] or 1)
        set_info = ffi.new("VkDescriptorSetLayoutCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, "bindingCount": n_buffers,
            "pBindings": bindings})
        set_layout = ffi.new("VkDescriptorSetLayout*")
        native.call.vkCreateDescriptorSetLayout(self._dev._handle, set_info, ffi.NULL, set_layout)
        push = ffi.new("VkPushConstantRange*", {"stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT, "offset": 0,
                                                "size": scalar_bytes})
        layout_info = ffi.new("VkPipelineLayoutCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, "setLayoutCount": 1, "pSetLayouts": set_layout,
            "pushConstantRangeCount": 1 if scalar_bytes else 0, "pPushConstantRanges": push if scalar_bytes else ffi.NULL,
        })
        layout = ffi.new("VkPipelineLayout*")
        try:
            native.call.vkCreatePipelineLayout(self._dev._handle, layout_info, ffi.NULL, layout)
        except BaseException:
            lib.vkDestroyDescriptorSetLayout(self._dev._handle, set_layout[0], ffi.NULL)
            raise
        cached = self._layouts[key] = (layout[0], set_layout[0])
        return cached

    def destroy(self) -> None:
        ffi, lib = native.vk.ffi, native.vk.lib
        for layout, set_layout in self._layouts.values():
            lib.vkDestroyPipelineLayout(self._dev._handle, layout, ffi.NULL)
            lib.vkDestroyDescriptorSetLayout(self._dev._handle, set_layout, ffi.NULL)
        self._layouts.clear()


class ShaderResources:
    """A module's VkShaderModule and the pipelines made from it, held apart from the VulkanModule so that a
    module dropped unclosed is collected (its finalizer releases these: ``VulkanDevice._release_module``)."""

    __slots__ = ("shader", "pipelines")

    def __init__(self, shader: Any, pipelines: dict[Any, Any]):
        self.shader, self.pipelines = shader, pipelines

    def destroy(self, device_handle: Any) -> None:
        ffi, lib = native.vk.ffi, native.vk.lib
        for pipeline in self.pipelines.values():
            lib.vkDestroyPipeline(device_handle, pipeline, ffi.NULL)
        self.pipelines.clear()
        lib.vkDestroyShaderModule(device_handle, self.shader, ffi.NULL)


class VulkanModule(api.Module):
    """A VkShaderModule and its compute pipelines, one per (entry point, block, argument layout)."""

    def __init__(self, device: VulkanDevice, lang: str, code: bytes):
        super().__init__(device, lang)
        self._interfaces = spirv_interfaces(code)
        if not self._interfaces:
            raise CompileError("Device.compile", lang, "the SPIR-V module has no GLCompute OpEntryPoint")
        validated = validate_spirv(code, lang, device._spirv_target_env)
        messages = device._instance.messages
        seen = len(messages)
        vk = native.vk
        ffi = vk.ffi
        words = ffi.new("char[]", code)
        info = ffi.new("VkShaderModuleCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, "codeSize": len(code),
            "pCode": ffi.cast("uint32_t*", words),
        })
        out = ffi.new("VkShaderModule*")
        native.call.vkCreateShaderModule(device._handle, info, ffi.NULL, out)
        self._handle = out[0]
        if not validated:  # the validation layer, when on, checked the module inside vkCreateShaderModule
            verdict = [m for m in messages[seen:] if "SPIR-V module not valid" in m or "ShaderModuleCreateInfo-pCode" in m]
            if verdict:
                vk.lib.vkDestroyShaderModule(device._handle, self._handle, ffi.NULL)
                messages[:] = [m for m in messages if m not in verdict]  # reported by the error instead
                raise CompileError("Device.compile", lang, "\n".join(verdict))
        self._pipelines: dict[tuple[str, Dim3, int, int], Any] = {}
        self._resources = ShaderResources(self._handle, self._pipelines)
        device._modules.add(self._resources)
        self._dropped = weakref.finalize(self, device._dropped.append,
                                         partial(device._release_module, self._resources))
        self._dropped.atexit = False  # at exit the device's close destroys them

    def _release(self) -> None:
        self._dropped.detach()
        self.device._release_module(self._resources)

    def _kernel_names(self) -> Sequence[str]:
        return list(self._interfaces)

    def _make_kernel(self, name: str) -> api.Kernel:
        return VulkanKernel(self, name)

    def _check_scalars(self, name: str, scalar_bytes: int) -> None:
        """What ``Kernel.params`` cannot say (``Stream.launch`` has checked the arguments against them): a
        push-constant block laid out other than the natural packing."""
        expects = self._interfaces[name]
        if scalar_bytes != expects.scalar_bytes:
            raise InvalidArgument(
                "Stream.launch",
                f"kernel {name!r} has a {expects.scalar_bytes}-byte push-constant block, but its scalar arguments pack "
                f"into {scalar_bytes} bytes: declare the block's members in order, without explicit offsets",
            )

    def _check_block(self, name: str, block: Dim3) -> None:
        """A block other than the kernel's fixed LocalSize."""
        expects = self._interfaces[name]
        if expects.fixed_block is not None and block != expects.fixed_block:
            raise InvalidArgument(
                "Stream.launch",
                f"kernel {name!r} has a fixed block {expects.fixed_block}, got {block}: declare "
                "layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in; to choose it at launch",
            )

    def _pipeline(self, name: str, block: Dim3, n_buffers: int, scalar_bytes: int, layout: Any) -> Any:
        key = (name, block, n_buffers, scalar_bytes)
        pipeline = self._pipelines.get(key)
        if pipeline is None:
            pipeline = self._pipelines[key] = self._create_pipeline(name, block, layout)
        return pipeline

    def _create_pipeline(self, name: str, block: Dim3, layout: Any) -> Any:
        vk = native.vk
        ffi = vk.ffi
        entries = ffi.new("VkSpecializationMapEntry[3]", [
            {"constantID": i, "offset": 4 * i, "size": 4} for i in range(3)])
        data = ffi.new("uint32_t[3]", list(block))
        spec = ffi.new("VkSpecializationInfo*", {"mapEntryCount": 3, "pMapEntries": entries, "dataSize": 12, "pData": data})
        c_name = ffi.new("char[]", name.encode())
        info = ffi.new("VkComputePipelineCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            "stage": {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      "stage": vk.VK_SHADER_STAGE_COMPUTE_BIT, "module": self._handle, "pName": c_name,
                      "pSpecializationInfo": spec},
            "layout": layout,
        })
        out = ffi.new("VkPipeline*")
        dev: VulkanDevice = self.device  # type: ignore[assignment]  # a VulkanModule's device is a VulkanDevice
        native.call.vkCreateComputePipelines(dev._handle, dev._pipeline_cache, 1, info, ffi.NULL, out)
        return out[0]



class VulkanKernel(api.Kernel):
    """An entry point of a VulkanModule; its parameters come from the module's SPIR-V (``spirv.py``).

    SPIR-V keeps buffers (descriptor bindings) and scalars (push-constant members) apart, so ``params`` lists
    every buffer first, in binding order, then the scalars in push-constant order: where a buffer sat among
    the scalars in the source is not in the module."""

    module: VulkanModule
    _positional = False  # buffers match the buffer parameters in order, scalars the scalar ones

    def _params(self) -> tuple[api.Param, ...]:
        return self.module._interfaces[self.name].params

    def _prepare_args(self, types: tuple[type, ...], buffers: tuple[int, ...]) -> LaunchBinding:
        return LaunchBinding(self, types, buffers)


class LaunchBinding:
    """How a launch of one kernel with one sequence of argument types is recorded, worked out once (the
    kernel's ``_prepare_args``): the positions of the buffers, each scalar's position and the padding
    before it in the push constants, the pipeline layout, and the pipeline of each block. A launch then
    only packs its scalars, finds its descriptor set and records its commands."""

    __slots__ = ("kernel", "buffers", "scalars", "scalar_bytes", "packer", "take_scalars", "float32", "layout",
                 "layout_handle", "set_layout", "pipelines")

    def __init__(self, kernel: VulkanKernel, types: tuple[type, ...], buffers: tuple[int, ...]):
        op = "Stream.launch"
        module = kernel.module
        dev: VulkanDevice = module.device  # type: ignore[assignment]  # a VulkanModule's device is a VulkanDevice
        dev._check_open(op)
        self.kernel, self.buffers = kernel, buffers
        scalars: list[tuple[int, bytes]] = []
        layout = "="  # struct's native byte order with standard sizes and no alignment of its own
        offset = 0
        for i, t in enumerate(types):
            if i not in buffers:
                size = np.dtype(t).itemsize
                pad = -offset % size  # as api.pack_scalars: each scalar aligned to its own size
                scalars.append((i, bytes(pad)))
                layout += f"{pad}x{_STRUCT_CODES[t]}"
                offset += pad + size
        self.scalars, self.scalar_bytes = tuple(scalars), offset
        self.packer = struct.Struct(layout)
        positions = tuple(i for i, _ in scalars)
        # the scalar arguments in order, as a tuple (an itemgetter of one position returns the item alone)
        self.take_scalars = (itemgetter(*positions) if len(positions) > 1
                             else lambda args: tuple([args[i] for i in positions]))
        self.float32 = tuple(i for i, t in enumerate(types) if t is np.float32)
        module._check_scalars(kernel.name, offset)
        if len(buffers) > DescriptorPool.DESCRIPTORS:
            raise InvalidArgument(op, f"{len(buffers)} buffer arguments; a launch binds at most {DescriptorPool.DESCRIPTORS}")
        with dev._lock:
            self.layout, self.set_layout = dev._layouts.get(len(buffers), offset)
        self.layout_handle = dev._record.handle(self.layout)
        self.pipelines: dict[Dim3, Any] = {}  # block -> the pipeline's handle, as the device's Recording takes it

    def pack(self, args: list[Any]) -> bytes:
        """The push-constant bytes of the scalar arguments, as ``api.pack_scalars`` packs them: by ``struct``
        (several times faster than joining ``tobytes()``), except that a float32 NaN keeps its bits as given
        (struct converts through a double, which would quiet a signalling NaN)."""
        for i in self.float32:
            if args[i] != args[i]:
                return b"".join([pad + args[i].tobytes() for i, pad in self.scalars])
        return self.packer.pack(*self.take_scalars(args))

    def pipeline(self, block: Dim3) -> Any:
        """The pipeline for ``block`` (its handle, as the device's ``Recording`` takes it), checked and made at its
        first launch (the launch checked the device is open); kept here for the next launches of up to 256 blocks."""
        kernel = self.kernel
        kernel.module._check_block(kernel.name, block)
        dev: VulkanDevice = kernel.module.device  # type: ignore[assignment]
        with dev._lock:
            pipeline = dev._record.handle(
                kernel.module._pipeline(kernel.name, block, len(self.buffers), self.scalar_bytes, self.layout))
            if len(self.pipelines) < 256:
                self.pipelines[block] = pipeline
        return pipeline


def spirv_target_env(api_version: int) -> str:
    """spirv-val's ``--target-env`` for a device's Vulkan version (capped at 1.3, the instance's version)."""
    return f"vulkan1.{min((api_version >> 12) & 0x3FF, 3)}"


def validate_spirv(code: bytes, lang: str, target_env: str) -> bool:
    """Reject a module spirv-val finds invalid before any driver sees it (lavapipe and SwiftShader crash on
    some, e.g. an OpAccessChain index out of range): CompileError with the validator's message. False when
    spirv-val is not installed (apt-get install spirv-tools), so nothing was checked here."""
    tool = shutil.which(SPIRV_VAL)
    if tool is None:
        return False
    log = _spirv_val_log(tool, bytes(code), target_env)
    if log:
        raise CompileError("Device.compile", lang, log)
    return True


@lru_cache(maxsize=256)
def _spirv_val_log(tool: str, code: bytes, target_env: str) -> str:
    """spirv-val's complaint about ``code`` ("" when valid), remembered: suites compile the same kernels often."""
    proc = subprocess.run([tool, "--target-env", target_env, "-"], input=code, capture_output=True)
    if proc.returncode == 0:
        return ""
    return (proc.stdout + proc.stderr).decode("utf-8", "replace").strip() or f"{SPIRV_VAL} exited with {proc.returncode}"


def compile_glsl(source: str, options: tuple[str, ...]) -> bytes:
    """GLSL -> SPIR-V with glslangValidator (in time: ``glslang.run``); ``-e NAME`` renames ``main`` to NAME."""
    extra = list(options)
    if "-e" in extra and "--source-entrypoint" not in extra:
        extra += ["--source-entrypoint", "main"]
    with tempfile.TemporaryDirectory(prefix="ironaccel-glsl-") as tmp:
        src, out = Path(tmp) / "kernel.comp", Path(tmp) / "kernel.spv"
        src.write_text(source, encoding="utf-8")
        proc = glslang.run("glsl", ["-V", "--target-env", "vulkan1.2", *extra, "-o", str(out), str(src)])
        if proc.returncode != 0 or not out.exists():
            raise CompileError("Device.compile", "glsl", (proc.stdout + proc.stderr).strip())
        return out.read_bytes()
