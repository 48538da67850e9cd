/* Interprocess memory and events (cuIpc*). The fake's device memory is host memory, so sharing it is sharing
 * pages: exporting an allocation moves its contents into a memfd mapped MAP_SHARED at the same address, and
 * another process opens that file through /proc/<pid>/fd/<n> and maps it into its own device address range.
 * An interprocess event keeps its generations in a shared page (streams.c makes it); opening its handle maps
 * that page under a new event of this process.
 *
 * A handle (CUipcMemHandle / CUipcEventHandle, 64 bytes) names the file: the exporter's pid and descriptor,
 * plus the file's device and inode, its size and a checksum of all of it. Opening checks every field and that
 * the descriptor still names the same file, so a handle of a dead process, of freed memory, or of garbage is
 * refused (INVALID_HANDLE when it is well-formed but its memory is gone, INVALID_VALUE when it is not a handle),
 * and a handle opened in the process that made it is INVALID_CONTEXT, as on a real driver. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake.h"

#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_EVENT_INTERPROCESS 0x4
#define PAGE 4096ull
#define HANDLE_MAGIC 0x4b464149u /* "IAFK" */
#define HANDLE_VERSION 1
enum { KIND_MEMORY = 1, KIND_EVENT = 2 };

typedef struct { unsigned char reserved[64]; } CUipcMemHandle;
typedef struct { unsigned char reserved[64]; } CUipcEventHandle;

typedef struct IpcHandle {
    uint32_t magic;
    uint16_t version, kind;
    int32_t pid, fd;
    uint64_t dev, inode, size;
    uint64_t serial; /* the exported allocation's, so two exports of one address differ */
    uint64_t check;  /* FNV-1a of the bytes before it */
    uint64_t zero;
} IpcHandle;
_Static_assert(sizeof(IpcHandle) == 64, "an IPC handle is 64 bytes");

static uint64_t checksum(const IpcHandle *h) {
    const unsigned char *p = (const unsigned char *)h;
    uint64_t x = 1469598103934665603ull;
    for (size_t i = 0; i < offsetof(IpcHandle, check); i++) x = (x ^ p[i]) * 1099511628211ull;
    return x;
}

static CUresult make_handle(int kind, int fd, uint64_t size, uint64_t serial, IpcHandle *out) {
    struct stat st;
    if (fstat(fd, &st)) return CUDA_ERROR_OPERATING_SYSTEM;
    *out = (IpcHandle){HANDLE_MAGIC, HANDLE_VERSION, (uint16_t)kind, getpid(), fd, (uint64_t)st.st_dev,
                       (uint64_t)st.st_ino, size, serial, 0, 0};
    out->check = checksum(out);
    return CUDA_SUCCESS;
}

/* The exporter's file, opened here read-write after every field of the handle is checked. */
static CUresult open_handle(const void *bytes, int kind, IpcHandle *h, int *fd) {
    memcpy(h, bytes, sizeof *h);
    if (h->magic != HANDLE_MAGIC || h->version != HANDLE_VERSION || h->kind != kind || h->pid <= 0 ||
        h->fd < 0 || h->size == 0 || h->zero || h->check != checksum(h))
        return CUDA_ERROR_INVALID_VALUE;
    if (h->pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h->pid, (int)h->fd);
    *fd = open(path, O_RDWR | O_CLOEXEC);
    if (*fd < 0) return CUDA_ERROR_INVALID_HANDLE; /* the exporter exited or closed it (memory freed) */
    struct stat st;
    uint64_t span = (h->size + PAGE - 1) & ~(PAGE - 1);
    if (fstat(*fd, &st) || (uint64_t)st.st_dev != h->dev || (uint64_t)st.st_ino != h->inode ||
        (uint64_t)st.st_size != span) {
        close(*fd);
        return CUDA_ERROR_INVALID_HANDLE; /* the descriptor number now names another file */
    }
    return CUDA_SUCCESS;
}

/* ---- memory ---- */

typedef struct Export {
    uint64_t base, serial;
    int fd;
} Export;
typedef struct Import {
    uint64_t base, dev, inode;
    int refs;
} Import;

static pthread_mutex_t g_ipc_mu = PTHREAD_MUTEX_INITIALIZER;
static Export *g_exports;
static int g_nexports, g_capexports;
static Import *g_imports;
static int g_nimports, g_capimports;

/* memory.c's free hook (under its lock): an exported allocation's file closes, so its handle no longer opens;
 * an opened mapping freed some other way than cuIpcCloseMemHandle is forgotten. */
static void forget_freed(const AllocInfo *a) {
    pthread_mutex_lock(&g_ipc_mu);
    for (int i = 0; i < g_nexports; i++)
        if (g_exports[i].serial == a->serial) {
            close(g_exports[i].fd);
            g_exports[i--] = g_exports[--g_nexports];
        }
    for (int i = 0; i < g_nimports; i++)
        if (g_imports[i].base == a->base) g_imports[i--] = g_imports[--g_nimports];
    pthread_mutex_unlock(&g_ipc_mu);
}

static void *grow(void *p, int n, int *cap, size_t each) {
    if (n < *cap) return p;
    *cap = *cap ? *cap * 2 : 16;
    return realloc(p, (size_t)*cap * each);
}

/* Moves the allocation's pages into a new memfd mapped at the same address (its work drained first, so no
 * write is lost); the file's descriptor stays open until the allocation is freed. */
static CUresult share_allocation(const AllocInfo *a, int *fd_out) {
    uint64_t span = (a->size + PAGE - 1) & ~(PAGE - 1);
    int fd = memfd_create("ironaccel-fakecuda-ipc", MFD_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    void *tmp = MAP_FAILED;
    if (ftruncate(fd, (off_t)span) == 0) tmp = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (tmp == MAP_FAILED) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(tmp, (void *)(uintptr_t)a->base, span);
    munmap(tmp, span);
    if (mmap((void *)(uintptr_t)a->base, span, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
        MAP_FAILED) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *fd_out = fd;
    return CUDA_SUCCESS;
}

API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr) {
    ENTER(cuIpcGetMemHandle);
    NEED_CONTEXT(ctx);
    AllocInfo a;
    if (!pHandle || !mem_find(dptr, &a) || a.kind != A_DEVICE || (a.flags & (MEM_MANAGED | MEM_IPC_IMPORTED | MEM_POOL_SHARED)))
        return CUDA_ERROR_INVALID_VALUE;
    mem_add_free_hook(forget_freed);
    if (!(a.flags & MEM_IPC_EXPORTED)) streams_sync_context(a.ctx);
    pthread_mutex_lock(&g_ipc_mu);
    int fd = -1;
    for (int i = 0; i < g_nexports; i++)
        if (g_exports[i].serial == a.serial) fd = g_exports[i].fd;
    CUresult rc = CUDA_SUCCESS;
    int fresh = fd < 0;
    if (fresh && (rc = share_allocation(&a, &fd)) == CUDA_SUCCESS) {
        g_exports = grow(g_exports, g_nexports, &g_capexports, sizeof *g_exports);
        g_exports[g_nexports++] = (Export){a.base, a.serial, fd};
    }
    IpcHandle h;
    if (rc == CUDA_SUCCESS) rc = make_handle(KIND_MEMORY, fd, a.size, a.serial, &h);
    pthread_mutex_unlock(&g_ipc_mu);
    if (rc == CUDA_SUCCESS && fresh && !mem_mark(a.base, a.serial, MEM_IPC_EXPORTED)) {
        forget_freed(&a); /* freed while it was being shared */
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS) memcpy(pHandle, &h, sizeof h);
    return rc;
}

/* Opening a handle this process already opened gives the same address again, counted (one
 * cuIpcCloseMemHandle per open). */
API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned flags) {
    ENTER(cuIpcOpenMemHandle_v2);
    NEED_CONTEXT(ctx);
    if (!pdptr || (flags & ~CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) return CUDA_ERROR_INVALID_VALUE;
    IpcHandle h;
    int fd;
    TRY(open_handle(handle.reserved, KIND_MEMORY, &h, &fd));
    mem_add_free_hook(forget_freed);
    pthread_mutex_lock(&g_ipc_mu);
    for (int i = 0; i < g_nimports; i++)
        if (g_imports[i].dev == h.dev && g_imports[i].inode == h.inode) {
            g_imports[i].refs++;
            *pdptr = g_imports[i].base;
            pthread_mutex_unlock(&g_ipc_mu);
            close(fd);
            return CUDA_SUCCESS;
        }
    uint64_t span = (h.size + PAGE - 1) & ~(PAGE - 1);
    uint64_t base = mem_reserve(h.size);
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (base && mmap((void *)(uintptr_t)base, span, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) !=
                    MAP_FAILED) {
        g_imports = grow(g_imports, g_nimports, &g_capimports, sizeof *g_imports);
        g_imports[g_nimports++] = (Import){base, h.dev, h.inode, 1};
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_ipc_mu);
    close(fd); /* the mapping keeps the file */
    if (rc == CUDA_SUCCESS) rc = mem_map_reserved(ctx, base, h.size, A_DEVICE, MEM_IPC_IMPORTED);
    if (rc == CUDA_SUCCESS) *pdptr = base;
    return rc;
}

API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned flags) {
    ENTER(cuIpcOpenMemHandle);
    return cuIpcOpenMemHandle_v2(pdptr, handle, flags);
}

API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
    ENTER(cuIpcCloseMemHandle);
    NEED_CONTEXT(ctx);
    pthread_mutex_lock(&g_ipc_mu);
    int i = 0;
    while (i < g_nimports && g_imports[i].base != dptr) i++;
    int last = i < g_nimports && --g_imports[i].refs == 0;
    int found = i < g_nimports;
    pthread_mutex_unlock(&g_ipc_mu);
    if (!found) return CUDA_ERROR_INVALID_VALUE;
    if (!last) return CUDA_SUCCESS;
    streams_sync_context(NULL); /* work still using the mapping ends first, as cuMemFree waits */
    return mem_free(dptr, 1 << A_DEVICE); /* the free hook forgets it */
}

/* ---- events ---- */

API CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, void *hEvent) {
    ENTER(cuIpcGetEventHandle);
    Event *e;
    TRY(handle_get(hEvent, H_EVENT, &e));
    if (!pHandle || !e->shared) return CUDA_ERROR_INVALID_VALUE;
    IpcHandle h;
    TRY(make_handle(KIND_EVENT, e->shared_fd, PAGE, 0, &h));
    memcpy(pHandle, &h, sizeof h);
    return CUDA_SUCCESS;
}

API CUresult cuIpcOpenEventHandle(void **phEvent, CUipcEventHandle handle) {
    ENTER(cuIpcOpenEventHandle);
    NEED_CONTEXT(ctx);
    if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
    IpcHandle h;
    int fd;
    TRY(open_handle(handle.reserved, KIND_EVENT, &h, &fd));
    void *page = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (page == MAP_FAILED) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void *ev;
    CUresult rc = event_create_shared(&ev, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS, fd, page);
    if (rc != CUDA_SUCCESS) {
        munmap(page, PAGE);
        close(fd);
        return rc;
    }
    *phEvent = ev;
    return CUDA_SUCCESS;
}
