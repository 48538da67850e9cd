/* Green contexts: the device's SM and workqueue resources, SM splits (cuDevSmResourceSplitByCount and the
 * structured cuDevSmResourceSplit), resource descriptors, green contexts and their streams.
 *
 * The SMs are the reported multiprocessors (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, one per host thread that
 * runs blocks, at most 64), numbered 0..N-1; a resource is a set of them (a 64-bit mask kept in the resource's
 * internal bytes, with the split it came from). Co-scheduled SMs come in aligned windows: SMs k*c .. k*c+c-1
 * for a co-scheduled count c. sm_90's rules, from the driver API's documentation of green contexts: partitions
 * and their alignment are multiples of 8 SMs by default (2 with IGNORE_SM_COSCHEDULING), a co-scheduled count
 * is at most 32, the structured split's counts are even. A green context is a regular context (its CUcontext,
 * cuCtxFromGreenCtx) that holds the primary context while it lives; kernels launched in it run as in any
 * context. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

CUresult cuDevicePrimaryCtxRetain(void **pctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);

enum { RES_INVALID = 0, RES_SM = 1, RES_WORKQUEUE_CONFIG = 1000, RES_WORKQUEUE = 10000 };
enum { SM_PARTITION_DEFAULT = 8, SM_PARTITION_IGNORING_COSCHEDULING = 2, COSCHEDULED_MAX = 32 };
enum { SPLIT_IGNORE_SM_COSCHEDULING = 1, SPLIT_MAX_POTENTIAL_CLUSTER_SIZE = 2 };
enum { GROUP_BACKFILL = 1, GROUP_LOCALITY_DOMAIN = 2, GROUP_LOCALITY_SUPPLEMENTAL = 4 };
enum { WORKQUEUE_CONCURRENCY_DEFAULT = 8 /* CUDA_DEVICE_MAX_CONNECTIONS' default */, WORKQUEUE_SCOPES = 2 };
#define STREAM_NON_BLOCKING 1u
#define GREEN_CTX_DEFAULT_STREAM 1u
#define TAG_MAGIC 0x47524e31u /* "GRN1": a resource this driver filled */

typedef struct SmFields {
    unsigned smCount, minSmPartitionSize, smCoscheduledAlignment, flags, localityDomainId;
} SmFields;
typedef struct WorkqueueConfig {
    CUdevice device;
    unsigned wqConcurrencyLimit;
    int sharingScope;
} WorkqueueConfig;
/* CUdevResource (RESOURCE_ABI_VERSION 1): the driver's internal bytes hold a ResourceTag. */
typedef struct DevResource {
    int type;
    unsigned char internal[92];
    union {
        SmFields sm;
        WorkqueueConfig wq_config;
        unsigned char bytes[40];
    } u;
    struct DevResource *next;
} DevResource;
_Static_assert(sizeof(DevResource) == 144, "CUdevResource_v1 is 144 bytes");
typedef struct ResourceTag {
    uint32_t magic, split;
    uint64_t sms;
} ResourceTag;
/* CU_DEV_SM_RESOURCE_GROUP_PARAMS */
typedef struct GroupParams {
    unsigned smCount, coscheduledSmCount, preferredCoscheduledSmCount, flags, localityDomainId;
    unsigned reserved[11];
} GroupParams;

typedef struct ResourceDesc {
    uint64_t sms;
    unsigned alignment;
    int has_sms, has_wq_config;
    WorkqueueConfig wq_config;
} ResourceDesc;
typedef struct GreenCtx {
    Context *ctx;
    ResourceDesc res;
} GreenCtx;

static atomic_uint g_splits; /* split instances: resources of one may share a descriptor */

static int sm_total(void) { return g_block_threads < 64 ? g_block_threads : 64; }
static uint64_t sms_all(void) { return sm_total() >= 64 ? ~0ull : (1ull << sm_total()) - 1; }
static unsigned popcount(uint64_t m) { return (unsigned)__builtin_popcountll(m); }

static void tag_write(DevResource *r, uint32_t split, uint64_t sms) {
    ResourceTag t = {TAG_MAGIC, split, sms};
    memcpy(r->internal, &t, sizeof t);
}

/* The tag of an SM resource this driver filled, or INVALID_RESOURCE_TYPE (another type, or forged). */
static CUresult sm_tag(const DevResource *r, ResourceTag *t) {
    if (!r) return CUDA_ERROR_INVALID_VALUE;
    memcpy(t, r->internal, sizeof *t);
    if (r->type != RES_SM || t->magic != TAG_MAGIC || (t->sms & ~sms_all())) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    return CUDA_SUCCESS;
}

static void sm_fill(DevResource *r, uint32_t split, uint64_t sms, unsigned alignment, unsigned flags) {
    memset(r, 0, sizeof *r);
    r->type = RES_SM;
    tag_write(r, split, sms);
    r->u.sm.smCount = popcount(sms);
    r->u.sm.minSmPartitionSize = SM_PARTITION_DEFAULT;
    r->u.sm.smCoscheduledAlignment = alignment;
    r->u.sm.flags = flags;
}

/* A remainder: the SMs no group took, or an INVALID resource when there are none. */
static void remainder_fill(DevResource *r, uint32_t split, uint64_t sms) {
    if (!r) return;
    if (sms) {
        sm_fill(r, split, sms, SM_PARTITION_DEFAULT, 0);
    } else {
        memset(r, 0, sizeof *r);
    }
}

/* The resource of one type that a context (whole device, or a green context's share) has. */
static CUresult resource_of(const GreenCtx *g, DevResource *r, int type) {
    if (!r) return CUDA_ERROR_INVALID_VALUE;
    switch (type) {
    case RES_SM:
        sm_fill(r, 0, g ? g->res.sms : sms_all(), g ? g->res.alignment : SM_PARTITION_DEFAULT, 0);
        return CUDA_SUCCESS;
    case RES_WORKQUEUE_CONFIG:
        memset(r, 0, sizeof *r);
        r->type = RES_WORKQUEUE_CONFIG;
        tag_write(r, 0, 0);
        r->u.wq_config = g && g->res.has_wq_config ? g->res.wq_config
                                                   : (WorkqueueConfig){0, WORKQUEUE_CONCURRENCY_DEFAULT, 0};
        return CUDA_SUCCESS;
    case RES_WORKQUEUE:
        memset(r, 0, sizeof *r);
        r->type = RES_WORKQUEUE;
        tag_write(r, 0, 0);
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    }
}

API CUresult cuDeviceGetDevResource(CUdevice dev, void *resource, int type) {
    ENTER(cuDeviceGetDevResource);
    NEED_INIT();
    NEED_DEVICE(dev);
    return resource_of(NULL, resource, type);
}

API CUresult cuCtxGetDevResource(void *hctx, void *resource, int type) {
    ENTER(cuCtxGetDevResource);
    NEED_INIT();
    Context *c = hctx;
    if (!c || !context_handle_ok(c)) return CUDA_ERROR_INVALID_CONTEXT;
    return resource_of(c->green, resource, type);
}

static CUresult green_get(void *h, GreenCtx **out) {
    NEED_INIT();
    if (!h || !handle_ok(h, H_GREEN_CONTEXT)) return CUDA_ERROR_INVALID_HANDLE;
    *out = h;
    return CUDA_SUCCESS;
}

API CUresult cuGreenCtxGetDevResource(void *hgreen, void *resource, int type) {
    ENTER(cuGreenCtxGetDevResource);
    GreenCtx *g;
    TRY(green_get(hgreen, &g));
    return resource_of(g, resource, type);
}

/* A stream handle's stream; the special handles (NULL, legacy, per-thread) need a current context, whose null
 * stream they are, a created stream does not. */
static CUresult stream_of(void *h, Stream **out) {
    NEED_INIT();
    if (h && handle_ok(h, H_STREAM)) return stream_resolve(h, NULL, out);
    NEED_CONTEXT(ctx);
    return stream_resolve(h, ctx, out);
}

API CUresult cuStreamGetDevResource(void *hstream, void *resource, int type) {
    ENTER(cuStreamGetDevResource);
    Stream *s;
    TRY(stream_of(hstream, &s));
    if (type == RES_WORKQUEUE_CONFIG || type == RES_WORKQUEUE) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    return resource_of(s->ctx->green, resource, type);
}

/* Takes up to `windows` aligned windows of c SMs lying wholly in *avail, lowest first; returns their SMs. */
static uint64_t take_windows(uint64_t *avail, unsigned c, unsigned windows) {
    uint64_t taken = 0;
    for (unsigned lo = 0; windows && lo + c <= (unsigned)sm_total(); lo += c) {
        uint64_t w = (c >= 64 ? ~0ull : ((1ull << c) - 1)) << lo;
        if ((*avail & w) == w) taken |= w, *avail &= ~w, windows--;
    }
    return taken;
}

/* Takes the n lowest SMs of *avail. */
static uint64_t take_any(uint64_t *avail, unsigned n) {
    uint64_t taken = 0;
    for (int i = 0; n && i < sm_total(); i++)
        if (*avail >> i & 1) taken |= 1ull << i, *avail &= ~(1ull << i), n--;
    return taken;
}

static unsigned windows_in(uint64_t avail, unsigned c) {
    uint64_t copy = avail;
    return popcount(take_windows(&copy, c, 64)) / c;
}

API CUresult cuDevSmResourceSplitByCount(void *result, unsigned *nbGroups, const void *input, void *remainder,
                                         unsigned flags, unsigned minCount) {
    ENTER(cuDevSmResourceSplitByCount);
    NEED_INIT();
    ResourceTag in;
    TRY(sm_tag(input, &in));
    if (!nbGroups || (flags & ~(unsigned)(SPLIT_IGNORE_SM_COSCHEDULING | SPLIT_MAX_POTENTIAL_CLUSTER_SIZE)) ||
        minCount > popcount(in.sms) || (result && *nbGroups == 0))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned align = flags & SPLIT_IGNORE_SM_COSCHEDULING ? SM_PARTITION_IGNORING_COSCHEDULING : SM_PARTITION_DEFAULT;
    unsigned size = minCount <= align ? align : (minCount + align - 1) / align * align; /* rounded up */
    unsigned possible = windows_in(in.sms, align) / (size / align);
    if (!result) {
        *nbGroups = possible;
        return CUDA_SUCCESS;
    }
    unsigned n = *nbGroups < possible ? *nbGroups : possible;
    if (n == 0) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    uint32_t split = atomic_fetch_add(&g_splits, 1) + 1;
    uint64_t avail = in.sms;
    for (unsigned i = 0; i < n; i++)
        sm_fill((DevResource *)result + i, split, take_windows(&avail, align, size / align), align, 0);
    remainder_fill(remainder, split, avail);
    *nbGroups = n;
    return CUDA_SUCCESS;
}

/* One group of a structured split taken from *avail: its SMs, or an error (*sms_out 0 when discovery found none). */
static CUresult take_group(GroupParams *p, uint64_t *avail, unsigned input_count, uint64_t *sms_out, unsigned *align) {
    for (int i = 0; i < 11; i++)
        if (p->reserved[i]) return CUDA_ERROR_INVALID_VALUE;
    if (p->flags & ~(unsigned)(GROUP_BACKFILL | GROUP_LOCALITY_DOMAIN | GROUP_LOCALITY_SUPPLEMENTAL))
        return CUDA_ERROR_INVALID_VALUE;
    if (p->flags & (GROUP_LOCALITY_DOMAIN | GROUP_LOCALITY_SUPPLEMENTAL))
        return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION; /* the device has no locality domains */
    unsigned c = p->coscheduledSmCount ? p->coscheduledSmCount : SM_PARTITION_DEFAULT;
    if (c % 2 || c > COSCHEDULED_MAX || (p->smCount && (p->smCount < 2 || p->smCount % 2 || p->smCount > input_count)))
        return CUDA_ERROR_INVALID_VALUE;
    int backfill = p->flags & GROUP_BACKFILL;
    *align = c;
    if (p->smCount == 0) { /* discovery: every whole window left */
        *sms_out = take_windows(avail, c, 64);
        p->smCount = popcount(*sms_out);
        return CUDA_SUCCESS;
    }
    if (p->smCount < c || (!backfill && p->smCount % c)) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    uint64_t before = *avail, sms = take_windows(avail, c, p->smCount / c);
    if (backfill && sms) sms |= take_any(avail, p->smCount - popcount(sms));
    if (popcount(sms) != p->smCount) {
        *avail = before;
        return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    }
    *sms_out = sms;
    return CUDA_SUCCESS;
}

API CUresult cuDevSmResourceSplit(void *result, unsigned nbGroups, const void *input, void *remainder, unsigned flags,
                                  void *groupParams) {
    ENTER(cuDevSmResourceSplit);
    NEED_INIT();
    ResourceTag in;
    TRY(sm_tag(input, &in));
    if (nbGroups == 0 || flags || !groupParams || nbGroups > 64) return CUDA_ERROR_INVALID_VALUE;
    GroupParams *params = groupParams;
    uint64_t avail = in.sms, sms[64];
    unsigned align[64];
    for (unsigned i = 0; i < nbGroups; i++) {
        TRY(take_group(&params[i], &avail, popcount(in.sms), &sms[i], &align[i]));
        if (result && !sms[i]) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION; /* a result group is never empty */
    }
    uint32_t split = atomic_fetch_add(&g_splits, 1) + 1;
    for (unsigned i = 0; result && i < nbGroups; i++)
        sm_fill((DevResource *)result + i, split, sms[i], align[i], params[i].flags & GROUP_BACKFILL);
    remainder_fill(remainder, split, avail);
    return CUDA_SUCCESS;
}

API CUresult cuDevResourceGenerateDesc(void **phDesc, void *resources, unsigned nbResources) {
    ENTER(cuDevResourceGenerateDesc);
    NEED_INIT();
    if (!phDesc || !resources || nbResources == 0) return CUDA_ERROR_INVALID_VALUE;
    ResourceDesc d = {0};
    uint32_t split = 0;
    for (unsigned i = 0; i < nbResources; i++) {
        const DevResource *r = (const DevResource *)resources + i;
        if (r->type == RES_WORKQUEUE_CONFIG) {
            const WorkqueueConfig *w = &r->u.wq_config;
            if (d.has_wq_config) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
            if (w->device != 0) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION; /* one device */
            if (w->wqConcurrencyLimit == 0 || w->sharingScope < 0 || w->sharingScope >= WORKQUEUE_SCOPES)
                return CUDA_ERROR_INVALID_VALUE;
            d.has_wq_config = 1, d.wq_config = *w;
            continue;
        }
        if (r->type == RES_WORKQUEUE) continue; /* the device's shared workqueues: what every context uses */
        ResourceTag t;
        TRY(sm_tag(r, &t));
        if (d.has_sms && (t.split != split || t.split == 0 || r->u.sm.smCoscheduledAlignment != d.alignment ||
                          (t.sms & d.sms)))
            return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION; /* SM resources of one split instance only */
        if (!t.sms) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
        d.has_sms = 1, d.sms |= t.sms, split = t.split, d.alignment = r->u.sm.smCoscheduledAlignment;
    }
    if (!d.has_sms) d.sms = sms_all(), d.alignment = SM_PARTITION_DEFAULT; /* a workqueue alone: every SM */
    ResourceDesc *out = malloc(sizeof *out);
    if (!out) return CUDA_ERROR_OUT_OF_MEMORY;
    *out = d;
    handle_add(out, H_RESOURCE_DESC); /* valid for the life of the process, as documented */
    *phDesc = out;
    return CUDA_SUCCESS;
}

API CUresult cuGreenCtxCreate(void **phCtx, void *desc, CUdevice dev, unsigned flags) {
    ENTER(cuGreenCtxCreate);
    NEED_INIT();
    if (!phCtx || (flags & ~GREEN_CTX_DEFAULT_STREAM)) return CUDA_ERROR_INVALID_VALUE;
    NEED_DEVICE(dev);
    if (!desc || !handle_ok(desc, H_RESOURCE_DESC)) return CUDA_ERROR_INVALID_HANDLE;
    GreenCtx *g = calloc(1, sizeof *g);
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    void *primary;
    CUresult rc = cuDevicePrimaryCtxRetain(&primary, dev); /* held while the green context lives */
    if (rc != CUDA_SUCCESS || !(g->ctx = context_new(0))) {
        if (rc == CUDA_SUCCESS) cuDevicePrimaryCtxRelease_v2(dev);
        free(g);
        return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_OUT_OF_MEMORY;
    }
    g->res = *(const ResourceDesc *)desc;
    g->ctx->green = g;
    handle_add(g, H_GREEN_CONTEXT);
    *phCtx = g;
    return CUDA_SUCCESS;
}

API CUresult cuGreenCtxDestroy(void *hgreen) {
    ENTER(cuGreenCtxDestroy);
    GreenCtx *g;
    TRY(green_get(hgreen, &g));
    handle_remove(g);
    context_destroy(g->ctx);
    cuDevicePrimaryCtxRelease_v2(0);
    return CUDA_SUCCESS; /* the struct is kept, as a context's is: a stale handle is detected, never followed */
}

API CUresult cuCtxFromGreenCtx(void **pContext, void *hgreen) {
    ENTER(cuCtxFromGreenCtx);
    GreenCtx *g;
    TRY(green_get(hgreen, &g));
    if (!pContext) return CUDA_ERROR_INVALID_VALUE;
    *pContext = g->ctx;
    return CUDA_SUCCESS;
}

API CUresult cuGreenCtxGetId(void *hgreen, unsigned long long *id) {
    ENTER(cuGreenCtxGetId);
    NEED_INIT();
    GreenCtx *g = hgreen;
    if (!g) { /* the current context's green context */
        Context *c = current_context();
        if (!c || !c->green) return CUDA_ERROR_INVALID_CONTEXT;
        g = c->green;
    }
    TRY(green_get(g, &g));
    if (!id) return CUDA_ERROR_INVALID_VALUE;
    *id = g->ctx->id;
    return CUDA_SUCCESS;
}

API CUresult cuGreenCtxStreamCreate(void **phStream, void *hgreen, unsigned flags, int priority) {
    ENTER(cuGreenCtxStreamCreate);
    GreenCtx *g;
    TRY(green_get(hgreen, &g));
    if (!phStream || flags != STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE; /* non-blocking is required */
    TRY(context_sticky(g->ctx));
    priority = priority > 0 ? 0 : priority < -5 ? -5 : priority; /* clamped as cuStreamCreateWithPriority's */
    Stream *s = stream_new(g->ctx, flags, priority, 0);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    *phStream = s;
    return CUDA_SUCCESS;
}

API CUresult cuStreamGetGreenCtx(void *hstream, void **phCtx) {
    ENTER(cuStreamGetGreenCtx);
    Stream *s;
    TRY(stream_of(hstream, &s));
    if (!phCtx) return CUDA_ERROR_INVALID_VALUE;
    *phCtx = s->ctx->green;
    return CUDA_SUCCESS;
}

API CUresult cuStreamGetCtx_v2(void *hstream, void **pCtx, void **pGreenCtx) {
    ENTER(cuStreamGetCtx_v2);
    Stream *s;
    TRY(stream_of(hstream, &s));
    if (!pCtx || !pGreenCtx) return CUDA_ERROR_INVALID_VALUE;
    GreenCtx *g = s->ctx->green;
    *pGreenCtx = g;
    *pCtx = g ? context_primary() : s->ctx; /* a green context's stream: the device's primary context */
    return CUDA_SUCCESS;
}
