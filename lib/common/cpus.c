/* cpus.c - how many CPUs this process may use, and the thread count every
 * part of the library defaults to.
 *
 * sysconf(_SC_NPROCESSORS_ONLN) counts the machine's CPUs, not the
 * process's: under taskset, in a container with a CPU quota or in a job
 * of a cluster's scheduler (Slurm and Kubernetes both use cgroup quotas),
 * a loader sized from it runs more threads than it has CPUs, and they
 * take turns with the training process.  So the count here is the
 * affinity mask, capped by the CPU quota of every cgroup above the
 * process (the tightest one wins, rounded up: 1.5 CPUs allow 2 threads),
 * found through /proc/self/cgroup and /proc/self/mountinfo as the
 * runtimes of Go and Java find theirs.  cgroup v2 (cpu.max) and v1
 * (cpu.cfs_quota_us / cpu.cfs_period_us) are both read; a hierarchy that
 * cannot be read limits nothing. */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctxshard.h"

/* The first line of a small file, or 0 when it cannot be read. */
static int read_line(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    int ok = fgets(buf, (int)n, f) != NULL;
    fclose(f);
    return ok;
}

/* The quota of one cgroup directory in CPUs (> 0), or 0 for none. */
static double dir_quota(const char *dir, int v2) {
    char path[PATH_MAX + 32], line[128];
    if (v2) {
        snprintf(path, sizeof path, "%s/cpu.max", dir);
        if (!read_line(path, line, sizeof line) || strncmp(line, "max", 3) == 0) return 0;
        double q, p;
        if (sscanf(line, "%lf %lf", &q, &p) != 2 || q <= 0 || p <= 0) return 0;
        return q / p;
    }
    snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
    if (!read_line(path, line, sizeof line)) return 0;
    double q = strtod(line, NULL), p;
    if (q <= 0) return 0; /* -1: no quota */
    snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
    if (!read_line(path, line, sizeof line) || (p = strtod(line, NULL)) <= 0) return 0;
    return q / p;
}

/* The tightest quota from dir up to the hierarchy's mount point root. */
static double walk_quota(char *dir, size_t root_len, int v2) {
    double best = 0;
    for (;;) {
        double q = dir_quota(dir, v2);
        if (q > 0 && (best == 0 || q < best)) best = q;
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= root_len || !slash || (size_t)(slash - dir) < root_len) break;
        *slash = 0;
    }
    return best;
}

/* Whether a comma-separated list holds the word w. */
static int has_word(const char *list, const char *w) {
    size_t n = strlen(w);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, w, n) == 0) return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* The process's cgroup path in the v2 hierarchy (v2 set) or in the v1
 * hierarchy holding the cpu controller, from /proc/self/cgroup. */
static int cgroup_path(int v2, char *out, size_t n) {
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f) return 0;
    char line[PATH_MAX + 256];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = 0;
        int match = v2 ? strcmp(line, "0") == 0 && c1[1] == 0 : has_word(c1 + 1, "cpu");
        if (match && strlen(c2 + 1) < n) {
            strcpy(out, c2 + 1);
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* The quota of the process's cgroups in the hierarchies mounted as
 * fstype (cgroup2, or cgroup with the cpu controller), or 0. */
static double hierarchy_quota(int v2) {
    char cg[PATH_MAX];
    if (!cgroup_path(v2, cg, sizeof cg)) return 0;
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f) return 0;
    char line[3 * PATH_MAX];
    double best = 0;
    while (fgets(line, sizeof line, f)) {
        /* id parent major:minor root mountpoint options [optional...] - fstype source super */
        char root[PATH_MAX], mnt[PATH_MAX];
        if (sscanf(line, "%*s %*s %*s %4095s %4095s", root, mnt) != 2) continue;
        const char *dash = strstr(line, " - ");
        if (!dash) continue;
        char fstype[64], super[512];
        if (sscanf(dash + 3, "%63s %*s %511s", fstype, super) != 2) continue;
        if (v2 ? strcmp(fstype, "cgroup2") != 0
               : strcmp(fstype, "cgroup") != 0 || !has_word(super, "cpu"))
            continue;
        /* the process's directory under this mount: its path less the
         * mount's root (a container sees its own cgroup as "/") */
        const char *rel = cg;
        size_t rl = strlen(root);
        if (strcmp(root, "/") != 0) {
            if (strncmp(cg, root, rl) != 0 || (cg[rl] && cg[rl] != '/')) continue;
            rel = cg + rl;
        }
        char dir[PATH_MAX + 8];
        if ((size_t)snprintf(dir, sizeof dir, "%s%s", mnt, strcmp(rel, "/") == 0 ? "" : rel) >=
            sizeof dir)
            continue;
        double q = walk_quota(dir, strlen(mnt), v2);
        if (q > 0 && (best == 0 || q < best)) best = q;
    }
    fclose(f);
    return best;
}

unsigned cxs_cpu_count(void) {
    unsigned n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = (unsigned)CPU_COUNT(&set);
    if (!n) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (unsigned)c : 1;
    }
    for (int v2 = 0; v2 <= 1; v2++) {
        double q = hierarchy_quota(v2);
        if (q > 0) {
            unsigned m = q >= n ? n : (unsigned)q + (q > (unsigned)q);
            if (m < n) n = m ? m : 1;
        }
    }
    return n;
}

unsigned cxs_default_threads(void) {
    unsigned n = cxs_cpu_count();
    return n > CXS_DEFAULT_THREADS_MAX ? CXS_DEFAULT_THREADS_MAX : n;
}
