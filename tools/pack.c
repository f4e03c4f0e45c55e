/* pack.c - `ctxshard pack`: the shard plan, then the read/convert pipeline
 * (pipeline.c) handing utterances in id order to the library's writer,
 * which owns the shards, the statistics, the manifest and the atomic
 * commit (lib/write/writer.c). */
#include "pack.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ctxshard.h"
#include "ctxshard_writer.h"
#include "cxs_format.h"
#include "cxs_le.h"
#include "pipeline.h"
#include "raw.h"
#include "util.h"

/* ---- the shard plan --------------------------------------------------- */

/* Which shard every listed utterance goes to, decided before any data is
 * read so that a part of the list can be packed alone and still cut its
 * shards where a single pack would.  Utterances are taken greedily in id
 * order while the uncompressed shard file stays within the shard size,
 * each counted with the frames its features header declares (0 when the
 * header cannot be read) and the dataset's width (the most common among
 * the headers): exactly the shards of the data when every utterance is
 * valid.  An utterance left out later under --on-error skip keeps its
 * place; a shard left empty is not written. */
typedef struct plan {
    uint64_t *T;
    uint32_t *D;
    uint32_t *member;
    uint32_t nshards;
    uint32_t width;      /* the most common width; 0 when no header reads */
    uint64_t shard_size; /* the one the layout used */
    uint64_t input_hash; /* ids, frames, widths, transcript presence */
    char census[512];    /* "119 files of 28, 1 of 40" when the files differ */
    const char *odd;     /* the one file of another width, if one */
} plan;

static void plan_free(plan *pl) {
    free(pl->T);
    free(pl->D);
    free(pl->member);
    memset(pl, 0, sizeof *pl);
}

/* Lay the plan's utterances out in shards of at most shard_size; the
 * number of shards. */
static uint32_t plan_layout(plan *pl, const raw_set *rs, const pack_opts *o, uint32_t lw,
                            uint64_t shard_size) {
    const uint64_t E = cxs_dtype_size(o->dtype), G = o->guard;
    uint64_t U = 0, F = 0, idb = 0;
    uint32_t s = 0;
    for (size_t i = 0; i < rs->n; i++) {
        uint64_t il = strlen(rs->items[i].id), T = pl->T[i];
        uint64_t size = cxs_shard_file_size(U + 1, F + T, idb + il, pl->width, E, G, lw);
        if (U > 0 && size > shard_size) {
            s++;
            U = F = idb = 0;
        }
        U++;
        F += T;
        idb += il;
        pl->member[i] = s;
    }
    pl->shard_size = shard_size;
    pl->nshards = rs->n ? s + 1 : 0;
    return pl->nshards;
}

/* The shard size for N parts without --shard-size: the smallest size (in
 * whole MiB, KiB when small, at most `cap`) that lays the data out in at
 * most k*N shards, k being as many per part as keep the shards within cap.
 * Greedy shards of at most C bytes hold the data in at least size/C of
 * them, so the search starts from the whole data as one shard over k*N;
 * the shards come out about equal, and so do the parts.  When no size
 * gives N shards (huge utterances, fewer utterances than parts), the one
 * that gives the most. */
static uint64_t size_for_parts(plan *pl, const raw_set *rs, const pack_opts *o, uint32_t lw,
                               uint64_t cap) {
    uint64_t F = 0, idb = 0;
    for (size_t i = 0; i < rs->n; i++) {
        F += pl->T[i];
        idb += strlen(rs->items[i].id);
    }
    uint64_t all = cxs_shard_file_size(rs->n, F, idb, pl->width, cxs_dtype_size(o->dtype),
                                       o->guard, lw);
    uint64_t N = o->parts, k = (all + N * cap - 1) / (N * cap), target = N * (k ? k : 1);
    uint64_t lo = all / target;
    const uint64_t unit = lo >= (64u << 20) ? 1u << 20 : 1u << 10;
    lo = lo / unit * unit;
    if (lo < MIN_SHARD_SIZE) lo = MIN_SHARD_SIZE;
    if (lo > cap) lo = cap;
    uint64_t hi = cap / unit * unit;
    if (hi < lo) hi = lo;
    if (plan_layout(pl, rs, o, lw, hi) > target) return cap; /* cap is already the answer */
    /* The smallest multiple of unit in [lo, hi] with at most target shards. */
    while (hi - lo > unit && hi > lo) {
        uint64_t mid = (lo + (hi - lo) / 2) / unit * unit;
        if (mid <= lo) break;
        if (plan_layout(pl, rs, o, lw, mid) <= target) hi = mid;
        else lo = mid;
    }
    uint64_t c = plan_layout(pl, rs, o, lw, lo) <= target ? lo : hi;
    if (plan_layout(pl, rs, o, lw, c) >= N || plan_layout(pl, rs, o, lw, c) >= rs->n) return c;
    /* Huge utterances: smaller, until the layout has N shards or no more. */
    uint64_t best = c;
    uint32_t best_n = pl->nshards;
    while (c > MIN_SHARD_SIZE && best_n < N && best_n < rs->n) {
        c = c / 8 * 7 / 1024 * 1024;
        if (c < MIN_SHARD_SIZE) c = MIN_SHARD_SIZE;
        uint32_t n = plan_layout(pl, rs, o, lw, c);
        if (n > best_n) {
            best_n = n;
            best = c;
        }
    }
    return best;
}

/* A size as --shard-size takes it. */
static const char *size_arg(uint64_t v, char *buf, size_t n) {
    static const char units[] = "TGMK";
    for (int u = 0; u < 4; u++) {
        uint64_t m = 1ull << (10 * (4 - u));
        if (v % m == 0) {
            snprintf(buf, n, "%llu%c", (unsigned long long)(v / m), units[u]);
            return buf;
        }
    }
    snprintf(buf, n, "%llu", (unsigned long long)v);
    return buf;
}

static int plan_make(plan *pl, const raw_set *rs, const pack_opts *o, uint32_t lw, unsigned threads) {
    memset(pl, 0, sizeof *pl);
    size_t n = rs->n;
    pl->T = calloc(n + 1, sizeof *pl->T);
    pl->D = calloc(n + 1, sizeof *pl->D);
    pl->member = calloc(n + 1, sizeof *pl->member);
    if (!pl->T || !pl->D || !pl->member) return -ENOMEM;
    probe_all(rs, threads, pl->T, pl->D);
    pl->width = width_majority(rs, pl->D, pl->census, sizeof pl->census, &pl->odd);
    XXH3_state_t *h = XXH3_createState();
    if (!h) return -ENOMEM;
    XXH3_64bits_reset(h);
    for (size_t i = 0; i < n; i++) {
        uint8_t rec[14];
        cxs_st64(rec, pl->T[i]);
        cxs_st32(rec + 8, pl->D[i]);
        rec[12] = rs->items[i].mfcc != NULL;
        rec[13] = rs->items[i].transcript != NULL;
        XXH3_64bits_update(h, rs->items[i].id, strlen(rs->items[i].id) + 1);
        XXH3_64bits_update(h, rec, sizeof rec);
    }
    pl->input_hash = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    /* Parts without --shard-size: a shard size that gives each part work. */
    uint64_t size = o->shard_size;
    if (o->parts > 1 && !o->shard_size_set) size = size_for_parts(pl, rs, o, lw, size);
    plan_layout(pl, rs, o, lw, size);
    return 0;
}

/* ---- what pack and convert share ------------------------------------- */

/* Print what cxs_writer_create said; the exit code. */
int create_failed(int rc, const cxs_diag *d) {
    warnx_("%s", d->message);
    return rc == -EEXIST ? EXIT_USAGE : EXIT_SYSTEM;
}

void say_stale(const cxs_writer *w, const char *out, int quiet) {
    cxs_writer_info wi;
    cxs_writer_info_get(w, &wi);
    if (wi.stale_removed && !quiet)
        warnx_("removed %u temporary director%s beside %s, left by an interrupted pack",
               wi.stale_removed, wi.stale_removed == 1 ? "y" : "ies", out);
}

/* Append id to a short comma-separated list in buf (cap bytes), ending it
 * with "..." once full. */
static void add_id(char *buf, size_t cap, const char *id) {
    size_t n = strlen(buf);
    if (n >= 3 && !strcmp(buf + n - 3, "...")) return;
    int w = snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", id);
    if (w < 0 || (size_t)w >= cap - n) {
        buf[n] = 0;
        snprintf(buf + n, cap - n, "%s...", n ? ", " : "");
    }
}

int pack_run(const char *rawdir, const char *out, const pack_opts *o) {
    raw_set rs;
    vocab v;
    int ec = open_raw(rawdir, o->vocab_path, o->sos, o->eos, &rs, &v), rc = 0;
    if (ec) return ec;
    pipeline p = {0};
    plan pl = {0};
    cxs_writer *w = NULL;
    cxs_diag d;
    const int is_part = o->parts > 0;
    double t0 = now_seconds();
    const uint32_t vocab_n = rs.has_transcripts ? v.n : 0;
    /* The width of the frame labels (LABELS): none with label sequences
     * only.  The layout counts LABELS, not the sequences (spec 9). */
    const int seq_only = vocab_n && o->transcripts == TRANSCRIPTS_SEQUENCE;
    const uint32_t lw = vocab_n == 0 || seq_only ? 0 : vocab_n <= 256 ? 1 : 2;
    const uint32_t sw = vocab_n == 0 ? 0 : vocab_n <= 256 ? 1 : 2;
    if ((rc = plan_make(&pl, &rs, o, lw, o->threads))) {
        warnx_("%s: %s; nothing written", out, strerror(-rc));
        ec = EXIT_SYSTEM;
        goto out;
    }
    char sz[32], sz2[32];
    if (pl.census[0] && !o->quiet)
        warnx_("%s/mfcc: widths: %s%s%s; packing width %u, the most common", rawdir, pl.census,
               pl.odd ? ": " : "", pl.odd ? pl.odd : "", pl.width);
    if (is_part && o->shard_size_set && pl.nshards < o->parts && pl.nshards < rs.n) {
        {
            /* What the size would be without --shard-size: the fix. */
            uint32_t S = pl.nshards;
            uint64_t c = size_for_parts(&pl, &rs, o, lw, o->shard_size);
            pl.nshards = S;
            warnx_("--part %u/%u: --shard-size %s lays %s out in %u shard%s, so %u of the %u "
                   "parts would have nothing to pack; give --shard-size %s or less, or leave "
                   "--shard-size out (pack then chooses it for %u parts); nothing written",
                   o->part, o->parts, size_arg(o->shard_size, sz, sizeof sz), rawdir,
                   pl.nshards, pl.nshards == 1 ? "" : "s", o->parts - pl.nshards, o->parts,
                   size_arg(c, sz2, sizeof sz2), o->parts);
            ec = EXIT_USAGE;
            goto out;
        }
    }
    if (is_part && !o->quiet && pl.shard_size != o->shard_size)
        warnx_("--part %u/%u: shards of at most %s (not %s), so that each of the %u parts has "
               "about the same work; merge gives the bytes of `ctxshard pack %s OUT "
               "--shard-size %s`", o->part, o->parts, size_arg(pl.shard_size, sz, sizeof sz),
               size_arg(o->shard_size, sz2, sizeof sz2), o->parts, rawdir, sz);
    /* This run's slice: whole shards of the plan, so that parts meet at
     * shard boundaries; item range [i_lo, i_hi). */
    uint32_t s_lo = 0, s_hi = pl.nshards;
    if (is_part) {
        s_lo = (uint32_t)((uint64_t)pl.nshards * (o->part - 1) / o->parts);
        s_hi = (uint32_t)((uint64_t)pl.nshards * o->part / o->parts);
    }
    size_t i_lo = 0, i_hi = rs.n;
    while (i_lo < rs.n && pl.member[i_lo] < s_lo) i_lo++;
    i_hi = i_lo;
    while (i_hi < rs.n && pl.member[i_hi] < s_hi) i_hi++;
    uint64_t f_base = 0;
    for (size_t i = 0; i < i_lo; i++) f_base += pl.T[i];
    const int empty_part = is_part && s_lo == s_hi;
    if (empty_part)
        warnx_("%s: part %u of %u has nothing to pack: the %zu utterance%s of %s make%s only %u "
               "shard%s, fewer than %u parts; it is written empty because merge needs every part "
               "(use --part I/%u, or fewer tasks, to give every part work)", out, o->part,
               o->parts, rs.n, rs.n == 1 ? "" : "s", rawdir, rs.n == 1 ? "s" : "", pl.nshards,
               pl.nshards == 1 ? "" : "s", o->parts, pl.nshards ? pl.nshards : 1);
    cxs_writer_part part = {o->part, o->parts, s_lo, s_hi, pl.nshards, i_lo, f_base,
                            rs.n, i_lo, i_hi, pl.input_hash};
    cxs_writer_opts wo;
    cxs_writer_opts_init(&wo);
    wo.dtype = o->dtype;
    wo.guard = o->guard;
    wo.shard_size = pl.shard_size;
    wo.normalize = o->normalize;
    wo.compression = o->compress;
    wo.level = o->level;
    /* compression threads (the same bytes for any N), as many as the writer takes */
    wo.threads = o->threads < CXS_WRITER_MAX_THREADS ? o->threads : CXS_WRITER_MAX_THREADS;
    wo.chunk_size = o->chunk_size;
    wo.shuffle = (uint32_t)o->shuffle;
    wo.vocab_size = vocab_n;
    wo.vocab = (const char *const *)v.sym;
    wo.on_error_skip = (uint32_t)o->skip_bad;
    wo.label_seqs = !vocab_n ? CXS_SEQ_NONE
                    : o->transcripts == TRANSCRIPTS_SEQUENCE ? CXS_SEQ_ONLY
                    : o->transcripts == TRANSCRIPTS_BOTH     ? CXS_SEQ_WITH_FRAMES
                                                             : CXS_SEQ_NONE;
    /* The plan cuts the shards, so that a part cuts them where a whole
     * pack would. */
    wo.flags = CXS_WRITER_MANUAL_CUT | (o->no_block_sums ? CXS_WRITER_NO_BLOCK_SUMS : 0);
    wo.part = is_part ? &part : NULL;
    install_signal_flag(); /* before anything exists that a signal would strand */
    if ((rc = cxs_writer_create(out, &wo, &w, &d))) {
        ec = create_failed(rc, &d);
        goto out;
    }
    say_stale(w, out, o->quiet);
    conv_opts co = {o->dtype, o->normalize, rs.has_transcripts ? &v : NULL, o->transcripts,
                    o->fill_nonfinite};
    if ((rc = pipeline_start(&p, &rs, &co, o->threads, i_lo, i_hi))) {
        warnx_("%s: %s; nothing written", out, strerror(-rc));
        ec = EXIT_SYSTEM;
        goto out;
    }
    progress bar;
    progress_init(&bar, "pack", o->quiet);
    uint32_t D = pl.width, cur = 0;
    int have = 0;
    uint64_t bytes_in = 0;
    /* For the warning of a features-only split that lost utterances, and
     * the summary of the ones --fill-nonfinite kept: a few ids each. */
    char lost[256] = "", kept[256] = "";
    uint64_t nfilled_utts = 0, nfilled = 0;
    for (size_t i = i_lo; i < i_hi; i++) {
        if (g_interrupted) {
            warnx_("%s: interrupted; nothing written", out);
            ec = EXIT_SYSTEM;
            goto out;
        }
        slot *s = pipeline_get(&p, i);
        if (s->status == -2) {
            warnx_("%s", s->why);
            ec = EXIT_SYSTEM;
            goto out;
        }
        width_check(s, &rs, i, &D, pl.census);
        const raw_item *it = &rs.items[i];
        if (s->status == -1) {
            if (!o->skip_bad) {
                warnx_("%s", s->why);
                warnx_("nothing written (use --on-error skip to leave bad utterances out, or "
                       "`ctxshard check %s` to list every problem)", rawdir);
                ec = EXIT_DATA;
                goto out;
            }
            if (!o->quiet) warnx_("skipped: %s", s->why);
            add_id(lost, sizeof lost, it->id);
            /* the list holds one line per utterance: a TAB or newline of a
             * path in the reason becomes a space */
            for (char *c = s->why; *c; c++)
                if (*c == '\t' || *c == '\n' || *c == '\r') *c = ' ';
            if ((rc = cxs_writer_skip(w, it->id, s->why))) {
                warnx_("%s: %s; nothing written", out, strerror(-rc));
                ec = EXIT_SYSTEM;
                goto out;
            }
        } else {
            bytes_in += s->u.file_bytes;
            if (s->u.filled) {
                if (!o->quiet)
                    warnx_("zero-filled: %s: %llu NaN or infinite value%s stored as 0", it->mfcc,
                           (unsigned long long)s->u.filled, s->u.filled == 1 ? "" : "s");
                nfilled_utts++;
                nfilled += s->u.filled;
                add_id(kept, sizeof kept, it->id);
            }
            if (have && pl.member[i] != cur && (rc = cxs_writer_cut(w, &d))) goto addfail;
            cur = pl.member[i];
            have = 1;
            cxs_writer_utt u = {s->u.feat, s->u.T, s->u.D, o->dtype, 0, 0, 0,
                                lw ? s->u.labels : NULL, lw ? s->u.T : 0, lw, 1,
                                wo.label_seqs ? s->u.seq : NULL,
                                wo.label_seqs ? s->u.seq_len : 0, sw};
            if ((rc = cxs_writer_add(w, it->id, &u, &d))) goto addfail;
        }
        pipeline_release(&p, i);
        progress_update(&bar, i + 1 - i_lo, i_hi - i_lo, "utterances");
    }
    progress_done(&bar);
    pipeline_stop(&p);
    cxs_writer_info wi;
    cxs_writer_info_get(w, &wi);
    if (wi.num_utterances == 0 && !is_part) {
        warnx_("%s: no valid utterance to pack (%llu skipped); nothing written", rawdir,
               (unsigned long long)wi.num_skipped);
        ec = EXIT_DATA;
        goto out;
    }
    ec = commit_writer(w, &wi);
    w = NULL;
    if (ec) goto out;
    if (!o->quiet) {
        double dt = now_seconds() - t0;
        char a[32], b[32];
        if (empty_part)
            printf("packed part %u of %u: empty (the layout has %u shard%s for %u parts); merge "
                   "still needs it\n", o->part, o->parts, pl.nshards, pl.nshards == 1 ? "" : "s",
                   o->parts);
        else if (is_part)
            printf("packed part %u of %u: shards %u..%u of %u (%llu listed utterance%s)\n", o->part,
                   o->parts, s_lo, s_hi, pl.nshards, (unsigned long long)(i_hi - i_lo),
                   i_hi - i_lo == 1 ? "" : "s");
        if (!empty_part) {
            printf("packed %llu utterance%s, %llu frames x %u dims (%s%s) into %u shard%s in %s\n",
                   (unsigned long long)wi.num_utterances, wi.num_utterances == 1 ? "" : "s",
                   (unsigned long long)wi.num_frames, wi.dim,
                   cxs_dtype_name(o->dtype), o->compress ? ", zstd" : "", wi.num_shards,
                   wi.num_shards == 1 ? "" : "s", out);
            printf("  read %s, wrote %s in %.2f s (%.0f MB/s of input, %.0f frames/s)\n",
                   human_bytes((double)bytes_in, a, sizeof a),
                   human_bytes((double)wi.bytes_written, b, sizeof b), dt,
                   (double)bytes_in / dt / 1e6, (double)wi.num_frames / dt);
        }
        if (!rs.has_transcripts)
            printf("  features only: no transcript/ directory in %s (no labels)\n", rawdir);
        else if (wo.label_seqs)
            printf("  label sequences%s (--transcripts %s)\n",
                   wo.label_seqs == CXS_SEQ_ONLY ? ", no frame labels" : " and frame labels",
                   wo.label_seqs == CXS_SEQ_ONLY ? "sequence" : "both");
        if (wi.num_skipped)
            printf("  skipped %llu bad utterance%s (listed in the dataset: ctxshard info %s)\n",
                   (unsigned long long)wi.num_skipped, wi.num_skipped == 1 ? "" : "s", out);
        if (nfilled_utts)
            printf("  zero-filled %llu NaN or infinite value%s in %llu utterance%s (%s; "
                   "--fill-nonfinite)\n",
                   (unsigned long long)nfilled, nfilled == 1 ? "" : "s",
                   (unsigned long long)nfilled_utts, nfilled_utts == 1 ? "" : "s", kept);
        if (is_part)
            printf("  join the parts with: ctxshard merge PART... OUT\n");
    }
    if (!rs.has_transcripts && wi.num_skipped)
        /* Even with --quiet: a prediction per frame of a test split is the
         * point of it, and each utterance left out shifts every later one. */
        warnx_("WARNING: %s is a features-only split (a test split?) and %llu utterance%s "
               "%s left out (%s): predictions over it have fewer rows than the split has "
               "frames, and every frame after a gap is shifted.  Keep them: fix the files, or "
               "pack with --fill-nonfinite to store NaN/infinite values as 0",
               out, (unsigned long long)wi.num_skipped, wi.num_skipped == 1 ? "" : "s",
               wi.num_skipped == 1 ? "was" : "were", lost);
    goto out;
addfail:
    /* The reader threads validated the utterance: a refusal here is the
     * system's (disk full, out of memory). */
    warnx_("%s%s", d.message, rc == CXS_E_INPUT ? "" : "; nothing written");
    ec = rc == CXS_E_INPUT ? EXIT_DATA : EXIT_SYSTEM;
out:
    pipeline_stop(&p);
    cxs_writer_abort(w);
    plan_free(&pl);
    vocab_free(&v);
    raw_free(&rs);
    return ec;
}
