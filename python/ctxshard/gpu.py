"""Batches of context windows delivered into GPU memory (ctxshard_gpu.h).

    import ctxshard.gpu
    ctxshard.gpu.probe(0)            # {'usable': True, 'name': 'NVIDIA H200', ...}

For PyTorch, use ctxshard.torch.Loader(..., device='cuda'), which yields
CUDA tensors over these buffers.  GpuLoader is the framework-free layer: its
batches are raw device pointers, valid until the next call to next().

Modes: 'stream' (the CPU loader fills pinned buffers, a copy stream uploads
them), 'resident' (features uploaded once; each batch sends its frame
numbers and a kernel expands the windows on the device), 'pool' (a device
pool of whole utterances refreshed in the background, for data larger than
the memory budget), 'auto' (resident when it fits the budget, else stream).

device=EMULATE runs everything on the host ("device" pointers are host
memory), on an emulated device that behaves like one (ctxshard_gpu.h):
work runs on each stream's own thread later than it is queued, freed
memory is poisoned, a pinned buffer rewritten under a queued copy is a
fault.  A host consumer reads an emulated batch after emulated_sync();
emulated_fault() says what went wrong.  For tests and debugging without a
GPU.

Ownership: GpuBatch holds raw addresses, valid until the loader's next
next(), reset() or close(); with hold=True until release(batch) instead
(the torch adapters hold every batch this way, through a Lease each of
their tensors keeps, so that a batch stays valid while anything refers to
it).  What the loader points into is freed when the GpuLoader is closed
or collected and no _Owner reference remains (every Lease holds one, so a
tensor never outlives its memory)."""
import ctypes
import errno
import gc
from ctypes import byref, c_void_p

import numpy as np

from . import Dataset, Sampler, _raise, _same_dataset, normalization
from . import _args as _a
from . import _native as _n
from ._native import lib as _lib

__all__ = ["probe", "GpuLoader", "EMULATE", "MODES", "emulated_sync", "emulated_fault"]

EMULATE = _n.GPU_EMULATE
MODES = {"auto": _n.GPU_AUTO, "stream": _n.GPU_STREAM, "resident": _n.GPU_RESIDENT,
         "pool": _n.GPU_POOL}
MODE_NAMES = {v: k for k, v in MODES.items()}
UPLOAD_PATHS = {0: "pinned staging", 1: "registered mapping",
                2: "cuFile (GPUDirect Storage, or its compatibility mode)"}


def _device(func, device):
    """A CUDA device number (0, 1, ...) or EMULATE."""
    return _a.integer(func, "device", device, EMULATE, 2**31 - 1,
                      "a CUDA device number (0, 1, ...) or ctxshard.gpu.EMULATE")


class _Owner:
    """A C GPU loader and what it reads (dataset and sampler handles),
    freed when the last reference goes: the Python loader holds one until
    close(), and so does every tensor or array over its buffers."""

    __slots__ = ("ptr", "_free", "_keep", "__weakref__")

    def __init__(self, ptr, free, keep):
        self.ptr, self._free, self._keep = ptr, free, keep

    def __del__(self):
        if self.ptr is not None:
            self._free(self.ptr)
            self.ptr = None


class Lease:
    """A device batch held by the caller (a loader made with hold=True):
    given back to the loader -- its reuse ordered after the work queued on
    `stream`, the stream it was handed to -- when the last reference to
    this object goes.  Every tensor over the batch's memory refers to it
    (through its buffer), so the batch stays valid as long as any tensor,
    view or autograd saved tensor over it exists.  It holds the loader's
    owner: the loader's memory outlives it."""

    __slots__ = ("owner", "_release", "x", "stream", "_count")

    def __init__(self, owner, release, x, stream, count=None):
        self.owner, self._release, self.x, self.stream = owner, release, x, stream
        self._count = count  # a one-element list: batches held, or None
        if count is not None:
            count[0] += 1

    def __del__(self):
        owner, self.owner = self.owner, None
        if owner is not None and owner.ptr is not None:
            # a failure is the loader's error, reported at its next call
            self._release(owner.ptr, self.x, self.stream)
        if self._count is not None:
            self._count[0] -= 1


def emulated_fault():
    """The emulated device's first fault (a str), or None: work that ran on
    freed memory, host memory given as device memory, a pinned buffer
    written while a queued copy still read it.  Sticky for the process."""
    f = _lib.cxs_gpu_emu_fault()
    return None if f is None else f.decode("utf-8", "replace")


def emulated_sync(stream=None):
    """Wait until the emulated device has run the work queued on `stream`
    (None: the default stream), as a host reader of emulated batches must
    before reading them; raises CtxshardError when the device faulted."""
    if _lib.cxs_gpu_emu_stream_sync(stream):
        _fail(_n.E_DEVICE, ("emulated device fault: " + (emulated_fault() or "")).encode())


def probe(device=0):
    """What the library sees of CUDA device `device`: a dict with 'usable'
    and, when not, 'reason' (built without CUDA, no driver, no device)."""
    device = _device("probe", device)
    info = _n.GpuProbeInfo()
    _lib.cxs_gpu_probe(device, byref(info))
    return {
        "usable": bool(info.usable), "built_with_cuda": bool(info.built_with_cuda),
        "device_count": info.device_count, "name": info.name.decode("utf-8", "replace"),
        "compute_capability": (info.compute_major, info.compute_minor),
        "total_bytes": info.total_bytes, "free_bytes": info.free_bytes,
        "runtime_version": info.runtime_version, "driver_version": info.driver_version,
        "register_read_only": bool(info.register_read_only), "gds": bool(info.gds),
        "reason": info.reason.decode("utf-8", "replace"),
    }


class GpuBatch:
    """One batch in device memory: x and y are device addresses (ints; y is
    None without labels), valid until the loader's next call; frames (the
    global frame numbers served) is read, as a numpy copy, on first use."""

    __slots__ = ("x", "y", "n", "index", "position", "_frames_ptr", "_frames")

    def __init__(self, b):
        self.x, self.y, self.n = b.x, b.y, b.n
        self.index, self.position = b.index, b.position
        self._frames_ptr, self._frames = b.frames, None

    @property
    def frames(self):
        if self._frames is None:
            p = ctypes.cast(self._frames_ptr, ctypes.POINTER(ctypes.c_uint64))
            self._frames = (np.ctypeslib.as_array(p, shape=(self.n,)).copy() if self.n
                            else np.empty(0, np.uint64))
        return self._frames


class GpuLoader:
    """The C GPU loader over a Dataset and a Sampler (both must stay open).

    context/batch_size as everywhere; mode: 'auto', 'stream', 'resident' or
    'pool'; budget: device bytes the resident data or pool may take (None:
    half the device's memory, at most 80% of what is free; pool: half the
    device's memory, less when the dataset needs less); out_dtype: 'float32' or 'bfloat16' (resident and
    pool); register=False: never pin the file mapping (always staged
    copies); gds=True: try GPUDirect Storage for the resident upload.
    hold=True: every batch stays valid until release(batch) gives it back
    (any order); the loader makes more batch buffers within its budget
    while batches are held."""

    def __init__(self, dataset, sampler, context, batch_size, device=0, mode="auto", budget=None,
                 normalize=False, labels=None, drop_last=False, threads=None, slots=0,
                 pool_segments=0, out_dtype="float32", register=True, gds=False, epoch=0,
                 start=0, hold=False):
        f = "GpuLoader"
        if not isinstance(dataset, Dataset):
            raise TypeError(f"{f}: dataset={_a._show(dataset)} is a {type(dataset).__name__}, "
                            "expected a ctxshard.Dataset (ctxshard.open(path))")
        if not isinstance(sampler, Sampler):
            raise TypeError(f"{f}: sampler={_a._show(sampler)} is a {type(sampler).__name__}, "
                            "expected a ctxshard.Sampler over the dataset")
        if sampler.dataset is not dataset and not _same_dataset(sampler.dataset, dataset):
            raise ValueError(f"{f}: the sampler is over {sampler.dataset.path}, not "
                             f"{dataset.path}: make it with ctxshard.Sampler(dataset, ...)")
        context = _a.integer(f, "context", context, 0, 1000000)
        batch_size = _a.integer(f, "batch_size", batch_size, 1, 2**31 - 1)
        device = _device(f, device)
        _a.choice(f, "mode", mode, tuple(MODES))
        budget = 0 if budget is None else _a.size(f, "budget", budget)
        labels = _a.optional_flag(f, "labels", labels)
        if labels is None:
            labels = dataset.has_frame_labels
        elif labels and not dataset.has_frame_labels:
            raise ValueError(f"{f}: labels=True, but {dataset.path} has "
                             + ("no per-frame labels (label sequences only)"
                                if dataset.has_label_seqs else
                                "no labels (features only, like a test split)") +
                             ": leave labels unset (the default: labels when the dataset has "
                             "them) or pass labels=False")
        drop_last = _a.flag(f, "drop_last", drop_last)
        threads = _a.optional_integer(f, "threads", threads, 1, 256)
        slots = _a.integer(f, "slots", slots, 0, 1024, "0 (the default: threads + 2) or 3..1024")
        if slots in (1, 2):
            raise ValueError(f"{f}: slots={slots} is out of range: expected 0 (the default: "
                             "threads + 2) or 3..1024")
        pool_segments = _a.integer(f, "pool_segments", pool_segments, 0, 1 << 16,
                                   "0 (the default, 4) or 3..65536")
        if pool_segments in (1, 2):
            raise ValueError(f"{f}: pool_segments={pool_segments} is out of range: expected 0 "
                             "(the default, 4) or 3..65536")
        _a.choice(f, "out_dtype", out_dtype, ("float32", "bfloat16"))
        register = _a.flag(f, "register", register)
        gds = _a.flag(f, "gds", gds)
        hold = _a.flag(f, "hold", hold)
        epoch = _a.integer(f, "epoch", epoch, 0, 2**64 - 1)
        start = _a.integer(f, "start", start, 0, len(sampler),
                           f"0..{len(sampler)} (a position in the sampler's epoch)")
        nmode, nst = normalization(f, dataset, normalize)
        self.dataset, self.sampler = dataset, sampler
        self.context, self.batch_size = context, batch_size
        self.out_dtype = out_dtype
        self.input_size = dataset.input_size(self.context)
        opts = _n.GpuOpts()
        opts.device = device
        opts.mode = MODES[mode]
        opts.budget_bytes = budget
        opts.k, opts.batch_size = self.context, self.batch_size
        opts.flags = (_n.GATHER_NORMALIZE if nmode else 0) | (_n.GPU_HOLD if hold else 0)
        self.hold = hold
        if nst is not None:  # train's statistics, copied at create
            dp = ctypes.POINTER(ctypes.c_double)
            nrm = _n.Norm(dataset.dim, nst[0].ctypes.data_as(dp), nst[1].ctypes.data_as(dp))
            opts.norm = ctypes.pointer(nrm)
        opts.out_dtype = _n.GPU_OUT_BF16 if out_dtype == "bfloat16" else _n.GPU_OUT_F32
        opts.labels, opts.drop_last = int(labels), int(drop_last)
        opts.threads = threads or 0
        opts.slots, opts.pool_segments = slots, pool_segments
        opts.paths = (0 if register else _n.GPU_NO_REGISTER) | (_n.GPU_GDS if gds else 0)
        ptr = c_void_p()
        diag = _n.Diag()
        self._owner = None
        rc = _lib.cxs_gpu_loader_create(dataset._ptr, sampler._ptr, byref(opts), int(epoch),
                                        int(start), byref(ptr), byref(diag))
        if rc:
            _raise(rc, diag, what="GPU loader")
        # the dataset and the sampler outlive the C loader: its owner holds them
        self._owner = _Owner(ptr, _lib.cxs_gpu_loader_free, (dataset._h, sampler))
        self.emulated = device == EMULATE
        self._bp = ctypes.POINTER(_n.GpuBatch)()

    @property
    def _ptr(self):
        return self._owner.ptr if self._owner is not None else None

    @property
    def owner(self):
        """What keeps the C loader's memory alive: hold it as long as
        memory it hands out is used (the torch adapters' tensors do)."""
        return self._owner

    def next(self, stream=None):
        """The next batch, ready for work on `stream` (a cudaStream_t as an
        int, e.g. torch.cuda.current_stream().cuda_stream; None: the
        default stream), or None at the end of the epoch."""
        if stream is not None:
            stream = _a.integer("GpuLoader.next", "stream", stream, 0, 2**64 - 1,
                                "None or a cudaStream_t as an int "
                                "(torch.cuda.current_stream().cuda_stream)")
        next_batch(_lib.cxs_gpu_loader_next_ex, self._live(), stream, self._bp, "GPU loader")
        return GpuBatch(self._bp.contents) if self._bp else None

    def release(self, batch, stream=None):
        """hold=True: give `batch` (a GpuBatch of this loader) back; its
        memory is refilled only after the work queued on `stream` (the
        stream the work on it went to; None: the default stream)."""
        rc = _lib.cxs_gpu_loader_release(self._live(), batch.x, stream or None)
        if rc:
            _fail(rc, _lib.cxs_gpu_loader_error(self._ptr))

    def reset(self, epoch, start=0):
        """Start over at position `start` of `epoch`."""
        epoch = _a.integer("GpuLoader.reset", "epoch", epoch, 0, 2**64 - 1)
        start = _a.integer("GpuLoader.reset", "start", start, 0, len(self.sampler),
                           f"0..{len(self.sampler)} (a position in the sampler's epoch)")
        rc = _lib.cxs_gpu_loader_reset(self._live(), int(epoch), int(start))
        if rc:
            _fail(rc, _lib.cxs_gpu_loader_error(self._ptr))

    def info(self):
        """The mode in use and why, the upload path, bytes held and moved."""
        return describe(_lib.cxs_gpu_loader_describe, self._live())

    def _live(self):
        if not self._ptr:
            raise ValueError("GPU loader is closed")
        return self._ptr

    def close(self):
        """No more batches from this loader.  Its device and pinned memory
        are freed now (after the loader's work and the work queued on the
        consumer's stream) unless a tensor over them still holds the owner;
        then when the last one goes."""
        self._owner = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def next_batch(fn, ptr, stream, bp, what):
    """fn(ptr, stream, &bp, &diag): a C GPU loader's next_ex, its failure
    raised with its diagnostic, as the CPU loaders' are.  -EBUSY (hold:
    every batch buffer held) is tried once more after a collection, which
    gives back the batches nothing refers to any more."""
    diag = _n.Diag()
    rc = fn(ptr, stream or None, byref(bp), byref(diag))
    if rc == -errno.EBUSY:
        gc.collect()
        rc = fn(ptr, stream or None, byref(bp), byref(diag))
    if rc:
        _raise(rc, diag, what=what)


def describe(fn, ptr):
    """What a C GPU loader (fn: its describe function) chose and did, as a
    dict: mode, upload_path, device_bytes, uploaded_bytes, upload_seconds,
    pool_utterances and reason (why this mode, path and budget)."""
    li = _n.GpuLoaderInfo()
    fn(ptr, byref(li))
    return {"mode": MODE_NAMES[li.mode], "upload_path": UPLOAD_PATHS.get(li.upload_path),
            "device_bytes": li.device_bytes, "uploaded_bytes": li.uploaded_bytes,
            "upload_seconds": li.upload_seconds, "pool_utterances": li.pool_utterances,
            "reason": li.reason.decode("utf-8", "replace")}


def _fail(rc, diag, what="GPU loader"):
    """Raise the error of rc with the loader's own diagnostic (its message,
    and the file and offset where the failure has a place)."""
    # a copy: the loader's is valid until its next call
    d = _n.Diag.from_buffer_copy(diag.contents) if diag else _n.Diag()
    _raise(rc, d, what=what)
