/* import.c - what `ctxshard import kaldi` (import_kaldi.c) and `import
 * hdf5` (import_hdf5.c) share: pack's options as the writer's, the notes
 * and the progress bar, the failure message and the summary. */
#include "import.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cxs_format.h"
#include "util.h"

void import_writer_opts(const pack_opts *o, cxs_writer_opts *wo) {
    cxs_writer_opts_init(wo);
    wo->dtype = o->dtype;
    wo->guard = o->guard;
    wo->shard_size = o->shard_size;
    wo->normalize = o->normalize;
    wo->compression = o->compress;
    wo->level = o->level;
    wo->threads = o->threads < CXS_WRITER_MAX_THREADS ? o->threads : CXS_WRITER_MAX_THREADS;
    wo->chunk_size = o->chunk_size;
    wo->shuffle = (uint32_t)o->shuffle;
    wo->on_error_skip = (uint32_t)o->skip_bad;
    if (o->no_block_sums) wo->flags |= CXS_WRITER_NO_BLOCK_SUMS;
}

void import_note(void *user, const char *msg) {
    import_state *st = user;
    if (!st->quiet) warnx_("%s", msg);
}

int import_progress(void *user, uint64_t done, uint64_t total) {
    import_state *st = user;
    progress_update(&st->bar, done, total, "utterances");
    return g_interrupted;
}

int import_failed(int rc, const char *out, const cxs_diag *d) {
    if (rc == -ECANCELED) {
        warnx_("%s: interrupted; nothing written", out);
        return EXIT_SYSTEM;
    }
    warnx_("%s; nothing written", d->message);
    return rc == CXS_E_INPUT ? EXIT_DATA
           : rc == -EEXIST || rc == CXS_E_INVALID ? EXIT_USAGE
                                                   : EXIT_SYSTEM;
}

void import_summary(const cxs_import_info *info, const char *out, const pack_opts *o, double dt) {
    char a[32], b[32], kinds[64] = "";
    static const char *const names[] = {"FM", "DM", "FV", "DV", "CM", "CM2", "CM3", "text"};
    for (unsigned k = 0; k < 8; k++)
        if (info->kinds & (1u << k)) {
            size_t l = strlen(kinds);
            snprintf(kinds + l, sizeof kinds - l, "%s%s", l ? " " : "", names[k]);
        }
    printf("imported %llu utterance%s%s%s%s, %llu frames x %u dims (%s%s) into %u shard%s in %s\n",
           (unsigned long long)info->w.num_utterances, info->w.num_utterances == 1 ? "" : "s",
           kinds[0] ? " (" : "", kinds, kinds[0] ? ")" : "",
           (unsigned long long)info->w.num_frames, info->w.dim, cxs_dtype_name(o->dtype),
           o->compress ? ", zstd" : "", info->w.num_shards, info->w.num_shards == 1 ? "" : "s",
           out);
    printf("  read %s, wrote %s in %.2f s (%.0f MB/s of input, %.0f frames/s)\n",
           human_bytes((double)info->input_bytes, a, sizeof a),
           human_bytes((double)info->w.bytes_written, b, sizeof b), dt,
           (double)info->input_bytes / dt / 1e6, (double)info->w.num_frames / dt);
    if (info->w.num_skipped)
        printf("  skipped %llu bad utterance%s (listed in the dataset: ctxshard info %s)\n",
               (unsigned long long)info->w.num_skipped, info->w.num_skipped == 1 ? "" : "s", out);
    if (info->codes_kept)
        printf("  kept the codes of %llu Kaldi %s object%s (no second quantization)\n",
               (unsigned long long)info->codes_kept, o->dtype == CXS_DTYPE_Q8 ? "CM" : "CM2",
               info->codes_kept == 1 ? "" : "s");
}

void import_reencoded(const cxs_import_info *info, const char *out, const pack_opts *o) {
    if (info->reencoded)
        warnx_("%s: %llu utterance%s of other Kaldi kinds than %s encoded as %s from their "
               "decoded values (a second quantization)", out, (unsigned long long)info->reencoded,
               info->reencoded == 1 ? "" : "s", o->dtype == CXS_DTYPE_Q8 ? "CM" : "CM2",
               cxs_dtype_name(o->dtype));
}
