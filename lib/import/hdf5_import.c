/* hdf5_import.c - cxs_import_hdf5 (ctxshard_import.h): an HDF5 file of
 * features through the library's writer.  Two layouts, told apart by what
 * the file holds:
 *
 * - one dataset per utterance (Lhotse's NumpyHdf5Writer, most in-house
 *   pipelines): every dataset, in any group, is an utterance; its path
 *   without the leading '/' is the id; its value is [T, D] (a 1-D dataset
 *   is one column);
 * - concatenated: exactly the datasets `features` [N, D], `offsets`
 *   [U + 1] (integers: 0, the end of each utterance, ..., N) and `ids` [U]
 *   (strings), at the root.
 *
 * Anything else (other ranks, integer features, a mix) is refused naming
 * the dataset.  Built with the HDF5 C library when it is found (meson
 * option hdf5); without it the function answers CXS_E_UNSUPPORTED. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard_import.h"
#include "abi.h"
#include "cxs_format.h"
#include "import_ring.h"

#ifndef CXS_HAVE_HDF5

int cxs_import_hdf5(const char *in, const char *out, const cxs_writer_opts *wo, cxs_note_fn note,
                    void *note_user, cxs_progress_fn progress, void *user, cxs_import_info *info,
                    cxs_diag *d) {
    (void)out, (void)wo, (void)note, (void)note_user, (void)progress, (void)user, (void)info;
    return cxs_diagf(d, CXS_E_UNSUPPORTED, "%s: this libctxshard was built without HDF5 "
                     "(install libhdf5-dev and rebuild; meson option hdf5)", in ? in : "import");
}

#else

#include <hdf5.h>

/* Object visiting changed its info type in HDF5 1.12. */
#if H5_VERSION_GE(1, 12, 0)
typedef H5O_info2_t obj_info;
#define VISIT(f, op, data) H5Ovisit3(f, H5_INDEX_NAME, H5_ITER_INC, op, data, H5O_INFO_BASIC)
#else
typedef H5O_info_t obj_info;
#define VISIT(f, op, data) H5Ovisit2(f, H5_INDEX_NAME, H5_ITER_INC, op, data, H5O_INFO_BASIC)
#endif

typedef struct names {
    char **v;
    size_t n, cap;
    int bad_kind;   /* a named datatype or other object met */
} names;

static herr_t visit(hid_t obj, const char *name, const obj_info *oi, void *data) {
    names *nm = data;
    (void)obj;
    if (oi->type == H5O_TYPE_GROUP) return 0;
    if (oi->type != H5O_TYPE_DATASET) return 0;
    if (nm->n == nm->cap) {
        size_t c = nm->cap ? 2 * nm->cap : 64;
        char **p = realloc(nm->v, c * sizeof *p);
        if (!p) return -1;
        nm->v = p;
        nm->cap = c;
    }
    if (!(nm->v[nm->n] = strdup(name))) return -1;
    nm->n++;
    return 0;
}

static int str_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void note_f(cxs_note_fn note, void *user, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note_f(cxs_note_fn note, void *user, const char *fmt, ...) {
    if (!note) return;
    char m[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    note(user, m);
}

/* The shape of dataset ds as [T, D] and whether it is float; the reason in
 * r's message when it cannot be an utterance (the caller says where). */
static int shape_of(hid_t ds, hsize_t *T, hsize_t *D, int *ndims, size_t *esize, cxs_diag *r) {
    hid_t sp = H5Dget_space(ds), ty = H5Dget_type(ds);
    int rc = 0;
    if (sp < 0 || ty < 0) {
        rc = cxs_diagf(r, CXS_E_CORRUPT, "cannot be read (HDF5 error)");
        goto out;
    }
    int nd = H5Sget_simple_extent_ndims(sp);
    hsize_t dims[2] = {0, 1};
    if (nd == 1 || nd == 2) H5Sget_simple_extent_dims(sp, dims, NULL);
    if (nd != 1 && nd != 2) {
        rc = cxs_diagf(r, CXS_E_INPUT,
                       "has %d dimensions, expected [frames, dim] (2) or [frames] (1)", nd);
        goto out;
    }
    if (H5Tget_class(ty) != H5T_FLOAT) {
        /* integers beside the features are most often labels: say where they go */
        rc = cxs_diagf(
            r, CXS_E_INPUT, "holds %s, expected floating-point features%s",
            H5Tget_class(ty) == H5T_INTEGER  ? "integers"
            : H5Tget_class(ty) == H5T_STRING ? "strings"
                                             : "non-float data",
            H5Tget_class(ty) == H5T_INTEGER
                ? " (labels are not imported from HDF5: write features and labels with "
                  "ctxshard.Writer, as docs/guide.md shows under 'Importing HDF5 features')"
                : "");
        goto out;
    }
    *T = dims[0];
    *D = nd == 2 ? dims[1] : 1;
    *ndims = nd;
    *esize = H5Tget_size(ty) > 4 ? 8 : 4;
out:
    if (sp >= 0) H5Sclose(sp);
    if (ty >= 0) H5Tclose(ty);
    return rc;
}

/* Rows [r0, r0 + T) of a [N, D] (or [N]) dataset into buf as float or double. */
static int read_rows(hid_t ds, hsize_t r0, hsize_t T, hsize_t D, int nd, size_t esize, void *buf) {
    hid_t fsp = H5Dget_space(ds);
    if (fsp < 0) return -1;
    hsize_t start[2] = {r0, 0}, count[2] = {T, D};
    hid_t msp = H5Screate_simple(nd, count, NULL);
    int rc = msp < 0 || H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
             H5Dread(ds, esize == 8 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT, msp, fsp,
                     H5P_DEFAULT, buf) < 0;
    if (msp >= 0) H5Sclose(msp);
    H5Sclose(fsp);
    return rc ? -1 : 0;
}

static int grow(void **p, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    void *q = realloc(*p, need);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = need;
    return 0;
}

/* A bad utterance: skipped and noted, or the import's failure. */
static int bad(cxs_writer *w, int skip, const char *id, cxs_note_fn note, void *nu, cxs_diag *d) {
    if (!skip) {
        size_t l = strlen(d->message);
        snprintf(d->message + l, sizeof d->message - l, " (--on-error skip leaves bad "
                 "utterances out)");
        return CXS_E_INPUT;
    }
    if (cxs_writer_skip(w, id, d->message)) return cxs_diagf(d, -ENOMEM, "out of memory");
    note_f(note, nu, "skipped: %s", d->message);
    return 0;
}

static int add(cxs_writer *w, const char *in, const char *id, const void *buf, hsize_t T,
               hsize_t D, size_t esize, int skip, cxs_note_fn note, void *nu, cxs_diag *d) {
    cxs_writer_utt u;
    memset(&u, 0, sizeof u);
    u.data = buf;
    u.frames = T;
    u.dim = D;
    u.type = esize == 8 ? CXS_DTYPE_F64 : CXS_DTYPE_F32;
    int rc = cxs_writer_add(w, id, &u, d);
    if (rc != CXS_E_INPUT) return rc;
    char reason[sizeof d->message];
    snprintf(reason, sizeof reason, "%s", d->message);
    cxs_diagf(d, CXS_E_INPUT, "%s: %s", in, reason);
    return bad(w, skip, id, note, nu, d);
}

int cxs_import_hdf5(const char *in, const char *out, const cxs_writer_opts *wo_in,
                    cxs_note_fn note, void *nu, cxs_progress_fn progress, void *user,
                    cxs_import_info *info, cxs_diag *d) {
    if (!in || !out || !wo_in) return cxs_diagf(d, CXS_E_INVALID, "import: no input, output or options");
    int orc = CXS_OPTS_CHECK(wo_in, "cxs_writer_opts", d);
    if (orc) return orc;
    /* HDF5 prints its error stack by default; the library never prints */
    H5E_auto2_t old_fn;
    void *old_data;
    H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    names nm = {0};
    cxs_writer *w = NULL;
    void *buf = NULL;
    size_t cap = 0;
    hid_t f = -1, feats = -1, offs = -1, ids = -1;
    uint64_t *off = NULL;
    char **idv = NULL;
    hsize_t U = 0;
    int vlen_ids = 0;
    cxs_import_info res;
    memset(&res, 0, sizeof res);
    int rc = 0, skip = (int)wo_in->on_error_skip;
    htri_t is = H5Fis_hdf5(in);
    if (is <= 0) {
        FILE *fp = fopen(in, "rb");
        if (!fp) rc = cxs_diagf(d, errno == ENOENT ? CXS_E_INPUT : -errno, "%s: %s", in, strerror(errno));
        else {
            fclose(fp);
            rc = cxs_diagf(d, CXS_E_INPUT, "%s: not an HDF5 file", in);
        }
        goto out;
    }
    if ((f = H5Fopen(in, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0) {
        rc = cxs_diagf(d, CXS_E_INPUT, "%s: the HDF5 library cannot open it", in);
        goto out;
    }
    if (VISIT(f, visit, &nm) < 0) {
        rc = cxs_diagf(d, nm.n == nm.cap ? -ENOMEM : CXS_E_INPUT, "%s: cannot list its datasets", in);
        goto out;
    }
    if (nm.n == 0) {
        rc = cxs_diagf(d, CXS_E_INPUT, "%s: no datasets", in);
        goto out;
    }
    qsort(nm.v, nm.n, sizeof *nm.v, str_cmp);
    int concat = 0;
    for (size_t i = 0; i < nm.n; i++)
        if (!strcmp(nm.v[i], "offsets")) concat = 1;
    cxs_writer_opts wo = *wo_in;
    wo.vocab_size = 0;
    wo.vocab = NULL;
    wo.label_seqs = CXS_SEQ_NONE;
    wo.part = NULL;
    wo.flags &= ~CXS_WRITER_MANUAL_CUT;
    cxs_diag why; /* a reason, before it is said where */
    hsize_t T, D, N, ND;
    size_t es;
    int fnd;
    if (concat) {
        /* features [N, D], offsets [U + 1], ids [U] at the root, nothing else */
        for (size_t i = 0; i < nm.n; i++)
            if (strcmp(nm.v[i], "features") && strcmp(nm.v[i], "offsets") && strcmp(nm.v[i], "ids")) {
                rc = cxs_diagf(d, CXS_E_INPUT, "%s: has an 'offsets' dataset, so it is read as "
                               "the concatenated layout (features [N, D], offsets [U+1], ids [U]), "
                               "but it also holds '%s'", in, nm.v[i]);
                goto out;
            }
        if (nm.n != 3) {
            rc = cxs_diagf(d, CXS_E_INPUT, "%s: the concatenated layout needs the datasets "
                           "features [N, D], offsets [U+1] and ids [U]; it has %zu of them", in,
                           nm.n);
            goto out;
        }
        feats = H5Dopen2(f, "features", H5P_DEFAULT);
        offs = H5Dopen2(f, "offsets", H5P_DEFAULT);
        ids = H5Dopen2(f, "ids", H5P_DEFAULT);
        if (feats < 0 || offs < 0 || ids < 0) {
            rc = cxs_diagf(d, CXS_E_INPUT, "%s: cannot open features, offsets or ids", in);
            goto out;
        }
        if ((rc = shape_of(feats, &N, &ND, &fnd, &es, &why))) {
            rc = cxs_diagf(d, CXS_E_INPUT, "%s: features %s", in, why.message);
            goto out;
        }
        hid_t sp = H5Dget_space(offs), ty = H5Dget_type(offs);
        hsize_t on = 0;
        int ok = H5Sget_simple_extent_ndims(sp) == 1 && H5Tget_class(ty) == H5T_INTEGER;
        if (ok) H5Sget_simple_extent_dims(sp, &on, NULL);
        H5Sclose(sp);
        H5Tclose(ty);
        if (!ok || on < 2) {
            rc = cxs_diagf(d, CXS_E_INPUT, "%s: offsets must be 1-D integers [U+1] (0, the end of "
                           "each utterance, ..., N) with U >= 1", in);
            goto out;
        }
        U = on - 1;
        off = malloc(on * sizeof *off);
        idv = calloc(U, sizeof *idv);
        if (!off || !idv) {
            rc = cxs_diagf(d, -ENOMEM, "out of memory");
            goto out;
        }
        if (H5Dread(offs, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, off) < 0) {
            rc = cxs_diagf(d, CXS_E_INPUT, "%s: offsets cannot be read as unsigned integers", in);
            goto out;
        }
        if (off[0] != 0 || off[U] != N) {
            rc = cxs_diagf(d, CXS_E_INPUT, "%s: offsets run from %llu to %llu, expected 0 to %llu "
                           "(the rows of features)", in, (unsigned long long)off[0],
                           (unsigned long long)off[U], (unsigned long long)N);
            goto out;
        }
        for (hsize_t i = 0; i < U; i++)
            if (off[i + 1] < off[i]) {
                rc = cxs_diagf(d, CXS_E_INPUT, "%s: offsets[%llu] = %llu is below offsets[%llu] = "
                               "%llu", in, (unsigned long long)i + 1,
                               (unsigned long long)off[i + 1], (unsigned long long)i,
                               (unsigned long long)off[i]);
                goto out;
            }
        sp = H5Dget_space(ids);
        ty = H5Dget_type(ids);
        hsize_t idn = 0;
        ok = H5Sget_simple_extent_ndims(sp) == 1 && H5Tget_class(ty) == H5T_STRING;
        if (ok) H5Sget_simple_extent_dims(sp, &idn, NULL);
        H5Sclose(sp);
        if (!ok || idn != U) {
            H5Tclose(ty);
            rc = cxs_diagf(d, CXS_E_INPUT, "%s: ids must be 1-D strings, one per utterance (%llu, "
                           "from offsets)", in, (unsigned long long)U);
            goto out;
        }
        /* variable-length strings as they are; fixed-size ones (numpy's
         * |S) read whole and copied out NUL-terminated */
        herr_t er;
        if (H5Tis_variable_str(ty) > 0) {
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, H5T_VARIABLE);
            H5Tset_cset(mt, H5Tget_cset(ty));
            er = H5Dread(ids, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, idv);
            H5Tclose(mt);
            vlen_ids = 1;
        } else {
            size_t sw = H5Tget_size(ty);
            char *fx = sw && U <= SIZE_MAX / sw ? malloc(U * sw) : NULL;
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, sw);
            H5Tset_strpad(mt, H5T_STR_NULLPAD);
            H5Tset_cset(mt, H5Tget_cset(ty));
            er = fx ? H5Dread(ids, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, fx) : -1;
            H5Tclose(mt);
            for (hsize_t i = 0; er >= 0 && i < U; i++) {
                size_t l = strnlen(fx + i * sw, sw);
                idv[i] = l ? strndup(fx + i * sw, l) : NULL;
                if (l && !idv[i]) er = -1;
            }
            free(fx);
        }
        H5Tclose(ty);
        if (er < 0) {
            rc = cxs_diagf(d, CXS_E_INPUT, "%s: ids cannot be read as strings", in);
            goto out;
        }
        for (hsize_t i = 0; i < U; i++)
            if (!idv[i]) {
                rc = cxs_diagf(d, CXS_E_INPUT, "%s: ids[%llu] is empty", in, (unsigned long long)i);
                goto out;
            }
        /* ids in byte order; an order that is not is refused with the fix
         * (the rows would have to be read out of order) */
        for (hsize_t i = 1; i < U; i++)
            if (strcmp(idv[i - 1], idv[i]) >= 0) {
                rc = cxs_diagf(d, CXS_E_INPUT, "%s: ids[%llu] '%s' %s ids[%llu] '%s': the "
                               "concatenated layout must list utterances in byte order of ids, "
                               "each once (sort them, or write one dataset per utterance)", in,
                               (unsigned long long)i, idv[i],
                               strcmp(idv[i - 1], idv[i]) ? "comes after" : "repeats",
                               (unsigned long long)i - 1, idv[i - 1]);
                goto out;
            }
        res.listed = U;
        const int nd = fnd;
        if ((rc = cxs_writer_create(out, &wo, &w, d))) goto out;
        for (hsize_t i = 0; i < U; i++) {
            T = off[i + 1] - off[i];
            if (T == 0) {
                cxs_diagf(d, CXS_E_INPUT, "%s: utterance %s (ids[%llu]): no frames (offsets[%llu] "
                          "== offsets[%llu])", in, idv[i], (unsigned long long)i,
                          (unsigned long long)i, (unsigned long long)i + 1);
                if ((rc = bad(w, skip, idv[i], note, nu, d))) goto out;
                goto next_c;
            }
            if (grow(&buf, &cap, (size_t)(T * ND * es))) {
                rc = cxs_diagf(d, -ENOMEM, "out of memory");
                goto out;
            }
            if (read_rows(feats, off[i], T, ND, nd, es, buf)) {
                rc = cxs_diagf(d, CXS_E_INPUT, "%s: features rows %llu..%llu cannot be read", in,
                               (unsigned long long)off[i], (unsigned long long)off[i + 1]);
                goto out;
            }
            res.input_bytes += T * ND * es;
            if ((rc = add(w, in, idv[i], buf, T, ND, es, skip, note, nu, d))) goto out;
        next_c:
            if ((rc = import_step(NULL, i, 0, U, progress, user, out, "import", d))) goto out;
        }
    } else {
        res.listed = nm.n;
        if ((rc = cxs_writer_create(out, &wo, &w, d))) goto out;
        for (size_t i = 0; i < nm.n; i++) {
            const char *id = nm.v[i];
            hid_t ds = H5Dopen2(f, id, H5P_DEFAULT);
            if (ds < 0) {
                rc = cxs_diagf(d, CXS_E_INPUT, "%s: /%s cannot be opened", in, id);
                goto out;
            }
            int nd;
            int src = shape_of(ds, &T, &D, &nd, &es, &why);
            if (src) {
                H5Dclose(ds);
                rc = cxs_diagf(d, CXS_E_INPUT,
                               "%s: /%s %s (one dataset per utterance, [frames, dim]; or the "
                               "concatenated layout: features, offsets, ids)",
                               in, id, why.message);
                goto out;
            }
            if (T == 0 || D == 0) {
                H5Dclose(ds);
                cxs_diagf(d, CXS_E_INPUT, "%s: /%s: an empty utterance (%llux%llu)", in, id,
                          (unsigned long long)T, (unsigned long long)D);
                if ((rc = bad(w, skip, id, note, nu, d))) goto out;
                goto next_u;
            }
            if (grow(&buf, &cap, (size_t)(T * D * es))) {
                H5Dclose(ds);
                rc = cxs_diagf(d, -ENOMEM, "out of memory");
                goto out;
            }
            int r = read_rows(ds, 0, T, D, nd, es, buf);
            H5Dclose(ds);
            if (r) {
                rc = cxs_diagf(d, CXS_E_INPUT, "%s: /%s cannot be read (HDF5 error)", in, id);
                goto out;
            }
            res.input_bytes += T * D * es;
            if ((rc = add(w, in, id, buf, T, D, es, skip, note, nu, d))) goto out;
        next_u:
            if ((rc = import_step(NULL, i, 0, nm.n, progress, user, out, "import", d))) goto out;
        }
    }
    rc = import_commit(&w, 0, in, "import", &res, info, d);
out:
    cxs_writer_abort(w);
    if (idv && ids >= 0) {
        for (hsize_t i = 0; i < U; i++) {
            if (vlen_ids) H5free_memory(idv[i]); /* HDF5's allocation */
            else free(idv[i]);
        }
    }
    free(idv);
    free(off);
    free(buf);
    if (feats >= 0) H5Dclose(feats);
    if (offs >= 0) H5Dclose(offs);
    if (ids >= 0) H5Dclose(ids);
    if (f >= 0) H5Fclose(f);
    for (size_t i = 0; i < nm.n; i++) free(nm.v[i]);
    free(nm.v);
    H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
    return rc;
}

#endif
