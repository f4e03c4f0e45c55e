/* benchutt.c - `ctxshard bench-utt`: whole-utterance padded batches,
 * bucketed against random batching, on the same data in one run. */
#include "benchutt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"
#include "util.h"

typedef struct figures {
    double create_ms, order_ms, resume_ms, first_ms, seconds;
    uint64_t batches, utts, frames, padded, global;
} figures;

/* One sampler (buckets: 0 the library's choice, 1 random batching) over
 * one epoch (or o->batches batches) of the loader. */
static int measure(const char *dir, cxs_dataset *ds, const bench_utt_opts *o, uint32_t buckets,
                   figures *f) {
    cxs_utt_sampler_opts so = {.kind = CXS_UTT_SHUFFLE, .seed = o->seed,
                               .frame_budget = o->frame_budget, .buckets = buckets,
                               .memory_bytes = o->memory, .blocks = o->blocks};
    cxs_info in;
    cxs_dataset_info(ds, &in);
    cxs_diag d = {0};
    cxs_utt_sampler *s = NULL;
    cxs_utt_loader *l = NULL;
    double t0 = now_seconds();
    int rc = cxs_utt_sampler_create(ds, &so, &s, &d);
    if (rc) {
        warnx_("%s: %s", dir, d.message[0] ? d.message : cxs_strerror(rc));
        return rc == CXS_E_RANGE || rc == CXS_E_INVALID ? EXIT_USAGE : exit_code_for(rc);
    }
    f->create_ms = (now_seconds() - t0) * 1e3;
    t0 = now_seconds();
    uint64_t n = 0;
    if ((rc = cxs_utt_sampler_length(s, 0, &f->global, &n))) goto fail;
    f->order_ms = (now_seconds() - t0) * 1e3;
    /* Resuming mid-epoch: a new sampler (as after a restart), the epoch's
     * order, and one batch at the middle position. */
    {
        uint64_t *u = malloc(cxs_utt_sampler_max_batch(s) * sizeof *u);
        uint32_t m;
        cxs_utt_sampler *r = NULL;
        t0 = now_seconds();
        rc = u ? cxs_utt_sampler_create(ds, &so, &r, NULL) : -ENOMEM;
        if (!rc && n) rc = cxs_utt_sampler_batch(r, 0, n / 2, u, cxs_utt_sampler_max_batch(r), &m, NULL);
        f->resume_ms = (now_seconds() - t0) * 1e3;
        cxs_utt_sampler_free(r);
        free(u);
        if (rc) goto fail;
    }
    cxs_utt_loader_opts lo = {.threads = o->threads, .labels = in.label_width ? 1u : 0u};
    t0 = now_seconds();
    if ((rc = cxs_utt_loader_create(ds, s, &lo, 0, 0, &l))) goto fail;
    const cxs_utt_batch *b;
    uint64_t want = o->batches ? o->batches : n, epoch = 0, in_epoch = 0;
    const int streamed = g_was_fetched && g_fetched.streamed;
    while (f->batches < want) {
        /* a stream's batch may wait long for a slow server: Ctrl-C is
         * looked at between 100 ms waits, and ends the transfers */
        rc = streamed ? cxs_utt_loader_next_timed(l, &b, 100, NULL) : cxs_utt_loader_next(l, &b);
        if (streamed && g_interrupted) {
            warnx_("%s: interrupted", dir);
            cxs_utt_loader_free(l);
            cxs_utt_sampler_free(s);
            return EXIT_SYSTEM;
        }
        if (rc == -ETIMEDOUT && streamed) continue;
        if (rc) goto fail;
        if (!b) {
            if (!in_epoch) break; /* an epoch without batches: nothing to measure */
            in_epoch = 0;
            if ((rc = cxs_utt_loader_reset(l, ++epoch, 0))) goto fail;
            continue;
        }
        in_epoch++;
        if (!f->batches) f->first_ms = (now_seconds() - t0) * 1e3;
        f->batches++;
        f->utts += b->n;
        f->frames += b->frames;
        f->padded += b->n * b->tmax;
    }
    f->seconds = now_seconds() - t0;
    cxs_utt_loader_free(l);
    cxs_utt_sampler_free(s);
    return 0;
fail:
    /* the loader's own message (shard, utterance, chunk) when it failed */
    if (l && cxs_utt_loader_error(l)->code) warnx_("%s", cxs_utt_loader_error(l)->message);
    else warnx_("%s: %s", dir, cxs_strerror(rc));
    cxs_utt_loader_free(l);
    cxs_utt_sampler_free(s);
    return exit_code_for(rc);
}

int bench_utt_run(const char *dir, const bench_utt_opts *o) {
    cxs_dataset *ds;
    /* a URL in block mode is streamed: its features come as the loader
     * reads them */
    cxs_open_opts oo;
    cxs_open_opts_init(&oo);
    if (o->memory) oo.flags = CXS_OPEN_STREAM;
    int rc = open_dataset(dir, &oo, &ds);
    if (rc) return rc;
    if (g_was_fetched && g_fetched.streamed) install_signal_flag(); /* (measure looks at it) */
    cxs_info in;
    cxs_dataset_info(ds, &in);
    figures f[2] = {{0}};
    static const char *names[2] = {"bucketed", "random"};
    int ec = measure(dir, ds, o, o->buckets, &f[0]);
    if (!ec) ec = measure(dir, ds, o, 1, &f[1]);
    if (ec) {
        cxs_dataset_close(ds);
        return ec;
    }
    if (o->json) {
        printf("{\"dataset\": ");
        json_print_string(dir, strlen(dir));
        printf(", \"utterances\": %llu, \"frames\": %llu, \"frame_budget\": "
               "%llu, \"threads\": %u",
               (unsigned long long)in.num_utterances, (unsigned long long)in.num_frames,
               (unsigned long long)o->frame_budget, o->threads);
        for (int i = 0; i < 2; i++)
            printf(", \"%s\": {\"batches\": %llu, \"epoch_batches\": %llu, \"utterances_per_s\": "
                   "%.1f, \"frames_per_s\": %.1f, \"padded_frames_per_s\": %.1f, "
                   "\"padding_overhead\": %.4f, \"sampler_create_ms\": %.3f, "
                   "\"epoch_order_ms\": %.3f, \"resume_ms\": %.3f, \"first_batch_ms\": %.3f}",
                   names[i], (unsigned long long)f[i].batches, (unsigned long long)f[i].global,
                   (double)f[i].utts / f[i].seconds, (double)f[i].frames / f[i].seconds,
                   (double)f[i].padded / f[i].seconds,
                   (double)f[i].padded / (double)f[i].frames, f[i].create_ms, f[i].order_ms,
                   f[i].resume_ms, f[i].first_ms);
        printf("}\n");
    } else {
        printf("%s: %llu utterances, %llu frames, dim %u; frame budget %llu, %u thread%s%s\n", dir,
               (unsigned long long)in.num_utterances, (unsigned long long)in.num_frames, in.dim,
               (unsigned long long)o->frame_budget, o->threads, o->threads == 1 ? "" : "s",
               o->memory ? ", block mode" : "");
        printf("  %-9s %8s %12s %14s %10s %10s %10s %10s\n", "batching", "batches", "utts/s",
               "frames/s", "padding", "create ms", "epoch ms", "resume ms");
        for (int i = 0; i < 2; i++)
            printf("  %-9s %8llu %12.0f %14.0f %9.3fx %10.2f %10.2f %10.2f\n", names[i],
                   (unsigned long long)f[i].batches, (double)f[i].utts / f[i].seconds,
                   (double)f[i].frames / f[i].seconds, (double)f[i].padded / (double)f[i].frames,
                   f[i].create_ms, f[i].order_ms, f[i].resume_ms);
        printf("  padding: padded frames (batch size x longest) / real frames; frames/s counts "
               "real frames\n");
        if (g_was_fetched && g_fetched.streamed)
            printf("  fetched from the URL: %llu bytes at open (the metadata), %llu bytes of "
                   "features while reading (%.3f of the features; streamed)\n",
                   (unsigned long long)g_fetched.bytes_fetched,
                   (unsigned long long)cxs_dataset_fetched(ds),
                   (double)cxs_dataset_fetched(ds) / (double)in.feature_bytes);
    }
    cxs_dataset_close(ds);
    return 0;
}

int bench_utt_mix_run(int n, char **dirs, const bench_utt_opts *o) {
    cxs_dataset *ds[CXS_MIX_MAX_SOURCES] = {0};
    cxs_mix_utt *m = NULL;
    cxs_mix_utt_loader *l = NULL;
    cxs_diag d = {0};
    int ec = 0, rc, labels;
    cxs_open_opts oo;
    cxs_open_opts_init(&oo);
    if ((ec = open_datasets("bench-utt", n, dirs, &oo, ds, &labels))) return ec;
    cxs_mix_utt_opts mo;
    cxs_mix_utt_opts_init(&mo);
    mo.kind = CXS_UTT_SHUFFLE;
    mo.seed = o->seed;
    mo.frame_budget = o->frame_budget;
    mo.buckets = o->buckets;
    mo.weights = o->nweights ? o->weights : NULL;
    mo.temperature = o->temperature;
    mo.epoch_size = o->epoch_size;
    mo.stratify = o->stratify;
    mo.memory_bytes = o->memory;
    mo.blocks = o->blocks;
    double t0 = now_seconds();
    if ((rc = cxs_mix_utt_create((const cxs_dataset *const *)ds, (uint32_t)n, &mo, &m, &d))) {
        warnx_("bench-utt: cannot create the mixture: %s",
               d.message[0] ? d.message : cxs_strerror(rc));
        ec = rc == CXS_E_INVALID || rc == CXS_E_RANGE ? EXIT_USAGE : exit_code_for(rc);
        goto out;
    }
    const double create_ms = (now_seconds() - t0) * 1e3;
    t0 = now_seconds();
    uint64_t global = 0, len = 0;
    if ((rc = cxs_mix_utt_length(m, 0, &global, &len))) {
        warnx_("bench-utt: the epoch's order: %s", cxs_strerror(rc));
        ec = exit_code_for(rc);
        goto out;
    }
    const double order_ms = (now_seconds() - t0) * 1e3;
    cxs_utt_loader_opts lo;
    cxs_utt_loader_opts_init(&lo);
    lo.threads = o->threads;
    lo.labels = (uint32_t)labels;
    t0 = now_seconds();
    if ((rc = cxs_mix_utt_loader_create(m, &lo, 0, 0, &l, &d))) {
        warnx_("bench-utt: cannot start the mixture loader: %s",
               d.message[0] ? d.message : cxs_strerror(rc));
        ec = rc == CXS_E_INVALID ? EXIT_USAGE : exit_code_for(rc);
        goto out;
    }
    uint64_t want = o->batches ? o->batches : len, batches = 0, utts = 0, frames = 0, padded = 0;
    uint64_t per[CXS_MIX_MAX_SOURCES] = {0}, epoch = 0, in_epoch = 0;
    double first = 0;
    const cxs_mix_utts *b;
    while (batches < want) {
        if ((rc = cxs_mix_utt_loader_next(l, &b, &d))) {
            warnx_("%s", d.message[0] ? d.message : cxs_strerror(rc));
            ec = exit_code_for(rc);
            goto out;
        }
        if (!b) { /* next epoch */
            if (!in_epoch) break;
            in_epoch = 0;
            if ((rc = cxs_mix_utt_loader_reset(l, ++epoch, 0))) break;
            continue;
        }
        if (!batches) first = (now_seconds() - t0) * 1e3;
        in_epoch++;
        for (size_t j = 0; j < b->batch->n; j++) per[b->source[j]]++;
        utts += b->batch->n;
        frames += b->batch->frames;
        padded += b->batch->n * b->batch->tmax;
        batches++;
    }
    const double dt = now_seconds() - t0;
    char blk[96] = "";
    if (o->memory)
        snprintf(blk, sizeof blk, ", in block order within %llu bytes (%u blocks a group)",
                 (unsigned long long)o->memory, o->blocks ? o->blocks : 8);
    printf("mixture of %d datasets: epoch of %llu utterances in %llu batches, frame budget "
           "%llu, stratified by %s%s, %u thread%s\n", n,
           (unsigned long long)cxs_mix_utt_epoch_size(m), (unsigned long long)global,
           (unsigned long long)o->frame_budget,
           o->stratify == CXS_MIX_STRATIFY_LENGTH ? "length" : "shares", blk, o->threads,
           o->threads == 1 ? "" : "s");
    for (int i = 0; i < n; i++) {
        cxs_info in;
        cxs_dataset_info(ds[i], &in);
        printf("  [%d] %s: %llu utterances, share %.4f, %llu an epoch; served %llu (%.4f)\n", i,
               dirs[i], (unsigned long long)in.num_utterances, cxs_mix_utt_share(m, (uint32_t)i),
               (unsigned long long)cxs_mix_utt_quota(m, (uint32_t)i), (unsigned long long)per[i],
               utts ? (double)per[i] / (double)utts : 0.0);
    }
    printf("  mixture %.2f ms, epoch order %.2f ms, first batch %.2f ms\n", create_ms, order_ms,
           first);
    printf("  %llu batches, %llu utterances in %.3f s: %.0f utts/s, %.0f frames/s, padding "
           "overhead %.3f\n", (unsigned long long)batches, (unsigned long long)utts, dt,
           (double)utts / dt, (double)frames / dt, frames ? (double)padded / (double)frames : 0);
out:
    cxs_mix_utt_loader_free(l);
    cxs_mix_utt_free(m);
    for (int i = 0; i < n; i++) cxs_dataset_close(ds[i]);
    return ec;
}
