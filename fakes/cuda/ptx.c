/* PTX parser and decoder: PTX text (what NVRTC emits) -> PtxModule, decoded once into fixed-size Insts
 * whose operands are all register-file slots (immediates become per-function constant slots).
 * The decoder is a table (INSTRUCTIONS below: mnemonic, the opcode per type, the accepted modifiers); an
 * instruction, type or modifier the table does not list fails the load with the line, never a silent wrong
 * answer. The same table generates the coverage document (ironaccel_fake_ptx_coverage, PTX_COVERAGE.md).
 * Names of any length are supported: tokens point into the PTX text while it is parsed. */
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

#define GROW(arr, n, cap)                                                      \
    do {                                                                       \
        if ((n) == (cap)) {                                                    \
            (cap) = (cap) ? 2 * (cap) : 64;                                    \
            (arr) = realloc((arr), (size_t)(cap) * sizeof *(arr));             \
        }                                                                      \
    } while (0)

/* A name visible in a function: a register range, a frame variable, or a module variable. */
enum NameKind { N_REG, N_REGRANGE, N_FRAME, N_KPARAM, N_SHARED, N_GLOBAL };
typedef struct Name {
    Tok id;
    int kind;
    uint64_t value; /* slot, frame offset, param offset, shared offset or address */
    uint32_t count;
} Name;

typedef struct Label { /* a label, or a branch waiting for one (pc of the branch) */
    Tok name;
    uint32_t pc;
} Label;

typedef struct CallFix { /* a call waiting for its callee to be defined */
    int call;
    Tok callee;
} CallFix;

typedef struct SharedVar {
    Tok name;
    uint32_t offset;
} SharedVar;

typedef struct Parser {
    Tok *toks;
    int ntoks, pos;
    jmp_buf fail;
    char *err;
    size_t errlen;
    PtxModule *m;
    Context *ctx;
    int fn; /* index of the function being decoded */
    Name *names;
    int nnames, capnames;
    int module_names; /* names below this index are module-level; a function's own come after */
    Label *fixups, *labels;
    int nfixups, capfixups, nlabels, caplabels;
    CallFix *callfix;
    int ncallfix, capcallfix;
    uint32_t nregs;
    uint32_t carry; /* the slot of the function's carry flag (CC.CF), 0 until a carry instruction needs it */
    uint64_t *consts;
    uint32_t nconsts, capconsts;
    uint32_t code_cap;
    SharedVar *shared;
    int nshared, capshared;
} Parser;

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

static Tok *peek(Parser *P) {
    static Tok end = {"", 0, 0};
    return P->pos < P->ntoks ? &P->toks[P->pos] : &end;
}
static int tok_is(const Tok *t, const char *s) { return (int)strlen(s) == t->len && !strncmp(t->s, s, (size_t)t->len); }
static int tok_eq(const Tok *a, const Tok *b) { return a->len == b->len && !memcmp(a->s, b->s, (size_t)a->len); }
static Tok *next(Parser *P) {
    Tok *t = peek(P);
    if (P->pos < P->ntoks) P->pos++;
    return t;
}
static void expect(Parser *P, const char *s) {
    Tok *t = next(P);
    if (!tok_is(t, s)) fail(P, t->line, "expected '%s', found '%.*s'", s, t->len, t->s);
}
/* Is the token one of the words of a space-separated list? */
static int word_in(const char *list, const Tok *w) {
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ' ');
        int n = e ? (int)(e - p) : (int)strlen(p);
        if (n == w->len && !memcmp(p, w->s, (size_t)n)) return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* ---- names ---- */

static Name *find_name(Parser *P, const Tok *id) {
    for (int i = P->nnames - 1; i >= 0; i--)
        if (tok_eq(&P->names[i].id, id)) return &P->names[i];
    return NULL;
}

static void add_name(Parser *P, Tok id, int kind, uint64_t value, uint32_t count) {
    GROW(P->names, P->nnames, P->capnames);
    P->names[P->nnames++] = (Name){id, kind, value, count};
}

static Tok tok_of(const char *s) { return (Tok){s, (int)strlen(s), 0}; }

/* PTX special registers and the frame slots they live in. */
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

/* The register-file slot a register name denotes, or -1. */
static int find_register(Parser *P, const Tok *t) {
    if (tok_is(t, "_")) return SP_SINK;
    for (size_t i = 0; i < sizeof SPECIALS / sizeof SPECIALS[0]; i++)
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

static int reg_slot(Parser *P, const Tok *t) {
    int slot = find_register(P, t);
    if (slot < 0) fail(P, t->line, "unknown register %.*s", t->len, t->s);
    return slot;
}

static uint32_t const_slot(Parser *P, uint64_t bits) {
    for (uint32_t i = 0; i < P->nconsts; i++)
        if (P->consts[i] == bits) return 0x80000000u | i; /* resolved to a slot when the function ends */
    GROW(P->consts, P->nconsts, P->capconsts);
    P->consts[P->nconsts] = bits;
    return 0x80000000u | P->nconsts++;
}

/* ---- types and modifiers ---- */

static int type_of(const Tok *t) {
    for (int ty = 1; ty < T_COUNT; ty++)
        if (tok_is(t, PTX_TYPE_INFO[ty].name)) return ty;
    return T_NONE;
}

/* An opcode split at dots: "ld.global.nc.v4.f32" -> base "ld", mods {global, nc, v4, f32}. */
typedef struct Opcode {
    Tok base;
    Tok mods[12];
    int nmods;
    int types[3], ntypes; /* the type modifiers, in order */
} Opcode;

static void split_opcode(Parser *P, const Tok *t, Opcode *o) {
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
static int has_mod(const Opcode *o, const char *m) {
    for (int i = 0; i < o->nmods; i++)
        if (tok_is(&o->mods[i], m)) return 1;
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
    Tok sym;        /* O_SYM, or O_MEM symbol base (len 0: none) */
    int vec[4], nvec;
    int line;
} Operand;

static uint64_t parse_number(Parser *P, Tok *t, int negative, int *is_float_imm) {
    char buf[64];
    if (t->len >= (int)sizeof buf) fail(P, t->line, "cannot parse number %.*s", t->len, t->s);
    snprintf(buf, sizeof buf, "%.*s", t->len, t->s);
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
    return negative ? 0 - v : v;
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
        else o->sym = *b;
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
    in->d = in->a = in->b = in->c = in->e = SP_SINK;
    m->lines[m->ncode++] = line;
    return in;
}

static int function_index(Parser *P, const Tok *name, int create);

/* A value operand as a slot: registers as they are, immediates and symbol addresses as constants. */
static uint32_t value_slot(Parser *P, Operand *o) {
    if (o->kind == O_REG) return (uint32_t)o->slot;
    if (o->kind == O_IMM) return const_slot(P, o->imm);
    if (o->kind == O_SYM) {
        Name *n = find_name(P, &o->sym);
        if (n && (n->kind == N_SHARED || n->kind == N_GLOBAL)) return const_slot(P, n->value);
        int fn = n ? -1 : function_index(P, &o->sym, 0);
        if (fn >= 0) return const_slot(P, FUNCTION_ADDRESS_BASE + (uint64_t)fn * FUNCTION_ADDRESS_STEP);
        fail(P, o->line, "operand %.*s cannot be used as a value here", o->sym.len, o->sym.s);
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

static int cmp_of(const Tok *s) {
    static const char *NAMES[] = {"eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu",
                                  "num", "nan"};
    static const struct { const char *n; int c; } UNSIGNED[] = {{"lo", C_LT}, {"ls", C_LE}, {"hi", C_GT},
                                                                {"hs", C_GE}};
    for (int i = 0; i < 14; i++)
        if (tok_is(s, NAMES[i])) return i;
    for (int i = 0; i < 4; i++)
        if (tok_is(s, UNSIGNED[i].n)) return UNSIGNED[i].c;
    return -1;
}

static int rounding_of(const Opcode *o) {
    static const char *NAMES[] = {"", "rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi"};
    for (int i = 1; i < 9; i++)
        if (has_mod(o, NAMES[i])) return i;
    return R_NONE;
}

static int space_of(const Opcode *o) {
    if (has_mod(o, "global")) return SPACE_GLOBAL;
    if (has_mod(o, "shared") || has_mod(o, "shared::cta")) return SPACE_SHARED;
    if (has_mod(o, "local")) return SPACE_LOCAL;
    if (has_mod(o, "param")) return SPACE_KPARAM;
    if (has_mod(o, "const")) return SPACE_GLOBAL;
    return SPACE_GENERIC;
}

/* ---- the decoder table ---- */

/* One instruction being decoded. */
typedef struct Insn {
    Tok tok; /* the whole opcode, for messages */
    Opcode o;
    Operand ops[8];
    int n, line;
    int t;   /* the last type modifier (T_NONE: none) */
    int rnd; /* enum Rounding */
    uint32_t guard; /* @p predicate slot (SP_TRUE: none), for rows that take the guard themselves */
    int gneg;
} Insn;

struct PtxInstr;
typedef void DecodeFn(Parser *P, const struct PtxInstr *row, Insn *I);

enum RowFlags {
    ROW_RAW_OPERANDS = 1, /* the decoder reads its own operands (call) */
    ROW_OWN_GUARD = 2,    /* the decoder folds the guard into its instruction (bra) */
};

/* A row: a mnemonic (alternatives separated by spaces), optionally variant modifiers that select the row
 * (all must be present; rows with a variant come before the mnemonic's default row), the opcode emitted per
 * type (an empty entry: that type is not accepted; [T_NONE]: the form without a type), the other accepted
 * modifiers, what the implementation does that a reader of the coverage table should know, and for float
 * arithmetic the operation OP_FROUND / OP_HALF perform. */
typedef struct PtxInstr {
    const char *name, *variant;
    DecodeFn *decode;
    int nsrc; /* source operands of the d_typed form */
    uint16_t ops[T_COUNT];
    const char *mods;
    const char *note;
    int flags;
    int fop; /* enum FloatOp */
} PtxInstr;

#define SLOT(i) value_slot(P, &I->ops[i])
#define DEST(i) dest_slot(P, I, (uint32_t)I->ops[i].slot, I->ops[i].kind == O_REG)

/* A destination: a register of the function, never a special register or a constant, so the interpreter may
 * keep those in place from one block to the next. */
static uint32_t dest_slot(Parser *P, Insn *I, uint32_t slot, int is_register) {
    if (!is_register || (slot < SP_COUNT && slot != SP_SINK) || (slot & 0x80000000u))
        fail(P, I->line, "%.*s: the destination must be a register", I->tok.len, I->tok.s);
    return slot;
}

static void need(Parser *P, Insn *I, int k) {
    if (I->n < k) fail(P, I->line, "%.*s needs %d operands", I->tok.len, I->tok.s, k);
}

static int pick(Parser *P, const PtxInstr *row, Insn *I) {
    int op = row->ops[I->t];
    if (!op) fail(P, I->line, "%.*s: unsupported type", I->tok.len, I->tok.s);
    return op;
}

/* d = op(a[, b[, c]]): the typed one-result form. f32/f64 arithmetic with a directed rounding mode or .sat
 * becomes OP_FROUND; f16/bf16 arithmetic is OP_HALF (round to nearest). */
static void d_typed(Parser *P, const PtxInstr *row, Insn *I) {
    need(P, I, row->nsrc + 1);
    int op = pick(P, row, I);
    int directed = I->rnd == R_RZ || I->rnd == R_RM || I->rnd == R_RP, sat = has_mod(&I->o, "sat");
    if (I->rnd != R_NONE && !type_is_float(I->t))
        fail(P, I->line, "%.*s: a rounding modifier needs a float type", I->tok.len, I->tok.s);
    if (op == OP_HALF) {
        if (directed) fail(P, I->line, "%.*s: f16/bf16 arithmetic rounds to nearest (.rn) only", I->tok.len, I->tok.s);
    } else if ((directed || sat) && (I->t == T_F32 || I->t == T_F64) && row->fop) {
        op = OP_FROUND;
    } else if (sat) {
        fail(P, I->line, "%.*s: .sat is supported on float types only", I->tok.len, I->tok.s);
    }
    uint32_t s[3] = {SP_SINK, SP_SINK, SP_SINK};
    for (int i = 0; i < row->nsrc; i++) s[i] = SLOT(i + 1);
    uint32_t d = DEST(0);
    Inst *in = emit(P, op, I->line);
    in->d = d, in->a = s[0], in->b = s[1], in->c = s[2];
    in->type = (uint8_t)I->t;
    in->sub = (uint8_t)row->fop;
    in->sub2 = (uint8_t)I->rnd;
    if (sat) in->flags |= F_SAT;
}

static uint32_t carry_slot(Parser *P) {
    if (!P->carry) P->carry = SP_COUNT + P->nregs++;
    return P->carry;
}

/* add.cc/addc, sub.cc/subc, mad.cc/madc: the carry flag is a register of the function's frame. */
static void d_carry(Parser *P, const PtxInstr *row, Insn *I) {
    d_typed(P, row, I);
    Inst *in = &P->m->code[P->m->ncode - 1];
    int carry_in = I->o.base.s[I->o.base.len - 1] == 'c'; /* addc, subc, madc */
    in->imm = carry_in ? carry_slot(P) : SP_ZERO;
    in->e = has_mod(&I->o, "cc") ? carry_slot(P) : SP_SINK;
}

/* dp4a/dp2a.atype.btype: the signedness of each source's bytes (halves) in flags, .hi in sub. */
static void d_dot(Parser *P, const PtxInstr *row, Insn *I) {
    if (I->o.ntypes != 2) fail(P, I->line, "%.*s needs two types", I->tok.len, I->tok.s);
    d_typed(P, row, I);
    Inst *in = &P->m->code[P->m->ncode - 1];
    in->flags = (uint8_t)((type_is_signed(I->o.types[0]) ? F_SIGNED_A : 0) | (type_is_signed(I->o.types[1]) ? F_SIGNED_B : 0));
    in->sub = (uint8_t)has_mod(&I->o, "hi");
}

static void d_nanosleep(Parser *P, const PtxInstr *row, Insn *I) {
    need(P, I, 1);
    uint32_t a = SLOT(0);
    emit(P, pick(P, row, I), I->line)->a = a;
}

static void d_shf(Parser *P, const PtxInstr *row, Insn *I) {
    int clamp = has_mod(&I->o, "clamp");
    if (!clamp && !has_mod(&I->o, "wrap")) fail(P, I->line, "%.*s needs .wrap or .clamp", I->tok.len, I->tok.s);
    d_typed(P, row, I);
    if (clamp) P->m->code[P->m->ncode - 1].flags |= F_CLAMP;
}

/* An instruction with no operands to decode (ret, exit, fences, hints). */
static void d_plain(Parser *P, const PtxInstr *row, Insn *I) { emit(P, pick(P, row, I), I->line); }

static void d_mov(Parser *P, const PtxInstr *row, Insn *I) {
    need(P, I, 2);
    int t = I->t, wide = type_bytes(t) == 8;
    Operand *ops = I->ops;
    if (ops[0].kind == O_VEC) { /* unpack */
        Inst *in = emit(P, wide ? OP_MOV_UNPACK64 : OP_MOV_UNPACK32, I->line);
        in->a = SLOT(1);
        in->d = dest_slot(P, I, (uint32_t)ops[0].vec[0], 1);
        in->b = dest_slot(P, I, (uint32_t)ops[0].vec[1], 1);
    } else if (ops[1].kind == O_VEC) {
        Inst *in = emit(P, wide ? OP_MOV_PACK64 : OP_MOV_PACK32, I->line);
        in->d = DEST(0);
        in->a = (uint32_t)ops[1].vec[0];
        in->b = (uint32_t)ops[1].vec[1];
    } else if (ops[1].kind == O_SYM) {
        Name *nm = find_name(P, &ops[1].sym);
        if (!nm) fail(P, I->line, "unknown symbol %.*s", ops[1].sym.len, ops[1].sym.s);
        if (nm->kind == N_FRAME) {
            Inst *in = emit(P, OP_LOCAL_ADDR, I->line);
            in->d = DEST(0);
            in->imm = (int64_t)nm->value;
        } else if (nm->kind == N_SHARED || nm->kind == N_GLOBAL) {
            d_typed(P, row, I);
        } else {
            fail(P, I->line, "mov of the address of %.*s is not supported", ops[1].sym.len, ops[1].sym.s);
        }
    } else {
        d_typed(P, row, I);
    }
}

static void d_lop3(Parser *P, const PtxInstr *row, Insn *I) {
    need(P, I, 5);
    if (I->ops[4].kind != O_IMM) fail(P, I->line, "lop3 needs an immediate truth table");
    uint32_t d = DEST(0), a = SLOT(1), b = SLOT(2), c = SLOT(3);
    Inst *in = emit(P, pick(P, row, I), I->line);
    in->d = d, in->a = a, in->b = b, in->c = c;
    in->imm = (int64_t)I->ops[4].imm;
}

static void d_bfi(Parser *P, const PtxInstr *row, Insn *I) {
    need(P, I, 5);
    uint32_t d = DEST(0), a = SLOT(1), b = SLOT(2), c = SLOT(3), e = SLOT(4);
    Inst *in = emit(P, pick(P, row, I), I->line);
    in->d = d, in->a = a, in->b = b, in->c = c, in->e = e;
}

static void d_bfind(Parser *P, const PtxInstr *row, Insn *I) {
    d_typed(P, row, I);
    if (has_mod(&I->o, "shiftamt")) P->m->code[P->m->ncode - 1].flags = F_SHIFTAMT;
}

/* setp/set: d = a cmp b [and|or|xor c]; the comparison is the first modifier. */
static Inst *comparison(Parser *P, Insn *I, int op, int type) {
    need(P, I, 3);
    int cmp = I->o.nmods ? cmp_of(&I->o.mods[0]) : -1;
    if (cmp < 0) fail(P, I->line, "%.*s: unknown comparison", I->tok.len, I->tok.s);
    int boolop = has_mod(&I->o, "and") ? 1 : has_mod(&I->o, "or") ? 2 : has_mod(&I->o, "xor") ? 3 : 0;
    uint32_t d = DEST(0), a = SLOT(1), b = SLOT(2), c = SP_SINK;
    if (boolop) {
        need(P, I, 4);
        c = SLOT(3);
    }
    Inst *in = emit(P, op, I->line);
    in->d = d, in->a = a, in->b = b, in->c = c;
    in->type = (uint8_t)type;
    in->sub = (uint8_t)cmp;
    in->sub2 = (uint8_t)boolop;
    if (boolop && I->ops[3].neg) in->flags |= F_NEG_C;
    return in;
}

static void d_setp(Parser *P, const PtxInstr *row, Insn *I) {
    Inst *in = comparison(P, I, pick(P, row, I), I->t);
    in->e = I->ops[0].slot2 >= 0 ? dest_slot(P, I, (uint32_t)I->ops[0].slot2, 1) : SP_SINK; /* p|q */
}

/* set.cmp[.bool].dtype.stype d, a, b[, c]: the comparison of setp with a value result. */
static void d_set(Parser *P, const PtxInstr *row, Insn *I) {
    (void)row;
    if (I->o.ntypes != 2) fail(P, I->line, "set needs a destination and a source type");
    int dt = I->o.types[0], st = I->o.types[1];
    if (type_bytes(dt) == 8) fail(P, I->line, "%.*s: unsupported destination type", I->tok.len, I->tok.s);
    comparison(P, I, OP_SET, st)->imm = dt;
}

static void d_cvt(Parser *P, const PtxInstr *row, Insn *I) {
    need(P, I, 2);
    if (I->o.ntypes != 2) fail(P, I->line, "cvt needs two types");
    (void)row; /* check_modifiers has checked both types */
    int dt = I->o.types[0], st = I->o.types[1], rnd = I->rnd;
    int f8_out = dt == T_E4M3X2 || dt == T_E5M2X2, f8_in = st == T_E4M3X2 || st == T_E5M2X2;
    if (f8_out || f8_in) { /* pairs of 8-bit floats: to them from two .f32 or an .f16x2, from them to an .f16x2 */
        int from_f32 = f8_out && st == T_F32;
        if (f8_out ? (st != T_F32 && st != T_F16X2) || !has_mod(&I->o, "satfinite") : dt != T_F16X2 || has_mod(&I->o, "satfinite"))
            fail(P, I->line, "%.*s: 8-bit float pairs convert .satfinite from two .f32 or an .f16x2, and to an .f16x2",
                 I->tok.len, I->tok.s);
        if (rnd != R_RN) fail(P, I->line, "%.*s: 8-bit float conversions round .rn only", I->tok.len, I->tok.s);
        need(P, I, from_f32 ? 3 : 2);
        uint32_t d = DEST(0), a = SLOT(1), b = from_f32 ? SLOT(2) : SP_SINK;
        Inst *in = emit(P, f8_out ? OP_CVT_PACK_F8 : OP_CVT_UNPACK_F8, I->line);
        in->d = d, in->a = a, in->b = b;
        in->type = (uint8_t)(f8_out ? dt : st);
        in->sub = (uint8_t)st;
        if (has_mod(&I->o, "relu")) in->flags |= F_RELU;
        return;
    }
    if (has_mod(&I->o, "satfinite") || has_mod(&I->o, "relu"))
        fail(P, I->line, "%.*s: .satfinite and .relu are for 8-bit float pairs only", I->tok.len, I->tok.s);
    int pack = dt == T_F16X2 || dt == T_BF16X2;
    if (st == T_F16X2 || st == T_BF16X2 || (pack && st != T_F32))
        fail(P, I->line, "%.*s: x2 conversions are from two .f32 values only", I->tok.len, I->tok.s);
    if (pack) need(P, I, 3);
    uint32_t d = DEST(0), a = SLOT(1), b = pack ? SLOT(2) : SP_SINK;
    Inst *in = emit(P, pack ? OP_CVT_PACK : OP_CVT, I->line);
    in->d = d, in->a = a, in->b = b;
    in->type = (uint8_t)(dt == T_F16X2 ? T_F16 : dt == T_BF16X2 ? T_BF16 : dt);
    in->sub = (uint8_t)st;
    in->sub2 = (uint8_t)rnd;
    if (has_mod(&I->o, "sat")) in->flags |= F_SAT;
}

static void d_cvta(Parser *P, const PtxInstr *row, Insn *I) {
    int to = has_mod(&I->o, "to");
    int op = OP_MOV;
    if (has_mod(&I->o, "shared") || has_mod(&I->o, "shared::cta")) op = to ? OP_CVTA_TO_SHARED : OP_CVTA_SHARED;
    else if (has_mod(&I->o, "local")) op = to ? OP_CVTA_TO_LOCAL : OP_CVTA_LOCAL;
    need(P, I, 2);
    pick(P, row, I);
    uint32_t d = DEST(0), a = SLOT(1);
    Inst *in = emit(P, op, I->line);
    in->d = d, in->a = a;
}

static void d_isspacep(Parser *P, const PtxInstr *row, Insn *I) {
    d_typed(P, row, I);
    P->m->code[P->m->ncode - 1].sub = (uint8_t)space_of(&I->o);
}

static void d_testp(Parser *P, const PtxInstr *row, Insn *I) {
    static const char *KINDS[] = {"finite", "infinite", "number", "notanumber", "normal", "subnormal"};
    int kind = -1;
    for (int i = 0; i < 6; i++)
        if (has_mod(&I->o, KINDS[i])) kind = i;
    if (kind < 0) fail(P, I->line, "testp: unknown test");
    d_typed(P, row, I);
    P->m->code[P->m->ncode - 1].sub = (uint8_t)kind;
}

/* Resolves a memory operand into (address slot, offset, space). */
static void memory_operand(Parser *P, Operand *mo, int *space, Inst *in) {
    in->imm = (int64_t)mo->imm;
    if (mo->slot >= 0) {
        in->a = (uint32_t)mo->slot;
        if (*space == SPACE_KPARAM) fail(P, mo->line, "register-addressed param space is not supported");
        return;
    }
    in->a = SP_ZERO;
    if (!mo->sym.len) return; /* absolute address */
    Name *n = find_name(P, &mo->sym);
    if (!n) fail(P, mo->line, "unknown symbol %.*s", mo->sym.len, mo->sym.s);
    switch (n->kind) {
    case N_KPARAM:
        *space = SPACE_KPARAM;
        in->imm += (int64_t)n->value;
        return;
    case N_FRAME:
        *space = SPACE_FRAME;
        in->imm += (int64_t)n->value;
        return;
    case N_SHARED:
        if (*space == SPACE_GENERIC) *space = SPACE_SHARED;
        in->imm += (int64_t)n->value;
        return;
    case N_GLOBAL:
        in->a = const_slot(P, n->value);
        in->imm = (int64_t)mo->imm;
        return;
    default: fail(P, mo->line, "%.*s is not addressable", mo->sym.len, mo->sym.s);
    }
}

static void decode_memory(Parser *P, const PtxInstr *row, Insn *I, int is_store) {
    int t = I->o.types[0];
    pick(P, row, I);
    int vec = has_mod(&I->o, "v4") ? 4 : has_mod(&I->o, "v2") ? 2 : 1;
    if (I->n != 2) fail(P, I->line, "%.*s needs two operands", I->o.base.len, I->o.base.s);
    Operand *mem = is_store ? &I->ops[0] : &I->ops[1], *val = is_store ? &I->ops[1] : &I->ops[0];
    if (mem->kind != O_MEM) fail(P, I->line, "%.*s: expected a memory operand", I->o.base.len, I->o.base.s);
    int space = space_of(&I->o);
    Inst tmp = {0};
    memory_operand(P, mem, &space, &tmp);
    int size = type_bytes(t);
    int op = is_store ? OP_ST : OP_LD;
    if (vec == 1 && !type_is_signed(t)) { /* the fast forms zero-extend */
        if (space == SPACE_GLOBAL && size == 4) op = is_store ? OP_ST_GLOBAL_32 : OP_LD_GLOBAL_32;
        else if (space == SPACE_GLOBAL && size == 8) op = is_store ? OP_ST_GLOBAL_64 : OP_LD_GLOBAL_64;
        else if (space == SPACE_SHARED && size == 4) op = is_store ? OP_ST_SHARED_32 : OP_LD_SHARED_32;
        else if (space == SPACE_KPARAM && size == 4 && !is_store) op = OP_LD_KPARAM_32;
        else if (space == SPACE_KPARAM && size == 8 && !is_store) op = OP_LD_KPARAM_64;
    }
    if (space == SPACE_KPARAM && is_store) fail(P, I->line, "st.param outside a call sequence");
    uint32_t regs[4] = {SP_SINK, SP_SINK, SP_SINK, SP_SINK};
    if (vec == 1) {
        regs[0] = is_store ? value_slot(P, val) : dest_slot(P, I, (uint32_t)val->slot, val->kind == O_REG);
    } else {
        if (val->kind != O_VEC || val->nvec != vec) fail(P, I->line, "vector operand does not match .v%d", vec);
        for (int i = 0; i < vec; i++)
            regs[i] = is_store ? (uint32_t)val->vec[i] : dest_slot(P, I, (uint32_t)val->vec[i], 1);
    }
    Inst *in = emit(P, op, I->line);
    in->a = tmp.a;
    in->imm = tmp.imm;
    in->type = (uint8_t)t;
    in->sub = (uint8_t)space;
    in->vec = (uint8_t)vec;
    in->d = regs[0], in->b = regs[1], in->c = regs[2], in->e = regs[3];
}

static void d_load(Parser *P, const PtxInstr *row, Insn *I) { decode_memory(P, row, I, 0); }
static void d_store(Parser *P, const PtxInstr *row, Insn *I) { decode_memory(P, row, I, 1); }

static int atom_op_of(const Opcode *o) {
    static const char *NAMES[] = {"add", "min", "max", "exch", "cas", "and", "or", "xor", "inc", "dec"};
    for (int i = 0; i < 10; i++)
        if (has_mod(o, NAMES[i])) return i;
    return -1;
}

static void decode_atom(Parser *P, const PtxInstr *row, Insn *I, int is_red) {
    int aop = atom_op_of(&I->o);
    if (aop < 0) fail(P, I->line, "%.*s: unsupported atomic operation", I->tok.len, I->tok.s);
    int t = I->t;
    pick(P, row, I);
    if (type_is_float(t) && aop != AT_ADD && aop != AT_EXCH && aop != AT_MIN && aop != AT_MAX)
        fail(P, I->line, "%.*s: unsupported atomic type", I->tok.len, I->tok.s);
    int space = space_of(&I->o);
    int mem_index = is_red ? 0 : 1;
    if (I->n < mem_index + 2 || I->ops[mem_index].kind != O_MEM)
        fail(P, I->line, "%.*s: bad operands", I->tok.len, I->tok.s);
    if (aop == AT_CAS && I->n < mem_index + 3) fail(P, I->line, "atom.cas needs a compare and a new value");
    Inst tmp = {0};
    memory_operand(P, &I->ops[mem_index], &space, &tmp);
    uint32_t d = is_red ? SP_SINK : DEST(0), b = SLOT(mem_index + 1);
    uint32_t c = aop == AT_CAS ? SLOT(mem_index + 2) : SP_SINK;
    Inst *in = emit(P, OP_ATOM, I->line);
    in->a = tmp.a;
    in->imm = tmp.imm;
    in->sub = (uint8_t)space;
    in->sub2 = (uint8_t)aop;
    in->type = (uint8_t)t;
    in->d = d, in->b = b, in->c = c;
}

static void d_atom(Parser *P, const PtxInstr *row, Insn *I) { decode_atom(P, row, I, 0); }
static void d_red(Parser *P, const PtxInstr *row, Insn *I) { decode_atom(P, row, I, 1); }

static void add_label_ref(Parser *P, uint32_t pc, Tok label) {
    GROW(P->fixups, P->nfixups, P->capfixups);
    P->fixups[P->nfixups++] = (Label){label, pc};
}

/* The compare-and-branch an integer setp followed by "@p bra" becomes: one dispatch instead of two. */
static int fused_compare_branch(int setp_op) {
    switch (setp_op) {
    case OP_SETP_S32: return OP_SETP_BRA_S32;
    case OP_SETP_U32: return OP_SETP_BRA_U32;
    case OP_SETP_S64: return OP_SETP_BRA_S64;
    case OP_SETP_U64: return OP_SETP_BRA_U64;
    default: return OP_NONE;
    }
}

static void d_bra(Parser *P, const PtxInstr *row, Insn *I) {
    (void)row;
    need(P, I, 1);
    if (I->ops[0].kind != O_SYM) fail(P, I->line, "bra needs a label");
    PtxModule *m = P->m;
    Inst *prev = m->ncode > P->m->funcs[P->fn].entry_pc ? &m->code[m->ncode - 1] : NULL;
    int fused = prev ? fused_compare_branch(prev->op) : OP_NONE;
    if (fused && I->guard != SP_TRUE && prev->d == I->guard && prev->e == SP_SINK && !prev->sub2 &&
        !(P->nlabels && P->labels[P->nlabels - 1].pc == m->ncode) && /* no jump lands on the bra alone */
        !(m->ncode >= 2 && m->code[m->ncode - 2].op == OP_GUARD)) { /* nor is the setp guarded */
        prev->op = (uint16_t)fused;
        prev->flags = I->gneg ? F_NEG_C : 0;
        add_label_ref(P, m->ncode - 1, I->ops[0].sym);
        return;
    }
    Inst *in = emit(P, I->guard == SP_TRUE ? OP_BRA : OP_BRA_IF, I->line);
    in->a = I->guard;
    in->flags = I->gneg ? F_NEG_C : 0;
    add_label_ref(P, m->ncode - 1, I->ops[0].sym);
}

/* A builtin call's param (malloc's size, free's pointer, a return value): its offset in the caller's frame. */
static uint32_t frame_param(Parser *P, const Tok *t, int line, const char *what) {
    Name *n = find_name(P, t);
    if (!n || n->kind != N_FRAME) fail(P, line, "%s %.*s is not a .param in this function", what, t->len, t->s);
    return (uint32_t)n->value;
}

/* call[.uni] [(ret)], name, [(args)];  call[.uni] [(ret)], %reg, [(args),] prototype; (through a pointer) */
static void d_call(Parser *P, const PtxInstr *row, Insn *I) {
    (void)row;
    PtxModule *m = P->m;
    int line = I->line;
    Tok ret = {0};
    if (tok_is(peek(P), "(")) {
        next(P);
        if (!tok_is(peek(P), ")")) ret = *next(P);
        expect(P, ")");
        expect(P, ",");
    }
    Tok callee = *next(P);
    int indirect = callee.s[0] == '%';
    Tok args[16];
    int nargs = 0;
    if (tok_is(peek(P), ",") && P->pos + 1 < P->ntoks && tok_is(&P->toks[P->pos + 1], "(")) {
        next(P);
        expect(P, "(");
        while (!tok_is(peek(P), ")")) {
            if (nargs == 16) fail(P, line, "too many call arguments");
            Tok *a = next(P);
            if (a->s[0] == '%') fail(P, line, "call arguments in registers are not supported");
            args[nargs++] = *a;
            if (tok_is(peek(P), ",")) next(P);
        }
        expect(P, ")");
    }
    if (indirect) { /* the prototype names the signature; the callee's own is checked when it is called */
        expect(P, ",");
        next(P);
    }
    expect(P, ";");
    if (tok_is(&callee, "__assertfail") || tok_is(&callee, "__assert_fail")) {
        emit(P, OP_TRAP, line)->flags = F_ASSERT;
        return;
    }
    if (tok_is(&callee, "cudaGraphSetConditional")) { /* the device runtime's: sets a graph node's condition */
        Name *h = nargs == 2 ? find_name(P, &args[0]) : NULL, *v = nargs == 2 ? find_name(P, &args[1]) : NULL;
        if (!h || h->kind != N_FRAME || !v || v->kind != N_FRAME)
            fail(P, line, "cudaGraphSetConditional takes a handle and a value, in .param variables");
        Inst *in = emit(P, OP_SET_CONDITIONAL, line);
        in->imm = (int64_t)h->value;
        in->e = (uint32_t)v->value;
        return;
    }
    if (tok_is(&callee, "malloc") || tok_is(&callee, "free")) { /* the device runtime's heap */
        int is_malloc = tok_is(&callee, "malloc");
        if (nargs != 1 || (is_malloc && !ret.len))
            fail(P, line, "%s takes one argument%s", is_malloc ? "malloc" : "free", is_malloc ? " and returns one" : "");
        Inst *in = emit(P, is_malloc ? OP_MALLOC : OP_FREE, line);
        in->imm = frame_param(P, &args[0], line, "call argument");
        in->e = is_malloc ? frame_param(P, &ret, line, "call return") : 0;
        m->uses_device_heap = 1;
        return;
    }
    if (tok_is(&callee, "vprintf")) { /* device printf: vprintf(format, argument buffer) */
        if (nargs != 2) fail(P, line, "vprintf takes a format and an argument buffer");
        Inst *in = emit(P, OP_PRINTF, line);
        in->imm = frame_param(P, &args[0], line, "call argument");
        in->c = frame_param(P, &args[1], line, "call argument");
        in->e = ret.len ? frame_param(P, &ret, line, "call return") : UINT32_MAX;
        return;
    }
    if (m->ncalls % 64 == 0) m->calls = realloc(m->calls, (m->ncalls + 64) * sizeof(CallInfo));
    CallInfo *ci = &m->calls[m->ncalls];
    memset(ci, 0, sizeof *ci);
    ci->callee = -1;
    ci->caller = P->fn;
    ci->nargs = nargs;
    ci->ret_off = ret.len ? frame_param(P, &ret, line, "call return") : UINT32_MAX;
    for (int i = 0; i < nargs; i++) ci->arg_off[i] = frame_param(P, &args[i], line, "call argument");
    if (indirect) {
        Inst *in = emit(P, OP_CALL_INDIRECT, line);
        in->a = (uint32_t)reg_slot(P, &callee);
        in->imm = m->ncalls++;
        return;
    }
    GROW(P->callfix, P->ncallfix, P->capcallfix);
    P->callfix[P->ncallfix++] = (CallFix){m->ncalls, callee};
    emit(P, OP_CALL, line)->imm = m->ncalls++;
}

static void collective(Parser *P, Insn *I, int kind, uint32_t d, uint32_t a, uint32_t b, uint32_t c, uint32_t e,
                       int flags) {
    Inst *in = emit(P, OP_COLLECTIVE, I->line);
    in->sub = (uint8_t)kind;
    in->d = d, in->a = a, in->b = b, in->c = c, in->e = e;
    in->flags = (uint8_t)flags;
    in->type = (uint8_t)I->t;
}

static void d_bar(Parser *P, const PtxInstr *row, Insn *I) {
    pick(P, row, I);
    if (has_mod(&I->o, "warp")) {
        collective(P, I, COL_WARP_SYNC, SP_SINK, SP_SINK, SP_SINK, SP_SINK, SP_SINK, 0);
    } else if (has_mod(&I->o, "red")) {
        need(P, I, 3);
        int kind = has_mod(&I->o, "popc") ? COL_BAR_RED_POPC : has_mod(&I->o, "and") ? COL_BAR_RED_AND
                                                                                      : COL_BAR_RED_OR;
        Operand *pred = &I->ops[I->n - 1];
        if (pred->kind != O_REG) fail(P, I->line, "bar.red needs a predicate operand");
        collective(P, I, kind, DEST(0), (uint32_t)pred->slot, SP_SINK, SP_SINK, SP_SINK, pred->neg ? F_NEG_C : 0);
    } else {
        collective(P, I, COL_BAR, SP_SINK, SP_SINK, SP_SINK, SP_SINK, SP_SINK, 0);
    }
}

static void d_shfl(Parser *P, const PtxInstr *row, Insn *I) {
    pick(P, row, I);
    need(P, I, 4);
    int kind = has_mod(&I->o, "up") ? COL_SHFL_UP : has_mod(&I->o, "down") ? COL_SHFL_DOWN
             : has_mod(&I->o, "bfly") ? COL_SHFL_BFLY : COL_SHFL_IDX;
    collective(P, I, kind, DEST(0), SLOT(1), SLOT(2), SLOT(3),
               I->ops[0].slot2 >= 0 ? dest_slot(P, I, (uint32_t)I->ops[0].slot2, 1) : SP_SINK, 0);
}

static void d_vote(Parser *P, const PtxInstr *row, Insn *I) {
    pick(P, row, I);
    need(P, I, 2);
    int kind = has_mod(&I->o, "all") ? COL_VOTE_ALL : has_mod(&I->o, "any") ? COL_VOTE_ANY
             : has_mod(&I->o, "uni") ? COL_VOTE_UNI : COL_VOTE_BALLOT;
    if (I->ops[1].kind != O_REG) fail(P, I->line, "vote needs a predicate operand");
    collective(P, I, kind, DEST(0), (uint32_t)I->ops[1].slot, SP_SINK, SP_SINK, SP_SINK, I->ops[1].neg ? F_NEG_C : 0);
}

static void d_redux(Parser *P, const PtxInstr *row, Insn *I) {
    static const char *KINDS[] = {"add", "min", "max", "and", "or", "xor"};
    pick(P, row, I);
    need(P, I, 2);
    int kind = -1;
    for (int i = 0; i < 6; i++)
        if (has_mod(&I->o, KINDS[i])) kind = COL_REDUX_ADD + i;
    if (kind < 0) fail(P, I->line, "redux: unsupported form");
    collective(P, I, kind, DEST(0), SLOT(1), SP_SINK, SP_SINK, SP_SINK, 0);
}

/* Type families for the opcode columns. */
#define INTS(s16, u16, s32, u32, s64, u64) \
    [T_S16] = s16, [T_U16] = u16, [T_S32] = s32, [T_U32] = u32, [T_S64] = s64, [T_U64] = u64
#define BITS(b16, b32, b64) [T_B16] = b16, [T_B32] = b32, [T_B64] = b64
#define ALL_INTS(op) INTS(op, op, op, op, op, op), BITS(op, op, op)
#define FLOATS(f32, f64) [T_F32] = f32, [T_F64] = f64
#define VALUES(op) ALL_INTS(op), [T_F16] = op, [T_BF16] = op, FLOATS(op, op), [T_B8] = op, [T_U8] = op, [T_S8] = op
#define HALVES(op) [T_F16] = op, [T_F16X2] = op, [T_BF16] = op, [T_BF16X2] = op
#define CARRY32(op32, op64) [T_U32] = op32, [T_S32] = op32, [T_U64] = op64, [T_S64] = op64

#define ROUNDING_NOTE                                                                                       \
    "every rounding mode exact; f16/bf16 (and x2) .rn only; .sat on floats; .ftz: subnormals are not flushed"

/* Ordering, scope and cache hints of ld/st: no effect in an interpreter that is sequentially consistent. */
#define MEMORY_HINTS                                                                                          \
    "weak relaxed volatile cta gpu sys L1::evict_normal L1::evict_unchanged L1::evict_first L1::evict_last "  \
    "L1::no_allocate L2::evict_normal L2::evict_first L2::evict_last L2::64B L2::128B L2::256B"

static const PtxInstr INSTRUCTIONS[] = {
    {"mov", NULL, d_mov, 1, {ALL_INTS(OP_MOV), FLOATS(OP_MOV, OP_MOV), [T_F16] = OP_MOV, [T_BF16] = OP_MOV,
                             [T_PRED] = OP_MOV}, "", "vector pack/unpack; the address of a variable", 0},
    {"add", "cc", d_carry, 2, {CARRY32(OP_ADDC_32, OP_ADDC_64)}, "", "carry-out to CC.CF", 0},
    {"add", NULL, d_typed, 2, {INTS(OP_ADD_I16, OP_ADD_I16, OP_ADD_I32, OP_ADD_I32, OP_ADD_I64, OP_ADD_I64),
                               FLOATS(OP_ADD_F32, OP_ADD_F64), HALVES(OP_HALF)}, "rn rz rm rp ftz sat",
     ROUNDING_NOTE, 0, FR_ADD},
    {"addc", NULL, d_carry, 2, {CARRY32(OP_ADDC_32, OP_ADDC_64)}, "cc", "carry-in from CC.CF", 0},
    {"sub", "cc", d_carry, 2, {CARRY32(OP_SUBC_32, OP_SUBC_64)}, "", "borrow-out to CC.CF", 0},
    {"sub", NULL, d_typed, 2, {INTS(OP_SUB_I16, OP_SUB_I16, OP_SUB_I32, OP_SUB_I32, OP_SUB_I64, OP_SUB_I64),
                               FLOATS(OP_SUB_F32, OP_SUB_F64), HALVES(OP_HALF)}, "rn rz rm rp ftz sat",
     ROUNDING_NOTE, 0, FR_SUB},
    {"subc", NULL, d_carry, 2, {CARRY32(OP_SUBC_32, OP_SUBC_64)}, "cc", "borrow-in from CC.CF", 0},
    {"mul", "wide", d_typed, 2, {INTS(OP_MUL_WIDE_S16, OP_MUL_WIDE_U16, OP_MUL_WIDE_S32, OP_MUL_WIDE_U32, 0, 0)},
     "", "", 0},
    {"mul", "hi", d_typed, 2, {INTS(0, 0, OP_MUL_HI_S32, OP_MUL_HI_U32, OP_MUL_HI_S64, OP_MUL_HI_U64)}, "", "", 0},
    {"mul", NULL, d_typed, 2, {INTS(OP_MUL_LO_I16, OP_MUL_LO_I16, OP_MUL_LO_I32, OP_MUL_LO_I32, OP_MUL_LO_I64,
                                    OP_MUL_LO_I64), FLOATS(OP_MUL_F32, OP_MUL_F64), HALVES(OP_HALF)},
     "lo rn rz rm rp ftz sat", ROUNDING_NOTE, 0, FR_MUL},
    {"sad", NULL, d_typed, 3, {INTS(OP_SAD_S16, OP_SAD_U16, OP_SAD_S32, OP_SAD_U32, OP_SAD_S64, OP_SAD_U64)}, "",
     "d = c + |a - b|", 0},
    {"dp4a", NULL, d_dot, 3, {[T_U32] = OP_DP4A, [T_S32] = OP_DP4A}, "", "", 0},
    {"dp2a", NULL, d_dot, 3, {[T_U32] = OP_DP2A, [T_S32] = OP_DP2A}, "lo hi", "", 0},
    {"mul24", NULL, d_typed, 2, {INTS(0, 0, OP_MUL24_LO_S32, OP_MUL24_LO_U32, 0, 0)}, "lo", "", 0},
    {"mad24", NULL, d_typed, 3, {INTS(0, 0, OP_MAD24_LO_S32, OP_MAD24_LO_U32, 0, 0)}, "lo", "", 0},
    {"mad", "hi cc", d_carry, 3, {[T_U32] = OP_MADC_HI_U32, [T_S32] = OP_MADC_HI_S32, [T_U64] = OP_MADC_HI_U64,
                                  [T_S64] = OP_MADC_HI_S64}, "", "carry-out to CC.CF", 0},
    {"mad", "cc", d_carry, 3, {CARRY32(OP_MADC_LO_32, OP_MADC_LO_64)}, "lo", "carry-out to CC.CF", 0},
    {"mad", "wide", d_typed, 3, {INTS(OP_MAD_WIDE_S16, OP_MAD_WIDE_U16, OP_MAD_WIDE_S32, OP_MAD_WIDE_U32, 0, 0)},
     "", "", 0},
    {"mad", "hi", d_typed, 3, {INTS(0, 0, OP_MAD_HI_S32, OP_MAD_HI_U32, OP_MAD_HI_S64, OP_MAD_HI_U64)}, "", "", 0},
    {"mad", NULL, d_typed, 3, {INTS(OP_MAD_LO_I16, OP_MAD_LO_I16, OP_MAD_LO_I32, OP_MAD_LO_I32, OP_MAD_LO_I64,
                                    OP_MAD_LO_I64), FLOATS(OP_FMA_F32, OP_FMA_F64)}, "lo rn rz rm rp ftz sat",
     "float mad is a fused multiply-add", 0, FR_FMA},
    {"madc", "hi", d_carry, 3, {[T_U32] = OP_MADC_HI_U32, [T_S32] = OP_MADC_HI_S32, [T_U64] = OP_MADC_HI_U64,
                                [T_S64] = OP_MADC_HI_S64}, "cc", "carry-in from CC.CF", 0},
    {"madc", NULL, d_carry, 3, {CARRY32(OP_MADC_LO_32, OP_MADC_LO_64)}, "lo cc", "carry-in from CC.CF", 0},
    {"fma", NULL, d_typed, 3, {FLOATS(OP_FMA_F32, OP_FMA_F64), HALVES(OP_HALF)}, "rn rz rm rp ftz sat",
     ROUNDING_NOTE, 0, FR_FMA},
    {"div", NULL, d_typed, 2, {INTS(OP_DIV_S16, OP_DIV_U16, OP_DIV_S32, OP_DIV_U32, OP_DIV_S64, OP_DIV_U64),
                               FLOATS(OP_DIV_F32, OP_DIV_F64)}, "rn rz rm rp approx full ftz",
     ".approx/.full are computed correctly rounded", 0, FR_DIV},
    {"rem", NULL, d_typed, 2, {INTS(OP_REM_S16, OP_REM_U16, OP_REM_S32, OP_REM_U32, OP_REM_S64, OP_REM_U64)}, "",
     "", 0},
    {"min", NULL, d_typed, 2, {INTS(OP_MIN_S16, OP_MIN_U16, OP_MIN_S32, OP_MIN_U32, OP_MIN_S64, OP_MIN_U64),
                               FLOATS(OP_MIN_F32, OP_MIN_F64), HALVES(OP_HALF)}, "ftz", "", 0, FR_MIN},
    {"max", NULL, d_typed, 2, {INTS(OP_MAX_S16, OP_MAX_U16, OP_MAX_S32, OP_MAX_U32, OP_MAX_S64, OP_MAX_U64),
                               FLOATS(OP_MAX_F32, OP_MAX_F64), HALVES(OP_HALF)}, "ftz", "", 0, FR_MAX},
    {"abs", NULL, d_typed, 1, {[T_S16] = OP_ABS_S16, [T_S32] = OP_ABS_S32, [T_S64] = OP_ABS_S64,
                               FLOATS(OP_ABS_F32, OP_ABS_F64), HALVES(OP_HALF)}, "ftz", "", 0, FR_ABS},
    {"neg", NULL, d_typed, 1, {[T_S16] = OP_NEG_I16, [T_S32] = OP_NEG_I32, [T_S64] = OP_NEG_I64,
                               FLOATS(OP_NEG_F32, OP_NEG_F64), HALVES(OP_HALF)}, "ftz", "", 0, FR_NEG},
    {"and", NULL, d_typed, 2, {BITS(OP_AND, OP_AND, OP_AND), [T_PRED] = OP_AND}, "", "", 0},
    {"or", NULL, d_typed, 2, {BITS(OP_OR, OP_OR, OP_OR), [T_PRED] = OP_OR}, "", "", 0},
    {"xor", NULL, d_typed, 2, {BITS(OP_XOR, OP_XOR, OP_XOR), [T_PRED] = OP_XOR}, "", "", 0},
    {"not", NULL, d_typed, 1, {BITS(OP_NOT, OP_NOT, OP_NOT), [T_PRED] = OP_NOT_PRED}, "", "", 0},
    {"cnot", NULL, d_typed, 1, {BITS(OP_CNOT, OP_CNOT, OP_CNOT)}, "", "", 0},
    {"lop3", NULL, d_lop3, 0, {[T_B32] = OP_LOP3}, "", "", 0},
    {"shf", "l", d_shf, 3, {[T_B32] = OP_SHF_L}, "wrap clamp", "funnel shift of b:a", 0},
    {"shf", "r", d_shf, 3, {[T_B32] = OP_SHF_R}, "wrap clamp", "funnel shift of b:a", 0},
    {"shl", NULL, d_typed, 2, {BITS(OP_SHL_16, OP_SHL_32, OP_SHL_64)}, "", "", 0},
    {"shr", NULL, d_typed, 2, {INTS(OP_SHR_S16, OP_SHR_U16, OP_SHR_S32, OP_SHR_U32, OP_SHR_S64, OP_SHR_U64),
                               BITS(OP_SHR_U16, OP_SHR_U32, OP_SHR_U64)}, "", "", 0},
    {"popc", NULL, d_typed, 1, {[T_B32] = OP_POPC_32, [T_B64] = OP_POPC_64}, "", "", 0},
    {"clz", NULL, d_typed, 1, {[T_B32] = OP_CLZ_32, [T_B64] = OP_CLZ_64}, "", "", 0},
    {"brev", NULL, d_typed, 1, {[T_B32] = OP_BREV_32, [T_B64] = OP_BREV_64}, "", "", 0},
    {"bfe", NULL, d_typed, 3, {INTS(0, 0, OP_BFE_S32, OP_BFE_U32, OP_BFE_S64, OP_BFE_U64)}, "", "", 0},
    {"bfi", NULL, d_bfi, 0, {[T_B32] = OP_BFI_32, [T_B64] = OP_BFI_64}, "", "", 0},
    {"prmt", NULL, d_typed, 3, {[T_B32] = OP_PRMT}, "", "the default mode only (no .f4e/.b4e/.rc8/.ecl/.ecr/.rc16)",
     0},
    {"bfind", NULL, d_bfind, 1, {INTS(0, 0, OP_BFIND_S32, OP_BFIND_U32, OP_BFIND_S64, OP_BFIND_U64)}, "shiftamt", "",
     0},
    {"setp", NULL, d_setp, 0, {INTS(OP_SETP_S16, OP_SETP_U16, OP_SETP_S32, OP_SETP_U32, OP_SETP_S64, OP_SETP_U64),
                               BITS(OP_SETP_U16, OP_SETP_U32, OP_SETP_U64), FLOATS(OP_SETP_F32, OP_SETP_F64),
                               [T_F16] = OP_SETP_HALF, [T_BF16] = OP_SETP_HALF},
     "eq ne lt le gt ge equ neu ltu leu gtu geu num nan lo ls hi hs and or xor ftz", "p|q destinations", 0},
    {"set", NULL, d_set, 0, {INTS(OP_SET, OP_SET, OP_SET, OP_SET, OP_SET, OP_SET), BITS(OP_SET, OP_SET, OP_SET),
                             FLOATS(OP_SET, OP_SET), HALVES(OP_SET)},
     "eq ne lt le gt ge equ neu ltu leu gtu geu num nan lo ls hi hs and or xor ftz",
     "d = 1.0 (float destination) or all ones (integer) when true; x2 sources compare each half", 0},
    {"selp", NULL, d_typed, 3, {ALL_INTS(OP_SELP), FLOATS(OP_SELP, OP_SELP)}, "", "", 0},
    {"cvt", NULL, d_cvt, 0, {INTS(OP_CVT, OP_CVT, OP_CVT, OP_CVT, OP_CVT, OP_CVT), [T_U8] = OP_CVT, [T_S8] = OP_CVT,
                             HALVES(OP_CVT), FLOATS(OP_CVT, OP_CVT), [T_E4M3X2] = OP_CVT, [T_E5M2X2] = OP_CVT},
     "rn rz rm rp rni rzi rmi rpi sat ftz satfinite relu",
     "every rounding mode exact for every float format; .f16x2/.bf16x2 from two .f32 (d = {cvt(a), cvt(b)}); "
     ".e4m3x2/.e5m2x2 (OCP 8-bit floats) .rn.satfinite{.relu} from two .f32 or an .f16x2, .rn{.relu} to an .f16x2", 0},
    {"cvta", NULL, d_cvta, 0, {[T_U32] = OP_MOV, [T_U64] = OP_MOV}, "to global shared shared::cta local const", "",
     0},
    {"isspacep", NULL, d_isspacep, 1, {[T_NONE] = OP_ISSPACEP}, "global shared shared::cta local", "", 0},
    {"sqrt", NULL, d_typed, 1, {FLOATS(OP_SQRT_F32, OP_SQRT_F64)}, "rn rz rm rp approx ftz",
     ".approx is computed correctly rounded", 0, FR_SQRT},
    {"rsqrt", NULL, d_typed, 1, {FLOATS(OP_RSQRT_F32, OP_RSQRT_F64)}, "approx ftz", "computed as 1/sqrt", 0},
    {"rcp", NULL, d_typed, 1, {FLOATS(OP_RCP_F32, OP_RCP_F64)}, "rn rz rm rp approx ftz",
     ".approx is computed correctly rounded", 0, FR_RCP},
    {"ex2", NULL, d_typed, 1, {[T_F32] = OP_EX2_F32, HALVES(OP_HALF)}, "approx ftz", "libm exp2f (f16/bf16: exp2, rounded once)",
     0, FR_EX2},
    {"lg2", NULL, d_typed, 1, {[T_F32] = OP_LG2_F32}, "approx ftz", "libm log2f", 0},
    {"sin", NULL, d_typed, 1, {[T_F32] = OP_SIN_F32}, "approx ftz", "libm sinf", 0},
    {"cos", NULL, d_typed, 1, {[T_F32] = OP_COS_F32}, "approx ftz", "libm cosf", 0},
    {"tanh", NULL, d_typed, 1, {[T_F32] = OP_TANH_F32, HALVES(OP_HALF)}, "approx", "libm tanhf (f16/bf16: tanh, rounded once)",
     0, FR_TANH},
    {"testp", NULL, d_testp, 1, {FLOATS(OP_TESTP_F32, OP_TESTP_F64)},
     "finite infinite number notanumber normal subnormal", "", 0},
    {"copysign", NULL, d_typed, 2, {FLOATS(OP_COPYSIGN_F32, OP_COPYSIGN_F64)}, "", "", 0},
    {"ld", NULL, d_load, 0, {VALUES(OP_LD)},
     "global shared shared::cta local param const nc ca cg cs lu cv acquire v2 v4 " MEMORY_HINTS,
     "cache and ordering hints have no effect: execution is sequentially consistent", 0},
    {"ldu", NULL, d_load, 0, {VALUES(OP_LD)}, "global v2 v4", "", 0},
    {"st", NULL, d_store, 0, {VALUES(OP_ST)},
     "global shared shared::cta local param wb cg cs wt release v2 v4 " MEMORY_HINTS,
     "st.param: call arguments only", 0},
    {"atom", NULL, d_atom, 0, {BITS(0, OP_ATOM, OP_ATOM), INTS(0, 0, OP_ATOM, OP_ATOM, OP_ATOM, OP_ATOM),
                               FLOATS(OP_ATOM, OP_ATOM)},
     "global shared shared::cta add min max exch cas and or xor inc dec relaxed acquire release acq_rel cta gpu sys",
     "float: add, exch, min, max", 0},
    {"red", NULL, d_red, 0, {BITS(0, OP_ATOM, OP_ATOM), INTS(0, 0, OP_ATOM, OP_ATOM, OP_ATOM, OP_ATOM),
                             FLOATS(OP_ATOM, OP_ATOM)},
     "global shared shared::cta add min max and or xor inc dec relaxed release cta gpu sys", "", 0},
    {"bra", NULL, d_bra, 0, {[T_NONE] = OP_BRA}, "uni", "", ROW_OWN_GUARD},
    {"call", NULL, d_call, 0, {[T_NONE] = OP_CALL}, "uni",
     "calls to functions of the module, direct, recursive or through a pointer (.callprototype; at most 32 "
     "frames deep); malloc and free use the device heap; __assertfail traps; vprintf (printf) writes to stdout when the launch ends; "
     "cudaGraphSetConditional sets a graph node's condition", ROW_RAW_OPERANDS},
    {"ret", NULL, d_plain, 0, {[T_NONE] = OP_RET}, "uni", "", 0},
    {"exit", NULL, d_plain, 0, {[T_NONE] = OP_EXIT}, "", "", 0},
    {"trap brkpt", NULL, d_plain, 0, {[T_NONE] = OP_TRAP}, "", "ends the launch with CUDA_ERROR_LAUNCH_FAILED", 0},
    {"membar", NULL, d_plain, 0, {[T_NONE] = OP_NOP}, "cta gl sys", "no-op: execution is sequentially consistent",
     0},
    {"fence", NULL, d_plain, 0, {[T_NONE] = OP_NOP}, "sc acq_rel cta gpu sys",
     "no-op: execution is sequentially consistent", 0},
    {"prefetch", NULL, d_plain, 0, {[T_NONE] = OP_NOP}, "global local L1 L2 L2::evict_last L2::evict_normal",
     "no-op", 0},
    {"prefetchu", NULL, d_plain, 0, {[T_NONE] = OP_NOP}, "L1", "no-op", 0},
    {"nanosleep", NULL, d_nanosleep, 0, {[T_U32] = OP_NANOSLEEP}, "",
     "the worker sleeps the time asked, at most 1 ms (the PTX limit)", 0},
    {"griddepcontrol", NULL, d_plain, 0, {[T_NONE] = OP_NOP}, "launch_dependents wait", "no-op", 0},
    {"discard", NULL, d_plain, 0, {[T_NONE] = OP_NOP}, "global L2", "no-op", 0},
    {"pmevent", NULL, d_plain, 0, {[T_NONE] = OP_NOP}, "mask", "no-op", 0},
    {"bar barrier", NULL, d_bar, 0, {[T_NONE] = OP_COLLECTIVE, [T_U32] = OP_COLLECTIVE, [T_PRED] = OP_COLLECTIVE},
     "sync aligned cta red popc and or warp", "every barrier is block-wide (named barrier counts are ignored)", 0},
    {"shfl", NULL, d_shfl, 0, {[T_B32] = OP_COLLECTIVE}, "sync up down bfly idx", "", 0},
    {"vote", NULL, d_vote, 0, {[T_PRED] = OP_COLLECTIVE, [T_B32] = OP_COLLECTIVE}, "sync all any uni ballot", "", 0},
    {"redux", NULL, d_redux, 0, {[T_U32] = OP_COLLECTIVE, [T_S32] = OP_COLLECTIVE, [T_B32] = OP_COLLECTIVE},
     "sync add min max and or xor", "", 0},
    {"activemask", NULL, d_typed, 0, {[T_B32] = OP_ACTIVEMASK}, "", "", 0},
};

/* Instructions known not to be implemented, and why: the load fails naming them. */
static const struct { const char *names, *what; } NOT_IMPLEMENTED[] = {
    {"mma wmma wgmma ldmatrix stmatrix movmatrix", "tensor-core matrix instructions"},
    {"tex tld4 txq suld sust sured suq istypep", "textures and surfaces"},
    {"cp mbarrier", "asynchronous copies (cp.async*) and mbarriers"},
    {"vadd vsub vabsdiff vmin vmax vshl vshr vmad vset vadd2 vsub2 vavrg2 vabsdiff2 vmin2 vmax2 vset2 vadd4 vsub4 "
     "vavrg4 vabsdiff4 vmin4 vmax4 vset4", "SIMD video instructions"},
    {"match", "match.sync"},
    {"fns", "find n-th set bit"},
    {"alloca stacksave stackrestore", "dynamic stack allocation"},
    {"getctarank mapa elect setmaxnreg", "clusters and warpgroup register control"},
    {"applypriority createpolicy", "cache eviction policies"},
};

static int has_all_mods(const Opcode *o, const char *words) {
    for (const char *p = words; *p;) {
        const char *e = strchr(p, ' ');
        int n = e ? (int)(e - p) : (int)strlen(p), found = 0;
        for (int i = 0; i < o->nmods && !found; i++) found = o->mods[i].len == n && !memcmp(o->mods[i].s, p, (size_t)n);
        if (!found) return 0;
        p = e ? e + 1 : p + n;
    }
    return 1;
}

static const PtxInstr *find_row(const Opcode *o) {
    for (size_t i = 0; i < sizeof INSTRUCTIONS / sizeof INSTRUCTIONS[0]; i++) {
        const PtxInstr *row = &INSTRUCTIONS[i];
        if (word_in(row->name, &o->base) && (!row->variant || has_all_mods(o, row->variant))) return row;
    }
    return NULL;
}

static void check_modifiers(Parser *P, const PtxInstr *row, Insn *I) {
    for (int i = 0; i < I->o.nmods; i++) {
        const Tok *m = &I->o.mods[i];
        int ty = type_of(m);
        if (ty != T_NONE) {
            if (!row->ops[ty]) fail(P, I->line, "%.*s: type .%.*s is not supported", I->tok.len, I->tok.s, m->len, m->s);
        } else if (!word_in(row->variant, m) && !word_in(row->mods, m)) {
            fail(P, I->line, "%.*s: modifier .%.*s is not supported", I->tok.len, I->tok.s, m->len, m->s);
        }
    }
    if (!I->o.ntypes && !row->ops[T_NONE]) fail(P, I->line, "%.*s: a type is required", I->tok.len, I->tok.s);
}

/* Decodes one instruction (the opcode token already read); a guard becomes an OP_GUARD before it. */
static void decode_instruction(Parser *P, Tok *optok, int guard, int gneg) {
    Insn I;
    memset(&I, 0, sizeof I);
    I.tok = *optok;
    I.line = optok->line;
    split_opcode(P, optok, &I.o);
    const PtxInstr *row = find_row(&I.o);
    if (!row) {
        for (size_t i = 0; i < sizeof NOT_IMPLEMENTED / sizeof NOT_IMPLEMENTED[0]; i++)
            if (word_in(NOT_IMPLEMENTED[i].names, &I.o.base))
                fail(P, I.line, "unsupported instruction %.*s (%s are not implemented)", optok->len, optok->s,
                     NOT_IMPLEMENTED[i].what);
        fail(P, I.line, "unsupported instruction %.*s", optok->len, optok->s);
    }
    check_modifiers(P, row, &I);
    I.t = I.o.ntypes ? I.o.types[I.o.ntypes - 1] : T_NONE;
    I.rnd = rounding_of(&I.o);
    I.guard = (uint32_t)guard;
    I.gneg = gneg;
    if (!(row->flags & ROW_RAW_OPERANDS)) {
        I.n = read_operands(P, I.ops, 8);
        expect(P, ";");
    }
    uint32_t guard_pc = UINT32_MAX;
    if (guard != SP_TRUE && !(row->flags & ROW_OWN_GUARD)) {
        guard_pc = P->m->ncode;
        Inst *g = emit(P, OP_GUARD, I.line);
        g->a = (uint32_t)guard;
        g->flags = gneg ? F_NEG_C : 0;
    }
    row->decode(P, row, &I);
    if (guard_pc != UINT32_MAX) {
        uint32_t skipped = P->m->ncode - guard_pc - 1;
        if (skipped) P->m->code[guard_pc].imm = skipped;
        else P->m->ncode--; /* nothing to guard */
    }
}
#undef SLOT
#undef DEST


/* ---- declarations ---- */

static uint32_t align_up(uint32_t v, uint32_t a) { return a ? (v + a - 1) / a * a : v; }

/* [.align N] .type name[<N>|[N]] -> name, element size, count (0 for name[]), alignment. */
typedef struct Decl {
    Tok name;
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
            Tok word = {t->s + 1, t->len - 1, t->line};
            int ty = type_of(&word);
            if (ty == T_NONE) {
                if (word_in("ptr global const shared local v2 v4", &word)) {
                    if (tok_is(&word, "v2")) d->count *= 2;
                    if (tok_is(&word, "v4")) d->count *= 4;
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
            uint64_t v;
            if (is_number_start(t)) {
                int f;
                v = parse_number(P, t, neg, &f);
            } else { /* the address of a variable or a function declared before (a table of pointers) */
                Name *n = neg ? NULL : find_name(P, t);
                int fn = neg || n ? -1 : function_index(P, t, 0);
                if (n && n->kind == N_GLOBAL) v = n->value;
                else if (fn >= 0) v = FUNCTION_ADDRESS_BASE + (uint64_t)fn * FUNCTION_ADDRESS_STEP;
                else fail(P, t->line, "initializer %.*s is not a number, nor a global variable or function declared "
                          "before", t->len, t->s);
            }
            if (dst && (i + 1) * elem <= max) memcpy(dst + i * elem, &v, elem);
            i++;
        }
    } while (depth > 0);
}

static void module_variable(Parser *P, int space, int line) {
    Decl d;
    parse_decl(P, &d);
    PtxModule *m = P->m;
    if (space == SPACE_SHARED) {
        for (int i = 0; i < P->nshared; i++)
            if (tok_eq(&P->shared[i].name, &d.name)) add_name(P, d.name, N_SHARED, P->shared[i].offset, 0);
        if (d.unsized) m->uses_dynamic_shared = 1;
    } else {
        uint64_t size = (uint64_t)d.elem * (d.count ? d.count : 1);
        uint64_t addr;
        if (mem_alloc(P->ctx, size, A_MODULE_GLOBAL, &addr))
            fail(P, line, "out of memory for global %.*s", d.name.len, d.name.s);
        memset((void *)(uintptr_t)addr, 0, size);
        if (tok_is(peek(P), "=")) skip_initializer(P, (uint8_t *)(uintptr_t)addr, d.elem, (uint32_t)size);
        int i = m->nglobals++;
        m->global_names = realloc(m->global_names, m->nglobals * sizeof(char *));
        m->global_addrs = realloc(m->global_addrs, m->nglobals * sizeof(uint64_t));
        m->global_sizes = realloc(m->global_sizes, m->nglobals * sizeof(uint64_t));
        m->global_names[i] = strndup(d.name.s, (size_t)d.name.len);
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
                if (d.align > P->m->data_align && !(d.align & (d.align - 1))) P->m->data_align = d.align;
                off = align_up(P->m->shared_static, d.align);
                P->m->shared_static = off + d.elem * d.count;
            }
            GROW(P->shared, P->nshared, P->capshared);
            P->shared[P->nshared++] = (SharedVar){d.name, off};
        }
    P->m->shared_static = align_up(P->m->shared_static, 16);
    P->m->uses_dynamic_shared = dynamic_count > 0;
    P->pos = 0;
}

static int function_index(Parser *P, const Tok *name, int create) {
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

static void free_params(PtxFunction *f) {
    for (int i = 0; i < f->nparams; i++) free(f->params[i].name);
    free(f->params);
    f->params = NULL;
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
        uint32_t size = d.elem * (d.count ? d.count : 1);
        uint32_t off;
        if (f->is_entry) {
            off = align_up(f->param_bytes, d.align);
            f->param_bytes = off + size;
        } else {
            off = align_up(*frame, d.align < 8 ? 8 : d.align);
            *frame = off + size;
        }
        if (is_ret) {
            f->has_ret = 1;
            f->ret_off = off;
            f->ret_size = size;
        } else {
            f->params = realloc(f->params, (f->nparams + 1) * sizeof(PtxParam));
            f->params[f->nparams++] = (PtxParam){strndup(d.name.s, (size_t)d.name.len), off, size, d.align};
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
    if (f->has_ret) add_name(P, tok_of("func_retval0"), N_FRAME, f->ret_off, 0);
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
            if (d.align > P->m->data_align && !(d.align & (d.align - 1))) P->m->data_align = d.align;
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
            uint32_t total = 1;
            for (;;) {
                int fl;
                total *= (uint32_t)parse_number(P, next(P), 0, &fl);
                if (!tok_is(peek(P), ",")) break;
                next(P);
            }
            if (req) proto.reqntid = total;
            else proto.maxntid = total;
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
    int idx = function_index(P, name, 1);
    PtxFunction *f = &P->m->funcs[idx];
    int is_declaration = tok_is(peek(P), ";");
    if (f->defined) {
        free_params(&proto);
        if (is_declaration) { next(P); return; } /* a prototype after the definition changes nothing */
        fail(P, name->line, "function %s is defined twice", f->name);
    }
    char *fname = f->name;
    free_params(f); /* an earlier declaration's parameters are replaced */
    *f = proto;
    f->name = fname;
    if (is_declaration) { next(P); return; }
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

static void parser_free(Parser *P) {
    free(P->toks), free(P->names), free(P->fixups), free(P->labels), free(P->callfix), free(P->consts);
    free(P->shared);
    free(P);
}

PtxModule *ptx_load(const char *text, Context *ctx, char *err, size_t errlen) {
    Parser *P = calloc(1, sizeof *P);
    P->err = err;
    P->errlen = errlen;
    P->ctx = ctx;
    P->m = calloc(1, sizeof(PtxModule));
    PtxModule *m = P->m;
    m->data_align = 16;
    if (setjmp(P->fail)) {
        for (int i = 0; i < m->nglobals; i++) mem_free(m->global_addrs[i], 1 << A_MODULE_GLOBAL);
        ptx_free(m);
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
                if (a->len > 3 && !strncmp(a->s, "sm_", 3) && atoi(a->s + 3) > 90)
                    fail(P, a->line, ".target %.*s is newer than the simulated device (sm_90)", a->len, a->s);
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
            module_variable(P, SPACE_GLOBAL, t->line);
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

/* ---- the coverage document ---- */

static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(*buf + *len, *cap - *len, fmt, ap);
        va_end(ap);
        if (n >= 0 && *len + (size_t)n < *cap) {
            *len += (size_t)n;
            return;
        }
        *cap = *cap * 2 + (size_t)(n > 0 ? n : 0);
        *buf = realloc(*buf, *cap);
    }
}

static char *g_coverage;

static void type_list(char **buf, size_t *len, size_t *cap, const uint16_t *ops) {
    int first = 1;
    for (int t = 1; t < T_COUNT; t++)
        if (ops[t]) append(buf, len, cap, "%s.%s", first ? "" : " ", PTX_TYPE_INFO[t].name), first = 0;
    if (ops[T_NONE]) append(buf, len, cap, "%s(none)", first ? "" : " ");
}

/* The words of a space-separated list, each after prefix, separated by sep. */
static void word_list(char **buf, size_t *len, size_t *cap, const char *words, const char *prefix, const char *sep) {
    for (const char *p = words; p && *p;) {
        const char *e = strchr(p, ' ');
        int n = e ? (int)(e - p) : (int)strlen(p);
        append(buf, len, cap, "%s%s%.*s", p == words ? "" : sep, prefix, n, p);
        p = e ? e + 1 : NULL;
    }
}

/* Markdown: every row of the decoder table with its types and modifiers, the special registers, and what is
 * known not to be implemented. Built from the tables above, so it cannot drift from the decoder. */
static void build_coverage(void) {
    size_t len = 0, cap = 1 << 15;
    char *b = malloc(cap);
    b[0] = 0;
    append(&b, &len, &cap,
           "# PTX coverage of the fake libcuda\n\n"
           "Generated from the decoder's tables (`INSTRUCTIONS`, `SPECIALS`, `NOT_IMPLEMENTED` in fakes/cuda/ptx.c) "
           "by `python fakes/cuda/gen_coverage.py`; do not edit by hand.\n\n"
           "A PTX instruction whose mnemonic, type or modifier is not listed here fails the module load with "
           "CUDA_ERROR_INVALID_PTX and a JIT log line `line N: ...` naming it: look the failing instruction up "
           "below. A row with a variant (`mul.wide`) is chosen when that modifier is present.\n\n"
           "| instruction | types | modifiers | notes |\n|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof INSTRUCTIONS / sizeof INSTRUCTIONS[0]; i++) {
        const PtxInstr *row = &INSTRUCTIONS[i];
        append(&b, &len, &cap, "| ");
        word_list(&b, &len, &cap, row->name, "`", "` / ");
        word_list(&b, &len, &cap, row->variant, ".", "");
        append(&b, &len, &cap, "` | ");
        type_list(&b, &len, &cap, row->ops);
        append(&b, &len, &cap, " | ");
        word_list(&b, &len, &cap, row->mods, ".", " ");
        append(&b, &len, &cap, " | %s |\n", row->note);
    }
    append(&b, &len, &cap, "\n## Special registers\n\n");
    for (size_t i = 0; i < sizeof SPECIALS / sizeof SPECIALS[0]; i++)
        append(&b, &len, &cap, "%s`%s`", i ? ", " : "", SPECIALS[i].name);
    append(&b, &len, &cap, "\n\n## Not implemented (the load fails naming the instruction)\n\n"
                           "| instructions | what |\n|---|---|\n");
    for (size_t i = 0; i < sizeof NOT_IMPLEMENTED / sizeof NOT_IMPLEMENTED[0]; i++) {
        append(&b, &len, &cap, "| ");
        word_list(&b, &len, &cap, NOT_IMPLEMENTED[i].names, "", " ");
        append(&b, &len, &cap, " | %s |\n", NOT_IMPLEMENTED[i].what);
    }
    g_coverage = b;
}

API const char *ironaccel_fake_ptx_coverage(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, build_coverage);
    return g_coverage;
}

