/* open_hint.c - what a path that is not a dataset most likely is.
 *
 * The usual mistakes are paths one level off: the raw split instead of
 * the packed dataset, its mfcc/ folder, the folder that holds several
 * splits or datasets, or a file that has nothing to do with ctxshard.
 * Saying "manifest.cxs: No such file or directory" about them is true and
 * useless; these messages say what was meant. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctxshard.h"
#include "cxs_format.h"
#include "dataset_internal.h"

static int is_dir(const char *a, const char *b) {
    char p[4096];
    struct stat st;
    if ((size_t)snprintf(p, sizeof p, "%s/%s", a, b) >= sizeof p) return 0;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *a, const char *b, const char *c) {
    char p[4096];
    struct stat st;
    if ((size_t)snprintf(p, sizeof p, "%s/%s/%s", a, b, c) >= sizeof p) return 0;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int is_raw(const char *a, const char *b) {
    char p[4096];
    if ((size_t)snprintf(p, sizeof p, "%s/%s", a, b) >= sizeof p) return 0;
    return is_dir(p, "mfcc");
}

static int visible_dir(const struct dirent *e) { return e->d_name[0] != '.'; }

/* Up to three children of dir that satisfy kind (1 dataset, 2 raw split,
 * 3 partial dataset), as "dir/a, dir/b or dir/c"; their number. */
static size_t children(const char *dir, int kind, char *out, size_t cap, char *first,
                       size_t fcap) {
    struct dirent **list;
    int n = scandir(dir, &list, visible_dir, alphasort);
    const char *sl = dir[strlen(dir) - 1] == '/' ? "" : "/";
    size_t found = 0, o = 0;
    int pick[3];
    out[0] = 0;
    if (n < 0) return 0;
    for (int i = 0; i < n; i++) {
        const char *c = list[i]->d_name;
        int hit = kind == 1   ? is_file(dir, c, CXS_MANIFEST_NAME)
                  : kind == 2 ? is_raw(dir, c)
                              : is_file(dir, c, "part.cxs");
        if (hit && found < 3) pick[found] = i;
        found += (size_t)hit;
    }
    if (found) snprintf(first, fcap, "%s", list[pick[0]]->d_name);
    size_t shown = found < 3 ? found : 3;
    for (size_t j = 0; j < shown && o < cap; j++) {
        const char *sep = j == 0 ? "" : (j + 1 == shown && found <= 3) ? " or " : ", ";
        o += (size_t)snprintf(out + o, cap - o, "%s%s%s%s", sep, dir, sl,
                              list[pick[j]]->d_name);
    }
    if (found > 3 && o < cap) snprintf(out + o, cap - o, " or another %zu", found - 3);
    for (int i = 0; i < n; i++) free(list[i]);
    free(list);
    return found;
}

/* The parent directory of path ("." when it has none). */
static void parent_of(const char *path, char *out, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    while (n && path[n - 1] != '/') n--;
    while (n > 1 && path[n - 1] == '/') n--;
    if (!n) snprintf(out, cap, ".");
    else snprintf(out, cap, "%.*s", (int)n, path);
}

static const char *base_of(const char *path, char *out, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t s = n;
    while (s && path[s - 1] != '/') s--;
    snprintf(out, cap, "%.*s", (int)(n - s), path + s);
    return out;
}

int cxs_explain_not_dataset(const char *path, int path_is_dir, cxs_diag *d) {
    char list[512], up[4096], base[256], first[256];
    if (!path_is_dir)
        return cxs_diagf(d, CXS_E_INVALID,
                         "%s: not a ctxshard dataset: give the directory `ctxshard pack` "
                         "wrote (the one holding manifest.cxs), its manifest.cxs or one "
                         "shard-NNNNNN.cxs file",
                         path);
    if (is_dir(path, "mfcc"))
        return cxs_diagf(d, CXS_E_INVALID,
                         "%s: this is a raw dataset (it has mfcc/), not a packed one: pack it "
                         "first: ctxshard pack %s OUT",
                         path, path);
    parent_of(path, up, sizeof up);
    base_of(path, base, sizeof base);
    if ((!strcmp(base, "mfcc") || !strcmp(base, "transcript")) && is_dir(up, "mfcc"))
        return cxs_diagf(d, CXS_E_INVALID,
                         "%s: this is the %s/ folder of the raw dataset %s, not a packed "
                         "dataset: pack the raw dataset first: ctxshard pack %s OUT",
                         path, base, up, up);
    if (is_file(path, ".", "shard-000000.cxs"))
        return cxs_diagf(d, CXS_E_INVALID,
                         "%s: shard files but no manifest.cxs: an incomplete copy of a dataset; "
                         "copy it again or pack it again (one shard alone opens as "
                         "%s/shard-000000.cxs)",
                         path, path);
    if (children(path, 1, list, sizeof list, first, sizeof first))
        return cxs_diagf(d, CXS_E_INVALID,
                         "%s: not a dataset but a folder of datasets: did you mean %s?", path,
                         list);
    if (children(path, 2, list, sizeof list, first, sizeof first))
        return cxs_diagf(d, CXS_E_INVALID,
                         "%s: a folder of raw datasets, not a packed dataset: did you mean %s? "
                         "Pack one first: ctxshard pack %s%s%s OUT",
                         path, list, path, path[strlen(path) - 1] == '/' ? "" : "/", first);
    if (children(path, 3, list, sizeof list, first, sizeof first))
        return cxs_diagf(d, CXS_E_INVALID,
                         "%s: a folder of partial datasets (%s): join them first: ctxshard "
                         "merge PART... OUT",
                         path, list);
    return cxs_diagf(d, CXS_E_INVALID,
                     "%s: not a ctxshard dataset (no manifest.cxs in it): give the directory "
                     "`ctxshard pack` wrote",
                     path);
}
