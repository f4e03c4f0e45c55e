/* The batch ring under both loaders (lib/batch/ring.h), on its own: an
 * owner whose fills write a value computed from (epoch, batch), so that
 * every batch the consumer takes can be checked against what it must
 * hold.  In order with many workers and few slots; a batch's error handed
 * over in its turn; a restart serving only the new position, every batch
 * of the old one either taken or discarded, every held one released once;
 * fills that end early when abandoned (restart, stop); a start whose
 * threads all fail (test hooks) and then succeeds; a consumer that would
 * wait for ever told so (stalled); batches the owner publishes later; a
 * forked child that goes on from the consumer's position or restarts;
 * a cancel that ends the consumer's wait (or its next call, when it came
 * before it) with -ECANCELED, after which the consumer gets the same batch;
 * a timed wait that expires with nothing changed. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cxs_test.h"
#include "ring.h"

#define NSLOT 3
#define NWORK 4
#define VAL(epoch, b) ((epoch) * 1000000u + (b))

typedef struct owner {
    cxs_ring r;
    uint64_t epoch;          /* under r.mu */
    uint64_t claimed[NWORK]; /* the epoch each worker's claim saw */
    uint64_t val[NSLOT];
    int fail_batch;          /* this batch's fill fails (-1: none) */
    int slow_gen;            /* fills of this generation spin until abandoned (-1: none) */
    int deny;                /* can_claim refuses */
    int later;               /* fill returns CXS_RING_LATER; the publisher publishes */
    /* counts, under r.mu or atomic */
    int fills[2], discards, releases, inits, exits, abandoned;
    int waits; /* the consumer's waits begun (stalled asked), under r.mu */
    /* the publisher's queue (later), under r.mu */
    struct {
        uint32_t i;
        uint64_t b, gen;
    } q[NSLOT];
    int nq, quit;
    pthread_cond_t cv_q;
} owner;

static void claim(void *p, uint32_t w, uint32_t i, uint64_t b, uint64_t gen) {
    owner *o = p;
    o->claimed[w] = o->epoch;
    (void)i, (void)b, (void)gen;
}

/* A short, batch-dependent delay, so that workers finish out of order. */
static void jitter(uint64_t b) {
    for (uint64_t k = 0; k < (b * 2654435761u) % 7; k++) sched_yield();
}

static int fill(void *p, uint32_t w, uint32_t i, uint64_t b, uint64_t gen) {
    owner *o = p;
    uint64_t epoch = o->claimed[w];
    __atomic_add_fetch(&o->fills[epoch ? 1 : 0], 1, __ATOMIC_RELAXED);
    if ((int)gen == __atomic_load_n(&o->slow_gen, __ATOMIC_RELAXED)) {
        /* until abandoned, or until the test lets its generation go on */
        while (!cxs_ring_abandoned(&o->r, gen) &&
               (int)gen == __atomic_load_n(&o->slow_gen, __ATOMIC_RELAXED))
            sched_yield();
        if (cxs_ring_abandoned(&o->r, gen)) {
            __atomic_add_fetch(&o->abandoned, 1, __ATOMIC_RELAXED);
            return -ECANCELED;
        }
    }
    jitter(b);
    if (o->later) {
        pthread_mutex_lock(&o->r.mu);
        o->q[o->nq].i = i, o->q[o->nq].b = b, o->q[o->nq].gen = gen;
        o->nq++;
        pthread_cond_signal(&o->cv_q);
        pthread_mutex_unlock(&o->r.mu);
        return CXS_RING_LATER;
    }
    o->val[i] = VAL(epoch, b);
    if ((int)b == o->fail_batch) {
        snprintf(o->r.slot[i].diag.message, sizeof o->r.slot[i].diag.message, "batch %llu bad",
                 (unsigned long long)b);
        return CXS_E_CORRUPT;
    }
    return 0;
}

static int can_claim(void *p, uint32_t i) {
    (void)i;
    return !((owner *)p)->deny;
}

static void discard(void *p, uint32_t i) {
    ((owner *)p)->discards++;
    (void)i;
}

static void release(void *p, uint32_t i) {
    ((owner *)p)->releases++;
    (void)i;
}

static int stalled(void *p, uint32_t i) {
    owner *o = p;
    o->waits++; /* the consumer is about to wait (it holds the lock) */
    if (!o->deny) return 0;
    for (uint32_t j = 0; j < NSLOT; j++)
        if (o->r.slot[j].state == CXS_SLOT_FILLING) return 0;
    (void)i;
    return CXS_E_INVALID;
}

static void worker_init(void *p, uint32_t w) {
    __atomic_add_fetch(&((owner *)p)->inits, 1, __ATOMIC_RELAXED);
    (void)w;
}

static void worker_exit(void *p, uint32_t w) {
    __atomic_add_fetch(&((owner *)p)->exits, 1, __ATOMIC_RELAXED);
    (void)w;
}

static const cxs_ring_ops ops = {.claim = claim, .fill = fill, .can_claim = can_claim,
                                 .discard = discard, .release = release, .stalled = stalled,
                                 .worker_init = worker_init, .worker_exit = worker_exit};

static void setup(owner *o, uint64_t nbatches) {
    memset(o, 0, sizeof *o);
    o->fail_batch = -1;
    o->slow_gen = -1;
    pthread_cond_init(&o->cv_q, NULL);
    EXPECT_INT(cxs_ring_init(&o->r, &ops, o, NSLOT, NWORK, nbatches), 0);
}

/* Stop the ring; every worker started ended (a worker whose thread
 * failed to start was set up but never ran: unstarted of them). */
static void teardown_n(owner *o, int unstarted) {
    cxs_ring_stop(&o->r);
    EXPECT_INT(o->exits, o->inits - unstarted);
    cxs_ring_destroy(&o->r);
    pthread_cond_destroy(&o->cv_q);
}

static void teardown(owner *o) { teardown_n(o, 0); }

/* Take batches first..first+n-1 of epoch; each must hold its value. */
static void take(owner *o, uint64_t epoch, uint64_t first, uint64_t n) {
    for (uint64_t k = first; k < first + n; k++) {
        uint32_t i;
        EXPECT_INT(cxs_ring_next(&o->r, &i), 0);
        EXPECT_LOOP(o->r.slot[i].state == CXS_SLOT_HELD);
        EXPECT_LOOP(o->r.slot[i].batch == k);
        EXPECT_LOOP(o->r.slot[i].rc == 0);
        EXPECT_LOOP(o->val[i] == VAL(epoch, k));
    }
}

TEST(every_batch_in_order) {
    static owner o;
    setup(&o, 2000);
    EXPECT_INT(cxs_ring_start(&o.r), 0);
    EXPECT_UINT(o.r.nthreads, NWORK);
    take(&o, 0, 0, 2000);
    uint32_t i;
    EXPECT_INT(cxs_ring_next(&o.r, &i), 1); /* the end, and it stays */
    EXPECT_INT(cxs_ring_next(&o.r, &i), 1);
    EXPECT_INT(o.releases, 2000);
    EXPECT_INT(o.discards, 0);
    teardown(&o);
    EXPECT_INT(o.inits, NWORK);
}
END_TEST_

TEST(a_failed_batch_comes_in_its_turn) {
    static owner o;
    setup(&o, 40);
    o.fail_batch = 7;
    EXPECT_INT(cxs_ring_start(&o.r), 0);
    take(&o, 0, 0, 7);
    uint32_t i;
    EXPECT_INT(cxs_ring_next(&o.r, &i), 0);
    EXPECT_UINT(o.r.slot[i].batch, 7);
    EXPECT_INT(o.r.slot[i].rc, CXS_E_CORRUPT);
    ck_assert_str_eq(o.r.slot[i].diag.message, "batch 7 bad");
    take(&o, 0, 8, 32);
    teardown(&o);
}
END_TEST_

TEST(a_restart_serves_only_the_new_position) {
    for (int round = 0; round < 20; round++) {
        static owner o;
        setup(&o, 1000);
        EXPECT_INT(cxs_ring_start(&o.r), 0);
        take(&o, 0, 0, 10 + (uint64_t)round);
        pthread_mutex_lock(&o.r.mu);
        o.epoch = 1;
        cxs_ring_restart_locked(&o.r, 50);
        pthread_mutex_unlock(&o.r.mu);
        take(&o, 1, 0, 50);
        uint32_t i;
        EXPECT_INT(cxs_ring_next(&o.r, &i), 1);
        teardown(&o);
        /* every fill of the old position was taken or thrown away; every
         * batch taken was released once (the restart released the held one) */
        EXPECT_INT(o.fills[0], 10 + round + o.discards);
        EXPECT_INT(o.fills[1], 50);
        EXPECT_INT(o.releases, 10 + round + 50);
    }
}
END_TEST_

TEST(abandoned_fills_end_early) {
    static owner o;
    setup(&o, 100);
    o.slow_gen = 0; /* every fill of the first position spins until abandoned */
    EXPECT_INT(cxs_ring_start(&o.r), 0);
    pthread_mutex_lock(&o.r.mu);
    while (o.r.next_claim < NSLOT) { /* all slots claimed, their fills spinning */
        pthread_mutex_unlock(&o.r.mu);
        sched_yield();
        pthread_mutex_lock(&o.r.mu);
    }
    o.epoch = 1;
    cxs_ring_restart_locked(&o.r, 30);
    pthread_mutex_unlock(&o.r.mu);
    take(&o, 1, 0, 30); /* (its slots come free as the spinning fills give up) */
    EXPECT_INT(__atomic_load_n(&o.abandoned, __ATOMIC_RELAXED), o.fills[0]);
    /* and a stop ends fills of the current position too */
    pthread_mutex_lock(&o.r.mu);
    o.slow_gen = (int)o.r.generation + 1; /* the restart's */
    cxs_ring_restart_locked(&o.r, 30);
    pthread_mutex_unlock(&o.r.mu);
    while (__atomic_load_n(&o.fills[1], __ATOMIC_RELAXED) < 30 + 1) sched_yield();
    teardown(&o); /* joins: would hang if a stop did not abandon the fills */
    EXPECT_INT(o.abandoned, o.fills[0] + o.fills[1] - 30);
}
END_TEST_

TEST(threads_that_fail_to_start) {
    static owner o;
    setup(&o, 20);
    setenv("CXS_LOADER_FAULT", "threads", 1);
    EXPECT_INT(cxs_ring_start(&o.r), -EAGAIN);
    EXPECT_UINT(o.r.nthreads, 0);
    unsetenv("CXS_LOADER_FAULT");
    EXPECT_INT(cxs_ring_start(&o.r), 0); /* a retry starts them */
    take(&o, 0, 0, 20);
    teardown_n(&o, 1);
}
END_TEST_

TEST(a_wait_for_ever_is_refused) {
    static owner o;
    setup(&o, 20);
    EXPECT_INT(cxs_ring_start(&o.r), 0);
    take(&o, 0, 0, 5);
    pthread_mutex_lock(&o.r.mu);
    o.deny = 1; /* no slot may be claimed any more */
    pthread_mutex_unlock(&o.r.mu);
    /* the batches already claimed still come; then the refusal */
    uint32_t i;
    int rc;
    uint64_t got = 5;
    while ((rc = cxs_ring_next(&o.r, &i)) == 0) {
        EXPECT_UINT(o.r.slot[i].batch, got);
        got++;
    }
    EXPECT_INT(rc, CXS_E_INVALID);
    EXPECT(got < 20);
    teardown(&o);
}
END_TEST_

static void *publisher(void *p) {
    owner *o = p;
    pthread_mutex_lock(&o->r.mu);
    for (;;) {
        while (!o->nq && !o->quit) pthread_cond_wait(&o->cv_q, &o->r.mu);
        if (!o->nq) break;
        /* the last queued first: publication in any order */
        o->nq--;
        uint32_t i = o->q[o->nq].i;
        o->val[i] = VAL(0, o->q[o->nq].b);
        cxs_ring_publish_locked(&o->r, i, o->q[o->nq].gen, 0);
    }
    pthread_mutex_unlock(&o->r.mu);
    return NULL;
}

TEST(batches_published_later) {
    static owner o;
    setup(&o, 300);
    o.later = 1;
    pthread_t t;
    EXPECT_INT(pthread_create(&t, NULL, publisher, &o), 0);
    EXPECT_INT(cxs_ring_start(&o.r), 0);
    take(&o, 0, 0, 300);
    pthread_mutex_lock(&o.r.mu);
    o.quit = 1;
    pthread_cond_signal(&o.cv_q);
    pthread_mutex_unlock(&o.r.mu);
    pthread_join(t, NULL);
    teardown(&o);
}
END_TEST_

/* In a child: the ring is the parent's until after_fork and a start. */
static int child_goes_on(owner *o, int drop_held, uint32_t held_slot, uint64_t held_val) {
    if (!cxs_ring_forked(&o->r)) return 10;
    int releases = o->releases, discards = o->discards;
    cxs_ring_after_fork(&o->r, drop_held);
    /* the held batch goes back as after next() when dropped (its buffers
     * the caller's, never the pool's), else stays; the others are thrown
     * away (none of them is the held one) */
    if (o->releases != releases + drop_held) return 17;
    if (o->discards != discards + NSLOT - 1) return 18;
    if (cxs_ring_start(&o->r)) return 11;
    cxs_ring_adopt(&o->r);
    if (cxs_ring_forked(&o->r)) return 12;
    if (!drop_held && o->val[held_slot] != held_val) return 13; /* the held batch is intact */
    uint64_t first = drop_held ? 0 : 5;
    for (uint64_t k = first; k < 60; k++) {
        uint32_t i;
        if (cxs_ring_next(&o->r, &i)) return 14;
        if (o->r.slot[i].batch != k || o->val[i] != VAL(0, k)) return 15;
    }
    uint32_t i;
    if (cxs_ring_next(&o->r, &i) != 1) return 16;
    cxs_ring_stop(&o->r);
    return 0;
}

TEST(a_forked_child_goes_on) {
    for (int drop_held = 0; drop_held <= 1; drop_held++) {
        static owner o;
        setup(&o, 60);
        EXPECT_INT(cxs_ring_start(&o.r), 0);
        take(&o, 0, 0, 5);
        uint32_t held = (uint32_t)o.r.held;
        uint64_t v = o.val[held];
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) _exit(child_goes_on(&o, drop_held, held, v));
        EXPECT(pid > 0);
        int st;
        EXPECT_INT(waitpid(pid, &st, 0), pid);
        EXPECT(WIFEXITED(st));
        EXPECT_INT(WEXITSTATUS(st), 0);
        take(&o, 0, 5, 55); /* the parent's ring goes on as before */
        teardown(&o);
    }
}
END_TEST_

/* Slot fills of the current generation spin (until abandoned or let go):
 * nothing becomes ready. */
static void hold_fills(owner *o) {
    pthread_mutex_lock(&o->r.mu);
    __atomic_store_n(&o->slow_gen, (int)o->r.generation, __ATOMIC_RELAXED);
    o->waits = 0;
    pthread_mutex_unlock(&o->r.mu);
}

/* Once the consumer waits in cxs_ring_next (it asked stalled under the
 * lock, and the lock is free again: it is in its wait), cancel. */
static void *canceller(void *p) {
    owner *o = p;
    pthread_mutex_lock(&o->r.mu);
    while (!o->waits) {
        pthread_mutex_unlock(&o->r.mu);
        sched_yield();
        pthread_mutex_lock(&o->r.mu);
    }
    pthread_mutex_unlock(&o->r.mu);
    cxs_ring_cancel(&o->r);
    return NULL;
}

TEST(a_cancel_ends_the_wait_and_the_same_batch_follows) {
    for (int round = 0; round < 10; round++) {
        static owner o;
        setup(&o, 40);
        EXPECT_INT(cxs_ring_start(&o.r), 0);
        take(&o, 0, 0, 5 + (uint64_t)round);
        uint64_t next = 5 + (uint64_t)round;
        hold_fills(&o);
        uint32_t i;
        int rc;
        /* take what was ready before the hold; then the wait the cancel ends */
        pthread_t t;
        EXPECT_INT(pthread_create(&t, NULL, canceller, &o), 0);
        while ((rc = cxs_ring_next(&o.r, &i)) == 0) {
            EXPECT_UINT(o.r.slot[i].batch, next);
            EXPECT(o.val[i] == VAL(0, next));
            next++;
        }
        pthread_join(t, NULL);
        EXPECT_INT(rc, -ECANCELED);
        EXPECT_INT(o.r.held, -1); /* what it held went back */
        /* the next call throws the spinning fills away and serves the
         * batch the cancelled call waited for, then the rest in order */
        take(&o, 0, next, 40 - next);
        EXPECT_INT(cxs_ring_next(&o.r, &i), 1);
        teardown(&o);
    }
}
END_TEST_

TEST(a_cancel_before_the_wait_ends_the_next_call) {
    static owner o;
    setup(&o, 30);
    EXPECT_INT(cxs_ring_start(&o.r), 0);
    take(&o, 0, 0, 4);
    /* batch 4 ready (or not): the call after a cancel ends at once */
    pthread_mutex_lock(&o.r.mu);
    while (o.r.slot[4 % NSLOT].state != CXS_SLOT_READY) {
        pthread_mutex_unlock(&o.r.mu);
        sched_yield();
        pthread_mutex_lock(&o.r.mu);
    }
    pthread_mutex_unlock(&o.r.mu);
    cxs_ring_cancel(&o.r);
    uint32_t i;
    EXPECT_INT(cxs_ring_next(&o.r, &i), -ECANCELED); /* although batch 4 is ready */
    EXPECT_INT(o.r.held, -1);
    EXPECT_INT(o.discards, 0);
    /* the next call throws away what was filled meanwhile (batch 4 at
     * least) and fills it again: the same batch, then the rest */
    take(&o, 0, 4, 26);
    EXPECT(o.discards >= 1);
    EXPECT_INT(cxs_ring_next(&o.r, &i), 1);
    /* a cancel is once: the end stays the end */
    EXPECT_INT(cxs_ring_next(&o.r, &i), 1);
    teardown(&o);
}
END_TEST_

TEST(a_timed_wait_expires_with_nothing_changed) {
    static owner o;
    setup(&o, 20);
    EXPECT_INT(cxs_ring_start(&o.r), 0);
    take(&o, 0, 0, 3);
    hold_fills(&o);
    uint32_t i;
    int rc;
    uint64_t next = 3;
    while ((rc = cxs_ring_next_timed(&o.r, &i, 20)) == 0) { /* those ready before the hold */
        EXPECT_UINT(o.r.slot[i].batch, next);
        next++;
    }
    EXPECT_INT(rc, -ETIMEDOUT);
    EXPECT_INT(cxs_ring_next_timed(&o.r, &i, 0), -ETIMEDOUT); /* and again: still nothing */
    pthread_mutex_lock(&o.r.mu);
    EXPECT_UINT(o.r.next_take, next); /* the position kept */
    EXPECT_INT(o.r.held, -1);
    int discards = o.discards;
    pthread_mutex_unlock(&o.r.mu);
    __atomic_store_n(&o.slow_gen, -1, __ATOMIC_RELAXED); /* the fills go on */
    take(&o, 0, next, 20 - next); /* the same batch, then the rest */
    EXPECT_INT(cxs_ring_next(&o.r, &i), 1);
    EXPECT_INT(o.discards, discards); /* nothing was thrown away */
    EXPECT_INT(o.abandoned, 0);
    teardown(&o);
}
END_TEST_

static int fork_kind(const TTest *t) {
    return t == a_forked_child_goes_on ? CXS_FORK_THREADS : CXS_FORK_NONE;
}

int main(void) {
    const TTest *tests[] = {every_batch_in_order, a_failed_batch_comes_in_its_turn,
                            a_restart_serves_only_the_new_position, abandoned_fills_end_early,
                            a_wait_for_ever_is_refused, batches_published_later,
                            a_forked_child_goes_on,
                            a_cancel_ends_the_wait_and_the_same_batch_follows,
                            a_cancel_before_the_wait_ends_the_next_call,
                            a_timed_wait_expires_with_nothing_changed,
#ifdef CXS_TEST_HOOKS
                            threads_that_fail_to_start
#endif
    };
#ifndef CXS_TEST_HOOKS
    printf("SKIP: threads_that_fail_to_start (a build without -Dtest_hooks=true cannot make "
           "thread starts fail)\n");
#endif
    const cxs_group g[] = {{"ring", 120, NULL, NULL, tests, CXS_N(tests), fork_kind}};
    return cxs_run_groups("ring", g, CXS_N(g), 0) ? EXIT_FAILURE : EXIT_SUCCESS;
}
