/* cxs_format.c - container parsing and building (spec/format.md, sections
 * 2 to 4).  Every length and offset read from a file is checked against the
 * file size before it is used, with overflow-safe arithmetic. */
#include "cxs_format.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "cxs_le.h"

const uint8_t cxs_magic_bytes[8] = {0x89, 'C', 'X', 'S', '\r', '\n', 0x1a, '\n'};

int cxs_vdiag_at(cxs_diag *d, int code, const char *file, uint64_t offset, const char *fmt,
                 va_list ap) {
    if (!d) return code;
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(d->message, sizeof d->message, fmt, ap);
    if (n >= (int)sizeof d->message) {
        /* Too long (a path of thousands of bytes): keep its start and its
         * end, where the reason is, and say what was left out. */
        char *full = malloc((size_t)n + 1);
        if (full) {
            vsnprintf(full, (size_t)n + 1, fmt, again);
            const size_t head = 300, tail = sizeof d->message - head - 32;
            snprintf(d->message, sizeof d->message, "%.*s[... %zu bytes ...]%s", (int)head,
                     full, (size_t)n - head - tail, full + n - tail);
            free(full);
        }
    }
    va_end(again);
    d->code = code;
    d->pad = 0;
    d->offset = offset;
    snprintf(d->file, sizeof d->file, "%s", file ? file : "");
    memset(d->reserved, 0, sizeof d->reserved);
    return code;
}

int cxs_diagf(cxs_diag *d, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cxs_vdiag_at(d, code, NULL, CXS_NO_OFFSET, fmt, ap);
    va_end(ap);
    return code;
}

int cxs_diag_at(cxs_diag *d, int code, const char *file, uint64_t offset, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cxs_vdiag_at(d, code, file, offset, fmt, ap);
    va_end(ap);
    return code;
}

int cxs_diag_copy(cxs_diag *d, int code, const cxs_diag *src) {
    if (d && d != src) {
        *d = *src;
        d->code = code;
    }
    return code;
}

uint64_t cxs_shard_file_size(uint64_t U, uint64_t F, uint64_t id_bytes, uint64_t D,
                             uint64_t esize, uint64_t G, uint64_t lw, uint64_t qh) {
    uint64_t feat = (F + (U + 1) * G) * D * esize;
    return CXS_PAGE + cxs_align_page(feat) + (lw ? cxs_align_page(F * lw) : 0) +
           (qh ? cxs_align_page(U * qh) : 0) +
           cxs_align_page(8 * (U + 1)) + cxs_align_page(8 * (U + 1) + id_bytes) +
           cxs_align_page(CXS_SHARD_META_SIZE);
}

size_t cxs_dtype_size(uint32_t dtype) {
    switch (dtype) {
    case CXS_DTYPE_F32: return 4;
    case CXS_DTYPE_F16: return 2;
    case CXS_DTYPE_BF16: return 2;
    case CXS_DTYPE_Q8: return 1;
    case CXS_DTYPE_Q16: return 2;
    default: return 0;
    }
}

const char *cxs_dtype_name(uint32_t dtype) {
    switch (dtype) {
    case CXS_DTYPE_F32: return "float32";
    case CXS_DTYPE_F16: return "float16";
    case CXS_DTYPE_BF16: return "bfloat16";
    case CXS_DTYPE_Q8: return "q8";
    case CXS_DTYPE_Q16: return "q16";
    default: return "unknown";
    }
}

const char *cxs_section_name(uint32_t type) {
    switch (type) {
    case CXS_SEC_SHARD_META: return "SHARD_META";
    case CXS_SEC_INDEX: return "INDEX";
    case CXS_SEC_IDS: return "IDS";
    case CXS_SEC_FEATURES: return "FEATURES";
    case CXS_SEC_LABELS: return "LABELS";
    case CXS_SEC_ZFEATURES: return "ZFEATURES";
    case CXS_SEC_CHUNKS: return "CHUNKS";
    case CXS_SEC_SEQUENCES: return "SEQUENCES";
    case CXS_SEC_BLOCKSUMS: return "BLOCKSUMS";
    case CXS_SEC_QHEADERS: return "QHEADERS";
    case CXS_SEC_DATASET_META: return "DATASET_META";
    case CXS_SEC_SHARD_TABLE: return "SHARD_TABLE";
    case CXS_SEC_VOCAB: return "VOCAB";
    case CXS_SEC_STATS: return "STATS";
    case CXS_SEC_SKIPPED: return "SKIPPED";
    case CXS_SEC_SEQ_META: return "SEQ_META";
    case CXS_SEC_PART_META: return "PART_META";
    case CXS_SEC_PART_SUMS: return "PART_SUMS";
    default: return "unknown";
    }
}

uint64_t cxs_hash(const void *p, size_t n) {
    return (uint64_t)XXH3_64bits(p, n);
}

static int known_type(uint32_t kind, uint32_t type) {
    if (kind == CXS_KIND_SHARD)
        return type >= CXS_SEC_SHARD_META && type <= CXS_SEC_QHEADERS;
    if (kind == CXS_KIND_PART)
        return (type >= CXS_SEC_DATASET_META && type <= CXS_SEC_SEQ_META) ||
               type == CXS_SEC_PART_META || type == CXS_SEC_PART_SUMS;
    return type >= CXS_SEC_DATASET_META && type <= CXS_SEC_SEQ_META;
}

static uint64_t header_hash(const uint8_t *p, uint32_t n) {
    /* The checksum field itself (bytes 56..63) is hashed as zeros. */
    XXH3_state_t *st = XXH3_createState();
    static const uint8_t zero8[8];
    uint64_t h;
    if (!st) { /* out of memory: fall back to a copy on the stack */
        uint8_t tmp[CXS_HEADER_SIZE + CXS_SECTION_ENTRY * CXS_MAX_SECTIONS];
        size_t len = CXS_HEADER_SIZE + (size_t)CXS_SECTION_ENTRY * n;
        memcpy(tmp, p, len);
        memset(tmp + 56, 0, 8);
        return cxs_hash(tmp, len);
    }
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, p, 56);
    XXH3_64bits_update(st, zero8, 8);
    XXH3_64bits_update(st, p + CXS_HEADER_SIZE, (size_t)CXS_SECTION_ENTRY * n);
    h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

int cxs_container_parse(const uint8_t *p, uint64_t size, uint32_t kind,
                        cxs_container *out, const char *path, cxs_diag *d) {
    cxs_container c;
    memset(&c, 0, sizeof c);
    if (size < 8 || memcmp(p, cxs_magic_bytes, 8) != 0)
        return cxs_diagf(d, CXS_E_BAD_MAGIC, "%s: not a ctxshard file (bad magic at offset 0)", path);
    if (size < CXS_PAGE)
        return cxs_diagf(d, CXS_E_TRUNCATED,
                         "%s: truncated: %llu bytes, the header page alone is %u", path,
                         (unsigned long long)size, CXS_PAGE);
    c.major = cxs_ld16(p + 8);
    c.minor = cxs_ld16(p + 10);
    if (c.major != CXS_FORMAT_MAJOR)
        return cxs_diagf(d, CXS_E_VERSION,
                         "%s: format version %u.%u, this reader knows major version %u", path,
                         c.major, c.minor, CXS_FORMAT_MAJOR);
    c.kind = cxs_ld32(p + 12);
    c.file_size = cxs_ld64(p + 16);
    c.nsections = cxs_ld32(p + 24);
    c.header_checksum = cxs_ld64(p + 56);
    if (c.nsections == 0 || c.nsections > CXS_MAX_SECTIONS)
        return cxs_diagf(d, CXS_E_CORRUPT,
                         "%s: header offset 24: section count %u, expected 1 to %u", path,
                         c.nsections, CXS_MAX_SECTIONS);
    if (cxs_checksum_differs(header_hash(p, c.nsections), c.header_checksum))
        return cxs_diagf(d, CXS_E_CHECKSUM,
                         "%s: header checksum mismatch (header or section table damaged)", path);
    if (c.kind != kind)
        return cxs_diagf(d, CXS_E_CORRUPT, "%s: header offset 12: file kind %u, expected %u (%s)",
                         path, c.kind, kind,
                         kind == CXS_KIND_SHARD ? "shard" : kind == CXS_KIND_PART ? "part" : "manifest");
    if (c.file_size != size)
        return cxs_diagf(d, c.file_size > size ? CXS_E_TRUNCATED : CXS_E_CORRUPT,
                         "%s: file is %llu bytes, its header says %llu", path,
                         (unsigned long long)size, (unsigned long long)c.file_size);
    for (uint32_t i = 28; i < 56; i++)
        if (p[i] != 0)
            return cxs_diagf(d, CXS_E_CORRUPT, "%s: header offset %u: reserved byte is not zero",
                             path, i);
    uint64_t prev_end = CXS_PAGE;
    for (uint32_t i = 0; i < c.nsections; i++) {
        const uint8_t *e = p + CXS_HEADER_SIZE + (size_t)CXS_SECTION_ENTRY * i;
        cxs_section *s = &c.sections[i];
        s->type = cxs_ld32(e);
        s->flags = cxs_ld32(e + 4);
        s->offset = cxs_ld64(e + 8);
        s->length = cxs_ld64(e + 16);
        s->checksum = cxs_ld64(e + 24);
        if (s->flags & ~CXS_SECF_REQUIRED)
            return cxs_diagf(d, CXS_E_CORRUPT, "%s: section %u: reserved flag bits set (0x%x)",
                             path, i, s->flags);
        if (s->offset % CXS_PAGE || s->offset < prev_end)
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: section %u (%s): offset %llu is not page-aligned after the "
                             "previous section (ends at %llu)",
                             path, i, cxs_section_name(s->type), (unsigned long long)s->offset,
                             (unsigned long long)prev_end);
        if (s->offset > size || s->length > size - s->offset)
            return cxs_diagf(d, CXS_E_TRUNCATED,
                             "%s: section %u (%s): bytes %llu..%llu lie past the end of the "
                             "file (%llu bytes)",
                             path, i, cxs_section_name(s->type), (unsigned long long)s->offset,
                             (unsigned long long)s->offset + s->length,
                             (unsigned long long)size);
        prev_end = cxs_align_page(s->offset + s->length);
        for (uint32_t j = 0; j < i; j++)
            if (c.sections[j].type == s->type)
                return cxs_diagf(d, CXS_E_CORRUPT, "%s: section type %u appears twice", path,
                                 s->type);
        if (!known_type(kind, s->type) && (s->flags & CXS_SECF_REQUIRED))
            return cxs_diagf(d, CXS_E_UNSUPPORTED,
                             "%s: required section type %u is unknown to this reader (format "
                             "%u.%u)",
                             path, s->type, c.major, c.minor);
    }
    if (prev_end != size)
        return cxs_diagf(d, CXS_E_CORRUPT,
                         "%s: file is %llu bytes, its last section ends (page-aligned) at %llu",
                         path, (unsigned long long)size, (unsigned long long)prev_end);
    *out = c;
    return 0;
}

const cxs_section *cxs_container_find(const cxs_container *c, uint32_t type) {
    for (uint32_t i = 0; i < c->nsections; i++)
        if (c->sections[i].type == type) return &c->sections[i];
    return NULL;
}

uint64_t cxs_container_build(uint8_t page[CXS_PAGE], uint32_t kind, uint64_t file_size,
                             const cxs_section *s, uint32_t n) {
    return cxs_container_build_v(page, kind, 0, file_size, s, n);
}

uint64_t cxs_container_build_v(uint8_t page[CXS_PAGE], uint32_t kind, uint32_t minor,
                               uint64_t file_size, const cxs_section *s, uint32_t n) {
    memset(page, 0, CXS_PAGE);
    memcpy(page, cxs_magic_bytes, 8);
    cxs_st16(page + 8, CXS_FORMAT_MAJOR);
    cxs_st16(page + 10, (uint16_t)minor);
    cxs_st32(page + 12, kind);
    cxs_st64(page + 16, file_size);
    cxs_st32(page + 24, n);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *e = page + CXS_HEADER_SIZE + (size_t)CXS_SECTION_ENTRY * i;
        cxs_st32(e, s[i].type);
        cxs_st32(e + 4, s[i].flags);
        cxs_st64(e + 8, s[i].offset);
        cxs_st64(e + 16, s[i].length);
        cxs_st64(e + 24, s[i].checksum);
    }
    uint64_t h = header_hash(page, n);
    cxs_st64(page + 56, h);
    return h;
}

static int reserved_zero(const uint8_t *p, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (p[i]) return 0;
    return 1;
}

void cxs_shard_meta_store(uint8_t *p, const cxs_shard_meta *m) {
    memset(p, 0, CXS_SHARD_META_SIZE);
    cxs_st32(p + 0, m->index);
    cxs_st32(p + 4, m->dim);
    cxs_st64(p + 8, m->num_utterances);
    cxs_st64(p + 16, m->num_frames);
    cxs_st64(p + 24, m->first_utterance);
    cxs_st64(p + 32, m->first_frame);
    cxs_st32(p + 40, m->guard);
    cxs_st16(p + 44, m->dtype);
    cxs_st16(p + 46, m->label_width);
}

int cxs_shard_meta_load(const uint8_t *p, uint64_t len, cxs_shard_meta *m, const char *path,
                        cxs_diag *d) {
    if (len != CXS_SHARD_META_SIZE)
        return cxs_diagf(d, CXS_E_CORRUPT, "%s: SHARD_META is %llu bytes, expected %u", path,
                         (unsigned long long)len, CXS_SHARD_META_SIZE);
    m->index = cxs_ld32(p);
    m->dim = cxs_ld32(p + 4);
    m->num_utterances = cxs_ld64(p + 8);
    m->num_frames = cxs_ld64(p + 16);
    m->first_utterance = cxs_ld64(p + 24);
    m->first_frame = cxs_ld64(p + 32);
    m->guard = cxs_ld32(p + 40);
    m->dtype = cxs_ld16(p + 44);
    m->label_width = cxs_ld16(p + 46);
    if (!reserved_zero(p, 48, 64))
        return cxs_diagf(d, CXS_E_CORRUPT, "%s: SHARD_META: reserved bytes 48..63 not zero",
                         path);
    return 0;
}

void cxs_dataset_meta_store(uint8_t *p, const cxs_dataset_meta *m) {
    memset(p, 0, CXS_DATASET_META_SIZE);
    cxs_st64(p + 0, m->num_utterances);
    cxs_st64(p + 8, m->num_frames);
    cxs_st32(p + 16, m->num_shards);
    cxs_st32(p + 20, m->dim);
    cxs_st32(p + 24, m->guard);
    cxs_st16(p + 28, m->dtype);
    cxs_st16(p + 30, m->label_width);
    cxs_st32(p + 32, m->vocab_size);
    cxs_st32(p + 36, m->normalize);
    cxs_st64(p + 40, m->shard_size);
    cxs_st64(p + 48, m->num_skipped);
    cxs_st32(p + 56, m->on_error);
    cxs_st32(p + 60, m->compression);
}

int cxs_dataset_meta_load(const uint8_t *p, uint64_t len, cxs_dataset_meta *m,
                          const char *path, cxs_diag *d) {
    if (len != CXS_DATASET_META_SIZE)
        return cxs_diagf(d, CXS_E_CORRUPT, "%s: DATASET_META is %llu bytes, expected %u", path,
                         (unsigned long long)len, CXS_DATASET_META_SIZE);
    m->num_utterances = cxs_ld64(p);
    m->num_frames = cxs_ld64(p + 8);
    m->num_shards = cxs_ld32(p + 16);
    m->dim = cxs_ld32(p + 20);
    m->guard = cxs_ld32(p + 24);
    m->dtype = cxs_ld16(p + 28);
    m->label_width = cxs_ld16(p + 30);
    m->vocab_size = cxs_ld32(p + 32);
    m->normalize = cxs_ld32(p + 36);
    m->shard_size = cxs_ld64(p + 40);
    m->num_skipped = cxs_ld64(p + 48);
    m->on_error = cxs_ld32(p + 56);
    m->compression = cxs_ld32(p + 60);
    if (m->compression > CXS_COMPRESSION_ZSTD)
        return cxs_diagf(d, CXS_E_UNSUPPORTED,
                         "%s: DATASET_META: compression code %u is unknown to this reader", path,
                         m->compression);
    return 0;
}

void cxs_part_meta_store(uint8_t *p, const cxs_part_meta *m) {
    memset(p, 0, CXS_PART_META_SIZE);
    cxs_st32(p, m->part);
    cxs_st32(p + 4, m->parts);
    cxs_st64(p + 8, m->listed);
    cxs_st64(p + 16, m->input_hash);
    cxs_st32(p + 24, m->first_shard);
    cxs_st32(p + 28, m->end_shard);
    cxs_st32(p + 32, m->total_shards);
    cxs_st32(p + 36, (uint32_t)m->level);
    cxs_st32(p + 40, m->chunk_rows);
    cxs_st32(p + 44, m->filter);
    cxs_st64(p + 48, m->min_length);
    cxs_st64(p + 56, m->max_length);
    memcpy(p + 64, m->version, strnlen(m->version, 15));
    cxs_st64(p + 80, m->first_item);
    cxs_st64(p + 88, m->end_item);
}

void cxs_part_meta_load(const uint8_t *p, cxs_part_meta *m) {
    m->part = cxs_ld32(p);
    m->parts = cxs_ld32(p + 4);
    m->listed = cxs_ld64(p + 8);
    m->input_hash = cxs_ld64(p + 16);
    m->first_shard = cxs_ld32(p + 24);
    m->end_shard = cxs_ld32(p + 28);
    m->total_shards = cxs_ld32(p + 32);
    m->level = (int32_t)cxs_ld32(p + 36);
    m->chunk_rows = cxs_ld32(p + 40);
    m->filter = cxs_ld32(p + 44);
    m->min_length = cxs_ld64(p + 48);
    m->max_length = cxs_ld64(p + 56);
    memcpy(m->version, p + 64, 16);
    m->version[16] = 0;
    m->first_item = cxs_ld64(p + 80);
    m->end_item = cxs_ld64(p + 88);
}

void cxs_seq_meta_store(uint8_t *p, const cxs_seq_meta *m) {
    memset(p, 0, CXS_SEQ_META_SIZE);
    cxs_st32(p, m->frame_labels);
    cxs_st64(p + 8, m->num_symbols);
    cxs_st64(p + 16, m->min_length);
    cxs_st64(p + 24, m->max_length);
}

int cxs_seq_meta_load(const uint8_t *p, uint64_t len, cxs_seq_meta *m, const char *path,
                      cxs_diag *d) {
    if (len != CXS_SEQ_META_SIZE)
        return cxs_diagf(d, CXS_E_CORRUPT, "%s: SEQ_META is %llu bytes, expected %u", path,
                         (unsigned long long)len, CXS_SEQ_META_SIZE);
    for (uint32_t i = 4; i < CXS_SEQ_META_SIZE; i++)
        if (p[i] && (i < 8 || i >= 32))
            return cxs_diagf(d, CXS_E_CORRUPT, "%s: SEQ_META: reserved byte %u is not zero", path,
                             i);
    m->frame_labels = cxs_ld32(p);
    m->num_symbols = cxs_ld64(p + 8);
    m->min_length = cxs_ld64(p + 16);
    m->max_length = cxs_ld64(p + 24);
    if (m->frame_labels > 1)
        return cxs_diagf(d, CXS_E_CORRUPT, "%s: SEQ_META: frame_labels is %u, expected 0 or 1",
                         path, m->frame_labels);
    return 0;
}

int cxs_blocksums_load(const uint8_t *p, uint64_t len, const cxs_container *c, cxs_blocksums *out,
                       const char *path, cxs_diag *d) {
    memset(out, 0, sizeof *out);
    if (len < CXS_BLOCKSUMS_HEAD)
        return cxs_diagf(d, CXS_E_CORRUPT, "%s: BLOCKSUMS is %llu bytes, shorter than its head",
                         path, (unsigned long long)len);
    const uint32_t n = cxs_ld32(p);
    if (n < 1 || n > CXS_BLOCKSUMS_MAX)
        return cxs_diagf(d, CXS_E_CORRUPT, "%s: BLOCKSUMS covers %u sections (1 to %u)", path, n,
                         CXS_BLOCKSUMS_MAX);
    if (cxs_ld32(p + 4))
        return cxs_diagf(d, CXS_E_CORRUPT, "%s: BLOCKSUMS: reserved field is not zero", path);
    if (len < CXS_BLOCKSUMS_HEAD + (uint64_t)CXS_BLOCKSUMS_ENTRY * n)
        return cxs_diagf(d, CXS_E_CORRUPT, "%s: BLOCKSUMS is %llu bytes, too short for %u entries",
                         path, (unsigned long long)len, n);
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *q = p + CXS_BLOCKSUMS_HEAD + (uint64_t)CXS_BLOCKSUMS_ENTRY * i;
        cxs_bsum_entry *e = &out->e[i];
        e->type = cxs_ld32(q);
        e->shift = cxs_ld32(q + 4);
        e->num_blocks = cxs_ld64(q + 8);
        e->first = cxs_ld64(q + 16);
        if (i > 0 && e->type <= out->e[i - 1].type)
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: BLOCKSUMS: entry %u (type %u) does not follow type %u: the "
                             "types must increase",
                             path, i, e->type, out->e[i - 1].type);
        const int never = e->type == CXS_SEC_BLOCKSUMS || e->type == CXS_SEC_SHARD_META;
        e->sec = never ? NULL : cxs_container_find(c, e->type);
        if (never)
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: BLOCKSUMS: entry %u covers %s, which block sums never cover",
                             path, i, cxs_section_name(e->type));
        if (!e->sec)
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: BLOCKSUMS: entry %u covers section type %u (%s), which the "
                             "shard does not hold",
                             path, i, e->type, cxs_section_name(e->type));
        if (e->shift < CXS_BLOCK_SHIFT_MIN || e->shift > CXS_BLOCK_SHIFT_MAX)
            return cxs_diagf(d, CXS_E_CORRUPT, "%s: BLOCKSUMS: entry %u (%s): block shift %u "
                             "(%u to %u)",
                             path, i, cxs_section_name(e->type), e->shift, CXS_BLOCK_SHIFT_MIN,
                             CXS_BLOCK_SHIFT_MAX);
        const uint64_t L = e->sec->length, want = (L >> e->shift) + ((L & ((1ull << e->shift) - 1)) != 0);
        if (e->num_blocks != want)
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: BLOCKSUMS: entry %u (%s): %llu blocks, the section's %llu bytes "
                             "make %llu",
                             path, i, cxs_section_name(e->type), (unsigned long long)e->num_blocks,
                             (unsigned long long)L, (unsigned long long)want);
        if (e->first != total)
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: BLOCKSUMS: entry %u (%s): first sum %llu, expected %llu", path, i,
                             cxs_section_name(e->type), (unsigned long long)e->first,
                             (unsigned long long)total);
        total += e->num_blocks; /* no overflow: each count is below 2^52 (length < 2^64, shift >= 12) */
    }
    const uint64_t head = CXS_BLOCKSUMS_HEAD + (uint64_t)CXS_BLOCKSUMS_ENTRY * n;
    if (total > (UINT64_MAX - head) / 8 || len != head + 8 * total)
        return cxs_diagf(d, CXS_E_CORRUPT,
                         "%s: BLOCKSUMS is %llu bytes; its %u entries and %llu sums take %llu",
                         path, (unsigned long long)len, n, (unsigned long long)total,
                         (unsigned long long)(head + 8 * total));
    out->n = n;
    out->sums = p + head;
    return 0;
}

const cxs_bsum_entry *cxs_blocksums_find(const cxs_blocksums *b, uint32_t type) {
    for (uint32_t i = 0; i < b->n; i++)
        if (b->e[i].type == type) return &b->e[i];
    return NULL;
}

int cxs_sequences_check(const uint8_t *p, uint64_t len, uint64_t U, uint32_t w, uint32_t V,
                        uint64_t *total, uint64_t *minlen, uint64_t *maxlen, const char *path,
                        cxs_diag *d) {
    if (U >= UINT64_MAX / 8 - 1 || len < 8 * (U + 1))
        return cxs_diagf(d, CXS_E_CORRUPT, "%s: SEQUENCES: %llu bytes cannot hold %llu offsets",
                         path, (unsigned long long)len, (unsigned long long)U + 1);
    const uint64_t room = (len - 8 * (U + 1)) / w, end = cxs_ld64(p + 8 * U);
    if (cxs_ld64(p) != 0)
        return cxs_diagf(d, CXS_E_CORRUPT, "%s: SEQUENCES: first offset is not 0", path);
    if (end > room || 8 * (U + 1) + end * w != len)
        return cxs_diagf(d, CXS_E_CORRUPT,
                         "%s: SEQUENCES is %llu bytes: %llu offsets and the %llu symbols of "
                         "%u byte%s its last offset counts take %s%llu",
                         path, (unsigned long long)len, (unsigned long long)U + 1,
                         (unsigned long long)end, w, w == 1 ? "" : "s",
                         end > (UINT64_MAX - 8 * (U + 1)) / w ? "more than " : "",
                         (unsigned long long)(end > (UINT64_MAX - 8 * (U + 1)) / w
                                                  ? UINT64_MAX
                                                  : 8 * (U + 1) + end * w));
    const uint8_t *sym = p + 8 * (U + 1);
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint64_t u = 0; u < U; u++) {
        uint64_t a = cxs_ld64(p + 8 * u), b = cxs_ld64(p + 8 * (u + 1));
        if (b <= a || b > end)
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: SEQUENCES: utterance %llu has offsets %llu..%llu (a sequence "
                             "holds at least one symbol, up to %llu)",
                             path, (unsigned long long)u, (unsigned long long)a,
                             (unsigned long long)b, (unsigned long long)end);
        for (uint64_t j = a; j < b; j++) {
            uint32_t l = w == 1 ? sym[j] : cxs_ld16(sym + 2 * j);
            if (l >= V)
                return cxs_diagf(d, CXS_E_CORRUPT,
                                 "%s: SEQUENCES: utterance %llu, symbol %llu is %u, the "
                                 "vocabulary has %u",
                                 path, (unsigned long long)u, (unsigned long long)(j - a), l, V);
        }
        if (b - a < lo) lo = b - a;
        if (b - a > hi) hi = b - a;
    }
    *total = end;
    *minlen = lo;
    *maxlen = hi;
    return 0;
}

void cxs_shard_entry_store(uint8_t *p, const cxs_shard_entry *e) {
    memset(p, 0, CXS_SHARD_ENTRY_SIZE);
    cxs_st64(p, e->file_size);
    cxs_st64(p + 8, e->header_checksum);
    cxs_st64(p + 16, e->num_utterances);
    cxs_st64(p + 24, e->num_frames);
    cxs_st64(p + 32, e->first_utterance);
    cxs_st64(p + 40, e->first_frame);
}

int cxs_shard_entry_load(const uint8_t *p, cxs_shard_entry *e) {
    e->file_size = cxs_ld64(p);
    e->header_checksum = cxs_ld64(p + 8);
    e->num_utterances = cxs_ld64(p + 16);
    e->num_frames = cxs_ld64(p + 24);
    e->first_utterance = cxs_ld64(p + 32);
    e->first_frame = cxs_ld64(p + 40);
    return reserved_zero(p, 48, 64) ? 0 : CXS_E_CORRUPT;
}

int cxs_strtab_check(const uint8_t *p, uint64_t len, uint64_t n, uint32_t maxlen,
                     const char *what, const char *path, cxs_diag *d) {
    if (n >= UINT64_MAX / 8 - 1 || len < 8 * (n + 1))
        return cxs_diagf(d, CXS_E_CORRUPT, "%s: %s: %llu bytes cannot hold %llu offsets", path,
                         what, (unsigned long long)len, (unsigned long long)n + 1);
    uint64_t bytes = len - 8 * (n + 1);
    if (cxs_ld64(p) != 0)
        return cxs_diagf(d, CXS_E_CORRUPT, "%s: %s: first offset is not 0", path, what);
    if (cxs_ld64(p + 8 * n) != bytes)
        return cxs_diagf(d, CXS_E_CORRUPT,
                         "%s: %s: last offset %llu, expected the string bytes' length %llu",
                         path, what, (unsigned long long)cxs_ld64(p + 8 * n),
                         (unsigned long long)bytes);
    const uint8_t *s = p + 8 * (n + 1);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t a = cxs_ld64(p + 8 * i), b = cxs_ld64(p + 8 * (i + 1));
        if (b <= a || b - a > maxlen || b > bytes)
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: %s: string %llu has offsets %llu..%llu (must be 1 to %u bytes "
                             "within %llu)",
                             path, what, (unsigned long long)i, (unsigned long long)a,
                             (unsigned long long)b, maxlen, (unsigned long long)bytes);
        for (uint64_t j = a; j < b; j++)
            if (s[j] < 0x20)
                return cxs_diagf(d, CXS_E_CORRUPT, "%s: %s: string %llu holds control byte 0x%02x",
                                 path, what, (unsigned long long)i, s[j]);
    }
    return 0;
}

typedef struct strref {
    const uint8_t *s;
    uint64_t len, i;
} strref;

static int strref_cmp(const void *a, const void *b) {
    const strref *x = a, *y = b;
    int r = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    if (r) return r;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

int cxs_strtab_distinct(const uint8_t *p, uint64_t n, const char *what, const char *path,
                        cxs_diag *d) {
    if (n < 2) return 0;
    if (n > SIZE_MAX / sizeof(strref)) return -ENOMEM;
    strref *r = malloc((size_t)n * sizeof *r);
    if (!r) return cxs_diagf(d, -ENOMEM, "%s: %s: out of memory", path, what);
    const uint8_t *text = p + 8 * (n + 1);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t a = cxs_ld64(p + 8 * i), b = cxs_ld64(p + 8 * (i + 1));
        r[i] = (strref){text + a, b - a, i};
    }
    qsort(r, (size_t)n, sizeof *r, strref_cmp);
    int rc = 0;
    for (uint64_t i = 1; i < n && !rc; i++)
        if (r[i].len == r[i - 1].len && memcmp(r[i].s, r[i - 1].s, r[i].len) == 0)
            rc = cxs_diagf(d, CXS_E_CORRUPT, "%s: %s: strings %llu and %llu are both '%.*s'", path,
                           what, (unsigned long long)r[i - 1].i, (unsigned long long)r[i].i,
                           (int)(r[i].len > 64 ? 64 : r[i].len), (const char *)r[i].s);
    free(r);
    return rc;
}

void cxs_chunks_head_store(uint8_t *p, const cxs_chunks_head *h) {
    memset(p, 0, CXS_CHUNKS_HEAD);
    cxs_st32(p, h->codec);
    cxs_st32(p + 4, h->filter);
    cxs_st64(p + 8, h->raw_length);
    cxs_st32(p + 16, h->chunk_rows);
    cxs_st32(p + 20, (uint32_t)h->level);
    cxs_st64(p + 24, h->num_chunks);
}

int cxs_chunks_load(const uint8_t *p, uint64_t len, uint64_t raw_length, uint64_t row_bytes,
                    uint64_t zlen, cxs_chunks_head *h, const char *path, cxs_diag *d) {
    if (len < CXS_CHUNKS_HEAD)
        return cxs_diagf(d, CXS_E_CORRUPT, "%s: CHUNKS is %llu bytes, shorter than its head",
                         path, (unsigned long long)len);
    h->codec = cxs_ld32(p);
    h->filter = cxs_ld32(p + 4);
    h->raw_length = cxs_ld64(p + 8);
    h->chunk_rows = cxs_ld32(p + 16);
    h->level = (int32_t)cxs_ld32(p + 20);
    h->num_chunks = cxs_ld64(p + 24);
    /* Spec section 4.6's order: codec and filter first (an unknown codec
     * may give the other fields, the reserved bytes included, a meaning of
     * its own), then raw_length, chunk_rows, num_chunks, the reserved bytes
     * and the entries. */
    if (h->codec != CXS_COMPRESSION_ZSTD)
        return cxs_diagf(d, CXS_E_UNSUPPORTED, "%s: CHUNKS: codec %u is unknown to this reader",
                         path, h->codec);
    if (h->filter > CXS_FILTER_SHUFFLE)
        return cxs_diagf(d, CXS_E_UNSUPPORTED, "%s: CHUNKS: filter %u is unknown to this reader",
                         path, h->filter);
    if (h->raw_length != raw_length)
        return cxs_diagf(d, CXS_E_CORRUPT,
                         "%s: CHUNKS: raw length %llu, the shard's features need %llu", path,
                         (unsigned long long)h->raw_length, (unsigned long long)raw_length);
    uint64_t rows = raw_length / row_bytes;
    if (h->chunk_rows == 0 || (uint64_t)h->chunk_rows * row_bytes > CXS_MAX_CHUNK_BYTES)
        return cxs_diagf(d, CXS_E_CORRUPT,
                         "%s: CHUNKS: %u rows per chunk (1 to %llu for rows of %llu bytes)", path,
                         h->chunk_rows, (unsigned long long)(CXS_MAX_CHUNK_BYTES / row_bytes),
                         (unsigned long long)row_bytes);
    uint64_t want = (rows + h->chunk_rows - 1) / h->chunk_rows;
    if (h->num_chunks != want || len != CXS_CHUNKS_HEAD + CXS_CHUNK_ENTRY * want)
        return cxs_diagf(d, CXS_E_CORRUPT,
                         "%s: CHUNKS: %llu chunks in %llu bytes, expected %llu chunks of %u rows",
                         path, (unsigned long long)h->num_chunks, (unsigned long long)len,
                         (unsigned long long)want, h->chunk_rows);
    if (!reserved_zero(p, 32, 64))
        return cxs_diagf(d, CXS_E_CORRUPT, "%s: CHUNKS: reserved bytes 32..63 not zero", path);
    uint64_t prev = 0;
    for (uint64_t c = 0; c < want; c++) {
        uint64_t end = cxs_ld64(p + CXS_CHUNKS_HEAD + CXS_CHUNK_ENTRY * c);
        if (end <= prev || end > zlen)
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: CHUNKS: chunk %llu ends at %llu after %llu (must increase, up "
                             "to the ZFEATURES length %llu)",
                             path, (unsigned long long)c, (unsigned long long)end,
                             (unsigned long long)prev, (unsigned long long)zlen);
        prev = end;
    }
    if (prev != zlen)
        return cxs_diagf(d, CXS_E_CORRUPT,
                         "%s: CHUNKS: chunks end at %llu, ZFEATURES is %llu bytes", path,
                         (unsigned long long)prev, (unsigned long long)zlen);
    return 0;
}
