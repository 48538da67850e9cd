/* ironaccel._fast: the hot paths of the CUDA backend and of the MemPool, in C through the CPython C API.
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
 *   EventCore, StreamCore, configure_streams(...)  FastEvent's and FastStream's bases: query, synchronize,
 *        record without Python frames (below)
 *   copy_dtoh(host, src, handle)                 host: a writable C-contiguous buffer, all of it
 *   staged_htod(stream, dst, offset, host, ring) a small pageable copy_htod: the ring's room reserved under its
 *        lock, the memcpy into it and the DMA from there (-1: the Python path, which advances the ring)
 *   StreamCore.copy_htod, copy_dtoh              the whole checked copy: small htod ones staged_htod; large ones
 *        DMA'd directly from pinned memory on an idle stream and waited for, or handed to the ring (staging.py);
 *        dtoh ones cuMemcpyDtoHAsync with the array held as FastStream._copy_dtoh holds it
 *   alloc(device, nbytes)                        CudaDevice._alloc with memory pools: cuMemAllocAsync on the
 *        device's allocation stream, waited for (wait_stream), in one call, and the buffer made and
 *        registered (or the name and CUresult of the call that failed; the memory is given back then)
 *   BufferCore, configure_buffers(...)           CudaBuffer's base: its fields, free() and the finalizer (below);
 *        DeviceCore, CudaDevice's base: alloc() in one call
 *   staged_copy(dst, staged, host, offset, n, threads, stream, hot)  a large copy_htod's chunk: host bytes
 *        [offset, offset + n) into the pinned ring at staged by the caller and `threads` copy threads (no
 *        GIL), each piece's DMA enqueued in order as soon as it is filled (so DMAs overlap the filling)
 *   PoolCore, PooledCore, configure_pool(...)    the MemPool's warm alloc and free (backend-agnostic; below)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef int CUresult;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUfunction;
typedef unsigned long long CUdeviceptr;
enum { CUDA_ERROR_NOT_READY = 600 };

enum { MAX_PARAMS = 512 }; /* 4 KiB of parameters, the most cuLaunchKernel takes */

static CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void **, void **);
static CUresult (*cuStreamSynchronize)(CUstream);
static CUresult (*cuStreamQuery)(CUstream);
static CUresult (*cuEventSynchronize)(CUevent);
static CUresult (*cuEventQuery)(CUevent);
static CUresult (*cuEventRecord)(CUevent, CUstream);
static CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*cuMemcpyDtoHAsync_v2)(void *, CUdeviceptr, size_t, CUstream);
static CUresult (*cuPointerGetAttribute)(void *, int, CUdeviceptr);
static CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
static CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);

/* interned attribute names (GET(obj, name) reads str_name) and the op the launch's errors name */
static PyObject *str_ptr, *str_last_stream, *str_kernel, *str_arg_rules, *str_packing, *str_codes, *str_dev,
    *str_closed, *str_capturing, *str_freed, *str_backing, *str_device, *str_id, *str_make_current,
    *str_function_address, *str_work_address, *str_grid, *str_block, *str_current_device, *str_op, *str_needs_current,
    *str_spare_events, *str_stream, *str_timing, *str_handle, *str_address, *str_mark, *str_held, *str_numbers, *str_lock, *str_acquire, *str_release,
    *str_base, *str_used, *str_segment, *str_users, *str_release_held, *str_record_python_path,
    *str_info, *str_limits, *str_max_alloc, *str_op_copy_htod, *str_nbytes, *str_staging, *str_plans, *str_module, *str_launch_plan, *str_pools, *str_alive, *str_alloc_address, *str_live, *str_orphans, *str_append;

static PyObject *fast_init(PyObject *self, PyObject *unused) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL) return PyErr_Format(PyExc_OSError, "libcuda.so.1 is not loaded in this process: %s", dlerror());
#define RESOLVE(name)                                                                                         \
    *(void **)&name = dlsym(lib, #name);                                                                      \
    if (name == NULL) return PyErr_Format(PyExc_OSError, "libcuda.so.1 has no %s", #name);
    RESOLVE(cuLaunchKernel)
    RESOLVE(cuStreamSynchronize)
    RESOLVE(cuStreamQuery)
    RESOLVE(cuEventSynchronize)
    RESOLVE(cuEventQuery)
    RESOLVE(cuEventRecord)
    RESOLVE(cuMemcpyHtoDAsync_v2)
    RESOLVE(cuMemcpyDtoHAsync_v2)
    RESOLVE(cuPointerGetAttribute)
    RESOLVE(cuMemAllocAsync)
    RESOLVE(cuMemFreeAsync)
#undef RESOLVE
    Py_RETURN_NONE; /* the library stays loaded: the handle is never closed */
}

static int address(PyObject *obj, void **out) {
    *out = PyLong_AsVoidPtr(obj);
    return *out == NULL && PyErr_Occurred() ? -1 : 0;
}

static int dims(PyObject *obj, unsigned out[3]) {
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 3) {
        PyErr_SetString(PyExc_TypeError, "grid and block are 3-tuples");
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        out[i] = (unsigned)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(obj, i));
        if (PyErr_Occurred()) return -1;
    }
    return 0;
}

/* Numpy scalar types whose value is read where numpy keeps it (PyArrayScalar_VAL: right after the object
 * header), each for one argument code; configure_scalars registers a type only when that read of a sample
 * gives what the generic conversion below gives, so a numpy with another layout just takes the slow way. */
enum { IN_PLACE_TYPES = 8 };
static struct {
    PyTypeObject *type;
    char code;
    Py_ssize_t size;
} in_place[IN_PLACE_TYPES];
static int in_place_count;

static int pack_converted(char code, PyObject *arg, uint64_t *slot);

/* One scalar argument into its 8-byte slot (the buffers are done by launch). */
static int pack_scalar(char code, PyObject *arg, uint64_t *slot) {
    for (int k = 0; k < in_place_count; k++)
        if (Py_TYPE(arg) == in_place[k].type && in_place[k].code == code) {
            *slot = 0;
            memcpy(slot, (char *)arg + sizeof(PyObject), (size_t)in_place[k].size);
            return 0;
        }
    return pack_converted(code, arg, slot);
}

/* configure_scalars(((code, sample), ...)): the number of sample types whose values are read in place. */
static PyObject *fast_configure_scalars(PyObject *self, PyObject *samples) {
    if (!PyTuple_Check(samples) || PyTuple_GET_SIZE(samples) > IN_PLACE_TYPES)
        return PyErr_Format(PyExc_TypeError, "configure_scalars takes a tuple of at most %d (code, sample)", IN_PLACE_TYPES);
    for (int k = 0; k < in_place_count; k++) Py_CLEAR(in_place[k].type);
    in_place_count = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(samples); i++) {
        PyObject *item = PyTuple_GET_ITEM(samples, i);
        const char *code;
        PyObject *sample;
        if (!PyArg_ParseTuple(item, "sO", &code, &sample)) return NULL;
        Py_ssize_t size = code[0] == 'i' || code[0] == 'f' ? 4 : 8;
        uint64_t expected, found = 0;
        if (pack_converted(code[0], sample, &expected)) return NULL;
        if (Py_TYPE(sample)->tp_basicsize < (Py_ssize_t)sizeof(PyObject) + size) continue;
        memcpy(&found, (char *)sample + sizeof(PyObject), (size_t)size);
        if (found != expected) continue;
        in_place[in_place_count].type = (PyTypeObject *)Py_NewRef((PyObject *)Py_TYPE(sample));
        in_place[in_place_count].code = code[0];
        in_place[in_place_count].size = size;
        in_place_count++;
    }
    return PyLong_FromLong(in_place_count);
}

/* The generic conversion of one scalar argument (any number the codes' C types take). */
static int pack_converted(char code, PyObject *arg, uint64_t *slot) {
    *slot = 0;
    switch (code) {
    case 'f': {
        float f = (float)PyFloat_AsDouble(arg);
        memcpy(slot, &f, sizeof f);
        break;
    }
    case 'd': {
        double d = PyFloat_AsDouble(arg);
        memcpy(slot, &d, sizeof d);
        break;
    }
    case 'i': {
        uint32_t v = (uint32_t)PyLong_AsLongLong(arg); /* int32 or uint32: the low 32 bits either way */
        memcpy(slot, &v, sizeof v);
        break;
    }
    case 'q': {
        long long v = PyLong_AsLongLong(arg);
        memcpy(slot, &v, sizeof v);
        break;
    }
    case 'Q': {
        PyObject *index = PyNumber_Index(arg); /* a numpy uint64 is no int: PyLong_AsUnsignedLongLong needs one */
        if (index == NULL) return -1;
        *slot = PyLong_AsUnsignedLongLong(index);
        Py_DECREF(index);
        break;
    }
    default:
        PyErr_Format(PyExc_ValueError, "unknown argument code %c", code);
        return -1;
    }
    return PyErr_Occurred() ? -1 : 0;
}

/* getattr as a borrowed-free helper: a new reference or NULL with the error set. */
#define GET(obj, name) PyObject_GetAttr((obj), str_##name)

/* CudaBuffer's compiled base (its methods are below, with the other device-buffer code) */
typedef struct {
    PyObject_HEAD
    PyObject *device, *nbytes, *last_stream;
    unsigned long long ptr;
    char freed;
} BufferCore;

static PyTypeObject BufferCoreType;

/* FastStream's and CudaDevice's compiled bases: the fields the compiled paths read on every call, held in the
 * struct (member descriptors: set by CudaStream.__init__, CudaDevice.__init__ and api.Device as before) */
typedef struct {
    PyObject_HEAD
    PyObject *dev, *device, *address, *work_address, *needs_current, *held, *numbers, *capturing;
} StreamCore;

typedef struct {
    PyObject_HEAD
    PyObject *info, *id, *pools, *alloc_address, *live, *orphans, *spare_events, *staging;
    char closed;
} DeviceCore;

static PyTypeObject StreamCoreType, DeviceCoreType;

/* stream as a StreamCore whose fields are set, or NULL with a TypeError. */
static StreamCore *fast_stream(PyObject *stream) {
    if (PyObject_TypeCheck(stream, &StreamCoreType)) {
        StreamCore *core = (StreamCore *)stream;
        if (core->dev && core->device && core->address && core->work_address && core->needs_current && core->held &&
            core->numbers)
            return core;
    }
    PyErr_Format(PyExc_TypeError, "a FastStream of a CudaDevice was expected, got %s", Py_TYPE(stream)->tp_name);
    return NULL;
}

/* dev as a DeviceCore whose fields are set, or NULL with a TypeError. */
static DeviceCore *fast_device(PyObject *dev) {
    if (dev != NULL && PyObject_TypeCheck(dev, &DeviceCoreType)) {
        DeviceCore *core = (DeviceCore *)dev;
        if (core->info && core->id && core->pools && core->alloc_address && core->live && core->orphans &&
            core->spare_events && core->staging)
            return core;
    }
    PyErr_Format(PyExc_TypeError, "a CudaDevice was expected, got %s", dev ? Py_TYPE(dev)->tp_name : "nothing");
    return NULL;
}

static PyObject *buffer_type; /* CudaBuffer, a BufferCore: its instances are their own backing */
static PyObject *pooled_type; /* PooledBuffer (configure_pool) */
static PyObject *current;     /* driver.current, a ThreadCurrent (below): set once configured */
static long segment_bytes;    /* the staging ring's segment (staging.STAGING_SEGMENT) */
static long reuse_bytes;      /* from this size a staged copy asks to reuse the segment (staging.REUSE_BYTES) */

/* ThreadCurrent, driver.current where this module loads: which Device's primary context (its _id; 0: none) the
 * calling thread has current, kept in C thread-local storage so make_current reads it without a Python-level
 * lookup (a threading.local's read costs ~30 ns). CUDA's current context is per OS thread, as this is. */
static __thread long long thread_current_device;

static PyObject *current_get_device(PyObject *self, void *closure) {
    return PyLong_FromLongLong(thread_current_device);
}

static int current_set_device(PyObject *self, PyObject *value, void *closure) {
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "driver.current.device cannot be deleted");
        return -1;
    }
    long long id = PyLong_AsLongLong(value);
    if (id == -1 && PyErr_Occurred()) return -1;
    thread_current_device = id;
    return 0;
}

static PyGetSetDef current_getset[] = {
    {"device", current_get_device, current_set_device,
     "the _id of the Device whose primary context this thread has current (0: none)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ThreadCurrentType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ironaccel._fast.ThreadCurrent",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "driver.current: which Device's primary context the calling thread has current (C thread-local).",
    .tp_new = PyType_GenericNew,
    .tp_getset = current_getset,
};

/* configure(buffer_type, current, segment, reuse); current must be a ThreadCurrent: the record make_current reads
 * is the one the Python paths keep. */
static PyObject *fast_configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &BufferCoreType) ||
        !PyObject_TypeCheck(args[1], &ThreadCurrentType))
        return PyErr_Format(PyExc_TypeError, "configure(buffer_type, current, staging_segment_bytes, reuse_bytes)");
    segment_bytes = PyLong_AsLong(args[2]);
    reuse_bytes = PyLong_AsLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    Py_XSETREF(buffer_type, Py_NewRef(args[0]));
    Py_XSETREF(current, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

/* Make the device's context current on this thread unless it is (CudaDevice._make_current's test). */
static int make_current(PyObject *dev) {
    PyObject *id = PyObject_TypeCheck(dev, &DeviceCoreType) && ((DeviceCore *)dev)->id
                       ? Py_NewRef(((DeviceCore *)dev)->id) : GET(dev, id);
    if (id == NULL) return -1;
    long long mine = PyLong_AsLongLong(id);
    Py_DECREF(id);
    if (mine == -1 && PyErr_Occurred()) return -1;
    if (mine == thread_current_device) return 0;
    PyObject *done = PyObject_CallMethodNoArgs(dev, str_make_current);
    Py_XDECREF(done);
    return done ? 0 : -1;
}

/* ---- Launches ---------------------------------------------------------------------------------------------
 *
 * A launch is resolved, then made. Resolving reads what cuLaunchKernel needs of the LaunchPlan (grid, block,
 * the kernel's CUfunction) and of the api's ArgRule cached for the argument types (its Signature's codes);
 * it depends on nothing that changes (api.Kernel makes a plan per dims and a rule per types once and never
 * replaces them), so StreamCore.launch keeps the last few resolved launches of each kernel in its KernelCore,
 * by (stream's device, grid, block, argument types), and a launch that finds one does no attribute lookup,
 * no dict lookup and no allocation. Making it (launch_resolved) is the per-call part of Stream._launch_plan:
 * the buffers' liveness and device, a closed device, a capture, then the side effects and the driver call.
 * Anything uncommon returns TAKE_PYTHON_PATH before a side effect: the Python path then does the same launch
 * or raises its error. */
enum { TAKE_PYTHON_PATH = -1 };

/* What cuLaunchKernel needs of one plan and one sequence of argument types. */
typedef struct {
    void *function;
    unsigned dim[6];  /* grid, then block */
    PyObject *codes;  /* the rule's Signature codes (bytes, one per argument), a reference of its own */
} Resolved;

/* CudaKernel's compiled base: its CUfunction's address and its last resolved launches. */
enum { LAUNCHES_CACHED = 4 };

typedef struct {
    PyObject *device, *grid, *block, *types; /* the key: the stream's device, the dims as given, the types */
    PyObject *plan;                          /* the LaunchPlan, for the Python path */
    Resolved resolved;                       /* device NULL: the entry is empty */
} CachedLaunch;

typedef struct {
    PyObject_HEAD
    unsigned long long function_address;
    CachedLaunch cached[LAUNCHES_CACHED];
    unsigned replace; /* the entry the next resolved launch takes */
} KernelCore;

static PyTypeObject KernelCoreType;

/* The plan's and its rule's fields for arguments of these types into *out (out->codes a new reference): 1;
 * 0: the Python path (no rule for these types yet, or no CudaKernel's plan); -1: an error. */
static int resolve(PyObject *plan, PyObject *types, Resolved *out) {
    PyObject *kernel = NULL, *rules = NULL, *rule = NULL, *packing = NULL, *codes = NULL, *attr = NULL;
    int found = -1;
    if ((kernel = GET(plan, kernel)) == NULL || (rules = GET(kernel, arg_rules)) == NULL) goto out;
    rule = PyDict_Check(rules) ? Py_XNewRef(PyDict_GetItemWithError(rules, types)) : NULL;
    if (rule == NULL) {
        found = PyErr_Occurred() ? -1 : 0;
        goto out;
    }
    if ((packing = GET(rule, packing)) == NULL || (codes = GET(packing, codes)) == NULL) goto out;
    if (!PyBytes_Check(codes) || PyBytes_GET_SIZE(codes) != PyTuple_GET_SIZE(types) ||
        !PyObject_TypeCheck(kernel, &KernelCoreType) || ((KernelCore *)kernel)->function_address == 0) {
        found = 0;
        goto out;
    }
    if ((attr = GET(plan, grid)) == NULL || dims(attr, out->dim)) goto out;
    Py_SETREF(attr, GET(plan, block));
    if (attr == NULL || dims(attr, out->dim + 3)) goto out;
    out->function = (void *)(uintptr_t)((KernelCore *)kernel)->function_address;
    out->codes = Py_NewRef(codes);
    found = 1;
out:
    Py_XDECREF(kernel);
    Py_XDECREF(rules);
    Py_XDECREF(rule);
    Py_XDECREF(packing);
    Py_XDECREF(codes);
    Py_XDECREF(attr);
    return found;
}

/* A tuple of the arguments' types (what the api caches rules by). */
static PyObject *types_of(PyObject *argv) {
    Py_ssize_t n = PyTuple_GET_SIZE(argv);
    PyObject *types = PyTuple_New(n);
    if (types == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(types, i, Py_NewRef((PyObject *)Py_TYPE(PyTuple_GET_ITEM(argv, i))));
    return types;
}

/* The arguments as a tuple of their own (a list is copied: the Python code run during a launch, a pooled
 * buffer's _backing or a finalizer, may let another thread change the caller's list); NULL without an error
 * set: neither a tuple nor a list. */
static PyObject *args_tuple(PyObject *args) {
    if (PyTuple_CheckExact(args)) return Py_NewRef(args);
    if (PyList_CheckExact(args)) return PyList_AsTuple(args);
    return NULL;
}

/* Make the resolved launch with these arguments on stream: 0 with *result the CUresult, or TAKE_PYTHON_PATH
 * with nothing changed; -1: an error (the one the Python path raises, where it is about the arguments). */
static int launch_resolved(PyObject *stream, const Resolved *r, PyObject *argv, long *result) {
    if (buffer_type == NULL) {
        PyErr_Format(PyExc_RuntimeError, "launch before configure");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(argv);
    *result = TAKE_PYTHON_PATH;
    if (n > MAX_PARAMS) return 0;
    StreamCore *st = fast_stream(stream);
    if (st == NULL || fast_device(st->dev) == NULL) return -1;
    PyObject *dev = Py_NewRef(st->dev), *attr = NULL, *backings[MAX_PARAMS];
    PyObject **items = &PyTuple_GET_ITEM(argv, 0);
    const char *code = PyBytes_AS_STRING(r->codes);
    Py_ssize_t held = 0;
    uint64_t slots[MAX_PARAMS];
    void *params[MAX_PARAMS];
    int status = -1;
    if (((DeviceCore *)dev)->closed || (st->capturing != NULL && st->capturing != Py_None)) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        params[i] = &slots[i];
        if (code[i] != 'B') {
            if (pack_scalar(code[i], items[i], &slots[i])) goto error;
            continue;
        }
        PyObject *backing;
        if ((PyObject *)Py_TYPE(items[i]) == buffer_type) {
            if (((BufferCore *)items[i])->freed) goto done;
            backing = Py_NewRef(items[i]);
        } else if ((backing = PyObject_CallMethodOneArg(items[i], str_backing, str_op)) == NULL) {
            goto error; /* the error the Python path raises: the same method raised it */
        }
        backings[held++] = backing;
        if ((PyObject *)Py_TYPE(backing) == buffer_type) { /* the fields themselves */
            if (((BufferCore *)backing)->device != dev) goto done;
            slots[i] = ((BufferCore *)backing)->ptr;
            continue;
        }
        if ((attr = GET(backing, device)) == NULL) goto error;
        if (attr != dev) goto done;
        Py_SETREF(attr, GET(backing, ptr));
        if (attr == NULL) goto error;
        slots[i] = PyLong_AsUnsignedLongLong(attr);
        if (PyErr_Occurred()) goto error;
        Py_CLEAR(attr);
    }
    /* The launch is going ahead: the side effects of the Python path, in its order. */
    for (Py_ssize_t i = 0; i < held; i++) {
        if ((PyObject *)Py_TYPE(backings[i]) == buffer_type)
            Py_XSETREF(((BufferCore *)backings[i])->last_stream, Py_NewRef(stream));
        else if (PyObject_SetAttr(backings[i], str_last_stream, stream))
            goto error;
    }
    if (make_current(dev)) goto error;
    void *work;
    if (address(st->work_address, &work)) goto error;
    CUresult err;
    Py_BEGIN_ALLOW_THREADS
    err = cuLaunchKernel(r->function, r->dim[0], r->dim[1], r->dim[2], r->dim[3], r->dim[4], r->dim[5], 0, work,
                         params, NULL);
    Py_END_ALLOW_THREADS
    *result = err;
done:
    status = 0;
error:
    Py_XDECREF(attr);
    while (held) Py_DECREF(backings[--held]);
    Py_DECREF(dev);
    return status;
}

/* launch(plan, stream, args): api.Stream._launch_plan's common case, resolved on each call; returns the
 * CUresult or TAKE_PYTHON_PATH (launch_resolved above). */
static PyObject *fast_launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "launch takes 3 arguments, got %zd", nargs);
    PyObject *argv = args_tuple(args[2]), *types = NULL;
    if (argv == NULL) return PyErr_Occurred() ? NULL : PyLong_FromLong(TAKE_PYTHON_PATH);
    Resolved r = {NULL, {0}, NULL};
    long result = TAKE_PYTHON_PATH;
    int found = (types = types_of(argv)) == NULL ? -1 : resolve(args[0], types, &r);
    int failed = found < 0 || (found && launch_resolved(args[1], &r, argv, &result));
    Py_DECREF(argv);
    Py_XDECREF(types);
    Py_XDECREF(r.codes);
    return failed ? NULL : PyLong_FromLong(result);
}

static int kernel_traverse(KernelCore *self, visitproc visit, void *arg) {
    for (int i = 0; i < LAUNCHES_CACHED; i++) {
        CachedLaunch *c = &self->cached[i];
        Py_VISIT(c->device);
        Py_VISIT(c->grid);
        Py_VISIT(c->block);
        Py_VISIT(c->types);
        Py_VISIT(c->plan);
        Py_VISIT(c->resolved.codes);
    }
    return 0;
}

/* Put launch into entry c, then drop what c held: c is whole while a finalizer that the release runs looks. */
static void replace_launch(CachedLaunch *c, CachedLaunch launch) {
    CachedLaunch old = *c;
    *c = launch;
    Py_XDECREF(old.device);
    Py_XDECREF(old.grid);
    Py_XDECREF(old.block);
    Py_XDECREF(old.types);
    Py_XDECREF(old.plan);
    Py_XDECREF(old.resolved.codes);
}

static int kernel_clear(KernelCore *self) {
    for (int i = 0; i < LAUNCHES_CACHED; i++) replace_launch(&self->cached[i], (CachedLaunch){NULL});
    return 0;
}

static void kernel_dealloc(KernelCore *self) {
    PyObject_GC_UnTrack(self);
    kernel_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef kernel_members[] = {
    {"_function_address", T_ULONGLONG, offsetof(KernelCore, function_address), 0, "the CUfunction as an int"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject KernelCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ironaccel._fast.KernelCore",
    .tp_basicsize = sizeof(KernelCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "CudaKernel's compiled base: its CUfunction's address and the last launches resolved for it.",
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)kernel_traverse,
    .tp_clear = (inquiry)kernel_clear,
    .tp_dealloc = (destructor)kernel_dealloc,
    .tp_members = kernel_members,
};

/* ---- Events and streams: FastEvent's and FastStream's compiled bases ----------------------------------------
 *
 * EventCore, FastEvent's base, holds an event's fields in C (_stream, _timing, _handle: the CUevent object,
 * _address: the same as an int, _mark: the stream's copy_dtoh destinations numbered below it are done once the
 * event is) and does query/synchronize and the CUevent's return to the device's spare list (its finalizer,
 * CudaEvent.__del__'s work) without Python frames. StreamCore, FastStream's base, does Stream.record() and
 * Stream.synchronize() the same way. Whatever is not their common case (a closed device, a capture, a
 * timeout, a timing event, arguments they do not take) goes, unchanged, to the pure-Python methods given by
 * configure_streams, which raise the API's errors; a failed driver call raises through fast.fail_named. */
typedef struct {
    PyObject_HEAD
    PyObject *stream, *handle;
    unsigned long long address;
    long long mark;
    char timing;
} EventCore;

static PyTypeObject EventCoreType;
static PyTypeObject *event_type;     /* FastEvent */
static PyObject *fail_named;         /* fast.fail_named(entry point, CUresult): raises */
static PyObject *event_synchronize_python, *event_query_python; /* api.Event.synchronize, api.Event.query */
static PyObject *event_wait_python;  /* CudaEvent._synchronize: a wait with a timeout */
static PyObject *stream_record_python, *stream_synchronize_python; /* api.Stream.record, api.Stream.synchronize */
static PyObject *stream_launch_python; /* api.Stream.launch */

static PyObject *fast_configure_streams(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8 || !PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &EventCoreType))
        return PyErr_Format(PyExc_TypeError, "configure_streams(event_type, fail_named, event_synchronize, "
                                             "event_query, event_wait, stream_record, stream_synchronize, "
                                             "stream_launch)");
    Py_XSETREF(event_type, (PyTypeObject *)Py_NewRef(args[0]));
    PyObject **slots[] = {&fail_named, &event_synchronize_python, &event_query_python, &event_wait_python,
                          &stream_record_python, &stream_synchronize_python, &stream_launch_python};
    for (int i = 0; i < 7; i++) Py_XSETREF(*slots[i], Py_NewRef(args[i + 1]));
    Py_RETURN_NONE;
}

static PyObject *raise_failed(const char *entry_point, CUresult err) {
    if (fail_named == NULL) return PyErr_Format(PyExc_RuntimeError, "%s failed (%d) before configure_streams",
                                                entry_point, err);
    PyObject *raised = PyObject_CallFunction(fail_named, "si", entry_point, err);
    Py_XDECREF(raised); /* fail_named raises: NULL, with its error set */
    if (raised != NULL && !PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "%s failed (%d)", entry_point, err);
    return NULL;
}

/* The blocking waits, skipped when a query says the work is done (the file's docstring says why). */
static CUresult wait_stream(CUstream queue) {
    if (cuStreamQuery(queue) == 0) return 0;
    CUresult err;
    Py_BEGIN_ALLOW_THREADS
    err = cuStreamSynchronize(queue);
    Py_END_ALLOW_THREADS
    return err;
}

static CUresult wait_event(CUevent event) {
    if (cuEventQuery(event) == 0) return 0;
    CUresult err;
    Py_BEGIN_ALLOW_THREADS
    err = cuEventSynchronize(event);
    Py_END_ALLOW_THREADS
    return err;
}

/* The same call with self prepended: how a compiled method hands its case to the pure-Python method. */
static PyObject *call_python(PyObject *function, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
    if (function == NULL) return PyErr_Format(PyExc_RuntimeError, "%s used before configure_streams",
                                              Py_TYPE(self)->tp_name);
    Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject *small[8], **all = total < 8 ? small : PyMem_Malloc((total + 1) * sizeof(PyObject *));
    if (all == NULL) return PyErr_NoMemory();
    all[0] = self;
    for (Py_ssize_t i = 0; i < total; i++) all[i + 1] = args[i];
    PyObject *result = PyObject_Vectorcall(function, all, nargs + 1, kwnames);
    if (all != small) PyMem_Free(all);
    return result;
}

/* stream._release_held(mark): the copy_dtoh destinations held below mark are done. */
static int release_held(PyObject *stream, long long mark) {
    PyObject *number = PyLong_FromLongLong(mark);
    if (number == NULL) return -1;
    PyObject *done = PyObject_CallMethodOneArg(stream, str_release_held, number);
    Py_DECREF(number);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* Is the device of this stream closed? 1, 0, or -1 with the error set. */
static int stream_device_closed(PyObject *stream) {
    StreamCore *st = fast_stream(stream);
    DeviceCore *dev = st ? fast_device(st->device) : NULL;
    return dev ? dev->closed : -1;
}

static int event_ready(EventCore *self) {
    if (self->stream != NULL && self->handle != NULL) return 0;
    PyErr_SetString(PyExc_TypeError, "this event was not made by Stream.record");
    return -1;
}

/* The wait without the API's checks (CudaEvent._synchronize without a timeout). */
static PyObject *event_wait(EventCore *self) {
    if (event_ready(self)) return NULL;
    CUresult err = wait_event((CUevent)(uintptr_t)self->address);
    if (err) return raise_failed("cuEventSynchronize", err);
    if (self->mark && release_held(self->stream, self->mark)) return NULL;
    Py_RETURN_NONE;
}

static PyObject *event_poll(EventCore *self) {
    if (event_ready(self)) return NULL;
    CUresult err;
    CUevent ev = (CUevent)(uintptr_t)self->address;
    Py_BEGIN_ALLOW_THREADS
    err = cuEventQuery(ev);
    Py_END_ALLOW_THREADS
    if (err == CUDA_ERROR_NOT_READY) Py_RETURN_FALSE;
    if (err) return raise_failed("cuEventQuery", err);
    if (self->mark && release_held(self->stream, self->mark)) return NULL;
    Py_RETURN_TRUE;
}

/* synchronize(timeout=None): api.Event.synchronize; only the blocking wait on an open device is done here. */
static PyObject *event_synchronize(EventCore *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (nargs == 1 && kwnames == NULL && args[0] == Py_None) nargs = 0;
    if (nargs || kwnames || event_ready(self))
        return call_python(event_synchronize_python, (PyObject *)self, args, nargs, kwnames);
    int closed = stream_device_closed(self->stream);
    if (closed < 0) return NULL;
    if (closed) return call_python(event_synchronize_python, (PyObject *)self, args, nargs, kwnames);
    return event_wait(self);
}

static PyObject *event_query(EventCore *self, PyObject *unused) {
    if (event_ready(self)) return NULL;
    int closed = stream_device_closed(self->stream);
    if (closed < 0) return NULL;
    if (closed) return call_python(event_query_python, (PyObject *)self, NULL, 0, NULL);
    return event_poll(self);
}

/* _synchronize(timeout=None): the abstract method api.Event.synchronize calls after its checks. */
static PyObject *event_synchronize_unchecked(EventCore *self, PyObject *const *args, Py_ssize_t nargs,
                                             PyObject *kwnames) {
    if (nargs == 1 && kwnames == NULL && args[0] == Py_None) nargs = 0;
    if (nargs || kwnames) return call_python(event_wait_python, (PyObject *)self, args, nargs, kwnames);
    return event_wait(self);
}

/* CudaEvent.__del__: the CUevent goes back to its device's spare list unless the device is closed. */
static void event_finalize(EventCore *self) {
    if (self->stream == NULL || self->handle == NULL) return;
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
#else
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
#endif
    StreamCore *stream = fast_stream(self->stream);
    DeviceCore *dev = stream ? fast_device(stream->dev) : NULL;
    if (dev != NULL && !dev->closed) {
        PyObject *spare = dev->spare_events;
        PyObject *list = PyDict_Check(spare) ? PyDict_GetItemWithError(spare, self->timing ? Py_True : Py_False) : NULL;
        if (list != NULL && PyList_Check(list)) PyList_Append(list, self->handle);
        else if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "_spare_events[timing] is no list");
    }
    if (PyErr_Occurred()) PyErr_WriteUnraisable((PyObject *)self);
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyErr_Restore(type, value, traceback);
#endif
}

static int event_traverse(EventCore *self, visitproc visit, void *arg) {
    Py_VISIT(self->stream);
    Py_VISIT(self->handle);
    return 0;
}

static int event_clear(EventCore *self) {
    Py_CLEAR(self->stream);
    Py_CLEAR(self->handle);
    return 0;
}

static void event_dealloc(EventCore *self) {
    if (PyObject_CallFinalizerFromDealloc((PyObject *)self)) return; /* resurrected */
    PyObject_GC_UnTrack(self);
    event_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A spare CUevent of the stream's device recorded on the stream, as a FastEvent: FastStream._record in one call.
 * The event is numbered after the stream's held copy destinations, as the Python path does. Returns the
 * event, NO_SPARE_EVENT (the Python side creates one and calls again) or the failed call's CUresult (the event
 * is dropped, which gives its CUevent back). */
enum { NO_SPARE_EVENT = -1 };

static PyObject *record_event(PyObject *stream, int timing) {
    if (current == NULL || event_type == NULL) return PyErr_Format(PyExc_RuntimeError, "record before configure");
    PyObject *attr = NULL, *result = NULL;
    EventCore *event = NULL;
    StreamCore *st = fast_stream(stream);
    DeviceCore *dev = st ? fast_device(st->dev) : NULL;
    if (dev == NULL) return NULL;
    if (st->needs_current == Py_True && make_current((PyObject *)dev)) return NULL;
    PyObject *spare = PyDict_Check(dev->spare_events)
                          ? PyDict_GetItemWithError(dev->spare_events, timing ? Py_True : Py_False) : NULL;
    if (spare == NULL || !PyList_Check(spare)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "record: _spare_events[timing] is no list");
        goto out;
    }
    Py_ssize_t n = PyList_GET_SIZE(spare);
    if (n == 0) {
        result = PyLong_FromLong(NO_SPARE_EVENT);
        goto out;
    }
    PyObject *handle = Py_NewRef(PyList_GET_ITEM(spare, n - 1));
    if (PyList_SetSlice(spare, n - 1, n, NULL)) {
        Py_DECREF(handle);
        goto out;
    }
    if ((event = (EventCore *)event_type->tp_alloc(event_type, 0)) == NULL) {
        PyList_Append(spare, handle); /* back where it was (a failed append leaves it to the driver) */
        Py_DECREF(handle);
        goto out;
    }
    /* the event owns the handle from here: dropping it gives the handle back to the spare list */
    event->stream = Py_NewRef(stream);
    event->handle = handle;
    event->timing = (char)timing;
    if ((attr = PyNumber_Long(handle)) == NULL) goto out;
    event->address = PyLong_AsUnsignedLongLong(attr);
    if (PyErr_Occurred()) goto out;
    Py_ssize_t held = PyObject_Size(st->held);
    if (held < 0) goto out;
    if (held) {
        PyObject *mark = PyIter_Next(st->numbers);
        if (mark == NULL) goto out;
        event->mark = PyLong_AsLongLong(mark);
        Py_DECREF(mark);
        if (PyErr_Occurred()) goto out;
    }
    void *queue;
    if (address(st->address, &queue)) goto out;
    CUresult err;
    CUevent ev = (CUevent)(uintptr_t)event->address;
    Py_BEGIN_ALLOW_THREADS
    err = cuEventRecord(ev, queue);
    Py_END_ALLOW_THREADS
    result = err ? PyLong_FromLong(err) : Py_NewRef((PyObject *)event);
out:
    Py_XDECREF(attr);
    Py_XDECREF(event);
    return result;
}

static PyObject *fast_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "record(stream, timing)");
    int timing = PyObject_IsTrue(args[1]);
    return timing < 0 ? NULL : record_event(args[0], timing);
}

/* record(*, timing=False): api.Stream.record; a plain record on an open device that is not capturing is done
 * here, anything else by the Python method. */
static PyObject *stream_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (nargs || kwnames) return call_python(stream_record_python, self, args, nargs, kwnames);
    int closed = stream_device_closed(self);
    if (closed < 0) return NULL;
    PyObject *capturing = ((StreamCore *)self)->capturing;
    if (closed || (capturing != NULL && capturing != Py_None))
        return call_python(stream_record_python, self, args, nargs, kwnames);
    PyObject *event = record_event(self, 0);
    if (event == NULL || !PyLong_CheckExact(event)) return event;
    long err = PyLong_AsLong(event);
    Py_DECREF(event);
    if (err != NO_SPARE_EVENT) return raise_failed("cuEventRecord", (CUresult)err);
    return PyObject_CallMethodOneArg(self, str_record_python_path, Py_False); /* creates a CUevent, records */
}

/* synchronize(timeout=None): api.Stream.synchronize and FastStream's blocking wait in one call; a timeout or a
 * closed device goes to the Python method. */
static PyObject *stream_synchronize(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (nargs == 1 && kwnames == NULL && args[0] == Py_None) nargs = 0;
    if (nargs || kwnames) return call_python(stream_synchronize_python, self, args, nargs, kwnames);
    StreamCore *st = fast_stream(self);
    DeviceCore *dev = st ? fast_device(st->dev) : NULL;
    long long mark = 0;
    void *queue;
    if (dev == NULL) return NULL;
    if (dev->closed) return call_python(stream_synchronize_python, self, args, nargs, kwnames);
    if (st->needs_current == Py_True && make_current((PyObject *)dev)) return NULL;
    Py_ssize_t held = PyObject_Size(st->held);
    if (held < 0) return NULL;
    if (held) {
        PyObject *number = PyIter_Next(st->numbers);
        if (number == NULL) return NULL;
        mark = PyLong_AsLongLong(number);
        Py_DECREF(number);
        if (PyErr_Occurred()) return NULL;
    }
    if (address(st->address, &queue)) return NULL;
    CUresult err = wait_stream(queue);
    if (err) return raise_failed("cuStreamSynchronize", err);
    if (mark && release_held(self, mark)) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef event_methods[] = {
    {"synchronize", (PyCFunction)(void (*)(void))event_synchronize, METH_FASTCALL | METH_KEYWORDS,
     "Event.synchronize(timeout=None): block until the event is complete."},
    {"query", (PyCFunction)event_query, METH_NOARGS, "Event.query(): has the device reached the event?"},
    {"_synchronize", (PyCFunction)(void (*)(void))event_synchronize_unchecked, METH_FASTCALL | METH_KEYWORDS,
     "The wait after the API's checks."},
    {"_query", (PyCFunction)event_poll, METH_NOARGS, "The query after the API's checks."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef event_members[] = {
    {"_stream", T_OBJECT_EX, offsetof(EventCore, stream), READONLY, NULL},
    {"_handle", T_OBJECT_EX, offsetof(EventCore, handle), READONLY, "the CUevent"},
    {"_address", T_ULONGLONG, offsetof(EventCore, address), READONLY, "the CUevent as an int"},
    {"_mark", T_LONGLONG, offsetof(EventCore, mark), READONLY, NULL},
    {"_timing", T_BOOL, offsetof(EventCore, timing), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject EventCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ironaccel._fast.EventCore",
    .tp_basicsize = sizeof(EventCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "FastEvent's compiled base: its fields, query, synchronize and the CUevent's return.",
    .tp_traverse = (traverseproc)event_traverse,
    .tp_clear = (inquiry)event_clear,
    .tp_dealloc = (destructor)event_dealloc,
    .tp_finalize = (destructor)event_finalize,
    .tp_methods = event_methods,
    .tp_members = event_members,
};

/* api._dims_key's test: an exact int, or a tuple of exact ints (what Kernel._plan caches plans by). */
static int plan_dims(PyObject *value) {
    if (PyLong_CheckExact(value)) return 1;
    if (!PyTuple_CheckExact(value)) return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(value); i++)
        if (!PyLong_CheckExact(PyTuple_GET_ITEM(value, i))) return 0;
    return 1;
}

/* Would Kernel._plans find the same plan for dims given as either of these (plan_dims) values? */
static int same_dims(PyObject *cached, PyObject *given) {
    if (cached == given) return 1;
    if (PyLong_CheckExact(cached) || PyLong_CheckExact(given))
        return PyLong_CheckExact(cached) && PyLong_CheckExact(given) &&
               PyObject_RichCompareBool(cached, given, Py_EQ) == 1;
    Py_ssize_t n = PyTuple_GET_SIZE(cached);
    if (PyTuple_GET_SIZE(given) != n) return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyObject_RichCompareBool(PyTuple_GET_ITEM(cached, i), PyTuple_GET_ITEM(given, i), Py_EQ) != 1) return 0;
    return 1;
}

/* The kernel's resolved launch for a stream of this device, these dims and the types of argv, or NULL. */
static CachedLaunch *cached_launch(KernelCore *kernel, PyObject *device, PyObject *grid, PyObject *block,
                                   PyObject *argv) {
    Py_ssize_t n = PyTuple_GET_SIZE(argv);
    for (int i = 0; i < LAUNCHES_CACHED; i++) {
        CachedLaunch *c = &kernel->cached[i];
        if (c->device == NULL || c->device != device || PyTuple_GET_SIZE(c->types) != n) continue;
        Py_ssize_t k = 0;
        while (k < n && PyTuple_GET_ITEM(c->types, k) == (PyObject *)Py_TYPE(PyTuple_GET_ITEM(argv, k))) k++;
        if (k == n && same_dims(c->grid, grid) && same_dims(c->block, block)) return c;
    }
    return NULL;
}

/* Keep a resolved launch in the kernel's entry to replace next (references of its own). */
static void remember_launch(KernelCore *kernel, PyObject *device, PyObject *grid, PyObject *block,
                            PyObject *types, PyObject *plan, const Resolved *r) {
    CachedLaunch *c = &kernel->cached[kernel->replace];
    kernel->replace = (kernel->replace + 1) % LAUNCHES_CACHED;
    Py_INCREF(r->codes);
    replace_launch(c, (CachedLaunch){Py_NewRef(device), Py_NewRef(grid), Py_NewRef(block), Py_NewRef(types),
                                     Py_NewRef(plan), *r});
}

/* A launch the kernel has not resolved yet: Stream.launch's checks (the kernel's module.device is the stream's
 * device, a plan cached for these dims), then resolve. 1: *plan and *r set (new references) and the launch
 * remembered; 0: the Python path, *plan NULL for api.Stream.launch (another device's kernel, no plan for the
 * dims yet) or the plan for Stream._launch_plan (no rule for these types yet); -1: an error. */
static int first_launch(PyObject *stream, PyObject *kernel, PyObject *grid, PyObject *block, PyObject *argv,
                        PyObject **plan, Resolved *r) {
    PyObject *module = NULL, *theirs = NULL, *mine = NULL, *plans = NULL, *key = NULL, *types = NULL;
    int found = -1;
    if ((module = GET(kernel, module)) == NULL || (theirs = PyObject_GetAttr(module, str_current_device)) == NULL || /* module.device */
        (mine = GET(stream, device)) == NULL || (plans = GET(kernel, plans)) == NULL ||
        (key = PyTuple_Pack(2, grid, block)) == NULL)
        goto out;
    PyObject *cached = PyDict_Check(plans) ? PyDict_GetItemWithError(plans, key) : NULL; /* borrowed */
    if (cached == NULL && PyErr_Occurred()) goto out;
    found = 0;
    if (theirs != mine || cached == NULL) goto out;
    *plan = Py_NewRef(cached);
    found = (types = types_of(argv)) == NULL ? -1 : resolve(*plan, types, r);
    if (found == 1) remember_launch((KernelCore *)kernel, mine, grid, block, types, *plan, r);
out:
    Py_XDECREF(module);
    Py_XDECREF(theirs);
    Py_XDECREF(mine);
    Py_XDECREF(plans);
    Py_XDECREF(key);
    Py_XDECREF(types);
    return found;
}

/* launch(kernel, grid, block, args=()): api.Stream.launch when its checks pass and the kernel has a plan for
 * these exact dims, then the compiled launch (launch_resolved above), resolved once per kernel, dims and
 * argument types; a first launch of these dims, anything the checks would refuse, and what the compiled
 * launch does not take go to the Python methods. */
static PyObject *stream_launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (kwnames || nargs < 3 || nargs > 4 || !PyObject_TypeCheck(args[0], &KernelCoreType) || !plan_dims(args[1]) ||
        !plan_dims(args[2]))
        return call_python(stream_launch_python, self, args, nargs, kwnames);
    PyObject *argv = nargs == 4 ? args_tuple(args[3]) : PyTuple_New(0);
    if (argv == NULL) return PyErr_Occurred() ? NULL : call_python(stream_launch_python, self, args, nargs, kwnames);
    PyObject *plan = NULL, *result = NULL;
    Resolved r = {NULL, {0}, NULL};
    CachedLaunch *c = cached_launch((KernelCore *)args[0], ((StreamCore *)self)->device, args[1], args[2], argv);
    if (c != NULL && ((KernelCore *)args[0])->function_address == 0) c = NULL; /* its module was closed */
    int found = 1;
    long err;
    if (c != NULL) {
        plan = Py_NewRef(c->plan);
        r = c->resolved;
        Py_INCREF(r.codes);
    } else if ((found = first_launch(self, args[0], args[1], args[2], argv, &plan, &r)) == 0) {
        result = plan == NULL ? call_python(stream_launch_python, self, args, nargs, kwnames)
                              : PyObject_CallMethodObjArgs(self, str_launch_plan, plan, argv, NULL);
    }
    if (found == 1 && launch_resolved(self, &r, argv, &err) == 0) {
        if (err == TAKE_PYTHON_PATH) result = PyObject_CallMethodObjArgs(self, str_launch_plan, plan, argv, NULL);
        else if (err) raise_failed("cuLaunchKernel", (CUresult)err);
        else result = Py_NewRef(Py_None);
    }
    Py_DECREF(argv);
    Py_XDECREF(plan);
    Py_XDECREF(r.codes);
    return result;
}

static PyObject *stream_copy_htod(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
static PyObject *stream_copy_dtoh(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

static PyMethodDef stream_methods[] = {
    {"copy_htod", (PyCFunction)(void (*)(void))stream_copy_htod, METH_FASTCALL | METH_KEYWORDS,
     "Stream.copy_htod(dst, src, *, dst_offset=0): copy all of host src into dst at dst_offset."},
    {"copy_dtoh", (PyCFunction)(void (*)(void))stream_copy_dtoh, METH_FASTCALL | METH_KEYWORDS,
     "Stream.copy_dtoh(dst, src, *, src_offset=0): fill all of host dst from src at src_offset."},
    {"launch", (PyCFunction)(void (*)(void))stream_launch, METH_FASTCALL | METH_KEYWORDS,
     "Stream.launch(kernel, grid, block, args=()): run kernel over grid blocks of block threads."},
    {"record", (PyCFunction)(void (*)(void))stream_record, METH_FASTCALL | METH_KEYWORDS,
     "Stream.record(*, timing=False): an event marking everything enqueued so far."},
    {"synchronize", (PyCFunction)(void (*)(void))stream_synchronize, METH_FASTCALL | METH_KEYWORDS,
     "Stream.synchronize(timeout=None): block until the stream's work has completed."},
    {NULL, NULL, 0, NULL},
};


static PyMemberDef stream_members[] = {
    {"_dev", T_OBJECT_EX, offsetof(StreamCore, dev), 0, NULL},
    {"_device", T_OBJECT_EX, offsetof(StreamCore, device), 0, NULL},
    {"_address", T_OBJECT_EX, offsetof(StreamCore, address), 0, "the CUstream as an int"},
    {"_work_address", T_OBJECT_EX, offsetof(StreamCore, work_address), 0, "where launches go, as an int"},
    {"_needs_current", T_OBJECT_EX, offsetof(StreamCore, needs_current), 0, NULL},
    {"_held", T_OBJECT_EX, offsetof(StreamCore, held), 0, NULL},
    {"_numbers", T_OBJECT_EX, offsetof(StreamCore, numbers), 0, NULL},
    {"_capturing", T_OBJECT, offsetof(StreamCore, capturing), 0, "the Graph being captured (None: none)"},
    {NULL, 0, 0, 0, NULL},
};

static int stream_traverse(StreamCore *self, visitproc visit, void *arg) {
    Py_VISIT(self->dev);
    Py_VISIT(self->device);
    Py_VISIT(self->address);
    Py_VISIT(self->work_address);
    Py_VISIT(self->needs_current);
    Py_VISIT(self->held);
    Py_VISIT(self->numbers);
    Py_VISIT(self->capturing);
    return 0;
}

static int stream_clear(StreamCore *self) {
    Py_CLEAR(self->dev);
    Py_CLEAR(self->device);
    Py_CLEAR(self->address);
    Py_CLEAR(self->work_address);
    Py_CLEAR(self->needs_current);
    Py_CLEAR(self->held);
    Py_CLEAR(self->numbers);
    Py_CLEAR(self->capturing);
    return 0;
}

static void stream_dealloc(StreamCore *self) {
    PyObject_GC_UnTrack(self);
    stream_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject StreamCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ironaccel._fast.StreamCore",
    .tp_basicsize = sizeof(StreamCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "FastStream's compiled base: its hot fields, record, synchronize, launch and small copy_htod.",
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)stream_traverse,
    .tp_clear = (inquiry)stream_clear,
    .tp_dealloc = (destructor)stream_dealloc,
    .tp_methods = stream_methods,
    .tp_members = stream_members,
};

static PyObject *fast_copy_dtoh(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *stream;
    Py_buffer host;
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "copy_dtoh takes 3 arguments, got %zd", nargs);
    CUdeviceptr src = PyLong_AsUnsignedLongLong(args[1]);
    if (PyErr_Occurred() || address(args[2], &stream)) return NULL;
    if (PyObject_GetBuffer(args[0], &host, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS)) return NULL;
    CUresult err;
    Py_BEGIN_ALLOW_THREADS
    err = cuMemcpyDtoHAsync_v2(host.buf, src, (size_t)host.len, stream);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&host); /* the caller keeps the array alive until a wait covers the copy */
    return PyLong_FromLong(err);
}

/* ---- Device buffers: CudaBuffer's compiled base ---------------------------------------------------------------
 *
 * BufferCore holds a buffer's fields in C (_device, _nbytes, _freed, _ptr, _last_stream) and does free() on a
 * device with memory pools (cuMemFreeAsync, ordered after the buffer's last stream while that stream lives,
 * else on the allocation stream) and CudaBuffer.__del__'s work (a C finalizer: a buffer dropped unfreed frees
 * itself; a failed free leaves its pointer in device._orphans for close). alloc(device, nbytes) is
 * CudaDevice._alloc with memory pools in one call: cuMemAllocAsync on the allocation stream and a wait for it
 * (wait_stream; a failed wait gives the memory back), the buffer made and registered in device._live
 * (pointer -> weak reference). Anything else (a device without pools, a closed one: CudaBuffer._release) and
 * every error goes through the Python methods given by configure_buffers. */
static PyObject *release_python; /* CudaBuffer._release */
static PyObject *driver_error;   /* ironaccel.errors.DriverError */

static PyObject *device_alloc_python; /* api.Device.alloc */

static PyObject *fast_configure_buffers(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyType_Check(args[1]))
        return PyErr_Format(PyExc_TypeError, "configure_buffers(release, DriverError, device_alloc)");
    Py_XSETREF(release_python, Py_NewRef(args[0]));
    Py_XSETREF(driver_error, Py_NewRef(args[1]));
    Py_XSETREF(device_alloc_python, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/* The common case of CudaBuffer._release after api.Buffer.free's check: 0, or -1 with the error set (the
 * buffer live again when the driver refused, as the Python path leaves it). */
static int buffer_free(BufferCore *self) {
    if (self->freed) return 0;
    if (self->device == NULL) {
        PyErr_SetString(PyExc_TypeError, "this buffer was not made by Device.alloc");
        return -1;
    }
    self->freed = 1;
    PyObject *dev = self->device, *attr = NULL, *key = NULL;
    int result = -1;
    DeviceCore *core = PyObject_TypeCheck(dev, &DeviceCoreType) ? (DeviceCore *)dev : NULL;
    int pools = core != NULL && core->pools != NULL && core->alloc_address != NULL && core->live != NULL
                    ? PyObject_IsTrue(core->pools) : 0;
    if (pools < 0) goto out;
    if (!pools || cuMemFreeAsync == NULL || release_python == NULL || current == NULL) {
        attr = PyObject_CallOneArg(release_python ? release_python : Py_None, (PyObject *)self);
        result = attr == NULL ? -1 : 0;
        goto out;
    }
    if (core->closed) { /* closing the device freed it */
        result = 0;
        goto out;
    }
    if (make_current(dev)) goto refused;
    PyObject *last = self->last_stream; /* the stream the free is ordered on; None: the allocation stream */
    if (last != NULL && last != Py_None) {
        if ((attr = GET(last, alive)) == NULL) goto refused;
        if (attr == Py_False) last = NULL;
    } else {
        last = NULL;
    }
    Py_XSETREF(attr, last != NULL ? GET(last, address) : Py_NewRef(core->alloc_address));
    void *queue;
    if (attr == NULL || address(attr, &queue)) goto refused;
    CUresult err;
    CUdeviceptr ptr = self->ptr;
    Py_BEGIN_ALLOW_THREADS
    err = cuMemFreeAsync(ptr, queue);
    Py_END_ALLOW_THREADS
    if (err) {
        raise_failed("cuMemFreeAsync", err);
        goto refused;
    }
    PyObject *live = core->live;
    if ((key = PyLong_FromUnsignedLongLong(self->ptr)) == NULL) goto out;
    if (!PyDict_Check(live)) {
        PyErr_SetString(PyExc_TypeError, "free: the device's _live is no dict");
        goto out;
    }
    if (PyDict_DelItem(live, key)) { /* dev._live.pop(ptr, None) */
        if (!PyErr_ExceptionMatches(PyExc_KeyError)) goto out;
        PyErr_Clear();
    }
    Py_CLEAR(self->last_stream);
    result = 0;
    goto out;
refused: /* a DriverError: still live (and in dev._live); free() may be retried, close() frees it */
    if (PyErr_ExceptionMatches(driver_error)) self->freed = 0;
out:
    Py_XDECREF(attr);
    Py_XDECREF(key);
    return result;
}

static PyObject *buffer_free_method(BufferCore *self, PyObject *unused) {
    if (buffer_free(self)) return NULL;
    Py_RETURN_NONE;
}

/* CudaBuffer.__del__: a buffer dropped without free() gives its memory back (stream-ordered, so never too
 * early); when that fails there is nobody to tell: the pointer stays the device's, and close() frees it. */
static void buffer_finalize(BufferCore *self) {
    if (self->freed || self->device == NULL) return;
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
#else
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
#endif
    if (buffer_free(self)) {
        if (driver_error != NULL && PyErr_ExceptionMatches(driver_error)) {
            PyErr_Clear();
            PyObject *orphans = GET(self->device, orphans), *key = PyLong_FromUnsignedLongLong(self->ptr);
            if (orphans != NULL && key != NULL) {
                PyObject *done = PyObject_CallMethodOneArg(orphans, str_append, key);
                Py_XDECREF(done);
            }
            Py_XDECREF(orphans);
            Py_XDECREF(key);
        }
        if (PyErr_Occurred()) PyErr_WriteUnraisable((PyObject *)self);
    }
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyErr_Restore(type, value, traceback);
#endif
}

static int buffer_traverse(BufferCore *self, visitproc visit, void *arg) {
    Py_VISIT(self->device);
    Py_VISIT(self->nbytes);
    Py_VISIT(self->last_stream);
    return 0;
}

static int buffer_clear(BufferCore *self) {
    Py_CLEAR(self->device);
    Py_CLEAR(self->nbytes);
    Py_CLEAR(self->last_stream);
    return 0;
}

static void buffer_dealloc(BufferCore *self) {
    if (PyObject_CallFinalizerFromDealloc((PyObject *)self)) return; /* resurrected */
    PyObject_GC_UnTrack(self);
    buffer_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* alloc(device, nbytes): the buffer, registered in device._live, or a tuple (entry point name, CUresult) of the
 * call that failed (the memory given back when the wait failed). */
static PyObject *fast_alloc(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "alloc takes 2 arguments, got %zd", nargs);
    if (buffer_type == NULL || !PyType_IsSubtype((PyTypeObject *)buffer_type, &BufferCoreType))
        return PyErr_Format(PyExc_RuntimeError, "alloc before configure");
    PyObject *dev = args[0];
    DeviceCore *core = fast_device(dev);
    void *stream;
    if (core == NULL || address(core->alloc_address, &stream)) return NULL;
    size_t nbytes = PyLong_AsSize_t(args[1]);
    if (PyErr_Occurred()) return NULL;
    CUdeviceptr ptr = 0;
    CUresult err;
    const char *failed = "cuMemAllocAsync";
    Py_BEGIN_ALLOW_THREADS
    err = cuMemAllocAsync(&ptr, nbytes, stream);
    Py_END_ALLOW_THREADS
    if (!err && (err = wait_stream(stream)) != 0) {
        failed = "cuStreamSynchronize";
        cuMemFreeAsync(ptr, stream);
    }
    if (err) return Py_BuildValue("(si)", failed, err);
    PyTypeObject *type = (PyTypeObject *)buffer_type;
    BufferCore *buf = (BufferCore *)type->tp_alloc(type, 0);
    PyObject *key = NULL, *ref = NULL;
    if (buf == NULL) goto lost;
    buf->device = Py_NewRef(dev);
    buf->nbytes = Py_NewRef(args[1]);
    buf->ptr = ptr;
    if ((key = PyLong_FromUnsignedLongLong(ptr)) == NULL || (ref = PyWeakref_NewRef((PyObject *)buf, NULL)) == NULL ||
        PyObject_SetItem(core->live, key, ref)) {
        buf->freed = 1; /* not handed out: given back below, never by its finalizer */
        goto lost;
    }
    Py_DECREF(key);
    Py_DECREF(ref);
    return (PyObject *)buf;
lost:
    Py_XDECREF(key);
    Py_XDECREF(ref);
    Py_XDECREF(buf);
    Py_BEGIN_ALLOW_THREADS
    cuMemFreeAsync(ptr, stream);
    Py_END_ALLOW_THREADS
    return NULL;
}

/* DeviceCore.alloc(nbytes): api.Device.alloc's common case (an int in 1..max_alloc, the device open) on a
 * device with memory pools, then alloc() above; anything else goes to api.Device.alloc. */
static PyObject *device_alloc(PyObject *self, PyObject *nbytes) {
    PyObject *attr = NULL, *limit = NULL, *result = NULL;
    int overflow;
    long long n = PyLong_CheckExact(nbytes) ? PyLong_AsLongLongAndOverflow(nbytes, &overflow) : 0;
    if (n < 1 || overflow || cuMemAllocAsync == NULL || buffer_type == NULL || device_alloc_python == NULL ||
        fail_named == NULL)
        goto python;
    if (!PyObject_TypeCheck(self, &DeviceCoreType) || ((DeviceCore *)self)->info == NULL) goto python;
    if ((limit = GET(((DeviceCore *)self)->info, limits)) == NULL) goto out;
    Py_SETREF(limit, GET(limit, max_alloc));
    if (limit == NULL) goto out;
    long long most = PyLong_AsLongLong(limit);
    if (most == -1 && PyErr_Occurred()) goto out;
    if (n > most) goto python;
    DeviceCore *core = fast_device(self);
    if (core == NULL) goto out;
    if (core->closed) goto python;
    int pools = PyObject_IsTrue(core->pools);
    if (pools < 0) goto out;
    if (!pools) goto python;
    if (make_current(self)) goto out;
    PyObject *forward[2] = {self, nbytes};
    if ((attr = fast_alloc(NULL, forward, 2)) == NULL) goto out;
    if (!PyTuple_Check(attr)) {
        result = Py_NewRef(attr);
        goto out;
    }
    Py_SETREF(attr, PyObject_Call(fail_named, attr, NULL)); /* raises, naming the entry point */
    if (attr != NULL && !PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "alloc failed");
out:
    Py_XDECREF(attr);
    Py_XDECREF(limit);
    return result;
python:
    Py_XDECREF(attr);
    Py_XDECREF(limit);
    if (PyErr_Occurred()) PyErr_Clear(); /* the Python path checks nbytes again and raises its error */
    return device_alloc_python == NULL ? PyErr_Format(PyExc_RuntimeError, "alloc before configure")
                                       : PyObject_CallFunctionObjArgs(device_alloc_python, self, nbytes, NULL);
}

static PyMethodDef device_methods[] = {
    {"alloc", (PyCFunction)device_alloc, METH_O, "Device.alloc(nbytes): nbytes >= 1 of device memory."},
    {NULL, NULL, 0, NULL},
};


static PyMemberDef device_members[] = {
    {"_closed", T_BOOL, offsetof(DeviceCore, closed), 0, NULL},
    {"_info", T_OBJECT_EX, offsetof(DeviceCore, info), 0, NULL},
    {"_id", T_OBJECT_EX, offsetof(DeviceCore, id), 0, NULL},
    {"_pools", T_OBJECT_EX, offsetof(DeviceCore, pools), 0, NULL},
    {"_alloc_address", T_OBJECT_EX, offsetof(DeviceCore, alloc_address), 0, NULL},
    {"_live", T_OBJECT_EX, offsetof(DeviceCore, live), 0, NULL},
    {"_orphans", T_OBJECT_EX, offsetof(DeviceCore, orphans), 0, NULL},
    {"_spare_events", T_OBJECT_EX, offsetof(DeviceCore, spare_events), 0, NULL},
    {"_staging", T_OBJECT_EX, offsetof(DeviceCore, staging), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static int device_traverse(DeviceCore *self, visitproc visit, void *arg) {
    Py_VISIT(self->info);
    Py_VISIT(self->id);
    Py_VISIT(self->pools);
    Py_VISIT(self->alloc_address);
    Py_VISIT(self->live);
    Py_VISIT(self->orphans);
    Py_VISIT(self->spare_events);
    Py_VISIT(self->staging);
    return 0;
}

static int device_clear(DeviceCore *self) {
    Py_CLEAR(self->info);
    Py_CLEAR(self->id);
    Py_CLEAR(self->pools);
    Py_CLEAR(self->alloc_address);
    Py_CLEAR(self->live);
    Py_CLEAR(self->orphans);
    Py_CLEAR(self->spare_events);
    Py_CLEAR(self->staging);
    return 0;
}

static void device_dealloc(DeviceCore *self) {
    PyObject_GC_UnTrack(self);
    device_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject DeviceCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ironaccel._fast.DeviceCore",
    .tp_basicsize = sizeof(DeviceCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "CudaDevice's compiled base: its hot fields and alloc.",
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)device_traverse,
    .tp_clear = (inquiry)device_clear,
    .tp_dealloc = (destructor)device_dealloc,
    .tp_methods = device_methods,
    .tp_members = device_members,
};

static PyMethodDef buffer_methods[] = {
    {"free", (PyCFunction)buffer_free_method, METH_NOARGS, "Give the memory back (Buffer.free); idempotent."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef buffer_members[] = {
    {"_device", T_OBJECT_EX, offsetof(BufferCore, device), 0, NULL},
    {"_nbytes", T_OBJECT_EX, offsetof(BufferCore, nbytes), 0, NULL},
    {"_freed", T_BOOL, offsetof(BufferCore, freed), 0, NULL},
    {"_ptr", T_ULONGLONG, offsetof(BufferCore, ptr), 0, "the device pointer"},
    {"_last_stream", T_OBJECT, offsetof(BufferCore, last_stream), 0, "the stream frees are ordered after"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject BufferCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ironaccel._fast.BufferCore",
    .tp_basicsize = sizeof(BufferCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "CudaBuffer's compiled base: its fields, free() and the free of a buffer dropped unfreed.",
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)buffer_traverse,
    .tp_clear = (inquiry)buffer_clear,
    .tp_dealloc = (destructor)buffer_dealloc,
    .tp_finalize = (destructor)buffer_finalize,
    .tp_methods = buffer_methods,
    .tp_members = buffer_members,
};

/* memcpy into the pinned staging ring, which nothing but a DMA reads next. The ring is cycled through, so its
 * lines are cold in the cache: plain stores first read each line (read-for-ownership) and then evict the
 * caller's data; non-temporal stores write memory directly, about twice as fast into cold memory (26 against
 * 14 GB/s for 64 KiB on one core here). Fenced (sfence) before the DMA that reads the bytes is enqueued.
 * Below STREAM_COPY_BYTES, and on CPUs without SSE2, a plain memcpy. Called with the GIL released. */
enum { STREAM_COPY_BYTES = 16 << 10 };

static void copy_to_pinned(void *dst, const void *src, size_t n) {
#if defined(__SSE2__)
    if (n >= STREAM_COPY_BYTES) {
        char *d = dst;
        const char *s = src;
        size_t head = (16 - ((uintptr_t)d & 15)) & 15; /* to 16-byte alignment, which the stores need */
        memcpy(d, s, head);
        d += head, s += head, n -= head;
        for (; n >= 64; n -= 64, d += 64, s += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16)),
                    c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
            _mm_stream_si128((__m128i *)d, a);
            _mm_stream_si128((__m128i *)(d + 16), b);
            _mm_stream_si128((__m128i *)(d + 32), c);
            _mm_stream_si128((__m128i *)(d + 48), e);
        }
        memcpy(d, s, n);
        _mm_sfence();
        return;
    }
#endif
    memcpy(dst, src, n);
}

/* ---- Copy threads: a large staged copy_htod's chunk filled by several threads, without the GIL ----------------
 *
 * One thread reads pageable memory at a fraction of what a PCIe 5 DMA engine drains from pinned memory (a 64
 * MiB memcpy took 11.8 ms on one thread of the H200's host, the DMA 1.24 ms), so staged_copy cuts a chunk into
 * pieces that the calling thread and these workers fill in parallel. The workers are plain pthreads that never
 * take the GIL: Python-level workers had to, twice per piece, and queued on it. The caller takes pieces too,
 * and it alone enqueues the DMAs, in piece order, each as soon as its piece is filled: the stream sees the
 * same calls on the same thread as from one thread, and the DMA of the first pieces overlaps the filling of
 * the rest. One job at a time (a ring's lock serializes its chunks, `busy` the rings of several devices);
 * everything below is guarded by copiers.lock. The caller returns only once no worker touches the job (COPY-4: the host array is reusable). */
enum { PIECE_MIN = 128 << 10, PIECES_MAX = 64, COPY_THREADS_MAX = 15 };

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;     /* a worker: a new job */
    pthread_cond_t progress; /* callers: a piece filled, a worker left the job, the job given back (broadcast) */
    int threads;             /* workers started */
    int wanted;              /* workers that join the job: the first `wanted` started */
    unsigned long job;       /* numbers the jobs, so a worker joins each once */
    int busy;                /* a caller has the job (two devices' rings may copy at once) */
    int active;              /* workers inside the job */
    char *dst;               /* the job: dst[0, n) = src[0, n), in pieces of piece bytes */
    const char *src;
    size_t n, piece;
    int hot, pieces, next;   /* hot: plain stores (staged_copy); next: the first piece nobody took */
    unsigned char filled[PIECES_MAX];
} copiers = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};

/* Fill piece i of the job, the lock released meanwhile (held on entry and on return). */
static void fill_piece(int i) {
    char *dst = copiers.dst + (size_t)i * copiers.piece;
    const char *src = copiers.src + (size_t)i * copiers.piece;
    size_t left = copiers.n - (size_t)i * copiers.piece, size = left < copiers.piece ? left : copiers.piece;
    int hot = copiers.hot;
    pthread_mutex_unlock(&copiers.lock);
    if (hot)
        memcpy(dst, src, size);
    else
        copy_to_pinned(dst, src, size);
    pthread_mutex_lock(&copiers.lock);
    copiers.filled[i] = 1;
}

/* After a job, a worker watches for the next one for a while before it sleeps: a large copy's chunks come
 * SPIN_NS apart or less (the ring's Python between two staged_copy calls), and a sleeping thread takes a
 * futex wake, tens of microseconds in a VM, to start on the next chunk. Lock not held. */
enum { SPIN_NS = 100000 };

static void await_job(unsigned long seen) {
    struct timespec now, until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += SPIN_NS;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    for (unsigned spins = 1;; spins++) {
        if (__atomic_load_n(&copiers.job, __ATOMIC_ACQUIRE) != seen) return;
#if defined(__SSE2__)
        _mm_pause();
#endif
        if (spins % 256 == 0) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec > until.tv_sec || (now.tv_sec == until.tv_sec && now.tv_nsec >= until.tv_nsec)) return;
        }
    }
}

static void *copier_main(void *number) {
    unsigned long seen = 0;
    pthread_mutex_lock(&copiers.lock);
    for (;;) {
        while (copiers.job == seen) pthread_cond_wait(&copiers.wake, &copiers.lock);
        seen = copiers.job;
        if ((intptr_t)number >= copiers.wanted) continue;
        copiers.active++;
        while (copiers.next < copiers.pieces) {
            fill_piece(copiers.next++);
            pthread_cond_broadcast(&copiers.progress);
        }
        copiers.active--;
        pthread_cond_broadcast(&copiers.progress);
        pthread_mutex_unlock(&copiers.lock);
        await_job(seen);
        pthread_mutex_lock(&copiers.lock);
    }
    return NULL;
}

/* In a forked child: the parent's workers did not survive the fork, nor the state of its lock. */
static void copiers_after_fork(void) {
    pthread_mutex_init(&copiers.lock, NULL);
    pthread_cond_init(&copiers.wake, NULL);
    pthread_cond_init(&copiers.progress, NULL);
    copiers.threads = copiers.busy = copiers.active = copiers.pieces = copiers.next = 0;
}

static void copiers_register_fork(void) { pthread_atfork(NULL, NULL, copiers_after_fork); }

/* Start workers up to `threads` (fewer if the system refuses more). Lock held. */
static void start_copiers(int threads) {
    for (; copiers.threads < threads; copiers.threads++) {
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int failed = pthread_create(&thread, &attr, copier_main, (void *)(intptr_t)copiers.threads);
        pthread_attr_destroy(&attr);
        if (failed) break;
    }
}

/* staged[0, n) = src[0, n) with `threads` workers, each filled piece's cuMemcpyHtoDAsync to device address dst
 * enqueued in order on `stream`. Returns the first failed DMA's CUresult (0: all enqueued); after a failure no
 * further DMA is enqueued. Called with the GIL released. */
static CUresult fill_and_send(CUdeviceptr dst, char *staged, const char *src, size_t n, int threads, int hot,
                              CUstream stream) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, copiers_register_fork);
    size_t slices = 2 * ((size_t)threads + 1); /* two pieces a thread: a slow thread holds up less */
    size_t piece = ((n + slices - 1) / slices + 4095) & ~(size_t)4095;
    if (piece < PIECE_MIN) piece = PIECE_MIN;
    if (piece < (n + PIECES_MAX - 1) / PIECES_MAX) piece = (n + PIECES_MAX - 1) / PIECES_MAX;
    int pieces = (int)((n + piece - 1) / piece);
    CUresult err = 0;
    pthread_mutex_lock(&copiers.lock);
    if (pieces > 1) start_copiers(threads);
    while (copiers.busy || copiers.active) /* another ring's copy, or a late worker of the last job */
        pthread_cond_wait(&copiers.progress, &copiers.lock);
    copiers.busy = 1;
    copiers.dst = staged, copiers.src = src, copiers.n = n, copiers.piece = piece, copiers.hot = hot;
    copiers.pieces = pieces, copiers.next = 0, copiers.wanted = threads;
    memset(copiers.filled, 0, sizeof copiers.filled);
    if (pieces > 1 && threads) {
        __atomic_store_n(&copiers.job, copiers.job + 1, __ATOMIC_RELEASE); /* seen by spinning workers too */
        pthread_cond_broadcast(&copiers.wake);
    }
    for (int sent = 0; sent < pieces && !err;) {
        if (copiers.filled[sent]) {
            size_t done = (size_t)sent * piece, size = n - done < piece ? n - done : piece;
            pthread_mutex_unlock(&copiers.lock);
            err = cuMemcpyHtoDAsync_v2(dst + (CUdeviceptr)done, (char *)staged + done, size, stream);
            pthread_mutex_lock(&copiers.lock);
            sent++;
        } else if (copiers.next < pieces) {
            fill_piece(copiers.next++);
        } else {
            pthread_cond_wait(&copiers.progress, &copiers.lock);
        }
    }
    copiers.next = pieces; /* after a failure: nobody takes more */
    while (copiers.active) pthread_cond_wait(&copiers.progress, &copiers.lock); /* no worker reads src any more */
    copiers.busy = 0;
    pthread_cond_broadcast(&copiers.progress);
    pthread_mutex_unlock(&copiers.lock);
    return err;
}

/* staged_copy(dst, staged, host, offset, n, threads, stream, hot): host bytes [offset, offset + n) into the ring
 * at staged and DMA'd to dst (fill_and_send, with `threads` copy threads besides the caller); hot: the ring
 * bytes were just used (StagingRing._reserve reused them), so plain stores into the cache rather than
 * copy_to_pinned's. Returns the first failed DMA's CUresult (0: all enqueued). */
static PyObject *fast_staged_copy(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *staged, *stream;
    Py_buffer host;
    if (nargs != 8) return PyErr_Format(PyExc_TypeError, "staged_copy takes 8 arguments, got %zd", nargs);
    CUdeviceptr dst = PyLong_AsUnsignedLongLong(args[0]);
    if (PyErr_Occurred() || address(args[1], &staged)) return NULL;
    Py_ssize_t offset = PyLong_AsSsize_t(args[3]), n = PyLong_AsSsize_t(args[4]);
    long threads = PyLong_AsLong(args[5]);
    int hot = PyObject_IsTrue(args[7]);
    if (PyErr_Occurred() || address(args[6], &stream) || hot < 0) return NULL;
    if (threads < 0 || threads > COPY_THREADS_MAX)
        return PyErr_Format(PyExc_ValueError, "staged_copy: %ld copy threads (0 to %d)", threads, COPY_THREADS_MAX);
    if (PyObject_GetBuffer(args[2], &host, PyBUF_C_CONTIGUOUS)) return NULL;
    if (offset < 0 || n < 0 || offset > host.len || n > host.len - offset) {
        PyBuffer_Release(&host);
        return PyErr_Format(PyExc_ValueError, "staged_copy: [%zd, %zd + %zd) is outside the %zd-byte host buffer",
                            offset, offset, n, host.len);
    }
    CUresult err = 0;
    if (n) {
        Py_BEGIN_ALLOW_THREADS
        err = fill_and_send(dst, staged, (const char *)host.buf + offset, (size_t)n, (int)threads, hot, stream);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&host);
    return PyLong_FromLong(err);
}

/* staged_htod(stream, dst, dst_offset, host, ring): a small pageable copy_htod (FastStream._copy_htod) in one
 * call: under the ring's lock, the bytes reserved in its current segment as StagingRing._reserve does, the
 * memcpy into them and the DMA from there. TAKE_PYTHON_PATH when the segment has no room or the ring is not
 * allocated yet (the Python path advances it), else the CUresult. */
static PyObject *staged_htod(PyObject *stream, PyObject *dst, unsigned long long offset, Py_buffer *source,
                             PyObject *ring) {
    if (current == NULL) return PyErr_Format(PyExc_RuntimeError, "staged_htod before configure");
    PyObject *dev = NULL, *lock = NULL, *attr = NULL, *users_list = NULL, *result = NULL;
    Py_buffer host = *source; /* borrowed: the caller releases it */
    int locked = 0;
    void *queue;
    unsigned long long ptr;
    StreamCore *st = fast_stream(stream);
    if (st == NULL || fast_device(st->dev) == NULL) goto out;
    dev = Py_NewRef(st->dev);
    if (make_current(dev)) goto out;
    if ((PyObject *)Py_TYPE(dst) != buffer_type) {
        PyErr_SetString(PyExc_TypeError, "staged_htod: dst is no CudaBuffer");
        goto out;
    }
    Py_XSETREF(((BufferCore *)dst)->last_stream, Py_NewRef(stream));
    ptr = ((BufferCore *)dst)->ptr + offset;
    if (address(st->address, &queue)) goto out;
    if ((lock = GET(ring, lock)) == NULL) goto out;
    if ((attr = PyObject_CallMethodNoArgs(lock, str_acquire)) == NULL) goto out;
    locked = 1;
    long long base, used, segment;
    Py_SETREF(attr, GET(ring, base));
    if (attr == NULL || (base = PyLong_AsLongLong(attr)) == -1) goto out;
    Py_SETREF(attr, GET(ring, used));
    if (attr == NULL || (used = PyLong_AsLongLong(attr)) == -1) goto out;
    Py_SETREF(attr, GET(ring, segment));
    if (attr == NULL || (segment = PyLong_AsLongLong(attr)) == -1) goto out;
    if ((users_list = GET(ring, users)) == NULL) goto out; /* per segment, the CUstream addresses to fence */
    PyObject *users = PyList_Check(users_list) && segment >= 0 && segment < PyList_GET_SIZE(users_list)
                          ? PyList_GET_ITEM(users_list, segment) : NULL; /* borrowed: users_list is held */
    if (users == NULL || !PyDict_Check(users)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "staged_htod: the ring's users are no list of dicts");
        goto out;
    }
    /* StagingRing._reusable: the segment again from its start when this stream alone copied from it and is idle */
    int reused = 0;
    if (host.len >= reuse_bytes && used > 0 && PyDict_GET_SIZE(users) == 1) {
        int mine = PyDict_Contains(users, st->address);
        if (mine < 0) goto out;
        if (mine) {
            CUresult idle;
            Py_BEGIN_ALLOW_THREADS
            idle = cuStreamQuery(queue);
            Py_END_ALLOW_THREADS
            if (idle == 0) used = 0, reused = 1;
            else if (idle != CUDA_ERROR_NOT_READY) {
                result = PyLong_FromLong(TAKE_PYTHON_PATH); /* the Python path asks again and raises its error */
                goto out;
            }
        }
    }
    if (!base || used + host.len > segment_bytes) {
        result = PyLong_FromLong(TAKE_PYTHON_PATH);
        goto out;
    }
    Py_SETREF(attr, PyLong_FromLongLong(used + host.len));
    if (attr == NULL || PyObject_SetAttr(ring, str_used, attr)) goto out;
    if (PyDict_SetItem(users, st->address, Py_None)) goto out;
    void *staged = (char *)(intptr_t)base + segment * segment_bytes + used;
    CUresult err;
    Py_BEGIN_ALLOW_THREADS
    if (reused)
        memcpy(staged, host.buf, (size_t)host.len);
    else
        copy_to_pinned(staged, host.buf, (size_t)host.len);
    err = cuMemcpyHtoDAsync_v2((CUdeviceptr)ptr, staged, (size_t)host.len, queue);
    Py_END_ALLOW_THREADS
    result = PyLong_FromLong(err);
out:
    if (locked) { /* released whatever happened, keeping the error that may be pending */
#if PY_VERSION_HEX >= 0x030C0000
        PyObject *exc = PyErr_GetRaisedException();
#else
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
#endif
        PyObject *released = PyObject_CallMethodNoArgs(lock, str_release);
        Py_XDECREF(released);
#if PY_VERSION_HEX >= 0x030C0000
        if (exc) PyErr_SetRaisedException(exc);
#else
        if (type) PyErr_Restore(type, value, traceback);
#endif
    }
    Py_XDECREF(users_list);
    Py_XDECREF(dev);
    Py_XDECREF(lock);
    Py_XDECREF(attr);
    return result;
}

static PyObject *fast_staged_htod(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) return PyErr_Format(PyExc_TypeError, "staged_htod takes 5 arguments, got %zd", nargs);
    unsigned long long offset = PyLong_AsUnsignedLongLong(args[2]);
    Py_buffer host;
    if (PyErr_Occurred() || PyObject_GetBuffer(args[3], &host, PyBUF_C_CONTIGUOUS)) return NULL;
    PyObject *result = staged_htod(args[0], args[1], offset, &host, args[4]);
    PyBuffer_Release(&host);
    return result;
}


static PyTypeObject *ndarray_type;    /* numpy.ndarray */
static PyObject *copy_htod_python;    /* api.Stream.copy_htod */
static PyObject *copy_dtoh_python;    /* api.Stream.copy_dtoh */
static PyObject *str_op_copy_dtoh;    /* "Stream.copy_dtoh", the op a pooled buffer's errors name */
static long small_copy_bytes;         /* staging.SMALL_COPY_BYTES: staged in one memcpy and one DMA */
static long pinned_check_bytes;       /* staging.PINNED_CHECK_BYTES: from this size a pinned source goes direct */
static PyObject *str_ring_copy_htod;  /* "copy_htod", StagingRing's */

static PyObject *fast_configure_copies(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyType_Check(args[0]))
        return PyErr_Format(PyExc_TypeError,
                            "configure_copies(ndarray, copy_htod, copy_dtoh, small_copy_bytes, pinned_check_bytes)");
    small_copy_bytes = PyLong_AsLong(args[3]);
    pinned_check_bytes = PyLong_AsLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    if (str_ring_copy_htod == NULL && (str_ring_copy_htod = PyUnicode_InternFromString("copy_htod")) == NULL)
        return NULL;
    if (str_op_copy_dtoh == NULL && (str_op_copy_dtoh = PyUnicode_InternFromString("Stream.copy_dtoh")) == NULL)
        return NULL;
    Py_XSETREF(ndarray_type, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(copy_htod_python, Py_NewRef(args[1]));
    Py_XSETREF(copy_dtoh_python, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

enum { CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2, CU_MEMORYTYPE_HOST = 1 };

/* A copy_htod of more than small_copy_bytes, checked (stream_copy_htod), as CudaStream._copy_htod does it: a
 * source of pinned_check_bytes or more in page-locked memory the driver knows, on an idle stream, DMA'd
 * directly and waited for (COPY-4: the caller may reuse it once this returns; a failed pointer query means
 * "not pinned"); anything else through the ring's copy_htod (staging.py), which stages it. Returns None, or
 * NULL with the typed error set. */
static PyObject *large_htod(PyObject *stream, PyObject *dst, unsigned long long offset, Py_buffer *host,
                            PyObject *src, PyObject *ring) {
    StreamCore *st = fast_stream(stream);
    void *queue;
    if (st == NULL || make_current(st->device) || address(st->address, &queue)) return NULL;
    Py_XSETREF(((BufferCore *)dst)->last_stream, Py_NewRef(stream));
    CUdeviceptr to = ((BufferCore *)dst)->ptr + offset;
    if (host->len >= pinned_check_bytes) {
        unsigned int kind = 0;
        CUresult err = 0;
        const char *failed = NULL;
        int direct = 0;
        Py_BEGIN_ALLOW_THREADS
        if (cuPointerGetAttribute(&kind, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)host->buf) == 0 &&
            kind == CU_MEMORYTYPE_HOST) {
            CUresult idle = cuStreamQuery(queue);
            if (idle == 0) {
                direct = 1;
                if ((err = cuMemcpyHtoDAsync_v2(to, host->buf, (size_t)host->len, queue)))
                    failed = "cuMemcpyHtoDAsync";
                else if ((err = cuStreamSynchronize(queue)))
                    failed = "cuStreamSynchronize";
            } else if (idle != CUDA_ERROR_NOT_READY) {
                failed = "cuStreamQuery", err = idle;
            }
        }
        Py_END_ALLOW_THREADS
        if (failed) return raise_failed(failed, err);
        if (direct) Py_RETURN_NONE;
    }
    PyObject *at = PyLong_FromUnsignedLongLong(to);
    if (at == NULL) return NULL;
    PyObject *call[] = {ring, stream, at, src};
    PyObject *done = PyObject_VectorcallMethod(str_ring_copy_htod, call, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(at);
    return done;
}

/* The arguments of copy_htod(dst, src, *, dst_offset=0) or copy_dtoh(dst, src, *, src_offset=0) in their
 * usual form (two positional, the offset keyword an int or absent): 1 and *offset (borrowed, NULL: absent),
 * else 0 (the Python method parses them). */
static int copy_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *keyword,
                     PyObject **offset) {
    *offset = NULL;
    if (nargs == 2 && kwnames != NULL && PyTuple_GET_SIZE(kwnames) == 1 &&
        PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), keyword) == 0)
        *offset = args[2];
    else if (nargs != 2 || kwnames != NULL)
        return 0;
    return *offset == NULL || PyLong_CheckExact(*offset);
}

/* The checks api.Stream.copy_htod and copy_dtoh make, for the common case: `array` a C-contiguous ndarray of
 * plain data (its buffer exported without an 'O' in its format; writable for copy_dtoh), not empty; `buf` a
 * live plain or pooled buffer of this stream's device with [at, at + the array's bytes) inside it; the device
 * open and the stream not capturing. 1 when all hold, with `host` exported and *backing (the CudaBuffer
 * holding the memory) a new reference; 0 when the Python method must check (nothing held); -1 with the error
 * set (nothing held). */
static int copy_checked(PyObject *self, PyObject *buf, PyObject *array, PyObject *offset, int writable,
                        PyObject *op, Py_buffer *host, long long *at, PyObject **backing) {
    *backing = NULL;
    *at = 0;
    if (buffer_type == NULL || ndarray_type == NULL || !Py_IS_TYPE(array, ndarray_type)) return 0;
    if (PyObject_GetBuffer(array, host, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0))) {
        PyErr_Clear(); /* not plain data (datetimes, ...), read-only: the Python method says what is wrong */
        return 0;
    }
    if (offset != NULL && ((*at = PyLong_AsLongLong(offset)) < 0 || PyErr_Occurred())) PyErr_Clear(), *at = -1;
    int verdict = 0;
    PyObject *attr = NULL;
    if (*at < 0 || (host->format != NULL && strchr(host->format, 'O') != NULL) || host->len == 0) goto done;
    if ((PyObject *)Py_TYPE(buf) == buffer_type)
        *backing = Py_NewRef(buf);
    else if (pooled_type != NULL && (PyObject *)Py_TYPE(buf) == pooled_type)
        *backing = PyObject_CallMethodOneArg(buf, str_backing, op); /* raises UseAfterFree */
    else
        goto done;
    verdict = -1;
    if (*backing == NULL) goto done;
    verdict = 0;
    if ((PyObject *)Py_TYPE(*backing) != buffer_type || ((BufferCore *)*backing)->freed) goto done;
    StreamCore *st = fast_stream(self);
    verdict = -1;
    if (st == NULL || fast_device(st->device) == NULL) goto done;
    verdict = 0;
    if (((BufferCore *)*backing)->device != st->device) goto done;
    verdict = -1;
    if ((attr = GET(buf, nbytes)) == NULL) goto done;
    long long size = PyLong_AsLongLong(attr);
    if (size == -1 && PyErr_Occurred()) goto done;
    verdict = !(*at + host->len > size || ((DeviceCore *)st->device)->closed ||
                (st->capturing != NULL && st->capturing != Py_None));
done:
    Py_XDECREF(attr);
    if (verdict != 1) {
        Py_CLEAR(*backing);
        PyBuffer_Release(host);
    }
    return verdict;
}

/* copy_htod(dst, src, *, dst_offset=0): api.Stream.copy_htod and FastStream._copy_htod for the common case
 * (copy_checked): staged_htod when small, large_htod when not. Everything else, and a ring that must advance,
 * goes to api.Stream.copy_htod, which checks again and raises the API's errors. */
static PyObject *stream_copy_htod(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *offset, *backing, *result = NULL;
    Py_buffer host;
    long long at;
    if (copy_htod_python == NULL || !copy_args(args, nargs, kwnames, "dst_offset", &offset)) goto python;
    int checked = copy_checked(self, args[0], args[1], offset, 0, str_op_copy_htod, &host, &at, &backing);
    if (checked < 0) return NULL;
    if (!checked) goto python;
    PyObject *ring = Py_NewRef(((DeviceCore *)((StreamCore *)self)->device)->staging); /* held: runs Python */
    if (host.len > small_copy_bytes) {
        result = large_htod(self, backing, (unsigned long long)at, &host, args[1], ring);
    } else {
        PyObject *code = staged_htod(self, backing, (unsigned long long)at, &host, ring);
        long err = code == NULL ? 0 : PyLong_AsLong(code);
        Py_XDECREF(code);
        if (code != NULL && err == TAKE_PYTHON_PATH) {
            Py_DECREF(ring);
            PyBuffer_Release(&host);
            Py_DECREF(backing);
            goto python;
        }
        if (code != NULL && err) raise_failed("cuMemcpyHtoDAsync", (CUresult)err);
        else if (code != NULL && !PyErr_Occurred()) result = Py_NewRef(Py_None);
    }
    Py_DECREF(ring);
    PyBuffer_Release(&host);
    Py_DECREF(backing);
    return result;
python:
    return call_python(copy_htod_python, self, args, nargs, kwnames);
}

/* copy_dtoh(dst, src, *, src_offset=0): api.Stream.copy_dtoh and FastStream._copy_dtoh for the common case
 * (copy_checked): cuMemcpyDtoHAsync into the array, and the array held until a wait covers the copy
 * (stream._held.append((next(stream._numbers), dst)), as the Python method does). Everything else goes to
 * api.Stream.copy_dtoh, which checks again and raises the API's errors. */
static PyObject *stream_copy_dtoh(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *offset, *backing, *result = NULL, *held = NULL, *numbers = NULL, *number = NULL, *entry = NULL;
    Py_buffer host;
    long long at;
    void *queue;
    if (copy_dtoh_python == NULL || !copy_args(args, nargs, kwnames, "src_offset", &offset)) goto python;
    int checked = copy_checked(self, args[1], args[0], offset, 1, str_op_copy_dtoh, &host, &at, &backing);
    if (checked < 0) return NULL;
    if (!checked) goto python;
    StreamCore *st = (StreamCore *)self;
    if (make_current(st->device) || address(st->address, &queue)) goto out;
    Py_XSETREF(((BufferCore *)backing)->last_stream, Py_NewRef(self));
    CUresult err;
    CUdeviceptr from = ((BufferCore *)backing)->ptr + (CUdeviceptr)at;
    Py_BEGIN_ALLOW_THREADS
    err = cuMemcpyDtoHAsync_v2(host.buf, from, (size_t)host.len, queue);
    Py_END_ALLOW_THREADS
    if (err) {
        raise_failed("cuMemcpyDtoHAsync", err);
        goto out;
    }
    if ((held = GET(self, held)) == NULL || (numbers = GET(self, numbers)) == NULL) goto out;
    if ((number = PyIter_Next(numbers)) == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "copy_dtoh: the stream's numbering ended");
        goto out;
    }
    if ((entry = PyTuple_Pack(2, number, args[0])) == NULL) goto out;
    PyObject *appended = PyObject_CallMethodOneArg(held, str_append, entry);
    if (appended == NULL) goto out;
    Py_DECREF(appended);
    result = Py_NewRef(Py_None);
out:
    PyBuffer_Release(&host); /* the array itself is held until a wait covers the copy */
    Py_DECREF(backing);
    Py_XDECREF(held);
    Py_XDECREF(numbers);
    Py_XDECREF(number);
    Py_XDECREF(entry);
    return result;
python:
    return call_python(copy_dtoh_python, self, args, nargs, kwnames);
}

/* ---- The MemPool's warm path (ironaccel/pool.py) ------------------------------------------------------------
 *
 * PoolCore, MemPool's base: alloc() serves a request of a front bucket from the calling thread's front cache;
 * PooledCore, PooledBuffer's base: free() puts the block back into it when the thread holds credit for it.
 * They work on pool.py's own objects (its _Front and _Slots lists, its _Block), with the GIL held and never
 * released, so each is as atomic as the pure-Python methods they stand for. Anything else (a first use on
 * this thread, a miss, a block of another tier, a double free, a foreign stream, a closed device) is handed,
 * unchanged, to those pure-Python methods (configure_pool), which raise pool.py's errors.
 *
 * The calling thread's front is found through pool._local once and then remembered with the id of the
 * thread state that found it (ids are never reused, unlike thread idents).
 */
static PyObject *alloc_python;  /* pool.py's pure-Python MemPool.alloc */
static PyObject *free_python;   /* and PooledBuffer.free */
static long front_buckets, min_shift;
static PyObject *str_front, *str_bucket, *str_credit;

typedef struct {
    PyObject_HEAD
    PyObject *device, *stream, *local;
    uint64_t owner;          /* thread state id whose front is owner_front (0: none) */
    PyObject *owner_front;
    Py_ssize_t fast_hits;    /* allocations this path served from a front cache */
} PoolCore;

typedef struct {
    PyObject_HEAD
    PyObject *device, *nbytes, *pool, *block;
    long front_bucket; /* the block's bucket + 1 where the compiled alloc made this buffer (0: read block.bucket) */
    char freed;
} PooledCore;

static PyTypeObject PoolCoreType;

static PyObject *fast_configure_pool(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyType_Check(args[0]))
        return PyErr_Format(PyExc_TypeError, "configure_pool(buffer_type, alloc, free, front_buckets, min_shift)");
    front_buckets = PyLong_AsLong(args[3]);
    min_shift = PyLong_AsLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    Py_XSETREF(pooled_type, Py_NewRef(args[0]));
    Py_XSETREF(alloc_python, Py_NewRef(args[1]));
    Py_XSETREF(free_python, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/* The calling thread's front (borrowed), or NULL without an error when it has none yet. */
static PyObject *thread_front(PoolCore *pool) {
    uint64_t me = PyThreadState_GetID(PyThreadState_Get());
    if (pool->owner == me && pool->owner_front != NULL) return pool->owner_front;
    if (pool->local == NULL) return NULL;
    PyObject *front = PyObject_GetAttr(pool->local, str_front);
    if (front == NULL) {
        PyErr_Clear(); /* AttributeError: no front on this thread yet */
        return NULL;
    }
    if (!PyList_Check(front)) {
        Py_DECREF(front);
        return NULL;
    }
    Py_XSETREF(pool->owner_front, front);
    pool->owner = me;
    return front;
}

static PyObject *pool_alloc(PoolCore *self, PyObject *nbytes) {
    if (pooled_type == NULL) return PyErr_Format(PyExc_RuntimeError, "PoolCore.alloc before configure_pool");
    if (!PyLong_CheckExact(nbytes)) goto python;
    int overflow;
    long long n = PyLong_AsLongLongAndOverflow(nbytes, &overflow);
    if (overflow || n < 1 || n > (1LL << (min_shift + front_buckets - 1))) goto python;
    long bucket = 0;
    if (n > (1LL << min_shift)) {
        unsigned long long m = (unsigned long long)(n - 1);
        bucket = (64 - __builtin_clzll(m)) - min_shift;
    }
    if (self->device == NULL) goto python;
    if (PyObject_TypeCheck(self->device, &DeviceCoreType)) { /* a CUDA device: its flag in the struct */
        if (((DeviceCore *)self->device)->closed) goto python;
    } else {
        PyObject *closed = PyObject_GetAttr(self->device, str_closed);
        if (closed == NULL) return NULL;
        Py_DECREF(closed);
        if (closed != Py_False) goto python;
    }
    PyObject *front = thread_front(self);
    if (front == NULL || PyList_GET_SIZE(front) <= bucket) goto python;
    PyObject *slots = PyList_GET_ITEM(front, bucket);
    if (!PyList_Check(slots)) goto python;
    Py_ssize_t size = PyList_GET_SIZE(slots);
    if (size == 0) goto python;
    PyObject *block = PyList_GET_ITEM(slots, size - 1); /* list.pop(): the reference moves to us */
    if (((PyListObject *)slots)->allocated > (size >> 1)) {
        Py_SET_SIZE(slots, size - 1); /* no shrink due: what list.pop itself does then */
    } else {
        Py_INCREF(block);
        if (PyList_SetSlice(slots, size - 1, size, NULL)) {
            Py_DECREF(block);
            return NULL;
        }
    }
    self->fast_hits++;
    PyTypeObject *type = (PyTypeObject *)pooled_type;
    PooledCore *buf = (PooledCore *)type->tp_alloc(type, 0);
    if (buf == NULL) {
        Py_DECREF(block); /* the block is lost to the pool, as it would be if PooledBuffer() raised */
        return NULL;
    }
    buf->device = Py_NewRef(self->device);
    buf->nbytes = Py_NewRef(nbytes);
    buf->pool = Py_NewRef((PyObject *)self);
    buf->block = block;
    buf->front_bucket = bucket + 1;
    buf->freed = 0;
    return (PyObject *)buf;
python:
    return PyObject_CallFunctionObjArgs(alloc_python, (PyObject *)self, nbytes, NULL);
}

static PyObject *pooled_free(PooledCore *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *stream = Py_None;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs + nkw > 1) return PyErr_Format(PyExc_TypeError, "free() takes at most 1 argument (stream)");
    if (nargs == 1) stream = args[0];
    if (nkw == 1) {
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "stream") != 0)
            return PyErr_Format(PyExc_TypeError, "free() got an unexpected keyword argument %R",
                                PyTuple_GET_ITEM(kwnames, 0));
        stream = args[0];
    }
    if (free_python == NULL) return PyErr_Format(PyExc_RuntimeError, "PooledCore.free before configure_pool");
    PoolCore *pool = (PoolCore *)self->pool;
    if (pool != NULL && !PyObject_TypeCheck((PyObject *)pool, &PoolCoreType)) pool = NULL; /* not ours: the Python way */
    if (self->freed || pool == NULL || self->block == NULL || (stream != Py_None && stream != pool->stream))
        goto python;
    PyObject *attr;
    long bucket = self->front_bucket - 1;
    if (bucket < 0) {
        if ((attr = PyObject_GetAttr(self->block, str_bucket)) == NULL) return NULL;
        bucket = PyLong_AsLong(attr);
        Py_DECREF(attr);
        if (bucket == -1 && PyErr_Occurred()) return NULL;
    }
    if (bucket >= front_buckets) goto python;
    PyObject *front = thread_front(pool);
    if (front == NULL || PyList_GET_SIZE(front) <= bucket) goto python;
    PyObject *slots = PyList_GET_ITEM(front, bucket);
    if (!PyList_Check(slots)) goto python;
    if ((attr = PyObject_GetAttr(slots, str_credit)) == NULL) return NULL;
    Py_ssize_t credit = PyLong_AsSsize_t(attr);
    Py_DECREF(attr);
    if (credit == -1 && PyErr_Occurred()) return NULL;
    if (PyList_GET_SIZE(slots) >= credit) goto python;
    self->freed = 1;
    if (PyList_Append(slots, self->block)) {
        self->freed = 0;
        return NULL;
    }
    Py_RETURN_NONE;
python:
    return PyObject_CallFunctionObjArgs(free_python, (PyObject *)self, stream, NULL);
}

static int pool_traverse(PoolCore *self, visitproc visit, void *arg) {
    Py_VISIT(self->device);
    Py_VISIT(self->stream);
    Py_VISIT(self->local);
    Py_VISIT(self->owner_front);
    return 0;
}

static int pool_clear(PoolCore *self) {
    Py_CLEAR(self->device);
    Py_CLEAR(self->stream);
    Py_CLEAR(self->local);
    Py_CLEAR(self->owner_front);
    self->owner = 0;
    return 0;
}

static void pool_dealloc(PoolCore *self) {
    PyObject_GC_UnTrack(self);
    pool_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int pooled_traverse(PooledCore *self, visitproc visit, void *arg) {
    Py_VISIT(self->device);
    Py_VISIT(self->nbytes);
    Py_VISIT(self->pool);
    Py_VISIT(self->block);
    return 0;
}

static int pooled_clear(PooledCore *self) {
    Py_CLEAR(self->device);
    Py_CLEAR(self->nbytes);
    Py_CLEAR(self->pool);
    Py_CLEAR(self->block);
    return 0;
}

static void pooled_dealloc(PooledCore *self) {
    PyObject_GC_UnTrack(self);
    pooled_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef pool_methods[] = {
    {"alloc", (PyCFunction)pool_alloc, METH_O, "A PooledBuffer of nbytes >= 1 bytes (MemPool.alloc)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef pool_members[] = {
    {"_device", T_OBJECT_EX, offsetof(PoolCore, device), 0, NULL},
    {"_stream", T_OBJECT_EX, offsetof(PoolCore, stream), 0, NULL},
    {"_local", T_OBJECT_EX, offsetof(PoolCore, local), 0, NULL},
    {"_fast_hits", T_PYSSIZET, offsetof(PoolCore, fast_hits), READONLY, "front-cache hits served here"},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef pooled_methods[] = {
    {"free", (PyCFunction)(void (*)(void))pooled_free, METH_FASTCALL | METH_KEYWORDS,
     "Return the block to the pool (PooledBuffer.free)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef pooled_members[] = {
    {"_device", T_OBJECT_EX, offsetof(PooledCore, device), 0, NULL},
    {"_nbytes", T_OBJECT_EX, offsetof(PooledCore, nbytes), 0, NULL},
    {"_pool", T_OBJECT_EX, offsetof(PooledCore, pool), 0, NULL},
    {"_freed", T_BOOL, offsetof(PooledCore, freed), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* _block: setting it forgets the bucket the compiled alloc remembered for the block it put there. */
static PyObject *pooled_get_block(PooledCore *self, void *closure) {
    if (self->block == NULL) return PyErr_Format(PyExc_AttributeError, "_block");
    return Py_NewRef(self->block);
}

static int pooled_set_block(PooledCore *self, PyObject *value, void *closure) {
    Py_XSETREF(self->block, Py_XNewRef(value));
    self->front_bucket = 0;
    return 0;
}

static PyGetSetDef pooled_getset[] = {
    {"_block", (getter)pooled_get_block, (setter)pooled_set_block, "the pool's block behind this buffer", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PoolCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ironaccel._fast.PoolCore",
    .tp_basicsize = sizeof(PoolCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "MemPool's compiled base: the warm alloc.",
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)pool_traverse,
    .tp_clear = (inquiry)pool_clear,
    .tp_dealloc = (destructor)pool_dealloc,
    .tp_methods = pool_methods,
    .tp_members = pool_members,
};

static PyTypeObject PooledCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ironaccel._fast.PooledCore",
    .tp_basicsize = sizeof(PooledCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "PooledBuffer's compiled base: its fields and the warm free.",
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)pooled_traverse,
    .tp_clear = (inquiry)pooled_clear,
    .tp_dealloc = (destructor)pooled_dealloc,
    .tp_methods = pooled_methods,
    .tp_members = pooled_members,
    .tp_getset = pooled_getset,
};

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
     "Give StreamCore.copy_htod numpy's ndarray, the Python copy_htod, the small-copy and pinned-check sizes."},
    {"configure_buffers", (PyCFunction)(void (*)(void))fast_configure_buffers, METH_FASTCALL,
     "Give BufferCore the Python release it hands uncommon frees to, and DriverError."},
    {"staged_copy", (PyCFunction)(void (*)(void))fast_staged_copy, METH_FASTCALL,
     "A large copy_htod's chunk: filled into the ring by several threads, each piece DMA'd once filled."},
    {"configure_pool", (PyCFunction)(void (*)(void))fast_configure_pool, METH_FASTCALL,
     "Give the pool's types the pure-Python methods they hand uncommon cases to."},
    {"record", (PyCFunction)(void (*)(void))fast_record, METH_FASTCALL,
     "FastStream._record: a spare CUevent recorded on the stream, as a FastEvent."},
    {"copy_dtoh", (PyCFunction)(void (*)(void))fast_copy_dtoh, METH_FASTCALL, "cuMemcpyDtoHAsync into a buffer."},
    {"staged_htod", (PyCFunction)(void (*)(void))fast_staged_htod, METH_FASTCALL,
     "A small pageable copy_htod: room in the pinned ring, memcpy, cuMemcpyHtoDAsync."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fast", "The CUDA backend's hot paths in C.", -1, methods};

PyMODINIT_FUNC PyInit__fast(void) {
    struct { PyObject **name; const char *text; } names[] = {
        {&str_ptr, "_ptr"}, {&str_last_stream, "_last_stream"}, {&str_kernel, "kernel"},
        {&str_arg_rules, "_arg_rules"}, {&str_packing, "packing"}, {&str_codes, "codes"}, {&str_dev, "_dev"},
        {&str_closed, "_closed"}, {&str_capturing, "_capturing"}, {&str_freed, "_freed"},
        {&str_backing, "_backing"}, {&str_device, "_device"}, {&str_id, "_id"},
        {&str_make_current, "_make_current"}, {&str_function_address, "_function_address"},
        {&str_work_address, "_work_address"}, {&str_grid, "grid"}, {&str_block, "block"},
        {&str_current_device, "device"}, {&str_front, "front"}, {&str_bucket, "bucket"}, {&str_credit, "credit"},
        {&str_needs_current, "_needs_current"}, {&str_spare_events, "_spare_events"}, {&str_stream, "_stream"},
        {&str_timing, "_timing"}, {&str_handle, "_handle"}, {&str_address, "_address"}, {&str_mark, "_mark"},
        {&str_held, "_held"}, {&str_numbers, "_numbers"}, {&str_lock, "_lock"}, {&str_acquire, "acquire"},
        {&str_release, "release"}, {&str_base, "_base"}, {&str_used, "_used"}, {&str_segment, "_segment"},
        {&str_users, "_users"}, {&str_release_held, "_release_held"}, {&str_record_python_path, "_record"},
        {&str_info, "_info"}, {&str_limits, "limits"}, {&str_max_alloc, "max_alloc"},
        {&str_op_copy_htod, "Stream.copy_htod"}, {&str_nbytes, "_nbytes"},
        {&str_staging, "_staging"}, {&str_plans, "_plans"}, {&str_module, "module"}, {&str_launch_plan, "_launch_plan"},
        {&str_pools, "_pools"}, {&str_alive, "_alive"}, {&str_alloc_address, "_alloc_address"}, {&str_live, "_live"},
        {&str_orphans, "_orphans"}, {&str_append, "append"},
        {&str_op, "Stream.launch"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i].name = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    if (PyType_Ready(&PoolCoreType) || PyType_Ready(&PooledCoreType) || PyType_Ready(&EventCoreType) || PyType_Ready(&BufferCoreType) || PyType_Ready(&DeviceCoreType) ||
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
        PyModule_AddObjectRef(m, "DeviceCore", (PyObject *)&DeviceCoreType)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
