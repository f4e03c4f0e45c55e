/* gather.c - cxs_dataset_gather(): windows into a caller's buffer. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cxs_convert.h"
#include "cxs_le.h"
#include "dataset_internal.h"
#include "fault.h"
#include "gather.h"
#include "source.h"

void cxs_normalize_rows(uint32_t D, float *dst, size_t rows, const double *mean,
                        const double *scale) {
    /* Spec section 7.4: binary64 difference, binary64 product, one rounding
     * to binary32 (the same operations as gpu_expand.h's cxs_x_value). */
    for (size_t r = 0; r < rows; r++, dst += D)
        for (uint32_t d = 0; d < D; d++) dst[d] = (float)(((double)dst[d] - mean[d]) * scale[d]);
}

void cxs_convert_rows(const cxs_dataset *ds, const cxs_qdec *q, const uint8_t *src, size_t rows,
                      float *dst, const double *mean, const double *scale) {
    const uint32_t D = ds->meta.dim;
    const size_t n = rows * D;
    switch (ds->meta.dtype) {
    case CXS_DTYPE_Q8:
    case CXS_DTYPE_Q16:
        cxs_qdec_rows(q, src, rows, dst);
        break;
    case CXS_DTYPE_F32:
        if (cxs_host_is_le()) {
            memcpy(dst, src, n * 4);
        } else {
            for (size_t i = 0; i < n; i++) {
                uint32_t b = cxs_ld32(src + 4 * i);
                memcpy(&dst[i], &b, 4);
            }
        }
        break;
    case CXS_DTYPE_F16:
        for (size_t i = 0; i < n; i++) dst[i] = cxs_f16_to_f32(cxs_ld16(src + 2 * i));
        break;
    default: /* bfloat16 */
        for (size_t i = 0; i < n; i++) dst[i] = cxs_bf16_to_f32(cxs_ld16(src + 2 * i));
        break;
    }
    if (mean) cxs_normalize_rows(D, dst, rows, mean, scale);
}

int cxs_norm_constants(const cxs_dataset *ds, const cxs_norm *norm, double **out, cxs_diag *d) {
    const uint32_t D = ds->meta.dim;
    const double *mean, *var;
    if (norm) {
        if (norm->dim != D)
            return cxs_diagf(d, CXS_E_INVALID,
                             "normalisation statistics of dim %u; the dataset's dim is %u",
                             norm->dim, D);
        if (!norm->mean || !norm->var)
            return cxs_diagf(d, CXS_E_INVALID, "normalisation statistics: mean or var is NULL");
        mean = norm->mean, var = norm->var;
    } else {
        if (!ds->norm_mean)
            return cxs_diagf(d, CXS_E_INVALID,
                             "normalisation asked of a dataset without statistics (give the "
                             "training split's, cxs_norm)");
        mean = ds->norm_mean, var = NULL;
    }
    double *c = malloc(2 * (size_t)D * sizeof *c);
    if (!c) return cxs_diagf(d, -ENOMEM, "out of memory");
    for (uint32_t i = 0; i < D; i++) {
        if (!var) { /* the dataset's own, already computed at open */
            c[i] = ds->norm_mean[i];
            c[D + i] = ds->norm_scale[i];
            continue;
        }
        if (!isfinite(mean[i]) || !isfinite(var[i]) || var[i] < 0) {
            free(c);
            return cxs_diagf(d, CXS_E_INVALID,
                             "normalisation statistics: dimension %u has mean %g and variance %g "
                             "(both finite, the variance >= 0)",
                             i, mean[i], var[i]);
        }
        c[i] = mean[i];
        c[D + i] = var[i] > 0 ? 1.0 / sqrt(var[i]) : 1.0;
    }
    *out = c;
    return 0;
}

typedef struct job {
    const cxs_dataset *ds;
    const uint64_t *frames;
    size_t n;
    uint32_t k;
    const double *mean, *scale;
    float *out;
    int64_t *labels;
    cxs_gather_ctx *ctx; /* or NULL */
    int rc;
    /* While the windows are copied: the scratch of this call, the window
     * at work (volatile: read after a fault's jump), and what failed. */
    uint8_t *stage;
    zreader *zr;
    cxs_qdec *q; /* coded dtypes: the decoder */
    volatile size_t at;
    cxs_where where;
    /* a failed check of an INDEX block (utt_index.c) or of a block of
     * FEATURES or LABELS (blocksrc.h): its message */
    int index_failed;
    cxs_diag index_diag;
} job;

/* Where one window comes from: real rows a..b (relative to the frame) of
 * utterance u, zeros for the rest. */
typedef struct plan {
    const uint8_t *src; /* row a (NULL when compressed) */
    uint64_t row;       /* row a within its shard's FEATURES layout */
    int32_t zlo, rows, zhi; /* zero rows before, real rows, zero rows after */
    uint32_t shard;
    uint64_t lu;        /* its shard-local utterance (a coded dtype's header) */
    uint64_t label_index;
} plan;

#define PLAN_CHUNK 64
#define PREFETCH_AHEAD 8

void cxs_gather_ctx_free(cxs_gather_ctx *c) {
    cxs_zreader_free(&c->zr);
    cxs_qdec_free(&c->q);
    free(c->stage);
    c->stage = NULL;
    c->stage_bytes = 0;
}

/* The copies, which read the mapping: in a recovery region (fault.h), so
 * nothing here allocates or locks. */
static int gather_windows(void *arg) {
    job *j = arg;
    const cxs_dataset *ds = j->ds;
    cxs_gather_ctx *ctx = j->ctx;
    const uint32_t D = ds->meta.dim, k = j->k, V = ds->meta.vocab_size;
    const size_t W = (2 * (size_t)k + 1) * D;
    const double *mean = j->mean, *scale = j->scale;
    plan p[PLAN_CHUNK];
    plan last = {0}; /* the window copied before, its real rows at last_r */
    const float *last_r = NULL;
    /* In chunks: first locate every window (independent lookups whose cache
     * misses overlap), then copy, prefetching a few windows ahead so that
     * the random start of each window is in cache when its copy begins. */
    for (size_t c0 = 0; c0 < j->n; c0 += PLAN_CHUNK) {
        if (ctx && ctx->cancelled && ctx->cancelled(ctx->arg)) return -ECANCELED;
        size_t m = j->n - c0 < PLAN_CHUNK ? j->n - c0 : PLAN_CHUNK;
        cxs_uloc loc[PLAN_CHUNK];
        int lrc = cxs_find_utts(ds, j->frames + c0, m, loc, &j->index_diag);
        if (lrc) {
            j->at = c0;
            j->index_failed = 1;
            return lrc;
        }
        for (size_t i = 0; i < m; i++) {
            uint64_t f = j->frames[c0 + i];
            const cxs_uloc l = loc[i];
            int64_t T = (int64_t)l.T;
            int64_t t = (int64_t)(f - l.f0);
            /* Rows t-k .. t+k; real rows a .. b, zeros around them.  The
             * zeros are written, not read from the guard, so that any k works
             * and a damaged guard row is never served. */
            int64_t lo = t - k, hi = t + k;
            int64_t a = lo < 0 ? 0 : lo, b = hi >= T ? T - 1 : hi;
            p[i].src = cxs_compressed(ds) ? NULL : cxs_loc_row_ptr(ds, &l, a);
            p[i].row = l.row + (uint64_t)a;
            p[i].zlo = (int32_t)(a - lo);
            p[i].rows = (int32_t)(b - a + 1);
            p[i].zhi = (int32_t)(hi - b);
            p[i].shard = l.shard;
            p[i].lu = l.lu;
            p[i].label_index = f - ds->shards[p[i].shard].f_start;
            if (i < PREFETCH_AHEAD && p[i].src) __builtin_prefetch(p[i].src);
            /* nothing of a block is served before it is checked (blocksrc.h):
             * the window's real rows and its label */
            int brc = cxs_bsrc_rows(ds, l.shard, p[i].row, (uint64_t)p[i].rows, &j->index_diag);
            if (!brc && j->labels) brc = cxs_bsrc_labels(ds, l.shard, p[i].label_index, 1, &j->index_diag);
            if (brc) {
                j->at = c0 + i;
                j->index_failed = 1;
                return brc;
            }
        }
        for (size_t i = 0; i < m; i++) {
            j->at = c0 + i;
            if (i + PREFETCH_AHEAD < m && p[i + PREFETCH_AHEAD].src)
                __builtin_prefetch(p[i + PREFETCH_AHEAD].src);
            const uint8_t *src = p[i].src;
            if (!src) {
                int rc = cxs_read_rows(ds, j->zr, p[i].shard, p[i].row, (uint64_t)p[i].rows,
                                       j->stage);
                if (rc) {
                    j->where.chunk = j->zr->bad_chunk;
                    j->where.offset = j->zr->bad_offset;
                    return rc;
                }
                src = j->stage;
            }
            if (j->q->dtype) {
                /* the utterance's header, checked at its first use */
                int qrc = cxs_qdec_utt(j->q, ds, p[i].shard, p[i].lu, &j->index_diag);
                if (qrc) {
                    j->index_failed = 1;
                    return qrc;
                }
            }
            float *o = j->out + (c0 + i) * W;
            if (p[i].zlo) memset(o, 0, (size_t)p[i].zlo * D * sizeof *o);
            float *r = o + (size_t)p[i].zlo * D;
            /* Rows this window shares with the one before (of the same
             * utterance: neighbouring frames in storage order) are copied
             * from it, already converted, and only the others converted:
             * in storage order that decodes each row once, not 2k + 1
             * times.  (Compressed rows come whole from the stage.) */
            const uint64_t end = p[i].row + (uint64_t)p[i].rows;
            uint64_t lo = p[i].row, hi = p[i].row; /* the shared rows, none yet */
            if (last_r && p[i].src && p[i].shard == last.shard && p[i].lu == last.lu) {
                const uint64_t a = last.row, b = a + (uint64_t)last.rows;
                lo = a > lo ? a : lo;
                hi = b < end ? b : end;
                if (lo < hi)
                    memcpy(r + (lo - p[i].row) * D, last_r + (lo - a) * D, (hi - lo) * D * sizeof *r);
                else
                    lo = hi = p[i].row;
            }
            cxs_convert_rows(ds, j->q, src, (size_t)(lo - p[i].row), r, mean, scale);
            cxs_convert_rows(ds, j->q, src + (hi - p[i].row) * ds->row_bytes, (size_t)(end - hi),
                             r + (hi - p[i].row) * D, mean, scale);
            last = p[i], last_r = r;
            if (p[i].zhi)
                memset(r + (size_t)p[i].rows * D, 0, (size_t)p[i].zhi * D * sizeof *o);
            if (j->labels) {
                const shard *sh = &ds->shards[p[i].shard];
                uint32_t l = cxs_served_label(sh, p[i].label_index);
                /* A damaged label is never served (a shard opened alone
                 * has no vocabulary: any value of its width is one). */
                if (V && l >= V) {
                    j->where.bad_label = 1;
                    j->where.label = l;
                    return CXS_E_CORRUPT;
                }
                j->labels[c0 + i] = l;
            }
        }
    }
    return 0;
}

static int gather_range(job *j) {
    const cxs_dataset *ds = j->ds;
    cxs_gather_ctx own = {0}, *ctx = j->ctx ? j->ctx : &own;
    const size_t need = (2 * (size_t)j->k + 1) * (size_t)ds->row_bytes;
    j->stage = NULL; /* compressed: the real rows of one window */
    j->where = CXS_WHERE_NONE;
    j->at = 0;
    j->index_failed = 0;
    j->index_diag.message[0] = 0;
    if (cxs_compressed(ds) && j->n) {
        if (ctx->stage_bytes < need) {
            free(ctx->stage);
            ctx->stage_bytes = (ctx->stage = malloc(need)) ? need : 0;
        }
        if (!(j->stage = ctx->stage)) return j->rc = -ENOMEM;
    }
    j->zr = &ctx->zr;
    j->q = &ctx->q;
    if (cxs_qdec_init(j->q, ds->meta.dtype, ds->meta.dim)) {
        if (ctx == &own) cxs_gather_ctx_free(&own);
        return j->rc = -ENOMEM;
    }
    cxs_fault f;
    j->rc = cxs_fault_run(ds, gather_windows, j, &f);
    if (j->rc && j->rc != -ECANCELED && j->rc != -ENOMEM && !j->index_failed) {
        size_t at = j->at;
        uint64_t fr = j->frames[at < j->n ? at : 0];
        uint64_t u = cxs_find_utt(ds, fr);
        j->where.utt = u;
        j->where.frame = fr;
        j->where.shard = cxs_frame_shard(ds, fr);
        if (j->rc == CXS_E_TRUNCATED && j->where.chunk == UINT64_MAX) {
            /* a fault in this region (a plain shard's rows, or the labels) */
            j->where.shard = f.shard;
            j->where.offset = f.offset;
        }
    }
    if (ctx == &own) cxs_gather_ctx_free(&own);
    return j->rc;
}

/* rc, with the message naming the shard, utterance and chunk of a failure
 * in the data (not of a cancel or of memory). */
static int served(const cxs_dataset *ds, int rc, const job *j, cxs_diag *d) {
    if (rc && j->index_failed) return cxs_diag_copy(d, rc, &j->index_diag);
    const cxs_where *w = &j->where;
    if (!rc || rc == -ECANCELED || rc == -ENOMEM || (w->utt == UINT64_MAX && w->frame == UINT64_MAX))
        return rc;
    return cxs_where_diag(ds, rc, w, d);
}

static void *gather_thread(void *arg) {
    gather_range(arg);
    return NULL;
}

int cxs_gather_impl(const cxs_dataset *ds, const uint64_t *frames, size_t n, uint32_t k,
                    const double *mean, const double *scale, unsigned threads, float *out,
                    int64_t *labels, cxs_gather_ctx *ctx, cxs_diag *d) {
    if (!ds || (n && (!frames || !out)) || k > 1000000) return CXS_E_INVALID;
    if (labels && !ds->meta.label_width) return CXS_E_NO_LABELS;
    for (size_t i = 0; i < n; i++)
        if (frames[i] >= ds->meta.num_frames) return CXS_E_RANGE;
    const size_t W = (2 * (size_t)k + 1) * ds->meta.dim;
    if (threads > n || ctx) threads = ctx ? 1 : (unsigned)n;
    if (threads > 256) threads = 256;
    if (threads <= 1) {
        job j = {.ds = ds, .frames = frames, .n = n, .k = k, .mean = mean, .scale = scale,
                 .out = out, .labels = labels, .ctx = ctx};
        int rc = gather_range(&j);
        return served(ds, rc, &j, d);
    }
    job jobs[256];
    pthread_t tid[256];
    unsigned char created[256];
    for (unsigned t = 0; t < threads; t++) {
        size_t a = n * t / threads, b = n * (t + 1) / threads;
        jobs[t] = (job){.ds = ds, .frames = frames + a, .n = b - a, .k = k, .mean = mean,
                        .scale = scale, .out = out + a * W, .labels = labels ? labels + a : NULL};
        /* Thread 0 is the caller; a thread that cannot start is done inline. */
        created[t] = t > 0 && pthread_create(&tid[t], NULL, gather_thread, &jobs[t]) == 0;
    }
    for (unsigned t = 0; t < threads; t++)
        if (!created[t]) gather_range(&jobs[t]);
    for (unsigned t = 1; t < threads; t++)
        if (created[t]) pthread_join(tid[t], NULL);
    for (unsigned t = 0; t < threads; t++)
        if (jobs[t].rc) return served(ds, jobs[t].rc, &jobs[t], d);
    return 0;
}

int cxs_dataset_gather_ex(const cxs_dataset *ds, const uint64_t *frames, size_t n, uint32_t k,
                          uint32_t flags, const cxs_norm *norm, unsigned threads, float *out,
                          int64_t *labels, cxs_diag *d) {
    if (!ds) return cxs_diagf(d, CXS_E_INVALID, "gather: no dataset");
    if (cxs_src_streamed(ds)) return cxs_streamed_refuse(ds, "gather", d);
    if (flags & ~CXS_GATHER_NORMALIZE)
        return cxs_diagf(d, CXS_E_INVALID, "gather: unknown flags 0x%x", flags);
    const int normalize = (flags & CXS_GATHER_NORMALIZE) != 0;
    double *c = NULL;
    int rc;
    if (normalize && norm) {
        cxs_diag nd;
        if ((rc = cxs_norm_constants(ds, norm, &c, &nd)))
            return cxs_diagf(d, rc, "gather: %s", nd.message);
    } else if (normalize && !ds->norm_mean) {
        return cxs_diagf(d, CXS_E_INVALID,
                         "gather: normalisation asked of a dataset without statistics (give "
                         "the training split's, cxs_norm)");
    }
    if (n && (!frames || !out)) {
        rc = cxs_diagf(d, CXS_E_INVALID, "gather: %s is NULL for %zu frames",
                       !frames ? "frames" : "out", n);
    } else if (k > 1000000) {
        rc = cxs_diagf(d, CXS_E_INVALID, "gather: context k=%u is above 1,000,000", k);
    } else if (labels && !ds->meta.label_width) {
        rc = cxs_diagf(d, CXS_E_NO_LABELS,
                       "gather: labels asked of a dataset that has none (features only, like "
                       "a test split)");
    } else {
        cxs_diag wd;
        wd.message[0] = 0;
        rc = cxs_gather_impl(ds, frames, n, k, c ? c : normalize ? ds->norm_mean : NULL,
                             c ? c + ds->meta.dim : ds->norm_scale, threads, out, labels, NULL,
                             &wd);
        if (rc == CXS_E_RANGE) {
            size_t i = 0;
            while (i < n && frames[i] < ds->meta.num_frames) i++;
            cxs_diagf(d, rc, "gather: frame %llu (item %zu) is past the dataset's %llu frames",
                      (unsigned long long)(i < n ? frames[i] : 0), i,
                      (unsigned long long)ds->meta.num_frames);
        } else if (rc && wd.message[0]) {
            cxs_diag_copy(d, rc, &wd);
        } else if (rc) {
            cxs_diagf(d, rc, "gather: %s", cxs_strerror(rc));
        }
    }
    free(c);
    return rc;
}

int cxs_dataset_gather(const cxs_dataset *ds, const uint64_t *frames, size_t n, uint32_t k,
                       uint32_t flags, unsigned threads, float *out, int64_t *labels) {
    return cxs_dataset_gather_ex(ds, frames, n, k, flags, NULL, threads, out, labels, NULL);
}

int cxs_dataset_gather_norm(const cxs_dataset *ds, const uint64_t *frames, size_t n, uint32_t k,
                            const cxs_norm *norm, unsigned threads, float *out,
                            int64_t *labels) {
    return cxs_dataset_gather_ex(ds, frames, n, k, norm ? CXS_GATHER_NORMALIZE : 0, norm,
                                 threads, out, labels, NULL);
}
