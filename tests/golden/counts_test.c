/* Counts a file cannot hold are refused before anything is allocated for
 * them (found by fuzzing: a SHARD_META or DATASET_META claiming 2^40
 * utterances made open try to allocate terabytes).  The damaged files here
 * carry valid checksums, so the check behind them is what refuses them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctxshard.h"
#include "cxs_format.h"
#include "cxs_le.h"

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

/* Set a u64 field of a section and fix its checksum and the header's. */
static void patch(uint8_t *file, uint32_t type, size_t field, uint64_t value) {
    uint32_t n = cxs_ld32(file + 24);
    cxs_section s[CXS_MAX_SECTIONS];
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *e = file + 64 + 32 * i;
        s[i] = (cxs_section){cxs_ld32(e), cxs_ld32(e + 4), cxs_ld64(e + 8), cxs_ld64(e + 16),
                             cxs_ld64(e + 24)};
        if (s[i].type == type) {
            cxs_st64(file + s[i].offset + field, value);
            s[i].checksum = cxs_hash(file + s[i].offset, s[i].length);
        }
    }
    uint8_t page[CXS_PAGE];
    cxs_container_build(page, cxs_ld32(file + 12), cxs_ld64(file + 16), s, n);
    memcpy(file, page, CXS_PAGE);
}

static int write_file(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(b, 1, n, f) == n;
    if (f) fclose(f);
    return ok;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    char p[4096], dir[] = "/tmp/cxs-counts-XXXXXX", mp[256], sp[256];
    if (!mkdtemp(dir)) return 3;
    snprintf(mp, sizeof mp, "%s/manifest.cxs", dir);
    snprintf(sp, sizeof sp, "%s/shard-000000.cxs", dir);
    size_t mn, sn;
    snprintf(p, sizeof p, "%s/valid/tiny/manifest.cxs", argv[1]);
    uint8_t *m = slurp(p, &mn);
    snprintf(p, sizeof p, "%s/valid/tiny/shard-000000.cxs", argv[1]);
    uint8_t *sh = slurp(p, &sn);
    int failures = 0;
    if (!m || !sh || !mn || !sn) return 3;
    cxs_dataset *ds;
    cxs_diag d;
    /* A manifest claiming 2^40 utterances and 2^41 frames. */
    patch(m, CXS_SEC_DATASET_META, 0, 1ull << 40);
    patch(m, CXS_SEC_DATASET_META, 8, 1ull << 41);
    write_file(mp, m, mn);
    write_file(sp, sh, sn);
    int rc = cxs_dataset_open(dir, &ds, &d);
    if (rc != CXS_E_CORRUPT || !strstr(d.message, "cannot fit")) {
        fprintf(stderr, "manifest: got %d (%s)\n", rc, rc ? d.message : "opened");
        failures++;
    }
    /* A lone shard claiming 2^34 utterances and 2^35 frames. */
    patch(sh, CXS_SEC_SHARD_META, 8, 1ull << 34);
    patch(sh, CXS_SEC_SHARD_META, 16, 1ull << 35);
    write_file(sp, sh, sn);
    rc = cxs_dataset_open(sp, &ds, &d);
    if (rc != CXS_E_CORRUPT || !strstr(d.message, "cannot fit")) {
        fprintf(stderr, "shard: got %d (%s)\n", rc, rc ? d.message : "opened");
        failures++;
    }
    unlink(mp);
    unlink(sp);
    rmdir(dir);
    free(m);
    free(sh);
    return failures ? 1 : 0;
}
