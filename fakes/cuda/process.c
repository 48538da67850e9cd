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

/* The API gate a checkpoint lock closes (checkpoint.c): every entry point's ENTER passes it, blocking while
 * it is closed. */
static int g_gate_closed;
static pthread_mutex_t g_gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gate_cv = PTHREAD_COND_INITIALIZER;

static void gate_set(int closed) {
    pthread_mutex_lock(&g_gate_mu);
    __atomic_store_n(&g_gate_closed, closed, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&g_gate_cv);
    pthread_mutex_unlock(&g_gate_mu);
}

void api_gate_close(void) { gate_set(1); }
void api_gate_open(void) { gate_set(0); }

void api_gate_pass(void) {
    if (!__atomic_load_n(&g_gate_closed, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&g_gate_mu);
    while (g_gate_closed) pthread_cond_wait(&g_gate_cv, &g_gate_mu);
    pthread_mutex_unlock(&g_gate_mu);
}

void fake_log(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ironaccel fake libcuda: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
