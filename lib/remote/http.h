/* http.h - GETs of a dataset's files over libcurl: plain HTTP(S), or S3
 * with SigV4 (libcurl signs), with retries and checked body lengths. */
#ifndef CXS_HTTP_H
#define CXS_HTTP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxshard.h"

/* Where a dataset's files are: base + "/" + name. */
typedef struct cxs_origin {
    char base[2048];    /* http(s)://host[:port]/path, no trailing slash */
    char shown[2048];   /* the URL as the user gave it, for messages */
    int s3;             /* sign requests (s3:// with credentials) */
    int s3_url;         /* an s3:// URL (its messages name the AWS_ variables) */
    char region[64];
    char userpwd[512];  /* KEY:SECRET */
    char token[2048];   /* AWS_SESSION_TOKEN, or "" */
    unsigned retries;   /* attempts after the first (CTXSHARD_HTTP_RETRIES, default 5) */
    long stall_s;       /* a transfer with no byte for this long is retried (CTXSHARD_HTTP_TIMEOUT, 30) */
    _Atomic uint64_t *received; /* or NULL: every body byte taken is added here (progress) */
    _Atomic int *cancel;        /* or NULL: set, transfers end at once with -ECANCELED */
    struct cxs_http_conns *conns; /* or NULL: handles kept between requests (below) */
} cxs_origin;

/* Handles kept between requests, so that a request reuses the connection
 * of one before it (keep-alive) rather than opening its own: each is used
 * by one thread at a time (libcurl forbids sharing a connection cache
 * between threads at once, CURL_LOCK_DATA_CONNECT), taken for a request
 * and given back after it, at most `keep` of them kept idle.  NULL when
 * out of memory (then each request has its own connection). */
struct cxs_http_conns *cxs_http_conns_new(unsigned keep);
void cxs_http_conns_free(struct cxs_http_conns *c);

/* Parse url (http://, https://, s3://bucket[/prefix]) and read the
 * environment: AWS_ENDPOINT_URL (an S3-compatible server: path-style
 * requests to it), AWS_REGION / AWS_DEFAULT_REGION (default us-east-1),
 * AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN. */
int cxs_origin_parse(const char *url, cxs_origin *o, cxs_diag *d);

/* Where a body goes: into fd at file offset `at` (fd >= 0), or into a
 * growing buffer (fd < 0: *buf, at most cap bytes). */
typedef struct cxs_sink {
    int fd;
    uint64_t at;
    uint8_t *buf;
    uint64_t len, cap;
} cxs_sink;

/* GET name's bytes from .. from + len - 1 (len UINT64_MAX: to the end,
 * whose length the server says) into s, retrying what fails on the way
 * (5xx, 429, timeouts, resets, a body cut short: the next attempt asks
 * for the rest).  A body longer than asked, a 403 or a 404 is final, with
 * a message naming the URL and what to set.  *got (may be NULL): bytes
 * received.  0 or an error in d. */
int cxs_http_get(const cxs_origin *o, const char *name, uint64_t from, uint64_t len, cxs_sink *s,
                 uint64_t *got, cxs_diag *d);

/* PUT size bytes of fd (from offset 0) as name: an S3 PutObject (signed,
 * UNSIGNED-PAYLOAD) or an HTTP PUT (WebDAV).  Retries what fails on the way
 * (the body again from its start); 403 and 404 are final, with the
 * variables to set.  0 or an error in d. */
int cxs_http_put(const cxs_origin *o, const char *name, int fd, uint64_t size, cxs_diag *d);

/* Count the body bytes o's transfers take in *received and end them when
 * *cancel is set (both zeroed here); NULLs: neither. */
void cxs_origin_track(cxs_origin *o, _Atomic uint64_t *received, _Atomic int *cancel);

/* curl_global_init, once (thread-safe). */
int cxs_http_init(cxs_diag *d);

#endif
