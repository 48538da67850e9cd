/* The PTX interpreter: runs a grid block by block, blocks spread over host threads. Inside a block each
 * thread runs until it reaches a barrier, a warp collective (shfl, vote, redux, bar.warp.sync) or exits;
 * then collectives are resolved per warp and barriers per block, so threads interleave exactly at
 * synchronisation points. Every load/store is checked (memcheck) before it touches memory. */
#define _GNU_SOURCE
#include <fenv.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake.h"
#include "ops.h"

/* TS_WAIT: paused at an mbarrier wait whose phase is not complete, until the block's other threads have run */
enum ThreadState { TS_RUN, TS_BAR, TS_WARP, TS_WAIT, TS_DONE, TS_FAULT };

typedef struct Frame {
    uint32_t ret_pc, call;
    int callee;
    uint64_t *regs;
    uint32_t lbase;
} Frame;

typedef struct Thread {
    uint64_t *regs;
    uint32_t pc, lbase;
    uint8_t *local;
    int state, depth;
    unsigned linear; /* index of the thread in its block */
    Frame *stack; /* CALL_DEPTH_MAX frames, apart so that scanning the threads of a warp stays in cache */
} Thread;

/* What ends a launch that runs too long (IRONACCEL_FAKE_WATCHDOG_S / _INSTRUCTIONS), checked every
 * WATCH_INTERVAL loop back-edges or calls of a worker (what lets one thread run long), and after every block
 * (what lets a loop-free grid of 2^31 blocks run long). */
typedef struct Watchdog {
    double seconds;       /* 0: no time limit */
    uint64_t deadline_ns; /* CLOCK_MONOTONIC */
    uint64_t budget;      /* thread-instructions of the whole launch; 0: no limit */
    uint64_t executed;    /* across the workers, as of their last checks */
    volatile int *stop;   /* the grid is ending: another worker faulted */
} Watchdog;

enum WatchCause { WATCH_NONE, WATCH_TIME, WATCH_BUDGET, WATCH_STOP };
#define WATCH_INTERVAL 1024

/* The grid-wide barrier of cooperative groups (cudaCGSynchronize): every block of such a grid runs on its own
 * worker, and a block that has ended counts as arrived. */
typedef struct GridBarrier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t nblocks, arrived, ended, generation;
} GridBarrier;

static void grid_barrier_release_if_all(GridBarrier *g) {
    if (g->arrived && g->arrived + g->ended == g->nblocks) {
        g->arrived = 0;
        g->generation++;
        pthread_cond_broadcast(&g->cv);
    }
}

/* 0 once every block has arrived; 1 when the launch is ending instead (another worker faulted). */
static int grid_barrier_wait(GridBarrier *g, volatile int *stop) {
    pthread_mutex_lock(&g->mu);
    uint64_t generation = g->generation;
    g->arrived++;
    grid_barrier_release_if_all(g);
    while (generation == g->generation && !*stop) pthread_cond_wait(&g->cv, &g->mu);
    int stopped = generation == g->generation;
    pthread_mutex_unlock(&g->mu);
    return stopped;
}

static void grid_barrier_end_block(GridBarrier *g) {
    pthread_mutex_lock(&g->mu);
    g->ended++;
    grid_barrier_release_if_all(g);
    pthread_mutex_unlock(&g->mu);
}

/* Wakes the waiting blocks after the grid's stop flag was set. */
static void grid_barrier_stop(GridBarrier *g) {
    pthread_mutex_lock(&g->mu);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* What a launch's printf calls wrote, written to stdout when it ends; at most the context's
 * CU_LIMIT_PRINTF_FIFO_SIZE bytes (the rest is dropped, as a full FIFO drops it on hardware). */
typedef struct PrintOutput {
    pthread_mutex_t mu;
    char *text;
    size_t len, cap, limit;
} PrintOutput;

typedef struct Exec {
    const LaunchSpec *spec;
    PrintOutput *print;
    Context *ctx; /* the launch's: its device heap serves malloc */
    const PtxModule *m;
    const PtxFunction *kernel;
    const Range *ranges;
    int nranges;
    uint64_t cache_lo, cache_hi;
    uint8_t *shared;
    uint64_t shared_size;
    uint32_t local_size;
    unsigned block_id[3];
    /* the fault that ended the launch */
    CUresult fault;
    uint64_t fault_addr;
    unsigned fault_size;
    int fault_store, fault_space;
    uint32_t fault_pc;
    uint64_t steps;        /* instructions this worker has run (not counting guarded-off ones) */
    unsigned fault_linear; /* the faulting thread's index in its block */
    Watchdog *watch;
    GridBarrier *grid_sync; /* NULL unless the module calls cudaCGSynchronize */
    uint32_t watch_countdown;
    uint64_t watch_reported; /* steps already added to watch->executed */
    int watch_cause;
} Exec;

static inline float f32(uint64_t v) { union { uint32_t u; float f; } x = {(uint32_t)v}; return x.f; }
static inline double f64(uint64_t v) { union { uint64_t u; double f; } x = {v}; return x.f; }
static inline uint64_t bits32(float f) { union { float f; uint32_t u; } x = {f}; return x.u; }
static inline uint64_t bits64(double f) { union { double f; uint64_t u; } x = {f}; return x.u; }

/* ---- memcheck ---- */

/* Does the access [a, a + n) lie inside [lo, hi)? The one bounds test of memcheck: it never wraps, so an
 * address near 2^64 (p[-1] of a null p) or an offset before a buffer is outside, never a host pointer. */
static inline int span_in(uint64_t a, uint64_t n, uint64_t lo, uint64_t hi) {
    return a >= lo && a <= hi && n <= hi - a;
}

static uint8_t *global_slow(Exec *X, uint64_t a, unsigned n) {
    int lo = 0, hi = X->nranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (a < X->ranges[mid].lo) hi = mid - 1;
        else if (a >= X->ranges[mid].hi) lo = mid + 1;
        else {
            if (!span_in(a, n, X->ranges[mid].lo, X->ranges[mid].hi)) return NULL;
            X->cache_lo = X->ranges[mid].lo;
            X->cache_hi = X->ranges[mid].hi;
            return (uint8_t *)(uintptr_t)a;
        }
    }
    return NULL;
}

static inline uint8_t *global_ptr(Exec *X, uint64_t a, unsigned n) {
    if (span_in(a, n, X->cache_lo, X->cache_hi)) return (uint8_t *)(uintptr_t)a;
    return global_slow(X, a, n);
}

/* Host pointer for an access of n bytes at address a in a space, or NULL (a memcheck violation). */
static uint8_t *address(Exec *X, Thread *T, int space, uint64_t a, unsigned n) {
    if (n > 1 && (a & (n - 1))) return NULL;
    switch (space) {
    case SPACE_GLOBAL: return global_ptr(X, a, n);
    case SPACE_SHARED: return span_in(a, n, 0, X->shared_size) ? X->shared + a : NULL;
    case SPACE_LOCAL: return span_in(a, n, 0, X->local_size) ? T->local + a : NULL;
    case SPACE_FRAME: /* a frame's variables: from the frame's base to the end of the thread's local memory */
        return span_in(a, n, 0, X->local_size - T->lbase) ? T->local + T->lbase + a : NULL;
    case SPACE_KPARAM: return span_in(a, n, 0, X->spec->param_bytes) ? X->spec->params + a : NULL;
    default: {
        uint64_t sh = (uint64_t)(uintptr_t)X->shared, lo = (uint64_t)(uintptr_t)T->local;
        uint64_t sh_end = sh + X->shared_size, lo_end = lo + X->local_size;
        if (span_in(a, 1, sh, sh_end)) return span_in(a, n, sh, sh_end) ? (uint8_t *)(uintptr_t)a : NULL;
        if (span_in(a, 1, lo, lo_end)) return span_in(a, n, lo, lo_end) ? (uint8_t *)(uintptr_t)a : NULL;
        return global_ptr(X, a, n);
    }
    }
}

/* Records the first fault of the launch in this worker (the thread's pc is the faulting instruction). */
static int fault(Exec *X, Thread *T, CUresult code, uint64_t a, unsigned n, int store, int space) {
    if (!X->fault) {
        X->fault = code;
        X->fault_addr = a;
        X->fault_size = n;
        X->fault_store = store;
        X->fault_space = space;
        X->fault_pc = T->pc;
        X->fault_linear = T->linear;
    }
    T->state = TS_FAULT;
    return TS_FAULT;
}

/* ---- conversions and rounding ----
 * Every float format is rounded by one routine from an exact value (an integer significand times a power of
 * two), so each of .rn/.rz/.rm/.rp is exact for f16, bf16, f32 and f64 alike. Arithmetic in f16/bf16 is done
 * in double rounded to odd (the inexact flag becomes the last bit), which then rounds to the narrow format
 * exactly as the infinitely precise result would; f32/f64 arithmetic with a directed mode runs in that mode. */

typedef struct FloatFormat {
    int mant_bits, exp_bits;
} FloatFormat;
static const FloatFormat FMT_F16 = {10, 5}, FMT_BF16 = {7, 8}, FMT_F32 = {23, 8}, FMT_F64 = {52, 11};

static const FloatFormat *format_of(int t) {
    switch (t) {
    case T_F16: case T_F16X2: return &FMT_F16;
    case T_BF16: case T_BF16X2: return &FMT_BF16;
    case T_F32: return &FMT_F32;
    default: return &FMT_F64;
    }
}

/* The bits of neg * mant * 2^exp in format F, rounded by mode (R_RN, R_RZ, R_RM, R_RP). */
static uint64_t round_to_format(int neg, uint64_t mant, int exp, const FloatFormat *F, int mode) {
    int m = F->mant_bits, bias = (1 << (F->exp_bits - 1)) - 1;
    uint64_t sign = (uint64_t)neg << (m + F->exp_bits), inf = (((uint64_t)1 << F->exp_bits) - 1) << m;
    if (!mant) return sign;
    int top = 63 - __builtin_clzll(mant);
    int e = top + exp, emin = 1 - bias;
    int unit = (e < emin ? emin : e) - m; /* exponent of the last place kept */
    int shift = unit - exp;
    uint64_t q;
    int inexact, above, tie;
    if (shift <= 0) {
        q = mant << -shift;
        inexact = 0, above = 0, tie = 0;
    } else if (shift > 64) { /* below half a unit */
        q = 0;
        inexact = 1, above = 0, tie = 0;
    } else {
        unsigned __int128 wide = mant, rem = wide & ((((unsigned __int128)1) << shift) - 1);
        unsigned __int128 half = ((unsigned __int128)1) << (shift - 1);
        q = (uint64_t)(wide >> shift);
        inexact = rem != 0;
        above = rem > half;
        tie = rem == half;
    }
    int up = mode == R_RZ ? 0 : mode == R_RM ? neg && inexact : mode == R_RP ? !neg && inexact
           : above || (tie && (q & 1));
    q += (uint64_t)up;
    if (q >> (m + 1)) q >>= 1, unit++; /* rounded up to the next power of two */
    if (q < ((uint64_t)1 << m)) return sign | q; /* subnormal (or the smallest normal, 2^m, encodes itself) */
    int biased = unit + m + bias;
    if (biased >= (1 << F->exp_bits) - 1) { /* overflow */
        int to_inf = mode == R_RN || (mode == R_RM && neg) || (mode == R_RP && !neg);
        return sign | (to_inf ? inf : inf - 1);
    }
    return sign | ((uint64_t)biased << m) | (q - ((uint64_t)1 << m));
}

static uint64_t double_to_format(double v, const FloatFormat *F, int mode) {
    int m = F->mant_bits;
    uint64_t sign = (uint64_t)(signbit(v) != 0) << (m + F->exp_bits), inf = (((uint64_t)1 << F->exp_bits) - 1) << m;
    if (isnan(v)) return sign | inf | ((uint64_t)1 << (m - 1));
    if (isinf(v)) return sign | inf;
    int e;
    double frac = frexp(fabs(v), &e); /* |v| = frac * 2^e, frac in [0.5, 1): 53 bits cover it exactly */
    return round_to_format(signbit(v) != 0, (uint64_t)ldexp(frac, 53), e - 53, F, mode);
}

static double half_to_double(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    if (exp == 0) return (sign ? -1.0 : 1.0) * ldexp((double)man, -24);
    if (exp == 31) return f32(sign | 0x7F800000u | (man << 13));
    return f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* The exact value of a float register of type t (f16, bf16, f32, f64), as a double. */
static double float_value(uint64_t raw, int t) {
    switch (t) {
    case T_F16: case T_F16X2: return half_to_double((uint16_t)raw);
    case T_BF16: case T_BF16X2: return f32((uint32_t)(uint16_t)raw << 16);
    case T_F32: return f32(raw);
    default: return f64(raw);
    }
}

static int rounding_direction(int rnd) { return rnd == R_RZ || rnd == R_RM || rnd == R_RP ? rnd : R_RN; }

static double round_integral(double v, int rnd) {
    switch (rnd) {
    case R_RNI: return nearbyint(v);
    case R_RMI: return floor(v);
    case R_RPI: return ceil(v);
    case R_RZI: return trunc(v);
    default: return v;
    }
}

/* 8-bit floats (OCP): e4m3 has no infinities (its largest is 448, S.1111.111 its NaN), e5m2 is IEEE-like
 * (largest finite 57344). To them: rounded to nearest even and .satfinite, so beyond the largest finite is
 * the largest finite, and NaN is 0x7F; with .relu a negative value is +0. */
static uint8_t f8_from_double(double v, int e5m2, int relu) {
    int m = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
    uint8_t largest = e5m2 ? 0x7B : 0x7E, sign = signbit(v) ? 0x80 : 0;
    if (isnan(v)) return 0x7F;
    if (relu && sign) return 0;
    int e;
    double a = fabs(v);
    if (a == 0) return sign;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int unit = (e - 1 < 1 - bias ? 1 - bias : e - 1) - m; /* exponent of the last place kept */
    double x = ldexp(a, -unit), fl = floor(x), rest = x - fl;
    double q = rest > 0.5 || (rest == 0.5 && fmod(fl, 2.0) != 0) ? fl + 1 : fl;
    if (q == 0) return sign;
    frexp(ldexp(q, unit), &e);
    int biased = e - 1 + bias;
    if (biased <= 0) return sign | (uint8_t)q; /* subnormal: q counts units of 2^(1 - bias - m) */
    uint64_t mant = (uint64_t)ldexp(q, unit - (e - 1 - m)) - ((uint64_t)1 << m);
    uint8_t bits = (uint8_t)(biased << m | mant);
    if (biased > (e5m2 ? 30 : 15) || bits > largest) return sign | largest;
    return sign | bits;
}

static double f8_to_double(uint8_t b, int e5m2) {
    int m = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7, emax = e5m2 ? 31 : 15;
    int exp = (b & 0x7F) >> m, mant = b & ((1 << m) - 1);
    double s = b & 0x80 ? -1.0 : 1.0;
    if (e5m2 && exp == emax) return mant ? NAN : s * INFINITY;
    if (!e5m2 && exp == emax && mant == (1 << m) - 1) return NAN;
    if (exp == 0) return s * ldexp(mant, 1 - bias - m);
    return s * ldexp((1 << m) + mant, exp - bias - m);
}

static uint64_t convert(uint64_t raw, int dt, int st, int rnd, int sat) {
    int sb = type_bits(st), db = type_bits(dt);
    if (type_is_float(st)) {
        double v = float_value(raw, st);
        if (type_is_float(dt)) {
            v = round_integral(v, rnd);
            if (sat) v = isnan(v) ? 0.0 : v < 0 ? 0.0 : v > 1 ? 1.0 : v;
            int mode = rounding_direction(rnd);
            if (dt == T_F64) return bits64(v); /* every source is exact in f64 */
            if (dt == T_F32 && mode == R_RN) return bits32((float)v);
            return double_to_format(v, format_of(dt), mode);
        }
        if (isnan(v)) return 0;
        v = round_integral(v, rnd == R_NONE ? R_RZI : rnd);
        if (type_is_signed(dt)) {
            double lo = -ldexp(1.0, db - 1), hi = ldexp(1.0, db - 1) - 1;
            int64_t r = v <= lo ? (int64_t)lo : v >= hi ? (db == 64 ? INT64_MAX : (int64_t)hi) : (int64_t)v;
            return (uint64_t)r;
        }
        double hi = ldexp(1.0, db) - 1;
        return v <= 0 ? 0 : v >= hi ? (db == 64 ? UINT64_MAX : (uint64_t)hi) : (uint64_t)v;
    }
    /* integer source */
    int64_t s = 0;
    uint64_t u = 0;
    if (type_is_signed(st)) s = sb == 8 ? (int8_t)raw : sb == 16 ? (int16_t)raw : sb == 32 ? (int32_t)raw : (int64_t)raw;
    else u = sb == 8 ? (uint8_t)raw : sb == 16 ? (uint16_t)raw : sb == 32 ? (uint32_t)raw : raw;
    if (type_is_float(dt)) {
        int mode = rounding_direction(rnd), neg = type_is_signed(st) && s < 0;
        if (mode == R_RN && dt == T_F64) return type_is_signed(st) ? bits64((double)s) : bits64((double)u);
        if (mode == R_RN && dt == T_F32) return type_is_signed(st) ? bits32((float)s) : bits32((float)u);
        uint64_t mag = type_is_signed(st) ? (neg ? 0 - (uint64_t)s : (uint64_t)s) : u;
        return round_to_format(neg, mag, 0, format_of(dt), mode);
    }
    if (sat) {
        if (type_is_signed(dt)) {
            int64_t lo = db == 64 ? INT64_MIN : -((int64_t)1 << (db - 1)), hi = db == 64 ? INT64_MAX : ((int64_t)1 << (db - 1)) - 1;
            if (type_is_signed(st)) s = s < lo ? lo : s > hi ? hi : s;
            else s = u > (uint64_t)hi ? hi : (int64_t)u;
            return (uint64_t)s;
        }
        uint64_t hi = db == 64 ? UINT64_MAX : ((uint64_t)1 << db) - 1;
        if (type_is_signed(st)) u = s < 0 ? 0 : (uint64_t)s > hi ? hi : (uint64_t)s;
        else u = u > hi ? hi : u;
        return u;
    }
    uint64_t v = type_is_signed(st) ? (uint64_t)s : u;
    if (db < 64) {
        v &= ((uint64_t)1 << db) - 1;
        if (type_is_signed(dt) && (v >> (db - 1)) & 1) v |= ~(((uint64_t)1 << db) - 1); /* sign-extend into the register */
    }
    return v;
}

static const int FE_MODES[] = {[R_NONE] = FE_TONEAREST, [R_RN] = FE_TONEAREST, [R_RZ] = FE_TOWARDZERO,
                               [R_RM] = FE_DOWNWARD, [R_RP] = FE_UPWARD};

static double clamp_unit(double v) { return isnan(v) ? 0.0 : v < 0 ? 0.0 : v > 1 ? 1.0 : v; }

/* The FloatOp op on x, y, z of one float type: FMA and SQRT are that type's functions, ONE its 1. */
#define FLOAT_OP(op, x, y, z, FMA, SQRT, ONE)                                                                  \
    ((op) == FR_ADD ? (x) + (y) : (op) == FR_SUB ? (x) - (y) : (op) == FR_MUL ? (x) * (y)                      \
     : (op) == FR_FMA ? FMA(x, y, z) : (op) == FR_DIV ? (x) / (y) : (op) == FR_SQRT ? SQRT(x) : (ONE) / (x))

/* f32/f64 arithmetic in a directed rounding mode (or with .sat): the host FPU runs in that mode meanwhile.
 * volatile keeps the operation between the two mode switches. */
static uint64_t float_rounded(const Inst *in, uint64_t a, uint64_t b, uint64_t c) {
    int saved = fegetround();
    fesetround(FE_MODES[in->sub2]);
    double r;
    if (in->type == T_F32) {
        volatile float x = f32(a), y = f32(b), z = f32(c), v = FLOAT_OP(in->sub, x, y, z, fmaf, sqrtf, 1.0f);
        r = v;
    } else {
        volatile double x = f64(a), y = f64(b), z = f64(c), v = FLOAT_OP(in->sub, x, y, z, fma, sqrt, 1.0);
        r = v;
    }
    fesetround(saved);
    if (in->flags & F_SAT) r = clamp_unit(r);
    return in->type == T_F32 ? bits32((float)r) : bits64(r);
}

/* a op b (op c) in double, rounded to odd: exact enough to round once more to any format of <= 51 bits. */
static double rounded_to_odd(int op, double a, double b, double c) {
    int saved = fegetround();
    feclearexcept(FE_INEXACT);
    fesetround(FE_TOWARDZERO);
    volatile double x = a, y = b, z = c, v = FLOAT_OP(op, x, y, z, fma, sqrt, 1.0);
    double r = v;
    int inexact = fetestexcept(FE_INEXACT) != 0;
    fesetround(saved);
    return inexact && isfinite(r) ? f64(bits64(r) | 1) : r;
}

/* f16/bf16 arithmetic, scalar or on both halves of an x2 register (.rn; .sat clamps to [0, 1]; fma.relu makes a
 * negative result 0 and min/max.NaN a NaN operand the result, both with NaN as the canonical 0x7FFF). */
#define CANONICAL_HALF_NAN 0x7FFF /* the NaN .relu and .NaN give, f16 and bf16 alike (PTX ISA) */
static uint64_t half_op(const Inst *in, uint64_t a, uint64_t b, uint64_t c) {
    int t = in->type, lanes = t == T_F16X2 || t == T_BF16X2 ? 2 : 1;
    const FloatFormat *F = format_of(t);
    uint64_t out = 0;
    for (int l = 0; l < lanes; l++) {
        uint64_t x = (a >> (16 * l)) & 0xFFFF, bits;
        double dx = float_value(x, t), dy = float_value(b >> (16 * l), t), dz = float_value(c >> (16 * l), t);
        switch (in->sub) {
        case FR_NEG: bits = x ^ 0x8000; break;
        case FR_ABS: bits = x & 0x7FFF; break;
        case FR_EX2: bits = double_to_format(exp2(dx), F, R_RN); break; /* .approx: correctly rounded here */
        case FR_TANH: bits = double_to_format(tanh(dx), F, R_RN); break;
        case FR_MIN: case FR_MAX: {
            double r = in->sub == FR_MIN ? fmin(dx, dy) : fmax(dx, dy); /* a NaN operand yields the other */
            bits = (in->flags & F_NAN) && (isnan(dx) || isnan(dy)) ? CANONICAL_HALF_NAN : double_to_format(r, F, R_RN);
        } break;
        default: {
            double r = rounded_to_odd(in->sub, dx, dy, dz);
            if (in->flags & F_SAT) r = clamp_unit(r);
            if ((in->flags & F_RELU) && r < 0) r = 0;
            bits = (in->flags & F_RELU) && isnan(r) ? CANONICAL_HALF_NAN : double_to_format(r, F, R_RN);
        } break;
        }
        out |= (bits & 0xFFFF) << (16 * l);
    }
    return out;
}

/* ---- comparisons ---- */

#define CMP_INT(a, b, c) ((c) == C_EQ ? (a) == (b) : (c) == C_NE ? (a) != (b) : (c) == C_LT ? (a) < (b) \
                         : (c) == C_LE ? (a) <= (b) : (c) == C_GT ? (a) > (b) : (a) >= (b))

static inline int cmp_float(double a, double b, int c) {
    int un = isnan(a) || isnan(b);
    switch (c) {
    case C_EQ: return !un && a == b;
    case C_NE: return !un && a != b;
    case C_LT: return !un && a < b;
    case C_LE: return !un && a <= b;
    case C_GT: return !un && a > b;
    case C_GE: return !un && a >= b;
    case C_EQU: return un || a == b;
    case C_NEU: return un || a != b;
    case C_LTU: return un || a < b;
    case C_LEU: return un || a <= b;
    case C_GTU: return un || a > b;
    case C_GEU: return un || a >= b;
    case C_NUM: return !un;
    default: return un;
    }
}

static inline uint64_t combine(const Inst *in, const uint64_t *R, int p) {
    if (!in->sub2) return (uint64_t)p;
    int c = (int)(R[in->c] & 1) ^ (in->flags & F_NEG_C ? 1 : 0);
    return (uint64_t)(in->sub2 == 1 ? (p & c) : in->sub2 == 2 ? (p | c) : (p ^ c));
}

/* set: compare (each half of an x2 source on its own), then 1.0 in a float destination, all ones in an integer
 * one. */
static uint64_t set_compare(const Inst *in, const uint64_t *R) {
    int st = in->type, dt = (int)in->imm, lanes = st == T_F16X2 || st == T_BF16X2 ? 2 : 1;
    int scalar = st == T_F16X2 ? T_F16 : st == T_BF16X2 ? T_BF16 : st, bits = lanes == 2 ? 16 : type_bits(scalar);
    uint64_t mask = bits == 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1, out = 0;
    for (int l = 0; l < lanes; l++) {
        uint64_t a = R[in->a] >> (16 * l) & mask, b = R[in->b] >> (16 * l) & mask;
        int p;
        if (type_is_float(scalar)) p = cmp_float(float_value(a, scalar), float_value(b, scalar), in->sub);
        else if (type_is_signed(scalar)) {
            int64_t x = (int64_t)(a << (64 - bits)) >> (64 - bits), y = (int64_t)(b << (64 - bits)) >> (64 - bits);
            p = CMP_INT(x, y, in->sub);
        } else {
            p = CMP_INT(a, b, in->sub);
        }
        p = (int)combine(in, R, p);
        uint64_t one = dt == T_F32 ? 0x3F800000u : dt == T_F16 || dt == T_F16X2 ? 0x3C00u
                     : dt == T_BF16 || dt == T_BF16X2 ? 0x3F80u : lanes == 2 ? 0xFFFFu : 0xFFFFFFFFu;
        out |= (p ? one : 0) << (16 * l);
    }
    return out;
}

/* ---- atomics ---- */

static uint64_t atomic_rmw(uint8_t *p, int aop, int t, uint64_t b, uint64_t c) {
    int wide = type_bits(t) == 64;
    if (!wide) {
        uint32_t *q = (uint32_t *)p, bv = (uint32_t)b;
        switch (aop) {
        case AT_ADD:
            if (t == T_F32) {
                uint32_t old = __atomic_load_n(q, __ATOMIC_RELAXED), nv;
                do nv = (uint32_t)bits32(f32(old) + f32(bv));
                while (!__atomic_compare_exchange_n(q, &old, nv, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
                return old;
            }
            return __atomic_fetch_add(q, bv, __ATOMIC_SEQ_CST);
        case AT_AND: return __atomic_fetch_and(q, bv, __ATOMIC_SEQ_CST);
        case AT_OR: return __atomic_fetch_or(q, bv, __ATOMIC_SEQ_CST);
        case AT_XOR: return __atomic_fetch_xor(q, bv, __ATOMIC_SEQ_CST);
        case AT_EXCH: return __atomic_exchange_n(q, bv, __ATOMIC_SEQ_CST);
        case AT_CAS: {
            uint32_t expected = bv;
            __atomic_compare_exchange_n(q, &expected, (uint32_t)c, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
            return expected;
        }
        default: {
            uint32_t old = __atomic_load_n(q, __ATOMIC_RELAXED), nv;
            do {
                switch (aop) {
                case AT_MIN:
                    nv = t == T_S32 ? (uint32_t)((int32_t)old < (int32_t)bv ? old : bv)
                       : t == T_F32 ? (uint32_t)bits32(fminf(f32(old), f32(bv))) : (old < bv ? old : bv);
                    break;
                case AT_MAX:
                    nv = t == T_S32 ? (uint32_t)((int32_t)old > (int32_t)bv ? old : bv)
                       : t == T_F32 ? (uint32_t)bits32(fmaxf(f32(old), f32(bv))) : (old > bv ? old : bv);
                    break;
                case AT_INC: nv = old >= bv ? 0 : old + 1; break;
                default: nv = (old == 0 || old > bv) ? bv : old - 1; break; /* AT_DEC */
                }
            } while (!__atomic_compare_exchange_n(q, &old, nv, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
            return old;
        }
        }
    }
    uint64_t *q = (uint64_t *)p;
    switch (aop) {
    case AT_ADD:
        if (t == T_F64) {
            uint64_t old = __atomic_load_n(q, __ATOMIC_RELAXED), nv;
            do nv = bits64(f64(old) + f64(b));
            while (!__atomic_compare_exchange_n(q, &old, nv, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
            return old;
        }
        return __atomic_fetch_add(q, b, __ATOMIC_SEQ_CST);
    case AT_AND: return __atomic_fetch_and(q, b, __ATOMIC_SEQ_CST);
    case AT_OR: return __atomic_fetch_or(q, b, __ATOMIC_SEQ_CST);
    case AT_XOR: return __atomic_fetch_xor(q, b, __ATOMIC_SEQ_CST);
    case AT_EXCH: return __atomic_exchange_n(q, b, __ATOMIC_SEQ_CST);
    case AT_CAS: {
        uint64_t expected = b;
        __atomic_compare_exchange_n(q, &expected, c, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        return expected;
    }
    default: {
        uint64_t old = __atomic_load_n(q, __ATOMIC_RELAXED), nv;
        do {
            if (aop == AT_MIN) nv = t == T_S64 ? (uint64_t)((int64_t)old < (int64_t)b ? old : b)
                                  : t == T_F64 ? bits64(fmin(f64(old), f64(b))) : (old < b ? old : b);
            else if (aop == AT_MAX) nv = t == T_S64 ? (uint64_t)((int64_t)old > (int64_t)b ? old : b)
                                       : t == T_F64 ? bits64(fmax(f64(old), f64(b))) : (old > b ? old : b);
            else if (aop == AT_INC) nv = old >= b ? 0 : old + 1;
            else nv = (old == 0 || old > b) ? b : old - 1;
        } while (!__atomic_compare_exchange_n(q, &old, nv, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
        return old;
    }
    }
}

static uint64_t load_value(const uint8_t *p, int t) {
    switch (type_bits(t)) {
    case 8: return type_is_signed(t) ? (uint64_t)(int64_t)*(const int8_t *)p : *p;
    case 16: { int16_t v; memcpy(&v, p, 2); return type_is_signed(t) ? (uint64_t)(int64_t)v : (uint16_t)v; }
    case 32: { uint32_t v; memcpy(&v, p, 4); return type_is_signed(t) ? (uint64_t)(int64_t)(int32_t)v : v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
}

static void store_value(uint8_t *p, int t, uint64_t v) {
    switch (type_bits(t)) {
    case 8: *p = (uint8_t)v; break;
    case 16: { uint16_t x = (uint16_t)v; memcpy(p, &x, 2); break; }
    case 32: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
    default: memcpy(p, &v, 8); break;
    }
}

static uint32_t brev32(uint32_t x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    return __builtin_bswap32(x);
}

static uint64_t bfe(uint64_t a, unsigned pos, unsigned len, int bits, int sgn) {
    pos &= 0xFF, len &= 0xFF;
    uint64_t mask = bits == 64 ? UINT64_MAX : 0xFFFFFFFFull;
    a &= mask;
    if (len == 0) return 0;
    unsigned msb = pos + len - 1 < (unsigned)bits - 1 ? pos + len - 1 : (unsigned)bits - 1;
    int sbit = sgn ? (int)((a >> msb) & 1) : 0;
    uint64_t r = 0;
    for (unsigned i = 0; i < (unsigned)bits; i++) {
        uint64_t bit = i < len && pos + i <= (unsigned)bits - 1 ? (a >> (pos + i)) & 1 : (uint64_t)sbit;
        r |= bit << i;
    }
    return r & mask;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Called every WATCH_INTERVAL back-edges: should this worker stop (a watchdog limit, or the grid ending)? */
static int watchdog_expired(Exec *X, uint64_t pending_steps) {
    Watchdog *W = X->watch;
    X->watch_countdown = WATCH_INTERVAL;
    if (*W->stop) return X->watch_cause = WATCH_STOP;
    uint64_t mine = X->steps + pending_steps;
    uint64_t total = __atomic_add_fetch(&W->executed, mine - X->watch_reported, __ATOMIC_RELAXED);
    X->watch_reported = mine;
    if (W->budget && total > W->budget) return X->watch_cause = WATCH_BUDGET;
    if (W->deadline_ns && now_ns() > W->deadline_ns) return X->watch_cause = WATCH_TIME;
    return WATCH_NONE;
}

/* ---- device printf ----
 * vprintf(format, buffer): the arguments lie in the buffer one after another, each aligned to its size
 * (integers 4 bytes unless l/ll/j/z/t, doubles (floats are promoted) and pointers 8). Returns the number of
 * arguments read (-1 for a NULL format), or -2 when a read leaves memory the thread may access. */

#define PRINTF_MAX 4096 /* bytes of one call's output, and of a format or %s string read */

static int device_string(Exec *X, Thread *T, uint64_t a, char *out, size_t max) {
    for (size_t i = 0; i < max; i++) {
        uint8_t *p = address(X, T, SPACE_GENERIC, a + i, 1);
        if (!p) return -1;
        out[i] = (char)*p;
        if (!*p) return 0;
    }
    out[max - 1] = 0;
    return 0;
}

static int device_printf(Exec *X, Thread *T, uint64_t format, uint64_t buffer) {
    if (!format) return -1;
    char fmt[PRINTF_MAX], out[PRINTF_MAX], str[PRINTF_MAX];
    if (device_string(X, T, format, fmt, sizeof fmt)) return -2;
    size_t len = 0, at = 0;
    int count = 0;
    for (const char *c = fmt; *c && len < sizeof out - 1;) {
        if (*c != '%' || c[1] == '%') {
            out[len++] = *c;
            c += *c == '%' ? 2 : 1;
            continue;
        }
        const char *spec = c++;
        c += strspn(c, "-+ #0");
        if (strtoul(c, NULL, 10) > PRINTF_MAX) break; /* a width past what one call may print: the output ends */
        c += strspn(c, "0123456789");
        if (*c == '.' && strtoul(c + 1, NULL, 10) > PRINTF_MAX) break; /* the same for a precision */
        if (*c == '.') c++, c += strspn(c, "0123456789");
        size_t keep = (size_t)(c - spec); /* flags, width and precision: reprinted with our own length */
        int wide = 0, shorts = 0;
        for (; *c && strchr("hlLqjzt", *c); c++) {
            if (*c == 'h') shorts++;
            else wide = 1;
        }
        char conv = *c ? *c++ : 0, piece[64];
        if (!conv || keep > sizeof piece - 8) break;
        memcpy(piece, spec, keep);
        piece[keep] = 0;
        int is_float = strchr("fFeEgGaA", conv) != NULL, is_ptr = conv == 's' || conv == 'p';
        unsigned size = is_float || is_ptr || wide ? 8 : 4;
        at = (at + size - 1) & ~(size_t)(size - 1);
        uint8_t *p = buffer ? address(X, T, SPACE_GENERIC, buffer + at, size) : NULL;
        if (!p) return -2;
        uint64_t v = 0;
        memcpy(&v, p, size);
        at += size;
        count++;
        size_t room = sizeof out - len;
        int w;
        if (strchr("diuxXo", conv)) { /* an integer: as wide as read, then as narrow as h/hh ask */
            const char *ll = conv == 'd' || conv == 'i' ? "lld" : conv == 'u' ? "llu" : conv == 'x' ? "llx"
                           : conv == 'X' ? "llX" : "llo";
            strcat(piece, ll);
            uint64_t u = size == 8 ? v : (uint32_t)v;
            if (shorts) u &= shorts == 1 ? 0xFFFFu : 0xFFu;
            long long sv = size == 8 ? (long long)v : (long long)(int32_t)v;
            if (shorts) sv = shorts == 1 ? (int16_t)sv : (int8_t)sv;
            w = conv == 'd' || conv == 'i' ? snprintf(out + len, room, piece, sv)
                                           : snprintf(out + len, room, piece, (unsigned long long)u);
        } else if (is_float) {
            piece[keep] = conv, piece[keep + 1] = 0;
            w = snprintf(out + len, room, piece, f64(v));
        } else if (conv == 's') {
            if (v && device_string(X, T, v, str, sizeof str)) return -2;
            strcat(piece, "s");
            w = snprintf(out + len, room, piece, v ? str : "(null)");
        } else if (conv == 'c') {
            strcat(piece, "c");
            w = snprintf(out + len, room, piece, (int)v);
        } else if (conv == 'p') {
            w = snprintf(out + len, room, "0x%llx", (unsigned long long)v);
        } else break; /* an unknown conversion: the output ends here (printf's would be undefined) */
        if (w > 0) len += (size_t)w < room ? (size_t)w : room - 1;
    }
    PrintOutput *o = X->print;
    pthread_mutex_lock(&o->mu);
    if (len && o->len + len <= o->limit) { /* nothing printed: no buffer to copy into yet */
        if (o->len + len > o->cap) {
            size_t cap = o->cap ? o->cap : 4096;
            while (cap < o->len + len) cap *= 2;
            char *t = realloc(o->text, cap);
            if (t) o->text = t, o->cap = cap;
        }
        if (o->len + len <= o->cap) memcpy(o->text + o->len, out, len), o->len += len;
    }
    pthread_mutex_unlock(&o->mu);
    return count;
}

/* ---- the dispatch loop: run one thread until it synchronises, exits or faults ----
 * vmdispatch/vmcase/vmbreak (after Lua's lvm.c): with GCC or Clang each handler jumps straight to the next
 * one through a table of label addresses (computed goto); elsewhere, or with -DFAKECUDA_SWITCH_DISPATCH,
 * a plain switch. -DFAKECUDA_TRACE prints every instruction a thread executes to stderr. */

#ifdef FAKECUDA_TRACE
#define TRACE_INST()                                                                                        \
    fprintf(stderr, "fakecuda trace: block (%u,%u,%u) thread %u pc %u line %d %s\n", X->block_id[0],       \
            X->block_id[1], X->block_id[2], T->linear, pc - 1, X->m->lines[pc - 1], OP_NAMES[in->op])
#else
#define TRACE_INST() ((void)0)
#endif

#if (defined(__GNUC__) || defined(__clang__)) && !defined(FAKECUDA_SWITCH_DISPATCH)
#define vmdispatch(op) goto *DISPATCH[op];
#define vmcase(name) L_##name:
#define vmbreak                  \
    do {                         \
        in = &code[pc++];        \
        TRACE_INST();            \
        goto *DISPATCH[in->op];  \
    } while (0)
#else
#define vmdispatch(op) switch (op)
#define vmcase(name) case OP_##name:
#define vmbreak break
#endif

/* A control transfer: the straight run of instructions since the last one is counted, then pc moves. */
#define JUMP(target)              \
    do {                          \
        X->steps += pc - seg;     \
        pc = seg = (target);      \
    } while (0)

/* Ends the thread's run at the current instruction with a fault (the one place a fault is saved). */
#define FAULT_AT(code_, addr_, size_, store_, space_)                         \
    do {                                                                      \
        T->pc = pc - 1;                                                       \
        X->steps += pc - seg;                                                 \
        return fault(X, T, (code_), (addr_), (size_), (store_), (space_));    \
    } while (0)

/* A memcheck violation of an access of size_ bytes at addr_: misaligned, or outside what may be accessed. */
#define MEMORY_FAULT(addr_, size_, store_, space_)                                                          \
    FAULT_AT(((size_) > 1 && ((addr_) & ((size_) - 1))) ? CUDA_ERROR_MISALIGNED_ADDRESS                     \
                                                        : CUDA_ERROR_ILLEGAL_ADDRESS,                       \
             addr_, size_, store_, space_)

/* Counts towards the watchdog's next check: at every loop back-edge and every call, the only ways one
 * thread can run code again (straight code and forward branches end; nested calls multiply). */
#define WATCH_POINT()                                                                                      \
    do {                                                                                                   \
        if (--X->watch_countdown == 0 && watchdog_expired(X, pc - seg))                                    \
            FAULT_AT(CUDA_ERROR_LAUNCH_TIMEOUT, 0, 0, 0, -1);                                              \
    } while (0)

/* A branch to target: a back-edge is a watch point. */
#define BRANCH(target)                                                                                     \
    do {                                                                                                   \
        uint32_t target_ = (target);                                                                       \
        if (target_ < pc) WATCH_POINT();                                                                   \
        JUMP(target_);                                                                                     \
    } while (0)

/* The thread stops here (exit, barrier, collective): pc_ is where it resumes. */
#define YIELD(state_, pc_)        \
    do {                          \
        X->steps += pc - seg;     \
        T->pc = (pc_);            \
        T->state = (state_);      \
        return (state_);          \
    } while (0)

static int run_thread(Exec *X, Thread *T) {
    const Inst *code = X->m->code;
    const PtxFunction *funcs = X->m->funcs;
    uint64_t *R = T->regs;
    uint32_t pc = T->pc, seg = pc;
    const Inst *in;
    int callee_index; /* of the call being made */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(FAKECUDA_SWITCH_DISPATCH)
    static const void *const DISPATCH[OP_COUNT] = {
#define LABEL(name) &&L_##name,
        OPS(LABEL)
#undef LABEL
    };
#endif
    for (;;) {
        in = &code[pc++];
        TRACE_INST();
        vmdispatch(in->op) {
        vmcase(NOP) vmbreak;
        vmcase(MOV) R[in->d] = R[in->a]; vmbreak;
        vmcase(MOV_PACK64) R[in->d] = (R[in->a] & 0xFFFFFFFFull) | (R[in->b] << 32); vmbreak;
        vmcase(MOV_UNPACK64) { uint64_t v = R[in->a]; R[in->d] = v & 0xFFFFFFFFull; R[in->b] = v >> 32; } vmbreak;
        vmcase(MOV_PACK32) R[in->d] = (R[in->a] & 0xFFFF) | ((R[in->b] & 0xFFFF) << 16); vmbreak;
        vmcase(MOV_UNPACK32) { uint64_t v = R[in->a]; R[in->d] = v & 0xFFFF; R[in->b] = (v >> 16) & 0xFFFF; } vmbreak;
        vmcase(LOCAL_ADDR) R[in->d] = T->lbase + (uint64_t)in->imm; vmbreak;
        vmcase(ADD_I16) vmcase(ADD_I32) vmcase(ADD_I64) R[in->d] = R[in->a] + R[in->b]; vmbreak;
        vmcase(ADD_F32) R[in->d] = bits32(f32(R[in->a]) + f32(R[in->b])); vmbreak;
        vmcase(ADD_F64) R[in->d] = bits64(f64(R[in->a]) + f64(R[in->b])); vmbreak;
        vmcase(SUB_I16) vmcase(SUB_I32) vmcase(SUB_I64) R[in->d] = R[in->a] - R[in->b]; vmbreak;
        vmcase(SUB_F32) R[in->d] = bits32(f32(R[in->a]) - f32(R[in->b])); vmbreak;
        vmcase(SUB_F64) R[in->d] = bits64(f64(R[in->a]) - f64(R[in->b])); vmbreak;
        vmcase(MUL_LO_I16) vmcase(MUL_LO_I32) vmcase(MUL_LO_I64) R[in->d] = R[in->a] * R[in->b]; vmbreak;
        vmcase(MUL_F32) R[in->d] = bits32(f32(R[in->a]) * f32(R[in->b])); vmbreak;
        vmcase(MUL_F64) R[in->d] = bits64(f64(R[in->a]) * f64(R[in->b])); vmbreak;
        vmcase(MUL_WIDE_S16) R[in->d] = (uint64_t)(int64_t)((int32_t)(int16_t)R[in->a] * (int32_t)(int16_t)R[in->b]); vmbreak;
        vmcase(MUL_WIDE_U16) R[in->d] = (uint32_t)((uint16_t)R[in->a] * (uint32_t)(uint16_t)R[in->b]); vmbreak;
        vmcase(MUL_WIDE_S32) R[in->d] = (uint64_t)((int64_t)(int32_t)R[in->a] * (int64_t)(int32_t)R[in->b]); vmbreak;
        vmcase(MUL_WIDE_U32) R[in->d] = (uint64_t)(uint32_t)R[in->a] * (uint32_t)R[in->b]; vmbreak;
        vmcase(MUL_HI_S32) R[in->d] = (uint64_t)(((int64_t)(int32_t)R[in->a] * (int32_t)R[in->b]) >> 32); vmbreak;
        vmcase(MUL_HI_U32) R[in->d] = ((uint64_t)(uint32_t)R[in->a] * (uint32_t)R[in->b]) >> 32; vmbreak;
        vmcase(MUL_HI_S64) R[in->d] = (uint64_t)(((__int128)(int64_t)R[in->a] * (int64_t)R[in->b]) >> 64); vmbreak;
        vmcase(MUL_HI_U64) R[in->d] = (uint64_t)(((unsigned __int128)R[in->a] * R[in->b]) >> 64); vmbreak;
        vmcase(MUL24_LO_S32) R[in->d] = (uint64_t)(((int64_t)((int32_t)((uint32_t)R[in->a] << 8) >> 8)) * ((int32_t)((uint32_t)R[in->b] << 8) >> 8)); vmbreak;
        vmcase(MUL24_LO_U32) R[in->d] = (R[in->a] & 0xFFFFFF) * (R[in->b] & 0xFFFFFF); vmbreak;
        vmcase(MAD_LO_I16) vmcase(MAD_LO_I32) vmcase(MAD_LO_I64) R[in->d] = R[in->a] * R[in->b] + R[in->c]; vmbreak;
        vmcase(MAD_WIDE_S32) R[in->d] = (uint64_t)((int64_t)(int32_t)R[in->a] * (int64_t)(int32_t)R[in->b]) + R[in->c]; vmbreak;
        vmcase(MAD_WIDE_U32) R[in->d] = (uint64_t)(uint32_t)R[in->a] * (uint32_t)R[in->b] + R[in->c]; vmbreak;
        vmcase(MAD_WIDE_S16) R[in->d] = (uint64_t)(int64_t)((int32_t)(int16_t)R[in->a] * (int32_t)(int16_t)R[in->b]) + R[in->c]; vmbreak;
        vmcase(MAD_WIDE_U16) R[in->d] = (uint32_t)((uint16_t)R[in->a] * (uint32_t)(uint16_t)R[in->b]) + R[in->c]; vmbreak;
        vmcase(MAD_HI_S32) R[in->d] = (uint64_t)(((int64_t)(int32_t)R[in->a] * (int32_t)R[in->b]) >> 32) + R[in->c]; vmbreak;
        vmcase(MAD_HI_U32) R[in->d] = (((uint64_t)(uint32_t)R[in->a] * (uint32_t)R[in->b]) >> 32) + R[in->c]; vmbreak;
        vmcase(MAD_HI_S64) R[in->d] = (uint64_t)(((__int128)(int64_t)R[in->a] * (int64_t)R[in->b]) >> 64) + R[in->c]; vmbreak;
        vmcase(MAD_HI_U64) R[in->d] = (uint64_t)(((unsigned __int128)R[in->a] * R[in->b]) >> 64) + R[in->c]; vmbreak;
        vmcase(MAD24_LO_S32) R[in->d] = (uint64_t)(((int64_t)((int32_t)((uint32_t)R[in->a] << 8) >> 8)) * ((int32_t)((uint32_t)R[in->b] << 8) >> 8)) + R[in->c]; vmbreak;
        vmcase(MAD24_LO_U32) R[in->d] = (R[in->a] & 0xFFFFFF) * (R[in->b] & 0xFFFFFF) + R[in->c]; vmbreak;
#define SAD(OPN, T) vmcase(OPN) { T a_ = (T)R[in->a], b_ = (T)R[in->b]; /* |a - b| in unsigned: no overflow */ \
            R[in->d] = R[in->c] + (a_ > b_ ? (uint64_t)a_ - (uint64_t)b_ : (uint64_t)b_ - (uint64_t)a_); } vmbreak;
        SAD(SAD_S16, int16_t) SAD(SAD_U16, uint16_t) SAD(SAD_S32, int32_t) SAD(SAD_U32, uint32_t) SAD(SAD_S64, int64_t)
        SAD(SAD_U64, uint64_t)
        vmcase(DP4A) { int64_t acc = (int32_t)R[in->c];
            for (int k = 0; k < 4; k++) {
                uint32_t x = (uint32_t)R[in->a] >> (8 * k) & 0xFF, y = (uint32_t)R[in->b] >> (8 * k) & 0xFF;
                acc += ((in->flags & F_SIGNED_A) ? (int8_t)x : (int64_t)x) * ((in->flags & F_SIGNED_B) ? (int8_t)y : (int64_t)y);
            }
            R[in->d] = (uint32_t)acc; } vmbreak;
        vmcase(DP2A) { int64_t acc = (int32_t)R[in->c];
            for (int k = 0; k < 2; k++) {
                uint32_t x = (uint32_t)R[in->a] >> (16 * k) & 0xFFFF, y = (uint32_t)R[in->b] >> (8 * (k + 2 * in->sub)) & 0xFF;
                acc += ((in->flags & F_SIGNED_A) ? (int16_t)x : (int64_t)x) * ((in->flags & F_SIGNED_B) ? (int8_t)y : (int64_t)y);
            }
            R[in->d] = (uint32_t)acc; } vmbreak;
        vmcase(FMA_F32) R[in->d] = bits32(fmaf(f32(R[in->a]), f32(R[in->b]), f32(R[in->c]))); vmbreak;
        vmcase(FMA_F64) R[in->d] = bits64(fma(f64(R[in->a]), f64(R[in->b]), f64(R[in->c]))); vmbreak;
        vmcase(FROUND) R[in->d] = float_rounded(in, R[in->a], R[in->b], R[in->c]); vmbreak;
        vmcase(HALF) R[in->d] = half_op(in, R[in->a], R[in->b], R[in->c]); vmbreak;
        vmcase(SETP_HALF) { int p = cmp_float(float_value(R[in->a], in->type), float_value(R[in->b], in->type), in->sub);
            R[in->d] = combine(in, R, p); R[in->e] = combine(in, R, !p); } vmbreak;
        vmcase(CVT_PACK_F8) { /* d = {cvt(a), cvt(b)}: a in the high byte; from an .f16x2, its high half there */
            int e5m2 = in->type == T_E5M2X2, relu = in->flags & F_RELU;
            double hi = in->sub == T_F32 ? f32(R[in->a]) : half_to_double((uint16_t)(R[in->a] >> 16));
            double lo = in->sub == T_F32 ? f32(R[in->b]) : half_to_double((uint16_t)R[in->a]);
            R[in->d] = (uint64_t)f8_from_double(hi, e5m2, relu) << 8 | f8_from_double(lo, e5m2, relu);
        } vmbreak;
        vmcase(CVT_UNPACK_F8) { /* every 8-bit float is exact in f16; NaN becomes f16's canonical 0x7FFF */
            int e5m2 = in->type == T_E5M2X2;
            uint64_t out = 0;
            for (int half = 0; half < 2; half++) {
                double v = f8_to_double((uint8_t)(R[in->a] >> (8 * half)), e5m2);
                if ((in->flags & F_RELU) && signbit(v) && !isnan(v)) v = 0; /* .relu: a negative value is +0 */
                out |= (isnan(v) ? 0x7FFFu : double_to_format(v, &FMT_F16, R_RN)) << (16 * half);
            }
            R[in->d] = out;
        } vmbreak;
        vmcase(CVT_PACK) R[in->d] = (convert(R[in->a], in->type, T_F32, in->sub2, in->flags & F_SAT) << 16) |
                                    convert(R[in->b], in->type, T_F32, in->sub2, in->flags & F_SAT); vmbreak;
        /* carry chains: in->imm is the slot of the carry-in (SP_ZERO for none), in->e receives the carry-out */
        vmcase(ADDC_32) { uint64_t s = (uint64_t)(uint32_t)R[in->a] + (uint32_t)R[in->b] + (R[in->imm] & 1);
            R[in->d] = (uint32_t)s; R[in->e] = s >> 32; } vmbreak;
        vmcase(ADDC_64) { unsigned __int128 s = (unsigned __int128)R[in->a] + R[in->b] + (R[in->imm] & 1);
            R[in->d] = (uint64_t)s; R[in->e] = (uint64_t)(s >> 64); } vmbreak;
        vmcase(SUBC_32) { uint64_t x = (uint32_t)R[in->a], y = (uint64_t)(uint32_t)R[in->b] + (R[in->imm] & 1);
            R[in->d] = (uint32_t)(x - y); R[in->e] = x < y; } vmbreak; /* the carry of a subtraction is its borrow */
        vmcase(SUBC_64) { unsigned __int128 y = (unsigned __int128)R[in->b] + (R[in->imm] & 1);
            R[in->d] = R[in->a] - (uint64_t)y; R[in->e] = R[in->a] < y; } vmbreak;
        vmcase(MADC_LO_32) { uint64_t s = (uint64_t)(uint32_t)((uint32_t)R[in->a] * (uint32_t)R[in->b]) + (uint32_t)R[in->c] + (R[in->imm] & 1);
            R[in->d] = (uint32_t)s; R[in->e] = s >> 32; } vmbreak;
        vmcase(MADC_LO_64) { unsigned __int128 s = (unsigned __int128)(R[in->a] * R[in->b]) + R[in->c] + (R[in->imm] & 1);
            R[in->d] = (uint64_t)s; R[in->e] = (uint64_t)(s >> 64); } vmbreak;
        vmcase(MADC_HI_U32) { uint64_t s = (((uint64_t)(uint32_t)R[in->a] * (uint32_t)R[in->b]) >> 32) + (uint32_t)R[in->c] + (R[in->imm] & 1);
            R[in->d] = (uint32_t)s; R[in->e] = s >> 32; } vmbreak;
        vmcase(MADC_HI_S32) { uint64_t s = (uint64_t)(uint32_t)(((int64_t)(int32_t)R[in->a] * (int32_t)R[in->b]) >> 32) + (uint32_t)R[in->c] + (R[in->imm] & 1);
            R[in->d] = (uint32_t)s; R[in->e] = s >> 32; } vmbreak;
        vmcase(MADC_HI_U64) { unsigned __int128 s = (unsigned __int128)(uint64_t)(((unsigned __int128)R[in->a] * R[in->b]) >> 64) + R[in->c] + (R[in->imm] & 1);
            R[in->d] = (uint64_t)s; R[in->e] = (uint64_t)(s >> 64); } vmbreak;
        vmcase(MADC_HI_S64) { unsigned __int128 s = (unsigned __int128)(uint64_t)(((__int128)(int64_t)R[in->a] * (int64_t)R[in->b]) >> 64) + R[in->c] + (R[in->imm] & 1);
            R[in->d] = (uint64_t)s; R[in->e] = (uint64_t)(s >> 64); } vmbreak;
        /* funnel shifts: b:a shifted, the upper (shf.l) or lower (shf.r) 32 bits kept */
        vmcase(SHF_L) { uint32_t n = (uint32_t)R[in->c]; n = (in->flags & F_CLAMP) ? (n > 32 ? 32 : n) : n & 31;
            uint64_t v = ((uint64_t)(uint32_t)R[in->b] << 32) | (uint32_t)R[in->a]; R[in->d] = (uint32_t)((v << n) >> 32); } vmbreak;
        vmcase(SHF_R) { uint32_t n = (uint32_t)R[in->c]; n = (in->flags & F_CLAMP) ? (n > 32 ? 32 : n) : n & 31;
            uint64_t v = ((uint64_t)(uint32_t)R[in->b] << 32) | (uint32_t)R[in->a]; R[in->d] = (uint32_t)(v >> n); } vmbreak;
#define IDIV(OPN, T, ZERO) vmcase(OPN) { T a_ = (T)R[in->a], b_ = (T)R[in->b]; \
            R[in->d] = (uint64_t)(b_ == 0 ? (T)(ZERO) : (b_ == (T)-1 && (T)(a_ * 0 - 1) < 0) ? (T)(0 - (uint64_t)a_) : a_ / b_); } vmbreak;
        IDIV(DIV_S16, int16_t, -1) IDIV(DIV_U16, uint16_t, 0xFFFF) IDIV(DIV_S32, int32_t, -1)
        IDIV(DIV_U32, uint32_t, 0xFFFFFFFFu) IDIV(DIV_S64, int64_t, -1) IDIV(DIV_U64, uint64_t, UINT64_MAX)
#define IREM(OPN, T) vmcase(OPN) { T a_ = (T)R[in->a], b_ = (T)R[in->b]; \
            R[in->d] = (uint64_t)(b_ == 0 ? a_ : (b_ == (T)-1) ? (T)0 : a_ % b_); } vmbreak;
        IREM(REM_S16, int16_t) IREM(REM_U16, uint16_t) IREM(REM_S32, int32_t) IREM(REM_U32, uint32_t)
        IREM(REM_S64, int64_t) IREM(REM_U64, uint64_t)
        vmcase(DIV_F32) R[in->d] = bits32(f32(R[in->a]) / f32(R[in->b])); vmbreak;
        vmcase(DIV_F64) R[in->d] = bits64(f64(R[in->a]) / f64(R[in->b])); vmbreak;
#define MINMAX(OPN, T, CMP) vmcase(OPN) { T a_ = (T)R[in->a], b_ = (T)R[in->b]; R[in->d] = (uint64_t)(a_ CMP b_ ? a_ : b_); } vmbreak;
        MINMAX(MIN_S16, int16_t, <) MINMAX(MIN_U16, uint16_t, <) MINMAX(MIN_S32, int32_t, <)
        MINMAX(MIN_U32, uint32_t, <) MINMAX(MIN_S64, int64_t, <) MINMAX(MIN_U64, uint64_t, <)
        MINMAX(MAX_S16, int16_t, >) MINMAX(MAX_U16, uint16_t, >) MINMAX(MAX_S32, int32_t, >)
        MINMAX(MAX_U32, uint32_t, >) MINMAX(MAX_S64, int64_t, >) MINMAX(MAX_U64, uint64_t, >)
        vmcase(MIN_F32) R[in->d] = bits32(fminf(f32(R[in->a]), f32(R[in->b]))); vmbreak;
        vmcase(MAX_F32) R[in->d] = bits32(fmaxf(f32(R[in->a]), f32(R[in->b]))); vmbreak;
        vmcase(MIN_F64) R[in->d] = bits64(fmin(f64(R[in->a]), f64(R[in->b]))); vmbreak;
        vmcase(MAX_F64) R[in->d] = bits64(fmax(f64(R[in->a]), f64(R[in->b]))); vmbreak;
        vmcase(ABS_S16) { int16_t v = (int16_t)R[in->a]; R[in->d] = (uint16_t)(v < 0 ? -v : v); } vmbreak;
        vmcase(ABS_S32) { int32_t v = (int32_t)R[in->a]; R[in->d] = (uint32_t)(v < 0 ? 0u - (uint32_t)v : (uint32_t)v); } vmbreak;
        vmcase(ABS_S64) { int64_t v = (int64_t)R[in->a]; R[in->d] = v < 0 ? 0 - (uint64_t)v : (uint64_t)v; } vmbreak;
        vmcase(ABS_F32) R[in->d] = R[in->a] & 0x7FFFFFFFull; vmbreak;
        vmcase(ABS_F64) R[in->d] = R[in->a] & 0x7FFFFFFFFFFFFFFFull; vmbreak;
        vmcase(NEG_I16) vmcase(NEG_I32) vmcase(NEG_I64) R[in->d] = 0 - R[in->a]; vmbreak;
        vmcase(NEG_F32) R[in->d] = (R[in->a] ^ 0x80000000ull) & 0xFFFFFFFFull; vmbreak;
        vmcase(NEG_F64) R[in->d] = R[in->a] ^ 0x8000000000000000ull; vmbreak;
        vmcase(AND) R[in->d] = R[in->a] & R[in->b]; vmbreak;
        vmcase(OR) R[in->d] = R[in->a] | R[in->b]; vmbreak;
        vmcase(XOR) R[in->d] = R[in->a] ^ R[in->b]; vmbreak;
        vmcase(NOT) R[in->d] = ~R[in->a]; vmbreak;
        vmcase(NOT_PRED) R[in->d] = (R[in->a] & 1) ^ 1; vmbreak;
        vmcase(CNOT) R[in->d] = R[in->a] == 0; vmbreak;
        vmcase(LOP3) {
            uint32_t a = (uint32_t)R[in->a], b = (uint32_t)R[in->b], c = (uint32_t)R[in->c], r = 0;
            for (int i = 0; i < 8; i++)
                if ((in->imm >> i) & 1) r |= ((i & 4) ? a : ~a) & ((i & 2) ? b : ~b) & ((i & 1) ? c : ~c);
            R[in->d] = r;
        } vmbreak;
        vmcase(SHL_16) { uint32_t s = (uint32_t)R[in->b]; R[in->d] = s > 15 ? 0 : (uint16_t)(R[in->a] << s); } vmbreak;
        vmcase(SHL_32) { uint32_t s = (uint32_t)R[in->b]; R[in->d] = s > 31 ? 0 : (uint32_t)(R[in->a] << s); } vmbreak;
        vmcase(SHL_64) { uint32_t s = (uint32_t)R[in->b]; R[in->d] = s > 63 ? 0 : R[in->a] << s; } vmbreak;
        vmcase(SHR_U16) { uint32_t s = (uint32_t)R[in->b]; R[in->d] = s > 15 ? 0 : (uint16_t)R[in->a] >> s; } vmbreak;
        vmcase(SHR_S16) { uint32_t s = (uint32_t)R[in->b]; R[in->d] = (uint16_t)((int16_t)R[in->a] >> (s > 15 ? 15 : s)); } vmbreak;
        vmcase(SHR_U32) { uint32_t s = (uint32_t)R[in->b]; R[in->d] = s > 31 ? 0 : (uint32_t)R[in->a] >> s; } vmbreak;
        vmcase(SHR_S32) { uint32_t s = (uint32_t)R[in->b]; R[in->d] = (uint32_t)((int32_t)R[in->a] >> (s > 31 ? 31 : s)); } vmbreak;
        vmcase(SHR_U64) { uint32_t s = (uint32_t)R[in->b]; R[in->d] = s > 63 ? 0 : R[in->a] >> s; } vmbreak;
        vmcase(SHR_S64) { uint32_t s = (uint32_t)R[in->b]; R[in->d] = (uint64_t)((int64_t)R[in->a] >> (s > 63 ? 63 : s)); } vmbreak;
        vmcase(POPC_32) R[in->d] = (uint64_t)__builtin_popcount((uint32_t)R[in->a]); vmbreak;
        vmcase(POPC_64) R[in->d] = (uint64_t)__builtin_popcountll(R[in->a]); vmbreak;
        vmcase(CLZ_32) { uint32_t v = (uint32_t)R[in->a]; R[in->d] = v ? (uint64_t)__builtin_clz(v) : 32; } vmbreak;
        vmcase(CLZ_64) { uint64_t v = R[in->a]; R[in->d] = v ? (uint64_t)__builtin_clzll(v) : 64; } vmbreak;
        vmcase(BREV_32) R[in->d] = brev32((uint32_t)R[in->a]); vmbreak;
        vmcase(BREV_64) R[in->d] = ((uint64_t)brev32((uint32_t)R[in->a]) << 32) | brev32((uint32_t)(R[in->a] >> 32)); vmbreak;
        vmcase(BFE_U32) R[in->d] = bfe(R[in->a], (unsigned)R[in->b], (unsigned)R[in->c], 32, 0); vmbreak;
        vmcase(BFE_S32) R[in->d] = bfe(R[in->a], (unsigned)R[in->b], (unsigned)R[in->c], 32, 1); vmbreak;
        vmcase(BFE_U64) R[in->d] = bfe(R[in->a], (unsigned)R[in->b], (unsigned)R[in->c], 64, 0); vmbreak;
        vmcase(BFE_S64) R[in->d] = bfe(R[in->a], (unsigned)R[in->b], (unsigned)R[in->c], 64, 1); vmbreak;
        vmcase(BFI_32) vmcase(BFI_64) {
            int bits = in->op == OP_BFI_64 ? 64 : 32;
            unsigned pos = (unsigned)R[in->c] & 0xFF, len = (unsigned)R[in->e] & 0xFF;
            uint64_t f = R[in->a], r = R[in->b];
            for (unsigned i = 0; i < len && pos + i < (unsigned)bits; i++)
                r = (r & ~(1ull << (pos + i))) | (((f >> i) & 1) << (pos + i));
            R[in->d] = bits == 32 ? (uint32_t)r : r;
        } vmbreak;
        vmcase(PRMT) {
            uint64_t bytes = ((R[in->b] & 0xFFFFFFFFull) << 32) | (R[in->a] & 0xFFFFFFFFull);
            uint32_t sel = (uint32_t)R[in->c], r = 0;
            for (int i = 0; i < 4; i++) {
                unsigned s = (sel >> (4 * i)) & 0xF;
                uint32_t byte = (uint32_t)(bytes >> (8 * (s & 7))) & 0xFF;
                if (s & 8) byte = (byte & 0x80) ? 0xFF : 0;
                r |= byte << (8 * i);
            }
            R[in->d] = r;
        } vmbreak;
        vmcase(BFIND_U32) vmcase(BFIND_S32) vmcase(BFIND_U64) vmcase(BFIND_S64) {
            int bits = in->op == OP_BFIND_U64 || in->op == OP_BFIND_S64 ? 64 : 32;
            uint64_t v = bits == 32 ? (uint32_t)R[in->a] : R[in->a];
            if ((in->op == OP_BFIND_S32 && (v >> 31) & 1) || (in->op == OP_BFIND_S64 && (v >> 63) & 1))
                v = ~v & (bits == 32 ? 0xFFFFFFFFull : UINT64_MAX);
            uint32_t r = v ? (uint32_t)(63 - __builtin_clzll(v)) : 0xFFFFFFFFu;
            if (v && (in->flags & F_SHIFTAMT)) r = (uint32_t)bits - 1 - r;
            R[in->d] = r;
        } vmbreak;
        vmcase(SETP_S16) { int16_t a = (int16_t)R[in->a], b = (int16_t)R[in->b]; int p = CMP_INT(a, b, in->sub);
            R[in->d] = combine(in, R, p); R[in->e] = combine(in, R, !p); } vmbreak;
        vmcase(SETP_U16) { uint16_t a = (uint16_t)R[in->a], b = (uint16_t)R[in->b]; int p = CMP_INT(a, b, in->sub);
            R[in->d] = combine(in, R, p); R[in->e] = combine(in, R, !p); } vmbreak;
        vmcase(SETP_S32) { int32_t a = (int32_t)R[in->a], b = (int32_t)R[in->b]; int p = CMP_INT(a, b, in->sub);
            R[in->d] = combine(in, R, p); R[in->e] = combine(in, R, !p); } vmbreak;
        vmcase(SETP_U32) { uint32_t a = (uint32_t)R[in->a], b = (uint32_t)R[in->b]; int p = CMP_INT(a, b, in->sub);
            R[in->d] = combine(in, R, p); R[in->e] = combine(in, R, !p); } vmbreak;
        vmcase(SETP_S64) { int64_t a = (int64_t)R[in->a], b = (int64_t)R[in->b]; int p = CMP_INT(a, b, in->sub);
            R[in->d] = combine(in, R, p); R[in->e] = combine(in, R, !p); } vmbreak;
        vmcase(SETP_U64) { uint64_t a = R[in->a], b = R[in->b]; int p = CMP_INT(a, b, in->sub);
            R[in->d] = combine(in, R, p); R[in->e] = combine(in, R, !p); } vmbreak;
        vmcase(SETP_F32) { int p = cmp_float(f32(R[in->a]), f32(R[in->b]), in->sub);
            R[in->d] = combine(in, R, p); R[in->e] = combine(in, R, !p); } vmbreak;
        vmcase(SETP_F64) { int p = cmp_float(f64(R[in->a]), f64(R[in->b]), in->sub);
            R[in->d] = combine(in, R, p); R[in->e] = combine(in, R, !p); } vmbreak;
        vmcase(SET) R[in->d] = set_compare(in, R); vmbreak;
        vmcase(SELP) R[in->d] = (R[in->c] & 1) ? R[in->a] : R[in->b]; vmbreak;
        vmcase(CVT) R[in->d] = convert(R[in->a], in->type, in->sub, in->sub2, in->flags & F_SAT); vmbreak;
        vmcase(CVTA_SHARED) R[in->d] = (uint64_t)(uintptr_t)X->shared + (uint32_t)R[in->a]; vmbreak;
        vmcase(CVTA_TO_SHARED) R[in->d] = R[in->a] - (uint64_t)(uintptr_t)X->shared; vmbreak;
        vmcase(CVTA_LOCAL) R[in->d] = (uint64_t)(uintptr_t)T->local + R[in->a]; vmbreak;
        vmcase(CVTA_TO_LOCAL) R[in->d] = R[in->a] - (uint64_t)(uintptr_t)T->local; vmbreak;
        vmcase(ISSPACEP) {
            uint64_t a = R[in->a], sh = (uint64_t)(uintptr_t)X->shared, lo = (uint64_t)(uintptr_t)T->local;
            int is_sh = a - sh < X->shared_size, is_lo = a - lo < X->local_size;
            R[in->d] = in->sub == SPACE_SHARED ? is_sh : in->sub == SPACE_LOCAL ? is_lo : (!is_sh && !is_lo);
        } vmbreak;
        vmcase(SQRT_F32) R[in->d] = bits32(sqrtf(f32(R[in->a]))); vmbreak;
        vmcase(SQRT_F64) R[in->d] = bits64(sqrt(f64(R[in->a]))); vmbreak;
        vmcase(RSQRT_F32) R[in->d] = bits32(1.0f / sqrtf(f32(R[in->a]))); vmbreak;
        vmcase(RSQRT_F64) R[in->d] = bits64(1.0 / sqrt(f64(R[in->a]))); vmbreak;
        vmcase(RCP_F32) R[in->d] = bits32(1.0f / f32(R[in->a])); vmbreak;
        vmcase(RCP_F64) R[in->d] = bits64(1.0 / f64(R[in->a])); vmbreak;
        vmcase(EX2_F32) R[in->d] = bits32(exp2f(f32(R[in->a]))); vmbreak;
        vmcase(LG2_F32) R[in->d] = bits32(log2f(f32(R[in->a]))); vmbreak;
        vmcase(SIN_F32) R[in->d] = bits32(sinf(f32(R[in->a]))); vmbreak;
        vmcase(COS_F32) R[in->d] = bits32(cosf(f32(R[in->a]))); vmbreak;
        vmcase(TANH_F32) R[in->d] = bits32(tanhf(f32(R[in->a]))); vmbreak;
        vmcase(TESTP_F32) vmcase(TESTP_F64) {
            double v = in->op == OP_TESTP_F32 ? (double)f32(R[in->a]) : f64(R[in->a]);
            int c = in->op == OP_TESTP_F32 ? fpclassify(f32(R[in->a])) : fpclassify(v);
            R[in->d] = (uint64_t)(in->sub == TP_FINITE ? isfinite(v) != 0 : in->sub == TP_INFINITE ? isinf(v) != 0
                                  : in->sub == TP_NUMBER ? !isnan(v) : in->sub == TP_NAN ? isnan(v) != 0
                                  : in->sub == TP_NORMAL ? c == FP_NORMAL : c == FP_SUBNORMAL);
        } vmbreak;
        vmcase(COPYSIGN_F32) R[in->d] = (R[in->b] & 0x7FFFFFFFull) | (R[in->a] & 0x80000000ull); vmbreak;
        vmcase(COPYSIGN_F64) R[in->d] = (R[in->b] & 0x7FFFFFFFFFFFFFFFull) | (R[in->a] & 0x8000000000000000ull); vmbreak;
        vmcase(LD_GLOBAL_32) {
            uint64_t a = R[in->a] + (uint64_t)in->imm;
            uint8_t *p = (a & 3) ? NULL : global_ptr(X, a, 4);
            if (!p) MEMORY_FAULT(a, 4, 0, SPACE_GLOBAL);
            R[in->d] = *(uint32_t *)p;
        } vmbreak;
        vmcase(LD_GLOBAL_64) {
            uint64_t a = R[in->a] + (uint64_t)in->imm;
            uint8_t *p = (a & 7) ? NULL : global_ptr(X, a, 8);
            if (!p) MEMORY_FAULT(a, 8, 0, SPACE_GLOBAL);
            R[in->d] = *(uint64_t *)p;
        } vmbreak;
        vmcase(ST_GLOBAL_32) {
            uint64_t a = R[in->a] + (uint64_t)in->imm;
            uint8_t *p = (a & 3) ? NULL : global_ptr(X, a, 4);
            if (!p) MEMORY_FAULT(a, 4, 1, SPACE_GLOBAL);
            *(uint32_t *)p = (uint32_t)R[in->d];
        } vmbreak;
        vmcase(ST_GLOBAL_64) {
            uint64_t a = R[in->a] + (uint64_t)in->imm;
            uint8_t *p = (a & 7) ? NULL : global_ptr(X, a, 8);
            if (!p) MEMORY_FAULT(a, 8, 1, SPACE_GLOBAL);
            *(uint64_t *)p = R[in->d];
        } vmbreak;
        vmcase(LD_SHARED_32) {
            uint64_t a = (uint32_t)(R[in->a] + (uint64_t)in->imm);
            if ((a & 3) || !span_in(a, 4, 0, X->shared_size)) MEMORY_FAULT(a, 4, 0, SPACE_SHARED);
            R[in->d] = *(uint32_t *)(X->shared + a);
        } vmbreak;
        vmcase(ST_SHARED_32) {
            uint64_t a = (uint32_t)(R[in->a] + (uint64_t)in->imm);
            if ((a & 3) || !span_in(a, 4, 0, X->shared_size)) MEMORY_FAULT(a, 4, 1, SPACE_SHARED);
            *(uint32_t *)(X->shared + a) = (uint32_t)R[in->d];
        } vmbreak;
        vmcase(LD_KPARAM_32) R[in->d] = *(uint32_t *)(X->spec->params + in->imm); vmbreak;
        vmcase(LD_KPARAM_64) { uint64_t v; memcpy(&v, X->spec->params + in->imm, 8); R[in->d] = v; } vmbreak;
        vmcase(LD) vmcase(ST) {
            int store = in->op == OP_ST;
            unsigned size = (unsigned)type_bits(in->type) / 8;
            uint64_t a = R[in->a] + (uint64_t)in->imm;
            if (in->sub == SPACE_SHARED) a = (uint32_t)a;
            unsigned total = size * in->vec;
            uint8_t *p = address(X, T, in->sub, a, total);
            if (!p) MEMORY_FAULT(a, total, store, in->sub);
            const uint32_t regs[4] = {in->d, in->b, in->c, in->e};
            for (unsigned i = 0; i < in->vec; i++) {
                if (store) store_value(p + i * size, in->type, R[regs[i]]);
                else R[regs[i]] = load_value(p + i * size, in->type);
            }
        } vmbreak;
        vmcase(ATOM) {
            unsigned size = (unsigned)type_bits(in->type) / 8;
            uint64_t a = R[in->a] + (uint64_t)in->imm;
            if (in->sub == SPACE_SHARED) a = (uint32_t)a;
            uint8_t *p = address(X, T, in->sub, a, size);
            if (!p) MEMORY_FAULT(a, size, 1, in->sub);
            uint64_t old = atomic_rmw(p, in->sub2, in->type, R[in->b], R[in->c]);
            R[in->d] = old;
        } vmbreak;
        vmcase(MBARRIER) {
            uint64_t *obj = NULL;
            if (in->sub2 != MB_PENDING_COUNT) {
                uint64_t a = R[in->a] + (uint64_t)in->imm;
                if (in->sub == SPACE_SHARED) a = (uint32_t)a;
                obj = (uint64_t *)address(X, T, in->sub, a, 8);
                if (!obj) MEMORY_FAULT(a, 8, in->sub2 != MB_TEST_WAIT && in->sub2 != MB_TRY_WAIT, in->sub);
            }
            int waiting;
            R[in->d] = mbarrier_step(in->sub2, in->flags, obj, R[in->b], &waiting);
            R[SP_SINK] = 0;
            if (waiting) YIELD(TS_WAIT, pc); /* resumes after the wait, which said "not yet" */
        } vmbreak;
        vmcase(TENSORMAP_REPLACE) { /* writes the one field, as the hardware changes the map in place */
            unsigned offset, size;
            uint64_t value = in->type == T_B32 ? (uint32_t)R[in->b] : R[in->b], stored;
            tensor_map_field(in->sub2, in->c, value, &offset, &size, &stored);
            uint64_t a = R[in->a] + (uint64_t)in->imm + offset;
            if (in->sub == SPACE_SHARED) a = (uint32_t)a;
            uint8_t *p = address(X, T, in->sub, a, size);
            if (!p) MEMORY_FAULT(a, size, 1, in->sub);
            memcpy(p, &stored, size); /* little-endian, as the map */
        } vmbreak;
        vmcase(NANOSLEEP) {
            uint32_t ns = (uint32_t)R[in->a];
            struct timespec t = {0, ns > 1000000 ? 1000000 : ns};
            nanosleep(&t, NULL);
        } vmbreak;
        vmcase(GUARD) if (((R[in->a] ^ in->flags) & 1) == 0) JUMP(pc + (uint32_t)in->imm); vmbreak;
        vmcase(BRA) BRANCH((uint32_t)in->imm); vmbreak;
        /* setp then @p bra, fused: the predicate is written as setp would; seg-- counts the bra too */
#define SETP_BRA(OPN, T) vmcase(OPN) { T a_ = (T)R[in->a], b_ = (T)R[in->b]; int p = CMP_INT(a_, b_, in->sub); \
            R[in->d] = (uint64_t)p; seg--; if ((p ^ in->flags) & 1) BRANCH((uint32_t)in->imm); } vmbreak;
        SETP_BRA(SETP_BRA_S32, int32_t) SETP_BRA(SETP_BRA_U32, uint32_t) SETP_BRA(SETP_BRA_S64, int64_t)
        SETP_BRA(SETP_BRA_U64, uint64_t)
        vmcase(BRA_IF) if ((R[in->a] ^ in->flags) & 1) BRANCH((uint32_t)in->imm); vmbreak;
        vmcase(CALL) {
            callee_index = X->m->calls[in->imm].callee;
            goto call;
        }
        vmcase(CALL_INDIRECT) {
            uint64_t target = R[in->a] - FUNCTION_ADDRESS_BASE;
            callee_index = (int)(target / FUNCTION_ADDRESS_STEP);
            if (target % FUNCTION_ADDRESS_STEP || target / FUNCTION_ADDRESS_STEP >= (uint64_t)X->m->nfuncs ||
                !funcs[callee_index].defined || funcs[callee_index].is_entry ||
                funcs[callee_index].nparams != X->m->calls[in->imm].nargs)
                FAULT_AT(CUDA_ERROR_INVALID_PC, R[in->a], 0, 0, -1); /* not a function of the module, or another signature */
            goto call;
        }
        call: {
            const CallInfo *ci = &X->m->calls[in->imm];
            const PtxFunction *callee = &funcs[callee_index], *caller = &funcs[ci->caller];
            if (T->depth == CALL_DEPTH_MAX) FAULT_AT(CUDA_ERROR_HARDWARE_STACK_ERROR, 0, 0, 0, -1);
            WATCH_POINT();
            Frame *fr = &T->stack[T->depth++];
            fr->ret_pc = pc;
            fr->call = (uint32_t)in->imm;
            fr->callee = callee_index;
            fr->regs = R;
            fr->lbase = T->lbase;
            uint64_t *nr = R + caller->nslots;
            uint32_t nl = T->lbase + caller->frame_local;
            memcpy(nr, R, SP_COUNT * sizeof(uint64_t));
            memcpy(nr + callee->const_base, callee->consts, callee->nconsts * sizeof(uint64_t));
            for (int i = 0; i < ci->nargs && i < callee->nparams; i++)
                memcpy(T->local + nl + callee->params[i].offset, T->local + T->lbase + ci->arg_off[i],
                       callee->params[i].size);
            R = T->regs = nr;
            T->lbase = nl;
            JUMP(callee->entry_pc);
        } vmbreak;
        vmcase(RET) {
            if (T->depth == 0) YIELD(TS_DONE, pc - 1);
            Frame *fr = &T->stack[--T->depth];
            const CallInfo *ci = &X->m->calls[fr->call];
            const PtxFunction *callee = &funcs[fr->callee];
            if (ci->ret_off != UINT32_MAX && callee->has_ret)
                memcpy(T->local + fr->lbase + ci->ret_off, T->local + T->lbase + callee->ret_off, callee->ret_size);
            R = T->regs = fr->regs;
            T->lbase = fr->lbase;
            JUMP(fr->ret_pc);
        } vmbreak;
        vmcase(PRINTF) { /* vprintf(format, buffer): params in this frame; returns the arguments read */
            uint64_t format, buffer;
            memcpy(&format, T->local + T->lbase + in->imm, sizeof format);
            memcpy(&buffer, T->local + T->lbase + in->c, sizeof buffer);
            int32_t count = device_printf(X, T, format, buffer);
            if (count == -2) FAULT_AT(CUDA_ERROR_ILLEGAL_ADDRESS, format, 1, 0, SPACE_GENERIC);
            if (in->e != UINT32_MAX) memcpy(T->local + T->lbase + in->e, &count, sizeof count);
        } vmbreak;
        vmcase(MALLOC) { /* malloc(size) -> pointer: params in this frame */
            uint64_t size, p;
            memcpy(&size, T->local + T->lbase + in->imm, sizeof size);
            p = device_heap_malloc(X->ctx, size);
            memcpy(T->local + T->lbase + in->e, &p, sizeof p);
        } vmbreak;
        vmcase(FREE) {
            uint64_t p;
            memcpy(&p, T->local + T->lbase + in->imm, sizeof p);
            if (device_heap_free(X->ctx, p)) FAULT_AT(CUDA_ERROR_ILLEGAL_ADDRESS, p, 0, 1, SPACE_GLOBAL);
        } vmbreak;
        vmcase(EXIT) YIELD(TS_DONE, pc - 1);
        vmcase(SET_CONDITIONAL) { /* cudaGraphSetConditional(handle, value): its params in this frame */
            uint8_t *h = address(X, T, SPACE_FRAME, (uint64_t)in->imm, 8), *v = address(X, T, SPACE_FRAME, in->e, 4);
            uint64_t handle;
            uint32_t value;
            if (!h || !v) FAULT_AT(CUDA_ERROR_LAUNCH_FAILED, 0, 0, 0, -1);
            memcpy(&handle, h, sizeof handle);
            memcpy(&value, v, sizeof value);
            if (graph_condition_set(handle, value)) FAULT_AT(CUDA_ERROR_LAUNCH_FAILED, 0, 0, 0, -1);
        } vmbreak;
        vmcase(GRID_HANDLE) { /* cudaCGGetIntrinsicHandle: any nonzero value names the grid */
            uint8_t *h = address(X, T, SPACE_FRAME, in->e, 8);
            if (!h) FAULT_AT(CUDA_ERROR_LAUNCH_FAILED, 0, 0, 0, -1);
            memcpy(h, &(uint64_t){1}, 8);
        } vmbreak;
        vmcase(TRAP) FAULT_AT((in->flags & F_ASSERT) ? CUDA_ERROR_ASSERT : CUDA_ERROR_LAUNCH_FAILED, 0, 0, 0, -1);
        vmcase(COLLECTIVE) YIELD(in->sub <= COL_GRID_SYNC ? TS_BAR : TS_WARP, pc - 1);
        vmcase(NONE) FAULT_AT(CUDA_ERROR_ILLEGAL_INSTRUCTION, 0, 0, 0, -1);
        }
    }
}

/* ---- warp collectives and block barriers ---- */

static void warp_collective(Exec *X, Thread *lanes, int nlanes, uint32_t group) {
    const Inst *in = NULL;
    for (int l = 0; l < nlanes; l++)
        if (group >> l & 1) { in = &X->m->code[lanes[l].pc]; break; }
    uint64_t vals[32] = {0};
    int preds[32] = {0};
    for (int l = 0; l < nlanes; l++) {
        if (!(group >> l & 1)) continue;
        uint64_t *R = lanes[l].regs;
        vals[l] = R[in->a];
        if (in->sub >= COL_VOTE_ALL && in->sub <= COL_VOTE_BALLOT) preds[l] = (int)((R[in->a] & 1) ^ (in->flags & F_NEG_C ? 1 : 0));
    }
    uint32_t ballot = 0;
    int all = 1, any = 0;
    for (int l = 0; l < nlanes; l++)
        if (group >> l & 1) {
            ballot |= (uint32_t)preds[l] << l;
            all &= preds[l];
            any |= preds[l];
        }
    uint64_t red = 0;
    if (in->sub >= COL_REDUX_ADD) {
        int first = 1;
        for (int l = 0; l < nlanes; l++) {
            if (!(group >> l & 1)) continue;
            uint32_t v = (uint32_t)vals[l];
            uint32_t r = (uint32_t)red;
            int sgn = in->type == T_S32;
            switch (in->sub) {
            case COL_REDUX_ADD: r += v; break;
            case COL_REDUX_MIN: r = first ? v : sgn ? ((int32_t)v < (int32_t)r ? v : r) : (v < r ? v : r); break;
            case COL_REDUX_MAX: r = first ? v : sgn ? ((int32_t)v > (int32_t)r ? v : r) : (v > r ? v : r); break;
            case COL_REDUX_AND: r = first ? v : (r & v); break;
            case COL_REDUX_OR: r |= v; break;
            default: r ^= v; break;
            }
            red = r;
            first = 0;
        }
    }
    for (int l = 0; l < nlanes; l++) {
        if (!(group >> l & 1)) continue;
        Thread *T = &lanes[l];
        uint64_t *R = T->regs;
        switch (in->sub) {
        case COL_SHFL_UP: case COL_SHFL_DOWN: case COL_SHFL_BFLY: case COL_SHFL_IDX: {
            int lane = l, b = (int)(R[in->b] & 31), c = (int)R[in->c];
            int segmask = (c >> 8) & 31, cval = c & 31;
            int max_lane = (lane & segmask) | (cval & ~segmask), min_lane = lane & segmask, j, ok;
            if (in->sub == COL_SHFL_UP) { j = lane - b; ok = j >= max_lane; }
            else if (in->sub == COL_SHFL_DOWN) { j = lane + b; ok = j <= max_lane; }
            else if (in->sub == COL_SHFL_BFLY) { j = lane ^ b; ok = j <= max_lane; }
            else { j = min_lane | (b & ~segmask); ok = j <= max_lane; }
            if (!ok || j < 0 || j >= nlanes || !(group >> j & 1)) j = lane;
            R[in->d] = vals[j] & 0xFFFFFFFFull;
            R[in->e] = (uint64_t)ok;
        } break;
        case COL_VOTE_ALL: R[in->d] = (uint64_t)all; break;
        case COL_VOTE_ANY: R[in->d] = (uint64_t)any; break;
        case COL_VOTE_UNI: R[in->d] = (uint64_t)(all || !any); break;
        case COL_VOTE_BALLOT: R[in->d] = ballot; break;
        case COL_MATCH_ANY: case COL_MATCH_ALL: { /* the lanes of membermask here that hold this lane's value */
            uint64_t width = in->type == T_B64 ? ~0ull : 0xFFFFFFFFull;
            uint32_t members = group & (uint32_t)R[in->b], same = 0;
            for (int j = 0; j < nlanes; j++)
                if ((members >> j & 1) && !((vals[j] ^ vals[l]) & width)) same |= 1u << j;
            if (in->sub == COL_MATCH_ANY) R[in->d] = same;
            else R[in->d] = same == members ? members : 0, R[in->e] = same == members;
        } break;
        case COL_ACTIVEMASK: R[in->d] = group; break;
        case COL_WARP_SYNC: break;
        default: R[in->d] = red; break;
        }
        R[SP_SINK] = 0;
        T->pc++;
        T->state = TS_RUN;
    }
}

/* Releases the block's threads from their barrier; 1 (none released) when the launch ends while the block
 * waits at a grid barrier for the other blocks. */
static int release_barrier(Exec *X, Thread *threads, int n) {
    const Inst *in = NULL;
    int count = 0, all = 1, any = 0, grid = 0;
    for (int i = 0; i < n; i++) {
        if (threads[i].state != TS_BAR) continue;
        in = &X->m->code[threads[i].pc];
        grid |= in->sub == COL_GRID_SYNC;
        if (in->sub != COL_BAR && in->sub != COL_GRID_SYNC) {
            int p = (int)((threads[i].regs[in->a] & 1) ^ (in->flags & F_NEG_C ? 1 : 0));
            count += p, all &= p, any |= p;
        }
    }
    if (grid && X->grid_sync && grid_barrier_wait(X->grid_sync, X->watch->stop)) return 1;
    for (int i = 0; i < n; i++) {
        Thread *T = &threads[i];
        if (T->state != TS_BAR) continue;
        in = &X->m->code[T->pc];
        if (in->sub == COL_BAR_RED_POPC) T->regs[in->d] = (uint64_t)count;
        else if (in->sub == COL_BAR_RED_AND) T->regs[in->d] = (uint64_t)all;
        else if (in->sub == COL_BAR_RED_OR) T->regs[in->d] = (uint64_t)any;
        else if (in->sub == COL_GRID_SYNC && in->e != UINT32_MAX) { /* cudaCGSynchronize returns cudaSuccess */
            uint8_t *r = address(X, T, SPACE_FRAME, in->e, 4);
            if (r) memset(r, 0, 4);
        }
        T->pc++;
        T->state = TS_RUN;
    }
    return 0;
}

typedef struct BlockMemory {
    Thread *threads;
    Frame *frames; /* the threads' call stacks; NULL when the module makes no calls */
    uint64_t *regs;
    uint8_t *local, *shared;
    size_t nthreads;
    int ready; /* the threads' registers hold the launch's special registers and constants already */
} BlockMemory;

/* Runs one block to completion; returns 0, or -1 when a thread faulted. */
static int run_block(Exec *X, BlockMemory *B, const unsigned id[3]) {
    const LaunchSpec *S = X->spec;
    const PtxFunction *K = X->kernel;
    int n = (int)B->nthreads;
    memcpy(X->block_id, id, sizeof X->block_id);
    memset(B->shared, 0, X->shared_size);
    X->cache_lo = X->cache_hi = 0;
    uint64_t base[SP_COUNT] = {0};
    base[SP_TRUE] = 1;
    base[SP_NTID_X] = S->block[0], base[SP_NTID_Y] = S->block[1], base[SP_NTID_Z] = S->block[2];
    base[SP_CTAID_X] = id[0], base[SP_CTAID_Y] = id[1], base[SP_CTAID_Z] = id[2];
    base[SP_NCTAID_X] = S->grid[0], base[SP_NCTAID_Y] = S->grid[1], base[SP_NCTAID_Z] = S->grid[2];
    base[SP_NWARPID] = (uint64_t)((n + 31) / 32);
    base[SP_NSMID] = (uint64_t)g_block_threads;
    base[SP_DYN_SMEM] = S->shared_bytes;
    base[SP_TOTAL_SMEM] = X->shared_size;
    base[SP_CLOCK] = now_ns();
    if (B->ready) { /* the decoder lets no instruction write a special register or a constant */
        for (int i = 0; i < n; i++) {
            Thread *T = &B->threads[i];
            T->regs = B->regs + (size_t)i * K->stack_slots;
            T->pc = K->entry_pc;
            T->lbase = 0;
            T->depth = 0;
            T->state = TS_RUN;
            uint64_t *R = T->regs;
            R[SP_CTAID_X] = id[0], R[SP_CTAID_Y] = id[1], R[SP_CTAID_Z] = id[2], R[SP_CLOCK] = base[SP_CLOCK];
        }
    } else {
        int i = 0;
        for (unsigned z = 0; z < S->block[2]; z++)
            for (unsigned y = 0; y < S->block[1]; y++)
                for (unsigned x = 0; x < S->block[0]; x++, i++) {
                    Thread *T = &B->threads[i];
                    T->regs = B->regs + (size_t)i * K->stack_slots;
                    T->stack = B->frames ? B->frames + (size_t)i * CALL_DEPTH_MAX : NULL;
                    T->local = B->local + (size_t)i * X->local_size;
                    T->pc = K->entry_pc;
                    T->lbase = 0;
                    T->depth = 0;
                    T->state = TS_RUN;
                    T->linear = (unsigned)i;
                    uint64_t *R = T->regs;
                    memcpy(R, base, sizeof base);
                    memcpy(R + K->const_base, K->consts, K->nconsts * sizeof(uint64_t));
                    unsigned lane = (unsigned)i & 31;
                    R[SP_TID_X] = x, R[SP_TID_Y] = y, R[SP_TID_Z] = z;
                    R[SP_LANEID] = lane, R[SP_WARPID] = (unsigned)i >> 5;
                    R[SP_LANEMASK_EQ] = 1u << lane;
                    R[SP_LANEMASK_LT] = (1u << lane) - 1;
                    R[SP_LANEMASK_LE] = (uint32_t)((2ull << lane) - 1);
                    R[SP_LANEMASK_GT] = (uint32_t)~((2ull << lane) - 1);
                    R[SP_LANEMASK_GE] = (uint32_t)~((1u << lane) - 1);
                }
        B->ready = 1;
    }
    int nwarps = (n + 31) / 32;
    for (;;) {
        int at_barrier = 0, waiting = 0;
        for (int w = 0; w < nwarps; w++) {
            Thread *lanes = &B->threads[w * 32];
            int nl = n - w * 32 < 32 ? n - w * 32 : 32;
            for (;;) {
                for (int l = 0; l < nl; l++) {
                    if (lanes[l].state != TS_RUN) continue;
                    int st = run_thread(X, &lanes[l]);
                    if (st == TS_FAULT) return -1;
                }
                int first = -1; /* the lowest pc first: lanes that branched ahead wait there for the others,
                                   as diverged lanes reconverge after an if/else or a loop on hardware */
                for (int l = 0; l < nl; l++)
                    if (lanes[l].state == TS_WARP && (first < 0 || lanes[l].pc < lanes[first].pc)) first = l;
                if (first < 0) break;
                uint32_t group = 0;
                for (int l = 0; l < nl; l++)
                    if (lanes[l].state == TS_WARP && lanes[l].pc == lanes[first].pc) group |= 1u << l;
                warp_collective(X, lanes, nl, group);
            }
            for (int l = 0; l < nl; l++) at_barrier |= lanes[l].state == TS_BAR, waiting |= lanes[l].state == TS_WAIT;
        }
        if (waiting) { /* the others have run: each waiting thread asks again */
            for (int i = 0; i < n; i++)
                if (B->threads[i].state == TS_WAIT) B->threads[i].state = TS_RUN;
            continue;
        }
        if (!at_barrier) return 0;
        if (release_barrier(X, B->threads, n)) return 0;
    }
}

typedef struct Grid {
    Context *ctx;
    PrintOutput print;
    const LaunchSpec *spec;
    const PtxModule *m;
    const PtxFunction *kernel;
    Range *ranges;
    int nranges;
    uint64_t nblocks, next;
    volatile int stop;
    Watchdog watch;
    GridBarrier grid_sync;
    pthread_mutex_t mu;
    Exec failed; /* the first fault */
    int has_failure;
} Grid;

static uint64_t g_executed;

/* Local memory of one thread: the deepest chain of frames, rounded to the module's data alignment. */
static uint32_t thread_local_bytes(const PtxModule *m, const PtxFunction *kernel) {
    return (kernel->stack_local + m->data_align - 1) & ~(m->data_align - 1);
}

uint64_t interp_block_bytes(const PtxModule *m, const PtxFunction *kernel, uint64_t n) {
    return n * ((uint64_t)kernel->stack_slots * sizeof(uint64_t) + thread_local_bytes(m, kernel) + sizeof(Thread) +
                (m->ncalls ? CALL_DEPTH_MAX * sizeof(Frame) : 0));
}

/* After a block: has the launch run past a watchdog limit? Then the worker fails it with LAUNCH_TIMEOUT. */
static int block_watch_expired(Exec *X, const Grid *G) {
    if (!X->watch->budget && !X->watch->deadline_ns) return 0;
    int cause = watchdog_expired(X, 0);
    if (cause != WATCH_TIME && cause != WATCH_BUDGET) return 0;
    X->fault = CUDA_ERROR_LAUNCH_TIMEOUT;
    X->fault_pc = G->kernel->entry_pc;
    X->fault_linear = 0;
    return 1;
}

static void *grid_worker(void *arg) {
    Grid *G = arg;
    const LaunchSpec *S = G->spec;
    Exec X = {0};
    X.print = &G->print;
    X.spec = S, X.m = G->m, X.kernel = G->kernel, X.ranges = G->ranges, X.nranges = G->nranges, X.ctx = G->ctx;
    X.watch = &G->watch;
    X.grid_sync = G->m->uses_grid_sync ? &G->grid_sync : NULL;
    X.watch_countdown = WATCH_INTERVAL;
    X.shared_size = (G->m->shared_static + S->shared_bytes + SHARED_ALLOCATION_UNIT - 1)
                    & ~(uint64_t)(SHARED_ALLOCATION_UNIT - 1);
    uint32_t align = G->m->data_align; /* a power of two: .align takes no other */
    X.local_size = thread_local_bytes(G->m, G->kernel);
    BlockMemory B = {0};
    B.nthreads = (size_t)S->block[0] * S->block[1] * S->block[2];
    B.threads = calloc(B.nthreads, sizeof(Thread));
    B.frames = G->m->ncalls ? calloc(B.nthreads * CALL_DEPTH_MAX, sizeof(Frame)) : NULL;
    B.regs = calloc(B.nthreads * G->kernel->stack_slots + 1, sizeof(uint64_t));
    size_t local_bytes = B.nthreads * X.local_size + align;
    B.local = aligned_alloc(align, local_bytes);
    if (B.local) memset(B.local, 0, local_bytes);
    B.shared = aligned_alloc(align, (X.shared_size + align) & ~(uint64_t)(align - 1));
    X.shared = B.shared;
    if (!B.threads || !B.regs || !B.local || !B.shared || (G->m->ncalls && !B.frames)) {
        pthread_mutex_lock(&G->mu);
        if (!G->has_failure) { G->has_failure = 1; G->failed.fault = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES; }
        G->stop = 1;
        pthread_mutex_unlock(&G->mu);
    }
    while (!G->stop) {
        uint64_t b = __atomic_fetch_add(&G->next, 1, __ATOMIC_RELAXED);
        if (b >= G->nblocks) break;
        unsigned id[3] = {(unsigned)(b % S->grid[0]), (unsigned)(b / S->grid[0] % S->grid[1]),
                          (unsigned)(b / ((uint64_t)S->grid[0] * S->grid[1]))};
        if (run_block(&X, &B, id) || block_watch_expired(&X, G)) {
            pthread_mutex_lock(&G->mu);
            if (!G->has_failure) {
                G->has_failure = 1;
                G->failed = X;
                G->failed.block_id[0] = id[0], G->failed.block_id[1] = id[1], G->failed.block_id[2] = id[2];
            }
            G->stop = 1;
            pthread_mutex_unlock(&G->mu);
            if (X.grid_sync) grid_barrier_stop(X.grid_sync);
        }
        if (X.grid_sync) grid_barrier_end_block(X.grid_sync);
    }
    free(B.threads), free(B.frames), free(B.regs), free(B.local), free(B.shared);
    __atomic_fetch_add(&g_executed, X.steps, __ATOMIC_RELAXED);
    return NULL;
}

/* Thread-instructions the interpreter has run in this process (for benchmarks: an exact count). */
API uint64_t ironaccel_fake_executed_instructions(void) { return __atomic_load_n(&g_executed, __ATOMIC_RELAXED); }

static const char *space_name(int space) {
    static const char *const NAMES[SPACE_COUNT] = {
#define X(e, name) name,
        SPACES(X)
#undef X
    };
    return space >= 0 && space < SPACE_COUNT ? NAMES[space] : "";
}

/* Reads the watchdog's limits (at every launch, so a process can change them); a bad value is reported once
 * and leaves that limit off. */
static void watchdog_from_env(Watchdog *W) {
    static int warned;
    const char *s = getenv("IRONACCEL_FAKE_WATCHDOG_S");
    char *end;
    if (s && *s) {
        double v = strtod(s, &end);
        if (*end || !(v >= 0) || v > 1e9) {
            if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
                fake_log("IRONACCEL_FAKE_WATCHDOG_S=%s is not a number of seconds: no time limit", s);
        } else {
            W->seconds = v;
        }
    }
    s = getenv("IRONACCEL_FAKE_WATCHDOG_INSTRUCTIONS");
    if (s && *s) {
        double v = strtod(s, &end); /* 1e9 and 1000000000 alike */
        if (*end || !(v >= 0) || v > 1.8e19) {
            if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
                fake_log("IRONACCEL_FAKE_WATCHDOG_INSTRUCTIONS=%s is not a count: no instruction limit", s);
        } else {
            W->budget = (uint64_t)v;
        }
    }
}

CUresult interp_launch(Context *ctx, const LaunchSpec *spec, char *report, size_t report_len) {
    const PtxModule *m = spec->fn->module->ptx;
    Grid G = {0};
    G.spec = spec, G.m = m, G.kernel = &m->funcs[spec->fn->index], G.ctx = ctx;
    G.nblocks = (uint64_t)spec->grid[0] * spec->grid[1] * spec->grid[2];
    /* a grid that synchronizes must fit on the device at once: 32 blocks on each multiprocessor at most */
    if (m->uses_grid_sync && G.nblocks > (uint64_t)g_block_threads * 32) return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    if (m->uses_device_heap) {
        CUresult rc = device_heap_ready(ctx, context_limit(ctx, 2)); /* CU_LIMIT_MALLOC_HEAP_SIZE */
        if (rc != CUDA_SUCCESS) return rc;
    }
    /* a kernel that returns at once has nothing to run in any thread: numba's test_issue_9229 launches 5.7e9
     * threads of a kernel its compiler emptied, which the H200 finishes at once and block by block took minutes */
    int op = m->code[G.kernel->entry_pc].op;
    if (op == OP_RET || op == OP_EXIT) return CUDA_SUCCESS;
    G.ranges = mem_snapshot(&G.nranges);
    pthread_mutex_init(&G.print.mu, NULL);
    G.print.limit = context_limit(ctx, 1); /* CU_LIMIT_PRINTF_FIFO_SIZE */
    watchdog_from_env(&G.watch);
    G.watch.stop = &G.stop;
    if (G.watch.seconds > 0) G.watch.deadline_ns = now_ns() + (uint64_t)(G.watch.seconds * 1e9);
    pthread_mutex_init(&G.mu, NULL);
    /* a grid that synchronizes has every block running at once (what a cooperative launch guarantees) */
    uint64_t helpers = m->uses_grid_sync ? G.nblocks - 1 : (uint64_t)g_block_threads - 1;
    if (helpers > G.nblocks - 1) helpers = G.nblocks - 1;
    pthread_mutex_init(&G.grid_sync.mu, NULL);
    pthread_cond_init(&G.grid_sync.cv, NULL);
    G.grid_sync.nblocks = G.nblocks;
    pthread_t local_tids[64], *tids = helpers <= 64 ? local_tids : malloc(helpers * sizeof *tids);
    uint64_t started = 0;
    while (tids && started < helpers && !pthread_create(&tids[started], NULL, grid_worker, &G)) started++;
    if (started < helpers && m->uses_grid_sync) { /* fewer workers than blocks would wait at the barrier forever */
        pthread_mutex_lock(&G.mu);
        G.has_failure = 1, G.failed.fault = CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, G.stop = 1;
        pthread_mutex_unlock(&G.mu);
        grid_barrier_stop(&G.grid_sync);
    } else {
        grid_worker(&G);
    }
    for (uint64_t i = 0; i < started; i++) pthread_join(tids[i], NULL);
    if (tids != local_tids) free(tids);
    pthread_cond_destroy(&G.grid_sync.cv);
    pthread_mutex_destroy(&G.grid_sync.mu);
    free(G.ranges);
    pthread_mutex_destroy(&G.mu);
    if (G.print.len) { /* the host sees a launch's printf output once the launch is done */
        fwrite(G.print.text, 1, G.print.len, stdout);
        fflush(stdout);
    }
    free(G.print.text);
    pthread_mutex_destroy(&G.print.mu);
    if (!G.has_failure) return CUDA_SUCCESS;
    Exec *F = &G.failed;
    unsigned linear = F->fault_linear;
    unsigned tx = linear % spec->block[0], ty = linear / spec->block[0] % spec->block[1],
             tz = linear / (spec->block[0] * spec->block[1]);
    int line = F->fault_pc < m->ncode ? m->lines[F->fault_pc] : 0;
    const char *name = G.kernel->name;
    if (F->fault == CUDA_ERROR_ILLEGAL_ADDRESS || F->fault == CUDA_ERROR_MISALIGNED_ADDRESS) {
        char where[256] = "";
        if (F->fault_space == SPACE_GLOBAL || F->fault_space == SPACE_GENERIC) mem_describe(F->fault_addr, where, sizeof where);
        else snprintf(where, sizeof where, "the block has %llu bytes of %s memory", (unsigned long long)
                      (F->fault_space == SPACE_SHARED ? F->shared_size : F->local_size), space_name(F->fault_space));
        snprintf(report, report_len,
                 "memcheck: %s %s %s of %u bytes at 0x%llx in kernel %s, block (%u,%u,%u), thread (%u,%u,%u), "
                 "PTX line %d: %s",
                 F->fault == CUDA_ERROR_MISALIGNED_ADDRESS ? "misaligned" : "invalid", space_name(F->fault_space),
                 F->fault_store ? "write" : "read", F->fault_size, (unsigned long long)F->fault_addr, name,
                 F->block_id[0], F->block_id[1], F->block_id[2], tx, ty, tz, line, where);
    } else if (F->fault == CUDA_ERROR_LAUNCH_TIMEOUT) {
        char limit[96];
        if (F->watch_cause == WATCH_BUDGET)
            snprintf(limit, sizeof limit, "ran more than %llu thread-instructions (IRONACCEL_FAKE_WATCHDOG_INSTRUCTIONS)",
                     (unsigned long long)G.watch.budget);
        else
            snprintf(limit, sizeof limit, "ran longer than %g s (IRONACCEL_FAKE_WATCHDOG_S)", G.watch.seconds);
        snprintf(report, report_len, "watchdog: kernel %s %s; stopped in block (%u,%u,%u), thread (%u,%u,%u), "
                 "PTX line %d", name, limit, F->block_id[0], F->block_id[1], F->block_id[2], tx, ty, tz, line);
    } else {
        const char *what = F->fault == CUDA_ERROR_ASSERT ? "device-side assert"
                         : F->fault == CUDA_ERROR_LAUNCH_FAILED ? "trap"
                         : F->fault == CUDA_ERROR_HARDWARE_STACK_ERROR ? "call stack overflow"
                         : F->fault == CUDA_ERROR_INVALID_PC ? "call through a pointer to no function of the module"
                         : "launch failure";
        snprintf(report, report_len, "%s in kernel %s, block (%u,%u,%u), thread (%u,%u,%u), PTX line %d", what, name,
                 F->block_id[0], F->block_id[1], F->block_id[2], tx, ty, tz, line);
    }
    return F->fault;
}
