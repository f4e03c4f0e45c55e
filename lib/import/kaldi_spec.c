/* kaldi_spec.c - what names the input of a Kaldi import (kaldi_import.h):
 * Kaldi's rspecifiers and wspecifiers (`ark,t:FILE`, `scp,s,cs:FILE`,
 * `ark,scp:A.ark,A.scp`), read as src/util/kaldi-table.cc's
 * ClassifyRspecifier and ClassifyWspecifier read them, and the paths that
 * are not files this importer can read (a pipe, standard input, a Kaldi
 * data directory), refused with what to give instead.
 *
 * The options before the ':' are split on ',' and ' ' with empty strings
 * kept (Kaldi's SplitStringToVector(..., ", ", false, ...)), so an empty
 * option is an error, as in Kaldi.  The import reads every object once, in
 * id order, so most options change nothing here: b and t (binary or text:
 * each object says which by its bytes), o/no (each key read once), cs/ncs
 * (keys asked for in sorted order), ns/np (Kaldi's defaults), bg (a reading
 * thread), f/nf (a writer's flush).  s (sorted) is a promise this importer
 * checks, as Kaldi's sorted random-access readers do: an unsorted listing
 * is refused instead of sorted.  p (permissive: Kaldi skips what it cannot
 * read, or for an archive stops there, without an error) is refused: it
 * would drop utterances without naming them, and --on-error skip leaves
 * bad utterances out and lists them. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cxs_format.h"
#include "kaldi_import.h"

/* Options that change nothing for an import that reads everything once. */
static const char *const harmless[] = {"b", "t", "o", "no", "cs", "ncs", "ns", "np", "bg", "f",
                                       "nf"};

static int is_harmless(const char *t, size_t n) {
    for (size_t i = 0; i < sizeof harmless / sizeof *harmless; i++)
        if (strlen(harmless[i]) == n && !memcmp(harmless[i], t, n)) return 1;
    return 0;
}

static int tok_is(const char *t, size_t n, const char *w) {
    return strlen(w) == n && !memcmp(t, w, n);
}

static int is_opt_sep(char c) { return c == ',' || c == ' '; }

static int file_exists(const char *dir, const char *name) {
    char p[4096];
    struct stat st;
    if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, name) >= sizeof p) return 0;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* A path that is not a file the importer reads: a pipe, standard input, a
 * directory.  what: "features", "text", "alignment".  0 when it is none
 * of them (it may still not exist: that is for the open to say). */
static int not_a_file(const char *spec, const char *path, const char *what, cxs_diag *d) {
    size_t n = strlen(path);
    const char *copy_feats = !strcmp(what, "features")
                                 ? " (run it into an archive first, e.g. `copy-feats "
                                   "scp:data/train/feats.scp ark,scp:feats.ark,feats.scp`, or "
                                   "end the pipe in `ark,scp:feats.ark,feats.scp`, and import "
                                   "feats.scp)"
                                 : " (run it into a file first, e.g. `ali-to-phones "
                                   "--per-frame=true ... ark,t:ali.txt`, and give that file)";
    if (n == 0 || !strcmp(path, "-"))
        return cxs_diagf(d, CXS_E_INPUT, "'%s': standard input is not read: only files are "
                         "(write the %s to a file first and give its name)", spec, what);
    if (path[n - 1] == '|')
        return cxs_diagf(d, CXS_E_INPUT, "'%s' is a pipe (a command ending in '|'): only files "
                         "are read%s", spec, copy_feats);
    if (path[0] == '|')
        return cxs_diagf(d, CXS_E_INPUT, "'%s' is an output pipe (a wxfilename starting with "
                         "'|'), not something to read", spec);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        const char *sl = path[n - 1] == '/' ? "" : "/";
        if (strcmp(what, "features")) {
            const int txt = !strcmp(what, "text") && file_exists(path, "text");
            return cxs_diagf(d, CXS_E_INPUT, "%s: a directory, where the %s file was expected%s%s"
                             "%s%s", path, what, txt ? " (give " : "", txt ? path : "",
                             txt ? sl : "", txt ? "text)" : "");
        }
        const int scp = file_exists(path, "feats.scp"), txt = file_exists(path, "text");
        if (scp)
            return cxs_diagf(d, CXS_E_INPUT, "%s: a directory; a Kaldi data directory is "
                             "imported through its feats.scp: give %s%sfeats.scp%s%s%s%s", path,
                             path, sl, txt ? " (and its transcripts with --text " : "",
                             txt ? path : "", txt ? sl : "", txt ? "text)" : "");
        return cxs_diagf(d, CXS_E_INPUT, "%s: a directory without a feats.scp; give the "
                         "feats.scp of a Kaldi data directory (DIR/feats.scp, written by "
                         "steps/make_mfcc.sh or steps/make_fbank.sh) or an archive (.ark)",
                         path);
    }
    return 0;
}

int kaldi_spec_parse(const char *in, const char *what, kaldi_spec *s, cxs_diag *d) {
    memset(s, 0, sizeof *s);
    s->path = in;
    const char *colon = strchr(in, ':');
    size_t n = strlen(in);
    /* a command, with or without ark: before it (its own ':' and spaces
     * are no options) */
    if (n && (in[n - 1] == '|' || in[0] == '|')) colon = NULL;
    if (colon) {
        /* Is what stands before the ':' a specifier's options?  It is when
         * one of them is ark or scp; when none is and they are all options,
         * the kind is missing; otherwise it is part of a file name. */
        int kinds = 0, unknown = 0, any_opt = 0;
        const char *first_unknown = NULL;
        size_t fu_len = 0;
        for (const char *t = in; t <= colon;) {
            const char *e = t;
            while (e < colon && !is_opt_sep(*e)) e++;
            size_t tl = (size_t)(e - t);
            if (tok_is(t, tl, "ark") || tok_is(t, tl, "scp")) kinds++;
            else if (is_harmless(t, tl) || tok_is(t, tl, "s") || tok_is(t, tl, "p")) any_opt = 1;
            else if (!unknown++) {
                first_unknown = t;
                fu_len = tl;
            }
            t = e + 1;
        }
        if (kinds == 0 && unknown == 0 && any_opt)
            return cxs_diagf(d, CXS_E_INPUT, "'%s': Kaldi options before the ':' but neither ark "
                             "nor scp (e.g. ark,t:FILE or scp:FILE)", in);
        if (kinds) {
            if (unknown) {
                if (fu_len == 0)
                    return cxs_diagf(d, CXS_E_INPUT, "'%s': an empty option before the ':' (two "
                                     "commas, or a comma at an end), which Kaldi refuses too",
                                     in);
                return cxs_diagf(d, CXS_E_INPUT, "'%s': option '%.*s' is not one of Kaldi's "
                                 "(ark, scp, b, t, s, ns, cs, ncs, o, no, p, np, bg, f, nf)", in,
                                 (int)(fu_len > 32 ? 32 : fu_len), first_unknown);
            }
            if (kaldi_is_space((unsigned char)in[n - 1]))
                return cxs_diagf(d, CXS_E_INPUT, "'%s': ends in white space, which Kaldi "
                                 "refuses in a specifier", in);
            int kind = 0; /* 1 ark, 2 scp, 3 ark,scp */
            for (const char *t = in; t <= colon;) {
                const char *e = t;
                while (e < colon && !is_opt_sep(*e)) e++;
                size_t tl = (size_t)(e - t);
                if (tok_is(t, tl, "ark")) {
                    if (kind)
                        return cxs_diagf(d, CXS_E_INPUT, "'%s': %s then ark: Kaldi takes ark "
                                         "and scp together only as a wspecifier's "
                                         "ark,scp:ARCHIVE,SCRIPT", in,
                                         kind == 1 ? "ark" : "scp");
                    kind = 1;
                } else if (tok_is(t, tl, "scp")) {
                    if (kind & 2)
                        return cxs_diagf(d, CXS_E_INPUT, "'%s': scp twice", in);
                    kind |= 2;
                } else if (tok_is(t, tl, "s")) {
                    s->sorted = 1;
                } else if (tok_is(t, tl, "p")) {
                    return cxs_diagf(d, CXS_E_INPUT, "'%s': option p (permissive: Kaldi skips "
                                     "objects it cannot read, or stops reading an archive "
                                     "there, without an error) is not taken: it would drop "
                                     "utterances without naming them; --on-error skip leaves "
                                     "bad utterances out and lists them", in);
                }
                t = e + 1;
            }
            s->path = colon + 1;
            if (kind == 3) {
                /* a wspecifier: ark,scp:ARCHIVE,SCRIPT (the first comma
                 * parts them); the archive holds every object */
                const char *comma = strchr(colon + 1, ',');
                if (!comma || comma == colon + 1 || !comma[1])
                    return cxs_diagf(d, CXS_E_INPUT, "'%s': ark,scp: names an archive and a "
                                     "script, ark,scp:ARCHIVE,SCRIPT", in);
                if (!(s->own = strndup(colon + 1, (size_t)(comma - colon - 1))))
                    return cxs_diagf(d, -ENOMEM, "out of memory");
                s->path = s->own;
                s->both = 1;
                kind = 1;
            }
            s->kind = kind == 1 ? KALDI_SPEC_ARK : KALDI_SPEC_SCP;
        }
    }
    int rc = not_a_file(in, s->path, what, d);
    if (rc) kaldi_spec_free(s);
    return rc;
}

void kaldi_spec_free(kaldi_spec *s) {
    free(s->own);
    s->own = NULL;
}

static int has_suffix(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

int kaldi_input_kind(const kaldi_spec *s, cxs_diag *d) {
    if (s->kind) return s->kind == KALDI_SPEC_SCP;
    const char *in = s->path;
    if (has_suffix(in, ".scp")) return 1;
    if (has_suffix(in, ".ark")) return 0;
    /* by the bytes: an archive has a NUL (the binary marker) after its first id */
    int fd = open(in, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cxs_diagf(d, errno == ENOENT ? CXS_E_INPUT : -errno, "%s: %s", in, strerror(errno));
    uint8_t b[CXS_MAX_ID_LEN + 8];
    size_t got = 0;
    int rc = kaldi_pread_all(fd, b, sizeof b, 0, &got);
    close(fd);
    if (rc) return cxs_diagf(d, rc, "%s: %s", in, strerror(-rc));
    if (memchr(b, 0, got)) return 0;
    /* a text archive: `key [` (the first line's second token opens a matrix) */
    size_t i = 0;
    while (i < got && kaldi_is_space(b[i])) i++;
    while (i < got && !kaldi_is_space(b[i])) i++;
    while (i < got && (b[i] == ' ' || b[i] == '\t')) i++;
    return i < got && b[i] == '[' ? 0 : 1;
}
