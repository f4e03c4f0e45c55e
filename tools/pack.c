/* pack.c - `ctxshard pack RAW OUT`: the options turned into the library's
 * raw-directory importer (cxs_import_npy, lib/import/npy_import.c), which
 * plans the shards, reads, validates and converts the utterances and hands
 * them to the writer; this file prints its notes, the progress bar and the
 * summary.  What pack and convert share, too. */
#include "pack.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"
#include "ctxshard_import.h"
#include "ctxshard_writer.h"
#include "cxs_format.h"
#include "cxs_qcodec.h"
#include "import.h"
#include "util.h"

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

/* What the run prints as it goes: the notes (unless --quiet), the
 * problems it skips and the values it zero-fills, and a few ids of each
 * for the summary. */
typedef struct pack_state {
    import_state st;
    int skip_bad, failed; /* failed: an utterance's problem failed the pack */
    char lost[256], kept[256];
} pack_state;

static void pack_warn(void *user, const char *msg) {
    (void)user;
    warnx_("%s", msg);
}

static void pack_event(void *user, int kind, const char *id, uint64_t count, const cxs_diag *d) {
    pack_state *ps = user;
    (void)count;
    if (kind == CXS_NPY_PROBLEM && !ps->skip_bad) {
        ps->failed = 1;
    } else if (kind == CXS_NPY_PROBLEM) {
        if (!ps->st.quiet) warnx_("skipped: %s", d->message);
        add_id(ps->lost, sizeof ps->lost, id);
    } else if (kind == CXS_NPY_FILLED) {
        if (!ps->st.quiet) warnx_("zero-filled: %s", d->message);
        add_id(ps->kept, sizeof ps->kept, id);
    }
}

int raw_missing(const char *rawdir, int rc, const cxs_diag *d) {
    if (rc != -ENOENT && rc != -ENOTDIR) return 0;
    if (!strcmp(d->file, rawdir)) return 1;
    size_t n = strlen(rawdir);
    if (strncmp(d->file, rawdir, n)) return 0;
    const char *rest = d->file + n; /* d->file holds at least n bytes here */
    return !strcmp(rest, "/mfcc") || (n && rawdir[n - 1] == '/' && !strcmp(rest, "mfcc"));
}

void pack_npy_opts(const pack_opts *o, cxs_npy_opts *no, void *user) {
    cxs_npy_opts_init(no);
    no->vocab_file = o->vocab_path;
    no->sos = o->sos;
    no->eos = o->eos;
    no->transcripts = (uint32_t)o->transcripts;
    no->flags = o->fill_nonfinite ? CXS_NPY_FILL_NONFINITE : 0;
    no->note = import_note;
    no->warn = pack_warn;
    no->user = user;
}

int pack_run(const char *rawdir, const char *out, const pack_opts *o) {
    pack_state ps = {{{0}, o->quiet}, o->skip_bad, 0, "", ""};
    cxs_writer_opts wo;
    import_writer_opts(o, &wo);
    /* Parts without --shard-size: the plan chooses one that gives each part work. */
    wo.shard_size = o->shard_size_set ? o->shard_size : 0;
    wo.threads = o->threads;
    cxs_npy_opts no;
    pack_npy_opts(o, &no, &ps);
    no.event = pack_event;
    no.part = o->part;
    no.parts = o->parts;
    cxs_import_info info;
    cxs_diag d = {0};
    install_signal_flag(); /* before anything exists that a signal would strand */
    progress_init(&ps.st.bar, "pack", o->quiet);
    double t0 = now_seconds();
    int rc = cxs_import_npy(rawdir, out, &wo, &no, import_progress, &ps.st, &info, &d);
    progress_done(&ps.st.bar);
    if (rc == CXS_E_INPUT && ps.failed) {
        /* one utterance's problem */
        warnx_("%s", d.message);
        warnx_("nothing written (use --on-error skip to leave bad utterances out, or "
               "`ctxshard check %s` to list every problem)", rawdir);
        return EXIT_DATA;
    }
    if (raw_missing(rawdir, rc, &d)) {
        warnx_("%s", d.message);
        return EXIT_DATA;
    }
    if (rc && o->vocab_path && !strcmp(d.file, o->vocab_path)) { /* --vocab FILE unreadable */
        warnx_("%s", d.message);
        return EXIT_USAGE;
    }
    if (rc) return import_failed(rc, out, &d);
    const int is_part = o->parts > 0, empty_part = is_part && info.shard_first == info.shard_end;
    if (!o->quiet) {
        double dt = now_seconds() - t0;
        char a[32], b[32];
        if (empty_part)
            printf("packed part %u of %u: empty (the layout has %u shard%s for %u parts); merge "
                   "still needs it\n", o->part, o->parts, info.shards_planned,
                   info.shards_planned == 1 ? "" : "s", o->parts);
        else if (is_part)
            printf("packed part %u of %u: shards %u..%u of %u (%llu listed utterance%s)\n",
                   o->part, o->parts, info.shard_first, info.shard_end, info.shards_planned,
                   (unsigned long long)(info.w.num_utterances + info.w.num_skipped),
                   info.w.num_utterances + info.w.num_skipped == 1 ? "" : "s");
        if (!empty_part) {
            printf("packed %llu utterance%s, %llu frames x %u dims (%s%s) into %u shard%s in %s\n",
                   (unsigned long long)info.w.num_utterances, info.w.num_utterances == 1 ? "" : "s",
                   (unsigned long long)info.w.num_frames, info.w.dim, cxs_dtype_name(o->dtype),
                   o->compress ? ", zstd" : "", info.w.num_shards, info.w.num_shards == 1 ? "" : "s",
                   out);
            printf("  read %s, wrote %s in %.2f s (%.0f MB/s of input, %.0f frames/s)\n",
                   human_bytes((double)info.input_bytes, a, sizeof a),
                   human_bytes((double)info.w.bytes_written, b, sizeof b), dt,
                   (double)info.input_bytes / dt / 1e6, (double)info.w.num_frames / dt);
        }
        if (!info.has_labels)
            printf("  features only: no transcript/ directory in %s (no labels)\n", rawdir);
        else if (o->transcripts != CXS_TRANSCRIPTS_FRAMES)
            printf("  label sequences%s (--transcripts %s)\n",
                   o->transcripts == CXS_TRANSCRIPTS_SEQUENCE ? ", no frame labels"
                                                              : " and frame labels",
                   o->transcripts == CXS_TRANSCRIPTS_SEQUENCE ? "sequence" : "both");
        if (info.w.num_skipped)
            printf("  skipped %llu bad utterance%s (listed in the dataset: ctxshard info %s)\n",
                   (unsigned long long)info.w.num_skipped, info.w.num_skipped == 1 ? "" : "s",
                   out);
        if (info.filled_utts)
            printf("  zero-filled %llu NaN or infinite value%s in %llu utterance%s (%s; "
                   "--fill-nonfinite)\n",
                   (unsigned long long)info.filled_values, info.filled_values == 1 ? "" : "s",
                   (unsigned long long)info.filled_utts, info.filled_utts == 1 ? "" : "s",
                   ps.kept);
        if (is_part)
            printf("  join the parts with: ctxshard merge PART... OUT\n");
    }
    if (!info.has_labels && info.w.num_skipped)
        /* Even with --quiet: a prediction per frame of a test split is the
         * point of it, and each utterance left out shifts every later one. */
        /* --fill-nonfinite keeps only those left out for a NaN or an
         * infinity; a value a coded dtype cannot hold needs a float dtype */
        warnx_("WARNING: %s is a features-only split (a test split?) and %llu utterance%s "
               "%s left out (%s): predictions over it have fewer rows than the split has "
               "frames, and every frame after a gap is shifted.  Keep them: fix the files, or "
               "pack with --fill-nonfinite where the reason given is a NaN or an infinity "
               "(stored as 0)%s",
               out, (unsigned long long)info.w.num_skipped, info.w.num_skipped == 1 ? "" : "s",
               info.w.num_skipped == 1 ? "was" : "were", ps.lost,
               cxs_dtype_coded(o->dtype) ? ", with --dtype f32 where it is a value the coded "
                                           "dtype cannot hold"
                                         : "");
    return 0;
}
