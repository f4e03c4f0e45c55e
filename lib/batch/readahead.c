/* readahead.c - the loader's helper thread (see readahead.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "readahead.h"
#include "samplers.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { ABSENT, READING, READ, BAD };

static uintptr_t page_size(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (uintptr_t)p : 4096;
}

int cxs_ra_init(cxs_readahead *ra, const cxs_dataset *ds, const cxs_sampler *s, int on,
                size_t batch, uint32_t k, pthread_mutex_t *mu, const uint64_t *generation,
                const uint64_t *epoch, const uint64_t *start, const uint64_t *next_claim,
                const uint64_t *nbatches, const int *stop) {
    memset(ra, 0, sizeof *ra);
    ra->ds = ds, ra->sampler = s, ra->batch = batch, ra->k = k;
    ra->mu = mu, ra->generation = generation, ra->epoch = epoch, ra->start = start;
    ra->next_claim = next_claim, ra->nbatches = nbatches, ra->stop = stop;
    ra->gen = UINT64_MAX;
    uint32_t kind = cxs_sampler_options(s)->kind;
    /* Compressed data goes through the chunk cache, not the mapping; a
     * sequential order is what the kernel's own read-ahead does best. */
    if (!on || cxs_compressed(ds) || kind == CXS_SAMPLER_SEQUENTIAL) return 0;
    /* Served from a copy in memory (hugepage_budget): nothing to read. */
    if (ds->hp_map) return 0;
    ra->kind = kind == CXS_SAMPLER_BLOCK ? CXS_RA_BLOCKS : CXS_RA_PAGES;
    pthread_cond_init(&ra->cv, NULL);
    if (ra->kind == CXS_RA_BLOCKS) {
        ra->held = cxs_src_streamed(ds);
        int rc = cxs_src_init(&ra->src, ds, CXS_SRC_READ | CXS_SRC_AHEAD);
        if (rc) return rc;
    } else {
        if (!(ra->frames = malloc(batch * sizeof *ra->frames))) return -ENOMEM;
        /* A fault reads the page it needs, not the kernel's read-around of
         * up to read_ahead_kb: a random window needs a few pages. */
        const uintptr_t P = page_size();
        for (uint32_t i = 0; i < ds->meta.num_shards; i++) {
            const shard *sh = &ds->shards[i];
            uintptr_t a = (uintptr_t)sh->features & ~(P - 1), e = (uintptr_t)(sh->map + sh->size);
            if (sh->features) madvise((void *)a, e - a, MADV_RANDOM);
        }
    }
    return 0;
}

static void drop_plan(cxs_readahead *ra, int let_go);
static void release_pending(cxs_readahead *ra);

void cxs_ra_destroy(cxs_readahead *ra, int forked) {
    if (ra->kind == CXS_RA_NONE) return;
    /* In a forked child the blocks read are the parent's, still in use
     * there: only the memory goes (and the descriptors still ours). */
    if (forked) cxs_src_after_fork(&ra->src);
    drop_plan(ra, !forked);
    if (!forked && ra->npend) release_pending(ra);
    free(ra->pend);
    ra->pend = NULL, ra->npend = ra->cpend = 0;
    cxs_src_destroy(&ra->src, 0); /* (after_fork above: what is left is ours) */
    free(ra->frames);
    pthread_cond_destroy(&ra->cv);
    ra->kind = CXS_RA_NONE;
}

void cxs_ra_after_fork(cxs_readahead *ra) {
    if (ra->kind != CXS_RA_NONE) pthread_cond_init(&ra->cv, NULL);
    /* the descriptors the parent's helper opened, and its holds */
    cxs_src_after_fork(&ra->src);
    /* the blocks the parent read (or was reading) are the parent's: the
     * child reads them again if it needs them (from the cache) and never
     * lets them go from under the parent */
    for (uint64_t j = 0; ra->plan && j < ra->plan->nblocks; j++) {
        if (ra->state[j] == READ || ra->state[j] == READING) ra->state[j] = ABSENT;
        ra->need[j] = 0; /* the parent's batches in flight: none is the child's */
    }
    ra->npend = 0; /* (the parent's holds) */
    ra->running = 0;
    /* the parent's batches in flight are not the child's: nothing is being
     * filled or warmed here yet */
    ra->direct = 0;
    ra->warming = 0;
    ra->first_filled = 0;
}

void cxs_ra_wake(cxs_readahead *ra) {
    if (ra->kind != CXS_RA_NONE) pthread_cond_broadcast(&ra->cv);
}

void cxs_ra_claimed(cxs_readahead *ra) {
    if (ra->kind == CXS_RA_NONE) return;
    pthread_mutex_lock(ra->mu);
    pthread_cond_broadcast(&ra->cv);
    pthread_mutex_unlock(ra->mu);
}

/* While the first batches of a start are filled without waiting for
 * their blocks, their page reads have the disk to themselves: the helper
 * pauses between the pieces of a block it reads. */
static void pace(void *arg) {
    cxs_readahead *ra = arg;
    if (!__atomic_load_n(&ra->direct, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(ra->mu);
    while (__atomic_load_n(&ra->direct, __ATOMIC_ACQUIRE) && !*ra->stop)
        pthread_cond_wait(&ra->cv, ra->mu);
    pthread_mutex_unlock(ra->mu);
}

/* Read block b into the page cache, checked and (streamed) held: the
 * block source's (cxs_src_read). */
static int read_block(cxs_readahead *ra, const cxs_block *b, cxs_diag *d) {
    return cxs_src_read(&ra->src, b->shard, b->off, b->len, ra->stop, pace, ra, d);
}

/* The helper thread's own readahead (NULL in every other thread). */
static _Thread_local const cxs_readahead *helper_of;

/* A streamed dataset: let go of the hold read_block took on b's bytes
 * (the sum blocks they touch, as it widened them).  The holds are the
 * helper's (their counts are not shared): a worker that drops a plan (a
 * new epoch, met first by a worker) queues the release for the helper,
 * which makes it at the top of its loop. */
static void release_block(cxs_readahead *ra, const cxs_block *b) {
    if (!ra->held || !b->len) return;
    if (helper_of == ra || !__atomic_load_n(&ra->running, __ATOMIC_ACQUIRE)) {
        cxs_src_release(&ra->src, b->shard, b->off, b->off + b->len, 1);
        return;
    }
    if (ra->npend == ra->cpend) { /* (under mu: drop_plan's callers hold it) */
        size_t c = ra->cpend ? 2 * ra->cpend : 64;
        cxs_block *p = realloc(ra->pend, c * sizeof *p);
        if (!p) return; /* the hold stays until the loader goes: only a block
                           the cache cannot evict meanwhile */
        ra->pend = p, ra->cpend = c;
    }
    ra->pend[ra->npend++] = *b;
    pthread_cond_broadcast(&ra->cv);
}

/* The helper, under mu: the releases the workers left it. */
static void release_pending(cxs_readahead *ra) {
    for (size_t i = 0; i < ra->npend; i++)
        cxs_src_release(&ra->src, ra->pend[i].shard, ra->pend[i].off,
                        ra->pend[i].off + ra->pend[i].len, 1);
    ra->npend = 0;
}

/* Let block b go: out of this process's page tables and out of the page
 * cache (cxs_range_drop, shardfd.h), and let go of its hold.  Except
 * where every block of the plan fits the memory budget at once
 * (ra->keep): the next epoch reads each block again, and dropping them
 * sent every epoch to the disk for bytes the budget lets it keep (a q8
 * copy that fits memory where float32 does not was read again at every
 * epoch). */
static void drop_block(cxs_readahead *ra, const cxs_block *b) {
    if (!ra->keep) cxs_range_drop(&ra->src.fds, b->shard, b->off, b->len);
    release_block(ra, b);
}

/* Under mu: the blocks' state of an earlier position or epoch goes (what
 * was read is dropped). */
static void drop_plan(cxs_readahead *ra, int let_go) {
    if (!ra->plan) return;
    for (uint64_t j = 0; let_go && j < ra->plan->nblocks; j++)
        if (ra->state[j] == READ) drop_block(ra, &ra->plan->blk[j]);
    for (uint64_t j = 0; ra->bad && j < ra->plan->nblocks; j++) free(ra->bad[j]);
    cxs_block_plan_put(cxs_sampler_blocks(ra->sampler), ra->plan);
    ra->plan = NULL;
    free(ra->state);
    free(ra->need);
    free(ra->bad);
    ra->state = NULL, ra->need = NULL, ra->bad = NULL;
}

/* Under mu: follow the loader to its current generation.  Returns 0 or
 * -ENOMEM (then without a plan: the workers do not wait). */
static int sync_gen(cxs_readahead *ra) {
    if (ra->gen == *ra->generation) return ra->kind == CXS_RA_BLOCKS && !ra->plan ? -ENOMEM : 0;
    ra->gen = *ra->generation;
    ra->advised = 0;
    if (ra->kind != CXS_RA_BLOCKS) return 0;
    ra->wanted = 0; /* (what was asked of the fetch-ahead for the old position goes) */
    cxs_src_unwant(&ra->src);
    if (ra->plan && ra->plan->epoch == *ra->epoch) {
        /* the same epoch from another position: keep what is read (and
         * what failed its sums; a stream's fetch that failed is tried
         * again: the server may be back) */
        memset(ra->need, 0, ra->plan->nblocks * sizeof *ra->need);
        for (uint64_t j = 0; j < ra->plan->nblocks; j++) {
            if (ra->state[j] == READING) ra->state[j] = ABSENT;
            if (ra->state[j] == BAD && ra->held &&
                (!ra->bad[j] || ra->bad[j]->code != CXS_E_CHECKSUM)) {
                free(ra->bad[j]);
                ra->bad[j] = NULL;
                ra->state[j] = ABSENT;
            }
        }
        return 0;
    }
    drop_plan(ra, 1);
    cxs_block_plan *p;
    if (cxs_block_plan_get(cxs_sampler_blocks(ra->sampler), *ra->epoch, &p)) return -ENOMEM;
    ra->state = calloc(p->nblocks, 1);
    ra->need = calloc(p->nblocks, sizeof *ra->need);
    ra->bad = calloc(p->nblocks, sizeof *ra->bad);
    ra->plan = p;
    uint64_t bytes = 0;
    for (uint64_t j = 0; j < p->nblocks; j++) bytes += p->blk[j].len;
    ra->keep = !ra->held && bytes <= cxs_sampler_options(ra->sampler)->memory_bytes;
    if (!ra->state || !ra->need || !ra->bad) {
        drop_plan(ra, 1);
        return -ENOMEM;
    }
    return 0;
}

/* Under mu, a streamed dataset: the blocks after the one being read, to
 * the window's end and past it (the next round's, at most the window's
 * bytes again) as far as the cache's room beside the window allows, asked
 * of the block source's fetch-ahead, each once: the link then has the
 * next fetches in flight while this thread checks and holds a block, and
 * while it waits for the loader to move on (before, the next block's
 * fetch began when the one before was done). */
static void want_ahead(cxs_readahead *ra, uint64_t lo, uint64_t hi) {
    const cxs_block_plan *P = ra->plan;
    const uint64_t n = P->nblocks;
    if (lo >= n) return;
    uint64_t win = 0, lead = 0;
    for (uint64_t j = lo; j <= hi && j < n; j++) win += P->blk[j].len;
    for (uint64_t j = hi + 1; j < ra->wanted && j < n; j++) lead += P->blk[j].len;
    /* (one block more: the next round's first, read while the oldest goes) */
    uint64_t room = cxs_src_ahead_room(&ra->src, win + P->blk[hi < n ? hi : n - 1].len);
    if (room > win) room = win;
    /* a cache with less room than a quarter window beside it: nothing past
     * the window (what it fetched ahead would take the room of blocks a
     * later round reads again: two epochs through 5 MB of a 9.3 MB
     * dataset fetched up to 2.06 times its features, 1.8 without) */
    if (room < win / 4) room = 0;
    uint64_t j = ra->wanted > lo ? ra->wanted : lo;
    for (; j < n; j++) {
        if (j > hi && lead + P->blk[j].len > room) break;
        if (j > hi) lead += P->blk[j].len;
        if (ra->state[j] == ABSENT)
            cxs_src_want(&ra->src, P->blk[j].shard, P->blk[j].off, P->blk[j].len);
    }
    ra->wanted = j;
}

static void blocks_loop(cxs_readahead *ra) {
    pthread_mutex_lock(ra->mu);
    while (!*ra->stop) {
        if (ra->npend) release_pending(ra);
        if (sync_gen(ra)) {
            pthread_cond_wait(&ra->cv, ra->mu);
            continue;
        }
        if (__atomic_load_n(&ra->direct, __ATOMIC_ACQUIRE)) {
            /* the first batches' page reads have the disk to themselves */
            pthread_cond_wait(&ra->cv, ra->mu);
            continue;
        }
        const cxs_block_plan *P = ra->plan;
        const uint64_t n = P->nblocks, gen = ra->gen;
        /* The window: the blocks of the next batch's round, and one more. */
        uint64_t lo = n, hi = 0;
        if (*ra->next_claim < *ra->nbatches) {
            uint64_t pos = *ra->start + *ra->next_claim * ra->batch;
            uint64_t t = cxs_block_plan_round(P, cxs_sampler_global(ra->sampler, pos));
            lo = cxs_block_plan_first(P, t);
            hi = t + P->R < n ? t + P->R : n - 1;
        }
        uint64_t pick = n, drop = n;
        /* A streamed dataset lets go first: what it holds counts against
         * the cache's limit, which the next block must fit under. */
        for (uint64_t j = 0; ra->held && j < n && drop == n; j++)
            if (ra->state[j] == READ && !ra->need[j] && (j < lo || j > hi)) drop = j;
        for (uint64_t j = 0; j < n && pick == n && drop == n; j++)
            if (ra->need[j] && ra->state[j] == ABSENT) pick = j;
        for (uint64_t j = lo; j <= hi && j < n && pick == n && drop == n; j++)
            if (ra->state[j] == ABSENT) pick = j;
        for (uint64_t j = 0; j < n && pick == n && drop == n; j++)
            if (ra->state[j] == READ && !ra->need[j] && (j < lo || j > hi)) drop = j;
        if (pick < n) {
            ra->state[pick] = READING;
            if (ra->held) want_ahead(ra, lo, hi);
            cxs_block b = P->blk[pick];
            pthread_mutex_unlock(ra->mu);
            cxs_diag why = {0};
            int bad = read_block(ra, &b, &why);
            pthread_mutex_lock(ra->mu);
            int kept = 0;
            if (ra->gen == gen && ra->plan == P && ra->state[pick] == READING) {
                ra->state[pick] = bad ? BAD : READ;
                kept = !bad;
                /* NULL: said generically */
                if (bad && why.message[0] && (ra->bad[pick] = malloc(sizeof why)))
                    *ra->bad[pick] = why;
            }
            if (!kept && ra->held) { /* what read_block held, unless it is READ now */
                pthread_mutex_unlock(ra->mu);
                if (!bad) release_block(ra, &b);
                pthread_mutex_lock(ra->mu);
            }
            pthread_cond_broadcast(&ra->cv);
        } else if (drop < n) {
            ra->state[drop] = ABSENT;
            cxs_block b = P->blk[drop];
            pthread_mutex_unlock(ra->mu);
            drop_block(ra, &b);
            pthread_mutex_lock(ra->mu);
        } else {
            if (ra->held) want_ahead(ra, lo, hi);
            pthread_cond_wait(&ra->cv, ra->mu);
        }
    }
    pthread_mutex_unlock(ra->mu);
}

/* Whether the page holding p is in the page cache (1 when unknown). */
static int resident(const void *p, uintptr_t P) {
    unsigned char v = 1;
    if (mincore((void *)((uintptr_t)p & ~(P - 1)), 1, &v)) return 1;
    return v & 1;
}

#define RESIDENT_PROBES 16 /* windows sampled before advising a batch */

/* Ask for the pages of every window of one batch, and of their labels,
 * at once: the kernel then has that many reads in flight, where the
 * workers' faults would wait for one at a time.  A batch whose sampled
 * windows and labels are all cached already is skipped: on warm data the
 * advice would only cost CPU. */
static void advise_frames(cxs_readahead *ra, const uint64_t *frames, size_t n) {
    const cxs_dataset *ds = ra->ds;
    const uintptr_t P = page_size();
    int cold = 0;
    for (size_t i = 0; i < n && i < RESIDENT_PROBES && !cold; i++) {
        cxs_uloc l;
        if (cxs_find_utt_safe(ds, frames[i], &l, NULL)) return; /* the gather will say */
        const shard *sh = &ds->shards[l.shard];
        cold = !resident(cxs_loc_row_ptr(ds, &l, (int64_t)(frames[i] - l.f0)), P) ||
               (sh->labels && !resident(sh->labels + (frames[i] - sh->f_start) * ds->meta.label_width, P));
    }
    if (!cold) return;
    for (size_t i = 0; i < n; i++) {
        cxs_uloc l;
        if (cxs_find_utt_safe(ds, frames[i], &l, NULL)) return;
        int64_t t = (int64_t)(frames[i] - l.f0), T = (int64_t)l.T;
        int64_t lo = t - (int64_t)ra->k, hi = t + (int64_t)ra->k + 1;
        if (lo < 0) lo = 0; /* beyond the utterance: zeros, from the guard or not read */
        if (hi > T) hi = T;
        uintptr_t a = (uintptr_t)cxs_loc_row_ptr(ds, &l, lo) & ~(P - 1);
        uintptr_t e = (uintptr_t)cxs_loc_row_ptr(ds, &l, hi);
        madvise((void *)a, e - a, MADV_WILLNEED);
        const shard *sh = &ds->shards[l.shard];
        if (sh->labels) {
            uintptr_t lp = (uintptr_t)(sh->labels + (frames[i] - sh->f_start) * ds->meta.label_width);
            madvise((void *)(lp & ~(P - 1)), P, MADV_WILLNEED);
        }
    }
}

int cxs_ra_batch_pages(cxs_readahead *ra, uint64_t b, uint64_t gen, const uint64_t *frames,
                       size_t n) {
    if (ra->kind != CXS_RA_PAGES) return 0;
    int mine = 0, first = b < CXS_RA_FIRST_BATCHES;
    pthread_mutex_lock(ra->mu);
    if (first) __atomic_add_fetch(&ra->direct, 1, __ATOMIC_RELEASE);
    if (gen == *ra->generation) {
        sync_gen(ra);
        if (ra->advised <= b) { /* the helper has not come to it: ask now */
            ra->advised = b + 1;
            mine = 1;
        }
    }
    pthread_mutex_unlock(ra->mu);
    /* while the helper warms the dataset, only the first batches ask for
     * pages: random reads would slow the sequential ones */
    if (mine && (first || !__atomic_load_n(&ra->warming, __ATOMIC_ACQUIRE)))
        advise_frames(ra, frames, n);
    return first;
}

void cxs_ra_batch_pages_done(cxs_readahead *ra, int first) {
    if (!first) return;
    pthread_mutex_lock(ra->mu);
    __atomic_sub_fetch(&ra->direct, 1, __ATOMIC_RELEASE);
    ra->first_filled++;
    pthread_cond_broadcast(&ra->cv);
    pthread_mutex_unlock(ra->mu);
}

static int warm_progress(void *user, uint64_t done, uint64_t total) {
    (void)done, (void)total;
    cxs_readahead *ra = user;
    pthread_mutex_lock(ra->mu);
    int stop = *ra->stop;
    pthread_mutex_unlock(ra->mu);
    return stop;
}

#define WARM_PROBES 64 /* pages sampled per shard to tell cached data */

/* A dataset that fits in memory is read once, sequentially, at the disk's
 * rate (cxs_dataset_warm, which refuses when it does not fit), rather than
 * faulted in at random window by window: a cold epoch then costs about
 * bytes / sequential rate more than a warm one, where the random reads
 * cost several times that.  Skipped when the sampled pages are cached. */
static void warm_if_fits(cxs_readahead *ra) {
    const cxs_dataset *ds = ra->ds;
    const uintptr_t P = page_size();
    uint32_t probes = 0, cached = 0;
    for (uint32_t i = 0; i < ds->meta.num_shards; i++) {
        const shard *sh = &ds->shards[i];
        if (!sh->features) continue;
        uintptr_t a = (uintptr_t)sh->features, e = (uintptr_t)(sh->map + sh->size);
        for (uint32_t q = 0; q < WARM_PROBES && e > a; q++, probes++)
            cached += (uint32_t)resident((const void *)(a + (e - a) / WARM_PROBES * q), P);
    }
    if (!probes || cached * 10 >= probes * 9) return;
    cxs_warm_result res;
    __atomic_store_n(&ra->warming, 1, __ATOMIC_RELEASE);
    /* (no block sums: an error here would reach no one; the block sampler,
     * `warm` and `verify` check them) */
    cxs_warm_impl(ds, 0, 0, warm_progress, ra, &res, NULL);
    __atomic_store_n(&ra->warming, 0, __ATOMIC_RELEASE);
}

static void pages_loop(cxs_readahead *ra) {
    const uint64_t len = cxs_sampler_length(ra->sampler);
    int warm_tried = 0;
    pthread_mutex_lock(ra->mu);
    while (!*ra->stop) {
        if (!warm_tried) {
            /* after the first batches (their page reads have the disk to
             * themselves, for a fast first batch) */
            if (__atomic_load_n(&ra->direct, __ATOMIC_ACQUIRE) || !ra->first_filled) {
                pthread_cond_wait(&ra->cv, ra->mu);
                continue;
            }
            warm_tried = 1;
            pthread_mutex_unlock(ra->mu);
            warm_if_fits(ra);
            pthread_mutex_lock(ra->mu);
            continue;
        }
        sync_gen(ra);
        if (ra->advised < *ra->next_claim) ra->advised = *ra->next_claim;
        uint64_t lim = *ra->next_claim + CXS_READAHEAD_BATCHES;
        if (lim > *ra->nbatches) lim = *ra->nbatches;
        if (ra->advised >= lim) {
            pthread_cond_wait(&ra->cv, ra->mu);
            continue;
        }
        uint64_t b = ra->advised++, epoch = *ra->epoch, pos = *ra->start + b * ra->batch;
        size_t n = len - pos < ra->batch ? (size_t)(len - pos) : ra->batch;
        pthread_mutex_unlock(ra->mu);
        if (!cxs_sampler_get(ra->sampler, epoch, pos, n, ra->frames)) advise_frames(ra, ra->frames, n);
        pthread_mutex_lock(ra->mu);
    }
    pthread_mutex_unlock(ra->mu);
}

static void *ra_main(void *arg) {
    cxs_readahead *ra = arg;
    helper_of = ra;
    if (ra->kind == CXS_RA_BLOCKS) blocks_loop(ra);
    else pages_loop(ra);
    return NULL;
}

int cxs_ra_start(cxs_readahead *ra) {
    if (ra->kind == CXS_RA_NONE || ra->running) return 0;
    cxs_src_cancel(&ra->src, 0);
    if (pthread_create(&ra->th, NULL, ra_main, ra)) return -EAGAIN;
    ra->running = 1;
    return 0;
}

void cxs_ra_stop(cxs_readahead *ra) {
    if (!ra->running) return;
    cxs_src_cancel(&ra->src, 1); /* a transfer in flight ends now */
    pthread_join(ra->th, NULL);
    __atomic_store_n(&ra->running, 0, __ATOMIC_RELEASE);
    if (ra->npend) release_pending(ra); /* (what it left: the workers are stopped) */
}

int cxs_ra_batch_frames(cxs_readahead *ra, const cxs_sampler *s, uint64_t epoch, uint64_t pos,
                        size_t n, uint64_t *frames, uint64_t gen, cxs_ra_batch *rb, cxs_diag *d) {
    cxs_block_sched *bs = cxs_sampler_blocks(s);
    rb->plan = NULL, rb->nj = 0, rb->gen = UINT64_MAX, rb->direct = 0;
    if (pos > cxs_sampler_length(s) || n > cxs_sampler_length(s) - pos) return CXS_E_RANGE;
    int rc = cxs_block_plan_get(bs, epoch, &rb->plan);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        uint64_t j;
        frames[i] = cxs_block_plan_frame(rb->plan, cxs_sampler_global(s, pos + i), &j);
        uint32_t q = 0;
        while (q < rb->nj && rb->j[q] != j) q++;
        if (q == rb->nj && rb->nj < CXS_RA_MAX_BLOCKS) rb->j[rb->nj++] = j;
        else if (q == rb->nj && ra->held) { /* the rest would be read unfetched */
            cxs_block_plan_put(bs, rb->plan);
            rb->plan = NULL;
            return cxs_diagf(d, CXS_E_UNSUPPORTED, "%s: a batch of %zu windows draws on more "
                             "than %u blocks, more than a streamed dataset waits for: use a "
                             "smaller batch or fewer blocks (the block sampler's blocks)",
                             ra->ds->url, n, CXS_RA_MAX_BLOCKS);
        }
    }
    int direct = 0, bad = 0, waited = 0;
    pthread_mutex_lock(ra->mu);
    if (gen == *ra->generation && !sync_gen(ra) && ra->plan->epoch == epoch) {
        rb->gen = gen;
        for (uint32_t q = 0; q < rb->nj; q++) ra->need[rb->j[q]]++;
        pthread_cond_broadcast(&ra->cv);
        /* The first batches of a start draw on the R blocks of round 0 (or
         * of the round resumed at): waiting for them would cost R block
         * reads before anything is served.  They ask for their windows'
         * pages instead, a few thousand reads in flight; the blocks are
         * read all the same (finding those pages cached). */
        direct = !ra->held && pos - *ra->start < CXS_RA_FIRST_BATCHES * (uint64_t)ra->batch;
        rb->direct = direct;
        if (direct) __atomic_add_fetch(&ra->direct, 1, __ATOMIC_RELEASE);
        for (uint32_t q = 0; q < rb->nj && !direct;) {
            if (*ra->stop || ra->gen != gen) break;
            if (ra->state[rb->j[q]] == READ) {
                q++;
                continue;
            }
            if (ra->state[rb->j[q]] == BAD) {
                const cxs_diag *why = ra->bad[rb->j[q]];
                bad = why && why->code != CXS_E_CHECKSUM /* a stream's fetch */
                          ? cxs_diag_copy(d, why->code ? why->code : -EIO, why)
                      : why ? cxs_diag_at(d, CXS_E_CHECKSUM, why->file, why->offset,
                                          "%s; not served (ctxshard verify)", why->message)
                          : cxs_diagf(d, CXS_E_CHECKSUM,
                                      "a block of the features fails its block sum; not "
                                      "served (ctxshard verify)");
                break;
            }
            pthread_cond_wait(&ra->cv, ra->mu);
        }
        waited = !bad && !direct && !*ra->stop && ra->gen == gen;
    }
    pthread_mutex_unlock(ra->mu);
    if (bad) return bad;
    /* a streamed dataset's batch that did not wait for its blocks (the
     * loader moved on, or stops: nobody takes it) reads nothing */
    if (ra->held && !waited) return -ECANCELED;
    if (direct) advise_frames(ra, frames, n);
    return 0;
}

void cxs_ra_batch_done(cxs_readahead *ra, cxs_ra_batch *rb) {
    if (!rb->plan) return;
    pthread_mutex_lock(ra->mu);
    if (rb->gen == ra->gen && ra->plan) {
        for (uint32_t q = 0; q < rb->nj; q++) ra->need[rb->j[q]]--;
        pthread_cond_broadcast(&ra->cv);
    }
    if (rb->direct) {
        __atomic_sub_fetch(&ra->direct, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&ra->cv);
    }
    pthread_mutex_unlock(ra->mu);
    cxs_block_plan_put(cxs_sampler_blocks(ra->sampler), rb->plan);
    rb->plan = NULL;
}
