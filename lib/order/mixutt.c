/* mixutt.c - the utterance mixture: length-bucketed batches of whole
 * utterances drawn from several datasets in fixed proportions
 * (cxs_mix_utt_*, ctxshard.h says what it guarantees).
 *
 * An epoch's order (a plan) is built whole at its first use: the epoch's
 * items of every source (its stream of passes), put in length buckets,
 * each bucket's sources interleaved by the Sainte-Lague rule, cut
 * greedily under the frame budget, the batches shuffled -- in block order
 * window by window (mix.h); then the rounds' batches dealt to the ranks
 * (ranks_build).  The shares and quotas are cxs_mix's (mix.h). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"
#include "blocks.h"
#include "dataset_internal.h"
#include "fault.h"
#include "mix.h"
#include "plancache.h"
#include "samplers.h"

#define CXS_MIX_UTT_MAX_RANKS (1u << 20) /* ranks_build: O(w) a round */
#define HIST_MAX (1u << 22) /* lengths above it share the histogram's last bin */

typedef unsigned __int128 u128;

typedef struct uplan {
    uint64_t epoch;
    int refs;        /* users, under the mixture's lock (plancache.h) */
    uint64_t nb;     /* global batches (all of them: drop_last cuts per rank) */
    uint64_t *start; /* [nb + 1] into utt/src */
    uint64_t *utt;   /* [E] in batch order, grouped by source inside a batch */
    uint32_t *src;
    /* world_size > 1: this rank's batches (length of them) */
    uint64_t *rg;  /* the global batch served */
    uint8_t *rrep; /* 1: a repeat (the final round's padding) */
    /* block order: window k's batches are [wb[k], wb[k+1]); the groups of
     * blocks the epoch reads, their byte ranges in rng (mix.h) */
    uint64_t nw, *wb;
    cxs_mix_ugroup *grp;
    uint64_t ngrp;
    cxs_mix_urange *rng;
} uplan;

struct cxs_mix_utt {
    uint32_t n;
    cxs_mix_utt_opts o;
    const cxs_dataset **ds;
    uint64_t *size, *quota, E, w;
    double *share;
    uint32_t **len; /* per source: every utterance's frames */
    uint32_t nb;    /* buckets */
    uint64_t bounds[1024];
    uint32_t max_batch;
    uint64_t max_frames;
    cxs_block_sched *bs; /* block order: per source (ds NULL: a source never taken), or NULL */
    uint32_t R;          /* block order: blocks a group */
    uint64_t kest;       /* the windows an epoch is expected to have (1: no block order) */
    pthread_mutex_t mu; /* the plans' cache */
    cxs_plan_cache cache;
};

void cxs_mix_utt_opts_init(cxs_mix_utt_opts *o) { memset(o, 0, sizeof *o); }

static void plan_free(void *plan) {
    uplan *p = plan;
    if (!p) return;
    free(p->start), free(p->utt), free(p->src), free(p->rg), free(p->rrep);
    free(p->wb), free(p->grp), free(p->rng);
    free(p);
}

void cxs_mix_utt_free(cxs_mix_utt *m) {
    if (!m) return;
    cxs_plan_cache_clear(&m->cache, plan_free);
    for (uint32_t i = 0; m->bs && i < m->n; i++) cxs_block_sched_destroy(&m->bs[i]);
    free(m->bs);
    for (uint32_t i = 0; m->len && i < m->n; i++) free(m->len[i]);
    free(m->len);
    free(m->ds), free(m->size), free(m->quota), free(m->share);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

typedef struct len_arg {
    const cxs_dataset *ds;
    uint32_t *len;
    uint64_t longest, longest_u, shortest, over, budget;
} len_arg;

/* In a recovery region: it reads INDEX from the mapping. */
static int read_lengths(void *p) {
    len_arg *a = p;
    const cxs_dataset *ds = a->ds;
    for (uint32_t si = 0; si < ds->meta.num_shards; si++) {
        const shard *sh = &ds->shards[si];
        uint64_t prev = cxs_index_at(sh, 0);
        for (uint64_t lu = 0; lu < sh->meta.num_utterances; lu++) {
            uint64_t nx = cxs_index_at(sh, lu + 1), T = nx - prev;
            prev = nx;
            if (T > UINT32_MAX) return CXS_E_RANGE;
            a->len[sh->u_start + lu] = (uint32_t)T;
            if (T > a->longest) a->longest = T, a->longest_u = sh->u_start + lu;
            if (T < a->shortest) a->shortest = T;
            if (T > a->budget) a->over++;
        }
    }
    return 0;
}

/* Source i's lengths into m->len[i]; the longest and shortest of all. */
static int lengths(cxs_mix_utt *m, uint32_t i, uint64_t *longest, uint64_t *shortest,
                   cxs_diag *d) {
    const cxs_dataset *ds = m->ds[i];
    const uint64_t U = ds->meta.num_utterances;
    int rc = cxs_index_check_all(ds, d);
    if (rc) return rc;
    if (!(m->len[i] = malloc((U ? U : 1) * sizeof **m->len)))
        return cxs_diagf(d, -ENOMEM, "utterance mixture: out of memory");
    len_arg a = {ds, m->len[i], 0, 0, UINT64_MAX, 0, m->o.frame_budget};
    cxs_fault f = {0, 0};
    rc = cxs_fault_run(ds, read_lengths, &a, &f);
    if (rc == CXS_E_TRUNCATED)
        return cxs_diagf(d, rc, "utterance mixture: %s: truncated since the dataset was opened "
                         "(INDEX byte %llu can no longer be read)", ds->shards[f.shard].path,
                         (unsigned long long)f.offset);
    if (rc)
        return cxs_diagf(d, rc, "utterance mixture: source %u (%s) has an utterance of more "
                         "than 2^32 frames", i, ds->manifest_path);
    if (a.over && !m->o.long_alone) {
        cxs_utterance ut;
        cxs_dataset_utterance(ds, a.longest_u, &ut);
        int idl = ut.id_len > 200 ? 200 : (int)ut.id_len;
        return cxs_diagf(d, CXS_E_RANGE,
                         "utterance mixture: source %u (%s): %llu utterance%s longer than "
                         "frame_budget %llu (the longest, %.*s, has %llu frames): raise the "
                         "budget, or serve them alone (long_alone)",
                         i, ds->manifest_path, (unsigned long long)a.over,
                         a.over == 1 ? " is" : "s are", (unsigned long long)m->o.frame_budget,
                         idl, ut.id, (unsigned long long)a.longest);
    }
    if (a.longest > *longest) *longest = a.longest;
    if (U && a.shortest < *shortest) *shortest = a.shortest;
    return 0;
}

/* The length buckets: their number; with CXS_MIX_STRATIFY_LENGTH, bounds
 * at quantiles of the epoch's lengths, each source's utterances weighing
 * q_i / U_i (a histogram; lengths above HIST_MAX counted in its last bin).
 * (CXS_MIX_STRATIFY_SHARES buckets each epoch's items of a source by their
 * rank in length among them: plan_build.) */
static int bucket_bounds(cxs_mix_utt *m, uint64_t longest, cxs_diag *d) {
    uint32_t nb = m->o.buckets;
    double frames = 0;
    for (uint32_t i = 0; i < m->n; i++) {
        const uint64_t U = m->size[i];
        if (!U || !m->quota[i]) continue;
        uint64_t sum = 0;
        for (uint64_t u = 0; u < U; u++) sum += m->len[i][u];
        frames += (double)sum / (double)U * (double)m->quota[i];
    }
    if (m->o.kind != CXS_UTT_SHUFFLE) nb = 1;
    if (!nb) { /* as the utterance sampler: about two full batches a bucket */
        double b = frames / (double)m->kest / 2 / (double)m->o.frame_budget;
        nb = b < 1 ? 1 : b > CXS_UTT_DEFAULT_BUCKETS ? CXS_UTT_DEFAULT_BUCKETS : (uint32_t)b;
    }
    m->nb = 1;
    if (nb == 1) return 0;
    if (m->o.stratify == CXS_MIX_STRATIFY_SHARES) { /* quantiles of each source's own */
        m->nb = nb;
        return 0;
    }
    const uint64_t hmax = longest < HIST_MAX ? longest : HIST_MAX;
    double *hist = calloc(hmax + 1, sizeof *hist), total = 0;
    if (!hist) return cxs_diagf(d, -ENOMEM, "utterance mixture: out of memory");
    for (uint32_t i = 0; i < m->n; i++) {
        const uint64_t U = m->size[i];
        if (!U || !m->quota[i]) continue;
        const double wt = (double)m->quota[i] / (double)U;
        for (uint64_t u = 0; u < U; u++) {
            uint64_t T = m->len[i][u];
            hist[T < hmax ? T : hmax] += wt;
        }
        total += (double)m->quota[i];
    }
    /* bound k: the first length whose cumulative weight reaches k/nb of
     * the total (a length's bucket is the count of bounds <= it) */
    double acc = 0;
    uint32_t k = 1;
    for (uint64_t t = 0; t <= hmax && k < nb; t++) {
        if (acc >= total * k / nb && acc > 0 && (m->nb == 1 || m->bounds[m->nb - 2] < t)) {
            m->bounds[m->nb - 1] = t;
            m->nb++;
            while (k < nb && acc >= total * k / nb) k++;
        }
        acc += hist[t];
    }
    free(hist);
    return 0;
}

static uint32_t bucket_of(const cxs_mix_utt *m, uint64_t T) {
    uint32_t lo = 0, hi = m->nb - 1; /* the count of bounds <= T */
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (m->bounds[mid] <= T) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Block order: every source's schedule, the budget shared in proportion
 * to the bytes its quota reads an epoch (so that its groups last about as
 * long as the others'), blocks of its share / (R + 1); and the windows an
 * epoch is expected to have (m->kest: two a group of the source reading
 * the most groups, as plan_build cuts them). */
static int block_scheds(cxs_mix_utt *m, cxs_diag *d) {
    const uint32_t R = m->o.blocks ? m->o.blocks : 8;
    const double M = (double)m->o.memory_bytes;
    double rate[CXS_MIX_MAX_SOURCES], total = 0, groups = 1;
    m->R = R;
    for (uint32_t i = 0; i < m->n; i++) {
        const cxs_dataset *ds = m->ds[i];
        const uint64_t U = m->size[i];
        rate[i] = 0;
        if (!U || !m->quota[i]) continue;
        const double rows = (double)ds->meta.num_frames + (double)U * ds->meta.guard;
        rate[i] = (double)m->quota[i] * rows / (double)U * (double)ds->row_bytes;
        total += rate[i];
    }
    if (!(m->bs = calloc(m->n, sizeof *m->bs)))
        return cxs_diagf(d, -ENOMEM, "utterance mixture: out of memory");
    for (uint32_t i = 0; i < m->n; i++) {
        const cxs_dataset *ds = m->ds[i];
        if (rate[i] <= 0) continue;
        const double share = M * rate[i] / total, r = share / (R + 1.0) / (double)ds->row_bytes;
        const uint64_t rows = r >= 9e18 ? (uint64_t)9e18 : (uint64_t)r;
        cxs_diag bd;
        int rc = cxs_block_sched_init(&m->bs[i], ds, cxs_mix64(m->o.seed ^ cxs_mix64(0x626c6bull + i)),
                                      rows, ds->meta.guard, R, &bd);
        if (rc == CXS_E_RANGE) { /* the least budget whose shares hold every longest */
            double need = 0;
            for (uint32_t j = 0; j < m->n; j++) {
                if (rate[j] <= 0) continue;
                const double v = (double)(m->ds[j]->max_len + m->ds[j]->meta.guard) *
                                 (double)m->ds[j]->row_bytes * (R + 1.0) * total / rate[j];
                if (v > need) need = v;
            }
            return cxs_diagf(d, rc, "utterance mixture: source %u (%s), with its share of the "
                             "memory budget (%.0f bytes): %s; memory_bytes of at least %.0f "
                             "would do", i, ds->manifest_path, share, bd.message, need + 1);
        }
        if (rc) return cxs_diagf(d, rc, "utterance mixture: source %u (%s): %s", i,
                                 ds->manifest_path, bd.message);
        const double g = rate[i] / ((double)rows * R * (double)ds->row_bytes);
        if (g > groups) groups = g;
    }
    m->kest = 2 * (uint64_t)ceil(groups);
    return 0;
}

int cxs_mix_utt_create(const cxs_dataset *const *ds, uint32_t n, const cxs_mix_utt_opts *opts,
                       cxs_mix_utt **out, cxs_diag *d) {
    if (!ds || !opts || !out)
        return cxs_diagf(d, CXS_E_INVALID,
                         "utterance mixture: datasets, options and out must not be NULL");
    int rc = CXS_OPTS_CHECK(opts, "cxs_mix_utt_opts", d);
    if (rc) return rc;
    if (!n || n > CXS_MIX_MAX_SOURCES)
        return cxs_diagf(d, CXS_E_INVALID, "utterance mixture: %u sources (1 to %u)", n,
                         CXS_MIX_MAX_SOURCES);
    if (opts->kind > CXS_UTT_SHUFFLE)
        return cxs_diagf(d, CXS_E_INVALID, "utterance mixture: kind %u (CXS_UTT_SHUFFLE or "
                         "CXS_UTT_SEQUENTIAL)", opts->kind);
    if (!opts->frame_budget)
        return cxs_diagf(d, CXS_E_INVALID, "utterance mixture: frame_budget (padded frames a "
                         "batch may hold) is required");
    if (opts->buckets > 1024)
        return cxs_diagf(d, CXS_E_INVALID, "utterance mixture: buckets %u is above 1024",
                         opts->buckets);
    const uint64_t w = opts->world_size ? opts->world_size : 1;
    if (opts->rank >= w)
        return cxs_diagf(d, CXS_E_INVALID, "utterance mixture: rank %u of world_size %llu",
                         opts->rank, (unsigned long long)w);
    if (opts->stratify > CXS_MIX_STRATIFY_LENGTH)
        return cxs_diagf(d, CXS_E_INVALID, "utterance mixture: stratify %u (CXS_MIX_STRATIFY_"
                         "SHARES or CXS_MIX_STRATIFY_LENGTH)", opts->stratify);
    if (opts->drop_last > 1 || opts->long_alone > 1)
        return cxs_diagf(d, CXS_E_INVALID, "utterance mixture: drop_last and long_alone are 0 "
                         "or 1");
    if (opts->memory_bytes && opts->kind != CXS_UTT_SHUFFLE)
        return cxs_diagf(d, CXS_E_INVALID, "utterance mixture: block order (memory_bytes) needs "
                         "the shuffled kind (CXS_UTT_SHUFFLE)");
    if (opts->blocks > 1024 || (opts->blocks && !opts->memory_bytes))
        return cxs_diagf(d, CXS_E_INVALID, opts->blocks > 1024
                         ? "utterance mixture: blocks %u is above 1024"
                         : "utterance mixture: blocks (%u) applies to block order (memory_bytes) "
                           "only", opts->blocks);
    if (w > CXS_MIX_UTT_MAX_RANKS)
        return cxs_diagf(d, CXS_E_INVALID, "utterance mixture: world_size %llu (at most 2^20)",
                         (unsigned long long)w);
    for (uint32_t i = 0; i < n; i++)
        if (!ds[i]) return cxs_diagf(d, CXS_E_INVALID, "utterance mixture: source %u is NULL", i);
    cxs_mix_utt *m = calloc(1, sizeof *m);
    if (!m) return cxs_diagf(d, -ENOMEM, "utterance mixture: out of memory");
    pthread_mutex_init(&m->mu, NULL);
    m->n = n;
    m->kest = 1;
    m->o = *opts;
    m->w = w;
    m->ds = malloc(n * sizeof *m->ds);
    m->size = malloc(n * sizeof *m->size);
    m->quota = malloc(n * sizeof *m->quota);
    m->share = malloc(n * sizeof *m->share);
    m->len = calloc(n, sizeof *m->len);
    if (!m->ds || !m->size || !m->quota || !m->share || !m->len) {
        cxs_mix_utt_free(m);
        return cxs_diagf(d, -ENOMEM, "utterance mixture: out of memory");
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        m->ds[i] = ds[i];
        m->size[i] = ds[i]->meta.num_utterances;
        total += m->size[i];
    }
    m->E = opts->epoch_size ? opts->epoch_size : total;
    if (m->E > CXS_MIX_UTT_MAX_EPOCH) {
        cxs_mix_utt_free(m);
        return cxs_diagf(d, CXS_E_INVALID, "utterance mixture: an epoch of %llu utterances (at "
                         "most 2^40: an epoch's order is built whole)", (unsigned long long)
                         (opts->epoch_size ? opts->epoch_size : total));
    }
    rc = cxs_mix_apportion(n, ds, m->size, opts->weights, opts->temperature, m->E, "utterances",
                           m->share, m->quota, d);
    m->o.weights = NULL; /* the caller's may go */
    if (!rc && !m->E) rc = cxs_diagf(d, CXS_E_INVALID, "utterance mixture: the epoch has no "
                                     "utterances");
    uint64_t longest = 0, shortest = UINT64_MAX;
    for (uint32_t i = 0; !rc && i < n; i++) rc = lengths(m, i, &longest, &shortest, d);
    if (!rc && opts->memory_bytes) rc = block_scheds(m, d);
    if (!rc) rc = bucket_bounds(m, longest, d);
    if (!rc) {
        const uint64_t B = opts->frame_budget;
        uint64_t mb = opts->max_batch ? opts->max_batch : B / (shortest ? shortest : 1);
        if (mb > m->E) mb = m->E;
        if (mb < 1) mb = 1;
        m->max_batch = mb > UINT32_MAX ? UINT32_MAX : (uint32_t)mb;
        /* (a budget far above what a batch can hold sizes no buffer) */
        u128 most = (u128)m->max_batch * longest;
        m->max_frames = most < B ? (uint64_t)most : B;
        if (longest > m->max_frames) m->max_frames = longest;
    }
    if (rc) {
        cxs_mix_utt_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

uint32_t cxs_mix_utt_sources(const cxs_mix_utt *m) { return m ? m->n : 0; }
const cxs_dataset *cxs_mix_utt_dataset(const cxs_mix_utt *m, uint32_t i) {
    return m && i < m->n ? m->ds[i] : NULL;
}
double cxs_mix_utt_share(const cxs_mix_utt *m, uint32_t i) {
    return m && i < m->n ? m->share[i] : 0;
}
uint64_t cxs_mix_utt_quota(const cxs_mix_utt *m, uint32_t i) {
    return m && i < m->n ? m->quota[i] : 0;
}
uint64_t cxs_mix_utt_epoch_size(const cxs_mix_utt *m) { return m ? m->E : 0; }
uint32_t cxs_mix_utt_max_batch(const cxs_mix_utt *m) { return m ? m->max_batch : 0; }
uint64_t cxs_mix_utt_max_frames(const cxs_mix_utt *m) { return m ? m->max_frames : 0; }

static uint64_t rng_next(uint64_t *st) { return cxs_mix64(*st += 0x9e3779b97f4a7c15ull); }

/* Uniform in [0, n), n > 0 (Lemire's multiply, rejection for exactness). */
static uint64_t rng_below(uint64_t *st, uint64_t n) {
    for (;;) {
        u128 x = (u128)rng_next(st) * n;
        uint64_t lo = (uint64_t)x;
        if (lo >= n || lo >= (0 - n) % n) return (uint64_t)(x >> 64);
    }
}

/* Whether source a's k-th point comes before source b's l-th in a merge
 * of counts c (Sainte-Lague: (2k+1)/(2 c_a) < (2l+1)/(2 c_b), ties to
 * the lower source). */
static int before(const uint64_t *c, uint32_t a, uint64_t k, uint32_t b, uint64_t l) {
    u128 x = (u128)(2 * k + 1) * c[b], y = (u128)(2 * l + 1) * c[a];
    return x < y || (x == y && a < b);
}

static void counts(const cxs_mix_utt *m, const uplan *p, uint64_t *global, uint64_t *length);
static int ranks_build(const cxs_mix_utt *m, uplan *p);

/* Source i's items of an epoch, in stream order: item epoch*q + k of its
 * endless stream of passes (128 bits: epochs are 64). */
typedef struct item_gen {
    const cxs_mix_utt *m;
    uint32_t i;
    uint64_t epoch;
    int shuffle;
    uint64_t pass; /* the permutation's, UINT64_MAX: none yet */
    cxs_perm pm;
} item_gen;

static uint64_t gen_item(item_gen *g, uint64_t k) {
    const uint64_t U = g->m->size[g->i], q = g->m->quota[g->i];
    const u128 s = (u128)g->epoch * q + k;
    const uint64_t pass = (uint64_t)(s / U), j = (uint64_t)(s % U);
    if (!g->shuffle) return j;
    if (pass != g->pass) {
        cxs_perm_init(&g->pm, U, cxs_mix64(g->m->o.seed ^ cxs_mix64(0x757474ull + g->i)), pass);
        g->pass = pass;
    }
    return cxs_perm_at(&g->pm, j);
}

typedef struct lenpos {
    uint64_t T, k;
} lenpos;

static int cmp_lenpos(const void *a, const void *b) { /* by length, then stream position */
    const lenpos *x = a, *y = b;
    if (x->T != y->T) return x->T < y->T ? -1 : 1;
    return (x->k > y->k) - (x->k < y->k);
}

/* Block order: the groups an epoch reads, growing. */
typedef struct glist {
    cxs_mix_ugroup *g;
    uint64_t n, cap;
    cxs_mix_urange *r;
    uint64_t nr, rcap;
} glist;

static int grow(void **a, uint64_t *cap, uint64_t need, size_t e) {
    if (need <= *cap) return 0;
    uint64_t c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *b = realloc(*a, c * e);
    if (!b) return -ENOMEM;
    *a = b, *cap = c;
    return 0;
}

/* Source i's items of an epoch in block order into it[0 .. q): its stream
 * of passes, pass p the block schedule's plan of epoch p read group by
 * group (R blocks of the plan's order each), a group's utterances in a
 * seeded order; each group the items enter is appended to gl with the
 * byte ranges of its blocks (first and last: the epoch items that read
 * it, made windows by plan_build).  A source whose pass is one group
 * reads the same blocks every pass: one group for the epoch. */
static int block_items(const cxs_mix_utt *m, uint32_t i, uint64_t epoch, uint64_t *it, glist *gl) {
    cxs_block_sched *bs = &m->bs[i];
    const uint64_t U = m->size[i], q = m->quota[i], R = m->R;
    const u128 s0 = (u128)epoch * q;
    uint64_t pass = (uint64_t)(s0 / U), j = (uint64_t)(s0 % U), k = 0;
    uint64_t *pc = NULL, *bc = malloc((R + 1) * sizeof *bc);
    int rc = bc ? 0 : -ENOMEM, whole = 0;
    while (!rc && k < q) {
        cxs_block_plan *bp;
        if ((rc = cxs_block_plan_get(bs, pass, &bp))) break;
        const uint64_t G = (bp->nblocks + R - 1) / R;
        uint64_t *npc = realloc(pc, (G + 1) * sizeof *pc);
        if (!npc) {
            cxs_block_plan_put(bs, bp);
            rc = -ENOMEM;
            break;
        }
        pc = npc;
        pc[0] = 0;
        for (uint64_t g = 0; g < G; g++) {
            pc[g + 1] = pc[g];
            for (uint64_t b = g * R; b < bp->nblocks && b < (g + 1) * R; b++)
                pc[g + 1] += bp->blk[b].u1 - bp->blk[b].u0;
        }
        uint64_t g = 0;
        while (g + 1 < G && pc[g + 1] <= j) g++;
        for (; g < G && k < q && !rc; g++) {
            const uint64_t b0 = g * R, nbk = (bp->nblocks - b0 < R ? bp->nblocks - b0 : R);
            bc[0] = 0;
            for (uint64_t b = 0; b < nbk; b++) bc[b + 1] = bc[b] + bp->blk[b0 + b].u1 - bp->blk[b0 + b].u0;
            const uint64_t c = bc[nbk], left = c - (j - pc[g]);
            const uint64_t last = k + (left < q - k ? left : q - k) - 1; /* the item it ends at */
            if (G == 1 && whole) {
                gl->g[gl->n - 1].last = last;
            } else {
                if ((rc = grow((void **)&gl->g, &gl->cap, gl->n + 1, sizeof *gl->g)) ||
                    (rc = grow((void **)&gl->r, &gl->rcap, gl->nr + nbk, sizeof *gl->r)))
                    break;
                cxs_mix_ugroup *ug = &gl->g[gl->n++];
                ug->src = i, ug->first = k, ug->last = last, ug->r0 = gl->nr;
                for (uint64_t b = 0; b < nbk; b++) {
                    const cxs_block *bk = &bp->blk[b0 + b];
                    if (bk->len) gl->r[gl->nr++] = (cxs_mix_urange){bk->shard, bk->off, bk->len};
                }
                ug->r1 = gl->nr;
                whole = G == 1;
            }
            cxs_perm pm;
            cxs_perm_init(&pm, c, cxs_mix64(m->o.seed ^ cxs_mix64(0x67727075ull + i) ^
                                            cxs_mix64(pass + 0x9e3779b97f4a7c15ull)), g);
            for (uint64_t t = j - pc[g]; t < c && k < q; t++, j++) {
                const uint64_t x = cxs_perm_at(&pm, t);
                const uint64_t in = cxs_last_le(bc, nbk, x); /* the block holding x */
                it[k++] = bp->blk[b0 + in].u0 + (x - bc[in]);
            }
        }
        cxs_block_plan_put(bs, bp);
        if (j >= U) pass++, j = 0;
    }
    free(pc), free(bc);
    return rc;
}

/* Window k (of K) of an epoch holds items floor(k q / K) .. of a source
 * of quota q; item x is in window floor(((x + 1) K - 1) / q). */
static uint64_t piece(uint64_t k, uint64_t q, uint64_t K) { return (uint64_t)((u128)k * q / K); }
static uint64_t window_of(uint64_t x, uint64_t q, uint64_t K) {
    return (uint64_t)(((u128)(x + 1) * K - 1) / q);
}

/* The plan of `epoch`: every source's items (its stream, or in block
 * order its groups' items), then window by window (one window without
 * block order) steps 1-4: each item's length bucket, the (bucket, source)
 * runs, each bucket's sources interleaved and cut greedily, the window's
 * batches shuffled. */
static int plan_build(const cxs_mix_utt *m, uint64_t epoch, uplan **out) {
    const uint32_t S = m->n, NB = m->nb;
    const uint64_t E = m->E, B = m->o.frame_budget, maxb = m->o.max_batch;
    const int shuffle = m->o.kind == CXS_UTT_SHUFFLE;
    uplan *p = calloc(1, sizeof *p);
    uint64_t *cnt = calloc((size_t)NB * S, sizeof *cnt);  /* [bucket][source] */
    uint64_t *at = malloc((size_t)NB * S * sizeof *at);   /* where each run is filled */
    uint64_t *take = malloc(S * sizeof *take);
    uint64_t *tu = malloc(E * sizeof *tu), *bs = malloc((E + 1) * sizeof *bs);
    uint32_t *ts = malloc(E * sizeof *ts);
    uint64_t *perm = malloc((E + 1) * sizeof *perm);
    uint16_t *bkt = malloc(E * sizeof *bkt);
    uint64_t *it = malloc(E * sizeof *it); /* source i's items at off_i */
    lenpos *rank = NULL;
    glist gl = {0};
    int rc = 0;
    if (p) {
        p->epoch = epoch;
        p->utt = malloc(E * sizeof *p->utt);
        p->src = malloc(E * sizeof *p->src);
    }
    if (!p || !cnt || !at || !take || !tu || !bs || !ts || !perm || !bkt || !it || !p->utt ||
        !p->src) {
        rc = -ENOMEM;
        goto out;
    }
    const int by_rank = m->o.stratify == CXS_MIX_STRATIFY_SHARES && NB > 1;
    uint64_t off = 0, qmax = 0, soff[CXS_MIX_MAX_SOURCES];
    for (uint32_t i = 0; i < S; i++) qmax = m->quota[i] > qmax ? m->quota[i] : qmax;
    if (by_rank && !(rank = malloc((qmax ? qmax : 1) * sizeof *rank))) {
        rc = -ENOMEM;
        goto out;
    }
    /* 0. every source's items of the epoch, in its stream's order */
    uint64_t K = 1, ng[CXS_MIX_MAX_SOURCES] = {0};
    for (uint32_t i = 0; i < S && !rc; i++) {
        const uint64_t q = m->quota[i];
        soff[i] = off;
        if (m->bs && q) {
            const uint64_t g0 = gl.n;
            rc = block_items(m, i, epoch, it + off, &gl);
            ng[i] = gl.n - g0;
            if (2 * ng[i] > K) K = 2 * ng[i];
        } else {
            item_gen ig = {m, i, epoch, shuffle, UINT64_MAX, {0, {0}, 0}};
            for (uint64_t k = 0; k < q; k++) it[off + k] = gen_item(&ig, k);
        }
        off += q;
    }
    if (rc) goto out;
    if (K > E) K = E;
    if (m->bs) { /* the windows that read each group */
        for (uint64_t x = 0; x < gl.n; x++) {
            const uint64_t q = m->quota[gl.g[x].src];
            gl.g[x].first = window_of(gl.g[x].first, q, K);
            gl.g[x].last = window_of(gl.g[x].last, q, K);
        }
        p->wb = malloc((K + 1) * sizeof *p->wb);
        if (!p->wb) {
            rc = -ENOMEM;
            goto out;
        }
        p->nw = K;
    }
    uint64_t nbat = 0, pos = 0;
    uint64_t st = cxs_mix64(cxs_mix64(m->o.seed ^ 0x6261746368ull) + cxs_mix64(epoch + 1));
    for (uint64_t w = 0; w < K; w++) {
        uint64_t lo[CXS_MIX_MAX_SOURCES], hi[CXS_MIX_MAX_SOURCES];
        const uint64_t wbase = pos, b0 = nbat;
        if (p->wb) p->wb[w] = nbat;
        for (uint32_t i = 0; i < S; i++) {
            lo[i] = piece(w, m->quota[i], K), hi[i] = piece(w + 1, m->quota[i], K);
        }
        memset(cnt, 0, (size_t)NB * S * sizeof *cnt);
        /* 1. each item's bucket, counted; 2. each (bucket, source) run
         * filled in stream order */
        for (uint32_t i = 0; i < S; i++) {
            const uint64_t n = hi[i] - lo[i], *src = it + soff[i];
            uint16_t *bk = bkt + soff[i];
            for (uint64_t k = lo[i]; k < hi[i]; k++) {
                const uint64_t T = m->len[i][src[k]];
                if (by_rank) {
                    rank[k - lo[i]] = (lenpos){T, k};
                } else {
                    const uint32_t b = bucket_of(m, T);
                    bk[k] = (uint16_t)b;
                    cnt[(size_t)b * S + i]++;
                }
            }
            if (by_rank) { /* bucket b: the items of rank b*n/NB .. (b+1)*n/NB - 1 in length */
                qsort(rank, n, sizeof *rank, cmp_lenpos);
                for (uint64_t r = 0; r < n; r++) {
                    const uint32_t b = (uint32_t)((u128)r * NB / n);
                    bk[rank[r].k] = (uint16_t)b;
                    cnt[(size_t)b * S + i]++;
                }
            }
        }
        uint64_t f = wbase;
        for (uint32_t b = 0; b < NB; b++)
            for (uint32_t i = 0; i < S; i++)
                at[(size_t)b * S + i] = f, f += cnt[(size_t)b * S + i];
        for (uint32_t i = 0; i < S; i++)
            for (uint64_t k = lo[i]; k < hi[i]; k++) {
                uint64_t *a = &at[(size_t)bkt[soff[i] + k] * S + i];
                tu[*a] = it[soff[i] + k];
                ts[(*a)++] = i;
            }
        /* 3. each bucket's sources interleaved (into p->utt/src), cut greedily */
        for (uint32_t b = 0; b < NB; b++) {
            const uint64_t *c = cnt + (size_t)b * S;
            uint64_t nbk = 0, base = pos;
            for (uint32_t i = 0; i < S; i++) take[i] = 0, nbk += c[i];
            uint64_t first[CXS_MIX_MAX_SOURCES];
            uint64_t fb = base;
            for (uint32_t i = 0; i < S; i++) first[i] = fb, fb += c[i];
            uint64_t n = 0, tmax = 0;
            for (uint64_t x = 0; x < nbk; x++) {
                uint32_t best = UINT32_MAX;
                for (uint32_t i = 0; i < S; i++)
                    if (take[i] < c[i] &&
                        (best == UINT32_MAX || before(c, i, take[i], best, take[best])))
                        best = i;
                const uint64_t e = first[best] + take[best]++;
                const uint64_t T = m->len[best][tu[e]];
                const uint64_t t2 = T > tmax ? T : tmax;
                if (n && ((n + 1) * t2 > B || (maxb && n >= maxb))) {
                    n = 0, tmax = 0;
                }
                if (!n) bs[nbat++] = pos;
                p->utt[pos] = tu[e];
                p->src[pos] = best;
                pos++, n++;
                tmax = T > tmax ? T : tmax;
            }
        }
        /* 4. the window's batches in a seeded order */
        for (uint64_t g = b0; g < nbat; g++) perm[g] = g;
        if (shuffle)
            for (uint64_t g = nbat - b0; g > 1; g--) {
                uint64_t j = rng_below(&st, g), t = perm[b0 + g - 1];
                perm[b0 + g - 1] = perm[b0 + j], perm[b0 + j] = t;
            }
    }
    bs[nbat] = pos;
    if (p->wb) p->wb[K] = nbat;
    p->start = malloc((nbat + 1) * sizeof *p->start);
    if (!p->start) {
        rc = -ENOMEM;
        goto out;
    }
    /* each batch grouped by source */
    uint64_t w = 0;
    for (uint64_t g = 0; g < nbat; g++) {
        const uint64_t a = bs[perm[g]], z = bs[perm[g] + 1];
        p->start[g] = w;
        for (uint32_t i = 0; i < S; i++) take[i] = 0;
        for (uint64_t e = a; e < z; e++) take[p->src[e]]++;
        uint64_t f = w;
        for (uint32_t i = 0; i < S; i++) {
            const uint64_t c = take[i];
            take[i] = f;
            f += c;
        }
        for (uint64_t e = a; e < z; e++) {
            const uint64_t t = take[p->src[e]]++;
            tu[t] = p->utt[e];
            ts[t] = p->src[e];
        }
        w += z - a;
    }
    p->start[nbat] = w;
    p->nb = nbat;
    /* tu/ts now hold the final order: swap them in */
    {
        uint64_t *u = p->utt;
        uint32_t *s = p->src;
        p->utt = tu, p->src = ts;
        tu = u, ts = s;
    }
    p->grp = gl.g, p->ngrp = gl.n, p->rng = gl.r;
    gl.g = NULL, gl.r = NULL;
    if (m->w > 1) rc = ranks_build(m, p);
out:
    free(cnt), free(at), free(take), free(tu), free(bs), free(ts), free(perm), free(bkt);
    free(rank), free(it), free(gl.g), free(gl.r);
    if (rc) plan_free(p);
    else *out = p;
    return rc;
}

static int plan_get(const cxs_mix_utt *cm, uint64_t epoch, uplan **out) {
    cxs_mix_utt *m = (cxs_mix_utt *)cm; /* the cache is shared; the order is not */
    pthread_mutex_lock(&m->mu);
    uplan *p = cxs_plan_find(&m->cache, epoch);
    pthread_mutex_unlock(&m->mu);
    if (p) {
        *out = p;
        return 0;
    }
    /* built without the lock; two threads asking for the same new epoch at
     * once may both build it: the first one kept wins */
    int rc = plan_build(m, epoch, &p);
    if (rc) return rc;
    pthread_mutex_lock(&m->mu);
    *out = cxs_plan_keep(&m->cache, p, epoch, &p->refs, plan_free);
    pthread_mutex_unlock(&m->mu);
    if (*out != p) plan_free(p);
    return 0;
}

static void plan_put(const cxs_mix_utt *cm, uplan *p) {
    cxs_mix_utt *m = (cxs_mix_utt *)cm;
    pthread_mutex_lock(&m->mu);
    cxs_plan_put(p, &p->refs, plan_free);
    pthread_mutex_unlock(&m->mu);
}

/* The epoch's global batches (all of them), and this rank's. */
static void counts(const cxs_mix_utt *m, const uplan *p, uint64_t *global, uint64_t *length) {
    const uint64_t N = p->nb, W = m->w, org = m->o.origin;
    uint64_t left = org < N ? N - org : 0;
    uint64_t len = m->o.drop_last ? left / W : (left + W - 1) / W;
    if (global) *global = N;
    if (length) *length = len;
}

typedef struct rank_tot {
    uint64_t tot;
    uint32_t r;
} rank_tot;

static int cmp_rank_tot(const void *a, const void *b) { /* least first, then by rank */
    const rank_tot *x = a, *y = b;
    if (x->tot != y->tot) return x->tot < y->tot ? -1 : 1;
    return (x->r > y->r) - (x->r < y->r);
}

typedef struct gsize {
    uint64_t n, g;
} gsize;

static int cmp_gsize(const void *a, const void *b) { /* largest first, then by place */
    const gsize *x = a, *y = b;
    if (x->n != y->n) return x->n > y->n ? -1 : 1;
    return (x->g > y->g) - (x->g < y->g);
}

/* The least-cost assignment of rows 0..n-1 to distinct columns of an
 * n x w cost matrix (n <= w; Kuhn-Munkres with potentials, O(n^2 w)):
 * col[j] the column of row j.  Scratch: u[n+1], v[w+1], p[w+1], way[w+1],
 * minv[w+1], used[w+1]. */
static void assign(const double *cost, uint32_t n, uint32_t w, uint32_t *col, double *u,
                   double *v, uint32_t *p, uint32_t *way, double *minv, uint8_t *used) {
    for (uint32_t i = 0; i <= n; i++) u[i] = 0;
    for (uint32_t j = 0; j <= w; j++) v[j] = 0, p[j] = 0, way[j] = 0;
    for (uint32_t i = 1; i <= n; i++) {
        p[0] = i;
        uint32_t j0 = 0;
        for (uint32_t j = 0; j <= w; j++) minv[j] = 1e300, used[j] = 0;
        do {
            used[j0] = 1;
            const uint32_t i0 = p[j0];
            double delta = 1e300;
            uint32_t j1 = 0;
            for (uint32_t j = 1; j <= w; j++) {
                if (used[j]) continue;
                const double cur = cost[(size_t)(i0 - 1) * w + (j - 1)] - u[i0] - v[j];
                if (cur < minv[j]) minv[j] = cur, way[j] = j0;
                if (minv[j] < delta) delta = minv[j], j1 = j;
            }
            for (uint32_t j = 0; j <= w; j++) {
                if (used[j]) u[p[j]] += delta, v[j] -= delta;
                else minv[j] -= delta;
            }
            j0 = j1;
        } while (p[j0] != 0);
        do {
            const uint32_t j1 = way[j0];
            p[j0] = p[j1];
            j0 = j1;
        } while (j0);
    }
    for (uint32_t j = 1; j <= w; j++)
        if (p[j]) col[p[j] - 1] = j - 1;
}

/* Which rank serves which batch of each round (the w global batches from
 * origin + t*w), so that every rank's count of each source stays at its
 * share of the utterances it was served.  Rank r's error in source i is
 * E[r][i] = its count - q_i / E * its utterances, and a batch's own error
 * e[b][i] its count of i - q_i / E * its size.  Up to RANKS_EXACT ranks,
 * each round's batches go to ranks by the least-cost assignment (assign)
 * of cost(b, r) = the sum over sources of what f(E[r][i]) grows by when r
 * serves b (f(x) = x^2 / 2 + OVER_WEIGHT * (|x| - OVER_AT)^2 where |x| >
 * OVER_AT: errors near one cost more than their squares; the measured
 * worst over 352 configurations fell from 1.37 to 1.10) + TOTALS_WEIGHT * d_r *
 * n_b / nbar^2, d_r how far r's utterances are above the ranks' mean and
 * nbar the epoch's mean batch size: the proportions first, the ranks'
 * utterance counts kept near level.  Above RANKS_EXACT, the largest batch
 * to the rank with the fewest utterances so far, and so on (ties to the
 * lower batch, the lower rank).  A final round of k < w batches goes to k
 * ranks chosen the same way; the others repeat the epoch's first batches,
 * in rank order.  The batches themselves never depend on the ranks.
 * O(batches * w * (w + sources)) up to RANKS_EXACT, O(batches log w)
 * above. */
#define RANKS_EXACT 64
#define TOTALS_WEIGHT 0.3
#define OVER_AT 0.5
#define OVER_WEIGHT 10.0
static double over_cost(double x) {
    const double o = fabs(x) - OVER_AT;
    return 0.5 * x * x + (o > 0 ? OVER_WEIGHT * o * o : 0);
}
static int ranks_build(const cxs_mix_utt *m, uplan *p) {
    const uint64_t N = p->nb, W = m->w, org = m->o.origin;
    const uint32_t S = m->n;
    const int exact = W <= RANKS_EXACT;
    const int held = m->o.stratify == CXS_MIX_STRATIFY_SHARES || m->nb == 1;
    uint64_t len;
    counts(m, p, NULL, &len);
    rank_tot *rt = malloc(W * sizeof *rt);
    gsize *gs = malloc(W * sizeof *gs);
    uint32_t *who = malloc(W * sizeof *who);
    uint8_t *taken = malloc(W);
    /* exact: per rank and source its count, per rank its utterances, per
     * source what the rounds dealt; the round's costs and the assignment's
     * scratch */
    double *cnt = exact ? calloc(W * S, sizeof *cnt) : NULL, *cum = exact ? calloc(S, 8) : NULL;
    double *tot = exact ? calloc(W, sizeof *tot) : NULL;
    double *cost = exact ? malloc(W * W * sizeof *cost) : NULL;
    double *scr = exact ? malloc(3 * (W + 1) * sizeof *scr) : NULL;
    uint32_t *iscr = exact ? malloc(2 * (W + 1) * sizeof *iscr) : NULL;
    uint8_t *used = exact ? malloc(W + 1) : NULL;
    double *be = exact ? malloc(S * sizeof *be) : NULL; /* a batch's own errors */
    double *sh = malloc(S * sizeof *sh);
    p->rg = malloc((len ? len : 1) * sizeof *p->rg);
    p->rrep = malloc(len ? len : 1);
    int rc = 0;
    if (!rt || !gs || !who || !taken ||
        (exact && (!cnt || !cum || !tot || !cost || !scr || !iscr || !used || !be)) || !sh ||
        !p->rg ||
        !p->rrep) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < S; i++) sh[i] = (double)m->quota[i] / (double)m->E;
    const double nbar = N ? (double)m->E / (double)N : 1;
    double served = 0; /* the utterances dealt before this round */
    for (uint32_t r = 0; r < W; r++) rt[r] = (rank_tot){0, r};
    for (uint64_t t = 0; t < len; t++) {
        const uint64_t g0 = org + t * W, k = g0 < N ? (N - g0 < W ? N - g0 : W) : 0;
        for (uint64_t j = 0; j < k; j++)
            gs[j] = (gsize){p->start[g0 + j + 1] - p->start[g0 + j], g0 + j};
        qsort(gs, k, sizeof *gs, cmp_gsize);
        memset(taken, 0, W);
        if (exact) {
            for (uint64_t j = 0; j < k && !held; j++)
                for (uint64_t e = p->start[gs[j].g]; e < p->start[gs[j].g + 1]; e++)
                    cum[p->src[e]] += 1;
            for (uint64_t j = 0; j < k; j++) {
                for (uint32_t i = 0; i < S; i++) be[i] = held ? -sh[i] * (double)gs[j].n : 0;
                for (uint64_t e = p->start[gs[j].g]; e < p->start[gs[j].g + 1]; e++)
                    be[p->src[e]] += 1;
                for (uint32_t r = 0; r < W; r++) {
                    const double *c = cnt + r * S, d = tot[r] - served / (double)W;
                    double v = 0;
                    if (held) {
                        for (uint32_t i = 0; i < S; i++) {
                            const double x0 = c[i] - sh[i] * tot[r];
                            v += over_cost(x0 + be[i]) - over_cost(x0);
                        }
                        v += TOTALS_WEIGHT * d / nbar * (double)gs[j].n / nbar;
                    } else {
                        for (uint32_t i = 0; i < S; i++) v += (c[i] - cum[i] / (double)W) * be[i];
                    }
                    cost[j * W + r] = v;
                }
            }
            if (k) assign(cost, (uint32_t)k, (uint32_t)W, who, scr, scr + W + 1, iscr,
                          iscr + W + 1, scr + 2 * (W + 1), used);
            for (uint64_t j = 0; j < k; j++) {
                const uint32_t r = who[j];
                taken[r] = 1;
                for (uint64_t e = p->start[gs[j].g]; e < p->start[gs[j].g + 1]; e++)
                    cnt[r * S + p->src[e]] += 1;
                tot[r] += (double)gs[j].n;
                served += (double)gs[j].n;
            }
        } else {
            qsort(rt, W, sizeof *rt, cmp_rank_tot);
            for (uint64_t j = 0; j < k; j++) {
                rt[j].tot += gs[j].n;
                who[j] = rt[j].r;
                taken[rt[j].r] = 1;
            }
        }
        for (uint64_t j = 0; j < k; j++)
            if (who[j] == m->o.rank) p->rg[t] = gs[j].g, p->rrep[t] = 0;
        if (k < W) { /* the final round's padding: the others in rank order */
            uint64_t nrep = 0;
            for (uint32_t r = 0; r < W; r++)
                if (!taken[r]) {
                    if (r == m->o.rank) p->rg[t] = nrep % N, p->rrep[t] = 1;
                    nrep++;
                }
        }
    }
out:
    free(rt), free(gs), free(who), free(taken), free(cnt), free(cum), free(tot), free(cost), free(scr);
    free(iscr), free(used), free(be), free(sh);
    return rc;
}

int cxs_mix_utt_length(const cxs_mix_utt *m, uint64_t epoch, uint64_t *global,
                       uint64_t *length) {
    if (!m) return CXS_E_INVALID;
    uplan *p;
    int rc = plan_get(m, epoch, &p);
    if (rc) return rc;
    counts(m, p, global, length);
    plan_put(m, p);
    return 0;
}

int cxs_mix_utt_batch(const cxs_mix_utt *m, uint64_t epoch, uint64_t pos, uint64_t *utts,
                      uint32_t *source, uint32_t cap, uint32_t *n, uint64_t *global,
                      uint32_t *repeat) {
    if (!m || !n || !utts) return CXS_E_INVALID;
    uplan *p;
    int rc = plan_get(m, epoch, &p);
    if (rc) return rc;
    uint64_t len;
    counts(m, p, NULL, &len);
    if (pos >= len) {
        rc = CXS_E_RANGE;
    } else {
        const uint64_t x = m->o.origin + m->o.rank + pos * m->w;
        const uint64_t g = p->rg ? p->rg[pos] : x % p->nb, a = p->start[g],
                       k = p->start[g + 1] - a;
        if (k > cap) {
            rc = CXS_E_INVALID;
        } else {
            memcpy(utts, p->utt + a, k * sizeof *utts);
            if (source) memcpy(source, p->src + a, k * sizeof *source);
            *n = (uint32_t)k;
            if (global) *global = g;
            if (repeat) *repeat = p->rrep ? p->rrep[pos] : x >= p->nb;
        }
    }
    plan_put(m, p);
    return rc;
}

int cxs_mix_utt_block(const cxs_mix_utt *m) { return m && m->bs; }

int cxs_mix_utt_blocks_get(const cxs_mix_utt *m, uint64_t epoch, cxs_mix_ublocks *out) {
    memset(out, 0, sizeof *out);
    if (!m || !m->bs) return CXS_E_INVALID;
    uplan *p;
    int rc = plan_get(m, epoch, &p);
    if (rc) return rc;
    *out = (cxs_mix_ublocks){p->nw, p->wb, p->grp, p->ngrp, p->rng, p};
    return 0;
}

void cxs_mix_utt_blocks_put(const cxs_mix_utt *m, cxs_mix_ublocks *b) {
    if (b->ref) plan_put(m, b->ref);
    memset(b, 0, sizeof *b);
}

uint64_t cxs_mix_ublocks_window(const cxs_mix_ublocks *b, uint64_t g) {
    return cxs_last_le(b->wb, b->nw, g);
}

int cxs_mix_ublocks_place(const cxs_mix_utt *m, const cxs_mix_ublocks *b, uint64_t pos,
                          uint64_t *global, int *repeat) {
    const uplan *p = b->ref;
    uint64_t len;
    counts(m, p, NULL, &len);
    if (pos >= len) return CXS_E_RANGE;
    const uint64_t x = m->o.origin + m->o.rank + pos * m->w;
    *global = p->rg ? p->rg[pos] : x % p->nb;
    *repeat = p->rrep ? p->rrep[pos] : x >= p->nb;
    return 0;
}
