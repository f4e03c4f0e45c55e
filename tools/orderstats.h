#ifndef CXS_TOOL_ORDERSTATS_H
#define CXS_TOOL_ORDERSTATS_H
#include "benchread.h"
/* bench-read --order-stats: utterances per batch and the spread of an
 * utterance's frames over the epoch, for the sequential, shuffle and
 * block orders (block needs o->memory). */
int order_stats_run(const char *dir, const bench_read_opts *o);
#endif
