/* writer_manifest.c - the last file of a dataset: the manifest (DATASET_META,
 * SHARD_TABLE, VOCAB, STATS, SKIPPED), or for a part its part.cxs
 * (PART_SUMS and PART_META instead of STATS), from a writer's state.  The
 * writer (writer.c) and the merge (writer_merge.c) both end here. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cxs_le.h"
#include "writer_internal.h"

/* The STATS section from the exact sums (spec 7.3). */
static int stats_bytes(const cxs_writer *k, bytes *b) {
    uint8_t t[8];
    int rc = cxs_bytes_put64(b, k->F);
    if (!rc) rc = cxs_bytes_put64(b, k->minlen);
    if (!rc) rc = cxs_bytes_put64(b, k->maxlen);
    if (!rc) rc = cxs_bytes_put64(b, 0);
    double *mean = malloc((k->D + 1) * sizeof *mean);
    if (!mean) rc = -ENOMEM;
    for (uint32_t d = 0; d < k->D && !rc; d++) {
        mean[d] = cxs_xsum_value(&k->s1[d]) / (double)k->F;
        cxs_stf64(t, mean[d]);
        rc = cxs_bytes_put(b, t, 8);
    }
    for (uint32_t d = 0; d < k->D && !rc; d++) {
        double var = cxs_xsum_value(&k->s2[d]) / (double)k->F - mean[d] * mean[d];
        cxs_stf64(t, var > 0 ? var : 0.0);
        rc = cxs_bytes_put(b, t, 8);
    }
    free(mean);
    for (uint32_t l = 0; l < k->vocab_n && !rc; l++) rc = cxs_bytes_put64(b, k->hist[l]);
    return rc;
}

/* PART_SUMS: the exact sums themselves (their non-overlapping partials), so
 * that a merge rounds the same totals a single pack would. */
static int part_sums_bytes(const cxs_writer *k, bytes *b) {
    uint8_t t[8];
    int rc = cxs_bytes_put64(b, k->D);
    if (!rc) rc = cxs_bytes_put64(b, k->vocab_n);
    for (uint32_t d = 0; d < k->D && !rc; d++)
        for (int which = 0; which < 2 && !rc; which++) {
            const cxs_xsum *x = which ? &k->s2[d] : &k->s1[d];
            rc = cxs_bytes_put64(b, (uint64_t)x->n);
            for (int j = 0; j < x->n && !rc; j++) {
                cxs_stf64(t, x->p[j]);
                rc = cxs_bytes_put(b, t, 8);
            }
        }
    for (uint32_t l = 0; l < k->vocab_n && !rc; l++) rc = cxs_bytes_put64(b, k->hist[l]);
    return rc;
}

static void part_meta_store(uint8_t *p, const cxs_writer *k) {
    const cxs_writer_part *pt = &k->part;
    const cxs_writer_opts *o = &k->o;
    cxs_part_meta m = {
        .part = pt->part,
        .parts = pt->parts,
        .listed = pt->listed,
        .input_hash = pt->input_hash,
        .first_shard = pt->first_shard,
        .end_shard = pt->end_shard,
        .total_shards = pt->total_shards,
        .level = o->compression ? o->level : 0,
        .chunk_rows = o->compression ? k->chunk_rows : 0,
        .filter = o->compression && o->shuffle ? CXS_FILTER_SHUFFLE : 0,
        .min_length = k->minlen,
        .max_length = k->maxlen,
        .first_item = pt->first_item,
        .end_item = pt->end_item,
    };
    snprintf(m.version, sizeof m.version, "%s", cxs_version());
    cxs_part_meta_store(p, &m);
}

void cxs_writer_seq_meta(const cxs_writer *k, uint8_t out[CXS_SEQ_META_SIZE]) {
    cxs_seq_meta m = {k->flw ? 1u : 0u, k->seq_total, k->seq_min, k->seq_max};
    cxs_seq_meta_store(out, &m);
}

int cxs_writer_write_index(cxs_writer *k) {
    const uint32_t kind = k->is_part ? CXS_KIND_PART : CXS_KIND_MANIFEST;
    bytes stats = {0};
    int rc = k->is_part ? part_sums_bytes(k, &stats) : stats_bytes(k, &stats);
    char *path = cxs_path_join(k->tmpdir, k->is_part ? CXS_PART_NAME : CXS_MANIFEST_NAME);
    int fd = -1;
    if (!rc && !path) rc = -ENOMEM;
    if (!rc && (fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0) rc = -errno;
    free(path);
    if (rc) {
        free(stats.p);
        return rc;
    }
    swriter w = {.fd = fd, .pos = 0};
    cxs_section sec[9];
    uint32_t n = 0;
    static const uint8_t page0[CXS_PAGE];
    rc = cxs_w_write(k, &w, page0, CXS_PAGE);
    uint8_t meta[CXS_DATASET_META_SIZE];
    cxs_dataset_meta m = {k->U, k->F, k->nshards, k->D, k->o.guard, (uint16_t)k->o.dtype,
                          (uint16_t)k->lw, k->vocab_n, k->o.normalize, k->o.shard_size,
                          k->nskipped, k->o.on_error_skip, k->o.compression};
    cxs_dataset_meta_store(meta, &m);
    if (!rc) rc = cxs_put_section(k, &w, &sec[n++], CXS_SEC_DATASET_META, meta, sizeof meta);
    if (!rc && k->shard_table.n)
        rc = cxs_put_section(k, &w, &sec[n++], CXS_SEC_SHARD_TABLE, k->shard_table.p, k->shard_table.n);
    if (!rc && k->vocab_n) rc = cxs_put_section(k, &w, &sec[n++], CXS_SEC_VOCAB, k->vocab.p, k->vocab.n);
    if (!rc)
        rc = cxs_put_section(k, &w, &sec[n++], k->is_part ? CXS_SEC_PART_SUMS : CXS_SEC_STATS,
                         stats.p, stats.n);
    uint8_t sqm[CXS_SEQ_META_SIZE];
    if (!rc && k->o.label_seqs) {
        cxs_writer_seq_meta(k, sqm);
        rc = cxs_put_section(k, &w, &sec[n++], CXS_SEC_SEQ_META, sqm, sizeof sqm);
    }
    if (!rc && k->skipped.n) {
        rc = cxs_put_section(k, &w, &sec[n], CXS_SEC_SKIPPED, k->skipped.p, k->skipped.n);
        sec[n++].flags = 0; /* informational: readers may ignore it */
    }
    uint8_t pm[CXS_PART_META_SIZE];
    if (!rc && k->is_part) {
        part_meta_store(pm, k);
        rc = cxs_put_section(k, &w, &sec[n++], CXS_SEC_PART_META, pm, CXS_PART_META_SIZE);
    }
    if (!rc) rc = cxs_w_pad(k, &w);
    cxs_wfault_point(&k->fault, "manifest"); /* sections written, header page not yet */
    uint8_t page[CXS_PAGE];
    cxs_container_build_v(page, kind, k->is_part && k->minor < 1 ? 1 : k->minor, w.pos, sec, n);
    k->bytes_out += w.pos;
    if (!rc && pwrite(fd, page, CXS_PAGE, 0) != (ssize_t)CXS_PAGE) rc = errno ? -errno : -EIO;
    if (!rc && fsync(fd) != 0) rc = -errno;
    if (close(fd) != 0 && !rc) rc = -errno;
    free(stats.p);
    return rc;
}
