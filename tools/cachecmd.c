/* cachecmd.c - the commands of datasets at URLs: `ctxshard cache
 * [ls|prune|clear]`, the node-local cache (cxs_cache_list, _prune,
 * _clear), and `ctxshard push OUT URL` (cxs_dataset_push). */
#include "cachecmd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctxshard.h"
#include "util.h"

typedef struct lister {
    int json, n;
    uint64_t bytes;
} lister;

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static int show(void *user, const cxs_cache_entry *e) {
    lister *l = user;
    char b[32], when[32];
    time_t t = (time_t)e->last_used;
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M", localtime_r(&t, &tm));
    if (l->json) {
        printf("%s{\"url\": ", l->n ? ",\n  " : "\n  ");
        json_str(e->url);
        printf(", \"dir\": ");
        json_str(e->dir);
        printf(", \"bytes\": %" PRIu64 ", \"last_used\": %" PRId64
               ", \"complete\": %s, \"streamed\": %s, \"in_use\": %s}",
               e->bytes, e->last_used, e->complete ? "true" : "false",
               e->streamed ? "true" : "false", e->in_use ? "true" : "false");
    } else {
        printf("%10s  %s  %-10s %s\n    %s\n", human_bytes((double)e->bytes, b, sizeof b), when,
               e->in_use ? "open" : e->complete ? "" : e->streamed ? "streamed" : "partial",
               e->url, e->dir);
    }
    l->n++;
    l->bytes += e->bytes;
    return 0;
}

int cache_run(const char *verb, const char *dir, uint64_t limit, int have_limit, int json) {
    char root[4096];
    if (cxs_cache_dir(dir, root, sizeof root)) {
        fprintf(stderr, "ctxshard: cache directory: path too long\n");
        return EXIT_USAGE;
    }
    cxs_diag d = {0};
    char b[32];
    if (!strcmp(verb, "ls")) {
        lister l = {.json = json};
        if (json) {
            printf("{\"dir\": ");
            json_str(root);
            printf(", \"datasets\": [");
        }
        int rc = cxs_cache_list(dir, show, &l, &d);
        if (rc) {
            fprintf(stderr, "ctxshard: %s\n", d.message);
            return exit_code_for(rc);
        }
        if (json) printf("%s], \"bytes\": %" PRIu64 "}\n", l.n ? "\n" : "", l.bytes);
        else printf("%s: %d dataset%s, %s\n", root, l.n, l.n == 1 ? "" : "s",
                    human_bytes((double)l.bytes, b, sizeof b));
        return 0;
    }
    uint64_t freed = 0;
    int rc;
    if (!strcmp(verb, "clear")) {
        rc = cxs_cache_clear(dir, &freed, &d);
    } else {
        if (!have_limit) {
            const char *e = getenv("CTXSHARD_CACHE_LIMIT");
            if (!e || parse_size(e, &limit) || !limit) {
                fprintf(stderr, "ctxshard: cache prune: give the size to prune to "
                        "(--cache-limit SIZE, or CTXSHARD_CACHE_LIMIT; 0 there means no limit: "
                        "`cache clear` empties the cache)\n");
                return EXIT_USAGE;
            }
        }
        rc = cxs_cache_prune(dir, limit, &freed, &d);
    }
    if (json) {
        printf("{\"dir\": ");
        json_str(root);
        printf(", \"freed\": %" PRIu64 ", \"complete\": %s}\n", freed, rc ? "false" : "true");
    }
    else
        printf("%s: %s freed\n", root, human_bytes((double)freed, b, sizeof b));
    if (rc) {
        fprintf(stderr, "ctxshard: %s\n", d.message);
        return EXIT_SYSTEM; /* (-EBUSY: what is open keeps it above the limit) */
    }
    return 0;
}

static int push_tick(void *user, uint64_t done, uint64_t total) {
    progress_update(user, done, total, "bytes");
    return g_interrupted;
}

int push_run(const char *dir, const char *url, int quiet) {
    progress p;
    progress_init(&p, "upload", quiet);
    install_signal_flag();
    cxs_diag d = {0};
    uint64_t sent = 0;
    double t0 = now_seconds();
    int rc = cxs_dataset_push(dir, url, push_tick, &p, &sent, &d);
    progress_done(&p);
    if (rc) {
        fprintf(stderr, "ctxshard: %s\n", d.message);
        return exit_code_for(rc);
    }
    if (!quiet) {
        char b[32];
        double dt = now_seconds() - t0;
        printf("%s -> %s: %s uploaded in %.1f s, the manifest last\n", dir, url,
               human_bytes((double)sent, b, sizeof b), dt);
    }
    return 0;
}
