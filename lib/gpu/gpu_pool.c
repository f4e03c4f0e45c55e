/* gpu_pool.c - the GPU loader's pool mode (ctxshard_gpu.h): data larger
 * than the device budget served from a pool of S segments, each holding
 * one block of the block schedule (blocks.h, shared with the CPU block
 * sampler), refreshed by a thread while the consumer draws from the others.
 *
 * A segment's life, one epoch at a time:
 *
 *     FREE --(refresher takes it)--> LOADING --(upload enqueued)--> LOADED
 *       ^                                                             |
 *       |                                   (consumer joins it, block order)
 *       |                                                             v
 *       +--(drained: ev_freed after the kernels that read it)--- RESIDENT
 *
 *  - FREE: in freeq.  The refresher pops it, waits (on its copy stream) for
 *    ev_freed of its last use, and uploads block next_block++ into it.
 *  - LOADED: in loadq, in block order; ev_loaded marks the upload's end.
 *    The consumer joins it when a round needs it: its work stream waits on
 *    ev_loaded, and res[block % S] names the segment.
 *  - RESIDENT: blocks [lo, hi).  Round t draws from blocks first(t) ..
 *    t+R-1 (R = S-1); entering it gives the blocks before first(t) back
 *    (ev_freed recorded on the work stream, pushed on freeq).  A block of
 *    a round this rank never reaches goes back unread.
 *
 * At most R segments are RESIDENT, so one is always FREE or LOADING and
 * the refresher makes progress while the consumer waits for LOADED.
 * freeq, loadq, next_block, stop and rc are under mu; res, lo, hi and t
 * belong to the consumer, seg[g] to whichever side holds segment g.  The
 * refresher fails once (gpu_fail, then rc) and stops; the consumer returns
 * its rc.  Which blocks are resident depends on the position only, never
 * on timing, so any position of any epoch can start the pool. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpu_internal.h"

/* Samples each rank serves: the remainder of the epoch from the sampler's
 * origin, cut to a multiple of world_size so that every rank takes the
 * same number of steps (no wrap-around padding: the padding's frames come
 * from the first blocks, long gone from the pool). */
uint64_t gpu_pool_length(const cxs_dataset *ds, const cxs_sampler_opts *so) {
    const uint64_t n = ds->meta.num_frames, w = so->world_size ? so->world_size : 1;
    return n > so->origin ? (n - so->origin) / w : 0;
}

/* Ask the kernel for a block's bytes (and the next block's) before the
 * refresher copies them: one sequential read in flight per block, whatever
 * access pattern another user of the mapping asked for (a CPU loader marks
 * it MADV_RANDOM). */
static void pool_hint(const cxs_gpu_loader *l, uint64_t j) {
    const cxs_block_plan *pl = l->p.plan;
    const uintptr_t P = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (uint64_t i = j; i < pl->nblocks && i < j + 2; i++) {
        const cxs_block *b = &pl->blk[i];
        const shard *sh = &l->ds->shards[b->shard];
        if (!sh->features || !b->len) continue;
        uintptr_t a = ((uintptr_t)sh->map + b->off) & ~(P - 1), e = (uintptr_t)sh->map + b->off + b->len;
        posix_madvise((void *)a, e - a, POSIX_MADV_WILLNEED);
    }
}

/* Block b's utterances' rows one after the other: reads INDEX (checked by
 * the block schedule) from the mapping, in a recovery region (gpu_mapped),
 * the rows through gpu_up_rows (a region of its own). */
typedef struct load_arg {
    cxs_gpu_loader *l;
    const cxs_block *b;
    uint8_t *base;
    zreader *zr;
} load_arg;

static int load_rows(void *arg) {
    load_arg *a = arg;
    const cxs_dataset *ds = a->l->ds;
    for (uint64_t u = a->b->u0; u < a->b->u1; u++) {
        const cxs_uloc ul = cxs_utt_at(ds, u);
        int rc = gpu_up_rows(a->l, &a->l->p.up, a->zr, a->b->shard, ul.row, ul.T,
                             a->base + (ul.f0 - a->b->f0) * ds->row_bytes);
        if (rc) return rc; /* the uploader wrote the message */
    }
    return 0;
}

/* Refresher: load block j of the epoch's plan into segment g, its
 * utterances' rows one after the other (the block is a run of utterances
 * of one shard, in storage order), through the pool's own copy stream. */
static int pool_load(cxs_gpu_loader *l, uint32_t g, uint64_t j, zreader *zr) {
    const cxs_dataset *ds = l->ds;
    gpu_pool *p = &l->p;
    pseg *sg = &p->seg[g];
    const cxs_block *b = &p->plan->blk[j];
    sg->block = j;
    pool_hint(l, j);
    int e;
    if (sg->freed_once && (e = l->be->stream_wait(p->copy, sg->ev_freed)))
        return gpu_fail(l, CXS_E_DEVICE, "pool refresh: %s: stream_wait: %s", l->be->name,
                        l->be->error_string(e));
    /* the block's rows and labels checked against their sums (blocksrc.h) */
    cxs_diag bd;
    const uint64_t u0 = ds->shards[b->shard].u_start;
    int rc = cxs_bsrc_utts(ds, b->shard, b->u0 - u0, b->u1 - u0, l->o.labels, &bd);
    if (rc) return gpu_fail_from(l, rc, "pool refresh: ", &bd);
    load_arg la = {l, b, p->d_pool + sg->row_base * ds->row_bytes, zr};
    rc = gpu_mapped(l, "pool refresh", load_rows, &la);
    if (rc) return rc;
    if ((rc = gpu_up_flush(l, &p->up))) return rc;
    if ((e = l->be->event_record(sg->ev_loaded, p->copy)))
        return gpu_fail(l, CXS_E_DEVICE, "pool refresh: %s: event_record: %s", l->be->name,
                        l->be->error_string(e));
    return 0;
}

static void *refresher_main(void *arg) {
    cxs_gpu_loader *l = arg;
    gpu_pool *p = &l->p;
    zreader zr = {0};
    l->be->set_device(l->dev);
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && p->next_block < p->plan->nblocks && !p->fq_len)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop || p->next_block >= p->plan->nblocks) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        uint32_t g = p->freeq[p->fq_head];
        p->fq_head = (p->fq_head + 1) % p->S;
        p->fq_len--;
        uint64_t j = p->next_block++;
        pthread_mutex_unlock(&p->mu);
        int rc = pool_load(l, g, j, &zr);
        pthread_mutex_lock(&p->mu);
        if (rc) {
            p->rc = rc;
        } else {
            p->loadq[(p->lq_head + p->lq_len) % p->S] = g;
            p->lq_len++;
        }
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        if (rc) break;
    }
    cxs_zreader_free(&zr);
    return NULL;
}

static void pool_stop(cxs_gpu_loader *l) {
    gpu_pool *p = &l->p;
    if (!p->running) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->th, NULL);
    p->running = 0;
    l->be->stream_sync(p->copy);
}

/* Start the epoch l->epoch at position l->pos: the refresher begins with
 * the first block that position's round draws from (the blocks of earlier
 * rounds are drained: nothing of them is read). */
static int pool_start(cxs_gpu_loader *l) {
    gpu_pool *p = &l->p;
    const cxs_sampler_opts *so = cxs_sampler_options(l->sampler);
    if (p->plan && p->plan->epoch != l->epoch) {
        cxs_block_plan_put(&p->bs, p->plan);
        p->plan = NULL;
    }
    if (!p->plan && cxs_block_plan_get(&p->bs, l->epoch, &p->plan))
        return gpu_fail(l, -ENOMEM, "out of memory");
    p->base = so->origin + so->rank;
    p->stride = so->world_size ? so->world_size : 1;
    p->len = gpu_pool_length(l->ds, so);
    uint64_t t0 = p->plan->nblocks;
    if (l->pos < p->len) t0 = cxs_block_plan_round(p->plan, p->base + l->pos * p->stride);
    p->stop = 0, p->rc = 0;
    const uint64_t b0 = t0 < p->plan->nblocks ? cxs_block_plan_first(p->plan, t0) : t0;
    p->next_block = b0;
    p->lo = p->hi = b0;
    p->t = UINT64_MAX;
    p->fq_head = 0, p->fq_len = p->S;
    for (uint32_t g = 0; g < p->S; g++) p->freeq[g] = g;
    p->lq_head = 0, p->lq_len = 0;
    if (pthread_create(&p->th, NULL, refresher_main, l))
        return gpu_fail(l, -EAGAIN, "cannot start the pool's refresher thread");
    p->running = 1;
    return 0;
}

static int pool_open(cxs_gpu_loader *l) {
    gpu_pool *p = &l->p;
    const uint64_t rb = l->ds->row_bytes;
    cxs_diag d;
    int e, rc = cxs_block_sched_init(&p->bs, l->ds, cxs_sampler_options(l->sampler)->seed,
                                     p->seg_rows, 0, p->S - 1, &d);
    if (rc) return gpu_fail_from(l, rc, "pool mode: ", &d);
    if ((e = l->be->dev_alloc((void **)&p->d_pool, (size_t)(p->S * p->seg_rows * rb))))
        return GPU_DEVICE_FAIL(l, "", e, "device allocation of the pool");
    l->info.device_bytes += p->S * p->seg_rows * rb;
    if (!(p->seg = calloc(p->S, sizeof *p->seg)) || !(p->freeq = calloc(p->S, 4)) ||
        !(p->loadq = calloc(p->S, 4)) || !(p->res = calloc(p->S, 4)))
        return gpu_fail(l, -ENOMEM, "out of memory");
    for (uint32_t g = 0; g < p->S; g++) {
        pseg *sg = &p->seg[g];
        sg->row_base = g * p->seg_rows;
        BE(l, l->be->event_create(&sg->ev_loaded, GPU_EVENT_BLOCKING));
        BE(l, l->be->event_create(&sg->ev_freed, GPU_EVENT_BLOCKING));
    }
    if ((rc = gpu_up_init(l, &p->up, l->copy, l->o.slots, rb))) return rc;
    p->up.ctx = "pool refresh: "; /* from now on the refresher's */
    p->copy = l->copy;
    return pool_start(l);
}

static void pool_free(cxs_gpu_loader *l) {
    gpu_pool *p = &l->p;
    pool_stop(l);
    for (uint32_t g = 0; p->seg && g < p->S; g++) {
        pseg *sg = &p->seg[g];
        if (sg->ev_loaded) l->be->event_destroy(sg->ev_loaded);
        if (sg->ev_freed) l->be->event_destroy(sg->ev_freed);
    }
    gpu_up_free(l, &p->up);
    gpu_headers_release(l);
    if (p->d_pool) l->be->dev_free(p->d_pool);
    if (p->plan) cxs_block_plan_put(&p->bs, p->plan);
    cxs_block_sched_destroy(&p->bs);
    free(p->seg);
    free(p->freeq);
    free(p->loadq);
    free(p->res);
    p->d_pool = NULL, p->seg = NULL, p->plan = NULL;
    p->freeq = p->loadq = p->res = NULL;
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
}

/* Give segment g back to the refresher once the kernels enqueued so far
 * (which may read it) are done. */
static int pool_release(cxs_gpu_loader *l, uint32_t g) {
    gpu_pool *p = &l->p;
    BE(l, l->be->event_record(p->seg[g].ev_freed, l->work));
    p->seg[g].freed_once = 1;
    pthread_mutex_lock(&p->mu);
    p->freeq[(p->fq_head + p->fq_len) % p->S] = g;
    p->fq_len++;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

/* Enter round t: the blocks before its first (cxs_block_plan_first) are
 * drained (the schedule never draws on them again) and go back to the
 * refresher; blocks up to t+R-1 are joined, in block order, waiting for
 * their uploads when needed
 * (which blocks are resident depends on the position only, never on
 * timing).  At most R = S-1 are resident: one segment is always free or
 * loading, so the refresher can make progress while we wait.  The caller
 * has enqueued every kernel that reads the blocks given back. */
static int pool_enter(cxs_gpu_loader *l, uint64_t t) {
    gpu_pool *p = &l->p;
    const uint32_t R = p->S - 1;
    const uint64_t first = cxs_block_plan_first(p->plan, t);
    int rc;
    for (; p->lo < first && p->lo < p->hi; p->lo++)
        if ((rc = pool_release(l, p->res[p->lo % p->S]))) return rc;
    const uint64_t end = t + R < p->plan->nblocks ? t + R : p->plan->nblocks;
    while (p->hi < end) {
        pthread_mutex_lock(&p->mu);
        while (!p->lq_len && !p->rc) pthread_cond_wait(&p->cv, &p->mu);
        if (!p->lq_len) { /* the refresher failed (and wrote the message) */
            rc = p->rc;
            pthread_mutex_unlock(&p->mu);
            return rc;
        }
        uint32_t g = p->loadq[p->lq_head];
        p->lq_head = (p->lq_head + 1) % p->S;
        p->lq_len--;
        pthread_mutex_unlock(&p->mu);
        if (p->hi < first) { /* a round this rank has no position in: never read */
            if ((rc = pool_release(l, g))) return rc;
        } else {
            BE(l, l->be->stream_wait(l->work, p->seg[g].ev_loaded));
            p->res[p->hi % p->S] = g;
        }
        p->hi++;
    }
    if (p->lo < first) p->lo = first;
    p->t = t;
    return 0;
}

/* Expand samples a .. b-1 of slot s (their descriptors are drawn). */
static int pool_expand(cxs_gpu_loader *l, gslot *s, size_t a, size_t b) {
    if (a == b) return 0;
    BE(l, l->be->copy_h2d((cxs_x_desc *)s->d_in + a, (cxs_x_desc *)s->h_in + a,
                          (b - a) * sizeof(cxs_x_desc), l->work));
    gpu_expand_args x;
    gpu_expand_init(l, s, &x);
    x.n = b - a;
    x.desc = (const cxs_x_desc *)s->d_in + a;
    x.feat = l->p.d_pool;
    x.qh = l->rs.d_qh, x.hbytes = gpu_header_bytes(l->ds), x.num_utts = l->ds->meta.num_utterances;
    x.out = (uint8_t *)s->d_x + a * l->W * l->xelem;
    x.y = s->d_y ? s->d_y + a : NULL;
    BE(l, gpu_launch_expand(l, &x, l->work));
    return 0;
}

/* The descriptions of samples a .. b-1 of slot s (frames[i], and the block
 * of the round's residency in desc[i].row0): the utterance holding each
 * frame, found in its block's INDEX entries, and its label.  Reads the
 * mapping: run in a recovery region, before the round changes. */
typedef struct describe_arg {
    cxs_gpu_loader *l;
    gslot *s;
    size_t a, b;
} describe_arg;

static int describe(void *arg) {
    describe_arg *x = arg;
    cxs_gpu_loader *l = x->l;
    const cxs_dataset *ds = l->ds;
    const gpu_pool *p = &l->p;
    cxs_x_desc *desc = x->s->h_in;
    for (size_t i = x->a; i < x->b; i++) {
        const uint64_t j = desc[i].row0, f = x->s->frames[i];
        const cxs_block *b = &p->plan->blk[j];
        /* the utterance holding f: last u in the block with cum[u] <= f */
        const shard *bsh = &ds->shards[b->shard];
        uint64_t lo = b->u0 - bsh->u_start, hi = b->u1 - bsh->u_start;
        while (hi - lo > 1) {
            uint64_t mid = lo + (hi - lo) / 2;
            if (bsh->f_start + cxs_index_at(bsh, mid) <= f) lo = mid;
            else hi = mid;
        }
        const cxs_uloc ul = cxs_utt_at(ds, bsh->u_start + lo);
        desc[i].row0 = p->seg[p->res[j % p->S]].row_base + (ul.f0 - b->f0);
        desc[i].T = (uint32_t)ul.T;
        desc[i].t = (uint32_t)(f - ul.f0);
        desc[i].utt = (uint32_t)(bsh->u_start + lo);
        desc[i].label = l->o.labels ? (int32_t)cxs_shard_label(bsh, f - bsh->f_start) : 0;
    }
    return 0;
}

static int pool_samples(cxs_gpu_loader *l, gslot *s, size_t a, size_t b) {
    if (a == b) return 0;
    describe_arg x = {l, s, a, b};
    return gpu_mapped(l, "pool", describe, &x);
}

/* Draw the batch at the loader's position into slot s and enqueue its
 * expansion.  When a round ends inside the batch, the samples drawn so
 * far are expanded first, so that the drained blocks can be given back
 * before the next round's are joined. */
static int pool_launch(cxs_gpu_loader *l, gslot *s) {
    gpu_pool *p = &l->p;
    const cxs_block_plan *pl = p->plan;
    cxs_x_desc *desc = s->h_in;
    const size_t want = l->o.batch_size;
    if (s->used) {
        BE(l, l->be->event_sync(s->ev_ready)); /* h_in's last copies are done */
        BE(l, l->be->stream_wait(l->work, s->ev_consumed)); /* and its buffers free */
    }
    s->index = l->index, s->position = l->pos;
    size_t n = 0, done = 0;
    int rc;
    while (n < want && l->pos < p->len) {
        const uint64_t g = p->base + l->pos * p->stride, t = cxs_block_plan_round(pl, g);
        if (t != p->t) { /* a new round (or the first) */
            if ((rc = pool_samples(l, s, done, n)) || (rc = pool_expand(l, s, done, n)))
                return rc;
            done = n;
            if ((rc = pool_enter(l, t))) return rc;
        }
        uint64_t j;
        s->frames[n] = cxs_block_plan_frame(pl, g, &j);
        desc[n].row0 = j; /* the block, until pool_samples */
        n++;
        l->pos++;
    }
    if ((rc = pool_samples(l, s, done, n)) || (rc = pool_expand(l, s, done, n))) return rc;
    /* the end, or a short last batch dropped (what it expanded is unused) */
    s->n = n < want && l->o.drop_last ? 0 : n;
    BE(l, l->be->event_record(s->ev_ready, l->work));
    s->used = 1;
    if (s->n) l->index++;
    return 0;
}

static int pool_setup(cxs_gpu_loader *l) {
    pthread_mutex_init(&l->p.mu, NULL);
    pthread_cond_init(&l->p.cv, NULL);
    int rc = gpu_ring_alloc(l, sizeof(cxs_x_desc));
    /* a coded dtype's headers, all of them, once: 8 + 8D bytes (q8) an
     * utterance against its T * D bytes of codes, so the pool gives up
     * little for them, and a refresh sends codes only */
    if (!rc) rc = gpu_headers_setup(l);
    if (!rc) rc = pool_open(l);
    l->info.device_bytes += gpu_ring_bytes(l, sizeof(cxs_x_desc));
    return rc;
}

static int pool_check_start(const cxs_gpu_loader *l, uint64_t start) {
    return start > gpu_pool_length(l->ds, cxs_sampler_options(l->sampler)) ? CXS_E_INVALID : 0;
}

static int pool_restart(cxs_gpu_loader *l) {
    int rc = gpu_ring_restart(l);
    return rc ? rc : pool_start(l);
}

static void pool_describe(const cxs_gpu_loader *l, cxs_gpu_loader_info *info) {
    if (l->p.plan && l->p.plan->nblocks)
        info->pool_utterances = l->ds->meta.num_utterances / l->p.plan->nblocks;
}

const gpu_mode cxs_gpu_pool_mode = {
    .setup = pool_setup,
    .next = gpu_ring_next,
    .slot_new = gpu_ring_slot_new,
    .slot_bytes = gpu_ring_slot_bytes,
    .launch = pool_launch,
    .check_start = pool_check_start,
    .stop = pool_stop,
    .start = pool_restart,
    .release = pool_free,
    .describe = pool_describe,
};
