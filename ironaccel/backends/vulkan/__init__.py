"""The Vulkan backend, over the ``vulkan`` cffi package (imported lazily: the package loads without it).

How the shared API maps onto Vulkan:

* **Device** — one VkInstance (validation layer and a debug-utils messenger when ``IRONACCEL_VK_VALIDATION=1``
  or ``open_device(..., validation=True)``; with its synchronization validation for ``sync``: ``instance``), one
  physical device, one logical device with up to four queues of a compute-capable family. Physical devices older
  than Vulkan 1.2 (no timeline semaphores) are not listed.
* **Stream** — a timeline semaphore and a command pool (handed to the next new stream when the stream is
  collected: the device keeps only streams with work outstanding); streams take the device's queues in turn.
  Work is recorded into the stream's open command buffer (a full memory barrier between commands keeps stream
  order) and submitted
  without a host wait: at once when the stream's earlier submissions have completed and its last one is
  ``SUBMIT_GAP_S`` old (so work starts at once on an idle device); within a burst of commands (a submission
  costs several recorded launches) the batch stays open until ``record``, ``synchronize``,
  ``Device.synchronize``, ``BATCH_COMMANDS`` commands, or the device's flusher thread, which submits it
  ``SUBMIT_GAP_S`` after the stream's last submission, so a burst's last commands start without a host call
  (a command that finds the device still busy leaves the submission to the flusher, and the next command
  asks the device again ``SUBMIT_GAP_S`` later). A submission's structures are made once per stream and
  filled in. Each submission waits for the stream's previous value and for the events passed to ``wait``,
  and signals the next value. The host waits only when ``MAX_IN_FLIGHT`` submissions are outstanding, and
  ``synchronize(timeout=)`` waits are finite: past the timeout they raise Timeout naming the op.
* **Event** — a (stream, timeline value) pair; ``timing=True`` adds a timestamp query. Host-side work that a
  submission owes (filling a ``copy_dtoh`` destination from staging, recycling staging memory, command
  buffers and full descriptor pools) runs when any event/stream/device query or wait sees it complete.
* **Memory** — buffers are sub-allocated (256-byte aligned) from ``BLOCK_SIZE`` VkDeviceMemory blocks, each
  bound whole to one VkBuffer; large ones get their own. ``Buffer.handle`` is that VkBuffer and
  ``VulkanBuffer.offset`` the buffer's byte offset in it. Copies go through host-visible staging memory
  (freed large staging blocks are kept for the next copies); when
  device memory is itself host-visible, coherent and cached (lavapipe, SwiftShader) and the stream has no
  work outstanding, copies and fills touch the mapped memory directly (``IRONACCEL_VK_DIRECT_MAPPING=0`` turns
  that off, so CPU drivers exercise the staging path discrete GPUs take). The host's side of a copy of 4 MiB
  or more is spread over threads (``ironaccel.hostcopy``): the memcpy, not the DMA, is most of a large
  pageable copy's time, and it was one thread's. A freed buffer's range is reused only
  once every stream has finished the work enqueued before the free. Robust buffer access is on where the
  device has it (``DeviceInfo.extra["robust_buffer_access"]``) and each descriptor binds only its buffer's
  range, so a kernel's out-of-bounds access never reaches another buffer.
* **Graphs** — ``Stream.capture`` records the stream's launches, fills and ``copy_dtod`` into a secondary
  command buffer (with the barriers a batch has), and ``Graph.launch`` executes it as one command of the
  replaying stream's batch; descriptor sets and staging live as long as the graph (``graph``).
* **Kernels** — ``lang="spirv"`` (bytes; kernel names are the GLCompute OpEntryPoint names) and
  ``lang="glsl"`` (glslangValidator; the kernel is ``main``, or ``NAME`` with ``options=("-e", NAME)``).
  Buffers bind as storage buffers set 0, bindings 0..k-1; scalars are one push-constant block packed by
  ``api.pack_scalars``; the block size is specialization constants 0, 1, 2. Pipelines are cached per
  (kernel, block, argument layout), and what a launch records is worked out once per kernel and argument
  types (``module.LaunchBinding``); a launch skips the binds (pipeline, descriptor set, push constants) its
  command buffer already has, which last until the next batch or graph replay (``stream.Batch``). A
  launch's descriptor set is made once per (argument layout, exact buffer ranges in order) and kept across
  batches until its VkBuffer is destroyed or its pool fills. A launch's commands (and a graph replay's) are
  recorded in one call of the compiled extension where it is built, else one cffi call each
  (``record.Recording``). A module is validated by ``spirv-val`` before any driver sees it (by the validation layer when spirv-val is
  missing and validation is on): an invalid one is a CompileError.

Modules, one concern each, named as every backend names them (``ironaccel.backends``): ``native`` (loading
the package, the checked call proxy, VkResult errors), ``spirv`` (reading a module's kernel interface),
``instance`` (VkInstance, validation), ``memory`` (the sub-allocator, buffers), ``stream`` (streams, events,
timestamps), ``graph`` (captured work and its replay), ``record`` (recording a launch's and a replay's
commands), ``module`` (modules, kernels, pipelines, descriptors,
SPIR-V validation), ``device`` (the logical device and device-wide synchronisation), ``backend`` (the
registered Backend).
"""

from .backend import VulkanBackend
from .device import VulkanDevice, VulkanHandles
from .memory import VulkanBuffer
from .module import VulkanModule
from .spirv import KernelInterface, spirv_entry_points, spirv_interfaces
from .stream import VulkanEvent, VulkanStream

__all__ = ["VulkanBackend", "VulkanDevice", "VulkanStream", "VulkanEvent", "VulkanBuffer", "VulkanModule",
           "VulkanHandles", "KernelInterface", "spirv_entry_points", "spirv_interfaces"]
