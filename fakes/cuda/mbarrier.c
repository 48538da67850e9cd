/* PTX's mbarrier objects. A block's threads run on one worker, one at a time, so the 64-bit object in shared
 * memory needs no atomics. Its layout is the fake's own (hardware's is opaque, and PTX reads it only through
 * these instructions): the pending arrivals of the current phase in bits 0-19, the expected arrivals of each
 * phase in bits 20-39, the current phase's parity in bit 63. A state (what arrive returns) is the object as it
 * was before the arrival. Transaction counts (expect_tx, complete_tx) come with the asynchronous copies, which
 * the fake does not implement, so they are not here either. */
#include "fake.h"
#include "ops.h"

#define COUNT_BITS 20
#define COUNT_MASK ((1ull << COUNT_BITS) - 1)
#define PHASE_BIT (1ull << 63)

static uint64_t pending(uint64_t v) { return v & COUNT_MASK; }
static uint64_t expected(uint64_t v) { return v >> COUNT_BITS & COUNT_MASK; }
static uint64_t object(uint64_t phase, uint64_t expect, uint64_t pend) {
    return phase | (expect & COUNT_MASK) << COUNT_BITS | (pend & COUNT_MASK);
}

uint64_t mbarrier_step(int op, int flags, uint64_t *obj, uint64_t b, int *waiting) {
    *waiting = 0;
    switch (op) {
    case MB_INIT: /* count is 1 .. 2^20-1 in PTX; phase 0, every arrival pending */
        *obj = object(0, b, b);
        return 0;
    case MB_INVAL:
        *obj = 0;
        return 0;
    case MB_ARRIVE:
    case MB_ARRIVE_DROP: {
        uint64_t was = *obj, count = flags & MB_HAS_COUNT ? b & COUNT_MASK : 1;
        uint64_t phase = was & PHASE_BIT, expect = expected(was), pend = pending(was);
        pend = count < pend ? pend - count : 0; /* more arrivals than pending: undefined in PTX */
        if (op == MB_ARRIVE_DROP) expect = count < expect ? expect - count : 0;
        if (pend == 0 && !(flags & MB_NO_COMPLETE)) *obj = object(phase ^ PHASE_BIT, expect, expect);
        else *obj = object(phase, expect, pend);
        return was;
    }
    case MB_TEST_WAIT:
    case MB_TRY_WAIT: { /* the phase of the state (or of that parity) has completed when the current one differs */
        uint64_t asked = flags & MB_PARITY ? (b & 1) << 63 : b & PHASE_BIT;
        int complete = (*obj & PHASE_BIT) != asked;
        *waiting = !complete;
        return (uint64_t)complete;
    }
    default: /* MB_PENDING_COUNT of a state */
        return pending(b);
    }
}
