/* kaldi_labels.c - the labels of a Kaldi import (kaldi_import.h): text
 * and alignment files (`utt tok tok ...`, one utterance a line) and the
 * vocabulary, read from a file (a Kaldi symbol table or one symbol per
 * line) or built from the labels. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cxs_format.h"
#include "kaldi.h"
#include "kaldi_import.h"

/* ---- labels ------------------------------------------------------------- */

static int lab_cmp(const void *a, const void *b) {
    const lab *x = a, *y = b;
    int c = kaldi_key_cmp(x->key, y->key);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}

int kaldi_read_labels(labels *B, const char *path, cxs_diag *d) {
    size_t len;
    int rc = kaldi_slurp(path, &B->text, &len, d);
    if (rc) return rc;
    B->path = path;
    char *s = B->text, *end = s + len;
    for (uint64_t line = 1; s < end; line++) {
        char *nl = memchr(s, '\n', (size_t)(end - s)), *e = nl ? nl : end;
        char *next = nl ? nl + 1 : end;
        while (e > s && kaldi_is_space((unsigned char)e[-1])) e--;
        *e = 0;
        while (s < e && kaldi_is_space((unsigned char)*s)) s++;
        if (s < e) {
            char *k = s;
            while (s < e && !kaldi_is_space((unsigned char)*s)) s++;
            if (s < e) *s++ = 0;
            void *p = B->l;
            if (kaldi_grow(&p, &B->cap, B->n + 1, sizeof *B->l)) return cxs_diagf(d, -ENOMEM, "out of memory");
            B->l = p;
            B->l[B->n] = (lab){k, s, line, B->n};
            B->n++;
        }
        s = next;
    }
    qsort(B->l, B->n, sizeof *B->l, lab_cmp);
    for (size_t i = 1; i < B->n; i++)
        if (!kaldi_key_cmp(B->l[i - 1].key, B->l[i].key))
            return cxs_diagf(d, CXS_E_INPUT, "%s: utterance %s twice, lines %llu and %llu", path,
                             B->l[i].key, (unsigned long long)B->l[i - 1].line,
                             (unsigned long long)B->l[i].line);
    return 0;
}

/* The next token of *s (white space separated), or NULL. */
char *kaldi_next_tok(char **s) {
    char *p = *s;
    while (*p && kaldi_is_space((unsigned char)*p)) p++;
    if (!*p) {
        *s = p;
        return NULL;
    }
    char *t = p;
    while (*p && !kaldi_is_space((unsigned char)*p)) p++;
    *s = p;
    return t;
}

size_t kaldi_tok_len(const char *t) {
    size_t n = 0;
    while (t[n] && !kaldi_is_space((unsigned char)t[n])) n++;
    return n;
}

/* A non-negative decimal integer below 2^31, or -1. */
long kaldi_tok_int(const char *t, size_t n) {
    if (n == 0 || n > 10) return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] < '0' || t[i] > '9') return -1;
        v = v * 10 + (t[i] - '0');
    }
    return v <= 0x7fffffffL ? v : -1;
}

/* ---- the vocabulary ----------------------------------------------------- */

static int vsym_cmp(const void *a, const void *b) {
    return strcmp(((const vsym *)a)->s, ((const vsym *)b)->s);
}

static int vocab_index(vocab *v, const char *path, cxs_diag *d) {
    if (v->n > CXS_MAX_VOCAB)
        return cxs_diagf(d, CXS_E_INPUT, "%s: %u symbols; a dataset holds at most %u (use a "
                         "smaller unit: phones, characters or word pieces)", path, v->n,
                         CXS_MAX_VOCAB);
    if (!(v->by_name = malloc((v->n + 1) * sizeof *v->by_name)))
        return cxs_diagf(d, -ENOMEM, "out of memory");
    for (uint32_t i = 0; i < v->n; i++) v->by_name[i] = (vsym){v->sym[i], i};
    qsort(v->by_name, v->n, sizeof *v->by_name, vsym_cmp);
    for (uint32_t i = 1; i < v->n; i++)
        if (!strcmp(v->by_name[i - 1].s, v->by_name[i].s))
            return cxs_diagf(d, CXS_E_INPUT, "%s: symbol '%s' twice", path, v->by_name[i].s);
    return 0;
}

/* The label of token t (n bytes), or -1. */
long kaldi_vocab_lookup(const vocab *v, const char *t, size_t n) {
    size_t lo = 0, hi = v->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const char *s = v->by_name[mid].s;
        int c = strncmp(s, t, n);
        if (c == 0) c = s[n] ? 1 : 0;
        if (c == 0) return v->by_name[mid].label;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    if (v->ids) {
        long x = kaldi_tok_int(t, n);
        if (x >= 0 && x < (long)v->n) return x;
    }
    return -1;
}

/* A vocabulary file: a Kaldi symbol table (every line `symbol id`) or one
 * symbol per line. */
int kaldi_vocab_read(vocab *v, const char *path, cxs_diag *d) {
    size_t len;
    int rc = kaldi_slurp(path, &v->text, &len, d);
    if (rc) return rc;
    char *s = v->text, *end = s + len;
    size_t nl_count = 0, pairs = 0, cap = 0;
    char **sym = NULL;
    long *id = NULL;
    size_t idcap = 0;
    for (uint64_t line = 1; s < end; line++) {
        char *nl = memchr(s, '\n', (size_t)(end - s)), *e = nl ? nl : end;
        char *next = nl ? nl + 1 : end;
        if (e > s && e[-1] == '\r') e--;
        *e = 0;
        if (s == e) {
            if (next == end) break;
            free(sym);
            free(id);
            return cxs_diagf(d, CXS_E_INPUT, "%s: line %llu is empty (one symbol per line, or "
                             "`symbol id` lines)", path, (unsigned long long)line);
        }
        void *p = sym;
        size_t c2 = cap;
        if (kaldi_grow(&p, &c2, nl_count + 1, sizeof *sym)) goto oom;
        sym = p;
        p = id;
        if (kaldi_grow(&p, &idcap, nl_count + 1, sizeof *id)) goto oom;
        id = p;
        cap = c2;
        sym[nl_count] = s;
        id[nl_count] = -1;
        /* `symbol id`: two fields, the second an integer */
        char *sp = s;
        while (*sp && !kaldi_is_space((unsigned char)*sp)) sp++;
        if (*sp) {
            char *q = sp;
            while (*q && kaldi_is_space((unsigned char)*q)) q++;
            long x = kaldi_tok_int(q, kaldi_tok_len(q));
            if (x >= 0 && !q[kaldi_tok_len(q)]) {
                id[nl_count] = x;
                pairs++;
            }
        }
        nl_count++;
        s = next;
    }
    if (nl_count == 0) {
        free(sym);
        free(id);
        return cxs_diagf(d, CXS_E_INPUT, "%s: empty vocabulary", path);
    }
    if (pairs == nl_count) {
        /* a symbol table: the label is the id, ids 0..n-1 */
        v->ids = 1;
        v->n = (uint32_t)nl_count;
        if (!(v->sym = calloc(nl_count, sizeof *v->sym))) goto oom;
        for (size_t i = 0; i < nl_count; i++) {
            char *sp = sym[i];
            while (*sp && !kaldi_is_space((unsigned char)*sp)) sp++;
            *sp = 0;
            if (id[i] < (long)nl_count && v->sym[id[i]]) {
                free(sym);
                free(id);
                return cxs_diagf(d, CXS_E_INPUT, "%s: symbol table line %zu: id %ld twice (ids "
                                 "must be 0..%zu, each once)", path, i + 1, id[i],
                                 nl_count - 1);
            }
            if (id[i] < (long)nl_count) v->sym[id[i]] = sym[i];
        }
        /* Ids are labels (an alignment's integers are phone ids): a table
         * whose ids leave a gap has no symbol for that label, and mapping
         * its ids onto 0..n-1 would give the integers another meaning.
         * Refused, naming the first id without a line. */
        for (size_t k = 0; k < nl_count; k++)
            if (!v->sym[k]) {
                size_t line = 0;
                for (size_t i = 0; i < nl_count && !line; i++)
                    if (id[i] >= (long)nl_count) line = i + 1;
                long big = line ? id[line - 1] : -1;
                free(sym);
                free(id);
                return cxs_diagf(d, CXS_E_INPUT, "%s: symbol table of %zu lines without id %zu "
                                 "(line %zu has id %ld): ids are the labels and must be "
                                 "0..%zu, each once; give the whole table as Kaldi wrote it "
                                 "(phones.txt and words.txt start with `<eps> 0`)", path,
                                 nl_count, k, line, big, nl_count - 1);
            }
        free(sym);
    } else {
        /* one symbol a line, label = line - 1: an integer token is a
         * label here too (when no symbol is spelt so), so that the file
         * `ctxshard vocab` prints of a dataset imported with phones.txt
         * takes the next split's ali-to-phones integers alike */
        v->ids = 1;
        v->sym = sym;
        v->n = (uint32_t)nl_count;
    }
    free(id);
    return vocab_index(v, path, d);
oom:
    free(sym);
    free(id);
    return cxs_diagf(d, -ENOMEM, "out of memory");
}

/* A vocabulary given as a list of symbols (label = position; an integer
 * token not spelt as a symbol is a label). */
int kaldi_vocab_list(vocab *v, const char *const *sym, uint32_t n, cxs_diag *d) {
    if (!(v->sym = calloc(n, sizeof *v->sym))) return cxs_diagf(d, -ENOMEM, "out of memory");
    v->n = n;
    v->ids = 1; /* as for a file of one symbol a line */
    for (uint32_t i = 0; i < n; i++) {
        if (!sym[i] || !sym[i][0] || strpbrk(sym[i], " \t\n\r\v\f"))
            return cxs_diagf(d, CXS_E_INVALID, "vocabulary symbol %u is empty or holds white "
                             "space (a Kaldi token never does)", i);
        v->sym[i] = (char *)sym[i];
    }
    return vocab_index(v, "the vocabulary list", d);
}

static int str_ptr_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The vocabulary of the labels themselves: "0".."max" when every token is
 * an integer, else the distinct tokens in byte order. */
int kaldi_vocab_build(vocab *v, const labels *B, cxs_diag *d) {
    size_t n = 0, cap = 0;
    char **all = NULL;
    long max = -1;
    int ints = 1;
    for (size_t i = 0; i < B->n; i++) {
        char *s = B->l[i].toks, *t;
        while ((t = kaldi_next_tok(&s))) {
            size_t l = kaldi_tok_len(t);
            long x = kaldi_tok_int(t, l);
            if (x < 0) ints = 0;
            else if (x > max) max = x;
            void *p = all;
            if (kaldi_grow(&p, &cap, n + 1, sizeof *all)) {
                free(all);
                return cxs_diagf(d, -ENOMEM, "out of memory");
            }
            all = p;
            all[n++] = t;
        }
    }
    /* tokens end at white space: copy them out NUL-terminated */
    if (ints && n) {
        if (max >= (long)CXS_MAX_VOCAB) {
            free(all);
            return cxs_diagf(d, CXS_E_INPUT, "%s: integer label %ld; a dataset holds at most %u "
                             "symbols", B->path, max, CXS_MAX_VOCAB);
        }
        v->n = (uint32_t)max + 1;
        v->ids = 1;
        if (!(v->sym = calloc(v->n, sizeof *v->sym))) goto oom;
        for (uint32_t i = 0; i < v->n; i++) {
            char num[16];
            snprintf(num, sizeof num, "%u", i);
            if (!(v->sym[i] = strdup(num))) goto oom;
        }
    } else {
        for (size_t i = 0; i < n; i++)
            if (!(all[i] = strndup(all[i], kaldi_tok_len(all[i])))) {
                for (size_t j = 0; j < i; j++) free(all[j]);
                goto oom;
            }
        qsort(all, n, sizeof *all, str_ptr_cmp);
        size_t u = 0;
        for (size_t i = 0; i < n; i++) {
            if (u && !strcmp(all[u - 1], all[i])) free(all[i]);
            else all[u++] = all[i];
        }
        if (u > CXS_MAX_VOCAB) {
            for (size_t i = 0; i < u; i++) free(all[i]);
            free(all);
            return cxs_diagf(d, CXS_E_INPUT, "%s: %zu distinct symbols; a dataset holds at most "
                             "%u (use a smaller unit: phones, characters or word pieces)",
                             B->path, u, CXS_MAX_VOCAB);
        }
        v->sym = all;
        v->n = (uint32_t)u;
        all = NULL;
    }
    free(all);
    v->text = NULL;
    return vocab_index(v, B->path, d);
oom:
    free(all);
    return cxs_diagf(d, -ENOMEM, "out of memory");
}

void kaldi_vocab_free(vocab *v, int owned) {
    if (owned && v->sym)
        for (uint32_t i = 0; i < v->n; i++) free(v->sym[i]);
    free(v->sym);
    free(v->by_name);
    free(v->text);
    memset(v, 0, sizeof *v);
}

