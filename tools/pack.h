/* pack.h - the commands that read raw datasets or write packed ones:
 * pack (pack.c), check (check.c), convert (convert.c), merge (merge.c). */
#ifndef CXS_TOOL_PACK_H
#define CXS_TOOL_PACK_H

#include <stdint.h>

#include "ctxshard_import.h"
#include "ctxshard_writer.h"

typedef struct pack_opts {
    uint32_t dtype;
    uint32_t guard;
    uint64_t shard_size;
    unsigned threads;
    int skip_bad;        /* --on-error skip */
    uint32_t normalize;
    const char *vocab_path;
    int quiet;
    uint32_t compress;   /* CXS_COMPRESSION_NONE or CXS_COMPRESSION_ZSTD */
    int level;           /* zstd level */
    uint64_t chunk_size; /* decoded bytes per chunk (whole rows, at most this) */
    int shuffle;         /* byte-shuffle filter before zstd */
    uint32_t part, parts; /* --part I/N: 1 <= part <= parts; parts 0: the whole */
    int shard_size_set;  /* --shard-size given (else parts choose theirs) */
    const char *sos, *eos; /* --sos, --eos: the transcript's first and last symbol */
    int transcripts;     /* --transcripts: CXS_TRANSCRIPTS_* (ctxshard_import.h) */
    int fill_nonfinite;  /* --fill-nonfinite: NaN/infinite values stored as 0 */
    int no_block_sums;   /* --block-sums off: no BLOCKSUMS (format 1.3) */
    int guard_set;       /* --guard given */
    int dtype_set;       /* --dtype given (convert: else IN's) */
    int keep_form;       /* convert: neither --compress nor --no-compress: IN's */
} pack_opts;

/* The command's defaults are the writer's. */
#define DEFAULT_LEVEL CXS_WRITER_DEFAULT_LEVEL
#define DEFAULT_CHUNK_SIZE CXS_WRITER_DEFAULT_CHUNK_SIZE
#define DEFAULT_GUARD CXS_WRITER_DEFAULT_GUARD
#define DEFAULT_SHARD_SIZE CXS_WRITER_DEFAULT_SHARD_SIZE
#define MIN_SHARD_SIZE CXS_WRITER_MIN_SHARD_SIZE

/* Returns an exit code; prints its own messages. */
int pack_run(const char *raw, const char *out, const pack_opts *o);
/* `ctxshard convert IN OUT` (convert.c): the same dataset in the other form (o gives the
 * compression, threads and quiet; the rest comes from IN). */
int convert_run(const char *in, const char *out, const pack_opts *o);
/* `ctxshard merge PART... OUT` (merge.c). */
int merge_run(char **parts, int nparts, const char *out, int move, int quiet);
/* `ctxshard check RAW` (check.c). */
int check_run(const char *raw, const pack_opts *o); /* vocab_path, sos, eos, threads, quiet */

/* The importer's options of pack and check: vocabulary, markers,
 * transcripts, fill; notes through import_note (user: an import_state
 * first in what it points to), warnings printed. */
void pack_npy_opts(const pack_opts *o, cxs_npy_opts *no, void *user);
/* Whether cxs_import_npy's rc and d say that RAW or RAW/mfcc is missing
 * or not a directory (-ENOENT, -ENOTDIR naming one of them; not OUT's
 * parent, not the vocabulary file). */
int raw_missing(const char *rawdir, int rc, const cxs_diag *d);
/* Print what cxs_writer_create said; the exit code. */
int create_failed(int rc, const cxs_diag *d);
/* Say that the writer removed what killed writers of OUT left. */
void say_stale(const cxs_writer *w, const char *out, int quiet);

#endif
