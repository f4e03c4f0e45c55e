/* writer_internal.h - what the writer's files share: writer.c (utterances
 * into shards), writer_manifest.c (the manifest or part.cxs),
 * writer_merge.c (parts into one dataset) and writer_out.c (output
 * directory, atomic commit, fault injection, byte output). */
#ifndef CXS_WRITER_INTERNAL_H
#define CXS_WRITER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <xxhash.h>
#include <zstd.h>

#include "ctxshard_writer.h"
#include "cxs_format.h"
#include "cxs_xsum.h"
#include "zpool.h"

/* The fault-injection state (writer_out.c). */
typedef struct cxs_wfault {
    char action[8];
    char phase[32];
    long n;
    uint64_t enospc_after; /* 0: off */
    uint64_t written;
} cxs_wfault;

void cxs_wfault_init(cxs_wfault *f);
void cxs_wfault_point(cxs_wfault *f, const char *phase);

char *cxs_path_join(const char *a, const char *b);
int cxs_write_all(int fd, const void *buf, size_t n);
/* Remove a tree (no symlink following).  Best effort; 0 or -errno. */
int cxs_remove_tree(const char *path);
/* 0: OUT absent or an empty directory (removed), or a previous output
 * holding marker (*replace = 1); 1: something else; -errno. */
int cxs_out_state(const char *out, const char *marker, int *replace);
/* mkdir -p of OUT's parent.  *made gets the topmost directory created
 * (malloc'd; NULL when none was missing), so that a writer that fails can
 * take them away again; on failure *bad names the path that could not be
 * made (malloc'd).  0 or -errno (-ENOTDIR: *bad exists and is not a
 * directory); nothing made is left behind on failure. */
int cxs_make_parents(const char *out, char **made, char **bad);
/* Undo cxs_make_parents: remove OUT's parent and the directories above it
 * up to made, deepest first, each only when empty. */
void cxs_remove_parents(const char *out, const char *made);
/* ".OUT.tmp-HOST-PID-XXXXXX" beside OUT, or NULL (errno). */
char *cxs_make_tmpdir(const char *out);
/* Remove temporary directories of OUT whose process is gone; how many. */
uint32_t cxs_remove_stale(const char *out);
/* fsync tmp, rename it to OUT (exchanging with a previous output).  What
 * OUT holds is decided here, not when the writer began: OUT must be absent,
 * an empty directory or an output holding marker; anything else (OUT
 * replaced meanwhile by a directory of someone else's) is left alone and
 * the answer is -EEXIST.  The previous output is removed only once it is
 * seen to hold marker (after an exchange it is put back otherwise). */
int cxs_commit_output(cxs_wfault *f, const char *tmp, const char *out, const char *marker);

/* A growable byte buffer. */
typedef struct bytes {
    uint8_t *p;
    size_t n, cap;
} bytes;

int cxs_bytes_put(bytes *b, const void *src, size_t n);
int cxs_bytes_put64(bytes *b, uint64_t v);

/* A shard's write buffer: its bytes reach the file in pieces of this
 * size at offsets that are multiples of it, not in one write(2) per
 * utterance (a tiny utterance's few hundred bytes cost a system call and
 * a partial page's zeroing in the kernel otherwise). */
#define CXS_WBUF_SIZE (1u << 20)

/* One file being written. */
typedef struct swriter {
    int fd;
    char *path;
    uint32_t index;
    uint64_t U, F, first_u, first_f;
    uint64_t pos;     /* bytes written so far, those still in buf included */
    uint64_t flushed; /* bytes handed to the file: pos - bn */
    uint8_t *buf;     /* CXS_WBUF_SIZE bytes, or NULL: every write goes out */
    size_t bn;        /* bytes in buf */
    XXH3_state_t *fh;
    uint64_t feat_len; /* FEATURES bytes (decoded, when compressed) */
    uint64_t zlen;     /* compressed: ZFEATURES bytes written */
    bytes labels, cum, idoff, ids, chunks;
    bytes seqoff, seqsym; /* SEQUENCES: offsets (from 0) and symbols */
    bytes qheaders;       /* QHEADERS (format 1.4, coded dtypes): qh bytes an utterance */
    /* BLOCKSUMS (format 1.3): FEATURES's block sums, formed as it streams
     * out (bh: the block being filled, bfill bytes of it), then every
     * covered section's, assembled at the shard's end. */
    XXH3_state_t *bh;
    uint64_t bfill;
    bytes fsums;
} swriter;

struct cxs_writer {
    cxs_writer_opts o;
    cxs_writer_part part;
    int is_part;
    char *out, *tmpdir;
    char *made_parents; /* the topmost directory above OUT this writer made */
    int replace;
    cxs_wfault fault;
    uint32_t D;
    size_t esize;
    uint32_t lw;  /* label width of the dataset (DATASET_META, SEQUENCES) */
    uint32_t flw; /* width of LABELS: lw, or 0 with label sequences only */
    uint64_t qh; /* bytes of an utterance's QHEADERS entry; 0: not a coded dtype */
    uint8_t *zero_guard; /* G zero rows */
    size_t guard_bytes;
    swriter w;
    int open;
    bytes shard_table;
    uint32_t nshards;
    uint64_t U, F, minlen, maxlen;
    cxs_xsum *s1, *s2; /* per dimension, exact over all utterances */
    uint64_t *hist;
    uint32_t vocab_n;
    int64_t sos, eos;
    bytes vocab; /* the VOCAB section */
    bytes skipped;
    uint64_t nskipped;
    uint64_t bytes_out, feat_out;
    uint32_t stale_removed;
    /* Compression (format 1.1). */
    uint32_t minor;
    int block_sums; /* format 1.3: shards carry BLOCKSUMS */
    uint32_t chunk_rows;
    size_t chunk_bytes, cfill, zcap;
    uint8_t *cbuf, *zbuf, *scratch;
    ZSTD_CCtx *cc;
    cxs_zpool *zp; /* compression threads (opts.threads > 1), or NULL */
    /* One utterance being added. */
    uint8_t *conv, *lab;
    size_t conv_cap, lab_cap;
    double *sums; /* 4*D: sum, sumsq, scratch */
    size_t sums_cap;
    char *last_id; /* CXS_MAX_ID_LEN + 1 bytes, allocated once */
    size_t last_len;
    int have_last; /* an utterance was added: last_id holds its id */
    int broken; /* a system error: only abort remains */
    /* Label sequences (format 1.2): the one being added (sq_len symbols of
     * width lw), and the totals of SEQ_META. */
    uint8_t *sq;
    size_t sq_cap;
    uint64_t sq_len;
    uint64_t seq_total, seq_min, seq_max;
};

/* Write n bytes to w (counted against the injected ENOSPC budget), into
 * its buffer when it has one.  The disk's writeback of every 8 MiB is
 * started as they reach the file. */
int cxs_w_write(cxs_writer *k, swriter *w, const void *p, size_t n);
/* Hand what w's buffer holds to the file (before a pwrite of its header,
 * an fsync or a close).  0 or -errno. */
int cxs_w_flush(swriter *w);
/* Zero bytes up to the next page boundary. */
int cxs_w_pad(cxs_writer *k, swriter *w);
/* Write a section at the next page boundary; *s gets its table entry. */
int cxs_put_section(cxs_writer *k, swriter *w, cxs_section *s, uint32_t type, const void *p,
                    size_t n);

/* Allocate what depends on the feature width D (writer.c). */
int cxs_writer_set_width(cxs_writer *k, uint32_t D);
/* The SEQ_META section of a writer's state (also a part's, a merge's). */
void cxs_writer_seq_meta(const cxs_writer *k, uint8_t out[CXS_SEQ_META_SIZE]);
/* Write the manifest, or part.cxs for a part, into the temporary directory
 * from the writer's state (writer_manifest.c). */
int cxs_writer_write_index(cxs_writer *k);

#endif
