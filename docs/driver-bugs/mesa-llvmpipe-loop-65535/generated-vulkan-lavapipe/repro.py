"""test_semantics.py::test_long_loop_runs_every_iteration[65536] on vulkan/lavapipe: a standalone reproducer written by `ironaccel repro` (ironaccel 0.1.0).

The conformance test test_semantics.py::test_long_loop_runs_every_iteration[65536] (clauses SEM-6) fails on vulkan/lavapipe
(llvmpipe (LLVM 15.0.6, 256 bits), driver Mesa 22.3.6 (LLVM 15.0.6)); the suite said (xfail):
    vulkan-lavapipe.txt: lavapipe (Mesa llvmpipe, LLVM 15) ends a loop after 65,535 iterations and silently
    returns the 65,535-iteration result (issue 12 item 7): a driver bug the suite detects (busy with 65,536
    and 100,003 iterations), not ours to work around Failed: a 65536-iteration loop gave wrong values: those
    of 65535 iterations (the loop stopped early)

Launch 1 of its 1 kernel launch(es), `busy` (spirv) over a grid of
(1, 1, 1) blocks of (32, 1, 1) threads, leaves values that differ from those cuda/fake
computes from the same inputs. This script makes that one launch through the Vulkan API (the `vulkan` package's cffi bindings) alone (no ironaccel) and
compares each buffer with the reference's values ("want"); "ironaccel saw" is what the suite read back on
vulkan/lavapipe where it differs from what this script reads.

Needs: pip install numpy vulkan.  Run: python3 repro.py
Exit status 1 and the wrong values when the driver shows the bug, 0 when every value is right.
"""

import base64
import io
import os
import re
import sys

import numpy as np

# The driver under test, chosen as ironaccel chose it (loaders read these when they start: the script restarts
# itself once with them; a variable already set in your environment wins).
ENVIRONMENT = {'VK_DRIVER_FILES': '/usr/share/vulkan/icd.d/lvp_icd.x86_64.json', 'VK_ICD_FILENAMES': '/usr/share/vulkan/icd.d/lvp_icd.x86_64.json'}
if any(k not in os.environ for k in ENVIRONMENT):
    os.execve(sys.executable, [sys.executable, *sys.argv], {**ENVIRONMENT, **os.environ})

DEVICE = 'llvmpipe\\ \\(LLVM\\ 15\\.0\\.6,\\ 256\\ bits\\)'  # the device the test failed on (a regular expression)
ENTRY = 'busy'
LANG = 'spirv'
OPTIONS = ()  # the compiler options the suite passed
GRID = (1, 1, 1)
BLOCK = (32, 1, 1)
ARGS = [('buffer', 0), ('scalar', '<u4', 65536), ('scalar', '<u4', 32)]  # in launch order: ("buffer", k) or ("scalar", dtype, value)
BUFFERS = 1
SOURCE = base64.b64decode((
    b"AwIjBwAFAQALAAgAPgAAAAAAAAARAAIAAQAAAAsABgABAAAAR0xTTC5zdGQuNDUwAAAAAA4AAwAAAAAAAQAAAA8ACAAFAAAABAAA"
    b"AGJ1c3kAAAAACwAAABMAAAA1AAAAEAAGAAQAAAARAAAAAQAAAAEAAAABAAAAAwADAAIAAADCAQAABQAEAAQAAABidXN5AAAAAAUA"
    b"AwAIAAAAaQAAAAUACAALAAAAZ2xfR2xvYmFsSW52b2NhdGlvbklEAAAABQAEABEAAABBcmdzAAAAAAYABQARAAAAAAAAAGl0ZXJz"
    b"AAAABgAEABEAAAABAAAAbgAAAAUABAATAAAAYXJncwAAAAAFAAMAHgAAAHYAAAAFAAMAIAAAAGsAAAAFAAMAMwAAAE91dAAGAAUA"
    b"MwAAAAAAAABkYXRhAAAAAAUABAA1AAAAb3V0XwAAAABHAAQACwAAAAsAAAAcAAAASAAFABEAAAAAAAAAIwAAAAAAAABIAAUAEQAA"
    b"AAEAAAAjAAAABAAAAEcAAwARAAAAAgAAAEcABAAyAAAABgAAAAQAAABIAAQAMwAAAAAAAAAZAAAASAAFADMAAAAAAAAAIwAAAAAA"
    b"AABHAAMAMwAAAAIAAABHAAQANQAAACIAAAAAAAAARwAEADUAAAAhAAAAAAAAAEcABAA6AAAAAQAAAAAAAABHAAQAOwAAAAEAAAAB"
    b"AAAARwAEADwAAAABAAAAAgAAAEcABAA9AAAACwAAABkAAAATAAIAAgAAACEAAwADAAAAAgAAABUABAAGAAAAIAAAAAAAAAAgAAQA"
    b"BwAAAAcAAAAGAAAAFwAEAAkAAAAGAAAAAwAAACAABAAKAAAAAQAAAAkAAAA7AAQACgAAAAsAAAABAAAAKwAEAAYAAAAMAAAAAAAA"
    b"ACAABAANAAAAAQAAAAYAAAAeAAQAEQAAAAYAAAAGAAAAIAAEABIAAAAJAAAAEQAAADsABAASAAAAEwAAAAkAAAAVAAQAFAAAACAA"
    b"AAABAAAAKwAEABQAAAAVAAAAAQAAACAABAAWAAAACQAAAAYAAAAUAAIAGQAAACsABAAUAAAAJwAAAAAAAAArAAQABgAAACwAAAAN"
    b"ZhkAKwAEAAYAAAAuAAAAX/NuPB0AAwAyAAAABgAAAB4AAwAzAAAAMgAAACAABAA0AAAADAAAADMAAAA7AAQANAAAADUAAAAMAAAA"
    b"IAAEADgAAAAMAAAABgAAADIABAAGAAAAOgAAAAEAAAAyAAQABgAAADsAAAABAAAAMgAEAAYAAAA8AAAAAQAAADMABgAJAAAAPQAA"
    b"ADoAAAA7AAAAPAAAADYABQACAAAABAAAAAAAAAADAAAA+AACAAUAAAA7AAQABwAAAAgAAAAHAAAAOwAEAAcAAAAeAAAABwAAADsA"
    b"BAAHAAAAIAAAAAcAAABBAAUADQAAAA4AAAALAAAADAAAAD0ABAAGAAAADwAAAA4AAAA+AAMACAAAAA8AAAA9AAQABgAAABAAAAAI"
    b"AAAAQQAFABYAAAAXAAAAEwAAABUAAAA9AAQABgAAABgAAAAXAAAArgAFABkAAAAaAAAAEAAAABgAAAD3AAMAHAAAAAAAAAD6AAQA"
    b"GgAAABsAAAAcAAAA+AACABsAAAD9AAEA+AACABwAAAA9AAQABgAAAB8AAAAIAAAAPgADAB4AAAAfAAAAPgADACAAAAAMAAAA+QAC"
    b"ACEAAAD4AAIAIQAAAPYABAAjAAAAJAAAAAAAAAD5AAIAJQAAAPgAAgAlAAAAPQAEAAYAAAAmAAAAIAAAAEEABQAWAAAAKAAAABMA"
    b"AAAnAAAAPQAEAAYAAAApAAAAKAAAALAABQAZAAAAKgAAACYAAAApAAAA+gAEACoAAAAiAAAAIwAAAPgAAgAiAAAAPQAEAAYAAAAr"
    b"AAAAHgAAAIQABQAGAAAALQAAACsAAAAsAAAAgAAFAAYAAAAvAAAALQAAAC4AAAA+AAMAHgAAAC8AAAD5AAIAJAAAAPgAAgAkAAAA"
    b"PQAEAAYAAAAwAAAAIAAAAIAABQAGAAAAMQAAADAAAAAVAAAAPgADACAAAAAxAAAA+QACACEAAAD4AAIAIwAAAD0ABAAGAAAANgAA"
    b"AAgAAAA9AAQABgAAADcAAAAeAAAAQQAGADgAAAA5AAAANQAAACcAAAA2AAAAPgADADkAAAA3AAAA/QABADgAAQA="
))
# SOURCE is spirv compiled from this source (the suite's file of kernel 'busy'):
#   #version 450
#   layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
#   // out[i] = iters steps of the LCG v = v*1664525 + 1013904223 from v = i: a kernel that takes a while
#   layout(set = 0, binding = 0) writeonly buffer Out { uint data[]; } out_;
#   layout(push_constant) uniform Args { uint iters; uint n; } args;
#
#   void main() {
#       uint i = gl_GlobalInvocationID.x;
#       if (i >= args.n) return;
#       uint v = i;
#       for (uint k = 0u; k < args.iters; ++k) v = v * 1664525u + 1013904223u;
#       out_.data[i] = v;
#   }
# per buffer k: in<k> (its bytes before the launch), expected<k> (cuda/fake's after), observed<k> (vulkan/lavapipe's)
DATA = np.load(io.BytesIO(base64.b64decode((
    b"UEsDBC0AAAAIAAAAIQDcNF4+//////////8HABQAaW4wLm5weQEAEAAAAQAAAAAAAEkAAAAAAAAAm+wX6hsQychQxlCtnpJanFyk"
    b"bqWgXlNqqK6joJ6WX1RSlJgXn1+UkgoSd0vMKU4FihdnJBakAvkahkYWOpo6CrUKZAOupQMMAFBLAwQtAAAACAAAACEA5oi3I///"
    b"////////DQAUAGV4cGVjdGVkMC5ucHkBABAAAAEAAAAAAADKAAAAAAAAAJvsF+obEMnIUMZQrZ6SWpxcpG6loF5Taqiuo6Cell9U"
    b"UpSYF59flJIKEndLzClOBYoXZyQWpAL5GoZGFjqaOgq1CmQDLgaGpS8YGTItmBh0O5gZPl5nYdiqzspQWc7GYHucnYFRnIPhaBon"
    b"Q+c2LgZfNm4GwTAehqtLeRlmfuVjiHXlZ1CcKsDw9Ikgw0oTIYbcFmEGwysiDF+VRRl2Fosx1B4WZ3AUlmBgTZZkOLlJiqGXSZoh"
    b"MEiGQXSRLMPNj3IMcx3lGRInAgBQSwMELQAAAAgAAAAhAJcse+7//////////w0AFABvYnNlcnZlZDAubnB5AQAQAAABAAAAAAAA"
    b"zgAAAAAAAACb7BfqGxDJyFDGUK2eklqcXKRupaBeU2qorqOgnpZfVFKUmBefX5SSChJ3S8wpTgWKF2ckFqQC+RqGRhY6mjoKtQpk"
    b"A66n/OefrMpoXpp/0DzNROqN2s+iBc/3nQ5Z0azCmelRu1eT91rhq0t6aqunt9/KjnnQp6No6fz22cTva1e/Wp1X4JygbzpH5MOv"
    b"Lyc27PetLWxZZmjk+f/pJ76IWZsvb/ArmcHJbBqbtP2r0u7sbc+FFcrX5FwxLzza8cNMznbn77KPlQfOL7UCAFBLAQItAy0AAAAI"
    b"AAAAIQDcNF4+SQAAAAABAAAHAAAAAAAAAAAAAACAAQAAAABpbjAubnB5UEsBAi0DLQAAAAgAAAAhAOaItyPKAAAAAAEAAA0AAAAA"
    b"AAAAAAAAAIABggAAAGV4cGVjdGVkMC5ucHlQSwECLQMtAAAACAAAACEAlyx77s4AAAAAAQAADQAAAAAAAAAAAAAAgAGLAQAAb2Jz"
    b"ZXJ2ZWQwLm5weVBLBQYAAAAAAwADAKsAAACYAgAAAAA="
))))

import struct  # noqa: E402

import vulkan  # noqa: E402  (after ENVIRONMENT: the loader picks the driver)

ffi, vk = vulkan.ffi, vulkan.lib


def check(result: int, call: str) -> None:
    if result != 0:
        sys.exit(f"{call} failed: VkResult {result}")


def make(ctype: str, create, *args):
    """Call a vkCreate*/vkAllocate* function whose last argument receives the new handle; return it."""
    out = ffi.new(ctype + "*")
    check(create(*args, out), create.__name__)
    return out[0]


def physical_device(instance):
    count = ffi.new("uint32_t*")
    check(vk.vkEnumeratePhysicalDevices(instance, count, ffi.NULL), "vkEnumeratePhysicalDevices")
    devices = ffi.new("VkPhysicalDevice[]", count[0])
    check(vk.vkEnumeratePhysicalDevices(instance, count, devices), "vkEnumeratePhysicalDevices")
    names = []
    for pd in devices:
        props = ffi.new("VkPhysicalDeviceProperties*")
        vk.vkGetPhysicalDeviceProperties(pd, props)
        names.append(ffi.string(props.deviceName).decode())
        if re.search(DEVICE, names[-1], re.I):
            version = props.apiVersion
            print(f"device: {names[-1]} (Vulkan {version >> 22}.{(version >> 12) & 0x3FF}.{version & 0xFFF}, "
                  f"driver version {props.driverVersion:#x}, vendor {props.vendorID:#06x})")
            return pd
    sys.exit(f"no Vulkan device is {DEVICE!r}: {names}")


def run(inputs: list[bytes]) -> list[bytes]:
    """One dispatch with the Vulkan API (the `vulkan` package's cffi bindings): the SPIR-V module, storage
    buffers at set 0 bindings 0..k-1 in host-visible coherent memory, the scalars as push constants at offset
    0, the block size as specialization constants 0, 1, 2 (local_size_{x,y,z}_id)."""
    app = ffi.new("VkApplicationInfo*", {"sType": vk.VK_STRUCTURE_TYPE_APPLICATION_INFO,
                                          "apiVersion": (1 << 22) | (1 << 12)})
    instance = make("VkInstance", vk.vkCreateInstance, ffi.new("VkInstanceCreateInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, "pApplicationInfo": app}), ffi.NULL)
    pd = physical_device(instance)
    count = ffi.new("uint32_t*")
    vk.vkGetPhysicalDeviceQueueFamilyProperties(pd, count, ffi.NULL)
    families = ffi.new("VkQueueFamilyProperties[]", count[0])
    vk.vkGetPhysicalDeviceQueueFamilyProperties(pd, count, families)
    family = next(i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT)
    priority = ffi.new("float[]", [1.0])
    queue_info = ffi.new("VkDeviceQueueCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                                      "queueFamilyIndex": family, "queueCount": 1,
                                                      "pQueuePriorities": priority})
    device = make("VkDevice", vk.vkCreateDevice, pd, ffi.new("VkDeviceCreateInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, "queueCreateInfoCount": 1,
        "pQueueCreateInfos": queue_info}), ffi.NULL)
    queue = ffi.new("VkQueue*")
    vk.vkGetDeviceQueue(device, family, 0, queue)
    memory_props = ffi.new("VkPhysicalDeviceMemoryProperties*")
    vk.vkGetPhysicalDeviceMemoryProperties(pd, memory_props)
    host = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT

    buffers, mapped = [], []
    for data in inputs:
        data = padded(data)
        buf = make("VkBuffer", vk.vkCreateBuffer, device, ffi.new("VkBufferCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, "size": len(data),
            "usage": vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, "sharingMode": vk.VK_SHARING_MODE_EXCLUSIVE}), ffi.NULL)
        need = ffi.new("VkMemoryRequirements*")
        vk.vkGetBufferMemoryRequirements(device, buf, need)
        kind = next(i for i in range(memory_props.memoryTypeCount) if need.memoryTypeBits & (1 << i)
                    and memory_props.memoryTypes[i].propertyFlags & host == host)
        mem = make("VkDeviceMemory", vk.vkAllocateMemory, device, ffi.new("VkMemoryAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, "allocationSize": need.size,
            "memoryTypeIndex": kind}), ffi.NULL)
        check(vk.vkBindBufferMemory(device, buf, mem, 0), "vkBindBufferMemory")
        ptr = ffi.new("void**")
        check(vk.vkMapMemory(device, mem, 0, len(data), 0, ptr), "vkMapMemory")
        view = ffi.buffer(ptr[0], len(data))
        view[:] = data
        buffers.append(buf)
        mapped.append(view)

    bindings = ffi.new("VkDescriptorSetLayoutBinding[]", [
        {"binding": i, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "descriptorCount": 1,
         "stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT} for i in range(len(buffers))])
    set_layout = make("VkDescriptorSetLayout", vk.vkCreateDescriptorSetLayout, device, ffi.new(
        "VkDescriptorSetLayoutCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                             "bindingCount": len(buffers), "pBindings": bindings}), ffi.NULL)
    scalars = pack_scalars()
    push = ffi.new("VkPushConstantRange*", {"stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT, "offset": 0,
                                            "size": len(padded(scalars))})
    set_layouts = ffi.new("VkDescriptorSetLayout[]", [set_layout])
    layout = make("VkPipelineLayout", vk.vkCreatePipelineLayout, device, ffi.new("VkPipelineLayoutCreateInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, "setLayoutCount": 1, "pSetLayouts": set_layouts,
        "pushConstantRangeCount": 1 if scalars else 0, "pPushConstantRanges": push if scalars else ffi.NULL}), ffi.NULL)
    code = ffi.new("char[]", SOURCE)
    shader = make("VkShaderModule", vk.vkCreateShaderModule, device, ffi.new("VkShaderModuleCreateInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, "codeSize": len(SOURCE),
        "pCode": ffi.cast("uint32_t*", code)}), ffi.NULL)
    entries = ffi.new("VkSpecializationMapEntry[]", [{"constantID": i, "offset": 4 * i, "size": 4} for i in range(3)])
    spec_data = ffi.new("char[]", struct.pack("<3I", *BLOCK))
    spec = ffi.new("VkSpecializationInfo*", {"mapEntryCount": 3, "pMapEntries": entries, "dataSize": 12,
                                             "pData": spec_data})
    name = ffi.new("char[]", ENTRY.encode())
    pipeline = make("VkPipeline", vk.vkCreateComputePipelines, device, ffi.NULL, 1, ffi.new(
        "VkComputePipelineCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, "layout": layout,
            "stage": {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      "stage": vk.VK_SHADER_STAGE_COMPUTE_BIT, "module": shader, "pName": name,
                      "pSpecializationInfo": spec}}), ffi.NULL)

    sizes = ffi.new("VkDescriptorPoolSize*", {"type": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              "descriptorCount": max(1, len(buffers))})
    pool = make("VkDescriptorPool", vk.vkCreateDescriptorPool, device, ffi.new("VkDescriptorPoolCreateInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, "maxSets": 1, "poolSizeCount": 1,
        "pPoolSizes": sizes}), ffi.NULL)
    descriptor_set = make("VkDescriptorSet", vk.vkAllocateDescriptorSets, device, ffi.new(
        "VkDescriptorSetAllocateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                         "descriptorPool": pool, "descriptorSetCount": 1, "pSetLayouts": set_layouts}))
    infos = [ffi.new("VkDescriptorBufferInfo*", {"buffer": b, "offset": 0, "range": len(view)})
             for b, view in zip(buffers, mapped)]
    writes = ffi.new("VkWriteDescriptorSet[]", [
        {"sType": vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, "dstSet": descriptor_set, "dstBinding": i,
         "descriptorCount": 1, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "pBufferInfo": info}
        for i, info in enumerate(infos)])
    vk.vkUpdateDescriptorSets(device, len(buffers), writes, 0, ffi.NULL)

    commands = make("VkCommandPool", vk.vkCreateCommandPool, device, ffi.new("VkCommandPoolCreateInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, "queueFamilyIndex": family}), ffi.NULL)
    cmd = make("VkCommandBuffer", vk.vkAllocateCommandBuffers, device, ffi.new("VkCommandBufferAllocateInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": commands,
        "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, "commandBufferCount": 1}))
    check(vk.vkBeginCommandBuffer(cmd, ffi.new("VkCommandBufferBeginInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        "flags": vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT})), "vkBeginCommandBuffer")
    vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline)
    vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1,
                               ffi.new("VkDescriptorSet[]", [descriptor_set]), 0, ffi.NULL)
    if scalars:
        vk.vkCmdPushConstants(cmd, layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, len(padded(scalars)),
                              ffi.new("char[]", padded(scalars)))
    vk.vkCmdDispatch(cmd, *GRID)
    barrier = ffi.new("VkMemoryBarrier*", {"sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                           "srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT,
                                           "dstAccessMask": vk.VK_ACCESS_HOST_READ_BIT})
    vk.vkCmdPipelineBarrier(cmd, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, vk.VK_PIPELINE_STAGE_HOST_BIT, 0,
                            1, barrier, 0, ffi.NULL, 0, ffi.NULL)
    check(vk.vkEndCommandBuffer(cmd), "vkEndCommandBuffer")
    fence = make("VkFence", vk.vkCreateFence, device, ffi.new("VkFenceCreateInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO}), ffi.NULL)
    submit = ffi.new("VkSubmitInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, "commandBufferCount": 1,
                                       "pCommandBuffers": ffi.new("VkCommandBuffer[]", [cmd])})
    check(vk.vkQueueSubmit(queue[0], 1, submit, fence), "vkQueueSubmit")
    check(vk.vkWaitForFences(device, 1, ffi.new("VkFence[]", [fence]), 1, 60 * 10**9), "vkWaitForFences")
    return [bytes(view[:len(data)]) for view, data in zip(mapped, inputs)]


def pack_scalars() -> bytes:
    """The scalar arguments in order, each at an offset aligned to its own size (the layout the kernel reads)."""
    out = b""
    for arg in ARGS:
        if arg[0] == "scalar":
            value = np.array(arg[2], dtype=np.dtype(arg[1]))
            out += bytes(-len(out) % value.itemsize) + value.tobytes()
    return out


def padded(data: bytes, unit: int = 4) -> bytes:
    """``data`` grown to a whole number of ``unit``s (at least one): buffer and uniform sizes must be."""
    return data + bytes(-len(data) % unit) if data else bytes(unit)


def words(data: bytes) -> np.ndarray:
    """A buffer's bytes as the 32-bit words most kernels write (bytes when the size is not a multiple of 4)."""
    return np.frombuffer(data, np.uint32 if len(data) % 4 == 0 else np.uint8)


def main() -> int:
    inputs = [DATA[f"in{k}"].tobytes() for k in range(BUFFERS)]
    outputs = run(inputs)
    wrong = 0
    for k, got in enumerate(outputs):
        want, seen = DATA[f"expected{k}"].tobytes(), DATA[f"observed{k}"].tobytes()
        g, w, s = words(got), words(want), words(seen)
        bad = np.flatnonzero(g != w)
        print(f"buffer {k} ({len(g)} x {g.dtype}): " + ("ok" if bad.size == 0 else f"WRONG: {bad.size} differ"))
        for i in bad[:8]:
            print(f"  [{i}] got {g[i]:#x}, want {w[i]:#x}" + ("" if s[i] == g[i] else f" (ironaccel saw {s[i]:#x})"))
        wrong += bad.size
    print("the driver gives wrong values: the bug reproduces" if wrong else "every value is right: no bug here")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
