/* mixloader.c - the mixture loader: worker threads gather the windows of a
 * mixture's batches (cxs_mix, mix.c) into the batch ring (ring.h), each
 * source's run of the batch from its own dataset with its own
 * normalisation, its labels mapped into source 0's vocabulary. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"
#include "dataset_internal.h"
#include "gather.h"
#include "ring.h"

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

struct cxs_mix_loader {
    const cxs_mix *mix;
    uint32_t n;
    cxs_loader_opts o;
    size_t window;        /* floats per sample */
    double **norm;        /* per source: means then scales, or NULL */
    int64_t **map;        /* per source: its label -> source 0's, or NULL (the same) */
    uint64_t epoch, start, length; /* under ring.mu */
    cxs_ring ring;
    mslot *slots;
    mworker *w;
};

static int abandoned(void *arg) {
    const mworker *wk = arg;
    return cxs_ring_abandoned(&wk->l->ring, wk->gen);
}

static void mclaim(void *owner, uint32_t w, uint32_t i, uint64_t b, uint64_t gen) {
    cxs_mix_loader *l = owner;
    (void)i, (void)gen;
    l->w[w].epoch = l->epoch;
    l->w[w].pos = l->start + b;
}

static int mfill(void *owner, uint32_t w, uint32_t i, uint64_t b, uint64_t gen) {
    cxs_mix_loader *l = owner;
    mworker *wk = &l->w[w];
    mslot *s = &l->slots[i];
    cxs_diag *diag = &l->ring.slot[i].diag;
    uint32_t cnt = 0;
    uint64_t g = 0;
    (void)b;
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
    for (uint32_t i = 0; i < l->n; i++) {
        if (l->norm) free(l->norm[i]);
        if (l->map) free(l->map[i]);
    }
    free(l->norm);
    free(l->map);
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

static int check_sources(cxs_mix_loader *l, cxs_diag *d) {
    const cxs_dataset *d0 = cxs_mix_dataset(l->mix, 0);
    for (uint32_t i = 0; i < l->n; i++) {
        const cxs_dataset *ds = cxs_mix_dataset(l->mix, i);
        int rc;
        if (ds->stream)
            return cxs_streamed_refuse(ds, "a mixture loader", d);
        if (ds->meta.dim != d0->meta.dim)
            return cxs_diagf(d, CXS_E_INVALID,
                             "mixture loader: source %u (%s) has %u features a frame, source 0 "
                             "(%s) %u: the sources' widths must be equal (their dtypes may "
                             "differ)",
                             i, ds->manifest_path, ds->meta.dim, d0->manifest_path, d0->meta.dim);
        if (l->o.labels && !ds->meta.label_width)
            return cxs_diagf(d, CXS_E_NO_LABELS,
                             "mixture loader: labels asked, but source %u (%s) has no frame "
                             "labels", i, ds->manifest_path);
        if (l->o.labels && i && (rc = vocab_map(d0, ds, i, &l->map[i], d))) return rc;
        if (l->o.flags & CXS_GATHER_NORMALIZE) {
            if (!l->o.norm && !ds->norm_mean)
                return cxs_diagf(d, CXS_E_INVALID,
                                 "mixture loader: normalisation by each source's statistics, but "
                                 "source %u (%s) has none (give one set, norm)",
                                 i, ds->manifest_path);
            cxs_diag nd;
            if ((rc = cxs_norm_constants(ds, l->o.norm, &l->norm[i], &nd)))
                return cxs_diagf(d, rc, "mixture loader: source %u (%s): %s", i,
                                 ds->manifest_path, nd.message);
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
    if (!rc) rc = check_sources(l, diag);
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
    cxs_ring_after_fork(&l->ring, drop_held);
    int rc = cxs_ring_start(&l->ring);
    if (!rc) cxs_ring_adopt(&l->ring);
    return rc;
}

static int next_batch(cxs_mix_loader *l, const cxs_mix_frames **batch, cxs_diag *d) {
    if (cxs_ring_forked(&l->ring)) {
        int rc = respawn(l, 0);
        if (rc)
            return cxs_diagf(d, rc, "mixture loader: no worker thread could start in this "
                             "process: %s", cxs_strerror(rc));
    }
    uint32_t i;
    if (cxs_ring_next(&l->ring, &i)) {
        *batch = NULL;
        return 0;
    }
    const cxs_ring_slot *s = &l->ring.slot[i];
    if (s->rc) {
        if (s->diag.message[0]) return cxs_diag_copy(d, s->rc, &s->diag);
        return cxs_diagf(d, s->rc, "mixture loader: batch %llu: %s",
                         (unsigned long long)s->batch, cxs_strerror(s->rc));
    }
    *batch = &l->slots[i].pub;
    return 0;
}

int cxs_mix_loader_next(cxs_mix_loader *l, const cxs_mix_frames **batch, cxs_diag *d) {
    if (!l || !batch)
        return cxs_diagf(d, CXS_E_INVALID, "mixture loader: no loader or batch pointer");
    return cxs_ring_outcome(&l->ring, next_batch(l, batch, &l->ring.err), d);
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
