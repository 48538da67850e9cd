/* export_trace: an LD_PRELOAD library that logs what a program asks of a CUDA driver's private export tables:
 * every cuGetExportTable UUID (with its result) and every call made through a returned table (slot, the first
 * six integer arguments, the result), in the format the fake writes under IRONACCEL_FAKE_LOG, so a trace of
 * the real driver and one of the fake compare line by line (tests/fakes/test_runtime.py replays them).
 *
 *   cc -std=gnu11 -O2 -fPIC -shared -o export_trace.so export_trace.c -ldl -lpthread      (x86-64 only)
 *   IRONACCEL_EXPORT_TRACE=trace.log LD_PRELOAD=$PWD/export_trace.so python3 -c 'import cupy; ...'
 *
 * How it sees the calls: the CUDA runtime finds the driver with dlopen + dlsym (cuGetProcAddress_v2), then
 * asks that for "cuGetProcAddress" and resolves everything else, cuGetExportTable included, through the
 * function it got back; NVRTC and others dlsym cuGetExportTable itself. So this library interposes dlsym,
 * and the cuGetProcAddress functions it hands out give back traced cuGetProcAddress functions and a traced
 * cuGetExportTable; programs linked to libcuda directly call this library's own cuGetExportTable. (On the
 * fake that last route alone caught the runtime's lookups: its own table of entry points binds to this
 * library's exported cuGetExportTable. A real driver binds its own, so before the cuGetProcAddress route was
 * traced the H200 traces of the runtime were empty.)
 *
 * A returned table is patched in place (its address must not change: the integrity check hashes it), each
 * function slot replaced by a trampoline that calls the original and logs the result. The trampolines are
 * assembly and forward the call unchanged: all six integer argument registers, rax (al: a variadic call's
 * vector-register count), xmm0-7, and the caller's stack arguments (STACK_WORDS eight-byte words are copied,
 * so a slot taking up to six integer + eight vector + STACK_WORDS stack arguments gets them all), and return
 * rax, rdx, xmm0 and xmm1 as the slot left them. (The first tracer's were C functions of six integer
 * arguments: NVRTC 13's compute cache calls slot 1 of {DA9151D3-...} with NINE, three on the stack, which
 * the slot then read from the tracer's frame: CuPy died of SIGSEGV at its first nvrtcCompileProgram on the
 * H200, tests/fakes/test_runtime.py::test_the_tracer_forwards_every_argument_of_a_slot_it_wraps.)
 *
 * Which slots: slot 0 is left alone when it holds the table's size (a table the header does not know is
 * wrapped up to that size; one with no size is not wrapped, which a "note" line says); a slot is wrapped only
 * if it points at executable code of the driver (so a data slot is never replaced); INTEGRITY_CHECK's slots
 * are not wrapped (the check hashes its own function's address), only its lookup is logged. The table's
 * pages are made writable for the patch and given back their protection after it (an executable page keeps
 * its execute right). IRONACCEL_EXPORT_TRACE_WRAP=known wraps only tables export_tables.h names, =none no
 * table (lookups only): fallbacks should a slot mind being called from elsewhere (its return address is the
 * trampoline's). Logged are six integer arguments; a void slot's "result" is whatever rax held. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../export_tables.h"

#if !defined(__x86_64__)
#error "export_trace's trampolines are x86-64 assembly"
#endif

#define MAX_TABLES 16
#define MAX_SLOTS 128      /* TOOLS_CONTEXT has 95 */
#define SIZE_SLOT_MAX 4096 /* a slot 0 below this is the table's size in bytes, not a function */
#define STACK_WORDS 32     /* stack arguments a trampoline forwards (256 bytes) */
#define STR(x) #x
#define XSTR(x) STR(x)

typedef uintptr_t (*Slot)(void);
typedef int (*GetExportTable)(const void **, const void *);
typedef int (*GetProcAddress)(const char *, void **, int, uint64_t);
typedef int (*GetProcAddressV2)(const char *, void **, int, uint64_t, int *);
typedef void *(*DlsymFn)(void *, const char *);

static const struct {
    const char *name;
    unsigned char uuid[16];
    int nslots;
} KNOWN[] = {
#define T(name, nslots, sized, ...) {#name, {__VA_ARGS__}, nslots},
    EXPORT_TABLES(T)
#undef T
};

static struct {
    const void **table;
    char name[48];
} g_wrapped[MAX_TABLES];
/* What each trampoline calls: slot s of the t-th table wrapped at [t * MAX_SLOTS + s] (read by the assembly). */
__attribute__((visibility("hidden"))) Slot export_trace_original[MAX_TABLES * MAX_SLOTS];
static int g_nwrapped;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *g_log;
static GetExportTable g_real_get_export_table;
static GetProcAddress g_real_get_proc_address;
static GetProcAddressV2 g_real_get_proc_address_v2;

static void open_log(void) {
    const char *path = getenv("IRONACCEL_EXPORT_TRACE");
    g_log = fopen(path && *path ? path : "export_trace.log", "a");
    if (g_log) setvbuf(g_log, NULL, _IOLBF, 0);
}

static FILE *log_file(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, open_log);
    return g_log;
}

static DlsymFn real_dlsym(void) {
    static DlsymFn fn;
    if (!fn) fn = (DlsymFn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!fn) fn = (DlsymFn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return fn;
}

/* After the call: the line. args are the six integer argument registers as the caller passed them. */
__attribute__((visibility("hidden"), used)) void export_trace_log(long index, const uintptr_t *args, uintptr_t r) {
    int t = (int)(index / MAX_SLOTS), s = (int)(index % MAX_SLOTS);
    FILE *log = log_file();
    if (log)
        fprintf(log, "call %s[%d](%#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR ", %#" PRIxPTR
                ") -> %d\n", g_wrapped[t].name, s, args[0], args[1], args[2], args[3], args[4], args[5], (int)r);
}

/* The trampolines: export_trace_stubs + 16 * index is the one for index (t * MAX_SLOTS + s); each puts its index
 * in r11 (scratch at a call, as a PLT stub leaves it) and jumps to the common part, which saves the argument
 * registers, copies STACK_WORDS words of the caller's stack arguments below itself, restores the registers
 * (rax too), calls the original, keeps its return registers, logs, and returns them. xmm0-7 and r10 are never
 * touched before the call. Frame (from rsp): [0, 256) the stack arguments' copy; 256 rdi, 264 rsi, 272 rdx,
 * 280 rcx, 288 r8, 296 r9, 304 rax, 312 index; 320 rax, 328 rdx, 336 xmm0, 352 xmm1 after the call; 368 = the
 * size, a multiple of 16, so the call is made 16-byte aligned (rsp at entry is 8 mod 16, then rbp is pushed). */
__asm__(
    "    .text\n"
    "    .p2align 4\n"
    "    .type export_trace_common, @function\n"
    "export_trace_common:\n"
    "    .cfi_startproc\n"
    "    pushq %rbp\n"
    "    .cfi_def_cfa_offset 16\n"
    "    .cfi_offset %rbp, -16\n"
    "    movq %rsp, %rbp\n"
    "    .cfi_def_cfa_register %rbp\n"
    "    subq $368, %rsp\n"
    "    movq %rdi, 256(%rsp)\n"
    "    movq %rsi, 264(%rsp)\n"
    "    movq %rdx, 272(%rsp)\n"
    "    movq %rcx, 280(%rsp)\n"
    "    movq %r8, 288(%rsp)\n"
    "    movq %r9, 296(%rsp)\n"
    "    movq %rax, 304(%rsp)\n"
    "    movq %r11, 312(%rsp)\n"
    "    leaq 16(%rbp), %rsi\n"
    "    movq %rsp, %rdi\n"
    "    movl $" XSTR(STACK_WORDS) ", %ecx\n"
    "    cld\n"
    "    rep movsq\n"
    "    leaq export_trace_original(%rip), %rax\n"
    "    movq (%rax,%r11,8), %r11\n"
    "    movq 256(%rsp), %rdi\n"
    "    movq 264(%rsp), %rsi\n"
    "    movq 280(%rsp), %rcx\n"
    "    movq 304(%rsp), %rax\n"
    "    call *%r11\n"
    "    movq %rax, 320(%rsp)\n"
    "    movq %rdx, 328(%rsp)\n"
    "    movdqu %xmm0, 336(%rsp)\n"
    "    movdqu %xmm1, 352(%rsp)\n"
    "    movq 312(%rsp), %rdi\n"
    "    leaq 256(%rsp), %rsi\n"
    "    movq %rax, %rdx\n"
    "    call export_trace_log\n"
    "    movq 320(%rsp), %rax\n"
    "    movq 328(%rsp), %rdx\n"
    "    movdqu 336(%rsp), %xmm0\n"
    "    movdqu 352(%rsp), %xmm1\n"
    "    leave\n"
    "    .cfi_def_cfa %rsp, 8\n"
    "    ret\n"
    "    .cfi_endproc\n"
    "    .size export_trace_common, .-export_trace_common\n"
    "    .p2align 4\n"
    "    .type export_trace_stubs, @function\n"
    "export_trace_stubs:\n"
    "    .set export_trace_i, 0\n"
    "    .rept " XSTR(MAX_TABLES * MAX_SLOTS) "\n"
    "    .p2align 4\n"
    "    movl $export_trace_i, %r11d\n"
    "    jmp export_trace_common\n"
    "    .set export_trace_i, export_trace_i + 1\n"
    "    .endr\n"
    "    .size export_trace_stubs, .-export_trace_stubs\n");
extern const char export_trace_stubs[];

static const void *trampoline(int index) { return export_trace_stubs + 16 * index; }

static void uuid_text(const unsigned char *u, char out[39]) {
    snprintf(out, 39, "{%02X%02X%02X%02X-%02X%02X-%02X%02X-%02X%02X-%02X%02X%02X%02X%02X%02X}", u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

/* The process's mappings, from /proc/self/maps: start, end, protection. */
typedef struct {
    uintptr_t start, end;
    int prot;
} Mapping;

static int read_maps(Mapping *out, int max) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return 0;
    int n = 0;
    char line[512], perms[8];
    unsigned long start, end;
    while (n < max && fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) != 3) continue;
        out[n].start = start;
        out[n].end = end;
        out[n].prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
                      (perms[2] == 'x' ? PROT_EXEC : 0);
        n++;
    }
    fclose(f);
    return n;
}

#define MAX_MAPPINGS 8192

/* The protection of every byte of [lo, hi) if contiguous mappings of one protection cover it all, else -1 (a
 * table may cross from one mapping into the next, as a sanitized build lays the fake's tables out). */
static int protection(const Mapping *maps, int n, uintptr_t lo, uintptr_t hi) {
    int prot = -1;
    for (uintptr_t at = lo; at < hi;) {
        int i = 0;
        while (i < n && !(maps[i].start <= at && at < maps[i].end)) i++;
        if (i == n || (prot >= 0 && maps[i].prot != prot)) return -1;
        prot = maps[i].prot;
        at = maps[i].end;
    }
    return prot;
}

/* Is p executable code of the object that holds the driver's cuGetExportTable? */
static int driver_code(const void *p, const Mapping *maps, int n) {
    Dl_info a, b;
    return p && dladdr(p, &a) && dladdr((void *)(uintptr_t)g_real_get_export_table, &b) && a.dli_fbase == b.dli_fbase &&
           protection(maps, n, (uintptr_t)p, (uintptr_t)p + 1) > 0 &&
           (protection(maps, n, (uintptr_t)p, (uintptr_t)p + 1) & PROT_EXEC);
}

/* Which tables are wrapped: IRONACCEL_EXPORT_TRACE_WRAP = all (the default), known (export_tables.h's), none. */
static int wrap_mode(int known) {
    const char *mode = getenv("IRONACCEL_EXPORT_TRACE_WRAP");
    if (!mode || !*mode || !strcmp(mode, "all")) return 1;
    return !strcmp(mode, "known") ? known : 0;
}

static void wrap(const void **table, const unsigned char *uuid) {
    int known = -1;
    for (int k = 0; k < (int)(sizeof KNOWN / sizeof KNOWN[0]); k++)
        if (!memcmp(uuid, KNOWN[k].uuid, 16)) known = k;
    char text[39];
    uuid_text(uuid, text);
    static Mapping maps[MAX_MAPPINGS]; /* under g_mu */
    pthread_mutex_lock(&g_mu);
    for (int t = 0; t < g_nwrapped; t++)
        if (g_wrapped[t].table == table) goto done;
    if (known >= 0 && !strcmp(KNOWN[known].name, "INTEGRITY_CHECK")) goto done;
    FILE *log = log_file();
    int n = read_maps(maps, MAX_MAPPINGS);
    long page = sysconf(_SC_PAGESIZE);
    /* Slot 0 must be readable before it is read (the table is the driver's word). */
    int prot0 = protection(maps, n, (uintptr_t)table, (uintptr_t)(table + 1));
    if (prot0 < 0 || !(prot0 & PROT_READ)) {
        if (log) fprintf(log, "note %s: its slots are not traced (the table is not readable memory)\n", text);
        goto done;
    }
    /* How many slots: the size the table states in slot 0, else a known table's count; a table of unknown
     * length is not wrapped (past its end could be another table's slots). */
    uintptr_t first = (uintptr_t)table[0];
    int sized = first && first < SIZE_SLOT_MAX && first % sizeof(void *) == 0;
    int limit = sized ? (int)(first / sizeof(void *)) : known >= 0 ? KNOWN[known].nslots : 0;
    if (log && sized) fprintf(log, "note %s: %d slots (slot 0: %lu bytes)\n", text, limit, (unsigned long)first);
    const char *why = NULL;
    if (limit > MAX_SLOTS) limit = MAX_SLOTS;
    uintptr_t lo = (uintptr_t)table & ~(uintptr_t)(page - 1), hi = (uintptr_t)(table + limit);
    int prot = limit ? protection(maps, n, lo, hi) : -1;
    if (limit == 0) why = "length unknown";
    else if (!wrap_mode(known >= 0)) why = "IRONACCEL_EXPORT_TRACE_WRAP";
    else if (g_nwrapped == MAX_TABLES) why = "too many tables";
    else if (prot < 0 || !(prot & PROT_READ)) why = "the table is not in readable mappings of one protection";
    else if (!(prot & PROT_WRITE) && mprotect((void *)lo, hi - lo, prot | PROT_WRITE) != 0) why = "cannot write the table";
    if (why) {
        if (log) fprintf(log, "note %s: its slots are not traced (%s)\n", text, why);
        goto done;
    }
    int t = g_nwrapped++;
    g_wrapped[t].table = table;
    snprintf(g_wrapped[t].name, sizeof g_wrapped[t].name, "%s", known >= 0 ? KNOWN[known].name : text);
    for (int s = 0; s < limit; s++) {
        const void *p = table[s];
        if (s == 0 && sized) continue;
        if (!driver_code(p, maps, n)) continue;
        __atomic_store_n(&export_trace_original[t * MAX_SLOTS + s], (Slot)(uintptr_t)p, __ATOMIC_RELEASE);
        __atomic_store_n(&table[s], trampoline(t * MAX_SLOTS + s), __ATOMIC_RELEASE);
    }
    if (!(prot & PROT_WRITE)) mprotect((void *)lo, hi - lo, prot); /* as it was: read-only (RELRO), exec kept */
done:
    pthread_mutex_unlock(&g_mu);
}

static int traced_get_export_table(const void **table, const void *uuid) {
    int rc = g_real_get_export_table(table, uuid);
    FILE *log = log_file();
    char text[39] = "{NULL}";
    const char *name = "<unknown>";
    if (uuid) {
        uuid_text(uuid, text);
        for (int k = 0; k < (int)(sizeof KNOWN / sizeof KNOWN[0]); k++)
            if (!memcmp(uuid, KNOWN[k].uuid, 16)) name = KNOWN[k].name;
    }
    if (log) fprintf(log, "export_table %s %s -> %d\n", text, name, rc);
    if (rc == 0 && table && *table && uuid) wrap((const void **)*table, uuid);
    return rc;
}

/* The driver's own function of that name: from libcuda.so.1 as loaded (which may be a library loaded after
 * this one, so not always RTLD_NEXT). */
static void *driver_symbol(const char *symbol) {
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    void *p = lib ? real_dlsym()(lib, symbol) : NULL;
    if (lib) dlclose(lib);
    return p;
}

__attribute__((visibility("default"))) int cuGetExportTable(const void **table, const void *uuid) {
    if (!g_real_get_export_table) g_real_get_export_table = (GetExportTable)driver_symbol("cuGetExportTable");
    return g_real_get_export_table ? traced_get_export_table(table, uuid) : 3; /* CUDA_ERROR_NOT_INITIALIZED */
}

static int traced_get_proc_address(const char *symbol, void **fn, int version, uint64_t flags);
static int traced_get_proc_address_v2(const char *symbol, void **fn, int version, uint64_t flags, int *status);

/* What a cuGetProcAddress gave: cuGetExportTable comes back traced, and so does cuGetProcAddress itself (the
 * runtime asks for it and resolves the rest through it), by which of the driver's two it is. */
static void trace_proc(const char *symbol, void **fn) {
    if (!fn || !*fn || !symbol) return;
    if (!strcmp(symbol, "cuGetExportTable")) {
        if (*fn == (void *)(uintptr_t)cuGetExportTable) return; /* this library's (a driver bound to it): traced */
        g_real_get_export_table = (GetExportTable)*fn;
        *fn = (void *)(uintptr_t)traced_get_export_table;
    } else if (!strcmp(symbol, "cuGetProcAddress")) {
        if (*fn == (void *)(uintptr_t)traced_get_proc_address || *fn == (void *)(uintptr_t)traced_get_proc_address_v2)
            return;
        /* the driver's, as dlsym found it (whatever name the driver was opened by) or as libcuda.so.1 has it */
        if (*fn == (void *)(uintptr_t)g_real_get_proc_address_v2 || *fn == driver_symbol("cuGetProcAddress_v2")) {
            g_real_get_proc_address_v2 = (GetProcAddressV2)*fn;
            *fn = (void *)(uintptr_t)traced_get_proc_address_v2;
        } else if (*fn == (void *)(uintptr_t)g_real_get_proc_address || *fn == driver_symbol("cuGetProcAddress")) {
            g_real_get_proc_address = (GetProcAddress)*fn;
            *fn = (void *)(uintptr_t)traced_get_proc_address;
        } /* else: a function this library cannot tell the kind of, left as it is */
    }
}

static int traced_get_proc_address(const char *symbol, void **fn, int version, uint64_t flags) {
    int rc = g_real_get_proc_address(symbol, fn, version, flags);
    if (rc == 0) trace_proc(symbol, fn);
    return rc;
}

static int traced_get_proc_address_v2(const char *symbol, void **fn, int version, uint64_t flags, int *status) {
    int rc = g_real_get_proc_address_v2(symbol, fn, version, flags, status);
    if (rc == 0) trace_proc(symbol, fn);
    return rc;
}

/* dlsym for the three names that lead to the tables: they come back traced. */
static __attribute__((noinline)) void *traced_dlsym(void *handle, const char *symbol) {
    void *p = real_dlsym()(handle, symbol);
    if (!p) return p;
    if (!strcmp(symbol, "cuGetExportTable")) {
        if (p == (void *)(uintptr_t)cuGetExportTable) p = driver_symbol(symbol); /* found this library's */
        if (!p) return NULL;
        g_real_get_export_table = (GetExportTable)p;
        return (void *)(uintptr_t)traced_get_export_table;
    }
    if (!strcmp(symbol, "cuGetProcAddress")) {
        g_real_get_proc_address = (GetProcAddress)p;
        return (void *)(uintptr_t)traced_get_proc_address;
    }
    g_real_get_proc_address_v2 = (GetProcAddressV2)p;
    return (void *)(uintptr_t)traced_get_proc_address_v2;
}

/* Whether dlsym's name is one of the three; compared here, not with strcmp: a sanitizer runtime preloaded in
 * front (the fake's ASan build) calls dlsym while it sets up its interceptors, strcmp's among them, so its strcmp
 * then jumps to a null pointer. */
static int leads_to_tables(const char *symbol) {
    static const char *const names[] = {"cuGetExportTable", "cuGetProcAddress", "cuGetProcAddress_v2"};
    for (size_t n = 0; n < sizeof names / sizeof *names; n++) {
        const char *a = names[n], *b = symbol;
        while (*a && *a == *b) a++, b++;
        if (*a == *b) return 1;
    }
    return 0;
}

/* dlsym, as the runtime resolves the driver's entry points. Every other name goes to the real dlsym as a tail
 * call, so that it sees its caller's return address, not this library's: RTLD_NEXT and RTLD_DEFAULT are
 * resolved from the caller's object, as without this library. */
__attribute__((visibility("default"))) void *dlsym(void *handle, const char *symbol) {
    if (leads_to_tables(symbol)) return traced_dlsym(handle, symbol);
    return real_dlsym()(handle, symbol);
}
