/* http.c - GETs of a dataset's files over libcurl (http.h).  libcurl does
 * the protocol, TLS and the SigV4 signature (CURLOPT_AWS_SIGV4); this file
 * chooses what to ask for, checks that the body is exactly that, and
 * decides what is worth another attempt. */
#include "http.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cxs_format.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CURLcode init_rc;
static void init_curl(void) { init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

int cxs_http_init(cxs_diag *d) {
    pthread_once(&init_once, init_curl);
    if (init_rc)
        return cxs_diagf(d, -EIO, "libcurl cannot start: %s", curl_easy_strerror(init_rc));
    return 0;
}

static unsigned env_uint(const char *name, unsigned dflt, unsigned max) {
    const char *e = getenv(name);
    if (!e || !*e) return dflt;
    char *end;
    unsigned long v = strtoul(e, &end, 10);
    return *end || v > max ? dflt : (unsigned)v;
}

static int copy_str(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) return -1;
    memcpy(dst, src, n + 1);
    return 0;
}

int cxs_origin_parse(const char *url, cxs_origin *o, cxs_diag *d) {
    memset(o, 0, sizeof *o);
    if (copy_str(o->shown, sizeof o->shown, url))
        return cxs_diagf(d, CXS_E_INVALID, "%.200s...: URL longer than %zu bytes", url,
                         sizeof o->shown - 1);
    o->retries = env_uint("CTXSHARD_HTTP_RETRIES", 5, 100);
    o->stall_s = (long)env_uint("CTXSHARD_HTTP_TIMEOUT", 30, 86400);
    if (!o->stall_s) o->stall_s = 30;
    char tmp[2048];
    if (strpbrk(url, "?#"))
        return cxs_diagf(d, CXS_E_INVALID, "%s: a URL with a query or a fragment names one "
                         "object (a presigned URL, say); a dataset is a directory of files: give "
                         "its URL without them (credentials come from the AWS_ variables)", url);
    if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8)) {
        snprintf(tmp, sizeof tmp, "%s", url);
    } else if (!strncmp(url, "s3://", 5)) {
        o->s3_url = 1;
        const char *b = url + 5, *slash = strchr(b, '/');
        size_t bl = slash ? (size_t)(slash - b) : strlen(b);
        const char *prefix = slash ? slash + 1 : "";
        if (!bl) return cxs_diagf(d, CXS_E_INVALID, "%s: no bucket (s3://BUCKET/PREFIX)", url);
        const char *reg = getenv("AWS_REGION");
        if (!reg || !*reg) reg = getenv("AWS_DEFAULT_REGION");
        if (!reg || !*reg) reg = "us-east-1";
        if (copy_str(o->region, sizeof o->region, reg))
            return cxs_diagf(d, CXS_E_INVALID, "AWS_REGION: '%.80s' is too long", reg);
        const char *ep = getenv("AWS_ENDPOINT_URL");
        if (ep && *ep) { /* an S3-compatible server: path-style requests */
            size_t el = strlen(ep);
            while (el && ep[el - 1] == '/') el--;
            snprintf(tmp, sizeof tmp, "%.*s/%.*s/%s", (int)el, ep, (int)bl, b, prefix);
        } else {
            snprintf(tmp, sizeof tmp, "https://%.*s.s3.%s.amazonaws.com/%s", (int)bl, b, reg,
                     prefix);
        }
        const char *id = getenv("AWS_ACCESS_KEY_ID"), *key = getenv("AWS_SECRET_ACCESS_KEY");
        if (id && *id && key && *key) {
            o->s3 = 1;
            if ((size_t)snprintf(o->userpwd, sizeof o->userpwd, "%s:%s", id, key) >=
                sizeof o->userpwd)
                return cxs_diagf(d, CXS_E_INVALID, "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY: "
                                 "too long");
            const char *tok = getenv("AWS_SESSION_TOKEN");
            if (tok && *tok && copy_str(o->token, sizeof o->token, tok))
                return cxs_diagf(d, CXS_E_INVALID, "AWS_SESSION_TOKEN: too long");
        }
    } else {
        return cxs_diagf(d, CXS_E_INVALID, "%s: not a URL this library reads (http://, https://, "
                         "s3://BUCKET/PREFIX)", url);
    }
    /* one spelling per directory: no "//" after the host, no trailing "/" */
    char *path = strstr(tmp, "://");
    path = path ? strchr(path + 3, '/') : NULL;
    if (path) {
        char *w = path;
        for (const char *r = path; *r; r++)
            if (!(*r == '/' && w > path && w[-1] == '/')) *w++ = *r;
        *w = 0;
    }
    size_t n = strlen(tmp);
    while (n > 0 && tmp[n - 1] == '/') tmp[--n] = 0;
    memcpy(o->base, tmp, n + 1);
    return 0;
}

/* One transfer's state, seen by the body callback. */
typedef struct xfer {
    CURL *c;
    const cxs_origin *o;
    cxs_sink *s;
    uint64_t want;   /* bytes asked for; UINT64_MAX: what the server sends */
    uint64_t got;    /* body bytes taken */
    long status;     /* 0 until the first body byte */
    int overlong;    /* the body went past want */
    uint64_t lo;     /* the first byte asked for */
    int norange;     /* a range starting past 0 answered with the whole file (200) */
    int werr;        /* errno of a failed write */
    char err[512];   /* the start of an error body (S3's XML) */
    size_t errlen;
} xfer;

static size_t on_body(char *p, size_t sz, size_t nm, void *user) {
    xfer *x = user;
    size_t n = sz * nm;
    if (!x->status) curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->status != 200 && x->status != 206) { /* keep the start, for the message */
        size_t k = n < sizeof x->err - 1 - x->errlen ? n : sizeof x->err - 1 - x->errlen;
        memcpy(x->err + x->errlen, p, k);
        x->errlen += k;
        x->err[x->errlen] = 0;
        return n;
    }
    if (x->status == 200 && x->lo > 0) { /* the file from byte 0: not what was asked */
        x->norange = 1;
        return 0;
    }
    if (x->want != UINT64_MAX && x->got + n > x->want) {
        x->overlong = 1;
        return 0; /* CURLE_WRITE_ERROR: never a byte past what was asked */
    }
    cxs_sink *s = x->s;
    if (s->fd >= 0) {
        for (size_t done = 0; done < n;) {
            ssize_t w = pwrite(s->fd, p + done, n - done, (off_t)(s->at + x->got + done));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                x->werr = w < 0 ? errno : EIO;
                return 0;
            }
            done += (size_t)w;
        }
    } else {
        if (s->len + n > s->cap) {
            x->overlong = 1;
            return 0;
        }
        uint64_t need = s->len + n;
        uint8_t *nb = realloc(s->buf, (size_t)need);
        if (!nb) {
            x->werr = ENOMEM;
            return 0;
        }
        s->buf = nb;
        memcpy(s->buf + s->len, p, n);
        s->len += n;
    }
    x->got += n;
    if (x->o->received) atomic_fetch_add_explicit(x->o->received, n, memory_order_relaxed);
    return n;
}

static int on_progress(void *user, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    (void)dt, (void)dn, (void)ut, (void)un;
    const xfer *x = user;
    return x->o->cancel && atomic_load_explicit(x->o->cancel, memory_order_relaxed);
}

/* ---- handles kept between requests (http.h) ------------------------------
 *
 * An easy handle keeps its connections between curl_easy_perform calls,
 * and a multi handle those of the transfers it drove: a handle and its
 * multi, kept together, reuse a connection whichever way the next request
 * goes (perform, below). */
typedef struct conn {
    CURL *easy;
    CURLM *multi; /* made at its first transfer that a cancel may end */
} conn;

struct cxs_http_conns {
    pid_t pid; /* the process whose handles they are */
    pthread_mutex_t mu;
    unsigned keep, n; /* idle: idle[0 .. n) */
    conn *idle;
};

struct cxs_http_conns *cxs_http_conns_new(unsigned keep) {
    struct cxs_http_conns *c = calloc(1, sizeof *c);
    if (!c || !(c->idle = calloc(keep ? keep : 1, sizeof *c->idle))) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    c->keep = keep;
    c->pid = getpid();
    return c;
}

static void conn_close(conn *k) {
    if (k->multi) curl_multi_cleanup(k->multi);
    if (k->easy) curl_easy_cleanup(k->easy);
    k->multi = NULL, k->easy = NULL;
}

/* o's handles, unless they are a parent process's: a forked child that
 * closed them would close the parent's connections too (a TLS session's
 * end sent on its socket), and their lock may have been held at the fork:
 * the child leaves them alone, and opens its own connections. */
static struct cxs_http_conns *conns_of(const cxs_origin *o) {
    return o->conns && o->conns->pid == getpid() ? o->conns : NULL;
}

void cxs_http_conns_free(struct cxs_http_conns *c) {
    if (!c) return;
    if (c->pid != getpid()) return; /* (a parent's: conns_of) */
    for (unsigned i = 0; i < c->n; i++) conn_close(&c->idle[i]);
    pthread_mutex_destroy(&c->mu);
    free(c->idle);
    free(c);
}

/* An idle handle of o's, or a new one (its easy NULL when libcurl cannot
 * make one). */
static conn conn_take(const cxs_origin *o) {
    conn k = {0};
    struct cxs_http_conns *c = conns_of(o);
    if (c) {
        pthread_mutex_lock(&c->mu);
        if (c->n) k = c->idle[--c->n];
        pthread_mutex_unlock(&c->mu);
    }
    if (!k.easy) k.easy = curl_easy_init();
    return k;
}

/* Back to o's idle ones (ok: its last request ended well; a handle whose
 * request failed may hold a broken connection, and goes), or closed. */
static void conn_give(const cxs_origin *o, conn *k, int ok) {
    struct cxs_http_conns *c = conns_of(o);
    if (c && ok) {
        pthread_mutex_lock(&c->mu);
        if (c->n < c->keep) c->idle[c->n++] = *k, k->easy = NULL, k->multi = NULL;
        pthread_mutex_unlock(&c->mu);
    }
    conn_close(k);
}

/* curl_easy_perform, or, for a transfer that a cancel may end, the same
 * through a multi handle (k's, kept with its connections) whose wait this
 * thread cuts into slices of 50 ms to look at the flag: the progress
 * callback alone is called about once a second while no byte comes (a
 * stalled server), and a cancel is to end the transfer at once. */
static CURLcode perform(conn *k, const cxs_origin *o) {
    CURL *c = k->easy;
    if (!o->cancel) return curl_easy_perform(c);
    if (!k->multi) k->multi = curl_multi_init();
    CURLM *m = k->multi;
    if (!m) return curl_easy_perform(c);
    if (curl_multi_add_handle(m, c) != CURLM_OK) return curl_easy_perform(c);
    CURLcode cc = CURLE_OK;
    for (int running = 1; running;) {
        if (atomic_load_explicit(o->cancel, memory_order_relaxed)) {
            cc = CURLE_ABORTED_BY_CALLBACK;
            break;
        }
        CURLMcode mc = curl_multi_perform(m, &running);
        if (mc == CURLM_OK && running) mc = curl_multi_poll(m, NULL, 0, 50, NULL);
        if (mc != CURLM_OK) {
            cc = CURLE_OUT_OF_MEMORY; /* (the multi interface's own failures are of that kind) */
            break;
        }
    }
    if (cc == CURLE_OK) {
        int left;
        CURLMsg *msg;
        cc = CURLE_RECV_ERROR; /* (no word of its end: a failure worth another attempt) */
        while ((msg = curl_multi_info_read(m, &left)))
            if (msg->msg == CURLMSG_DONE && msg->easy_handle == c) cc = msg->data.result;
    }
    curl_multi_remove_handle(m, c);
    return cc;
}

/* S3's <Code>...</Code> in an error body, or "". */
static void s3_code(const char *body, char *out, size_t cap) {
    out[0] = 0;
    const char *a = strstr(body, "<Code>"), *b = a ? strstr(a, "</Code>") : NULL;
    if (a && b && b > a + 6) snprintf(out, cap, " (%.*s)", (int)(b - a - 6), a + 6);
}

static void nap_ms(unsigned ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

/* After a failed attempt worth another: -EIO naming the URL and the last
 * failure when the retries are spent, else 0 after the backoff (0.1 s
 * doubling to 5 s). */
static int give_up(const cxs_origin *o, unsigned attempt, unsigned *backoff, const char *shown,
                   const char *last, cxs_diag *d) {
    if (attempt >= o->retries)
        return cxs_diagf(d, -EIO, "%s: %s (after %u attempt%s)", shown, last, attempt + 1,
                         attempt ? "s" : "");
    nap_ms(*backoff);
    *backoff = *backoff * 2 > 5000 ? 5000 : *backoff * 2;
    return 0;
}

/* 1: worth another attempt. */
static int retryable(CURLcode cc, long status) {
    if (cc == CURLE_OK)
        return status >= 500 || status == 429 || status == 408;
    switch (cc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return 1;
    default:
        return 0;
    }
}

/* A failed attempt: the final error (-EIO naming the URL) when it is not
 * worth another, else 0 with what failed in last. */
static int failed(CURLcode cc, long status, const char *code, const char *shown, char *last,
                  size_t cap, cxs_diag *d) {
    if (cc == CURLE_OK) snprintf(last, cap, "HTTP %ld%s", status, code);
    else snprintf(last, cap, "%s", curl_easy_strerror(cc));
    return retryable(cc, status) ? 0 : cxs_diagf(d, -EIO, "%s: %s", shown, last);
}

int cxs_http_get(const cxs_origin *o, const char *name, uint64_t from, uint64_t len, cxs_sink *s,
                 uint64_t *got_out, cxs_diag *d) {
    int rc = cxs_http_init(d);
    if (rc) return rc;
    char url[4096];
    if ((size_t)snprintf(url, sizeof url, "%s/%s", o->base, name) >= sizeof url)
        return cxs_diagf(d, CXS_E_INVALID, "%s/%s: URL too long", o->shown, name);
    char shown[4096]; /* what messages name: the URL as given, and the file */
    snprintf(shown, sizeof shown, "%s/%s", o->shown, name);
    conn k = conn_take(o);
    CURL *c = k.easy;
    if (!c) return cxs_diagf(d, -ENOMEM, "%s: libcurl cannot make a handle", shown);
    struct curl_slist *hdr = NULL;
    char sigv4[128], tokh[2100];
    if (o->s3) {
        snprintf(sigv4, sizeof sigv4, "aws:amz:%s:s3", o->region);
        hdr = curl_slist_append(hdr, "x-amz-content-sha256: "
                                     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        if (o->token[0]) {
            snprintf(tokh, sizeof tokh, "x-amz-security-token: %s", o->token);
            hdr = curl_slist_append(hdr, tokh);
        }
    }
    char ua[64];
    snprintf(ua, sizeof ua, "ctxshard/%s", cxs_version());
    uint64_t total = 0; /* body bytes taken over all attempts */
    const uint64_t want = len;
    unsigned backoff = 100;
    char last[1024] = "";
    for (unsigned attempt = 0;; attempt++) {
        xfer x = {.c = c, .o = o, .s = s, .want = want == UINT64_MAX ? UINT64_MAX : want - total};
        cxs_sink at = *s;
        if (s->fd >= 0) at.at = s->at + total;
        x.s = &at;
        curl_easy_reset(c);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
        curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L); /* stalled: no byte for stall_s */
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, o->stall_s);
        curl_easy_setopt(c, CURLOPT_USERAGENT, ua);
        if (hdr) curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
        if (o->cancel) {
            curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
            curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
            curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        }
        if (o->s3) {
            curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4);
            curl_easy_setopt(c, CURLOPT_USERPWD, o->userpwd);
        }
        char range[64];
        const uint64_t lo = from + total;
        x.lo = lo;
        if (want != UINT64_MAX) {
            snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)lo,
                     (unsigned long long)(from + want - 1));
            curl_easy_setopt(c, CURLOPT_RANGE, range);
        } else if (lo) {
            snprintf(range, sizeof range, "%llu-", (unsigned long long)lo);
            curl_easy_setopt(c, CURLOPT_RANGE, range);
        }
        CURLcode cc = perform(&k, o);
        long status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        if (s->fd < 0) s->len = at.len, s->buf = at.buf;
        if (cc == CURLE_ABORTED_BY_CALLBACK) {
            if (s->fd >= 0) total += x.got;
            rc = cxs_diagf(d, -ECANCELED, "%s: download stopped", shown);
            break;
        }
        if (x.werr) {
            rc = cxs_diagf(d, -x.werr, "%s: cannot store the body: %s", shown, strerror(x.werr));
            break;
        }
        if (x.norange) {
            rc = cxs_diagf(d, CXS_E_CORRUPT, "%s: the server answered a request for bytes %llu.. "
                           "with the whole file (HTTP 200): it does not serve ranges; nothing "
                           "written", shown, (unsigned long long)lo);
            break;
        }
        if (x.overlong) {
            rc = cxs_diagf(d, CXS_E_CORRUPT, "%s: the server sent more than the %llu bytes asked "
                           "for (a proxy or server that ignores ranges, or a file that changed): "
                           "not kept", shown,
                           (unsigned long long)(want == UINT64_MAX ? s->cap : want - total));
            break;
        }
        if (cc == CURLE_OK && (status == 200 || status == 206)) {
            total += x.got;
            if (want == UINT64_MAX || total == want) {
                rc = 0;
                break;
            }
            /* the body ended before what was asked: ask for the rest */
            snprintf(last, sizeof last, "the body ended after %llu of %llu bytes",
                     (unsigned long long)total, (unsigned long long)want);
        } else if (cc == CURLE_OK) {
            char code[160];
            s3_code(x.err, code, sizeof code);
            if (status == 403 || status == 401) {
                rc = cxs_diagf(d, -EACCES, "%s: HTTP %ld%s: access denied%s", shown, status, code,
                               o->s3_url ? (o->s3 ? "; check AWS_ACCESS_KEY_ID and "
                                                    "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN "
                                                    "for temporary credentials) and AWS_REGION"
                                                  : "; set AWS_ACCESS_KEY_ID and "
                                                    "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN "
                                                    "for temporary credentials): the request was "
                                                    "not signed")
                                         : "");
                break;
            }
            if (status == 404) {
                rc = cxs_diagf(d, -ENOENT, "%s: HTTP 404%s: no such file (a dataset URL names "
                               "the directory that holds %s%s)", shown, code, CXS_MANIFEST_NAME,
                               o->s3_url ? "; for an S3-compatible server set AWS_ENDPOINT_URL"
                                         : "");
                break;
            }
            if ((rc = failed(cc, status, code, shown, last, sizeof last, d))) break;
        } else {
            total += x.got; /* what arrived before the failure is kept */
            if ((rc = failed(cc, 0, "", shown, last, sizeof last, d))) break;
        }
        if ((rc = give_up(o, attempt, &backoff, shown, last, d))) break;
    }
    if (got_out) *got_out = total;
    curl_slist_free_all(hdr);
    curl_easy_reset(c); /* (its options point at this call's buffers) */
    conn_give(o, &k, rc == 0);
    return rc;
}

/* ---- uploads ------------------------------------------------------------ */

typedef struct upload {
    const cxs_origin *o;
    int fd;
    uint64_t size, at;
    int rerr;
} upload;

static size_t on_read(char *p, size_t sz, size_t nm, void *user) {
    upload *u = user;
    size_t want = sz * nm;
    if (u->at + want > u->size) want = (size_t)(u->size - u->at);
    size_t got = 0;
    while (got < want) {
        ssize_t r = pread(u->fd, p + got, want - got, (off_t)(u->at + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            u->rerr = r < 0 ? errno : EIO;
            return CURL_READFUNC_ABORT;
        }
        got += (size_t)r;
    }
    u->at += got;
    if (u->o->received) atomic_fetch_add_explicit(u->o->received, got, memory_order_relaxed);
    return got;
}

/* An upload's reply: only an error's start is kept, for the message. */
static size_t on_reply(char *p, size_t sz, size_t nm, void *user) {
    xfer *x = user;
    size_t n = sz * nm;
    size_t k = n < sizeof x->err - 1 - x->errlen ? n : sizeof x->err - 1 - x->errlen;
    memcpy(x->err + x->errlen, p, k);
    x->errlen += k;
    x->err[x->errlen] = 0;
    return n;
}

static int on_seek(void *user, curl_off_t off, int origin) {
    upload *u = user;
    if (origin != SEEK_SET || off < 0 || (uint64_t)off > u->size) return CURL_SEEKFUNC_CANTSEEK;
    u->at = (uint64_t)off;
    return CURL_SEEKFUNC_OK;
}

int cxs_http_put(const cxs_origin *o, const char *name, int fd, uint64_t size, cxs_diag *d) {
    int rc = cxs_http_init(d);
    if (rc) return rc;
    char url[4096], shown[4096];
    if ((size_t)snprintf(url, sizeof url, "%s/%s", o->base, name) >= sizeof url)
        return cxs_diagf(d, CXS_E_INVALID, "%s/%s: URL too long", o->shown, name);
    snprintf(shown, sizeof shown, "%s/%s", o->shown, name);
    if (o->s3_url && size > (5ull << 30))
        return cxs_diagf(d, CXS_E_UNSUPPORTED, "%s: %llu bytes, more than one S3 PUT takes (5 GiB): "
                         "pack with a smaller --shard-size", shown, (unsigned long long)size);
    conn k = {.easy = curl_easy_init()};
    CURL *c = k.easy;
    if (!c) return cxs_diagf(d, -ENOMEM, "%s: libcurl cannot make a handle", shown);
    struct curl_slist *hdr = NULL; /* (no "Expect:" to drop 100-continue: libcurl would sign it) */
    char sigv4[128], tokh[2100], ua[64];
    if (o->s3) {
        snprintf(sigv4, sizeof sigv4, "aws:amz:%s:s3", o->region);
        hdr = curl_slist_append(hdr, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
        if (o->token[0]) {
            snprintf(tokh, sizeof tokh, "x-amz-security-token: %s", o->token);
            hdr = curl_slist_append(hdr, tokh);
        }
    }
    hdr = curl_slist_append(hdr, "Content-Type: application/octet-stream");
    snprintf(ua, sizeof ua, "ctxshard/%s", cxs_version());
    unsigned backoff = 100;
    char last[1024] = "";
    for (unsigned attempt = 0;; attempt++) {
        upload u = {.o = o, .fd = fd, .size = size};
        xfer x = {.c = c, .o = o};
        curl_easy_reset(c);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(c, CURLOPT_READDATA, &u);
        curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(c, CURLOPT_SEEKDATA, &u);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)size);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_reply);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, o->stall_s);
        curl_easy_setopt(c, CURLOPT_USERAGENT, ua);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
        if (o->s3) {
            curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4);
            curl_easy_setopt(c, CURLOPT_USERPWD, o->userpwd);
        }
        if (o->cancel) {
            curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
            curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
            curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        }
        CURLcode cc = perform(&k, o);
        long status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        if (cc == CURLE_ABORTED_BY_CALLBACK) {
            rc = cxs_diagf(d, -ECANCELED, "%s: upload stopped", shown);
            break;
        }
        if (u.rerr) {
            rc = cxs_diagf(d, -u.rerr, "%s: cannot read what to upload: %s", shown,
                           strerror(u.rerr));
            break;
        }
        if (cc == CURLE_OK && status >= 200 && status < 300) {
            rc = 0;
            break;
        }
        if (cc == CURLE_OK) {
            char code[160];
            s3_code(x.err, code, sizeof code);
            if (status == 403 || status == 401) {
                rc = cxs_diagf(d, -EACCES, "%s: HTTP %ld%s: the upload is refused%s", shown,
                               status, code,
                               o->s3_url ? "; check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                                           "(and AWS_SESSION_TOKEN) and that they may write there"
                                         : "");
                break;
            }
            if (status == 404 || status == 405 || status == 501) {
                rc = cxs_diagf(d, -EIO, "%s: HTTP %ld%s: the server takes no upload there%s",
                               shown, status, code,
                               o->s3_url ? " (does the bucket exist?)"
                                         : " (an HTTP server needs PUT enabled: WebDAV, e.g. "
                                           "nginx's dav_methods PUT)");
                break;
            }
            if ((rc = failed(cc, status, code, shown, last, sizeof last, d))) break;
        } else if ((rc = failed(cc, 0, "", shown, last, sizeof last, d))) {
            break;
        }
        if (o->received) /* what the failed attempt sent is sent again */
            atomic_fetch_sub_explicit(o->received, u.at, memory_order_relaxed);
        if ((rc = give_up(o, attempt, &backoff, shown, last, d))) break;
    }
    curl_slist_free_all(hdr);
    conn_close(&k);
    return rc;
}

void cxs_origin_track(cxs_origin *o, _Atomic uint64_t *received, _Atomic int *cancel) {
    if (received) atomic_init(received, 0);
    if (cancel) atomic_init(cancel, 0);
    o->received = received;
    o->cancel = cancel;
}
