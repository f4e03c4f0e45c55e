/* cxs_format.h - the on-disk structures of spec/format.md: constants, the
 * container (header + section table) shared by shards and manifests, and
 * bounds-checked parsers and builders.  Depends on libc and xxhash only. */
#ifndef CXS_FORMAT_H
#define CXS_FORMAT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxshard_base.h"

#define CXS_PAGE 4096u
#define CXS_HEADER_SIZE 64u
#define CXS_SECTION_ENTRY 32u
#define CXS_MAX_SECTIONS 64u

/* "\x89CXS\r\n\x1a\n" read as a little-endian u64. */
#define CXS_MAGIC 0x0A1A0A0D53584389ull
extern const uint8_t cxs_magic_bytes[8];

#define CXS_KIND_SHARD 1u
#define CXS_KIND_MANIFEST 2u
#define CXS_KIND_PART 3u /* format 1.1: the manifest of a partial dataset */

/* Section types. */
#define CXS_SEC_SHARD_META 1u
#define CXS_SEC_INDEX 2u
#define CXS_SEC_IDS 3u
#define CXS_SEC_FEATURES 4u
#define CXS_SEC_LABELS 5u
#define CXS_SEC_ZFEATURES 6u /* format 1.1: compressed FEATURES */
#define CXS_SEC_CHUNKS 7u    /* format 1.1: ZFEATURES' chunk table */
#define CXS_SEC_SEQUENCES 8u /* format 1.2: a label sequence per utterance */
#define CXS_SEC_BLOCKSUMS 9u /* format 1.3, optional: per-block checksums of sections */
#define CXS_SEC_QHEADERS 10u /* format 1.4: per-utterance headers of a coded dtype (q8, q16) */
#define CXS_SEC_DATASET_META 16u
#define CXS_SEC_SHARD_TABLE 17u
#define CXS_SEC_VOCAB 18u
#define CXS_SEC_STATS 19u
#define CXS_SEC_SKIPPED 20u
#define CXS_SEC_SEQ_META 21u /* format 1.2: the dataset has label sequences */
#define CXS_SEC_PART_META 32u /* format 1.1, part manifests only */
#define CXS_SEC_PART_SUMS 33u
#define CXS_PART_META_SIZE 96u

#define CXS_SECF_REQUIRED 1u

#define CXS_SHARD_META_SIZE 64u
#define CXS_DATASET_META_SIZE 64u
#define CXS_SHARD_ENTRY_SIZE 64u
#define CXS_STATS_HEAD 32u
#define CXS_CHUNKS_HEAD 64u
#define CXS_CHUNK_ENTRY 16u
#define CXS_SEQ_META_SIZE 64u
#define CXS_BLOCKSUMS_HEAD 8u   /* u32 count, u32 reserved */
#define CXS_BLOCKSUMS_ENTRY 24u /* u32 type, u32 shift, u64 num_blocks, u64 first */
#define CXS_BLOCKSUMS_MAX 16u   /* sections one BLOCKSUMS covers, at most */
#define CXS_BLOCK_SHIFT_MIN 12u /* blocks of 4 KiB .. */
#define CXS_BLOCK_SHIFT_MAX 30u /* .. 1 GiB */

/* Compression codes (DATASET_META offset 60, CHUNKS codec): the
 * CXS_COMPRESSION_* of ctxshard_base.h. */
#define CXS_FILTER_NONE 0u
#define CXS_FILTER_SHUFFLE 1u
/* A chunk decodes to at most this many bytes (bounds reader memory). */
#define CXS_MAX_CHUNK_BYTES (64u << 20)

#define CXS_MANIFEST_NAME "manifest.cxs"
#define CXS_PART_NAME "part.cxs" /* a part's manifest (format 1.1) */
#define CXS_SHARD_NAME_FMT "shard-%06u.cxs"

#define CXS_MAX_DIM 65536u
#define CXS_MAX_GUARD 4096u
#define CXS_MAX_VOCAB 65536u
#define CXS_MAX_ID_LEN 1024u
#define CXS_MAX_SYMBOL_LEN 255u

typedef struct cxs_section {
    uint32_t type;
    uint32_t flags;
    uint64_t offset;
    uint64_t length;
    uint64_t checksum;
} cxs_section;

typedef struct cxs_container {
    uint16_t major, minor;
    uint32_t kind;
    uint64_t file_size;
    uint32_t nsections;
    uint64_t header_checksum;
    cxs_section sections[CXS_MAX_SECTIONS];
} cxs_container;

typedef struct cxs_shard_meta {
    uint32_t index;
    uint32_t dim;
    uint64_t num_utterances;
    uint64_t num_frames;
    uint64_t first_utterance;
    uint64_t first_frame;
    uint32_t guard;
    uint16_t dtype;
    uint16_t label_width;
} cxs_shard_meta;

typedef struct cxs_dataset_meta {
    uint64_t num_utterances;
    uint64_t num_frames;
    uint32_t num_shards;
    uint32_t dim;
    uint32_t guard;
    uint16_t dtype;
    uint16_t label_width;
    uint32_t vocab_size;
    uint32_t normalize;
    uint64_t shard_size;
    uint64_t num_skipped;
    uint32_t on_error;
    uint32_t compression; /* CXS_COMPRESSION_*; format 1.1 */
} cxs_dataset_meta;

/* The head of a CHUNKS section (format 1.1). */
typedef struct cxs_chunks_head {
    uint32_t codec;      /* CXS_COMPRESSION_ZSTD */
    uint32_t filter;     /* CXS_FILTER_* */
    uint64_t raw_length; /* the bytes FEATURES would hold */
    uint32_t chunk_rows; /* rows per chunk; the last chunk may have fewer */
    int32_t level;       /* compression level used (informational) */
    uint64_t num_chunks;
} cxs_chunks_head;

typedef struct cxs_shard_entry {
    uint64_t file_size;
    uint64_t header_checksum;
    uint64_t num_utterances;
    uint64_t num_frames;
    uint64_t first_utterance;
    uint64_t first_frame;
} cxs_shard_entry;

/* SEQ_META (format 1.2): what the label sequences of a dataset (or of a
 * part) hold. */
typedef struct cxs_seq_meta {
    uint32_t frame_labels; /* 1: the shards hold LABELS too; 0: sequences only */
    uint64_t num_symbols;  /* symbols of every sequence together */
    uint64_t min_length;   /* shortest sequence (UINT64_MAX when none) */
    uint64_t max_length;   /* longest sequence */
} cxs_seq_meta;

/* printf into diag (NULL allowed), with its code and no place in a file;
 * returns code so callers can `return cxs_diagf(d, CODE, ...)`. */
int cxs_diagf(cxs_diag *d, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same for a failure at byte offset (or CXS_NO_OFFSET) of file. */
int cxs_diag_at(cxs_diag *d, int code, const char *file, uint64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* cxs_diag_at with a va_list (file NULL: none). */
int cxs_vdiag_at(cxs_diag *d, int code, const char *file, uint64_t offset, const char *fmt,
                 va_list ap);
/* All of src into d (NULL allowed), with `code`; returns code. */
int cxs_diag_copy(cxs_diag *d, int code, const cxs_diag *src);

size_t cxs_dtype_size(uint32_t dtype);
const char *cxs_dtype_name(uint32_t dtype);
const char *cxs_section_name(uint32_t type);

static inline uint64_t cxs_align_page(uint64_t x) {
    return (x + CXS_PAGE - 1) & ~(uint64_t)(CXS_PAGE - 1);
}

/* Bytes of an uncompressed shard file holding U utterances, F frames in
 * all and id_bytes bytes of ids, of D features of esize bytes, guard rows
 * G, labels of lw bytes (0: none) and qh bytes of QHEADERS per utterance
 * (0 but for a coded dtype): what the writer and the packer's shard plan
 * compare with the shard size, so both cut shards alike. */
uint64_t cxs_shard_file_size(uint64_t U, uint64_t F, uint64_t id_bytes, uint64_t D,
                             uint64_t esize, uint64_t G, uint64_t lw, uint64_t qh);

/* XXH3-64, seed 0. */
uint64_t cxs_hash(const void *p, size_t n);

/* Whether two checksums differ.  Fuzzing builds (the libFuzzer convention
 * FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION) accept any checksum, so that
 * mutated inputs reach the parsers behind the checks; never in a release. */
static inline int cxs_checksum_differs(uint64_t a, uint64_t b) {
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    (void)a;
    (void)b;
    return 0;
#else
    return a != b;
#endif
}

/*
 * Parse and check a header and section table in the first bytes of a file
 * of `size` bytes: magic, version, kind, size, section layout, header
 * checksum, required unknown sections.  `path` names the file in messages.
 */
int cxs_container_parse(const uint8_t *p, uint64_t size, uint32_t kind,
                        cxs_container *out, const char *path, cxs_diag *d);

/* The section of a type, or NULL. */
const cxs_section *cxs_container_find(const cxs_container *c, uint32_t type);

/*
 * Build the header page: writes CXS_PAGE bytes into page (header, table,
 * zero padding), computing the header checksum.  Sections must be sorted by
 * offset.  Returns the header checksum.
 */
uint64_t cxs_container_build(uint8_t page[CXS_PAGE], uint32_t kind, uint64_t file_size,
                             const cxs_section *s, uint32_t n);
/* The same, writing minor version `minor` (a writer writes the lowest minor
 * version whose features a file uses: 1 for compressed datasets, else 0). */
uint64_t cxs_container_build_v(uint8_t page[CXS_PAGE], uint32_t kind, uint32_t minor,
                               uint64_t file_size, const cxs_section *s, uint32_t n);

void cxs_shard_meta_store(uint8_t *p, const cxs_shard_meta *m);
int cxs_shard_meta_load(const uint8_t *p, uint64_t len, cxs_shard_meta *m,
                        const char *path, cxs_diag *d);
void cxs_dataset_meta_store(uint8_t *p, const cxs_dataset_meta *m);
int cxs_dataset_meta_load(const uint8_t *p, uint64_t len, cxs_dataset_meta *m,
                          const char *path, cxs_diag *d);
void cxs_shard_entry_store(uint8_t *p, const cxs_shard_entry *e);
int cxs_shard_entry_load(const uint8_t *p, cxs_shard_entry *e);
void cxs_chunks_head_store(uint8_t *p, const cxs_chunks_head *h);
/* Parse and check the head and the chunk table of a CHUNKS section of len
 * bytes against what the shard needs: raw_length FEATURES bytes of rows of
 * row_bytes, and a ZFEATURES section of zlen bytes. */
int cxs_chunks_load(const uint8_t *p, uint64_t len, uint64_t raw_length, uint64_t row_bytes,
                    uint64_t zlen, cxs_chunks_head *h, const char *path, cxs_diag *d);

void cxs_seq_meta_store(uint8_t *p, const cxs_seq_meta *m);

/* BLOCKSUMS (format 1.3, spec section 4.8): one covered section. */
typedef struct cxs_bsum_entry {
    uint32_t type, shift;    /* the section's type; blocks of 2^shift bytes */
    uint64_t num_blocks;     /* ceil(length / 2^shift) */
    uint64_t first;          /* its first sum's index among all the sums */
    const cxs_section *sec;  /* the covered section, in the container given */
} cxs_bsum_entry;

typedef struct cxs_blocksums {
    uint32_t n;              /* covered sections, 0 when the shard has no BLOCKSUMS */
    cxs_bsum_entry e[CXS_BLOCKSUMS_MAX]; /* by type, increasing */
    const uint8_t *sums;     /* the u64 LE sums, in entry order */
} cxs_blocksums;

/*
 * Parse and check the BLOCKSUMS section s of container c (p: its len
 * bytes) in spec section 4.8's order: its length holds the head, the count
 * (1 to 16), the reserved field zero, the entries (types strictly
 * increasing, each a section of c other than BLOCKSUMS and SHARD_META; shift 12 to 30;
 * num_blocks and first as computed), and the exact length.  0 or
 * CXS_E_CORRUPT naming path.  Does not check the sums themselves.
 */
int cxs_blocksums_load(const uint8_t *p, uint64_t len, const cxs_container *c, cxs_blocksums *out,
                       const char *path, cxs_diag *d);
/* The entry covering section `type`, or NULL. */
const cxs_bsum_entry *cxs_blocksums_find(const cxs_blocksums *b, uint32_t type);
/* Bytes [start, end) of block j of entry e, relative to the section. */
static inline void cxs_bsum_block(const cxs_bsum_entry *e, uint64_t j, uint64_t *start,
                                  uint64_t *end) {
    *start = j << e->shift;
    *end = (j + 1) << e->shift;
    if (*end > e->sec->length) *end = e->sec->length;
}
/* The stored sum of block j of entry e. */
static inline uint64_t cxs_bsum_of(const cxs_blocksums *b, const cxs_bsum_entry *e, uint64_t j) {
    const uint8_t *q = b->sums + 8 * (e->first + j);
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | q[i];
    return v;
}

/* PART_META (format 1.1, part manifests only; spec section 10):
 * CXS_PART_META_SIZE bytes. */
typedef struct cxs_part_meta {
    uint32_t part, parts;       /* this part's number (1-based) and of how many */
    uint64_t listed, input_hash; /* the raw directory's listing: count and hash */
    uint32_t first_shard, end_shard, total_shards;
    int32_t level;               /* zstd level; 0 uncompressed */
    uint32_t chunk_rows, filter; /* 0 uncompressed */
    uint64_t min_length, max_length; /* of this part's utterances */
    char version[17];            /* the writing ctxshard's, NUL-terminated */
    uint64_t first_item, end_item; /* this part's range of the listing */
} cxs_part_meta;
void cxs_part_meta_store(uint8_t *p, const cxs_part_meta *m);
/* p holds CXS_PART_META_SIZE bytes (the caller checks the length). */
void cxs_part_meta_load(const uint8_t *p, cxs_part_meta *m);
/* Length, reserved bytes and frame_labels; CXS_E_CORRUPT naming path. */
int cxs_seq_meta_load(const uint8_t *p, uint64_t len, cxs_seq_meta *m, const char *path,
                      cxs_diag *d);
/*
 * A SEQUENCES section of len bytes for U utterances with symbols of w bytes
 * (1, or 2 little-endian): U+1 u64 offsets (in symbols) from 0, strictly
 * increasing (every sequence at least one symbol), then off[U] symbols,
 * each below V.  Fills the total and the shortest and longest sequence.
 * 0 or CXS_E_CORRUPT (diag names path and the utterance).
 */
int cxs_sequences_check(const uint8_t *p, uint64_t len, uint64_t U, uint32_t w, uint32_t V,
                        uint64_t *total, uint64_t *minlen, uint64_t *maxlen, const char *path,
                        cxs_diag *d);

/*
 * A string table: (n+1) u64 offsets relative to the byte after the offset
 * array, non-decreasing from 0, then the bytes.  Checks that it is exactly
 * `len` bytes, and every string is 1..maxlen bytes with no byte below 0x20.
 */
int cxs_strtab_check(const uint8_t *p, uint64_t len, uint64_t n, uint32_t maxlen,
                     const char *what, const char *path, cxs_diag *d);
/* A string table that passed cxs_strtab_check holds no string twice:
 * 0, CXS_E_CORRUPT naming both positions, or -ENOMEM.  O(n log n). */
int cxs_strtab_distinct(const uint8_t *p, uint64_t n, const char *what, const char *path,
                        cxs_diag *d);
static inline uint64_t cxs_strtab_size(uint64_t n, uint64_t bytes) {
    return 8 * (n + 1) + bytes;
}

#endif
