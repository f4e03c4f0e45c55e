/* inspect.c - `ctxshard verify`, `info` and `gather`: the library's
 * public API put to work. */
#include "inspect.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctxshard.h"
#include "cxs_format.h"
#include "cxs_npy.h"
#include "cxs_qcodec.h"
#include "util.h"

static int open_or_report(const char *dir, cxs_dataset **ds) { return open_dataset(dir, NULL, ds); }

static int on_progress(void *user, uint64_t done, uint64_t total) {
    progress_update(user, done >> 20, total >> 20, "MiB");
    return g_interrupted;
}

int verify_run(const char *dir, int quiet) {
    cxs_dataset *ds;
    int ec = open_or_report(dir, &ds);
    if (ec) return ec;
    install_signal_flag();
    cxs_info info;
    cxs_dataset_info(ds, &info);
    progress bar;
    progress_init(&bar, "verify", quiet);
    cxs_diag d = {0};
    double t0 = now_seconds();
    int rc = cxs_dataset_verify(ds, on_progress, &bar, &d);
    double dt = now_seconds() - t0;
    progress_done(&bar);
    if (rc) {
        fprintf(stderr, "%s\n", rc == -ECANCELED ? "verify: interrupted" : d.message);
        cxs_dataset_close(ds);
        return exit_code_for(rc);
    }
    char b[32];
    if (!quiet)
        printf("%s: OK: %u shard%s, %llu utterance%s, %llu frames; %s verified in %.2f s (%.0f "
               "MB/s)\n",
               dir, info.num_shards, info.num_shards == 1 ? "" : "s",
               (unsigned long long)info.num_utterances, info.num_utterances == 1 ? "" : "s",
               (unsigned long long)info.num_frames,
               human_bytes((double)info.total_bytes, b, sizeof b), dt,
               dt > 0 ? (double)info.total_bytes / dt / 1e6 : 0.0);
    cxs_dataset_close(ds);
    return 0;
}

static const char *norm_name(uint32_t n) { return n == CXS_NORM_UTTERANCE ? "utterance" : "none"; }

int info_run(const char *dir, int json) {
    cxs_dataset *ds;
    /* what info prints is all in the metadata: a URL is opened to stream,
     * which fetches every section but FEATURES (a few percent of the
     * dataset) and holds within a cache limit below the dataset's size */
    cxs_open_opts oo;
    cxs_open_opts_init(&oo);
    oo.flags = CXS_OPEN_STREAM;
    int ec = open_dataset(dir, &oo, &ds);
    if (ec) return ec;
    cxs_info in;
    cxs_stats st;
    cxs_dataset_info(ds, &in);
    cxs_dataset_stats(ds, &st);
    const char *skipped;
    size_t skipped_len;
    cxs_dataset_skipped(ds, &skipped, &skipped_len);
    double mean_len = (double)in.num_frames / (double)in.num_utterances;
    /* A features-only split (a test split) is there to be predicted frame
     * by frame: one that lost utterances gives fewer rows than the raw
     * split, and every frame after a gap shifts.  Said on stderr in both
     * forms, and in the report. */
    const int lost = in.vocab_size == 0 && in.num_skipped > 0;
    if (lost)
        warnx_("WARNING: %s is a features-only split (a test split?) with %llu utterance%s left "
               "out at pack time: predictions over it have fewer rows than the raw split has "
               "frames; pack it again with --fill-nonfinite or with the files fixed",
               dir, (unsigned long long)in.num_skipped, in.num_skipped == 1 ? "" : "s");
    /* The symbols of label sequences are stored at the stored label width
     * (DATASET_META's, SHARD_META's for a shard opened alone), which
     * cxs_info.label_width does not say when there are no frame labels
     * (spec 5.6), and which a shard alone's vocabulary size (0) does not
     * give either. */
    unsigned seq_width = in.seq_width;
    if (json) {
        printf("{\n  \"path\": ");
        json_print_string(dir, strlen(dir));
        printf(",\n  \"format_version\": \"%u.%u\",\n", in.format_major, in.format_minor);
        printf("  \"utterances\": %llu,\n  \"frames\": %llu,\n", (unsigned long long)in.num_utterances,
               (unsigned long long)in.num_frames);
        printf("  \"length\": {\"min\": %llu, \"mean\": %.3f, \"max\": %llu},\n",
               (unsigned long long)in.min_length, mean_len, (unsigned long long)in.max_length);
        printf("  \"dim\": %u,\n  \"dtype\": \"%s\",\n  \"guard\": %u,\n", in.dim,
               cxs_dtype_name(in.dtype), in.guard);
        if (cxs_dtype_coded(in.dtype))
            printf("  \"bytes_per_value\": %zu,\n  \"header_bytes\": %llu,\n",
                   cxs_dtype_size(in.dtype),
                   (unsigned long long)cxs_q_header_size(in.dtype, in.dim));
        printf("  \"shards\": %u,\n  \"bytes\": %llu,\n", in.num_shards,
               (unsigned long long)in.total_bytes);
        printf("  \"pack_options\": {\"dtype\": \"%s\", \"guard\": %u, \"shard_size\": %llu, "
               "\"normalize\": \"%s\", \"on_error\": \"%s\"},\n",
               cxs_dtype_name(in.dtype), in.guard, (unsigned long long)in.shard_size,
               norm_name(in.normalize), in.on_error_skip ? "skip" : "fail");
        printf("  \"storage\": {\"compression\": \"%s\", \"level\": %d, \"chunk_rows\": %u, "
               "\"shuffle\": %s, \"feature_bytes\": %llu, \"stored_feature_bytes\": %llu},\n",
               in.compression ? "zstd" : "none", in.compression_level, in.chunk_rows,
               in.shuffle ? "true" : "false", (unsigned long long)in.feature_bytes,
               (unsigned long long)in.stored_feature_bytes);
        printf("  \"block_sum_shards\": %u,\n", in.block_sum_shards);
        printf("  \"label_width\": %u,\n", in.label_width);
        if (in.label_seqs)
            printf("  \"label_sequences\": {\"symbols\": %llu, \"width\": %u, \"min\": %llu, "
                   "\"mean\": %.3f, \"max\": %llu},\n",
                   (unsigned long long)in.seq_symbols, seq_width, (unsigned long long)in.min_seq_length,
                   (double)in.seq_symbols / (double)in.num_utterances,
                   (unsigned long long)in.max_seq_length);
        printf("  \"vocab\": [");
        for (uint32_t i = 0; i < in.vocab_size; i++) {
            const char *s;
            size_t n;
            cxs_dataset_vocab(ds, i, &s, &n);
            if (i) printf(", ");
            json_print_string(s, n);
        }
        printf("],\n  \"stats\": {\"count\": %llu, \"mean\": [", (unsigned long long)st.count);
        for (uint32_t d = 0; st.mean && d < in.dim; d++) printf("%s%.17g", d ? ", " : "", st.mean[d]);
        printf("], \"var\": [");
        for (uint32_t d = 0; st.var && d < in.dim; d++) printf("%s%.17g", d ? ", " : "", st.var[d]);
        printf("], \"label_counts\": [");
        for (uint32_t i = 0; st.label_counts && i < in.vocab_size; i++)
            printf("%s%llu", i ? ", " : "", (unsigned long long)st.label_counts[i]);
        printf("]},\n  \"skipped\": %llu,\n  \"incomplete\": %s,\n  \"skipped_report\": ",
               (unsigned long long)in.num_skipped, lost ? "true" : "false");
        json_print_string(skipped ? skipped : "", skipped_len);
        printf("\n}\n");
        cxs_dataset_close(ds);
        return 0;
    }
    char b[32], c[32];
    printf("dataset       %s\n", dir);
    printf("format        %u.%u\n", in.format_major, in.format_minor);
    printf("utterances    %llu (%llu skipped at pack time)\n", (unsigned long long)in.num_utterances,
           (unsigned long long)in.num_skipped);
    if (lost)
        printf("WARNING       features only, and %llu utterance%s left out (listed below): "
               "fewer rows than the raw split has frames\n",
               (unsigned long long)in.num_skipped, in.num_skipped == 1 ? "" : "s");
    printf("frames        %llu (per utterance: min %llu, mean %.1f, max %llu)\n",
           (unsigned long long)in.num_frames, (unsigned long long)in.min_length, mean_len,
           (unsigned long long)in.max_length);
    if (cxs_dtype_coded(in.dtype))
        printf("features      %u x %s: %zu byte%s a value and a header of %llu bytes an "
               "utterance (%s in all); no guard rows: windows decoded when read\n",
               in.dim, cxs_dtype_name(in.dtype), cxs_dtype_size(in.dtype),
               cxs_dtype_size(in.dtype) == 1 ? "" : "s",
               (unsigned long long)cxs_q_header_size(in.dtype, in.dim),
               human_bytes((double)(in.num_utterances * cxs_q_header_size(in.dtype, in.dim)), b,
                           sizeof b));
    else if (in.compression)
        printf("features      %u x %s, guard %u row%s (no zero-copy windows: compressed)\n",
               in.dim, cxs_dtype_name(in.dtype), in.guard, in.guard == 1 ? "" : "s");
    else
        printf("features      %u x %s, guard %u row%s (zero-copy windows for context k <= %u)\n",
               in.dim, cxs_dtype_name(in.dtype), in.guard, in.guard == 1 ? "" : "s", in.guard);
    if (in.compression)
        printf("storage       zstd level %d, %u rows per chunk, %s; features %s -> %s (%.2fx)\n",
               in.compression_level, in.chunk_rows, in.shuffle ? "byte shuffle" : "no filter",
               human_bytes((double)in.feature_bytes, b, sizeof b),
               human_bytes((double)in.stored_feature_bytes, c, sizeof c),
               in.stored_feature_bytes ? (double)in.feature_bytes / (double)in.stored_feature_bytes
                                       : 0.0);
    else
        printf("storage       uncompressed%s\n", cxs_dtype_coded(in.dtype) ? "" : " (zero-copy)");
    const uint32_t nsh = in.single_shard ? 1 : in.num_shards;
    if (in.block_sum_shards == nsh)
        printf("checksums     per section and per block (format 1.3): every block is checked "
               "at its first use, a damaged one never served, named with its utterances\n");
    else if (in.block_sum_shards)
        printf("checksums     per block in %u of %u shards, per section in the others\n",
               in.block_sum_shards, nsh);
    else
        printf("checksums     per section only (no block sums): features and labels are served "
               "unchecked, verify detects damage without locating it; convert the dataset to "
               "add them\n");
    if (in.vocab_size && in.label_width)
        printf("labels        %u symbols, %s per frame\n", in.vocab_size,
               in.label_width == 1 ? "uint8" : "uint16");
    else if (in.vocab_size)
        printf("labels        %u symbols, no per-frame labels (label sequences only)\n",
               in.vocab_size);
    else
        printf("labels        none (features only)\n");
    if (in.label_seqs)
        printf("sequences     one per utterance, %llu symbols stored as %s (per utterance: min "
               "%llu, mean %.1f, max %llu)\n",
               (unsigned long long)in.seq_symbols, seq_width == 1 ? "uint8" : "uint16",
               (unsigned long long)in.min_seq_length,
               (double)in.seq_symbols / (double)in.num_utterances,
               (unsigned long long)in.max_seq_length);
    printf("shards        %u (target size %s), %s in all\n", in.num_shards,
           human_bytes((double)in.shard_size, b, sizeof b),
           human_bytes((double)in.total_bytes, c, sizeof c));
    printf("normalize     %s\n", norm_name(in.normalize));
    printf("\nper-dimension statistics of the stored values (%llu frames)\n",
           (unsigned long long)st.count);
    printf("  %4s %12s %12s\n", "dim", "mean", "std");
    for (uint32_t d = 0; st.mean && d < in.dim; d++)
        printf("  %4u %12.5f %12.5f\n", d, st.mean[d], sqrt(st.var[d]));
    if (in.vocab_size && in.label_width && st.label_counts) {
        printf("\nlabels (vocabulary index, symbol, frames, share)\n");
        for (uint32_t i = 0; i < in.vocab_size; i++) {
            const char *s;
            size_t n;
            cxs_dataset_vocab(ds, i, &s, &n);
            printf("  %4u %-8.*s %12llu %6.2f%%\n", i, (int)n, s,
                   (unsigned long long)st.label_counts[i],
                   100.0 * (double)st.label_counts[i] / (double)in.num_frames);
        }
    }
    if (skipped_len) printf("\nskipped at pack time (id, reason)\n%.*s", (int)skipped_len, skipped);
    cxs_dataset_close(ds);
    return 0;
}

/* Write a .npy file atomically: header, then rows produced by fill(). */
typedef int (*fill_fn)(void *ctx, size_t first, size_t n, void *buf);

static int write_npy(const char *path, const char *descr, int ndim, const uint64_t *shape,
                     size_t rowbytes, size_t nrows, fill_fn fill, void *ctx) {
    size_t l = strlen(path) + 16;
    char *tmp = malloc(l);
    if (!tmp) return -ENOMEM;
    snprintf(tmp, l, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return -e;
    }
    char hdr[256];
    size_t hl = cxs_npy_header(hdr, sizeof hdr, descr, ndim, shape);
    int rc = hl ? write_all(fd, hdr, hl) : -EINVAL;
    size_t batch = rowbytes ? (8u << 20) / rowbytes : 1;
    if (batch == 0) batch = 1;
    void *buf = malloc(batch * rowbytes + 1);
    if (!buf && !rc) rc = -ENOMEM;
    for (size_t i = 0; i < nrows && !rc; i += batch) {
        size_t n = nrows - i < batch ? nrows - i : batch;
        rc = fill(ctx, i, n, buf);
        if (!rc) rc = write_all(fd, buf, n * rowbytes);
    }
    free(buf);
    if (!rc && fchmod(fd, 0644) != 0) rc = -errno;
    if (close(fd) != 0 && !rc) rc = -errno;
    if (!rc && rename(tmp, path) != 0) rc = -errno;
    if (rc) unlink(tmp);
    free(tmp);
    return rc;
}

typedef struct gctx {
    const cxs_dataset *ds;
    const uint64_t *frames;
    int all;
    uint32_t k;
    uint32_t flags;
    unsigned threads;
    uint64_t *scratch;
    const cxs_norm *norm; /* another dataset's statistics (--stats-from), or NULL */
    int failed;           /* a window could not be read: ... */
    uint64_t bad_frame;   /* ... the first frame whose window fails */
    int grc;              /* the gather's error, and what it said */
    cxs_diag diag;
    int label_failed;     /* a label could not be served: ... */
    uint64_t bad_label;   /* ... the frame whose label it is */
} gctx;

static const uint64_t *frames_for(gctx *g, size_t first, size_t n) {
    if (!g->all) return g->frames + first;
    for (size_t i = 0; i < n; i++) g->scratch[i] = first + i;
    return g->scratch;
}

static int gather_some(gctx *g, const uint64_t *f, size_t n, unsigned threads, void *buf) {
    return cxs_dataset_gather_ex(g->ds, f, n, g->k, g->norm ? CXS_GATHER_NORMALIZE : g->flags,
                                 g->norm, threads, buf, NULL, &g->diag);
}

static int fill_windows(void *ctx, size_t first, size_t n, void *buf) {
    gctx *g = ctx;
    const uint64_t *f = frames_for(g, first, n);
    int rc = gather_some(g, f, n, g->threads, buf);
    if (rc) g->grc = rc;
    if (rc == CXS_E_CHECKSUM || rc == CXS_E_CORRUPT) {
        /* A damaged chunk of a compressed shard: find the first window that
         * touches it (one at a time; the batch is lost anyway), so the
         * message can name the shard file rather than the output. */
        for (size_t i = 0; i < n; i++)
            if (gather_some(g, &f[i], 1, 1, buf) == rc) {
                g->failed = 1;
                g->bad_frame = f[i];
                break;
            }
    }
    return rc;
}

/* The file of shard `shard` of the dataset opened from `dir` (a dataset
 * directory, its manifest, or a shard file opened alone). */
static char *shard_file(const char *dir, const cxs_info *in, uint32_t shard) {
    if (in->single_shard) return strdup(dir);
    struct stat st;
    size_t dl = strlen(dir);
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) { /* the manifest's path */
        const char *slash = strrchr(dir, '/');
        dl = slash ? (size_t)(slash - dir) : 0;
        if (slash == dir) dl = 1;
    }
    char *p = malloc(dl + 32);
    if (!p) return NULL;
    if (dl == 0) snprintf(p, dl + 32, CXS_SHARD_NAME_FMT, shard);
    else snprintf(p, dl + 32, "%.*s%s" CXS_SHARD_NAME_FMT, (int)dl, dir,
                  dir[dl - 1] == '/' ? "" : "/", shard);
    return p;
}

/* The data, not the output, is at fault for frame `frame`: name the shard
 * file, the frame and its utterance (with the frame's place in it when
 * at), what of it failed and how, and the output left unwritten. */
static void frame_damage(const cxs_dataset *ds, const char *dir, const cxs_info *in,
                         uint64_t frame, const char *what, int at, const char *problem,
                         const char *out) {
    uint64_t u = 0, off = 0;
    cxs_utterance ut = {0};
    cxs_dataset_locate(ds, frame, &u, &off);
    cxs_dataset_utterance_ex(ds, u, CXS_UTTERANCE_NO_DATA, &ut, NULL);
    char *sp = shard_file(dir, in, ut.shard), place[48] = "";
    if (at) snprintf(place, sizeof place, ", frame %llu of it", (unsigned long long)off);
    warnx_("%s: the %s of frame %llu (utterance %llu, '%.*s'%s) %s (`ctxshard verify %s` lists "
           "the damage); %s not written",
           sp ? sp : dir, what, (unsigned long long)frame, (unsigned long long)u,
           (int)(ut.id_len > 64 ? 64 : ut.id_len), ut.id ? ut.id : "", place, problem, dir, out);
    free(sp);
}

static int fill_labels(void *ctx, size_t first, size_t n, void *buf) {
    gctx *g = ctx;
    const uint64_t *f = frames_for(g, first, n);
    int64_t *out = buf;
    for (size_t i = 0; i < n; i++) {
        uint32_t l;
        int rc = cxs_dataset_label(g->ds, f[i], &l);
        if (rc) {
            /* the dataset's fault (a damaged label), not the output's */
            g->label_failed = 1;
            g->bad_label = f[i];
            return rc;
        }
        out[i] = l;
    }
    return 0;
}

int gather_run(const char *dir, uint32_t k, const uint64_t *frames, size_t n, int all,
               const char *out, const char *labels_out, int normalize, const char *stats_from,
               unsigned threads) {
    cxs_dataset *ds, *train = NULL;
    int ec = open_or_report(dir, &ds);
    if (ec) return ec;
    if (stats_from && (ec = open_or_report(stats_from, &train))) {
        cxs_dataset_close(ds);
        return ec;
    }
    cxs_info in;
    cxs_dataset_info(ds, &in);
    if (in.vocab_size == 0 && in.num_skipped)
        warnx_("WARNING: %s is a features-only split (a test split?) with %llu utterance%s left "
               "out at pack time: the windows written are fewer than the raw split's frames "
               "(ctxshard info %s lists them; pack --fill-nonfinite keeps them)",
               dir, (unsigned long long)in.num_skipped, in.num_skipped == 1 ? "" : "s", dir);
    if (all) n = (size_t)in.num_frames;
    for (size_t i = 0; !all && i < n; i++)
        if (frames[i] >= in.num_frames) {
            warnx_("%s: frame %llu is past the end (the dataset has %llu frames)", dir,
                   (unsigned long long)frames[i], (unsigned long long)in.num_frames);
            cxs_dataset_close(ds);
            cxs_dataset_close(train);
            return EXIT_USAGE;
        }
    if (labels_out && !in.label_width) {
        if (in.label_seqs)
            warnx_("%s: a dataset of label sequences only: there are no frame labels to write",
                   dir);
        else
            warnx_("%s: features-only dataset: there are no labels to write", dir);
        cxs_dataset_close(ds);
        cxs_dataset_close(train);
        return EXIT_USAGE;
    }
    size_t row = (2 * (size_t)k + 1) * in.dim * sizeof(float);
    if (normalize && !in.num_frames) normalize = 0;
    cxs_stats st;
    cxs_dataset_stats(ds, &st);
    cxs_norm norm = {0, NULL, NULL};
    if (train) { /* normalise with another dataset's statistics (train's) */
        cxs_info ti;
        cxs_stats ts;
        cxs_dataset_info(train, &ti);
        cxs_dataset_stats(train, &ts);
        if (!ts.mean) {
            warnx_("%s: no stored statistics to normalise with (--stats-from needs a dataset "
                   "directory, not a shard alone)", stats_from);
            cxs_dataset_close(ds);
            cxs_dataset_close(train);
            return EXIT_USAGE;
        }
        if (ti.dim != in.dim) {
            warnx_("%s: statistics of %u dimensions, but %s has %u: --stats-from must name a "
                   "dataset of the same features (the training split)", stats_from, ti.dim,
                   dir, in.dim);
            cxs_dataset_close(ds);
            cxs_dataset_close(train);
            return EXIT_USAGE;
        }
        if (ti.normalize != in.normalize) {
            /* Statistics of per-utterance normalised features (mean ~0,
             * variance ~1) do not describe raw ones, nor the reverse. */
            warnx_("%s was packed %s, %s %s: its statistics cannot normalise it (pack both "
                   "splits with the same --normalize)",
                   stats_from,
                   ti.normalize == CXS_NORM_UTTERANCE ? "with --normalize utterance" : "without "
                                                                                     "--normalize utterance",
                   dir, in.normalize == CXS_NORM_UTTERANCE ? "with it" : "without it");
            cxs_dataset_close(ds);
            cxs_dataset_close(train);
            return EXIT_USAGE;
        }
        norm = (cxs_norm){in.dim, ts.mean, ts.var};
        normalize = 1;
    } else if (normalize && in.num_frames) {
        warnx_("%s: --normalize without --stats-from normalises by its own statistics; "
               "normalise every split (train, dev, test) with the training split's: "
               "--stats-from TRAIN_OUT (on the training split itself, --stats-from it says so "
               "and silences this)", dir);
    }
    if (normalize && !train && !st.mean) {
        warnx_("%s: no stored statistics to normalise with", dir);
        cxs_dataset_close(ds);
        cxs_dataset_close(train);
        return EXIT_USAGE;
    }
    gctx g = {.ds = ds, .frames = frames, .all = all, .k = k,
              .flags = normalize ? CXS_GATHER_NORMALIZE : 0, .threads = threads,
              .norm = train && in.num_frames ? &norm : NULL};
    size_t batch = (8u << 20) / row + 1;
    if (all && !(g.scratch = malloc(batch * sizeof *g.scratch))) {
        cxs_dataset_close(ds);
        cxs_dataset_close(train);
        return EXIT_SYSTEM;
    }
    uint64_t shape[2] = {n, (2 * (uint64_t)k + 1) * in.dim};
    char hb[32];
    const double total = (double)n * (double)row;
    if (total > (double)(1ull << 30)) /* say so before a long write */
        fprintf(stderr, "ctxshard gather: writing %s to %s (%zu windows of %llu float32)...\n",
                human_bytes(total, hb, sizeof hb), out, n, (unsigned long long)shape[1]);
    int rc = write_npy(out, "<f4", 2, shape, row, n, fill_windows, &g);
    const char *failed = out;
    if (!rc && labels_out) {
        g.scratch = realloc(g.scratch, ((8u << 20) / 8 + 1) * sizeof *g.scratch);
        rc = g.scratch || !all ? write_npy(labels_out, "<i8", 1, shape, 8, n, fill_labels, &g)
                               : -ENOMEM;
        failed = labels_out;
    }
    free(g.scratch);
    if (rc && g.label_failed) {
        /* A label the dataset cannot serve: name the shard file, the frame
         * and its utterance, not the labels' output file. */
        frame_damage(ds, dir, &in, g.bad_label, "label", 1,
                     rc == CXS_E_CORRUPT ? "is outside the vocabulary: the shard is damaged"
                                         : cxs_strerror(rc),
                     labels_out);
        cxs_dataset_close(ds);
        cxs_dataset_close(train);
        return exit_code_for(rc);
    }
    if (rc && g.failed && in.compression == CXS_COMPRESSION_NONE && g.diag.message[0]) {
        /* a damaged block of a table read at first use (format 1.3): the
         * library's message names the shard, the section and the block */
        warnx_("%s (`ctxshard verify %s` lists the damage); %s not written", g.diag.message, dir,
               out);
        cxs_dataset_close(ds);
        return exit_code_for(rc);
    }
    if (rc && g.failed) {
        /* The data is at fault, not the output: name the shard file. */
        char problem[128];
        snprintf(problem, sizeof problem, "touches a damaged compressed chunk: %s",
                 cxs_strerror(rc));
        frame_damage(ds, dir, &in, g.bad_frame, "window", 0, problem, out);
        cxs_dataset_close(ds);
        return exit_code_for(rc);
    }
    cxs_dataset_close(ds);
    if (rc) {
        cxs_dataset_close(train);
        if (g.grc == rc && g.diag.message[0]) warnx_("%s: %s", dir, g.diag.message);
        else warnx_("%s: %s", failed, cxs_strerror(rc));
        return exit_code_for(rc);
    }
    printf("wrote %s: %zu window%s of %llu float32 (context %u%s%s), %s\n", out, n,
           n == 1 ? "" : "s", (unsigned long long)shape[1], k,
           train ? ", normalised with the statistics of " : normalize ? ", normalised" : "",
           train ? stats_from : "", human_bytes(total, hb, sizeof hb));
    cxs_dataset_close(train);
    if (labels_out) printf("wrote %s: %zu label%s (int64)\n", labels_out, n, n == 1 ? "" : "s");
    return 0;
}
