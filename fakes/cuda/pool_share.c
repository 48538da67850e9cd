/* Memory pools shared between processes (a pool made with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR): the
 * pool's memory is one memfd. Each allocation is a range of that file mapped MAP_SHARED at an address of the
 * device range, so a process that imports the pool (the file's descriptor, passed over a socket as the driver's
 * POSIX handle is) maps the same pages at an address of its own. The file's first page is a header naming what
 * the pool holds (device or pinned host memory); the ranges after it are never reused, and a freed one is
 * punched out of the file, so its pages go back at once.
 *
 * An exported pointer (CUmemPoolPtrExportData, 64 bytes) names the pool's file (device and inode), the range's
 * offset and size, and a checksum; importing checks them against the pool it is imported into. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake.h"

#define PAGE 4096ull
#define POOL_MAGIC 0x4c4f4f50464b4149ull /* "IAKFPOOL" */
#define POINTER_MAGIC 0x50494f504b464149ull
#define FORMAT_VERSION 1

/* The file's first page. */
typedef struct PoolHeader {
    uint64_t magic;
    uint32_t version, kind; /* kind: A_DEVICE or A_HOST_PINNED */
    int32_t location_type, location_id;
} PoolHeader;

typedef struct PointerExport {
    uint64_t magic;
    uint64_t dev, inode; /* the pool's file */
    uint64_t offset, size;
    uint64_t check; /* FNV-1a of the bytes before it */
    uint64_t zero[2];
} PointerExport;
_Static_assert(sizeof(PointerExport) == 64, "CUmemPoolPtrExportData is 64 bytes");

struct SharedPool {
    int fd;
    int owner; /* made here (may allocate); else imported (may import pointers) */
    PoolHeader header;
    uint64_t dev, inode;
    uint64_t max_size, used, next_offset;
    int refs; /* the pool's handle, and each live range made or imported through it */
};

/* A live range of a shared pool, mapped at base. */
typedef struct Mapping {
    uint64_t base, offset, span;
    uint64_t counted; /* toward the pool's maximum size: the size in 256-byte units, as the driver suballocates */
    SharedPool *pool;
} Mapping;

static pthread_mutex_t g_share_mu = PTHREAD_MUTEX_INITIALIZER;
static Mapping *g_maps;
static int g_nmaps, g_capmaps;

static void *grow(void *p, int n, int *cap, size_t each) {
    if (n < *cap) return p;
    *cap = *cap ? *cap * 2 : 16;
    return realloc(p, (size_t)*cap * each);
}

static uint64_t checksum(const PointerExport *e) {
    const unsigned char *p = (const unsigned char *)e;
    uint64_t x = 1469598103934665603ull;
    for (size_t i = 0; i < offsetof(PointerExport, check); i++) x = (x ^ p[i]) * 1099511628211ull;
    return x;
}

static void unref_locked(SharedPool *p) {
    if (--p->refs) return;
    close(p->fd);
    free(p);
}

/* The range mapped at base leaves its pool (its pages punched out of the file, when this process made it)
 * and drops its reference to the pool. */
static void drop_mapping(uint64_t base) {
    pthread_mutex_lock(&g_share_mu);
    for (int i = 0; i < g_nmaps; i++)
        if (g_maps[i].base == base) {
            Mapping m = g_maps[i];
            g_maps[i] = g_maps[--g_nmaps];
            if (m.pool->owner) {
                fallocate(m.pool->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)m.offset, (off_t)m.span);
                m.pool->used -= m.counted;
            }
            unref_locked(m.pool);
            break;
        }
    pthread_mutex_unlock(&g_share_mu);
}

/* memory.c's free hook (under its lock). */
static void forget_freed(const AllocInfo *a) {
    if (a->flags & MEM_POOL_SHARED) drop_mapping(a->base);
}

static SharedPool *adopt(int fd, int owner, const PoolHeader *h) {
    struct stat st;
    SharedPool *p = fstat(fd, &st) ? NULL : calloc(1, sizeof *p);
    if (!p) return NULL;
    *p = (SharedPool){fd, owner, *h, (uint64_t)st.st_dev, (uint64_t)st.st_ino, 0, 0, PAGE, 1};
    mem_add_free_hook(forget_freed);
    return p;
}

CUresult shared_pool_create(int kind, int location_type, int location_id, uint64_t max_size, SharedPool **out) {
    int fd = memfd_create("ironaccel-fakecuda-pool", MFD_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    PoolHeader h = {POOL_MAGIC, FORMAT_VERSION, (uint32_t)kind, location_type, location_id};
    SharedPool *p = NULL;
    if (ftruncate(fd, (off_t)PAGE) == 0 && pwrite(fd, &h, sizeof h, 0) == (ssize_t)sizeof h) p = adopt(fd, 1, &h);
    if (!p) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->max_size = max_size;
    *out = p;
    return CUDA_SUCCESS;
}

CUresult shared_pool_import(int fd, SharedPool **out) {
    PoolHeader h;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode) || pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h ||
        h.magic != POOL_MAGIC || h.version != FORMAT_VERSION || (h.kind != A_DEVICE && h.kind != A_HOST_PINNED))
        return CUDA_ERROR_INVALID_VALUE; /* not a descriptor of a pool's file */
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0); /* the caller may close its descriptor */
    SharedPool *p = own < 0 ? NULL : adopt(own, 0, &h);
    if (!p) {
        if (own >= 0) close(own);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = p;
    return CUDA_SUCCESS;
}

int shared_pool_kind(const SharedPool *p, int *location_type, int *location_id) {
    if (location_type) *location_type = p->header.location_type;
    if (location_id) *location_id = p->header.location_id;
    return (int)p->header.kind;
}

int shared_pool_is_imported(const SharedPool *p) { return !p->owner; }

void shared_pool_release(SharedPool *p) {
    pthread_mutex_lock(&g_share_mu);
    unref_locked(p);
    pthread_mutex_unlock(&g_share_mu);
}

CUresult shared_pool_export_fd(SharedPool *p, int *fd) {
    if (!p->owner) return CUDA_ERROR_INVALID_VALUE; /* an imported pool is not exported again */
    *fd = fcntl(p->fd, F_DUPFD_CLOEXEC, 0);         /* the caller's to close */
    return *fd < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

/* Maps [offset, +size) of the pool's file at a fresh address and makes it a live allocation; on failure the
 * range leaves the pool again. */
static CUresult map_range(SharedPool *p, Context *ctx, uint64_t offset, uint64_t size, uint64_t counted,
                          unsigned flags, uint64_t *out) {
    uint64_t span = (size + PAGE - 1) & ~(PAGE - 1);
    uint64_t base = mem_reserve(size);
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (base && mmap((void *)(uintptr_t)base, span, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, p->fd,
                     (off_t)offset) != MAP_FAILED)
        rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_share_mu);
    g_maps = grow(g_maps, g_nmaps, &g_capmaps, sizeof *g_maps);
    g_maps[g_nmaps++] = (Mapping){base, offset, span, counted, p};
    p->refs++;
    pthread_mutex_unlock(&g_share_mu);
    if (rc == CUDA_SUCCESS) rc = mem_map_reserved(ctx, base, size, (int)p->header.kind, flags | MEM_POOL_SHARED);
    if (rc != CUDA_SUCCESS) {
        drop_mapping(base);
        if (base) /* back to reserved and inaccessible, as memory.c leaves a freed range */
            mmap((void *)(uintptr_t)base, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                 -1, 0);
        return rc;
    }
    *out = base;
    return CUDA_SUCCESS;
}

CUresult shared_pool_alloc(SharedPool *p, Context *ctx, uint64_t size, uint64_t *out) {
    if (!p->owner) return CUDA_ERROR_INVALID_VALUE; /* an imported pool only maps what its exporter made */
    uint64_t span = (size + PAGE - 1) & ~(PAGE - 1), counted = (size + 255) & ~255ull;
    pthread_mutex_lock(&g_share_mu);
    uint64_t offset = p->next_offset;
    CUresult rc = CUDA_SUCCESS;
    if (span < size || (p->max_size && p->used + counted > p->max_size)) rc = CUDA_ERROR_OUT_OF_MEMORY;
    else if (ftruncate(p->fd, (off_t)(offset + span))) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        p->next_offset += span;
        p->used += counted;
    }
    pthread_mutex_unlock(&g_share_mu);
    return rc == CUDA_SUCCESS ? map_range(p, ctx, offset, size, counted, MEM_FROM_POOL, out) : rc;
}

CUresult shared_pool_export_pointer(uint64_t ptr, void *data) {
    AllocInfo a;
    if (!mem_find(ptr, &a) || a.base != ptr) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_share_mu);
    PointerExport e = {0};
    for (int i = 0; i < g_nmaps; i++)
        if (g_maps[i].base == ptr && g_maps[i].pool->owner)
            e = (PointerExport){POINTER_MAGIC, g_maps[i].pool->dev, g_maps[i].pool->inode, g_maps[i].offset, a.size,
                                0, {0, 0}};
    pthread_mutex_unlock(&g_share_mu);
    if (!e.magic) return CUDA_ERROR_INVALID_VALUE; /* not an allocation of a pool this process exports */
    e.check = checksum(&e);
    memcpy(data, &e, sizeof e);
    return CUDA_SUCCESS;
}

/* A pointer imported twice gives the same address: the driver keeps one mapping per allocation. */
CUresult shared_pool_import_pointer(SharedPool *p, Context *ctx, const void *data, uint64_t *out) {
    PointerExport e;
    memcpy(&e, data, sizeof e);
    if (p->owner || e.magic != POINTER_MAGIC || e.check != checksum(&e) || e.zero[0] || e.zero[1] ||
        e.dev != p->dev || e.inode != p->inode || e.size == 0 || e.offset % PAGE)
        return CUDA_ERROR_INVALID_VALUE; /* not a pointer of this pool */
    struct stat st;
    if (fstat(p->fd, &st) || e.offset + e.size > (uint64_t)st.st_size) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_share_mu);
    uint64_t known = 0;
    for (int i = 0; i < g_nmaps; i++)
        if (g_maps[i].pool == p && g_maps[i].offset == e.offset) known = g_maps[i].base;
    pthread_mutex_unlock(&g_share_mu);
    if (known) return *out = known, CUDA_SUCCESS;
    return map_range(p, ctx, e.offset, e.size, 0, MEM_IPC_IMPORTED, out);
}
