/* Process-wide state every file may read: whether cuInit succeeded, and the log. The bottom of the fake's
 * dependencies: it calls nothing of the others, so memory.c and faults.c log, and the handle registry
 * checks initialization, without depending on init.c, which sets them up. */
#include <stdarg.h>
#include <stdio.h>

#include "fake.h"

static int g_initialized; /* set once, by cuInit's one-time initialization */
static int g_forked;      /* this process was forked from one where cuInit had succeeded */

int fake_initialized(void) { return __atomic_load_n(&g_initialized, __ATOMIC_ACQUIRE); }

/* A driver initialized before a fork is not initialized in the child, where every call (cuInit too) returns
 * CUDA_ERROR_NOT_INITIALIZED, as with NVIDIA's driver (numba-cuda reads that as "CUDA initialized before
 * forking"). */
static void forked_child(void) {
    g_initialized = 0;
    g_forked = 1;
}

int fake_forked(void) { return g_forked; }

void fake_set_initialized(int ok) {
    __atomic_store_n(&g_initialized, ok, __ATOMIC_RELEASE);
    if (ok) pthread_atfork(NULL, NULL, forked_child);
}

void fake_log(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ironaccel fake libcuda: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
