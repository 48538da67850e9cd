/* PTX text (what NVRTC emits) -> PtxModule: declarations (module variables, shared memory, parameters),
 * functions and their bodies (each instruction through ptx_decode.c), call targets and stack needs resolved,
 * decoded once into fixed-size Insts whose operands are all register-file slots (immediates become
 * per-function constant slots). Names of any length are supported: tokens point into the PTX text while it
 * is parsed. The top of the loader: ptx_decode.c and ptx_lex.c below it (ptx_parse.h). */
#define _GNU_SOURCE
#include <ctype.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptx_parse.h"

/* ---- declarations ---- */

static uint32_t align_up(uint32_t v, uint32_t a) { return a ? (v + a - 1) / a * a : v; }

/* Limits on what PTX declares, checked where it is read, so that no size wraps and no load or launch asks
 * for more memory than the declaration could ever have on a device. */
#define ALIGN_MAX 65536u              /* the largest .align taken */
#define REGISTERS_MAX (1u << 20)      /* registers one function declares */
#define SLOTS_MAX (1u << 21)          /* its registers and distinct constants: a thread's register file */
#define DECL_BYTES_MAX (1ull << 40)   /* any one variable: more than any device has (then each space's own limit) */

/* A size or count read from the PTX, which must not exceed max: fails the load naming it when it does. */
static uint64_t bounded(Parser *P, int line, uint64_t v, uint64_t max, const char *what) {
    if (v > max) fail(P, line, "%s of %llu is more than the %llu allowed", what, (unsigned long long)v,
                      (unsigned long long)max);
    return v;
}

/* a * b, which must not exceed max (no wrap). */
static uint64_t bounded_product(Parser *P, int line, uint64_t a, uint64_t b, uint64_t max, const char *what) {
    if (b && a > max / b) fail(P, line, "%s is more than the %llu allowed", what, (unsigned long long)max);
    return a * b;
}

/* Places size bytes aligned to align after *end in a space of at most max bytes (a frame, the kernel's
 * parameters, static shared memory); returns the offset. */
static uint32_t place(Parser *P, int line, uint32_t *end, uint64_t size, uint32_t align, uint32_t max,
                      const char *space) {
    uint64_t off = align_up(*end, align); /* *end <= max < 2^31 and align <= ALIGN_MAX: no wrap */
    if (off > max || size > max - off)
        fail(P, line, "%s needs more than the %u bytes allowed", space, max);
    *end = (uint32_t)(off + size);
    return (uint32_t)off;
}

/* [.align N] .type name[<N>|[N]] -> name, element size, count (0 for name[]), alignment. */
typedef struct Decl {
    Tok name;
    int type;
    uint32_t elem, align;
    uint64_t count;
    int range; /* name<N> */
    int unsized;
} Decl;

/* Bytes a declaration takes (an unsized array: one element). */
static uint64_t decl_bytes(const Decl *d) { return (uint64_t)d->elem * (d->count ? d->count : 1); }

static void parse_decl(Parser *P, Decl *d) {
    memset(d, 0, sizeof *d);
    d->count = 1;
    for (;;) {
        Tok *t = peek(P);
        if (tok_is(t, ".align")) {
            next(P);
            uint64_t a = bounded(P, t->line, parse_number(P, next(P), 0), ALIGN_MAX, ".align");
            if (!a || (a & (a - 1))) fail(P, t->line, ".align %llu is not a power of two", (unsigned long long)a);
            d->align = (uint32_t)a;
        } else if (t->len > 1 && t->s[0] == '.') {
            Tok word = {t->s + 1, t->len - 1, t->line};
            int ty = type_of(&word);
            if (ty == T_NONE) {
                if (word_in("ptr global const shared local v2 v4", &word)) {
                    if (tok_is(&word, "v2")) d->count = bounded_product(P, t->line, d->count, 2, DECL_BYTES_MAX, "a vector");
                    if (tok_is(&word, "v4")) d->count = bounded_product(P, t->line, d->count, 4, DECL_BYTES_MAX, "a vector");
                    next(P);
                    continue;
                }
                fail(P, t->line, "unsupported declaration modifier %.*s", t->len, t->s);
            }
            d->type = ty;
            d->elem = (uint32_t)type_bytes(ty);
            next(P);
        } else {
            break;
        }
    }
    d->name = *next(P);
    if (!isalpha((unsigned char)d->name.s[0]) && !strchr("_$%", d->name.s[0])) /* ptxas: a syntax error */
        fail(P, d->name.line, "%.*s is not a name to declare", d->name.len, d->name.s);
    if (tok_is(peek(P), "<")) {
        next(P);
        d->count = bounded(P, d->name.line, parse_number(P, next(P), 0), REGISTERS_MAX, "a register range");
        d->range = 1;
        expect(P, ">");
    }
    while (tok_is(peek(P), "[")) {
        next(P);
        if (tok_is(peek(P), "]")) {
            d->unsized = 1;
            d->count = 0;
        } else {
            d->count = bounded_product(P, d->name.line, d->count, parse_number(P, next(P), 0), DECL_BYTES_MAX,
                                       "an array's element count");
        }
        expect(P, "]");
    }
    bounded_product(P, d->name.line, d->elem, d->count, DECL_BYTES_MAX, "a variable's size");
    if (!d->align) d->align = d->elem ? d->elem : 1;
}

static void skip_initializer(Parser *P, uint8_t *dst, uint32_t elem, uint64_t max) {
    /* = value | = { v, v, ... } (nested braces flattened) */
    next(P);
    int depth = 0;
    uint64_t i = 0;
    do {
        Tok *t = next(P);
        if (tok_is(t, "{")) depth++;
        else if (tok_is(t, "}")) depth--;
        else if (tok_is(t, ",")) continue;
        else if (!t->len) fail(P, 0, "unterminated initializer");
        else {
            int neg = 0;
            if (tok_is(t, "-")) { neg = 1; t = next(P); }
            uint64_t v;
            if (is_number_start(t)) {
                v = parse_number(P, t, neg);
            } else { /* the address of a variable or a function declared before (a table of pointers): name,
                      * generic(name) (the same address: the spaces share one), either + a byte offset */
                int generic = !neg && tok_is(t, "generic") && tok_is(peek(P), "(");
                if (generic) next(P), t = next(P);
                Name *n = neg ? NULL : find_name(P, t);
                int fn = neg || n ? -1 : function_index(P, t, 0);
                if (n && n->kind == N_GLOBAL) v = n->value;
                else if (fn >= 0) v = FUNCTION_ADDRESS_BASE + (uint64_t)fn * FUNCTION_ADDRESS_STEP;
                else fail(P, t->line, "initializer %.*s is not a number, nor a global variable or function declared "
                          "before", t->len, t->s);
                if (generic) expect(P, ")");
                if (tok_is(peek(P), "+")) {
                    next(P);
                    v += parse_number(P, next(P), 0);
                }
            }
            if (dst && i < max / elem) memcpy(dst + i * elem, &v, elem);
            i++;
        }
    } while (depth > 0);
}

/* Returns the bytes a .global or .const variable takes (0 for .shared: laid out before). */
static uint64_t module_variable(Parser *P, int space, int line) {
    int at = P->pos - 1; /* the .shared/.global/.const token */
    Decl d;
    parse_decl(P, &d);
    PtxModule *m = P->m;
    if (space == SPACE_SHARED) {
        int lo = 0, hi = P->nshared - 1; /* P->shared is in text order: find this declaration's entry */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (P->shared[mid].tok < at) lo = mid + 1;
            else hi = mid;
        }
        if (P->nshared && P->shared[lo].tok == at) add_name(P, d.name, N_SHARED, P->shared[lo].offset, 0);
    } else {
        uint64_t size = decl_bytes(&d);
        uint64_t addr;
        if (mem_alloc(P->ctx, size, A_MODULE_GLOBAL, &addr)) {
            P->code = CUDA_ERROR_OUT_OF_MEMORY;
            fail(P, line, "out of memory for global %.*s (%llu bytes)", d.name.len, d.name.s, (unsigned long long)size);
        }
        /* fresh device memory is zero (addresses are never reused): nothing to clear, however large */
        if (tok_is(peek(P), "=") && d.elem) skip_initializer(P, (uint8_t *)(uintptr_t)addr, d.elem, size);
        int i = m->nglobals++;
        m->global_names = realloc(m->global_names, m->nglobals * sizeof(char *));
        m->global_addrs = realloc(m->global_addrs, m->nglobals * sizeof(uint64_t));
        m->global_sizes = realloc(m->global_sizes, m->nglobals * sizeof(uint64_t));
        m->global_names[i] = strndup(d.name.s, (size_t)d.name.len);
        m->global_addrs[i] = addr;
        m->global_sizes[i] = size;
        add_name(P, d.name, N_GLOBAL, addr, 0);
        expect(P, ";");
        return size;
    }
    if (tok_is(peek(P), "=")) skip_initializer(P, NULL, 0, 0);
    expect(P, ";");
    return 0;
}

/* ---- static shared memory, per kernel ----
 * A kernel's static shared memory is the .shared variables it and the functions it reaches name (as ptxas
 * allocates it), at most SHARED_PER_BLOCK_OPTIN (ptxas, JIT-compiling for sm_90, allows a block's opt-in
 * maximum: 0x38c00 bytes load and run on the H100, one byte more is "too much shared data"); a module of many kernels (CuPy's CUB module) may declare far more
 * in all. Each variable gets one offset (a function called by several kernels sees it at one address): after
 * the variables placed before it that share a kernel with it. Dynamic shared memory (extern .shared x[])
 * starts, 16-aligned, after the static variables of every kernel that reaches it. Done on the tokens, before
 * decoding: a name in a body is a use, a function named in it (a call, an address taken) is reached. */

typedef struct LayoutName {
    Tok id;
    int value; /* >= 0: a LayoutFn; < 0: ~ the index of a module-level SharedVar */
} LayoutName;

static uint32_t tok_hash(const Tok *t) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (int i = 0; i < t->len; i++) h = (h ^ (uint8_t)t->s[i]) * 16777619u;
    return h;
}

/* The slot of id in an open-addressed table of mask + 1 slots (id.len 0: empty). */
static LayoutName *name_slot(LayoutName *table, uint32_t mask, const Tok *id) {
    uint32_t i = tok_hash(id) & mask;
    while (table[i].id.len && !tok_eq(&table[i].id, id)) i = (i + 1) & mask;
    return &table[i];
}

/* The index of the token closing the bracket opened at i (or the last token of a cut text). */
static int matching(const Parser *P, int i, const char *open, const char *close) {
    int depth = 0;
    for (; i < P->ntoks; i++) {
        depth += tok_is(&P->toks[i], open) - tok_is(&P->toks[i], close);
        if (!depth) return i;
    }
    return P->ntoks - 1;
}

/* The functions defined in the text (.entry/.func with a body), in text order. */
static void layout_functions(Parser *P) {
    for (int i = 0; i < P->ntoks; i++) {
        Tok *t = &P->toks[i];
        if (tok_is(t, "{")) { i = matching(P, i, "{", "}"); continue; } /* a .section's block */
        if (!tok_is(t, ".entry") && !tok_is(t, ".func")) continue;
        int j = i + 1;
        if (j < P->ntoks && tok_is(&P->toks[j], "(")) j = matching(P, j, "(", ")") + 1; /* the return value */
        if (j >= P->ntoks) return;
        LayoutFn fn = {.name = P->toks[j], .is_entry = tok_is(t, ".entry")};
        while (++j < P->ntoks && !tok_is(&P->toks[j], "{") && !tok_is(&P->toks[j], ";")) {
            if (tok_is(&P->toks[j], "(")) j = matching(P, j, "(", ")");
            else if (tok_is(&P->toks[j], ".pragma")) while (j + 1 < P->ntoks && !tok_is(&P->toks[++j], ";")) {}
        }
        if (j >= P->ntoks || tok_is(&P->toks[j], ";")) { i = j; continue; } /* a declaration */
        fn.begin = j;
        fn.end = i = matching(P, j, "{", "}");
        GROW(P->layout, P->nlayout, P->caplayout);
        P->layout[P->nlayout++] = fn;
    }
}

/* Every .shared declaration (not a parameter's .ptr.shared), with the function declaring it. */
static void layout_variables(Parser *P) {
    int owner = 0;
    for (int i = 0; i < P->ntoks; i++) {
        if (!tok_is(&P->toks[i], ".shared") || (i && tok_is(&P->toks[i - 1], ".ptr"))) continue;
        while (owner < P->nlayout && P->layout[owner].end < i) owner++;
        int in = owner < P->nlayout && P->layout[owner].begin < i;
        P->pos = i + 1;
        Decl d;
        parse_decl(P, &d);
        GROW(P->shared, P->nshared, P->capshared);
        P->shared[P->nshared] = (SharedVar){d.name, i, in ? owner : -1, decl_bytes(&d), d.align, 0, d.unsized,
                                            NULL, 0, 0};
        if (in) {
            LayoutFn *f = &P->layout[owner];
            GROW(f->vars, f->nvars, f->capvars);
            f->vars[f->nvars++] = P->nshared;
        }
        P->nshared++;
    }
}

/* Each body's uses: the module-level variables and the functions it names (each once). */
static void layout_uses(Parser *P) {
    uint32_t size = 64;
    while (size < 2u * (uint32_t)(P->nlayout + P->nshared)) size *= 2;
    LayoutName *table = calloc(size, sizeof *table);
    for (int f = 0; f < P->nlayout; f++) {
        LayoutName *slot = name_slot(table, size - 1, &P->layout[f].name);
        if (!slot->id.len) *slot = (LayoutName){P->layout[f].name, f}; /* a .weak one defined twice: the first */
    }
    for (int v = 0; v < P->nshared; v++) {
        if (P->shared[v].owner >= 0) continue;
        LayoutName *slot = name_slot(table, size - 1, &P->shared[v].name);
        if (!slot->id.len) *slot = (LayoutName){P->shared[v].name, ~v};
    }
    int *seen = calloc((size_t)(P->nlayout + P->nshared), sizeof(int)); /* functions, then variables */
    for (int f = 0; f < P->nlayout; f++) {
        LayoutFn *fn = &P->layout[f];
        for (int i = fn->begin + 1; i < fn->end; i++) {
            const Tok *t = &P->toks[i];
            if (!isalpha((unsigned char)t->s[0]) && !strchr("_$%", t->s[0])) continue; /* not a name */
            LayoutName *n = name_slot(table, size - 1, t);
            if (!n->id.len) continue;
            int key = n->value >= 0 ? n->value : P->nlayout + ~n->value;
            if (seen[key] == f + 1) continue;
            seen[key] = f + 1;
            if (n->value >= 0) {
                GROW(fn->calls, fn->ncalls, fn->capcalls);
                fn->calls[fn->ncalls++] = n->value;
            } else {
                GROW(fn->vars, fn->nvars, fn->capvars);
                fn->vars[fn->nvars++] = ~n->value;
            }
        }
    }
    free(seen);
    free(table);
}

/* Records, on each variable, the kernels whose call graph reaches a function naming it. */
static void layout_reach(Parser *P) {
    int *seen = calloc((size_t)P->nlayout, sizeof(int)), *stack = malloc((size_t)P->nlayout * sizeof(int));
    int *last = calloc((size_t)P->nshared, sizeof(int));
    for (int k = 0; k < P->nlayout; k++) {
        if (!P->layout[k].is_entry) continue;
        int top = 0;
        stack[top++] = k;
        seen[k] = k + 1;
        while (top) {
            LayoutFn *f = &P->layout[stack[--top]];
            for (int i = 0; i < f->nvars; i++) {
                SharedVar *v = &P->shared[f->vars[i]];
                if (last[f->vars[i]] == k + 1) continue;
                last[f->vars[i]] = k + 1;
                GROW(v->kernels, v->nkernels, v->capkernels);
                v->kernels[v->nkernels++] = k;
            }
            for (int i = 0; i < f->ncalls; i++)
                if (seen[f->calls[i]] != k + 1) seen[f->calls[i]] = k + 1, stack[top++] = f->calls[i];
        }
    }
    free(last), free(stack), free(seen);
}

/* Lays out every .shared variable (module level and inside functions) before decoding: the offsets the
 * decoder gives their names, and each kernel's static and declared bytes. */
static void layout_shared(Parser *P) {
    layout_functions(P);
    layout_variables(P);
    layout_uses(P);
    layout_reach(P);
    uint32_t dynamic_start = 0;
    for (int pass = 0; pass < 2; pass++) /* the static variables, then where dynamic memory starts */
        for (int i = 0; i < P->nshared; i++) {
            SharedVar *v = &P->shared[i];
            if (v->unsized != pass) continue;
            uint32_t end = 0;
            for (int k = 0; k < v->nkernels; k++)
                if (P->layout[v->kernels[k]].shared_declared > end) end = P->layout[v->kernels[k]].shared_declared;
            if (pass == 1) {
                if (end > dynamic_start) dynamic_start = end;
                continue;
            }
            if (v->align > P->m->data_align) P->m->data_align = v->align;
            char what[160];
            if (v->nkernels) {
                const Tok *k = &P->layout[v->kernels[0]].name;
                snprintf(what, sizeof what, "static .shared memory of kernel %.*s", k->len > 100 ? 100 : k->len, k->s);
            } else {
                snprintf(what, sizeof what, "static .shared memory");
            }
            v->offset = place(P, v->name.line, &end, v->size, v->align, SHARED_PER_BLOCK_OPTIN, what);
            for (int k = 0; k < v->nkernels; k++) P->layout[v->kernels[k]].shared_declared = end;
        }
    dynamic_start = align_up(dynamic_start, 16);
    for (int i = 0; i < P->nshared; i++)
        if (P->shared[i].unsized) P->shared[i].offset = dynamic_start;
    for (int k = 0; k < P->nlayout; k++) P->layout[k].shared_static = align_up(P->layout[k].shared_declared, 16);
    for (int i = 0; i < P->nshared; i++)
        for (int k = 0; P->shared[i].unsized && k < P->shared[i].nkernels; k++)
            P->layout[P->shared[i].kernels[k]].shared_static = dynamic_start;
    P->pos = 0;
}

/* Gives each decoded kernel its static shared bytes from the layout. */
static void kernels_shared(Parser *P) {
    for (int k = 0; k < P->nlayout; k++) {
        int idx = P->layout[k].is_entry ? function_index(P, &P->layout[k].name, 0) : -1;
        if (idx < 0) continue;
        P->m->funcs[idx].shared_static = P->layout[k].shared_static;
        P->m->funcs[idx].shared_declared = P->layout[k].shared_declared;
    }
}

static void free_params(PtxFunction *f) {
    for (int i = 0; i < f->nparams; i++) free(f->params[i].name);
    free(f->params);
    free(f->ret_name);
    f->params = NULL;
    f->ret_name = NULL;
    f->nparams = 0;
}

/* Parameter list: ( .param .type name, ... ) */
static void param_list(Parser *P, PtxFunction *f, int is_ret, uint32_t *frame) {
    expect(P, "(");
    while (!tok_is(peek(P), ")")) {
        Tok *t = next(P);
        if (!tok_is(t, ".param") && !tok_is(t, ".reg")) fail(P, t->line, "expected .param");
        if (tok_is(t, ".reg")) fail(P, t->line, ".reg parameters are not supported");
        Decl d;
        parse_decl(P, &d);
        uint64_t size = decl_bytes(&d);
        uint32_t off = f->is_entry ? place(P, t->line, &f->param_bytes, size, d.align, PARAM_BYTES_MAX, "a kernel's parameters")
                                   : place(P, t->line, frame, size, d.align < 8 ? 8 : d.align, LOCAL_PER_THREAD,
                                           "a function's frame");
        if (is_ret) {
            f->has_ret = 1;
            free(f->ret_name);
            f->ret_name = strndup(d.name.s, (size_t)d.name.len);
            f->ret_off = off;
            f->ret_size = (uint32_t)size;
        } else {
            f->params = realloc(f->params, (f->nparams + 1) * sizeof(PtxParam));
            f->params[f->nparams++] = (PtxParam){strndup(d.name.s, (size_t)d.name.len), off, (uint32_t)size, d.align};
        }
        if (tok_is(peek(P), ",")) next(P);
    }
    expect(P, ")");
}

static void finish_function(Parser *P, PtxFunction *f, uint32_t frame) {
    PtxModule *m = P->m;
    bounded(P, f->line, (uint64_t)P->nregs + P->nconsts, SLOTS_MAX, "the registers and constants of a function");
    f->const_base = SP_COUNT + P->nregs;
    f->nconsts = P->nconsts;
    f->nslots = f->const_base + P->nconsts;
    f->consts = malloc((P->nconsts + 1) * sizeof(uint64_t));
    if (P->nconsts) memcpy(f->consts, P->consts, P->nconsts * sizeof(uint64_t));
    f->frame_local = align_up(frame, 16);
    f->end_pc = m->ncode;
    for (uint32_t pc = f->entry_pc; pc < m->ncode; pc++) {
        Inst *in = &m->code[pc];
        uint32_t *fields[] = {&in->d, &in->a, &in->b, &in->c, &in->e};
        for (int k = 0; k < 5; k++)
            if (*fields[k] & 0x80000000u) *fields[k] = f->const_base + (*fields[k] & 0x7FFFFFFFu);
    }
    for (int i = 0; i < P->nfixups; i++) {
        int found = -1;
        for (int k = 0; k < P->nlabels && found < 0; k++)
            if (tok_eq(&P->labels[k].name, &P->fixups[i].name)) found = (int)P->labels[k].pc;
        if (found < 0)
            fail(P, P->fixups[i].name.line, "unknown label %.*s in %s", P->fixups[i].name.len, P->fixups[i].name.s,
                 f->name);
        m->code[P->fixups[i].pc].imm = found;
    }
}

static void function_body(Parser *P, PtxFunction *f, uint32_t frame) {
    PtxModule *m = P->m;
    P->nnames = P->module_names;
    P->nregs = 0;
    P->carry = 0;
    P->nconsts = 0;
    P->nfixups = P->nlabels = 0;
    f->entry_pc = m->ncode;
    f->defined = 1;
    /* parameters become names: kernel params in the launch buffer, function params in the frame */
    for (int i = 0; i < f->nparams; i++)
        add_name(P, tok_of(f->params[i].name), f->is_entry ? N_KPARAM : N_FRAME, f->params[i].offset, 0);
    if (f->has_ret) add_name(P, tok_of(f->ret_name), N_FRAME, f->ret_off, 0);
    expect(P, "{");
    int depth = 1, scope_names[64]; /* a { } block's declarations end with it (inline asm declares %r1 anew) */
    scope_names[0] = P->nnames;
    while (depth > 0) {
        Tok *t = next(P);
        if (!t->len) fail(P, f->line, "unterminated body of %s", f->name);
        if (tok_is(t, "{")) {
            if (depth == 64) fail(P, t->line, "blocks nested too deeply");
            scope_names[depth++] = P->nnames;
            continue;
        }
        if (tok_is(t, "}")) {
            P->nnames = scope_names[--depth];
            continue;
        }
        if (tok_is(t, ".reg")) {
            for (;;) {
                Decl d;
                parse_decl(P, &d);
                add_name(P, d.name, d.range ? N_REGRANGE : N_REG, SP_COUNT + P->nregs, (uint32_t)d.count);
                P->nregs += d.range ? (uint32_t)d.count : 1; /* each count <= REGISTERS_MAX: the sum cannot wrap */
                bounded(P, d.name.line, P->nregs, REGISTERS_MAX, "the registers of a function");
                if (!tok_is(peek(P), ",")) break;
                next(P);
            }
            expect(P, ";");
            continue;
        }
        if (tok_is(t, ".local") || tok_is(t, ".param")) {
            Decl d;
            parse_decl(P, &d);
            uint32_t off = place(P, t->line, &frame, decl_bytes(&d), d.align < 8 ? 8 : d.align, LOCAL_PER_THREAD,
                                 "a function's frame");
            if (d.align > P->m->data_align) P->m->data_align = d.align;
            add_name(P, d.name, N_FRAME, off, 0);
            if (tok_is(peek(P), "=")) skip_initializer(P, NULL, 0, 0);
            expect(P, ";");
            continue;
        }
        if (tok_is(t, ".shared") || tok_is(t, ".global") || tok_is(t, ".const")) {
            module_variable(P, tok_is(t, ".shared") ? SPACE_SHARED : SPACE_GLOBAL, t->line);
            continue;
        }
        if (tok_is(t, ".pragma")) {
            while (!tok_is(next(P), ";")) {}
            continue;
        }
        if (tok_is(t, ".loc") || tok_is(t, ".file")) {
            int line = t->line;
            while (peek(P)->line == line && peek(P)->len) next(P);
            continue;
        }
        if (tok_is(peek(P), ":") && t->s[0] != '@') { /* label */
            next(P);
            if (tok_is(peek(P), ".callprototype")) { /* an indirect call's signature, named: read at the call */
                while (!tok_is(next(P), ";")) {}
                continue;
            }
            GROW(P->labels, P->nlabels, P->caplabels);
            P->labels[P->nlabels++] = (Label){*t, m->ncode};
            continue;
        }
        int guard = SP_TRUE, gneg = 0;
        if (tok_is(t, "@")) {
            if (tok_is(peek(P), "!")) { next(P); gneg = 1; }
            guard = reg_slot(P, next(P));
            t = next(P);
        }
        decode_instruction(P, t, guard, gneg);
    }
    emit(P, OP_RET, 0); /* falling off the end returns */
    finish_function(P, f, frame);
}

static void function_decl(Parser *P, int is_entry) {
    PtxFunction proto = {0};
    proto.is_entry = is_entry;
    uint32_t frame = 0;
    if (!is_entry && tok_is(peek(P), "(")) param_list(P, &proto, 1, &frame);
    Tok *name = next(P);
    proto.line = name->line;
    if (tok_is(peek(P), "(")) param_list(P, &proto, 0, &frame);
    for (;;) { /* performance directives */
        Tok *t = peek(P);
        if (tok_is(t, ".maxntid") || tok_is(t, ".reqntid")) {
            int req = t->s[1] == 'r';
            next(P);
            uint64_t total = 1;
            for (;;) { /* each extent, and their product, at most the 1024 threads of a block */
                total *= bounded(P, t->line, parse_number(P, next(P), 0), 1024, t->s[1] == 'r' ? ".reqntid" : ".maxntid");
                bounded(P, t->line, total, 1024, "the threads of a block");
                if (!tok_is(peek(P), ",")) break;
                next(P);
            }
            if (!total) fail(P, t->line, "%.*s of 0 threads", t->len, t->s);
            if (req) proto.reqntid = total;
            else proto.maxntid = total;
        } else if (tok_is(t, ".maxnreg")) {
            next(P);
            proto.maxnreg = (uint32_t)bounded(P, t->line, parse_number(P, next(P), 0), 255, ".maxnreg");
        } else if (tok_is(t, ".minnctapersm") || tok_is(t, ".maxclusterrank") || tok_is(t, ".noreturn")) {
            next(P);
            if (!tok_is(t, ".noreturn")) next(P);
        } else if (tok_is(t, ".pragma")) {
            while (!tok_is(next(P), ";")) {}
        } else {
            break;
        }
    }
    int idx = function_index(P, name, 1);
    PtxFunction *f = &P->m->funcs[idx];
    int is_declaration = tok_is(peek(P), ";");
    if (f->defined) {
        free_params(&proto);
        if (is_declaration) { next(P); return; } /* a prototype after the definition changes nothing */
        if (!f->weak && !P->weak) fail(P, name->line, "function %s is defined twice", f->name);
        /* a .weak function defined by two linked inputs (numba's device functions, C++ inline ones): as the
         * linker does, one definition is kept, here the first; by the one-definition rule they are the same */
        expect(P, "{");
        for (int depth = 1; depth > 0;) {
            Tok *b = next(P);
            depth += tok_is(b, "{") - tok_is(b, "}");
        }
        return;
    }
    char *fname = f->name;
    free_params(f); /* an earlier declaration's parameters are replaced */
    *f = proto;
    f->name = fname;
    if (is_declaration) { next(P); return; }
    f->weak = P->weak;
    P->fn = idx;
    function_body(P, f, frame);
}

/* Computes each function's deepest call chain (registers and local bytes). A chain that recurses or calls
 * through a pointer has no bound the code shows: its frames are bounded by CALL_DEPTH_MAX instead, each
 * counted as the module's largest (big, slots and bytes); returns whether fi starts such a chain. */
static int stack_needs(Parser *P, int fi, int *state, uint32_t big_slots, uint32_t big_local) {
    PtxModule *m = P->m;
    PtxFunction *f = &m->funcs[fi];
    if (state[fi] == 2) return f->unbounded_calls;
    if (state[fi] == 1) return 1; /* recursion */
    state[fi] = 1;
    uint32_t slots = 0, local = 0;
    int unbounded = 0;
    for (uint32_t pc = f->entry_pc; pc < f->end_pc; pc++) {
        if (m->code[pc].op == OP_CALL_INDIRECT) unbounded = 1;
        if (m->code[pc].op != OP_CALL) continue;
        int callee = m->calls[m->code[pc].imm].callee;
        unbounded |= stack_needs(P, callee, state, big_slots, big_local);
        if (m->funcs[callee].stack_slots > slots) slots = m->funcs[callee].stack_slots;
        if (m->funcs[callee].stack_local > local) local = m->funcs[callee].stack_local;
    }
    if (unbounded) slots = CALL_DEPTH_MAX * big_slots, local = CALL_DEPTH_MAX * big_local;
    f->stack_slots = f->nslots + slots;
    f->stack_local = f->frame_local + local;
    f->unbounded_calls = unbounded;
    state[fi] = 2;
    return unbounded;
}

/* One .target word: an architecture the simulated device runs (sm_N or compute_N, N <= 90 or the newer
 * architecture image_ptx allowed, with an a/f suffix), or a texture-mode or debug option; anything else fails the
 * load as ptxas fails it. */
static void target(Parser *P, const Tok *a) {
    if (word_in("texmode_unified texmode_independent debug map_f64_to_f32", a)) return;
    int prefix = a->len > 3 && !strncmp(a->s, "sm_", 3) ? 3 : a->len > 8 && !strncmp(a->s, "compute_", 8) ? 8 : 0;
    int digits = 0;
    unsigned arch = 0;
    while (prefix && prefix + digits < a->len && digits < 4 && a->s[prefix + digits] >= '0' && a->s[prefix + digits] <= '9')
        arch = arch * 10 + (unsigned)(a->s[prefix + digits++] - '0');
    int rest = a->len - prefix - digits; /* an "a" or "f" suffix (sm_90a, sm_100f) */
    if (!prefix || digits < 2 || rest > 1 || (rest == 1 && a->s[a->len - 1] != 'a' && a->s[a->len - 1] != 'f'))
        fail(P, a->line, "unknown .target %.*s", a->len, a->s);
    if (arch > P->newest_target)
        fail(P, a->line, ".target %.*s is newer than the simulated device (sm_90)", a->len, a->s);
    if (arch > P->m->target_arch) P->m->target_arch = arch;
}

static void parser_free(Parser *P) {
    free(P->toks), free(P->names), free(P->fixups), free(P->labels), free(P->callfix), free(P->consts);
    for (int i = 0; i < P->nshared; i++) free(P->shared[i].kernels);
    for (int i = 0; i < P->nlayout; i++) free(P->layout[i].calls), free(P->layout[i].vars);
    free(P->shared), free(P->layout);
    free(P);
}

PtxModule *ptx_load(const char *text, Context *ctx, unsigned newest_target, char *err, size_t errlen, CUresult *rc) {
    Parser *P = calloc(1, sizeof *P);
    P->newest_target = newest_target;
    P->code = CUDA_ERROR_INVALID_PTX;
    P->err = err;
    P->errlen = errlen;
    P->ctx = ctx;
    P->m = calloc(1, sizeof(PtxModule));
    PtxModule *m = P->m;
    m->data_align = 16;
    if (setjmp(P->fail)) {
        for (int i = 0; i < m->nglobals; i++) mem_free(m->global_addrs[i], 1 << A_MODULE_GLOBAL);
        ptx_free(m);
        *rc = P->code;
        parser_free(P);
        return NULL;
    }
    lex(P, text);
    layout_shared(P);
    int saw_target = 0;
    while (P->pos < P->ntoks) {
        Tok *t = next(P);
        if (tok_is(t, ".version")) {
            next(P);
        } else if (tok_is(t, ".target")) {
            saw_target = 1;
            for (;;) {
                Tok *a = next(P);
                target(P, a);
                if (!tok_is(peek(P), ",")) break;
                next(P);
            }
        } else if (tok_is(t, ".address_size")) {
            if (parse_number(P, next(P), 0) != 64) fail(P, t->line, "only .address_size 64 is supported");
        } else if (tok_is(t, ".visible") || tok_is(t, ".extern") || tok_is(t, ".weak") || tok_is(t, ".common")) {
            P->weak |= tok_is(t, ".weak");
            continue;
        } else if (tok_is(t, ".entry")) {
            function_decl(P, 1);
        } else if (tok_is(t, ".func")) {
            function_decl(P, 0);
        } else if (tok_is(t, ".global") || tok_is(t, ".const")) {
            uint64_t size = module_variable(P, SPACE_GLOBAL, t->line);
            if (tok_is(t, ".const")) P->m->const_bytes += (uint32_t)size;
        } else if (tok_is(t, ".shared")) {
            module_variable(P, SPACE_SHARED, t->line);
        } else if (tok_is(t, ".file")) {
            int line = t->line;
            while (peek(P)->line == line && peek(P)->len) next(P);
        } else if (tok_is(t, ".section")) {
            next(P);
            expect(P, "{");
            for (int depth = 1; depth > 0 && P->pos < P->ntoks;) {
                Tok *s = next(P);
                depth += tok_is(s, "{") - tok_is(s, "}");
            }
        } else if (tok_is(t, ".alias") || tok_is(t, ".pragma")) {
            while (!tok_is(next(P), ";")) {}
        } else {
            fail(P, t->line, "unexpected '%.*s' at module level", t->len, t->s);
        }
        if (tok_is(t, ".entry") || tok_is(t, ".func")) P->nnames = P->module_names;
        else P->module_names = P->nnames;
        P->weak = 0;
    }
    if (!saw_target) fail(P, 1, "no .target directive: is this PTX text?");
    for (int i = 0; i < P->ncallfix; i++) {
        Tok *name = &P->callfix[i].callee;
        int callee = function_index(P, name, 0);
        if (callee < 0 || !m->funcs[callee].defined)
            fail(P, name->line, "call to %.*s, which is not defined in this module", name->len, name->s);
        m->calls[P->callfix[i].call].callee = callee;
    }
    uint32_t big_slots = 0, big_local = 0;
    for (int i = 0; i < m->nfuncs; i++) {
        PtxFunction *f = &m->funcs[i];
        f->frame_local = align_up(f->frame_local, m->data_align); /* callee frames start aligned like the first */
        if (!f->defined || f->is_entry) continue;
        if (f->nslots > big_slots) big_slots = f->nslots;
        if (f->frame_local > big_local) big_local = f->frame_local;
    }
    kernels_shared(P);
    int *state = calloc((size_t)m->nfuncs + 1, sizeof(int));
    for (int i = 0; i < m->nfuncs; i++)
        if (m->funcs[i].defined) stack_needs(P, i, state, big_slots, big_local);
    free(state);
    parser_free(P);
    return m;
}

void ptx_free(PtxModule *m) {
    if (!m) return;
    for (int i = 0; i < m->nfuncs; i++) free_params(&m->funcs[i]), free(m->funcs[i].consts), free(m->funcs[i].name);
    for (int i = 0; i < m->nglobals; i++) free(m->global_names[i]);
    free(m->funcs), free(m->code), free(m->lines), free(m->calls);
    free(m->global_names), free(m->global_addrs), free(m->global_sizes);
    free(m);
}
