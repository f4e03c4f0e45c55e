/* abi.h - the checks behind the ABI's room to grow (ctxshard_base.h,
 * CXS_OPTS_RESERVED): options whose reserved words are not zero are
 * refused, naming the struct; the sized structs the library fills are
 * copied out at the caller's size (internal). */
#ifndef CXS_ABI_H
#define CXS_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* The bytes of type up to the end of member: a sized struct's size as
 * first published is CXS_SIZE_THROUGH(type, reserved), whether later
 * fields came out of its reserved words or were added after them. */
#define CXS_SIZE_THROUGH(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))

/* Hand the struct the library filled (full, full_size bytes) to a caller
 * whose struct has size bytes: an older header's smaller struct gets its
 * own fields and nothing written past them; a newer header's larger one
 * gets zero in the fields this library does not know, their default. */
static inline void cxs_fill_sized(void *dst, size_t size, const void *full, size_t full_size) {
    memcpy(dst, full, size < full_size ? size : full_size);
    if (size > full_size) memset((char *)dst + full_size, 0, size - full_size);
}

#endif
