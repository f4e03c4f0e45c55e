/* http_none.c - http.h in a library built without libcurl: every URL is
 * refused, saying so. */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "cxs_format.h"
#include "http.h"

int cxs_http_init(cxs_diag *d) {
    return cxs_diagf(d, CXS_E_UNSUPPORTED, "this ctxshard was built without libcurl: it reads "
                     "no URL (rebuild with libcurl4-openssl-dev installed)");
}

int cxs_origin_parse(const char *url, cxs_origin *o, cxs_diag *d) {
    memset(o, 0, sizeof *o);
    (void)url;
    return cxs_http_init(d);
}

int cxs_http_get(const cxs_origin *o, const char *name, uint64_t from, uint64_t len, cxs_sink *s,
                 uint64_t *got, cxs_diag *d) {
    (void)o, (void)name, (void)from, (void)len, (void)s;
    if (got) *got = 0;
    return cxs_http_init(d);
}

int cxs_http_put(const cxs_origin *o, const char *name, int fd, uint64_t size, cxs_diag *d) {
    (void)o, (void)name, (void)fd, (void)size;
    return cxs_http_init(d);
}

void cxs_origin_track(cxs_origin *o, _Atomic uint64_t *received, _Atomic int *cancel) {
    if (received) atomic_init(received, 0);
    if (cancel) atomic_init(cancel, 0);
    o->received = received;
    o->cancel = cancel;
}

struct cxs_http_conns *cxs_http_conns_new(unsigned keep) {
    (void)keep;
    return NULL;
}

void cxs_http_conns_free(struct cxs_http_conns *c) { (void)c; }
