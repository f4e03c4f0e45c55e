/* `ctxshard pack --part env`: the part from a Slurm array task or an MPI
 * rank, and a message naming the variables when there is none or they make
 * no sense. */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cxs_test.h"
#include "partenv.h"

static const char *const all_vars[] = {
    "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_STEP", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_NUM_TASKS"};

/* A clean environment, then NAME=VALUE pairs, NULL-terminated. */
static void env(const char *name, ...) {
    for (size_t i = 0; i < sizeof all_vars / sizeof *all_vars; i++) unsetenv(all_vars[i]);
    va_list ap;
    va_start(ap, name);
    for (const char *n = name; n; n = va_arg(ap, const char *)) setenv(n, va_arg(ap, const char *), 1);
    va_end(ap);
}

static uint32_t part, parts;
static char from[256], err[512];

static int resolve(void) {
    part = parts = 0;
    return part_from_env(&part, &parts, from, sizeof from, err, sizeof err);
}

TEST(slurm_array) {
    /* --array=0-15 (0-based), task 0: the first of 16 */
    env("SLURM_ARRAY_TASK_ID", "0", "SLURM_ARRAY_TASK_MIN", "0", "SLURM_ARRAY_TASK_MAX", "15",
        "SLURM_ARRAY_TASK_COUNT", "16", "SLURM_ARRAY_TASK_STEP", "1", NULL);
    EXPECT_INT(resolve(), 0);
    EXPECT_UINT(part, 1);
    EXPECT_UINT(parts, 16);
    EXPECT_STR_HAS(from, "SLURM_ARRAY_TASK_ID=0");
    /* --array=1-16, task 16: the last */
    env("SLURM_ARRAY_TASK_ID", "16", "SLURM_ARRAY_TASK_MIN", "1", "SLURM_ARRAY_TASK_COUNT", "16",
        NULL);
    EXPECT_INT(resolve(), 0);
    EXPECT_UINT(part, 16);
    EXPECT_UINT(parts, 16);
    /* --array=5-7 with only MIN/MAX */
    env("SLURM_ARRAY_TASK_ID", "6", "SLURM_ARRAY_TASK_MIN", "5", "SLURM_ARRAY_TASK_MAX", "7", NULL);
    EXPECT_INT(resolve(), 0);
    EXPECT_UINT(part, 2);
    EXPECT_UINT(parts, 3);
    EXPECT_STR_HAS(from, "SLURM_ARRAY_TASK_MAX=7");
    /* inside an array task, a single srun/mpirun rank does not count */
    env("SLURM_ARRAY_TASK_ID", "3", "SLURM_ARRAY_TASK_MIN", "1", "SLURM_ARRAY_TASK_MAX", "4",
        "PMIX_RANK", "0", "SLURM_STEP_NUM_TASKS", "1", NULL);
    EXPECT_INT(resolve(), 0);
    EXPECT_UINT(part, 3);
    EXPECT_UINT(parts, 4);
}
END_TEST_

TEST(slurm_array_refused) {
    env("SLURM_ARRAY_TASK_ID", "3", "SLURM_ARRAY_TASK_COUNT", "4", NULL);
    EXPECT_INT(resolve(), -1);
    EXPECT_STR_HAS(err, "SLURM_ARRAY_TASK_MIN is not");
    env("SLURM_ARRAY_TASK_ID", "3", "SLURM_ARRAY_TASK_MIN", "1", NULL);
    EXPECT_INT(resolve(), -1);
    EXPECT_STR_HAS(err, "neither SLURM_ARRAY_TASK_COUNT nor SLURM_ARRAY_TASK_MAX");
    /* --array=1-15:2 and --array=1,5,9: ids that do not number parts */
    env("SLURM_ARRAY_TASK_ID", "3", "SLURM_ARRAY_TASK_MIN", "1", "SLURM_ARRAY_TASK_MAX", "15",
        "SLURM_ARRAY_TASK_STEP", "2", NULL);
    EXPECT_INT(resolve(), -1);
    EXPECT_STR_HAS(err, "SLURM_ARRAY_TASK_STEP=2");
    env("SLURM_ARRAY_TASK_ID", "5", "SLURM_ARRAY_TASK_MIN", "1", "SLURM_ARRAY_TASK_MAX", "9",
        "SLURM_ARRAY_TASK_COUNT", "3", NULL);
    EXPECT_INT(resolve(), -1);
    EXPECT_STR_HAS(err, "not a list");
    env("SLURM_ARRAY_TASK_ID", "9", "SLURM_ARRAY_TASK_MIN", "1", "SLURM_ARRAY_TASK_COUNT", "8", NULL);
    EXPECT_INT(resolve(), -1);
    EXPECT_STR_HAS(err, "SLURM_ARRAY_TASK_ID=9 is outside the array");
    env("SLURM_ARRAY_TASK_ID", "x1", "SLURM_ARRAY_TASK_MIN", "1", "SLURM_ARRAY_TASK_COUNT", "8", NULL);
    EXPECT_INT(resolve(), -1);
    EXPECT_STR_HAS(err, "SLURM_ARRAY_TASK_ID='x1' is not a number");
    env("SLURM_ARRAY_TASK_ID", "1", "SLURM_ARRAY_TASK_MIN", "1", "SLURM_ARRAY_TASK_COUNT", "200000",
        NULL);
    EXPECT_INT(resolve(), -1);
    EXPECT_STR_HAS(err, "parts must number 1..100000");
}
END_TEST_

TEST(mpi_ranks) {
    /* Open MPI's mpirun sets its own variables and PMIx's */
    env("OMPI_COMM_WORLD_RANK", "2", "OMPI_COMM_WORLD_SIZE", "3", "PMIX_RANK", "2", NULL);
    EXPECT_INT(resolve(), 0);
    EXPECT_UINT(part, 3);
    EXPECT_UINT(parts, 3);
    EXPECT(!strcmp(from, "OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=3"));
    /* MPICH / Intel MPI / srun --mpi=pmi2 */
    env("PMI_RANK", "0", "PMI_SIZE", "8", NULL);
    EXPECT_INT(resolve(), 0);
    EXPECT_UINT(part, 1);
    EXPECT_UINT(parts, 8);
    /* srun --mpi=pmix */
    env("PMIX_RANK", "4", "SLURM_STEP_NUM_TASKS", "5", NULL);
    EXPECT_INT(resolve(), 0);
    EXPECT_UINT(part, 5);
    EXPECT_UINT(parts, 5);
    EXPECT(!strcmp(from, "PMIX_RANK=4 SLURM_STEP_NUM_TASKS=5"));
}
END_TEST_

TEST(mpi_refused) {
    env("OMPI_COMM_WORLD_RANK", "1", NULL);
    EXPECT_INT(resolve(), -1);
    EXPECT_STR_HAS(err, "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not");
    env("PMIX_RANK", "1", NULL);
    EXPECT_INT(resolve(), -1);
    EXPECT_STR_HAS(err, "none of OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_STEP_NUM_TASKS");
    env("PMI_RANK", "3", "PMI_SIZE", "3", NULL);
    EXPECT_INT(resolve(), -1);
    EXPECT_STR_HAS(err, "PMI_RANK=3 is not below PMI_SIZE=3");
    env("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "3", "PMIX_RANK", "2", NULL);
    EXPECT_INT(resolve(), -1);
    EXPECT_STR_HAS(err, "disagree");
    env("PMI_RANK", "0", "PMI_SIZE", "0", NULL);
    EXPECT_INT(resolve(), -1);
    EXPECT_STR_HAS(err, "PMI_SIZE=0");
    /* several ranks inside an array task: which numbers the parts? */
    env("SLURM_ARRAY_TASK_ID", "1", "SLURM_ARRAY_TASK_MIN", "1", "SLURM_ARRAY_TASK_COUNT", "2",
        "OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "2", NULL);
    EXPECT_INT(resolve(), -1);
    EXPECT_STR_HAS(err, "ambiguous");
}
END_TEST_

TEST(nothing_set) {
    env(NULL);
    EXPECT_INT(resolve(), -1);
    EXPECT_STR_HAS(err, "no part in the environment");
    EXPECT_STR_HAS(err, "SLURM_ARRAY_TASK_ID");
    EXPECT_STR_HAS(err, "OMPI_COMM_WORLD_RANK");
    EXPECT_STR_HAS(err, "PMI_RANK");
    EXPECT_STR_HAS(err, "PMIX_RANK");
    EXPECT_STR_HAS(err, "--part I/N");
    /* empty values are unset */
    env("OMPI_COMM_WORLD_RANK", "", "OMPI_COMM_WORLD_SIZE", "", NULL);
    EXPECT_INT(resolve(), -1);
    EXPECT_STR_HAS(err, "no part in the environment");
}
END_TEST_

RUN_SUITE("partenv", slurm_array, slurm_array_refused, mpi_ranks, mpi_refused, nothing_set)
