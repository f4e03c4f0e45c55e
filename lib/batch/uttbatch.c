/* uttbatch.c - padded batches of whole utterances, and the prefetching
 * utterance loader on the batch ring (ring.h) the frame loader uses too,
 * one batch per worker at a time: a batch of whole utterances is small
 * enough that the first one needs no sharing between workers. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"
#include "buckets.h"
#include "cxs_convert.h"
#include "cxs_le.h"
#include "dataset_internal.h"
#include "fault.h"
#include "gather.h"
#include "position.h"
#include "ring.h"
#include "source.h"

void cxs_pad_ctx_free(cxs_pad_ctx *c) {
    cxs_zreader_free(&c->zr);
    cxs_qdec_free(&c->q);
    free(c->stage);
    c->stage = NULL;
    c->stage_bytes = 0;
}

/* Utterance u into x[tmax][D] (zero after its T rows), its labels into
 * y[tmax] (CXS_UTT_PAD_LABEL after them) when y is not NULL.  A damaged
 * block (blocksrc.h) sets *bfail and says which in bd. */
static int pad_one(const cxs_dataset *ds, uint64_t u, uint64_t tmax, const double *mean,
                   const double *scale, int cmvn, float *x, int64_t *y, cxs_pad_ctx *c,
                   cxs_where *w, cxs_diag *bd, int *bfail) {
    const uint32_t D = ds->meta.dim;
    int lrc = cxs_utt_check(ds, u, NULL);
    if (lrc) return lrc;
    const cxs_uloc ul = cxs_utt_at(ds, u);
    const uint64_t T = ul.T;
    const uint32_t s = ul.shard;
    const shard *sh = &ds->shards[s];
    const size_t n = (size_t)T * D;
    /* nothing of a block is served before it is checked: its rows, and
     * its labels when asked for */
    int brc = cxs_bsrc_rows(ds, s, ul.row, T, bd);
    if (!brc && y) brc = cxs_bsrc_labels(ds, s, ul.f0 - sh->f_start, T, bd);
    if (brc) return *bfail = 1, brc;
    const int f32 = ds->meta.dtype == CXS_DTYPE_F32 && cxs_host_is_le();
    const uint8_t *src;
    if (f32) { /* rows land in x as they are */
        int rc = cxs_read_rows(ds, &c->zr, s, ul.row, T, (uint8_t *)x);
        if (rc) return w->chunk = c->zr.bad_chunk, w->offset = c->zr.bad_offset, rc;
        src = NULL;
    } else if (!cxs_compressed(ds)) {
        src = sh->features + ul.row * ds->row_bytes;
    } else {
        size_t need = (size_t)(T * ds->row_bytes);
        if (c->stage_bytes < need) {
            free(c->stage);
            c->stage_bytes = (c->stage = malloc(need)) ? need : 0;
            if (!c->stage) return -ENOMEM;
        }
        int rc = cxs_read_rows(ds, &c->zr, s, ul.row, T, c->stage);
        if (rc) return w->chunk = c->zr.bad_chunk, w->offset = c->zr.bad_offset, rc;
        src = c->stage;
    }
    /* a coded dtype's header, checked at its first use */
    if (c->q.dtype && (brc = cxs_qdec_utt(&c->q, ds, s, ul.lu, bd))) return *bfail = 1, brc;
    /* the frame gather's conversion and arithmetic (spec section 7.4) */
    if (src) cxs_convert_rows(ds, &c->q, src, (size_t)T, x, mean, scale);
    else if (mean) cxs_normalize_rows(D, x, (size_t)T, mean, scale);
    if (cmvn && T) {
        for (uint32_t d = 0; d < D; d++) {
            double m = 0, q = 0;
            for (uint64_t t = 0; t < T; t++) m += x[t * D + d];
            m /= (double)T;
            for (uint64_t t = 0; t < T; t++) {
                double e = x[t * D + d] - m;
                q += e * e;
            }
            q /= (double)T;
            double k = q > 0 ? 1.0 / sqrt(q) : 1.0;
            for (uint64_t t = 0; t < T; t++) x[t * D + d] = (float)((x[t * D + d] - m) * k);
        }
    }
    if (tmax > T) memset(x + n, 0, (size_t)(tmax - T) * D * sizeof *x);
    if (y) {
        uint64_t l0 = ul.f0 - sh->f_start;
        const uint32_t V = ds->meta.vocab_size;
        for (uint64_t t = 0; t < T; t++) {
            uint32_t l = cxs_shard_label(sh, l0 + t);
            if (V && l >= V) { /* damaged: never served */
                w->bad_label = 1;
                w->label = l;
                w->frame = ul.f0 + t;
                return CXS_E_CORRUPT;
            }
            y[t] = l;
        }
        for (uint64_t t = T; t < tmax; t++) y[t] = CXS_UTT_PAD_LABEL;
    }
    return 0;
}

typedef struct pad_arg {
    const cxs_dataset *ds;
    const uint64_t *utts;
    size_t n;
    uint64_t tmax;
    const double *mean, *scale;
    int cmvn;
    float *x;
    int64_t *lengths, *y;
    cxs_pad_ctx *c;
    volatile size_t at; /* the utterance at work: read after a fault's jump */
    cxs_where w;
    int bfail;          /* a damaged block: its message in bd */
    cxs_diag bd;
} pad_arg;

/* In a recovery region (fault.h): it reads the mapping. */
static int pad_all(void *p) {
    pad_arg *a = p;
    const cxs_dataset *ds = a->ds;
    const size_t row = (size_t)a->tmax * ds->meta.dim;
    for (size_t i = 0; i < a->n; i++) {
        a->at = i;
        int rc = pad_one(ds, a->utts[i], a->tmax, a->mean, a->scale, a->cmvn, a->x + i * row,
                         a->y ? a->y + i * a->tmax : NULL, a->c, &a->w, &a->bd, &a->bfail);
        if (rc) return rc;
        a->lengths[i] = (int64_t)cxs_utt_frames(ds, a->utts[i]); /* checked by pad_one */
    }
    return 0;
}

/* A failure in the data gets a message in d (may be NULL) naming the
 * shard, the utterance and the chunk. */
int cxs_pad_impl(const cxs_dataset *ds, const uint64_t *utts, size_t n, uint64_t tmax,
                 const double *mean, const double *scale, int cmvn, float *x, int64_t *lengths,
                 int64_t *y, cxs_pad_ctx *c, cxs_diag *d) {
    pad_arg a = {.ds = ds, .utts = utts, .n = n, .tmax = tmax, .mean = mean, .scale = scale,
                 .cmvn = cmvn, .x = x, .lengths = lengths, .y = y, .c = c, .at = 0,
                 .w = CXS_WHERE_NONE};
    cxs_fault f = {UINT32_MAX, 0};
    int rc = cxs_qdec_init(&c->q, ds->meta.dtype, ds->meta.dim);
    if (!rc) rc = cxs_fault_run(ds, pad_all, &a, &f);
    if (rc && a.bfail) {
        cxs_diag_copy(d, rc, &a.bd);
    } else if (rc && rc != -ENOMEM) {
        uint64_t u = utts[a.at];
        a.w.utt = u;
        a.w.shard = cxs_utt_shard(ds, u);
        if (rc == CXS_E_TRUNCATED && a.w.chunk == UINT64_MAX) {
            a.w.shard = f.shard;
            a.w.offset = f.offset;
        }
        cxs_where_diag(ds, rc, &a.w, d);
    }
    return rc;
}

#define PAD_FLAGS (CXS_GATHER_NORMALIZE | CXS_PAD_PER_UTTERANCE)

/* The normalisation constants flags and norm ask for, or NULL. */
static int norm_for(const cxs_dataset *ds, uint32_t flags, const cxs_norm *norm, double **c,
                    cxs_diag *d) {
    *c = NULL;
    if (!(flags & CXS_GATHER_NORMALIZE)) return 0;
    return cxs_norm_constants(ds, norm, c, d);
}

int cxs_dataset_pad_batch(const cxs_dataset *ds, const uint64_t *utts, size_t n, uint64_t tmax,
                          uint32_t flags, const cxs_norm *norm, float *x, int64_t *lengths,
                          int64_t *y) {
    return cxs_dataset_pad_batch_ex(ds, utts, n, tmax, flags, norm, x, lengths, y, NULL);
}

int cxs_dataset_pad_batch_ex(const cxs_dataset *ds, const uint64_t *utts, size_t n, uint64_t tmax,
                             uint32_t flags, const cxs_norm *norm, float *x, int64_t *lengths,
                             int64_t *y, cxs_diag *d) {
    if (!ds || (n && (!utts || !x || !lengths)) || (flags & ~PAD_FLAGS))
        return cxs_diagf(d, CXS_E_INVALID, "pad_batch: a NULL argument or unknown flags");
    if (cxs_src_streamed(ds)) return cxs_streamed_refuse(ds, "pad_batch", d);
    if (y && !ds->meta.label_width)
        return cxs_diagf(d, CXS_E_NO_LABELS, "pad_batch: labels asked of a dataset that has none");
    uint64_t longest = 0;
    for (size_t i = 0; i < n; i++) {
        if (utts[i] >= ds->meta.num_utterances)
            return cxs_diagf(d, CXS_E_RANGE, "pad_batch: utterance %llu is past the dataset's %llu",
                             (unsigned long long)utts[i],
                             (unsigned long long)ds->meta.num_utterances);
        cxs_uloc l;
        int rc = cxs_utt_loc_safe(ds, utts[i], &l, d);
        if (rc) return rc;
        if (l.T > longest) longest = l.T;
    }
    if (!tmax) tmax = longest;
    if (longest > tmax)
        return cxs_diagf(d, CXS_E_RANGE, "pad_batch: an utterance of %llu frames is past tmax %llu",
                         (unsigned long long)longest, (unsigned long long)tmax);
    double *c;
    int rc = norm_for(ds, flags, norm, &c, d);
    if (rc) return rc;
    cxs_pad_ctx pc = {0};
    rc = cxs_pad_impl(ds, utts, n, tmax, c, c ? c + ds->meta.dim : NULL,
                   !!(flags & CXS_PAD_PER_UTTERANCE), x, lengths, y, &pc, d);
    cxs_pad_ctx_free(&pc);
    free(c);
    return rc;
}

/* The label sequences of utts as targets[n][lmax] (CXS_UTT_PAD_LABEL after
 * each) and their lengths; lmax at least the longest (checked by callers). */
int cxs_pad_targets_impl(const cxs_dataset *ds, const uint64_t *utts, size_t n, uint64_t lmax,
                         int64_t *targets, int64_t *target_lengths) {
    for (size_t i = 0; i < n; i++) {
        int64_t *row = targets + i * lmax;
        uint32_t len;
        int rc = cxs_dataset_label_seq(ds, utts[i], row, (uint32_t)lmax, &len);
        if (rc) return rc;
        for (uint64_t j = len; j < lmax; j++) row[j] = CXS_UTT_PAD_LABEL;
        target_lengths[i] = len;
    }
    return 0;
}

/* The longest label sequence of utts. */
uint64_t cxs_longest_seq(const cxs_dataset *ds, const uint64_t *utts, size_t n) {
    uint64_t longest = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t len = 0;
        if (!cxs_dataset_label_seq(ds, utts[i], NULL, 0, &len) && len > longest) longest = len;
    }
    return longest;
}

int cxs_dataset_pad_targets(const cxs_dataset *ds, const uint64_t *utts, size_t n, uint64_t lmax,
                            int64_t *targets, int64_t *target_lengths) {
    if (!ds || (n && (!utts || !targets || !target_lengths))) return CXS_E_INVALID;
    if (!ds->has_seqs) return CXS_E_NO_SEQUENCES;
    for (size_t i = 0; i < n; i++)
        if (utts[i] >= ds->meta.num_utterances) return CXS_E_RANGE;
    uint64_t longest = cxs_longest_seq(ds, utts, n);
    if (!lmax) lmax = longest;
    if (longest > lmax || lmax > UINT32_MAX) return CXS_E_RANGE;
    return cxs_pad_targets_impl(ds, utts, n, lmax, targets, target_lengths);
}

/* ---- the loader -------------------------------------------------------- */

/* A slot's buffers and the batch handed out from them; its state, code
 * and message are the ring's (ring.slot[i]). */
typedef struct uslot {
    float *x;
    int64_t *lengths, *y;
    int64_t *targets, *tlen; /* opts.targets: [cap][seq_max], [cap] */
    uint64_t *utts;
    cxs_utt_batch pub;
} uslot;

/* A worker's own: its decoder and staging, and what it claimed under the
 * lock for its fill (the batch's utterances are in its slot). */
typedef struct uworker {
    cxs_pad_ctx c;
    uint64_t pos, g, n;  /* the batch's position, global position, utterances */
    cxs_utt_range *adv;  /* block mode: ranges to advise, or NULL */
    uint64_t nadv;
    cxs_src src;         /* this worker's holds (a streamed dataset), while it copies */
    cxs_src_batch held;  /* the batch's ranges it holds */
} uworker;

/* A streamed dataset (CXS_OPEN_STREAM), block mode: the block source's
 * fetch-ahead (cxs_src_want of the consumer's source) fetches the groups'
 * ranges as the first batch of each group asks for the next group (where
 * a local dataset's pages are advised), so that the workers, who hold
 * their batch's bytes while they copy them (cxs_src_batch_hold fetches
 * what is still missing), mostly find them there; the consumer evicts a
 * group's blocks once it is past it (when the cache is over its limit). */
struct cxs_utt_loader {
    const cxs_dataset *ds;
    const cxs_utt_sampler *sampler;
    cxs_utt_loader_opts o;
    double *norm; /* means then scales, or NULL */
    uint32_t cap; /* utterances a slot holds */
    uint64_t max_frames;
    uint64_t epoch, start; /* under ring.mu */
    cxs_utt_plan *plan; /* the epoch's, under ring.mu */
    uint64_t advised;   /* block mode: the last group asked for, UINT64_MAX: none */
    uint64_t dropped;   /* block mode, the consumer's: groups below this were let go */
    cxs_src src;        /* block mode, the consumer's: to let a group's blocks go,
                           and to ask for the next group's (from the workers) */
    cxs_ring ring;
    uslot *slots; /* o.ring of them, beside ring.slot */
    uworker *w;   /* in the loader so that a forked child frees what they held */
};

/* Under the lock: the batch's utterances are copied now, since a reset
 * may drop the plan as soon as the lock is released. */
static void uclaim(void *owner, uint32_t w, uint32_t i, uint64_t b, uint64_t gen) {
    cxs_utt_loader *l = owner;
    uworker *wk = &l->w[w];
    uslot *s = &l->slots[i];
    (void)gen;
    const cxs_utt_plan *p = l->plan;
    wk->pos = l->start + b;
    wk->g = cxs_utt_plan_global(l->sampler, p, wk->pos);
    wk->n = cxs_utt_plan_batch(p, wk->g, s->utts);
    /* Block mode: the first batch of a group asks the kernel for the
     * next group's blocks (and its own, after a start), so that they
     * are read sequentially while this one is served. */
    wk->adv = NULL;
    wk->nadv = 0;
    if (p->ngroups && l->o.readahead != CXS_READAHEAD_OFF) {
        uint64_t k = cxs_utt_plan_group(p, wk->g), hi = k + 1 < p->ngroups ? k + 1 : k;
        if (l->advised == UINT64_MAX || hi > l->advised) {
            uint64_t lo = l->advised != UINT64_MAX && l->advised + 1 > k ? l->advised + 1 : k;
            uint64_t nadv = p->rstart[hi + 1] - p->rstart[lo];
            if (nadv && (wk->adv = malloc(nadv * sizeof *wk->adv))) {
                memcpy(wk->adv, p->rng + p->rstart[lo], nadv * sizeof *wk->adv);
                wk->nadv = nadv;
            }
            l->advised = hi;
        }
    }
}

static int ufill(void *owner, uint32_t w, uint32_t i, uint64_t b, uint64_t gen) {
    cxs_utt_loader *l = owner;
    uworker *wk = &l->w[w];
    uslot *s = &l->slots[i];
    cxs_diag *diag = &l->ring.slot[i].diag;
    const cxs_dataset *ds = l->ds;
    const uint64_t n = wk->n;
    (void)b, (void)gen;
    if (wk->adv) {
        for (uint64_t j = 0; j < wk->nadv; j++)
            cxs_src_want(&l->src, wk->adv[j].shard, wk->adv[j].off, wk->adv[j].len);
        free(wk->adv);
        wk->adv = NULL;
    }
    uint64_t tmax = 0, frames = 0;
    int lrc = 0;
    for (uint64_t j = 0; j < n; j++) {
        cxs_uloc ul;
        if ((lrc = cxs_utt_loc_safe(ds, s->utts[j], &ul, diag))) break;
        frames += ul.T;
        if (ul.T > tmax) tmax = ul.T;
    }
    if (!lrc) diag->message[0] = 0;
    if (!lrc) lrc = cxs_src_batch_hold(&wk->src, &wk->held, s->utts, n, &l->ring.stop, diag);
    int rc = lrc ? lrc : n > l->cap || n * tmax > l->max_frames
                 ? CXS_E_CORRUPT /* not reached: the sampler sized them */
                 : cxs_pad_impl(ds, s->utts, n, tmax, l->norm, l->norm ? l->norm + ds->meta.dim : NULL,
                             !!(l->o.flags & CXS_PAD_PER_UTTERANCE), s->x, s->lengths,
                             l->o.labels ? s->y : NULL, &wk->c, diag);
    cxs_src_batch_release(&wk->src, &wk->held);
    uint64_t lmax = 0;
    if (!rc && l->o.targets) {
        lmax = cxs_longest_seq(ds, s->utts, n);
        rc = cxs_pad_targets_impl(ds, s->utts, n, lmax, s->targets, s->tlen);
    }
    s->pub = (cxs_utt_batch){s->x, s->lengths, l->o.labels ? s->y : NULL, s->utts, (size_t)n,
                             tmax, frames, wk->pos, wk->g, l->o.targets ? s->targets : NULL,
                             l->o.targets ? s->tlen : NULL, lmax};
    return rc;
}

static void uworker_init(void *owner, uint32_t w) {
    cxs_utt_loader *l = owner;
    uworker *wk = &l->w[w];
    cxs_pad_ctx_free(&wk->c); /* in a forked child: what a parent thread held */
    free(wk->adv);
    wk->adv = NULL;
    cxs_src_after_fork(&wk->src); /* (a forked child's: the parent's locks stay) */
    wk->held.n = 0;
}

/* A streamed dataset's fetches in flight (the helper's and the workers')
 * end at a cancel. */
static void ucancel(void *owner, int on) {
    cxs_utt_loader *l = owner;
    if (!cxs_src_streamed(l->ds)) return;
    cxs_src_cancel(&l->src, on);
    for (uint32_t t = 0; l->w && t < l->o.threads; t++) cxs_src_cancel(&l->w[t].src, on);
}

static const cxs_ring_ops utt_ring = {.claim = uclaim, .fill = ufill, .worker_init = uworker_init,
                                      .cancel = ucancel};

void cxs_utt_loader_free(cxs_utt_loader *l) {
    if (!l) return;
    const int forked = cxs_ring_forked(&l->ring);
    if (!forked) cxs_ring_stop(&l->ring); /* a forked child has none to join */
    cxs_ring_destroy(&l->ring);
    for (uint32_t t = 0; l->w && t < l->o.threads; t++) {
        cxs_src_destroy(&l->w[t].src, forked);
        cxs_src_batch_free(&l->w[t].held);
    }
    for (uint32_t i = 0; l->slots && i < l->o.ring; i++) {
        free(l->slots[i].x);
        free(l->slots[i].lengths);
        free(l->slots[i].y);
        free(l->slots[i].targets);
        free(l->slots[i].tlen);
        free(l->slots[i].utts);
    }
    free(l->slots);
    for (uint32_t t = 0; l->w && t < l->o.threads; t++) cxs_pad_ctx_free(&l->w[t].c);
    free(l->w);
    if (l->plan) cxs_utt_plan_put(l->sampler, l->plan);
    cxs_src_destroy(&l->src, forked);
    free(l->norm);
    free(l);
}

/* Under the lock (or before the workers start): the plan and batch count
 * of (epoch, start). */
static int position(cxs_utt_loader *l, uint64_t epoch, uint64_t start, uint64_t *nbatches,
                    cxs_diag *d) {
    cxs_utt_plan *p;
    int rc = cxs_utt_plan_get(l->sampler, epoch, &p);
    if (rc) return cxs_diagf(d, rc, "utterance loader: the order of epoch %llu: %s",
                             (unsigned long long)epoch, cxs_strerror(rc));
    uint64_t len = cxs_utt_plan_length(l->sampler, p);
    if (start > len) {
        cxs_utt_plan_put(l->sampler, p);
        return cxs_diagf(d, CXS_E_INVALID,
                         "utterance loader: start %llu is past this rank's %llu batches of "
                         "epoch %llu",
                         (unsigned long long)start, (unsigned long long)len,
                         (unsigned long long)epoch);
    }
    if (l->plan) cxs_utt_plan_put(l->sampler, l->plan);
    l->plan = p;
    l->epoch = epoch;
    l->start = start;
    *nbatches = len - start;
    l->advised = UINT64_MAX;
    /* nothing before the start's group was read for this start */
    l->dropped = p->ngroups && start < len
                     ? cxs_utt_plan_group(p, cxs_utt_plan_global(l->sampler, p, start))
                     : p->ngroups;
    return 0;
}

/* The consumer's, block mode: it took global batch g, so every batch of
 * this rank in the groups before g's is served (in order) and their
 * blocks go from the page cache, the next group having been asked for
 * ahead (uclaim): at most the group being served and the next are kept,
 * whatever the epoch's size. */
static void let_go(cxs_utt_loader *l, uint64_t g) {
    const cxs_utt_plan *p = l->plan;
    if (!p || !p->ngroups || !l->src.fds.fds) return;
    uint64_t k = cxs_utt_plan_group(p, g);
    for (; l->dropped < k && l->dropped < p->ngroups; l->dropped++)
        for (uint64_t r = p->rstart[l->dropped]; r < p->rstart[l->dropped + 1]; r++)
            cxs_src_evict(&l->src, p->rng[r].shard, p->rng[r].off, p->rng[r].len);
}

/* The options' own checks, each named. */
static int check_opts(const cxs_dataset *ds, const cxs_utt_loader_opts *o, cxs_diag *d) {
    int rc = CXS_OPTS_CHECK(o, "cxs_utt_loader_opts", d);
    if (rc) return rc;
    if (o->threads > 256)
        return cxs_diagf(d, CXS_E_INVALID, "utterance loader: threads %u (0 to 256; 0: min(CPUs, 4))",
                         o->threads);
    if (o->ring > 1024)
        return cxs_diagf(d, CXS_E_INVALID, "utterance loader: ring %u (0 to 1024; 0: threads + 2)",
                         o->ring);
    if (o->flags & ~PAD_FLAGS)
        return cxs_diagf(d, CXS_E_INVALID,
                         "utterance loader: unknown flags 0x%x (CXS_GATHER_NORMALIZE, "
                         "CXS_PAD_PER_UTTERANCE)",
                         o->flags & ~PAD_FLAGS);
    if (o->labels > 1 || o->targets > 1)
        return cxs_diagf(d, CXS_E_INVALID, "utterance loader: labels and targets are 0 or 1");
    if (o->readahead > CXS_READAHEAD_OFF)
        return cxs_diagf(d, CXS_E_INVALID,
                         "utterance loader: readahead %u (0, or CXS_READAHEAD_OFF)", o->readahead);
    if (o->labels && !ds->meta.label_width)
        return cxs_diagf(d, CXS_E_NO_LABELS,
                         ds->has_seqs ? "utterance loader: per-frame labels asked of a dataset of "
                                        "label sequences only (ask for the targets)"
                                      : "utterance loader: labels asked of a features-only "
                                        "dataset");
    if (o->targets && !ds->has_seqs)
        return cxs_diagf(d, CXS_E_NO_SEQUENCES,
                         "utterance loader: targets (label sequences) asked of a dataset without "
                         "them (pack it with --transcripts sequence or both)");
    return 0;
}

void cxs_utt_loader_opts_init(cxs_utt_loader_opts *o) { memset(o, 0, sizeof *o); }

int cxs_utt_loader_create(const cxs_dataset *ds, const cxs_utt_sampler *sampler,
                          const cxs_utt_loader_opts *opts, uint64_t epoch, uint64_t start,
                          cxs_utt_loader **out) {
    return cxs_utt_loader_create_ex(ds, sampler, opts, epoch, start, out, NULL);
}

int cxs_utt_loader_create_ex(const cxs_dataset *ds, const cxs_utt_sampler *sampler,
                             const cxs_utt_loader_opts *opts, uint64_t epoch, uint64_t start,
                             cxs_utt_loader **out, cxs_diag *diag) {
    if (!ds || !sampler || !opts || !out)
        return cxs_diagf(diag, CXS_E_INVALID,
                         "utterance loader: dataset, sampler, options and out must not be NULL");
    int rc = check_opts(ds, opts, diag);
    if (rc) return rc;
    cxs_utt_loader *l = calloc(1, sizeof *l);
    if (!l) return cxs_diagf(diag, -ENOMEM, "utterance loader: out of memory");
    l->ds = ds;
    l->sampler = sampler;
    l->o = *opts;
    l->o.norm = NULL; /* copied: the caller's may go */
    rc = norm_for(ds, opts->flags, opts->norm, &l->norm, diag);
    if (rc) {
        free(l);
        return rc;
    }
    if (!l->o.threads) l->o.threads = cxs_default_threads();
    if (!l->o.ring) l->o.ring = l->o.threads + 2;
    if (l->o.ring < 3) l->o.ring = 3;
    l->cap = cxs_utt_sampler_max_batch(sampler);
    l->max_frames = cxs_utt_sampler_max_frames(sampler);
    rc = cxs_ring_init(&l->ring, &utt_ring, l, l->o.ring, l->o.threads, 0);
    l->slots = calloc(l->o.ring, sizeof *l->slots);
    l->w = calloc(l->o.threads, sizeof *l->w);
    if (!rc && !(l->slots && l->w)) rc = -ENOMEM;
    if (!rc) rc = cxs_src_init(&l->src, ds, CXS_SRC_FDS | CXS_SRC_AHEAD);
    for (uint32_t t = 0; !rc && t < l->o.threads; t++) rc = cxs_src_init(&l->w[t].src, ds, 0);
    if (!rc && l->max_frames > SIZE_MAX / sizeof(float) / (ds->meta.dim ? ds->meta.dim : 1))
        rc = -ENOMEM;
    if (!rc && l->o.targets && ds->seq_max > SIZE_MAX / sizeof(int64_t) / (l->cap ? l->cap : 1))
        rc = -ENOMEM;
    for (uint32_t i = 0; !rc && i < l->o.ring; i++) {
        uslot *s = &l->slots[i];
        s->x = malloc((size_t)l->max_frames * ds->meta.dim * sizeof *s->x + 1);
        s->lengths = malloc((size_t)l->cap * sizeof *s->lengths);
        s->utts = malloc((size_t)l->cap * sizeof *s->utts);
        if (l->o.labels) s->y = malloc((size_t)l->max_frames * sizeof *s->y + 1);
        if (l->o.targets) {
            s->targets = malloc((size_t)l->cap * ds->seq_max * sizeof *s->targets + 1);
            s->tlen = malloc((size_t)l->cap * sizeof *s->tlen);
        }
        if (!s->x || !s->lengths || !s->utts || (l->o.labels && !s->y) ||
            (l->o.targets && (!s->targets || !s->tlen)))
            rc = -ENOMEM;
    }
    if (rc) cxs_diagf(diag, rc, "utterance loader: out of memory for %u batch buffers of %llu "
                      "frames", l->o.ring, (unsigned long long)l->max_frames);
    if (!rc) rc = position(l, epoch, start, &l->ring.nbatches, diag);
    if (!rc && cxs_src_streamed(ds) && (!l->plan->ngroups || l->o.readahead == CXS_READAHEAD_OFF))
        rc = cxs_streamed_refuse(ds, "an utterance loader not in block mode (memory_bytes) or "
                                 "with readahead off", diag);
    if (!rc && l->plan->ngroups && l->o.readahead != CXS_READAHEAD_OFF) {
        cxs_features_random(ds); /* block mode reads each group ahead (shardfd.h) */
    }
    if (!rc && (rc = cxs_ring_start(&l->ring)))
        cxs_diagf(diag, rc, "utterance loader: no worker thread could be started");
    if (rc) {
        cxs_utt_loader_free(l);
        return rc;
    }
    *out = l;
    return 0;
}

/* The first call in a forked child: fresh locks and workers, at the
 * consumer's position (drop_held: at the start). */
static int respawn(cxs_utt_loader *l, int drop_held) {
    cxs_src_after_fork(&l->src); /* (and its fetch-ahead: the parent's is not the child's) */
    cxs_ring_after_fork(&l->ring, drop_held);
    int rc = cxs_ring_start(&l->ring);
    if (!rc) cxs_ring_adopt(&l->ring);
    return rc;
}

const cxs_diag *cxs_utt_loader_error(const cxs_utt_loader *l) { return l ? &l->ring.err : NULL; }

int cxs_utt_loader_next(cxs_utt_loader *l, const cxs_utt_batch **batch) {
    return cxs_utt_loader_next_ex(l, batch, NULL);
}

static int next_batch(cxs_utt_loader *l, const cxs_utt_batch **batch, uint32_t ms,
                      cxs_diag *d);

int cxs_utt_loader_next_ex(cxs_utt_loader *l, const cxs_utt_batch **batch, cxs_diag *d) {
    if (!l || !batch)
        return cxs_diagf(d, CXS_E_INVALID, "utterance loader: no loader or batch pointer");
    return cxs_ring_outcome(&l->ring, next_batch(l, batch, CXS_RING_FOREVER, &l->ring.err), d);
}

int cxs_utt_loader_next_timed(cxs_utt_loader *l, const cxs_utt_batch **batch,
                              uint32_t timeout_ms, cxs_diag *d) {
    if (!l || !batch)
        return cxs_diagf(d, CXS_E_INVALID, "utterance loader: no loader or batch pointer");
    if (timeout_ms == CXS_RING_FOREVER) timeout_ms--; /* (a limit, as asked) */
    return cxs_ring_outcome(&l->ring, next_batch(l, batch, timeout_ms, &l->ring.err), d);
}

int cxs_utt_loader_cancel(cxs_utt_loader *l) {
    if (!l) return CXS_E_INVALID;
    cxs_ring_cancel(&l->ring);
    return 0;
}

static int next_batch(cxs_utt_loader *l, const cxs_utt_batch **batch, uint32_t ms,
                      cxs_diag *d) {
    if (cxs_ring_forked(&l->ring)) {
        int rc = respawn(l, 0);
        if (rc)
            return cxs_diagf(d, rc,
                             "utterance loader: no worker thread could start in this process: %s",
                             cxs_strerror(rc));
    }
    uint32_t i;
    int rc = cxs_ring_next_timed(&l->ring, &i, ms);
    if (rc == -ETIMEDOUT)
        return cxs_diagf(d, rc, "utterance loader: batch %llu not ready within %u ms",
                         (unsigned long long)l->ring.next_take, ms);
    if (rc == -ECANCELED)
        return cxs_diagf(d, rc, "utterance loader: cancelled (cxs_utt_loader_cancel)");
    if (rc) { /* (no stalled callback: 1, the end) */
        *batch = NULL;
        return 0;
    }
    const cxs_ring_slot *s = &l->ring.slot[i];
    if (s->rc) {
        /* the slot is held: no worker writes its message now */
        if (s->diag.message[0]) return cxs_diag_copy(d, s->rc, &s->diag);
        return cxs_diagf(d, s->rc, "utterance loader: batch %llu: %s",
                         (unsigned long long)s->batch, cxs_strerror(s->rc));
    }
    *batch = &l->slots[i].pub;
    let_go(l, l->slots[i].pub.global);
    return 0;
}

int cxs_utt_loader_reset(cxs_utt_loader *l, uint64_t epoch, uint64_t start) {
    if (!l) return CXS_E_INVALID;
    if (cxs_ring_forked(&l->ring)) {
        int rc = respawn(l, 1);
        if (rc)
            return cxs_ring_outcome(&l->ring, cxs_diagf(&l->ring.err, rc,
                                        "utterance loader: no worker thread could start in "
                                        "this process: %s",
                                        cxs_strerror(rc)),
                           NULL);
    }
    pthread_mutex_lock(&l->ring.mu);
    uint64_t nb;
    int rc = position(l, epoch, start, &nb, &l->ring.err);
    if (!rc) cxs_ring_restart_locked(&l->ring, nb);
    pthread_mutex_unlock(&l->ring.mu);
    return cxs_ring_outcome(&l->ring, rc, NULL);
}

/* For position.c: the start counts this rank's batches. */
void cxs_utt_loader_place(const cxs_utt_loader *l, cxs_place *w) {
    *w = (cxs_place){l->epoch, l->start, 1, l->ring.next_take, l->ring.nbatches};
}
