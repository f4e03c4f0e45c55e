/* writer_internal.h - what writer.c and writer_out.c share. */
#ifndef CXS_WRITER_INTERNAL_H
#define CXS_WRITER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* The fault-injection state (writer_out.c). */
typedef struct cxs_wfault {
    char action[8];
    char phase[32];
    long n;
    uint64_t enospc_after; /* 0: off */
    uint64_t written;
} cxs_wfault;

void cxs_wfault_init(cxs_wfault *f);
void cxs_wfault_point(cxs_wfault *f, const char *phase);

char *cxs_path_join(const char *a, const char *b);
int cxs_write_all(int fd, const void *buf, size_t n);
/* Remove a tree (no symlink following).  Best effort; 0 or -errno. */
int cxs_remove_tree(const char *path);
/* 0: OUT absent or an empty directory (removed), or a previous output
 * holding marker (*replace = 1); 1: something else; -errno. */
int cxs_out_state(const char *out, const char *marker, int *replace);
/* ".OUT.tmp-HOST-PID-XXXXXX" beside OUT, or NULL (errno). */
char *cxs_make_tmpdir(const char *out);
/* Remove temporary directories of OUT whose process is gone; how many. */
uint32_t cxs_remove_stale(const char *out);
/* fsync tmp, rename it to OUT (exchanging with a previous output). */
int cxs_commit_output(cxs_wfault *f, const char *tmp, const char *out, int replace);

#endif
