/* The decoded instruction set, as tables: PTX types, memory spaces, opcodes. Each table is one X-macro, so
 * the enum, the names and the properties cannot disagree between the decoder (ptx_decode.c) and the interpreter
 * (interp.c). Hot opcodes are specialised by type at decode time so the interpreter does no type dispatch. */
#ifndef FAKECUDA_OPS_H
#define FAKECUDA_OPS_H

#include <stdint.h>

/* ---- PTX types: X(enum suffix, PTX spelling, bytes, class) ---- */
enum TypeClass { TC_NONE, TC_BITS, TC_UNSIGNED, TC_SIGNED, TC_FLOAT, TC_PRED };
#define PTX_TYPES(X)                                                                                          \
    X(NONE, "", 0, TC_NONE)                                                                                   \
    X(B8, "b8", 1, TC_BITS) X(B16, "b16", 2, TC_BITS) X(B32, "b32", 4, TC_BITS) X(B64, "b64", 8, TC_BITS)     \
    X(U8, "u8", 1, TC_UNSIGNED) X(U16, "u16", 2, TC_UNSIGNED) X(U32, "u32", 4, TC_UNSIGNED)                   \
    X(U64, "u64", 8, TC_UNSIGNED)                                                                             \
    X(S8, "s8", 1, TC_SIGNED) X(S16, "s16", 2, TC_SIGNED) X(S32, "s32", 4, TC_SIGNED) X(S64, "s64", 8, TC_SIGNED) \
    X(F16, "f16", 2, TC_FLOAT) X(BF16, "bf16", 2, TC_FLOAT) X(F32, "f32", 4, TC_FLOAT) X(F64, "f64", 8, TC_FLOAT) \
    X(F16X2, "f16x2", 4, TC_FLOAT) X(BF16X2, "bf16x2", 4, TC_FLOAT)                                           \
    X(S16X2, "s16x2", 4, TC_SIGNED) X(U16X2, "u16x2", 4, TC_UNSIGNED) /* two 16-bit integers: min/max only */  \
    X(E4M3X2, "e4m3x2", 2, TC_BITS) X(E5M2X2, "e5m2x2", 2, TC_BITS) /* two 8-bit floats: cvt only */         \
    X(PRED, "pred", 1, TC_PRED)

enum PtxType {
#define X(e, name, bytes, cls) T_##e,
    PTX_TYPES(X)
#undef X
    T_COUNT
};

typedef struct PtxTypeInfo {
    const char *name;
    uint8_t bytes, cls;
} PtxTypeInfo;

static const PtxTypeInfo PTX_TYPE_INFO[T_COUNT] = {
#define X(e, name, bytes, cls) {name, bytes, cls},
    PTX_TYPES(X)
#undef X
};

static inline int type_bytes(int t) { return PTX_TYPE_INFO[t].bytes; }
static inline int type_bits(int t) { return 8 * PTX_TYPE_INFO[t].bytes; }
static inline int type_is_signed(int t) { return PTX_TYPE_INFO[t].cls == TC_SIGNED; }
static inline int type_is_float(int t) { return PTX_TYPE_INFO[t].cls == TC_FLOAT; }

/* ---- state spaces as the interpreter addresses them: X(enum suffix, name in reports) ---- */
#define SPACES(X) X(GLOBAL, "global") X(SHARED, "shared") X(LOCAL, "local") X(FRAME, "param") \
    X(KPARAM, "param") X(GENERIC, "generic")

enum Space {
#define X(e, name) SPACE_##e,
    SPACES(X)
#undef X
    SPACE_COUNT
};

/* ---- modifiers that select behaviour ---- */
enum Cmp { C_EQ, C_NE, C_LT, C_LE, C_GT, C_GE, C_EQU, C_NEU, C_LTU, C_LEU, C_GTU, C_GEU, C_NUM, C_NAN };

enum AtomOp { AT_ADD, AT_MIN, AT_MAX, AT_EXCH, AT_CAS, AT_AND, AT_OR, AT_XOR, AT_INC, AT_DEC };

enum Rounding { R_NONE, R_RN, R_RZ, R_RM, R_RP, R_RNI, R_RZI, R_RMI, R_RPI };

enum Collective { COL_BAR, COL_BAR_RED_POPC, COL_BAR_RED_AND, COL_BAR_RED_OR, COL_GRID_SYNC, COL_WARP_SYNC, COL_SHFL_UP,
                  COL_SHFL_DOWN, COL_SHFL_BFLY, COL_SHFL_IDX, COL_VOTE_ALL, COL_VOTE_ANY, COL_VOTE_UNI,
                  COL_VOTE_BALLOT, COL_REDUX_ADD, COL_REDUX_MIN, COL_REDUX_MAX, COL_REDUX_AND, COL_REDUX_OR,
                  COL_REDUX_XOR, COL_MATCH_ANY, COL_MATCH_ALL, COL_ACTIVEMASK };

/* What an OP_MBARRIER does (Inst.sub2); its flags are the MB_* of fake.h. */
enum MbarrierOp { MB_INIT, MB_INVAL, MB_ARRIVE, MB_ARRIVE_DROP, MB_TEST_WAIT, MB_TRY_WAIT, MB_PENDING_COUNT };

/* The CUtensorMap field tensormap.replace writes (Inst.sub2). */
enum TensorMapField { TM_GLOBAL_ADDRESS, TM_RANK, TM_BOX_DIM, TM_GLOBAL_DIM, TM_GLOBAL_STRIDE, TM_ELEMENT_STRIDE,
                      TM_INTERLEAVE, TM_SWIZZLE, TM_FILL };

/* The float operation of OP_FROUND (f32/f64 with a directed rounding mode or .sat) and OP_HALF (f16/bf16,
 * scalar and x2). */
enum FloatOp { FR_NONE, FR_ADD, FR_SUB, FR_MUL, FR_FMA, FR_DIV, FR_SQRT, FR_RCP, FR_MIN, FR_MAX, FR_NEG, FR_ABS, FR_EX2, FR_TANH };

enum TestKind { TP_FINITE, TP_INFINITE, TP_NUMBER, TP_NAN, TP_NORMAL, TP_SUBNORMAL };

/* ---- OPS(X): every decoded opcode. NONE (0) is "no opcode": a zero entry in a decoder table means the form
 * is not implemented, and the interpreter treats it as an illegal instruction. ---- */
#define OPS(X) \
    X(NONE) X(NOP) X(MOV) X(MOV_PACK64) X(MOV_UNPACK64) X(MOV_PACK32) X(MOV_UNPACK32) X(LOCAL_ADDR) \
    X(ADD_I16) X(ADD_I32) X(ADD_I64) X(ADD_F32) X(ADD_F64) \
    X(SUB_I16) X(SUB_I32) X(SUB_I64) X(SUB_F32) X(SUB_F64) \
    X(MUL_LO_I16) X(MUL_LO_I32) X(MUL_LO_I64) X(MUL_F32) X(MUL_F64) \
    X(MUL_WIDE_S16) X(MUL_WIDE_U16) X(MUL_WIDE_S32) X(MUL_WIDE_U32) \
    X(MUL_HI_S32) X(MUL_HI_U32) X(MUL_HI_S64) X(MUL_HI_U64) X(MUL24_LO_S32) X(MUL24_LO_U32) \
    X(MAD_LO_I16) X(MAD_LO_I32) X(MAD_LO_I64) X(MAD_WIDE_S32) X(MAD_WIDE_U32) X(MAD_WIDE_S16) X(MAD_WIDE_U16) \
    X(MAD_HI_S32) X(MAD_HI_U32) X(MAD_HI_S64) X(MAD_HI_U64) X(MAD24_LO_S32) X(MAD24_LO_U32) \
    X(SAD_S16) X(SAD_U16) X(SAD_S32) X(SAD_U32) X(SAD_S64) X(SAD_U64) X(DP4A) X(DP2A) \
    X(FMA_F32) X(FMA_F64) X(FMS_F32) X(FMS_F64) X(FNMA_F32) X(FNMA_F64) X(FROUND) X(HALF) X(SETP_HALF) X(CVT_PACK) \
    X(ADDC_32) X(ADDC_64) X(SUBC_32) X(SUBC_64) X(MADC_LO_32) X(MADC_LO_64) \
    X(MADC_HI_U32) X(MADC_HI_S32) X(MADC_HI_U64) X(MADC_HI_S64) X(SHF_L) X(SHF_R) \
    X(DIV_S16) X(DIV_U16) X(DIV_S32) X(DIV_U32) X(DIV_S64) X(DIV_U64) X(DIV_F32) X(DIV_F64) \
    X(REM_S16) X(REM_U16) X(REM_S32) X(REM_U32) X(REM_S64) X(REM_U64) \
    X(MIN_S16) X(MIN_U16) X(MIN_S32) X(MIN_U32) X(MIN_S64) X(MIN_U64) X(MIN_F32) X(MIN_F64) X(MIN_S16X2) X(MIN_U16X2) \
    X(MAX_S16) X(MAX_U16) X(MAX_S32) X(MAX_U32) X(MAX_S64) X(MAX_U64) X(MAX_F32) X(MAX_F64) X(MAX_S16X2) X(MAX_U16X2) \
    X(ABS_S16) X(ABS_S32) X(ABS_S64) X(ABS_F32) X(ABS_F64) X(NEG_I16) X(NEG_I32) X(NEG_I64) X(NEG_F32) X(NEG_F64) \
    X(AND) X(OR) X(XOR) X(NOT) X(NOT_PRED) X(CNOT) X(LOP3) \
    X(SHL_16) X(SHL_32) X(SHL_64) X(SHR_U16) X(SHR_S16) X(SHR_U32) X(SHR_S32) X(SHR_U64) X(SHR_S64) \
    X(POPC_32) X(POPC_64) X(CLZ_32) X(CLZ_64) X(BREV_32) X(BREV_64) \
    X(BFE_U32) X(BFE_S32) X(BFE_U64) X(BFE_S64) X(BFI_32) X(BFI_64) X(PRMT) \
    X(BFIND_U32) X(BFIND_S32) X(BFIND_U64) X(BFIND_S64) \
    X(SETP_S16) X(SETP_U16) X(SETP_S32) X(SETP_U32) X(SETP_S64) X(SETP_U64) X(SETP_F32) X(SETP_F64) \
    X(SELP) X(SET) X(CVT) X(CVTA_SHARED) X(CVTA_TO_SHARED) X(CVTA_LOCAL) X(CVTA_TO_LOCAL) X(ISSPACEP) \
    X(SQRT_F32) X(SQRT_F64) X(RSQRT_F32) X(RSQRT_F64) X(RCP_F32) X(RCP_F64) X(EX2_F32) X(LG2_F32) \
    X(SIN_F32) X(COS_F32) X(TANH_F32) X(TESTP_F32) X(TESTP_F64) X(COPYSIGN_F32) X(COPYSIGN_F64) \
    X(LD_GLOBAL_32) X(LD_GLOBAL_64) X(ST_GLOBAL_32) X(ST_GLOBAL_64) X(LD_SHARED_32) X(ST_SHARED_32) \
    X(LD_KPARAM_32) X(LD_KPARAM_64) X(LD) X(ST) X(ATOM) \
    X(NANOSLEEP) X(GUARD) X(BRA) X(SETP_BRA_S32) X(SETP_BRA_U32) X(SETP_BRA_S64) X(SETP_BRA_U64) X(BRA_IF) X(CALL) X(CALL_INDIRECT) X(RET) X(EXIT) X(TRAP) X(SET_CONDITIONAL) X(GRID_HANDLE) X(CVT_PACK_F8) X(CVT_UNPACK_F8) X(PRINTF) X(MALLOC) X(FREE) X(COLLECTIVE) X(MBARRIER) X(TENSORMAP_REPLACE)

enum Op {
#define X(name) OP_##name,
    OPS(X)
#undef X
    OP_COUNT
};

/* The opcode names, for traces and reports. */
static const char *const OP_NAMES[OP_COUNT] = {
#define X(name) #name,
    OPS(X)
#undef X
};

/* Inst.flags bits */
#define F_NEG_C 0x1     /* setp/vote: the predicate source is negated; GUARD/BRA_IF: the guard is negated */
#define F_SAT 0x2       /* cvt.sat, and .sat of OP_FROUND / OP_HALF: clamp to [0, 1] */
#define F_ASSERT 0x4    /* trap from __assertfail */
#define F_SHIFTAMT 0x8  /* bfind.shiftamt */
#define F_CLAMP 0x10    /* shf.clamp (else .wrap) */
#define F_SIGNED_A 0x20 /* dp4a/dp2a: a's elements are signed */
#define F_SIGNED_B 0x40 /* dp4a/dp2a: b's elements are signed */
#define F_RELU 0x80     /* cvt.relu to 8-bit floats, fma.relu of f16/bf16: a negative value becomes 0 */
#define F_NAN F_CLAMP   /* min/max.NaN of f16/bf16 (OP_HALF, never a shf): a NaN operand gives the canonical NaN */

#endif
