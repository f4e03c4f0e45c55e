/* chunks.c - reading compressed shards (spec section 4.6): per-chunk
 * checksum and decode, and a bounded, thread-safe cache of decoded chunks
 * shared by every thread that reads the dataset.
 *
 * The cache is a fixed array of slots of max_chunk_bytes each, a table from
 * dataset-wide chunk number to slot, and CLOCK replacement.  One mutex
 * guards the bookkeeping; decoding happens outside it, with the slot marked
 * loading so that other threads wanting the same chunk wait for it instead
 * of decoding it again.  A reader holds (pins) one slot at a time while it
 * copies out of it; when every slot is pinned or loading it decodes into its
 * own buffer instead, so the cache can never deadlock or exceed its size.
 * Fork: a process-wide pthread_atfork handler holds every cache's mutex
 * across fork(), so a child never inherits one locked. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cxs_le.h"
#include "dataset_internal.h"
#include "fault.h"

enum { SLOT_EMPTY, SLOT_LOADING, SLOT_READY };

typedef struct zslot {
    uint64_t key;
    int32_t pins;
    uint8_t state, ref;
} zslot;

struct zcache {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t slot_bytes;
    uint32_t nslots, hand;
    uint8_t *mem;
    zslot *slots;
    int32_t *where; /* per chunk: slot or -1 */
    struct zcache *next, *prev; /* the process-wide list, for fork */
};

static pthread_mutex_t all_mu = PTHREAD_MUTEX_INITIALIZER;
static struct zcache *all_caches;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void) {
    pthread_mutex_lock(&all_mu);
    for (struct zcache *z = all_caches; z; z = z->next) pthread_mutex_lock(&z->mu);
}

static void fork_after(void) {
    for (struct zcache *z = all_caches; z; z = z->next) pthread_mutex_unlock(&z->mu);
    pthread_mutex_unlock(&all_mu);
}

static void register_atfork(void) { pthread_atfork(fork_prepare, fork_after, fork_after); }

int cxs_zcache_create(cxs_dataset *ds, uint64_t bytes) {
    size_t sb = ds->max_chunk_bytes;
    uint64_t n = sb ? bytes / sb : 0;
    if (n == 0) return 0; /* no cache: every read decodes */
    if (n > INT32_MAX) n = INT32_MAX;
    struct zcache *z = calloc(1, sizeof *z);
    if (!z) return -ENOMEM;
    z->slot_bytes = sb;
    z->nslots = (uint32_t)n;
    z->mem = malloc((size_t)n * sb);
    z->slots = calloc((size_t)n, sizeof *z->slots);
    z->where = malloc((size_t)ds->total_chunks * sizeof *z->where);
    if (!z->mem || !z->slots || !z->where) {
        free(z->mem);
        free(z->slots);
        free(z->where);
        free(z);
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < ds->total_chunks; i++) z->where[i] = -1;
    pthread_mutex_init(&z->mu, NULL);
    pthread_cond_init(&z->cv, NULL);
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&all_mu);
    z->next = all_caches;
    if (all_caches) all_caches->prev = z;
    all_caches = z;
    pthread_mutex_unlock(&all_mu);
    ds->zc = z;
    return 0;
}

void cxs_zcache_free(struct zcache *z) {
    if (!z) return;
    pthread_mutex_lock(&all_mu);
    if (z->prev) z->prev->next = z->next;
    else all_caches = z->next;
    if (z->next) z->next->prev = z->prev;
    pthread_mutex_unlock(&all_mu);
    pthread_mutex_destroy(&z->mu);
    pthread_cond_destroy(&z->cv);
    free(z->mem);
    free(z->slots);
    free(z->where);
    free(z);
}

void cxs_zreader_free(zreader *zr) {
    if (zr->dc) ZSTD_freeDCtx(zr->dc);
    free(zr->scratch);
    free(zr->own);
    memset(zr, 0, sizeof *zr);
}

static int zreader_setup(const cxs_dataset *ds, zreader *zr) {
    if (zr->dc) return 0;
    zr->slot = -1;
    zr->dc = ZSTD_createDCtx();
    zr->scratch = malloc(ds->max_chunk_bytes);
    zr->own = malloc(ds->max_chunk_bytes);
    if (zr->dc && zr->scratch && zr->own) return 0;
    cxs_zreader_free(zr);
    return -ENOMEM;
}

typedef struct decode_arg {
    const cxs_dataset *ds;
    zreader *zr;
    const shard *sh;
    uint64_t c;
    uint8_t *dst;
    size_t *n;
} decode_arg;

/* Everything that reads the mapping: the chunk table, the checksum, the
 * decode (in a recovery region: no lock held, nothing to release). */
static int decode_mapped(void *p) {
    const decode_arg *x = p;
    const cxs_dataset *ds = x->ds;
    const shard *sh = x->sh;
    const uint64_t c = x->c;
    const uint8_t *e = sh->chunk_table + CXS_CHUNK_ENTRY * c;
    uint64_t a = c ? cxs_ld64(e - CXS_CHUNK_ENTRY) : 0;
    uint64_t b = cxs_ld64(e);
    uint64_t sum = cxs_ld64(e + 8);
    uint64_t rows = sh->ch.raw_length / ds->row_bytes;
    uint64_t r0 = c * sh->ch.chunk_rows;
    uint64_t nr = rows - r0 < sh->ch.chunk_rows ? rows - r0 : sh->ch.chunk_rows;
    /* where a failure below is (a truncation's own offset replaces it) */
    x->zr->bad_offset = (uint64_t)(sh->zdata + a - sh->map);
    if (cxs_checksum_differs(cxs_hash(sh->zdata + a, (size_t)(b - a)), sum)) return CXS_E_CHECKSUM;
    *x->n = (size_t)(nr * ds->row_bytes);
    if (cxs_zchunk_decode(x->zr->dc, sh->ch.filter, ds->esize, sh->zdata + a, (size_t)(b - a),
                          x->zr->scratch, x->dst, *x->n))
        return CXS_E_CORRUPT;
    return 0;
}

int cxs_decode_chunk(const cxs_dataset *ds, zreader *zr, uint32_t s, uint64_t c, uint8_t *dst,
                     size_t *n) {
    int rc = zreader_setup(ds, zr);
    if (rc) return rc;
    decode_arg x = {ds, zr, &ds->shards[s], c, dst, n};
    cxs_fault f;
    rc = cxs_fault_run(ds, decode_mapped, &x, &f);
    if (rc) zr->bad_chunk = c;
    if (rc == CXS_E_TRUNCATED) {
        zr->bad_offset = f.offset;
        /* the decoder was left mid-frame */
        ZSTD_DCtx_reset(zr->dc, ZSTD_reset_session_and_parameters);
    }
    return rc;
}

static void release(const cxs_dataset *ds, zreader *zr) {
    if (zr->slot < 0) return;
    struct zcache *z = ds->zc;
    pthread_mutex_lock(&z->mu);
    z->slots[zr->slot].pins--;
    pthread_mutex_unlock(&z->mu);
    zr->slot = -1;
}

/* Decoded bytes of chunk c of shard s: in a pinned cache slot (release()
 * unpins it) or in zr->own. */
static int get_chunk(const cxs_dataset *ds, zreader *zr, uint32_t s, uint64_t c,
                     const uint8_t **out) {
    struct zcache *z = ds->zc;
    size_t n;
    int rc;
    if (!z) {
        rc = cxs_decode_chunk(ds, zr, s, c, zr->own, &n);
        *out = zr->own;
        return rc;
    }
    const uint64_t key = ds->shards[s].chunk_base + c;
    pthread_mutex_lock(&z->mu);
    for (;;) {
        int32_t w = z->where[key];
        if (w >= 0) {
            zslot *sl = &z->slots[w];
            if (sl->state == SLOT_LOADING) {
                pthread_cond_wait(&z->cv, &z->mu);
                continue;
            }
            sl->pins++;
            sl->ref = 1;
            pthread_mutex_unlock(&z->mu);
            zr->slot = w;
            *out = z->mem + (size_t)w * z->slot_bytes;
            return 0;
        }
        /* A miss: CLOCK over the unpinned slots (two sweeps clear every
         * reference bit once). */
        int32_t victim = -1;
        for (uint64_t i = 0; i < 2ull * z->nslots; i++) {
            uint32_t h = z->hand;
            z->hand = h + 1 == z->nslots ? 0 : h + 1;
            zslot *sl = &z->slots[h];
            if (sl->pins || sl->state == SLOT_LOADING) continue;
            if (sl->ref) {
                sl->ref = 0;
                continue;
            }
            victim = (int32_t)h;
            break;
        }
        if (victim < 0) { /* everything pinned: decode privately */
            pthread_mutex_unlock(&z->mu);
            rc = cxs_decode_chunk(ds, zr, s, c, zr->own, &n);
            *out = zr->own;
            return rc;
        }
        zslot *sl = &z->slots[victim];
        if (sl->state == SLOT_READY) z->where[sl->key] = -1;
        sl->key = key;
        sl->state = SLOT_LOADING;
        sl->pins = 1;
        z->where[key] = victim;
        pthread_mutex_unlock(&z->mu);
        uint8_t *dst = z->mem + (size_t)victim * z->slot_bytes;
        rc = cxs_decode_chunk(ds, zr, s, c, dst, &n);
        pthread_mutex_lock(&z->mu);
        if (rc) {
            sl->state = SLOT_EMPTY;
            sl->pins = 0;
            z->where[key] = -1;
        } else {
            sl->state = SLOT_READY;
            sl->ref = 1;
        }
        pthread_cond_broadcast(&z->cv);
        pthread_mutex_unlock(&z->mu);
        if (rc) return rc;
        zr->slot = victim;
        *out = dst;
        return 0;
    }
}

int cxs_read_rows(const cxs_dataset *ds, zreader *zr, uint32_t s, uint64_t r0, uint64_t n,
                  uint8_t *dst) {
    const shard *sh = &ds->shards[s];
    const uint64_t rb = ds->row_bytes;
    zr->bad_chunk = UINT64_MAX;
    if (!cxs_compressed(ds)) {
        memcpy(dst, sh->features + r0 * rb, (size_t)(n * rb));
        return 0;
    }
    int rc = zreader_setup(ds, zr);
    if (rc) return rc;
    const uint64_t cr = sh->ch.chunk_rows;
    while (n) {
        uint64_t c = r0 / cr, off = r0 - c * cr;
        uint64_t take = cr - off < n ? cr - off : n;
        const uint8_t *p;
        if ((rc = get_chunk(ds, zr, s, c, &p))) return rc;
        memcpy(dst, p + off * rb, (size_t)(take * rb));
        release(ds, zr);
        dst += take * rb;
        r0 += take;
        n -= take;
    }
    return 0;
}
