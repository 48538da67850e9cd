/* CUDA checkpointing (cuCheckpointProcess*): one process locks, checkpoints, restores and unlocks another.
 *
 * Every process whose cuInit succeeded runs an agent thread listening on an abstract Unix socket named by its
 * pid; the entry points, in whatever process calls them (which need not have called cuInit), send it one
 * request and read its answer. The agent keeps the driver's state machine (RUNNING -LOCK-> LOCKED
 * -CHECKPOINT-> CHECKPOINTED -RESTORE-> LOCKED -UNLOCK-> RUNNING; any other step is CUDA_ERROR_ILLEGAL_STATE):
 * a lock closes the API gate (process.c: every later call of the process blocks in ENTER until the unlock) and
 * waits for all queued work; a checkpoint copies every device allocation's bytes to host memory and unmaps
 * its pages (the device memory is released, as the driver releases its GPU references); a restore maps them
 * again at the same addresses and copies the bytes back. Memory shared with other processes (IPC) and managed
 * memory, which the host reads directly, stay mapped. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "fake.h"

enum { STATE_RUNNING = 0, STATE_LOCKED, STATE_CHECKPOINTED, STATE_FAILED };
enum { OP_STATE = 1, OP_THREAD, OP_LOCK, OP_CHECKPOINT, OP_RESTORE, OP_UNLOCK };
#define PAGE 4096ull

typedef struct Request {
    int op;
    int same_device; /* a restore's GPU pairs (if any) map this device onto itself */
} Request;
typedef struct Reply {
    CUresult rc;
    int value;
} Reply;

/* What a checkpoint took from one allocation. */
typedef struct Saved {
    uint64_t base, span;
    void *bytes;
} Saved;

static int g_state = STATE_RUNNING; /* the agent's thread alone changes it */
static int g_listener = -1;
static int g_agent_tid;
static Saved *g_saved;
static int g_nsaved;

static void socket_name(int pid, struct sockaddr_un *a, socklen_t *len) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "ironaccel-fake-cuda-checkpoint/%d", pid);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n); /* abstract: a leading NUL */
}

/* Device allocations a checkpoint takes: device memory of this process alone, not read by the host. */
static int checkpointed_kind(const AllocInfo *a) {
    return a->kind == A_DEVICE && !(a->flags & (MEM_MANAGED | MEM_SHARED_MASK));
}

static CUresult checkpoint_memory(void) {
    int n;
    Range *live = mem_snapshot(&n);
    g_saved = calloc(n ? n : 1, sizeof *g_saved), g_nsaved = 0;
    int short_of_memory = !g_saved;
    for (int i = 0; !short_of_memory && i < n; i++) {
        AllocInfo a;
        if (!mem_find(live[i].lo, &a) || a.base != live[i].lo || !checkpointed_kind(&a)) continue;
        Saved *s = &g_saved[g_nsaved];
        s->base = a.base, s->span = (a.size + PAGE - 1) & ~(PAGE - 1);
        if (!(s->bytes = malloc(s->span))) short_of_memory = 1;
        else memcpy(s->bytes, (void *)(uintptr_t)a.base, s->span), g_nsaved++;
    }
    free(live);
    if (short_of_memory) { /* nothing released yet: the process stays LOCKED with its memory */
        for (int i = 0; i < g_nsaved; i++) free(g_saved[i].bytes);
        free(g_saved);
        g_saved = NULL, g_nsaved = 0;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < g_nsaved; i++) /* released: the pages are gone until the restore */
        mmap((void *)(uintptr_t)g_saved[i].base, g_saved[i].span, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return CUDA_SUCCESS;
}

static CUresult restore_memory(void) {
    for (int i = 0; i < g_nsaved; i++) {
        Saved *s = &g_saved[i];
        if (mprotect((void *)(uintptr_t)s->base, s->span, PROT_READ | PROT_WRITE)) return CUDA_ERROR_OUT_OF_MEMORY;
        memcpy((void *)(uintptr_t)s->base, s->bytes, s->span);
    }
    for (int i = 0; i < g_nsaved; i++) free(g_saved[i].bytes);
    free(g_saved);
    g_saved = NULL, g_nsaved = 0;
    return CUDA_SUCCESS;
}

/* One request, in the agent's thread: the state machine. */
static Reply serve(const Request *rq) {
    static const int FROM[] = {[OP_LOCK] = STATE_RUNNING, [OP_CHECKPOINT] = STATE_LOCKED,
                               [OP_RESTORE] = STATE_CHECKPOINTED, [OP_UNLOCK] = STATE_LOCKED};
    if (rq->op == OP_STATE) return (Reply){CUDA_SUCCESS, g_state};
    if (rq->op == OP_THREAD) return (Reply){CUDA_SUCCESS, g_agent_tid};
    if (rq->op < OP_LOCK || rq->op > OP_UNLOCK) return (Reply){CUDA_ERROR_INVALID_VALUE, 0};
    if (g_state != FROM[rq->op]) return (Reply){CUDA_ERROR_ILLEGAL_STATE, 0};
    CUresult rc = CUDA_SUCCESS;
    switch (rq->op) {
    case OP_LOCK:
        api_gate_close();
        streams_sync_context(NULL); /* the work already queued finishes before the process counts as locked */
        g_state = STATE_LOCKED;
        break;
    case OP_CHECKPOINT:
        if ((rc = checkpoint_memory()) == CUDA_SUCCESS) g_state = STATE_CHECKPOINTED;
        break;
    case OP_RESTORE:
        if (!rq->same_device) return (Reply){CUDA_ERROR_INVALID_VALUE, 0}; /* one device: nowhere to migrate */
        rc = restore_memory();
        g_state = rc == CUDA_SUCCESS ? STATE_LOCKED : STATE_FAILED;
        break;
    case OP_UNLOCK:
        g_state = STATE_RUNNING;
        api_gate_open();
        break;
    }
    return (Reply){rc, 0};
}

static void *agent(void *arg) {
    int listener = (int)(intptr_t)arg;
    g_agent_tid = (int)syscall(SYS_gettid);
    for (;;) {
        int c = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return NULL;
        }
        Request rq;
        if (recv(c, &rq, sizeof rq, 0) == (ssize_t)sizeof rq) {
            Reply rp = serve(&rq);
            send(c, &rp, sizeof rp, MSG_NOSIGNAL);
        }
        close(c);
    }
}

/* A forked child has no agent (its driver is not initialized): it must not hold the parent's socket open, or
 * requests for the parent's pid would wait on it after the parent is gone. */
static void forked_child(void) {
    if (g_listener >= 0) close(g_listener);
    g_listener = -1;
}

void checkpoint_agent_start(void) {
    struct sockaddr_un a;
    socklen_t len;
    socket_name(getpid(), &a, &len);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0 || bind(s, (struct sockaddr *)&a, len) || listen(s, 8)) {
        if (s >= 0) close(s);
        fake_log("checkpointing unavailable: the agent's socket failed (%s)", strerror(errno));
        return;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the agent takes no signal meant for the program */
    pthread_t t;
    if (pthread_create(&t, NULL, agent, (void *)(intptr_t)s) == 0) {
        pthread_detach(t);
        g_listener = s;
        pthread_atfork(NULL, NULL, forked_child);
    } else {
        close(s);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Sends one request to the agent of pid. A process without one has not initialized CUDA: NOT_INITIALIZED, and
 * pid 0 or below is OPERATING_SYSTEM, as the real driver answers them (580.159.04 on an H100). */
static CUresult ask(int pid, Request rq, int *value) {
    if (pid <= 0) return CUDA_ERROR_OPERATING_SYSTEM;
    struct sockaddr_un a;
    socklen_t len;
    socket_name(pid, &a, &len);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) return CUDA_ERROR_OPERATING_SYSTEM;
    Reply rp = {CUDA_ERROR_NOT_INITIALIZED, 0};
    if (connect(s, (struct sockaddr *)&a, len) == 0 && send(s, &rq, sizeof rq, MSG_NOSIGNAL) == (ssize_t)sizeof rq &&
        recv(s, &rp, sizeof rp, 0) != (ssize_t)sizeof rp)
        rp.rc = CUDA_ERROR_OPERATING_SYSTEM;
    close(s);
    if (rp.rc == CUDA_SUCCESS && value) *value = rp.value;
    return rp.rc;
}

static int zeroed(const void *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char *)p)[i]) return 0;
    return 1;
}

API CUresult cuCheckpointProcessGetState(int pid, int *state) {
    ENTER(cuCheckpointProcessGetState);
    if (!state) return CUDA_ERROR_INVALID_VALUE;
    return ask(pid, (Request){OP_STATE, 0}, state);
}

API CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid) {
    ENTER(cuCheckpointProcessGetRestoreThreadId);
    if (!tid) return CUDA_ERROR_INVALID_VALUE;
    return ask(pid, (Request){OP_THREAD, 0}, tid);
}

/* CUcheckpointLockArgs: timeoutMs, then reserved words that must be zero. */
typedef struct LockArgs {
    unsigned timeoutMs, reserved0;
    uint64_t reserved1[7];
} LockArgs;

API CUresult cuCheckpointProcessLock(int pid, void *args) {
    ENTER(cuCheckpointProcessLock);
    const LockArgs *a = args;
    if (a && (a->reserved0 || !zeroed(a->reserved1, sizeof a->reserved1))) return CUDA_ERROR_INVALID_VALUE;
    return ask(pid, (Request){OP_LOCK, 0}, NULL); /* queued work is waited for whatever timeoutMs says */
}

API CUresult cuCheckpointProcessCheckpoint(int pid, void *args) {
    ENTER(cuCheckpointProcessCheckpoint);
    const void *const *custom_storage = args; /* CUcheckpointCheckpointArgs: customStorageInfo_out first */
    if (args && (*custom_storage || !zeroed((const char *)args + sizeof(void *), 64 - sizeof(void *))))
        return *custom_storage ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    return ask(pid, (Request){OP_CHECKPOINT, 0}, NULL);
}

/* CUcheckpointRestoreArgs and its GPU pairs (old UUID, new UUID). */
typedef struct RestoreArgs {
    const unsigned char (*pairs)[2][16];
    unsigned npairs, padding0;
    void *custom_storage;
    char reserved[40];
} RestoreArgs;

API CUresult cuCheckpointProcessRestore(int pid, void *args) {
    ENTER(cuCheckpointProcessRestore);
    const RestoreArgs *a = args;
    int same = 1;
    if (a) {
        if (a->custom_storage) return CUDA_ERROR_NOT_SUPPORTED;
        if (!zeroed(a->reserved, sizeof a->reserved) || (a->npairs && !a->pairs)) return CUDA_ERROR_INVALID_VALUE;
        for (unsigned i = 0; i < a->npairs; i++) same &= !memcmp(a->pairs[i][0], a->pairs[i][1], 16);
    }
    return ask(pid, (Request){OP_RESTORE, same}, NULL);
}

API CUresult cuCheckpointProcessUnlock(int pid, void *args) {
    ENTER(cuCheckpointProcessUnlock);
    if (args && !zeroed(args, 64)) return CUDA_ERROR_INVALID_VALUE;
    return ask(pid, (Request){OP_UNLOCK, 0}, NULL);
}
