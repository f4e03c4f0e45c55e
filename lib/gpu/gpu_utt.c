/* gpu_utt.c - whole-utterance batches assembled on the device
 * (cxs_gpu_utt_loader, ctxshard_gpu.h).  A GPU loader in resident mode
 * underneath: its upload (gpu_resident.c), its batch ring and handover
 * (gpu.c), one more mode behind the table whose launch sends a batch's
 * utterance descriptors and padded targets and runs the pad kernel. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"
#include "position.h"
#include "source.h"

struct cxs_gpu_utt_loader {
    cxs_gpu_loader *g;
    cxs_gpu_utt_batch batch;
};

#define DESC_BYTES sizeof(cxs_x_utt)

/* Where a slot's inputs lie in d_in / h_in (see gpu_internal.h). */
static size_t off_len(const gpu_utt *u) { return (size_t)u->cap * DESC_BYTES; }
static size_t off_tlen(const gpu_utt *u) { return off_len(u) + (size_t)u->cap * 8; }
static size_t off_tgt(const gpu_utt *u) { return off_tlen(u) + (size_t)u->cap * 8; }
static size_t in_bytes(const cxs_gpu_loader *l) {
    const gpu_utt *u = &l->ut;
    return off_tgt(u) + (u->targets ? (size_t)u->cap * l->ds->seq_max * 8 : 0);
}

static uint64_t utt_slot_bytes(const cxs_gpu_loader *l) {
    const gpu_utt *u = &l->ut;
    return u->max_frames * l->D * l->xelem + (l->o.labels ? u->max_frames * 8 : 0) +
           in_bytes(l);
}

static uint64_t ring_bytes(const cxs_gpu_loader *l) { return NSLOT * utt_slot_bytes(l); }

/* One slot: the batch's x and y, its inputs on the device and pinned, and
 * the utterance list the host keeps (meta, at the slot's place). */
static int utt_slot_new(cxs_gpu_loader *l, gslot *s) {
    gpu_utt *u = &l->ut;
    const size_t ib = in_bytes(l);
    if (!(u->meta[s - l->slot].utts = malloc((size_t)u->cap * 8)))
        return gpu_fail(l, -ENOMEM, "out of memory");
    BE(l, l->be->dev_alloc(&s->d_x, (size_t)u->max_frames * l->D * l->xelem));
    if (l->o.labels) BE(l, l->be->dev_alloc((void **)&s->d_y, (size_t)u->max_frames * 8));
    BE(l, l->be->dev_alloc(&s->d_in, ib));
    int rc = gpu_pinned(l, &s->h_in, ib, "a batch's utterance list");
    if (rc) return rc;
    s->frames = s->h_in; /* not a separate allocation: ring_free leaves it */
    BE(l, l->be->event_create(&s->ev_ready, GPU_EVENT_BLOCKING));
    BE(l, l->be->event_create(&s->ev_consumed, GPU_EVENT_BLOCKING));
    return 0;
}

typedef struct describe_arg {
    const cxs_dataset *ds;
    const gpu_utt *u;
    utt_meta *m;
    uint32_t n;
    cxs_x_utt *desc;
    int64_t *len;
} describe_arg;

/* A batch's descriptors and lengths, from INDEX (through gpu_mapped). */
static int describe(void *arg) {
    describe_arg *a = arg;
    utt_meta *m = a->m;
    for (uint32_t i = 0; i < a->n; i++) {
        const cxs_uloc ul = cxs_utt_at(a->ds, m->utts[i]);
        uint64_t v = m->utts[i], T = ul.T;
        a->desc[i] = (cxs_x_utt){a->u->urow[v], ul.f0, (uint32_t)T, (uint32_t)v};
        a->len[i] = (int64_t)T;
        m->frames += T;
        if (T > m->tmax) m->tmax = T;
    }
    return 0;
}

static int utt_launch(cxs_gpu_loader *l, gslot *s) {
    gpu_utt *u = &l->ut;
    const cxs_dataset *ds = l->ds;
    utt_meta *m = &u->meta[s - l->slot];
    if (s->used) BE(l, l->be->event_sync(s->ev_ready)); /* h_in's last copies are done */
    s->index = l->index, s->position = l->pos;
    if (l->pos >= u->len) {
        s->n = 0;
        return 0;
    }
    uint32_t n;
    int rc = cxs_utt_sampler_batch(u->sampler, l->epoch, l->pos, m->utts, u->cap, &n, &m->global);
    if (rc) return gpu_fail(l, rc, "utterance sampler: %s", cxs_strerror(rc));
    uint8_t *h = s->h_in, *d = s->d_in;
    cxs_x_utt *desc = (cxs_x_utt *)(void *)h;
    int64_t *len = (int64_t *)(void *)(h + off_len(u)), *tlen = (int64_t *)(void *)(h + off_tlen(u));
    m->tmax = m->frames = m->lmax = 0;
    /* INDEX (checked by the upload) in place, in a recovery region: a
     * shard truncated since then ends the epoch in an error, not SIGBUS */
    describe_arg da = {ds, u, m, n, desc, len};
    if ((rc = gpu_mapped(l, "utterance loader", describe, &da))) return rc;
    if (n * m->tmax > u->max_frames || n > u->cap)
        return gpu_fail(l, CXS_E_CORRUPT, "a batch larger than the sampler's bound");
    if (u->targets) {
        int64_t *tgt = (int64_t *)(void *)(h + off_tgt(u));
        /* lmax 0 at first: the longest; the buffer holds cap * seq_max */
        for (uint32_t i = 0; i < n; i++) {
            uint32_t sl = 0;
            if ((rc = cxs_dataset_label_seq(ds, m->utts[i], NULL, 0, &sl)))
                return gpu_fail(l, rc, "label sequence of utterance %llu: %s",
                                (unsigned long long)m->utts[i], cxs_strerror(rc));
            if (sl > m->lmax) m->lmax = sl;
        }
        if ((rc = cxs_dataset_pad_targets(ds, m->utts, n, m->lmax, tgt, tlen)))
            return gpu_fail(l, rc, "targets: %s", cxs_strerror(rc));
    }
    if (s->used) BE(l, l->be->stream_wait(l->work, s->ev_consumed));
    BE(l, l->be->copy_h2d(d, h, (size_t)n * DESC_BYTES, l->work));
    BE(l, l->be->copy_h2d(d + off_len(u), h + off_len(u), (size_t)n * 8, l->work));
    if (u->targets) {
        BE(l, l->be->copy_h2d(d + off_tlen(u), h + off_tlen(u), (size_t)n * 8, l->work));
        BE(l, l->be->copy_h2d(d + off_tgt(u), h + off_tgt(u), (size_t)(n * m->lmax * 8), l->work));
    }
    gpu_pad_args a;
    memset(&a, 0, sizeof a);
    a.feat = l->rs.d_feat;
    a.dtype = l->dtype, a.D = l->D;
    a.out_bf16 = l->o.out_dtype == CXS_GPU_OUT_BF16;
    a.mean = l->d_mean, a.scale = l->d_scale;
    a.qh = l->rs.d_qh, a.hbytes = gpu_header_bytes(ds);
    a.n = n, a.tmax = m->tmax;
    a.utt = (const cxs_x_utt *)(void *)d;
    a.lab = l->o.labels ? l->rs.d_lab : NULL;
    a.out = s->d_x;
    a.y = l->o.labels ? s->d_y : NULL;
    BE(l, gpu_launch_pad(l, &a, l->work));
    BE(l, l->be->event_record(s->ev_ready, l->work));
    s->n = n;
    s->used = 1;
    l->pos++;
    l->index++;
    return 0;
}

/* The rank's batch count of (l->epoch), and whether l->pos is within it. */
static int utt_position(cxs_gpu_loader *l) {
    uint64_t len;
    int rc = cxs_utt_sampler_length(l->ut.sampler, l->epoch, NULL, &len);
    if (rc) return gpu_fail(l, rc, "the order of epoch %llu: %s", (unsigned long long)l->epoch,
                            cxs_strerror(rc));
    if (l->pos > len)
        return gpu_fail(l, CXS_E_INVALID, "start %llu is past this rank's %llu batches of epoch %llu",
                        (unsigned long long)l->pos, (unsigned long long)len,
                        (unsigned long long)l->epoch);
    l->ut.len = len;
    return 0;
}

static int utt_start(cxs_gpu_loader *l) {
    int rc = gpu_ring_restart(l);
    return rc ? rc : utt_position(l);
}

static void utt_release(cxs_gpu_loader *l) {
    gpu_resident_release(l);
    for (int i = 0; i < NSLOT_MAX; i++) free(l->ut.meta[i].utts);
    free(l->ut.urow);
    memset(&l->ut, 0, sizeof l->ut);
}

const gpu_mode cxs_gpu_utt_mode = {
    .next = gpu_ring_next,
    .launch = utt_launch,
    .slot_new = utt_slot_new,
    .slot_bytes = utt_slot_bytes,
    .start = utt_start,
    .release = utt_release,
};

typedef struct utt_rows_arg {
    const cxs_dataset *ds;
    const uint64_t *srow;
    uint64_t *urow;
} utt_rows_arg;

static int utt_rows(void *arg) {
    utt_rows_arg *a = arg;
    for (uint64_t v = 0; v < a->ds->meta.num_utterances; v++) {
        const cxs_uloc ul = cxs_utt_at(a->ds, v);
        a->urow[v] = a->srow[ul.shard] + ul.row;
    }
    return 0;
}

static int utt_setup(cxs_gpu_loader *l) {
    const cxs_dataset *ds = l->ds;
    gpu_utt *u = &l->ut;
    const uint64_t U = ds->meta.num_utterances;
    /* the start first: a bad one is refused before anything is uploaded */
    int rc = utt_position(l);
    if (rc) return rc;
    cxs_diag id; /* the rows below come from the whole INDEX: checked first */
    if ((rc = cxs_index_check_all(ds, &id))) return gpu_fail_from(l, rc, "", &id);
    if (!(u->urow = malloc((U ? U : 1) * sizeof *u->urow)))
        return gpu_fail(l, -ENOMEM, "out of memory");
    /* the device rows gpu_resident_upload gives the utterances: the
     * shards' FEATURES sections back to back */
    const uint32_t S = ds->meta.num_shards;
    uint64_t *srow = malloc((S + 1) * sizeof *srow);
    if (!srow) return gpu_fail(l, -ENOMEM, "out of memory");
    srow[0] = 0;
    for (uint32_t s = 0; s < S; s++) srow[s + 1] = srow[s] + gpu_shard_rows(&ds->shards[s]);
    utt_rows_arg ra = {ds, srow, u->urow};
    rc = gpu_mapped(l, "utterance loader", utt_rows, &ra); /* INDEX, in place */
    free(srow);
    if (rc) return rc;
    for (int i = 0; i < NSLOT; i++) {
        rc = utt_slot_new(l, &l->slot[i]);
        l->nslot = i + 1; /* made in part: freed with the rest */
        if (rc) return rc;
    }
    rc = gpu_resident_upload(l);
    if (!rc) l->info.device_bytes += ring_bytes(l);
    return rc;
}

static int check_utt_opts(const cxs_dataset *ds, const cxs_gpu_utt_opts *o, cxs_diag *diag) {
    if (o->flags & CXS_PAD_PER_UTTERANCE)
        return cxs_diagf(diag, CXS_E_INVALID,
                         "GPU utterance loader: flags CXS_PAD_PER_UTTERANCE (per-utterance "
                         "normalisation) is computed on the CPU only: use cxs_utt_loader");
    if (o->flags & ~(CXS_GATHER_NORMALIZE | CXS_GPU_HOLD))
        return cxs_diagf(diag, CXS_E_INVALID, "GPU utterance loader: unknown flags 0x%x",
                         o->flags & ~(CXS_GATHER_NORMALIZE | CXS_GPU_HOLD));
    int nrc = gpu_check_norm(ds, o->flags, o->norm, "GPU utterance loader", diag);
    if (nrc) return nrc;
    if (o->out_dtype > CXS_GPU_OUT_BF16)
        return cxs_diagf(diag, CXS_E_INVALID, "GPU utterance loader: unknown out_dtype %u",
                         o->out_dtype);
    if (o->labels > 1 || o->targets > 1)
        return cxs_diagf(diag, CXS_E_INVALID, "GPU utterance loader: labels and targets are 0 or 1");
    if (o->slots && (o->slots < 3 || o->slots > MAX_UP))
        return cxs_diagf(diag, CXS_E_INVALID, "GPU utterance loader: slots %u (0, or 3..%d)",
                         o->slots, MAX_UP);
    if (o->paths & ~(CXS_GPU_NO_REGISTER | CXS_GPU_GDS))
        return cxs_diagf(diag, CXS_E_INVALID, "GPU utterance loader: unknown paths 0x%x", o->paths);
    if (o->labels && !ds->meta.label_width)
        return cxs_diagf(diag, CXS_E_NO_LABELS,
                         ds->has_seqs ? "GPU utterance loader: labels (per-frame) asked of a "
                                        "dataset of label sequences only (ask for the targets)"
                                      : "GPU utterance loader: labels asked of a features-only "
                                        "dataset");
    if (o->targets && !ds->has_seqs)
        return cxs_diagf(diag, CXS_E_NO_SEQUENCES,
                         "GPU utterance loader: targets (label sequences) asked of a dataset "
                         "without them (pack it with --transcripts sequence or both)");
    if (ds->max_len > UINT32_MAX)
        return cxs_diagf(diag, CXS_E_UNSUPPORTED, "an utterance of more than 2^32 frames");
    if (cxs_dtype_coded(ds->meta.dtype) && ds->meta.num_utterances > UINT32_MAX)
        return cxs_diagf(diag, CXS_E_UNSUPPORTED,
                         "GPU utterance loader: a %s dataset of more than 2^32 utterances",
                         cxs_dtype_name(ds->meta.dtype));
    return 0;
}

void cxs_gpu_utt_opts_init(cxs_gpu_utt_opts *o) { memset(o, 0, sizeof *o); }

int cxs_gpu_utt_loader_create(const cxs_dataset *ds, const cxs_utt_sampler *sampler,
                              const cxs_gpu_utt_opts *opts, uint64_t epoch, uint64_t start,
                              cxs_gpu_utt_loader **out, cxs_diag *diag) {
    if (!ds || !sampler || !opts || !out)
        return cxs_diagf(diag, CXS_E_INVALID,
                         "GPU utterance loader: dataset, sampler, options and out must not be NULL");
    if (cxs_src_streamed(ds)) return cxs_streamed_refuse(ds, "the GPU utterance loader", diag);
    int rc = CXS_OPTS_CHECK(opts, "cxs_gpu_utt_opts", diag);
    if (rc) return rc;
    rc = check_utt_opts(ds, opts, diag);
    if (rc) return rc;
    cxs_gpu_utt_loader *ul = calloc(1, sizeof *ul);
    if (!ul) return cxs_diagf(diag, -ENOMEM, "out of memory");
    cxs_gpu_opts go;
    memset(&go, 0, sizeof go);
    go.device = opts->device;
    go.mode = CXS_GPU_RESIDENT;
    go.budget_bytes = opts->budget_bytes;
    go.batch_size = 1;
    go.flags = opts->flags; /* CXS_GPU_HOLD too */
    go.out_dtype = opts->out_dtype;
    go.labels = opts->labels;
    go.slots = opts->slots ? opts->slots : 4;
    go.paths = opts->paths;
    go.norm = opts->norm;
    cxs_gpu_loader *l;
    uint64_t budget;
    int prev;
    if ((rc = gpu_loader_new(ds, &go, &l, &budget, &prev, diag))) {
        free(ul);
        return rc;
    }
    const gpu_backend *be = l->be;
    const int dev = l->dev;
    ul->g = l;
    l->mode = CXS_GPU_RESIDENT;
    l->info.mode = CXS_GPU_RESIDENT;
    l->epoch = epoch, l->pos = l->next = start;
    l->ut.sampler = sampler;
    l->ut.cap = cxs_utt_sampler_max_batch(sampler);
    l->ut.max_frames = cxs_utt_sampler_max_frames(sampler);
    l->ut.targets = opts->targets;
    /* every buffer size below fits in size_t, with room for the ring */
    const uint64_t lim = SIZE_MAX / 16 / NSLOT_MAX;
    if (l->ut.max_frames > lim / ((uint64_t)l->D * l->xelem) ||
        (l->ut.targets && l->ds->seq_max > lim / 8 / (l->ut.cap ? l->ut.cap : 1))) {
        rc = gpu_fail(l, CXS_E_RANGE,
                      "GPU utterance loader: batches of up to %llu frames (%u utterances) are "
                      "too large to address: lower the frame budget",
                      (unsigned long long)l->ut.max_frames, l->ut.cap);
        goto fail;
    }
    uint64_t data = gpu_resident_bytes(l), ring = ring_bytes(l);
    if (data + ring > budget) {
        rc = gpu_fail(l, CXS_E_RANGE,
                      "GPU utterance loader: the resident data takes %llu bytes of device memory "
                      "and the batch buffers %llu (3 batches of up to %llu frames), more than "
                      "budget_bytes %llu: give a larger budget, or use the CPU utterance loader",
                      (unsigned long long)data, (unsigned long long)ring,
                      (unsigned long long)l->ut.max_frames, (unsigned long long)budget);
        goto fail;
    }
    snprintf(l->info.reason, sizeof l->info.reason,
             "utterances: resident data %llu bytes, batch buffers %llu, of %llu%s",
             (unsigned long long)data, (unsigned long long)ring, (unsigned long long)budget,
             l->budget_why);
    if ((rc = gpu_loader_streams(l))) goto fail;
    l->ops = &cxs_gpu_utt_mode;
    if ((rc = utt_setup(l))) goto fail;
    *out = ul;
    gpu_device_leave(be, dev, prev);
    return 0;
fail:
    gpu_error_copy(l, rc, diag);
    cxs_gpu_loader_free(l);
    free(ul);
    gpu_device_leave(be, dev, prev);
    return rc;
}

int cxs_gpu_utt_loader_next(cxs_gpu_utt_loader *ul, void *stream, const cxs_gpu_utt_batch **batch) {
    if (!ul || !batch) return CXS_E_INVALID;
    cxs_gpu_loader *l = ul->g;
    const cxs_gpu_batch *fb;
    int rc = cxs_gpu_loader_next(l, stream, &fb);
    if (rc) return rc;
    if (!fb) {
        *batch = NULL;
        return 0;
    }
    const gslot *s = l->handed;
    const utt_meta *m = &l->ut.meta[s - l->slot];
    const gpu_utt *u = &l->ut;
    uint8_t *h = s->h_in, *d = s->d_in;
    cxs_gpu_utt_batch *b = &ul->batch;
    b->x = s->d_x;
    b->lengths = (int64_t *)(void *)(d + off_len(u));
    b->y = l->o.labels ? s->d_y : NULL;
    b->targets = u->targets ? (int64_t *)(void *)(d + off_tgt(u)) : NULL;
    b->target_lengths = u->targets ? (int64_t *)(void *)(d + off_tlen(u)) : NULL;
    b->host_lengths = (const int64_t *)(const void *)(h + off_len(u));
    b->host_target_lengths = u->targets ? (const int64_t *)(const void *)(h + off_tlen(u)) : NULL;
    b->utts = m->utts;
    b->n = s->n;
    b->tmax = m->tmax, b->lmax = m->lmax, b->frames = m->frames;
    b->index = s->position, b->global = m->global;
    *batch = b;
    return 0;
}

int cxs_gpu_utt_loader_next_ex(cxs_gpu_utt_loader *ul, void *stream,
                               const cxs_gpu_utt_batch **batch, cxs_diag *diag) {
    if (!ul || !batch)
        return cxs_diagf(diag, CXS_E_INVALID, "cxs_gpu_utt_loader_next_ex: NULL loader or batch");
    int rc = cxs_gpu_utt_loader_next(ul, stream, batch);
    return rc ? gpu_error_copy(ul->g, rc, diag) : 0;
}

int cxs_gpu_utt_loader_reset(cxs_gpu_utt_loader *ul, uint64_t epoch, uint64_t start) {
    if (!ul) return CXS_E_INVALID;
    uint64_t len;
    int rc = cxs_utt_sampler_length(ul->g->ut.sampler, epoch, NULL, &len);
    if (rc) return gpu_fail(ul->g, rc, "reset: the order of epoch %llu: %s",
                            (unsigned long long)epoch, cxs_strerror(rc));
    if (start > len)
        return gpu_fail(ul->g, CXS_E_INVALID,
                        "reset: start %llu is past this rank's %llu batches of epoch %llu",
                        (unsigned long long)start, (unsigned long long)len,
                        (unsigned long long)epoch);
    return cxs_gpu_loader_reset(ul->g, epoch, start);
}

int cxs_gpu_utt_loader_release(cxs_gpu_utt_loader *ul, const void *x, void *stream) {
    return ul ? cxs_gpu_loader_release(ul->g, x, stream) : CXS_E_INVALID;
}

void cxs_gpu_utt_loader_describe(const cxs_gpu_utt_loader *ul, cxs_gpu_loader_info *info) {
    if (ul) cxs_gpu_loader_describe(ul->g, info);
}

const cxs_diag *cxs_gpu_utt_loader_error(const cxs_gpu_utt_loader *ul) {
    return ul ? cxs_gpu_loader_error(ul->g) : NULL;
}

void cxs_gpu_utt_loader_free(cxs_gpu_utt_loader *ul) {
    if (!ul) return;
    cxs_gpu_loader_free(ul->g);
    free(ul);
}

/* The consumer's place (position.h): this rank's batches left from the
 * one after the last handed out (ut.len: the epoch's, set at each start). */
static void cxs_gpu_utt_loader_place(const cxs_gpu_utt_loader *ul, cxs_place *w) {
    const cxs_gpu_loader *l = ul->g;
    *w = (cxs_place){l->epoch, l->next, 1, 0, l->ut.len > l->next ? l->ut.len - l->next : 0};
}

CXS_POSITION_KIND(gpu_utt_loader, cxs_gpu_utt_loader, CXS_POSITION_UTTERANCES,
                  "GPU utterance loader")
