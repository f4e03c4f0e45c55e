/* warm.h - `ctxshard warm`: read a dataset into the page cache. */
#ifndef CXS_TOOL_WARM_H
#define CXS_TOOL_WARM_H
int warm_run(const char *dir, int force, int quiet, int json);
#endif
