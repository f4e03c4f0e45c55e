/* merge.c - `ctxshard merge PART... OUT`: partial datasets (pack --part
 * I/N) into one, byte-identical to a single pack.  The library does the
 * work (cxs_writer_merge: the checks, the shards, the manifest, the atomic
 * commit); this is its command line. */
#include <errno.h>
#include <stdio.h>

#include "ctxshard.h"
#include "ctxshard_writer.h"
#include "pack.h"
#include "util.h"

static int stop_on_signal(void *user, uint64_t done, uint64_t total) {
    (void)user;
    (void)done;
    (void)total;
    return g_interrupted;
}

int merge_run(char **dirs, int n, const char *out, int move, int quiet) {
    cxs_merge_info mi;
    cxs_diag d = {0};
    double t0 = now_seconds();
    install_signal_flag(); /* before anything exists that a signal would strand */
    int rc = cxs_writer_merge((const char *const *)dirs, (uint32_t)n, out, stop_on_signal, NULL,
                              &mi, &d);
    if (rc) {
        warnx_("%s", d.message[0] ? d.message : cxs_strerror(rc));
        return rc == CXS_E_INPUT ? EXIT_DATA : rc == -EEXIST ? EXIT_USAGE : EXIT_SYSTEM;
    }
    if (mi.w.stale_removed && !quiet)
        warnx_("removed %u temporary director%s beside %s, left by an interrupted pack",
               mi.w.stale_removed, mi.w.stale_removed == 1 ? "y" : "ies", out);
    if (move) /* the dataset is complete: the parts go */
        for (int i = 0; i < n; i++) remove_tree(dirs[i]);
    if (!quiet)
        printf("merged %d part%s into %s: %llu utterance%s, %llu frames, %u shard%s (%u linked, "
               "%u copied) in %.2f s\n",
               n, n == 1 ? "" : "s", out, (unsigned long long)mi.w.num_utterances,
               mi.w.num_utterances == 1 ? "" : "s", (unsigned long long)mi.w.num_frames,
               mi.w.num_shards, mi.w.num_shards == 1 ? "" : "s", mi.shards_linked,
               mi.shards_copied, now_seconds() - t0);
    return 0;
}
