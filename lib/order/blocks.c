/* blocks.c - the block schedule (see blocks.h). */
#include "blocks.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"
#include "fault.h"

/* The schedule's version: change it with any change to the order it
 * draws (cxs_block_order, recorded in a loader's saved state). */
uint32_t cxs_block_order(void) { return 2; }

static inline uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rng_next(uint64_t *st) {
    return mix64(*st += 0x9e3779b97f4a7c15ull);
}

/* Uniform in [0, n), n > 0 (Lemire's multiply, rejection for exactness). */
static uint64_t rng_below(uint64_t *st, uint64_t n) {
    for (;;) {
        unsigned __int128 m = (unsigned __int128)rng_next(st) * n;
        uint64_t lo = (uint64_t)m;
        if (lo >= n || lo >= (0 - n) % n) return (uint64_t)(m >> 64);
    }
}

/* A keyed bijection of [0, n): a four-round balanced Feistel network over
 * the next power of four, restricted to [0, n) by cycle walking (the
 * sampler's shuffle does the same over all frames). */
static uint64_t permute(uint64_t x, uint64_t n, uint64_t key) {
    if (n <= 1) return 0;
    uint32_t bits = 1;
    while (bits < 64 && (1ull << bits) < n) bits++;
    const uint32_t h = (bits + 1) / 2;
    const uint64_t mask = (1ull << h) - 1;
    uint64_t k[4];
    for (int r = 0; r < 4; r++) k[r] = mix64(key + 0x632be59bd9b4e019ull * (uint64_t)(r + 1));
    do {
        uint64_t L = x >> h, R = x & mask;
        for (int r = 0; r < 4; r++) {
            uint64_t y = (R ^ k[r]) * 0xff51afd7ed558ccdull;
            uint64_t t = L ^ ((y ^ (y >> 29) ^ (y >> 41)) & mask);
            L = R;
            R = t;
        }
        x = (L << h) | R;
    } while (x >= n);
    return x;
}

/* Fork: a process-wide pthread_atfork handler holds every schedule's mutex
 * across fork(), so that a child never inherits one locked by a thread it
 * does not have (the chunk cache does the same). */
static pthread_mutex_t all_mu = PTHREAD_MUTEX_INITIALIZER;
static cxs_block_sched *all_scheds;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void) {
    pthread_mutex_lock(&all_mu);
    for (cxs_block_sched *b = all_scheds; b; b = b->next) pthread_mutex_lock(&b->mu);
}

static void fork_after(void) {
    for (cxs_block_sched *b = all_scheds; b; b = b->next) pthread_mutex_unlock(&b->mu);
    pthread_mutex_unlock(&all_mu);
}

static void register_atfork(void) { pthread_atfork(fork_prepare, fork_after, fork_after); }

typedef struct cut_arg {
    const cxs_dataset *ds;
    const cxs_block_sched *bs;
    cxs_block_plan *p;
    uint64_t G, target, n, cap; /* cap: entries of p->blk */
} cut_arg;

/* Room for one more block in p->blk: doubled when full, so the table is
 * O(#blocks), never O(#utterances).  0 or -ENOMEM. */
static int grow(cut_arg *ca) {
    if (ca->n < ca->cap) return 0;
    const uint64_t cap = ca->cap * 2;
    if (cap > SIZE_MAX / sizeof(cxs_block)) return -ENOMEM;
    cxs_block *b = realloc(ca->p->blk, (size_t)cap * sizeof *b);
    if (!b) return -ENOMEM;
    ca->p->blk = b; /* owned by the plan before the next read of the mapping */
    ca->cap = cap;
    return 0;
}

/* The epoch's blocks from the first cut (a->target rows): reads INDEX from
 * the mapping, so it runs in a recovery region (fault.h).  Utterance
 * boundaries come from INDEX in place; only the blocks are stored (p->blk,
 * grown as they come: a fault leaves it owned by the plan, freed with
 * it). */
static int cut_blocks(void *arg) {
    cut_arg *ca = arg;
    const cxs_dataset *ds = ca->ds;
    const cxs_block_sched *bs = ca->bs;
    cxs_block_plan *p = ca->p;
    const uint64_t G = ca->G;
    uint64_t target = ca->target, n = 0, rows = 0, uend = 0;
    /* INDEX read in place, shard by shard (checked at init), each entry
     * once; the open block's end is kept here and stored when it closes */
    for (uint32_t s = 0; s < ds->meta.num_shards; s++) {
        const shard *sh = &ds->shards[s];
        const uint64_t nu = sh->meta.num_utterances;
        uint64_t a = nu ? cxs_index_at(sh, 0) : 0;
        int fresh = 1; /* a block never spans two shards */
        for (uint64_t lu = 0; lu < nu; lu++) {
            const uint64_t next = cxs_index_at(sh, lu + 1), T = next - a + G;
            if (fresh || rows + T > target) {
                if (n) {
                    target = bs->block_rows;
                    p->blk[n - 1].u1 = uend;
                }
                ca->n = n;
                int rc = grow(ca);
                if (rc) return rc;
                cxs_block *b = &p->blk[n++];
                b->u0 = sh->u_start + lu;
                b->f0 = sh->f_start + a;
                b->shard = s;
                rows = 0;
                fresh = 0;
            }
            rows += T;
            uend = sh->u_start + lu + 1;
            a = next;
        }
    }
    if (n) p->blk[n - 1].u1 = uend;
    for (uint64_t j = 0; j < n; j++) {
        cxs_block *b = &p->blk[j];
        const shard *sh = &ds->shards[b->shard];
        const uint64_t lu0 = b->u0 - sh->u_start, lu1 = b->u1 - sh->u_start;
        b->nf = sh->f_start + cxs_index_at(sh, lu1) - b->f0;
        if (sh->features) {
            /* rows from the guard before u0 to the guard after u1 - 1 */
            uint64_t r0 = (uint64_t)sh->meta.guard * (lu0 + 1) + cxs_index_at(sh, lu0) - sh->meta.guard;
            uint64_t r1 = (uint64_t)sh->meta.guard * lu1 + cxs_index_at(sh, lu1) + sh->meta.guard;
            b->off = (uint64_t)(sh->features - sh->map) + r0 * ds->row_bytes;
            b->len = (r1 - r0) * ds->row_bytes;
        } else { /* compressed: no range of the mapping to read ahead */
            b->off = b->len = 0;
        }
    }
    ca->n = n;
    return 0;
}

int cxs_block_sched_init(cxs_block_sched *bs, const cxs_dataset *ds, uint64_t seed,
                         uint64_t block_rows, uint32_t guard_rows, uint32_t R, cxs_diag *d) {
    memset(bs, 0, sizeof *bs);
    if (R < 1) return cxs_diagf(d, CXS_E_INVALID, "a block schedule needs at least one block a round");
    /* every epoch's plan reads the whole INDEX: check it once, here */
    int rc = cxs_index_check_all(ds, d);
    if (rc) return rc;
    if (block_rows < ds->max_len + guard_rows)
        return cxs_diagf(d, CXS_E_RANGE,
                         "a block of %llu bytes cannot hold the longest utterance (%llu bytes: "
                         "%llu frames and %u guard rows of %llu bytes)",
                         (unsigned long long)(block_rows * ds->row_bytes),
                         (unsigned long long)((ds->max_len + guard_rows) * ds->row_bytes),
                         (unsigned long long)ds->max_len, guard_rows,
                         (unsigned long long)ds->row_bytes);
    bs->ds = ds;
    bs->seed = seed;
    bs->block_rows = block_rows;
    bs->guard_rows = guard_rows;
    bs->R = R;
    pthread_mutex_init(&bs->mu, NULL);
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&all_mu);
    bs->next = all_scheds;
    if (all_scheds) all_scheds->prev = bs;
    all_scheds = bs;
    pthread_mutex_unlock(&all_mu);
    return 0;
}

static void plan_free(void *plan) {
    cxs_block_plan *p = plan;
    if (!p) return;
    free(p->blk);
    free(p->rstart);
    free(p);
}

void cxs_block_sched_destroy(cxs_block_sched *bs) {
    if (!bs->ds) return;
    pthread_mutex_lock(&all_mu);
    if (bs->prev) bs->prev->next = bs->next;
    else all_scheds = bs->next;
    if (bs->next) bs->next->prev = bs->prev;
    pthread_mutex_unlock(&all_mu);
    cxs_plan_cache_clear(&bs->cache, plan_free);
    pthread_mutex_destroy(&bs->mu);
    bs->ds = NULL;
}

/* Block j (of n, in epoch order) is drawn from in rounds first_round ..
 * last_round: from the round where it joins the window of R blocks to the
 * round where it is the window's oldest, except that the last R blocks all
 * last to the final round -- the epoch ends drawing on R blocks, as it
 * runs, rather than on fewer and fewer (the final round on one). */
static inline uint64_t first_round(uint64_t j, uint32_t R) { return j < R ? 0 : j - R + 1; }
static inline uint64_t last_round(uint64_t j, uint64_t n, uint32_t R) {
    return j + R >= n ? n - 1 : j;
}
static inline uint64_t shares(uint64_t j, uint64_t n, uint32_t R) {
    return last_round(j, n, R) - first_round(j, R) + 1;
}

uint64_t cxs_block_plan_first(const cxs_block_plan *p, uint64_t t) {
    const uint64_t n = p->nblocks, R = p->R;
    return t + R <= n ? t : n > R ? n - R : 0;
}

static int plan_build(const cxs_block_sched *bs, uint64_t epoch, cxs_block_plan **out) {
    const cxs_dataset *ds = bs->ds;
    const uint64_t U = ds->meta.num_utterances, G = bs->guard_rows;
    cxs_block_plan *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->epoch = epoch;
    p->R = bs->R;
    p->frames = ds->meta.num_frames;
    p->key = mix64(mix64(bs->seed ^ 0x243f6a8885a308d3ull) + mix64(epoch + 0x13198a2e03707344ull));
    /* A first guess at the number of blocks: the rows over the block size,
     * plus the short blocks at shard ends and the first cut; cut_blocks
     * grows the table when the guess is short, and it is trimmed after. */
    const uint64_t rows = ds->meta.num_frames + U * G;
    uint64_t cap = rows / bs->block_rows + 2ull * ds->meta.num_shards + 2;
    if (cap > SIZE_MAX / sizeof *p->blk) cap = 1024;
    p->blk = malloc((size_t)cap * sizeof *p->blk);
    if (!p->blk) {
        plan_free(p);
        return -ENOMEM;
    }
    /* The first block ends early by a seeded number of rows, which moves
     * every cut of the epoch: which utterances share a block changes. */
    uint64_t st = p->key;
    uint64_t target = bs->block_rows - rng_below(&st, bs->block_rows);
    cut_arg ca = {ds, bs, p, G, target, 0, cap};
    cxs_fault f;
    int crc = cxs_fault_run(ds, cut_blocks, &ca, &f);
    if (crc) { /* a shard truncated since open (INDEX lost), or -ENOMEM */
        plan_free(p);
        return crc;
    }
    const uint64_t n = ca.n;
    if (n && n < ca.cap) { /* trim the guess: the plan keeps n blocks */
        cxs_block *b = realloc(p->blk, (size_t)n * sizeof *b);
        if (b) p->blk = b;
    }
    /* The blocks' order: Fisher-Yates from the epoch's key. */
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = rng_below(&st, i);
        cxs_block t = p->blk[i - 1];
        p->blk[i - 1] = p->blk[j];
        p->blk[j] = t;
    }
    p->nblocks = n;
    /* Round t holds share t - first_round(j) of every block j it draws on
     * (cxs_block_plan_first(t) .. t+R-1); share s of a block of F frames
     * is its permuted positions [F*s/c, F*(s+1)/c) for c shares. */
    p->rstart = calloc(n + 1, sizeof *p->rstart);
    if (!p->rstart) {
        plan_free(p);
        return -ENOMEM;
    }
    for (uint64_t j = 0; j < n; j++) {
        uint64_t c = shares(j, n, bs->R), F = p->blk[j].nf, t0 = first_round(j, bs->R);
        for (uint64_t s = 0; s < c; s++) p->rstart[t0 + s + 1] += F * (s + 1) / c - F * s / c;
    }
    for (uint64_t t = 0; t < n; t++) p->rstart[t + 1] += p->rstart[t];
    *out = p;
    return 0;
}

int cxs_block_plan_get(cxs_block_sched *bs, uint64_t epoch, cxs_block_plan **out) {
    pthread_mutex_lock(&bs->mu);
    int rc = 0;
    cxs_block_plan *p = cxs_plan_find(&bs->cache, epoch);
    /* Built under the lock: O(#utterances) time, O(#blocks) memory, once
     * an epoch, and the threads that asked for the same epoch wait for it
     * rather than build it again. */
    if (!p && !(rc = plan_build(bs, epoch, &p)))
        p = cxs_plan_keep(&bs->cache, p, epoch, &p->refs, plan_free);
    pthread_mutex_unlock(&bs->mu);
    if (!rc) *out = p;
    return rc;
}

void cxs_block_plan_put(cxs_block_sched *bs, cxs_block_plan *p) {
    pthread_mutex_lock(&bs->mu);
    cxs_plan_put(p, &p->refs, plan_free);
    pthread_mutex_unlock(&bs->mu);
}

uint64_t cxs_block_plan_round(const cxs_block_plan *p, uint64_t g) {
    return cxs_last_le(p->rstart, p->nblocks, g);
}

uint64_t cxs_block_plan_frame(const cxs_block_plan *p, uint64_t g, uint64_t *block) {
    const uint64_t t = cxs_block_plan_round(p, g), N = p->rstart[t + 1] - p->rstart[t];
    uint64_t y = permute(g - p->rstart[t], N, mix64(p->key ^ mix64(2 * t + 1)));
    uint64_t jend = t + p->R < p->nblocks ? t + p->R : p->nblocks;
    for (uint64_t j = cxs_block_plan_first(p, t); j < jend; j++) {
        const cxs_block *b = &p->blk[j];
        uint64_t c = shares(j, p->nblocks, p->R), s = t - first_round(j, p->R), F = b->nf;
        uint64_t lo = F * s / c, len = F * (s + 1) / c - lo;
        if (y < len) {
            if (block) *block = j;
            return b->f0 + permute(lo + y, F, mix64(p->key ^ mix64(2 * j + 2)));
        }
        y -= len;
    }
    if (block) *block = t; /* not reached: the round's shares sum to N */
    return p->blk[t].f0;
}
