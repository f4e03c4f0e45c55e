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
