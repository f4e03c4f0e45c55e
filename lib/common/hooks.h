/* hooks.h - the reader's test hooks.  They exist only in test builds
 * (meson -Dtest_hooks=true defines CXS_TEST_HOOKS, as SQLite's test
 * fixtures are compiled in only on request); in any other build each is
 * a constant, and the library reads no environment variable for them.
 * The writer's hook, CXS_PACK_FAULT, is in writer_out.c under the same
 * condition. */
#ifndef CXS_HOOKS_H
#define CXS_HOOKS_H

#ifdef CXS_TEST_HOOKS
#include <stdlib.h>
#include <string.h>
/* CXS_LOADER_FAULT=threads: every worker thread a loader (frame or
 * utterance) starts fails to start, as pthread_create failing with
 * EAGAIN would; read at each start, so a test can set it in a forked
 * child and clear it again. */
static inline int cxs_hook_thread_fails(void) {
    const char *e = getenv("CXS_LOADER_FAULT");
    return e && strcmp(e, "threads") == 0;
}
/* CXS_LOADER_FAULT=speculation: the utterance sampler's plan takes the
 * guess its second thread started the shuffle of the later bins from as
 * wrong (as a rejected draw in the earlier bins would make it), and builds
 * the plan again on one thread. */
static inline int cxs_hook_speculation_fails(void) {
    const char *e = getenv("CXS_LOADER_FAULT");
    return e && strcmp(e, "speculation") == 0;
}
/* CXS_LOADER_FAULT=stall:N: the first fill of batch N of a mixture
 * loader (frame or utterance mixture) in the process waits until it is
 * abandoned (a restart, the call after a cancel, the loader's stop), as a
 * fill waiting on a slow source would, so that a test can make a
 * mixture's next() wait; the fill after it goes on.  -1 without it. */
static inline long long cxs_hook_stall_batch(void) {
    const char *e = getenv("CXS_LOADER_FAULT");
    if (!e || strncmp(e, "stall:", 6) != 0) return -1;
    return strtoll(e + 6, NULL, 10);
}
/* CXS_HUGEPAGE_FAULT=off: open's copy into huge pages finds transparent
 * huge pages off, as /sys/kernel/mm/transparent_hugepage/enabled
 * "never" would say (hugecopy.c). */
static inline int cxs_hook_thp_off(void) {
    const char *e = getenv("CXS_HUGEPAGE_FAULT");
    return e && strcmp(e, "off") == 0;
}
/* CXS_BLOCKCHECK=off at open: the FEATURES and LABELS blocks are served
 * without their check at first use (blocksrc.c), so that bench/
 * block_check.c can pair the check with its absence in one run. */
static inline int cxs_hook_blockcheck_off(void) {
    const char *e = getenv("CXS_BLOCKCHECK");
    return e && strcmp(e, "off") == 0;
}
#else
static inline int cxs_hook_thread_fails(void) { return 0; }
static inline int cxs_hook_blockcheck_off(void) { return 0; }
static inline int cxs_hook_speculation_fails(void) { return 0; }
static inline int cxs_hook_thp_off(void) { return 0; }
static inline long long cxs_hook_stall_batch(void) { return -1; }
#endif

#endif
