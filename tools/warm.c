/* warm.c - `ctxshard warm`: read a dataset into the page cache sequentially,
 * at the disk's rate, before training reads it at random. */
#include "warm.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ctxshard.h"
#include "util.h"

static int on_progress(void *user, uint64_t done, uint64_t total) {
    progress_update(user, done >> 20, total >> 20, "MiB");
    return g_interrupted;
}

int warm_run(const char *dir, int force, int quiet, int json) {
    cxs_dataset *ds;
    cxs_diag d = {0};
    int rc = cxs_dataset_open(dir, &ds, &d);
    if (rc) return open_failed(dir, rc, &d);
    install_signal_flag();
    progress bar;
    progress_init(&bar, "warm", quiet || json);
    cxs_warm_result r;
    rc = cxs_dataset_warm(ds, force ? CXS_WARM_FORCE : 0, on_progress, &bar, &r, &d);
    progress_done(&bar);
    cxs_dataset_close(ds);
    if (rc == -ENOMEM && d.message[0]) {
        /* Not fitting is a property of this machine, not of the data. */
        fprintf(stderr, "%s (--force warms it anyway)\n", d.message);
        return EXIT_SYSTEM;
    }
    if (rc == -ECANCELED) {
        warnx_("%s: interrupted", dir);
        return EXIT_SYSTEM;
    }
    if (rc) {
        fprintf(stderr, "%s\n", d.message[0] ? d.message : cxs_strerror(rc));
        return exit_code_for(rc);
    }
    double rate = r.seconds > 0 ? (double)r.bytes_read / r.seconds : 0;
    if (json) {
        printf("{\"path\": ");
        json_print_string(dir, strlen(dir));
        printf(", \"total_bytes\": %llu, \"cached_before\": %llu, \"bytes_read\": %llu, "
               "\"seconds\": %.6f, \"bytes_per_second\": %.0f, \"available\": %llu, "
               "\"cgroup_limit\": %llu, \"fits\": %s}\n",
               (unsigned long long)r.total_bytes, (unsigned long long)r.cached_before,
               (unsigned long long)r.bytes_read, r.seconds, rate,
               (unsigned long long)r.memory.available, (unsigned long long)r.memory.cgroup_limit,
               r.fits ? "true" : "false");
        return 0;
    }
    if (quiet) return 0;
    char a[32], b[32], c[32], m[32];
    printf("%s: %s read in %.2f s, %s/s (%s of it already cached); %s of memory available%s\n",
           dir, human_bytes((double)r.bytes_read, a, sizeof a), r.seconds,
           human_bytes(rate, b, sizeof b), human_bytes((double)r.cached_before, c, sizeof c),
           human_bytes((double)r.memory.available, m, sizeof m),
           r.fits ? "" : ", not enough to keep it all cached (--force)");
    return 0;
}
