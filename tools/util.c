#include "util.h"

#include "ctxshard_writer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ctxshard.h"

volatile int g_interrupted;

int exit_code_for(int rc) {
    if (rc == 0) return 0;
    if (rc == CXS_E_INVALID || rc == CXS_E_NO_LABELS) return EXIT_USAGE;
    if (rc < 0 && rc > -4096) return EXIT_SYSTEM;
    return EXIT_DATA;
}

int open_failed(const char *path, int rc, const cxs_diag *d) {
    const char *msg = d && d->message[0] ? d->message : cxs_strerror(rc);
    /* A file the manifest lists that is not there (a shard lost in a copy)
     * is a damaged dataset, exit 1 like any other damage; a path with no
     * dataset at all stays a system error (ENOENT), as documented. */
    char m[4096];
    struct stat st;
    if (rc == -ENOENT && (size_t)snprintf(m, sizeof m, "%s/manifest.cxs", path) < sizeof m &&
        stat(m, &st) == 0 && S_ISREG(st.st_mode)) {
        warnx_("%s (the manifest lists it: the dataset is incomplete; copy it again or re-pack)",
               msg);
        return EXIT_DATA;
    }
    warnx_("%s", msg);
    return exit_code_for(rc);
}

static void on_signal(int sig);

cxs_fetch_info g_fetched;
int g_was_fetched;

static int fetch_tick(void *user, uint64_t done, uint64_t total) {
    progress_update(user, done, total, "bytes");
    return g_interrupted;
}

int open_dataset(const char *path, const cxs_open_opts *opts, cxs_dataset **ds) {
    cxs_diag d = {0};
    int rc;
    if (cxs_is_url(path)) {
        /* a URL: into the cache first, with a progress bar on a terminal
         * and Ctrl-C stopping it (what arrived is kept for the next try) */
        progress p;
        progress_init(&p, "download", 0);
        struct sigaction sa, old_int, old_term;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, &old_int);
        sigaction(SIGTERM, &sa, &old_term);
        rc = cxs_url_fetch(path, opts, fetch_tick, &p, &g_fetched, ds, &d);
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
        progress_done(&p);
        if (rc) return open_failed(path, rc, &d);
        g_was_fetched = 1;
        if (g_fetched.offline)
            warnx_("%s: the server cannot be reached: opened the cache's copy as it is, not "
                   "checked against the server's manifest (a dataset packed again there is not "
                   "noticed)", path);
        else if (!g_fetched.cached && isatty(STDERR_FILENO)) {
            char a[32];
            fprintf(stderr, "%s: downloaded and verified %s in %.1f s\n", path,
                    human_bytes((double)g_fetched.bytes_fetched, a, sizeof a), g_fetched.seconds);
        }
        return 0;
    }
    rc = cxs_dataset_open_ex(path, opts, ds, &d);
    return rc ? open_failed(path, rc, &d) : 0;
}

int open_datasets(const char *cmd, int n, char **paths, const cxs_open_opts *opts,
                  cxs_dataset **ds, int *labels) {
    if (n > (int)CXS_MIX_MAX_SOURCES) {
        warnx_("%s: %d datasets (a mixture holds at most %u)", cmd, n, CXS_MIX_MAX_SOURCES);
        return EXIT_USAGE;
    }
    if (labels) *labels = 1;
    for (int i = 0; i < n; i++) {
        int rc = open_dataset(paths[i], opts, &ds[i]);
        if (rc) {
            while (i--) cxs_dataset_close(ds[i]), ds[i] = NULL;
            return rc;
        }
        cxs_info in;
        cxs_dataset_info(ds[i], &in);
        if (labels) *labels &= in.label_width != 0;
    }
    return 0;
}

static int has(const char *dir, const char *name, int want_dir) {
    char p[4096];
    struct stat st;
    if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, name) >= sizeof p) return 0;
    return stat(p, &st) == 0 && (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

static int visible(const struct dirent *e) { return e->d_name[0] != '.'; }

int raw_path_hint(const char *cmd, const char *raw, const char *out) {
    struct stat st;
    if (stat(raw, &st) != 0 || !S_ISDIR(st.st_mode) || has(raw, "mfcc", 1)) {
        /* Swapped: RAW does not exist (it is the output to be) and OUT is raw. */
        if (out && stat(raw, &st) != 0 && has(out, "mfcc", 1)) {
            warnx_("%s: no such directory, and %s is a raw dataset: RAW and OUT swapped? "
                   "ctxshard %s %s %s",
                   raw, out, cmd, out, raw);
            return EXIT_USAGE;
        }
        return 0; /* a raw dataset, or something the packer explains itself */
    }
    if (has(raw, "manifest.cxs", 0) || has(raw, "part.cxs", 0)) {
        if (out && has(out, "mfcc", 1))
            warnx_("%s: a packed dataset, and %s is a raw one: RAW and OUT swapped? ctxshard "
                   "%s %s %s",
                   raw, out, cmd, out, raw);
        else
            warnx_("%s: a packed dataset, not a raw one (RAW/mfcc/*.npy): %s reads the raw "
                   "split; `ctxshard verify %s` checks a packed one",
                   raw, cmd, raw);
        return EXIT_USAGE;
    }
    /* RAW/mfcc given for RAW, or RAW's parent that holds the splits. */
    size_t n = strlen(raw);
    while (n > 1 && raw[n - 1] == '/') n--;
    char up[4096];
    snprintf(up, sizeof up, "%.*s", (int)n, raw);
    char *slash = strrchr(up, '/');
    const char *base = slash ? slash + 1 : up;
    if (!strcmp(base, "mfcc") || !strcmp(base, "transcript")) {
        if (slash == up) slash[1] = 0;
        else if (slash) *slash = 0;
        else snprintf(up, sizeof up, ".");
        if (has(up, "mfcc", 1)) {
            warnx_("%s: this is the %s/ folder; give the split directory that holds it: "
                   "ctxshard %s %s%s%s",
                   raw, base, cmd, up, out ? " " : "", out ? out : "");
            return EXIT_USAGE;
        }
    }
    struct dirent **list;
    int m = scandir(raw, &list, visible, alphasort);
    char names[1024] = "";
    size_t o = 0, found = 0, shown = 0;
    for (int i = 0; i < m; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", raw, list[i]->d_name);
        if (has(p, "mfcc", 1)) {
            if (shown < 3 && o < sizeof names)
                o += (size_t)snprintf(names + o, sizeof names - o, "%s%s%s%s",
                                      shown ? " or " : "", raw,
                                      raw[strlen(raw) - 1] == '/' ? "" : "/", list[i]->d_name);
            shown += shown < 3;
            found++;
        }
        free(list[i]);
    }
    if (m > 0) free(list);
    if (found) {
        warnx_("%s: holds %zu raw split%s, not one: did you mean %s%s? Give one split: "
               "ctxshard %s RAW%s",
               raw, found, found == 1 ? "" : "s", names, found > 3 ? ", ..." : "", cmd,
               out ? " OUT" : "");
        return EXIT_USAGE;
    }
    return 0;
}

void warnx_(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ctxshard: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-' || *s == '+') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

int parse_size(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-' || *s == '+') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    /* A decimal fraction, with a unit ("1.5G"): the bytes, rounded down. */
    unsigned long long frac = 0, den = 1;
    if (*end == '.') {
        end++;
        if (*end < '0' || *end > '9') return -1;
        for (; *end >= '0' && *end <= '9'; end++)
            if (den < 1000000000ull) {
                frac = frac * 10 + (unsigned)(*end - '0');
                den *= 10;
            }
    }
    unsigned shift = 0;
    if (*end) {
        switch (*end) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        case 't': case 'T': shift = 40; break;
        default: return -1;
        }
        end++;
        if (*end == 'i') end++;
        if (*end == 'B' || *end == 'b') end++;
        if (*end) return -1;
    }
    if (den > 1 && !shift) return -1; /* a fraction of a byte */
    if (shift && v > (UINT64_MAX >> shift)) return -1;
    uint64_t r = (uint64_t)v << shift;
    uint64_t add = (uint64_t)(((unsigned __int128)frac << shift) / den);
    if (r > UINT64_MAX - add) return -1;
    *out = r + add;
    return 0;
}

char *path_join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 2);
    if (!p) return NULL;
    memcpy(p, a, la);
    size_t o = la;
    if (la && a[la - 1] != '/') p[o++] = '/';
    memcpy(p + o, b, lb + 1);
    return p;
}

int write_all(int fd, const void *buf, size_t n) {
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)ftw;
    if (flag == FTW_DP) return rmdir(p) ? 0 : 0;
    unlink(p);
    return 0;
}

int remove_tree(const char *path) {
    if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0) return -errno;
    return 0;
}

const char *human_bytes(double b, char *buf, size_t n) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) {
        b /= 1024;
        i++;
    }
    snprintf(buf, n, i ? "%.1f %s" : "%.0f %s", b, u[i]);
    return buf;
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void progress_init(progress *p, const char *label, int quiet) {
    p->enabled = !quiet && isatty(STDERR_FILENO);
    p->start = now_seconds();
    p->last = 0;
    p->label = label;
}

void progress_update(progress *p, uint64_t done, uint64_t total, const char *unit) {
    if (!p->enabled) return;
    double t = now_seconds();
    if (t - p->last < 0.1 && done < total) return;
    p->last = t;
    int width = 30, fill = total ? (int)((double)done / (double)total * width) : width;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[width] = 0;
    fprintf(stderr, "\r%s [%s] %3.0f%% %llu/%llu %s", p->label, bar,
            total ? 100.0 * (double)done / (double)total : 100.0, (unsigned long long)done,
            (unsigned long long)total, unit);
    fflush(stderr);
}

void progress_done(progress *p) {
    if (p->enabled) fputs("\r\033[K", stderr);
}

static void on_signal(int sig) {
    (void)sig;
    g_interrupted = 1;
}

void install_signal_flag(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

void json_print_string(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

int commit_writer(struct cxs_writer *w, struct cxs_writer_info *info) {
    cxs_diag d = {0};
    int rc = cxs_writer_commit(w, info, &d);
    if (!rc) return 0;
    warnx_("%s", d.message);
    /* OUT became something that is not a dataset meanwhile: refused as
     * at create */
    return rc == -EEXIST ? EXIT_USAGE : EXIT_SYSTEM;
}
