/* kaldi_import.h - what the Kaldi importer's files share: kaldi_list.c
 * (the listing: scp files, archives indexed header by header, the open
 * archives), kaldi_labels.c (text and alignment files, the vocabulary) and
 * kaldi_import.c (the shard plan of a split import and cxs_import_kaldi).
 * Internal to the library (hidden visibility). */
#ifndef CXS_KALDI_IMPORT_H
#define CXS_KALDI_IMPORT_H

#include <stddef.h>
#include <stdint.h>

#include "ctxshard_import.h"

/* ---- kaldi_list.c ---- */

#define MAX_OPEN 64 /* archives kept open at once */

typedef struct arkfile {
    char *path;
    int fd;          /* -1 while closed */
    uint64_t size;
    unsigned users;  /* readers between kaldi_files_acquire and _release */
} arkfile;

typedef struct files {
    arkfile *f;
    size_t n, cap;
    uint32_t *slot; /* hash table of indices + 1 */
    size_t nslot;
    size_t open_n, victim;
} files;

/* An scp entry's range, `path:offset[R0:R1]` or `[R0:R1,C0:C1]` (Kaldi's
 * ExtractObjectRange; ":" for all): first and last row and column,
 * inclusive; KALDI_ALL for "to the end". */
#define KALDI_ALL UINT64_MAX

typedef struct ent {
    char *key;
    uint32_t file;
    uint64_t off;
    uint64_t line;  /* scp line; 0 for an archive */
    uint64_t order; /* position in the listing */
    const char *range; /* the text between the brackets; NULL: the whole object */
    uint64_t r0, r1, c0, c1;
} ent;

typedef struct listing {
    ent *e;
    size_t n, cap;
    char *text; /* the scp, keys point into it */
    const char *name;
    int is_scp;
} listing;

int kaldi_is_space(int c);
/* n bytes at off (fewer at the end of the file: *got); 0 or -errno. */
int kaldi_pread_all(int fd, void *buf, size_t n, uint64_t off, size_t *got);
/* A whole text file, NUL-terminated (malloc'd into *out). */
int kaldi_slurp(const char *path, char **out, size_t *len, cxs_diag *d);
/* *p holds at least need elements of elem bytes (capacity *cap). */
int kaldi_grow(void **p, size_t *cap, size_t need, size_t elem);
int kaldi_key_cmp(const char *a, const char *b); /* byte order */
int kaldi_files_add(files *fs, const char *path, uint32_t *idx);
int kaldi_files_open(files *fs, uint32_t i, cxs_diag *d);
/* The same for readers on several threads (the caller serialises the
 * calls with a lock): file i opened if needed and held open (never chosen
 * to be closed) until kaldi_files_release. */
int kaldi_files_acquire(files *fs, uint32_t i, cxs_diag *d);
void kaldi_files_release(files *fs, uint32_t i);
/* The extent of the text-form object whose '[' is at off in file fd of
 * size bytes: *n bytes up to and with its ']' and line end.  0; CXS_E_TRUNCATED
 * when the file ends first (d's message says so); -errno (no message). */
int kaldi_text_extent(int fd, uint64_t size, uint64_t off, uint64_t *n, cxs_diag *d);
/* Apply e's range to an object of rows x cols: the rows and columns kept
 * (*r0 .. *r0 + *nr - 1, *c0 .. *c0 + *nc - 1).  Kaldi's rules
 * (ParseMatrixRangeSpecifier): a row range may end at row index rows + 2
 * at most, 3 past the last row (it is cut at the last, *cut set); anything
 * else outside the matrix is refused (CXS_E_INPUT, d's message says so). */
int kaldi_range_apply(const ent *e, uint64_t rows, uint64_t cols, uint64_t *r0, uint64_t *nr,
                      uint64_t *c0, uint64_t *nc, int *cut, cxs_diag *d);
void kaldi_files_free(files *fs);
int kaldi_ent_cmp(const void *a, const void *b);
/* A feats.scp's lines, or a bare archive's records, into L. */
int kaldi_read_scp(listing *L, files *fs, const char *path, cxs_diag *d);
int kaldi_read_ark(listing *L, files *fs, const char *path, cxs_diag *d);

/* ---- kaldi_spec.c ---- */

#define KALDI_SPEC_ARK 1
#define KALDI_SPEC_SCP 2

/* The input as Kaldi would name it: `[OPTS,]ark|scp[,OPTS]:PATH` (an
 * rspecifier), `ark,scp[,OPTS]:ARCHIVE,SCRIPT` (a wspecifier: the archive
 * is read), or a plain path. */
typedef struct kaldi_spec {
    int kind;         /* KALDI_SPEC_*, or 0: a plain path */
    int sorted;       /* the s option: the listing must be sorted */
    int both;         /* an ark,scp wspecifier (its archive is path) */
    const char *path; /* the file (into the argument, or own) */
    char *own;
} kaldi_spec;

/* Parse in (what: "features", "text" or "alignment", for the messages):
 * 0; CXS_E_INPUT naming an option Kaldi does not know or this importer
 * does not take, a pipe, standard input, a directory (with the feats.scp
 * or text file to give instead). */
int kaldi_spec_parse(const char *in, const char *what, kaldi_spec *s, cxs_diag *d);
void kaldi_spec_free(kaldi_spec *s);
/* An scp (1) or an archive (0): the specifier's kind, else by the name's
 * ending, else by the bytes; < 0 on failure (d). */
int kaldi_input_kind(const kaldi_spec *s, cxs_diag *d);

/* ---- kaldi_labels.c ---- */

typedef struct lab {
    char *key;
    char *toks; /* the rest of the line */
    uint64_t line;
    uint64_t order;
} lab;

typedef struct labels {
    lab *l;
    size_t n, cap;
    char *text;
    const char *path;
    const char *what; /* "text" or "alignment" */
} labels;

typedef struct vsym {
    const char *s;
    uint32_t label;
} vsym;

typedef struct vocab {
    char **sym;      /* by label */
    uint32_t n;
    vsym *by_name;   /* sorted by symbol */
    int ids;         /* integer tokens not spelt as a symbol are labels (not in a
                        vocabulary built from symbol tokens) */
    char *text;
} vocab;

/* A labels file (`utt tok tok ...` lines), sorted by id; duplicates refused. */
int kaldi_read_labels(labels *B, const char *path, cxs_diag *d);
/* The next white-space separated token of *s (NULL at the end), its length. */
char *kaldi_next_tok(char **s);
size_t kaldi_tok_len(const char *t);
/* A non-negative decimal integer below 2^31, or -1. */
long kaldi_tok_int(const char *t, size_t n);
/* A vocabulary file (symbol table or one symbol per line), or the
 * vocabulary of the labels themselves. */
int kaldi_vocab_read(vocab *v, const char *path, cxs_diag *d);
int kaldi_vocab_build(vocab *v, const labels *B, cxs_diag *d);
/* The caller's symbols (not copied; label = position). */
int kaldi_vocab_list(vocab *v, const char *const *sym, uint32_t n, cxs_diag *d);
/* The label of token t (n bytes), or -1. */
long kaldi_vocab_lookup(const vocab *v, const char *t, size_t n);
void kaldi_vocab_free(vocab *v, int owned);

#endif
