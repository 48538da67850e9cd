/* The PTX decoder: a table (INSTRUCTIONS: mnemonic, the opcode per type, the accepted modifiers) and the
 * decoders its rows name, turning one instruction into Insts; an instruction, type or modifier the table does
 * not list fails the load with the line, never a silent wrong answer. The same table generates the coverage
 * document (ironaccel_fake_ptx_coverage, PTX_COVERAGE.md). Built on ptx_lex.c; ptx.c calls it per
 * instruction. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptx_parse.h"

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

/* Contraction: add/sub.f32/f64 without a rounding modifier right after the mul.f32/f64 without one whose product
 * it adds becomes one fused multiply-add, as ptxas contracts them on hardware (the PTX ISA lets it: "mul/add
 * ... without rounding modifiers may be optimized aggressively by the code generator, e.g. into fma"; NVRTC
 * writes .rn on both when asked for no contraction, -fmad=false). The product is not rounded on its own: CuPy's
 * float remainder, x - floor(x / y) * y, is 3.8e-15 for 255.6 and 1.2 on an H200 and was 0 here. The mul stays
 * (its register may be read again). Not when a jump may land on the add, when either is guarded, saturated or
 * has a rounding modifier, or when the mul overwrote one of its own operands. */
static void contract(Parser *P, const Insn *I, Inst *in) {
    PtxModule *m = P->m;
    int is_add = in->op == OP_ADD_F32 || in->op == OP_ADD_F64, is_sub = in->op == OP_SUB_F32 || in->op == OP_SUB_F64;
    if ((!is_add && !is_sub) || I->rnd != R_NONE || in->flags || I->guard != SP_TRUE) return;
    uint32_t at = (uint32_t)(in - m->code);
    if (at < 1 || at - 1 < m->funcs[P->fn].entry_pc) return;
    const Inst *mul = &m->code[at - 1];
    int f64 = in->op == OP_ADD_F64 || in->op == OP_SUB_F64;
    if (mul->op != (f64 ? OP_MUL_F64 : OP_MUL_F32) || mul->sub2 != R_NONE || mul->flags) return;
    if (at >= 2 && m->code[at - 2].op == OP_GUARD) return;
    if (P->nlabels && P->labels[P->nlabels - 1].pc == at) return;
    if (mul->d == mul->a || mul->d == mul->b || mul->d == SP_SINK) return;
    uint32_t other;
    int op;
    if (in->a == mul->d && in->b != mul->d) other = in->b, op = is_add ? (f64 ? OP_FMA_F64 : OP_FMA_F32) : (f64 ? OP_FMS_F64 : OP_FMS_F32);
    else if (in->b == mul->d && in->a != mul->d) other = in->a, op = is_add ? (f64 ? OP_FMA_F64 : OP_FMA_F32) : (f64 ? OP_FNMA_F64 : OP_FNMA_F32);
    else return;
    in->op = (uint16_t)op;
    in->a = mul->a, in->b = mul->b, in->c = other;
}

/* d = op(a[, b[, c]]): the typed one-result form. f32/f64 arithmetic with a directed rounding mode or .sat
 * becomes OP_FROUND; f16/bf16 arithmetic is OP_HALF (round to nearest). */
static void d_typed(Parser *P, const PtxInstr *row, Insn *I) {
    need(P, I, row->nsrc + 1);
    int op = pick(P, row, I);
    int directed = I->rnd == R_RZ || I->rnd == R_RM || I->rnd == R_RP, sat = has_mod(&I->o, "sat");
    int relu = has_mod(&I->o, "relu"), nan = has_mod(&I->o, "NaN");
    if (I->rnd != R_NONE && !type_is_float(I->t))
        fail(P, I->line, "%.*s: a rounding modifier needs a float type", I->tok.len, I->tok.s);
    if ((relu || nan) && op != OP_HALF)
        fail(P, I->line, "%.*s: .relu and .NaN are supported on f16/bf16 types only", I->tok.len, I->tok.s);
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
    if (relu) in->flags |= F_RELU;
    if (nan) in->flags |= F_NAN;
    contract(P, I, in);
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
        } else if (nm->kind == N_SHARED || nm->kind == N_GLOBAL || nm->kind == N_KPARAM) {
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
        if (*space == SPACE_KPARAM && !P->m->funcs[P->fn].is_entry) /* a kernel's own parameters only */
            fail(P, mo->line, "register-addressed param space in a device function is not supported");
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

/* May a kernel-parameter load skip memcheck? Only an entry's load at a fixed offset inside its own parameters
 * (the launch's buffer is exactly that size); any other goes through the checked path. */
static int kparam_in_range(Parser *P, uint32_t base, int64_t offset, int size) {
    const PtxFunction *f = &P->m->funcs[P->fn];
    return f->is_entry && base == SP_ZERO && offset >= 0 && (uint64_t)offset + (uint64_t)size <= f->param_bytes;
}

static void decode_memory(Parser *P, const PtxInstr *row, Insn *I, int is_store) {
    int t = I->o.types[0];
    pick(P, row, I);
    int vec = has_mod(&I->o, "v8") ? 8 : has_mod(&I->o, "v4") ? 4 : has_mod(&I->o, "v2") ? 2 : 1;
    /* .L2::cache_hint adds the 64-bit cache-policy operand: a hint only, decoded and never read */
    int hint = has_mod(&I->o, "L2::cache_hint");
    if (I->n != 2 + hint)
        fail(P, I->line, "%.*s needs %s operands", I->tok.len, I->tok.s, hint ? "three (a cache policy last)" : "two");
    if (hint && I->ops[2].kind != O_REG && I->ops[2].kind != O_IMM)
        fail(P, I->line, "%.*s: the cache policy must be a register or a constant", I->tok.len, I->tok.s);
    Operand *mem = is_store ? &I->ops[0] : &I->ops[1], *val = is_store ? &I->ops[1] : &I->ops[0];
    if (mem->kind != O_MEM) fail(P, I->line, "%.*s: expected a memory operand", I->o.base.len, I->o.base.s);
    int space = space_of(&I->o);
    if (vec == 8 && (space != SPACE_GLOBAL || type_bytes(t) != 4)) /* PTX ISA 8.8: 256 bits of global memory */
        fail(P, I->line, "%.*s: .v8 needs .global and a 32-bit type", I->tok.len, I->tok.s);
    Inst tmp = {0};
    memory_operand(P, mem, &space, &tmp);
    int size = type_bytes(t);
    int op = is_store ? OP_ST : OP_LD;
    if (vec == 1 && !type_is_signed(t)) { /* the fast forms zero-extend */
        if (space == SPACE_GLOBAL && size == 4) op = is_store ? OP_ST_GLOBAL_32 : OP_LD_GLOBAL_32;
        else if (space == SPACE_GLOBAL && size == 8) op = is_store ? OP_ST_GLOBAL_64 : OP_LD_GLOBAL_64;
        else if (space == SPACE_SHARED && size == 4) op = is_store ? OP_ST_SHARED_32 : OP_LD_SHARED_32;
        else if (space == SPACE_KPARAM && !is_store && kparam_in_range(P, tmp.a, tmp.imm, size))
            op = size == 4 ? OP_LD_KPARAM_32 : size == 8 ? OP_LD_KPARAM_64 : op;
    }
    if (space == SPACE_KPARAM && is_store) fail(P, I->line, "st.param outside a call sequence");
    uint32_t regs[8] = {SP_SINK, SP_SINK, SP_SINK, SP_SINK, SP_SINK, SP_SINK, SP_SINK, SP_SINK};
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
    if (vec == 8) { /* registers 4..7 ride in the next instruction, a no-op the access reads them from */
        Inst *more = emit(P, OP_NOP, I->line);
        more->d = regs[4], more->b = regs[5], more->c = regs[6], more->e = regs[7];
    }
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
    /* the device runtime's cooperative groups (libcudadevrt, machine code only): the grid's handle, and the
     * grid-wide barrier, a block barrier that also waits for every other block of the grid */
    if (tok_is(&callee, "cudaCGGetIntrinsicHandle")) {
        if (nargs != 1 || !ret.len) fail(P, line, "cudaCGGetIntrinsicHandle takes a scope and returns a handle");
        emit(P, OP_GRID_HANDLE, line)->e = frame_param(P, &ret, line, "call return");
        return;
    }
    if (tok_is(&callee, "cudaCGSynchronize")) {
        if (nargs != 2) fail(P, line, "cudaCGSynchronize takes a handle and flags");
        Inst *in = emit(P, OP_COLLECTIVE, line);
        in->sub = COL_GRID_SYNC;
        in->d = in->b = in->c = SP_SINK, in->a = SP_ZERO;
        in->e = ret.len ? frame_param(P, &ret, line, "call return") : UINT32_MAX;
        m->uses_grid_sync = 1;
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

/* match.any.sync.b32 d, a, membermask;  match.all.sync.b64 d[|p], a, membermask */
static void d_match(Parser *P, const PtxInstr *row, Insn *I) {
    pick(P, row, I);
    need(P, I, 3);
    collective(P, I, has_mod(&I->o, "all") ? COL_MATCH_ALL : COL_MATCH_ANY, DEST(0), SLOT(1), SLOT(2), SP_SINK,
               I->ops[0].slot2 >= 0 ? dest_slot(P, I, (uint32_t)I->ops[0].slot2, 1) : SP_SINK, 0);
}

/* activemask.b32 d: a warp collective, so lanes that diverged to another activemask are not counted */
static void d_activemask(Parser *P, const PtxInstr *row, Insn *I) {
    pick(P, row, I);
    need(P, I, 1);
    collective(P, I, COL_ACTIVEMASK, DEST(0), SP_SINK, SP_SINK, SP_SINK, SP_SINK, 0);
}

/* mbarrier.init [a], count; .inval [a]; .arrive{_drop}{.noComplete} state, [a]{, count};
 * .test_wait/.try_wait{.parity} done, [a], state-or-parity{, suspend hint}; .pending_count count, state */
static void d_mbarrier(Parser *P, const PtxInstr *row, Insn *I) {
    static const struct { const char *mod; int op, nmin, nmax; } FORMS[] = {
        {"init", MB_INIT, 2, 2}, {"inval", MB_INVAL, 1, 1}, {"arrive", MB_ARRIVE, 2, 3},
        {"arrive_drop", MB_ARRIVE_DROP, 2, 3}, {"test_wait", MB_TEST_WAIT, 3, 3}, {"try_wait", MB_TRY_WAIT, 3, 4},
        {"pending_count", MB_PENDING_COUNT, 2, 2}};
    int form = -1;
    for (int i = 0; i < (int)(sizeof FORMS / sizeof *FORMS); i++)
        if (has_mod(&I->o, FORMS[i].mod)) form = i;
    if (form < 0) fail(P, I->line, "%.*s: unsupported form", I->tok.len, I->tok.s);
    int op = FORMS[form].op;
    if (I->n < FORMS[form].nmin || I->n > FORMS[form].nmax)
        fail(P, I->line, "%.*s: %d operands", I->tok.len, I->tok.s, I->n);
    int flags = (has_mod(&I->o, "parity") ? MB_PARITY : 0) | (has_mod(&I->o, "noComplete") ? MB_NO_COMPLETE : 0);
    if ((flags & MB_PARITY) && op != MB_TEST_WAIT && op != MB_TRY_WAIT)
        fail(P, I->line, "%.*s: .parity belongs to test_wait and try_wait", I->tok.len, I->tok.s);
    if ((flags & MB_NO_COMPLETE) && (op != MB_ARRIVE || I->n != 3))
        fail(P, I->line, "%.*s: .noComplete needs an arrive with a count", I->tok.len, I->tok.s);
    uint32_t d = SP_SINK, b = SP_SINK;
    int space = space_of(&I->o), mem = op == MB_INIT || op == MB_INVAL ? 0 : 1;
    Inst tmp = {0};
    if (op == MB_PENDING_COUNT) {
        d = DEST(0), b = SLOT(1);
    } else {
        if (I->ops[mem].kind != O_MEM) fail(P, I->line, "%.*s: expected a memory operand", I->tok.len, I->tok.s);
        memory_operand(P, &I->ops[mem], &space, &tmp);
        if (space != SPACE_SHARED && space != SPACE_GENERIC)
            fail(P, I->line, "%.*s: an mbarrier is in shared memory", I->tok.len, I->tok.s);
        if (mem) d = DEST(0); /* arrive's state may be the sink, _ */
        if (I->n > mem + 1) b = SLOT(mem + 1);
        if ((op == MB_ARRIVE || op == MB_ARRIVE_DROP) && I->n == 3) flags |= MB_HAS_COUNT;
    }
    pick(P, row, I);
    Inst *in = emit(P, OP_MBARRIER, I->line);
    in->d = d, in->a = tmp.a, in->b = b;
    in->imm = tmp.imm;
    in->sub = (uint8_t)space;
    in->sub2 = (uint8_t)op;
    in->flags = (uint8_t)flags;
}

/* tensormap.replace.tile.field{.global,.shared::cta}.b1024.b32/b64 [map], {ord,} new_val: ord is a constant */
static void d_tensormap(Parser *P, const PtxInstr *row, Insn *I) {
    static const struct { const char *mod; int field, type; } FIELDS[] = {
        {"global_address", TM_GLOBAL_ADDRESS, T_B64}, {"rank", TM_RANK, T_B32}, {"box_dim", TM_BOX_DIM, T_B32},
        {"global_dim", TM_GLOBAL_DIM, T_B32}, {"global_stride", TM_GLOBAL_STRIDE, T_B64},
        {"element_stride", TM_ELEMENT_STRIDE, T_B32}, {"interleave_layout", TM_INTERLEAVE, T_B32},
        {"swizzle_mode", TM_SWIZZLE, T_B32}, {"fill_mode", TM_FILL, T_B32}};
    int f = -1;
    for (int i = 0; i < (int)(sizeof FIELDS / sizeof *FIELDS); i++)
        if (has_mod(&I->o, FIELDS[i].mod)) f = i;
    if (f < 0 || !has_mod(&I->o, "replace") || !has_mod(&I->o, "tile") || !has_mod(&I->o, "b1024"))
        fail(P, I->line, "%.*s: unsupported form", I->tok.len, I->tok.s);
    pick(P, row, I);
    if (I->t != FIELDS[f].type) fail(P, I->line, "%.*s: the field's type is .b%d", I->tok.len, I->tok.s,
                                     FIELDS[f].type == T_B64 ? 64 : 32);
    unsigned dims = tensor_map_field_dims(FIELDS[f].field);
    need(P, I, dims ? 3 : 2);
    if (I->ops[0].kind != O_MEM) fail(P, I->line, "%.*s: expected a memory operand", I->tok.len, I->tok.s);
    int64_t ord = 0;
    if (dims) {
        if (I->ops[1].kind != O_IMM || I->ops[1].imm >= dims)
            fail(P, I->line, "%.*s: ord must be a constant below %u", I->tok.len, I->tok.s, dims);
        ord = (int64_t)I->ops[1].imm;
    }
    int space = space_of(&I->o);
    Inst tmp = {0};
    memory_operand(P, &I->ops[0], &space, &tmp);
    uint32_t value = SLOT(dims ? 2 : 1);
    Inst *in = emit(P, OP_TENSORMAP_REPLACE, I->line);
    in->a = tmp.a, in->imm = tmp.imm, in->b = value;
    in->c = (uint32_t)ord;
    in->sub = (uint8_t)space;
    in->sub2 = (uint8_t)FIELDS[f].field;
    in->type = (uint8_t)I->t;
}

#include "ptx_instructions.inc"

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
void decode_instruction(Parser *P, Tok *optok, int guard, int gneg) {
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
           "Generated from the decoder's tables (`INSTRUCTIONS`, `SPECIALS`, `NOT_IMPLEMENTED` in fakes/cuda/ptx_decode.c and ptx_lex.c) "
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
    for (size_t i = 0; i < NSPECIALS; i++)
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
