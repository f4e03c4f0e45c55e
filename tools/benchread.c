/* benchread.c - `ctxshard bench-read`: how fast the loader serves windows. */
#include "benchread.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"
#include "util.h"

int bench_read_run(const char *dir, const bench_read_opts *o) {
    cxs_dataset *ds;
    double t0 = now_seconds();
    int rc = open_dataset(dir, NULL, &ds);
    if (rc) return rc;
    double t_open = now_seconds() - t0;
    cxs_info in;
    cxs_dataset_info(ds, &in);
    cxs_sampler_opts so = {o->sampler, o->seed, 0, 1, 0, 0, NULL};
    cxs_sampler *s = NULL;
    cxs_loader *l = NULL;
    int ec = 0;
    double t1 = now_seconds();
    if (o->sampler == CXS_SAMPLER_WEIGHTED && !in.label_width) {
        warnx_("%s: --sampler weighted needs labels (it balances the classes), and this "
               "dataset has none (features only, like a test split): use --sampler shuffle "
               "or sequential",
               dir);
        ec = EXIT_USAGE;
        goto out;
    }
    if ((rc = cxs_sampler_create(ds, &so, &s))) {
        warnx_("%s: cannot create the sampler: %s", dir, cxs_strerror(rc));
        ec = exit_code_for(rc);
        goto out;
    }
    double t_sampler = now_seconds() - t1;
    cxs_loader_opts lo = {o->k, o->batch, o->threads, 0, 0, 0, in.label_width ? 1u : 0u, 0};
    t1 = now_seconds();
    if ((rc = cxs_loader_create(ds, s, &lo, 0, 0, &l))) {
        warnx_("%s: cannot start the loader: %s", dir, cxs_strerror(rc));
        ec = exit_code_for(rc);
        goto out;
    }
    const cxs_batch *b;
    uint64_t samples = 0, batches = 0;
    double first = 0;
    double start = now_seconds();
    while (batches < o->batches) {
        if ((rc = cxs_loader_next(l, &b))) {
            warnx_("%s: %s", dir, cxs_strerror(rc));
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
    static const char *names[] = {"sequential", "shuffle", "weighted"};
    printf("%s: %llu frames, dim %u, %s; k=%u, batch %u, %u thread%s, %s sampler\n", dir,
           (unsigned long long)in.num_frames, in.dim,
           in.dtype == CXS_DTYPE_F32 ? "float32" : in.dtype == CXS_DTYPE_F16 ? "float16" : "bfloat16",
           o->k, o->batch, o->threads, o->threads == 1 ? "" : "s", names[o->sampler]);
    printf("  open %.2f ms, sampler %.2f ms, first batch %.2f ms\n", t_open * 1e3,
           t_sampler * 1e3, first * 1e3);
    printf("  %llu batches, %llu samples in %.3f s: %.0f samples/s, %.2f GB/s of window data\n",
           (unsigned long long)batches, (unsigned long long)samples, dt, (double)samples / dt,
           bytes / dt / 1e9);
out:
    cxs_loader_free(l);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
    return ec;
}
