/* Shared declarations of the fake libcuda: handles, contexts, memory, streams, stream operations, graphs,
 * the decoded PTX form; every function one file gives another is declared here. */
#ifndef FAKECUDA_FAKE_H
#define FAKECUDA_FAKE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "results.h"

#define API __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;

/* ---- entry points: one X-macro row per implemented function: C name, name asked for, since version ---- */
#include "entry_points.h"

enum EntryId {
#define X(cname, base, since) EP_##cname,
    ENTRY_POINTS(X)
#undef X
    EP_COUNT
};

/* Entry points another file calls as they are: the runtime's tables (export_tables.c) whose slots are these
 * under another name. Declared so that the call and the definition are checked against one prototype. */
CUresult cuDriverGetVersion(int *version);                             /* init.c */
CUresult cuDeviceGetUuid_v2(unsigned char *uuid, CUdevice dev);        /* device.c */
CUresult cuDeviceGetAttribute(int *value, int attr, CUdevice dev);     /* device.c */
CUresult cuCtxCreate_v2(void **pctx, unsigned flags, CUdevice dev);    /* context.c */
CUresult cuCtxGetId(void *ctx, unsigned long long *id);                /* context.c */
CUresult cuModuleLoadFatBinary(void **module, const void *fatbin);     /* module.c */

/* Counts the call and fails it when a fault is injected for it (fault injection, faults.c). */
CUresult fault_enter(int entry_id);
#define ENTER(cname)                                    \
    do {                                                \
        CUresult enter_rc_ = fault_enter(EP_##cname);   \
        if (enter_rc_ != CUDA_SUCCESS) return enter_rc_; \
    } while (0)

/* Returns from the calling entry point when expr is not CUDA_SUCCESS. */
#define TRY(expr)                                           \
    do {                                                    \
        CUresult try_rc_ = (expr);                          \
        if (try_rc_ != CUDA_SUCCESS) return try_rc_;        \
    } while (0)

/* ---- process-wide state (process.c: whether cuInit succeeded, the log; init.c: the rest) ---- */
int fake_initialized(void);
void fake_set_initialized(int ok); /* by cuInit's one-time initialization only */
int fake_forked(void); /* forked after cuInit: not initialized here, and cuInit cannot make it so */
void fake_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The API gate (process.c): closed by a checkpoint lock, every entry point but the checkpoint ones waits in
 * ENTER until it opens. checkpoint_agent_start (checkpoint.c, from cuInit) serves other processes' requests. */
void api_gate_close(void);
void api_gate_open(void);
void api_gate_pass(void);
void checkpoint_agent_start(void);
extern int g_block_threads; /* host threads that run blocks of one launch; also the reported SM count */

#define NEED_INIT() \
    do { if (!fake_initialized()) return CUDA_ERROR_NOT_INITIALIZED; } while (0)
#define NEED_DEVICE(d) \
    do { if ((d) != 0) return CUDA_ERROR_INVALID_DEVICE; } while (0)

/* ---- the simulated device's limits (device.c reports them, module.c enforces them) ---- */
#define CC_MAJOR 9
#define CC_MINOR 0
#define SHARED_PER_BLOCK 49152          /* static + dynamic shared memory of a block without opt-in */
#define SHARED_PER_BLOCK_OPTIN 232448   /* with cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) */
#define SHARED_PER_SM 233472
/* a block's shared memory is allocated in units of this (cuda_occupancy.h, sm_8x/9x): an access past the
   bytes asked for but inside the last unit does not fault on hardware, and %total_smem_size counts units */
#define SHARED_ALLOCATION_UNIT 128
#define THREADS_PER_SM 2048
#define PARAM_BYTES_MAX 32764           /* a kernel's parameters (CUDA 12.1+, Volta and newer) */
#define LOCAL_PER_THREAD 524288         /* a thread's local memory (its stack frames), as ptxas limits it */

/* ---- handle registry: every handle given out is registered, so a bad handle is detected, not followed ---- */
enum HandleKind { H_CONTEXT = 1, H_STREAM, H_EVENT, H_MODULE, H_FUNCTION, H_POOL, H_GRAPH, H_GRAPH_NODE, H_GRAPH_EXEC, H_USER_OBJECT, H_LINK,
                  H_ARRAY, H_MIPMAPPED_ARRAY, H_TEXTURE_OBJECT, H_CONDITION, H_GREEN_CONTEXT, H_RESOURCE_DESC };
void handle_add(void *p, int kind);
int handle_ok(const void *p, int kind);
void handle_remove(void *p);
/* *out = h when h is a live handle of that kind: NOT_INITIALIZED before cuInit, INVALID_HANDLE otherwise. */
CUresult handle_get(void *h, int kind, void *out);

/* ---- contexts (context.c) and the calling thread's current context (current.c) ---- */
#define CTX_LIMITS 8 /* CUlimit values 0..7 */
typedef struct Stream Stream;
typedef struct Context {
    int device;
    unsigned flags;
    int is_primary;
    int alive;
    volatile CUresult sticky; /* set by a kernel fault: every later call on the context returns it */
    Stream *null_stream;
    unsigned long long id;
    size_t limits[CTX_LIMITS]; /* cuCtxSetLimit; under context.c's lock */
    int cache_config;
    struct DeviceHeap *heap; /* what kernels' malloc draws from, made at the first launch that needs it */
    struct GreenCtx *green;  /* the green context this is the CUcontext of (cuCtxFromGreenCtx), or NULL */
} Context;

Context *current_context(void);
/* A new regular context, not made current (NULL: out of memory); context_destroy ends one (cuCtxDestroy). */
Context *context_new(unsigned flags);
void context_destroy(Context *c);
/* A context's CUlimit value (context.c's lock held while read). */
size_t context_limit(Context *c, int limit);
/* The current context, or an error (not initialised, no context, destroyed, sticky launch error). */
CUresult need_context(Context **out);
/* Declares `Context *c` as the current context, or returns need_context's error from the entry point. */
#define NEED_CONTEXT(c) \
    Context *c = NULL;  \
    TRY(need_context(&c))
/* The calling thread's context stack: push fails with OUT_OF_MEMORY when full; pop returns NULL when empty;
 * set_current replaces the top (NULL pops); forget removes a destroyed context wherever it is. */
CUresult context_push(Context *c);
Context *context_pop(void);
void context_set_current(Context *c);
void context_forget(Context *c);
/* The launch error a context is stuck with, CUDA_SUCCESS when none (or no context). */
static inline CUresult context_sticky(const Context *ctx) { return ctx ? ctx->sticky : CUDA_SUCCESS; }
/* The device's primary context, active or not (the runtime asks for it before retaining it). */
Context *context_primary(void);
/* Is h a context handle: a live context, or the primary context even while inactive? */
int context_handle_ok(const void *h);

/* ---- context-local storage (context_storage.c): values kept per context and key, for the runtime ---- */
typedef void (*ContextStorageDtor)(void *ctx, void *key, void *value);
/* Stores (or replaces) the value under key; dtor (may be NULL) runs when the context is destroyed or reset. */
CUresult context_storage_put(Context *ctx, void *key, void *value, ContextStorageDtor dtor);
/* INVALID_HANDLE when nothing is stored under key. */
CUresult context_storage_get(Context *ctx, void *key, void **value);
CUresult context_storage_delete(Context *ctx, void *key);
/* Runs and forgets the destructors of everything ctx stores (a context destroyed or reset). */
void context_storage_release(Context *ctx);

/* ---- memory (memory.c) ---- */
enum AllocKind { A_DEVICE = 1, A_HOST_PINNED, A_HOST_REGISTERED, A_MODULE_GLOBAL };
typedef struct Range {
    uint64_t lo, hi;
} Range;
typedef struct AllocInfo {
    uint64_t base, size;
    int kind;
    Context *ctx;
    uint64_t serial;
    unsigned flags;
    const void *pool; /* the pool a stream-ordered allocation came from (CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE), or NULL */
} AllocInfo;

/* Reserves the device address range; called once from cuInit. 0 on success. */
int mem_init(void);
CUresult mem_alloc(Context *ctx, uint64_t size, int kind, uint64_t *out);
/* Managed memory (cuMemAllocManaged, managed pools): device memory flagged MEM_MANAGED, host-accessible as is. */
#define MEM_MANAGED 0x80000000u /* AllocInfo.flags of a managed allocation */
CUresult mem_alloc_managed(Context *ctx, uint64_t size, uint64_t *out);
/* Allocations shared with other processes (ipc.c): exported ones, whose pages became a shared file's, and
 * mappings of another process's memory. The free hook runs (under the allocator's lock: it must not call
 * back into memory.c) when an allocation with one of these flags is freed. */
#define MEM_IPC_EXPORTED 0x40000000u
#define MEM_IPC_IMPORTED 0x20000000u
/* Made by a stream-ordered pool (cuMemAllocAsync, cuMemAllocFromPoolAsync): what cuMemFreeAsync frees. */
#define MEM_FROM_POOL 0x10000000u
CUresult mem_alloc_from_pool(Context *ctx, uint64_t size, int kind, uint64_t *out);
/* Records the pool the allocation at ``base`` came from (cuMemAllocAsync, cuMemAllocFromPoolAsync). */
void mem_set_pool(uint64_t base, const void *pool);
/* A range of a shared pool's file (pool_share.c), made here or imported. */
#define MEM_POOL_SHARED 0x08000000u
#define MEM_SHARED_MASK (MEM_IPC_EXPORTED | MEM_IPC_IMPORTED | MEM_POOL_SHARED)
/* Adds a hook (once; a few at most) that runs for every allocation with a MEM_SHARED_MASK flag when freed. */
void mem_add_free_hook(void (*hook)(const AllocInfo *));
/* Adds flag to the live allocation at base made with that serial; 0 when there is none (freed meanwhile). */
int mem_mark(uint64_t base, uint64_t serial, unsigned flag);
/* Reserves an address range without mapping it (0 when none is left); mem_map_reserved makes [base, +size)
 * a live allocation of that kind and AllocInfo flags (again after each mem_free): INVALID_VALUE while it is live. */
uint64_t mem_reserve(uint64_t size);
CUresult mem_map_reserved(Context *ctx, uint64_t base, uint64_t size, int kind, unsigned flags);
/* Registers caller-owned host memory (cuMemHostRegister). */
CUresult mem_register(Context *ctx, void *p, uint64_t size, unsigned flags);
CUresult mem_free(uint64_t base, int kind_mask);
int mem_find(uint64_t addr, AllocInfo *out);
/* Whether addr lies in the reserved range device memory comes from (live or not). */
int mem_in_device_range(uint64_t addr);
/* Is [addr, addr+n) inside one live allocation (device, pinned, registered or a module global)? */
int mem_span_ok(uint64_t addr, uint64_t n);
/* Brackets work that may touch device memory (a kernel, copy or set on a stream worker): pages freed
 * meanwhile stay mapped until the pin ends, so freeing a buffer a running kernel uses never crashes. */
uint64_t mem_pin(void);
void mem_unpin(uint64_t epoch);
/* A sorted copy of the live ranges, for a launch to check accesses without a lock. */
Range *mem_snapshot(int *count);
void mem_describe(uint64_t addr, char *buf, size_t n);
void mem_release_context(Context *ctx);
uint64_t mem_total(void);
uint64_t mem_used(void);
/* The leak report at process exit (atexit; exits with status 3 in IRONACCEL_FAKE_CUDA_LEAKS=error mode). */
void mem_report_at_exit(void);

/* ---- memory pools shared between processes (pool_share.c) ---- */
typedef struct SharedPool SharedPool;
/* A pool of kind A_DEVICE or A_HOST_PINNED backed by a memfd; max_size 0: no limit but the device's. */
CUresult shared_pool_create(int kind, int location_type, int location_id, uint64_t max_size, SharedPool **out);
/* The pool behind another process's exported descriptor (INVALID_VALUE when fd is not one); fd stays the caller's. */
CUresult shared_pool_import(int fd, SharedPool **out);
/* The pool's memory kind, and its location. */
int shared_pool_kind(const SharedPool *p, int *location_type, int *location_id);
int shared_pool_is_imported(const SharedPool *p);
/* Drops the pool's handle: its file lives on while allocations made or imported through it do. */
void shared_pool_release(SharedPool *p);
CUresult shared_pool_export_fd(SharedPool *p, int *fd);
CUresult shared_pool_alloc(SharedPool *p, Context *ctx, uint64_t size, uint64_t *out);
/* CUmemPoolPtrExportData (64 bytes) of an allocation of a pool this process made; and importing it. */
CUresult shared_pool_export_pointer(uint64_t ptr, void *data);
CUresult shared_pool_import_pointer(SharedPool *p, Context *ctx, const void *data, uint64_t *out);

/* ---- streams and events (streams.c) ---- */
typedef void (*WorkFn)(void *arg);
typedef struct Graph Graph;
typedef struct GraphNode GraphNode;
/* A stream capture (cuStreamBeginCapture): the graph being built and the streams that joined it. */
typedef struct Capture {
    Graph *graph;
    uint64_t id;
    int mode;
    int invalidated; /* an unsupported operation was attempted: EndCapture fails */
    Stream *origin;
    int callers_graph; /* cuStreamBeginCaptureToGraph: the graph is the caller's, never freed here */
} Capture;
struct Stream {
    Context *ctx;
    unsigned flags;
    int priority;
    int is_null;
    pthread_t thread;
    struct Work *head, *tail;
    int running; /* an item is being executed */
    int closing;
    uint64_t enqueued, completed;
    Capture *capture;  /* non-NULL while capturing: work becomes graph nodes instead of running */
    GraphNode **deps;  /* the capture's nodes the next captured operation depends on */
    int ndeps, capdeps;
    void *edge_data;   /* zeroed CUgraphEdgeData, one per dependency, for cuStreamGetCaptureInfo */
    int capedges;
};
typedef struct Event {
    Context *ctx;
    unsigned flags;
    uint64_t record_gen, done_gen;
    uint64_t *queued_gens; /* a plain event's records queued and not yet complete (event_record_done_locked) */
    int nqueued_gens, capqueued_gens;
    int refs; /* the user's handle plus pending queue items and graph nodes */
    int destroyed;
    double time_ms;
    int has_time;
    uint64_t capture_id;     /* recorded in this capture (0: not): a wait on it joins the capture */
    GraphNode **capture_deps; /* what it was recorded after */
    int ncapture_deps, capcapture_deps;
    volatile uint64_t *shared; /* an interprocess event: {recorded, completed} generations in a shared page */
    int shared_fd;             /* that page's memfd (what an IPC handle names) */
} Event;
/* A new event of the current context; an interprocess one (fd, page: its shared generations, which the event
 * then owns) or a plain one (-1, NULL). */
CUresult event_create_shared(void **phEvent, unsigned flags, int fd, void *page);

CUresult stream_resolve(void *h, Context *ctx, Stream **out);
/* Queue fn(arg) on s (legacy default-stream ordering applied); free_arg runs after it. */
CUresult stream_submit(Stream *s, WorkFn fn, void *arg);
CUresult stream_sync(Stream *s);
Stream *stream_new(Context *ctx, unsigned flags, int priority, int is_null);
/* Ends a stream: its worker drains the queue, then frees it (what cuStreamDestroy does). */
void stream_close(Stream *s);
/* Waits until every stream of ctx (NULL: of every context) has drained. */
void streams_sync_context(Context *ctx);
int streams_invalidate_context_captures(Context *ctx);
/* Closes every stream of a context being destroyed, after their queues drain. */
void streams_close_context(Context *ctx);

/* ---- the decoded PTX form (ptx.c, ptx_decode.c, ptx_lex.c) and the interpreter (interp.c) ---- */
enum Special {
    SP_TRUE, SP_TID_X, SP_TID_Y, SP_TID_Z, SP_NTID_X, SP_NTID_Y, SP_NTID_Z, SP_CTAID_X, SP_CTAID_Y, SP_CTAID_Z,
    SP_NCTAID_X, SP_NCTAID_Y, SP_NCTAID_Z, SP_LANEID, SP_WARPID, SP_NWARPID, SP_SMID, SP_NSMID, SP_GRIDID,
    SP_LANEMASK_EQ, SP_LANEMASK_LT, SP_LANEMASK_LE, SP_LANEMASK_GT, SP_LANEMASK_GE, SP_CLOCK, SP_DYN_SMEM,
    SP_TOTAL_SMEM, SP_ENVREG_HI, SP_ENVREG_LO, SP_ENVREG_NONE, SP_SINK, SP_ZERO, SP_COUNT
};

typedef struct Inst {
    uint16_t op;
    uint8_t type;  /* operand type (enum PtxType) where the op needs it */
    uint32_t d, a, b, c, e; /* register-file slots (a guarded instruction follows an OP_GUARD) */
    uint8_t sub, sub2, vec, flags; /* comparison / rounding / vector width / misc per op */
    int64_t imm;
} Inst;

/* Frames a thread may have beyond its kernel's; a call past them ends the launch (HARDWARE_STACK_ERROR). */
#define CALL_DEPTH_MAX 32
/* A function's address as device code sees it (mov of its name; what an indirect call jumps to): a range of
 * its own, so that a call through any other value is caught. */
#define FUNCTION_ADDRESS_BASE 0xfc00000000000000ull
#define FUNCTION_ADDRESS_STEP 16u

typedef struct CallInfo {
    int callee, caller; /* function indices, resolved when the module is loaded; callee -1: through a pointer */
    int nargs;
    uint32_t arg_off[16];  /* caller frame offsets of the argument params */
    uint32_t ret_off;      /* caller frame offset of the return param, or UINT32_MAX */
} CallInfo;

typedef struct PtxParam {
    char *name;
    uint32_t offset, size, align;
} PtxParam;

typedef struct PtxFunction {
    char *name;
    int is_entry;
    int defined;
    int weak;               /* defined .weak: a later definition (another linked input's) is dropped */
    uint32_t entry_pc, end_pc;
    uint32_t nslots;        /* frame: specials, registers, constants */
    uint32_t const_base, nconsts;
    uint64_t *consts;
    uint32_t frame_local;   /* bytes of local memory (depots, params) in one frame */
    int nparams;
    PtxParam *params;       /* entry: kernel param buffer layout; func: frame offsets */
    uint32_t param_bytes;
    int has_ret;
    char *ret_name;         /* the return parameter's name (NVRTC's func_retval0; PTX allows any) */
    uint32_t ret_off, ret_size;
    uint32_t stack_slots, stack_local; /* the deepest call chain from here, computed at load: a chain that
                                        * recurses or calls through a pointer counts CALL_DEPTH_MAX frames of
                                        * the module's largest */
    int unbounded_calls;               /* such a chain starts here */
    uint32_t reqntid, maxntid;
    uint32_t maxnreg;       /* .maxnreg: the registers a thread may use (0: no limit) */
    uint32_t shared_static; /* an entry's static .shared bytes (those it and its callees name), 16-aligned:
                             * its dynamic shared memory starts there */
    uint32_t shared_declared; /* the bytes those variables take: its SHARED_SIZE_BYTES */
    int line;
} PtxFunction;

typedef struct PtxModule {
    Inst *code;
    uint32_t ncode;
    PtxFunction *funcs;
    int nfuncs;
    CallInfo *calls;
    int ncalls;
    uint32_t const_bytes;   /* the bytes the .const variables declare: a function's CONST_SIZE_BYTES (module-wide) */
    uint32_t data_align;    /* the largest .align of a .shared or .local variable (at least 16): a block's shared
                             * memory, each thread's local memory and every frame start at a multiple of it */
    int uses_device_heap; /* calls malloc or free */
    int uses_grid_sync;   /* calls cudaCGSynchronize: every block of a launch runs at once, on its own worker */
    uint32_t max_registers; /* CU_JIT_MAX_REGISTERS of the load or link that made it (0: no limit) */
    char **global_names;
    uint64_t *global_addrs, *global_sizes;
    int nglobals;
    int *lines; /* source line of each instruction, for reports */
    unsigned target_arch; /* the newest architecture its .target names: a function's PTX_VERSION */
} PtxModule;

/* The PTX text an image holds (image.c): the image itself when it is PTX text, else PTX extracted from a
 * fatbin or ELF (*owned, to free). Machine code alone is NO_BINARY_FOR_GPU with the reason in log (also on
 * stderr); a container whose headers point outside its size bytes is INVALID_IMAGE. size is
 * IMAGE_SIZE_UNKNOWN for a pointer alone (cuModuleLoadData): then the headers say how far it goes.
 * *newest_target (when not NULL): the newest .target the loader may accept from this PTX, SIMULATED_SM unless the
 * image is a fatbin whose machine code a real sm_90 runs and whose PTX is all newer (image.c says why). */
#define IMAGE_SIZE_UNKNOWN SIZE_MAX
#define SIMULATED_SM 90
CUresult image_ptx(const void *image, size_t size, const char **ptx, char **owned, unsigned *newest_target, char *log,
                   size_t loglen);
/* A whole regular file of at most 1 GiB, NUL-terminated (*n bytes before the NUL); FILE_NOT_FOUND when it
 * cannot be opened or is no regular file (a device, a FIFO), INVALID_IMAGE when larger. */
CUresult image_read(const char *path, char **bytes, size_t *n);
/* A compressed fatbin entry's payload (fatbin_compress.c): packed bytes at src decompressed into *out (malloc'ed,
 * NUL-terminated, *n == size bytes before the NUL); INVALID_IMAGE (corrupt) or NOT_SUPPORTED (no codec library)
 * with the reason, naming the entry's arch, in log. */
enum FatbinCodec { FATBIN_LZ4, FATBIN_ZSTD };
CUresult fatbin_decompress(int codec, unsigned arch, const uint8_t *src, uint64_t packed, uint64_t size, uint8_t **out,
                           size_t *n, char *log, size_t loglen);
/* Parses PTX text whose .target is at most newest_target (SIMULATED_SM, or what image_ptx allows); on failure
 * returns NULL, writes "line N: ..." to err and the CUresult to *rc (INVALID_PTX, or OUT_OF_MEMORY when its
 * variables do not fit in device memory). */
PtxModule *ptx_load(const char *text, Context *ctx, unsigned newest_target, char *err, size_t errlen, CUresult *rc);
/* The CU_JIT_MAX_REGISTERS a cuLink image (link.c) was made with, 0 for none or any other PTX text. */
unsigned linked_max_registers(const char *text);
void ptx_free(PtxModule *m);

typedef struct Module {
    Context *ctx;
    PtxModule *ptx; /* freed at the unload, or after it once the last launch or graph node using it lets go */
    int alive;
    int refs; /* the load's, each queued launch's and each graph node's (module.c's module_lock) */
} Module;

typedef struct Function {
    Module *module;
    int index;
    int max_dynamic_shared;
} Function;

typedef struct LaunchSpec {
    Function *fn;
    unsigned grid[3], block[3];
    unsigned shared_bytes;
    uint8_t *params;
    uint32_t param_bytes;
    int cooperative; /* cuLaunchCooperativeKernel, or cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_COOPERATIVE: every
                      * block at once, and a grid workspace in %envreg1:%envreg2 (the C++ header's grid.sync()) */
} LaunchSpec;

/* Host memory a worker of the interpreter holds to run blocks of n threads of a kernel (registers, frames, local
 * memory); a launch needing more than BLOCK_BYTES_MAX is LAUNCH_OUT_OF_RESOURCES. */
#define BLOCK_BYTES_MAX (256ull << 20)
uint64_t interp_block_bytes(const PtxModule *m, const PtxFunction *kernel, uint64_t n);
/* Runs a whole grid in ctx; returns CUDA_SUCCESS or the error that ended it (with a report in report). */
CUresult interp_launch(Context *ctx, const LaunchSpec *spec, char *report, size_t report_len);
int watchdog_armed(void); /* interp.c: IRONACCEL_FAKE_WATCHDOG_S or _INSTRUCTIONS limits a launch */

/* ---- mbarriers (mbarrier.c): the 64-bit barrier objects of PTX's mbarrier instructions, in shared memory ---- */
#define MB_HAS_COUNT 0x1   /* Inst.flags of an arrive: the count operand is given (else 1) */
#define MB_PARITY 0x2      /* test_wait/try_wait.parity: the operand is a phase parity, not a state */
#define MB_NO_COMPLETE 0x4 /* arrive.noComplete: the arrival must not complete the phase */
/* One mbarrier instruction (enum MbarrierOp) on the object at obj (NULL for pending_count, which reads its
 * operand only) with its operand b (count, state or parity): its result; *waiting is set when a wait found the
 * phase not complete yet, so that the thread lets the others of its block run before it asks again. */
uint64_t mbarrier_step(int op, int flags, uint64_t *obj, uint64_t b, int *waiting);

/* ---- tensor maps (tensor_map.c) as device code changes them (tensormap.replace) ---- */
/* Where field (enum TensorMapField) of dimension ord lies in the fake's 128-byte CUtensorMap and the value it holds
 * for tensormap.replace's new_val (PTX's numbering: .rank is the rank minus one). */
void tensor_map_field(int field, unsigned ord, uint64_t new_val, unsigned *offset, unsigned *size, uint64_t *stored);
/* The dimensions (ord) a field has: 0 for a field of the whole map. */
unsigned tensor_map_field_dims(int field);

/* ---- the device heap (device_heap.c): device code's malloc and free ---- */
/* Makes the context's heap of size bytes (the caller reads its CU_LIMIT_MALLOC_HEAP_SIZE, so the heap does not
 * depend on context.c, which releases it) if it has none yet: before a launch snapshots the live allocations,
 * so that memcheck sees the heap. */
CUresult device_heap_ready(Context *ctx, size_t size);
/* A block of at least size bytes, 16-byte aligned; 0 when the heap has no room (malloc's NULL). */
uint64_t device_heap_malloc(Context *ctx, uint64_t size);
/* Frees a block malloc returned (0 is a no-op); -1 when p is no such block. */
int device_heap_free(Context *ctx, uint64_t p);
/* Forgets the context's heap bookkeeping (its memory goes with the context's allocations). */
void device_heap_release(Context *ctx);

/* ---- operations: one unit of stream work, as a stream runs it and a graph node keeps it ---- */
enum OpKind { /* the CUgraphNodeType values */
    OPK_KERNEL = 0, OPK_MEMCPY = 1, OPK_MEMSET = 2, OPK_HOST = 3, OPK_GRAPH = 4, OPK_EMPTY = 5,
    OPK_EVENT_WAIT = 6, OPK_EVENT_RECORD = 7, OPK_MEM_ALLOC = 10, OPK_MEM_FREE = 11,
    OPK_CONDITIONAL = 13
};
/* A (up to) 3-D copy between addresses that already include the offsets; pitches in bytes. */
typedef struct Copy3D {
    uint64_t dst, src;
    size_t dst_pitch, dst_height, src_pitch, src_height;
    size_t width, height, depth; /* width in bytes */
} Copy3D;
typedef struct SetParams {
    uint64_t dst;
    size_t pitch;
    uint32_t value;
    unsigned elem; /* 1, 2 or 4 bytes */
    size_t width, height;
} SetParams;
typedef struct StreamOp StreamOp;
/* What a kind of operation does. Each file that builds an operation defines its class, so a graph runs
 * and copies nodes without knowing their kinds (and without depending on the files that made them). */
typedef struct StreamOpClass {
    CUresult (*submit)(Stream *s, const StreamOp *op); /* queue it on s */
    void (*hold)(StreamOp *op); /* a graph node keeps its own copy: duplicate owned data, take references */
    void (*drop)(StreamOp *op); /* undo hold */
} StreamOpClass;
struct StreamOp {
    int kind;
    const StreamOpClass *cls;
    union {
        LaunchSpec kernel; /* params owned by a held copy */
        Copy3D copy;
        SetParams set;
        struct { void (*fn)(void *); void *user; } host;
        Event *event;
        Graph *graph; /* a child graph, cloned by hold */
        struct GraphAlloc *alloc; /* a graph allocation (graph_memory.c), referenced by hold */
        CUdeviceptr freed; /* the graph allocation a free node frees */
        struct Conditional *conditional; /* condition, kind and bodies (graph_conditional.c), copied by hold */
    } u;
};

/* Builds a kernel operation from launch arguments (checked, parameters packed, a reference to the module
 * taken; module.c). The caller owns the op: launch_spec_free(&op->u.kernel) lets go of it. */
CUresult kernel_op(void *hfunc, const unsigned grid[3], const unsigned block[3], unsigned shared, void **params,
                   void **extra, StreamOp *op);
/* Frees a kernel op's parameters and lets go of its module (the decoded PTX goes with the last one). */
void launch_spec_free(LaunchSpec *spec);
/* Copy and set operations, checked against the live allocations (copies.c); a side is MEM_HOST (the
 * caller's memory), MEM_DEVICE (one live allocation) or MEM_EITHER (unified addressing). */
enum MemSide { MEM_HOST, MEM_DEVICE, MEM_EITHER };
CUresult copy_op(const Copy3D *c, int dst_side, int src_side, StreamOp *op);
/* The copy a CUDA_MEMCPY3D describes (host, device, unified or array sides; copies.c). */
typedef struct Memcpy3DParams Memcpy3DParams;
CUresult memcpy3d_op(const Memcpy3DParams *p, StreamOp *op);
/* Where a CUDA array's elements are (arrays.c): its device allocation, bytes a row, rows a slice. */
CUresult array_layout(void *harray, uint64_t *data, size_t *pitch, size_t *rows);
CUresult set_op(const SetParams *p, StreamOp *op);
/* Event record/wait and host-function operations (streams.c). */
void event_record_op(Event *e, StreamOp *op);
void event_wait_op(Event *e, StreamOp *op);
void host_op(void (*fn)(void *), void *user, StreamOp *op);
/* While s is capturing: adds op to the capture after the stream's current dependencies (the op is held, the
 * caller keeps its own). Returns INVALIDATED for an invalidated capture. */
CUresult stream_capture(Stream *s, const StreamOp *op);
/* An operation a capture cannot record: the capture is invalidated, STREAM_CAPTURE_UNSUPPORTED returned. */
CUresult stream_capture_unsupported(Stream *s, const char *what);

/* ---- graphs (graph.c: the structure; graph_api.c: the entry points) ---- */
struct GraphNode {
    Graph *owner;
    int index; /* position in owner->nodes: a topological order, since dependencies exist before a node */
    StreamOp op;     /* held */
    GraphNode **deps;
    int ndeps;
    const GraphNode *origin; /* in a clone: the node it copies (how an executable graph finds its nodes) */
    void *queried; /* what the last parameter query handed out (kernelParams), valid while the node lives */
};
/* A user object (cuUserObjectCreate): the destructor runs when the last reference goes, graphs hold some. */
typedef struct UserObject {
    void *ptr;
    void (*destroy)(void *);
    int refs; /* under graph.c's lock */
} UserObject;
typedef struct UserObjectRef {
    UserObject *obj;
    unsigned count;
} UserObjectRef;
struct Graph {
    GraphNode **nodes;
    int nnodes, capnodes;
    UserObjectRef *objs; /* user objects this graph holds references to */
    int nobjs, capobjs;
};
/* Adds count references (0 when the object was already destroyed: then nothing is taken). */
int user_object_retain(UserObject *o, unsigned count);
/* Drops count references; the last one runs the destructor and frees the object. */
void user_object_release(UserObject *o, unsigned count);
/* The graph takes count references of o (already retained by the caller); -1 when out of memory. */
int graph_hold_object(Graph *g, UserObject *o, unsigned count);
/* The graph gives up to count of its references to o back (released); how many it had, capped at count. */
unsigned graph_drop_object(Graph *g, UserObject *o, unsigned count);
Graph *graph_new(void);
/* Adds a node after deps (all nodes of g), holding a copy of op; NULL when out of memory. */
GraphNode *graph_add(Graph *g, const StreamOp *op, GraphNode *const *deps, int ndeps);
/* graph_add for an entry point: checks the graph and dependency handles (INVALID_HANDLE/VALUE); the
 * caller's op is not taken. */
CUresult graph_add_node(void **phNode, void *hGraph, GraphNode *const *deps, size_t ndeps, const StreamOp *op);
/* Removes a node and every edge to it; the nodes after it move up one place. */
void graph_remove(GraphNode *n);
/* Replaces a node's operation (the new one held, the old dropped). */
void graph_node_set_op(GraphNode *n, const StreamOp *op);
Graph *graph_clone(const Graph *g);
void graph_free(Graph *g);
/* Index of the first node where a and b differ in kind or dependencies (recursively for child graphs), -1
 * when they have the same shape; an extra or missing node counts as a difference at min(sizes). */
int graph_shape_differs(const Graph *a, const Graph *b);
/* Puts g's nodes back in an order where every dependency comes first (after edges were added), keeping the
 * present order where it can; -1 (nothing changed) when the edges make a cycle. */
int graph_sort(Graph *g);
/* Is a reachable from b through dependencies (or b itself)? */
int graph_node_precedes(const GraphNode *a, const GraphNode *b);
/* Queues every node of g on s, in order (one stream runs a graph: its order respects every edge). */
CUresult graph_submit(Stream *s, const Graph *g);

/* ---- graph memory (graph_memory.c): allocations that memory nodes make and free in stream order ---- */
/* An allocation of size bytes at an address of its own (*base), made each time the op is reached; props is a
 * CUmemPoolProps (NULL: device memory), access its CUmemAccessDesc array. The caller drops op after adding it. */
CUresult graph_alloc_op(Context *ctx, size_t size, const void *props, const void *access, size_t naccess,
                        CUdeviceptr *base, StreamOp *op);
/* A free of graph allocation p (INVALID_VALUE when p is not the start of one). */
CUresult graph_free_op(CUdeviceptr p, StreamOp *op);
/* Is p the start of a graph allocation? */
int graph_mem_owns(CUdeviceptr p);
/* Does [p, p+n) lie inside one graph allocation (mapped or not: work on it is checked when it is queued)? */
int graph_mem_contains(uint64_t p, size_t n);
/* Before a graph launch: an allocation of g still live from an earlier launch is freed first (auto_free)
 * or the launch fails with INVALID_VALUE, as on a real driver. */
CUresult graph_mem_prelaunch(Stream *s, const Graph *g, int auto_free);

/* ---- conditional nodes (graph_conditional.c) ---- */
/* cudaGraphSetConditional from device code: -1 when handle is not a live condition. */
int graph_condition_set(uint64_t handle, unsigned value);
/* Before a graph launch: queues the default assignment of every condition of g made with ASSIGN_DEFAULT. */
CUresult graph_conditions_prelaunch(Stream *s, const Graph *g);

/* ---- fault injection, counts, control (faults.c) ---- */
const char *entry_name(int id);
int entry_lookup(const char *name);
void faults_from_env(void);
void set_last_report(const char *text);

#endif
