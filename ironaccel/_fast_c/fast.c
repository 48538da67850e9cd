/* ironaccel._fast: the hot paths of the CUDA backend, of the MemPool and of the Vulkan backend's command
 * recording, in C through the CPython C API.
 *
 * One translation unit in parts, one per concern, included below in order: core.inc (entry points, interned
 * names, the types' structs from one field list each, shared helpers), launch.inc (launches, KernelCore),
 * stream.inc (events and streams), buffers.inc (device buffers, alloc), copy.inc (copies, the staging ring's
 * C side, copy threads), pool.inc (the MemPool's front cache), vulkan.inc (Vulkan command recording). One unit
 * rather than several objects so the small helpers every hot path calls (make_current, used_on, fast_stream)
 * stay inlined without LTO.
 *
 * Why C and the C API rather than Cython over cuda.bindings.cydriver: nothing to add at build time beyond
 * the system compiler and Python's headers (the fake libcuda is built the same way), and the calls here
 * are few and flat (integers in, a CUresult out), which the C API does in a few lines.
 *
 * The driver entry points are taken with dlsym from the libcuda.so.1 this process already loaded
 * (RTLD_NOLOAD: never a second library), so they are the ones cuda.bindings calls, the fake's too, with
 * the same contexts and handles. Every function returns the CUresult as an int; the Python side raises
 * the typed error (driver.fail) when it is not 0. Each driver call that can block releases the GIL, as
 * cuda.bindings does; a wait first asks whether the work is done already (cuStreamQuery or cuEventQuery,
 * with the GIL held) and blocks only when it is not: on the H200 a query of an idle stream took 150 ns where
 * an idle cuStreamSynchronize took 190-550 ns, and an event recorded on an idle stream was done at its first
 * query. Anything but CUDA_SUCCESS goes to the blocking call, which reports an error itself.
 *
 * One rule, one place (issue 27): every API rule and its typed error are written in api.py alone. Where a
 * compiled function is a leaf that api.py calls after its checks (alloc and DeviceCore._alloc, copy_dtoh,
 * staged_htod, staged_copy, record, the _synchronize/_query methods), it checks no API rule; what it does check
 * is its own C contract (argument counts, the types it casts, the bounds of its arrays and of the host bytes it
 * reads). Where a compiled method IS the API method (StreamCore's copy_htod, copy_dtoh, launch, record,
 * synchronize; EventCore's query, synchronize; launch(plan, stream, args), which is api.Stream._launch_plan
 * with its checks), api.py cannot run first without costing the hot path what it is for, so
 * the method admits a call only when every rule of api.py's method holds, and hands anything else, unchanged,
 * to that method, which raises; it raises no API error itself. That admission test is no wider than api.py's
 * rules: tests/test_compiled_admission.py calls each method both ways on each side of each rule and requires
 * the same outcome. The operation names the compiled path passes on (a pooled buffer's _backing(op)) are the
 * api methods' own __qualname__ (operation_of), and the width a scalar is read in place with is numpy's
 * itemsize, so neither is written here.
 *
 *   SOURCE_HASH                                  the hash of the sources this build was made from (native.py)
 *   init()                                       load the entry points (OSError when libcuda is not loaded)
 *   configure(buffer_type, current, segment, reuse)  what launch checks against (CudaBuffer; driver.current,
 *                                                a ThreadCurrent: the thread's current context, in C thread-local
 *                                                storage), the staging ring's segment size and REUSE_BYTES
 *   launch(plan, stream, args)                   api.Stream._launch_plan's common case in one call: the api's
 *        cached ArgRule for the argument types, the buffers' liveness and device, then packing by the rule's
 *        Signature codes (one byte per argument: B buffer, f f32, d f64, i 32-bit int, q i64, Q u64) into
 *        8-byte slots and cuLaunchKernel; -1 sends anything uncommon to the Python path
 *   KernelCore                                   CudaKernel's base: the CUfunction's address and the launches
 *        StreamCore.launch resolved for it (plan and rule fields by stream device, dims and argument types)
 *   record(stream, timing)                       FastStream._record: a spare CUevent recorded, as a FastEvent
 *   rerecord(stream, event)                      FastStream._rerecord: the event's own CUevent recorded again
 *   EventCore, StreamCore, configure_streams(...)  FastEvent's and FastStream's bases: query, synchronize,
 *        record without Python frames (below)
 *   copy_dtoh(host, src, handle)                 host: a writable C-contiguous buffer, all of it
 *   staged_htod(stream, dst, offset, host, ring) a small pageable copy_htod: the ring's room reserved under its
 *        lock, the memcpy into it and the DMA from there (-1: the Python path, which advances the ring); RingCore,
 *        StagingRing's base, holds the ring's fields it reads and writes
 *   StreamCore.copy_htod, copy_dtoh              the whole checked copy: small htod ones staged_htod; large ones
 *        DMA'd directly from pinned memory on an idle stream and waited for, or handed to the ring (staging.py);
 *        dtoh ones cuMemcpyDtoHAsync with the array held as FastStream._copy_dtoh holds it
 *   alloc(device, nbytes)                        CudaDevice._alloc with memory pools: cuMemAllocAsync on the
 *        device's allocation stream, waited for (wait_stream), in one call, and the buffer made and
 *        registered (or the name and CUresult of the call that failed; the memory is given back then)
 *   BufferCore, configure_buffers(...)           CudaBuffer's base: its fields, free() and the finalizer (below);
 *        DeviceCore, CudaDevice's base: _alloc() in one call, after api.Device.alloc's checks (made there alone)
 *   staged_copy(dst, staged, host, offset, n, threads, stream, hot)  a large copy_htod's chunk: host bytes
 *        [offset, offset + n) into the pinned ring at staged by the caller and `threads` copy threads (no
 *        GIL), each piece's DMA enqueued in order as soon as it is filled (so DMAs overlap the filling)
 *   PoolCore, PooledCore, configure_pool(...)    the MemPool's warm alloc and free (backend-agnostic; below)
 *   vk_configure(...), vk_dispatch(...), vk_execute(...)  the Vulkan backend's recording of a launch and of a
 *        graph replay, each command's vkCmd* calls in one call (vulkan.inc; leaves: the Python side decided
 *        what to record)
 */
#include "core.inc"
#include "launch.inc"
#include "stream.inc"
#include "buffers.inc"
#include "copy.inc"
#include "pool.inc"
#include "vulkan.inc"

static PyMethodDef methods[] = {
    {"init", fast_init, METH_NOARGS, "Take the driver entry points from the loaded libcuda.so.1."},
    {"configure", (PyCFunction)(void (*)(void))fast_configure, METH_FASTCALL,
     "Give launch the buffer type and the thread's current-context record."},
    {"launch", (PyCFunction)(void (*)(void))fast_launch, METH_FASTCALL,
     "Stream._launch_plan's common case and cuLaunchKernel; TAKE_PYTHON_PATH (-1) otherwise."},
    {"configure_streams", (PyCFunction)(void (*)(void))fast_configure_streams, METH_FASTCALL,
     "Give the event and stream types the FastEvent type and the pure-Python methods they hand cases to."},
    {"alloc", (PyCFunction)(void (*)(void))fast_alloc, METH_FASTCALL,
     "CudaDevice._alloc with pools: the registered buffer, or (entry point, CUresult)."},
    {"configure_scalars", (PyCFunction)fast_configure_scalars, METH_O,
     "Register the numpy scalar types whose values launch reads in place; returns how many."},
    {"configure_copies", (PyCFunction)(void (*)(void))fast_configure_copies, METH_FASTCALL,
     "Give the compiled copies the ndarray type, the Python copy methods and their size thresholds."},
    {"configure_buffers", (PyCFunction)(void (*)(void))fast_configure_buffers, METH_FASTCALL,
     "Give BufferCore the Python release it hands uncommon frees to, and DriverError."},
    {"staged_copy", (PyCFunction)(void (*)(void))fast_staged_copy, METH_FASTCALL,
     "A large copy_htod's chunk: filled into the ring by several threads, each piece DMA'd once filled."},
    {"configure_pool", (PyCFunction)(void (*)(void))fast_configure_pool, METH_FASTCALL,
     "Give the pool's types the pure-Python methods they hand uncommon cases to."},
    {"record", (PyCFunction)(void (*)(void))fast_record, METH_FASTCALL,
     "FastStream._record: a spare CUevent recorded on the stream, as a FastEvent."},
    {"rerecord", (PyCFunction)(void (*)(void))fast_rerecord, METH_FASTCALL,
     "FastStream._rerecord: the event's CUevent recorded on the stream; 0 or the failed CUresult."},
    {"copy_dtoh", (PyCFunction)(void (*)(void))fast_copy_dtoh, METH_FASTCALL, "cuMemcpyDtoHAsync into a buffer."},
    {"staged_htod", (PyCFunction)(void (*)(void))fast_staged_htod, METH_FASTCALL,
     "A small pageable copy_htod: room in the pinned ring, memcpy, cuMemcpyHtoDAsync."},
    {"vk_configure", (PyCFunction)(void (*)(void))fast_vk_configure, METH_FASTCALL,
     "Give the Vulkan recording the vkCmd* entry points' addresses."},
    {"vk_dispatch", (PyCFunction)(void (*)(void))fast_vk_dispatch, METH_FASTCALL,
     "Record a Vulkan launch: barrier, binds that changed, push constants, dispatch."},
    {"vk_execute", (PyCFunction)(void (*)(void))fast_vk_execute, METH_FASTCALL,
     "Record a Vulkan graph replay: barrier, vkCmdExecuteCommands."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fast", "ironaccel's hot paths in C.", -1, methods};

PyMODINIT_FUNC PyInit__fast(void) {
    struct { PyObject **name; const char *text; } names[] = {
#define NAME_ENTRY(name, text) {&str_##name, text},
        INTERNED_NAMES(NAME_ENTRY)
#undef NAME_ENTRY
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i].name = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    if (PyType_Ready(&RingCoreType) || PyType_Ready(&PoolCoreType) || PyType_Ready(&PooledCoreType) || PyType_Ready(&EventCoreType) || PyType_Ready(&BufferCoreType) || PyType_Ready(&DeviceCoreType) ||
        PyType_Ready(&StreamCoreType) || PyType_Ready(&KernelCoreType) ||
        PyType_Ready(&ThreadCurrentType))
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "PoolCore", (PyObject *)&PoolCoreType) ||
        PyModule_AddObjectRef(m, "PooledCore", (PyObject *)&PooledCoreType) ||
        PyModule_AddObjectRef(m, "EventCore", (PyObject *)&EventCoreType) ||
        PyModule_AddObjectRef(m, "StreamCore", (PyObject *)&StreamCoreType) ||
        PyModule_AddObjectRef(m, "KernelCore", (PyObject *)&KernelCoreType) ||
        PyModule_AddObjectRef(m, "ThreadCurrent", (PyObject *)&ThreadCurrentType) ||
        PyModule_AddObjectRef(m, "BufferCore", (PyObject *)&BufferCoreType) ||
        PyModule_AddObjectRef(m, "DeviceCore", (PyObject *)&DeviceCoreType) ||
        PyModule_AddObjectRef(m, "RingCore", (PyObject *)&RingCoreType) ||
        PyModule_AddStringConstant(m, "SOURCE_HASH", IRONACCEL_SOURCE_HASH)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

