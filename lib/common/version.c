/* version.c - the library's version, generated into cxs_version.h from
 * the project's one version number; the format's label width rule. */
#include "ctxshard.h"
#include "cxs_version.h"

const char *cxs_version(void) { return CXS_VERSION_STRING; }

uint32_t cxs_label_width(uint64_t n) { return n == 0 ? 0 : n <= 256 ? 1 : 2; }
