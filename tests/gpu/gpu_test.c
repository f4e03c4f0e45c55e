/* The GPU loader (ctxshard_gpu.h) against cxs_dataset_gather, frame by
 * frame and bit for bit, in every mode, on float32, float16 and
 * compressed bfloat16 data.
 *
 * usage: gpu_test CTXSHARD_EXE emulate GOLDEN   host emulation: runs
 *                                                everywhere (suite reader)
 *        gpu_test CTXSHARD_EXE cuda GOLDEN      a real device: exit 77 when
 *                                                none (suite cuda)
 * (GOLDEN: tests/golden, whose damaged q8 headers every mode refuses)
 *
 * The same checks run in both modes; only how device memory is read back
 * differs.  The emulation runs the loader's whole logic (rings, events
 * order, pool rounds, uploads) and the kernel's arithmetic (gpu_expand.h)
 * on the host, so the CPU suites test everything but the CUDA calls. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctxshard.h"
#include "ctxshard_gpu.h"
#include "cxs_test.h"

#ifdef CXS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static int device = CXS_GPU_EMULATE;
static void *stream; /* the consumer's stream (a real one on a device) */
static char dir[256];
static char path_f32[300], path_f16[300], path_bf16z[300], path_nolab[300];
static char path_seq32[300], path_seq16[300]; /* frame labels and label sequences */
/* The coded cases walk one variant a mode over q8 alone under
 * CXS_GPU_TEST_QUICK=1 (main: valgrind) and under ThreadSanitizer, where
 * an epoch takes ~20x as long and the full walk alone outlasts the test's
 * limit: the threads they run are the float cases' (feeder, ring, copy
 * streams), and their arithmetic is walked in full by the plain and ASan
 * runs. */
#if defined(__SANITIZE_THREAD__)
#define CODED_LIGHT 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CODED_LIGHT 1
#endif
#endif
#ifndef CODED_LIGHT
#define CODED_LIGHT 0
#endif
static int coded_light = CODED_LIGHT;
static char path_q8[300], path_q16[300];      /* path_seq32's data coded (format 1.4) */
static char path_q8z[300];                     /* path_q8's under zstd */
static char golden[512];                       /* tests/golden: damaged headers */

static void to_host(void *dst, const void *src, size_t n) {
    if (device == CXS_GPU_EMULATE) {
        /* the emulated device runs the batch's work only when something
         * waits for it: the consumer's stream, as a CUDA consumer would */
        ck_assert_int_eq(cxs_gpu_emu_copy_async(dst, src, n, stream), 0);
        ck_assert_msg(cxs_gpu_emu_stream_sync(stream) == 0, "%s", cxs_gpu_emu_fault());
        return;
    }
#ifdef CXS_HAVE_CUDA
    /* ordered after the loader's work: the batch is ready for `stream` */
    ck_assert_int_eq(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, (cudaStream_t)stream), 0);
    ck_assert_int_eq(cudaStreamSynchronize((cudaStream_t)stream), 0);
#endif
}

/* Each test (in its own process: the emulated device's threads do not
 * survive a fork) has a consumer stream of the emulated device, and ends
 * with no fault: a use after free or a buffer refilled under a queued copy
 * found after the loader was freed fails the test that caused it. */
static void emu_setup(void) {
    ck_assert_int_eq(cxs_gpu_emu_stream_create(&stream), 0);
}

static void emu_teardown(void) {
    cxs_gpu_emu_stream_destroy(stream);
    stream = NULL;
    const char *f = cxs_gpu_emu_fault();
    ck_assert_msg(!f, "emulated device fault: %s", f);
}

static uint16_t bf16_rne(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static cxs_dataset *open_ds(const char *p) {
    cxs_dataset *ds;
    cxs_diag d;
    ck_assert_msg(cxs_dataset_open(p, &ds, &d) == 0, "%s", d.message);
    return ds;
}

static cxs_gpu_opts base_opts(uint32_t mode, uint32_t k, uint32_t B) {
    cxs_gpu_opts o;
    memset(&o, 0, sizeof o);
    o.device = device;
    o.mode = mode;
    o.k = k;
    o.batch_size = B;
    o.labels = 1;
    o.threads = 2;
    return o;
}

/* One epoch: every batch equals the CPU gather of its frames; returns the
 * frames served (caller frees) and their count. */
static uint64_t *run_epoch(cxs_dataset *ds, cxs_sampler *s, const cxs_gpu_opts *o,
                           uint64_t epoch, uint64_t start, uint64_t *count, cxs_gpu_loader_info *li) {
    cxs_info info;
    cxs_dataset_info(ds, &info);
    const size_t W = (2 * (size_t)o->k + 1) * info.dim, B = o->batch_size;
    cxs_gpu_loader *l;
    cxs_diag d;
    int rc = cxs_gpu_loader_create(ds, s, o, epoch, start, &l, &d);
    ck_assert_msg(rc == 0, "create: %s (%s)", cxs_strerror(rc), d.message);
    float *ref = malloc(B * W * 4), *got = malloc(B * W * 4);
    uint16_t *got16 = malloc(B * W * 2);
    int64_t *yref = malloc(B * 8), *ygot = malloc(B * 8);
    uint64_t cap = info.num_frames + 1, n = 0, *served = malloc(cap * 8);
    uint64_t expect_pos = start, idx = 0;
    for (;;) {
        const cxs_gpu_batch *b;
        rc = cxs_gpu_loader_next(l, stream, &b);
        ck_assert_msg(rc == 0, "next: %s (%s)", cxs_strerror(rc), cxs_gpu_loader_error(l)->message);
        if (!b) break;
        ck_assert_uint_le(b->n, B);
        ck_assert_uint_eq(b->index, idx++);
        ck_assert_uint_eq(b->position, expect_pos);
        if (o->mode != CXS_GPU_POOL) {
            /* exactly the sampler's order */
            uint64_t *f = malloc(b->n * 8);
            ck_assert_int_eq(cxs_sampler_get(s, epoch, b->position, b->n, f), 0);
            ck_assert(memcmp(f, b->frames, b->n * 8) == 0);
            free(f);
        }
        expect_pos += b->n;
        ck_assert_int_eq(cxs_dataset_gather(ds, b->frames, b->n, o->k, o->flags, 1, ref, yref), 0);
        if (o->out_dtype == CXS_GPU_OUT_BF16) {
            to_host(got16, b->x, b->n * W * 2);
            for (size_t i = 0; i < b->n * W; i++) EXPECT_LOOP(got16[i] == bf16_rne(ref[i]));
        } else {
            to_host(got, b->x, b->n * W * 4);
            ck_assert_msg(memcmp(got, ref, b->n * W * 4) == 0, "batch %llu differs from the CPU gather",
                          (unsigned long long)b->index);
        }
        if (o->labels) {
            to_host(ygot, b->y, b->n * 8);
            ck_assert(memcmp(ygot, yref, b->n * 8) == 0);
        } else {
            ck_assert_ptr_null(b->y);
        }
        ck_assert_uint_le(n + b->n, cap);
        memcpy(served + n, b->frames, b->n * 8);
        n += b->n;
    }
    const cxs_gpu_batch *b;
    ck_assert_int_eq(cxs_gpu_loader_next(l, stream, &b), 0); /* the end stays the end */
    ck_assert_ptr_null(b);
    if (li) cxs_gpu_loader_describe(l, li);
    cxs_gpu_loader_free(l);
    free(ref);
    free(got);
    free(got16);
    free(yref);
    free(ygot);
    *count = n;
    return served;
}

static cxs_sampler *sampler(cxs_dataset *ds, uint32_t kind, uint32_t rank, uint32_t world) {
    cxs_sampler_opts so;
    memset(&so, 0, sizeof so);
    so.kind = kind, so.seed = 7, so.rank = rank, so.world_size = world;
    cxs_sampler *s;
    ck_assert_int_eq(cxs_sampler_create(ds, &so, &s), 0);
    return s;
}

/* A GPU utterance loader over ds (shuffled batches of 6,000 frames, with
 * labels) and, in *us, its sampler, which the caller frees after it. */
static cxs_gpu_utt_loader *utt_loader(cxs_dataset *ds, cxs_utt_sampler **us) {
    cxs_utt_sampler_opts uo;
    memset(&uo, 0, sizeof uo);
    uo.kind = CXS_UTT_SHUFFLE, uo.frame_budget = 6000;
    ck_assert_int_eq(cxs_utt_sampler_create(ds, &uo, us, NULL), 0);
    cxs_gpu_utt_opts go;
    memset(&go, 0, sizeof go);
    go.device = device, go.labels = 1;
    cxs_gpu_utt_loader *ul;
    cxs_diag d;
    ck_assert_msg(cxs_gpu_utt_loader_create(ds, *us, &go, 0, 0, &ul, &d) == 0, "%s", d.message);
    return ul;
}

static void check_modes(const char *p, uint32_t k, uint32_t B, uint32_t flags, uint32_t paths) {
    cxs_dataset *ds = open_ds(p);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    const uint32_t modes[] = {CXS_GPU_RESIDENT, CXS_GPU_STREAM, CXS_GPU_POOL};
    for (size_t m = 0; m < 3; m++) {
        cxs_gpu_opts o = base_opts(modes[m], k, B);
        o.flags = flags;
        o.paths = paths;
        if (modes[m] == CXS_GPU_POOL) /* a pool of 4 segments of ~1/8 of the data */
            o.budget_bytes = info.feature_bytes / 2 + (2u << 20);
        uint64_t n;
        cxs_gpu_loader_info li;
        uint64_t *f = run_epoch(ds, s, &o, 3, 0, &n, &li);
        ck_assert_uint_eq(li.mode, modes[m]);
        ck_assert_uint_eq(n, info.num_frames);
        if (modes[m] == CXS_GPU_POOL) { /* every frame exactly once */
            unsigned char *seen = calloc(info.num_frames, 1);
            for (uint64_t i = 0; i < n; i++) {
                EXPECT_LOOP(f[i] < info.num_frames && !seen[f[i]]);
                seen[f[i]] = 1;
            }
            free(seen);
            /* the pool turned over: a segment holds a fraction of the data */
            ck_assert_uint_gt(li.pool_utterances, 0);
            ck_assert_uint_lt(li.pool_utterances * 4, info.num_utterances);
        }
        if (modes[m] == CXS_GPU_RESIDENT) {
            /* staged when told not to register or compressed; registered
             * in emulation; on a device registering may be refused (then
             * staged, silently); GPUDirect Storage, when asked for and
             * present, may take over */
            if (info.compression || (paths & CXS_GPU_NO_REGISTER))
                ck_assert_uint_ne(li.upload_path, 1);
            else if (device == CXS_GPU_EMULATE && !(paths & CXS_GPU_GDS))
                ck_assert_uint_eq(li.upload_path, 1);
            if (!(paths & CXS_GPU_GDS)) ck_assert_uint_ne(li.upload_path, 2);
            ck_assert_uint_ge(li.uploaded_bytes, info.feature_bytes);
        }
        free(f);
    }
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}

/* The consumer's side of the contract: work it queues on its stream that
 * reads batch k, before it asks for batch k+1, reads batch k's bytes,
 * however late the stream runs it.  Here that work is a copy queued and
 * not waited for; every copy is checked after the epoch.  (On the
 * emulated device, under the late schedule, nothing runs the stream until
 * the loader's reuse of a slot waits for it: a missing ev_consumed wait
 * shows as a later batch's bytes.) */
static void queue_read(void *dst, const void *src, size_t n) {
    if (device == CXS_GPU_EMULATE) {
        ck_assert_int_eq(cxs_gpu_emu_copy_async(dst, src, n, stream), 0);
        return;
    }
#ifdef CXS_HAVE_CUDA
    ck_assert_int_eq(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, (cudaStream_t)stream), 0);
#endif
}

static void consumer_sync(void) {
    if (device == CXS_GPU_EMULATE) {
        ck_assert_msg(cxs_gpu_emu_stream_sync(stream) == 0, "%s", cxs_gpu_emu_fault());
        return;
    }
#ifdef CXS_HAVE_CUDA
    ck_assert_int_eq(cudaStreamSynchronize((cudaStream_t)stream), 0);
#endif
}

TEST(queued_consumer_work_reads_its_batch) {
    cxs_dataset *ds = open_ds(path_f32);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    const uint32_t modes[] = {CXS_GPU_RESIDENT, CXS_GPU_STREAM, CXS_GPU_POOL};
    const uint32_t k = 4, B = 97, NB = 24;
    const size_t W = (2 * (size_t)k + 1) * info.dim;
    float *got = malloc((size_t)NB * B * W * 4), *ref = malloc((size_t)B * W * 4);
    int64_t *ygot = malloc((size_t)NB * B * 8), *yref = malloc((size_t)B * 8);
    uint64_t *frames = malloc((size_t)NB * B * 8);
    size_t *ns = malloc(NB * sizeof *ns);
    for (size_t m = 0; m < 3; m++) {
        cxs_gpu_opts o = base_opts(modes[m], k, B);
        if (modes[m] == CXS_GPU_POOL) o.budget_bytes = info.feature_bytes / 2 + (2u << 20);
        cxs_gpu_loader *l;
        cxs_diag d;
        ck_assert_msg(cxs_gpu_loader_create(ds, s, &o, 1, 0, &l, &d) == 0, "%s", d.message);
        uint32_t nb = 0;
        for (; nb < NB; nb++) {
            const cxs_gpu_batch *b;
            ck_assert_msg(cxs_gpu_loader_next(l, stream, &b) == 0, "%s", cxs_gpu_loader_error(l)->message);
            if (!b) break;
            ns[nb] = b->n;
            memcpy(frames + (size_t)nb * B, b->frames, b->n * 8); /* host: valid until next */
            queue_read(got + (size_t)nb * B * W, b->x, b->n * W * 4);
            queue_read(ygot + (size_t)nb * B, b->y, b->n * 8);
        }
        ck_assert_uint_eq(nb, NB);
        consumer_sync();
        for (uint32_t i = 0; i < nb; i++) {
            ck_assert_int_eq(cxs_dataset_gather(ds, frames + (size_t)i * B, ns[i], k, 0, 1, ref, yref), 0);
            ck_assert_msg(memcmp(got + (size_t)i * B * W, ref, ns[i] * W * 4) == 0,
                          "mode %u: batch %u as the consumer's queued work read it differs", modes[m], i);
            ck_assert(memcmp(ygot + (size_t)i * B, yref, ns[i] * 8) == 0);
        }
        cxs_gpu_loader_free(l);
    }
    /* the same for whole-utterance batches */
    cxs_utt_sampler_opts uo;
    memset(&uo, 0, sizeof uo);
    uo.kind = CXS_UTT_SHUFFLE, uo.seed = 3, uo.frame_budget = 4000;
    cxs_utt_sampler *us;
    cxs_dataset *sq = open_ds(path_seq32);
    cxs_dataset_info(sq, &info);
    ck_assert_int_eq(cxs_utt_sampler_create(sq, &uo, &us, NULL), 0);
    cxs_gpu_utt_opts go;
    memset(&go, 0, sizeof go);
    go.device = device, go.labels = 1, go.targets = 1;
    cxs_gpu_utt_loader *gl;
    cxs_diag d;
    ck_assert_msg(cxs_gpu_utt_loader_create(sq, us, &go, 0, 0, &gl, &d) == 0, "%s", d.message);
    cxs_utt_loader_opts co;
    memset(&co, 0, sizeof co);
    co.labels = 1, co.targets = 1, co.threads = 1;
    cxs_utt_loader *cl;
    ck_assert_msg(cxs_utt_loader_create_ex(sq, us, &co, 0, 0, &cl, &d) == 0, "%s", d.message);
    const size_t cap = 4000 * info.dim;
    float *ux = malloc(NB * cap * 4);
    int64_t *uy = malloc(NB * 4000 * 8);
    size_t *un = malloc(NB * sizeof *un);
    uint32_t nb = 0;
    for (; nb < NB; nb++) {
        const cxs_gpu_utt_batch *b;
        ck_assert_int_eq(cxs_gpu_utt_loader_next(gl, stream, &b), 0);
        if (!b) break;
        un[nb] = b->n * b->tmax;
        queue_read(ux + nb * cap, b->x, un[nb] * info.dim * 4);
        queue_read(uy + nb * 4000, b->y, un[nb] * 8);
    }
    ck_assert_uint_ge(nb, 4);
    consumer_sync();
    for (uint32_t i = 0; i < nb; i++) {
        const cxs_utt_batch *c;
        ck_assert_int_eq(cxs_utt_loader_next(cl, &c), 0);
        ck_assert_ptr_nonnull(c);
        ck_assert_uint_eq(c->n * c->tmax, un[i]);
        ck_assert_msg(memcmp(ux + i * cap, c->x, un[i] * info.dim * 4) == 0,
                      "utterance batch %u as the consumer's queued work read it differs", i);
        ck_assert(memcmp(uy + i * 4000, c->y, un[i] * 8) == 0);
    }
    cxs_utt_loader_free(cl);
    cxs_gpu_utt_loader_free(gl);
    cxs_utt_sampler_free(us);
    cxs_dataset_close(sq);
    free(ux), free(uy), free(un);
    free(got), free(ref), free(ygot), free(yref), free(frames), free(ns);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

/* A consumer that queues its work on batch k on the stream it passed for
 * batch k, and switches streams between batches: each batch's reuse
 * waits for the work on its own stream (its consumption fence is recorded
 * there, not on the next call's stream). */
TEST(consumer_switching_streams_reads_its_batches) {
    cxs_dataset *ds = open_ds(path_f32);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    const uint32_t modes[] = {CXS_GPU_RESIDENT, CXS_GPU_STREAM, CXS_GPU_POOL};
    const uint32_t k = 2, B = 61, NB = 20;
    const size_t W = (2 * (size_t)k + 1) * info.dim;
    void *other = stream;
    if (device == CXS_GPU_EMULATE) ck_assert_int_eq(cxs_gpu_emu_stream_create(&other), 0);
#ifdef CXS_HAVE_CUDA
    else ck_assert_int_eq(cudaStreamCreate((cudaStream_t *)&other), 0);
#endif
    void *const streams[2] = {stream, other};
    float *got = malloc((size_t)NB * B * W * 4), *ref = malloc((size_t)B * W * 4);
    uint64_t *frames = malloc((size_t)NB * B * 8);
    size_t ns[20];
    for (size_t m = 0; m < 3; m++) {
        cxs_gpu_opts o = base_opts(modes[m], k, B);
        o.labels = 0;
        if (modes[m] == CXS_GPU_POOL) o.budget_bytes = info.feature_bytes / 2 + (2u << 20);
        cxs_gpu_loader *l;
        cxs_diag d;
        ck_assert_msg(cxs_gpu_loader_create(ds, s, &o, 2, 0, &l, &d) == 0, "%s", d.message);
        for (uint32_t nb = 0; nb < NB; nb++) {
            void *st = streams[nb % 2];
            const cxs_gpu_batch *b;
            ck_assert_msg(cxs_gpu_loader_next(l, st, &b) == 0, "%s", cxs_gpu_loader_error(l)->message);
            ck_assert_ptr_nonnull(b);
            ns[nb] = b->n;
            memcpy(frames + (size_t)nb * B, b->frames, b->n * 8);
            if (device == CXS_GPU_EMULATE)
                ck_assert_int_eq(cxs_gpu_emu_copy_async(got + (size_t)nb * B * W, b->x, b->n * W * 4, st), 0);
#ifdef CXS_HAVE_CUDA
            else
                ck_assert_int_eq(cudaMemcpyAsync(got + (size_t)nb * B * W, b->x, b->n * W * 4,
                                                 cudaMemcpyDeviceToHost, (cudaStream_t)st), 0);
#endif
        }
        for (int i = 0; i < 2; i++) {
            if (device == CXS_GPU_EMULATE)
                ck_assert_msg(cxs_gpu_emu_stream_sync(streams[i]) == 0, "%s", cxs_gpu_emu_fault());
#ifdef CXS_HAVE_CUDA
            else
                ck_assert_int_eq(cudaStreamSynchronize((cudaStream_t)streams[i]), 0);
#endif
        }
        for (uint32_t i = 0; i < NB; i++) {
            ck_assert_int_eq(cxs_dataset_gather(ds, frames + (size_t)i * B, ns[i], k, 0, 1, ref, NULL), 0);
            ck_assert_msg(memcmp(got + (size_t)i * B * W, ref, ns[i] * W * 4) == 0,
                          "mode %u: batch %u, read on the stream it was handed to, differs "
                          "(refilled before that stream's work ran)", modes[m], i);
        }
        cxs_gpu_loader_free(l);
    }
    if (device == CXS_GPU_EMULATE) cxs_gpu_emu_stream_destroy(other);
#ifdef CXS_HAVE_CUDA
    else cudaStreamDestroy((cudaStream_t)other);
#endif
    free(got);
    free(ref);
    free(frames);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

/* The default budget leaves training room: half the device's total
 * memory at most (and 80% of its free memory), and the reason says which
 * budget was taken and why. */
TEST(default_budget_leaves_room) {
    cxs_dataset *ds = open_ds(path_f32);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    cxs_gpu_probe_info pi;
    ck_assert_int_eq(cxs_gpu_probe(device, &pi), 0);
    cxs_gpu_opts o = base_opts(CXS_GPU_RESIDENT, 1, 64);
    cxs_gpu_loader *l;
    cxs_diag d;
    ck_assert_msg(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d) == 0, "%s", d.message);
    cxs_gpu_loader_info li;
    cxs_gpu_loader_describe(l, &li);
    unsigned long long need = 0, budget = 0;
    ck_assert_msg(sscanf(li.reason, "resident: %llu bytes of %llu", &need, &budget) == 2, "%s",
                  li.reason);
    ck_assert_msg(strstr(li.reason, "(the default: "), "%s", li.reason);
    ck_assert_uint_le(budget, pi.total_bytes / 2);
    ck_assert_uint_le(need, budget);
    cxs_gpu_loader_free(l);
    o.budget_bytes = 12345678;
    ck_assert_msg(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d) == 0, "%s", d.message);
    cxs_gpu_loader_describe(l, &li);
    ck_assert_msg(strstr(li.reason, "of 12345678") && !strstr(li.reason, "default"), "%s", li.reason);
    cxs_gpu_loader_free(l);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

/* Every host wait of the loaders is on an event that blocks (on a device:
 * cudaEventBlockingSync), never one that spins a core the CPU workers
 * need: the emulation counts waits on the others. */
TEST(host_waits_block) {
    if (device != CXS_GPU_EMULATE) return; /* the count is the emulation's */
    cxs_dataset *ds = open_ds(path_f32);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    const uint32_t modes[] = {CXS_GPU_RESIDENT, CXS_GPU_STREAM, CXS_GPU_POOL};
    const uint64_t before = cxs_gpu_emu_spin_waits();
    for (size_t m = 0; m < 3; m++) {
        cxs_gpu_opts o = base_opts(modes[m], 3, 211);
        o.paths = CXS_GPU_NO_REGISTER; /* the staged upload waits too */
        if (modes[m] == CXS_GPU_POOL) o.budget_bytes = info.feature_bytes / 2 + (2u << 20);
        uint64_t n;
        free(run_epoch(ds, s, &o, 0, 0, &n, NULL));
        ck_assert_uint_eq(n, info.num_frames);
        ck_assert_msg(cxs_gpu_emu_spin_waits() == before,
                      "mode %u: %llu host waits spun on a non-blocking event", modes[m],
                      (unsigned long long)(cxs_gpu_emu_spin_waits() - before));
    }
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

/* A launch reports its own error, read from the runtime's last error
 * (cudaGetLastError), never a failure the library met and ignored before
 * (a free or an unregister whose error it cannot act on); and a launch
 * that fails is reported. */
TEST(launch_errors_are_the_launchs_own) {
    if (device != CXS_GPU_EMULATE) return; /* injected failures are the emulation's */
    cxs_dataset *ds = open_ds(path_f32);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    cxs_gpu_opts o = base_opts(CXS_GPU_RESIDENT, 2, 64);
    cxs_gpu_loader_info li;
    uint64_t n;
    /* the registered upload's first unregister, then the staged one's
     * first free (its staging buffers), fail: both ignored by the library */
    const int kinds[] = {CXS_GPU_EMU_FAIL_UNREGISTER, CXS_GPU_EMU_FAIL_FREE};
    for (size_t i = 0; i < 2; i++) {
        o.paths = i ? CXS_GPU_NO_REGISTER : 0;
        ck_assert_int_eq(cxs_gpu_emu_fail(kinds[i], 1), 0);
        free(run_epoch(ds, s, &o, 0, 0, &n, &li));
        ck_assert_uint_eq(n, info.num_frames);
        ck_assert_uint_eq(li.upload_path, i ? 0 : 1);
    }
    /* a free that fails between two loaders' launches */
    cxs_gpu_loader *a, *b;
    cxs_diag d;
    ck_assert_msg(cxs_gpu_loader_create(ds, s, &o, 0, 0, &a, &d) == 0, "%s", d.message);
    ck_assert_msg(cxs_gpu_loader_create(ds, s, &o, 0, 0, &b, &d) == 0, "%s", d.message);
    const cxs_gpu_batch *x;
    ck_assert_int_eq(cxs_gpu_loader_next(a, stream, &x), 0);
    ck_assert_int_eq(cxs_gpu_emu_fail(CXS_GPU_EMU_FAIL_FREE, 1), 0);
    cxs_gpu_loader_free(a);
    int rc = cxs_gpu_loader_next(b, stream, &x);
    ck_assert_msg(rc == 0 && x, "a good launch failed: %s", cxs_gpu_loader_error(b)->message);
    /* a launch that fails is reported, naming the launch */
    ck_assert_int_eq(cxs_gpu_emu_fail(CXS_GPU_EMU_FAIL_LAUNCH, 1), 0);
    rc = cxs_gpu_loader_next(b, stream, &x);
    if (rc == 0) rc = cxs_gpu_loader_next(b, stream, &x); /* (one batch ahead) */
    ck_assert_int_eq(rc, CXS_E_DEVICE);
    ck_assert_msg(strstr(cxs_gpu_loader_error(b)->message, "kernel launch refused") &&
                  strstr(cxs_gpu_loader_error(b)->message, "expand"),
                  "%s", cxs_gpu_loader_error(b)->message);
    cxs_gpu_loader_free(b);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

/* A registration of the mapping that is refused (the system's limit on
 * locked memory, or a range the program registered itself: CUDA refuses
 * overlaps) at the first piece or after some were copied: the rest is
 * uploaded through pinned staging, nothing twice, and the data is exact. */
TEST(refused_registration_falls_back) {
    if (device != CXS_GPU_EMULATE) return; /* injected failures are the emulation's */
    cxs_dataset *ds = open_ds(path_f32);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    ck_assert_uint_ge(info.num_shards, 3);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    cxs_gpu_opts o = base_opts(CXS_GPU_RESIDENT, 2, 64);
    cxs_gpu_loader_info whole, li;
    uint64_t n;
    free(run_epoch(ds, s, &o, 0, 0, &n, &whole));
    ck_assert_uint_eq(whole.upload_path, 1);
    for (uint64_t nth = 1; nth <= 3; nth++) {
        ck_assert_int_eq(cxs_gpu_emu_fail(CXS_GPU_EMU_FAIL_REGISTER, nth), 0);
        free(run_epoch(ds, s, &o, 0, 0, &n, &li));
        ck_assert_uint_eq(n, info.num_frames);
        ck_assert_uint_eq(li.upload_path, 0);
        ck_assert_msg(li.uploaded_bytes == whole.uploaded_bytes,
                      "registration refused at piece %llu: %llu bytes uploaded, %llu without",
                      (unsigned long long)nth, (unsigned long long)li.uploaded_bytes,
                      (unsigned long long)whole.uploaded_bytes);
    }
    ck_assert_int_eq(cxs_gpu_emu_fail(CXS_GPU_EMU_FAIL_REGISTER, 0), 0);
    /* the program registered a page of the last shard's features itself */
    const void *w;
    ck_assert_int_eq(cxs_dataset_window(ds, info.num_frames - 1, 0, &w), 0);
    const long page = sysconf(_SC_PAGESIZE);
    void *pg = (void *)((uintptr_t)w - (uintptr_t)w % (uintptr_t)page);
    ck_assert_int_eq(cxs_gpu_emu_host_register(pg, (size_t)page), 0);
    ck_assert_int_eq(cxs_gpu_emu_host_register(pg, 1), -EEXIST); /* overlaps: refused */
    free(run_epoch(ds, s, &o, 0, 0, &n, &li));
    ck_assert_uint_eq(n, info.num_frames);
    ck_assert_uint_eq(li.upload_path, 0);
    ck_assert_uint_eq(li.uploaded_bytes, whole.uploaded_bytes);
    cxs_gpu_emu_host_unregister(pg);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

/* Under a limit on pinned host memory (a container's memlock limit), the
 * loaders that need pinned buffers fail at create with a message that
 * says what was asked and that the limit is the cause. */
TEST(pinned_memory_limit_is_named) {
    if (device != CXS_GPU_EMULATE) return; /* the limit is the emulation's */
    cxs_dataset *ds = open_ds(path_f32);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    ck_assert_int_eq(setenv("CXS_GPU_EMU_PINNED", "64K", 1), 0);
    cxs_gpu_opts o = base_opts(CXS_GPU_STREAM, 3, 1024); /* a staging buffer > 64K */
    cxs_gpu_loader *l = NULL;
    cxs_diag d;
    ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d), CXS_E_DEVICE);
    ck_assert_msg(strstr(d.message, "pinned host memory for the stream mode's staging ring") &&
                  strstr(d.message, "limit of 65536 bytes") &&
                  strstr(d.message, "limit on page-locked host memory"), "%s", d.message);
    ck_assert_ptr_null(l);
    /* the utterance loader: its upload's staging, or its batches' lists */
    cxs_utt_sampler *us;
    cxs_utt_sampler_opts uo;
    memset(&uo, 0, sizeof uo);
    uo.kind = CXS_UTT_SHUFFLE, uo.seed = 3, uo.frame_budget = 4000;
    ck_assert_int_eq(cxs_utt_sampler_create(ds, &uo, &us, &d), 0);
    ck_assert_int_eq(setenv("CXS_GPU_EMU_PINNED", "1K", 1), 0);
    cxs_gpu_utt_opts go;
    memset(&go, 0, sizeof go);
    go.device = CXS_GPU_EMULATE;
    go.paths = CXS_GPU_NO_REGISTER;
    cxs_gpu_utt_loader *gl = NULL;
    ck_assert_int_eq(cxs_gpu_utt_loader_create(ds, us, &go, 0, 0, &gl, &d), CXS_E_DEVICE);
    ck_assert_msg(strstr(d.message, "pinned host memory for ") &&
                  strstr(d.message, "limit of 1024 bytes"), "%s", d.message);
    ck_assert_ptr_null(gl);
    ck_assert_int_eq(unsetenv("CXS_GPU_EMU_PINNED"), 0);
    cxs_utt_sampler_free(us);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

/* A child forked after the device was used cannot use it (a CUDA context
 * does not survive fork: every call fails with cudaErrorInitializationError);
 * the loader says so, and the parent goes on unharmed. */
TEST(forked_child_is_refused) {
    if (device != CXS_GPU_EMULATE) return; /* a device's child would hang or crash */
    cxs_dataset *ds = open_ds(path_f32);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    cxs_gpu_opts o = base_opts(CXS_GPU_RESIDENT, 1, 64);
    cxs_gpu_loader *l;
    cxs_diag d;
    ck_assert_msg(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d) == 0, "%s", d.message);
    const cxs_gpu_batch *b;
    ck_assert_int_eq(cxs_gpu_loader_next(l, stream, &b), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        alarm(60); /* a bound for a child that waits on threads it does not have */
        int rc = cxs_gpu_loader_next(l, stream, &b);
        const char *m = cxs_gpu_loader_error(l)->message;
        const int ok = rc == CXS_E_DEVICE && strstr(m, "forked") && strstr(m, "fork()");
        cxs_gpu_loader_free(l); /* (the parent's: the child lets it be) */
        _exit(ok ? 0 : 1);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's next(): status %d", st);
    uint64_t got = 0;
    do {
        ck_assert_int_eq(cxs_gpu_loader_next(l, stream, &b), 0);
        got += b ? b->n : 0;
    } while (b);
    ck_assert_uint_gt(got, 0);
    cxs_gpu_loader_free(l);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

/* (a fork of a process with the loader's threads: left out where
 * ThreadSanitizer runs the suite, CXS_TEST_NO_FORK=all) */
static int gpu_forks(const TTest *t) {
    return t == forked_child_is_refused ? CXS_FORK_ANY : CXS_FORK_NONE;
}

/* A loader on emulated device 1 leaves the calling thread on the device
 * it was on, through every entry point (as a CUDA loader must: the
 * runtime's current device is the caller's). */
TEST(caller_device_is_kept) {
    if (device != CXS_GPU_EMULATE) return; /* one device: nothing to switch */
    cxs_dataset *ds = open_ds(path_f32);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    const uint32_t modes[] = {CXS_GPU_RESIDENT, CXS_GPU_STREAM, CXS_GPU_POOL};
    ck_assert_int_eq(cxs_gpu_emu_set_device(0), 0);
    cxs_gpu_probe_info pi;
    ck_assert_int_eq(cxs_gpu_probe(CXS_GPU_EMULATE_DEVICE(1), &pi), 0);
    ck_assert_int_eq(cxs_gpu_emu_device(), 0);
    ck_assert_int_eq(cxs_gpu_probe(CXS_GPU_EMULATE_DEVICE(CXS_GPU_EMU_DEVICES), &pi),
                     CXS_E_UNSUPPORTED);
    for (size_t m = 0; m < 3; m++) {
        cxs_gpu_opts o = base_opts(modes[m], 1, 64);
        o.device = CXS_GPU_EMULATE_DEVICE(1);
        o.flags = CXS_GPU_HOLD;
        if (modes[m] == CXS_GPU_POOL) o.budget_bytes = info.feature_bytes / 2 + (2u << 20);
        cxs_gpu_loader *l;
        cxs_diag d;
        ck_assert_msg(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d) == 0, "%s", d.message);
        ck_assert_msg(cxs_gpu_emu_device() == 0, "mode %u: create left the caller on device %d",
                      modes[m], cxs_gpu_emu_device());
        const cxs_gpu_batch *b;
        ck_assert_int_eq(cxs_gpu_loader_next(l, stream, &b), 0);
        ck_assert_msg(cxs_gpu_emu_device() == 0, "mode %u: next left the caller on device %d",
                      modes[m], cxs_gpu_emu_device());
        int64_t y;
        ck_assert_int_eq(cxs_gpu_loader_download(l, stream, b->y, &y, 8), 0);
        ck_assert_int_eq(cxs_gpu_emu_device(), 0);
        ck_assert_int_eq(cxs_gpu_loader_release(l, b->x, stream), 0);
        ck_assert_int_eq(cxs_gpu_emu_device(), 0);
        ck_assert_int_eq(cxs_gpu_loader_reset(l, 1, 0), 0);
        ck_assert_msg(cxs_gpu_emu_device() == 0, "mode %u: reset left the caller on device %d",
                      modes[m], cxs_gpu_emu_device());
        ck_assert_int_eq(cxs_gpu_emu_set_device(2), 0);
        cxs_gpu_loader_free(l);
        ck_assert_msg(cxs_gpu_emu_device() == 2, "mode %u: free left the caller on device %d",
                      modes[m], cxs_gpu_emu_device());
        ck_assert_int_eq(cxs_gpu_emu_set_device(0), 0);
    }
    /* the utterance loader */
    cxs_utt_sampler_opts uo;
    memset(&uo, 0, sizeof uo);
    uo.kind = CXS_UTT_SHUFFLE, uo.seed = 3, uo.frame_budget = 4000;
    cxs_dataset *sq = open_ds(path_seq32);
    cxs_utt_sampler *us;
    ck_assert_int_eq(cxs_utt_sampler_create(sq, &uo, &us, NULL), 0);
    cxs_gpu_utt_opts go;
    cxs_gpu_utt_opts_init(&go);
    go.device = CXS_GPU_EMULATE_DEVICE(3);
    cxs_gpu_utt_loader *gl;
    cxs_diag d;
    ck_assert_msg(cxs_gpu_utt_loader_create(sq, us, &go, 0, 0, &gl, &d) == 0, "%s", d.message);
    ck_assert_int_eq(cxs_gpu_emu_device(), 0);
    const cxs_gpu_utt_batch *ub;
    ck_assert_int_eq(cxs_gpu_utt_loader_next(gl, stream, &ub), 0);
    ck_assert_int_eq(cxs_gpu_emu_device(), 0);
    cxs_gpu_utt_loader_free(gl);
    ck_assert_int_eq(cxs_gpu_emu_device(), 0);
    cxs_utt_sampler_free(us);
    cxs_dataset_close(sq);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

/* CXS_GPU_HOLD: batches the caller holds are never refilled, however many
 * (the ring grows), in any order of release; past what may be made, next()
 * answers -EBUSY until one is given back. */
TEST(held_batches_are_never_refilled) {
    cxs_dataset *ds = open_ds(path_f32);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    const uint32_t modes[] = {CXS_GPU_RESIDENT, CXS_GPU_STREAM, CXS_GPU_POOL};
    const uint32_t k = 1, B = 53, NB = 24;
    const size_t W = (2 * (size_t)k + 1) * info.dim;
    float *got = malloc((size_t)B * W * 4), *ref = malloc((size_t)B * W * 4);
    for (size_t m = 0; m < 3; m++) {
        cxs_gpu_opts o = base_opts(modes[m], k, B);
        o.labels = 0;
        o.flags = CXS_GPU_HOLD;
        if (modes[m] == CXS_GPU_POOL) o.budget_bytes = info.feature_bytes / 2 + (2u << 20);
        cxs_gpu_loader *l;
        cxs_diag d;
        ck_assert_msg(cxs_gpu_loader_create(ds, s, &o, 4, 0, &l, &d) == 0, "%s", d.message);
        const void *x[24];
        uint64_t frames[24][53];
        size_t ns[24];
        uint32_t held = 0;
        int rc = 0;
        for (; held < NB; held++) { /* hold them all: the ring grows */
            const cxs_gpu_batch *b;
            rc = cxs_gpu_loader_next(l, stream, &b);
            if (rc) break;
            ck_assert_ptr_nonnull(b);
            x[held] = b->x, ns[held] = b->n;
            memcpy(frames[held], b->frames, b->n * 8);
            for (uint32_t i = 0; i < held; i++) ck_assert_ptr_ne(x[i], b->x);
        }
        /* 16 buffers whatever the budget; more where it has room (resident,
         * stream), none in the pool, which takes its whole budget */
        if (modes[m] == CXS_GPU_POOL) {
            ck_assert_int_eq(rc, -EBUSY);
            ck_assert_uint_eq(held, 16); /* 16 buffers, all held */
            ck_assert_ptr_nonnull(strstr(cxs_gpu_loader_error(l)->message, "holds all"));
        } else {
            ck_assert_msg(rc == 0, "%s", cxs_gpu_loader_error(l)->message);
        }
        for (uint32_t i = 0; i < held; i++) { /* every batch held still holds its data */
            ck_assert_int_eq(cxs_dataset_gather(ds, frames[i], ns[i], k, 0, 1, ref, NULL), 0);
            to_host(got, x[i], ns[i] * W * 4);
            ck_assert_msg(memcmp(got, ref, ns[i] * W * 4) == 0,
                          "mode %u: held batch %u was refilled", modes[m], i);
        }
        /* given back out of order, from the middle; then the loader goes on */
        for (uint32_t i = held / 2; i < held; i++) ck_assert_int_eq(cxs_gpu_loader_release(l, x[i], stream), 0);
        ck_assert_int_eq(cxs_gpu_loader_release(l, x[held - 1], stream), CXS_E_INVALID);
        for (uint32_t i = 0; i < held / 2; i++) ck_assert_int_eq(cxs_gpu_loader_release(l, x[i], stream), 0);
        const cxs_gpu_batch *b;
        ck_assert_msg(cxs_gpu_loader_next(l, stream, &b) == 0, "%s", cxs_gpu_loader_error(l)->message);
        ck_assert_ptr_nonnull(b);
        ck_assert_int_eq(cxs_dataset_gather(ds, b->frames, b->n, k, 0, 1, ref, NULL), 0);
        to_host(got, b->x, b->n * W * 4);
        ck_assert(memcmp(got, ref, b->n * W * 4) == 0);
        cxs_gpu_loader_free(l); /* with a batch still held: free waits for it */
    }
    free(got);
    free(ref);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

/* A loader freed while its work and the consumer's are still queued: free
 * waits for them before the memory goes (the emulated device faults on
 * work that runs on freed memory; the teardown checks). */
TEST(free_with_work_queued) {
    cxs_dataset *ds = open_ds(path_f32);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    const uint32_t modes[] = {CXS_GPU_RESIDENT, CXS_GPU_STREAM, CXS_GPU_POOL};
    const size_t W = 5 * info.dim;
    float *sink = malloc(64 * W * 4 * 2);
    for (size_t m = 0; m < 3; m++) {
        cxs_gpu_opts o = base_opts(modes[m], 2, 64);
        if (modes[m] == CXS_GPU_POOL) o.budget_bytes = info.feature_bytes / 2 + (2u << 20);
        cxs_gpu_loader *l;
        cxs_diag d;
        ck_assert_msg(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d) == 0, "%s", d.message);
        for (int i = 0; i < 2; i++) {
            const cxs_gpu_batch *b;
            ck_assert_int_eq(cxs_gpu_loader_next(l, stream, &b), 0);
            queue_read(sink + i * 64 * W, b->x, b->n * W * 4);
        }
        cxs_gpu_loader_free(l);
        consumer_sync();
    }
    free(sink);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

TEST(modes_f32) { check_modes(path_f32, 12, 37, 0, 0); }
END_TEST_
TEST(modes_f32_normalized_staged) { check_modes(path_f32, 3, 64, CXS_GATHER_NORMALIZE, CXS_GPU_NO_REGISTER); }
END_TEST_
TEST(modes_f16_wide_context) { check_modes(path_f16, 30, 50, 0, CXS_GPU_GDS); }
END_TEST_
TEST(modes_bf16_compressed) { check_modes(path_bf16z, 9, 41, CXS_GATHER_NORMALIZE, 0); }
END_TEST_

TEST(bf16_output_and_drop_last) {
    cxs_dataset *ds = open_ds(path_f32);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SEQUENTIAL, 0, 1);
    cxs_gpu_opts o = base_opts(CXS_GPU_RESIDENT, 4, 100);
    o.out_dtype = CXS_GPU_OUT_BF16;
    o.drop_last = 1;
    uint64_t n;
    free(run_epoch(ds, s, &o, 0, 0, &n, NULL));
    ck_assert_uint_eq(n, info.num_frames / 100 * 100);
    cxs_sampler_free(s);
    /* pool mode with bfloat16 output and labels off */
    s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    o = base_opts(CXS_GPU_POOL, 4, 100);
    o.out_dtype = CXS_GPU_OUT_BF16;
    o.labels = 0;
    o.pool_segments = 5;
    o.budget_bytes = info.feature_bytes / 3 + (2u << 20);
    free(run_epoch(ds, s, &o, 1, 0, &n, NULL));
    ck_assert_uint_eq(n, info.num_frames);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

TEST(resume_and_reset) {
    /* stream and resident resume at a position exactly (run_epoch checks
     * the positions against the sampler); a reset restarts cleanly */
    cxs_dataset *ds = open_ds(path_f16);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    const uint32_t modes[] = {CXS_GPU_RESIDENT, CXS_GPU_STREAM};
    for (int m = 0; m < 2; m++) {
        cxs_gpu_opts o = base_opts(modes[m], 6, 64);
        uint64_t n, start = info.num_frames / 2 + 3;
        free(run_epoch(ds, s, &o, 2, start, &n, NULL));
        ck_assert_uint_eq(n, info.num_frames - start);
        cxs_gpu_loader *l;
        ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, NULL), 0);
        const cxs_gpu_batch *b;
        for (int i = 0; i < 5; i++) ck_assert_int_eq(cxs_gpu_loader_next(l, stream, &b), 0);
        ck_assert_int_eq(cxs_gpu_loader_reset(l, 4, 128), 0);
        ck_assert_int_eq(cxs_gpu_loader_next(l, stream, &b), 0);
        ck_assert_uint_eq(b->position, 128);
        ck_assert_uint_eq(b->index, 0);
        uint64_t f[64];
        ck_assert_int_eq(cxs_sampler_get(s, 4, 128, 64, f), 0);
        ck_assert(memcmp(f, b->frames, sizeof f) == 0);
        cxs_gpu_loader_free(l); /* mid-epoch, batches in flight */
    }
    /* pool: a reset starts the next epoch over, every frame once again */
    cxs_gpu_opts o = base_opts(CXS_GPU_POOL, 6, 64);
    o.budget_bytes = info.feature_bytes / 2 + (2u << 20);
    cxs_gpu_loader *l;
    ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, NULL), 0);
    const cxs_gpu_batch *b;
    for (int i = 0; i < 7; i++) ck_assert_int_eq(cxs_gpu_loader_next(l, stream, &b), 0);
    ck_assert_int_eq(cxs_gpu_loader_reset(l, 1, info.num_frames + 1), CXS_E_INVALID);
    ck_assert_int_eq(cxs_gpu_loader_reset(l, 1, 0), 0);
    unsigned char *seen = calloc(info.num_frames, 1);
    uint64_t n = 0;
    while (cxs_gpu_loader_next(l, stream, &b) == 0 && b) {
        for (size_t i = 0; i < b->n; i++) {
            EXPECT_LOOP(!seen[b->frames[i]]);
            seen[b->frames[i]] = 1;
        }
        n += b->n;
    }
    ck_assert_uint_eq(n, info.num_frames);
    free(seen);
    cxs_gpu_loader_free(l);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

TEST(pool_resume_mid_epoch) {
    /* the pool's order is the block schedule's, stateless: created or
     * reset at any position (mid-round, mid-batch), it serves exactly the
     * rest of the uninterrupted epoch, every batch checked against the CPU
     * gather, and nothing it has drained is uploaded again */
    cxs_dataset *ds = open_ds(path_f16);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    cxs_gpu_opts o = base_opts(CXS_GPU_POOL, 6, 64);
    o.budget_bytes = info.feature_bytes / 3 + (2u << 20);
    uint64_t n, m;
    cxs_gpu_loader_info whole, rest;
    uint64_t *all = run_epoch(ds, s, &o, 2, 0, &n, &whole);
    ck_assert_uint_eq(n, info.num_frames);
    const uint64_t starts[] = {1, info.num_frames / 3 + 17, info.num_frames - 5, info.num_frames};
    for (int i = 0; i < 4; i++) {
        uint64_t *f = run_epoch(ds, s, &o, 2, starts[i], &m, &rest);
        ck_assert_uint_eq(m, n - starts[i]);
        ck_assert(memcmp(f, all + starts[i], m * 8) == 0);
        if (i == 2) ck_assert_uint_lt(rest.uploaded_bytes, whole.uploaded_bytes / 2);
        free(f);
    }
    /* reset mid-epoch into another epoch, then back */
    cxs_gpu_loader *l;
    const cxs_gpu_batch *b;
    ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 5, 0, &l, NULL), 0);
    for (int i = 0; i < 9; i++) ck_assert_int_eq(cxs_gpu_loader_next(l, stream, &b), 0);
    const uint64_t at = info.num_frames / 2 + 3;
    ck_assert_int_eq(cxs_gpu_loader_reset(l, 2, at), 0);
    uint64_t got = 0;
    while (cxs_gpu_loader_next(l, stream, &b) == 0 && b) {
        if (got == 0) ck_assert_uint_eq(b->position, at);
        ck_assert(memcmp(b->frames, all + at + got, b->n * 8) == 0);
        got += b->n;
    }
    ck_assert_uint_eq(got, n - at);
    cxs_gpu_loader_free(l);
    free(all);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

/* A pool epoch of rank `rank` of `world`, every epoch starting at global
 * position `origin`. */
static uint64_t *pool_rank_epoch(cxs_dataset *ds, uint32_t rank, uint32_t world, uint64_t origin,
                                 uint64_t start, uint64_t *count) {
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler_opts so;
    memset(&so, 0, sizeof so);
    so.kind = CXS_SAMPLER_SHUFFLE, so.seed = 7, so.rank = rank, so.world_size = world;
    so.origin = origin;
    cxs_sampler *s;
    ck_assert_int_eq(cxs_sampler_create(ds, &so, &s), 0);
    cxs_gpu_opts o = base_opts(CXS_GPU_POOL, 2, 33);
    o.budget_bytes = info.feature_bytes / 4 + (2u << 20);
    uint64_t *f = run_epoch(ds, s, &o, 5, start, count, NULL);
    cxs_sampler_free(s);
    return f;
}

TEST(pool_ranks) {
    /* rank r of w serves positions r, r+w, ... of the one global order,
     * the same number of samples on every rank (the last (frames % w)
     * positions are left out), disjoint */
    cxs_dataset *ds = open_ds(path_f32);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    uint64_t N, counts[3];
    uint64_t *global = pool_rank_epoch(ds, 0, 1, 0, 0, &N);
    ck_assert_uint_eq(N, info.num_frames);
    unsigned char *seen = calloc(info.num_frames, 1);
    for (uint32_t r = 0; r < 3; r++) {
        uint64_t *f = pool_rank_epoch(ds, r, 3, 0, 0, &counts[r]);
        ck_assert_uint_eq(counts[r], N / 3);
        for (uint64_t i = 0; i < counts[r]; i++) {
            EXPECT_LOOP(f[i] == global[r + 3 * i] && !seen[f[i]]);
            seen[f[i]] = 1;
        }
        free(f);
    }
    free(seen);
    free(global);
    cxs_dataset_close(ds);
}
END_TEST_

/* A run on N ranks stopped after `steps` samples per rank continues on M
 * ranks (origin = the global position reached) in the same global order:
 * nothing repeated, nothing lost but the last (remaining % M). */
static void pool_elastic(uint32_t N, uint32_t M) {
    cxs_dataset *ds = open_ds(path_f32);
    uint64_t F, n;
    uint64_t *global = pool_rank_epoch(ds, 0, 1, 0, 0, &F);
    const uint64_t steps = F / N / 3 + 11, G = steps * N;
    for (uint32_t r = 0; r < N; r++) { /* the first part, resumed at its end: nothing left */
        uint64_t *f = pool_rank_epoch(ds, r, N, 0, steps, &n);
        ck_assert_uint_eq(n, F / N - steps);
        for (uint64_t i = 0; i < n; i++) EXPECT_LOOP(f[i] == global[r + N * (steps + i)]);
        free(f);
    }
    for (uint32_t r = 0; r < M; r++) {
        uint64_t *f = pool_rank_epoch(ds, r, M, G, 0, &n);
        ck_assert_uint_eq(n, (F - G) / M);
        for (uint64_t i = 0; i < n; i++) EXPECT_LOOP(f[i] == global[G + r + M * i]);
        free(f);
    }
    free(global);
    cxs_dataset_close(ds);
}

TEST(pool_elastic_resume) {
    pool_elastic(2, 3);
    pool_elastic(2, 1);
}
END_TEST_

TEST(pool_order_is_deterministic_and_mixed) {
    /* the order depends on (seed, epoch) only, never on how fast uploads
     * finish; a batch mixes the utterances of several resident segments */
    cxs_dataset *ds = open_ds(path_f32);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    cxs_gpu_opts o = base_opts(CXS_GPU_POOL, 1, 256);
    o.budget_bytes = info.feature_bytes / 2 + (2u << 20);
    uint64_t n1, n2, n3;
    cxs_gpu_loader_info li;
    uint64_t *a = run_epoch(ds, s, &o, 4, 0, &n1, &li);
    o.slots = 7; /* other upload chunking: other timing */
    uint64_t *b = run_epoch(ds, s, &o, 4, 0, &n2, NULL);
    uint64_t *c = run_epoch(ds, s, &o, 5, 0, &n3, NULL);
    ck_assert_uint_eq(n1, n2);
    ck_assert(memcmp(a, b, n1 * 8) == 0);
    ck_assert(n3 == n1 && memcmp(a, c, n1 * 8) != 0);
    /* every batch draws from the three resident segments: the first
     * batch's 256 frames come from more utterances than one segment holds */
    uint64_t seen[256], nu = 0;
    for (int i = 0; i < 256; i++) {
        uint64_t u, t;
        ck_assert_int_eq(cxs_dataset_locate(ds, a[i], &u, &t), 0);
        int dup = 0;
        for (uint64_t j = 0; j < nu; j++) dup |= seen[j] == u;
        if (!dup) seen[nu++] = u;
    }
    ck_assert_uint_gt(nu, li.pool_utterances * 2);
    free(a);
    free(b);
    free(c);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

TEST(pool_segments_smaller_than_a_batch) {
    /* three segments of barely the longest utterance, batches spanning
     * several rounds: segments turn over inside one batch */
    cxs_dataset *ds = open_ds(path_f32);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    const uint64_t B = 8000, W = 5 * info.dim;
    cxs_gpu_opts o = base_opts(CXS_GPU_POOL, 2, (uint32_t)B);
    o.pool_segments = 3;
    o.budget_bytes = 3 * (B * W * 4 + B * 8 + B * 24) + 3 * (info.max_length + 50) * info.dim * 4;
    uint64_t n;
    cxs_gpu_loader_info li;
    uint64_t *f = run_epoch(ds, s, &o, 0, 0, &n, &li);
    ck_assert_uint_eq(n, info.num_frames);
    ck_assert_uint_le(li.pool_utterances, 2);
    unsigned char *seen = calloc(info.num_frames, 1);
    for (uint64_t i = 0; i < n; i++) {
        EXPECT_LOOP(!seen[f[i]]);
        seen[f[i]] = 1;
    }
    free(seen);
    free(f);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

TEST(mode_selection) {
    cxs_dataset *ds = open_ds(path_f32), *nolab = open_ds(path_nolab);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    cxs_sampler *seq = sampler(ds, CXS_SAMPLER_SEQUENTIAL, 0, 1);
    cxs_sampler *s2 = sampler(nolab, CXS_SAMPLER_SHUFFLE, 0, 1);
    cxs_gpu_loader *l;
    cxs_gpu_loader_info li;
    cxs_diag d;
    /* auto: resident when it fits the budget, stream otherwise */
    cxs_gpu_opts o = base_opts(CXS_GPU_AUTO, 8, 32);
    o.budget_bytes = 4 * info.feature_bytes + (2u << 20);
    ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d), 0);
    cxs_gpu_loader_describe(l, &li);
    ck_assert_uint_eq(li.mode, CXS_GPU_RESIDENT);
    EXPECT_STR_HAS(li.reason, "within the budget");
    cxs_gpu_loader_free(l);
    o.budget_bytes = info.feature_bytes / 2;
    ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d), 0);
    cxs_gpu_loader_describe(l, &li);
    ck_assert_uint_eq(li.mode, CXS_GPU_STREAM);
    EXPECT_STR_HAS(li.reason, "more than the budget");
    cxs_gpu_loader_free(l);
    /* resident asked for, does not fit: refused with the sizes */
    o.mode = CXS_GPU_RESIDENT;
    ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d), CXS_E_RANGE);
    EXPECT_STR_HAS(d.message, "resident mode needs");
    /* a pool segment must hold the longest utterance */
    o.mode = CXS_GPU_POOL;
    o.budget_bytes = info.max_length * info.dim * 4 * 2;
    ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d), CXS_E_RANGE);
    EXPECT_STR_HAS(d.message, "longest utterance");
    o.budget_bytes = 0;
    ck_assert_int_eq(cxs_gpu_loader_create(ds, seq, &o, 0, 0, &l, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "shuffle sampler");
    o.budget_bytes = info.feature_bytes / 2 + (2u << 20);
    ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, info.num_frames + 1, &l, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "past this rank's");
    /* option refusals */
    o = base_opts(CXS_GPU_STREAM, 8, 32);
    o.out_dtype = CXS_GPU_OUT_BF16;
    ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "float32 only");
    o = base_opts(CXS_GPU_RESIDENT, 8, 0);
    ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d), CXS_E_INVALID);
    o = base_opts(7, 8, 8);
    ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d), CXS_E_INVALID);
    o = base_opts(CXS_GPU_RESIDENT, 8, 8);
    ck_assert_int_eq(cxs_gpu_loader_create(nolab, s2, &o, 0, 0, &l, &d), CXS_E_NO_LABELS);
    EXPECT_STR_HAS(d.message, "features only");
    o.labels = 0;
    o.flags = CXS_GATHER_NORMALIZE; /* a single-shard-free dataset has statistics */
    ck_assert_int_eq(cxs_gpu_loader_create(nolab, s2, &o, 0, 0, &l, &d), 0);
    cxs_gpu_loader_free(l);
    /* statistics of another width: named by the check of the statistics */
    double mean[3] = {0, 0, 0}, var[3] = {1, 1, 1};
    cxs_norm bad = {3, mean, var};
    o = base_opts(CXS_GPU_RESIDENT, 8, 8);
    o.flags = CXS_GATHER_NORMALIZE, o.norm = &bad;
    ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "GPU loader: ");
    EXPECT_STR_HAS(d.message, "normalisation statistics");
    o = base_opts(CXS_GPU_POOL, 8, 8);
    o.pool_segments = 2;
    ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d), CXS_E_INVALID);
    ck_assert_int_eq(cxs_gpu_loader_create(NULL, s, &o, 0, 0, &l, &d), CXS_E_INVALID);
    cxs_gpu_loader_free(NULL);
    cxs_sampler_free(s);
    cxs_sampler_free(seq);
    cxs_sampler_free(s2);
    cxs_dataset_close(ds);
    cxs_dataset_close(nolab);
}
END_TEST_

/* A shard truncated after open and before a resident upload: the upload
 * reads every utterance's INDEX entry (the device's tables) and its
 * labels from the mapping, and must fail with CXS_E_TRUNCATED and the
 * shard named, not raise SIGBUS.  A first loader checks INDEX whole (1.3's
 * deferred checks), so the second upload's check reads nothing and the
 * upload's own pass is the first to meet the lost pages. */
/* A copy of the float32 dataset under dir/name, to be truncated by a
 * test: its path in copy, its first shard's in shard; drop_copy removes it. */
static void make_copy(const char *name, char *copy, size_t cn, char *shard, size_t sn) {
    char cmd[1400];
    snprintf(copy, cn, "%s/%s", dir, name);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", copy, path_f32, copy);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(shard, sn, "%s/shard-000000.cxs", copy);
}

static void drop_copy(const char *copy) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", copy);
    ck_assert_int_eq(system(cmd), 0);
}

TEST(resident_upload_of_a_truncated_shard) {
    char copy[400], shard[500];
    make_copy("truncated", copy, sizeof copy, shard, sizeof shard);
    cxs_dataset *ds = open_ds(copy);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    cxs_utt_sampler_opts so;
    memset(&so, 0, sizeof so);
    so.kind = CXS_UTT_SHUFFLE, so.seed = 3, so.frame_budget = 6000;
    cxs_utt_sampler *us;
    cxs_diag d;
    ck_assert_msg(cxs_utt_sampler_create(ds, &so, &us, &d) == 0, "%s", d.message);
    uint64_t batches;
    ck_assert_int_eq(cxs_utt_sampler_length(us, 0, NULL, &batches), 0); /* epoch 0's order, kept */
    cxs_gpu_opts o = base_opts(CXS_GPU_RESIDENT, 4, 32);
    cxs_gpu_loader *l;
    ck_assert_msg(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d) == 0, "%s", d.message);
    cxs_gpu_loader_free(l);
    ck_assert_int_eq(truncate(shard, 8192), 0); /* header and section table only */
    l = NULL;
    ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d), CXS_E_TRUNCATED);
    ck_assert_ptr_null(l);
    EXPECT_STR_HAS(d.message, "shard-000000.cxs");
    EXPECT_STR_HAS(d.message, "truncated");
    EXPECT_STR_HAS(d.message, "INDEX");
    /* the whole-utterance loader (its epoch's order made before the
     * truncation) reads INDEX for its rows and uploads the same way */
    cxs_gpu_utt_opts go;
    memset(&go, 0, sizeof go);
    go.device = device, go.labels = 1;
    cxs_gpu_utt_loader *gl = NULL;
    ck_assert_int_eq(cxs_gpu_utt_loader_create(ds, us, &go, 0, 0, &gl, &d), CXS_E_TRUNCATED);
    ck_assert_ptr_null(gl);
    EXPECT_STR_HAS(d.message, "shard-000000.cxs");
    EXPECT_STR_HAS(d.message, "truncated");
    cxs_utt_sampler_free(us);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
    drop_copy(copy);
}
END_TEST_

/* A shard truncated under a running pool: the refresher reads the next
 * blocks' INDEX entries and rows, the batches their frames' utterances and
 * labels, all from the mapping; the epoch must end in CXS_E_TRUNCATED with
 * the shard named, not in SIGBUS (of the refresher or of the consumer). */
TEST(pool_meets_a_truncated_shard) {
    char copy[400], shard[500];
    make_copy("truncated-pool", copy, sizeof copy, shard, sizeof shard);
    cxs_dataset *ds = open_ds(copy);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    cxs_gpu_opts o = base_opts(CXS_GPU_POOL, 4, 32);
    o.budget_bytes = info.feature_bytes / 3 + (2u << 20);
    cxs_gpu_loader *l;
    cxs_diag d;
    ck_assert_msg(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d) == 0, "%s", d.message);
    const cxs_gpu_batch *b;
    ck_assert_int_eq(cxs_gpu_loader_next(l, stream, &b), 0);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(truncate(shard, 8192), 0); /* header and section table only */
    int rc = 0;
    memset(&d, 0, sizeof d);
    for (uint64_t i = 0; i <= info.num_frames / 32 + 1 && !rc; i++) {
        rc = cxs_gpu_loader_next_ex(l, stream, &b, &d);
        if (!rc && !b) break;
    }
    ck_assert_int_eq(rc, CXS_E_TRUNCATED);
    /* the common error model: the _ex call's diagnostic, and the same kept */
    ck_assert_int_eq(d.code, CXS_E_TRUNCATED);
    EXPECT_STR_HAS(d.file, "shard-000000.cxs");
    ck_assert_str_eq(d.message, cxs_gpu_loader_error(l)->message);
    ck_assert_uint_eq(d.offset, cxs_gpu_loader_error(l)->offset);
    EXPECT_STR_HAS(cxs_gpu_loader_error(l)->message, "shard-000000.cxs");
    EXPECT_STR_HAS(cxs_gpu_loader_error(l)->message, "truncated");
    /* the place, for a program: the shard's path and the byte */
    EXPECT_STR_HAS(cxs_gpu_loader_error(l)->file, "shard-000000.cxs");
    ck_assert_int_eq(cxs_gpu_loader_error(l)->code, CXS_E_TRUNCATED);
    ck_assert(cxs_gpu_loader_error(l)->offset != CXS_NO_OFFSET);
    cxs_gpu_loader_free(l);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
    drop_copy(copy);
}
END_TEST_

/* A shard truncated under a running whole-utterance loader: each batch
 * reads its utterances' INDEX entries from the mapping; the epoch must end
 * in CXS_E_TRUNCATED with the shard named, not in SIGBUS. */
TEST(utterance_loader_meets_a_truncated_shard) {
    char copy[400], shard[500];
    make_copy("truncated-utt", copy, sizeof copy, shard, sizeof shard);
    cxs_dataset *ds = open_ds(copy);
    cxs_utt_sampler_opts so;
    memset(&so, 0, sizeof so);
    so.kind = CXS_UTT_SHUFFLE, so.seed = 3, so.frame_budget = 6000;
    cxs_utt_sampler *us;
    cxs_diag d;
    ck_assert_msg(cxs_utt_sampler_create(ds, &so, &us, &d) == 0, "%s", d.message);
    uint64_t batches;
    ck_assert_int_eq(cxs_utt_sampler_length(us, 0, NULL, &batches), 0);
    cxs_gpu_utt_opts go;
    memset(&go, 0, sizeof go);
    go.device = device, go.labels = 1;
    cxs_gpu_utt_loader *gl;
    ck_assert_msg(cxs_gpu_utt_loader_create(ds, us, &go, 0, 0, &gl, &d) == 0, "%s", d.message);
    const cxs_gpu_utt_batch *b;
    ck_assert_int_eq(cxs_gpu_utt_loader_next(gl, stream, &b), 0);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(truncate(shard, 8192), 0); /* header and section table only */
    int rc = 0;
    memset(&d, 0, sizeof d);
    for (uint64_t i = 0; i <= batches && !rc; i++) {
        rc = cxs_gpu_utt_loader_next_ex(gl, stream, &b, &d);
        if (!rc && !b) break;
    }
    ck_assert_int_eq(rc, CXS_E_TRUNCATED);
    ck_assert_int_eq(d.code, CXS_E_TRUNCATED);
    EXPECT_STR_HAS(d.file, "shard-000000.cxs");
    ck_assert_str_eq(d.message, cxs_gpu_utt_loader_error(gl)->message);
    EXPECT_STR_HAS(cxs_gpu_utt_loader_error(gl)->message, "shard-000000.cxs");
    EXPECT_STR_HAS(cxs_gpu_utt_loader_error(gl)->message, "truncated");
    EXPECT_STR_HAS(cxs_gpu_utt_loader_error(gl)->file, "shard-000000.cxs");
    ck_assert_int_eq(cxs_gpu_utt_loader_error(gl)->code, CXS_E_TRUNCATED);
    cxs_gpu_utt_loader_free(gl);
    cxs_utt_sampler_free(us);
    cxs_dataset_close(ds);
    drop_copy(copy);
}
END_TEST_

TEST(device_probe) {
    /* Without a usable device a real-device loader is refused with the
     * probe's reason; with one, the probe describes it. */
    cxs_gpu_probe_info pi;
    int rc = cxs_gpu_probe(0, &pi);
    ck_assert_int_eq(rc == 0, pi.usable);
    ck_assert_int_eq(cxs_gpu_probe(CXS_GPU_EMULATE, &pi), 0);
    ck_assert(pi.usable && pi.free_bytes > 0);
    rc = cxs_gpu_probe(0, &pi);
    cxs_dataset *ds = open_ds(path_f32);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    cxs_gpu_opts o = base_opts(CXS_GPU_AUTO, 8, 32);
    o.device = 0;
    cxs_gpu_loader *l = NULL;
    cxs_diag d;
    if (rc) {
        ck_assert(pi.reason[0]);
        ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d), rc);
        EXPECT_STR_HAS(d.message, pi.reason);
    } else {
        ck_assert(pi.name[0] && pi.total_bytes > 0);
        ck_assert_int_eq(cxs_gpu_probe(pi.device_count, &pi), CXS_E_UNSUPPORTED);
        EXPECT_STR_HAS(pi.reason, "no CUDA device");
    }
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

#ifdef CXS_HAVE_CUDA
TEST(no_leaked_device_memory) {
    /* free returns every byte: device memory after create/use/free cycles
     * equals what it was after the first (which warms the context up) */
    cxs_dataset *ds = open_ds(path_f32);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    size_t f0 = 0, f1 = 0, t;
    for (int round = 0; round < 3; round++) {
        const uint32_t modes[] = {CXS_GPU_RESIDENT, CXS_GPU_STREAM, CXS_GPU_POOL};
        for (int m = 0; m < 3; m++) {
            cxs_gpu_opts o = base_opts(modes[m], 10, 128);
            o.budget_bytes = info.feature_bytes / 2 + (2u << 20);
            if (modes[m] == CXS_GPU_RESIDENT) o.budget_bytes = 0;
            cxs_gpu_loader *l;
            ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, NULL), 0);
            const cxs_gpu_batch *b;
            for (int i = 0; i < 4; i++) ck_assert_int_eq(cxs_gpu_loader_next(l, stream, &b), 0);
            cxs_gpu_loader_free(l);
        }
        /* and the whole-utterance loader */
        cxs_utt_sampler *us;
        cxs_gpu_utt_loader *ul = utt_loader(ds, &us);
        const cxs_gpu_utt_batch *ub;
        for (int i = 0; i < 4; i++) ck_assert_int_eq(cxs_gpu_utt_loader_next(ul, stream, &ub), 0);
        cxs_gpu_utt_loader_free(ul);
        cxs_utt_sampler_free(us);
        ck_assert_int_eq(cudaDeviceSynchronize(), 0);
        ck_assert_int_eq(cudaMemGetInfo(round == 0 ? &f0 : &f1, &t), 0);
    }
    ck_assert_uint_eq(f0, f1);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_
#endif

/* ---- whole-utterance batches on the device (cxs_gpu_utt_loader) ------- */

/* One epoch of rank `rank` of `world` from `start`: every batch of the GPU
 * utterance loader equals the CPU utterance loader's, byte for byte: x
 * (float32, or its bfloat16 rounding), lengths, labels, targets. */
static void utt_epoch_matches(const char *path, uint32_t rank, uint32_t world, uint32_t flags,
                              uint32_t out_dtype, uint64_t start) {
    cxs_dataset *ds = open_ds(path);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    const uint32_t D = info.dim;
    cxs_utt_sampler_opts so;
    memset(&so, 0, sizeof so);
    so.kind = CXS_UTT_SHUFFLE, so.seed = 11, so.frame_budget = 6000, so.buckets = 4;
    so.rank = rank, so.world_size = world;
    cxs_utt_sampler *us;
    cxs_diag d;
    ck_assert_msg(cxs_utt_sampler_create(ds, &so, &us, &d) == 0, "%s", d.message);
    cxs_utt_loader_opts co;
    memset(&co, 0, sizeof co);
    co.threads = 2, co.flags = flags, co.labels = 1, co.targets = 1;
    cxs_utt_loader *cl;
    ck_assert_msg(cxs_utt_loader_create_ex(ds, us, &co, 1, start, &cl, &d) == 0, "%s", d.message);
    cxs_gpu_utt_opts go;
    memset(&go, 0, sizeof go);
    go.device = device, go.flags = flags, go.out_dtype = out_dtype, go.labels = 1, go.targets = 1;
    cxs_gpu_utt_loader *gl;
    int rc = cxs_gpu_utt_loader_create(ds, us, &go, 1, start, &gl, &d);
    ck_assert_msg(rc == 0, "create: %s (%s)", cxs_strerror(rc), d.message);
    const uint64_t F = cxs_utt_sampler_max_frames(us), cap = cxs_utt_sampler_max_batch(us);
    float *x = malloc(F * D * 4);
    uint16_t *x16 = malloc(F * D * 2);
    int64_t *y = malloc(F * 8), *len = malloc(cap * 8), *t = malloc(cap * info.max_seq_length * 8 + 8),
            *tl = malloc(cap * 8);
    uint64_t batches = 0;
    for (;;) {
        const cxs_utt_batch *c;
        const cxs_gpu_utt_batch *g;
        ck_assert_int_eq(cxs_utt_loader_next(cl, &c), 0);
        rc = cxs_gpu_utt_loader_next(gl, stream, &g);
        ck_assert_msg(rc == 0, "next: %s (%s)", cxs_strerror(rc), cxs_gpu_utt_loader_error(gl)->message);
        if (!c) {
            ck_assert_ptr_null(g);
            break;
        }
        ck_assert_ptr_nonnull(g);
        batches++;
        ck_assert_uint_eq(g->n, c->n);
        ck_assert_uint_eq(g->tmax, c->tmax);
        ck_assert_uint_eq(g->lmax, c->lmax);
        ck_assert_uint_eq(g->frames, c->frames);
        ck_assert_uint_eq(g->index, c->index);
        ck_assert_uint_eq(g->global, c->global);
        ck_assert(memcmp(g->utts, c->utts, c->n * 8) == 0);
        ck_assert(memcmp(g->host_lengths, c->lengths, c->n * 8) == 0);
        ck_assert(memcmp(g->host_target_lengths, c->target_lengths, c->n * 8) == 0);
        const size_t nx = c->n * c->tmax * D;
        if (out_dtype == CXS_GPU_OUT_BF16) {
            to_host(x16, g->x, nx * 2);
            for (size_t i = 0; i < nx; i++) EXPECT_LOOP(x16[i] == bf16_rne(c->x[i]));
        } else {
            to_host(x, g->x, nx * 4);
            ck_assert_msg(memcmp(x, c->x, nx * 4) == 0, "batch %llu: x differs from the CPU's",
                          (unsigned long long)c->index);
        }
        to_host(len, g->lengths, c->n * 8);
        ck_assert(memcmp(len, c->lengths, c->n * 8) == 0);
        to_host(y, g->y, c->n * c->tmax * 8);
        ck_assert_msg(memcmp(y, c->y, c->n * c->tmax * 8) == 0, "batch %llu: labels differ",
                      (unsigned long long)c->index);
        to_host(t, g->targets, c->n * c->lmax * 8);
        ck_assert(memcmp(t, c->targets, c->n * c->lmax * 8) == 0);
        to_host(tl, g->target_lengths, c->n * 8);
        ck_assert(memcmp(tl, c->target_lengths, c->n * 8) == 0);
    }
    uint64_t len_rank;
    ck_assert_int_eq(cxs_utt_sampler_length(us, 1, NULL, &len_rank), 0);
    ck_assert_uint_eq(batches, len_rank - start);
    ck_assert_uint_gt(batches, 1);
    const cxs_gpu_utt_batch *g;
    ck_assert_int_eq(cxs_gpu_utt_loader_next(gl, stream, &g), 0); /* the end stays the end */
    ck_assert_ptr_null(g);
    /* a reset serves the other epoch as the CPU loader does, from a position */
    ck_assert_int_eq(cxs_gpu_utt_loader_reset(gl, 2, 1), 0);
    ck_assert_int_eq(cxs_utt_loader_reset(cl, 2, 1), 0);
    const cxs_utt_batch *c;
    ck_assert_int_eq(cxs_utt_loader_next(cl, &c), 0);
    ck_assert_int_eq(cxs_gpu_utt_loader_next(gl, stream, &g), 0);
    ck_assert(c && g && g->n == c->n && g->global == c->global && g->index == 1);
    ck_assert(memcmp(g->utts, c->utts, c->n * 8) == 0);
    if (out_dtype == CXS_GPU_OUT_F32) {
        to_host(x, g->x, c->n * c->tmax * D * 4);
        ck_assert(memcmp(x, c->x, c->n * c->tmax * D * 4) == 0);
    }
    ck_assert_int_eq(cxs_gpu_utt_loader_reset(gl, 2, len_rank + 100), CXS_E_INVALID);
    ck_assert_ptr_nonnull(strstr(cxs_gpu_utt_loader_error(gl)->message, "past this rank's"));
    cxs_gpu_loader_info li;
    cxs_gpu_utt_loader_describe(gl, &li);
    ck_assert_uint_eq(li.mode, CXS_GPU_RESIDENT);
    ck_assert_uint_ge(li.device_bytes, info.feature_bytes);
    cxs_gpu_utt_loader_free(gl);
    cxs_utt_loader_free(cl);
    free(x);
    free(x16);
    free(y);
    free(len);
    free(t);
    free(tl);
    cxs_utt_sampler_free(us);
    cxs_dataset_close(ds);
}

TEST(utt_batches_equal_the_cpu_loaders) {
    utt_epoch_matches(path_seq32, 0, 1, 0, CXS_GPU_OUT_F32, 0);
    utt_epoch_matches(path_seq16, 0, 1, 0, CXS_GPU_OUT_F32, 0);
    for (uint32_t r = 0; r < 2; r++) {
        utt_epoch_matches(path_seq32, r, 2, 0, CXS_GPU_OUT_F32, 0);
        utt_epoch_matches(path_seq16, r, 2, CXS_GATHER_NORMALIZE, CXS_GPU_OUT_F32, r);
    }
    utt_epoch_matches(path_seq16, 0, 1, CXS_GATHER_NORMALIZE, CXS_GPU_OUT_BF16, 2);
}
END_TEST_

/* Coded datasets (q8, q16, q8 under zstd): the device decodes in the kernels what the
 * CPU decodes (the emulation runs gpu_expand.h's arithmetic; the CPU's is
 * checked against the codec's reference in tests/reader/qserve_test.c):
 * in every mode -- resident, stream and pool, float32 and bfloat16,
 * normalised or not, shuffle, block and sequential order (pool: its block
 * order) -- each batch equals the CPU gather of its frames bit for bit,
 * zero padding at utterance borders included, and the utterance loader's
 * batches equal the CPU utterance loader's. */
static void coded_modes(const char *p) {
    cxs_dataset *ds = open_ds(p);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *sh = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1),
                *sq = sampler(ds, CXS_SAMPLER_SEQUENTIAL, 0, 1);
    cxs_sampler_opts bo;
    memset(&bo, 0, sizeof bo);
    bo.kind = CXS_SAMPLER_BLOCK, bo.seed = 3, bo.memory_bytes = info.feature_bytes / 3;
    cxs_sampler *bl;
    ck_assert_int_eq(cxs_sampler_create(ds, &bo, &bl), 0);
    const uint32_t modes[] = {CXS_GPU_RESIDENT, CXS_GPU_STREAM, CXS_GPU_POOL};
    for (size_t m = 0; m < 3; m++)
        for (int v = 0; v < (coded_light ? 1 : 3); v++) {
            cxs_gpu_opts o = base_opts(modes[m], v == 2 ? 7 : 12, 37);
            o.flags = v == 2 ? CXS_GATHER_NORMALIZE : 0;
            o.out_dtype = v == 2 ? CXS_GPU_OUT_BF16 : CXS_GPU_OUT_F32;
            cxs_sampler *s = modes[m] == CXS_GPU_POOL ? sh : (v == 0 ? sh : v == 1 ? bl : sq);
            if (modes[m] == CXS_GPU_POOL) /* 4 segments of ~1/8 of the codes */
                o.budget_bytes = info.feature_bytes / 2 + (512u << 10);
            uint64_t n;
            cxs_gpu_loader_info li;
            free(run_epoch(ds, s, &o, 3, 0, &n, &li));
            ck_assert_uint_eq(li.mode, modes[m]);
            ck_assert_uint_eq(n, info.num_frames);
            if (modes[m] == CXS_GPU_POOL) { /* the pool turned over */
                ck_assert_uint_gt(li.pool_utterances, 0);
                ck_assert_uint_lt(li.pool_utterances * 4, info.num_utterances);
            }
        }
    /* stream mode from a position, and after a reset */
    cxs_gpu_opts o = base_opts(CXS_GPU_STREAM, 3, 64);
    uint64_t n;
    free(run_epoch(ds, sh, &o, 1, 1000, &n, NULL));
    ck_assert_uint_eq(n, info.num_frames - 1000);
    cxs_sampler_free(sh);
    cxs_sampler_free(sq);
    cxs_sampler_free(bl);
    cxs_dataset_close(ds);
    utt_epoch_matches(p, 0, 1, 0, CXS_GPU_OUT_F32, 0);
    utt_epoch_matches(p, 1, 2, CXS_GATHER_NORMALIZE, CXS_GPU_OUT_BF16, 0);
}

TEST(coded_batches_equal_the_cpus) {
    coded_modes(path_q8);
    if (coded_light) return;
    coded_modes(path_q16);
    coded_modes(path_q8z);
}
END_TEST_

/* One epoch of `mode` over p with context k, at a budget (pool), its
 * batches not looked at: what the loader said of itself at the end. */
static void epoch_cost(const char *p, uint32_t mode, uint32_t k, uint64_t budget,
                       cxs_gpu_loader_info *li, uint64_t *batches) {
    cxs_dataset *ds = open_ds(p);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    cxs_gpu_opts o = base_opts(mode, k, 64);
    o.budget_bytes = budget;
    cxs_gpu_loader *l;
    cxs_diag d;
    ck_assert_msg(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d) == 0, "%s", d.message);
    const cxs_gpu_batch *b;
    *batches = 0;
    while (cxs_gpu_loader_next(l, stream, &b) == 0 && b) ++*batches;
    ck_assert_int_eq(cxs_gpu_loader_error(l)->code, 0);
    consumer_sync();
    cxs_gpu_loader_describe(l, li);
    cxs_gpu_loader_free(l);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}

/* The segment rows of a pool's layout ("pool: S segments of R rows; ..."). */
static uint64_t pool_rows(const cxs_gpu_loader_info *li) {
    unsigned S;
    unsigned long long R;
    ck_assert_int_eq(sscanf(li->reason, "pool: %u segments of %llu rows", &S, &R), 2);
    return R;
}

/* What each mode sends over the bus for an epoch of q8 and q16, against
 * the same data as float32 (path_seq32): resident (and the utterance
 * loader's resident data) and pool the features
 * (codes; the headers, 8 + 8D bytes an utterance, once), stream mode the
 * codes of the rows each batch's windows cover and a descriptor a sample
 * against float32's windows and labels: at most 0.27x (q8) and 0.52x
 * (q16).  And a pool's budget holds about four (q8) and two (q16) times
 * float32's rows and utterances per segment. */
TEST(coded_uploads_a_quarter) {
    const char *paths[] = {path_seq32, path_q8, path_q16};
    const double limit[] = {1.0, 0.27, 0.52};
    const uint32_t modes[] = {CXS_GPU_RESIDENT, CXS_GPU_STREAM, CXS_GPU_POOL};
    const char *names[] = {"resident", "stream", "pool"};
    cxs_dataset *ds = open_ds(path_seq32);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_dataset_close(ds);
    const uint64_t budget = info.feature_bytes / 2 + (1u << 20);
    for (size_t m = 0; m < 3; m++) {
        uint64_t up[3], rows[3], utts[3], batches[3];
        for (int t = 0; t < 3; t++) {
            cxs_gpu_loader_info li;
            epoch_cost(paths[t], modes[m], 7, modes[m] == CXS_GPU_POOL ? budget : 0, &li, &batches[t]);
            up[t] = li.uploaded_bytes;
            rows[t] = modes[m] == CXS_GPU_POOL ? pool_rows(&li) : 0;
            utts[t] = li.pool_utterances;
        }
        for (int t = 1; t < 3; t++) {
            ck_assert_uint_eq(batches[t], batches[0]);
            ck_assert_msg(up[t] <= limit[t] * (double)up[0],
                          "%s, %s: %llu bytes uploaded, float32 %llu: more than %.2fx", names[m],
                          paths[t], (unsigned long long)up[t], (unsigned long long)up[0], limit[t]);
        }
        printf("%s: an epoch of %llu batches uploads float32 %llu bytes, q8 %llu (%.3fx), q16 %llu "
               "(%.3fx)\n", names[m], (unsigned long long)batches[0], (unsigned long long)up[0],
               (unsigned long long)up[1], (double)up[1] / up[0], (unsigned long long)up[2],
               (double)up[2] / up[0]);
        if (modes[m] == CXS_GPU_RESIDENT) { /* the utterance loader's resident data too */
            for (int t = 0; t < 3; t++) {
                cxs_dataset *ud = open_ds(paths[t]);
                cxs_utt_sampler *us;
                cxs_gpu_utt_loader *gl = utt_loader(ud, &us);
                cxs_gpu_loader_info li;
                cxs_gpu_utt_loader_describe(gl, &li);
                up[t] = li.uploaded_bytes;
                cxs_gpu_utt_loader_free(gl);
                cxs_utt_sampler_free(us);
                cxs_dataset_close(ud);
            }
            for (int t = 1; t < 3; t++)
                ck_assert_msg(up[t] <= limit[t] * (double)up[0],
                              "utterance loader, %s: %llu bytes uploaded, float32 %llu", paths[t],
                              (unsigned long long)up[t], (unsigned long long)up[0]);
            printf("utterance loader: uploads float32 %llu bytes, q8 %llu (%.3fx), q16 %llu "
                   "(%.3fx)\n", (unsigned long long)up[0], (unsigned long long)up[1],
                   (double)up[1] / up[0], (unsigned long long)up[2], (double)up[2] / up[0]);
        }
        if (modes[m] == CXS_GPU_POOL) {
            /* the headers take their share of the budget: not quite 4x */
            ck_assert_uint_ge(rows[1] * 10, rows[0] * 35);
            ck_assert_uint_ge(rows[2] * 10, rows[0] * 19);
            ck_assert_uint_gt(utts[1], 3 * utts[0]);
            printf("pool at %llu bytes: rows a segment float32 %llu, q8 %llu (%.2fx), q16 %llu "
                   "(%.2fx); utterances a segment %llu, %llu, %llu\n",
                   (unsigned long long)budget, (unsigned long long)rows[0],
                   (unsigned long long)rows[1], (double)rows[1] / rows[0],
                   (unsigned long long)rows[2], (double)rows[2] / rows[0],
                   (unsigned long long)utts[0], (unsigned long long)utts[1],
                   (unsigned long long)utts[2]);
        }
    }
}
END_TEST_

/* What a resident q8 dataset takes on the device and sends there, against
 * the same data as float32: its features a quarter (the headers, 8 + 8D
 * bytes an utterance, on top), so a budget that holds the float32
 * dataset's features holds four times the utterances as q8. */
static void resident_cost(const char *p, cxs_gpu_loader_info *li, cxs_info *info) {
    cxs_dataset *ds = open_ds(p);
    cxs_dataset_info(ds, info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    cxs_gpu_opts o = base_opts(CXS_GPU_RESIDENT, 2, 64);
    o.labels = 0;
    cxs_gpu_loader *l;
    cxs_diag d;
    ck_assert_msg(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d) == 0, "%s", d.message);
    cxs_gpu_loader_describe(l, li);
    cxs_gpu_loader_free(l);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}

TEST(resident_q8_takes_a_quarter) {
    cxs_gpu_loader_info f, q;
    cxs_info fi, qi;
    resident_cost(path_seq32, &f, &fi);
    resident_cost(path_q8, &q, &qi);
    ck_assert_uint_eq(qi.num_frames, fi.num_frames);
    /* the tables (2U + 1 offsets) and the batch ring are the same for both */
    const uint64_t U = qi.num_utterances, H = 8 + 8 * (uint64_t)qi.dim;
    const uint64_t feat_f = f.device_bytes - q.device_bytes + qi.num_frames * qi.dim + U * H;
    ck_assert_uint_eq(feat_f, fi.num_frames * (uint64_t)fi.dim * 4 + fi.guard * (U + fi.num_shards) * (uint64_t)fi.dim * 4);
    ck_assert_msg(q.uploaded_bytes * 10 < f.uploaded_bytes * 3,
                  "q8 uploaded %llu bytes, float32 %llu: more than 0.3x",
                  (unsigned long long)q.uploaded_bytes, (unsigned long long)f.uploaded_bytes);
    printf("resident: float32 %llu device bytes, %llu uploaded; q8 %llu device bytes, %llu uploaded "
           "(%.3fx)\n", (unsigned long long)f.device_bytes, (unsigned long long)f.uploaded_bytes,
           (unsigned long long)q.device_bytes, (unsigned long long)q.uploaded_bytes,
           (double)q.uploaded_bytes / (double)f.uploaded_bytes);
}
END_TEST_

/* A damaged header (the golden vectors': every checksum good, so open
 * takes them) is refused at its first use in every mode -- when the
 * headers are checked and uploaded, at the loader's creation -- naming
 * the shard, the utterance and the fault; nothing is served from it. */
static void damaged_header(const char *name, uint64_t bad, const char *why) {
    char p[700];
    snprintf(p, sizeof p, "%s/invalid/%s", golden, name);
    cxs_dataset *ds = open_ds(p);
    cxs_utterance ut;
    ck_assert_int_eq(cxs_dataset_utterance_ex(ds, bad, CXS_UTTERANCE_NO_DATA, &ut, NULL), 0);
    char id[80];
    snprintf(id, sizeof id, "utterance %.*s", (int)ut.id_len, ut.id);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    const uint32_t modes[] = {CXS_GPU_RESIDENT, CXS_GPU_STREAM, CXS_GPU_POOL, CXS_GPU_AUTO};
    for (size_t m = 0; m < 4; m++) {
        cxs_gpu_opts o = base_opts(modes[m], 1, 4);
        o.labels = 0;
        if (modes[m] == CXS_GPU_POOL) o.budget_bytes = 1u << 20;
        cxs_gpu_loader *l = NULL;
        cxs_diag d = {0};
        ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, &d), CXS_E_CORRUPT);
        ck_assert_ptr_null(l);
        ck_assert_msg(strstr(d.message, "shard-000000.cxs") && strstr(d.message, "QHEADERS") &&
                          strstr(d.message, id) && strstr(d.message, why),
                      "mode %u: %s", modes[m], d.message);
    }
    cxs_utt_sampler_opts so;
    memset(&so, 0, sizeof so);
    so.kind = CXS_UTT_SHUFFLE, so.frame_budget = 100;
    cxs_utt_sampler *us;
    cxs_diag d = {0};
    ck_assert_msg(cxs_utt_sampler_create(ds, &so, &us, &d) == 0, "%s", d.message);
    cxs_gpu_utt_opts go;
    memset(&go, 0, sizeof go);
    go.device = device;
    cxs_gpu_utt_loader *gl = NULL;
    ck_assert_int_eq(cxs_gpu_utt_loader_create(ds, us, &go, 0, 0, &gl, &d), CXS_E_CORRUPT);
    ck_assert_msg(strstr(d.message, "shard-000000.cxs") && strstr(d.message, id) &&
                      strstr(d.message, why),
                  "utterance loader: %s", d.message);
    cxs_utt_sampler_free(us);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}

TEST(coded_damaged_header_is_refused) {
    damaged_header("q8-bad-percentiles", 0, "column 1");
    damaged_header("q8-bad-header", 1, "range");
}
END_TEST_

TEST(utt_refusals_name_the_option) {
    cxs_dataset *ds = open_ds(path_seq32), *nolab = open_ds(path_nolab);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_utt_sampler_opts so;
    memset(&so, 0, sizeof so);
    so.kind = CXS_UTT_SHUFFLE, so.frame_budget = 4000;
    cxs_utt_sampler *us, *un;
    ck_assert_int_eq(cxs_utt_sampler_create(ds, &so, &us, NULL), 0);
    ck_assert_int_eq(cxs_utt_sampler_create(nolab, &so, &un, NULL), 0);
    cxs_gpu_utt_opts go;
    memset(&go, 0, sizeof go);
    go.device = device;
    cxs_gpu_utt_loader *gl = NULL;
    cxs_diag d;
    go.budget_bytes = info.feature_bytes / 2; /* the data does not fit */
    ck_assert_int_eq(cxs_gpu_utt_loader_create(ds, us, &go, 0, 0, &gl, &d), CXS_E_RANGE);
    ck_assert_msg(strstr(d.message, "budget_bytes") && strstr(d.message, "resident data takes"),
                  "%s", d.message);
    go.budget_bytes = 0;
    go.flags = CXS_PAD_PER_UTTERANCE;
    ck_assert_int_eq(cxs_gpu_utt_loader_create(ds, us, &go, 0, 0, &gl, &d), CXS_E_INVALID);
    ck_assert_ptr_nonnull(strstr(d.message, "CXS_PAD_PER_UTTERANCE"));
    double mean[2] = {0, 0}, var[2] = {1, -1};
    cxs_norm bad = {2, mean, var};
    go.flags = CXS_GATHER_NORMALIZE, go.norm = &bad;
    ck_assert_int_eq(cxs_gpu_utt_loader_create(ds, us, &go, 0, 0, &gl, &d), CXS_E_INVALID);
    ck_assert_msg(strstr(d.message, "GPU utterance loader: ") &&
                  strstr(d.message, "normalisation statistics"), "%s", d.message);
    go.norm = NULL;
    go.flags = 0;
    go.labels = 1;
    ck_assert_int_eq(cxs_gpu_utt_loader_create(nolab, un, &go, 0, 0, &gl, &d), CXS_E_NO_LABELS);
    go.labels = 0, go.targets = 1;
    ck_assert_int_eq(cxs_gpu_utt_loader_create(nolab, un, &go, 0, 0, &gl, &d), CXS_E_NO_SEQUENCES);
    go.targets = 0;
    ck_assert_int_eq(cxs_gpu_utt_loader_create(ds, us, &go, 0, 1u << 30, &gl, &d), CXS_E_INVALID);
    ck_assert_ptr_nonnull(strstr(d.message, "past this rank's"));
    ck_assert_ptr_null(gl);
    /* features only: no y, no targets */
    ck_assert_int_eq(cxs_gpu_utt_loader_create(nolab, un, &go, 0, 0, &gl, &d), 0);
    const cxs_gpu_utt_batch *b;
    ck_assert_int_eq(cxs_gpu_utt_loader_next(gl, stream, &b), 0);
    ck_assert(b && !b->y && !b->targets && !b->target_lengths && !b->host_target_lengths);
    cxs_gpu_utt_loader_free(gl);
    cxs_gpu_utt_loader_free(NULL);
    cxs_utt_sampler_free(us);
    cxs_utt_sampler_free(un);
    cxs_dataset_close(ds);
    cxs_dataset_close(nolab);
}
END_TEST_

/* The position after each batch of a GPU loader is (epoch, the batch's
 * start + its units) while more follow and (epoch + 1, 0) once the last
 * was handed out: checked against the next batch's own start, or against
 * the end. */

static void check_follows(const cxs_position *before, uint32_t kind, uint64_t epoch,
                          uint64_t batch_position, int end) {
    ck_assert_uint_eq(before->version, CXS_POSITION_VERSION);
    ck_assert_uint_eq(before->kind, kind);
    if (end) {
        ck_assert_uint_eq(before->epoch, epoch + 1);
        ck_assert_uint_eq(before->next, 0);
    } else {
        ck_assert_uint_eq(before->epoch, epoch);
        ck_assert_uint_eq(before->next, batch_position);
    }
}

/* A loader's next batch as walk_positions sees it: its start and units
 * (n frames; an utterance loader's batch is 1), n 0 at the end. */
typedef int (*next_start_fn)(void *l, uint64_t *start, uint64_t *n);
typedef int (*position_fn)(const void *l, cxs_position *p);

static int frames_next(void *l, uint64_t *start, uint64_t *n) {
    const cxs_gpu_batch *b;
    int rc = cxs_gpu_loader_next(l, stream, &b);
    *start = b && !rc ? b->position : 0, *n = b && !rc ? b->n : 0;
    return rc;
}

static int frames_position(const void *l, cxs_position *p) { return cxs_gpu_loader_position(l, p); }

static int utts_next(void *l, uint64_t *start, uint64_t *n) {
    const cxs_gpu_utt_batch *b;
    int rc = cxs_gpu_utt_loader_next(l, stream, &b);
    *start = b && !rc ? b->index : 0, *n = b && !rc ? 1 : 0;
    return rc;
}

static int utts_position(const void *l, cxs_position *p) {
    return cxs_gpu_utt_loader_position(l, p);
}

/* One pass of `epoch` from its start: the position before each batch is
 * where the batch starts, and after the last the next epoch's start.
 * Returns the units served. */
static uint64_t walk_positions(void *l, next_start_fn next, position_fn pos, uint32_t kind,
                               uint64_t epoch) {
    cxs_position at;
    uint64_t served = 0, start, n;
    ck_assert_int_eq(pos(l, &at), 0);
    for (;;) {
        ck_assert_int_eq(next(l, &start, &n), 0);
        check_follows(&at, kind, epoch, start, !n);
        if (!n) return served;
        served += n;
        ck_assert_int_eq(pos(l, &at), 0);
    }
}

TEST(gpu_loader_positions) {
    /* every mode, with and without drop_last: the position asked after
     * each batch is where the next one starts, (e + 1, 0) after the last */
    cxs_dataset *ds = open_ds(path_f16);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    const uint32_t modes[] = {CXS_GPU_STREAM, CXS_GPU_RESIDENT, CXS_GPU_POOL};
    for (int m = 0; m < 3; m++) {
        for (uint32_t drop = 0; drop < 2; drop++) {
            cxs_gpu_opts o = base_opts(modes[m], 4, 100);
            o.drop_last = drop;
            if (modes[m] == CXS_GPU_POOL) o.budget_bytes = info.feature_bytes / 2 + (2u << 20);
            const uint32_t kind = modes[m] == CXS_GPU_POOL ? CXS_POSITION_GPU_POOL
                                                           : CXS_POSITION_FRAMES;
            cxs_gpu_loader *l;
            cxs_diag d;
            ck_assert_msg(cxs_gpu_loader_create(ds, s, &o, 3, 0, &l, &d) == 0, "%s", d.message);
            const uint64_t served = walk_positions(l, frames_next, frames_position, kind, 3);
            ck_assert_uint_eq(served, drop ? info.num_frames / 100 * 100 : info.num_frames);
            cxs_position at;
            const cxs_gpu_batch *b;
            /* after the whole pass: the start of 4; set_epoch(3) serves 3 again */
            ck_assert_int_eq(cxs_gpu_loader_position(l, &at), 0);
            check_follows(&at, kind, 3, 0, 1);
            ck_assert_int_eq(cxs_gpu_loader_set_epoch(l, 3), 0);
            ck_assert_int_eq(cxs_gpu_loader_next(l, stream, &b), 0);
            ck_assert_uint_eq(b->position, 0);
            /* mid-epoch set_epoch of that epoch keeps the place, another starts over */
            ck_assert_int_eq(cxs_gpu_loader_next(l, stream, &b), 0);
            ck_assert_int_eq(cxs_gpu_loader_set_epoch(l, 3), 0);
            ck_assert_int_eq(cxs_gpu_loader_next(l, stream, &b), 0);
            ck_assert_uint_eq(b->position, 200);
            ck_assert_int_eq(cxs_gpu_loader_set_epoch(l, 6), 0);
            ck_assert_int_eq(cxs_gpu_loader_position(l, &at), 0);
            check_follows(&at, kind, 6, 0, 0);
            /* the saved position refused for what it is not */
            cxs_position bad = at;
            bad.kind = kind == CXS_POSITION_GPU_POOL ? CXS_POSITION_FRAMES : CXS_POSITION_GPU_POOL;
            ck_assert_int_eq(cxs_gpu_loader_seek(l, &bad, &d), CXS_E_INVALID);
            ck_assert_msg(strstr(d.message, "another kind of loader"), "%s", d.message);
            bad = at, bad.version = CXS_POSITION_VERSION + 1;
            ck_assert_int_eq(cxs_gpu_loader_seek(l, &bad, &d), CXS_E_INVALID);
            bad = at, bad.next = info.num_frames + 1;
            ck_assert_int_eq(cxs_gpu_loader_seek(l, &bad, &d), CXS_E_INVALID);
            ck_assert_msg(strstr(d.message, "past this rank's"), "%s", d.message);
            /* a good one continues there */
            bad = at, bad.next = 300;
            ck_assert_int_eq(cxs_gpu_loader_seek(l, &bad, &d), 0);
            ck_assert_int_eq(cxs_gpu_loader_next(l, stream, &b), 0);
            ck_assert_uint_eq(b->position, 300);
            cxs_gpu_loader_free(l);
        }
    }
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

TEST(gpu_and_cpu_loaders_continue_each_other) {
    /* stream and resident serve the CPU loader's batches: a position of
     * either seeks the other, which serves the sampler's next frames */
    cxs_dataset *ds = open_ds(path_f32);
    cxs_sampler *s = sampler(ds, CXS_SAMPLER_SHUFFLE, 0, 1);
    cxs_loader_opts co;
    cxs_loader_opts_init(&co);
    co.k = 4, co.batch_size = 64, co.threads = 2, co.labels = 1;
    cxs_loader *cl;
    ck_assert_int_eq(cxs_loader_create_ex(ds, s, &co, 2, 0, &cl, NULL), 0);
    const cxs_batch *cb;
    for (int i = 0; i < 3; i++) ck_assert_int_eq(cxs_loader_next(cl, &cb), 0);
    cxs_position at;
    ck_assert_int_eq(cxs_loader_position(cl, &at), 0);
    ck_assert_uint_eq(at.next, 192);
    const uint32_t modes[] = {CXS_GPU_STREAM, CXS_GPU_RESIDENT};
    for (int m = 0; m < 2; m++) {
        cxs_gpu_opts o = base_opts(modes[m], 4, 64);
        cxs_gpu_loader *l;
        cxs_diag d;
        ck_assert_int_eq(cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, NULL), 0);
        ck_assert_msg(cxs_gpu_loader_seek(l, &at, &d) == 0, "%s", d.message);
        const cxs_gpu_batch *b;
        ck_assert_int_eq(cxs_gpu_loader_next(l, stream, &b), 0);
        uint64_t f[64];
        ck_assert_int_eq(cxs_sampler_get(s, 2, 192, 64, f), 0);
        ck_assert(b->position == 192 && memcmp(f, b->frames, sizeof f) == 0);
        cxs_position g;
        ck_assert_int_eq(cxs_gpu_loader_position(l, &g), 0);
        ck_assert_int_eq(cxs_loader_seek(cl, &g, &d), 0);
        ck_assert_int_eq(cxs_loader_next(cl, &cb), 0);
        ck_assert_uint_eq(cb->position, 256);
        ck_assert_int_eq(cxs_loader_seek(cl, &at, &d), 0); /* for the next mode */
        cxs_gpu_loader_free(l);
    }
    cxs_loader_free(cl);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST_

TEST(gpu_utt_loader_positions) {
    /* this rank's batch after each one, (e + 1, 0) after the last, as the
     * CPU utterance loader's, which the positions seek both ways */
    cxs_dataset *ds = open_ds(path_seq32);
    cxs_utt_sampler_opts so;
    memset(&so, 0, sizeof so);
    so.kind = CXS_UTT_SHUFFLE, so.seed = 3, so.frame_budget = 4000;
    cxs_utt_sampler *us;
    ck_assert_int_eq(cxs_utt_sampler_create(ds, &so, &us, NULL), 0);
    uint64_t len;
    ck_assert_int_eq(cxs_utt_sampler_length(us, 1, NULL, &len), 0);
    ck_assert_uint_gt(len, 4);
    cxs_gpu_utt_opts go;
    memset(&go, 0, sizeof go);
    go.device = device, go.labels = 1;
    cxs_gpu_utt_loader *gl;
    cxs_diag d;
    ck_assert_msg(cxs_gpu_utt_loader_create(ds, us, &go, 1, 0, &gl, &d) == 0, "%s", d.message);
    ck_assert_uint_eq(walk_positions(gl, utts_next, utts_position, CXS_POSITION_UTTERANCES, 1),
                      len);
    cxs_position at;
    const cxs_gpu_utt_batch *b;
    /* the CPU loader continues the GPU one's place, and the reverse */
    cxs_utt_loader_opts co;
    memset(&co, 0, sizeof co);
    co.threads = 2, co.labels = 1;
    cxs_utt_loader *cl;
    ck_assert_int_eq(cxs_utt_loader_create_ex(ds, us, &co, 0, 0, &cl, NULL), 0);
    ck_assert_int_eq(cxs_gpu_utt_loader_set_epoch(gl, 1), 0); /* served to its end: from 0 */
    for (int i = 0; i < 2; i++) ck_assert_int_eq(cxs_gpu_utt_loader_next(gl, stream, &b), 0);
    ck_assert_int_eq(cxs_gpu_utt_loader_position(gl, &at), 0);
    check_follows(&at, CXS_POSITION_UTTERANCES, 1, 2, 0);
    ck_assert_msg(cxs_utt_loader_seek(cl, &at, &d) == 0, "%s", d.message);
    const cxs_utt_batch *cb;
    ck_assert_int_eq(cxs_utt_loader_next(cl, &cb), 0);
    ck_assert_uint_eq(cb->index, 2);
    cxs_position c;
    ck_assert_int_eq(cxs_utt_loader_position(cl, &c), 0);
    ck_assert_int_eq(cxs_gpu_utt_loader_seek(gl, &c, &d), 0);
    ck_assert_int_eq(cxs_gpu_utt_loader_next(gl, stream, &b), 0);
    ck_assert_uint_eq(b->index, 3);
    uint64_t *u = malloc(cxs_utt_sampler_max_batch(us) * 8), g;
    uint32_t n;
    ck_assert_int_eq(cxs_utt_sampler_batch(us, 1, 3, u, cxs_utt_sampler_max_batch(us), &n, &g), 0);
    ck_assert(n == b->n && memcmp(u, b->utts, n * 8) == 0);
    free(u);
    /* refusals: another kind, past the rank's batches */
    c.kind = CXS_POSITION_FRAMES;
    ck_assert_int_eq(cxs_gpu_utt_loader_seek(gl, &c, &d), CXS_E_INVALID);
    ck_assert_msg(strstr(d.message, "GPU utterance loader: the position is of another kind"),
                  "%s", d.message);
    c.kind = CXS_POSITION_UTTERANCES, c.next = len + 1;
    ck_assert_int_eq(cxs_gpu_utt_loader_seek(gl, &c, &d), CXS_E_INVALID);
    ck_assert_msg(strstr(d.message, "past this rank's"), "%s", d.message);
    cxs_utt_loader_free(cl);
    cxs_gpu_utt_loader_free(gl);
    cxs_utt_sampler_free(us);
    cxs_dataset_close(ds);
}
END_TEST_

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    snprintf(golden, sizeof golden, "%s", argv[3]);
    if (strcmp(argv[2], "cuda") == 0) {
        cxs_gpu_probe_info pi;
        if (cxs_gpu_probe(0, &pi) != 0) {
            printf("SKIP: %s\n", pi.reason);
            return 77;
        }
        device = 0;
#ifdef CXS_HAVE_CUDA
        cudaStream_t st;
        if (cudaSetDevice(0) || cudaStreamCreate(&st)) return 3;
        stream = st;
#else
        return 77;
#endif
    } else if (strcmp(argv[2], "emulate") != 0) {
        return 2;
    }
    snprintf(dir, sizeof dir, "/tmp/cxs-gpu-XXXXXX");
    if (!mkdtemp(dir)) return 3;
    snprintf(path_f32, sizeof path_f32, "%s/f32", dir);
    snprintf(path_f16, sizeof path_f16, "%s/f16", dir);
    snprintf(path_bf16z, sizeof path_bf16z, "%s/bf16z", dir);
    snprintf(path_nolab, sizeof path_nolab, "%s/nolab", dir);
    snprintf(path_seq32, sizeof path_seq32, "%s/seq32", dir);
    snprintf(path_seq16, sizeof path_seq16, "%s/seq16", dir);
    snprintf(path_q8, sizeof path_q8, "%s/q8", dir);
    snprintf(path_q16, sizeof path_q16, "%s/q16", dir);
    snprintf(path_q8z, sizeof path_q8z, "%s/q8z", dir);
    char cmd[8192];
    const char *x = argv[1];
    /* several shards, guard rows narrower than some contexts */
    snprintf(cmd, sizeof cmd,
             "'%s' synth '%s/raw' --utts 70 --seed 5 --quiet && "
             "'%s' pack '%s/raw' '%s' --guard 8 --shard-size 1M --quiet && "
             "'%s' pack '%s/raw' '%s' --dtype f16 --guard 4 --shard-size 700K --quiet && "
             "'%s' pack '%s/raw' '%s' --dtype bf16 --compress zstd --chunk-size 20K --quiet && "
             "mkdir '%s/raw2' && cp -r '%s/raw/mfcc' '%s/raw2/' && "
             "'%s' pack '%s/raw2' '%s' --quiet && "
             "'%s' pack '%s/raw' '%s' --transcripts both --guard 2 --shard-size 600K --quiet && "
             "'%s' pack '%s/raw' '%s' --transcripts both --dtype f16 --compress zstd --chunk-size 20K --quiet && "
             "'%s' pack '%s/raw' '%s' --transcripts both --dtype q8 --shard-size 600K --quiet && "
             "'%s' pack '%s/raw' '%s' --transcripts both --dtype q16 --quiet && "
             "'%s' pack '%s/raw' '%s' --transcripts both --dtype q8 --compress zstd --chunk-size 20K "
             "--quiet",
             x, dir, x, dir, path_f32, x, dir, path_f16, x, dir, path_bf16z, dir, dir, dir, x, dir,
             path_nolab, x, dir, path_seq32, x, dir, path_seq16, x, dir, path_q8, x, dir, path_q16,
             x, dir, path_q8z);
    if (system(cmd) != 0) return 3;
    const TTest *tests[] = {
        modes_f32, modes_f32_normalized_staged, modes_f16_wide_context, modes_bf16_compressed,
        utt_batches_equal_the_cpu_loaders, coded_batches_equal_the_cpus, resident_q8_takes_a_quarter,
        coded_uploads_a_quarter,
        coded_damaged_header_is_refused,
        queued_consumer_work_reads_its_batch, free_with_work_queued, utt_refusals_name_the_option,
        consumer_switching_streams_reads_its_batches, held_batches_are_never_refilled,
        caller_device_is_kept, host_waits_block, default_budget_leaves_room,
        launch_errors_are_the_launchs_own, refused_registration_falls_back,
        pinned_memory_limit_is_named, forked_child_is_refused,
        bf16_output_and_drop_last, resume_and_reset, pool_resume_mid_epoch, pool_ranks,
        pool_elastic_resume, pool_order_is_deterministic_and_mixed,
        pool_segments_smaller_than_a_batch,
        mode_selection, device_probe, resident_upload_of_a_truncated_shard,
        pool_meets_a_truncated_shard, utterance_loader_meets_a_truncated_shard,
        gpu_loader_positions, gpu_and_cpu_loaders_continue_each_other,
        gpu_utt_loader_positions,
#ifdef CXS_HAVE_CUDA
        no_leaked_device_memory,
#endif
    };
    int n = (int)(sizeof tests / sizeof *tests);
    if (device == CXS_GPU_EMULATE) {
#ifdef CXS_HAVE_CUDA
        n--; /* device memory accounting needs a device */
#endif
    }
    /* CXS_GPU_TEST_QUICK=1: one test per mode and data type, and the
     * utterance loader's, for slow runs (valgrind, compute-sanitizer) */
    const char *q = getenv("CXS_GPU_TEST_QUICK");
    if (q && *q == '1') coded_light = 1, n = 7;
    const int emu = device == CXS_GPU_EMULATE;
    const cxs_group g[] = {{"all", 300, emu ? emu_setup : NULL, emu ? emu_teardown : NULL, tests,
                            n, gpu_forks}};
    /* (a CUDA context does not survive fork) */
    int rc = cxs_run_groups(emu ? "gpu-emulated" : "cuda", g, CXS_N(g), !emu) ? 1 : 0;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 3;
    return rc;
}
