/* kaldi_import.c - cxs_import_kaldi (ctxshard_import.h): a feats.scp or a
 * bare archive, with labels from a Kaldi text file or per-frame
 * alignments, through the library's writer; the listing is read by
 * kaldi_list.c, the labels and the vocabulary by kaldi_labels.c.
 *
 * The order of work: the listing (the scp's lines, or an index of the
 * archive read header by header), sorted by id; the labels file, sorted,
 * matched against the listing before anything is written (missing and
 * extra labels are named up front); the vocabulary; then one utterance at
 * a time: read its object with pread, decode it (kaldi.c), hand it to the
 * writer.  Kaldi's own reader is the reference for what is accepted
 * (src/util/kaldi-table-inl.h: keys end at a space; src/util/kaldi-io.cc:
 * `path:offset` rxfilenames). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ctxshard_import.h"
#include "abi.h"
#include "cxs_convert.h"
#include "cxs_features.h"
#include "cxs_format.h"
#include "cxs_le.h"
#include "cxs_qcodec.h"
#include "kaldi.h"
#include "kaldi_import.h"
#include "import_ring.h"

/* ---- the import --------------------------------------------------------- */

typedef struct importer {
    const cxs_kaldi_opts *ko;
    cxs_writer *w;
    int skip;
    char msg[sizeof(((cxs_diag *)0)->message)];
} importer;

/* One utterance loaded (read, decoded, its labels looked up) by a reader
 * thread, for the writer's thread to take in listing order. */
typedef struct kslot {
    int status;      /* 0 loaded; CXS_E_INPUT a bad utterance; < 0 a system failure */
    cxs_diag d;      /* why, when status != 0 */
    char note[256];  /* a range cut at the matrix's end, as Kaldi cuts it ("" none) */
    uint8_t *obj;
    size_t obj_cap;
    void *vals, *sub; /* the decoded object, the range taken from it */
    size_t vals_cap, sub_cap;
    uint8_t *conv;    /* the features in the stored type, when converted here */
    size_t conv_cap;
    double *scratch;  /* the conversion's sums (the writer makes its own) */
    size_t scratch_cap;
    int converted;   /* conv holds the stored form (coded: header, then codes) */
    int kept;        /* a coded dtype: the object's own codes, kept */
    int32_t *labv;
    size_t lab_cap, nlab;
    uint64_t rows, cols, size;
    uint32_t kind;
    const lab *lb;
} kslot;

/* What the reader threads share: read-only while the ring runs, but for
 * the archives (fs), opened and held under mu. */
typedef struct kload {
    listing *L;
    files *fs;
    const labels *B;
    const vocab *V;
    const size_t *lab_of; /* the label line of each listed utterance + 1; 0 none */
    const cxs_kaldi_opts *ko;
    const char *path, *lpath, *lwhat;
    uint32_t dtype, normalize; /* the writer's */
    kslot *slots;
    pthread_mutex_t mu;
} kload;

static void where_of(const kload *K, const ent *e, char *where, size_t n) {
    if (e->line)
        snprintf(where, n, "%s line %llu: %s: %s offset %llu%s%s%s", K->path,
                 (unsigned long long)e->line, e->key, K->fs->f[e->file].path,
                 (unsigned long long)e->off, e->range ? " [" : "", e->range ? e->range : "",
                 e->range ? "]" : "");
    else
        snprintf(where, n, "%s: offset %llu: utterance %s", K->path, (unsigned long long)e->off,
                 e->key);
}

/* Read, parse and decode listed utterance i into slot s (a reader
 * thread's work: everything but the writer). */
static void load_one(void *user, size_t i, size_t si) {
    kload *K = user;
    kslot *s = &K->slots[si];
    const ent *e = &K->L->e[i];
    s->status = 0;
    s->note[0] = 0;
    s->nlab = 0;
    s->converted = 0;
    s->kept = 0;
    s->lb = K->lab_of && K->lab_of[i] ? &K->B->l[K->lab_of[i] - 1] : NULL;
    char where[700];
    where_of(K, e, where, sizeof where);
    pthread_mutex_lock(&K->mu);
    int rc = kaldi_files_acquire(K->fs, e->file, &s->d);
    const arkfile a = K->fs->f[e->file];
    pthread_mutex_unlock(&K->mu);
    if (rc) {
        s->status = rc;
        return;
    }
    kaldi_hdr h;
    cxs_diag why; /* a reason, before it is said where */
    uint8_t head[KALDI_MAX_HEAD];
    size_t got = 0;
    int prc = 0;
    if (e->off > a.size) {
        s->status = cxs_diagf(&s->d, CXS_E_INPUT, "%s: the offset is past the end of the file "
                              "(%llu bytes)", where, (unsigned long long)a.size);
        goto out;
    }
    if ((rc = kaldi_pread_all(a.fd, head, sizeof head, e->off, &got))) {
        s->status = cxs_diagf(&s->d, rc, "%s: %s", a.path, strerror(-rc));
        goto out;
    }
    prc = kaldi_parse(head, got, &h, &why);
    if (!prc && h.kind == KALDI_TXT) {
        uint64_t tn = 0;
        rc = kaldi_text_extent(a.fd, a.size, e->off + h.head, &tn, &why);
        if (rc && rc != CXS_E_TRUNCATED) {
            s->status = cxs_diagf(&s->d, rc, "%s: %s", a.path, strerror(-rc));
            goto out;
        }
        prc = rc;
        h.size = h.head + tn;
    }
    if (!prc && e->off + h.size > a.size) {
        prc = cxs_diagf(&why, CXS_E_TRUNCATED,
                        "%s %llux%llu needs %llu bytes, the file ends %llu "
                        "bytes after its start (truncated archive)",
                        kaldi_kind_name(h.kind), (unsigned long long)h.rows,
                        (unsigned long long)h.cols, (unsigned long long)h.size,
                        (unsigned long long)(a.size - e->off));
    } else if (prc == CXS_E_TRUNCATED && e->line) {
        size_t l = strlen(why.message);
        snprintf(why.message + l, sizeof why.message - l,
                 " (truncated archive, or a wrong offset)");
    } else if (prc == CXS_E_CORRUPT && e->line) {
        size_t l = strlen(why.message);
        snprintf(why.message + l, sizeof why.message - l, " (a wrong offset?)");
    }
    if (!prc && (h.size > SIZE_MAX / 2 ||
                 kaldi_grow((void **)&s->obj, &s->obj_cap, (size_t)h.size, 1))) {
        s->status = cxs_diagf(&s->d, -ENOMEM, "%s: out of memory (%llu bytes)", where,
                              (unsigned long long)h.size);
        goto out;
    }
    if (!prc) {
        if ((rc = kaldi_pread_all(a.fd, s->obj, (size_t)h.size, e->off, &got))) {
            s->status = cxs_diagf(&s->d, rc, "%s: %s", a.path, strerror(-rc));
            goto out;
        }
        if (got != h.size) {
            s->status = cxs_diagf(&s->d, CXS_E_INPUT, "%s: the file shrank while being read",
                                  where);
            goto out;
        }
        if (h.kind == KALDI_TXT) {
            prc = kaldi_text_parse(s->obj + h.head, (size_t)(h.size - h.head), &h.rows, &h.cols,
                                   NULL, &why);
            if (!prc && h.cols == 0) h.rows = 0;
        }
    }
    if (!prc && (h.rows == 0 || h.cols == 0)) {
        prc = cxs_diagf(&why, CXS_E_INPUT, "an empty %s (%llux%llu)", kaldi_kind_name(h.kind),
                        (unsigned long long)h.rows, (unsigned long long)h.cols);
    }
    uint64_t r0 = 0, nr = h.rows, c0 = 0, nc = h.cols;
    int cut = 0;
    if (!prc && kaldi_range_apply(e, h.rows, h.cols, &r0, &nr, &c0, &nc, &cut, &why))
        prc = CXS_E_INPUT;
    if (!prc && nc > CXS_MAX_DIM) {
        prc = cxs_diagf(&why, CXS_E_INPUT, "%s with %llu columns (at most %u features per frame)",
                        kaldi_kind_name(h.kind), (unsigned long long)nc, CXS_MAX_DIM);
    }
    if (prc) {
        s->status = cxs_diagf(&s->d, CXS_E_INPUT, "%s: %s", where, why.message);
        goto out;
    }
    if (cut)
        snprintf(s->note, sizeof s->note, "%.180s: rows %llu:%llu end past the matrix's %llu "
                 "rows: cut there, as Kaldi does", e->key, (unsigned long long)e->r0,
                 (unsigned long long)e->r1, (unsigned long long)h.rows);
    s->rows = nr;
    s->cols = nc;
    s->kind = h.kind;
    s->size = h.size;
    /* Into a coded dtype, an object of its own kind (CM into q8, CM2 into
     * q16; not normalised) keeps its codes and headers: no second quantization, the
     * values Kaldi reads.  A range too: a code's value depends only on
     * its column's header (q8) or the matrix's min and range (q16). */
    if (K->normalize == CXS_NORM_NONE && ((K->dtype == CXS_DTYPE_Q8 && h.kind == KALDI_CM) ||
                                          (K->dtype == CXS_DTYPE_Q16 && h.kind == KALDI_CM2))) {
        const uint64_t H = cxs_q_header_size(K->dtype, nc), E = cxs_dtype_size(K->dtype);
        if (kaldi_grow((void **)&s->conv, &s->conv_cap, (size_t)(H + nr * nc * E), 1)) {
            s->status = cxs_diagf(&s->d, -ENOMEM, "%s: out of memory", where);
            goto out;
        }
        const uint8_t *body = s->obj + h.head - 16; /* Kaldi's header: min, range, rows, cols */
        if (K->dtype == CXS_DTYPE_Q8) {
            cxs_q8_from_kaldi_cm(body, h.rows, h.cols, r0, nr, c0, nc, s->conv, s->conv + H);
        } else {
            memcpy(s->conv, body, H);
            for (uint64_t r = 0; r < nr; r++)
                memcpy(s->conv + H + 2 * r * nc, s->obj + h.head + 2 * ((r0 + r) * h.cols + c0),
                       (size_t)(2 * nc));
        }
        s->converted = s->kept = 1;
        goto labels;
    }
    const size_t es = kaldi_is_double(&h) ? 8 : 4;
    if (kaldi_grow(&s->vals, &s->vals_cap, (size_t)(h.rows * h.cols), 8) ||
        (e->range && kaldi_grow(&s->sub, &s->sub_cap, (size_t)(nr * nc), 8))) {
        s->status = cxs_diagf(&s->d, -ENOMEM, "%s: out of memory", where);
        goto out;
    }
    if (h.kind == KALDI_TXT)
        kaldi_text_parse(s->obj + h.head, (size_t)(h.size - h.head), &h.rows, &h.cols, s->vals,
                         &why);
    else
        kaldi_decode(&h, s->obj, s->vals);
    if (e->range) {
        /* Kaldi decodes a range element by element with the same
         * expressions (CompressedMatrix::CopyToMat with offsets): the
         * block of the whole decoding, the same floats */
        for (uint64_t r = 0; r < nr; r++)
            memcpy((uint8_t *)s->sub + r * nc * es,
                   (const uint8_t *)s->vals + ((r0 + r) * h.cols + c0) * es, (size_t)(nc * es));
    }
    /* Into the stored float16 or bfloat16 here, on this reader thread:
     * the conversion the writer would do (cxs_features_convert, the same
     * bytes), which then only copies and sums them.  A value the
     * conversion refuses is left to the writer, which names it. */
    if (K->dtype != CXS_DTYPE_F32 && !cxs_dtype_coded(K->dtype) && K->normalize == CXS_NORM_NONE &&
        !kaldi_grow((void **)&s->conv, &s->conv_cap, (size_t)(nr * nc), 2)) {
        const void *x = e->range ? s->sub : s->vals;
        if (es == 4) {
            /* the float's bits rounded as cxs_features_convert rounds them
             * (format/cxs_convert.h: the same for every finite float) */
            const uint32_t *b = x;
            uint16_t *o = (uint16_t *)(void *)s->conv;
            uint32_t special = 0;
            const uint64_t n = nr * nc;
            if (K->dtype == CXS_DTYPE_F16)
                for (uint64_t k = 0; k < n; k++) {
                    o[k] = cxs_f32_bits_to_f16(b[k]);
                    special |= (uint32_t)((b[k] & 0x7f800000u) == 0x7f800000u) |
                               (uint32_t)((o[k] & 0x7c00u) == 0x7c00u);
                }
            else
                for (uint64_t k = 0; k < n; k++) {
                    o[k] = cxs_f32_bits_to_bf16(b[k]);
                    special |= (uint32_t)((b[k] & 0x7f800000u) == 0x7f800000u) |
                               (uint32_t)((o[k] & 0x7f80u) == 0x7f80u);
                }
            s->converted = !special;
        } else {
            cxs_fsrc src = {x, nr, nc, CXS_IN_F64, 0, (int64_t)(8 * nc), 8};
            s->converted =
                !kaldi_grow((void **)&s->scratch, &s->scratch_cap, (size_t)(4 * nc),
                            sizeof(double)) &&
                !cxs_features_convert(&src, K->dtype, CXS_NORM_NONE, 0, s->conv, s->scratch,
                                      s->scratch + nc, s->scratch + 2 * nc, NULL, NULL);
        }
    }
labels:
    /* the labels of the utterance, looked up in the vocabulary */
    if (K->lpath && s->lb) {
        const lab *lb = s->lb;
        char *toks = lb->toks, *t;
        size_t n = 0;
        while ((t = kaldi_next_tok(&toks))) {
            size_t tl = kaldi_tok_len(t);
            long x = kaldi_vocab_lookup(K->V, t, tl);
            if (x < 0) {
                s->status = cxs_diagf(&s->d, CXS_E_INPUT, "%s line %llu: utterance %s: token "
                                      "%zu '%.*s' is not in the vocabulary (%s, %u symbols)",
                                      K->lpath, (unsigned long long)lb->line, e->key, n + 1,
                                      (int)(tl > 64 ? 64 : tl), t,
                                      K->ko->vocab ? K->ko->vocab : "built from the data",
                                      K->V->n);
                goto out;
            }
            if (kaldi_grow((void **)&s->labv, &s->lab_cap, n + 1, sizeof *s->labv)) {
                s->status = cxs_diagf(&s->d, -ENOMEM, "out of memory");
                goto out;
            }
            s->labv[n++] = (int32_t)x;
        }
        if (n == 0) {
            s->status = cxs_diagf(&s->d, CXS_E_INPUT, "%s line %llu: utterance %s: no %s",
                                  K->lpath, (unsigned long long)lb->line, e->key,
                                  K->ko->text ? "words (an empty transcript)" : "labels");
            goto out;
        }
        if (K->ko->ali && n != nr) {
            s->status = cxs_diagf(&s->d, CXS_E_INPUT, "%s line %llu: utterance %s: %zu labels "
                                  "for %llu frames (%s)", K->lpath, (unsigned long long)lb->line,
                                  e->key, n, (unsigned long long)nr, where);
            goto out;
        }
        s->nlab = n;
    }
out:
    pthread_mutex_lock(&K->mu);
    kaldi_files_release(K->fs, e->file);
    pthread_mutex_unlock(&K->mu);
}

static void note(importer *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(importer *im, const char *fmt, ...) {
    if (!im->ko->note) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(im->msg, sizeof im->msg, fmt, ap);
    va_end(ap);
    im->ko->note(im->ko->note_user, im->msg);
}

/* A bad utterance: skipped and noted, or the import's failure. */
static int bad(importer *im, const char *key, cxs_diag *d) {
    if (!im->skip) {
        size_t l = strlen(d->message);
        snprintf(d->message + l, sizeof d->message - l, " (--on-error skip leaves bad "
                 "utterances out)");
        return CXS_E_INPUT;
    }
    int rc = cxs_writer_skip(im->w, key, d->message);
    if (rc) return cxs_diagf(d, rc, "out of memory");
    note(im, "skipped: %s", d->message);
    return 0;
}

void cxs_kaldi_opts_init(cxs_kaldi_opts *o) { memset(o, 0, sizeof *o); }

/* ---- the shard plan of a split import ------------------------------------ */

static int u32_cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Which shard every listed utterance goes to, decided from the objects'
 * headers before any data is read, as pack's plan does it (tools/pack.c):
 * utterances in id order, greedily, while the uncompressed shard file
 * stays within the shard size, each counted with the frames its header
 * declares (0 when it cannot be read) and the most common width.  An
 * utterance later skipped keeps its place.  member gets n entries; T the
 * frames; *hash the listing's hash (ids, frames, widths). */
static int plan_shards(listing *L, files *fs, const cxs_writer_opts *wo, uint32_t lw,
                       uint32_t *member, uint64_t *T, uint32_t *nshards, uint64_t *hash,
                       cxs_diag *d) {
    uint32_t *D = calloc(L->n + 1, sizeof *D);
    if (!D) return cxs_diagf(d, -ENOMEM, "out of memory");
    uint8_t *text = NULL;
    size_t text_cap = 0;
    for (size_t i = 0; i < L->n; i++) {
        const ent *e = &L->e[i];
        uint8_t head[KALDI_MAX_HEAD];
        size_t got = 0;
        kaldi_hdr h;
        cxs_diag why; /* a reason, before it is said where */
        T[i] = 0;
        if (kaldi_files_open(fs, e->file, d)) continue;
        if (kaldi_pread_all(fs->f[e->file].fd, head, sizeof head, e->off, &got)) continue;
        if (kaldi_parse(head, got, &h, &why)) continue;
        if (h.kind == KALDI_TXT) {
            /* its sizes are known once it has been read */
            uint64_t tn = 0;
            const arkfile *a = &fs->f[e->file];
            if (kaldi_text_extent(a->fd, a->size, e->off + h.head, &tn, &why) ||
                tn > SIZE_MAX / 2 || kaldi_grow((void **)&text, &text_cap, (size_t)tn, 1) ||
                kaldi_pread_all(a->fd, text, (size_t)tn, e->off + h.head, &got) || got != tn ||
                kaldi_text_parse(text, (size_t)tn, &h.rows, &h.cols, NULL, &why))
                continue;
        }
        uint64_t r0, nr, c0, nc;
        int cut;
        if (kaldi_range_apply(e, h.rows, h.cols, &r0, &nr, &c0, &nc, &cut, &why) ||
            nc > CXS_MAX_DIM || nr == 0 || nc == 0)
            continue;
        T[i] = nr;
        D[i] = (uint32_t)nc;
    }
    free(text);
    /* the most common width (0: no header read) */
    uint32_t width = 0;
    uint32_t *sorted = malloc((L->n + 1) * sizeof *sorted);
    if (!sorted) {
        free(D);
        return cxs_diagf(d, -ENOMEM, "out of memory");
    }
    memcpy(sorted, D, L->n * sizeof *sorted);
    qsort(sorted, L->n, sizeof *sorted, u32_cmp);
    for (size_t i = 0, best = 0; i < L->n;) {
        size_t j = i;
        while (j < L->n && sorted[j] == sorted[i]) j++;
        if (sorted[i] && j - i > best) {
            best = j - i;
            width = sorted[i];
        }
        i = j;
    }
    free(sorted);
    const uint64_t E = cxs_dtype_size(wo->dtype), G = cxs_stored_guard(wo->dtype, wo->guard);
    uint64_t U = 0, F = 0, idb = 0;
    uint32_t s = 0;
    XXH3_state_t *x = XXH3_createState();
    if (!x) {
        free(D);
        return cxs_diagf(d, -ENOMEM, "out of memory");
    }
    XXH3_64bits_reset(x);
    for (size_t i = 0; i < L->n; i++) {
        uint64_t il = strlen(L->e[i].key);
        if (U > 0 && cxs_shard_file_size(U + 1, F + T[i], idb + il, width, E, G, lw,
                                               cxs_q_header_size(wo->dtype, width)) >
                         wo->shard_size) {
            s++;
            U = F = idb = 0;
        }
        U++;
        F += T[i];
        idb += il;
        member[i] = s;
        uint8_t rec[12];
        cxs_st64(rec, T[i]);
        cxs_st32(rec + 8, D[i]);
        XXH3_64bits_update(x, L->e[i].key, il + 1);
        XXH3_64bits_update(x, rec, sizeof rec);
    }
    *hash = XXH3_64bits_digest(x);
    XXH3_freeState(x);
    free(D);
    *nshards = L->n ? s + 1 : 0;
    return 0;
}

int cxs_import_kaldi(const char *in, const char *out, const cxs_writer_opts *wo_in,
                     const cxs_kaldi_opts *ko_in, cxs_progress_fn progress, void *user,
                     cxs_import_info *info, cxs_diag *d) {
    if (!in || !out || !wo_in) return cxs_diagf(d, CXS_E_INVALID, "import: no input, output or options");
    int orc;
    if ((orc = CXS_OPTS_CHECK(wo_in, "cxs_writer_opts", d)) ||
        (ko_in && (orc = CXS_OPTS_CHECK(ko_in, "cxs_kaldi_opts", d))))
        return orc;
    cxs_kaldi_opts kdef;
    cxs_kaldi_opts_init(&kdef);
    const cxs_kaldi_opts *ko = ko_in ? ko_in : &kdef;
    if (ko->text && ko->ali)
        return cxs_diagf(d, CXS_E_INVALID, "import: give a text file or alignments, not both "
                         "(one vocabulary per dataset)");
    if (ko->vocab && !ko->text && !ko->ali)
        return cxs_diagf(d, CXS_E_INVALID, "import: a vocabulary without labels (give a text "
                         "file or alignments)");
    const int vlist = wo_in->vocab && wo_in->vocab_size && (ko->text || ko->ali);
    if ((ko->vocab != NULL) + vlist + !!(ko->flags & CXS_KALDI_VOCAB_FROM_DATA) > 1)
        return cxs_diagf(d, CXS_E_INVALID, "import: %s and %s: give one vocabulary",
                         ko->vocab ? "a vocabulary file" : "a vocabulary list",
                         vlist && ko->vocab ? "a vocabulary list" : "CXS_KALDI_VOCAB_FROM_DATA");
    if ((ko->text || ko->ali) && !ko->vocab && !vlist && !(ko->flags & CXS_KALDI_VOCAB_FROM_DATA))
        return cxs_diagf(d, CXS_E_INVALID, "import: labels need a vocabulary: a vocabulary file "
                         "(--vocab FILE: the training split's, written by `ctxshard vocab "
                         "TRAIN_DATASET > vocab.txt`, or a Kaldi symbol table such as "
                         "data/lang/phones.txt), or CXS_KALDI_VOCAB_FROM_DATA "
                         "(--vocab-from-data) to number the symbols this %s file holds, which "
                         "another split may number differently", ko->text ? "text" : "alignment");
    listing L = {0};
    files fs = {0};
    labels B = {0};
    vocab V = {0};
    int vocab_owned = 0;
    importer im = {ko, NULL, (int)wo_in->on_error_skip, ""};
    cxs_import_info res;
    memset(&res, 0, sizeof res);
    import_ring *ring = NULL;
    kslot *slots = NULL;
    size_t nslots = 0, *lab_of = NULL;
    uint32_t *member = NULL; /* a split import's plan */
    uint64_t *frames = NULL;
    kaldi_spec spec, lspec = {0};
    int rc = kaldi_spec_parse(in, "features", &spec, d);
    if (rc) return rc;
    const char *path = spec.path;
    if ((rc = kaldi_input_kind(&spec, d)) < 0) goto out;
    L.is_scp = rc;
    L.name = path;
    rc = L.is_scp ? kaldi_read_scp(&L, &fs, path, d) : kaldi_read_ark(&L, &fs, path, d);
    if (rc) goto out;
    if (L.n == 0) {
        rc = cxs_diagf(d, CXS_E_INPUT, "%s: no utterance listed", path);
        goto out;
    }
    res.listed = L.n;
    /* Ids in byte order, as the writer and the reader need them. */
    for (size_t i = 1; i < L.n; i++)
        if (kaldi_key_cmp(L.e[i - 1].key, L.e[i].key) > 0) {
            if (spec.sorted) {
                /* Kaldi's s: a promise, which its sorted readers check */
                if (L.is_scp)
                    rc = cxs_diagf(d, CXS_E_INPUT, "%s: option s says the listing is sorted, "
                                   "but line %llu (%s) comes after line %llu (%s); sort it: "
                                   "LC_ALL=C sort -k1,1 %s -o %s (or drop the s)", in,
                                   (unsigned long long)L.e[i].line, L.e[i].key,
                                   (unsigned long long)L.e[i - 1].line, L.e[i - 1].key, path,
                                   path);
                else
                    rc = cxs_diagf(d, CXS_E_INPUT, "%s: option s says the archive is sorted, "
                                   "but %s (offset %llu) comes after %s (drop the s: the "
                                   "import sorts it)", in, L.e[i].key,
                                   (unsigned long long)L.e[i].off, L.e[i - 1].key);
                goto out;
            }
            if (ko->flags & CXS_KALDI_NO_SORT) {
                if (L.is_scp)
                    rc = cxs_diagf(d, CXS_E_INPUT, "%s: not sorted: line %llu (%s) comes after "
                                   "line %llu (%s); sort it as Kaldi wants it: LC_ALL=C sort -k1,1 "
                                   "%s -o %s (or import without --no-sort)", path,
                                   (unsigned long long)L.e[i].line, L.e[i].key,
                                   (unsigned long long)L.e[i - 1].line, L.e[i - 1].key, path,
                                   path);
                else
                    rc = cxs_diagf(d, CXS_E_INPUT, "%s: not sorted: %s (offset %llu) comes after "
                                   "%s; import without --no-sort, or write a sorted copy: "
                                   "copy-feats ark:%s ark,scp:sorted.ark,sorted.scp, then "
                                   "LC_ALL=C sort -k1,1 sorted.scp", path, L.e[i].key,
                                   (unsigned long long)L.e[i].off, L.e[i - 1].key, path);
                goto out;
            }
            res.sorted = 1;
            break;
        }
    if (res.sorted) {
        qsort(L.e, L.n, sizeof *L.e, kaldi_ent_cmp);
        note(&im, "%s: utterance ids not in byte order: sorted (%zu utterances)", path, L.n);
    }
    for (size_t i = 1; i < L.n; i++)
        if (!kaldi_key_cmp(L.e[i - 1].key, L.e[i].key)) {
            if (L.is_scp)
                rc = cxs_diagf(d, CXS_E_INPUT, "%s: utterance %s twice, lines %llu and %llu",
                               path, L.e[i].key, (unsigned long long)L.e[i - 1].line,
                               (unsigned long long)L.e[i].line);
            else
                rc = cxs_diagf(d, CXS_E_INPUT, "%s: utterance %s twice, offsets %llu and %llu",
                               path, L.e[i].key, (unsigned long long)L.e[i - 1].off,
                               (unsigned long long)L.e[i].off);
            goto out;
        }
    /* Labels, matched against the listing before anything is written. */
    const char *lpath = ko->text ? ko->text : ko->ali;
    const char *lwhat = ko->text ? "text" : "alignment";
    if (lpath) {
        /* `ark,t:ali.txt`, `ark:data/train/text`: Kaldi's names of a text
         * archive; an scp of label files is not read */
        if ((rc = kaldi_spec_parse(lpath, lwhat, &lspec, d))) goto out;
        if (lspec.kind == KALDI_SPEC_SCP || lspec.both) {
            rc = cxs_diagf(d, CXS_E_INPUT, "'%s': the %s is read from a text archive (`utt tok "
                           "tok ...` lines: FILE or ark,t:FILE), not through an scp", lpath,
                           lwhat);
            goto out;
        }
        const char *lspecname = lpath;
        lpath = lspec.path;
        if ((rc = kaldi_read_labels(&B, lpath, d))) goto out;
        if (lspec.sorted)
            for (size_t i = 0; i < B.n; i++)
                if (B.l[i].order != i) {
                    /* the first line out of order: the one sorted before its place */
                    rc = cxs_diagf(d, CXS_E_INPUT, "%s: option s says the file is sorted, but "
                                   "line %llu (%s) is not in byte order of ids; sort it: "
                                   "LC_ALL=C sort -k1,1 %s -o %s (or drop the s)", lspecname,
                                   (unsigned long long)B.l[i].line, B.l[i].key, lpath, lpath);
                    goto out;
                }
        size_t j = 0, missing = 0, extra = 0;
        const ent *first_missing = NULL;
        const lab *first_extra = NULL;
        for (size_t i = 0; i < L.n; i++) {
            while (j < B.n && kaldi_key_cmp(B.l[j].key, L.e[i].key) < 0) {
                if (!extra++) first_extra = &B.l[j];
                j++;
            }
            if (j < B.n && !kaldi_key_cmp(B.l[j].key, L.e[i].key)) j++;
            else if (!missing++) first_missing = &L.e[i];
        }
        for (; j < B.n; j++)
            if (!extra++) first_extra = &B.l[j];
        if (missing && !im.skip) {
            rc = cxs_diagf(d, CXS_E_INPUT, "%s: utterance %s has no line in the %s file %s (%zu "
                           "of the %zu utterances have none; --on-error skip leaves them out, "
                           "or fix the data directory: utils/fix_data_dir.sh)", path,
                           first_missing->key, lwhat, lpath, missing, L.n);
            goto out;
        }
        if (extra) {
            if (!im.skip) {
                rc = cxs_diagf(d, CXS_E_INPUT, "%s line %llu: utterance %s has no features in "
                               "%s (%zu such line%s; --on-error skip ignores them, or fix the "
                               "data directory: utils/fix_data_dir.sh)", lpath,
                               (unsigned long long)first_extra->line, first_extra->key, path,
                               extra, extra == 1 ? "" : "s");
                goto out;
            }
            note(&im, "%s: %zu line%s for utterances without features ignored (the first: line "
                 "%llu, %s)", lpath, extra, extra == 1 ? "" : "s",
                 (unsigned long long)first_extra->line, first_extra->key);
        }
        if (ko->vocab) {
            if ((rc = kaldi_vocab_read(&V, ko->vocab, d))) goto out;
        } else if (vlist) {
            if ((rc = kaldi_vocab_list(&V, wo_in->vocab, wo_in->vocab_size, d))) goto out;
        } else {
            if ((rc = kaldi_vocab_build(&V, &B, d))) goto out;
            vocab_owned = 1;
        }
        if (V.n == 0) {
            rc = cxs_diagf(d, CXS_E_INPUT, "%s: no labels in the file", lpath);
            goto out;
        }
        res.vocab_size = V.n;
    }
    cxs_writer_opts wo = *wo_in;
    wo.vocab_size = V.n;
    wo.vocab = (const char *const *)V.sym;
    wo.label_seqs = ko->text ? CXS_SEQ_ONLY : CXS_SEQ_NONE;
    wo.part = NULL;
    wo.flags &= ~CXS_WRITER_MANUAL_CUT;
    /* A split import: the plan for the whole listing, this part's slice of
     * whole shards, cut where the plan says. */
    size_t i_lo = 0, i_hi = L.n;
    cxs_writer_part part;
    if (ko->parts) {
        if (ko->part < 1 || ko->part > ko->parts) {
            rc = cxs_diagf(d, CXS_E_INVALID, "import: part %u of %u", ko->part, ko->parts);
            goto out;
        }
        const uint32_t lw = ko->ali ? cxs_label_width(V.n) : 0;
        uint32_t ns = 0;
        uint64_t hash = 0;
        if (!(member = calloc(L.n + 1, sizeof *member)) || !(frames = calloc(L.n + 1, sizeof *frames))) {
            rc = cxs_diagf(d, -ENOMEM, "out of memory");
            goto out;
        }
        if ((rc = plan_shards(&L, &fs, &wo, lw, member, frames, &ns, &hash, d))) goto out;
        if (ns < ko->parts && ns < L.n) {
            rc = cxs_diagf(d, CXS_E_INPUT, "%s: --part %u/%u: at this --shard-size the %zu "
                           "utterances make %u shard%s, fewer than the %u parts (a part is whole "
                           "shards): give a smaller --shard-size", path, ko->part, ko->parts,
                           L.n, ns, ns == 1 ? "" : "s", ko->parts);
            goto out;
        }
        uint32_t s_lo = (uint32_t)((uint64_t)ns * (ko->part - 1) / ko->parts);
        uint32_t s_hi = (uint32_t)((uint64_t)ns * ko->part / ko->parts);
        while (i_lo < L.n && member[i_lo] < s_lo) i_lo++;
        i_hi = i_lo;
        while (i_hi < L.n && member[i_hi] < s_hi) i_hi++;
        uint64_t f_base = 0;
        for (size_t i = 0; i < i_lo; i++) f_base += frames[i];
        part = (cxs_writer_part){ko->part, ko->parts, s_lo, s_hi, ns, i_lo, f_base, L.n, i_lo,
                                 i_hi, hash};
        wo.part = &part;
        wo.flags |= CXS_WRITER_MANUAL_CUT;
    }
    if ((rc = cxs_writer_create(out, &wo, &im.w, d))) goto out;
    /* Each listed utterance's label line, found before the readers start. */
    if (lpath) {
        if (!(lab_of = calloc(L.n + 1, sizeof *lab_of))) {
            rc = cxs_diagf(d, -ENOMEM, "out of memory");
            goto out;
        }
        for (size_t i = 0, j = 0; i < L.n; i++) {
            while (j < B.n && kaldi_key_cmp(B.l[j].key, L.e[i].key) < 0) j++;
            if (j < B.n && !kaldi_key_cmp(B.l[j].key, L.e[i].key)) lab_of[i] = j + 1;
        }
    }
    /* Reader threads load (read, decode, label) utterances ahead into a
     * ring of slots; this thread hands them to the writer in listing
     * order, so what is written never depends on the thread count. */
    const unsigned threads = wo_in->threads > CXS_WRITER_MAX_THREADS ? CXS_WRITER_MAX_THREADS
                             : wo_in->threads;
    kload K = {&L,    &fs,   &B,        &V,           lab_of, ko, path, lpath, lwhat, wo.dtype,
               wo.normalize, NULL, PTHREAD_MUTEX_INITIALIZER};
    nslots = import_ring_slots(threads);
    if (!(K.slots = slots = calloc(nslots, sizeof *slots))) {
        rc = cxs_diagf(d, -ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = import_ring_start(&ring, threads, i_lo, i_hi, load_one, &K))) {
        rc = cxs_diagf(d, rc, "%s: cannot start the reader threads: %s", out, strerror(-rc));
        goto out;
    }
    int have = 0;
    uint32_t cur = 0;
    for (size_t i = i_lo; i < i_hi; i++) {
        const ent *e = &L.e[i];
        kslot *sl = &slots[import_ring_get(ring, i)];
        if (sl->status) {
            *d = sl->d;
            if (sl->status != CXS_E_INPUT || (rc = bad(&im, e->key, d))) {
                if (!rc) rc = sl->status;
                goto out;
            }
            goto next;
        }
        if (sl->note[0]) note(&im, "%s", sl->note);
        res.kinds |= 1u << sl->kind;
        if (cxs_dtype_coded(wo.dtype)) {
            if (sl->kept) res.codes_kept++;
            else res.reencoded++;
        }
        res.input_bytes += sl->size;
        cxs_writer_utt u;
        memset(&u, 0, sizeof u);
        u.data = e->range ? sl->sub : sl->vals;
        u.frames = sl->rows;
        u.dim = sl->cols;
        u.type = sl->kind == KALDI_DM || sl->kind == KALDI_DV ? CXS_DTYPE_F64 : CXS_DTYPE_F32;
        if (sl->converted) {
            u.data = sl->conv;
            u.type = wo.dtype;
            u.stored = 1;
        }
        if (lpath) {
            if (!sl->lb) {
                char where[700];
                where_of(&K, e, where, sizeof where);
                cxs_diagf(d, CXS_E_INPUT, "%s: no line in the %s file %s", where, lwhat, lpath);
                if ((rc = bad(&im, e->key, d))) goto out;
                goto next;
            }
            if (ko->ali) {
                u.labels = sl->labv;
                u.label_count = sl->nlab;
                u.label_size = 4;
            } else {
                u.seq = sl->labv;
                u.seq_count = sl->nlab;
                u.seq_size = 4;
            }
        }
        if (member && have && member[i] != cur && (rc = cxs_writer_cut(im.w, d))) goto out;
        if (member) cur = member[i];
        have = 1;
        if ((rc = cxs_writer_add(im.w, e->key, &u, d))) {
            if (rc != CXS_E_INPUT) goto out;
            /* the writer's reason, with where the utterance came from */
            char where[700], reason[sizeof d->message];
            where_of(&K, e, where, sizeof where);
            size_t kl = strlen(e->key);
            const char *r = d->message;
            if (!strncmp(r, e->key, kl) && r[kl] == ':' && r[kl + 1] == ' ') r += kl + 2;
            snprintf(reason, sizeof reason, "%s", r);
            cxs_diagf(d, CXS_E_INPUT, "%s: %s", where, reason);
            if ((rc = bad(&im, e->key, d))) goto out;
        }
    next:
        if ((rc = import_step(ring, i, i_lo, i_hi, progress, user, out, "import", d))) goto out;
    }
    import_ring_stop(ring);
    ring = NULL;
    rc = import_commit(&im.w, ko->parts > 0, path, "import", &res, info, d);
out:
    import_ring_stop(ring);
    cxs_writer_abort(im.w);
    free(member);
    free(frames);
    free(lab_of);
    for (size_t k = 0; slots && k < nslots; k++) {
        free(slots[k].obj);
        free(slots[k].vals);
        free(slots[k].sub);
        free(slots[k].labv);
        free(slots[k].conv);
        free(slots[k].scratch);
    }
    free(slots);
    if (!L.is_scp)
        for (size_t i = 0; i < L.n; i++) free(L.e[i].key);
    free(L.e);
    free(L.text);
    kaldi_files_free(&fs);
    free(B.l);
    free(B.text);
    kaldi_vocab_free(&V, vocab_owned);
    kaldi_spec_free(&spec);
    kaldi_spec_free(&lspec);
    return rc;
}
