/* Loaders whose worker threads fail to start, in a forked child: the call
 * that meets the failure returns an error, every later call retries (and
 * keeps failing while threads cannot start), and once threads start the
 * child goes on at its position with the batches the parent would have
 * served.  It never waits for batches no thread fills.  Frame loader and
 * utterance loader alike.
 *
 * Needs the test hooks (meson -Dtest_hooks=true: CXS_LOADER_FAULT makes
 * every thread start fail) and fork with threads running: exit 77 (skipped)
 * without them, or with CXS_TEST_NO_FORK set (sanitizers).
 *
 * usage: fault_test  (it writes its dataset with the library's writer:
 * testdata.h) */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctxshard.h"
#include "cxs_test.h"
#ifdef CXS_TEST_HOOKS
#include "testdata.h"
#endif

#ifdef CXS_TEST_HOOKS
static char dir[256], packed[300];
static cxs_dataset *ds;

/* What the child reports: 0 right; 1 wrong batches; 2 the failed start
 * was not an error; 3 the retry did not recover.  A child that waits
 * forever is ended by its alarm (SIGALRM), which the parent reports. */
static void expect_child(pid_t pid) {
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    if (WIFSIGNALED(st))
        ck_abort_msg("the child hung (ended by signal %d) after its threads failed to start",
                     WTERMSIG(st));
    ck_assert(WIFEXITED(st));
    EXPECT_INT(WEXITSTATUS(st), 0);
}

TEST(frame_loader_child_thread_start_fails) {
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 3};
    cxs_sampler *s;
    EXPECT_INT(cxs_sampler_create(ds, &so, &s), 0);
    cxs_loader_opts o = {.k = 2, .batch_size = 64, .threads = 2, .labels = 1};
    /* the reference: the whole epoch's frames from one loader, no fork */
    cxs_loader *l;
    EXPECT_INT(cxs_loader_create(ds, s, &o, 0, 0, &l), 0);
    const cxs_batch *b;
    uint64_t len = cxs_sampler_length(s), n = 0, got = 0;
    uint64_t *ref = malloc(len * sizeof *ref);
    while (!cxs_loader_next(l, &b) && b) {
        memcpy(ref + got, b->frames, b->n * sizeof *ref);
        got += b->n, n++;
    }
    EXPECT_UINT(got, len);
    ck_assert(n >= 4);
    EXPECT_INT(cxs_loader_reset(l, 0, 0), 0);
    EXPECT_INT(cxs_loader_next(l, &b), 0);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGALRM, SIG_DFL); /* not Check's handler: it kills the whole group */
        alarm(20);
        setenv("CXS_LOADER_FAULT", "threads", 1);
        for (int i = 0; i < 3; i++)
            if (cxs_loader_next(l, &b) != -EAGAIN) _exit(2);
        unsetenv("CXS_LOADER_FAULT");
        int ok = 1;
        uint64_t i = 1, at = b->n;
        for (;; i++) {
            if (cxs_loader_next(l, &b)) _exit(3);
            if (!b) break;
            if (b->index != i || at + b->n > len || memcmp(b->frames, ref + at, b->n * sizeof *ref))
                ok = 0;
            at += b->n;
        }
        cxs_loader_free(l);
        cxs_sampler_free(s);
        free(ref);
        _exit(ok && i == n && at == len ? 0 : 1);
    }
    expect_child(pid);
    cxs_loader_free(l);
    cxs_sampler_free(s);
    free(ref);
}
END_TEST

TEST(utt_loader_child_thread_start_fails) {
    cxs_utt_sampler_opts so = {.kind = CXS_UTT_SHUFFLE, .seed = 8, .frame_budget = 6000};
    cxs_utt_sampler *s;
    EXPECT_INT(cxs_utt_sampler_create(ds, &so, &s, NULL), 0);
    cxs_utt_loader_opts o = {.threads = 2};
    cxs_utt_loader *l;
    EXPECT_INT(cxs_utt_loader_create(ds, s, &o, 0, 0, &l), 0);
    const cxs_utt_batch *b;
    uint64_t n = 0, glob[256];
    while (!cxs_utt_loader_next(l, &b) && b)
        if (n < 256) glob[n++] = b->global;
    ck_assert(n >= 4 && n < 256);
    EXPECT_INT(cxs_utt_loader_reset(l, 0, 0), 0);
    EXPECT_INT(cxs_utt_loader_next(l, &b), 0);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGALRM, SIG_DFL); /* not Check's handler: it kills the whole group */
        alarm(20);
        setenv("CXS_LOADER_FAULT", "threads", 1);
        for (int i = 0; i < 3; i++)
            if (cxs_utt_loader_next(l, &b) != -EAGAIN) _exit(2);
        unsetenv("CXS_LOADER_FAULT");
        int ok = 1;
        uint64_t i = 1;
        for (;; i++) {
            if (cxs_utt_loader_next(l, &b)) _exit(3);
            if (!b) break;
            if (b->global != glob[i]) ok = 0;
        }
        cxs_utt_loader_free(l);
        cxs_utt_sampler_free(s);
        _exit(ok && i == n ? 0 : 1);
    }
    expect_child(pid);
    cxs_utt_loader_free(l);
    cxs_utt_sampler_free(s);
}
END_TEST

/* The background warm-up's thread fails to start: an error with its
 * message, no handle, nothing to join; it starts again once threads do. */
TEST(warm_thread_start_fails) {
    cxs_warm *w = (cxs_warm *)1;
    cxs_diag d;
    setenv("CXS_LOADER_FAULT", "threads", 1);
    EXPECT_INT(cxs_warm_start(ds, CXS_WARM_FORCE, &w, &d), -EAGAIN);
    unsetenv("CXS_LOADER_FAULT");
    ck_assert_ptr_null(w);
    EXPECT_STR_HAS(d.message, "warm-up: cannot start its thread");
    EXPECT_INT(cxs_warm_start(ds, CXS_WARM_FORCE, &w, &d), 0);
    EXPECT_INT(cxs_warm_finish(w, 0, NULL, &d), 0);
}
END_TEST

#endif

int main(void) {
#ifndef CXS_TEST_HOOKS
    puts("SKIP: built without the test hooks (meson -Dtest_hooks=true): no thread start can fail");
    return 77;
#else
    if (getenv("CXS_TEST_NO_FORK")) {
        puts("SKIP: CXS_TEST_NO_FORK is set: no threads started in a forked child");
        return 77;
    }
    snprintf(dir, sizeof dir, "/tmp/cxs-fault-XXXXXX");
    if (!mkdtemp(dir)) return 3;
    snprintf(packed, sizeof packed, "%s/packed", dir);
    td_opts o = {.utts = 40, .dim = 8, .seed = 6};
    if (td_make(packed, &o)) return 3;
    if (cxs_dataset_open(packed, &ds, NULL)) return 3;
    const TTest *const t[] = {frame_loader_child_thread_start_fails,
                              utt_loader_child_thread_start_fails,
                              warm_thread_start_fails};
    /* (a timeout beyond the child's alarm) */
    const cxs_group g[] = {{"fault", 60, NULL, NULL, t, CXS_N(t), NULL}};
    int rc = cxs_run_groups("fault", g, CXS_N(g), 0) ? EXIT_FAILURE : EXIT_SUCCESS;
    cxs_dataset_close(ds);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) rc = EXIT_FAILURE;
    return rc;
#endif
}
