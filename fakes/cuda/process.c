/* Process-wide state every file may read: whether cuInit succeeded, and the log. The bottom of the fake's
 * dependencies: it calls nothing of the others, so memory.c and faults.c log, and the handle registry
 * checks initialization, without depending on init.c, which sets them up. */
#include <stdarg.h>
#include <stdio.h>

#include "fake.h"

static int g_initialized; /* set once, by cuInit's one-time initialization */

int fake_initialized(void) { return __atomic_load_n(&g_initialized, __ATOMIC_ACQUIRE); }

void fake_set_initialized(int ok) { __atomic_store_n(&g_initialized, ok, __ATOMIC_RELEASE); }

void fake_log(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ironaccel fake libcuda: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
