/* mix.c - the mixture sampler: batches drawn from several datasets in
 * fixed proportions (cxs_mix_*, ctxshard.h says what it guarantees).
 *
 * Three layers, each a function of what is above it only:
 *  - quotas: epoch_size samples apportioned by largest remainder;
 *  - the epoch's merged order (prefix): how many samples of each source
 *    the first x samples of an epoch hold, by the Sainte-Lague rule, in
 *    O(sources^2) for any x without building anything;
 *  - the ranks' division of each round of world_size batches (build_runs),
 *    computed at create for world_size > 1, since which rank takes a
 *    source's spare sample depends on the ranks' running tallies.
 * A sample is then (source i, epoch-local item a), item a of epoch e being
 * item e*q_i + a of the source's endless stream of passes. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"
#include "dataset_internal.h"
#include "mix.h"

typedef unsigned __int128 u128;

/* This rank's batch at position t: the global batch it serves, and per
 * source its count and first item relative to the round's first item of
 * that source (the round being the one `g` lies in). */
typedef struct run {
    uint64_t g;
    uint32_t *cnt, *off; /* [n] each, into the arrays below */
} run;

struct cxs_mix {
    uint32_t n;
    cxs_mix_opts o;
    const cxs_dataset **ds;
    uint64_t *size, *quota;
    double *share;
    cxs_sampler **order; /* per source: its passes (shuffle), or NULL (sequential) */
    uint64_t E, B, w, nglobal, length;
    /* world_size > 1: this rank's batches (length of them) */
    uint64_t *rg;          /* [length] the global batch served */
    uint8_t *rrep;         /* [length] 1: a repeat (padding) */
    uint32_t *rcnt, *roff; /* [length][n] */
};

void cxs_mix_opts_init(cxs_mix_opts *o) { memset(o, 0, sizeof *o); }

/* Whether source a's k-th point comes before source b's l-th in the merged
 * order: (2k+1)/(2 q_a) < (2l+1)/(2 q_b), ties to the lower source. */
static int before(const cxs_mix *m, uint32_t a, uint64_t k, uint32_t b, uint64_t l) {
    u128 x = (u128)(2 * k + 1) * m->quota[b], y = (u128)(2 * l + 1) * m->quota[a];
    return x < y || (x == y && a < b);
}

/* c[i]: source i's samples among the first x (<= E) of the epoch. */
static void prefix(const cxs_mix *m, uint64_t x, uint64_t *c) {
    uint64_t s = 0;
    for (uint32_t i = 0; i < m->n; i++) { /* the points at or below x/E */
        u128 v = ((u128)2 * x * m->quota[i] + m->E) / ((u128)2 * m->E);
        c[i] = v > m->quota[i] ? m->quota[i] : (uint64_t)v;
        s += c[i];
    }
    while (s > x) { /* drop the last point taken */
        uint32_t best = UINT32_MAX;
        for (uint32_t i = 0; i < m->n; i++)
            if (c[i] && (best == UINT32_MAX || before(m, best, c[best] - 1, i, c[i] - 1)))
                best = i;
        c[best]--, s--;
    }
    while (s < x) { /* take the next point */
        uint32_t best = UINT32_MAX;
        for (uint32_t i = 0; i < m->n; i++)
            if (c[i] < m->quota[i] && (best == UINT32_MAX || before(m, i, c[i], best, c[best])))
                best = i;
        c[best]++, s++;
    }
}

static uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }

#define mix64 cxs_mix64

/* The epoch's batches: full ones, then a short one unless drop_last. */
static uint64_t batch_end(const cxs_mix *m, uint64_t g) { return min64((g + 1) * m->B, m->E); }

/* The spares as chosen one batch after another can leave a batch behind
 * on a source that another batch of the round took a spare of while ahead
 * on it: exchange samples between two batches of the round (batch p gives
 * one of source u for one of batch q's source v) while that brings the two
 * nearer their shares (the sum of squares of how far each batch's rank is
 * behind), each batch's count staying between the floor and the ceiling
 * of its share of the round (lo, hi). */
static void improve(uint32_t n, uint64_t rows, const double *tgt, const uint64_t *lo,
                    const uint64_t *hi, const double *want, const uint64_t *tally, uint64_t *row) {
    for (int pass = 0; pass < 64; pass++) {
        int moved = 0;
        for (uint32_t u = 0; u < n; u++)
            for (uint32_t v = 0; v < n; v++) {
                if (u == v) continue;
                uint64_t p = UINT64_MAX, q = UINT64_MAX;
                double gp = 0, gq = 0;
                for (uint64_t j = 0; j < rows; j++) {
                    const uint64_t *r = row + j * n, *l = lo + j * n, *h = hi + j * n;
                    /* behind on a source: its share so far less its count */
                    double bu = want[j * n + u] + tgt[j * n + u] - (double)(tally[j * n + u] + r[u]);
                    double bv = want[j * n + v] + tgt[j * n + v] - (double)(tally[j * n + v] + r[v]);
                    if (r[u] > l[u] && r[v] < h[v]) { /* could give u, take v */
                        double g = bv - (bu + 1); /* half the fall of its squares */
                        if (p == UINT64_MAX || g > gp) p = j, gp = g;
                    }
                    if (r[v] > l[v] && r[u] < h[u]) { /* could give v, take u */
                        double g = bu - (bv + 1);
                        if ((q == UINT64_MAX || g > gq) && j != p) q = j, gq = g;
                    }
                }
                if (p != UINT64_MAX && q != UINT64_MAX && p != q && gp + gq > 1e-9) {
                    row[p * n + u]--, row[p * n + v]++;
                    row[q * n + v]--, row[q * n + u]++;
                    moved = 1;
                }
            }
        if (!moved) break;
    }
}

/* The round's division that keeps every rank within one sample of its
 * share of every source, when there is one: each batch's count of source i
 * is limited to [a, b], the floor and ceiling of its share of the round
 * that leave its rank's tally less than one sample from its running share;
 * the batches' counts then sum to their sizes and the sources' to their
 * samples of the round by a flow (the spares above a: rows to sources,
 * one each at most), found from the division already chosen (kept where
 * it fits) by augmenting paths.  Returns 1 with row replaced and lo, hi
 * set to [a, b], or 0 (no such division: row and lo, hi untouched). */
typedef struct flowbuf {
    uint64_t *a, *u, *y, *rneed, *cneed;
    int64_t *prev; /* BFS: the node a node was reached from */
    uint64_t *queue;
} flowbuf;

static int exact_round(uint32_t n, uint64_t rows, const uint64_t *size, const uint64_t *d,
                       const double *share, const double *tgt, const double *want,
                       const uint64_t *tally, uint64_t *row, uint64_t *lo, uint64_t *hi,
                       double slack, flowbuf *fb) {
    const double eps = 1e-9;
    for (uint64_t j = 0; j < rows; j++) {
        uint64_t sa = 0;
        for (uint32_t i = 0; i < n; i++) {
            const uint64_t x = j * n + i;
            double f = floor(share[x] + eps) - slack, c = ceil(share[x] - eps) + slack;
            double w1 = want[x] + tgt[x] - (double)tally[x]; /* the count that is exact */
            double amin = ceil(w1 - 1 + eps), bmax = floor(w1 + 1 - eps);
            double av = amin > f ? amin : f, bv = bmax < c ? bmax : c;
            if (av < 0) av = 0;
            if (av > bv) return 0;
            fb->a[x] = (uint64_t)av;
            fb->u[x] = (uint64_t)(bv - av);
            sa += fb->a[x];
        }
        if (sa > size[j]) return 0;
        fb->rneed[j] = size[j] - sa;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t sa = 0;
        for (uint64_t j = 0; j < rows; j++) sa += fb->a[j * n + i];
        if (sa > d[i]) return 0;
        fb->cneed[i] = d[i] - sa;
    }
    /* start from the division chosen, where it fits */
    for (uint64_t j = 0; j < rows; j++)
        for (uint32_t i = 0; i < n; i++) {
            const uint64_t x = j * n + i;
            fb->y[x] = 0;
            while (fb->y[x] < fb->u[x] && row[x] > fb->a[x] + fb->y[x] && fb->rneed[j] &&
                   fb->cneed[i])
                fb->y[x]++, fb->rneed[j]--, fb->cneed[i]--;
        }
    /* augmenting paths: a row with need, (row -> source unused, source ->
     * row used)*, a source with need; nodes 0..rows-1 rows, rows.. sources */
    for (;;) {
        uint64_t head = 0, tail = 0;
        int64_t end = -1;
        for (uint64_t v = 0; v < rows + n; v++) fb->prev[v] = -2;
        for (uint64_t j = 0; j < rows; j++)
            if (fb->rneed[j]) fb->prev[j] = -1, fb->queue[tail++] = j;
        if (!tail) break; /* every row full: done */
        while (head < tail && end < 0) {
            uint64_t v = fb->queue[head++];
            if (v < rows) {
                for (uint32_t i = 0; i < n; i++) {
                    const uint64_t x = v * n + i, c = rows + i;
                    if (fb->y[x] < fb->u[x] && fb->prev[c] == -2) {
                        fb->prev[c] = (int64_t)v;
                        if (fb->cneed[i]) {
                            end = (int64_t)c;
                            break;
                        }
                        fb->queue[tail++] = c;
                    }
                }
            } else {
                const uint32_t i = (uint32_t)(v - rows);
                for (uint64_t j = 0; j < rows; j++)
                    if (fb->y[j * n + i] > 0 && fb->prev[j] == -2) {
                        fb->prev[j] = (int64_t)v;
                        fb->queue[tail++] = j;
                    }
            }
        }
        if (end < 0) return 0; /* no way to fill a row */
        fb->cneed[end - (int64_t)rows]--;
        for (int64_t v = end; fb->prev[v] != -1;) {
            int64_t p = fb->prev[v];
            if (v >= (int64_t)rows) /* row p -> source v: one more */
                fb->y[(uint64_t)p * n + (uint64_t)(v - (int64_t)rows)]++;
            else /* source p -> row v: one less */
                fb->y[(uint64_t)v * n + (uint64_t)(p - (int64_t)rows)]--;
            v = p;
            if (fb->prev[v] == -1) fb->rneed[v]--;
        }
    }
    for (uint32_t i = 0; i < n; i++)
        if (fb->cneed[i]) return 0;
    for (uint64_t x = 0; x < rows * n; x++) {
        row[x] = fb->a[x] + fb->y[x];
        lo[x] = fb->a[x];
        hi[x] = fb->a[x] + fb->u[x];
    }
    return 1;
}

/* The final round, of fewer batches than ranks (or with the epoch's short
 * batch), when rows 0.. to ranks 0.. leave some rank more than a sample
 * from its share: which ranks receive the round's batches (the others
 * repeat a batch of the first round) is free, since no state is saved
 * inside a round.  Try the ranks nearest their shares first, then seeded
 * choices; on success who[j] is row j's rank and row, lo, hi are set. */
static int final_ranks(const cxs_mix *m, uint64_t t, uint64_t rows, const uint64_t *size,
                       const uint64_t *d, const double *share, const double *tgt,
                       const double *want, const uint64_t *tally, uint64_t *row, uint64_t *lo,
                       uint64_t *hi, flowbuf *fb, uint64_t *who, double *wantp,
                       uint64_t *tallyp) {
    const uint32_t n = m->n;
    const uint64_t w = m->w;
    uint64_t *all = fb->queue; /* (w + n entries: free between flows) */
    uint64_t st = m->o.seed ^ (t * 0x9e3779b97f4a7c15ull);
    for (int attempt = 0; attempt < 33; attempt++) {
        for (uint64_t r = 0; r < w; r++) all[r] = r;
        if (attempt == 0) { /* the ranks nearest their shares, by insertion */
            for (uint64_t r = 1; r < w; r++) {
                uint64_t v = all[r], k = r;
                double dv = 0;
                for (uint32_t i = 0; i < n; i++) {
                    double x = fabs(want[v * n + i] - (double)tally[v * n + i]);
                    dv = x > dv ? x : dv;
                }
                for (; k > 0; k--) {
                    double dk = 0;
                    for (uint32_t i = 0; i < n; i++) {
                        double x = fabs(want[all[k - 1] * n + i] - (double)tally[all[k - 1] * n + i]);
                        dk = x > dk ? x : dk;
                    }
                    if (dk <= dv) break;
                    all[k] = all[k - 1];
                }
                all[k] = v;
            }
        } else { /* a seeded choice */
            for (uint64_t r = w - 1; r > 0; r--) {
                uint64_t k = mix64(st += 0x9e3779b97f4a7c15ull) % (r + 1), v = all[r];
                all[r] = all[k], all[k] = v;
            }
        }
        for (uint64_t j = 0; j < rows; j++) {
            who[j] = all[j];
            memcpy(wantp + j * n, want + all[j] * n, n * sizeof *wantp);
            memcpy(tallyp + j * n, tally + all[j] * n, n * sizeof *tallyp);
        }
        if (exact_round(n, rows, size, d, share, tgt, wantp, tallyp, row, lo, hi, 0, fb) ||
            exact_round(n, rows, size, d, share, tgt, wantp, tallyp, row, lo, hi, 1, fb))
            return 1;
    }
    who[0] = UINT64_MAX;
    return 0;
}

/* world_size > 1: divide every round of this run among the ranks and keep
 * this rank's part.  Round t holds global batches origin + t*w + j (j <
 * its rows), rank j taking the j-th.  Each batch's share of the round's
 * samples of source i is d_i times its size over the round's; it gets the
 * floor or the ceiling of it.  First a division by hand: the epoch's short
 * last batch (if in this round) takes its floors and then its spares where
 * its rank is most behind; the full batches take floor(d_i / rows) and the
 * spares, each the same number, choosing one batch after another (from a
 * rotating first one): any source whose spares would not fit in the
 * batches left, then those its rank is most behind on (its tally against
 * its share of the epoch so far).  Then exact_round looks for the division
 * that keeps every rank within one sample of its share of every source,
 * starting from that one; when there is none (the final round, of few
 * batches, can have none) improve() moves samples between the batches to
 * bring the ranks nearer.  Ranks past the last batch of the final round
 * repeat batches of the first round. */
static int build_runs(cxs_mix *m, cxs_diag *d) {
    const uint32_t n = m->n;
    const uint64_t w = m->w, L = m->length;
    const uint64_t me = m->o.rank;
    uint64_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *e = malloc(n * sizeof *e);
    uint64_t *tally = calloc(w * n, sizeof *tally), *row = malloc(w * n * sizeof *row);
    double *want = calloc(w * n, sizeof *want);
    uint32_t *pick = malloc(n * sizeof *pick);
    double *share = malloc(w * n * sizeof *share), *tgt = malloc(w * n * sizeof *tgt);
    uint64_t *lo = malloc(w * n * sizeof *lo), *hi = malloc(w * n * sizeof *hi);
    uint64_t *size = malloc(w * sizeof *size), *who = malloc((w + 1) * sizeof *who);
    double *wantp = malloc(w * n * sizeof *wantp);
    uint64_t *tallyp = malloc(w * n * sizeof *tallyp);
    flowbuf fb = {malloc(w * n * 8), malloc(w * n * 8), malloc(w * n * 8), malloc(w * 8),
                  malloc(n * 8), malloc((w + n) * 8), malloc((w + n) * 8)};
    uint32_t *c0 = malloc(w * n * sizeof *c0), *o0 = malloc(w * n * sizeof *o0);
    uint64_t r0rows = 0, r0 = 0;
    m->rg = malloc((L ? L : 1) * sizeof *m->rg);
    m->rrep = calloc(L ? L : 1, 1);
    m->rcnt = malloc((L ? L : 1) * n * sizeof *m->rcnt);
    m->roff = malloc((L ? L : 1) * n * sizeof *m->roff);
    int rc = 0;
    if (!a || !b || !e || !tally || !row || !want || !pick || !share || !tgt || !lo || !hi || !size || !who || !wantp || !tallyp || !fb.a || !fb.u || !fb.y || !fb.rneed ||
        !fb.cneed || !fb.prev || !fb.queue || !c0 || !o0 || !m->rg ||
        !m->rcnt || !m->roff || !m->rrep) {
        rc = cxs_diagf(d, -ENOMEM, "mixture: out of memory for the ranks' division of %llu "
                       "rounds", (unsigned long long)L);
        goto out;
    }
    for (uint64_t t = 0; t < L; t++) {
        const uint64_t g0 = m->o.origin + t * w;
        uint64_t rows = g0 < m->nglobal ? min64(w, m->nglobal - g0) : 0;
        uint64_t full = rows, sb = 0, Lr = 0;
        who[0] = UINT64_MAX; /* the ranks of the rows: j (final_ranks may choose) */
        if (rows) {
            const uint64_t end = g0 + rows;
            sb = batch_end(m, end - 1) - (end - 1) * m->B;
            if (sb < m->B) full--; /* the epoch's short batch, last */
            prefix(m, g0 * m->B, a);
            prefix(m, batch_end(m, end - 1), b);
            Lr = batch_end(m, end - 1) - g0 * m->B;
        }
        /* each batch's share of the round's samples (what it holds to within
         * a sample), and its rank's share of the epoch (what the rank's
         * tally is held to) */
        for (uint64_t j = 0; j < rows; j++)
            for (uint32_t i = 0; i < n; i++) {
                const double sz = (double)(j < full ? m->B : sb);
                share[j * n + i] = (double)(b[i] - a[i]) * sz / (double)Lr;
                tgt[j * n + i] = sz * (double)m->quota[i] / (double)m->E;
            }
        if (full < rows) { /* the short batch first: floors, then its spares */
            const uint64_t js = full;
            uint64_t given = 0;
            for (uint32_t i = 0; i < n; i++) {
                row[js * n + i] = (uint64_t)floor(share[js * n + i]);
                given += row[js * n + i];
            }
            while (given < sb) { /* where it is most behind */
                uint32_t best = UINT32_MAX;
                double bd = 0;
                for (uint32_t i = 0; i < n; i++) {
                    if ((double)row[js * n + i] >= share[js * n + i]) continue;
                    double behind = want[js * n + i] + tgt[js * n + i] -
                                    (double)(tally[js * n + i] + row[js * n + i]);
                    if (best == UINT32_MAX || behind > bd) best = i, bd = behind;
                }
                if (best == UINT32_MAX) break; /* (not reached) */
                row[js * n + best]++, given++;
            }
            for (uint32_t i = 0; i < n; i++) b[i] -= row[js * n + i]; /* the rest: full ones' */
        }
        /* the full batches: floors, then spares */
        uint64_t spare_per = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint64_t di = full ? b[i] - a[i] : 0;
            for (uint64_t j = 0; j < full; j++) row[j * n + i] = di / full;
            e[i] = full ? di % full : 0;
            spare_per += e[i];
        }
        if (full) spare_per /= full;
        for (uint64_t u = 0, left = full; u < full; u++, left--) {
            const uint64_t j = (t + u) % full;
            uint32_t np = 0;
            for (uint32_t i = 0; i < n; i++)
                if (e[i] == left) pick[np++] = i; /* forced */
            while (np < spare_per) {
                uint32_t best = UINT32_MAX;
                double bd = 0;
                for (uint32_t i = 0; i < n; i++) {
                    if (!e[i] || e[i] == left) continue;
                    int taken = 0;
                    for (uint32_t q = 0; q < np; q++) taken |= pick[q] == i;
                    if (taken) continue;
                    double behind = want[j * n + i] + tgt[j * n + i] -
                                    (double)(tally[j * n + i] + row[j * n + i]);
                    if (best == UINT32_MAX || behind > bd) best = i, bd = behind;
                }
                if (best == UINT32_MAX) break; /* (not reached: the spares fit) */
                pick[np++] = best;
            }
            for (uint32_t q = 0; q < np; q++) row[j * n + pick[q]]++, e[pick[q]]--;
        }
        if (n > 1 && (rows > 1 || (rows && rows < w))) { /* (one batch: whose it is) */
            for (uint64_t j = 0; j < rows; j++) size[j] = j < full ? m->B : sb;
            for (uint32_t i = 0; i < n; i++) e[i] = b[i] - a[i] + (full < rows ? row[full * n + i] : 0);
            /* every rank within a sample of its share, each batch within a
             * sample of its own share of the round; failing that (the final
             * round of few batches), the nearest */
            int ok = exact_round(n, rows, size, e, share, tgt, want, tally, row, lo, hi, 0, &fb) ||
                     exact_round(n, rows, size, e, share, tgt, want, tally, row, lo, hi, 1, &fb);
            if (!ok && t + 1 == L && (rows < w || full < rows))
                ok = final_ranks(m, t, rows, size, e, share, tgt, want, tally, row, lo, hi, &fb,
                                 who, wantp, tallyp);
            if (!ok)
                for (uint64_t x = 0; x < rows * n; x++) { /* the nearest: floor..ceil */
                    double f = floor(share[x]), c = ceil(share[x]);
                    lo[x] = (double)row[x] < f ? row[x] : (uint64_t)f;
                    hi[x] = (double)row[x] > c ? row[x] : (uint64_t)c;
                }
            if (who[0] == UINT64_MAX) improve(n, rows, tgt, lo, hi, want, tally, row);
        }
        for (uint64_t j = 0; j < rows; j++) { /* (row j is rank who[j], or j) */
            const uint64_t r = who[0] == UINT64_MAX ? j : who[j];
            for (uint32_t i = 0; i < n; i++)
                tally[r * n + i] += row[j * n + i], want[r * n + i] += tgt[j * n + i];
        }
        if (t == 0) { /* kept whole: what the final round's extra ranks repeat */
            r0rows = rows;
            r0 = g0;
            for (uint32_t i = 0; i < n; i++) {
                uint64_t o = 0;
                for (uint64_t j = 0; j < rows; j++) {
                    c0[j * n + i] = (uint32_t)row[j * n + i];
                    o0[j * n + i] = (uint32_t)o;
                    o += row[j * n + i];
                }
            }
        }
        uint32_t *cnt = m->rcnt + t * n, *off = m->roff + t * n;
        uint64_t mine = me < rows ? me : UINT64_MAX, past = me - rows; /* my row */
        if (who[0] != UINT64_MAX) { /* the final round's batches went to other ranks */
            mine = UINT64_MAX, past = 0;
            for (uint64_t j = 0; j < rows; j++) mine = who[j] == me ? j : mine;
            for (uint64_t r = 0; r < me; r++) {
                int in = 0;
                for (uint64_t j = 0; j < rows; j++) in |= who[j] == r;
                past += !in;
            }
        }
        if (mine != UINT64_MAX) {
            m->rg[t] = g0 + mine;
            for (uint32_t i = 0; i < n; i++) {
                uint64_t o = 0;
                for (uint64_t j = 0; j < mine; j++) o += row[j * n + i];
                cnt[i] = (uint32_t)row[mine * n + i];
                off[i] = (uint32_t)o;
            }
        } else { /* past the epoch's last batch: a repeat of round 0's */
            uint64_t j = r0rows ? past % r0rows : 0;
            m->rrep[t] = 1;
            m->rg[t] = r0 + j;
            memcpy(cnt, c0 + j * n, n * sizeof *cnt);
            memcpy(off, o0 + j * n, n * sizeof *off);
        }
    }
out:
    free(a), free(b), free(e), free(tally), free(row), free(want), free(pick), free(share), free(tgt), free(lo), free(hi), free(c0), free(o0);
    free(size), free(who), free(wantp), free(tallyp), free(fb.a), free(fb.u), free(fb.y), free(fb.rneed), free(fb.cneed), free(fb.prev);
    free(fb.queue);
    return rc;
}

void cxs_mix_free(cxs_mix *m) {
    if (!m) return;
    for (uint32_t i = 0; m->order && i < m->n; i++) cxs_sampler_free(m->order[i]);
    free(m->order);
    free(m->ds), free(m->size), free(m->quota), free(m->share);
    free(m->rg), free(m->rrep), free(m->rcnt), free(m->roff);
    free(m);
}

/* The shares, then the quotas (largest remainder, ties to the lower). */
int cxs_mix_apportion(uint32_t n, const cxs_dataset *const *ds, const uint64_t *size,
                      const double *wt, double T, uint64_t E, const char *unit, double *share,
                      uint64_t *quota, cxs_diag *d) {
    double sum = 0;
    if (wt && T != 0 && T != 1)
        return cxs_diagf(d, CXS_E_INVALID, "mixture: a temperature (%g) applies to the natural "
                         "shares; give weights or a temperature, not both", T);
    if (!wt && !(T >= 0 && isfinite(T)))
        return cxs_diagf(d, CXS_E_INVALID, "mixture: temperature %g (above 0; 1: natural shares)",
                         T);
    for (uint32_t i = 0; i < n; i++) {
        double v;
        if (wt) {
            v = wt[i];
            if (!(v >= 0) || !isfinite(v))
                return cxs_diagf(d, CXS_E_INVALID, "mixture: weight %u is %g (finite, >= 0)", i, v);
            if (v > 0 && !size[i])
                return cxs_diagf(d, CXS_E_INVALID, "mixture: source %u (%s) has weight %g but no "
                                 "%s", i, ds[i]->manifest_path, v, unit);
        } else {
            v = T == 0 || T == 1 ? (double)size[i] : pow((double)size[i], 1.0 / T);
        }
        share[i] = v;
        sum += v;
    }
    if (!(sum > 0) || !isfinite(sum))
        return wt ? cxs_diagf(d, CXS_E_INVALID, "mixture: the weights are all 0")
                  : cxs_diagf(d, CXS_E_INVALID, "mixture: the sources have no %s", unit);
    uint64_t given = 0;
    double *rem = malloc(n * sizeof *rem);
    uint32_t *by = malloc(n * sizeof *by);
    if (!rem || !by) {
        free(rem), free(by);
        return cxs_diagf(d, -ENOMEM, "mixture: out of memory");
    }
    for (uint32_t i = 0; i < n; i++) {
        share[i] /= sum;
        double x = (double)E * share[i], f = floor(x);
        quota[i] = (uint64_t)f;
        rem[i] = x - f;
        given += quota[i];
        by[i] = i;
    }
    for (uint32_t i = 1; i < n; i++) { /* by remainder, largest first, stable */
        uint32_t v = by[i], j = i;
        for (; j > 0 && rem[by[j - 1]] < rem[v]; j--) by[j] = by[j - 1];
        by[j] = v;
    }
    /* the rest one each in that order (more than one round only when the
     * doubles' rounding left a gap), or taken back from the smallest */
    for (uint32_t k = 0; given < E; k = (k + 1) % n)
        if (share[by[k]] > 0) quota[by[k]]++, given++;
    for (uint32_t k = n - 1; given > E; k = (k + n - 1) % n)
        if (quota[by[k]]) quota[by[k]]--, given--;
    free(by);
    free(rem);
    return 0;
}

int cxs_mix_create(const cxs_dataset *const *ds, uint32_t n, const cxs_mix_opts *opts,
                   cxs_mix **out, cxs_diag *d) {
    if (!ds || !opts || !out)
        return cxs_diagf(d, CXS_E_INVALID, "mixture: datasets, options and out must not be NULL");
    int rc = CXS_OPTS_CHECK(opts, "cxs_mix_opts", d);
    if (rc) return rc;
    if (!n || n > CXS_MIX_MAX_SOURCES)
        return cxs_diagf(d, CXS_E_INVALID, "mixture: %u sources (1 to %u)", n,
                         CXS_MIX_MAX_SOURCES);
    if (opts->kind != CXS_SAMPLER_SHUFFLE && opts->kind != CXS_SAMPLER_SEQUENTIAL &&
        opts->kind != CXS_SAMPLER_BLOCK)
        return cxs_diagf(d, CXS_E_INVALID, "mixture: kind %u (CXS_SAMPLER_SHUFFLE, "
                         "CXS_SAMPLER_SEQUENTIAL or CXS_SAMPLER_BLOCK: the order of each "
                         "source's passes)", opts->kind);
    if ((opts->kind == CXS_SAMPLER_BLOCK) != (opts->memory_bytes != 0))
        return cxs_diagf(d, CXS_E_INVALID, opts->memory_bytes
                         ? "mixture: memory_bytes applies to CXS_SAMPLER_BLOCK only"
                         : "mixture: CXS_SAMPLER_BLOCK needs memory_bytes (the memory budget "
                           "of all the sources)");
    if (opts->blocks > 1024 || (opts->blocks && opts->kind != CXS_SAMPLER_BLOCK))
        return cxs_diagf(d, CXS_E_INVALID, "mixture: blocks %u (1..1024, with "
                         "CXS_SAMPLER_BLOCK only)", opts->blocks);
    if (!opts->batch_size)
        return cxs_diagf(d, CXS_E_INVALID, "mixture: batch_size is required");
    const uint64_t w = opts->world_size ? opts->world_size : 1;
    if (opts->rank >= w)
        return cxs_diagf(d, CXS_E_INVALID, "mixture: rank %u of world_size %llu", opts->rank,
                         (unsigned long long)w);
    if (opts->drop_last > 1) return cxs_diagf(d, CXS_E_INVALID, "mixture: drop_last is 0 or 1");
    if (w * opts->batch_size > UINT32_MAX)
        return cxs_diagf(d, CXS_E_INVALID, "mixture: world_size * batch_size above 2^32");
    for (uint32_t i = 0; i < n; i++)
        if (!ds[i]) return cxs_diagf(d, CXS_E_INVALID, "mixture: source %u is NULL", i);
    cxs_mix *m = calloc(1, sizeof *m);
    if (!m) return cxs_diagf(d, -ENOMEM, "mixture: out of memory");
    m->n = n;
    m->o = *opts;
    m->ds = malloc(n * sizeof *m->ds);
    m->size = malloc(n * sizeof *m->size);
    m->quota = malloc(n * sizeof *m->quota);
    m->share = malloc(n * sizeof *m->share);
    m->order = calloc(n, sizeof *m->order);
    if (!m->ds || !m->size || !m->quota || !m->share || !m->order) {
        cxs_mix_free(m);
        return cxs_diagf(d, -ENOMEM, "mixture: out of memory");
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        m->ds[i] = ds[i];
        m->size[i] = ds[i]->meta.num_frames;
        total += m->size[i];
    }
    m->E = opts->epoch_size ? opts->epoch_size : total;
    m->B = opts->batch_size;
    if (m->E > CXS_MIX_MAX_EPOCH) {
        cxs_mix_free(m);
        return cxs_diagf(d, CXS_E_INVALID, "mixture: an epoch of %llu samples (at most 2^62)",
                         (unsigned long long)(opts->epoch_size ? opts->epoch_size : total));
    }
    m->w = w;
    rc = cxs_mix_apportion(n, ds, m->size, opts->weights, opts->temperature, m->E, "frames",
                           m->share, m->quota, d);
    m->o.weights = NULL; /* the caller's may go */
    if (!rc && !m->E) rc = cxs_diagf(d, CXS_E_INVALID, "mixture: the epoch has no samples");
    /* block order: the budget shared in proportion to the bytes of rows
     * each source gives an epoch (so every source's blocks last about as
     * long in the epoch) */
    double bytes = 0;
    for (uint32_t i = 0; !rc && i < n; i++)
        bytes += (double)m->quota[i] * (double)ds[i]->row_bytes;
    for (uint32_t i = 0; !rc && i < n; i++) {
        if (opts->kind == CXS_SAMPLER_SEQUENTIAL || !m->size[i] || !m->quota[i]) continue;
        cxs_sampler_opts so;
        cxs_sampler_opts_init(&so);
        so.kind = opts->kind;
        so.seed = mix64(opts->seed ^ mix64(0x6d6978ull + i)); /* per source, from the seed */
        if (opts->kind == CXS_SAMPLER_BLOCK) {
            so.memory_bytes = (uint64_t)((double)opts->memory_bytes *
                                         ((double)m->quota[i] * (double)ds[i]->row_bytes) / bytes);
            so.blocks = opts->blocks;
            if (!so.memory_bytes) so.memory_bytes = 1;
        }
        cxs_diag sd;
        if (!(rc = cxs_sampler_create_ex(ds[i], &so, &m->order[i], &sd))) continue;
        if (opts->kind == CXS_SAMPLER_BLOCK) {
            /* the least budget whose shares give every source blocks that
             * hold its longest utterance */
            double need = 0;
            for (uint32_t j = 0; j < n; j++) {
                if (!m->quota[j] || !m->size[j]) continue;
                const double v = (double)(ds[j]->max_len + ds[j]->meta.guard) *
                                 ((opts->blocks ? opts->blocks : 8) + 1.0) * bytes /
                                 (double)m->quota[j];
                if (v > need) need = v;
            }
            cxs_diagf(d, rc, "mixture: source %u (%s), with its share of the memory budget "
                      "(%llu bytes): %s; memory_bytes of at least %.0f would do", i,
                      ds[i]->manifest_path, (unsigned long long)so.memory_bytes, sd.message,
                      ceil(need));
        }
        else
            cxs_diagf(d, rc, "mixture: source %u (%s): %s", i, ds[i]->manifest_path,
                      sd.message);
    }
    if (!rc) {
        uint64_t nfull = m->E / m->B;
        m->nglobal = opts->drop_last ? nfull : nfull + (m->E % m->B != 0);
        if (opts->origin > m->nglobal)
            rc = cxs_diagf(d, CXS_E_INVALID, "mixture: origin %llu is past the epoch's %llu "
                           "batches", (unsigned long long)opts->origin,
                           (unsigned long long)m->nglobal);
        uint64_t left = m->nglobal - (rc ? 0 : opts->origin);
        m->length = opts->drop_last ? left / w : (left + w - 1) / w;
        if (opts->drop_last && !rc) m->nglobal = opts->origin + m->length * w; /* whole rounds */
    }
    if (!rc && w > 1) rc = build_runs(m, d);
    if (rc) {
        cxs_mix_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

uint32_t cxs_mix_sources(const cxs_mix *m) { return m ? m->n : 0; }
const cxs_dataset *cxs_mix_dataset(const cxs_mix *m, uint32_t i) {
    return m && i < m->n ? m->ds[i] : NULL;
}
double cxs_mix_share(const cxs_mix *m, uint32_t i) { return m && i < m->n ? m->share[i] : 0; }
uint64_t cxs_mix_quota(const cxs_mix *m, uint32_t i) { return m && i < m->n ? m->quota[i] : 0; }
uint64_t cxs_mix_epoch_size(const cxs_mix *m) { return m ? m->E : 0; }
uint32_t cxs_mix_batch_size(const cxs_mix *m) { return m ? (uint32_t)m->B : 0; }
int cxs_mix_repeat(const cxs_mix *m, uint64_t pos) {
    return m && m->rrep && pos < m->length ? m->rrep[pos] : 0;
}
uint64_t cxs_mix_length(const cxs_mix *m, uint64_t *global) {
    if (global) *global = m ? m->nglobal : 0;
    return m ? m->length : 0;
}

/* Items a .. a+c-1 of source i in epoch `epoch` into frames. */
static int items(const cxs_mix *m, uint32_t i, uint64_t epoch, uint64_t a, uint64_t c,
                 uint64_t *frames) {
    const uint64_t N = m->size[i];
    u128 s = (u128)epoch * m->quota[i] + a; /* (128 bits: epochs are 64) */
    while (c) {
        /* (a pass number past 2^64 wraps: it names a permutation) */
        uint64_t pass = (uint64_t)(s / N), at = (uint64_t)(s % N), k = min64(c, N - at);
        if (m->order[i]) {
            int rc = cxs_sampler_get(m->order[i], pass, at, (size_t)k, frames);
            if (rc) return rc;
        } else {
            for (uint64_t j = 0; j < k; j++) frames[j] = at + j;
        }
        frames += k, s += k, c -= k;
    }
    return 0;
}

/* This rank's batch at pos: per source its first item (epoch-local) and
 * count, and its global place. */
static void spans(const cxs_mix *m, uint64_t pos, uint64_t *a, uint64_t *c, uint64_t *g) {
    if (m->w == 1) { /* one rank: the merged order itself */
        *g = m->o.origin + pos;
        prefix(m, *g * m->B, a);
        prefix(m, batch_end(m, *g), c);
        for (uint32_t i = 0; i < m->n; i++) c[i] -= a[i];
    } else {
        *g = m->rg[pos];
        uint64_t g0 = m->o.origin + (*g - m->o.origin) / m->w * m->w;
        prefix(m, g0 * m->B, a);
        for (uint32_t i = 0; i < m->n; i++) {
            a[i] += m->roff[pos * m->n + i];
            c[i] = m->rcnt[pos * m->n + i];
        }
    }
}

int cxs_mix_spans(const cxs_mix *m, uint64_t epoch, uint64_t pos, u128 *start,
                  uint64_t *count) {
    if (pos >= m->length) return CXS_E_RANGE;
    uint64_t g, a[CXS_MIX_MAX_SOURCES];
    spans(m, pos, a, count, &g);
    for (uint32_t i = 0; i < m->n; i++) start[i] = (u128)epoch * m->quota[i] + a[i];
    return 0;
}

const cxs_sampler *cxs_mix_order(const cxs_mix *m, uint32_t i) { return m->order[i]; }

int cxs_mix_batch(const cxs_mix *m, uint64_t epoch, uint64_t pos, uint64_t *frames,
                  uint32_t *source, uint32_t cap, uint32_t *n, uint64_t *global) {
    if (!m || !frames || !n) return CXS_E_INVALID;
    if (pos >= m->length) return CXS_E_RANGE;
    if (cap < m->B) return CXS_E_INVALID;
    uint64_t a[CXS_MIX_MAX_SOURCES], c[CXS_MIX_MAX_SOURCES], g;
    spans(m, pos, a, c, &g);
    uint32_t k = 0;
    for (uint32_t i = 0; i < m->n; i++) {
        if (!c[i]) continue;
        int rc = items(m, i, epoch, a[i], c[i], frames + k);
        if (rc) return rc;
        if (source)
            for (uint64_t j = 0; j < c[i]; j++) source[k + j] = i;
        k += (uint32_t)c[i];
    }
    *n = k;
    if (global) *global = g;
    return 0;
}
