/* PTX parser and decoder: PTX text (what NVRTC emits) -> PtxModule, decoded once into fixed-size Insts
 * whose operands are all register-file slots (immediates become per-function constant slots).
 * Anything it cannot decode fails the load with the line and the opcode, never a silent wrong answer. */
#define _GNU_SOURCE
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"
#include "ops.h"

/* ---- lexer ---- */

typedef struct Tok {
    const char *s;
    int len, line;
} Tok;

typedef struct Parser {
    Tok *toks;
    int ntoks, pos;
    jmp_buf fail;
    char *err;
    size_t errlen;
    PtxModule *m;
    Context *ctx;
    /* the function being decoded */
    int fn;
    struct Name *names;
    int nnames, capnames;
    struct Fixup { uint32_t pc; char label[64]; } *fixups;
    int nfixups, capfixups;
    struct Fixup *labels;
    int nlabels, caplabels;
    struct CallFix { int call; char name[128]; } *callfix;
    int ncallfix, capcallfix;
    uint32_t nregs;
    uint64_t *consts;
    uint32_t nconsts, capconsts;
    uint32_t code_cap;
    int module_names; /* names below this index are module-level; a function's own come after */
    struct SharedVar { char name[96]; uint32_t offset; } *shared;
    int nshared;
} Parser;

/* A name visible in a function: a register range, a frame variable, or a module variable. */
enum NameKind { N_REG, N_REGRANGE, N_FRAME, N_KPARAM, N_SHARED, N_GLOBAL };
typedef struct Name {
    char name[96];
    int kind;
    uint64_t value; /* slot, frame offset, param offset, shared offset or address */
    uint32_t count;
} Name;

static void __attribute__((noreturn, format(printf, 3, 4))) fail(Parser *P, int line, const char *fmt, ...) {
    va_list ap;
    int n = snprintf(P->err, P->errlen, "line %d: ", line);
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < P->errlen) vsnprintf(P->err + n, P->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    longjmp(P->fail, 1);
}

static int is_ident_char(int c) { return isalnum(c) || c == '_' || c == '$' || c == '%' || c == '.' || c == ':'; }

static void lex(Parser *P, const char *text) {
    int cap = 1024, line = 1;
    P->toks = malloc(cap * sizeof(Tok));
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
            /* "::" appears inside cache hints (L1::no_allocate); a single ':' ends a label */
            while (*q && (is_ident_char((unsigned char)*q) && (*q != ':' || q[1] == ':' || (q > p && q[-1] == ':'))))
                q++;
            t.len = (int)(q - p);
        }
        if (P->ntoks == cap) P->toks = realloc(P->toks, (cap *= 2) * sizeof(Tok));
        P->toks[P->ntoks++] = t;
        p += t.len;
    }
}

static Tok *peek(Parser *P) {
    static Tok end = {"", 0, 0};
    return P->pos < P->ntoks ? &P->toks[P->pos] : &end;
}
static int tok_is(Tok *t, const char *s) { return (int)strlen(s) == t->len && !strncmp(t->s, s, (size_t)t->len); }
static Tok *next(Parser *P) {
    Tok *t = peek(P);
    if (P->pos < P->ntoks) P->pos++;
    return t;
}
static void expect(Parser *P, const char *s) {
    Tok *t = next(P);
    if (!tok_is(t, s)) fail(P, t->line, "expected '%s', found '%.*s'", s, t->len, t->s);
}
static void tok_copy(Tok *t, char *buf, size_t n) { snprintf(buf, n, "%.*s", t->len, t->s); }

/* ---- names ---- */

static Name *find_name(Parser *P, const char *name) {
    for (int i = P->nnames - 1; i >= 0; i--)
        if (!strcmp(P->names[i].name, name)) return &P->names[i];
    return NULL;
}

static Name *add_name(Parser *P, const char *name, int kind, uint64_t value, uint32_t count) {
    if (P->nnames == P->capnames) {
        P->capnames = P->capnames ? P->capnames * 2 : 256;
        P->names = realloc(P->names, P->capnames * sizeof(Name));
    }
    Name *n = &P->names[P->nnames++];
    snprintf(n->name, sizeof n->name, "%s", name);
    n->kind = kind;
    n->value = value;
    n->count = count;
    return n;
}


static const struct { const char *name; int slot; } SPECIALS[] = {
    {"%tid.x", SP_TID_X}, {"%tid.y", SP_TID_Y}, {"%tid.z", SP_TID_Z},
    {"%ntid.x", SP_NTID_X}, {"%ntid.y", SP_NTID_Y}, {"%ntid.z", SP_NTID_Z},
    {"%ctaid.x", SP_CTAID_X}, {"%ctaid.y", SP_CTAID_Y}, {"%ctaid.z", SP_CTAID_Z},
    {"%nctaid.x", SP_NCTAID_X}, {"%nctaid.y", SP_NCTAID_Y}, {"%nctaid.z", SP_NCTAID_Z},
    {"%laneid", SP_LANEID}, {"%warpid", SP_WARPID}, {"%nwarpid", SP_NWARPID}, {"%smid", SP_SMID},
    {"%nsmid", SP_NSMID}, {"%gridid", SP_GRIDID}, {"%lanemask_eq", SP_LANEMASK_EQ},
    {"%lanemask_lt", SP_LANEMASK_LT}, {"%lanemask_le", SP_LANEMASK_LE}, {"%lanemask_gt", SP_LANEMASK_GT},
    {"%lanemask_ge", SP_LANEMASK_GE}, {"%clock", SP_CLOCK}, {"%clock64", SP_CLOCK},
    {"%globaltimer", SP_CLOCK}, {"%dynamic_smem_size", SP_DYN_SMEM}, {"%total_smem_size", SP_TOTAL_SMEM},
};

static int reg_slot(Parser *P, Tok *t) {
    char name[96];
    tok_copy(t, name, sizeof name);
    if (!strcmp(name, "_")) return SP_SINK;
    for (size_t i = 0; i < sizeof SPECIALS / sizeof SPECIALS[0]; i++)
        if (!strcmp(SPECIALS[i].name, name)) return SPECIALS[i].slot;
    Name *n = find_name(P, name);
    if (n && n->kind == N_REG) return (int)n->value;
    size_t len = strlen(name);
    size_t d = len;
    while (d > 0 && isdigit((unsigned char)name[d - 1])) d--;
    if (d < len) {
        unsigned idx = (unsigned)atoi(name + d);
        name[d] = 0;
        n = find_name(P, name);
        if (n && n->kind == N_REGRANGE && idx < n->count) return (int)(n->value + idx);
    }
    fail(P, t->line, "unknown register %.*s", t->len, t->s);
}

static uint32_t const_slot(Parser *P, uint64_t bits) {
    for (uint32_t i = 0; i < P->nconsts; i++)
        if (P->consts[i] == bits) return 0x80000000u | i; /* resolved to a slot when the function ends */
    if (P->nconsts == P->capconsts) {
        P->capconsts = P->capconsts ? P->capconsts * 2 : 64;
        P->consts = realloc(P->consts, P->capconsts * sizeof(uint64_t));
    }
    P->consts[P->nconsts] = bits;
    return 0x80000000u | P->nconsts++;
}

/* ---- types and modifiers ---- */

static int type_of(const char *s) {
    static const struct { const char *n; int t; } TYPES[] = {
        {"b8", T_B8}, {"b16", T_B16}, {"b32", T_B32}, {"b64", T_B64}, {"u8", T_U8}, {"u16", T_U16},
        {"u32", T_U32}, {"u64", T_U64}, {"s8", T_S8}, {"s16", T_S16}, {"s32", T_S32}, {"s64", T_S64},
        {"f16", T_F16}, {"f32", T_F32}, {"f64", T_F64}, {"pred", T_PRED}, {"bf16", T_BF16},
    };
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (!strcmp(TYPES[i].n, s)) return TYPES[i].t;
    return T_NONE;
}
static int type_size(int t) {
    switch (t) {
    case T_B8: case T_U8: case T_S8: return 1;
    case T_B16: case T_U16: case T_S16: case T_F16: case T_BF16: return 2;
    case T_B32: case T_U32: case T_S32: case T_F32: return 4;
    case T_B64: case T_U64: case T_S64: case T_F64: return 8;
    default: return 1;
    }
}
static int is_signed(int t) { return t == T_S8 || t == T_S16 || t == T_S32 || t == T_S64; }
static int is_float(int t) { return t == T_F16 || t == T_F32 || t == T_F64 || t == T_BF16; }

/* An opcode split at dots: "ld.global.nc.v4.f32" -> base "ld", mods {global, nc, v4, f32}. */
typedef struct Opcode {
    char base[32];
    char mods[12][24];
    int nmods;
    int types[3], ntypes; /* the type modifiers, in order */
} Opcode;

static void split_opcode(Parser *P, Tok *t, Opcode *o) {
    char buf[160];
    tok_copy(t, buf, sizeof buf);
    memset(o, 0, sizeof *o);
    char *save = NULL, *part = strtok_r(buf, ".", &save);
    snprintf(o->base, sizeof o->base, "%s", part ? part : "");
    while ((part = strtok_r(NULL, ".", &save))) {
        if (o->nmods == 12) fail(P, t->line, "too many modifiers in %s", buf);
        snprintf(o->mods[o->nmods++], sizeof o->mods[0], "%s", part);
        int ty = type_of(part);
        if (ty != T_NONE && o->ntypes < 3) o->types[o->ntypes++] = ty;
    }
}
static int has_mod(const Opcode *o, const char *m) {
    for (int i = 0; i < o->nmods; i++)
        if (!strcmp(o->mods[i], m)) return 1;
    return 0;
}

/* ---- operands ---- */

enum OperandKind { O_REG, O_IMM, O_MEM, O_VEC, O_SYM, O_LIST };
typedef struct Operand {
    int kind;
    int slot;       /* O_REG; O_MEM base register or -1 */
    int neg;        /* !%p */
    int slot2;      /* %p|%q second register, or -1 */
    uint64_t imm;   /* O_IMM bits; O_MEM offset */
    int is_fimm;    /* 0f / 0d immediate */
    char sym[128];  /* O_SYM, or O_MEM symbol base */
    int vec[4], nvec;
    int line;
} Operand;

static uint64_t parse_number(Parser *P, Tok *t, int negative, int *is_float_imm) {
    char buf[64];
    tok_copy(t, buf, sizeof buf);
    *is_float_imm = 0;
    if ((buf[0] == '0') && (buf[1] == 'f' || buf[1] == 'F') && strlen(buf) == 10) {
        *is_float_imm = 1;
        uint32_t bits = (uint32_t)strtoul(buf + 2, NULL, 16);
        return negative ? bits ^ 0x80000000u : bits;
    }
    if ((buf[0] == '0') && (buf[1] == 'd' || buf[1] == 'D') && strlen(buf) == 18) {
        *is_float_imm = 2;
        uint64_t bits = strtoull(buf + 2, NULL, 16);
        return negative ? bits ^ 0x8000000000000000ull : bits;
    }
    char *end;
    uint64_t v;
    if (buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X')) v = strtoull(buf + 2, &end, 16);
    else if (buf[0] == '0' && buf[1] && isdigit((unsigned char)buf[1])) v = strtoull(buf, &end, 8);
    else v = strtoull(buf, &end, 10);
    if (*end == 'U' || *end == 'u') end++;
    if (*end) fail(P, t->line, "cannot parse number %s", buf);
    return negative ? (uint64_t)(-(int64_t)v) : v;
}

static int is_number_start(Tok *t) { return t->len && isdigit((unsigned char)t->s[0]); }

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
        else if (is_number_start(b)) { int f; o->imm = parse_number(P, b, 0, &f); }
        else tok_copy(b, o->sym, sizeof o->sym);
        while (tok_is(peek(P), "+") || tok_is(peek(P), "-")) {
            int neg = tok_is(next(P), "-");
            if (tok_is(peek(P), "-")) { next(P); neg = !neg; }
            int f;
            o->imm += parse_number(P, next(P), neg, &f);
        }
        expect(P, "]");
        return;
    }
    if (tok_is(t, "{")) {
        next(P);
        o->kind = O_VEC;
        for (;;) {
            Tok *r = next(P);
            if (o->nvec == 4) fail(P, r->line, "vector operand too long");
            if (is_number_start(r)) { int f; o->vec[o->nvec++] = (int)const_slot(P, parse_number(P, r, 0, &f)); }
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
        o->imm = parse_number(P, t, neg == 2, &o->is_fimm);
        return;
    }
    next(P);
    if (t->s[0] == '%' || tok_is(t, "_")) {
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
    tok_copy(t, o->sym, sizeof o->sym);
}

/* ---- emitting ---- */

static Inst *emit(Parser *P, int op, int line) {
    PtxModule *m = P->m;
    if (m->ncode == P->code_cap) {
        P->code_cap = P->code_cap ? P->code_cap * 2 : 1024;
        m->code = realloc(m->code, P->code_cap * sizeof(Inst));
        m->lines = realloc(m->lines, P->code_cap * sizeof(int));
    }
    Inst *in = &m->code[m->ncode];
    memset(in, 0, sizeof *in);
    in->op = (uint16_t)op;
    in->guard = SP_TRUE;
    in->d = in->a = in->b = in->c = in->e = SP_SINK;
    m->lines[m->ncode++] = line;
    return in;
}

/* A value operand as a slot: registers as they are, immediates and symbol addresses as constants. */
static uint32_t value_slot(Parser *P, Operand *o) {
    if (o->kind == O_REG) return (uint32_t)o->slot;
    if (o->kind == O_IMM) return const_slot(P, o->imm);
    if (o->kind == O_SYM) {
        Name *n = find_name(P, o->sym);
        if (n && (n->kind == N_SHARED || n->kind == N_GLOBAL)) return const_slot(P, n->value);
        fail(P, o->line, "operand %s cannot be used as a value here", o->sym);
    }
    fail(P, o->line, "unexpected operand kind");
}

static int read_operands(Parser *P, Operand *ops, int max) {
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

static int cmp_of(const char *s) {
    static const char *NAMES[] = {"eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu",
                                  "num", "nan"};
    static const struct { const char *n; int c; } UNSIGNED[] = {{"lo", C_LT}, {"ls", C_LE}, {"hi", C_GT},
                                                                {"hs", C_GE}};
    for (int i = 0; i < 14; i++)
        if (!strcmp(NAMES[i], s)) return i;
    for (int i = 0; i < 4; i++)
        if (!strcmp(UNSIGNED[i].n, s)) return UNSIGNED[i].c;
    return -1;
}

static int rounding_of(const Opcode *o) {
    static const char *NAMES[] = {"", "rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi"};
    for (int i = 1; i < 9; i++)
        if (has_mod(o, NAMES[i])) return i;
    return R_NONE;
}

/* Picks the opcode for a type class: (16-bit, 32-bit, 64-bit, f32, f64) and signed/unsigned variants. */
typedef struct TypedOps { int s16, u16, s32, u32, s64, u64, f32, f64; } TypedOps;
static int pick(Parser *P, int line, const char *what, int t, TypedOps ops) {
    int op = -1;
    switch (t) {
    case T_S16: op = ops.s16; break;
    case T_U16: case T_B16: op = ops.u16; break;
    case T_S32: op = ops.s32; break;
    case T_U32: case T_B32: op = ops.u32; break;
    case T_S64: op = ops.s64; break;
    case T_U64: case T_B64: op = ops.u64; break;
    case T_F32: op = ops.f32; break;
    case T_F64: op = ops.f64; break;
    default: break;
    }
    if (op < 0) fail(P, line, "%s: unsupported type", what);
    return op;
}
#define NO (-1)

static int space_of(const Opcode *o) {
    if (has_mod(o, "global")) return SP_GLOBAL;
    if (has_mod(o, "shared") || has_mod(o, "shared::cta")) return SP_SHARED;
    if (has_mod(o, "local")) return SP_LOCAL;
    if (has_mod(o, "param")) return SP_KPARAM;
    if (has_mod(o, "const")) return SP_GLOBAL;
    return SP_GENERIC;
}

/* Resolves a memory operand into (address slot, offset, space). */
static void memory_operand(Parser *P, Operand *mo, int *space, Inst *in) {
    in->imm = (int64_t)mo->imm;
    if (mo->slot >= 0) {
        in->a = (uint32_t)mo->slot;
        if (*space == SP_KPARAM) fail(P, mo->line, "register-addressed param space is not supported");
        return;
    }
    in->a = SP_ZERO;
    if (!mo->sym[0]) return; /* absolute address */
    Name *n = find_name(P, mo->sym);
    if (!n) fail(P, mo->line, "unknown symbol %s", mo->sym);
    switch (n->kind) {
    case N_KPARAM:
        *space = SP_KPARAM;
        in->imm += (int64_t)n->value;
        return;
    case N_FRAME:
        *space = SP_FRAME;
        in->imm += (int64_t)n->value;
        return;
    case N_SHARED:
        if (*space == SP_GENERIC) {
            *space = SP_SHARED;
        }
        in->imm += (int64_t)n->value;
        return;
    case N_GLOBAL:
        in->a = const_slot(P, n->value);
        in->imm = (int64_t)mo->imm;
        return;
    default: fail(P, mo->line, "%s is not addressable", mo->sym);
    }
}

static void decode_memory(Parser *P, const Opcode *o, Operand *ops, int n, int line, int is_store) {
    int t = o->types[0];
    int vec = has_mod(o, "v4") ? 4 : has_mod(o, "v2") ? 2 : has_mod(o, "v8") ? 8 : 1;
    if (vec == 8) fail(P, line, "%s.v8 is not supported", o->base);
    if (n != 2) fail(P, line, "%s needs two operands", o->base);
    Operand *mem = is_store ? &ops[0] : &ops[1], *val = is_store ? &ops[1] : &ops[0];
    if (mem->kind != O_MEM) fail(P, line, "%s: expected a memory operand", o->base);
    int space = space_of(o);
    Inst tmp = {0};
    memory_operand(P, mem, &space, &tmp);
    int size = type_size(t);
    int op = is_store ? OP_ST : OP_LD;
    if (vec == 1 && !is_signed(t) && t != T_F16) {
        if (space == SP_GLOBAL && size == 4) op = is_store ? OP_ST_GLOBAL_32 : OP_LD_GLOBAL_32;
        else if (space == SP_GLOBAL && size == 8) op = is_store ? OP_ST_GLOBAL_64 : OP_LD_GLOBAL_64;
        else if (space == SP_SHARED && size == 4) op = is_store ? OP_ST_SHARED_32 : OP_LD_SHARED_32;
        else if (space == SP_KPARAM && size == 4 && !is_store) op = OP_LD_KPARAM_32;
        else if (space == SP_KPARAM && size == 8 && !is_store) op = OP_LD_KPARAM_64;
    }
    if (space == SP_KPARAM && is_store) fail(P, line, "st.param outside a call sequence");
    Inst *in = emit(P, op, line);
    in->a = tmp.a;
    in->imm = tmp.imm;
    in->type = (uint8_t)t;
    in->sub = (uint8_t)space;
    in->vec = (uint8_t)vec;
    if (vec == 1) {
        in->d = value_slot(P, val);
    } else {
        if (val->kind != O_VEC || val->nvec != vec) fail(P, line, "vector operand does not match .v%d", vec);
        in->d = (uint32_t)val->vec[0];
        in->b = (uint32_t)val->vec[1];
        if (vec == 4) {
            in->c = (uint32_t)val->vec[2];
            in->e = (uint32_t)val->vec[3];
        }
    }
}

static int atom_op_of(const Opcode *o) {
    static const char *NAMES[] = {"add", "min", "max", "exch", "cas", "and", "or", "xor", "inc", "dec"};
    for (int i = 0; i < 10; i++)
        if (has_mod(o, NAMES[i])) return i;
    return -1;
}

static void decode_atom(Parser *P, const Opcode *o, Operand *ops, int n, int line, int is_red) {
    int aop = atom_op_of(o);
    if (aop < 0 || o->ntypes < 1) fail(P, line, "%s: unsupported atomic operation", o->base);
    int t = o->types[o->ntypes - 1];
    if (has_mod(o, "v2") || has_mod(o, "v4")) fail(P, line, "vector atomics are not supported");
    if (t == T_F16 || t == T_BF16 || (is_float(t) && aop != AT_ADD && aop != AT_EXCH && aop != AT_MIN &&
                                      aop != AT_MAX))
        fail(P, line, "%s: unsupported atomic type", o->base);
    int space = space_of(o);
    int mem_index = is_red ? 0 : 1;
    if (n < mem_index + 2 || ops[mem_index].kind != O_MEM) fail(P, line, "%s: bad operands", o->base);
    Inst *in = emit(P, OP_ATOM, line);
    Inst tmp = {0};
    memory_operand(P, &ops[mem_index], &space, &tmp);
    in->a = tmp.a;
    in->imm = tmp.imm;
    in->sub = (uint8_t)space;
    in->sub2 = (uint8_t)aop;
    in->type = (uint8_t)t;
    in->d = is_red ? SP_SINK : value_slot(P, &ops[0]);
    in->b = value_slot(P, &ops[mem_index + 1]);
    if (aop == AT_CAS) {
        if (n < mem_index + 3) fail(P, line, "atom.cas needs a compare and a new value");
        in->c = value_slot(P, &ops[mem_index + 2]);
    }
}

/* call[.uni] [(ret)], name, [(args)]; */
static void decode_call(Parser *P, int line, Inst *guard_proto) {
    PtxModule *m = P->m;
    int ret_name = -1;
    char retbuf[96] = "";
    if (tok_is(peek(P), "(")) {
        next(P);
        if (!tok_is(peek(P), ")")) tok_copy(next(P), retbuf, sizeof retbuf), ret_name = 1;
        expect(P, ")");
        expect(P, ",");
    }
    char callee[128];
    tok_copy(next(P), callee, sizeof callee);
    char args[16][96];
    int nargs = 0;
    if (tok_is(peek(P), ",")) {
        next(P);
        expect(P, "(");
        while (!tok_is(peek(P), ")")) {
            if (nargs == 16) fail(P, line, "too many call arguments");
            Tok *a = next(P);
            if (a->s[0] == '%') fail(P, line, "call arguments in registers are not supported");
            tok_copy(a, args[nargs++], sizeof args[0]);
            if (tok_is(peek(P), ",")) next(P);
        }
        expect(P, ")");
    }
    if (!strcmp(callee, "__assertfail") || !strcmp(callee, "__assert_fail")) {
        Inst *in = emit(P, OP_TRAP, line);
        in->guard = guard_proto->guard;
        in->gneg = guard_proto->gneg;
        in->flags = F_ASSERT;
        return;
    }
    if (!strcmp(callee, "vprintf")) { /* device printf output is dropped; it returns 0 */
        if (ret_name > 0) {
            Name *r = find_name(P, retbuf);
            if (!r || r->kind != N_FRAME) fail(P, line, "bad call return %s", retbuf);
            Inst *in = emit(P, OP_ST, line);
            in->guard = guard_proto->guard;
            in->gneg = guard_proto->gneg;
            in->sub = SP_FRAME;
            in->a = SP_ZERO;
            in->imm = (int64_t)r->value;
            in->type = T_B32;
            in->vec = 1;
            in->d = SP_ZERO;
        }
        return;
    }
    if (m->ncalls % 64 == 0) m->calls = realloc(m->calls, (m->ncalls + 64) * sizeof(CallInfo));
    CallInfo *ci = &m->calls[m->ncalls];
    memset(ci, 0, sizeof *ci);
    ci->callee = -1;
    ci->nargs = nargs;
    ci->ret_off = UINT32_MAX;
    if (ret_name > 0) {
        Name *r = find_name(P, retbuf);
        if (!r || r->kind != N_FRAME) fail(P, line, "call return %s is not a .param in this function", retbuf);
        ci->ret_off = (uint32_t)r->value;
    }
    for (int i = 0; i < nargs; i++) {
        Name *a = find_name(P, args[i]);
        if (!a || a->kind != N_FRAME) fail(P, line, "call argument %s is not a .param in this function", args[i]);
        ci->arg_off[i] = (uint32_t)a->value;
    }
    if (P->ncallfix == P->capcallfix) {
        P->capcallfix = P->capcallfix ? P->capcallfix * 2 : 16;
        P->callfix = realloc(P->callfix, P->capcallfix * sizeof *P->callfix);
    }
    P->callfix[P->ncallfix].call = m->ncalls;
    snprintf(P->callfix[P->ncallfix++].name, sizeof P->callfix[0].name, "%s", callee);
    Inst *in = emit(P, OP_CALL, line);
    in->guard = guard_proto->guard;
    in->gneg = guard_proto->gneg;
    in->imm = m->ncalls++;
}

static void add_label_ref(Parser *P, uint32_t pc, Tok *t) {
    if (P->nfixups == P->capfixups) {
        P->capfixups = P->capfixups ? P->capfixups * 2 : 64;
        P->fixups = realloc(P->fixups, P->capfixups * sizeof *P->fixups);
    }
    P->fixups[P->nfixups].pc = pc;
    tok_copy(t, P->fixups[P->nfixups++].label, sizeof P->fixups[0].label);
}

static void collective(Parser *P, int line, int kind, Inst *proto, uint32_t d, uint32_t a, uint32_t b, uint32_t c,
                       uint32_t e, int flags) {
    Inst *in = emit(P, OP_COLLECTIVE, line);
    in->guard = proto->guard;
    in->gneg = proto->gneg;
    in->sub = (uint8_t)kind;
    in->d = d, in->a = a, in->b = b, in->c = c, in->e = e;
    in->flags = (uint8_t)flags;
}

/* Decodes one instruction (the opcode token already read). */
static void decode_instruction(Parser *P, Tok *optok, int guard, int gneg) {
    Opcode o;
    split_opcode(P, optok, &o);
    int line = optok->line;
    Inst proto = {0};
    proto.guard = (uint32_t)guard;
    proto.gneg = (uint8_t)gneg;
    const char *b = o.base;
    if (!strcmp(b, "call")) {
        decode_call(P, line, &proto);
        expect(P, ";");
        return;
    }
    Operand ops[8];
    int n = read_operands(P, ops, 8);
    expect(P, ";");
    int t = o.ntypes ? o.types[o.ntypes - 1] : T_NONE;
    int rnd = rounding_of(&o);
    uint32_t start = P->m->ncode;
#define SLOT(i) value_slot(P, &ops[i])
#define NEED(k) do { if (n < (k)) fail(P, line, "%s needs %d operands", optok->len ? b : "?", k); } while (0)
#define IEEE_ONLY() do { if (rnd == R_RZ || rnd == R_RM || rnd == R_RP) \
        fail(P, line, "%.*s: rounding modes other than .rn are not supported", optok->len, optok->s); } while (0)
#define EMIT3(op) do { NEED(3); Inst *in_ = emit(P, (op), line); in_->d = SLOT(0); in_->a = SLOT(1); \
        in_->b = SLOT(2); in_->type = (uint8_t)t; } while (0)
#define EMIT2(op) do { NEED(2); Inst *in_ = emit(P, (op), line); in_->d = SLOT(0); in_->a = SLOT(1); \
        in_->type = (uint8_t)t; } while (0)
#define EMIT4(op) do { NEED(4); Inst *in_ = emit(P, (op), line); in_->d = SLOT(0); in_->a = SLOT(1); \
        in_->b = SLOT(2); in_->c = SLOT(3); in_->type = (uint8_t)t; } while (0)
    if (!strcmp(b, "mov")) {
        NEED(2);
        if (ops[0].kind == O_VEC) { /* unpack */
            Inst *in = emit(P, t == T_B64 || t == T_U64 || t == T_F64 ? OP_MOV_UNPACK64 : OP_MOV_UNPACK32, line);
            in->a = SLOT(1);
            in->d = (uint32_t)ops[0].vec[0];
            in->b = (uint32_t)ops[0].vec[1];
        } else if (ops[1].kind == O_VEC) {
            Inst *in = emit(P, t == T_B64 || t == T_U64 || t == T_F64 ? OP_MOV_PACK64 : OP_MOV_PACK32, line);
            in->d = SLOT(0);
            in->a = (uint32_t)ops[1].vec[0];
            in->b = (uint32_t)ops[1].vec[1];
        } else if (ops[1].kind == O_SYM) {
            Name *nm = find_name(P, ops[1].sym);
            if (!nm) fail(P, line, "unknown symbol %s", ops[1].sym);
            if (nm->kind == N_FRAME) {
                Inst *in = emit(P, OP_LOCAL_ADDR, line);
                in->d = SLOT(0);
                in->imm = (int64_t)nm->value;
            } else if (nm->kind == N_SHARED || nm->kind == N_GLOBAL) {
                EMIT2(OP_MOV);
            } else {
                fail(P, line, "mov of the address of %s is not supported", ops[1].sym);
            }
        } else {
            EMIT2(OP_MOV);
        }
    } else if (!strcmp(b, "add") || !strcmp(b, "sub")) {
        if (has_mod(&o, "cc") || has_mod(&o, "sat")) fail(P, line, "%s.cc/.sat is not supported", b);
        IEEE_ONLY();
        int add = b[0] == 'a';
        EMIT3(pick(P, line, b, t, add ? (TypedOps){OP_ADD_I16, OP_ADD_I16, OP_ADD_I32, OP_ADD_I32, OP_ADD_I64,
                                                   OP_ADD_I64, OP_ADD_F32, OP_ADD_F64}
                                       : (TypedOps){OP_SUB_I16, OP_SUB_I16, OP_SUB_I32, OP_SUB_I32, OP_SUB_I64,
                                                   OP_SUB_I64, OP_SUB_F32, OP_SUB_F64}));
    } else if (!strcmp(b, "mul")) {
        IEEE_ONLY();
        if (has_mod(&o, "wide"))
            EMIT3(pick(P, line, b, t, (TypedOps){OP_MUL_WIDE_S16, OP_MUL_WIDE_U16, OP_MUL_WIDE_S32, OP_MUL_WIDE_U32,
                                                 NO, NO, NO, NO}));
        else if (has_mod(&o, "hi"))
            EMIT3(pick(P, line, b, t, (TypedOps){NO, NO, OP_MUL_HI_S32, OP_MUL_HI_U32, OP_MUL_HI_S64, OP_MUL_HI_U64,
                                                 NO, NO}));
        else
            EMIT3(pick(P, line, b, t, (TypedOps){OP_MUL_LO_I16, OP_MUL_LO_I16, OP_MUL_LO_I32, OP_MUL_LO_I32,
                                                 OP_MUL_LO_I64, OP_MUL_LO_I64, OP_MUL_F32, OP_MUL_F64}));
    } else if (!strcmp(b, "mul24") || !strcmp(b, "mad24")) {
        if (has_mod(&o, "hi")) fail(P, line, "%s.hi is not supported", b);
        if (b[1] == 'u') EMIT3(pick(P, line, b, t, (TypedOps){NO, NO, OP_MUL24_LO_S32, OP_MUL24_LO_U32, NO, NO, NO, NO}));
        else EMIT4(pick(P, line, b, t, (TypedOps){NO, NO, OP_MAD24_LO_S32, OP_MAD24_LO_U32, NO, NO, NO, NO}));
    } else if (!strcmp(b, "mad") || !strcmp(b, "fma")) {
        IEEE_ONLY();
        if (has_mod(&o, "cc") || has_mod(&o, "sat")) fail(P, line, "%s.cc/.sat is not supported", b);
        if (is_float(t)) EMIT4(pick(P, line, b, t, (TypedOps){NO, NO, NO, NO, NO, NO, OP_FMA_F32, OP_FMA_F64}));
        else if (has_mod(&o, "wide"))
            EMIT4(pick(P, line, b, t, (TypedOps){OP_MAD_WIDE_S16, OP_MAD_WIDE_U16, OP_MAD_WIDE_S32, OP_MAD_WIDE_U32,
                                                 NO, NO, NO, NO}));
        else if (has_mod(&o, "hi"))
            EMIT4(pick(P, line, b, t, (TypedOps){NO, NO, OP_MAD_HI_S32, OP_MAD_HI_U32, OP_MAD_HI_S64, OP_MAD_HI_U64,
                                                 NO, NO}));
        else
            EMIT4(pick(P, line, b, t, (TypedOps){OP_MAD_LO_I16, OP_MAD_LO_I16, OP_MAD_LO_I32, OP_MAD_LO_I32,
                                                 OP_MAD_LO_I64, OP_MAD_LO_I64, NO, NO}));
    } else if (!strcmp(b, "div")) {
        IEEE_ONLY();
        EMIT3(pick(P, line, b, t, (TypedOps){OP_DIV_S16, OP_DIV_U16, OP_DIV_S32, OP_DIV_U32, OP_DIV_S64, OP_DIV_U64,
                                             OP_DIV_F32, OP_DIV_F64}));
    } else if (!strcmp(b, "rem")) {
        EMIT3(pick(P, line, b, t, (TypedOps){OP_REM_S16, OP_REM_U16, OP_REM_S32, OP_REM_U32, OP_REM_S64, OP_REM_U64,
                                             NO, NO}));
    } else if (!strcmp(b, "min") || !strcmp(b, "max")) {
        if (has_mod(&o, "NaN") || has_mod(&o, "relu") || has_mod(&o, "xorsign"))
            fail(P, line, "%s with .NaN/.relu/.xorsign is not supported", b);
        int mx = b[1] == 'a';
        EMIT3(pick(P, line, b, t, mx ? (TypedOps){OP_MAX_S16, OP_MAX_U16, OP_MAX_S32, OP_MAX_U32, OP_MAX_S64,
                                                  OP_MAX_U64, OP_MAX_F32, OP_MAX_F64}
                                      : (TypedOps){OP_MIN_S16, OP_MIN_U16, OP_MIN_S32, OP_MIN_U32, OP_MIN_S64,
                                                  OP_MIN_U64, OP_MIN_F32, OP_MIN_F64}));
    } else if (!strcmp(b, "abs")) {
        EMIT2(pick(P, line, b, t, (TypedOps){OP_ABS_S16, NO, OP_ABS_S32, NO, OP_ABS_S64, NO, OP_ABS_F32, OP_ABS_F64}));
    } else if (!strcmp(b, "neg")) {
        EMIT2(pick(P, line, b, t, (TypedOps){OP_NEG_I16, OP_NEG_I16, OP_NEG_I32, OP_NEG_I32, OP_NEG_I64, OP_NEG_I64,
                                             OP_NEG_F32, OP_NEG_F64}));
    } else if (!strcmp(b, "and") || !strcmp(b, "or") || !strcmp(b, "xor")) {
        EMIT3(b[0] == 'a' ? OP_AND : b[0] == 'o' ? OP_OR : OP_XOR);
    } else if (!strcmp(b, "not")) {
        EMIT2(t == T_PRED ? OP_NOT_PRED : OP_NOT);
        P->m->code[P->m->ncode - 1].type = (uint8_t)t;
    } else if (!strcmp(b, "cnot")) {
        EMIT2(OP_CNOT);
    } else if (!strcmp(b, "lop3")) {
        NEED(5);
        Inst *in = emit(P, OP_LOP3, line);
        in->d = SLOT(0), in->a = SLOT(1), in->b = SLOT(2), in->c = SLOT(3);
        if (ops[4].kind != O_IMM) fail(P, line, "lop3 needs an immediate truth table");
        in->imm = (int64_t)ops[4].imm;
    } else if (!strcmp(b, "shl")) {
        EMIT3(pick(P, line, b, t, (TypedOps){OP_SHL_16, OP_SHL_16, OP_SHL_32, OP_SHL_32, OP_SHL_64, OP_SHL_64, NO, NO}));
    } else if (!strcmp(b, "shr")) {
        EMIT3(pick(P, line, b, t, (TypedOps){OP_SHR_S16, OP_SHR_U16, OP_SHR_S32, OP_SHR_U32, OP_SHR_S64, OP_SHR_U64,
                                             NO, NO}));
    } else if (!strcmp(b, "popc") || !strcmp(b, "clz") || !strcmp(b, "brev")) {
        int wide = type_size(t) == 8;
        EMIT2(b[0] == 'p' ? (wide ? OP_POPC_64 : OP_POPC_32) : b[0] == 'c' ? (wide ? OP_CLZ_64 : OP_CLZ_32)
                                                                          : (wide ? OP_BREV_64 : OP_BREV_32));
    } else if (!strcmp(b, "bfe")) {
        EMIT4(pick(P, line, b, t, (TypedOps){NO, NO, OP_BFE_S32, OP_BFE_U32, OP_BFE_S64, OP_BFE_U64, NO, NO}));
    } else if (!strcmp(b, "bfi")) {
        NEED(5);
        Inst *in = emit(P, type_size(t) == 8 ? OP_BFI_64 : OP_BFI_32, line);
        in->d = SLOT(0), in->a = SLOT(1), in->b = SLOT(2), in->c = SLOT(3), in->e = SLOT(4);
    } else if (!strcmp(b, "prmt")) {
        if (o.nmods > 1) fail(P, line, "prmt modes are not supported");
        EMIT4(OP_PRMT);
    } else if (!strcmp(b, "bfind")) {
        EMIT2(pick(P, line, b, t, (TypedOps){NO, NO, OP_BFIND_S32, OP_BFIND_U32, OP_BFIND_S64, OP_BFIND_U64, NO, NO}));
        if (has_mod(&o, "shiftamt")) P->m->code[P->m->ncode - 1].flags = F_SHIFTAMT;
    } else if (!strcmp(b, "setp")) {
        NEED(3);
        int cmp = o.nmods ? cmp_of(o.mods[0]) : -1;
        if (cmp < 0) fail(P, line, "setp: unknown comparison");
        int boolop = has_mod(&o, "and") ? 1 : has_mod(&o, "or") ? 2 : has_mod(&o, "xor") ? 3 : 0;
        int op = pick(P, line, b, t, (TypedOps){OP_SETP_S16, OP_SETP_U16, OP_SETP_S32, OP_SETP_U32, OP_SETP_S64,
                                                OP_SETP_U64, OP_SETP_F32, OP_SETP_F64});
        Inst *in = emit(P, op, line);
        in->d = (uint32_t)ops[0].slot;
        in->e = ops[0].slot2 >= 0 ? (uint32_t)ops[0].slot2 : SP_SINK;
        in->a = SLOT(1), in->b = SLOT(2);
        in->sub = (uint8_t)cmp;
        in->sub2 = (uint8_t)boolop;
        if (boolop) {
            NEED(4);
            in->c = SLOT(3);
            if (ops[3].neg) in->flags |= F_NEG_C;
        }
    } else if (!strcmp(b, "selp")) {
        EMIT4(OP_SELP);
    } else if (!strcmp(b, "cvt")) {
        NEED(2);
        if (o.ntypes != 2) fail(P, line, "cvt needs two types");
        int dt = o.types[0], st = o.types[1];
        if ((dt == T_BF16 || st == T_BF16) || has_mod(&o, "f16x2") || has_mod(&o, "relu"))
            fail(P, line, "cvt with bf16/f16x2/relu is not supported");
        if (is_float(dt) && (rnd == R_RZ || rnd == R_RM || rnd == R_RP) && !(is_float(st) && type_size(st) < type_size(dt)))
            fail(P, line, "cvt rounding mode other than .rn is not supported");
        Inst *in = emit(P, OP_CVT, line);
        in->d = SLOT(0), in->a = SLOT(1);
        in->type = (uint8_t)dt;
        in->sub = (uint8_t)st;
        in->sub2 = (uint8_t)rnd;
        if (has_mod(&o, "sat")) in->flags |= F_SAT;
    } else if (!strcmp(b, "cvta")) {
        int to = has_mod(&o, "to");
        int op = OP_MOV;
        if (has_mod(&o, "shared")) op = to ? OP_CVTA_TO_SHARED : OP_CVTA_SHARED;
        else if (has_mod(&o, "local")) op = to ? OP_CVTA_TO_LOCAL : OP_CVTA_LOCAL;
        else if (has_mod(&o, "param")) fail(P, line, "cvta.param is not supported");
        EMIT2(op);
    } else if (!strcmp(b, "isspacep")) {
        EMIT2(OP_ISSPACEP);
        P->m->code[P->m->ncode - 1].sub = (uint8_t)space_of(&o);
    } else if (!strcmp(b, "sqrt") || !strcmp(b, "rsqrt") || !strcmp(b, "rcp")) {
        IEEE_ONLY();
        int f64 = t == T_F64;
        EMIT2(b[0] == 's' ? (f64 ? OP_SQRT_F64 : OP_SQRT_F32) : b[1] == 's' ? (f64 ? OP_RSQRT_F64 : OP_RSQRT_F32)
                                                                            : (f64 ? OP_RCP_F64 : OP_RCP_F32));
    } else if (!strcmp(b, "ex2") || !strcmp(b, "lg2") || !strcmp(b, "sin") || !strcmp(b, "cos") ||
               !strcmp(b, "tanh")) {
        if (t != T_F32) fail(P, line, "%s is supported for .f32 only", b);
        EMIT2(b[0] == 'e' ? OP_EX2_F32 : b[0] == 'l' ? OP_LG2_F32 : b[0] == 's' ? OP_SIN_F32
                                                                  : b[0] == 'c' ? OP_COS_F32 : OP_TANH_F32);
    } else if (!strcmp(b, "testp")) {
        static const char *KINDS[] = {"finite", "infinite", "number", "notanumber", "normal", "subnormal"};
        int kind = -1;
        for (int i = 0; i < 6; i++)
            if (has_mod(&o, KINDS[i])) kind = i;
        if (kind < 0) fail(P, line, "testp: unknown test");
        EMIT2(t == T_F64 ? OP_TESTP_F64 : OP_TESTP_F32);
        P->m->code[P->m->ncode - 1].sub = (uint8_t)kind;
    } else if (!strcmp(b, "copysign")) {
        EMIT3(t == T_F64 ? OP_COPYSIGN_F64 : OP_COPYSIGN_F32);
    } else if (!strcmp(b, "ld") || !strcmp(b, "ldu")) {
        decode_memory(P, &o, ops, n, line, 0);
    } else if (!strcmp(b, "st")) {
        decode_memory(P, &o, ops, n, line, 1);
    } else if (!strcmp(b, "atom")) {
        decode_atom(P, &o, ops, n, line, 0);
    } else if (!strcmp(b, "red")) {
        decode_atom(P, &o, ops, n, line, 1);
    } else if (!strcmp(b, "bra")) {
        NEED(1);
        if (ops[0].kind != O_SYM) fail(P, line, "bra needs a label");
        Inst *in = emit(P, OP_BRA, line);
        (void)in;
        Tok fake = {ops[0].sym, (int)strlen(ops[0].sym), line};
        add_label_ref(P, P->m->ncode - 1, &fake);
    } else if (!strcmp(b, "ret")) {
        emit(P, OP_RET, line);
    } else if (!strcmp(b, "exit")) {
        emit(P, OP_EXIT, line);
    } else if (!strcmp(b, "trap") || !strcmp(b, "brkpt")) {
        emit(P, OP_TRAP, line);
    } else if (!strcmp(b, "membar") || !strcmp(b, "fence") || !strcmp(b, "prefetch") || !strcmp(b, "prefetchu") ||
               !strcmp(b, "nanosleep") || !strcmp(b, "griddepcontrol") || !strcmp(b, "discard") ||
               !strcmp(b, "pmevent")) {
        emit(P, OP_NOP, line); /* ordering: the interpreter is sequentially consistent; hints: nothing */
    } else if (!strcmp(b, "bar") || !strcmp(b, "barrier")) {
        if (has_mod(&o, "warp")) {
            collective(P, line, COL_WARP_SYNC, &proto, SP_SINK, SP_SINK, SP_SINK, SP_SINK, SP_SINK, 0);
        } else if (has_mod(&o, "red")) {
            NEED(3);
            int kind = has_mod(&o, "popc") ? COL_BAR_RED_POPC : has_mod(&o, "and") ? COL_BAR_RED_AND : COL_BAR_RED_OR;
            Operand *pred = &ops[n - 1];
            collective(P, line, kind, &proto, SLOT(0), (uint32_t)pred->slot, SP_SINK, SP_SINK, SP_SINK,
                       pred->neg ? F_NEG_C : 0);
        } else if (has_mod(&o, "arrive")) {
            fail(P, line, "bar.arrive is not supported");
        } else {
            collective(P, line, COL_BAR, &proto, SP_SINK, SP_SINK, SP_SINK, SP_SINK, SP_SINK, 0);
        }
        return;
    } else if (!strcmp(b, "shfl")) {
        NEED(4);
        int kind = has_mod(&o, "up") ? COL_SHFL_UP : has_mod(&o, "down") ? COL_SHFL_DOWN
                 : has_mod(&o, "bfly") ? COL_SHFL_BFLY : COL_SHFL_IDX;
        collective(P, line, kind, &proto, (uint32_t)ops[0].slot, SLOT(1), SLOT(2), SLOT(3),
                   ops[0].slot2 >= 0 ? (uint32_t)ops[0].slot2 : SP_SINK, 0);
        return;
    } else if (!strcmp(b, "vote")) {
        NEED(2);
        int kind = has_mod(&o, "all") ? COL_VOTE_ALL : has_mod(&o, "any") ? COL_VOTE_ANY
                 : has_mod(&o, "uni") ? COL_VOTE_UNI : COL_VOTE_BALLOT;
        collective(P, line, kind, &proto, SLOT(0), (uint32_t)ops[1].slot, SP_SINK, SP_SINK, SP_SINK,
                   ops[1].neg ? F_NEG_C : 0);
        return;
    } else if (!strcmp(b, "redux")) {
        NEED(2);
        static const char *KINDS[] = {"add", "min", "max", "and", "or", "xor"};
        int kind = -1;
        for (int i = 0; i < 6; i++)
            if (has_mod(&o, KINDS[i])) kind = COL_REDUX_ADD + i;
        if (kind < 0 || is_float(t)) fail(P, line, "redux: unsupported form");
        collective(P, line, kind, &proto, SLOT(0), SLOT(1), SP_SINK, SP_SINK, SP_SINK, 0);
        P->m->code[P->m->ncode - 1].type = (uint8_t)t;
        return;
    } else if (!strcmp(b, "activemask")) {
        NEED(1);
        Inst *in = emit(P, OP_ACTIVEMASK, line);
        in->d = SLOT(0);
    } else {
        fail(P, line, "unsupported instruction %.*s", optok->len, optok->s);
    }
    for (uint32_t i = start; i < P->m->ncode; i++) {
        P->m->code[i].guard = (uint32_t)guard;
        P->m->code[i].gneg = (uint8_t)gneg;
    }
#undef SLOT
#undef NEED
#undef IEEE_ONLY
#undef EMIT2
#undef EMIT3
#undef EMIT4
}

/* ---- declarations ---- */

static uint32_t align_up(uint32_t v, uint32_t a) { return a ? (v + a - 1) / a * a : v; }

/* [.align N] .type name[<N>|[N]] -> name, element size, count (0 for name[]), alignment. */
typedef struct Decl {
    char name[96];
    int type;
    uint32_t elem, count, align;
    int range; /* name<N> */
    int unsized;
} Decl;

static void parse_decl(Parser *P, Decl *d) {
    memset(d, 0, sizeof *d);
    d->count = 1;
    for (;;) {
        Tok *t = peek(P);
        if (tok_is(t, ".align")) {
            next(P);
            int f;
            d->align = (uint32_t)parse_number(P, next(P), 0, &f);
        } else if (t->len > 1 && t->s[0] == '.') {
            char buf[24];
            tok_copy(t, buf, sizeof buf);
            int ty = type_of(buf + 1);
            if (ty == T_NONE) {
                if (!strcmp(buf, ".ptr") || !strcmp(buf, ".global") || !strcmp(buf, ".const") ||
                    !strcmp(buf, ".shared") || !strcmp(buf, ".local") || !strcmp(buf, ".v2") || !strcmp(buf, ".v4")) {
                    if (!strcmp(buf, ".v2")) d->count *= 2;
                    if (!strcmp(buf, ".v4")) d->count *= 4;
                    next(P);
                    continue;
                }
                fail(P, t->line, "unsupported declaration modifier %s", buf);
            }
            d->type = ty;
            d->elem = (uint32_t)type_size(ty);
            next(P);
        } else {
            break;
        }
    }
    Tok *name = next(P);
    tok_copy(name, d->name, sizeof d->name);
    if (tok_is(peek(P), "<")) {
        next(P);
        int f;
        d->count = (uint32_t)parse_number(P, next(P), 0, &f);
        d->range = 1;
        expect(P, ">");
    }
    while (tok_is(peek(P), "[")) {
        next(P);
        if (tok_is(peek(P), "]")) {
            d->unsized = 1;
            d->count = 0;
        } else {
            int f;
            d->count *= (uint32_t)parse_number(P, next(P), 0, &f);
        }
        expect(P, "]");
    }
    if (!d->align) d->align = d->elem ? d->elem : 1;
}

static void skip_initializer(Parser *P, uint8_t *dst, uint32_t elem, uint32_t max) {
    /* = value | = { v, v, ... } (nested braces flattened) */
    next(P);
    int depth = 0;
    uint32_t i = 0;
    do {
        Tok *t = next(P);
        if (tok_is(t, "{")) depth++;
        else if (tok_is(t, "}")) depth--;
        else if (tok_is(t, ",")) continue;
        else if (!t->len) fail(P, 0, "unterminated initializer");
        else {
            int neg = 0;
            if (tok_is(t, "-")) { neg = 1; t = next(P); }
            if (!is_number_start(t)) fail(P, t->line, "only numeric initializers are supported");
            int f;
            uint64_t v = parse_number(P, t, neg, &f);
            if (dst && (i + 1) * elem <= max) memcpy(dst + i * elem, &v, elem);
            i++;
        }
    } while (depth > 0);
}

static void module_variable(Parser *P, int space, int line) {
    Decl d;
    parse_decl(P, &d);
    PtxModule *m = P->m;
    if (space == SP_SHARED) {
        for (int i = 0; i < P->nshared; i++)
            if (!strcmp(P->shared[i].name, d.name)) add_name(P, d.name, N_SHARED, P->shared[i].offset, 0);
        if (d.unsized) m->uses_dynamic_shared = 1;
    } else {
        uint64_t size = (uint64_t)d.elem * (d.count ? d.count : 1);
        uint64_t addr;
        if (mem_alloc(P->ctx, size, A_MODULE_GLOBAL, &addr)) fail(P, line, "out of memory for global %s", d.name);
        memset((void *)(uintptr_t)addr, 0, size);
        if (tok_is(peek(P), "=")) skip_initializer(P, (uint8_t *)(uintptr_t)addr, d.elem, (uint32_t)size);
        int i = m->nglobals++;
        m->global_names = realloc(m->global_names, m->nglobals * sizeof(char *));
        m->global_addrs = realloc(m->global_addrs, m->nglobals * sizeof(uint64_t));
        m->global_sizes = realloc(m->global_sizes, m->nglobals * sizeof(uint64_t));
        m->global_names[i] = strdup(d.name);
        m->global_addrs[i] = addr;
        m->global_sizes[i] = size;
        add_name(P, d.name, N_GLOBAL, addr, 0);
    }
    if (tok_is(peek(P), "=")) skip_initializer(P, NULL, 0, 0);
    expect(P, ";");
}

/* Lays out every static .shared variable of the module (module level and inside functions) before
 * decoding, so dynamic shared memory (extern .shared x[]) can start, 16-byte aligned, after all of them. */
static void layout_shared(Parser *P) {
    int dynamic_count = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < P->ntoks; i++) {
            if (!tok_is(&P->toks[i], ".shared")) continue;
            P->pos = i + 1;
            Decl d;
            parse_decl(P, &d);
            if (d.unsized != (pass == 1)) continue;
            uint32_t off;
            if (d.unsized) {
                off = align_up(P->m->shared_static, 16);
                dynamic_count++;
            } else {
                off = align_up(P->m->shared_static, d.align);
                P->m->shared_static = off + d.elem * d.count;
            }
            P->shared = realloc(P->shared, (P->nshared + 1) * sizeof *P->shared);
            snprintf(P->shared[P->nshared].name, sizeof P->shared[0].name, "%s", d.name);
            P->shared[P->nshared++].offset = off;
        }
    P->m->shared_static = align_up(P->m->shared_static, 16);
    P->m->uses_dynamic_shared = dynamic_count > 0;
    P->pos = 0;
}

static int function_index(Parser *P, const char *name, int create) {
    PtxModule *m = P->m;
    for (int i = 0; i < m->nfuncs; i++)
        if (!strcmp(m->funcs[i].name, name)) return i;
    if (!create) return -1;
    m->funcs = realloc(m->funcs, (m->nfuncs + 1) * sizeof(PtxFunction));
    PtxFunction *f = &m->funcs[m->nfuncs];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    return m->nfuncs++;
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
        uint32_t size = d.elem * (d.count ? d.count : 1);
        if (f->is_entry) {
            uint32_t off = align_up(f->param_bytes, d.align);
            f->params = realloc(f->params, (f->nparams + 1) * sizeof(PtxParam));
            PtxParam *p = &f->params[f->nparams++];
            snprintf(p->name, sizeof p->name, "%s", d.name);
            p->offset = off, p->size = size, p->align = d.align;
            f->param_bytes = off + size;
        } else {
            uint32_t off = align_up(*frame, d.align < 8 ? 8 : d.align);
            *frame = off + size;
            if (is_ret) {
                f->has_ret = 1;
                f->ret_off = off;
                f->ret_size = size;
            } else {
                f->params = realloc(f->params, (f->nparams + 1) * sizeof(PtxParam));
                PtxParam *p = &f->params[f->nparams++];
                snprintf(p->name, sizeof p->name, "%s", d.name);
                p->offset = off, p->size = size, p->align = d.align;
            }
        }
        if (tok_is(peek(P), ",")) next(P);
    }
    expect(P, ")");
}

static void finish_function(Parser *P, PtxFunction *f, uint32_t frame) {
    PtxModule *m = P->m;
    f->const_base = SP_COUNT + P->nregs;
    f->nconsts = P->nconsts;
    f->nslots = f->const_base + P->nconsts;
    f->consts = malloc((P->nconsts + 1) * sizeof(uint64_t));
    memcpy(f->consts, P->consts, P->nconsts * sizeof(uint64_t));
    f->frame_local = align_up(frame, 16);
    f->end_pc = m->ncode;
    for (uint32_t pc = f->entry_pc; pc < m->ncode; pc++) {
        Inst *in = &m->code[pc];
        uint32_t *fields[] = {&in->d, &in->a, &in->b, &in->c, &in->e, &in->guard};
        for (int k = 0; k < 6; k++)
            if (*fields[k] & 0x80000000u) *fields[k] = f->const_base + (*fields[k] & 0x7FFFFFFFu);
    }
    for (int i = 0; i < P->nfixups; i++) {
        int found = -1;
        for (int k = 0; k < P->nlabels; k++)
            if (!strcmp(P->labels[k].label, P->fixups[i].label)) found = (int)P->labels[k].pc;
        if (found < 0) fail(P, f->line, "unknown label %s in %s", P->fixups[i].label, f->name);
        m->code[P->fixups[i].pc].imm = found;
    }
}

static void function_body(Parser *P, PtxFunction *f, uint32_t frame) {
    PtxModule *m = P->m;
    P->nnames = P->module_names;
    P->nregs = 0;
    P->nconsts = 0;
    P->nfixups = P->nlabels = 0;
    f->entry_pc = m->ncode;
    f->defined = 1;
    /* parameters become names: kernel params in the launch buffer, function params in the frame */
    for (int i = 0; i < f->nparams; i++)
        add_name(P, f->params[i].name, f->is_entry ? N_KPARAM : N_FRAME, f->params[i].offset, 0);
    if (f->has_ret) add_name(P, "func_retval0", N_FRAME, f->ret_off, 0);
    expect(P, "{");
    int depth = 1;
    while (depth > 0) {
        Tok *t = next(P);
        if (!t->len) fail(P, f->line, "unterminated body of %s", f->name);
        if (tok_is(t, "{")) { depth++; continue; }
        if (tok_is(t, "}")) { depth--; continue; }
        if (tok_is(t, ".reg")) {
            for (;;) {
                Decl d;
                parse_decl(P, &d);
                add_name(P, d.name, d.range ? N_REGRANGE : N_REG, SP_COUNT + P->nregs, d.count);
                P->nregs += d.range ? d.count : 1;
                if (!tok_is(peek(P), ",")) break;
                next(P);
            }
            expect(P, ";");
            continue;
        }
        if (tok_is(t, ".local") || tok_is(t, ".param")) {
            Decl d;
            parse_decl(P, &d);
            uint32_t size = d.elem * (d.count ? d.count : 1);
            uint32_t off = align_up(frame, d.align < 8 ? 8 : d.align);
            frame = off + size;
            add_name(P, d.name, N_FRAME, off, 0);
            if (tok_is(peek(P), "=")) skip_initializer(P, NULL, 0, 0);
            expect(P, ";");
            continue;
        }
        if (tok_is(t, ".shared") || tok_is(t, ".global") || tok_is(t, ".const")) {
            int save_names = P->nnames;
            module_variable(P, tok_is(t, ".shared") ? SP_SHARED : SP_GLOBAL, t->line);
            (void)save_names;
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
            if (P->nlabels == P->caplabels) {
                P->caplabels = P->caplabels ? P->caplabels * 2 : 64;
                P->labels = realloc(P->labels, P->caplabels * sizeof *P->labels);
            }
            P->labels[P->nlabels].pc = m->ncode;
            tok_copy(t, P->labels[P->nlabels++].label, sizeof P->labels[0].label);
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
    char fname[128];
    tok_copy(name, fname, sizeof fname);
    int idx = function_index(P, fname, 1);
    PtxFunction *f = &P->m->funcs[idx];
    int was_defined = f->defined;
    *f = proto;
    snprintf(f->name, sizeof f->name, "%s", fname);
    f->line = name->line;
    if (tok_is(peek(P), "(")) param_list(P, f, 0, &frame);
    for (;;) { /* performance directives */
        Tok *t = peek(P);
        if (tok_is(t, ".maxntid") || tok_is(t, ".reqntid")) {
            int req = t->s[1] == 'r';
            next(P);
            uint32_t total = 1;
            for (;;) {
                int fl;
                total *= (uint32_t)parse_number(P, next(P), 0, &fl);
                if (!tok_is(peek(P), ",")) break;
                next(P);
            }
            if (req) f->reqntid = total;
            else f->maxntid = total;
        } else if (tok_is(t, ".minnctapersm") || tok_is(t, ".maxnreg") || tok_is(t, ".maxclusterrank") ||
                   tok_is(t, ".noreturn")) {
            next(P);
            if (!tok_is(t, ".noreturn")) next(P);
        } else if (tok_is(t, ".pragma")) {
            while (!tok_is(next(P), ";")) {}
        } else {
            break;
        }
    }
    if (tok_is(peek(P), ";")) {
        next(P);
        f->defined = was_defined;
        return;
    }
    function_body(P, f, frame);
}

/* Computes each function's deepest call chain (registers and local bytes) and rejects recursion. */
static void stack_needs(Parser *P, int fi, int *state) {
    PtxModule *m = P->m;
    PtxFunction *f = &m->funcs[fi];
    if (state[fi] == 2) return;
    if (state[fi] == 1) fail(P, f->line, "recursion (through %s) is not supported", f->name);
    state[fi] = 1;
    uint32_t slots = 0, local = 0;
    for (uint32_t pc = f->entry_pc; pc < f->end_pc; pc++) {
        if (m->code[pc].op != OP_CALL) continue;
        int callee = m->calls[m->code[pc].imm].callee;
        stack_needs(P, callee, state);
        if (m->funcs[callee].stack_slots > slots) slots = m->funcs[callee].stack_slots;
        if (m->funcs[callee].stack_local > local) local = m->funcs[callee].stack_local;
    }
    f->stack_slots = f->nslots + slots;
    f->stack_local = f->frame_local + local;
    state[fi] = 2;
}

PtxModule *ptx_load(const char *text, Context *ctx, char *err, size_t errlen) {
    Parser *P = calloc(1, sizeof *P);
    P->err = err;
    P->errlen = errlen;
    P->ctx = ctx;
    P->m = calloc(1, sizeof(PtxModule));
    PtxModule *m = P->m;
    if (setjmp(P->fail)) {
        for (int i = 0; i < m->nglobals; i++) mem_free(m->global_addrs[i], 1 << A_MODULE_GLOBAL);
        ptx_free(m);
        free(P->toks), free(P->names), free(P->fixups), free(P->labels), free(P->callfix), free(P->consts);
        free(P->shared);
        free(P);
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
                char target[32];
                tok_copy(a, target, sizeof target);
                if (!strncmp(target, "sm_", 3) && atoi(target + 3) > 90)
                    fail(P, a->line, ".target %s is newer than the simulated device (sm_90)", target);
                if (!tok_is(peek(P), ",")) break;
                next(P);
            }
        } else if (tok_is(t, ".address_size")) {
            int f;
            if (parse_number(P, next(P), 0, &f) != 64) fail(P, t->line, "only .address_size 64 is supported");
        } else if (tok_is(t, ".visible") || tok_is(t, ".extern") || tok_is(t, ".weak") || tok_is(t, ".common")) {
            continue;
        } else if (tok_is(t, ".entry")) {
            function_decl(P, 1);
        } else if (tok_is(t, ".func")) {
            function_decl(P, 0);
        } else if (tok_is(t, ".global") || tok_is(t, ".const")) {
            module_variable(P, SP_GLOBAL, t->line);
            P->module_names = P->nnames;
        } else if (tok_is(t, ".shared")) {
            module_variable(P, SP_SHARED, t->line);
            P->module_names = P->nnames;
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
        if (P->nnames > P->module_names && !tok_is(t, ".entry") && !tok_is(t, ".func")) P->module_names = P->nnames;
        if (tok_is(t, ".entry") || tok_is(t, ".func")) P->nnames = P->module_names;
    }
    if (!saw_target) fail(P, 1, "no .target directive: is this PTX text?");
    for (int i = 0; i < P->ncallfix; i++) {
        int callee = function_index(P, P->callfix[i].name, 0);
        if (callee < 0 || !m->funcs[callee].defined)
            fail(P, m->lines[0], "call to %s, which is not defined in this module", P->callfix[i].name);
        m->calls[P->callfix[i].call].callee = callee;
    }
    int *state = calloc((size_t)m->nfuncs + 1, sizeof(int));
    for (int i = 0; i < m->nfuncs; i++)
        if (m->funcs[i].defined) stack_needs(P, i, state);
    free(state);
    free(P->toks), free(P->names), free(P->fixups), free(P->labels), free(P->callfix), free(P->consts);
    free(P->shared);
    free(P);
    return m;
}

void ptx_free(PtxModule *m) {
    if (!m) return;
    for (int i = 0; i < m->nfuncs; i++) free(m->funcs[i].params), free(m->funcs[i].consts);
    for (int i = 0; i < m->nglobals; i++) free(m->global_names[i]);
    free(m->funcs), free(m->code), free(m->lines), free(m->calls);
    free(m->global_names), free(m->global_addrs), free(m->global_sizes);
    free(m);
}
