/* util.h - small helpers of the ctxshard command. */
#ifndef CXS_TOOL_UTIL_H
#define CXS_TOOL_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ctxshard.h"

/* Exit codes of the command. */
#define EXIT_DATA 1   /* invalid or corrupt data */
#define EXIT_USAGE 2  /* usage error */
#define EXIT_SYSTEM 3 /* system error */

/* Exit code for a library return code. */
int exit_code_for(int rc);

/* Open a packed dataset (opts may be NULL); on failure print "ctxshard:
 * <the library's message>" (which says what a wrong path most likely is)
 * and return the exit code. */
struct cxs_dataset;
struct cxs_open_opts;
struct cxs_diag;
/* Print the failure of opening the dataset at path (rc, the library's
 * message in d) and return its exit code: 1 for a file the manifest lists
 * that is missing, else exit_code_for(rc). */
int open_failed(const char *path, int rc, const struct cxs_diag *d);
int open_dataset(const char *path, const struct cxs_open_opts *opts, struct cxs_dataset **ds);
/* The n datasets of a mixture (cmd names the command in a message): 0, or
 * the exit code with those opened so far closed (ds[] NULL).  *labels
 * (may be NULL): whether every one has frame labels. */
int open_datasets(const char *cmd, int n, char **paths, const struct cxs_open_opts *opts,
                  struct cxs_dataset **ds, int *labels);

/* pack and check: a RAW (and OUT) of the wrong shape said in words before
 * the packer runs: a packed dataset given as RAW, RAW and OUT swapped,
 * RAW/mfcc instead of RAW, the parent of several splits.  Returns 0 when
 * nothing is recognised, else the exit code after printing the message. */
int raw_path_hint(const char *cmd, const char *raw, const char *out);

/* Print "ctxshard: message" to stderr. */
void warnx_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

struct cxs_writer;
struct cxs_writer_info;
/* Commit a writer (freed either way), saying why when it fails: 0, or
 * EXIT_SYSTEM after the message (which names OUT). */
int commit_writer(struct cxs_writer *w, struct cxs_writer_info *info);

int parse_u64(const char *s, uint64_t *out);
/* Bytes with an optional K, M, G or T suffix (powers of 1024). */
int parse_size(const char *s, uint64_t *out);

char *path_join(const char *a, const char *b);
/* Write all of buf or return -errno. */
int write_all(int fd, const void *buf, size_t n);
/* Remove a tree (no symlink following).  Best effort; returns 0 or -errno. */
int remove_tree(const char *path);

/* Human-readable byte count into buf. */
const char *human_bytes(double bytes, char *buf, size_t n);
double now_seconds(void);
/* s[n] as a JSON string literal on stdout. */
void json_print_string(const char *s, size_t n);

/* Progress bar on stderr, shown only on a terminal. */
typedef struct progress {
    int enabled;
    double start, last;
    const char *label;
} progress;
void progress_init(progress *p, const char *label, int quiet);
void progress_update(progress *p, uint64_t done, uint64_t total, const char *unit);
void progress_done(progress *p);

/* Set by SIGINT/SIGTERM/SIGHUP once install_signal_flag() ran. */
extern volatile int g_interrupted;
/* What open_dataset() fetched, when its path was a URL (g_was_fetched). */
extern cxs_fetch_info g_fetched;
extern int g_was_fetched;
void install_signal_flag(void);

#endif
