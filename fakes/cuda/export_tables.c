/* cuGetExportTable: the driver's private function tables, looked up by UUID (export_tables.h lists them),
 * which the CUDA runtime (libcudart, linked into CuPy, PyTorch and every nvcc-built program) needs before it
 * makes its first call. What each slot does comes from ZLUDA's public notes on them ("the dark API",
 * vosen/ZLUDA dark_api/src/lib.rs and zluda/src/impl/driver.rs; facts only, the code is the fake's own), checked
 * by what CUDA 13 runtimes (CuPy's, nvcc 13.0's) did with them here, and to be checked against traces of a real
 * driver (traces/, from tools/trace_h200.sh).
 *
 * A slot nobody is known to call says so on stderr and returns NOT_SUPPORTED (never a NULL a caller would
 * jump to), logging its table, slot and arguments. An unknown UUID is refused with INVALID_VALUE, as ZLUDA
 * observed of the real driver. With IRONACCEL_FAKE_LOG=<file>, every lookup and every call through a table is
 * appended to that file, one line each, in the tracer's format (tools/export_trace.c), so a trace taken on the
 * H200 and one taken here compare line by line. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "export_tables.h"
#include "fake.h"

enum ExportTableId {
#define T(name, nslots, sized, ...) TABLE_##name,
    EXPORT_TABLES(T)
#undef T
    TABLE_COUNT
};

static const struct {
    const char *name;
    unsigned char uuid[16];
    int nslots, sized;
} TABLE_INFO[TABLE_COUNT] = {
#define T(name, nslots, sized, ...) [TABLE_##name] = {#name, {__VA_ARGS__}, nslots, sized},
    EXPORT_TABLES(T)
#undef T
};

/* ---- the log (IRONACCEL_FAKE_LOG) ---- */
static FILE *g_log;
static pthread_once_t g_log_once = PTHREAD_ONCE_INIT;

static void log_open(void) {
    const char *path = getenv("IRONACCEL_FAKE_LOG");
    if (path && *path && !(g_log = fopen(path, "a"))) fake_log("IRONACCEL_FAKE_LOG: cannot open %s", path);
    if (g_log) setvbuf(g_log, NULL, _IOLBF, 0);
}

static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char *fmt, ...) {
    pthread_once(&g_log_once, log_open);
    if (!g_log) return;
    va_list ap;
    va_start(ap, fmt);
    flockfile(g_log);
    vfprintf(g_log, fmt, ap);
    fputc('\n', g_log);
    funlockfile(g_log);
    va_end(ap);
}

static void uuid_text(const unsigned char *u, char out[39]) {
    snprintf(out, 39, "{%02X%02X%02X%02X-%02X%02X-%02X%02X-%02X%02X-%02X%02X%02X%02X%02X%02X}", u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

/* A call through a table: "call TABLE[slot](args) -> result", the tracer's line ("-> void" for a slot that
 * returns nothing). */
#define TRACED(table, slot, result, fmt, ...) \
    trace("call %s[%d](" fmt ") -> %d", #table, slot, __VA_ARGS__, (int)(result))
#define TRACED_VOID(table, slot, fmt, ...) trace("call %s[%d](" fmt ") -> void", #table, slot, __VA_ARGS__)

/* ---- CUDART_INTERFACE: modules from the runtime's fatbins, the primary context ---- */

/* A module from the fatbin wrapper host code registers (__fatBinC_Wrapper_t) or from a fatbin itself. */
static CUresult module_from_image(void **module, const void *image) {
    if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
    return cuModuleLoadFatBinary(module, image);
}

static CUresult cudart_module_from_wrapper(void **module, const void *wrapper) {
    CUresult rc = module_from_image(module, wrapper);
    TRACED(CUDART_INTERFACE, 1, rc, "%p, %p", (void *)module, wrapper);
    return rc;
}

/* The primary context of a device, without retaining it (the runtime retains it itself). */
static CUresult cudart_primary_context(void **ctx, CUdevice dev) {
    CUresult rc = !fake_initialized() ? CUDA_ERROR_NOT_INITIALIZED
                  : !ctx              ? CUDA_ERROR_INVALID_VALUE
                  : dev != 0          ? CUDA_ERROR_INVALID_DEVICE
                                      : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS) *ctx = context_primary();
    TRACED(CUDART_INTERFACE, 2, rc, "%p, %d", (void *)ctx, dev);
    return rc;
}

/* The same with options the runtime passes through (logged; none changes what the fake loads). */
static CUresult cudart_module_from_wrapper_ext(void **module, const void *wrapper, void *a3, void *a4, unsigned a5) {
    CUresult rc = module_from_image(module, wrapper);
    TRACED(CUDART_INTERFACE, 6, rc, "%p, %p, %p, %p, %u", (void *)module, wrapper, a3, a4, a5);
    return rc;
}

static void cudart_slot7(uintptr_t a1) { TRACED_VOID(CUDART_INTERFACE, 7, "%#" PRIxPTR, a1); }

static CUresult cudart_module_from_fatbin_ext(const void *fatbin, void **module, void *a3, void *a4, unsigned a5) {
    CUresult rc = module_from_image(module, fatbin);
    TRACED(CUDART_INTERFACE, 8, rc, "%p, %p, %p, %p, %u", fatbin, (void *)module, a3, a4, a5);
    return rc;
}

/* Loads the driver's compilers (PTX compiler, NVVM) on a real driver; the fake's interpreter needs none. */
static CUresult cudart_load_compilers(void) {
    trace("call CUDART_INTERFACE[12]() -> 0");
    return CUDA_SUCCESS;
}

/* ---- TOOLS_RUNTIME_CALLBACK_HOOKS: zeroed buffers the runtime writes its hooks into ---- */
static uint32_t g_hook_buffer2[1024], g_hook_buffer6[14];

static void hooks_buffer2(void **ptr, size_t *size) {
    if (ptr) *ptr = g_hook_buffer2;
    if (size) *size = sizeof g_hook_buffer2 / sizeof g_hook_buffer2[0];
    TRACED_VOID(TOOLS_RUNTIME_CALLBACK_HOOKS, 2, "%p, %p", (void *)ptr, (void *)size);
}

static void hooks_buffer6(void **ptr, size_t *size) {
    if (ptr) *ptr = g_hook_buffer6;
    if (size) *size = sizeof g_hook_buffer6 / sizeof g_hook_buffer6[0];
    TRACED_VOID(TOOLS_RUNTIME_CALLBACK_HOOKS, 6, "%p, %p", (void *)ptr, (void *)size);
}

/* ---- TOOLS_TLS: where NVIDIA's libraries report their API calls to the tools ---- */

/* Slot 2: cuBLASLt calls it at its API calls and in its heuristics (a record on its stack, whose words hold a
 * call id and the call's arguments, to which it adds the context's ID from TOOLS_CONTEXT's slot 4 after the
 * call): the report a tool (CUPTI) subscribed to those calls would receive. No tool attaches to the fake, so
 * there is no one to deliver it to: success, nothing else. Inferred from those calls (ZLUDA lists no slot of
 * this table; the H200's traces hold no cuBLAS call yet); a failure here makes cuBLASLt fail every matmul
 * ("Failed to query heuristics"). */
static CUresult tools_report(uintptr_t record, uintptr_t call_id, uintptr_t a2, uintptr_t a3) {
    TRACED(TOOLS_TLS, 2, CUDA_SUCCESS, "%#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR, record, call_id,
           a2, a3);
    return CUDA_SUCCESS;
}

/* ---- CONTEXT_LOCAL_STORAGE: per-context values of the runtime (context_storage.c) ---- */

/* The context a call names: the current one for NULL. */
static CUresult storage_context(void *h, Context **out) {
    if (!fake_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!h) h = current_context();
    if (!h) return CUDA_ERROR_INVALID_CONTEXT;
    if (!context_handle_ok(h)) return CUDA_ERROR_INVALID_CONTEXT;
    *out = h;
    return CUDA_SUCCESS;
}

static CUresult storage_put(void *h, void *key, void *value, ContextStorageDtor dtor) {
    Context *c = NULL;
    CUresult rc = storage_context(h, &c);
    if (rc == CUDA_SUCCESS) rc = context_storage_put(c, key, value, dtor);
    TRACED(CONTEXT_LOCAL_STORAGE, 0, rc, "%p, %p, %p, %p", h, key, value, (void *)(uintptr_t)dtor);
    return rc;
}

static CUresult storage_delete(void *h, void *key) {
    Context *c = NULL;
    CUresult rc = storage_context(h, &c);
    if (rc == CUDA_SUCCESS) rc = context_storage_delete(c, key);
    TRACED(CONTEXT_LOCAL_STORAGE, 1, rc, "%p, %p", h, key);
    return rc;
}

static CUresult storage_get(void **value, void *h, void *key) {
    Context *c = NULL;
    CUresult rc = value ? storage_context(h, &c) : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) rc = context_storage_get(c, key, value);
    TRACED(CONTEXT_LOCAL_STORAGE, 2, rc, "%p, %p, %p", (void *)value, h, key);
    return rc;
}

/* ---- CTX_CREATE_BYPASS: cuCtxCreate without the tools' callbacks ---- */
static CUresult bypass_ctx_create(void **ctx, unsigned flags, CUdevice dev) {
    CUresult rc = cuCtxCreate_v2(ctx, flags, dev);
    TRACED(CTX_CREATE_BYPASS, 1, rc, "%p, %u, %d", (void *)ctx, flags, dev);
    return rc;
}

/* ---- DEVICE_EXTENDED_RT ---- */
static CUresult device_slot13(unsigned char *result, CUdevice dev) {
    CUresult rc = !result ? CUDA_ERROR_INVALID_VALUE : dev != 0 ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS) *result = 0; /* what a real GTX 1060 answers (ZLUDA) */
    TRACED(DEVICE_EXTENDED_RT, 13, rc, "%p, %d", (void *)result, dev);
    return rc;
}

/* ---- INTEGRITY_CHECK: the runtime checks the driver by a keyed hash only it and the driver can make ---- */

/* MD2 (RFC 1319), what the check is built on: HMAC-MD2 with a fixed key. */
static const uint8_t MD2_S[256] = {
    41, 46, 67, 201, 162, 216, 124, 1, 61, 54, 84, 161, 236, 240, 6, 19, 98, 167, 5, 243, 192, 199, 115, 140,
    152, 147, 43, 217, 188, 76, 130, 202, 30, 155, 87, 60, 253, 212, 224, 22, 103, 66, 111, 24, 138, 23, 229, 18,
    190, 78, 196, 214, 218, 158, 222, 73, 160, 251, 245, 142, 187, 47, 238, 122, 169, 104, 121, 145, 21, 178, 7, 63,
    148, 194, 16, 137, 11, 34, 95, 33, 128, 127, 93, 154, 90, 144, 50, 39, 53, 62, 204, 231, 191, 247, 151, 3, 255,
    25, 48, 179, 72, 165, 181, 209, 215, 94, 146, 42, 172, 86, 170, 198, 79, 184, 56, 210, 150, 164, 125, 182, 118,
    252, 107, 226, 156, 116, 4, 241, 69, 157, 112, 89, 100, 113, 135, 32, 134, 91, 207, 101, 230, 45, 168, 2, 27,
    96, 37, 173, 174, 176, 185, 246, 28, 70, 97, 105, 52, 64, 126, 15, 85, 71, 163, 35, 221, 81, 175, 58, 195, 92,
    249, 206, 186, 197, 234, 38, 44, 83, 13, 110, 133, 40, 132, 9, 211, 223, 205, 244, 65, 129, 77, 82, 106, 220,
    55, 200, 108, 193, 171, 250, 36, 225, 123, 8, 12, 189, 177, 74, 120, 136, 149, 139, 227, 99, 232, 109, 233,
    203, 213, 254, 59, 0, 29, 57, 242, 239, 183, 14, 102, 88, 208, 228, 166, 119, 114, 248, 235, 117, 75, 10, 49,
    68, 80, 180, 143, 237, 31, 26, 219, 153, 141, 51, 159, 17, 131, 20};

typedef struct Md2 {
    uint8_t x[48], checksum[16], block[16];
    unsigned n;
} Md2;

static void md2_update(Md2 *m, const void *data, size_t len) {
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++) {
        m->block[m->n++] = p[i];
        if (m->n < 16) continue;
        m->n = 0;
        uint8_t last = m->checksum[15];
        for (int j = 0; j < 16; j++) {
            m->x[16 + j] = m->block[j];
            m->x[32 + j] = m->block[j] ^ m->x[j];
            last = m->checksum[j] ^= MD2_S[m->block[j] ^ last];
        }
        uint8_t t = 0;
        for (int round = 0; round < 18; round++) {
            for (int k = 0; k < 48; k++) t = m->x[k] ^= MD2_S[t];
            t = (uint8_t)(t + round);
        }
    }
}

static void md2_final(Md2 *m, uint8_t digest[16]) {
    uint8_t pad[16], pad_len = (uint8_t)(16 - m->n);
    memset(pad, pad_len, pad_len);
    md2_update(m, pad, pad_len);
    uint8_t checksum[16];
    memcpy(checksum, m->checksum, 16);
    md2_update(m, checksum, 16);
    memcpy(digest, m->x, 16);
}

/* The key of the check's HMAC, and the answers for check versions ending in 0 or 1, which hash nothing. */
static const uint8_t INTEGRITY_KEY[16] = {0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52,
                                          0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F};
static const uint64_t INTEGRITY_FIXED[2][2] = {{0x3341181C03CB675Cull, 0x8ED383AA1F4CD1E8ull},
                                               {0x1841181C03CB675Cull, 0x8ED383AA1F4CD1E8ull}};

/* The tables themselves (filled below), whose addresses the check hashes. */
static const void *g_tables[TABLE_COUNT][EXPORT_TABLE_SLOTS_MAX];

static CUresult integrity_check(unsigned version, uint64_t unix_seconds, uint64_t result[2]) {
    CUresult rc = !result ? CUDA_ERROR_INVALID_VALUE : !fake_initialized() ? CUDA_ERROR_NOT_INITIALIZED : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS && version % 10 < 2) {
        memcpy(result, INTEGRITY_FIXED[version % 10], 16);
    } else if (rc == CUDA_SUCCESS) {
        int driver_version = 0;
        cuDriverGetVersion(&driver_version);
        struct { /* what is hashed: who asks, when, and the driver's tables */
            uint32_t driver_version, version, process, thread;
            const void *cudart_table, *integrity_table, *check_function;
            uint64_t unix_seconds;
        } call = {(uint32_t)driver_version, version, (uint32_t)getpid(), (uint32_t)(uintptr_t)pthread_self(),
                  g_tables[TABLE_CUDART_INTERFACE], g_tables[TABLE_INTEGRITY_CHECK],
                  g_tables[TABLE_INTEGRITY_CHECK][1], unix_seconds};
        struct { /* and each device: its UUID and PCI location */
            unsigned char uuid[16];
            int32_t domain, bus, device;
        } device;
        memset(&device, 0, sizeof device);
        cuDeviceGetUuid_v2(device.uuid, 0);
        cuDeviceGetAttribute(&device.domain, 50 /* PCI_DOMAIN_ID */, 0);
        cuDeviceGetAttribute(&device.bus, 33 /* PCI_BUS_ID */, 0);
        cuDeviceGetAttribute(&device.device, 34 /* PCI_DEVICE_ID */, 0);
        uint8_t pad[16], inner[16], outer[16];
        Md2 m = {0};
        for (int i = 0; i < 16; i++) pad[i] = INTEGRITY_KEY[i] ^ 0x36;
        md2_update(&m, pad, 16);
        md2_update(&m, &call, sizeof call);
        md2_update(&m, &device, sizeof device);
        md2_final(&m, inner);
        memset(&m, 0, sizeof m);
        for (int i = 0; i < 16; i++) pad[i] = INTEGRITY_KEY[i] ^ 0x5c;
        md2_update(&m, pad, 16);
        md2_update(&m, inner, 16);
        md2_final(&m, outer);
        memcpy(result, outer, 16);
    }
    TRACED(INTEGRITY_CHECK, 1, rc, "%u, %" PRIu64 ", %p", version, unix_seconds, (void *)result);
    return rc;
}

/* ---- CONTEXT_CHECKS: flags a real driver never observably sets ---- */
static CUresult context_check(void *ctx, uint32_t *result1, const void **result2) {
    if (result1) *result1 = 0;
    TRACED(CONTEXT_CHECKS, 2, CUDA_SUCCESS, "%p, %p, %p", ctx, (void *)result1, (void *)result2);
    return CUDA_SUCCESS;
}

static uint32_t context_check_slot3(void) {
    trace("call CONTEXT_CHECKS[3]() -> 0");
    return 0;
}

/* ---- TOOLS_CONTEXT: per-context facts for the tools and the libraries ---- */

/* Slot 4: the current context's unique ID, as cuCtxGetId gives it; what cuBLASLt keys its kernels by (public
 * notes of a driver it was checked against). CUDA 13.4+ runtimes ask for the table at start-up and fail every call
 * without it (cudaErrorInvalidValue); they call none of its slots. cuBLASLt, its one caller seen, calls it after
 * each TOOLS_TLS report with the report's word for the ID as the second argument and, as the first, whatever its
 * register held (seen here: NULL, a stack address, 0x20002000000000), so the first is not read: refusing what is
 * not a context failed cuBLASLt's heuristics in one run of three. */
static CUresult tools_context_id(void *unread, unsigned long long *id) {
    CUresult rc = cuCtxGetId(NULL, id);
    TRACED(TOOLS_CONTEXT, 4, rc, "%p, %p", unread, (void *)id);
    return rc;
}

/* ---- UNNAMED_69A28E9F: slots a real driver answered for PyTorch, their purpose unknown ---- */

/* The H200's trace (docs/cudart-traces/2026-12-02-h200/torch.log: a CUDA 13.0 driver, PyTorch 2.11) shows slots
 * 19, 21, 24 and 25 called and each returning 0 (21 returned what looks like a leftover register: a void slot),
 * with nothing to say what they did. Each answers as the trace shows, logging its first six arguments, and does
 * nothing else: no program run on the fake has asked for this table (PyTorch on the fake does not). */
#define OBSERVED_SLOT(table, slot)                                                                             \
    static CUresult observed_##table##_##slot(uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3,          \
                                               uintptr_t a4, uintptr_t a5) {                                     \
        TRACED(table, slot, CUDA_SUCCESS, "%#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR \
               ", %#" PRIxPTR, a0, a1, a2, a3, a4, a5);                                                       \
        return CUDA_SUCCESS;                                                                                   \
    }
OBSERVED_SLOT(UNNAMED_69A28E9F, 19)
OBSERVED_SLOT(UNNAMED_69A28E9F, 21)
OBSERVED_SLOT(UNNAMED_69A28E9F, 24)
OBSERVED_SLOT(UNNAMED_69A28E9F, 25)

/* A slot no known program calls: said on stderr, refused, never a crash; logged with its table, slot and first
 * six arguments. One function per table and slot (made below), so the log can name them. */
static CUresult unknown_slot(const char *table, int slot, const uintptr_t a[6]) {
    fake_log("a private driver function the fake does not know was called: slot %d of export table %s "
             "(IRONACCEL_FAKE_LOG=<file> logs its arguments)", slot, table);
    trace("call %s[%d](%#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR ") -> %d",
          table, slot, a[0], a[1], a[2], a[3], a[4], a[5], CUDA_ERROR_NOT_SUPPORTED);
    return CUDA_ERROR_NOT_SUPPORTED;
}

#define UNKNOWN_SLOT(table, slot)                                                                              \
    static CUresult unknown_##table##_##slot(uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3,           \
                                              uintptr_t a4, uintptr_t a5) {                                      \
        return unknown_slot(#table, slot, (const uintptr_t[6]){a0, a1, a2, a3, a4, a5});                       \
    }
#define UNKNOWN_SLOTS_OF(name, ...) EXPORT_TABLE_SLOT_NUMBERS(UNKNOWN_SLOT, name)
EXPORT_TABLES(UNKNOWN_SLOTS_OF)

#define UNKNOWN_ADDRESS(table, slot) (const void *)(uintptr_t)unknown_##table##_##slot,
static const void *const UNKNOWN[TABLE_COUNT][EXPORT_TABLE_SLOTS_MAX] = {
#define UNKNOWN_ROW(name, ...) [TABLE_##name] = {EXPORT_TABLE_SLOT_NUMBERS(UNKNOWN_ADDRESS, name)},
    EXPORT_TABLES(UNKNOWN_ROW)
#undef UNKNOWN_ROW
};

/* The implemented slots: S(table, slot, function). */
#define EXPORT_SLOTS(S)                                              \
    S(CUDART_INTERFACE, 1, cudart_module_from_wrapper)               \
    S(CUDART_INTERFACE, 2, cudart_primary_context)                   \
    S(CUDART_INTERFACE, 6, cudart_module_from_wrapper_ext)           \
    S(CUDART_INTERFACE, 7, cudart_slot7)                             \
    S(CUDART_INTERFACE, 8, cudart_module_from_fatbin_ext)            \
    S(CUDART_INTERFACE, 12, cudart_load_compilers)                   \
    S(TOOLS_TLS, 2, tools_report)                                    \
    S(TOOLS_RUNTIME_CALLBACK_HOOKS, 2, hooks_buffer2)                \
    S(TOOLS_RUNTIME_CALLBACK_HOOKS, 6, hooks_buffer6)                \
    S(CONTEXT_LOCAL_STORAGE, 0, storage_put)                         \
    S(CONTEXT_LOCAL_STORAGE, 1, storage_delete)                      \
    S(CONTEXT_LOCAL_STORAGE, 2, storage_get)                         \
    S(CTX_CREATE_BYPASS, 1, bypass_ctx_create)                       \
    S(DEVICE_EXTENDED_RT, 13, device_slot13)                         \
    S(INTEGRITY_CHECK, 1, integrity_check)                           \
    S(CONTEXT_CHECKS, 2, context_check)                              \
    S(CONTEXT_CHECKS, 3, context_check_slot3)                        \
    S(TOOLS_CONTEXT, 4, tools_context_id)                            \
    S(UNNAMED_69A28E9F, 19, observed_UNNAMED_69A28E9F_19)            \
    S(UNNAMED_69A28E9F, 21, observed_UNNAMED_69A28E9F_21)            \
    S(UNNAMED_69A28E9F, 24, observed_UNNAMED_69A28E9F_24)            \
    S(UNNAMED_69A28E9F, 25, observed_UNNAMED_69A28E9F_25)

static pthread_once_t g_tables_once = PTHREAD_ONCE_INIT;

static void tables_fill(void) {
    for (int t = 0; t < TABLE_COUNT; t++)
        for (int s = 0; s < TABLE_INFO[t].nslots; s++)
            g_tables[t][s] = s == 0 && TABLE_INFO[t].sized ? (const void *)(uintptr_t)(TABLE_INFO[t].nslots * sizeof(void *))
                                                           : UNKNOWN[t][s];
#define S(table, slot, fn) g_tables[TABLE_##table][slot] = (const void *)(uintptr_t)fn;
    EXPORT_SLOTS(S)
#undef S
}

API CUresult cuGetExportTable(const void **table, const void *uuid) {
    ENTER(cuGetExportTable);
    if (!table || !uuid) return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&g_tables_once, tables_fill);
    char text[39];
    uuid_text(uuid, text);
    for (int t = 0; t < TABLE_COUNT; t++)
        if (!memcmp(uuid, TABLE_INFO[t].uuid, 16)) {
            *table = g_tables[t];
            trace("export_table %s %s -> 0", text, TABLE_INFO[t].name);
            return CUDA_SUCCESS;
        }
    *table = NULL;
    trace("export_table %s <unknown> -> %d", text, CUDA_ERROR_INVALID_VALUE);
    return CUDA_ERROR_INVALID_VALUE;
}

/** Control API for the trace replay (tests/fakes/test_runtime.py): 1 when the named table is known and its slot
 * does something of its own (not an unknown slot, not the size in slot 0), else 0. */
API int ironaccel_fake_export_slot_implemented(const char *table, int slot) {
    pthread_once(&g_tables_once, tables_fill);
    for (int t = 0; t < TABLE_COUNT; t++)
        if (table && !strcmp(table, TABLE_INFO[t].name))
            return slot >= 0 && slot < TABLE_INFO[t].nslots && !(slot == 0 && TABLE_INFO[t].sized) &&
                   g_tables[t][slot] != UNKNOWN[t][slot];
    return 0;
}
