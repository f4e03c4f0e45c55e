/* partenv.h - `ctxshard pack RAW OUT --part env`: the part from the
 * environment of the job launcher that started this process. */
#ifndef CXS_TOOL_PARTENV_H
#define CXS_TOOL_PARTENV_H

#include <stddef.h>
#include <stdint.h>

#define PART_ENV_MAX_PARTS 100000u

/* Reads, in this order of preference:
 *   a Slurm array task: SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_MIN, with
 *     SLURM_ARRAY_TASK_COUNT or SLURM_ARRAY_TASK_MAX (both when both are
 *     set, which must agree; SLURM_ARRAY_TASK_STEP, when set, must be 1):
 *     part = ID - MIN + 1 of COUNT;
 *   an MPI rank: OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (Open MPI),
 *     PMI_RANK and PMI_SIZE (MPICH, Intel MPI, srun --mpi=pmi2), or
 *     PMIX_RANK with one of those sizes or SLURM_STEP_NUM_TASKS (srun
 *     --mpi=pmix): part = rank + 1 of size.
 * A Slurm array task that also runs as one of several MPI ranks is
 * ambiguous and refused; a single rank (size 1) is ignored there.
 * On success writes *part (1-based), *parts and a description of where they
 * came from ("OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=3") into from,
 * and returns 0.  Otherwise returns -1 with a message naming the variables
 * in err.  Both buffers are always NUL-terminated. */
int part_from_env(uint32_t *part, uint32_t *parts, char *from, size_t from_len, char *err,
                  size_t err_len);

#endif
