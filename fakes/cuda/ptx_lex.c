/* The PTX loader's tokens, names and operands: the lexer, the names a function sees (registers, special
 * registers, frame and module variables, functions), type and modifier words, operands, and emitting an
 * Inst. The bottom of the loader (ptx_parse.h): ptx_decode.c and ptx.c build on it. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptx_parse.h"

void fail(Parser *P, int line, const char *fmt, ...) {
    va_list ap;
    int n = snprintf(P->err, P->errlen, "line %d: ", line);
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < P->errlen) vsnprintf(P->err + n, P->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    longjmp(P->fail, 1);
}

static int is_ident_char(int c) { return isalnum(c) || c == '_' || c == '$' || c == '%' || c == '.' || c == ':'; }

void lex(Parser *P, const char *text) {
    int cap = 0, line = 1;
    const char *p = text;
    while (*p) {
        if (*p == '\n') { line++; p++; continue; }
        if (isspace((unsigned char)*p)) { p++; continue; }
        if (p[0] == '/' && p[1] == '/') { while (*p && *p != '\n') p++; continue; }
        if (p[0] == '/' && p[1] == '*') {
            p += 2;
            while (*p && !(p[0] == '*' && p[1] == '/')) line += *p++ == '\n';
            if (*p) p += 2;
            continue;
        }
        Tok t = {p, 1, line};
        if (*p == '"') {
            const char *q = p + 1;
            while (*q && *q != '"') q++;
            t.len = (int)(q - p) + (*q == '"');
        } else if (is_ident_char((unsigned char)*p) && *p != ':') {
            const char *q = p;
            /* "::" appears inside cache hints (L1::no_allocate); a single ':' ends a label; a directive ends at
             * the next dot (".reg.b32 f;" in inline asm is ".reg .b32 f;") */
            while (*q && (is_ident_char((unsigned char)*q) && (*q != ':' || q[1] == ':' || (q > p && q[-1] == ':'))) &&
                   !(*p == '.' && q > p && *q == '.'))
                q++;
            t.len = (int)(q - p);
        }
        GROW(P->toks, P->ntoks, cap);
        P->toks[P->ntoks++] = t;
        p += t.len;
    }
}

Tok *peek(Parser *P) {
    static Tok end = {"", 0, 0};
    return P->pos < P->ntoks ? &P->toks[P->pos] : &end;
}
int tok_is(const Tok *t, const char *s) { return (int)strlen(s) == t->len && !strncmp(t->s, s, (size_t)t->len); }
int tok_eq(const Tok *a, const Tok *b) { return a->len == b->len && !memcmp(a->s, b->s, (size_t)a->len); }
/* The next token, consumed. Reading past the last one fails the load: every loop that reads up to a closing
 * token (';', '}', ')') ends at the end of the text, however it was cut. */
Tok *next(Parser *P) {
    if (P->pos >= P->ntoks)
        fail(P, P->ntoks ? P->toks[P->ntoks - 1].line : 1, "unexpected end of the PTX text");
    return &P->toks[P->pos++];
}
void expect(Parser *P, const char *s) {
    Tok *t = next(P);
    if (!tok_is(t, s)) fail(P, t->line, "expected '%s', found '%.*s'", s, t->len, t->s);
}
/* Is the token one of the words of a space-separated list? */
int word_in(const char *list, const Tok *w) {
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ' ');
        int n = e ? (int)(e - p) : (int)strlen(p);
        if (n == w->len && !memcmp(p, w->s, (size_t)n)) return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* ---- names ---- */

Name *find_name(Parser *P, const Tok *id) {
    for (int i = P->nnames - 1; i >= 0; i--)
        if (tok_eq(&P->names[i].id, id)) return &P->names[i];
    return NULL;
}

void add_name(Parser *P, Tok id, int kind, uint64_t value, uint32_t count) {
    GROW(P->names, P->nnames, P->capnames);
    P->names[P->nnames++] = (Name){id, kind, value, count};
}

Tok tok_of(const char *s) { return (Tok){s, (int)strlen(s), 0}; }

/* PTX special registers and the frame slots they live in. */
const SpecialRegister SPECIALS[] = {
    {"%tid.x", SP_TID_X}, {"%tid.y", SP_TID_Y}, {"%tid.z", SP_TID_Z},
    {"%ntid.x", SP_NTID_X}, {"%ntid.y", SP_NTID_Y}, {"%ntid.z", SP_NTID_Z},
    {"%ctaid.x", SP_CTAID_X}, {"%ctaid.y", SP_CTAID_Y}, {"%ctaid.z", SP_CTAID_Z},
    {"%nctaid.x", SP_NCTAID_X}, {"%nctaid.y", SP_NCTAID_Y}, {"%nctaid.z", SP_NCTAID_Z},
    {"%laneid", SP_LANEID}, {"%warpid", SP_WARPID}, {"%nwarpid", SP_NWARPID}, {"%smid", SP_SMID},
    {"%nsmid", SP_NSMID}, {"%gridid", SP_GRIDID}, {"%lanemask_eq", SP_LANEMASK_EQ},
    {"%lanemask_lt", SP_LANEMASK_LT}, {"%lanemask_le", SP_LANEMASK_LE}, {"%lanemask_gt", SP_LANEMASK_GT},
    {"%lanemask_ge", SP_LANEMASK_GE}, {"%clock", SP_CLOCK}, {"%clock64", SP_CLOCK},
    {"%globaltimer", SP_CLOCK}, {"%dynamic_smem_size", SP_DYN_SMEM}, {"%total_smem_size", SP_TOTAL_SMEM},
    /* the driver's environment registers: %envreg1:%envreg2 the grid workspace of a cooperative launch (what
     * cooperative_groups' grid.sync() counts arrivals in), 0 otherwise; the others read 0 */
    {"%envreg0", SP_ENVREG_NONE}, {"%envreg1", SP_ENVREG_HI}, {"%envreg2", SP_ENVREG_LO},
    {"%envreg3", SP_ENVREG_NONE}, {"%envreg4", SP_ENVREG_NONE}, {"%envreg5", SP_ENVREG_NONE},
    {"%envreg6", SP_ENVREG_NONE}, {"%envreg7", SP_ENVREG_NONE}, {"%envreg8", SP_ENVREG_NONE},
    {"%envreg9", SP_ENVREG_NONE}, {"%envreg10", SP_ENVREG_NONE}, {"%envreg11", SP_ENVREG_NONE},
    {"%envreg12", SP_ENVREG_NONE}, {"%envreg13", SP_ENVREG_NONE}, {"%envreg14", SP_ENVREG_NONE},
    {"%envreg15", SP_ENVREG_NONE}, {"%envreg16", SP_ENVREG_NONE}, {"%envreg17", SP_ENVREG_NONE},
    {"%envreg18", SP_ENVREG_NONE}, {"%envreg19", SP_ENVREG_NONE}, {"%envreg20", SP_ENVREG_NONE},
    {"%envreg21", SP_ENVREG_NONE}, {"%envreg22", SP_ENVREG_NONE}, {"%envreg23", SP_ENVREG_NONE},
    {"%envreg24", SP_ENVREG_NONE}, {"%envreg25", SP_ENVREG_NONE}, {"%envreg26", SP_ENVREG_NONE},
    {"%envreg27", SP_ENVREG_NONE}, {"%envreg28", SP_ENVREG_NONE}, {"%envreg29", SP_ENVREG_NONE},
    {"%envreg30", SP_ENVREG_NONE}, {"%envreg31", SP_ENVREG_NONE},
};
const size_t NSPECIALS = sizeof SPECIALS / sizeof SPECIALS[0];

/* The register-file slot a register name denotes, or -1. */
static int find_register(Parser *P, const Tok *t) {
    if (tok_is(t, "_")) return SP_SINK;
    for (size_t i = 0; i < NSPECIALS; i++)
        if (tok_is(t, SPECIALS[i].name)) return SPECIALS[i].slot;
    Name *n = find_name(P, t);
    if (n && n->kind == N_REG) return (int)n->value;
    int d = t->len;
    while (d > 0 && isdigit((unsigned char)t->s[d - 1])) d--;
    if (d < t->len && t->len - d < 10) { /* %r17 -> element 17 of the range %r<N> */
        unsigned idx = (unsigned)strtoul(t->s + d, NULL, 10);
        Tok prefix = {t->s, d, t->line};
        n = find_name(P, &prefix);
        if (n && n->kind == N_REGRANGE && idx < n->count) return (int)(n->value + idx);
    }
    return -1;
}

int reg_slot(Parser *P, const Tok *t) {
    int slot = find_register(P, t);
    if (slot < 0) fail(P, t->line, "unknown register %.*s", t->len, t->s);
    return slot;
}

uint32_t const_slot(Parser *P, uint64_t bits) {
    for (uint32_t i = 0; i < P->nconsts; i++)
        if (P->consts[i] == bits) return 0x80000000u | i; /* resolved to a slot when the function ends */
    GROW(P->consts, P->nconsts, P->capconsts);
    P->consts[P->nconsts] = bits;
    return 0x80000000u | P->nconsts++;
}

/* The index of a function of the module by name; with create, a new empty one when there is none; else -1. */
int function_index(Parser *P, const Tok *name, int create) {
    PtxModule *m = P->m;
    for (int i = 0; i < m->nfuncs; i++)
        if ((int)strlen(m->funcs[i].name) == name->len && !memcmp(m->funcs[i].name, name->s, (size_t)name->len))
            return i;
    if (!create) return -1;
    m->funcs = realloc(m->funcs, (m->nfuncs + 1) * sizeof(PtxFunction));
    PtxFunction *f = &m->funcs[m->nfuncs];
    memset(f, 0, sizeof *f);
    f->name = strndup(name->s, (size_t)name->len);
    return m->nfuncs++;
}

/* ---- types and modifiers ---- */

int type_of(const Tok *t) {
    for (int ty = 1; ty < T_COUNT; ty++)
        if (tok_is(t, PTX_TYPE_INFO[ty].name)) return ty;
    return T_NONE;
}


void split_opcode(Parser *P, const Tok *t, Opcode *o) {
    memset(o, 0, sizeof *o);
    const char *p = t->s, *end = t->s + t->len;
    const char *dot = memchr(p, '.', (size_t)(end - p));
    o->base = (Tok){p, (int)((dot ? dot : end) - p), t->line};
    while (dot) {
        p = dot + 1;
        dot = memchr(p, '.', (size_t)(end - p));
        if (o->nmods == 12) fail(P, t->line, "too many modifiers in %.*s", t->len, t->s);
        Tok m = {p, (int)((dot ? dot : end) - p), t->line};
        o->mods[o->nmods++] = m;
        int ty = type_of(&m);
        if (ty != T_NONE && o->ntypes < 3) o->types[o->ntypes++] = ty;
    }
}
int has_mod(const Opcode *o, const char *m) {
    for (int i = 0; i < o->nmods; i++)
        if (tok_is(&o->mods[i], m)) return 1;
    return 0;
}

/* ---- operands ---- */


/* ptxas refuses a unary minus before a 32-bit hexadecimal float ("Parsing error near '0f3F800000': syntax error",
 * CUDA 13.0): a negative float is written as its own bits; before a 64-bit one it takes the minus and flips the sign
 * bit (-0d3FF8000000000000 is 0xBFF8000000000000, -0d0 is 0x8000000000000000: on the H100, driver 580.159.04) */
#define NEGATED_HEX_FLOAT "syntax error near '%s': a hexadecimal float takes no unary minus (write the negative " \
    "float's own bits)"

uint64_t parse_number(Parser *P, Tok *t, int negative) {
    char buf[64];
    if (t->len >= (int)sizeof buf) fail(P, t->line, "cannot parse number %.*s", t->len, t->s);
    snprintf(buf, sizeof buf, "%.*s", t->len, t->s);
    int hex_float = buf[0] == '0' && buf[1] && strchr("fFdD", buf[1]) && strspn(buf + 2, "0123456789abcdefABCDEF") == strlen(buf + 2);
    if (hex_float && (buf[1] == 'f' || buf[1] == 'F') && strlen(buf) == 10) {
        if (negative) fail(P, t->line, NEGATED_HEX_FLOAT, buf);
        return (uint32_t)strtoul(buf + 2, NULL, 16);
    }
    if (hex_float && (buf[1] == 'd' || buf[1] == 'D') && strlen(buf) == 18) {
        return strtoull(buf + 2, NULL, 16) ^ (negative ? UINT64_C(1) << 63 : 0);
    }
    char *end;
    /* PTX's integer notations: 0x or 0X hexadecimal, 0b or 0B binary, a leading 0 octal, else decimal */
    int prefixed = buf[0] == '0' && buf[1] && strchr("xXbB", buf[1]);
    const char *digits = prefixed ? buf + 2 : buf;
    errno = 0;
    uint64_t v = strtoull(digits, &end, prefixed ? (buf[1] == 'b' || buf[1] == 'B' ? 2 : 16) : buf[0] == '0' && buf[1] ? 8 : 10);
    if (*end == 'U' || *end == 'u') end++;
    if (*end || end == digits || !isxdigit((unsigned char)*digits)) fail(P, t->line, "cannot parse number %s", buf);
    if (errno == ERANGE) fail(P, t->line, "number %s does not fit in 64 bits", buf);
    return negative ? 0 - v : v;
}

int is_number_start(Tok *t) { return t->len && isdigit((unsigned char)t->s[0]); }

static void parse_operand(Parser *P, Operand *o) {
    memset(o, 0, sizeof *o);
    o->slot = o->slot2 = -1;
    Tok *t = peek(P);
    o->line = t->line;
    if (tok_is(t, "[")) {
        next(P);
        o->kind = O_MEM;
        Tok *b = next(P);
        if (b->s[0] == '%') o->slot = reg_slot(P, b);
        else if (is_number_start(b)) o->imm = parse_number(P, b, 0);
        else o->sym = *b;
        while (tok_is(peek(P), "+") || tok_is(peek(P), "-")) {
            int neg = tok_is(next(P), "-");
            if (tok_is(peek(P), "-")) { next(P); neg = !neg; }
            o->imm += parse_number(P, next(P), neg);
        }
        expect(P, "]");
        return;
    }
    if (tok_is(t, "{")) {
        next(P);
        o->kind = O_VEC;
        for (;;) {
            Tok *r = next(P);
            if (o->nvec == (int)(sizeof o->vec / sizeof o->vec[0])) fail(P, r->line, "vector operand too long");
            if (is_number_start(r)) o->vec[o->nvec++] = (int)const_slot(P, parse_number(P, r, 0));
            else o->vec[o->nvec++] = reg_slot(P, r);
            if (tok_is(peek(P), "}")) break;
            expect(P, ",");
        }
        next(P);
        return;
    }
    if (tok_is(t, "(")) {
        o->kind = O_LIST; /* call argument lists are read by the call decoder */
        return;
    }
    int neg = 0;
    if (tok_is(t, "!")) { next(P); neg = 1; t = peek(P); }
    if (tok_is(t, "-")) { next(P); t = peek(P); neg = 2; }
    if (is_number_start(t)) {
        next(P);
        o->kind = O_IMM;
        o->imm = parse_number(P, t, neg == 2);
        return;
    }
    next(P);
    if (tok_is(t, "WARP_SZ")) { /* PTX's predefined constant, the warp size (numba's cuda.warpsize) */
        o->kind = O_IMM;
        o->imm = neg == 2 ? (uint64_t)-32 : 32;
        return;
    }
    if (t->s[0] == '%' || find_register(P, t) >= 0) { /* registers may be named without a % (inline asm's p) */
        o->kind = O_REG;
        o->slot = reg_slot(P, t);
        o->neg = neg == 1;
        if (tok_is(peek(P), "|")) {
            next(P);
            o->slot2 = reg_slot(P, next(P));
        }
        return;
    }
    o->kind = O_SYM;
    o->sym = *t;
}

/* ---- emitting ---- */

Inst *emit(Parser *P, int op, int line) {
    PtxModule *m = P->m;
    if (m->ncode == P->code_cap) {
        P->code_cap = P->code_cap ? P->code_cap * 2 : 1024;
        m->code = realloc(m->code, P->code_cap * sizeof(Inst));
        m->lines = realloc(m->lines, P->code_cap * sizeof(int));
    }
    Inst *in = &m->code[m->ncode];
    memset(in, 0, sizeof *in);
    in->op = (uint16_t)op;
    in->d = in->a = in->b = in->c = in->e = SP_SINK;
    m->lines[m->ncode++] = line;
    return in;
}

/* A value operand as a slot: registers as they are, immediates and symbol addresses as constants (a kernel
 * parameter's address is its offset in the kernel's parameter space, where ld.param reads it). */
uint32_t value_slot(Parser *P, Operand *o) {
    if (o->kind == O_REG) return (uint32_t)o->slot;
    if (o->kind == O_IMM) return const_slot(P, o->imm);
    if (o->kind == O_SYM) {
        Name *n = find_name(P, &o->sym);
        if (n && (n->kind == N_SHARED || n->kind == N_GLOBAL || n->kind == N_KPARAM)) return const_slot(P, n->value);
        int fn = n ? -1 : function_index(P, &o->sym, 0);
        if (fn >= 0) return const_slot(P, FUNCTION_ADDRESS_BASE + (uint64_t)fn * FUNCTION_ADDRESS_STEP);
        fail(P, o->line, "operand %.*s cannot be used as a value here", o->sym.len, o->sym.s);
    }
    fail(P, o->line, "unexpected operand kind");
}

int read_operands(Parser *P, Operand *ops, int max) {
    int n = 0;
    if (tok_is(peek(P), ";")) return 0;
    for (;;) {
        if (n == max) fail(P, peek(P)->line, "too many operands");
        parse_operand(P, &ops[n++]);
        if (ops[n - 1].kind == O_LIST) return n;
        if (!tok_is(peek(P), ",")) break;
        next(P);
    }
    return n;
}
