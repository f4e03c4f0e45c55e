/* mixloader.c - the mixture loader: worker threads gather the windows of a
 * mixture's batches (cxs_mix, mix.c) into the batch ring (ring.h), each
 * source's run of the batch from its own dataset with its own
 * normalisation, its labels mapped into source 0's vocabulary. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#include "abi.h"
#include "blocks.h"
#include "dataset_internal.h"
#include "gather.h"
#include "hooks.h"
#include "mix.h"
#include "position.h"
#include "ring.h"
#include "samplers.h"
#include "source.h"

typedef struct mslot {
    float *x;
    int64_t *y;
    uint64_t *frames;
    uint32_t *source;
    cxs_mix_frames pub;
} mslot;

/* A worker's own: what it claimed, and a gather context per source (a
 * compressed source's decoder and buffers). */
typedef struct mworker {
    struct cxs_mix_loader *l;
    uint64_t epoch, pos, gen;
    cxs_gather_ctx *g;
} mworker;

/* Block order: a source's blocks, asked for (WILLNEED) as the claims
 * reach them and let go (source.h) once the consumer has passed them,
 * so that the page cache the sources hold stays near their shares of the
 * mixture's memory budget.  A place is (pass, block index of that pass's
 * plan). */
typedef struct mblocks {
    cxs_src src;
    uint64_t adv_pass, adv_blk;   /* the next block to ask for (under ring.mu) */
    uint64_t drop_pass, drop_blk; /* the next block to let go (the consumer's) */
    int fresh;                    /* a new start: both from its position */
} mblocks;

struct cxs_mix_loader {
    const cxs_mix *mix;
    uint32_t n;
    int stalled;           /* the test hook's stall happened (hooks.h) */
    mblocks *blk;          /* per source, block order only (else NULL) */
    cxs_loader_opts o;
    size_t window;        /* floats per sample */
    double **norm;        /* per source: means then scales, or NULL */
    int64_t **map;        /* per source: its label -> source 0's, or NULL (the same) */
    uint64_t epoch, start, length; /* under ring.mu */
    cxs_ring ring;
    mslot *slots;
    mworker *w;
};

/* The per-source normalisation constants and label maps (NULL: none). */
static void sources_free(uint32_t n, double **norm, int64_t **map) {
    for (uint32_t i = 0; i < n; i++) {
        if (norm) free(norm[i]);
        if (map) free(map[i]);
    }
    free(norm);
    free(map);
}

/* The consumer's next slot of a ring (a forked child starting its workers
 * first): 0 with *slot, 1 past the end, or the failure (in d). */
static int ring_respawn(cxs_ring *r, int drop_held) {
    cxs_ring_after_fork(r, drop_held);
    int rc = cxs_ring_start(r);
    if (!rc) cxs_ring_adopt(r);
    return rc;
}

/* The consumer's next slot, waiting at most ms (CXS_RING_FOREVER: no
 * limit): 0 with *slot, 1 past the end, or the failure (in d): -ETIMEDOUT,
 * -ECANCELED after a cancel (`cancel` names the call that makes one). */
static int ring_take(cxs_ring *r, const char *what, const char *cancel, uint32_t *slot,
                     uint32_t ms, cxs_diag *d) {
    int rc;
    if (cxs_ring_forked(r) && (rc = ring_respawn(r, 0)))
        return cxs_diagf(d, rc, "%s: no worker thread could start in this process: %s", what,
                         cxs_strerror(rc));
    rc = cxs_ring_next_timed(r, slot, ms);
    if (rc == -ETIMEDOUT)
        return cxs_diagf(d, rc, "%s: batch %llu not ready within %u ms", what,
                         (unsigned long long)r->next_take, ms);
    if (rc == -ECANCELED) return cxs_diagf(d, rc, "%s: cancelled (%s)", what, cancel);
    if (rc) return 1; /* (no stalled callback: the end) */
    const cxs_ring_slot *s = &r->slot[*slot];
    if (s->rc) {
        if (s->diag.message[0]) return cxs_diag_copy(d, s->rc, &s->diag);
        return cxs_diagf(d, s->rc, "%s: batch %llu: %s", what, (unsigned long long)s->batch,
                         cxs_strerror(s->rc));
    }
    return 0;
}

#ifdef CXS_TEST_HOOKS
/* CXS_LOADER_FAULT=stall:N (hooks.h): the loader's first fill of batch
 * N waits until it is abandoned, as a fill waiting on a slow source
 * would; the fill after it goes on (*once: the loader's). */
static void stall_hook(const cxs_ring *r, int *once, uint64_t b, uint64_t gen) {
    const long long n = cxs_hook_stall_batch();
    if (n < 0 || (uint64_t)n != b || __atomic_exchange_n(once, 1, __ATOMIC_RELAXED)) return;
    const struct timespec ms = {0, 1000000L};
    while (!cxs_ring_abandoned(r, gen)) nanosleep(&ms, NULL);
}
#else
static void stall_hook(const cxs_ring *r, int *once, uint64_t b, uint64_t gen) {
    (void)r, (void)once, (void)b, (void)gen;
}
#endif

static int abandoned(void *arg) {
    const mworker *wk = arg;
    return cxs_ring_abandoned(&wk->l->ring, wk->gen);
}

/* Source src's block plan of `pass`, a reference (put it back). */
static cxs_block_plan *plan_of(const cxs_mix_loader *l, uint32_t src, uint64_t pass) {
    cxs_block_plan *p;
    cxs_block_sched *bs = cxs_sampler_blocks(cxs_mix_order(l->mix, src));
    return bs && !cxs_block_plan_get(bs, pass, &p) ? p : NULL;
}
static void plan_back(const cxs_mix_loader *l, uint32_t src, cxs_block_plan *p) {
    cxs_block_plan_put(cxs_sampler_blocks(cxs_mix_order(l->mix, src)), p);
}

/* Stream place s of source src: its pass, and the blocks its round draws
 * on ([*first, *last]); 0, or -1 without a plan. */
static int round_at(const cxs_mix_loader *l, uint32_t src, unsigned __int128 s, uint64_t *pass,
                    uint64_t *first, uint64_t *last) {
    const uint64_t N = cxs_mix_dataset(l->mix, src)->meta.num_frames;
    *pass = (uint64_t)(s / N);
    cxs_block_plan *p = plan_of(l, src, *pass);
    if (!p) return -1;
    const uint64_t t = cxs_block_plan_round(p, (uint64_t)(s % N));
    *first = cxs_block_plan_first(p, t);
    *last = (t + p->R < p->nblocks ? t + p->R : p->nblocks) - 1;
    plan_back(l, src, p);
    return 0;
}

/* Walk source src's blocks from (*pass, *blk) up to, not including,
 * (pass, blk), asking for each (want) or letting it go. */
static void walk_blocks(cxs_mix_loader *l, uint32_t src, uint64_t *at_pass, uint64_t *at_blk,
                        uint64_t pass, uint64_t blk, int want) {
    mblocks *mb = &l->blk[src];
    if (pass > *at_pass + 1) *at_pass = pass - 1, *at_blk = 0; /* (a jump: from the last pass) */
    while (*at_pass < pass || (*at_pass == pass && *at_blk < blk)) {
        cxs_block_plan *p = plan_of(l, src, *at_pass);
        if (!p) return;
        const uint64_t end = *at_pass < pass ? p->nblocks : (blk < p->nblocks ? blk : p->nblocks);
        for (; *at_blk < end; (*at_blk)++) {
            const cxs_block *b = &p->blk[*at_blk];
            if (!b->len) continue; /* compressed: read through the decoder */
            if (want) cxs_src_want(&mb->src, b->shard, b->off, b->len);
            else cxs_src_evict(&mb->src, b->shard, b->off, b->len);
        }
        plan_back(l, src, p);
        if (*at_pass == pass) break;
        (*at_pass)++, *at_blk = 0;
    }
}

/* A new start, or the end: what was asked for and not yet let go goes
 * (the current rounds' blocks, those asked for ahead); the consumer's, or
 * under ring.mu when workers run. */
static void blocks_let_go(cxs_mix_loader *l) {
    for (uint32_t i = 0; l->blk && i < l->n; i++) {
        mblocks *mb = &l->blk[i];
        if (!mb->fresh)
            walk_blocks(l, i, &mb->drop_pass, &mb->drop_blk, mb->adv_pass, mb->adv_blk, 0);
        mb->fresh = 1;
    }
}

/* Under ring.mu, as batch pos is claimed: ask for the blocks its rounds
 * draw on and the next one. */
static void blocks_claimed(cxs_mix_loader *l, uint64_t epoch, uint64_t pos) {
    unsigned __int128 a[CXS_MIX_MAX_SOURCES];
    uint64_t c[CXS_MIX_MAX_SOURCES];
    if (cxs_mix_repeat(l->mix, pos) || cxs_mix_spans(l->mix, epoch, pos, a, c)) return;
    for (uint32_t i = 0; i < l->n; i++) {
        mblocks *mb = &l->blk[i];
        uint64_t pass, first, last, p1, f1, l1;
        if (!c[i] || round_at(l, i, a[i], &pass, &first, &last) ||
            round_at(l, i, a[i] + c[i] - 1, &p1, &f1, &l1))
            continue;
        if (mb->fresh) {
            mb->adv_pass = mb->drop_pass = pass;
            mb->adv_blk = mb->drop_blk = first;
            mb->fresh = 0;
        }
        walk_blocks(l, i, &mb->adv_pass, &mb->adv_blk, p1, l1 + 2, 1);
    }
}

/* The consumer took batch pos: the blocks before those its rounds draw on
 * are no batch's to come. */
static void blocks_taken(cxs_mix_loader *l, uint64_t epoch, uint64_t pos) {
    unsigned __int128 a[CXS_MIX_MAX_SOURCES];
    uint64_t c[CXS_MIX_MAX_SOURCES];
    if (cxs_mix_spans(l->mix, epoch, pos, a, c)) return;
    if (cxs_mix_repeat(l->mix, pos)) {
        /* the final round's padding read the epoch's first blocks again:
         * no batch of this epoch needs them (the walkers stay where they
         * are) */
        for (uint32_t i = 0; i < l->n; i++) {
            uint64_t p0, f0, l0, p1, f1, l1;
            if (!c[i] || round_at(l, i, a[i], &p0, &f0, &l0) ||
                round_at(l, i, a[i] + c[i] - 1, &p1, &f1, &l1))
                continue;
            walk_blocks(l, i, &p0, &f0, p1, l1 + 1, 0);
        }
        return;
    }
    uint8_t fresh[CXS_MIX_MAX_SOURCES];
    pthread_mutex_lock(&l->ring.mu); /* a claim sets where dropping starts */
    for (uint32_t i = 0; i < l->n; i++) fresh[i] = (uint8_t)l->blk[i].fresh;
    pthread_mutex_unlock(&l->ring.mu);
    for (uint32_t i = 0; i < l->n; i++) {
        mblocks *mb = &l->blk[i];
        uint64_t pass, first, last;
        if (!c[i] || fresh[i] || round_at(l, i, a[i], &pass, &first, &last)) continue;
        walk_blocks(l, i, &mb->drop_pass, &mb->drop_blk, pass, first, 0);
    }
}

static void mclaim(void *owner, uint32_t w, uint32_t i, uint64_t b, uint64_t gen) {
    cxs_mix_loader *l = owner;
    (void)i, (void)gen;
    l->w[w].epoch = l->epoch;
    l->w[w].pos = l->start + b;
    if (l->blk) blocks_claimed(l, l->epoch, l->start + b);
}

static int mfill(void *owner, uint32_t w, uint32_t i, uint64_t b, uint64_t gen) {
    cxs_mix_loader *l = owner;
    mworker *wk = &l->w[w];
    mslot *s = &l->slots[i];
    cxs_diag *diag = &l->ring.slot[i].diag;
    uint32_t cnt = 0;
    uint64_t g = 0;
    stall_hook(&l->ring, &l->stalled, b, gen);
    wk->gen = gen;
    int rc = cxs_mix_batch(l->mix, wk->epoch, wk->pos, s->frames, s->source, l->o.batch_size,
                           &cnt, &g);
    if (rc) cxs_diagf(diag, rc, "mixture loader: batch %llu: %s", (unsigned long long)wk->pos,
                      cxs_strerror(rc));
    for (uint32_t k0 = 0, k1; !rc && k0 < cnt; k0 = k1) {
        const uint32_t src = s->source[k0];
        for (k1 = k0 + 1; k1 < cnt && s->source[k1] == src; k1++) {
        }
        const cxs_dataset *ds = cxs_mix_dataset(l->mix, src);
        const double *nm = l->norm[src];
        int64_t *y = l->o.labels ? s->y + k0 : NULL;
        wk->g[src].cancelled = abandoned;
        wk->g[src].arg = wk;
        rc = cxs_gather_impl(ds, s->frames + k0, k1 - k0, l->o.k, nm, nm ? nm + ds->meta.dim : NULL,
                             1, s->x + (size_t)k0 * l->window, y, &wk->g[src], diag);
        if (!rc && y && l->map[src])
            for (uint32_t j = 0; j < k1 - k0; j++) y[j] = l->map[src][y[j]];
    }
    s->pub = (cxs_mix_frames){s->x, l->o.labels ? s->y : NULL, s->frames, s->source, cnt,
                              wk->pos, g, (uint32_t)cxs_mix_repeat(l->mix, wk->pos)};
    return rc;
}

static void mworker_init(void *owner, uint32_t w) {
    cxs_mix_loader *l = owner;
    for (uint32_t i = 0; i < l->n; i++) cxs_gather_ctx_free(&l->w[w].g[i]);
    l->w[w].l = l;
}

static const cxs_ring_ops mix_ring = {.claim = mclaim, .fill = mfill, .worker_init = mworker_init};

void cxs_mix_loader_free(cxs_mix_loader *l) {
    if (!l) return;
    if (!cxs_ring_forked(&l->ring)) cxs_ring_stop(&l->ring);
    if (l->blk && !cxs_ring_forked(&l->ring)) blocks_let_go(l); /* (the workers are gone) */
    cxs_ring_destroy(&l->ring);
    for (uint32_t i = 0; l->slots && i < l->o.ring; i++) {
        free(l->slots[i].x);
        free(l->slots[i].y);
        free(l->slots[i].frames);
        free(l->slots[i].source);
    }
    free(l->slots);
    for (uint32_t t = 0; l->w && t < l->o.threads; t++) {
        for (uint32_t i = 0; l->w[t].g && i < l->n; i++) cxs_gather_ctx_free(&l->w[t].g[i]);
        free(l->w[t].g);
    }
    free(l->w);
    sources_free(l->n, l->norm, l->map);
    for (uint32_t i = 0; l->blk && i < l->n; i++) cxs_src_destroy(&l->blk[i].src, 0);
    free(l->blk);
    free(l);
}

static int sym_eq(const char *a, size_t na, const char *b, size_t nb) {
    return na == nb && !memcmp(a, b, na);
}

/* Source i's labels in source 0's numbering: NULL when the vocabularies
 * are the same, a table when they hold the same symbols in another order;
 * otherwise CXS_E_INVALID naming (some of) the symbols that differ. */
static int vocab_map(const cxs_dataset *d0, const cxs_dataset *di, uint32_t i, int64_t **out,
                     cxs_diag *d) {
    const uint32_t V0 = d0->meta.vocab_size, Vi = di->meta.vocab_size;
    *out = NULL;
    int same = V0 == Vi;
    for (uint32_t v = 0; same && v < Vi; v++) {
        const char *a, *b;
        size_t na, nb;
        cxs_dataset_vocab(d0, v, &a, &na);
        cxs_dataset_vocab(di, v, &b, &nb);
        same = sym_eq(a, na, b, nb);
    }
    if (same) return 0;
    int64_t *map = malloc((Vi ? Vi : 1) * sizeof *map);
    if (!map) return cxs_diagf(d, -ENOMEM, "mixture loader: out of memory");
    char only_i[300] = "", only_0[300] = "";
    size_t li = 0, l0 = 0;
    unsigned ni = 0, n0 = 0;
    for (uint32_t v = 0; v < Vi; v++) { /* (O(V^2): vocabularies are small, once) */
        const char *b;
        size_t nb;
        cxs_dataset_vocab(di, v, &b, &nb);
        map[v] = -1;
        for (uint32_t u = 0; u < V0 && map[v] < 0; u++) {
            const char *a;
            size_t na;
            cxs_dataset_vocab(d0, u, &a, &na);
            if (sym_eq(a, na, b, nb)) map[v] = u;
        }
        if (map[v] < 0 && ni++ < 8 && li < sizeof only_i - 40)
            li += (size_t)snprintf(only_i + li, sizeof only_i - li, "%s\"%.*s\"", li ? " " : "",
                                   (int)(nb > 24 ? 24 : nb), b);
    }
    for (uint32_t u = 0; u < V0; u++) {
        const char *a;
        size_t na;
        cxs_dataset_vocab(d0, u, &a, &na);
        int found = 0;
        for (uint32_t v = 0; v < Vi && !found; v++) {
            const char *b;
            size_t nb;
            cxs_dataset_vocab(di, v, &b, &nb);
            found = sym_eq(a, na, b, nb);
        }
        if (!found && n0++ < 8 && l0 < sizeof only_0 - 40)
            l0 += (size_t)snprintf(only_0 + l0, sizeof only_0 - l0, "%s\"%.*s\"", l0 ? " " : "",
                                   (int)(na > 24 ? 24 : na), a);
    }
    if (ni || n0) {
        free(map);
        return cxs_diagf(d, CXS_E_INVALID,
                         "mixture loader: the vocabularies differ: %u symbol(s) only in source "
                         "%u (%s)%s%s, %u only in source 0 (%s)%s%s; labels are mapped by "
                         "symbol, so every source needs the same symbols",
                         ni, i, di->manifest_path, ni ? ": " : "", only_i, n0,
                         d0->manifest_path, n0 ? ": " : "", only_0);
    }
    *out = map;
    return 0;
}

/* What the sources of a mixture loader must agree on (what: "mixture
 * loader", ...): the width; with labels (seqs: label sequences) every one
 * has them, the vocabularies mapped by symbol into source 0's (map[i]);
 * with CXS_GATHER_NORMALIZE each one's constants (its own statistics, or
 * norm) into normc[i]. */
static int check_sources(const cxs_dataset *const *dss, uint32_t n, int labels, int seqs,
                         uint32_t flags, const cxs_norm *norm, double **normc, int64_t **map,
                         const char *what, cxs_diag *d) {
    const cxs_dataset *d0 = dss[0];
    for (uint32_t i = 0; i < n; i++) {
        const cxs_dataset *ds = dss[i];
        int rc;
        if (cxs_src_streamed(ds)) return cxs_streamed_refuse(ds, what, d);
        if (ds->meta.dim != d0->meta.dim)
            return cxs_diagf(d, CXS_E_INVALID,
                             "%s: source %u (%s) has %u features a frame, source 0 (%s) %u: the "
                             "sources' widths must be equal (their dtypes may differ)",
                             what, i, ds->manifest_path, ds->meta.dim, d0->manifest_path,
                             d0->meta.dim);
        if (labels && !ds->meta.label_width)
            return cxs_diagf(d, CXS_E_NO_LABELS,
                             "%s: labels asked, but source %u (%s) has no frame labels", what, i,
                             ds->manifest_path);
        if (seqs && !ds->has_seqs)
            return cxs_diagf(d, CXS_E_NO_SEQUENCES,
                             "%s: targets asked, but source %u (%s) has no label sequences",
                             what, i, ds->manifest_path);
        if ((labels || seqs) && i && (rc = vocab_map(d0, ds, i, &map[i], d))) return rc;
        if (flags & CXS_GATHER_NORMALIZE) {
            if (!norm && !ds->norm_mean)
                return cxs_diagf(d, CXS_E_INVALID,
                                 "%s: normalisation by each source's statistics, but source %u "
                                 "(%s) has none (give one set, norm)",
                                 what, i, ds->manifest_path);
            cxs_diag nd;
            if ((rc = cxs_norm_constants(ds, norm, &normc[i], &nd)))
                return cxs_diagf(d, rc, "%s: source %u (%s): %s", what, i, ds->manifest_path,
                                 nd.message);
        }
    }
    return 0;
}

static int position(cxs_mix_loader *l, uint64_t epoch, uint64_t start, uint64_t *nb,
                    cxs_diag *d) {
    if (start > l->length)
        return cxs_diagf(d, CXS_E_INVALID,
                         "mixture loader: start %llu is past this rank's %llu batches",
                         (unsigned long long)start, (unsigned long long)l->length);
    l->epoch = epoch;
    l->start = start;
    *nb = l->length - start;
    blocks_let_go(l);
    return 0;
}

int cxs_mix_loader_create(const cxs_mix *mix, const cxs_loader_opts *opts, uint64_t epoch,
                          uint64_t start, cxs_mix_loader **out, cxs_diag *diag) {
    if (!mix || !opts || !out)
        return cxs_diagf(diag, CXS_E_INVALID,
                         "mixture loader: mixture, options and out must not be NULL");
    int rc = CXS_OPTS_CHECK(opts, "cxs_loader_opts", diag);
    if (rc) return rc;
    const uint32_t B = cxs_mix_batch_size(mix);
    if (opts->batch_size && opts->batch_size != B)
        return cxs_diagf(diag, CXS_E_INVALID, "mixture loader: batch_size %u, the mixture's is "
                         "%u (0: the mixture's)", opts->batch_size, B);
    if (opts->k > 1000000)
        return cxs_diagf(diag, CXS_E_INVALID, "mixture loader: context k=%u is above 1,000,000",
                         opts->k);
    if (opts->threads > 256 || opts->ring > 1024)
        return cxs_diagf(diag, CXS_E_INVALID, "mixture loader: threads %u (to 256), ring %u (to "
                         "1024)", opts->threads, opts->ring);
    if (opts->flags & ~CXS_GATHER_NORMALIZE)
        return cxs_diagf(diag, CXS_E_INVALID, "mixture loader: unknown flags 0x%x", opts->flags);
    if (opts->external || opts->readahead || opts->drop_last || opts->labels > 1)
        return cxs_diagf(diag, CXS_E_INVALID,
                         "mixture loader: external, readahead and drop_last must be 0 (the "
                         "mixture's drop_last applies), labels 0 or 1");
    cxs_mix_loader *l = calloc(1, sizeof *l);
    if (!l) return cxs_diagf(diag, -ENOMEM, "mixture loader: out of memory");
    l->mix = mix;
    l->n = cxs_mix_sources(mix);
    l->o = *opts;
    l->o.batch_size = B;
    l->length = cxs_mix_length(mix, NULL);
    const cxs_dataset *d0 = cxs_mix_dataset(mix, 0);
    l->window = (size_t)(2 * (uint64_t)l->o.k + 1) * d0->meta.dim;
    l->norm = calloc(l->n, sizeof *l->norm);
    l->map = calloc(l->n, sizeof *l->map);
    if (!l->norm || !l->map) rc = cxs_diagf(diag, -ENOMEM, "mixture loader: out of memory");
    const cxs_dataset *dss[CXS_MIX_MAX_SOURCES];
    for (uint32_t i = 0; i < l->n; i++) dss[i] = cxs_mix_dataset(mix, i);
    if (!rc)
        rc = check_sources(dss, l->n, (int)l->o.labels, 0, l->o.flags, l->o.norm, l->norm, l->map,
                           "mixture loader", diag);
    l->o.norm = NULL; /* copied: the caller's may go */
    if (!l->o.threads) l->o.threads = cxs_default_threads();
    if (!l->o.ring) l->o.ring = l->o.threads + 2;
    if (l->o.ring < 3) l->o.ring = 3;
    if (!rc && (rc = cxs_ring_init(&l->ring, &mix_ring, l, l->o.ring, l->o.threads, 0)))
        cxs_diagf(diag, rc, "mixture loader: out of memory");
    if (!rc) {
        l->slots = calloc(l->o.ring, sizeof *l->slots);
        l->w = calloc(l->o.threads, sizeof *l->w);
        if (!l->slots || !l->w) rc = -ENOMEM;
        for (uint32_t t = 0; !rc && t < l->o.threads; t++)
            if (!(l->w[t].g = calloc(l->n, sizeof *l->w[t].g))) rc = -ENOMEM;
        if (!rc && l->window > SIZE_MAX / sizeof(float) / B) rc = -ENOMEM;
        for (uint32_t i = 0; !rc && i < l->o.ring; i++) {
            mslot *s = &l->slots[i];
            s->x = malloc((size_t)B * l->window * sizeof *s->x + 1);
            s->frames = malloc((size_t)B * sizeof *s->frames);
            s->source = malloc((size_t)B * sizeof *s->source);
            if (l->o.labels) s->y = malloc((size_t)B * sizeof *s->y);
            if (!s->x || !s->frames || !s->source || (l->o.labels && !s->y)) rc = -ENOMEM;
        }
        if (rc) cxs_diagf(diag, rc, "mixture loader: out of memory for %u batch buffers",
                          l->o.ring);
    }
    int block = 0;
    for (uint32_t i = 0; i < l->n; i++)
        block |= cxs_mix_order(mix, i) && cxs_sampler_blocks(cxs_mix_order(mix, i));
    if (!rc && block) {
        if (!(l->blk = calloc(l->n, sizeof *l->blk))) rc = -ENOMEM;
        for (uint32_t i = 0; !rc && i < l->n; i++)
            rc = cxs_src_init(&l->blk[i].src, cxs_mix_dataset(mix, i), CXS_SRC_FDS);
        if (rc) cxs_diagf(diag, rc, "mixture loader: out of memory");
        /* each block is asked for ahead (WILLNEED): a fault needs no
         * read-around, and the check of a sum block at its first use
         * (blocksrc.h), which reads it in order, would otherwise start the
         * kernel's readahead past the block's end into blocks passed or
         * to come (79 MB cached of 131 under a 24 MB budget; as the
         * utterance mixture, which sets it too: 53 MB) */
        for (uint32_t i = 0; !rc && i < l->n; i++) cxs_features_random(cxs_mix_dataset(mix, i));
    }
    if (!rc) rc = position(l, epoch, start, &l->ring.nbatches, diag);
    if (!rc && (rc = cxs_ring_start(&l->ring)))
        cxs_diagf(diag, rc, "mixture loader: no worker thread could be started");
    if (rc) {
        cxs_mix_loader_free(l);
        return rc;
    }
    *out = l;
    return 0;
}

const cxs_diag *cxs_mix_loader_error(const cxs_mix_loader *l) { return l ? &l->ring.err : NULL; }

static int respawn(cxs_mix_loader *l, int drop_held) {
    for (uint32_t i = 0; l->blk && i < l->n; i++) cxs_src_after_fork(&l->blk[i].src);
    return ring_respawn(&l->ring, drop_held);
}

static int next_batch(cxs_mix_loader *l, const cxs_mix_frames **batch, uint32_t ms,
                      cxs_diag *d) {
    if (l->blk && cxs_ring_forked(&l->ring))
        for (uint32_t i = 0; i < l->n; i++) cxs_src_after_fork(&l->blk[i].src);
    uint32_t i = 0;
    *batch = NULL;
    int rc = ring_take(&l->ring, "mixture loader", "cxs_mix_loader_cancel", &i, ms, d);
    *batch = rc == 0 ? &l->slots[i].pub : NULL;
    if (rc == 0 && l->blk) blocks_taken(l, l->epoch, (*batch)->index);
    return rc == 1 ? 0 : rc;
}

int cxs_mix_loader_next(cxs_mix_loader *l, const cxs_mix_frames **batch, cxs_diag *d) {
    if (!l || !batch)
        return cxs_diagf(d, CXS_E_INVALID, "mixture loader: no loader or batch pointer");
    return cxs_ring_outcome(&l->ring, next_batch(l, batch, CXS_RING_FOREVER, &l->ring.err), d);
}

int cxs_mix_loader_next_timed(cxs_mix_loader *l, const cxs_mix_frames **batch,
                              uint32_t timeout_ms, cxs_diag *d) {
    if (!l || !batch)
        return cxs_diagf(d, CXS_E_INVALID, "mixture loader: no loader or batch pointer");
    if (timeout_ms == CXS_RING_FOREVER) timeout_ms--; /* (a limit, as asked) */
    return cxs_ring_outcome(&l->ring, next_batch(l, batch, timeout_ms, &l->ring.err), d);
}

int cxs_mix_loader_cancel(cxs_mix_loader *l) {
    if (!l) return CXS_E_INVALID;
    cxs_ring_cancel(&l->ring);
    return 0;
}

int cxs_mix_loader_reset(cxs_mix_loader *l, uint64_t epoch, uint64_t start) {
    if (!l) return CXS_E_INVALID;
    if (cxs_ring_forked(&l->ring)) {
        int rc = respawn(l, 1);
        if (rc)
            return cxs_ring_outcome(&l->ring, cxs_diagf(&l->ring.err, rc,
                                        "mixture loader: no worker thread could start in this "
                                        "process: %s", cxs_strerror(rc)),
                                    NULL);
    }
    pthread_mutex_lock(&l->ring.mu);
    uint64_t nb = 0;
    int rc = position(l, epoch, start, &nb, &l->ring.err);
    if (!rc) cxs_ring_restart_locked(&l->ring, nb);
    pthread_mutex_unlock(&l->ring.mu);
    return cxs_ring_outcome(&l->ring, rc, NULL);
}

/* ---- the utterance mixture loader --------------------------------------- */

typedef struct uslot {
    float *x;
    int64_t *lengths, *y, *targets, *tlen;
    uint64_t *utts;
    uint32_t *source;
    cxs_utt_batch b;
    cxs_mix_utts pub;
} uslot;

typedef struct uworker {
    struct cxs_mix_utt_loader *l;
    uint64_t epoch, pos; /* what it claimed */
    cxs_pad_ctx *c;      /* per source */
} uworker;

struct cxs_mix_utt_loader {
    const cxs_mix_utt *mix;
    uint32_t n;
    int stalled;       /* the test hook's stall happened (hooks.h) */
    cxs_utt_loader_opts o;
    uint32_t cap;      /* utterances a batch may hold */
    uint64_t lcap;     /* the longest label sequence of any source */
    double **norm;     /* per source: means then scales, or NULL */
    int64_t **map;     /* per source: its label -> source 0's, or NULL */
    uint64_t epoch, start, length; /* under ring.mu */
    uint64_t next_order;           /* under ring.mu: the epoch whose order to build */
    int want_next;                 /* ... when set */
    /* block order (else srcs NULL), under ring.mu: the epoch's windows and
     * groups, each group's state (0: not asked for, 1: asked for, 2: let
     * go), the last window whose groups were asked for and the last whose
     * predecessors' were let go (UINT64_MAX: none yet) */
    cxs_src *srcs;
    cxs_mix_ublocks bv;
    uint8_t *gst;
    uint64_t adv_w, drop_w;
    cxs_ring ring;
    uslot *slots;
    uworker *w;
};

/* Block order: group x of the epoch asked for (WILLNEED), or let go. */
static void ugroup(cxs_mix_utt_loader *l, uint64_t x, int want) {
    const cxs_mix_ugroup *g = &l->bv.grp[x];
    cxs_src *f = &l->srcs[g->src];
    for (uint64_t r = g->r0; r < g->r1; r++) {
        const cxs_mix_urange *u = &l->bv.rng[r];
        if (want) cxs_src_want(f, u->shard, u->off, u->len);
        else cxs_src_evict(f, u->shard, u->off, u->len);
    }
    l->gst[x] = want ? 1 : 2;
}

/* Under ring.mu: a new start or the end: every group asked for and not
 * yet let go goes. */
static void ugroups_let_go(cxs_mix_utt_loader *l) {
    for (uint64_t x = 0; l->gst && x < l->bv.ngrp; x++)
        if (l->gst[x] == 1) ugroup(l, x, 0);
    l->adv_w = l->drop_w = UINT64_MAX;
}

/* Under ring.mu, as batch pos is claimed: the groups its window and the
 * next read, asked for once. */
static void ugroups_claimed(cxs_mix_utt_loader *l, uint64_t pos) {
    uint64_t g;
    int rep;
    if (cxs_mix_ublocks_place(l->mix, &l->bv, pos, &g, &rep) || rep) return;
    const uint64_t k = cxs_mix_ublocks_window(&l->bv, g);
    if (l->adv_w != UINT64_MAX && k + 1 <= l->adv_w) return;
    for (uint64_t x = 0; x < l->bv.ngrp; x++) {
        const cxs_mix_ugroup *gr = &l->bv.grp[x];
        if (!l->gst[x] && gr->first <= k + 1 && gr->last >= k) ugroup(l, x, 1);
    }
    l->adv_w = k + 1;
}

/* The consumer took batch pos: the groups no later window reads go; a
 * repeat (the final round's padding) read the first window's again. */
static void ugroups_taken(cxs_mix_utt_loader *l, uint64_t pos) {
    uint64_t g;
    int rep;
    pthread_mutex_lock(&l->ring.mu);
    if (!cxs_mix_ublocks_place(l->mix, &l->bv, pos, &g, &rep)) {
        const uint64_t k = cxs_mix_ublocks_window(&l->bv, g);
        const int later = l->drop_w == UINT64_MAX || k > l->drop_w;
        for (uint64_t x = 0; (rep || later) && x < l->bv.ngrp; x++) {
            const cxs_mix_ugroup *gr = &l->bv.grp[x];
            if (rep ? gr->first == 0 && l->gst[x] != 1 : l->gst[x] == 1 && gr->last < k)
                ugroup(l, x, 0);
        }
        if (!rep) l->drop_w = k;
    }
    pthread_mutex_unlock(&l->ring.mu);
}

static void uclaim(void *owner, uint32_t w, uint32_t i, uint64_t b, uint64_t gen) {
    cxs_mix_utt_loader *l = owner;
    (void)i, (void)gen;
    l->w[w].epoch = l->epoch;
    l->w[w].pos = l->start + b;
    if (l->srcs) ugroups_claimed(l, l->start + b);
    /* a ring's worth of batches before the epoch's end: the next epoch's
     * order is to be built (uother_work) */
    if (l->start + b == (l->length > l->o.ring ? l->length - l->o.ring : 0))
        l->next_order = l->epoch + 1, l->want_next = 1;
}

/* Under ring.mu, between batches: the next epoch's order built (and kept
 * by the mixture) while the other workers fill the last batches, rather
 * than by the consumer's reset when it gets there.  Advice: a failure
 * changes nothing. */
static int uother_work(void *owner, uint32_t w) {
    cxs_mix_utt_loader *l = owner;
    (void)w;
    if (!l->want_next || l->ring.stop) return 0;
    const uint64_t e = l->next_order;
    l->want_next = 0;
    pthread_mutex_unlock(&l->ring.mu);
    cxs_mix_utt_length(l->mix, e, NULL, NULL);
    pthread_mutex_lock(&l->ring.mu);
    return 1;
}

/* Labels of source src into source 0's numbering (padding left alone). */
static void map_labels(const int64_t *map, int64_t *y, size_t n) {
    if (!map) return;
    for (size_t j = 0; j < n; j++)
        if (y[j] != CXS_UTT_PAD_LABEL) y[j] = map[y[j]];
}

static int ufill(void *owner, uint32_t w, uint32_t i, uint64_t b, uint64_t gen) {
    cxs_mix_utt_loader *l = owner;
    uworker *wk = &l->w[w];
    uslot *s = &l->slots[i];
    cxs_diag *diag = &l->ring.slot[i].diag;
    const uint32_t D = cxs_mix_utt_dataset(l->mix, 0)->meta.dim;
    uint32_t cnt = 0, rep = 0;
    uint64_t g = 0, tmax = 0, lmax = 0, frames = 0;
    stall_hook(&l->ring, &l->stalled, b, gen);
    int rc = cxs_mix_utt_batch(l->mix, wk->epoch, wk->pos, s->utts, s->source, l->cap, &cnt, &g,
                               &rep);
    if (rc) cxs_diagf(diag, rc, "utterance mixture loader: batch %llu: %s",
                      (unsigned long long)wk->pos, cxs_strerror(rc));
    for (uint32_t k = 0; !rc && k < cnt; k++) { /* the batch's longest */
        const cxs_dataset *ds = cxs_mix_utt_dataset(l->mix, s->source[k]);
        cxs_uloc ul;
        if ((rc = cxs_utt_loc_safe(ds, s->utts[k], &ul, diag))) break;
        frames += ul.T;
        if (ul.T > tmax) tmax = ul.T;
        if (l->o.targets) {
            uint64_t q = cxs_longest_seq(ds, s->utts + k, 1);
            if (q > lmax) lmax = q;
        }
    }
    if (!rc && (cnt > l->cap || cnt * tmax > cxs_mix_utt_max_frames(l->mix) || lmax > l->lcap))
        rc = cxs_diagf(diag, CXS_E_CORRUPT, "utterance mixture loader: batch %llu is larger "
                       "than its buffers", (unsigned long long)wk->pos); /* not reached */
    for (uint32_t k0 = 0, k1; !rc && k0 < cnt; k0 = k1) {
        const uint32_t src = s->source[k0];
        for (k1 = k0 + 1; k1 < cnt && s->source[k1] == src; k1++) {
        }
        const cxs_dataset *ds = cxs_mix_utt_dataset(l->mix, src);
        const double *nm = l->norm[src];
        int64_t *y = l->o.labels ? s->y + (size_t)k0 * tmax : NULL;
        rc = cxs_pad_impl(ds, s->utts + k0, k1 - k0, tmax, nm, nm ? nm + D : NULL,
                          !!(l->o.flags & CXS_PAD_PER_UTTERANCE), s->x + (size_t)k0 * tmax * D,
                          s->lengths + k0, y, &wk->c[src], diag);
        if (!rc && y) map_labels(l->map[src], y, (size_t)(k1 - k0) * tmax);
        if (!rc && l->o.targets) {
            int64_t *t = s->targets + (size_t)k0 * lmax;
            rc = cxs_pad_targets_impl(ds, s->utts + k0, k1 - k0, lmax, t, s->tlen + k0);
            if (rc) cxs_diagf(diag, rc, "utterance mixture loader: source %u (%s): the label "
                              "sequences: %s", src, ds->manifest_path, cxs_strerror(rc));
            else map_labels(l->map[src], t, (size_t)(k1 - k0) * lmax);
        }
    }
    s->b = (cxs_utt_batch){s->x, s->lengths, l->o.labels ? s->y : NULL, s->utts, cnt, tmax,
                           frames, wk->pos, g, l->o.targets ? s->targets : NULL,
                           l->o.targets ? s->tlen : NULL, lmax};
    s->pub = (cxs_mix_utts){&s->b, s->source, rep};
    return rc;
}

static void uworker_init(void *owner, uint32_t w) {
    cxs_mix_utt_loader *l = owner;
    for (uint32_t i = 0; i < l->n; i++) cxs_pad_ctx_free(&l->w[w].c[i]);
    l->w[w].l = l;
}

static const cxs_ring_ops mix_utt_ring = {.claim = uclaim, .fill = ufill,
                                          .other_work = uother_work,
                                          .worker_init = uworker_init};

void cxs_mix_utt_loader_free(cxs_mix_utt_loader *l) {
    if (!l) return;
    if (!cxs_ring_forked(&l->ring)) cxs_ring_stop(&l->ring);
    if (l->srcs && !cxs_ring_forked(&l->ring)) ugroups_let_go(l); /* (the workers are gone) */
    cxs_mix_utt_blocks_put(l->mix, &l->bv);
    free(l->gst);
    for (uint32_t i = 0; l->srcs && i < l->n; i++) cxs_src_destroy(&l->srcs[i], 0);
    free(l->srcs);
    cxs_ring_destroy(&l->ring);
    for (uint32_t i = 0; l->slots && i < l->o.ring; i++) {
        uslot *s = &l->slots[i];
        free(s->x), free(s->lengths), free(s->y), free(s->targets), free(s->tlen);
        free(s->utts), free(s->source);
    }
    free(l->slots);
    for (uint32_t t = 0; l->w && t < l->o.threads; t++) {
        for (uint32_t i = 0; l->w[t].c && i < l->n; i++) cxs_pad_ctx_free(&l->w[t].c[i]);
        free(l->w[t].c);
    }
    free(l->w);
    sources_free(l->n, l->norm, l->map);
    free(l);
}

static int uposition(cxs_mix_utt_loader *l, uint64_t epoch, uint64_t start, uint64_t *nb,
                     cxs_diag *d) {
    uint64_t len;
    int rc = cxs_mix_utt_length(l->mix, epoch, NULL, &len);
    if (rc) return cxs_diagf(d, rc, "utterance mixture loader: epoch %llu's order: %s",
                             (unsigned long long)epoch, cxs_strerror(rc));
    if (start > len)
        return cxs_diagf(d, CXS_E_INVALID,
                         "utterance mixture loader: start %llu is past this rank's %llu batches "
                         "of epoch %llu", (unsigned long long)start, (unsigned long long)len,
                         (unsigned long long)epoch);
    if (l->srcs) { /* the new epoch's windows: what the old one asked for goes */
        cxs_mix_ublocks bv;
        if ((rc = cxs_mix_utt_blocks_get(l->mix, epoch, &bv)))
            return cxs_diagf(d, rc, "utterance mixture loader: epoch %llu's order: %s",
                             (unsigned long long)epoch, cxs_strerror(rc));
        uint8_t *gst = calloc(bv.ngrp + 1, 1);
        if (!gst) {
            cxs_mix_utt_blocks_put(l->mix, &bv);
            return cxs_diagf(d, -ENOMEM, "utterance mixture loader: out of memory");
        }
        ugroups_let_go(l);
        cxs_mix_utt_blocks_put(l->mix, &l->bv);
        free(l->gst);
        l->bv = bv, l->gst = gst;
    }
    l->epoch = epoch;
    l->start = start;
    l->length = len;
    *nb = len - start;
    return 0;
}

/* malloc of a * b * c elements of size e, or NULL (also on overflow) */
static void *alloc3(uint64_t a, uint64_t b, uint64_t c, size_t e) {
    if (b && a > SIZE_MAX / e / b) return NULL;
    if (c && a * b > SIZE_MAX / e / c) return NULL;
    return malloc((size_t)(a * b * c * e) + 1);
}

int cxs_mix_utt_loader_create(const cxs_mix_utt *mix, const cxs_utt_loader_opts *opts,
                              uint64_t epoch, uint64_t start, cxs_mix_utt_loader **out,
                              cxs_diag *diag) {
    if (!mix || !opts || !out)
        return cxs_diagf(diag, CXS_E_INVALID,
                         "utterance mixture loader: mixture, options and out must not be NULL");
    int rc = CXS_OPTS_CHECK(opts, "cxs_utt_loader_opts", diag);
    if (rc) return rc;
    if (opts->threads > 256 || opts->ring > 1024)
        return cxs_diagf(diag, CXS_E_INVALID, "utterance mixture loader: threads %u (to 256), "
                         "ring %u (to 1024)", opts->threads, opts->ring);
    if (opts->flags & ~(CXS_GATHER_NORMALIZE | CXS_PAD_PER_UTTERANCE))
        return cxs_diagf(diag, CXS_E_INVALID, "utterance mixture loader: unknown flags 0x%x",
                         opts->flags);
    if (opts->readahead || opts->labels > 1 || opts->targets > 1)
        return cxs_diagf(diag, CXS_E_INVALID, "utterance mixture loader: readahead must be 0, "
                         "labels and targets 0 or 1");
    cxs_mix_utt_loader *l = calloc(1, sizeof *l);
    if (!l) return cxs_diagf(diag, -ENOMEM, "utterance mixture loader: out of memory");
    l->mix = mix;
    l->n = cxs_mix_utt_sources(mix);
    l->o = *opts;
    l->cap = cxs_mix_utt_max_batch(mix);
    const cxs_dataset *dss[CXS_MIX_MAX_SOURCES];
    for (uint32_t i = 0; i < l->n; i++) dss[i] = cxs_mix_utt_dataset(mix, i);
    l->norm = calloc(l->n, sizeof *l->norm);
    l->map = calloc(l->n, sizeof *l->map);
    if (!l->norm || !l->map) rc = cxs_diagf(diag, -ENOMEM, "utterance mixture loader: out of "
                                            "memory");
    if (!rc)
        rc = check_sources(dss, l->n, (int)l->o.labels, (int)l->o.targets, l->o.flags, l->o.norm,
                           l->norm, l->map, "utterance mixture loader", diag);
    l->o.norm = NULL; /* copied: the caller's may go */
    for (uint32_t i = 0; !rc && l->o.targets && i < l->n; i++) {
        cxs_info inf;
        cxs_dataset_info(dss[i], &inf);
        if (inf.max_seq_length > l->lcap) l->lcap = inf.max_seq_length;
    }
    if (!l->o.threads) l->o.threads = cxs_default_threads();
    if (!l->o.ring) l->o.ring = l->o.threads + 2;
    if (l->o.ring < 3) l->o.ring = 3;
    if (!rc && (rc = cxs_ring_init(&l->ring, &mix_utt_ring, l, l->o.ring, l->o.threads, 0)))
        cxs_diagf(diag, rc, "utterance mixture loader: out of memory");
    if (!rc) {
        const uint64_t F = cxs_mix_utt_max_frames(mix), D = dss[0]->meta.dim, C = l->cap;
        l->slots = calloc(l->o.ring, sizeof *l->slots);
        l->w = calloc(l->o.threads, sizeof *l->w);
        if (!l->slots || !l->w) rc = -ENOMEM;
        for (uint32_t t = 0; !rc && t < l->o.threads; t++)
            if (!(l->w[t].c = calloc(l->n, sizeof *l->w[t].c))) rc = -ENOMEM;
        for (uint32_t i = 0; !rc && i < l->o.ring; i++) {
            uslot *s = &l->slots[i];
            s->x = alloc3(F, D, 1, sizeof *s->x);
            s->lengths = alloc3(C, 1, 1, sizeof *s->lengths);
            s->utts = alloc3(C, 1, 1, sizeof *s->utts);
            s->source = alloc3(C, 1, 1, sizeof *s->source);
            if (l->o.labels) s->y = alloc3(F, 1, 1, sizeof *s->y);
            if (l->o.targets) {
                s->targets = alloc3(C, l->lcap, 1, sizeof *s->targets);
                s->tlen = alloc3(C, 1, 1, sizeof *s->tlen);
            }
            if (!s->x || !s->lengths || !s->utts || !s->source || (l->o.labels && !s->y) ||
                (l->o.targets && (!s->targets || !s->tlen)))
                rc = -ENOMEM;
        }
        if (rc) cxs_diagf(diag, rc, "utterance mixture loader: out of memory for %u batch "
                          "buffers", l->o.ring);
    }
    if (!rc && cxs_mix_utt_block(mix)) { /* each source's blocks asked for and let go */
        l->adv_w = l->drop_w = UINT64_MAX;
        if (!(l->srcs = calloc(l->n, sizeof *l->srcs))) rc = -ENOMEM;
        for (uint32_t i = 0; !rc && i < l->n; i++)
            rc = cxs_src_init(&l->srcs[i], dss[i], CXS_SRC_FDS);
        if (rc) cxs_diagf(diag, rc, "utterance mixture loader: out of memory");
        for (uint32_t i = 0; !rc && i < l->n; i++) cxs_features_random(dss[i]);
    }
    if (!rc) rc = uposition(l, epoch, start, &l->ring.nbatches, diag);
    if (!rc && (rc = cxs_ring_start(&l->ring)))
        cxs_diagf(diag, rc, "utterance mixture loader: no worker thread could be started");
    if (rc) {
        cxs_mix_utt_loader_free(l);
        return rc;
    }
    *out = l;
    return 0;
}

const cxs_diag *cxs_mix_utt_loader_error(const cxs_mix_utt_loader *l) {
    return l ? &l->ring.err : NULL;
}

static int unext(cxs_mix_utt_loader *l, const cxs_mix_utts **batch, uint32_t ms, cxs_diag *d) {
    if (!l || !batch)
        return cxs_diagf(d, CXS_E_INVALID, "utterance mixture loader: no loader or batch "
                         "pointer");
    if (l->srcs && cxs_ring_forked(&l->ring))
        for (uint32_t s = 0; s < l->n; s++) cxs_src_after_fork(&l->srcs[s]);
    uint32_t i = 0;
    int rc = ring_take(&l->ring, "utterance mixture loader", "cxs_mix_utt_loader_cancel", &i,
                       ms, &l->ring.err);
    *batch = rc == 0 ? &l->slots[i].pub : NULL;
    if (rc == 0 && l->srcs) ugroups_taken(l, (*batch)->batch->index);
    return cxs_ring_outcome(&l->ring, rc == 1 ? 0 : rc, d);
}

int cxs_mix_utt_loader_next(cxs_mix_utt_loader *l, const cxs_mix_utts **batch, cxs_diag *d) {
    return unext(l, batch, CXS_RING_FOREVER, d);
}

int cxs_mix_utt_loader_next_timed(cxs_mix_utt_loader *l, const cxs_mix_utts **batch,
                                  uint32_t timeout_ms, cxs_diag *d) {
    if (timeout_ms == CXS_RING_FOREVER) timeout_ms--; /* (a limit, as asked) */
    return unext(l, batch, timeout_ms, d);
}

int cxs_mix_utt_loader_cancel(cxs_mix_utt_loader *l) {
    if (!l) return CXS_E_INVALID;
    cxs_ring_cancel(&l->ring);
    return 0;
}

int cxs_mix_utt_loader_reset(cxs_mix_utt_loader *l, uint64_t epoch, uint64_t start) {
    if (!l) return CXS_E_INVALID;
    int frc;
    if (l->srcs && cxs_ring_forked(&l->ring))
        for (uint32_t s = 0; s < l->n; s++) cxs_src_after_fork(&l->srcs[s]);
    if (cxs_ring_forked(&l->ring) && (frc = ring_respawn(&l->ring, 1)))
        return cxs_ring_outcome(&l->ring, cxs_diagf(&l->ring.err, frc,
                                    "utterance mixture loader: no worker thread could start in "
                                    "this process: %s", cxs_strerror(frc)),
                                NULL);
    /* the epoch's order outside the ring's lock (building it is O(epoch)) */
    uint64_t len;
    int rc = cxs_mix_utt_length(l->mix, epoch, NULL, &len);
    if (rc) return cxs_ring_outcome(&l->ring, cxs_diagf(&l->ring.err, rc, "utterance mixture "
                                    "loader: epoch %llu's order: %s", (unsigned long long)epoch,
                                    cxs_strerror(rc)), NULL);
    pthread_mutex_lock(&l->ring.mu);
    uint64_t nb = 0;
    rc = uposition(l, epoch, start, &nb, &l->ring.err);
    if (!rc) cxs_ring_restart_locked(&l->ring, nb);
    pthread_mutex_unlock(&l->ring.mu);
    return cxs_ring_outcome(&l->ring, rc, NULL);
}

/* For position.c: both mixtures' starts count this rank's batches. */
void cxs_mix_loader_place(const cxs_mix_loader *l, cxs_place *w) {
    *w = (cxs_place){l->epoch, l->start, 1, l->ring.next_take, l->ring.nbatches};
}

void cxs_mix_utt_loader_place(const cxs_mix_utt_loader *l, cxs_place *w) {
    *w = (cxs_place){l->epoch, l->start, 1, l->ring.next_take, l->ring.nbatches};
}
