/* ctxshard_gpu.h - batches of context windows delivered into GPU memory.
 *
 * Part of libctxshard.  Every function here exists in every build; a
 * library built without CUDA (or run where no device is usable) answers
 * CXS_E_UNSUPPORTED with the reason, and cxs_gpu_probe() says which.  The
 * CUDA runtime is linked statically and finds the driver at run time, so
 * the library loads and the CPU API works on machines without a GPU.
 *
 * Three ways to feed a device (cxs_gpu_opts.mode):
 *
 *  - CXS_GPU_STREAM: the CPU loader (cxs_loader) gathers windows into a
 *    ring of pinned staging buffers; a copy stream uploads buffer i while
 *    the workers fill i+1 and the consumer computes on i-1.  Events order
 *    everything: the consumer's stream waits on the upload's event, the
 *    host never synchronises with the device in the steady state.  Moves
 *    (2k+1)*D floats per sample over PCIe.
 *  - CXS_GPU_RESIDENT: the feature sections are uploaded once (in chunks,
 *    overlapped; straight from the file mapping when the device can
 *    register read-only host memory; through GPUDirect Storage when asked
 *    and available), then each batch sends only its frame numbers and a
 *    kernel expands the windows in device memory (zero rows past utterance
 *    borders, float16/bfloat16 converted, normalisation applied).  Labels
 *    are resident too.  Moves 8 bytes per sample.
 *  - CXS_GPU_POOL: for data larger than the memory budget: a device pool of
 *    blocks of whole utterances, sampled from, refreshed in the background,
 *    on the block schedule of the CPU block sampler.  Every frame crosses
 *    PCIe once per epoch and is served exactly once per epoch; the order is
 *    less random than a full shuffle (see cxs_gpu_loader_create below and
 *    the user guide).
 *  - CXS_GPU_AUTO: resident when the features fit the budget, else stream.
 *
 * Whole-utterance batches for sequence models (the GPU counterpart of
 * cxs_utt_loader) come from cxs_gpu_utt_loader, at the end of this file:
 * resident data, batches padded on the device.
 *
 * Device pointers handed out are valid until the next cxs_gpu_loader_next()
 * (or reset/free) on the same loader, or, with CXS_GPU_HOLD in
 * cxs_gpu_opts.flags, until the caller gives the batch back with
 * cxs_gpu_loader_release() (the way a tensor holds its memory: the
 * Python package does this for every device batch): work the caller enqueues on its
 * stream before that call is ordered before the memory is reused or freed
 * (an event recorded on the caller's stream, waited for by the loader's
 * stream or, at free, by the host).  Between taking batch k and asking for
 * k+1 the caller queues its work on batch k on the stream it passed, and
 * passes that same stream again; work on another stream must be made to
 * wait for it first (cudaStreamWaitEvent), or the memory may be refilled
 * under it.  Host pointers of a batch (frames) are valid until the same
 * call.  The emulated device (CXS_GPU_EMULATE) enforces exactly this.
 *
 * Little-endian hosts only (CXS_E_UNSUPPORTED otherwise).
 */
#ifndef CTXSHARD_GPU_H
#define CTXSHARD_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "ctxshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/** cxs_gpu_opts.device / cxs_gpu_probe: run on the host instead of a GPU,
 * on an emulated device that behaves like one, so that code which forgets
 * a wait fails on any machine:
 *
 *  - every stream (the loader's and the consumer's, NULL included) is a
 *    queue executed in order by a thread of its own, later than the call
 *    that queued the work: under the default schedule, only when a host
 *    wait or another stream's wait needs it;
 *  - an event completes when its stream has run what was queued before it;
 *  - a copy from pinned or registered host memory reads it when the copy
 *    runs, and a change to those bytes between queueing and running is a
 *    fault (a buffer refilled before its copy completed);
 *  - "device" memory is host memory, filled with a pattern when allocated,
 *    poisoned (all bits set: NaN, -1) when freed and quarantined for a
 *    while; work that runs on freed memory, or on host memory given as
 *    device memory, is a fault.
 *
 * A fault is sticky, as on a device: every later call of every loader fails
 * with CXS_E_DEVICE and the fault's message; cxs_gpu_emu_fault() returns it.
 * CXS_GPU_EMU_MEMORY=SIZE (bytes, or with K, M or G) gives the emulated
 * device that much memory (default: the host's): mem_info reports it, and
 * an allocation beyond it fails, as cudaMalloc does.
 * The environment variable CXS_GPU_EMU chooses the schedule, read once:
 * "late" (the default: every operation as late as the API allows),
 * "random:SEED" (as soon as queued, after delays drawn from SEED) or
 * "eager" (as soon as queued).
 *
 * A host consumer of emulated batches reads them after
 * cxs_gpu_emu_stream_sync() of the stream it passed to next(), as a CUDA
 * consumer's kernels run after the stream's wait. */
#define CXS_GPU_EMULATE (-1)
/** Emulated device n (0 .. CXS_GPU_EMU_DEVICES-1; CXS_GPU_EMULATE is
 * device 0): each thread has a current emulated device, as with the CUDA
 * runtime, and the library leaves the caller's as it found it. */
#define CXS_GPU_EMU_DEVICES 4
#define CXS_GPU_EMULATE_DEVICE(n) (-1 - (n))

typedef struct cxs_gpu_probe_info {
    int32_t usable;              /**< 1 when a loader can be created on this device */
    int32_t built_with_cuda;     /**< 1 when the library holds the CUDA path */
    int32_t device_count;
    int32_t runtime_version;     /**< e.g. 13000 */
    int32_t driver_version;      /**< 0 when no driver */
    int32_t compute_major, compute_minor;
    int32_t register_read_only;  /**< cudaHostRegisterReadOnly is supported */
    int32_t gds;                 /**< libcufile could be loaded */
    uint64_t total_bytes, free_bytes;
    char name[256];
    char reason[512];            /**< why not usable; empty when usable */
    uint64_t reserved[CXS_INFO_RESERVED]; /**< written as zero: later fields */
} cxs_gpu_probe_info;

/**
 * Whether `device` (a CUDA ordinal, or CXS_GPU_EMULATE) can be used, and
 * why not.  Fills *info always (info must not be NULL).  Returns 0 when
 * usable, CXS_E_UNSUPPORTED (built without CUDA, no driver, no such
 * device) or CXS_E_DEVICE (the runtime reported an error) otherwise.
 * Creates the device's primary context (as any CUDA call would).
 */
CXS_API int cxs_gpu_probe(int32_t device, cxs_gpu_probe_info *info);

/** cxs_gpu_opts.mode */
#define CXS_GPU_AUTO 0u
#define CXS_GPU_STREAM 1u
#define CXS_GPU_RESIDENT 2u
#define CXS_GPU_POOL 3u

/** cxs_gpu_opts.out_dtype: what x holds. */
#define CXS_GPU_OUT_F32 0u
#define CXS_GPU_OUT_BF16 1u  /**< bfloat16, rounded to nearest even */

/** cxs_gpu_opts.flags / cxs_gpu_utt_opts.flags (besides
 * CXS_GATHER_NORMALIZE): every batch handed out is held by the caller
 * until cxs_gpu_loader_release() (cxs_gpu_utt_loader_release()) gives it
 * back, in any order, from any thread; its memory is never refilled
 * before.  While the caller holds batches the loader makes more batch
 * buffers (the ring starts with 3), so that it can still work one batch
 * ahead: up to 16 in all whatever budget_bytes says (a pool takes its
 * whole budget), more up to 64 while the budget has room.  When none is
 * free and none can be made, next() answers -EBUSY (the message gives
 * the sizes) and may be called again once a batch is given back. */
#define CXS_GPU_HOLD 0x100u

/** cxs_gpu_opts.paths: fast paths of the resident/pool upload. */
#define CXS_GPU_NO_REGISTER 1u /**< never cudaHostRegister the mapping */
#define CXS_GPU_GDS 2u         /**< try GPUDirect Storage (libcufile) for whole sections */

typedef struct cxs_gpu_opts {
    int32_t device;          /**< CUDA ordinal, or CXS_GPU_EMULATE */
    uint32_t mode;           /**< CXS_GPU_* */
    uint64_t budget_bytes;   /**< device memory the resident data/pool may take;
                                  0: half the device's total memory, at most 80%
                                  of its free memory (room left for training;
                                  describe's reason says which).  Pool mode:
                                  half the total, less when S - 1 segments
                                  hold every frame with less, never a share
                                  of the free (its layout fixes its order:
                                  the same on a resume); CXS_E_RANGE when
                                  the device has less free */
    uint32_t k;              /**< context: windows of (2k+1)*dim elements */
    uint32_t batch_size;     /**< >= 1 */
    uint32_t flags;          /**< CXS_GATHER_NORMALIZE, CXS_GPU_HOLD */
    uint32_t out_dtype;      /**< CXS_GPU_OUT_* */
    uint32_t labels;         /**< 1: y too (needs labels) */
    uint32_t drop_last;      /**< 1: no short final batch */
    uint32_t threads;        /**< CPU threads (stream: loader workers; uploads) 0: auto */
    uint32_t slots;          /**< stream: pinned staging buffers, >= 3 (0: threads + 2,
                                  at least 3); resident/pool: upload chunks in flight */
    uint32_t pool_segments;  /**< pool: segments the budget is cut into, >= 3 (0: 4) */
    uint32_t paths;          /**< CXS_GPU_NO_REGISTER | CXS_GPU_GDS */
    const cxs_norm *norm;    /**< with CXS_GATHER_NORMALIZE: these statistics (train's)
                                  instead of the dataset's own; NULL: the dataset's.
                                  Copied at create. */
    uint64_t reserved[CXS_OPTS_RESERVED]; /**< zero (start from cxs_gpu_opts_init) */
} cxs_gpu_opts;

/** A batch in device memory. */
typedef struct cxs_gpu_batch {
    void *x;                 /**< device [n][(2k+1)*dim], float32 or bfloat16 */
    int64_t *y;              /**< device [n] labels, or NULL */
    const uint64_t *frames;  /**< host [n]: the global frame numbers served */
    size_t n;                /**< batch_size, or fewer for the last batch */
    uint64_t index;          /**< batch number within the epoch */
    uint64_t position;       /**< position of the first sample (the sampler's in
                                  stream/resident mode, the pool order's in pool
                                  mode): create or reset there to resume */
} cxs_gpu_batch;

/** Fill o with the defaults (all 0: device 0, mode auto); k and
 *  batch_size must then be set. */
CXS_API void cxs_gpu_opts_init(cxs_gpu_opts *o);

/** What a loader chose and did (cxs_gpu_loader_describe). */
typedef struct cxs_gpu_loader_info {
    uint32_t mode;             /**< the mode in use (never AUTO) */
    uint32_t upload_path;      /**< resident/pool: 0 pinned staging, 1 registered
                                    mapping, 2 cuFile (GPUDirect Storage, or
                                    cuFile's compatibility mode, which reads
                                    through host memory: cuFile chooses; the
                                    reason says which: "GPUDirect Storage" or
                                    "cuFile compatibility mode (POSIX reads
                                    through the CUDA driver)") */
    uint64_t device_bytes;     /**< device memory held */
    uint64_t uploaded_bytes;   /**< bytes sent host -> device so far */
    double upload_seconds;     /**< resident: wall time of the initial upload */
    uint64_t pool_utterances;  /**< pool: utterances per segment (mean) */
    char reason[256];          /**< why this mode (AUTO) or path */
    uint64_t reserved[CXS_INFO_RESERVED]; /**< written as zero: later fields */
} cxs_gpu_loader_info;

typedef struct cxs_gpu_loader cxs_gpu_loader;

/**
 * Create a loader that delivers epoch `epoch` of `sampler` from position
 * `start` into device memory.  ds and sampler must outlive the loader.
 *
 * Stream and resident modes serve the sampler's order exactly (the same
 * frames, in the same batches, as cxs_loader).  Pool mode serves the order
 * of the block schedule CXS_SAMPLER_BLOCK uses (ctxshard.h), with blocks
 * of one segment's rows (budget less the batch ring, / pool_segments; no
 * guard rows) and R = pool_segments - 1 blocks a round draws from: it keeps
 * those R blocks resident while the next uploads, gives a block's segment
 * to the next block once the block's last round is over, and serves every
 * frame exactly once.  The order is a function of the sampler's seed and
 * origin, the epoch and the block size only (never of upload timing), so
 * the pool starts at any `start`, as the other modes do.  A distributed
 * sampler's rank r serves positions origin + r, origin + r + world_size,
 * ... of that order: every rank uploads every block, and every rank serves
 * (frames - origin) / world_size samples (rounded down: no wrap-around
 * padding).  It needs a shuffle sampler (its seed, rank, world_size and
 * origin are used).
 *
 * Returns 0; CXS_E_UNSUPPORTED (no CUDA / no device; diag says why);
 * CXS_E_NO_LABELS (labels of a features-only dataset); CXS_E_INVALID (bad
 * options, bfloat16 output in stream mode, pool mode without a shuffle
 * sampler or from a start past its samples); CXS_E_RANGE (resident does
 * not fit the budget, a pool segment cannot hold the longest utterance);
 * CXS_E_DEVICE; -ENOMEM; or an error reading a compressed chunk during the
 * upload.  diag may be NULL.
 */
CXS_API int cxs_gpu_loader_create(const cxs_dataset *ds, const cxs_sampler *sampler,
                                  const cxs_gpu_opts *opts, uint64_t epoch, uint64_t start,
                                  cxs_gpu_loader **out, cxs_diag *diag);

/**
 * The next batch, in device memory, ready for work enqueued on `stream` (a
 * cudaStream_t; NULL for the legacy default stream): the stream is made to
 * wait for the batch's upload/expansion, the host does not wait for the
 * device.  *batch is NULL at the end of the epoch.  Without CXS_GPU_HOLD
 * the previous batch's memory is reused after the work enqueued, before
 * this call, on the stream that batch was handed to.  One consumer thread
 * per loader.  Returns 0, -EBUSY (CXS_GPU_HOLD: every batch buffer is
 * held and the budget has no room for another; not sticky: give one back
 * and call again) or the first error (then cxs_gpu_loader_error() has
 * the diagnostic).
 */
CXS_API int cxs_gpu_loader_next(cxs_gpu_loader *l, void *stream, const cxs_gpu_batch **batch);

/**
 * cxs_gpu_loader_next with a diagnostic, as cxs_loader_next_ex: on
 * failure diag (NULL allowed) gets what cxs_gpu_loader_error() would
 * hand back (the code, the message, and the file and offset where the
 * failure has a place), in the caller's own memory, so that no later call
 * or thread changes it.  The same return codes.
 */
CXS_API int cxs_gpu_loader_next_ex(cxs_gpu_loader *l, void *stream, const cxs_gpu_batch **batch,
                                   cxs_diag *diag);

/**
 * With CXS_GPU_HOLD: give back the batch whose x is `x` (a cxs_gpu_batch's
 * x); its memory is refilled only after the work queued on `stream` (a
 * cudaStream_t, NULL: the legacy default stream) before this call, so
 * pass the stream the caller's work on the batch went to.  Any thread,
 * any order; batches held across reset() stay valid.  Returns 0,
 * CXS_E_INVALID (not a batch held, or no CXS_GPU_HOLD) or CXS_E_DEVICE.
 */
CXS_API int cxs_gpu_loader_release(cxs_gpu_loader *l, const void *x, void *stream);

/** Restart at (epoch, start), as cxs_loader_reset (CXS_E_INVALID for a
 * start past the epoch's samples in pool mode).  Resident data stays on
 * the device; a pool uploads the blocks the position needs. */
CXS_API int cxs_gpu_loader_reset(cxs_gpu_loader *l, uint64_t epoch, uint64_t start);

/** What the loader chose (mode, upload path) and has moved. */
CXS_API void cxs_gpu_loader_describe(const cxs_gpu_loader *l, cxs_gpu_loader_info *info);

/**
 * Copy n bytes of device memory at src (a batch's x or y, say) to host dst,
 * after the work enqueued on `stream`, and wait for the copy.  For checks,
 * tools and debugging, not a fast path.  Returns 0, CXS_E_INVALID or
 * CXS_E_DEVICE.
 */
CXS_API int cxs_gpu_loader_download(cxs_gpu_loader *l, void *stream, const void *src, void *dst,
                                    size_t n);

/** The last error as a diagnostic, like cxs_loader_error: code, message
 *  (empty when none), and the file and offset where the failure has a
 *  place (a shard truncated since open).  NULL for a NULL loader.  Valid
 *  until the next call on l. */
CXS_API const cxs_diag *cxs_gpu_loader_error(const cxs_gpu_loader *l);

/** Wait for the loader's own work and for the work the consumer queued on
 * its stream before this call (it may still read the batches handed out),
 * then free the device and pinned memory, the streams and events.  NULL is
 * a no-op.  In a child forked after the loader was created, next() fails
 * saying so (a CUDA device cannot be used across fork()) and free()
 * releases nothing: the threads, streams and device memory are the
 * parent's. */
CXS_API void cxs_gpu_loader_free(cxs_gpu_loader *l);

/* ---- whole-utterance batches assembled on the device -------------------- */

/** Options of cxs_gpu_utt_loader_create. */
typedef struct cxs_gpu_utt_opts {
    int32_t device;         /**< CUDA ordinal, or CXS_GPU_EMULATE */
    uint64_t budget_bytes;  /**< device memory the resident data and the batch
                                 buffers may take; 0: half the device's total
                                 memory, at most 80% of its free memory */
    uint32_t flags;         /**< CXS_GATHER_NORMALIZE, CXS_GPU_HOLD (CXS_PAD_PER_UTTERANCE is
                                 computed on the CPU only: CXS_E_INVALID) */
    uint32_t out_dtype;     /**< CXS_GPU_OUT_F32 or CXS_GPU_OUT_BF16 */
    uint32_t labels;        /**< 1: per-frame labels y too (needs labels) */
    uint32_t targets;       /**< 1: the label sequences as CTC targets (needs them) */
    uint32_t slots;         /**< upload chunks in flight, 3..16 (0: 4) */
    uint32_t paths;         /**< CXS_GPU_NO_REGISTER | CXS_GPU_GDS */
    const cxs_norm *norm;   /**< with CXS_GATHER_NORMALIZE: these statistics
                                 (train's); NULL: the dataset's.  Copied. */
    uint64_t reserved[CXS_OPTS_RESERVED]; /**< zero (start from cxs_gpu_utt_opts_init) */
} cxs_gpu_utt_opts;

/** Fill o with the defaults (all 0: device 0). */
CXS_API void cxs_gpu_utt_opts_init(cxs_gpu_utt_opts *o);

/** A padded batch of whole utterances in device memory: cxs_utt_batch's
 * layout, the arrays on the device, the counts also on the host. */
typedef struct cxs_gpu_utt_batch {
    void *x;                          /**< device [n][tmax][dim], float32 or bfloat16,
                                           zero past each length */
    int64_t *lengths;                 /**< device [n] frames */
    int64_t *y;                       /**< device [n][tmax], CXS_UTT_PAD_LABEL past
                                           each length; NULL without labels */
    int64_t *targets;                 /**< device [n][lmax], CXS_UTT_PAD_LABEL past
                                           each target length; NULL without targets */
    int64_t *target_lengths;          /**< device [n]; NULL without targets */
    const int64_t *host_lengths;      /**< host [n]: lengths */
    const int64_t *host_target_lengths; /**< host [n]: target_lengths, or NULL */
    const uint64_t *utts;             /**< host [n] utterance numbers */
    size_t n;
    uint64_t tmax;                    /**< the longest of the batch */
    uint64_t lmax;                    /**< the longest label sequence (targets) */
    uint64_t frames;                  /**< real frames: the sum of lengths */
    uint64_t index;                   /**< this rank's position of the batch */
    uint64_t global;                  /**< its place in the epoch's global order */
} cxs_gpu_utt_batch;

typedef struct cxs_gpu_utt_loader cxs_gpu_utt_loader;

/**
 * Whole-utterance batches of `sampler` (ctxshard.h) assembled on the
 * device: the dataset's feature sections (and, with labels, its per-frame
 * labels) are uploaded once, as the resident mode of cxs_gpu_loader does
 * (compressed data decoded on the host during the upload; float16 and
 * bfloat16 kept as stored and converted by the kernel); then each batch
 * sends one 24-byte descriptor per utterance (its device row, first frame
 * and length), its lengths and, with targets, its label sequences padded
 * on the host (through pinned buffers), and a kernel writes x [n][tmax][D]
 * zero-padded and y [n][tmax] padded with CXS_UTT_PAD_LABEL.  The batches
 * are byte for byte those of cxs_utt_loader for the same sampler, epoch
 * and position (float32 output; bfloat16 output is that rounded to
 * nearest even), in the same order; the utterance list of each comes from
 * cxs_utt_sampler_batch.  ds and sampler must outlive the loader.
 *
 * Device pointers handed out are valid until the next
 * cxs_gpu_utt_loader_next (or reset/free), host ones likewise, or with
 * CXS_GPU_HOLD until cxs_gpu_utt_loader_release(); the work
 * the caller enqueues on its stream before that call is ordered before
 * the memory is reused, as with cxs_gpu_loader.
 *
 * Returns 0; CXS_E_UNSUPPORTED (no CUDA / no device; diag says why);
 * CXS_E_NO_LABELS, CXS_E_NO_SEQUENCES; CXS_E_INVALID (a bad option, named;
 * start past the rank's batches); CXS_E_RANGE (the data and the batch
 * buffers do not fit budget_bytes: the message gives both sizes);
 * CXS_E_DEVICE; -ENOMEM; or an error decoding a compressed chunk.  diag
 * may be NULL.
 */
CXS_API int cxs_gpu_utt_loader_create(const cxs_dataset *ds, const cxs_utt_sampler *sampler,
                                      const cxs_gpu_utt_opts *opts, uint64_t epoch,
                                      uint64_t start, cxs_gpu_utt_loader **out,
                                      cxs_diag *diag);

/** The next batch, ready for work enqueued on `stream` (a cudaStream_t;
 * NULL: the legacy default stream); *batch NULL at the end of the epoch.
 * One consumer, one stream.  Returns 0 or the first error (then
 * cxs_gpu_utt_loader_error has the message). */
CXS_API int cxs_gpu_utt_loader_next(cxs_gpu_utt_loader *l, void *stream,
                                    const cxs_gpu_utt_batch **batch);

/** cxs_gpu_utt_loader_next with a diagnostic, as cxs_gpu_loader_next_ex. */
CXS_API int cxs_gpu_utt_loader_next_ex(cxs_gpu_utt_loader *l, void *stream,
                                       const cxs_gpu_utt_batch **batch, cxs_diag *diag);

/** With CXS_GPU_HOLD: give back the batch whose x is `x`, as
 * cxs_gpu_loader_release (its host arrays go back with it). */
CXS_API int cxs_gpu_utt_loader_release(cxs_gpu_utt_loader *l, const void *x, void *stream);

/** Restart at this rank's position `start` of `epoch` (CXS_E_INVALID past
 * its batches).  The resident data stays on the device. */
CXS_API int cxs_gpu_utt_loader_reset(cxs_gpu_utt_loader *l, uint64_t epoch, uint64_t start);

/** What the loader holds and has moved (mode reads CXS_GPU_RESIDENT). */
CXS_API void cxs_gpu_utt_loader_describe(const cxs_gpu_utt_loader *l, cxs_gpu_loader_info *info);

/** The last error, as cxs_gpu_loader_error. */
CXS_API const cxs_diag *cxs_gpu_utt_loader_error(const cxs_gpu_utt_loader *l);

/** Wait for the loader's work and for the consumer's work queued before
 * this call, then free everything (as cxs_gpu_loader_free).  NULL is a
 * no-op. */
CXS_API void cxs_gpu_utt_loader_free(cxs_gpu_utt_loader *l);

/* ---- positions, epochs and saved states of the GPU loaders ------------- */

/**
 * Where a GPU loader's consumer stands, as cxs_loader_position (ctxshard.h,
 * "Positions, epochs and saved states"): the epoch it is positioned in and
 * the start of its next batch there -- after create, reset, set_epoch or
 * seek at (e, s), (e, s); after a batch handed out, the batch's position
 * plus its n (a sampler position; pool mode: the pool order's); once the
 * last batch of e was handed out (or none was left, or a dropped tail),
 * (e + 1, 0).  Batches prefetched on the device do not count.  The kind
 * says what `next` counts: stream and resident mode serve the sampler's
 * order batch for batch as cxs_loader does, so their positions are
 * CXS_POSITION_FRAMES and a cxs_loader's position seeks them (and theirs
 * a cxs_loader over the same sampler); pool mode's are
 * CXS_POSITION_GPU_POOL.  From the consumer's thread, like _next.
 * Returns 0, CXS_E_INVALID (NULL) or CXS_E_RANGE (past epoch UINT64_MAX).
 */
CXS_API int cxs_gpu_loader_position(const cxs_gpu_loader *l, cxs_position *out);
/** Serve `epoch` next, from cxs_position_start(position, epoch): a reset
 * there, as cxs_loader_set_epoch.  Returns as cxs_gpu_loader_reset. */
CXS_API int cxs_gpu_loader_set_epoch(cxs_gpu_loader *l, uint64_t epoch);
/**
 * Continue at a saved position, as cxs_loader_seek: CXS_E_INVALID with
 * diag (may be NULL) saying why for another version, another kind (a pool
 * position in stream or resident mode, or the reverse), reserved words
 * not zero, or next past this rank's samples; else a reset at
 * (p->epoch, p->next), whose failure diag carries.
 */
CXS_API int cxs_gpu_loader_seek(cxs_gpu_loader *l, const cxs_position *p, cxs_diag *diag);

/** As cxs_gpu_loader_position, of the utterance loader: next is this
 * rank's batch, kind CXS_POSITION_UTTERANCES (its batches are
 * cxs_utt_loader's: either continues the other's position). */
CXS_API int cxs_gpu_utt_loader_position(const cxs_gpu_utt_loader *l, cxs_position *out);
/** As cxs_gpu_loader_set_epoch. */
CXS_API int cxs_gpu_utt_loader_set_epoch(cxs_gpu_utt_loader *l, uint64_t epoch);
/** As cxs_gpu_loader_seek (next past this rank's batches of the epoch:
 * CXS_E_INVALID, from cxs_gpu_utt_loader_reset). */
CXS_API int cxs_gpu_utt_loader_seek(cxs_gpu_utt_loader *l, const cxs_position *p,
                                    cxs_diag *diag);

/* ---- the emulated device's consumer side (CXS_GPU_EMULATE) ---------------- */

/** A stream of the emulated device, for a consumer: pass it to next() and
 * queue work on it with cxs_gpu_emu_copy_async.  Returns 0 or -ENOMEM. */
CXS_API int cxs_gpu_emu_stream_create(void **stream);

/** Destroy an emulated stream (its queued work still runs).  NULL: no-op. */
CXS_API void cxs_gpu_emu_stream_destroy(void *stream);

/** A consumer's work on an emulated stream (NULL: the default one): copy n
 * bytes from src to dst when the stream reaches it, as a kernel reading a
 * batch would.  Returns 0, CXS_E_INVALID or CXS_E_DEVICE (faulted). */
CXS_API int cxs_gpu_emu_copy_async(void *dst, const void *src, size_t n, void *stream);

/** Wait until an emulated stream (NULL: the default one) has run all its
 * work.  Returns 0, or CXS_E_DEVICE when the device has faulted. */
CXS_API int cxs_gpu_emu_stream_sync(void *stream);

/** The emulated device's first fault, NULL when none: an operation on
 * freed memory, host memory given as device memory, a pinned buffer
 * written while a queued copy still read it.  Valid for the process. */
CXS_API const char *cxs_gpu_emu_fault(void);

/** Make emulated device `device` (0 .. CXS_GPU_EMU_DEVICES-1) the calling
 * thread's current one, as cudaSetDevice does.  Returns 0 or
 * CXS_E_INVALID. */
CXS_API int cxs_gpu_emu_set_device(int32_t device);

/** The calling thread's current emulated device (0 until set). */
CXS_API int32_t cxs_gpu_emu_device(void);

/** Host waits so far, in this process, on emulated events the library
 * made without blocking synchronisation (on a device, each such wait
 * spins a CPU core until the event completes; the library's own events
 * are made with cudaEventBlockingSync, so this stays 0). */
CXS_API uint64_t cxs_gpu_emu_spin_waits(void);

/** The schedule in use: "late", "random" or "eager" (CXS_GPU_EMU). */
CXS_API const char *cxs_gpu_emu_schedule(void);

/** Kinds of emulated calls cxs_gpu_emu_fail() can make fail. */
#define CXS_GPU_EMU_FAIL_REGISTER 0   /**< host registration (cudaHostRegister) */
#define CXS_GPU_EMU_FAIL_UNREGISTER 1 /**< cudaHostUnregister (it still unregisters) */
#define CXS_GPU_EMU_FAIL_FREE 2       /**< cudaFree, cudaFreeHost (they still free) */
#define CXS_GPU_EMU_FAIL_LAUNCH 3     /**< a kernel launch (nothing queued) */
#define CXS_GPU_EMU_FAIL_KINDS 4

/** Make the nth call (1: the next) of kind `what` from now on fail once,
 * in this process; nth 0 cancels.  Each failure sets the calling thread's
 * last error, which stays until read as the CUDA runtime's does
 * (cudaGetLastError): a launch reports its own error, never one its
 * caller ignored before.  Returns 0 or CXS_E_INVALID.
 *
 * Besides, as on a device: a registration that overlaps one still live
 * is refused (cudaErrorHostMemoryAlreadyRegistered); the environment
 * variable CXS_GPU_EMU_PINNED=SIZE (read once, as CXS_GPU_EMU_MEMORY)
 * limits the pinned host memory live at once, and cudaHostAlloc beyond
 * it fails; a process forked after the device was used gets
 * cudaErrorInitializationError from every call in the child. */
CXS_API int cxs_gpu_emu_fail(int what, uint64_t nth);

/** Register host memory with the emulated device, as a program that
 * pins its own buffers (cudaHostRegister) does.  Returns 0, -EEXIST when
 * part of the range is registered already, CXS_E_INVALID or
 * CXS_E_DEVICE. */
CXS_API int cxs_gpu_emu_host_register(void *p, size_t n);

/** Unregister what cxs_gpu_emu_host_register() registered. */
CXS_API void cxs_gpu_emu_host_unregister(void *p);

#ifdef __cplusplus
}
#endif
#endif /* CTXSHARD_GPU_H */
