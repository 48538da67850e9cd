"""GRAPH: stream capture into a Graph and its replay (optional: the "graphs" capability)."""

from __future__ import annotations

import gc
import time
import weakref

import numpy as np
import pytest

import ironaccel as ia
from ironaccel.backends import get as get_backend

from .helpers import (POISON, RunningWork, assert_device_works, ceil_div, child_json, context_current, cuda_driver,
                      poisoned, raises_naming, random_bytes, read, resident_growth, rng, upload)

N = 1000


def add_one(stream, kernels, buf, n: int = N) -> None:
    stream.launch(kernels("add_one"), ceil_div(n, 128), 128, (buf, np.uint32(n)))


@pytest.mark.clause("GRAPH-1")
def test_captured_work_runs_only_when_launched(device, stream, kernels, require):
    require("graphs")
    with poisoned(device, stream, 4 * N) as buf:
        stream.fill(buf, 0)
        with stream.capture() as graph:
            for _ in range(3):
                add_one(stream, kernels, buf)
        assert isinstance(graph, ia.Graph)
        np.testing.assert_array_equal(read(stream, buf, np.uint32), 0)  # nothing ran while capturing
        graph.launch(stream)
        np.testing.assert_array_equal(read(stream, buf, np.uint32), 3)
        other = device.create_stream()
        graph.launch(other)  # any stream of the device replays it
        graph.launch(other)
        np.testing.assert_array_equal(read(other, buf, np.uint32), 9)
        graph.close()
        graph.close()  # idempotent


@pytest.mark.clause("GRAPH-2")
def test_replay_keeps_capture_order_and_stream_order(device, stream, kernels, require):
    require("graphs")
    fill_u32 = kernels("fill_u32")
    with poisoned(device, stream, 4 * N) as a, poisoned(device, stream, 4 * N) as b:
        with stream.capture() as graph:
            stream.fill(a, 0)  # a = 0
            stream.launch(fill_u32, ceil_div(N, 128), 128, (a, np.uint32(40), np.uint32(N // 2)))  # a[:N/2] = 40
            add_one(stream, kernels, a)  # a + 1
            stream.copy_dtod(b, a, 4 * N)  # b = a
            add_one(stream, kernels, a, N // 4)  # a[:N/4] + 1, after the copy
        want_a = np.concatenate([np.full(N // 4, 42), np.full(N // 4, 41), np.full(N // 2, 1)]).astype(np.uint32)
        want_b = np.concatenate([np.full(N // 2, 41), np.full(N // 2, 1)]).astype(np.uint32)
        with graph:
            stream.fill(b, 7)  # uncaptured work before a replay runs before it ...
            graph.launch(stream)
            np.testing.assert_array_equal(read(stream, a, np.uint32), want_a)
            np.testing.assert_array_equal(read(stream, b, np.uint32), want_b)
            graph.launch(stream)
            add_one(stream, kernels, b)  # ... and work after it, after it
            np.testing.assert_array_equal(read(stream, a, np.uint32), want_a)
            np.testing.assert_array_equal(read(stream, b, np.uint32), want_b + 1)


@pytest.mark.clause("GRAPH-3")
def test_parameters_by_value_buffers_by_contents(device, stream, kernels, require):
    require("graphs")
    saxpy = kernels("saxpy")
    x1, y1 = rng(1).standard_normal(N).astype(np.float32), rng(2).standard_normal(N).astype(np.float32)
    with upload(device, stream, x1) as bx, upload(device, stream, y1) as by:
        a = np.float32(2.0)
        with stream.capture() as graph:
            stream.launch(saxpy, ceil_div(N, 64), 64, (bx, by, a, np.uint32(N)))
            a = np.float32(5.0)  # a new scalar after the launch was captured changes nothing
            stream.launch(saxpy, ceil_div(N, 64), 64, (bx, by, np.float32(-1.0), np.uint32(N)))
        with graph:
            graph.launch(stream)
            np.testing.assert_allclose(read(stream, by, np.float32), x1 + y1, rtol=1e-6, atol=1e-6)
            x2 = rng(3).standard_normal(N).astype(np.float32)
            stream.copy_htod(bx, x2)  # a replay reads the buffers as they are then
            stream.copy_htod(by, y1)
            graph.launch(stream)
            np.testing.assert_allclose(read(stream, by, np.float32), x2 + y1, rtol=1e-6, atol=1e-6)
        assert a == 5.0


@pytest.mark.clause("GRAPH-4")
def test_capture_errors(device, stream, kernels, require):
    require("graphs")
    host = np.zeros(N, np.uint32)
    with poisoned(device, stream, 4 * N) as buf:
        event = stream.record()
        with stream.capture() as graph:
            rejected = {
                "Stream.copy_htod": lambda: stream.copy_htod(buf, host),
                "Stream.copy_dtoh": lambda: stream.copy_dtoh(host, buf),
                "Stream.record": lambda: stream.record(),
                "Stream.wait": lambda: stream.wait(event),
                "Stream.capture": lambda: stream.capture().__enter__(),
            }
            for op, call in rejected.items():
                with raises_naming(ia.InvalidArgument, op, "capturing"):
                    call()
            with raises_naming(ia.InvalidArgument, "Graph.launch", "still being captured"):
                graph.launch(stream)
            stream.fill(buf, 3)
        stream.synchronize()
        assert (host == 0).all()
        np.testing.assert_array_equal(read(stream, buf, np.uint8), POISON)  # rejected work left nothing behind
        graph.launch(stream)
        np.testing.assert_array_equal(read(stream, buf, np.uint8), 3)
        graph.close()
        with raises_naming(ia.UseAfterFree, "Graph.launch", "a graph was used after it was closed"):
            graph.launch(stream)
        with raises_naming(ia.InvalidArgument, "Graph.launch", "stream"):
            graph.launch("not a stream")

        with pytest.raises(ZeroDivisionError):  # an exception inside the block discards the capture
            with stream.capture() as broken:
                stream.fill(buf, 9)
                1 / 0
        with raises_naming(ia.UseAfterFree, "Graph.launch", "a graph was used after it was closed"):
            broken.launch(stream)
        np.testing.assert_array_equal(read(stream, buf, np.uint8), 3)
        with stream.capture() as scoped:
            stream.fill(buf, 4)
        with scoped:  # a with block closes the graph at its end
            scoped.launch(stream)
        with raises_naming(ia.UseAfterFree, "Graph.launch", "a graph was used after it was closed"):
            scoped.launch(stream)
        np.testing.assert_array_equal(read(stream, buf, np.uint8), 4)

    scratch = device.alloc(64)
    with stream.capture() as uses_freed:
        stream.fill(scratch, 1)
    scratch.free()
    with raises_naming(ia.UseAfterFree, "Graph.launch", "64-byte buffer"):
        uses_freed.launch(stream)
    uses_freed.close()
    assert_device_works(device, kernels)


CAPTURED_USES = {  # how the captured work uses the buffer that is freed before the replay
    "a launch": lambda stream, kernels, out, buf: add_one(stream, kernels, buf),
    "a fill": lambda stream, kernels, out, buf: stream.fill(buf, 2),
    "copy_dtod's dst": lambda stream, kernels, out, buf: stream.copy_dtod(buf, out, 4 * N),
    "copy_dtod's src": lambda stream, kernels, out, buf: stream.copy_dtod(out, buf, 4 * N),
}


@pytest.mark.clause("GRAPH-4")
@pytest.mark.parametrize("pooled", [False, True], ids=["plain", "pooled"])
@pytest.mark.parametrize("use", list(CAPTURED_USES))
def test_a_graph_whose_buffer_was_freed_replays_nothing(device, stream, kernels, require, use, pooled):
    """Every kind of captured work keeps the buffers it names (as the caller passed them: a pooled buffer, not
    its block) for Graph.launch to check: one freed since the capture stops the whole replay."""
    require("graphs")
    with ia.MemPool(device, stream) as pool, poisoned(device, stream, 4 * N) as out:
        buf = pool.alloc(4 * N) if pooled else device.alloc(4 * N)
        stream.fill(buf, 0)
        with stream.capture() as graph:
            stream.fill(out, 1)  # first in the replay: a replay that started shows in out
            CAPTURED_USES[use](stream, kernels, out, buf)
        buf.free()
        with graph:
            with raises_naming(ia.UseAfterFree, "Graph.launch", f"a {4 * N}-byte buffer the graph uses"):
                graph.launch(stream)
            assert (read(stream, out) == POISON).all(), "a graph whose buffer was freed ran"
    assert_device_works(device, kernels)


@pytest.mark.clause("GRAPH-4")
def test_a_graph_whose_module_was_closed_replays_nothing(device, stream, kernels, target, require):
    require("graphs")
    fill_u32 = target.compile_kernel(device, "fill_u32")  # a module of its own, closed below
    with poisoned(device, stream, 4 * N) as out, poisoned(device, stream, 4 * N) as buf:
        with stream.capture() as graph:
            stream.fill(out, 1)  # first in the replay: a replay that started shows in out
            stream.launch(fill_u32, ceil_div(N, 128), 128, (buf, np.uint32(5), np.uint32(N)))
        fill_u32.module.close()
        with graph:
            with raises_naming(ia.UseAfterFree, "Graph.launch", "module"):
                graph.launch(stream)
            assert (read(stream, out) == POISON).all() and (read(stream, buf) == POISON).all(), \
                "a graph whose module was closed ran"
    assert_device_works(device, kernels)


@pytest.mark.clause("GRAPH-4")
def test_a_graph_of_a_closed_device_replays_nothing(device, kernels, target, require):
    require("graphs")
    other = get_backend(device.info.backend).open_device(device.info.index)
    s = other.create_stream()
    a, b = other.alloc(4 * N), other.alloc(4 * N)
    with s.capture() as copies:  # no kernel: no module of the graph's to find the device closed
        s.fill(a, 1)
        s.copy_dtod(b, a, 4 * N)
    with s.capture() as launches:
        s.launch(target.compile_kernel(other, "add_one"), ceil_div(N, 128), 128, (a, np.uint32(N)))
    other.close()
    for graph in (copies, launches):
        with raises_naming(ia.UseAfterFree, "Graph.launch", "closed"):
            graph.launch(s)
        graph.close()  # nothing to give back on a closed device: no error
        graph.close()
    with raises_naming(ia.UseAfterFree, "Stream.capture", "closed"):
        with s.capture():
            pytest.fail("a closed device's stream began a capture")
    assert_device_works(device, kernels)


@pytest.mark.clause("GRAPH-5", "ERR-1")
def test_capture_unsupported_says_so(device, stream, kernels):
    if device.supports("graphs"):
        with stream.capture() as graph:
            pass
        graph.launch(stream)  # an empty capture replays as nothing
        graph.close()
    else:
        with raises_naming(ia.Unsupported, "Stream.capture", "graphs"):
            with stream.capture():
                pass
    assert_device_works(device, kernels)


@pytest.mark.clause("GRAPH-6")
def test_replay_of_any_alignment_and_length_outlives_close(device, stream, kernels, require):
    require("graphs")
    n = 4099
    data = random_bytes(n, 6)
    work = RunningWork(device, stream, kernels)
    try:
        with upload(device, stream, data) as src, poisoned(device, stream, n + 8) as dst, \
                poisoned(device, stream, 4 * N) as counter:
            stream.fill(counter, 0)
            with stream.capture() as graph:
                stream.copy_dtod(dst, src, n - 3, dst_offset=5, src_offset=1)  # odd offsets and length
                stream.fill(dst, 0x3C, offset=1, nbytes=3)  # unaligned edges only
                stream.fill(dst, 0x11, offset=n + 2, nbytes=3)
                for _ in range(300):  # more launches than one submission or descriptor pool of a backend holds
                    add_one(stream, kernels, counter)
            stream.synchronize()
            work.enqueue(stream)  # the replays queue behind running work: still pending when the graph closes
            graph.launch(stream)
            graph.launch(stream)  # twice in a row
            graph.close()
            scratch = [device.alloc(64) for _ in range(8)]  # what the closed graph held is not reused under it
            other = device.create_stream()
            for i, buf in enumerate(scratch):
                other.copy_htod(buf, np.full(64, i, np.uint8))
            other.synchronize()
            want = np.full(n + 8, POISON, np.uint8)
            want[5:n + 2] = data[1:n - 2]
            want[1:4] = 0x3C
            want[n + 2:n + 5] = 0x11
            np.testing.assert_array_equal(read(stream, counter, np.uint32), 600)
            np.testing.assert_array_equal(read(stream, dst), want)
            for buf in scratch:
                buf.free()
        work.check(stream)
    finally:
        work.free()
    assert_device_works(device, kernels)


@pytest.mark.clause("GRAPH-7")
def test_graphs_do_not_nest(device, stream, kernels, require):
    require("graphs")
    with poisoned(device, stream, 4 * N) as buf:
        stream.fill(buf, 0)
        with stream.capture() as inner:
            add_one(stream, kernels, buf)
        with inner:
            with stream.capture() as outer:
                with pytest.raises(ia.InvalidArgument, match=r"Graph\.launch.*captur"):
                    inner.launch(stream)
            with outer:
                outer.launch(stream)  # it captured nothing
                np.testing.assert_array_equal(read(stream, buf, np.uint32), 0)
            other = device.create_stream()
            with other.capture() as elsewhere:  # a capture on another stream leaves this one alone
                inner.launch(stream)
            elsewhere.close()
            np.testing.assert_array_equal(read(stream, buf, np.uint32), 1)
    assert_device_works(device, kernels)


@pytest.mark.clause("GRAPH-8")
def test_buffers_freed_under_a_pending_replay(device, stream, kernels, require):
    """The replay copies src into tmp and adds zeros into out, queued behind running work; src, tmp and zeros
    are freed, and the graph closed, before it runs: it must still read and write their memory, not memory
    handed out again (which the replay's write into tmp would spoil). It replays on another stream than the
    one that captured it, so a free ordered after the capture stream's work alone is too early."""
    require("graphs")
    n = 1 << 14
    data = rng(31).standard_normal(n).astype(np.float32)
    replay = device.create_stream()
    work = RunningWork(device, replay, kernels)
    try:
        with poisoned(device, stream, 4 * n) as out:
            src, tmp, zeros = upload(device, stream, data), device.alloc(4 * n), device.alloc(4 * n)
            stream.fill(zeros, 0)
            with stream.capture() as graph:
                stream.copy_dtod(tmp, src, 4 * n)
                stream.launch(kernels("vecadd"), ceil_div(n, 128), 128, (tmp, zeros, out, np.uint32(n)))
            stream.synchronize()
            work.enqueue(replay)
            graph.launch(replay)
            for buf in (src, tmp, zeros):
                buf.free()
            graph.close()
            other = device.create_stream()
            reused = [device.alloc(4 * n) for _ in range(6)]
            for buf in reused:
                other.fill(buf, 0x3F)
            other.synchronize()
            np.testing.assert_array_equal(read(replay, out, np.float32), data,
                                          err_msg="the replay read memory reused after the free")
            for buf in reused:
                assert (read(replay, buf) == 0x3F).all(), "the replay wrote into memory reused after the free"
                buf.free()
        work.check(replay)
    finally:
        work.free()
    assert_device_works(device, kernels)


@pytest.mark.clause("GRAPH-9")
def test_a_capture_ended_by_an_exception_keeps_nothing(device, stream, kernels, require):
    require("graphs")
    with poisoned(device, stream, 64) as buf:
        with pytest.raises(ZeroDivisionError):
            with stream.capture() as broken:
                stream.fill(buf, 9)
                1 / 0
        gone = weakref.ref(broken)
        del broken
        gc.collect()
        assert gone() is None, "the library still holds the graph of a capture ended by an exception"
        with stream.capture() as graph:
            stream.fill(buf, 3)
        graph.launch(stream)
        np.testing.assert_array_equal(read(stream, buf, np.uint8), 3)
        graph.close()
    assert_device_works(device, kernels)


@pytest.mark.clause("GRAPH-10")
@pytest.mark.parametrize("mode", ["GLOBAL", "THREAD_LOCAL", "RELAXED"])
def test_the_driver_captures_a_cuda_devices_stream_in_each_capture_mode(device, stream, mode):
    """`Stream.native` is there for the driver's own API, as clients that mix libraries use it, and the
    capture mode is the caller's choice: cuStreamBeginCapture takes each of CUDA's three modes (GLOBAL is the
    default of the runtime's cudaStreamBeginCapture, so most clients ask for it), the captured memset does not
    run, and cuStreamEndCapture gives a graph whose replay sets the bytes."""
    cu = cuda_driver(device, "cuStreamBeginCapture")
    with poisoned(device, stream, 64) as out:
        stream.synchronize()
        with context_current(device):
            graph = executable = None
            try:
                err_begin, = cu.cuStreamBeginCapture(stream.native, getattr(cu.CUstreamCaptureMode,
                                                                            f"CU_STREAM_CAPTURE_MODE_{mode}"))
                err_set, = cu.cuMemsetD8Async(out.handle, 0x5A, 64, stream.native)
                err_end, graph = cu.cuStreamEndCapture(stream.native)
                if not (err_begin or err_set or err_end):
                    err_inst, executable = cu.cuGraphInstantiate(graph, 0)
                    if not err_inst:
                        before = read(stream, out, np.uint8).tolist()
                        err_launch, = cu.cuGraphLaunch(executable, stream.native)
            finally:
                if executable is not None:
                    cu.cuGraphExecDestroy(executable)
                if graph is not None:
                    cu.cuGraphDestroy(graph)
        assert not err_begin, f"cuStreamBeginCapture(CU_STREAM_CAPTURE_MODE_{mode}): {err_begin}"
        assert not err_set, f"cuMemsetD8Async while capturing: {err_set}"
        assert not err_end, f"cuStreamEndCapture: {err_end}"
        assert not err_inst, f"cuGraphInstantiate: {err_inst}"
        assert before == [POISON] * 64, "the captured memset ran while it was captured"
        assert not err_launch, f"cuGraphLaunch: {err_launch}"
        assert read(stream, out, np.uint8).tolist() == [0x5A] * 64


@pytest.mark.clause("GRAPH-11")
def test_modules_compiled_closed_or_collected_while_capturing_leave_the_capture_intact(device, stream, kernels, target,
                                                                                      require):
    require("graphs")
    dropped = target.compile_kernel(device, "add_one")
    del dropped
    gc.collect()  # its module, collected unclosed, is unloaded by a later compile: the one inside the capture
    with poisoned(device, stream, 4 * N) as buf:
        stream.fill(buf, 0)
        with stream.capture() as graph:
            fresh = target.compile_kernel(device, "add_one")
            stream.launch(fresh, ceil_div(N, 128), 128, (buf, np.uint32(N)))
            target.compile_kernel(device, "saxpy").module.close()
        with graph:
            np.testing.assert_array_equal(read(stream, buf, np.uint32), 0)
            graph.launch(stream)
            graph.launch(stream)
            np.testing.assert_array_equal(read(stream, buf, np.uint32), 2)
    assert_device_works(device, kernels)


#: GRAPH-12's ways to end a graph: "closed or dropped" closes every other one and drops the rest; "closed and
#: kept" closes each and keeps it referenced until the measure (a closed Graph object holds nothing of the
#: driver's), with the bound per graph that a kept closed object may cost
GRAPHS_ENDED = {"closed or dropped": 1024, "closed and kept": 4096}


@pytest.mark.clause("GRAPH-12")
@pytest.mark.parametrize("ended", GRAPHS_ENDED)
def test_closed_and_dropped_graphs_give_their_driver_resources_back(device, stream, kernels, require, ended):
    """Each graph holds driver objects until it is closed or collected (a CUgraphExec and its nodes, recorded
    command buffers and descriptor sets) and the buffers its work uses: a backend that keeps a dropped graph
    (or what it holds) until the device closes leaks with every capture, which no test that captures a few
    graphs sees. First one graph, dropped after its replay: it and the buffer only it used are collected.
    Then graphs of eight launches and 120 fills, replayed once, every other one closed and the rest dropped,
    by the hundred (synchronized after each hundred), after 200 not counted: the process grows by 2 MiB and
    1 KiB a graph at most (all graph-capable targets: under 1 MiB). What a driver keeps grows with a graph's
    nodes (the fake libcuda copies each, 200-350 bytes): the CUDA backend never destroying a dropped graph's
    executable costs ~13 KiB a graph here (half are dropped), ~110 MiB over the 10 s, where with eight
    launches and one fill (~1.4 KiB) it crossed the bound only on a host fast enough to make thousands;
    lavapipe keeping each dropped graph's command buffer cost ~9 KiB even with those. Kept after close: a
    backend whose close leaves the executable to the collector keeps every one while the program holds its
    Graph objects."""
    require("graphs")
    n = 256
    only = device.alloc(4 * n)
    stream.fill(only, 0)
    with stream.capture() as graph:
        add_one(stream, kernels, only, n)
    graph.launch(stream)
    stream.synchronize()
    gone = [weakref.ref(graph), weakref.ref(only)]
    del graph, only
    gc.collect()
    alive = [what for what, ref in zip(("the graph", "the buffer only it used"), gone) if ref() is not None]
    assert not alive, f"a graph dropped unclosed after its replay: {' and '.join(alive)} not collected"
    kept: list = []
    fills = 120  # the last 120 words
    with device.alloc(4 * n) as buf:
        stream.fill(buf, 0)

        def capture_and_drop(count: int) -> None:
            for i in range(count):
                with stream.capture() as graph:
                    for _ in range(8):
                        add_one(stream, kernels, buf, n)
                    for word in range(n - fills, n):  # after the launches: each word set to one byte
                        stream.fill(buf, word, offset=4 * word, nbytes=4)
                graph.launch(stream)
                if ended == "closed and kept":
                    graph.close()
                    kept.append(graph)
                elif i % 2:
                    graph.close()
                del graph
            stream.synchronize()
            gc.collect()

        made, grown = resident_growth(capture_and_drop, 100, 20_000)
        got = read(stream, buf, np.uint32)
        replays, words = 200 + made, np.arange(n - fills, n, dtype=np.uint32) * 0x01010101
        assert (got[:n - fills] == 8 * replays).all() and (got[n - fills:] == words).all(), \
            f"{replays} replays: {got[:3]} ... {got[-3:]}"
    bound = (2 << 20) + GRAPHS_ENDED[ended] * made  # allocators and caches; a graph's executable kept costs KiBs
    assert grown < bound, f"{made} graphs captured, replayed and {ended} left {grown / 2**20:.1f} MiB more " \
        f"resident memory (at most {bound / 2**20:.1f} MiB)"
    assert_device_works(device, kernels)


#: GRAPH-14's child: on the target's device (its context pushed) three user objects whose destructor notes
#: their pointer (1, 2, 3): a graph with an empty node holds the first (the caller's reference moved to it), the
#: second twice (retained, then the caller's own reference released) and the third (moved); the graph is
#: instantiated, then destroyed, then its executable graph; prints which were destroyed after each step
USER_OBJECTS_CHILD = """
import ctypes, json, sys, time
from ironaccel.cts.targets import get
from ironaccel.cts.testing.exhaust import _open
device = _open(get(sys.argv[1]))
cu = device.native.driver


def ok(result):
    err, *value = result
    assert not err, err
    return value[0] if value else None


destroyed = []
destroy = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(destroyed.append)
ok(cu.cuCtxPushCurrent(device.native.context))
function = cu.CUhostFn(ctypes.cast(destroy, ctypes.c_void_p).value)
objects = [ok(cu.cuUserObjectCreate(ptr, function, 1, cu.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC))
           for ptr in (1, 2, 3)]
move = cu.CUuserObjectRetain_flags.CU_GRAPH_USER_OBJECT_MOVE
graph = ok(cu.cuGraphCreate(0))
ok(cu.cuGraphAddEmptyNode(graph, None, 0))
ok(cu.cuGraphRetainUserObject(graph, objects[0], 1, move))
ok(cu.cuGraphRetainUserObject(graph, objects[1], 2, 0))
ok(cu.cuUserObjectRelease(objects[1], 1))
ok(cu.cuGraphRetainUserObject(graph, objects[2], 1, move))
executable = ok(cu.cuGraphInstantiate(graph, 0))
ok(cu.cuGraphDestroy(graph))
after_graph = sorted(destroyed)
ok(cu.cuGraphExecDestroy(executable))
deadline = time.monotonic() + 10
while len(destroyed) < 3 and time.monotonic() < deadline:  # CUDA may run destructors on a thread of its own
    ok(cu.cuCtxSynchronize())
    time.sleep(0.01)
print(json.dumps({"after graph": after_graph, "after executable": sorted(destroyed)}))
"""


@pytest.mark.clause("GRAPH-14")
def test_user_objects_a_graph_holds_are_released_with_it(device, target):
    """A graph holds references to the user objects retained to it (CUDA's way of tying a resource's life to
    the graphs that use it: cuda.core and CUDA Graphs-based runtimes free buffers so), and so does each
    executable graph instantiated from it: destroying the graph leaves every object alive while its
    executable graph holds it, and destroying the executable graph then runs each destructor once, however
    the references came (moved from the caller, retained twice). A driver that releases only some of a graph's
    references leaks the resources; one that walks the references wrong crashes the process (a child process
    runs it)."""
    cuda_driver(device, "cuUserObjectCreate")
    outcome = child_json(target, USER_OBJECTS_CHILD, timeout=60)
    assert outcome == {"after graph": [], "after executable": [1, 2, 3]}, \
        f"the user objects destroyed after the graph, then after its executable graph: {outcome}"


@pytest.mark.clause("KERNEL-154")
def test_a_launch_after_a_replay_uses_its_own_arguments_not_the_graphs(device, stream, kernels, require):
    """KERNEL-18 across a replay: the graph launches the same kernel on another buffer, and the launches
    around the replay, in one burst behind running work, each reach their own buffer."""
    require("graphs")
    work = RunningWork(device, stream, kernels, 0.05)
    try:
        with poisoned(device, stream, 4 * N) as a, poisoned(device, stream, 4 * N) as b:
            stream.fill(a, 0)
            stream.fill(b, 0)
            with stream.capture() as graph:
                add_one(stream, kernels, b)
            with graph:
                work.enqueue(stream)  # the launches and the replay queue behind it, as one burst
                add_one(stream, kernels, a)
                graph.launch(stream)
                add_one(stream, kernels, a)
                np.testing.assert_array_equal(read(stream, a, np.uint32), 2, err_msg="a launch after the replay "
                                                                                    "did not reach its own buffer")
                np.testing.assert_array_equal(read(stream, b, np.uint32), 1, err_msg="the replay's buffer was "
                                                                                    "written by another launch")
        work.check(stream)
    finally:
        work.free()


@pytest.mark.clause("GRAPH-15")
def test_a_graph_closed_behind_an_event_it_follows_outlives_that_events_completion(device, stream, kernels, require):
    """GRAPH-8 with an event between the running work and the replay: the graph is closed right after its launch,
    and the event recorded before the launch is polled with query() until True while the replay may still be
    waiting to be submitted. Closing must wait for the replay itself, not for the last point the stream had
    submitted when it was launched: released at the event's point, the replay's recorded commands are gone before
    the replay runs."""
    require("graphs")
    n = 1 << 14
    data = rng(32).standard_normal(n).astype(np.float32)
    work = RunningWork(device, stream, kernels)
    try:
        with poisoned(device, stream, 4 * n) as out, upload(device, stream, data) as src, device.alloc(4 * n) as zeros:
            stream.fill(zeros, 0)
            with stream.capture() as graph:  # a launch: the graph holds a recorded dispatch and its descriptor set
                stream.launch(kernels("vecadd"), ceil_div(n, 128), 128, (src, zeros, out, np.uint32(n)))
            stream.synchronize()
            work.enqueue(stream)
            before = stream.record()
            graph.launch(stream)
            work.enqueue(stream)  # more running work behind the replay: the replay is still pending once `before` is done
            graph.close()
            while not before.query():
                time.sleep(1e-4)
            np.testing.assert_array_equal(read(stream, out, np.float32), data,
                                          err_msg="a replay of a graph closed right after its launch did not run")
        work.check(stream)
    finally:
        work.free()
    assert_device_works(device, kernels)


@pytest.mark.clause("GRAPH-16")
def test_a_node_of_many_dependencies_keeps_them_in_a_clone_and_runs_after_them(device, stream):
    """A graph node may depend on any number of nodes: a driver that copies a node's dependencies through a
    fixed array (the fake libcuda's graph_clone, which instantiation and cuGraphClone use, keeps up to 64 on its
    stack) must move to a larger one past it, exactly at the 65th. Memset nodes through the driver's own API:
    for each count, that many one-byte memsets to 1 and one memset to 2 of all those bytes depending on them."""
    cu = cuda_driver(device, "cuGraphClone")
    counts = (1, 64, 65, 200)
    with poisoned(device, stream, sum(counts)) as out:
        stream.synchronize()
        with context_current(device):
            graph = clone = None
            executables, ran, wrong = [], {}, {}
            try:
                graph = _ok(cu.cuGraphCreate(0), "cuGraphCreate")
                context = _ok(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")

                def memset(at: int, n: int, value: int, deps: list) -> object:
                    params = cu.CUDA_MEMSET_NODE_PARAMS()
                    params.dst, params.value, params.elementSize = int(out.handle) + at, value, 1
                    params.width, params.height, params.pitch = n, 1, n
                    return _ok(cu.cuGraphAddMemsetNode(graph, deps, len(deps), params, context), "cuGraphAddMemsetNode")
                nodes, at = {}, 0
                for k in counts:
                    roots = [memset(at + i, 1, 1, []) for i in range(k)]
                    nodes[k] = (memset(at, k, 2, roots), roots)
                    at += k
                clone = _ok(cu.cuGraphClone(graph), "cuGraphClone")
                for k, (node, roots) in nodes.items():
                    mine = _ok(cu.cuGraphNodeFindInClone(node, clone), "cuGraphNodeFindInClone")
                    err, deps, _, count = cu.cuGraphNodeGetDependencies(mine, k)
                    assert not err, f"cuGraphNodeGetDependencies of a cloned node of {k}: {err}"
                    want = {int(_ok(cu.cuGraphNodeFindInClone(r, clone), "cuGraphNodeFindInClone")) for r in roots}
                    if count != k or {int(d) for d in deps[:count]} != want:
                        wrong[k] = count
                for name, g in (("graph", graph), ("clone", clone)):
                    stream.fill(out, POISON)
                    stream.synchronize()
                    executables.append(_ok(cu.cuGraphInstantiate(g, 0), f"cuGraphInstantiate of the {name}"))
                    _ok(cu.cuGraphLaunch(executables[-1], stream.native), f"cuGraphLaunch of the {name}")
                    _ok(cu.cuStreamSynchronize(stream.native), "cuStreamSynchronize")
                    ran[name] = read(stream, out, np.uint8)
            finally:
                for executable in executables:
                    cu.cuGraphExecDestroy(executable)
                for g in (clone, graph):
                    if g is not None:
                        cu.cuGraphDestroy(g)
        assert not wrong, "the cloned node of k dependencies does not depend on the clones of the k nodes: " + \
            ", ".join(f"{k}: {n} dependencies" for k, n in wrong.items())
        for name, got in ran.items():
            assert got.tolist() == [2] * sum(counts), f"the {name}'s replay left bytes other than the node run after " \
                f"all it depends on sets (1: a memset it depends on ran after it): at {np.flatnonzero(got != 2)[:8]}"



@pytest.mark.clause("GRAPH-17")
def test_nodes_use_the_memory_of_an_allocation_node_before_it_is_mapped(device, stream):
    """CUDA's graph allocations (cuGraphAddMemAllocNode) have their address when the node is added, and the
    nodes that depend on it may name it from then on, though the memory is mapped only when a launch reaches
    the allocation: a driver that checks a memset's or a copy's range against the memory mapped at that moment
    refuses them. Through the driver's own API: allocation, memset of the allocation, copy out of it into a
    buffer, free, each depending on the one before; the graph instantiated and launched twice."""
    cu = cuda_driver(device, "cuGraphAddMemAllocNode")
    n = 256
    with poisoned(device, stream, n) as out:
        stream.synchronize()
        with context_current(device):
            graph = executable = None
            replays = []
            try:
                graph = _ok(cu.cuGraphCreate(0), "cuGraphCreate")
                context = _ok(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
                alloc = cu.CUDA_MEM_ALLOC_NODE_PARAMS()
                alloc.poolProps.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
                alloc.poolProps.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
                alloc.poolProps.location.id = int(_ok(cu.cuCtxGetDevice(), "cuCtxGetDevice"))
                alloc.bytesize = n
                node = _ok(cu.cuGraphAddMemAllocNode(graph, None, 0, alloc), "cuGraphAddMemAllocNode")
                mine = int(alloc.dptr)
                assert mine, "cuGraphAddMemAllocNode gave no address"
                memset = cu.CUDA_MEMSET_NODE_PARAMS()
                memset.dst, memset.value, memset.elementSize, memset.width, memset.height, memset.pitch = \
                    mine, 0x5A, 1, n, 1, n
                node = _ok(cu.cuGraphAddMemsetNode(graph, [node], 1, memset, context),
                           "cuGraphAddMemsetNode on the allocation node's memory")
                copy = cu.CUDA_MEMCPY3D()
                copy.srcMemoryType = copy.dstMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
                copy.srcDevice, copy.dstDevice = mine, int(out.handle)
                copy.WidthInBytes, copy.Height, copy.Depth = n, 1, 1
                node = _ok(cu.cuGraphAddMemcpyNode(graph, [node], 1, copy, context),
                           "cuGraphAddMemcpyNode out of the allocation node's memory")
                _ok(cu.cuGraphAddMemFreeNode(graph, [node], 1, mine), "cuGraphAddMemFreeNode")
                executable = _ok(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
                for _ in range(2):
                    stream.fill(out, POISON)
                    stream.synchronize()
                    _ok(cu.cuGraphLaunch(executable, stream.native), "cuGraphLaunch")
                    _ok(cu.cuStreamSynchronize(stream.native), "cuStreamSynchronize")
                    replays.append(read(stream, out, np.uint8).tolist())
            finally:
                if executable is not None:
                    cu.cuGraphExecDestroy(executable)
                if graph is not None:
                    cu.cuGraphDestroy(graph)
        assert replays == [[0x5A] * n] * 2, "a replay did not copy out what it set in the allocation node's memory"


@pytest.mark.clause("GRAPH-18")
def test_a_capture_forked_to_other_streams_joins_back_through_events(device, stream):
    """CUDA's fork and join of a stream capture (how clients capture concurrent branches): the capturing stream
    records an event, other streams wait for it and so join the capture, each records an event after its own
    work, and the capturing stream waits for all of them before its next work, which then depends on every
    branch. Through the driver's own API (the library's own capture is one stream's): 4 branches."""
    cu = cuda_driver(device, "cuStreamBeginCapture")
    k, n = 4, 64
    with poisoned(device, stream, n) as out:
        stream.synchronize()
        base = int(out.handle)
        with context_current(device):
            made, graph, executable, counts, got = [], None, None, None, None
            try:
                def new(result: tuple, call: str):
                    made.append((call, _ok(result, call)))
                    return made[-1][1]
                no_timing = cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
                branches = [new(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
                            for _ in range(k)]
                fork = new(cu.cuEventCreate(no_timing), "cuEventCreate")
                joins = [new(cu.cuEventCreate(no_timing), "cuEventCreate") for _ in range(k)]
                _ok(cu.cuStreamBeginCapture(stream.native, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
                    "cuStreamBeginCapture")
                _ok(cu.cuMemsetD8Async(base, 1, n, stream.native), "cuMemsetD8Async")
                _ok(cu.cuEventRecord(fork, stream.native), "cuEventRecord of the fork")
                for i, (branch, join) in enumerate(zip(branches, joins)):
                    _ok(cu.cuStreamWaitEvent(branch, fork, 0), "cuStreamWaitEvent of a branch on the fork")
                    _ok(cu.cuMemsetD8Async(base + 8 * i, 2 + i, 8, branch), "cuMemsetD8Async on a branch")
                    _ok(cu.cuEventRecord(join, branch), "cuEventRecord of a join")
                for join in joins:
                    _ok(cu.cuStreamWaitEvent(stream.native, join, 0), "cuStreamWaitEvent of the capture on a join")
                _ok(cu.cuMemsetD8Async(base + 48, 9, 16, stream.native), "cuMemsetD8Async after the joins")
                graph = _ok(cu.cuStreamEndCapture(stream.native), "cuStreamEndCapture")
                _, _, found = cu.cuGraphGetNodes(graph, 0)
                err, nodes, found = cu.cuGraphGetNodes(graph, found)
                assert not err, f"cuGraphGetNodes: {err}"
                counts = sorted(cu.cuGraphNodeGetDependencies(node, 0)[3] for node in nodes[:found])
                executable = _ok(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
                _ok(cu.cuGraphLaunch(executable, stream.native), "cuGraphLaunch")
                _ok(cu.cuStreamSynchronize(stream.native), "cuStreamSynchronize")
                got = read(stream, out, np.uint8).tolist()
            finally:
                if executable is not None:
                    cu.cuGraphExecDestroy(executable)
                if graph is not None:
                    cu.cuGraphDestroy(graph)
                for call, handle in made:
                    (cu.cuStreamDestroy if call == "cuStreamCreate" else cu.cuEventDestroy)(handle)
    # the last memset depends on every branch (and maybe on the first memset too, which each branch follows)
    assert counts[:-1] == [0] + [1] * k and counts[-1] in (k, k + 1), \
        f"the captured nodes' dependency counts are {counts}: the memset after the joins must follow all {k} branches"
    want = [2 + i for i in range(k) for _ in range(8)] + [1] * (48 - 8 * k) + [9] * 16
    assert got == want, f"the replay of the forked capture left {got}"

def _ok(result: tuple, call: str):
    """The value of a driver call that returned (CUresult, value) or (CUresult,), asserting it succeeded."""
    err, *value = result
    assert not err, f"{call}: {err}"
    return value[0] if value else None


@pytest.mark.clause("GRAPH-19")
def test_graphs_dropped_unclosed_then_released_by_a_capture_close_with_their_device(device, kernels, target, require):
    """GRAPH-12 keeps its device open; a graph dropped unclosed is released by the backend later (CUDA: at the
    next capture), and the device's close must not release it a second time."""
    require("graphs")
    n = 256
    other = get_backend(device.info.backend).open_device(device.info.index)
    try:
        s = other.create_stream()
        add = target.compile_kernel(other, "add_one")
        buf = other.alloc(4 * n)
        s.fill(buf, 0)
        for _ in range(3):
            with s.capture() as graph:
                s.launch(add, ceil_div(n, 128), 128, (buf, np.uint32(n)))
            graph.launch(s)
            del graph
        s.synchronize()
        gc.collect()
        with s.capture() as kept:  # the dropped graphs are released here, or later
            s.launch(add, ceil_div(n, 128), 128, (buf, np.uint32(n)))
        kept.launch(s)
        assert (read(s, buf, np.uint32) == 4).all(), "three replays of dropped graphs and one of a kept one"
    finally:
        other.close()  # raises what the driver refused: a graph's executable released twice
    assert_device_works(device, kernels)
