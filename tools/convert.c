/* convert.c - `ctxshard convert IN OUT`: the same dataset in the other
 * storage form (compressed or not), utterance by utterance through the
 * library's writer, shard boundaries kept. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"
#include "ctxshard_writer.h"
#include "cxs_format.h"
#include "cxs_qcodec.h"
#include "pack.h"
#include "util.h"

int convert_run(const char *in, const char *out, const pack_opts *oin) {
    cxs_dataset *ds = NULL;
    cxs_diag d = {0};
    cxs_open_opts oo = {.cache_bytes = 64ull << 20};
    int rc = cxs_dataset_open_ex(in, &oo, &ds, &d);
    if (rc) return open_failed(in, rc, &d);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    if (info.single_shard) {
        warnx_("%s: a shard alone; convert needs the dataset directory (its manifest)", in);
        cxs_dataset_close(ds);
        return EXIT_USAGE;
    }
    cxs_writer *w = NULL;
    char **sym = NULL, *id = NULL;
    uint8_t *feat = NULL;
    int ec = 0;
    double t0 = now_seconds();
    const size_t esize = cxs_dtype_size(info.dtype);
    /* --dtype: a float dataset into another type, q8 and q16 included
     * (encoded from the stored values, which are normalised already when
     * IN is).  A coded IN into its own type keeps each utterance's header
     * and codes (a re-layout: quantising the decoded values again would
     * move them); into any other type its values are the decoded float32
     * the loaders serve, converted or encoded from there (spec 7.1). */
    const uint32_t dtype = oin->dtype_set ? oin->dtype : info.dtype;
    const int keep_codes = cxs_dtype_coded(info.dtype) && dtype == info.dtype;
    const int decode = cxs_dtype_coded(info.dtype) && !keep_codes;
    const size_t qh = (size_t)cxs_q_header_size(info.dtype, info.dim);
    cxs_writer_opts wo;
    cxs_writer_opts_init(&wo);
    wo.dtype = dtype;
    wo.guard = cxs_stored_guard(dtype, info.guard); /* a coded OUT stores none */
    wo.shard_size = info.shard_size;
    wo.normalize = info.normalize;
    wo.on_error_skip = info.on_error_skip;
    wo.compression = oin->keep_form ? info.compression : oin->compress;
    wo.level = oin->level;
    wo.threads = oin->threads < CXS_WRITER_MAX_THREADS ? oin->threads : CXS_WRITER_MAX_THREADS;
    wo.chunk_size = oin->chunk_size;
    wo.shuffle = (uint32_t)oin->shuffle;
    /* the shards of IN, as they are; block sums unless --block-sums off */
    wo.flags = CXS_WRITER_MANUAL_CUT | (oin->no_block_sums ? CXS_WRITER_NO_BLOCK_SUMS : 0);
    wo.label_seqs = !info.label_seqs ? CXS_SEQ_NONE
                    : info.label_width ? CXS_SEQ_WITH_FRAMES : CXS_SEQ_ONLY;
    sym = calloc(info.vocab_size + 1, sizeof *sym);
    /* the header then the codes, or the decoded float32 */
    feat = malloc(qh + (size_t)info.max_length * info.dim * (decode ? sizeof(float) : esize) + 1);
    id = malloc(CXS_MAX_ID_LEN + 1);
    int64_t *seq = malloc((info.label_seqs ? info.max_seq_length : 0) * sizeof *seq + 8);
    if (!sym || !feat || !id || !seq) {
        rc = -ENOMEM;
        goto sysfail;
    }
    for (uint32_t i = 0; i < info.vocab_size; i++) {
        const char *s;
        size_t len;
        cxs_dataset_vocab(ds, i, &s, &len);
        if (!(sym[i] = strndup(s, len))) {
            rc = -ENOMEM;
            goto sysfail;
        }
    }
    wo.vocab_size = info.vocab_size;
    wo.vocab = (const char *const *)sym;
    install_signal_flag();
    if ((rc = cxs_writer_create(out, &wo, &w, &d))) {
        ec = create_failed(rc, &d);
        goto out;
    }
    say_stale(w, out, oin->quiet);
    progress bar;
    progress_init(&bar, "convert", oin->quiet);
    uint32_t cur = 0;
    for (uint64_t u = 0; u < info.num_utterances; u++) {
        if (g_interrupted) {
            warnx_("%s: interrupted; nothing written", out);
            ec = EXIT_SYSTEM;
            goto out;
        }
        cxs_utterance ut;
        cxs_diag ud = {0};
        if ((rc = cxs_dataset_utterance_ex(ds, u, 0, &ut, &ud))) {
            /* a damaged block (format 1.3): the library names it */
            warnx_("%s; nothing written", ud.message[0] ? ud.message : cxs_strerror(rc));
            ec = exit_code_for(rc);
            goto out;
        }
        if (ut.shard != cur && (rc = cxs_writer_cut(w, &d))) goto addfail;
        cur = ut.shard;
        int64_t len;
        if (decode)
            rc = cxs_dataset_pad_batch_ex(ds, &u, 1, ut.num_frames, 0, NULL, (float *)feat, &len,
                                          NULL, &ud);
        else if (!keep_codes || !(rc = cxs_dataset_read_qheader(ds, u, feat, &ud)))
            rc = cxs_dataset_read_features_ex(ds, u, 0, ut.num_frames, feat + qh, &ud);
        if (rc) {
            warnx_("%s: utterance %llu (%.*s): %s; nothing written", in, (unsigned long long)u,
                   (int)ut.id_len, ut.id, ud.message[0] ? ud.message : cxs_strerror(rc));
            ec = exit_code_for(rc);
            goto out;
        }
        memcpy(id, ut.id, ut.id_len);
        id[ut.id_len] = 0;
        uint32_t sn = 0;
        if (info.label_seqs)
            cxs_dataset_label_seq(ds, u, seq, (uint32_t)info.max_seq_length, &sn);
        const uint32_t type = decode ? CXS_DTYPE_F32 : info.dtype;
        cxs_writer_utt x = {feat, ut.num_frames, info.dim, type, 0, 0, 0,
                            ut.labels, ut.labels ? ut.num_frames : 0, info.label_width, 1,
                            info.label_seqs ? seq : NULL, sn, 8};
        if ((rc = cxs_writer_add(w, id, &x, &d))) goto addfail;
        progress_update(&bar, u + 1, info.num_utterances, "utterances");
    }
    progress_done(&bar);
    /* The list of skipped utterances, line by line as it is. */
    const char *text;
    size_t tlen;
    cxs_dataset_skipped(ds, &text, &tlen);
    for (size_t a = 0; a < tlen;) {
        const char *nl = memchr(text + a, '\n', tlen - a), *tab;
        size_t end = nl ? (size_t)(nl - text) : tlen;
        char *line = strndup(text + a, end - a);
        if (!line) {
            rc = -ENOMEM;
            goto sysfail;
        }
        tab = strchr(line, '\t');
        if (tab) line[tab - line] = 0;
        rc = cxs_writer_skip(w, line, tab ? line + (tab - line) + 1 : "");
        free(line);
        if (rc) goto sysfail;
        a = end + 1;
    }
    cxs_writer_info wi;
    ec = commit_writer(w, &wi);
    w = NULL;
    if (ec) goto out;
    if (!oin->quiet) {
        char a[32], b[32];
        printf("converted %s (%s, %s) to %s (%s, %s) in %.2f s: features %s -> %s\n", in,
               cxs_dtype_name(info.dtype), info.compression ? "zstd" : "uncompressed", out,
               cxs_dtype_name(dtype), wo.compression ? "zstd" : "uncompressed",
               now_seconds() - t0,
               human_bytes((double)info.stored_feature_bytes, a, sizeof a),
               human_bytes((double)wi.feature_bytes, b, sizeof b));
    }
    goto out;
addfail:
    warnx_("%s%s", d.message, rc == CXS_E_INPUT ? "" : "; nothing written");
    ec = rc == CXS_E_INPUT ? EXIT_DATA : EXIT_SYSTEM;
    goto out;
sysfail:
    warnx_("%s: %s; nothing written", out, strerror(-rc));
    ec = EXIT_SYSTEM;
out:
    cxs_writer_abort(w);
    if (sym)
        for (uint32_t i = 0; i < info.vocab_size; i++) free(sym[i]);
    free(sym);
    free(feat);
    free(id);
    free(seq);
    cxs_dataset_close(ds);
    return ec;
}
