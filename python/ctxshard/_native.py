"""ctypes declarations of libctxshard's public API (lib/include/ctxshard.h).

The library is found, in this order, at $CTXSHARD_LIB, beside this package
(where `pip install .` puts it), in the checkout's build/lib, or where the
system's dynamic loader finds libctxshard.so.0 (after `meson install`).  It
must be the package's own version: the structures below are its ABI."""
import ctypes
import glob
import sysconfig
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_float, c_int, c_int64,
                    c_size_t, c_uint32, c_uint64, c_void_p)

from ._version import __version__

E_BAD_MAGIC = -5001
E_VERSION = -5002
E_TRUNCATED = -5003
E_CORRUPT = -5004
E_CHECKSUM = -5005
E_UNSUPPORTED = -5006
E_INVALID = -5007
E_RANGE = -5008
E_INPUT = -5009
E_DEVICE = -5010
E_NO_LABELS = -5011
E_NO_SEQUENCES = -5012

DTYPE_F32, DTYPE_F16, DTYPE_BF16 = 1, 2, 3
DTYPE_Q8, DTYPE_Q16 = 4, 5  # coded (format 1.4): stored only (never an input type), decoded when served
COMPRESSION_NONE, COMPRESSION_ZSTD = 0, 1
DEFAULT_CACHE_BYTES = 256 << 20
GATHER_NORMALIZE = 1
SAMPLER_SEQUENTIAL, SAMPLER_SHUFFLE, SAMPLER_WEIGHTED, SAMPLER_BLOCK = 0, 1, 2, 3


# The ABI's room to grow (ctxshard_base.h): the tail of every options and
# info struct; ctypes zeroes it.
OPTS_RESERVED, INFO_RESERVED = 4, 8
CACHE_OFF = (1 << 64) - 1  # CXS_CACHE_OFF


NO_OFFSET = (1 << 64) - 1  # CXS_NO_OFFSET


class Diag(Structure):
    _fields_ = [("message", c_char * 1024), ("code", ctypes.c_int32), ("pad", c_uint32),
                ("offset", c_uint64), ("file", c_char * 1024),
                ("reserved", c_uint64 * INFO_RESERVED)]


class Info(Structure):
    _fields_ = [("num_frames", c_uint64), ("num_utterances", c_uint64),
                ("num_shards", c_uint32), ("dim", c_uint32), ("dtype", c_uint32),
                ("guard", c_uint32), ("vocab_size", c_uint32), ("label_width", c_uint32),
                ("normalize", c_uint32), ("format_major", c_uint32), ("format_minor", c_uint32),
                ("shard_size", c_uint64), ("num_skipped", c_uint64),
                ("on_error_skip", c_uint32), ("min_length", c_uint64),
                ("max_length", c_uint64), ("total_bytes", c_uint64),
                ("single_shard", c_uint32), ("compression", c_uint32),
                ("chunk_rows", c_uint32), ("compression_level", ctypes.c_int32),
                ("shuffle", c_uint32), ("feature_bytes", c_uint64),
                ("stored_feature_bytes", c_uint64), ("label_seqs", c_uint32),
                ("seq_symbols", c_uint64), ("min_seq_length", c_uint64),
                ("max_seq_length", c_uint64), ("block_sum_shards", c_uint32),
                ("seq_width", c_uint32), ("reserved", c_uint64 * INFO_RESERVED)]


class OpenOpts(Structure):
    _fields_ = [("cache_bytes", c_uint64), ("hugepage_budget", c_uint64),
                ("cache_dir", c_char_p), ("cache_limit", c_uint64), ("flags", c_uint64),
                ("reserved", c_uint64 * (OPTS_RESERVED - 3))]


OPEN_STREAM = 1


class HugepageInfo(Structure):
    _fields_ = [("bytes", c_uint64), ("huge_bytes", c_uint64), ("reason", c_char * 200),
                ("reserved", c_uint64 * INFO_RESERVED)]


class Stats(Structure):
    _fields_ = [("count", c_uint64), ("mean", POINTER(c_double)), ("var", POINTER(c_double)),
                ("label_counts", POINTER(c_uint64)),
                ("reserved", c_uint64 * INFO_RESERVED)]


class Utterance(Structure):
    _fields_ = [("id", c_void_p), ("id_len", c_size_t), ("first_frame", c_uint64),
                ("num_frames", c_uint64), ("shard", c_uint32), ("features", c_void_p),
                ("labels", c_void_p),
                ("reserved", c_uint64 * INFO_RESERVED)]


class SamplerOpts(Structure):
    _fields_ = [("kind", c_uint32), ("seed", c_uint64), ("rank", c_uint32),
                ("world_size", c_uint32), ("drop_last", c_uint32), ("num_samples", c_uint64),
                ("class_weights", POINTER(c_double)), ("origin", c_uint64),
                ("memory_bytes", c_uint64), ("blocks", c_uint32),
                ("reserved", c_uint64 * OPTS_RESERVED)]


class Norm(Structure):
    _fields_ = [("dim", c_uint32), ("mean", POINTER(c_double)), ("var", POINTER(c_double))]


class LoaderOpts(Structure):
    _fields_ = [("k", c_uint32), ("batch_size", c_uint32), ("threads", c_uint32),
                ("ring", c_uint32), ("flags", c_uint32), ("drop_last", c_uint32),
                ("labels", c_uint32), ("external", c_uint32), ("norm", POINTER(Norm)),
                ("readahead", c_uint32),
                ("reserved", c_uint64 * OPTS_RESERVED)]


class Memory(Structure):
    _fields_ = [("available", c_uint64), ("mem_available", c_uint64),
                ("cgroup_limit", c_uint64), ("cgroup_available", c_uint64),
                ("from_env", c_uint32),
                ("reserved", c_uint64 * INFO_RESERVED)]


class WarmResult(Structure):
    _fields_ = [("total_bytes", c_uint64), ("cached_before", c_uint64),
                ("bytes_read", c_uint64), ("seconds", c_double), ("fits", c_uint32),
                ("memory", Memory),
                ("reserved", c_uint64 * INFO_RESERVED)]


class FetchInfo(Structure):
    _fields_ = [("dataset_bytes", c_uint64), ("bytes_fetched", c_uint64), ("seconds", c_double),
                ("cached", c_uint32), ("streamed", c_uint32), ("offline", c_uint32),
                ("pad_", c_uint32), ("reserved", c_uint64 * (INFO_RESERVED - 1))]


class CacheEntry(Structure):
    _fields_ = [("url", c_char_p), ("dir", c_char_p), ("bytes", c_uint64),
                ("last_used", ctypes.c_int64), ("complete", c_uint32), ("in_use", c_uint32),
                ("streamed", c_uint32), ("pad_", c_uint32),
                ("reserved", c_uint64 * (INFO_RESERVED - 1))]


CACHE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(CacheEntry))
WARM_FORCE, WARM_SKIP_CACHED = 1, 2
PROGRESS_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_uint64, c_uint64)


class Batch(Structure):
    _fields_ = [("x", c_void_p), ("y", c_void_p), ("frames", c_void_p), ("n", c_size_t),
                ("index", c_uint64), ("position", c_uint64)]


POSITION_VERSION = 1  # CXS_POSITION_VERSION


class Position(Structure):  # cxs_position: a loader's place, and its saved state
    _fields_ = [("version", c_uint32), ("kind", c_uint32), ("epoch", c_uint64),
                ("next", c_uint64), ("reserved", c_uint64 * 2)]


class MixOpts(Structure):
    _fields_ = [("kind", c_uint32), ("seed", c_uint64), ("batch_size", c_uint32),
                ("weights", POINTER(c_double)), ("temperature", c_double),
                ("epoch_size", c_uint64), ("rank", c_uint32), ("world_size", c_uint32),
                ("drop_last", c_uint32), ("origin", c_uint64), ("memory_bytes", c_uint64),
                ("blocks", c_uint32), ("reserved", c_uint64 * OPTS_RESERVED)]


class MixFrames(Structure):
    _fields_ = [("x", c_void_p), ("y", c_void_p), ("frames", c_void_p), ("source", c_void_p),
                ("n", c_size_t), ("index", c_uint64), ("global", c_uint64),
                ("repeat", c_uint32)]


class UttSamplerOpts(Structure):
    _fields_ = [("kind", c_uint32), ("seed", c_uint64), ("frame_budget", c_uint64),
                ("max_batch", c_uint32), ("buckets", c_uint32), ("long_alone", c_uint32),
                ("rank", c_uint32), ("world_size", c_uint32), ("drop_last", c_uint32),
                ("origin", c_uint64), ("memory_bytes", c_uint64), ("blocks", c_uint32),
                ("reserved", c_uint64 * OPTS_RESERVED)]


class UttLoaderOpts(Structure):
    _fields_ = [("threads", c_uint32), ("ring", c_uint32), ("flags", c_uint32),
                ("labels", c_uint32), ("norm", POINTER(Norm)), ("readahead", c_uint32),
                ("targets", c_uint32),
                ("reserved", c_uint64 * OPTS_RESERVED)]


# Fields may be added at the end (the library allocates it).
class UttBatch(Structure):
    _fields_ = [("x", c_void_p), ("lengths", c_void_p), ("y", c_void_p), ("utts", c_void_p),
                ("n", c_size_t), ("tmax", c_uint64), ("frames", c_uint64), ("index", c_uint64),
                ("global", c_uint64), ("targets", c_void_p), ("target_lengths", c_void_p),
                ("lmax", c_uint64)]


class MixUttOpts(Structure):
    _fields_ = [("kind", c_uint32), ("seed", c_uint64), ("frame_budget", c_uint64),
                ("max_batch", c_uint32), ("buckets", c_uint32), ("long_alone", c_uint32),
                ("weights", POINTER(c_double)), ("temperature", c_double),
                ("epoch_size", c_uint64), ("rank", c_uint32), ("world_size", c_uint32),
                ("drop_last", c_uint32), ("origin", c_uint64), ("stratify", c_uint32),
                ("memory_bytes", c_uint64), ("blocks", c_uint32),
                ("reserved", c_uint64 * OPTS_RESERVED)]


MIX_STRATIFY_SHARES, MIX_STRATIFY_LENGTH = 0, 1


class MixUtts(Structure):
    _fields_ = [("batch", POINTER(UttBatch)), ("source", c_void_p), ("repeat", c_uint32)]


UTT_SEQUENTIAL, UTT_SHUFFLE = 0, 1
UTT_DEFAULT_BUCKETS = 32
UTT_PAD_LABEL = -100
PAD_PER_UTTERANCE = 2


GPU_EMULATE = -1
GPU_AUTO, GPU_STREAM, GPU_RESIDENT, GPU_POOL = 0, 1, 2, 3
GPU_OUT_F32, GPU_OUT_BF16 = 0, 1
GPU_NO_REGISTER, GPU_GDS = 1, 2
GPU_HOLD = 0x100


class GpuProbeInfo(Structure):
    _fields_ = [("usable", ctypes.c_int32), ("built_with_cuda", ctypes.c_int32),
                ("device_count", ctypes.c_int32), ("runtime_version", ctypes.c_int32),
                ("driver_version", ctypes.c_int32), ("compute_major", ctypes.c_int32),
                ("compute_minor", ctypes.c_int32), ("register_read_only", ctypes.c_int32),
                ("gds", ctypes.c_int32), ("total_bytes", c_uint64), ("free_bytes", c_uint64),
                ("name", c_char * 256), ("reason", c_char * 512),
                ("reserved", c_uint64 * INFO_RESERVED)]


class GpuOpts(Structure):
    _fields_ = [("device", ctypes.c_int32), ("mode", c_uint32), ("budget_bytes", c_uint64),
                ("k", c_uint32), ("batch_size", c_uint32), ("flags", c_uint32),
                ("out_dtype", c_uint32), ("labels", c_uint32), ("drop_last", c_uint32),
                ("threads", c_uint32), ("slots", c_uint32), ("pool_segments", c_uint32),
                ("paths", c_uint32), ("norm", POINTER(Norm)),
                ("reserved", c_uint64 * OPTS_RESERVED)]


class GpuBatch(Structure):
    _fields_ = [("x", c_void_p), ("y", c_void_p), ("frames", c_void_p), ("n", c_size_t),
                ("index", c_uint64), ("position", c_uint64)]


class GpuUttOpts(Structure):
    _fields_ = [("device", ctypes.c_int32), ("budget_bytes", c_uint64), ("flags", c_uint32),
                ("out_dtype", c_uint32), ("labels", c_uint32), ("targets", c_uint32),
                ("slots", c_uint32), ("paths", c_uint32), ("norm", POINTER(Norm)),
                ("reserved", c_uint64 * OPTS_RESERVED)]


class GpuUttBatch(Structure):
    _fields_ = [("x", c_void_p), ("lengths", c_void_p), ("y", c_void_p), ("targets", c_void_p),
                ("target_lengths", c_void_p), ("host_lengths", c_void_p),
                ("host_target_lengths", c_void_p), ("utts", c_void_p), ("n", c_size_t),
                ("tmax", c_uint64), ("lmax", c_uint64), ("frames", c_uint64),
                ("index", c_uint64), ("global", c_uint64)]


class GpuLoaderInfo(Structure):
    _fields_ = [("mode", c_uint32), ("upload_path", c_uint32), ("device_bytes", c_uint64),
                ("uploaded_bytes", c_uint64), ("upload_seconds", c_double),
                ("pool_utterances", c_uint64), ("reason", c_char * 256),
                ("reserved", c_uint64 * INFO_RESERVED)]


WRITER_NO_BLOCK_SUMS = 2  # CXS_WRITER_NO_BLOCK_SUMS (format 1.3's BLOCKSUMS off)


class WriterOpts(Structure):
    _fields_ = [("dtype", c_uint32), ("guard", c_uint32), ("shard_size", c_uint64),
                ("normalize", c_uint32), ("compression", c_uint32), ("level", ctypes.c_int32),
                ("chunk_size", c_uint64), ("shuffle", c_uint32), ("vocab_size", c_uint32),
                ("vocab", POINTER(c_char_p)), ("on_error_skip", c_uint32), ("flags", c_uint32),
                ("part", c_void_p), ("threads", c_uint32), ("label_seqs", c_uint32),
                ("dim", c_uint32),
                ("reserved", c_uint64 * OPTS_RESERVED)]


class WriterUtt(Structure):
    _fields_ = [("data", c_void_p), ("frames", c_uint64), ("dim", c_uint64), ("type", c_uint32),
                ("big_endian", c_uint32), ("row_stride", c_int64), ("col_stride", c_int64),
                ("labels", c_void_p), ("label_count", c_uint64), ("label_size", c_uint32),
                ("stored", c_uint32), ("seq", c_void_p), ("seq_count", c_uint64),
                ("seq_size", c_uint32)]


class WriterInfo(Structure):
    _fields_ = [("num_utterances", c_uint64), ("num_frames", c_uint64),
                ("num_skipped", c_uint64), ("num_shards", c_uint32), ("dim", c_uint32),
                ("bytes_written", c_uint64), ("feature_bytes", c_uint64),
                ("stale_removed", c_uint32),
                ("reserved", c_uint64 * INFO_RESERVED)]


NOTE_FN = ctypes.CFUNCTYPE(None, c_void_p, c_char_p)


class KaldiOpts(Structure):
    _fields_ = [("text", c_char_p), ("ali", c_char_p), ("vocab", c_char_p), ("flags", c_uint32),
                ("note", NOTE_FN), ("note_user", c_void_p), ("part", c_uint32),
                ("parts", c_uint32),
                ("reserved", c_uint64 * OPTS_RESERVED)]


class ImportInfo(Structure):
    _fields_ = [("w", WriterInfo), ("listed", c_uint64), ("input_bytes", c_uint64),
                ("sorted", c_uint32), ("vocab_size", c_uint32), ("kinds", c_uint32),
                ("pad", c_uint32), ("filled_values", c_uint64), ("filled_utts", c_uint64),
                ("shard_first", c_uint32), ("shard_end", c_uint32),
                ("shards_planned", c_uint32), ("has_labels", c_uint32),
                ("codes_kept", c_uint64), ("reencoded", c_uint64),
                ("reserved", c_uint64 * (INFO_RESERVED - 6))]


NPY_EVENT_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_char_p, c_uint64, POINTER(Diag))


class NpyOpts(Structure):
    _fields_ = [("vocab_file", c_char_p), ("sos", c_char_p), ("eos", c_char_p),
                ("transcripts", c_uint32), ("flags", c_uint32), ("part", c_uint32),
                ("parts", c_uint32), ("pad", c_uint32), ("note", NOTE_FN), ("warn", NOTE_FN),
                ("event", NPY_EVENT_FN), ("user", c_void_p),
                ("reserved", c_uint64 * OPTS_RESERVED)]


KALDI_NO_SORT = 1  # KaldiOpts.flags
TRANSCRIPTS = {"frames": 0, "sequence": 1, "both": 2}  # NpyOpts.transcripts
NPY_FILL_NONFINITE = 1  # NpyOpts.flags
NPY_PROBLEM, NPY_FILLED = 1, 2  # NPY_EVENT_FN kinds
DTYPE_F64 = 4  # a writer's input type (never stored)
NORM_NONE, NORM_UTTERANCE = 0, 1
SEQ_NONE, SEQ_WITH_FRAMES, SEQ_ONLY = 0, 1, 2  # WriterOpts.label_seqs


def _find():
    env = os.environ.get("CTXSHARD_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for pattern in ("libctxshard.so", "libctxshard.so.*"):
        found = sorted(glob.glob(os.path.join(here, pattern)))
        if found:
            return found[0]
    checkout = os.path.join(here, "..", "..", "build", "lib")
    found = sorted(glob.glob(os.path.join(checkout, "libctxshard.so*")))
    if found:
        return os.path.abspath(found[0])
    return "libctxshard.so.0"


# Where `meson install` puts the library (prefix /usr/local or /usr; Debian's
# multiarch directory or plain lib/lib64).
_LIB_DIRS = [os.path.join(pre, sub) for pre in ("/usr/local", "/usr")
             for sub in ("lib/" + (sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"),
                         "lib", "lib64")]


def _installed_copy(name):
    """An installed library file the dynamic loader did not find by name
    (meson install without ldconfig since), or None."""
    for d in _LIB_DIRS:
        found = sorted(glob.glob(os.path.join(d, name + "*")))
        if found:
            return found[0]
    return None


def _sized(ex, name, size):
    def call(handle, out):
        rc = ex(handle, out, size)
        if rc:
            raise ValueError(f"{name}: no dataset or no struct to fill (code {rc})")
    return call


def _load():
    path = _find()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        copy = None if os.sep in path else _installed_copy(path)
        if copy is not None:
            try:  # installed, but the loader's cache does not know it yet: load it by path
                lib = ctypes.CDLL(copy)
                path = copy
            except OSError as e2:
                raise ImportError(
                    f"ctxshard: {copy} is installed but cannot be loaded: {e2}.  If it was "
                    f"just installed, run `sudo ldconfig` (or set LD_LIBRARY_PATH="
                    f"{os.path.dirname(copy)}), or set CTXSHARD_LIB to a libctxshard.so that "
                    "loads") from None
        elif os.path.exists(path):
            raise ImportError(
                f"ctxshard: {path} exists but cannot be loaded: {e}.  Rebuild it "
                "(`ninja -C build`), or set CTXSHARD_LIB to a libctxshard.so that loads; a "
                "library that needs others the loader cannot find: set LD_LIBRARY_PATH to "
                "their directory") from None
        else:
            raise ImportError(
                f"ctxshard: cannot load the C library ({path}): {e}.  Build it with "
                "`ninja -C build` in the checkout, or install it (`meson install -C build`, "
                "then `sudo ldconfig`), or set CTXSHARD_LIB to the path of "
                "libctxshard.so") from None
    ds = c_void_p
    sig = {
        "cxs_strerror": (c_char_p, [c_int]),
        "cxs_version": (c_char_p, []),
        "cxs_cpu_count": (ctypes.c_uint, []),
        "cxs_default_threads": (ctypes.c_uint, []),
        "cxs_dataset_open": (c_int, [c_char_p, POINTER(c_void_p), POINTER(Diag)]),
        "cxs_dataset_open_ex": (c_int, [c_char_p, POINTER(OpenOpts), POINTER(c_void_p),
                                        POINTER(Diag)]),
        "cxs_dataset_read_features": (c_int, [ds, c_uint64, c_uint64, c_uint64, c_void_p]),
        "cxs_dataset_read_features_ex": (c_int, [ds, c_uint64, c_uint64, c_uint64, c_void_p,
                                                 POINTER(Diag)]),
        "cxs_dataset_close": (None, [ds]),
        "cxs_dataset_verify": (c_int, [ds, c_void_p, c_void_p, POINTER(Diag)]),
        "cxs_dataset_info_ex": (c_int, [ds, POINTER(Info), c_size_t]),
        "cxs_dataset_hugepages_ex": (c_int, [ds, POINTER(HugepageInfo), c_size_t]),
        "cxs_memory_probe": (c_int, [POINTER(Memory), POINTER(Diag)]),
        "cxs_dataset_warm": (c_int, [ds, c_uint32, PROGRESS_FN, c_void_p, POINTER(WarmResult),
                                     POINTER(Diag)]),
        "cxs_url_fetch": (c_int, [c_char_p, POINTER(OpenOpts), PROGRESS_FN, c_void_p,
                                  POINTER(FetchInfo), POINTER(c_void_p), POINTER(Diag)]),
        "cxs_dataset_url": (c_int, [ds, POINTER(c_char_p), POINTER(c_char_p)]),
        "cxs_dataset_fetched": (c_uint64, [ds]),
        "cxs_is_url": (c_int, [c_char_p]),
        "cxs_dataset_push": (c_int, [c_char_p, c_char_p, PROGRESS_FN, c_void_p,
                                     POINTER(c_uint64), POINTER(Diag)]),
        "cxs_cache_dir": (c_int, [c_char_p, ctypes.c_char_p, c_size_t]),
        "cxs_cache_list": (c_int, [c_char_p, CACHE_FN, c_void_p, POINTER(Diag)]),
        "cxs_cache_prune": (c_int, [c_char_p, c_uint64, POINTER(c_uint64), POINTER(Diag)]),
        "cxs_cache_clear": (c_int, [c_char_p, POINTER(c_uint64), POINTER(Diag)]),
        "cxs_warm_start": (c_int, [ds, c_uint32, POINTER(c_void_p), POINTER(Diag)]),
        "cxs_warm_poll": (c_int, [c_void_p, POINTER(c_uint64), POINTER(c_uint64)]),
        "cxs_warm_finish": (c_int, [c_void_p, c_int, POINTER(WarmResult), POINTER(Diag)]),
        "cxs_dataset_stats_ex": (c_int, [ds, POINTER(Stats), c_size_t]),
        "cxs_dataset_vocab": (c_int, [ds, c_uint32, POINTER(c_void_p), POINTER(c_size_t)]),
        "cxs_dataset_skipped": (None, [ds, POINTER(c_void_p), POINTER(c_size_t)]),
        "cxs_dataset_identity": (c_uint64, [ds]),
        "cxs_dataset_utterance": (c_int, [ds, c_uint64, POINTER(Utterance)]),
        "cxs_dataset_utterance_ex": (c_int, [ds, c_uint64, c_uint32, POINTER(Utterance),
                                             POINTER(Diag)]),
        "cxs_dataset_locate": (c_int, [ds, c_uint64, POINTER(c_uint64), POINTER(c_uint64)]),
        "cxs_dataset_window": (c_int, [ds, c_uint64, c_uint32, POINTER(c_void_p)]),
        "cxs_dataset_label": (c_int, [ds, c_uint64, POINTER(c_uint32)]),
        "cxs_dataset_labels": (c_int, [ds, c_uint64, c_uint64, c_void_p]),
        "cxs_dataset_labels_of": (c_int, [ds, c_void_p, c_size_t, c_void_p]),
        "cxs_dataset_label_seq": (c_int, [ds, c_uint64, c_void_p, c_uint32, POINTER(c_uint32)]),
        "cxs_dataset_shard_labels": (c_int, [ds, c_uint32, POINTER(c_void_p), POINTER(c_uint64),
                                             POINTER(c_uint64)]),
        "cxs_dataset_gather": (c_int, [ds, c_void_p, c_size_t, c_uint32, c_uint32, ctypes.c_uint,
                                       c_void_p, c_void_p]),
        "cxs_dataset_gather_norm": (c_int, [ds, c_void_p, c_size_t, c_uint32, POINTER(Norm),
                                            ctypes.c_uint, c_void_p, c_void_p]),
        "cxs_dataset_gather_ex": (c_int, [ds, c_void_p, c_size_t, c_uint32, c_uint32,
                                          POINTER(Norm), ctypes.c_uint, c_void_p, c_void_p,
                                          POINTER(Diag)]),
        "cxs_sampler_create": (c_int, [ds, POINTER(SamplerOpts), POINTER(c_void_p)]),
        "cxs_sampler_create_ex": (c_int, [ds, POINTER(SamplerOpts), POINTER(c_void_p),
                                          POINTER(Diag)]),
        "cxs_sampler_block_bytes": (c_uint64, [c_void_p]),
        "cxs_sampler_num_blocks": (c_uint64, [c_void_p, c_uint64]),
        "cxs_sampler_free": (None, [c_void_p]),
        "cxs_sampler_length": (c_uint64, [c_void_p]),
        "cxs_sampler_get": (c_int, [c_void_p, c_uint64, c_uint64, c_size_t, c_void_p]),
        "cxs_loader_create": (c_int, [ds, c_void_p, POINTER(LoaderOpts), c_uint64, c_uint64,
                                      POINTER(c_void_p)]),
        "cxs_loader_create_ex": (c_int, [ds, c_void_p, POINTER(LoaderOpts), c_uint64, c_uint64,
                                         POINTER(c_void_p), POINTER(Diag)]),
        "cxs_loader_next": (c_int, [c_void_p, POINTER(POINTER(Batch))]),
        "cxs_loader_next_ex": (c_int, [c_void_p, POINTER(POINTER(Batch)), POINTER(Diag)]),
        "cxs_loader_provide": (c_int, [c_void_p, c_void_p, c_void_p]),
        "cxs_loader_ring": (c_uint32, [c_void_p]),
        "cxs_mix_create": (c_int, [POINTER(c_void_p), c_uint32, POINTER(MixOpts),
                                   POINTER(c_void_p), POINTER(Diag)]),
        "cxs_mix_batch_size": (c_uint32, [c_void_p]),
        "cxs_mix_length": (c_uint64, [c_void_p, POINTER(c_uint64)]),
        "cxs_mix_repeat": (c_int, [c_void_p, c_uint64]),
        "cxs_mix_batch": (c_int, [c_void_p, c_uint64, c_uint64, c_void_p, c_void_p, c_uint32,
                                  POINTER(c_uint32), POINTER(c_uint64)]),
        "cxs_mix_loader_create": (c_int, [c_void_p, POINTER(LoaderOpts), c_uint64, c_uint64,
                                          POINTER(c_void_p), POINTER(Diag)]),
        "cxs_mix_loader_next": (c_int, [c_void_p, POINTER(POINTER(MixFrames)), POINTER(Diag)]),
        "cxs_mix_utt_create": (c_int, [POINTER(c_void_p), c_uint32, POINTER(MixUttOpts),
                                       POINTER(c_void_p), POINTER(Diag)]),
        "cxs_mix_utt_max_batch": (c_uint32, [c_void_p]),
        "cxs_mix_utt_max_frames": (c_uint64, [c_void_p]),
        "cxs_mix_utt_length": (c_int, [c_void_p, c_uint64, POINTER(c_uint64),
                                       POINTER(c_uint64)]),
        "cxs_mix_utt_batch": (c_int, [c_void_p, c_uint64, c_uint64, c_void_p, c_void_p,
                                      c_uint32, POINTER(c_uint32), POINTER(c_uint64),
                                      POINTER(c_uint32)]),
        "cxs_mix_utt_loader_create": (c_int, [c_void_p, POINTER(UttLoaderOpts), c_uint64,
                                              c_uint64, POINTER(c_void_p), POINTER(Diag)]),
        "cxs_mix_utt_loader_next": (c_int, [c_void_p, POINTER(POINTER(MixUtts)),
                                            POINTER(Diag)]),
        "cxs_utt_sampler_create": (c_int, [ds, POINTER(UttSamplerOpts), POINTER(c_void_p),
                                           POINTER(Diag)]),
        "cxs_utt_sampler_free": (None, [c_void_p]),
        "cxs_utt_sampler_length": (c_int, [c_void_p, c_uint64, POINTER(c_uint64),
                                           POINTER(c_uint64)]),
        "cxs_utt_sampler_max_batch": (c_uint32, [c_void_p]),
        "cxs_utt_sampler_max_frames": (c_uint64, [c_void_p]),
        "cxs_utt_sampler_batch": (c_int, [c_void_p, c_uint64, c_uint64, c_void_p, c_uint32,
                                          POINTER(c_uint32), POINTER(c_uint64)]),
        "cxs_dataset_pad_batch": (c_int, [ds, c_void_p, c_size_t, c_uint64, c_uint32,
                                          POINTER(Norm), c_void_p, c_void_p, c_void_p]),
        "cxs_dataset_pad_batch_ex": (c_int, [ds, c_void_p, c_size_t, c_uint64, c_uint32,
                                             POINTER(Norm), c_void_p, c_void_p, c_void_p,
                                             POINTER(Diag)]),
        "cxs_dataset_pad_targets": (c_int, [ds, c_void_p, c_size_t, c_uint64, c_void_p,
                                            c_void_p]),
        "cxs_utt_loader_create": (c_int, [ds, c_void_p, POINTER(UttLoaderOpts), c_uint64,
                                          c_uint64, POINTER(c_void_p)]),
        "cxs_utt_loader_create_ex": (c_int, [ds, c_void_p, POINTER(UttLoaderOpts), c_uint64,
                                             c_uint64, POINTER(c_void_p), POINTER(Diag)]),
        "cxs_utt_loader_next": (c_int, [c_void_p, POINTER(POINTER(UttBatch))]),
        "cxs_utt_loader_next_ex": (c_int, [c_void_p, POINTER(POINTER(UttBatch)), POINTER(Diag)]),
        "cxs_gpu_probe": (c_int, [ctypes.c_int32, POINTER(GpuProbeInfo)]),
        "cxs_gpu_loader_create": (c_int, [ds, c_void_p, POINTER(GpuOpts), c_uint64, c_uint64,
                                          POINTER(c_void_p), POINTER(Diag)]),
        "cxs_gpu_loader_next": (c_int, [c_void_p, c_void_p, POINTER(POINTER(GpuBatch))]),
        "cxs_gpu_loader_next_ex": (c_int, [c_void_p, c_void_p, POINTER(POINTER(GpuBatch)),
                                           POINTER(Diag)]),
        "cxs_gpu_utt_loader_create": (c_int, [ds, c_void_p, POINTER(GpuUttOpts), c_uint64,
                                              c_uint64, POINTER(c_void_p), POINTER(Diag)]),
        "cxs_gpu_utt_loader_next": (c_int, [c_void_p, c_void_p, POINTER(POINTER(GpuUttBatch))]),
        "cxs_gpu_utt_loader_next_ex": (c_int, [c_void_p, c_void_p,
                                               POINTER(POINTER(GpuUttBatch)), POINTER(Diag)]),
        "cxs_gpu_emu_stream_sync": (c_int, [c_void_p]),
        "cxs_gpu_emu_fault": (c_char_p, []),
        "cxs_gpu_emu_schedule": (c_char_p, []),
        "cxs_writer_opts_init": (None, [POINTER(WriterOpts)]),
        "cxs_writer_create": (c_int, [c_char_p, POINTER(WriterOpts), POINTER(c_void_p),
                                      POINTER(Diag)]),
        "cxs_writer_add": (c_int, [c_void_p, c_char_p, POINTER(WriterUtt), POINTER(Diag)]),
        "cxs_writer_add_many": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t,
                                        POINTER(c_size_t), POINTER(Diag)]),
        "cxs_writer_skip": (c_int, [c_void_p, c_char_p, c_char_p]),
        "cxs_writer_info_get": (c_int, [c_void_p, POINTER(WriterInfo)]),
        "cxs_writer_commit": (c_int, [c_void_p, POINTER(WriterInfo), POINTER(Diag)]),
        "cxs_writer_abort": (None, [c_void_p]),
        "cxs_import_hdf5": (c_int, [c_char_p, c_char_p, POINTER(WriterOpts), NOTE_FN, c_void_p,
                                    PROGRESS_FN, c_void_p, POINTER(ImportInfo), POINTER(Diag)]),
        "cxs_kaldi_opts_init": (None, [POINTER(KaldiOpts)]),
        "cxs_npy_opts_init": (None, [POINTER(NpyOpts)]),
        "cxs_import_npy": (c_int, [c_char_p, c_char_p, POINTER(WriterOpts), POINTER(NpyOpts),
                                   PROGRESS_FN, c_void_p, POINTER(ImportInfo), POINTER(Diag)]),
        "cxs_phonemes": (POINTER(c_char_p), [POINTER(c_uint32)]),
        "cxs_label_width": (c_uint32, [c_uint64]),
        "cxs_block_order": (c_uint32, []),
        "cxs_import_kaldi": (c_int, [c_char_p, c_char_p, POINTER(WriterOpts), POINTER(KaldiOpts),
                                     PROGRESS_FN, c_void_p, POINTER(ImportInfo), POINTER(Diag)]),
    }
    # the calls every loader has alike (its batch type aside): reset, free,
    # place, set_epoch and seek (position.c); the CPU ones' timed wait and
    # cancel, the GPU ones' release, describe and error
    sig["cxs_position_start"] = (c_uint64, [POINTER(Position), c_uint64])
    for k in ("loader", "utt_loader", "mix_loader", "mix_utt_loader", "gpu_loader",
              "gpu_utt_loader"):
        sig[f"cxs_{k}_reset"] = (c_int, [c_void_p, c_uint64, c_uint64])
        sig[f"cxs_{k}_free"] = (None, [c_void_p])
        sig[f"cxs_{k}_position"] = (c_int, [c_void_p, POINTER(Position)])
        sig[f"cxs_{k}_set_epoch"] = (c_int, [c_void_p, c_uint64])
        sig[f"cxs_{k}_seek"] = (c_int, [c_void_p, POINTER(Position), POINTER(Diag)])
    for k, batch in (("loader", Batch), ("utt_loader", UttBatch), ("mix_loader", MixFrames),
                     ("mix_utt_loader", MixUtts)):
        sig[f"cxs_{k}_next_timed"] = (c_int, [c_void_p, POINTER(POINTER(batch)), c_uint32,
                                              POINTER(Diag)])
        sig[f"cxs_{k}_cancel"] = (c_int, [c_void_p])
    for k in ("gpu_loader", "gpu_utt_loader"):
        sig[f"cxs_{k}_release"] = (c_int, [c_void_p, c_void_p, c_void_p])
        sig[f"cxs_{k}_describe"] = (None, [c_void_p, POINTER(GpuLoaderInfo)])
        sig[f"cxs_{k}_error"] = (POINTER(Diag), [c_void_p])
    # what both mixtures (cxs_mix, cxs_mix_utt) answer alike
    for m in ("mix", "mix_utt"):
        sig[f"cxs_{m}_free"] = (None, [c_void_p])
        sig[f"cxs_{m}_sources"] = (c_uint32, [c_void_p])
        sig[f"cxs_{m}_share"] = (c_double, [c_void_p, c_uint32])
        sig[f"cxs_{m}_quota"] = (c_uint64, [c_void_p, c_uint32])
        sig[f"cxs_{m}_epoch_size"] = (c_uint64, [c_void_p])
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    # The sized structs (ctxshard_base.h) are filled at the size of this
    # package's declaration of them: the package calls them by the names
    # without _ex, which stand for the sized calls.
    for name, struct in (("cxs_dataset_info", Info), ("cxs_dataset_stats", Stats),
                         ("cxs_dataset_hugepages", HugepageInfo)):
        setattr(lib, name, _sized(getattr(lib, name + "_ex"), name, ctypes.sizeof(struct)))
    found = lib.cxs_version().decode()
    if found != __version__:
        raise ImportError(
            f"ctxshard: the C library {path} is version {found}, this package is {__version__}: "
            "rebuild it (`ninja -C build`), reinstall the package (`pip install .`), or point "
            "CTXSHARD_LIB at a libctxshard.so of the same version")
    return lib, path


lib, lib_path = _load()
__all__ = ["lib", "lib_path", "Diag", "Info", "OpenOpts", "Stats", "Memory", "WarmResult", "Utterance", "SamplerOpts", "LoaderOpts",
           "Batch", "Position", "MixOpts", "MixFrames", "MixUttOpts", "MixUtts", "UttSamplerOpts", "UttLoaderOpts", "UttBatch", "GpuProbeInfo", "GpuOpts", "GpuBatch", "GpuUttOpts", "GpuUttBatch", "GpuLoaderInfo", "WriterOpts", "WriterUtt",
           "WriterInfo", "KaldiOpts", "ImportInfo", "NpyOpts", "c_float", "c_int64"]
