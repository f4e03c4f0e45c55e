/* size.h - a size as the environment variables take it (internal). */
#ifndef CXS_SIZE_H
#define CXS_SIZE_H

#include <stdint.h>

/* "123", "64K", "1.5G", "2GiB": bytes (K, M, G, T are powers of 1024).
 * 0, or -1 when s is not a size. */
int cxs_size_parse(const char *s, uint64_t *out);

#endif
