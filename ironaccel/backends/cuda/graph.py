"""Graphs: CUDA stream capture, instantiated once and replayed with ``cuGraphLaunch``.

A capture runs on a private non-blocking stream of the device (``CudaStream._work`` points at it
meanwhile), never on the stream itself: the legacy default stream cannot be captured, and the stream's own
handle stays usable for what is not captured (its ``synchronize`` waits for the work enqueued before the
capture; a buffer freed meanwhile is freed on it, not into the graph). Relaxed capture mode: allocating
(``Device.alloc`` waits on its own stream) stays allowed while a capture is open. The executable graph is
independent of the captured one, which is destroyed at once. The device holds every executable graph not
yet destroyed and destroys them when it closes; a graph collected unclosed has its executable destroyed by
the device's next capture (never while one is open: a collector may run inside it) or close.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from ... import api
from . import native
from .native import calls, fail

if TYPE_CHECKING:
    from .device import CudaDevice
    from .stream import CudaStream


class CudaGraph(api.Graph):
    def __init__(self, device: CudaDevice):
        super().__init__(device)
        self._exec: Any = None  # the CUgraphExec, once the capture ended

    def _launch(self, stream: api.Stream) -> None:
        s: CudaStream = stream  # type: ignore[assignment]
        dev: CudaDevice = self._device  # type: ignore[assignment]
        if native.current.device != dev._id:
            dev._make_current()
        for buf in self._buffers.values():  # a later free is ordered after this replay
            backing = buf._backing("Graph.launch")
            if backing._last_stream is not s:
                backing._used_on(s)
        launch = native.cu.cuGraphLaunch
        err, = launch(self._exec, s._work)
        if err:
            fail(launch, err)

    def _instantiated(self, handle: Any) -> None:
        dev: CudaDevice = self._device  # type: ignore[assignment]
        self._exec = handle
        dev._graphs[int(handle)] = handle
        self._dropped = weakref.finalize(self, dev._dropped_graphs.append, int(handle))
        self._dropped.atexit = False  # at exit the device's close destroys it

    def _release(self) -> None:
        self._dropped.detach()
        dev: CudaDevice = self._device  # type: ignore[assignment]
        dev._make_current()
        calls.cuGraphExecDestroy(dev._graphs.pop(int(self._exec)))
        self._exec = None


def destroy_dropped(dev: CudaDevice) -> None:
    """Destroy the executables of the graphs collected unclosed, unless a capture is open (then at the next
    capture or close): the caller made the device's context current."""
    while dev._dropped_graphs and not dev._capturing:  # pop by pop: a collector may append meanwhile
        handle = dev._graphs.pop(dev._dropped_graphs.pop(), None)
        if handle is not None:
            calls.cuGraphExecDestroy(handle)


def begin_capture(stream: CudaStream) -> CudaGraph:
    dev = stream._dev
    dev._make_current()
    destroy_dropped(dev)
    cu = native.cu
    handle = dev._capture_streams.pop() if dev._capture_streams else \
        calls.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING)
    try:
        calls.cuStreamBeginCapture(handle, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
    except Exception:
        dev._capture_streams.append(handle)
        raise
    dev._capturing.add(int(handle))
    stream._work, stream._work_address = handle, int(handle)
    return CudaGraph(dev)


def end_capture(stream: CudaStream, graph: CudaGraph, keep: bool) -> None:
    dev = stream._dev
    handle, stream._work, stream._work_address = stream._work, stream._handle, stream._address
    dev._make_current()
    captured = None
    try:
        captured = calls.cuStreamEndCapture(handle)
        if keep:
            graph._instantiated(calls.cuGraphInstantiate(captured, 0))
    finally:
        dev._capturing.discard(int(handle))
        if captured is not None:
            dev._capture_streams.append(handle)
            calls.cuGraphDestroy(captured)
        else:  # the capture may still be open on it: the next capture gets a new stream
            native.cu.cuStreamDestroy(handle)
