/* The PTX loader's shared parser state and helpers: ptx_lex.c (tokens, names, operands, emitting) at the
 * bottom, ptx_decode.c (the instruction table and its decoders, the coverage document) on it, ptx.c
 * (declarations, functions, the module) on both. Internal to the loader: the rest of the fake sees fake.h's
 * ptx_load and ptx_free only. */
#ifndef FAKECUDA_PTX_PARSE_H
#define FAKECUDA_PTX_PARSE_H

#include <setjmp.h>

#include "fake.h"
#include "ops.h"

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

typedef struct SharedVar { /* a .shared declaration, laid out before decoding (ptx.c's layout_shared) */
    Tok name;
    int tok;          /* index of its .shared token: how the decoder finds it again */
    int owner;        /* the LayoutFn whose body declares it, or -1 (module level) */
    uint64_t size;
    uint32_t align, offset;
    int unsized;      /* extern .shared x[]: dynamic shared memory */
    int *kernels, nkernels, capkernels; /* the kernels that may touch it (LayoutFn indices) */
} SharedVar;

typedef struct LayoutFn { /* a function of the text, as the shared layout sees it before decoding */
    Tok name;
    int is_entry, begin, end;          /* its body's '{' and '}' tokens */
    int *calls, ncalls, capcalls;      /* LayoutFn indices its body names (calls, addresses taken) */
    int *vars, nvars, capvars;         /* SharedVar indices its body names or declares */
    uint32_t shared_static, shared_declared; /* an entry's: see PtxFunction */
} LayoutFn;

typedef struct Parser {
    Tok *toks;
    int ntoks, pos;
    jmp_buf fail;
    CUresult code; /* what a failed load returns: INVALID_PTX unless a step says otherwise */
    char *err;
    size_t errlen;
    PtxModule *m;
    Context *ctx;
    int fn; /* index of the function being decoded */
    int weak; /* the module-level declaration being read was marked .weak */
    unsigned newest_target; /* the newest .target architecture this load accepts (ptx_load's argument) */
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
    SharedVar *shared; /* in text order */
    int nshared, capshared;
    LayoutFn *layout;
    int nlayout, caplayout;
} Parser;

/* An opcode split at dots: "ld.global.nc.v4.f32" -> base "ld", mods {global, nc, v4, f32}. */
typedef struct Opcode {
    Tok base;
    Tok mods[12];
    int nmods;
    int types[3], ntypes; /* the type modifiers, in order */
} Opcode;

enum OperandKind { O_REG, O_IMM, O_MEM, O_VEC, O_SYM, O_LIST };
typedef struct Operand {
    int kind;
    int slot;       /* O_REG; O_MEM base register or -1 */
    int neg;        /* !%p */
    int slot2;      /* %p|%q second register, or -1 */
    uint64_t imm;   /* O_IMM bits; O_MEM offset */
    Tok sym;        /* O_SYM, or O_MEM symbol base (len 0: none) */
    int vec[8], nvec; /* up to .v8 */
    int line;
} Operand;

/* PTX special registers and the frame slots they live in. */
typedef struct SpecialRegister {
    const char *name;
    int slot;
} SpecialRegister;
extern const SpecialRegister SPECIALS[];
extern const size_t NSPECIALS;

void fail(Parser *P, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
void lex(Parser *P, const char *text);
Tok *peek(Parser *P);
int tok_is(const Tok *t, const char *s);
int tok_eq(const Tok *a, const Tok *b);
Tok *next(Parser *P);
void expect(Parser *P, const char *s);
int word_in(const char *list, const Tok *w);
Name *find_name(Parser *P, const Tok *id);
void add_name(Parser *P, Tok id, int kind, uint64_t value, uint32_t count);
Tok tok_of(const char *s);
int reg_slot(Parser *P, const Tok *t);
uint32_t const_slot(Parser *P, uint64_t bits);
int function_index(Parser *P, const Tok *name, int create);
int type_of(const Tok *t);
void split_opcode(Parser *P, const Tok *t, Opcode *o);
int has_mod(const Opcode *o, const char *m);
uint64_t parse_number(Parser *P, Tok *t, int negative);
int is_number_start(Tok *t);
Inst *emit(Parser *P, int op, int line);
uint32_t value_slot(Parser *P, Operand *o);
int read_operands(Parser *P, Operand *ops, int max);

/* Decodes one instruction (optok its opcode, guard its @p predicate slot, gneg for @!p) into the function
 * being built. */
void decode_instruction(Parser *P, Tok *optok, int guard, int gneg);

#endif
