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
 *   launch(fn, grid, block, stream, handle, codes, args)
 *        pack args by codes (one byte per argument: B buffer, f f32, d f64, i 32-bit int, q i64, Q u64)
 *        into 8-byte slots and cuLaunchKernel; a buffer argument's _ptr is read and its _last_stream set
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

static PyObject *str_ptr, *str_last_stream;

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

/* One argument into its 8-byte slot. */
static int pack(char code, PyObject *arg, PyObject *stream, uint64_t *slot) {
    *slot = 0;
    switch (code) {
    case 'B': {
        PyObject *ptr = PyObject_GetAttr(arg, str_ptr);
        if (ptr == NULL) return -1;
        *slot = PyLong_AsUnsignedLongLong(ptr);
        Py_DECREF(ptr);
        if (PyErr_Occurred()) return -1;
        return PyObject_SetAttr(arg, str_last_stream, stream);
    }
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
    case 'Q':
        *slot = PyLong_AsUnsignedLongLong(arg);
        break;
    default:
        PyErr_Format(PyExc_ValueError, "unknown argument code %c", code);
        return -1;
    }
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *fast_launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) return PyErr_Format(PyExc_TypeError, "launch takes 7 arguments, got %zd", nargs);
    void *fn, *stream;
    unsigned grid[3], block[3];
    if (address(args[0], &fn) || dims(args[1], grid) || dims(args[2], block) || address(args[4], &stream))
        return NULL;
    PyObject *codes = args[5], *argv = args[6];
    if (!PyBytes_Check(codes) || !PyList_Check(argv) || PyList_GET_SIZE(argv) != PyBytes_GET_SIZE(codes) ||
        PyBytes_GET_SIZE(codes) > MAX_PARAMS)
        return PyErr_Format(PyExc_TypeError, "launch: codes (bytes) and args (list) of one length <= %d", MAX_PARAMS);
    Py_ssize_t n = PyBytes_GET_SIZE(codes);
    const char *code = PyBytes_AS_STRING(codes);
    uint64_t slots[MAX_PARAMS];
    void *params[MAX_PARAMS];
    for (Py_ssize_t i = 0; i < n; i++) {
        if (pack(code[i], PyList_GET_ITEM(argv, i), args[3], &slots[i])) return NULL;
        params[i] = &slots[i];
    }
    CUresult err;
    Py_BEGIN_ALLOW_THREADS
    err = cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, stream, params, NULL);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(err);
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
    {"launch", (PyCFunction)(void (*)(void))fast_launch, METH_FASTCALL, "Pack the arguments and cuLaunchKernel."},
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
    str_ptr = PyUnicode_InternFromString("_ptr");
    str_last_stream = PyUnicode_InternFromString("_last_stream");
    if (str_ptr == NULL || str_last_stream == NULL) return NULL;
    return PyModule_Create(&module);
}
