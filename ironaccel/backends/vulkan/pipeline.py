"""Kernels: SPIR-V (or GLSL through glslangValidator) to shader modules, compute pipelines and the
descriptor machinery that binds a launch's buffers.

The argument convention lives here: buffers are storage buffers set 0, bindings 0..k-1; scalars one
push-constant block; the block size specialization constants 0, 1, 2. Pipelines are cached per (kernel,
block, argument layout), pipeline layouts per argument layout.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ... import api
from ...api import Dim3
from ...errors import CompileError, InvalidArgument, NotAvailable
from . import native
from .spirv import spirv_interfaces

if TYPE_CHECKING:
    from .device import VulkanDevice
    from .memory import VulkanBuffer

GLSLANG = "glslangValidator"
SPIRV_VAL = "spirv-val"


class DescriptorPool:
    """A VkDescriptorPool for one batch's launches; reset and reused once that batch completes. Launches of
    the batch that bind the same buffer ranges share one descriptor set (a set is never written after it
    is made, and a range cannot be freed and reused while the batch that binds it is pending)."""

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
        self._sets: dict[tuple[Any, ...], Any] = {}  # (set layout, bound ranges) -> the set made for them

    def fits(self, descriptors: int) -> bool:
        return self.sets_left >= 1 and self.descriptors_left >= descriptors

    def allocate(self, dev: VulkanDevice, set_layout: Any, buffers: list[VulkanBuffer]) -> Any:
        """A descriptor set of ``set_layout`` binding ``buffers`` at bindings 0..k-1."""
        key = (set_layout, *((b._allocation.block.buffer, b._allocation.offset, b.nbytes) for b in buffers))
        made = self._sets.get(key)
        if made is not None:
            return made
        vk = native.vk
        ffi, lib = vk.ffi, vk.lib
        layouts = ffi.new("VkDescriptorSetLayout[1]", [set_layout])
        info = ffi.new("VkDescriptorSetAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, "descriptorPool": self.handle,
            "descriptorSetCount": 1, "pSetLayouts": layouts})
        out = ffi.new("VkDescriptorSet[1]")
        native.call.vkAllocateDescriptorSets(dev._handle, info, out)
        self.sets_left -= 1
        self.descriptors_left -= len(buffers)
        infos = ffi.new("VkDescriptorBufferInfo[]", [
            {"buffer": b._allocation.block.buffer, "offset": b._allocation.offset, "range": b.nbytes} for b in buffers])
        writes = ffi.new("VkWriteDescriptorSet[]", [
            {"sType": vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, "dstSet": out[0], "dstBinding": i,
             "descriptorCount": 1, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "pBufferInfo": infos + i}
            for i in range(len(buffers))])
        lib.vkUpdateDescriptorSets(dev._handle, len(buffers), writes, 0, ffi.NULL)
        self._sets[key] = out
        return out

    def reset(self, dev: VulkanDevice) -> None:
        native.call.vkResetDescriptorPool(dev._handle, self.handle, 0)
        self.sets_left, self.descriptors_left = self.SETS, self.DESCRIPTORS
        self._sets.clear()


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
        device._modules.append(self)

    def _kernel_names(self) -> Sequence[str]:
        return list(self._interfaces)

    def _make_kernel(self, name: str) -> api.Kernel:
        return VulkanKernel(self, name)

    def _check_launch(self, name: str, block: Dim3, scalar_bytes: int) -> None:
        """What ``Kernel.params`` cannot say (``Stream.launch`` has checked the arguments against them): a
        push-constant block laid out other than the natural packing, and a fixed LocalSize."""
        expects = self._interfaces[name]
        if scalar_bytes != expects.scalar_bytes:
            raise InvalidArgument(
                "Stream.launch",
                f"kernel {name!r} has a {expects.scalar_bytes}-byte push-constant block, but its scalar arguments pack "
                f"into {scalar_bytes} bytes: declare the block's members in order, without explicit offsets",
            )
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

    def _destroy(self, device_handle: Any) -> None:
        ffi, lib = native.vk.ffi, native.vk.lib
        for pipeline in self._pipelines.values():
            lib.vkDestroyPipeline(device_handle, pipeline, ffi.NULL)
        lib.vkDestroyShaderModule(device_handle, self._handle, ffi.NULL)


class VulkanKernel(api.Kernel):
    """An entry point of a VulkanModule; its parameters come from the module's SPIR-V (``spirv.py``).

    SPIR-V keeps buffers (descriptor bindings) and scalars (push-constant members) apart, so ``params`` lists
    every buffer first, in binding order, then the scalars in push-constant order: where a buffer sat among
    the scalars in the source is not in the module."""

    module: VulkanModule
    _positional = False  # buffers match the buffer parameters in order, scalars the scalar ones

    def _params(self) -> tuple[api.Param, ...]:
        return self.module._interfaces[self.name].params


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
    """GLSL -> SPIR-V with glslangValidator; ``-e NAME`` renames ``main`` to NAME."""
    tool = shutil.which(GLSLANG)
    if tool is None:
        raise NotAvailable("vulkan", GLSLANG, "not found on PATH: apt-get install glslang-tools")
    extra = list(options)
    if "-e" in extra and "--source-entrypoint" not in extra:
        extra += ["--source-entrypoint", "main"]
    with tempfile.TemporaryDirectory(prefix="ironaccel-glsl-") as tmp:
        src, out = Path(tmp) / "kernel.comp", Path(tmp) / "kernel.spv"
        src.write_text(source)
        proc = subprocess.run([tool, "-V", "--target-env", "vulkan1.2", *extra, "-o", str(out), str(src)],
                              capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            raise CompileError("Device.compile", "glsl", (proc.stdout + proc.stderr).strip())
        return out.read_bytes()
