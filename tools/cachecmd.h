/* cachecmd.h - `ctxshard cache`. */
#ifndef CXS_CACHECMD_H
#define CXS_CACHECMD_H

#include <stdint.h>

/* verb: "ls", "prune" (to limit, or CTXSHARD_CACHE_LIMIT) or "clear"; dir
 * NULL: the default cache.  Returns the exit status. */
int cache_run(const char *verb, const char *dir, uint64_t limit, int have_limit, int json);

/* `ctxshard push DIR URL`: the exit status. */
int push_run(const char *dir, const char *url, int quiet);

#endif
