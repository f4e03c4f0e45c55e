/* utt_index.c - the per-utterance tables (INDEX, IDS, SEQUENCES) read in
 * place from the mapping: the frame -> utterance lookup, and the checks a
 * reader makes of a table at the first use of each of its blocks when the
 * shard has BLOCKSUMS (format 1.3, spec section 8), instead of reading
 * every table whole at open.
 *
 * A block's check is its sum (BLOCKSUMS) and, for a block of offsets, the
 * rules open used to apply to the whole table, restricted to the entries
 * the block holds: INDEX increasing from 0 to F with every length within
 * STATS' range; IDS offsets of ids of 1..1024 bytes without control bytes,
 * each id after the previous one (the previous shard's last, for a shard's
 * first); SEQUENCES offsets of non-empty sequences within SEQ_META's
 * length range, every symbol inside the vocabulary.  Entry U (= F, the
 * string bytes' length, the symbol count) and entry 0 are checked at open.
 * A block is checked by whichever thread needs it first; two threads may
 * both check it, and both set the same bit. */
#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "dataset_internal.h"
#include "fault.h"

static void set_bit(uint64_t *map, uint64_t j) {
    __atomic_fetch_or(&map[j >> 6], 1ull << (j & 63), __ATOMIC_RELEASE);
}

static const char *table_name(const lazy_table *t) { return cxs_section_name(t->type); }

/* Block j's sum, once: the block source's check (blocksrc.h), in the
 * caller's recovery region. */
static int hash_block(const cxs_dataset *ds, uint32_t s, const lazy_table *t, uint64_t j,
                      cxs_diag *d) {
    return cxs_bsrc_block_in(ds, s, t->hashed, j, d);
}

/* The sums of every block holding bytes [a, b) of the section. */
static int hash_range(const cxs_dataset *ds, uint32_t s, const lazy_table *t, uint64_t a,
                      uint64_t b, cxs_diag *d) {
    if (a >= b) return 0;
    for (uint64_t j = a >> t->bs->shift; j <= (b - 1) >> t->bs->shift; j++) {
        int rc = hash_block(ds, s, t, j, d);
        if (rc) return rc;
    }
    return 0;
}

/* The offsets entries [*e0, *e1) that block j holds (of n + 1). */
static void block_entries(const lazy_table *t, uint64_t j, uint64_t n, uint64_t *e0, uint64_t *e1) {
    uint64_t a, b;
    cxs_bsum_block(t->bs, j, &a, &b);
    *e0 = (a + 7) / 8;
    *e1 = b / 8 < n + 1 ? b / 8 : n + 1;
    if (*e0 > *e1) *e0 = *e1;
}

typedef struct check_arg {
    const cxs_dataset *ds;
    uint32_t s;
    const lazy_table *t;
    uint64_t j;
    cxs_diag *d;
} check_arg;

static int id_cmp(const uint8_t *a, uint64_t al, const uint8_t *b, uint64_t bl) {
    int r = memcmp(a, b, al < bl ? al : bl);
    if (r) return r;
    return al < bl ? -1 : al > bl;
}

static int check_index_block(const cxs_dataset *ds, const shard *sh, const lazy_table *t,
                             uint64_t j, cxs_diag *d) {
    const uint64_t U = sh->meta.num_utterances, F = sh->meta.num_frames;
    uint64_t e0, e1;
    block_entries(t, j, U, &e0, &e1);
    for (uint64_t e = e0 ? e0 : 1; e < e1; e++) {
        uint64_t prev = cxs_ld64(t->p + 8 * (e - 1)), v = cxs_ld64(t->p + 8 * e);
        if (v <= prev || v > F)
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: INDEX entry %llu: %llu after %llu (must increase, up to %llu)",
                             sh->path, (unsigned long long)e, (unsigned long long)v,
                             (unsigned long long)prev, (unsigned long long)F);
        if (v - prev < ds->min_len || v - prev > ds->max_len)
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: INDEX: utterance %llu has %llu frames, outside STATS' range "
                             "%llu to %llu",
                             sh->path, (unsigned long long)(sh->u_start + e - 1),
                             (unsigned long long)(v - prev), (unsigned long long)ds->min_len,
                             (unsigned long long)ds->max_len);
    }
    return 0;
}

static int check_ids_block(const cxs_dataset *ds, uint32_t s, const lazy_table *t, uint64_t j,
                           cxs_diag *d) {
    const shard *sh = &ds->shards[s];
    const uint64_t U = sh->meta.num_utterances, base = 8 * (U + 1), bytes = t->len - base;
    uint64_t e0, e1;
    block_entries(t, j, U, &e0, &e1);
    for (uint64_t e = e0 ? e0 : 1; e < e1; e++) {
        const uint64_t i = e - 1; /* the id this entry ends */
        uint64_t a = cxs_ld64(t->p + 8 * i), b = cxs_ld64(t->p + 8 * e);
        if (b <= a || b - a > CXS_MAX_ID_LEN || b > bytes)
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: IDS: string %llu has offsets %llu..%llu (must be 1 to %u bytes "
                             "within %llu)",
                             sh->path, (unsigned long long)i, (unsigned long long)a,
                             (unsigned long long)b, CXS_MAX_ID_LEN, (unsigned long long)bytes);
        int rc = hash_range(ds, s, t, base + a, base + b, d);
        if (rc) return rc;
        for (uint64_t k = a; k < b; k++)
            if (t->p[base + k] < 0x20)
                return cxs_diagf(d, CXS_E_CORRUPT, "%s: IDS: string %llu holds control byte 0x%02x",
                                 sh->path, (unsigned long long)i, t->p[base + k]);
        const uint8_t *prev = NULL;
        uint64_t pl = 0;
        if (i > 0) {
            uint64_t pa = cxs_ld64(t->p + 8 * (i - 1));
            /* i - 1's offsets: entry i is checked above (b > a); pa < a by the
             * check of entry i, made in this block or the previous one */
            if (pa >= a)
                return cxs_diagf(d, CXS_E_CORRUPT, "%s: IDS: string %llu has offsets %llu..%llu",
                                 sh->path, (unsigned long long)(i - 1), (unsigned long long)pa,
                                 (unsigned long long)a);
            if ((rc = hash_range(ds, s, t, base + pa, base + a, d))) return rc;
            prev = t->p + base + pa, pl = a - pa;
        } else if (s > 0) {
            const shard *ps = &ds->shards[s - 1];
            if ((rc = cxs_id_get_in(ds, s - 1, ps->meta.num_utterances - 1, &prev, &pl, d)))
                return rc;
        }
        if (prev && id_cmp(prev, pl, t->p + base + a, b - a) >= 0)
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: IDS: utterance %llu's id is not after the previous one",
                             sh->path, (unsigned long long)(sh->u_start + i));
    }
    return 0;
}

static int check_seqs_block(const cxs_dataset *ds, uint32_t s, const lazy_table *t, uint64_t j,
                            cxs_diag *d) {
    const shard *sh = &ds->shards[s];
    const uint64_t U = sh->meta.num_utterances, base = 8 * (U + 1);
    const uint32_t w = ds->seq_width, V = ds->meta.vocab_size;
    const uint64_t end = cxs_ld64(t->p + 8 * U); /* checked at open against the length */
    uint64_t e0, e1;
    block_entries(t, j, U, &e0, &e1);
    for (uint64_t e = e0 ? e0 : 1; e < e1; e++) {
        const uint64_t i = e - 1;
        uint64_t a = cxs_ld64(t->p + 8 * i), b = cxs_ld64(t->p + 8 * e);
        if (b <= a || b > end)
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: SEQUENCES: utterance %llu has offsets %llu..%llu (a sequence "
                             "holds at least one symbol, up to %llu)",
                             sh->path, (unsigned long long)i, (unsigned long long)a,
                             (unsigned long long)b, (unsigned long long)end);
        if (b - a < ds->seqm.min_length || b - a > ds->seqm.max_length)
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: SEQUENCES: utterance %llu has %llu symbols, outside SEQ_META's "
                             "range %llu to %llu",
                             sh->path, (unsigned long long)i, (unsigned long long)(b - a),
                             (unsigned long long)ds->seqm.min_length,
                             (unsigned long long)ds->seqm.max_length);
        int rc = hash_range(ds, s, t, base + a * w, base + b * w, d);
        if (rc) return rc;
        const uint8_t *sym = t->p + base;
        for (uint64_t k = a; k < b; k++) {
            uint32_t l = w == 1 ? sym[k] : cxs_ld16(sym + 2 * k);
            if (l >= V)
                return cxs_diagf(d, CXS_E_CORRUPT,
                                 "%s: SEQUENCES: utterance %llu, symbol %llu is %u, the "
                                 "vocabulary has %u",
                                 sh->path, (unsigned long long)i, (unsigned long long)(k - a), l, V);
        }
    }
    return 0;
}

static int check_block_mapped(void *p) {
    const check_arg *x = p;
    const shard *sh = &x->ds->shards[x->s];
    const lazy_table *t = x->t;
    int rc = hash_block(x->ds, x->s, t, x->j, x->d);
    if (rc) return rc;
    if (t->type == CXS_SEC_INDEX) rc = check_index_block(x->ds, sh, t, x->j, x->d);
    else if (t->type == CXS_SEC_IDS) rc = check_ids_block(x->ds, x->s, t, x->j, x->d);
    else rc = check_seqs_block(x->ds, x->s, t, x->j, x->d);
    if (!rc) set_bit(t->done, x->j);
    return rc;
}

/* The last fault a check of this thread's met (for the caller's message). */
static _Thread_local cxs_fault last_fault;

/* Check block j of table t of shard s (once), in a recovery region. */
static int check_block(const cxs_dataset *ds, uint32_t s, const lazy_table *t, uint64_t j,
                       cxs_diag *d) {
    if (cxs_table_done(t, j)) return 0;
    check_arg x = {ds, s, t, j, d};
    cxs_fault f;
    int rc = cxs_fault_run(ds, check_block_mapped, &x, &f);
    if (rc == CXS_E_TRUNCATED) {
        last_fault = f;
        cxs_diagf(d, rc, "%s: %s can no longer be read at byte %llu: the shard was truncated "
                  "since the dataset was opened",
                  ds->shards[s].path, table_name(t), (unsigned long long)f.offset);
    }
    return rc;
}

/* The blocks holding entries e and e + 1 of a table of offsets. */
static int check_entries(const cxs_dataset *ds, uint32_t s, const lazy_table *t, uint64_t e,
                         cxs_diag *d) {
    if (t->all_done) return 0;
    uint64_t j0 = (8 * e) >> t->bs->shift, j1 = (8 * (e + 1)) >> t->bs->shift;
    int rc = check_block(ds, s, t, j0, d);
    if (!rc && j1 != j0) rc = check_block(ds, s, t, j1, d);
    return rc;
}

int cxs_utt_check_slow(const cxs_dataset *ds, uint64_t u, cxs_diag *d) {
    uint32_t s = cxs_utt_shard(ds, u);
    const shard *sh = &ds->shards[s];
    return check_entries(ds, s, &sh->t_index, u - sh->u_start, d);
}

typedef struct get_arg {
    const cxs_dataset *ds;
    uint32_t s;
    uint64_t lu;
    const lazy_table *t;
    uint64_t a, b;
    cxs_uloc *loc;
    cxs_diag *d;
} get_arg;

/* Entries lu and lu + 1 of table t, their blocks checked; or the location
 * of utterance lu (t NULL). */
static int get_mapped(void *p) {
    get_arg *x = p;
    const shard *sh = &x->ds->shards[x->s];
    const lazy_table *t = x->t ? x->t : &sh->t_index;
    int rc = check_entries(x->ds, x->s, t, x->lu, x->d);
    if (rc) return rc;
    if (!x->t) {
        *x->loc = cxs_utt_at(x->ds, sh->u_start + x->lu);
        return 0;
    }
    x->a = cxs_ld64(t->p + 8 * x->lu);
    x->b = cxs_ld64(t->p + 8 * (x->lu + 1));
    return 0;
}

/* A shard truncated since open: the serve-time message (fault.h), naming
 * the utterance (u) or the frame whose utterance could not be found. */
static int truncated(const cxs_dataset *ds, const cxs_fault *f, uint64_t u, uint64_t frame,
                     cxs_diag *d) {
    cxs_where w = CXS_WHERE_NONE;
    w.shard = f->shard;
    w.offset = f->offset;
    w.utt = u;
    w.frame = frame;
    return cxs_where_diag(ds, CXS_E_TRUNCATED, &w, d);
}

static int get_entries(get_arg *x) {
    cxs_fault f = {UINT32_MAX, 0};
    last_fault = f;
    int rc = cxs_fault_run(x->ds, get_mapped, x, &f);
    if (rc == CXS_E_TRUNCATED)
        truncated(x->ds, f.shard != UINT32_MAX ? &f : &last_fault,
                  x->ds->shards[x->s].u_start + x->lu, UINT64_MAX, x->d);
    return rc;
}

int cxs_utt_loc_safe(const cxs_dataset *ds, uint64_t u, cxs_uloc *l, cxs_diag *d) {
    uint32_t s = cxs_utt_shard(ds, u);
    get_arg x = {ds, s, u - ds->shards[s].u_start, NULL, 0, 0, l, d};
    return get_entries(&x);
}

typedef struct findloc_arg {
    const cxs_dataset *ds;
    uint64_t frame;
    cxs_uloc *l;
    cxs_diag *d;
} findloc_arg;

static int find_mapped(void *p) {
    findloc_arg *x = p;
    return cxs_find_utt_loc(x->ds, x->frame, x->l, x->d);
}

int cxs_find_utt_safe(const cxs_dataset *ds, uint64_t frame, cxs_uloc *l, cxs_diag *d) {
    findloc_arg x = {ds, frame, l, d};
    cxs_fault f = {UINT32_MAX, 0};
    last_fault = f;
    int rc = cxs_fault_run(ds, find_mapped, &x, &f);
    if (rc == CXS_E_TRUNCATED) truncated(ds, f.shard != UINT32_MAX ? &f : &last_fault, UINT64_MAX, frame, d);
    return rc;
}

int cxs_id_get(const cxs_dataset *ds, uint64_t u, const uint8_t **id, uint64_t *len,
               cxs_diag *d) {
    uint32_t s = cxs_utt_shard(ds, u);
    return cxs_id_get_in(ds, s, u - ds->shards[s].u_start, id, len, d);
}

int cxs_id_get_in(const cxs_dataset *ds, uint32_t s, uint64_t lu, const uint8_t **id,
                  uint64_t *len, cxs_diag *d) {
    const shard *sh = &ds->shards[s];
    get_arg x = {ds, s, lu, &sh->t_ids, 0, 0, NULL, d};
    int rc = get_entries(&x);
    if (rc) return rc;
    *id = sh->ids + 8 * (sh->meta.num_utterances + 1) + x.a;
    *len = x.b - x.a;
    return 0;
}

int cxs_seq_get(const cxs_dataset *ds, uint64_t u, uint64_t *a, uint64_t *b, cxs_diag *d) {
    uint32_t s = cxs_utt_shard(ds, u);
    const shard *sh = &ds->shards[s];
    get_arg x = {ds, s, u - sh->u_start, &sh->t_seqs, 0, 0, NULL, d};
    int rc = get_entries(&x);
    if (rc) return rc;
    *a = x.a;
    *b = x.b;
    return 0;
}

typedef struct find_arg {
    const shard *sh;
    uint64_t lf, lu;
} find_arg;

static int search_index(void *p) {
    find_arg *x = p;
    const shard *sh = x->sh;
    uint64_t lo = 0, hi = sh->meta.num_utterances;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (cxs_index_at(sh, mid) <= x->lf) lo = mid;
        else hi = mid;
    }
    x->lu = lo;
    return 0;
}

/* The bucket value of b (1 + first utterance meeting it), computed. */
static int fill_bucket(const cxs_dataset *ds, uint32_t s, uint64_t b, cxs_diag *d) {
    shard *sh = &ds->shards[s];
    if (__atomic_load_n(&sh->bucket[b], __ATOMIC_RELAXED)) return 0;
    uint64_t v;
    if (b >= sh->nbuckets) {
        v = sh->meta.num_utterances - 1; /* past the last bucket: the last utterance */
    } else {
        find_arg x = {sh, b << CXS_BUCKET_SHIFT, 0};
        cxs_fault f;
        int rc = cxs_fault_run(ds, search_index, &x, &f);
        if (rc) return truncated(ds, &f, UINT64_MAX, sh->f_start + (b << CXS_BUCKET_SHIFT), d);
        v = x.lu;
    }
    __atomic_store_n(&sh->bucket[b], (uint32_t)(v + 1), __ATOMIC_RELAXED);
    return 0;
}

int cxs_find_utt_slow(const cxs_dataset *ds, uint32_t s, uint64_t lf, uint64_t *lu, cxs_diag *d) {
    const shard *sh = &ds->shards[s];
    uint64_t b = lf >> CXS_BUCKET_SHIFT;
    int rc;
    if ((rc = fill_bucket(ds, s, b, d)) || (rc = fill_bucket(ds, s, b + 1, d))) return rc;
    find_arg x = {sh, lf, 0};
    cxs_fault f;
    if ((rc = cxs_fault_run(ds, search_index, &x, &f)))
        return truncated(ds, &f, UINT64_MAX, sh->f_start + lf, d);
    if ((rc = check_entries(ds, s, &sh->t_index, x.lu, d)))
        return rc == CXS_E_TRUNCATED ? truncated(ds, &last_fault, UINT64_MAX, sh->f_start + lf, d)
                                     : rc;
    if (cxs_index_at(sh, x.lu) > lf || cxs_index_at(sh, x.lu + 1) <= lf)
        return cxs_diagf(d, CXS_E_CORRUPT,
                         "%s: INDEX: frame %llu of the shard is not in utterance %llu found for "
                         "it (INDEX damaged; ctxshard verify)",
                         sh->path, (unsigned long long)lf, (unsigned long long)(sh->u_start + x.lu));
    *lu = x.lu;
    return 0;
}

static int check_table_all(const cxs_dataset *ds, uint32_t s, const lazy_table *t, cxs_diag *d) {
    if (t->all_done || !t->bs) return 0;
    for (uint64_t j = 0; j < t->bs->num_blocks; j++) {
        int rc = check_block(ds, s, t, j, d);
        if (rc) return rc;
    }
    return 0;
}

int cxs_index_check_all(const cxs_dataset *ds, cxs_diag *d) {
    if (!ds->lazy) return 0;
    cxs_index_populate(ds);
    for (uint32_t s = 0; s < ds->meta.num_shards; s++) {
        int rc = check_table_all(ds, s, &ds->shards[s].t_index, d);
        if (rc) return rc;
    }
    return 0;
}

typedef struct range_arg {
    const cxs_dataset *ds;
    uint64_t lo, hi, slo, shi;
} range_arg;

/* The length ranges of every utterance and sequence, for the checks of
 * STATS and SEQ_META that lazy open leaves to verify. */
static int length_ranges(void *p) {
    range_arg *x = p;
    const cxs_dataset *ds = x->ds;
    x->lo = x->slo = UINT64_MAX;
    x->hi = x->shi = 0;
    for (uint32_t s = 0; s < ds->meta.num_shards; s++) {
        const shard *sh = &ds->shards[s];
        for (uint64_t u = 0; u < sh->meta.num_utterances; u++) {
            uint64_t T = cxs_index_at(sh, u + 1) - cxs_index_at(sh, u);
            if (T < x->lo) x->lo = T;
            if (T > x->hi) x->hi = T;
            if (sh->seqs) {
                uint64_t n = cxs_ld64(sh->seqs + 8 * (u + 1)) - cxs_ld64(sh->seqs + 8 * u);
                if (n < x->slo) x->slo = n;
                if (n > x->shi) x->shi = n;
            }
        }
    }
    return 0;
}

int cxs_tables_check_all(const cxs_dataset *ds, cxs_diag *d) {
    if (!ds->lazy) return 0;
    int rc;
    for (uint32_t s = 0; s < ds->meta.num_shards; s++) {
        const shard *sh = &ds->shards[s];
        if ((rc = check_table_all(ds, s, &sh->t_index, d)) ||
            (rc = check_table_all(ds, s, &sh->t_ids, d)) ||
            (sh->seqs && (rc = check_table_all(ds, s, &sh->t_seqs, d))))
            return rc;
    }
    /* every block passed: the ranges are within STATS' and SEQ_META's;
     * they must also be reached */
    range_arg x = {ds, 0, 0, 0, 0};
    cxs_fault f;
    if ((rc = cxs_fault_run(ds, length_ranges, &x, &f)))
        return cxs_diagf(d, rc, "%s: truncated since the dataset was opened (byte %llu can no "
                         "longer be read)",
                         ds->shards[f.shard].path, (unsigned long long)f.offset);
    if (x.lo != ds->min_len || x.hi != ds->max_len)
        return cxs_diagf(d, CXS_E_CORRUPT,
                         "%s: STATS: length range %llu to %llu disagrees with the shards' "
                         "%llu to %llu",
                         ds->manifest_path, (unsigned long long)ds->min_len,
                         (unsigned long long)ds->max_len, (unsigned long long)x.lo,
                         (unsigned long long)x.hi);
    if (ds->has_seqs && (x.slo != ds->seqm.min_length || x.shi != ds->seqm.max_length))
        return cxs_diagf(d, CXS_E_CORRUPT,
                         "%s: SEQ_META: sequences of %llu to %llu, the shards hold %llu to %llu",
                         ds->manifest_path, (unsigned long long)ds->seqm.min_length,
                         (unsigned long long)ds->seqm.max_length, (unsigned long long)x.slo,
                         (unsigned long long)x.shi);
    return 0;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

void cxs_index_populate(const cxs_dataset *ds) {
    /* One call maps every page of the INDEX sections (already in the page
     * cache, or read now): measured 12x cheaper than the faults of a
     * lookup's first touches on a virtual machine whose page faults are
     * costly (37 MiB: 6 ms against 73 ms).  Advice only: a kernel without
     * it (EINVAL) or a shard truncated since open (EFAULT) changes
     * nothing here; the reads that follow report a truncation. */
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (uint32_t s = 0; s < ds->meta.num_shards; s++) {
        const shard *sh = &ds->shards[s];
        uintptr_t a = (uintptr_t)sh->index & ~(pg - 1);
        uintptr_t e = (uintptr_t)(sh->index + 8 * (sh->meta.num_utterances + 1));
        (void)madvise((void *)a, e - a, MADV_POPULATE_READ);
    }
}

int cxs_find_utts(const cxs_dataset *ds, const uint64_t *frames, size_t n, cxs_uloc *out,
                  cxs_diag *d) {
    /* The searches of n frames (n <= CXS_FIND_BATCH) in lock step: every
     * round prefetches each search's next probe, then compares, so that
     * the cache misses of the n searches overlap instead of following
     * each other (a bucket of tiny utterances holds hundreds: each search
     * is ~9 dependent probes, each a miss). */
    struct {
        const shard *sh;
        uint64_t lf, lo, hi;
        uint32_t s;
    } q[CXS_FIND_BATCH];
    size_t active = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t s = cxs_frame_shard(ds, frames[i]);
        const shard *sh = &ds->shards[s];
        uint64_t lf = frames[i] - sh->f_start, b = lf >> CXS_BUCKET_SHIFT;
        uint32_t lo1 = __atomic_load_n(&sh->bucket[b], __ATOMIC_RELAXED);
        uint32_t hi1 = __atomic_load_n(&sh->bucket[b + 1], __ATOMIC_RELAXED);
        if (!lo1 || !hi1) {
            int rc;
            if ((rc = fill_bucket(ds, s, b, d)) || (rc = fill_bucket(ds, s, b + 1, d))) return rc;
            lo1 = __atomic_load_n(&sh->bucket[b], __ATOMIC_RELAXED);
            hi1 = __atomic_load_n(&sh->bucket[b + 1], __ATOMIC_RELAXED);
        }
        q[i].sh = sh, q[i].s = s, q[i].lf = lf;
        q[i].lo = lo1 - 1;
        q[i].hi = hi1 < sh->meta.num_utterances ? hi1 : sh->meta.num_utterances;
        active += q[i].hi - q[i].lo > 1;
    }
    while (active) {
        for (size_t i = 0; i < n; i++)
            if (q[i].hi - q[i].lo > 1)
                __builtin_prefetch(q[i].sh->index + 8 * (q[i].lo + (q[i].hi - q[i].lo) / 2));
        active = 0;
        for (size_t i = 0; i < n; i++) {
            if (q[i].hi - q[i].lo <= 1) continue;
            uint64_t mid = q[i].lo + (q[i].hi - q[i].lo) / 2;
            if (cxs_index_at(q[i].sh, mid) <= q[i].lf) q[i].lo = mid;
            else q[i].hi = mid;
            active += q[i].hi - q[i].lo > 1;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const shard *sh = q[i].sh;
        uint64_t lu = q[i].lo;
        if (ds->lazy) {
            int rc = cxs_utt_check(ds, sh->u_start + lu, d);
            if (rc == CXS_E_TRUNCATED)
                return truncated(ds, &last_fault, UINT64_MAX, frames[i], d);
            if (!rc && (cxs_index_at(sh, lu) > q[i].lf || cxs_index_at(sh, lu + 1) <= q[i].lf))
                rc = cxs_find_utt_slow(ds, q[i].s, q[i].lf, &lu, d);
            if (rc) return rc;
        }
        uint64_t a = cxs_index_at(sh, lu);
        out[i].shard = q[i].s;
        out[i].lu = lu;
        out[i].f0 = sh->f_start + a;
        out[i].T = cxs_index_at(sh, lu + 1) - a;
        out[i].row = (uint64_t)ds->meta.guard * (lu + 1) + a;
    }
    return 0;
}
