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

int width_check(slot *s, const raw_set *rs, size_t i, uint32_t *D, const char **first) {
    if (s->status) return 0;
    if (*D == 0) {
        *D = s->u.D;
        *first = rs->items[i].mfcc;
        return 1;
    }
    if (s->u.D != *D) {
        s->status = -1;
        snprintf(s->why, sizeof s->why,
                 "%s: %u features per frame, expected %u like the first utterance (%s)",
                 rs->items[i].mfcc, s->u.D, *D, *first);
    }
    return 0;
}

static int load_vocab(const char *path, vocab *v) {
    char why[WHY_SIZE];
    if (path ? vocab_load(v, path, why, sizeof why) : vocab_default(v)) {
        warnx_("%s", path ? why : "out of memory");
        vocab_free(v);
        return path ? EXIT_USAGE : EXIT_SYSTEM;
    }
    return 0;
}

int open_raw(const char *rawdir, const char *vocab_path, raw_set *rs, vocab *v) {
    char why[WHY_SIZE];
    memset(v, 0, sizeof *v);
    if (raw_list(rawdir, rs, why, sizeof why)) {
        warnx_("%s", why);
        return EXIT_DATA;
    }
    int ec = rs->has_transcripts ? load_vocab(vocab_path, v) : 0;
    if (ec) raw_free(rs);
    return ec;
}
