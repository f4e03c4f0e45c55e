/* hugecopy.c - cxs_open_opts.hugepage_budget: the FEATURES and LABELS of
 * an uncompressed dataset copied at open into anonymous memory that the
 * kernel backs with 2 MiB pages, and served from there.
 *
 * Why: a shard's page cache is mapped in 4 KiB pages (unless it was read
 * in through a huge-page mapping), so every random window costs a TLB
 * miss and a page walk for each page it spans, and its label another; a
 * copy in 2 MiB pages needs one TLB entry per 2 MiB (docs/benchmarks.md
 * has the figures).  The price is the sections' size in anonymous memory,
 * on top of the page cache (which the kernel may then drop: the files are
 * no longer read for features or labels).
 *
 * Validity: each section is hashed as it is copied -- the copy's bytes,
 * not the file's -- and compared with the checksum of the section table,
 * which the header checksum and the manifest vouch for, and block by
 * block with its block sums when BLOCKSUMS covers it; a mismatch fails
 * the open (CXS_E_CHECKSUM).  What is served is therefore what was packed,
 * and a shard changed or truncated after open no longer affects the
 * windows or labels served.  The copy is private anonymous memory: a
 * forked child shares its pages (copy-on-write, never written) and
 * serves from it like the parent. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#include "dataset_internal.h"
#include "fault.h"
#include "hooks.h"

#define HUGE_BYTES (2ull << 20)
#define STEP (1u << 20) /* copied, then hashed while still in the cache */

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

static uint64_t round_huge(uint64_t n) { return (n + HUGE_BYTES - 1) / HUGE_BYTES * HUGE_BYTES; }

/* Whether transparent huge pages can back an madvise'd mapping here;
 * when not, why into why. */
static int thp_available(char *why, size_t n) {
    static const char *path = "/sys/kernel/mm/transparent_hugepage/enabled";
    if (cxs_hook_thp_off()) {
        snprintf(why, n, "transparent huge pages are off (%s: never)", path);
        return 0;
    }
    FILE *f = fopen(path, "r");
    char line[128] = "";
    int ok = f && fgets(line, sizeof line, f);
    if (f) fclose(f);
    if (!ok) {
        snprintf(why, n, "this kernel offers no transparent huge pages (no %s)", path);
        return 0;
    }
    if (strstr(line, "[never]")) {
        snprintf(why, n, "transparent huge pages are off (%s: never)", path);
        return 0;
    }
    return 1;
}

/* AnonHugePages of the mapping at p (/proc/self/smaps), in bytes; 0 when
 * it cannot be read. */
static uint64_t anon_huge_bytes(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0;
    unsigned long long v = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long a, b;
        /* a mapping's first line is "start-end perms ...", a field's "Name: value" */
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)p >= a && (uintptr_t)p < b;
        } else if (in && sscanf(line, "AnonHugePages: %llu kB", &v) == 1) {
            break;
        }
    }
    if (f) fclose(f);
    return (uint64_t)v * 1024;
}

typedef struct copy_job {
    const uint8_t *src;
    uint8_t *dst;
    uint64_t n;
    XXH3_state_t *st;
    uint64_t hash;
} copy_job;

/* In a recovery region: the source is the shard's mapping. */
static int copy_hash(void *arg) {
    copy_job *j = arg;
    XXH3_64bits_reset(j->st);
    for (uint64_t o = 0; o < j->n; o += STEP) {
        size_t m = (size_t)(j->n - o < STEP ? j->n - o : STEP);
        memcpy(j->dst + o, j->src + o, m);
        XXH3_64bits_update(j->st, j->dst + o, m);
    }
    j->hash = XXH3_64bits_digest(j->st);
    return 0;
}

/* Copy one section of shard s into dst, checked against its checksum. */
static int copy_section(cxs_dataset *ds, uint32_t s, uint32_t type, uint8_t *dst,
                        XXH3_state_t *st, cxs_diag *d) {
    const shard *sh = &ds->shards[s];
    const cxs_section *sec = cxs_container_find(&sh->c, type);
    copy_job j = {sh->map + sec->offset, dst, sec->length, st, 0};
    cxs_fault f;
    int rc = cxs_fault_run(ds, copy_hash, &j, &f);
    if (rc == CXS_E_TRUNCATED)
        return cxs_diag_at(d, rc, sh->path, f.offset,
                           "%s: truncated since open: byte %llu cannot be read", sh->path,
                           (unsigned long long)f.offset);
    if (rc) return cxs_diagf(d, rc, "%s: %s", sh->path, cxs_strerror(rc));
    if (cxs_checksum_differs(j.hash, sec->checksum))
        return cxs_diag_at(d, CXS_E_CHECKSUM, sh->path, sec->offset,
                         "%s: section %s (bytes %llu..%llu): checksum mismatch in its copy into "
                         "huge pages",
                         sh->path, cxs_section_name(type), (unsigned long long)sec->offset,
                         (unsigned long long)(sec->offset + sec->length));
    /* and every block of the copy against its block sum, when BLOCKSUMS
     * covers the section: a section checksum that matches does not make a
     * block whose sum disagrees servable (spec section 4.8) */
    const cxs_bcheck *c = cxs_bsrc_of(ds, s, type);
    for (uint64_t b = 0; c && b < c->e->num_blocks; b++) {
        uint64_t lo, hi;
        cxs_bsum_block(c->e, b, &lo, &hi);
        if (cxs_checksum_differs(cxs_hash(dst + lo, (size_t)(hi - lo)),
                                 cxs_bsum_of(&sh->bs, c->e, b)))
            return cxs_block_failed(ds, s, c->e, b, d);
    }
    return 0;
}

int cxs_hugecopy(cxs_dataset *ds, uint64_t budget, cxs_diag *d) {
    char *why = ds->hp_why;
    const size_t wn = sizeof ds->hp_why;
    if (cxs_compressed(ds)) {
        snprintf(why, wn, "compressed features are served through the chunk cache, not copied");
        return 0;
    }
    const uint32_t S = ds->meta.num_shards;
    uint64_t need = 0;
    for (uint32_t s = 0; s < S; s++) {
        const shard *sh = &ds->shards[s];
        need += round_huge(cxs_container_find(&sh->c, CXS_SEC_FEATURES)->length);
        if (sh->labels) need += round_huge(cxs_container_find(&sh->c, CXS_SEC_LABELS)->length);
    }
    if (need > budget || need > SIZE_MAX - HUGE_BYTES) {
        snprintf(why, wn,
                 "the features and labels need %llu bytes of huge pages; the budget is %llu",
                 (unsigned long long)need, (unsigned long long)budget);
        return 0;
    }
    if (!thp_available(why, wn)) return 0;
    /* 2 MiB-aligned, so that every 2 MiB of it can be one huge page */
    uint8_t *m = mmap(NULL, (size_t)(need + HUGE_BYTES), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        snprintf(why, wn, "cannot map %llu bytes of anonymous memory: %s",
                 (unsigned long long)need, strerror(errno));
        return 0;
    }
    uint8_t *p = (uint8_t *)(((uintptr_t)m + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1));
    if (p > m) munmap(m, (size_t)(p - m));
    if (p + need < m + need + HUGE_BYTES) munmap(p + need, (size_t)(m + need + HUGE_BYTES - (p + need)));
    if (madvise(p, (size_t)need, MADV_HUGEPAGE)) {
        snprintf(why, wn, "madvise(MADV_HUGEPAGE) refused: %s", strerror(errno));
        munmap(p, (size_t)need);
        return 0;
    }
    /* Fault the huge pages in now: a failure is then a fallback with a
     * reason (kernels before 5.14 refuse the advice: the copy faults them) */
    if (madvise(p, (size_t)need, MADV_POPULATE_WRITE) && errno != EINVAL) {
        snprintf(why, wn, "cannot populate %llu bytes of anonymous memory: %s",
                 (unsigned long long)need, strerror(errno));
        munmap(p, (size_t)need);
        return 0;
    }
    XXH3_state_t *st = XXH3_createState();
    if (!st) {
        munmap(p, (size_t)need);
        return cxs_diagf(d, -ENOMEM, "out of memory");
    }
    const uint8_t **feat = calloc(2 * (size_t)S, sizeof *feat);
    if (!feat) {
        XXH3_freeState(st);
        munmap(p, (size_t)need);
        return cxs_diagf(d, -ENOMEM, "out of memory");
    }
    uint64_t at = 0;
    int rc = 0;
    for (uint32_t s = 0; s < S && !rc; s++) {
        const shard *sh = &ds->shards[s];
        feat[2 * s] = p + at;
        rc = copy_section(ds, s, CXS_SEC_FEATURES, p + at, st, d);
        at += round_huge(cxs_container_find(&sh->c, CXS_SEC_FEATURES)->length);
        if (rc || !sh->labels) continue;
        feat[2 * s + 1] = p + at;
        rc = copy_section(ds, s, CXS_SEC_LABELS, p + at, st, d);
        at += round_huge(cxs_container_find(&sh->c, CXS_SEC_LABELS)->length);
    }
    XXH3_freeState(st);
    if (!rc) {
        /* read-only from now on, as the mapping was */
        mprotect(p, (size_t)need, PROT_READ);
        for (uint32_t s = 0; s < S; s++) {
            ds->shards[s].serve_features = feat[2 * s];
            if (feat[2 * s + 1]) ds->shards[s].serve_labels = feat[2 * s + 1];
            /* served from a copy checked against the sections' checksums
             * and every block's sum: every block of them is checked
             * (blocksrc.h) */
            cxs_bsrc_mark_all(cxs_bsrc_of(ds, s, CXS_SEC_FEATURES));
            if (feat[2 * s + 1]) cxs_bsrc_mark_all(cxs_bsrc_of(ds, s, CXS_SEC_LABELS));
        }
        ds->hp_map = p;
        ds->hp_len = need;
        ds->hp_huge = anon_huge_bytes(p);
        why[0] = 0;
    } else {
        munmap(p, (size_t)need);
    }
    free(feat);
    return rc;
}

void cxs_hugepages_fill(const cxs_dataset *ds, cxs_hugepage_info *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!ds) return;
    out->bytes = ds->hp_len;
    out->huge_bytes = ds->hp_huge;
    snprintf(out->reason, sizeof out->reason, "%s", ds->hp_why);
}
