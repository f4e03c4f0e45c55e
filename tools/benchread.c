/* benchread.c - `ctxshard bench-read`: how fast the loader serves windows. */
#include "benchread.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"
#include "cxs_format.h"
#include "util.h"

/* Bytes this process made the kernel read from storage (page cache
 * misses, read-ahead included); UINT64_MAX when /proc/self/io is not
 * there. */
static uint64_t read_bytes(void) {
    FILE *f = fopen("/proc/self/io", "r");
    if (!f) return UINT64_MAX;
    char line[128];
    unsigned long long v = 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "read_bytes: %llu", &v) == 1;
    fclose(f);
    return found ? v : UINT64_MAX;
}

int bench_read_run(const char *dir, const bench_read_opts *o) {
    cxs_dataset *ds;
    double t0 = now_seconds();
    cxs_open_opts oo = {.cache_bytes = CXS_DEFAULT_CACHE_BYTES, .hugepage_budget = o->hugepages};
    /* a URL read in block order is streamed: its features come as the
     * loader reads them (--no-stream: fetched whole first) */
    if (o->sampler == CXS_SAMPLER_BLOCK && !o->no_stream) oo.flags = CXS_OPEN_STREAM;
    int rc = open_dataset(dir, &oo, &ds);
    if (rc) return rc;
    /* a stream's batch may wait long for a slow server: Ctrl-C is looked
     * at between 100 ms waits, and ends the transfers (the loader freed) */
    const int streamed = g_was_fetched && g_fetched.streamed;
    if (streamed) install_signal_flag();
    double t_open = now_seconds() - t0;
    cxs_info in;
    cxs_dataset_info(ds, &in);
    cxs_sampler_opts so = {.kind = o->sampler, .seed = o->seed, .world_size = 1,
                           .memory_bytes = o->memory, .blocks = o->blocks};
    cxs_diag d = {0};
    cxs_sampler *s = NULL;
    cxs_loader *l = NULL;
    int ec = 0;
    double t1 = now_seconds();
    if (o->sampler == CXS_SAMPLER_WEIGHTED && !in.label_width) {
        warnx_("%s: --sampler weighted needs frame labels (it balances the classes), and "
               "this dataset has none (%s): use --sampler shuffle or sequential",
               dir, in.label_seqs ? "label sequences only" : "features only, like a test split");
        ec = EXIT_USAGE;
        goto out;
    }
    if ((rc = cxs_sampler_create_ex(ds, &so, &s, &d))) {
        warnx_("%s: cannot create the sampler: %s", dir, d.message[0] ? d.message : cxs_strerror(rc));
        /* a --memory too small for the data is the option's fault */
        ec = rc == CXS_E_RANGE || rc == CXS_E_INVALID ? EXIT_USAGE : exit_code_for(rc);
        goto out;
    }
    double t_sampler = now_seconds() - t1;
    cxs_loader_opts lo = {.k = o->k, .batch_size = o->batch, .threads = o->threads,
                          .labels = in.label_width ? 1u : 0u};
    uint64_t io0 = read_bytes();
    t1 = now_seconds();
    if ((rc = cxs_loader_create_ex(ds, s, &lo, 0, 0, &l, &d))) {
        warnx_("%s: cannot start the loader: %s", dir, d.message[0] ? d.message : cxs_strerror(rc));
        ec = exit_code_for(rc);
        goto out;
    }
    const cxs_batch *b;
    uint64_t samples = 0, batches = 0;
    double first = 0;
    double start = now_seconds();
    while (batches < o->batches) {
        rc = streamed ? cxs_loader_next_timed(l, &b, 100, &d) : cxs_loader_next_ex(l, &b, &d);
        if (streamed && g_interrupted) {
            warnx_("%s: interrupted", dir);
            ec = EXIT_SYSTEM;
            goto out;
        }
        if (rc == -ETIMEDOUT && streamed) continue;
        if (rc) {
            /* the message names the shard (and the utterance) itself */
            warnx_("%s", d.message[0] ? d.message : cxs_strerror(rc));
            ec = exit_code_for(rc);
            goto out;
        }
        if (!b) { /* next epoch */
            if ((rc = cxs_loader_reset(l, batches, 0))) break;
            continue;
        }
        if (!batches) first = now_seconds() - t1;
        samples += b->n;
        batches++;
    }
    double dt = now_seconds() - start;
    double bytes = (double)samples * (2.0 * o->k + 1) * in.dim * sizeof(float);
    uint64_t io1 = read_bytes();
    uint64_t io = io0 == UINT64_MAX || io1 == UINT64_MAX ? UINT64_MAX : io1 - io0;
    static const char *names[] = {"sequential", "shuffle", "weighted", "block"};
    printf("%s: %llu frames, dim %u, %s; k=%u, batch %u, %u thread%s, %s sampler\n", dir,
           (unsigned long long)in.num_frames, in.dim,
           cxs_dtype_name(in.dtype),
           o->k, o->batch, o->threads, o->threads == 1 ? "" : "s", names[o->sampler]);
    printf("  open %.2f ms, sampler %.2f ms, first batch %.2f ms\n", t_open * 1e3,
           t_sampler * 1e3, first * 1e3);
    printf("  %llu batches, %llu samples in %.3f s: %.0f samples/s, %.2f GB/s of window data\n",
           (unsigned long long)batches, (unsigned long long)samples, dt, (double)samples / dt,
           bytes / dt / 1e9);
    if (o->sampler == CXS_SAMPLER_BLOCK)
        printf("  memory %llu bytes: blocks of %llu bytes, %llu blocks an epoch, %u drawn from "
               "at once\n",
               (unsigned long long)o->memory, (unsigned long long)cxs_sampler_block_bytes(s),
               (unsigned long long)cxs_sampler_num_blocks(s, 0), o->blocks ? o->blocks : 8);
    if (o->hugepages) {
        cxs_hugepage_info hi;
        cxs_dataset_hugepages(ds, &hi);
        if (hi.bytes)
            printf("  served from a copy in huge pages: %llu bytes (%llu in huge pages)\n",
                   (unsigned long long)hi.bytes, (unsigned long long)hi.huge_bytes);
        else
            printf("  served from the mapping, no copy in huge pages: %s\n", hi.reason);
    }
    if (io != UINT64_MAX)
        printf("  read from disk: %llu bytes (%.2f of the features)\n", (unsigned long long)io,
               (double)io / (double)in.feature_bytes);
    if (g_was_fetched && g_fetched.streamed)
        printf("  fetched from the URL: %llu bytes at open (the metadata, %.2f s), %llu bytes of "
               "features while reading (%.3f of the features; streamed)\n",
               (unsigned long long)g_fetched.bytes_fetched, g_fetched.seconds,
               (unsigned long long)cxs_dataset_fetched(ds),
               (double)cxs_dataset_fetched(ds) / (double)in.feature_bytes);
    else if (g_was_fetched)
        printf("  fetched from the URL: %llu bytes of the dataset's %llu (%s, %.2f s)\n",
               (unsigned long long)g_fetched.bytes_fetched,
               (unsigned long long)g_fetched.dataset_bytes,
               g_fetched.cached ? "the cache had it: the manifest only" : "downloaded and verified",
               g_fetched.seconds);
out:
    cxs_loader_free(l);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
    return ec;
}

int bench_mix_run(int n, char **dirs, const bench_read_opts *o) {
    cxs_dataset *ds[CXS_MIX_MAX_SOURCES] = {0};
    cxs_mix *m = NULL;
    cxs_mix_loader *l = NULL;
    cxs_diag d = {0};
    int ec = 0, rc, labels;
    cxs_open_opts oo = {.cache_bytes = CXS_DEFAULT_CACHE_BYTES};
    if ((ec = open_datasets("bench-read", n, dirs, &oo, ds, &labels))) return ec;
    cxs_info in0;
    cxs_dataset_info(ds[0], &in0);
    const uint32_t dim = in0.dim;
    cxs_mix_opts mo;
    cxs_mix_opts_init(&mo);
    mo.kind = o->sampler;
    mo.seed = o->seed;
    mo.batch_size = o->batch;
    mo.weights = o->nweights ? o->weights : NULL;
    mo.temperature = o->temperature;
    mo.epoch_size = o->epoch_size;
    if (o->sampler == CXS_SAMPLER_BLOCK) mo.memory_bytes = o->memory, mo.blocks = o->blocks;
    double t1 = now_seconds();
    if ((rc = cxs_mix_create((const cxs_dataset *const *)ds, (uint32_t)n, &mo, &m, &d))) {
        warnx_("bench-read: cannot create the mixture: %s", d.message[0] ? d.message : cxs_strerror(rc));
        ec = rc == CXS_E_INVALID ? EXIT_USAGE : exit_code_for(rc);
        goto out;
    }
    double t_mix = now_seconds() - t1;
    cxs_loader_opts lo = {.k = o->k, .threads = o->threads, .labels = (uint32_t)labels};
    t1 = now_seconds();
    if ((rc = cxs_mix_loader_create(m, &lo, 0, 0, &l, &d))) {
        warnx_("bench-read: cannot start the mixture loader: %s",
               d.message[0] ? d.message : cxs_strerror(rc));
        ec = rc == CXS_E_INVALID ? EXIT_USAGE : exit_code_for(rc);
        goto out;
    }
    uint64_t samples = 0, batches = 0, per[CXS_MIX_MAX_SOURCES] = {0}, epoch = 0;
    double first = 0, start = now_seconds();
    const cxs_mix_frames *b;
    while (batches < o->batches) {
        if ((rc = cxs_mix_loader_next(l, &b, &d))) {
            warnx_("%s", d.message[0] ? d.message : cxs_strerror(rc));
            ec = exit_code_for(rc);
            goto out;
        }
        if (!b) { /* next epoch */
            if ((rc = cxs_mix_loader_reset(l, ++epoch, 0))) break;
            continue;
        }
        if (!batches) first = now_seconds() - t1;
        for (size_t j = 0; j < b->n; j++) per[b->source[j]]++;
        samples += b->n;
        batches++;
    }
    double dt = now_seconds() - start;
    double bytes = (double)samples * (2.0 * o->k + 1) * dim * sizeof(float);
    printf("mixture of %d datasets: epoch of %llu samples, batch %u, k=%u, %u thread%s, %s\n", n,
           (unsigned long long)cxs_mix_epoch_size(m), o->batch, o->k, o->threads,
           o->threads == 1 ? "" : "s",
           o->sampler == CXS_SAMPLER_SHUFFLE  ? "shuffled"
           : o->sampler == CXS_SAMPLER_BLOCK ? "in block order"
                                             : "in order");
    for (int i = 0; i < n; i++) {
        cxs_info in;
        cxs_dataset_info(ds[i], &in);
        printf("  [%d] %s: %llu frames, share %.4f, %llu an epoch; served %llu (%.4f)\n", i,
               dirs[i], (unsigned long long)in.num_frames, cxs_mix_share(m, (uint32_t)i),
               (unsigned long long)cxs_mix_quota(m, (uint32_t)i), (unsigned long long)per[i],
               samples ? (double)per[i] / (double)samples : 0.0);
    }
    printf("  mixture %.2f ms, first batch %.2f ms\n", t_mix * 1e3, first * 1e3);
    printf("  %llu batches, %llu samples in %.3f s: %.0f samples/s, %.2f GB/s of window data\n",
           (unsigned long long)batches, (unsigned long long)samples, dt, (double)samples / dt,
           bytes / dt / 1e9);
out:
    cxs_mix_loader_free(l);
    cxs_mix_free(m);
    for (int i = 0; i < n; i++) cxs_dataset_close(ds[i]);
    return ec;
}
