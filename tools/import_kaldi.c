/* import_kaldi.c - `ctxshard import kaldi SCP_OR_ARK OUT`: the options of
 * pack turned into the library's importer (lib/import/kaldi_import.c, through
 * ctxshard_import.h), which reads, decodes and hands utterances to the
 * writer; this file prints its notes, the progress bar and the summary. */
#include <stdio.h>

#include "ctxshard_import.h"
#include "import.h"
#include "util.h"

int import_kaldi_run(const char *in, const char *out, const pack_opts *o,
                     const import_opts *io) {
    cxs_writer_opts wo;
    import_writer_opts(o, &wo);
    import_state st = {{0}, o->quiet};
    cxs_kaldi_opts ko;
    cxs_kaldi_opts_init(&ko);
    ko.text = io->text;
    ko.ali = io->ali;
    ko.vocab = o->vocab_path;
    ko.flags = (io->no_sort ? CXS_KALDI_NO_SORT : 0) |
               (io->vocab_from_data ? CXS_KALDI_VOCAB_FROM_DATA : 0);
    ko.part = o->part;
    ko.parts = o->parts;
    ko.note = import_note;
    ko.note_user = &st;
    cxs_import_info info;
    cxs_diag d = {0};
    install_signal_flag();
    progress_init(&st.bar, "import", o->quiet);
    double t0 = now_seconds();
    int rc = cxs_import_kaldi(in, out, &wo, &ko, import_progress, &st, &info, &d);
    progress_done(&st.bar);
    if (rc) return import_failed(rc, out, &d);
    import_reencoded(&info, out, o);
    if (!o->quiet) {
        if (o->parts)
            printf("imported part %u of %u (join the parts with: ctxshard merge PART... OUT)\n",
                   o->part, o->parts);
        import_summary(&info, out, o, now_seconds() - t0);
        if (io->text)
            printf("  label sequences from %s, vocabulary of %u symbols%s\n", io->text,
                   info.vocab_size, o->vocab_path ? "" : " (built from the data: --vocab-from-data)");
        else if (io->ali)
            printf("  frame labels from %s, vocabulary of %u symbols%s\n", io->ali,
                   info.vocab_size, o->vocab_path ? "" : " (built from the data: --vocab-from-data)");
        else
            printf("  features only (no --text or --ali)\n");
    }
    return 0;
}
