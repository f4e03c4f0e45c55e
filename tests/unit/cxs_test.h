/* cxs_test.h - the thin layer between the unit tests and Check, so that
 * the runner could change without touching the tests. */
#ifndef CXS_TEST_H
#define CXS_TEST_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST(name) START_TEST(name)
#define END_TEST_ END_TEST
#define EXPECT(c) ck_assert(c)
#define EXPECT_INT(a, b) ck_assert_int_eq((a), (b))
#define EXPECT_UINT(a, b) ck_assert_uint_eq((a), (b))
#define EXPECT_STR_HAS(s, sub) ck_assert_ptr_nonnull(strstr((s), (sub)))
/* For tight loops: Check's ck_assert records a checkpoint (a write to its
 * pipe) on every call; this touches Check only when it fails. */
#define EXPECT_LOOP(c)                                                        \
    do {                                                                      \
        if (!(c)) ck_abort_msg("%s:%d: %s", __FILE__, __LINE__, #c);          \
    } while (0)

/* Tests that fork, under a sanitizer (CXS_TEST_NO_FORK set): a child that
 * starts threads can deadlock in a sanitizer's allocator (any value skips
 * it: CXS_FORK_THREADS), and ThreadSanitizer cannot follow a fork at all
 * ("all" skips every fork: CXS_FORK_ANY).  Such a test is left out of the
 * suite with a line that says so, never reported as a pass. */
#define CXS_FORK_NONE 0
#define CXS_FORK_THREADS 1
#define CXS_FORK_ANY 2
static inline void cxs_add_test(TCase *tc, const TTest *t, int forks) {
    const char *e = getenv("CXS_TEST_NO_FORK");
    if (e && *e && (forks == CXS_FORK_THREADS || (forks == CXS_FORK_ANY && !strcmp(e, "all")))) {
        printf("SKIP: %s (CXS_TEST_NO_FORK=%s: %s)\n", t->name, e,
               forks == CXS_FORK_ANY ? "no fork at all" : "no threads in a forked child");
        return;
    }
    _tcase_add_test(tc, t, 0, 0, 0, 1);
}

/* Tests sharing a timeout (seconds; 0: Check's default) and a fixture run
 * around each of them in its process (setup and teardown may be NULL);
 * forks(t) says what test t forks (CXS_FORK_*; NULL: none does). */
typedef struct cxs_group {
    const char *name;
    int timeout;
    void (*setup)(void);
    void (*teardown)(void);
    const TTest *const *tests;
    int n;
    int (*forks)(const TTest *t);
} cxs_group;
#define CXS_N(a) ((int)(sizeof(a) / sizeof *(a)))

/* The shared runner of the test programs: the groups as one suite, each
 * fork case left out with a line when CXS_TEST_NO_FORK says so
 * (cxs_add_test); nofork runs every test in this process (a CUDA context
 * does not survive a fork), as CK_FORK=no does.  Returns the number of
 * failed tests. */
static inline int cxs_run_groups(const char *suite, const cxs_group *g, int ng, int nofork) {
    Suite *s = suite_create(suite);
    for (int i = 0; i < ng; i++) {
        TCase *tc = tcase_create(g[i].name);
        if (g[i].timeout) tcase_set_timeout(tc, g[i].timeout);
        if (g[i].setup || g[i].teardown) tcase_add_checked_fixture(tc, g[i].setup, g[i].teardown);
        for (int k = 0; k < g[i].n; k++)
            cxs_add_test(tc, g[i].tests[k], g[i].forks ? g[i].forks(g[i].tests[k]) : CXS_FORK_NONE);
        suite_add_tcase(s, tc);
    }
    SRunner *r = srunner_create(s);
    if (nofork) srunner_set_fork_status(r, CK_NOFORK);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed;
}

/* Build a suite named `name` from the given test functions and run it;
 * returns the process exit status. */
static inline int cxs_run_suite(const char *name, const TTest *const *tests, int n) {
    Suite *s = suite_create(name);
    TCase *tc = tcase_create("all");
    for (int i = 0; i < n; i++) _tcase_add_test(tc, tests[i], 0, 0, 0, 1);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
#define RUN_SUITE(name, ...)                                                   \
    int main(void) {                                                           \
        const TTest *const t[] = {__VA_ARGS__};                                \
        return cxs_run_suite(name, t, (int)(sizeof t / sizeof *t));            \
    }

#endif
