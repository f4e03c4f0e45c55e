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
} arkfile;

typedef struct files {
    arkfile *f;
    size_t n, cap;
    uint32_t *slot; /* hash table of indices + 1 */
    size_t nslot;
    size_t open_n, victim;
} files;

typedef struct ent {
    char *key;
    uint32_t file;
    uint64_t off;
    uint64_t line;  /* scp line; 0 for an archive */
    uint64_t order; /* position in the listing */
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
void kaldi_files_free(files *fs);
int kaldi_ent_cmp(const void *a, const void *b);
/* A feats.scp's lines, or a bare archive's records, into L. */
int kaldi_read_scp(listing *L, files *fs, const char *path, cxs_diag *d);
int kaldi_read_ark(listing *L, files *fs, const char *path, cxs_diag *d);

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
    int ids;         /* a symbol table: integer tokens are labels */
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
/* The label of token t (n bytes), or -1. */
long kaldi_vocab_lookup(const vocab *v, const char *t, size_t n);
void kaldi_vocab_free(vocab *v, int owned);

#endif
