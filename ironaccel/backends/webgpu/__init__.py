"""WebGPU backend over wgpu-py: adapters as devices, one queue, WGSL kernels.

Decisions, written down here because WebGPU leaves them to us:

* Devices are the adapters of wgpu's compute-complete backends (Vulkan, Metal, D3D12); OpenGL adapters
  are skipped (no storage-buffer atomics guarantees, no timestamps).
* ``limits.max_alloc`` is the largest buffer usable everywhere a buffer is, kernels included:
  ``max-storage-buffer-binding-size``.
* All Stream objects share the device's single queue, so each keeps its own order and a cross-stream wait
  only has to flush the recorded stream. A stream batches its commands in one open encoder and submits it
  when it must (before a ``write_buffer``, at ``record``/``synchronize``/``copy_dtoh``); back-to-back
  launches share one compute pass (WebGPU orders and makes visible the writes of one dispatch to the
  next within a pass), which anything else recorded ends.
* Threads: one device lock serialises what touches the shared queue and the device-wide readback list
  (recording, submitting, delivering readbacks); waits for the GPU happen outside it.
* WebGPU copies need 4-byte aligned offsets and sizes; the API promises byte granularity, so unaligned
  copies and non-zero fills run an internal WGSL kernel that merges bytes into whole words.
* ``copy_dtoh`` copies into a mappable readback buffer; the host array is filled when the stream, the
  device or an event recorded after it is synchronized (or queried complete), or when a later ``copy_dtoh``
  would hold more than 256 MiB of readback buffers pending (it then waits for the earlier ones).
* Fences are copies into small mappable buffers, mapped (wgpu-py's map is the only completion signal that
  works in 0.32) by the first thread that needs it: a waiter without a timeout maps it itself; ``record``,
  ``query`` and waits with a timeout leave it to a thread of ours, since the map can block until the GPU
  is idle. A ``copy_dtoh``'s readback is the fence of everything submitted before it, and a ``record`` or
  ``synchronize`` with nothing recorded or submitted since the last fence reuses that fence.
* WebGPU validates a dispatch only when its encoder is finished, which would lose the work batched before
  it: each new (kernel, block, binding sizes) is validated alone in a throwaway encoder at launch, so a bad
  launch is an error at ``Stream.launch`` and earlier work still runs.

Modules (named as every backend names them: ``ironaccel.backends``): ``native`` (loading wgpu, the one place
wgpu errors become ours), ``reflect`` (WGSL bindings, uniform members, entry points), ``backend`` (the
registered Backend: the adapters it offers), ``device``, ``memory`` (buffers), ``module``, ``stream`` (streams,
events, the byte kernel).
"""

from .backend import WebGPUBackend
from .device import WebGPUDevice

__all__ = ["WebGPUBackend", "WebGPUDevice"]
