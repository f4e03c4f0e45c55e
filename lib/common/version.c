/* version.c - the library's version, generated into cxs_version.h from
 * the project's one version number. */
#include "ctxshard.h"
#include "cxs_version.h"

const char *cxs_version(void) { return CXS_VERSION_STRING; }
