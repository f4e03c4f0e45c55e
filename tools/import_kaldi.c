/* import_kaldi.c - `ctxshard import kaldi SCP_OR_ARK OUT`: the options of
 * pack turned into the library's importer (lib/kaldi_import.c, through
 * ctxshard_import.h), which reads, decodes and hands utterances to the
 * writer; this file prints its notes, the progress bar and the summary. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard_import.h"
#include "cxs_format.h"
#include "import.h"
#include "util.h"

typedef struct run_state {
    progress bar;
    int quiet;
} run_state;

static void on_note(void *user, const char *msg) {
    run_state *st = user;
    if (!st->quiet) warnx_("%s", msg);
}

static int on_progress(void *user, uint64_t done, uint64_t total) {
    run_state *st = user;
    progress_update(&st->bar, done, total, "utterances");
    return g_interrupted;
}

int import_kaldi_run(const char *in, const char *out, const pack_opts *o,
                     const import_opts *io) {
    cxs_writer_opts wo;
    cxs_writer_opts_init(&wo);
    wo.dtype = o->dtype;
    wo.guard = o->guard;
    wo.shard_size = o->shard_size;
    wo.normalize = o->normalize;
    wo.compression = o->compress;
    wo.level = o->level;
    wo.threads = o->threads < CXS_WRITER_MAX_THREADS ? o->threads : CXS_WRITER_MAX_THREADS;
    wo.chunk_size = o->chunk_size;
    wo.shuffle = (uint32_t)o->shuffle;
    wo.on_error_skip = (uint32_t)o->skip_bad;
    run_state st = {{0}, o->quiet};
    cxs_kaldi_opts ko;
    cxs_kaldi_opts_init(&ko);
    ko.text = io->text;
    ko.ali = io->ali;
    ko.vocab = o->vocab_path;
    ko.flags = io->no_sort ? CXS_KALDI_NO_SORT : 0;
    ko.note = on_note;
    ko.note_user = &st;
    cxs_import_info info;
    cxs_diag d = {{0}};
    install_signal_flag();
    progress_init(&st.bar, "import", o->quiet);
    double t0 = now_seconds();
    int rc = cxs_import_kaldi(in, out, &wo, &ko, on_progress, &st, &info, &d);
    progress_done(&st.bar);
    if (rc) {
        if (rc == -ECANCELED) {
            warnx_("%s: interrupted; nothing written", out);
            return EXIT_SYSTEM;
        }
        warnx_("%s; nothing written", d.message);
        return rc == CXS_E_INPUT ? EXIT_DATA : rc == -EEXIST || rc == CXS_E_INVALID ? EXIT_USAGE
                                                                                  : EXIT_SYSTEM;
    }
    if (!o->quiet) {
        double dt = now_seconds() - t0;
        char a[32], b[32], kinds[64] = "";
        static const char *const names[] = {"FM", "DM", "FV", "DV", "CM", "CM2", "CM3"};
        for (unsigned k = 0; k < 7; k++)
            if (info.kinds & (1u << k)) {
                size_t l = strlen(kinds);
                snprintf(kinds + l, sizeof kinds - l, "%s%s", l ? " " : "", names[k]);
            }
        printf("imported %llu utterance%s (%s), %llu frames x %u dims (%s%s) into %u shard%s in "
               "%s\n", (unsigned long long)info.w.num_utterances,
               info.w.num_utterances == 1 ? "" : "s", kinds, (unsigned long long)info.w.num_frames,
               info.w.dim, cxs_dtype_name(o->dtype), o->compress ? ", zstd" : "",
               info.w.num_shards, info.w.num_shards == 1 ? "" : "s", out);
        printf("  read %s, wrote %s in %.2f s (%.0f MB/s of input, %.0f frames/s)\n",
               human_bytes((double)info.input_bytes, a, sizeof a),
               human_bytes((double)info.w.bytes_written, b, sizeof b), dt,
               (double)info.input_bytes / dt / 1e6, (double)info.w.num_frames / dt);
        if (io->text)
            printf("  label sequences from %s, vocabulary of %u symbols%s\n", io->text,
                   info.vocab_size, o->vocab_path ? "" : " (built from the data)");
        else if (io->ali)
            printf("  frame labels from %s, vocabulary of %u symbols%s\n", io->ali,
                   info.vocab_size, o->vocab_path ? "" : " (built from the data)");
        else
            printf("  features only (no --text or --ali)\n");
        if (info.w.num_skipped)
            printf("  skipped %llu bad utterance%s (listed in the dataset: ctxshard info %s)\n",
                   (unsigned long long)info.w.num_skipped, info.w.num_skipped == 1 ? "" : "s",
                   out);
    }
    return 0;
}
