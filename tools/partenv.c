/* partenv.c - the part to pack, from the job launcher's environment
 * (`ctxshard pack RAW OUT --part env`). */
#include "partenv.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* A variable's value: 0 when unset or empty (*set = 0), 0 with *v when it
 * is a decimal number, -1 with a message otherwise.  Launchers write plain
 * decimals; anything else is a mistake worth naming. */
static int env_num(const char *name, uint64_t *v, int *set, char *err, size_t err_len) {
    const char *s = getenv(name);
    *set = 0;
    if (!s || !*s) return 0;
    uint64_t x = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9' && p - s < 12; p++) x = x * 10 + (uint64_t)(*p - '0');
    if (*p) {
        snprintf(err, err_len, "%s='%s' is not a number", name, s);
        return -1;
    }
    *v = x;
    *set = 1;
    return 0;
}

static int fail(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t err_len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return -1;
}

/* A Slurm array task: *found = 0 when SLURM_ARRAY_TASK_ID is not set. */
static int from_slurm(int *found, uint64_t *part, uint64_t *parts, char *from, size_t from_len,
                      char *err, size_t err_len) {
    uint64_t id = 0, min = 0, max = 0, count = 0, step = 0;
    int has_id, has_min, has_max, has_count, has_step;
    *found = 0;
    if (env_num("SLURM_ARRAY_TASK_ID", &id, &has_id, err, err_len) ||
        env_num("SLURM_ARRAY_TASK_MIN", &min, &has_min, err, err_len) ||
        env_num("SLURM_ARRAY_TASK_MAX", &max, &has_max, err, err_len) ||
        env_num("SLURM_ARRAY_TASK_COUNT", &count, &has_count, err, err_len) ||
        env_num("SLURM_ARRAY_TASK_STEP", &step, &has_step, err, err_len))
        return -1;
    if (!has_id) return 0;
    if (!has_min)
        return fail(err, err_len, "SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_MIN is not: "
                                  "cannot tell the array's first task");
    if (!has_count && !has_max)
        return fail(err, err_len, "SLURM_ARRAY_TASK_ID is set but neither SLURM_ARRAY_TASK_COUNT "
                                  "nor SLURM_ARRAY_TASK_MAX: cannot tell the number of parts");
    if (has_max && max < min)
        return fail(err, err_len, "SLURM_ARRAY_TASK_MAX=%llu is below SLURM_ARRAY_TASK_MIN=%llu",
                    (unsigned long long)max, (unsigned long long)min);
    if (has_step && step != 1)
        return fail(err, err_len, "SLURM_ARRAY_TASK_STEP=%llu: the array's task ids must be "
                                  "consecutive (--array=A-B) to number the parts",
                    (unsigned long long)step);
    if (has_count && has_max && count != max - min + 1)
        return fail(err, err_len, "SLURM_ARRAY_TASK_COUNT=%llu but the ids run from %llu to %llu: "
                                  "the array's task ids must be consecutive (--array=A-B), not a list",
                    (unsigned long long)count, (unsigned long long)min, (unsigned long long)max);
    uint64_t n = has_count ? count : max - min + 1;
    if (n < 1 || n > PART_ENV_MAX_PARTS)
        return fail(err, err_len, "a Slurm array of %llu tasks: parts must number 1..%u",
                    (unsigned long long)n, PART_ENV_MAX_PARTS);
    if (id < min || id - min >= n)
        return fail(err, err_len, "SLURM_ARRAY_TASK_ID=%llu is outside the array (%llu tasks from %llu)",
                    (unsigned long long)id, (unsigned long long)n, (unsigned long long)min);
    *part = id - min + 1;
    *parts = n;
    if (has_count)
        snprintf(from, from_len, "SLURM_ARRAY_TASK_ID=%llu SLURM_ARRAY_TASK_MIN=%llu SLURM_ARRAY_TASK_COUNT=%llu",
                 (unsigned long long)id, (unsigned long long)min, (unsigned long long)count);
    else
        snprintf(from, from_len, "SLURM_ARRAY_TASK_ID=%llu SLURM_ARRAY_TASK_MIN=%llu SLURM_ARRAY_TASK_MAX=%llu",
                 (unsigned long long)id, (unsigned long long)min, (unsigned long long)max);
    *found = 1;
    return 0;
}

/* An MPI rank: *found = 0 when no rank variable is set. */
static int from_mpi(int *found, uint64_t *part, uint64_t *parts, char *from, size_t from_len,
                    char *err, size_t err_len) {
    static const char *const ranks[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    /* The size that goes with each rank variable, in order of preference
     * (PMIx itself exports no size: Open MPI's, PMI's or srun's step). */
    static const char *const sizes[][3] = {{"OMPI_COMM_WORLD_SIZE", NULL, NULL},
                                           {"PMI_SIZE", NULL, NULL},
                                           {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}};
    const char *rank_name = NULL;
    uint64_t rank = 0;
    int which = -1;
    *found = 0;
    for (int i = 0; i < 3; i++) {
        uint64_t r;
        int set;
        if (env_num(ranks[i], &r, &set, err, err_len)) return -1;
        if (!set) continue;
        if (!rank_name) {
            rank_name = ranks[i];
            rank = r;
            which = i;
        } else if (r != rank) {
            return fail(err, err_len, "%s=%llu and %s=%llu disagree", rank_name,
                        (unsigned long long)rank, ranks[i], (unsigned long long)r);
        }
    }
    if (!rank_name) return 0;
    const char *size_name = NULL;
    uint64_t size = 0;
    for (int j = 0; j < 3 && sizes[which][j] && !size_name; j++) {
        int set;
        if (env_num(sizes[which][j], &size, &set, err, err_len)) return -1;
        if (set) size_name = sizes[which][j];
    }
    if (!size_name)
        return fail(err, err_len, "%s is set but %s: cannot tell the number of parts", rank_name,
                    which == 0   ? "OMPI_COMM_WORLD_SIZE is not"
                    : which == 1 ? "PMI_SIZE is not"
                                 : "none of OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_STEP_NUM_TASKS is");
    if (size < 1 || size > PART_ENV_MAX_PARTS)
        return fail(err, err_len, "%s=%llu: parts must number 1..%u", size_name,
                    (unsigned long long)size, PART_ENV_MAX_PARTS);
    if (rank >= size)
        return fail(err, err_len, "%s=%llu is not below %s=%llu", rank_name,
                    (unsigned long long)rank, size_name, (unsigned long long)size);
    *part = rank + 1;
    *parts = size;
    snprintf(from, from_len, "%s=%llu %s=%llu", rank_name, (unsigned long long)rank, size_name,
             (unsigned long long)size);
    *found = 1;
    return 0;
}

int part_from_env(uint32_t *part, uint32_t *parts, char *from, size_t from_len, char *err,
                  size_t err_len) {
    uint64_t sp = 0, sn = 0, mp = 0, mn = 0;
    int slurm, mpi;
    char sfrom[192] = "", mfrom[192] = "";
    if (from_len) from[0] = 0;
    if (err_len) err[0] = 0;
    if (from_slurm(&slurm, &sp, &sn, sfrom, sizeof sfrom, err, err_len) ||
        from_mpi(&mpi, &mp, &mn, mfrom, sizeof mfrom, err, err_len))
        return -1;
    if (slurm && mpi && mn > 1)
        return fail(err, err_len, "both a Slurm array task (%s) and one of several MPI ranks (%s): "
                                  "which one numbers the parts is ambiguous; give --part I/N",
                    sfrom, mfrom);
    if (!slurm && !mpi)
        return fail(err, err_len,
                    "no part in the environment: expected a Slurm array task (SLURM_ARRAY_TASK_ID "
                    "and SLURM_ARRAY_TASK_MIN, with SLURM_ARRAY_TASK_COUNT or SLURM_ARRAY_TASK_MAX) "
                    "or an MPI rank (OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE, PMI_RANK and "
                    "PMI_SIZE, or PMIX_RANK); outside a job launcher give --part I/N");
    *part = (uint32_t)(slurm ? sp : mp);
    *parts = (uint32_t)(slurm ? sn : mn);
    snprintf(from, from_len, "%s", slurm ? sfrom : mfrom);
    return 0;
}
