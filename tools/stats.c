/* stats.c - `ctxshard stats`: look at the data before training.
 *
 * Everything comes from the statistics stored at pack time (label
 * histogram, per-dimension mean and variance, lengths from the index) plus,
 * unless --no-scan, one pass over the features (NaN/Inf, all-zero frames,
 * per-dimension range).  Output: text tables, JSON, standalone SVG charts
 * and one self-contained HTML page; --compare puts two datasets side by
 * side and warns where they differ sharply. */
#include "stats.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctxshard.h"
#include "cxs_format.h"
#include "svg.h"
#include "util.h"

#define MAX_BINS 40
#define HEAT_FRAMES 300

typedef struct rep {
    const char *path;
    cxs_dataset *ds;
    cxs_info in;
    cxs_stats st;
    char **vocab;
    uint32_t *order; /* classes by count, descending */
    double *share, *weight, *mean, *sd;
    int *flag;
    double imbalance;
    double median; /* of the utterance lengths */
    double bin0, binw;
    double hist[MAX_BINS];
    size_t nbins;
    int scanned;
    uint64_t nonfinite, zero_frames;
    double *dmin, *dmax;
} rep;

/* Utterance u's length, from INDEX in place (every utterance was read
 * once before this is used: a damaged block has failed already). */
static uint64_t len_of(const rep *r, uint64_t u) {
    cxs_utterance ut;
    return cxs_dataset_utterance(r->ds, u, &ut) ? 0 : ut.num_frames;
}

/* The k-th smallest utterance length (from 0), exactly, by passes over
 * INDEX that each count the lengths in 2^20 equal ranges of the values
 * still possible: one pass while the lengths span at most 2^20 values,
 * two up to 2^40; 8 MiB whatever the utterance count. */
#define SELECT_BINS (1u << 20)
static int kth_length(const rep *r, uint64_t k, uint64_t *out) {
    uint64_t lo = r->in.min_length, hi = r->in.max_length; /* inclusive */
    uint64_t *cnt = malloc(SELECT_BINS * sizeof *cnt);
    if (!cnt) return -ENOMEM;
    while (lo < hi) {
        const uint64_t span = hi - lo; /* + 1 values */
        const uint64_t w = span / SELECT_BINS + 1;
        memset(cnt, 0, SELECT_BINS * sizeof *cnt);
        for (uint64_t u = 0; u < r->in.num_utterances; u++) {
            uint64_t L = len_of(r, u);
            if (L >= lo && L <= hi) cnt[(L - lo) / w]++;
        }
        uint64_t b = 0;
        while (b < SELECT_BINS - 1 && k >= cnt[b]) k -= cnt[b++];
        lo += b * w;
        if (w - 1 < hi - lo) hi = lo + w - 1;
    }
    free(cnt);
    *out = lo;
    return 0;
}

static int median_of_lengths(const rep *r, double *out) {
    const uint64_t n = r->in.num_utterances;
    uint64_t a = 0, b = 0;
    int rc = 0;
    if (n && (rc = kth_length(r, n / 2, &b))) return rc;
    if (n && n % 2 == 0 && (rc = kth_length(r, n / 2 - 1, &a))) return rc;
    *out = n % 2 ? (double)b : ((double)a + (double)b) / 2;
    return 0;
}

static const rep *g_sort_rep;
static int cmp_class(const void *a, const void *b) {
    uint64_t x = g_sort_rep->st.label_counts[*(const uint32_t *)a];
    uint64_t y = g_sort_rep->st.label_counts[*(const uint32_t *)b];
    return x > y ? -1 : x < y ? 1 : (int)(*(const uint32_t *)a) - (int)(*(const uint32_t *)b);
}

static void rep_free(rep *r) {
    if (r->vocab)
        for (uint32_t i = 0; i < r->in.vocab_size; i++) free(r->vocab[i]);
    free(r->vocab);
    free(r->order);
    free(r->share);
    free(r->weight);
    free(r->mean);
    free(r->sd);
    free(r->flag);
    free(r->dmin);
    free(r->dmax);
    cxs_dataset_close(r->ds);
}

/* A dimension looks unnormalised when its mean is far from 0 or its
 * standard deviation far from 1 (the inputs an MLP trains well on). */
static int looks_unnormalised(double mean, double sd) {
    return fabs(mean) > 1.0 || sd < 0.5 || sd > 2.0;
}

static int scan(rep *r) {
    const uint32_t D = r->in.dim;
    const uint64_t F = r->in.num_frames, chunk = 8192;
    float *x = malloc(chunk * D * sizeof *x);
    uint64_t *f = malloc(chunk * sizeof *f);
    r->dmin = malloc(D * sizeof *r->dmin);
    r->dmax = malloc(D * sizeof *r->dmax);
    if (!x || !f || !r->dmin || !r->dmax) {
        free(x);
        free(f);
        return -ENOMEM;
    }
    for (uint32_t d = 0; d < D; d++) {
        r->dmin[d] = INFINITY;
        r->dmax[d] = -INFINITY;
    }
    for (uint64_t a = 0; a < F; a += chunk) {
        uint64_t n = F - a < chunk ? F - a : chunk;
        for (uint64_t i = 0; i < n; i++) f[i] = a + i;
        int rc = cxs_dataset_gather(r->ds, f, n, 0, 0, 1, x, NULL);
        if (rc) {
            free(x);
            free(f);
            return rc;
        }
        for (uint64_t i = 0; i < n; i++) {
            int zero = 1;
            for (uint32_t d = 0; d < D; d++) {
                float v = x[i * D + d];
                if (!isfinite(v)) {
                    r->nonfinite++;
                    continue;
                }
                zero &= v == 0.0f;
                if (v < r->dmin[d]) r->dmin[d] = v;
                if (v > r->dmax[d]) r->dmax[d] = v;
            }
            r->zero_frames += zero;
        }
    }
    free(x);
    free(f);
    r->scanned = 1;
    return 0;
}

static int rep_load(rep *r, const char *path, int do_scan) {
    memset(r, 0, sizeof *r);
    r->path = path;
    int rc = open_dataset(path, NULL, &r->ds);
    if (rc) return rc;
    cxs_dataset_info(r->ds, &r->in);
    cxs_dataset_stats(r->ds, &r->st);
    if (!r->st.mean) {
        warnx_("%s: no stored statistics (a shard opened alone?): open the dataset directory",
               path);
        return EXIT_USAGE;
    }
    const uint32_t V = r->in.vocab_size, D = r->in.dim;
    r->vocab = calloc(V + 1, sizeof *r->vocab);
    r->order = malloc((V + 1) * sizeof *r->order);
    r->share = calloc(V + 1, sizeof *r->share);
    r->weight = calloc(V + 1, sizeof *r->weight);
    r->mean = malloc(D * sizeof *r->mean);
    r->sd = malloc(D * sizeof *r->sd);
    r->flag = calloc(D, sizeof *r->flag);
    if (!r->vocab || !r->order || !r->share || !r->weight || !r->mean || !r->sd || !r->flag)
        return EXIT_SYSTEM;
    uint64_t minc = UINT64_MAX, maxc = 0, present = 0;
    for (uint32_t i = 0; i < V; i++) {
        const char *s;
        size_t n;
        cxs_dataset_vocab(r->ds, i, &s, &n);
        r->vocab[i] = strndup(s, n);
        r->order[i] = i;
        uint64_t c = r->st.label_counts[i];
        r->share[i] = (double)c / (double)r->in.num_frames;
        if (c) {
            present++;
            if (c < minc) minc = c;
            if (c > maxc) maxc = c;
        }
    }
    /* The weighted sampler's default: inverse frequency, scaled so that the
     * weights average 1 over the frames (each class equally likely). */
    for (uint32_t i = 0; i < V; i++)
        r->weight[i] = r->st.label_counts[i]
                           ? (double)r->in.num_frames / ((double)present * (double)r->st.label_counts[i])
                           : 0;
    r->imbalance = present ? (double)maxc / (double)minc : 0;
    g_sort_rep = r;
    qsort(r->order, V, sizeof *r->order, cmp_class);
    for (uint32_t j = 0; j < D; j++) {
        r->mean[j] = r->st.mean[j];
        r->sd[j] = sqrt(r->st.var[j]);
        r->flag[j] = looks_unnormalised(r->mean[j], r->sd[j]);
    }
    /* The lengths are read from INDEX in place, pass by pass, never
     * copied: the memory of stats does not grow with the utterance count.
     * This first pass also meets a damaged INDEX block (format 1.3 checks
     * them at first use) before anything is printed. */
    for (uint64_t u = 0; u < r->in.num_utterances; u++) {
        cxs_utterance ut;
        if ((rc = cxs_dataset_utterance(r->ds, u, &ut))) {
            warnx_("%s: utterance %llu: %s; not reported (ctxshard verify names the damage)",
                   path, (unsigned long long)u, cxs_strerror(rc));
            return exit_code_for(rc);
        }
    }
    if ((rc = median_of_lengths(r, &r->median))) {
        warnx_("%s: %s", path, cxs_strerror(rc));
        return exit_code_for(rc);
    }
    if (do_scan && (rc = scan(r))) {
        warnx_("%s: %s", path, cxs_strerror(rc));
        return exit_code_for(rc);
    }
    return 0;
}

/* Length histogram over [0, top) in nbins bins; top from `maxlen`. */
static void histogram(rep *r, uint64_t maxlen, double binw) {
    r->bin0 = 0;
    r->binw = binw;
    r->nbins = (size_t)ceil((double)(maxlen + 1) / binw);
    if (r->nbins > MAX_BINS) r->nbins = MAX_BINS;
    if (r->nbins == 0) r->nbins = 1;
    memset(r->hist, 0, sizeof r->hist);
    for (uint64_t u = 0; u < r->in.num_utterances; u++) {
        size_t b = (size_t)((double)len_of(r, u) / binw);
        if (b >= r->nbins) b = r->nbins - 1;
        r->hist[b]++;
    }
}

static double nice_width(double span, int bins) {
    double raw = span / bins, p = pow(10, floor(log10(raw > 0 ? raw : 1))), f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

static double median_len(const rep *r) { return r->median; }

/* ---- warnings --------------------------------------------------------- */

static void warnings_one(const rep *r, sbuf *w) {
    uint32_t nflag = 0;
    for (uint32_t d = 0; d < r->in.dim; d++) nflag += (uint32_t)r->flag[d];
    if (r->in.vocab_size && r->imbalance > 20)
        sb_printf(w, "class imbalance: the most frequent class has %.0fx the frames of the rarest "
                     "present one; consider weighted sampling (Loader(weighted=True))\n",
                  r->imbalance);
    if (nflag)
        sb_printf(w, "%u of %u dimensions look unnormalised (mean beyond +-1 or std outside "
                     "0.5..2): normalise, every split (train, dev, test) with the training split's "
                     "statistics: Loader(split, ..., normalize=train) in Python, gather "
                     "--stats-from TRAIN_OUT, or pack --normalize utterance\n",
                  nflag, r->in.dim);
    if (r->scanned && r->nonfinite)
        sb_printf(w, "%llu NaN or infinite values: the dataset is damaged (run ctxshard verify)\n",
                  (unsigned long long)r->nonfinite);
    if (r->scanned && r->zero_frames * 100 > r->in.num_frames)
        sb_printf(w, "%.1f%% of frames are all zeros: padding or silence stored as zeros?\n",
                  100.0 * (double)r->zero_frames / (double)r->in.num_frames);
    if (r->in.min_length < 10)
        sb_printf(w, "the shortest utterance has %llu frames: check for truncated recordings\n",
                  (unsigned long long)r->in.min_length);
}

static void warnings_compare(const rep *a, const rep *b, sbuf *w) {
    if (a->in.dim != b->in.dim)
        sb_printf(w, "feature dimension differs: %u in %s, %u in %s\n", a->in.dim, a->path,
                  b->in.dim, b->path);
    int same_vocab = a->in.vocab_size == b->in.vocab_size;
    for (uint32_t i = 0; same_vocab && i < a->in.vocab_size; i++)
        same_vocab = strcmp(a->vocab[i], b->vocab[i]) == 0;
    if (!same_vocab && a->in.vocab_size && b->in.vocab_size)
        sb_printf(w, "the vocabularies differ: labels mean different things in the two datasets\n");
    for (uint32_t i = 0; same_vocab && i < a->in.vocab_size; i++) {
        double x = a->share[i], y = b->share[i];
        if ((x > 0) != (y > 0) && (x > 0.0005 || y > 0.0005))
            sb_printf(w, "class %s appears only in %s (%.2f%% of its frames)\n", a->vocab[i],
                      x > 0 ? a->path : b->path, 100 * (x > 0 ? x : y));
        else if ((x > 0.005 || y > 0.005) && x > 0 && y > 0 && (x / y > 2 || y / x > 2))
            sb_printf(w, "class %s: %.2f%% of frames in %s, %.2f%% in %s\n", a->vocab[i], 100 * x,
                      a->path, 100 * y, b->path);
    }
    double ma = (double)a->in.num_frames / (double)a->in.num_utterances;
    double mb = (double)b->in.num_frames / (double)b->in.num_utterances;
    if (ma / mb > 1.25 || mb / ma > 1.25)
        sb_printf(w, "mean utterance length: %.0f frames in %s, %.0f in %s\n", ma, a->path, mb,
                  b->path);
    for (uint32_t d = 0; a->in.dim == b->in.dim && d < a->in.dim; d++) {
        double pooled = sqrt((a->sd[d] * a->sd[d] + b->sd[d] * b->sd[d]) / 2);
        if (fabs(a->mean[d] - b->mean[d]) > 0.5 * pooled)
            sb_printf(w, "dimension %u: mean %.3g in %s, %.3g in %s (%.1f pooled std apart)\n", d,
                      a->mean[d], a->path, b->mean[d], b->path,
                      fabs(a->mean[d] - b->mean[d]) / (pooled > 0 ? pooled : 1));
        if (a->sd[d] > 0 && b->sd[d] > 0 && (a->sd[d] / b->sd[d] > 1.5 || b->sd[d] / a->sd[d] > 1.5))
            sb_printf(w, "dimension %u: std %.3g in %s, %.3g in %s\n", d, a->sd[d], a->path,
                      b->sd[d], b->path);
    }
}

/* ---- charts ----------------------------------------------------------- */

static const char *const colours[2] = {"#4878cf", "#e8833a"};

static void chart_labels(sbuf *b, rep *const *r, int nr) {
    const rep *a = r[0];
    uint32_t V = a->in.vocab_size;
    const char **names = malloc((V + 1) * sizeof *names);
    double *y[2] = {calloc(V + 1, sizeof(double)), calloc(V + 1, sizeof(double))};
    for (uint32_t j = 0; j < V; j++) {
        uint32_t c = a->order[j];
        names[j] = a->vocab[c];
        for (int k = 0; k < nr; k++) y[k][j] = c < r[k]->in.vocab_size ? r[k]->share[c] : 0;
    }
    series s[2] = {{a->path, y[0], NULL, colours[0]}, {nr > 1 ? r[1]->path : "", y[1], NULL, colours[1]}};
    svg_bars(b, "Label distribution (share of frames, most frequent first)", "phoneme",
             "share of frames", V, names, s, (size_t)nr, 1);
    free(names);
    free(y[0]);
    free(y[1]);
}

static void chart_lengths(sbuf *b, rep *const *r, int nr) {
    series s[2];
    for (int k = 0; k < nr; k++)
        s[k] = (series){r[k]->path, r[k]->hist, NULL, colours[k]};
    svg_histogram(b, "Utterance lengths", "frames per utterance", "utterances", r[0]->bin0,
                  r[0]->bin0 + r[0]->binw * (double)r[0]->nbins, r[0]->nbins, s, (size_t)nr);
}

static void chart_dims(sbuf *b, rep *const *r, int nr) {
    uint32_t D = r[0]->in.dim;
    char **names = malloc(D * sizeof *names);
    const char **cn = malloc(D * sizeof *cn);
    for (uint32_t d = 0; d < D; d++) {
        names[d] = malloc(16);
        snprintf(names[d], 16, "%u%s", d, r[0]->flag[d] ? "*" : "");
        cn[d] = names[d];
    }
    series s[2];
    for (int k = 0; k < nr; k++) s[k] = (series){r[k]->path, r[k]->mean, r[k]->sd, colours[k]};
    svg_bars(b, "Per-dimension mean +- std (* looks unnormalised)", "dimension", "value", D, cn, s,
             (size_t)nr, 0);
    for (uint32_t d = 0; d < D; d++) free(names[d]);
    free(names);
    free(cn);
}

static void chart_heatmap(sbuf *b, const rep *r, uint64_t u) {
    cxs_utterance ut;
    if (cxs_dataset_utterance(r->ds, u, &ut)) return; /* refused by the checks before */
    uint64_t T = ut.num_frames < HEAT_FRAMES ? ut.num_frames : HEAT_FRAMES;
    uint32_t D = r->in.dim;
    float *x = malloc(T * D * sizeof *x + 1);
    uint64_t *f = malloc(T * sizeof *f + 1);
    int64_t *y = malloc(T * sizeof *y + 1);
    const char **labels = malloc(T * sizeof *labels + 1);
    for (uint64_t t = 0; t < T; t++) f[t] = ut.first_frame + t;
    cxs_dataset_gather(r->ds, f, T, 0, CXS_GATHER_NORMALIZE, 1, x, r->in.label_width ? y : NULL);
    for (uint64_t t = 0; t < T; t++)
        labels[t] = r->in.label_width && (uint64_t)y[t] < r->in.vocab_size ? r->vocab[y[t]] : "";
    char title[256];
    snprintf(title, sizeof title, "Utterance %.*s: first %llu of %llu frames (z-scores)",
             (int)(ut.id_len > 60 ? 60 : ut.id_len), ut.id, (unsigned long long)T,
             (unsigned long long)ut.num_frames);
    svg_heatmap(b, title, x, D, T, -3, 3, labels, "frame (phoneme labels below)", "dimension");
    free(x);
    free(f);
    free(y);
    free(labels);
}

/* ---- output ----------------------------------------------------------- */

static void text_report(const rep *r) {
    printf("%s: %llu utterances, %llu frames, dim %u, %s\n", r->path,
           (unsigned long long)r->in.num_utterances, (unsigned long long)r->in.num_frames,
           r->in.dim, cxs_dtype_name(r->in.dtype));
    printf("\nutterance lengths: min %llu, median %.0f, mean %.1f, max %llu frames\n",
           (unsigned long long)r->in.min_length, median_len(r),
           (double)r->in.num_frames / (double)r->in.num_utterances,
           (unsigned long long)r->in.max_length);
    double top = 0;
    for (size_t i = 0; i < r->nbins; i++) top = fmax(top, r->hist[i]);
    for (size_t i = 0; i < r->nbins; i++) {
        if (!r->hist[i]) continue;
        int w = (int)(r->hist[i] / top * 40 + 0.5);
        printf("  %6.0f-%-6.0f %6.0f %.*s\n", r->bin0 + r->binw * (double)i,
               r->bin0 + r->binw * (double)(i + 1) - 1, r->hist[i], w,
               "########################################");
    }
    if (r->in.label_seqs)
        printf("\nlabel sequences: %llu symbols (per utterance: min %llu, mean %.1f, max %llu)%s\n",
               (unsigned long long)r->in.seq_symbols, (unsigned long long)r->in.min_seq_length,
               (double)r->in.seq_symbols / (double)r->in.num_utterances,
               (unsigned long long)r->in.max_seq_length,
               r->in.label_width ? "" : "; no per-frame labels");
    if (r->in.vocab_size && r->in.label_width) {
        printf("\nlabels, most frequent first (imbalance max/min %.1fx)\n", r->imbalance);
        printf("  %-8s %12s %8s %8s\n", "symbol", "frames", "share", "weight");
        for (uint32_t j = 0; j < r->in.vocab_size; j++) {
            uint32_t c = r->order[j];
            printf("  %-8s %12llu %7.2f%% %8.3f\n", r->vocab[c],
                   (unsigned long long)r->st.label_counts[c], 100 * r->share[c], r->weight[c]);
        }
    }
    printf("\nper-dimension statistics%s\n", r->scanned ? " (min/max from a scan of every frame)" : "");
    printf("  %4s %10s %10s %10s %10s\n", "dim", "mean", "std", "min", "max");
    for (uint32_t d = 0; d < r->in.dim; d++) {
        if (r->scanned)
            printf("  %4u %10.4g %10.4g %10.4g %10.4g%s\n", d, r->mean[d], r->sd[d], r->dmin[d],
                   r->dmax[d], r->flag[d] ? "  unnormalised?" : "");
        else
            printf("  %4u %10.4g %10.4g %10s %10s%s\n", d, r->mean[d], r->sd[d], "-", "-",
                   r->flag[d] ? "  unnormalised?" : "");
    }
    if (r->scanned)
        printf("\nscan: %llu NaN/Inf values, %llu all-zero frames\n",
               (unsigned long long)r->nonfinite, (unsigned long long)r->zero_frames);
}

/* Two datasets side by side: A's column, then B's, row by row, so that a
 * difference is read across one line.  Labels in A's order of frequency;
 * the length histogram over the bins both share. */
static void text_compare(const rep *a, const rep *b) {
    const rep *r[2] = {a, b};
    printf("A: %s\nB: %s\n\n", a->path, b->path);
    printf("  %-22s %20s %20s\n", "", "A", "B");
    printf("  %-22s %20llu %20llu\n", "utterances", (unsigned long long)a->in.num_utterances,
           (unsigned long long)b->in.num_utterances);
    printf("  %-22s %20llu %20llu\n", "frames", (unsigned long long)a->in.num_frames,
           (unsigned long long)b->in.num_frames);
    printf("  %-22s %20u %20u\n", "dim", a->in.dim, b->in.dim);
    printf("  %-22s %20s %20s\n", "dtype", cxs_dtype_name(a->in.dtype), cxs_dtype_name(b->in.dtype));
    printf("  %-22s %20llu %20llu\n", "length min", (unsigned long long)a->in.min_length,
           (unsigned long long)b->in.min_length);
    printf("  %-22s %20.0f %20.0f\n", "length median", median_len(a), median_len(b));
    printf("  %-22s %20.1f %20.1f\n", "length mean",
           (double)a->in.num_frames / (double)a->in.num_utterances,
           (double)b->in.num_frames / (double)b->in.num_utterances);
    printf("  %-22s %20llu %20llu\n", "length max", (unsigned long long)a->in.max_length,
           (unsigned long long)b->in.max_length);
    if (a->in.vocab_size || b->in.vocab_size)
        printf("  %-22s %19.1fx %19.1fx\n", "label imbalance", a->imbalance, b->imbalance);
    if (a->scanned && b->scanned) {
        printf("  %-22s %20llu %20llu\n", "NaN/Inf values", (unsigned long long)a->nonfinite,
               (unsigned long long)b->nonfinite);
        printf("  %-22s %20llu %20llu\n", "all-zero frames", (unsigned long long)a->zero_frames,
               (unsigned long long)b->zero_frames);
    }
    /* Lengths: the share of each dataset's utterances per bin, as bars. */
    printf("\nutterance lengths (share of each dataset's utterances)\n");
    printf("  %-13s %-28s %s\n", "frames", "A", "B");
    size_t nb = a->nbins > b->nbins ? a->nbins : b->nbins;
    const rep *wide = a->nbins >= b->nbins ? a : b;
    for (size_t i = 0; i < nb; i++) {
        double sh[2];
        for (int k = 0; k < 2; k++)
            sh[k] = i < r[k]->nbins && r[k]->in.num_utterances
                        ? r[k]->hist[i] / (double)r[k]->in.num_utterances
                        : 0;
        if (sh[0] == 0 && sh[1] == 0) continue;
        char range[64], col[2][48];
        snprintf(range, sizeof range, "%.0f-%.0f", wide->bin0 + wide->binw * (double)i,
                 wide->bin0 + wide->binw * (double)(i + 1) - 1);
        for (int k = 0; k < 2; k++) {
            int w = (int)(sh[k] * 40 + 0.5);
            if (w > 20) w = 20;
            snprintf(col[k], sizeof col[k], "%5.1f%% %.*s", 100 * sh[k], w,
                     "####################");
        }
        printf("  %-13s %-28s %s\n", range, col[0], col[1]);
    }
    if (a->in.vocab_size) {
        printf("\nlabels, most frequent in A first\n");
        printf("  %-8s %12s %8s %8s   %12s %8s %8s\n", "symbol", "A frames", "share", "weight",
               "B frames", "share", "weight");
        for (uint32_t j = 0; j < a->in.vocab_size; j++) {
            uint32_t c = a->order[j];
            printf("  %-8s %12llu %7.2f%% %8.3f", a->vocab[c],
                   (unsigned long long)a->st.label_counts[c], 100 * a->share[c], a->weight[c]);
            if (c < b->in.vocab_size && !strcmp(b->vocab[c], a->vocab[c]))
                printf("   %12llu %7.2f%% %8.3f\n", (unsigned long long)b->st.label_counts[c],
                       100 * b->share[c], b->weight[c]);
            else
                printf("   %12s %8s %8s\n", "-", "-", "-");
        }
    }
    printf("\nper-dimension statistics\n");
    printf("  %4s %10s %10s   %10s %10s\n", "dim", "A mean", "A std", "B mean", "B std");
    uint32_t D = a->in.dim > b->in.dim ? a->in.dim : b->in.dim;
    for (uint32_t d = 0; d < D; d++) {
        printf("  %4u", d);
        for (int k = 0; k < 2; k++) {
            if (d < r[k]->in.dim)
                printf(" %10.4g %10.4g%s", r[k]->mean[d], r[k]->sd[d], k ? "" : "  ");
            else
                printf(" %10s %10s%s", "-", "-", k ? "" : "  ");
        }
        printf("\n");
    }
}

static void json_str(sbuf *b, const char *s) {
    sb_printf(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') sb_printf(b, "\\%c", c);
        else if (c < 0x20) sb_printf(b, "\\u%04x", c);
        else sb_printf(b, "%c", c);
    }
    sb_printf(b, "\"");
}

static void json_report(sbuf *b, const rep *r, const char *warnings) {
    sb_printf(b, "{\"path\": ");
    json_str(b, r->path);
    sb_printf(b, ", \"utterances\": %llu, \"frames\": %llu, \"dim\": %u,\n",
              (unsigned long long)r->in.num_utterances, (unsigned long long)r->in.num_frames,
              r->in.dim);
    sb_printf(b, " \"lengths\": {\"min\": %llu, \"median\": %.1f, \"mean\": %.3f, \"max\": %llu, "
                 "\"bin_width\": %g, \"histogram\": [",
              (unsigned long long)r->in.min_length, median_len(r),
              (double)r->in.num_frames / (double)r->in.num_utterances,
              (unsigned long long)r->in.max_length, r->binw);
    for (size_t i = 0; i < r->nbins; i++) sb_printf(b, "%s%.0f", i ? ", " : "", r->hist[i]);
    sb_printf(b, "]},\n \"labels\": [");
    for (uint32_t j = 0; j < r->in.vocab_size; j++) {
        uint32_t c = r->order[j];
        sb_printf(b, "%s{\"symbol\": ", j ? ", " : "");
        json_str(b, r->vocab[c]);
        sb_printf(b, ", \"index\": %u, \"frames\": %llu, \"share\": %.6g, \"weight\": %.6g}", c,
                  (unsigned long long)r->st.label_counts[c], r->share[c], r->weight[c]);
    }
    sb_printf(b, "],\n \"imbalance\": %.6g,\n \"dims\": [", r->imbalance);
    for (uint32_t d = 0; d < r->in.dim; d++) {
        sb_printf(b, "%s{\"mean\": %.8g, \"std\": %.8g, \"unnormalised\": %s", d ? ", " : "",
                  r->mean[d], r->sd[d], r->flag[d] ? "true" : "false");
        if (r->scanned) sb_printf(b, ", \"min\": %.8g, \"max\": %.8g", r->dmin[d], r->dmax[d]);
        sb_printf(b, "}");
    }
    sb_printf(b, "],\n \"scan\": ");
    if (r->scanned)
        sb_printf(b, "{\"nonfinite\": %llu, \"zero_frames\": %llu}",
                  (unsigned long long)r->nonfinite, (unsigned long long)r->zero_frames);
    else
        sb_printf(b, "null");
    sb_printf(b, ",\n \"warnings\": [");
    int first = 1;
    for (const char *p = warnings; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char *line = strndup(p, n);
        sb_printf(b, "%s", first ? "" : ", ");
        json_str(b, line);
        free(line);
        first = 0;
        p += n + (e != NULL);
    }
    sb_printf(b, "]}");
}

static int write_text(const char *path, const sbuf *b) {
    FILE *f = fopen(path, "w");
    if (!f || fwrite(b->p, 1, b->n, f) != b->n || fclose(f) != 0) {
        warnx_("%s: %s", path, strerror(errno));
        return EXIT_SYSTEM;
    }
    return 0;
}

static void html_table_labels(sbuf *h, rep *const *r, int nr) {
    const rep *a = r[0];
    sb_printf(h, "<table><tr><th>symbol</th>");
    for (int k = 0; k < nr; k++) {
        sb_printf(h, "<th>frames (");
        sb_escape(h, r[k]->path, strlen(r[k]->path));
        sb_printf(h, ")</th><th>share</th><th>weight</th>");
    }
    sb_printf(h, "</tr>\n");
    for (uint32_t j = 0; j < a->in.vocab_size; j++) {
        uint32_t c = a->order[j];
        sb_printf(h, "<tr><td>");
        sb_escape(h, a->vocab[c], strlen(a->vocab[c]));
        sb_printf(h, "</td>");
        for (int k = 0; k < nr; k++)
            if (c < r[k]->in.vocab_size)
                sb_printf(h, "<td>%llu</td><td>%.2f%%</td><td>%.3f</td>",
                          (unsigned long long)r[k]->st.label_counts[c], 100 * r[k]->share[c],
                          r[k]->weight[c]);
        sb_printf(h, "</tr>\n");
    }
    sb_printf(h, "</table>\n");
}

static int emit(rep *const *r, int nr, const stats_opts *o) {
    sbuf warn = {0};
    if (nr == 1) warnings_one(r[0], &warn);
    else warnings_compare(r[0], r[1], &warn);
    uint64_t maxlen = r[0]->in.max_length;
    if (nr > 1 && r[1]->in.max_length > maxlen) maxlen = r[1]->in.max_length;
    double bw = nice_width((double)maxlen + 1, 30);
    for (int k = 0; k < nr; k++) histogram(r[k], maxlen, bw);
    int ec = 0;
    if (o->json) {
        sbuf j = {0};
        if (nr > 1) sb_printf(&j, "{\"compare\": [");
        for (int k = 0; k < nr; k++) {
            if (k) sb_printf(&j, ",\n");
            json_report(&j, r[k], nr == 1 ? warn.p : NULL);
        }
        if (nr > 1) {
            sb_printf(&j, "],\n \"warnings\": [");
            int first = 1;
            for (const char *p = warn.p; p && *p;) {
                const char *e = strchr(p, '\n');
                size_t n = e ? (size_t)(e - p) : strlen(p);
                char *line = strndup(p, n);
                sb_printf(&j, "%s", first ? "" : ", ");
                json_str(&j, line);
                free(line);
                first = 0;
                p += n + (e != NULL);
            }
            sb_printf(&j, "]}");
        }
        printf("%s\n", j.p);
        sb_free(&j);
    } else {
        if (nr == 1) text_report(r[0]);
        else text_compare(r[0], r[1]);
        if (warn.n) printf("\nwarnings:\n%s", warn.p);
        else printf("\nno warnings\n");
    }
    /* Charts. */
    sbuf c_labels = {0}, c_lengths = {0}, c_dims = {0}, c_heat[8];
    unsigned nheat = 0;
    memset(c_heat, 0, sizeof c_heat);
    if (o->html || o->svg_dir) {
        if (r[0]->in.vocab_size && r[0]->in.label_width) chart_labels(&c_labels, r, nr);
        chart_lengths(&c_lengths, r, nr);
        chart_dims(&c_dims, r, nr);
        for (int k = 0; k < nr; k++)
            for (unsigned e = 0; e < o->examples && e < r[k]->in.num_utterances && nheat < 8; e++) {
                /* spread the examples over the dataset */
                uint64_t u = r[k]->in.num_utterances * e / (o->examples ? o->examples : 1);
                chart_heatmap(&c_heat[nheat++], r[k], u);
            }
    }
    if (o->svg_dir) {
        if (mkdir(o->svg_dir, 0755) != 0 && errno != EEXIST) {
            warnx_("%s: %s", o->svg_dir, strerror(errno));
            ec = EXIT_SYSTEM;
        }
        struct {
            const char *name;
            sbuf *b;
        } files[3] = {{"labels.svg", &c_labels}, {"lengths.svg", &c_lengths}, {"dims.svg", &c_dims}};
        for (int i = 0; i < 3 && !ec; i++) {
            if (!files[i].b->n) continue;
            char *p = path_join(o->svg_dir, files[i].name);
            ec = write_text(p, files[i].b);
            free(p);
        }
        for (unsigned i = 0; i < nheat && !ec; i++) {
            char name[32];
            snprintf(name, sizeof name, "heatmap-%u.svg", i);
            char *p = path_join(o->svg_dir, name);
            ec = write_text(p, &c_heat[i]);
            free(p);
        }
    }
    if (o->html && !ec) {
        sbuf h = {0};
        sb_printf(&h, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                      "<title>ctxshard stats: ");
        sb_escape(&h, r[0]->path, strlen(r[0]->path));
        sb_printf(&h, "</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:1200px}"
                      "table{border-collapse:collapse;font-size:12px;margin:1em 0}"
                      "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
                      "td:first-child{text-align:left}.warn{background:#fff3cd;padding:.5em 1em;"
                      "border-left:4px solid #e0a800}.chart{overflow-x:auto;margin:1em 0}"
                      "</style></head><body>\n<h1>ctxshard stats</h1>\n<table><tr><th>dataset</th>"
                      "<th>utterances</th><th>frames</th><th>dim</th><th>lengths min / median / "
                      "mean / max</th><th>NaN/Inf</th><th>all-zero frames</th></tr>\n");
        for (int k = 0; k < nr; k++) {
            sb_printf(&h, "<tr><td>");
            sb_escape(&h, r[k]->path, strlen(r[k]->path));
            sb_printf(&h, "</td><td>%llu</td><td>%llu</td><td>%u</td><td>%llu / %.0f / %.1f / "
                          "%llu</td>",
                      (unsigned long long)r[k]->in.num_utterances,
                      (unsigned long long)r[k]->in.num_frames, r[k]->in.dim,
                      (unsigned long long)r[k]->in.min_length, median_len(r[k]),
                      (double)r[k]->in.num_frames / (double)r[k]->in.num_utterances,
                      (unsigned long long)r[k]->in.max_length);
            if (r[k]->scanned)
                sb_printf(&h, "<td>%llu</td><td>%llu</td></tr>\n",
                          (unsigned long long)r[k]->nonfinite,
                          (unsigned long long)r[k]->zero_frames);
            else
                sb_printf(&h, "<td>not scanned</td><td>not scanned</td></tr>\n");
        }
        sb_printf(&h, "</table>\n<h2>Warnings</h2>\n");
        if (warn.n) {
            sb_printf(&h, "<div class=\"warn\"><ul>\n");
            for (const char *p = warn.p; *p;) {
                const char *e = strchr(p, '\n');
                size_t n = e ? (size_t)(e - p) : strlen(p);
                sb_printf(&h, "<li>");
                sb_escape(&h, p, n);
                sb_printf(&h, "</li>\n");
                p += n + (e != NULL);
            }
            sb_printf(&h, "</ul></div>\n");
        } else {
            sb_printf(&h, "<p>None.</p>\n");
        }
        if (c_labels.n)
            sb_printf(&h, "<h2>Labels</h2>\n<div class=\"chart\">%s</div>\n", c_labels.p);
        if (r[0]->in.vocab_size && r[0]->in.label_width) html_table_labels(&h, r, nr);
        sb_printf(&h, "<h2>Utterance lengths</h2>\n<div class=\"chart\">%s</div>\n", c_lengths.p);
        sb_printf(&h, "<h2>Features</h2>\n<div class=\"chart\">%s</div>\n", c_dims.p);
        if (nheat) sb_printf(&h, "<h2>Example utterances</h2>\n");
        for (unsigned i = 0; i < nheat; i++)
            sb_printf(&h, "<div class=\"chart\">%s</div>\n", c_heat[i].p);
        sb_printf(&h, "</body></html>\n");
        ec = write_text(o->html, &h);
        if (!ec) {
            char hb[32];
            printf("wrote %s (%s)\n", o->html, human_bytes((double)h.n, hb, sizeof hb));
        }
        sb_free(&h);
    }
    sb_free(&warn);
    sb_free(&c_labels);
    sb_free(&c_lengths);
    sb_free(&c_dims);
    for (unsigned i = 0; i < nheat; i++) sb_free(&c_heat[i]);
    return ec;
}

int stats_run(const char *dir, const stats_opts *o) {
    rep a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    rep *r[2] = {&a, &b};
    int nr = o->compare ? 2 : 1;
    int ec = rep_load(&a, dir, o->scan);
    if (!ec && nr == 2) ec = rep_load(&b, o->compare, o->scan);
    if (!ec) ec = emit(r, nr, o);
    rep_free(&a);
    if (nr == 2) rep_free(&b);
    return ec;
}
