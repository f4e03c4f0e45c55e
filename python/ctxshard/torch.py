"""PyTorch adapters for ctxshard.

FrameDataset: a map-style Dataset of (window, label) for users who keep
their DataLoader and samplers; it fetches whole batches at once through
__getitems__ (pass collate_fn=ctxshard.torch.collate to skip the per-sample
stacking).

Loader: the native prefetching loader as an iterable of (x, y) tensors,
x float32 [B, (2k+1)*D], y int64 [B]; no Python in the hot path, with
set_epoch(), state_dict()/load_state_dict() for exact mid-epoch resume (also
on another number of ranks or threads), and rank/world_size from
torch.distributed when it is initialised.  shuffle="block" reads data larger
than memory in blocks of whole utterances within memory= bytes.  With
device='cuda' the batches are delivered into GPU memory by the library
(ctxshard.gpu: stream, resident or pool mode) and come out as CUDA tensors
without a host copy, ordered on the current torch stream."""
import collections.abc
import ctypes
import errno
import gc
import mmap
import os
import sys
import warnings

import numpy as np
import torch
from torch.utils.data import Dataset as _TorchDataset
from torch.utils.data._utils.collate import default_collate

from . import (BLOCK, SEQUENTIAL, SHUFFLE, WEIGHTED, CtxshardError, Dataset, Sampler, _Buffer,
               _args as _a, _native as _n, _raise, memory_available, normalization,
               warn_if_incomplete)
from . import gpu as _gpu
from ._native import lib as _lib

__all__ = ["FrameDataset", "Loader", "collate"]

class _Batch(collections.abc.Sequence):
    """A batch gathered at once, presented as a sequence of (x_i, y_i) so that
    DataLoader's default collate works; collate() returns the tensors as
    they are."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def collate(batch):
    """collate_fn for DataLoader over a FrameDataset: (x, y) without a copy."""
    if isinstance(batch, _Batch):
        return batch.x, batch.y
    return default_collate(batch)


class _ByPath(_TorchDataset):
    """A torch Dataset over a packed dataset that crosses into worker
    processes by path: pickled without its open Dataset (_ds), reopened on
    first use there.  Subclasses set path, _ds and _len.

    What was resolved at construction (the length, the statistics of
    normalize=True, the input size) travels with the object, so the
    dataset reopened must be the one it was made from: its identity (the
    manifest's checksum) is pickled too and checked on reopening; a
    dataset packed again at that path since is refused with a
    CtxshardError that says so."""

    @property
    def dataset(self):
        if self._ds is None:
            ds = Dataset(self.path, hugepage_budget=self.__dict__.get("_hugepage_budget", 0),
                         cache=self.__dict__.get("_cache"),
                         cache_limit=self.__dict__.get("_cache_limit"))
            want = self.__dict__.get("_identity")
            if want is not None and ds.identity != want:
                got = ds.identity
                ds.close()
                # the checksum that names the dataset differs: CXS_E_CHECKSUM
                raise CtxshardError(
                    _n.E_CHECKSUM,
                    f"{type(self).__name__}: {self.path} is not the dataset this object was "
                    f"made from (identity {got:016x}, expected {want:016x}: packed again "
                    f"since); its length ({self._len}) and statistics would be wrong -- "
                    f"make a new {type(self).__name__} from the dataset as it is now")
            self._ds = ds
        return self._ds

    def _remember(self, ds):
        self._ds = ds
        self._identity = ds.identity
        # a spawned worker reopens with the same copy into huge pages (its own)
        self._hugepage_budget = ds._hugepage_budget
        self._cache, self._cache_limit = ds._cache, ds._cache_limit  # a URL's cache

    def __getstate__(self):
        st = dict(self.__dict__)
        st["_ds"] = None
        return st

    def __len__(self):
        return self._len


class FrameDataset(_ByPath):
    """Frames of a packed dataset as (x, y): x float32 [(2k+1)*D], y int64
    (x alone for a features-only dataset, such as a test split).

    labels: None (the default) when the dataset has them, True (an error
    on a features-only dataset) or False.  normalize: False; train_ds (the
    training split's Dataset), train_ds.stats or a (mean, var) pair --
    normalise dev and test with the training split's statistics; the
    dataset itself for its own; True also means its own, with a warning
    once per dataset (ctxshard.Dataset.gather).

    Works in DataLoader worker processes (forked or spawned): each process
    opens the dataset on first use; the files are shared through the page
    cache."""

    def __init__(self, path, context, normalize=False, labels=None):
        f = "FrameDataset"
        ds = path if isinstance(path, Dataset) else Dataset(_a.path(f, "path", path))
        self.path = ds.path
        self.context = _a.integer(f, "context", context, 0, 1000000)
        warn_if_incomplete(f, ds)
        self.labels = _labels_default(f, ds, labels)
        mode, st = normalization(f, ds, normalize)
        # resolved once: the statistics travel with the object to workers
        self.normalize = False if mode is None else ("own" if mode == "own" else st)
        self._remember(ds)
        self.input_size = ds.input_size(self.context)
        self.num_classes = ds.num_classes
        self._len = len(ds)

    def _fetch(self, indices):
        nrm = self.dataset if self.normalize == "own" else self.normalize
        if not self.labels:  # features only (a test split), or labels=False
            return torch.from_numpy(self.dataset.gather(indices, self.context,
                                                        normalize=nrm)), None
        x, y = self.dataset.gather(indices, self.context, normalize=nrm, labels=True)
        return torch.from_numpy(x), torch.from_numpy(y)

    def __getitem__(self, i):
        """(x, y), or x alone for a features-only dataset."""
        if isinstance(i, (list, tuple, np.ndarray, torch.Tensor)):
            x, y = self._fetch(np.asarray(i))
            return (x, y) if y is not None else x
        x, y = self._fetch(np.array([i]))
        return (x[0], y[0]) if y is not None else x[0]

    def __getitems__(self, indices):
        x, y = self._fetch(np.asarray(indices))
        return _Batch(x, y) if y is not None else list(x)


class _Pair(tuple):
    """(x, y) arrays of one batch buffer; hashable by identity."""

    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other

    def __new__(cls, x, y):
        return super().__new__(cls, (x, y))


def _anonymous(shape, dtype):
    """A zeroed array in its own anonymous mapping, advised to use huge
    pages: a batch buffer is written all over by the workers, and 2 MiB
    pages cut the page faults of its first use and the TLB misses of every
    later one (the C loader's own ring does the same)."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    m = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if size >= 2 << 20 and hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    return np.frombuffer(m, dtype=dtype, count=int(np.prod(shape))).reshape(shape)


def _labels_default(func, ds, labels):
    """labels=None: whether the dataset has them; True on a features-only
    dataset is an error that says so."""
    labels = _a.optional_flag(func, "labels", labels)
    if labels is None:
        return ds.has_frame_labels
    if labels and not ds.has_frame_labels:
        if ds.has_label_seqs:
            raise ValueError(f"{func}: labels=True, but {ds.path} has label sequences only, no "
                             "per-frame labels: whole-utterance batches carry them as targets "
                             "(UtteranceLoader, UtteranceDataset); or pass labels=False")
        raise ValueError(f"{func}: labels=True, but {ds.path} has no labels (features only, "
                         "like a test split): leave labels unset (the default: labels when "
                         "the dataset has them) or pass labels=False")
    return labels


def _frame_labels(func, ds, labels):
    """The frame Loader's labels: True unless labels=False was asked, so that
    a call yields one shape, (x, y), whatever dataset it is given; a
    dataset without frame labels then needs labels=False, said here."""
    labels = _a.optional_flag(func, "labels", labels)
    if labels is None and not ds.has_frame_labels:
        what = ("label sequences only, no per-frame labels" if ds.has_label_seqs
                else "no labels (features only, like a test split)")
        raise ValueError(f"{func}: {ds.path} has {what}, and batches are (x, y) unless "
                         "labels=False is asked: pass labels=False for batches of x alone")
    return _labels_default(func, ds, True if labels is None else labels)


def _targets_default(func, ds, targets):
    """targets=None: whether the dataset has label sequences; True on one
    without them is an error that says so."""
    targets = _a.optional_flag(func, "targets", targets)
    if targets is None:
        return ds.has_label_seqs
    if targets and not ds.has_label_seqs:
        raise ValueError(f"{func}: targets=True, but {ds.path} has no label sequences (pack it "
                         "with --transcripts sequence or both): leave targets unset or pass "
                         "targets=False")
    return targets


def _gpu_device(device, emulate):
    """The library's device number for a CUDA torch.device (its index, or
    the current device), or the host emulation."""
    if emulate:
        return _gpu.EMULATE
    return device.index if device.index is not None else torch.cuda.current_device()


def _device(func, device):
    """None (CPU tensors), or a torch.device / 'cpu' / 'cuda' / 'cuda:N' / N."""
    if device is None:
        return None
    if isinstance(device, (bool, np.bool_)) or not isinstance(device, (str, int, np.integer,
                                                                        torch.device)):
        raise TypeError(f"{func}: device={_a._show(device)} is a {type(device).__name__}, "
                        "expected None, 'cpu', 'cuda', 'cuda:N' or a torch.device")
    try:
        d = torch.device(device)
    except (RuntimeError, ValueError):
        d = None
    if d is None or d.type not in ("cpu", "cuda"):
        raise ValueError(f"{func}: device={_a._show(device)} is not one of None, 'cpu', "
                         "'cuda', 'cuda:N' (or a torch.device of those types)")
    return None if d.type == "cpu" and d.index is None else d


def _tensor(ptr, shape, dtype, owner, device):
    """A tensor over the library's memory, no copy (ctxshard._Buffer):
    device memory for a CUDA device, host memory for device None (the
    emulated GPU).  owner keeps that memory alive as long as the tensor."""
    typestr = {torch.float32: "<f4", torch.bfloat16: "<i2", torch.int64: "<i8"}[dtype]
    if device is None:
        t = torch.from_numpy(np.asarray(_Buffer(owner, ptr, shape, typestr)))
    else:
        t = torch.as_tensor(_Buffer(owner, ptr, shape, typestr, cuda=True), device=device)
    return t.view(torch.bfloat16) if dtype == torch.bfloat16 else t


def _opens_itself(func, path, **given):
    """Options of opening (hugepage_budget, cache, cache_limit) apply when
    the loader opens the dataset itself, from a path or URL: refused with
    a Dataset, which was opened already."""
    if isinstance(path, Dataset):
        for k, v in given.items():
            if v is not None:
                raise ValueError(f"{func}: {k}= applies when the loader opens the dataset (a "
                                 f"path or URL); open it with ctxshard.open(path, {k}=...)")


def _streams(func, path, stream, block, needs, device, gpu_emulate):
    """Whether a loader opening path itself streams it (Dataset(stream=)):
    stream=None streams a URL read in block order on the host; True
    insists (refused in any other order, or with a device)."""
    if isinstance(path, Dataset):
        return False
    if stream is not None:
        stream = _a.flag(func, "stream", stream)
        if stream and not block:
            raise ValueError(f"{func}: stream=True needs {needs} (the block order is what the "
                             f"features are fetched in)")
        if stream and (device is not None or gpu_emulate):
            raise ValueError(f"{func}: stream=True serves host batches; the GPU loaders read a "
                             f"whole dataset (leave stream unset)")
        return stream
    return bool(block and device is None and not gpu_emulate and
                _lib.cxs_is_url(os.fsencode(path)))


_WAIT_MS = 100  # the slices a slow batch is waited for in (see _batches)


def _batches(next_fn, ptr, batch_type, what, timed=None):
    """A C loader's batches (next_fn: cxs_loader_next_ex,
    cxs_utt_loader_next_ex, or a mixture loader's next) until its epoch
    ends, a failure raised with the diagnostic the library kept (file,
    utterance, reason).  timed (cxs_loader_next_timed,
    cxs_utt_loader_next_timed, cxs_mix_loader_next_timed,
    cxs_mix_utt_loader_next_timed): a batch that is
    slow to come (a streamed block behind a slow server) is waited for in
    slices of _WAIT_MS, so that Ctrl-C raises KeyboardInterrupt between
    them (Python runs its signal handlers only between the C calls); a
    ready batch is one call, as with next_fn.  The caller's finally frees
    the loader, which ends a stream's transfers."""
    bp, diag = ctypes.POINTER(batch_type)(), _n.Diag()
    while True:
        if timed is None:
            rc = next_fn(ptr, ctypes.byref(bp), ctypes.byref(diag))
        else:
            rc = timed(ptr, ctypes.byref(bp), _WAIT_MS, ctypes.byref(diag))
            while rc == -errno.ETIMEDOUT:
                rc = timed(ptr, ctypes.byref(bp), _WAIT_MS, ctypes.byref(diag))
        if rc:
            _raise(rc, diag, what=what)
        if not bp:
            return
        yield bp.contents


class Loader:
    """Batches of (x, y) from ctxshard's native prefetching loader; of x
    alone with labels=False (a dataset without frame labels, like a test
    split, needs it: one shape per call, never x alone by surprise).

    Each batch is a fresh pair of tensors that the loader filled in place
    (no copy), yours to keep.  shuffle: True, a new seeded permutation of all
    frames every epoch; False, in order; "block", a permutation drawn from a
    few blocks of whole utterances at a time, read sequentially ahead of use
    within memory= bytes of page cache (bytes or a string like "2G";
    required, the order depends on it) -- for data larger than memory, or
    cold on disk; blocks= (1..1024, default 8) is how many blocks a batch
    draws from.  weighted: class-balanced draws with replacement
    (class_weights to choose them); rank/world_size: each rank gets an
    equal, disjoint share of every epoch (defaults from torch.distributed
    when initialised).  An epoch advances by itself after a complete pass;
    set_epoch(e) chooses one, and keeps the position when the loader is
    already positioned in e (right after load_state_dict() of a state in
    e: a resumed run's set_epoch continues it).  state_dict() is (seed,
    epoch, global position) with what fixes the order; load_state_dict()
    resumes exactly there, also on another number of ranks (world_size) or threads: the
    ranks together continue the same global order, nothing repeated or
    lost.

    device='cuda' (or 'cuda:N'): batches are written into GPU memory by the
    library and yielded as CUDA tensors over its buffers, ready on the
    current torch stream.  Like any tensor, a batch is valid while anything
    refers to it (a list, an autograd graph over several micro-batches):
    its buffer is refilled only after that, and after the work queued on
    the stream it was handed to.  gpu_mode: 'auto' (resident when the features
    fit gpu_budget bytes, default half the device's memory, at most 80% of
    what is free; else stream),
    'stream', 'resident' or 'pool' (see ctxshard.gpu; pool serves the block
    order of the shared block schedule, blocks of one pool segment, and
    resumes mid-epoch like the other modes).  gpu_dtype:
    torch.float32 or torch.bfloat16 (resident and pool).  When the library
    has no usable GPU path (built without CUDA, no driver), the loader falls
    back to pinned host batches copied with non_blocking=True; gpu_mode then
    reads 'host' and gpu_reason says why.  gpu_emulate=True runs the GPU
    path on the host (CPU tensors), for tests.

    hugepage_budget (bytes or a string like "4G"; given a path): the
    dataset is opened with its features and labels copied into huge pages
    when they fit (ctxshard.Dataset, hugepage_budget): faster random
    windows for that much memory; self.dataset.hugepages says whether.

    path may be a URL (http://, https://, s3://BUCKET/PREFIX): the dataset
    is fetched into the node-local cache and read from there; cache= and
    cache_limit= are ctxshard.Dataset's (given a path or URL, not a
    Dataset)."""

    # The block schedule's version, asked of the library (cxs_block_order): a
    # state saved mid-epoch under another version would resume into another
    # order.
    BLOCK_ORDER = int(_lib.cxs_block_order())

    def __new__(cls, path=None, *args, **kw):
        # Loader([a, b, c], ..., weights=...): a mixture (MixtureLoader)
        if cls is Loader and isinstance(path, (list, tuple)):
            if len(args) > 5:  # (the positions after drop_last differ)
                raise TypeError("Loader([...]): a mixture takes context, batch_size, shuffle, "
                                "seed and drop_last by position; give the rest by name")
            return MixtureLoader(path, *args, **kw)
        return super().__new__(cls)

    def __init__(self, path, context, batch_size, shuffle=True, seed=0, drop_last=False,
                 weighted=False, class_weights=None, rank=None, world_size=None, threads=None,
                 pin_memory=False, device=None, normalize=False, labels=None, num_samples=0,
                 gpu_mode="auto", gpu_budget=None, gpu_dtype=None, gpu_emulate=False,
                 prefetch=True, memory=None, blocks=None, hugepage_budget=None, cache=None,
                 cache_limit=None, stream=None):
        f = "Loader"
        # Every argument checked here, where it is given (ctxshard._args):
        # nothing truncated, nothing left to fail at the first batch.
        if not isinstance(path, Dataset):
            path = _a.path(f, "path", path)
        context = _a.integer(f, "context", context, 0, 1000000)
        batch_size = _a.integer(f, "batch_size", batch_size, 1, 2**31 - 1)
        if isinstance(shuffle, str):
            if shuffle != "block":
                raise ValueError(f"{f}: shuffle={shuffle!r} is not one of True (a full shuffle), "
                                 "False (in order) or \"block\" (blocks of utterances within "
                                 "memory=, for data larger than memory)")
        else:
            shuffle = _a.flag(f, "shuffle", shuffle)
        seed = _a.integer(f, "seed", seed, 0, 2**64 - 1)
        drop_last = _a.flag(f, "drop_last", drop_last)
        weighted = _a.flag(f, "weighted", weighted) or class_weights is not None
        threads = _a.optional_integer(f, "threads", threads, 1, 256)
        pin_memory = _a.flag(f, "pin_memory", pin_memory)
        num_samples = _a.integer(f, "num_samples", num_samples, 0, None,
                                 "0 (one epoch's worth) or a positive count")
        if num_samples and not weighted:
            raise ValueError(f"{f}: num_samples={num_samples} applies to weighted sampling "
                             "only (weighted=True): other orders serve every frame once")
        if gpu_mode not in _gpu.MODES:
            raise ValueError(f"{f}: gpu_mode={_a._show(gpu_mode)} is not one of "
                             + ", ".join(repr(m) for m in _gpu.MODES))
        gpu_budget = None if gpu_budget is None else _a.size(f, "gpu_budget", gpu_budget)
        if gpu_dtype not in (None, torch.float32, torch.bfloat16):
            raise ValueError(f"{f}: gpu_dtype={_a._show(gpu_dtype)} is not one of "
                             "torch.float32, torch.bfloat16")
        gpu_emulate = _a.flag(f, "gpu_emulate", gpu_emulate)
        prefetch = _a.flag(f, "prefetch", prefetch)
        device = _device(f, device)
        if rank is not None or world_size is not None:
            dist = torch.distributed
            initialised = dist.is_available() and dist.is_initialized()
            if world_size is None and not initialised:
                raise ValueError(f"{f}: rank={_a._show(rank)} without world_size: give "
                                 "world_size= too (the number of ranks), or initialise "
                                 "torch.distributed, which tells both")
            if world_size is not None:
                world_size = _a.integer(f, "world_size", world_size, 1, 2**32 - 1)
            if rank is not None:
                hi = (world_size if world_size is not None else dist.get_world_size()) - 1
                rank = _a.integer(f, "rank", rank, 0, hi, f"0..world_size-1 = 0..{hi}")
        if shuffle == "block":
            if weighted:
                raise ValueError(f"{f}: shuffle=\"block\" and weighted sampling exclude each "
                                 "other: choose one")
            if memory is None:
                raise ValueError(f"{f}: shuffle=\"block\" needs memory=, the page cache the "
                                 "order may use (bytes, or a string like \"2G\"; "
                                 "ctxshard.memory_available() says what is free here).  The "
                                 "order depends on it: resume with the same value")
            memory = _a.size(f, "memory", memory)
            blocks = _a.optional_integer(f, "blocks", blocks, 1, 1024)
        elif memory is not None or blocks is not None:
            raise ValueError(f"{f}: memory= and blocks= apply to shuffle=\"block\" only")
        kind = WEIGHTED if weighted else (BLOCK if shuffle == "block" else
                                          SHUFFLE if shuffle else SEQUENTIAL)
        _opens_itself(f, path, hugepage_budget=hugepage_budget, cache=cache,
                      cache_limit=cache_limit, stream=stream)
        stream = _streams(f, path, stream, kind == BLOCK, "shuffle=\"block\"", device,
                          gpu_emulate)
        self.dataset = path if isinstance(path, Dataset) else Dataset(
            path, hugepage_budget=hugepage_budget or 0, cache=cache, cache_limit=cache_limit,
            stream=stream)
        warn_if_incomplete(f, self.dataset)
        if weighted and not self.dataset.has_frame_labels:
            raise ValueError(f"{f}: weighted sampling needs per-frame labels (it balances the "
                             f"classes), and {self.dataset.path} has "
                             + ("none (label sequences only)" if self.dataset.has_label_seqs
                                else "no labels (features only, like a test split)"))
        self.labels = _frame_labels(f, self.dataset, labels)
        mode, st = normalization(f, self.dataset, normalize)
        self.normalize = mode is not None
        self._norm_stats = st  # (mean, var) of another dataset (train's), or None
        self.context, self.batch_size = context, batch_size
        self.input_size = self.dataset.input_size(self.context)
        self._prefetch, self._warming = False, None
        self._start_prefetch(prefetch, kind, memory)
        if rank is None or world_size is None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                rank = dist.get_rank() if rank is None else rank
                world_size = dist.get_world_size() if world_size is None else world_size
        self.rank = 0 if rank is None else rank
        self.world_size = 1 if world_size is None else world_size
        self.drop_last, self.seed = drop_last, seed
        self.sampler = Sampler(self.dataset, kind, self.seed, self.rank, self.world_size,
                               self.drop_last, num_samples, class_weights, memory, blocks)
        # The epoch in progress may start at a global position (origin) other
        # than 0: a run resumed from a state_dict.  Later epochs use
        # self.sampler (origin 0).
        self._origin, self._origin_sampler = 0, None
        self.threads = _lib.cxs_default_threads() if threads is None else threads
        self.device = device
        self.epoch, self._start = 0, 0  # _start: this rank's position in _sampler_now()
        self._pool, self._busy = [], set()
        # The GPU path: chosen here, the device loader created on first use
        # and kept across epochs (a resident upload happens once).
        self._gpu_opts, self._gl, self.gpu_info = None, None, None
        self._held, self._held_said = [0], False  # device batches the caller holds
        self._budget_said = False
        self.gpu_mode, self.gpu_reason = None, ""
        cuda = self.device is not None and self.device.type == "cuda"
        if cuda and not torch.cuda.is_available():
            # the documented fallback, also for a torch without CUDA (whose
            # pinned memory and .to("cuda") would fail at the first batch)
            self.gpu_mode = "host"
            self.gpu_reason = ("this PyTorch has no usable CUDA device (torch.cuda.is_available() "
                               "is False)")
            warnings.warn(f"ctxshard: Loader(device={str(self.device)!r}): "
                          f"{self.gpu_reason}; batches stay on the CPU", UserWarning,
                          stacklevel=2)
            self.device, cuda = None, False
            if not gpu_emulate:
                pin_memory = False
        if gpu_emulate or cuda:
            dev = _gpu_device(self.device, gpu_emulate)
            probe = _gpu.probe(dev)
            if probe["usable"]:
                self.gpu_mode = gpu_mode
                self._gpu_opts = dict(device=dev, mode=gpu_mode, budget=gpu_budget,
                                      out_dtype="bfloat16" if gpu_dtype == torch.bfloat16 else "float32")
                if dev != _gpu.EMULATE:
                    self.device = torch.device("cuda", dev)
            else:
                self.gpu_mode, self.gpu_reason = "host", probe["reason"]
        if pin_memory and not torch.cuda.is_available():
            warnings.warn("ctxshard: Loader(pin_memory=True): pinned memory needs CUDA, and "
                          "this PyTorch has no usable CUDA device; batches are not pinned",
                          UserWarning, stacklevel=2)
            pin_memory = False
        self.pin_memory = pin_memory or (cuda and self._gpu_opts is None)
        # Pinned buffers are reused only after the copies that read them
        # (see _buffers): the fence is an event on the current stream.
        self._fence, self._fences, self._copied = None, {}, {}
        if self.pin_memory:
            fdev = self.device if cuda else None
            self._fence = lambda: torch.cuda.current_stream(fdev).record_event()

    def _start_prefetch(self, prefetch, kind, budget):
        """prefetch: warm the dataset into the page cache in a background
        thread when it fits in the memory available (a cold first epoch then
        reads at the disk's sequential rate instead of one random fault per
        window; a dataset already cached costs one mincore pass).  A full
        shuffle over a dataset larger than that memory thrashes: say so once,
        and name the block sampler.  The block sampler reads its blocks
        ahead itself, within its budget: no warm-up there (it would fill the
        page cache the budget is meant to spare)."""
        mem = memory_available()["available"]
        size = self.dataset.nbytes
        if kind == BLOCK:
            if budget > mem:
                warnings.warn(
                    f"ctxshard: shuffle=\"block\" with memory={budget} bytes "
                    f"({budget / 2**30:.2f} GiB), more than the memory available "
                    f"({mem / 2**30:.2f} GiB): blocks will be evicted before they are drained. "
                    "Give a smaller memory=.", UserWarning, stacklevel=3)
            return
        if size > mem:
            if kind == SHUFFLE:
                warnings.warn(
                    f"ctxshard: {self.dataset.path} ({size / 2**30:.2f} GiB) is larger than the "
                    f"memory available ({mem / 2**30:.2f} GiB): a full shuffle reads it at "
                    "random, one disk read per window, every epoch.  Use the block sampler, "
                    "Loader(..., shuffle=\"block\", memory=...), which reads blocks of "
                    "utterances sequentially within that budget.", UserWarning, stacklevel=3)
            return
        # started once the first batch is out (_kick_prefetch): a cached
        # dataset's residency check would otherwise compete with it
        self._prefetch = prefetch

    def _kick_prefetch(self):
        """The warm-up: the library's (Dataset.warm(background=True)), in
        its own thread at the lowest priority, reading only what is not
        cached yet."""
        if self._prefetch:
            self._prefetch = False
            try:
                self._warming = self.dataset.warm(background=True, skip_cached=True)
            except Exception:  # noqa: BLE001 - no thread, a closed dataset: no warm-up
                self._warming = None

    def wait_prefetch(self):
        """Wait until the background warm-up (prefetch=True) is done
        (starting it now if no batch has been taken yet)."""
        self._kick_prefetch()
        if self._warming is not None:
            try:
                self._warming.wait()
            except Exception:  # noqa: BLE001 - a failed warm-up only costs speed
                pass

    def __len__(self):
        """Batches of this rank in the epoch in progress: a full epoch, or
        after load_state_dict() what remains of it (counted from where it
        resumes), as the next iteration yields them."""
        n = len(self._sampler_now())
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch):
        """Serve `epoch` next: kept where the loader stands when it is
        positioned in that epoch (state_dict()'s epoch: right after
        load_state_dict() of a state in it, or a pass stopped mid-way);
        any other epoch from its start.  After a complete pass of e the
        loader stands at the start of e + 1 (set_epoch(e) then serves e
        again).  docs/python.md, "Epochs and resume"."""
        _u._set_epoch("Loader", self, epoch)

    _KINDS = {SEQUENTIAL: "sequential", SHUFFLE: "shuffle", WEIGHTED: "weighted", BLOCK: "block"}

    def _sampler_now(self):
        """The sampler of the epoch in progress: self.sampler, or for an
        epoch resumed at global position G one whose epochs start at G."""
        if not self._origin:
            return self.sampler
        s = self._origin_sampler
        if s is None or s.origin != self._origin:
            m = self.sampler
            s = self._origin_sampler = Sampler(
                self.dataset, m.kind, m.seed, m.rank, m.world_size, m.drop_last, m.num_samples,
                m._weights, m.memory, m.blocks if m.kind == BLOCK else None, self._origin)
        return s

    def _position(self):
        return self._global_position()

    def _global_position(self):
        """(epoch, global position) of the next sample: every rank has
        served origin + position * world_size samples of the global order
        together (ranks step in lockstep, as with DistributedSampler)."""
        g = self._origin + self._start * self.world_size
        if g >= self.sampler.epoch_samples:  # the epoch is done (padding included)
            return self.epoch + 1, 0
        if self.drop_last and len(self._sampler_now()) - self._start < self.batch_size:
            return self.epoch + 1, 0  # what is left is the dropped tail
        return self.epoch, g

    def state_dict(self):
        """Where the run stands: seed, epoch and global_position (samples of
        the epoch's global order served by all ranks together), with what
        fixes that order (sampler, epoch_samples, and for the block sampler
        memory, blocks and block_order, the version of its schedule), and,
        for information, this rank's position,
        rank, world_size, batch_size and context."""
        epoch, g = self._global_position()
        m = self.sampler
        st = {"seed": self.seed, "epoch": epoch, "global_position": g,
              "sampler": self._KINDS[m.kind], "epoch_samples": m.epoch_samples,
              "position": self._start if epoch == self.epoch else 0, "rank": self.rank,
              "world_size": self.world_size, "batch_size": self.batch_size,
              "context": self.context}
        if m.kind == BLOCK:
            st["memory"], st["blocks"] = m.memory, m.blocks
            st["block_order"] = self.BLOCK_ORDER
        if self.gpu_mode == "pool" and self.gpu_info:  # its blocks are its segments
            st["gpu_pool"] = self.gpu_info["reason"]
        return st

    def load_state_dict(self, state):
        """Continue where state_dict() was taken, on this loader's ranks and
        threads: the same seed, sampler and (block) memory and blocks are
        required, since they fix the order; world_size, threads and
        batch_size may differ.  With ranks, every rank loads the same
        state (any rank's, as long as all stood at the same position)."""
        f = "Loader.load_state_dict"
        if not isinstance(state, collections.abc.Mapping):
            raise TypeError(f"{f}: state={_a._show(state)} is a {type(state).__name__}, "
                            "expected the dict that Loader.state_dict() returned")
        mine = self.state_dict()
        # what identifies the order is required: a state stripped of it
        # would load for any dataset and serve another order.  (A state
        # saved before global positions has position, world_size and
        # samples_per_epoch instead.)
        legacy = "global_position" not in state and "samples_per_epoch" in state
        need = ["seed", "epoch"] + (["position", "world_size", "samples_per_epoch"] if legacy
                                    else ["global_position", "sampler", "epoch_samples"])
        if mine["sampler"] == "block":
            need += ["memory", "blocks"]
        missing = [k for k in need if k not in state]
        if missing:
            raise ValueError(f"{f}: state lacks {', '.join(missing)}: expected the dict that "
                             "Loader.state_dict() returned")
        for key in ("seed", "sampler", "epoch_samples", "memory", "blocks"):
            if key in state and state[key] != mine.get(key):
                raise ValueError(f"{f}: {key} {state[key]!r} does not match this "
                                 f"loader's {mine.get(key)!r}: the order would differ")
        epoch = _a.integer(f, "state['epoch']", state["epoch"], 0, _u.MAX_EPOCH)
        total = self.sampler.epoch_samples
        if "global_position" in state:
            g = _a.integer(f, "state['global_position']", state["global_position"], 0, total,
                           f"0..epoch_samples = 0..{total}")
        else:  # saved before global positions: all ranks at `position`
            ws = _a.integer(f, "state['world_size']", state["world_size"], 1, 2**32 - 1)
            m = self.sampler
            ref = len(Sampler(self.dataset, m.kind, m.seed, 0, ws, m.drop_last, m.num_samples,
                              m._weights, m.memory, m.blocks if m.kind == BLOCK else None))
            if state["samples_per_epoch"] != ref:
                raise ValueError(f"{f}: samples_per_epoch {state['samples_per_epoch']!r} does "
                                 f"not match this loader's {ref} on {ws} ranks: the state is "
                                 "of another dataset or order")
            g = _a.integer(f, "state['position']", state["position"], 0, total) * ws
            if g > total:
                raise ValueError(f"{f}: state['position'] * state['world_size'] = {g} is past "
                                 f"the epoch's {total} samples")
        if g >= total and epoch == _u.MAX_EPOCH:
            raise ValueError(f"{f}: state['epoch'] = {epoch} is complete, and the next epoch "
                             f"is past the last one ({_u.MAX_EPOCH})")
        if g >= self.sampler.epoch_samples:
            epoch, g = epoch + 1, 0
        saved = state.get("block_order", 1)  # states without it: the first schedule
        if "block_order" in mine and g and saved != mine["block_order"]:
            raise ValueError(f"load_state_dict: the state was saved mid-epoch with block order "
                             f"{saved}, this ctxshard draws block order {mine['block_order']} "
                             "(its schedule changed): resuming inside that epoch would repeat "
                             "some frames and skip others.  Resume at the next epoch: "
                             f"state['epoch'] = {epoch + 1}, state['global_position'] = 0")
        self.epoch, self._origin, self._start = epoch, g, 0
        # the GPU pool's block order depends on its layout: checked when the
        # device loader is made (_iter_gpu)
        self._want_pool = state.get("gpu_pool")

    def _buffers(self):
        """A (x, y) pair of arrays to fill.  Batches are handed out as tensors
        over these arrays; an array comes back for reuse once no tensor uses
        it any more (its reference count tells: every tensor sharing its
        storage keeps it alive), so steady-state iteration allocates nothing
        and never page-faults, while batches the caller keeps stay intact.

        Pinned pairs (pin_memory, or the copying fallback of device='cuda')
        are read by copies the host does not wait for: x.to(dev,
        non_blocking=True) returns at once and drops the last reference
        while the copy is still queued.  Such a pair goes back to the
        workers only after a fence has completed: an event recorded on the
        stream the loader's copies of it went to, right after them (the
        caller may have made another stream current since), or, for a
        pair the caller copied itself, on the current CUDA stream when the
        pair is found unreferenced."""
        free = [p for p in self._pool if p not in self._busy and sys.getrefcount(p[0]) <= 2
                and (p[1] is None or sys.getrefcount(p[1]) <= 2)]  # (the pair's, the call's)
        pair = None
        if self._fence is None:
            pair = free[0] if free else None
        else:
            for p in free:  # newly unreferenced: fenced after the copies that read it
                if id(p) not in self._fences:
                    # recorded on their stream when they were queued (the
                    # current stream may be another by now); a pair the
                    # caller copied itself, on the current stream now
                    ev = self._copied.pop(id(p), None)
                    self._fences[id(p)] = (p, ev if ev is not None else self._fence())
            for key, (p, ev) in self._fences.items():  # oldest first
                if ev.query():
                    pair = p
                    break
            if pair is None and len(self._fences) >= 4:
                # enough buffers in flight: wait for the oldest copy rather
                # than pin more memory
                pair, ev = next(iter(self._fences.values()))
                ev.synchronize()
            if pair is not None:
                del self._fences[id(pair)]
        if pair is not None:
            self._busy.add(pair)
            return pair
        if self.pin_memory:
            x = torch.empty((self.batch_size, self.input_size), dtype=torch.float32,
                            pin_memory=True).numpy()
            y = torch.empty(self.batch_size, dtype=torch.int64, pin_memory=True).numpy()
        else:
            x = _anonymous((self.batch_size, self.input_size), np.float32)
            y = np.empty(self.batch_size, dtype=np.int64)
        pair = _Pair(x, y if self.labels else None)
        self._pool.append(pair)
        self._busy.add(pair)
        return pair

    def _make_view(self, ptr, shape, dtype, lease):
        # a fresh tensor for every batch: it holds the batch (its lease),
        # and the lease the C loader's memory (its owner)
        return _tensor(ptr, shape, dtype, lease,
                       None if self._gpu_opts["device"] == _gpu.EMULATE else self.device)

    def _held_note(self, held):
        """Say once that batches the caller holds take device memory."""
        if held > 2 and not self._held_said:
            self._held_said = True
            info = self._gl.info()
            warnings.warn(f"ctxshard: Loader: {held} device batches are held at once (kept "
                          "in a list, gradient accumulation, a graph not yet backward()ed): "
                          "the loader makes another batch buffer for each one held rather "
                          "than rewrite it, within its device budget (gpu_budget; "
                          f"{info['device_bytes']} bytes held now; {info['reason']})",
                          UserWarning, stacklevel=3)

    def _iter_gpu(self):
        o = self._gpu_opts
        sampler = self._sampler_now()
        if self._gl is not None and self._gl.sampler is not sampler:
            # a resumed epoch (or the first one after it) runs over another
            # sampler: the device loader is made again (resident mode
            # uploads again, once per resume)
            self._gl.close()
            self._gl = None
        if self._gl is None:
            self._gl = _gpu.GpuLoader(self.dataset, sampler, self.context, self.batch_size,
                                      device=o["device"], mode=o["mode"], budget=o["budget"],
                                      normalize=(self._norm_stats if self._norm_stats
                                                 is not None else self.dataset if
                                                 self.normalize else False),
                                      labels=self.labels,
                                      drop_last=self.drop_last, threads=self.threads,
                                      out_dtype=o["out_dtype"], epoch=self.epoch,
                                      start=self._start, hold=True)
            self.gpu_info = self._gl.info()
            self.gpu_mode = self.gpu_info["mode"]
            if o["budget"] is None and o["device"] != _gpu.EMULATE and not self._budget_said:
                # the default budget was taken: say once which, and the mode
                self._budget_said = True
                warnings.warn(f"ctxshard: Loader(device={str(self.device)!r}): "
                              f"{self.gpu_info['mode']} mode; {self.gpu_info['reason']} "
                              "(gpu_budget= sets it)", UserWarning, stacklevel=3)
        else:
            self._gl.reset(self.epoch, self._start)
        want = getattr(self, "_want_pool", None)
        if want and self.gpu_mode == "pool" and self.gpu_info["reason"] != want:
            raise ValueError(f"load_state_dict: the saved run's GPU pool was laid out as "
                             f"'{want}', this one as '{self.gpu_info['reason']}': its block "
                             "order would differ.  Resume with the same gpu_budget (give it; "
                             "the default follows free device memory), batch_size and pool "
                             "segments")
        xdtype = torch.bfloat16 if o["out_dtype"] == "bfloat16" else torch.float32
        emulated = o["device"] == _gpu.EMULATE
        first = True
        held = self._held
        while True:
            stream = None if emulated else torch.cuda.current_stream(self.device).cuda_stream
            if not first:
                self._kick_prefetch()  # once the first batch is out (see _start_prefetch)
            first = False
            b = self._gl.next(stream)
            if b is None:
                break
            if emulated:  # the host reads the batch: after the device's work on it
                _gpu.emulated_sync(None)
            self._start = b.position + b.n
            # the batch is the caller's while any tensor over it exists
            lease = _gpu.Lease(self._gl.owner, _lib.cxs_gpu_loader_release, b.x, stream, held)
            self._held_note(held[0])
            x = self._make_view(b.x, (b.n, self.input_size), xdtype, lease)
            y = None if b.y is None else self._make_view(b.y, (b.n,), torch.int64, lease)
            del lease, b
            if y is None:
                yield x
            else:
                yield x, y
            del x, y  # the generator keeps no batch the caller dropped
        self.epoch, self._start, self._origin = self.epoch + 1, 0, 0

    def close(self):
        """No more device batches from this Loader: the GPU loader's memory
        is freed now, or, while tensors of batches handed out remain, when
        the last of them goes (they stay valid: close() never frees memory
        a tensor points into).  Also done when the Loader is collected."""
        self._prefetch = False
        if self._warming is not None:
            self._warming.stop()
            self._warming = None
        if self._gl is not None:
            self._gl.close()
            self._gl = None

    def __iter__(self):
        if self._gpu_opts is not None:
            return self._iter_gpu()
        return self._iter_host()

    def _iter_host(self):
        ds = self.dataset
        opts = _n.LoaderOpts(self.context, self.batch_size, self.threads, 0,
                             _n.GATHER_NORMALIZE if self.normalize else 0, int(self.drop_last),
                             int(self.labels), 1)
        if self._norm_stats is not None:  # train's statistics (copied at create)
            mean, var = self._norm_stats
            dp = ctypes.POINTER(ctypes.c_double)
            nrm = _n.Norm(ds.dim, mean.ctypes.data_as(dp), var.ctypes.data_as(dp))
            opts.norm = ctypes.pointer(nrm)
        ptr = ctypes.c_void_p()
        sampler = self._sampler_now()
        diag = _n.Diag()
        rc = _lib.cxs_loader_create_ex(ds._ptr, sampler._ptr, ctypes.byref(opts), self.epoch,
                                       self._start, ctypes.byref(ptr), ctypes.byref(diag))
        if rc:
            _raise(rc, diag, what="loader")
        pending = {}  # data address -> pair: provided, not yet handed back
        ring = _lib.cxs_loader_ring(ptr)  # the buffers that keep every worker busy

        def provide():
            pair = self._buffers()
            rc = _lib.cxs_loader_provide(ptr, pair[0].ctypes.data,
                                         pair[1].ctypes.data if pair[1] is not None else None)
            if rc:
                _raise(rc, what="loader")
            pending[pair[0].ctypes.data] = pair

        try:
            for _ in range(ring):
                provide()
            for b in _batches(_lib.cxs_loader_next_ex, ptr, _n.Batch, "loader",
                              _lib.cxs_loader_next_timed):
                pair = pending.pop(b.x)
                n = b.n
                x = torch.from_numpy(pair[0])
                y = torch.from_numpy(pair[1]) if pair[1] is not None else None
                self._busy.discard(pair)  # reusable once x and y are gone
                provide()
                _u._follow(self, _lib.cxs_loader_position, ptr, "loader")
                if n < self.batch_size:
                    x = x[:n]
                    y = y[:n] if y is not None else None
                if self.device is not None:
                    x = x.to(self.device, non_blocking=True)
                    y = y.to(self.device, non_blocking=True) if y is not None else None
                    if self._fence is not None:  # the copies' stream: the pair's fence
                        self._copied[id(pair)] = self._fence()
                yield (x, y) if y is not None else x
                # once the first batch is out: starting a thread waits for
                # it to run, and its residency check competes with the
                # workers (see _start_prefetch)
                self._kick_prefetch()
            _u._follow(self, _lib.cxs_loader_position, ptr, "loader")  # (an empty epoch)
        finally:
            _lib.cxs_loader_free(ptr)  # joins the workers before the buffers go
            for pair in pending.values():
                self._busy.discard(pair)
            pending.clear()


# ---- mixtures of datasets ---------------------------------------------------

from .mixture import Mixture, UtteranceMixture, _sources  # noqa: E402

__all__ += ["MixtureLoader", "MixedBatch"]


class MixedBatch(tuple):
    """A mixture's batch: (x, y) as the frame Loader yields them, or (x,)
    with labels=False, with .source (int64 [n]: which dataset, by its place
    in the list, each sample came from), .frames (int64 [n]: its frame
    number in that dataset) and .repeat (True for the final round's
    padding: a batch that repeats one of the first round, so that every
    rank has as many; leave it out of an evaluation)."""

    def __new__(cls, parts, source, frames, repeat=False):
        t = super().__new__(cls, parts)
        t.source, t.frames, t.repeat = source, frames, repeat
        return t


def _known(f, init, given):
    """A misspelt keyword is a TypeError, as for any function: a mixture
    refuses the single loader's options it cannot serve, and only those."""
    import inspect
    names = inspect.signature(init).parameters
    for k in given:
        if k not in names:
            raise TypeError(f"{f}() got an unexpected keyword argument {k!r}")


def _same_width(f, datasets):
    d0 = datasets[0]
    for d in datasets:
        if d.dim != d0.dim:
            raise ValueError(f"{f}: {d.path} has {d.dim} features a frame and {d0.path} "
                             f"{d0.dim}: the datasets of a mixture must have the same width "
                             "(their stored dtypes may differ)")


def _mix_norm(opts, stats, dim):
    """opts.norm: the given (mean, var), when there is one set for all."""
    if stats is not None:
        mean, var = stats
        dp = ctypes.POINTER(ctypes.c_double)
        opts.norm = ctypes.pointer(_n.Norm(dim, mean.ctypes.data_as(dp), var.ctypes.data_as(dp)))


def _mix_normalization(f, datasets, normalize):
    """A mixture's normalisation: ("none" | "per-source" | "given", the
    given (mean, var) float64 arrays or None)."""
    if normalize is True or normalize is False or normalize is None:
        if normalize:
            for d in datasets:
                if d.stats is None:
                    raise ValueError(f"{f}: normalize=True normalises each dataset by its own "
                                     f"statistics, and {d.path} has none: give one set "
                                     "(normalize=train_ds)")
        return ("per-source" if normalize else "none"), None
    d0 = datasets[0]
    _mode, st = normalization(f, d0, normalize)
    return "given", st if st is not None else (
        np.ascontiguousarray(d0.stats.mean, np.float64),
        np.ascontiguousarray(d0.stats.var, np.float64))


class _MixLoader:
    """What the two mixture loaders share."""

    @property
    def quotas(self):
        """Samples (utterances) of each dataset per epoch."""
        return self.sampler.quotas

    @property
    def shares(self):
        return self.sampler.shares


class MixtureLoader(_MixLoader):
    """Batches of windows from several datasets in fixed shares (what
    Loader([a, b, ...], context, batch_size, ...) returns).  The shares,
    quotas, passes and ranks are ctxshard.Mixture's: weights (one per
    dataset, or None: the natural shares), temperature, epoch_size (samples
    per epoch, default the sum of the frames).  Each batch is a MixedBatch:
    (x, y) tensors, x float32 [n, (2k+1)*D], y int64 [n] labels in the
    first dataset's vocabulary (another dataset's labels are mapped by
    symbol; vocabularies that differ are refused, naming the symbols), with
    .source (int64 [n]) saying which dataset each sample came from.

    The datasets must have the same feature width; their stored dtypes may
    differ.  normalize=True normalises each dataset with its own stored
    statistics; a Dataset, its .stats or (mean, var) normalises every one
    with that one set (state_dict says which).  Batches are fresh tensors,
    yours to keep.  rank/world_size as for Loader (from torch.distributed
    when initialised): rank r takes global batches r, r + world_size, ...
    state_dict() is (seed, epoch, global_position) with global_position in
    global batches; load_state_dict() resumes there, also on another number
    of ranks, nothing repeated or lost, and set_epoch(e) right after it
    keeps that position (Loader's rule).  shuffle="block" with memory= (and
    blocks=): data larger than memory, each dataset's passes in block order
    within its share of the one budget, its blocks asked for ahead and let
    go once passed.  On the CPU only: device= copies each batch to the
    device (no GPU path yet); streaming and weighted sampling are not
    available for mixtures."""

    def __init__(self, paths, context, batch_size, shuffle=True, seed=0, drop_last=False,
                 weights=None, temperature=None, epoch_size=None, rank=None, world_size=None,
                 threads=None, normalize=False, labels=None, device=None, pin_memory=False,
                 memory=None, blocks=None, **unsupported):
        f = "Loader"
        _known(f, Loader.__init__, unsupported)
        for k, v in unsupported.items():
            if v is not None and v is not False and v != "auto" and v != 0:
                raise ValueError(f"{f}: {k}= is not available for a mixture of datasets (a "
                                 "list of paths): the mixture loader serves host batches, "
                                 "shuffled, in order or in block order")
        if isinstance(shuffle, str) and shuffle != "block":
            raise ValueError(f"{f}: shuffle={shuffle!r}: a mixture is shuffled (True), in "
                             "order (False) or in block order ('block', with memory=)")
        self.datasets = _sources(f, paths)
        self.context = _a.integer(f, "context", context, 0, 1000000)
        self.batch_size = _a.integer(f, "batch_size", batch_size, 1, 2**31 - 1)
        self.threads = _a.optional_integer(f, "threads", threads, 1, 256)
        self.device = _device(f, device)
        self.pin_memory = _a.flag(f, "pin_memory", pin_memory) and torch.cuda.is_available()
        d0 = self.datasets[0]
        _same_width(f, self.datasets)
        labels = _a.optional_flag(f, "labels", labels)
        have = all(d.has_frame_labels for d in self.datasets)
        if labels is None:
            labels = have
        elif labels and not have:
            bad = [d.path for d in self.datasets if not d.has_frame_labels]
            raise ValueError(f"{f}: labels=True, but {', '.join(bad)} has no per-frame labels: "
                             "pass labels=False")
        self.labels = labels
        self.normalization, self._norm_stats = _mix_normalization(f, self.datasets, normalize)
        if rank is None or world_size is None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                rank = dist.get_rank() if rank is None else rank
                world_size = dist.get_world_size() if world_size is None else world_size
        self.world_size = _a.integer(f, "world_size", 1 if world_size is None else world_size,
                                     1, 2**32 - 1)
        self.rank = _a.integer(f, "rank", 0 if rank is None else rank, 0, self.world_size - 1)
        self.input_size = d0.input_size(self.context)
        self._mix_args = dict(batch_size=self.batch_size, weights=weights,
                              temperature=temperature, epoch_size=epoch_size,
                              shuffle="block" if shuffle == "block"
                              else _a.flag(f, "shuffle", shuffle),
                              seed=_a.integer(f, "seed", seed, 0, 2**64 - 1), rank=self.rank,
                              world_size=self.world_size,
                              drop_last=_a.flag(f, "drop_last", drop_last), memory=memory,
                              blocks=blocks)
        self.sampler = Mixture(self.datasets, **self._mix_args)
        self._origin_mix = None
        self.seed, self.drop_last = self._mix_args["seed"], self._mix_args["drop_last"]
        self.epoch, self._start, self._origin = 0, 0, 0
        self.source_index = {d.path: i for i, d in enumerate(self.datasets)}
        self._loader_check()

    def _loader_check(self):
        """Create (and free) one native loader now, so that what only the
        library checks (vocabularies by symbol, statistics) fails here."""
        ptr = self._create(self.sampler, 0, 0)
        _lib.cxs_mix_loader_free(ptr)


    def _mix_now(self):
        if not self._origin:
            return self.sampler
        m = self._origin_mix
        if m is None or m.origin != self._origin:
            m = self._origin_mix = Mixture(self.datasets, origin=self._origin, **self._mix_args)
        return m

    def __len__(self):
        return len(self._mix_now()) - self._start

    def set_epoch(self, epoch):
        """Serve `epoch` next, kept where the loader stands when it is
        positioned in it (Loader.set_epoch's rule)."""
        _u._set_epoch("Loader", self, epoch)

    def _position(self):
        """(epoch, global position) of the next batch, as state_dict()."""
        g = self._origin + self._start * self.world_size
        if self._epoch_done(g):
            return self.epoch + 1, 0
        return self.epoch, g

    def state_dict(self):
        """seed, epoch and global_position (global batches served by all
        ranks together), with what fixes the order: the datasets (paths and
        identities), shares, quotas, epoch_size, batch_size, shuffle and the
        normalisation (none, per-source or given)."""
        epoch, g = self._position()
        m = self.sampler
        return {"kind": "mixture", "seed": self.seed, "epoch": epoch, "global_position": g,
                "unit": "batches", "batch_size": self.batch_size,
                "sources": [d.path for d in self.datasets],
                "identities": [d.identity for d in self.datasets],
                "shares": list(m.shares), "quotas": list(m.quotas),
                "epoch_size": m.epoch_size, "shuffle": m.shuffle, "drop_last": m.drop_last,
                "memory": m.memory, "blocks": m.blocks, "normalization": self.normalization}

    def _order_batches(self):
        """The global batches of an epoch's order whatever the ranks (the
        short last one cut with drop_last; a last round of fewer batches
        than ranks is cut then too, which depends on the ranks)."""
        E, B = self.sampler.epoch_size, self.batch_size
        return E // B + (0 if self.drop_last else int(E % B != 0))

    def _epoch_done(self, g):
        N = self._order_batches()
        return g >= N or (self.drop_last and N - g < self.world_size)

    def load_state_dict(self, state):
        f = "Loader.load_state_dict"
        if not isinstance(state, dict) or state.get("kind") != "mixture":
            raise ValueError(f"{f}: the state is not a mixture's (kind="
                             f"{state.get('kind') if isinstance(state, dict) else state!r})")
        mine = self.state_dict()
        for key in ("seed", "batch_size", "identities", "quotas", "epoch_size", "shuffle",
                    "drop_last", "memory", "blocks"):
            if state.get(key) != mine[key]:
                raise ValueError(f"{f}: the state's {key} ({_a._show(state.get(key))}) is not "
                                 f"this loader's ({_a._show(mine[key])}): it would resume into "
                                 "another order")
        if state.get("normalization") != self.normalization:
            raise ValueError(f"{f}: the state was normalised {state.get('normalization')!r}, "
                             f"this loader {self.normalization!r}")
        g = _a.integer(f, "global_position", state.get("global_position"), 0,
                       self._order_batches())
        epoch = _a.integer(f, "epoch", state.get("epoch"), 0, _u.MAX_EPOCH)
        if self._epoch_done(g):  # (on these ranks, what is left of it is cut)
            epoch, g = epoch + 1, 0
        self.epoch, self._origin, self._start = epoch, g, 0

    def _create(self, mix, epoch, start):
        opts = _n.LoaderOpts(self.context, self.batch_size, self.threads or 0, 0,
                             _n.GATHER_NORMALIZE if self.normalization != "none" else 0, 0,
                             int(self.labels), 0)
        _mix_norm(opts, self._norm_stats, self.datasets[0].dim)
        ptr, diag = ctypes.c_void_p(), _n.Diag()
        rc = _lib.cxs_mix_loader_create(mix._ptr, ctypes.byref(opts), epoch, start,
                                        ctypes.byref(ptr), ctypes.byref(diag))
        if rc:
            _raise(rc, diag, what="mixture loader")
        return ptr

    def __iter__(self):
        mix = self._mix_now()
        ptr = self._create(mix, self.epoch, self._start)
        W = self.input_size
        try:
            for b in _batches(_lib.cxs_mix_loader_next, ptr, _n.MixFrames, "mixture loader",
                              _lib.cxs_mix_loader_next_timed):
                n = b.n
                x = torch.empty((n, W), dtype=torch.float32, pin_memory=self.pin_memory)
                ctypes.memmove(x.data_ptr(), b.x, n * W * 4)
                src = torch.from_numpy(np.ctypeslib.as_array(
                    ctypes.cast(b.source, ctypes.POINTER(ctypes.c_uint32)), (n,)).astype(np.int64))
                frames = torch.from_numpy(np.ctypeslib.as_array(
                    ctypes.cast(b.frames, ctypes.POINTER(ctypes.c_uint64)), (n,)).astype(np.int64))
                y = None
                if self.labels:
                    y = torch.empty(n, dtype=torch.int64, pin_memory=self.pin_memory)
                    ctypes.memmove(y.data_ptr(), b.y, n * 8)
                _u._follow(self, _lib.cxs_mix_loader_position, ptr, "mixture loader")
                if self.device is not None:
                    x = x.to(self.device, non_blocking=True)
                    y = y.to(self.device, non_blocking=True) if y is not None else None
                    src = src.to(self.device, non_blocking=True)
                yield MixedBatch((x, y) if y is not None else (x,), src, frames, bool(b.repeat))
            _u._follow(self, _lib.cxs_mix_loader_position, ptr, "mixture loader")
        finally:
            _lib.cxs_mix_loader_free(ptr)


# ---- whole-utterance batches (sequence models) -----------------------------

from . import utterances as _u  # noqa: E402
from .utterances import PAD_LABEL  # noqa: E402,F401

__all__ += ["UtteranceLoader", "UtteranceDataset", "UtteranceBatchSampler", "pad_collate",
            "PAD_LABEL"]


class UtteranceBatchSampler(_u.UtteranceSampler):
    """ctxshard.utterances.UtteranceSampler as a DataLoader batch_sampler:
    lists of utterance numbers, bucketed by length under frame_budget
    padded frames, the same count on every rank.  With UtteranceDataset and
    collate_fn=pad_collate:

        sampler = UtteranceBatchSampler(ds, frame_budget=20000, seed=0)
        loader = DataLoader(UtteranceDataset(ds), batch_sampler=sampler,
                            collate_fn=pad_collate, num_workers=2)
    """

    _FUNC = "UtteranceBatchSampler"


class Utterance(tuple):
    """One utterance of an UtteranceDataset: (x [T, D]), then y [T] when
    the dataset has per-frame labels, then target [L] (its label
    sequence) when targets are on.  A tuple; `fields` names its parts, so
    that pad_collate pads each as it should."""

    def __new__(cls, parts, fields):
        t = super().__new__(cls, parts)
        t.fields = fields
        return t

    def __getnewargs__(self):  # pickle and copy (DataLoader workers send items)
        return tuple(self), self.fields


class _PaddedBatch(collections.abc.Sequence):
    """A padded batch assembled at once, presented as a sequence of
    Utterance items; pad_collate returns its tensors as they are."""

    def __init__(self, x, lengths, y, targets=None, target_lengths=None):
        self.x, self.lengths, self.y = x, lengths, y
        self.targets, self.target_lengths = targets, target_lengths

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        t = int(self.lengths[i])
        parts, fields = [self.x[i, :t]], ["x"]
        if self.y is not None:
            parts.append(self.y[i, :t])
            fields.append("y")
        if self.targets is not None:
            parts.append(self.targets[i, :int(self.target_lengths[i])])
            fields.append("target")
        return Utterance(parts, tuple(fields)) if len(parts) > 1 else parts[0]

    def tensors(self):
        out = [self.x, self.lengths]
        if self.y is not None:
            out.append(self.y)
        if self.targets is not None:
            out += [self.targets, self.target_lengths]
        return tuple(out)


def pad_collate(batch):
    """collate_fn for DataLoader over an UtteranceDataset: (x [B, Tmax, D],
    lengths [B]), then y [B, Tmax] when the dataset has per-frame labels
    (padded by PAD_LABEL = -100, CrossEntropyLoss's ignore_index), then
    targets [B, Lmax] and target_lengths [B] when it has label sequences
    (padded by PAD_LABEL too; CTCLoss reads only target_lengths[i] of
    each row).  A batch from UtteranceDataset.__getitems__ comes out
    without a copy; a list of utterances (Utterance items, (x, y) or (x, y, target) tuples
    or x alone) is padded with torch.nn.utils.rnn.pad_sequence."""
    if isinstance(batch, _PaddedBatch):
        return batch.tensors()
    from torch.nn.utils.rnn import pad_sequence
    if batch and isinstance(batch[0], Utterance):
        fields = batch[0].fields
    elif batch and isinstance(batch[0], (tuple, list)):
        if len(batch[0]) not in (2, 3):
            raise TypeError(f"pad_collate: an utterance of {len(batch[0])} parts; expected x, "
                            "(x, y), (x, y, target) or an Utterance (UtteranceDataset's items)")
        fields = ("x", "y", "target")[:len(batch[0])]
    else:
        fields = ("x",)
        batch = [(x,) for x in batch]
    parts = dict(zip(fields, zip(*batch))) if batch else {f: () for f in fields}
    xs = list(parts["x"])
    out = [pad_sequence(xs, batch_first=True),
           torch.tensor([len(x) for x in xs], dtype=torch.int64)]
    if "y" in parts:
        out.append(pad_sequence(list(parts["y"]), batch_first=True, padding_value=PAD_LABEL))
    if "target" in parts:
        ts = list(parts["target"])
        out += [pad_sequence(ts, batch_first=True, padding_value=PAD_LABEL),
                torch.tensor([len(t) for t in ts], dtype=torch.int64)]
    return tuple(out)


class UtteranceDataset(_ByPath):
    """The utterances of a packed dataset as (x float32 [T, D], y int64
    [T]) -- x alone for a features-only dataset, (x, target int64 [L]) for
    one of label sequences, (x, y, target) for one with both (targets=False
    leaves the sequences out) -- for a DataLoader with
    UtteranceBatchSampler and pad_collate.  __getitems__ assembles a whole
    padded batch in the library (one call, any stored dtype, compressed
    datasets too).  normalize: as FrameDataset (normalize=train_ds for the
    training split's statistics); per_utterance=True: each utterance's own
    mean and variance per dimension.  Works in forked or spawned workers
    (the dataset is reopened by path)."""

    def __init__(self, path, normalize=False, per_utterance=False, labels=None, targets=None):
        f = "UtteranceDataset"
        ds = path if isinstance(path, Dataset) else Dataset(_a.path(f, "path", path))
        self.path = ds.path
        warn_if_incomplete(f, ds)
        self.labels = _labels_default(f, ds, labels)
        self.targets = _targets_default(f, ds, targets)
        self.per_utterance = _a.flag(f, "per_utterance", per_utterance)
        mode, st = normalization(f, ds, normalize)
        self.normalize = False if mode is None else ("own" if mode == "own" else st)
        self._remember(ds)
        self.input_size = ds.dim
        self.num_classes = ds.num_classes
        self._len = ds.num_utterances

    def _fetch(self, indices):
        nrm = self.dataset if self.normalize == "own" else self.normalize
        x, lengths, y = _u.pad_batch(self.dataset, indices, normalize=nrm,
                                     per_utterance=self.per_utterance, labels=self.labels)
        t = tl = None
        if self.targets:
            t, tl = (torch.from_numpy(a) for a in _u.pad_targets(self.dataset, indices))
        return _PaddedBatch(torch.from_numpy(x), torch.from_numpy(lengths),
                            torch.from_numpy(y) if y is not None else None, t, tl)

    def __getitem__(self, u):
        """x [T, D] float32 for a features-only dataset, else an Utterance:
        (x, y [T]) with per-frame labels, (x, target [L]) with label
        sequences, (x, y, target) with both."""
        u = _a.index("UtteranceDataset", "u", u, self._len, "utterances")
        return self._fetch(np.array([u], dtype=np.uint64))[0]

    def __getitems__(self, indices):
        return self._fetch(np.asarray(indices, dtype=np.uint64))


class _LoaderSampler(_u.UtteranceSampler):
    _FUNC = "UtteranceLoader"


class UtteranceLoader:
    """Padded batches of whole utterances from the library's prefetching
    utterance loader: (x float32 [B, Tmax, D] zero-padded, lengths int64
    [B]), then y int64 [B, Tmax] padded with PAD_LABEL = -100 when the
    dataset has per-frame labels (labels=False: not), then targets int64
    [B, Lmax] padded with PAD_LABEL and target_lengths int64 [B] when it
    has label sequences (targets=False: not) -- the inputs of torch's
    CTCLoss.  Yours to keep: fresh tensors, or with device="cuda" on the
    GPU path (gpu_mode "device") views of the loader's device buffers, each
    refilled only once no tensor refers to its batch.

    The batches are UtteranceSampler's (frame_budget, shuffle, seed,
    buckets, max_batch, long_utterances, drop_last, memory, blocks; rank
    and world_size from torch.distributed when initialised): every rank
    gets the same number of batches, so DDP never waits for a rank that
    has run out.  threads: workers (default min(CPUs, 4)); the batches do
    not depend on it.  normalize / per_utterance: as UtteranceDataset.
    set_epoch(e), state_dict() / load_state_dict() (exact mid-epoch resume,
    also on another number of ranks or threads; set_epoch(e) right after
    loading a state in e keeps its position, as Loader's).  After each batch,
    batch_info says which it was: utterances (their numbers: ds.ids[u] is
    the id), global (its place in the epoch's global batch order), index
    (this rank's position) and frames (real frames, without padding).

    device='cuda' (or 'cuda:N'): the dataset's features (and per-frame
    labels) are uploaded to the GPU once, and each batch is assembled
    there by the library: x, y and targets are CUDA tensors over its
    buffers, ready on the current torch stream and valid while you hold
    them, as Loader's device batches are; lengths and target_lengths stay
    on the CPU.  The batches are the CPU path's, byte for byte.  gpu_budget:
    the device bytes the resident data and the batch buffers may take
    (default half the device's memory, at most 80% of what is free; a
    dataset that does not fit is refused,
    naming both sizes); gpu_dtype: torch.float32 or torch.bfloat16 (x only).
    Without a usable GPU path (built without CUDA, no driver, torch without
    CUDA), or with per_utterance=True (computed on the CPU), batches are
    assembled on the CPU and copied (a warning says why; gpu_mode reads
    'host' and gpu_reason the reason; 'device' on the device path).
    gpu_emulate=True runs the device path on the host (CPU tensors), for
    tests.  path may be a URL, with cache= and cache_limit= as Loader's."""

    def __new__(cls, path=None, *args, **kw):
        # UtteranceLoader([a, b, c], ..., weights=...): a mixture
        if cls is UtteranceLoader and isinstance(path, (list, tuple)):
            if len(args) > 13:  # (the positions after labels differ)
                raise TypeError("UtteranceLoader([...]): a mixture takes the options up to "
                                "labels by position; give the rest by name")
            return MixtureUtteranceLoader(path, *args, **kw)
        return super().__new__(cls)

    def __init__(self, path, frame_budget, shuffle=True, seed=0, rank=None, world_size=None,
                 threads=None, drop_last=False, buckets=None, max_batch=None,
                 long_utterances="refuse", normalize=False, per_utterance=False, labels=None,
                 memory=None, blocks=None, device=None, targets=None, gpu_budget=None,
                 gpu_dtype=None, gpu_emulate=False, cache=None, cache_limit=None, stream=None):
        f = "UtteranceLoader"
        if not isinstance(path, Dataset):
            path = _a.path(f, "path", path)
        self.threads = _a.optional_integer(f, "threads", threads, 1, 256)
        self.per_utterance = _a.flag(f, "per_utterance", per_utterance)
        self.device = _device(f, device)
        gpu_budget = None if gpu_budget is None else _a.size(f, "gpu_budget", gpu_budget)
        if gpu_dtype not in (None, torch.float32, torch.bfloat16):
            raise ValueError(f"{f}: gpu_dtype={_a._show(gpu_dtype)} is not one of "
                             "torch.float32, torch.bfloat16")
        gpu_emulate = _a.flag(f, "gpu_emulate", gpu_emulate)
        _opens_itself(f, path, cache=cache, cache_limit=cache_limit, stream=stream)
        stream = _streams(f, path, stream, memory is not None,
                          "shuffle=True and memory= (block mode)", self.device, gpu_emulate)
        self.dataset = path if isinstance(path, Dataset) else Dataset(
            path, cache=cache, cache_limit=cache_limit, stream=stream)
        warn_if_incomplete(f, self.dataset)
        self.sampler = _LoaderSampler(self.dataset, frame_budget, shuffle, seed, rank,
                                      world_size, drop_last, buckets, max_batch,
                                      long_utterances, memory, blocks)
        self.labels = _labels_default(f, self.dataset, labels)
        self.targets = _targets_default(f, self.dataset, targets)
        self._flags, self._norm, self._keep = _u._norm_args(f, self.dataset, normalize,
                                                            per_utterance)
        self.input_size = self.dataset.dim
        self.num_classes = self.dataset.num_classes
        if self.threads is None:
            self.threads = _lib.cxs_default_threads()
        self.batch_info = None
        self._setup_gpu(gpu_budget, gpu_dtype, gpu_emulate)

    def _setup_gpu(self, budget, dtype, emulate):
        """Choose the device path (batches assembled on the GPU) or the copy
        path; the device loader is made at the first iteration and kept
        (its upload happens once)."""
        self._gpu, self._gl, self._gl_order = None, None, None
        self.gpu_mode, self.gpu_reason = None, ""
        cuda = self.device is not None and self.device.type == "cuda"
        if not (cuda or emulate):
            return
        why = None
        if self.per_utterance:
            why = "per_utterance normalisation is computed on the CPU"
        elif cuda and not torch.cuda.is_available():
            why = "this PyTorch has no usable CUDA device (torch.cuda.is_available() is False)"
        else:
            dev = _gpu_device(self.device, emulate)
            probe = _gpu.probe(dev)
            if probe["usable"]:
                self._gpu = dict(device=dev, budget=budget or 0,
                                 out_dtype=torch.bfloat16 if dtype == torch.bfloat16
                                 else torch.float32)
                self.gpu_mode = "device"
                if dev != _gpu.EMULATE:
                    self.device = torch.device("cuda", dev)
                return
            why = probe["reason"]
        self.gpu_mode, self.gpu_reason = "host", why
        if cuda:
            warnings.warn(f"ctxshard: UtteranceLoader(device={str(self.device)!r}): {why}; "
                          + ("batches are assembled on the CPU and copied"
                             if torch.cuda.is_available() else "batches stay on the CPU"),
                          UserWarning, stacklevel=3)
            if not torch.cuda.is_available():
                self.device = None

    # the sampler's state is the loader's
    def __len__(self):
        """Batches of this rank in the epoch in progress (after
        load_state_dict(), what remains of it)."""
        return len(self.sampler)

    @property
    def epoch(self):
        return self.sampler.epoch

    def set_epoch(self, epoch):
        """Serve `epoch` next, kept where the loader stands when it is
        positioned in it (Loader.set_epoch's rule; the sampler's state is
        the loader's)."""
        self.sampler.set_epoch(epoch)

    def state_dict(self):
        """seed, epoch, global_position and what fixes the order (see
        UtteranceSampler.state_dict)."""
        return self.sampler.state_dict()

    def load_state_dict(self, state):
        self.sampler.load_state_dict(state)

    def __iter__(self):
        if self._gpu is not None:
            return self._iter_gpu()
        return self._iter_host()

    def _view(self, ptr, shape, dtype, lease):
        """A tensor over a device batch's buffer (emulated: host memory); it
        holds the batch (its lease), and so the loader's handle: the
        memory outlives the loader object (not close())."""
        return _tensor(ptr, shape, dtype, lease,
                       None if self._gpu["device"] == _gpu.EMULATE else self.device)

    @staticmethod
    def _host_copy(ptr, n):
        return torch.from_numpy(np.ctypeslib.as_array(
            ctypes.cast(ptr, ctypes.POINTER(ctypes.c_int64)), shape=(n,)).copy())

    def _iter_gpu(self):
        s = self.sampler
        order = s._order()
        epoch = s.epoch
        o = self._gpu
        if self._gl is not None and self._gl_order is not order:
            # a resumed epoch (or the first after it) runs over another
            # order: the device loader is made again (uploading again)
            self.close()
        if self._gl is None:
            opts = _n.GpuUttOpts(o["device"], o["budget"], self._flags | _n.GPU_HOLD,
                                 _n.GPU_OUT_BF16 if o["out_dtype"] == torch.bfloat16
                                 else _n.GPU_OUT_F32, int(self.labels), int(self.targets), 0, 0,
                                 ctypes.pointer(self._norm) if self._norm is not None else None)
            ptr = ctypes.c_void_p()
            diag = _n.Diag()
            rc = _lib.cxs_gpu_utt_loader_create(self.dataset._ptr, order.ptr, ctypes.byref(opts),
                                                epoch, s._start, ctypes.byref(ptr),
                                                ctypes.byref(diag))
            if rc == _n.E_RANGE and b"budget" in diag.message:
                raise IndexError(diag.message.decode("utf-8", "replace").replace(
                    "budget_bytes", "gpu_budget").replace(
                    "give a larger budget, or use the CPU utterance loader",
                    "give a larger gpu_budget, or device=None (batches assembled on the CPU)"))
            if rc:
                _raise(rc, diag, what="GPU utterance loader")
            self._gl = _gpu._Owner(ptr, _lib.cxs_gpu_utt_loader_free, (self.dataset._h, order))
            self._gl_order = order
        else:
            rc = _lib.cxs_gpu_utt_loader_reset(self._gl.ptr, epoch, s._start)
            if rc:
                self._gpu_fail(rc)
        emulated = o["device"] == _gpu.EMULATE
        bp = ctypes.POINTER(_n.GpuUttBatch)()
        D = self.dataset.dim
        while True:
            stream = None if emulated else torch.cuda.current_stream(self.device).cuda_stream
            rc = _lib.cxs_gpu_utt_loader_next(self._gl.ptr, stream, ctypes.byref(bp))
            if rc == -errno.EBUSY:  # every buffer held; batches unreachable may go now
                gc.collect()
                rc = _lib.cxs_gpu_utt_loader_next(self._gl.ptr, stream, ctypes.byref(bp))
            if rc:
                self._gpu_fail(rc)
            if not bp:
                break
            if emulated:  # the host reads the batch: after the device's work on it
                _gpu.emulated_sync(None)
            b = bp.contents
            n, T = b.n, b.tmax
            # the batch is the caller's while any tensor over it exists
            lease = _gpu.Lease(self._gl, _lib.cxs_gpu_utt_loader_release, b.x, stream)
            out = [self._view(b.x, (n, T, D), o["out_dtype"], lease),
                   self._host_copy(b.host_lengths, n)]
            if b.y:
                out.append(self._view(b.y, (n, T), torch.int64, lease))
            if b.targets:
                out += [self._view(b.targets, (n, b.lmax), torch.int64, lease),
                        self._host_copy(b.host_target_lengths, n)]
            del lease
            s._start = b.index + 1
            self.batch_info = {"utterances": np.ctypeslib.as_array(
                ctypes.cast(b.utts, ctypes.POINTER(ctypes.c_uint64)), shape=(n,)).copy(),
                "global": getattr(b, "global"), "index": b.index, "frames": b.frames}
            yield tuple(out)
            del out  # the generator keeps no batch the caller dropped
        s.epoch, s._origin, s._start = epoch + 1, 0, 0

    def _gpu_fail(self, rc):
        from .gpu import _fail
        _fail(rc, _lib.cxs_gpu_utt_loader_error(self._gl.ptr), what="GPU utterance loader")

    def close(self):
        """No more device batches from this loader: its device memory is
        freed now, or, while tensors of batches handed out remain, when the
        last of them goes (they stay valid: close() never frees memory a
        tensor points into).  Without close() the same happens when the
        loader is collected."""
        self._gl, self._gl_order = None, None

    def _iter_host(self):
        s = self.sampler
        order = s._order()
        opts = _n.UttLoaderOpts(self.threads, 0, self._flags, int(self.labels),
                                ctypes.pointer(self._norm) if self._norm is not None else None,
                                0, int(self.targets))
        ptr = ctypes.c_void_p()
        epoch = s.epoch
        diag = _n.Diag()
        rc = _lib.cxs_utt_loader_create_ex(self.dataset._ptr, order.ptr, ctypes.byref(opts),
                                           epoch, s._start, ctypes.byref(ptr), ctypes.byref(diag))
        if rc:
            _raise(rc, diag, what="utterance loader")
        D = self.dataset.dim
        try:
            for b in _batches(_lib.cxs_utt_loader_next_ex, ptr, _n.UttBatch, "utterance loader",
                              _lib.cxs_utt_loader_next_timed):
                n, T = b.n, b.tmax
                x = torch.empty((n, T, D), dtype=torch.float32)
                ctypes.memmove(x.data_ptr(), b.x, n * T * D * 4)
                lengths = torch.empty(n, dtype=torch.int64)
                ctypes.memmove(lengths.data_ptr(), b.lengths, n * 8)
                y = None
                if b.y:
                    y = torch.empty((n, T), dtype=torch.int64)
                    ctypes.memmove(y.data_ptr(), b.y, n * T * 8)
                out = [x, lengths] + ([y] if y is not None else [])
                keep = {id(lengths)}
                if b.targets:
                    L = b.lmax
                    t = torch.empty((n, L), dtype=torch.int64)
                    ctypes.memmove(t.data_ptr(), b.targets, n * L * 8)
                    tl = torch.empty(n, dtype=torch.int64)
                    ctypes.memmove(tl.data_ptr(), b.target_lengths, n * 8)
                    out += [t, tl]
                    keep.add(id(tl))
                _u._follow(s, _lib.cxs_utt_loader_position, ptr, "utterance loader")
                self.batch_info = {"utterances": np.ctypeslib.as_array(
                    ctypes.cast(b.utts, ctypes.POINTER(ctypes.c_uint64)), shape=(n,)).copy(),
                    "global": getattr(b, "global"), "index": b.index, "frames": b.frames}
                if self.device is not None:  # the lengths stay on the CPU (as CTCLoss likes)
                    out = [v if id(v) in keep else v.to(self.device, non_blocking=True)
                           for v in out]
                yield tuple(out)
            _u._follow(s, _lib.cxs_utt_loader_position, ptr, "utterance loader")
        finally:
            _lib.cxs_utt_loader_free(ptr)


class MixedUtterances(tuple):
    """A mixture's padded batch: the tuple UtteranceLoader yields ((x,
    lengths), then y, then targets and target_lengths), with .source (int64
    [B]: which dataset, by its place in the list, each utterance came
    from), .utterances (int64 [B]: its number in that dataset) and .repeat
    (True for the final round's padding, a batch of the epoch's first ones
    again so that every rank has as many; leave it out of an
    evaluation)."""

    def __new__(cls, parts, source, utterances, repeat=False):
        t = super().__new__(cls, parts)
        t.source, t.utterances, t.repeat = source, utterances, repeat
        return t


__all__ += ["MixtureUtteranceLoader", "MixedUtterances"]


class MixtureUtteranceLoader(_MixLoader):
    """Padded batches of whole utterances from several datasets in fixed
    shares (what UtteranceLoader([a, b, ...], frame_budget, ...) returns).
    The shares, quotas, passes, buckets and ranks are
    ctxshard.UtteranceMixture's: weights (one per dataset, or None: the
    natural shares, by utterance count), temperature, epoch_size
    (utterances per epoch, default the sum), frame_budget, buckets,
    max_batch, long_utterances, stratify ("shares": every batch holds the
    shares; "length": pads least), shuffle, seed, drop_last.  Each batch is a
    MixedUtterances: the tuple UtteranceLoader yields (x float32 [B, Tmax,
    D], lengths, then y int64 [B, Tmax] and targets/target_lengths when
    every dataset has them, labels in the first dataset's vocabulary:
    another's are mapped by symbol, vocabularies that differ refused naming
    the symbols), with .source (int64 [B]) saying which dataset each
    utterance came from.

    The datasets must have the same feature width; their stored dtypes may
    differ.  normalize=True normalises each dataset with its own stored
    statistics, a Dataset / its .stats / (mean, var) all with that one set
    (state_dict says which); per_utterance as UtteranceLoader's.  rank and
    world_size from torch.distributed when initialised.  state_dict() is
    (seed, epoch, global_position) with global_position in global batches;
    load_state_dict() resumes there, also on another number of ranks,
    nothing repeated or lost, and set_epoch(e) right after it keeps that
    position (Loader's rule).  batch_info after each batch as
    UtteranceLoader's (utterances, sources, global, index, frames).
    memory= (and blocks=): block order, for data larger than memory, within
    that one page-cache budget for all the datasets (UtteranceMixture's);
    the loader asks the kernel for each dataset's next group of blocks as
    the batches reach it and lets a group go once the batches have passed
    it.  On the CPU only: device= copies each batch (lengths stay on the
    CPU); streaming a URL and the GPU path are not available for
    mixtures."""

    def __init__(self, paths, frame_budget, shuffle=True, seed=0, rank=None, world_size=None,
                 threads=None, drop_last=False, buckets=None, max_batch=None,
                 long_utterances="refuse", normalize=False, per_utterance=False, labels=None,
                 targets=None, weights=None, temperature=None, epoch_size=None,
                 stratify="shares", device=None, memory=None, blocks=None, **unsupported):
        f = "UtteranceLoader"
        _known(f, UtteranceLoader.__init__, unsupported)
        for k, v in unsupported.items():
            if v is not None and v is not False and v != 0:
                raise ValueError(f"{f}: {k}= is not available for a mixture of datasets (a "
                                 "list of paths): the utterance mixture loader serves host "
                                 "batches, shuffled by length bucket or in order")
        self.datasets = _sources(f, paths)
        _same_width(f, self.datasets)
        self.threads = _a.optional_integer(f, "threads", threads, 1, 256)
        self.per_utterance = _a.flag(f, "per_utterance", per_utterance)
        self.device = _device(f, device)
        labels = _a.optional_flag(f, "labels", labels)
        have = all(d.has_frame_labels for d in self.datasets)
        if labels and not have:
            bad = [d.path for d in self.datasets if not d.has_frame_labels]
            raise ValueError(f"{f}: labels=True, but {', '.join(bad)} has no per-frame labels: "
                             "pass labels=False")
        self.labels = have if labels is None else labels
        targets = _a.optional_flag(f, "targets", targets)
        have = all(d.has_label_seqs for d in self.datasets)
        if targets and not have:
            bad = [d.path for d in self.datasets if not d.has_label_seqs]
            raise ValueError(f"{f}: targets=True, but {', '.join(bad)} has no label sequences: "
                             "pass targets=False")
        self.targets = have if targets is None else targets
        self.normalization, self._norm_stats = _mix_normalization(f, self.datasets, normalize)
        rank, world_size = _u._dist_defaults(f, rank, world_size)
        self.rank, self.world_size = rank, world_size
        self._mix_args = dict(frame_budget=frame_budget, weights=weights,
                              temperature=temperature, epoch_size=epoch_size,
                              shuffle=_a.flag(f, "shuffle", shuffle),
                              seed=_a.integer(f, "seed", seed, 0, 2**64 - 1), rank=rank,
                              world_size=world_size, drop_last=_a.flag(f, "drop_last", drop_last),
                              buckets=buckets, max_batch=max_batch,
                              long_utterances=long_utterances, stratify=stratify,
                              memory=memory, blocks=blocks)
        self.sampler = UtteranceMixture(self.datasets, **self._mix_args)
        self._mixes = {0: self.sampler}
        self.seed, self.drop_last = self.sampler.seed, self.sampler.drop_last
        self.epoch, self._start, self._origin = 0, 0, 0
        self.input_size = self.datasets[0].dim
        self.num_classes = self.datasets[0].num_classes
        self.batch_info = None
        ptr = self._create(self.sampler, 0, 0)  # what only the library checks fails now
        _lib.cxs_mix_utt_loader_free(ptr)


    def _mix_now(self):
        m = self._mixes.get(self._origin)
        if m is None:
            if len(self._mixes) > 2:
                self._mixes = {0: self.sampler}
            m = self._mixes[self._origin] = UtteranceMixture(self.datasets, origin=self._origin,
                                                             **self._mix_args)
        return m

    def global_batches(self, epoch=None):
        """The batches of epoch's global order (default: the current one)."""
        e = self.epoch if epoch is None else _a.integer(
            "UtteranceLoader.global_batches", "epoch", epoch, 0, _u.MAX_EPOCH)
        return self.sampler.lengths(e)[0]

    def __len__(self):
        return self._mix_now().lengths(self.epoch)[1] - self._start

    def set_epoch(self, epoch):
        """Serve `epoch` next, kept where the loader stands when it is
        positioned in it (Loader.set_epoch's rule)."""
        _u._set_epoch("UtteranceLoader", self, epoch)

    def _position(self):
        """(epoch, global position) of the next batch, as state_dict()."""
        g = self._origin + self._start * self.world_size
        total = self.global_batches(self.epoch)
        if g >= total or (self.drop_last and total - g < self.world_size):
            return self.epoch + 1, 0
        return self.epoch, g

    def state_dict(self):
        """seed, epoch and global_position (global batches served by all
        ranks together), with what fixes the order: the datasets (paths and
        identities), shares, quotas, epoch_size, frame_budget, buckets,
        max_batch, long_utterances, shuffle, memory and blocks, drop_last,
        the epoch's global batches and the normalisation (none, per-source
        or given)."""
        epoch, g = self._position()
        m = self.sampler
        return {"kind": "utterance-mixture", "seed": self.seed, "epoch": epoch,
                "global_position": g, "unit": "batches",
                "global_batches": self.global_batches(epoch),
                "sources": [d.path for d in self.datasets],
                "identities": [d.identity for d in self.datasets],
                "shares": list(m.shares), "quotas": list(m.quotas),
                "epoch_size": m.epoch_size, "frame_budget": m.frame_budget,
                "buckets": m.buckets, "max_batch": m.max_batch or 0,
                "long_utterances": m.long_utterances, "stratify": m.stratify,
                "shuffle": m.shuffle, "memory": m.memory, "blocks": m.blocks,
                "drop_last": m.drop_last, "normalization": self.normalization,
                "per_utterance": self.per_utterance}

    _FIXED = ("seed", "identities", "quotas", "epoch_size", "frame_budget", "buckets",
              "max_batch", "long_utterances", "stratify", "shuffle", "memory", "blocks",
              "drop_last", "normalization", "per_utterance")

    def load_state_dict(self, state):
        f = "UtteranceLoader.load_state_dict"
        if not isinstance(state, dict) or state.get("kind") != "utterance-mixture":
            raise ValueError(f"{f}: the state is not an utterance mixture's (kind="
                             f"{state.get('kind') if isinstance(state, dict) else state!r})")
        mine = self.state_dict()
        for key in self._FIXED:
            if state.get(key) != mine[key]:
                raise ValueError(f"{f}: the state's {key} ({_a._show(state.get(key))}) is not "
                                 f"this loader's ({_a._show(mine[key])}): it would resume into "
                                 "another order")
        epoch = _a.integer(f, "epoch", state.get("epoch"), 0, _u.MAX_EPOCH)
        total = self.global_batches(epoch)
        if state.get("global_batches") != total:
            raise ValueError(f"{f}: global_batches {state.get('global_batches')!r} is not the "
                             f"{total} batches of epoch {epoch} here: another order")
        g = _a.integer(f, "global_position", state.get("global_position"), 0, total)
        if g >= total or (self.drop_last and total - g < self.world_size):
            epoch, g = epoch + 1, 0  # (on these ranks, what is left of it is cut)
        self.epoch, self._origin, self._start = epoch, g, 0

    def _create(self, mix, epoch, start):
        flags = (_n.GATHER_NORMALIZE if self.normalization != "none" else 0) | \
            (_n.PAD_PER_UTTERANCE if self.per_utterance else 0)
        opts = _n.UttLoaderOpts(self.threads or 0, 0, flags, int(self.labels), None, 0,
                                int(self.targets))
        _mix_norm(opts, self._norm_stats, self.datasets[0].dim)
        ptr, diag = ctypes.c_void_p(), _n.Diag()
        rc = _lib.cxs_mix_utt_loader_create(mix._ptr, ctypes.byref(opts), epoch, start,
                                            ctypes.byref(ptr), ctypes.byref(diag))
        if rc:
            _raise(rc, diag, what="utterance mixture loader")
        return ptr

    @staticmethod
    def _ints(ptr, n, ctype=ctypes.c_int64):
        return torch.from_numpy(np.ctypeslib.as_array(
            ctypes.cast(ptr, ctypes.POINTER(ctype)), (n,)).astype(np.int64))

    def __iter__(self):
        mix = self._mix_now()
        epoch = self.epoch
        ptr = self._create(mix, epoch, self._start)
        D = self.input_size
        try:
            for mb in _batches(_lib.cxs_mix_utt_loader_next, ptr, _n.MixUtts,
                               "utterance mixture loader", _lib.cxs_mix_utt_loader_next_timed):
                b = mb.batch.contents
                n, T = b.n, b.tmax
                x = torch.empty((n, T, D), dtype=torch.float32)
                ctypes.memmove(x.data_ptr(), b.x, n * T * D * 4)
                lengths = self._ints(b.lengths, n)
                out = [x, lengths]
                keep = {id(lengths)}
                if b.y:
                    y = torch.empty((n, T), dtype=torch.int64)
                    ctypes.memmove(y.data_ptr(), b.y, n * T * 8)
                    out.append(y)
                if b.targets:
                    t = torch.empty((n, b.lmax), dtype=torch.int64)
                    ctypes.memmove(t.data_ptr(), b.targets, n * b.lmax * 8)
                    tl = self._ints(b.target_lengths, n)
                    out += [t, tl]
                    keep.add(id(tl))
                src = self._ints(mb.source, n, ctypes.c_uint32)
                utts = self._ints(b.utts, n, ctypes.c_uint64)
                _u._follow(self, _lib.cxs_mix_utt_loader_position, ptr,
                           "utterance mixture loader")
                self.batch_info = {"utterances": utts.numpy().copy(),
                                   "sources": src.numpy().copy(),
                                   "global": getattr(b, "global"), "index": b.index,
                                   "frames": b.frames}
                if self.device is not None:
                    out = [v if id(v) in keep else v.to(self.device, non_blocking=True)
                           for v in out]
                    src = src.to(self.device, non_blocking=True)
                yield MixedUtterances(tuple(out), src, utts, bool(mb.repeat))
            _u._follow(self, _lib.cxs_mix_utt_loader_position, ptr, "utterance mixture loader")
        finally:
            _lib.cxs_mix_utt_loader_free(ptr)
