/* ironaccel._fast: the CUDA backend's hot paths as C functions of the CPython C API.
 *
 * Why C and the C API rather than Cython over cuda.bindings.cydriver: nothing to add at build time beyond
 * the system compiler and Python's headers (the fake libcuda is built the same way), and the calls here
 * are few and flat (integers in, a CUresult out), which the C API does in a few lines.
 *
 * The driver entry points are taken with dlsym from the libcuda.so.1 this process already loaded
 * (RTLD_NOLOAD: never a second library), so they are the ones cuda.bindings calls, the fake's too, with
 * the same contexts and handles. Every function returns the CUresult as an int; the Python side raises
 * the typed error (driver.fail) when it is not 0. Each driver call releases the GIL, as cuda.bindings does.
 *
 *   init()                                       load the entry points (OSError when libcuda is not loaded)
 *   configure(buffer_type, current)             what launch checks against (CudaBuffer, driver.current)
 *   launch(plan, stream, args)                   api.Stream._launch_plan's common case in one call: the api's
 *        cached ArgRule for the argument types, the buffers' liveness and device, then packing by the rule's
 *        Signature codes (one byte per argument: B buffer, f f32, d f64, i 32-bit int, q i64, Q u64) into
 *        8-byte slots and cuLaunchKernel; -1 sends anything uncommon to the Python path
 *   stream_synchronize(handle)  event_synchronize(event)  event_query(event)  event_record(event, handle)
 *   copy_dtoh(host, src, handle)                 host: a writable C-contiguous buffer, all of it
 *   staged_htod(dst, ring_address, host, handle) memcpy host into the pinned ring, then the DMA from there
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

typedef int CUresult;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUfunction;
typedef unsigned long long CUdeviceptr;

enum { MAX_PARAMS = 512 }; /* 4 KiB of parameters, the most cuLaunchKernel takes */

static CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void **, void **);
static CUresult (*cuStreamSynchronize)(CUstream);
static CUresult (*cuEventSynchronize)(CUevent);
static CUresult (*cuEventQuery)(CUevent);
static CUresult (*cuEventRecord)(CUevent, CUstream);
static CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*cuMemcpyDtoHAsync_v2)(void *, CUdeviceptr, size_t, CUstream);

/* interned attribute names (GET(obj, name) reads str_name) and the op the launch's errors name */
static PyObject *str_ptr, *str_last_stream, *str_kernel, *str_arg_rules, *str_packing, *str_codes, *str_dev,
    *str_closed, *str_capturing, *str_freed, *str_backing, *str_device, *str_id, *str_make_current,
    *str_function_address, *str_work_address, *str_grid, *str_block, *str_current_device, *str_op;

static PyObject *fast_init(PyObject *self, PyObject *unused) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL) return PyErr_Format(PyExc_OSError, "libcuda.so.1 is not loaded in this process: %s", dlerror());
#define RESOLVE(name)                                                                                         \
    *(void **)&name = dlsym(lib, #name);                                                                      \
    if (name == NULL) return PyErr_Format(PyExc_OSError, "libcuda.so.1 has no %s", #name);
    RESOLVE(cuLaunchKernel)
    RESOLVE(cuStreamSynchronize)
    RESOLVE(cuEventSynchronize)
    RESOLVE(cuEventQuery)
    RESOLVE(cuEventRecord)
    RESOLVE(cuMemcpyHtoDAsync_v2)
    RESOLVE(cuMemcpyDtoHAsync_v2)
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

/* One scalar argument into its 8-byte slot (the buffers are done by launch). */
static int pack_scalar(char code, PyObject *arg, uint64_t *slot) {
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

static PyObject *buffer_type; /* CudaBuffer: its instances are their own backing */
static PyObject *current;     /* driver.current: which Device's context the thread has current */

static PyObject *fast_configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyType_Check(args[0]))
        return PyErr_Format(PyExc_TypeError, "configure(buffer_type, current)");
    Py_XSETREF(buffer_type, Py_NewRef(args[0]));
    Py_XSETREF(current, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

/* launch(plan, stream, args): the whole of Stream._launch_plan (api.py) for the common case, then the driver
 * call; returns the CUresult, or TAKE_PYTHON_PATH when anything is uncommon (no cached rule for these
 * argument types yet, a freed buffer or one of another device, a closed device, a capture): the Python path
 * then does the same launch or raises its error. Nothing is changed before that decision. */
enum { TAKE_PYTHON_PATH = -1 };

static PyObject *fast_launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "launch takes 3 arguments, got %zd", nargs);
    if (buffer_type == NULL) return PyErr_Format(PyExc_RuntimeError, "launch before configure");
    PyObject *plan = args[0], *stream = args[1], *argv = args[2];
    if (!PyTuple_CheckExact(argv) && !PyList_CheckExact(argv)) return PyLong_FromLong(TAKE_PYTHON_PATH);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(argv);
    if (n > MAX_PARAMS) return PyLong_FromLong(TAKE_PYTHON_PATH);
    PyObject **items = PySequence_Fast_ITEMS(argv);
    long result = TAKE_PYTHON_PATH;
    PyObject *kernel = NULL, *rules = NULL, *types = NULL, *packing = NULL, *codes = NULL, *dev = NULL;
    PyObject *attr = NULL, *backings[MAX_PARAMS];
    Py_ssize_t held = 0;
    uint64_t slots[MAX_PARAMS];
    void *params[MAX_PARAMS];
    unsigned dim[6];

    if ((kernel = GET(plan, kernel)) == NULL || (rules = GET(kernel, arg_rules)) == NULL) goto error;
    if ((types = PyTuple_New(n)) == NULL) goto error;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(types, i, Py_NewRef((PyObject *)Py_TYPE(items[i])));
    PyObject *rule = PyDict_Check(rules) ? PyDict_GetItemWithError(rules, types) : NULL; /* borrowed */
    if (rule == NULL) {
        if (PyErr_Occurred()) goto error;
        goto done;
    }
    if ((packing = GET(rule, packing)) == NULL || (codes = GET(packing, codes)) == NULL) goto error;
    if (!PyBytes_Check(codes) || PyBytes_GET_SIZE(codes) != n) goto done;
    if ((dev = GET(stream, dev)) == NULL || (attr = GET(dev, closed)) == NULL) goto error;
    if (attr != Py_False) goto done;
    Py_SETREF(attr, GET(stream, capturing));
    if (attr == NULL) goto error;
    if (attr != Py_None) goto done;
    Py_CLEAR(attr);
    const char *code = PyBytes_AS_STRING(codes);
    for (Py_ssize_t i = 0; i < n; i++) {
        params[i] = &slots[i];
        if (code[i] != 'B') {
            if (pack_scalar(code[i], items[i], &slots[i])) goto error;
            continue;
        }
        PyObject *backing;
        if ((PyObject *)Py_TYPE(items[i]) == buffer_type) {
            if ((attr = GET(items[i], freed)) == NULL) goto error;
            if (attr != Py_False) goto done;
            Py_CLEAR(attr);
            backing = Py_NewRef(items[i]);
        } else if ((backing = PyObject_CallMethodOneArg(items[i], str_backing, str_op)) == NULL) {
            goto error; /* the error the Python path raises: the same method raised it */
        }
        backings[held++] = backing;
        if ((attr = GET(backing, device)) == NULL) goto error;
        if (attr != dev) goto done;
        Py_SETREF(attr, GET(backing, ptr));
        if (attr == NULL) goto error;
        slots[i] = PyLong_AsUnsignedLongLong(attr);
        if (PyErr_Occurred()) goto error;
        Py_CLEAR(attr);
    }
    /* The launch is going ahead: the side effects of the Python path, in its order. */
    for (Py_ssize_t i = 0; i < held; i++)
        if (PyObject_SetAttr(backings[i], str_last_stream, stream)) goto error;
    PyObject *mine = NULL;
    if ((attr = GET(current, current_device)) == NULL || (mine = GET(dev, id)) == NULL) {
        Py_XDECREF(mine);
        goto error;
    }
    int same = PyObject_RichCompareBool(attr, mine, Py_EQ);
    Py_DECREF(mine);
    Py_CLEAR(attr);
    if (same < 0) goto error;
    if (!same) {
        if ((attr = PyObject_CallMethodNoArgs(dev, str_make_current)) == NULL) goto error;
        Py_CLEAR(attr);
    }
    void *fn, *work;
    if ((attr = GET(kernel, function_address)) == NULL || address(attr, &fn)) goto error;
    Py_SETREF(attr, GET(stream, work_address));
    if (attr == NULL || address(attr, &work)) goto error;
    Py_SETREF(attr, GET(plan, grid));
    if (attr == NULL || dims(attr, dim)) goto error;
    Py_SETREF(attr, GET(plan, block));
    if (attr == NULL || dims(attr, dim + 3)) goto error;
    CUresult err;
    Py_BEGIN_ALLOW_THREADS
    err = cuLaunchKernel(fn, dim[0], dim[1], dim[2], dim[3], dim[4], dim[5], 0, work, params, NULL);
    Py_END_ALLOW_THREADS
    result = err;
done:
    Py_XDECREF(attr);
    while (held) Py_DECREF(backings[--held]);
    Py_XDECREF(kernel);
    Py_XDECREF(rules);
    Py_XDECREF(types);
    Py_XDECREF(packing);
    Py_XDECREF(codes);
    Py_XDECREF(dev);
    return PyLong_FromLong(result);
error:
    Py_XDECREF(attr);
    while (held) Py_DECREF(backings[--held]);
    Py_XDECREF(kernel);
    Py_XDECREF(rules);
    Py_XDECREF(types);
    Py_XDECREF(packing);
    Py_XDECREF(codes);
    Py_XDECREF(dev);
    return NULL;
}

#define ONE_HANDLE(name, call)                                                                                \
    static PyObject *fast_##name(PyObject *self, PyObject *arg) {                                             \
        void *handle;                                                                                         \
        if (address(arg, &handle)) return NULL;                                                               \
        CUresult err;                                                                                         \
        Py_BEGIN_ALLOW_THREADS                                                                                \
        err = call(handle);                                                                                   \
        Py_END_ALLOW_THREADS                                                                                  \
        return PyLong_FromLong(err);                                                                          \
    }
ONE_HANDLE(stream_synchronize, cuStreamSynchronize)
ONE_HANDLE(event_synchronize, cuEventSynchronize)
ONE_HANDLE(event_query, cuEventQuery)

static PyObject *fast_event_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *event, *stream;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "event_record takes 2 arguments, got %zd", nargs);
    if (address(args[0], &event) || address(args[1], &stream)) return NULL;
    CUresult err;
    Py_BEGIN_ALLOW_THREADS
    err = cuEventRecord(event, stream);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(err);
}

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

static PyObject *fast_staged_htod(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *ring, *stream;
    Py_buffer host;
    if (nargs != 4) return PyErr_Format(PyExc_TypeError, "staged_htod takes 4 arguments, got %zd", nargs);
    CUdeviceptr dst = PyLong_AsUnsignedLongLong(args[0]);
    if (PyErr_Occurred() || address(args[1], &ring) || address(args[3], &stream)) return NULL;
    if (PyObject_GetBuffer(args[2], &host, PyBUF_C_CONTIGUOUS)) return NULL;
    CUresult err;
    Py_BEGIN_ALLOW_THREADS
    memcpy(ring, host.buf, (size_t)host.len);
    err = cuMemcpyHtoDAsync_v2(dst, ring, (size_t)host.len, stream);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&host);
    return PyLong_FromLong(err);
}

static PyMethodDef methods[] = {
    {"init", fast_init, METH_NOARGS, "Take the driver entry points from the loaded libcuda.so.1."},
    {"configure", (PyCFunction)(void (*)(void))fast_configure, METH_FASTCALL,
     "Give launch the buffer type and the thread's current-context record."},
    {"launch", (PyCFunction)(void (*)(void))fast_launch, METH_FASTCALL,
     "Stream._launch_plan's common case and cuLaunchKernel; TAKE_PYTHON_PATH (-1) otherwise."},
    {"stream_synchronize", fast_stream_synchronize, METH_O, "cuStreamSynchronize."},
    {"event_synchronize", fast_event_synchronize, METH_O, "cuEventSynchronize."},
    {"event_query", fast_event_query, METH_O, "cuEventQuery."},
    {"event_record", (PyCFunction)(void (*)(void))fast_event_record, METH_FASTCALL, "cuEventRecord."},
    {"copy_dtoh", (PyCFunction)(void (*)(void))fast_copy_dtoh, METH_FASTCALL, "cuMemcpyDtoHAsync into a buffer."},
    {"staged_htod", (PyCFunction)(void (*)(void))fast_staged_htod, METH_FASTCALL,
     "memcpy into the pinned ring, then cuMemcpyHtoDAsync from it."},
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
        {&str_current_device, "device"},
        {&str_op, "Stream.launch"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i].name = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    return PyModule_Create(&module);
}
