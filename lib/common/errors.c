/* errors.c - the messages of the library's return codes (0, -errno and
 * the CXS_E_* codes of format/ctxshard_base.h), for every layer. */
#include <string.h>

#include "ctxshard.h"

const char *cxs_strerror(int code) {
    switch (code) {
    case 0: return "success";
    case CXS_E_BAD_MAGIC: return "not a ctxshard file";
    case CXS_E_VERSION: return "unsupported format version";
    case CXS_E_TRUNCATED: return "file truncated";
    case CXS_E_CORRUPT: return "corrupt structure";
    case CXS_E_CHECKSUM: return "checksum mismatch";
    case CXS_E_UNSUPPORTED: return "unsupported feature";
    case CXS_E_INVALID: return "invalid argument";
    case CXS_E_RANGE: return "out of range";
    case CXS_E_INPUT: return "invalid input file";
    case CXS_E_DEVICE: return "GPU error";
    case CXS_E_NO_LABELS:
        return "the dataset has no per-frame labels (features only, like a test split, or label "
               "sequences only)";
    case CXS_E_NO_SEQUENCES: return "the dataset has no label sequences";
    default:
        if (code < 0 && code > -4096) return strerror(-code);
        return "unknown error";
    }
}
