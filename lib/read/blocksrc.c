/* blocksrc.c - the block source's check (blocksrc.h): every covered block
 * of a shard checked against its block sum at its first use, once per
 * process, and what the other checkers of blocks tell it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset_internal.h"
#include "fault.h"
#include "hooks.h"

int cxs_bsrc_setup(cxs_dataset *ds, uint32_t s, cxs_diag *d) {
    shard *sh = &ds->shards[s];
    sh->bc = NULL, sh->bc_feat = sh->bc_lab = NULL;
    const uint32_t n = sh->bs.n;
    if (!n) return 0;
    /* one allocation: the n headers, then every entry's bitmap */
    size_t words = 0;
    for (uint32_t k = 0; k < n; k++) words += (size_t)((sh->bs.e[k].num_blocks + 63) / 64);
    cxs_bcheck *c = calloc(1, n * sizeof *c + words * sizeof(uint64_t));
    if (!c) return cxs_diag_at(d, -ENOMEM, sh->path, CXS_NO_OFFSET, "%s: out of memory", sh->path);
    uint64_t *bits = (uint64_t *)(void *)(c + n);
    for (uint32_t k = 0; k < n; k++) {
        c[k].e = &sh->bs.e[k];
        c[k].bits = bits;
        c[k].left = c[k].e->num_blocks;
        c[k].all = c[k].left == 0;
        bits += (c[k].e->num_blocks + 63) / 64;
    }
    sh->bc = c;
    const int off = cxs_hook_blockcheck_off();
    for (uint32_t k = 0; k < n && !off; k++) {
        if (c[k].e->type == CXS_SEC_FEATURES) sh->bc_feat = &c[k];
        if (c[k].e->type == CXS_SEC_LABELS) sh->bc_lab = &c[k];
    }
    return 0;
}

void cxs_bsrc_free(shard *sh) {
    free(sh->bc);
    sh->bc = sh->bc_feat = sh->bc_lab = NULL;
}

cxs_bcheck *cxs_bsrc_of(const cxs_dataset *ds, uint32_t s, uint32_t type) {
    const shard *sh = &ds->shards[s];
    for (uint32_t k = 0; sh->bc && k < sh->bs.n; k++)
        if (sh->bc[k].e->type == type) return &sh->bc[k];
    return NULL;
}

void cxs_bsrc_mark(cxs_bcheck *c, uint64_t j) {
    const uint64_t m = 1ull << (j & 63);
    if (__atomic_fetch_or(&c->bits[j >> 6], m, __ATOMIC_RELEASE) & m) return;
    /* the bit is new: one block fewer left, and the last sets `all` */
    if (__atomic_sub_fetch(&c->left, 1, __ATOMIC_ACQ_REL) == 0)
        __atomic_store_n(&c->all, 1, __ATOMIC_RELEASE);
}

void cxs_bsrc_mark_all(cxs_bcheck *c) {
    if (c) __atomic_store_n(&c->all, 1, __ATOMIC_RELEASE);
}

/* A damaged block: cxs_block_failed's message, and for the data
 * sections what becomes of it (the tables' messages are utt_index.c's). */
static int failed(const cxs_dataset *ds, uint32_t s, const cxs_bcheck *c, uint64_t j,
                  cxs_diag *d) {
    int rc = cxs_block_failed(ds, s, c->e, j, d);
    if (d && (c->e->type == CXS_SEC_FEATURES || c->e->type == CXS_SEC_LABELS)) {
        size_t n = strlen(d->message);
        snprintf(d->message + n, sizeof d->message - n, "; not served (ctxshard verify)");
    }
    return rc;
}

typedef struct hash_arg {
    const uint8_t *p;
    size_t n;
    uint64_t h;
} hash_arg;

static int hash_run(void *p) {
    hash_arg *a = p;
    a->h = cxs_hash(a->p, a->n);
    return 0;
}

int cxs_bsrc_block_in(const cxs_dataset *ds, uint32_t s, cxs_bcheck *c, uint64_t j,
                      cxs_diag *d) {
    if (__atomic_load_n(&c->all, __ATOMIC_ACQUIRE) || cxs_bsrc_has(c, j)) return 0;
    const shard *sh = &ds->shards[s];
    uint64_t a, b;
    cxs_bsum_block(c->e, j, &a, &b);
    if (cxs_checksum_differs(cxs_hash(sh->map + c->e->sec->offset + a, (size_t)(b - a)),
                             cxs_bsum_of(&sh->bs, c->e, j)))
        return failed(ds, s, c, j, d);
    cxs_bsrc_mark(c, j);
    return 0;
}

int cxs_bsrc_block(const cxs_dataset *ds, uint32_t s, cxs_bcheck *c, uint64_t j, cxs_diag *d) {
    if (__atomic_load_n(&c->all, __ATOMIC_ACQUIRE) || cxs_bsrc_has(c, j)) return 0;
    /* a caller serving from the mapping (the gather, the padder) is in a
     * region already: a truncated shard is then reported as its reads are */
    if (cxs_fault_inside(ds)) return cxs_bsrc_block_in(ds, s, c, j, d);
    const shard *sh = &ds->shards[s];
    uint64_t a, b;
    cxs_bsum_block(c->e, j, &a, &b);
    /* the mapping's bytes: what is served unless a checked copy in huge
     * pages is (which marks its sections whole) */
    hash_arg h = {sh->map + c->e->sec->offset + a, (size_t)(b - a), 0};
    cxs_fault f;
    int rc = cxs_fault_run(ds, hash_run, &h, &f);
    if (rc)
        return cxs_diag_at(d, rc, sh->path, f.offset,
                           "%s: %s block %llu: the shard changed since the dataset was opened: "
                           "truncated (byte %llu can no longer be read)",
                           sh->path, cxs_section_name(c->e->type), (unsigned long long)j,
                           (unsigned long long)f.offset);
    if (cxs_checksum_differs(h.h, cxs_bsum_of(&sh->bs, c->e, j)))
        return failed(ds, s, c, j, d);
    cxs_bsrc_mark(c, j);
    return 0;
}

int cxs_bsrc_slow(const cxs_dataset *ds, uint32_t s, cxs_bcheck *c, uint64_t a, uint64_t b,
                  cxs_diag *d) {
    if (!c || a >= b) return 0;
    const uint64_t j1 = (b - 1) >> c->e->shift;
    for (uint64_t j = a >> c->e->shift; j <= j1 && j < c->e->num_blocks; j++) {
        int rc = cxs_bsrc_block(ds, s, c, j, d);
        if (rc) return rc;
    }
    return 0;
}

int cxs_bsrc_utts(const cxs_dataset *ds, uint32_t s, uint64_t lu0, uint64_t lu1, int labels,
                  cxs_diag *d) {
    if (lu0 >= lu1) return 0;
    const shard *sh = &ds->shards[s];
    const uint64_t G = ds->meta.guard, a = cxs_index_at(sh, lu0), b = cxs_index_at(sh, lu1);
    const uint64_t r0 = G * (lu0 + 1) + a, r1 = G * lu1 + b; /* first row, past the last */
    int rc = cxs_bsrc_rows(ds, s, r0, r1 - r0, d);
    if (!rc && labels) rc = cxs_bsrc_labels(ds, s, a, b - a, d);
    return rc;
}

int cxs_bsrc_all(const cxs_dataset *ds, int labels, cxs_diag *d) {
    const uint32_t S = ds->single_shard ? 1 : ds->meta.num_shards;
    for (uint32_t s = 0; s < S; s++) {
        const shard *sh = &ds->shards[s];
        cxs_bcheck *c[2] = {sh->bc_feat, labels ? sh->bc_lab : NULL};
        for (int k = 0; k < 2; k++) {
            if (!c[k] || __atomic_load_n(&c[k]->all, __ATOMIC_ACQUIRE)) continue;
            for (uint64_t j = 0; j < c[k]->e->num_blocks; j++) {
                int rc = cxs_bsrc_block(ds, s, c[k], j, d);
                if (rc) return rc;
            }
        }
    }
    return 0;
}
