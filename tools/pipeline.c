/* pipeline.c - the read/convert pipeline of pack and check (pipeline.h). */
#include "pipeline.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static void *worker(void *arg) {
    pipeline *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop && p->next < p->end) {
        if (p->next >= p->consumed + p->nslots) {
            pthread_cond_wait(&p->cv_work, &p->mu);
            continue;
        }
        size_t i = p->next++;
        slot *s = &p->slots[i % p->nslots];
        pthread_mutex_unlock(&p->mu);
        s->why[0] = 0;
        int st = utt_load(&s->u, p->rs, i, &p->co, s->why, sizeof s->why);
        pthread_mutex_lock(&p->mu);
        s->status = st;
        s->ready = 1;
        pthread_cond_broadcast(&p->cv_ready);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int pipeline_start(pipeline *p, const raw_set *rs, const conv_opts *co, unsigned threads,
                   size_t begin, size_t end) {
    memset(p, 0, sizeof *p);
    p->rs = rs;
    p->next = p->consumed = begin;
    p->end = end;
    p->co = *co;
    p->nslots = 2 * (size_t)threads + 2;
    p->slots = calloc(p->nslots, sizeof *p->slots);
    p->threads = calloc(threads, sizeof *p->threads);
    if (!p->slots || !p->threads) return -ENOMEM;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_ready, NULL);
    for (unsigned t = 0; t < threads; t++) {
        if (pthread_create(&p->threads[t], NULL, worker, p) != 0) break;
        p->nthreads++;
    }
    return p->nthreads ? 0 : -EAGAIN;
}

slot *pipeline_get(pipeline *p, size_t i) {
    slot *s = &p->slots[i % p->nslots];
    pthread_mutex_lock(&p->mu);
    while (!s->ready) pthread_cond_wait(&p->cv_ready, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return s;
}

void pipeline_release(pipeline *p, size_t i) {
    pthread_mutex_lock(&p->mu);
    p->slots[i % p->nslots].ready = 0;
    p->consumed = i + 1;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
}

void pipeline_stop(pipeline *p) {
    if (p->threads) {
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
        for (unsigned t = 0; t < p->nthreads; t++) pthread_join(p->threads[t], NULL);
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->cv_work);
        pthread_cond_destroy(&p->cv_ready);
    }
    if (p->slots)
        for (size_t i = 0; i < p->nslots; i++) utt_free(&p->slots[i].u);
    free(p->slots);
    free(p->threads);
    memset(p, 0, sizeof *p);
}

typedef struct probe_job {
    const raw_set *rs;
    uint64_t *T;
    uint32_t *D;
    size_t a, b;
} probe_job;

static void *probe_thread(void *arg) {
    probe_job *j = arg;
    for (size_t i = j->a; i < j->b; i++) raw_probe(j->rs, i, &j->T[i], &j->D[i]);
    return NULL;
}

void probe_all(const raw_set *rs, unsigned threads, uint64_t *T, uint32_t *D) {
    size_t n = rs->n;
    unsigned nt = threads < 1 ? 1 : threads > 64 ? 64 : threads;
    if (nt > n) nt = n ? (unsigned)n : 1;
    probe_job jobs[64];
    pthread_t tid[64];
    int started[64] = {0};
    for (unsigned t = 0; t < nt; t++) {
        jobs[t] = (probe_job){rs, T, D, n * t / nt, n * (t + 1) / nt};
        started[t] = t > 0 && pthread_create(&tid[t], NULL, probe_thread, &jobs[t]) == 0;
    }
    for (unsigned t = 0; t < nt; t++)
        if (!started[t]) probe_thread(&jobs[t]);
    for (unsigned t = 1; t < nt; t++)
        if (started[t]) pthread_join(tid[t], NULL);
}

static int cmp_count_desc(const void *a, const void *b) {
    const uint64_t *x = a, *y = b; /* {count, width} */
    if (x[0] != y[0]) return x[0] < y[0] ? 1 : -1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

uint32_t width_majority(const raw_set *rs, const uint32_t *D, char *census, size_t cn,
                        const char **odd) {
    /* Few distinct widths in any real dataset: a short list, counted. */
    enum { MAXW = 64 };
    uint64_t w[MAXW][2];
    size_t nw = 0, other = 0;
    census[0] = 0;
    *odd = NULL;
    for (size_t i = 0; i < rs->n; i++) {
        if (!D[i]) continue;
        size_t k = 0;
        while (k < nw && w[k][1] != D[i]) k++;
        if (k == nw) {
            if (nw == MAXW) {
                other++;
                continue;
            }
            w[nw][0] = 0;
            w[nw++][1] = D[i];
        }
        w[k][0]++;
    }
    if (nw == 0) return 0;
    qsort(w, nw, sizeof *w, cmp_count_desc);
    if (nw == 1) return (uint32_t)w[0][1];
    size_t len = (size_t)snprintf(census, cn, "%llu files of %llu",
                                  (unsigned long long)w[0][0], (unsigned long long)w[0][1]);
    for (size_t k = 1; k < nw && k < 4 && len < cn; k++)
        len += (size_t)snprintf(census + len, cn - len, ", %llu of %llu",
                                (unsigned long long)w[k][0], (unsigned long long)w[k][1]);
    if (nw > 4 || other)
        len += (size_t)snprintf(census + len, cn - len, ", and others");
    /* Name the odd file when the minority is a single one: that is the
     * file to look at. */
    if (w[1][0] == 1)
        for (size_t i = 0; i < rs->n && !*odd; i++)
            if (D[i] == w[1][1]) *odd = rs->items[i].mfcc;
    return (uint32_t)w[0][1];
}

void width_check(slot *s, const raw_set *rs, size_t i, uint32_t *D, const char *census) {
    if (s->status) return;
    if (*D == 0) {
        *D = s->u.D;
        return;
    }
    if (s->u.D != *D && s->u.T == *D && s->u.T < s->u.D) {
        s->status = -1;
        snprintf(s->why, sizeof s->why,
                 "%s: shape [%llu, %u] looks transposed: most files are [frames, %u]; save it "
                 "as [frames, features] (numpy: np.ascontiguousarray(x.T))",
                 rs->items[i].mfcc, (unsigned long long)s->u.T, s->u.D, *D);
    } else if (s->u.D != *D) {
        s->status = -1;
        snprintf(s->why, sizeof s->why,
                 "%s: %u features per frame, expected %u like most files (widths: %s); "
                 "re-extract it with the same features as the others, or leave it out with "
                 "--on-error skip", rs->items[i].mfcc, s->u.D, *D,
                 census[0] ? census : "the others");
    }
}

static int load_vocab(const char *path, const char *sos, const char *eos, vocab *v) {
    char why[WHY_SIZE];
    if (path ? vocab_load(v, path, why, sizeof why) : vocab_default(v)) {
        warnx_("%s", path ? why : "out of memory");
        vocab_free(v);
        return path ? EXIT_USAGE : EXIT_SYSTEM;
    }
    if (vocab_markers(v, sos, eos, why, sizeof why)) {
        warnx_("%s", why);
        vocab_free(v);
        return EXIT_USAGE;
    }
    return 0;
}

int open_raw(const char *rawdir, const char *vocab_path, const char *sos, const char *eos,
             raw_set *rs, vocab *v) {
    char why[WHY_SIZE];
    memset(v, 0, sizeof *v);
    if (raw_list(rawdir, rs, why, sizeof why)) {
        warnx_("%s", why);
        return EXIT_DATA;
    }
    for (const char *l = rs->notes; l && *l;) {
        const char *e = strchr(l, '\n');
        warnx_("%.*s", (int)(e - l), l);
        l = e + 1;
    }
    int ec = rs->has_transcripts ? load_vocab(vocab_path, sos, eos, v) : 0;
    if (ec) raw_free(rs);
    return ec;
}
