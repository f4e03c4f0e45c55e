/* info.c - the calls that fill a caller's sized struct (cxs_info,
 * cxs_stats, cxs_hugepage_info; ctxshard_base.h, "the ABI's room to
 * grow"): the library fills its own struct, whole, and copies out as much
 * of it as the caller's holds, so a program built against an older header
 * never has bytes written past its struct. */
#include "ctxshard.h"
#include "abi.h"
#include "dataset_internal.h"

/* name##_ex at the caller's size and name as first published (through
 * the reserved words), filled by fill; null_ds: whether ds may be NULL
 * (cxs_dataset_hugepages gives zeros for it). */
#define SIZED_CALLS(name, type, fill, null_ds)                                  \
    int name##_ex(const cxs_dataset *ds, type *out, size_t size) {              \
        if ((!ds && !(null_ds)) || !out || !size) return CXS_E_INVALID;         \
        type full;                                                              \
        fill(ds, &full);                                                        \
        cxs_fill_sized(out, size, &full, sizeof full);                          \
        return 0;                                                               \
    }                                                                           \
    void name(const cxs_dataset *ds, type *out) {                               \
        name##_ex(ds, out, CXS_SIZE_THROUGH(type, reserved));                   \
    }

SIZED_CALLS(cxs_dataset_info, cxs_info, cxs_info_fill, 0)
SIZED_CALLS(cxs_dataset_stats, cxs_stats, cxs_stats_fill, 0)
SIZED_CALLS(cxs_dataset_hugepages, cxs_hugepage_info, cxs_hugepages_fill, 1)
