/* sampler.c - stateless samplers: (epoch, position) -> frame. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "abi.h"
#include "blocks.h"
#include "cxs_le.h"
#include "dataset_internal.h"
#include "samplers.h"

struct cxs_sampler {
    const cxs_dataset *ds;
    cxs_sampler_opts o;
    uint64_t n;       /* frames (sequential, shuffle) or draws (weighted) per epoch */
    uint64_t length;  /* per rank */
    /* weighted */
    uint32_t nclass;
    uint32_t *alias;
    uint32_t *thresh;     /* accept class i when the coin is below thresh[i] */
    uint64_t *class_start; /* nclass+1 offsets into members */
    void *members;        /* frames grouped by class: u32 or u64 */
    int wide;
    /* block */
    cxs_block_sched bs;
    uint64_t block_bytes;
};

static inline uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t key_of(uint64_t seed, uint64_t epoch, uint64_t i) {
    return mix64(mix64(seed + 0x9e3779b97f4a7c15ull) ^ mix64(epoch * 0xd1b54a32d192ed03ull + i));
}

#define FEISTEL_ROUNDS 4

/* The round function: one multiply, keyed; the halves are at most 32 bits,
 * so the high half of the product mixes every input bit. */
static inline uint64_t round_fn(uint64_t r, uint64_t key) {
    uint64_t x = (r ^ key) * 0xff51afd7ed558ccdull;
    return x ^ (x >> 29) ^ (x >> 41);
}

/* A keyed bijection of [0, 2^(2*half)) (a balanced Feistel network: four
 * rounds with independent keys, as Luby and Rackoff), restricted to [0, n) by cycle
 * walking (apply again while outside): still a bijection of [0, n), and
 * since the domain is below 4n the walk is short (under 4 steps on average). */
uint64_t cxs_perm_at(const cxs_perm *p, uint64_t x) {
    const uint32_t h = p->half;
    const uint64_t mask = (1ull << h) - 1;
    do {
        uint64_t L = x >> h, R = x & mask;
        for (int r = 0; r < FEISTEL_ROUNDS; r++) {
            uint64_t t = L ^ (round_fn(R, p->keys[r]) & mask);
            L = R;
            R = t;
        }
        x = (L << h) | R;
    } while (x >= p->n);
    return x;
}

static uint32_t half_of(uint64_t n) {
    uint32_t bits = 1;
    while (bits < 64 && (1ull << bits) < n) bits++;
    return (bits + 1) / 2;
}

void cxs_perm_init(cxs_perm *p, uint64_t n, uint64_t seed, uint64_t epoch) {
    p->n = n;
    p->half = half_of(n);
    for (int i = 0; i < FEISTEL_ROUNDS; i++) p->keys[i] = key_of(seed, epoch, (uint64_t)i);
}

/* The alias table.  On failure d says why. */
static int build_weighted(cxs_sampler *s, cxs_diag *d) {
    const cxs_dataset *ds = s->ds;
    const uint64_t F = ds->meta.num_frames;
    const uint32_t lw = ds->meta.label_width;
    uint32_t V = ds->meta.vocab_size ? ds->meta.vocab_size : (lw == 1 ? 256u : 65536u);
    s->nclass = V;
    s->class_start = calloc((size_t)V + 1, sizeof *s->class_start);
    s->alias = malloc(V * sizeof *s->alias);
    s->thresh = malloc(V * sizeof *s->thresh);
    s->wide = F > UINT32_MAX;
    s->members = malloc(F * (s->wide ? 8 : 4));
    double *p = malloc(V * sizeof *p);
    uint32_t *small = malloc(V * sizeof *small), *large = malloc(V * sizeof *large);
    uint64_t *fill = calloc(V, sizeof *fill);
    int rc = 0;
    if (!s->class_start || !s->alias || !s->thresh || !s->members || !p || !small || !large ||
        !fill) {
        rc = -ENOMEM;
        goto out;
    }
    /* Count, then place every frame in its class's run (one pass each). */
    for (uint32_t sh = 0; sh < ds->meta.num_shards; sh++) {
        const shard *x = &ds->shards[sh];
        for (uint64_t i = 0; i < x->meta.num_frames; i++) {
            uint32_t l = cxs_shard_label(x, i);
            if (l >= V) {
                rc = CXS_E_CORRUPT;
                goto out;
            }
            s->class_start[l + 1]++;
        }
    }
    for (uint32_t c = 0; c < V; c++) s->class_start[c + 1] += s->class_start[c];
    for (uint32_t sh = 0; sh < ds->meta.num_shards; sh++) {
        const shard *x = &ds->shards[sh];
        for (uint64_t i = 0; i < x->meta.num_frames; i++) {
            uint32_t l = cxs_shard_label(x, i);
            uint64_t at = s->class_start[l] + fill[l]++, f = x->f_start + i;
            if (s->wide) ((uint64_t *)s->members)[at] = f;
            else ((uint32_t *)s->members)[at] = (uint32_t)f;
        }
    }
    /* Class probabilities: count * weight (inverse frequency by default,
     * which makes every present class equally likely). */
    double total = 0;
    for (uint32_t c = 0; c < V; c++) {
        uint64_t cnt = s->class_start[c + 1] - s->class_start[c];
        double w = s->o.class_weights ? s->o.class_weights[c] : (cnt ? 1.0 / (double)cnt : 0);
        if (!(w >= 0) || !isfinite(w)) {
            rc = cxs_diagf(d, CXS_E_INVALID,
                           "weighted sampler: class_weights[%u] is %g (a weight is finite and >= 0)",
                           c, w);
            goto out;
        }
        p[c] = cnt ? (double)cnt * w : 0;
        total += p[c];
    }
    if (!(total > 0) || !isfinite(total)) {
        rc = cxs_diagf(d, CXS_E_INVALID,
                       "weighted sampler: the class weights %s over the classes present",
                       total > 0 ? "overflow" : "are all zero");
        goto out;
    }
    /* Vose's alias method. */
    uint32_t ns = 0, nl = 0;
    for (uint32_t c = 0; c < V; c++) {
        p[c] = p[c] * V / total;
        if (p[c] < 1.0) small[ns++] = c;
        else large[nl++] = c;
    }
    while (ns && nl) {
        uint32_t a = small[--ns], g = large[--nl];
        s->thresh[a] = (uint32_t)fmin(4294967295.0, p[a] * 4294967296.0);
        s->alias[a] = g;
        p[g] = (p[g] + p[a]) - 1.0;
        if (p[g] < 1.0) small[ns++] = g;
        else large[nl++] = g;
    }
    while (nl) {
        uint32_t g = large[--nl];
        s->thresh[g] = UINT32_MAX;
        s->alias[g] = g;
    }
    while (ns) { /* rounding leftovers: probability 1 */
        uint32_t a = small[--ns];
        s->thresh[a] = UINT32_MAX;
        s->alias[a] = a;
    }
    /* A class without frames must never be chosen, even through rounding. */
    uint32_t any = 0;
    while (s->class_start[any + 1] == s->class_start[any]) any++; /* total > 0: exists */
    for (uint32_t c = 0; c < V; c++)
        if (s->class_start[c + 1] == s->class_start[c]) {
            s->thresh[c] = 0;
            uint32_t a = s->alias[c];
            if (s->class_start[a + 1] == s->class_start[a]) s->alias[c] = any;
        }
out:
    free(p);
    free(small);
    free(large);
    free(fill);
    return rc;
}

void cxs_sampler_free(cxs_sampler *s) {
    if (!s) return;
    free(s->alias);
    free(s->thresh);
    free(s->class_start);
    free(s->members);
    cxs_block_sched_destroy(&s->bs);
    free(s);
}

void cxs_sampler_opts_init(cxs_sampler_opts *o) { memset(o, 0, sizeof *o); }

int cxs_sampler_create_ex(const cxs_dataset *ds, const cxs_sampler_opts *opts, cxs_sampler **out,
                          cxs_diag *d) {
    if (!ds || !out) return cxs_diagf(d, CXS_E_INVALID, "sampler: no dataset or no result pointer");
    int orc;
    if (opts && (orc = CXS_OPTS_CHECK(opts, "cxs_sampler_opts", d))) return orc;
    cxs_sampler_opts o;
    memset(&o, 0, sizeof o);
    if (opts) o = *opts;
    if (o.world_size == 0) o.world_size = 1;
    if (o.kind > CXS_SAMPLER_BLOCK)
        return cxs_diagf(d, CXS_E_INVALID, "sampler: unknown kind %u", o.kind);
    if (o.rank >= o.world_size)
        return cxs_diagf(d, CXS_E_INVALID, "sampler: rank %u is not below world_size %u", o.rank,
                         o.world_size);
    if (o.drop_last > 1) return cxs_diagf(d, CXS_E_INVALID, "sampler: drop_last must be 0 or 1");
    if (o.kind == CXS_SAMPLER_WEIGHTED && !ds->meta.label_width)
        return cxs_diagf(d, CXS_E_NO_LABELS, "sampler: weighted sampling needs labels; the dataset has none (features only, like a test split)");
    if (o.kind == CXS_SAMPLER_BLOCK && !o.memory_bytes)
        return cxs_diagf(d, CXS_E_INVALID, "block sampler: memory_bytes (the memory budget) is required");
    if (o.blocks > 1024)
        return cxs_diagf(d, CXS_E_INVALID, "block sampler: blocks %u is above 1024", o.blocks);
    if (!o.blocks) o.blocks = 8;
    cxs_sampler *s = calloc(1, sizeof *s);
    if (!s) return cxs_diagf(d, -ENOMEM, "sampler: out of memory");
    s->ds = ds;
    s->o = o;
    s->n = ds->meta.num_frames;
    if (o.kind == CXS_SAMPLER_WEIGHTED) {
        if (o.num_samples) s->n = o.num_samples;
        cxs_diag wd = {0};
        int rc = build_weighted(s, &wd);
        if (rc) {
            cxs_sampler_free(s);
            if (wd.message[0]) return cxs_diag_copy(d, rc, &wd);
            return cxs_diagf(d, rc, "weighted sampler: %s", cxs_strerror(rc));
        }
        s->o.class_weights = NULL; /* not kept: the caller's array may go */
    }
    if (o.kind == CXS_SAMPLER_BLOCK) {
        /* `blocks` resident while the next one is read: blocks + 1 in the
         * budget. */
        s->block_bytes = o.memory_bytes / (o.blocks + 1ull);
        cxs_diag bd;
        int rc = cxs_block_sched_init(&s->bs, ds, o.seed, s->block_bytes / ds->row_bytes,
                                      ds->meta.guard, o.blocks, &bd);
        if (rc) {
            cxs_sampler_free(s);
            /* the options' refusal; anything else (a damaged INDEX block,
             * a truncation) is the data's, passed on whole, place and all */
            if (rc != CXS_E_RANGE && rc != CXS_E_INVALID) return cxs_diag_copy(d, rc, &bd);
            return cxs_diagf(d, rc, "block sampler: the memory budget of %llu bytes over %u+1 blocks: %s",
                             (unsigned long long)o.memory_bytes, o.blocks, bd.message);
        }
    }
    if (o.origin > s->n) {
        const uint64_t n = s->n; /* s is gone after the free */
        cxs_sampler_free(s);
        return cxs_diagf(d, CXS_E_INVALID, "sampler: origin %llu is past the epoch's %llu samples",
                         (unsigned long long)o.origin, (unsigned long long)n);
    }
    uint64_t W = o.world_size, left = s->n - o.origin;
    s->length = o.drop_last ? left / W : left / W + (left % W != 0);
    *out = s;
    return 0;
}

int cxs_sampler_create(const cxs_dataset *ds, const cxs_sampler_opts *opts, cxs_sampler **out) {
    return cxs_sampler_create_ex(ds, opts, out, NULL);
}

uint64_t cxs_sampler_block_bytes(const cxs_sampler *s) {
    return s && s->o.kind == CXS_SAMPLER_BLOCK ? s->block_bytes : 0;
}

uint64_t cxs_sampler_num_blocks(const cxs_sampler *s, uint64_t epoch) {
    if (!s || s->o.kind != CXS_SAMPLER_BLOCK) return 0;
    cxs_block_plan *p;
    if (cxs_block_plan_get((cxs_block_sched *)&s->bs, epoch, &p)) return 0;
    uint64_t n = p->nblocks;
    cxs_block_plan_put((cxs_block_sched *)&s->bs, p);
    return n;
}

uint64_t cxs_sampler_global(const cxs_sampler *s, uint64_t pos) {
    return (s->o.origin + s->o.rank + pos * s->o.world_size) % s->n;
}

cxs_block_sched *cxs_sampler_blocks(const cxs_sampler *s) {
    return s->o.kind == CXS_SAMPLER_BLOCK ? (cxs_block_sched *)&s->bs : NULL;
}

uint64_t cxs_sampler_length(const cxs_sampler *s) { return s->length; }

int cxs_sampler_get(const cxs_sampler *s, uint64_t epoch, uint64_t pos, size_t n,
                    uint64_t *frames) {
    if (!s || (n && !frames)) return CXS_E_INVALID;
    if (pos > s->length || n > s->length - pos) return CXS_E_RANGE;
    const uint64_t W = s->o.world_size, r = s->o.rank + s->o.origin;
    if (s->o.kind == CXS_SAMPLER_BLOCK) {
        /* the schedule is shared and thread-safe; the sampler stays const
         * to its users */
        cxs_block_sched *bs = (cxs_block_sched *)&s->bs;
        cxs_block_plan *p;
        int rc = cxs_block_plan_get(bs, epoch, &p);
        if (rc) return rc;
        for (size_t i = 0; i < n; i++)
            frames[i] = cxs_block_plan_frame(p, (r + (pos + i) * W) % s->n, NULL);
        cxs_block_plan_put(bs, p);
        return 0;
    }
    cxs_perm pm;
    cxs_perm_init(&pm, s->n, s->o.seed, epoch);
    const uint64_t *keys = pm.keys;
    for (size_t i = 0; i < n; i++) {
        uint64_t g = r + (pos + i) * W; /* this rank's share of the global order */
        switch (s->o.kind) {
        case CXS_SAMPLER_SEQUENTIAL:
            frames[i] = g % s->n; /* past the end: DistributedSampler's wrap-around padding */
            break;
        case CXS_SAMPLER_SHUFFLE:
            frames[i] = cxs_perm_at(&pm, g % s->n);
            break;
        default: {
            /* Draw g of the epoch: class by the alias table, then a uniform
             * member of the class; two 64-bit hashes of (seed, epoch, g). */
            uint64_t h1 = mix64(keys[0] ^ mix64(g + 0x632be59bd9b4e019ull));
            uint64_t h2 = mix64(h1 ^ keys[1]);
            uint32_t c = (uint32_t)(((h1 >> 32) * s->nclass) >> 32);
            if ((uint32_t)h1 >= s->thresh[c]) c = s->alias[c];
            uint64_t a = s->class_start[c], cnt = s->class_start[c + 1] - a;
            uint64_t m = (uint64_t)(((unsigned __int128)h2 * cnt) >> 64);
            frames[i] = s->wide ? ((const uint64_t *)s->members)[a + m]
                                : ((const uint32_t *)s->members)[a + m];
        }
        }
    }
    return 0;
}

const cxs_sampler_opts *cxs_sampler_options(const cxs_sampler *s) { return &s->o; }
