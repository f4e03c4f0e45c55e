/* buckets.c - the utterance sampler: whole utterances in batches under a
 * frame budget, bucketed by length (see ctxshard.h). */
#include "buckets.h"
#include "abi.h"

#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blocks.h"
#include "dataset_internal.h"
#include "fault.h"
#include "hooks.h"
#include "plancache.h"

#define CXS_UTT_MAX_AUTO_BUCKETS CXS_UTT_DEFAULT_BUCKETS

struct cxs_utt_sampler {
    const cxs_dataset *ds;
    cxs_utt_sampler_opts o;
    /* The length buckets: bounds[0 .. nb-2] (a length's bucket is the count
     * of bounds <= it), and lut[T] = the bucket of length T for T <= lut_max
     * when the lengths are short enough for a table; nothing per utterance. */
    uint64_t bounds[1024];
    uint16_t *lut;
    uint64_t lut_max;
    uint64_t count[1024]; /* utterances of every bucket (the whole dataset's) */
    uint32_t max_batch;
    uint64_t max_frames;
    uint32_t esize, shift; /* the plans' entries: bytes, and the length's shift */
    int block;
    cxs_block_sched bs;
    cxs_plan_cache cache; /* the last epochs asked, under plans_mu */
};

/* One lock for every sampler's cache: held only to look up, insert or
 * release a plan (never while building one, and never with another lock),
 * and across fork() so that a child never inherits it locked. */
static pthread_mutex_t plans_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void fork_prepare(void) { pthread_mutex_lock(&plans_mu); }
static void fork_after(void) { pthread_mutex_unlock(&plans_mu); }
static void register_atfork(void) { pthread_atfork(fork_prepare, fork_after, fork_after); }

static inline uint64_t mix64(uint64_t z); /* below */

/* The length bucket of an utterance of T frames. */
static inline uint32_t bucket_of(const cxs_utt_sampler *s, uint32_t nb, uint64_t T) {
    if (nb <= 1) return 0;
    if (s->lut) return s->lut[T <= s->lut_max ? T : s->lut_max];
    uint32_t lo = 0, hi = nb - 1; /* bucket = count of bounds <= T */
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (s->bounds[mid] <= T) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static inline uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rng_next(uint64_t *st) { return mix64(*st += 0x9e3779b97f4a7c15ull); }

/* Uniform in [0, n), n > 0 (Lemire's multiply, rejection for exactness). */
static uint64_t rng_below(uint64_t *st, uint64_t n) {
    for (;;) {
        unsigned __int128 m = (unsigned __int128)rng_next(st) * n;
        uint64_t lo = (uint64_t)m;
        if (lo >= n || lo >= (0 - n) % n) return (uint64_t)(m >> 64);
    }
}

/* (INDEX checked whole at the sampler's creation) */


static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The plan's utterance array: mapped, with transparent huge pages asked
 * for (first touches of fresh memory dominate building a large plan). */
static void *entries_alloc(uint64_t n, uint32_t esize) {
    size_t bytes = (size_t)(n ? n : 1) * esize;
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    if (bytes >= (4u << 20)) madvise(m, bytes, MADV_HUGEPAGE);
#endif
    return m;
}

static void plan_free(void *plan) {
    cxs_utt_plan *p = plan;
    if (!p) return;
    free(p->bstart);
    free(p->blen);
    if (p->utts) munmap(p->utts, (size_t)(p->nutts ? p->nutts : 1) * p->esize);
    free(p->gstart);
    free(p->rstart);
    free(p->rng);
    free(p);
}

void cxs_utt_sampler_free(cxs_utt_sampler *s) {
    if (!s) return;
    cxs_plan_cache_clear(&s->cache, plan_free);
    if (s->block) cxs_block_sched_destroy(&s->bs);
    free(s->lut);
    free(s);
}

/* fa(a) on a thread of its own while fb(b) runs on this one (in turn when
 * no thread can start); a's failure, else b's.  Each side enters
 * its own recovery region: a region is its thread's, and this thread
 * never leaves one while the other runs. */
typedef struct side {
    int (*fn)(void *);
    void *arg;
    int rc;
} side;

static void *side_main(void *p) {
    side *x = p;
    x->rc = x->fn(x->arg);
    return NULL;
}

static int run_pair(int (*fa)(void *), void *a, int (*fb)(void *), void *b) {
    side sa = {fa, a, 0};
    pthread_t t;
    int started = pthread_create(&t, NULL, side_main, &sa) == 0;
    if (!started) sa.rc = fa(a);
    int rb = fb(b);
    if (started) pthread_join(t, NULL);
    return sa.rc ? sa.rc : rb;
}

/* Utterances from which the passes over every length are shared by two
 * threads (their results are combined so that they are the same). */
#define SPLIT_MIN (1u << 19)

static int split_ok(void) { return cxs_cpu_count() > 1; }

/* The passes over every length read INDEX in order, but from a file
 * mapping of small pages, where the hardware's prefetch stops at every
 * page: asked for 2 KiB ahead (a prefetch never faults, past the end
 * of the file either). */
#define INDEX_AHEAD(sh, lu) __builtin_prefetch((sh)->index + 8 * (lu) + 2048)

typedef struct lengths_arg {
    const cxs_dataset *ds;
    uint64_t budget;
    uint64_t *hist, *hist2, hist_max; /* hist[T] + hist2[T] (T <= hist_max), or NULL: */
    uint64_t *sorted;         /* every length, in utterance order */
    uint64_t over, longest, longest_u, shortest;
    cxs_fault f; /* where the pass faulted */
    int rc;
} lengths_arg;

/* The sampler's pass over every length, in a recovery region (it reads
 * INDEX from the mapping and allocates nothing): a shard truncated since
 * open fails the creation with CXS_E_TRUNCATED instead of a SIGBUS. */
static int length_pass(void *p) {
    lengths_arg *a = p;
    const cxs_dataset *ds = a->ds;
    uint64_t *const hist = a->hist, *const hist2 = a->hist2, *const sorted = a->sorted;
    const uint64_t budget = a->budget, hist_max = a->hist_max;
    uint64_t over = 0, longest = 0, longest_u = 0, shortest = UINT64_MAX;
    for (uint32_t si = 0; si < ds->meta.num_shards; si++) {
        const shard *sh = &ds->shards[si];
        uint64_t prev = cxs_index_at(sh, 0);
        for (uint64_t lu = 0; lu < sh->meta.num_utterances; lu++) {
            INDEX_AHEAD(sh, lu);
            uint64_t nx = cxs_index_at(sh, lu + 1), T = nx - prev;
            prev = nx;
            if (T > budget) over++;
            if (T > longest) longest = T, longest_u = sh->u_start + lu;
            if (T < shortest) shortest = T;
            /* (within STATS: checked) every other length in a second
             * histogram: a run of equal lengths is then not a chain of
             * increments of one counter, each waiting for the last */
            if (hist) ((lu & 1) ? hist2 : hist)[T <= hist_max ? T : hist_max]++;
            else sorted[sh->u_start + lu] = T;
        }
    }
    a->over = over, a->longest = longest, a->longest_u = longest_u, a->shortest = shortest;
    return 0;
}

static int lengths_mapped(void *p) {
    lengths_arg *a = p;
    return a->rc = cxs_fault_run(a->ds, length_pass, a, &a->f);
}

typedef struct index_arg {
    const cxs_dataset *ds;
    cxs_diag *d;
    int rc;
} index_arg;

static int index_check(void *p) {
    index_arg *a = p;
    return a->rc = cxs_index_check_all(a->ds, a->d);
}

void cxs_utt_sampler_opts_init(cxs_utt_sampler_opts *o) { memset(o, 0, sizeof *o); }

int cxs_utt_sampler_create(const cxs_dataset *ds, const cxs_utt_sampler_opts *opts,
                           cxs_utt_sampler **out, cxs_diag *d) {
    if (!ds || !opts || !out)
        return cxs_diagf(d, CXS_E_INVALID, "utterance sampler: no dataset, options or result pointer");
    int orc = CXS_OPTS_CHECK(opts, "cxs_utt_sampler_opts", d);
    if (orc) return orc;
    cxs_utt_sampler_opts o = *opts;
    if (!o.world_size) o.world_size = 1;
    if (o.kind > CXS_UTT_SHUFFLE)
        return cxs_diagf(d, CXS_E_INVALID, "utterance sampler: unknown kind %u", o.kind);
    if (!o.frame_budget)
        return cxs_diagf(d, CXS_E_INVALID, "utterance sampler: frame_budget (padded frames a batch may hold) is required");
    if (o.rank >= o.world_size)
        return cxs_diagf(d, CXS_E_INVALID, "utterance sampler: rank %u is not below world_size %u",
                         o.rank, o.world_size);
    if (o.drop_last > 1 || o.long_alone > 1)
        return cxs_diagf(d, CXS_E_INVALID, "utterance sampler: drop_last and long_alone must be 0 or 1");
    if (o.buckets > 1024)
        return cxs_diagf(d, CXS_E_INVALID, "utterance sampler: buckets %u is above 1024", o.buckets);
    if (o.blocks > 1024)
        return cxs_diagf(d, CXS_E_INVALID, "utterance sampler: blocks %u is above 1024", o.blocks);
    if (o.memory_bytes && o.kind != CXS_UTT_SHUFFLE)
        return cxs_diagf(d, CXS_E_INVALID, "utterance sampler: block mode (memory_bytes) needs the shuffled kind");
    if (!o.blocks) o.blocks = 8;
    const uint64_t U = ds->meta.num_utterances;
    if (!o.buckets) {
        /* More buckets always pad less (measured: bench/utt_bench.py),
         * but a bucket of about one batch makes the same batch every epoch
         * and its last, partial batch is a batch more: enough data in every
         * bucket for about two full batches.  Block mode buckets one group
         * of blocks at a time. */
        uint64_t frames = ds->meta.num_frames;
        if (o.memory_bytes) {
            uint64_t group = o.memory_bytes / (o.blocks + 1ull) * o.blocks / ds->row_bytes;
            if (group < frames) frames = group;
        }
        uint64_t nb = frames / 2 / o.frame_budget; /* 2 * budget may wrap */
        o.buckets = nb < 1 ? 1 : nb > CXS_UTT_MAX_AUTO_BUCKETS ? CXS_UTT_MAX_AUTO_BUCKETS : (uint32_t)nb;
    }
    /* One pass over the lengths (the INDEX in place, shard by shard): the
     * longest, those over the budget, and their histogram when the lengths
     * are short enough for one (the quantiles then need no sort and no
     * array per utterance). */
    const uint64_t hist_max = ds->max_len <= (1u << 20) ? ds->max_len : 0;
    uint64_t *hist = hist_max ? calloc(2 * (hist_max + 1), sizeof *hist) : NULL;
    uint64_t *sorted = hist_max ? NULL : malloc((U ? U : 1) * sizeof *sorted);
    if (!hist && !sorted) return cxs_diagf(d, -ENOMEM, "utterance sampler: out of memory");
    /* Every length is read: the whole INDEX checked, once.  On a large
     * dataset the check (hashing INDEX) runs on a thread of its own while
     * this one reads the lengths; they are used only once it has passed. */
    lengths_arg la = {ds, o.frame_budget, hist, hist ? hist + hist_max + 1 : NULL, hist_max,
                      sorted, 0, 0, 0, 0, {0, 0}, 0};
    index_arg ia = {ds, d, 0};
    if (U >= SPLIT_MIN && ds->lazy && split_ok()) {
        cxs_index_populate(ds); /* once, for both */
        run_pair(index_check, &ia, lengths_mapped, &la);
    } else if (!index_check(&ia)) {
        lengths_mapped(&la);
    }
    const int crc = ia.rc, lrc = la.rc;
    if (crc || lrc) {
        free(hist);
        free(sorted);
        if (crc) return crc;
        /* a shard truncated since open (or since its INDEX was checked) */
        return cxs_diagf(d, lrc,
                         "utterance sampler: %s: truncated since the dataset was opened (INDEX "
                         "byte %llu can no longer be read)",
                         ds->shards[la.f.shard].path, (unsigned long long)la.f.offset);
    }
    if (hist)
        for (uint64_t t = 0; t <= hist_max; t++) hist[t] += la.hist2[t];
    const uint64_t over = la.over, longest = la.longest, longest_u = la.longest_u;
    uint64_t shortest = la.shortest;
    if (over && !o.long_alone) {
        free(hist);
        free(sorted);
        cxs_utterance ut;
        cxs_dataset_utterance(ds, longest_u, &ut);
        int idl = ut.id_len > 200 ? 200 : (int)ut.id_len;
        return cxs_diagf(d, CXS_E_RANGE,
                         "utterance sampler: %llu utterance%s longer than frame_budget %llu (the "
                         "longest, %.*s, has %llu frames): raise the budget, or serve them alone "
                         "(long_alone)",
                         (unsigned long long)over, over == 1 ? " is" : "s are",
                         (unsigned long long)o.frame_budget, idl, ut.id,
                         (unsigned long long)longest);
    }
    if (longest > UINT32_MAX) { /* a plan entry holds a length in 32 bits */
        free(hist);
        free(sorted);
        return cxs_diagf(d, CXS_E_UNSUPPORTED,
                         "utterance sampler: an utterance of %llu frames (at most 2^32 - 1)",
                         (unsigned long long)longest);
    }
    cxs_utt_sampler *s = calloc(1, sizeof *s);
    if (!s) {
        free(hist);
        free(sorted);
        return cxs_diagf(d, -ENOMEM, "utterance sampler: out of memory");
    }
    s->ds = ds;
    s->o = o;
    /* Bucket bounds at the quantiles of the lengths, fixed for the run:
     * bound i-1 is the length of rank U*i/nb in sorted order. */
    const uint32_t nb = o.buckets;
    if (hist) {
        uint64_t below = 0, T = 0; /* lengths < T: below */
        for (uint32_t i = 1; i < nb; i++) {
            const uint64_t rank = U * i / nb;
            while (below + hist[T] <= rank) below += hist[T++];
            s->bounds[i - 1] = T;
        }
        /* the buckets' sizes, which every epoch's plan starts from */
        for (uint64_t t = 0; t <= hist_max; t++) s->count[bucket_of(s, nb, t)] += hist[t];
        free(hist);
        if (nb > 1) { /* each length's bucket, by the search it replaces */
            uint16_t *lut = malloc((hist_max + 1) * sizeof *lut);
            if (!lut) {
                cxs_utt_sampler_free(s);
                return cxs_diagf(d, -ENOMEM, "utterance sampler: out of memory");
            }
            for (uint64_t t = 0; t <= hist_max; t++) lut[t] = (uint16_t)bucket_of(s, nb, t);
            s->lut = lut;
            s->lut_max = hist_max;
        }
    } else {
        qsort(sorted, U, sizeof *sorted, cmp_u64);
        for (uint32_t i = 1; i < nb; i++) s->bounds[i - 1] = U ? sorted[U * i / nb] : 0;
        for (uint64_t u = 0; u < U; u++) s->count[bucket_of(s, nb, sorted[u])]++;
        free(sorted);
    }
    if (shortest == UINT64_MAX) shortest = 1;
    uint64_t mb = o.max_batch ? o.max_batch : o.frame_budget / (shortest ? shortest : 1);
    if (mb > U) mb = U;
    if (mb > UINT32_MAX) mb = UINT32_MAX;
    if (mb < 1) mb = 1;
    s->max_batch = (uint32_t)mb;
    s->max_frames = o.frame_budget;
    if (mb * longest < s->max_frames) s->max_frames = mb * longest;
    if (longest > s->max_frames) s->max_frames = longest; /* long_alone */
    /* A plan entry holds an utterance's number and its length: in 4 bytes
     * when both fit (half the fresh memory of a plan, whose first touches
     * dominate building it), in 8 otherwise.  The order is the same. */
    uint32_t ubits = 1, tbits = 1;
    while (ubits < 64 && (U - (U != 0)) >> ubits) ubits++;
    while (tbits < 64 && longest >> tbits) tbits++;
    s->esize = ubits + tbits <= 32 ? 4 : 8;
    s->shift = s->esize == 4 ? ubits : 32;
    if (o.memory_bytes) {
        cxs_diag bd;
        uint64_t block_bytes = o.memory_bytes / (o.blocks + 1ull);
        int rc = cxs_block_sched_init(&s->bs, ds, o.seed, block_bytes / ds->row_bytes,
                                      ds->meta.guard, o.blocks, &bd);
        if (rc) {
            cxs_utt_sampler_free(s);
            return cxs_diagf(d, rc,
                             "utterance sampler: the memory budget of %llu bytes over %u+1 blocks: "
                             "%s%s",
                             (unsigned long long)o.memory_bytes, o.blocks, bd.message,
                             rc == CXS_E_RANGE ? ": raise memory or lower blocks" : "");
        }
        s->block = 1;
    }
    pthread_once(&atfork_once, register_atfork);
    *out = s;
    return 0;
}

/* A plan entry: the utterance (low `shift` bits) and its length (the rest),
 * in 4 or 8 bytes (cxs_utt_plan.esize). */
#define ENTRY(u, T) ((uint64_t)(u) | (uint64_t)(T) << shift)
#define ENTRY_T(e) ((e) >> shift)

static inline uint64_t ent_get(const void *x, uint64_t i, int wide) {
    return wide ? ((const uint64_t *)x)[i] : ((const uint32_t *)x)[i];
}

static inline void ent_put(void *x, uint64_t i, uint64_t e, int wide) {
    if (wide) ((uint64_t *)x)[i] = e;
    else ((uint32_t *)x)[i] = (uint32_t)e;
}

/* Utterances per bin of the shuffle: a bin's entries (64 KiB) are
 * shuffled in cache. */
#define BIN_SHIFT 13

static inline void fisher_yates(void *x, uint64_t m, uint64_t *st, int wide) {
    for (uint64_t i = m; i > 1; i--) {
        uint64_t j = rng_below(st, i), t = ent_get(x, i - 1, wide);
        ent_put(x, i - 1, ent_get(x, j, wide), wide);
        ent_put(x, j, t, wide);
    }
}

/* Steps 1-4 of the header's order for the m utterances list[0..m) (NULL:
 * all of the dataset's, in order) of one group, into out[0..m): each
 * utterance's entry goes to its length bucket and, shuffled, to a random
 * bin of it (2^k bins of about 2^BIN_SHIFT utterances a bucket: every bin
 * is written in turn, so the pass is sequential), then every bin is
 * shuffled in cache -- a uniformly random order inside each bucket, the
 * buckets in order (Rao and Sandelius' shuffle), in two passes over the
 * utterances and none at random over all of them; the greedy cuts are
 * made bin by bin as each is shuffled (they read only what is before
 * them, and draw nothing), while the bin is in cache; then the batches
 * (start, length) in a seeded random order appended to p.  base is out's
 * offset in p->utts.  tmp: room for the bins' counts, rs and rl for m
 * batches. */
/* Bins a group of m utterances may need at most (2^lg >= count / 2^BIN_SHIFT
 * per bucket: under 2 * m / 2^BIN_SHIFT + 1 each), plus one. */
static uint64_t max_bins(uint64_t m) { return 2 * (m >> BIN_SHIFT) + 1025 + 1; }

/* One pass over a group's utterances (list[0..m), or utterances u0..u1-1
 * of the dataset when list is NULL) that reads their lengths from INDEX:
 * the buckets' sizes, the bins' sizes (+1: into cnt[bin + 1]), or the
 * entries scattered to their bins (cnt: each bin's next slot). */
enum { PASS_BUCKETS, PASS_BINS, PASS_SCATTER };

typedef struct pass {
    const cxs_utt_sampler *s;
    const uint64_t *list;
    uint64_t m, u0, u1;
    int kind;
    uint32_t nb;
    const uint64_t *lg, *first;
    uint64_t bkey;
    uint64_t *cnt;
    void *out;
} pass;

static inline __attribute__((always_inline)) int pass_w(pass *x, const int wide) {
    const cxs_utt_sampler *s = x->s;
    const cxs_dataset *ds = s->ds;
    const uint64_t *lg = x->lg, *first = x->first, bkey = x->bkey, *list = x->list;
    const uint32_t nb = x->nb, shift = s->shift;
    uint64_t *cnt = x->cnt;
    void *out = x->out;
#define FOR_EACH_UTT(body)                                                                \
    do {                                                                                  \
        if (list) {                                                                       \
            for (uint64_t i_ = 0; i_ < x->m; i_++) {                                      \
                const uint64_t u = list[i_], T = cxs_utt_frames(ds, u);                   \
                body;                                                                     \
            }                                                                             \
        } else if (x->u0 < x->u1) {                                                       \
            uint64_t u = x->u0;                                                           \
            for (uint32_t si_ = cxs_utt_shard(ds, u); u < x->u1; si_++) {                 \
                const shard *sh_ = &ds->shards[si_];                                      \
                uint64_t lu_ = u - sh_->u_start, prev_ = cxs_index_at(sh_, lu_);          \
                uint64_t end_ = sh_->meta.num_utterances;                                 \
                if (end_ > x->u1 - sh_->u_start) end_ = x->u1 - sh_->u_start;             \
                for (; lu_ < end_; lu_++, u++) {                                          \
                    INDEX_AHEAD(sh_, lu_);                                                \
                    const uint64_t nx_ = cxs_index_at(sh_, lu_ + 1), T = nx_ - prev_;     \
                    prev_ = nx_;                                                          \
                    body;                                                                 \
                }                                                                         \
            }                                                                             \
        }                                                                                 \
    } while (0)
#define BIN_OF(u, b) (first[b] + (lg[b] ? mix64(bkey + (u) * 0x9e3779b97f4a7c15ull) >> (64 - lg[b]) : 0))
    if (x->kind == PASS_BUCKETS) FOR_EACH_UTT({
            (void)u;
            cnt[bucket_of(s, nb, T)]++;
        });
    else if (x->kind == PASS_BINS) FOR_EACH_UTT({
            uint32_t b = bucket_of(s, nb, T);
            cnt[BIN_OF(u, b) + 1]++;
        });
    else FOR_EACH_UTT({
            uint32_t b = bucket_of(s, nb, T);
            const uint64_t at = cnt[BIN_OF(u, b)]++;
            ent_put(out, at, ENTRY(u, T), wide);
            /* the bin's next cache line, asked for now: the utterances go
             * to bins all over the array, and every line of it would
             * otherwise be first written by a store that misses */
            __builtin_prefetch((char *)out + (at + 64 / (wide ? 8 : 4)) * (wide ? 8 : 4), 1);
        });
#undef BIN_OF
#undef FOR_EACH_UTT
    return 0;
}

static int pass_wide(void *x) { return pass_w(x, 1); }
static int pass_narrow(void *x) { return pass_w(x, 0); }

/* A pass reads INDEX from the mapping: in a recovery region (it allocates
 * nothing), so a shard truncated since open fails the plan with
 * CXS_E_TRUNCATED instead of a SIGBUS. */
static int pass_mapped(pass *x) {
    cxs_fault f;
    return cxs_fault_run(x->s->ds, x->s->esize == 8 ? pass_wide : pass_narrow, x, &f);
}

static int pass_one(void *x) { return pass_mapped(x); }

/* The shuffle of bins k0 .. k1-1 (bin k ends at bin[k]), drawing from st. */
typedef struct fy_arg {
    void *out;
    const uint64_t *bin;
    uint64_t k0, k1, st;
} fy_arg;

static inline __attribute__((always_inline)) void fy_bins(fy_arg *a, const int wide) {
    for (uint64_t k = a->k0; k < a->k1; k++) {
        const uint64_t a0 = k ? a->bin[k - 1] : 0;
        fisher_yates((char *)a->out + a0 * (wide ? 8 : 4), a->bin[k] - a0, &a->st, wide);
    }
}

static void *fy_wide(void *a) {
    fy_bins(a, 1);
    return NULL;
}

static void *fy_narrow(void *a) {
    fy_bins(a, 0);
    return NULL;
}

/* plan_group_w's answer when the second thread's shuffle started from a
 * wrong state: the plan is built again without it. */
#define PLAN_AGAIN 1

/* wide: 8-byte entries, else 4 (a constant in each caller below, so that
 * the compiler makes one copy of the loops for each). */
static inline __attribute__((always_inline)) int
plan_group_w(const cxs_utt_sampler *s, const uint64_t *list, uint64_t m, uint64_t key,
             cxs_utt_plan *p, void *out, uint64_t base, uint64_t *rs, uint64_t *rl,
             uint64_t *bin, uint64_t *bin2, const int wide) {
    const uint64_t B = s->o.frame_budget, maxb = s->o.max_batch;
    const int shuffle = s->o.kind == CXS_UTT_SHUFFLE;
    const uint32_t nb = shuffle ? s->o.buckets : 1;
    const uint32_t shift = p->shift;
    uint64_t cnt[1025], lg[1024], first[1025];
    int rc;
    memset(cnt, 0, sizeof cnt);
    pass x = {s, list, m, 0, list ? 0 : m, PASS_BUCKETS, nb, lg, first, 0, cnt, out};
    if (list || nb != s->o.buckets) {
        if ((rc = pass_mapped(&x))) return rc;
    } else {
        memcpy(cnt, s->count, nb * sizeof *cnt); /* counted at create */
    }
    /* bins: 2^lg[b] for bucket b, numbered bucket after bucket */
    uint64_t nbins = 0;
    for (uint32_t b = 0; b < nb; b++) {
        lg[b] = 0;
        while (shuffle && (cnt[b] >> BIN_SHIFT) >> lg[b]) lg[b]++;
        first[b] = nbins;
        nbins += 1ull << lg[b];
    }
    first[nb] = nbins;
    memset(bin, 0, (nbins + 1) * sizeof *bin); /* room: max_bins(m) */
    x.bkey = mix64(key ^ 0xa4093822299f31d0ull);
    x.kind = PASS_BINS;
    x.cnt = bin;
    /* The whole dataset, when large: its halves counted and scattered on
     * two threads, the second half's entries of every bin after the
     * first's, as one pass in utterance order puts them. */
    const int split = !list && bin2 && m >= SPLIT_MIN && split_ok();
    pass y = x;
    if (split) {
        memset(bin2, 0, (nbins + 1) * sizeof *bin2);
        x.u1 = y.u0 = m / 2;
        y.cnt = bin2;
        rc = run_pair(pass_one, &y, pass_one, &x);
    } else {
        rc = pass_mapped(&x);
    }
    if (rc) return rc;
    /* bin k starts at bin[k] (the second half's part at bin2[k]) */
    for (uint64_t k = 0, at = 0; k < nbins; k++) {
        const uint64_t n1 = bin[k + 1], n2 = split ? bin2[k + 1] : 0;
        bin[k] = at;
        if (split) bin2[k] = at + n1;
        at += n1 + n2;
    }
    x.kind = y.kind = PASS_SCATTER;
    if ((rc = split ? run_pair(pass_one, &y, pass_one, &x) : pass_mapped(&x))) return rc;
    if (split) memcpy(bin, bin2, nbins * sizeof *bin);
    /* bin k now ends at bin[k]; it starts where bin k-1 ends.  Each bin
     * shuffled, then its entries cut: greedy, a new batch at every bucket
     * change (unshuffled: one bin, the whole group). */
    uint64_t st = key;
    uint64_t nr = 0, n = 0, tmax = 0;
    uint32_t cur = 0;
    /* When split, the bins from kspl on are shuffled by a second thread, from
     * the state the draws of the earlier bins leave: each draw advances the
     * state by one step, and a bin of c entries takes c - 1 draws unless
     * one is rejected (rng_below; about c / 2^64 a draw), so that state is
     * known before they are made.  This thread checks it when it reaches
     * kspl; after a rejection the plan is built again on one thread.  The
     * cuts stay on this thread, in order. */
    uint64_t kspl = nbins, st_spec = 0;
    fy_arg fa;
    pthread_t fy_thread;
    if (split && shuffle) {
        uint64_t k = 0, draws = 0;
        while (k < nbins && bin[k] < m / 2) k++;
        if (k + 1 < nbins) {
            for (uint64_t j = 0, a = 0; j <= k; a = bin[j], j++)
                draws += bin[j] - a > 1 ? bin[j] - a - 1 : 0;
            st_spec = key + draws * 0x9e3779b97f4a7c15ull; /* rng_next's step */
            fa = (fy_arg){out, bin, k + 1, nbins, st_spec};
            if (pthread_create(&fy_thread, NULL, wide ? fy_wide : fy_narrow, &fa) == 0)
                kspl = k + 1;
        }
    }
    for (uint64_t k = 0, a = 0; k < nbins; a = bin[k], k++) {
        if (k == kspl) {
            pthread_join(fy_thread, NULL);
            if (st != st_spec || cxs_hook_speculation_fails()) return PLAN_AGAIN;
            st = fa.st;
        }
        if (shuffle && k < kspl) fisher_yates((char *)out + a * (wide ? 8 : 4), bin[k] - a, &st, wide);
        for (uint64_t i = a; i < bin[k]; i++) {
            const uint64_t T = ENTRY_T(ent_get(out, i, wide));
            uint32_t bk = bucket_of(s, nb, T);
            uint64_t t2 = T > tmax ? T : tmax;
            if (n && (bk != cur || (n + 1) * t2 > B || (maxb && n >= maxb))) {
                rl[nr++] = n;
                n = 0, tmax = 0, t2 = T;
            }
            if (!n) rs[nr] = i, cur = bk;
            n++;
            tmax = t2;
        }
    }
    if (n) rl[nr++] = n;
    if (shuffle)
        for (uint64_t i = nr; i > 1; i--) {
            uint64_t j = rng_below(&st, i), a = rs[i - 1], b = rl[i - 1];
            rs[i - 1] = rs[j], rl[i - 1] = rl[j];
            rs[j] = a, rl[j] = b;
        }
    for (uint64_t r = 0; r < nr; r++) {
        p->bstart[p->nbatches] = base + rs[r];
        p->blen[p->nbatches++] = (uint32_t)rl[r];
    }
    return 0;
}

static int plan_group(const cxs_utt_sampler *s, const uint64_t *list, uint64_t m, uint64_t key,
                      cxs_utt_plan *p, void *out, uint64_t base, uint64_t *rs, uint64_t *rl,
                      uint64_t *bin, uint64_t *bin2) {
    int rc = p->esize == 8 ? plan_group_w(s, list, m, key, p, out, base, rs, rl, bin, bin2, 1)
                           : plan_group_w(s, list, m, key, p, out, base, rs, rl, bin, bin2, 0);
    if (rc == PLAN_AGAIN) /* on one thread: without bin2 */
        rc = p->esize == 8 ? plan_group_w(s, list, m, key, p, out, base, rs, rl, bin, NULL, 1)
                           : plan_group_w(s, list, m, key, p, out, base, rs, rl, bin, NULL, 0);
    return rc;
}

uint64_t cxs_utt_plan_batch(const cxs_utt_plan *p, uint64_t g, uint64_t *out) {
    const uint64_t at = p->bstart[g], umask = (1ull << p->shift) - 1;
    const uint32_t n = p->blen[g];
    if (p->esize == 8)
        for (uint32_t i = 0; i < n; i++) out[i] = ((const uint64_t *)p->utts)[at + i] & umask;
    else
        for (uint32_t i = 0; i < n; i++) out[i] = ((const uint32_t *)p->utts)[at + i] & umask;
    return n;
}

static int plan_build(const cxs_utt_sampler *s, uint64_t epoch, cxs_utt_plan **out) {
    const cxs_dataset *ds = s->ds;
    const uint64_t U = ds->meta.num_utterances, n1 = U ? U : 1;
    cxs_utt_plan *p = calloc(1, sizeof *p);
    /* rs, rl: a batch per utterance at most, touched only as far as the
     * batches go (fresh pages are mapped at first touch) */
    uint64_t *list = s->block ? malloc(n1 * 8) : NULL, *rs = malloc(n1 * 8), *rl = malloc(n1 * 8);
    uint64_t *bin = malloc(max_bins(n1) * sizeof *bin);
    uint64_t *bin2 = s->block ? NULL : malloc(max_bins(n1) * sizeof *bin2);
    int rc = 0;
    if (p) {
        p->epoch = epoch;
        p->bstart = malloc((n1 + 1) * sizeof *p->bstart);
        p->blen = malloc(n1 * sizeof *p->blen);
        p->nutts = U;
        p->esize = s->esize;
        p->shift = s->shift;
        p->utts = entries_alloc(U, s->esize);
    }
    if (!p || !p->bstart || !p->blen || !p->utts || (s->block && !list) || !rs || !rl || !bin ||
        (!s->block && !bin2)) {
        rc = -ENOMEM;
        goto out;
    }
    const uint64_t key = mix64(mix64(s->o.seed ^ 0x452821e638d01377ull) +
                               mix64(epoch * 0xbe5466cf34e90c6cull + 1));
    if (!s->block) {
        rc = plan_group(s, NULL, U, key, p, p->utts, 0, rs, rl, bin, bin2);
    } else {
        cxs_block_plan *bp;
        cxs_block_sched *bs = (cxs_block_sched *)&s->bs; /* shared, thread-safe */
        rc = cxs_block_plan_get(bs, epoch, &bp);
        if (rc) goto out;
        const uint64_t R = s->o.blocks, G = (bp->nblocks + R - 1) / R;
        p->gstart = malloc((G + 1) * sizeof *p->gstart);
        p->rstart = malloc((G + 1) * sizeof *p->rstart);
        p->rng = malloc((bp->nblocks ? bp->nblocks : 1) * sizeof *p->rng);
        if (!p->gstart || !p->rstart || !p->rng) {
            cxs_block_plan_put(bs, bp);
            rc = -ENOMEM;
            goto out;
        }
        uint64_t nr = 0, at = 0;
        for (uint64_t g = 0; g < G && !rc; g++) {
            uint64_t m = 0;
            p->gstart[g] = p->nbatches;
            p->rstart[g] = nr;
            for (uint64_t j = g * R; j < bp->nblocks && j < (g + 1) * R; j++) {
                const cxs_block *b = &bp->blk[j];
                for (uint64_t u = b->u0; u < b->u1; u++) list[m++] = u;
                if (b->len) /* uncompressed: its rows in the shard's mapping */
                    p->rng[nr++] = (cxs_utt_range){b->shard, b->off, b->len};
            }
            rc = plan_group(s, list, m, mix64(key ^ mix64(g + 0x3c6ef372fe94f82bull)), p,
                            (char *)p->utts + at * p->esize, at, rs, rl, bin, NULL);
            at += m;
        }
        p->gstart[G] = p->nbatches;
        p->rstart[G] = nr;
        p->ngroups = G;
        cxs_block_plan_put(bs, bp);
    }
out:
    free(list);
    free(rs);
    free(rl);
    free(bin);
    free(bin2);
    if (rc) plan_free(p);
    else *out = p;
    return rc;
}

int cxs_utt_plan_get(const cxs_utt_sampler *cs, uint64_t epoch, cxs_utt_plan **out) {
    cxs_utt_sampler *s = (cxs_utt_sampler *)cs; /* the cache is shared; the order is not */
    pthread_mutex_lock(&plans_mu);
    cxs_utt_plan *p = cxs_plan_find(&s->cache, epoch);
    pthread_mutex_unlock(&plans_mu);
    if (p) {
        *out = p;
        return 0;
    }
    /* Built without the lock (O(utterances)); two threads asking for the
     * same new epoch at once may both build it: the first one kept wins. */
    int rc = plan_build(s, epoch, &p);
    if (rc) return rc;
    pthread_mutex_lock(&plans_mu);
    *out = cxs_plan_keep(&s->cache, p, epoch, &p->refs, plan_free);
    pthread_mutex_unlock(&plans_mu);
    if (*out != p) plan_free(p);
    return 0;
}

void cxs_utt_plan_put(const cxs_utt_sampler *s, cxs_utt_plan *p) {
    (void)s;
    pthread_mutex_lock(&plans_mu);
    cxs_plan_put(p, &p->refs, plan_free);
    pthread_mutex_unlock(&plans_mu);
}

uint64_t cxs_utt_plan_length(const cxs_utt_sampler *s, const cxs_utt_plan *p) {
    const uint64_t N = p->nbatches, W = s->o.world_size;
    if (s->o.origin >= N) return 0;
    uint64_t left = N - s->o.origin;
    return s->o.drop_last ? left / W : left / W + (left % W != 0);
}

uint64_t cxs_utt_plan_group(const cxs_utt_plan *p, uint64_t g) {
    return cxs_last_le(p->gstart, p->ngroups, g);
}

uint64_t cxs_utt_plan_global(const cxs_utt_sampler *s, const cxs_utt_plan *p, uint64_t pos) {
    /* past the end: wrap to the epoch's first batches (the padding) */
    return (s->o.origin + s->o.rank + pos * s->o.world_size) % p->nbatches;
}

int cxs_utt_sampler_length(const cxs_utt_sampler *s, uint64_t epoch, uint64_t *global,
                           uint64_t *length) {
    if (!s) return CXS_E_INVALID;
    cxs_utt_plan *p;
    int rc = cxs_utt_plan_get(s, epoch, &p);
    if (rc) return rc;
    if (global) *global = p->nbatches;
    if (length) *length = cxs_utt_plan_length(s, p);
    cxs_utt_plan_put(s, p);
    return 0;
}

uint32_t cxs_utt_sampler_max_batch(const cxs_utt_sampler *s) { return s ? s->max_batch : 0; }
uint64_t cxs_utt_sampler_max_frames(const cxs_utt_sampler *s) { return s ? s->max_frames : 0; }

int cxs_utt_sampler_batch(const cxs_utt_sampler *s, uint64_t epoch, uint64_t pos, uint64_t *utts,
                          uint32_t cap, uint32_t *n, uint64_t *global) {
    if (!s || !n || (cap && !utts)) return CXS_E_INVALID;
    cxs_utt_plan *p;
    int rc = cxs_utt_plan_get(s, epoch, &p);
    if (rc) return rc;
    if (pos >= cxs_utt_plan_length(s, p)) {
        rc = CXS_E_RANGE;
    } else {
        uint64_t g = cxs_utt_plan_global(s, p, pos), m = p->blen[g];
        if (m > cap) {
            rc = CXS_E_INVALID;
        } else {
            cxs_utt_plan_batch(p, g, utts);
            *n = (uint32_t)m;
            if (global) *global = g;
        }
    }
    cxs_utt_plan_put(s, p);
    return rc;
}
