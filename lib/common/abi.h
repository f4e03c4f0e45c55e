/* abi.h - the checks behind the ABI's room to grow (ctxshard_base.h,
 * CXS_OPTS_RESERVED): options whose reserved words are not zero are
 * refused, naming the struct (internal). */
#ifndef CXS_ABI_H
#define CXS_ABI_H

#include <stdint.h>

#include "ctxshard.h"
#include "cxs_format.h"

/* 0 when the n reserved words are zero, else CXS_E_INVALID with d saying
 * which struct (e.g. "cxs_loader_opts") and what to do. */
static inline int cxs_reserved_check(const uint64_t *reserved, unsigned n, const char *what,
                                     cxs_diag *d) {
    for (unsigned i = 0; i < n; i++)
        if (reserved[i])
            return cxs_diagf(d, CXS_E_INVALID,
                             "%s: reserved word %u is not zero: start the options from "
                             "%s_init() (or zero them); a program built against a newer "
                             "ctxshard header than this library (%s) asks for an option it "
                             "does not know",
                             what, i, what, cxs_version());
    return 0;
}
#define CXS_OPTS_CHECK(o, what, d)                                                                \
    cxs_reserved_check((o)->reserved, (unsigned)(sizeof (o)->reserved / sizeof (o)->reserved[0]), \
                       what, d)

#endif
