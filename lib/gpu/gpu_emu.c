/* gpu_emu.c - the GPU backend run on the host (CXS_GPU_EMULATE), built to
 * behave like a device so that a missing wait fails a test on any machine:
 *
 *  - Every stream is a queue executed in order by its own thread, later
 *    than the call that queued the work.  Under the default schedule
 *    ("late") an operation runs only when something needs it: a host wait
 *    (event_sync, stream_sync, a synchronous download) or another stream's
 *    wait on an event behind it.  "random:SEED" runs operations as soon as
 *    they are queued, after delays drawn from the seed; "eager" without
 *    delays.  CXS_GPU_EMU in the environment chooses (read once).
 *  - An event completes when its stream has executed what was queued
 *    before it was recorded; stream_wait makes a stream wait for that.
 *  - A host->device copy from pinned (host_alloc) or registered memory
 *    reads the host bytes when it executes; if they changed since the copy
 *    was queued, the library wrote a buffer a queued copy still reads: a
 *    fault.  A copy from pageable memory is staged when queued, as CUDA
 *    stages it.
 *  - Device and pinned memory are filled with a pattern when allocated and
 *    poisoned (0xFF: NaN, -1) when freed, and kept in quarantine for a
 *    while: an operation that executes on freed memory, or on host memory
 *    passed as device memory, is a fault.
 *
 * A fault is sticky, as a device's is: every later call fails with its
 * message (error_string), and cxs_gpu_emu_fault() reports it after the fact
 * to tests that free the loader first.  Kernels are loops over gpu_expand.h,
 * so the arithmetic is the device's. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "ctxshard.h"
#include "ctxshard_gpu.h"
#include "gpu_backend.h"

#define EMU_FAULT 0x7e11     /* the backend error code of a fault */
#define EMU_NO_DEVICE 0x7e12 /* set_device of a device that is not there */
#define EMU_INJECTED 0x7e13  /* a failure a test asked for (cxs_gpu_emu_fail) */
#define EMU_REGISTERED 0x7e14 /* cudaErrorHostMemoryAlreadyRegistered */
#define EMU_LAUNCH 0x7e15    /* a launch refused (cxs_gpu_emu_fail) */
#define EMU_FORKED 0x7e16    /* cudaErrorInitializationError: used in a forked child */
#define EMU_NO_PINNED 0x7e17 /* cudaHostAlloc beyond CXS_GPU_EMU_PINNED */
#define QUARANTINE_N 64      /* freed allocations kept poisoned ... */
#define QUARANTINE_BYTES (256u << 20) /* ... up to this many bytes */

enum { SCHED_LATE, SCHED_RANDOM, SCHED_EAGER };
enum { R_DEV, R_PINNED, R_REGISTERED };
static const char *const region_kind[] = {"device", "pinned host", "registered host"};

/* One allocation or registration; freed ones stay (poisoned) in quarantine. */
typedef struct region {
    uint8_t *base;
    size_t size;
    int kind, freed;
    uint64_t serial;
} region;

enum { OP_H2D, OP_COPY, OP_WAIT, OP_EXPAND, OP_PAD, OP_MARK };

typedef struct emu_op {
    struct emu_op *next;
    int kind;
    uint64_t ticket;
    void *dst;
    const void *src;
    size_t n;
    void *staged;   /* H2D from pageable memory: the bytes, taken when queued */
    uint64_t hash;  /* H2D from pinned memory: the bytes' hash when queued */
    struct emu_stream *other; /* WAIT */
    uint64_t other_ticket;
    gpu_expand_args ex;
    gpu_pad_args pad;
    const char *what;
} emu_op;

typedef struct emu_stream {
    pthread_t th;
    int started, stop;
    emu_op *head, *tail;
    uint64_t queued, done, demand;
    uint64_t rng;
    char name[32];
    struct emu_stream *next_dead;
    struct emu_stream *next_all; /* every stream ever made (under mu) */
    emu_op *running;             /* the operation being executed (under mu) */
} emu_stream;

typedef struct emu_event {
    emu_stream *s;
    uint64_t ticket;
    unsigned flags;
} emu_event;

/* Host waits on events made without GPU_EVENT_BLOCKING: on a device each
 * spins a CPU core until the event completes (cxs_gpu_emu_spin_waits). */
static uint64_t spin_waits;

/* One lock for the registry, every stream's queue and counters, the fault. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int sched = SCHED_LATE;
static uint64_t seed = 1;
static region *reg;
static size_t nreg, capreg;
static uint64_t serial, nstreams;
static size_t q_n, q_bytes;
static int faulted;
static char fault_msg[512];
static emu_stream *default_stream;
/* Destroyed streams are kept and reused, never freed: an event recorded on
 * one may still be waited for, and its counters only grow, so such an
 * event reads as complete. */
static emu_stream *dead;
static emu_stream *all_streams;

/* Failures a test asked for (cxs_gpu_emu_fail): the fail_at[w]-th call of
 * kind w from then fails, once (under mu). */
static uint64_t fail_at[CXS_GPU_EMU_FAIL_KINDS], fail_calls[CXS_GPU_EMU_FAIL_KINDS];

static int injected(int w) {
    pthread_mutex_lock(&mu);
    int hit = fail_at[w] && ++fail_calls[w] == fail_at[w];
    if (hit) fail_at[w] = 0;
    pthread_mutex_unlock(&mu);
    return hit;
}

/* The runtime's last error, per thread, as cudaGetLastError() reads it:
 * every failed call sets it and it stays until read, so a caller that
 * ignores a failure leaves it for the next reader (a launch's error is
 * read from it: gpu_launch_expand). */
static _Thread_local int last_error;

static int set_error(int e) {
    if (e) last_error = e;
    return e;
}

static int emu_last_error(void) {
    int e = last_error;
    last_error = 0;
    return e;
}

/* The device was used (a stream, an allocation, a registration) in this
 * process; a child forked after that gets EMU_FORKED from every call, as
 * a CUDA context does not survive fork(). */
static int used, forked;

static int gone(void) { return forked ? set_error(EMU_FORKED) : 0; }

/* CXS_GPU_EMU_PINNED: the most pinned host memory (host_alloc) live at a
 * time (0: no limit), as a system's limit on page-locked memory refuses
 * cudaHostAlloc beyond it.  Read at each pinned allocation, so that a
 * test sets it and clears it again. */
static uint64_t pinned_limit, pinned_bytes;
static char pinned_msg[160];

/* CXS_GPU_EMU_MEMORY: the emulated device's memory size (0: the host's
 * memory); allocations beyond it fail as cudaMalloc does. */
static uint64_t mem_limit, dev_bytes;

static uint64_t env_size(const char *name) {
    const char *m = getenv(name);
    uint64_t v = 0;
    if (m && *m) {
        char *end;
        v = strtoull(m, &end, 10);
        if (*end == 'K' || *end == 'k') v <<= 10;
        else if (*end == 'M' || *end == 'm') v <<= 20;
        else if (*end == 'G' || *end == 'g') v <<= 30;
    }
    return v;
}

static void emu_config(void) {
    mem_limit = env_size("CXS_GPU_EMU_MEMORY");
    const char *e = getenv("CXS_GPU_EMU");
    if (!e || !*e || !strcmp(e, "late")) sched = SCHED_LATE;
    else if (!strcmp(e, "eager")) sched = SCHED_EAGER;
    else if (!strncmp(e, "random", 6)) {
        sched = SCHED_RANDOM;
        if (e[6] == ':') seed = strtoull(e + 7, NULL, 10);
    }
}

/* A device lost to a fork: the child's copy of the library starts afresh
 * (the parent's stream threads do not exist in it). */
static void emu_atfork_child(void) {
    pthread_mutex_init(&mu, NULL);
    pthread_cond_init(&cv, NULL);
    default_stream = NULL;
    if (used) forked = 1;
}

static void emu_init(void) {
    emu_config();
    pthread_atfork(NULL, NULL, emu_atfork_child);
}

/* Record the first fault (under mu). */
static void fault(const char *fmt, ...) {
    if (faulted) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fault_msg, sizeof fault_msg, fmt, ap);
    va_end(ap);
    faulted = 1;
    pthread_cond_broadcast(&cv);
}

static const char *emu_error_string(int err) {
    if (err == ENOMEM) return "out of (emulated device) memory";
    if (err == EMU_FAULT) return fault_msg; /* sticky: never rewritten once set */
    if (err == EMU_NO_DEVICE) return "invalid device ordinal (emulated)";
    if (err == EMU_NO_PINNED) return pinned_msg;
    if (err == EMU_INJECTED) return "operation failed (injected by cxs_gpu_emu_fail)";
    if (err == EMU_REGISTERED)
        return "part of the host memory range is already registered "
               "(cudaErrorHostMemoryAlreadyRegistered, emulated)";
    if (err == EMU_LAUNCH) return "kernel launch refused (injected by cxs_gpu_emu_fail)";
    if (err == EMU_FORKED)
        return "initialization error (cudaErrorInitializationError, emulated: the device was "
               "used before this process forked)";
    return "emulation error";
}

/* ---- the registry --------------------------------------------------------- */

/* The region holding [p, p+n), live or quarantined; NULL when none. */
static region *find(const void *p, size_t n) {
    const uint8_t *a = p;
    region *hit = NULL;
    for (size_t i = 0; i < nreg; i++) {
        region *r = &reg[i];
        if (a >= r->base && a - r->base < (ptrdiff_t)(r->size ? r->size : 1) &&
            n <= r->size - (size_t)(a - r->base)) {
            if (!r->freed) return r;
            if (!hit || r->serial > hit->serial) hit = r; /* the most recent free */
        }
    }
    return hit;
}

static int add_region(void *p, size_t n, int kind) {
    if (nreg == capreg) {
        size_t c = capreg ? capreg * 2 : 64;
        region *g = realloc(reg, c * sizeof *g);
        if (!g) return ENOMEM;
        reg = g, capreg = c;
    }
    reg[nreg++] = (region){p, n, kind, 0, ++serial};
    return 0;
}

/* Evict the oldest quarantined regions beyond the limits. */
static void evict(void) {
    while (q_n > QUARANTINE_N || q_bytes > QUARANTINE_BYTES) {
        size_t old = nreg;
        for (size_t i = 0; i < nreg; i++)
            if (reg[i].freed && (old == nreg || reg[i].serial < reg[old].serial)) old = i;
        if (old == nreg) break;
        region r = reg[old];
        reg[old] = reg[--nreg];
        q_n--, q_bytes -= r.size;
        free(r.base);
    }
}

/* A queued copy that still reads [a, a+n) (under mu), or NULL. */
static const char *queued_reader(const uint8_t *a, size_t n) {
    for (emu_stream *s = all_streams; s; s = s->next_all)
        for (emu_op *op = s->running ? s->running : s->head; op;
             op = op == s->running ? s->head : op->next)
            if (op->kind == OP_H2D && !op->staged && op->n &&
                (const uint8_t *)op->src < a + n && a < (const uint8_t *)op->src + op->n)
                return op->what;
    return NULL;
}

/* Free the region at p: poisoned and quarantined.  A registration is not
 * our memory (a file mapping, unmapped and reused later): it leaves the
 * registry at once, after a check that no queued copy still reads it. */
static void release(void *p, int kind) {
    if (!p) return;
    if (gone()) return;
    /* an injected failure still frees, as cudaFree reporting an earlier
     * asynchronous error does; only the error is left behind */
    if (injected(kind == R_REGISTERED ? CXS_GPU_EMU_FAIL_UNREGISTER : CXS_GPU_EMU_FAIL_FREE))
        set_error(EMU_INJECTED);
    pthread_mutex_lock(&mu);
    region *r = NULL;
    for (size_t i = 0; i < nreg && !r; i++)
        if (reg[i].base == p && !reg[i].freed) r = &reg[i];
    const char *q;
    if (!r || r->kind != kind) {
        fault("%s free of %p, which is not a live %s allocation", region_kind[kind], p,
              region_kind[kind]);
    } else if (kind == R_REGISTERED) {
        if ((q = queued_reader(r->base, r->size)))
            fault("registered host memory %p (%zu bytes) unregistered while a queued %s still "
                  "reads it", r->base, r->size, q);
        *r = reg[--nreg];
    } else {
        if (kind == R_PINNED && (q = queued_reader(r->base, r->size)))
            fault("pinned host memory %p (%zu bytes) freed while a queued %s still reads it",
                  r->base, r->size, q);
        r->freed = 1;
        r->serial = ++serial;
        if (kind == R_DEV) dev_bytes -= r->size;
        if (kind == R_PINNED) pinned_bytes -= r->size;
        memset(r->base, 0xff, r->size); /* NaN, -1 */
        q_n++, q_bytes += r->size;
        evict();
    }
    pthread_mutex_unlock(&mu);
}

/* Check that [p, p+n) is live memory of `kind` (under mu); a fault if not.
 * what: the operation, for the message. */
static int check(const void *p, size_t n, int kind, const char *what, const char *role) {
    if (!n) return 0;
    region *r = find(p, n);
    if (r && !r->freed && (r->kind == kind || (kind == R_PINNED && r->kind == R_REGISTERED)))
        return 0;
    if (!r)
        fault("%s: its %s %p (+%zu bytes) is not in any %s allocation", what, role, p, n,
              region_kind[kind]);
    else if (r->freed)
        fault("%s: its %s %p (+%zu bytes) is in %s memory freed before the operation ran "
              "(use after free)",
              what, role, p, n, region_kind[r->kind]);
    else
        fault("%s: its %s %p is %s memory, expected %s memory", what, role, p,
              region_kind[r->kind], region_kind[kind]);
    return EMU_FAULT;
}

/* ---- streams -------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *x) { /* splitmix64 */
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Make s execute up to ticket t and wait for it (under mu).  A fault stops
 * the wait: nothing more is executed after one. */
static void force(emu_stream *s, uint64_t t) {
    if (s->demand < t) {
        s->demand = t;
        pthread_cond_broadcast(&cv);
    }
    while (s->done < t && !faulted) pthread_cond_wait(&cv, &mu);
}

static void run_expand(const gpu_expand_args *a) {
    const size_t W = (2 * (size_t)a->k + 1) * a->D;
    for (size_t i = 0; i < a->n; i++) {
        uint64_t row0;
        uint32_t T, t;
        int64_t label;
        const uint8_t *h = NULL;
        if (a->desc) {
            row0 = a->desc[i].row0, T = a->desc[i].T, t = a->desc[i].t;
            label = a->desc[i].label;
            if (a->qh) h = a->qh + (uint64_t)a->desc[i].utt * a->hbytes;
        } else {
            uint64_t f = a->frames[i], u = cxs_x_locate(a->cum, a->num_utts, f);
            row0 = a->urow[u];
            T = (uint32_t)(a->cum[u + 1] - a->cum[u]);
            t = (uint32_t)(f - a->cum[u]);
            label = a->lab ? a->lab[f] : 0;
            if (a->qh) h = a->qh + u * a->hbytes;
        }
        for (uint32_t r = 0; r <= 2 * a->k; r++)
            for (uint32_t d = 0; d < a->D; d++) {
                float v = cxs_x_value(a->feat, a->dtype, a->D, row0, T, t, a->k, r, d, a->mean,
                                      a->scale, h);
                size_t j = i * W + (size_t)r * a->D + d;
                if (a->out_bf16)
                    ((uint16_t *)a->out)[j] = cxs_x_to_bf16(v);
                else
                    ((float *)a->out)[j] = v;
            }
        if (a->y) a->y[i] = label;
    }
}

static void run_pad(const gpu_pad_args *a) {
    for (size_t i = 0; i < a->n; i++) {
        const cxs_x_utt u = a->utt[i];
        const uint8_t *h = a->qh ? a->qh + u.utt * a->hbytes : NULL;
        for (uint64_t t = 0; t < a->tmax; t++) {
            const size_t row = i * a->tmax + t;
            for (uint32_t d = 0; d < a->D; d++) {
                float v = cxs_x_value(a->feat, a->dtype, a->D, u.row0, u.T, (uint32_t)t, 0, 0, d,
                                      a->mean, a->scale, h);
                if (a->out_bf16)
                    ((uint16_t *)a->out)[row * a->D + d] = cxs_x_to_bf16(v);
                else
                    ((float *)a->out)[row * a->D + d] = v;
            }
            if (a->y)
                a->y[row] = t < u.T ? (int64_t)a->lab[u.frame0 + t] : CXS_UTT_PAD_LABEL;
        }
    }
}

/* The memory a kernel touches, checked when it executes (under mu): a
 * kernel that reads what was freed, or host memory, faults on a device. */
static int check_expand(const gpu_expand_args *a) {
    const size_t W = (2 * (size_t)a->k + 1) * a->D, xe = a->out_bf16 ? 2 : 4;
    const char *w = "window expansion kernel";
    if (check(a->out, a->n * W * xe, R_DEV, w, "output x") ||
        (a->y && check(a->y, a->n * 8, R_DEV, w, "output y")) ||
        check(a->feat, 1, R_DEV, w, "features") ||
        (a->qh && check(a->qh, a->num_utts * a->hbytes, R_DEV, w, "headers")) ||
        (a->mean && (check(a->mean, a->D * 8, R_DEV, w, "means") ||
                     check(a->scale, a->D * 8, R_DEV, w, "scales"))))
        return EMU_FAULT;
    if (a->desc) return check(a->desc, a->n * sizeof *a->desc, R_DEV, w, "descriptors");
    if (check(a->frames, a->n * 8, R_DEV, w, "frame numbers") ||
        check(a->cum, (a->num_utts + 1) * 8, R_DEV, w, "utterance offsets") ||
        check(a->urow, a->num_utts * 8, R_DEV, w, "utterance rows") ||
        (a->lab && check(a->lab, 2, R_DEV, w, "labels")))
        return EMU_FAULT;
    return 0;
}

static int check_pad(const gpu_pad_args *a) {
    const size_t xe = a->out_bf16 ? 2 : 4;
    const char *w = "padding kernel";
    if (check(a->out, a->n * a->tmax * a->D * xe, R_DEV, w, "output x") ||
        (a->y && check(a->y, a->n * a->tmax * 8, R_DEV, w, "output y")) ||
        check(a->utt, a->n * sizeof *a->utt, R_DEV, w, "descriptors") ||
        check(a->feat, 1, R_DEV, w, "features") ||
        (a->qh && check(a->qh, a->hbytes, R_DEV, w, "headers")) ||
        (a->lab && check(a->lab, 2, R_DEV, w, "labels")) ||
        (a->mean && (check(a->mean, a->D * 8, R_DEV, w, "means") ||
                     check(a->scale, a->D * 8, R_DEV, w, "scales"))))
        return EMU_FAULT;
    return 0;
}

/* Execute one operation (called without mu). */
static void execute(emu_stream *s, emu_op *op) {
    int bad = 0;
    pthread_mutex_lock(&mu);
    switch (op->kind) {
    case OP_H2D:
        bad = check(op->dst, op->n, R_DEV, op->what, "destination");
        if (!bad && !op->staged) {
            bad = check(op->src, op->n, R_PINNED, op->what, "source");
            if (!bad && XXH3_64bits(op->src, op->n) != op->hash) {
                fault("%s: the %s source %p (%zu bytes) was written after the copy was queued "
                      "and before it ran (a buffer refilled before its copy completed)",
                      op->what, region_kind[find(op->src, op->n)->kind], op->src, op->n);
                bad = EMU_FAULT;
            }
        }
        break;
    case OP_COPY: {
        /* a consumer's copy: each side device memory or host memory */
        region *d = find(op->dst, op->n), *r = find(op->src, op->n);
        if ((d && d->freed) || (r && r->freed))
            bad = check(d && d->freed ? op->dst : op->src, op->n, R_DEV, op->what,
                        d && d->freed ? "destination" : "source");
        break;
    }
    case OP_EXPAND: bad = check_expand(&op->ex); break;
    case OP_PAD: bad = check_pad(&op->pad); break;
    case OP_WAIT: force(op->other, op->other_ticket); break;
    default: break;
    }
    bad = bad || faulted;
    pthread_mutex_unlock(&mu);
    if (bad) return; /* a faulted device executes nothing more */
    /* The checks hold while the operation runs: memory is freed only by the
     * library's host threads, after the waits that order it after this. */
    switch (op->kind) {
    case OP_H2D: memcpy(op->dst, op->staged ? op->staged : op->src, op->n); break;
    case OP_COPY: memmove(op->dst, op->src, op->n); break;
    case OP_EXPAND: run_expand(&op->ex); break;
    case OP_PAD: run_pad(&op->pad); break;
    default: break;
    }
}

static void *stream_main(void *arg) {
    emu_stream *s = arg;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (!s->stop && !(s->head && (sched != SCHED_LATE || s->head->ticket <= s->demand)))
            pthread_cond_wait(&cv, &mu);
        emu_op *op = s->head;
        if (!op) break; /* stopping, and everything queued has run */
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        s->running = op;
        uint64_t delay = sched == SCHED_RANDOM ? rng_next(&s->rng) : 0;
        pthread_mutex_unlock(&mu);
        if (delay % 2) { /* half the operations start up to 0.5 ms late */
            struct timespec ts = {0, (long)((delay >> 8) % 500000)};
            nanosleep(&ts, NULL);
        }
        execute(s, op);
        free(op->staged);
        pthread_mutex_lock(&mu);
        s->done = op->ticket;
        s->running = NULL;
        free(op);
        pthread_cond_broadcast(&cv);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

static int stream_new(emu_stream **out, const char *name) {
    pthread_once(&once, emu_init);
    if (gone()) return EMU_FORKED;
    pthread_mutex_lock(&mu);
    used = 1;
    emu_stream *s = dead;
    if (s) dead = s->next_dead, s->next_dead = NULL, s->stop = 0;
    uint64_t id = ++nstreams;
    pthread_mutex_unlock(&mu);
    if (!s) {
        if (!(s = calloc(1, sizeof *s))) return ENOMEM;
        pthread_mutex_lock(&mu);
        s->next_all = all_streams, all_streams = s;
        pthread_mutex_unlock(&mu);
    }
    s->rng = seed * 0x100000001b3ull + id;
    snprintf(s->name, sizeof s->name, "%s", name);
    if (pthread_create(&s->th, NULL, stream_main, s)) {
        pthread_mutex_lock(&mu);
        s->next_dead = dead, dead = s;
        pthread_mutex_unlock(&mu);
        return ENOMEM;
    }
    s->started = 1;
    *out = s;
    return 0;
}

/* NULL, the legacy default stream, is one more stream of its own here
 * (stricter than CUDA, whose default stream also waits for the others). */
static emu_stream *stream_of(void *p) {
    if (p) return p;
    pthread_mutex_lock(&mu);
    emu_stream *s = default_stream;
    pthread_mutex_unlock(&mu);
    if (s) return s;
    if (stream_new(&s, "default")) return NULL;
    pthread_mutex_lock(&mu);
    if (!default_stream) default_stream = s;
    else { /* another thread made it first: ours goes */
        s->stop = 1;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
        pthread_join(s->th, NULL);
        pthread_mutex_lock(&mu);
        s->next_dead = dead, dead = s;
    }
    s = default_stream;
    pthread_mutex_unlock(&mu);
    return s;
}

/* Queue op on s (takes op); its ticket is returned in op. */
static int enqueue(emu_stream *s, emu_op *op) {
    pthread_mutex_lock(&mu);
    if (faulted) {
        pthread_mutex_unlock(&mu);
        free(op->staged);
        free(op);
        return EMU_FAULT;
    }
    op->ticket = ++s->queued;
    if (s->tail) s->tail->next = op;
    else s->head = op;
    s->tail = op;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return 0;
}

static emu_op *op_new(int kind, const char *what) {
    emu_op *op = calloc(1, sizeof *op);
    if (op) op->kind = kind, op->what = what;
    return op;
}

/* ---- the backend ---------------------------------------------------------- */

static int sticky(void) {
    if (gone()) return EMU_FORKED;
    pthread_mutex_lock(&mu);
    int f = faulted;
    pthread_mutex_unlock(&mu);
    return set_error(f ? EMU_FAULT : 0);
}

/* The calling thread's current device, as the CUDA runtime keeps it: a
 * library call that changes it and does not put it back changes the
 * caller's (tests check that none does). */
static _Thread_local int cur_dev;

static int emu_set_device(int dev) {
    pthread_once(&once, emu_init);
    if (gone()) return EMU_FORKED;
    if (dev < 0 || dev >= CXS_GPU_EMU_DEVICES) return set_error(EMU_NO_DEVICE);
    cur_dev = dev;
    return sticky();
}

static int emu_get_device(int *dev) {
    *dev = cur_dev;
    return 0;
}

static int emu_mem_info(uint64_t *free_bytes, uint64_t *total_bytes) {
    pthread_once(&once, emu_init);
    if (gone()) return EMU_FORKED;
    if (mem_limit) {
        pthread_mutex_lock(&mu);
        *total_bytes = mem_limit;
        *free_bytes = mem_limit - dev_bytes;
        pthread_mutex_unlock(&mu);
        return 0;
    }
    long page = sysconf(_SC_PAGESIZE), total = sysconf(_SC_PHYS_PAGES),
         avail = sysconf(_SC_AVPHYS_PAGES);
    if (page <= 0 || total <= 0) page = 4096, total = 1l << 20;
    if (avail <= 0) avail = total;
    *free_bytes = (uint64_t)avail * (uint64_t)page;
    *total_bytes = (uint64_t)total * (uint64_t)page;
    return 0;
}

static int emu_register_supported(int dev, int *yes) {
    *yes = 1; /* registration is tracked, so the registered path runs */
    return 0;
}

static int alloc_kind(void **p, size_t n, int kind) {
    pthread_once(&once, emu_init);
    if (gone()) return EMU_FORKED;
    if (kind == R_PINNED) {
        uint64_t lim = env_size("CXS_GPU_EMU_PINNED");
        pthread_mutex_lock(&mu);
        if (lim != pinned_limit)
            snprintf(pinned_msg, sizeof pinned_msg,
                     "out of memory (cudaErrorMemoryAllocation, emulated: the pinned host memory "
                     "limit of %llu bytes, CXS_GPU_EMU_PINNED)", (unsigned long long)lim);
        pinned_limit = lim;
        pthread_mutex_unlock(&mu);
    }
    uint8_t *m = malloc(n ? n : 1);
    if (!m) return ENOMEM;
    memset(m, kind == R_DEV ? 0xa5 : 0x5a, n); /* never zero: nothing may rely on it */
    pthread_mutex_lock(&mu);
    used = 1;
    int rc = faulted ? EMU_FAULT
             : kind == R_DEV && mem_limit && dev_bytes + n > mem_limit ? ENOMEM
             : kind == R_PINNED && pinned_limit && pinned_bytes + n > pinned_limit
                 ? EMU_NO_PINNED
                 : add_region(m, n, kind);
    if (!rc && kind == R_DEV) dev_bytes += n;
    if (!rc && kind == R_PINNED) pinned_bytes += n;
    pthread_mutex_unlock(&mu);
    if (rc) {
        free(m);
        return set_error(rc);
    }
    *p = m;
    return 0;
}

static int emu_dev_alloc(void **p, size_t n) { return alloc_kind(p, n, R_DEV); }
static void emu_dev_free(void *p) { release(p, R_DEV); }
static int emu_host_alloc(void **p, size_t n) { return alloc_kind(p, n, R_PINNED); }
static void emu_host_free(void *p) { release(p, R_PINNED); }

/* As cudaHostRegister: a range that overlaps one already registered is
 * refused (cudaErrorHostMemoryAlreadyRegistered), whoever registered it. */
static int emu_register(void *p, size_t n) {
    pthread_once(&once, emu_init);
    if (gone()) return EMU_FORKED;
    if (injected(CXS_GPU_EMU_FAIL_REGISTER)) return set_error(EMU_INJECTED);
    const uint8_t *a = p;
    pthread_mutex_lock(&mu);
    used = 1;
    int rc = faulted ? EMU_FAULT : 0;
    for (size_t i = 0; i < nreg && !rc; i++)
        if (reg[i].kind == R_REGISTERED && !reg[i].freed && a < reg[i].base + reg[i].size &&
            reg[i].base < a + n)
            rc = EMU_REGISTERED;
    if (!rc) rc = add_region(p, n, R_REGISTERED);
    pthread_mutex_unlock(&mu);
    return set_error(rc);
}

static void emu_unregister(void *p) { release(p, R_REGISTERED); }

static int emu_stream_create(void **s) {
    emu_stream *e;
    int rc = stream_new(&e, "stream");
    if (!rc) *s = e;
    return rc;
}

/* As cudaStreamDestroy: the work already queued still runs. */
static void emu_stream_destroy(void *p) {
    emu_stream *s = p;
    if (!s || s == default_stream) return;
    pthread_mutex_lock(&mu);
    s->stop = 1;
    s->demand = UINT64_MAX;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(s->th, NULL);
    pthread_mutex_lock(&mu);
    while (s->head) { /* left by a fault */
        emu_op *op = s->head;
        s->head = op->next;
        free(op->staged);
        free(op);
    }
    s->tail = NULL;
    s->done = s->queued;
    s->demand = s->queued;
    s->next_dead = dead, dead = s;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static int emu_event_create(void **e, unsigned flags) {
    emu_event *ev = calloc(1, sizeof(emu_event));
    if (!ev) return ENOMEM;
    ev->flags = flags;
    *e = ev;
    return 0;
}

static void emu_event_destroy(void *e) { free(e); }

static int emu_record(void *e, void *sp) {
    if (gone()) return EMU_FORKED;
    emu_stream *s = stream_of(sp);
    if (!s) return set_error(ENOMEM);
    emu_event *ev = e;
    pthread_mutex_lock(&mu);
    ev->s = s, ev->ticket = s->queued;
    int f = faulted;
    pthread_mutex_unlock(&mu);
    return set_error(f ? EMU_FAULT : 0);
}

static int emu_wait(void *sp, void *e) {
    if (gone()) return EMU_FORKED;
    emu_stream *s = stream_of(sp);
    const emu_event *ev = e;
    if (!s) return ENOMEM;
    pthread_mutex_lock(&mu);
    emu_stream *o = ev->s;
    uint64_t t = ev->ticket;
    pthread_mutex_unlock(&mu);
    if (!o || o == s) return sticky(); /* never recorded, or ordered already */
    emu_op *op = op_new(OP_WAIT, "stream_wait");
    if (!op) return ENOMEM;
    op->other = o, op->other_ticket = t;
    return set_error(enqueue(s, op));
}

static int emu_event_sync(void *e) {
    const emu_event *ev = e;
    if (gone()) return EMU_FORKED;
    pthread_mutex_lock(&mu);
    if (!(ev->flags & GPU_EVENT_BLOCKING)) spin_waits++;
    if (ev->s) force(ev->s, ev->ticket);
    int f = faulted;
    pthread_mutex_unlock(&mu);
    return set_error(f ? EMU_FAULT : 0);
}

static int emu_stream_sync(void *sp) {
    if (gone()) return EMU_FORKED;
    emu_stream *s = stream_of(sp);
    if (!s) return set_error(ENOMEM);
    pthread_mutex_lock(&mu);
    force(s, s->queued);
    int f = faulted;
    pthread_mutex_unlock(&mu);
    return set_error(f ? EMU_FAULT : 0);
}

static int emu_copy(void *dst, const void *src, size_t n, void *sp) {
    if (gone()) return EMU_FORKED;
    emu_stream *s = stream_of(sp);
    emu_op *op = op_new(OP_H2D, "host-to-device copy");
    if (!s || !op) {
        free(op);
        return ENOMEM;
    }
    op->dst = dst, op->src = src, op->n = n;
    pthread_mutex_lock(&mu);
    int bad = check(dst, n, R_DEV, op->what, "destination");
    region *r = n ? find(src, n) : NULL;
    if (!bad && r && r->freed) bad = check(src, n, R_PINNED, op->what, "source");
    int pinned = r && !r->freed && r->kind != R_DEV;
    if (!bad && r && r->kind == R_DEV) bad = check(src, n, R_PINNED, op->what, "source");
    pthread_mutex_unlock(&mu);
    if (!bad && n) {
        if (pinned) {
            op->hash = XXH3_64bits(src, n);
        } else if (!(op->staged = malloc(n))) {
            free(op);
            return ENOMEM;
        } else {
            memcpy(op->staged, src, n);
        }
    }
    if (bad) {
        free(op);
        return set_error(bad);
    }
    return set_error(enqueue(s, op));
}

static int emu_copy_back(void *dst, const void *src, size_t n, void *sp) {
    if (gone()) return EMU_FORKED;
    emu_stream *s = stream_of(sp);
    emu_op *op = op_new(OP_COPY, "device-to-host copy");
    if (!s || !op) {
        free(op);
        return ENOMEM;
    }
    op->dst = dst, op->src = src, op->n = n;
    int rc = set_error(enqueue(s, op));
    return rc ? rc : emu_stream_sync(s);
}

/* A launch returns nothing: its error is the thread's last error, read
 * (and cleared) after it as cu_expand does with cudaGetLastError(). */
static void launch(emu_op *op, void *sp) {
    if (gone()) {
        free(op);
        return;
    }
    emu_stream *s = stream_of(sp);
    if (!s || !op) {
        free(op);
        set_error(ENOMEM);
    } else if (injected(CXS_GPU_EMU_FAIL_LAUNCH)) {
        free(op);
        set_error(EMU_LAUNCH);
    } else {
        set_error(enqueue(s, op));
    }
}

static int emu_expand(const gpu_expand_args *a, void *sp) {
    emu_op *op = op_new(OP_EXPAND, "expand");
    if (op) op->ex = *a; /* launch arguments are taken by value, as a kernel's */
    launch(op, sp);
    return emu_last_error();
}

static int emu_pad(const gpu_pad_args *a, void *sp) {
    emu_op *op = op_new(OP_PAD, "pad");
    if (op) op->pad = *a;
    launch(op, sp);
    return emu_last_error();
}

const gpu_backend cxs_gpu_emu = {
    "host emulation",
    emu_error_string,
    emu_last_error,
    emu_set_device,
    emu_get_device,
    emu_mem_info,
    emu_register_supported,
    emu_dev_alloc,
    emu_dev_free,
    emu_host_alloc,
    emu_host_free,
    emu_register,
    emu_unregister,
    emu_stream_create,
    emu_stream_destroy,
    emu_event_create,
    emu_event_destroy,
    emu_record,
    emu_wait,
    emu_event_sync,
    emu_stream_sync,
    emu_copy,
    emu_copy_back,
    emu_expand,
    emu_pad,
};

/* ---- the consumer's side (ctxshard_gpu.h) --------------------------------- */

int cxs_gpu_emu_stream_create(void **stream) {
    if (!stream) return CXS_E_INVALID;
    return emu_stream_create(stream) ? -ENOMEM : 0;
}

void cxs_gpu_emu_stream_destroy(void *stream) {
    if (stream) emu_stream_destroy(stream);
}

int cxs_gpu_emu_copy_async(void *dst, const void *src, size_t n, void *stream) {
    if (n && (!dst || !src)) return CXS_E_INVALID;
    emu_stream *s = stream_of(stream);
    emu_op *op = op_new(OP_COPY, "consumer's copy");
    if (!s || !op) {
        free(op);
        return -ENOMEM;
    }
    op->dst = dst, op->src = (void *)src, op->n = n;
    return enqueue(s, op) ? CXS_E_DEVICE : 0;
}

int cxs_gpu_emu_stream_sync(void *stream) {
    pthread_once(&once, emu_init);
    return emu_stream_sync(stream) ? CXS_E_DEVICE : 0;
}

int cxs_gpu_emu_set_device(int32_t device) {
    return emu_set_device(device) == EMU_NO_DEVICE ? CXS_E_INVALID : 0;
}

int32_t cxs_gpu_emu_device(void) { return cur_dev; }

int cxs_gpu_emu_fail(int what, uint64_t nth) {
    if (what < 0 || what >= CXS_GPU_EMU_FAIL_KINDS) return CXS_E_INVALID;
    pthread_mutex_lock(&mu);
    fail_at[what] = nth, fail_calls[what] = 0;
    pthread_mutex_unlock(&mu);
    return 0;
}

int cxs_gpu_emu_host_register(void *p, size_t n) {
    if (!p || !n) return CXS_E_INVALID;
    int e = emu_register(p, n);
    emu_last_error(); /* answered here */
    return e == EMU_REGISTERED ? -EEXIST : e ? CXS_E_DEVICE : 0;
}

void cxs_gpu_emu_host_unregister(void *p) {
    emu_unregister(p);
    emu_last_error();
}

uint64_t cxs_gpu_emu_spin_waits(void) {
    pthread_mutex_lock(&mu);
    uint64_t n = spin_waits;
    pthread_mutex_unlock(&mu);
    return n;
}

const char *cxs_gpu_emu_fault(void) {
    pthread_mutex_lock(&mu);
    int f = faulted;
    pthread_mutex_unlock(&mu);
    return f ? fault_msg : NULL;
}

const char *cxs_gpu_emu_schedule(void) {
    pthread_once(&once, emu_init);
    return sched == SCHED_LATE ? "late" : sched == SCHED_EAGER ? "eager" : "random";
}
