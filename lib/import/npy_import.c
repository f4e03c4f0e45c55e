/* npy_import.c - cxs_import_npy (ctxshard_import.h): a raw .npy directory
 * (npy_raw.c lists, validates and converts its utterances) into a packed
 * dataset through the writer, or checked without writing.  The shard plan
 * comes first, from every features header; reader threads then load
 * utterances ahead into the importers' ring (import_ring.c) while this
 * thread hands them to the writer in id order, so that the bytes and every
 * event are the same for any thread count. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "abi.h"
#include "ctxshard.h"
#include "ctxshard_import.h"
#include "cxs_format.h"
#include "cxs_le.h"
#include "cxs_qcodec.h"
#include "import_ring.h"
#include "npy_raw.h"

void cxs_npy_opts_init(cxs_npy_opts *o) { memset(o, 0, sizeof *o); }

/* ---- the headers: frames, widths, the dataset's width ------------------- */

typedef struct probe_job {
    const raw_set *rs;
    uint64_t *T;
    uint32_t *D;
    size_t a, b;
} probe_job;

static void *probe_thread(void *arg) {
    probe_job *j = arg;
    for (size_t i = j->a; i < j->b; i++) raw_probe(j->rs, i, &j->T[i], &j->D[i]);
    return NULL;
}

/* Frames and width of every listed utterance from its features file's
 * header alone (raw_probe), read on up to `threads` threads (on a network
 * filesystem this is latency-bound).  T and D hold rs->n entries each. */
static void probe_all(const raw_set *rs, unsigned threads, uint64_t *T, uint32_t *D) {
    size_t n = rs->n;
    unsigned nt = threads < 1 ? 1 : threads > 64 ? 64 : threads;
    if (nt > n) nt = n ? (unsigned)n : 1;
    probe_job jobs[64];
    pthread_t tid[64];
    int started[64] = {0};
    for (unsigned t = 0; t < nt; t++) {
        jobs[t] = (probe_job){rs, T, D, n * t / nt, n * (t + 1) / nt};
        started[t] = t > 0 && pthread_create(&tid[t], NULL, probe_thread, &jobs[t]) == 0;
    }
    for (unsigned t = 0; t < nt; t++)
        if (!started[t]) probe_thread(&jobs[t]);
    for (unsigned t = 1; t < nt; t++)
        if (started[t]) pthread_join(tid[t], NULL);
}

static int cmp_count_desc(const void *a, const void *b) {
    const uint64_t *x = a, *y = b; /* {count, width} */
    if (x[0] != y[0]) return x[0] < y[0] ? 1 : -1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* The feature width of the dataset: the most common among the readable
 * headers (the smaller on a tie), never the first in sort order; 0 when no
 * header can be read.  When the files differ, census gets "119 files of 28,
 * 1 of 40" (else "") and *odd the path of the one file of the second most
 * common width when there is one (else NULL). */
static uint32_t width_majority(const raw_set *rs, const uint32_t *D, char *census, size_t cn,
                               const char **odd) {
    /* Few distinct widths in any real dataset: a short list, counted. */
    enum { MAXW = 64 };
    uint64_t w[MAXW][2];
    size_t nw = 0, other = 0;
    census[0] = 0;
    *odd = NULL;
    for (size_t i = 0; i < rs->n; i++) {
        if (!D[i]) continue;
        size_t k = 0;
        while (k < nw && w[k][1] != D[i]) k++;
        if (k == nw) {
            if (nw == MAXW) {
                other++;
                continue;
            }
            w[nw][0] = 0;
            w[nw++][1] = D[i];
        }
        w[k][0]++;
    }
    if (nw == 0) return 0;
    qsort(w, nw, sizeof *w, cmp_count_desc);
    if (nw == 1) return (uint32_t)w[0][1];
    size_t len = (size_t)snprintf(census, cn, "%llu files of %llu",
                                  (unsigned long long)w[0][0], (unsigned long long)w[0][1]);
    for (size_t k = 1; k < nw && k < 4 && len < cn; k++)
        len += (size_t)snprintf(census + len, cn - len, ", %llu of %llu",
                                (unsigned long long)w[k][0], (unsigned long long)w[k][1]);
    if (nw > 4 || other)
        len += (size_t)snprintf(census + len, cn - len, ", and others");
    /* Name the odd file when the minority is a single one: that is the
     * file to look at. */
    if (w[1][0] == 1)
        for (size_t i = 0; i < rs->n && !*odd; i++)
            if (D[i] == w[1][1]) *odd = rs->items[i].mfcc;
    return (uint32_t)w[0][1];
}

/* ---- the reader threads ------------------------------------------------- */

typedef struct rslot {
    int status; /* 0, CXS_E_INPUT (a problem of the utterance), or -errno */
    cxs_diag d;
    utt u;
} rslot;

typedef struct loader {
    const raw_set *rs;
    conv_opts co;
    rslot *slots;
} loader;

static void load_one(void *user, size_t item, size_t slot) {
    loader *L = user;
    rslot *s = &L->slots[slot];
    s->status = utt_load(&s->u, L->rs, item, &L->co, &s->d);
}

/* An utterance whose width is not the dataset's (*D, from the plan; when
 * that is 0 the first valid utterance sets it) becomes a problem of its
 * own, named with the census. */
static void width_check(rslot *s, const raw_set *rs, size_t i, uint32_t *D, const char *census) {
    if (s->status) return;
    if (*D == 0) {
        *D = s->u.D;
        return;
    }
    const char *p = rs->items[i].mfcc;
    if (s->u.D != *D && s->u.T == *D && s->u.T < s->u.D)
        s->status = cxs_diag_at(&s->d, CXS_E_INPUT, p, CXS_NO_OFFSET,
                                "%s: shape [%llu, %u] looks transposed: most files are "
                                "[frames, %u]; save it as [frames, features] (numpy: "
                                "np.ascontiguousarray(x.T))",
                                p, (unsigned long long)s->u.T, s->u.D, *D);
    else if (s->u.D != *D)
        s->status = cxs_diag_at(&s->d, CXS_E_INPUT, p, CXS_NO_OFFSET,
                                "%s: %u features per frame, expected %u like most files "
                                "(widths: %s); re-extract it with the same features as the "
                                "others, or leave it out with --on-error skip",
                                p, s->u.D, *D, census[0] ? census : "the others");
}

/* ---- the shard plan ------------------------------------------------------ */

/* Which shard every listed utterance goes to, decided before any data is
 * read so that a part of the list can be packed alone and still cut its
 * shards where a single pack would.  Utterances are taken greedily in id
 * order while the uncompressed shard file stays within the shard size,
 * each counted with the frames its features header declares (0 when the
 * header cannot be read) and the dataset's width (the most common among
 * the headers): exactly the shards of the data when every utterance is
 * valid.  An utterance left out later under on_error_skip keeps its
 * place; a shard left empty is not written. */
typedef struct plan {
    uint64_t *T;
    uint32_t *D;
    uint32_t *member;
    uint32_t nshards;
    uint32_t width;      /* the most common width; 0 when no header reads */
    uint64_t shard_size; /* the one the layout used */
    uint64_t input_hash; /* ids, frames, widths, transcript presence */
    char census[512];    /* "119 files of 28, 1 of 40" when the files differ */
    const char *odd;     /* the one file of another width, if one */
} plan;

static void plan_free(plan *pl) {
    free(pl->T);
    free(pl->D);
    free(pl->member);
    memset(pl, 0, sizeof *pl);
}

/* What the layout needs of the writer's options. */
typedef struct layout {
    uint32_t dtype, guard, lw;
} layout;

/* Lay the plan's utterances out in shards of at most shard_size; the
 * number of shards. */
static uint32_t plan_layout(plan *pl, const raw_set *rs, const layout *lo, uint64_t shard_size) {
    const uint64_t E = cxs_dtype_size(lo->dtype), G = cxs_stored_guard(lo->dtype, lo->guard);
    const uint64_t qh = cxs_q_header_size(lo->dtype, pl->width);
    uint64_t U = 0, F = 0, idb = 0;
    uint32_t s = 0;
    for (size_t i = 0; i < rs->n; i++) {
        uint64_t il = strlen(rs->items[i].id), T = pl->T[i];
        uint64_t size = cxs_shard_file_size(U + 1, F + T, idb + il, pl->width, E, G, lo->lw, qh);
        if (U > 0 && size > shard_size) {
            s++;
            U = F = idb = 0;
        }
        U++;
        F += T;
        idb += il;
        pl->member[i] = s;
    }
    pl->shard_size = shard_size;
    pl->nshards = rs->n ? s + 1 : 0;
    return pl->nshards;
}

/* The shard size for N parts without a shard size given: the smallest
 * size (in whole MiB, KiB when small, at most `cap`) that lays the data
 * out in at most k*N shards, k being as many per part as keep the shards
 * within cap.  Greedy shards of at most C bytes hold the data in at least
 * size/C of them, so the search starts from the whole data as one shard
 * over k*N; the shards come out about equal, and so do the parts.  When
 * no size gives N shards (huge utterances, fewer utterances than parts),
 * the one that gives the most. */
static uint64_t size_for_parts(plan *pl, const raw_set *rs, const layout *lo, uint32_t parts,
                               uint64_t cap) {
    uint64_t F = 0, idb = 0;
    for (size_t i = 0; i < rs->n; i++) {
        F += pl->T[i];
        idb += strlen(rs->items[i].id);
    }
    uint64_t all = cxs_shard_file_size(rs->n, F, idb, pl->width, cxs_dtype_size(lo->dtype),
                                       cxs_stored_guard(lo->dtype, lo->guard), lo->lw,
                                       cxs_q_header_size(lo->dtype, pl->width));
    uint64_t N = parts, k = (all + N * cap - 1) / (N * cap), target = N * (k ? k : 1);
    uint64_t low = all / target;
    const uint64_t unit = low >= (64u << 20) ? 1u << 20 : 1u << 10;
    low = low / unit * unit;
    if (low < CXS_WRITER_MIN_SHARD_SIZE) low = CXS_WRITER_MIN_SHARD_SIZE;
    if (low > cap) low = cap;
    uint64_t hi = cap / unit * unit;
    if (hi < low) hi = low;
    if (plan_layout(pl, rs, lo, hi) > target) return cap; /* cap is already the answer */
    /* The smallest multiple of unit in [low, hi] with at most target shards. */
    while (hi - low > unit && hi > low) {
        uint64_t mid = (low + (hi - low) / 2) / unit * unit;
        if (mid <= low) break;
        if (plan_layout(pl, rs, lo, mid) <= target) hi = mid;
        else low = mid;
    }
    uint64_t c = plan_layout(pl, rs, lo, low) <= target ? low : hi;
    if (plan_layout(pl, rs, lo, c) >= N || plan_layout(pl, rs, lo, c) >= rs->n) return c;
    /* Huge utterances: smaller, until the layout has N shards or no more. */
    uint64_t best = c;
    uint32_t best_n = pl->nshards;
    while (c > CXS_WRITER_MIN_SHARD_SIZE && best_n < N && best_n < rs->n) {
        c = c / 8 * 7 / 1024 * 1024;
        if (c < CXS_WRITER_MIN_SHARD_SIZE) c = CXS_WRITER_MIN_SHARD_SIZE;
        uint32_t n = plan_layout(pl, rs, lo, c);
        if (n > best_n) {
            best_n = n;
            best = c;
        }
    }
    return best;
}

/* A size as --shard-size takes it. */
static const char *size_arg(uint64_t v, char *buf, size_t n) {
    static const char units[] = "TGMK";
    for (int u = 0; u < 4; u++) {
        uint64_t m = 1ull << (10 * (4 - u));
        if (v % m == 0) {
            snprintf(buf, n, "%llu%c", (unsigned long long)(v / m), units[u]);
            return buf;
        }
    }
    snprintf(buf, n, "%llu", (unsigned long long)v);
    return buf;
}

/* The headers, the width, the input's hash and the layout (shard_size 0:
 * chosen for the parts). */
static int plan_make(plan *pl, const raw_set *rs, const layout *lo, unsigned threads,
                     uint64_t shard_size, uint32_t parts) {
    memset(pl, 0, sizeof *pl);
    size_t n = rs->n;
    pl->T = calloc(n + 1, sizeof *pl->T);
    pl->D = calloc(n + 1, sizeof *pl->D);
    pl->member = calloc(n + 1, sizeof *pl->member);
    if (!pl->T || !pl->D || !pl->member) return -ENOMEM;
    probe_all(rs, threads, pl->T, pl->D);
    pl->width = width_majority(rs, pl->D, pl->census, sizeof pl->census, &pl->odd);
    XXH3_state_t *h = XXH3_createState();
    if (!h) return -ENOMEM;
    XXH3_64bits_reset(h);
    for (size_t i = 0; i < n; i++) {
        uint8_t rec[14];
        cxs_st64(rec, pl->T[i]);
        cxs_st32(rec + 8, pl->D[i]);
        rec[12] = rs->items[i].mfcc != NULL;
        rec[13] = rs->items[i].transcript != NULL;
        XXH3_64bits_update(h, rs->items[i].id, strlen(rs->items[i].id) + 1);
        XXH3_64bits_update(h, rec, sizeof rec);
    }
    pl->input_hash = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    /* Parts without a shard size: a shard size that gives each part work. */
    uint64_t size = shard_size ? shard_size : CXS_WRITER_DEFAULT_SHARD_SIZE;
    if (parts > 1 && !shard_size) size = size_for_parts(pl, rs, lo, parts, size);
    plan_layout(pl, rs, lo, size);
    return 0;
}

/* ---- the call ------------------------------------------------------------ */

typedef struct run {
    const cxs_npy_opts *no;
} run;

/* A note or warning, whole whatever its length (paths of any size). */
static void note(run *r, cxs_note_fn fn, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(run *r, cxs_note_fn fn, const char *fmt, ...) {
    if (!fn) return;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    char small[512];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    char *msg = n >= (int)sizeof small ? malloc((size_t)n + 1) : NULL;
    if (msg) vsnprintf(msg, (size_t)n + 1, fmt, again);
    va_end(again);
    va_end(ap);
    fn(r->no->user, msg ? msg : small);
    free(msg);
}

static void event(const cxs_npy_opts *no, int kind, const char *id, uint64_t count,
                  const cxs_diag *d) {
    if (no->event) no->event(no->user, kind, id, count, d);
}

/* The raw directory and its vocabulary (none without transcripts). */
static int open_raw(const char *rawdir, const cxs_writer_opts *wo, const cxs_npy_opts *no,
                    run *r, raw_set *rs, vocab *v, cxs_diag *d) {
    memset(v, 0, sizeof *v);
    int rc = raw_list(rawdir, rs, d);
    if (rc) return rc;
    for (const char *l = rs->notes; l && *l;) {
        const char *e = strchr(l, '\n');
        note(r, no->warn, "%.*s", (int)(e - l), l);
        l = e + 1;
    }
    if (!rs->has_transcripts) return 0;
    uint32_t n;
    const char *const *sym = cxs_phonemes(&n);
    if (wo->vocab && wo->vocab_size) {
        sym = wo->vocab;
        n = wo->vocab_size;
    }
    if (no->vocab_file) rc = vocab_load(v, no->vocab_file, d);
    else rc = vocab_symbols(v, sym, n, d);
    if (rc == CXS_E_INPUT) { /* the caller's vocabulary */
        rc = CXS_E_INVALID;
        if (d) d->code = rc;
    }
    if (!rc) rc = vocab_markers(v, no->sos, no->eos, d);
    if (rc) {
        vocab_free(v);
        raw_free(rs);
    }
    return rc;
}

/* Check only (out NULL): every utterance read and validated, each problem
 * an event. */
static int check(const raw_set *rs, const vocab *v, const cxs_writer_opts *wo,
                 const cxs_npy_opts *no, run *r, const char *rawdir, cxs_progress_fn progress,
                 void *user, cxs_import_info *res, cxs_diag *d) {
    const unsigned threads = wo->threads ? wo->threads : cxs_cpu_count();
    conv_opts co = {CXS_DTYPE_F32, CXS_NORM_NONE, rs->has_transcripts ? v : NULL,
                    no->transcripts, (no->flags & CXS_NPY_FILL_NONFINITE) != 0};
    plan pl;
    const layout lo = {CXS_DTYPE_F32, 0, 0};
    int rc = plan_make(&pl, rs, &lo, threads, 0, 0);
    if (rc) {
        plan_free(&pl);
        return cxs_diagf(d, rc, "%s: %s", rawdir, strerror(-rc));
    }
    uint32_t D = pl.width;
    if (pl.census[0])
        note(r, no->warn, "%s/mfcc: widths: %s%s%s; checking against %u, the most common",
             rawdir, pl.census, pl.odd ? ": " : "", pl.odd ? pl.odd : "", D);
    char census[sizeof pl.census];
    memcpy(census, pl.census, sizeof census);
    plan_free(&pl);
    rslot *slots = calloc(import_ring_slots(threads), sizeof *slots);
    loader L = {rs, co, slots};
    import_ring *ring = NULL;
    if (!slots) return cxs_diagf(d, -ENOMEM, "out of memory");
    if ((rc = import_ring_start(&ring, threads, 0, rs->n, load_one, &L))) {
        free(slots);
        return cxs_diagf(d, rc, "%s: cannot start the reader threads: %s", rawdir,
                         strerror(-rc));
    }
    for (size_t i = 0; i < rs->n; i++) {
        rslot *s = &slots[import_ring_get(ring, i)];
        width_check(s, rs, i, &D, census);
        if (s->status) {
            event(no, CXS_NPY_PROBLEM, rs->items[i].id, 0, &s->d);
            res->w.num_skipped++;
        } else {
            res->w.num_utterances++;
            res->w.num_frames += s->u.T;
            res->input_bytes += s->u.file_bytes;
            if (s->u.filled) {
                res->filled_values += s->u.filled;
                res->filled_utts++;
            }
        }
        if ((rc = import_step(ring, i, 0, rs->n, progress, user, rawdir, "check", d))) break;
    }
    import_ring_stop(ring);
    for (size_t k = 0; k < import_ring_slots(threads); k++) utt_free(&slots[k].u);
    free(slots);
    res->w.dim = D;
    return rc;
}

int cxs_import_npy(const char *rawdir, const char *out, const cxs_writer_opts *wo_in,
                   const cxs_npy_opts *no_in, cxs_progress_fn progress, void *user,
                   cxs_import_info *info, cxs_diag *d) {
    int rc;
    if (!rawdir || !wo_in)
        return cxs_diagf(d, CXS_E_INVALID, "cxs_import_npy: raw directory or writer options "
                                           "missing");
    if ((rc = CXS_OPTS_CHECK(wo_in, "cxs_writer_opts", d)) ||
        (no_in && (rc = CXS_OPTS_CHECK(no_in, "cxs_npy_opts", d))))
        return rc;
    cxs_npy_opts ndef;
    cxs_npy_opts_init(&ndef);
    const cxs_npy_opts *no = no_in ? no_in : &ndef;
    if (no->transcripts > CXS_TRANSCRIPTS_BOTH)
        return cxs_diagf(d, CXS_E_INVALID, "cxs_import_npy: transcripts %u is not one of "
                                           "CXS_TRANSCRIPTS_*", no->transcripts);
    if (no->parts && (no->part < 1 || no->part > no->parts))
        return cxs_diagf(d, CXS_E_INVALID, "cxs_import_npy: part %u of %u (1 <= part <= parts)",
                         no->part, no->parts);
    run r = {no};
    raw_set rs;
    vocab v;
    if ((rc = open_raw(rawdir, wo_in, no, &r, &rs, &v, d))) return rc;
    cxs_import_info res;
    memset(&res, 0, sizeof res);
    res.listed = rs.n;
    res.has_labels = (uint32_t)rs.has_transcripts;
    res.vocab_size = rs.has_transcripts ? v.n : 0;
    if (!out) {
        rc = check(&rs, &v, wo_in, no, &r, rawdir, progress, user, &res, d);
        if (!rc && info) *info = res;
        vocab_free(&v);
        raw_free(&rs);
        return rc;
    }
    plan pl = {0};
    cxs_writer *w = NULL;
    rslot *slots = NULL;
    import_ring *ring = NULL;
    const int is_part = no->parts > 0;
    const unsigned threads = wo_in->threads ? wo_in->threads : cxs_cpu_count();
    const uint32_t vocab_n = rs.has_transcripts ? v.n : 0;
    /* The width of the frame labels (LABELS): none with label sequences
     * only.  The layout counts LABELS, not the sequences (spec 9). */
    const int seq_only = vocab_n && no->transcripts == CXS_TRANSCRIPTS_SEQUENCE;
    const uint32_t lw = seq_only ? 0 : cxs_label_width(vocab_n);
    const uint32_t sw = cxs_label_width(vocab_n);
    const layout lo = {wo_in->dtype, wo_in->guard, lw};
    if ((rc = plan_make(&pl, &rs, &lo, threads, wo_in->shard_size, no->parts))) {
        rc = cxs_diagf(d, rc, "%s: %s", out, strerror(-rc));
        goto out;
    }
    char sz[32], sz2[32];
    if (pl.census[0])
        note(&r, no->note, "%s/mfcc: widths: %s%s%s; packing width %u, the most common", rawdir,
             pl.census, pl.odd ? ": " : "", pl.odd ? pl.odd : "", pl.width);
    if (is_part && wo_in->shard_size && pl.nshards < no->parts && pl.nshards < rs.n) {
        /* What the size would be without a shard size: the fix. */
        uint32_t S = pl.nshards;
        uint64_t c = size_for_parts(&pl, &rs, &lo, no->parts, wo_in->shard_size);
        pl.nshards = S;
        rc = cxs_diagf(d, CXS_E_INVALID,
                       "--part %u/%u: --shard-size %s lays %s out in %u shard%s, so %u of the "
                       "%u parts would have nothing to pack; give --shard-size %s or less, or "
                       "leave --shard-size out (pack then chooses it for %u parts)",
                       no->part, no->parts, size_arg(wo_in->shard_size, sz, sizeof sz), rawdir,
                       pl.nshards, pl.nshards == 1 ? "" : "s", no->parts - pl.nshards,
                       no->parts, size_arg(c, sz2, sizeof sz2), no->parts);
        goto out;
    }
    const uint64_t asked = wo_in->shard_size ? wo_in->shard_size : CXS_WRITER_DEFAULT_SHARD_SIZE;
    if (is_part && pl.shard_size != asked)
        note(&r, no->note, "--part %u/%u: shards of at most %s (not %s), so that each of the %u "
             "parts has about the same work; merge gives the bytes of `ctxshard pack %s OUT "
             "--shard-size %s`", no->part, no->parts, size_arg(pl.shard_size, sz, sizeof sz),
             size_arg(asked, sz2, sizeof sz2), no->parts, rawdir, sz);
    /* This run's slice: whole shards of the plan, so that parts meet at
     * shard boundaries; item range [i_lo, i_hi). */
    uint32_t s_lo = 0, s_hi = pl.nshards;
    if (is_part) {
        s_lo = (uint32_t)((uint64_t)pl.nshards * (no->part - 1) / no->parts);
        s_hi = (uint32_t)((uint64_t)pl.nshards * no->part / no->parts);
    }
    size_t i_lo = 0, i_hi = rs.n;
    while (i_lo < rs.n && pl.member[i_lo] < s_lo) i_lo++;
    i_hi = i_lo;
    while (i_hi < rs.n && pl.member[i_hi] < s_hi) i_hi++;
    uint64_t f_base = 0;
    for (size_t i = 0; i < i_lo; i++) f_base += pl.T[i];
    res.shard_first = s_lo;
    res.shard_end = s_hi;
    res.shards_planned = pl.nshards;
    if (is_part && s_lo == s_hi)
        note(&r, no->warn, "%s: part %u of %u has nothing to pack: the %zu utterance%s of %s "
             "make%s only %u shard%s, fewer than %u parts; it is written empty because merge "
             "needs every part (use --part I/%u, or fewer tasks, to give every part work)", out,
             no->part, no->parts, rs.n, rs.n == 1 ? "" : "s", rawdir, rs.n == 1 ? "s" : "",
             pl.nshards, pl.nshards == 1 ? "" : "s", no->parts, pl.nshards ? pl.nshards : 1);
    cxs_writer_part part = {no->part, no->parts, s_lo, s_hi, pl.nshards, i_lo, f_base,
                            rs.n, i_lo, i_hi, pl.input_hash};
    cxs_writer_opts wo = *wo_in;
    wo.shard_size = pl.shard_size;
    wo.threads = threads < CXS_WRITER_MAX_THREADS ? threads : CXS_WRITER_MAX_THREADS;
    wo.vocab_size = vocab_n;
    wo.vocab = (const char *const *)v.sym;
    wo.label_seqs = !vocab_n ? CXS_SEQ_NONE
                    : no->transcripts == CXS_TRANSCRIPTS_SEQUENCE ? CXS_SEQ_ONLY
                    : no->transcripts == CXS_TRANSCRIPTS_BOTH     ? CXS_SEQ_WITH_FRAMES
                                                                  : CXS_SEQ_NONE;
    /* The plan cuts the shards, so that a part cuts them where a whole
     * pack would. */
    wo.flags |= CXS_WRITER_MANUAL_CUT;
    wo.part = is_part ? &part : NULL;
    if ((rc = cxs_writer_create(out, &wo, &w, d))) goto out;
    cxs_writer_info wi;
    cxs_writer_info_get(w, &wi);
    if (wi.stale_removed)
        note(&r, no->note, "removed %u temporary director%s beside %s, left by an interrupted pack",
             wi.stale_removed, wi.stale_removed == 1 ? "y" : "ies", out);
    conv_opts co = {wo.dtype, wo.normalize, rs.has_transcripts ? &v : NULL, no->transcripts,
                    (no->flags & CXS_NPY_FILL_NONFINITE) != 0};
    if (!(slots = calloc(import_ring_slots(threads), sizeof *slots))) {
        rc = cxs_diagf(d, -ENOMEM, "out of memory");
        goto out;
    }
    loader L = {&rs, co, slots};
    if ((rc = import_ring_start(&ring, threads, i_lo, i_hi, load_one, &L))) {
        rc = cxs_diagf(d, rc, "%s: cannot start the reader threads: %s", out, strerror(-rc));
        goto out;
    }
    uint32_t D = pl.width, cur = 0;
    int have = 0;
    for (size_t i = i_lo; i < i_hi; i++) {
        rslot *s = &slots[import_ring_get(ring, i)];
        width_check(s, &rs, i, &D, pl.census);
        const raw_item *it = &rs.items[i];
        if (s->status) {
            if (s->status == CXS_E_INPUT) event(no, CXS_NPY_PROBLEM, it->id, 0, &s->d);
            if (s->status != CXS_E_INPUT || !wo.on_error_skip) {
                rc = cxs_diag_copy(d, s->status, &s->d);
                goto out;
            }
            /* the list holds one line per utterance: a TAB or newline of a
             * path in the reason becomes a space */
            char reason[sizeof s->d.message];
            snprintf(reason, sizeof reason, "%s", s->d.message);
            for (char *c = reason; *c; c++)
                if (*c == '\t' || *c == '\n' || *c == '\r') *c = ' ';
            if ((rc = cxs_writer_skip(w, it->id, reason))) {
                rc = cxs_diagf(d, rc, "%s: %s", out, strerror(-rc));
                goto out;
            }
        } else {
            res.input_bytes += s->u.file_bytes;
            if (s->u.filled) {
                cxs_diag fd;
                cxs_diag_at(&fd, 0, it->mfcc, CXS_NO_OFFSET,
                            "%s: %llu NaN or infinite value%s stored as 0", it->mfcc,
                            (unsigned long long)s->u.filled, s->u.filled == 1 ? "" : "s");
                event(no, CXS_NPY_FILLED, it->id, s->u.filled, &fd);
                res.filled_utts++;
                res.filled_values += s->u.filled;
            }
            if (have && pl.member[i] != cur && (rc = cxs_writer_cut(w, d))) goto out;
            cur = pl.member[i];
            have = 1;
            cxs_writer_utt u = {s->u.feat, s->u.T, s->u.D, wo.dtype, 0, 0, 0,
                                lw ? s->u.labels : NULL, lw ? s->u.T : 0, lw, 1,
                                wo.label_seqs ? s->u.seq : NULL,
                                wo.label_seqs ? s->u.seq_len : 0, sw};
            /* The reader threads validated the utterance: a refusal here
             * is the system's (disk full, out of memory). */
            if ((rc = cxs_writer_add(w, it->id, &u, d))) goto out;
        }
        if ((rc = import_step(ring, i, i_lo, i_hi, progress, user, out, "pack", d))) goto out;
    }
    import_ring_stop(ring);
    ring = NULL;
    rc = import_commit(&w, is_part, rawdir, "pack", &res, info, d);
out:
    import_ring_stop(ring);
    cxs_writer_abort(w);
    for (size_t k = 0; slots && k < import_ring_slots(threads); k++) utt_free(&slots[k].u);
    free(slots);
    plan_free(&pl);
    vocab_free(&v);
    raw_free(&rs);
    return rc;
}
